"""--servers S under mpirun: ranks 0..S-1 each keep, update and broadcast a shard of the
parameters (MXNet's key sharding) and the other ranks are workers. S servers give the bits of
one (parameters and the optimizer state the checkpoint gathers from the servers), with and
without --compress; the log names the workers and has a row per server and step (its shard,
the bytes it receives, its times). With --async each server is the asynchronous master of its
shard (dist_async -s): one worker on the virtual clock gives the bits of one server; bad uses
exit 2."""

import concurrent.futures
import json
import shutil

import h5py
import numpy as np

import mbtest

MPIRUN = shutil.which("mpirun")


def arrays_of(path):
    out = {}
    with h5py.File(path, "r") as f:
        for group in ("params", "state", "optimizer"):
            if group in f:
                for name in f[group]:
                    out[f"{group}/{name}"] = f[group][name][...]
    return out


class Servers(mbtest.ToolTestCase):
    def setUp(self):
        super().setUp()
        self.assertIsNotNone(MPIRUN, "mpirun (openmpi-bin) is required")
        self.assertSucceeded(self.mb_dataset("synth", "toy", "--learnable", "--train", "128",
                                             "--test", "30", "-o", self.path("toy.h5")))

    def train(self, ranks, *args):
        command = [MPIRUN, "--oversubscribe", "-n", str(ranks), mbtest.tool("mb-train-fmb"),
                   "--data", "toy.h5", "--model", "mlp", "--hidden", "16", "--optimizer",
                   "momentum", "--lr", "0.05", "--threads", "1", "--batch-size", "16",
                   "--steps", "6", "--eval-every", "3", "-q", "-f", *args]
        return mbtest.run(command, cwd=self.dir, env=self.env, timeout=300)

    def assertSameBits(self, a, b):
        one, other = arrays_of(self.path(a)), arrays_of(self.path(b))
        self.assertEqual(sorted(one), sorted(other))
        self.assertTrue(any(k.startswith("optimizer/") for k in one), sorted(one))
        for name in one:
            np.testing.assert_array_equal(one[name], other[name], err_msg=name)

    def test_two_servers_give_the_bits_of_one(self):
        # One worker: -n 3 with 2 servers against -n 2; two workers: -n 4 against -n 3.
        for workers in (1, 2):
            with self.subTest(workers=workers):
                self.assertSucceeded(self.train(workers + 1, "--checkpoint", "one.h5", "--log",
                                                "one-log.h5"))
                self.assertServerRows("one-log.h5", servers=1, workers=workers, value_bytes=4)
                self.assertSucceeded(self.train(workers + 2, "--servers", "2", "--checkpoint",
                                                "two.h5", "--log", "two-log.h5"))
                self.assertSameBits("one.h5", "two.h5")
                with h5py.File(self.path("two-log.h5"), "r") as log:
                    config = json.loads(mbtest.text_attrs(log)["config"])
                    ranks = sorted(set(log["workers/rank"][...]))
                    evaluations = len(log["eval/step"])
                self.assertEqual(config["servers"], 2)
                self.assertEqual(config["workers"], workers)
                self.assertEqual(ranks, list(range(2, 2 + workers)))
                self.assertEqual(evaluations, 2)
                self.assertServerRows("two-log.h5", servers=2, workers=workers, value_bytes=4)

    def assertServerRows(self, log_path, servers, workers, value_bytes):
        """/servers: a row per server and step, shards that tile the parameters, the bytes the
        workers send each, and times that are measured (update and send: of the previous step;
        before the first step there was no update, but the first parameters were sent)."""
        with h5py.File(self.path(log_path), "r") as log:
            table = {name: log["servers"][name][...] for name in log["servers"]}
            parameters = int(json.loads(mbtest.text_attrs(log)["config"])["parameters"])
        steps = 6
        self.assertEqual(list(table["step"]), [s for s in range(1, steps + 1)
                                               for _ in range(servers)])
        self.assertEqual(list(table["rank"]), list(range(servers)) * steps)
        floats = table["floats"][:servers]
        self.assertEqual(int(floats.sum()), parameters)
        self.assertLessEqual(int(floats.max() - floats.min()), 1)
        np.testing.assert_array_equal(table["floats"], np.tile(floats, steps))
        # 2bit: 16 values to a 32-bit word.
        per_worker = [4 * f if value_bytes == 4 else 4 * ((int(f) + 15) // 16) for f in floats]
        self.assertEqual(list(table["bytes_received"][:servers]), [b * workers for b in per_worker])
        self.assertTrue(np.all(table["recv_time"] > 0))
        self.assertTrue(np.all(table["update_time"][:servers] == 0))
        self.assertTrue(np.all(table["update_time"][servers:] > 0))
        self.assertTrue(np.all(table["send_time"] > 0))

    def test_three_servers_with_compression_give_the_bits_of_one(self):
        self.assertSucceeded(self.train(3, "--compress", "2bit:0.002", "--checkpoint", "one.h5"))
        self.assertSucceeded(self.train(5, "--servers", "3", "--compress", "2bit:0.002",
                                        "--checkpoint", "three.h5", "--log", "three-log.h5"))
        self.assertServerRows("three-log.h5", servers=3, workers=2, value_bytes=0.25)
        self.assertSameBits("one.h5", "three.h5")

    def test_a_resumed_run_with_servers_continues_bit_for_bit(self):
        # Adam: every optimizer state array and the update count must reach each server.
        adam = ["--optimizer", "adam", "--lr", "0.01"]
        self.assertSucceeded(self.train(4, "--servers", "2", *adam, "--checkpoint", "whole.h5"))
        self.assertSucceeded(self.train(4, "--servers", "2", *adam, "--steps", "3",
                                        "--checkpoint", "part.h5"))
        # Three servers take the shards of a two-server checkpoint: same sums (two workers
        # before, one worker now would change the data order, so two workers throughout).
        self.assertSucceeded(self.train(5, "--servers", "3", *adam, "--resume", "part.h5",
                                        "--checkpoint", "resumed.h5"))
        self.assertSameBits("whole.h5", "resumed.h5")

    def train_async(self, ranks, *args):
        command = [MPIRUN, "--oversubscribe", "-n", str(ranks), mbtest.tool("mb-train-fmb"),
                   "--data", "toy.h5", "--model", "mlp", "--hidden", "16", "--optimizer",
                   "momentum", "--lr", "0.05", "--threads", "1", "--batch-size", "16",
                   "--comm", "ps", "--async", "-q", "-f", *args]
        return mbtest.run(command, cwd=self.dir, env=self.env, timeout=300)

    def async_log(self, name):
        with h5py.File(self.path(name), "r") as log:
            tables = {f"{group}/{column}": log[group][column][...]
                      for group in ("steps", "workers", "eval", "servers")
                      for column in log[group]}
            tables["parameters"] = int(json.loads(mbtest.text_attrs(log)["config"])["parameters"])
        return tables

    def assertAsyncServerRows(self, log, servers, last_step):
        """Each server's rows are its own updates 1..k in order, k at most the run's length and
        the server that stopped the run at it; the shards tile the parameters."""
        steps, ranks = log["servers/step"], log["servers/rank"]
        self.assertTrue(np.all(np.diff(steps) >= 0), steps)
        made = []
        for rank in range(servers):
            mine = steps[ranks == rank]
            self.assertEqual(list(mine), list(range(1, len(mine) + 1)), msg=f"rank {rank}")
            made.append(len(mine))
        self.assertEqual(max(made), last_step, made)
        floats = [int(log["servers/floats"][ranks == r][0]) for r in range(servers)]
        self.assertEqual(sum(floats), log["parameters"])
        self.assertTrue(np.all(log["servers/recv_time"] > 0))
        self.assertTrue(np.all(log["servers/send_time"] > 0))  # the first: the start's sends
        first = log["servers/step"] == 1
        self.assertTrue(np.all(log["servers/update_time"][first] == 0))
        self.assertTrue(np.all(log["servers/update_time"][~first] > 0))

    def test_async_servers_update_their_shards_as_gradients_come(self):
        # 2 servers + 2 workers on the wall clock: no order between them (a loaded machine may
        # even starve a worker), so only what holds whatever the order is checked.
        self.assertSucceeded(self.train_async(4, "--servers", "2", "--steps", "24", "--log",
                                              "log.h5"))
        log = self.async_log("log.h5")
        self.assertLessEqual(set(log["workers/rank"]), {2, 3})
        self.assertAsyncServerRows(log, servers=2, last_step=24)
        loss = log["steps/loss"]
        self.assertLessEqual(len(loss), 24)
        self.assertLess(loss[-4:].mean(), loss[:4].mean() - 0.1, loss)
        # The model of the end, put together from both shards, evaluated once on rank 0.
        self.assertEqual(len(log["eval/loss"]), 1)
        self.assertTrue(np.isfinite(log["eval/loss"][0]))
        self.assertLess(log["eval/loss"][0], loss[:4].mean())

    def test_async_two_servers_give_the_bits_of_one_for_one_worker(self):
        # One worker on the virtual clock: the servers take its gradients in the same order and
        # its rounds start from the same parameters when messages cost the same whatever their
        # bytes and updates are free (a compute model). The checkpoint of the end holds the
        # shards put together, and a run resumed from it goes on with the bits of one server.
        virtual = ["--clock", "virtual", "--compute-model", "0.001,0.0001", "--comm-model",
                   "0.0005,0"]
        self.assertSucceeded(self.train_async(2, "--steps", "12", *virtual, "--log", "one.h5",
                                              "--checkpoint", "one-12.h5"))
        self.assertSucceeded(self.train_async(3, "--servers", "2", "--steps", "12", *virtual,
                                              "--log", "two.h5", "--checkpoint", "two-12.h5"))
        self.assertSameBits("one-12.h5", "two-12.h5")
        self.assertSucceeded(self.train_async(2, "--steps", "18", *virtual, "--resume",
                                              "one-12.h5", "--checkpoint", "one-18.h5"))
        self.assertSucceeded(self.train_async(3, "--servers", "2", "--steps", "18", *virtual,
                                              "--resume", "two-12.h5", "--checkpoint",
                                              "two-18.h5"))
        self.assertSameBits("one-18.h5", "two-18.h5")
        one, two = self.async_log("one.h5"), self.async_log("two.h5")
        self.assertEqual(len(one["servers/step"]), 0)  # one asynchronous server: no rows
        for name in ("steps/loss", "steps/accuracy", "steps/time", "workers/staleness",
                     "eval/loss", "eval/accuracy"):
            np.testing.assert_array_equal(one[name], two[name], err_msg=name)
        self.assertEqual(len(one["steps/loss"]), 12)
        self.assertTrue(np.any(one["workers/staleness"] > 0))  # asynchronous, not lockstep
        self.assertAsyncServerRows(two, servers=2, last_step=12)
        self.assertEqual(list(two["servers/rank"]), [0, 1] * 12)

    def test_async_servers_on_the_virtual_clock_take_every_worker(self):
        # The emulated cluster orders the gradients the same way on both servers: each makes
        # the run's 12 updates, from both workers, some on stale parameters.
        self.assertSucceeded(self.train_async(4, "--servers", "2", "--steps", "12", "--clock",
                                              "virtual", "--compute-model", "0.001,0.0001",
                                              "--log", "log.h5"))
        log = self.async_log("log.h5")
        self.assertEqual(sorted(set(log["workers/rank"])), [2, 3])
        self.assertTrue(np.any(log["workers/staleness"] > 0))
        self.assertAsyncServerRows(log, servers=2, last_step=12)
        self.assertEqual(list(log["servers/rank"]), [0, 1] * 12)
        self.assertTrue(np.isfinite(log["eval/loss"][0]))

    def test_bad_uses_exit_2_naming_the_flag(self):
        # Each refused before any training: run at once, checked in order.
        cases = [
            (self.train, ["--servers", "3"], "leaves no worker"),
            (self.train, ["--servers", "2", "--comm", "allreduce"], "--servers 2"),
            # Several asynchronous servers hold the whole model only at the end.
            (self.train, ["--servers", "2", "--async"], "--eval-every"),
            (self.train_async, ["--servers", "2", "--steps", "2", "--checkpoint", "c.h5",
                                "--checkpoint-every", "1"], "--checkpoint-every"),
            (self.train_async, ["--servers", "2", "--steps", "2", "--compress", "fp16"],
             "--compress"),
            (self.train, ["--servers", "0"], "--servers 0"),
            (self.train, ["--servers", "2", "--slowdown", "1=2"], "rank 1 is a server"),
        ]
        with concurrent.futures.ThreadPoolExecutor(len(cases)) as pool:
            results = list(pool.map(lambda case: case[0](3, *case[1]), cases))
        for (_, _, text), result in zip(cases, results):
            self.assertUsageError(result, text)

if __name__ == "__main__":
    # The tests at once, three at a time: most of each is mpirun's start-up and end, waits
    # that overlap (the wall-clock runs check only what holds in any order).
    mbtest.main(at_once=3)
