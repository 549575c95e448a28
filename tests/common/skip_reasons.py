#!/usr/bin/env python3
"""Usage: skip_reasons.py [BUILD_DIR]

Run by ctest after every run (CTEST_CUSTOM_POST_TEST, tests/common/CTestCustom.cmake.in): says
why the tests of this run that did not run were skipped, one line per reason, below ctest's
list of their names. CTest records no reason, and --output-on-failure hides what a skipped test
printed, so the reasons are read from the run's log (Testing/Temporary/LastTest*.log.tmp, which
ctest renames once this has run): GoogleTest's message after "FILE:LINE: Skipped" in a test
that printed "[  SKIPPED ]", and the "SKIPPED: reason" line the end-to-end tests
(tests/e2e/mbtest.py) and tests/common/run_at_isa.sh print last, before they exit with status 77.
Prints nothing when nothing was skipped (and for ctest -N); never fails the run. BUILD_DIR defaults to the
current directory, where ctest runs it."""

import glob
import os
import re
import sys

TEST_START = re.compile(r"^\d+/\d+ Testing: (.+)$", re.MULTILINE)
GTEST_SKIPPED = re.compile(r"^\[  SKIPPED \] ", re.MULTILINE)
# The message lines after "FILE:LINE: Skipped", up to gtest's next "[ ... ]" line.
GTEST_REASON = re.compile(r"^\S.*:\d+: Skipped\n((?:(?!\[).+\n)*)", re.MULTILINE)
SCRIPT_REASON = re.compile(r"^SKIPPED: (.+)$")
NAMES_SHOWN = 3


def current_log(build_dir):
    """The log ctest is writing now (the newest: a dashboard run names it by date)."""
    logs = glob.glob(os.path.join(build_dir, "Testing", "Temporary", "LastTest*.log.tmp"))
    return max(logs, key=os.path.getmtime) if logs else None


def tests_in(log_text):
    """(name, command line, output) of every test in a ctest log."""
    starts = list(TEST_START.finditer(log_text))
    for i, start in enumerate(starts):
        end = starts[i + 1].start() if i + 1 < len(starts) else len(log_text)
        block = log_text[start.end():end]
        command = re.search(r"^Command: (.*?)\nDirectory: ", block, re.MULTILINE | re.DOTALL)
        output = re.search(r"^Output:\n-+\n(.*?)^<end of output>", block, re.MULTILINE | re.DOTALL)
        yield start.group(1), command.group(1) if command else "", output.group(1) if output else ""


def skip_reason(command, output):
    """Why a test skipped itself, or None where it ran."""
    # A test discovered by gtest_discover_tests, which CTest reports skipped on "[  SKIPPED ]".
    if "--gtest_also_run_disabled_tests" in command and GTEST_SKIPPED.search(output):
        found = GTEST_REASON.search(output)
        reason = " ".join(found.group(1).split()) if found else ""
        return reason or "GTEST_SKIP() without a message"
    # The log does not say which tests skipped themselves: a test that exits with status 77
    # prints "SKIPPED: reason" last; a test that ran and passed does not end with such a line.
    lines = output.strip().splitlines()
    found = SCRIPT_REASON.match(lines[-1]) if lines else None
    return found.group(1).strip() if found else None


def main():
    if len(sys.argv) > 2:
        print(__doc__.split("\n\n")[0], file=sys.stderr)
        return 2
    log = current_log(sys.argv[1] if len(sys.argv) == 2 else ".")
    if log is None:
        return 0
    with open(log, encoding="utf-8", errors="replace") as f:
        text = f.read()
    by_reason = {}
    for name, command, output in tests_in(text):
        reason = skip_reason(command, output)
        if reason is not None:
            by_reason.setdefault(reason, []).append(name)
    if not by_reason:
        return 0
    print("\nWhy the skipped tests did not run:")
    for reason, names in sorted(by_reason.items(), key=lambda item: (-len(item[1]), item[0])):
        shown = ", ".join(sorted(names)[:NAMES_SHOWN])
        more = f" and {len(names) - NAMES_SHOWN} more" if len(names) > NAMES_SHOWN else ""
        count = f"{len(names)} test{'s' if len(names) > 1 else ''}"
        print(f"\t{count} ({shown}{more}): {reason}")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception as error:  # a reason left unsaid must not fail the test run
        print(f"skip_reasons.py: could not read the skip reasons: {error}", file=sys.stderr)
        sys.exit(0)
