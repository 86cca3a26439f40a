// rotary_embedding (ops_rotary.cpp): what the rotation must satisfy whatever the angles — turning
// back by −θ gives x again, every pair keeps its length, the two pairings are one function of
// permuted features, partial rotary passes the other features on bit for bit, the backward is the
// rotation by −θ — the layout of its output and gradient (a head view's, for ag::attention), and
// its errors. (Gradients against finite differences: test_gradcheck_ops.cpp; values against
// Llama's and GPT-NeoX's code: test_ops_torch.cpp.)
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "autograd/autograd.h"
#include "autograd/ops.h"
#include "tensor_compare.h"
#include "what_contains.h"

using namespace ag;
using Catch::Matchers::Equals;

namespace {

// Angles θ (T, half) uniform in [−40, 40) (many turns), and their cosines and sines in `dtype`.
struct Angles {
  Tensor theta, cos, sin;
};
Angles random_angles(int64_t T, int64_t half, uint64_t seed, DType dtype = float64) {
  Generator generator(seed);
  Tensor theta = uniform({T, half}, -40.0, 40.0, generator, float64);
  return {theta, ag::cos(theta).to(dtype), ag::sin(theta).to(dtype)};
}

// The features of a (..., d) tensor reordered so that the interleaved pairs (2j, 2j+1) of the
// first r become the halves' pairs (j, j + r/2): [x0, x2, x4, ..., x1, x3, x5, ..., x_r, ...].
Tensor interleaved_to_halves(const Tensor& x, int64_t r) {
  std::vector<int64_t> order;
  for (int64_t i = 0; i < r; i += 2) order.push_back(i);
  for (int64_t i = 1; i < r; i += 2) order.push_back(i);
  for (int64_t i = r; i < x.size(-1); ++i) order.push_back(i);
  return index_select(x, -1, order);
}

}  // namespace

TEST_CASE("rotary_embedding: turning by θ, then by −θ, gives x back — each pair keeps its length",
    "[rotary]") {
  for (RotaryPairs pairs : {RotaryPairs::interleaved, RotaryPairs::halves}) {
    INFO((pairs == RotaryPairs::interleaved ? "interleaved" : "halves"));
    Generator generator(3);
    const Tensor x = randn({2, 3, 5, 8}, generator, float64);  // (B, H, T, d)
    const Angles a = random_angles(5, 4, 4);
    const Tensor y = rotary_embedding(x, a.cos, a.sin, pairs);
    const Tensor back = rotary_embedding(y, a.cos, neg(a.sin), pairs);  // R(−θ) R(θ) = I
    CHECK(max_abs_diff(back, x) <= 1e-14);
    CHECK(max_abs_diff(y, x) > 0.1);  // (it did turn them)
    // |R(θ) (a, b)|² = a² + b² for every pair: the interleaved pairs are (2j, 2j+1), the halves'
    // (j, j + 4); the squared lengths of the pairs, (..., 4), before and after.
    auto pair_lengths = [&](const Tensor& t) {
      const Tensor first =
          pairs == RotaryPairs::interleaved ? slice(t, -1, 0, 8, 2) : narrow(t, -1, 0, 4);
      const Tensor second =
          pairs == RotaryPairs::interleaved ? slice(t, -1, 1, 8, 2) : narrow(t, -1, 4, 4);
      return first * first + second * second;
    };
    CHECK(max_abs_diff(pair_lengths(y), pair_lengths(x)) <= 1e-14);
  }
}

