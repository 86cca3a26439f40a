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

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
build="$root/build"
configs="tiny small medium char-small"
out="gemm-shapes-$(date +%Y%m%d-%H%M%S)"
repeats=7

while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) build="$2"; shift 2 ;;
    --configs) configs="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --repeats) repeats="$2"; shift 2 ;;
    -h|--help) sed -n '2,20p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "compare_gemm_backends.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done

for program in bench/ag-bench-train bench/ag-bench-lm bench/ag-bench-gemm-backends \
               bench/libag-gemm-trace.so; do
  if [[ ! -e "$build/$program" ]]; then
    echo "compare_gemm_backends.sh: $build/$program not found; build it first:" >&2
    echo "  cmake --build $build -j2 --target ag-bench-train ag-bench-lm ag-bench-gemm-backends" \
         "ag-gemm-trace" >&2
    exit 1
  fi
done
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
