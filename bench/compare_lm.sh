#!/usr/bin/env bash
# compare_lm.sh — ag against PyTorch on the char-small language model: the validation loss after
# the full 2000-step training run, per seed, and the time per step of the same runs.
#
#   bench/compare_lm.sh [--build DIR] [--out FILE] [--seeds "0 1 2"] [--steps S] [--threads N]
#                       [--no-generation]
#   bench/compare_lm.sh --from FILE      # only print the table of an earlier run's results
#
# For every seed it runs ag-bench-lm and bench/bench_lm_torch.py side by side (at the same time,
# one process each, --threads N each, default 1: on a 2-core machine each gets a core), waits for
# both, and appends their JSON lines to FILE (default: compare_lm-<date>.jsonl in the current
# directory). Then, unless --no-generation, ag-bench-lm --generation (the key/value cache against
# recomputing the prefix, at 256 tokens of context). It prints the table and the goals (see
# docs/benchmarks.md, "The language model (char-small)"):
#   validation loss: ag's mean over the seeds within 2 % of PyTorch's mean
#   ms/step at 1 thread: ag <= 0.6x PyTorch (these runs are side by side, each on its own core;
#     bench/compare_train.sh --configs char-small times the step alone, one process at a time)
#   generation: >= 5x faster per token with the cache
# --steps S: training steps (default 2000, the schedule's length; fewer only for a quick check —
#   the losses are then those of an unfinished schedule). One seed's pair takes about 8–10
#   minutes on a quiet machine (PyTorch's run is the longer); the whole run about 30.
# PyTorch is Debian's python3-torch, so the script runs /usr/bin/python3 ($PYTHON overrides it).
# Both run OpenBLAS on its AVX-512 kernels where the CPU has them, as bench/compare_train.sh does
# (OPENBLAS_CORETYPE from scripts/openblas-coretype.sh).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
# shellcheck source=scripts/options.sh
source "$root/scripts/options.sh"  # parse_options, require_built
python="${PYTHON:-/usr/bin/python3}"

# The options' variables (parse_options sets them; declared here for shellcheck).
declare build out seeds steps threads generation from
parse_options "${BASH_SOURCE[0]}" \
  --build build "$root/build" \
  --out out "compare_lm-$(date +%Y%m%d-%H%M%S).jsonl" \
  --seeds seeds "0 1 2" \
  --steps steps 2000 \
  --threads threads 1 \
  --no-generation generation=0 1 \
  --from from "" \
  -- "$@"

openblas_core="$("$root/scripts/openblas-coretype.sh")"
if [[ -n "$openblas_core" ]]; then
  export OPENBLAS_CORETYPE="$openblas_core"
fi

if [[ -z "$from" ]]; then
  require_built "${BASH_SOURCE[0]}" "$build" bench/ag-bench-lm
  bench_ag="$build/bench/ag-bench-lm"
  : > "$out"
  echo "# $(date -u '+%Y-%m-%d %H:%M UTC'); $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'), $(nproc) cores; load: $(cut -d' ' -f1-3 /proc/loadavg); OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset}" >&2
  echo "# results -> $out" >&2
  for seed in $seeds; do
    echo "  seed $seed: ag and torch, $steps steps, $threads thread(s) each, side by side" >&2
    ag_json="$(mktemp)"; torch_json="$(mktemp)"
    "$bench_ag" --seed "$seed" --steps "$steps" --threads "$threads" --json > "$ag_json" &
    ag_pid=$!
    env -u OMP_WAIT_POLICY "$python" "$here/bench_lm_torch.py" --seed "$seed" --steps "$steps" \
      --threads "$threads" --json > "$torch_json" &
    torch_pid=$!
    status=0
    wait "$ag_pid" || status=$?
    wait "$torch_pid" || status=$?
    cat "$ag_json" "$torch_json" >> "$out"
    rm -f "$ag_json" "$torch_json"
    if [[ $status != 0 ]]; then
      echo "compare_lm.sh: a run of seed $seed failed (exit status $status)" >&2
      exit 1
    fi
    echo "    load: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
  done
  if [[ $generation == 1 ]]; then
    echo "  ag generation: cache against full-prefix recomputation" >&2
    "$bench_ag" --generation --threads "$threads" --json >> "$out"
  fi
  echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
  from="$out"
fi

"$python" - "$from" <<'EOF'
import json
import math
import statistics
import sys

LN2 = math.log(2)

rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip().startswith("{")]
train = [r for r in rows if r.get("config") == "char-small" and r.get("val_loss") is not None]
ag = {r["seed"]: r for r in train if r["impl"] == "ag"}
torch_runs = {r["seed"]: r for r in train if r["impl"] == "torch"}
seeds = sorted(set(ag) & set(torch_runs))

