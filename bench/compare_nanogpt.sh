#!/usr/bin/env bash
# compare_nanogpt.sh — ag-nanogpt (examples/nanogpt/) against bench/nanogpt_torch.py, nanoGPT's
# GPT and recipe in C++ on ag and in PyTorch: the validation loss at the end and the time per
# iteration, per seed, as a markdown table.
#
#   bench/compare_nanogpt.sh [--build DIR] [--out DIR] [--seeds "0 1 2"] [--max-iters N]
#                            [--threads N]
#   bench/compare_nanogpt.sh --from DIR     # only print the table of an earlier run's logs
#
# The recipe is both programs' defaults: nanoGPT's README recipe for a CPU (4 layers, 4 heads,
# width 128, block 64, batch 12, 2000 iterations, lr 1e-3 -> 1e-4 after a warm-up of 100,
# dropout 0, weight decay 0.1, betas 0.9/0.99, evaluation every 250 iterations on 20 batches of
# each split) on Debian's fortunes. Both draw the same batches (the SplitMix64 stream of --seed);
# their initial weights come from their own generators.
# For every seed it runs the two side by side (at the same time, one process each, --threads N
# each, default 1: on a 2-core machine each gets a core), waits for both, and keeps their logs in
# DIR (default: compare_nanogpt-<date>/ in the current directory) as ag-<seed>.txt and
# torch-<seed>.txt. The table, read from the logs' nanoGPT lines:
#   val loss     the last "step N: ..., val loss X" (after --max-iters updates)
#   ms/iter      the median of the "iter N: ..., time Tms" lines, the first 10 left out
#   CPU ms/iter  the median CPU time of an iteration (the process's, from both programs' summary
#                line): on a machine shared with other work it shows the work an iteration costs,
#                where the wall-clock time shows the waiting too
#   ratio        ag / torch
# and the issue's goals: ag's validation loss within 2 % of PyTorch's (every seed and the mean),
# ag's ms/iteration <= 0.4x PyTorch's at 1 thread.
# One seed's pair takes about 5-10 minutes (PyTorch's run is the longer); --max-iters N fewer
# only for a quick check (the schedule then ends at N too: --lr-decay-iters N, and its warm-up is
# min(100, N / 10) iterations).
# PyTorch is Debian's python3-torch, so the script runs /usr/bin/python3 ($PYTHON overrides it).
# Both run OpenBLAS on its AVX-512 kernels where the CPU has them, as bench/compare_lm.sh does
# (OPENBLAS_CORETYPE from scripts/openblas-coretype.sh).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
# shellcheck source=scripts/options.sh
source "$root/scripts/options.sh"  # parse_options, require_built
python="${PYTHON:-/usr/bin/python3}"

# The options' variables (parse_options sets them; declared here for shellcheck).
declare build out seeds max_iters threads from
parse_options "${BASH_SOURCE[0]}" \
  --build build "$root/build" \
  --out out "compare_nanogpt-$(date +%Y%m%d-%H%M%S)" \
  --seeds seeds "0 1 2" \
  --max-iters max_iters 2000 \
  --threads threads 1 \
  --from from "" \
  -- "$@"

openblas_core="$("$root/scripts/openblas-coretype.sh")"
if [[ -n "$openblas_core" ]]; then
  export OPENBLAS_CORETYPE="$openblas_core"
fi

if [[ -z "$from" ]]; then
  require_built "${BASH_SOURCE[0]}" "$build" examples/ag-nanogpt
  nanogpt="$build/examples/ag-nanogpt"
  mkdir -p "$out"
  {
    echo "# $(date -u '+%Y-%m-%d %H:%M UTC'); $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'), $(nproc) cores; load: $(cut -d' ' -f1-3 /proc/loadavg); OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset}"
    echo "# $max_iters iterations, $threads thread(s) each, seeds $seeds"
  } | tee "$out/run.txt" >&2
  # A shorter run's schedule: decayed at its end, its warm-up a tenth of it (at most 100).
  warmup=$((max_iters / 10 < 100 ? max_iters / 10 : 100))
  recipe=(--max-iters "$max_iters" --lr-decay-iters "$max_iters" --warmup-iters "$warmup")
  for seed in $seeds; do
    echo "  seed $seed: ag and torch side by side" >&2
    "$nanogpt" "${recipe[@]}" --seed "$seed" --threads "$threads" > "$out/ag-$seed.txt" &
    ag_pid=$!
    env -u OMP_WAIT_POLICY "$python" "$here/nanogpt_torch.py" "${recipe[@]}" --seed "$seed" \
      --threads "$threads" > "$out/torch-$seed.txt" &
    torch_pid=$!
    status=0
    wait "$ag_pid" || status=$?
    wait "$torch_pid" || status=$?
    if [[ $status != 0 ]]; then
      echo "compare_nanogpt.sh: a run of seed $seed failed (exit status $status); logs in $out" >&2
      exit 1
    fi
    echo "    load: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$out/run.txt" >&2
  done
  from="$out"
