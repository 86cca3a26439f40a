// vector_math.h's functions on AVX-512: 16 floats or 8 doubles at a time. Compiled with
// -mavx512f -mfma (autograd/CMakeLists.txt); vector_math.cpp calls them only on a CPU that has
// AVX-512F.
#if defined(__x86_64__)
#include <immintrin.h>
#include <sleef.h>

#include <limits>

#include "autograd/detail/vector_math_kernels.h"

namespace ag::detail::vec {

// GCC 12's unmasked AVX-512 intrinsics (sqrt, scalef, min, max, shifts, conversions) pass
// _mm512_undefined_ps() to their builtins as the unused source, which it then reports as
// uninitialized once inlined (GCC bug 105593). ag calls the masked forms with every lane selected:
// the same instructions, with a source of their own.
inline __m512 sqrt16(__m512 v) { return _mm512_mask_sqrt_ps(v, 0xFFFF, v); }
inline __m512d sqrt8(__m512d v) { return _mm512_mask_sqrt_pd(v, 0xFF, v); }

AG_SLEEF_ISA(Avx512FloatSleef, float, __m512, 16, f16, avx512f, sqrt16);
AG_SLEEF_ISA(Avx512DoubleSleef, double, __m512d, 8, d8, avx512f, sqrt8);

// The last partial vector of an array (Kernels::load_first, store_first): a masked load reads 0
// into the lanes past `count`, and neither it nor the masked store touches their memory.
struct Avx512Tails {
  static __m512 load_first(const float* p, int64_t count) {
    return _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << count) - 1), p);
  }
  static void store_first(float* p, __m512 v, int64_t count) {
    _mm512_mask_storeu_ps(p, static_cast<__mmask16>((1u << count) - 1), v);
  }
  static __m512d load_first(const double* p, int64_t count) {
    return _mm512_maskz_loadu_pd(static_cast<__mmask8>((1u << count) - 1), p);
  }
  static void store_first(double* p, __m512d v, int64_t count) {
    _mm512_mask_storeu_pd(p, static_cast<__mmask8>((1u << count) - 1), v);
  }
};

// SLEEF's functions, but float32's exp and log inlined, ag's own (SLEEF's are a call into libsleef
// per 16 floats, and its 1-ulp log runs in double-float arithmetic); masked tails; and x·x − h in
// one rounding, the exact error of h = x·x (Kernels::square_error). The exp and the log take the
// AVX2 copy's steps in the same order (vector_math_avx2.cpp), and the two copies give the same
// bits for every float (tests/autograd/test_vector_math.cpp holds them to it).
struct Avx512Float : Avx512FloatSleef, Avx512Tails {
  static __m512 square_error(__m512 x, __m512 h) { return _mm512_fmsub_ps(x, x, h); }

