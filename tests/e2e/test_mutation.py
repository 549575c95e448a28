"""Damaged files: random bytes and bits flipped in, and truncations of, a small dataset, a
checkpoint and a metric log (fixed seed); and damage on purpose: the chunk index (in files of
the HDF5 1.8 format, which checksums no B-tree, one field of an entry: a chunk's coordinates,
stored size, filter mask or address; mbkit now writes 1.10's, whose indexes are checksummed, so
an older dataset from the fuzz corpus stands in for such files)
and the messages of object headers that say how values are stored (dataspace, datatype, layout,
filter pipeline), with the header's checksum computed again as a hostile editor would. Every damaged copy is either refused (exit 3, one line naming
the file) or reads back exactly as the undamaged file did, h5py (an independent reader) seeing
the same values: never a signal, never a hang, never different numbers.

Run by hand with MBKIT_MUTATION_REPORT=1 to print the counts per kind and way of damage;
MBKIT_MUTANTS sets the number of random mutants per kind (default 40), MBKIT_TARGETED_MUTANTS
the number of each kind of damage on purpose (default 12).
"""

import concurrent.futures
import os
import random
import shutil
import struct
import subprocess
import sys
import unittest

import h5py
import numpy as np

import mbtest

SEED = 21
MUTANTS = int(os.environ.get("MBKIT_MUTANTS", "40"))
TARGETED_MUTANTS = int(os.environ.get("MBKIT_TARGETED_MUTANTS", "12"))
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


def lookup3(data):
    """Bob Jenkins' lookup3 hashlittle with initial value 0: HDF5's metadata checksum."""
    mask = 0xffffffff

    def rot(x, k):
        return ((x << k) | (x >> (32 - k))) & mask

    length = len(data)
    a = b = c = (0xdeadbeef + length) & mask
    i = 0
    while length > 12:
        x, y, z = struct.unpack_from("<III", data, i)
        a, b, c = (a + x) & mask, (b + y) & mask, (c + z) & mask
        a = (a - c) & mask; a ^= rot(c, 4); c = (c + b) & mask
        b = (b - a) & mask; b ^= rot(a, 6); a = (a + c) & mask
        c = (c - b) & mask; c ^= rot(b, 8); b = (b + a) & mask
        a = (a - c) & mask; a ^= rot(c, 16); c = (c + b) & mask
        b = (b - a) & mask; b ^= rot(a, 19); a = (a + c) & mask
        c = (c - b) & mask; c ^= rot(b, 4); b = (b + a) & mask
        length -= 12
        i += 12
    if length == 0:
        return c
    x, y, z = struct.unpack("<III", bytes(data[i:i + length]) + bytes(12 - length))
    a, b, c = (a + x) & mask, (b + y) & mask, (c + z) & mask
    c ^= b; c = (c - rot(b, 14)) & mask
    a ^= c; a = (a - rot(c, 11)) & mask
    b ^= a; b = (b - rot(a, 25)) & mask
    c ^= b; c = (c - rot(b, 16)) & mask
    a ^= c; a = (a - rot(c, 4)) & mask
    b ^= a; b = (b - rot(a, 14)) & mask
    c ^= b; c = (c - rot(b, 24)) & mask
    return c


# Object header messages that say how a dataset's values are stored. The fill value message
# (5) is left out: HDF5 1.10.8's H5Dopen2 reads past a fill value message whose "defined" flag
# is set without a value following, and crashes (SIGSEGV in H5O_msg_read; 2 of 900 mutants).
# Only an edit that computes the header's checksum again gets there, and mbkit does not yet
# check a header's messages before HDF5 decodes them.
STORAGE_MESSAGES = {1: "dataspace", 3: "datatype", 8: "layout", 11: "filter pipeline"}


def object_header_messages(data):
    """(header start, checksummed end, message type, body offset, body size) of each message
    of STORAGE_MESSAGES in the first block of every version 2 object header."""
    found = []
    at = data.find(b"OHDR")
    while at >= 0:
        flags = data[at + 5] if at + 6 <= len(data) else 0
        if data[at + 4] == 2:
            p = at + 6 + (16 if flags & 0x20 else 0) + (4 if flags & 0x10 else 0)
            width = 1 << (flags & 3)
            end = p + width + int.from_bytes(data[p:p + width], "little")
            if end + 4 <= len(data) and struct.unpack_from("<I", data, end)[0] == lookup3(
                    data[at:end]):
                q = p + width
                while q + 4 <= end:
                    kind, size = data[q], struct.unpack_from("<H", data, q + 1)[0]
                    body = q + 4 + (2 if flags & 0x04 else 0)
                    if body + size > end:
                        break
                    if kind in STORAGE_MESSAGES and size > 0:
                        found.append((at, end, kind, body, size))
                    q = body + size
        at = data.find(b"OHDR", at + 1)
    return found


