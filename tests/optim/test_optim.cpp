// Optimizer behaviour beyond the PyTorch fixtures: skipped parameters, zero_grad, clipping,
// schedules against their formulas, and argument errors.
#include <catch2/catch.hpp>

#include <cmath>
#include <memory>
#include <numbers>
#include <type_traits>
#include <utility>
#include <vector>

#include "autograd/generator.h"
#include "autograd/ops.h"

#include "optim/optimizer.h"
#include "optim/schedule.h"

using namespace ag;
using Catch::Matchers::Contains;

TEST_CASE("parameters without a gradient are left alone — zero_grad drops gradients", "[optim]") {
  Tensor a = tensor({1.0, 2.0}).requires_grad_(), b = tensor({3.0}).requires_grad_();
  optim::Adam adam({a, b}, 0.1);
  a.set_grad(tensor({1.0, -1.0}));
  adam.step();
  CHECK(b.item() == 3.0);
  CHECK(a.to_vector<double>()[0] == Approx(0.9));  // Adam's first step moves by lr·sign(g)
  adam.zero_grad();
  CHECK_FALSE(a.grad().defined());
}

TEST_CASE(
    "a step bumps the parameters' version: a retained graph that saved them refuses a "
    "second backward, a new forward works",
    "[optim]") {
  // As PyTorch: loss.backward(retain_graph=True); opt.step(); loss.backward() raises, because
  // mul saved w and the step changed it in place.
  Tensor x = tensor({2.0, 3.0});
  Tensor w = tensor({1.0, 1.0}).requires_grad_();
  optim::SGD sgd({w}, 0.25);
  optim::AdamW adamw({w}, 0.25);
  for (optim::Optimizer* optimizer : std::vector<optim::Optimizer*>{&sgd, &adamw}) {
    Tensor loss = sum(x * w);
    loss.backward(Tensor(), /*retain_graph=*/true);
    const uint64_t before = w.version();
    optimizer->step();
    CHECK(w.version() == before + 1);
    CHECK_THROWS_AS(loss.backward(Tensor(), /*retain_graph=*/true), AutogradError);
    CHECK_THROWS_WITH(loss.backward(), Contains("backward of 'mul'"));
    optimizer->zero_grad();
    sum(x * w).backward();
    CHECK(w.grad().to_vector<double>() == std::vector<double>{2.0, 3.0});
    optimizer->zero_grad();
  }
}

// Adam's step, one element at a time, in the order of operations ag promises (PyTorch's addcdiv):
// the reference the vectorised loop must reproduce bit for bit.
template <class T>
void adam_reference(std::vector<T>& p, const std::vector<T>& g, std::vector<T>& m,
    std::vector<T>& v, int step, double lr, double beta1, double beta2, double eps, double wd,
    bool decoupled) {
  const T b1 = T(beta1), b2 = T(beta2), one_minus_b1 = T(1 - beta1), one_minus_b2 = T(1 - beta2);
  const T c2 = T(std::sqrt(1 - std::pow(beta2, step)));
  const T neg_step_size = T(-(lr / (1 - std::pow(beta1, step))));
  for (std::size_t i = 0; i < p.size(); ++i) {
    T gradient = g[i];
    if (decoupled)
      p[i] = p[i] * T(1 - lr * wd);
    else if (T(wd) != T(0))
      gradient = gradient + T(wd) * p[i];
    m[i] = m[i] * b1 + one_minus_b1 * gradient;
    v[i] = v[i] * b2 + one_minus_b2 * gradient * gradient;
    const T denom = std::sqrt(v[i]) / c2 + T(eps);
    p[i] = p[i] + neg_step_size * m[i] / denom;
  }
}

