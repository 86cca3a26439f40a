// nn::masked_softmax's two paths: the fused op ag::length_masked_softmax (the default) and d2l's
// composed code (nn::masked_softmax_composed) compute the same weights, the same gradients and
// the same errors, in float32 and float64.
#include <stdexcept>

#include "nn_test_util.h"

using namespace ag;
using nn_test::max_abs_diff;
using nn_test::values;

namespace {

struct Case {
  const char* name;
  Shape shape;        // of X, (B, Q, K) unless unmasked
  Tensor valid_lens;  // undefined, (B,) or (B, Q)
  bool transposed;    // X is a non-contiguous view (the transpose of a (B, K, Q) tensor)
};

std::vector<Case> masked_softmax_cases() {
  return {
      {"(B,) lengths with 0 and K", {3, 4, 6}, tensor({6, 0, 2}), false},
      {"(B,Q) lengths with 0, 1 and K", {2, 3, 5}, tensor({1, 5, 3, 0, 2, 4}, {2, 3}), false},
      {"(B,Q) lengths, X a transposed view", {2, 3, 5}, tensor({5, 0, 3, 2, 1, 4}, {2, 3}), true},
      {"no lengths", {2, 3, 7}, Tensor(), false},
      {"no lengths, 4-D X", {2, 2, 3, 5}, Tensor(), false},
      {"rows longer than a vector, (B,) lengths", {2, 3, 41}, tensor({17, 40}), false},
  };
}

struct Run {
  Tensor weights, grad;
};

// masked_softmax on the fused or the composed path; the gradient of Σ weights · upstream.
Run run(const Case& c, DType dtype, bool fused, uint64_t seed) {
  nn::FusedKernelsGuard path(fused);
  Generator generator(seed);
  Shape stored = c.shape;
  if (c.transposed) std::swap(stored[1], stored[2]);
  Tensor leaf = (randn(stored, generator, dtype) * 3.0).requires_grad_();
  Tensor X = c.transposed ? leaf.transpose(1, 2) : leaf;  // c.shape
  Tensor weights = nn::masked_softmax(X, c.valid_lens);
  weights.backward(randn(c.shape, generator, dtype));
  return {weights.detach(), leaf.grad()};
}

}  // namespace

TEST_CASE("masked_softmax: the fused op and d2l's composed code agree in float64",
    "[nn][masked_softmax][fused]") {
  for (const Case& c : masked_softmax_cases()) {
    INFO(c.name);
    const Run fused = run(c, float64, true, 1), composed = run(c, float64, false, 1);
    CHECK(max_abs_diff(fused.weights, composed.weights) <= 1e-15);
    CHECK(max_abs_diff(fused.grad, composed.grad) <= 1e-14);
  }
}

TEST_CASE("masked_softmax: the fused op and d2l's composed code agree in float32",
    "[nn][masked_softmax][fused]") {
  // Both paths run the same row kernel with the same vectorised exp, so the weights agree to the ulp;
  // the gradients differ in float32 rounding only (the fused Σ g·y multiplies in double, the
  // composed mul in float32): a few ulps of gradients of order 1.
  for (const Case& c : masked_softmax_cases()) {
    INFO(c.name);
    const Run fused = run(c, float32, true, 2), composed = run(c, float32, false, 2);
    CHECK(max_abs_diff(fused.weights, composed.weights) <= 1.2e-7);  // one ulp of 1
    CHECK(max_abs_diff(fused.grad, composed.grad) <= 5e-7);
  }
}

TEST_CASE(
    "masked_softmax: masked entries are exactly 0 on both paths, and rows of length 0 get no "
    "gradient",
    "[nn][masked_softmax][fused]") {
  const Case c = masked_softmax_cases()[1];  // (B, Q) lengths {1, 5, 3; 0, 2, 4}, K = 5
  const std::vector<double> lengths = values(c.valid_lens);
  for (bool fused : {true, false}) {
    INFO((fused ? "fused" : "composed"));
    const Run r = run(c, float32, fused, 3);
    const std::vector<double> w = values(r.weights), dx = values(r.grad);
    for (std::size_t row = 0; row < lengths.size(); ++row)
      for (std::size_t k = 0; k < 5; ++k) {
        INFO("row " << row << " k " << k);
        const std::size_t i = row * 5 + k;
        if (lengths[row] == 0) {
          CHECK(w[i] == Approx(0.2).margin(1e-7));
          CHECK(dx[i] == 0.0);
        } else if (k >= lengths[row]) {
          CHECK(w[i] == 0.0);
          CHECK(dx[i] == 0.0);
        }
      }
  }
}

TEST_CASE(
    "masked_softmax: fused_kernels() picks the fused op, FusedKernelsGuard(false) the composed "
    "code",
    "[nn][masked_softmax][fused]") {
  Tensor X = nn_test::randn32({2, 3, 4}, 4).requires_grad_();
  const Tensor valid_lens = tensor({2, 3});
  REQUIRE(nn::fused_kernels());
  CHECK(
      std::string(nn::masked_softmax(X, valid_lens).grad_fn()->name()) == "length_masked_softmax");
  CHECK(std::string(nn::masked_softmax(X).grad_fn()->name()) == "length_masked_softmax");
  nn::FusedKernelsGuard composed(false);
  CHECK(std::string(nn::masked_softmax(X, valid_lens).grad_fn()->name()) == "softmax");
  CHECK(std::string(nn::masked_softmax_composed(X, valid_lens).grad_fn()->name()) == "softmax");
}

TEST_CASE("masked_softmax: bad valid lengths are the same ShapeError, word for word, on both paths",
    "[nn][masked_softmax][fused]") {
  const Tensor X = zeros({2, 3, 5});
  const std::vector<std::pair<Tensor, Tensor>> bad = {
      {X, tensor({1, 2, 3})},                   // (3,): neither (B,) nor (B, Q)
      {X, ones({3, 2})},                        // (Q, B) instead of (B, Q)
      {X, ones({2, 3, 1})},                     // 3-D
      {zeros({2, 5}), ones({2})},               // X not (B, Q, K)
      {X, tensor({-1, 2})},                     // negative
      {X, tensor({2, 6})},                      // > K
      {X, tensor({2.5, 1})},                    // not an integer
      {X, tensor({1, 2, 3, 4, 5, 7}, {2, 3})},  // > K, per query
  };
  auto message = [](bool fused, const Tensor& x, const Tensor& lens) -> std::string {
    nn::FusedKernelsGuard path(fused);
    try {
      nn::masked_softmax(x, lens);
    } catch (const ShapeError& error) {
      return error.what();
    }
    return "(no ShapeError)";
  };
  for (const auto& [x, lens] : bad) {
    INFO("X " << shape_str(x.shape()) << ", valid_lens " << lens.str());
    const std::string fused = message(true, x, lens);
    CHECK(fused.rfind("masked_softmax: ", 0) == 0);
    CHECK(fused == message(false, x, lens));
    CHECK_THROWS_AS(length_masked_softmax(x, lens), ShapeError);
  }
}
