// Which library makes ag's matrix products: OpenBLAS, or oneDNN for the large float32 ones.
//
// Every product ag makes — matmul, the fused attention kernels, Linear layers — goes through one
// function (autograd/detail/blas.h). It calls OpenBLAS's sgemm/dgemm, or, when this build found
// oneDNN (Debian's libdnnl-dev; CMake option AG_WITH_ONEDNN) and the backend is onednn, oneDNN's
// sgemm for float32 products of at least kOnednnMinMultiplyAdds multiply-adds but tall Aᵀ · B
// (onednn_makes). oneDNN's JIT kernels make the products of d2l's and the language model's
// training steps 8–15 % faster on an AVX-512 CPU than OpenBLAS 0.3.21 (docs/benchmarks.md, "GEMM backends"); for small products
// its fixed cost per call is 2–5× OpenBLAS's, and float64 (gradcheck) has no oneDNN gemm, so those
// stay on OpenBLAS. Attention's per-head products (at most 64 × 64, k ≤ 64) are ag's own kernel's
// on AVX-512 CPUs, whichever the backend (autograd/small_gemm.cpp; AG_SMALL_GEMM=off in the
// environment sends them to the backend's library too).
//
//   ag::set_gemm_backend(ag::GemmBackend::openblas);    // or AG_GEMM_BACKEND=openblas in the
//                                                       // environment, read at the first product
//
// The default is onednn where it was built, openblas otherwise. Both give the same results to
// float32 rounding (a different summation order), and each is deterministic: the same backend,
// seed and thread count give bit-identical runs. Choose the backend before training, not while
// products run on other threads.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "autograd/scoped_setting.h"

namespace ag {

enum class GemmBackend { openblas, onednn };

// Float32 products with m·n·k below this go to OpenBLAS under either backend: 2^17, so that small
// products, where oneDNN's fixed cost per call is 2–5× OpenBLAS's, stay there, and the
// projections and everything larger go to oneDNN. Attention's per-head products (m, n, k ≤ 64:
// d2l's 10×10×8 up to the language model's 64×64×32) are ag's own under either backend, on
// AVX-512 CPUs (autograd/small_gemm.cpp).
inline constexpr int64_t kOnednnMinMultiplyAdds = int64_t(1) << 17;

// Aᵀ · B with m ≥ 512 rows and m · n ≥ 2^17 outputs — a weight's gradient gᵀ · x with at least 512
// outputs and 2^17 weights, e.g. the FFN's second weight, 1024 × 256 from 2048 rows — stays on
// OpenBLAS too: there oneDNN 2.6 is 4–25 % slower than OpenBLAS 0.3.21. With fewer rows or
// outputs (512 × 128, 256 × 1024, ...) oneDNN is about as fast or faster. The rule is per call:
// threads split a product's rows. Measured on the Zen 5 machine: docs/benchmarks.md, "GEMM
// backends", "Tall Aᵀ · B".
inline constexpr int64_t kOpenblasMinTransposedARows = 512;
inline constexpr int64_t kOpenblasMinTransposedAOutputs = int64_t(1) << 17;

// Whether oneDNN makes the float32 product op(A) · op(B) (m × k by k × n) when it is the backend.
inline bool onednn_makes(bool a_transposed, bool b_transposed, int64_t m, int64_t n, int64_t k) {
  if (m * n * k < kOnednnMinMultiplyAdds) return false;
  const bool tall_transposed_a = a_transposed && !b_transposed &&
                                 m >= kOpenblasMinTransposedARows &&
                                 m * n >= kOpenblasMinTransposedAOutputs;
  return !tall_transposed_a;
}

// "openblas" / "onednn".
std::string to_string(GemmBackend backend);

// The backends this build can use: always openblas, and onednn when oneDNN was found.
std::vector<GemmBackend> built_gemm_backends();

// The backend of the products from now on. Throws ValueError naming it if this build lacks it.
void set_gemm_backend(GemmBackend backend);

// The backend in use. The first call reads AG_GEMM_BACKEND ("openblas" or "onednn") if it is set
// and throws ValueError naming the variable, its value and the built backends if it is neither or
// names one this build lacks.
GemmBackend get_gemm_backend();

// Sets the backend for a scope and restores the previous one on exit:
//   { ag::GemmBackendGuard openblas(ag::GemmBackend::openblas); Tensor c = ag::matmul(a, b); }
using GemmBackendGuard = ScopedSetting<GemmBackend, get_gemm_backend, set_gemm_backend>;

}  // namespace ag
