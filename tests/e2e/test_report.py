"""mb-report end to end on real logs (mb-train-fmb and mb-train-amb on the toy problem, two
seeds each, and a log without evaluations): the table, --json read by Python's json and --csv
by its csv module agree with what h5py reads from the logs (time to target, final and best
accuracy, steps, samples, the ratios by seed and their mean); -o writes the file only when
complete; bad input is one line and exit status 3, a bad command line status 2."""

import csv
import io
import json
import os
import shutil
import statistics
import subprocess
import tempfile

import h5py

import mbtest


def read_log(path):
    with h5py.File(path, "r", swmr=True) as log:
        return {
            "tool": str(mbtest.text_attrs(log)["tool"]),
            "seed": int(mbtest.text_attrs(log)["seed"]),
            "clock": str(mbtest.text_attrs(log)["clock"]),
            "steps": len(log["steps/step"]),
            "samples": float(log["steps/samples"][...].sum()),
            "time": float(log["steps/time"][-1]),
            "eval_time": log["eval/time"][...],
            "eval_step": log["eval/step"][...],
            "accuracy": log["eval/accuracy"][...],
        }


def time_to(run, target):
    for time, accuracy in zip(run["eval_time"], run["accuracy"]):
        if accuracy >= target:
            return float(time)
    return None


