"""What the README's test command shows. CTest's list holds only tests that can run on one
process (the OnRanks tests run under mpirun -n 3 inside e2e.test_distributed, not as entries
that would report themselves skipped), each named readably (no parameter printed as bytes, as
in ".../40-byte object <A0-96 ...>"); and after a run, the list of tests that did not run is
followed by why, one line per reason (tests/common/skip_reasons.py, which ctest runs through the
build's CTestCustom.cmake)."""

import glob
import os
import re
import shutil
import unittest

import mbtest

BUILD_DIR = os.path.dirname(os.path.abspath(mbtest.BIN_DIR))
CTEST = shutil.which("ctest")
# gtest_discover_tests writes the names of a module's tests here when ctest starts (PRE_TEST).
DISCOVERED = os.path.join(BUILD_DIR, "tests", "test_*[[]1[]]_tests.cmake")


def discovered_names():
    """Every unit test name CTest lists, as gtest_discover_tests registered them."""
    files = glob.glob(DISCOVERED)
    if not files:
        # Run alone, before any ctest run: `ctest -N` has them written. Never under ctest,
        # whose log a second ctest in the same directory would replace (the lists exist there).
        mbtest.run([CTEST, "--test-dir", BUILD_DIR, "-N"])
        files = glob.glob(DISCOVERED)
    names = []
    for path in files:
        with open(path, encoding="utf-8") as f:
            names += [found.group(2) for found in
                      re.finditer(r"add_test\(\s*\[(=*)\[(.*?)\]\1\]", f.read())]
    return names


class CtestOutput(mbtest.ToolTestCase):
    def test_tests_that_run_only_on_several_ranks_are_not_listed(self):
        names = discovered_names()
        self.assertTrue(any(name.startswith("comm.") for name in names), names[:20])
        on_ranks = [name for name in names if ".OnRanks." in name]
        self.assertEqual(on_ranks, [], "run under mpirun by e2e.test_distributed only")

    def test_every_parameterised_test_has_a_readable_name(self):
        names = discovered_names()
        self.assertTrue(any(name.startswith("optim.Optimizers/Golden.") for name in names),
                        "a parameterised suite is listed")
        unreadable = [name for name in names
                      if "-byte object" in name or "GetParam" in name or "#" in name
                      or re.search(r"/\d+$", name) or re.search(r"\s", name)]
        self.assertEqual(unreadable, [], "every INSTANTIATE_TEST_SUITE_P needs a name generator")

    def test_why_tests_did_not_run_follows_ctests_list(self):
        # A ctest directory of three tests, with the build's CTestCustom.cmake: one gtest test
        # skipped by GTEST_SKIP (run on one process), one end-to-end style skip (status 77, its
        # reason printed last) and one that runs (and prints the word along the way).
        toy = self.path("toy")
        os.makedirs(toy)
        shutil.copy(os.path.join(BUILD_DIR, "CTestCustom.cmake"), toy)
        test_comm = mbtest.tool("test_comm")
        gtest_name = "OnRanks.SharedSumReportsTheWaitForALateRank"
        with open(os.path.join(toy, "CTestTestfile.cmake"), "w") as f:
            f.write(f'add_test([=[comm.{gtest_name}]=] "{test_comm}" "--gtest_filter={gtest_name}" '
                    '"--gtest_also_run_disabled_tests")\n'
                    f'set_tests_properties([=[comm.{gtest_name}]=] PROPERTIES '
                    'SKIP_REGULAR_EXPRESSION "\\\\[  SKIPPED \\\\]")\n'
                    'add_test(e2e.test_needs_a_thing /bin/sh -c '
                    '"echo \'SKIPPED: no thing here (install thing)\'; exit 77")\n'
                    'set_tests_properties(e2e.test_needs_a_thing PROPERTIES SKIP_RETURN_CODE 77)\n'
                    'add_test(e2e.test_runs /bin/sh -c "echo \'SKIPPED: only a word\'; echo OK")\n')
        result = mbtest.run([CTEST, "--test-dir", toy, "--output-on-failure", "-j2"], cwd=self.dir)
        self.assertEqual(result.rc, 0, result)
        self.assertIn("The following tests did not run:", result.out, result)
        after = result.out.split("The following tests did not run:", 1)[1]
        self.assertIn("Why the skipped tests did not run:", after, result)
        reasons = after.split("Why the skipped tests did not run:", 1)[1].strip().splitlines()
        self.assertEqual(sorted(line.strip() for line in reasons), [
            f"1 test (comm.{gtest_name}): needs mpirun -n 3 (tests/e2e/test_distributed.py)",
            "1 test (e2e.test_needs_a_thing): no thing here (install thing)",
        ], result)

    def test_nothing_is_added_where_nothing_was_skipped(self):
        toy = self.path("toy")
        os.makedirs(toy)
        shutil.copy(os.path.join(BUILD_DIR, "CTestCustom.cmake"), toy)
        with open(os.path.join(toy, "CTestTestfile.cmake"), "w") as f:
            f.write('add_test(e2e.test_runs /bin/true)\n')
        for args in (["--output-on-failure"], ["-N"]):
            result = mbtest.run([CTEST, "--test-dir", toy, *args], cwd=self.dir)
            self.assertEqual(result.rc, 0, result)
            self.assertNotIn("did not run", result.out + result.err, result)


if __name__ == "__main__":
    mbtest.main()
