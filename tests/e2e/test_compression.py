"""--compress under mpirun: 2bit (MXNet's, with error feedback), fp16 and bf16 over ps (-n 3)
and allreduce. ps and allreduce decode and add the same messages in the same order, so 2 workers
give the same bits either way; the log records the bytes sent; a compressed run still learns
and differs from a full-precision one; bad uses exit 2 naming the flag. The quantisation itself
is checked against hand-worked values in tests/comm/test_compression.cpp and, on 3 ranks, in
tests/comm/test_exchange_ranks.cpp (OnRanks.CompressedSumsAreTheHandQuantisedOnes)."""

import json
import shutil

import h5py
import numpy as np

import mbtest

MPIRUN = shutil.which("mpirun")


def params_of(path):
    with h5py.File(path, "r") as f:
        return {name: f["params"][name][...] for name in f["params"]}


class Compression(mbtest.ToolTestCase):
    def setUp(self):
        super().setUp()
        self.assertIsNotNone(MPIRUN, "mpirun (openmpi-bin) is required")
        self.assertSucceeded(self.mb_dataset("synth", "toy", "--learnable", "--train", "128",
                                             "--test", "30", "-o", self.path("toy.h5")))

    def train(self, ranks, *args):
        command = [mbtest.tool("mb-train-fmb"), "--data", "toy.h5", "--model", "mlp", "--hidden",
                   "16", "--optimizer", "momentum", "--lr", "0.05", "--threads", "1",
                   "--batch-size", "16", "-q", *args]
        if ranks > 0:
            command = [MPIRUN, "--oversubscribe", "-n", str(ranks), *command]
        return mbtest.run(command, cwd=self.dir, env=self.env, timeout=300)

    def test_ps_and_allreduce_give_the_same_bits(self):
        for mode in ("2bit:0.002", "fp16", "bf16"):
            with self.subTest(mode=mode):
                self.assertSucceeded(self.train(3, "--comm", "ps", "--compress", mode, "--steps",
                                                "8", "--checkpoint", "ps.h5", "--log", "ps-log.h5",
                                                "-f"))
                self.assertSucceeded(self.train(2, "--comm", "allreduce", "--compress", mode,
                                                "--steps", "8", "--checkpoint", "ar.h5", "-f"))
                ps, ar = params_of(self.path("ps.h5")), params_of(self.path("ar.h5"))
                for name in ps:
                    np.testing.assert_array_equal(ps[name], ar[name], err_msg=name)
                with h5py.File(self.path("ps-log.h5"), "r") as log:
                    config = json.loads(mbtest.text_attrs(log)["config"])
                n = config["parameters"]
                self.assertEqual(config["compress"], mode)
                self.assertEqual(config["gradient_bytes"], 4 * n)
                expected = (n + 15) // 16 * 4 if mode.startswith("2bit") else 2 * n
                self.assertEqual(config["gradient_bytes_sent"], expected)

    def test_compressed_runs_learn_and_differ_from_full_precision(self):
        self.assertSucceeded(self.train(3, "--comm", "ps", "--steps", "40", "--checkpoint",
                                        "full.h5", "--log", "full-log.h5"))
        full = params_of(self.path("full.h5"))
        for mode in ("2bit:0.002", "fp16", "bf16"):
            with self.subTest(mode=mode):
                self.assertSucceeded(self.train(3, "--comm", "allreduce", "--compress", mode,
                                                "--steps", "40", "--checkpoint", "c.h5", "--log",
                                                "c-log.h5", "-f"))
                with h5py.File(self.path("c-log.h5"), "r") as log:
                    loss = log["steps/loss"][...]
                self.assertLess(loss[-8:].mean(), 0.8 * loss[:4].mean())
                compressed = params_of(self.path("c.h5"))
                self.assertTrue(any(not np.array_equal(full[k], compressed[k]) for k in full))
        # The full-precision log has no compression keys (defaults leave the config as it was).
        with h5py.File(self.path("full-log.h5"), "r") as log:
            self.assertNotIn("compress", json.loads(mbtest.text_attrs(log)["config"]))

    def test_bad_uses_exit_2_naming_the_flag(self):
        self.assertUsageError(self.train(3, "--compress", "2bit:0", "--steps", "1"),
                             "--compress 2bit:0")
        self.assertUsageError(self.train(3, "--compress", "int8", "--steps", "1"),
                             "--compress: 'int8'")
        self.assertUsageError(self.train(3, "--compress", "fp16", "--async", "--steps", "1"),
                             "--compress")
        self.assertUsageError(self.train(3, "--compress", "fp16", "--comm", "allreduce",
                                        "--allreduce", "shm", "--steps", "1"), "--compress")
        self.assertFailsWith(self.train(0, "--compress", "fp16", "--steps", "1"), 2,
                             "--compress compresses the exchange")


if __name__ == "__main__":
    mbtest.main()
