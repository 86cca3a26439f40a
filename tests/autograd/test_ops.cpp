// Op semantics checked by hand: the cases where the exact behaviour matters more than the
// values (PyTorch fixtures in test_ops_torch.cpp cover the values of every op).
#include <catch2/catch.hpp>

#include <array>
#include <cmath>
#include <functional>
#include <limits>
#include <string>

#include "autograd/autograd.h"
#include "autograd/ops.h"
#include "tensor_compare.h"

using namespace ag;

namespace {

// x's gradient through y = forward(), handed `given` as it is (undefined: y.sum()'s, one 1
// expanded over y), and handed the same gradient written out (contiguous): {as handed, written
// out}. The node named `node` reads its gradient in any layout (autograd.cpp's
// reads_any_gradient_layout), so it must see the gradient as it was handed: contiguous only when
// written out.
std::array<std::vector<double>, 2> gradients_as_handed_and_written_out(const Tensor& x,
    const std::function<Tensor()>& forward, const std::string& node, const Tensor& given) {
  std::array<std::vector<double>, 2> grads;
  for (int written_out = 0; written_out < 2; ++written_out) {
    x.zero_grad();
    const Tensor y = forward();
    Tensor seen;
    {
      BackwardObserverGuard observe([&](const Node& n, const Tensor& g, const Grads&) {
        if (n.name() == node) seen = g;
      });
      const Tensor g =
          given.defined()
              ? given
              : expand(ones(Shape(static_cast<std::size_t>(y.dim()), 1), y.dtype()), y.shape());
      if (written_out)
        y.backward(contiguous(g));
      else if (given.defined())
        y.backward(given);
      else
        y.sum().backward();
    }
    REQUIRE(seen.defined());
    CHECK(seen.is_contiguous() == (written_out == 1));
    grads[static_cast<std::size_t>(written_out)] = x.grad().to_vector<double>();
  }
  return grads;
}
}  // namespace

TEST_CASE("broadcast_shapes and sum_to", "[ops][broadcast]") {
  CHECK(broadcast_shapes({2, 1, 4}, {3, 1}, "test") == Shape{2, 3, 4});
  CHECK(broadcast_shapes({}, {3}, "test") == Shape{3});
  CHECK(broadcast_shapes({0, 1}, {1, 5}, "test") == Shape{0, 5});
  Tensor g = ones({2, 3, 4});
  CHECK(sum_to(g, {3, 1}).shape() == Shape{3, 1});
  CHECK(values(sum_to(g, {3, 1})) == std::vector<double>{8, 8, 8});
  CHECK(values(sum_to(g, {})) == std::vector<double>{24});
  CHECK(values(sum_to(g, {4})) == std::vector<double>{6, 6, 6, 6});
}

TEST_CASE("comparisons give bool and are not differentiable", "[ops]") {
  Tensor a = tensor({1.0, 2.0, 3.0}, float64).requires_grad_();
  Tensor b = tensor({2.0, 2.0, 2.0}, float64);
  CHECK(values(lt(a, b)) == std::vector<double>{1, 0, 0});
  CHECK(values(le(a, b)) == std::vector<double>{1, 1, 0});
  CHECK(values(gt(a, 2.0)) == std::vector<double>{0, 0, 1});
  CHECK(values(ge(a, 2.0)) == std::vector<double>{0, 1, 1});
  CHECK(values(eq(a, b)) == std::vector<double>{0, 1, 0});
  CHECK(values(ne(a, 2.0)) == std::vector<double>{1, 0, 1});
  CHECK(lt(a, b).dtype() == bool_);
  CHECK_FALSE(lt(a, b).requires_grad());
}

TEST_CASE("where and masked_fill take masks of any dtype", "[ops]") {
  Tensor x = tensor({1.0, 2.0, 3.0, 4.0}, {2, 2}, float64);
  Tensor mask32 = tensor({0.0, 1.0}, float32);  // broadcast over rows
  CHECK(values(masked_fill(x, mask32, -1e6)) == std::vector<double>{1, -1e6, 3, -1e6});
  CHECK(values(where(mask32, x, zeros({}, float64))) == std::vector<double>{0, 2, 0, 4});
}

