"""Shared helpers for mbkit's end-to-end tests.

The tests run the real binaries (from $MBKIT_BIN_DIR) in fresh temporary directories and check
what they leave behind with h5py and numpy, independently of mbkit's own reader. Inputs in the
published formats (IDX, CIFAR binary archives) are generated here, and a loopback HTTP server
stands in for the dataset mirrors.
"""

import concurrent.futures
import ctypes
import gzip
import hashlib
import http.server
import io
import os
import re
import shutil
import signal
import subprocess
import tarfile
import tempfile
import threading
import time
import unittest

import numpy as np

# OpenMP threads that wait at a barrier sleep at once instead of spinning first (libgomp's
# default), in every process the tests start (unless the caller chose a policy). Under ctest -j2
# the tests' processes outnumber the cores, and a spinning thread takes turns on a core with the
# thread it waits for: test_quickstart's mlp target (5 epochs, --threads 2) took 133 s (68 s of
# CPU) with other work on the machine, 14 s (7 s) with this. Only the timing changes: the
# reductions' order, hence the bits, is the same. (tests/CMakeLists.txt sets the same for the
# unit tests.)
os.environ.setdefault("OMP_WAIT_POLICY", "passive")

BIN_DIR = os.environ.get("MBKIT_BIN_DIR", "")
SOURCE_DIR = os.environ.get("MBKIT_SOURCE_DIR", "")
FASHION_DIR = "/usr/share/datasets/fashion-mnist"
FASHION_FILES = ["train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
                 "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"]


def tool(name):
    path = os.path.join(BIN_DIR, name)
    if not os.access(path, os.X_OK):
        raise RuntimeError(f"{path} is not built (set MBKIT_BIN_DIR)")
    return path


def clean_env(extra=None):
    """The environment the tools run in: no proxies (loopback must stay loopback), a private
    download cache, and permission for mpirun to run as root in CI containers."""
    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
    env.update({"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
                "OMPI_MCA_rmaps_base_oversubscribe": "1", "LC_ALL": "C"})
    if extra:
        env.update(extra)
    return env


class Result:
    def __init__(self, args, completed):
        self.args = args
        self.rc = completed.returncode
        self.out = completed.stdout
        self.err = completed.stderr

    def __repr__(self):
        return (f"command: {' '.join(self.args)}\nexit status: {self.rc}\n"
                f"stdout:\n{self.out}\nstderr:\n{self.err}")


def run(args, cwd=None, env=None, timeout=300):
    env = env or clean_env()
    session = None
    if os.path.basename(str(args[0])) == "mpirun":
        # An mpirun gets a TMPDIR of its own (removed after): mpiruns started at once in one
        # TMPDIR race to make Open MPI's session directory ("unable to create ... File exists").
        session = tempfile.mkdtemp(prefix="mpirun-", dir=env.get("TMPDIR") or None)
        env = dict(env, TMPDIR=session)
    try:
        completed = subprocess.run([str(a) for a in args], cwd=cwd, env=env,
                                   capture_output=True, text=True, timeout=timeout)
    finally:
        if session:
            shutil.rmtree(session, ignore_errors=True)
    return Result([str(a) for a in args], completed)


def mb_dataset(*args, cwd=None, env=None, timeout=300):
    return run([tool("mb-dataset"), *args], cwd=cwd, env=env, timeout=timeout)


def text_attrs(obj):
    """The attributes of an h5py file, group or dataset, strings as str: mbkit writes
    fixed-length strings (no global heap to damage), which h5py reads as bytes."""
    def decode(value):
        if isinstance(value, bytes):
            return value.decode()
        if isinstance(value, np.ndarray) and value.dtype.kind == "S":
            return [item.decode() for item in value]
        return value
    return {name: decode(value) for name, value in obj.attrs.items()}


def file_digest(path, algorithm):
    """The hex digest of a file's bytes with a hashlib algorithm ("sha256", "md5")."""
    digest = hashlib.new(algorithm)
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def sha256(path):
    return file_digest(path, "sha256")


