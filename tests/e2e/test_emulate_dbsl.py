"""mb-train-dbsl --emulate N: DBSL's workers inside one process give the bits of the same run
with a process per worker. The oracle: mpirun -n N+1 (the server and N workers), --clock virtual
with a compute model and a message model. Every dataset of the checkpoint and every column of
the metric log but wall_time must be equal to the bit, for the asynchronous server (a merge per
push, taken in the order of virtual arrival) and the synchronous one (--sync), 3 and 8 workers,
with induced stragglers, a slowed worker and workers keeping their optimizer state; and a run
resumed from a checkpoint against a resumed run with a process per worker. --sync adds each
push into the merge as it is taken: its peak memory does not grow by a model a worker. What
cannot be emulated is refused in one line.

Left out of the comparison: the log's wall-clock column, the servers' table (real receive and
update times) and the recorded configuration (it names the world the run ran in).
"""

import concurrent.futures
import os
import shutil
import subprocess
import threading

import h5py

import mbtest
from test_emulate import SameBits, ToyData

MPIRUN = shutil.which("mpirun")

COMMON = ["--model", "mlp", "--hidden", "16", "--threads", "1", "--lr", "0.05",
          "--base-batch", "16", "--extra-time", "1.25", "--clock", "virtual",
          "--compute-model", "0.001,0.01", "--comm-model", "25e-6,1e-9", "--induce", "niagara",
          "--slowdown", "1=1.5", "--eval-every", "6", "-q"]