goals = []
if seeds:
    steps = {r["steps"] for s in seeds for r in (ag[s], torch_runs[s])}
    threads = {r["threads"] for s in seeds for r in (ag[s], torch_runs[s])}
    print(f"char-small on the fortunes corpus: {'/'.join(map(str, sorted(steps)))} steps, "
          f"{'/'.join(map(str, sorted(threads)))} thread(s) each, ag and torch of a seed side by side")
    print("val loss: mean cross-entropy per character over the validation windows (nats); "
          "diff = ag / torch - 1")
    print()
    head = (f"{'seed':>4} {'ag val':>8} {'torch val':>9} {'diff':>7} {'ag bpc':>7} {'torch bpc':>9} "
            f"{'ag ms':>8} {'torch ms':>8} {'ratio':>6} {'ag train s':>10} {'torch train s':>13}")
    print(head)
    print("-" * len(head))
    for s in seeds:
        a, t = ag[s], torch_runs[s]
        print(f"{s:>4} {a['val_loss']:>8.4f} {t['val_loss']:>9.4f} "
              f"{100 * (a['val_loss'] / t['val_loss'] - 1):>+6.2f}% "
              f"{a['val_loss'] / LN2:>7.4f} {t['val_loss'] / LN2:>9.4f} "
              f"{a['ms_per_step']:>8.2f} {t['ms_per_step']:>8.2f} "
              f"{a['ms_per_step'] / t['ms_per_step']:>6.3f} {a['train_seconds']:>10.1f} "
              f"{t['train_seconds']:>13.1f}")
    ag_mean = statistics.mean(ag[s]["val_loss"] for s in seeds)
    torch_mean = statistics.mean(torch_runs[s]["val_loss"] for s in seeds)
    ag_ms = statistics.mean(ag[s]["ms_per_step"] for s in seeds)
    torch_ms = statistics.mean(torch_runs[s]["ms_per_step"] for s in seeds)
    print(f"{'mean':>4} {ag_mean:>8.4f} {torch_mean:>9.4f} {100 * (ag_mean / torch_mean - 1):>+6.2f}% "
          f"{'':>7} {'':>9} {ag_ms:>8.2f} {torch_ms:>8.2f} {ag_ms / torch_ms:>6.3f}")
    if len(seeds) > 1:
        def spread(runs):
            return max(runs[s]["val_loss"] for s in seeds) - min(runs[s]["val_loss"] for s in seeds)
        print(f"spread over the seeds (max - min): ag {spread(ag):.4f}, torch {spread(torch_runs):.4f}")
    print(f"vocabulary {ag[seeds[0]]['vocab']} (torch {torch_runs[seeds[0]]['vocab']}), "
          f"{ag[seeds[0]]['val_windows']} validation windows (torch {torch_runs[seeds[0]]['val_windows']})")
    diff = abs(ag_mean / torch_mean - 1)
    goals.append(("val loss: ag's mean within 2 % of torch's", diff <= 0.02, f"{100 * diff:.2f} %"))
    worst = max(abs(ag[s]["val_loss"] / torch_runs[s]["val_loss"] - 1) for s in seeds)
    goals.append(("val loss: every seed within 2 %", worst <= 0.02, f"worst {100 * worst:.2f} %"))
    if all("cpu_ms_per_step" in r for s in seeds for r in (ag[s], torch_runs[s])):
        ag_cpu = statistics.mean(ag[s]["cpu_ms_per_step"] for s in seeds)
        torch_cpu = statistics.mean(torch_runs[s]["cpu_ms_per_step"] for s in seeds)
        print(f"CPU time per step (median, mean over the seeds): ag {ag_cpu:.2f} ms, torch "
              f"{torch_cpu:.2f} ms, ratio {ag_cpu / torch_cpu:.3f}")
    if threads == {1}:
        goals.append(("ms/step ag <= 0.6x torch, 1 thread (side by side)", ag_ms / torch_ms <= 0.6,
                      f"{ag_ms / torch_ms:.3f}x"))

for r in rows:
    if r.get("config") == "generation":
        print()
        print(f"generation (ag, {r['threads']} thread(s)): {r['context']} tokens of context, "
              f"{r['new_tokens']} new tokens, model d {r['num_hiddens']}, {r['num_layers']} layers, "
              f"block {r['block_size']}")
        print(f"  with the cache    {r['ms_per_token_cached']:.3f} ms/token")
        print(f"  without (prefix)  {r['ms_per_token_recompute']:.3f} ms/token")
        print(f"  speed-up          {r['speedup']:.2f}x; same tokens: {r['same_tokens']}")
        goals.append(("generation: cache >= 5x faster per token", r["speedup"] >= 5,
                      f"{r['speedup']:.2f}x"))

print()
print("goals:")
for name, met, value in goals:
    print(f"  {name:<52} {value:<16} {'met' if met else 'MISSED'}")
EOF
