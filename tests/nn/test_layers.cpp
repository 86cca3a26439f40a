// The layers' forward values: each against its formula, computed by hand or from the layer's own
// parts (the Transformer blocks are d2l's compositions of the smaller layers).
#include "autograd/graph_tools.h"
#include "nn_test_util.h"

using namespace ag;
using nn_test::at;
using nn_test::max_abs_diff;
using nn_test::values;

namespace {
void set(const Tensor& parameter, const std::vector<double>& v) {
  NoGradGuard no_grad;
  parameter.copy_(tensor(v, parameter.shape(), parameter.dtype()));
}
}  // namespace

TEST_CASE("Linear computes x Wᵀ + b with W of shape (out, in)", "[nn][layers]") {
  nn::Linear linear(3, 2);
  set(linear.weight, {1, 2, 3, -1, 0, 2});  // rows: output features
  set(linear.bias, {0.5, -1});
  CHECK(linear.weight.shape() == Shape{2, 3});
  Tensor y = linear(tensor({1, 1, 1, 2, 0, -1}, {2, 3}));
  CHECK(values(y) == std::vector<double>{6.5, 0, -0.5, -5});
  // Any number of leading dims.
  Tensor y3 = linear(tensor({1, 1, 1, 2, 0, -1}, {2, 1, 3}));
  CHECK(y3.shape() == Shape{2, 1, 2});
  CHECK(values(y3) == values(y));
  nn::Linear no_bias(3, 2, false);
  set(no_bias.weight, {1, 2, 3, -1, 0, 2});
  CHECK_FALSE(no_bias.bias.defined());
  CHECK(values(no_bias(tensor({1, 1, 1}, {1, 3}))) == std::vector<double>{6, 1});
}

TEST_CASE("LayerNorm normalises with the biased variance, then scales and shifts", "[nn][layers]") {
  nn::LayerNorm ln({4});
  ln.to(float64);
  set(ln.weight, {1, 2, 1, 1});
  set(ln.bias, {0, 0, 1, 0});
  Tensor y = ln(tensor({1, 2, 3, 4, 2, 2, 2, 2}, {2, 4}, float64));
  // Row 0: mean 2.5, biased variance 1.25. Row 1: constant, so (x − mean) = 0.
  const double s = std::sqrt(1.25 + 1e-5);
  const std::vector<double> expected = {-1.5 / s, 2 * -0.5 / s, 0.5 / s + 1, 1.5 / s, 0, 0, 1, 0};
  const std::vector<double> got = values(y);
  for (std::size_t i = 0; i < expected.size(); ++i)
    CHECK(got[i] == Approx(expected[i]).margin(1e-6));
  // Over two trailing dims: the statistics are over all 6 elements of each (2, 3) slice.
  nn::LayerNorm ln2({2, 3});
  Tensor x = nn_test::randn32({4, 2, 3}, 1);
  Tensor flat = nn::LayerNorm({6})(x.reshape({4, 6}));
  CHECK(max_abs_diff(ln2(x).reshape({4, 6}), flat) <= 1e-6);
}

TEST_CASE("LayerNorm without bias (nanoGPT's) scales only — without affine it only normalises",
    "[nn][layers]") {
  // PyTorch 2.1's LayerNorm(..., bias=False): no bias parameter at all, y = x̂ · weight.
  nn::LayerNorm no_bias({4}, 1e-5, /*elementwise_affine=*/true, /*bias=*/false);
  CHECK_FALSE(no_bias.bias.defined());
  REQUIRE(no_bias.named_parameters().size() == 1);
  CHECK(no_bias.named_parameters()[0].first == "weight");
  CHECK(no_bias.state_dict().count("bias") == 0);
  const Tensor x = nn_test::randn32({3, 4}, 2);
  nn::LayerNorm plain({4}, 1e-5, /*elementwise_affine=*/false);
  CHECK_FALSE(plain.weight.defined());
  CHECK_FALSE(plain.bias.defined());
  CHECK(plain.named_parameters().empty());
  CHECK(plain.repr() == "LayerNorm((4,), eps=1e-05, elementwise_affine=False)");
  CHECK(values(plain(x)) == values(layer_norm(x, {4}, Tensor(), Tensor())));
  set(no_bias.weight, {1, 2, -1, 0.5});
  const Tensor scale = tensor({1, 2, -1, 0.5}, {4});
  // On either path: the fused op with an undefined bias, or the composition without the add.
  for (bool fused : {true, false}) {
    INFO("fused_kernels " << fused);
    nn::FusedKernelsGuard path(fused);
    CHECK(max_abs_diff(no_bias(x), layer_norm(x, {4}, Tensor(), Tensor()) * scale) <= 1e-6);
    CHECK(max_abs_diff(plain(x), layer_norm(x, {4}, Tensor(), Tensor())) <= 1e-6);
  }
  // The normalized_shape and eps are checked with or without parameters.
  CHECK_THROWS_AS(nn::LayerNorm({}, 1e-5, false), ValueError);
  CHECK_THROWS_AS(nn::LayerNorm({4}, -1.0, false, false), ValueError);
}

