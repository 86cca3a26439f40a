// The small float32 products of attention's heads — d2l's 10 × 10 × 8 up to the language model's
// 64 × 64 × 32 — made by ag itself on AVX-512 CPUs, and on AVX2 ones with FMA, instead of by
// OpenBLAS or oneDNN (declared in detail/blas.h; every product with m, n, k ≤ 64 but Aᵀ·Bᵀ).
//
// d2l's tiny configuration makes about 9,000 such products a training step: each head's
// S = Q·Kᵀ and O = P̃·V, and four more in the backward. Their arithmetic is ~800 multiply-adds, so
// what a call costs is its fixed part, and OpenBLAS 0.3.21 pays more of it for TN (which leaves
// its small-matrix kernels for its general path, packing both operands) and NT. At 64 × 64 × 32
// the libraries pack Bᵀ for NT and lose a quarter of the machine's speed. A call, in a hot loop
// (the best of four runs on the benchmark machine's Zen 4; the operands read in place, their rows
// 256 floats apart):
//
//   product          OpenBLAS   oneDNN   this kernel
//   NN 10×8×10        52 ns     285 ns      42 ns
//   NT 10×10×8       139 ns     330 ns      53 ns
//   TN 10×8×10       105 ns     285 ns      41 ns
//   NN 32×32×32      0.66 µs    0.85 µs     0.66 µs
//   NT 32×32×32      1.22 µs    1.30 µs     0.77 µs
//   TN 32×32×32      0.64 µs    0.86 µs     0.66 µs
//   NN 64×32×64      2.46 µs    2.60 µs     2.46 µs
//   NT 64×64×32      3.33 µs    4.18 µs     2.63 µs
//   TN 64×32×64      2.38 µs    2.60 µs     2.45 µs
//
// In a training step the heads' operands come from L3 or memory, and attention prefetches them
// (ops_attention.cpp); there, with medium's heads, this kernel made attention 7–12 % faster than
// oneDNN's (docs/benchmarks.md).
//
// The scheme: a row of C is V = ⌈n / 16⌉ 16-lane registers (the last one masked), and each
// element accumulates, for p = 0, 1, …, k − 1 in order,
//
//   C[i, j] = fma(op(A)[i, p], op(B)[p, j], C[i, j])        starting from C[i, j] = 0
//
// R rows at a time (R·V ≤ 24 sums in registers, so that many independent fma chains hide each
// other's latency), op(A)[i, p] broadcast from memory and op(B)'s row p loaded as V registers. NN
// and TN read B's rows in place; NT reads Bᵀ's rows from a copy transposed 16 × 16 at a time in
// registers.
//
// The bits: one fma per p, in order, from zero, is exactly what OpenBLAS 0.3.21's AVX-512 kernels
// compute up to 16 × 16 with k < 32 (from k = 32 on they split the sum), so d2l's heads round
// exactly as OpenBLAS's did — the files written before this kernel existed still resume bit for
// bit (tests/io/test_v1_files.cpp). Larger heads have the kernel's own bits, which differ from
// OpenBLAS's and oneDNN's in float32 rounding only, and are the same on every run and thread
// count. tests/autograd/test_small_gemm.cpp holds the kernel to the one-fma-per-p loop at every
// size, and to OpenBLAS's results where they must agree.
//
// The AVX2 copy (a CPU without AVX-512, such as AMD's Zen 3) runs the same scheme on 8-lane
// registers, with the same bits as the AVX-512 copy. OpenBLAS's AVX2 kernels round differently
// (test_small_gemm finds them a bit off in some products), so on such a CPU this kernel moved the
// last bits of attention's products, to those an AVX-512 CPU has. There d2l's tiny heads,
// (64, 4, 10, 8) in one call of ag::attention, forward + backward: 0.70–0.81 ms with OpenBLAS,
// 0.47–0.51 with the kernel (Zen 3, 1 thread, two alternations of AG_SMALL_GEMM=off and on).
#include "autograd/detail/blas.h"

#include <algorithm>
#include <cstdlib>
#include <string_view>

#include "autograd/error.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define AG_SMALL_GEMM_X86 1
#include <immintrin.h>
#endif