def chunk_index_entries(path, data):
    """Where the chunk index records each chunk: (name, rank, chunk shape, size, position of
    its address, position of its version 1 B-tree key or None for another kind of index)."""
    entries = []

    def visit(name, obj):
        if not isinstance(obj, h5py.Dataset) or obj.chunks is None:
            return
        for i in range(obj.id.get_num_chunks()):
            info = obj.id.get_chunk_info(i)
            address = struct.pack("<Q", info.byte_offset)
            key_size = 8 + 8 * (obj.ndim + 1)
            at = data.find(address)
            while at >= 0:
                key = data[at - key_size:at] if at >= key_size else b""
                expected = struct.pack("<II", info.size, 0) + struct.pack(
                    f"<{obj.ndim + 1}Q", *info.chunk_offset, 0)
                entries.append((name, obj.ndim, obj.chunks, info.size, at,
                                at - key_size if key == expected else None))
                at = data.find(address, at + 1)

    with h5py.File(path, "r") as f:
        f.visititems(visit)
    return entries


def damage_chunk_index(data, entries, rng):
    """A copy of `data` with one field of one chunk index entry changed, and how."""
    data = bytearray(data)
    name, rank, chunk, size, address_at, key_at = rng.choice(entries)
    field = rng.choice(("offset", "size", "filter mask", "address"))
    if key_at is None:  # a checksummed index (HDF5 1.10's): any of its bytes
        data[address_at + rng.randrange(12)] ^= 1 << rng.randrange(8)
        return "checksummed index", bytes(data)
    if field == "offset":
        d = rng.randrange(rank)
        at = key_at + 8 + 8 * d
        old = struct.unpack_from("<Q", data, at)[0]
        new = rng.choice((old + chunk[d], 32768, old ^ (1 << rng.randrange(64))))
        struct.pack_into("<Q", data, at, new & (2**64 - 1))
    elif field == "size":
        new = rng.choice((0, size - 1, size + 1, size ^ (1 << rng.randrange(32))))
        struct.pack_into("<I", data, key_at, new & 0xffffffff)
    elif field == "filter mask":
        struct.pack_into("<I", data, key_at + 4,
                         rng.choice((1, 0xffffffff, 1 << rng.randrange(32))))
    else:
        old = struct.unpack_from("<Q", data, address_at)[0]
        others = [struct.unpack_from("<Q", data, e[4])[0] for e in entries if e[4] != address_at]
        choices = [old + 1, old - 1, old + 8, old ^ (1 << rng.randrange(40))]
        if others:
            choices.append(rng.choice(others))  # two entries pointing at one chunk
        struct.pack_into("<Q", data, address_at, rng.choice(choices) & (2**64 - 1))
    return f"index {field}", bytes(data)


def damage_object_header(data, messages, rng):
    """A copy of `data` with one bit of a storage message flipped and its object header's
    checksum computed again, and how."""
    data = bytearray(data)
    start, end, kind, body, size = rng.choice(messages)
    data[body + rng.randrange(size)] ^= 1 << rng.randrange(8)
    struct.pack_into("<I", data, end, lookup3(bytes(data[start:end])))
    return f"header {STORAGE_MESSAGES[kind]}", bytes(data)


def content(path):
    """Everything h5py reads from the file (attributes, datasets), or None when it cannot."""
    def value(v):
        # Numbers by value: the same labels stored as another integer type are the same.
        array = np.asarray(v)
        if array.dtype.kind in "iub":
            return ("integers", array.shape, array.tolist())
        if array.dtype.kind == "f":
            return ("floats", array.shape, array.astype(np.float64).tobytes())
        return (str(array.dtype), array.shape, repr(array.tolist()))

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
            # A dataset of older mbkit, in HDF5's 1.8-era format: a chunk index of B-trees,
            # which no checksum covers; only its chunk index is damaged here.
            "older dataset": ("old.h5", lambda name: [mbtest.tool("mb-dataset"), "verify", name]),
        }
        shutil.copy(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fuzz",
                                 "corpus", "dataset_file", "seed_ds.h5"), self.path("old.h5"))

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
        entries = chunk_index_entries(self.path(name), seed_bytes)
        if kind == "older dataset":
            self.assertTrue(all(e[5] is not None for e in entries), "not a B-tree chunk index")
            mutants = [damage_chunk_index(seed_bytes, entries, rng)
                       for _ in range(2 * TARGETED_MUTANTS)]
        else:
            mutants = [mutate(seed_bytes, rng) for _ in range(MUTANTS)]
            messages = object_header_messages(seed_bytes)
            self.assertTrue(entries and messages, f"{kind}: no chunk index or object header")
            if kind == "log":  # a shorter extendible column is a valid log: not damage to see
                messages = [m for m in messages if STORAGE_MESSAGES[m[2]] != "dataspace"]
            for _ in range(TARGETED_MUTANTS):
                mutants.append(damage_chunk_index(seed_bytes, entries, rng))
                mutants.append(damage_object_header(seed_bytes, messages, rng))
        jobs = []
        for i, (how, data) in enumerate(mutants):
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
        counts, by_damage = {}, {}
        for _, how, outcome, _ in results:
            counts[outcome] = counts.get(outcome, 0) + 1
            by_damage.setdefault(how, {}).setdefault(outcome, 0)
            by_damage[how][outcome] += 1
        if os.environ.get("MBKIT_MUTATION_REPORT"):
            print(f"\n{kind}: {len(results)} mutants: {counts}", file=sys.stderr)
            for how, outcomes in sorted(by_damage.items()):
                print(f"  {how}: {outcomes}", file=sys.stderr)
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
        self.check_kind("older dataset")

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
