"""The asynchronous server's straggler methods (libcore/src/train/async_rule.cpp):
--k-async K (an update per K gradients of K distinct workers, a worker's next gradient held for a
later update), --k-batch-async K (--async --async-min-grads K by name) and --staleness-bound s
(stale synchronous parallel: no worker's clock more than s rounds ahead of the slowest's).

- On the virtual clock the arrivals, the gradients each update uses, their staleness, the
  blocked workers' waits and the update times, computed by hand from a compute model, are what
  the log says.
- The degenerate cases give the existing mode's bits: --k-async 1 and a staleness bound no
  worker reaches are --async; --k-batch-async K is --async --async-min-grads K.
- On the wall clock K-async's updates use distinct workers and the bound holds in the order
  the master received the gradients; with --servers 2 each server follows the rule.
- A checkpoint resumes, as --async's does (the exchange may change on resume).
- Bad combinations are refused naming both flags.
"""

import concurrent.futures
import shutil

import h5py

import mbtest
from test_emulate import SameBits
from test_original_settings import continuous_arrivals

MPIRUN = shutil.which("mpirun")
MESSAGE = 0.5
# Workers of 1, 2.5 and 4 s per round, messages of 0.5 s: every time exact in binary.
COMPUTE = [1.0, 2.5, 4.0]
VIRTUAL = ["--clock", "virtual", "--comm-model", f"{MESSAGE},0", "--lr", "0.05", "--comm", "ps"]


def compute_models(workers, servers=1):
    return [arg for w in range(workers)
            for arg in ("--compute-model", f"{w + servers}=0,{COMPUTE[w]}")]


def parameters_at(published, start):
    """The step of the parameters a round starting at `start` holds: the newest published at
    least a message earlier."""
    return max(step for step, time in enumerate(published) if time + MESSAGE <= start)


def k_async(workers, k, steps):
    """K-async by hand: each update takes the held gradients first (oldest first, one per
    worker), then arrivals in order; a worker already in the update has its gradient held. The
    update is made at the last arrival it looked at (the update itself is free under a compute
    model). Workers never wait: round r of worker w starts when round r - 1 was ready. Returns
    per update [(worker, staleness)] and its time."""
    arrivals = continuous_arrivals(12, MESSAGE, MESSAGE, COMPUTE[:workers], lambda w, r: 0.0)
    now, held, published, out, i = 0.0, [], [0.0], [], 0
    for step in range(steps):
        used = []
        for gradient in list(held):
            if len(used) < k and gradient[1] not in [w for _, w in used]:
                used.append(gradient)
                held.remove(gradient)
        while len(used) < k:
            time, w = arrivals[i]
            i += 1
            now = max(now, time)
            (held if w in [v for _, v in used] else used).append((time, w))
        # The round that sent a gradient arriving at `time` started at time - message - compute.
        out.append(([(w, step - parameters_at(published, time - MESSAGE - COMPUTE[w]))
                     for time, w in used], now))
        published.append(now)
    return out


def stale_synchronous(workers, bound, steps):
    """Stale synchronous parallel by hand, one gradient per update: the earliest arrival of a
    worker not blocked is taken; its worker starts its next round when it was ready if its
    clock is at most `bound` ahead of the slowest's, else it waits for the update after which
    that holds, and starts a message after it from that update's parameters. Returns per
    update (worker, staleness, seconds its round waited to start) and its time."""
    clock, blocked, wait = [0] * workers, [False] * workers, [0.0] * workers
    start, ready = [MESSAGE] * workers, [0.0] * workers
    based_on = [0] * workers
    now, published, out = 0.0, [0.0], []
    for step in range(steps):
        arrival, w = min((start[v] + COMPUTE[v] + MESSAGE, v)
                         for v in range(workers) if not blocked[v])
        now = max(now, arrival)
        clock[w] += 1
        out.append(((w, step - based_on[w], wait[w]), now))
        ready[w], wait[w] = arrival - MESSAGE, 0.0
        if clock[w] - min(clock) <= bound:
            start[w] = ready[w]
            based_on[w] = parameters_at(published, start[w])
        else:
            blocked[w] = True
        published.append(now)
        for v in range(workers):
            if blocked[v] and clock[v] - min(clock) <= bound:
                blocked[v], start[v] = False, now + MESSAGE
                wait[v], based_on[v] = start[v] - ready[v], step + 1
    return out


def used_gradients(log):
    """Per update: [(worker, staleness, wait_time)] from the log's /workers, in its order."""
    steps = [[] for _ in log["steps/step"]]
    for step, rank, staleness, wait in zip(log["workers/step"], log["workers/rank"],
                                           log["workers/staleness"], log["workers/wait_time"]):
        steps[step - 1].append((int(rank) - 1, int(staleness), float(wait)))
    return steps


def update_times(log):
    return log["steps/step_time"][...].cumsum().tolist()


