"""Straggler methods that drop late gradients (--backup-workers b, --k-sync K, --gradient-coding
s): each synchronous ps step uses the first gradients to be ready on the virtual clock (the wall
clock's: test_wall_selection.py) (under
gradient coding the first of each group of s + 1 workers on the same data) and cancels the
others.

- The step's arrivals, used and dropped gradients and step times, computed by hand from a
  compute model and fixed slowdowns, are what the log says.
- The degenerate cases (--backup-workers 0, --k-sync N of N workers) give FMB's bits; gradient
  coding's decoded gradient is FMB's over one worker per group, to the bit.
- --emulate N gives the bits of a process per worker (mpirun, --allreduce shm), FMB and AMB,
  with induced stragglers; a resumed emulated run gives a straight one's.
- What cannot drop gradients is refused naming both flags.
"""

import json
import shutil

import h5py
import numpy as np

import mbtest
from test_emulate import SameBits, ToyData, arrays

MPIRUN = shutil.which("mpirun")

COMMON = ["--model", "mlp", "--hidden", "16", "--optimizer", "momentum", "--lr", "0.05",
          "--threads", "1", "--batch-size", "20", "--steps", "6", "--eval-every", "3",
          "--clock", "virtual", "--compute-model", "0.002,0.001", "-q"]
STRAGGLERS = ["--induce", "niagara", "--slowdown", "2=1.5", "--comm-model", "25e-6,1e-9"]


