"""The trainers and mb-eval on a GPU (--device cuda): a run trains like the CPU's from the same
seed, two GPU runs with one seed give the same checkpoint bit for bit (deterministic cuDNN
algorithms, our own kernels), CUDA graphs of the training step change no bit, a checkpoint
trained on the GPU evaluates on the CPU, and a GPU index past the last is one line and exit
status 2. Without a visible GPU the file reports itself
skipped (status 77), also under CI, whose machines have none; tests/gpu/run-all runs it on a
machine with one."""

import json
import os
import shutil
import tempfile

import h5py
import numpy as np

import mbtest


def checkpoint_arrays(path):
    """Every float array of a checkpoint's /params and /state, by name."""
    arrays = {}
    with h5py.File(path, "r") as f:
        for group in ("params", "state"):
            if group in f:
                for name, dataset in f[group].items():
                    arrays[f"{group}/{name}"] = np.asarray(dataset, dtype=np.float64)
    return arrays


def normalised_error(actual, reference):
    scale = max(1.0, float(np.max(np.abs(reference)))) if reference.size else 1.0
    return float(np.max(np.abs(actual - reference))) / scale if reference.size else 0.0


class CudaTraining(mbtest.ToolTestCase):
    @classmethod
    def setUpClass(cls):
        cls.shared = tempfile.mkdtemp(prefix="mbkit-e2e-cuda-")
        cls.toy = os.path.join(cls.shared, "toy.h5")
        result = mbtest.mb_dataset("synth", "toy", "--learnable", "--train", "1024", "--test", "256",
                                   "-o", cls.toy, cwd=cls.shared)
        assert result.rc == 0, repr(result)
        cls.images = os.path.join(cls.shared, "images.h5")
        result = mbtest.mb_dataset("synth", "images", "--shape", "3,32,32", "--classes", "10",
                                   "--train", "256", "--test", "64", "-o", cls.images,
                                   cwd=cls.shared)
        assert result.rc == 0, repr(result)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.shared, ignore_errors=True)

    def train(self, device, checkpoint, data, *model):
        return mbtest.run([mbtest.tool("mb-train-fmb"), "--data", data, *model, "--epochs", "1",
                           "--batch-size", "32", "--optimizer", "momentum", "--lr", "0.05",
                           "--seed", "3", "--device", device, "-q", "--checkpoint", checkpoint],
                          cwd=self.dir, env=self.env, timeout=600)

    def test_gpu_trains_like_the_cpu_and_repeats_itself(self):
        cases = [("mlp", self.toy, ["--model", "mlp", "--hidden", "64", "--activation", "relu"]),
                 ("resnet8", self.images, ["--model", "resnet8"])]
        for name, data, model in cases:
            with self.subTest(model=name):
                for device, path in (("cpu", "cpu.h5"), ("cuda", "gpu1.h5"), ("cuda", "gpu2.h5")):
                    self.assertSucceeded(self.train(device, f"{name}-{path}", data, *model))
                cpu = checkpoint_arrays(self.path(f"{name}-cpu.h5"))
                gpu = checkpoint_arrays(self.path(f"{name}-gpu1.h5"))
                again = checkpoint_arrays(self.path(f"{name}-gpu2.h5"))
                self.assertEqual(sorted(gpu), sorted(cpu))
                for array in cpu:
                    self.assertTrue(np.array_equal(gpu[array], again[array]),
                                    msg=f"{name}: {array} differs between two GPU runs")
                    # A few dozen steps of fp32 in other summation orders drift apart a little.
                    self.assertLess(normalised_error(gpu[array], cpu[array]), 1e-3,
                                    msg=f"{name}: {array}, GPU against CPU")

    def test_a_gpu_checkpoint_evaluates_on_the_cpu(self):
        model = ["--model", "mlp", "--hidden", "64"]
        self.assertSucceeded(self.train("cuda", "gpu.h5", self.toy, *model))
        reports = {}
        for device in ("cpu", "cuda"):
            result = mbtest.run([mbtest.tool("mb-eval"), "gpu.h5", "--data", self.toy, "--json",
                                 "--device", device], cwd=self.dir, env=self.env)
            self.assertSucceeded(result)
            reports[device] = json.loads(result.out)
        self.assertEqual(reports["cpu"]["samples"], 256)
        self.assertAlmostEqual(reports["cuda"]["loss"], reports["cpu"]["loss"], delta=1e-4)
        self.assertAlmostEqual(reports["cuda"]["accuracy"], reports["cpu"]["accuracy"],
                               delta=1.5 / 256)

    def test_cuda_graphs_change_no_bit(self):
        # Batches of 48 from 256 images: a short last batch, recorded apart.
        runs = {}
        for graphs in ("on", "off"):
            result = mbtest.run([mbtest.tool("mb-train-fmb"), "--data", self.images, "--model",
                                 "resnet8", "--epochs", "2", "--batch-size", "48", "--optimizer",
                                 "momentum", "--lr", "0.05", "--seed", "3", "--device", "cuda",
                                 "--cuda-graphs", graphs, "--checkpoint", f"graphs-{graphs}.h5"],
                                cwd=self.dir, env=self.env, timeout=600)
            self.assertSucceeded(result)
            runs[graphs] = (result.out + result.err,
                            checkpoint_arrays(self.path(f"graphs-{graphs}.h5")))
        self.assertRegex(runs["on"][0], r"cuda graph +on: the training step recorded")
        self.assertRegex(runs["off"][0], r"cuda graph +off \(--cuda-graphs off\)")
        self.assertNotIn("failed; running it without one", runs["on"][0])
        for array, values in runs["off"][1].items():
            self.assertTrue(np.array_equal(runs["on"][1][array], values),
                            msg=f"{array} differs with CUDA graphs")

    def test_tf32_and_bf16_train_record_themselves_and_evaluate_on_the_cpu(self):
        """--precision tf32 and bf16: a run trains (finite loss), its log and start table say
        which precision, and its checkpoint is the same fp32 file, which the CPU evaluates. A
        GPU older than Ampere refuses both with a usage line instead."""
        model = ["--model", "resnet8"]
        for precision in ("tf32", "bf16"):
            with self.subTest(precision=precision):
                result = mbtest.run([mbtest.tool("mb-train-fmb"), "--data", self.images, *model,
                                     "--epochs", "1", "--batch-size", "32", "--seed", "3",
                                     "--device", "cuda", "--precision", precision,
                                     "--log", f"{precision}.log.h5",
                                     "--checkpoint", f"{precision}.h5"],
                                    cwd=self.dir, env=self.env, timeout=600)
                if result.rc == 2 and "tensor cores" in result.err:
                    self.skipTest(result.err.strip())
                self.assertSucceeded(result)
                self.assertRegex(result.err, rf"precision\s+{precision}:")
                with h5py.File(self.path(f"{precision}.log.h5"), "r") as f:
                    attrs = mbtest.text_attrs(f)
                    self.assertEqual(attrs["precision"], precision)
                    self.assertEqual(json.loads(attrs["config"])["precision"], precision)
                    self.assertTrue(np.all(np.isfinite(f["steps/loss"][()])))
                with h5py.File(self.path(f"{precision}.h5"), "r") as f:
                    self.assertTrue(all(d.dtype == np.float32 for d in f["params"].values()))
                evaluated = mbtest.run([mbtest.tool("mb-eval"), f"{precision}.h5", "--data",
                                        self.images, "--json"], cwd=self.dir, env=self.env)
                self.assertSucceeded(evaluated)
                self.assertEqual(json.loads(evaluated.out)["samples"], 64)

    def test_a_gpu_past_the_last_is_a_usage_error(self):
        result = self.train("cuda:99", "never.h5", self.toy, "--model", "mlp")
        self.assertFailsWith(result, 2, "--device cuda:99: this node has")
        self.assertFalse(os.path.exists(self.path("never.h5")))


if __name__ == "__main__":
    if mbtest.visible_gpus() == 0:
        # Not skip_file_unless_ci: CI builds the CUDA backend on machines without a GPU.
        print("SKIPPED: no CUDA GPU is visible (mb-train-fmb --version lists none)", flush=True)
        raise SystemExit(mbtest.SKIPPED)
    mbtest.main()
