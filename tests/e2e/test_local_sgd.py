"""Local SGD (mb-train-fmb --local-steps tau): each worker takes tau SGD steps on its own model,
then the workers' models (parameters, state, optimizer state) are averaged.

- --local-steps 1 is FMB, to the bit.
- On the virtual clock a local step takes what it adds to the slowest worker's rounds, and the
  averaging step adds the one exchange (computed by hand from a compute model and slowdowns).
- --emulate N gives the bits of a process per worker (mpirun, --allreduce shm), ps and
  allreduce, with induced stragglers; a resumed run gives the straight run's bits.
- What local SGD cannot be combined with is refused naming both flags.
"""

import json
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
        result = mbtest.run(self.command(name, args, ranks), cwd=self.dir, env=self.env,
                            timeout=300)
        self.assertSucceeded(result)
        return result

    def test_one_local_step_is_fmb(self):
        for comm in ("ps", "allreduce"):
            with self.subTest(comm=comm):
                args = ["--comm", comm, "--emulate", "3", *STRAGGLERS]
                self.train(f"fmb-{comm}", args)
                self.train(f"one-{comm}", [*args, "--local-steps", "1"])
                self.assert_same_bits(f"one-{comm}", f"fmb-{comm}")
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
        # Another tau is another training: refused at resume.
        result = mbtest.run([*self.command("resumed", [*args[:-1], "2"]), "--steps", "9",
                             "--resume", "resumed.h5"], cwd=self.dir, env=self.env)
        self.assertNotEqual(result.rc, 0)
        self.assertIn("--local-steps", result.err)

    def test_what_local_sgd_cannot_do_is_refused_naming_both_flags(self):
        cases = [
            (["--local-steps", "0"], "--local-steps 0 must be at least 1"),
            (["--local-steps", "2", "--async"], "--async"),
            (["--local-steps", "2", "--backup-workers", "1"], "--backup-workers"),
            (["--local-steps", "2", "--k-sync", "2"], "--k-sync"),
            (["--local-steps", "2", "--gradient-coding", "1"], "--gradient-coding"),
            (["--local-steps", "2", "--compress", "fp16"], "--compress"),
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
    mbtest.main()
