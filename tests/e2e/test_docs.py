"""The documentation describes what the tools do now: every tool (mb included) has a man page
that renders cleanly (groff -ww) and mentions every subcommand and option its --help lists, every
option a page documents is in the tool's --help, and the README's test command is the one CI
runs."""

import functools
import os
import re
import shutil
import subprocess
import unittest

import mbtest


def render(page):
    # One very long line and no hyphenation, so that options are never split.
    completed = subprocess.run(["groff", "-t", "-man", "-Tutf8", "-ww", "-rLL=3000n", "-rHY=0", page],
                               capture_output=True, text=True, env=mbtest.clean_env())
    return completed.returncode, completed.stdout, completed.stderr


def plain(text):
    """groff output without overstriking or hyphenation at line ends."""
    text = re.sub(r".\x08", "", text)
    text = re.sub(r"\x1b\[[0-9;]*m", "", text)
    text = text.replace("\u2010\n", "").replace("-\n", "-")
    return " ".join(text.replace("\u2010", "-").replace("\u2212", "-").split())


# Names in the library's strings that are not file formats.
NOT_FORMATS = {"mbkit-cache", "mbkit-formats", "mbkit-core", "mbkit-cuda"}


def tools_built():
    """mb and every mb-* tool of the build."""
    return sorted(n for n in os.listdir(mbtest.BIN_DIR) if n == "mb" or n.startswith("mb-"))


@functools.lru_cache(maxsize=None)  # several tests read them: run each tool's --help once
def help_texts(tool):
    """The tool's --help, its subcommands, and the --help of each."""
    top = mbtest.run([mbtest.tool(tool), "--help"]).out
    subcommands = re.findall(r"^  ([a-z][a-z-]*)\s{2,}", top.split("Subcommands:")[-1],
                             re.M) if "Subcommands:" in top else []
    return top, subcommands, [top] + [mbtest.run([mbtest.tool(tool), s, "--help"]).out
                                      for s in subcommands]


# CLI11 starts an option's description in this column: a word before it is the option's value.
HELP_DESCRIPTION_COLUMN = 30


def help_value_names(help_texts_):
    """Option -> the value names its --help lines show ("" for a flag), over the tool's and its
    subcommands' --help: `-o,--output FILE`, `--type TYPE=panel` (a default after "="),
    `--hidden INT=[256] ...`."""
    values = {}
    for help_text in help_texts_:
        for indent, names, rest in re.findall(r"^( {2,4})(-\S+)(.*)$", help_text, re.M):
            value = ""
            word = re.match(r" (\S+)", rest)
            # The description follows two spaces or a wrap; a long flag's, one space past
            # the column (-s,--smooth{false} exponential: ...).
            column = len(indent) + len(names) + 1
            if word and "{" not in names and (column < HELP_DESCRIPTION_COLUMN
                                              or rest == word.group(0)):
                value = word.group(1)
            # A default follows "=" (TYPE=panel, INT=[256]); RANK=FACTOR,... is one name.
            default = re.fullmatch(r"(.+?)=(\[[^\]]*\]|[^A-Z\[\]=][^\[\]=]*)?", value)
            if default:
                value = default.group(1)
            for name in re.sub(r"\{[^}]*\}", "", names).split(","):
                values.setdefault(name, set()).add(value)
    return values


def same_value_name(documented, helped):
    """Whether a man page's value name is --help's: the same word, optionally with the file's
    extension (FILE.h5 for FILE) or marked as a list or as optional (TYPE,... and [LIST]); or one
    of the literal choices --help lists (`--comm ps` for ps|allreduce, an item about that mode)."""
    optional = re.fullmatch(r"\[([^\[\]]*)\]", documented)
    if optional:
        documented = optional.group(1)
    helped = re.sub(r",\.\.\.$", "", helped)
    if documented == helped:
        return True
    if helped and re.fullmatch(re.escape(helped) + r"(\.[a-z0-9]+)*(,\.\.\.)?", documented):
        return True
    choices = re.fullmatch(r"[a-z0-9]+(\|[a-z0-9]+)+", helped)
    return bool(choices) and documented in helped.split("|")