namespace ag::detail {

#ifdef AG_SMALL_GEMM_X86

namespace {

// GCC 12's avx512fintrin.h warns about its own _mm512_undefined values (-Wmaybe-uninitialized).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

// Rows i .. i + R − 1 of C, each V registers of 16 columns (the last one's lanes `last_columns`),
// each element the k-step fma chain above: R·V independent chains. op(A)[i, p] is a[i·lda + p], or
// a[p·lda + i] when A is read transposed; op(B)'s row p is b_rows + p·b_row_stride.
template <int R, int V>
__attribute__((target("avx512f,fma"), always_inline)) inline void small_gemm_rows(bool a_transposed,
    const float* a, int64_t lda, int64_t i, int64_t k, const float* b_rows, int64_t b_row_stride,
    __mmask16 last_columns, float* c, int64_t ldc, bool accumulate) {
  __m512 sum[R][V];  // C[i + r, 16v .. 16v + 15] in sum[r][v]
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) sum[r][v] = _mm512_setzero_ps();
  for (int64_t p = 0; p < k; ++p) {
    const float* b_row = b_rows + p * b_row_stride;  // op(B)[p, :]
    __m512 b_part[V];
#pragma GCC unroll 4
    for (int v = 0; v + 1 < V; ++v) b_part[v] = _mm512_loadu_ps(b_row + 16 * v);
    b_part[V - 1] = _mm512_maskz_loadu_ps(last_columns, b_row + 16 * (V - 1));
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const float a_ip = a_transposed ? a[p * lda + i + r] : a[(i + r) * lda + p];  // op(A)[i+r, p]
      const __m512 a_broadcast = _mm512_set1_ps(a_ip);
#pragma GCC unroll 4
      for (int v = 0; v < V; ++v) sum[r][v] = _mm512_fmadd_ps(a_broadcast, b_part[v], sum[r][v]);
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
    float* c_row = c + (i + r) * ldc;
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) {
      const __mmask16 lanes = v + 1 < V ? __mmask16(0xFFFF) : last_columns;
      // C += op(A)·op(B) adds the finished sum to C, as BLAS does with beta = 1
      const __m512 value =
          accumulate ? _mm512_add_ps(_mm512_maskz_loadu_ps(lanes, c_row + 16 * v), sum[r][v])
                     : sum[r][v];
      _mm512_mask_storeu_ps(c_row + 16 * v, lanes, value);
    }
  }
}

// All m rows of C for n ≤ 16·V columns: blocks of R rows (R·V ≤ 24 sums, which with V loads of B
// and a broadcast fit AVX-512's 32 registers), then 4, 2 and 1 rows for the rest.
template <int V>
__attribute__((target("avx512f,fma"))) void small_gemm_columns(bool a_transposed, int64_t m,
    int64_t n, int64_t k, const float* a, int64_t lda, const float* b_rows, int64_t b_row_stride,
    float* c, int64_t ldc, bool accumulate) {
  constexpr int R = V == 1 ? 8 : V == 2 ? 12 : V == 3 ? 8 : 6;
  const int64_t last_width = n - 16 * (V - 1);  // 1 .. 16 columns in the last register
  const __mmask16 last_columns = static_cast<__mmask16>((1u << last_width) - 1);
  int64_t i = 0;
  for (; i + R <= m; i += R)
    small_gemm_rows<R, V>(
        a_transposed, a, lda, i, k, b_rows, b_row_stride, last_columns, c, ldc, accumulate);
  for (; i + 4 <= m; i += 4)
    small_gemm_rows<4, V>(
        a_transposed, a, lda, i, k, b_rows, b_row_stride, last_columns, c, ldc, accumulate);
  if (i + 2 <= m) {
    small_gemm_rows<2, V>(
        a_transposed, a, lda, i, k, b_rows, b_row_stride, last_columns, c, ldc, accumulate);
    i += 2;
  }
  if (i < m)
    small_gemm_rows<1, V>(
        a_transposed, a, lda, i, k, b_rows, b_row_stride, last_columns, c, ldc, accumulate);
}

