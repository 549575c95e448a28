"""mb-report --compare and mb-plot --type clock-compare end to end: a real run (1 master + 1
worker under mpirun, induced delays slept on the wall clock) and its emulation (the same
settings on --clock virtual), then the JSON (read by Python's json), the table and the CSV
against what numpy computes from the two logs read with h5py: the per-step relative errors
matched by step (median, 95th percentile), both runs' step-time medians, the training time to a
target (the steps' time up to the first evaluation at or above it) and its error, the final
accuracies, the goals; the figure drawn as a PNG; a real run against its repeat; and the
refusals of logs that are not a run and its emulation or its repeat, one line and exit status
2. The timings are not checked: CI machines are too loaded for that
(tests/bench/emulation_agreement.py measures them)."""

import csv
import io
import json
import os
import shutil
import struct

import h5py
import numpy as np

import mbtest

MPIRUN = shutil.which("mpirun")


def read_log(path):
    with h5py.File(path, "r", swmr=True) as log:
        return {"step": log["steps/step"][...], "step_time": log["steps/step_time"][...],
                "eval_step": log["eval/step"][...], "eval_time": log["eval/time"][...],
                "accuracy": log["eval/accuracy"][...]}


def training_time_to(run, target):
    """The steps' time up to the first evaluation at or above `target`, or None."""
    for step, accuracy in zip(run["eval_step"], run["accuracy"]):
        if accuracy >= target:
            return float(run["step_time"][run["step"] <= step].sum())
    return None


