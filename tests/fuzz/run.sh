#!/usr/bin/env bash
# Fuzzes each file reader of ag with libFuzzer (clang, ASan + UBSan) for SECONDS each (default 60):
# checkpoints (ag-fuzz-checkpoint), safetensors (ag-fuzz-safetensors), .npy (ag-fuzz-npy), the
# text layer's parsers: UTF-8, vocabularies, sentence pairs (ag-fuzz-text), and model files as
# ag-predict and ag-generate load them (ag-fuzz-model-file).
#
#   tests/fuzz/run.sh [SECONDS]
#
# Configures and builds build-fuzz/ (CC=clang CXX=clang++ -DAG_FUZZ=ON), writes the seed corpora
# (ag-fuzz-seeds), and for each target replays the inputs kept in tests/fuzz/crashes/TARGET/
# (earlier findings, kept as regression inputs), then fuzzes on one job, as many targets at a time
# as the machine has cores. The corpora grow in build-fuzz/corpus/TARGET/ from run to run. Exits
# non-zero if anything is found: a crash, a sanitizer report, an exception other than the reader's
# own error type, an allocation over 256 MB, an input taking over 10 s, or a leak. The input that
# did it is left in build-fuzz/artifacts/TARGET/; keep it in tests/fuzz/crashes/TARGET/ until it
# is fixed.
#
# AG_FUZZ_KEEP_GOING=1 tests/fuzz/run.sh 600: explore instead of stopping at the first finding
# (libFuzzer's fork mode on one job, ignoring crashes, OOMs and timeouts; every finding is left
# in build-fuzz/artifacts/, and the exit status is still non-zero if there is any).
set -euo pipefail
# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/common.sh"

seconds=${1:-60}
if ! [[ "$seconds" =~ ^[0-9]+$ ]] || ((seconds == 0)); then
  echo "run.sh: SECONDS must be a positive whole number, not '$seconds'" >&2
  exit 2
