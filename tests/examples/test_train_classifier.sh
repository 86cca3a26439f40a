#!/usr/bin/env bash
# ag-train-classifier, the model of one's own on ag::training (examples/train_classifier.cpp):
# it trains (the held-out accuracy rises), a run stopped and resumed is bit-identical to one that
# was not (the loss log and the final checkpoint, byte for byte), Ctrl-C saves a checkpoint that
# resumes, and — given MPIRUN — 2 ranks train, resume bit for bit on 2 ranks, and with
# --chunk-rows give one process's bits. Run by ctest (tests/examples/CMakeLists.txt) as:
# test_train_classifier.sh AG_TRAIN_CLASSIFIER [MPIRUN]
set -euo pipefail
classifier=$1
mpirun=${2:-}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
fail() { echo "FAILED: $*" >&2; exit 1; }
run=(--steps 60 --eval-every 30 --batch-size 32 --width 16 --heads 2)

# 1. It trains: the held-out accuracy of the default run's first evaluation beats chance.
"$classifier" --steps 500 --eval-every 500 > trained.txt
awk '/held-out accuracy/ { sub(/%/, "", $NF); if ($NF + 0 < 75) bad = 1; seen = 1 }
     END { exit !(seen && !bad) }' trained.txt || fail "it did not learn: $(cat trained.txt)"

# 2. Stopped after 30 steps and resumed: the same bits as the run that was not stopped.
"$classifier" "${run[@]}" --loss-log full.csv --checkpoint full.agc > full.txt
"$classifier" "${run[@]}" --loss-log part.csv --checkpoint part.agc --stop-after 30 > stopped.txt
grep -q "stopped after step 30 of 60; continue with --resume part.agc" stopped.txt ||
  fail "$(cat stopped.txt)"
"$classifier" --resume part.agc --loss-log part.csv --checkpoint part.agc > resumed.txt
grep -q "resuming part.agc at step 31 of 60" resumed.txt || fail "$(head -3 resumed.txt)"
cmp full.csv part.csv || fail "the resumed run's losses differ"
cmp full.agc part.agc || fail "the resumed run's final checkpoint differs"
# A run killed after its checkpoint of step 20 had logged steps 21-60 too: resumed from that
# checkpoint, the log's rows of steps 21 on are dropped before they are taken again — one row a
# step, the same bits as the run that was not killed.
"$classifier" "${run[@]}" --loss-log kept.csv --checkpoint kept.agc --checkpoint-every 10 \
  --keep 6 > /dev/null
"$classifier" --resume kept.agc.step-00000020 --loss-log kept.csv > /dev/null
cmp full.csv kept.csv || fail "a resume from step 20 of a log with 60 rows: $(wc -l < kept.csv) rows"
"$classifier" --resume full.agc > done.txt 2>&1 && fail "a finished run resumed"
grep -q "the run already finished (step 60)" done.txt || fail "$(cat done.txt)"

# 3. Ctrl-C: the step ends, the checkpoint is saved, exit code 130; the file resumes.
"$classifier" --steps 1000000 --eval-every 1000000 --checkpoint int.agc > int.txt &
pid=$!
sleep 1
kill -INT "$pid"
code=0
wait "$pid" || code=$?
[[ $code == 130 ]] || fail "exit code $code after SIGINT: $(tail -2 int.txt)"
grep -q "interrupted after step [0-9]*; saved int.agc" int.txt || fail "$(tail -2 int.txt)"
"$classifier" --resume int.agc --stop-after "$(($(grep -o 'after step [0-9]*' int.txt |
  grep -o '[0-9]*') + 1))" > int_resumed.txt || fail "the interrupted run does not resume"

[[ -n $mpirun ]] || exit 0
# 4. Two ranks: each takes half of every batch; a 2-rank run resumes on 2 ranks bit for bit.
"$mpirun" -np 2 "$classifier" "${run[@]}" --loss-log mpi_full.csv > mpi_full.txt
grep -q "held-out accuracy" mpi_full.txt || fail "$(cat mpi_full.txt)"
"$mpirun" -np 2 "$classifier" "${run[@]}" --loss-log mpi_part.csv --checkpoint mpi.agc \
  --stop-after 30 > /dev/null
"$mpirun" -np 2 "$classifier" --resume mpi.agc --loss-log mpi_part.csv > /dev/null
cmp mpi_full.csv mpi_part.csv || fail "a 2-rank run resumed on 2 ranks is not bit-identical"
# 5. --chunk-rows: one process and two ranks train the same model, to the last bit.
"$classifier" "${run[@]}" --chunk-rows 8 --loss-log chunks1.csv > /dev/null
"$mpirun" -np 2 "$classifier" "${run[@]}" --chunk-rows 8 --loss-log chunks2.csv > /dev/null
cmp chunks1.csv chunks2.csv || fail "--chunk-rows: 2 ranks differ from 1 process"
echo "ag-train-classifier: trains, resumes bit for bit, saves on Ctrl-C, runs on 2 ranks"