TEST_CASE("where selects every layout of its operands alike, in every dtype", "[ops]") {
  // where's rows have a branch-free select for contiguous operands and operands of one value (a
  // scalar, a sum's expanded gradient), and an index loop for the rest: all must agree.
  const std::vector<double> a_values = {1, -2, 3, -4, 5, -6}, b_values = {10, 20, 30, 40, 50, 60};
  const Tensor condition = tensor({1.0, 0.0, 0.0, 1.0, 1.0, 0.0}, {2, 3}).to(bool_);
  for (const DType dtype : {float32, float64, int64, bool_}) {
    INFO(dtype_name(dtype));
    const Tensor a = tensor(a_values, {2, 3}).to(dtype), b = tensor(b_values, {2, 3}).to(dtype);
    const Tensor scalar_a = full({}, 7.0, dtype), scalar_b = full({}, 0.0, dtype);
    // expected, element by element
    auto expected = [&](const Tensor& x, const Tensor& y) {
      const Tensor xs = x.expand({2, 3}).contiguous(), ys = y.expand({2, 3}).contiguous();
      std::vector<double> out;
      for (int64_t i = 0; i < 6; ++i)
        out.push_back(condition.to_vector<double>()[i] != 0 ? values(xs)[i] : values(ys)[i]);
      return out;
    };
    CHECK(values(where(condition, a, b)) == expected(a, b));
    CHECK(values(where(condition, a, scalar_b)) == expected(a, scalar_b));
    CHECK(values(where(condition, scalar_a, b)) == expected(scalar_a, b));
    CHECK(values(where(condition, scalar_a, scalar_b)) == expected(scalar_a, scalar_b));
    // transposed (strided) operands and condition: the index loop
    const Tensor at = a.reshape({3, 2}).transpose(0, 1), bt = b.reshape({3, 2}).transpose(0, 1);
    const Tensor ct = condition.reshape({3, 2}).transpose(0, 1);
    const std::vector<double> strided = values(where(ct, at, bt));
    const std::vector<double> dense =
        values(where(ct.contiguous(), at.contiguous(), bt.contiguous()));
    CHECK(strided == dense);
  }
}

TEST_CASE("maximum, minimum and clamp keep NaN, as PyTorch's", "[ops]") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const Tensor a = tensor({nan, 1.0, 2.0, nan}, float64), b = tensor({1.0, nan, 2.0, nan}, float64);
  for (const Tensor& picked : {maximum(a, b), minimum(a, b)}) {
    const std::vector<double> v = values(picked);
    CHECK(std::isnan(v[0]));
    CHECK(std::isnan(v[1]));
    CHECK(v[2] == 2.0);
    CHECK(std::isnan(v[3]));
  }
  const std::vector<double> clamped =
      values(clamp(tensor({nan, -3.0, 0.25, 3.0}, float64), -1.0, 1.0));
  CHECK(std::isnan(clamped[0]));
  CHECK(
      std::vector<double>(clamped.begin() + 1, clamped.end()) == std::vector<double>{-1, 0.25, 1});
  // the gradient of a tie is shared: ½ each
  const Tensor x = tensor({2.0, 3.0, 1.0}, float64).requires_grad_();
  const Tensor y = tensor({2.0, 1.0, 3.0}, float64).requires_grad_();
  sum(maximum(x, y)).backward();
  CHECK(values(x.grad()) == std::vector<double>{0.5, 1, 0});
  CHECK(values(y.grad()) == std::vector<double>{0.5, 0, 1});
}

TEST_CASE("max sends the gradient to the first maximum — argmax picks the first", "[ops]") {
  Tensor x = tensor({1.0, 5.0, 5.0, 2.0}, float64).requires_grad_();
  Tensor m = max(x);
  CHECK(m.item() == 5.0);
  m.backward();
  CHECK(values(x.grad()) == std::vector<double>{0, 1, 0, 0});
  CHECK(argmax(x.detach(), 0).item() == 1.0);
  Tensor y = tensor({3, 1, 4, 1, 5, 9}, {2, 3});
  CHECK(values(argmax(y, 1)) == std::vector<double>{2, 2});
  CHECK(argmax(y, 1, true).shape() == Shape{2, 1});
  CHECK(values(max(y, {0})) == std::vector<double>{3, 5, 9});
}

TEST_CASE("relu keeps NaN as NaN, as PyTorch does, and its gradient there is 0", "[ops]") {
  // torch.relu(torch.tensor([nan, -1., -0., 2.])) -> tensor([nan, 0., 0., 2.])
  for (DType dtype : {float32, float64}) {
    Tensor x = tensor({std::nan(""), -1.0, -0.0, 2.0}, dtype).requires_grad_();
    Tensor y = relu(x);
    const std::vector<double> values = y.to_vector<double>();
    CHECK(std::isnan(values[0]));
    CHECK(values[1] == 0.0);
    CHECK(values[2] == 0.0);
    CHECK(values[3] == 2.0);
    y.backward(ones({4}, dtype));
    // g · [x > 0]: 0 at NaN (not > 0), as PyTorch's threshold_backward.
    CHECK(x.grad().to_vector<double>() == std::vector<double>{0.0, 0.0, 0.0, 1.0});
  }
}

TEST_CASE("var with correction 1 and 0", "[ops]") {
  Tensor x = tensor({1.0, 2.0, 3.0, 4.0}, float64);
  CHECK(var(x).item() == Approx(5.0 / 3.0));
  CHECK(var(x, {0}, 0).item() == Approx(1.25));
  CHECK(values(var(x.reshape({2, 2}), {1})) == std::vector<double>{0.5, 0.5});
}

