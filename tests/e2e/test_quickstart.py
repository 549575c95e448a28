"""The README's main job, `make -f Makefile.examples quickstart` (AMB against FMB on the virtual
clock, one seed), and the mlp target, run for real, the way a new user runs them: the `python3`
first on PATH is a stub without h5py (as a conda, pyenv or venv Python can be), so the examples
pass only if they need no Python."""

import os
import re
import stat

import h5py

import mbtest


class Quickstart(mbtest.ToolTestCase):
    def setUp(self):
        super().setUp()
        stub = self.path("stub-bin")
        os.mkdir(stub)
        for name in ("python3", "python"):
            with open(os.path.join(stub, name), "w") as f:
                f.write("#!/bin/sh\necho 'stub python3 without h5py' >&2\nexit 1\n")
            os.chmod(os.path.join(stub, name), stat.S_IRWXU)
        self.env["PATH"] = stub + os.pathsep + self.env.get("PATH", "")
        check = mbtest.run(["sh", "-c", "python3 -c 'import h5py'"], env=self.env)
        self.assertEqual((check.rc, check.err.strip()), (1, "stub python3 without h5py"))

    def make(self, target, out):
        return mbtest.run(["make", "-f", os.path.join(mbtest.SOURCE_DIR, "Makefile.examples"), target,
                           f"BIN={mbtest.BIN_DIR}", f"OUT={out}", "THREADS=2"],
                          cwd=mbtest.SOURCE_DIR, env=self.env, timeout=600)

    def test_main_job(self):
        out = self.path("out")
        result = self.make("quickstart", out)
        self.assertSucceeded(result)
        quick = os.path.join(out, "quick")
        self.assertEqual(sorted(os.listdir(quick)),
                         ["accuracy-vs-time.png", "amb-checkpoint.h5", "amb-eval.h5", "amb.h5",
                          "fmb-checkpoint.h5", "fmb-eval.h5", "fmb.h5", "time-to-accuracy.txt"])
        with open(os.path.join(quick, "accuracy-vs-time.png"), "rb") as f:
            self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")
        for name in ("fmb", "amb"):
            with h5py.File(os.path.join(quick, f"{name}.h5"), "r", swmr=True) as log:
                self.assertEqual(mbtest.text_attrs(log)["clock"], "virtual")
                self.assertEqual(mbtest.text_attrs(log)["world_size"], 11)
                # 1200 emulated seconds, give or take a step.
                self.assertGreater(log["steps/time"][-1], 1190)
                self.assertLess(log["steps/time"][-1], 1220)
            with h5py.File(os.path.join(quick, f"{name}-eval.h5"), "r") as f:
                self.assertEqual(mbtest.text_attrs(f)["samples"], 10000)
                self.assertGreater(mbtest.text_attrs(f)["accuracy"], 0.75)
        with open(os.path.join(quick, "time-to-accuracy.txt")) as f:
            summary = f.read()
        self.assertNotIn("stub python3", result.err)
        # mb-report's table: a row per run (FMB, then AMB), then AMB / FMB for the seed.
        rows = [line.split() for line in summary.splitlines() if not line.startswith("#")]
        self.assertEqual([row[2] for row in rows], ["mb-train-fmb", "mb-train-amb"], summary)
        self.assertEqual([row[1] for row in rows],
                         [os.path.join(quick, "fmb.h5"), os.path.join(quick, "amb.h5")])
        times = {}
        for row, name in zip(rows, ("fmb", "amb")):
            with h5py.File(os.path.join(quick, f"{name}.h5"), "r", swmr=True) as log:
                reached = log["eval/accuracy"][...] >= 0.8
                self.assertTrue(reached.any(), f"{name} never reached 80%:\n{summary}")
                times[name] = float(log["eval/time"][reached.argmax()])
            self.assertEqual(row[6:8], ["virtual", "cpu"])  # clock, device
            self.assertEqual(row[15], f"{times[name]:.1f}", summary)
        ratio = times["amb"] / times["fmb"]
        line = re.search(r"^# seed 1: mb-train-amb / mb-train-fmb time to 80%: ([0-9.]+) "
                         r"\(([0-9.]+) s / ([0-9.]+) s\)$", summary, re.M)
        self.assertIsNotNone(line, summary)
        self.assertEqual(line.groups(), (f"{ratio:.3f}", f"{times['amb']:.1f}",
                                         f"{times['fmb']:.1f}"))
        self.assertIn(f"# mb-train-amb / mb-train-fmb time to 80%: mean {ratio:.3f} over 1 seed "
                      f"(min {ratio:.3f}, max {ratio:.3f})", summary)
        self.assertIn(summary.strip().splitlines()[-1], result.out)
        # Made again: nothing is run, and the table is printed again.
        again = self.make("quickstart", out)
        self.assertSucceeded(again)
        self.assertEqual(again.out, summary)

    def with_fashion_mnist(self):
        """OUT holding fmnist.h5 already (a link to the file CTest's fixture fetched, or one
        fetched now): the mlp and shards targets run their own rules only. test_main_job makes
        it from nothing, with the fetch, as a new user does (about 3 s of CPU a fetch)."""
        out = self.path("out")
        os.mkdir(out)
        os.symlink(mbtest.fashion_mnist(self.dir, env=self.env), os.path.join(out, "fmnist.h5"))
        return out

    def test_mlp(self):
        out = self.with_fashion_mnist()
        result = self.make("mlp", out)
        self.assertSucceeded(result)
        self.assertEqual(sorted(os.listdir(out)),
                         ["fmnist.h5", "mlp-checkpoint.h5", "mlp-eval.h5", "mlp-log.h5"])
        self.assertIn("confusion matrix", result.out)
        with h5py.File(os.path.join(out, "mlp-eval.h5"), "r") as f:
            self.assertEqual(mbtest.text_attrs(f)["samples"], 10000)
            # PyTorch reaches 88.7% with this recipe (tests/e2e/golden/torch_mlp_fmnist.json).
            self.assertGreater(mbtest.text_attrs(f)["accuracy"], 0.86)
        with h5py.File(os.path.join(out, "mlp-log.h5"), "r", libver="latest", swmr=True) as f:
            self.assertEqual(f["steps/step"][-1], 5 * 938)
            self.assertEqual(len(f["eval/step"]), 5)
        # Running it again redoes nothing.
        again = self.make("mlp", out)
        self.assertSucceeded(again)
        self.assertIn("Nothing to be done", again.out)

    def test_shards(self):
        out = self.with_fashion_mnist()
        result = self.make("shards", out)
        self.assertSucceeded(result)
        self.assertEqual(sorted(os.listdir(out)),
                         ["fmnist-0000%d-of-00004.h5" % i for i in range(4)] + ["fmnist.h5"])
        info = self.mb_dataset("info", os.path.join(out, "fmnist-00000-of-00004.h5"))
        self.assertSucceeded(info)
        self.assertIn("shard      0 of 4 (random, seed 1)", info.out)


if __name__ == "__main__":
    mbtest.main()
