"""mb, the front: `mb TOOL ARGS` runs mb-TOOL from mb's own directory with the arguments as given
and the tool's exit status, `mb` lists the tools with their man pages' summaries, `mb help TOOL`
opens the page, and an unknown tool is one error line with exit status 2."""

import os
import re
import shutil
import stat

import mbtest


def man_summary(page):
    with open(os.path.join(mbtest.SOURCE_DIR, "man", page)) as f:
        lines = f.read().splitlines()
    name = lines[lines.index(".SH NAME") + 1]
    return name.split(" \\- ", 1)[1].replace("\\-", "-")


class Front(mbtest.ToolTestCase):
    def mb(self, *args, mb=None):
        return mbtest.run([mb or mbtest.tool("mb"), *args], cwd=self.dir, env=self.env)

    def test_alone_lists_every_tool_with_its_man_page_summary(self):
        result = self.mb()
        self.assertSucceeded(result)
        listed = dict(re.findall(r"^  (\S+) +(.+)$", result.out, re.M))
        tools = sorted(n[3:] for n in os.listdir(mbtest.BIN_DIR) if n.startswith("mb-"))
        self.assertEqual(sorted(listed), tools)
        for name in tools:
            self.assertEqual(listed[name], man_summary(f"mb-{name}.1"), name)

    def test_runs_the_tool_beside_it_with_the_arguments_as_given(self):
        self.assertSucceeded(self.mb("dataset", "synth", "toy", "--train", "50", "--test", "10",
                                     "-o", "toy.h5"))
        via_front = self.mb("dataset", "info", "toy.h5", "--json")
        direct = mbtest.run([mbtest.tool("mb-dataset"), "info", "toy.h5", "--json"], cwd=self.dir,
                            env=self.env)
        self.assertSucceeded(via_front)
        self.assertEqual(via_front.out, direct.out)
        self.assertIn('"train"', via_front.out)
        # --help after the tool is the tool's, and its errors and exit status come through.
        self.assertIn("mb-dataset", self.mb("dataset", "--help").out)
        missing = self.mb("dataset", "info", "missing.h5")
        self.assertFailsWith(missing, 3, "missing.h5")

    def test_site_tools_beside_mb_run_too_and_symlinks_are_followed(self):
        bin_dir = self.path("bin")
        os.mkdir(bin_dir)
        shutil.copy(mbtest.tool("mb"), bin_dir)
        script = os.path.join(bin_dir, "mb-hello")
        with open(script, "w") as f:
            f.write('#!/bin/sh\nfor a in "$@"; do echo "[$a]"; done\nexit 7\n')
        os.chmod(script, stat.S_IRWXU)
        link = self.path("mb-link")
        os.symlink(os.path.join(bin_dir, "mb"), link)
        result = self.mb("hello", "a b", "--help", mb=link)
        self.assertEqual(result.rc, 7, repr(result))
        self.assertEqual(result.out, "[a b]\n[--help]\n")
        listing = self.mb(mb=link).out
        self.assertRegex(listing, r"(?m)^  hello +\(not an mbkit tool")
        self.assertNotIn("dataset", listing)

    def test_unknown_tool_or_topic_is_a_usage_error(self):
        result = self.mb("nosuch", "x")
        self.assertFailsWith(result, 2, "unknown tool 'nosuch'")
        self.assertIn("dataset", result.err)
        self.assertFailsWith(self.mb("help", "nosuch"), 2, "no manual for 'nosuch'")
        self.assertFailsWith(self.mb("../mb-dataset"), 2, "unknown tool")

    def test_version_and_help(self):
        version = self.mb("--version")
        self.assertSucceeded(version)
        self.assertTrue(version.out.startswith("mb (mbkit) "), version.out)
        self.assertIn("mb help", self.mb("--help").out)

    def test_help_opens_the_tools_man_page(self):
        if not shutil.which("man"):
            self.skipTest("man is not installed")
        self.env.update({"MANPAGER": "cat", "PAGER": "cat", "MANWIDTH": "100"})
        for topic, text in (("dataset", "inspect mbkit dataset files"), ("mb", "front of mbkit"),
                            ("formats", "mbkit-formats"), ("train-dbsl", "dual batch size")):
            result = self.mb("help", topic)
            self.assertSucceeded(result)
            self.assertIn(text, " ".join(result.out.replace("\u2010", "-").split()), topic)


if __name__ == "__main__":
    mbtest.main()
