"""--induce trace:FILE replays each worker's delay at each step from a file (CSV worker,step,
seconds or the HDF5 delay trace), and mb-dataset import-trace makes that HDF5 from a CSV or from
an Alibaba PAI mini-batch-time job file.

The bar: on the virtual clock with a compute model of zero and free messages, an FMB run's step
times are the trace's own per-step maximum over the workers, exactly (the trace's values are
multiples of 1/64 s, which the workers' float reports carry without rounding); AMB's micro-batches
are what the delays leave of the time limit. The trace wraps (steps and workers), --trace-scale
multiplies it, a resumed run continues it to the bit (test_emulate.py: --emulate N replays it with
the bits of mpirun with N workers), and every malformed file is refused with one line naming the
file and the line."""

import json
import shutil

import h5py
import numpy as np

import mbtest

MPIRUN = shutil.which("mpirun")

COMMON = ["--model", "mlp", "--hidden", "16", "--optimizer", "momentum", "--lr", "0.05",
          "--threads", "1", "--batch-size", "16", "--clock", "virtual", "--comm-model", "0,0",
          "-q"]
ZERO_COMPUTE = ["--compute-model", "0,0"]
STEPS = 12
# The trace: 2 workers x 5 steps of k/64 s; runs of 3 workers and 12 steps wrap both ways.
TRACE_WORKERS, TRACE_STEPS = 2, 5


def trace_table(seed=5):
    rng = np.random.default_rng(seed)
    return rng.integers(0, 33, size=(TRACE_STEPS, TRACE_WORKERS)) / 64.0


def write_csv(path, table, shuffle_seed=1):
    """The CSV layout, rows in a shuffled order (the format takes them in any order)."""
    cells = [(w, s) for s in range(table.shape[0]) for w in range(table.shape[1])]
    order = np.random.default_rng(shuffle_seed).permutation(len(cells))
    with open(path, "w") as out:
        out.write("worker,step,seconds\n")
        for i in order:
            w, s = cells[i]
            out.write(f"{w},{s},{table[s, w]!r}\n")


def replayed(table, steps, workers, scale=1.0):
    """What worker w waits at step s: the cell [s mod S][w mod W], times the scale."""
    return np.array([[table[s % table.shape[0], w % table.shape[1]] * scale
                      for w in range(workers)] for s in range(steps)])