TEST_CASE("rotary_embedding: the two pairings are one function of permuted features", "[rotary]") {
  // Interleaved pairs (2j, 2j+1), gathered as [evens, odds], are the halves' pairs (j, j + r/2):
  // turning either way and gathering gives the same numbers, bit for bit (each element is the same
  // a cos θ − b sin θ or a sin θ + b cos θ). Full (r = d = 8) and partial (r = 4 of d = 7) rotary.
  for (const auto& [d, r] : {std::pair<int64_t, int64_t>{8, 8}, {7, 4}}) {
    for (DType dtype : {float64, float32}) {
      INFO("d " << d << ", r " << r << ", " << dtype_name(dtype));
      Generator generator(5);
      const Tensor x = randn({2, 6, d}, generator, dtype);
      const Angles a = random_angles(6, r / 2, 6, dtype);
      const Tensor interleaved = rotary_embedding(x, a.cos, a.sin, RotaryPairs::interleaved);
      const Tensor halves =
          rotary_embedding(interleaved_to_halves(x, r), a.cos, a.sin, RotaryPairs::halves);
      CHECK(
          interleaved_to_halves(interleaved, r).to_vector<double>() == halves.to_vector<double>());
    }
  }
}

TEST_CASE(
    "rotary_embedding: the pairs as the formula says, the features past r passed on", "[rotary]") {
  // One row of d = 5 at one position, r = 4: pairs (0, 1), (2, 3) interleaved, (0, 2), (1, 3)
  // halves, and feature 4 unchanged.
  const double t0 = 0.3, t1 = -2.1;
  const Tensor c = tensor({std::cos(t0), std::cos(t1)}, {1, 2}, float64);
  const Tensor s = tensor({std::sin(t0), std::sin(t1)}, {1, 2}, float64);
  const Tensor x = tensor({1.5, -0.5, 2.0, 0.25, 7.0}, {1, 5}, float64);
  auto turn = [](double a, double b, double theta) {
    return std::pair{
        a * std::cos(theta) - b * std::sin(theta), a * std::sin(theta) + b * std::cos(theta)};
  };
  const auto [i0, i1] = turn(1.5, -0.5, t0);
  const auto [i2, i3] = turn(2.0, 0.25, t1);
  const std::vector<double> interleaved =
      rotary_embedding(x, c, s, RotaryPairs::interleaved).to_vector<double>();
  const std::vector<double> expected_interleaved = {i0, i1, i2, i3, 7.0};
  for (std::size_t i = 0; i < 5; ++i)
    CHECK(interleaved[i] == Approx(expected_interleaved[i]).margin(1e-15));
  const auto [h0, h2] = turn(1.5, 2.0, t0);
  const auto [h1, h3] = turn(-0.5, 0.25, t1);
  const std::vector<double> halves =
      rotary_embedding(x, c, s, RotaryPairs::halves).to_vector<double>();
  const std::vector<double> expected_halves = {h0, h1, h2, h3, 7.0};
  for (std::size_t i = 0; i < 5; ++i) CHECK(halves[i] == Approx(expected_halves[i]).margin(1e-15));
  CHECK(interleaved[4] == 7.0);  // passed on, exactly
  CHECK(halves[4] == 7.0);
}

TEST_CASE("rotary_embedding: the backward is the rotation by −θ, laid out like x", "[rotary]") {
  // x the head view (B, H, T, d) of a (B, T, H·d) projection, as attention turns it: the output
  // and x's gradient are laid out as x is ((B, T, H, d) memory), and the gradient is
  // rotary_embedding(g, cos, −sin) — R(θ)ᵀ = R(−θ) — to the last bit.
  for (RotaryPairs pairs : {RotaryPairs::interleaved, RotaryPairs::halves}) {
    Generator generator(8);
    const int64_t B = 2, T = 5, H = 3, d = 6;
    const Tensor projection = randn({B, T, H * d}, generator, float64).requires_grad_();
    const Tensor heads = projection.reshape({B, T, H, d}).permute({0, 2, 1, 3});  // (B, H, T, d)
    const Angles a = random_angles(T, 2, 9);                                      // r = 4 of d = 6
    const Tensor y = rotary_embedding(heads, a.cos, a.sin, pairs);
    CHECK(y.strides() == heads.strides());
    CHECK(y.permute({0, 2, 1, 3}).is_contiguous());  // (B, T, H, d) memory: joining heads is a view
    const Tensor g = randn({B, H, T, d}, generator, float64);
    Tensor dx;  // the gradient the op hands to the permute
    {
      BackwardObserverGuard observe([&](const Node& node, const Tensor&, const Grads& grads) {
        if (std::string(node.name()) == "rotary_embedding") dx = grads[0];
      });
      y.backward(g);
    }
    REQUIRE(dx.defined());
    CHECK(dx.strides() == heads.strides());
    const Tensor expected = rotary_embedding(g, a.cos, neg(a.sin), pairs);
    CHECK(dx.to_vector<double>() == expected.to_vector<double>());
    CHECK(projection.grad().to_vector<double>() ==
          expected.permute({0, 2, 1, 3}).reshape({B, T, H * d}).to_vector<double>());
  }
}

