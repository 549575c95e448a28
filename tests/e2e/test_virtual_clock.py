"""--clock virtual under mpirun: with fixed compute and communication models the step times,
event order and staleness equal hand-computed values, runs repeat exactly, induced delays are
counted without being slept (an 11-rank niagara cluster on this machine), and bad values of
--clock, --comm-model and --compute-model are refused."""

import concurrent.futures
import json
import os
import shutil

import h5py
import numpy as np

import mbtest

MPIRUN = shutil.which("mpirun")

# Messages of 1 ms + 1 ns per byte; workers cost 100 us per sample + 2 ms per micro-batch.
ALPHA, BETA = 1e-3, 1e-9
PER_SAMPLE, PER_BATCH = 1e-4, 2e-3


def read_log(path):
    with h5py.File(path, "r", swmr=True) as log:
        tables = {group: {name: log[group][name][...] for name in log[group]}
                  for group in ("steps", "eval", "workers", "collect")}
        tables["attrs"] = mbtest.text_attrs(log)
        tables["config"] = json.loads(mbtest.text_attrs(log)["config"])
    return tables


class VirtualClock(mbtest.ToolTestCase):
    def setUp(self):
        super().setUp()
        self.assertIsNotNone(MPIRUN, "mpirun (openmpi-bin) is required")
        result = self.mb_dataset("synth", "toy", "--learnable", "--train", "600", "--test", "60",
                                 "-o", self.path("toy.h5"))
        self.assertSucceeded(result)

    def train(self, ranks, *args, timeout=300):
        command = [mbtest.tool("mb-train-fmb"), "--data", self.path("toy.h5"), "--model", "mlp",
                   "--hidden", "16", "--lr", "0.05", "-q", *args]
        if ranks > 0:
            command = [MPIRUN, "--oversubscribe", "-n", str(ranks), *command]
        return mbtest.run(command, cwd=self.dir, env=self.env, timeout=timeout)

    def models(self):
        return ["--clock", "virtual", "--comm-model", f"{ALPHA},{BETA}",
                "--compute-model", f"{PER_SAMPLE},{PER_BATCH}"]

    def message(self, log):
        return ALPHA + BETA * 4 * log["config"]["parameters"]

    def test_sync_ps_steps_take_the_slowest_worker_plus_two_messages(self):
        # Rank 3 is twice as slow: its step is 2 x (32 x 100 us + 2 ms) = 10.4 ms.
        self.assertSucceeded(self.train(4, "--batch-size", "32", "--steps", "8", "--slowdown",
                                        "3=2", "--drop-last", *self.models(), "--log", "ps.h5"))
        log = read_log(self.path("ps.h5"))
        self.assertEqual(log["attrs"]["clock"], "virtual")
        np.testing.assert_allclose([float(x) for x in log["attrs"]["comm_model"].split(",")],
                                   [ALPHA, BETA], rtol=1e-15)
        compute = 32 * PER_SAMPLE + PER_BATCH
        message = self.message(log)
        step = 2 * compute + 2 * message
        np.testing.assert_allclose(log["steps"]["step_time"], [step] * 8, rtol=1e-6)
        np.testing.assert_allclose(log["steps"]["time"], step * np.arange(1, 9), rtol=1e-6)
        np.testing.assert_allclose(log["steps"]["throughput"], 96 / step, rtol=1e-6)
        # Induced delays are not slept: the whole run takes real time, the log says how much.
        self.assertTrue(np.all(np.diff(log["steps"]["wall_time"]) >= 0))
        workers = log["workers"]
        ranks = workers["rank"]
        np.testing.assert_allclose(workers["compute_time"], compute, rtol=1e-6)
        np.testing.assert_allclose(workers["sleep_time"][ranks == 3], compute, rtol=1e-6)
        np.testing.assert_allclose(workers["sleep_time"][ranks != 3], 0)
        np.testing.assert_allclose(workers["send_time"], 2 * message, rtol=1e-6)
        np.testing.assert_allclose(workers["wait_time"][ranks == 3], 0, atol=1e-9)
        np.testing.assert_allclose(workers["wait_time"][ranks != 3], compute, rtol=1e-5)
        # The master waited for the slowest gradient and its message.
        np.testing.assert_allclose(log["collect"]["wait_time"], 2 * compute + message, rtol=1e-6)

    def test_same_models_give_the_same_run_exactly(self):
        for name in ("a.h5", "b.h5"):
            self.assertSucceeded(self.train(3, "--batch-size", "16", "--steps", "6", "--induce",
                                            "cedar", "--seed", "7", *self.models(), "--log",
                                            name, "--checkpoint", "ck-" + name))
        a, b = read_log(self.path("a.h5")), read_log(self.path("b.h5"))
        for column in ("time", "step_time", "loss", "samples"):
            np.testing.assert_array_equal(a["steps"][column], b["steps"][column])
        np.testing.assert_array_equal(a["workers"]["sleep_time"], b["workers"]["sleep_time"])
        # cedar's delays are counted, not slept: steps 2-6 took less real time than their
        # emulated time, which a run that slept the delays would at least take. (Real time is
        # compared between steps, not from the start: set-up time depends on the machine's
        # load.)
        emulated = a["steps"]["time"][-1] - a["steps"]["time"][0]
        real = a["steps"]["wall_time"][-1] - a["steps"]["wall_time"][0]
        self.assertGreater(emulated, 0.3)
        self.assertLess(real, emulated)

    def test_allreduce_step_is_the_slowest_plus_a_ring_allreduce(self):
        self.assertSucceeded(self.train(3, "--batch-size", "20", "--steps", "5", "--comm",
                                        "allreduce", "--slowdown", "1=1.5", *self.models(),
                                        "--log", "ar.h5"))
        log = read_log(self.path("ar.h5"))
        compute = 20 * PER_SAMPLE + PER_BATCH
        bytes_ = 4 * log["config"]["parameters"]
        ring = 2 * 2 * (ALPHA + BETA * bytes_ / 3)
        np.testing.assert_allclose(log["steps"]["step_time"], 1.5 * compute + ring, rtol=1e-6)

    def test_async_takes_gradients_in_virtual_arrival_order(self):
        # Workers 1 and 2 need 5.2 ms a round, worker 3 10.4 ms; messages cost 1 ms and the
        # update nothing. Parameters reach everyone at 1 ms; hand-computed arrivals:
        #   7.2 (1), 7.2 (2), 12.4 (1, 2 and 3), 17.6 (1, 2), 22.8 (1, 2, 3), 28.0 (1, 2) ...
        # A worker restarts when it sent (arrival - 1 ms) on the newest parameters that reached
        # it by then, so its staleness is the updates made since those were published.
        self.assertSucceeded(self.train(4, "--batch-size", "32", "--steps", "12", "--comm", "ps",
                                        "--async", "--slowdown", "3=2", "--clock", "virtual",
                                        "--comm-model", "1e-3,0", "--compute-model",
                                        f"{PER_SAMPLE},{PER_BATCH}", "--log", "async.h5"))
        log = read_log(self.path("async.h5"))
        np.testing.assert_allclose(
            log["steps"]["time"],
            np.array([7.2, 7.2, 12.4, 12.4, 12.4, 17.6, 17.6, 22.8, 22.8, 22.8, 28.0, 28.0]) / 1e3,
            rtol=1e-9)
        self.assertEqual(list(log["workers"]["rank"]), [1, 2, 1, 2, 3, 1, 2, 1, 2, 3, 1, 2])
        # Worker 1 at step 2 computed on the start parameters (its round began at 6.2 ms, before
        # the update of 7.2 ms reached it at 8.2 ms); at step 5 on those of step 2 (published
        # at 7.2, received at 8.2, round from 11.4), and so on.
        self.assertEqual(list(log["workers"]["staleness"]), [0, 1, 2, 3, 4, 3, 4, 2, 3, 7, 3, 4])
        np.testing.assert_allclose(log["workers"]["send_time"], 1e-3)

    def test_one_process_counts_compute_and_delays(self):
        self.assertSucceeded(self.train(0, "--batch-size", "50", "--steps", "4", "--clock",
                                        "virtual", "--compute-model", "1e-3,0", "--log",
                                        "one.h5"))
        log = read_log(self.path("one.h5"))
        np.testing.assert_allclose(log["steps"]["step_time"], 0.05, rtol=1e-9)
        self.assertEqual(log["attrs"]["comm_model"], "")

    def test_eleven_ranks_emulate_a_ten_worker_niagara_cluster(self):
        # Measured CPU time and communication model: the step is exactly the slowest worker's
        # delay + compute, two messages and the update, from the log's own columns; and the
        # mean of the slowest delay is the profile's expected maximum of 10 draws.
        self.assertSucceeded(self.train(11, "--batch-size", "8", "--steps", "30", "--clock",
                                        "virtual", "--induce", "niagara", "--log", "n.h5",
                                        timeout=240))
        log = read_log(self.path("n.h5"))
        self.assertEqual(log["config"]["workers"], 10)
        alpha, beta = (float(x) for x in log["attrs"]["comm_model"].split(","))
        message = alpha + beta * 4 * log["config"]["parameters"]
        ready = (log["workers"]["sleep_time"] + log["workers"]["compute_time"]).reshape(30, 10)
        waits = log["collect"]["wait_time"]
        np.testing.assert_allclose(waits, ready.max(axis=1) + message, rtol=1e-5, atol=1e-7)
        update = log["steps"]["step_time"] - waits - message
        self.assertTrue(np.all(update >= -1e-7), update)
        self.assertTrue(np.all(update < 0.05), update)
        # niagara: 0 w.p. 0.4, |N(0, 0.4)| w.p. 0.3, |N(2, 0.3)| w.p. 0.2, |N(5, 0.3)| w.p. 0.1.
        rng = np.random.default_rng(0)
        draws = rng.choice(4, size=(200000, 10), p=[0.4, 0.3, 0.2, 0.1])
        means = np.array([0, 0, 2, 5])[draws]
        stds = np.array([0, 0.4, 0.3, 0.3])[draws]
        expected_max = np.abs(rng.normal(means, stds)).max(axis=1).mean()
        slowest = log["workers"]["sleep_time"].reshape(30, 10).max(axis=1)
        # 30 steps: the mean of the maximum has a standard error of about 0.3 s.
        self.assertLess(abs(slowest.mean() - expected_max), 1.2, (slowest.mean(), expected_max))
        # Emulated minutes in real seconds: nothing slept.
        self.assertGreater(log["steps"]["time"][-1], 60)
        self.assertLess(log["steps"]["wall_time"][-1], log["steps"]["time"][-1] / 4)

    def test_the_measured_message_model_times_the_run_s_own_exchange(self):
        # A hot ping-pong misses what a step's messages cost (the master waking from its wait,
        # MPI's reduce and broadcast handshakes): synchronous ps and MPI allreduce are timed on
        # their own collectives; point-to-point exchanges (--async) by ping-pong.
        cases = [([], "the ps exchange"),
                 (["--comm", "allreduce", "--allreduce", "mpi"], "allreduce"),
                 (["--async"], "ping-pong")]
        for extra, measured_on in cases:
            command = [MPIRUN, "--oversubscribe", "-n", "2", mbtest.tool("mb-train-fmb"), "--data",
                       self.path("toy.h5"), "--model", "mlp", "--hidden", "16", "--batch-size",
                       "16", "--steps", "2", "--clock", "virtual", "--compute-model", "1e-4,2e-3",
                       "--log", self.path("m.h5"), "-f", *extra]
            result = mbtest.run(command, cwd=self.dir, env=self.env, timeout=120)
            self.assertSucceeded(result)
            self.assertRegex(result.out + result.err,
                             rf"messages alpha [^\n]*, measured on {measured_on}\b", extra)
            alpha, beta = (float(x) for x in
                           read_log(self.path("m.h5"))["attrs"]["comm_model"].split(","))
            self.assertGreater(alpha, 0, extra)
            self.assertGreaterEqual(beta, 0, extra)

    def test_the_ps_exchange_is_measured_after_the_workers_round(self):
        # The master's wait for the gradient decides how fast it wakes (spinning, yielding,
        # asleep between polls): the measurement idles the workers for the slowest worker's
        # round from the compute models and the mean induced delay, at most 10 ms (asleep at
        # the longest interval already). Batch 16: 16 * 1e-4 + 2e-3 = 3.6 ms; --slowdown 1=2
        # doubles it; an induced mean of 50 ms caps it; no compute model: the cap.
        cases = [(["--compute-model", "1e-4,2e-3"], "3.6 ms"),
                 (["--compute-model", "1e-4,2e-3", "--slowdown", "1=2"], "7.2 ms"),
                 (["--compute-model", "1e-5,1e-4", "--induce", "0.05:0.01:1"], "10 ms"),
                 ([], "10 ms")]
        def command(extra, log):
            return [MPIRUN, "--oversubscribe", "-n", "2", mbtest.tool("mb-train-fmb"), "--data",
                    self.path("toy.h5"), "--model", "mlp", "--hidden", "16", "--batch-size",
                    "16", "--steps", "1", "--clock", "virtual", "--log", self.path(log), "-f",
                    *extra]
        def run(i):
            # A TMPDIR each: mpiruns started at once race to make one session directory.
            tmp = self.path(f"tmp{i}")
            os.makedirs(tmp, exist_ok=True)
            return mbtest.run(command(cases[i][0], f"idle{i}.h5"), cwd=self.dir,
                              env=dict(self.env, TMPDIR=tmp), timeout=120)
        # Nothing timed is compared: the four jobs run at once.
        with concurrent.futures.ThreadPoolExecutor(len(cases)) as pool:
            results = list(pool.map(run, range(len(cases))))
        for (extra, idle), result in zip(cases, results):
            self.assertSucceeded(result)
            self.assertRegex(result.out + result.err,
                             rf"measured on the ps exchange \(the workers idle {idle}\)", extra)

    def test_bad_values_are_refused(self):
        cases = [
            (["--clock", "cpu"], "--clock: 'cpu' is not wall or virtual"),
            (["--comm-model", "1,1"], "--comm-model needs --clock virtual"),
            (["--compute-model", "1,1"], "--compute-model needs --clock virtual"),
            (["--clock", "virtual", "--comm-model", "1"], "--comm-model: '1' is not ALPHA,BETA"),
            (["--clock", "virtual", "--compute-model", "a,1"], "--compute-model 'a,1' A"),
        ]
        for args, message in cases:
            with self.subTest(args=args):
                self.assertFailsWith(self.train(0, "--steps", "1", *args), 2, message)
        bad_rank = self.train(3, "--steps", "1", "--clock", "virtual", "--compute-model",
                              "5=1e-3,0")
        self.assertEqual(bad_rank.rc, 2, bad_rank)
        self.assertIn("--compute-model: rank 5 does not exist in a run of 3 ranks", bad_rank.err)


if __name__ == "__main__":
    mbtest.main()
