// The accuracy of the vectorised elementwise math (autograd/detail/vector_math.h), for every copy
// this CPU runs (AVX-512, AVX2, SSE2, the portable scalar one): each function is swept over its
// range and compared with the same formula in long double on libm's expl, logl, tanhl and erfcl.
// The error is counted in ulps (units in the last place) of the result's dtype — of the result
// itself for the forward functions, and of the sum of the magnitudes of the derivative's terms for
// the backward ones (g · (Φ + xφ) crosses 0 where its terms cancel, and there no finite number of
// ulps of the result is meaningful). docs/ops.md, "Accuracy of the elementwise math", lists the
// bounds checked here.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "autograd/detail/row_reductions.h"
#include "autograd/detail/vector_math.h"
#include "autograd/error.h"
#include "autograd/ops.h"
#include "tensor_compare.h"
#include "what_contains.h"

namespace vec = ag::detail::vec;
using Real = long double;

namespace {

// The distance between two adjacent numbers of type T near |x| (for 0, the smallest normal's).
template <class T>
Real ulp_of(Real x) {
  const T magnitude = static_cast<T>(std::max<Real>(std::fabs(x), std::numeric_limits<T>::min()));
  return static_cast<Real>(std::nextafter(magnitude, std::numeric_limits<T>::infinity())) -
         static_cast<Real>(magnitude);
}

// n points from lo to hi, evenly spaced, and the values of T nearest them.
template <class T>
std::vector<T> linear_sweep(Real lo, Real hi, int n) {
  std::vector<T> points;
  for (int i = 0; i < n; ++i) points.push_back(static_cast<T>(lo + (hi - lo) * i / (n - 1)));
  return points;
}
// n points from lo to hi (both > 0), evenly spaced in log(x).
template <class T>
std::vector<T> log_sweep(Real lo, Real hi, int n) {
  std::vector<T> points;
  for (int i = 0; i < n; ++i)
    points.push_back(
        static_cast<T>(std::exp(std::log(lo) + (std::log(hi) - std::log(lo)) * i / (n - 1))));
  return points;
}
// The sweep, and the same points negated, and tiny ones (|x| from 1e-6 to 1) of both signs.
template <class T>
std::vector<T> symmetric_sweep(Real lo, Real hi, int n) {
  std::vector<T> points = linear_sweep<T>(lo, hi, n);
  for (T x : log_sweep<T>(1e-6L, 1.0L, n / 10)) {
    points.push_back(x);
    points.push_back(-x);
  }
  return points;
}

// The largest error, in ulps of scale(x), of y = f(x) against the reference.
template <class T>
Real worst_ulps(const std::vector<T>& x, const std::vector<T>& y,
    const std::function<Real(Real)>& reference, const std::function<Real(Real)>& scale) {
  Real worst = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const Real expected = reference(x[i]);
    const Real error = std::fabs(static_cast<Real>(y[i]) - expected) / ulp_of<T>(scale(x[i]));
    if (!(error <= worst)) worst = error;  // NaN counts as the worst
  }
  return worst;
}

constexpr Real kPi = 3.14159265358979323846264338L;
Real phi(Real x) { return std::exp(-x * x / 2) / std::sqrt(2 * kPi); }
Real Phi(Real x) { return std::erfc(-x / std::sqrt(2.0L)) / 2; }
Real sigma(Real x) { return 1 / (1 + std::exp(-x)); }
Real gelu_u(Real x) { return std::sqrt(2 / kPi) * (x + 0.044715L * x * x * x); }
Real gelu_du(Real x) { return std::sqrt(2 / kPi) * (1 + 3 * 0.044715L * x * x); }
Real itself(Real y) { return y; }

struct Case {
  std::string name;
  Real float_bound, double_bound;  // ulps
};

// Sweeps one unary function of one copy; returns its worst error in ulps.
template <class T>
Real unary_error(
    vec::UnaryFn<T> f, const std::vector<T>& x, const std::function<Real(Real)>& reference) {
  std::vector<T> y(x.size());
  f(x.data(), y.data(), static_cast<int64_t>(x.size()));
  return worst_ulps<T>(x, y, reference, [&](Real v) { return reference(v); });
}
// A backward function at g = 1 of one copy, with its saved value s(x) (x or the forward's y).
template <class T>
Real backward_error(vec::BackwardFn<T> f, const std::vector<T>& x,
    const std::function<Real(Real)>& saved, const std::function<Real(Real)>& reference,
    const std::function<Real(Real)>& scale) {
  std::vector<T> s(x.size()), g(x.size(), T(1)), out(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) s[i] = static_cast<T>(saved(x[i]));
  f(g.data(), s.data(), out.data(), static_cast<int64_t>(x.size()));
  // The reference sees the saved value as the kernel got it (y rounded to T, for tanh and σ).
  std::vector<T> saved_values = s;
  return worst_ulps<T>(saved_values, out, reference, scale);
}

