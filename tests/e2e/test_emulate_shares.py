"""--emulate N under mpirun -n R: each rank hosts a contiguous share of the N emulated workers
(the first N mod R ranks one more than the others), sums its workers' gradients in worker order,
and rank 0 adds the R sums in rank order. Everything but the float sums is the one-process
--emulate N run's to the bit (virtual times, step times, batch counts, every worker's row); the
parameters are the one-process run's with R = 1, the same bits for a given R run twice, and
within float rounding of them for other R (the additions are grouped by rank). A resumed run
(same R) equals a straight one to the bit (two runs of that R, hence also the same bits for the
R run twice). mpirun -n 1 is a world of one process, which takes the one-process run's path
(train/roles.cpp: a rank hosts a share only when the world has several): its bits are checked
once for each trainer (FMB's ps, AMB's allreduce, DBSL's sync server) and for the asynchronous
master; every method is checked on 2 and 3 ranks, where the shares differ. The methods that
choose from every worker's prediction (--backup-workers, --k-sync, --gradient-coding,
--k-batch-sync) all-gather the ranks' shares of the predictions and choose as the one process
does. Local SGD (--local-steps TAU|adacomm) sums the ranks' sums of their hosted workers'
models in rank order at each averaging, every rank taking the average: the same relations hold,
AdaComm's periods included. AMB-DG
(--delayed-gradients TAU, virtual clock): every rank keeps the parameter versions, its hosted
workers compute at version t - TAU, the sums are combined the same way, and every rank keeps the
delayed timeline; a resumed run (the versions and the timeline from the checkpoint) equals a
straight one. DBSL's --sync server: each rank runs its hosted workers' rounds of a round, the
ranks all-gather the reports (every rank keeps every worker's virtual clock) and pass the merge's
sums from rank to rank in worker order, so every R gives the one process's bits, parameters
included; a resumed run equals a straight one. The asynchronous master (--async, with K-async
and the staleness bound): every rank runs the master alike (the same arrivals, updates and kept
parameter sets), the rank hosting a round's worker predicts its ready time and, when its
gradient is taken, computes it from the parameters it started from and broadcasts it, so every R
gives the one process's bits, a resumed run's too; DBSL's asynchronous server the same way (the
pushed model broadcast from its worker's host, every rank merging it).
--train-loss master (rank 0's loss of the updated model on a batch of its own) and several
synchronous servers (every rank updates every shard, as the one process does) keep the
synchronous relations above; several asynchronous servers (every rank plays every server, the
servers taking turns in one order) give the one process's bits for every R. Fewer workers than
ranks are refused naming both flags.
"""

import os
import shutil
import unittest

import h5py
import numpy as np

import mbtest
from test_emulate import AMB, COMMON, SameBits, ToyData, arrays
from test_emulate_dbsl import COMMON as DBSL

MPIRUN = shutil.which("mpirun")
# Every column of the log but these holds the same values for every R: the losses and
# accuracies (the model, whose sums' bits depend on R) and the wall clock.
MODEL_COLUMNS = {"loss", "accuracy", "wall_time"}


