"""Bad input: each case gives one clear error line naming the file or flag, a non-zero exit
status, and no output (or temporary) file left behind."""

import gzip
import os
import shutil
import signal
import subprocess
import time

import h5py

import mbtest

IDX_FLAGS = ["--train-images", "--train-labels", "--test-images", "--test-labels"]


class BadInput(mbtest.ToolTestCase):
    def make_idx_set(self, name="src", **kwargs):
        directory = self.path(name)
        mbtest.write_mnist_like(directory, **kwargs)
        return [os.path.join(directory, f) for f in mbtest.FASHION_FILES]

    def import_idx(self, files, output="out.h5"):
        args = ["import", "idx", "-o", output, "--name", "test"]
        for flag, path in zip(IDX_FLAGS, files):
            args += [flag, path]
        return self.mb_dataset(*args)

    def assertNoOutput(self, name="out.h5"):
        self.assertFalse(os.path.exists(self.path(name)), f"{name} was written")
        self.assertNoStrayFiles()

    def test_import_of_good_files_works(self):
        self.assertSucceeded(self.import_idx(self.make_idx_set()))
        self.assertSucceeded(self.mb_dataset("verify", "out.h5"))

    def test_truncated_gzip(self):
        files = self.make_idx_set()
        with open(files[0], "rb") as f:
            data = f.read()
        with open(files[0], "wb") as f:
            f.write(data[: len(data) // 2])
        result = self.import_idx(files)
        self.assertFailsWith(result, 3, "train-images-idx3-ubyte.gz: truncated gzip data")
        self.assertNoOutput()

    def test_truncated_gzip_through_fetch(self):
        files = self.make_idx_set()
        with open(files[2], "rb") as f:
            data = f.read()
        with open(files[2], "wb") as f:
            f.write(data[:-100])
        # The checksum list describes the damaged file, so the damage itself must be reported.
        mbtest.write_checksums(self.path("src"), mbtest.FASHION_FILES, self.path("sums"), "sha256")
        result = self.mb_dataset("fetch", "mnist", "--from", "src", "--checksums", "sums", "-o", "out.h5")
        self.assertFailsWith(result, 3, "t10k-images-idx3-ubyte.gz: truncated gzip data")
        self.assertNoOutput()

    def test_wrong_idx_magic(self):
        files = self.make_idx_set()
        with gzip.open(files[1], "rb") as f:
            data = bytearray(f.read())
        data[2] = 0x0c  # int32 elements: not an image/label file of bytes
        with open(files[1], "wb") as f:
            f.write(gzip.compress(bytes(data)))
        result = self.import_idx(files)
        self.assertFailsWith(result, 3, "train-labels-idx1-ubyte.gz: IDX element type 0x0c")
        with open(files[1], "wb") as f:
            f.write(gzip.compress(b"\x12\x34\x08\x01" + bytes(data[4:])))
        result = self.import_idx(files)
        self.assertFailsWith(result, 3, "wrong IDX magic number 0x12340801")
        self.assertNoOutput()

    def test_image_label_count_mismatch(self):
        files = self.make_idx_set()
        with open(files[1], "wb") as f:
            f.write(gzip.compress(mbtest.idx_bytes(bytes(range(10)) * 11)))  # 110 labels, 120 images
        result = self.import_idx(files)
        self.assertFailsWith(result, 3, "has 120 images but train-labels-idx1-ubyte.gz has 110 labels")
        self.assertNoOutput()

    def test_counts_are_checked_before_the_data_is_inflated(self):
        # The images' gzip stream is cut short, and the labels are one fewer: the headers alone
        # show the mismatch, so it is reported before any data is inflated.
        files = self.make_idx_set()
        with open(files[1], "wb") as f:
            f.write(gzip.compress(mbtest.idx_bytes(bytes(range(10)) * 11)))  # 110 labels, 120 images
        with open(files[0], "rb") as f:
            data = f.read()
        with open(files[0], "wb") as f:
            f.write(data[: len(data) // 2])
        result = self.import_idx(files)
        self.assertFailsWith(result, 3, "has 120 images but train-labels-idx1-ubyte.gz has 110 labels")
        self.assertNoOutput()

    def declare_one_huge_image(self, files, payload):
        """Makes the training split one image of 65535x65535 (4.3 GB: the largest extent an image
        may have), of which the gzip file holds only `payload`, and one label."""
        header = bytes([0, 0, 0x08, 3]) + b"".join(d.to_bytes(4, "big") for d in (1, 65535, 65535))
        with open(files[0], "wb") as f:
            f.write(gzip.compress(header + payload, compresslevel=1))
        with open(files[1], "wb") as f:
            f.write(gzip.compress(mbtest.idx_bytes(b"\x03")))

    def test_gzip_declaring_more_than_it_can_hold_is_refused_before_inflating(self):
        # A header declaring 4.3 GB in a gzip file of about a hundred bytes: deflate expands at
        # most 1032:1, so the header lies, and nothing is allocated or inflated for it.
        files = self.make_idx_set()
        self.declare_one_huge_image(files, bytes(1000))
        size = os.path.getsize(files[0])
        result = self.import_idx(files)
        self.assertFailsWith(
            result, 3, f"train-images-idx3-ubyte.gz: its IDX header declares 1 image of 65535x65535 "
            f"(4294836241 bytes), more than its {size} bytes of gzip data can hold (deflate expands "
            f"at most 1032:1)")
        self.assertNoOutput()

    def test_out_of_memory_names_the_file_and_what_it_was_reading(self):
        # 4.3 MB of gzip data can hold the 4.3 GB its header declares; under a 2 GiB limit on
        # the address space the buffer for them does not fit, and the message says whose it was.
        files = self.make_idx_set()
        self.declare_one_huge_image(files, os.urandom(4_300_000))
        args = [mbtest.tool("mb-dataset"), "import", "idx", "-o", "out.h5", "--name", "test"]
        for flag, path in zip(IDX_FLAGS, files):
            args += [flag, path]
        result = self.run_with_address_space_limit(args, 2 << 20)
        self.assertFailsWith(result, 1, "train-images-idx3-ubyte.gz: out of memory: cannot allocate "
                             "4.3 GB to decompress its IDX header and 1 image of 65535x65535")
        self.assertNoOutput()

    def test_what_is_wrong_with_a_file_is_said(self):
        files = self.make_idx_set()
        result = self.import_idx(["/dev/null", *files[1:]])
        self.assertFailsWith(result, 3, "/dev/null: is not a regular file (a character device)")
        empty = self.path("empty.gz")
        open(empty, "wb").close()
        result = self.import_idx([files[0], empty, *files[2:]])
        self.assertFailsWith(result, 3, "empty.gz: the file is empty, not an IDX file")
        # An image file given as the labels: its magic number, not a truncation, is the fault.
        result = self.import_idx([files[0], files[2], *files[2:]])
        self.assertFailsWith(result, 3, "t10k-images-idx3-ubyte.gz: wrong IDX magic number 0x00000803 "
                             "(3 dimensions; expected 0x00000801, a label file)")
        result = self.import_idx([files[1], files[1], *files[2:]])
        self.assertFailsWith(result, 3, "train-labels-idx1-ubyte.gz: wrong IDX magic number 0x00000801 "
                             "(1 dimension; expected 0x00000803 or 0x00000804, an image file)")
        self.assertNoOutput()

    def test_label_out_of_range(self):
        files = self.make_idx_set()
        labels = bytearray(mbtest.read_idx_gz(files[3]).tobytes())
        labels[7] = 12
        with open(files[3], "wb") as f:
            f.write(gzip.compress(mbtest.idx_bytes(bytes(labels))))
        mbtest.write_checksums(self.path("src"), mbtest.FASHION_FILES, self.path("sums"))
        result = self.mb_dataset("fetch", "mnist", "--from", "src", "--checksums", "sums", "-o", "out.h5")
        self.assertFailsWith(result, 3, "t10k-labels-idx1-ubyte.gz: label 12 at index 7 is outside [0, 10)")
        self.assertNoOutput()

    def test_checksum_mismatch(self):
        self.make_idx_set()
        mbtest.write_checksums(self.path("src"), mbtest.FASHION_FILES, self.path("sums"))
        with open(self.path("src", mbtest.FASHION_FILES[0]), "ab") as f:
            f.write(b"\0")
        result = self.mb_dataset("fetch", "mnist", "--from", "src", "--checksums", "sums", "-o", "out.h5")
        self.assertFailsWith(result, 3, "train-images-idx3-ubyte.gz: checksum mismatch: md5")
        self.assertNoOutput()

    def test_unwritable_output_directory(self):
        files = self.make_idx_set()
        result = self.import_idx(files, output="no-such-dir/out.h5")
        self.assertFailsWith(result, 1, "directory no-such-dir does not exist")
        with open(self.path("plain-file"), "w") as f:
            f.write("x")
        result = self.import_idx(files, output="plain-file/out.h5")
        self.assertFailsWith(result, 1, "plain-file is not a directory")
        result = self.mb_dataset("fetch", "fashion-mnist", "-o", "no-such-dir/f.h5")
        self.assertFailsWith(result, 1, "directory no-such-dir does not exist")
        if os.geteuid() != 0:  # root writes into read-only directories
            os.makedirs(self.path("locked"))
            os.chmod(self.path("locked"), 0o555)
            result = self.import_idx(files, output="locked/out.h5")
            self.assertFailsWith(result, 1, "Permission denied")
        self.assertNoStrayFiles()

    def test_hdf5_file_that_is_not_a_dataset(self):
        with h5py.File(self.path("other.h5"), "w") as f:
            f["weights"] = [1.0, 2.0]
        for command in (["info", "other.h5"], ["verify", "other.h5"],
                        ["shard", "other.h5", "-n", "2", "-o", "sh"]):
            with self.subTest(command=command[0]):
                result = self.mb_dataset(*command)
                self.assertFailsWith(result, 3, "other.h5: not an mbkit dataset")
        with open(self.path("text.h5"), "w") as f:
            f.write("hello")
        self.assertFailsWith(self.mb_dataset("info", "text.h5"), 3, "text.h5: not an HDF5 file")
        self.assertFailsWith(self.mb_dataset("info", "absent.h5"), 3, "absent.h5: no such file")
        self.assertNoStrayFiles()

    def test_a_damaged_chunk_index_is_refused_not_read_as_zeros(self):
        """Issue U's files: damage to the chunk index (the HDF5 1.8 format checksums no B-tree)
        moved a chunk off its coordinates, or set its filter mask so that Fletcher-32 is
        skipped. HDF5 then reads fill values or unchecked bytes; verify said OK, mb-eval
        printed an accuracy."""
        corpus = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fuzz", "corpus")
        cases = [("dataset_file", "regress_verify_silent_zero_labels.h5",
                  "/train/labels: the chunk at [0] is missing from its chunk index"),
                 ("dataset_file", "regress_verify_silent_zero_test_images.h5",
                  "/test/images: the chunk at [0, 0, 0, 0] is missing from its chunk index")]
        for folder, name, problem in cases:
            shutil.copy(os.path.join(corpus, folder, name), self.path(name))
            self.assertFailsWith(self.mb_dataset("verify", name), 3, f"{name}:{problem}")
            self.assertFailsWith(self.mb_dataset("info", name), 3, f"{name}:{problem}")
        name = "regress_eval_silent_filter_mask.h5"
        shutil.copy(os.path.join(corpus, "checkpoint", name), self.path(name))
        self.assertSucceeded(self.mb_dataset("synth", "images", "--shape", "1,8,8", "--classes",
                                             "4", "--train", "64", "--test", "16", "--seed", "1",
                                             "-o", "data.h5"))
        result = mbtest.run([mbtest.tool("mb-eval"), name, "--data", "data.h5", "--threads", "1"],
                            cwd=self.dir, env=self.env)
        self.assertFailsWith(result, 3, f"{name}:/params/fc2.bias: the chunk at [0] ")

    def test_bad_flag_values(self):
        self.assertSucceeded(self.import_idx(self.make_idx_set(), output="ok.h5"))
        cases = [
            (["shard", "ok.h5", "-n", "0", "-o", "sh"], 2, "-n 0: need at least 1 shard"),
            (["shard", "ok.h5", "-n", "500", "-o", "sh"], 2, "has only 120 training images"),
            (["shard", "ok.h5", "-n", "two", "-o", "sh"], 2, "two"),
            (["shard", "ok.h5", "-n", "2", "--by", "modulo", "-o", "sh"], 2,
             "unknown method 'modulo' (known: contiguous, strided, random)"),
            (["fetch", "imagenet", "-o", "x.h5"], 2,
             "unknown dataset 'imagenet' (known: mnist, fashion-mnist, cifar10, cifar100)"),
            (["fetch", "mnist"], 2, "--output is required"),
            (["fetch", "mnist", "-o", "x.h5", "--compression", "12"], 2, "--compression 12 is not in 0..9"),
            (["fetch", "mnist", "-o", "x.h5", "--from", "src", "--mirror", "http://x/"], 2,
             "--from and --mirror cannot be used together"),
            (["synth", "cube", "-o", "x.h5"], 2, "unknown kind 'cube' (known: toy, images)"),
            (["synth", "images", "-o", "x.h5", "--shape", "3,a,4"], 2, "--shape: 'a' is not an integer"),
            (["import", "idx", "-o", "x.h5"], 2, "import idx needs --train-images"),
            (["frobnicate"], 2, "frobnicate"),
        ]
        for args, code, text in cases:
            with self.subTest(args=" ".join(args)):
                self.assertFailsWith(self.mb_dataset(*args), code, text)
        self.assertFalse(os.path.exists(self.path("x.h5")))
        self.assertFalse([n for n in os.listdir(self.dir) if n.startswith("sh-")])
        self.assertNoStrayFiles()

    def test_existing_outputs_are_not_replaced_without_force(self):
        with open(self.path("precious.h5"), "w") as f:
            f.write("years of work")
        result = self.mb_dataset("synth", "toy", "-o", "precious.h5")
        self.assertFailsWith(result, 2, "precious.h5 exists; use --force to replace it")
        result = self.mb_dataset("fetch", "fashion-mnist", "-o", "precious.h5")
        self.assertFailsWith(result, 2, "precious.h5 exists and is not a fashion-mnist dataset")
        with open(self.path("precious.h5")) as f:
            self.assertEqual(f.read(), "years of work")

    def test_an_existing_output_without_force_is_a_usage_error_in_every_tool(self):
        """"FILE exists; use --force" is a decision the command line did not make: exit status
        2, as mbkit(7) says of a bad command line (it was 1), and the file is left alone."""
        with open(self.path("taken"), "w") as f:
            f.write("mine")
        self.assertSucceeded(self.mb_dataset("synth", "toy", "--train", "50", "--test", "10",
                                             "-o", "toy.h5"))
        runs = [
            ["mb-dataset", "synth", "toy", "-o", "taken"],
            ["mb-dataset", "import", "idx", "-o", "taken", *self.idx_flags()],
            ["mb-eval", "ck.h5", "--data", "toy.h5", "-o", "taken"],
            ["mb-bench-partitions", "--data", "toy.h5", "--batch-sizes", "8", "-o", "taken"],
            ["mb-bench-partitions", "--data", "toy.h5", "--batch-sizes", "8,16", "--fit",
             "--time-model", "taken"],
            ["mb-report", "log.h5", "-o", "taken"],
            ["mb-bench-bandwidth", "--fit", "-b", "8", "-e", "64", "--comm-model", "taken"],
            ["mb-train-fmb", "--data", "toy.h5", "--steps", "1", "--log", "taken"],
        ]
        for args in runs:
            with self.subTest(command=" ".join(args)):
                result = mbtest.run([mbtest.tool(args[0]), *args[1:]], cwd=self.dir, env=self.env)
                self.assertFailsWith(result, 2, "taken exists; use --force to replace it")
                with open(self.path("taken")) as f:
                    self.assertEqual(f.read(), "mine")

    def idx_flags(self):
        args = []
        for flag, path in zip(IDX_FLAGS, self.make_idx_set()):
            args += [flag, path]
        return args

    def test_a_killed_writers_temporary_goes_with_the_next_write_beside_it(self):
        """kill -9 leaves .NAME.tmp-HOST-PID-XXXXXX behind (no handler runs); the next output
        written in that directory, of any name, removes it: its writer's pid is gone."""
        process = subprocess.Popen([mbtest.tool("mb-dataset"), "synth", "images", "--shape", "3,224,224",
                                    "--train", "100000", "--test", "10", "-o", "big.h5"],
                                   cwd=self.dir, env=self.env, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while not any(".tmp-" in n for n in os.listdir(self.dir)):  # wait until it is writing
            self.assertIsNone(process.poll(), "finished before it could be killed")
            self.assertLess(time.monotonic(), deadline)
            time.sleep(0.05)
        process.kill()
        process.wait(timeout=60)
        left = [n for n in os.listdir(self.dir) if ".tmp-" in n]
        self.assertEqual(len(left), 1, left)
        self.assertIn(f"-{process.pid}-", left[0])  # the pid tells a dead writer from a live one
        self.assertSucceeded(self.mb_dataset("synth", "toy", "--train", "50", "--test", "10",
                                             "-o", "small.h5"))
        self.assertFalse(os.path.exists(self.path("big.h5")))
        self.assertNoStrayFiles()

    def test_interrupt_removes_the_half_written_output(self):
        process = subprocess.Popen([mbtest.tool("mb-dataset"), "synth", "images", "--shape", "3,224,224",
                                    "--train", "100000", "--test", "10", "-o", "big.h5"],
                                   cwd=self.dir, env=self.env, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 60
        while not any(".tmp-" in n for n in os.listdir(self.dir)):  # wait until it is writing
            self.assertIsNone(process.poll(), "finished before it could be interrupted")
            self.assertLess(time.monotonic(), deadline)
            time.sleep(0.05)
        process.send_signal(signal.SIGINT)
        process.communicate(timeout=60)
        self.assertEqual(process.returncode, -signal.SIGINT)
        self.assertNoOutput("big.h5")


if __name__ == "__main__":
    mbtest.main()
