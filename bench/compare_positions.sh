#!/usr/bin/env bash
# compare_positions.sh — what each position scheme (nn::PositionScheme: sinusoidal, learned,
# rope, alibi, none) costs: char-small's training step A/B in one run, and generation with the
# key/value cache against recomputing, at 256 tokens of context and for 1024 tokens past a block
# of 256.
#
#   bench/compare_positions.sh [--build DIR] [--threads N] [--steps S]
#
# 1. ag-bench-lm --positions-ab: the five models from one seed trained on the same batches, their
#    steps in turn, S rounds (default 60; 10 untimed): the median ms/step per scheme and its ratio
#    to sinusoidal's (goal: rope and alibi ≤ 1.1×).
# 2. ag-bench-lm --generation --positions P: ms per new token at 256 tokens of context, with the
#    cache and recomputing the prefix (goal: ≥ 5× for every scheme).
# 3. ag-bench-lm --long-generation --positions P: lm::generate of 1024 tokens with block_size 256,
#    tokens/s both ways: past the block the absolute schemes rebuild the cache every step, the
#    relative ones slide it (goal for rope and alibi: the cache keeps its speed, ≥ 5×).
# About 5 minutes at 1 thread on the benchmark machine (docs/benchmarks.md, "Position schemes").
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"  # the repository
# shellcheck source=scripts/options.sh
source "$root/scripts/options.sh"  # parse_options, require_built

# The options' variables (parse_options sets them; declared here for shellcheck).
declare build threads steps
parse_options "${BASH_SOURCE[0]}" \
  --build build "$root/build" \
  --threads threads 1 \
  --steps steps 60 \
  -- "$@"

require_built "${BASH_SOURCE[0]}" "$build" bench/ag-bench-lm
bench="$build/bench/ag-bench-lm"
schemes="sinusoidal learned rope alibi none"

results=$(mktemp)
trap 'rm -f "$results"' EXIT
"$bench" --positions-ab "${schemes// /,}" --steps "$steps" --warmup 10 --threads "$threads" \
  --json >>"$results"
for scheme in $schemes; do
  "$bench" --generation --positions "$scheme" --context 256 --new-tokens 32 --threads "$threads" \
    --json >>"$results"
  "$bench" --long-generation --positions "$scheme" --block-size 256 --long-tokens 1024 \
    --threads "$threads" --json >>"$results"
done

python3 - "$results" "$threads" <<'PY'
import json, sys
runs = [json.loads(line) for line in open(sys.argv[1])]
ab = next(r for r in runs if r["config"] == "positions-ab")
gen = {r["positions"]: r for r in runs if r["config"] == "generation"}
long = {r["positions"]: r for r in runs if r["config"] == "long-generation"}
print(f"char-small, {sys.argv[2]} thread(s); training step A/B over {ab['steps']} rounds "
      f"({ab['warmup']} untimed)")
print(f"{'positions':<11} {'ms/step':>8} {'ratio':>6}   {'cache ms/tok':>12} {'prefix ms/tok':>13} "
      f"{'speed-up':>8}   {'1024 tok/s cache':>16} {'no cache':>9} {'speed-up':>8}")
goals = []
for s in ab["schemes"]:
    p, g, l = s["positions"], gen[s["positions"]], long[s["positions"]]
    print(f"{p:<11} {s['ms_per_step']:>8.2f} {s['ratio']:>6.3f}   {g['ms_per_token_cached']:>12.4f} "
          f"{g['ms_per_token_recompute']:>13.4f} {g['speedup']:>7.2f}x   "
          f"{l['tokens_per_s_cached']:>16.1f} {l['tokens_per_s_recompute']:>9.1f} {l['speedup']:>7.2f}x")
    if p in ("rope", "alibi"):
        goals.append((f"{p} step <= 1.1x sinusoidal", f"{s['ratio']:.3f}x", s["ratio"] <= 1.1))
        goals.append((f"{p}: 1024 tokens past the block, cache >= 5x", f"{l['speedup']:.2f}x",
                      l["speedup"] >= 5))
    goals.append((f"{p}: cache >= 5x at 256 tokens of context", f"{g['speedup']:.2f}x", g["speedup"] >= 5))
print("\ngoals:")
for name, value, met in goals:
    print(f"  {name:<46} {value:>8}   {'met' if met else 'MISSED'}")
PY