namespace {
// One LayerNorm forward and backward, on the fused kernel or the composed path: the output and
// the gradients of x, weight and bias. The inputs, weight, bias and upstream gradient come from
// `seed`, so both paths see the same numbers.
struct LayerNormRun {
  Tensor y, dx, dweight, dbias;
  std::string op;  // the op that produced y
};

// Each named pair (fused, composed) is defined, of `dtype` and one shape, and within
// |fused − composed| <= tolerance · (1 + |composed|) elementwise.
void check_paths_agree(
    const std::vector<std::pair<std::string, std::pair<Tensor, Tensor>>>& compared, DType dtype,
    double tolerance) {
  for (const auto& [name, tensors] : compared) {
    const auto& [a, b] = tensors;
    REQUIRE(a.defined());
    REQUIRE(b.defined());
    CHECK(a.dtype() == dtype);
    REQUIRE(a.shape() == b.shape());
    const std::vector<double> va = values(a), vb = values(b);
    double worst = 0;  // the largest |a − b| / (1 + |b|)
    for (std::size_t i = 0; i < va.size(); ++i) {
      const double d = std::abs(va[i] - vb[i]) / (1.0 + std::abs(vb[i]));
      if (!(d <= worst)) worst = d;
    }
    INFO(name << ": largest relative difference " << worst);
    CHECK(worst <= tolerance);
  }
}

LayerNormRun run_layer_norm(
    bool fused, DType dtype, const Shape& normalized_shape, const Shape& x_shape, uint64_t seed) {
  nn::FusedKernelsGuard path(fused);
  nn::LayerNorm ln(normalized_shape);
  ln.to(dtype);
  Generator generator(seed);
  {
    NoGradGuard no_grad;  // weight and bias away from their initial 1 and 0
    ln.weight.copy_(uniform(normalized_shape, 0.5, 1.5, generator, dtype));
    ln.bias.copy_(randn(normalized_shape, generator, dtype));
  }
  // Rows with a mean away from 0 and a spread away from 1, as in a residual stream.
  Tensor x = (randn(x_shape, generator, dtype) * 3.0 + 2.0).detach().requires_grad_();
  Tensor upstream = randn(x_shape, generator, dtype);  // (..., *normalized_shape)
  Tensor y = ln(x);
  sum(y * upstream).backward();
  return {y.detach(), x.grad(), ln.weight.grad(), ln.bias.grad(), y.grad_fn()->name()};
}
}  // namespace

