"""Bash completion, as the build generates it from the tools' own option tables: sourced in bash,
the completion function is called on command lines and its candidates (COMPREPLY, from compgen)
checked: subcommands, options, model names, figure types, operations, HDF5 files by extension,
and `mb TOOL` completing as the tool does."""

import os
import re
import subprocess

import mbtest

COMPLETIONS = os.path.join(os.path.dirname(mbtest.BIN_DIR.rstrip("/")), "share", "bash-completion",
                           "completions")

# Words of the line in COMP_WORDS, the cursor at the last one.
SCRIPT = r"""
source "$1" || exit 1
shift
COMP_WORDS=("$@")
COMP_CWORD=$(($# - 1))
COMP_LINE="$*"
COMP_POINT=${#COMP_LINE}
_mbkit_complete
printf '%s\n' "${COMPREPLY[@]}"
"""


def help_options(tool, *sub):
    """The long options --help lists (the first column, not those its descriptions mention)."""
    text = mbtest.run([mbtest.tool(tool), *sub, "--help"]).out
    names = set()
    for column in re.findall(r"^ {2,}(-\S+)", text, re.M):
        names |= set(re.findall(r"--[a-z][a-z0-9-]*", column))
    return names


class Completion(mbtest.ToolTestCase):
    def complete(self, *words, script="mb"):
        completed = subprocess.run(["bash", "--norc", "--noprofile", "-c", SCRIPT, "bash",
                                    os.path.join(COMPLETIONS, script), *words],
                                   cwd=self.dir, env=self.env, capture_output=True, text=True,
                                   timeout=60)
        self.assertEqual(completed.returncode, 0, completed.stderr)
        self.assertEqual(completed.stderr, "")
        return [line for line in completed.stdout.splitlines() if line]

    def test_a_file_per_command_registering_every_command(self):
        tools = sorted(n for n in os.listdir(mbtest.BIN_DIR) if n.startswith("mb-")) + ["mb"]
        for tool in tools:
            path = os.path.join(COMPLETIONS, tool)
            self.assertTrue(os.path.isfile(path), f"no completion file for {tool}")
        registered = subprocess.run(["bash", "--norc", "-c", 'source "$1" && complete -p', "bash",
                                     os.path.join(COMPLETIONS, "mb-eval")],
                                    capture_output=True, text=True).stdout
        for tool in tools:
            self.assertIn(f"complete -F _mbkit_complete {tool}\n", registered + "\n")

    def test_every_option_of_every_tool_is_offered(self):
        for tool in sorted(n for n in os.listdir(mbtest.BIN_DIR) if n.startswith("mb-")):
            with self.subTest(tool=tool):
                offered = set(self.complete(tool, "--"))
                self.assertLessEqual(help_options(tool), offered)
        offered = set(self.complete("mb-dataset", "fetch", "--"))
        self.assertLessEqual(help_options("mb-dataset", "fetch"), offered)
        self.assertIn("--quiet", offered)  # the tool's own options work after the subcommand

    def test_subcommands_and_fixed_values(self):
        self.assertEqual(self.complete("mb-dataset", ""),
                         ["fetch", "import", "import-trace", "synth", "shard", "info",
                          "verify"])
        self.assertEqual(self.complete("mb-dataset", "fetch", "c"), ["cifar10", "cifar100"])
        self.assertEqual(self.complete("mb-dataset", "import-trace", ""), ["pai", "csv"])
        self.assertEqual(self.complete("mb-dataset", "-q", "synth", ""), ["toy", "images"])
        self.assertEqual(self.complete("mb-dataset", "shard", "x.h5", "--by", "s"), ["strided"])
        models = self.complete("mb-train-fmb", "--data", "f.h5", "--model", "")
        for model in ("mlp", "mnist-cnn", "toy-conv", "resnet20", "resnet110", "resnet18",
                      "alexnet", "vgg16", "inception3", "densenet40", "densenet100"):
            self.assertIn(model, models)
        self.assertEqual(self.complete("mb-train-amb", "--optimizer", ""),
                         ["sgd", "momentum", "rmsprop", "adam"])
        self.assertEqual(self.complete("mb-train-fmb", "--comm", ""), ["ps", "allreduce"])
        types = mbtest.run([mbtest.tool("mb-plot"), "--list-types"]).out
        expected = [line.split()[0] for line in types.splitlines()
                    if line.strip() and not line.startswith(("#", " "))]
        self.assertEqual(self.complete("mb-plot", "-t", ""), expected)
        ops = self.complete("mb-bench-bandwidth", "--op", "")
        for op in ("allreduce", "reduce-bcast", "reduce-scatter", "exchange", "all"):
            self.assertIn(op, ops)
        self.assertEqual(self.complete("mb-train-fmb", "--lr", ""), [])  # a number: nothing
        # Comma-separated lists: the last item completes, the others stay.
        self.assertEqual(self.complete("mb-bench-bandwidth", "--op", "allreduce,ex"),
                         ["allreduce,exchange"])
        self.assertIn("loss-vs-step,accuracy-vs-step",
                      self.complete("mb-plot", "--subset", "loss-vs-step,acc"))
        self.assertNotIn("panel", self.complete("mb-plot", "--subset", ""))
        # --type=pa: bash breaks the word at the =
        self.assertEqual(self.complete("mb-plot", "--type", "=", "pa"),
                         ["panel", "panel-hist", "panel-all", "partitions"])
        self.assertEqual(self.complete("mb-plot", "--type", "=", "panel", "--log"), ["--logy"])

    def test_hdf5_files_by_extension(self):
        for name in ("run.h5", "data.h5", "notes.txt", "fig.png"):
            open(self.path(name), "w").close()
        os.mkdir(self.path("runs"))
        self.assertEqual(sorted(self.complete("mb-train-fmb", "--data", "")),
                         ["data.h5", "run.h5", "runs"])
        self.assertEqual(sorted(self.complete("mb-eval", "")), ["data.h5", "run.h5", "runs"])
        self.assertEqual(sorted(self.complete("mb-plot", "run.h5", "")),
                         ["data.h5", "run.h5", "runs"])  # logs...: every word after
        self.assertEqual(sorted(self.complete("mb-plot", "run.h5", "-o", "")), ["fig.png", "runs"])
        self.assertEqual(sorted(self.complete("mb-train-fmb", "--resume", "")),
                         ["auto", "data.h5", "run.h5", "runs"])
        # A flag: completed as an option, no value after it.
        for tool in ("mb-train-fmb", "mb-train-amb", "mb-train-dbsl"):
            self.assertEqual(self.complete(tool, "--resume-a"), ["--resume-anyway"])
        self.assertEqual(self.complete("mb-dataset", "info", "d"), ["data.h5"])

    def test_mb_completes_tools_then_as_the_tool(self):
        tools = [n[3:] for n in os.listdir(mbtest.BIN_DIR) if n.startswith("mb-")]
        self.assertEqual(sorted(self.complete("mb", "")), sorted(tools + ["help"]))
        self.assertEqual(self.complete("mb", "train-f"), ["train-fmb"])
        self.assertIn("--version", self.complete("mb", "--"))
        self.assertEqual(self.complete("mb", "dataset", "fetch", "c"), ["cifar10", "cifar100"])
        self.assertEqual(self.complete("mb", "train-fmb", "--optim"), ["--optimizer"])
        self.assertEqual(self.complete("mb", "help", "train-d"), ["train-dbsl"])
        self.assertEqual(sorted(self.complete("mb", "train-amb", "--model", "resnet5")),
                         ["resnet50", "resnet56"])


if __name__ == "__main__":
    mbtest.main()
