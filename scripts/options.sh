# shellcheck shell=bash
# What ag's shell scripts share about their command line (sourced, not run): --help from the
# script's header comment, the loop over the options, the exit codes of docs/training.md (0 for
# --help, 2 for a bad option, with "<script>: <message>" on stderr), and the check that the
# programs a script runs are built. bench/*.sh source it as "$root/scripts/options.sh";
# scripts/common.sh sources it for scripts/format.sh, test.sh and train.sh.
#
# The functions' own variables are local and named _opt_..., so that setting a caller's variable
# by its name (printf -v NAME) never lands on one of theirs instead; parse_options refuses to set
# a variable of that name.

# print_usage FILE: prints FILE's header comment — its lines from the second (after the #! line) up
# to the first that does not start with '#' — without the leading "# ". A script's --help is its
# header, so the two cannot drift apart as the header grows.
print_usage() {
  awk 'NR > 1 && !/^#/ { exit }
       NR > 1 { sub(/^# ?/, ""); print }' "$1"
}

# parse_options SCRIPT SPEC... -- ARGUMENT...: reads a script's command line into the caller's
# variables. SCRIPT is the script's own path ("${BASH_SOURCE[0]}"): its base name starts every
# message, and its header is the --help. Each SPEC is three words, an option, what it sets and the
# default, so that an option is declared in one place:
#   --name var DEFAULT         $var is DEFAULT, or VALUE after --name VALUE
#   --flag var=value DEFAULT   $var is DEFAULT, or value after the bare --flag
# -h and --help print the header and exit 0. An argument no SPEC names, or an option missing its
# value, exits 2 with "<script>: unknown argument 'X' (see --help)" or "<script>: --name needs a
# value" on stderr. A value that a script must check (a count, a name from a list) is checked by
# that script afterwards.
#
#   parse_options "${BASH_SOURCE[0]}" \
#     --build build "$root/build" \
#     --no-generation generation=0 1 \
#     -- "$@"
parse_options() {
  local _opt_script=$1 _opt_program=${1##*/}
  shift
  # The specs, up to "--": the option words and what each sets, side by side; the defaults are
  # set as they are read.
  local -a _opt_names=() _opt_targets=()
  while (($# > 0)) && [[ $1 != -- ]]; do
    if (($# < 3)) || [[ $2 == -- || $3 == -- ]]; then
      echo "parse_options: the spec '$1' wants a variable and a default" >&2
      exit 1
    fi
    if [[ $2 == _opt_* ]]; then  # printf -v would set this function's local, not the caller's
      echo "parse_options: the spec '$1' names $2; names _opt_... are parse_options' own" >&2
      exit 1
    fi
    _opt_names+=("$1")
    _opt_targets+=("$2")
    printf -v "${2%%=*}" '%s' "$3"
    shift 3
  done
  if (($# == 0)); then
    echo "parse_options: no -- between the specs and the arguments" >&2
    exit 1
  fi
  shift  # the "--"

  # The arguments, left to right: an option's value is the word after it, whatever it is.
  local _opt_i _opt_target
  while (($# > 0)); do
    if [[ $1 == -h || $1 == --help ]]; then
      print_usage "$_opt_script"
      exit 0
    fi
    _opt_target=""
    for _opt_i in "${!_opt_names[@]}"; do
      if [[ ${_opt_names[_opt_i]} == "$1" ]]; then
        _opt_target=${_opt_targets[_opt_i]}
        break
      fi
    done
    if [[ -z $_opt_target ]]; then
      echo "$_opt_program: unknown argument '$1' (see --help)" >&2
      exit 2
    elif [[ $_opt_target == *=* ]]; then  # a flag: var=value
      printf -v "${_opt_target%%=*}" '%s' "${_opt_target#*=}"
      shift
    elif (($# < 2)); then
      echo "$_opt_program: $1 needs a value" >&2
      exit 2
    else
      printf -v "$_opt_target" '%s' "$2"
      shift 2
    fi
  done
}

# require_built SCRIPT BUILD FILE...: checks that each FILE, a path inside the CMake build directory
# BUILD (bench/ag-bench-train, a program, must be executable; bench/libag-gemm-trace.so, a
# library, only there), or exits 1 naming the first one missing and the commands that build them
# all: the CMake target of bench/NAME is NAME, of bench/libNAME.so NAME.
require_built() {
  local _opt_program=${1##*/} _opt_build=$2
  shift 2
  local _opt_file _opt_target _opt_root _opt_missing=""
  local -a _opt_targets=()
  for _opt_file in "$@"; do
    _opt_target=${_opt_file##*/}
    if [[ $_opt_target == lib*.so ]]; then  # a library: it need not be executable
      _opt_target=${_opt_target#lib}
      _opt_target=${_opt_target%.so}
      [[ -e $_opt_build/$_opt_file ]] || _opt_missing=${_opt_missing:-$_opt_build/$_opt_file}
    else
      [[ -x $_opt_build/$_opt_file ]] || _opt_missing=${_opt_missing:-$_opt_build/$_opt_file}
    fi
    _opt_targets+=("$_opt_target")
  done
  if [[ -n $_opt_missing ]]; then
    _opt_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)  # this file is scripts/options.sh
    echo "$_opt_program: $_opt_missing not found; build it first:" >&2
    echo "  cmake -S $_opt_root -B $_opt_build -DCMAKE_BUILD_TYPE=Release &&" \
         "cmake --build $_opt_build -j$(nproc) --target ${_opt_targets[*]}" >&2
    exit 1
  fi
}
