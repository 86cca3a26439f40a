// ag's calls into OpenBLAS: one product for the kernels, and its thread count (internal; only
// sources of the autograd library include it, since only they see OpenBLAS's include directory).
#pragma once

#include <cblas.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

namespace ag::detail {

// ag's pool splits the work (autograd/parallel.h), so OpenBLAS itself stays on one thread: a
// threaded BLAS inside a threaded loop would oversubscribe the cores.
inline void keep_blas_on_one_thread() { openblas_set_num_threads(1); }

// C (m × n, row stride ldc) = op(A) · op(B) for row-major A and B with leading dims lda and ldb,
// or C += op(A) · op(B) with accumulate: one cblas_sgemm / cblas_dgemm. k = 0 is an empty sum,
// C = 0 or C unchanged (BLAS would leave C untouched in both cases). Sizes must fit BLAS's int
// (the callers check).
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
  if constexpr (std::is_same_v<T, float>)
    cblas_sgemm(CblasRowMajor, trans_a, trans_b, int(m), int(n), int(k), 1.0f, a, int(lda), b,
        int(ldb), beta, c, int(ldc));
  else
    cblas_dgemm(CblasRowMajor, trans_a, trans_b, int(m), int(n), int(k), 1.0, a, int(lda), b,
        int(ldb), beta, c, int(ldc));
}

}  // namespace ag::detail
