#!/usr/bin/env bash
# compare_ops.sh — every op of autograd/op_list.h against PyTorch: forward + backward of f(x).sum()
# at each size and thread count, ag-bench-ops and bench/bench_ops_torch.py in one run.
#
#   bench/compare_ops.sh [--build DIR] [--out FILE] [--sizes "small medium large"] [--threads "1 2"]
#                        [--op NAME,...] [--rounds R] [--budget-ms MS] [--quick]
#   bench/compare_ops.sh --from FILE      # only print the table of an earlier run's results
#
# For every thread count it runs bench/bench_ops_torch.py --threads N --ag DIR/bench/ag-bench-ops,
# which times, for every size and row, ag (one ag-bench-ops process per row and size) and then
# PyTorch (in its own process, started once per thread count): the two alternate row by row, so
# that drift on a shared machine hits both alike. At 2 threads and more it does that twice, as
# bench/compare_train.sh runs PyTorch: with OpenMP's defaults and with OMP_WAIT_POLICY=PASSIVE;
# each row's PyTorch time is the faster of the two (ag's samples of both runs are pooled). --rounds R repeats the sequence R times (ag
# first in odd rounds, PyTorch first in even ones; default 1) and pools the samples. The JSON
# lines go to FILE (default: compare_ops-<date>.jsonl in the current directory); then the script
# prints, in markdown ready to paste into docs/benchmarks.md:
#   the table   op, size, threads, ag ms, PyTorch ms, ratio (ag / PyTorch; median ms per call)
#   the geometric mean of the ratios per size and thread count, and issue 32's goals at
#   (32, 64, 512), 1 thread
# Rows marked † compare with the PyTorch composition a user writes where PyTorch 1.13 has no such
# op, or where ag's op is a fused variant (listed under the table).
# --sizes: small (4, 8, 32), medium (32, 64, 512), large (32, 256, 512) or BxTxD.
# --op NAME,...: rows (e.g. gelu, flash_attention:causal) or ops (all their rows) only.
# --quick: short samples, few of them (a first look, not numbers to quote; it saves the sampling,
#   not the processes and the inputs). --budget-ms MS: time sampled per row, size, thread count
#   and side (default 100).
# A full run took 9 minutes, --quick 5.5, on the shared 2-core VM with a load average of 5–7 (other
# work running); most of it is the large size. Run it on a quiet machine: 2-thread runs need both
# cores. PyTorch is Debian's python3-torch, so the script runs /usr/bin/python3 ($PYTHON overrides
# it); its threads are set as in bench/compare_train.sh (OMP_NUM_THREADS, OPENBLAS_NUM_THREADS,
# torch.set_num_threads; OMP_WAIT_POLICY as above), and both run OpenBLAS on its
# AVX-512 kernels where the CPU has them (OPENBLAS_CORETYPE from scripts/openblas-coretype.sh).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
# shellcheck source=scripts/options.sh
source "$root/scripts/options.sh"  # parse_options, require_built
python="${PYTHON:-/usr/bin/python3}"

# The options' variables (parse_options sets them; declared here for shellcheck).
declare build out sizes threads ops rounds budget_ms quick from
parse_options "${BASH_SOURCE[0]}" \
  --build build "$root/build" \
  --out out "compare_ops-$(date +%Y%m%d-%H%M%S).jsonl" \
  --sizes sizes "small medium large" \
  --threads threads "1 2" \
  --op ops "" \
  --rounds rounds 1 \
  --budget-ms budget_ms "" \
  --quick quick=1 0 \
  --from from "" \
  -- "$@"

if ! [[ "$rounds" =~ ^[1-9][0-9]*$ ]]; then
  echo "compare_ops.sh: --rounds takes a count of at least 1, not '$rounds'" >&2
  exit 2
fi
for n in $threads; do
  if ! [[ "$n" =~ ^[1-9][0-9]*$ ]]; then
    echo "compare_ops.sh: --threads takes thread counts of at least 1, not '$n'" >&2
    exit 2
  fi
done

openblas_core="$("$root/scripts/openblas-coretype.sh")"
if [[ -n "$openblas_core" ]]; then
  export OPENBLAS_CORETYPE="$openblas_core"
fi

if [[ -z "$from" ]]; then
  require_built "${BASH_SOURCE[0]}" "$build" bench/ag-bench-ops
  options=(--size "${sizes// /,}" --rounds "$rounds" --json)
  [[ -n "$ops" ]] && options+=(--op "$ops")
  [[ -n "$budget_ms" ]] && options+=(--budget-ms "$budget_ms")
  [[ $quick == 1 ]] && options+=(--quick)
  : > "$out"
  meta() {  # key, value: one line of what the run ran on
    printf '{"impl": "meta", "key": "%s", "value": "%s"}\n' "$1" "$2" >> "$out"
  }
  meta date "$(date -u '+%Y-%m-%d %H:%M UTC')"
  meta cpu "$(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'), $(nproc) cores"
  meta commit "$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)"
  meta load_before "$(cut -d' ' -f1-3 /proc/loadavg)"
  meta openblas_coretype "${OPENBLAS_CORETYPE:-unset}"
  echo "# $(date -u '+%Y-%m-%d %H:%M UTC'); load: $(cut -d' ' -f1-3 /proc/loadavg); OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset}" >&2
  echo "# results -> $out" >&2
  for n in $threads; do
    echo "  ag and torch, $n thread(s), OpenMP defaults, sizes: $sizes" >&2
    env -u OMP_WAIT_POLICY "$python" "$here/bench_ops_torch.py" --threads "$n" \
      --ag "$build/bench/ag-bench-ops" "${options[@]}" >> "$out"
    if ((n > 1)); then
      echo "  ag and torch, $n threads, OMP_WAIT_POLICY=PASSIVE, sizes: $sizes" >&2
      env OMP_WAIT_POLICY=PASSIVE "$python" "$here/bench_ops_torch.py" --threads "$n" \
        --ag "$build/bench/ag-bench-ops" "${options[@]}" >> "$out"
    fi
  done
  meta load_after "$(cut -d' ' -f1-3 /proc/loadavg)"
  echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
  from="$out"