// GELU's backward at g = 1 of one copy, from x and the copy's own forward y = gelu(x).
template <class T>
Real gelu_backward_error(const vec::Functions<T>& f, const std::vector<T>& x,
    const std::function<Real(Real)>& reference, const std::function<Real(Real)>& scale) {
  std::vector<T> y(x.size()), g(x.size(), T(1)), out(x.size());
  f.gelu(x.data(), y.data(), static_cast<int64_t>(x.size()));
  f.gelu_backward(g.data(), x.data(), y.data(), out.data(), static_cast<int64_t>(x.size()));
  return worst_ulps<T>(x, out, reference, scale);
}

template <class T>
void check_copy(vec::Capability capability, bool print) {
  const vec::Functions<T>& f = vec::functions_for(capability, T());
  const bool is_float = sizeof(T) == 4;
  const int n = 20001;
  const Real exp_hi = is_float ? 88.0L : 709.0L, exp_lo = is_float ? -87.0L : -708.0L;
  const Real log_lo = is_float ? 1e-37L : 1e-307L, log_hi = is_float ? 1e38L : 1e308L;

  struct Row {
    const char* name;
    Real error, bound;
  };
  std::vector<Row> rows;
  auto add = [&](const char* name, Real error, Real float_bound, Real double_bound) {
    rows.push_back({name, error, is_float ? float_bound : double_bound});
  };
  // Forward: exp over its finite, normal range; log over (almost) every magnitude.
  add("exp",
      unary_error<T>(f.exp, linear_sweep<T>(exp_lo, exp_hi, n), [](Real v) { return std::exp(v); }),
      1, 1);
  add("log",
      unary_error<T>(f.log, log_sweep<T>(log_lo, log_hi, n), [](Real v) { return std::log(v); }), 1,
      1);
  add("tanh",
      unary_error<T>(f.tanh, symmetric_sweep<T>(-10, 10, n), [](Real v) { return std::tanh(v); }),
      3.5, 2);
  add("sigmoid", unary_error<T>(f.sigmoid, symmetric_sweep<T>(exp_lo, 40, n), sigma), 2, 2);
  add("silu",
      unary_error<T>(
          f.silu, symmetric_sweep<T>(exp_lo + 1, 40, n), [](Real v) { return v * sigma(v); }),
      2, 2);
  // GELU's tails (x < −5, where the result is below 1.5e−6 · |x|) are ill-conditioned: e^(−x²/2)
  // turns a rounding of x²'s size into a relative error that large. They have their own rows.
  auto gelu = [](Real v) { return v * Phi(v); };
  auto gelu_tanh = [](Real v) { return v * sigma(2 * gelu_u(v)); };
  add("gelu", unary_error<T>(f.gelu, symmetric_sweep<T>(-5, 12, n), gelu), 6.5, 29);
  add("gelu x<-5", unary_error<T>(f.gelu, linear_sweep<T>(-12, -5, n), gelu), 6, 221);
  add("gelu_tanh", unary_error<T>(f.gelu_tanh, symmetric_sweep<T>(-5, 10, n), gelu_tanh), 32, 44);
  add("gelu_tanh x<-5", unary_error<T>(f.gelu_tanh, linear_sweep<T>(-9, -5, n), gelu_tanh), 152,
      150);
  add("sin",
      unary_error<T>(f.sin, symmetric_sweep<T>(-1000, 1000, n), [](Real v) { return std::sin(v); }),
      1, 1);
  add("cos",
      unary_error<T>(f.cos, symmetric_sweep<T>(-1000, 1000, n), [](Real v) { return std::cos(v); }),
      1, 1);
  // erf over where it is not yet ±1 in float64 (|x| < 6), and small |x|, where erf x ≈ 2x/√π.
  add("erf",
      unary_error<T>(f.erf, symmetric_sweep<T>(-6, 6, n), [](Real v) { return std::erf(v); }), 1,
      1);
  add("sqrt",
      unary_error<T>(f.sqrt, log_sweep<T>(log_lo, log_hi, n), [](Real v) { return std::sqrt(v); }),
      0.5, 0.5);
  add("rsqrt",
      unary_error<T>(
          f.rsqrt, log_sweep<T>(log_lo, log_hi, n), [](Real v) { return 1 / std::sqrt(v); }),
      1.5, 1.5);
  // Backward, at g = 1.
  const std::vector<T> wide = symmetric_sweep<T>(-12, 12, n);
  auto gelu_derivative = [](Real x) { return Phi(x) + x * phi(x); };
  auto gelu_derivative_scale = [](Real x) { return Phi(x) + std::fabs(x) * phi(x); };
  auto gelu_tanh_derivative = [](Real x) {
    const Real s = sigma(2 * gelu_u(x));
    return s + 2 * x * s * (1 - s) * gelu_du(x);
  };
  auto gelu_tanh_derivative_scale = [](Real x) {
    const Real s = sigma(2 * gelu_u(x));
    return s + std::fabs(2 * x * s * (1 - s) * gelu_du(x));
  };
  add("exp_backward",
      backward_error<T>(
          f.exp_backward, wide, [](Real v) { return std::exp(v); }, itself, itself),
      0.5, 0.5);
  add("tanh_backward",
      backward_error<T>(
          f.tanh_backward, wide, [](Real v) { return std::tanh(v); },
          [](Real y) { return 1 - y * y; }, [](Real) { return Real(1); }),
      0.5, 0.5);
  add("sigmoid_backward",
      backward_error<T>(
          f.sigmoid_backward, wide, sigma, [](Real y) { return y * (1 - y); }, itself),
      1, 1);
  add("gelu_backward",
      gelu_backward_error<T>(
          f, symmetric_sweep<T>(-5, 12, n), gelu_derivative, gelu_derivative_scale),
      6.5, 9.5);
  add("gelu_backward x<-5",
      gelu_backward_error<T>(
          f, linear_sweep<T>(-12, -5, n), gelu_derivative, gelu_derivative_scale),
      4, 67);
  add("gelu_tanh_backward",
      backward_error<T>(f.gelu_tanh_backward, symmetric_sweep<T>(-5, 10, n), itself,
          gelu_tanh_derivative, gelu_tanh_derivative_scale),
      30, 38);
  add("gelu_tanh_backward x<-5",
      backward_error<T>(f.gelu_tanh_backward, linear_sweep<T>(-9, -5, n), itself,
          gelu_tanh_derivative, gelu_tanh_derivative_scale),
      155, 175);
  add("silu_backward",
      backward_error<T>(
          f.silu_backward, symmetric_sweep<T>(exp_lo + 1, 40, n), itself,
          [](Real x) { return sigma(x) * (1 + x * (1 - sigma(x))); },
          [](Real x) { return sigma(x) * (1 + std::fabs(x) * (1 - sigma(x))); }),
      4, 3.5);

  // erf′ = (2/√π) e^(−x²), down to its smallest normal results (x² up to 87 and 708).
  auto erf_derivative = [](Real x) { return 2 / std::sqrt(kPi) * std::exp(-x * x); };
  const Real erf_edge = is_float ? 9.3L : 26.6L;
  add("erf_backward",
      backward_error<T>(f.erf_backward, symmetric_sweep<T>(-erf_edge, erf_edge, n), itself,
          erf_derivative, erf_derivative),
      3, 2);
  add("sin_backward",
      backward_error<T>(
          f.sin_backward, symmetric_sweep<T>(-1000, 1000, n), itself,
          [](Real x) { return std::cos(x); }, [](Real x) { return std::cos(x); }),
      1, 1);
  add("cos_backward",
      backward_error<T>(
          f.cos_backward, symmetric_sweep<T>(-1000, 1000, n), itself,
          [](Real x) { return -std::sin(x); }, [](Real x) { return std::sin(x); }),
      1, 1);

  for (const Row& row : rows) {
    if (print)
      std::printf("%-7s %-8s %-24s %8.3Lf ulps (bound %.1Lf)\n", vec::capability_name(capability),
          is_float ? "float32" : "float64", row.name, row.error, row.bound);
    INFO(vec::capability_name(capability)
         << ' ' << (is_float ? "float32 " : "float64 ") << row.name);
    CHECK(row.error <= row.bound);
  }
}

}  // namespace