TEST_CASE("softmax is stable for large logits and fully masked rows", "[ops]") {
  Tensor big = tensor({1e4, -1e4, 0.0}, float32);
  std::vector<double> p = values(softmax(big, 0));
  CHECK(p[0] == Approx(1.0));
  CHECK(p[1] == 0.0);
  std::vector<double> lp = values(log_softmax(big, 0));
  CHECK(lp[0] == Approx(0.0));
  CHECK(lp[1] == Approx(-2e4));
  // d2l masks with −1e6: a row masked everywhere becomes uniform, never NaN.
  Tensor masked = full({4}, -1e6);
  for (double v : values(softmax(masked, 0))) CHECK(v == Approx(0.25));
  // Rows of −inf stay finite where any entry is finite.
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<double> q = values(softmax(tensor({-inf, 0.0, -inf}, float64), 0));
  CHECK(q == std::vector<double>{0, 1, 0});
}

TEST_CASE("softmax rows sum to one along any dim", "[ops]") {
  Generator g(9);
  Tensor x = randn({3, 4, 5}, g, float64);
  for (int64_t dim : {0, 1, 2}) {
    for (double s : values(sum(softmax(x, dim), {dim}))) CHECK(s == Approx(1.0).epsilon(1e-12));
    Tensor lse = log(sum(exp(x), {dim}, true));
    for (double d : values(log_softmax(x, dim) - (x - lse))) CHECK(std::abs(d) < 1e-12);
  }
}

TEST_CASE(
    "softmax's and log_softmax's backwards read their gradient in any layout, with the same bits",
    "[ops][softmax]") {
  // Their nodes keep the gradient they are handed as it is (autograd.cpp's
  // reads_any_gradient_layout): a sum's, one 1 expanded everywhere (all strides 0); one row
  // expanded over (B, T); a gradient expanded over B only, and a transposed one (both copied).
  // x's gradient must be that of the same gradient written out, bit for bit; and along a dim
  // other than the last, where the composed ops take it.
  for (const bool log : {false, true})
    for (DType dtype : {float32, float64})
      for (int64_t dim : {2, 1}) {
        INFO((log ? "log_softmax " : "softmax ") << dtype_name(dtype) << ", dim " << dim);
        Generator generator(23);
        const int64_t B = 3, T = 5, N = 37;  // rows longer than any vector width
        const Tensor x = randn({B, T, N}, generator, dtype).requires_grad_();
        const Tensor row = randn({N}, generator, dtype);
        const Tensor per_t = randn({1, T, N}, generator, dtype);
        const Tensor g_t = randn({B, N, T}, generator, dtype);
        const std::vector<std::pair<const char*, Tensor>> cases = {{"sum", Tensor()},
            {"one row", expand(row, {B, T, N})}, {"over B", expand(per_t, {B, T, N})},
            {"transposed", g_t.transpose(1, 2)}};
        for (const auto& [name, given] : cases) {
          INFO(name);
          const auto grads = gradients_as_handed_and_written_out(
              x, [&] { return log ? log_softmax(x, dim) : softmax(x, dim); },
              log ? "log_softmax" : "softmax", given);
          CHECK(grads[0] == grads[1]);
        }
      }
}

TEST_CASE(
    "float32 softmax, log_softmax and length_masked_softmax (vectorised exp) agree with float64",
    "[ops][softmax]") {
  // The float32 rows use the vectorised exp (detail::exp_shifted_row), the float64 rows std::exp.
  // The inputs are multiples of 1/8 in about [-40, 40], so x − max is exact in float32 as well;
  // the float32 weights are then within a few float ulps of the float64 ones: 1 for the exp, the
  // roundings of 1/Σ and of e · (1/Σ).
  Generator g(11);
  std::vector<double> eighths;
  for (double v : randn({3, 4, 37}, g, float64).to_vector<double>())
    eighths.push_back(std::round(v * 64.0) / 8.0);
  const Tensor x32 = tensor(eighths, {3, 4, 37}, float32);  // rows longer than any vector width
  const Tensor x64 = tensor(eighths, {3, 4, 37}, float64);
  const Tensor lens = tensor({37, 0, 5, 1, 36, 20, 2, 0, 37, 9, 17, 30}, {3, 4});  // (B, Q)
  auto check_close = [](const Tensor& single, const Tensor& reference, double rtol, double atol) {
    const std::vector<double> a = values(single), b = values(reference);
    REQUIRE(a.size() == b.size());
    double worst = 0;
    for (std::size_t i = 0; i < a.size(); ++i) {
      const double excess = std::abs(a[i] - b[i]) / (atol + rtol * std::abs(b[i]));
      if (!(excess <= worst)) worst = excess;
    }
    INFO("worst |float32 - float64| is " << worst << " times the tolerance");
    CHECK(worst <= 1.0);
  };
  constexpr double kFourUlps = 4 * 1.2e-7;
  for (int64_t dim : {0, 1, 2}) {
    INFO("dim " << dim);
    check_close(softmax(x32, dim), softmax(x64, dim), kFourUlps, 1e-30);
    check_close(log_softmax(x32, dim), log_softmax(x64, dim), kFourUlps, 1e-6);
  }
  check_close(length_masked_softmax(x32, lens), length_masked_softmax(x64, lens), kFourUlps, 1e-30);
  check_close(length_masked_softmax(x32, Tensor()), softmax(x64, -1), kFourUlps, 1e-30);
}