class StragglerMethods(ToyData, SameBits, mbtest.ToolTestCase):

    def train(self, name, args, ranks=0, tool="mb-train-fmb"):
        return self.train_toy(tool, name, COMMON, args, ranks)

    def test_the_first_gradients_by_hand(self):
        # 4 workers (ranks 1-4), 20 samples each: 0.002 x 20 + 0.001 = 41 ms of compute; ranks 2
        # and 3 are slowed 2x and 3x (ready at 82 and 123 ms). Messages 1 ms each way, the
        # update free under a compute model.
        args = ["--comm", "ps", "--emulate", "4", "--slowdown", "2=2,3=3",
                "--comm-model", "0.001,0"]
        self.train("backup", [*args, "--backup-workers", "2"])
        self.train("k-sync", [*args, "--k-sync", "3"])
        self.train("all", args)
        cost = 0.002 * 20 + 0.001
        for name, used, last_ready in (("backup", [1, 4], cost), ("k-sync", [1, 2, 4], 2 * cost),
                                       ("all", [1, 2, 3, 4], 3 * cost)):
            with self.subTest(run=name), h5py.File(self.path(f"{name}-log.h5"), "r") as log:
                ranks = log["workers/rank"][...].reshape(6, 4)
                dropped = log["workers/dropped"][...].reshape(6, 4)
                for step in range(6):
                    self.assertEqual(sorted(ranks[step][dropped[step] == 0].tolist()), used)
                self.assertEqual(log["collect/gradients"][...].tolist(), [len(used)] * 6)
                self.assertEqual(log["steps/samples"][...].tolist(), [20 * len(used)] * 6)
                np.testing.assert_allclose(log["steps/step_time"][...], last_ready + 0.002,
                                           rtol=1e-6)  # stored as float32
                # A dropped worker is cancelled at the end: no wait; the used ones wait for the
                # last used gradient and the parameters' return.
                wait = log["workers/wait_time"][...].reshape(6, 4)
                self.assertTrue(np.all(wait[dropped == 1] == 0))
                samples = log["workers/samples"][...].reshape(6, 4)
                self.assertTrue(np.all(samples[dropped == 1] == 0))
                self.assertTrue(np.all(samples[dropped == 0] == 20))
                config = json.loads(mbtest.text_attrs(log)["config"])
                if name == "backup":
                    self.assertEqual(config["backup_workers"], 2)

    def test_no_gradient_dropped_is_fmb(self):
        args = ["--comm", "ps", "--emulate", "5", *STRAGGLERS]
        self.train("fmb", args)
        self.train("backup-0", [*args, "--backup-workers", "0"])
        self.train("k-sync-5", [*args, "--k-sync", "5"])
        self.assert_same_bits("backup-0", "fmb")
        self.assert_same_bits("k-sync-5", "fmb")
        with h5py.File(self.path("k-sync-5-log.h5"), "r") as log:
            self.assertTrue(np.all(log["workers/dropped"][...] == 0))

    def test_gradient_coding_decodes_the_whole_gradient_from_the_first_of_each_group(self):
        # 6 workers in groups {0,1,2} and {3,4,5} (ranks 1-3 and 4-6), each group on one half of
        # the data; ranks 1 and 6 slowed 3x, rank 2 2x: the first of each group is rank 3
        # (worker 2) and rank 4 (worker 3), ready after one batch's 41 ms.
        args = ["--comm", "ps", "--comm-model", "0.001,0"]
        self.train("coded", [*args, "--emulate", "6", "--gradient-coding", "2",
                             "--slowdown", "1=3,2=2,6=3"])
        self.train("two", [*args, "--emulate", "2"])
        with h5py.File(self.path("coded-log.h5"), "r") as log:
            ranks = log["workers/rank"][...].reshape(6, 6)
            dropped = log["workers/dropped"][...].reshape(6, 6)
            for step in range(6):
                self.assertEqual(sorted(ranks[step][dropped[step] == 0].tolist()), [3, 4])
            self.assertEqual(log["collect/gradients"][...].tolist(), [2] * 6)
            self.assertEqual(log["steps/samples"][...].tolist(), [40] * 6)
            np.testing.assert_allclose(log["steps/step_time"][...], 0.041 + 0.002, rtol=1e-6)
        # The parameters and optimizer state are those of FMB over two workers (one per group,
        # the groups' slices), to the bit: the master decoded the full gradient, averaged over
        # the used gradients' samples.
        coded, two = arrays(self.path("coded.h5"), False), arrays(self.path("two.h5"), False)
        self.assertIn("params/fc1.weight", coded)
        for name in coded:
            self.assertEqual(coded[name].tobytes(), two[name].tobytes(), msg=name)

    def test_drop_compute_is_ambs_round_with_its_own_threshold(self):
        # A fixed threshold: the round of mb-train-amb --time-limit T --partitions M, to the bit.
        args = ["--comm", "ps", "--emulate", "4", *STRAGGLERS, "--batch-size", "32"]
        self.train("drop", [*args, "--drop-compute", "0.05", "--micro-batches", "4"])
        self.train("amb", [*args, "--time-limit", "0.05", "--partitions", "4"], tool="mb-train-amb")
        self.assert_same_bits("drop", "amb")
        # auto: the threshold that maximises the expected samples per second, recorded with how
        # it was chosen; with exponential delays of 50 ms against 17 ms micro-batches, some
        # rounds are cut short.
        self.train("auto", ["--comm", "ps", "--emulate", "8", "--comm-model", "25e-6,1e-9",
                            "--induce", "exp:0.05", "--batch-size", "32", "--drop-compute", "auto",
                            "--micro-batches", "4", "--drop-last"])
        with h5py.File(self.path("auto-log.h5"), "r") as log:
            config = json.loads(mbtest.text_attrs(log)["config"])
            micro = log["workers/micro_batches"][...]
        self.assertEqual(config["drop_compute"], "auto")
        self.assertIn("DropCompute auto", config["time_limit_rule"])
        cost = 0.002 * 8 + 0.001
        self.assertGreater(config["time_limit"], cost)
        self.assertTrue(np.any(micro < 4) and np.any(micro == 4), msg=micro)
        # Without stragglers nothing is worth dropping: every round does its 4 micro-batches
        # (whole batches only: an epoch's short last batch has fewer).
        self.train("calm", ["--comm", "ps", "--emulate", "8", "--comm-model", "25e-6,1e-9",
                            "--batch-size", "32", "--drop-compute", "auto", "--drop-last"])
        with h5py.File(self.path("calm-log.h5"), "r") as log:
            self.assertTrue(np.all(log["workers/micro_batches"][...] == 4))
        if MPIRUN is not None:  # the choice and the run: the bits of a process per worker
            self.train("auto-ranks", ["--comm", "ps", "--allreduce", "shm", "--comm-model",
                                      "25e-6,1e-9", "--induce", "exp:0.05", "--batch-size", "32",
                                      "--drop-compute", "auto", "--micro-batches", "4",
                                      "--drop-last"], ranks=9)
            self.assert_same_bits("auto", "auto-ranks")

    def test_emulated_workers_have_the_bits_of_a_process_per_worker(self):
        if MPIRUN is None:
            self.skipTest("mpirun is not installed")
        amb = ["--batch-size", "32", "--partitions", "4", "--time-limit", "0.05"]
        for tool, extra, rule, used in (("mb-train-fmb", [], ["--backup-workers", "3"], 5),
                                        ("mb-train-amb", amb, ["--backup-workers", "3"], 5),
                                        ("mb-train-fmb", [], ["--gradient-coding", "3"], 2)):
            with self.subTest(tool=tool, rule=rule):
                name = tool[-3:] + rule[0]
                args = [*extra, "--comm", "ps", *STRAGGLERS, *rule]
                # On the virtual clock, nothing timed between them: at once.
                self.together(
                    lambda: self.train(f"{name}-emulated", [*args, "--emulate", "8"], tool=tool),
                    lambda: self.train(f"{name}-ranks", [*args, "--allreduce", "shm"], ranks=9,
                                       tool=tool))
                self.assert_same_bits(f"{name}-emulated", f"{name}-ranks")
                with h5py.File(self.path(f"{name}-emulated-log.h5"), "r") as log:
                    self.assertEqual(log["collect/gradients"][...].tolist(), [used] * 6)
                    self.assertEqual(int(log["workers/dropped"][...].sum()), (8 - used) * 6)

    def test_a_resumed_run_has_the_bits_of_a_straight_one(self):
        args = ["--comm", "ps", "--emulate", "6", *STRAGGLERS, "--k-sync", "4"]
        self.train("straight", args)
        self.train("resumed", [*args, "--steps", "3"])
        result = mbtest.run([mbtest.tool("mb-train-fmb"), "--data", "toy.h5", *COMMON, *args,
                             "--log", "resumed-log.h5", "--checkpoint", "resumed.h5",
                             "--resume", "resumed.h5"], cwd=self.dir, env=self.env)
        self.assertSucceeded(result)
        self.assert_same_bits("resumed", "straight", skip={"epoch"})
        # A resume that changes the rule is refused like any change of the training.
        result = mbtest.run([mbtest.tool("mb-train-fmb"), "--data", "toy.h5", *COMMON,
                             *[a if a != "4" else "5" for a in args], "--steps", "8",
                             "--log", "changed-log.h5", "--checkpoint", "resumed.h5",
                             "--resume", "resumed.h5"], cwd=self.dir, env=self.env)
        self.assertNotEqual(result.rc, 0)
        self.assertIn("--k-sync", result.err)

    def test_what_cannot_drop_gradients_is_refused_naming_both_flags(self):
        model = ["--comm-model", "0.001,0"]
        cases = [
            (["--backup-workers", "1", "--k-sync", "3"], "--k-sync 3"),
            (["--backup-workers", "1", "--servers", "2"], "--servers"),
            (["--backup-workers", "1", "--async"], "--async"),
            (["--backup-workers", "1", "--comm", "allreduce"], "--comm allreduce"),
            (["--k-sync", "2", "--compress", "fp16"], "--compress"),
            (["--backup-workers", "4", "--emulate", "4", *model], "below the 4 workers"),
            (["--k-sync", "5", "--emulate", "4", *model], "at most the 4 workers"),
            (["--backup-workers", "-1"], "--backup-workers"),
            (["--gradient-coding", "1", "--k-sync", "2"], "--k-sync 2"),
            (["--gradient-coding", "1", "--emulate", "5", *model], "groups of 2"),
            (["--drop-compute", "0.05", "--async"], "--async"),
            (["--drop-compute", "soon"], "SECONDS or auto"),
            (["--drop-compute", "-1"], "SECONDS or auto"),
            (["--micro-batches", "8"], "--drop-compute"),
            (["--micro-batches", "0", "--drop-compute", "auto"], "at least 1"),
            (["--micro-batches", "21", "--drop-compute", "auto"], "larger than the 20"),

        ]
        for extra, named in cases:
            with self.subTest(extra=extra):
                result = mbtest.run([mbtest.tool("mb-train-fmb"), "--data", "toy.h5", *COMMON,
                                     *extra], cwd=self.dir, env=self.env)
                self.assertEqual(result.rc, 2, msg=result.err)
                self.assertIn(named, result.err)
                self.assertIn(extra[0], result.err)
                self.assertEqual(len(result.err.strip().splitlines()), 1, msg=result.err)
        per_worker = [a for a in COMMON if a not in ("--batch-size", "20")]
        result = mbtest.run([mbtest.tool("mb-train-fmb"), "--data", "toy.h5", *per_worker,
                             "--gradient-coding", "1", "--global-batch-size", "64"],
                            cwd=self.dir, env=self.env)
        self.assertEqual(result.rc, 2, msg=result.err)
        self.assertIn("--gradient-coding 1 and --global-batch-size", result.err)
        result = mbtest.run([mbtest.tool("mb-train-amb"), "--data", "toy.h5", *COMMON,
                             "--time-limit", "0.05", "--partitions", "2", "--drop-compute", "0.1"],
                            cwd=self.dir, env=self.env)
        self.assertEqual(result.rc, 2, msg=result.err)
        self.assertIn("--drop-compute 0.1 and mb-train-amb", result.err)
        no_compute = [a for a in COMMON if a not in ("--compute-model", "0.002,0.001")]
        result = mbtest.run([mbtest.tool("mb-train-fmb"), "--data", "toy.h5", *no_compute,
                             "--backup-workers", "1", "--emulate", "4", *model],
                            cwd=self.dir, env=self.env)
        self.assertEqual(result.rc, 2, msg=result.err)
        self.assertIn("--compute-model", result.err)


if __name__ == "__main__":
    mbtest.main()
