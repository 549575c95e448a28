#!/usr/bin/env bash
# The sanitizer stage of CI (.ci/run runs it after the README test command). Builds the library,
# tools, unit tests and fuzz targets with Clang, AddressSanitizer, UndefinedBehaviorSanitizer
# and libFuzzer's coverage, then runs the unit tests, each fuzz target for MBKIT_FUZZ_SECONDS
# after replaying its corpus, and the end-to-end tests listed in tests/sanitizers/e2e-tests.
# Prints the time of each part. Exits non-zero when a test fails or when any process wrote a
# sanitizer report, even one whose exit status a test did not look at (a child, an MPI rank).
#
# Budget (CI must end within 30 minutes on 2 cores; the gcc build and the README tests take
# about 12): -O1 and line tables only, no CUDA, no benchmarks, one build for tests and fuzz
# targets; tests/sanitizers/README.md has the measured times of each part.
#
# MBKIT_SAN_DEADLINE (seconds since the epoch, .ci/run sets it): the stage ends by then. A part
# that would not finish in the time left is not started, and the build is given only the time
# left less what the unit tests need: the stage then says what it left out and exits 0, since
# everything it did run passed; without the variable every part runs.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${MBKIT_SAN_BUILD:-build-san}
started=$(date +%s)
part_started=$started
deadline=${MBKIT_SAN_DEADLINE:-0}
part_done() {
  local now
  now=$(date +%s)
  echo "sanitizer stage: $1 took $((now - part_started)) s ($((now - started)) s in all)"
  part_started=$now
}
# Seconds left before the deadline (a large number without one).
time_left() {
  if [ "$deadline" -eq 0 ]; then echo 1000000; else echo $((deadline - $(date +%s))); fi
}
reports=""
failed=0
# Ends the stage: fails when a part failed or any process wrote a sanitizer report.
finish() {
  if [ -n "$reports" ] && [ -n "$(ls -A "$reports")" ]; then
    failed=1
    for report in "$reports"/*; do
      echo "sanitizer stage: report $report:" >&2
      cat "$report" >&2
    done
  fi
  [ -n "$reports" ] && rm -rf "$reports"
  if [ "$failed" -ne 0 ]; then
    echo "sanitizer stage: FAILED after $(($(date +%s) - started)) s" >&2
    exit 1
  fi
  echo "sanitizer stage: passed in $(($(date +%s) - started)) s"
  exit 0
}
# Ends the stage when fewer than $1 seconds are left for what comes next ($2): what ran before
# must still have passed, without a sanitizer report.
need_time() {
  local left
  left=$(time_left)
  if [ "$left" -lt "$1" ]; then
    echo "sanitizer stage: $2 left out: ${left} s left of CI's budget, it needs about $1" >&2
    finish
  fi
}

if [ "$(id -u)" -eq 0 ]; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
    clang-14 libclang-rt-14-dev libomp-14-dev llvm-14
  part_done "installing clang"
fi

need_time 600 "the whole stage (the build takes about 8-10 minutes)"
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DCMAKE_C_COMPILER=clang-14 -DCMAKE_CXX_COMPILER=clang++-14 \
      "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O1 -gline-tables-only" \
      "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -gline-tables-only" \
      -DMBKIT_CUDA=OFF -DMBKIT_SANITIZE=address,undefined -DMBKIT_FUZZ=ON \
      -DMBKIT_BUILD_BENCHMARKS=OFF -DMBKIT_WERROR=ON
part_done "configuring"
# Only what the stage runs: the unit test and fuzz programs, and the tools the end-to-end tests
# of e2e-tests start (the other tools, the front `mb` and the generated completion are skipped).
# (test_bad_input checks "FILE exists" in mb-bench-partitions, mb-bench-bandwidth and mb-report as well.)
e2e_tools="mb-dataset mb-eval mb-plot mb-train-fmb mb-bench-partitions mb-bench-bandwidth mb-report"
targets=$(cmake --build "$build" --target help | sed -n 's/^\.\.\. \(test_[a-z]*\|fuzz_[a-z_]*\)$/\1/p')
# The build gets the time left less the unit tests' (about 3 minutes): cut off, the stage ends.
build_seconds=$(( $(time_left) - 180 ))
# Cut off by its time (timeout's status 124), the build did not fail: the stage ends, tests left
# out. (Asking the time left instead said FAILED: the build stops with the unit tests' 180 s
# still left, as it did on a slow run at stop 52.)
build_status=0
# shellcheck disable=SC2086 # word lists
timeout "$build_seconds" cmake --build "$build" -j"$(nproc)" --target $targets $e2e_tools ||
  build_status=$?
if [ "$build_status" -eq 124 ] || { [ "$build_status" -ne 0 ] && [ "$(time_left)" -le 150 ]; }; then
  echo "sanitizer stage: the build did not finish within CI's budget ($build_seconds s); tests" \
    "left out" >&2
  exit 0
fi
if [ "$build_status" -ne 0 ]; then
  echo "sanitizer stage: the build FAILED" >&2
  exit 1
fi
part_done "building"

. tests/sanitizers/env.sh
# Every report also lands in a file here, so that one a test did not see still fails the stage.
reports=$(mktemp -d /tmp/mbkit-sanitizer-reports.XXXXXX)
export ASAN_OPTIONS="${ASAN_OPTIONS}:log_path=${reports}/asan"
export UBSAN_OPTIONS="${UBSAN_OPTIONS}:log_path=${reports}/ubsan"

run_part() {
  local name=$1
  shift
  if ! "$@"; then
    failed=1
    echo "sanitizer stage: $name FAILED" >&2
  fi
  part_done "$name"
}
# Open MPI's error path leaks inside a component that MPI_Finalize unloads, so LeakSanitizer
# cannot name its library (<unknown module>) and lsan.supp cannot match it: the one test that
# makes MPI fail runs with every check but the leak check.
mpi_failure='^util\.Check\.MpiFailureIsACommunicationErrorWithMpisOwnText$'
need_time 180 "the unit tests"
run_part "unit tests" ctest --test-dir "$build" --output-on-failure -j"$(nproc)" -L unit -LE isa \
  -E "$mpi_failure"
run_part "unit test of an MPI failure" env ASAN_OPTIONS="${ASAN_OPTIONS}:detect_leaks=0" \
  ctest --test-dir "$build" --output-on-failure -R "$mpi_failure"
need_time 90 "the fuzz targets"
run_part "fuzz targets" ctest --test-dir "$build" --output-on-failure -j"$(nproc)" -L fuzz
# Measured 41 s on a quiet 2-core machine (80 CPU s).
need_time 90 "the end-to-end tests"
run_part "end-to-end tests" ctest --test-dir "$build" --output-on-failure -j"$(nproc)" \
  -R "$(cat tests/sanitizers/e2e-tests)"

finish
