"""Damaged files: random bytes and bits flipped in, and truncations of, a small dataset, a
checkpoint and a metric log (fixed seed). Every damaged copy is either refused (exit 3, one line
naming the file) or reads back exactly as the undamaged file did (the damage fell in unused
space): never a signal, never a hang, never different numbers.

Run by hand with MBKIT_MUTATION_REPORT=1 to print the counts per kind; MBKIT_MUTANTS sets the
number of mutants per kind (default 40).
"""

import concurrent.futures
import os
import random
import subprocess
import sys
import unittest

import h5py
import numpy as np

import mbtest

SEED = 21
MUTANTS = int(os.environ.get("MBKIT_MUTANTS", "40"))
TIMEOUT = 20  # seconds per run; a healthy one takes well under one


def mutate(data, rng):
    """A damaged copy of `data`: some bytes replaced, one bit flipped, or the end cut off."""
    data = bytearray(data)
    kind = rng.choice(("bytes", "bit", "truncate"))
    if kind == "bytes":
        for _ in range(rng.randint(1, 4)):
            data[rng.randrange(len(data))] = rng.randrange(256)
    elif kind == "bit":
        data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
    else:
        del data[rng.randrange(len(data)):]
    return kind, bytes(data)


def content(path):
    """Everything h5py reads from the file (attributes, datasets), or None when it cannot."""
    def value(v):
        array = np.asarray(v)
        return (str(array.dtype), array.shape, array.tobytes() if array.dtype != object
                else repr(array.tolist()))

    try:
        items = {}
        with h5py.File(path, "r") as f:
            items["/"] = sorted((k, value(v)) for k, v in f.attrs.items())

            def visit(name, obj):
                entry = [sorted((k, value(v)) for k, v in obj.attrs.items())]
                if isinstance(obj, h5py.Dataset):
                    entry.append(value(obj[()]))
                items[name] = entry

            f.visititems(visit)
        return items
    except Exception:  # any failure of h5py on a damaged file
        return None


class Outcome:
    REFUSED, UNCHANGED, UNREAD, CRASH, HANG, SILENT, WRONG_EXIT, NOISY = (
        "refused", "unchanged", "unread", "crash", "hang", "silent", "wrong exit", "noisy")


