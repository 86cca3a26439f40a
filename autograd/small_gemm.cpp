// The small float32 products of attention's heads at d2l's sizes (10 × 10 × 8 and the like), made
// by ag itself on AVX-512 CPUs instead of by OpenBLAS (declared in detail/blas.h).
//
// d2l's tiny configuration makes about 9,000 such products a training step: each head's
// S = Q·Kᵀ and O = P̃·V, and four more in the backward. Their arithmetic is ~800 multiply-adds, so
// what a call costs is its fixed part: OpenBLAS 0.3.21 spends 50 ns on the NN case but 130 ns on
// TN (which leaves its small-matrix kernels for its general path, packing both operands) and
// 164 ns on NT. Here (ns a call, on the benchmark machine's Zen 4):
//
//   10×10×8 product     OpenBLAS   this kernel
//   A·B   (NN)            50          45
//   A·Bᵀ  (NT)           164          81
//   Aᵀ·B  (TN)           131          38
//
// The scheme: op(B)'s columns fit one 16-lane register (n ≤ 16), and each row of C is one
// register that accumulates, for p = 0, 1, …, k − 1 in order,
//
//   C[i, :] = fma(op(A)[i, p], op(B)[p, :], C[i, :])        starting from C[i, :] = 0
//
// eight rows at a time, so that eight independent fma chains hide each other's latency. NT reads
// Bᵀ's rows from a small transposed copy of B; NN reads B's rows in place.
//
// The bits: one fma per p, in order, from zero, is exactly what OpenBLAS 0.3.21's AVX-512 kernels
// compute for k < 32 (from k = 32 on they split the sum), so these products round exactly as
// OpenBLAS's did — the files written before this kernel existed still resume bit for bit
// (tests/io/test_v1_files.cpp). tests/autograd/test_small_gemm.cpp holds the kernel to the
// one-fma-per-p loop and to OpenBLAS's results.
#include "autograd/detail/blas.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define AG_SMALL_GEMM_AVX512 1
#include <immintrin.h>
#endif

namespace ag::detail {

#ifdef AG_SMALL_GEMM_AVX512

namespace {

// GCC 12's avx512fintrin.h warns about its own _mm512_undefined values (-Wmaybe-uninitialized).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

// Rows i .. i + R − 1 of C (the lanes of `columns`), each the k-step fma chain above.
// op(A)[i, p] is a[i·lda + p], or a[p·lda + i] when A is read transposed; op(B)'s row p is
// b_rows + p·b_row_stride.
template <int R>
__attribute__((target("avx512f,fma"), always_inline)) inline void small_gemm_rows(bool a_transposed,
    const float* a, int64_t lda, int64_t i, int64_t k, const float* b_rows, int64_t b_row_stride,
    __mmask16 columns, float* c, int64_t ldc, bool accumulate) {
  __m512 row[R];  // C[i + r, :], one register each
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) row[r] = _mm512_setzero_ps();
  for (int64_t p = 0; p < k; ++p) {
    const __m512 b_row = _mm512_maskz_loadu_ps(columns, b_rows + p * b_row_stride);  // op(B)[p, :]
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const float a_ip = a_transposed ? a[p * lda + i + r] : a[(i + r) * lda + p];  // op(A)[i+r, p]
      row[r] = _mm512_fmadd_ps(_mm512_set1_ps(a_ip), b_row, row[r]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    float* c_row = c + (i + r) * ldc;
    // C += op(A)·op(B) adds the finished sum to C, as BLAS does with beta = 1
    const __m512 value =
        accumulate ? _mm512_add_ps(_mm512_maskz_loadu_ps(columns, c_row), row[r]) : row[r];
    _mm512_mask_storeu_ps(c_row, columns, value);
  }
}

__attribute__((target("avx512f,fma"))) void small_sgemm_avx512(bool a_transposed, bool b_transposed,
    int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb,
    float* c, int64_t ldc, bool accumulate) {
  const __mmask16 columns = static_cast<__mmask16>((1u << n) - 1);  // the n lanes of a C row
  const float* b_rows = b;  // op(B)'s row p at b_rows + p·b_row_stride
  int64_t b_row_stride = ldb;
  alignas(64) float b_transposed_copy[kSmallGemmMaxK * 16];  // (k, 16): Bᵀ, when B is (n, k)
  if (b_transposed) {
    for (int64_t j = 0; j < n; ++j)
      for (int64_t p = 0; p < k; ++p) b_transposed_copy[p * 16 + j] = b[j * ldb + p];
    b_rows = b_transposed_copy;
    b_row_stride = 16;
  }
  int64_t i = 0;
  for (; i + 8 <= m; i += 8)
    small_gemm_rows<8>(
        a_transposed, a, lda, i, k, b_rows, b_row_stride, columns, c, ldc, accumulate);
  if (m - i >= 4) {
    small_gemm_rows<4>(
        a_transposed, a, lda, i, k, b_rows, b_row_stride, columns, c, ldc, accumulate);
    i += 4;
  }
  switch (m - i) {
    case 3:
      small_gemm_rows<3>(
          a_transposed, a, lda, i, k, b_rows, b_row_stride, columns, c, ldc, accumulate);
      break;
    case 2:
      small_gemm_rows<2>(
          a_transposed, a, lda, i, k, b_rows, b_row_stride, columns, c, ldc, accumulate);
      break;
    case 1:
      small_gemm_rows<1>(
          a_transposed, a, lda, i, k, b_rows, b_row_stride, columns, c, ldc, accumulate);
      break;
    default:
      break;
  }
}

#pragma GCC diagnostic pop

}  // namespace

#endif  // AG_SMALL_GEMM_AVX512

bool small_sgemm(CBLAS_TRANSPOSE trans_a, CBLAS_TRANSPOSE trans_b, int64_t m, int64_t n, int64_t k,
    const float* a, int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc,
    bool accumulate) {
#ifdef AG_SMALL_GEMM_AVX512
  static const bool has_avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("fma");
  const bool a_transposed = trans_a == CblasTrans, b_transposed = trans_b == CblasTrans;
  if (!has_avx512 || !fits_small_sgemm(m, n, k) || (a_transposed && b_transposed)) return false;
  small_sgemm_avx512(a_transposed, b_transposed, m, n, k, a, lda, b, ldb, c, ldc, accumulate);
  return true;
#else
  (void)trans_a, (void)trans_b, (void)m, (void)n, (void)k, (void)a, (void)lda, (void)b, (void)ldb;
  (void)c, (void)ldc, (void)accumulate;
  return false;
#endif
}

}  // namespace ag::detail
