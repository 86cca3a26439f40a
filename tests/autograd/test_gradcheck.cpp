// ag::gradcheck itself: it must pass correct gradients and catch wrong ones, and say where.
#include <catch2/catch.hpp>

#include <sstream>

#include "autograd/autograd.h"
#include "autograd/gradcheck.h"
#include "autograd/ops.h"

using namespace ag;
using Catch::Matchers::Contains;

namespace {
// x² with a backward of the caller's choice.
Tensor square_with_backward(const Tensor& x, BackwardFn backward) {
  Tensor out;
  {
    NoGradGuard no_grad;
    out = x * x;
  }
  return make_op("square", out, {x}, std::move(backward));
}
}  // namespace

TEST_CASE("gradcheck passes a correct gradient", "[gradcheck]") {
  Tensor x = randn({3, 2}, float64).requires_grad_();
  auto f = [](const std::vector<Tensor>& in) {
    return square_with_backward(
        in[0], [in](const Tensor& g, const NeedsGrad&) -> Grads { return {g * in[0] * 2.0}; });
  };
  GradcheckResult result = gradcheck(f, {x});
  CHECK(result);
  CHECK(result.message.empty());
  std::ostringstream printed;
  printed << result;
  CHECK(printed.str() == "gradcheck passed");
}

TEST_CASE("gradcheck catches a wrong gradient and names input, element and values", "[gradcheck]") {
  Tensor x = tensor({1.0, 2.0, 3.0, 4.0}, {2, 2}, float64).requires_grad_();
  auto f = [](const std::vector<Tensor>& in) {
    // Wrong: 3x instead of 2x.
    return square_with_backward(
        in[0], [in](const Tensor& g, const NeedsGrad&) -> Grads { return {g * in[0] * 3.0}; });
  };
  GradcheckResult result = gradcheck(f, {x});
  CHECK_FALSE(result);
  CHECK_THAT(result.message, Contains("input 0") && Contains("shape [2,2]") &&
                                 Contains("element [0,0]") && Contains("analytic") &&
                                 Contains("numeric"));
}

TEST_CASE(
    "gradcheck catches a gradient that is right only for an all-ones upstream", "[gradcheck]") {
  // A backward that ignores g is right when g is all ones; the random upstream exposes it.
  Tensor x = randn({4}, float64).requires_grad_();
  auto f = [](const std::vector<Tensor>& in) {
    return square_with_backward(
        in[0], [in](const Tensor&, const NeedsGrad&) -> Grads { return {in[0] * 2.0}; });
  };
  CHECK_FALSE(gradcheck(f, {x}));
}

TEST_CASE("gradcheck catches a transposed gradient", "[gradcheck]") {
  Tensor a = randn({3, 3}, float64).requires_grad_();
  Tensor b = randn({3, 3}, float64);
  auto f = [b](const std::vector<Tensor>& in) {
    Tensor out;
    {
      NoGradGuard no_grad;
      out = matmul(in[0], b);
    }
    return make_op("bad_matmul", out, {in[0]}, [b](const Tensor& g, const NeedsGrad&) -> Grads {
      return {matmul(g, b)};  // should be g · bᵀ
    });
  };
  CHECK_FALSE(gradcheck(f, {a}));
}

TEST_CASE(
    "gradcheck fails an identically zero gradient even when it is below atol", "[gradcheck]") {
  // f = 1e-7 · x²: the true gradient is tiny (< atol), so only the all-zero rule catches a
  // backward that returns zeros.
  Tensor x = randn({3}, float64).requires_grad_();
  auto f = [](const std::vector<Tensor>& in) {
    Tensor out;
    {
      NoGradGuard no_grad;
      out = in[0] * in[0] * 1e-7;
    }
    return make_op("tiny", out, {in[0]},
        [](const Tensor& g, const NeedsGrad&) -> Grads { return {zeros_like(g)}; });
  };
  GradcheckResult result = gradcheck(f, {x});
  CHECK_FALSE(result);
  CHECK_THAT(result.message, Contains("identically zero"));
}

TEST_CASE("gradcheck checks every input that requires grad and skips the others", "[gradcheck]") {
  Tensor a = randn({2}, float64).requires_grad_();
  Tensor b = randn({2}, float64);  // a constant
  Tensor c = randn({2}, float64).requires_grad_();
  auto wrong_for_c = [](const std::vector<Tensor>& in) {
    Tensor out;
    {
      NoGradGuard no_grad;
      out = in[0] * in[1] * in[2];
    }
    return make_op(
        "triple", out, {in[0], in[1], in[2]}, [in](const Tensor& g, const NeedsGrad&) -> Grads {
          return {g * in[1] * in[2], Tensor(), g * in[0]};  // the last should be g·a·b
        });
  };
  GradcheckResult result = gradcheck(wrong_for_c, {a, b, c});
  CHECK_FALSE(result);
  CHECK_THAT(result.message, Contains("input 2"));
}

TEST_CASE("gradcheck leaves the caller's tensors and gradients untouched", "[gradcheck]") {
  Tensor x = tensor({1.0, 2.0}, float64).requires_grad_();
  const std::vector<double> before = x.to_vector<double>();
  CHECK(gradcheck([](const std::vector<Tensor>& in) { return exp(in[0]); }, {x}));
  CHECK(x.to_vector<double>() == before);
  CHECK_FALSE(x.grad().defined());
}
