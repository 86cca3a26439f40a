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

// ---- every problem listed, unused inputs, non-deterministic f ---------------------------------

TEST_CASE("gradcheck lists every failing element, up to max_failures, and counts them all",
    "[gradcheck]") {
  Tensor x = tensor({1.0, 2.0, 3.0, 4.0}, {2, 2}, float64).requires_grad_();
  auto f = [](const std::vector<Tensor>& in) {  // wrong: 3x instead of 2x, at every element
    return square_with_backward(
        in[0], [in](const Tensor& g, const NeedsGrad&) -> Grads { return {g * in[0] * 3.0}; });
  };
  GradcheckResult all = gradcheck(f, {x});
  CHECK_FALSE(all);
  CHECK(all.failed_elements == 4);
  for (const char* element : {"element [0,0]", "element [0,1]", "element [1,0]", "element [1,1]"})
    CHECK_THAT(all.message, Contains(element));
  CHECK_THAT(all.message, Contains("4 element(s) out of tolerance"));

  GradcheckOptions two;
  two.max_failures = 2;
  GradcheckResult first_two = gradcheck(f, {x}, two);
  CHECK(first_two.failed_elements == 4);
  CHECK_THAT(first_two.message, Contains("the first 2 listed") && Contains("element [0,1]"));
  CHECK_THAT(first_two.message, !Contains("element [1,0]"));
}

TEST_CASE("gradcheck reports an input f does not use, unless allow_unused", "[gradcheck]") {
  Tensor used = randn({3}, float64).requires_grad_();
  Tensor unused = randn({2}, float64).requires_grad_();
  auto f = [](const std::vector<Tensor>& in) { return exp(in[0]); };
  GradcheckResult result = gradcheck(f, {used, unused});
  CHECK_FALSE(result);
  CHECK(result.failed_elements == 0);
  CHECK_THAT(result.message, Contains("0 element(s) out of tolerance; 1 other problem(s)"));
  CHECK_THAT(result.message, Contains("input 1 (shape [2])") &&
                                 Contains("f does not depend on it") && Contains("allow_unused") &&
                                 !Contains("input 0"));
  GradcheckOptions allow;
  allow.allow_unused = true;
  CHECK(gradcheck(f, {used, unused}, allow));
}

TEST_CASE("gradcheck names a non-deterministic f instead of failing with noise", "[gradcheck]") {
  Tensor x = randn({4}, float64).requires_grad_();
  Generator generator(7);  // shared across calls: each evaluation draws a different mask
  auto dropout_f = [&](const std::vector<Tensor>& in) {
    return dropout(in[0], 0.5, true, generator);
  };
  GradcheckResult result = gradcheck(dropout_f, {x});
  CHECK_FALSE(result);
  CHECK_THAT(result.message, Contains("not deterministic") && Contains("reseed"));
  // Reseeded inside f, the same mask every time: a real check, which passes.
  auto reseeded = [](const std::vector<Tensor>& in) {
    Generator fresh(7);
    return dropout(in[0], 0.5, true, fresh);
  };
  CHECK(gradcheck(reseeded, {x}));
}

// ---- gradcheck_parameters: tensors f reads itself, perturbed in place --------------------------

namespace {
// A "layer" holding its own weight: f() = w² · x, with a backward for w of the caller's choice.
struct SquareLayer {
  Tensor weight = tensor({0.5, -1.5, 2.0}, {3}, float64).requires_grad_();
  Tensor x = tensor({1.0, 2.0, 3.0}, {3}, float64);
  double factor = 2.0;  // d(w²)/dw = 2w; anything else is a wrong backward
  Tensor forward() const {
    return square_with_backward(weight,
               [w = weight, f = factor](
                   const Tensor& g, const NeedsGrad&) -> Grads { return {g * w * f}; }) *
           x;
  }
};
}  // namespace

TEST_CASE("gradcheck_parameters checks the tensors f reads, by name", "[gradcheck]") {
  SquareLayer layer;
  const NamedTensors parameters = {{"square.weight", layer.weight}};
  CHECK(gradcheck_parameters([&] { return layer.forward(); }, parameters));
  layer.factor = 3.0;
  GradcheckResult wrong = gradcheck_parameters([&] { return layer.forward(); }, parameters);
  CHECK_FALSE(wrong);
  CHECK(wrong.failed_elements == 3);
  CHECK_THAT(wrong.message, Contains("parameter square.weight (shape [3]) at element [2]"));
}

TEST_CASE(
    "gradcheck with copies of parameters f does not read is reported, not passed", "[gradcheck]") {
  // The mistake gradcheck_parameters exists for: f reads the layer's own weight, so the copies
  // gradcheck hands it change nothing.
  SquareLayer layer;
  GradcheckResult result =
      gradcheck([&](const std::vector<Tensor>&) { return layer.forward(); }, {layer.weight});
  CHECK_FALSE(result);
  CHECK_THAT(result.message, Contains("input 0") && Contains("f does not depend on it"));
}

TEST_CASE("gradcheck_parameters restores values and gradients, also when f throws", "[gradcheck]") {
  SquareLayer layer;
  const Tensor old_grad = tensor({7.0, 8.0, 9.0}, {3}, float64);
  layer.weight.set_grad(old_grad);
  const std::vector<double> before = layer.weight.to_vector<double>();
  CHECK(gradcheck_parameters([&] { return layer.forward(); }, {{"w", layer.weight}}));
  CHECK(layer.weight.to_vector<double>() == before);
  CHECK(layer.weight.grad().to_vector<double>() == std::vector<double>{7.0, 8.0, 9.0});

  int calls = 0;  // throws in the middle of the finite differences
  auto throws_later = [&] {
    if (++calls == 5) throw std::runtime_error("f failed");
    return layer.forward();
  };
  CHECK_THROWS_WITH(gradcheck_parameters(throws_later, {{"w", layer.weight}}), "f failed");
  CHECK(layer.weight.to_vector<double>() == before);
  CHECK(layer.weight.grad().to_vector<double>() == std::vector<double>{7.0, 8.0, 9.0});
}

TEST_CASE(
    "gradcheck_parameters skips frozen tensors and refuses float32 ones by name", "[gradcheck]") {
  SquareLayer layer;
  Tensor frozen = randn({2}, float64);  // requires no grad: skipped, not reported as unused
  CHECK(gradcheck_parameters(
      [&] { return layer.forward(); }, {{"w", layer.weight}, {"frozen", frozen}}));
  CHECK_THROWS_AS(
      gradcheck_parameters([&] { return layer.forward(); }, {{"frozen", frozen}}), ValueError);
  Tensor single = randn({2}).requires_grad_();
  CHECK_THROWS_AS(
      gradcheck_parameters([&] { return single * 2.0; }, {{"half.weight", single}}), DTypeError);
  CHECK_THROWS_WITH(gradcheck_parameters([&] { return single * 2.0; }, {{"half.weight", single}}),
      Contains("parameter half.weight") && Contains("float32") && Contains("to(ag::float64)"));
}
