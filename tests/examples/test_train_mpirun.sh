#!/usr/bin/env bash
# ag-train under mpirun (docs/distributed.md): data-parallel on 2 ranks equals one process on the
# whole batch (the toy tasks, --task lm and --task translate), and with --chunk-rows to the last
# bit at 1, 2 and 4 ranks; a checkpoint resumes exactly under the same world size and runs under
# another; 4 ranks (--oversubscribe) train; --threads beyond the cores is refused; and a rank
# killed with SIGKILL in the middle of a run ends the whole job with a non-zero exit, leaving a
# checkpoint that loads; Ctrl-C to mpirun saves before the job ends. Run by ctest (tests/examples/CMakeLists.txt) as:
# test_train_mpirun.sh AG_TRAIN MPIRUN
set -euo pipefail
train=$1
mpirun=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
fail() { echo "FAILED: $*" >&2; exit 1; }
# Checks that the first 4 losses of two --loss-log files (hexadecimal floats) agree to 1e-5
# relative, and that both have `steps` rows.
same_first_losses() {
  local a=$1 b=$2 steps=$3
  paste -d, <(tail -n +2 "$a" | cut -d, -f2 | xargs printf '%.17g\n') \
            <(tail -n +2 "$b" | cut -d, -f2 | xargs printf '%.17g\n') |
    awk -F, -v steps="$steps" '
      NR <= 4 { d = $1 - $2; if (d < 0) d = -d; m = $1 < 0 ? -$1 : $1
                if (d > 1e-5 * m) { print "step " NR ": " $1 " vs " $2; bad = 1 } }
      END { if (NR != steps) { print NR " rows, expected " steps; bad = 1 }; exit bad }'
}
small=(--steps 12 --eval-every 6 --show 0 --eval-size 50 --num-hiddens 32 --ffn-num-hiddens 64)

# 1. Two ranks × 8 rows against one process × 16 rows: the same losses, up to float32 rounding
#    (Adam amplifies rounding later on; docs/distributed.md has the 50-step figures).
"$train" "${small[@]}" --batch-size 16 --loss-log one.csv > one.txt
"$mpirun" -np 2 "$train" "${small[@]}" --batch-size 16 --loss-log two.csv > two.txt
grep -q "data-parallel on 2 ranks (mpirun): each takes 8 of the 16 examples" two.txt ||
  fail "no data-parallel line: $(head -3 two.txt)"
same_first_losses one.csv two.csv 12 || fail "2 ranks differ from 1 process"

# 2. Resume under the same world size: bit for bit, dropout included (each rank its own stream).
run=(--steps 12 --eval-every 6 --show 0 --eval-size 50 --num-hiddens 32 --ffn-num-hiddens 64
     --batch-size 16 --dropout 0.1)
"$mpirun" -np 2 "$train" "${run[@]}" --loss-log full.csv > /dev/null
"$mpirun" -np 2 "$train" "${run[@]}" --checkpoint run.agc --stop-after 6 --loss-log part.csv \
  > /dev/null
"$mpirun" -np 2 "$train" --resume run.agc --loss-log part.csv > resumed.txt
cmp full.csv part.csv || fail "a 2-rank run resumed on 2 ranks is not bit-identical"
# ... and under another world size (one process): it runs on from the same step.
"$mpirun" -np 2 "$train" "${run[@]}" --checkpoint other.agc --stop-after 6 > /dev/null
"$train" --resume other.agc > other.txt || fail "a 2-rank checkpoint does not resume in 1 process"
grep -q "resuming other.agc at step 7 of 12" other.txt || fail "$(head -2 other.txt)"

# The same two checks for another task: 2 ranks against 1 process with dropout 0 (the first
# line naming each rank's share must contain `share`), and a 2-rank run with dropout resumed on 2
# ranks, bit for bit. check_task NAME SHARE STEPS STOP_AFTER OPTION...
check_task() {
  local name=$1 share=$2 steps=$3 stop_after=$4
  shift 4
  "$train" "$@" --dropout 0 --loss-log "${name}_one.csv" > /dev/null
  "$mpirun" -np 2 "$train" "$@" --dropout 0 --loss-log "${name}_two.csv" > "${name}_two.txt"
  grep -q "$share" "${name}_two.txt" || fail "$name: $(head -3 "${name}_two.txt")"
  same_first_losses "${name}_one.csv" "${name}_two.csv" "$steps" ||
    fail "$name: 2 ranks differ from 1 process"
  "$mpirun" -np 2 "$train" "$@" --dropout 0.1 --loss-log "${name}_full.csv" > /dev/null
  "$mpirun" -np 2 "$train" "$@" --dropout 0.1 --checkpoint "$name.agc" --stop-after "$stop_after" \
    --loss-log "${name}_part.csv" > /dev/null
  "$mpirun" -np 2 "$train" --resume "$name.agc" --loss-log "${name}_part.csv" > /dev/null
  cmp "${name}_full.csv" "${name}_part.csv" ||
    fail "$name: a 2-rank run resumed on 2 ranks is not bit-identical"
}

