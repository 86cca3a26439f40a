// vector_math.h's functions on AVX2 with FMA: 8 floats or 4 doubles at a time. Compiled with
// -mavx2 -mfma (autograd/CMakeLists.txt); vector_math.cpp calls them only on a CPU that has both.
#if defined(__x86_64__)
#include <immintrin.h>
#include <sleef.h>

#include <bit>
#include <cstdint>
#include <limits>

#include "autograd/detail/vector_math_kernels.h"

namespace ag::detail::vec {

AG_SLEEF_ISA(Avx2FloatSleef, float, __m256, 8, f8, avx2, _mm256_sqrt_ps);
AG_SLEEF_ISA(Avx2DoubleSleef, double, __m256d, 4, d4, avx2, _mm256_sqrt_pd);

// The last partial vector of an array (Kernels::load_first, store_first): vmaskmov reads 0 into
// the lanes past `count` and does not touch their memory (a lane is on where the sign bit of its
// mask is set: lane j < count). The store writes 4, 2 and 1 lanes as count's bits say: AMD's
// vmaskmov store is microcoded, several times slower than the loads it pairs with.
struct Avx2Tails {
  static __m256i float_lanes_below(int64_t count) {
    return _mm256_cmpgt_epi32(
        _mm256_set1_epi32(static_cast<int>(count)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
  static __m256i double_lanes_below(int64_t count) {
    return _mm256_cmpgt_epi64(_mm256_set1_epi64x(count), _mm256_setr_epi64x(0, 1, 2, 3));
  }
  static __m256 load_first(const float* p, int64_t count) {
    return _mm256_maskload_ps(p, float_lanes_below(count));
  }
  static __m256d load_first(const double* p, int64_t count) {
    return _mm256_maskload_pd(p, double_lanes_below(count));
  }
  static void store_first(float* p, __m256 v, int64_t count) {  // count < 8
    __m128 part = _mm256_castps256_ps128(v);                    // lanes 0–3
    if (count & 4) {
      _mm_storeu_ps(p, part);
      p += 4;
      part = _mm256_extractf128_ps(v, 1);  // lanes 4–7
    }
    if (count & 2) {
      _mm_storel_pi(reinterpret_cast<__m64*>(p), part);
      p += 2;
      part = _mm_movehl_ps(part, part);
    }
    if (count & 1) _mm_store_ss(p, part);
  }
  static void store_first(double* p, __m256d v, int64_t count) {  // count < 4
    __m128d part = _mm256_castpd256_pd128(v);                     // lanes 0–1
    if (count & 2) {
      _mm_storeu_pd(p, part);
      p += 2;
      part = _mm256_extractf128_pd(v, 1);  // lanes 2–3
    }
    if (count & 1) _mm_store_sd(p, part);
  }
};

// SLEEF's functions, but float32's exp and log inlined (ag's own: SLEEF's are a call into libsleef
// per 8 floats, and its 1-ulp log runs in double-float arithmetic); masked tails; and x·x − h in
// one rounding, the exact error of h = x·x (Kernels::square_error).
struct Avx2Float : Avx2FloatSleef, Avx2Tails {
  static __m256 square_error(__m256 x, __m256 h) { return _mm256_fmsub_ps(x, x, h); }
  static __m256 abs(__m256 x) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x); }
  static __m256 min(__m256 x, __m256 y) { return _mm256_min_ps(x, y); }  // x < y ? x : y

  // e^x = 2^n · e^r (the reduction and polynomial of vector_math_kernels.h's kExpf constants).
  // n = round(x / ln 2) as x · (1/ln 2) + 1.5 · 2²³ in one fused rounding (to nearest, ties to
  // even; the sum's ulp is 1 while |x / ln 2| < 2²²), which leaves n's two's complement in the
  // sum's low mantissa bits.
  //   Where every lane's n is in [−125, 127], 2^n · e^r (e^r in [√½, √2]) is a normal float: e^r
  //   with n added to its exponent field — the sum shifted up by 23, one integer add, exact.
  //   Else (x below about −87 or above 88.37, or NaN), exp_any_range's clamp and two-step scaling.
  // The two give such a lane the same bits: the same n and e^r, and 2^n · e^r exact in both.
  static __m256 exp(__m256 x) {
    const __m256 shifted = n_in_low_bits(x);
    if (!every_n_in_normal_range(shifted)) return exp_any_range(x);
    const __m256 e_r = exp_of_reduced(x, shifted - kRoundingShift);
    const __m256i n_in_exponent = _mm256_slli_epi32(_mm256_castps_si256(shifted), 23);
    return _mm256_castsi256_ps(_mm256_add_epi32(_mm256_castps_si256(e_r), n_in_exponent));
  }

  // log x = e · ln 2 + log(1 + f), x = 2^e · (1 + f), 1 + f in [√½, √2): within 0.89 ulp of the
  // exact result over every 7th positive float (SLEEF's 1-ulp log: 0.61), in 0.3 of its time.
  // Where every lane is a positive normal float, that alone; else log_any_input's subnormals
  // (scaled by 2²³ first) and special values. The two give such a lane the same bits.
  static __m256 log(__m256 x) {
    if (every_lane_positive_normal(x)) return log_of_normal(x, _mm256_setzero_si256());
    return log_any_input(x);
  }

 private:
  // Whether every lane's bits are in [0x00800000, 0x7f7fffff] (the positive normal floats): one
  // signed comparison once that window is moved (wrapping) to start at INT32_MIN.
  static bool every_lane_positive_normal(__m256 x) {
    const __m256i moved = _mm256_add_epi32(
        _mm256_castps_si256(x), _mm256_set1_epi32(static_cast<int32_t>(0x80000000u - 0x00800000u)));
    const __m256i in_range = _mm256_cmpgt_epi32(_mm256_set1_epi32(INT32_MIN + 0x7f000000), moved);
    return _mm256_movemask_ps(_mm256_castsi256_ps(in_range)) == 0xFF;
  }

  // log x of a positive normal x, plus extra_e · ln 2. The bits of x less those of √½ hold e in
  // their exponent field (arithmetic shift: e < 0 for x < √½); taking e · 2²³ off x's bits leaves
  // 1 + f in [√½, √2), and f = (1 + f) − 1 is exact. ln 2 in two parts (the first of 15 bits:
  // e · ln2_hi is exact), and the polynomial by Estrin's scheme, whose shorter chains run 14 %
  // faster than Horner's here.
  static __m256 log_of_normal(__m256 x, __m256i extra_e) {
    const __m256i bits = _mm256_castps_si256(x);
    const __m256i e_bits =
        _mm256_srai_epi32(_mm256_sub_epi32(bits, _mm256_set1_epi32(kLogfSqrtHalfBits)), 23);
    const __m256 one_plus_f =
        _mm256_castsi256_ps(_mm256_sub_epi32(bits, _mm256_slli_epi32(e_bits, 23)));
    const __m256 e = _mm256_cvtepi32_ps(_mm256_add_epi32(e_bits, extra_e));
    const __m256 f = _mm256_sub_ps(one_plus_f, _mm256_set1_ps(1.0f));
    const __m256 f2 = _mm256_mul_ps(f, f), f4 = _mm256_mul_ps(f2, f2);
    auto c = [](int power) { return _mm256_set1_ps(kLogfPoly[7 - power]); };  // of f^power
    const __m256 p = _mm256_fmadd_ps(
        _mm256_fmadd_ps(_mm256_fmadd_ps(c(7), f, c(6)), f2, _mm256_fmadd_ps(c(5), f, c(4))), f4,
        _mm256_fmadd_ps(_mm256_fmadd_ps(c(3), f, c(2)), f2, _mm256_fmadd_ps(c(1), f, c(0))));
    // f³ P(f) − f²/2 + e · ln2_lo, then + f, then + e · ln2_hi: the small terms first
    const __m256 small =
        _mm256_fmadd_ps(_mm256_set1_ps(-0.5f), f2, _mm256_mul_ps(e, _mm256_set1_ps(kExpfLn2Lo)));
    const __m256 tail = _mm256_fmadd_ps(_mm256_mul_ps(f2, f), p, small);
    return _mm256_fmadd_ps(e, _mm256_set1_ps(kExpfLn2Hi), _mm256_add_ps(f, tail));
  }

  // Every x: a subnormal is scaled by 2²³ (exact) and e lowered by 23; log(±0) = −inf, log of a
  // negative number or NaN is NaN, log(+inf) = +inf (these lanes compute log 1 meanwhile).
  static __m256 log_any_input(__m256 x) {
    const __m256 zero = _mm256_setzero_ps(), smallest_normal = _mm256_set1_ps(0x1p-126f);
    const __m256 inf = _mm256_set1_ps(std::numeric_limits<float>::infinity());
    const __m256 subnormal = _mm256_and_ps(
        _mm256_cmp_ps(x, zero, _CMP_GT_OQ), _mm256_cmp_ps(x, smallest_normal, _CMP_LT_OQ));
    const __m256 normal = _mm256_and_ps(
        _mm256_cmp_ps(x, smallest_normal, _CMP_GE_OQ), _mm256_cmp_ps(x, inf, _CMP_LT_OQ));
    __m256 scaled = _mm256_blendv_ps(x, _mm256_mul_ps(x, _mm256_set1_ps(0x1p23f)), subnormal);
    scaled = _mm256_blendv_ps(_mm256_set1_ps(1.0f), scaled, _mm256_or_ps(normal, subnormal));
    const __m256i extra_e =
        _mm256_and_si256(_mm256_castps_si256(subnormal), _mm256_set1_epi32(-23));
    __m256 result = log_of_normal(scaled, extra_e);
    result = _mm256_blendv_ps(result, _mm256_set1_ps(-std::numeric_limits<float>::infinity()),
        _mm256_cmp_ps(x, zero, _CMP_EQ_OQ));
    result = _mm256_blendv_ps(result, inf, _mm256_cmp_ps(x, inf, _CMP_EQ_OQ));
    // x < 0 or NaN: NaN
    const __m256 not_a_log = _mm256_cmp_ps(x, zero, _CMP_NGE_UQ);
    return _mm256_blendv_ps(
        result, _mm256_set1_ps(std::numeric_limits<float>::quiet_NaN()), not_a_log);
  }

  static constexpr float kRoundingShift = kExpfRoundingShift;
  static constexpr int32_t kRoundingShiftBits = std::bit_cast<int32_t>(kRoundingShift);

  // x / ln 2 + 1.5 · 2²³, rounded once: 1.5 · 2²³ + n, n = round(x / ln 2)
  static __m256 n_in_low_bits(__m256 x) {
    return _mm256_fmadd_ps(x, _mm256_set1_ps(kExpfLog2e), _mm256_set1_ps(kRoundingShift));
  }

  // Whether every lane's n is in [−125, 127]: whether the sum's bits are in [kRoundingShiftBits −
  // 125, kRoundingShiftBits + 127], one signed comparison once that window is moved (wrapping)
  // to [INT32_MIN, INT32_MIN + 252]. Outside it: NaN, ±inf, any sum of another binade (|x / ln 2|
  // ≥ 2²²), and the n whose 2^n · e^r could be subnormal, inf, or a bit pattern of neither.
  static bool every_n_in_normal_range(__m256 shifted) {
    constexpr int32_t kMoveWindow = static_cast<int32_t>(0x80000000u - (kRoundingShiftBits - 125));
    const __m256i moved =
        _mm256_add_epi32(_mm256_castps_si256(shifted), _mm256_set1_epi32(kMoveWindow));
    const __m256i in_range = _mm256_cmpgt_epi32(_mm256_set1_epi32(INT32_MIN + 253), moved);
    return _mm256_movemask_ps(_mm256_castsi256_ps(in_range)) == 0xFF;
  }

  // e^r, r = x − n·ln 2 with ln 2 in two parts: 1 + r + r²·P(r).
  static __m256 exp_of_reduced(__m256 x, __m256 n) {
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(kExpfLn2Hi), x);  // x − n·ln2_hi
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(kExpfLn2Lo), r);         // − n·ln2_lo
    __m256 p = _mm256_set1_ps(kExpfPoly[0]);
    for (int i = 1; i < 6; ++i) p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kExpfPoly[i]));
    return _mm256_fmadd_ps(p, r * r, r) + 1.0f;
  }

  // Every x: clamped to [kExpfLowest, kExpfHighest], and 2^n as two powers of two built in the
  // exponent bits, 2^⌊n/2⌋ and 2^(n − ⌊n/2⌋), each a normal float for every n in [−150, 128]. The
  // first product is exact, the second rounds once: into the subnormals below float's range, to
  // inf above it. A NaN passes the clamp (min and max return their second operand, x, when it is
  // a NaN).
  static __m256 exp_any_range(__m256 x) {
    x = _mm256_max_ps(_mm256_set1_ps(kExpfLowest), _mm256_min_ps(_mm256_set1_ps(kExpfHighest), x));
    const __m256 shifted = n_in_low_bits(x);
    const __m256 e_r = exp_of_reduced(x, shifted - kRoundingShift);
    const __m256i n_int = _mm256_sub_epi32(  // n, from the sum's bits
        _mm256_castps_si256(shifted), _mm256_castps_si256(_mm256_set1_ps(kRoundingShift)));
    const __m256i half = _mm256_srai_epi32(n_int, 1);  // ⌊n/2⌋
    auto power_of_two = [](__m256i k) {                // 2^k: biased exponent k + 127
      return _mm256_castsi256_ps(
          _mm256_slli_epi32(_mm256_add_epi32(k, _mm256_set1_epi32(127)), 23));
    };
    return (e_r * power_of_two(half)) * power_of_two(_mm256_sub_epi32(n_int, half));
  }
};
struct Avx2Double : Avx2DoubleSleef, Avx2Tails {};

const Functions<float>& avx2_functions(float) { return Kernels<Avx2Float>::functions(); }
const Functions<double>& avx2_functions(double) { return Kernels<Avx2Double>::functions(); }

}  // namespace ag::detail::vec
#endif