fi

"$python" - "$from" <<'EOF'
import glob
import os
import re
import statistics
import sys

folder = sys.argv[1]


def read(path):
    """The last evaluation's val loss, its step, the median ms of the iterations from 10 on, and
    the summary's median CPU ms (None in a log without it)."""
    val, step, times, cpu = None, None, [], None
    for line in open(path):
        m = re.match(r"time per iteration: median [\d.]+ms, CPU time median ([\d.]+)ms", line)
        if m:
            cpu = float(m.group(1))
        m = re.match(r"step (\d+): train loss [\d.]+, val loss ([\d.]+)$", line)
        if m:
            step, val = int(m.group(1)), float(m.group(2))
        m = re.match(r"iter (\d+): loss [\d.]+, time ([\d.]+)ms$", line)
        if m and int(m.group(1)) >= 10:
            times.append(float(m.group(2)))
    if val is None or not times:
        sys.exit(f"compare_nanogpt.sh: {path} has no evaluation or no timed iterations")
    return {"val": val, "step": step, "ms": statistics.median(times), "cpu": cpu}


runs = {}
for path in glob.glob(os.path.join(folder, "*-*.txt")):
    m = re.match(r"(ag|torch)-(\d+)\.txt$", os.path.basename(path))
    if m:
        runs.setdefault(int(m.group(2)), {})[m.group(1)] = read(path)
seeds = sorted(s for s in runs if len(runs[s]) == 2)
if not seeds:
    sys.exit(f"compare_nanogpt.sh: no pair of ag-S.txt and torch-S.txt in {folder}")
header = open(os.path.join(folder, "run.txt")).readline().lstrip("# ").strip() \
    if os.path.exists(os.path.join(folder, "run.txt")) else ""
steps = {runs[s][i]["step"] for s in seeds for i in ("ag", "torch")}
print(f"nanoGPT's CPU recipe on the fortunes, {'/'.join(map(str, sorted(steps)))} iterations; "
      f"ag-nanogpt and bench/nanogpt_torch.py of a seed side by side. {header}")
print()
with_cpu = all(runs[s][i]["cpu"] is not None for s in seeds for i in ("ag", "torch"))


def cpu_cells(a, t):
    return f" {a['cpu']:.2f} | {t['cpu']:.2f} | {a['cpu'] / t['cpu']:.3f} |" if with_cpu else ""


print("| seed | ag val loss | torch val loss | ag / torch | ag ms/iter | torch ms/iter | ag / torch |"
      + (" ag CPU ms/iter | torch CPU ms/iter | ag / torch |" if with_cpu else ""))
print("|---|---|---|---|---|---|---|" + ("---|---|---|" if with_cpu else ""))
for s in seeds:
    a, t = runs[s]["ag"], runs[s]["torch"]
    print(f"| {s} | {a['val']:.4f} | {t['val']:.4f} | {a['val'] / t['val']:.3f} | "
          f"{a['ms']:.2f} | {t['ms']:.2f} | {a['ms'] / t['ms']:.3f} |" + cpu_cells(a, t))
keys = ("val", "ms", "cpu") if with_cpu else ("val", "ms")
mean = {i: {k: statistics.mean(runs[s][i][k] for s in seeds) for k in keys}
        for i in ("ag", "torch")}
a, t = mean["ag"], mean["torch"]
if len(seeds) > 1:
    print(f"| mean | {a['val']:.4f} | {t['val']:.4f} | {a['val'] / t['val']:.3f} | {a['ms']:.2f} | "
          f"{t['ms']:.2f} | {a['ms'] / t['ms']:.3f} |" + cpu_cells(a, t))
print()
worst = max(abs(runs[s]["ag"]["val"] / runs[s]["torch"]["val"] - 1) for s in seeds)
goals = [
    ("validation loss: ag's mean within 2 % of torch's", abs(a["val"] / t["val"] - 1) <= 0.02,
     f"{100 * abs(a['val'] / t['val'] - 1):.2f} %"),
    ("validation loss: every seed within 2 %", worst <= 0.02, f"worst {100 * worst:.2f} %"),
    ("ms/iteration: ag <= 0.4x torch", a["ms"] / t["ms"] <= 0.4, f"{a['ms'] / t['ms']:.3f}x"),
]
print("goals:")
for name, met, value in goals:
    print(f"- {name}: {value}, {'met' if met else 'MISSED'}")
EOF
