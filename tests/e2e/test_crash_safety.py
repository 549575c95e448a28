"""Crash safety, measured: mb-train-fmb killed with SIGKILL at random moments, a full disk under
the metric log or the checkpoint, and a rank killed under mpirun.

After every kill the log opens and holds every step from 1 up to its last complete flush (the
rows that every column holds: a kill inside a flush leaves columns of different lengths, as
mbkit-formats(5) allows), with the losses of an uninterrupted run; the checkpoint is a complete
one (a step the run checkpoints at, every array readable); and `--resume auto` carries on so
that, after 20 kills, the final checkpoint and log are bit for bit those of the uninterrupted
run. Prints what it saw (kills, checkpoints, runs that ended before their kill) for the record.
"""

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

import h5py
import numpy as np

import mbtest

MPIRUN = shutil.which("mpirun")
STEPS = 1200
EVERY = 20
KILLS = 20


def arrays_of(path):
    """Every array of a checkpoint, by group/name."""
    with h5py.File(path, "r") as f:
        return {f"{group}/{name}": f[group][name][()]
                for group in ("params", "state", "optimizer") if group in f
                for name in f[group]}


class CrashSafety(mbtest.ToolTestCase):
    @classmethod
    def setUpClass(cls):
        cls.shared = tempfile.mkdtemp(prefix="mbkit-e2e-crash-")
        cls.data = os.path.join(cls.shared, "data.h5")
        result = mbtest.mb_dataset("synth", "images", "--shape", "1,16,16", "--classes", "10",
                                   "--train", "2048", "--test", "256", "-o", cls.data,
                                   cwd=cls.shared)
        assert result.rc == 0, repr(result)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.shared, ignore_errors=True)

    def train_command(self, *extra):
        return [mbtest.tool("mb-train-fmb"), "--data", self.data, "--model", "mlp", "--hidden",
                "128", "--optimizer", "adam", "--lr", "0.001", "--threads", "1", "-q",
                "--seed", "11", *extra]

    def check_log(self, log, reference_losses, at_least, context="", complete=False):
        """The log opens; n, the rows that every column of /steps holds, is >= at_least, and its
        steps are 1..n with the uninterrupted run's losses. The writer's HDF5 puts each column's
        new rows in the file as it goes, so a kill inside a flush can leave the step column at
        20 rows and the loss column at 0 (as once in CI): only `complete` (a run that ended)
        asks for columns of one length. `context` (what the last killed run printed) goes into
        the failure messages."""
        with h5py.File(log, "r", libver="latest", swmr=True) as f:
            columns = {name: column[()] for name, column in f["steps"].items()}
            started = mbtest.text_attrs(f).get("start_time")
        lengths = {name: len(values) for name, values in columns.items()}
        n = min(lengths.values())
        context = f"column lengths {lengths}; {context}"
        if complete:
            self.assertEqual(set(lengths.values()), {n}, msg=context)
        np.testing.assert_array_equal(columns["step"][:n], np.arange(1, n + 1), err_msg=context)
        np.testing.assert_array_equal(columns["loss"][:n], reference_losses[:n], err_msg=context)
        self.assertGreaterEqual(n, at_least, msg=f"the log (started {started}) ends at step {n}, "
                                                 f"before the checkpoint's step; {context}")
        return n

    def check_checkpoint(self, path, reference):
        """A complete checkpoint: a step the run checkpoints at, every array present."""
        with h5py.File(path, "r") as f:
            step = int(mbtest.text_attrs(f)["step"])
        self.assertEqual(step % EVERY, 0, msg=f"checkpoint at step {step}")
        arrays = arrays_of(path)
        self.assertEqual(sorted(arrays), sorted(reference), msg="checkpoint arrays")
        return step

    def test_kill_9_at_random_moments_then_resume_bit_for_bit(self):
        common = ["--steps", str(STEPS), "--checkpoint-every", str(EVERY), "--flush-interval",
                  "0.05"]
        started = time.monotonic()
        straight = mbtest.run(self.train_command(*common, "--checkpoint", "ref.h5", "--log",
                                                 "ref-log.h5"), cwd=self.dir, env=self.env)
        self.assertSucceeded(straight)
        straight_seconds = time.monotonic() - started
        reference = arrays_of(self.path("ref.h5"))
        with h5py.File(self.path("ref-log.h5"), "r") as f:
            reference_losses = f["steps/loss"][()]

        rng = random.Random(20261126)
        run = self.train_command(*common, "--checkpoint", "ck.h5", "--log", "run.h5", "--resume",
                                 "auto")
        checkpoint_step, kills, finished, checkpoints = 0, 0, 0, set()
        while kills < KILLS:
            # Killed before its first checkpoint, a run leaves a log and nothing to resume: the
            # next one starts over (test_resume_auto_without_a_checkpoint_starts_over).
            process = subprocess.Popen(run, cwd=self.dir, env=self.env,
                                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            # Moments from start-up to well into training: each run gets a random share of
            # what the whole run takes, so kills land in start-up, resume, steps, log flushes
            # and checkpoint writes.
            moment = rng.uniform(0.0, straight_seconds / 4)
            time.sleep(moment)
            if process.poll() is not None:
                err = process.communicate()[1].decode()
                self.assertEqual(process.returncode, 0, msg=err)
                finished += 1
                break
            process.kill()
            err = process.communicate()[1].decode()
            kills += 1
            if os.path.exists(self.path("ck.h5")):
                step = self.check_checkpoint(self.path("ck.h5"), reference)
                self.assertGreaterEqual(step, checkpoint_step, msg="the checkpoint went back")
                checkpoint_step = step
                checkpoints.add(step)
            if os.path.exists(self.path("run.h5")):
                self.check_log(self.path("run.h5"), reference_losses, checkpoint_step,
                               f"kill {kills} after {moment:.3f} s; its stderr: {err!r}")
        # Then to the end, resuming from whatever the last kill left.
        final = mbtest.run(run, cwd=self.dir, env=self.env)
        self.assertSucceeded(final)
        resumed = arrays_of(self.path("ck.h5"))
        for name, values in reference.items():
            np.testing.assert_array_equal(resumed[name], values, err_msg=name)
        self.assertEqual(self.check_log(self.path("run.h5"), reference_losses, STEPS,
                                        complete=True), STEPS)
        self.assertNoStrayFiles()
        print(f"\ncrash safety: {kills} kills with SIGKILL, {len(checkpoints)} distinct "
              f"checkpoints seen (last step {checkpoint_step}), {finished} runs ended before "
              f"their kill; the uninterrupted run took {straight_seconds:.1f} s", file=sys.stderr)

    def test_resume_auto_without_a_checkpoint_starts_over(self):
        # A job killed before its first checkpoint and submitted again with the same command:
        # there is a log and nothing to resume from, so the run starts over, replacing the log.
        common = ["--checkpoint", "ck.h5", "--log", "run.h5", "--resume", "auto",
                  "--flush-interval", "0.01", "--hidden", "8"]
        process = subprocess.Popen(self.train_command(*common, "--steps", "100000000"),
                                   cwd=self.dir, env=self.env, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.PIPE)
        deadline = time.monotonic() + 60
        rows = 0
        while rows < 5 and time.monotonic() < deadline:
            try:  # without the file lock, as mbtest.wait_for_steps says
                with h5py.File(self.path("run.h5"), "r", libver="latest", swmr=True,
                               locking=False) as f:
                    rows = len(f["steps/step"])
            except (OSError, KeyError):
                pass
            time.sleep(0.05)
        process.kill()
        process.communicate()
        self.assertGreaterEqual(rows, 5)
        self.assertFalse(os.path.exists(self.path("ck.h5")))
        # Without -q, to see the line that says so.
        loud = [a for a in self.train_command(*common, "--steps", "3") if a != "-q"]
        again = mbtest.run(loud, cwd=self.dir, env=self.env)
        self.assertSucceeded(again)
        self.assertIn("--resume auto: no checkpoint ck.h5 to resume from; starting over, "
                      "replacing the log run.h5", again.err)
        with h5py.File(self.path("run.h5"), "r") as f:
            np.testing.assert_array_equal(f["steps/step"][()], [1, 2, 3])
            losses = f["steps/loss"][()]
        # The same as a run that never had a log before it.
        fresh = mbtest.run(self.train_command("--checkpoint", "fresh-ck.h5", "--log", "fresh.h5",
                                              "--hidden", "8", "--steps", "3"),
                           cwd=self.dir, env=self.env)
        self.assertSucceeded(fresh)
        with h5py.File(self.path("fresh.h5"), "r") as f:
            np.testing.assert_array_equal(f["steps/loss"][()], losses)
        self.assertNoStrayFiles()
        # Only a metric log is replaced that way: anything else --log names needs --force.
        os.remove(self.path("ck.h5"))
        with open(self.path("notes.h5"), "w") as f:
            f.write("not a log\n")
        refused = mbtest.run(self.train_command(
            "--checkpoint", "ck.h5", "--log", "notes.h5", "--resume", "auto", "--steps", "3"),
            cwd=self.dir, env=self.env)
        self.assertFailsWith(refused, 3, "notes.h5")
        self.assertIn("--force", refused.err)
        with open(self.path("notes.h5")) as f:
            self.assertEqual(f.read(), "not a log\n")
        self.assertFalse(os.path.exists(self.path("ck.h5")))

    # -- full disks -------------------------------------------------------------------------

    def test_file_size_limit_under_the_log_ends_with_one_line(self):
        # RLIMIT_FSIZE (with SIGXFSZ ignored, writes past it fail with EFBIG, as ENOSPC would)
        # hits the log first. The limit holds for every file, so the final checkpoint may fail
        # too (the tmpfs test below gives the log a disk of its own); either way: one line,
        # status 1, no crash at exit (there was a SIGSEGV), no temporaries left.
        completed = self.run_with_file_size_limit(self.train_command(
            "--hidden", "8", "--steps", "100000000", "--log", "run.h5", "--flush-interval", "0.01",
            "--checkpoint", "ck.h5"), 400, timeout=300)
        self.assertCannotWrite(completed)
        self.assertNoStrayFiles()
        # Not yet true: the log cut at the limit does not open (HDF5: "truncated file"), its
        # superblock records an end of file past what could be written.

    def mount_tmpfs(self, name, size):
        directory = self.path(name)
        os.mkdir(directory)
        mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs",
                                  directory], capture_output=True, text=True)
        if mounted.returncode != 0:
            self.skipTest(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
        self.addCleanup(subprocess.run, ["umount", directory], capture_output=True)
        return directory

    def test_full_tmpfs_under_the_log_still_saves_the_checkpoint(self):
        disk = self.mount_tmpfs("small", "256k")
        log = os.path.join(disk, "run.h5")
        result = mbtest.run(self.train_command(
            "--hidden", "8", "--steps", "100000000", "--log", log, "--flush-interval", "0.01",
            "--checkpoint", "ck.h5"), cwd=self.dir, env=self.env)
        self.assertFailsWith(result, 1, "No space left on device")
        self.assertIn("state saved in ck.h5", result.err)
        with h5py.File(self.path("ck.h5"), "r") as f:
            self.assertGreater(int(mbtest.text_attrs(f)["step"]), 0)
        self.assertNoStrayFiles(disk)

    def test_full_tmpfs_under_the_log_leaves_its_rows_complete_or_absent(self):
        # A disk that fills inside a flush once left the last evaluation row with its step
        # written and its accuracy not (mb-report: "final acc 0.00%", exit 0). The writer now
        # commits each table's row count after the rows are in the file, and readers take no
        # row past it. Where the disk fills moves with the free space (and with the wall
        # times' compressed size): at every one of these sizes, what mb-report, mb-plot and h5py
        # (by the rule of mbkit-formats(5)) read are the uninterrupted run's rows, and the
        # trainer ends with one line naming the log and the disk's error, status 1.
        train = ["--hidden", "8", "--eval-every", "7", "--test-size", "64",
                 "--flush-interval", "0.01"]
        self.assertSucceeded(mbtest.run(self.train_command(*train, "--steps", "700", "--log",
                                                           "ref.h5"), cwd=self.dir, env=self.env))
        with h5py.File(self.path("ref.h5"), "r") as f:
            ref_steps = {name: f["steps"][name][()] for name in ("step", "loss", "samples")}
            ref_eval = {name: f["eval"][name][()] for name in ("step", "loss", "accuracy")}
        plotted = False
        for kib in range(160, 260, 6):
            disk = self.mount_tmpfs(f"disk{kib}", f"{kib}k")
            log = os.path.join(disk, "run.h5")
            result = mbtest.run(self.train_command(*train, "--steps", "100000000", "--log", log),
                                cwd=self.dir, env=self.env)
            context = f"tmpfs of {kib} KiB: {result.err}"
            self.assertEqual(result.rc, 1, msg=context)
            self.assertEqual(len(result.err.strip().splitlines()), 1, msg=context)
            self.assertIn(f"cannot write {log}: No space left on device", result.err)
            with h5py.File(log, "r", libver="latest", swmr=True) as f:
                committed = dict(zip([t.decode() for t in f["committed_rows"].attrs["tables"]],
                                     f["committed_rows"][()]))
                steps = {name: f["steps"][name][:committed["steps"]] for name in ref_steps}
                evals = {name: f["eval"][name][:committed["eval"]] for name in ref_eval}
            n, e = len(steps["step"]), len(evals["step"])
            self.assertLess(n, len(ref_steps["step"]), msg=context)
            self.assertGreater(e, 0, msg=context)
            for name in ref_steps:
                np.testing.assert_array_equal(steps[name], ref_steps[name][:n], err_msg=context)
            for name in ref_eval:
                np.testing.assert_array_equal(evals[name], ref_eval[name][:e], err_msg=context)
            report = mbtest.run([mbtest.tool("mb-report"), "--json", log], cwd=self.dir,
                                env=self.env)
            self.assertSucceeded(report)
            run = json.loads(report.out)["runs"][0]
            self.assertEqual((run["steps"], run["evaluations"]), (n, e), msg=context)
            self.assertEqual(run["final_accuracy"], ref_eval["accuracy"][e - 1], msg=context)
            self.assertEqual(run["samples"], int(ref_steps["samples"][:n].sum()), msg=context)
            if not plotted:  # mb-plot reads through the same reader: once is enough
                plotted = True
                figure = self.path("accuracy.png")
                self.assertSucceeded(mbtest.run([mbtest.tool("mb-plot"), log, "--type",
                                                 "accuracy-vs-step", "-o", figure], cwd=self.dir,
                                                env=self.env))
                self.assertTrue(os.path.exists(figure))
            self.assertNoStrayFiles(disk)

    def test_full_tmpfs_under_the_checkpoint_keeps_the_previous_one(self):
        self.assertSucceeded(mbtest.run(self.train_command(
            "--hidden", "64", "--steps", "2", "--checkpoint", "first.h5"), cwd=self.dir,
            env=self.env))
        # Room for the checkpoint and half of another: the second write cannot complete.
        size = os.path.getsize(self.path("first.h5"))
        disk = self.mount_tmpfs("small", f"{(size * 3 // 2) // 4096 * 4096 + 4096}")
        ck = os.path.join(disk, "ck.h5")
        shutil.copy(self.path("first.h5"), ck)
        before = mbtest.sha256(ck)
        result = mbtest.run(self.train_command(
            "--hidden", "64", "--steps", "6", "--checkpoint", ck, "--resume", ck, "--log",
            "run.h5"), cwd=self.dir, env=self.env)
        self.assertFailsWith(result, 1, "No space left on device")
        self.assertIn("ck.h5", result.err)
        self.assertEqual(mbtest.sha256(ck), before)
        self.assertNoStrayFiles(disk)
        # The log is closed properly and holds the steps that ran.
        with h5py.File(self.path("run.h5"), "r") as f:
            np.testing.assert_array_equal(f["steps/step"][()], np.arange(3, 7))

    # -- a rank killed under mpirun ---------------------------------------------------------

    def test_kill_9_of_a_rank_under_mpirun(self):
        self.assertIsNotNone(MPIRUN, "mpirun (openmpi-bin) is required")
        job = subprocess.Popen([MPIRUN, "--oversubscribe", "-n", "3", *self.train_command(
            "--steps", "100000000", "--log", "run.h5", "--flush-interval", "0.1",
            "--batch-size", "8")], cwd=self.dir, env=self.env, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True)
        pid = self.rank_pid(2)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:  # without the file lock, as mbtest.wait_for_steps says
                with h5py.File(self.path("run.h5"), "r", libver="latest", swmr=True,
                               locking=False) as f:
                    if len(f["steps/step"]) >= 20:
                        break
            except (OSError, KeyError):
                pass
            time.sleep(0.1)
        killed = time.monotonic()
        os.kill(pid, signal.SIGKILL)
        _, err = job.communicate(timeout=60)
        # mpirun ends the job at once and exits with the dead rank's status, 128 + SIGKILL: the
        # other ranks are ended by mpirun before any could report the loss (README.md).
        self.assertEqual(job.returncode, 128 + signal.SIGKILL, msg=err)
        self.assertLess(time.monotonic() - killed, 15)
        self.assertRegex(err, r"rank 2 .*exited on signal 9", msg=err)

    def rank_pid(self, rank, timeout=30):
        """The PID of this test's training process of `rank` (its TMPDIR is this test's)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for entry in os.listdir("/proc"):
                if not entry.isdigit():
                    continue
                try:
                    with open(f"/proc/{entry}/cmdline", "rb") as f:
                        argv = f.read().split(b"\0")
                    if not argv[0].endswith(b"mb-train-fmb"):
                        continue
                    with open(f"/proc/{entry}/environ", "rb") as f:
                        environ = dict(item.split(b"=", 1) for item in f.read().split(b"\0")
                                       if b"=" in item)
                    if int(environ.get(b"OMPI_COMM_WORLD_RANK", b"-1")) == rank and \
                            environ.get(b"TMPDIR") == self.dir.encode():
                        return int(entry)
                except (OSError, ValueError):
                    continue
            time.sleep(0.1)
        self.fail(f"rank {rank} did not start")


if __name__ == "__main__":
    # The tests at once, three at a time (each in its own directory, the class's data made
    # once before them): most of each is the tools' start-up and end, waits that overlap.
    mbtest.main(at_once=3)
