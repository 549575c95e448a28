"""mb-train-fmb under mpirun: the exchanges against single-process training (allreduce with N
workers of batch b against one process with batch N*b on the same samples, ps against allreduce,
counts-weighted averaging with unequal counts), shard patterns, asynchronous updates and
staleness, induced stragglers, resume on another number of workers, and failures: a killed or
stuck rank ends the job quickly with a message naming it, ranks that disagree are refused."""

import concurrent.futures
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import unittest

import h5py
import numpy as np

import mbtest

MPIRUN = shutil.which("mpirun")


def params_of(path):
    with h5py.File(path, "r") as f:
        return {name: f["params"][name][...] for name in f["params"]}


class Distributed(mbtest.ToolTestCase):
    def setUp(self):
        super().setUp()
        self.assertIsNotNone(MPIRUN, "mpirun (openmpi-bin) is required")

    def toy(self, train, test=60, name="toy.h5"):
        result = self.mb_dataset("synth", "toy", "--learnable", "--train", str(train), "--test",
                                 str(test), "-o", self.path(name))
        self.assertSucceeded(result)
        return self.path(name)

    def mpi_env(self):
        """The test's environment with a TMPDIR of its own: mpiruns started at once race to
        make one session directory ("unable to create the desired directory ... File
        exists")."""
        return dict(self.env, TMPDIR=tempfile.mkdtemp(prefix="mpirun-", dir=self.dir))

    def mpirun(self, command, timeout=300):
        return mbtest.run([MPIRUN, "--oversubscribe", *command], cwd=self.dir,
                          env=self.mpi_env(), timeout=timeout)

    def train(self, ranks, *args, timeout=300, quiet=True):
        common = ["--model", "mlp", "--hidden", "16", "--optimizer", "momentum", "--lr", "0.05",
                  "--threads", "1"] + (["-q"] if quiet else [])
        command = [mbtest.tool("mb-train-fmb"), *common, *args]
        if ranks > 0:
            return self.mpirun(["-n", str(ranks), *command], timeout=timeout)
        return mbtest.run(command, cwd=self.dir, env=self.env, timeout=timeout)

    @staticmethod
    def at_once(*calls):
        """What independent runs (callables) return, the runs made at once: most of a small
        run under mpirun is its start-up's waits, which overlap."""
        with concurrent.futures.ThreadPoolExecutor(len(calls)) as pool:
            return [future.result() for future in [pool.submit(call) for call in calls]]

    def assertSameParams(self, a, b, rtol=2e-5, atol=2e-6):
        pa, pb = params_of(a), params_of(b)
        self.assertEqual(sorted(pa), sorted(pb))
        for name in pa:
            np.testing.assert_allclose(pa[name], pb[name], rtol=rtol, atol=atol, err_msg=name)

    # -- correctness -------------------------------------------------------------------------

    def test_allreduce_matches_one_process_with_the_global_batch(self):
        # 3 workers x 32 rows: each worker's batch is its whole slice, so every step of both runs
        # sees the same 96 samples.
        data = self.toy(96)
        for result in self.at_once(
                lambda: self.train(0, "--data", data, "--batch-size", "96", "--steps", "6",
                                   "--checkpoint", "one.h5"),
                lambda: self.train(3, "--data", data, "--batch-size", "32", "--steps", "6",
                                   "--comm", "allreduce", "--checkpoint", "three.h5", "--log",
                                   "three-log.h5")):
            self.assertSucceeded(result)
        self.assertSameParams(self.path("one.h5"), self.path("three.h5"))
        with h5py.File(self.path("three-log.h5"), "r") as log:
            self.assertEqual(int(mbtest.text_attrs(log)["world_size"]), 3)
            self.assertEqual(list(log["steps/samples"][...]), [96] * 6)
            self.assertEqual(sorted(set(log["workers/rank"][...])), [0, 1, 2])
            self.assertEqual(len(log["workers/step"]), 18)
            self.assertEqual(list(log["collect/gradients"][...]), [3] * 6)

    def test_exchange_unit_tests_on_three_ranks(self):
        # tests/comm/test_exchange_ranks.cpp: one message against two, shared memory and buckets
        # against MPI_Allreduce, and the sums by hand; tests/comm/test_shared_sum_ranks.cpp: the
        # shared-memory sum's order, bits and waits, and the
        # --allreduce auto trial's agreement; tests/comm/test_in_flight_ranks.cpp: an exchange
        # destroyed with messages pending leaves their buffers to MPI.
        result = mbtest.run([MPIRUN, "--oversubscribe", "-n", "3", mbtest.tool("test_comm"),
                             "--gtest_filter=OnRanks.*", "--gtest_color=no"], cwd=self.dir, env=self.env, timeout=120)
        self.assertSucceeded(result)
        for test in ("OneMessageEqualsTwoAndTheHandSums", "SharedMemoryEqualsMpiAllreduce",
                     "BucketsGiveTheOneSumResult",
                     "SharedSumAddsInRankOrderAndEveryRankGetsTheSameBits",
                     "SharedSumReportsTheWaitForALateRank",
                     "AllreduceTrialGivesEveryRankTheSameFigures",
                     "AnExchangeDestroyedWithMessagesPendingLeavesTheirBuffersToMpi"):
            self.assertEqual(result.out.count(f"[       OK ] OnRanks.{test}"), 3, result)

    def test_ps_matches_allreduce(self):
        data = self.toy(96)
        for result in self.at_once(
                lambda: self.train(3, "--data", data, "--batch-size", "32", "--steps", "6",
                                   "--comm", "allreduce", "--checkpoint", "ar.h5"),
                lambda: self.train(4, "--data", data, "--batch-size", "32", "--steps", "6",
                                   "--comm", "ps", "--checkpoint", "ps.h5", "--log",
                                   "ps-log.h5")):
            self.assertSucceeded(result)
        self.assertSameParams(self.path("ar.h5"), self.path("ps.h5"))
        with h5py.File(self.path("ps-log.h5"), "r") as log:
            # The master (rank 0) computes nothing: only ranks 1-3 report.
            self.assertEqual(sorted(set(log["workers/rank"][...])), [1, 2, 3])

    def test_unequal_counts_are_weighted_by_samples(self):
        # 95 rows over 3 workers: slices of 31, 32 and 32. The combined gradient must be the
        # mean over the 95 samples, not the mean of the three workers' means.
        data = self.toy(95)
        for result in self.at_once(
                lambda: self.train(0, "--data", data, "--batch-size", "95", "--steps", "5",
                                   "--checkpoint", "one.h5"),
                lambda: self.train(3, "--data", data, "--batch-size", "32", "--steps", "5",
                                   "--comm", "allreduce", "--checkpoint", "three.h5", "--log",
                                   "log.h5")):
            self.assertSucceeded(result)
        self.assertSameParams(self.path("one.h5"), self.path("three.h5"))
        with h5py.File(self.path("log.h5"), "r") as log:
            self.assertEqual(list(log["steps/samples"][...]), [95] * 5)
            self.assertEqual(sorted(set(log["workers/samples"][...])), [31, 32])

    def test_same_seed_and_world_size_give_the_same_model(self):
        data = self.toy(300)
        for result in self.at_once(*[
                lambda name=name: self.train(3, "--data", data, "--batch-size", "16", "--epochs",
                                             "2", "--checkpoint", name)
                for name in ("a.h5", "b.h5")]):
            self.assertSucceeded(result)
        a, b = params_of(self.path("a.h5")), params_of(self.path("b.h5"))
        for name in a:
            self.assertTrue(np.array_equal(a[name], b[name]), msg=name)

    def test_shared_memory_and_mpi_allreduce_agree(self):
        # Two ranks: a + b is b + a, so both sums give the same bits. Three: the shared-memory sum
        # adds in rank order, MPI in its own; the models agree within float tolerance. Three
        # ranks' --allreduce auto is MPI_Allreduce, untimed (checked below): that run is the
        # three ranks' MPI sum. Every run at once.
        data = self.toy(300)
        common = ["--data", data, "--batch-size", "16", "--steps", "12", "--comm", "allreduce"]
        runs = [("shm", 2), ("mpi", 2), ("shm", 3), ("auto", 3)]
        # --allreduce auto, two ranks on one host: both sums are timed at start and the faster
        # one runs; the start table and the log say which, with both times.
        auto_2, *trained = self.at_once(
            lambda: self.mpirun(["-n", "2", mbtest.tool("mb-train-fmb"), "--data", data,
                                 "--model", "mlp", "--hidden", "16", "--steps", "2", "--comm",
                                 "allreduce", "--log", "auto-log.h5"]),
            *[lambda via=via, ranks=ranks: self.train(
                ranks, *common, "--allreduce", via, "--checkpoint", f"{via}-{ranks}.h5",
                "--log", f"{via}-{ranks}-log.h5", quiet=via != "auto") for via, ranks in runs])
        for result in trained:
            self.assertSucceeded(result)
        auto_3 = trained[-1]
        for via, ranks in runs[:-1]:
            with h5py.File(self.path(f"{via}-{ranks}-log.h5"), "r") as log:
                self.assertIn(f'"allreduce":"{via}"', mbtest.text_attrs(log)["config"])
        shm, mpi = params_of(self.path("shm-2.h5")), params_of(self.path("mpi-2.h5"))
        for name in shm:
            self.assertTrue(np.array_equal(shm[name], mpi[name]), msg=name)
        self.assertSameParams(self.path("shm-3.h5"), self.path("auto-3.h5"))
        self.assertSucceeded(auto_2)
        self.assertRegex(auto_2.err, r"2 \(allreduce (through shared memory|with MPI_Allreduce): "
                                     r"[0-9.e+-]+ m?s per sum against MPI_Allreduce.s [0-9.e+-]+ m?s "
                                     r"at start\), ranks 0-1 on")
        with h5py.File(self.path("auto-log.h5"), "r") as log:
            config = json.loads(mbtest.text_attrs(log)["config"])
        trial = config["allreduce_trial"]
        self.assertGreater(trial["shm_seconds"], 0)
        self.assertGreater(trial["mpi_seconds"], 0)
        self.assertEqual(config["allreduce"],
                         "shm" if trial["shm_seconds"] < trial["mpi_seconds"] else "mpi")
        self.assertEqual(config["allreduce"] == "shm", "through shared memory" in auto_2.err)
        # Three ranks: the two sums add in different orders, and a run must not depend on a
        # timing: auto is MPI_Allreduce, untimed.
        self.assertIn("3 (allreduce with MPI_Allreduce), ranks 0-2 on", auto_3.err)
        with h5py.File(self.path("auto-3-log.h5"), "r") as log:
            config = json.loads(mbtest.text_attrs(log)["config"])
        self.assertEqual(config["allreduce"], "mpi")
        self.assertNotIn("allreduce_trial", config)

    def test_buckets_agree_with_one_sum(self):
        # --bucket-mb 0.0005 (131 floats) against hidden layers of 16, 32 and 16 (the helper's
        # --hidden 16 comes first): several sums start during the backward pass. Two ranks: the same bits as one MPI_Allreduce; three:
        # one process with the global batch, within float tolerance.
        data = self.toy(96)
        model = ["--hidden", "32,16", "--batch-size", "32", "--steps", "6", "--comm", "allreduce",
                 "--allreduce", "mpi"]
        # Every run at once. The shared-memory sum has no buckets: auto takes MPI's (the last
        # but one), shm is refused (the last).
        one_sum, result, single, three, auto, shm = self.at_once(
            lambda: self.train(2, "--data", data, *model, "--checkpoint", "one-sum.h5"),
            lambda: self.train(2, "--data", data, *model, "--bucket-mb", "0.0005",
                               "--checkpoint", "buckets.h5", "--log", "buckets-log.h5",
                               quiet=False),
            lambda: self.train(0, "--data", data, "--hidden", "32,16", "--batch-size", "96",
                               "--steps", "6", "--checkpoint", "single.h5"),
            lambda: self.train(3, "--data", data, *model, "--bucket-mb", "0.0005",
                               "--checkpoint", "three.h5"),
            lambda: self.train(2, "--data", data, *model[:-2], "--bucket-mb", "1", quiet=False),
            lambda: self.train(2, "--data", data, *model[:-2], "--allreduce", "shm",
                               "--bucket-mb", "1"))
        for succeeded in (one_sum, result, single, three, auto):
            self.assertSucceeded(succeeded)
        self.assertIn("2 (allreduce with MPI_Iallreduce in buckets of 0.0005 MiB during the backward "
                      "pass), ranks 0-1 on", result.err)
        one_sum, buckets = params_of(self.path("one-sum.h5")), params_of(self.path("buckets.h5"))
        for name in one_sum:
            self.assertTrue(np.array_equal(one_sum[name], buckets[name]), msg=name)
        with h5py.File(self.path("buckets-log.h5"), "r") as log:
            self.assertEqual(json.loads(mbtest.text_attrs(log)["config"])["bucket_mb"], 0.0005)
            self.assertTrue(np.all(log["workers/send_time"][...] >= 0))
        self.assertSameParams(self.path("single.h5"), self.path("three.h5"))
        self.assertIn("2 (allreduce with MPI_Iallreduce in buckets of 1 MiB during the backward "
                      "pass), ranks 0-1 on", auto.err)
        self.assertEqual(shm.rc, 2, msg=repr(shm))
        self.assertIn("mb-train-fmb: error: --bucket-mb: the shared-memory sum has no buckets (it "
                      "needs every gradient at once); use --allreduce mpi or auto", shm.err)

    # -- data, modes, stragglers --------------------------------------------------------------

    def test_shard_pattern_gives_each_worker_its_file(self):
        data = self.toy(300)
        shards = self.mb_dataset("shard", data, "-n", "3", "-o", self.path("sh"))
        self.assertSucceeded(shards)
        result, missing = self.at_once(
            lambda: self.train(4, "--data", self.path("sh-%05d-of-%05d.h5"), "--batch-size", "10",
                               "--epochs", "2", "--log", "log.h5", "--eval-every", "5"),
            lambda: self.train(4, "--data", self.path("none-%d.h5"), "--steps", "1"))
        self.assertSucceeded(result)
        with h5py.File(self.path("log.h5"), "r") as log:
            self.assertEqual(len(log["steps/step"]), 20)  # 100 rows per shard, batches of 10
            self.assertEqual(list(log["eval/step"][...]), [5, 10, 15, 20])
            self.assertGreater(log["eval/accuracy"][-1], 0.2)  # 10 classes: chance is 0.1
        self.assertEqual(missing.rc, 3, msg=repr(missing))
        self.assertIn("none-0.h5", missing.err)

    def test_async_updates_log_staleness(self):
        data = self.toy(600)
        result, too_many = self.at_once(
            lambda: self.train(4, "--data", data, "--batch-size", "8", "--steps", "60", "--async",
                               "--log", "log.h5", "--induce", "0:0:0.7,0.02:0.005:0.3",
                               "--checkpoint", "ckpt.h5"),
            lambda: self.train(3, "--data", data, "--steps", "5", "--async", "--async-min-grads",
                               "3"))
        self.assertSucceeded(result)
        with h5py.File(self.path("log.h5"), "r") as log:
            self.assertEqual(len(log["steps/step"]), 60)
            staleness = log["workers/staleness"][...]
            self.assertGreaterEqual(staleness.min(), 0)
            self.assertGreater(staleness.max(), 0)  # three workers: some gradients are stale
            gradients = log["collect/gradients"][...]
            self.assertGreaterEqual(gradients.min(), 1)
            self.assertEqual(int(log["collect/samples"][...].sum()),
                             int(log["steps/samples"][...].sum()))
        with h5py.File(self.path("ckpt.h5"), "r") as ckpt:
            self.assertEqual(mbtest.text_attrs(ckpt)["comm"], "ps-async")
            self.assertEqual(int(mbtest.text_attrs(ckpt)["workers"]), 3)
        self.assertEqual(too_many.rc, 2, msg=repr(too_many))
        self.assertIn("--async-min-grads 3 is more than the 2 workers", too_many.err)

    def test_induced_delays_and_slowdown_are_slept_and_logged(self):
        data = self.toy(300)
        result, bad = self.at_once(
            lambda: self.train(3, "--data", data, "--batch-size", "10", "--steps", "8",
                               "--induce", "0.03:0:1", "--slowdown", "2=3", "--log", "log.h5",
                               "--comm", "allreduce"),
            lambda: self.train(3, "--data", data, "--steps", "1", "--slowdown", "5=2"))
        self.assertSucceeded(result)
        with h5py.File(self.path("log.h5"), "r") as log:
            rank = log["workers/rank"][...]
            sleep = log["workers/sleep_time"][...]
            compute = log["workers/compute_time"][...]
            np.testing.assert_allclose(sleep[rank != 2], 0.03, rtol=1e-4)
            np.testing.assert_allclose(sleep[rank == 2], 0.03 + 2 * compute[rank == 2],
                                       rtol=1e-4, atol=1e-6)
            # Each step waits for the delays: no step is shorter than them.
            self.assertGreaterEqual(log["steps/step_time"][...].min(), 0.03)
        self.assertEqual(bad.rc, 2, msg=repr(bad))
        self.assertIn("--slowdown: rank 5 does not exist", bad.err)

    def test_resume_on_another_number_of_workers(self):
        data = self.toy(240)
        first = self.train(4, "--data", data, "--batch-size", "10", "--steps", "6",
                           "--checkpoint", "ckpt.h5", "--log", "log.h5")
        self.assertSucceeded(first)
        second = self.train(2, "--data", data, "--batch-size", "10", "--steps", "14",
                            "--checkpoint", "ckpt.h5", "--resume", "auto", "--log", "log.h5",
                            "--comm", "allreduce")
        self.assertSucceeded(second)
        with h5py.File(self.path("ckpt.h5"), "r") as ckpt:
            self.assertEqual(int(mbtest.text_attrs(ckpt)["step"]), 14)
            self.assertEqual(int(mbtest.text_attrs(ckpt)["workers"]), 2)
            self.assertEqual(mbtest.text_attrs(ckpt)["comm"], "allreduce")
            # 6 steps of 30 samples, then 8 of 20: 340 samples of 240 rows.
            self.assertAlmostEqual(float(mbtest.text_attrs(ckpt)["epoch_progress"]), 340 / 240, places=6)
        with h5py.File(self.path("log.h5"), "r", libver="latest", swmr=True) as log:
            self.assertEqual(list(log["steps/step"][...]), list(range(1, 15)))
            self.assertEqual(list(log["steps/samples"][...]), [30] * 6 + [20] * 8)

    # -- failures ------------------------------------------------------------------------------

    def start(self, ranks, *args, tool="mb-train-fmb"):
        command = [MPIRUN, "--oversubscribe", "-n", str(ranks), mbtest.tool(tool),
                   "--model", "mlp", "--hidden", "16", "--threads", "1", "--print-every",
                   "1000000", *args]
        job = subprocess.Popen(command, cwd=self.dir, env=self.mpi_env(),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        # A scenario that fails before its job ends leaves no job training 1000 epochs behind.
        self.addCleanup(lambda: job.poll() is None and job.kill())
        return job

    @staticmethod
    def kill_stopped_rank(pid, marker):
        """SIGKILLs a SIGSTOPped rank if it is still there. Its PID is checked to be still that
        rank's (`marker` on its command line): once the job ended, the PID may be a rank of
        another job, started since by a scenario beside it (PIDs wrap at 32768 here)."""
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if marker.encode() not in f.read():
                    return
            os.kill(pid, signal.SIGKILL)
        except (FileNotFoundError, ProcessLookupError):
            pass

    def stderr_then_kill(self, job, stopped_pid, marker, timeout):
        """The job's stderr once it ended; the SIGSTOPped rank is killed whatever happened."""
        try:
            return job.communicate(timeout=timeout)[1]
        finally:
            self.kill_stopped_rank(stopped_pid, marker)

    def rank_pids(self, marker, count, timeout=30, job=None, err_path=None):
        """{rank: PID} of the training processes whose command line holds `marker`."""
        pids = mbtest.training_rank_pids(marker, count, timeout)
        if pids is None:
            ended = ""
            if job is not None and job.poll() is not None:
                ended = f"; the job ended with status {job.returncode}"
                if err_path:
                    with open(err_path) as f:
                        ended += ": " + f.read()
            self.fail(f"{count} training processes did not start{ended}")
        return pids

    @contextlib.contextmanager
    def training_slot(self):
        """One of three places for a job that trains at full speed (from its start until its rank
        is stopped, killed or signalled). With all ten at once on two cores (each rank of an
        exchange waiting for the others to be scheduled), one did not reach 20 steps in 60 s."""
        if not self.slots.acquire(timeout=240):
            self.fail("no job stopped training within 240 s")
        try:
            yield
        finally:
            self.slots.release()

    def test_failures_end_the_job_naming_the_rank(self):
        # Every failure scenario at once, three jobs training at a time: once its rank is
        # killed, stopped or signalled, each job mostly waits (for its --comm-timeout, the stop
        # grace, mpirun's end of the job), and the waits overlap. Each scenario runs in a thread
        # and returns its checks, made here, one subtest each (a scenario's own failure to start
        # or to reach its steps fails its subtest). The stop grace's scenario, the longest wait,
        # starts first.
        data = self.toy(3000)
        self.slots = threading.Semaphore(3)
        stuck = (("ps", "auto", "0", []), ("ps", "auto", "0", ["--async", "--steps", "2000000"]),
                 ("ps", "auto", "0", ["--backup-workers", "1"]),
                 ("allreduce", "shm", "0", []), ("allreduce", "mpi", "0", []),
                 ("allreduce", "mpi", "0.0001", []))
        scenarios = [
            ("stop signal, stuck rank",
             self.stop_signal_with_a_stuck_rank_ends_within_the_grace),
            *[(f"stuck worker, --comm {comm} --allreduce {via} --bucket-mb {bucket} "
               f"{' '.join(extra)}".rstrip(),
               lambda data, case=(comm, via, bucket, extra):
                   self.stuck_worker_times_out_naming_it(data, *case))
              for comm, via, bucket, extra in stuck],
            ("stuck DBSL worker", self.stuck_dbsl_worker_is_named),
            ("killed worker", self.killed_worker_ends_the_job_quickly),
            ("SIGTERM to the master", self.sigterm_to_the_master_saves_and_stops_every_rank)]
        with concurrent.futures.ThreadPoolExecutor(len(scenarios)) as pool:
            started = [(name, pool.submit(scenario, data)) for name, scenario in scenarios]
            for name, future in started:
                with self.subTest(scenario=name):
                    future.result()()

    # The failure scenarios of test_failures_end_the_job_naming_the_rank: each is given the toy
    # data, runs its job in a thread of its own and returns its checks.

    def killed_worker_ends_the_job_quickly(self, data):
        log = self.path("kill.h5")
        with self.training_slot():
            job = self.start(3, "--data", data, "--epochs", "1000", "--log", log,
                             "--flush-interval", "0.2", "--batch-size", "8")
            pids = self.rank_pids(log, 3, job=job)
            self.wait_for_steps(log, 20)
            killed = time.time()
            os.kill(pids[2], signal.SIGKILL)
        job.communicate(timeout=30)
        seconds = time.time() - killed

        def check():
            self.assertNotEqual(job.returncode, 0)
            self.assertLess(seconds, 15)
        return check

    def stuck_worker_times_out_naming_it(self, data, comm, via, bucket, extra):
        name = f"stuck-{comm}-{via}-{bucket}{len(extra)}"
        log, err_path = self.path(name + ".h5"), self.path(name + ".err")
        with self.training_slot():
            # stderr to a file, read once the job ended (a pipe nobody reads could fill).
            with open(err_path, "w") as err_file:
                job = subprocess.Popen(
                    [MPIRUN, "--oversubscribe", "-n", "3", mbtest.tool("mb-train-fmb"),
                     "--model", "mlp", "--hidden", "16", "--threads", "1", "--print-every",
                     "1000000", "--data", data, "--epochs", "1000", "--log", log,
                     "--flush-interval", "0.2", "--batch-size", "8", "--comm", comm,
                     "--allreduce", via, "--bucket-mb", bucket, "--comm-timeout", "2",
                     *extra], cwd=self.dir, env=self.mpi_env(), stdout=subprocess.DEVNULL,
                    stderr=err_file)
            # A failure before the job's end leaves no job training 1000 epochs behind.
            self.addCleanup(lambda: job.poll() is None and job.terminate())
            pids = self.rank_pids(log, 3, job=job, err_path=err_path)
            self.wait_for_steps(log, 20)
            os.kill(pids[2], signal.SIGSTOP)
            stopped_at = time.time()
        try:
            job.wait(timeout=40)
        finally:
            self.kill_stopped_rank(pids[2], log)
        seconds = time.time() - stopped_at
        return lambda: self.check_stuck_worker(via, job.returncode, seconds, err_path)

    def check_stuck_worker(self, via, returncode, seconds, err_path):
        with open(err_path) as f:
            err = f.read()
        self.assertEqual(returncode, 4, msg=err)
        self.assertLess(seconds, 20)
        # (--async, --backup-workers: the other worker's gradients keep the master's
        # waits short; rank 2 is named once it has been silent for --comm-timeout.)
        # Every rank that gives up names the ranks that do not answer: rank 2 alone,
        # wherever it stopped (a rank blocked inside a collective that rank 2 stopped in
        # answers pings from its watchdog thread, and names rank 2 itself).
        if via == "shm":  # no collective to be stuck in: the waits read rank 2's counter
            self.assertRegex(err, r"waiting for the other ranks(' \w+| to read the sum) at step \d+: "
                                  r"nothing for 2 s "
                                  r"\(--comm-timeout\); rank 2 does not answer", msg=err)
        named = mbtest.stuck_rank_names(self, err, 2)
        # ... and where it runs (one host here: every rank's is gathered at start).
        self.assertEqual(len(re.findall(r"does not answer \([^)]*\); it runs on host " +
                                        re.escape(socket.gethostname()), err)),
                         len(named), msg=err)
        self.assertNotIn("did not complete", err)

    def stuck_dbsl_worker_is_named(self, data):
        # DBSL's server merges each push as it comes (as --async), so the other worker's pushes
        # keep its waits short: the silent worker is named once it has been silent for
        # --comm-timeout, not at the end of the run.
        log = self.path("stuck-dbsl.h5")
        with self.training_slot():
            job = self.start(3, "--data", data, "--epochs", "2000", "--log", log,
                             "--flush-interval", "0.2", "--base-batch", "16", "--extra-time",
                             "1.25", "--small-workers", "1", "--time-model-ab", "0.001,0.01",
                             "--comm-timeout", "2", tool="mb-train-dbsl")
            pids = self.rank_pids(log, 3, job=job)
            self.wait_for_steps(log, 20)
            os.kill(pids[2], signal.SIGSTOP)
            stopped = time.time()
        err = self.stderr_then_kill(job, pids[2], log, timeout=60)
        seconds = time.time() - stopped

        def check():
            self.assertEqual(job.returncode, 4, msg=err)
            self.assertLess(seconds, 20, msg=err)
            self.assertIn("server waiting for a push for step", err)
            # The server (rank 0) gives up first and ends the job naming rank 2; Open MPI then
            # wakes the stopped rank (SIGCONT before its SIGTERM), and the workers still waiting
            # for the server's model may rightly name the server, which is gone. (mpirun's own
            # MPI_ABORT notice is not always printed: once its help text failed to unpack.)
            named = []
            for line in err.splitlines():
                found = re.search(r"\(--comm-timeout\); ranks? ([0-9, and]+) do(?:es)? not answer",
                                  line)
                if not found:
                    continue
                ranks = re.split(r", | and ", found.group(1))
                by = re.search(r"error: rank (\d+) |rank (\d+): error:", line)
                rank = by and (by.group(1) or by.group(2))
                self.assertIn(ranks, (["2"],) if rank == "0" else (["2"], ["0"]), msg=err)
                named.append(ranks)
            self.assertIn(["2"], named, msg=err)
        return check

    def stop_signal_with_a_stuck_rank_ends_within_the_grace(self, data):
        # srun --kill-on-bad-exit, when a rank dies, sends SIGTERM to the others and SIGKILLs
        # them 30 s later (KillWait). A graceful stop that waits for the dead rank gives up after
        # 10 s (kStopGrace), whatever --comm-timeout is, and names the rank. A SIGSTOPped worker
        # stands for the dead one: under mpirun a dead rank ends the job at once.
        log = self.path("grace.h5")
        with self.training_slot():
            job = self.start(3, "--data", data, "--epochs", "1000", "--log", log,
                             "--flush-interval", "0.2", "--batch-size", "8", "--comm-timeout",
                             "120")
            pids = self.rank_pids(log, 3, job=job)
            self.wait_for_steps(log, 20)
            os.kill(pids[2], signal.SIGSTOP)
            signalled = time.time()
            os.kill(pids[0], signal.SIGTERM)
            os.kill(pids[1], signal.SIGTERM)
        err = self.stderr_then_kill(job, pids[2], log, timeout=60)
        seconds = time.time() - signalled

        def check():
            self.assertEqual(job.returncode, 4, msg=err)
            self.assertLess(seconds, 25)
            # The ranks waiting for rank 2, inside a collective or not, name it.
            found = re.findall(r"nothing for 1\d(?:\.\d)? s, stopping after a signal; ranks? "
                               r"([0-9, and]+) do", err)
            self.assertTrue(found, msg=err)
            for ranks in found:
                self.assertEqual(re.split(r", | and ", ranks), ["2"], msg=err)
        return check

    def sigterm_to_the_master_saves_and_stops_every_rank(self, data):
        # Its log and checkpoint in a directory of their own: no temporary of theirs is left,
        # whatever the scenarios beside it leave.
        os.mkdir(self.path("term"))
        log, checkpoint = self.path("term/term.h5"), self.path("term/term-ckpt.h5")
        with self.training_slot():
            job = self.start(3, "--data", data, "--epochs", "1000", "--log", log,
                             "--flush-interval", "0.2", "--batch-size", "8", "--checkpoint",
                             checkpoint)
            pids = self.rank_pids(log, 3, job=job)
            self.wait_for_steps(log, 20)
            os.kill(pids[0], signal.SIGTERM)
        _, err = job.communicate(timeout=60)

        def check():
            self.assertEqual(job.returncode, 6, msg=err)
            with h5py.File(checkpoint, "r") as ckpt:
                self.assertGreaterEqual(int(mbtest.text_attrs(ckpt)["step"]), 20)
            self.assertNoStrayFiles(self.path("term"))
        return check

    def test_ranks_that_disagree_are_refused(self):
        data = self.toy(300)
        tool = mbtest.tool("mb-train-fmb")
        common = ["--data", data, "--model", "mlp", "--steps", "2", "-q"]
        # The whole configuration is compared: the learning rate and its schedule too, in both
        # exchanges; and --threads (it changes a rank's sums, hence the bits) and --log (rank 0
        # alone writes it: per-rank paths would not give per-rank logs).
        same = "every rank must get the same options"
        cases = [
            ("ps", [], ["--lr", "0.2"], "lr=0.01 on rank 0 but lr=0.2 on rank 2", same),
            ("allreduce", [], ["--lr-schedule", "exponential"],
             'lr_schedule="constant" on rank 0 but lr_schedule="exponential" on rank 2', same),
            ("ps", ["--threads", "1"], ["--threads", "2"],
             "--threads 1 on rank 0 but --threads 2 on rank 2", same),
            ("allreduce", [], ["--threads", "2"],
             "--threads not given (all cores) on rank 0 but --threads 2 on rank 2", same),
            ("ps", ["--log", "a.h5"], ["--log", "b.h5"],
             "--log a.h5 on rank 0 but --log b.h5 on rank 2",
             "rank 0 alone writes the metric log, with every rank's rows: give every rank "
             "the same --log"),
            ("allreduce", ["--log", "a.h5"], [],
             "--log a.h5 on rank 0 but --log not given on rank 2", "the same --log")]
        # Every job at once (each refused at start).
        result, *results = self.at_once(
            lambda: self.mpirun(["-n", "2", tool, *common, ":", "-n", "1", tool, *common,
                                 "--batch-size", "32"]),
            *[lambda comm=comm, ours=ours, theirs=theirs: self.mpirun(
                ["-n", "2", tool, *common, "--comm", comm, *ours, ":", "-n", "1", tool, *common,
                 "--comm", comm, *theirs]) for comm, ours, theirs, _, _ in cases])
        self.assertEqual(result.rc, 2, msg=repr(result))
        self.assertIn("batch_size=64 on rank 0 but batch_size=32 on rank 2", result.err)
        for (comm, _, theirs_extra, expected, advice), result in zip(cases, results):
            with self.subTest(comm=comm, theirs=theirs_extra):
                self.assertEqual(result.rc, 2, msg=repr(result))
                ours = [line for line in result.err.splitlines()
                        if line.startswith("mb-train-fmb")]
                self.assertEqual(len(ours), 1, msg=result.err)  # rank 0 speaks, the others not
                self.assertIn(expected, ours[0], msg=result.err)
                self.assertIn(advice, ours[0], msg=result.err)
        # Refused before anything is written.
        self.assertFalse(os.path.exists(self.path("a.h5")))
        self.assertFalse(os.path.exists(self.path("b.h5")))


if __name__ == "__main__":
    # Three tests at a time: most of a test here is mpirun's start-up and its jobs' ends,
    # waits that overlap (56/61/48 s one at a time against 40/36 s, load 5-15; none gained at
    # load 20). The failure scenarios, the longest, start first.
    mbtest.main(at_once=3, first=("test_failures_end_the_job_naming_the_rank",))
