// Anomaly mode: the first op whose forward output holds a NaN, or whose backward gradient holds a
// NaN or Inf, throws, naming the op, its shapes and the direction.
#include <catch2/catch.hpp>

#include <cmath>

#include "autograd/autograd.h"
#include "autograd/ops.h"
#include "what_contains.h"

using namespace ag;
using Catch::Matchers::Contains;

TEST_CASE("anomaly mode: log of a negative number fails in forward, naming log and its shapes",
    "[autograd][anomaly]") {
  Tensor x = tensor({1.0, -1.0, 2.0}, float64).requires_grad_();
  {
    Tensor y = log(x);  // off: a NaN passes silently
    CHECK(std::isnan(y.to_vector<double>()[1]));
  }
  AnomalyModeGuard anomaly;
  CHECK_THROWS_MATCHES(log(x), AutogradError,
      WhatContains(
          {"anomaly mode: forward of 'log'", "inputs [3] -> output [3]", "NaN at element 1"}));
}

TEST_CASE("anomaly mode: 0/0 in forward names div and both input shapes", "[autograd][anomaly]") {
  Tensor a = zeros({2, 2}, float64).requires_grad_();
  Tensor b = zeros({2}, float64);
  AnomalyModeGuard anomaly;
  CHECK_THROWS_MATCHES(a / b, AutogradError,
      WhatContains({"forward of 'div'", "inputs [2,2], [2] -> output [2,2]", "NaN at element 0"}));
  CHECK_NOTHROW(a + b);  // finite outputs pass
}

TEST_CASE("anomaly mode: a backward that produces Inf (sqrt at 0) names the op and the input",
    "[autograd][anomaly]") {
  Tensor x = tensor({4.0, 0.0}, float64).requires_grad_();
  {
    sqrt(x).sum().backward();  // off: d√x/dx = 1/(2√x) = +Inf at 0 lands in .grad
    CHECK(std::isinf(x.grad().to_vector<double>()[1]));
    x.zero_grad();
  }
  AnomalyModeGuard anomaly;
  Tensor y = sqrt(x).sum();  // forward is finite: √0 = 0
  CHECK_THROWS_MATCHES(y.backward(), AutogradError,
      WhatContains({"anomaly mode: backward of 'sqrt'", "inputs [2] -> output [2]",
          "+Inf at element 1", "gradient for its input 0"}));
  CHECK_FALSE(x.grad().defined());  // it stopped before anything reached the leaf
}

TEST_CASE("anomaly mode: an infinity in forward is no anomaly, a NaN from it still is",
    "[autograd][anomaly]") {
  // nanoGPT's causal mask: masked_fill with -inf, then softmax (the -inf become 0).
  Tensor scores = tensor({1.0, 2.0, 3.0, 4.0}, {2, 2}, float64).requires_grad_();
  const Tensor future = tensor({0.0, 1.0, 0.0, 0.0}, {2, 2}, float64);
  AnomalyModeGuard anomaly;
  Tensor weights;
  CHECK_NOTHROW(weights = softmax(masked_fill(scores, future, -INFINITY), -1));
  CHECK_NOTHROW(weights.sum().backward());
  CHECK(scores.grad().defined());
  // inf − inf is a NaN: caught where it is born.
  Tensor big = tensor({INFINITY}, float64).requires_grad_();
  CHECK_THROWS_MATCHES(
      big - INFINITY, AutogradError, WhatContains({"forward of 'add_scalar'", "NaN at element 0"}));
}

TEST_CASE("AnomalyModeGuard restores the previous mode and leaves finite graphs alone",
    "[autograd][anomaly]") {
  CHECK_FALSE(AnomalyMode::is_enabled());
  {
    AnomalyModeGuard on;
    CHECK(AnomalyMode::is_enabled());
    {
      AnomalyModeGuard off(false);
      CHECK_FALSE(AnomalyMode::is_enabled());
    }
    CHECK(AnomalyMode::is_enabled());
    Tensor x = tensor({0.5, 2.0}, float64).requires_grad_();
    CHECK_NOTHROW((log(x) * tanh(x)).sum().backward());
    CHECK(x.grad().defined());
  }
  CHECK_FALSE(AnomalyMode::is_enabled());
}