# ... the language model (--task lm) and translation (--task translate, generated pairs).
for i in $(seq 1 200); do echo "the quick brown fox $i jumps over the lazy dog and runs away"; done \
  > text.txt
check_task lm "each takes 4 of the 8 windows" 8 4 --task lm --text text.txt --steps 8 \
  --eval-every 4 --num-hiddens 32 --ffn-num-hiddens 64 --block-size 16 --batch-size 8 \
  --eval-windows 4 --sample-length 0
check_task translate "each takes 8 of the 16 pairs" 8 4 --task translate --steps 8 \
  --eval-every 4 --num-hiddens 32 --ffn-num-hiddens 64 --batch-size 16 --generated-pairs 400 \
  --eval-size 5

# 2b. --chunk-rows: one process, 2 ranks and 4 ranks train the same model, bit for bit (dropout
#     0): the same losses and the same model file; a chunked run stopped on 2 ranks resumes in one
#     process exactly; a chunk that does not divide a rank's rows is refused.
no_dropout=(--steps 12 --eval-every 6 --show 0 --eval-size 50 --num-hiddens 32
            --ffn-num-hiddens 64 --batch-size 16 --dropout 0)
chunked=("${no_dropout[@]}" --chunk-rows 4)
"$train" "${chunked[@]}" --loss-log c1.csv --save-model c1.agm > c1.txt
"$mpirun" -np 2 "$train" "${chunked[@]}" --loss-log c2.csv --save-model c2.agm > c2.txt
"$mpirun" -np 4 --oversubscribe "$train" "${chunked[@]}" --oversubscribe --loss-log c4.csv \
  --save-model c4.agm > /dev/null
grep -q "gradients chunk by chunk (--chunk-rows 4): 4 chunks of 4 examples" c2.txt ||
  fail "no chunk line: $(head -4 c2.txt)"
cmp c1.csv c2.csv || fail "--chunk-rows: 2 ranks' losses differ from 1 process's"
cmp c1.csv c4.csv || fail "--chunk-rows: 4 ranks' losses differ from 1 process's"
cmp c1.agm c2.agm || fail "--chunk-rows: 2 ranks' model differs from 1 process's"
cmp c1.agm c4.agm || fail "--chunk-rows: 4 ranks' model differs from 1 process's"
"$mpirun" -np 2 "$train" "${chunked[@]}" --checkpoint c.agc --stop-after 6 --loss-log cp.csv \
  > /dev/null
"$train" --resume c.agc --loss-log cp.csv --save-model cp.agm > /dev/null
cmp c1.csv cp.csv || fail "--chunk-rows: a 2-rank run resumed in 1 process is not bit-identical"
cmp c1.agm cp.agm || fail "--chunk-rows: the resumed run's model differs"
if "$mpirun" -np 2 "$train" "${no_dropout[@]}" --chunk-rows 3 > bad.txt 2>&1; then
  fail "--chunk-rows 3 of 8 rows per rank was accepted"
fi
grep -q "chunk-rows 3 does not divide the 8 rows of rank 0" bad.txt || fail "$(cat bad.txt)"
# ... and for the language model and translation: 1 process against 2 ranks, bit for bit.
"$train" --task lm --text text.txt --steps 4 --eval-every 4 --num-hiddens 32 \
  --ffn-num-hiddens 64 --block-size 16 --batch-size 8 --eval-windows 4 --sample-length 0 \
  --dropout 0 --chunk-rows 2 --loss-log lm_c1.csv > /dev/null
"$mpirun" -np 2 "$train" --task lm --text text.txt --steps 4 --eval-every 4 --num-hiddens 32 \
  --ffn-num-hiddens 64 --block-size 16 --batch-size 8 --eval-windows 4 --sample-length 0 \
  --dropout 0 --chunk-rows 2 --loss-log lm_c2.csv > /dev/null
cmp lm_c1.csv lm_c2.csv || fail "lm --chunk-rows: 2 ranks differ from 1 process"
"$train" --task translate --steps 4 --eval-every 4 --num-hiddens 32 --ffn-num-hiddens 64 \
  --batch-size 16 --generated-pairs 400 --eval-size 5 --dropout 0 --chunk-rows 4 \
  --loss-log tr_c1.csv > /dev/null
"$mpirun" -np 2 "$train" --task translate --steps 4 --eval-every 4 --num-hiddens 32 \
  --ffn-num-hiddens 64 --batch-size 16 --generated-pairs 400 --eval-size 5 --dropout 0 \
  --chunk-rows 4 --loss-log tr_c2.csv > /dev/null
cmp tr_c1.csv tr_c2.csv || fail "translate --chunk-rows: 2 ranks differ from 1 process"

# 3. Four ranks on this machine: slow (oversubscribed) but the same training.
"$mpirun" -np 4 --oversubscribe "$train" "${small[@]}" --batch-size 16 --oversubscribe \
  --loss-log four.csv > four.txt