TEST_CASE("length_masked_softmax: zeros after each valid length, uniform rows for length 0",
    "[ops][softmax]") {
  // X (1, 3, 4) with lengths 2, 0, 4 per query.
  const Tensor X = tensor({0, 1, 5, 5, 3, 2, 1, 0, 0, 0, 0, 0}, {1, 3, 4}, float64);
  const std::vector<double> y = values(length_masked_softmax(X, tensor({2, 0, 4}, {1, 3})));
  const double e = std::exp(1.0);
  const std::vector<double> expected = {
      1 / (1 + e), e / (1 + e), 0, 0, 0.25, 0.25, 0.25, 0.25, 0.25, 0.25, 0.25, 0.25};
  REQUIRE(y.size() == expected.size());
  for (std::size_t i = 0; i < y.size(); ++i) CHECK(y[i] == Approx(expected[i]).epsilon(1e-15));
  // Without lengths: a plain softmax over the last dim of any shape, 0-dim included.
  CHECK(length_masked_softmax(tensor({2.0}, float64).reshape({}), Tensor()).item() == 1.0);
  CHECK(values(length_masked_softmax(tensor({1.0, 1.0}, float64), Tensor())) ==
        std::vector<double>{0.5, 0.5});
}

TEST_CASE(
    "dropout: inverted scaling, identity at p = 0 and in eval, zeros at p = 1", "[ops][dropout]") {
  Tensor x = ones({1000}, float64);
  Generator g(11);
  Tensor y = dropout(x, 0.25, true, g);
  for (double v : values(y)) CHECK((v == 0.0 || v == Approx(1.0 / 0.75)));
  CHECK(mean(y).item() == Approx(1.0).margin(0.1));
  CHECK(dropout(x, 0.0, true, g).shares_storage(x));
  CHECK(dropout(x, 0.7, false, g).shares_storage(x));
  CHECK(sum(dropout(x, 1.0, true, g)).item() == 0.0);
  // The same generator state gives the same mask.
  Generator g1(5), g2(5);
  CHECK(values(dropout(x, 0.5, true, g1)) == values(dropout(x, 0.5, true, g2)));
  // The gradient uses the forward's mask, and p = 1 passes no gradient.
  Tensor w = ones({8}, float64).requires_grad_();
  Tensor out = dropout(w, 0.5, true, g);
  out.backward(ones({8}, float64));
  CHECK(values(w.grad()) == values(out.detach()));
  w.zero_grad();
  dropout(w, 1.0, true, g).sum().backward();
  CHECK(sum(w.grad()).item() == 0.0);
}

TEST_CASE(
    "dropout: the mask is bernoulli(1 - p) from the same state, and the backward uses it again",
    "[ops][dropout]") {
  for (const DType dtype : {float32, float64}) {
    Generator data(3);
    // A transposed view (non-contiguous), 2·320 = 640 elements: more than one Philox buffer.
    Tensor x = randn({320, 2}, data, dtype).transpose(0, 1);
    x.requires_grad_();
    Generator g(21), same(21);
    Tensor y = dropout(x, 0.3, true, g);
    const Tensor mask = bernoulli(x.shape(), 0.7, same, dtype);  // 1 = kept
    CHECK(g.state() == same.state());
    const std::vector<double> xs = values(x.detach()), ys = values(y.detach()), ms = values(mask);
    const double scale = dtype == float32 ? double(float(1.0 / 0.7)) : 1.0 / 0.7;
    for (std::size_t i = 0; i < ys.size(); ++i) {
      const double expected =
          dtype == float32 ? double(float(xs[i]) * float(ms[i] * scale)) : xs[i] * ms[i] * scale;
      CHECK(ys[i] == expected);
    }
    // Another draw in between does not change the mask the backward uses.
    (void)rand({100}, g);
    Tensor upstream = full(x.shape(), 2.0, dtype);
    y.backward(upstream);
    const std::vector<double> gx = values(x.grad());
    for (std::size_t i = 0; i < gx.size(); ++i)
      CHECK(
          gx[i] == (dtype == float32 ? double(2.0f * float(ms[i] * scale)) : 2.0 * ms[i] * scale));
  }
}