def man_tag_values(source):
    """(line, option, value name) of every option in the items' tags (the line after .TP) of a
    man page's source; a name followed by a comma is an alias of the next and shows no value."""
    found = []
    lines = source.splitlines()
    for i, line in enumerate(lines[:-1]):
        if line != ".TP" or not lines[i + 1].startswith("."):
            continue
        tag = re.sub(r"^\.\w+\s*", "", lines[i + 1])
        # Font changes and spacing escapes, also doubled (read again as a macro's argument).
        tag = re.sub(r"\\{1,2}(f[BIRP]|[,/&])", "", tag).replace("\\-", "-").replace('"', " ")
        words = re.sub(r"\s+,", ",", tag).split()
        for k, word in enumerate(words):
            if re.fullmatch(r"--?[a-z][a-z0-9-]*", word):
                value = words[k + 1].rstrip(",") if k + 1 < len(words) else ""
                found.append((i + 2, word, "" if value.startswith("-") else value))
    return found


def man_synopsis_values(rendered):
    """(option, value name) of each option shown with a value in a rendered page's SYNOPSIS
    ([--type TYPE], -o FILE, --op OP[,OP...])."""
    synopsis = rendered.split("SYNOPSIS", 1)[-1].split("DESCRIPTION", 1)[0]
    synopsis = re.sub(r"mpirun -n \S+ ", "", synopsis)  # mpirun's -n, not the tool's
    return re.findall(r"(?<![\w-])(--?[a-z][a-z0-9-]*) ([^\s\[\]()|-][^\s\[\]()]*)", synopsis)


