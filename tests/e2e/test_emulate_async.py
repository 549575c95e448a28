"""--emulate N --async: the asynchronous master (one server or two) inside one process gives the
bits of the same run with a process per worker, mpirun -n N+1 (or N+2 with --servers 2), on the
virtual clock with a compute model and a message model: the count and time rules, AMB's rounds,
K-async and stale synchronous parallel, FMB and AMB at 3 and 8 workers, and a resumed emulated
run against a resumed run with a process per worker. The comparison (every dataset of the
checkpoint and every column of the metric log but the wall-clock ones) and the synchronous modes
are test_emulate.py's; this file is its asynchronous half, a CTest entry of its own so that
ctest -j runs the two halves side by side.
"""

import shutil

import h5py

import mbtest
from test_emulate import AMB, COMMON, EmulatedRuns

MPIRUN = shutil.which("mpirun")


class EmulateAsync(EmulatedRuns, mbtest.ToolTestCase):
    def test_the_asynchronous_master_has_the_bits_of_a_process_per_worker(self):
        # ps --async on the virtual clock: the count rule (1 and 2 gradients an update), the
        # AMB original's time rule with its message delays, and AMB's rounds; then a resumed
        # run against a resumed run with a process per worker (both draw the workers' delays
        # from the start again, as an asynchronous resume does). Every run at once.
        if MPIRUN is None:
            self.skipTest("mpirun is not installed")
        cases = [
            ("count1", "mb-train-fmb", 3, []),
            ("count2", "mb-train-fmb", 8, ["--async-min-grads", "2"]),
            ("time", "mb-train-fmb", 3, ["--async-master-time-limit", "0.01",
                                         "--async-delay-std", "0.01"]),
            ("amb", "mb-train-amb", 3, AMB),
        ]
        args = ["--comm", "ps", "--async"]
        calls = []
        for name, tool, workers, extra in cases:
            calls += self.pair(f"async-{name}", tool, [*extra, *args], workers, workers + 1)
        calls += [lambda: self.stopped_and_resumed("async-resumed-emulated", "mb-train-fmb",
                                                   [*args, "--emulate", "3"]),
                  lambda: self.stopped_and_resumed("async-resumed-ranks", "mb-train-fmb", args,
                                                   4)]
        self.together(*calls)
        for name, _, _, _ in cases:
            with self.subTest(case=name):
                self.assert_same_bits(f"async-{name}-emulated", f"async-{name}-ranks")
        with h5py.File(self.path("async-count2-emulated-log.h5"), "r") as log:
            self.assertEqual(len(log["workers/rank"]), 2 * 12)
            self.assertGreater(log["workers/staleness"][...].max(), 0)
        self.assert_same_bits("async-resumed-emulated", "async-resumed-ranks")

    def test_several_asynchronous_servers_have_the_bits_of_a_process_per_worker(self):
        # --servers 2 --async: each server takes its shard's gradients on its own virtual clock
        # and a worker's round starts from both servers' shards (this process plays both, each
        # loop on its own thread), as under mpirun -n N+2. FMB and AMB at 3 and 8 workers, the
        # count rule, K-async, the staleness bound and the time rule with message delays (odd
        # shards whose messages cost apart); the /servers table has the same rows; then a
        # resumed run against a resumed run with a process per worker. Several asynchronous
        # servers evaluate only at the end (--eval-every is refused with them). Every run at
        # once.
        if MPIRUN is None:
            self.skipTest("mpirun is not installed")
        common = [a for a in COMMON if a not in ("--eval-every", "6")]
        servers = ["--comm", "ps", "--async", "--servers", "2"]
        cases = [
            ("fmb3", "mb-train-fmb", 3, ["--staleness-bound", "1"]),
            ("fmb8", "mb-train-fmb", 8, ["--k-async", "3"]),
            ("amb3", "mb-train-amb", 3, AMB),
            ("amb8", "mb-train-amb", 8, [*AMB, "--async-min-grads", "2"]),
            ("time3", "mb-train-fmb", 3, ["--hidden", "17", "--comm-model", "25e-6,1e-6",
                                          "--async-master-time-limit", "0.01",
                                          "--async-delay-std", "0.01"]),
        ]
        calls = []
        for name, tool, workers, extra in cases:
            calls += self.pair(f"aservers-{name}", tool, [*extra, *servers], workers,
                               workers + 2, common=common)
        resumed = [*AMB, *servers, "--optimizer", "adam"]
        calls += [lambda: self.stopped_and_resumed("aservers-resumed-emulated", "mb-train-amb",
                                                   [*resumed, "--emulate", "3"], common=common),
                  lambda: self.stopped_and_resumed("aservers-resumed-ranks", "mb-train-amb",
                                                   resumed, 5, common=common)]
        self.together(*calls)
        for name, _, workers, _ in cases:
            with self.subTest(case=name):
                self.assert_same_bits(f"aservers-{name}-emulated", f"aservers-{name}-ranks")
                rows = {}
                for run in ("emulated", "ranks"):
                    with h5py.File(self.path(f"aservers-{name}-{run}-log.h5"), "r") as log:
                        rows[run] = {column: log["servers"][column][...].tolist()
                                     for column in ("step", "rank", "floats",
                                                    "bytes_received")}
                        # The workers are ranks 2 and up (a slowed one may not be taken).
                        self.assertLessEqual(set(log["workers/rank"][...].tolist()),
                                             set(range(2, 2 + workers)))
                        self.assertEqual(len(log["eval/step"]), 1)
                self.assertEqual(rows["emulated"], rows["ranks"])
                self.assertEqual(rows["emulated"]["rank"], [0, 1] * 12)
        with h5py.File(self.path("aservers-fmb8-emulated-log.h5"), "r") as log:
            self.assertGreater(log["workers/staleness"][...].max(), 0)
        with h5py.File(self.path("aservers-fmb3-emulated-log.h5"), "r") as log:
            self.assertGreater(log["workers/wait_time"][...].max(), 0)  # SSP's blocked rounds
        self.assert_same_bits("aservers-resumed-emulated", "aservers-resumed-ranks")
        with h5py.File(self.path("aservers-resumed-emulated.h5"), "r") as checkpoint:
            self.assertTrue(any(name.startswith("optimizer") for name in checkpoint))
        with h5py.File(self.path("aservers-resumed-emulated-log.h5"), "r") as log:
            self.assertEqual(log["steps/step"][...].tolist(), list(range(1, 13)))

    def test_k_async_and_ssp_have_the_bits_of_a_process_per_worker(self):
        # The asynchronous server's methods on the emulated master (async_rule.hpp): K-async's
        # held gradients and the staleness bound's blocked workers, 3 and 8 workers (K-async at
        # 3: the resumed pair's first 6 steps, compared at the stop); then a resumed run of each
        # against a resumed run with a process per worker. Every run at once.
        if MPIRUN is None:
            self.skipTest("mpirun is not installed")
        cases = [
            ("kasync8", 8, ["--k-async", "3"]),
            ("ssp3", 3, ["--staleness-bound", "1"]),
            ("ssp8", 8, ["--staleness-bound", "0"]),
        ]
        resumed = [("kasync", ["--k-async", "2"]), ("ssp", ["--staleness-bound", "1"])]
        calls = []
        for name, workers, extra in cases:
            calls += self.pair(name, "mb-train-fmb", [*extra, "--comm", "ps", "--async"],
                               workers, workers + 1)
        for name, extra in resumed:
            args = [*extra, "--comm", "ps", "--async"]
            calls += [lambda name=name, args=args: self.stopped_and_resumed(
                          f"{name}-resumed-emulated", "mb-train-fmb", [*args, "--emulate", "3"],
                          keep_stopped=True),
                      lambda name=name, args=args: self.stopped_and_resumed(
                          f"{name}-resumed-ranks", "mb-train-fmb", args, 4, keep_stopped=True)]
        self.together(*calls)
        for name, _, _ in cases:
            with self.subTest(case=name):
                self.assert_same_bits(f"{name}-emulated", f"{name}-ranks")
        # The runs held gradients and blocked workers: K distinct workers an update, one of
        # them a gradient computed before an earlier update (held); waits before SSP's rounds.
        with h5py.File(self.path("kasync8-emulated-log.h5"), "r") as log:
            ranks, staleness = log["workers/rank"][...], log["workers/staleness"][...]
            self.assertEqual(len(ranks), 3 * 12)
            for step in range(12):
                self.assertEqual(len(set(ranks[3 * step:3 * step + 3].tolist())), 3)
            self.assertGreater(staleness.max(), 0)
        for name in ("ssp3-emulated", "ssp8-emulated"):
            with h5py.File(self.path(f"{name}-log.h5"), "r") as log:
                self.assertGreater(log["workers/wait_time"][...].max(), 0, msg=name)
        with h5py.File(self.path("kasync-resumed-emulated-stopped-log.h5"), "r") as log:
            self.assertGreater(log["workers/staleness"][...].max(), 0)
        for name, _ in resumed:
            with self.subTest(resumed=name):
                self.assert_same_bits(f"{name}-resumed-emulated-stopped",
                                      f"{name}-resumed-ranks-stopped")
                self.assert_same_bits(f"{name}-resumed-emulated", f"{name}-resumed-ranks")


if __name__ == "__main__":
    mbtest.main()
