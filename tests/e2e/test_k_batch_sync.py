"""K-batch-sync SGD (mb-train-fmb --k-batch-sync K, Dutta et al. 2018): every worker computes
batches back to back from the step's parameters; the step ends when K batches are done over all
workers (T*, on the virtual clock from a compute model) and sums every finished batch's gradient.

- The step's end, each worker's batch count and samples, computed by hand from a compute model
  and fixed slowdowns, are what the log says; an epoch is K batches' samples a step.
- K = W equal workers without delays is FMB, to the bit.
- --emulate N gives the bits of a process per worker (mpirun, --allreduce shm), ps with N = 3
  and 8 and allreduce with 3, with induced stragglers; a resumed run gives a straight one's.
- A missing compute model, the other round rules and the wall clock's allreduce are refused
  naming the flag (the wall clock's K-batch-sync under mpirun: test_wall_selection.py).
"""

import json
import shutil

import h5py
import numpy as np

import mbtest
from test_emulate import SameBits

MPIRUN = shutil.which("mpirun")

COMMON = ["--model", "mlp", "--hidden", "16", "--optimizer", "momentum", "--lr", "0.05",
          "--threads", "1", "--batch-size", "20", "--steps", "6", "--eval-every", "3",
          "--clock", "virtual", "--compute-model", "0.002,0.001", "-q"]
STRAGGLERS = ["--induce", "niagara", "--slowdown", "2=1.5", "--comm-model", "25e-6,1e-9"]


