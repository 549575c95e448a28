#!/bin/sh
# Usage: run_at_isa.sh LEVEL COMMAND [ARGUMENT...]
#
# Runs COMMAND with ONEDNN_MAX_CPU_ISA=LEVEL (AVX512_CORE, AVX2 or SSE41), so that oneDNN uses
# no instruction newer than LEVEL's, as on an older CPU. Where this CPU lacks LEVEL, oneDNN
# would quietly run at a lower level: the script says so and exits with status 77, which CTest
# reports as skipped (SKIP_RETURN_CODE). The CPU's features are read at test time, from
# /proc/cpuinfo (Linux; elsewhere every level is skipped).
level=$1
shift
case $level in
  AVX512_CORE) flags="avx512f avx512bw avx512vl avx512dq" ;;
  AVX2) flags="avx2 fma" ;;
  SSE41) flags="sse4_1" ;;
  *) echo "run_at_isa.sh: unknown level '$level' (known: AVX512_CORE, AVX2, SSE41)" >&2; exit 2 ;;
esac
for flag in $flags; do
  if ! grep -qw "$flag" /proc/cpuinfo 2>/dev/null; then
    echo "SKIPPED: this CPU lacks $flag: nothing tested at $level"
    exit 77
  fi
done
ONEDNN_MAX_CPU_ISA=$level
export ONEDNN_MAX_CPU_ISA
exec "$@"
