"""mb-bench-bandwidth under mpirun -n 3: every operation and every exchange mode on a small sweep
checked (#wrong = 0), the table read the way scripts read it (the last '#' line names the
columns), the --append file read back with h5py, a corrupted result detected (the test hook
MBKIT_BENCH_CORRUPT=1) with a non-zero exit, a rank stopped in the middle of a timed loop
named past --comm-timeout, and bad options refused with one line."""

import concurrent.futures
import os
import shutil
import signal
import subprocess
import time
import unittest

import h5py

import mbtest

MPIRUN = shutil.which("mpirun")
OPS = ["reduce-bcast", "allreduce", "reduce", "bcast", "gather", "allgather", "reduce-scatter",
       "exchange"]


class BenchBandwidth(mbtest.ToolTestCase):
    def bench(self, ranks, *args, env=None):
        command = [mbtest.tool("mb-bench-bandwidth"), *args]
        if ranks > 0:
            command = [MPIRUN, "--oversubscribe", "-n", str(ranks), *command]
        return mbtest.run(command, cwd=self.dir, env=env or self.env, timeout=240)

    def test_every_operation_on_three_ranks_is_right_and_appended(self):
        self.assertIsNotNone(MPIRUN, "mpirun (openmpi-bin) is required")
        results = self.path("bw.h5")
        result = self.bench(3, "--op", "all", "-b", "1K", "-e", "64K", "-f", "8", "--iters", "3",
                            "--warmup-iters", "1", "--append", results)
        self.assertSucceeded(result)
        columns, rows = mbtest.parse_table(result.out)
        self.assertEqual(columns, ["op", "size", "count", "type", "time_us", "min_us", "max_us",
                                   "algbw_GBps", "busbw_GBps", "wrong"])
        modes = ["exchange-ps", "exchange-allreduce-mpi", "exchange-allreduce-shm",
                 "exchange-allreduce-auto", "exchange-async"]
        self.assertEqual(sorted({r["op"] for r in rows}), sorted(OPS[:-1] + modes))
        self.assertEqual(len(rows), 3 * (len(OPS) - 1 + len(modes)))
        for row in rows:
            self.assertEqual(row["wrong"], "0", msg=row)
            self.assertGreater(float(row["time_us"]), 0, msg=row)
            self.assertLessEqual(float(row["min_us"]), float(row["max_us"]), msg=row)
        gathers = [r for r in rows if r["op"] == "allgather"]
        self.assertEqual([int(r["size"]) for r in gathers], [1020, 8184, 65532])  # 3 blocks
        allreduce = [r for r in rows if r["op"] == "allreduce"][0]
        self.assertAlmostEqual(float(allreduce["busbw_GBps"]),
                               float(allreduce["algbw_GBps"]) * 4 / 3, delta=0.002)
        with h5py.File(results, "r") as f:
            fmt = f.attrs["format"]
            self.assertEqual(fmt.decode() if isinstance(fmt, bytes) else fmt, "mbkit-bandwidth")
            self.assertEqual(sorted(f["np3"]), sorted(OPS))
            exchange = f["np3/exchange"]
            self.assertEqual(len(exchange["bytes"]), 15)
            self.assertEqual(list(exchange["wrong"][...]), [0] * 15)
            self.assertEqual(int(f["np3/bcast"].attrs["ranks"]), 3)
        plot = mbtest.run([mbtest.tool("mb-plot"), results, "--type", "bandwidth-vs-workers",
                           "--csv", "-"], cwd=self.dir, env=self.env)
        self.assertSucceeded(plot)
        self.assertEqual(len(plot.out.splitlines()) - 1, len(rows))  # a point per row
        # A version-1 file (no large_iters/large_from) still reads.
        with h5py.File(results, "r+") as f:
            self.assertEqual(int(f.attrs["format_version"]), 2)
            self.assertEqual(int(f["np3/allreduce"].attrs["large_iters"]), 0)
            f.attrs["format_version"] = 1
            for name in f["np3"]:
                del f["np3"][name].attrs["large_iters"], f["np3"][name].attrs["large_from"]
        report = mbtest.run([mbtest.tool("mb-report"), results, "--json"], cwd=self.dir,
                            env=self.env)
        self.assertSucceeded(report)
        self.assertIn('"iters":3', report.out.replace(" ", ""))
        self.assertNotIn("large_iters", report.out)
        self.assertNoStrayFiles()

    def test_servers_and_compression_are_timed_beside_the_plain_exchange(self):
        self.assertIsNotNone(MPIRUN, "mpirun (openmpi-bin) is required")
        # 2bit:3 sends 0 for the values below 3 and 3 for the rest: the check follows the codec.
        result = self.bench(4, "--op", "exchange", "-b", "4K", "-e", "64K", "-f", "16",
                            "--iters", "2", "--warmup-iters", "1", "--servers", "1,3",
                            "--compress", "none,fp16,bf16,2bit:3")
        self.assertSucceeded(result)
        _, rows = mbtest.parse_table(result.out)
        ps = [f"exchange-ps{s}{c}" for s in ["", "-3s"] for c in ["", "+fp16", "+bf16", "+2bit:3"]]
        allreduce = [f"exchange-allreduce-mpi{c}" for c in ["", "+fp16", "+bf16", "+2bit:3"]]
        modes = ps + allreduce + ["exchange-allreduce-shm", "exchange-allreduce-auto",
                                  "exchange-async", "exchange-async-3s"]
        self.assertEqual([r["op"] for r in rows[::2]], modes)
        self.assertEqual(len(rows), 2 * len(modes))
        for row in rows:
            self.assertEqual(row["wrong"], "0", msg=row)
            self.assertEqual(row["size"], "4096" if row in rows[::2] else "65536", msg=row)
        # A wrong sum is found in the sharded and encoded modes too.
        env = mbtest.clean_env({"TMPDIR": self.dir, "MBKIT_BENCH_CORRUPT": "1"})
        result = self.bench(3, "--op", "exchange", "-b", "4K", "-e", "4K", "--iters", "1",
                            "--servers", "2", "--compress", "2bit:3", env=env)
        self.assertEqual(result.rc, 1, msg=repr(result))
        _, rows = mbtest.parse_table(result.out)
        self.assertTrue(all(int(r["wrong"]) >= 1 for r in rows), msg=repr(result))

    def test_bad_server_counts_and_encodings_give_one_line(self):
        self.assertIsNotNone(MPIRUN, "mpirun (openmpi-bin) is required")
        cases = [
            (["--servers", "3"], "--servers 3: needs 1 to 2 servers"),
            (["--servers", "0"], "--servers 0: needs 1 to 2 servers"),
            (["--servers", "1,x"], "--servers: 'x' is not an integer"),
            (["--compress", "3bit"], "--compress: '3bit'"),
        ]
        # Each refused before any timing: run at once, checked in order.
        runs = [(3, "--op", "exchange", "-b", "4K", "-e", "4K", *args) for args, _ in cases]
        runs.append((0, "--op", "allreduce", "--compress", "fp16"))
        with concurrent.futures.ThreadPoolExecutor(len(runs)) as pool:
            *results, plain = pool.map(lambda run: self.bench(*run), runs)
        for (_, text), result in zip(cases, results):
            self.assertUsageError(result, text, tool="mb-bench-bandwidth")
        self.assertFailsWith(plain, 2, "--servers and --compress apply to --op exchange only")

    def test_a_corrupted_result_is_detected(self):
        self.assertIsNotNone(MPIRUN, "mpirun (openmpi-bin) is required")
        env = mbtest.clean_env({"TMPDIR": self.dir, "MBKIT_BENCH_CORRUPT": "1"})
        for op in ["allreduce", "exchange"]:
            result = self.bench(3, "--op", op, "-b", "4K", "-e", "8K", "--iters", "2", env=env)
            self.assertEqual(result.rc, 1, msg=repr(result))
            _, rows = mbtest.parse_table(result.out)
            self.assertTrue(rows and all(int(r["wrong"]) >= 1 for r in rows), msg=repr(result))
            self.assertIn("wrong elements", result.err)

    def test_a_rank_stopped_in_a_timed_loop_is_named(self):
        # The blocking collectives run under the watchdog, armed once around each loop: the
        # ranks blocked in MPI_Allreduce name the stopped one and the job ends with status 4.
        self.assertIsNotNone(MPIRUN, "mpirun (openmpi-bin) is required")
        marker = self.path("stuck-loop.h5")
        job = subprocess.Popen(
            [MPIRUN, "--oversubscribe", "-n", "3", mbtest.tool("mb-bench-bandwidth"), "--op",
             "allreduce", "-b", "4K", "-e", "4K", "--warmup-iters", "1", "--iters", "100000000",
             "--no-check", "--comm-timeout", "2", "--append", marker],
            cwd=self.dir, env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        pids = mbtest.training_rank_pids(marker, 3, 30, program=b"mb-bench-bandwidth")
        try:
            self.assertIsNotNone(pids, "3 mb-bench-bandwidth processes did not start")
            time.sleep(1)  # into the timed loop
            stopped = time.time()
            os.kill(pids[2], signal.SIGSTOP)
            err = job.communicate(timeout=60)[1]
        finally:
            mbtest.end_job(job, pids)
        self.assertEqual(job.returncode, 4, msg=err)
        self.assertLess(time.time() - stopped, 20, msg=err)
        self.assertRegex(err, r"allreduce of 4096 bytes.*: nothing for 2 s \(--comm-timeout\); "
                              r"rank 2 does not answer", msg=err)
        self.assertNotRegex(err, r"ranks? [^2]\S* does not answer|ranks 2 and", msg=err)
        self.assertFalse(os.path.exists(marker))

    def test_sizes_besides_the_range_are_timed_in_order_once(self):
        # --also-bytes adds sizes to -b/-e/-f's (a model's gradient), each once, in order.
        result = self.bench(0, "-b", "4K", "-e", "16K", "--also-bytes", "5000,16K", "--also-bytes",
                            "1K", "--iters", "2", "--warmup-iters", "0")
        self.assertSucceeded(result)
        _, rows = mbtest.parse_table(result.out)
        self.assertEqual([int(r["size"]) for r in rows], [1024, 4096, 5000, 8192, 16384])
        self.assertTrue(all(r["wrong"] == "0" for r in rows))

    def test_a_size_that_does_not_fit_in_memory_is_named_with_its_flag(self):
        # Under a 2 GiB limit on the address space the 4 GiB buffers of -b 4G -e 4G cannot be
        # allocated (refused at once, nothing touched): the message says which size, and from
        # which flag, instead of std::bad_alloc.
        for sizes, flag in ((["-b", "4G", "-e", "4G"], "-b/--min-bytes and -e/--max-bytes"),
                            (["-b", "1K", "-e", "4G", "-f", "4194304"], "-e/--max-bytes"),
                            (["-b", "1K", "-e", "2K", "--also-bytes", "4G"], "--also-bytes")):
            result = self.run_with_address_space_limit(
                [mbtest.tool("mb-bench-bandwidth"), *sizes], 2 << 20)
            self.assertFailsWith(result, 1,
                                 f"allreduce of 4294967296 bytes ({flag}): its buffers (8.6 GB on "
                                 f"this rank) do not fit in memory")

    def test_bad_options_give_one_line(self):
        cases = [
            (["--op", "alltoall"], "--op: 'alltoall'"),
            (["-b", "2M", "-e", "1M"], "--min-bytes"),
            (["-b", "1Q"], "--min-bytes: '1Q'"),
            (["--also-bytes", "8K,0"], "--also-bytes: the size must be at least 1 byte"),
            (["--also-bytes", "1x"], "--also-bytes: '1x' is not a size in bytes"),
            (["--dtype", "half"], "--dtype"),
            (["--step-factor", "1"], "--step-factor"),
            (["--op", "exchange"], "at least 2 ranks"),
            (["--transport", "nccl"], "--transport nccl: NCCL moves GPU memory"),
            (["--device", "cuda", "--op", "gather"], "--op gather: NCCL has no such collective"),
            (["--device", "cuda", "--op", "exchange"], "--op exchange: the trainers' exchange"),
            # Loads the CUDA plugin (about 1 s): no GPU here, or none numbered 99 on a GPU host.
            (["--device", "cuda:99", "--transport", "mpi"], "--device cuda:99: "),
        ]
        # Each refused before any timing: run at once, checked in order.
        with concurrent.futures.ThreadPoolExecutor(len(cases)) as pool:
            results = list(pool.map(lambda case: self.bench(0, *case[0]), cases))
        for (_, text), result in zip(cases, results):
            self.assertFailsWith(result, 2, text)


if __name__ == "__main__":
    mbtest.main()