TEST_CASE("cross_entropy (fused) equals the composed −Σ onehot · log_softmax, values and gradients",
    "[ops][cross_entropy]") {
  Generator gen(8);
  const int64_t N = 6, V = 5;
  const Tensor targets = tensor({0, 4, 2, 2, 1, 3}, {N}, float64);
  // onehot[n, v] = 1 where v = t_n: (1, V) == (N, 1) -> (N, V)
  const Tensor onehot = eq(arange(double(V), float64).reshape({1, V}), targets.reshape({N, 1}));
  Tensor x_fused = mul(randn({N, V}, gen, float64), 3.0), x_composed = x_fused.clone();
  x_fused.requires_grad_();
  x_composed.requires_grad_();
  Tensor fused = cross_entropy(x_fused, targets, Reduction::none);            // (N,)
  Tensor composed = neg(sum(mul(onehot, log_softmax(x_composed, -1)), {1}));  // (N,)
  const std::vector<double> a = values(fused.detach()), b = values(composed.detach());
  for (std::size_t i = 0; i < a.size(); ++i) CHECK(a[i] == Approx(b[i]).epsilon(1e-13));
  const Tensor upstream = randn({N}, gen, float64);
  fused.backward(upstream);
  composed.backward(upstream);
  const std::vector<double> ga = values(x_fused.grad()), gb = values(x_composed.grad());
  for (std::size_t i = 0; i < ga.size(); ++i)
    CHECK(ga[i] == Approx(gb[i]).epsilon(1e-12).margin(1e-15));
}

TEST_CASE("cross_entropy skips the rows whose target is ignore_index, as PyTorch's",
    "[ops][cross_entropy]") {
  Generator gen(9);
  const Tensor x = randn({4, 3}, gen, float64);
  const Tensor kept = index_select(x, 0, tensor({0, 2}));  // (2, 3): the rows not ignored
  const Tensor targets =
      tensor({1, -100, 2, -100}, {4}, float64);  // PyTorch's default ignore_index
  const Tensor kept_targets = tensor({1, 2}, {2}, float64);
  // none: 0 in an ignored row; sum: the kept rows' sum; mean: over the kept rows only.
  const std::vector<double> per_row = values(cross_entropy(x, targets, Reduction::none));
  const std::vector<double> kept_rows = values(cross_entropy(kept, kept_targets, Reduction::none));
  CHECK(per_row == std::vector<double>{kept_rows[0], 0.0, kept_rows[1], 0.0});
  CHECK(cross_entropy(x, targets, Reduction::sum).item() ==
        Approx(kept_rows[0] + kept_rows[1]).epsilon(1e-15));
  Tensor leaf = x.clone().requires_grad_();
  Tensor loss = cross_entropy(leaf, targets);
  CHECK(loss.item() == Approx((kept_rows[0] + kept_rows[1]) / 2).epsilon(1e-15));
  loss.backward();
  const std::vector<double> g = values(leaf.grad());
  for (int64_t v = 0; v < 3; ++v) {
    CHECK(g[static_cast<std::size_t>(3 + v)] == 0.0);  // the ignored rows get no gradient
    CHECK(g[static_cast<std::size_t>(9 + v)] == 0.0);
  }
  // Another ignore_index: −100 is then a bad target again, and −1 is skipped.
  CHECK_THROWS_WITH(cross_entropy(x, targets, Reduction::mean, -1),
      Catch::Matchers::Contains(
          "cross_entropy: target -100 is not a class index in [0, 3) nor ignore_index (-1)"));
  // Every target ignored: the mean is refused (PyTorch's NaN); the sum is 0.
  const Tensor all_ignored = tensor({-1, -1, -1, -1}, {4}, float64);
  CHECK_THROWS_WITH(cross_entropy(x, all_ignored, Reduction::mean, -1),
      Catch::Matchers::Contains("every one of the 4 targets is ignore_index (-1)"));
  CHECK(cross_entropy(x, all_ignored, Reduction::sum, -1).item() == 0.0);
}

TEST_CASE("concat, split and index_select values", "[ops]") {
  Tensor a = tensor({1, 2, 3, 4}, {2, 2}), b = tensor({5, 6}, {2, 1});
  CHECK(values(concat({a, b}, 1)) == std::vector<double>{1, 2, 5, 3, 4, 6});
  CHECK(values(concat({a, a}, 0)) == std::vector<double>{1, 2, 3, 4, 1, 2, 3, 4});
  std::vector<Tensor> parts = split(arange(5), 2);
  REQUIRE(parts.size() == 3);
  CHECK(values(parts[2]) == std::vector<double>{4});
  Tensor table = tensor({0, 1, 10, 11, 20, 21}, {3, 2});
  CHECK(values(index_select(table, 0, tensor({2, 0, 2}))) ==
        std::vector<double>{20, 21, 0, 1, 20, 21});
  CHECK(values(repeat_interleave(tensor({3, 2}), 2, 0)) == std::vector<double>{3, 3, 2, 2});
  // d2l repeats valid_lens per head: (B,) -> (B·H,), batch-major.
  CHECK(values(repeat_interleave(tensor({3, 2}), 3, 0)) == std::vector<double>{3, 3, 3, 2, 2, 2});
}

