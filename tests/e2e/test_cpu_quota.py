"""--cpu-quota RANK=QUOTA/PERIOD on the virtual clock: a worker under a CFS quota has a budget of
QUOTA seconds of CPU in each PERIOD of the run's timeline, spent by its compute and by its waits
while they are on the CPU (the first 3 ms of each under --comm-wait yield; all of it under spin:
then it is runnable only in the first QUOTA seconds of each period), carried from step to step, so its steps equal hand-computed budget arithmetic, not a
uniformly slower CPU; for FMB, AMB and the asynchronous master alike. A resumed run restores the
budget from its checkpoint and has the straight run's bits, in one process and in shares under
mpirun. The wall clock refuses the flag (a real cgroup does it there), and so does a worker rank
of its own under mpirun, which does not keep the emulated clock. The compute model's L, the
loader thread's CPU beside the compute, spends the budget and takes no time without one."""

import json
import shutil

import h5py
import numpy as np

import mbtest

MPIRUN = shutil.which("mpirun")

# Workers cost 100 us per sample + 2 ms per micro-batch: 5.2 ms for a batch of 32. Messages
# cost 1 ms; the update nothing (a compute model is given).
MODELS = ["--clock", "virtual", "--compute-model", "1e-4,2e-3", "--comm-model", "1e-3,0"]
# Rank 2 gets 2 ms of a core in each period of 10 ms. Spinning in its waits, it is runnable in
# [0, 2), [10, 12), ... ms.
QUOTA = ["--cpu-quota", "2=0.002/0.01"]
SPIN = ["--comm-wait", "spin"]


def read_log(path):
    with h5py.File(path, "r", swmr=True) as log:
        tables = {group: {name: log[group][name][...] for name in log[group]}
                  for group in ("steps", "workers")}
        tables["config"] = json.loads(mbtest.text_attrs(log)["config"])
    return tables