def md5(path):
    return file_digest(path, "md5")


def parse_table(text, value=str):
    """The rows of a bench tool's table (nccl-tests style) as dicts keyed by the column names of
    the last '#' line before the first row, each value converted by `value`."""
    columns, rows = None, []
    for line in text.splitlines():
        if line.startswith("#"):
            if not rows:
                columns = line[1:].split()
            continue
        if line.strip():
            rows.append(dict(zip(columns, (value(v) for v in line.split()))))
    return columns, rows


# ------------------------------------------------------------------------------------------
# Published formats, generated.

def idx_bytes(array):
    """IDX encoding of a uint8 array (magic 0x0000080N, big-endian dimensions)."""
    if isinstance(array, (bytes, bytearray)):
        array = np.frombuffer(bytes(array), dtype=np.uint8)
    array = np.ascontiguousarray(array, dtype=np.uint8)
    header = bytes([0, 0, 0x08, array.ndim])
    header += b"".join(int(d).to_bytes(4, "big") for d in array.shape)
    return header + array.tobytes()


def read_idx_gz(path):
    with gzip.open(path, "rb") as f:
        raw = f.read()
    ndim = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(raw[4 + 4 * ndim:], dtype=np.uint8).reshape(dims)


def fashion_mnist(directory, env=None):
    """The path of Fashion-MNIST as mb-dataset fetch writes it: the file CTest's fixture fetched
    once for the tests that only read it (MBKIT_TEST_FASHION_MNIST, tests/CMakeLists.txt), or,
    run without it, DIRECTORY/fmnist.h5 fetched now."""
    shared = os.environ.get("MBKIT_TEST_FASHION_MNIST")
    if shared:
        if not os.path.isfile(shared):
            raise RuntimeError(f"MBKIT_TEST_FASHION_MNIST={shared}: no such file (the "
                               f"e2e.fixture.fashion_mnist test makes it)")
        return shared
    path = os.path.join(directory, "fmnist.h5")
    result = mb_dataset("fetch", "fashion-mnist", "-o", path, cwd=directory, env=env)
    if result.rc != 0:
        raise RuntimeError(repr(result))
    return path


def write_mnist_like(directory, n_train=120, n_test=40, seed=0, classes=10):
    """Writes the four gzip IDX files of an MNIST-format dataset under their published names.
    Returns (train_images, train_labels, test_images, test_labels)."""
    rng = np.random.default_rng(seed)
    arrays = (rng.integers(0, 256, (n_train, 28, 28), dtype=np.uint8),
              rng.integers(0, classes, n_train, dtype=np.uint8),
              rng.integers(0, 256, (n_test, 28, 28), dtype=np.uint8),
              rng.integers(0, classes, n_test, dtype=np.uint8))
    os.makedirs(directory, exist_ok=True)
    for name, array in zip(FASHION_FILES, arrays):
        with open(os.path.join(directory, name), "wb") as f:
            f.write(gzip.compress(idx_bytes(array), mtime=0))
    return arrays


def write_checksums(directory, names, path, kind="md5"):
    digest = md5 if kind == "md5" else sha256
    with open(path, "w") as f:
        for name in names:
            f.write(f"{digest(os.path.join(directory, name))}  {name}\n")