class Documentation(unittest.TestCase):
    def setUp(self):
        self.man = os.path.join(mbtest.SOURCE_DIR, "man")
        self.assertTrue(shutil.which("groff"), "groff (groff-base) is required")

    def test_every_man_page_renders_without_warnings(self):
        pages = [p for p in os.listdir(self.man) if re.search(r"\.[157]$", p)]
        self.assertIn("mbkit-formats.5", pages)
        self.assertIn("mbkit.7", pages)
        for page in pages:
            with self.subTest(page=page):
                rc, _, err = render(os.path.join(self.man, page))
                self.assertEqual(rc, 0, err)
                self.assertEqual(err, "", f"groff warnings for {page}:\n{err}")
                # What CI runs: every warning on, no output.
                checked = subprocess.run(["groff", "-t", "-man", "-ww", "-z",
                                          os.path.join(self.man, page)],
                                         capture_output=True, text=True, env=mbtest.clean_env())
                self.assertEqual((checked.returncode, checked.stderr), (0, ""), page)

    def test_every_tool_option_is_documented(self):
        tools = tools_built()
        self.assertIn("mb-dataset", tools)
        self.assertIn("mb", tools)
        overview = plain(render(os.path.join(self.man, "mbkit.7"))[1])
        for tool in tools:
            with self.subTest(tool=tool):
                page = os.path.join(self.man, f"{tool}.1")
                self.assertTrue(os.path.isfile(page), f"{tool} has no man page")
                text = plain(render(page)[1])
                # A trainer's page may send the reader to mb-train-fmb(1) for the shared options.
                if "every option of mb-train-fmb" in " ".join(text.split()):
                    text += plain(render(os.path.join(self.man, "mb-train-fmb.1"))[1])
                self.assertIn(tool, overview, f"mbkit(7) does not list {tool}")
                top, subcommands, helps = help_texts(tool)
                for sub in subcommands:
                    self.assertIn(f"{tool} {sub}", text.replace("mb-dataset  ", "mb-dataset "),
                                  f"man page of {tool} lacks subcommand {sub}")
                for help_text in helps:
                    for option in set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]+)", help_text)):
                        if option == "--help":
                            continue
                        self.assertIn(option, text, f"{tool}(1) does not document {option}")

    def test_every_documented_option_is_in_the_help(self):
        """The other way round: an option a page documents (the tag of an item, .TP) that the
        tool's --help does not list is gone or misspelt."""
        for tool in tools_built():
            with self.subTest(tool=tool):
                with open(os.path.join(self.man, f"{tool}.1")) as f:
                    source = f.read().splitlines()
                tags = [source[i + 1] for i, line in enumerate(source[:-1]) if line == ".TP"]
                documented = set()
                for tag in tags:
                    documented |= set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)",
                                                 tag.replace("\\-", "-")))
                self.assertTrue(documented, f"{tool}(1) documents no option")
                # The options' column of --help, not the options its descriptions mention.
                listed = set()
                for help_text in help_texts(tool)[2]:
                    for column in re.findall(r"^ {2,}(-\S+)", help_text, re.M):
                        listed |= set(re.findall(r"--[a-z][a-z0-9-]*", column))
                for option in sorted(documented):
                    self.assertIn(option, listed,
                                  f"{tool}(1) documents {option}, which --help does not list")

    def test_every_option_names_what_it_takes(self):
        """--help shows a word for each option's value (FILE, NAME, auto|N), not CLI11's name
        of the C++ type: TEXT says nothing, and a validator's description appended to the
        type (INT:INT) is noise."""
        for tool in tools_built():
            with self.subTest(tool=tool):
                for help_text in help_texts(tool)[2]:
                    # An option's or positional's line (indented 2, or 4 in an option group;
                    # a wrapped description is indented 30): its names, then its value's type.
                    for line in re.findall(r"^ {2,4}([-a-z].*)$", help_text, re.M):
                        words = line.split()
                        value = words[1] if len(words) > 1 else ""
                        self.assertNotRegex(value, r"^TEXT\b", f"{tool} --help: {line}")
                        self.assertNotRegex(value, r"^(U?INT|FLOAT):", f"{tool} --help: {line}")

    def test_every_option_takes_the_value_named_in_the_help(self):
        """A man page names an option's value as --help does (`--compress ENCODING`, not C), in
        its items' tags and in its SYNOPSIS, so that a reader goes from one to the other."""
        for tool in tools_built():
            with self.subTest(tool=tool):
                values = help_value_names(help_texts(tool)[2])
                page = os.path.join(self.man, f"{tool}.1")
                with open(page) as f:
                    tags = man_tag_values(f.read())
                documented = [(f"{tool}.1:{line}", option, value) for line, option, value in tags]
                # A flag there may stand before a positional (--scaling RUN.h5).
                documented += [(f"{tool}(1) SYNOPSIS", option, value)
                               for option, value in man_synopsis_values(plain(render(page)[1]))
                               if values.get(option, {""}) != {""}]
                for where, option, value in documented:
                    if option not in values:
                        continue  # not an option of this tool (mpirun's -n), or checked above
                    helped = sorted(v or "(no value)" for v in values[option])
                    self.assertTrue(any(same_value_name(value, v) for v in values[option]),
                                    f"{where}: {option} {value or '(no value)'}, but --help shows "
                                    f"{' or '.join(helped)}")

    def test_every_file_format_is_documented_with_its_version(self):
        """Each format name the library writes or checks ("mbkit-log"...) has its section in
        mbkit-formats(5), with the version the same source file declares."""
        with open(os.path.join(self.man, "mbkit-formats.5")) as f:
            page = f.read().replace("\\(dq", '"')
        documented = dict(re.findall(r'^\.SH .*\(format "(mbkit-[a-z-]+)", version (\d+)\)', page,
                                     re.M))
        found = {}
        for root, _, files in os.walk(os.path.join(mbtest.SOURCE_DIR, "libcore")):
            for name in files:
                with open(os.path.join(root, name)) as f:
                    source = f.read()
                versions = re.findall(r"FormatVersion = (\d+);", source)
                for fmt in set(re.findall(r'"(mbkit-[a-z-]+)"', source)) - NOT_FORMATS:
                    if len(versions) == 1 or fmt not in found:
                        found[fmt] = versions[0] if len(versions) == 1 else None
        self.assertIn("mbkit-log", found)
        for fmt, version in sorted(found.items()):
            self.assertIn(fmt, documented, f"mbkit-formats(5) has no section on {fmt}")
            if version is not None:
                self.assertEqual(documented[fmt], version, fmt)

    def test_readme_test_command_is_what_ci_runs(self):
        with open(os.path.join(mbtest.SOURCE_DIR, "README.md")) as f:
            readme = f.read()
        setup = readme.split("## Set up", 1)[1].split("\n## ", 1)[0]
        blocks = re.findall(r"```sh\n(.*?)```", setup, re.S)
        self.assertEqual(len(blocks), 2, "README's set-up section must hold exactly two commands")
        self.assertIn("<!-- test-command -->\n```sh\n" + blocks[1], setup)
        self.assertIn("make -f Makefile.examples quickstart", blocks[0])
        with open(os.path.join(mbtest.SOURCE_DIR, ".ci", "run")) as f:
            self.assertIn("<!-- test-command -->", f.read())


if __name__ == "__main__":
    mbtest.main()