TEMPLATE_TEST_CASE(
    "Adam and AdamW give the one-element-at-a-time formula's bits", "[optim]", float, double) {
  const DType dtype = std::is_same_v<TestType, float> ? float32 : float64;
  for (const auto& [decoupled, wd] : {std::pair{false, 0.0}, {false, 0.01}, {true, 0.1}}) {
    INFO((decoupled ? "AdamW" : "Adam") << ", weight decay " << wd);
    Generator gen(5);
    const int64_t n = 1037;  // not a multiple of any vector width
    Tensor w = randn({n}, gen, dtype).requires_grad_();
    std::vector<TestType> p = w.to_vector<TestType>(), m(n, 0), v(n, 0);
    std::unique_ptr<optim::Optimizer> adam;
    if (decoupled)
      adam = std::make_unique<optim::AdamW>(
          std::vector<Tensor>{w}, 0.01, std::pair{0.9, 0.99}, 1e-8, wd);
    else
      adam = std::make_unique<optim::Adam>(
          std::vector<Tensor>{w}, 0.01, std::pair{0.9, 0.99}, 1e-8, wd);
    for (int step = 1; step <= 3; ++step) {
      Tensor g = randn({n}, gen, dtype);
      w.set_grad(g);
      adam->step();
      adam_reference(p, g.to_vector<TestType>(), m, v, step, 0.01, 0.9, 0.99, 1e-8, wd, decoupled);
      CHECK(w.to_vector<TestType>() == p);
    }
  }
}

TEST_CASE(
    "clip_grad_norm scales all gradients by one factor and returns the norm before", "[optim]") {
  Tensor a = zeros({2}).requires_grad_(), b = zeros({1}).requires_grad_();
  a.set_grad(tensor({3.0, 0.0}));
  b.set_grad(tensor({4.0}));
  const double total = optim::clip_grad_norm({a, b}, 1.0);
  CHECK(total == Approx(5.0));
  CHECK(a.grad().to_vector<double>()[0] == Approx(3.0 / 5.0).epsilon(1e-5));
  CHECK(b.grad().item() == Approx(4.0 / 5.0).epsilon(1e-5));
  // Below the threshold nothing changes.
  CHECK(optim::clip_grad_norm({a, b}, 10.0) == Approx(1.0).epsilon(1e-5));
  CHECK(b.grad().item() == Approx(0.8).epsilon(1e-5));
  CHECK_THROWS_AS(optim::clip_grad_norm({a}, 0.0), ValueError);
}

TEST_CASE("schedules follow their formulas", "[optim][schedule]") {
  auto noam = optim::transformer_schedule(32, 100);
  for (int64_t t : {1, 50, 100, 101, 1000, 10000})
    CHECK(noam(t) == Approx(std::pow(32.0, -0.5) * std::min(std::pow(double(t), -0.5),
                                                       double(t) * std::pow(100.0, -1.5))));
  // Its peak is at the end of the warm-up.
  CHECK(noam(100) > noam(99));
  CHECK(noam(100) > noam(101));

  auto cosine = optim::cosine_with_warmup(10, 110, 0.1);
  CHECK(cosine(1) == Approx(0.1));
  CHECK(cosine(10) == Approx(1.0));
  CHECK(cosine(60) == Approx(0.1 + 0.9 * 0.5 * (1 + std::cos(std::numbers::pi * 0.5))));
  CHECK(cosine(110) == Approx(0.1));
  CHECK(cosine(500) == Approx(0.1));

  // nanoGPT's get_lr(it) / learning_rate with warmup_iters 10, lr_decay_iters 110, min_lr / lr
  // 0.1, at update t = it + 1: (it + 1) / 11 during the warm-up, the peak at it = 10, the
  // cosine's middle at it = 60, min_lr from it = 110 on.
  auto nanogpt = optim::nanogpt_schedule(10, 110, 0.1);
  CHECK(nanogpt(1) == Approx(1.0 / 11));    // it 0: not 0, a first step that moves
  CHECK(nanogpt(10) == Approx(10.0 / 11));  // it 9
  CHECK(nanogpt(11) == 1.0);                // it 10: the peak
  CHECK(nanogpt(61) == Approx(0.1 + 0.9 * 0.5));
  CHECK(nanogpt(36) == Approx(0.1 + 0.9 * 0.5 * (1 + std::cos(std::numbers::pi * 0.25))));
  CHECK(nanogpt(111) == Approx(0.1));  // it 110 = lr_decay_iters
  CHECK(nanogpt(112) == 0.1);
  CHECK(nanogpt(5000) == 0.1);
  CHECK(optim::nanogpt_schedule(0, 5, 0.0)(1) == 1.0);  // no warm-up: the peak at once
  CHECK_THROWS_AS(optim::nanogpt_schedule(10, 10, 0.1), ValueError);
  CHECK_THROWS_AS(optim::nanogpt_schedule(-1, 10, 0.1), ValueError);
  CHECK_THROWS_AS(optim::nanogpt_schedule(1, 10, 1.5), ValueError);

  auto decay = optim::step_decay(3, 0.5);
  CHECK(decay(1) == 1.0);
  CHECK(decay(3) == 1.0);
  CHECK(decay(4) == 0.5);
  CHECK(decay(7) == 0.25);
}