// Bᵀ for the NT case: B is (n, k) with row stride ldb; out is (k, out_stride) with
// out[p, j] = B[j, p], made 16 × 16 at a time in registers (columns n .. out_stride − 1 of out are
// zero within the last block of 16, and never read).
__attribute__((target("avx512f"))) void transpose_into(
    const float* b, int64_t ldb, int64_t n, int64_t k, float* out, int64_t out_stride) {
  for (int64_t j0 = 0; j0 < n; j0 += 16)
    for (int64_t p0 = 0; p0 < k; p0 += 16) {
      const int64_t rows = std::min<int64_t>(16, n - j0), cols = std::min<int64_t>(16, k - p0);
      const __mmask16 col_lanes = static_cast<__mmask16>((1u << cols) - 1);
      __m512 r[16];  // r[q] = B[j0 + q, p0 .. p0 + 15]
#pragma GCC unroll 16
      for (int q = 0; q < 16; ++q)
        r[q] = q < rows ? _mm512_maskz_loadu_ps(col_lanes, b + (j0 + q) * ldb + p0)
                        : _mm512_setzero_ps();
      // Within each 128-bit lane L: t pairs rows (2g, 2g + 1); u[4g + c] then holds rows
      // 4g .. 4g + 3 of column 4L + c; two rounds of 128-bit lane shuffles gather each column.
      __m512 t[16], u[16];
#pragma GCC unroll 8
      for (int g = 0; g < 8; ++g) {
        t[2 * g] = _mm512_unpacklo_ps(r[2 * g], r[2 * g + 1]);
        t[2 * g + 1] = _mm512_unpackhi_ps(r[2 * g], r[2 * g + 1]);
      }
#pragma GCC unroll 4
      for (int g = 0; g < 4; ++g) {
        const __m512d lo_a = _mm512_castps_pd(t[4 * g]), hi_a = _mm512_castps_pd(t[4 * g + 1]);
        const __m512d lo_b = _mm512_castps_pd(t[4 * g + 2]), hi_b = _mm512_castps_pd(t[4 * g + 3]);
        u[4 * g + 0] = _mm512_castpd_ps(_mm512_unpacklo_pd(lo_a, lo_b));
        u[4 * g + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(lo_a, lo_b));
        u[4 * g + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(hi_a, hi_b));
        u[4 * g + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(hi_a, hi_b));
      }
#pragma GCC unroll 4
      for (int c = 0; c < 4; ++c) {
        // lanes 0, 2 (0x88) or 1, 3 (0xdd) of rows 0–3 and 4–7, then of rows 8–11 and 12–15
        const __m512 even_low = _mm512_shuffle_f32x4(u[c], u[4 + c], 0x88);
        const __m512 odd_low = _mm512_shuffle_f32x4(u[c], u[4 + c], 0xdd);
        const __m512 even_high = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0x88);
        const __m512 odd_high = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0xdd);
        const __m512 column[4] = {
            _mm512_shuffle_f32x4(even_low, even_high, 0x88),  // column c
            _mm512_shuffle_f32x4(odd_low, odd_high, 0x88),    // column 4 + c
            _mm512_shuffle_f32x4(even_low, even_high, 0xdd),  // column 8 + c
            _mm512_shuffle_f32x4(odd_low, odd_high, 0xdd),    // column 12 + c
        };
#pragma GCC unroll 4
        for (int L = 0; L < 4; ++L)
          if (4 * L + c < cols)
            _mm512_storeu_ps(out + (p0 + 4 * L + c) * out_stride + j0, column[L]);
      }
    }
}

// C = op(A)·op(B) for op(B)'s rows at b_rows + p·b_row_stride: the loops for n's register count.
__attribute__((target("avx512f,fma"))) void small_gemm_any_columns(bool a_transposed, int64_t m,
    int64_t n, int64_t k, const float* a, int64_t lda, const float* b_rows, int64_t b_row_stride,
    float* c, int64_t ldc, bool accumulate) {
  switch ((n + 15) / 16) {  // registers a row of C takes, 1 .. 4
    case 1:
      small_gemm_columns<1>(
          a_transposed, m, n, k, a, lda, b_rows, b_row_stride, c, ldc, accumulate);
      break;
    case 2:
      small_gemm_columns<2>(
          a_transposed, m, n, k, a, lda, b_rows, b_row_stride, c, ldc, accumulate);
      break;
    case 3:
      small_gemm_columns<3>(
          a_transposed, m, n, k, a, lda, b_rows, b_row_stride, c, ldc, accumulate);
      break;
    default:
      small_gemm_columns<4>(
          a_transposed, m, n, k, a, lda, b_rows, b_row_stride, c, ldc, accumulate);
      break;
  }
}

