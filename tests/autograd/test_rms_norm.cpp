// rms_norm (ops_norm.cpp, beside layer_norm): its values by hand, PyTorch's default eps (the
// dtype's machine epsilon), its link to layer_norm, and its errors; and the gradient layouts
// layer_norm's backward reads. (Gradients against finite
// differences: test_gradcheck_ops.cpp; against PyTorch: test_ops_torch.cpp; 1 and 2 threads:
// test_parallel.cpp.)
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "autograd/autograd.h"
#include "autograd/ops.h"
#include "what_contains.h"

using namespace ag;
using Catch::Matchers::Equals;

TEST_CASE("rms_norm divides each row by its root mean square, then scales", "[rms_norm]") {
  // Row [1, 2, 3, 4]: mean square 30 / 4 = 7.5; row [0, 0, 0, 0] stays 0 (eps keeps it finite).
  const Tensor x = tensor({1, 2, 3, 4, 0, 0, 0, 0}, {2, 4}, float64);
  const Tensor w = tensor({1, 2, 0.5, -1}, {4}, float64);
  const double s = 1.0 / std::sqrt(7.5 + 1e-6);
  const std::vector<double> y = rms_norm(x, {4}, w, 1e-6).to_vector<double>();
  const std::vector<double> expected = {1 * s, 4 * s, 1.5 * s, -4 * s, 0, 0, 0, 0};
  for (std::size_t i = 0; i < expected.size(); ++i)
    CHECK(y[i] == Approx(expected[i]).epsilon(1e-15));
  // Over two trailing dims: one mean square over the 6 elements of each (2, 3) slice.
  Generator generator(1);
  const Tensor x3 = randn({4, 2, 3}, generator, float64);
  CHECK(rms_norm(x3, {2, 3}).reshape({4, 6}).to_vector<double>() ==
        rms_norm(x3.reshape({4, 6}), {6}).to_vector<double>());
}

TEST_CASE("rms_norm's default eps is the dtype's machine epsilon, as PyTorch's", "[rms_norm]") {
  CHECK(machine_epsilon(float32) == std::ldexp(1.0, -23));  // torch.finfo(torch.float32).eps
  CHECK(machine_epsilon(float64) == std::ldexp(1.0, -52));
  CHECK_THROWS_AS(machine_epsilon(int64), DTypeError);
  Generator generator(2);
  for (DType dtype : {float32, float64}) {
    // Rows of small values, where eps shows: the default equals the explicit machine epsilon,
    // bit for bit, and differs from 1e-5.
    const Tensor x = randn({3, 5}, generator, dtype) * 1e-3;
    const Tensor w = randn({5}, generator, dtype);
    CHECK(rms_norm(x, {5}, w).to_vector<double>() ==
          rms_norm(x, {5}, w, machine_epsilon(dtype)).to_vector<double>());
    CHECK(rms_norm(x, {5}, w).to_vector<double>() != rms_norm(x, {5}, w, 1e-5).to_vector<double>());
  }
  // A zero row with the default eps: 0, not NaN.
  for (double v : rms_norm(zeros({2, 3}), {3}).to_vector<double>()) CHECK(v == 0.0);
}

TEST_CASE("rms_norm of rows with mean 0 is layer_norm without a bias", "[rms_norm]") {
  // σ² = mean((x − μ)²) = mean(x²) when μ = 0: the two normalisations agree (to rounding).
  Generator generator(3);
  Tensor x = randn({6, 8}, generator, float64);
  x = x - mean(x, {-1}, /*keepdim=*/true);  // each row centred
  const Tensor w = randn({8}, generator, float64);
  const std::vector<double> rms = rms_norm(x, {8}, w, 1e-5).to_vector<double>();
  const std::vector<double> ln = layer_norm(x, {8}, w, Tensor(), 1e-5).to_vector<double>();
  for (std::size_t i = 0; i < rms.size(); ++i) CHECK(rms[i] == Approx(ln[i]).epsilon(1e-13));
}