TEST_CASE("a Scheduler sets each group's lr from its base lr", "[optim][schedule]") {
  Tensor a = zeros({1}).requires_grad_(), b = zeros({1}).requires_grad_();
  optim::SGD sgd(std::vector<optim::ParamGroup>{{{a}, {}, {}}, {{b}, 0.5, {}}}, 0.1);
  optim::Scheduler scheduler(sgd, optim::step_decay(2, 0.1));
  CHECK(scheduler.lr(0) == Approx(0.1));
  CHECK(scheduler.lr(1) == Approx(0.5));
  scheduler.step();
  scheduler.step();  // update 3: one decay
  CHECK(scheduler.current_step() == 3);
  CHECK(scheduler.lr(0) == Approx(0.01));
  CHECK(scheduler.lr(1) == Approx(0.05));
  scheduler.set_step(1);
  CHECK(scheduler.lr(1) == Approx(0.5));
}

TEST_CASE("optimizer argument errors", "[optim]") {
  Tensor a = zeros({2}).requires_grad_();
  CHECK_THROWS_WITH(optim::SGD({a}, -0.1), Contains("SGD: learning rate -0.1"));
  CHECK_THROWS_WITH(optim::SGD({a}, 0.1, 0.0, 0.0, 0.0, true), Contains("Nesterov"));
  CHECK_THROWS_WITH(optim::Adam({a}, 0.1, {1.0, 0.999}), Contains("Adam: betas"));
  CHECK_THROWS_WITH(
      optim::AdamW({a}, 0.1, {0.9, 0.999}, 1e-8, -1.0), Contains("AdamW: weight decay"));
  CHECK_THROWS_AS(optim::Adam({a.transpose(0, 0) * 2.0}), ValueError);  // not a leaf
  CHECK_THROWS_AS(optim::cosine_with_warmup(10, 10), ValueError);
}

// ---- parameter groups without ambiguity, and no tensor twice (the own-model issue) -------------

TEST_CASE("braced lists of tensors are groups, and a flat list is one group", "[optim][groups]") {
  const Tensor a = zeros({2}).requires_grad_(), b = zeros({3}).requires_grad_();
  // {{a}, {b}} compiled as one group of two tensors before.
  optim::AdamW two({{a}, {b}}, 0.1);
  REQUIRE(two.param_groups().size() == 2);
  CHECK(two.param_groups()[0].params.size() == 1);
  CHECK(two.param_groups()[1].params[0].is_same(b));
  CHECK(optim::SGD({{a}, {b}}, 0.1).param_groups().size() == 2);
  CHECK(optim::Adam({{a}, {b}}, 0.1).param_groups().size() == 2);
  optim::AdamW one({a, b}, 0.1);
  REQUIRE(one.param_groups().size() == 1);
  CHECK(one.param_groups()[0].params.size() == 2);
  // Groups with their own options, as nanoGPT's decay / no-decay split.
  const std::vector<Tensor> decay{a}, no_decay{b};
  optim::AdamW split({{decay}, {no_decay, {}, 0.0}}, 0.1);
  REQUIRE(split.param_groups().size() == 2);
  CHECK(split.param_groups()[1].weight_decay == 0.0);
  CHECK(split.param_groups()[0].weight_decay == 1e-2);
}