class EmulateDbsl(ToyData, SameBits, mbtest.ToolTestCase):

    def run_tool(self, name, args, ranks=0, resume=False):
        command = [mbtest.tool("mb-train-dbsl"), "--data", "toy.h5", *COMMON, *args,
                   "--log", f"{name}-log.h5", "--checkpoint", f"{name}.h5"]
        if resume:
            command += ["--resume", f"{name}.h5"]
        if ranks > 0:
            command = [MPIRUN, "--oversubscribe", "-n", str(ranks), *command]
        return mbtest.run(command, cwd=self.dir, env=self.env, timeout=300)

    def train(self, name, args, ranks=0, resume=False):
        result = self.run_tool(name, args, ranks, resume)
        self.assertSucceeded(result)
        return result

    def test_both_servers_have_the_bits_of_a_process_per_worker(self):
        if MPIRUN is None:
            self.skipTest("mpirun is not installed")
        cases = [
            ("async-3", 3, ["--small-workers", "1", "--steps", "12"]),
            ("async-8", 8, ["--small-workers", "2", "--steps", "24", "--optimizer", "momentum",
                            "--keep-optimizer-state"]),
            ("sync-3", 3, ["--small-workers", "1", "--steps", "12", "--sync"]),
            ("sync-8", 8, ["--small-workers", "2", "--steps", "24", "--sync", "--optimizer",
                           "momentum", "--keep-optimizer-state"]),
        ]
        for name, workers, args in cases:
            with self.subTest(case=name):
                # On the virtual clock, nothing timed between them: at once.
                self.together(
                    lambda: self.train(f"{name}-emulated", [*args, "--emulate", str(workers)]),
                    lambda: self.train(f"{name}-ranks", args, workers + 1))
                self.assert_same_bits(f"{name}-emulated", f"{name}-ranks")
                with h5py.File(self.path(f"{name}-emulated-log.h5"), "r") as log:
                    ranks = log["workers/rank"][...].tolist()
                    # A row per push, a step per push (a slow one may not push in 24 steps).
                    self.assertEqual(len(ranks), log["steps/step"][-1])
                    self.assertLessEqual(set(ranks), set(range(1, workers + 1)))
                    self.assertGreater(len(set(ranks)), workers // 2)
                    if name.startswith("async"):
                        # Pushes were taken out of the order of the replies.
                        self.assertGreater(log["workers/staleness"][...].max(), 0)

    def test_a_resumed_emulated_run_has_the_bits_of_a_resumed_process_per_worker(self):
        if MPIRUN is None:
            self.skipTest("mpirun is not installed")
        for server in ([], ["--sync"]):
            def stopped_and_resumed(name, ranks, where, server=server):
                """The results of the run stopped after 6 steps and, if it succeeded, resumed."""
                run = f"resumed{''.join(server)}-{name}"
                args = ["--small-workers", "1", *server, *where]
                stopped = self.run_tool(run, [*args, "--steps", "6"], ranks)
                if stopped.rc != 0:
                    return [stopped]
                return [stopped, self.run_tool(run, [*args, "--steps", "12"], ranks, resume=True)]
            # The emulated run and its oracle on the virtual clock: at once.
            runs = (("emulated", 0, ["--emulate", "3"]), ("ranks", 4, []))
            with concurrent.futures.ThreadPoolExecutor(len(runs)) as pool:
                done = list(pool.map(lambda run: stopped_and_resumed(*run), runs))
            for (name, _, _), results in zip(runs, done):
                with self.subTest(server=server, run=name):
                    for result in results:
                        self.assertSucceeded(result)
            self.assert_same_bits(f"resumed{''.join(server)}-emulated",
                                  f"resumed{''.join(server)}-ranks")

    def peak_memory(self, name, workers):
        """The peak resident bytes of a --sync run of `workers` emulated workers over one round
        (a push each, of one sample: the toy's 400 rows shared out), the child's own
        (os.wait4), and its model's floats (what a push carries: no batch-norm state)."""
        command = [mbtest.tool("mb-train-dbsl"), "--data", "toy.h5", "--model", "mlp",
                   "--hidden", "2048", "--threads", "1", "--base-batch", "16", "--extra-time",
                   "1.25", "--clock", "virtual", "--compute-model", "0.001,0.01", "--comm-model",
                   "25e-6,1e-9", "--sync", "--emulate", str(workers), "--steps", str(workers),
                   "-q", "--log", f"{name}-log.h5", "--checkpoint", f"{name}.h5"]
        with open(self.path(f"{name}.err"), "w+") as err:
            child = subprocess.Popen(command, cwd=self.dir, env=self.env,
                                     stdout=subprocess.DEVNULL, stderr=err)
            watchdog = threading.Timer(120, child.kill)
            watchdog.start()
            _, status, usage = os.wait4(child.pid, 0)
            watchdog.cancel()
            child.returncode = os.waitstatus_to_exitcode(status)
            err.seek(0)
            self.assertEqual(child.returncode, 0, msg=f"{command}\n{err.read()}")
        with h5py.File(self.path(f"{name}.h5"), "r") as checkpoint:
            floats = sum(array.size for array in checkpoint["params"].values())
        return usage.ru_maxrss * 1024, floats

    def test_sync_keeps_no_pushed_model(self):
        # A push of 0.9 MB (227,338 floats): held for every worker, 350 more workers would add
        # 318 MB; added as it is taken, they add their rounds' bookkeeping only.
        small, floats = self.peak_memory("sync-50", 50)
        large, _ = self.peak_memory("sync-400", 400)
        push = floats * 4
        self.assertGreater(push, 800_000)
        self.assertLess(large - small, 350 * push // 4,
                        msg=f"peak {small / 1e6:.0f} MB with 50 workers, {large / 1e6:.0f} MB "
                            f"with 400 (a push is {push / 1e6:.2f} MB)")

    def test_what_is_not_emulated_is_refused_in_one_line(self):
        no_compute_model = [a for a in COMMON if a not in ("--compute-model", "0.001,0.01")]
        cases = [
            (["--emulate", "3", "--time-model-ab", "0.001,0.01", "--small-workers", "1"],
             no_compute_model, "needs --compute-model"),
            (["--emulate", "3", "--small-workers", "1", "--calibrate"], COMMON, "--calibrate"),
            (["--emulate", "3", "--small-workers", "1", "--threads", "2"],
             [a for a in COMMON if a not in ("--threads", "1")], "--threads 2"),
        ]
        for extra, common, named in cases:
            with self.subTest(extra=extra):
                result = mbtest.run([mbtest.tool("mb-train-dbsl"), "--data", "toy.h5", *common,
                                     *extra, "--steps", "6"], cwd=self.dir, env=self.env)
                self.assertEqual(result.rc, 2, msg=result.err)
                self.assertIn("--emulate 3", result.err)
                self.assertIn(named, result.err)
                self.assertEqual(len(result.err.strip().splitlines()), 1, msg=result.err)
        # The synchronous server needs no prediction: a time model for the plan is enough.
        self.assertSucceeded(mbtest.run(
            [mbtest.tool("mb-train-dbsl"), "--data", "toy.h5", *no_compute_model, "--emulate",
             "3", "--time-model-ab", "0.001,0.01", "--small-workers", "1", "--sync", "--steps",
             "6"], cwd=self.dir, env=self.env))


if __name__ == "__main__":
    mbtest.main()
