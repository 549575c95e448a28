"""mb-report --trace end to end: short mpirun -n 3 trainings (parameter server on the wall clock
with induced delays, allreduce on the virtual clock), then the Chrome trace's events against the
log's columns read with h5py: a track per rank, the step, update and evaluation spans, and each
worker's sleep, compute, send and wait laid out from its step's start (send and wait from the
worker's next row on the wall clock). Bad command lines are status 2, a bad log status 3, and
nothing is left half-written."""

import json
import os
import shutil

import h5py
import numpy as np

import mbtest

MPIRUN = shutil.which("mpirun")
US = 1e6


def columns(log, table):
    return {name: log[table][name][...] for name in log[table]}


class Trace(mbtest.ToolTestCase):
    def setUp(self):
        super().setUp()
        self.assertIsNotNone(MPIRUN, "mpirun (openmpi-bin) is required")
        result = self.mb_dataset("synth", "toy", "--learnable", "--train", "300", "--test",
                                 "60", "-o", self.path("toy.h5"))
        self.assertSucceeded(result)

    def train(self, *args):
        command = [MPIRUN, "--oversubscribe", "-n", "3", mbtest.tool("mb-train-fmb"), "--data",
                   self.path("toy.h5"), "--model", "mlp", "--hidden", "16", "--threads", "1",
                   "-q", "--batch-size", "10", "--steps", "6", "--eval-every", "3", *args]
        self.assertSucceeded(mbtest.run(command, cwd=self.dir, env=self.env, timeout=300))

    def trace(self, log, name="run.json"):
        result = mbtest.run([mbtest.tool("mb-report"), "--trace", name, log], cwd=self.dir,
                            env=self.env)
        self.assertSucceeded(result)
        with open(self.path(name)) as f:
            return json.load(f)

    def check(self, log_path, trace, emulated):
        self.assertEqual(trace["displayTimeUnit"], "ms")
        events = trace["traceEvents"]
        names = {e["tid"]: e["args"]["name"] for e in events
                 if e["ph"] == "M" and e["name"] == "thread_name"}
        spans = {}
        for e in events:
            if e["ph"] != "X":
                continue
            key = (e["name"], e["tid"], e["args"]["step"])
            self.assertNotIn(key, spans)
            spans[key] = (e["ts"], e["dur"])
        with h5py.File(log_path, "r", swmr=True) as log:
            world = int(mbtest.text_attrs(log)["world_size"])
            steps, workers = columns(log, "steps"), columns(log, "workers")
            collect, evals = columns(log, "collect"), columns(log, "eval")
        steps_track = world
        self.assertEqual(names[steps_track], "steps (rank 0)")
        ranks = sorted(set(int(r) for r in workers["rank"]))
        self.assertEqual({t: n for t, n in names.items() if t != steps_track},
                         {r: f"rank {r}" for r in ranks})
        start = {}
        for step, time, step_time in zip(steps["step"], steps["time"], steps["step_time"]):
            start[int(step)] = time - step_time
            ts, dur = spans.pop(("step", steps_track, int(step)))
            np.testing.assert_allclose([ts, dur], [start[int(step)] * US, step_time * US])
        for step, wait in zip(collect["step"], collect["wait_time"]):
            s = int(step)
            end = start[s] + steps["step_time"][list(steps["step"]).index(s)]
            gathered = min(max(start[s] + wait, start[s]), end)
            if end > gathered:
                ts, dur = spans.pop(("update", steps_track, s))
                np.testing.assert_allclose([ts, ts + dur], [gathered * US, end * US])
        for step, time, wall in zip(evals["step"], evals["time"], evals["wall_time"]):
            ts, dur = spans.pop(("evaluation", steps_track, int(step)))
            np.testing.assert_allclose([ts, dur], [time * US, 0 if emulated else (wall - time) * US],
                                       atol=1e-3)
        row = {(int(s), int(r)): i for i, (s, r) in enumerate(zip(workers["step"], workers["rank"]))}
        for (s, r), i in row.items():
            at = start[s]
            parts = [("sleep", workers["sleep_time"][i]), ("compute", workers["compute_time"][i])]
            exchange = i if emulated else row.get((s + 1, r))
            if exchange is not None:
                parts += [("send", workers["send_time"][exchange]),
                          ("wait", workers["wait_time"][exchange])]
            for name, seconds in parts:
                if seconds <= 0:
                    self.assertNotIn((name, r, s), spans)
                    continue
                ts, dur = spans.pop((name, r, s))
                np.testing.assert_allclose([ts, dur], [at * US, seconds * US], rtol=1e-9,
                                           atol=1e-3, err_msg=f"{name} of rank {r} at step {s}")
                at += seconds
        self.assertEqual(spans, {}, msg="spans the log does not account for")

    def test_parameter_server_on_the_wall_clock(self):
        self.train("--comm", "ps", "--induce", "0.01:0:1", "--log", "ps.h5")
        trace = self.trace("ps.h5")
        process = [e for e in trace["traceEvents"] if e["name"] == "process_name"]
        self.assertEqual(process[0]["args"]["name"], "mb-train-fmb mlp, 2 workers, wall clock")
        # Every worker slept its induced 10 ms at every step.
        sleeps = [e for e in trace["traceEvents"] if e["name"] == "sleep"]
        self.assertEqual(len(sleeps), 2 * 6)
        np.testing.assert_allclose([e["dur"] for e in sleeps], 0.01 * US, rtol=1e-3)
        self.check(self.path("ps.h5"), trace, emulated=False)
        self.assertNoStrayFiles()

    def test_allreduce_on_the_virtual_clock(self):
        self.train("--comm", "allreduce", "--clock", "virtual", "--comm-model", "1e-3,0",
                   "--compute-model", "1e-3,2e-3", "--slowdown", "2=2", "--log", "v.h5")
        trace = self.trace("v.h5")
        self.check(self.path("v.h5"), trace, emulated=True)
        # Rank 2 computes 12 ms and sleeps as long again (--slowdown 2=2); ranks 0 and 1 wait
        # those 12 ms for it, rank 2 not at all (the update is free under a compute model).
        events = trace["traceEvents"]
        self.assertEqual(sorted({e["tid"] for e in events if e["name"] == "sleep"}), [2])
        waits = [e for e in events if e["name"] == "wait"]
        self.assertEqual(sorted({e["tid"] for e in waits}), [0, 1])
        np.testing.assert_allclose([e["dur"] for e in waits], 0.012 * US, rtol=1e-6)

    def test_bad_input(self):
        self.train("--comm", "ps", "--log", "a.h5")
        report = mbtest.tool("mb-report")
        run = lambda *args: mbtest.run([report, *args], cwd=self.dir, env=self.env)
        self.assertFailsWith(run("--trace", "t.json", "a.h5", "a.h5"), 2,
                             "--trace: one metric log is expected, 2 given")
        self.assertFailsWith(run("--trace", "t.json", "--csv", "a.h5"), 2, "--trace")
        self.assertFailsWith(run("--trace", "t.json", "missing.h5"), 3, "missing.h5")
        with open(self.path("junk.h5"), "w") as f:
            f.write("not HDF5\n")
        self.assertFailsWith(run("--trace", "t.json", "junk.h5"), 3, "junk.h5")
        self.assertFalse(os.path.exists(self.path("t.json")))
        self.assertSucceeded(run("--trace", "t.json", "a.h5"))
        self.assertFailsWith(run("--trace", "t.json", "a.h5"), 2, "use --force")
        self.assertSucceeded(run("--trace", "t.json", "--force", "a.h5"))
        self.assertNoStrayFiles()


if __name__ == "__main__":
    mbtest.main()