TEST_CASE("LayerNorm: the fused kernel and the composed path agree, forward and gradients",
    "[nn][layers][fused]") {
  struct Case {
    Shape normalized_shape, x_shape;
  };
  // Over the last dim, over two dims, a single element per row (x̂ = 0), an empty batch.
  const std::vector<Case> cases = {
      {{8}, {2, 3, 8}}, {{3, 4}, {5, 3, 4}}, {{1}, {4, 1}}, {{4}, {0, 4}}};
  // |fused − composed| <= tolerance · (1 + |composed|), elementwise.
  for (const auto& [dtype, tolerance] : {std::pair{float64, 1e-13}, std::pair{float32, 1e-6}}) {
    for (std::size_t c = 0; c < cases.size(); ++c) {
      const Case& shapes = cases[c];
      DYNAMIC_SECTION(dtype_name(dtype)
                      << ", x " << shape_str(shapes.x_shape) << ", normalized_shape "
                      << shape_str(shapes.normalized_shape)) {
        const LayerNormRun fused =
            run_layer_norm(true, dtype, shapes.normalized_shape, shapes.x_shape, 20 + c);
        const LayerNormRun composed =
            run_layer_norm(false, dtype, shapes.normalized_shape, shapes.x_shape, 20 + c);
        // The two paths really are different code: one layer_norm op against the last op of the
        // composition (the bias add).
        CHECK(fused.op == "layer_norm");
        CHECK(composed.op == "add");
        check_paths_agree({{"y", {fused.y, composed.y}}, {"dx", {fused.dx, composed.dx}},
                              {"dweight", {fused.dweight, composed.dweight}},
                              {"dbias", {fused.dbias, composed.dbias}}},
            dtype, tolerance);
      }
    }
  }
}

TEST_CASE("RMSNorm divides by the root mean square, then scales — no weight without affine",
    "[nn][layers]") {
  nn::RMSNorm norm({4}, 1e-6);
  norm.to(float64);
  set(norm.weight, {1, 2, 1, -1});
  // Row [1, 2, 3, 4]: mean square 7.5. Row [2, 2, 2, 2]: mean square 4, so x̂ = 1.
  const Tensor y = norm(tensor({1, 2, 3, 4, 2, 2, 2, 2}, {2, 4}, float64));
  const double s = 1.0 / std::sqrt(7.5 + 1e-6), s2 = 2.0 / std::sqrt(4 + 1e-6);
  const std::vector<double> expected = {s, 4 * s, 3 * s, -4 * s, s2, 2 * s2, s2, -s2};
  const std::vector<double> got = values(y);
  for (std::size_t i = 0; i < expected.size(); ++i)
    CHECK(got[i] == Approx(expected[i]).epsilon(1e-14));
  // Without elementwise_affine: no parameter at all (PyTorch's weight = None).
  nn::RMSNorm plain({2, 3}, std::nullopt, /*elementwise_affine=*/false);
  CHECK_FALSE(plain.weight.defined());
  CHECK(plain.named_parameters().empty());
  const Tensor x = nn_test::randn32({4, 2, 3}, 1);
  CHECK(values(plain(x)) == values(rms_norm(x, {2, 3})));
  CHECK(nn::RMSNorm({5}).weight.shape() == Shape{5});
  CHECK(values(nn::RMSNorm({5}).weight) == std::vector<double>(5, 1.0));
}

namespace {
// One RMSNorm forward and backward on the fused kernel or the composed path: the output and the
// gradients of x and weight, from inputs drawn from `seed`.
struct RMSNormRun {
  Tensor y, dx, dweight;
  std::string op;  // the op that produced y
};

RMSNormRun run_rms_norm(bool fused, DType dtype, const Shape& normalized_shape,
    const Shape& x_shape, std::optional<double> eps, bool affine, uint64_t seed) {
  nn::FusedKernelsGuard path(fused);
  nn::RMSNorm norm(normalized_shape, eps, affine);
  norm.to(dtype);
  Generator generator(seed);
  if (affine) {
    NoGradGuard no_grad;
    norm.weight.copy_(uniform(normalized_shape, 0.5, 1.5, generator, dtype));
  }
  Tensor x = (randn(x_shape, generator, dtype) * 3.0 + 1.0).detach().requires_grad_();
  Tensor upstream = randn(x_shape, generator, dtype);
  Tensor y = norm(x);
  sum(y * upstream).backward();
  return {y.detach(), x.grad(), affine ? norm.weight.grad() : Tensor(), y.grad_fn()->name()};
}
}  // namespace