class CpuQuota(mbtest.ToolTestCase):
    def setUp(self):
        super().setUp()
        self.assertSucceeded(self.mb_dataset("synth", "toy", "--learnable", "--train", "600",
                                             "--test", "60", "-o", self.path("toy.h5")))

    def train(self, *args, tool="mb-train-fmb", ranks=0):
        command = [mbtest.tool(tool), "--data", self.path("toy.h5"), "--model", "mlp",
                   "--hidden", "16", "--lr", "0.05", "--threads", "1", "-q", *args]
        if ranks > 0:
            command = [MPIRUN, "--oversubscribe", "-n", str(ranks), *command]
        return mbtest.run(command, cwd=self.dir, env=self.env)

    def test_fmb_steps_of_a_spinning_worker_follow_the_quota_s_windows(self):
        # ps, two emulated workers (ranks 1 and 2) of batch 32. Worker 1 is ready 5.2 ms after
        # each step's start; worker 2 computes 2 ms per window:
        #   step 1 from 0:     [0, 2) [10, 12) [20, 21.2): ready 21.2, end 21.2 + 2 x 1 = 23.2
        #   step 2 from 23.2:  stopped until 30; [30, 32) [40, 42) [50, 51.2): end 53.2 (30.0)
        #   step 3 from 53.2:  the same from 60: end 83.2 (30.0), and so on.
        # (--slowdown 2=5, the same half-share as a uniformly slower CPU, gives 28.0 every step.)
        self.assertSucceeded(self.train("--comm", "ps", "--emulate", "2", "--batch-size", "32",
                                        "--steps", "5", "--drop-last", *MODELS, *QUOTA,
                                        *SPIN, "--log", "fmb.h5"))
        log = read_log(self.path("fmb.h5"))
        self.assertEqual(log["config"]["cpu_quota"], "2=0.002/0.01")
        np.testing.assert_allclose(log["steps"]["step_time"],
                                   np.array([23.2, 30.0, 30.0, 30.0, 30.0]) / 1e3, rtol=1e-6)
        np.testing.assert_allclose(log["steps"]["time"],
                                   np.array([23.2, 53.2, 83.2, 113.2, 143.2]) / 1e3, rtol=1e-6)
        workers = log["workers"]
        ranks = workers["rank"]
        np.testing.assert_allclose(workers["compute_time"], 5.2e-3, rtol=1e-6)
        # The time rank 2 was stopped is its delay: 21.2 - 5.2, then 28.0 - 5.2 every step.
        np.testing.assert_allclose(workers["sleep_time"][ranks == 2],
                                   np.array([16.0, 22.8, 22.8, 22.8, 22.8]) / 1e3, rtol=1e-6)
        np.testing.assert_allclose(workers["sleep_time"][ranks == 1], 0)

    def with_and_without_the_quota(self, compute_model, spec, quota_times, free_times,
                                   compute_times):
        """Three steps of the spinning worker above under `compute_model`, with the quota and
        without: the step times (ms) of each, the workers' compute (ms) in both."""
        for name, quota, times in (("quota", [*QUOTA, *SPIN], quota_times),
                                   ("free", [], free_times)):
            with self.subTest(name=name):
                self.assertSucceeded(self.train("--comm", "ps", "--emulate", "2", "--batch-size",
                                                "32", "--steps", "3", "--drop-last", *MODELS,
                                                "--compute-model", compute_model, *quota, "--log",
                                                f"{name}.h5"))
                log = read_log(self.path(f"{name}.h5"))
                self.assertEqual(log["config"]["compute_model"], spec)
                np.testing.assert_allclose(log["steps"]["step_time"], np.array(times) / 1e3,
                                           rtol=1e-6)
                np.testing.assert_allclose(log["workers"]["compute_time"],
                                           np.array(compute_times) / 1e3, rtol=1e-6)

    def test_the_first_step_s_warm_up_is_compute_that_the_quota_throttles(self):
        # As above with --compute-model A,B,W of W = 4 ms: each worker's first round computes
        # 9.2 ms. Worker 2 spinning: [0, 2) [10, 12) [20, 22) [30, 32) [40, 41.2): ready 41.2,
        # end 43.2; then the steps above, 30.0 each. Without the quota: 9.2 + 2 x 1, then 7.2.
        self.with_and_without_the_quota("1e-4,2e-3,0.004", "0.0001,0.002,0.0040000000000000001",
                                        [43.2, 30.0, 30.0], [11.2, 7.2, 7.2],
                                        [9.2, 9.2, 5.2, 5.2, 5.2, 5.2])

    def test_the_loader_s_cpu_beside_the_compute_spends_the_quota_but_no_time_without_one(self):
        # As the first test with --compute-model A,B,W,L of L = 31.25 us a sample: the loader's
        # thread spends 1 ms of worker 2's budget as each round takes its batch of 32, beside
        # the compute. Step 1 from 0: 1 ms beside, then [0, 1) [10, 12) [20, 22) [30, 30.2):
        # ready 30.2, end 32.2. Its wait spins the period's rest away by 32: the next round from
        # 40, 1 ms beside, [40, 41) ... [70, 70.2): end 72.2 (40.0), and so on. Without the
        # quota the loader takes nothing from the step: 7.2 ms, as without L.
        self.with_and_without_the_quota("1e-4,2e-3,0,3.125e-5",
                                        "0.0001,0.002,0,3.1250000000000001e-05",
                                        [32.2, 40.0, 40.0], [7.2, 7.2, 7.2], [5.2] * 6)

    def test_the_run_s_last_lines_give_the_budget_s_totals(self):
        # The spinning worker above, 5 steps. Each round computes 5.2 ms (charged) in three
        # windows, stopped twice for 8 ms; each round after the first starts with the wait for
        # the last step's parameters, 2 ms from 1.2 ms into a window: 0.8 ms charged to the
        # window's end, then stopped 6.8 ms to the next period. So 5 x 5.2 + 4 x 0.8 = 29.2 ms
        # charged, 5 x 16 + 4 x 6.8 = 107.2 ms stopped in 5 x 2 + 4 = 14 stops.
        command = [mbtest.tool("mb-train-fmb"), "--data", self.path("toy.h5"), "--model", "mlp",
                   "--hidden", "16", "--lr", "0.05", "--threads", "1", "--comm", "ps",
                   "--emulate", "2", "--batch-size", "32", "--steps", "5", "--drop-last",
                   *MODELS, *QUOTA, *SPIN]
        result = mbtest.run(command, cwd=self.dir, env=self.env)
        self.assertSucceeded(result)
        self.assertIn("cpu quota since the start: rank 2: 0.029 s of CPU charged, stopped "
                      "0.107 s (14 times)", result.err)
        # Not with -q.
        quiet = self.train("--comm", "ps", "--emulate", "2", "--batch-size", "32", "--steps",
                           "5", "--drop-last", *MODELS, *QUOTA, *SPIN)
        self.assertSucceeded(quiet)
        self.assertNotIn("cpu quota since", quiet.err)

    def test_fmb_steps_of_a_yielding_worker_spend_its_budget_computing_and_3_ms_of_each_wait(self):
        # --comm-wait yield (the default): a wait stays on the CPU for its first 3 ms (spinning,
        # then sched_yield), spending budget, and sleeps after. Batch 8 (2.8 ms), messages of
        # 2 ms (a worker waits 4 ms from its gradient to the next parameters), 8 ms of a core
        # in each 10 ms. Worker 2:
        #   step 1 from 0:     [0, 2.8): ready 2.8, end 2.8 + 2 x 2 = 6.8; the wait spends
        #                      [2.8, 5.8) and sleeps [5.8, 6.8): 5.8 spent
        #   step 2 from 6.8:   [6.8, 9.0) spends the rest, stopped to 10, [10, 10.6): ready
        #                      10.6, end 14.6 (7.8); the wait spends [10.6, 13.6): 3.6 spent
        #   step 3 from 14.6:  [14.6, 17.4): 6.4 spent, end 21.4 (6.8); the wait spends
        #                      [17.4, 19.0), is stopped to 20 and spends [20, 20.4)
        #   step 4 from 21.4:  0.4 spent: [21.4, 24.2), end 28.2 (6.8).
        # A worker whose waits spent nothing would take 6.8 every step; a spinning one spends
        # its waits whole (step 2 from 6.8 has 1.2 left: 8.8).
        self.assertSucceeded(self.train("--comm", "ps", "--emulate", "2", "--batch-size", "8",
                                        "--steps", "4", "--drop-last", "--clock", "virtual",
                                        "--compute-model", "1e-4,2e-3", "--comm-model", "2e-3,0",
                                        "--cpu-quota", "2=0.008/0.01", "--log", "fmb.h5"))
        log = read_log(self.path("fmb.h5"))
        np.testing.assert_allclose(log["steps"]["step_time"],
                                   np.array([6.8, 7.8, 6.8, 6.8]) / 1e3, rtol=1e-6)
        np.testing.assert_allclose(log["steps"]["time"],
                                   np.array([6.8, 14.6, 21.4, 28.2]) / 1e3, rtol=1e-6)
        workers = log["workers"]
        # Stopped 1 ms in step 2 (10 - 9.0): its delay.
        np.testing.assert_allclose(workers["sleep_time"][workers["rank"] == 2],
                                   np.array([0.0, 1.0, 0.0, 0.0]) / 1e3, atol=1e-9)

    def test_with_the_kernel_s_tick_a_compute_overruns_to_the_tick_and_repays_it_later(self):
        # --cpu-quota-tick 0.004: the kernel's checks. Batch 8 (2.8 ms), messages of 2 ms,
        # 1 ms of a core in each 2 ms; ticks at (k + 0.618) x 4 ms: 2.472, 6.472, 10.472, ...
        # Worker 2 (its pool starts full, its CPU's local budget empty):
        #   step 1 from 0:       computes unchecked to the tick of 2.472 (the refill of 2 finds
        #                        the pool full: lost), takes the pool's 1 ms there: owes 1.472,
        #                        repaid by the refills of 4 and 6; runs on from 6 with 0.528 in
        #                        the pool: ready 6.328, end 10.328
        #   step 2 from 10.328:  its wait took the pool at 6.328 (0.2 left locally), yielded
        #                        through 8 and 10 stopped in between; runs from 10.328 to the
        #                        tick of 10.472, takes the pool there and runs on: ready 13.128
        #                        (no stop), end 17.128 (6.8)
        #   step 3 from 17.128:  likewise (its wait owed 0.8 at 13.128, repaid at 14): 6.8
        #   step 4 from 23.928:  unchecked to the tick of 26.472 again, owing 1.472: the refills
        #                        of 28 and 30; ready 30.256, end 34.256 (10.328)
        # The continuously checked model stops it as each 1 ms is spent (step 1 ready at 4.8).
        args = ["--comm", "ps", "--emulate", "2", "--batch-size", "8", "--steps", "4",
                "--drop-last", "--clock", "virtual", "--compute-model", "1e-4,2e-3",
                "--comm-model", "2e-3,0", "--cpu-quota", "2=0.001/0.002"]
        self.assertSucceeded(self.train(*args, "--cpu-quota-tick", "0.004", "--log", "tick.h5"))
        log = read_log(self.path("tick.h5"))
        tick = 2.4721359549995796
        step_1 = 6 + (2.8 - tick) + 4
        np.testing.assert_allclose(log["steps"]["step_time"],
                                   np.array([step_1, 6.8, 6.8, step_1]) / 1e3, rtol=1e-6)
        np.testing.assert_allclose(log["steps"]["time"],
                                   np.array([step_1, step_1 + 6.8, step_1 + 13.6,
                                             2 * step_1 + 13.6]) / 1e3, rtol=1e-6)
        workers = log["workers"]
        np.testing.assert_allclose(workers["sleep_time"][workers["rank"] == 2],
                                   np.array([step_1 - 6.8, 0, 0, step_1 - 6.8]) / 1e3, atol=1e-9)
        self.assertEqual(log["config"]["cpu_quota_tick"], 0.004)
        self.assertSucceeded(self.train(*args, "--log", "window.h5"))
        self.assertAlmostEqual(read_log(self.path("window.h5"))["steps"]["step_time"][0], 8.8e-3)

    def test_amb_counts_only_runnable_time_as_progress(self):
        # AMB, batch 32 in 4 micro-batches of 8 (2.8 ms each), --time-limit 4 ms. Worker 1 does
        # 2 micro-batches (2.8, 5.6 >= 4). Worker 2 from 0: [0, 2) + [10, 10.8) ends the first
        # at 10.8 >= 4: one micro-batch of 8 samples, ready at 10.8; end 12.8. Spinning, step 2
        # from 12.8: stopped until 20, [20, 22) + [30, 30.8): ready 30.8, end 32.8 (20.0 ms).
        # Yielding, its waits of 2 ms are shorter than the 3 ms a yielding wait stays on the CPU:
        # they spend as spinning, and the steps are the same. (A worker whose waits spent
        # nothing would have 1.2 left at 12.8: [12.8, 14) + [20, 21.6), 10.8.)
        for wait, times in (("spin", [12.8, 20.0, 20.0]), ("yield", [12.8, 20.0, 20.0])):
            with self.subTest(wait=wait):
                self.assertSucceeded(self.train(
                    "--comm", "ps", "--emulate", "2", "--batch-size", "32", "--partitions", "4",
                    "--time-limit", "0.004", "--steps", "3", "--drop-last", *MODELS, *QUOTA,
                    "--comm-wait", wait, "--log", f"amb-{wait}.h5", tool="mb-train-amb"))
                log = read_log(self.path(f"amb-{wait}.h5"))
                np.testing.assert_allclose(log["steps"]["step_time"], np.array(times) / 1e3,
                                           rtol=1e-6)
                workers = log["workers"]
                ranks = workers["rank"]
                np.testing.assert_array_equal(workers["samples"][ranks == 2], [8, 8, 8])
                np.testing.assert_array_equal(workers["samples"][ranks == 1], [16, 16, 16])

    def test_the_asynchronous_master_sees_the_quota(self):
        # Async, messages 1 ms. Worker 1 is ready every 5.2 ms: 7.2, 12.4, ... arriving 1 ms
        # later each, from 6.2 + 1 = 7.2. Worker 2's first round from 1 ms (the parameters'
        # message): it spent [0, 1) of its budget waiting, spinning or yielding (a yielding wait
        # is on the CPU for its first 3 ms): [1, 2) + [10, 12) + [20, 22) + [30, 30.2): ready
        # at 30.2, arrives 31.2. (Had the wait spent nothing: ready at 21.2.)
        for wait, ranks, times in (
                ("spin", [1, 1, 1, 1, 1, 2], [7.2, 12.4, 17.6, 22.8, 28.0, 31.2]),
                ("yield", [1, 1, 1, 1, 1, 2], [7.2, 12.4, 17.6, 22.8, 28.0, 31.2])):
            with self.subTest(wait=wait):
                self.assertSucceeded(self.train(
                    "--comm", "ps", "--async", "--emulate", "2", "--batch-size", "32",
                    "--steps", "6", "--drop-last", *MODELS, *QUOTA, "--comm-wait", wait,
                    "--log", f"async-{wait}.h5"))
                log = read_log(self.path(f"async-{wait}.h5"))
                self.assertEqual(list(log["workers"]["rank"]), ranks)
                np.testing.assert_allclose(log["steps"]["time"], np.array(times) / 1e3,
                                           rtol=1e-6)

    def test_a_resumed_run_keeps_the_budget_and_the_straight_run_s_bits(self):
        # AMB, whose micro-batch counts (so its parameters) follow the budget; 12 steps
        # straight, and 4 then resumed to 12. Step 4 ends with worker 2's period part spent,
        # so a resumed run that started it unspent would compute step 5 sooner (with the
        # restore left out, both variants below fail on steps/time). In one process, and in
        # two shares under mpirun.
        args = ["--comm", "ps", "--batch-size", "32", "--partitions", "4", "--time-limit",
                "0.004", "--steps", "12", "--drop-last", *MODELS, *QUOTA, "--seed", "3"]
        # With a first step's warm-up too: the resumed run does not add it again.
        variants = [("one", ["--emulate", "2"], 0),
                    ("one-warm-up", ["--emulate", "2", "--compute-model", "1e-4,2e-3,0.003"], 0),
                    ("one-tick", ["--emulate", "2", "--cpu-quota-tick", "0.003"], 0)]
        if MPIRUN is not None:
            variants.append(("shares", ["--emulate", "2"], 2))
        for name, extra, ranks in variants:
            with self.subTest(name=name):
                straight, resumed = f"{name}-straight", f"{name}-resumed"
                self.assertSucceeded(self.train(
                    *args, *extra, "--checkpoint", self.path(f"{straight}.h5"), "--log",
                    self.path(f"{straight}-log.h5"), tool="mb-train-amb", ranks=ranks))
                for steps in ("4", "12"):
                    self.assertSucceeded(self.train(
                        *args, *extra, "--steps", steps, "--checkpoint",
                        self.path(f"{resumed}.h5"), "--resume", "auto", "--log",
                        self.path(f"{resumed}-log.h5"), tool="mb-train-amb", ranks=ranks))
                with h5py.File(self.path(f"{resumed}.h5"), "r") as checkpoint:
                    budgets = checkpoint.attrs["cpu_quota_budgets"]
                    # Its rank and 3 values (time, period, spent); 5 under a tick.
                    size = int(checkpoint.attrs.get("cpu_quota_state_size", 3))
                    self.assertEqual(size, 5 if name == "one-tick" else 3)
                    self.assertEqual(list(budgets[0::size + 1]), [2.0])  # rank 2's alone
                for what in ("steps/time", "steps/step_time", "workers/samples",
                             "workers/sleep_time"):
                    with h5py.File(self.path(f"{straight}-log.h5"), "r") as a, \
                            h5py.File(self.path(f"{resumed}-log.h5"), "r") as b:
                        self.assertEqual(a[what][...].tobytes(), b[what][...].tobytes(),
                                         msg=f"{name}: {what}")
                with h5py.File(self.path(f"{straight}.h5"), "r") as a, \
                        h5py.File(self.path(f"{resumed}.h5"), "r") as b:
                    for param in a["params"]:
                        self.assertEqual(a["params"][param][...].tobytes(),
                                         b["params"][param][...].tobytes(), msg=f"{name}: {param}")

    def test_the_wall_clock_and_worker_ranks_refuse_it(self):
        self.assertFailsWith(self.train("--steps", "1", "--cpu-quota", "0=0.05/0.1"), 2,
                             "--cpu-quota needs --clock virtual")
        self.assertFailsWith(self.train("--steps", "1", *MODELS, "--cpu-quota", "0=0.2/0.1"), 2,
                             "--cpu-quota: '0=0.2/0.1' is not RANK=QUOTA/PERIOD")
        self.assertFailsWith(self.train("--steps", "1", *MODELS, "--cpu-quota-tick", "0.004"), 2,
                             "--cpu-quota-tick needs --cpu-quota")
        self.assertFailsWith(self.train("--steps", "1", *MODELS, *QUOTA, "--cpu-quota-tick",
                                        "-1"), 2, "--cpu-quota-tick: -1 is not a tick in seconds")
        # A checkpoint of the window model does not resume under a tick.
        self.assertSucceeded(self.train("--steps", "2", "--emulate", "2", *MODELS, *QUOTA,
                                        "--checkpoint", self.path("window.h5")))
        self.assertFailsWith(self.train("--steps", "3", "--emulate", "2", *MODELS, *QUOTA,
                                        "--cpu-quota-tick", "0.004", "--checkpoint",
                                        self.path("window.h5"), "--resume", "auto"), 3,
                             "the checkpoint's budget of rank 2: a CPU quota's state is 5 values "
                             "under --cpu-quota-tick (time, period, pool, local, unaccounted), "
                             "not 3")
        if MPIRUN is None:
            self.skipTest("mpirun is not installed")
        self.assertUsageError(self.train("--steps", "1", *MODELS, *QUOTA, ranks=3),
                              "--cpu-quota under mpirun -n 3")


if __name__ == "__main__":
    mbtest.main()
