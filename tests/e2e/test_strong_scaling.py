"""Strong scaling under mpirun -n 3: --global-batch-size split over the workers (remainders to
the first ones) against one process taking the whole batch, and --lr-scaling with
--warmup-epochs (Goyal et al.'s rule) read back from the log's learning rates."""

import json
import shutil

import h5py
import numpy as np

import mbtest

MPIRUN = shutil.which("mpirun")


def params_of(path):
    with h5py.File(path, "r") as f:
        return {name: f["params"][name][...] for name in f["params"]}


class StrongScaling(mbtest.ToolTestCase):
    def setUp(self):
        super().setUp()
        self.assertIsNotNone(MPIRUN, "mpirun (openmpi-bin) is required")
        self.assertSucceeded(self.mb_dataset("synth", "toy", "--learnable", "--train", "96",
                                             "--test", "30", "-o", self.path("toy.h5")))

    def train(self, ranks, *args):
        command = [mbtest.tool("mb-train-fmb"), "--data", "toy.h5", "--model", "mlp", "--hidden",
                   "16", "--optimizer", "momentum", "--lr", "0.05", "--threads", "1", "-q", *args]
        if ranks > 0:
            command = [MPIRUN, "--oversubscribe", "-n", str(ranks), *command]
        return mbtest.run(command, cwd=self.dir, env=self.env, timeout=300)

    def test_global_batch_on_three_workers_matches_one_process(self):
        # 3 workers x 32 rows, each worker's share of 96 is its whole slice: both runs see the
        # same 96 samples every step.
        self.assertSucceeded(self.train(0, "--global-batch-size", "96", "--steps", "5",
                                        "--checkpoint", "one.h5"))
        self.assertSucceeded(self.train(3, "--comm", "allreduce", "--global-batch-size", "96",
                                        "--steps", "5", "--checkpoint", "three.h5",
                                        "--log", "three-log.h5"))
        one, three = params_of(self.path("one.h5")), params_of(self.path("three.h5"))
        for name in one:
            np.testing.assert_allclose(one[name], three[name], rtol=2e-5, atol=2e-6, err_msg=name)
        with h5py.File(self.path("three-log.h5"), "r") as log:
            self.assertEqual(list(log["steps/samples"][...]), [96] * 5)
            config = json.loads(mbtest.text_attrs(log)["config"])
            self.assertEqual(config["global_batch_size"], 96)
            self.assertEqual(config["batch_sizes"], [32, 32, 32])

    def test_remainder_goes_to_the_first_workers(self):
        # ps: 2 workers share 45 as 23 + 22.
        self.assertSucceeded(self.train(3, "--comm", "ps", "--global-batch-size", "45",
                                        "--steps", "2", "--log", "ps-log.h5"))
        with h5py.File(self.path("ps-log.h5"), "r") as log:
            first = log["workers/step"][...] == log["workers/step"][0]
            by_rank = dict(zip(log["workers/rank"][first], log["workers/samples"][first]))
            self.assertEqual(by_rank, {1: 23, 2: 22})
            self.assertEqual(int(log["steps/samples"][0]), 45)
            self.assertEqual(json.loads(mbtest.text_attrs(log)["config"])["batch_sizes"], [23, 22])

    def test_linear_scaling_with_gradual_warm_up(self):
        # 2 workers of 16 against a base of 16: k = 2. 96 rows, 48 per worker: 3 steps an epoch;
        # a warm-up of 2 epochs is 6 steps from 0.05 to 0.1 in equal increments.
        self.assertSucceeded(self.train(3, "--comm", "ps", "--batch-size", "16", "--lr-scaling",
                                        "linear", "--warmup-epochs", "2", "--steps", "8",
                                        "--log", "lin-log.h5"))
        with h5py.File(self.path("lin-log.h5"), "r") as log:
            lr = log["steps/lr"][...]
            config = json.loads(mbtest.text_attrs(log)["config"])
        expected = [0.1 * (0.5 + 0.5 * min(1.0, s / 6)) for s in range(8)]
        np.testing.assert_allclose(lr, expected, rtol=1e-12)
        self.assertEqual(config["lr_factor"], 2.0)
        self.assertEqual(config["lr_base_batch"], 16)
        # sqrt with a global batch: sqrt(64 / 16) = 2 whatever the workers.
        self.assertSucceeded(self.train(3, "--comm", "allreduce", "--global-batch-size", "64",
                                        "--lr-scaling", "sqrt", "--lr-base-batch", "16",
                                        "--steps", "2", "--log", "sqrt-log.h5"))
        with h5py.File(self.path("sqrt-log.h5"), "r") as log:
            np.testing.assert_allclose(log["steps/lr"][...], [0.1, 0.1], rtol=1e-12)

    def test_bad_combinations_exit_2_naming_the_flag(self):
        self.assertFailsWith(self.train(0, "--global-batch-size", "64", "--batch-size", "16",
                                        "--steps", "1"), 2, "--global-batch-size and --batch-size")
        self.assertUsageError(self.train(3, "--comm", "allreduce", "--global-batch-size", "2",
                                        "--steps", "1"), "--global-batch-size 2 is less than")
        self.assertFailsWith(self.train(0, "--lr-scaling", "cubic", "--steps", "1"), 2,
                             "--lr-scaling: 'cubic'")
        self.assertFailsWith(self.train(0, "--global-batch-size", "64", "--lr-scaling", "linear",
                                        "--steps", "1"), 2, "needs --lr-base-batch")


if __name__ == "__main__":
    mbtest.main()
