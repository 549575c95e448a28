"""One command measures a cluster, one emulates it: mpirun -n 2 mb-bench-bandwidth --fit times
messages between the two ranks (ping-pong), an MPI allreduce of both, streamed messages
(windows of back-to-back sends) and the asynchronous exchange's cycle (idle and busy), and writes
the measured points (the median per size), the message model's line (alpha, beta, r^2; the
hosts, CPU and date), the allreduce's, the stream's and the cycle's, with the -o/--force rules of the other tools; a trainer given that file with
--comm-model on the virtual clock prices a ps message by the line, an async one by the async
cycle's points (by the stream's where the file has no cycle, by the line where it has neither,
as files written before), and a two-rank --allreduce mpi step by interpolating the measured points linearly in bytes, and a file
without points takes the same step times, to the bit, as the same run given the fitted alpha
and beta inline; --resume with another model is refused; bad model files are refused in one
line naming the file (status 3)."""

import concurrent.futures
import json
import os
import shutil
import tempfile

import h5py
import numpy as np

import mbtest


def interpolated(sizes, seconds, n):
    """The time of n bytes from the measured points as mbkit-formats(5) says: linear in bytes
    between the sizes around n, the smallest's time below them, the last two's slope beyond
    (here positive, so never the fitted beta)."""
    sizes, seconds = np.asarray(sizes, float), np.asarray(seconds, float)
    if n >= sizes[-1]:
        slope = (seconds[-1] - seconds[-2]) / (sizes[-1] - sizes[-2])
        assert slope > 0, (sizes, seconds)
        return seconds[-1] + slope * (n - sizes[-1])
    return float(np.interp(n, sizes, seconds))


MPIRUN = shutil.which("mpirun")
# A short sweep: 8 B to 512 KiB in 7 sizes, 20 round trips each (about a second).
FIT = ["--fit", "-b", "8", "-e", "512K", "-f", "4", "-n", "20", "-w", "3"]