TEST_CASE(
    "concat, repeat_interleave, index_select and contiguous take a strided gradient", "[ops]") {
  // A sum's gradient is one value expanded (stride 0), which these ops' nodes keep as it is.
  Generator gen(5);
  Tensor x = randn({3, 4, 5}, gen, float64).requires_grad_();
  contiguous(transpose(x, 1, 2)).sum().backward();
  CHECK(values(x.grad()) == std::vector<double>(60, 1.0));
  CHECK(x.grad().is_contiguous());
  Tensor a = randn({3, 4, 5}, gen, float64).requires_grad_(),
         b = randn({3, 4, 2}, gen, float64).requires_grad_();
  concat({a, b}, -1).sum().backward();
  CHECK(values(a.grad()) == std::vector<double>(60, 1.0));
  CHECK(values(b.grad()) == std::vector<double>(24, 1.0));
  CHECK((a.grad().is_contiguous() && b.grad().is_contiguous()));
  x.zero_grad();
  repeat_interleave(x, 3, 1).sum().backward();
  CHECK(values(x.grad()) == std::vector<double>(60, 3.0));
  // repeat_interleave's backward through a permuted gradient: viewed as (outer, count, inner)
  // with its strides when they allow (dim 2: inner is one dim), copied when they do not (dim 1:
  // inner (5, 2) from dims whose strides do not merge). x.grad[..., t, ...] = w[2t] + w[2t + 1].
  Tensor z = randn({3, 4, 5, 2}, gen, float64).requires_grad_();
  const Shape order{3, 0, 1, 2};
  for (const int64_t dim : {1, 2}) {
    Shape repeated{3, 4, 5, 2};
    repeated[static_cast<std::size_t>(dim)] *= 2;
    const Tensor w = randn(repeated, gen, float64);
    z.zero_grad();
    mul(permute(repeat_interleave(z, 2, dim), order), permute(w, order)).sum().backward();
    const double rows = static_cast<double>(repeated[static_cast<std::size_t>(dim)]);
    const Tensor first = index_select(w, dim, arange(0, rows, 2, int64));
    const Tensor second = index_select(w, dim, arange(1, rows, 2, int64));
    CHECK(values(z.grad()) == values(add(first, second)));
  }
  // index_select: a row picked twice gets both gradients, rows nothing picks get +0, and a −0
  // gradient added into zeros gives +0 (as PyTorch's zeros + index_add_).
  Tensor table = zeros({4, 3}, float64).requires_grad_();
  index_select(table, 0, tensor({2, 0, 2}))
      .backward(tensor({1, 2, 3, -0.0, -0.0, -0.0, 10, 20, 30}, {3, 3}, float64));
  const std::vector<double> grad = values(table.grad());
  CHECK(grad == std::vector<double>{0, 0, 0, 0, 0, 0, 11, 22, 33, 0, 0, 0});
  for (double g : grad) CHECK_FALSE(std::signbit(g));
  table.zero_grad();
  index_select(table, 0, tensor({2, 0, 2})).sum().backward();  // an expanded gradient
  CHECK(values(table.grad()) == std::vector<double>{1, 1, 1, 0, 0, 0, 2, 2, 2, 0, 0, 0});
}

TEST_CASE("ops read strided inputs correctly", "[ops]") {
  Tensor x = arange(12, float64).reshape({3, 4});
  Tensor t = x.transpose(0, 1);  // (4,3), not contiguous
  CHECK(values(t + 0.0) == values(t.contiguous()));
  CHECK(values(exp(t)) == values(exp(t.contiguous())));
  CHECK(values(sum(t, {1})) == std::vector<double>{12, 15, 18, 21});
  CHECK(values(t * tensor({1.0, 0.0, 1.0}, float64)) ==
        std::vector<double>{0, 0, 8, 1, 0, 9, 2, 0, 10, 3, 0, 11});
  CHECK(values(x.slice(1, 0, 4, 3) * 2.0) == std::vector<double>{0, 6, 8, 14, 16, 22});
}