TEST_CASE("RMSNorm: the fused kernel and the composed path agree, forward and gradients",
    "[nn][layers][fused]") {
  struct Case {
    Shape normalized_shape, x_shape;
    std::optional<double> eps;
    bool affine;
  };
  // The last dim with PyTorch's default eps, two dims, no weight, one element per row, no rows.
  const std::vector<Case> cases = {{{8}, {2, 3, 8}, std::nullopt, true},
      {{3, 4}, {5, 3, 4}, 1e-5, true}, {{6}, {4, 6}, 1e-6, false}, {{1}, {4, 1}, 0.5, true},
      {{4}, {0, 4}, std::nullopt, true}};
  // |fused − composed| <= tolerance · (1 + |composed|), elementwise (as LayerNorm's test).
  for (const auto& [dtype, tolerance] : {std::pair{float64, 1e-13}, std::pair{float32, 1e-6}}) {
    for (std::size_t c = 0; c < cases.size(); ++c) {
      const Case& k = cases[c];
      DYNAMIC_SECTION(dtype_name(dtype)
                      << ", x " << shape_str(k.x_shape) << ", normalized_shape "
                      << shape_str(k.normalized_shape) << ", affine " << k.affine) {
        const RMSNormRun fused =
            run_rms_norm(true, dtype, k.normalized_shape, k.x_shape, k.eps, k.affine, 40 + c);
        const RMSNormRun composed =
            run_rms_norm(false, dtype, k.normalized_shape, k.x_shape, k.eps, k.affine, 40 + c);
        CHECK(fused.op == "rms_norm");
        CHECK(composed.op == "mul");  // the composition's last op
        std::vector<std::pair<std::string, std::pair<Tensor, Tensor>>> compared = {
            {"y", {fused.y, composed.y}}, {"dx", {fused.dx, composed.dx}}};
        if (k.affine) compared.push_back({"dweight", {fused.dweight, composed.dweight}});
        check_paths_agree(compared, dtype, tolerance);
      }
    }
  }
}

TEST_CASE(
    "BatchNorm1d: the batch's statistics in training, the running ones in eval", "[nn][layers]") {
  nn::BatchNorm1d bn(2);
  bn.to(float64);
  Tensor x = tensor({1.0, 10.0, 3.0, 20.0, 5.0, 60.0}, float64).reshape({3, 2});  // (N, C)
  Tensor y = bn(x);
  // channel 0: mean 3, biased variance 8/3; channel 1: mean 30, biased variance 1400/3
  const double s0 = std::sqrt(8.0 / 3 + 1e-5), s1 = std::sqrt(1400.0 / 3 + 1e-5);
  const std::vector<double> expected = {-2 / s0, -20 / s1, 0, -10 / s1, 2 / s0, 30 / s1};
  CHECK(max_abs_diff(y.reshape({6}), tensor(expected, float64)) < 1e-12);
  // running ← 0.9 · running + 0.1 · batch, the variance unbiased (· 3/2): 4 and 700
  CHECK(max_abs_diff(bn.running_mean, tensor({0.3, 3.0}, float64)) < 1e-12);
  CHECK(max_abs_diff(bn.running_var, tensor({0.9 + 0.1 * 4, 0.9 + 0.1 * 700}, float64)) < 1e-12);
  CHECK(bn.num_batches_tracked.item<int64_t>() == 1);
  bn.eval();
  Tensor z = bn(x);  // (x − running_mean) / sqrt(running_var + eps)
  CHECK(at(z, {0, 1}) == Approx((10.0 - 3.0) / std::sqrt(70.9 + 1e-5)).epsilon(1e-12));
  CHECK(bn.num_batches_tracked.item<int64_t>() == 1);  // eval changes no statistics
  // momentum None: the cumulative average of the batches' statistics
  nn::BatchNorm1d cumulative(2, 1e-5, std::nullopt);
  cumulative.to(float64);
  cumulative(x);
  cumulative(x * 3.0);
  CHECK(max_abs_diff(cumulative.running_mean,
            tensor({(3.0 + 9.0) / 2, (30.0 + 90.0) / 2}, float64)) < 1e-12);
  CHECK(cumulative.num_batches_tracked.item<int64_t>() == 2);
  // (N, C, L): each channel over N and L; weight and bias per channel
  nn::BatchNorm1d three(3);
  three.to(float64);
  three.weight.set_data(tensor({1.0, 2.0, 3.0}, float64));
  three.bias.set_data(tensor({0.5, 0.0, -1.0}, float64));
  Tensor u = randn({4, 3, 5}, float64);
  Tensor v = three(u);
  Tensor channel = mean(v, Shape{0, 2});  // the bias
  CHECK(max_abs_diff(channel, tensor({0.5, 0.0, -1.0}, float64)) < 1e-12);
  Tensor spread = var(v, Shape{0, 2}, /*correction=*/0);  // weight² · var / (var + eps) ≈ weight²
  CHECK(max_abs_diff(spread, tensor({1.0, 4.0, 9.0}, float64)) < 1e-3);
  // without running statistics, eval mode normalises by the batch's too
  nn::BatchNorm1d untracked(2, 1e-5, 0.1, /*affine=*/false, /*track_running_stats=*/false);
  untracked.eval();
  CHECK(untracked.parameters().empty());
  CHECK(untracked.state_dict().empty());
  CHECK(max_abs_diff(untracked(x.to(float32)).reshape({6}), tensor(expected, float32)) < 1e-6);
  CHECK(bn.extra_repr() == "2, eps=1e-05, momentum=0.1, affine=True, track_running_stats=True");
  CHECK(cumulative.extra_repr() ==
        "2, eps=1e-05, momentum=None, affine=True, track_running_stats=True");
}