  // e^x = 2^n · e^r (the reduction and polynomial of vector_math_kernels.h's kExpf constants):
  // x clamped to [kExpfLowest, kExpfHighest] (a NaN passes: max and min return their second
  // operand, x, when it is a NaN); n = round(x / ln 2) as x · (1/ln 2) + 1.5 · 2²³ in one fused
  // rounding, less 1.5 · 2²³; and 2^n · e^r in one rounding by vscalefps: exact where it is a
  // normal float, else rounded into the subnormals, to 0 or to inf, as the AVX2 copy's two
  // products round.
  static __m512 exp(__m512 x) {
    x = _mm512_mask_max_ps(x, 0xFFFF, _mm512_set1_ps(kExpfLowest),
        _mm512_mask_min_ps(x, 0xFFFF, _mm512_set1_ps(kExpfHighest), x));
    const __m512 n =
        _mm512_fmadd_ps(x, _mm512_set1_ps(kExpfLog2e), _mm512_set1_ps(kExpfRoundingShift)) -
        kExpfRoundingShift;
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(kExpfLn2Hi), x);  // x − n·ln2_hi
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(kExpfLn2Lo), r);         // − n·ln2_lo
    __m512 p = _mm512_set1_ps(kExpfPoly[0]);
    for (int i = 1; i < 6; ++i) p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kExpfPoly[i]));
    const __m512 e_r = _mm512_fmadd_ps(p, r * r, r) + 1.0f;  // e^r
    return _mm512_mask_scalef_ps(e_r, 0xFFFF, e_r, n);       // 2^n · e^r
  }

  // log x = e · ln 2 + log(1 + f), x = 2^e · (1 + f), 1 + f in [√½, √2) (vector_math_kernels.h's
  // kLogf constants): where every lane is a positive normal float, that alone; else log_any_input's
  // subnormals (scaled by 2²³ first) and special values. The two give such a lane the same bits.
  static __m512 log(__m512 x) {
    if (every_lane_positive_normal(x)) return log_of_normal(x, _mm512_setzero_si512());
    return log_any_input(x);
  }

 private:
  // Whether every lane's bits are in [0x00800000, 0x7f7fffff] (the positive normal floats): one
  // unsigned comparison once the window is moved to start at 0.
  static bool every_lane_positive_normal(__m512 x) {
    const __m512i moved = _mm512_sub_epi32(_mm512_castps_si512(x), _mm512_set1_epi32(0x00800000));
    return _mm512_cmple_epu32_mask(moved, _mm512_set1_epi32(0x7f7fffff - 0x00800000)) == 0xFFFF;
  }

  // log x of a positive normal x, plus extra_e · ln 2: the AVX2 copy's log_of_normal, step by step.
  static __m512 log_of_normal(__m512 x, __m512i extra_e) {
    const __m512i bits = _mm512_castps_si512(x);
    const __m512i above_sqrt_half = _mm512_sub_epi32(bits, _mm512_set1_epi32(kLogfSqrtHalfBits));
    const __m512i e_bits = _mm512_mask_srai_epi32(above_sqrt_half, 0xFFFF, above_sqrt_half, 23);
    const __m512 one_plus_f = _mm512_castsi512_ps(
        _mm512_sub_epi32(bits, _mm512_mask_slli_epi32(e_bits, 0xFFFF, e_bits, 23)));
    const __m512 e = _mm512_mask_cvtepi32_ps(x, 0xFFFF, _mm512_add_epi32(e_bits, extra_e));
    const __m512 f = one_plus_f - 1.0f;
    const __m512 f2 = f * f, f4 = f2 * f2;
    auto c = [](int power) { return _mm512_set1_ps(kLogfPoly[7 - power]); };  // of f^power
    const __m512 p = _mm512_fmadd_ps(
        _mm512_fmadd_ps(_mm512_fmadd_ps(c(7), f, c(6)), f2, _mm512_fmadd_ps(c(5), f, c(4))), f4,
        _mm512_fmadd_ps(_mm512_fmadd_ps(c(3), f, c(2)), f2, _mm512_fmadd_ps(c(1), f, c(0))));
    // f³ P(f) − f²/2 + e · ln2_lo, then + f, then + e · ln2_hi: the small terms first
    const __m512 small = _mm512_fmadd_ps(_mm512_set1_ps(-0.5f), f2, e * kExpfLn2Lo);
    const __m512 tail = _mm512_fmadd_ps(f2 * f, p, small);
    return _mm512_fmadd_ps(e, _mm512_set1_ps(kExpfLn2Hi), f + tail);
  }

  // Every x: a subnormal is scaled by 2²³ (exact) and e lowered by 23; log(±0) = −inf, log of a
  // negative number or NaN is NaN, log(+inf) = +inf (these lanes compute log 1 meanwhile).
  static __m512 log_any_input(__m512 x) {
    const __m512 zero = _mm512_setzero_ps(), smallest_normal = _mm512_set1_ps(0x1p-126f);
    const __m512 inf = _mm512_set1_ps(std::numeric_limits<float>::infinity());
    const __mmask16 subnormal = _mm512_cmp_ps_mask(x, zero, _CMP_GT_OQ) &
                                _mm512_cmp_ps_mask(x, smallest_normal, _CMP_LT_OQ);
    const __mmask16 normal =
        _mm512_cmp_ps_mask(x, smallest_normal, _CMP_GE_OQ) & _mm512_cmp_ps_mask(x, inf, _CMP_LT_OQ);
    __m512 scaled = _mm512_mask_mov_ps(x, subnormal, x * 0x1p23f);
    scaled = _mm512_mask_mov_ps(_mm512_set1_ps(1.0f), normal | subnormal, scaled);
    const __m512i extra_e = _mm512_maskz_mov_epi32(subnormal, _mm512_set1_epi32(-23));
    __m512 result = log_of_normal(scaled, extra_e);
    result = _mm512_mask_mov_ps(result, _mm512_cmp_ps_mask(x, zero, _CMP_EQ_OQ),
        _mm512_set1_ps(-std::numeric_limits<float>::infinity()));
    result = _mm512_mask_mov_ps(result, _mm512_cmp_ps_mask(x, inf, _CMP_EQ_OQ), inf);
    // x < 0 or NaN: NaN
    return _mm512_mask_mov_ps(result, _mm512_cmp_ps_mask(x, zero, _CMP_NGE_UQ),
        _mm512_set1_ps(std::numeric_limits<float>::quiet_NaN()));
  }
};
struct Avx512Double : Avx512DoubleSleef, Avx512Tails {};

const Functions<float>& avx512_functions(float) { return Kernels<Avx512Float>::functions(); }
const Functions<double>& avx512_functions(double) { return Kernels<Avx512Double>::functions(); }

}  // namespace ag::detail::vec
#endif