// The NT case reads Bᵀ's rows from a transposed copy of B (n, k): (k, 16·V), V = ⌈n / 16⌉. Its own
// function, so that only NT products pay for the 16 KB buffer's stack frame.
__attribute__((target("avx512f,fma"), noinline)) void small_gemm_b_transposed(bool a_transposed,
    int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb,
    float* c, int64_t ldc, bool accumulate) {
  alignas(64) float b_transposed_copy[kSmallGemmMaxK * kSmallGemmMaxN];
  const int64_t copy_stride = 16 * ((n + 15) / 16);
  transpose_into(b, ldb, n, k, b_transposed_copy, copy_stride);
  small_gemm_any_columns(
      a_transposed, m, n, k, a, lda, b_transposed_copy, copy_stride, c, ldc, accumulate);
}

// ---- AVX2 + FMA (no AVX-512): the same scheme on 8-lane registers -------------------------------
//
// A row of C is V = ⌈n / 8⌉ registers (the last one's lanes masked by an integer vector: AVX2 has
// no mask registers), R rows at a time with R·V ≤ 12 sums, so that the sums, a broadcast and the
// loads of B fit AVX2's 16 registers. The same fma per p, in order, from zero: the same bits as the
// AVX-512 copy, on every size.

// Lanes 0 .. width − 1 of 8 (as maskload and maskstore take them: the sign bit set).
__attribute__((target("avx2"), always_inline)) inline __m256i first_lanes8(int64_t width) {
  return _mm256_cmpgt_epi32(
      _mm256_set1_epi32(static_cast<int>(width)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// Rows i .. i + R − 1 of C, as small_gemm_rows, on V registers of 8 columns.
template <int R, int V>
__attribute__((target("avx2,fma"), always_inline)) inline void small_gemm_rows_avx2(
    bool a_transposed, const float* a, int64_t lda, int64_t i, int64_t k, const float* b_rows,
    int64_t b_row_stride, __m256i last_columns, bool last_full, float* c, int64_t ldc,
    bool accumulate) {
  __m256 sum[R][V];  // C[i + r, 8v .. 8v + 7] in sum[r][v]
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int v = 0; v < V; ++v) sum[r][v] = _mm256_setzero_ps();
  for (int64_t p = 0; p < k; ++p) {
    const float* b_row = b_rows + p * b_row_stride;  // op(B)[p, :]
    __m256 b_part[V];
#pragma GCC unroll 8
    for (int v = 0; v + 1 < V; ++v) b_part[v] = _mm256_loadu_ps(b_row + 8 * v);
    b_part[V - 1] = _mm256_maskload_ps(b_row + 8 * (V - 1), last_columns);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const float a_ip = a_transposed ? a[p * lda + i + r] : a[(i + r) * lda + p];  // op(A)[i+r, p]
      const __m256 a_broadcast = _mm256_set1_ps(a_ip);
#pragma GCC unroll 8
      for (int v = 0; v < V; ++v) sum[r][v] = _mm256_fmadd_ps(a_broadcast, b_part[v], sum[r][v]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    float* c_row = c + (i + r) * ldc;
#pragma GCC unroll 8
    for (int v = 0; v + 1 < V; ++v)  // C += op(A)·op(B) adds the finished sum, as BLAS's beta = 1
      _mm256_storeu_ps(c_row + 8 * v,
          accumulate ? _mm256_add_ps(_mm256_loadu_ps(c_row + 8 * v), sum[r][v]) : sum[r][v]);
    float* last = c_row + 8 * (V - 1);
    if (last_full) {  // a plain store: AMD's vmaskmovps store is microcoded, several times slower
      _mm256_storeu_ps(
          last, accumulate ? _mm256_add_ps(_mm256_loadu_ps(last), sum[r][V - 1]) : sum[r][V - 1]);
    } else {
      _mm256_maskstore_ps(last, last_columns,
          accumulate ? _mm256_add_ps(_mm256_maskload_ps(last, last_columns), sum[r][V - 1])
                     : sum[r][V - 1]);
    }
  }
}

// All m rows of C for n ≤ 8·V columns: blocks of R rows (R·V ≤ 12 sums), then fewer.
template <int V>
__attribute__((target("avx2,fma"))) void small_gemm_columns_avx2(bool a_transposed, int64_t m,
    int64_t n, int64_t k, const float* a, int64_t lda, const float* b_rows, int64_t b_row_stride,
    float* c, int64_t ldc, bool accumulate) {
  constexpr int R = V == 1 ? 8 : 12 / V > 0 ? 12 / V : 1;
  const __m256i last_columns = first_lanes8(n - 8 * (V - 1));  // 1 .. 8 columns
  const bool last_full = n == 8 * V;
  int64_t i = 0;
  for (; i + R <= m; i += R)
    small_gemm_rows_avx2<R, V>(a_transposed, a, lda, i, k, b_rows, b_row_stride, last_columns,
        last_full, c, ldc, accumulate);
  if constexpr (R > 4)
    for (; i + 4 <= m; i += 4)
      small_gemm_rows_avx2<4, V>(a_transposed, a, lda, i, k, b_rows, b_row_stride, last_columns,
          last_full, c, ldc, accumulate);
  if constexpr (R > 2)
    for (; i + 2 <= m; i += 2)
      small_gemm_rows_avx2<2, V>(a_transposed, a, lda, i, k, b_rows, b_row_stride, last_columns,
          last_full, c, ldc, accumulate);
  for (; i < m; ++i)
    small_gemm_rows_avx2<1, V>(a_transposed, a, lda, i, k, b_rows, b_row_stride, last_columns,
        last_full, c, ldc, accumulate);
}

// Bᵀ for the NT case, as transpose_into, 8 × 8 at a time: out[p, j] = B[j, p] (columns n ..
// out_stride − 1 of out are zero within the last block of 8, and never read).
__attribute__((target("avx2"))) void transpose_into_avx2(
    const float* b, int64_t ldb, int64_t n, int64_t k, float* out, int64_t out_stride) {
  for (int64_t j0 = 0; j0 < n; j0 += 8)
    for (int64_t p0 = 0; p0 < k; p0 += 8) {
      const int64_t rows = std::min<int64_t>(8, n - j0), cols = std::min<int64_t>(8, k - p0);
      const __m256i col_lanes = first_lanes8(cols);
      __m256 r[8];  // r[q] = B[j0 + q, p0 .. p0 + 7]
#pragma GCC unroll 8
      for (int q = 0; q < 8; ++q)
        r[q] =
            q < rows ? _mm256_maskload_ps(b + (j0 + q) * ldb + p0, col_lanes) : _mm256_setzero_ps();
      // t pairs rows (2g, 2g + 1); s[4h + c] holds column c (low half) and 4 + c (high half) of
      // rows 4h .. 4h + 3; the half swaps join rows 0–3 and 4–7 of each column.
      __m256 t[8], s[8];
#pragma GCC unroll 4
      for (int g = 0; g < 4; ++g) {
        t[2 * g] = _mm256_unpacklo_ps(r[2 * g], r[2 * g + 1]);
        t[2 * g + 1] = _mm256_unpackhi_ps(r[2 * g], r[2 * g + 1]);
      }
#pragma GCC unroll 2
      for (int h = 0; h < 2; ++h) {
        s[4 * h + 0] = _mm256_shuffle_ps(t[4 * h], t[4 * h + 2], 0x44);
        s[4 * h + 1] = _mm256_shuffle_ps(t[4 * h], t[4 * h + 2], 0xEE);
        s[4 * h + 2] = _mm256_shuffle_ps(t[4 * h + 1], t[4 * h + 3], 0x44);
        s[4 * h + 3] = _mm256_shuffle_ps(t[4 * h + 1], t[4 * h + 3], 0xEE);
      }
#pragma GCC unroll 4
      for (int col = 0; col < 4; ++col) {
        if (col < cols)
          _mm256_storeu_ps(out + (p0 + col) * out_stride + j0,
              _mm256_permute2f128_ps(s[col], s[4 + col], 0x20));  // column col
        if (4 + col < cols)
          _mm256_storeu_ps(out + (p0 + 4 + col) * out_stride + j0,
              _mm256_permute2f128_ps(s[col], s[4 + col], 0x31));  // column 4 + col
      }
    }
}

// C = op(A)·op(B) for op(B)'s rows at b_rows + p·b_row_stride: the loops for n's register count.
__attribute__((target("avx2,fma"))) void small_gemm_any_columns_avx2(bool a_transposed, int64_t m,
    int64_t n, int64_t k, const float* a, int64_t lda, const float* b_rows, int64_t b_row_stride,
    float* c, int64_t ldc, bool accumulate) {
  const auto run = [&]<int V>() {
    small_gemm_columns_avx2<V>(
        a_transposed, m, n, k, a, lda, b_rows, b_row_stride, c, ldc, accumulate);
  };
  switch ((n + 7) / 8) {  // registers a row of C takes, 1 .. 8
    case 1:
      run.template operator()<1>();
      break;
    case 2:
      run.template operator()<2>();
      break;
    case 3:
      run.template operator()<3>();
      break;
    case 4:
      run.template operator()<4>();
      break;
    case 5:
      run.template operator()<5>();
      break;
    case 6:
      run.template operator()<6>();
      break;
    case 7:
      run.template operator()<7>();
      break;
    default:
      run.template operator()<8>();
      break;
  }
}

// The NT case from a transposed copy of B (n, k): (k, 8·V), V = ⌈n / 8⌉.
__attribute__((target("avx2,fma"), noinline)) void small_gemm_b_transposed_avx2(bool a_transposed,
    int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb,
    float* c, int64_t ldc, bool accumulate) {
  alignas(32) float b_transposed_copy[kSmallGemmMaxK * kSmallGemmMaxN];
  const int64_t copy_stride = 8 * ((n + 7) / 8);
  transpose_into_avx2(b, ldb, n, k, b_transposed_copy, copy_stride);
  small_gemm_any_columns_avx2(
      a_transposed, m, n, k, a, lda, b_transposed_copy, copy_stride, c, ldc, accumulate);
}

#pragma GCC diagnostic pop

}  // namespace

#endif  // AG_SMALL_GEMM_X86

#ifdef AG_SMALL_GEMM_X86
namespace {

// AG_SMALL_GEMM=off in the environment (read at the first product) sends these products to the
// backend's library instead: how bench/compare_gemm_backends.sh sees them (its trace intercepts
// OpenBLAS's cblas_sgemm), and how the kernel is A/B'd inside a training step.
bool small_gemm_enabled_by_environment() {
  const char* value = std::getenv("AG_SMALL_GEMM");
  if (value == nullptr) return true;
  const std::string_view setting(value);
  if (setting.empty() || setting == "on") return true;
  if (setting == "off") return false;
  fail<ValueError>("AG_SMALL_GEMM=", setting, ": expected on or off");
}

}  // namespace
#endif

namespace {
// The copy of the kernel this CPU runs (checked at the first product): AVX-512's, AVX2's, or none
// (AG_SMALL_GEMM=off, or neither instruction set).
enum class SmallGemmCopy { none, avx2, avx512 };
#ifdef AG_SMALL_GEMM_X86
SmallGemmCopy small_gemm_copy() {
  static const SmallGemmCopy copy =
      !small_gemm_enabled_by_environment()                                 ? SmallGemmCopy::none
      : __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("fma") ? SmallGemmCopy::avx512
      : __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")    ? SmallGemmCopy::avx2
                                                                           : SmallGemmCopy::none;
  return copy;
}
#endif
}  // namespace

bool small_sgemm_makes(
    CBLAS_TRANSPOSE trans_a, CBLAS_TRANSPOSE trans_b, int64_t m, int64_t n, int64_t k) {
#ifdef AG_SMALL_GEMM_X86
  return small_gemm_copy() != SmallGemmCopy::none && fits_small_sgemm(m, n, k) &&
         !(trans_a == CblasTrans && trans_b == CblasTrans);
#else
  (void)trans_a, (void)trans_b, (void)m, (void)n, (void)k;
  return false;
#endif
}

bool small_sgemm(CBLAS_TRANSPOSE trans_a, CBLAS_TRANSPOSE trans_b, int64_t m, int64_t n, int64_t k,
    const float* a, int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc,
    bool accumulate) {
#ifdef AG_SMALL_GEMM_X86
  if (!small_sgemm_makes(trans_a, trans_b, m, n, k)) return false;
  const bool a_transposed = trans_a == CblasTrans, b_transposed = trans_b == CblasTrans;
  if (small_gemm_copy() == SmallGemmCopy::avx512) {
    if (b_transposed)
      small_gemm_b_transposed(a_transposed, m, n, k, a, lda, b, ldb, c, ldc, accumulate);
    else
      small_gemm_any_columns(a_transposed, m, n, k, a, lda, b, ldb, c, ldc, accumulate);
  } else {
    if (b_transposed)
      small_gemm_b_transposed_avx2(a_transposed, m, n, k, a, lda, b, ldb, c, ldc, accumulate);
    else
      small_gemm_any_columns_avx2(a_transposed, m, n, k, a, lda, b, ldb, c, ldc, accumulate);
  }
  return true;
#else
  (void)trans_a, (void)trans_b, (void)m, (void)n, (void)k, (void)a, (void)lda, (void)b, (void)ldb;
  (void)c, (void)ldc, (void)accumulate;
  return false;
#endif
}

}  // namespace ag::detail
