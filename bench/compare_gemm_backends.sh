#!/usr/bin/env bash
# compare_gemm_backends.sh — the products of each configuration's training step, on each GEMM
# library: the measurement behind ag's choice of backend (docs/benchmarks.md, "GEMM backends").
#
#   bench/compare_gemm_backends.sh [--build DIR] [--configs "tiny small medium char-small"]
#                                  [--out DIR] [--repeats R]
#
# For each configuration it
#   1. runs one training step of ag-bench-train (char-small: ag-bench-lm) under the LD_PRELOAD
#      shim libag-gemm-trace.so with AG_GEMM_BACKEND=openblas and AG_SMALL_GEMM=off (every product
#      through OpenBLAS's cblas_sgemm, attention's heads too), which writes every product of the
#      step, counted by shape, to DIR/<config>.shapes (bench/gemm_trace.cpp);
#   2. replays those products on each library the build found — OpenBLAS, ag's own kernel for
#      attention's heads, oneDNN (libdnnl-dev), BLIS (libblis-dev), libxsmm (libxsmm-dev) — one
#      call each and, for attention's per-head products, in groups of batch × heads
#      (ag-bench-gemm-backends), and prints ms per step per shape and in total, one thread.
# BLIS and libxsmm are optional: install them (apt-get install libblis-dev libxsmm-dev) and
# re-run cmake to measure them too. Takes about a minute; run it on a quiet machine.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"  # the repository
# shellcheck source=scripts/options.sh
source "$root/scripts/options.sh"  # parse_options, require_built

# The options' variables (parse_options sets them; declared here for shellcheck).
declare build configs out repeats
parse_options "${BASH_SOURCE[0]}" \
  --build build "$root/build" \
  --configs configs "tiny small medium char-small" \
  --out out "gemm-shapes-$(date +%Y%m%d-%H%M%S)" \
  --repeats repeats 7 \
  -- "$@"

require_built "${BASH_SOURCE[0]}" "$build" bench/ag-bench-train bench/ag-bench-lm \
  bench/ag-bench-gemm-backends bench/libag-gemm-trace.so
mkdir -p "$out"
echo "# $(date -u '+%Y-%m-%d %H:%M UTC'); $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'), $(nproc) cores; load: $(cut -d' ' -f1-3 /proc/loadavg)"
for config in $configs; do
  # Batch × heads of the configuration: the per-head products a batched call would make at once.
  case "$config" in
    tiny) group=256 ;;        # 64 × 4
    small) group=128 ;;       # 32 × 4
    medium) group=256 ;;      # 32 × 8
    char-small) group=128 ;;  # 32 × 4
    *) echo "compare_gemm_backends.sh: unknown config '$config'" >&2; exit 2 ;;
  esac
  if [[ $config == char-small ]]; then
    step=("$build/bench/ag-bench-lm" --steps 1 --warmup 0 --no-eval --no-sgemm-peak)
  else
    step=("$build/bench/ag-bench-train" --config "$config" --steps 1 --warmup 0 --no-sgemm-peak)
  fi
  AG_GEMM_TRACE="$out/$config.shapes" AG_GEMM_BACKEND=openblas AG_SMALL_GEMM=off \
    LD_PRELOAD="$build/bench/libag-gemm-trace.so" "${step[@]}" --threads 1 >/dev/null
  echo
  "$build/bench/ag-bench-gemm-backends" "$out/$config.shapes" --group "$group" --repeats "$repeats"
done
