#!/usr/bin/env bash
# Fuzzes the checkpoint reader with libFuzzer (clang, ASan + UBSan) for SECONDS (default 60).
#
#   tests/fuzz/run.sh [SECONDS]
#
# Configures and builds build-fuzz/ (CC=clang CXX=clang++ -DAG_FUZZ=ON), writes the seed corpus
# (ag-fuzz-seeds), replays the inputs kept in tests/fuzz/crashes/ (findings not yet fixed), then
# runs ag-fuzz-checkpoint on one job. The corpus grows in build-fuzz/corpus/ from run to run.
# Exits non-zero if anything is found: a crash, a sanitizer report, an exception other than
# ag::CheckpointError, an allocation over 256 MB, an input taking over 10 s, or a leak. The input
# that did it is left in build-fuzz/artifacts/; keep it in tests/fuzz/crashes/ until it is fixed.
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

build="build-fuzz"
corpus=$build/corpus
seeds=$build/seeds
artifacts=$build/artifacts
fuzzer=$build/tests/fuzz/ag-fuzz-checkpoint

phase_start "configure + build (clang, libFuzzer, ASan+UBSan, $build/)"
CC=clang CXX=clang++ cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DAG_FUZZ=ON \
  -DAG_BUILD_TESTS=OFF -DAG_BUILD_EXAMPLES=OFF -DAG_BUILD_BENCH=OFF
cmake --build "$build" -j"$JOBS" --target ag-fuzz-checkpoint ag-fuzz-seeds
phase_end

export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
asan_options=halt_on_error=1:detect_leaks=1
phase_start "seed corpus ($seeds/)"
rm -rf "$seeds" "$artifacts"
mkdir -p "$seeds" "$corpus" "$artifacts"
ASAN_OPTIONS=$asan_options "$build/tests/fuzz/ag-fuzz-seeds" "$seeds"
# LeakSanitizer stops the world with ptrace, which some containers forbid; then run without it
# rather than fail on every input.
if ! ASAN_OPTIONS=$asan_options "$fuzzer" -runs=0 "$seeds" >"$build/probe.txt" 2>&1; then
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

options=(-rss_limit_mb=2048 -malloc_limit_mb=256 -timeout=10 -max_len=16384
         -dict=tests/fuzz/checkpoint.dict -print_final_stats=1)

kept=()
if [[ -d tests/fuzz/crashes ]]; then
  while IFS= read -r -d '' f; do kept+=("$f"); done \
    < <(find tests/fuzz/crashes -type f ! -name '*.md' ! -name '.*' -print0 | sort -z)
fi
if ((${#kept[@]})); then
  phase_start "replay the ${#kept[@]} input(s) kept in tests/fuzz/crashes/"
  failed=0
  for f in "${kept[@]}"; do
    if "$fuzzer" "${options[@]}" "$f" >"$build/replay.txt" 2>&1; then
      echo "  fixed:   $f"
    else
      echo "  FAILS:   $f"
      { grep -E "ERROR: |runtime error|^ag-fuzz-checkpoint: |terminate called" "$build/replay.txt" || true; } |
        head -3 | sed 's/^/           /'
      failed=1
    fi
  done
  phase_end
  if ((failed)); then
    echo "run.sh: inputs kept in tests/fuzz/crashes/ still fail (see above); fuzzing anyway" >&2
  fi
else
  failed=0
fi

mode=()
if [[ "${AG_FUZZ_KEEP_GOING:-0}" == 1 ]]; then
  mode=(-fork=1 -ignore_crashes=1 -ignore_ooms=1 -ignore_timeouts=1)
fi
phase_start "fuzz for $seconds s ($fuzzer, 1 job${mode:+, keep going})"
rc=0
"$fuzzer" "${options[@]}" "${mode[@]}" -max_total_time="$seconds" -artifact_prefix="$artifacts/" \
  "$corpus" "$seeds" || rc=$?
phase_end
if [[ -n "$(ls -A "$artifacts")" ]] && ((rc == 0)); then
  rc=1
fi

if ((rc != 0)); then
  count=$(find "$artifacts" -type f | wc -l)
  echo "run.sh: the fuzzer found something (exit $rc); $count input(s) in $artifacts/, e.g.:" >&2
  find "$artifacts" -type f | sort | sed -n '1,10p' >&2
  echo "Replay it with: $fuzzer <file>; keep it in tests/fuzz/crashes/ until the reader is fixed." >&2
  exit 1
fi
if ((failed)); then
  exit 1
fi
echo "run.sh: $seconds s of fuzzing found nothing"