def write_cifar_archive(path, cifar100=False, per_batch=30, n_test=20, seed=0):
    """A CIFAR-10 or CIFAR-100 binary-version archive laid out as the published one.
    Returns (train_images (N,3,32,32), train_labels, test_images, test_labels, train_coarse,
    test_coarse)."""
    rng = np.random.default_rng(seed)
    classes = 100 if cifar100 else 10
    batches = 1 if cifar100 else 5
    n_train = per_batch * batches
    data = {}
    for split, count in (("train", n_train), ("test", n_test)):
        data[split] = (rng.integers(0, 256, (count, 3, 32, 32), dtype=np.uint8),
                       rng.integers(0, classes, count, dtype=np.uint8),
                       rng.integers(0, 20, count, dtype=np.uint8))

    def records(images, labels, coarse):
        rows = []
        for i in range(len(labels)):
            head = bytes([coarse[i], labels[i]]) if cifar100 else bytes([labels[i]])
            rows.append(head + images[i].tobytes())
        return b"".join(rows)

    members = {}
    if cifar100:
        top = "cifar-100-binary"
        members[f"{top}/train.bin"] = records(*data["train"])
        members[f"{top}/test.bin"] = records(*data["test"])
        members[f"{top}/fine_label_names.txt"] = "\n".join(f"fine{i}" for i in range(100)).encode()
        members[f"{top}/coarse_label_names.txt"] = "\n".join(f"coarse{i}" for i in range(20)).encode()
    else:
        top = "cifar-10-batches-bin"
        images, labels, coarse = data["train"]
        for b in range(batches):
            part = slice(b * per_batch, (b + 1) * per_batch)
            members[f"{top}/data_batch_{b + 1}.bin"] = records(images[part], labels[part], coarse[part])
        members[f"{top}/test_batch.bin"] = records(*data["test"])
        members[f"{top}/batches.meta.txt"] = b"\n".join(
            n.encode() for n in ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog",
                                 "horse", "ship", "truck"]) + b"\n\n"
    with tarfile.open(path, "w:gz") as archive:
        for name, content in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(content)
            archive.addfile(info, io.BytesIO(content))
    train, test = data["train"], data["test"]
    return train[0], train[1], test[0], test[1], train[2], test[2]


# ------------------------------------------------------------------------------------------
# A loopback HTTP server standing in for the dataset mirrors.