namespace {
// The copies of the functions this CPU runs, widest first.
std::vector<vec::Capability> supported_copies() {
  std::vector<vec::Capability> copies;
  for (vec::Capability capability : {vec::Capability::avx512, vec::Capability::avx2,
           vec::Capability::sse2, vec::Capability::scalar})
    if (vec::supported(capability)) copies.push_back(capability);
  return copies;
}
}  // namespace

TEST_CASE(
    "every copy of the vectorised math is within its documented ulps of libm", "[vector_math]") {
  const bool print = std::getenv("AG_PRINT_ULPS") != nullptr;
  for (vec::Capability capability : supported_copies()) {
    check_copy<float>(capability, print);
    check_copy<double>(capability, print);
  }
}

namespace {
// exp and σ of one copy at the edges of T's range: the infinities, NaN, the largest finite results,
// the overflow to inf, the subnormal results and the underflow to 0 — libm's value (rounded to T)
// exactly at the special points, within exp's 1 ulp on the subnormal sweep.
template <class T>
void check_exp_edges(vec::Capability capability) {
  const vec::Functions<T>& f = vec::functions_for(capability, T());
  const bool is_float = sizeof(T) == 4;
  const T inf = std::numeric_limits<T>::infinity(), nan = std::numeric_limits<T>::quiet_NaN();
  // The largest x with a finite e^x, the first that overflows, the last with a subnormal result,
  // the first that rounds to 0. (In float64, 709.7827 rather than the last double below
  // ln(DBL_MAX) = 709.78271289338: SLEEF's exp overflows from 709.78271114955 on, 2.5e-9
  // relatively earlier than libm's.)
  const T largest = is_float ? T(88.7228317) : T(709.7827);
  const T overflows = is_float ? T(88.7228394) : T(709.7828);
  const T tiniest = is_float ? T(-103.278931) : T(-744.440071921381);
  const T underflows = is_float ? T(-104.0) : T(-745.2);
  const std::vector<T> x = {-inf, inf, nan, T(0), T(-0.0), largest, overflows, tiniest, underflows,
      T(-1000), T(1000), T(-1e30), T(1e30)};
  std::vector<T> e(x.size()), s(x.size());
  f.exp(x.data(), e.data(), static_cast<int64_t>(x.size()));
  f.sigmoid(x.data(), s.data(), static_cast<int64_t>(x.size()));
  for (std::size_t i = 0; i < x.size(); ++i) {
    INFO(vec::capability_name(capability)
         << (is_float ? " float32" : " float64") << " x = " << static_cast<double>(x[i]));
    const T expected = static_cast<T>(std::exp(static_cast<Real>(x[i])));
    if (std::isnan(x[i])) {
      CHECK(std::isnan(e[i]));
      CHECK(std::isnan(s[i]));
      continue;
    }
    if (std::isinf(expected) || expected == 0)
      CHECK(e[i] == expected);  // overflow to inf, underflow to 0
    else
      CHECK(
          std::fabs(static_cast<Real>(e[i]) - static_cast<Real>(expected)) <= ulp_of<T>(expected));
    if (std::isinf(x[i])) CHECK(s[i] == (x[i] > 0 ? T(1) : T(0)));
  }
  // e^x with subnormal results: from the smallest normal result down to 0.
  const Real normal_edge = std::log(static_cast<Real>(std::numeric_limits<T>::min()));
  const Real error = unary_error<T>(
      f.exp, linear_sweep<T>(normal_edge, tiniest, 20001), [](Real v) { return std::exp(v); });
  INFO(vec::capability_name(capability)
       << (is_float ? " float32" : " float64") << " exp's subnormal results");
  CHECK(error <= 1);
}
}  // namespace

