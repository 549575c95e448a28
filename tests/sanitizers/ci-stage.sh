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
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${MBKIT_SAN_BUILD:-build-san}
started=$(date +%s)
part_started=$started
part_done() {
  local now
  now=$(date +%s)
  echo "sanitizer stage: $1 took $((now - part_started)) s ($((now - started)) s in all)"
  part_started=$now
}

if [ "$(id -u)" -eq 0 ]; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
    clang-14 libclang-rt-14-dev libomp-14-dev llvm-14
  part_done "installing clang"
fi

cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DCMAKE_C_COMPILER=clang-14 -DCMAKE_CXX_COMPILER=clang++-14 \
      "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O1 -gline-tables-only" \
      "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -gline-tables-only" \
      -DMBKIT_CUDA=OFF -DMBKIT_SANITIZE=address,undefined -DMBKIT_FUZZ=ON \
      -DMBKIT_BUILD_BENCHMARKS=OFF
part_done "configuring"
# Only what the stage runs: the unit test and fuzz programs, and the tools the end-to-end tests
# of e2e-tests start (the other tools, the front `mb` and the generated completion are skipped).
e2e_tools="mb-dataset mb-eval mb-plot mb-train-fmb"
targets=$(cmake --build "$build" --target help | sed -n 's/^\.\.\. \(test_[a-z]*\|fuzz_[a-z_]*\)$/\1/p')
# shellcheck disable=SC2086 # word lists
cmake --build "$build" -j"$(nproc)" --target $targets $e2e_tools
part_done "building"

. tests/sanitizers/env.sh
# Every report also lands in a file here, so that one a test did not see still fails the stage.
reports=$(mktemp -d /tmp/mbkit-sanitizer-reports.XXXXXX)
export ASAN_OPTIONS="${ASAN_OPTIONS}:log_path=${reports}/asan"
export UBSAN_OPTIONS="${UBSAN_OPTIONS}:log_path=${reports}/ubsan"

failed=0
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
run_part "unit tests" ctest --test-dir "$build" --output-on-failure -j"$(nproc)" -L unit -LE isa \
  -E "$mpi_failure"
run_part "unit test of an MPI failure" env ASAN_OPTIONS="${ASAN_OPTIONS}:detect_leaks=0" \
  ctest --test-dir "$build" --output-on-failure -R "$mpi_failure"
run_part "fuzz targets" ctest --test-dir "$build" --output-on-failure -j"$(nproc)" -L fuzz
run_part "end-to-end tests" ctest --test-dir "$build" --output-on-failure -j"$(nproc)" \
  -R "$(cat tests/sanitizers/e2e-tests)"

if [ -n "$(ls -A "$reports")" ]; then
  failed=1
  for report in "$reports"/*; do
    echo "sanitizer stage: report $report:" >&2
    cat "$report" >&2
  done
fi
rm -rf "$reports"
if [ "$failed" -ne 0 ]; then
  echo "sanitizer stage: FAILED after $(($(date +%s) - started)) s" >&2
  exit 1
fi
echo "sanitizer stage: passed in $(($(date +%s) - started)) s"
