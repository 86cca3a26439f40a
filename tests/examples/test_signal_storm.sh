#!/usr/bin/env bash
# Ctrl-C at random moments never corrupts a run: RUNS runs of ag-train's default model (whose large
# products oneDNN makes, where the build has it) each get a SIGINT at a random time while they
# train; every run must either exit 130 after saving a checkpoint that resumes, or have finished
# (exit 0). Before the signals were kept off the computing threads (training/interrupt.h), about
# one run in six died with a corrupted heap (exit 134) inside oneDNN's sgemm. ctest runs it on
# every GEMM backend (scripts/test.sh). Usage: test_signal_storm.sh AG_TRAIN [RUNS] [SEED]
set -euo pipefail
train=$1
runs=${2:-24}
RANDOM=${3:-1}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
fail() { echo "FAILED: $*" >&2; exit 1; }
interrupted=0 finished=0
for ((i = 0; i < runs; ++i)); do
  rm -f run.agc*
  "$train" --steps 400 --eval-every 400 --checkpoint run.agc > out.txt 2> err.txt &
  pid=$!
  # 0.2-1.4 s: from before the first step (the model being built) to well into training.
  sleep "$(printf '0.%03d' $((RANDOM % 1000)))"
  sleep "0.$((2 + RANDOM % 3))"
  kill -INT "$pid" 2> /dev/null || true
  code=0
  wait "$pid" || code=$?
  case $code in
    0) finished=$((finished + 1)) ;;
    130)
      interrupted=$((interrupted + 1))
      grep -q "interrupted after step [0-9]*; saved run.agc" out.txt ||
        fail "run $i: exit 130 without saying it saved: $(tail -c 300 out.txt)"
      step=$(grep -o 'interrupted after step [0-9]*' out.txt | grep -o '[0-9]*$')
      if ((step < 400)); then
        "$train" --resume run.agc --stop-after $((step + 1)) > resumed.txt 2>&1 ||
          fail "run $i: the checkpoint saved at step $step does not resume: $(tail -3 resumed.txt)"
      fi
      ;;
    *) fail "run $i: exit code $code after SIGINT: $(tail -c 500 err.txt)" ;;
  esac
done
echo "signal storm: $runs runs, $interrupted interrupted and saved, $finished finished, 0 crashes"