TEST_CASE("slice's backward reads its gradient in any layout: zeros with it copied in", "[ops]") {
  // Its node keeps the gradient it is handed (autograd.cpp's reads_any_gradient_layout): a sum's,
  // one 1 expanded everywhere, and a transposed one. x's gradient must be the same as from the
  // gradient written out, with zeros outside the slice, for a step and for the last dim.
  for (const auto& [dim, start, end, step] :
      {std::tuple{2, 0, 4, 1}, std::tuple{1, 1, 5, 2}, std::tuple{0, 1, 3, 1}}) {
    INFO("dim " << dim << ", " << start << ":" << end << ":" << step);
    Generator generator(5);
    const Tensor x = randn({3, 5, 7}, generator, float64).requires_grad_();
    const Shape sliced = x.slice(dim, start, end, step).shape();
    const Tensor g_t = randn({sliced[0], sliced[2], sliced[1]}, generator, float64);
    for (const bool transposed : {false, true}) {
      INFO((transposed ? "a transposed gradient" : "a sum's gradient"));
      const auto grads = gradients_as_handed_and_written_out(
          x,
          [&x, slice = std::array<int64_t, 4>{dim, start, end, step}] {
            return x.slice(slice[0], slice[1], slice[2], slice[3]);
          },
          "slice", transposed ? g_t.transpose(1, 2) : Tensor());
      CHECK(grads[0] == grads[1]);
      if (!transposed) {  // 1 at each element of the slice, 0 elsewhere
        double ones_seen = 0;
        for (double v : grads[0]) {
          CHECK((v == 0.0 || v == 1.0));
          ones_seen += v;
        }
        CHECK(ones_seen == static_cast<double>(numel(sliced)));
      }
    }
  }
}

TEST_CASE("expand's backward reads its gradient in any layout, with the same bits", "[ops]") {
  // Its node keeps the gradient it is handed (autograd.cpp's reads_any_gradient_layout): a sum's,
  // one 1 expanded everywhere, one row expanded over the leading dims, and a transposed one. x's
  // gradient, summed over the expanded dims, must be that of the same gradient written out, bit
  // for bit, in both dtypes.
  for (DType dtype : {float32, float64}) {
    INFO(dtype_name(dtype));
    Generator generator(31);
    const Tensor x = randn({3, 1, 37}, generator, dtype).requires_grad_();
    const Shape expanded = {2, 3, 5, 37};  // a new leading dim, and dim 1 of x repeated
    const Tensor row = randn({37}, generator, dtype);
    const Tensor g_t = randn({2, 3, 37, 5}, generator, dtype);
    const std::vector<std::pair<const char*, Tensor>> cases = {
        {"sum", Tensor()}, {"one row", expand(row, expanded)}, {"transposed", g_t.transpose(2, 3)}};
    for (const auto& [name, given] : cases) {
      INFO(name);
      const auto grads = gradients_as_handed_and_written_out(
          x, [&] { return expand(x, expanded); }, "expand", given);
      CHECK(grads[0] == grads[1]);
      if (!given.defined())  // each element of x repeated 2 · 5 times
        CHECK(grads[0] == std::vector<double>(static_cast<std::size_t>(x.numel()), 10.0));
    }
  }
}

TEST_CASE("linear's and linear_relu's backward read their gradient in any layout, same bits",
    "[ops][linear]") {
  // Their nodes keep the gradient they are handed (autograd.cpp's reads_any_gradient_layout): a
  // sum's, one 1 expanded everywhere; a transposed one; and one shared with another input (add's,
  // handed to both of its inputs). dx, dW and db must be those of the same gradient written out,
  // bit for bit, with and without the bias, in both dtypes.
  for (DType dtype : {float32, float64})
    for (const bool relu : {false, true}) {
      INFO(dtype_name(dtype) << (relu ? ", linear_relu" : ", linear"));
      Generator generator(23);
      const Tensor x = randn({3, 5, 7}, generator, dtype).requires_grad_();
      const Tensor w = randn({6, 7}, generator, dtype).requires_grad_();
      const Tensor b = randn({6}, generator, dtype).requires_grad_();
      const Tensor g_t = randn({3, 6, 5}, generator, dtype);
      const std::vector<std::pair<const char*, Tensor>> cases = {
          {"sum", Tensor()}, {"transposed", g_t.transpose(1, 2)}};
      for (const auto& [name, given] : cases)
        for (const Tensor* leaf : {&x, &w, &b}) {
          INFO(name << ", the gradient of " << (leaf == &x ? "x" : leaf == &w ? "W" : "b"));
          const auto grads = gradients_as_handed_and_written_out(
              *leaf, [&] { return relu ? linear_relu(x, w, b) : linear(x, w, b); },
              relu ? "linear_relu" : "linear", given);
          CHECK(same_bits(grads[0], grads[1]));
        }
      // add's gradient, handed to y and to the linear's output at once: kept by both, and
      // neither changed by the other's backward
      const Tensor y = randn({3, 5, 6}, generator, dtype).requires_grad_();
      const Tensor g = randn({3, 5, 6}, generator, dtype);
      const Tensor out = relu ? linear_relu(x, w, b) : linear(x, w, b);
      x.zero_grad();
      (out + y).backward(g);
      CHECK(same_bits(y.grad(), g));
      const Tensor dx_shared = x.grad();
      x.zero_grad();
      (relu ? linear_relu(x, w, b) : linear(x, w, b)).backward(clone(g));
      CHECK(same_bits(dx_shared, x.grad()));
    }
}