grep -q "data-parallel on 4 ranks (mpirun): each takes 4 of the 16" four.txt || fail "4 ranks"
same_first_losses one.csv four.csv 12 || fail "4 ranks differ from 1 process"

# 4. More threads than the machine's cores can hold, over all ranks: refused before training.
cores=$(nproc)
set +e
"$mpirun" -np 2 "$train" --threads "$cores" --steps 5 > threads.txt 2>&1
code=$?
set -e
[[ $code -ne 0 ]] || fail "--threads $cores on 2 ranks was accepted"
grep -q "would oversubscribe the cores" threads.txt || fail "$(cat threads.txt)"

# 5. A rank killed mid-run (SIGKILL, while checkpoints are written every step): the job ends with
#    a non-zero exit and mpirun names the rank; the checkpoint is a complete file.
"$mpirun" -np 2 "$train" --steps 100000 --eval-every 100000 --show 0 --eval-size 50 \
  --num-hiddens 32 --ffn-num-hiddens 64 --batch-size 16 --checkpoint killed.agc \
  --checkpoint-every 1 --loss-log killed.csv > killed.txt 2>&1 &
job=$!
# Killed once a checkpoint exists and 3 steps are logged: mid-run, with the next checkpoint soon
# being written. (Waiting for more steps only made the sanitizer build's run longer.)
for _ in $(seq 1 300); do
  [[ -s killed.agc && $(wc -l < killed.csv) -gt 3 ]] && break
  sleep 0.1
done
ranks=$(pgrep -f -- "--loss-log killed.csv" | while read -r pid; do
  [[ $(cat /proc/"$pid"/comm 2>/dev/null) == ag-train ]] && echo "$pid"; done)
victim=$(echo "$ranks" | tail -1)
[[ -n $victim ]] || fail "no rank of the job found to kill"
start=$(date +%s%N)
kill -9 "$victim"
set +e
wait "$job"
code=$?
set -e
elapsed_ms=$((($(date +%s%N) - start) / 1000000))
echo "killed rank (pid $victim): the job ended with exit code $code after $elapsed_ms ms"
[[ $code -ne 0 ]] || fail "the job exited 0 after a rank was killed"
grep -q -i "signal 9\|killed" killed.txt || fail "mpirun did not say a rank was killed: $(cat killed.txt)"
# Which step it continues at ("--stop-after 1 is before the resumed run's next step N"), then
# one step from there.
next=$( ("$train" --resume killed.agc --stop-after 1 2>&1 || true) | sed -n "s/.*resumed run's next step //p")
[[ -n $next ]] || fail "the checkpoint written while a rank was killed does not load"
"$train" --resume killed.agc --stop-after "$next" > after_kill.txt ||
  fail "the checkpoint written while a rank was killed does not load: $(cat after_kill.txt)"
# 6. Ctrl-C to mpirun (kill -INT): OpenMPI ends the job, its ranks stop together after a step and
#    rank 0 saves (docs/training.md, "Exit codes"); the job ended with no save before the signal
#    policy. mpirun's own exit code is its choice: not 0. OpenMPI 4.1 sends the ranks SIGCONT at
#    once, SIGTERM one odls_base_sigkill_timeout later, SIGKILL one more later, and exits then,
#    whenever the ranks ended: 1 s by default; 5 s here, so that a slow (sanitizer) build's step
#    and save fit between SIGTERM and SIGKILL. (It was 20 s: the test waited 40 s for mpirun.)
"$mpirun" --mca odls_base_sigkill_timeout 5 -np 2 "$train" --steps 100000 --eval-every 100000 \
  --show 0 --eval-size 50 --num-hiddens 32 --ffn-num-hiddens 64 --batch-size 16 \
  --checkpoint interrupted.agc --loss-log interrupted.csv > interrupted.txt 2>&1 &
job=$!
for _ in $(seq 1 300); do  # the loop has begun: steps are logged
  [[ -s interrupted.csv && $(wc -l < interrupted.csv) -gt 3 ]] && break
  sleep 0.1
done
[[ $(wc -l < interrupted.csv) -gt 3 ]] || fail "the job logged no steps: $(cat interrupted.txt)"
kill -INT "$job"
set +e
wait "$job"
code=$?
set -e
[[ $code -ne 0 ]] || fail "the interrupted job exited 0"
grep -q "interrupted after step [0-9]*; saved interrupted.agc" interrupted.txt ||
  fail "the interrupted job did not save: $(tail -c 600 interrupted.txt)"
"$train" --resume interrupted.agc --stop-after 1 > resumed.txt 2>&1 || true
grep -q "resuming interrupted.agc at step\|is before the resumed run's next step" resumed.txt ||
  fail "the checkpoint saved on Ctrl-C does not load: $(cat resumed.txt)"
echo "ag-train under mpirun: all checks passed"