class LoopbackServer:
    """Serves `root` on 127.0.0.1 (a free port). Paths under /close/ send the full
    Content-Length but only half of the body, then close the connection; paths under /flaky/
    answer 503 to the first request for each file, then serve it."""

    def __init__(self, root):
        self.root = root
        self.requests = []
        self._flaky_seen = set()
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep test output quiet
                pass

            def do_GET(self):
                server.requests.append(self.path)
                path = self.path
                mode = "plain"
                for prefix in ("/close/", "/flaky/"):
                    if path.startswith(prefix):
                        mode, path = prefix.strip("/"), "/" + path[len(prefix):]
                local = os.path.join(server.root, path.lstrip("/"))
                if mode == "flaky" and path not in server._flaky_seen:
                    server._flaky_seen.add(path)
                    self.send_error(503, "try again")
                    return
                if not os.path.isfile(local):
                    self.send_error(404, "not found")
                    return
                with open(local, "rb") as f:
                    body = f.read()
                self.send_response(200)
                self.send_header("Content-Type", "application/octet-stream")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if mode == "close":
                    self.wfile.write(body[: len(body) // 2])
                    self.wfile.flush()
                    self.close_connection = True
                    return
                self.wfile.write(body)

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def url(self, path=""):
        return f"http://127.0.0.1:{self.port}/{path.lstrip('/')}"

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


# ------------------------------------------------------------------------------------------

class ToolTestCase(unittest.TestCase):
    """A test case with a fresh working directory and checks shared by the tool tests."""

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="mbkit-e2e-")
        self.cache = os.path.join(self.dir, "cache")
        self.env = clean_env({"XDG_CACHE_HOME": self.cache, "TMPDIR": self.dir})

    def tearDown(self):
        for root, dirs, _ in os.walk(self.dir):
            for d in dirs:
                os.chmod(os.path.join(root, d), 0o755)
        shutil.rmtree(self.dir, ignore_errors=True)

    def path(self, *parts):
        return os.path.join(self.dir, *parts)

    def mb_dataset(self, *args, timeout=300):
        return mb_dataset(*args, cwd=self.dir, env=self.env, timeout=timeout)

    def train_toy(self, program, name, common, args, ranks=0, extra=(), own_tmpdir=False):
        """Runs the trainer `program` on toy.h5 in the test's directory with `common`, `args`, a
        log NAME-log.h5, a checkpoint NAME.h5 and `extra` (under mpirun -n RANKS when ranks >
        0); checks that it succeeded and returns the result. `own_tmpdir`: mpirun in a TMPDIR
        of its own, for mpiruns started at once (they race to make one session directory:
        "unable to create the desired directory ... File exists")."""
        command = [tool(program), "--data", "toy.h5", *common, *args,
                   "--log", f"{name}-log.h5", "--checkpoint", f"{name}.h5", *extra]
        env = self.env
        if ranks > 0:
            command = [shutil.which("mpirun"), "--oversubscribe", "-n", str(ranks), *command]
            if own_tmpdir:
                env = dict(env, TMPDIR=self.path(f"tmp-{name}"))
                os.makedirs(env["TMPDIR"], exist_ok=True)
        result = run(command, cwd=self.dir, env=env, timeout=300)
        self.assertSucceeded(result)
        return result

    def assertSucceeded(self, result):
        self.assertEqual(result.rc, 0, msg=repr(result))

    def assertFailsWith(self, result, code, text):
        """Exit status `code`, exactly one line on stderr, naming what is wrong."""
        self.assertEqual(result.rc, code, msg=repr(result))
        lines = [line for line in result.err.splitlines() if line.strip()]
        self.assertEqual(len(lines), 1, msg=f"expected one error line\n{result!r}")
        self.assertIn(text, lines[0], msg=repr(result))
        self.assertIn("error:", lines[0], msg=repr(result))

    def assertUsageError(self, result, text, tool="mb-train-fmb"):
        """Exit status 2 and an error line from `tool` naming what is wrong; under mpirun the
        launcher adds notes of its own after it, so only the tool's lines are looked at."""
        self.assertEqual(result.rc, 2, msg=repr(result))
        lines = [line for line in result.err.splitlines() if tool in line]
        self.assertTrue(lines, msg=repr(result))
        self.assertIn("error:", lines[0], msg=repr(result))
        self.assertIn(text, lines[0], msg=repr(result))

    def wait_for_steps(self, log, steps, timeout=60):
        """Waits until a running job's metric log holds `steps` steps (read as SWMR, as the job
        writes it); fails the test after `timeout` seconds."""
        import h5py  # here, so that the tests that read no logs do not pay for the import
        deadline = time.time() + timeout
        while time.time() < deadline:
            # Without the file lock: the writer creates the log, closes it and opens it again
            # for SWMR writing, and a reader's shared lock taken in between fails that open
            # ("unable to lock file", the job ends with status 3; seen with ten jobs starting).
            try:
                with h5py.File(log, "r", libver="latest", swmr=True, locking=False) as f:
                    if len(f["steps/step"]) >= steps:
                        return
            except (OSError, KeyError):
                pass
            time.sleep(0.2)
        self.fail(f"{log} did not reach {steps} steps")

    def run_with_file_size_limit(self, args, blocks, timeout):
        """Runs `args` (in the test's directory) with every file it writes limited to `blocks`
        (ulimit -f): the limit stands in for a full disk (mounting a small tmpfs needs
        privileges); with SIGXFSZ ignored, writes past it fail with EFBIG as they would with
        ENOSPC. Returns the subprocess.CompletedProcess."""
        command = " ".join(f"'{a}'" for a in args)
        return subprocess.run(["sh", "-c", f"trap '' XFSZ; ulimit -f {blocks}; exec {command}"],
                              cwd=self.dir, env=self.env, capture_output=True, text=True,
                              timeout=timeout)

    def run_with_address_space_limit(self, args, kib, timeout=120):
        """Runs `args` (in the test's directory) with its address space limited to `kib` KiB
        (ulimit -v): an allocation past it fails at once, as on a machine without the memory,
        and nothing is touched. AddressSanitizer reserves terabytes of address space for its
        shadow memory and cannot start under such a limit: in such a build the test is skipped.
        Returns a Result."""
        if address_sanitized(args[0]):
            self.skipTest("AddressSanitizer cannot run under ulimit -v")
        command = " ".join(f"'{a}'" for a in args)
        completed = subprocess.run(["sh", "-c", f"ulimit -v {kib}; exec {command}"], cwd=self.dir,
                                   env=self.env, capture_output=True, text=True, timeout=timeout)
        return Result(args, completed)

    def assertCannotWrite(self, completed):
        """Status 1 and one line on stderr that names the write past the limit."""
        self.assertEqual(completed.returncode, 1, completed.stderr)
        lines = completed.stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, completed.stderr)
        self.assertIn("cannot write", lines[0])
        self.assertIn("File too large", lines[0])

    def assertNoStrayFiles(self, directory=None):
        """No temporaries (.NAME.tmp-XXXXXX) left anywhere below `directory`."""
        for root, _, files in os.walk(directory or self.dir):
            for name in files:
                self.assertNotIn(".tmp-", name, msg=f"stray temporary {os.path.join(root, name)}")