class CommModel(mbtest.ToolTestCase):
    @classmethod
    def setUpClass(cls):
        # One fit (cm.h5) for every test: the same command in each, a second of timing.
        super().setUpClass()
        cls.fit_dir = tempfile.mkdtemp(prefix="mbkit-e2e-fit-")
        cls.fit = None
        if MPIRUN is not None:
            cls.fit = mbtest.run([MPIRUN, "--oversubscribe", "-n", "2",
                                  mbtest.tool("mb-bench-bandwidth"), *FIT, "--comm-model",
                                  os.path.join(cls.fit_dir, "cm.h5")],
                                 cwd=cls.fit_dir, env=mbtest.clean_env(), timeout=120)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.fit_dir, ignore_errors=True)
        super().tearDownClass()

    def setUp(self):
        super().setUp()
        self.assertIsNotNone(MPIRUN, "mpirun (openmpi-bin) is required")

    def bench(self, *args):
        return mbtest.run([MPIRUN, "--oversubscribe", "-n", "2", mbtest.tool("mb-bench-bandwidth"),
                           *args], cwd=self.dir, env=self.env, timeout=120)

    def train(self, ranks, *args, quiet=True):
        command = [MPIRUN, "--oversubscribe", "-n", str(ranks), mbtest.tool("mb-train-fmb"),
                   "--data", self.path("toy.h5"), "--model", "mlp", "--hidden", "16", "--lr",
                   "0.05", "--batch-size", "16", "--seed", "2", *(["-q"] if quiet else []),
                   "--clock", "virtual", "--compute-model", "1e-4,2e-3", *args]
        # A TMPDIR per mpirun: the tests start several at once, and Open MPI's session
        # directories race in a shared one ("unable to create ... File exists").
        env = dict(self.env, TMPDIR=tempfile.mkdtemp(prefix="mpi-", dir=self.dir))
        return mbtest.run(command, cwd=self.dir, env=env, timeout=180)

    def fitted(self):
        """The class's fit, its cm.h5 copied here."""
        self.assertSucceeded(self.fit)
        shutil.copy(os.path.join(self.fit_dir, "cm.h5"), self.path("cm.h5"))
        return self.fit

    def test_fit_writes_the_model_and_a_trainer_takes_it_as_given_inline(self):
        result = self.fitted()
        columns, rows = mbtest.parse_table(result.out)
        sizes = [8, 32, 128, 512, 2048, 8192, 32768, 131072, 524288]
        self.assertEqual([int(r["size"]) for r in rows if r["op"] == "pingpong-0-1"], sizes)
        self.assertEqual([int(r["size"]) for r in rows if r["op"] == "allreduce-world"], sizes)
        self.assertEqual([int(r["size"]) for r in rows if r["op"] == "stream-0-1"], sizes)
        self.assertEqual([int(r["size"]) for r in rows if r["op"] == "async-0-1"], sizes)
        self.assertEqual([int(r["size"]) for r in rows if r["op"] == "async-busy-0-1"], sizes)
        self.assertEqual([int(r["size"]) for r in rows if r["op"] == "ps-round"], sizes)
        self.assertEqual({r["op"] for r in rows},
                         {"pingpong-0-1", "allreduce-world", "stream-0-1", "async-0-1",
                          "async-busy-0-1", "ps-round"})
        self.assertTrue(all(r["wrong"] == "0" for r in rows))
        self.assertIn("# ranks 0-1: alpha = ", result.out)
        self.assertIn("# streamed messages (windows of up to 64), all pairs: alpha = ", result.out)
        self.assertRegex(result.out, r"# streamed message of 524288 bytes: measured \S+ s, "
                                     r"fitted \S+ s, the line \S+ s")
        with h5py.File(self.path("cm.h5"), "r") as f:
            attrs = mbtest.text_attrs(f)
            self.assertEqual(attrs["format"], "mbkit-comm-model")
            self.assertEqual(int(attrs["ranks"]), 2)
            self.assertEqual(int(attrs["per_pair"]), 0)
            self.assertEqual(len(attrs["hosts"]), 2)
            self.assertEqual(len(attrs["cpu_models"]), 2)
            self.assertRegex(attrs["created"], r"^\d{4}-\d\d-\d\dT")
            alpha, beta = float(f.attrs["alpha"]), float(f.attrs["beta"])
            self.assertGreaterEqual(alpha, 0)
            self.assertGreater(beta, 0)
            self.assertGreaterEqual(float(f.attrs["r_squared"]), 0.9)
            pair = f["pairs/0"]
            self.assertEqual((int(pair.attrs["rank_a"]), int(pair.attrs["rank_b"])), (0, 1))
            self.assertEqual(len(pair.attrs["seconds"]), 9)
            # One pair: its fit is the model.
            self.assertEqual(float(pair.attrs["alpha"]), alpha)
            # The streamed messages: the window, their line and its r^2, the points.
            stream = f["stream"]
            self.assertEqual(int(stream.attrs["window"]), 64)
            self.assertEqual([int(x) for x in stream.attrs["bytes"]], sizes)
            self.assertEqual(len(stream.attrs["seconds"]), 9)
            self.assertTrue(all(float(x) > 0 for x in stream.attrs["seconds"]))
            for name in ("alpha", "beta", "r_squared", "alpha_stderr", "beta_stderr"):
                self.assertTrue(np.isfinite(float(stream.attrs[name])), msg=name)
            # The async cycle: its window, the idle and busy periods per size, its line.
            cycle = f["async"]
            self.assertEqual(int(cycle.attrs["window"]), 4)
            self.assertEqual([int(x) for x in cycle.attrs["bytes"]], sizes)
            for name in ("seconds", "busy_seconds"):
                self.assertEqual(len(cycle.attrs[name]), 9, msg=name)
                self.assertTrue(all(float(x) > 0 for x in cycle.attrs[name]), msg=name)
            for name in ("alpha", "beta", "r_squared", "alpha_stderr", "beta_stderr"):
                self.assertTrue(np.isfinite(float(cycle.attrs[name])), msg=name)
            # The ps round: of the file's ranks, a round per size, its line.
            round_ = f["ps_round"]
            self.assertEqual(int(round_.attrs["ranks"]), 2)
            self.assertEqual([int(x) for x in round_.attrs["bytes"]], sizes)
            self.assertTrue(all(float(x) > 0 for x in round_.attrs["seconds"]))
            self.assertEqual(len(round_.attrs["seconds"]), 9)
            # Its busy passes: a slack and a tick per size (on this unshaped link the step
            # grows with the compute, but the machinery, not the figures, is tested here).
            for name in ("slack_seconds", "tick_seconds"):
                self.assertEqual(len(round_.attrs[name]), 9, msg=name)
                self.assertTrue(all(float(x) >= 0 for x in round_.attrs[name]), msg=name)
            self.assertTrue(all(float(a) <= float(b) for a, b in
                                zip(round_.attrs["slack_seconds"], round_.attrs["seconds"])))
            for name in ("alpha", "beta", "r_squared", "alpha_stderr", "beta_stderr"):
                self.assertTrue(np.isfinite(float(round_.attrs[name])), msg=name)
        self.assertIn("# ps round of 2 ranks: alpha = ", result.out)
        self.assertRegex(result.out, r"# ps round's slack \(compute a step hides, ms; \+tick the "
                                     r"step then grows by\) at 8:\S+ 32:\S+ .* 524288:\S+\n")
        self.assertRegex(result.out, r"# ps round of 524288 bytes: measured \S+ s, two messages "
                                     r"of the line \S+ s")
        self.assertIn("# async cycle (windows of up to 4 gradients), all pairs: alpha = ",
                      result.out)
        self.assertRegex(result.out, r"# async cycle of 524288 bytes: \S+ s a gradient with the "
                                     r"worker idle, \S+ s busy as long \(the messages' CPU on "
                                     r"the worker: \S+ s\)")
        # The output exists: --force or nothing, as every tool.
        again = self.bench(*FIT, "--comm-model", self.path("cm.h5"))
        self.assertEqual(again.rc, 2, msg=repr(again))
        self.assertIn("--force", again.err)
        self.assertUsageError(self.bench("--comm-model", self.path("x.h5")),
                              "--comm-model needs --fit", tool="mb-bench-bandwidth")
        alone = mbtest.run([mbtest.tool("mb-bench-bandwidth"), *FIT], cwd=self.dir, env=self.env)
        self.assertUsageError(alone, "--fit times messages between ranks: it needs at least 2",
                              tool="mb-bench-bandwidth")
        self.assertUsageError(self.bench("--fit", "-b", "8", "-e", "8"),
                              "--fit needs at least two sizes", tool="mb-bench-bandwidth")
        self.assertUsageError(self.bench(*FIT, "--comm-model", self.path("r.h5"),
                                         "--min-r-squared", "1.5"),
                              "--min-r-squared: 1.5 is not an r^2 above 0 and at most 1",
                              tool="mb-bench-bandwidth")
        self.assertUsageError(self.bench(*FIT, "--min-r-squared", "0.5"),
                              "--min-r-squared needs --comm-model", tool="mb-bench-bandwidth")
        # The file records the bar it was written with (the default here).
        with h5py.File(self.path("cm.h5"), "r") as f:
            self.assertEqual(float(f.attrs["min_r_squared"]), 0.9)

        self.assertSucceeded(self.mb_dataset("synth", "toy", "--learnable", "--train", "200",
                                             "--test", "40", "-o", self.path("toy.h5")))
        # A file without the points and the stream (as written before they were kept): the line,
        # the same to the bit as its alpha and beta inline.
        shutil.copy(self.path("cm.h5"), self.path("line.h5"))
        with h5py.File(self.path("line.h5"), "r+") as f:
            for group in (f["pairs/0"], f["allreduce"]):
                del group.attrs["bytes"]
                del group.attrs["seconds"]
            del f["allreduce"].attrs["slack_seconds"]  # the busy passes came later still
            del f["allreduce"].attrs["tick_seconds"]
            del f["stream"]
            del f["async"]
            del f["ps_round"]
        inline = f"{alpha!r},{beta!r}"
        for comm in ("ps", "allreduce"):
            self.assertSucceeded(self.train(3, "--comm", comm, "--steps", "4", "--comm-model",
                                            self.path("line.h5"), "--log", f"{comm}-file.h5"))
            self.assertSucceeded(self.train(3, "--comm", comm, "--steps", "4", "--comm-model",
                                            inline, "--log", f"{comm}-inline.h5"))
            with h5py.File(self.path(f"{comm}-file.h5"), "r") as a, \
                    h5py.File(self.path(f"{comm}-inline.h5"), "r") as b:
                for table, name in (("steps", "step_time"), ("steps", "time"),
                                    ("workers", "send_time"), ("workers", "wait_time"),
                                    ("workers", "recv_time")):
                    self.assertTrue(np.array_equal(a[table][name][...], b[table][name][...]),
                                    msg=f"{comm}: {table}/{name}")
                self.assertEqual(mbtest.text_attrs(a)["comm_model"],
                                 mbtest.text_attrs(b)["comm_model"])
                config = json.loads(mbtest.text_attrs(a)["config"])
                self.assertEqual(config["comm_model"], self.path("line.h5"))
                self.assertEqual(config["comm_model_values"], f"{alpha:.17g},{beta:.17g}")

    def test_ps_messages_by_the_line_async_by_its_cycle_and_older_files_as_before(self):
        # The file holds the ping-pong's points, but a ps message is priced by the fitted line
        # (comm_model.hpp says why) where the run is not of the ps round's ranks, and a ps step
        # of its 2 ranks by the measured round; async's gradients and parameters are priced by the async
        # cycle's points (the link's period of a gradient out and the parameters back); a file
        # without the cycle (written before it was measured) prices them by the stream's
        # points, one without the stream either by the line, as before.
        self.fitted()
        with h5py.File(self.path("cm.h5"), "r") as f:
            alpha, beta = float(f.attrs["alpha"]), float(f.attrs["beta"])
            sizes = [float(x) for x in f["pairs/0"].attrs["bytes"]]
            seconds = [float(x) for x in f["pairs/0"].attrs["seconds"]]
            stream_sizes = [float(x) for x in f["stream"].attrs["bytes"]]
            stream_seconds = [float(x) for x in f["stream"].attrs["seconds"]]
            cycle_sizes = [float(x) for x in f["async"].attrs["bytes"]]
            cycle_seconds = [float(x) for x in f["async"].attrs["seconds"]]
            round_sizes = [float(x) for x in f["ps_round"].attrs["bytes"]]
            round_seconds = [float(x) for x in f["ps_round"].attrs["seconds"]]
        shutil.copy(self.path("cm.h5"), self.path("stream.h5"))
        with h5py.File(self.path("stream.h5"), "r+") as f:
            del f["async"]
        shutil.copy(self.path("stream.h5"), self.path("old.h5"))
        with h5py.File(self.path("old.h5"), "r+") as f:
            del f["stream"]
        self.assertSucceeded(self.mb_dataset("synth", "toy", "--learnable", "--train", "200",
                                             "--test", "40", "-o", self.path("toy.h5")))
        runs = [("ps", ["--comm", "ps"], "cm.h5"), ("async", ["--comm", "ps", "--async"], "cm.h5"),
                ("async-stream", ["--comm", "ps", "--async"], "stream.h5"),
                ("async-old", ["--comm", "ps", "--async"], "old.h5")]
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            results = list(pool.map(lambda run: self.train(
                3, *run[1], "--steps", "4", "--comm-model", self.path(run[2]), "--log",
                f"{run[0]}.h5", quiet=False), runs))
            # One worker and its master: the ranks the round was measured with.
            round_run = self.train(2, "--comm", "ps", "--steps", "4", "--comm-model",
                                   self.path("cm.h5"), "--log", "ps-round.h5", quiet=False)
        self.assertSucceeded(round_run)
        self.assertIn("; ps round of 2 ranks interpolating 9 measured sizes, 8 B", round_run.err)
        with h5py.File(self.path("ps-round.h5"), "r") as log:
            config = json.loads(mbtest.text_attrs(log)["config"])
            self.assertIn(" ps_round 2=", config["comm_model_values"])
            size = 4 * config["parameters"]
            self.assertLess(size, round_sizes[-1])
            # Compute, then the round (half each way), plus the update (measured: rtol 1e-6).
            round_time = interpolated(round_sizes, round_seconds, size)
            self.assertGreater(abs(round_time - 2 * (alpha + beta * size)), 1e-9 * round_time)
            np.testing.assert_allclose(log["steps"]["step_time"][...],
                                       16 * 1e-4 + 2e-3 + round_time, rtol=1e-6)
            np.testing.assert_allclose(log["workers"]["send_time"][...], round_time, rtol=1e-12)
        for (name, _, file), result in zip(runs, results):
            self.assertSucceeded(result)
            self.assertIn(f"from {self.path(file)}", result.err)
            # The ps round of 2 ranks is described, and prices nothing in these runs of 3.
            self.assertNotIn("interpolating 9 measured sizes, 8 B", result.err.split(
                "streamed messages")[0].split("; ps round of 2 ranks")[0])
            self.assertEqual("; streamed messages interpolating 9 measured sizes, 8 B" in
                             result.err, file != "old.h5", msg=name)
            self.assertEqual("; async cycle interpolating 9 measured sizes, 8 B" in result.err,
                             file == "cm.h5", msg=name)
            with h5py.File(self.path(f"{name}.h5"), "r") as log:
                config = json.loads(mbtest.text_attrs(log)["config"])
                size = 4 * config["parameters"]
                message = alpha + beta * size
                values = config["comm_model_values"]
                self.assertTrue(values.startswith(f"{alpha:.17g},{beta:.17g}"), msg=values)
                # The line's values without points; the stream's and the cycle's with their own.
                self.assertNotIn(" points ", values.split(" stream=")[0].split(" allreduce")[0]
                                 .split(" ps_round")[0])
                self.assertIn(" ps_round 2=", values)
                self.assertEqual(" stream=" in values, file != "old.h5", msg=values)
                self.assertEqual(" async points " in values, file == "cm.h5", msg=values)
                # The points would have given another time: the line is what priced.
                self.assertGreater(abs(message - interpolated(sizes, seconds, size)),
                                   1e-9 * message, msg=name)
                streamed = interpolated(stream_sizes, stream_seconds, size)
                cycle = interpolated(cycle_sizes, cycle_seconds, size)
                # The gradient's size is between the measured ones: their interpolation.
                self.assertLess(size, stream_sizes[-1])
                if name == "async":
                    self.assertGreater(abs(cycle - streamed), 1e-9 * cycle)
                    np.testing.assert_allclose(log["workers"]["send_time"][...], cycle,
                                               rtol=1e-12, err_msg=name)
                elif name == "async-stream":
                    self.assertGreater(abs(message - streamed), 1e-9 * message)
                    np.testing.assert_allclose(log["workers"]["send_time"][...], streamed,
                                               rtol=1e-12, err_msg=name)
                elif name == "async-old":
                    np.testing.assert_allclose(log["workers"]["send_time"][...], message,
                                               rtol=1e-12, err_msg=name)
                else:
                    # Compute plus two messages (plus the master's update, measured: rtol 1e-6
                    # as e2e.test_virtual_clock).
                    np.testing.assert_allclose(log["steps"]["step_time"][...],
                                               16 * 1e-4 + 2e-3 + 2 * message, rtol=1e-6)

    def test_busy_passes_price_a_ps_step_as_the_round_then_whole_ticks(self):
        # A round measured at the gradient's own size with busy passes: a step whose compute
        # (3.6 ms by the compute model) fits in the slack takes the round, one whose compute
        # exceeds it the round and a tick; a file whose sizes miss the gradient's warns and
        # prices compute + round.
        self.fitted()
        self.assertSucceeded(self.mb_dataset("synth", "toy", "--learnable", "--train", "200",
                                             "--test", "40", "-o", self.path("toy.h5")))
        first = self.train(2, "--comm", "ps", "--steps", "1", "--comm-model",
                           self.path("cm.h5"), "--log", "size.h5")
        self.assertSucceeded(first)
        with h5py.File(self.path("size.h5"), "r") as log:
            size = 4 * json.loads(mbtest.text_attrs(log)["config"])["parameters"]
        measured, missed = [8, size, 4 * size], [8, 2 * size, 4 * size]
        ps = ["--comm", "ps"]
        allreduce = ["--comm", "allreduce", "--allreduce", "mpi"]
        # name: (group, sizes, slack, tick, the run's exchange); the round 20 ms at `size`.
        files = {"hides": ("ps_round", measured, [0, 5e-3, 0], [0, 4e-3, 0], ps),
                 "tick": ("ps_round", measured, [0, 2e-3, 0], [0, 4e-3, 0], ps),
                 "missed": ("ps_round", missed, [0, 2e-3, 0], [0, 4e-3, 0], ps),
                 "allreduce-hides": ("allreduce", measured, [0, 5e-3, 0], [0, 4e-3, 0],
                                     allreduce)}
        seconds = [1e-4, 0.02, 0.04]
        for name, (group_name, sizes, slack, tick, _) in files.items():
            shutil.copy(self.path("cm.h5"), self.path(f"{name}.h5"))
            with h5py.File(self.path(f"{name}.h5"), "r+") as f:
                group = f[group_name]
                for key, values in (("bytes", sizes), ("seconds", seconds),
                                    ("slack_seconds", slack), ("tick_seconds", tick)):
                    group.attrs[key] = np.array(values, dtype=np.float64)
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            results = dict(zip(files, pool.map(lambda name: self.train(
                2, *files[name][4], "--steps", "4", "--comm-model", self.path(f"{name}.h5"),
                "--log", f"run-{name}.h5", quiet=False), files)))
        compute = 16 * 1e-4 + 2e-3
        # The step, and the send a worker logs (from its compute's end, to the step's end at
        # most), per file; the update (free with a compute model) hides in the slack.
        expected = {"hides": (0.02, 0.02 - compute), "tick": (0.024, 0.02),
                    "allreduce-hides": (0.02, 0.02 - compute)}
        for name, result in results.items():
            self.assertSucceeded(result)
            self.assertIn("some sizes in ticks (busy passes)", result.err, msg=name)
            with h5py.File(self.path(f"run-{name}.h5"), "r") as log:
                values = json.loads(mbtest.text_attrs(log)["config"])["comm_model_values"]
                self.assertIn(f" busy 8:0:0 {size}:" if name != "missed" else " busy 8:0:0 ",
                              values, msg=name)
                steps = log["steps"]["step_time"][...]
                sends = log["workers"]["send_time"][...]
            if name == "missed":
                sizes = files[name][1]
                self.assertIn(f"its ps round moves in ticks, but not measured at the gradient's "
                              f"{size} bytes", result.err)
                self.assertIn(f"--also-bytes {size}", result.err)
                np.testing.assert_allclose(steps, compute + interpolated(sizes, seconds, size),
                                           rtol=1e-6)
            else:
                self.assertNotIn("not measured at the gradient's", result.err, msg=name)
                np.testing.assert_allclose(steps, expected[name][0], rtol=1e-12, err_msg=name)
                np.testing.assert_allclose(sends, expected[name][1], rtol=1e-6, err_msg=name)

    def test_the_fitted_allreduce_times_an_mpi_allreduce_step_of_its_ranks(self):
        result = self.fitted()
        self.assertIn("# allreduce of 2 ranks: alpha = ", result.out)
        self.assertRegex(result.out, r"# allreduce of 524288 bytes: measured \S+ s, fitted \S+ "
                                     r"s, a ring of 2 messages \S+ s")
        with h5py.File(self.path("cm.h5"), "r") as f:
            alpha, beta = float(f.attrs["alpha"]), float(f.attrs["beta"])
            allreduce = f["allreduce"]
            self.assertEqual(int(allreduce.attrs["ranks"]), 2)
            self.assertEqual(len(allreduce.attrs["seconds"]), 9)
            self.assertGreaterEqual(float(allreduce.attrs["r_squared"]), 0.9)
            allreduce_sizes = [float(x) for x in allreduce.attrs["bytes"]]
            allreduce_seconds = [float(x) for x in allreduce.attrs["seconds"]]
        self.assertSucceeded(self.mb_dataset("synth", "toy", "--learnable", "--train", "200",
                                             "--test", "40", "-o", self.path("toy.h5")))
        mpi = ["--comm", "allreduce", "--allreduce", "mpi", "--steps", "4", "--comm-model",
               self.path("cm.h5")]
        # Two ranks, as measured: each step is the compute then the fitted allreduce. Three: the
        # fit is of another world, so a ring of the message model's messages, with a warning.
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            two, three = pool.map(lambda run: self.train(*run, quiet=False), [
                (2, *mpi, "--log", "two.h5"), (3, *mpi, "--log", "three.h5")])
        self.assertSucceeded(two)
        self.assertSucceeded(three)
        self.assertNotIn("ring", two.err)
        self.assertIn(f"--comm-model {self.path('cm.h5')}: its allreduce was measured on 2 "
                      "ranks, this run has 3; timing the allreduce as a ring", three.err)
        compute = 16 * 1e-4 + 2e-3
        for name, ranks, fitted in (("two.h5", 2, True), ("three.h5", 3, False)):
            with h5py.File(self.path(name), "r") as log:
                attrs = mbtest.text_attrs(log)
                parameters = json.loads(attrs["config"])["parameters"]
                bytes_ = 4 * parameters
                # The allreduce's measured points, or a ring of messages priced by the line.
                exchange = (interpolated(allreduce_sizes, allreduce_seconds, bytes_) if fitted
                            else 2 * (ranks - 1) * (alpha + beta * bytes_ / ranks))
                # (plus the update, measured: rtol 1e-6 as above)
                np.testing.assert_allclose(log["steps"]["step_time"][...], compute + exchange,
                                           rtol=1e-6, err_msg=name)
                np.testing.assert_allclose(log["workers"]["send_time"][...], exchange,
                                           rtol=1e-12, err_msg=name)
                self.assertEqual(" allreduce 2=" in attrs["comm_model"], fitted, msg=name)
                self.assertEqual("allreduce of 2 ranks interpolating 9 measured sizes" in
                                 (two if fitted else three).err, fitted, msg=name)
                config = json.loads(attrs["config"])
                self.assertEqual(" allreduce 2=" in config["comm_model_values"], fitted,
                                 msg=name)

    def test_resume_with_another_model_is_refused(self):
        self.fitted()
        self.assertSucceeded(self.mb_dataset("synth", "toy", "--learnable", "--train", "200",
                                             "--test", "40", "-o", self.path("toy.h5")))
        with h5py.File(self.path("cm.h5"), "r") as f:
            alpha, beta = float(f.attrs["alpha"]), float(f.attrs["beta"])
        common = ["--comm", "ps", "--checkpoint", "ck.h5"]
        self.assertSucceeded(self.train(2, *common, "--steps", "2", "--comm-model",
                                        self.path("cm.h5")))
        # The same file continues (a ps run: its messages are priced by the file's line).
        self.assertSucceeded(self.train(2, *common, "--steps", "3", "--resume", "ck.h5",
                                        "--comm-model", self.path("cm.h5")))
        # Another alpha even where the fit's is 0 (a loaded machine's fit may pass the origin).
        other = alpha * 2 + 1e-6
        refused = self.train(2, *common, "--steps", "4", "--resume", "ck.h5", "--comm-model",
                             f"{other!r},{beta!r}")
        self.assertEqual(refused.rc, 2, msg=repr(refused))
        self.assertIn(f"--comm-model {other!r},{beta!r}: ck.h5 was trained with --comm-model",
                      refused.err)

    def test_bad_model_files_are_refused_naming_them(self):
        self.fitted()
        self.assertSucceeded(self.mb_dataset("synth", "toy", "--learnable", "--train", "200",
                                             "--test", "40", "-o", self.path("toy.h5")))

        def damaged(name, change):
            shutil.copy(self.path("cm.h5"), self.path(name))
            with h5py.File(self.path(name), "r+") as f:
                change(f)

        def nan_alpha(f):
            f.attrs["alpha"] = float("nan")

        def negative_beta(f):
            f.attrs["beta"] = -1e-9

        def no_pairs(f):
            del f["pairs"]

        def per_pair(f):
            f.attrs["per_pair"] = 1

        cases = [("nan.h5", nan_alpha, "nan.h5:/: 'alpha' is not finite"),
                 ("negative.h5", negative_beta, "beta = -1e-09 s per byte is negative"),
                 ("nopairs.h5", no_pairs, "nopairs.h5"),
                 ("pairs.h5", per_pair, "pairs.h5: a model per pair of 2 ranks, for a run of 3")]
        for name, change, _ in cases:
            damaged(name, change)
        # Each refused before training: run at once, checked in order.
        runs = [["--comm-model", self.path(name)] for name, _, _ in cases]
        runs.append(["--comm-model", "nosuch.h5"])
        with concurrent.futures.ThreadPoolExecutor(len(runs)) as pool:
            *results, missing = pool.map(
                lambda run: self.train(3, "--comm", "ps", "--steps", "2", *run), runs)
        for (name, change, text), result in zip(cases, results):
            self.assertEqual(result.rc, 3, msg=repr(result))
            # Every rank says the same, in one line each (mpirun adds its own about the job).
            lines = [line for line in result.err.splitlines() if "error:" in line]
            self.assertTrue(lines, msg=repr(result))
            for line in lines:
                self.assertIn(text, line, msg=repr(result))
        self.assertEqual(missing.rc, 2, msg=repr(missing))
        self.assertIn("'nosuch.h5' is not ALPHA,BETA", missing.err)


if __name__ == "__main__":
    mbtest.main()
