#!/usr/bin/env bash
# Prints the OpenBLAS core (OPENBLAS_CORETYPE) whose AVX-512 kernels this CPU can run, or nothing.
#
#   scripts/openblas-coretype.sh        Cooperlake | SkylakeX | (nothing: no AVX-512)
#
# Why: OpenBLAS (Debian 12's 0.3.21, DYNAMIC_ARCH) picks its kernels for the CPU, unless
# OPENBLAS_CORETYPE names others. Some machines set it in their environment (these build machines
# set OPENBLAS_CORETYPE=Haswell on AVX-512 CPUs): then OpenBLAS runs its AVX2 kernels, whose bits
# differ from the AVX-512 kernels' it picks by itself. ag's bit-pinned tests (the version-1
# checkpoint, d2l's heads against OpenBLAS) were made with the AVX-512 kernels (the fused ops
# against the composed ones make the same BLAS calls, and pass on every kernel), and the benchmarks
# should give PyTorch, which runs on the same OpenBLAS, its fastest kernels. So ctest
# (tests/openblas_coretype.cmake) and bench/compare_train.sh set OPENBLAS_CORETYPE to what this
# prints — on AMD's Zen 4 and Zen 5, the core OpenBLAS 0.3.21 picks by itself.
#
# The rule: avx512_bf16 (with the AVX-512 base) -> Cooperlake; AVX-512 F, CD, BW, DQ and VL ->
# SkylakeX (the two share their float32 and float64 kernels); otherwise nothing.
set -euo pipefail

flags=" $(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null | cut -d: -f2) "
has() { [[ $flags == *" $1 "* ]]; }

if has avx512f && has avx512cd && has avx512bw && has avx512dq && has avx512vl; then
  if has avx512_bf16; then
    echo Cooperlake
  else
    echo SkylakeX
  fi
fi
