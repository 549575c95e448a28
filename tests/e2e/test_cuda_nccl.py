"""--allreduce nccl on GPUs (--device cuda): the gradients summed in GPU memory by NCCL, in
buckets during the backward pass or in one sum after it, train to the same checkpoint bit for bit
as --allreduce mpi, which stages them through host memory for MPI_Allreduce:

- one rank: a one-rank NCCL sum is the gradient itself (each element copied, no addition), and
  both runs scale it alike and run the same deterministic kernels;
- two ranks, one GPU each: each element is summed once, a + b, which is b + a in any order (one
  correctly rounded addition), in NCCL's ring as in MPI's sum.

Two ranks need two GPUs (NCCL refuses two ranks on one GPU), else that test skips naming why.
The log records which sum ran. A rank stopped in the middle of the run (two GPUs) is named by
the other within the --comm-timeout, which aborts its NCCL communicator and exits 4. Without a
visible GPU the file reports itself skipped (status 77); tests/gpu/run-all runs it on a machine
with one. The CPU's refusal of --allreduce nccl is tested in tests/e2e/test_train.py
(test_bad_input) and tests/train/test_allreduce_nccl.cpp."""

import json
import os
import shutil
import signal
import subprocess
import time

import h5py
import numpy as np

import mbtest

MPIRUN = shutil.which("mpirun")


def params_of(path):
    with h5py.File(path, "r") as f:
        return {f"{group}/{name}": f[group][name][...]
                for group in ("params", "state") if group in f for name in f[group]}


class CudaNccl(mbtest.ToolTestCase):
    def setUp(self):
        super().setUp()
        self.assertSucceeded(self.mb_dataset("synth", "images", "--shape", "3,16,16", "--classes",
                                             "10", "--train", "256", "--test", "32", "-o",
                                             self.path("images.h5")))

    def train(self, ranks, allreduce, name, *extra):
        # resnet8: convolutions, batch norm (state averaged over the ranks) and a dense layer.
        command = [mbtest.tool("mb-train-fmb"), "--data", "images.h5", "--model", "resnet8",
                   "--batch-size", "16", "--optimizer", "momentum", "--lr", "0.05", "--seed", "5",
                   "--steps", "6", "--device", "cuda", "--comm", "allreduce", "--allreduce",
                   allreduce, "--checkpoint", f"{name}.h5", "--log", f"{name}-log.h5", *extra]
        if MPIRUN:
            command = [MPIRUN, "--oversubscribe", "-n", str(ranks), *command]
        return mbtest.run(command, cwd=self.dir, env=self.env, timeout=600)

    def assertSameBits(self, a, b):
        first, second = params_of(self.path(f"{a}.h5")), params_of(self.path(f"{b}.h5"))
        self.assertEqual(sorted(first), sorted(second))
        for name in first:
            np.testing.assert_array_equal(first[name], second[name], err_msg=f"{a} / {b}: {name}")

    def allreduce_logged(self, name):
        """The log's record of the sum that ran, with NCCL's version when NCCL ran it."""
        with h5py.File(self.path(f"{name}-log.h5"), "r") as log:
            config = json.loads(mbtest.text_attrs(log)["config"])
        if config["allreduce"] == "nccl":
            self.assertRegex(config["allreduce_library"], r"^NCCL \d+\.\d+\.\d+$")
        else:
            self.assertNotIn("allreduce_library", config)
        return config["allreduce"]

    def test_one_rank_nccl_gives_the_mpi_runs_bits(self):
        # Under mpirun when there is one; alone otherwise (the path is the same: one rank).
        self.assertSucceeded(self.train(1, "mpi", "mpi"))
        result = self.train(1, "nccl", "nccl")
        self.assertSucceeded(result)
        self.assertRegex(result.out + result.err, r"NCCL \d+\.\d+\.\d+")
        self.assertSucceeded(self.train(1, "nccl", "buckets", "--bucket-mb", "0.01"))
        self.assertSameBits("mpi", "nccl")
        self.assertSameBits("mpi", "buckets")
        self.assertEqual(self.allreduce_logged("nccl"), "nccl")
        self.assertEqual(self.allreduce_logged("buckets"), "nccl")

    def test_two_ranks_nccl_gives_the_mpi_runs_bits(self):
        if MPIRUN is None:
            self.skipTest("mpirun is not installed here")
        if mbtest.visible_gpus() < 2:
            self.skipTest("one GPU visible: NCCL refuses two ranks on one GPU")
        self.assertSucceeded(self.train(2, "mpi", "mpi"))
        self.assertSucceeded(self.train(2, "nccl", "nccl"))
        self.assertSucceeded(self.train(2, "auto", "auto", "--bucket-mb", "0.01"))
        self.assertSameBits("mpi", "nccl")
        self.assertSameBits("mpi", "auto")
        self.assertEqual(self.allreduce_logged("auto"), "nccl")  # auto's choice on GPUs
        self.assertEqual(self.allreduce_logged("mpi"), "mpi")

    def rank_pids(self, marker, count, timeout=60):
        """{rank: PID} of the training processes whose command line holds `marker`."""
        pids = mbtest.training_rank_pids(marker, count, timeout)
        if pids is None:
            self.fail(f"{count} training processes did not start")
        return pids

    def test_a_stopped_rank_is_named_and_nccl_aborted(self):
        if MPIRUN is None:
            self.skipTest("mpirun is not installed here")
        if mbtest.visible_gpus() < 2:
            self.skipTest("one GPU visible: NCCL refuses two ranks on one GPU")
        log = self.path("stuck.h5")
        job = subprocess.Popen(
            [MPIRUN, "--oversubscribe", "-n", "2", mbtest.tool("mb-train-fmb"), "--data",
             "images.h5", "--model", "resnet8", "--batch-size", "16", "--epochs", "1000",
             "--device", "cuda", "--comm", "allreduce", "--allreduce", "nccl", "--bucket-mb",
             "0.01", "--comm-timeout", "3", "--log", log, "--flush-interval", "0.2",
             "--print-every", "1000000"],
            cwd=self.dir, env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        pids = self.rank_pids(log, 2)
        try:
            self.wait_for_steps(log, 10, timeout=120)
            stopped = time.time()
            os.kill(pids[1], signal.SIGSTOP)
            err = job.communicate(timeout=60)[1]
        finally:
            mbtest.end_job(job, pids)
        self.assertEqual(job.returncode, 4, msg=err)
        self.assertLess(time.time() - stopped, 30, msg=err)
        self.assertRegex(err, r"\(--comm-timeout\); rank 1 does not answer", msg=err)


if __name__ == "__main__":
    if mbtest.visible_gpus() == 0:
        print("SKIPPED: no CUDA GPU is visible (mb-train-fmb --version lists none)", flush=True)
        raise SystemExit(mbtest.SKIPPED)
    mbtest.main()