class MutationTest(mbtest.ToolTestCase):
    def setUp(self):
        super().setUp()
        data = self.path("data.h5")
        self.assertSucceeded(self.mb_dataset("synth", "toy", "-o", data, "--train", "96", "--test",
                                             "32", "--learnable", "--seed", "3"))
        train = mbtest.run([mbtest.tool("mb-train-fmb"), "--data", data, "--model", "mlp",
                            "--hidden", "8", "--batch-size", "16", "--steps", "12",
                            "--eval-every", "6", "--threads", "1", "-q", "--seed", "4",
                            "--checkpoint", "ck.h5", "--log", "log.h5"],
                           cwd=self.dir, env=self.env, timeout=120)
        self.assertSucceeded(train)
        self.data = data
        # Each kind: the seed file's name and a command that reads it. verify and mb-eval read all
        # of a dataset or checkpoint; mb-plot's panel reads most columns of a log.
        self.kinds = {
            "dataset": ("data.h5", lambda name: [mbtest.tool("mb-dataset"), "verify", name]),
            "checkpoint": ("ck.h5", lambda name: [mbtest.tool("mb-eval"), name, "--data", data,
                                                  "--threads", "1"]),
            "log": ("log.h5", lambda name: [mbtest.tool("mb-plot"), name, "--script", "script",
                                            "--csv", "-"]),
        }

    def run_one(self, directory, name, command):
        try:
            completed = subprocess.run([str(a) for a in command(name)], cwd=directory,
                                       env=self.env, capture_output=True, text=True,
                                       timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            return None
        return completed

    def classify(self, completed, baseline, original, mutant_path):
        if completed is None:
            return Outcome.HANG
        if completed.returncode < 0:
            return Outcome.CRASH
        if completed.returncode == 3:
            lines = completed.stderr.strip().splitlines()
            return Outcome.REFUSED if len(lines) == 1 else Outcome.NOISY
        if completed.returncode != 0:
            return Outcome.WRONG_EXIT
        if completed.stdout != baseline.stdout:
            return Outcome.SILENT
        # Same output: unchanged, or damage in data the tool did not read (its chunk checksums
        # are checked when read; metadata is all checked at open).
        return Outcome.UNCHANGED if content(mutant_path) == original else Outcome.UNREAD

    def mutate_kind(self, kind):
        name, command = self.kinds[kind]
        with open(self.path(name), "rb") as f:
            seed_bytes = f.read()
        base_dir = self.path(f"{kind}-base")
        os.mkdir(base_dir)
        with open(os.path.join(base_dir, name), "wb") as f:
            f.write(seed_bytes)
        baseline = self.run_one(base_dir, name, command)
        self.assertIsNotNone(baseline)
        self.assertEqual(baseline.returncode, 0, baseline.stderr)
        original = content(self.path(name))
        self.assertIsNotNone(original)

        rng = random.Random(f"{SEED}-{kind}")
        jobs = []
        for i in range(MUTANTS):
            how, data = mutate(seed_bytes, rng)
            directory = self.path(f"{kind}-{i}")
            os.mkdir(directory)
            with open(os.path.join(directory, name), "wb") as f:
                f.write(data)
            jobs.append((i, how, directory))

        def one(job):
            i, how, directory = job
            completed = self.run_one(directory, name, command)
            outcome = self.classify(completed, baseline, original, os.path.join(directory, name))
            detail = "" if completed is None else completed.stderr.strip()[-300:]
            return i, how, outcome, detail

        with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
            return list(pool.map(one, jobs))

    def check_kind(self, kind):
        results = self.mutate_kind(kind)
        counts = {}
        for _, _, outcome, _ in results:
            counts[outcome] = counts.get(outcome, 0) + 1
        if os.environ.get("MBKIT_MUTATION_REPORT"):
            print(f"\n{kind}: {len(results)} mutants: {counts}", file=sys.stderr)
        allowed = {Outcome.REFUSED, Outcome.UNCHANGED}
        if kind == "log":
            allowed.add(Outcome.UNREAD)
        bad = [r for r in results if r[2] not in allowed]
        self.assertEqual(bad, [], f"{kind}: {counts}")
        # The refusals name the damaged file.
        for _, _, outcome, detail in results:
            if outcome == Outcome.REFUSED:
                self.assertIn(self.kinds[kind][0], detail)

    def test_damaged_datasets(self):
        self.check_kind("dataset")

    def test_damaged_checkpoints(self):
        self.check_kind("checkpoint")

    def test_damaged_logs(self):
        self.check_kind("log")


class FaultTest(mbtest.ToolTestCase):
    """Writes onto a full disk, inputs that are not files, values that are not numbers."""

    def test_checkpoint_onto_a_full_disk(self):
        data = self.path("data.h5")
        self.assertSucceeded(self.mb_dataset("synth", "toy", "-o", data, "--train", "64", "--test",
                                             "16", "--seed", "3"))
        train = [mbtest.tool("mb-train-fmb"), "--data", data, "--model", "mlp", "--hidden", "300",
                 "--threads", "1", "-q", "--checkpoint", "ck.h5"]
        self.assertSucceeded(mbtest.run(train + ["--steps", "2"], cwd=self.dir, env=self.env))
        before = mbtest.sha256(self.path("ck.h5"))
        completed = self.run_with_file_size_limit(train + ["--steps", "6", "--resume", "ck.h5"],
                                                  100, timeout=120)
        self.assertCannotWrite(completed)
        self.assertEqual(mbtest.sha256(self.path("ck.h5")), before)
        self.assertNoStrayFiles()

    def test_a_fifo_is_refused_and_nan_separation_too(self):
        os.mkfifo(self.path("pipe.h5"))
        result = self.mb_dataset("verify", "pipe.h5", timeout=20)
        self.assertFailsWith(result, 3, "pipe.h5: not a regular file")
        result = self.mb_dataset("synth", "toy", "-o", "nan.h5", "--learnable", "--separation",
                                 "nan", timeout=20)
        self.assertFailsWith(result, 2, "--separation nan must be a finite value >= 0")


if __name__ == "__main__":
    mbtest.main()