TEST_CASE("BatchNorm1d's state_dict has PyTorch's names, and its refusals", "[nn][layers]") {
  nn::BatchNorm1d bn(4);
  std::vector<std::string> names;
  for (const auto& [name, t] : bn.state_dict()) names.push_back(name);
  CHECK(names == std::vector<std::string>{
                     "bias", "num_batches_tracked", "running_mean", "running_var", "weight"});
  CHECK(bn.num_batches_tracked.dtype() == int64);
  CHECK(bn.parameters().size() == 2);
  CHECK_THROWS_WITH(bn(zeros({2, 3})), Catch::Contains("BatchNorm1d: input of shape [2,3] is "
                                                       "neither (N, 4) nor (N, 4, L)"));
  CHECK_THROWS_AS(bn(zeros({2, 4, 1, 1})), ShapeError);
  CHECK_THROWS_AS(bn(zeros({2, 4}, int64)), DTypeError);
  CHECK_THROWS_WITH(
      bn(zeros({1, 4})), Catch::Contains("expected more than 1 value per channel when training"));
  CHECK_THROWS_AS(bn(zeros({0, 4})), ShapeError);
  bn.eval();
  CHECK(bn(zeros({1, 4})).shape() == Shape{1, 4});  // one row is fine with running statistics
  CHECK_THROWS_AS(nn::BatchNorm1d(0), ValueError);
  CHECK_THROWS_AS(nn::BatchNorm1d(3, -1.0), ValueError);
  CHECK_THROWS_AS(nn::BatchNorm1d(3, 1e-5, 1.5), ValueError);
}

TEST_CASE("Embedding looks up rows of its table for indices of any shape", "[nn][layers]") {
  manual_seed(1);
  nn::Embedding embedding(5, 3);
  Tensor y = embedding(tensor({4, 0, 4, 2, 1, 3}, {2, 3}));
  REQUIRE(y.shape() == Shape{2, 3, 3});
  const std::vector<int64_t> ids = {4, 0, 4, 2, 1, 3};
  for (int64_t n = 0; n < 6; ++n)
    CHECK(
        values(y.select(0, n / 3).select(0, n % 3)) == values(embedding.weight.select(0, ids[n])));
}

