"""The straggler methods that drop late gradients (--backup-workers, --k-sync, --gradient-coding)
on the wall clock, a process per worker under mpirun: the master takes the gradients as they
really arrive and steps with the first ones the rule selects; a late gradient is discarded and
its worker goes on from the newest parameters.

- A worker that sleeps 0.3 s a round is dropped at (almost) every step, and the steps take far
  less than its sleep; K-sync with the same K does the same.
- AMB's rounds (mb-train-amb) with a slow worker: its late rounds are abandoned after their
  first micro-batch, once the master has made their step (a notice between micro-batches); the
  steps, the fast workers' rows and the exit status are as without it; the late rounds' rows
  show no micro-batch, and the master's -v summary counts the rounds and the micro-batches they
  computed.
- --backup-workers 0 is FMB, to the bit.
- Gradient coding with a slow worker decodes the whole gradient: the parameters are FMB's over
  one worker per group (a rank-order sum), to the bit.
- K-batch-sync (--k-batch-sync K): every step sums K batches from any workers; a worker that
  sleeps 0.3 s a step contributes fewer batches than the fast ones; K = the workers with equal
  workers trains too and resumes from its checkpoint; each run ends with exit 0. What it cannot
  run with on the wall clock is refused in one line naming both flags.
"""

import re
import shutil

import h5py
import numpy as np

import mbtest
from test_emulate import SameBits, arrays

MPIRUN = shutil.which("mpirun")

COMMON = ["--model", "mlp", "--hidden", "16", "--optimizer", "momentum", "--lr", "0.05",
          "--threads", "1", "--batch-size", "20", "--eval-every", "5", "--clock", "wall",
          "--comm", "ps", "-q"]
SLEEP = 0.3  # seconds the slow worker sleeps before each round
# The log's columns of wall seconds, which differ between any two runs.
WALL_TIMES = {"time", "step_time", "throughput", "wait_time", "compute_time", "send_time",
              "recv_time", "exit_time"}