def main(at_once=1, first=()):
    """Runs the file's tests: one after the other, or `at_once` at a time (ConcurrentRunner),
    the tests named in `first` started first."""
    runner = ConcurrentRunner(at_once, first) if at_once > 1 else None
    unittest.main(verbosity=2, testRunner=runner)


class ConcurrentRunner(unittest.TextTestRunner):
    """Runs tests `width` at a time, each in a thread with a result of its own: for a file whose
    tests mostly wait (a job's end, a grace period), the waits overlap. Every test has its own
    directory and environment (ToolTestCase); what a class shares (setUpClass) is set up once
    before its tests and torn down after them all. A test's line is printed when it ends, every
    failure at the end. The tests named in `first` (the longest) start first."""

    def __init__(self, width, first=(), **kwargs):
        super().__init__(verbosity=2, **kwargs)
        self.width = width
        self.first = first
        self.lock = threading.Lock()

    @staticmethod
    def flatten(suite):
        for test in suite:
            if isinstance(test, unittest.TestSuite):
                yield from ConcurrentRunner.flatten(test)
            else:
                yield test

    def run_one(self, test):
        result = unittest.TestResult()
        started = time.perf_counter()
        test(result)
        outcome = ("FAIL" if result.failures else "ERROR" if result.errors else
                   f"skipped {result.skipped[0][1]!r}" if result.skipped else "ok")
        with self.lock:
            self.stream.writeln(f"{test} ... {outcome} ({time.perf_counter() - started:.1f} s)")
            self.stream.flush()
        return result

    def run(self, test):
        tests = sorted(self.flatten(test), key=lambda case: case._testMethodName not in self.first)
        classes = [cls for cls in dict.fromkeys(type(case) for case in tests)
                   if not getattr(cls, "__unittest_skip__", False)]
        started = time.perf_counter()
        set_up = []
        try:
            for cls in classes:
                cls.setUpClass()
                set_up.append(cls)
            with concurrent.futures.ThreadPoolExecutor(self.width) as pool:
                results = list(pool.map(self.run_one, tests))
        finally:
            for cls in reversed(set_up):
                try:
                    cls.tearDownClass()
                finally:
                    cls.doClassCleanups()
        merged = self._makeResult()
        for result in results:
            merged.testsRun += result.testsRun
            for name in ("failures", "errors", "skipped", "expectedFailures",
                         "unexpectedSuccesses"):
                getattr(merged, name).extend(getattr(result, name))
        merged.printErrors()
        self.stream.writeln(merged.separator2)
        self.stream.writeln(f"Ran {merged.testsRun} tests in "
                            f"{time.perf_counter() - started:.3f}s\n")
        counts = ", ".join(f"{name}={len(getattr(merged, name))}"
                           for name in ("failures", "errors", "skipped") if getattr(merged, name))
        self.stream.writeln(("OK" if merged.wasSuccessful() else "FAILED") +
                            (f" ({counts})" if counts else ""))
        self.stream.flush()
        return merged


