#!/usr/bin/env bash
# Installs the Debian 12 packages ag needs to build and test, skipping apt entirely when they are
# all present. Runs apt as root, or through sudo otherwise. Only Debian's apt repositories are
# used; nothing else is downloaded.
#
#   scripts/install-deps.sh
set -euo pipefail

packages=(
  cmake           # build system (>= 3.25; bookworm has 3.25.1)
  g++             # C++20 compiler (GCC 12)
  make            # CMake's default generator
  libopenblas-dev # BLAS for matmul (brings libopenblas-pthread-dev and OpenBLASConfig.cmake)
  libdnnl-dev     # oneDNN: its sgemm makes the large float32 products (autograd/gemm_backend.h)
  libsleef-dev    # SLEEF: vectorised exp, log, tanh, erfc for the activations (autograd/detail/vector_math.h)
  catch2          # unit tests (Catch2 v2)
  libcereal-dev   # serialization (checkpoints)
  libcli11-dev    # command-line parsing
  zlib1g-dev      # zlib's crc32 (checkpoint files)
  libpng-dev      # PNG files of the pictures (viz/: heatmaps, attention weights)
  gnuplot-nox     # line plots of the pictures (positional encoding, training curves); its png terminal
  clang           # the fuzzer (tests/fuzz/run.sh): clang 14 with -fsanitize=fuzzer
  libclang-rt-14-dev # libFuzzer and clang's sanitizer runtimes (ASan, UBSan)
  graphviz        # dot: ag-attention-graph --png renders graphs; tests/examples checks the PNG
  clang-format-14 # the C++ format (.clang-format); scripts/test.sh runs scripts/format.sh --check
  fortunes        # /usr/share/games/fortunes: the English text ag-train --task lm trains on by default
  libopenmpi-dev  # MPI for ag::distributed: data-parallel training (mpirun -np 2 ag-train ...)
  openmpi-bin     # mpirun
  # The Python binding (python/: import ag) and its tests; without them ag builds and tests as before.
  python3-dev     # Python.h for the extension module ag._C
  pybind11-dev    # the binding's C++ library (pybind11 2.10, and its CMake package)
  python3-numpy   # NumPy arrays in and out of ag tensors
  python3-pytest  # the binding's tests (tests/python/)
  python3-nbclient   # runs the notebook docs/notebooks/attention.ipynb headless in the tests
  python3-ipykernel  # the notebook's Python kernel
)

missing=()
for package in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$package" 2>/dev/null || true)
  if [[ "$status" != "install ok installed" ]]; then
    missing+=("$package")
  fi
done

if ((${#missing[@]} == 0)); then
  echo "install-deps: all ${#packages[@]} packages are installed (${packages[*]})"
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
if ! command -v apt-get >/dev/null; then
  echo "install-deps: apt-get not found; this script targets Debian 12. Install these packages" \
       "(or their equivalents) yourself: ${missing[*]}" >&2
  exit 1
fi

if ((EUID == 0)); then
  as_root=()
elif command -v sudo >/dev/null; then
  as_root=(sudo)
else
  echo "install-deps: not root and sudo is not available; run as root or install: ${missing[*]}" >&2
  exit 1
fi

export DEBIAN_FRONTEND=noninteractive
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive \
  apt-get install -y --no-install-recommends "${missing[@]}"
echo "install-deps: done"
