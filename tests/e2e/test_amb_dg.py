"""AMB-DG (mb-train-amb --delayed-gradients TAU|auto; Al-Lawati & Draper, ICASSP 2020): the
workers never wait for the master, round t computes at the parameters of update t - TAU.

- The virtual step times and each round's parameter version (the log's staleness), from a
  compute model and a message model, are what the log says, worked out by hand; auto's TAU is the
  round trip in time limits.
- --delayed-gradients 0 gives mb-train-amb's bits; --emulate 3 gives the bits of a process per
  worker (mpirun, --allreduce shm) with induced stragglers; a resumed run a straight one's.
- On the wall clock under mpirun (a rank per worker, the master rank 0) the workers compute
  their rounds back to back at version t - TAU: the bits of the virtual clock's run where every
  round does its whole batch; a worker delayed in one round holds up the others only when they
  need the version its sum makes; a stopped worker is named within --comm-timeout.
- One process on the wall clock and what AMB-DG does not work with are refused, naming the flags.
"""

import json
import os
import shutil
import signal
import subprocess
import time

import h5py
import numpy as np

import mbtest
from test_emulate import SameBits, arrays

MPIRUN = shutil.which("mpirun")

COMMON = ["--model", "mlp", "--hidden", "16", "--optimizer", "momentum", "--lr", "0.05",
          "--threads", "1", "--batch-size", "16", "--partitions", "4", "--steps", "6",
          "--eval-every", "3", "--clock", "virtual", "-q"]
STRAGGLERS = ["--induce", "niagara", "--slowdown", "2=1.5", "--comm-model", "25e-6,1e-9",
              "--compute-model", "0.002,0.001", "--time-limit", "0.05"]