SKIPPED = 77  # CTest's SKIP_RETURN_CODE for the tests that may not run on a machine


def skip_file_unless_ci(reason):
    """Ends a test file that cannot run on this machine: status 77, which CTest reports as
    skipped, with the reason. Under CI (CI=true), which installs what every test needs, the
    same reason is a failure instead: nothing is skipped there silently."""
    if os.environ.get("CI") == "true":
        print(f"FAILED: cannot run under CI: {reason}", flush=True)
        raise SystemExit(1)
    print(f"SKIPPED: {reason}", flush=True)
    raise SystemExit(SKIPPED)


def address_sanitized(binary):
    """Whether `binary` was built with AddressSanitizer (-DMBKIT_SANITIZE=address...)."""
    with open(binary, "rb") as f:
        return b"__asan_init" in f.read()


def visible_gpus():
    """The GPU count mb-train-fmb --version reports (0 in a build without CUDA); 0 at once where
    the NVIDIA driver's library does not open (CI), without loading the CUDA plugin (1-2 s)."""
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return 0
    result = run([tool("mb-train-fmb"), "--version"])
    found = re.search(r"^\s*GPUs\s+(\d+)", result.out, re.MULTILINE)
    return int(found.group(1)) if found else 0


def stuck_rank_names(test, err, stuck):
    """The ranks that gave up on a job with rank `stuck` stopped, from its stderr `err`: the
    rank that gave up first ended the job (MPI_Abort) naming `stuck` alone; a rank still
    waiting on it afterwards (mpirun's SIGTERM asks it to save and stop) may rightly name that
    rank, which is gone. mpirun prints its abort notice and the ranks' lines in no fixed order,
    so the lines are told apart by their rank. Asserts that through `test`; returns the names,
    one list of ranks per naming line."""
    aborted = re.search(r"MPI_ABORT was invoked on rank (\d+)", err)
    aborter = aborted.group(1) if aborted else None
    named = []
    for line in err.splitlines():
        found = re.search(r"\(--comm-timeout\); ranks? ([0-9, and]+) do(?:es)? not answer", line)
        if not found:
            continue
        ranks = re.split(r", | and ", found.group(1))
        by = re.search(r"error: rank (\d+) |rank (\d+): error:", line)
        rank = by and (by.group(1) or by.group(2))
        if rank == aborter or aborter is None:
            test.assertEqual(ranks, [str(stuck)], msg=err)
        else:
            test.assertIn(ranks, ([str(stuck)], [aborter]), msg=err)
        named.append(ranks)
    test.assertIn([str(stuck)], named, msg=err)
    return named


def end_job(job, pids):
    """After a test that stopped ranks: SIGKILL every process of `pids` ({rank: PID}, or None)
    still there, and the launcher if it still runs, reaped."""
    for pid in (pids or {}).values():
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    if job.poll() is None:
        job.kill()
        job.communicate()


def training_rank_pids(marker, count, timeout, program=b"mb-train-"):
    """{rank: PID} of the mpirun-started processes of `program` (a name or its start: the
    trainers, mb-train-*, by default) whose command line holds `marker`, once `count` of them
    run; None if they do not within `timeout` seconds."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        pids = {}
        for entry in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    argv = f.read().split(b"\0")
                if not (os.path.basename(argv[0]).startswith(program)
                        and marker.encode() in b" ".join(argv)):
                    continue
                with open(f"/proc/{entry}/environ", "rb") as f:
                    environ = dict(item.split(b"=", 1) for item in f.read().split(b"\0")
                                   if b"=" in item)
                pids[int(environ[b"OMPI_COMM_WORLD_RANK"])] = int(entry)
            except (OSError, KeyError, ValueError):
                continue
        if len(pids) == count:
            return pids
        time.sleep(0.1)
    return None
