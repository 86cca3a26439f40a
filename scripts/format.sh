#!/usr/bin/env bash
# Formats ag's C++ sources with clang-format-14 and the repository's .clang-format (Google's style,
# 100 columns), in place; with --check, changes nothing and fails (exit 1), listing every place,
# if any file is not formatted. scripts/test.sh (and so CI) runs the check.
#
#   scripts/format.sh           format every tracked .cpp and .h file
#   scripts/format.sh --check   only check
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

check=0
case "${1:-}" in
  "") ;;
  --check) check=1 ;;
  -h | --help)
    sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'
    exit 0
    ;;
  *)
    echo "format.sh: unknown argument '$1' (expected nothing or --check)" >&2
    exit 2
    ;;
esac

if ! command -v clang-format-14 >/dev/null; then
  echo "format.sh: clang-format-14 not found; scripts/install-deps.sh installs it" >&2
  exit 1
fi

mapfile -t sources < <(git ls-files '*.cpp' '*.h')
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
