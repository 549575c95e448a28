"""mb-plot end to end: every figure type drawn from real logs (a single-process run, one under
mpirun with --comm ps and induced stragglers, an asynchronous one, an AMB run on the virtual
clock, allreduce runs for scaling), valid PNG, SVG and PDF files, labels, CSV and --script
outputs, and the failures: a log lacking what a type needs, gnuplot missing or failing, an
existing output, bad options. A failure writes nothing and leaves no temporaries."""

import concurrent.futures
import csv
import io
import os
import shutil
import stat
import struct
import tempfile
import unittest
import xml.etree.ElementTree as ET

import h5py

import mbtest

MPIRUN = shutil.which("mpirun")
GNUPLOT = shutil.which("gnuplot")
# One pane is 4.5 x 3.2 inches, drawn at 150 dots per inch.
PANE = (675, 480)


def png_size(path):
    with open(path, "rb") as f:
        head = f.read(24)
    assert head[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    assert head[12:16] == b"IHDR"
    return struct.unpack(">II", head[16:24])


@unittest.skipIf(GNUPLOT is None, "gnuplot (gnuplot-nox) is required")
class Plot(mbtest.ToolTestCase):
    @classmethod
    def setUpClass(cls):
        assert MPIRUN, "mpirun (openmpi-bin) is required"
        cls.logs = tempfile.mkdtemp(prefix="mbkit-e2e-plot-")
        env = mbtest.clean_env({"TMPDIR": cls.logs})

        def run(*args):
            result = mbtest.run([str(a) for a in args], cwd=cls.logs, env=env, timeout=300)
            assert result.rc == 0, repr(result)

        toy = cls.log("toy.h5")
        run(mbtest.tool("mb-dataset"), "synth", "toy", "--learnable", "--train", "600", "--test",
            "100", "-o", toy)
        common = ["--data", toy, "--model", "mlp", "--hidden", "16", "--threads", "1", "-q",
                  "--eval-every", "5"]
        fmb = mbtest.tool("mb-train-fmb")
        mpi = [MPIRUN, "--oversubscribe", "-n"]
        # Independent toy runs, none timed against another: three at a time.
        amb = mbtest.tool("mb-train-amb")
        runs = [
            (fmb, *common, "--steps", "20", "--log", cls.log("single.h5")),
            (fmb, *common, "--steps", "20", "--batch-size", "32", "--log",
             cls.log("single-b32.h5")),
            # single.h5's emulation, for clock-compare.
            (fmb, *common, "--steps", "20", "--clock", "virtual", "--log",
             cls.log("single-virtual.h5")),
            (*mpi, "3", fmb, *common, "--steps", "12", "--comm", "ps", "--induce", "cedar",
             "--log", cls.log("ps.h5")),
            (*mpi, "3", fmb, *common, "--steps", "20", "--comm", "ps", "--async", "--log",
             cls.log("async.h5")),
            (*mpi, "3", fmb, *common, "--steps", "20", "--comm", "allreduce", "--log",
             cls.log("ar3.h5")),
            (*mpi, "3", amb, *common, "--steps", "12", "--time-limit", "0.002", "--partitions",
             "4", "--induce", "niagara", "--clock", "virtual", "--log", cls.log("amb.h5")),
            # A log that keeps per-step quantiles over the workers instead of their rows, and
            # one with a sample of them beside (the quantile figures' logs).
            (*mpi, "3", fmb, *common, "--steps", "12", "--comm", "ps", "--induce", "cedar",
             "--worker-table", "summary", "--log", cls.log("ps-summary.h5")),
            (*mpi, "4", fmb, *common, "--steps", "12", "--comm", "ps", "--induce", "cedar",
             "--worker-table", "sample:1", "--log", cls.log("ps-sample.h5")),
        ]
        with concurrent.futures.ThreadPoolExecutor(3) as pool:
            list(pool.map(lambda args: run(*args), runs))
        # A log from before micro-batches were logged.
        shutil.copy(cls.log("ps.h5"), cls.log("old.h5"))
        with h5py.File(cls.log("old.h5"), "r+") as f:
            del f["workers/micro_batches"]

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.logs, ignore_errors=True)

    @classmethod
    def log(cls, name):
        return os.path.join(cls.logs, name)

    def plot(self, *args, env=None):
        return mbtest.run([mbtest.tool("mb-plot"), *[str(a) for a in args]], cwd=self.dir,
                          env=env or self.env)

    def assertNoLeftovers(self):
        """No temporaries beside the outputs, no private directories of gnuplot's data."""
        self.assertNoStrayFiles()
        self.assertEqual([n for n in os.listdir(self.dir) if n.startswith("mb-plot-")], [])

    def read_csv(self, text):
        return list(csv.DictReader(io.StringIO(text)))

    # -- every type ---------------------------------------------------------------------------

    def types(self):
        result = self.plot("--list-types")
        self.assertSucceeded(result)
        rows = [line.split() for line in result.out.splitlines() if not line.startswith("#")]
        return {row[0]: row[1] for row in rows}

    def test_every_type_draws_a_png(self):
        types = self.types()
        for name in ("loss-vs-step", "accuracy-vs-time", "cumsum-vs-step", "throughput-vs-time",
                     "compute-time", "batch-size", "wait-time", "send-time", "staleness",
                     "master-batch-size", "micro-batches", "straggler-dist", "scaling", "panel",
                     "panel-hist"):
            self.assertIn(name, types)
        logs = {
            "curve": ["single.h5", "ps.h5", "async.h5"],
            "histogram": ["ps.h5", "async.h5", "amb.h5"],
            "distribution": ["ps.h5", "amb.h5"],
            "scaling": ["single.h5", "ar3.h5", "ps.h5"],
            "panel": ["single.h5", "ps.h5", "amb.h5"],
            "comparison": ["single.h5", "single-virtual.h5"],
        }
        panes = {"scaling": (3, 1), "clock-compare": (2, 1), "panel": (3, 3), "panel-hist": (3, 4), "panel-all": (3, 9),
                 "epoch-curves": (2, 1)}
        # Benchmark types are drawn from the benchmark tools' files: tests/e2e/test_bench_*.py.
        drawn = [name for name, kind in types.items() if kind != "benchmark"]

        def draw(name):
            names = (["ps-summary.h5", "ps-sample.h5"] if name.endswith("-quantiles")
                     else logs[types[name]])
            return self.plot(*[self.log(n) for n in names], "--type", name, "-o",
                             self.path(f"{name}.png"))
        # Each figure is its own mb-plot and gnuplot: drawn at once, checked in order.
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            results = list(pool.map(draw, drawn))
        for name, result in zip(drawn, results):
            with self.subTest(type=name):
                out = self.path(f"{name}.png")
                self.assertSucceeded(result)
                columns, rows = panes.get(name, (1, 1))
                self.assertEqual(png_size(out), (PANE[0] * columns, PANE[1] * rows))
                self.assertIn(f"wrote {out}", result.err)
        self.assertNoLeftovers()

    def test_formats_follow_the_extension(self):
        for name in ("fig.svg", "fig.pdf", "fig.PNG"):
            result = self.plot(self.log("single.h5"), self.log("ps.h5"), "--type", "panel", "-o",
                               self.path(name), "-q")
            self.assertSucceeded(result)
            self.assertEqual(result.err, "")
        root = ET.parse(self.path("fig.svg")).getroot()
        self.assertTrue(root.tag.endswith("svg"), root.tag)
        with open(self.path("fig.pdf"), "rb") as f:
            pdf = f.read()
        self.assertTrue(pdf.startswith(b"%PDF"))
        self.assertIn(b"%%EOF", pdf[-64:])
        png_size(self.path("fig.PNG"))
        result = self.plot(self.log("single.h5"), "-o", self.path("fig.jpg"))
        self.assertFailsWith(result, 2, "-o: ")
        self.assertFalse(os.path.exists(self.path("fig.jpg")))

    def test_size_and_fonts(self):
        out = self.path("small.png")
        self.assertSucceeded(self.plot(self.log("single.h5"), "--type", "loss-vs-step", "--size",
                                       "3.5,2.5", "--font-size", "8", "-o", out))
        self.assertEqual(png_size(out), (525, 375))

    # -- labels, CSV, script -----------------------------------------------------------------

    def test_legends_name_what_differs(self):
        result = self.plot(self.log("single.h5"), self.log("single-b32.h5"), "--type",
                           "accuracy-vs-step", "--csv", "-")
        self.assertSucceeded(result)
        rows = self.read_csv(result.out)
        self.assertEqual(sorted({r["series"] for r in rows}), ["batch 32", "batch 64"])
        self.assertEqual({r["x_label"] for r in rows}, {"Step"})
        self.assertEqual([r["x"] for r in rows if r["series"] == "batch 64"], ["5", "10", "15", "20"])
        with h5py.File(self.log("single.h5"), "r", swmr=True) as f:
            accuracy = [float(a) for a in f["eval/accuracy"][...]]
        for row, expected in zip([r for r in rows if r["series"] == "batch 64"], accuracy):
            self.assertAlmostEqual(float(row["y"]), 100 * expected, places=7)  # percent
        # Tool, stragglers, clock: the ps run, the async one and the AMB one.
        result = self.plot(self.log("ps.h5"), self.log("async.h5"), self.log("amb.h5"),
                           "--type", "loss-vs-step", "--csv", "-")
        series = sorted({r["series"] for r in self.read_csv(result.out)})
        self.assertEqual(series, ["AMB, sync, niagara, virtual clock",
                                  "FMB, async, no stragglers, wall clock",
                                  "FMB, sync, cedar, wall clock"])
        result = self.plot(self.log("single.h5"), self.log("ps.h5"), "--type", "loss-vs-step",
                           "--label", "one process", "--label", "ps, 2 workers", "--csv", "-")
        self.assertSucceeded(result)
        self.assertEqual(sorted({r["series"] for r in self.read_csv(result.out)}),
                         ["one process", "ps, 2 workers"])
        result = self.plot(self.log("single.h5"), self.log("ps.h5"), "--label", "one", "--csv",
                           "-")
        self.assertFailsWith(result, 2, "--label: 1 labels for 2 logs")

    def test_times_in_the_right_unit_and_clock(self):
        result = self.plot(self.log("amb.h5"), "--type", "loss-vs-time", "--csv", "-")
        self.assertSucceeded(result)
        rows = self.read_csv(result.out)
        with h5py.File(self.log("amb.h5"), "r", swmr=True) as f:
            seconds = float(f["steps/time"][-1])
            self.assertEqual(mbtest.text_attrs(f)["clock"], "virtual")
        unit, scale = ("ms", 1e-3) if seconds < 1 else ("s", 1) if seconds < 120 else ("min", 60)
        self.assertEqual(rows[0]["x_label"], f"Emulated time ({unit})")
        self.assertAlmostEqual(float(rows[-1]["x"]) * scale, seconds, places=6)
        result = self.plot(self.log("single.h5"), "--type", "step-vs-time", "--csv", "-")
        self.assertTrue(self.read_csv(result.out)[0]["x_label"].startswith("Time ("))

    def test_histogram_and_scaling_series(self):
        result = self.plot(self.log("async.h5"), "--type", "staleness", "--csv", "-")
        self.assertSucceeded(result)
        rows = self.read_csv(result.out)
        with h5py.File(self.log("async.h5"), "r", swmr=True) as f:
            staleness = f["workers/staleness"][...]
        self.assertGreater(staleness.max(), 0)  # the asynchronous run is stale at times
        fractions = {int(float(r["x"])): float(r["y"]) for r in rows}
        self.assertAlmostEqual(sum(fractions.values()), 1.0, places=9)
        for value, fraction in fractions.items():
            self.assertAlmostEqual(fraction, float((staleness == value).mean()), places=9)

        result = self.plot(self.log("single.h5"), self.log("ar3.h5"), "--type", "scaling",
                           "--csv", "-")
        self.assertSucceeded(result)
        rows = self.read_csv(result.out)
        speedup = [r for r in rows if r["pane"] == "scaling-speedup" and r["series"] != "ideal"]
        self.assertEqual([r["x"] for r in speedup], ["1", "3"])
        self.assertEqual(float(speedup[0]["y"]), 1.0)
        throughput = {r["x"]: float(r["y"]) for r in rows if r["pane"] == "scaling-throughput"}
        self.assertAlmostEqual(float(speedup[1]["y"]), throughput["3"] / throughput["1"], places=6)
        result = self.plot(self.log("single.h5"), self.log("single-b32.h5"), "--type", "scaling",
                           "-o", self.path("s.png"))
        self.assertFailsWith(result, 3, "scaling needs runs with different numbers of workers")

    def test_workers_draws_the_mean_of_several_seeds(self):
        """The scale-workers experiment over seeds: runs of the same cluster size that differ
        in their seed are one point, their mean, with their min and max as error bars."""
        toy = self.log("toy.h5")
        common = ["--data", toy, "--model", "mlp", "--hidden", "16", "--threads", "1", "-q",
                  "--batch-size", "16", "--steps", "10", "--eval-every", "5", "--clock",
                  "virtual", "--compute-model", "0.002,0.001", "--comm-model", "25e-6,1e-9",
                  "--induce", "exp:0.01"]
        runs = {(n, seed): self.path(f"n{n}-s{seed}.h5") for n in (2, 4) for seed in (1, 2, 3)}

        def train(key):
            n, seed = key
            result = mbtest.run([mbtest.tool("mb-train-fmb"), *common, "--emulate", str(n),
                                 "--seed", str(seed), "--log", runs[key]], cwd=self.dir,
                                env=self.env, timeout=300)
            self.assertSucceeded(result)

        with concurrent.futures.ThreadPoolExecutor(3) as pool:
            list(pool.map(train, runs))
        step_time, reached = {}, {}
        for key, path in runs.items():
            with h5py.File(path, "r", swmr=True) as f:
                step_time[key] = float(f["steps/step_time"][...].mean())
                reached[key] = float(f["eval/time"][0])  # the first evaluation reaches 1%
        self.assertEqual(len({step_time[(4, seed)] for seed in (1, 2, 3)}), 3)  # seeds differ
        script = self.path("workers-script")
        result = self.plot(*runs.values(), "--type", "workers", "--target", "0.01", "--csv", "-",
                           "--script", script, "-o", "workers.png")
        self.assertSucceeded(result)
        rows = self.read_csv(result.out)
        for pane, per_run in (("workers-step-time", step_time), ("workers-time-to-target", reached)):
            measured = [r for r in rows if r["pane"] == pane and not r["series"].endswith("theory")]
            self.assertEqual([r["x"] for r in measured], ["2", "4"], msg=pane)
            for row in measured:
                values = [per_run[(int(row["x"]), seed)] for seed in (1, 2, 3)]
                self.assertAlmostEqual(float(row["y"]), sum(values) / 3, places=6, msg=pane)
        # The error bars: the data file's third and fourth columns, each seeds' min and max.
        with open(os.path.join(script, "pane1-1.dat")) as f:
            bars = [line.split() for line in f if not line.startswith("#")]
        self.assertEqual(len(bars), 2)
        for (x, mean, low, high), n in zip(bars, (2, 4)):
            values = [step_time[(n, seed)] for seed in (1, 2, 3)]
            self.assertEqual(int(float(x)), n)
            self.assertAlmostEqual(float(low), min(values), places=6)
            self.assertAlmostEqual(float(high), max(values), places=6)
        with open(os.path.join(script, "plot.gp")) as f:
            self.assertIn("'pane1-1.dat' using 1:2:3:4 with yerrorlines", f.read())

    def test_script_directory_for_editing(self):
        script = self.path("fig")
        result = self.plot(self.log("ps.h5"), self.log("async.h5"), "--type", "panel-hist",
                           "--script", script, "-o", "hist.pdf")
        self.assertSucceeded(result)
        names = sorted(os.listdir(script))
        self.assertIn("plot.gp", names)
        self.assertTrue(any(n.endswith(".dat") for n in names))
        self.assertNotIn("hist.pdf", names)  # written, not drawn
        drawn = mbtest.run([GNUPLOT, "plot.gp"], cwd=script)
        self.assertEqual(drawn.rc, 0, repr(drawn))
        with open(os.path.join(script, "hist.pdf"), "rb") as f:
            self.assertEqual(f.read(4), b"%PDF")
        again = self.plot(self.log("ps.h5"), "--type", "panel-hist", "--script", script)
        self.assertFailsWith(again, 2, "plot.gp exists; use --force")
        self.assertSucceeded(self.plot(self.log("ps.h5"), "--type", "panel-hist", "--script",
                                       script, "-f"))

    # -- failures -----------------------------------------------------------------------------

    def test_missing_data_names_the_dataset_and_writes_nothing(self):
        out = self.path("fig.png")
        cases = [
            ("single.h5", "compute-time",
             "single.h5: /workers has no rows (histogram compute-time needs a distributed run)"),
            ("single.h5", "master-batch-size", "single.h5: /collect has no rows"),
            ("old.h5", "micro-batches", "old.h5: no dataset /workers/micro_batches"),
            ("async.h5", "straggler-dist", "async.h5: the run induced no stragglers"),
        ]
        for log, kind, message in cases:
            with self.subTest(type=kind):
                result = self.plot(self.log("ps.h5"), self.log(log), "--type", kind, "-o", out,
                                   "--csv", self.path("fig.csv"))
                self.assertFailsWith(result, 3, message)
                self.assertFalse(os.path.exists(out))
                self.assertFalse(os.path.exists(self.path("fig.csv")))
        # A panel leaves such panes out, and says so.
        result = self.plot(self.log("single.h5"), "-o", out)
        self.assertSucceeded(result)
        self.assertIn("compute-time, batch-size", result.err)
        # Unless they were asked for.
        result = self.plot(self.log("single.h5"), "--subset", "loss-vs-step,compute-time", "-o",
                           self.path("sub.png"))
        self.assertFailsWith(result, 3, "/workers has no rows")
        result = self.plot(self.log("missing.h5"), "-o", self.path("x.png"))
        self.assertFailsWith(result, 3, "missing.h5")
        result = self.plot(self.log("toy.h5"), "-o", self.path("x.png"))
        self.assertFailsWith(result, 3, "toy.h5")
        self.assertNoLeftovers()

    def fake_gnuplot(self, body):
        bindir = self.path("bin")
        os.makedirs(bindir, exist_ok=True)
        path = os.path.join(bindir, "gnuplot")
        with open(path, "w") as f:
            f.write("#!/bin/sh\n" + body)
        os.chmod(path, stat.S_IRWXU)
        return mbtest.clean_env({"TMPDIR": self.dir, "PATH": f"{bindir}:/usr/bin:/bin"})

    def test_gnuplot_missing_or_failing_leaves_no_figure(self):
        out = self.path("fig.png")
        args = [self.log("single.h5"), "--type", "loss-vs-step", "-o", out]
        empty = self.path("empty")
        os.makedirs(empty)
        result = self.plot(*args, env=mbtest.clean_env({"TMPDIR": self.dir, "PATH": empty}))
        self.assertFailsWith(result, 1, "cannot run gnuplot: not found")
        env = self.fake_gnuplot('echo "plot.gp line 3: unknown terminal type" >&2\n'
                                'printf half > "$(sed -n "s/^set output .\\(.*\\).$/\\1/p" $1)"\n'
                                'exit 1\n')
        result = self.plot(*args, env=env)
        self.assertFailsWith(result, 1, "gnuplot failed drawing")
        self.assertIn("unknown terminal type", result.err)
        env = self.fake_gnuplot("exit 0\n")
        result = self.plot(*args, env=env)
        self.assertFailsWith(result, 1, "gnuplot wrote nothing")
        env = self.fake_gnuplot("kill -9 $$\n")
        result = self.plot(*args, env=env)
        self.assertFailsWith(result, 1, "gnuplot was killed by signal 9")
        self.assertFalse(os.path.exists(out))
        shutil.rmtree(self.path("bin"))
        shutil.rmtree(empty)
        self.assertNoLeftovers()

    def test_existing_outputs_need_force(self):
        out = self.path("fig.png")
        with open(out, "wb") as f:
            f.write(b"keep")
        result = self.plot(self.log("single.h5"), "--type", "lr-vs-step", "-o", out)
        self.assertFailsWith(result, 2, "fig.png exists; use --force to replace it")
        with open(out, "rb") as f:
            self.assertEqual(f.read(), b"keep")
        self.assertSucceeded(self.plot(self.log("single.h5"), "--type", "lr-vs-step", "-o", out,
                                       "--force"))
        png_size(out)
        with open(self.path("s.csv"), "w") as f:
            f.write("keep")
        result = self.plot(self.log("single.h5"), "--csv", self.path("s.csv"))
        self.assertFailsWith(result, 2, "s.csv exists")
        self.assertNoLeftovers()

    def test_bad_command_lines(self):
        single = self.log("single.h5")
        cases = [
            ([single, "--type", "nonsense", "-o", "x.png"], "'nonsense' is not a figure type"),
            ([single], "nothing to write"),
            (["-o", "x.png"], "no metric log given"),
            ([single, "--type", "loss-vs-step", "--subset", "lr-vs-step", "-o", "x.png"],
             "--subset chooses the panes of a panel type"),
            ([single, "--subset", "scaling", "-o", "x.png"], "--subset: scaling"),
            ([single, "--xmax", "3 days", "-o", "x.png"], "--xmax"),
            ([single, "--size", "4", "-o", "x.png"], "--size"),
            ([single, "--smooth", "-1", "-o", "x.png"], "--smooth"),
            ([single, "--target", "80", "-o", "x.png"], "--target 80: a test accuracy between 0"),
            ([single, "--target", "0", "-o", "x.png"], "--target 0: a test accuracy between 0"),
        ]
        for args, message in cases:
            with self.subTest(args=args):
                self.assertFailsWith(self.plot(*args), 2, message)
        self.assertNoLeftovers()

    def test_options_change_the_series(self):
        args = [self.log("single.h5"), "--type", "loss-vs-step", "--csv", "-"]
        raw = self.read_csv(self.plot(*args).out)
        smooth = self.read_csv(self.plot(*args, "--smooth", "5").out)
        self.assertEqual(len(raw), len(smooth))
        self.assertEqual(raw[0]["y"], smooth[0]["y"])
        self.assertNotEqual([r["y"] for r in raw], [r["y"] for r in smooth])
        for extra in (["--logy", "--xmax", "10", "--ymax", "5"], ["--xmax", "1min"]):
            self.assertSucceeded(self.plot(self.log("single.h5"), "--type", "panel", *extra, "-o",
                                           self.path("p.png"), "-f"))
        result = self.plot(self.log("ps.h5"), "--type", "compute-time", "--bins", "7", "--csv",
                           "-")
        self.assertEqual(len(self.read_csv(result.out)), 7)


if __name__ == "__main__":
    mbtest.main()
