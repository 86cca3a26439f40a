#!/usr/bin/env bash
# ag-nanogpt (examples/nanogpt/), nanoGPT on ag::training, as a user runs it: a short run prints
# nanoGPT's log lines with finite losses and a validation loss that falls, then a sample; a run
# stopped and resumed is bit-identical to one that was not (the loss log and the final checkpoint,
# byte for byte); and — given MPIRUN — 2 ranks train, resume on 2 ranks bit for bit, and with
# gradient accumulation give one process's bits. Run by ctest (tests/examples/CMakeLists.txt) as:
# test_nanogpt.sh AG_NANOGPT TEXT [MPIRUN]
set -euo pipefail
nanogpt=$1
text=$2
mpirun=${3:-}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
fail() { echo "FAILED: $*" >&2; exit 1; }
run=(--text "$text" --n-layer 1 --n-embd 32 --n-head 2 --block-size 16 --batch-size 8
     --max-iters 60 --eval-interval 30 --eval-iters 4 --learning-rate 3e-3 --min-lr 3e-4
     --warmup-iters 5 --lr-decay-iters 60)

# 1. It trains: nanoGPT's lines, each iteration's and each evaluation's, finite losses, and a
# validation loss at the end below the one at the start; then the sample between its dashes.
"$nanogpt" "${run[@]}" --sample 30 > trained.txt || fail "$(cat trained.txt)"
iter_line='^iter [0-9]*: loss [0-9]*\.[0-9]\{4\}, time [0-9]*\.[0-9][0-9]ms$'
[[ $(grep -c "$iter_line" trained.txt) == 60 ]] ||
  fail "not 60 lines 'iter N: loss X, time Tms': $(cat trained.txt)"
grep -q '^iter 59: ' trained.txt || fail "no iter 59"
step_line='^step [0-9]*: train loss [0-9]*\.[0-9]\{4\}, val loss [0-9]*\.[0-9]\{4\}$'
evaluations=$(grep "$step_line" trained.txt)
[[ $(echo "$evaluations" | awk '{ print $2 }' | tr '\n' ' ') == "0: 30: 60: " ]] ||
  fail "evaluations at steps other than 0, 30, 60: $evaluations"
echo "$evaluations" | awk '{ v[NR] = $NF } END { exit !(v[3] < v[1] - 0.3) }' ||
  fail "the validation loss did not fall by 0.3: $evaluations"
[[ $(sed -n '/^---------------$/,/^---------------$/p' trained.txt | wc -l) -ge 3 ]] ||
  fail "no sample: $(tail -3 trained.txt)"

# 2. Stopped after 20 iterations and resumed: the same bits as the run that was not stopped.
"$nanogpt" "${run[@]}" --loss-log full.csv --checkpoint full.agc > full.txt
"$nanogpt" "${run[@]}" --loss-log part.csv --checkpoint part.agc --stop-after 20 > stopped.txt
grep -q "stopped after step 20 of 60; continue with --resume part.agc" stopped.txt ||
  fail "$(cat stopped.txt)"
"$nanogpt" --resume part.agc --loss-log part.csv --checkpoint part.agc > resumed.txt
grep -q "resuming part.agc at step 21 of 60" resumed.txt || fail "$(cat resumed.txt)"
cmp full.csv part.csv || fail "the resumed run's losses differ"
cmp full.agc part.agc || fail "the resumed run's final checkpoint differs"
[[ $(grep '^step 60:' resumed.txt) == $(grep '^step 60:' full.txt) ]] ||
  fail "the resumed run's last evaluation differs"
"$nanogpt" --resume full.agc > done.txt 2>&1 && fail "a finished run resumed"
grep -q "the run already finished (step 60)" done.txt || fail "$(cat done.txt)"

[[ -n $mpirun ]] || { echo "ag-nanogpt: trains, samples, resumes bit for bit"; exit 0; }
# 3. Two ranks: each takes half of every batch; a 2-rank run resumes on 2 ranks bit for bit.
"$mpirun" -np 2 "$nanogpt" "${run[@]}" --loss-log mpi_full.csv > mpi_full.txt
grep -q "^data-parallel on 2 ranks" mpi_full.txt || fail "$(head -8 mpi_full.txt)"
grep -q "^step 60: " mpi_full.txt || fail "$(tail -3 mpi_full.txt)"
"$mpirun" -np 2 "$nanogpt" "${run[@]}" --loss-log mpi_part.csv --checkpoint mpi.agc \
  --stop-after 20 > /dev/null
"$mpirun" -np 2 "$nanogpt" --resume mpi.agc --loss-log mpi_part.csv > /dev/null
cmp mpi_full.csv mpi_part.csv || fail "a 2-rank run resumed on 2 ranks is not bit-identical"
# 4. Gradient accumulation: 2 micro-batches a step, added in their order, on 1 process and on 2
# ranks (one micro-batch each) — the same model, to the last bit.
"$nanogpt" "${run[@]}" --gradient-accumulation-steps 2 --loss-log gas1.csv > /dev/null
"$mpirun" -np 2 "$nanogpt" "${run[@]}" --gradient-accumulation-steps 2 --loss-log gas2.csv \
  > /dev/null
cmp gas1.csv gas2.csv || fail "--gradient-accumulation-steps 2: 2 ranks differ from 1 process"
echo "ag-nanogpt: trains, samples, resumes bit for bit, runs on 2 ranks"
