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

// Aᵀ · B — a weight's gradient gᵀ · x — with at least min_rows rows and min_outputs outputs (m ·
// n) stays on OpenBLAS too, where oneDNN 2.6 is slower than OpenBLAS 0.3.21. On an AVX-512 CPU
// from 512 rows and 2^17 outputs, e.g. the FFN's second weight, 1024 × 256 from 2048 rows (4–25 %
// slower; with fewer rows or outputs oneDNN is about as fast or faster: Zen 5). Without AVX-512,
// oneDNN's AVX2 kernels are slower from 2^16 outputs on whatever the rows (15–115 % on Zen 3's
// d2l products: 128 × 512 and 256 × 256 from 1024 and 2048 rows). The rule is per call: threads
// split a product's rows. docs/benchmarks.md, "GEMM backends", "Tall Aᵀ · B".
struct TransposedARule {
  int64_t min_rows, min_outputs;
};
inline constexpr TransposedARule kOpenblasTransposedAOnAvx512{512, int64_t(1) << 17};
inline constexpr TransposedARule kOpenblasTransposedAWithoutAvx512{1, int64_t(1) << 16};

// Whether oneDNN runs its AVX-512 kernels here (the CPU has AVX-512; checked once). Without them,
// oneDNN's AVX2 kernels lose to OpenBLAS at tall Aᵀ · B (above), and win over ag's small kernel's
// AVX2 copy at attention's larger heads, 64 × 64 × 32 (1.5–1.85× on Zen 3): with the oneDNN
// backend the products oneDNN makes go to it before that kernel (autograd/detail/blas.h).
bool onednn_has_avx512_kernels();
// The tall Aᵀ · B rule for this CPU.
inline TransposedARule openblas_transposed_a_rule() {
  return onednn_has_avx512_kernels() ? kOpenblasTransposedAOnAvx512
                                     : kOpenblasTransposedAWithoutAvx512;
}

// Whether oneDNN makes the float32 product op(A) · op(B) (m × k by k × n) when it is the backend.
inline bool onednn_makes(bool a_transposed, bool b_transposed, int64_t m, int64_t n, int64_t k) {
  if (m * n * k < kOnednnMinMultiplyAdds) return false;
  const TransposedARule tall = openblas_transposed_a_rule();
  const bool tall_transposed_a =
      a_transposed && !b_transposed && m >= tall.min_rows && m * n >= tall.min_outputs;
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

// Whether, with the oneDNN backend on a CPU without AVX-512, oneDNN makes this float32 product
// before ag's small kernel is tried: every product onednn_makes (autograd/detail/blas.h's gemm).
// Inline, its first test the size, since every one of attention's small products asks.
inline bool onednn_before_small_kernel(
    bool a_transposed, bool b_transposed, int64_t m, int64_t n, int64_t k) {
  return m * n * k >= kOnednnMinMultiplyAdds && !onednn_has_avx512_kernels() &&
         onednn_makes(a_transposed, b_transposed, m, n, k) &&
         get_gemm_backend() == GemmBackend::onednn;
}

// Sets the backend for a scope and restores the previous one on exit:
//   { ag::GemmBackendGuard openblas(ag::GemmBackend::openblas); Tensor c = ag::matmul(a, b); }
using GemmBackendGuard = ScopedSetting<GemmBackend, get_gemm_backend, set_gemm_backend>;

}  // namespace ag