class ClockCompare(mbtest.ToolTestCase):
    @classmethod
    def setUpClass(cls):
        # The two runs are made once: each test reads them.
        cls.shared = mbtest.ToolTestCase()
        cls.shared.setUp()
        cls.real = cls.shared.path("real.h5")
        cls.emulated = cls.shared.path("emulated.h5")
        assert MPIRUN, "mpirun (openmpi-bin) is required"
        data = cls.shared.path("toy.h5")
        result = cls.shared.mb_dataset("synth", "toy", "--learnable", "--train", "600", "--test",
                                       "100", "-o", data)
        assert result.rc == 0, repr(result)
        common = [MPIRUN, "--oversubscribe", "-n", "2", mbtest.tool("mb-train-fmb"), "--data",
                  data, "--model", "mlp", "--hidden", "16", "--lr", "0.1", "--threads", "1",
                  "-q", "--batch-size", "32", "--steps", "40", "--eval-every", "5", "--induce",
                  "0.02:0.005:1"]
        cls.real_command = [*common, "--clock", "wall"]
        for clock, log in (("wall", cls.real), ("virtual", cls.emulated)):
            result = mbtest.run([*common, "--clock", clock, "--log", log], cwd=cls.shared.dir,
                                env=cls.shared.env)
            assert result.rc == 0, repr(result)
        cls.logs = {"real": read_log(cls.real), "emulated": read_log(cls.emulated)}
        # A target both runs reach: the lower of their best accuracies.
        cls.target = float(min(run["accuracy"].max() for run in cls.logs.values()))

    @classmethod
    def tearDownClass(cls):
        cls.shared.tearDown()

    def report(self, *args):
        return mbtest.run([mbtest.tool("mb-report"), *args], cwd=self.dir, env=self.env)

    def test_json_against_numpy(self):
        result = self.report("--compare", self.real, self.emulated, "--target",
                             repr(self.target), "--json")
        self.assertSucceeded(result)
        report = json.loads(result.out)
        real, emulated = self.logs["real"], self.logs["emulated"]
        np.testing.assert_array_equal(real["step"], emulated["step"])
        errors = np.abs(emulated["step_time"] - real["step_time"]) / real["step_time"]
        self.assertEqual(report["steps_compared"], 40)
        self.assertAlmostEqual(report["step_time_error"]["median"], np.median(errors), places=12)
        self.assertAlmostEqual(report["step_time_error"]["p95"], np.percentile(errors, 95),
                               places=12)
        for name, run in (("real", real), ("emulated", emulated)):
            self.assertEqual(report[name]["clock"], "wall" if name == "real" else "virtual")
            self.assertAlmostEqual(report[name]["step_time_median"],
                                   np.median(run["step_time"]), places=12)
            self.assertAlmostEqual(report[name]["step_time_p95"],
                                   np.percentile(run["step_time"], 95), places=12)
            self.assertTrue(report[name]["reached"])
            self.assertAlmostEqual(report[name]["time_to_target"],
                                   training_time_to(run, self.target), places=9)
            self.assertAlmostEqual(report[name]["final_accuracy"], run["accuracy"][-1],
                                   places=6)
        want = abs(training_time_to(emulated, self.target) - training_time_to(real, self.target))
        want /= training_time_to(real, self.target)
        self.assertAlmostEqual(report["time_to_target_error"], want, places=9)
        checks = {check["name"]: check for check in report["checks"]}
        self.assertEqual(set(checks), {"step_time_error_median", "step_time_error_p95",
                                       "time_to_target_error"})
        for name, goal in (("step_time_error_median", 0.05), ("step_time_error_p95", 0.10),
                           ("time_to_target_error", 0.05)):
            self.assertEqual(checks[name]["goal"], goal)
            self.assertEqual(checks[name]["met"], checks[name]["value"] <= goal)
        self.assertEqual(report["goals_met"], sum(c["met"] for c in report["checks"]))
        # The emulation measured its message cost at start and took CPU time for compute.
        self.assertIn("compute model: CPU time", report["emulation"])

    def test_table_and_csv(self):
        result = self.report("--compare", self.real, self.emulated, "--target",
                             repr(self.target))
        self.assertSucceeded(result)
        lines = result.out.splitlines()
        self.assertTrue(lines[0].startswith(f"# real: {self.real} (wall clock); emulated: "
                                            f"{self.emulated} (virtual clock"), lines[0])
        rows = [line.split("  ") for line in lines if not line.startswith("#")]
        labels = [[cell for cell in row if cell.strip()][0].strip() for row in rows]
        self.assertEqual(labels[2:4], ["per-step error, median", "per-step error, p95"])
        self.assertTrue(labels[4].startswith("time to "), labels)
        self.assertEqual(labels[5], "final accuracy (%)")
        self.assertTrue(lines[-1].startswith("# goals met: "), lines[-1])
        result = self.report("--compare", self.real, self.emulated, "--csv")
        self.assertSucceeded(result)
        table = list(csv.DictReader(io.StringIO(result.out)))
        self.assertEqual([row["quantity"] for row in table],
                         ["step_time_median", "step_time_p95", "step_time_error_median",
                          "step_time_error_p95", "final_accuracy"])
        errors = (np.abs(self.logs["emulated"]["step_time"] - self.logs["real"]["step_time"]) /
                  self.logs["real"]["step_time"])
        self.assertAlmostEqual(float(table[2]["error"]), np.median(errors), places=12)

    def test_target_never_reached_is_said_not_an_error(self):
        result = self.report("--compare", self.real, self.emulated, "--target", "1")
        self.assertSucceeded(result)
        row = next(line for line in result.out.splitlines() if line.strip().startswith("time to"))
        self.assertIn("not reached", row)
        result = self.report("--compare", self.real, self.emulated, "--target", "1", "--json")
        report = json.loads(result.out)
        self.assertFalse(report["real"]["reached"])
        self.assertIsNone(report["time_to_target_error"])
        self.assertIsNone(report["checks"][2]["met"])

    def test_figure(self):
        result = mbtest.run([mbtest.tool("mb-plot"), "--type", "clock-compare", self.real,
                             self.emulated, "--target", repr(self.target), "-o", "cc.png",
                             "--csv", "cc.csv"], cwd=self.dir, env=self.env)
        self.assertSucceeded(result)
        with open(self.path("cc.png"), "rb") as f:
            head = f.read(24)
        self.assertEqual(head[:8], b"\x89PNG\r\n\x1a\n")
        self.assertGreater(struct.unpack(">I", head[16:20])[0], 400)
        with open(self.path("cc.csv")) as f:
            rows = list(csv.DictReader(f))
        panes = {row["pane"] for row in rows}
        self.assertEqual(panes, {"clock-compare-step-time", "clock-compare-accuracy"})
        # The accuracy pane's last point of each run: its training time, its last accuracy.
        for series, run in (("real (wall clock)", self.logs["real"]),
                            ("emulated (virtual clock)", self.logs["emulated"])):
            points = [row for row in rows
                      if row["pane"] == "clock-compare-accuracy" and row["series"] == series]
            self.assertEqual(len(points), len(run["accuracy"]))
            self.assertAlmostEqual(float(points[-1]["y"]), 100 * run["accuracy"][-1], places=4)

    def test_an_emulation_in_one_process_under_a_cpu_quota_compares(self):
        # The worker emulated in the process (--emulate 1: its sum is "in-process") under
        # --cpu-quota, as emulation_agreement.py's setting 3 emulates a cgroup: the same run;
        # and under the kernel's model of it (--cpu-quota-tick), the emulation's too.
        for name, extra, named in [
                ("quota", [], "cpu_quota 1=0.05/0.1"),
                ("quota-tick", ["--cpu-quota-tick", "0.004"],
                 "cpu_quota 1=0.05/0.1; cpu_quota_tick 0.004")]:
            with self.subTest(name=name):
                emulated = self.path(f"{name}.h5")
                result = mbtest.run(
                    [mbtest.tool("mb-train-fmb"), "--data", self.shared.path("toy.h5"), "--model",
                     "mlp", "--hidden", "16", "--lr", "0.1", "--threads", "1", "-q",
                     "--batch-size", "32", "--steps", "40", "--eval-every", "5", "--induce",
                     "0.02:0.005:1", "--clock", "virtual", "--emulate", "1", "--comm-model",
                     "1e-3,0", "--compute-model", "1e-5,1e-3", "--cpu-quota", "1=0.05/0.1",
                     *extra, "--log", emulated], cwd=self.dir, env=self.env)
                self.assertSucceeded(result)
                result = self.report("--compare", self.real, emulated)
                self.assertSucceeded(result)
                self.assertIn(named, result.out)

    def test_refusals(self):
        other = self.path("b64.h5")
        result = mbtest.run([mbtest.tool("mb-train-fmb"), "--data", self.shared.path("toy.h5"),
                             "--model", "mlp", "--hidden", "16", "--threads", "1", "-q",
                             "--batch-size", "64", "--steps", "3", "--clock", "virtual",
                             "--log", other], cwd=self.dir, env=self.env)
        self.assertSucceeded(result)
        cases = [
            ([self.emulated, self.real], f"{self.emulated} ran on the virtual clock and "
                                         f"{self.real} on the wall clock: give the real run first"),
            ([self.emulated, self.emulated], "both ran on the virtual clock"),
            ([self.real, other], f"{self.real} and {other} are not runs of the same settings:"),
            ([self.real], "--compare: two metric logs are expected"),
        ]
        for logs, text in cases:
            with self.subTest(logs=logs):
                self.assertFailsWith(self.report("--compare", *logs), 2, text)
        result = self.report("--compare", self.real, other)
        self.assertIn("batch_size (32 against 64)", result.err)
        self.assertFailsWith(self.report("--compare", "--scaling", self.real, self.emulated), 2,
                             "--compare and --scaling exclude each other")
        result = mbtest.run([mbtest.tool("mb-plot"), "--type", "clock-compare", self.emulated,
                             self.real, "-o", "x.png"], cwd=self.dir, env=self.env)
        self.assertFailsWith(result, 2, "give the real run first")
        self.assertFalse(os.path.exists(self.path("x.png")))

    def test_a_real_run_against_its_repeat(self):
        # The same run again on the wall clock (its delays slept anew): the errors of the one
        # against the other, as numpy computes them, the second column named the repeat.
        again = self.path("again.h5")
        self.assertSucceeded(mbtest.run([*self.real_command, "--log", again], cwd=self.dir,
                                        env=self.env))
        result = self.report("--compare", self.real, again, "--target", "0.5", "--json")
        self.assertSucceeded(result)
        report = json.loads(result.out)
        self.assertTrue(report["repeat"])
        self.assertEqual(report["emulation"], "")
        first, second = read_log(self.real), read_log(again)
        errors = np.abs(second["step_time"] - first["step_time"]) / first["step_time"]
        self.assertAlmostEqual(report["step_time_error"]["median"], float(np.median(errors)),
                               places=12)
        self.assertAlmostEqual(report["step_time_error"]["p95"],
                               float(np.percentile(errors, 95)), places=12)
        table = self.report("--compare", self.real, again)
        self.assertSucceeded(table)
        self.assertIn(f"; repeat: {again} (wall clock, the same settings run again", table.out)
        self.assertNotIn("emulated", table.out)
        # The figure of the two, drawn; its gnuplot script names the second run the repeat.
        plot = [mbtest.tool("mb-plot"), "--type", "clock-compare", self.real, again]
        self.assertSucceeded(mbtest.run([*plot, "-o", "repeat.png"], cwd=self.dir, env=self.env))
        with open(self.path("repeat.png"), "rb") as png:
            self.assertEqual(png.read(8), b"\x89PNG\r\n\x1a\n")
        script = self.path("repeat-script")
        self.assertSucceeded(mbtest.run([*plot, "--script", script, "-o", "repeat.png"],
                                        cwd=self.dir, env=self.env))
        text = "".join(open(os.path.join(script, name)).read() for name in os.listdir(script)
                       if name.endswith(".gp"))
        self.assertIn("repeat (wall clock)", text)
        self.assertNotIn("emulated", text)


if __name__ == "__main__":
    mbtest.main()