class AmbDg(SameBits, mbtest.ToolTestCase):
    def setUp(self):
        super().setUp()
        self.assertSucceeded(self.mb_dataset("synth", "toy", "--learnable", "--train", "400",
                                             "--test", "90", "--seed", "3", "-o",
                                             self.path("toy.h5")))

    def train(self, name, args, ranks=0, common=COMMON):
        return self.train_toy("mb-train-amb", name, common, args, ranks)

    def test_step_times_and_parameter_versions_by_hand(self):
        # 2 workers, micro-batches of 4 samples at 1 ms a sample, a 10 ms limit: 3 micro-batches,
        # a round of 12 ms. Messages cost 20 ms: the round trip is 40 ms, auto's TAU
        # ceil(40 / 10) = 4. Round 0 ends at 12 ms, its sums reach the master at 32 ms (update
        # 0); every later round starts when the worker's last ended (its version, made at least
        # 4 rounds before, reached it long ago): an update every 12 ms. Synchronous AMB waits
        # for the sums and the parameters: 12 + 20 + 20 = 52 ms a step.
        cluster = ["--emulate", "2", "--compute-model", "1e-3,0", "--comm-model", "0.02,0",
                   "--time-limit", "0.01"]
        self.train("auto", [*cluster, "--delayed-gradients", "auto"])
        self.train("sync", cluster)
        with h5py.File(self.path("auto-log.h5"), "r") as log:
            config = json.loads(mbtest.text_attrs(log)["config"])
            step_time = log["steps/step_time"][...]
            time = log["steps/time"][...]
            staleness = log["workers/staleness"][...]
            steps = log["workers/step"][...]
            micro = log["workers/micro_batches"][...]
        self.assertEqual(config["delayed_gradients"], 4)
        self.assertEqual(config["delayed_gradients_option"], "auto")
        self.assertTrue(np.all(micro == 3), msg=micro)
        np.testing.assert_allclose(step_time, [0.032] + [0.012] * 5, rtol=0, atol=1e-9)
        np.testing.assert_allclose(time, np.cumsum([0.032] + [0.012] * 5), rtol=0, atol=1e-9)
        # Round t computed at version max(0, t - 4): its age is min(t, 4).
        self.assertEqual(staleness.tolist(), [min(s - 1, 4) for s in steps.tolist()])
        with h5py.File(self.path("sync-log.h5"), "r") as log:
            np.testing.assert_allclose(log["steps/step_time"][...], [0.052] * 6, rtol=0,
                                       atol=1e-9)
            self.assertTrue(np.all(log["workers/staleness"][...] == 0))
        # TAU 1 against the same 40 ms round trip: not hidden. Round 2 needs version 1 (made at
        # 32 ms, at the workers at 52): update 2 at 52 + 12 + 20 = 84 ms; round 3's version 2
        # (made at 44 ms) reached them at 64, when round 2 ended: update 3 at 96 ms.
        self.train("one", [*cluster, "--delayed-gradients", "1"])
        with h5py.File(self.path("one-log.h5"), "r") as log:
            np.testing.assert_allclose(log["steps/time"][...][:4], [0.032, 0.044, 0.084, 0.096],
                                       rtol=0, atol=1e-9)

    def test_the_bits_of_amb_of_a_process_per_worker_and_of_a_straight_run(self):
        # TAU 0 is mb-train-amb's round, to the bit; TAU 2 is not.
        args = ["--emulate", "3", *STRAGGLERS]
        self.train("amb", args)
        self.train("zero", [*args, "--delayed-gradients", "0"])
        self.assert_same_bits("zero", "amb")
        self.train("two", [*args, "--delayed-gradients", "2"])
        with h5py.File(self.path("two.h5"), "r") as a, h5py.File(self.path("amb.h5")) as b:
            self.assertNotEqual(a["params/fc1.weight"][...].tobytes(),
                                b["params/fc1.weight"][...].tobytes())
        # --emulate 3 against a process per worker (mpirun, the sum in rank order).
        if MPIRUN is not None:
            self.train("ranks", [*STRAGGLERS, "--delayed-gradients", "2", "--allreduce", "shm"],
                       ranks=4)
            self.assert_same_bits("two", "ranks")
        # Stopped at step 3 (rounds 3 and 4 still compute at versions 1 and 2) and resumed.
        self.train("resumed", [*args, "--delayed-gradients", "2", "--steps", "3"])
        with h5py.File(self.path("resumed.h5"), "r") as checkpoint:
            self.assertEqual(list(checkpoint["delayed_parameters"].attrs["names"]),
                             [b"version_1", b"version_2"])
        result = mbtest.run([mbtest.tool("mb-train-amb"), "--data", "toy.h5", *COMMON, *args,
                             "--delayed-gradients", "2", "--log", "resumed-log.h5",
                             "--checkpoint", "resumed.h5", "--resume", "resumed.h5"],
                            cwd=self.dir, env=self.env)
        self.assertSucceeded(result)
        self.assert_same_bits("resumed", "two", skip={"epoch"})
        # Another delay is another training.
        result = mbtest.run([mbtest.tool("mb-train-amb"), "--data", "toy.h5", *COMMON, *args,
                             "--delayed-gradients", "1", "--steps", "8", "--resume",
                             "resumed.h5"], cwd=self.dir, env=self.env)
        self.assertEqual(result.rc, 2, msg=result.err)
        self.assertIn("--delayed-gradients", result.err)

    def wall_clock(self, name, ranks, args, steps=8, extra=()):
        """mpirun -n RANKS on the wall clock, every round's whole batch well within the limit."""
        common = [a for a in COMMON if a not in ("--clock", "virtual")]
        common[common.index("--steps") + 1] = str(steps)
        return self.train_toy("mb-train-amb", name, common, ["--time-limit", "2", *args],
                              ranks, extra)

    def test_wall_clock_rounds_at_their_delayed_versions(self):
        if MPIRUN is None:
            self.skipTest("needs mpirun")
        for ranks, delay in ((3, 1), (4, 2)):
            with self.subTest(ranks=ranks, delay=delay):
                name = f"wall{ranks}-{delay}"
                self.wall_clock(name, ranks, ["--delayed-gradients", str(delay)])
                with h5py.File(self.path(f"{name}-log.h5"), "r") as log:
                    config = json.loads(mbtest.text_attrs(log)["config"])
                    loss = log["steps/loss"][...]
                    samples = log["steps/samples"][...]
                    steps = log["workers/step"][...]
                    rank = log["workers/rank"][...]
                    staleness = log["workers/staleness"][...]
                    worker_samples = log["workers/samples"][...]
                    early = log["workers/finished_early"][...]
                self.assertEqual(config["delayed_gradients"], delay)
                # Every step takes every worker's sum of its round: the whole batch each.
                workers = ranks - 1
                self.assertEqual(steps.tolist(), [s for s in range(1, 9) for _ in range(workers)])
                self.assertEqual(rank.tolist(), list(range(1, ranks)) * 8)
                self.assertTrue(np.all(early == 1), msg=early)
                np.testing.assert_array_equal(worker_samples.reshape(8, workers).sum(axis=1),
                                              samples)
                # Round t computed at version max(0, t - TAU): its age is min(t, TAU).
                self.assertEqual(staleness.tolist(), [min(s - 1, delay) for s in steps.tolist()])
                self.assertLess(loss[-3:].mean(), loss[:3].mean(), msg=loss)
                # The rule is the virtual clock's: its bits, where every round does its batch
                # (the sum in worker order, as ps's shared-memory sum adds).
                virtual = f"virtual{ranks}-{delay}"
                self.train(virtual, ["--compute-model", "0.002,0.001", "--time-limit", "2",
                                     "--allreduce", "shm", "--delayed-gradients", str(delay)],
                           ranks=ranks, common=[*COMMON[:COMMON.index("--steps")], "--steps",
                                                "8", *COMMON[COMMON.index("--steps") + 2:]])
                wall, emulated = arrays(self.path(f"{name}.h5"), False), arrays(
                    self.path(f"{virtual}.h5"), False)
                self.assertEqual(sorted(wall), sorted(emulated))
                self.assertIn("delayed_parameters/version_7", wall)
                for dataset, values in emulated.items():
                    self.assertEqual(wall[dataset].tobytes(), values.tobytes(), msg=dataset)
                with h5py.File(self.path(f"{virtual}-log.h5"), "r") as log:
                    self.assertEqual(log["steps/loss"][...].tobytes(), loss.tobytes())
                    evaluated = {k: log["eval"][k][...].tolist()
                                 for k in ("step", "samples", "accuracy")}
                # The master evaluates the whole test split alone (the workers are not in step).
                with h5py.File(self.path(f"{name}-log.h5"), "r") as log:
                    self.assertEqual({k: log["eval"][k][...].tolist()
                                      for k in ("step", "samples", "accuracy")}, evaluated)
                self.assertEqual(evaluated["samples"], [90] * 3)

    def test_wall_clock_resume_continues_the_straight_run(self):
        if MPIRUN is None:
            self.skipTest("needs mpirun")
        # Stopped at step 3: rounds 3 and 4 compute at versions 1 and 2, which the checkpoint
        # carries to every worker; the rounds the workers computed past the end are dropped.
        self.wall_clock("straight", 3, ["--delayed-gradients", "2"])
        self.wall_clock("resumed", 3, ["--delayed-gradients", "2"], steps=3)
        with h5py.File(self.path("resumed.h5"), "r") as checkpoint:
            self.assertEqual(list(checkpoint["delayed_parameters"].attrs["names"]),
                             [b"version_1", b"version_2"])
        self.wall_clock("resumed", 3, ["--delayed-gradients", "2"],
                        extra=["--resume", "resumed.h5"])
        straight, resumed = arrays(self.path("straight.h5"), False), arrays(
            self.path("resumed.h5"), False)
        self.assertEqual(sorted(straight), sorted(resumed))
        for dataset, values in straight.items():
            self.assertEqual(resumed[dataset].tobytes(), values.tobytes(), msg=dataset)
        with h5py.File(self.path("resumed-log.h5"), "r") as log:
            self.assertEqual(log["workers/staleness"][...].tolist(),
                             [min(s - 1, 2) for s in range(1, 9) for _ in range(2)])

    def test_wall_clock_slow_round_holds_up_the_others_only_by_the_version_rule(self):
        if MPIRUN is None:
            self.skipTest("needs mpirun")
        # Worker 1 (rank 2) sleeps 1.5 s before its round 2 (0-based), no one else ever. With TAU
        # 2 worker 0 goes on with rounds 3 and 4 (versions 1 and 2, made from rounds 0 and 1)
        # and waits only before round 5, for version 3, which needs worker 1's round 2.
        with open(self.path("trace.csv"), "w") as f:
            f.write("worker,step,seconds\n")
            for step in range(8):
                for worker in range(2):
                    f.write(f"{worker},{step},{1.5 if (worker, step) == (1, 2) else 0}\n")
        self.wall_clock("slow", 3, ["--delayed-gradients", "2", "--induce", "trace:trace.csv"])
        with h5py.File(self.path("slow-log.h5"), "r") as log:
            wait = log["workers/wait_time"][...].reshape(8, 2)
            sleep = log["workers/sleep_time"][...].reshape(8, 2)
            staleness = log["workers/staleness"][...].reshape(8, 2)
        self.assertGreater(sleep[2, 1], 1.4, msg=sleep)
        self.assertEqual(staleness[:, 0].tolist(), [0, 1, 2, 2, 2, 2, 2, 2])
        # Rounds 3 and 4 (steps 4 and 5) of worker 0 start at once; round 5 waits out the rest.
        self.assertLess(wait[3, 0], 0.5, msg=wait)
        self.assertLess(wait[4, 0], 0.5, msg=wait)
        self.assertGreater(wait[5, 0], 0.8, msg=wait)

    def test_wall_clock_stopped_worker_is_named(self):
        if MPIRUN is None:
            self.skipTest("needs mpirun")
        common = [a for a in COMMON if a not in ("--clock", "virtual", "-q")]
        common[common.index("--steps") + 1] = "1000000"
        log = self.path("stuck-log.h5")
        job = subprocess.Popen(
            [MPIRUN, "--oversubscribe", "-n", "3", mbtest.tool("mb-train-amb"), "--data",
             "toy.h5", *common, "--time-limit", "0.01", "--delayed-gradients", "2", "--log", log,
             "--flush-interval", "0.2", "--print-every", "1000000", "--comm-timeout", "2"],
            cwd=self.dir, env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True)
        pids = mbtest.training_rank_pids(log, 3, 30)
        if pids is None:
            job.kill()
            self.fail("3 training processes did not start")
        try:
            self.wait_for_steps(log, 20)
            os.kill(pids[2], signal.SIGSTOP)
            stopped = time.time()
            err = job.communicate(timeout=60)[1]
        finally:
            try:
                os.kill(pids[2], signal.SIGKILL)
            except ProcessLookupError:
                pass
            if job.poll() is None:
                job.kill()
        self.assertEqual(job.returncode, 4, msg=err)
        self.assertLess(time.time() - stopped, 20, msg=err)
        # The master waits for rank 2's sum, rank 1 for the version that needs it: whichever
        # gives up first names rank 2 (rank 1 by pinging), after --comm-timeout.
        self.assertRegex(err, r"nothing for 2 s \(--comm-timeout\); rank 2 does not answer",
                         msg=err)
        mbtest.stuck_rank_names(self, err, 2)

    def test_what_amb_dg_does_not_work_with_is_refused(self):
        virtual = ["--compute-model", "0.002,0.001", "--time-limit", "0.05"]
        common = [a for a in COMMON if a not in ("--clock", "virtual")]
        cases = [
            (["--delayed-gradients", "1", "--time-limit", "0.05"], "--clock virtual"),
            (["--delayed-gradients", "auto", "--time-limit", "0.05"], "--clock virtual"),
            (["--clock", "virtual", *virtual, "--delayed-gradients", "soon"], "0 to 64 or auto"),
            (["--clock", "virtual", *virtual, "--delayed-gradients", "-1"], "0 to 64 or auto"),
            (["--clock", "virtual", *virtual, "--delayed-gradients", "65"], "0 to 64 or auto"),
            (["--clock", "virtual", *virtual, "--delayed-gradients", "1", "--async"], "--async"),
            (["--clock", "virtual", *virtual, "--delayed-gradients", "1", "--comm",
              "allreduce"], "--comm allreduce"),
            (["--clock", "virtual", *virtual, "--delayed-gradients", "1", "--emulate", "4",
              "--comm-model", "0,0", "--k-sync", "2"], "--k-sync"),
        ]
        for extra, named in cases:
            with self.subTest(extra=extra):
                result = mbtest.run([mbtest.tool("mb-train-amb"), "--data", "toy.h5", *common,
                                     *extra], cwd=self.dir, env=self.env)
                self.assertEqual(result.rc, 2, msg=result.err)
                self.assertIn(named, result.err)
                self.assertIn("--delayed-gradients", result.err)
                self.assertEqual(len(result.err.strip().splitlines()), 1, msg=result.err)


if __name__ == "__main__":
    mbtest.main()