class AsyncMethods(SameBits, mbtest.ToolTestCase):
    def setUp(self):
        super().setUp()
        self.assertSucceeded(self.mb_dataset("synth", "toy", "--learnable", "--train", "256",
                                             "--test", "60", "--seed", "5", "-o",
                                             self.path("toy.h5")))

    def train(self, name, workers, *args, checkpoint=True, emulate=False):
        # emulate: the workers inside one process (--emulate, the bits of a process per worker
        # for what it emulates: tests/e2e/test_emulate.py), a few seconds cheaper than mpirun.
        command = [mbtest.tool("mb-train-fmb"), "--data", "toy.h5", "--model", "mlp", "--hidden",
                   "16", "--threads", "1", "--batch-size", "16", "-q", *args, "--log",
                   f"{name}-log.h5"]
        if emulate:
            command += ["--emulate", str(workers)]
        else:
            self.assertIsNotNone(MPIRUN, "mpirun (openmpi-bin) is required")
            command = [MPIRUN, "--oversubscribe", "-n", str(workers + 1), *command]
        if checkpoint:
            command += ["--checkpoint", f"{name}.h5"]
        return mbtest.run(command, cwd=self.dir, env=self.env)

    def log(self, name):
        return h5py.File(self.path(f"{name}-log.h5"), "r")

    def test_k_async_by_hand(self):
        # Three workers, K = 2. Worker 0's gradients arrive at 2, 3, 4, ... s, worker 1's at
        # 3.5, 6, 8.5, worker 2's at 5, 9, 13 s. Update 1: 2 (w0) and 3.5 (w1). Update 2: w0's
        # 3 s gradient, held, then w0's 4 and 5 s ones are held too (w0 is in) and w2's 5 s one
        # completes it (a tie goes to the lower worker). Update 3: w0's 4 s one and w1's at 6.
        args = [*VIRTUAL, *compute_models(3), "--steps", "8", "--k-async", "2"]
        self.assertSucceeded(self.train("k2", 3, *args))
        expected = k_async(3, 2, 8)
        self.assertEqual([t for _, t in expected][:3], [3.5, 5.0, 6.0])
        with self.log("k2") as log:
            self.assertEqual(log["collect/gradients"][...].tolist(), [2] * 8)
            self.assertEqual(update_times(log), [t for _, t in expected])
            found = used_gradients(log)
            self.assertEqual([sorted((w, s) for w, s, _ in f) for f in found],
                             [sorted(u) for u, _ in expected])
            for update in found:  # distinct workers
                self.assertEqual(len({w for w, _, _ in update}), len(update))

    def test_staleness_bound_by_hand(self):
        # Two workers (1 s and 2.5 s). s = 0: worker 0's first gradient (2 s) is a round ahead
        # of worker 1, which arrives at 3.5 s: worker 0 then starts at 4 s (having waited 2.5
        # s since it was ready at 1.5 s) from update 2's parameters, and arrives at 5.5 s.
        args = [*VIRTUAL, *compute_models(2), "--steps", "10"]
        for bound in (0, 1):
            with self.subTest(bound=bound):
                self.assertSucceeded(self.train(f"ssp{bound}", 2, *args, "--staleness-bound",
                                                str(bound)))
                expected = stale_synchronous(2, bound, 10)
                with self.log(f"ssp{bound}") as log:
                    self.assertEqual(update_times(log), [t for _, t in expected])
                    self.assertEqual(used_gradients(log), [[u] for u, _ in expected])
        self.assertEqual([t for _, t in stale_synchronous(2, 0, 4)], [2.0, 3.5, 5.5, 6.0])
        self.assertEqual(stale_synchronous(2, 0, 3)[2][0], (0, 0, 2.5))

    def test_degenerate_cases_give_the_existing_modes_bits(self):
        args = [*VIRTUAL, *compute_models(3), "--steps", "6", "--induce", "exp:0.5"]
        # Independent runs on the virtual clock (nothing timed between them): at once.
        runs = [(("async", 3, *args, "--async"), {}),
                (("k1", 3, *args, "--k-async", "1"), {}),
                (("unbounded", 3, *args, "--staleness-bound", "1000"), {}),
                (("min2", 3, *args, "--async", "--async-min-grads", "2"), {"emulate": True}),
                (("kbatch2", 3, *args, "--k-batch-async", "2"), {"emulate": True})]
        with concurrent.futures.ThreadPoolExecutor(len(runs)) as pool:
            results = list(pool.map(lambda run: self.train(*run[0], **run[1]), runs))
        for result in results:
            self.assertSucceeded(result)
        self.assert_same_bits("k1", "async")
        self.assert_same_bits("unbounded", "async")
        self.assert_same_bits("kbatch2", "min2")
        # The count rule's 2 takes worker 0's first two gradients for update 1; K-async would
        # not.
        with self.log("kbatch2") as log:
            self.assertEqual([w for w, _, _ in used_gradients(log)[0]], [0, 0])

    def test_wall_clock_and_servers(self):
        wall = ["--lr", "0.05", "--comm", "ps", "--steps", "12", "--slowdown", "1=3"]
        self.assertSucceeded(self.train("wall-k", 3, *wall, "--k-async", "2"))
        with self.log("wall-k") as log:
            for update in used_gradients(log):
                self.assertEqual(len(update), 2)
                self.assertEqual(len({w for w, _, _ in update}), 2)
        self.assertSucceeded(self.train("wall-ssp", 2, *wall, "--staleness-bound", "0"))
        with self.log("wall-ssp") as log:
            clock = [0, 0]
            # (A poll of the wall clock's count rule may take two gradients for an update.)
            for update in used_gradients(log):
                for worker, _, _ in update:
                    clock[worker] += 1
                    self.assertLessEqual(abs(clock[0] - clock[1]), 1)
            self.assertEqual(sum(clock), len(log["workers/step"]))
        # Two servers, each with the rule: on the virtual clock each update is the hand one.
        args = [*VIRTUAL, *compute_models(3, servers=2), "--steps", "6", "--servers", "2"]
        self.assertIsNotNone(MPIRUN)
        result = mbtest.run([MPIRUN, "--oversubscribe", "-n", "5", mbtest.tool("mb-train-fmb"),
                             "--data", "toy.h5", "--model", "mlp", "--hidden", "16", "--threads",
                             "1", "--batch-size", "16", "-q", *args, "--k-async", "2", "--log",
                             "servers-log.h5"], cwd=self.dir, env=self.env)
        self.assertSucceeded(result)
        with self.log("servers") as log:
            self.assertEqual(update_times(log), [t for _, t in k_async(3, 2, 6)])

    def test_resume(self):
        # An asynchronous checkpoint resumes (model, optimizer state and step; the workers'
        # straggler draws start again), and the exchange may change on resume, as --async's
        # --async-min-grads may.
        args = [*VIRTUAL, *compute_models(2)]
        for name, method in (("k", ["--k-async", "2"]), ("ssp", ["--staleness-bound", "0"])):
            with self.subTest(method=name):
                self.assertSucceeded(self.train(name, 2, *args, "--steps", "4", *method))
                self.assertSucceeded(self.train(name, 2, *args, "--steps", "7", *method,
                                                "--resume", f"{name}.h5"))
                with self.log(name) as log:
                    self.assertEqual(log["steps/step"][...].tolist()[-3:], [5, 6, 7])
        self.assertSucceeded(self.train("changed", 2, *args, "--steps", "9", "--async",
                                        "--resume", "k.h5", checkpoint=False))
        with self.log("changed") as log:
            self.assertEqual(log["steps/step"][...].tolist(), [8, 9])

    def test_bad_combinations_name_both_flags(self):
        cases = [
            (["--k-async", "2", "--k-batch-async", "2"], "--k-batch-async 2"),
            (["--k-async", "2", "--async-min-grads", "2"], "--async-min-grads 2"),
            (["--k-batch-async", "2", "--async-min-grads", "2"], "--async-min-grads 2"),
            (["--k-async", "2", "--async-master-time-limit", "1"], "--async-master-time-limit"),
            (["--staleness-bound", "1", "--async-master-time-limit", "1"],
             "--async-master-time-limit"),
            (["--staleness-bound", "1", "--k-async", "2"], "--k-async 2"),
            (["--staleness-bound", "1", "--async-min-grads", "2"], "--async-min-grads 2"),
            (["--k-async", "2", "--comm", "allreduce"], "--comm allreduce"),
            (["--staleness-bound", "1", "--compress", "fp16"], "--compress fp16"),
            (["--k-async", "0"], "at least 1"),
            (["--k-batch-async", "0"], "at least 1"),
        ]
        # Each refused before training: run at once, checked in order.
        with concurrent.futures.ThreadPoolExecutor(len(cases)) as pool:
            results = list(pool.map(
                lambda case: mbtest.run([mbtest.tool("mb-train-fmb"), "--data", "toy.h5",
                                         "--model", "mlp", "--steps", "1", "-q", *case[0]],
                                        cwd=self.dir, env=self.env), cases))
        for (extra, named), result in zip(cases, results):
            with self.subTest(extra=extra):
                self.assertFailsWith(result, 2, extra[0])
                self.assertIn(named, result.err)
        result = mbtest.run([mbtest.tool("mb-train-amb"), "--data", "toy.h5", "--model", "mlp",
                             "--time-limit", "0.05", "--partitions", "2", "--steps", "1", "--staleness-bound",
                             "0", "-q"],
                            cwd=self.dir, env=self.env)
        self.assertFailsWith(result, 2, "--staleness-bound 0 and mb-train-amb")
        result = self.train("four", 3, "--steps", "1", "--k-async", "4", checkpoint=False)
        self.assertUsageError(result, "--k-async 4 is more than the 3 workers")


if __name__ == "__main__":
    # The tests at once, three at a time: most of each is the tools' start-up and end, waits
    # that overlap.
    mbtest.main(at_once=3)
