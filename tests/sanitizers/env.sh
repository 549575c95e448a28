# Sanitizer options for running the tests of a -DMBKIT_SANITIZE build (sourced by .ci/run):
#   . tests/sanitizers/env.sh && ctest --test-dir build-san -L unit
# Leak checking stays on for our code; lsan.supp silences leaks that Open MPI, PMIx, hwloc,
# libevent and oneDNN's JIT keep for the life of the process (not ours to free).
_mbkit_san_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export ASAN_OPTIONS="detect_leaks=1:strict_string_checks=1:check_initialization_order=1"
export LSAN_OPTIONS="suppressions=${_mbkit_san_dir}/lsan.supp:print_suppressions=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:suppressions=${_mbkit_san_dir}/ubsan.supp"
unset _mbkit_san_dir