TEST_CASE("rotary_embedding: the backward reads its gradient in any layout", "[rotary]") {
  // rotary_embedding's node keeps the gradient it is handed as it is (autograd.cpp's
  // reads_any_gradient_layout): a sum's, one 1 expanded over every element (all strides 0); one
  // expanded along the batch only; one whose features are strided (a transposed g). Each must give
  // what the rotation by −θ of the same gradient written out gives, to the last bit.
  for (RotaryPairs pairs : {RotaryPairs::interleaved, RotaryPairs::halves}) {
    INFO((pairs == RotaryPairs::interleaved ? "interleaved" : "halves"));
    Generator generator(12);
    const int64_t B = 2, T = 5, H = 3, d = 8;
    const Tensor projection = randn({B, T, H * d}, generator, float64).requires_grad_();
    const Angles a = random_angles(T, 3, 13);  // r = 6 of d = 8
    const Tensor w = randn({H, T, d}, generator, float64);
    const Tensor g_t = randn({B, H, d, T}, generator, float64);
    struct Case {
      const char* name;
      std::function<void(const Tensor& y)> backward;
      Tensor g;  // the gradient y receives, written out
    };
    const std::vector<Case> cases = {
        {"sum", [](const Tensor& y) { y.sum().backward(); }, ones({B, H, T, d}, float64)},
        {"batch-expanded", [&](const Tensor& y) { (y.sum(0) * w).sum().backward(); },
            contiguous(expand(w, {B, H, T, d}))},
        {"transposed", [&](const Tensor& y) { y.backward(g_t.transpose(-1, -2)); },
            contiguous(g_t.transpose(-1, -2))},
    };
    for (const Case& c : cases) {
      INFO(c.name);
      const Tensor heads = projection.reshape({B, T, H, d}).permute({0, 2, 1, 3});  // (B, H, T, d)
      const Tensor y = rotary_embedding(heads, a.cos, a.sin, pairs);
      Tensor seen, dx;  // the gradient the op is handed, and the one it hands on
      {
        BackwardObserverGuard observe([&](const Node& node, const Tensor& g, const Grads& grads) {
          if (std::string(node.name()) == "rotary_embedding") seen = g, dx = grads[0];
        });
        c.backward(y);
      }
      REQUIRE(dx.defined());
      if (std::string(c.name) == "sum") CHECK(seen.strides() == Shape{0, 0, 0, 0});  // kept
      if (std::string(c.name) == "transposed") CHECK(seen.strides().back() != 1);
      CHECK(dx.strides() == heads.strides());
      CHECK(dx.to_vector<double>() ==
            rotary_embedding(c.g, a.cos, neg(a.sin), pairs).to_vector<double>());
    }
  }
}