TEST_CASE("every copy's exp and sigmoid at the edges: inf, NaN, overflow, subnormals, underflow",
    "[vector_math]") {
  for (vec::Capability capability : supported_copies()) {
    check_exp_edges<float>(capability);
    check_exp_edges<double>(capability);
  }
}

namespace {
// GELU's, tanh-GELU's and SiLU's derivatives where x² or x³ overflows: 1 for x > 0, 0 for x < 0
// (each the limit of the formula), not the NaN of 0 · inf; the forward x and 0.
template <class T>
void check_activation_extremes(vec::Capability capability) {
  const vec::Functions<T>& f = vec::functions_for(capability, T());
  const std::vector<T> x =
      sizeof(T) == 4
          ? std::vector<T>{T(1e13), T(-1e13), T(1e20), T(-1e20), T(3e38), T(-3e38)}
          : std::vector<T>{T(1e103), T(-1e103), T(1e160), T(-1e160), T(1e300), T(-1e300)};
  const auto n = static_cast<int64_t>(x.size());
  const std::vector<T> g(x.size(), T(1));
  std::vector<T> y(x.size()), dx(x.size());
  const std::vector<std::pair<const char*, std::function<void()>>> functions = {
      {"gelu",
          [&] {
            f.gelu(x.data(), y.data(), n);
            f.gelu_backward(g.data(), x.data(), y.data(), dx.data(), n);
          }},
      {"gelu_tanh",
          [&] {
            f.gelu_tanh(x.data(), y.data(), n);
            f.gelu_tanh_backward(g.data(), x.data(), dx.data(), n);
          }},
      {"silu", [&] {
         f.silu(x.data(), y.data(), n);
         f.silu_backward(g.data(), x.data(), dx.data(), n);
       }}};
  for (const auto& [name, run] : functions) {
    run();
    for (std::size_t i = 0; i < x.size(); ++i) {
      INFO(vec::capability_name(capability) << (sizeof(T) == 4 ? " float32 " : " float64 ") << name
                                            << " at x = " << static_cast<double>(x[i]));
      CHECK(y[i] == (x[i] > 0 ? x[i] : T(0)));
      CHECK(dx[i] == (x[i] > 0 ? T(1) : T(0)));
    }
  }
}
}  // namespace

TEST_CASE("every copy's gelu, tanh-GELU and silu at huge |x|: x and 0, derivatives 1 and 0",
    "[vector_math]") {
  for (vec::Capability capability : supported_copies()) {
    check_activation_extremes<float>(capability);
    check_activation_extremes<double>(capability);
  }
}