class WallSelection(SameBits, mbtest.ToolTestCase):
    def setUp(self):
        super().setUp()
        if MPIRUN is None:
            self.skipTest("mpirun is not installed")
        self.assertSucceeded(self.mb_dataset("synth", "toy", "--learnable", "--train", "400",
                                             "--test", "90", "--seed", "3", "-o",
                                             self.path("toy.h5")))

    def slow_last(self, workers):
        """A delay trace (one step, repeated): the last of `workers` sleeps SLEEP a round."""
        with open(self.path("slow.csv"), "w") as out:
            out.write("worker,step,seconds\n")
            for w in range(workers):
                out.write(f"{w},0,{SLEEP if w == workers - 1 else 0}\n")
        return ["--induce", "trace:slow.csv"]

    def train(self, name, ranks, args):
        command = [MPIRUN, "--oversubscribe", "-n", str(ranks), mbtest.tool("mb-train-fmb"),
                   "--data", "toy.h5", *COMMON, *args,
                   "--log", f"{name}-log.h5", "--checkpoint", f"{name}.h5"]
        result = mbtest.run(command, cwd=self.dir, env=self.env, timeout=120)
        self.assertSucceeded(result)
        return result

    def test_a_slow_worker_is_dropped_and_does_not_slow_the_steps(self):
        steps = 20
        for name, rule in (("backup", ["--backup-workers", "1"]), ("k-sync", ["--k-sync", "2"])):
            self.train(name, 4, ["--steps", str(steps), *self.slow_last(3), *rule])
            with self.subTest(rule=rule), h5py.File(self.path(f"{name}-log.h5"), "r") as log:
                ranks = log["workers/rank"][...].reshape(steps, 3)
                dropped = log["workers/dropped"][...].reshape(steps, 3)
                self.assertTrue(np.all(ranks == [1, 2, 3]))
                # Rank 3 sleeps 0.3 s a round; the others step every few milliseconds.
                self.assertGreaterEqual(int(dropped[:, 2].sum()), steps - 2, msg=dropped)
                self.assertEqual(log["collect/gradients"][...].tolist(), [2] * steps)
                # Two batches of 20 (an epoch's last of a 133-row slice: 13) per step.
                samples = log["workers/samples"][...].reshape(steps, 3)
                self.assertTrue(np.all(samples[dropped == 1] == 0))
                self.assertTrue(np.all(np.isin(samples[dropped == 0], [13, 20])), msg=samples)
                self.assertEqual(log["steps/samples"][...].tolist(),
                                 samples.sum(axis=1).tolist())
                # The first step also waits for every rank's start-up (FMB's too).
                step_time = log["steps/step_time"][1:]
                self.assertLess(float(np.mean(step_time)), SLEEP / 3, msg=step_time)
                self.assertEqual(log["eval/step"][...].tolist(), [5, 10, 15, 20])

    def test_a_late_amb_round_is_abandoned_between_micro_batches(self):
        steps, partitions = 20, 4
        # Ranks 1-2 sleep 0.03 s a round, rank 3 SLEEP: its round's step is made meanwhile.
        with open(self.path("slow-amb.csv"), "w") as out:
            out.write("worker,step,seconds\n0,0,0.03\n1,0,0.03\n2,0,{}\n".format(SLEEP))
        for name, rule in (("amb-backup", ["--backup-workers", "1"]),
                           ("amb-k-sync", ["--k-sync", "2"])):
            common = [a for a in COMMON if a != "-q"]
            command = [MPIRUN, "--oversubscribe", "-n", "4", mbtest.tool("mb-train-amb"),
                       "--data", "toy.h5", *common, "-v", "--worker-log", "--steps", str(steps),
                       "--time-limit", "5", "--partitions", str(partitions),
                       "--induce", "trace:slow-amb.csv", *rule, "--log", f"{name}-log.h5"]
            result = mbtest.run(command, cwd=self.dir, env=self.env, timeout=60)
            with self.subTest(rule=rule):
                self.assertSucceeded(result)
                text = result.out + result.err
                # Rank 3's rounds: one micro-batch each, then the notice of a newer step.
                done = [int(k) for k in re.findall(r"abandoned after (\d+) micro-batches", text)]
                self.assertGreaterEqual(len(done), 2, msg=text)
                self.assertTrue(all(0 < k < partitions for k in done), msg=done)
                # The master's count of them, and of the micro-batches they computed: waste
                # that their rows in /workers (dropped, 0 micro-batches) do not show.
                told = re.findall(r"(\d+) late rounds abandoned by their workers "
                                  r"\((\d+) micro-batches computed and dropped\)", text)
                self.assertEqual([(int(r), int(k)) for r, k in told], [(len(done), sum(done))],
                                 msg=text)
                with h5py.File(self.path(f"{name}-log.h5"), "r") as log:
                    self.assertEqual(log["collect/gradients"][...].tolist(), [2] * steps)
                    dropped = log["workers/dropped"][...].reshape(steps, 3)
                    micro = log["workers/micro_batches"][...].reshape(steps, 3)
                    self.assertTrue(np.all(dropped.sum(axis=1) == 1), msg=dropped)
                    self.assertGreaterEqual(int(dropped[:, 2].sum()), steps - 1, msg=dropped)
                    # A late round's row: no micro-batch reached the step (mbkit-formats(5)).
                    self.assertTrue(np.all(micro[:, 2][dropped[:, 2] == 1] == 0), msg=micro)
                    # The fast ranks' full rounds: 4 micro-batches of 5 (an epoch's last
                    # batch of 13: 2).
                    fast = micro[:, :2][dropped[:, :2] == 0]
                    self.assertTrue(np.all(np.isin(fast, [2, partitions])), msg=micro)

    def test_no_backup_worker_is_fmb(self):
        args = ["--steps", "8", *self.slow_last(3)]
        self.train("fmb", 4, args)
        self.train("backup-0", 4, [*args, "--backup-workers", "0"])
        self.assert_same_bits("backup-0", "fmb", skip=WALL_TIMES)

    def test_gradient_coding_decodes_the_whole_gradient(self):
        # Workers 0,1 and 2,3 (ranks 1-2, 3-4) hold the same data; worker 3 is slow, so group
        # {2,3}'s gradient is worker 2's; group {0,1}'s is whichever comes first (the same).
        steps = 10
        self.train("coded", 5, ["--steps", str(steps), "--gradient-coding", "1",
                                *self.slow_last(4)])
        self.train("two", 3, ["--steps", str(steps), "--allreduce", "shm"])
        with h5py.File(self.path("coded-log.h5"), "r") as log:
            dropped = log["workers/dropped"][...].reshape(steps, 4)
            self.assertEqual(log["collect/gradients"][...].tolist(), [2] * steps)
            self.assertTrue(np.all(dropped[:, 0] + dropped[:, 1] == 1), msg=dropped)
            self.assertTrue(np.all(dropped[:, 2] + dropped[:, 3] == 1), msg=dropped)
            self.assertGreaterEqual(int(dropped[:, 3].sum()), steps - 2, msg=dropped)
        coded, two = arrays(self.path("coded.h5"), False), arrays(self.path("two.h5"), False)
        self.assertIn("params/fc1.weight", coded)
        for name in coded:
            if name.startswith(("params/", "state/", "optimizer/")):
                self.assertEqual(coded[name].tobytes(), two[name].tobytes(), msg=name)

    def k_batch_log(self, name, steps, workers=3):
        """The K-batch-sync run's batches and samples by step and worker, and its losses."""
        with h5py.File(self.path(f"{name}-log.h5"), "r") as log:
            self.assertEqual(log["steps/step"][...].tolist()[-1], steps)
            rows = len(log["steps/step"])
            ranks = log["workers/rank"][...].reshape(rows, workers)
            self.assertTrue(np.all(ranks == np.arange(1, workers + 1)), msg=ranks)
            batches = log["workers/micro_batches"][...].reshape(rows, workers)
            samples = log["workers/samples"][...].reshape(rows, workers)
            dropped = log["workers/dropped"][...].reshape(rows, workers)
            # A worker without a batch in the step is marked dropped, with no samples.
            self.assertTrue(np.array_equal(dropped == 1, batches == 0), msg=(dropped, batches))
            self.assertTrue(np.all(samples[batches == 0] == 0), msg=samples)
            # Batches of 20 (an epoch's last of a 133-row slice: 13).
            self.assertTrue(np.all(samples <= 20 * batches), msg=(samples, batches))
            self.assertTrue(np.all(samples >= 13 * batches), msg=(samples, batches))
            self.assertEqual(log["steps/samples"][...].tolist(), samples.sum(axis=1).tolist())
            self.assertEqual(log["collect/gradients"][...].tolist(),
                             (batches > 0).sum(axis=1).tolist())
            return batches, log["steps/loss"][...]

    def test_k_batch_sync_takes_k_batches_and_a_slow_worker_gives_fewer(self):
        steps = 30
        self.train("kbatch", 4, ["--steps", str(steps), "--k-batch-sync", "2",
                                 *self.slow_last(3)])
        batches, loss = self.k_batch_log("kbatch", steps)
        self.assertEqual(batches.sum(axis=1).tolist(), [2] * steps)
        # Rank 3 sleeps 0.3 s a step before its first batch; the others step meanwhile (how
        # they share the steps is up to the scheduler: one may take them all).
        total = batches.sum(axis=0)
        self.assertLess(total[2], max(total[0], total[1]), msg=batches)
        self.assertLessEqual(total[2], 2, msg=batches)
        self.assertLess(float(np.mean(loss[-5:])), float(np.mean(loss[:5])) - 0.1, msg=loss)

    def test_k_batch_sync_with_k_equal_workers_trains_and_resumes(self):
        self.train("equal", 4, ["--steps", "30", "--k-batch-sync", "3"])
        batches, loss = self.k_batch_log("equal", 30)
        self.assertEqual(batches.sum(axis=1).tolist(), [3] * 30)
        self.assertLess(float(np.mean(loss[-5:])), float(np.mean(loss[:5])) - 0.1, msg=loss)
        with h5py.File(self.path("equal-log.h5"), "r") as log:
            self.assertEqual(log["eval/step"][...].tolist(), [5, 10, 15, 20, 25, 30])
        # Resumed from its checkpoint: the steps go on from 30, K batches each.
        command = [MPIRUN, "--oversubscribe", "-n", "4", mbtest.tool("mb-train-fmb"),
                   "--data", "toy.h5", *COMMON, "--steps", "36", "--k-batch-sync", "3",
                   "--resume", "equal.h5", "--log", "resumed-log.h5", "--checkpoint", "equal.h5"]
        self.assertSucceeded(mbtest.run(command, cwd=self.dir, env=self.env, timeout=120))
        batches, _ = self.k_batch_log("resumed", 36)
        self.assertEqual(batches.sum(axis=1).tolist(), [3] * 6)
        with h5py.File(self.path("equal.h5"), "r") as checkpoint:
            self.assertEqual(int(checkpoint.attrs["step"]), 36)

    def test_k_batch_sync_that_cannot_run_on_the_wall_clock_is_refused(self):
        cases = [(["--comm", "allreduce"], 4, "--comm allreduce"),
                 (["--backup-workers", "1"], 4, "--backup-workers"),
                 ([], 0, "mpirun")]
        for extra, ranks, named in cases:
            with self.subTest(extra=extra):
                command = [mbtest.tool("mb-train-fmb"), "--data", "toy.h5", *COMMON,
                           "--steps", "3", "--k-batch-sync", "2", *extra]
                if ranks > 0:
                    command = [MPIRUN, "--oversubscribe", "-n", str(ranks), *command]
                result = mbtest.run(command, cwd=self.dir, env=self.env, timeout=60)
                self.assertUsageError(result, named)
                self.assertIn("--k-batch-sync 2", result.err)
                lines = [line for line in result.err.splitlines() if "mb-train-fmb" in line]
                self.assertEqual(len(set(lines)), 1, msg=result.err)


if __name__ == "__main__":
    mbtest.main()
