"""mb-train-dbsl: --plan prints the paper's Table 2 (and JSON); under mpirun -n 3 (a server, a
large and a small worker) on the virtual clock the plan of unequal devices, the push order and
the push times are the hand-computed ones, and --sync merges rounds; a wall-clock run; resume
continues the push count and the log; mb-eval, mb-report and mb-plot read the results; bad
plans and bad flags are one clear line and exit status 2."""

import json
import os
import re
import shutil

import h5py

import mbtest

MPIRUN = shutil.which("mpirun")
GTX1080 = "0.00056607,0.014041204"


def read_log(path):
    with h5py.File(path, "r", swmr=True) as log:
        tables = {group: {name: log[group][name][...] for name in log[group]}
                  for group in ("steps", "eval", "workers")}
        attrs = mbtest.text_attrs(log)
        tables["config"] = json.loads(attrs["config"])
        tables["tool"] = attrs["tool"]
    return tables


class DualBatchSizeLearning(mbtest.ToolTestCase):
    def setUp(self):
        super().setUp()
        self.assertIsNotNone(MPIRUN, "mpirun (openmpi-bin) is required")
        result = self.mb_dataset("synth", "toy", "--learnable", "--train", "64", "--test", "40",
                                 "-o", self.path("toy.h5"))
        self.assertSucceeded(result)

    def dbsl(self, *args, ranks=3, timeout=120):
        command = [mbtest.tool("mb-train-dbsl"), *args]
        if ranks > 0:
            command = [MPIRUN, "--allow-run-as-root", "--oversubscribe", "-n", str(ranks),
                       *command]
        return mbtest.run(command, cwd=self.dir, env=self.env, timeout=timeout)

    def train(self, *args, ranks=3):
        # N = 64 samples, 2 workers, the second small; B_L = 16, k = 1.25.
        return self.dbsl("--data", self.path("toy.h5"), "--model", "mlp", "--hidden", "16",
                         "--threads", "1", "--lr", "0.05", "--base-batch", "16", "--extra-time",
                         "1.25", "--small-workers", "1", "-q", *args, ranks=ranks)

    def test_plan_is_table_2(self):
        for small, batch, samples in ((1, 83, 10625), (2, 154, 11875), (3, 205, 12291),
                                      (4, 242, 12500)):
            with self.subTest(small=small):
                result = self.dbsl("--plan", "--workers", "4", "--train-samples", "50000",
                                   "--time-model-ab", GTX1080, "--base-batch", "500",
                                   "--extra-time", "1.05", "--small-workers", str(small),
                                   "--json", ranks=0)
                self.assertSucceeded(result)
                plan = json.loads(result.out)["plan"]
                self.assertEqual([p["kind"] for p in plan],
                                 ["large"] * (4 - small) + ["small"] * small)
                self.assertEqual({(p["batch"], p["samples"]) for p in plan if p["kind"] == "small"},
                                 {(batch, samples)})
                self.assertTrue(all((p["batch"], p["samples"]) == (500, 13125)
                                    for p in plan if p["kind"] == "large"))
                # The paper's Table 4: about 7.8 s per round on a GTX 1080.
                for p in plan:
                    self.assertAlmostEqual(p["predicted_round_time"], 7.8, delta=0.05)
        table = self.dbsl("--plan", "--workers", "4", "--train-samples", "50000",
                          "--time-model-ab", GTX1080, "--base-batch", "500", "--extra-time",
                          "1.1", "--small-workers", "1", ranks=0)
        self.assertSucceeded(table)
        self.assertRegex(table.out, r"4\s+small\s+38\s+8750\s")
        self.assertRegex(table.out, r"1\s+large\s+500\s+13750\s")

    def test_plan_takes_n_from_the_data_and_the_launcher(self):
        env = dict(self.env, OMPI_COMM_WORLD_SIZE="3")  # what mpirun -n 3 tells each rank
        result = mbtest.run([mbtest.tool("mb-train-dbsl"), "--plan", "--data", self.path("toy.h5"),
                             "--time-model-ab", "0.001,0.01", "--base-batch", "16",
                             "--extra-time", "1.25", "--small-workers", "1", "--json"],
                            cwd=self.dir, env=env)
        self.assertSucceeded(result)
        plan = json.loads(result.out)
        self.assertEqual((plan["train_samples"], plan["workers"]), (64, 2))
        self.assertEqual([(p["batch"], p["samples"]) for p in plan["plan"]], [(16, 40), (5, 24)])

    def test_virtual_clock_plan_push_order_and_times(self):
        # Rank 1 is twice as slow (--slowdown 1=2): models 2,20 ms and 1,10 ms per sample and
        # per batch. T0 = 64 / (1/3.25 ms + 1/1.625 ms) = 69.33 ms, T = 1.25 T0 = 86.67 ms.
        # Rank 1 (large) takes int(T / 3.25 ms) = 26 samples at 16: batches of 16 and 10,
        # 2 x 10 ms + 26 x 1 ms = 46 ms, doubled: 92 ms. Rank 2 (small) takes the other 38 at
        # int(10 ms / (T / 38 - 1 ms)) = 7: 6 batches, 60 + 38 = 98 ms.
        # Messages cost 4 ms. Both start at 4 ms. Rank 1 arrives at 4 + 92 + 4 = 100 ms, its next
        # round starts at 104 ms: a push every 100 ms; rank 2 arrives at 106 ms and every
        # 106 ms after.
        self.assertSucceeded(self.train(
            "--clock", "virtual", "--comm-model", "0.004,0", "--compute-model", "0.001,0.01",
            "--slowdown", "1=2", "--epochs", "4", "--eval-every", "1", "--log", "v.h5"))
        log = read_log(self.path("v.h5"))
        self.assertEqual(log["tool"], "mb-train-dbsl")
        plan = log["config"]["dbsl"]
        self.assertEqual((plan["batch"], plan["samples"], plan["small"]),
                         ([16, 7], [26, 38], [False, True]))
        # f = d / what the same device takes as a large worker: int(T / 1.625 ms) = 53.
        self.assertEqual(plan["factor"][0], 1)
        self.assertAlmostEqual(plan["factor"][1], 38 / 53)
        expected = [(0.100, 1), (0.106, 2), (0.200, 1), (0.212, 2), (0.300, 1), (0.318, 2),
                    (0.400, 1), (0.424, 2)]
        self.assertEqual(list(log["steps"]["step"]), list(range(1, 9)))
        self.assertEqual(list(log["workers"]["rank"]), [r for _, r in expected])
        for got, (want, _) in zip(log["steps"]["time"], expected):
            self.assertAlmostEqual(got, want, places=9)
        self.assertEqual(list(log["workers"]["samples"]), [26, 38] * 4)
        self.assertEqual(list(log["workers"]["micro_batches"]), [2, 6] * 4)
        self.assertEqual(list(log["steps"]["epoch"]), [0.5 * i for i in range(1, 9)])
        # The test loss and accuracy after every push, at the push's time.
        self.assertEqual(list(log["eval"]["step"]), list(range(1, 9)))
        for got, (want, _) in zip(log["eval"]["time"], expected):
            self.assertAlmostEqual(got, want, places=9)
        # The paper's figure: test accuracy and loss against the epoch.
        plot = mbtest.run([mbtest.tool("mb-plot"), self.path("v.h5"), "--type", "epoch-curves",
                           "-o", self.path("epochs.png")], cwd=self.dir, env=self.env)
        self.assertSucceeded(plot)
        self.assertTrue(os.path.getsize(self.path("epochs.png")) > 0)

    def test_calibrate_measures_the_compute_model(self):
        # Under a compute model each worker's timed batches are its cost exactly: the fit is the
        # model (r^2 = 1) and the plan, push order and times are those of the --compute-model
        # plan (test_virtual_clock_plan_push_order_and_times without the slowdown and messages:
        # 40 samples at 16 every 70 ms, 24 at 5 every 74 ms).
        result = self.train("--clock", "virtual", "--comm-model", "0,0", "--compute-model",
                            "0.001,0.01", "--calibrate", "--epochs", "2", "--log", "cal.h5")
        self.assertSucceeded(result)
        log = read_log(self.path("cal.h5"))
        plan = log["config"]["dbsl"]
        self.assertEqual((plan["batch"], plan["samples"]), ([16, 5], [40, 24]))
        for a, b, r2 in zip(plan["calibrated_a"], plan["calibrated_b"],
                            plan["calibrated_r_squared"]):
            self.assertAlmostEqual(a, 0.001, places=12)
            self.assertAlmostEqual(b, 0.01, places=12)
            self.assertAlmostEqual(r2, 1.0, places=9)
        for got, want in zip(log["steps"]["time"], (0.070, 0.074, 0.140, 0.148)):
            self.assertAlmostEqual(got, want, places=9)

    def test_sync_merges_a_round_of_every_worker(self):
        # No slowdown, no message cost: rank 1 takes 40 samples at 16 (3 batches, 70 ms),
        # rank 2 24 at 5 (5 batches, 74 ms); a round ends with the slower, every 74 ms.
        self.assertSucceeded(self.train(
            "--clock", "virtual", "--comm-model", "0,0", "--compute-model", "0.001,0.01",
            "--epochs", "3", "--sync", "--log", "s.h5", "--checkpoint", "s-ckpt.h5"))
        log = read_log(self.path("s.h5"))
        self.assertEqual(list(log["steps"]["step"]), [2, 4, 6])
        for got, want in zip(log["steps"]["time"], (0.074, 0.148, 0.222)):
            self.assertAlmostEqual(got, want, places=9)
        self.assertEqual(list(log["steps"]["samples"]), [64] * 3)
        self.assertEqual(list(log["workers"]["rank"]), [1, 2] * 3)
        evaluated = mbtest.run([mbtest.tool("mb-eval"), self.path("s-ckpt.h5"), "--data",
                                self.path("toy.h5"), "--json"], cwd=self.dir, env=self.env)
        self.assertSucceeded(evaluated)

    def test_wall_clock_run(self):
        self.assertSucceeded(self.train("--time-model-ab", "0.001,0.01", "--epochs", "3",
                                        "--log", "w.h5", "--checkpoint", "w-ckpt.h5",
                                        "--update-factor", "sqrt"))
        log = read_log(self.path("w.h5"))
        self.assertEqual(list(log["steps"]["step"]), list(range(1, 7)))
        # Each push is a whole round of its worker: 40 samples from rank 1, 24 from rank 2.
        for rank, samples in zip(log["workers"]["rank"], log["workers"]["samples"]):
            self.assertEqual(samples, {1: 40, 2: 24}[int(rank)])
        self.assertAlmostEqual(log["config"]["dbsl"]["factor"][1], (24 / 40) ** 0.5)
        self.assertEqual(len(log["eval"]["step"]), 1)  # at the end
        report = mbtest.run([mbtest.tool("mb-report"), self.path("w.h5")], cwd=self.dir,
                            env=self.env)
        self.assertSucceeded(report)
        self.assertIn("mb-train-dbsl", report.out)

    def test_resume_continues_the_push_count_and_the_log(self):
        common = ["--clock", "virtual", "--comm-model", "0,0", "--compute-model", "0.001,0.01",
                  "--checkpoint", "c.h5", "--log", "r.h5"]
        self.assertSucceeded(self.train(*common, "--epochs", "2"))
        self.assertEqual(list(read_log(self.path("r.h5"))["steps"]["step"]), [1, 2, 3, 4])
        self.assertSucceeded(self.train(*common, "--epochs", "4", "--resume", "auto"))
        log = read_log(self.path("r.h5"))
        self.assertEqual(list(log["steps"]["step"]), list(range(1, 9)))
        # Both workers restart their rounds at the checkpoint's 148 ms: 70 and 74 ms later.
        for got, want in zip(log["steps"]["time"][4:], (0.218, 0.222, 0.288, 0.296)):
            self.assertAlmostEqual(got, want, places=9)
        with h5py.File(self.path("c.h5"), "r") as checkpoint:
            self.assertEqual(int(checkpoint.attrs["step"]), 8)
        self.assertNoStrayFiles()

    def test_bad_plans_and_flags(self):
        plan = ["--plan", "--workers", "4", "--train-samples", "50000", "--time-model-ab",
                GTX1080, "--base-batch", "500"]
        cases = [
            ([*plan, "--extra-time", "0.9"], "--extra-time 0.9 must be at least 1"),
            ([*plan, "--small-workers", "5"], "at most 4 can be small"),
            ([*plan, "--extra-time", "1.32", "--small-workers", "1"],
             "impossible plan: small worker 4"),
            ([*plan, "--extra-time", "1.4", "--small-workers", "1"], "none is left"),
            (["--plan", "--workers", "4", "--train-samples", "50000", "--base-batch", "500"],
             "--plan needs a time model"),
            (["--plan", "--train-samples", "500", "--time-model-ab", "1,2", "--base-batch", "5"],
             "--plan needs --workers"),
            ([*plan[:-4], "--time-model-ab", "0.1", "--base-batch", "500"],
             "--time-model-ab: '0.1' is not A,B"),
            (["--data", "toy.h5", "--base-batch", "16", "--epochs", "1", "--time-model-ab",
              "1,2"], "needs a parameter server and workers"),
            (["--data", "toy.h5", "--base-batch", "16", "--epochs", "1"],
             "the plan needs a time model"),
            (["--data", "toy.h5", "--base-batch", "16", "--epochs", "1", "--time-model-ab",
              "1,2", "--update-factor", "square"], "--update-factor: 'square'"),
            (["--data", "toy.h5", "--base-batch", "16", "--epochs", "1", "--time-model-ab",
              "1,2", "--async"], "--async"),
        ]
        for args, text in cases:
            with self.subTest(args=args):
                self.assertFailsWith(self.dbsl(*args, ranks=0), 2, text)

    def test_help_lists_no_method_that_dbsl_refuses(self):
        # The asynchronous options and mb-train-fmb's straggler methods are refused
        # by DBSL: not its options at all (mb-train-fmb lists them), so given, they are unknown.
        refused = ["--async", "--async-min-grads", "--async-master-time-limit",
                   "--async-delay-std", "--k-batch-async", "--k-async", "--staleness-bound",
                   "--backup-workers", "--k-sync", "--gradient-coding",
                   "--local-steps", "--adacomm-tau0", "--adacomm-interval", "--k-batch-sync",
                   "--drop-compute", "--micro-batches",
                   "--comm", "--allreduce", "--bucket-mb", "--servers", "--compress"]

        def listed(tool):
            result = mbtest.run([mbtest.tool(tool), "--help"])
            self.assertSucceeded(result)
            # The options' column (an option group's lines are indented 2 to 4).
            return set(re.findall(r"^ {2,4}(--[a-z][a-z0-9-]*)", result.out, re.M))

        dbsl, fmb = listed("mb-train-dbsl"), listed("mb-train-fmb")
        self.assertEqual([flag for flag in refused if flag not in fmb], [])
        self.assertEqual([flag for flag in refused if flag in dbsl], [])
        # What DBSL takes of the same groups is still listed.
        for flag in ("--induce", "--clock", "--comm-model", "--compute-model", "--emulate",
                     "--comm-timeout"):
            self.assertIn(flag, dbsl)
        self.assertFailsWith(self.dbsl("--data", "toy.h5", "--base-batch", "16", "--epochs", "1",
                                       "--time-model-ab", "1,2", "--k-sync", "1", ranks=0),
                             2, "unknown option '--k-sync'")

    def write_time_model(self, name, a, b):
        """A time-model file as mbkit-formats(5) describes it, with the given a and b."""
        import numpy as np
        with h5py.File(self.path(name), "w") as f:
            f.attrs["format"] = np.bytes_("mbkit-time-model")
            f.attrs["format_version"] = np.int64(1)
            f.attrs["created_by"] = np.bytes_("test")
            device = f.create_group("devices/0")
            for key, value in (("host", "h"), ("model", "mlp"), ("device", "cpu"),
                               ("cpu_model", "test")):
                device.attrs[key] = np.bytes_(value)
            device.attrs["rank"] = np.int64(0)
            device.attrs["threads"] = np.int64(1)
            device.attrs["libraries"] = np.array([b"HDF5 1.10"])
            for key, value in (("a", a), ("b", b), ("r_squared", 1.0),
                               ("max_relative_residual", 0.0)):
                device.attrs[key] = np.float64(value)
            device.attrs["batch_sizes"] = np.array([8.0, 16.0])
            device.attrs["seconds"] = np.array([8 * a + b, 16 * a + b])

    def test_a_time_model_file_is_held_to_what_time_model_ab_is(self):
        """A file with a negative or zero a and b was accepted ("round -17.0000 s"), or the
        plan blamed --extra-time: a data error naming the file, as --time-model-ab refuses the
        same values."""
        plan = ["--plan", "--workers", "4", "--train-samples", "50000", "--base-batch", "500",
                "--small-workers", "1", "--extra-time", "1.1"]
        self.write_time_model("good.h5", 0.00056607, 0.014041204)
        self.assertSucceeded(self.dbsl(*plan, "--time-model", "good.h5", ranks=0))
        for name, a, b, text in (("negative-a.h5", -0.001, 0.01, "a = -0.001 s per sample is negative"),
                                 ("negative-b.h5", 0.001, -17.0, "b = -17 s per batch is negative"),
                                 ("zero.h5", 0.0, 0.0, "a and b are both 0")):
            with self.subTest(file=name):
                self.write_time_model(name, a, b)
                result = self.dbsl(*plan, "--time-model", name, ranks=0)
                self.assertFailsWith(result, 3, text)
                self.assertIn(name, result.err)
                self.assertNotIn("--extra-time", result.err)


if __name__ == "__main__":
    # The tests at once, three at a time: most of each is the tools' start-up and end, waits
    # that overlap.
    mbtest.main(at_once=3)