TEST_CASE("exp_shifted: the softmax rows' e^(x - shift), each copy's exp, in place too",
    "[vector_math]") {
  // Every length up to 40 (every tail of every vector width), with the edges among the values:
  // the results must be the copy's exp of x − shift, bit for bit, in a new array and in place;
  // the element after the row must stay as it was (the last partial vector's masked store); and
  // the float64 row std::exp's.
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> edges = {0.0f, -87.5f, -1e6f, -inf, 89.0f, inf,
      std::numeric_limits<float>::quiet_NaN(), 1.0f, -0.125f, 3.5f};
  // (memcmp of an empty vector's data(), a null pointer, is undefined: UBSan reports it.)
  auto same_bits = [](const float* a, const float* b, int64_t n) {
    return n == 0 || std::memcmp(a, b, static_cast<std::size_t>(n) * sizeof(float)) == 0;
  };
  for (vec::Capability capability : supported_copies()) {
    const vec::Functions<float>& f = vec::functions_for(capability, 0.0f);
    for (int64_t n = 0; n <= 40; ++n) {
      const std::size_t size = static_cast<std::size_t>(n);
      std::vector<float> x(size + 1), expected(size), out(size + 1, -1.0f);
      for (std::size_t i = 0; i < size; ++i) x[i] = edges[i % edges.size()] + 2.0f;
      x[size] = 7.0f;  // past the row: neither read into a result nor written
      for (std::size_t i = 0; i < size; ++i) expected[i] = x[i] - 2.0f;
      f.exp(expected.data(), expected.data(), n);
      f.exp_shifted(x.data(), 2.0f, out.data(), n);
      INFO(vec::capability_name(capability) << ", n " << n);
      CHECK(same_bits(out.data(), expected.data(), n));
      CHECK(out[size] == -1.0f);
      f.exp_shifted(x.data(), 2.0f, x.data(), n);  // in place
      CHECK(same_bits(x.data(), expected.data(), n));
      CHECK(x[size] == 7.0f);
    }
  }
  // The rows' entry points run the active copy.
  std::vector<float> x = {1.0f, 2.0f, 3.0f}, expected(3), out(3);
  vec::functions(0.0f).exp_shifted(x.data(), 2.0f, expected.data(), 3);
  ag::detail::exp_shifted(x.data(), 2.0f, out.data(), 3);
  CHECK(out == expected);
  ag::detail::exp_shifted_row(x.data(), 2.0f, x.data(), 3);
  CHECK(x == expected);
  std::vector<double> row = {1.0, 2.0, 3.0, -4.0, 0.5};
  ag::detail::exp_shifted_row(row.data(), 3.0, row.data(), 5);
  CHECK(row ==
        std::vector<double>{std::exp(-2.0), std::exp(-1.0), 1.0, std::exp(-7.0), std::exp(-2.5)});
  // And the values: within the exp's 1 ulp of libm (checked per copy above), e.g. e^(−1).
  float one = 1.0f;
  ag::detail::exp_shifted(&one, 2.0f, &one, 1);
  CHECK(std::fabs(static_cast<double>(one) - std::exp(-1.0)) <= 6e-8);
}

namespace {
template <class T>
void check_exp_shifted_sum(vec::Capability capability) {
  const vec::Functions<T>& f = vec::functions_for(capability, T());
  const T inf = std::numeric_limits<T>::infinity();
  // exps of 1 down to subnormals and 0, and one overflow to inf (89 − 2 in float32 is past 88.7)
  const std::vector<T> edges = {T(2), T(-1), T(-103), T(-1e6), -inf, T(0.5), T(-30), T(-20.25)};
  std::vector<int64_t> lengths;
  for (int64_t n = 0; n <= 140; ++n) lengths.push_back(n);
  for (int64_t n : {511, 512, 1000, 4099}) lengths.push_back(n);
  for (int64_t n : lengths)
    for (std::size_t start : {0, 1, 3}) {  // where the row starts against the vectors
      const std::size_t size = static_cast<std::size_t>(n);
      std::vector<T> x(start + size), expected(start + size), out(start + size);
      for (std::size_t i = 0; i < size; ++i)
        x[start + i] = edges[(i * 7 + start) % edges.size()] - T(0.001) * static_cast<T>(i % 13);
      if (n == 77) x[start + 40] = T(89);  // a sum of inf
      f.exp_shifted(x.data() + start, T(2), expected.data() + start, n);
      const double expected_sum = ag::detail::row_sum_lanes(expected.data() + start, n);
      const double sum = f.exp_shifted_sum(x.data() + start, T(2), out.data() + start, n);
      INFO(vec::capability_name(capability) << ", n " << n << ", start " << start);
      CHECK(out == expected);
      CHECK(std::memcmp(&sum, &expected_sum, sizeof sum) == 0);
    }
}
}  // namespace

TEST_CASE("exp_shifted_sum: exp_shifted's values, and row_sum_lanes' sum of them bit for bit",
    "[vector_math]") {
  // Softmax and cross-entropy take their denominators from it, in the pass that computes the
  // exps: the same bits as the sum of the stored exps, for every length (every tail of every
  // vector width, and long rows), in every copy and both dtypes.
  for (vec::Capability capability : supported_copies()) {
    check_exp_shifted_sum<float>(capability);
    check_exp_shifted_sum<double>(capability);
  }
  // The entry point runs the active copy.
  std::vector<float> x = {1.0f, 2.0f, 3.0f, -4.0f}, expected(4), out(4);
  const double expected_sum =
      vec::functions(0.0f).exp_shifted_sum(x.data(), 2.0f, expected.data(), 4);
  CHECK(ag::detail::exp_shifted_sum(x.data(), 2.0f, out.data(), 4) == expected_sum);
  CHECK(out == expected);
}