TEST_CASE("rotary_embedding: other layouts, empty tensors, no graph without grad", "[rotary]") {
  Generator generator(10);
  const Angles a = random_angles(4, 3, 11);
  // A slice (not dense): a contiguous output with the same values as the slice's copy.
  const Tensor wide = randn({2, 4, 9}, generator, float64);
  const Tensor part = narrow(wide, -1, 1, 7);  // (2, 4, 7), rows 9 apart
  const Tensor y = rotary_embedding(part, a.cos, a.sin);
  CHECK(y.is_contiguous());
  CHECK(y.to_vector<double>() ==
        rotary_embedding(contiguous(part), a.cos, a.sin).to_vector<double>());
  // Broadcast rows (stride 0): each copy turned alike.
  const Tensor row = randn({1, 4, 6}, generator, float64);
  const Tensor expanded = rotary_embedding(expand(row, {3, 4, 6}), a.cos, a.sin);
  CHECK(expanded.to_vector<double>() ==
        rotary_embedding(contiguous(expand(row, {3, 4, 6})), a.cos, a.sin).to_vector<double>());
  // T = 0 and a batch of 0 rows.
  CHECK(rotary_embedding(zeros({2, 0, 6}, float64), zeros({0, 3}, float64), zeros({0, 3}, float64))
            .shape() == Shape{2, 0, 6});
  CHECK(rotary_embedding(zeros({0, 4, 6}, float64), a.cos, a.sin).shape() == Shape{0, 4, 6});
  // x without grad: nothing recorded.
  CHECK_FALSE(rotary_embedding(row, a.cos, a.sin).requires_grad());
  CHECK(rotary_embedding(row.detach().requires_grad_(), a.cos, a.sin).grad_fn()->name() ==
        std::string("rotary_embedding"));
}

TEST_CASE("rotary_embedding: errors name the op and the shapes", "[rotary][errors]") {
  const Tensor x = ones({2, 3, 8}, float64), c = ones({3, 4}, float64), s = zeros({3, 4}, float64);
  CHECK_NOTHROW(rotary_embedding(x, c, s));
  CHECK_THROWS_MATCHES(
      rotary_embedding(x.to(int64), c, s), DTypeError, WhatContains({"rotary_embedding", "int64"}));
  CHECK_THROWS_WITH(rotary_embedding(x, c.to(float32), s),
      Equals("rotary_embedding: cos (float32) and sin (float64) must have x's dtype float64 (x of "
             "shape [2,3,8]); convert them first"));
  CHECK_THROWS_AS(rotary_embedding(x, c, s.to(float32)), DTypeError);
  CHECK_THROWS_WITH(rotary_embedding(ones({8}, float64), ones({1, 4}, float64), s),
      Equals("rotary_embedding: x of shape [8] is not (..., T, d)"));
  CHECK_THROWS_WITH(rotary_embedding(x, ones({4, 4}, float64), zeros({4, 4}, float64)),
      Equals("rotary_embedding: cos of shape [4,4] and sin of shape [4,4] must both be (T, r/2) "
             "with T = 3 for x of shape [2,3,8]"));
  CHECK_THROWS_WITH(rotary_embedding(x, c, zeros({3, 3}, float64)),
      Equals("rotary_embedding: cos of shape [3,4] and sin of shape [3,3] must both be (T, r/2) "
             "with T = 3 for x of shape [2,3,8]"));
  CHECK_THROWS_AS(
      rotary_embedding(x, ones({3, 4, 1}, float64), zeros({3, 4, 1}, float64)), ShapeError);
  CHECK_THROWS_WITH(rotary_embedding(x, ones({3, 5}, float64), zeros({3, 5}, float64)),
      Equals("rotary_embedding: cos and sin of shape [3,5] turn r = 10 features, but x of shape "
             "[2,3,8] has d = 8 (0 < r <= d is needed)"));
  CHECK_THROWS_AS(rotary_embedding(x, ones({3, 0}, float64), zeros({3, 0}, float64)), ShapeError);
  // cos and sin are not differentiated: one that requires grad is refused, not silently dropped.
  CHECK_THROWS_WITH(rotary_embedding(x, c.detach().requires_grad_(), s),
      Equals("rotary_embedding: cos requires grad, but cos and sin are not differentiated (their "
             "gradient would be dropped); pass them detached"));
  CHECK_THROWS_MATCHES(rotary_embedding(x, c, s.detach().requires_grad_()), ValueError,
      WhatContains({"rotary_embedding: sin requires grad"}));
  CHECK_THROWS_AS(rotary_embedding(x, Tensor(), s), ValueError);
}