TEST_CASE("weight_decay_groups decays only the parameters of 2 or more dims (nanoGPT's)",
    "[optim][groups]") {
  // A Linear's weight (2-D), its bias (1-D), an embedding (2-D), a LayerNorm weight (1-D), and a
  // 3-D tensor; all start at 1 with a zero gradient, so that AdamW's step is its decay alone:
  // θ ← θ − lr·λ·θ where decayed, and θ unchanged (m = v = 0) where not.
  const std::vector<Tensor> params = {ones({3, 2}).requires_grad_(), ones({3}).requires_grad_(),
      ones({5, 2}).requires_grad_(), ones({2}).requires_grad_(), ones({2, 2, 2}).requires_grad_()};
  const std::vector<optim::ParamGroup> groups = optim::weight_decay_groups(params, 0.1);
  REQUIRE(groups.size() == 2);
  REQUIRE(groups[0].params.size() == 3);
  CHECK(groups[0].params[0].is_same(params[0]));
  CHECK(groups[0].params[1].is_same(params[2]));
  CHECK(groups[0].params[2].is_same(params[4]));
  REQUIRE(groups[1].params.size() == 2);
  CHECK(groups[1].params[0].is_same(params[1]));
  CHECK(groups[1].params[1].is_same(params[3]));
  optim::AdamW adamw(groups, 0.5, {0.9, 0.99});
  CHECK(adamw.param_groups()[0].weight_decay == 0.1);
  CHECK(adamw.param_groups()[1].weight_decay == 0.0);
  for (const Tensor& p : params) p.set_grad(zeros(p.shape()));
  adamw.step();
  for (const Tensor& p : params) {
    INFO("a parameter of " << p.dim() << " dims");
    CHECK(p.sum().item() == Approx(static_cast<double>(p.numel()) * (p.dim() >= 2 ? 0.95 : 1.0)));
  }
}

TEST_CASE("an optimizer refuses a tensor given twice, in one group or in two", "[optim][groups]") {
  const Tensor a = zeros({2}).requires_grad_(), b = zeros({3}).requires_grad_();
  CHECK_THROWS_AS(optim::SGD({a, b, a}, 0.1), ValueError);
  CHECK_THROWS_WITH(optim::SGD({a, b, a}, 0.1),
      Contains("SGD: parameter 2 of group 0 is parameter 0 of group 0 again"));
  CHECK_THROWS_WITH(optim::AdamW({{a, b}, {b}}, 0.1),
      Contains("AdamW: parameter 0 of group 1 is parameter 1 of group 0 again"));
  CHECK_THROWS_WITH(optim::Adam({{a}, {a}}, 0.1), Contains("Adam: parameter 0 of group 1"));
  // A view of a parameter is another tensor (not a leaf): refused as before.
  CHECK_THROWS_AS(optim::SGD({a, a.view({2})}, 0.1), ValueError);
}

TEST_CASE("clip_grad_norm counts a tensor listed twice once", "[optim][groups]") {
  Tensor w = zeros({1}).requires_grad_();
  w.set_grad(ones({1}));
  CHECK(optim::clip_grad_norm({w, w}, 0.5) == Approx(1.0));  // was √2
  CHECK(w.grad().item() == Approx(0.5 / (1 + 1e-6)));        // scaled once, not twice
}
