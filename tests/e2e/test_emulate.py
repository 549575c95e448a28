"""--emulate N: N workers inside one process give the bits of the same run with a process per
worker. The oracle is today's emulation: mpirun -n N+1 (ps: the master and N workers), -n N+2
(ps with --servers 2) or -n N (allreduce), --clock virtual with a compute model and a message
model, the workers' gradients added in rank order through shared memory (--allreduce shm) or,
with two servers, gathered by each server and added in worker order. Every dataset of the
checkpoint and every column of the metric log must be equal to the bit, for FMB and AMB, ps
(one server or two) and allreduce, 3 and 8 workers, with induced stragglers and a slowed
worker; a resumed emulated run must equal a straight one (and, with two servers, a resumed run
with a process per worker); what cannot be emulated yet is refused naming both flags. The
asynchronous master's oracles (its count and time rules, K-async and stale synchronous parallel,
one server or two) are test_emulate_async.py's, a CTest entry of its own, with this file's
comparison (SameBits) and runs (EmulatedRuns).

Left out of the comparison: the log's wall-clock columns (wall_time), the ps servers' table (the
servers' real receive and update times; with two servers its rows, shards and bytes are
compared apart), and the recorded configuration (it names how the sum was made: shm against
in-process, and the world it ran in).
"""

import concurrent.futures
import json
import os
import shutil
import tempfile

import h5py
import numpy as np

import mbtest

MPIRUN = shutil.which("mpirun")

COMMON = ["--model", "mlp", "--hidden", "16", "--optimizer", "momentum", "--lr", "0.05",
          "--threads", "1", "--batch-size", "16", "--steps", "12", "--eval-every", "6",
          "--clock", "virtual", "--compute-model", "0.002,0.001", "--comm-model", "25e-6,1e-9",
          "--induce", "niagara", "--slowdown", "2=1.5", "-q"]
AMB = ["--batch-size", "32", "--partitions", "4", "--time-limit", "0.05"]
# Columns measured on the real clock, and the tables of real measurements only.
WALL_COLUMNS = {"wall_time"}
WALL_GROUPS = {"servers"}


def arrays(path, log):
    """Every dataset of a checkpoint, or every compared column of a metric log, by name."""
    out = {}
    with h5py.File(path, "r", swmr=log) as f:
        def visit(name, item):
            if not isinstance(item, h5py.Dataset):
                return
            if log and (name.split("/")[0] in WALL_GROUPS or name.split("/")[-1] in WALL_COLUMNS):
                return
            out[name] = item[...]
        f.visititems(visit)
    return out


class SameBits:
    """For a ToolTestCase: runs NAME (NAME.h5, NAME-log.h5 in its directory) equal to the bit."""

    def assert_same_bits(self, a, b, skip=()):
        for log in (False, True):
            suffix = "-log.h5" if log else ".h5"
            found, expected = arrays(self.path(a + suffix), log), arrays(self.path(b + suffix), log)
            for name in [n for n in expected if n.split("/")[-1] in skip]:
                found.pop(name, None)
                expected.pop(name)
            self.assertEqual(sorted(found), sorted(expected), msg=f"{a}{suffix}: datasets")
            moved = [name for name in expected
                     if found[name].dtype != expected[name].dtype
                     or found[name].tobytes() != expected[name].tobytes()]
            self.assertEqual(moved, [], msg=f"{a}{suffix} against {b}{suffix}: datasets that differ")


