// ag's calls into OpenBLAS and oneDNN: one product for the kernels, and OpenBLAS's thread count
// (internal; only sources of the autograd library include it, since only they see OpenBLAS's
// include directory). Which library makes a product: autograd/gemm_backend.h.
#pragma once

#include <cblas.h>

#include "autograd/gemm_backend.h"

#include <algorithm>
#include <cstdint>
#include <type_traits>

namespace ag::detail {

// ag's pool splits the work (autograd/parallel.h), so OpenBLAS itself stays on one thread: a
// threaded BLAS inside a threaded loop would oversubscribe the cores.
inline void keep_blas_on_one_thread() { openblas_set_num_threads(1); }

#ifdef AG_HAVE_ONEDNN
// C = op(A) · op(B) + beta · C with oneDNN's sgemm (row-major), on the calling thread alone
// (autograd/gemm_backend.cpp). Throws RuntimeError if oneDNN reports a failure.
void onednn_sgemm(CBLAS_TRANSPOSE trans_a, CBLAS_TRANSPOSE trans_b, int64_t m, int64_t n, int64_t k,
    const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);
#endif

// ag's own kernel for small float32 products (autograd/small_gemm.cpp): at most 64 rows, 64
// columns and k ≤ 64 — attention's per-head products — where a library's fixed cost per call, or
// its packing of Bᵀ, is a large part of the time. Up to 16 × 16 with k < 32 it rounds exactly as
// OpenBLAS 0.3.21's AVX-512 kernels do (on AVX2 CPUs too). It is used with either backend, but on
// a CPU without AVX-512 the oneDNN backend takes the products oneDNN makes first (gemm below).
inline constexpr int64_t kSmallGemmMaxM = 64, kSmallGemmMaxN = 64, kSmallGemmMaxK = 64;
inline bool fits_small_sgemm(int64_t m, int64_t n, int64_t k) {
  return m >= 1 && m <= kSmallGemmMaxM && n >= 1 && n <= kSmallGemmMaxN && k >= 1 &&
         k <= kSmallGemmMaxK;
}
// Whether that kernel makes this product: the sizes fit, not both operands are transposed, the CPU
// has AVX-512 (or AVX2 and FMA), and AG_SMALL_GEMM is not off (read at the first call; another
// value than on or off throws ValueError naming it).
bool small_sgemm_makes(
    CBLAS_TRANSPOSE trans_a, CBLAS_TRANSPOSE trans_b, int64_t m, int64_t n, int64_t k);
// C = op(A) · op(B), or C += op(A) · op(B) with accumulate, by that kernel; returns false (and
// leaves C alone) when it does not make the product (small_sgemm_makes).
bool small_sgemm(CBLAS_TRANSPOSE trans_a, CBLAS_TRANSPOSE trans_b, int64_t m, int64_t n, int64_t k,
    const float* a, int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc,
    bool accumulate);

// C (m × n, row stride ldc) = op(A) · op(B) for row-major A and B with leading dims lda and ldb,
// or C += op(A) · op(B) with accumulate: one cblas_sgemm / cblas_dgemm, or ag's small kernel
// above for the small float32 ones. k = 0 is an empty sum, C = 0 or C unchanged (BLAS would
// leave C untouched in both cases). Sizes must fit BLAS's int (the callers check). Large float
// products go to oneDNN when that is the backend (autograd/gemm_backend.h).
template <class T>
void gemm(CBLAS_TRANSPOSE trans_a, CBLAS_TRANSPOSE trans_b, int64_t m, int64_t n, int64_t k,
    const T* a, int64_t lda, const T* b, int64_t ldb, T* c, int64_t ldc, bool accumulate = false) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    if (!accumulate)
      for (int64_t i = 0; i < m; ++i) std::fill(c + i * ldc, c + i * ldc + n, T(0));
    return;
  }
  const T beta = accumulate ? T(1) : T(0);
  if constexpr (std::is_same_v<T, float>) {
    // Without AVX-512, oneDNN makes the products it takes faster than ag's small kernel does.
    if (fits_small_sgemm(m, n, k) &&
        !onednn_before_small_kernel(trans_a == CblasTrans, trans_b == CblasTrans, m, n, k) &&
        small_sgemm(trans_a, trans_b, m, n, k, a, lda, b, ldb, c, ldc, accumulate))
      return;
#ifdef AG_HAVE_ONEDNN
    if (onednn_makes(trans_a == CblasTrans, trans_b == CblasTrans, m, n, k) &&
        get_gemm_backend() == GemmBackend::onednn) {
      onednn_sgemm(trans_a, trans_b, m, n, k, a, lda, b, ldb, beta, c, ldc);
      return;
    }
#endif
    cblas_sgemm(CblasRowMajor, trans_a, trans_b, int(m), int(n), int(k), 1.0f, a, int(lda), b,
        int(ldb), beta, c, int(ldc));
  } else {
    cblas_dgemm(CblasRowMajor, trans_a, trans_b, int(m), int(n), int(k), 1.0, a, int(lda), b,
        int(ldb), beta, c, int(ldc));
  }
}

}  // namespace ag::detail