TEST_CASE("Dropout: identity in eval mode and for p = 0 — zeros or 1/(1−p)-scaled in training",
    "[nn][layers]") {
  Tensor x = nn_test::randn32({20, 30}, 2) + 5.0;  // no zeros in x
  nn::Dropout dropout(0.25);
  manual_seed(3);
  Tensor y = dropout(x);
  const std::vector<double> xs = values(x), ys = values(y);
  int dropped = 0;
  for (std::size_t i = 0; i < xs.size(); ++i) {
    if (ys[i] == 0.0)
      ++dropped;
    else
      CHECK(ys[i] == Approx(xs[i] / 0.75).epsilon(1e-6));
  }
  CHECK(dropped > 100);  // about 150 of 600
  CHECK(dropped < 200);
  manual_seed(3);
  CHECK(values(dropout(x)) == ys);  // the default generator decides the mask
  dropout.eval();
  CHECK(values(dropout(x)) == xs);
  nn::Dropout none(0.0);
  CHECK(values(none(x)) == xs);
  nn::Dropout all(1.0);
  CHECK(values(all(x)) == std::vector<double>(600, 0.0));
}

TEST_CASE("PositionWiseFFN is dense2(relu(dense1(X))) and AddNorm is LayerNorm(dropout(Y) + X)",
    "[nn][layers]") {
  manual_seed(4);
  nn::PositionWiseFFN ffn(4, 6, 3);
  Tensor X = nn_test::randn32({2, 3, 4}, 5);
  CHECK(max_abs_diff(ffn(X), ffn.dense2->forward(relu(ffn.dense1->forward(X)))) == 0.0);
  CHECK(ffn(X).shape() == Shape{2, 3, 3});

  nn::AddNorm addnorm({4}, 0.5);
  addnorm.eval();
  Tensor Y = nn_test::randn32({2, 3, 4}, 6);
  CHECK(max_abs_diff(addnorm(X, Y), addnorm.ln->forward(X + Y)) == 0.0);
  addnorm.train();
  manual_seed(9);
  Tensor trained = addnorm(X, Y);
  manual_seed(9);
  CHECK(max_abs_diff(trained, addnorm.ln->forward(dropout(Y, 0.5) + X)) == 0.0);
}

TEST_CASE("SwiGLUFFN is w2(silu(w1(X)) ⊙ w3(X)), Llama's feed-forward, without biases by default",
    "[nn][layers]") {
  manual_seed(5);
  nn::SwiGLUFFN ffn(4, 6, 3);
  const Tensor X = nn_test::randn32({2, 3, 4}, 7);
  const Tensor expected =
      ffn.w2->forward(silu(ffn.w1->forward(X)) * ffn.w3->forward(X));  // by hand
  CHECK(max_abs_diff(ffn(X), expected) == 0.0);
  CHECK(ffn(X).shape() == Shape{2, 3, 3});
  // Meta's names, in Meta's order; (in -> hidden) gate and up, (hidden -> out) down.
  std::vector<std::string> names;
  for (const auto& [name, p] : ffn.named_parameters()) names.push_back(name);
  CHECK(names == std::vector<std::string>{"w1.weight", "w2.weight", "w3.weight"});
  CHECK(ffn.w1->weight.shape() == Shape{6, 4});
  CHECK(ffn.w3->weight.shape() == Shape{6, 4});
  CHECK(ffn.w2->weight.shape() == Shape{3, 6});
  CHECK(ffn.repr() ==
        "SwiGLUFFN(\n"
        "  (w1): Linear(in_features=4, out_features=6, bias=False)\n"
        "  (w2): Linear(in_features=6, out_features=3, bias=False)\n"
        "  (w3): Linear(in_features=4, out_features=6, bias=False)\n"
        ")");
  nn::SwiGLUFFN with_bias(4, 6, 3, /*bias=*/true);
  CHECK(with_bias.num_parameters() == 2 * (6 * 4 + 6) + (3 * 6 + 3));  // w1, w3; w2
  CHECK_THROWS_AS(nn::SwiGLUFFN(0, 6, 3), ValueError);
  CHECK_THROWS_AS(ffn(ones({2, 5})), ShapeError);
}

