"""The download path for real, against a loopback HTTP server: Fashion-MNIST's own files,
generated MNIST-format and CIFAR-10/100 archives, a cache, retries, 404s, transfers cut short and
checksum mismatches."""

import os
import shutil

import h5py
import numpy as np

import mbtest


class FetchOverHttp(mbtest.ToolTestCase):
    def setUp(self):
        super().setUp()
        self.www = self.path("www")
        os.makedirs(self.www)

    def test_fashion_mnist_from_a_mirror_checked_by_content(self):
        mirror = os.path.join(self.www, "fashion")
        os.makedirs(mirror)
        for name in mbtest.FASHION_FILES:
            shutil.copy(os.path.join(mbtest.FASHION_DIR, name), mirror)
        with mbtest.LoopbackServer(self.www) as server:
            result = self.mb_dataset("fetch", "fashion-mnist", "--mirror", server.url("fashion/"),
                                     "-o", "f.h5")
            self.assertSucceeded(result)
            self.assertEqual(len(server.requests), 4)
        with h5py.File(self.path("f.h5"), "r") as f:
            self.assertEqual(f["train/images"].shape, (60000, 1, 28, 28))
            self.assertTrue(mbtest.text_attrs(f)["source"].startswith("http://127.0.0.1:"))
        # The download cache now holds the four files.
        cached = os.path.join(self.cache, "mbkit", "datasets", "fashion-mnist")
        self.assertEqual(sorted(os.listdir(cached)), sorted(mbtest.FASHION_FILES))
        self.assertNoStrayFiles()

    def test_mnist_format_download_cache_and_retry(self):
        arrays = mbtest.write_mnist_like(os.path.join(self.www, "mnist"), n_train=150, n_test=30)
        mbtest.write_checksums(os.path.join(self.www, "mnist"), mbtest.FASHION_FILES,
                               self.path("mnist.md5"))
        with mbtest.LoopbackServer(self.www) as server:
            # /flaky/ answers 503 once per file: each download succeeds on its retry.
            result = self.mb_dataset("fetch", "mnist", "--mirror", server.url("flaky/mnist"),
                                     "--checksums", "mnist.md5", "--cache-dir", "c", "-o", "m.h5",
                                     "--retries", "2")
            self.assertSucceeded(result)
            self.assertIn("HTTP 503", result.err)
            self.assertEqual(len(server.requests), 8)
        with h5py.File(self.path("m.h5"), "r") as f:
            np.testing.assert_array_equal(f["train/images"][:, 0], arrays[0])
            np.testing.assert_array_equal(f["train/labels"][:], arrays[1])
            np.testing.assert_array_equal(f["test/images"][:, 0], arrays[2])
            np.testing.assert_array_equal(f["test/labels"][:], arrays[3])
            self.assertEqual(mbtest.text_attrs(f)["name"], "mnist")
        # The server is gone: a rebuild is served entirely from the cache.
        again = self.mb_dataset("fetch", "mnist", "--mirror", "http://127.0.0.1:9/", "--checksums",
                                "mnist.md5", "--cache-dir", "c", "-o", "m.h5", "--force")
        self.assertSucceeded(again)
        self.assertNoStrayFiles()

    def test_cifar10_and_cifar100_archives(self):
        for name, cifar100, archive in (("cifar10", False, "cifar-10-binary.tar.gz"),
                                        ("cifar100", True, "cifar-100-binary.tar.gz")):
            with self.subTest(dataset=name):
                data = mbtest.write_cifar_archive(os.path.join(self.www, archive), cifar100=cifar100)
                mbtest.write_checksums(self.www, [archive], self.path(f"{name}.sha256"), "sha256")
                with mbtest.LoopbackServer(self.www) as server:
                    result = self.mb_dataset("fetch", name, "--mirror", server.url(), "--checksums",
                                             f"{name}.sha256", "-o", f"{name}.h5")
                self.assertSucceeded(result)
                with h5py.File(self.path(f"{name}.h5"), "r") as f:
                    self.assertEqual(f["train/images"].shape[1:], (3, 32, 32))
                    np.testing.assert_array_equal(f["train/images"][:], data[0])
                    np.testing.assert_array_equal(f["train/labels"][:], data[1])
                    np.testing.assert_array_equal(f["test/images"][:], data[2])
                    np.testing.assert_array_equal(f["test/labels"][:], data[3])
                    self.assertEqual(mbtest.text_attrs(f)["num_classes"], 100 if cifar100 else 10)
                    if cifar100:
                        np.testing.assert_array_equal(f["train/coarse_labels"][:], data[4])
                        self.assertEqual(f["class_names"][3].decode(), "fine3")
                        self.assertEqual(len(f["coarse_class_names"]), 20)
                    else:
                        self.assertEqual(f["class_names"][9].decode(), "truck")
                verify = self.mb_dataset("verify", f"{name}.h5")
                self.assertSucceeded(verify)

    def test_http_404_is_one_line_and_leaves_nothing(self):
        with mbtest.LoopbackServer(self.www) as server:
            result = self.mb_dataset("fetch", "mnist", "--mirror", server.url("nothing-here/"),
                                     "-o", "m.h5")
        self.assertFailsWith(result, 4, "HTTP 404")
        self.assertIn("train-images-idx3-ubyte.gz", result.err)
        self.assertFalse(os.path.exists(self.path("m.h5")))
        self.assertNoStrayFiles()

    def test_server_closing_mid_transfer(self):
        mbtest.write_mnist_like(os.path.join(self.www, "mnist"))
        with mbtest.LoopbackServer(self.www) as server:
            result = self.mb_dataset("fetch", "mnist", "--mirror", server.url("close/mnist/"),
                                     "-o", "m.h5", "--retries", "1", "-q")
            self.assertEqual(len(server.requests), 2)  # the first attempt and one retry
        self.assertFailsWith(result, 4, "(2 attempts)")
        self.assertFalse(os.path.exists(self.path("m.h5")))
        self.assertNoStrayFiles()

    def test_checksum_mismatch_against_the_published_md5(self):
        mbtest.write_mnist_like(os.path.join(self.www, "mnist"))
        with mbtest.LoopbackServer(self.www) as server:
            result = self.mb_dataset("fetch", "mnist", "--mirror", server.url("mnist/"), "-o", "m.h5")
        self.assertFailsWith(result, 3, "checksum mismatch")
        self.assertIn("published f68b3c2dcbeaaa9fbdd348bbdeb94873", result.err)
        self.assertFalse(os.path.exists(self.path("m.h5")))
        # Nothing unverified was left in the cache either.
        cached = os.path.join(self.cache, "mbkit", "datasets", "mnist")
        self.assertEqual(os.listdir(cached), [])


if __name__ == "__main__":
    # The tests at once, three at a time: most of each is waiting: on the loopback mirror, on
    # the tool's retries after a failed request, on the tools' start-up.
    mbtest.main(at_once=3)