class InduceTrace(mbtest.ToolTestCase):
    def setUp(self):
        super().setUp()
        self.assertSucceeded(self.mb_dataset("synth", "toy", "--learnable", "--train", "400",
                                             "--test", "90", "--seed", "3", "-o",
                                             self.path("toy.h5")))
        self.table = trace_table()
        write_csv(self.path("trace.csv"), self.table)

    def run_tool(self, tool, args, ranks=0):
        command = [mbtest.tool(tool), "--data", "toy.h5", *COMMON, *args]
        if ranks > 0:
            command = [MPIRUN, "--oversubscribe", "-n", str(ranks), *command]
        return mbtest.run(command, cwd=self.dir, env=self.env, timeout=300)

    def train(self, name, args, tool="mb-train-fmb", ranks=0):
        return self.train_toy(tool, name, COMMON, args, ranks)

    def log(self, name):
        with h5py.File(self.path(f"{name}-log.h5"), "r") as f:
            return {key: f[key][...] for key in
                    ("steps/step_time", "workers/sleep_time", "workers/compute_time",
                     "workers/samples", "workers/rank")}

    def test_fmb_step_times_are_the_traces_per_step_maximum(self):
        for comm in ("ps", "allreduce"):
            with self.subTest(comm=comm):
                self.train(comm, [*ZERO_COMPUTE, "--comm", comm, "--emulate", "3", "--steps",
                                  str(STEPS), "--induce", "trace:trace.csv"])
                log = self.log(comm)
                delays = replayed(self.table, STEPS, 3)
                # Worker w of step s waited the trace's cell (worker 2 replays worker 0).
                self.assertEqual(log["workers/sleep_time"].reshape(STEPS, 3).tolist(),
                                 delays.tolist())
                self.assertEqual(log["workers/compute_time"].tolist(), [0.0] * (STEPS * 3))
                # The bar: the emulated step is the trace's maximum over the workers, exactly.
                self.assertEqual(log["steps/step_time"].tolist(), delays.max(axis=1).tolist())

    def test_trace_scale_multiplies_every_delay(self):
        self.train("scaled", [*ZERO_COMPUTE, "--emulate", "3", "--steps", str(STEPS),
                              "--induce", "trace:trace.csv", "--trace-scale", "2.5"])
        delays = replayed(self.table, STEPS, 3, scale=2.5)
        self.assertEqual(self.log("scaled")["steps/step_time"].tolist(),
                         delays.max(axis=1).tolist())
        with h5py.File(self.path("scaled-log.h5"), "r") as f:
            config = json.loads(mbtest.text_attrs(f)["config"])
        self.assertEqual(config["trace_scale"], 2.5)
        self.assertEqual(config["induce"], "trace:trace.csv")
        self.assertEqual((config["induce_trace"]["workers"], config["induce_trace"]["steps"]),
                         (TRACE_WORKERS, TRACE_STEPS))
        self.assertEqual(len(config["induce_trace"]["sha256"]), 64)

    def test_amb_does_the_micro_batches_the_delays_leave_time_for(self):
        # 4 micro-batches of 8 samples at 1/16 s each, a limit of 0.25 s: a worker delayed d
        # starts its j-th micro-batch (j > 1) while d + (j - 1) / 16 < 0.25.
        limit, cost, partitions = 0.25, 1 / 16, 4
        self.train("amb", ["--compute-model", f"0,{cost!r}", "--emulate", "3", "--steps",
                           str(STEPS), "--batch-size", "32", "--drop-last", "--partitions", str(partitions),
                           "--time-limit", str(limit), "--induce", "trace:trace.csv"],
                   tool="mb-train-amb")
        log = self.log("amb")
        delays = replayed(self.table, STEPS, 3)
        done = np.ones_like(delays)
        for index, delay in np.ndenumerate(delays):
            while done[index] < partitions and delay + done[index] * cost < limit:
                done[index] += 1
        self.assertEqual(log["workers/samples"].reshape(STEPS, 3).tolist(),
                         (done * 8).astype(int).tolist())
        self.assertEqual(log["steps/step_time"].tolist(),
                         (delays + done * cost).max(axis=1).tolist())
        # The trace made some workers do fewer micro-batches than others.
        self.assertGreater(len(set(done.ravel().tolist())), 1)

    def test_the_hdf5_trace_replays_as_its_csv(self):
        self.assertSucceeded(self.mb_dataset("import-trace", "csv", "trace.csv", "-o",
                                             "trace.h5"))
        # A trace written by hand with h5py in the documented layout reads too.
        with h5py.File(self.path("hand.h5"), "w") as f:
            f.attrs["format"] = "mbkit-delay-trace"
            f.attrs["format_version"] = 1
            f.create_dataset("trace/seconds", data=self.table)
        for name in ("csv", "h5", "hand"):
            source = {"csv": "trace.csv", "h5": "trace.h5", "hand": "hand.h5"}[name]
            self.train(f"run-{name}", [*ZERO_COMPUTE, "--emulate", "3", "--steps", str(STEPS),
                              "--induce", f"trace:{source}"])
        for name in ("h5", "hand"):
            for key, values in self.log(f"run-{name}").items():
                self.assertEqual(values.tobytes(), self.log("run-csv")[key].tobytes(), msg=key)
        digests = []
        for name in ("csv", "h5", "hand"):
            with h5py.File(self.path(f"run-{name}-log.h5"), "r") as f:
                digests.append(json.loads(mbtest.text_attrs(f)["config"])["induce_trace"]["sha256"])
        self.assertEqual(len(set(digests)), 1, msg="the same values have the same digest")

    def test_a_resumed_run_continues_the_trace(self):
        args = ["--compute-model", "0.001,0.002", "--emulate", "3", "--induce", "trace:trace.csv"]
        self.train("straight", [*args, "--steps", str(STEPS)])
        self.train("resumed", [*args, "--steps", "7"])
        self.train("resumed", [*args, "--steps", str(STEPS), "--resume", "resumed.h5"])
        straight, resumed = self.log("straight"), self.log("resumed")
        for key in straight:
            self.assertEqual(resumed[key].tobytes(), straight[key].tobytes(), msg=key)
        with h5py.File(self.path("straight.h5"), "r") as a, \
                h5py.File(self.path("resumed.h5"), "r") as b:
            a.visititems(lambda name, item: self.assertEqual(
                item[...].tobytes(), b[name][...].tobytes(), msg=name)
                if isinstance(item, h5py.Dataset) else None)

    def test_a_resume_with_another_trace_or_scale_is_refused(self):
        args = [*ZERO_COMPUTE, "--emulate", "3", "--steps", "4"]
        self.train("first", [*args, "--induce", "trace:trace.csv"])
        changed = self.table.copy()
        changed[1, 1] += 1 / 64
        write_csv(self.path("changed.csv"), changed)
        write_csv(self.path("same.csv"), self.table, shuffle_seed=9)
        resume = ["--log", "first-log.h5", "--checkpoint", "first.h5", "--resume", "first.h5",
                  "--steps", "6"]
        cases = [
            (["--induce", "trace:changed.csv"], "--induce trace:changed.csv (values sha256"),
            (["--induce", "trace:trace.csv", "--trace-scale", "2"], "--trace-scale 2"),
            (["--induce", "niagara"], "--induce niagara (no trace)"),
        ]
        for extra, named in cases:
            with self.subTest(extra=extra):
                result = self.run_tool("mb-train-fmb", [*args, *extra, *resume])
                self.assertUsageError(result, named)
                self.assertIn("first.h5 was trained with --induce trace:trace.csv"
                              if "--trace-scale" not in extra else "--trace-scale 1",
                              result.err)
        # The same values under another name and row order resume.
        self.assertSucceeded(self.run_tool("mb-train-fmb",
                                           [*args, "--induce", "trace:same.csv", *resume]))

    def test_mb_plot_draws_a_trace_runs_log(self):
        if shutil.which("gnuplot") is None:
            self.skipTest("gnuplot is not installed")
        self.train("plotted", [*ZERO_COMPUTE, "--emulate", "3", "--steps", "4", "--induce",
                               "trace:trace.csv"])
        plot = [mbtest.tool("mb-plot"), "plotted-log.h5"]
        # The histograms, the delays' included; the straggler distribution is left out, said why.
        result = mbtest.run([*plot, "--type", "panel-hist", "-o", "hist.png"], cwd=self.dir,
                            env=self.env)
        self.assertSucceeded(result)
        self.assertIn("replayed a trace", result.err)
        result = mbtest.run([*plot, "--type", "straggler-dist", "-o", "dist.png"], cwd=self.dir,
                            env=self.env)
        self.assertFailsWith(result, 3, "plotted-log.h5: the run replayed a trace (config induce "
                                        "is trace:trace.csv)")

    def test_dbsl_workers_replay_their_column_round_after_round(self):
        if MPIRUN is None:
            self.skipTest("mpirun is not installed")
        self.train("dbsl", ["--compute-model", "0.001,0.002", "--steps", "6", "--base-batch",
                            "16", "--induce", "trace:trace.csv"], tool="mb-train-dbsl", ranks=4)
        log = self.log("dbsl")
        for rank in (1, 2, 3):
            with self.subTest(rank=rank):
                mine = log["workers/sleep_time"][log["workers/rank"] == rank].tolist()
                self.assertGreater(len(mine), 0)
                self.assertEqual(mine, replayed(self.table, len(mine), 3)[:, rank - 1].tolist())

    def test_bad_trace_files_are_refused_naming_file_and_line(self):
        def write(name, text):
            with open(self.path(name), "w") as out:
                out.write(text)
        header = "worker,step,seconds\n"
        cases = [
            ("header.csv", "worker,seconds,step\n0,0,1\n", "header.csv:1: the header is"),
            ("empty.csv", "", "empty.csv: empty"),
            ("norows.csv", header, "norows.csv: no rows after the header"),
            ("gap.csv", header + "0,0,1\n1,0,1\n0,1,1\n", "gap.csv: no row for worker 1 step 1"),
            ("dup.csv", header + "0,0,1\n1,0,1\n0,0,2\n",
             "dup.csv:4: repeats worker 0 step 0 of line 2"),
            ("negative.csv", header + "0,0,1\n0,1,-0.5\n", "negative.csv:3: seconds -0.5 is negative"),
            ("nan.csv", header + "0,0,nan\n", "nan.csv:2: seconds is not a number (NaN)"),
            ("inf.csv", header + "0,0,1\n0,1,inf\n", "inf.csv:3: seconds is infinite"),
            ("word.csv", header + "0,0,1\n0,1,slow\n", "word.csv:3: seconds 'slow' is not a number"),
            ("fields.csv", header + "0,0\n", "fields.csv:2: '0,0' has 2 fields, not 3"),
            ("worker.csv", header + "-1,0,1\n", "worker.csv:2: worker '-1' is not a worker index"),
            ("step.csv", header + "0,1.5,1\n", "step.csv:2: step '1.5' is not a step index"),
        ]
        for name, text, named in cases:
            write(name, text)
        with h5py.File(self.path("nan.h5"), "w") as f:
            f.attrs["format"] = "mbkit-delay-trace"
            f.attrs["format_version"] = 1
            f.create_dataset("trace/seconds", data=np.array([[0.5, 1.0], [np.nan, 0.0]]))
        cases.append(("nan.h5", None, "nan.h5: /trace/seconds[1][0] (step 1, worker 0): is not a "
                                      "number (NaN)"))
        with h5py.File(self.path("other.h5"), "w") as f:
            f.create_dataset("seconds", data=np.ones((2, 2)))
        cases.append(("other.h5", None, "other.h5: not a delay trace"))
        cases.append(("missing.csv", None, "missing.csv"))
        for name, _, named in cases:
            with self.subTest(file=name):
                result = self.run_tool("mb-train-fmb", [*ZERO_COMPUTE, "--emulate", "2",
                                                        "--steps", "2", "--induce",
                                                        f"trace:{name}"])
                self.assertFailsWith(result, 3, named)
                self.assertNoStrayFiles()
            with self.subTest(file=name, tool="mb-dataset import-trace"):
                result = self.mb_dataset("import-trace", "csv", name, "-o", "out.h5")
                if name.endswith(".h5"):  # import-trace csv reads CSV only
                    self.assertFailsWith(result, 3, f"{name}:1: the header is '?HDF")
                else:
                    self.assertFailsWith(result, 3, named)
                self.assertFalse(mbtest.os.path.exists(self.path("out.h5")))

    def test_bad_trace_options_are_usage_errors(self):
        cases = [
            (["--induce", "trace:"], "--induce trace: names no file"),
            (["--induce", "trace:trace.csv", "--trace-scale", "-1"], "--trace-scale -1"),
            (["--induce", "trace:trace.csv", "--trace-scale", "inf"], "--trace-scale inf"),
            (["--induce", "niagara", "--trace-scale", "2"], "--trace-scale needs --induce trace"),
        ]
        for extra, named in cases:
            with self.subTest(extra=extra):
                result = self.run_tool("mb-train-fmb", [*ZERO_COMPUTE, "--emulate", "2",
                                                        "--steps", "2", *extra])
                self.assertFailsWith(result, 2, named)
        for tool, needed in (("mb-train-amb", ["--time-limit", "1", "--partitions", "2"]),
                             ("mb-train-dbsl", ["--base-batch", "16"])):
            with self.subTest(tool=tool):
                result = self.run_tool(tool, [*needed, "--steps", "2", "--induce",
                                              "trace:gone.csv"])
                self.assertFailsWith(result, 3, "gone.csv")