TEST_CASE(
    "Linear and PositionWiseFFN: the fused ops give the composed path's bits, forward and "
    "gradients",
    "[nn][layers][fused]") {
  // hidden 400: dense2's sum over 400 inputs is long enough for OpenBLAS to split it into blocks.
  manual_seed(12);
  nn::PositionWiseFFN ffn(16, 400, 8);
  const Tensor X = nn_test::randn32({2, 5, 16}, 13), upstream = nn_test::randn32({2, 5, 8}, 14);
  struct Run {
    Tensor y, dx;
    std::vector<Tensor> dparameters;
    std::string root, dot;
  };
  auto run = [&](bool fused) {
    nn::FusedKernelsGuard path(fused);
    ffn.zero_grad();
    Tensor x = X.clone().requires_grad_();
    Run r;
    r.y = ffn(x);
    r.root = r.y.grad_fn()->name();
    r.dot = to_dot(r.y);
    r.y.backward(upstream);
    r.dx = x.grad();
    for (const Tensor& p : ffn.parameters()) r.dparameters.push_back(p.grad().clone());
    return r;
  };
  const Run fused = run(true), composed = run(false);
  // Different code: dense2 is one linear op and dense1 with relu one linear_relu op, against
  // matmul, add and relu.
  CHECK(fused.root == "linear");
  CHECK_THAT(fused.dot, Catch::Contains("linear_relu"));
  CHECK(composed.root == "add");
  CHECK_THAT(composed.dot, Catch::Contains("relu") && !Catch::Contains("linear"));
  CHECK(values(fused.y) == values(composed.y));
  CHECK(values(fused.dx) == values(composed.dx));
  REQUIRE(fused.dparameters.size() == 4);
  for (std::size_t i = 0; i < fused.dparameters.size(); ++i) {
    INFO("parameter " << i);
    CHECK(values(fused.dparameters[i]) == values(composed.dparameters[i]));
  }
}

TEST_CASE("DotProductAttention is softmax(Q·Kᵀ/√d)·V", "[nn][layers]") {
  nn::DotProductAttention attention(0.0);
  Tensor q = nn_test::input64({2, 3, 4}, 7).detach(), k = nn_test::input64({2, 5, 4}, 8).detach();
  Tensor v = nn_test::input64({2, 5, 6}, 9).detach();
  Tensor y = attention(q, k, v, tensor({2, 5}));
  Tensor expected_weights = nn::masked_softmax(matmul(q, k.transpose(1, 2)) / 2.0, tensor({2, 5}));
  CHECK(max_abs_diff(attention.attention_weights(), expected_weights) < 1e-15);
  CHECK(max_abs_diff(y, matmul(expected_weights, v)) < 1e-15);
  // One weight by hand: query 0 of row 0 against its two valid keys.
  double s0 = 0, s1 = 0;
  for (int64_t c = 0; c < 4; ++c) {
    s0 += at(q, {0, 0, c}) * at(k, {0, 0, c}) / 2;
    s1 += at(q, {0, 0, c}) * at(k, {0, 1, c}) / 2;
  }
  CHECK(at(attention.attention_weights(), {0, 0, 0}) ==
        Approx(std::exp(s0) / (std::exp(s0) + std::exp(s1))));
}

TEST_CASE("AdditiveAttention scores w_vᵀ tanh(W_q q + W_k k)", "[nn][layers]") {
  manual_seed(10);
  nn::AdditiveAttention attention(3, 2, 4, 0.0);
  attention.to(float64);
  Tensor q = nn_test::input64({1, 2, 2}, 11).detach(), k = nn_test::input64({1, 3, 3}, 12).detach();
  Tensor v = nn_test::input64({1, 3, 2}, 13).detach();
  Tensor y = attention(q, k, v, tensor({2}));
  REQUIRE(y.shape() == Shape{1, 2, 2});
  // The scores of query 1 against keys 0 and 1, by hand; key 2 is masked.
  auto score = [&](int64_t qi, int64_t ki) {
    double s = 0;
    for (int64_t h = 0; h < 4; ++h) {
      double pre = 0;
      for (int64_t c = 0; c < 2; ++c) pre += at(attention.W_q->weight, {h, c}) * at(q, {0, qi, c});
      for (int64_t c = 0; c < 3; ++c) pre += at(attention.W_k->weight, {h, c}) * at(k, {0, ki, c});
      s += at(attention.w_v->weight, {0, h}) * std::tanh(pre);
    }
    return s;
  };
  const double e0 = std::exp(score(1, 0)), e1 = std::exp(score(1, 1));
  const Tensor& W = attention.attention_weights();
  CHECK(at(W, {0, 1, 0}) == Approx(e0 / (e0 + e1)).margin(1e-12));
  CHECK(at(W, {0, 1, 1}) == Approx(e1 / (e0 + e1)).margin(1e-12));
  CHECK(at(W, {0, 1, 2}) == 0.0);
  CHECK(at(y, {0, 1, 1}) ==
        Approx(at(W, {0, 1, 0}) * at(v, {0, 0, 1}) + at(W, {0, 1, 1}) * at(v, {0, 1, 1}))
            .margin(1e-12));
}

