#!/usr/bin/env bash
# compare_attention.sh — ag's two fused attention kernels against each other on multi-head
# attention forward + backward (the mha config: batch 32, width 256, 8 heads, dropout 0.1) as the
# sequence grows: scaled_dot_product_attention (whole rows: each head's T × T weights at once, kept
# for the backward) and flash_attention (64 × 128 tiles, online softmax, nothing T × T kept).
#
#   bench/compare_attention.sh [--build DIR] [--threads N] [--sequences "64 128 256 512 1024"] [--rounds R]
#
# Each (sequence, kernel) runs R times (default 3), alternating the kernels so that a busy machine
# slows both alike; the table shows the median ms/step of the rounds, the peak RSS, and tiled/whole.
# ag::kTiledAttentionFromKeys (autograd/ops.h), where ag::attention switches to the tiled kernel,
# is read off this table (docs/benchmarks.md, "Tiled attention"). About 4 minutes on 2 cores.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"  # the repository
# shellcheck source=scripts/options.sh
source "$root/scripts/options.sh"  # parse_options, require_built

# The options' variables (parse_options sets them; declared here for shellcheck).
declare build threads sequences rounds
parse_options "${BASH_SOURCE[0]}" \
  --build build "$root/build" \
  --threads threads 1 \
  --sequences sequences "64 128 256 512 1024" \
  --rounds rounds 3 \
  -- "$@"

require_built "${BASH_SOURCE[0]}" "$build" bench/ag-bench-train
bench="$build/bench/ag-bench-train"

results=$(mktemp)
trap 'rm -f "$results"' EXIT
for sequence in $sequences; do
  # Fewer timed steps as a step grows with T² (64: 40 steps, 1024: 3)
  steps=$((40 * 64 * 64 / (sequence * sequence)))
  ((steps < 3)) && steps=3
  for ((round = 0; round < rounds; ++round)); do
    for kernel in whole tiled; do
      "$bench" --config mha --sequence "$sequence" --attention "$kernel" --threads "$threads" --steps "$steps" \
        --warmup 1 --no-sgemm-peak --json >>"$results"
    done
  done
done

python3 - "$results" "$threads" <<'PY'
import json, statistics, sys
runs = [json.loads(line) for line in open(sys.argv[1])]
print(f"multi-head attention forward + backward, batch 32, width 256, 8 heads, dropout 0.1, {sys.argv[2]} thread(s)")
print(f"{'T':>6} {'whole ms':>10} {'tiled ms':>10} {'tiled/whole':>12} {'whole RSS MB':>13} {'tiled RSS MB':>13}")
for sequence in sorted({r["sequence"] for r in runs}):
    row = {}
    for kernel in ("whole", "tiled"):
        mine = [r for r in runs if r["sequence"] == sequence and r["attention"] == kernel]
        row[kernel] = (statistics.median(r["ms_per_step"] for r in mine), max(r["peak_rss_mb"] for r in mine))
    print(f"{sequence:>6} {row['whole'][0]:>10.1f} {row['tiled'][0]:>10.1f} {row['tiled'][0] / row['whole'][0]:>12.2f}"
          f" {row['whole'][1]:>13.1f} {row['tiled'][1]:>13.1f}")
PY
