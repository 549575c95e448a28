"""Local SGD (mb-train-fmb --local-steps tau): each worker takes tau SGD steps on its own model,
then the workers' models (parameters, state, optimizer state) are averaged.

- --local-steps 1 is FMB, to the bit.
- On the virtual clock a local step takes what it adds to the slowest worker's rounds, and the
  averaging step adds the one exchange (computed by hand from a compute model and slowdowns).
- --emulate N gives the bits of a process per worker (mpirun, --allreduce shm), ps and
  allreduce, with induced stragglers; a resumed run gives the straight run's bits.
- --emulate N --threads T spreads the workers' local steps over T threads: every T gives
  T = 1's bits, a run resumed with another T too.
- --local-steps adacomm chooses the period by AdaComm's rule, recomputed here from the log,
  with the same bits under --emulate and mpirun.
- What local SGD cannot be combined with is refused naming both flags.
"""

import json
import math
import shutil

import h5py
import numpy as np

import mbtest
from test_emulate import SameBits, arrays

MPIRUN = shutil.which("mpirun")

COMMON = ["--model", "mlp", "--hidden", "16", "--optimizer", "momentum", "--lr", "0.05",
          "--threads", "1", "--batch-size", "20", "--steps", "6", "--eval-every", "3",
          "--clock", "virtual", "--compute-model", "0.002,0.001", "-q"]
STRAGGLERS = ["--induce", "niagara", "--slowdown", "2=1.5", "--comm-model", "25e-6,1e-9"]