TEST_CASE("reductions take one int dim as PyTorch's — a braced list stays a list of dims",
    "[reduce][own]") {
  const Tensor x = tensor({1, 5, 2, 4, 3, 0}, {2, 3});
  CHECK(x.sum(-1).to_vector<double>() == std::vector<double>{8, 7});
  CHECK(x.sum(0, true).shape() == Shape{1, 3});
  CHECK(x.mean(1).to_vector<double>() == x.mean({1}).to_vector<double>());
  CHECK(sum(x, -1).to_vector<double>() == sum(x, Shape{1}).to_vector<double>());
  // {} is no dim at all, refused as Shape{} always was, and never taken as dim 0.
  CHECK_THROWS_WITH(x.sum({}), Catch::Matchers::Contains("sum: no dims given"));
  CHECK(x.sum({0, 1}).item() == 15);
  // max(dim) gives the values and the index of the first maximum; min the same for the minimum.
  const auto [values, indices] = x.max(-1);
  CHECK(values.to_vector<double>() == std::vector<double>{5, 4});
  CHECK(indices.to_vector<double>() == std::vector<double>{1, 0});
  const auto [smallest, where] = x.min(1);
  CHECK(smallest.to_vector<double>() == std::vector<double>{1, 0});
  CHECK(where.to_vector<double>() == std::vector<double>{0, 2});
  CHECK(x.min().item() == 0);
  CHECK(x.max({0}).to_vector<double>() == std::vector<double>{4, 5, 2});  // values only
  CHECK(amin(x, {0}).to_vector<double>() == std::vector<double>{1, 3, 0});
  // The compositions' errors name them, not the max they are built on.
  using Catch::Matchers::StartsWith;
  CHECK_THROWS_WITH(x.min(5), StartsWith("min: "));
  CHECK_THROWS_WITH(amin(x, {0, 0}), StartsWith("amin: dim 0 is listed twice"));
  CHECK_THROWS_WITH(amax(x, {7}), StartsWith("amax: "));
  CHECK_THROWS_WITH(logsumexp(x, 3), StartsWith("logsumexp: "));
  CHECK_THROWS_WITH(min(zeros({0})), StartsWith("min: cannot reduce over zero elements"));
  CHECK_THROWS_WITH(clamp(x, NAN), StartsWith("clamp: a bound is NaN"));
}

TEST_CASE("creation and compositions for a user's own model", "[ops][own]") {
  using Catch::Matchers::Contains;
  CHECK(eye(2, 3).to_vector<double>() == std::vector<double>{1, 0, 0, 0, 1, 0});
  CHECK(eye(2).shape() == Shape{2, 2});
  CHECK(linspace(0, 1, 5).to_vector<double>() == std::vector<double>{0, 0.25, 0.5, 0.75, 1});
  CHECK(linspace(3, 3, 1).to_vector<double>() == std::vector<double>{3});
  CHECK(linspace(0, 1, 0).numel() == 0);
  CHECK_THROWS_WITH(linspace(0, 1, -1), Contains("linspace: start 0, end 1, steps -1"));
  const Tensor x = tensor({1, 2, 3, 4}, {2, 2}, float64);
  CHECK(full_like(x, 7).to_vector<double>() == std::vector<double>(4, 7));
  CHECK(full_like(x, 7).dtype() == float64);
  CHECK(stack({x, x}, 0).shape() == Shape{2, 2, 2});
  CHECK_THROWS_WITH(stack({x, x.reshape({4})}),
      Contains("stack: tensor 1 of shape [4] is not of the shape [2,2] of tensor 0"));
  CHECK_THROWS_WITH(stack({}), Contains("stack: no tensors"));
  // tril zeroes what it drops, NaN included (as PyTorch's), and leaves the rest.
  const Tensor with_nan = tensor({1, NAN, 3, 4}, {2, 2});
  CHECK(tril(with_nan).to_vector<double>() == std::vector<double>{1, 0, 3, 4});
  CHECK_THROWS_WITH(tril(tensor({1, 2})), Contains("tril: input of shape [2] has fewer than 2"));
  // logsumexp: exact where the naive form overflows, and -inf for a row of -inf.
  const Tensor big = tensor({1000, 1000, -INFINITY, -INFINITY}, {2, 2}, float64);
  const std::vector<double> lse = logsumexp(big, -1).to_vector<double>();
  CHECK(lse[0] == Approx(1000 + std::log(2.0)));
  CHECK(lse[1] == -INFINITY);
}
