#!/usr/bin/env bash
# compare_distributed.sh — data-parallel training over MPI (2 ranks × 1 thread) against one
# process with 1 and 2 threads, and against PyTorch's DistributedDataParallel (gloo, 2 processes).
#
#   bench/compare_distributed.sh [--build DIR] [--configs "tiny small medium"] [--steps S]
#                                [--repeat R] [--quiet-wait S] [--max-other C] [--out FILE]
#   bench/compare_distributed.sh --from FILE [--max-other C]   # the table of an earlier run
#
# For every config (default: medium) and every repeat (default 1) it runs, one after the other:
#   ag    1 process × 1 thread      ag-bench-train --threads 1
#   ag    1 process × 2 threads     ag-bench-train --threads 2
#   ag    2 ranks × 1 thread        mpirun -np 2 ag-bench-train --threads 1 --compare-no-sync
#   torch 1 process × 1 thread      bench/bench_train_torch.py --threads 1
#   torch DDP 2 × 1 thread          bench/bench_train_ddp_torch.py --world 2 --threads 1
#                                   --compare-no-sync
# collects their JSON lines in FILE (default: compare_distributed-<date>.jsonl in the current
# directory) and prints, per config, each run's ms/step (the median over the repeats of each run's
# median), its speed-up over ag's 1 × 1 step, the scaling efficiency of the 2-way runs (speed-up
# over the same implementation's 1 × 1 step / 2), the communication measures of the 2-rank runs,
# and the goals (docs/benchmarks.md, "Data-parallel training (MPI)"):
#   medium: ag 2 ranks × 1 thread ≥ 1.85× as fast as ag 1 × 1, and ≥ 1.3× as fast as torch DDP.
# Communication: "wait" is the time ranks block at the end of backward for the last all-reduce
# (ag: DdpStats::wait_seconds; torch: DDP's own logger, sampled steps); "exposed" is ms/step minus
# ms/step of the same run's steps under no_sync (what communication adds to a step).
#
# --build DIR: the CMake build directory (default: build) whose bench/ag-bench-train was built with
#   MPI (CMake found it; without, ag::distributed is a world of one, which refuses mpirun):
#   cmake -S . -B build -DCMAKE_BUILD_TYPE=Release && cmake --build build -j2 --target ag-bench-train
# --steps S: timed steps of every run (default: each config's own: tiny 100, small 40, medium 20).
# --repeat R: run the whole set R times, interleaved (a shared machine drifts; the table takes the
#   median of the R runs and shows their range).
# --quiet-wait SECONDS: before each run, wait up to SECONDS until other processes use < 0.1 core.
#   Every run records "other_cpu", the cores other processes used while it ran (column "other").
# --max-other CORES: the table leaves out runs during which other processes used more (e.g. 0.1).
# $MPIRUN (default mpirun) and $MPIRUN_ARGS (extra options, e.g. "--bind-to none") choose the
# launcher; as root the script sets OMPI_ALLOW_RUN_AS_ROOT(_CONFIRM) for OpenMPI. PyTorch is
# Debian's python3-torch: /usr/bin/python3 ($PYTHON overrides it). medium takes about 3 minutes
# per repeat on 2 cores. Run it on a quiet machine: every 2-way run needs both cores. A run still
# going after $AG_BENCH_RUN_TIMEOUT seconds (default 1200) is ended with its children and left out.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
# shellcheck source=scripts/options.sh
source "$root/scripts/options.sh"  # parse_options, require_built
python="${PYTHON:-/usr/bin/python3}"
mpirun="${MPIRUN:-mpirun}"
read -r -a mpirun_args <<< "${MPIRUN_ARGS:-}"

# The options' variables (parse_options sets them; declared here for shellcheck).
declare build out configs timed_steps repeat quiet_wait max_other from
parse_options "${BASH_SOURCE[0]}" \
  --build build "$root/build" \
  --out out "compare_distributed-$(date +%Y%m%d-%H%M%S).jsonl" \
  --configs configs "medium" \
  --steps timed_steps "" \
  --repeat repeat 1 \
  --quiet-wait quiet_wait 0 \
  --max-other max_other "" \
  --from from "" \
  -- "$@"
steps=()  # the arguments --steps S passes on to every run
if [[ -n $timed_steps ]]; then
  steps=(--steps "$timed_steps")
fi
for config in $configs; do
  if [[ ! " tiny small medium " == *" $config "* ]]; then
    echo "compare_distributed.sh: --configs: '$config' is not one of tiny small medium" >&2
    exit 2
  fi
done
if ! [[ "$repeat" =~ ^[1-9][0-9]*$ ]]; then
  echo "compare_distributed.sh: --repeat '$repeat' is not a positive integer" >&2
  exit 2
fi