class ToyData:
    """For a ToolTestCase: toy.h5 (400 rows to train, 90 to test) in every test's directory,
    made once for the class."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.toy_dir = tempfile.mkdtemp(prefix="mbkit-e2e-toy-")
        made = mbtest.mb_dataset("synth", "toy", "--learnable", "--train", "400", "--test", "90",
                                 "--seed", "3", "-o", os.path.join(cls.toy_dir, "toy.h5"))
        if made.rc != 0:
            shutil.rmtree(cls.toy_dir, ignore_errors=True)
            raise RuntimeError(repr(made))

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.toy_dir, ignore_errors=True)
        super().tearDownClass()

    def setUp(self):
        super().setUp()
        shutil.copy(os.path.join(self.toy_dir, "toy.h5"), self.path("toy.h5"))

    def together(self, *calls):
        """Runs independent light runs (callables) at once: runs on the virtual clock, nothing
        timed between them; a failure in any is raised here."""
        with concurrent.futures.ThreadPoolExecutor(len(calls)) as pool:
            for future in [pool.submit(call) for call in calls]:
                future.result()


class EmulatedRuns(ToyData, SameBits):
    """For a ToolTestCase: emulated runs and their process-per-worker oracles on toy.h5."""

    def train(self, name, tool, args, ranks=0, quiet=True, common=COMMON, extra=()):
        common = common if quiet else [a for a in common if a != "-q"]
        # A TMPDIR per mpirun: the tests run several at once.
        return self.train_toy(tool, name, common, args, ranks, extra, own_tmpdir=True)

    def pair(self, name, tool, args, workers, ranks, common=COMMON, oracle=()):
        """The emulated run NAME-emulated (--emulate WORKERS) and its oracle NAME-ranks
        (mpirun -n RANKS, `oracle` added to its arguments), as two callables for together():
        the runs are on the virtual clock, nothing timed between them, so every pair of a test
        runs at once (most of a small run under mpirun is its ranks' start-up)."""
        return [lambda: self.train(f"{name}-emulated", tool, [*args, "--emulate", str(workers)],
                                   common=common),
                lambda: self.train(f"{name}-ranks", tool, [*args, *oracle], ranks, common=common)]

    def stopped_and_resumed(self, name, tool, args, ranks=0, common=COMMON, keep_stopped=False):
        """NAME stopped after 6 steps (its checkpoint NAME.h5), then resumed from it to the
        --steps of `common`; `keep_stopped`: copies of the stopped run's files as
        NAME-stopped.h5 and NAME-stopped-log.h5."""
        self.train(name, tool, [*args, "--steps", "6"], ranks, common=common)
        if keep_stopped:
            for suffix in (".h5", "-log.h5"):
                shutil.copy(self.path(name + suffix), self.path(f"{name}-stopped{suffix}"))
        self.train(name, tool, args, ranks, common=common, extra=("--resume", f"{name}.h5"))


class Emulate(EmulatedRuns, mbtest.ToolTestCase):

    def test_every_sync_mode_has_the_bits_of_a_process_per_worker(self):
        if MPIRUN is None:
            self.skipTest("mpirun is not installed")
        # Each mode at one size, each tool and each exchange at both: the sum does not depend
        # on the round rule (ps at the other sizes: FMB and AMB at 3 in the replayed trace's
        # test, at 8 in test_straggler_methods' and, AMB, the several servers').
        cases = [("mb-train-fmb", [], "ps", 3), ("mb-train-fmb", [], "allreduce", 8),
                 ("mb-train-amb", AMB, "ps", 8), ("mb-train-amb", AMB, "allreduce", 3)]

        def name_of(tool, comm, workers):
            return f"{tool[-3:]}-{comm}-{workers}"
        # Every emulated run and its oracle on the virtual clock, nothing timed: all at once.
        runs = []
        for tool, extra, comm, workers in cases:
            name, args = name_of(tool, comm, workers), [*extra, "--comm", comm]
            ranks = workers + (1 if comm == "ps" else 0)
            runs += [(f"{name}-emulated", tool, [*args, "--emulate", str(workers)]),
                     (f"{name}-ranks", tool, [*args, "--allreduce", "shm"], ranks)]
        self.together(*[lambda run=run: self.train(*run) for run in runs])
        for tool, _, comm, workers in cases:
            with self.subTest(tool=tool, comm=comm, workers=workers):
                name = name_of(tool, comm, workers)
                ranks = workers + (1 if comm == "ps" else 0)
                self.assert_same_bits(f"{name}-emulated", f"{name}-ranks")
                with h5py.File(self.path(f"{name}-emulated-log.h5"), "r") as log:
                    # Every worker, every step: the per-worker rows are there.
                    self.assertEqual(len(log["workers/rank"]), 12 * workers)
                    self.assertEqual(sorted(set(log["workers/rank"][...].tolist())),
                                     list(range(ranks - workers, ranks)))

    def test_several_servers_have_the_bits_of_a_process_per_worker(self):
        # --servers 2: the emulated run's ranks 0 and 1 are the servers (this process updates
        # both shards), its workers ranks 2 to N + 1, as under mpirun -n N+2, whose servers
        # gather their shards from every worker and add them in worker order. FMB at 3 workers
        # and AMB at 8 (the servers' shards do not depend on the round rule: each size once);
        # the /servers table has the same rows (its times are wall seconds); then a checkpoint
        # and a resumed run of each against a resumed run of the other.
        if MPIRUN is None:
            self.skipTest("mpirun is not installed")
        servers = ["--comm", "ps", "--servers", "2"]
        cases = (("mb-train-fmb", [], 3), ("mb-train-amb", AMB, 8))
        calls = []
        for tool, extra, workers in cases:
            calls += self.pair(f"servers-{tool[-3:]}-{workers}", tool, [*extra, *servers],
                               workers, workers + 2)
        resumed = [*AMB, *servers]
        calls += [lambda: self.stopped_and_resumed("servers-resumed-emulated", "mb-train-amb",
                                                   [*resumed, "--emulate", "3"]),
                  lambda: self.stopped_and_resumed("servers-resumed-ranks", "mb-train-amb",
                                                   resumed, 5)]
        self.together(*calls)
        for tool, _, workers in cases:
            with self.subTest(tool=tool, workers=workers):
                name = f"servers-{tool[-3:]}-{workers}"
                self.assert_same_bits(f"{name}-emulated", f"{name}-ranks")
                rows = {}
                for run in ("emulated", "ranks"):
                    with h5py.File(self.path(f"{name}-{run}-log.h5"), "r") as log:
                        rows[run] = {column: log["servers"][column][...].tolist()
                                     for column in ("step", "rank", "floats",
                                                    "bytes_received")}
                        self.assertEqual(sorted(set(log["workers/rank"][...].tolist())),
                                         list(range(2, 2 + workers)))
                self.assertEqual(rows["emulated"], rows["ranks"])
                self.assertEqual(rows["emulated"]["rank"], [0, 1] * 12)
        self.assert_same_bits("servers-resumed-emulated", "servers-resumed-ranks")
        with h5py.File(self.path("servers-resumed-emulated.h5"), "r") as checkpoint:
            self.assertTrue(any(name.startswith("optimizer") for name in checkpoint))

    def test_a_replayed_trace_has_the_bits_of_a_process_per_worker(self):
        if MPIRUN is None:
            self.skipTest("mpirun is not installed")
        # 2 workers x 5 steps of delays for 3 workers and 12 steps: it wraps both ways.
        with open(self.path("trace.csv"), "w") as out:
            out.write("worker,step,seconds\n")
            for step in range(5):
                for worker in range(2):
                    out.write(f"{worker},{step},{0.01 * ((3 * step + 7 * worker) % 11)!r}\n")
        common = [a if a != "niagara" else "trace:trace.csv" for a in COMMON]
        tools = (("mb-train-fmb", []), ("mb-train-amb", AMB))
        self.together(*[call for tool, extra in tools
                        for call in self.pair(f"trace-{tool[-3:]}", tool, [*extra, "--comm", "ps"],
                                              3, 4, common=common,
                                              oracle=["--allreduce", "shm"])])
        for tool, _ in tools:
            with self.subTest(tool=tool):
                self.assert_same_bits(f"trace-{tool[-3:]}-emulated", f"trace-{tool[-3:]}-ranks")

    def test_a_resumed_emulated_run_has_the_bits_of_a_straight_one(self):
        args = [*AMB, "--comm", "ps", "--emulate", "5"]
        self.together(lambda: self.train("straight", "mb-train-amb", args),
                      lambda: self.stopped_and_resumed("resumed", "mb-train-amb", args))
        # The epoch column is epoch at resume + steps since / steps per epoch: its last bits
        # differ from steps / steps per epoch, with a process per worker as well.
        self.assert_same_bits("resumed", "straight", skip={"epoch"})

    def test_the_emulated_cluster_is_the_one_asked_for(self):
        # 400 rows: 10 a worker, two batches of 5 each epoch.
        result = self.train("big", "mb-train-fmb", ["--comm", "ps", "--emulate", "40",
                                                    "--batch-size", "5", "--steps", "3"],
                            quiet=False)
        with h5py.File(self.path("big-log.h5"), "r") as log:
            ranks = log["workers/rank"][...]
            self.assertEqual(sorted(set(ranks.tolist())), list(range(1, 41)))
            self.assertEqual(log["steps/samples"][...].tolist(), [200, 200, 200])
            # The step is the slowest worker's: rank 2 is slowed 1.5 times, and every worker
            # sleeps its niagara delay before computing.
            per_step = log["workers/sleep_time"][...].reshape(3, 40) + \
                log["workers/compute_time"][...].reshape(3, 40)
            self.assertTrue(np.all(log["steps/step_time"][...] > per_step.max(axis=1)))
        self.assertIn("emulated in this process", result.err + result.out)
        with h5py.File(self.path("big-log.h5"), "r") as log:
            config = json.loads(mbtest.text_attrs(log)["config"])
        self.assertEqual(config["emulate"], 40)
        self.assertEqual(config["workers"], 40)
        self.assertEqual(config["world_size"], 41)

    def test_worker_table_summary_and_sample_agree_with_every_row(self):
        # --emulate 100 logs 100 rows a step with all; summary keeps per-step quantiles of
        # them (nearest rank) and sample:K the rows of K workers: both must be what h5py
        # computes from the rows of the same run with all.
        base = ["--comm", "ps", "--emulate", "100", "--batch-size", "2", "--steps", "6"]
        # Every run of the test at once (emulated on the virtual clock: nothing timed).
        runs = [(choice.split(":")[0], [*base, "--worker-table", choice])
                for choice in ("all", "summary", "sample:7")]
        runs.append(("sample-again", [*base, "--worker-table", "sample:7"]))
        runs += [(f"{choice}-70", [*base, "--emulate", "70", "--worker-table", choice])
                 for choice in ("all", "summary")]
        self.together(*[lambda run=run: self.train(run[0], "mb-train-fmb", run[1])
                        for run in runs])
        with h5py.File(self.path("all-log.h5"), "r") as log:
            rows = {name: log["workers"][name][...] for name in log["workers"]}
            steps = {name: log["steps"][name][...] for name in log["steps"]}
            self.assertEqual(len(log["worker_summary/step"]), 0)
        self.assertEqual(len(rows["step"]), 6 * 100)
        summarised = [name for name in rows if name not in ("step", "rank")]
        self.assertIn("compute_time", summarised)
        for name in ("summary", "sample"):
            with h5py.File(self.path(f"{name}-log.h5"), "r") as log:
                summary = {column: log["worker_summary"][column][...]
                           for column in log["worker_summary"]}
                config = json.loads(mbtest.text_attrs(log)["config"])
                for column in steps:
                    if column not in WALL_COLUMNS:
                        np.testing.assert_array_equal(log["steps"][column][...], steps[column],
                                                      err_msg=f"{name}: steps/{column}")
                workers = {column: log["workers"][column][...] for column in log["workers"]}
            self.assertEqual(config["worker_table"], "summary" if name == "summary" else "sample:7")
            np.testing.assert_array_equal(summary["step"], np.arange(1, 7))
            np.testing.assert_array_equal(summary["workers"], np.full(6, 100))
            for i, step in enumerate(range(1, 7)):
                for column in summarised:
                    values = np.sort(rows[column][rows["step"] == step].astype(np.float64))
                    n = len(values)
                    # Nearest rank: the value at 1-based rank ceil(p n).
                    expected = {"min": values[0], "max": values[-1],
                                **{f"p{q}": values[int(np.ceil(q / 100 * n)) - 1]
                                   for q in (10, 50, 90)}}
                    for statistic, value in expected.items():
                        self.assertEqual(summary[f"{column}_{statistic}"][i], value,
                                         msg=f"{name}: step {step} {column}_{statistic}")
                    np.testing.assert_allclose(summary[f"{column}_mean"][i], values.mean(),
                                               rtol=1e-12, atol=1e-300)
            if name == "summary":
                self.assertEqual(len(workers["step"]), 0)
                continue
            sampled = sorted(set(workers["rank"].tolist()))
            self.assertEqual(len(sampled), 7)
            keep = np.isin(rows["rank"], sampled)
            for column in rows:
                np.testing.assert_array_equal(workers[column], rows[column][keep],
                                              err_msg=f"sample: workers/{column}")
        # The same seed samples the same workers.
        with h5py.File(self.path("sample-again-log.h5"), "r") as log:
            self.assertEqual(sorted(set(log["workers/rank"][...].tolist())), sampled)

        # mb-report reads each form alike; mb-plot draws every worker's histogram from all and
        # from the sample, and refuses it from a summary, saying how to get one.
        logs = [self.path(f"{name}-log.h5") for name in ("all", "summary", "sample")]
        report = mbtest.run([mbtest.tool("mb-report"), "--json", *logs], cwd=self.dir,
                            env=self.env)
        self.assertSucceeded(report)
        runs = json.loads(report.out)["runs"]
        for run in runs[1:]:
            for key in ("steps", "samples", "samples_per_worker", "time", "final_accuracy"):
                self.assertAlmostEqual(run[key], runs[0][key], places=12, msg=key)
        for name in ("all", "sample"):
            self.assertSucceeded(mbtest.run([mbtest.tool("mb-plot"), f"{name}-log.h5", "--type",
                                             "compute-time", "-o", f"{name}.png"], cwd=self.dir,
                                            env=self.env))
        refused = mbtest.run([mbtest.tool("mb-plot"), "summary-log.h5", "--type", "compute-time",
                              "-o", "summary.png"], cwd=self.dir, env=self.env)
        self.assertEqual(refused.rc, 3, msg=refused.err)
        self.assertEqual(len(refused.err.strip().splitlines()), 1, msg=refused.err)
        self.assertIn("--worker-table all or sample:K", refused.err)
        # What a summary can show: the quantiles over the workers against the step.
        for name in ("summary", "sample"):
            drawn = mbtest.run([mbtest.tool("mb-plot"), f"{name}-log.h5", "--type",
                                "compute-time-quantiles", "-o", f"{name}-q.png", "--csv", "-"],
                               cwd=self.dir, env=self.env)
            self.assertSucceeded(drawn)
            medians = [line.split(",") for line in drawn.out.splitlines()
                       if line.startswith("compute-time-quantiles,") and " median," in line]
            self.assertEqual([float(row[3]) for row in medians], list(range(1, 7)))
        refused = mbtest.run([mbtest.tool("mb-plot"), "all-log.h5", "--type",
                              "compute-time-quantiles", "-o", "all-q.png"], cwd=self.dir,
                             env=self.env)
        self.assertEqual(refused.rc, 3, msg=refused.err)
        self.assertIn("--worker-table summary or sample:K", refused.err)
        panel = mbtest.run([mbtest.tool("mb-plot"), "summary-log.h5", "-o", "panel.png"],
                           cwd=self.dir, env=self.env)
        self.assertSucceeded(panel)
        self.assertIn("left out of compute-time", panel.err)
        # The workers figure (step time against N beside E[slowest delay] + the rest) takes
        # each step's longest delay from the summary: the same series as from every row.
        series = {}
        for choice in ("all", "summary"):
            plotted = mbtest.run([mbtest.tool("mb-plot"), f"{choice}-log.h5",
                                  f"{choice}-70-log.h5", "--type", "workers", "-o",
                                  f"{choice}-workers.png", "--label", "a", "--label", "b",
                                  "--csv", "-"], cwd=self.dir, env=self.env)
            self.assertSucceeded(plotted)
            series[choice] = plotted.out
        self.assertIn("theory", series["all"])
        self.assertEqual(series["summary"], series["all"])

    def test_worker_table_defaults_to_all_up_to_64_workers(self):
        sizes = ((64, "all"), (65, "summary"))
        self.together(*[lambda workers=workers: self.train(
            f"default-{workers}", "mb-train-fmb", ["--comm", "ps", "--emulate", str(workers),
                                                   "--batch-size", "2", "--steps", "2"])
            for workers, _ in sizes])
        for workers, expected in sizes:
            name = f"default-{workers}"
            with h5py.File(self.path(f"{name}-log.h5"), "r") as log:
                config = json.loads(mbtest.text_attrs(log)["config"])
                self.assertEqual(config["worker_table"], expected)
                self.assertEqual(len(log["workers/step"]), 2 * workers if expected == "all" else 0)
                self.assertEqual(len(log["worker_summary/step"]), 0 if expected == "all" else 2)
        result = mbtest.run([mbtest.tool("mb-train-fmb"), "--data", "toy.h5", *COMMON,
                             "--worker-table", "sample:0"], cwd=self.dir, env=self.env)
        self.assertEqual(result.rc, 2, msg=result.err)
        self.assertIn("--worker-table sample:0", result.err)
        # A resumed run appends to its log, so it keeps the log's table: another one is
        # refused, naming both, and the log is left as it was.
        before = open(self.path("default-65-log.h5"), "rb").read()
        resume = [mbtest.tool("mb-train-fmb"), "--data", "toy.h5", *COMMON, "--comm", "ps",
                  "--emulate", "65", "--batch-size", "2", "--steps", "3", "--log",
                  "default-65-log.h5", "--checkpoint", "default-65.h5", "--resume",
                  "default-65.h5"]
        result = mbtest.run([*resume, "--worker-table", "all"], cwd=self.dir, env=self.env)
        self.assertEqual(result.rc, 2, msg=result.err)
        self.assertEqual(len(result.err.strip().splitlines()), 1, msg=result.err)
        self.assertIn("--worker-table all: default-65-log.h5 holds a worker table of summary",
                      result.err)
        self.assertEqual(open(self.path("default-65-log.h5"), "rb").read(), before)
        self.assertSucceeded(mbtest.run(resume, cwd=self.dir, env=self.env))
        with h5py.File(self.path("default-65-log.h5"), "r") as log:
            self.assertEqual(len(log["worker_summary/step"]), 3)

    def test_what_is_not_emulated_is_refused_naming_both_flags(self):
        cases = [
            (["--emulate", "4", "--clock", "wall"], "--clock virtual"),
            (["--emulate", "4", "--compress", "fp16"], "--compress"),
            (["--emulate", "4", "--servers", "2", "--async", "--eval-every", "0",
              "--cpu-quota", "3=0.002/0.01"], "--cpu-quota"),
            (["--emulate", "4", "--comm", "allreduce", "--allreduce", "mpi"], "--allreduce mpi"),
            (["--emulate", "-1"], "--emulate"),
        ]
        for extra, named in cases:
            with self.subTest(extra=extra):
                result = mbtest.run([mbtest.tool("mb-train-fmb"), "--data", "toy.h5", *COMMON,
                                     *extra], cwd=self.dir, env=self.env)
                self.assertEqual(result.rc, 2, msg=result.err)
                self.assertIn(named, result.err)
                if extra[0] == "--emulate" and extra[1] == "4":
                    self.assertIn("--emulate 4", result.err)
        # The asynchronous master takes gradients in order of arrival, known before they are
        # computed only from a compute model.
        no_compute_model = [a for a in COMMON if a not in ("--compute-model", "0.002,0.001")]
        result = mbtest.run([mbtest.tool("mb-train-fmb"), "--data", "toy.h5", *no_compute_model,
                             "--emulate", "4", "--async"], cwd=self.dir, env=self.env)
        self.assertEqual(result.rc, 2, msg=result.err)
        self.assertIn("--emulate 4 --async needs --compute-model", result.err)
        no_model = [a for a in COMMON if a not in ("--comm-model", "25e-6,1e-9")]
        result = mbtest.run([mbtest.tool("mb-train-fmb"), "--data", "toy.h5", *no_model,
                             "--emulate", "4"], cwd=self.dir, env=self.env)
        self.assertEqual(result.rc, 2, msg=result.err)
        self.assertIn("--comm-model", result.err)
        # Under mpirun (ranks hosting shares) every mode above runs; fewer workers than ranks is
        # refused (test_emulate_shares.py).


if __name__ == "__main__":
    mbtest.main()