TEST_CASE(
    "every copy's last partial vector reads and writes nothing past the array", "[vector_math]") {
  // The tails go through the instruction set's masked load and store (AVX2, AVX-512) or a padded
  // copy: for every length, the element after the array — a NaN — changes no result and is not
  // overwritten, in the one-, two- and three-input loops, both dtypes.
  auto check = [](auto zero) {
    using T = decltype(zero);
    for (vec::Capability capability : supported_copies()) {
      const vec::Functions<T>& f = vec::functions_for(capability, zero);
      for (int64_t n = 1; n <= 40; ++n) {
        const std::size_t size = static_cast<std::size_t>(n);
        std::vector<T> x(size + 1), g(size + 1);
        for (std::size_t i = 0; i < size; ++i) {
          x[i] = T(0.25) * static_cast<T>(i) - T(3);
          g[i] = T(1) + static_cast<T>(i % 3);
        }
        x[size] = g[size] = std::numeric_limits<T>::quiet_NaN();
        std::vector<T> y(size + 1, T(-7)), dx_one(size + 1, T(-7)), dx_two(size + 1, T(-7));
        f.gelu(x.data(), y.data(), n);                                    // x -> y
        f.silu_backward(g.data(), x.data(), dx_one.data(), n);            // (g, x) -> dx
        f.gelu_backward(g.data(), x.data(), y.data(), dx_two.data(), n);  // (g, x, y) -> dx
        INFO(vec::capability_name(capability) << ", n " << n);
        for (std::size_t i = 0; i < size; ++i) {
          CHECK(std::isfinite(y[i]));
          CHECK(std::isfinite(dx_one[i]));
          CHECK(std::isfinite(dx_two[i]));
        }
        CHECK(y[size] == T(-7));
        CHECK(dx_one[size] == T(-7));
        CHECK(dx_two[size] == T(-7));
      }
    }
  };
  check(0.0f);
  check(0.0);
}

TEST_CASE("a vectorised function's result for an element does not depend on where the array starts",
    "[vector_math]") {
  // The kernels take whole vectors and compute the last partial one with zeros in its other lanes:
  // an element gets the same bits at any offset, so any split of a tensor across threads gives the same bits.
  const vec::Functions<float>& f = vec::functions(0.0f);
  std::vector<float> x(203), g(203), whole(203), whole_backward(203);
  for (std::size_t i = 0; i < x.size(); ++i) {
    x[i] = std::sin(0.37f * static_cast<float>(i)) * 6;
    g[i] = std::cos(0.11f * static_cast<float>(i));
  }
  // Each backward from (g, x, y): GELU's reads both, the others x (or y, for tanh).
  using Backward = std::function<void(const float*, const float*, const float*, float*, int64_t)>;
  auto from_x = [](vec::BackwardFn<float> b) -> Backward {
    return [b](const float* g, const float* x, const float*, float* out, int64_t n) {
      b(g, x, out, n);
    };
  };
  for (auto [forward, backward] : std::vector<std::pair<vec::UnaryFn<float>, Backward>>{
           {f.gelu, f.gelu_backward}, {f.silu, from_x(f.silu_backward)},
           {f.gelu_tanh, from_x(f.gelu_tanh_backward)}, {f.tanh, from_x(f.tanh_backward)}}) {
    forward(x.data(), whole.data(), 203);
    backward(g.data(), x.data(), whole.data(), whole_backward.data(), 203);
    for (int64_t start : {1, 3, 7, 16, 17, 100}) {
      for (int64_t length :
          {int64_t{1}, int64_t{5}, int64_t{15}, int64_t{16}, int64_t{33}, 203 - start}) {
        if (start + length > 203) continue;
        std::vector<float> part(static_cast<std::size_t>(length)), part_backward(part.size());
        forward(x.data() + start, part.data(), length);
        backward(
            g.data() + start, x.data() + start, whole.data() + start, part_backward.data(), length);
        INFO("start " << start << ", length " << length);
        CHECK(std::memcmp(part.data(), whole.data() + start, part.size() * sizeof(float)) == 0);
        CHECK(std::memcmp(part_backward.data(), whole_backward.data() + start,
                  part.size() * sizeof(float)) == 0);
      }
    }
  }
}

namespace {
// For every copy: how many points of x get other bits from `function` (a member of Functions,
// such as &Functions<float>::exp) when every 16th element (a lane of every vector, at AVX-512's
// width too) is replaced by one of `spoilers` — the points' own results taken alone, then beside
// the spoilers. A copy whose paths for whole vectors and for mixed ones differ gives some.
void check_lanes_independent(vec::UnaryFn<float> vec::Functions<float>::*function,
    const std::vector<float>& x, const std::vector<float>& spoilers) {
  const int64_t n = static_cast<int64_t>(x.size());
  for (vec::Capability capability : supported_copies()) {
    const vec::UnaryFn<float> f = vec::functions_for(capability, 0.0f).*function;
    std::vector<float> alone(x.size()), beside(x.size()), mixed = x;
    f(x.data(), alone.data(), n);
    for (std::size_t i = 0; i < mixed.size(); i += 16)
      mixed[i] = spoilers[(i / 16) % spoilers.size()];
    f(mixed.data(), beside.data(), n);
    int64_t differing = 0;
    for (std::size_t i = 0; i < x.size(); ++i)
      if (i % 16 != 0 && std::memcmp(&alone[i], &beside[i], sizeof(float)) != 0) ++differing;
    INFO(vec::capability_name(capability));
    CHECK(differing == 0);
  }
}
}  // namespace

