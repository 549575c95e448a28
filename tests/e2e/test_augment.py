"""--augment LIST on the real trainers: under mpirun -n 3 each sample is augmented the same way
whichever rank loads it (3 ranks x 32 rows match one process with the global batch of 96, bit
for bit up to the sum's rounding), augmentation changes what is learnt, the run records the
list, and bad lists are refused by every trainer, naming --augment, with exit status 2."""
import json
import shutil
import unittest

import h5py
import numpy as np

import mbtest

MPIRUN = shutil.which("mpirun")
# Each trainer with the options it requires.
TRAINERS = {"mb-train-fmb": [], "mb-train-amb": ["--time-limit", "1", "--partitions", "2"],
            "mb-train-dbsl": ["--base-batch", "16"]}


def params_of(path):
    with h5py.File(path, "r") as f:
        return {name: f["params"][name][...] for name in f["params"]}


class Augment(mbtest.ToolTestCase):
    def setUp(self):
        super().setUp()
        self.assertIsNotNone(MPIRUN, "mpirun (openmpi-bin) is required")
        self.assertSucceeded(self.mb_dataset("synth", "images", "--shape", "2,8,6", "--classes",
                                             "4", "--train", "96", "--test", "8", "-o",
                                             self.path("d.h5")))

    def train(self, ranks, *args, tool="mb-train-fmb"):
        command = [mbtest.tool(tool), "--data", self.path("d.h5"), "--model", "mlp", "--hidden",
                   "16", "--optimizer", "momentum", "--lr", "0.05", "--threads", "1", "-q",
                   "--seed", "7", *args]
        if ranks > 0:
            command = [MPIRUN, "--oversubscribe", "-n", str(ranks), *command]
        return mbtest.run(command, cwd=self.dir, env=self.env)

    def test_three_ranks_augment_each_sample_as_one_process_does(self):
        augment = ["--augment", "crop:2,shift:0.2,flip"]
        # Every batch is a whole slice (3 x 32) or the whole split (96): 6 steps, 6 epochs.
        self.assertSucceeded(self.train(0, *augment, "--batch-size", "96", "--steps", "6",
                                        "--checkpoint", "one.h5", "--log", "one-log.h5"))
        self.assertSucceeded(self.train(3, *augment, "--batch-size", "32", "--steps", "6",
                                        "--comm", "allreduce", "--checkpoint", "three.h5"))
        self.assertSucceeded(self.train(0, "--batch-size", "96", "--steps", "6",
                                        "--checkpoint", "plain.h5"))
        one, three, plain = (params_of(self.path(n)) for n in ("one.h5", "three.h5", "plain.h5"))
        for name in one:
            np.testing.assert_allclose(one[name], three[name], rtol=2e-5, atol=2e-6, err_msg=name)
        self.assertFalse(all(np.allclose(one[n], plain[n], rtol=1e-3, atol=1e-4) for n in one),
                         "augmentation changed nothing")
        with h5py.File(self.path("one-log.h5"), "r") as log:
            config = json.loads(mbtest.text_attrs(log)["config"])
        self.assertEqual(config["augment"], True)
        self.assertEqual(config["augment_list"], "crop:2,shift:0.2,flip")

    def test_same_seed_same_model_and_bare_augment_is_crop_and_flip(self):
        for name in ("a.h5", "b.h5"):
            self.assertSucceeded(self.train(0, "--augment", "shift:0.1,flip", "--batch-size",
                                            "16", "--steps", "8", "--checkpoint", name))
        a, b = params_of(self.path("a.h5")), params_of(self.path("b.h5"))
        for name in a:
            np.testing.assert_array_equal(a[name], b[name], err_msg=name)
        # Bare --augment before another option, and the list it stands for: the same run.
        self.assertSucceeded(self.train(0, "--augment", "--batch-size", "16", "--steps", "8",
                                        "--checkpoint", "bare.h5", "--log", "bare-log.h5"))
        self.assertSucceeded(self.train(0, "--augment", "flip,crop:4", "--batch-size", "16",
                                        "--steps", "8", "--checkpoint", "listed.h5"))
        bare, listed = params_of(self.path("bare.h5")), params_of(self.path("listed.h5"))
        for name in bare:
            np.testing.assert_array_equal(bare[name], listed[name], err_msg=name)
        with h5py.File(self.path("bare-log.h5"), "r") as log:
            config = json.loads(mbtest.text_attrs(log)["config"])
        self.assertEqual(config["augment_list"], "crop:4,flip")

    def test_without_augment_no_list_is_recorded(self):
        self.assertSucceeded(self.train(0, "--batch-size", "16", "--steps", "2", "--log",
                                        "log.h5"))
        with h5py.File(self.path("log.h5"), "r") as log:
            config = json.loads(mbtest.text_attrs(log)["config"])
        self.assertEqual(config["augment"], False)
        self.assertNotIn("augment_list", config)

    def test_every_trainer_refuses_bad_lists_naming_the_option(self):
        cases = (("crop:0", "--augment: crop:0: the padding must be from 1 to 64"),
                 ("shift:1.5", "--augment: shift:1.5: the fraction"),
                 ("rotate:10", "--augment: unknown item 'rotate:10'"),
                 ("flip,flip", "--augment: 'flip' is given twice"))
        for tool, required in TRAINERS.items():
            for value, message in cases:
                with self.subTest(tool=tool, value=value):
                    result = self.train(0, "--augment", value, "--steps", "1", *required,
                                        tool=tool)
                    self.assertFailsWith(result, 2, message)


if __name__ == "__main__":
    mbtest.main()