class KBatchSync(SameBits, mbtest.ToolTestCase):
    def setUp(self):
        super().setUp()
        self.assertSucceeded(self.mb_dataset("synth", "toy", "--learnable", "--train", "400",
                                             "--test", "90", "--seed", "3", "-o",
                                             self.path("toy.h5")))

    def train(self, name, args, ranks=0, extra=()):
        return self.train_toy("mb-train-fmb", name, COMMON, args, ranks, extra)

    def test_the_step_by_hand(self):
        # 3 workers (ranks 1-3), batches of 20 at 0.002 x 20 + 0.001 = 41 ms; ranks 2 and 3 are
        # slowed 2x and 3x. Completions: worker 0 at 41, 82, 123 ms; worker 1 at 82, 164; worker
        # 2 at 123. K = 3: 41 (w0), 82 (w0, the lower worker of the tie), 82 (w1): T* = 82 ms,
        # worker 0 computes 2 batches, worker 1 one, worker 2 none (it sends zeros). Messages
        # 1 ms each way, the update free under a compute model. Whole batches only (--drop-last:
        # an epoch's short last batch would be done sooner).
        self.train("k3", ["--comm", "ps", "--emulate", "3", "--slowdown", "2=2,3=3",
                          "--comm-model", "0.001,0", "--k-batch-sync", "3", "--drop-last"])
        cost = 0.002 * 20 + 0.001
        with h5py.File(self.path("k3-log.h5"), "r") as log:
            samples = log["workers/samples"][...].reshape(6, 3)
            batches = log["workers/micro_batches"][...].reshape(6, 3)
            dropped = log["workers/dropped"][...].reshape(6, 3)
            self.assertEqual(log["workers/rank"][...].reshape(6, 3).tolist(), [[1, 2, 3]] * 6)
            self.assertEqual(samples.tolist(), [[40, 20, 0]] * 6)
            self.assertEqual(batches.tolist(), [[2, 1, 0]] * 6)
            self.assertEqual(dropped.tolist(), [[0, 0, 1]] * 6)
            self.assertEqual(log["steps/samples"][...].tolist(), [60] * 6)
            self.assertEqual(log["collect/gradients"][...].tolist(), [2] * 6)
            np.testing.assert_allclose(log["steps/step_time"][...], 2 * cost + 0.002,
                                       rtol=1e-6)  # stored as float32
            # An epoch is the 400 rows at 60 samples a step: 7 steps.
            np.testing.assert_allclose(log["steps/epoch"][...], np.arange(1, 7) / 7, rtol=1e-6)
            config = json.loads(mbtest.text_attrs(log)["config"])
        self.assertEqual(config["k_batch_sync"], 3)
        # The start table says the rule and the samples of a step.
        loud = [a for a in COMMON if a != "-q"]
        result = mbtest.run([mbtest.tool("mb-train-fmb"), "--data", "toy.h5", *loud, "--comm", "ps",
                             "--emulate", "3", "--comm-model", "0.001,0", "--k-batch-sync", "3",
                             "--steps", "1"], cwd=self.dir, env=self.env)
        self.assertSucceeded(result)
        self.assertIn("K-batch-sync: a step ends when 3 batches are done over all workers "
                      "(60 samples)", result.err)
        self.assertIn("7 steps per epoch", result.err)

    def test_k_of_k_equal_workers_is_fmb(self):
        args = ["--comm", "ps", "--emulate", "4", "--comm-model", "25e-6,1e-9"]
        self.train("fmb", args)
        self.train("k4", [*args, "--k-batch-sync", "4"])
        self.assert_same_bits("k4", "fmb")

    def test_emulated_workers_have_the_bits_of_a_process_per_worker(self):
        if MPIRUN is None:
            self.skipTest("mpirun is not installed")
        for comm, workers, k in (("ps", 3, 5), ("ps", 8, 12), ("allreduce", 3, 5)):
            with self.subTest(comm=comm, workers=workers):
                name = f"{comm}{workers}"
                args = ["--comm", comm, *STRAGGLERS, "--k-batch-sync", str(k)]
                self.train(f"e{name}", [*args, "--emulate", str(workers)])
                # A rank's loader prefetches: the batch sizes ahead are its reader's, not its thread's.
                self.train(f"r{name}", [*args, "--allreduce", "shm", "--prefetch", "2"],
                           ranks=workers + (comm == "ps"))
                self.assert_same_bits(f"e{name}", f"r{name}")
                with h5py.File(self.path(f"e{name}-log.h5"), "r") as log:
                    samples = log["workers/samples"][...].reshape(6, workers)
                    self.assertEqual(log["steps/samples"][...].tolist(),
                                     samples.sum(axis=1).tolist())
                    batches = log["workers/micro_batches"][...].reshape(6, workers)
                # Stragglers make the counts differ between workers and steps; an epoch's short
                # last batch (a slice of 50 rows: 20, 20, 10) is read in turn.
                self.assertTrue(np.all(batches.sum(axis=1) == k), msg=batches)
                self.assertTrue(np.all(samples <= 20 * batches), msg=samples)
                self.assertTrue(np.any(samples % 20 != 0), msg=samples)
                self.assertGreater(len(np.unique(batches)), 1, msg=batches)

    def test_a_resumed_run_has_the_bits_of_a_straight_one(self):
        args = ["--comm", "ps", "--emulate", "3", *STRAGGLERS, "--k-batch-sync", "5"]
        self.train("straight", args)
        self.train("resumed", [*args, "--steps", "3"])
        self.train("resumed", args, extra=["--resume", "resumed.h5"])
        self.assert_same_bits("resumed", "straight", skip={"epoch"})
        if MPIRUN is not None:  # the replay of the steps done, gathered from every rank
            ranks = ["--comm", "ps", *STRAGGLERS, "--k-batch-sync", "5", "--allreduce", "shm"]
            self.train("ranks", [*ranks, "--steps", "3"], ranks=4)
            self.train("ranks", ranks, ranks=4, extra=["--resume", "ranks.h5"])
            self.assert_same_bits("ranks", "straight", skip={"epoch"})

    def test_what_cannot_plan_its_batches_is_refused_naming_the_flag(self):
        no_compute = [a for a in COMMON if a not in ("--compute-model", "0.002,0.001")]
        cases = [
            (no_compute, ["--clock", "wall", "--comm", "allreduce"], "--comm allreduce"),
            (no_compute, ["--emulate", "3", "--comm-model", "0.001,0"], "--compute-model"),
            (COMMON, ["--k-sync", "2"], "--k-sync"),
            (COMMON, ["--drop-compute", "0.05"], "--drop-compute"),
            (COMMON, ["--async"], "--async"),
        ]
        for common, extra, named in cases:
            with self.subTest(extra=extra):
                result = mbtest.run([mbtest.tool("mb-train-fmb"), "--data", "toy.h5", *common,
                                     "--k-batch-sync", "2", *extra], cwd=self.dir, env=self.env)
                self.assertEqual(result.rc, 2, msg=result.err)
                self.assertIn("--k-batch-sync 2", result.err)
                self.assertIn(named, result.err)
                self.assertEqual(len(result.err.strip().splitlines()), 1, msg=result.err)
        result = mbtest.run([mbtest.tool("mb-train-amb"), "--data", "toy.h5", *COMMON,
                             "--time-limit", "0.05", "--partitions", "2", "--k-batch-sync", "2"],
                            cwd=self.dir, env=self.env)
        self.assertEqual(result.rc, 2, msg=result.err)
        self.assertIn("--k-batch-sync 2 and mb-train-amb", result.err)


if __name__ == "__main__":
    mbtest.main()
