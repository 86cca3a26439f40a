// The formulas of vector_math.h, written once over a vector type V of kWidth lanes and compiled by
// each instruction set's file (vector_math_<isa>.cpp) with its own V and SLEEF functions. Only
// those files include this header.
//
// V is a GCC vector type (__m512, __m256d, …, or the scalar T itself for the portable copy), so the
// formulas are ordinary arithmetic: v * v, T(1) + v and T(1) / v act on every lane. An Isa names
// T, V, kWidth and the functions on V: exp, log, tanh (and tanh_u35), erfc, sin, cos and sqrt;
// and, where the instruction set has them, square_error(x, h) = x·x − h in one rounding, abs(x)
// and min(x, y) in one instruction each (else Kernels computes them from the arithmetic).
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <limits>

#include "autograd/detail/row_reductions.h"
#include "autograd/detail/vector_math.h"

namespace ag::detail::vec {

// An Isa of SLEEF's functions, e.g. AG_SLEEF_ISA(Avx512Float, float, __m512, 16, f16, avx512f,
// _mm512_sqrt_ps) calls Sleef_expf16_u10avx512f: the 1.0-ulp exp, log, tanh and erf, the 3.5-ulp
// tanh (three times faster), the 1.5-ulp erfc; √ is the instruction set's own (correctly rounded,
// as IEEE requires, and more than twice as fast as SLEEF's 0.5-ulp one).
#define AG_SLEEF_ISA(Name, Type, Vector, width, tag, isa, hardware_sqrt) \
  struct Name {                                                          \
    using T = Type;                                                      \
    using V = Vector;                                                    \
    static constexpr int kWidth = width;                                 \
    static V exp(V v) { return Sleef_exp##tag##_u10##isa(v); }           \
    static V log(V v) { return Sleef_log##tag##_u10##isa(v); }           \
    static V tanh(V v) { return Sleef_tanh##tag##_u10##isa(v); }         \
    static V tanh_u35(V v) { return Sleef_tanh##tag##_u35##isa(v); }     \
    static V erf(V v) { return Sleef_erf##tag##_u10##isa(v); }           \
    static V erfc(V v) { return Sleef_erfc##tag##_u15##isa(v); }         \
    static V sin(V v) { return Sleef_sin##tag##_u10##isa(v); }           \
    static V cos(V v) { return Sleef_cos##tag##_u10##isa(v); }           \
    static V sqrt(V v) { return hardware_sqrt(v); }                      \
  }

// float32 e^x as the AVX-512 and AVX2 copies compute it (vector_math_avx512.cpp,
// vector_math_avx2.cpp): e^x = 2^n · e^r, n = round(x / ln 2), r = x − n·ln 2 with ln 2 in two
// parts (Cody & Waite; the first of 15 bits, so that n·ln2_hi is exact for every |n| ≤ 150), and
// e^r ≈ 1 + r + r²·P(r), P of degree 5 — SLEEF's minimax coefficients for expf, highest first.
// x is first clamped to [kExpfLowest, kExpfHighest], where e^x goes from 0 to inf in float32.
inline constexpr float kExpfLowest = -104.0f, kExpfHighest = 89.0f;
inline constexpr float kExpfLog2e = 1.44269504088896341f;  // 1 / ln 2
inline constexpr float kExpfLn2Hi = 0.693145751953125f, kExpfLn2Lo = 1.428606765330187045e-06f;
inline constexpr float kExpfPoly[6] = {0.000198527617612853646278381f,
    0.00139304355252534151077271f, 0.00833336077630519866943359f, 0.0416664853692054748535156f,
    0.166666671633720397949219f, 0.5f};

// float32 log as the AVX-512 and AVX2 copies compute it: log x = e · ln 2 + log(1 + f), x = 2^e ·
// (1 + f) with 1 + f in [√½, √2), and log(1 + f) = f − f²/2 + f³ · P(f), P of degree 7, highest
// first, fitted by scripts/fit_log.py (relative error 6.4e−9 before float32's roundings).
inline constexpr float kLogfPoly[8] = {-0.0763449669f, 0.127615765f, -0.131601825f, 0.142017573f,
    -0.166233569f, 0.200012267f, -0.250008196f, 0.333333313f};
// The bits of √½ (0x3f3504f3): x's bits less these hold e in their exponent field.
inline constexpr int32_t kLogfSqrtHalfBits = 0x3f3504f3;
// 1.5 · 2²³, whose ulp is 1: x / ln 2 + kExpfRoundingShift, rounded once, holds n = round(x / ln 2)
// in its low mantissa bits (while |x / ln 2| < 2²²), and less kExpfRoundingShift is n itself.
inline constexpr float kExpfRoundingShift = 12582912.0f;

template <class Isa>
struct Kernels {
  using T = typename Isa::T;
  using V = typename Isa::V;
  static constexpr int kWidth = Isa::kWidth;

  // Constants of the formulas.
  static constexpr T kSqrtHalf = T(0.70710678118654752440);       // 1/√2
  static constexpr T kInvSqrt2Pi = T(0.39894228040143267794);     // 1/√(2π)
  static constexpr T kTwoOverSqrtPi = T(1.12837916709551257390);  // 2/√π
  static constexpr T kSqrt2OverPi = T(0.79788456080286535588);    // √(2/π)
  static constexpr T kGeluC = T(0.044715);                        // tanh-GELU's cubic coefficient

  static V load(const T* p) {
    V v;
    std::memcpy(&v, p, sizeof(V));
    return v;
  }
  static void store(T* p, const V& v) { std::memcpy(p, &v, sizeof(V)); }

  // The first `count` < kWidth elements at p as a vector whose other lanes are 0, and the store of
  // a vector's first `count` lanes: the Isa's masked load and store where it has them (AVX2,
  // AVX-512), which touch no memory past p[count − 1]; else through a zero-padded copy.
  static V load_first(const T* p, int64_t count) {
    if constexpr (requires { Isa::load_first(p, count); }) return Isa::load_first(p, count);
    T padded[kWidth] = {};
    std::memcpy(padded, p, static_cast<std::size_t>(count) * sizeof(T));
    return load(padded);
  }
  static void store_first(T* p, V v, int64_t count) {
    if constexpr (requires { Isa::store_first(p, v, count); }) {
      Isa::store_first(p, v, count);
    } else {
      T lanes[kWidth];
      store(lanes, v);
      std::memcpy(p, lanes, static_cast<std::size_t>(count) * sizeof(T));
    }
  }

  // y = f(x), a vector at a time; the last partial vector is computed from lanes of 0 past the
  // end, so every element is computed by the same vector code wherever the array starts or ends.
  template <class F>
  static void map(const T* x, T* y, int64_t n, F f) {
    int64_t i = 0;
    for (; i + kWidth <= n; i += kWidth) store(y + i, f(load(x + i)));
    if (i < n) store_first(y + i, f(load_first(x + i, n - i)), n - i);
  }
  // out = f(g, x, y), the same way.
  template <class F>
  static void map(const T* g, const T* x, const T* y, T* out, int64_t n, F f) {
    int64_t i = 0;
    for (; i + kWidth <= n; i += kWidth) store(out + i, f(load(g + i), load(x + i), load(y + i)));
    if (i < n) {
      const int64_t tail = n - i;
      store_first(out + i,
          f(load_first(g + i, tail), load_first(x + i, tail), load_first(y + i, tail)), tail);
    }
  }
  // out = f(g, s), the same way.
  template <class F>
  static void map(const T* g, const T* s, T* out, int64_t n, F f) {
    int64_t i = 0;
    for (; i + kWidth <= n; i += kWidth) store(out + i, f(load(g + i), load(s + i)));
    if (i < n) {
      const int64_t tail = n - i;
      store_first(out + i, f(load_first(g + i, tail), load_first(s + i, tail)), tail);
    }
  }

  // |x| by clearing the sign bit where the Isa has it (Isa::abs), else x < 0 ? −x : x (which
  // keeps −0: no caller tells the two zeros apart).
  static V abs(V x) {
    if constexpr (requires { Isa::abs(x); }) return Isa::abs(x);
    const V zero{};
    return x < zero ? -x : x;
  }
  // x < y ? x : y on every lane (y where either is NaN): the Isa's min instruction, which is this
  // very choice (Isa::min), else the selection.
  static V min(V x, V y) {
    if constexpr (requires { Isa::min(x, y); }) return Isa::min(x, y);
    return x < y ? x : y;
  }

  // x² = h + l exactly, where h = x·x is the rounded product and l its rounding error: one fused
  // multiply-subtract x·x − h where the Isa has it (Isa::square_error), else Dekker's exact product
  // (Veltkamp's split of x into two halves whose products are exact; a compiler may fuse these
  // multiply-adds, each exact either way). Both give l exactly: the same bits.
  static V square_error(V x, V h) {
    if constexpr (requires { Isa::square_error(x, h); }) return Isa::square_error(x, h);
    constexpr T kSplit = sizeof(T) == 4 ? T(4097) : T(134217729);  // 2^⌈p/2⌉ + 1
    const V c = kSplit * x;
    const V hi = c - (c - x);
    const V lo = x - hi;
    return ((hi * hi - h) + T(2) * hi * lo) + lo * lo;
  }

  // r · e^(−x²/2), for φ(x) = e^(−x²/2) / √(2π) and Φ's tail.
  //   float32: the exponent −x²/2 is large in the tails, where its rounding would cost ~x²/2 ulps:
  //   x² = h + l is split exactly, and r e^(−x²/2) = w e^(−l/2) ≈ w − w·l/2, w = r e^(−h/2) —
  //   one rounding for the correction, where w · (1 − l/2) would take two.
  static V times_gauss(V r, V x) {
    if constexpr (sizeof(T) == 8) {
      return r * Isa::exp(T(-0.5) * x * x);
    } else {
      const V zero{}, inf = zero + std::numeric_limits<T>::infinity();
      const V h = x * x;
      // Where x² overflows (|x| ≥ 1.9e19), e^(−inf) = 0 needs no correction, and l (−inf, or NaN
      // for x = ±inf) would turn it into NaN.
      return times_gauss_of_split(r, h, h < inf ? square_error(x, h) : zero);
    }
  }
  // r · e^(−(h + l)/2), where h + l = x² exactly (float32).
  static V times_gauss_of_split(V r, V h, V l) {
    const V w = r * Isa::exp(T(-0.5) * h);
    return w - w * (T(0.5) * l);
  }
  // r · e^(−x²), erf's derivative: as times_gauss, x² = h + l split exactly and r e^(−x²) =
  // w e^(−l) ≈ w − w·l with w = r e^(−h) (in float64 too: the rounding of x² would cost up to
  // x² ulps, 700 near the underflow).
  static V times_exp_minus_square(V r, V x) {
    const V zero{}, inf = zero + std::numeric_limits<T>::infinity();
    const V h = x * x;
    // Where x² overflows, e^(−inf) = 0 needs no correction (and l would be NaN).
    const V l = h < inf ? square_error(x, h) : zero;
    const V w = r * Isa::exp(-h);
    return w - w * l;
  }

  // Φ(x) = ½ erfc(−x/√2), the normal distribution's CDF.
  //   float64: SLEEF's erfc.
  //   float32: the tail Φ(−a), a = |x|, as e^(−a²/2) · P(a)/Q(a), and Φ(x) = 1 − Φ(−x) for x ≥ 0.
  //   P/Q follows g(a) = Φ(−a) e^(a²/2) (Mills' ratio over √(2π): ½ at 0, ~ 1/(a√(2π)) far out)
  //   to a relative 1.6e−8 on 0 ≤ a ≤ 14.6, where float32 GELU is not zero; degrees 4 and 5,
  //   fitted by scripts/fit_normal_tail.py. Every coefficient is positive, so the polynomials'
  //   sums do not cancel; a is exact, and e^(−a²/2) is times_gauss's, with a² split exactly:
  //   the tails keep their digits. One exp and one division (SLEEF's erfc costs ten exps).
  static V normal_cdf(V x) {
    if constexpr (sizeof(T) == 8) {
      return T(0.5) * Isa::erfc(x * -kSqrtHalf);
    } else {
      const V zero{};
      // Beyond 14.6, e^(−a²/2) is 0; the clamp keeps P and Q finite there (a = inf or 1e10
      // would make them inf / inf = NaN).
      const V a = min(abs(x), zero + T(16));  // (16 for x = NaN)
      // P and Q by Estrin's scheme, (p0 + p1 a) + a² ((p2 + p3 a) + a² …): fewer roundings in a
      // row than Horner's (the copies without FMA need it in the tails), and shorter chains.
      const V a2 = a * a;
      const V p = (T(0.5) + T(0.438496947) * a) +
                  a2 * ((T(0.183384985) + T(0.0406838022) * a) + a2 * T(0.00412383256));
      const V q =
          (T(1) + T(1.67487884) * a) +
          a2 * ((T(1.20312512) + T(0.469866276) * a) + a2 * (T(0.101985544) + T(0.0103367977) * a));
      // Φ(−|x|) = e^(−a²/2) P/Q: a² does not overflow, and where a is clamped (|x| > 16, NaN)
      // e^(−a²/2) is 0, as e^(−x²/2) is (x = NaN: 1 − 0, and x Φ(x) is NaN).
      const V tail = times_gauss_of_split(p / q, a2, square_error(a, a2));
      return x < zero ? tail : T(1) - tail;  // Φ(x) = 1 − Φ(−x)
    }
  }

  // σ(z) = 1 / (1 + e⁻ᶻ); for z < −88 (float) e⁻ᶻ is +inf and σ is 0, as it should be.
  static V sigmoid_of(V z) { return T(1) / (T(1) + Isa::exp(-z)); }
  // σ(z) and 1 − σ(z), the second as e⁻ᶻ σ(z) (= σ(−z)): 1 − σ computed as a difference would
  // lose its digits where σ is near 1 (z = 17 leaves 17 ulps of x (1 − σ) in SiLU's derivative).
  static void sigmoid_and_complement(V z, V& s, V& one_minus_s) {
    const V zero{};
    const V e = Isa::exp(-z);
    s = T(1) / (T(1) + e);
    one_minus_s = e * s;
    one_minus_s = one_minus_s == one_minus_s ? one_minus_s : zero + T(1);  // e = inf: σ = 0
  }
  // u = √(2/π) (x + 0.044715 x³), tanh-GELU's argument, and du/dx = √(2/π) (1 + 3 · 0.044715 x²).
  static V gelu_u(V x) { return kSqrt2OverPi * (x + kGeluC * x * x * x); }
  static V gelu_du(V x) { return kSqrt2OverPi * (T(1) + T(3) * kGeluC * x * x); }

  // ---- forward ----
  static void exp(const T* x, T* y, int64_t n) {
    map(x, y, n, [](V v) { return Isa::exp(v); });
  }
  // e^(x − shift): softmax's rows less their maximum, one pass (x − shift rounds as a separate
  // subtraction would)
  static void exp_shifted(const T* x, T shift, T* y, int64_t n) {
    map(x, y, n, [shift](V v) { return Isa::exp(v - shift); });
  }
  // exp_shifted, and Σ y in double as row_sum_lanes adds the stored y: y[k] into lane k mod
  // kLanes, in order, the lanes then combined pairwise (row_reductions.h) — here from the vectors
  // as they are computed. The last partial vector adds +0 past the row's end, as row_sum_lanes
  // does (which changes no lane: a lane starts at +0 and is never −0).
  static double exp_shifted_sum(const T* x, T shift, T* y, int64_t n) {
    double lanes[kLanes] = {};
    int64_t i = 0;
    for (; i + kWidth <= n; i += kWidth) {
      const V e = Isa::exp(load(x + i) - shift);
      store(y + i, e);
      add_to_lanes(lanes, e, i);
    }
    if (i < n) {
      const V e = Isa::exp(load_first(x + i, n - i) - shift);
      store_first(y + i, e, n - i);
      const V zero{};
      const V in_row = load_first(kOnes.data(), n - i);  // 1 in the row's lanes, 0 past it
      add_to_lanes(lanes, in_row > zero ? e : zero, i);
    }
    return combined_lanes(lanes);
  }
  static constexpr std::array<T, kWidth> kOnes = [] {
    std::array<T, kWidth> ones{};
    ones.fill(T(1));
    return ones;
  }();
  // lanes[k mod kLanes] += e's lane k − i, for the elements k = i, i + 1, …, i + kWidth − 1 (i a
  // multiple of kWidth: where kWidth is a multiple of kLanes, lane j takes e's lanes j, j + kLanes,
  // …, which the compiler adds as whole vectors).
  static void add_to_lanes(double (&lanes)[kLanes], V e, int64_t i) {
    T values[kWidth];
    store(values, e);
    for (int64_t j = 0; j < kWidth; ++j) {
      const int64_t lane = kWidth % kLanes == 0 ? j % kLanes : (i + j) % kLanes;
      lanes[lane] += double(values[j]);
    }
  }
  static void log(const T* x, T* y, int64_t n) {
    map(x, y, n, [](V v) { return Isa::log(v); });
  }
  // float32: SLEEF's 3.5-ulp tanh, three times faster than its 1-ulp one.
  static void tanh(const T* x, T* y, int64_t n) {
    if constexpr (sizeof(T) == 4)
      map(x, y, n, [](V v) { return Isa::tanh_u35(v); });
    else
      map(x, y, n, [](V v) { return Isa::tanh(v); });
  }
  static void sigmoid(const T* x, T* y, int64_t n) { map(x, y, n, sigmoid_of); }
  // silu(x) = x σ(x) = x / (1 + e⁻ˣ)
  static void silu(const T* x, T* y, int64_t n) {
    map(x, y, n, [](V v) { return v / (T(1) + Isa::exp(-v)); });
  }
  // gelu(x) = x Φ(x) = x · ½ erfc(−x/√2)
  static void gelu(const T* x, T* y, int64_t n) {
    map(x, y, n, [](V v) { return v * normal_cdf(v); });
  }
  // gelu_tanh(x) = ½ x (1 + tanh u) = x σ(2u)
  static void gelu_tanh(const T* x, T* y, int64_t n) {
    map(x, y, n, [](V v) { return v * sigmoid_of(T(2) * gelu_u(v)); });
  }

  // erf x = (2/√π) ∫₀ˣ e^(−t²) dt: SLEEF's 1-ulp erf
  static void erf(const T* x, T* y, int64_t n) {
    map(x, y, n, [](V v) { return Isa::erf(v); });
  }

  static void sin(const T* x, T* y, int64_t n) {
    map(x, y, n, [](V v) { return Isa::sin(v); });
  }
  static void cos(const T* x, T* y, int64_t n) {
    map(x, y, n, [](V v) { return Isa::cos(v); });
  }
  static void sqrt(const T* x, T* y, int64_t n) {
    map(x, y, n, [](V v) { return Isa::sqrt(v); });
  }
  static void rsqrt(const T* x, T* y, int64_t n) {  // 1/√x, PyTorch's two roundings
    map(x, y, n, [](V v) { return T(1) / Isa::sqrt(v); });
  }

  // relu(x) = x for x > 0, else 0; NaN stays NaN (only what is known to be ≤ 0 becomes 0)
  static void relu(const T* x, T* y, int64_t n) {
    map(x, y, n, [](V v) {
      const V zero{};
      return v <= zero ? zero : v;
    });
  }

  // ---- backward: out = g · f′ ----
  static void exp_backward(const T* g, const T* y, T* out, int64_t n) {
    map(g, y, out, n, [](V gv, V yv) { return gv * yv; });  // (eˣ)′ = eˣ = y
  }
  static void tanh_backward(const T* g, const T* y, T* out, int64_t n) {
    map(g, y, out, n, [](V gv, V yv) { return gv * (T(1) - yv * yv); });  // tanh′ = 1 − y²
  }
  static void sigmoid_backward(const T* g, const T* y, T* out, int64_t n) {
    map(g, y, out, n, [](V gv, V yv) { return gv * yv * (T(1) - yv); });  // σ′ = y (1 − y)
  }
  // (x Φ(x))′ = Φ(x) + x φ(x),  φ(x) = e^(−x²/2) / √(2π), with Φ(x) = y / x from the forward's
  // output (½ at x = 0): one division where Φ itself costs an exp, a division and a polynomial.
  static void gelu_backward(const T* g, const T* x, const T* y, T* out, int64_t n) {
    map(g, x, y, out, n, [](V gv, V xv, V yv) {
      const V zero{};
      const V cdf = xv == zero ? zero + T(0.5) : yv / xv;
      return gv * (cdf + xv * times_gauss(zero + kInvSqrt2Pi, xv));
    });
  }
  // (x σ(2u))′ = σ(2u) + x · σ(2u)(1 − σ(2u)) · 2u′. Where x³ overflows (|x| ≥ 7e12 in float32),
  // u′ is inf and σ(1 − σ) is 0: the second term's limit is 0 (σ(1 − σ) falls as e^(−2|u|)), not
  // the NaN of 0 · inf (PyTorch's tanh-GELU gives NaN there).
  static void gelu_tanh_backward(const T* g, const T* x, T* out, int64_t n) {
    map(g, x, out, n, [](V gv, V xv) {
      const V zero{};
      V s, one_minus_s;
      sigmoid_and_complement(T(2) * gelu_u(xv), s, one_minus_s);
      const V slope = T(2) * xv * s * one_minus_s * gelu_du(xv);
      return gv * (s + (slope == slope ? slope : zero));  // (x = NaN: s is NaN)
    });
  }
  // (x σ(x))′ = σ + x σ (1 − σ) = σ (1 + x (1 − σ))
  static void silu_backward(const T* g, const T* x, T* out, int64_t n) {
    map(g, x, out, n, [](V gv, V xv) {
      V s, one_minus_s;
      sigmoid_and_complement(xv, s, one_minus_s);
      return gv * s * (T(1) + xv * one_minus_s);
    });
  }

  static void erf_backward(const T* g, const T* x, T* out, int64_t n) {
    map(g, x, out, n, [](V gv, V xv) {  // erf′ = (2/√π) e^(−x²)
      return gv * times_exp_minus_square(V{} + kTwoOverSqrtPi, xv);
    });
  }

  static void sin_backward(const T* g, const T* x, T* out, int64_t n) {
    map(g, x, out, n, [](V gv, V xv) { return gv * Isa::cos(xv); });  // sin′ = cos
  }
  static void cos_backward(const T* g, const T* x, T* out, int64_t n) {
    map(g, x, out, n, [](V gv, V xv) { return -gv * Isa::sin(xv); });  // cos′ = −sin
  }

  static void relu_backward(const T* g, const T* x, T* out, int64_t n) {
    map(g, x, out, n, [](V gv, V xv) {  // relu′ = [x > 0] (0 at the kink, as PyTorch's)
      const V zero{};
      return xv > zero ? gv : zero;
    });
  }

  // (√x)′ = 1 / (2√x) = 1 / (2y): y + y is exact and the division one rounding, so every copy
  // gives the same bits (and the portable loop's); the vector copies divide 8 or 16 at once.
  static void sqrt_backward(const T* g, const T* y, T* out, int64_t n) {
    map(g, y, out, n, [](V gv, V yv) { return gv / (yv + yv); });
  }

  static const Functions<T>& functions() {
    static const Functions<T> table{exp, exp_shifted, exp_shifted_sum, log, tanh, sigmoid, gelu,
        gelu_tanh, silu, erf, sin, cos, sqrt, rsqrt, relu, exp_backward, tanh_backward,
        sigmoid_backward, gelu_backward, gelu_tanh_backward, silu_backward, erf_backward,
        sin_backward, cos_backward, relu_backward, sqrt_backward};
    return table;
  }
};

}  // namespace ag::detail::vec