# Runs a command, prints its JSON line with "other_cpu" added: the CPU time that other processes
# (not the command and its children) used during the run, per second of the run, in cores, from
# /proc/stat's busy time minus the command's own (getrusage of its children). With a wait > 0 it
# first waits (up to that many seconds) until other processes use less than 0.1 core for 2 s.
measure='
import json, os, resource, signal, subprocess, sys, time
def busy():
    fields = [int(x) for x in open("/proc/stat").readline().split()[1:]]
    return (sum(fields[:8]) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")
wait, command = float(sys.argv[1]), sys.argv[2:]
deadline = time.time() + wait
while time.time() < deadline:
    b0 = busy(); time.sleep(2)
    if busy() - b0 < 0.2: break
before = resource.getrusage(resource.RUSAGE_CHILDREN)
b0, t0 = busy(), time.time()
# A run still going after the time limit (a hung rank: PyTorch DDP once hung in its teardown here)
# is ended, its whole process group, and left out of the table rather than stalling the script.
limit = float(os.environ.get("AG_BENCH_RUN_TIMEOUT", "1200"))
child = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, start_new_session=True)
try:
    out = child.communicate(timeout=limit)[0]
except BaseException as stop:  # the time limit, or Ctrl-C: end the run and its children too
    for signal_number in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(child.pid, signal_number)
            child.wait(timeout=5)
            break
        except (ProcessLookupError, subprocess.TimeoutExpired):
            pass
    if not isinstance(stop, subprocess.TimeoutExpired):
        raise
    shown = " ".join(command[:3])
    print(f"compare_distributed.sh: {shown} ... still running after {limit:.0f} s "
          "(AG_BENCH_RUN_TIMEOUT): ended, and left out of the table", file=sys.stderr)
    sys.exit(0)
if child.returncode != 0:
    raise subprocess.CalledProcessError(child.returncode, command)
b1, t1 = busy(), time.time()
after = resource.getrusage(resource.RUSAGE_CHILDREN)
own = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
row = json.loads(next(line for line in out.splitlines() if line.startswith("{")))
row["other_cpu"] = round(max(0.0, (b1 - b0) - own) / (t1 - t0), 3)
print(json.dumps(row), flush=True)
'

if [[ -z "$from" ]]; then
  require_built "${BASH_SOURCE[0]}" "$build" bench/ag-bench-train
  bench_ag="$build/bench/ag-bench-train"
  if ! ldd "$bench_ag" | grep -q 'libmpi\.'; then  # a world of one, which refuses mpirun
    echo "compare_distributed.sh: $bench_ag was built without MPI (CMake did not find" >&2
    echo "  MPI); install libopenmpi-dev and openmpi-bin (scripts/install-deps.sh) and reconfigure" >&2
    exit 1
  fi
  if ! command -v "$mpirun" > /dev/null; then
    echo "compare_distributed.sh: $mpirun not found (openmpi-bin)" >&2
    exit 1
  fi
  if [[ $EUID -eq 0 ]]; then  # OpenMPI refuses root without these
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  fi
  : > "$out"
  echo "# $(date -u '+%Y-%m-%d %H:%M UTC'); $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'), $(nproc) cores; load: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
  echo "# results -> $out" >&2
  run() {  # label, command...: one run, its JSON line (with "other_cpu") appended to $out
    local label="$1"; shift
    echo "  $label (load $(cut -d' ' -f1 /proc/loadavg))" >&2
    "$python" -c "$measure" "$quiet_wait" "$@" --json | tee -a "$out" > /dev/null
  }
  for ((r = 1; r <= repeat; ++r)); do
    for config in $configs; do
      [[ $repeat -gt 1 ]] && echo "# repeat $r of $repeat, $config" >&2
      run "ag    $config, 1 process x 1 thread" "$bench_ag" --config "$config" "${steps[@]}" --threads 1
      run "ag    $config, 1 process x 2 threads" "$bench_ag" --config "$config" "${steps[@]}" --threads 2
      run "ag    $config, 2 ranks x 1 thread" "$mpirun" "${mpirun_args[@]}" -np 2 "$bench_ag" \
        --config "$config" "${steps[@]}" --threads 1 --compare-no-sync
      run "torch $config, 1 process x 1 thread" env -u OMP_WAIT_POLICY "$python" \
        "$here/bench_train_torch.py" --config "$config" "${steps[@]}" --threads 1
      run "torch $config, DDP 2 processes x 1 thread" env -u OMP_WAIT_POLICY "$python" \
        "$here/bench_train_ddp_torch.py" --config "$config" "${steps[@]}" --world 2 --threads 1 \
        --compare-no-sync
    done
  done
  echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
  from="$out"
fi

"$python" - "$from" "$max_other" <<'EOF'
import json
import statistics
import sys

rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip().startswith("{")]
if sys.argv[2]:
    kept = [r for r in rows if r.get("other_cpu", 0) <= float(sys.argv[2])]
    print(f"--max-other {sys.argv[2]}: {len(kept)} of {len(rows)} runs kept (other processes used "
          f"at most {sys.argv[2]} cores during them)")
    rows = kept