class LocalSgd(SameBits, mbtest.ToolTestCase):
    def setUp(self):
        super().setUp()
        self.assertSucceeded(self.mb_dataset("synth", "toy", "--learnable", "--train", "300",
                                             "--test", "60", "--seed", "3", "-o",
                                             self.path("toy.h5")))

    def command(self, name, args, ranks=0, tool="mb-train-fmb"):
        command = [mbtest.tool(tool), "--data", "toy.h5", *COMMON, *args,
                   "--log", f"{name}-log.h5", "--checkpoint", f"{name}.h5"]
        if ranks > 0:
            command = [MPIRUN, "--oversubscribe", "-n", str(ranks), *command]
        return command

    def train(self, name, args, ranks=0):
        return self.train_toy("mb-train-fmb", name, COMMON, args, ranks)

    def test_one_local_step_is_fmb(self):
        args = ["--comm", "ps", "--emulate", "3", *STRAGGLERS]
        self.train("fmb-ps", args)
        self.train("one-ps", [*args, "--local-steps", "1"])
        self.assert_same_bits("one-ps", "fmb-ps")
        # More local steps train another model.
        self.train("three", ["--comm", "ps", "--emulate", "3", *STRAGGLERS, "--local-steps", "3"])
        three, fmb = arrays(self.path("three.h5"), False), arrays(self.path("fmb-ps.h5"), False)
        self.assertNotEqual(three["params/fc1.weight"].tobytes(),
                            fmb["params/fc1.weight"].tobytes())

    def test_step_times_by_hand(self):
        # 2 workers (allreduce), 20 samples each: 0.002 x 20 + 0.001 = 41 ms a round; rank 1 is
        # slowed 2x: 82 ms. Local steps: the slowest worker's round; every third step also the
        # averaging, a ring of 2 messages of 1 ms (beta 0). The updates are free under a model.
        self.train("timed", ["--comm", "allreduce", "--emulate", "2", "--slowdown", "1=2",
                             "--comm-model", "0.001,0", "--local-steps", "3"])
        slow = 2 * (0.002 * 20 + 0.001)
        with h5py.File(self.path("timed-log.h5"), "r") as log:
            np.testing.assert_allclose(
                log["steps/step_time"][...],
                [slow, slow, slow + 0.002, slow, slow, slow + 0.002], rtol=1e-6)
            self.assertEqual(log["steps/samples"][...].tolist(), [40] * 6)
            # Worker 0 waits the 41 ms a round it is ahead, three rounds a period.
            wait = log["workers/wait_time"][...].reshape(6, 2)
            np.testing.assert_allclose(wait[2], [3 * 0.041, 0], rtol=1e-5, atol=1e-9)
            np.testing.assert_allclose(wait[0], [0, 0])
            config = json.loads(mbtest.text_attrs(log)["config"])
        self.assertEqual(config["local_steps"], 3)

    def test_emulated_workers_have_the_bits_of_a_process_per_worker(self):
        if MPIRUN is None:
            self.skipTest("mpirun is not installed")
        for comm, ranks in (("ps", 4), ("allreduce", 3)):
            with self.subTest(comm=comm):
                args = ["--comm", comm, *STRAGGLERS, "--local-steps", "2"]
                self.train(f"{comm}-emulated", [*args, "--emulate", "3"])
                self.train(f"{comm}-ranks", [*args, "--allreduce", "shm"], ranks=ranks)
                self.assert_same_bits(f"{comm}-emulated", f"{comm}-ranks")

    def test_a_resumed_run_has_the_bits_of_a_straight_one(self):
        args = ["--comm", "ps", "--emulate", "3", *STRAGGLERS, "--local-steps", "3"]
        self.train("straight", args)
        self.train("resumed", [*args, "--steps", "3"])
        result = mbtest.run([*self.command("resumed", args), "--resume", "resumed.h5"],
                            cwd=self.dir, env=self.env)
        self.assertSucceeded(result)
        self.assert_same_bits("resumed", "straight", skip={"epoch"})
        if MPIRUN is not None:  # ps workers take the checkpoint's optimizer state too
            ranks = ["--comm", "ps", *STRAGGLERS, "--local-steps", "3", "--allreduce", "shm"]
            self.train("resumed-ranks", [*ranks, "--steps", "3"], ranks=4)
            result = mbtest.run([*self.command("resumed-ranks", ranks, ranks=4), "--resume",
                                 "resumed-ranks.h5"], cwd=self.dir, env=self.env, timeout=300)
            self.assertSucceeded(result)
            self.assert_same_bits("resumed-ranks", "straight", skip={"epoch"})
        # Another tau is another training: refused at resume.
        result = mbtest.run([*self.command("resumed", [*args[:-1], "2"]), "--steps", "9",
                             "--resume", "resumed.h5"], cwd=self.dir, env=self.env)
        self.assertNotEqual(result.rc, 0)
        self.assertIn("--local-steps", result.err)

    def test_emulated_workers_over_threads_have_the_bits_of_one_thread(self):
        # 5 workers over 2 and 3 lanes (uneven), each worker's model and momentum its own.
        args = ["--comm", "ps", "--emulate", "5", *STRAGGLERS, "--local-steps", "2"]
        self.train("threads-1", args)
        for threads in (2, 3):
            with self.subTest(threads=threads):
                self.train(f"threads-{threads}", [*args, "--threads", str(threads)])
                self.assert_same_bits(f"threads-{threads}", "threads-1")
        # Resumed at an evaluation (an averaging) with another --threads: the straight run's
        # bits.
        self.train("threads-resumed", [*args, "--steps", "3"])
        result = mbtest.run([*self.command("threads-resumed", [*args, "--threads", "3"]),
                             "--resume", "threads-resumed.h5"], cwd=self.dir, env=self.env)
        self.assertSucceeded(result)
        self.assert_same_bits("threads-resumed", "threads-1", skip={"epoch"})

    def test_adacomm_chooses_the_period_by_the_papers_rule(self):
        # 3 workers (allreduce), 41 ms a round; the averaging adds a ring of 4 messages of 1 ms.
        # tau_0 = 6, a choice every 0.3 s (about 7 steps): the rule, from the log's losses and
        # times, must say where the averagings are.
        tau0, interval, steps = 6, 0.3, 40
        args = ["--comm", "allreduce", "--comm-model", "0.001,0", "--lr", "0.2",
                "--steps", str(steps), "--eval-every", "0", "--local-steps", "adacomm",
                "--adacomm-tau0", str(tau0), "--adacomm-interval", str(interval)]
        self.train("ada-emulated", [*args, "--emulate", "3"])
        with h5py.File(self.path("ada-emulated-log.h5"), "r") as log:
            loss = log["steps/loss"][...].astype(float)
            samples = log["steps/samples"][...].astype(float)
            time = log["steps/time"][...].astype(float)
            step_time = log["steps/step_time"][...].astype(float)
            config = json.loads(mbtest.text_attrs(log)["config"])
        self.assertEqual(config["local_steps"], "adacomm")
        averaged = (step_time > 0.041 + 0.002).tolist()
        expected, taus = [], [tau0]
        start = time[0] - step_time[0]  # the run's clock when the first step began
        tau, since, first, loss_sum, count = tau0, 0, None, 0.0, 0.0
        next_choice = start + interval
        for i in range(steps):
            average = since + 1 >= tau or i + 1 == steps
            expected.append(average)
            first = loss[0] if first is None else first
            loss_sum += loss[i] * samples[i]
            count += samples[i]
            since = 0 if average else since + 1
            if average:
                if time[i] >= next_choice:
                    tau = max(1, math.ceil(math.sqrt(loss_sum / count / first) * tau0))
                    next_choice = (math.floor(time[i] / interval) + 1) * interval
                    taus.append(tau)
                loss_sum = count = 0.0
        self.assertEqual(averaged, expected, msg=f"periods {taus}")
        self.assertLess(min(taus), tau0, msg=f"the loss fell: tau must fall ({taus})")
        if MPIRUN is not None:  # rank 0's choice reaches every rank
            self.train("ada-ranks", [*args, "--comm", "ps", "--allreduce", "shm"], ranks=4)
            self.train("ada-ps", [*args, "--comm", "ps", "--emulate", "3"])
            self.assert_same_bits("ada-ps", "ada-ranks")

    def test_what_local_sgd_cannot_do_is_refused_naming_both_flags(self):
        cases = [
            (["--local-steps", "0"], "--local-steps 0 must be at least 1"),
            (["--local-steps", "2", "--async"], "--async"),
            (["--local-steps", "2", "--backup-workers", "1"], "--backup-workers"),
            (["--local-steps", "2", "--k-sync", "2"], "--k-sync"),
            (["--local-steps", "2", "--gradient-coding", "1"], "--gradient-coding"),
            (["--local-steps", "2", "--compress", "fp16"], "--compress"),
            (["--local-steps", "soon"], "not a whole number or adacomm"),
            (["--local-steps", "adacomm", "--adacomm-tau0", "0"], "--adacomm-tau0 0"),
            (["--local-steps", "adacomm", "--resume", "x.h5"], "--resume"),
            (["--adacomm-tau0", "5"], "needs --local-steps adacomm"),
        ]
        for args, said in cases:
            with self.subTest(args=args):
                result = mbtest.run(self.command("bad", ["--comm", "ps", "--emulate", "3", *args]),
                                    cwd=self.dir, env=self.env)
                self.assertEqual(result.rc, 2, msg=result.err)
                self.assertIn("--local-steps", result.err)
                self.assertIn(said, result.err)
        amb = mbtest.run([mbtest.tool("mb-train-amb"), "--data", "toy.h5", *COMMON,
                          "--comm", "ps", "--emulate", "3", "--local-steps", "2",
                          "--time-limit", "0.05", "--partitions", "4"], cwd=self.dir, env=self.env)
        self.assertEqual(amb.rc, 2, msg=amb.err)
        self.assertIn("--local-steps 2 and mb-train-amb", amb.err)


if __name__ == "__main__":
    # The tests at once, three at a time: most of each is the tools' start-up and end, waits
    # that overlap.
    mbtest.main(at_once=3)
