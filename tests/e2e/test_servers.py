"""--servers S under mpirun: ranks 0..S-1 each keep, update and broadcast a shard of the
parameters (MXNet's key sharding) and the other ranks are workers. S servers give the bits of
one (parameters and the optimizer state the checkpoint gathers from the servers), with and
without --compress; the log names the workers and has a row per server and step (its shard,
the bytes it receives, its times); bad uses exit 2."""

import json
import shutil

import h5py
import numpy as np

import mbtest

MPIRUN = shutil.which("mpirun")


def arrays_of(path):
    out = {}
    with h5py.File(path, "r") as f:
        for group in ("params", "state", "optimizer"):
            if group in f:
                for name in f[group]:
                    out[f"{group}/{name}"] = f[group][name][...]
    return out


class Servers(mbtest.ToolTestCase):
    def setUp(self):
        super().setUp()
        self.assertIsNotNone(MPIRUN, "mpirun (openmpi-bin) is required")
        self.assertSucceeded(self.mb_dataset("synth", "toy", "--learnable", "--train", "128",
                                             "--test", "30", "-o", self.path("toy.h5")))

    def train(self, ranks, *args):
        command = [MPIRUN, "--oversubscribe", "-n", str(ranks), mbtest.tool("mb-train-fmb"),
                   "--data", "toy.h5", "--model", "mlp", "--hidden", "16", "--optimizer",
                   "momentum", "--lr", "0.05", "--threads", "1", "--batch-size", "16",
                   "--steps", "6", "--eval-every", "3", "-q", "-f", *args]
        return mbtest.run(command, cwd=self.dir, env=self.env, timeout=300)

    def assertSameBits(self, a, b):
        one, other = arrays_of(self.path(a)), arrays_of(self.path(b))
        self.assertEqual(sorted(one), sorted(other))
        self.assertTrue(any(k.startswith("optimizer/") for k in one), sorted(one))
        for name in one:
            np.testing.assert_array_equal(one[name], other[name], err_msg=name)

    def test_two_servers_give_the_bits_of_one(self):
        # One worker: -n 3 with 2 servers against -n 2; two workers: -n 4 against -n 3.
        for workers in (1, 2):
            with self.subTest(workers=workers):
                self.assertSucceeded(self.train(workers + 1, "--checkpoint", "one.h5", "--log",
                                                "one-log.h5"))
                self.assertServerRows("one-log.h5", servers=1, workers=workers, value_bytes=4)
                self.assertSucceeded(self.train(workers + 2, "--servers", "2", "--checkpoint",
                                                "two.h5", "--log", "two-log.h5"))
                self.assertSameBits("one.h5", "two.h5")
                with h5py.File(self.path("two-log.h5"), "r") as log:
                    config = json.loads(mbtest.text_attrs(log)["config"])
                    ranks = sorted(set(log["workers/rank"][...]))
                    evaluations = len(log["eval/step"])
                self.assertEqual(config["servers"], 2)
                self.assertEqual(config["workers"], workers)
                self.assertEqual(ranks, list(range(2, 2 + workers)))
                self.assertEqual(evaluations, 2)
                self.assertServerRows("two-log.h5", servers=2, workers=workers, value_bytes=4)

    def assertServerRows(self, log_path, servers, workers, value_bytes):
        """/servers: a row per server and step, shards that tile the parameters, the bytes the
        workers send each, and times that are measured (update and send: of the previous step;
        before the first step there was no update, but the first parameters were sent)."""
        with h5py.File(self.path(log_path), "r") as log:
            table = {name: log["servers"][name][...] for name in log["servers"]}
            parameters = int(json.loads(mbtest.text_attrs(log)["config"])["parameters"])
        steps = 6
        self.assertEqual(list(table["step"]), [s for s in range(1, steps + 1)
                                               for _ in range(servers)])
        self.assertEqual(list(table["rank"]), list(range(servers)) * steps)
        floats = table["floats"][:servers]
        self.assertEqual(int(floats.sum()), parameters)
        self.assertLessEqual(int(floats.max() - floats.min()), 1)
        np.testing.assert_array_equal(table["floats"], np.tile(floats, steps))
        # 2bit: 16 values to a 32-bit word.
        per_worker = [4 * f if value_bytes == 4 else 4 * ((int(f) + 15) // 16) for f in floats]
        self.assertEqual(list(table["bytes_received"][:servers]), [b * workers for b in per_worker])
        self.assertTrue(np.all(table["recv_time"] > 0))
        self.assertTrue(np.all(table["update_time"][:servers] == 0))
        self.assertTrue(np.all(table["update_time"][servers:] > 0))
        self.assertTrue(np.all(table["send_time"] > 0))

    def test_three_servers_with_compression_give_the_bits_of_one(self):
        self.assertSucceeded(self.train(3, "--compress", "2bit:0.002", "--checkpoint", "one.h5"))
        self.assertSucceeded(self.train(5, "--servers", "3", "--compress", "2bit:0.002",
                                        "--checkpoint", "three.h5", "--log", "three-log.h5"))
        self.assertServerRows("three-log.h5", servers=3, workers=2, value_bytes=0.25)
        self.assertSameBits("one.h5", "three.h5")

    def test_a_resumed_run_with_servers_continues_bit_for_bit(self):
        # Adam: every optimizer state array and the update count must reach each server.
        adam = ["--optimizer", "adam", "--lr", "0.01"]
        self.assertSucceeded(self.train(4, "--servers", "2", *adam, "--checkpoint", "whole.h5"))
        self.assertSucceeded(self.train(4, "--servers", "2", *adam, "--steps", "3",
                                        "--checkpoint", "part.h5"))
        # Three servers take the shards of a two-server checkpoint: same sums (two workers
        # before, one worker now would change the data order, so two workers throughout).
        self.assertSucceeded(self.train(5, "--servers", "3", *adam, "--resume", "part.h5",
                                        "--checkpoint", "resumed.h5"))
        self.assertSameBits("whole.h5", "resumed.h5")

    def test_bad_uses_exit_2_naming_the_flag(self):
        self.assertUsageError(self.train(3, "--servers", "3"), "leaves no worker")
        self.assertUsageError(self.train(3, "--servers", "2", "--comm", "allreduce"),
                             "--servers 2")
        self.assertUsageError(self.train(3, "--servers", "2", "--async"), "--servers 2")
        self.assertUsageError(self.train(3, "--servers", "0"), "--servers 0")
        self.assertUsageError(self.train(3, "--servers", "2", "--slowdown", "1=2"),
                             "rank 1 is a server")


if __name__ == "__main__":
    mbtest.main()
