#!/usr/bin/env bash
# The scripts' command lines (scripts/options.sh), with no build: every script in bench/*.sh and
# scripts/format.sh, test.sh and train.sh answers --help with its header comment and exit code 0;
# each one but train.sh (whose arguments are its job's, build/examples/ag-train's) refuses an
# unknown argument with "<script>: unknown argument 'X' (see --help)" and exit code 2; and
# parse_options and require_built themselves set defaults, values and flags, and refuse what they
# should. Run by ctest (tests/scripts/CMakeLists.txt) as: test_options.sh [SOURCE_DIR]
set -euo pipefail
root=$(cd "${1:-$(dirname "${BASH_SOURCE[0]}")/../..}" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

failures=0
pass() { echo "ok: $*"; }
fail() {
  echo "FAILED: $*" >&2
  failures=$((failures + 1))
}
# run COMMAND...: runs the command, its stdout in $work/out, its stderr in $work/err and its exit
# code in $rc.
run() {
  rc=0
  "$@" >"$work/out" 2>"$work/err" || rc=$?
}
# expect WHAT RC STDOUT STDERR: the command that run ran gave these.
expect() {
  local what=$1 want_rc=$2 want_out=$3 want_err=$4 out err
  out=$(cat "$work/out")
  err=$(cat "$work/err")
  if ((rc != want_rc)) || [[ $out != "$want_out" || $err != "$want_err" ]]; then
    fail "$what: exit code $rc, stdout '$out', stderr '$err'; expected $want_rc, '$want_out'," \
         "'$want_err'"
  else
    pass "$what"
  fi
}

# 1. Every script: --help prints the header (line 2 up to the first line not a comment, without
# "# "), exit code 0; an unknown argument, or --build without its value, exits 2 naming the script.
scripts=("$root"/bench/*.sh "$root"/scripts/{format,test,train}.sh)
for script in "${scripts[@]}"; do
  name=${script##*/}
  # The header, read another way than print_usage reads it.
  sed -n '2,/^[^#]/p' "$script" | sed '$d' | sed 's/^# \{0,1\}//' >"$work/header"
  lines=$(wc -l <"$work/header")
  run bash "$script" --help
  if ((rc != 0)); then
    fail "$name --help: exit code $rc, expected 0: $(cat "$work/err")"
  elif ! head -n "$lines" "$work/out" | cmp -s - "$work/header"; then
    fail "$name --help does not print its header; it prints: $(head -3 "$work/out")"
  elif [[ $name != train.sh ]] && (($(wc -l <"$work/out") != lines)); then
    fail "$name --help prints more than its header: $(tail -n +"$((lines + 1))" "$work/out")"
  else
    pass "$name --help: exit code 0, '$(head -1 "$work/header")'"
  fi

  [[ $name == train.sh ]] && continue  # its arguments are ag-train's (tests/examples)
  run bash "$script" --no-such-option
  expect "$name --no-such-option: exit code 2, naming the script" 2 "" \
    "$name: unknown argument '--no-such-option' (see --help)"

  [[ $script == "$root"/bench/* ]] || continue  # bench/'s scripts all have --build DIR
  run bash "$script" --build
  expect "$name --build (no value): exit code 2" 2 "" "$name: --build needs a value"
done

# 2. parse_options itself, on a script of its own (its header is the --help).
# shellcheck source=scripts/options.sh
source "$root/scripts/options.sh"
printf '%s\n' '#!/usr/bin/env bash' '# my_script.sh — a test.' '#' '#   my_script.sh [--size N]' \
  'set -eu' >"$work/my_script.sh"
# in_subshell COMMAND...: the functions exit on --help and on errors; a subshell keeps this test.
in_subshell() { ("$@"); }
# parse ARGUMENT...: parse_options in a subshell, printing the variables it set.
parse() {
  (
    declare size name speed
    parse_options "$work/my_script.sh" --size size 3 --name name "a b" --fast speed=fast slow \
      -- "$@"
    echo "size=$size name=$name speed=$speed"
  )
}
run parse
expect "parse_options keeps the defaults" 0 "size=3 name=a b speed=slow" ""
run parse --name "x  y" --fast --size 10
expect "parse_options sets values and flags, in any order" 0 "size=10 name=x  y speed=fast" ""
run parse --size 1 --size 2 --name --fast
expect "parse_options takes the word after an option as its value, and the last of repeats" 0 \
  "size=2 name=--fast speed=slow" ""
run parse --fast --size
expect "parse_options refuses an option without its value" 2 "" "my_script.sh: --size needs a value"
run parse --size 1 stray
expect "parse_options refuses an unknown argument" 2 "" \
  "my_script.sh: unknown argument 'stray' (see --help)"
run parse --size 1 -h --no-such-option
expect "parse_options prints the header on -h and exits 0" 0 "my_script.sh — a test.

  my_script.sh [--size N]" ""
run in_subshell parse_options my_script.sh --x _opt_target "" -- --x 1
expect "parse_options refuses a variable named like its own (a local would take the value)" 1 "" \
  "parse_options: the spec '--x' names _opt_target; names _opt_... are parse_options' own"

# 3. require_built: a build that has the files passes; one without them exits 1 with the commands.
mkdir -p "$work/build/bench"
printf '#!/bin/sh\n' >"$work/build/bench/ag-bench-train"
chmod +x "$work/build/bench/ag-bench-train"
touch "$work/build/bench/libag-gemm-trace.so"  # a library need not be executable
run in_subshell require_built my_script.sh "$work/build" bench/ag-bench-train \
  bench/libag-gemm-trace.so
expect "require_built passes a build that has the files" 0 "" ""
run in_subshell require_built my_script.sh "$work/build" bench/ag-bench-train \
  bench/ag-bench-lm bench/libag-gemm-trace.so
expect "require_built refuses a build without a program, naming it and the commands" 1 "" \
  "my_script.sh: $work/build/bench/ag-bench-lm not found; build it first:
  cmake -S $root -B $work/build -DCMAKE_BUILD_TYPE=Release && cmake --build $work/build \
-j$(nproc) --target ag-bench-train ag-bench-lm ag-gemm-trace"

if ((failures > 0)); then
  echo "test_options.sh: $failures failed" >&2
  exit 1
fi
echo "test_options.sh: all passed"
