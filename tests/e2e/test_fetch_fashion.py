"""fetch fashion-mnist from Debian's dataset-fashion-mnist: the real data, checked pixel by pixel
against the IDX files with h5py and numpy (no mbkit code on the reading side)."""

import json
import os
import time

import h5py
import numpy as np

import mbtest


class FetchFashionMnist(mbtest.ToolTestCase):
    def setUp(self):
        super().setUp()
        missing = [f for f in mbtest.FASHION_FILES
                   if not os.path.isfile(os.path.join(mbtest.FASHION_DIR, f))]
        self.assertEqual(missing, [], "install Debian's dataset-fashion-mnist package")

    def test_fetch_matches_the_idx_source_exactly(self):
        started = time.monotonic()
        result = self.mb_dataset("fetch", "fashion-mnist", "-o", "fmnist.h5")
        elapsed = time.monotonic() - started
        self.assertSucceeded(result)
        print(f"fetch fashion-mnist took {elapsed:.2f} s")
        self.assertIn("Debian package dataset-fashion-mnist", result.err)
        self.assertEqual(result.out, "")

        sources = [mbtest.read_idx_gz(os.path.join(mbtest.FASHION_DIR, f))
                   for f in mbtest.FASHION_FILES]
        with h5py.File(self.path("fmnist.h5"), "r") as f:
            self.assertEqual(mbtest.text_attrs(f)["format"], "mbkit-dataset")
            self.assertEqual(mbtest.text_attrs(f)["format_version"], 1)
            self.assertEqual(mbtest.text_attrs(f)["name"], "fashion-mnist")
            self.assertEqual(mbtest.text_attrs(f)["num_classes"], 10)
            self.assertEqual(f["train/images"].shape, (60000, 1, 28, 28))
            self.assertEqual(f["test/images"].shape, (10000, 1, 28, 28))
            self.assertEqual(f["train/images"].dtype, np.uint8)
            np.testing.assert_array_equal(f["train/images"][:, 0], sources[0])
            np.testing.assert_array_equal(f["train/labels"][:], sources[1])
            np.testing.assert_array_equal(f["test/images"][:, 0], sources[2])
            np.testing.assert_array_equal(f["test/labels"][:], sources[3])
            pixels = sources[0].astype(np.float64) / 255.0
            np.testing.assert_allclose(mbtest.text_attrs(f)["mean"], [pixels.mean()], rtol=1e-12)
            np.testing.assert_allclose(mbtest.text_attrs(f)["std"], [pixels.std()], rtol=1e-9)
            self.assertEqual([n.decode() for n in f["class_names"][:]][:2], ["T-shirt/top", "Trouser"])
            self.assertEqual(list(mbtest.text_attrs(f)["source_files"]), mbtest.FASHION_FILES)
            self.assertEqual(list(mbtest.text_attrs(f)["source_sha256"]),
                             [mbtest.sha256(os.path.join(mbtest.FASHION_DIR, n))
                              for n in mbtest.FASHION_FILES])
            self.assertIsNotNone(f["train/images"].compression)
            self.assertTrue(f["train/images"].fletcher32)
        self.assertNoStrayFiles()

        # A second fetch keeps the valid file untouched; --force rebuilds it with equal data.
        before = os.stat(self.path("fmnist.h5")).st_mtime_ns
        again = self.mb_dataset("fetch", "fashion-mnist", "-o", "fmnist.h5")
        self.assertSucceeded(again)
        self.assertIn("kept fmnist.h5", again.err)
        self.assertEqual(os.stat(self.path("fmnist.h5")).st_mtime_ns, before)
        # The fetch to a new path is also the quiet one: -q prints nothing (a whole fetch of its
        # own cost this file a third of its time).
        forced = self.mb_dataset("-q", "fetch", "fashion-mnist", "-o", "fmnist2.h5", "--force")
        self.assertSucceeded(forced)
        self.assertEqual((forced.out, forced.err), ("", ""))
        # The same inputs give the same bytes (no timestamps in the files).
        self.assertEqual(mbtest.sha256(self.path("fmnist.h5")), mbtest.sha256(self.path("fmnist2.h5")))

        # info and verify agree with the data.
        info = self.mb_dataset("info", "fmnist.h5")
        self.assertSucceeded(info)
        self.assertIn("60000", info.out)
        self.assertIn("6000 each", info.out)
        self.assertIn("Fletcher-32", info.out)
        as_json = json.loads(self.mb_dataset("info", "--json", "fmnist.h5").out)
        self.assertEqual(as_json["splits"]["train"]["count"], 60000)
        self.assertEqual(as_json["splits"]["test"]["class_counts"], [1000] * 10)
        self.assertEqual(as_json["image_shape"], [1, 28, 28])
        self.assertIsNone(as_json["shard"])
        verify = self.mb_dataset("verify", "fmnist.h5")
        self.assertSucceeded(verify)
        self.assertIn("fmnist.h5: OK", verify.out)


if __name__ == "__main__":
    mbtest.main()
