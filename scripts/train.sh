#!/usr/bin/env bash
# Quick start, command 1: installs the dependencies (Debian 12), builds ag in Release in build/
# and runs the main training job. Arguments are passed on to the job, e.g.
#
#   scripts/train.sh --steps 5000 --seed 1
#   scripts/train.sh --help     this, then the job's options once it is built (docs/training.md)
set -euo pipefail
# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

# The main job: train the default toy Transformer (the reverse task).
MAIN_JOB=build/examples/ag-train

# --help first: this header, and the job's own --help if it is built (without installing or
# building anything). Every other argument, --help after another one too, is the job's.
if [[ ${1:-} == -h || ${1:-} == --help ]]; then
  print_usage "$AG_SCRIPT"
  echo
  if [[ -x $MAIN_JOB ]]; then
    "$MAIN_JOB" --help
  else
    echo "$MAIN_JOB is not built yet: scripts/train.sh builds it;" \
         "docs/training.md lists its options."
  fi
  exit 0
fi

phase_start "dependencies"
scripts/install-deps.sh
phase_end

phase_start "configure + build (Release, build/)"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DAG_BUILD_EXAMPLES=ON
cmake --build build -j"$JOBS"
phase_end

phase_start "train: $MAIN_JOB${*:+ $*}"
"$MAIN_JOB" "$@"
phase_end
