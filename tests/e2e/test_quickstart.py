"""The README's main job, `make -f Makefile.examples quickstart`, run for real."""

import os

import mbtest


class Quickstart(mbtest.ToolTestCase):
    def test_main_job(self):
        out = self.path("out")
        result = mbtest.run(["make", "-f", os.path.join(mbtest.SOURCE_DIR, "Makefile.examples"),
                             "quickstart", f"BIN={mbtest.BIN_DIR}", f"OUT={out}"],
                            cwd=mbtest.SOURCE_DIR, env=self.env, timeout=600)
        self.assertSucceeded(result)
        self.assertEqual(result.out.count(": OK"), 5, result.out)
        self.assertIn("shard      0 of 4 (random, seed 1)", result.out)
        self.assertEqual(sorted(os.listdir(out)),
                         ["fmnist-0000%d-of-00004.h5" % i for i in range(4)] + ["fmnist.h5"])
        # Running it again redoes nothing.
        again = mbtest.run(["make", "-f", os.path.join(mbtest.SOURCE_DIR, "Makefile.examples"),
                            "shards", f"BIN={mbtest.BIN_DIR}", f"OUT={out}"],
                           cwd=mbtest.SOURCE_DIR, env=self.env)
        self.assertSucceeded(again)
        self.assertIn("Nothing to be done", again.out)


if __name__ == "__main__":
    mbtest.main()
