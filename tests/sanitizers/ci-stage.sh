#!/usr/bin/env bash
# The sanitizer stage meant for .ci/run, after the README test command (not wired in yet: its
# build was not timed to the end on CI's machine; see tests/sanitizers/README.md). Builds the
# library, tools, unit tests and fuzz targets with Clang, ASan, UBSan and libFuzzer's coverage
# at -O1, then runs the unit tests, each fuzz target for MBKIT_FUZZ_SECONDS after its corpus,
# and the end-to-end tests listed in tests/sanitizers/e2e-tests.
set -euo pipefail
cd "$(dirname "$0")/../.."
started=$(date +%s)
export DEBIAN_FRONTEND=noninteractive
apt-get install -y -q --no-install-recommends clang-14 libclang-rt-14-dev libomp-14-dev llvm-14
cmake -S . -B build-san -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DCMAKE_C_COMPILER=clang-14 -DCMAKE_CXX_COMPILER=clang++-14 \
      "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O1 -gline-tables-only" \
      "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -gline-tables-only" \
      -DMBKIT_CUDA=OFF -DMBKIT_SANITIZE=address,undefined -DMBKIT_FUZZ=ON \
      -DMBKIT_BUILD_BENCHMARKS=OFF
cmake --build build-san -j"$(nproc)"
echo "sanitizer stage: built after $(( $(date +%s) - started )) s"
. tests/sanitizers/env.sh
ctest --test-dir build-san --output-on-failure -j"$(nproc)" -L 'unit|fuzz' -LE isa
ctest --test-dir build-san --output-on-failure -j"$(nproc)" -R "$(cat tests/sanitizers/e2e-tests)"
echo "sanitizer stage: done after $(( $(date +%s) - started )) s"