TEST_CASE("rms_norm records one op, saving its input and weight", "[rms_norm]") {
  Generator generator(4);
  const Tensor x = randn({3, 4}, generator, float64).requires_grad_();
  const Tensor w = ones({4}, float64).requires_grad_();
  Tensor y = rms_norm(x, {4}, w);
  REQUIRE(y.grad_fn());
  CHECK(y.grad_fn()->name() == std::string("rms_norm"));
  CHECK_FALSE(rms_norm(x.detach(), {4}, w.detach()).requires_grad());
  // Without a weight only x gets a gradient.
  sum(rms_norm(x, {4}) * randn({3, 4}, generator, float64)).backward();
  CHECK(x.grad().defined());
  CHECK_FALSE(w.grad().defined());
}

TEST_CASE(
    "layer_norm's, rms_norm's and dropout_add_layer_norm's backwards read their gradient in "
    "any layout, with the same bits",
    "[layer_norm]") {
  // Their nodes keep the gradient they are handed as it is (autograd.cpp's
  // reads_any_gradient_layout): a sum's, one 1 expanded everywhere (all strides 0); one row
  // expanded over (B, T); a gradient expanded over B only, and a transposed one (both copied).
  // x, weight and bias's gradients must be those of the same gradient written out, bit for bit.
  for (const std::string op : {"layer_norm", "rms_norm", "dropout_add_layer_norm"})
    for (DType dtype : {float32, float64}) {
      INFO(op << ' ' << dtype_name(dtype));
      Generator generator(21);
      const int64_t B = 3, T = 5, N = 8;
      const Tensor x = randn({B, T, N}, generator, dtype).requires_grad_();
      const Tensor w = randn({N}, generator, dtype).requires_grad_();
      const Tensor b = randn({N}, generator, dtype).requires_grad_();
      const Tensor row = randn({N}, generator, dtype);
      const Tensor per_t = randn({1, T, N}, generator, dtype);
      const Tensor g_t = randn({B, N, T}, generator, dtype);
      struct Case {
        const char* name;
        Tensor g;           // the gradient y receives (undefined: y.sum().backward())
        bool kept_strided;  // the node sees it with a 0 stride
      };
      const std::vector<Case> cases = {{"sum", Tensor(), true},
          {"one row", expand(row, {B, T, N}), true}, {"over B", expand(per_t, {B, T, N}), true},
          {"transposed", g_t.transpose(1, 2), false}};
      for (const Case& c : cases) {
        INFO(c.name);
        std::vector<std::vector<double>> grads[2];  // [as handed, written out] → x, w, b
        for (int written_out = 0; written_out < 2; ++written_out) {
          x.zero_grad(), w.zero_grad(), b.zero_grad();
          Generator dropout(5);  // the same mask in both passes
          const Tensor y = op == "layer_norm" ? layer_norm(x, {N}, w, b)
                           : op == "rms_norm"
                               ? rms_norm(x, {N}, w)
                               : dropout_add_layer_norm(x, per_t.expand({B, T, N}) * x, {N}, w, b,
                                     1e-5, 0.5, /*training=*/true, dropout);
          Tensor seen;
          {
            BackwardObserverGuard observe([&](const Node& node, const Tensor& g, const Grads&) {
              if (node.name() == op) seen = g;
            });
            const Tensor g =
                c.g.defined() ? c.g : expand(ones({1}, dtype).reshape({1, 1, 1}), {B, T, N});
            if (written_out)
              y.backward(contiguous(g));
            else if (c.g.defined())
              y.backward(c.g);
            else
              y.sum().backward();
          }
          REQUIRE(seen.defined());
          if (!written_out) {
            const Shape& strides = seen.strides();
            CHECK(
                (std::find(strides.begin(), strides.end(), 0) != strides.end()) == c.kept_strided);
          }
          grads[written_out] = {x.grad().to_vector<double>(), w.grad().to_vector<double>(),
              op == "rms_norm" ? std::vector<double>() : b.grad().to_vector<double>()};
        }
        CHECK(grads[0] == grads[1]);
      }
    }
}