TEST_CASE("TransformerEncoderBlock and TransformerEncoder are d2l's compositions", "[nn][layers]") {
  manual_seed(14);
  nn::TransformerEncoder encoder(10, 8, 8, 8, 8, {8}, 8, 16, 2, 2, 0.0);
  encoder.eval();
  const Tensor ids = nn_test::tokens({2, 4}, 10, 15), lens = tensor({4, 2});
  // X = PositionalEncoding(Embedding(tokens)·√D), then the blocks in order.
  Tensor X =
      encoder.embedding->forward(ids) * std::sqrt(8.0) + encoder.pos_encoding->P.narrow(1, 0, 4);
  for (std::size_t i = 0; i < encoder.blks->size(); ++i) {
    auto blk = encoder.blks->at<nn::TransformerEncoderBlock>(i);
    // Y = AddNorm(X, attention(X, X, X)), out = AddNorm(Y, FFN(Y)).
    Tensor Y = blk->addnorm1->forward(X, blk->attention->forward(X, X, X, lens));
    Tensor out = blk->addnorm2->forward(Y, blk->ffn->forward(Y));
    CHECK(max_abs_diff(blk->forward(X, lens), out) == 0.0);
    X = out;
  }
  CHECK(max_abs_diff(encoder(ids, lens), X) <= 1e-6);
  const auto weights = encoder.attention_weights();
  REQUIRE(weights.size() == 2);
  CHECK(weights[1].shape() == Shape{2, 2, 4, 4});
}

TEST_CASE(
    "TransformerDecoder: logits are dense(blocks(Embedding·√D + P)) with a causal first attention",
    "[nn][layers]") {
  manual_seed(16);
  nn::TransformerDecoder decoder(10, 8, 8, 8, 8, {8}, 8, 16, 2, 1, 0.0);
  decoder.eval();
  const Tensor enc_outputs = nn_test::randn32({2, 3, 8}, 17), enc_lens = tensor({3, 1});
  const Tensor ids = nn_test::tokens({2, 4}, 10, 18);
  nn::DecoderState state = decoder.init_state(enc_outputs, enc_lens);
  const Tensor logits = decoder.forward(ids, state);
  REQUIRE(logits.shape() == Shape{2, 4, 10});

  auto blk = decoder.blks->at<nn::TransformerDecoderBlock>(0);
  Tensor X =
      decoder.embedding->forward(ids) * std::sqrt(8.0) + decoder.pos_encoding->P.narrow(1, 0, 4);
  Tensor causal = tensor({1, 2, 3, 4, 1, 2, 3, 4}, {2, 4});
  Tensor Y = blk->addnorm1->forward(X, blk->attention1->forward(X, X, X, causal));
  Tensor Z =
      blk->addnorm2->forward(Y, blk->attention2->forward(Y, enc_outputs, enc_outputs, enc_lens));
  Tensor out = blk->addnorm3->forward(Z, blk->ffn->forward(Z));
  CHECK(max_abs_diff(logits, decoder.dense->forward(out)) <= 1e-6);
  // The state now caches the block's input for later steps.
  REQUIRE(state.key_values.size() == 1);
  CHECK(max_abs_diff(state.key_values[0], X) <= 1e-6);
  // Cross-attention respects the encoder's valid lengths: row 1 sees only encoder position 0.
  const Tensor cross = decoder.cross_attention_weights()[0];
  REQUIRE(cross.shape() == Shape{2, 2, 4, 3});
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t q = 0; q < 4; ++q) CHECK(at(cross, {1, h, q, 0}) == 1.0);
}
