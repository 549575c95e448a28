"""mb-bench-partitions on a small synthetic dataset: the table read the way scripts read it, the
-o file read back with h5py (every (B, P) pair on every rank, positive step times), the run
under mpirun -n 3 with a row per rank, the loader thread's CPU a batch (0 in a process pinned
to one core, which loads inline), and bad lists, models and batch sizes refused with one
line and exit status 2."""

import math
import os
import re
import shutil
import unittest

import h5py

import mbtest

MPIRUN = shutil.which("mpirun")


class BenchPartitions(mbtest.ToolTestCase):
    def setUp(self):
        super().setUp()
        self.assertSucceeded(self.mb_dataset("synth", "images", "--shape", "1,8,8", "--classes",
                                             "4", "--train", "64", "--test", "4", "-o",
                                             self.path("d.h5")))

    def bench(self, ranks, *args):
        command = [mbtest.tool("mb-bench-partitions"), "--data", self.path("d.h5"), "--threads",
                   "1", "--steps", "2", "--warmup", "1", *args]
        if ranks > 0:
            command = [MPIRUN, "--oversubscribe", "-n", str(ranks), *command]
        return mbtest.run(command, cwd=self.dir, env=self.env, timeout=240)

    def test_three_ranks_sweep_table_and_file(self):
        self.assertIsNotNone(MPIRUN, "mpirun (openmpi-bin) is required")
        result = self.bench(3, "--model", "mlp", "--sweep", "--sweep-max", "16", "-o",
                            self.path("p.h5"))
        self.assertSucceeded(result)
        columns, rows = mbtest.parse_table(result.out, float)
        self.assertEqual(columns[:4], ["rank", "batch", "partitions", "micro_batch"])
        self.assertEqual(columns[-3:], ["sample_us_max", "step_ms_first", "load_ms"])
        self.assertEqual(len(rows), 9 * 3)
        self.assertEqual(sorted({int(r["rank"]) for r in rows}), [0, 1, 2])
        for row in rows:
            self.assertEqual(row["micro_batch"] * row["partitions"], row["batch"])
            self.assertLessEqual(row["step_ms_min"], row["step_ms_median"])
            self.assertLessEqual(row["step_ms_median"], row["step_ms_max"])
            self.assertGreater(row["step_ms_first"], 0)  # --warmup 1: the untimed step
            self.assertAlmostEqual(row["sample_us_median"],
                                   row["step_ms_median"] * 1e3 / row["batch"],
                                   delta=0.5 / row["batch"] + 0.002)  # printed rounding
        with h5py.File(self.path("p.h5"), "r") as f:
            self.assertEqual(f["step_time"].shape, (27, 2))
            self.assertTrue((f["step_time"][...] > 0).all())
            self.assertEqual(f["first_step_time"].shape, (27,))
            self.assertTrue((f["first_step_time"][...] > 0).all())
            self.assertEqual(sorted(set(f["rank"][...])), [0, 1, 2])
            self.assertEqual(int(f.attrs["ranks"]), 3)
            self.assertEqual(int(f.attrs["threads"]), 1)
        plot = mbtest.run([mbtest.tool("mb-plot"), self.path("p.h5"), "--type", "partitions",
                           "--csv", "-"], cwd=self.dir, env=self.env)
        self.assertSucceeded(plot)
        points = [line.split(",") for line in plot.out.splitlines()[1:]]
        self.assertEqual({p[0] for p in points}, {"time-per-step", "time-per-sample"})
        self.assertEqual(len(points), 2 * 9)  # a point per (B, P) in each panel
        self.assertNoStrayFiles()

    def test_the_loaders_cpu_is_measured_beside_the_step_or_zero_inline(self):
        # --prefetch auto: a thread of its own, unless the process is pinned to one core, where
        # the step loads inline (its time then in the step's).
        def load(*prefix):
            result = mbtest.run([*prefix, mbtest.tool("mb-bench-partitions"), "--data",
                                 self.path("d.h5"), "--threads", "1", "--steps", "6", "--model",
                                 "mlp", "--batch-sizes", "16", "-o", self.path("l.h5"), "-f"],
                                cwd=self.dir, env=self.env)
            self.assertSucceeded(result)
            _, rows = mbtest.parse_table(result.out, float)
            with h5py.File(self.path("l.h5"), "r") as f:
                self.assertAlmostEqual(f["load_time"][0] * 1e3, rows[0]["load_ms"],
                                       delta=0.0005 + 1e-9)  # printed to 3 places
                return f["load_time"][0]
        if len(os.sched_getaffinity(0)) >= 2:
            self.assertGreater(load(), 0)
        taskset = shutil.which("taskset")
        if taskset:
            self.assertEqual(load(taskset, "-c", str(min(os.sched_getaffinity(0)))), 0)

    def test_without_warm_up_steps_the_first_step_is_nan(self):
        result = mbtest.run([mbtest.tool("mb-bench-partitions"), "--data", self.path("d.h5"),
                             "--threads", "1", "--steps", "2", "--warmup", "0", "--model", "mlp",
                             "--batch-sizes", "8,16", "-o", self.path("p.h5")],
                            cwd=self.dir, env=self.env)
        self.assertSucceeded(result)
        _, rows = mbtest.parse_table(result.out, float)
        self.assertEqual(len(rows), 2)
        self.assertTrue(all(math.isnan(row["step_ms_first"]) for row in rows))
        with h5py.File(self.path("p.h5"), "r") as f:
            self.assertTrue(all(math.isnan(x) for x in f["first_step_time"][...]))

    def test_fit_on_three_ranks_writes_a_time_model_per_rank(self):
        self.assertIsNotNone(MPIRUN, "mpirun (openmpi-bin) is required")
        # Batches whose time grows with them above a busy machine's noise: a fit with a <= 0 is
        # not written (tiny batches of 8x8 images gave a < 0 on a loaded test machine).
        self.assertSucceeded(self.mb_dataset("synth", "images", "--shape", "3,16,16", "--classes",
                                             "4", "--train", "1024", "--test", "4", "-o",
                                             self.path("d.h5"), "--force"))
        result = self.bench(3, "--batch-sizes", "32,128,512,1024", "--fit", "--time-model",
                            self.path("tm.h5"))
        self.assertSucceeded(result)
        fits = [line for line in result.out.splitlines() if re.match(r"# rank \d+: a = ", line)]
        self.assertEqual(len(fits), 3, msg=result.out)
        for line in fits:
            self.assertIn("r^2 = ", line)
            self.assertIn("largest relative residual = ", line)
        with h5py.File(self.path("tm.h5"), "r") as f:
            fmt = f.attrs["format"]
            self.assertEqual(fmt.decode() if isinstance(fmt, bytes) else fmt, "mbkit-time-model")
            devices = [f["devices"][name] for name in sorted(f["devices"])]
            self.assertEqual(sorted(int(d.attrs["rank"]) for d in devices), [0, 1, 2])
            for device in devices:
                self.assertEqual(list(device.attrs["batch_sizes"]), [32, 128, 512, 1024])
                self.assertGreater(device.attrs["a"], 0)
                self.assertEqual(int(device.attrs["threads"]), 1)
                self.assertTrue(all(s > 0 for s in device.attrs["seconds"]))
        self.assertNoStrayFiles()

    def test_bad_input_gives_one_line(self):
        cases = [
            (["--batch-sizes", "8,x"], "--batch-sizes: 'x'"),
            (["--batch-sizes", "8", "--partitions", "3"], "--partitions 3 does not divide"),
            (["--batch-sizes", "128"], "training rows"),
            (["--batch-sizes", "8", "--model", "lenet9"], "lenet9"),
            ([], "--batch-sizes"),
            (["--batch-sizes", "8", "--fit"], "--fit needs at least two"),
            (["--batch-sizes", "8", "--time-model", "tm.h5"], "--time-model needs --fit"),
        ]
        for args, text in cases:
            with self.subTest(args=args):
                self.assertFailsWith(self.bench(0, *args), 2, text)


if __name__ == "__main__":
    mbtest.main()