@unittest.skipIf(MPIRUN is None, "mpirun is not installed")
class EmulateShares(ToyData, SameBits, mbtest.ToolTestCase):

    def run_tool(self, name, tool, args, ranks, resume=False, common=COMMON):
        command = [mbtest.tool(tool), "--data", "toy.h5", *common, *args,
                   "--log", f"{name}-log.h5", "--checkpoint", f"{name}.h5"]
        if resume:
            command += ["--resume", f"{name}.h5"]
        env = self.env
        if ranks > 0:
            command = [MPIRUN, "--oversubscribe", "-n", str(ranks), *command]
            # A TMPDIR per run: mpiruns started at once race to make one session directory
            # ("unable to create the desired directory ... File exists").
            env = dict(env, TMPDIR=self.path(f"tmp-{name}"))
            os.makedirs(env["TMPDIR"], exist_ok=True)
        return mbtest.run(command, cwd=self.dir, env=env, timeout=300)

    def train(self, name, tool, args, ranks=0, resume=False, common=COMMON):
        self.assertSucceeded(self.run_tool(name, tool, args, ranks, resume, common))

    def train_together(self, *runs):
        """Independent runs, (name, tool, args, ranks) each, at once."""
        self.together(*[lambda run=run: self.train(*run) for run in runs])

    def stopped_and_resumed(self, name, tool, args, ranks, common=COMMON):
        """NAME stopped after 6 steps, then resumed to the end."""
        self.train(name, tool, [*args, "--steps", "6"], ranks, common=common)
        self.train(name, tool, args, ranks, resume=True, common=common)

    def assert_close(self, a, b, groups=("params/",)):
        """Every column but the model's equal to the bit, the checkpoint's arrays of `groups`
        within 1e-4."""
        found, expected = arrays(self.path(a + "-log.h5"), True), arrays(self.path(b + "-log.h5"),
                                                                           True)
        self.assertEqual(sorted(found), sorted(expected))
        moved = [name for name in expected if name.split("/")[-1] not in MODEL_COLUMNS
                 and found[name].tobytes() != expected[name].tobytes()]
        self.assertEqual(moved, [], msg=f"{a} against {b}: log columns that differ")
        for name in ("steps/loss", "eval/loss"):
            np.testing.assert_allclose(found[name], expected[name], rtol=0, atol=1e-4)
        found, expected = arrays(self.path(a + ".h5"), False), arrays(self.path(b + ".h5"), False)
        params = [name for name in expected if name.startswith(groups)]
        self.assertTrue(params)
        for name in params:
            self.assertEqual(found[name].shape, expected[name].shape)
            self.assertLess(np.max(np.abs(found[name] - expected[name])), 1e-4, msg=name)

    def test_shares_are_the_one_process_run_up_to_the_order_of_float_sums(self):
        for tool, extra, comm in (("mb-train-fmb", [], "ps"),
                                  ("mb-train-amb", AMB, "allreduce")):
            with self.subTest(tool=tool, comm=comm):
                name = f"{tool[-3:]}-{comm}"
                args = [*extra, "--comm", comm, "--emulate", "8"]
                # Resumed synchronous FMB ps runs on shares (the rounds skipped to the resumed
                # step, as here) are compared with straight ones to the bit in the servers' test
                # (2 servers, 3 ranks) and the master's training loss test (2 ranks).
                self.train_together((f"{name}-one", tool, args, 0),
                                    *[(f"{name}-r{ranks}", tool, args, ranks)
                                      for ranks in (1, 2, 3)])
                self.assert_same_bits(f"{name}-r1", f"{name}-one")
                for ranks in (2, 3):
                    self.assert_close(f"{name}-r{ranks}", f"{name}-one")
                with h5py.File(self.path(f"{name}-r3-log.h5"), "r") as log:
                    # Rank 0's log holds every worker's row, every step.
                    self.assertEqual(len(log["workers/rank"]), 12 * 8)

    def test_the_selection_over_every_rank_s_workers_is_the_one_process_run_s(self):
        # Each rank predicts its hosted workers' ready times; gathered, every rank drops the
        # workers the one-process run drops (/workers/dropped compared to the bit).
        for name, extra in (("backup", ["--backup-workers", "2"]),
                            ("coding", ["--gradient-coding", "1"]),
                            ("ksync", ["--k-sync", "5"])):
            with self.subTest(method=name):
                args = [*extra, "--comm", "ps", "--emulate", "8"]
                self.train_together((f"{name}-one", "mb-train-fmb", args, 0),
                                    *[(f"{name}-r{ranks}", "mb-train-fmb", args, ranks)
                                      for ranks in (2, 3)])
                for ranks in (2, 3):
                    self.assert_close(f"{name}-r{ranks}", f"{name}-one")
                with h5py.File(self.path(f"{name}-r3-log.h5"), "r") as log:
                    # A row per worker per step, in worker order.
                    workers = np.nonzero(log["workers/dropped"][...])[0] % 8
                # Workers of more than one rank's share were dropped (shares 0-2, 3-5, 6-7).
                self.assertGreater(len({int(w) // 3 for w in workers}), 1, msg=workers)

    def test_the_k_batch_sync_plan_over_every_rank_s_workers_is_the_one_process_run_s(self):
        # Each rank predicts its hosted workers' batch completions; gathered, every rank plans
        # the one-process run's batch counts (/workers/micro_batches compared to the bit).
        args = ["--k-batch-sync", "6", "--comm", "ps", "--emulate", "8"]
        self.together(lambda: self.train("kbatch-one", "mb-train-fmb", args, 0),
                      *[lambda ranks=ranks: self.train(f"kbatch-r{ranks}", "mb-train-fmb", args,
                                                       ranks) for ranks in (2, 3)],
                      lambda: self.stopped_and_resumed("kbatch-resumed", "mb-train-fmb", args, 3))
        for ranks in (2, 3):
            self.assert_close(f"kbatch-r{ranks}", "kbatch-one")
        with h5py.File(self.path("kbatch-r3-log.h5"), "r") as log:
            samples = log["workers/samples"][...].reshape(-1, 8)
        # Some workers of more than one rank's share computed no batch in some step.
        idle = np.nonzero(samples == 0)[1]
        self.assertGreater(len({int(w) // 3 for w in idle}), 1, msg=samples)
        # A resumed run (same R) replays the plans to its place. The epoch column is epoch at
        # resume + steps since / steps per epoch (test_emulate).
        self.assert_same_bits("kbatch-resumed", "kbatch-r3", skip={"epoch"})

    def test_local_sgd_shares_average_as_the_one_process_run(self):
        # Each rank's hosted workers take their local steps on their own models (momentum's
        # state too); at an averaging the ranks' sums of the models are added in rank order.
        for comm in ("ps", "allreduce"):
            with self.subTest(comm=comm):
                name = f"local-{comm}"
                args = ["--comm", comm, "--emulate", "8", "--local-steps", "3"]
                self.train_together((f"{name}-one", "mb-train-fmb", args, 0),
                                    (f"{name}-r2", "mb-train-fmb", args, 2))
                self.assert_close(f"{name}-r2", f"{name}-one")
        # The same ranks again (each over 2 threads): the same bits; resumed at an averaging:
        # the straight run's.
        args = ["--comm", "ps", "--emulate", "8", "--local-steps", "3"]
        self.together(lambda: self.train("local-again", "mb-train-fmb", [*args, "--threads", "2"],
                                         2),
                      lambda: self.stopped_and_resumed("local-resumed", "mb-train-fmb", args, 2))
        self.assert_same_bits("local-again", "local-ps-r2")
        self.assert_same_bits("local-resumed", "local-ps-r2", skip={"epoch"})

    def test_adacomm_s_periods_under_shares_are_the_one_process_run_s(self):
        # Rank 0 chooses tau from the combined losses and every rank takes it: the averagings
        # (the steps whose workers send) fall where the one process's do, and tau changed.
        tau0, steps = 5, 20
        args = ["--comm", "allreduce", "--emulate", "8", "--lr", "0.3", "--steps", str(steps),
                "--eval-every", "0", "--local-steps", "adacomm", "--adacomm-tau0", str(tau0),
                "--adacomm-interval", "0.01"]
        self.train_together(("ada-one", "mb-train-fmb", args, 0),
                            ("ada-r3", "mb-train-fmb", args, 3))
        self.assert_close("ada-r3", "ada-one")
        with h5py.File(self.path("ada-r3-log.h5"), "r") as log:
            sends = log["workers/send_time"][...].reshape(steps, 8)
        averaged = np.nonzero(sends.max(axis=1) > 0)[0] + 1
        periods = np.diff(np.concatenate([[0], averaged]))[:-1]  # the last ends at the end
        self.assertTrue(any(p != tau0 for p in periods), msg=f"averaged after {averaged}")

    def test_amb_dg_shares_compute_at_the_delayed_versions_as_the_one_process_run(self):
        # Every rank keeps the versions (every rank applies the same combined sum), its hosted
        # workers' rounds compute at version t - 2, and every rank times the steps on the
        # delayed timeline: the step times, waits and staleness are the one process's to the bit.
        args = [*AMB, "--comm", "ps", "--emulate", "8", "--delayed-gradients", "2"]
        checkpoint = ("params/", "delayed_parameters/")
        # Also stopped at step 6 (rounds 6 and 7 still compute at versions 4 and 5) and resumed
        # on the same ranks, beside the straight runs: the straight run's bits (two more runs of
        # R = 2: the same bits).
        saved_versions = []

        def stopped_and_resumed():
            self.train("dg-resumed", "mb-train-amb", [*args, "--steps", "6"], 2)
            with h5py.File(self.path("dg-resumed.h5"), "r") as saved:
                saved_versions.append(list(saved["delayed_parameters"].attrs["names"]))
            self.train("dg-resumed", "mb-train-amb", args, 2, resume=True)
        self.together(*[lambda run=run: self.train(*run)
                        for run in [("dg-one", "mb-train-amb", args, 0),
                                    *[(f"dg-r{ranks}", "mb-train-amb", args, ranks)
                                      for ranks in (2, 3)]]], stopped_and_resumed)
        for ranks in (2, 3):
            self.assert_close(f"dg-r{ranks}", "dg-one", checkpoint)
        with h5py.File(self.path("dg-r3-log.h5"), "r") as log:
            staleness = log["workers/staleness"][...].reshape(12, 8)
        self.assertEqual(staleness[:, 0].tolist(), [0, 1] + [2] * 10)
        self.assertEqual(saved_versions, [[b"version_4", b"version_5"]])
        self.assert_same_bits("dg-resumed", "dg-r2", skip={"epoch"})

    def test_dbsl_sync_shares_merge_as_the_one_process_run(self):
        # Shares of 3, 3, 2 (R = 3) and 4, 4 (R = 2) workers, the small ones (--small-workers 2,
        # workers 6 and 7) in the last share; momentum's state kept by each worker's host.
        args = ["--sync", "--small-workers", "2", "--steps", "16", "--optimizer", "momentum",
                "--keep-optimizer-state", "--emulate", "8"]

        def train(name, ranks):
            return lambda: self.train(name, "mb-train-dbsl", args, ranks, common=DBSL)
        # Also stopped after the first round and resumed on 3 ranks, beside them: the straight
        # run's bits, the straight run in one process (every R gives its bits, below) (no
        # induced delays, which a resumed DBSL worker draws from their start, and no kept
        # optimizer state; an evaluation at each round's end, as the stopped run's).
        straight = [a for a in DBSL if a not in ("--induce", "niagara")]
        straight[straight.index("--eval-every") + 1] = "8"
        plain = [a for a in args if a != "--keep-optimizer-state"]
        self.together(
            train("dbsl-one", 0), train("dbsl-r1", 1), train("dbsl-r2", 2), train("dbsl-r3", 3),
            lambda: self.train("dbsl-straight", "mb-train-dbsl", plain, 0, common=straight),
            lambda: self.stopped_and_resumed("dbsl-resumed", "mb-train-dbsl", plain, 3,
                                             common=straight))
        # The merge's additions are the one process's, in its order: the bits for every R (so
        # the same R twice gives the same bits too).
        for name in ("dbsl-r1", "dbsl-r2", "dbsl-r3"):
            self.assert_same_bits(name, "dbsl-one")
        with h5py.File(self.path("dbsl-r3-log.h5"), "r") as log:
            # A row per push, every worker of every share pushing each round of 8 steps.
            self.assertEqual(log["workers/rank"][...].tolist(), list(range(1, 9)) * 2)
            self.assertEqual(log["steps/step"][-1], 16)
            # The induced delays put the pushes' arrivals out of worker order.
            self.assertGreater(log["workers/wait_time"][...].max(), 0)
        self.assert_same_bits("dbsl-resumed", "dbsl-straight", skip={"epoch"})

    def test_the_asynchronous_master_on_shares_is_the_one_process_run(self):
        # Every rank takes the gradients the one process takes, in its order, each computed on
        # its worker's host and broadcast: the one process's bits for every R. FMB and AMB, the
        # count rule at 1 and 2 gradients an update and the time rule (with message delays),
        # the staleness bound's blocked workers; K-async's held gradients in a run stopped at
        # step 6 and resumed on 3 ranks against the same in one process (an asynchronous resume
        # starts every worker's round again; the log holds all 12 steps, every one compared).
        # Each R once or more: 1 and 3 (plain), 2 (count rule at 2, time rule, AMB), 3 (the
        # staleness bound, K-async); a rank costs its start-up, far more than its 12 steps.
        cases = [
            ("afmb", "mb-train-fmb", ["--emulate", "7"], (1, 3)),
            ("acount2", "mb-train-fmb",
             ["--emulate", "6", "--async-min-grads", "2", "--async-delay-std", "0.01"], (2,)),
            ("atime", "mb-train-fmb", ["--emulate", "5", "--async-master-time-limit", "0.01",
                                        "--async-delay-std", "0.01"], (2,)),
            ("aamb", "mb-train-amb", [*AMB, "--emulate", "5"], (2,)),
            ("assp", "mb-train-fmb", ["--emulate", "6", "--staleness-bound", "1"], (3,)),
        ]
        runs = []
        for name, tool, extra, ranks in cases:
            args = ["--comm", "ps", "--async", *extra]
            runs += [(f"{name}-one", tool, args, 0),
                     *[(f"{name}-r{r}", tool, args, r) for r in ranks]]
        resumed = ["--comm", "ps", "--async", "--emulate", "7", "--k-async", "2"]
        self.together(*[lambda run=run: self.train(*run) for run in runs],
                      lambda: self.stopped_and_resumed("aresumed-one", "mb-train-fmb", resumed, 0),
                      lambda: self.stopped_and_resumed("aresumed-r3", "mb-train-fmb", resumed, 3))
        for name, _, _, ranks in cases:
            for r in ranks:
                with self.subTest(run=f"{name}-r{r}"):
                    self.assert_same_bits(f"{name}-r{r}", f"{name}-one")
        self.assert_same_bits("aresumed-r3", "aresumed-one")
        with h5py.File(self.path("afmb-r3-log.h5"), "r") as log:
            # Rank 0's log holds the taken gradients of workers of every share (0-2, 3-4, 5-6:
            # ranks 1-3, 4-5, 6-7 of the emulated run), some of them stale.
            workers = log["workers/rank"][...] - 1
            shares = {0 if w < 3 else 1 if w < 5 else 2 for w in workers.tolist()}
            self.assertEqual(shares, {0, 1, 2})
            self.assertGreater(log["workers/staleness"][...].max(), 0)
        with h5py.File(self.path("assp-r3-log.h5"), "r") as log:
            self.assertGreater(log["workers/wait_time"][...].max(), 0)
        with h5py.File(self.path("aresumed-r3-log.h5"), "r") as log:
            self.assertEqual(log["steps/step"][-1], 12)

    def test_dbsl_s_asynchronous_server_on_shares_is_the_one_process_run(self):
        # Every rank merges each push as it is taken, in the one process's order; the push's
        # worker's host predicted its round at the reply, runs it and broadcasts the pushed
        # model: the one process's bits for every R. Shares of 3, 2, 2 workers (R = 3), the small
        # ones (--small-workers 2, workers 5 and 6) in the last; a run stopped at step 6 and
        # resumed on 3 ranks against the same in one process. R = 3 (uneven shares, pushes
        # from each, the small workers hosted off rank 0); R = 2's shares of 4 and 3 are the
        # sync server's test's, R = 1 (the one-process path) its too.
        args = ["--small-workers", "2", "--steps", "16", "--optimizer", "momentum",
                "--keep-optimizer-state", "--emulate", "7"]
        resumed = ["--small-workers", "2", "--steps", "12", "--emulate", "7"]

        def train(name, ranks):
            return lambda: self.train(name, "mb-train-dbsl", args, ranks, common=DBSL)

        def stopped_and_resumed(name, ranks):
            return lambda: self.stopped_and_resumed(name, "mb-train-dbsl", resumed, ranks,
                                                    common=DBSL)
        self.together(train("adbsl-one", 0), train("adbsl-r3", 3),
                      stopped_and_resumed("adbsl-resumed-one", 0),
                      stopped_and_resumed("adbsl-resumed-r3", 3))
        self.assert_same_bits("adbsl-r3", "adbsl-one")
        self.assert_same_bits("adbsl-resumed-r3", "adbsl-resumed-one")
        with h5py.File(self.path("adbsl-r3-log.h5"), "r") as log:
            # A row per push (a step each), from workers of every share, out of worker order.
            ranks = log["workers/rank"][...].tolist()
            self.assertEqual(len(ranks), 16)
            self.assertEqual({0 if r <= 3 else 1 if r <= 5 else 2 for r in ranks}, {0, 1, 2})
            self.assertNotEqual(ranks, sorted(ranks))
        with h5py.File(self.path("adbsl-resumed-r3-log.h5"), "r") as log:
            self.assertEqual(log["steps/step"][-1], 12)

    def test_fewer_test_rows_than_emulated_ranks_are_evaluated_in_one_slice(self):
        self.assertSucceeded(self.mb_dataset("synth", "toy", "--learnable", "--train", "400",
                                             "--test", "5", "--seed", "3", "-o",
                                             self.path("few.h5")))
        args = ["--comm", "allreduce", "--emulate", "8", "--steps", "6", "--test-data", "few.h5"]
        self.train_together(("few-one", "mb-train-fmb", args, 0),
                            ("few-r2", "mb-train-fmb", args, 2))
        with h5py.File(self.path("few-one-log.h5"), "r") as one, \
                h5py.File(self.path("few-r2-log.h5"), "r") as shared:
            self.assertEqual(shared["eval/samples"][...].tolist(), [5])
            self.assertEqual(shared["eval/samples"][...].tolist(), one["eval/samples"][...].tolist())
            np.testing.assert_allclose(shared["eval/loss"][...], one["eval/loss"][...], atol=1e-4)

    def test_fewer_workers_than_ranks_are_refused_naming_both_flags(self):
        result = self.run_tool("refused", "mb-train-fmb", ["--emulate", "1"], 2)
        self.assertEqual(result.rc, 2, msg=result.err)
        self.assertIn("--emulate 1 under mpirun -n 2", result.err)
        self.assertIn("at least one worker", result.err)
        self.assertFalse(os.path.exists(self.path("refused-log.h5")))

    def test_the_master_s_training_loss_on_shares_is_the_one_process_s(self):
        # --train-loss master: rank 0 evaluates the updated model on a training batch of its
        # own each step (the steps' loss and accuracy columns). Synchronous ps (FMB) on 2 and 3
        # ranks: the relations of the synchronous shares (within float grouping); the
        # asynchronous master on 2 ranks, DBSL's --sync server on 3 and its asynchronous one on
        # 2: the one process's bits. A run
        # stopped at step 6 and resumed on 2 ranks: the straight run's bits (the master's batch
        # is the step's).
        cases = [
            ("mfmb", "mb-train-fmb", ["--comm", "ps"], (2, 3), COMMON),
            ("masync", "mb-train-fmb", ["--comm", "ps", "--async"], (2,), COMMON),
            ("mdbsl", "mb-train-dbsl", ["--sync", "--steps", "16"], (3,), DBSL),
            ("madbsl", "mb-train-dbsl", ["--steps", "16"], (2,), DBSL),
        ]
        runs = []
        for name, tool, extra, ranks, common in cases:
            args = [*extra, "--emulate", "8", "--train-loss", "master"]
            runs += [(f"{name}-one", tool, args, 0, False, common),
                     *[(f"{name}-r{r}", tool, args, r, False, common) for r in ranks]]
        resumed = ["--comm", "ps", "--emulate", "8", "--train-loss", "master"]
        self.together(*[lambda run=run: self.train(*run) for run in runs],
                      lambda: self.stopped_and_resumed("mresumed", "mb-train-fmb", resumed, 2))
        for name, ranks in (("mfmb", 2), ("mfmb", 3)):
            with self.subTest(run=f"{name}-r{ranks}"):
                self.assert_close(f"{name}-r{ranks}", f"{name}-one")
        for name in ("masync-r2", "mdbsl-r3", "madbsl-r2"):
            self.assert_same_bits(name, name.split("-")[0] + "-one")
        self.assert_same_bits("mresumed", "mfmb-r2", skip={"epoch"})
        # The loss column is the master's batch's, not the workers' mean: a batch of 16 rows,
        # whose accuracy is a multiple of 1/16.
        with h5py.File(self.path("mfmb-r3-log.h5"), "r") as log:
            accuracy = log["steps/accuracy"][...]
        np.testing.assert_array_equal(accuracy * 16, np.round(accuracy * 16))

    def test_several_synchronous_servers_on_shares_are_the_one_process_run(self):
        # --servers S (synchronous ps): every rank updates the whole buffer from the combined
        # sum, each server's shard as the one process's servers do; the step times, every
        # worker's row (ranks S and up) and the /servers rows (a row per server per step, its
        # shard's floats and bytes) are the one process's. FMB with 2 servers on 2 and 3
        # ranks, AMB with 3 on 2; a run stopped at step 6 and resumed on 3 ranks: the straight
        # run's bits.
        # Rank 2 (COMMON's slowed one) is a server with 3 servers: rank 4 is slowed instead.
        slowed = [a if a != "2=1.5" else "4=1.5" for a in COMMON]
        cases = [
            ("sfmb", "mb-train-fmb", ["--servers", "2"], (2, 3)),
            ("samb", "mb-train-amb", [*AMB, "--servers", "3"], (2,)),
        ]
        runs = []
        for name, tool, extra, ranks in cases:
            args = ["--comm", "ps", *extra, "--emulate", "8"]
            runs += [(f"{name}-one", tool, args, 0, False, slowed),
                     *[(f"{name}-r{r}", tool, args, r, False, slowed) for r in ranks]]
        resumed = ["--comm", "ps", "--servers", "2", "--emulate", "8"]
        self.together(*[lambda run=run: self.train(*run) for run in runs],
                      lambda: self.stopped_and_resumed("sresumed", "mb-train-fmb", resumed, 3,
                                                       common=slowed))
        for name, ranks in (("sfmb", 2), ("sfmb", 3), ("samb", 2)):
            with self.subTest(run=f"{name}-r{ranks}"):
                self.assert_close(f"{name}-r{ranks}", f"{name}-one")
        self.assert_same_bits("sresumed", "sfmb-r3", skip={"epoch"})
        for name, ranks, servers in (("sfmb", 3, 2), ("samb", 2, 3)):
            rows = {}
            for run in ("one", f"r{ranks}"):
                with h5py.File(self.path(f"{name}-{run}-log.h5"), "r") as log:
                    rows[run] = {column: log["servers"][column][...].tolist()
                                 for column in ("step", "rank", "floats", "bytes_received")}
                    self.assertEqual(sorted(set(log["workers/rank"][...].tolist())),
                                     list(range(servers, servers + 8)))
            self.assertEqual(rows[f"r{ranks}"], rows["one"])
            self.assertEqual(rows["one"]["rank"], list(range(servers)) * 12)


    def test_several_asynchronous_servers_on_shares_are_the_one_process_run(self):
        # --servers S --async: every rank plays every server's loop as the one process does, the
        # servers taking turns in one order on every rank, a round's ready time and its
        # gradient, state and report broadcast from its worker's host: the one process's bits
        # for every R, the /servers rows included. FMB with 2 servers and K-async on 2 and 3
        # ranks, AMB with 3 servers and 2 gradients an update on 2; an AMB run (adam) stopped at
        # step 6 and resumed on 3 ranks (the servers' optimizer shards from rank 0's checkpoint)
        # against the same in one process. Several asynchronous servers evaluate at the end only.
        # Rank 2 (COMMON's slowed one) is a server with 3 servers: rank 4 is slowed instead.
        common = [a if a != "2=1.5" else "4=1.5" for a in COMMON if a not in ("--eval-every", "6")]
        cases = [
            ("asfmb", "mb-train-fmb", ["--servers", "2", "--k-async", "3"], (2, 3)),
            ("asamb", "mb-train-amb", [*AMB, "--servers", "3", "--async-min-grads", "2"], (2,)),
        ]
        runs = []
        for name, tool, extra, ranks in cases:
            args = ["--comm", "ps", "--async", *extra, "--emulate", "8"]
            runs += [(f"{name}-one", tool, args, 0), *[(f"{name}-r{r}", tool, args, r)
                                                       for r in ranks]]
        resumed = [*AMB, "--comm", "ps", "--async", "--servers", "2", "--optimizer", "adam",
                   "--emulate", "8"]
        self.together(*[lambda run=run: self.train(*run, common=common) for run in runs],
                      *[lambda name=name, ranks=ranks: self.stopped_and_resumed(
                          name, "mb-train-amb", resumed, ranks, common=common)
                        for name, ranks in (("asresumed-one", 0), ("asresumed-r3", 3))])
        for name, _, extra, ranks in cases:
            servers = int(extra[extra.index("--servers") + 1])
            for r in ranks:
                with self.subTest(run=f"{name}-r{r}"):
                    self.assert_same_bits(f"{name}-r{r}", f"{name}-one")
                    rows = {}
                    for run in ("one", f"r{r}"):
                        with h5py.File(self.path(f"{name}-{run}-log.h5"), "r") as log:
                            rows[run] = {column: log["servers"][column][...].tolist()
                                         for column in ("step", "rank", "floats",
                                                        "bytes_received")}
                    self.assertEqual(rows[f"r{r}"], rows["one"])
                    self.assertEqual(sorted(set(rows["one"]["rank"])), list(range(servers)))
        self.assert_same_bits("asresumed-r3", "asresumed-one")
        with h5py.File(self.path("asfmb-r3-log.h5"), "r") as log:
            # Taken gradients of workers of every share (0-2, 3-5, 6-7: ranks 2-4, 5-7, 8-9).
            workers = log["workers/rank"][...] - 2
            self.assertEqual({int(w) // 3 for w in workers}, {0, 1, 2})
            self.assertGreater(log["workers/staleness"][...].max(), 0)
        with h5py.File(self.path("asresumed-r3-log.h5"), "r") as log:
            self.assertEqual(log["steps/step"][...].tolist(), list(range(1, 13)))
        with h5py.File(self.path("asresumed-r3.h5"), "r") as checkpoint:
            self.assertTrue(any(name.startswith("optimizer") for name in checkpoint))

if __name__ == "__main__":
    mbtest.main()
