// The training losses: masked_softmax_ce (d2l's MaskedSoftmaxCELoss, normalised per valid token),
// mse_loss, and the fused cross_entropy under extreme logits.
#include <catch2/catch.hpp>

#include <cmath>

#include "autograd/gradcheck.h"
#include "nn/nn.h"

using namespace ag;
using Catch::Matchers::Contains;

TEST_CASE("masked_softmax_ce: float64 gradcheck on the logits", "[nn][loss][gradcheck]") {
  Generator g(3);
  Tensor logits = randn({2, 4, 5}, g, float64).requires_grad_();
  Tensor labels = tensor({1, 4, 0, 2, 3, 3, 1, 0}, {2, 4}, float64);
  Tensor lens = tensor({3, 1}, float64);
  CHECK(gradcheck(
      [&](const std::vector<Tensor>& in) { return nn::masked_softmax_ce(in[0], labels, lens); },
      {logits}));
}

TEST_CASE("masked_softmax_ce: uniform logits give ln V whatever the lengths", "[nn][loss]") {
  for (auto lens :
      {std::vector<double>{4, 4}, std::vector<double>{1, 3}, std::vector<double>{2, 0}}) {
    Tensor logits = zeros({2, 4, 7});
    Tensor labels = tensor({1, 2, 3, 4, 5, 6, 0, 1}, {2, 4});
    CHECK(nn::masked_softmax_ce(logits, labels, tensor(lens)).item() == Approx(std::log(7.0)));
  }
}

TEST_CASE(
    "masked_softmax_ce: the mean per valid token — padding gets gradient exactly 0", "[nn][loss]") {
  Generator g(5);
  Tensor logits = randn({2, 3, 4}, g, float64).requires_grad_();
  Tensor labels = tensor({1, 2, 3, 0, 1, 2}, {2, 3}, float64);
  Tensor lens = tensor({2, 1}, float64);
  Tensor loss = nn::masked_softmax_ce(logits, labels, lens);
  // By hand: the three valid tokens (0,0), (0,1), (1,0).
  Tensor per_token =
      cross_entropy(logits.detach().reshape({6, 4}), labels.reshape({6}), Reduction::none);
  const std::vector<double> ce = per_token.to_vector<double>();
  CHECK(loss.item() == Approx((ce[0] + ce[1] + ce[3]) / 3.0).epsilon(1e-12));
  loss.backward();
  const std::vector<double> grad = logits.grad().to_vector<double>();
  for (int64_t v = 0; v < 4; ++v) {
    CHECK(grad[2 * 4 + v] == 0.0);        // batch 0, position 2: padding
    CHECK(grad[(3 + 1) * 4 + v] == 0.0);  // batch 1, position 1
    CHECK(grad[(3 + 2) * 4 + v] == 0.0);  // batch 1, position 2
  }
}

TEST_CASE("masked_softmax_ce errors name the shapes", "[nn][loss]") {
  Tensor logits = zeros({2, 3, 4}), labels = zeros({2, 3});
  CHECK_THROWS_WITH(nn::masked_softmax_ce(logits, zeros({3, 2}), tensor({1, 1})),
      Contains("masked_softmax_ce") && Contains("[2,3,4]") && Contains("[3,2]"));
  CHECK_THROWS_WITH(
      nn::masked_softmax_ce(logits, labels, tensor({4, 1})), Contains("valid length 4"));
  CHECK_THROWS_WITH(
      nn::masked_softmax_ce(logits, labels, tensor({0, 0})), Contains("no valid tokens"));
  CHECK_THROWS_WITH(
      nn::masked_softmax_ce(logits, tensor({0, 0, 0, 0, 9, 0}, {2, 3}), tensor({3, 3})),
      Contains("cross_entropy: target 9"));
}

TEST_CASE("cross_entropy stays finite for logits of +-1e4", "[nn][loss]") {
  Tensor logits = tensor({1e4, -1e4, 0.0, -1e4, 1e4, 1e4}, {2, 3}).requires_grad_();
  Tensor loss = cross_entropy(logits, tensor({1, 0}), Reduction::sum);
  // Row 0: log Σ exp ≈ 1e4, minus x_1 = −1e4 → 2e4. Row 1: log(2e^1e4) + 1e4 = 2e4 + ln 2.
  CHECK(loss.item() == Approx(2e4 + 2e4 + std::log(2.0)).epsilon(1e-6));
  loss.backward();
  for (double v : logits.grad().to_vector<double>()) CHECK(std::isfinite(v));
  CHECK(logits.grad().to_vector<double>()[1] == Approx(-1.0));
}

TEST_CASE("mse_loss: value and float64 gradcheck", "[nn][loss]") {
  CHECK(nn::mse_loss(tensor({1.0, 2.0}), tensor({3.0, 2.0})).item() == Approx(2.0));
  Generator g(1);
  Tensor p = randn({3, 2}, g, float64).requires_grad_(),
         t = randn({3, 2}, g, float64).requires_grad_();
  CHECK(
      gradcheck([](const std::vector<Tensor>& in) { return nn::mse_loss(in[0], in[1]); }, {p, t}));
  CHECK_THROWS_WITH(nn::mse_loss(ones({2}), ones({3, 2})), Contains("mse_loss"));
}
