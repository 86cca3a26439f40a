// The float32 exp of the softmax kernels (autograd/detail/fast_exp.h) against double std::exp:
// within 2 ulps over the whole range where e^x is a normal float, and the edge cases exact.
#include <catch2/catch.hpp>

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "autograd/detail/fast_exp.h"

using ag::detail::exp_approx;
using ag::detail::exp_shifted;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
// 2 float ulps relative to the result: an ulp of a float in [1, 2) is 2⁻²³ ≈ 1.19e−7.
constexpr double kMaxRelativeError = 2.4e-7;

// The largest relative error of `approx` against double std::exp over `xs` (where e^x is a
// normal float), with the worst x.
struct Worst {
  double error = 0, x = 0;
  int64_t checked = 0;
};
Worst worst_relative_error(const std::vector<float>& xs, const std::vector<float>& approx) {
  Worst worst;
  for (std::size_t i = 0; i < xs.size(); ++i) {
    const double exact = std::exp(double(xs[i]));
    if (!(exact >= double(FLT_MIN) && exact <= double(FLT_MAX))) continue;
    const double error = std::abs(double(approx[i]) - exact) / exact;
    ++worst.checked;
    if (!(error <= worst.error)) worst = {error, double(xs[i]), worst.checked};
  }
  return worst;
}

// Every x in [low, high] at a fixed step: a dense sweep of the float range of exp.
std::vector<float> sweep(double low, double high, int64_t points) {
  std::vector<float> xs;
  for (int64_t i = 0; i < points; ++i)
    xs.push_back(float(low + (high - low) * double(i) / double(points - 1)));
  return xs;
}

}  // namespace

TEST_CASE("fast exp: within 2 ulps of std::exp over [-90, 89], scalar and array", "[fast_exp]") {
  const std::vector<float> xs = sweep(-90.0, 89.0, 4'000'001);  // a step of 4.5e-5
  std::vector<float> scalar(xs.size()), array(xs.size());
  for (std::size_t i = 0; i < xs.size(); ++i) scalar[i] = exp_approx(xs[i]);
  exp_shifted(xs.data(), 0.0f, array.data(), int64_t(xs.size()));
  for (const auto& [name, values] :
      {std::pair{"exp_approx", &scalar}, std::pair{"exp_shifted", &array}}) {
    const Worst worst = worst_relative_error(xs, *values);
    INFO(name << ": worst relative error " << worst.error << " at x = " << worst.x);
    CHECK(worst.checked > 3'900'000);  // the normal range [-87.34, 88.72] is most of the sweep
    CHECK(worst.error <= kMaxRelativeError);
  }
}

TEST_CASE(
    "fast exp: every 128th float of each binade, and every float at the range ends", "[fast_exp]") {
  // |x| in [2⁻²⁰, 64): 65536 floats per binade and sign, evenly spread over its mantissas.
  std::vector<float> xs;
  for (int exponent = -20; exponent < 6; ++exponent)
    for (uint32_t mantissa = 0; mantissa < (1u << 23); mantissa += 128) {
      const float x = std::ldexp(1.0f + float(mantissa) / float(1u << 23), exponent);
      xs.push_back(x);
      xs.push_back(-x);
    }
  // Every float of the last 0.01 before ln(FLT_MIN) ≈ −87.3365 and ln(FLT_MAX) ≈ 88.7228.
  for (float x = -87.3265f; x > -87.3366f; x = std::nextafter(x, -kInf)) xs.push_back(x);
  for (float x = 88.7128f; x < 88.7229f; x = std::nextafter(x, kInf)) xs.push_back(x);
  std::vector<float> approx(xs.size());
  exp_shifted(xs.data(), 0.0f, approx.data(), int64_t(xs.size()));
  const Worst worst = worst_relative_error(xs, approx);
  INFO(
      "worst relative error " << worst.error << " at x = " << worst.x << " over " << worst.checked);
  CHECK(worst.checked > 2 * 26 * 65536);
  CHECK(worst.error <= kMaxRelativeError);
}

TEST_CASE("fast exp: edge cases", "[fast_exp]") {
  const float ln_flt_min = std::log(FLT_MIN), ln_flt_max = std::log(FLT_MAX);
  const float below_min = std::nextafter(ln_flt_min, -kInf),
              above_max = std::nextafter(ln_flt_max, kInf);
  CHECK(exp_approx(0.0f) == 1.0f);
  CHECK(exp_approx(-0.0f) == 1.0f);
  // Below ln(FLT_MIN): 0 (the d2l fill of −1e6 among them); above ln(FLT_MAX): +inf.
  for (float x : {below_min, -87.5f, -88.0f, -100.0f, -1e6f, -1e30f, -FLT_MAX, -kInf}) {
    INFO("x = " << x);
    CHECK(exp_approx(x) == 0.0f);
  }
  for (float x : {above_max, 88.8f, 89.0f, 100.0f, 1e6f, 1e30f, FLT_MAX, kInf}) {
    INFO("x = " << x);
    CHECK(exp_approx(x) == kInf);
  }
  CHECK(std::isnan(exp_approx(std::numeric_limits<float>::quiet_NaN())));
  // Just inside the range the result is a normal float close to FLT_MIN and FLT_MAX.
  const float smallest = exp_approx(std::nextafter(ln_flt_min, kInf));
  CHECK(smallest >= FLT_MIN);
  CHECK(smallest ==
        Approx(std::exp(double(std::nextafter(ln_flt_min, kInf)))).epsilon(kMaxRelativeError));
  float last_finite = ln_flt_max;  // the largest float whose e^x is at most FLT_MAX
  while (std::exp(double(last_finite)) > double(FLT_MAX))
    last_finite = std::nextafter(last_finite, -kInf);
  const float largest = exp_approx(last_finite);
  CHECK(largest <= FLT_MAX);
  CHECK(largest == Approx(std::exp(double(last_finite))).epsilon(kMaxRelativeError));
  // The array version agrees on all of them, in every position of a vector-width tail.
  const std::vector<float> edges = {0.0f, below_min, -1e6f, -kInf, above_max, kInf,
      std::numeric_limits<float>::quiet_NaN(), 1.0f};
  for (int64_t n = 0; n <= 40; ++n) {
    std::vector<float> xs(static_cast<std::size_t>(n)), out(xs.size(), -1.0f);
    for (std::size_t i = 0; i < xs.size(); ++i) xs[i] = edges[i % edges.size()] + 2.0f;
    exp_shifted(xs.data(), 2.0f, out.data(), n);  // e^(x + 2 − 2)
    for (std::size_t i = 0; i < xs.size(); ++i) {
      const float expected = exp_approx(xs[i] - 2.0f);
      INFO("n " << n << " i " << i << " x " << xs[i] - 2.0f);
      if (std::isnan(expected))
        CHECK(std::isnan(out[i]));
      else
        CHECK(out[i] == Approx(expected).epsilon(kMaxRelativeError));
    }
  }
}

TEST_CASE("fast exp: exp_shifted works in place", "[fast_exp]") {
  std::vector<float> xs = {1.0f, 2.0f, 3.0f, -4.0f, 0.5f};
  exp_shifted(xs.data(), 3.0f, xs.data(), int64_t(xs.size()));
  const std::vector<double> expected = {
      std::exp(-2.0), std::exp(-1.0), 1.0, std::exp(-7.0), std::exp(-2.5)};
  for (std::size_t i = 0; i < xs.size(); ++i)
    CHECK(xs[i] == Approx(expected[i]).epsilon(kMaxRelativeError));
}