class Report(mbtest.ToolTestCase):
    @classmethod
    def setUpClass(cls):
        cls.logs = tempfile.mkdtemp(prefix="mbkit-e2e-report-")
        env = mbtest.clean_env({"TMPDIR": cls.logs})

        def run(*args):
            result = mbtest.run([str(a) for a in args], cwd=cls.logs, env=env, timeout=300)
            assert result.rc == 0, repr(result)

        cls.toy = os.path.join(cls.logs, "toy.h5")
        run(mbtest.tool("mb-dataset"), "synth", "toy", "--learnable", "--train", "768", "--test",
            "200", "-o", cls.toy)
        common = ["--data", cls.toy, "--model", "mlp", "--hidden", "16", "--threads", "1", "-q",
                  "--optimizer", "momentum", "--lr", "0.05", "--steps", "40", "--eval-every", "4"]
        cls.names = []
        for seed in (1, 2):
            for tool, extra in (("mb-train-fmb", ["--batch-size", "16"]),
                                ("mb-train-amb", ["--batch-size", "32", "--partitions", "4",
                                                  "--time-limit", "10"])):
                name = f"{tool[-3:]}-s{seed}.h5"
                run(mbtest.tool(tool), *common, *extra, "--seed", seed, "--log",
                    os.path.join(cls.logs, name))
                cls.names.append(name)
        cls.paths = [os.path.join(cls.logs, name) for name in cls.names]
        cls.runs = [read_log(path) for path in cls.paths]
        # A target every run reaches: the lowest of the runs' best accuracies.
        cls.target = float(min(run["accuracy"].max() for run in cls.runs))
        # A log without evaluations (a run stopped before its first one): every trainer
        # evaluates at its end, so the rows of /eval of a copy are cut.
        cls.no_eval = os.path.join(cls.logs, "no-eval.h5")
        shutil.copyfile(cls.paths[0], cls.no_eval)
        with h5py.File(cls.no_eval, "r+", libver="latest") as log:
            for column in log["eval"].values():
                column.resize((0,))

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.logs, ignore_errors=True)

    def report(self, *args):
        return mbtest.run([mbtest.tool("mb-report"), *[str(a) for a in args]], cwd=self.dir,
                          env=self.env)

    def test_json_agrees_with_the_logs(self):
        result = self.report("--target", self.target, *self.paths, "--json")
        self.assertSucceeded(result)
        report = json.loads(result.out)
        self.assertEqual(report["target"], self.target)
        self.assertEqual(len(report["runs"]), 4)
        for number, (entry, run, path) in enumerate(zip(report["runs"], self.runs, self.paths), 1):
            with self.subTest(log=path):
                self.assertEqual(entry["run"], number)
                self.assertEqual(entry["log"], path)
                self.assertEqual(entry["tool"], run["tool"])
                self.assertEqual(entry["seed"], run["seed"])
                self.assertEqual(entry["clock"], "wall")
                self.assertEqual(entry["model"], "mlp")
                self.assertEqual(entry["workers"], 1)
                self.assertEqual(entry["steps"], run["steps"])
                self.assertEqual(entry["samples"], run["samples"])
                self.assertAlmostEqual(entry["time"], run["time"], places=9)
                self.assertAlmostEqual(entry["samples_per_second"], run["samples"] / run["time"])
                self.assertEqual(entry["evaluations"], len(run["accuracy"]))
                self.assertAlmostEqual(entry["final_accuracy"], float(run["accuracy"][-1]))
                self.assertAlmostEqual(entry["best_accuracy"], float(run["accuracy"].max()))
                self.assertTrue(entry["reached"])
                self.assertAlmostEqual(entry["time_to_target"], time_to(run, self.target))
        # Each run against the FMB run of its seed, and AMB / FMB by seed.
        runs = report["runs"]
        self.assertEqual([r["base_run"] for r in runs], [1, 1, 3, 3])
        ratios = [time_to(self.runs[1], self.target) / time_to(self.runs[0], self.target),
                  time_to(self.runs[3], self.target) / time_to(self.runs[2], self.target)]
        self.assertAlmostEqual(runs[1]["ratio_to_base"], ratios[0])
        self.assertAlmostEqual(runs[3]["ratio_to_base"], ratios[1])
        [comparison] = report["comparisons"]
        self.assertEqual((comparison["base_tool"], comparison["tool"]),
                         ("mb-train-fmb", "mb-train-amb"))
        self.assertEqual([(s["seed"], s["base_run"], s["run"]) for s in comparison["seeds"]],
                         [(1, 1, 2), (2, 3, 4)])
        self.assertEqual(comparison["compared"], 2)
        self.assertAlmostEqual(comparison["mean"], statistics.mean(ratios))
        self.assertAlmostEqual(comparison["min"], min(ratios))
        self.assertAlmostEqual(comparison["max"], max(ratios))

    def test_table_lists_each_run_and_the_ratios(self):
        result = self.report("--target", self.target, *self.paths)
        self.assertSucceeded(result)
        lines = result.out.splitlines()
        rows = [line for line in lines if line and not line.startswith("#")]
        self.assertEqual(len(rows), 4, result.out)
        for row, path in zip(rows, self.paths):
            self.assertIn(path, row)
        header = [line for line in lines if line.startswith("#  run")]
        self.assertEqual(len(header), 1, result.out)
        for column in ("tool", "model", "workers", "clock", "steps", "samples/s", "final acc",
                       "best acc", "ratio"):
            self.assertIn(column, header[0])
        ratios = [time_to(self.runs[1], self.target) / time_to(self.runs[0], self.target),
                  time_to(self.runs[3], self.target) / time_to(self.runs[2], self.target)]
        percent = f"{100 * self.target:.4g}%"
        self.assertIn(f"# seed 1: mb-train-amb / mb-train-fmb time to {percent}: {ratios[0]:.3f}",
                      result.out)
        self.assertIn(f"# mb-train-amb / mb-train-fmb time to {percent}: mean "
                      f"{statistics.mean(ratios):.3f} over 2 seeds", result.out)

    def test_not_reached_and_no_evaluations(self):
        result = self.report("--target", "1", self.paths[0], self.no_eval, "--json")
        self.assertSucceeded(result)
        report = json.loads(result.out)
        first = report["runs"][0]
        self.assertEqual(first["reached"], bool(self.runs[0]["accuracy"].max() >= 1.0))
        self.assertEqual(report["runs"][1]["evaluations"], 0)
        self.assertIsNone(report["runs"][1]["time_to_target"])
        self.assertIsNone(report["runs"][1]["best_accuracy"])
        table = self.report("--target", "1", self.no_eval)
        self.assertSucceeded(table)
        self.assertIn("no evaluations", table.out)
        # Without --target, no time to target at all.
        plain = self.report(*self.paths)
        self.assertSucceeded(plain)
        self.assertNotIn("time to", plain.out)
        self.assertNotIn("mean", plain.out)

    def test_csv_to_stdout_and_to_a_file(self):
        result = self.report("--target", self.target, *self.paths, "--csv")
        self.assertSucceeded(result)
        rows = list(csv.DictReader(io.StringIO(result.out)))
        self.assertEqual([row["log"] for row in rows], self.paths)
        for row, run in zip(rows, self.runs):
            self.assertEqual(row["tool"], run["tool"])
            self.assertEqual(int(row["steps"]), run["steps"])
            self.assertEqual(row["reached"], "true")
            self.assertAlmostEqual(float(row["time_to_target_s"]), time_to(run, self.target))
            self.assertAlmostEqual(float(row["best_accuracy"]), float(run["accuracy"].max()))
        output = self.path("report.csv")
        written = self.report("--target", self.target, *self.paths, "--csv", "-o", output)
        self.assertSucceeded(written)
        self.assertEqual(written.out, "")
        with open(output, newline="") as f:
            self.assertEqual(f.read(), result.out)
        again = self.report("--target", self.target, *self.paths, "--csv", "-o", output)
        self.assertFailsWith(again, 2, f"{output} exists; use --force")
        self.assertSucceeded(self.report(*self.paths, "-o", output, "--force"))
        self.assertNoStrayFiles()

    def test_a_log_while_its_run_goes_on_and_after_kill_9(self):
        # As mb-plot and h5py read it (SWMR): the log of a live run, and the one its writer
        # left marked as open for writing when it was killed.
        log = self.path("live.h5")
        process = subprocess.Popen(
            [mbtest.tool("mb-train-fmb"), "--data", self.toy, "--model", "mlp", "--hidden", "16",
             "--threads", "1", "-q", "--steps", "100000000", "--eval-every", "5", "--log", log,
             "--flush-interval", "0.05"], cwd=self.dir, env=self.env,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            self.wait_for_steps(log, 10)
            live = self.report(log, "--json")
        finally:
            process.kill()
            process.wait()
        self.assertSucceeded(live)
        self.assertGreaterEqual(json.loads(live.out)["runs"][0]["steps"], 10)
        killed = self.report(log, "--json")
        self.assertSucceeded(killed)
        # The rows the writer committed (mbkit-formats(5)): a kill between a flush of the
        # columns and its commit leaves rows that every column holds but that are not counted.
        with h5py.File(log, "r", swmr=True) as f:
            holds = min(len(column) for column in f["steps"].values())
            tables = [t.decode() for t in f["committed_rows"].attrs["tables"]]
            steps = int(dict(zip(tables, f["committed_rows"][()]))["steps"])
        self.assertLessEqual(steps, holds)
        self.assertEqual(json.loads(killed.out)["runs"][0]["steps"], steps)
        scaling = self.report("--scaling", log)
        self.assertSucceeded(scaling)

    def test_a_glob_of_logs_checkpoints_evaluations_and_datasets(self):
        # out/quick/*.h5: the logs are reported, the other files left out with one line that
        # names them and what they are; with no log left, status 3.
        checkpoint = self.path("fmb-checkpoint.h5")
        evaluation = self.path("fmb-eval.h5")
        self.assertSucceeded(mbtest.run(
            [mbtest.tool("mb-train-fmb"), "--data", self.toy, "--model", "mlp", "--hidden", "16",
             "--threads", "1", "-q", "--steps", "2", "--checkpoint", checkpoint],
            cwd=self.dir, env=self.env))
        self.assertSucceeded(mbtest.run(
            [mbtest.tool("mb-eval"), checkpoint, "--data", self.toy, "--threads", "1", "-q",
             "-o", evaluation], cwd=self.dir, env=self.env))
        files = [self.paths[0], checkpoint, evaluation, self.paths[1], self.toy]
        result = self.report(*files, "--json")
        self.assertSucceeded(result)
        self.assertEqual([run["log"] for run in json.loads(result.out)["runs"]], self.paths[:2])
        self.assertEqual(result.err.strip().splitlines(), [
            f"mb-report: left out 3 files that are not a metric log: {checkpoint} (a checkpoint), "
            f"{evaluation} (an evaluation), {self.toy} (a dataset)"])
        self.assertSucceeded(self.report("--scaling", self.paths[0], checkpoint, self.paths[2]))
        self.assertFailsWith(self.report(checkpoint, evaluation), 3,
                             f"{checkpoint}: not an mbkit metric log (a checkpoint); nor is the "
                             "other file given")
        # A damaged log among them is still an error.
        damaged = self.path("damaged.h5")
        with open(self.paths[0], "rb") as f:
            data = f.read()
        with open(damaged, "wb") as f:
            f.write(data[:len(data) // 2])
        self.assertEqual(self.report(*files, damaged).rc, 3)

    def test_a_log_cut_by_a_full_disk(self):
        # The log on a small tmpfs, a row flushed per step: the disk fills, and the flush that
        # fails can leave the tables grown over columns never written, read as 0 (step 0,
        # accuracy 0). The report holds the rows that were written, each complete.
        disk = self.path("small")
        os.mkdir(disk)
        mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", disk],
                                 capture_output=True, text=True)
        if mounted.returncode != 0:
            self.skipTest(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
        self.addCleanup(subprocess.run, ["umount", disk], capture_output=True)
        log = os.path.join(disk, "run.h5")
        result = mbtest.run(
            [mbtest.tool("mb-train-fmb"), "--data", self.toy, "--model", "mlp", "--hidden", "8",
             "--threads", "1", "-q", "--steps", "100000000", "--eval-every", "1", "--test-size",
             "10", "--log", log, "--flush-interval", "0.01"], cwd=self.dir, env=self.env)
        self.assertFailsWith(result, 1, "No space left on device")
        report = self.report(log, "--json")
        self.assertSucceeded(report)
        [run] = json.loads(report.out)["runs"]
        with h5py.File(log, "r", swmr=True) as f:
            eval_steps = f["eval/step"][:run["evaluations"]]
            accuracy = f["eval/accuracy"][:run["evaluations"]]
            steps = f["steps/step"][:run["steps"]]
        # An evaluation per step, from step 1, every one of them written.
        self.assertGreater(run["evaluations"], 10)
        self.assertEqual(list(eval_steps), list(range(1, run["evaluations"] + 1)))
        self.assertEqual(list(steps), list(range(1, run["steps"] + 1)))
        self.assertEqual(run["final_accuracy"], float(accuracy[-1]))

    def test_bad_input(self):
        text = self.path("notes.h5")
        with open(text, "w") as f:
            f.write("not a log\n")
        self.assertFailsWith(self.report(self.paths[0], text), 3, f"{text}: not an HDF5 file")
        self.assertFailsWith(self.report(self.toy), 3, f"{self.toy}: not an mbkit metric log")
        self.assertFailsWith(self.report(self.dir), 3, f"{self.dir}: is a directory")
        missing = self.path("missing.h5")
        self.assertFailsWith(self.report(missing), 3, f"{missing}: no such file")
        self.assertFailsWith(self.report("--target", "80", self.paths[0]), 2, "--target 80")
        self.assertFailsWith(self.report(self.paths[0], "--json", "--csv"), 2,
                             "--json and --csv exclude each other")
        self.assertFailsWith(self.report(), 2, "no metric log given")


if __name__ == "__main__":
    mbtest.main()
