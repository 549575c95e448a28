"""mb-bench-bandwidth --device cuda: NCCL's collectives on GPU buffers (--transport nccl, the
default there) and MPI's staged through pinned host memory (--transport mpi) give the exact
expected values (column wrong 0) on one rank, and on two when two GPUs are visible; the header
names each rank's GPU and NCCL's version; GPU rows sit beside each other in one --append file,
keyed by the transport. A rank stopped in the middle of the timed loop (two GPUs) is named by the
other within the --comm-timeout, which aborts its NCCL communicator and exits 4.

Without a visible GPU the file reports itself skipped (status 77); tests/gpu/run-all runs it on a
machine with one. The refusals that need no GPU (nccl on the CPU, an operation NCCL lacks, a GPU
that does not exist) are tests/e2e/test_bench_bandwidth.py's and
tests/benchtools/test_bandwidth.cpp's."""

import os
import shutil
import signal
import subprocess
import time

import h5py

import mbtest

MPIRUN = shutil.which("mpirun")
NCCL_OPS = ["allreduce", "reduce", "bcast", "allgather", "reduce-scatter"]
MPI_OPS = ["reduce-bcast", "allreduce", "reduce", "bcast", "gather", "allgather", "reduce-scatter"]


class CudaBandwidth(mbtest.ToolTestCase):
    def bench(self, ranks, *args):
        command = [mbtest.tool("mb-bench-bandwidth"), "--device", "cuda", *args]
        if MPIRUN:
            command = [MPIRUN, "--oversubscribe", "-n", str(ranks), *command]
        elif ranks > 1:
            self.skipTest("mpirun is not installed here")
        return mbtest.run(command, cwd=self.dir, env=self.env, timeout=300)

    def assertRight(self, result, ops, suffix, ranks):
        """Status 0, a row per operation and size, every one checked right, and the header's
        device and transport lines."""
        self.assertSucceeded(result)
        _, rows = mbtest.parse_table(result.out)
        self.assertEqual(sorted({r["op"] for r in rows}), sorted(f"{op}-{suffix}" for op in ops),
                         msg=result.out)
        self.assertTrue(all(r["wrong"] == "0" for r in rows), msg=result.out)
        self.assertTrue(all(float(r["time_us"]) > 0 for r in rows), msg=result.out)
        self.assertIn("# wrong elements: 0", result.out)
        self.assertRegex(result.out, r"\n# device: cuda:0: [^\n]+GiB")
        if ranks > 1:
            self.assertRegex(result.out, r"\n# device: [^\n]*cuda:1: ")
        if suffix == "nccl":
            self.assertRegex(result.out, r"\n# transport: NCCL \d+\.\d+\.\d+ on the GPU buffers")
        else:
            self.assertRegex(result.out, r"\n# transport: MPI, each iteration staged")
        return rows

    def test_one_rank_every_collective_of_both_transports_is_right(self):
        results = self.path("bw.h5")
        common = ["-b", "4K", "-e", "4M", "-f", "32", "--iters", "5", "--append", results]
        self.assertRight(self.bench(1, "--op", "all", *common), NCCL_OPS, "nccl", 1)
        self.assertRight(self.bench(1, "--op", "all", "--transport", "mpi", *common), MPI_OPS,
                         "cuda-mpi", 1)
        self.assertRight(self.bench(1, "--dtype", "double", "-b", "4K", "-e", "4M", "-f", "32",
                                    "--iters", "5"), ["allreduce"], "nccl", 1)
        with h5py.File(results, "r") as f:
            keys = sorted(f["np1"])
        self.assertEqual(keys, sorted([f"{op}-nccl" for op in NCCL_OPS]
                                      + [f"{op}-cuda-mpi" for op in MPI_OPS]))

    def test_two_ranks_each_on_its_gpu_are_right(self):
        if mbtest.visible_gpus() < 2:
            self.skipTest("one GPU visible: NCCL refuses two ranks on one GPU")
        common = ["--op", "all", "-b", "4K", "-e", "64M", "-f", "16", "--iters", "5"]
        self.assertRight(self.bench(2, *common), NCCL_OPS, "nccl", 2)
        self.assertRight(self.bench(2, *common, "--transport", "mpi"), MPI_OPS, "cuda-mpi", 2)

    def test_a_stopped_rank_is_named_and_nccl_aborted(self):
        if MPIRUN is None:
            self.skipTest("mpirun is not installed here")
        if mbtest.visible_gpus() < 2:
            self.skipTest("one GPU visible: NCCL refuses two ranks on one GPU")
        marker = self.path("stuck-marker.h5")  # names this job's processes; never written
        job = subprocess.Popen(
            [MPIRUN, "--oversubscribe", "-n", "2", mbtest.tool("mb-bench-bandwidth"), "--device",
             "cuda", "-b", "64M", "-e", "64M", "--iters", "100000000", "--comm-timeout", "3",
             "--append", marker],
            cwd=self.dir, env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        pids = None
        try:
            pids = mbtest.training_rank_pids(marker, 2, 60, program=b"mb-bench-bandwidth")
            self.assertIsNotNone(pids, "2 mb-bench-bandwidth processes did not start")
            time.sleep(5)  # set up, warmed up, in the timed loop
            stopped = time.time()
            os.kill(pids[1], signal.SIGSTOP)
            err = job.communicate(timeout=60)[1]
        finally:
            mbtest.end_job(job, pids)
        self.assertEqual(job.returncode, 4, msg=err)
        self.assertLess(time.time() - stopped, 30, msg=err)
        self.assertRegex(err, r"\(--comm-timeout\); rank 1 does not answer", msg=err)
        self.assertFalse(os.path.exists(marker))


if __name__ == "__main__":
    if mbtest.visible_gpus() == 0:
        print("SKIPPED: no CUDA GPU is visible (mb-train-fmb --version lists none)", flush=True)
        raise SystemExit(mbtest.SKIPPED)
    mbtest.main()