# (config, run) -> the JSON lines of that run (one per repeat)
RUNS = [("ag", 1, 1, "ag 1 process x 1 thread"), ("ag", 1, 2, "ag 1 process x 2 threads"),
        ("ag-ddp", 2, 1, "ag 2 ranks x 1 thread"), ("torch", 1, 1, "torch 1 process x 1 thread"),
        ("torch-ddp", 2, 1, "torch DDP 2 x 1 thread")]
runs = {}
for r in rows:
    key = (r["config"], r["impl"], r.get("world_size", 1), r["threads"])
    runs.setdefault(key, []).append(r)

def ms(config, impl, world, threads):
    found = runs.get((config, impl, world, threads))
    return statistics.median(r["ms_per_step"] for r in found) if found else None

def med(found, field):
    values = [r[field] for r in found if r.get(field) is not None]
    return statistics.median(values) if values else None

order = ["tiny", "small", "medium"]
configs = sorted({r["config"] for r in rows}, key=lambda c: order.index(c) if c in order else 99)
print("ms/step: median over the repeats of each run's median step; speed-up: over ag's 1 x 1 step;")
print("efficiency: over the same implementation's 1 x 1 step, / 2; wait: blocked for the last")
print("all-reduce at the end of backward (torch: DDP's logger, sampled steps); exposed: ms/step - ")
print("ms/step of the same run's steps under no_sync; min: the fastest step (median over the repeats),")
print("the least disturbed by other processes on a shared machine; other: cores that other processes")
print("used during the run (median over the repeats)")
print()
head = (f"{'config':<7} {'run':<27} {'ms/step':>9} {'range':>15} {'min':>8} {'speed-up':>8} {'eff':>5} "
        f"{'no_sync':>8} {'wait':>6} {'exposed':>7} {'rank rows':>9} {'other':>5}")
print(head)
print("-" * len(head))
goals = []
for config in configs:
    base = ms(config, "ag", 1, 1)
    for impl, world, threads, label in RUNS:
        found = runs.get((config, impl, world, threads))
        if not found:
            continue
        m = ms(config, impl, world, threads)
        values = [r["ms_per_step"] for r in found]
        spread = f"{min(values):.1f}-{max(values):.1f}" if len(values) > 1 else "-"
        speedup = base / m if base else None
        own_base = ms(config, "torch" if impl.startswith("torch") else "ag", 1, 1)
        eff = f"{100 * own_base / m / 2:4.0f}%" if own_base and (world, threads) != (1, 1) else "-"
        no_sync = med(found, "ms_per_step_no_sync") if world > 1 else None
        wait = med(found, "comm_wait_ms" if impl == "ag-ddp" else "logged_comm_wait_ms")
        exposed = m - no_sync if no_sync else None
        def f(x, width, fmt=".1f"):
            return f"{x:>{width}{fmt}}" if x is not None else f"{'-':>{width}}"
        rank_rows = str(found[0].get("rank_batch", "-")) if world > 1 else "-"
        print(f"{config:<7} {label:<27} {m:>9.1f} {spread:>15} {med(found, 'ms_min'):>8.1f} "
              f"{(f'{speedup:.2f}x' if speedup else '-'):>8} {eff:>5} {f(no_sync, 8)} "
              f"{f(wait, 6)} {f(exposed, 7)} {rank_rows:>9} {f(med(found, 'other_cpu'), 5, '.2f')}")
    ddp, torch_ddp = ms(config, "ag-ddp", 2, 1), ms(config, "torch-ddp", 2, 1)
    def fastest(impl, world, threads):
        found = runs.get((config, impl, world, threads))
        return med(found, "ms_min") if found else None
    if config == "medium" and base and ddp:
        on_min = fastest("ag", 1, 1) / fastest("ag-ddp", 2, 1)
        goals.append(("medium: ag 2 ranks x 1 thread vs ag 1 x 1 >= 1.85x", base / ddp >= 1.85,
                      f"{base / ddp:.2f}x (min steps: {on_min:.2f}x)"))
    if config == "medium" and ddp and torch_ddp:
        on_min = fastest("torch-ddp", 2, 1) / fastest("ag-ddp", 2, 1)
        goals.append(("medium: ag 2 ranks x 1 thread vs torch DDP 2 x 1 >= 1.3x",
                      torch_ddp / ddp >= 1.3, f"{torch_ddp / ddp:.2f}x (min steps: {on_min:.2f}x)"))
    if ddp and torch_ddp:
        print(f"{config}: ag 2 ranks are {torch_ddp / ddp:.2f}x as fast as torch DDP's 2 processes")
    print()

for config in configs:
    d = runs.get((config, "ag-ddp", 2, 1))
    if d:
        print(f"ag {config}, 2 ranks: {d[0]['buckets']} bucket(s), {d[0]['gradient_bytes']} "
              f"gradient bytes per rank, first bucket's start to backward's end "
              f"{med(d, 'overlap_ms'):.2f} ms/step")
if goals:
    print()
    print("goals:")
    for name, met, value in goals:
        print(f"  {name:<58} {value:<28} {'met' if met else 'MISSED'}")
EOF