TEST_CASE("an element's exp does not depend on the other elements of its vector", "[vector_math]") {
  // The AVX2 copy's float32 exp scales by 2^n with one integer add where every lane's n =
  // round(x / ln 2) is in [−125, 127], and takes the clamp and two-step scaling where a lane's is
  // not: both must give an element the same bits. Every point of a dense sweep over exp's whole
  // finite range is taken alone (its vector all points near it) and beside an out-of-range lane.
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> spoilers = {
      -1000.0f, 1000.0f, -inf, inf, std::numeric_limits<float>::quiet_NaN(), -87.5f, 88.5f};
  std::vector<float> x = linear_sweep<float>(-104.0L, 89.0L, 193'000);
  // Where n steps from −126 to −125 and from 127 to 128, x = (n ± ½) ln 2, and the floats beside.
  for (Real half_integer : {-125.5L, 127.5L}) {
    const float edge = static_cast<float>(half_integer * std::log(2.0L));
    for (float v : {std::nextafter(edge, -inf), edge, std::nextafter(edge, inf)}) x.push_back(v);
  }
  check_lanes_independent(&vec::Functions<float>::exp, x, spoilers);
}

namespace {
// log of one copy at the edges: libm's value at ±0 (−inf), +inf (+inf), the negatives and NaN
// (NaN), 1 (exactly 0), the extremes of the normal range; within 1 ulp over the subnormals.
template <class T>
void check_log_edges(vec::Capability capability) {
  const vec::Functions<T>& f = vec::functions_for(capability, T());
  const T inf = std::numeric_limits<T>::infinity(), nan = std::numeric_limits<T>::quiet_NaN();
  const std::vector<T> x = {T(0), T(-0.0), inf, -inf, nan, T(-1), T(-1e-30), T(1),
      std::numeric_limits<T>::min(), std::numeric_limits<T>::max(),
      std::numeric_limits<T>::denorm_min()};
  std::vector<T> y(x.size());
  f.log(x.data(), y.data(), static_cast<int64_t>(x.size()));
  for (std::size_t i = 0; i < x.size(); ++i) {
    INFO(vec::capability_name(capability)
         << (sizeof(T) == 4 ? " float32" : " float64") << " x = " << static_cast<double>(x[i]));
    const T expected = static_cast<T>(std::log(static_cast<Real>(x[i])));
    if (std::isnan(expected))
      CHECK(std::isnan(y[i]));
    else if (std::isinf(expected) || expected == 0)
      CHECK(y[i] == expected);
    else
      CHECK(
          std::fabs(static_cast<Real>(y[i]) - static_cast<Real>(expected)) <= ulp_of<T>(expected));
  }
  const Real subnormal_error = unary_error<T>(f.log,
      log_sweep<T>(static_cast<Real>(std::numeric_limits<T>::denorm_min()),
          static_cast<Real>(std::numeric_limits<T>::min()), 20001),
      [](Real v) { return std::log(v); });
  INFO(vec::capability_name(capability)
       << (sizeof(T) == 4 ? " float32" : " float64") << " log of the subnormals");
  CHECK(subnormal_error <= 1);
}
}  // namespace

TEST_CASE("every copy's log at the edges: zeros, infinities, negatives, NaN, subnormals",
    "[vector_math]") {
  for (vec::Capability capability : supported_copies()) {
    check_log_edges<float>(capability);
    check_log_edges<double>(capability);
  }
}

TEST_CASE("an element's log does not depend on the other elements of its vector", "[vector_math]") {
  // The AVX2 copy's float32 log takes a shorter path where every lane is a positive normal float,
  // and scales subnormals and sorts out special values where a lane is not: both must give an
  // element the same bits. Every point of a dense sweep over the normal floats is taken alone and
  // beside a zero, a negative, an infinity, a NaN or a subnormal.
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> spoilers = {
      0.0f, -1.0f, inf, std::numeric_limits<float>::quiet_NaN(), 1e-40f, -0.0f, -inf};
  std::vector<float> x = log_sweep<float>(static_cast<Real>(std::numeric_limits<float>::min()),
      static_cast<Real>(std::numeric_limits<float>::max()), 193'000);
  check_lanes_independent(&vec::Functions<float>::log, x, spoilers);
}

TEST_CASE("the AVX-512 and AVX2 copies give float32's exp and log the same bits", "[vector_math]") {
  // Both copies take the same steps in the same order (vector_math_avx512.cpp), so that a model
  // trains to the same bits on either kind of CPU as far as its exps and logs go. Every 251st float
  // bit pattern (17 million, of every sign and binade, the special values among them), and where
  // exp's n = round(x / ln 2) is closest to a tie: the floats nearest (n + ½) ln 2, n in
  // [−151, 128], and the four on each side (a rounding of x / ln 2 before n's own moves n there).
  if (!vec::supported(vec::Capability::avx512) || !vec::supported(vec::Capability::avx2)) {
    WARN("this CPU does not run both the AVX-512 and the AVX2 copy: nothing to compare");
    return;
  }
  std::vector<float> x;
  for (uint64_t bits = 0; bits < (uint64_t{1} << 32); bits += 251) {
    const uint32_t pattern = static_cast<uint32_t>(bits);
    float v;
    std::memcpy(&v, &pattern, sizeof v);
    x.push_back(v);
  }
  for (int n = -151; n <= 128; ++n) {
    float v = static_cast<float>((n + 0.5L) * std::log(2.0L));
    for (int step = 0; step < 4; ++step) v = std::nextafter(v, -INFINITY);
    for (int step = 0; step < 9; ++step, v = std::nextafter(v, INFINITY)) x.push_back(v);
  }
  const int64_t count = static_cast<int64_t>(x.size());
  for (auto [name, function] : {std::pair{"exp", &vec::Functions<float>::exp},
           std::pair{"log", &vec::Functions<float>::log}}) {
    std::vector<float> wide(x.size()), narrow(x.size());
    (vec::functions_for(vec::Capability::avx512, 0.0f).*function)(x.data(), wide.data(), count);
    (vec::functions_for(vec::Capability::avx2, 0.0f).*function)(x.data(), narrow.data(), count);
    int64_t differing = 0;
    for (std::size_t i = 0; i < x.size(); ++i) {
      const bool both_nan = std::isnan(wide[i]) && std::isnan(narrow[i]);
      if (!both_nan && std::memcmp(&wide[i], &narrow[i], sizeof(float)) != 0) {
        if (differing++ < 5)
          UNSCOPED_INFO(name << '(' << x[i] << "): AVX-512 " << wide[i] << ", AVX2 " << narrow[i]);
      }
    }
    INFO(name << " over " << count << " floats");
    CHECK(differing == 0);
  }
}

namespace {
// Each activation ag computes with the vectorised functions, as an op.
std::vector<std::pair<std::string, std::function<ag::Tensor(const ag::Tensor&)>>> activations() {
  return {{"exp", [](const ag::Tensor& x) { return ag::exp(x); }},
      {"log", [](const ag::Tensor& x) { return ag::log(ag::abs(x) + 0.5); }},
      {"tanh", [](const ag::Tensor& x) { return ag::tanh(x); }},
      {"sigmoid", [](const ag::Tensor& x) { return ag::sigmoid(x); }},
      {"silu", [](const ag::Tensor& x) { return ag::silu(x); }},
      {"gelu", [](const ag::Tensor& x) { return ag::gelu(x); }},
      {"gelu_tanh", [](const ag::Tensor& x) { return ag::gelu(x, "tanh"); }}};
}
}  // namespace

TEST_CASE("the activations give the same bits on a strided tensor and with a broadcast gradient",
    "[vector_math]") {
  // A transposed input goes through a buffer, a sum's gradient (one value, expanded) through a
  // filled block: the same numbers as a contiguous input and a materialised gradient.
  for (ag::DType dtype : {ag::float32, ag::float64}) {
    ag::Generator generator(5);
    const ag::Tensor x = ag::randn({37, 300}, generator, dtype) * 3.0;  // (37, 300)
    for (const auto& [name, f] : activations()) {
      INFO(name << ' ' << ag::dtype_name(dtype));
      const ag::Tensor transposed = x.transpose(0, 1);  // (300, 37), strided
      CHECK(same_bits(f(transposed), f(transposed.contiguous())));

      ag::Tensor a = x.detach().requires_grad_(true), b = x.detach().requires_grad_(true);
      ag::sum(f(a)).backward();  // the gradient reaching f: 1, expanded from a scalar
      ag::sum(ag::mul(f(b), ag::ones_like(b))).backward();  // 1, a contiguous tensor of ones
      CHECK(same_bits(a.grad(), b.grad()));
    }
  }
}

TEST_CASE("AG_CPU_CAPABILITY picks the copy of the math every op uses", "[.cpu_capability_env]") {
  const char* value = std::getenv("AG_CPU_CAPABILITY");
  REQUIRE(value != nullptr);
  if (std::getenv("AG_CPU_CAPABILITY_EXPECT_ERROR") != nullptr) {
    // A copy this CPU cannot run, or no copy at all: an error naming the variable, its value and
    // the copies it can (the portable scalar one always).
    CHECK_THROWS_MATCHES(vec::active_capability(), ag::ValueError,
        WhatContains({std::string("AG_CPU_CAPABILITY=") + value, "scalar"}));
    CHECK_THROWS_MATCHES(
        ag::gelu(ag::ones({3})), ag::ValueError, WhatContains({"AG_CPU_CAPABILITY"}));
    return;
  }
  CHECK(std::string(vec::capability_name(vec::active_capability())) == value);
  // ag::gelu computes with that copy, bit for bit.
  ag::Generator generator(3);
  const ag::Tensor x = ag::randn({1000}, generator);
  const std::vector<float> in = x.to_vector<float>();
  std::vector<float> expected(in.size());
  vec::functions_for(vec::active_capability(), 0.0f).gelu(in.data(), expected.data(), 1000);
  const std::vector<float> got = ag::gelu(x).to_vector<float>();
  CHECK(std::memcmp(got.data(), expected.data(), got.size() * sizeof(float)) == 0);
}
