"""mb-report --scaling end to end: FMB on the toy problem on 1 process and on 2 and 3 under
mpirun (allreduce), then the JSON, CSV and table against what numpy computes from the logs'
/steps columns read with h5py: the median per-step samples/s after the warm-up, speedup and
efficiency against the 1-worker run, and tf_cnn_benchmarks' mean, uncertainty and jitter."""

import csv
import io
import json
import shutil

import h5py
import numpy as np

import mbtest

MPIRUN = shutil.which("mpirun")


class ScalingReport(mbtest.ToolTestCase):
    def setUp(self):
        super().setUp()
        self.assertIsNotNone(MPIRUN, "mpirun (openmpi-bin) is required")
        self.assertSucceeded(self.mb_dataset("synth", "toy", "--learnable", "--train", "600",
                                             "--test", "60", "-o", self.path("toy.h5")))

    def run_tool(self, *args):
        return mbtest.run([str(a) for a in args], cwd=self.dir, env=self.env)

    def test_against_numpy(self):
        common = [mbtest.tool("mb-train-fmb"), "--data", self.path("toy.h5"), "--model", "mlp",
                  "--hidden", "16", "--threads", "1", "-q", "--batch-size", "16", "--steps",
                  "20", "--comm", "allreduce"]
        logs = []
        for ranks in (1, 2, 3):
            logs.append(self.path(f"w{ranks}.h5"))
            prefix = [] if ranks == 1 else [MPIRUN, "--oversubscribe", "-n", str(ranks)]
            self.assertSucceeded(self.run_tool(*prefix, *common, "--log", logs[-1]))
        result = self.run_tool(mbtest.tool("mb-report"), "--scaling", "--warmup-steps", "3",
                               "--json", *logs)
        self.assertSucceeded(result)
        report = json.loads(result.out)
        self.assertEqual(report["base_workers"], 1)
        expected = []
        for path in logs:
            with h5py.File(path, "r", swmr=True) as log:
                rate = log["steps/throughput"][3:]
                samples = log["steps/samples"][3:]
                seconds = log["steps/step_time"][3:]
            expected.append({
                "steps": len(rate), "samples_per_second": np.median(rate),
                "mean": samples.sum() / seconds.sum(),
                "uncertainty": np.std(rate) / np.sqrt(len(rate)),
                "jitter": 1.4826 * np.median(np.abs(rate - np.median(rate)))})
        self.assertEqual([row["workers"] for row in report["rows"]], [1, 2, 3])
        for n, (row, want) in enumerate(zip(report["rows"], expected), start=1):
            self.assertEqual(row["logs"], [logs[n - 1]])
            self.assertEqual(row["steps"], want["steps"])
            for key in ("samples_per_second", "mean", "uncertainty", "jitter"):
                self.assertAlmostEqual(row[key], want[key], delta=1e-9 * want[key], msg=key)
            speedup = want["samples_per_second"] / expected[0]["samples_per_second"]
            self.assertAlmostEqual(row["speedup"], speedup, places=9)
            self.assertAlmostEqual(row["efficiency"], speedup / n, places=9)

        result = self.run_tool(mbtest.tool("mb-report"), "--scaling", "--warmup-steps", "3",
                               "--csv", *logs)
        self.assertSucceeded(result)
        rows = list(csv.DictReader(io.StringIO(result.out)))
        self.assertEqual([float(r["speedup"]) for r in rows],
                         [row["speedup"] for row in report["rows"]])

        result = self.run_tool(mbtest.tool("mb-report"), "--scaling", "--warmup-steps", "3", *logs)
        self.assertSucceeded(result)
        self.assertIn("speedup against the 1-worker run", result.out.splitlines()[0])
        row = report["rows"][2]
        self.assertIn(f"# 3 workers: images/sec: {row['mean']:.1f} +/- {row['uncertainty']:.1f}"
                      f" (jitter = {row['jitter']:.1f})", result.out)

        # Without the 1-worker run the speedup is against 2 workers, said so.
        result = self.run_tool(mbtest.tool("mb-report"), "--scaling", "--json", *logs[1:])
        self.assertSucceeded(result)
        self.assertEqual(json.loads(result.out)["base_workers"], 2)
        self.assertAlmostEqual(json.loads(result.out)["rows"][0]["speedup"], 2.0)

        report = mbtest.tool("mb-report")
        self.assertFailsWith(self.run_tool(report, "--scaling", "--warmup-steps", "20", *logs), 3,
                             "all of them warm-up")
        self.assertFailsWith(self.run_tool(report, "--scaling", "--target", "0.5", *logs), 2,
                             "--scaling and --target")
        self.assertFailsWith(self.run_tool(report, "--warmup-steps", "2", *logs), 2,
                             "--warmup-steps applies to --scaling")

    def test_runs_of_different_setups_are_refused(self):
        # A speedup between different models or tools measures nothing: one line naming the two
        # runs and what differs, status 2.
        def train(tool, name, *extra):
            self.assertSucceeded(self.run_tool(
                mbtest.tool(tool), "--data", self.path("toy.h5"), "--model", "mlp", "--threads",
                "1", "-q", "--steps", "12", "--log", self.path(name), *extra))
            return self.path(name)
        wide = train("mb-train-fmb", "wide.h5", "--hidden", "256", "--batch-size", "16")
        narrow = train("mb-train-fmb", "narrow.h5", "--hidden", "32", "--batch-size", "16")
        amb = train("mb-train-amb", "amb.h5", "--hidden", "256", "--batch-size", "16",
                    "--partitions", "4", "--time-limit", "10")
        report = mbtest.tool("mb-report")
        self.assertSucceeded(self.run_tool(report, "--scaling", wide, wide))
        result = self.run_tool(report, "--scaling", wide, narrow)
        self.assertFailsWith(result, 2, f"--scaling: {wide} and {narrow} are runs of different "
                             "models (mlp hidden=256 against mlp hidden=32)")
        self.assertEqual(len(result.err.strip().splitlines()), 1, result.err)
        self.assertEqual(result.out, "")
        self.assertFailsWith(self.run_tool(report, "--scaling", wide, amb), 2,
                             f"--scaling: {wide} and {amb} are runs of different tools "
                             "(mb-train-fmb against mb-train-amb)")

    def test_warmup_steps_must_be_0_or_more(self):
        self.assertSucceeded(self.run_tool(
            mbtest.tool("mb-train-fmb"), "--data", self.path("toy.h5"), "--model", "mlp",
            "--threads", "1", "-q", "--steps", "12", "--log", self.path("run.h5")))
        report = mbtest.tool("mb-report")
        for value in ("-1", "-5"):
            result = self.run_tool(report, "--scaling", "--warmup-steps", value, self.path("run.h5"))
            self.assertFailsWith(result, 2, f"--warmup-steps {value}: must be 0 or more")
            self.assertEqual(result.out, "")
        self.assertSucceeded(self.run_tool(report, "--scaling", "--warmup-steps", "0",
                                           self.path("run.h5")))


if __name__ == "__main__":
    mbtest.main()