fi
if (($# > 1)); then
  echo "run.sh: too many arguments (expected at most SECONDS)" >&2
  exit 2
fi

targets=(checkpoint safetensors npy text model-file)
build="build-fuzz"
seeds=$build/seeds

phase_start "configure + build (clang, libFuzzer, ASan+UBSan, $build/)"
CC=clang CXX=clang++ cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DAG_FUZZ=ON \
  -DAG_BUILD_TESTS=OFF -DAG_BUILD_EXAMPLES=OFF -DAG_BUILD_BENCH=OFF -DAG_WITH_MPI=OFF \
  -DAG_WITH_ONEDNN=OFF
cmake --build "$build" -j"$JOBS" --target "${targets[@]/#/ag-fuzz-}" ag-fuzz-seeds
phase_end

export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
asan_options=halt_on_error=1:detect_leaks=1
phase_start "seed corpora ($seeds/)"
rm -rf "$seeds" "$build/artifacts"
mkdir -p "$seeds"
ASAN_OPTIONS=$asan_options "$build/tests/fuzz/ag-fuzz-seeds" "$seeds"
# LeakSanitizer stops the world with ptrace, which some containers forbid; then run without it
# rather than fail on every input.
probe=$build/tests/fuzz/ag-fuzz-checkpoint
if ! ASAN_OPTIONS=$asan_options "$probe" -runs=0 "$seeds/checkpoint" >"$build/probe.txt" 2>&1; then
  if grep -q "LeakSanitizer has encountered a fatal error" "$build/probe.txt"; then
    echo "WARNING: LeakSanitizer does not work here; fuzzing with detect_leaks=0 (leaks NOT checked)" >&2
    asan_options=${asan_options/detect_leaks=1/detect_leaks=0}
  else
    cat "$build/probe.txt" >&2
    echo "run.sh: a seed input fails" >&2
    exit 1
  fi
fi
export ASAN_OPTIONS=$asan_options
echo "ASAN_OPTIONS=$ASAN_OPTIONS UBSAN_OPTIONS=$UBSAN_OPTIONS"
phase_end

mode=()
if [[ "${AG_FUZZ_KEEP_GOING:-0}" == 1 ]]; then
  mode=(-fork=1 -ignore_crashes=1 -ignore_ooms=1 -ignore_timeouts=1)
fi

# fuzz_target TARGET: replays tests/fuzz/crashes/TARGET/, then fuzzes; returns non-zero on any
# finding (a kept input that fails again, or a new one).
fuzz_target() {
  local target=$1
  local fuzzer=$build/tests/fuzz/ag-fuzz-$target corpus=$build/corpus/$target
  local artifacts=$build/artifacts/$target kept_dir=tests/fuzz/crashes/$target
  mkdir -p "$corpus" "$artifacts"
  local options=(-rss_limit_mb=2048 -malloc_limit_mb=256 -timeout=10 -max_len=16384
    -print_final_stats=1)
  if [[ -f tests/fuzz/$target.dict ]]; then
    options+=(-dict="tests/fuzz/$target.dict")
  fi
  if ! "$fuzzer" "${options[@]}" -runs=0 "$seeds/$target" >"$build/probe-$target.txt" 2>&1; then
    cat "$build/probe-$target.txt" >&2
    echo "run.sh: a seed input of $target fails" >&2
    return 1
  fi

  local kept=() failed=0 f
  if [[ -d "$kept_dir" ]]; then
    while IFS= read -r -d '' f; do kept+=("$f"); done \
      < <(find "$kept_dir" -type f ! -name '*.md' ! -name '.*' -print0 | sort -z)
  fi
  if ((${#kept[@]})); then
    phase_start "$target: replay the ${#kept[@]} input(s) kept in $kept_dir/"
    for f in "${kept[@]}"; do
      if "$fuzzer" "${options[@]}" "$f" >"$build/replay-$target.txt" 2>&1; then
        echo "  fixed:   $f"
      else
        echo "  FAILS:   $f"
        { grep -E "ERROR: |runtime error|^ag-fuzz-|terminate called" "$build/replay-$target.txt" || true; } |
          head -3 | sed 's/^/           /'
        failed=1
      fi
    done
    phase_end
    if ((failed)); then
      echo "run.sh: inputs kept in $kept_dir/ still fail (see above); fuzzing anyway" >&2
    fi
  fi

  phase_start "$target: fuzz for $seconds s ($fuzzer, 1 job${mode:+, keep going})"
  local rc=0
  "$fuzzer" "${options[@]}" "${mode[@]}" -max_total_time="$seconds" \
    -artifact_prefix="$artifacts/" "$corpus" "$seeds/$target" || rc=$?
  phase_end
  if [[ -n "$(ls -A "$artifacts")" ]] && ((rc == 0)); then
    rc=1
  fi
  if ((rc != 0)); then
    local count
    count=$(find "$artifacts" -type f | wc -l)
    echo "run.sh: ag-fuzz-$target found something (exit $rc); $count input(s) in $artifacts/, e.g.:" >&2
    find "$artifacts" -type f | sort | sed -n '1,10p' >&2
    echo "Replay it with: $fuzzer <file>; keep it in $kept_dir/ until the reader is fixed." >&2
    return 1
  fi
  return "$failed"
}

# The targets run $JOBS at a time (one core each: libFuzzer runs one job), each into its own log,
# printed whole when it ends; on 2 cores the 5 targets take 3 × SECONDS instead of 5 × SECONDS.
status=0
for ((first = 0; first < ${#targets[@]}; first += JOBS)); do
  batch=("${targets[@]:first:JOBS}")
  pids=()
  for target in "${batch[@]}"; do
    fuzz_target "$target" >"$build/log-$target.txt" 2>&1 &
    pids+=($!)
  done
  for i in "${!batch[@]}"; do
    wait "${pids[i]}" || status=1
    cat "$build/log-${batch[i]}.txt"
  done
done
if ((status != 0)); then
  exit 1
fi
echo "run.sh: $seconds s of fuzzing each of ${targets[*]} found nothing"
