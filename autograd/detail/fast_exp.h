// A fast float32 exp for the softmax kernels (internal, not part of the public API).
//
// double std::exp costs tens of cycles per element, and libm takes a slow path for arguments far
// below ln(FLT_MIN) (the −1e6 fills of d2l's masking). Cephes' expf scheme, the one SIMD math
// libraries use, needs only multiplies, adds and bit operations, so a loop of it vectorises with
// plain SSE2 (no -ffast-math):
//
//   e^x = 2ⁿ · e^r   with n = round(x · log₂e) and r = x − n·ln2, so |r| ≤ ln2 / 2
//
//   1. n by the magic-number trick: adding M = 1.5·2²³ to x·log₂e pushes its fraction bits out of
//      the float's 23-bit mantissa, so the hardware rounds it to the nearest integer; the low
//      mantissa bits of the sum then hold n in two's complement: n = bits(x·log₂e + M) − bits(M).
//   2. r = x − n·C1 − n·C2 with C1 + C2 = ln2: C1 = 0.693359375 has only 9 significant bits, so
//      n·C1 is exact and r keeps its low bits (Cody–Waite reduction).
//   3. e^r ≈ 1 + r + r²·P(r), Cephes' minimax polynomial P of degree 5 (6 coefficients).
//   4. 2ⁿ is written straight into a float's exponent bits: bits(2ᵏ) = (k + 127) << 23. n reaches
//      128 near ln(FLT_MAX), one past the largest exponent, so 2ⁿ is applied as 2^(n/2) · 2^(n −
//      n/2).
//
// Out-of-range inputs are handled by selects, not branches, so the loop stays vectorisable:
// x < ln(FLT_MIN) ≈ −87.3365 gives 0 (results that would be subnormal are flushed), x > ln(FLT_MAX)
// ≈ 88.7228 gives +inf, NaN gives NaN. Accuracy: within 2 ulps (relative error ≤ 2.4e−7) of the
// correctly rounded result over the whole normal range (tests/autograd/test_fast_exp.cpp).
#pragma once

#include <cmath>

#include <bit>
#include <cstdint>
#include <limits>

namespace ag::detail {

// condition ? if_true : if_false, by bit masks. A plain ?: lets GCC move the computation of the
// result into a branch, and since it may not assume that float operations never trap
// (-ftrapping-math, its default), it then refuses to vectorise the loop; with masks both sides are
// always computed and the loop vectorises.
inline float branchless_select(bool condition, float if_true, float if_false) {
  const uint32_t mask = 0u - static_cast<uint32_t>(condition);  // all ones or all zeros
  return std::bit_cast<float>(
      (std::bit_cast<uint32_t>(if_true) & mask) | (std::bit_cast<uint32_t>(if_false) & ~mask));
}

// e^x for one float (inline, so the compiler can vectorise loops that call it).
inline float exp_approx(float x) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kC1 = 0.693359375f;  // ln2 = C1 + C2, C1 with 9 significant bits
  constexpr float kC2 = -2.12194440e-4f;
  constexpr float kMinLog = -87.33654475f;  // ln(FLT_MIN): below it, 0
  constexpr float kMaxLog = 88.72283906f;   // ln(FLT_MAX): above it, +inf
  constexpr float kMagic = 12582912.0f;     // 1.5 · 2²³
  // 1. n = round(x · log₂e), as an integer (from the bits, in unsigned arithmetic so that no input
  //    overflows) and as a float. Valid for |x| < 2²²; larger inputs are replaced at the end.
  const float shifted = x * kLog2e + kMagic;
  const int32_t n =
      static_cast<int32_t>(std::bit_cast<uint32_t>(shifted) - std::bit_cast<uint32_t>(kMagic));
  const float n_float = shifted - kMagic;
  // 2. r = x − n·ln2, in two steps.
  const float r = (x - n_float * kC1) - n_float * kC2;
  // 3. e^r ≈ 1 + r + r²·P(r) (Cephes expf).
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float exp_r = p * (r * r) + r + 1.0f;
  // 4. · 2ⁿ = 2^half · 2^(n − half), each factor a normal float.
  const int32_t half = n >> 1;  // ⌊n / 2⌋
  const float scale_a = std::bit_cast<float>(static_cast<uint32_t>(half + 127) << 23);
  const float scale_b = std::bit_cast<float>(static_cast<uint32_t>(n - half + 127) << 23);
  float result = exp_r * scale_a * scale_b;

  // Out of range (where n, and so the result, is meaningless): 0, +inf or the NaN itself.
  result = branchless_select(x < kMinLog, 0.0f, result);
  result = branchless_select(x > kMaxLog, std::numeric_limits<float>::infinity(), result);
  return branchless_select(x != x, x, result);  // NaN in, NaN out
}

// out[i] = e^(in[i] − shift) for i in [0, n), by exp_approx. in and out may be the same array.
// Vectorised, with a version per instruction set chosen at load time where the compiler supports
// it. The AVX-512 version fuses its multiply-adds (detail/target_clones.h), so its results can
// differ in the last bit from the AVX2 and portable versions'.
void exp_shifted(const float* in, float shift, float* out, int64_t n);

// The same for a row of either dtype, as softmax and cross-entropy use it: the fast vectorised exp
// for float32, std::exp for float64 (so that the float64 gradchecks see full precision).
inline void exp_shifted_row(const float* in, float shift, float* out, int64_t n) {
  exp_shifted(in, shift, out, n);
}
inline void exp_shifted_row(const double* in, double shift, double* out, int64_t n) {
  for (int64_t k = 0; k < n; ++k) out[k] = std::exp(in[k] - shift);
}

}  // namespace ag::detail
