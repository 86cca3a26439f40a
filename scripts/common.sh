# shellcheck shell=bash
# Shared by scripts/format.sh, scripts/test.sh and scripts/train.sh (sourced, not run).

# The script that sourced this file, as an absolute path: its --help reads its header after the
# cd below, where a relative $0 would no longer lead to it.
# shellcheck disable=SC2034  # used by the scripts that source this file
AG_SCRIPT=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")

# Every script works from the repository root, wherever it is called from.
AG_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$AG_ROOT" || exit 1

# print_usage, parse_options: the command line (scripts/options.sh).
# shellcheck source=scripts/options.sh
source "$AG_ROOT/scripts/options.sh"

# shellcheck disable=SC2034  # used by the scripts that source this file
JOBS=$(nproc)

# phase_start NAME ... phase_end: prints a header, then the phase's wall time.
_phase_name=""
_phase_t0=0
phase_start() {
  _phase_name=$1
  _phase_t0=$(date +%s.%N)
  printf '\n==> %s\n' "$_phase_name"
}
phase_end() {
  awk -v name="$_phase_name" -v t0="$_phase_t0" -v t1="$(date +%s.%N)" \
    'BEGIN { printf "==> %s: %.1f s\n", name, t1 - t0 }'
}
