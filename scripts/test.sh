#!/usr/bin/env bash
# Quick start, command 2: installs the dependencies (Debian 12), builds everything and runs every
# test. CI (.ci/run) runs this script, then this script with --sanitize.
#
#   scripts/test.sh              the format check (scripts/format.sh --check), then the Release
#                                build in build/: ctest (once per GEMM backend the build has),
#                                the example (deterministic, and the loss must fall), an
#                                installed ag used from another CMake project (tests/install/)
#                                and, where the Python binding is built, the installed package
#                                imported (ctest runs its pytest tests, tests/python/)
#   scripts/test.sh --sanitize   AddressSanitizer + UndefinedBehaviorSanitizer (+ LeakSanitizer)
#                                build in build-asan/: ctest and the example; any error is fatal
set -euo pipefail
# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

# The options' variables (parse_options sets them; declared here for shellcheck).
declare sanitize
parse_options "$AG_SCRIPT" --sanitize sanitize=1 0 -- "$@"

# The example's training run: exit code 0, and the final train loss below 10% of the initial one.
# Prints the run's output; its stdout is also saved to the file $2.
check_example() {
  local binary=$1 out=$2
  shift 2
  "$binary" "$@" | tee "$out"
  # The last line reads: final train loss F  held-out loss H  (initial I, ...)
  awk '/^final train loss/ {
         final = $4; found = 1
         for (i = 5; i < NF; ++i) if ($i == "(initial") { initial = $(i + 1); sub(/,$/, "", initial) }
       }
       END {
         if (!found || initial == "") { print "test.sh: no final/initial loss in the output" > "/dev/stderr"; exit 1 }
         if (!(final + 0 < 0.1 * initial)) {
           printf "test.sh: the loss fell too little: %s -> %s\n", initial, final > "/dev/stderr"; exit 1
         }
         printf "loss fell from %s to %s\n", initial, final
       }' "$out"
}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

phase_start "dependencies"
scripts/install-deps.sh
phase_end

if ((sanitize == 0)); then
  build=build

  phase_start "format: clang-format-14 --dry-run -Werror (scripts/format.sh --check)"
  scripts/format.sh --check
  phase_end

  phase_start "configure + build (Release, $build/)"
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DAG_SANITIZE=OFF \
    -DAG_BUILD_TESTS=ON -DAG_BUILD_EXAMPLES=ON
  cmake --build "$build" -j"$JOBS"
  phase_end

  phase_start "ctest ($build/)"
  ctest --test-dir "$build" --output-on-failure -j"$JOBS"
  phase_end

  # The suite again on every other GEMM backend the build has (autograd/gemm_backend.h): the first
  # run used the default (oneDNN where it was found), this one each of the others.
  # ($build/gemm_backends.txt lists them, the default first.)
  read -r -a backends < <(tr ';' ' ' <"$build/gemm_backends.txt")
  for backend in "${backends[@]:1}"; do
    phase_start "ctest ($build/) with AG_GEMM_BACKEND=$backend"
    AG_GEMM_BACKEND=$backend ctest --test-dir "$build" --output-on-failure -j"$JOBS"
    phase_end
  done

  phase_start "example: loss falls, same seed gives the same output"
  check_example "$build/examples/ag-train-mlp" "$tmp/run1.txt"
  "$build/examples/ag-train-mlp" >"$tmp/run2.txt"
  if ! cmp -s "$tmp/run1.txt" "$tmp/run2.txt"; then
    echo "test.sh: two runs of ag-train-mlp with the same seed differ:" >&2
    diff "$tmp/run1.txt" "$tmp/run2.txt" >&2 || true
    exit 1
  fi
  echo "two runs: identical output"
  phase_end

  phase_start "install + use from another CMake project (tests/install/)"
  cmake --install "$build" --prefix "$tmp/prefix"
  cmake -S tests/install -B "$tmp/consumer" -DCMAKE_PREFIX_PATH="$tmp/prefix" \
    -DCMAKE_BUILD_TYPE=Release
  cmake --build "$tmp/consumer" -j"$JOBS"
  "$tmp/consumer/my_program"
  phase_end

  # The installed Python package imports with nothing of the build tree on the path.
  if [[ -f "$build/python_install.txt" ]]; then
    phase_start "install: import the installed Python package ag"
    { read -r python; read -r python_dir; } <"$build/python_install.txt"
    (cd "$tmp" && PYTHONPATH="$tmp/prefix/$python_dir" "$python" -c \
      "import ag; print(ag.__file__); print(ag.nn.MultiHeadAttention(100, 100, 100, 100, 5, 0.5))")
    phase_end
  fi
else
  build="build-asan"

  # Any sanitizer report fails the run. UBSan's checks are already non-recoverable
  # (-fno-sanitize-recover=all); halt_on_error makes that explicit.
  asan_options=halt_on_error=1:abort_on_error=0:detect_leaks=1:check_initialization_order=1
  asan_options+=:strict_init_order=1:detect_stack_use_after_return=1
  export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1

  # LeakSanitizer stops the world with ptrace, which some containers forbid. Make sure it can run
  # here: a program with a known leak must be reported as leaking.
  phase_start "LeakSanitizer probe"
  printf '#include <cstdlib>\nvoid* volatile p;\nint main() { p = std::malloc(64); p = nullptr; }\n' \
    >"$tmp/leak.cpp"
  g++ -fsanitize=address -g "$tmp/leak.cpp" -o "$tmp/leak"
  if ASAN_OPTIONS=detect_leaks=1 "$tmp/leak" >"$tmp/leak.txt" 2>&1; then
    probe_rc=0
  else
    probe_rc=$?
  fi
  if ((probe_rc != 0)) && grep -q "detected memory leaks" "$tmp/leak.txt"; then
    echo "LeakSanitizer works: leak checking is on"
  else
    cat "$tmp/leak.txt" >&2
    echo "WARNING: LeakSanitizer does not work here (often: ptrace not permitted in this" \
         "container); running with detect_leaks=0 — leaks are NOT checked." >&2
    asan_options=${asan_options/detect_leaks=1/detect_leaks=0}
  fi
  export ASAN_OPTIONS=$asan_options
  echo "ASAN_OPTIONS=$ASAN_OPTIONS"
  echo "UBSAN_OPTIONS=$UBSAN_OPTIONS"
  phase_end

  # -O1 -g1, as AddressSanitizer's documentation suggests: reports keep their file and line, and
  # the build takes some 40 % less time than RelWithDebInfo's -O2 -g (CI's budget is 40 minutes).
  # The tests' and the programs' own code is compiled at -Og (tests/CMakeLists.txt,
  # examples/CMakeLists.txt): a third less time again for them.
  phase_start "configure + build (ASan+UBSan, -O1 -g1, $build/)"
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" -DAG_SANITIZE=ON \
    -DAG_BUILD_TESTS=ON -DAG_BUILD_EXAMPLES=ON -DAG_BUILD_BENCH=OFF
  cmake --build "$build" -j"$JOBS"
  phase_end

  phase_start "ctest ($build/)"
  ctest --test-dir "$build" --output-on-failure -j"$JOBS"
  phase_end

  phase_start "example under the sanitizers"
  check_example "$build/examples/ag-train-mlp" "$tmp/run.txt"
  phase_end
fi

echo
echo "test.sh${1:+ $1}: all passed"