fi

"$python" - "$from" <<'EOF'
import json
import math
import statistics
import sys

lines = [json.loads(line) for line in open(sys.argv[1]) if line.strip().startswith("{")]
meta = {r["key"]: r["value"] for r in lines if r["impl"] == "meta"}
samples = {}  # (impl, name, size, threads, OMP_WAIT_POLICY) -> every sample of every round, ms per call
order, sizes, shapes, composed = [], [], {}, {}
for r in lines:
    if r["impl"] == "meta":
        continue
    policy = r.get("omp_wait_policy", "") if r["impl"] == "torch" else ""
    samples.setdefault((r["impl"], r["name"], r["size"], r["threads"], policy), []).extend(r["samples_ms"])
    if r["name"] not in order:
        order.append(r["name"])
    if r["size"] not in sizes:
        sizes.append(r["size"])
    shapes[r["size"]] = r["shape"]
    if r.get("composed"):
        composed[r["name"]] = r["composed"]
median = {}  # (impl, name, size, threads) -> ms per call; PyTorch's: of its faster OpenMP policy
for (impl, name, size, n, policy), values in samples.items():
    key = (impl, name, size, n)
    median[key] = min(median.get(key, float("inf")), statistics.median(values))
threads = sorted({k[3] for k in median})
rounds = max((r.get("round", 1) for r in lines if r["impl"] != "meta"), default=1)
torch_version = next((r["torch_version"] for r in lines if r["impl"] == "torch"), "?")


def size_label(size):
    return "(" + shapes[size].replace("x", ", ") + ")"


def ms(value):
    return f"{value:.3f}" if value >= 0.01 else f"{value:.4f}"


print(f"ag-bench-ops and bench_ops_torch.py (PyTorch {torch_version}), {meta.get('date', '?')}, "
      f"commit {meta.get('commit', '?')}; {meta.get('cpu', '?')}; load average before "
      f"{meta.get('load_before', '?')}, after {meta.get('load_after', '?')}; "
      f"OPENBLAS_CORETYPE={meta.get('openblas_coretype', '?')}. "
      f"Median ms per call (forward + backward of f(x).sum()) over {rounds} round(s); "
      "ratio = ag / PyTorch (below 1: ag is faster); PyTorch at 2 threads: the faster of OpenMP's defaults "
      "and OMP_WAIT_POLICY=PASSIVE, per row. † PyTorch's side is a composition (listed below).")
print()
print("| op | size | threads | ag ms | PyTorch ms | ratio |")
print("|---|---|---:|---:|---:|---:|")
ratios = {}  # (size, threads) -> [(name, ratio)]
for size in sizes:
    for n in threads:
        for name in order:
            a, t = median.get(("ag", name, size, n)), median.get(("torch", name, size, n))
            if a is None or t is None:
                continue
            ratio = a / t
            ratios.setdefault((size, n), []).append((name, ratio))
            mark = " †" if name in composed else ""
            print(f"| {name}{mark} | {size_label(size)} | {n} | {ms(a)} | {ms(t)} | {ratio:.2f} |")
print()
print("Geometric mean of the ratios, over every row (ops and their variants):")
print()
print("| size | threads | rows | geometric mean | rows where ag is slower |")
print("|---|---:|---:|---:|---:|")
for (size, n), rs in ratios.items():
    geomean = math.exp(sum(math.log(r) for _, r in rs) / len(rs))
    print(f"| {size_label(size)} | {n} | {len(rs)} | {geomean:.2f} | {sum(r > 1 for _, r in rs)} |")
if composed:
    print()
    print("† PyTorch 1.13 has no such op (or ag's op is a fused variant of these ops); its side runs:")
    print()
    for name in order:
        if name in composed:
            print(f"- {name}: `{composed[name]}`")

goal_rows = dict(ratios.get(("medium", 1), []))
if goal_rows:
    geomean = math.exp(sum(math.log(r) for r in goal_rows.values()) / len(goal_rows))
    over = sorted((r, name) for name, r in goal_rows.items() if r > 1.0)
    math_ops = {name: goal_rows[name] for name in ("gelu", "tanh", "sigmoid", "exp") if name in goal_rows}
    print()
    print("Issue 32's goals at (32, 64, 512), 1 thread:")
    print()
    print(f"- every op ≤ 1.0×: {'met' if not over else 'missed'}"
          + ("" if not over else " — above 1.0×: " + ", ".join(f"{name} {r:.2f}" for r, name in reversed(over))))
    print(f"- gelu, tanh, sigmoid, exp ≤ 0.5×: "
          f"{'met' if all(r <= 0.5 for r in math_ops.values()) else 'missed'} — "
          + ", ".join(f"{name} {r:.2f}" for name, r in math_ops.items()))
    print(f"- geometric mean ≤ 0.5×: {'met' if geomean <= 0.5 else 'missed'} — {geomean:.2f}")
EOF
