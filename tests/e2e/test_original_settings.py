"""The AMB original's settings beside mbkit's own (issue N), each checked against the original's
value computed by hand on a tiny problem: a random test batch per evaluation (--test-sample
random), the master's training loss (--train-loss master), --time-limit auto from the
straggler profile, the epoch cadence (--eval-every-epoch, the summary line,
--checkpoint-every-epoch, mb-plot --x-axis epoch), the original's compute-time histogram and
the workers' receive, exit and queued-update columns with their histograms, the asynchronous
master's time rule (--async-master-time-limit) and the communication stragglers
(--async-delay-std, with a port of the xoshiro256** stream to draw the delays by hand).
(--weight-decay-on and --lr-schedule epochs: tests/train/test_original_settings.cpp,
tests/optim.)"""

import concurrent.futures
import csv
import io
import json
import os
import re
import shutil

import h5py
import numpy as np

import mbtest

MPIRUN = shutil.which("mpirun")
MASK = (1 << 64) - 1


def splitmix64(state):
    state = (state + 0x9E3779B97F4A7C15) & MASK
    z = ((state ^ (state >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return state, z ^ (z >> 31)


def first_normal(seed, stream):
    """The first normal of mbkit's Rng(seed, stream): xoshiro256** seeded through SplitMix64,
    Marsaglia's polar method (util/random.cpp), written out again here."""
    state = seed ^ splitmix64(stream)[1]
    s = []
    for _ in range(4):
        state, word = splitmix64(state)
        s.append(word)

    def uniform():
        result = ((((s[1] * 5) & MASK) << 7 | ((s[1] * 5) & MASK) >> 57) & MASK) * 9 & MASK
        t = (s[1] << 17) & MASK
        s[2] ^= s[0]
        s[3] ^= s[1]
        s[1] ^= s[2]
        s[0] ^= s[3]
        s[2] ^= t
        s[3] = ((s[3] << 45) | (s[3] >> 19)) & MASK
        return (result >> 11) * 2.0 ** -53

    while True:
        u, v = 2.0 * uniform() - 1.0, 2.0 * uniform() - 1.0
        r = u * u + v * v
        if 0.0 < r < 1.0:
            return u * np.sqrt(-2.0 * np.log(r) / r)


def message_delay(std, seed, worker, round_):
    """The original's RecvStraggler delay, std |N(0, 1)|, drawn per (seed, worker, round)."""
    return std * abs(first_normal(seed ^ 0xC0DE1A7, (worker << 32) | round_))


def time_rule(arrivals, window, steps):
    """The original's --async_master time, by hand: each step takes the gradients that arrive
    within `window` of its start, or the first after it when none did; the next step starts at
    the later of the window's end and the last arrival taken. `arrivals`: (time, worker) in
    virtual order. Returns per step the workers taken and the step's length."""
    now, i, out = 0.0, 0, []
    for _ in range(steps):
        deadline, taken = now + window, []
        while i < len(arrivals) and (arrivals[i][0] <= deadline or not taken):
            taken.append(arrivals[i])
            i += 1
        end = max(deadline, taken[-1][0])
        out.append(([w for _, w in taken], end - now))
        now = end
    return out


def continuous_arrivals(rounds, start, message, compute, delays):
    """Workers computing without pause: worker w's round k starts when round k - 1 was ready
    and arrives `message` + its delay later."""
    events = []
    for w, cost in enumerate(compute):
        t = start
        for k in range(rounds):
            t += cost
            events.append((t + message + delays(w, k), w))
    return sorted(events)


def mbtest_attr(obj, name):
    value = obj.attrs[name]
    return value.decode() if isinstance(value, bytes) else value


def read_log(path):
    with h5py.File(path, "r", swmr=True) as log:
        tables = {group: {name: log[group][name][...] for name in log[group]}
                  for group in log if isinstance(log[group], h5py.Group)}
        tables["config"] = json.loads(mbtest.text_attrs(log)["config"])
    return tables


class OriginalSettings(mbtest.ToolTestCase):
    def setUp(self):
        super().setUp()
        result = self.mb_dataset("synth", "toy", "--learnable", "--train", "256", "--test", "60",
                                 "--seed", "5", "-o", self.path("toy.h5"))
        self.assertSucceeded(result)

    def train(self, *args, tool="mb-train-fmb"):
        command = [mbtest.tool(tool), "--data", self.path("toy.h5"), "--model", "mlp", "--hidden",
                   "16", "--threads", "1", "--batch-size", "16", "-q", *args]
        return mbtest.run(command, cwd=self.dir, env=self.env)

    def test_random_test_batches_are_fresh_draws_of_a_shuffled_pass(self):
        # A learning rate too small to move a weight: the model is the same at every evaluation,
        # so what changes between evaluations is which images were drawn.
        frozen = ["--lr", "1e-30", "--steps", "15", "--eval-every", "1"]
        self.assertSucceeded(self.train(*frozen, "--log", "full.h5"))
        full = read_log(self.path("full.h5"))["eval"]
        self.assertTrue(np.all(full["samples"] == 60))
        self.assertEqual(len(set(full["accuracy"])), 1)
        correct_all = int(round(full["accuracy"][0] * 60))

        # All 60 drawn: a permutation of the split, the same accuracy as the fixed evaluation.
        self.assertSucceeded(self.train(*frozen, "--test-size", "60", "--test-sample", "random",
                                        "--log", "all.h5"))
        drawn_all = read_log(self.path("all.h5"))
        self.assertEqual(drawn_all["config"]["test_sample"], "random")
        np.testing.assert_array_equal(drawn_all["eval"]["accuracy"], full["accuracy"])

        # 7 at a time: floor(60 / 7) = 8 disjoint draws per pass, the pass chosen by the step
        # (steps 8-15: pass 1, draws 0-7), so the 8 draws of that pass hold 56 distinct images
        # and their correct answers add up to the whole split's within the 4 left out.
        self.assertSucceeded(self.train(*frozen, "--test-size", "7", "--test-sample", "random",
                                        "--log", "seven.h5"))
        seven = read_log(self.path("seven.h5"))["eval"]
        self.assertTrue(np.all(seven["samples"] == 7))
        by_step = dict(zip(seven["step"].tolist(), np.rint(seven["accuracy"] * 7).astype(int)))
        one_pass = sum(by_step[step] for step in range(8, 16))
        self.assertLessEqual(abs(one_pass - correct_all), 4)
        self.assertGreater(len(set(by_step.values())), 1, "every draw scored the same")

        # Fixed: the first 7 every time, the same score at every evaluation.
        self.assertSucceeded(self.train(*frozen, "--test-size", "7", "--log", "first.h5"))
        self.assertEqual(len(set(read_log(self.path("first.h5"))["eval"]["accuracy"])), 1)

        # Seeded: the same draws again.
        self.assertSucceeded(self.train(*frozen, "--test-size", "7", "--test-sample", "random",
                                        "--log", "again.h5"))
        np.testing.assert_array_equal(read_log(self.path("again.h5"))["eval"]["accuracy"],
                                      seven["accuracy"])

    def test_master_train_loss_is_the_updated_model_on_the_masters_batch(self):
        # A file whose test split is its training split: mb-eval on it computes, independently
        # of the trainer, the loss of a model on the whole training split.
        with h5py.File(self.path("toy.h5"), "r") as source, \
                h5py.File(self.path("train-as-test.h5"), "w") as copy:
            for key, value in source.attrs.items():
                copy.attrs[key] = value
            for name in source:
                if name != "test":
                    source.copy(name, copy)
            source.copy("train", copy, name="test")
        # The master's batch is the whole split (batch 256 of 256), so the loss the log gives
        # for the last step is the final model's loss on the split.
        for ranks in (0, 3):
            with self.subTest(ranks=ranks):
                args = ["--data", self.path("train-as-test.h5"), "--batch-size", "256", "--steps",
                        "3", "--lr", "0.1", "--train-loss", "master", "--log", f"m{ranks}.h5",
                        "--checkpoint", f"m{ranks}.ckpt.h5"]
                command = [mbtest.tool("mb-train-fmb"), "--model", "mlp", "--hidden", "16",
                           "--threads", "1", "-q", *args]
                if ranks:
                    self.assertIsNotNone(MPIRUN, "mpirun (openmpi-bin) is required")
                    command = [MPIRUN, "--oversubscribe", "-n", str(ranks),
                               *command]
                self.assertSucceeded(mbtest.run(command, cwd=self.dir, env=self.env))
                log = read_log(self.path(f"m{ranks}.h5"))
                self.assertEqual(log["config"]["train_loss"], "master")
                result = mbtest.run([mbtest.tool("mb-eval"), self.path(f"m{ranks}.ckpt.h5"),
                                     "--data", self.path("train-as-test.h5"), "--json"],
                                    cwd=self.dir, env=self.env)
                self.assertSucceeded(result)
                evaluated = json.loads(result.out)
                self.assertAlmostEqual(float(log["steps"]["loss"][-1]), evaluated["loss"], places=5)
                self.assertAlmostEqual(float(log["steps"]["accuracy"][-1]), evaluated["accuracy"],
                                       places=9)

    def test_auto_time_limit_is_a_full_batch_plus_the_mean_delay(self):
        # By hand: micro-batches of 32 / 4 = 8 at 0.001 s a sample and 0.002 s a micro-batch
        # make a full batch of 4 x 0.01 = 0.04 s; the profile's delay is 0.5 s half the time
        # (std 0: no folding), a mean of 0.25 s. Slowdowns of 1.5 and 2 on ranks 2 and 3
        # make the workers' full batches 0.04, 0.06 and 0.08 s: the median is 0.06 s.
        virtual = ["--clock", "virtual", "--compute-model", "0.001,0.002", "--comm-model",
                   "1e-5,1e-9", "--batch-size", "32", "--partitions", "4", "--time-limit", "auto",
                   "--induce", "0.5:0:0.5,0:0:0.5", "--steps", "3", "--lr", "0.05"]
        self.assertSucceeded(self.train(*virtual, "--log", "one.h5", tool="mb-train-amb"))
        config = read_log(self.path("one.h5"))["config"]
        self.assertAlmostEqual(config["time_limit"], 4 * (0.001 * 8 + 0.002) + 0.25, places=12)
        self.assertIn("+ the mean induced delay (0.25 s, custom)", config["time_limit_rule"])
        self.assertIsNotNone(MPIRUN, "mpirun (openmpi-bin) is required")
        command = [MPIRUN, "--oversubscribe", "-n", "4", mbtest.tool("mb-train-amb"), "--data",
                   self.path("toy.h5"), "--model", "mlp", "--hidden", "16", "--threads", "1", "-q",
                   *virtual, "--slowdown", "2=1.5,3=2", "--log", "four.h5"]
        self.assertSucceeded(mbtest.run(command, cwd=self.dir, env=self.env))
        config = read_log(self.path("four.h5"))["config"]
        self.assertAlmostEqual(config["time_limit"], 1.5 * 0.04 + 0.25, places=12)
        self.assertIn("a full batch x slowdown (0.06", config["time_limit_rule"])
        # Without stragglers: a full batch, as before.
        self.assertSucceeded(self.train(*virtual[:-6], "--steps", "2", "--log", "plain.h5",
                                        tool="mb-train-amb"))
        self.assertAlmostEqual(read_log(self.path("plain.h5"))["config"]["time_limit"], 0.04,
                               places=12)

    def test_epoch_cadence(self):
        # 256 training images in batches of 16: an epoch is 16 steps.
        args = ["--epochs", "3", "--lr", "0.05", "--eval-every-epoch", "--checkpoint", "c.h5",
                "--checkpoint-every-epoch", "--log", "epochs.h5"]
        command = [mbtest.tool("mb-train-fmb"), "--data", self.path("toy.h5"), "--model", "mlp",
                   "--hidden", "16", "--threads", "1", "--batch-size", "16", *args]
        result = mbtest.run(command, cwd=self.dir, env=self.env)
        self.assertSucceeded(result)
        log = read_log(self.path("epochs.h5"))
        self.assertEqual(log["eval"]["step"].tolist(), [16, 32, 48])
        self.assertTrue(log["config"]["eval_every_epoch"])
        # A checkpoint per epoch, each the state of its epoch's last step.
        for epoch in (1, 2, 3):
            with h5py.File(self.path(f"c-epoch{epoch:04d}.h5"), "r") as f:
                self.assertEqual(int(mbtest_attr(f, "step")), 16 * epoch)
        with h5py.File(self.path("c-epoch0003.h5"), "r") as a, h5py.File(self.path("c.h5"), "r") as b:
            for name in b["params"]:
                np.testing.assert_array_equal(a["params"][name][...], b["params"][name][...])
        # The summary line, by hand from the log: the mean loss of the epoch's 16 steps (all of
        # 16 samples) and the evaluation at its end.
        lines = re.findall(r"epoch (\d+): train loss ([0-9.]+) over (\d+) steps, test accuracy "
                           r"([0-9.]+)%, ", result.err)
        self.assertEqual([int(line[0]) for line in lines], [1, 2, 3], result.err)
        for epoch, loss, steps, accuracy in lines:
            e = int(epoch)
            self.assertEqual(int(steps), 16)
            by_hand = float(np.mean(log["steps"]["loss"][16 * (e - 1):16 * e]))
            self.assertEqual(loss, f"{by_hand:.4f}")
            self.assertEqual(accuracy, f"{100 * log['eval']['accuracy'][e - 1]:.2f}")

        # mb-plot: every curve against the epoch on request.
        for kind, table in (("loss-vs-time", "steps"), ("accuracy-vs-step", "eval")):
            result = mbtest.run([mbtest.tool("mb-plot"), self.path("epochs.h5"), "--type", kind,
                                 "--x-axis", "epoch", "--csv", "-"], cwd=self.dir, env=self.env)
            self.assertSucceeded(result)
            rows = list(csv.DictReader(io.StringIO(result.out)))
            self.assertEqual({r["x_label"] for r in rows}, {"Epoch"})
            np.testing.assert_allclose([float(r["x"]) for r in rows], log[table]["epoch"])
        self.assertFailsWith(mbtest.run([mbtest.tool("mb-plot"), self.path("epochs.h5"),
                                         "--x-axis", "sample", "--csv", "-"], cwd=self.dir,
                                        env=self.env), 2, "--x-axis: 'sample'")
        self.assertFailsWith(self.train("--steps", "2", "--checkpoint-every-epoch"), 2,
                             "--checkpoint-every-epoch needs --checkpoint")

    def test_original_compute_time_histogram_includes_the_sleep(self):
        args = ["--clock", "virtual", "--compute-model", "0.001,0.002", "--batch-size", "32",
                "--partitions", "4", "--time-limit", "0.5", "--induce", "niagara", "--steps",
                "40", "--log", "slept.h5"]
        self.assertSucceeded(self.train(*args, tool="mb-train-amb"))
        workers = read_log(self.path("slept.h5"))["workers"]
        by_hand = workers["compute_time"] + workers["sleep_time"]  # the original's compute_time
        self.assertGreater(float(workers["sleep_time"].sum()), 0)
        for choice, values, label in (("original", by_hand, "Computation time with induced delay"),
                                      ("mbkit", workers["compute_time"], "Computation time")):
            result = mbtest.run([mbtest.tool("mb-plot"), self.path("slept.h5"), "--type",
                                 "compute-time", "--compute-time", choice, "--bins", "20",
                                 "--csv", "-"], cwd=self.dir, env=self.env)
            self.assertSucceeded(result)
            rows = list(csv.DictReader(io.StringIO(result.out)))
            self.assertTrue(all(r["x_label"].startswith(label + " (") for r in rows), rows[0])
            # The bins' mean is the values' mean within half a bin.
            scale = {"(ms)": 1e-3, "(s)": 1.0}[rows[0]["x_label"].split()[-1]]
            centres = np.array([float(r["x"]) for r in rows]) * scale
            weights = np.array([float(r["y"]) for r in rows])
            width = centres[1] - centres[0]
            self.assertAlmostEqual(float(weights.sum()), 1.0, places=6)
            self.assertLessEqual(abs(float((centres * weights).sum()) - float(values.mean())),
                                 width / 2 + 1e-9)

    def mpi_train(self, ranks, *args, tool="mb-train-fmb"):
        self.assertIsNotNone(MPIRUN, "mpirun (openmpi-bin) is required")
        command = [MPIRUN, "--oversubscribe", "-n", str(ranks), mbtest.tool(tool), "--data",
                   self.path("toy.h5"), "--model", "mlp", "--hidden", "16", "--threads", "1",
                   "--batch-size", "16", "-q", *args]
        return mbtest.run(command, cwd=self.dir, env=self.env)

    def test_receive_exit_and_queued_columns(self):
        alpha, beta = 1e-4, 1e-9
        virtual = ["--clock", "virtual", "--compute-model", "0.001,0.002", "--comm-model",
                   f"{alpha},{beta}", "--steps", "6", "--lr", "0.05"]
        # The three runs on the virtual clock, nothing timed between them: at once.
        runs = [("--comm", "ps", "--log", "ps.h5"), ("--comm", "allreduce", "--log", "ar.h5"),
                ("--comm", "ps", "--async", "--log", "async.h5")]
        with concurrent.futures.ThreadPoolExecutor(len(runs)) as pool:
            ps_run, ar_run, async_run = pool.map(lambda run: self.mpi_train(3, *virtual, *run),
                                                 runs)
        # ps on the virtual clock: every round starts from the master's broadcast, one message
        # of the parameters: alpha + beta * 4 bytes x parameters, by hand.
        self.assertSucceeded(ps_run)
        log = read_log(self.path("ps.h5"))
        message = alpha + beta * 4 * log["config"]["parameters"]
        workers = log["workers"]
        np.testing.assert_allclose(workers["recv_time"], message, rtol=1e-6)
        self.assertTrue(np.all(workers["exit_time"] == 0))
        self.assertTrue(np.all(workers["queued_updates"] == 0))
        # allreduce has no receive of its own.
        self.assertSucceeded(ar_run)
        self.assertTrue(np.all(read_log(self.path("ar.h5"))["workers"]["recv_time"] == 0))
        # Asynchronous, virtual: the parameters and state in one modelled message.
        self.assertSucceeded(async_run)
        workers = read_log(self.path("async.h5"))["workers"]
        np.testing.assert_allclose(workers["recv_time"], message, rtol=1e-6)  # the mlp has no state
        self.assertTrue(np.all(workers["queued_updates"] >= 0))

        # On the wall clock the broadcast is measured, and counted in the exchange too.
        self.assertSucceeded(self.mpi_train(3, "--steps", "6", "--comm", "ps", "--log",
                                            "wall.h5"))
        workers = read_log(self.path("wall.h5"))["workers"]
        later = workers["step"] > 1  # step 1's exchange time is of no step before it
        self.assertTrue(np.all(workers["recv_time"] > 0))
        self.assertTrue(np.all(workers["recv_time"][later] <= workers["send_time"][later]))
        self.assertTrue(np.all(workers["exit_time"] >= 0))

        # mb-plot draws the original's hist_recv, hist_exit and hist_queued_count.
        for kind, path in (("recv-time", "ps.h5"), ("exit-time", "wall.h5"),
                           ("queued-count", "async.h5")):
            result = mbtest.run([mbtest.tool("mb-plot"), self.path(path), "--type", kind, "--csv",
                                 "-"], cwd=self.dir, env=self.env)
            self.assertSucceeded(result)
            rows = list(csv.DictReader(io.StringIO(result.out)))
            self.assertAlmostEqual(sum(float(r["y"]) for r in rows), 1.0, places=6)
        # A log from before the columns: refused, naming the dataset.
        with h5py.File(self.path("wall.h5"), "r+") as f:
            del f["workers/recv_time"]
        result = mbtest.run([mbtest.tool("mb-plot"), self.path("wall.h5"), "--type", "recv-time",
                             "--csv", "-"], cwd=self.dir, env=self.env)
        self.assertNotEqual(result.rc, 0)
        self.assertIn("recv_time", result.err)

    def test_async_master_time_rule_by_hand(self):
        # Two workers on the virtual clock, 1 s and 2.5 s per round, messages of 0.5 s (all
        # exact in binary): worker 0's gradients arrive at 2, 3, 4, ... s, worker 1's at 3.5,
        # 6, 8.5, ... s. A window of 1.25 s: step 1 [0, 1.25] has none, so it takes the first
        # (2 s) alone and ends there; step 2 [2, 3.25]: 3 s; step 3 [3.25, 4.5]: 3.5 and 4 s;
        # step 4 [4.5, 5.75]: 5 s; step 5 [5.75, 7]: 6, 6 and 7 s (the window's end included).
        virtual = ["--clock", "virtual", "--compute-model", "1=0,1", "--compute-model", "2=0,2.5",
                   "--comm-model", "0.5,0", "--steps", "8", "--lr", "0.05", "--comm", "ps",
                   "--async"]
        self.assertSucceeded(self.mpi_train(3, *virtual, "--async-master-time-limit", "1.25",
                                            "--log", "timed.h5"))
        log = read_log(self.path("timed.h5"))
        self.assertEqual(log["config"]["async_master_time_limit"], 1.25)
        expected = time_rule(continuous_arrivals(10, 0.5, 0.5, [1.0, 2.5], lambda w, k: 0.0),
                             1.25, 8)
        self.assertEqual([len(t) for t, _ in expected], [1, 1, 2, 1, 3, 1, 2, 1])
        self.assertEqual(log["collect"]["gradients"].tolist(), [len(t) for t, _ in expected])
        np.testing.assert_array_equal(log["steps"]["step_time"], [d for _, d in expected])
        self.assertEqual(log["steps"]["step_time"].tolist()[:3], [2.0, 1.25, 1.25])
        ranks = [[] for _ in expected]
        for step, rank in zip(log["workers"]["step"], log["workers"]["rank"]):
            ranks[step - 1].append(int(rank) - 1)
        self.assertEqual([sorted(r) for r in ranks], [sorted(t) for t, _ in expected])
        self.assertTrue(np.all(log["workers"]["comm_delay"] == 0))
        # The count rule (the default) takes one gradient per update instead.
        self.assertSucceeded(self.mpi_train(3, *virtual, "--log", "count.h5"))
        count = read_log(self.path("count.h5"))
        self.assertTrue(np.all(count["collect"]["gradients"] == 1))
        self.assertNotIn("async_master_time_limit", count["config"])

    def test_async_message_delays_by_hand(self):
        # The same cluster with --async-delay-std 0.5 --seed 42: each message's delay is
        # 0.5 |N(0, 1)| drawn per (seed, worker, round), in the log, and the arrivals (and so
        # the time rule's steps) move by it; the workers do not wait for their messages.
        std, seed = 0.5, 42
        virtual = ["--clock", "virtual", "--compute-model", "1=0,1", "--compute-model", "2=0,2.5",
                   "--comm-model", "0.5,0", "--steps", "8", "--lr", "0.05", "--comm", "ps",
                   "--async", "--seed", str(seed), "--async-delay-std", str(std)]
        self.assertSucceeded(self.mpi_train(3, *virtual, "--async-master-time-limit", "1.25",
                                            "--log", "delayed.h5"))
        log = read_log(self.path("delayed.h5"))
        self.assertEqual(log["config"]["async_delay_std"], std)
        workers = log["workers"]
        for rank in (1, 2):
            delays = workers["comm_delay"][workers["rank"] == rank]
            self.assertGreater(len(delays), 0)
            np.testing.assert_allclose(
                delays, [message_delay(std, seed, rank - 1, k) for k in range(len(delays))],
                rtol=1e-12)
        expected = time_rule(continuous_arrivals(
            20, 0.5, 0.5, [1.0, 2.5], lambda w, k: message_delay(std, seed, w, k)), 1.25, 8)
        self.assertEqual(log["collect"]["gradients"].tolist(), [len(t) for t, _ in expected])
        np.testing.assert_allclose(log["steps"]["step_time"], [d for _, d in expected],
                                   rtol=1e-9)

        # On the wall clock the master holds each message for its delay: the same draws.
        self.assertSucceeded(self.mpi_train(3, "--steps", "6", "--comm", "ps", "--async",
                                            "--seed", str(seed), "--async-delay-std", "0.02",
                                            "--async-master-time-limit", "0.01", "--log",
                                            "wall.h5"))
        workers = read_log(self.path("wall.h5"))["workers"]
        for rank in (1, 2):
            delays = workers["comm_delay"][workers["rank"] == rank]
            np.testing.assert_allclose(
                delays, [message_delay(0.02, seed, rank - 1, k) for k in range(len(delays))],
                rtol=1e-12)
        wall = read_log(self.path("wall.h5"))
        self.assertTrue(np.all(wall["collect"]["gradients"] >= 1))
        # The master waits out its 10 ms window at every step.
        self.assertTrue(np.all(wall["collect"]["wait_time"] >= 0.01), wall["collect"]["wait_time"])

        # mb-plot draws their distribution (the original's comm_straggler_dist).
        result = mbtest.run([mbtest.tool("mb-plot"), self.path("delayed.h5"), "--type",
                             "comm-delay", "--csv", "-"], cwd=self.dir, env=self.env)
        self.assertSucceeded(result)
        rows = list(csv.DictReader(io.StringIO(result.out)))
        self.assertAlmostEqual(sum(float(r["y"]) for r in rows), 1.0, places=6)
        self.assertTrue(rows[0]["x_label"].startswith("Induced delay in receiving"), rows[0])

    def test_bad_async_original_settings_name_the_flag(self):
        for args, text in (
                (["--async-master-time-limit", "-1"],
                 "--async-master-time-limit -1 must be a non-negative number of seconds"),
                (["--async-delay-std", "nan"], "--async-delay-std"),
                (["--async-delay-std", "0.1"], "--async-delay-std needs --async"),
                (["--async-master-time-limit", "0.1"], "--async-master-time-limit needs --async")):
            with self.subTest(args=args):
                self.assertFailsWith(self.train("--steps", "2", *args), 2, text)
        result = self.train("--steps", "2", "--async", "--async-min-grads", "2",
                            "--async-master-time-limit", "0.1")
        self.assertFailsWith(result, 2, "two rules for when the master updates")

    def test_bad_original_settings_name_the_flag(self):
        for args, text in ((["--test-sample", "random"], "--test-sample random needs --test-size"),
                           (["--test-sample", "some"], "--test-sample: 'some' is not fixed or random"),
                           (["--weight-decay-on", "batch"], "--weight-decay-on: 'batch'"),
                           (["--train-loss", "rank0"], "--train-loss: 'rank0' is not workers"),
                           (["--lr-schedule", "epochs", "--lr-every", "0"], "--lr-every")):
            with self.subTest(args=args):
                self.assertFailsWith(self.train("--steps", "2", *args), 2, text)


if __name__ == "__main__":
    mbtest.main()
