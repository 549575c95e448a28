"""Makefile.examples: `help` lists every target, a dry run (make -n) of each shows the commands it
would run and runs none, the variables choose launcher, ranks, model and data, and targets are
files, so an up-to-date result is not made again and a newer input remakes what follows it."""

import os
import re
import time

import mbtest

MAKEFILE = os.path.join(mbtest.SOURCE_DIR, "Makefile.examples")


def phony_targets():
    with open(MAKEFILE) as f:
        text = f.read().replace("\\\n", " ")
    return re.search(r"^\.PHONY:(.*)$", text, re.M).group(1).split()


class Examples(mbtest.ToolTestCase):
    def make(self, *args):
        return mbtest.run(["make", "-f", MAKEFILE, f"BIN={mbtest.BIN_DIR}", f"OUT={self.out}",
                           *args], cwd=self.dir, env=self.env, timeout=60)

    def setUp(self):
        super().setUp()
        self.out = self.path("out")

    def test_help_lists_every_target(self):
        result = self.make("help")
        self.assertSucceeded(result)
        for target in phony_targets():
            if target != "help":
                self.assertRegex(result.out, rf"(?m)^{re.escape(target)}\b|^\S.*\b{target}\b",
                                 target)

    def test_dry_run_of_every_target_runs_nothing(self):
        tool = lambda name: os.path.join(mbtest.BIN_DIR, name)  # noqa: E731
        expected = {
            "fmb": ["-n 4 " + tool("mb-train-fmb"), "--comm allreduce", tool("mb-eval")],
            "amb": ["-n 4 " + tool("mb-train-amb"), "--time-limit auto"],
            "plots": ["--type panel", "--type accuracy-vs-time"],
            "partitions": [tool("mb-bench-partitions"), "--type partitions"],
            "bandwidth": ["for n in 2 4 8", tool("mb-bench-bandwidth"), "--append",
                          "--type bandwidth-vs-workers", tool("mb-report")],
            "scaling": ["-n 1 " + tool("mb-train-fmb"), "-n 8 " + tool("mb-train-fmb"),
                        "--type scaling", tool("mb-report"), "--scaling"],
            "fashion-mnist": ["fetch fashion-mnist"],
            "cifar10": ["fetch cifar10 "],
            "cifar100": ["fetch cifar100 "],
            "toy": ["synth toy"],
            "shards": ["shard"],
            "quickstart": [tool("mb-train-amb") + " --emulate 10", "--target 0.8"],
            "dbsl-small": [tool("mb-train-dbsl"), "--small-workers 3"],
            "dbsl-paper": ["--model resnet18"],
            "clean": ["rm -rf " + self.out],
        }
        for target in phony_targets():
            if target == "help":
                continue
            with self.subTest(target=target):
                result = self.make("-n", target)
                self.assertSucceeded(result)
                self.assertTrue(result.out.strip(), f"make -n {target} shows nothing")
                for text in expected.get(target, []):
                    self.assertIn(text, result.out)
                self.assertFalse(os.path.exists(self.out), f"make -n {target} made {self.out}")

    def test_variables_choose_launcher_ranks_model_and_data(self):
        open(self.path("my.h5"), "w").close()
        result = self.make("-n", "fmb", "MPIRUN=srun --mpi=pmix", "RANKS=2", "MODEL=mnist-cnn",
                           "DATA=my.h5", "RANK_THREADS=3")
        self.assertSucceeded(result)
        train = [line for line in result.out.splitlines() if "mb-train-fmb" in line]
        self.assertEqual(len(train), 1, result.out)
        self.assertTrue(train[0].startswith("srun --mpi=pmix -n 2 "), train[0])
        for text in ("--model mnist-cnn", "--data my.h5", "--threads 3"):
            self.assertIn(text, result.out)
        scaling = self.make("-n", "scaling", "SCALING_WORKERS=1 3", "DATA=my.h5").out
        self.assertEqual(re.findall(r"-n (\d+) \S*mb-train-fmb", scaling), ["1", "3"])

    def test_scale_workers_runs_every_seed_and_draws_them_together(self):
        result = self.make("-n", "scale-workers", "SCALE_WORKERS=10 30", "SCALE_SEEDS=1 4")
        self.assertSucceeded(result)
        runs = re.findall(r"mb-train-(fmb|amb) .*--seed (\d+) .*--induce (\S+) --emulate (\d+) "
                          r"--log \S*/(\S+)\.h5", result.out)
        self.assertEqual(len(runs), 2 * 2 * 2 * 2, result.out)
        for method, seed, profile, workers, name in runs:
            self.assertEqual(name, f"{method}-{profile.replace(':', '')}-{workers}-s{seed}")
        self.assertEqual({r[1] for r in runs}, {"1", "4"})
        # The figure of every run, so that the seeds of one setting are one point; a table
        # per setting, each with its runs of every seed.
        plot = [line for line in result.out.splitlines() if "--type workers" in line]
        self.assertEqual(len(plot), 1)
        self.assertEqual(len(re.findall(r"\.h5", plot[0])), 16)
        for setting in ("10-niagara", "10-exp1", "30-niagara", "30-exp1"):
            report = [line for line in result.out.splitlines()
                      if "mb-report" in line and f"{setting}.txt.tmp" in line]
            self.assertEqual(len(report), 1, setting)
            workers, profile = setting.split("-")
            self.assertEqual(re.findall(r"/((?:fmb|amb)-\S+)\.h5", report[0]),
                             [f"{m}-{profile}-{workers}-s{seed}" for seed in (1, 4)
                              for m in ("fmb", "amb")])

    def test_quickstart_prints_its_table_again_when_up_to_date(self):
        # Every file of the quickstart made, each newer than what it is made from: make runs
        # no tool, yet prints the table, which is what the user came for.
        quick = os.path.join(self.out, "quick")
        os.makedirs(quick)
        table = "# run  log  tool\n   1  fmb.h5  mb-train-fmb\n# seed 1: a table from before\n"
        files = [os.path.join(self.out, "fmnist.h5")] + [
            os.path.join(quick, name) for name in (
                "fmb.h5", "fmb-checkpoint.h5", "amb.h5", "amb-checkpoint.h5", "fmb-eval.h5",
                "amb-eval.h5", "accuracy-vs-time.png", "time-to-accuracy.txt")]
        for i, path in enumerate(files):
            with open(path, "w") as f:
                f.write(table if path.endswith(".txt") else "")
            os.utime(path, (time.time() - 100 + i, time.time() - 100 + i))
        result = self.make("quickstart")
        self.assertSucceeded(result)
        self.assertEqual(result.out, table)
        self.assertNotIn("Nothing to be done", result.out + result.err)

    def test_only_what_changed_is_made_again(self):
        data = self.path("data.h5")
        os.makedirs(os.path.join(self.out, "partitions"))
        results = [os.path.join(self.out, "partitions", n) for n in ("partitions.h5", "partitions.png")]
        for i, path in enumerate([data] + results):
            open(path, "w").close()
            os.utime(path, (time.time() - 100 + i, time.time() - 100 + i))
        self.assertIn("Nothing to be done", self.make("-n", "partitions", f"DATA={data}").out)
        os.utime(results[0])  # a newer timing file: only the figure again
        redo = self.make("-n", "partitions", f"DATA={data}").out
        self.assertIn("--type partitions", redo)
        self.assertNotIn("mb-bench-partitions", redo)


if __name__ == "__main__":
    mbtest.main()
