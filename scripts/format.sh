#!/usr/bin/env bash
# Formats ag's C++ sources with clang-format-14 and the repository's .clang-format (Google's style,
# 100 columns), in place; with --check, changes nothing and fails (exit 1), listing every place,
# if any file is not formatted. scripts/test.sh (and so CI) runs the check.
#
#   scripts/format.sh           format every .cpp and .h file of the repository, tracked or new
#                               (not those .gitignore leaves out, such as build/)
#   scripts/format.sh --check   only check
set -euo pipefail
# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

# The options' variables (parse_options sets them; declared here for shellcheck).
declare check
parse_options "$AG_SCRIPT" --check check=1 0 -- "$@"

if ! command -v clang-format-14 >/dev/null; then
  echo "format.sh: clang-format-14 not found; scripts/install-deps.sh installs it" >&2
  exit 1
fi

# New files too: a file not yet added would otherwise be left unformatted, and CI, which sees it
# committed, would fail on it.
mapfile -t sources < <(git ls-files --cached --others --exclude-standard '*.cpp' '*.h')
if ((check)); then
  if ! clang-format-14 --dry-run -Werror "${sources[@]}"; then
    echo "format.sh: the files above are not formatted; run scripts/format.sh" >&2
    exit 1
  fi
  echo "format.sh: all ${#sources[@]} C++ files are formatted"
else
  clang-format-14 -i "${sources[@]}"
  echo "format.sh: formatted ${#sources[@]} C++ files"
fi
