"""Several processes fetching to the same path at once (every rank of an mpirun, or plain
background processes) leave one correct file and no error."""

import os
import shutil
import subprocess

import h5py

import mbtest


class ConcurrentFetch(mbtest.ToolTestCase):
    def check_single_valid_output(self):
        self.assertSucceeded(self.mb_dataset("verify", "same.h5"))
        with h5py.File(self.path("same.h5"), "r") as f:
            self.assertEqual(f["train/images"].shape[0], 60000)
        self.assertEqual(sorted(n for n in os.listdir(self.dir) if n.endswith(".h5")), ["same.h5"])
        self.assertNoStrayFiles()

    def test_every_rank_of_mpirun_fetches_the_same_file(self):
        mpirun = shutil.which("mpirun")
        self.assertIsNotNone(mpirun, "mpirun (openmpi-bin) is required")
        result = mbtest.run([mpirun, "--oversubscribe", "-n", "4", mbtest.tool("mb-dataset"),
                             "fetch", "fashion-mnist", "-o", "same.h5"],
                            cwd=self.dir, env=self.env)
        self.assertSucceeded(result)
        self.assertNotIn("error", result.err)
        self.check_single_valid_output()

    def test_plain_processes_racing_with_force(self):
        processes = [subprocess.Popen([mbtest.tool("mb-dataset"), "fetch", "fashion-mnist", "-o",
                                       "same.h5", "--force"], cwd=self.dir, env=self.env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                     for _ in range(3)]
        for process in processes:
            _, err = process.communicate(timeout=300)
            self.assertEqual(process.returncode, 0, err)
        self.check_single_valid_output()


if __name__ == "__main__":
    mbtest.main()
