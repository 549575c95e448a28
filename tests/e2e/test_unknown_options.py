"""An unknown or misspelt option is the first thing every tool reports: one line naming it, the
nearest known options ("did you mean --epochs?"), exit status 2, whatever else is wrong or
missing on the command line (a required option, the option's value left as an argument)."""

import mbtest

# Every command a user can run, as (tool, subcommand words).
COMMANDS = [
    ("mb-dataset", []),
    ("mb-dataset", ["fetch"]),
    ("mb-dataset", ["import"]),
    ("mb-dataset", ["synth"]),
    ("mb-dataset", ["shard"]),
    ("mb-dataset", ["info"]),
    ("mb-dataset", ["verify"]),
    ("mb-train-fmb", []),
    ("mb-train-amb", []),
    ("mb-train-dbsl", []),
    ("mb-eval", []),
    ("mb-plot", []),
    ("mb-report", []),
    ("mb-bench-partitions", []),
    ("mb-bench-bandwidth", []),
    ("mb", []),
]


class UnknownOptions(mbtest.ToolTestCase):
    def run_command(self, tool, words, *args):
        return mbtest.run([mbtest.tool(tool), *words, *args], cwd=self.dir, env=self.env)

    def assertUnknownOption(self, result, text):
        """Status 2 and one error line, the unknown option's, with `text` in it."""
        self.assertEqual(result.rc, 2, msg=repr(result))
        lines = [line for line in result.err.splitlines() if line.strip()]
        self.assertEqual(len(lines), 1, msg=f"expected one error line\n{result!r}")
        self.assertIn("error: unknown option", lines[0], msg=repr(result))
        self.assertIn(text, lines[0], msg=repr(result))

    def test_every_command_names_an_unknown_option_first(self):
        # Alone, with its value: what the command needs is missing too, and "3" is left over.
        for tool, words in COMMANDS:
            with self.subTest(command=" ".join([tool, *words])):
                self.assertUnknownOption(self.run_command(tool, words, "--epoch", "3"),
                                         "'--epoch'")
                self.assertUnknownOption(self.run_command(tool, words, "--bogus-flag=1"),
                                         "'--bogus-flag'")

    def test_every_command_suggests_the_nearest_option(self):
        for tool, words in COMMANDS:
            with self.subTest(command=" ".join([tool, *words])):
                self.assertUnknownOption(self.run_command(tool, words, "--verbos"),
                                         "did you mean --verbose?")

    def test_subcommand_options_are_suggested(self):
        self.assertUnknownOption(self.run_command("mb-dataset", ["import"], "idx", "--form", "x"),
                                 "'--form' (did you mean --from?)")
        self.assertUnknownOption(self.run_command("mb-dataset", ["shard"], "--compresion", "4"),
                                 "did you mean --compression?")

    def test_train_epoch_for_epochs(self):
        # The newcomer's first hour: without --data CLI11 said "--data is required", with it
        # "The following arguments were not expected: 3 --epoch".
        for tool in ["mb-train-fmb", "mb-train-amb", "mb-train-dbsl"]:
            with self.subTest(tool=tool):
                self.assertUnknownOption(self.run_command(tool, [], "--epoch", "3"),
                                         "'--epoch' (did you mean --epochs?)")
                self.assertUnknownOption(
                    self.run_command(tool, [], "--data", "d.h5", "--epoch", "3"),
                    "'--epoch' (did you mean --epochs?)")
                self.assertUnknownOption(self.run_command(tool, [], "--batchsize", "8"),
                                         "did you mean --batch-size?")

    def test_the_front_and_the_tool_it_runs(self):
        self.assertUnknownOption(self.run_command("mb", [], "--verbos", "train-fmb"),
                                 "did you mean --verbose?")
        result = self.run_command("mb", [], "train-fmb", "--epoch", "3")
        self.assertUnknownOption(result, "did you mean --epochs?")
        self.assertIn("mb-train-fmb: error:", result.err)

    def test_known_options_and_values_are_not_taken_for_unknown_ones(self):
        # A negative number or "-" is a value, not an option; a misspelt subcommand stays an
        # unknown command.
        result = self.run_command("mb-dataset", ["synth"], "toy", "--seed", "-1", "-o", "t.h5")
        self.assertNotIn("unknown option", result.err, msg=repr(result))
        result = self.run_command("mb-dataset", ["fecth"])
        self.assertEqual(result.rc, 2, msg=repr(result))
        self.assertIn("unknown command 'fecth'", result.err)


if __name__ == "__main__":
    mbtest.main()