TEST_CASE(
    "layer_norm and rms_norm give a row the same bits alone or among other rows", "[layer_norm]") {
  // ops_norm.cpp sums four rows at once where N is a multiple of 4 (up to 8192) and takes the rest
  // one by one: each row of a (35, N) input (eight groups of four, then three alone) must match
  // the row normalised by itself, forward and backward (dx), to the last bit; N = 4 to 500, and
  // 10 and 8196 (no groups). On AVX-512, RMSNorm's float64 dx of the three rows left over once
  // differed in the last bit.
  for (DType dtype : {float32, float64})
    for (int64_t N :
        {int64_t{4}, int64_t{12}, int64_t{64}, int64_t{500}, int64_t{10}, int64_t{8196}}) {
      INFO(dtype_name(dtype) << ", N " << N);
      Generator generator(31);
      const int64_t R = 35;
      const Tensor x = (randn({R, N}, generator, dtype) * 2.0 + 0.5).detach().requires_grad_();
      const Tensor w = randn({N}, generator, dtype), b = randn({N}, generator, dtype);
      const Tensor g = randn({R, N}, generator, dtype);
      for (const bool rms : {false, true}) {
        INFO((rms ? "rms_norm" : "layer_norm"));
        const auto norm = [&](const Tensor& in) {
          return rms ? rms_norm(in, {N}, w) : layer_norm(in, {N}, w, b);
        };
        x.zero_grad();
        const Tensor y = norm(x);
        y.backward(g);
        const std::vector<double> y_all = y.to_vector<double>(),
                                  dx_all = x.grad().to_vector<double>();
        for (int64_t r = 0; r < R; ++r) {
          const Tensor row = narrow(x.detach(), 0, r, 1).clone().requires_grad_();
          const Tensor y_row = norm(row);
          y_row.backward(contiguous(narrow(g, 0, r, 1)));
          const auto at = y_all.begin() + r * N;
          CHECK(y_row.to_vector<double>() == std::vector<double>(at, at + N));
          const auto dx_at = dx_all.begin() + r * N;
          CHECK(row.grad().to_vector<double>() == std::vector<double>(dx_at, dx_at + N));
        }
      }
    }
}

TEST_CASE("rms_norm errors", "[rms_norm][errors]") {
  CHECK_THROWS_WITH(rms_norm(ones({2, 3}), {4}),
      Equals("rms_norm: input of shape [2,3] does not end in normalized_shape [4]"));
  CHECK_THROWS_WITH(rms_norm(ones({4}), {3, 4}),
      Equals("rms_norm: input of shape [4] does not end in normalized_shape [3,4]"));
  CHECK_THROWS_WITH(rms_norm(ones({2, 4}), {4}, ones({3})),
      Equals("rms_norm: weight of shape [3] does not match normalized_shape [4] (input of shape "
             "[2,4])"));
  CHECK_THROWS_AS(rms_norm(ones({2, 4}), {4}, ones({4}, float64)), DTypeError);
  CHECK_THROWS_MATCHES(
      rms_norm(ones({2, 4}).to(int64), {4}), DTypeError, WhatContains({"rms_norm", "int64"}));
  CHECK_THROWS_WITH(rms_norm(ones({2, 4}), {}),
      Equals("rms_norm: normalized_shape cannot be empty (input of shape [2,4])"));
  CHECK_THROWS_WITH(rms_norm(ones({2, 4}), {4}, Tensor(), -1.0),
      Equals("rms_norm: eps -1 must not be negative (nor NaN)"));
  CHECK_THROWS_AS(rms_norm(ones({2, 4}), {4}, Tensor(), std::nan("")), ValueError);
  CHECK_NOTHROW(rms_norm(ones({2, 4}), {4}, Tensor(), 0.0));
}
