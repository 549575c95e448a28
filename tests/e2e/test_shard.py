"""fetch then shard the real Fashion-MNIST: every method gives shards that verify, whose
training rows together are exactly the source's training set (checked with h5py), that each
carry the whole test split, and that info describes."""

import json
import os
import shutil
import subprocess

import h5py
import numpy as np

import mbtest


class Shard(mbtest.ToolTestCase):
    def test_fetch_then_shard_by_every_method(self):
        # The fetched file (test_fetch_fashion checks the fetch) here as fmnist.h5: the shards
        # name their source as given.
        fetched = mbtest.fashion_mnist(self.dir, self.env)
        if fetched != self.path("fmnist.h5"):
            shutil.copyfile(fetched, self.path("fmnist.h5"))
        with h5py.File(self.path("fmnist.h5"), "r") as f:
            source_images = f["train/images"][:]
            source_labels = f["train/labels"][:]
            source_test = f["test/images"][:]
            mean, std = mbtest.text_attrs(f)["mean"], mbtest.text_attrs(f)["std"]
        source_sha256 = mbtest.sha256(self.path("fmnist.h5"))
        for method in ("contiguous", "strided", "random"):
            with self.subTest(method=method):
                prefix = f"sh-{method}"
                result = self.mb_dataset("shard", "fmnist.h5", "-n", "4", "--by", method,
                                         "--seed", "3", "-o", prefix)
                self.assertSucceeded(result)
                paths = result.out.split()
                self.assertEqual(paths, [f"{prefix}-{i:05d}-of-00004.h5" for i in range(4)])
                verify = self.mb_dataset("verify", *paths)
                self.assertSucceeded(verify)
                self.assertEqual(verify.out.count(": OK"), 4)

                rows, sizes = [], []
                per_class = []
                for i, path in enumerate(paths):
                    with h5py.File(self.path(path), "r") as f:
                        self.assertEqual(mbtest.text_attrs(f)["shard_index"], i)
                        self.assertEqual(mbtest.text_attrs(f)["shard_count"], 4)
                        self.assertEqual(mbtest.text_attrs(f)["shard_method"], method)
                        self.assertEqual(mbtest.text_attrs(f)["shard_source"], "fmnist.h5")
                        self.assertEqual(mbtest.text_attrs(f)["shard_source_sha256"], source_sha256)
                        np.testing.assert_array_equal(mbtest.text_attrs(f)["mean"], mean)
                        np.testing.assert_array_equal(mbtest.text_attrs(f)["std"], std)
                        index = f["train/source_index"][:]
                        np.testing.assert_array_equal(f["train/images"][:], source_images[index])
                        np.testing.assert_array_equal(f["train/labels"][:], source_labels[index])
                        np.testing.assert_array_equal(f["test/images"][:], source_test)
                        rows.append(index)
                        sizes.append(len(index))
                        per_class.append(np.bincount(f["train/labels"][:], minlength=10))
                all_rows = np.sort(np.concatenate(rows))
                np.testing.assert_array_equal(all_rows, np.arange(60000))  # exactly the training set
                self.assertEqual(sizes, [15000] * 4)
                if method == "random":
                    for counts in per_class:
                        np.testing.assert_array_equal(counts, [1500] * 10)
                if method == "contiguous":
                    np.testing.assert_array_equal(rows[1], np.arange(15000, 30000))
                if method == "strided":
                    np.testing.assert_array_equal(rows[2], np.arange(2, 60000, 4))

        info = self.mb_dataset("info", "sh-random-00001-of-00004.h5")
        self.assertSucceeded(info)
        self.assertIn("1 of 4 (random, seed 3) of fmnist.h5", info.out)
        self.assertIn("present, checksum matches", info.out)
        as_json = json.loads(self.mb_dataset("info", "--json", "sh-random-00001-of-00004.h5").out)
        self.assertEqual(as_json["shard"]["index"], 1)
        self.assertEqual(as_json["splits"]["train"]["count"], 15000)
        self.assertNoStrayFiles()

    def test_shard_paths_compose_in_a_pipeline(self):
        self.assertSucceeded(self.mb_dataset("synth", "toy", "--learnable", "--train", "1000",
                                             "--test", "100", "-o", "toy.h5"))
        pipeline = (f"{mbtest.tool('mb-dataset')} -q shard toy.h5 -n 3 -o part "
                    f"| xargs {mbtest.tool('mb-dataset')} verify")
        completed = subprocess.run(pipeline, shell=True, cwd=self.dir, env=self.env,
                                   capture_output=True, text=True)
        self.assertEqual(completed.returncode, 0, completed.stderr)
        self.assertEqual(completed.stdout.count(": OK"), 3)


if __name__ == "__main__":
    mbtest.main()
