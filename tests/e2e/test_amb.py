"""mb-train-amb: --partitions 1 with a limit nobody reaches is FMB exactly; on the virtual clock
with a compute model the micro-batches each worker does, the samples combined and the step time
are the hand-computed ones; at least one micro-batch is always done; the original's weight decay
per micro-batch; real-clock runs under mpirun (sync, allreduce with --time-limit auto, async);
bad --time-limit and --partitions values."""

import json
import shutil

import h5py
import numpy as np

import mbtest

MPIRUN = shutil.which("mpirun")


def params_of(path):
    with h5py.File(path, "r") as f:
        return {name: f["params"][name][...] for name in f["params"]}


def read_log(path):
    with h5py.File(path, "r", swmr=True) as log:
        tables = {group: {name: log[group][name][...] for name in log[group]}
                  for group in ("steps", "eval", "workers", "collect")}
        tables["config"] = json.loads(mbtest.text_attrs(log)["config"])
        tables["tool"] = mbtest.text_attrs(log)["tool"]
    return tables


class AnytimeMiniBatch(mbtest.ToolTestCase):
    def setUp(self):
        super().setUp()
        self.assertIsNotNone(MPIRUN, "mpirun (openmpi-bin) is required")
        result = self.mb_dataset("synth", "toy", "--learnable", "--train", "768", "--test", "60",
                                 "-o", self.path("toy.h5"))
        self.assertSucceeded(result)

    def train(self, tool, ranks, *args, timeout=300):
        command = [mbtest.tool(tool), "--data", self.path("toy.h5"), "--model", "mlp",
                   "--hidden", "16", "--optimizer", "momentum", "--lr", "0.05", "--threads", "1",
                   "-q", *args]
        if ranks > 0:
            command = [MPIRUN, "--oversubscribe", "-n", str(ranks), *command]
        return mbtest.run(command, cwd=self.dir, env=self.env, timeout=timeout)

    def assertSameParams(self, a, b, rtol=0.0, atol=0.0):
        pa, pb = params_of(self.path(a)), params_of(self.path(b))
        self.assertEqual(sorted(pa), sorted(pb))
        for name in pa:
            np.testing.assert_allclose(pa[name], pb[name], rtol=rtol, atol=atol, err_msg=name)

    def test_one_partition_and_an_unreachable_limit_is_fmb_exactly(self):
        for ranks, extra in ((0, []), (4, ["--comm", "ps"]), (3, ["--comm", "allreduce"])):
            with self.subTest(ranks=ranks):
                common = ["--batch-size", "24", "--steps", "9", "--seed", "3", *extra]
                self.assertSucceeded(self.train("mb-train-fmb", ranks, *common, "--checkpoint",
                                                f"fmb{ranks}.h5"))
                self.assertSucceeded(self.train("mb-train-amb", ranks, *common, "--partitions",
                                                "1", "--time-limit", "1000", "--checkpoint",
                                                f"amb{ranks}.h5", "--log", f"amb{ranks}-log.h5"))
                self.assertSameParams(f"fmb{ranks}.h5", f"amb{ranks}.h5")
                log = read_log(self.path(f"amb{ranks}-log.h5"))
                self.assertEqual(log["tool"], "mb-train-amb")
                self.assertEqual(set(log["workers"]["micro_batches"]), {1})
                self.assertEqual(set(log["workers"]["finished_early"]), {1})

    def test_virtual_clock_micro_batches_samples_and_step_times(self):
        # Micro-batches of 8 cost 8 x 1 ms + 2 ms = 10 ms; rank 3 is twice as slow (20 ms).
        # Limit 35 ms: ranks 1 and 2 check at 10, 20, 30 (go) and 40 ms (stop): 4 micro-batches;
        # rank 3 checks at 20 (go) and 40 (stop): 2. A step combines 32 + 32 + 16 samples, and
        # takes the slowest worker's 40 ms, the gradient's message and the parameters'.
        self.assertSucceeded(self.train(
            "mb-train-amb", 4, "--batch-size", "64", "--partitions", "8", "--time-limit",
            "0.035", "--steps", "5", "--slowdown", "3=2", "--clock", "virtual", "--comm-model",
            "1e-3,0", "--compute-model", "1e-3,2e-3", "--log", "v.h5"))
        log = read_log(self.path("v.h5"))
        workers = log["workers"]
        self.assertEqual(list(workers["rank"][:3]), [1, 2, 3])
        self.assertEqual(list(workers["micro_batches"]), [4, 4, 2] * 5)
        self.assertEqual(list(workers["samples"]), [32, 32, 16] * 5)
        self.assertEqual(list(workers["finished_early"]), [0] * 15)
        np.testing.assert_allclose(workers["compute_time"], [0.04, 0.04, 0.02] * 5, rtol=1e-6)
        self.assertEqual(list(log["steps"]["samples"]), [80] * 5)
        self.assertEqual(list(log["collect"]["samples"]), [80] * 5)
        np.testing.assert_allclose(log["steps"]["step_time"], 0.042, rtol=1e-6)
        self.assertEqual(log["config"]["time_limit"], 0.035)
        self.assertEqual(log["config"]["micro_batch_size"], 8)

    def test_a_worker_past_the_deadline_still_does_one_micro_batch(self):
        self.assertSucceeded(self.train(
            "mb-train-amb", 3, "--batch-size", "32", "--partitions", "4", "--time-limit", "0.5",
            "--steps", "3", "--induce", "1:0:1", "--clock", "virtual", "--comm-model", "0,0",
            "--compute-model", "1e-3,0", "--log", "late.h5"))
        log = read_log(self.path("late.h5"))
        self.assertEqual(list(log["workers"]["micro_batches"]), [1] * 6)
        self.assertEqual(list(log["steps"]["samples"]), [16] * 3)
        np.testing.assert_allclose(log["steps"]["step_time"], 1.008, rtol=1e-9)

    def test_auto_limit_matches_a_full_batch_under_the_compute_model(self):
        self.assertSucceeded(self.train(
            "mb-train-amb", 3, "--batch-size", "32", "--partitions", "4", "--time-limit", "auto",
            "--steps", "3", "--clock", "virtual", "--comm-model", "0,0", "--compute-model",
            "1e-3,2e-3", "--log", "auto.h5"))
        log = read_log(self.path("auto.h5"))
        self.assertAlmostEqual(log["config"]["time_limit"], 4 * (8e-3 + 2e-3), places=12)
        self.assertEqual(log["config"]["time_limit_option"], "auto")
        self.assertEqual(list(log["workers"]["micro_batches"]), [4] * 6)

    def test_decay_per_micro_batch_is_the_original_weight_decay(self):
        # 4 micro-batches of 6: the original's decay is 24 / 6 = 4 times FMB's.
        common = ["--batch-size", "24", "--steps", "6", "--seed", "5"]
        self.assertSucceeded(self.train("mb-train-fmb", 0, *common, "--weight-decay", "0.04",
                                        "--checkpoint", "fmb.h5"))
        self.assertSucceeded(self.train("mb-train-amb", 0, *common, "--weight-decay", "0.01",
                                        "--partitions", "4", "--time-limit", "1000",
                                        "--decay-per-micro-batch", "--checkpoint", "amb.h5"))
        self.assertSameParams("fmb.h5", "amb.h5", rtol=1e-5, atol=1e-6)

    def test_real_clock_runs_under_mpirun(self):
        for name, args in (
                ("ps", ["--comm", "ps", "--induce", "cedar", "--time-limit", "0.02"]),
                ("allreduce", ["--comm", "allreduce", "--time-limit", "auto"]),
                ("async", ["--comm", "ps", "--async", "--time-limit", "0.02"])):
            with self.subTest(name=name):
                self.assertSucceeded(self.train("mb-train-amb", 3, "--batch-size", "32",
                                                "--partitions", "8", "--steps", "8", *args,
                                                "--log", name + ".h5"))
                log = read_log(self.path(name + ".h5"))
                workers = log["workers"]
                self.assertTrue(np.all(workers["micro_batches"] >= 1))
                self.assertTrue(np.all(workers["micro_batches"] <= 8))
                np.testing.assert_array_equal(workers["samples"], 4 * workers["micro_batches"])
                self.assertGreater(log["config"]["time_limit"], 0)

    def test_bad_values_are_refused(self):
        cases = [
            (["--partitions", "4"], "--time-limit is required"),
            (["--partitions", "4", "--time-limit", "0"], "--time-limit 0 must be positive"),
            (["--partitions", "4", "--time-limit", "-1"], "--time-limit -1 must be positive"),
            (["--partitions", "4", "--time-limit", "soon"], "--time-limit: 'soon' is not"),
            (["--time-limit", "1"], "--partitions is required"),
            (["--partitions", "0", "--time-limit", "1"], "--partitions 0 must be at least 1"),
            (["--partitions", "33", "--time-limit", "1"],
             "--partitions 33 is larger than --batch-size 32"),
        ]
        for args, message in cases:
            with self.subTest(args=args):
                result = self.train("mb-train-amb", 0, "--batch-size", "32", "--steps", "1", *args)
                self.assertFailsWith(result, 2, message)


if __name__ == "__main__":
    mbtest.main()
