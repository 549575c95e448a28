"""tf_cnn_benchmarks' models (alexnet, vgg16, densenet40, densenet100) in the real trainer: two
steps of each on CIFAR-shaped images (alexnet and densenet40 also under mpirun -n 3; inception3
on 75x75 images, the smallest it takes, under mpirun -n 3 only) write a
checkpoint of the model's parameter count with finite values, which the second step moved
(alexnet and densenet40: the models of the LRN and concat layers); a model that cannot
take the images is refused with one line naming the model and the layer (inception3: the
smallest size it takes), exit status 2."""
import shutil
import unittest

import h5py
import numpy as np

import mbtest

MPIRUN = shutil.which("mpirun")
# On 3x32x32 images and 10 classes (mb-train-fmb(1), tests/models/test_zoo.cpp).
COUNTS = {"alexnet": 1756426, "vgg16": 33638218, "densenet40": 357322, "densenet100": 2217002}
# inception3's 21,768,352 before its classifier, 2,049 per class (75x75 or larger images).
INCEPTION3_COUNT = 21768352 + 10 * 2049


def params_of(path):
    with h5py.File(path, "r") as f:
        return {name: f["params"][name][...] for name in f["params"]}


class TfModels(mbtest.ToolTestCase):
    def setUp(self):
        super().setUp()
        # Few test rows and small batches: the checks are of the parameters, and densenet100's
        # evaluation of 8 rows and batches of 4 took most of the file's time.
        self.assertSucceeded(self.mb_dataset("synth", "images", "--shape", "3,32,32", "--classes",
                                             "10", "--train", "24", "--test", "2", "--seed", "3",
                                             "-o", self.path("cifar.h5")))

    def train(self, model, *args, ranks=0, data="cifar.h5"):
        command = [mbtest.tool("mb-train-fmb"), "--data", self.path(data), "--model", model,
                   "--batch-size", "2", "--steps", "2", "--optimizer", "momentum", "--lr",
                   "0.01", "--threads", "1", "-q", "--seed", "5", *args]
        if ranks > 0:
            command = [MPIRUN, "--oversubscribe", "-n", str(ranks), *command]
        return mbtest.run(command, cwd=self.dir, env=self.env, timeout=600)

    def check_checkpoint(self, model, name):
        params = params_of(self.path(name))
        want = INCEPTION3_COUNT if model == "inception3" else COUNTS[model]
        self.assertEqual(sum(p.size for p in params.values()), want)
        for key, value in params.items():
            self.assertTrue(np.all(np.isfinite(value)), msg=f"{model}: {key}")

    def test_each_model_trains_two_steps(self):
        for model in COUNTS:
            with self.subTest(model=model):
                self.assertSucceeded(self.train(model, "--checkpoint", f"{model}.h5"))
                self.check_checkpoint(model, f"{model}.h5")
                if model not in ("alexnet", "densenet40"):  # the models of the new layers
                    continue
                # The second step moved the parameters on from where the first left them.
                self.assertSucceeded(self.train(model, "--steps", "1", "--checkpoint",
                                                f"{model}-1.h5"))
                one, two = params_of(self.path(f"{model}-1.h5")), params_of(
                    self.path(f"{model}.h5"))
                self.assertFalse(all(np.array_equal(one[k], two[k]) for k in one),
                                 msg=f"{model}: the second step changed nothing")

    def test_three_ranks_train_alexnet_and_densenet40(self):
        self.assertIsNotNone(MPIRUN, "mpirun (openmpi-bin) is required")
        for model in ("alexnet", "densenet40"):
            with self.subTest(model=model):
                self.assertSucceeded(self.train(model, "--comm", "allreduce", "--checkpoint",
                                                f"{model}-3.h5", ranks=3))
                self.check_checkpoint(model, f"{model}-3.h5")

    def test_three_ranks_train_inception3_at_its_smallest_size(self):
        # ImageNet's model at the smallest images it takes (75x75), one step of 2 per rank: the
        # 94 convolutions, scale-free batch norms and concatenated branches under mpirun.
        self.assertIsNotNone(MPIRUN, "mpirun (openmpi-bin) is required")
        self.assertSucceeded(self.mb_dataset("synth", "images", "--shape", "3,75,75", "--classes",
                                             "10", "--train", "6", "--test", "2", "--seed", "3",
                                             "-o", self.path("small75.h5")))
        self.assertSucceeded(self.train("inception3", "--batch-size", "2", "--steps", "1",
                                        "--comm", "allreduce", "--checkpoint", "inception3-3.h5",
                                        ranks=3, data="small75.h5"))
        self.check_checkpoint("inception3", "inception3-3.h5")

    def test_images_too_small_are_refused_naming_the_layer(self):
        self.assertSucceeded(self.mb_dataset("synth", "images", "--shape", "3,64,64", "--classes",
                                             "4", "--train", "8", "--test", "4", "-o",
                                             self.path("small.h5")))
        result = self.train("alexnet", "--checkpoint", "no.h5", data="small.h5")
        self.assertFailsWith(result, 2, "model alexnet cannot take 3x64x64 inputs: pool3")
        result = self.train("inception3", "--checkpoint", "no.h5", data="small.h5")
        self.assertFailsWith(result, 2, "model inception3 cannot take 3x64x64 inputs: it needs "
                             "at least 75x75 pixels")
        self.assertSucceeded(self.mb_dataset("synth", "images", "--shape", "3,16,16", "--classes",
                                             "4", "--train", "8", "--test", "4", "-o",
                                             self.path("tiny.h5")))
        result = self.train("vgg16", "--checkpoint", "no.h5", data="tiny.h5")
        self.assertFailsWith(result, 2, "model vgg16 cannot take 3x16x16 inputs: pool5")
        self.assertNoStrayFiles()


if __name__ == "__main__":
    mbtest.main()