class ImportPai(mbtest.ToolTestCase):
    """A small file in the layout of PAI's job_N_norm.csv: pandas' unnamed index column, then
    worker, gpu, time (every 10 iterations from 1) and batch_time_norm."""

    def write_pai(self, name, times, rows=None):
        lines = [",worker,gpu,time,batch_time_norm"]
        index = 0
        for i, per_worker in enumerate(times):
            for worker, value in enumerate(per_worker):
                lines.append(f"{index},{worker},25,{1 + 10 * i},{value}")
                index += 1
        if rows is not None:
            lines = rows(lines)
        with open(self.path(name), "w") as out:
            out.write("\n".join(lines) + "\n")

    def seconds(self, name):
        with h5py.File(self.path(name), "r") as f:
            self.assertEqual(mbtest.text_attrs(f)["format"], "mbkit-delay-trace")
            return f["trace/seconds"][...], mbtest.text_attrs(f["trace"])["source"]

    def test_times_become_delays_over_the_iterations_fastest_worker(self):
        times = np.array([[476, 509, 468], [476, 509, 490], [484, 1000, 477], [420, 433, 408]])
        # Rows in another order than the file's: by worker, then iteration.
        self.write_pai("job.csv", times,
                       rows=lambda lines: [lines[0], *sorted(lines[1:], key=lambda l: (
                           int(l.split(",")[1]), -int(l.split(",")[3])))])
        self.assertSucceeded(self.mb_dataset("import-trace", "pai", "job.csv", "-o", "job.h5"))
        seconds, source = self.seconds("job.h5")
        expected = (times - times.min(axis=1, keepdims=True)) / 1000.0
        self.assertEqual(seconds.tolist(), expected.tolist())
        self.assertIn("iterations 1..31", source)
        self.assertSucceeded(self.mb_dataset("import-trace", "pai", "job.csv", "-o", "whole.h5",
                                             "--whole"))
        self.assertEqual(self.seconds("whole.h5")[0].tolist(), (times / 1000.0).tolist())
        # The imported trace drives a run: worker 1's straggling iteration is step 2's time.
        self.assertSucceeded(self.mb_dataset("synth", "toy", "--learnable", "--train", "200",
                                             "--test", "30", "-o", "toy.h5"))
        result = mbtest.run([mbtest.tool("mb-train-fmb"), "--data", "toy.h5", *COMMON,
                             *ZERO_COMPUTE, "--emulate", "3", "--steps", "4", "--induce",
                             "trace:job.h5", "--trace-scale", "2", "--log", "log.h5"],
                            cwd=self.dir, env=self.env)
        self.assertSucceeded(result)
        with h5py.File(self.path("log.h5"), "r") as f:
            step_times = f["steps/step_time"][...]
        self.assertEqual(step_times.astype(np.float32).tolist(),
                         (expected.max(axis=1) * 2).astype(np.float32).tolist())

    def test_bad_pai_files_are_refused_naming_the_line(self):
        times = [[476, 509], [476, 509]]
        cases = [
            ("nocolumn.csv", lambda l: [",worker,gpu,iteration,batch_time_norm", *l[1:]],
             "nocolumn.csv:1: the header ',worker,gpu,iteration,batch_time_norm' has no column "
             "time"),
            ("gap.csv", lambda l: l[:-1], "gap.csv: no row for worker 1 time 11"),
            ("dup.csv", lambda l: [*l, "9,0,25,1,400"], "dup.csv:6: repeats worker 0 time 1 of "
                                                        "line 2"),
            ("neg.csv", lambda l: [*l[:2], "1,1,25,1,-3", *l[3:]],
             "neg.csv:3: batch_time_norm -3 is negative"),
            ("short.csv", lambda l: [*l[:2], "1,1,25", *l[3:]], "short.csv:3: has 3 fields"),
        ]
        for name, rows, named in cases:
            with self.subTest(file=name):
                self.write_pai(name, times, rows)
                result = self.mb_dataset("import-trace", "pai", name, "-o", "out.h5")
                self.assertFailsWith(result, 3, named)
                self.assertNoStrayFiles()
        result = self.mb_dataset("import-trace", "alibaba", "x.csv", "-o", "out.h5")
        self.assertFailsWith(result, 2, "unknown format 'alibaba' (known: pai, csv)")
        self.write_pai("ok.csv", times)
        self.assertSucceeded(self.mb_dataset("import-trace", "pai", "ok.csv", "-o", "out.h5"))
        result = self.mb_dataset("import-trace", "pai", "ok.csv", "-o", "out.h5")
        self.assertFailsWith(result, 2, "use --force")


if __name__ == "__main__":
    mbtest.main()
