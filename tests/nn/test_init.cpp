// Initialisation: torch.nn's bounds and distributions, and reproducibility under ag::manual_seed.
#include <algorithm>
#include <set>

#include "nn_test_util.h"

using namespace ag;
using nn_test::values;

namespace {

struct Stats {
  double mean, var, max_abs;
};

Stats stats(const Tensor& t) {
  const std::vector<double> v = values(t);
  double sum = 0, max_abs = 0;
  for (double x : v) {
    sum += x;
    max_abs = std::max(max_abs, std::abs(x));
  }
  const double mean = sum / static_cast<double>(v.size());
  double ss = 0;
  for (double x : v) ss += (x - mean) * (x - mean);
  return {mean, ss / static_cast<double>(v.size() - 1), max_abs};
}

std::size_t distinct(const Tensor& t) {
  const std::vector<double> v = values(t);
  return std::set<double>(v.begin(), v.end()).size();
}

}  // namespace

TEST_CASE("Linear weights and biases lie within ±1/sqrt(in_features) and vary", "[nn][init]") {
  manual_seed(1);
  nn::Linear linear(64, 32);
  const double bound = 1.0 / std::sqrt(64.0);
  const Stats w = stats(linear.weight), b = stats(linear.bias);
  CHECK(w.max_abs <= bound);
  CHECK(b.max_abs <= bound);
  CHECK(distinct(linear.weight) > 2000);  // 2048 draws, essentially all different
  CHECK(distinct(linear.bias) > 30);
  // The bound is the one of torch.nn.Linear, not a smaller one: the draws come close to it and
  // the variance is that of U(−bound, bound), bound²/3.
  CHECK(w.max_abs > 0.98 * bound);
  CHECK(w.var == Approx(bound * bound / 3).epsilon(0.1));
}

TEST_CASE("Linear's bias bound is 1/sqrt(in_features) as well", "[nn][init]") {
  manual_seed(2);
  nn::Linear linear(4, 2000);  // 2000 biases with bound 0.5
  const Stats b = stats(linear.bias);
  CHECK(b.max_abs <= 0.5);
  CHECK(b.max_abs > 0.49);
  CHECK(b.var == Approx(0.25 / 3).epsilon(0.1));
  CHECK(std::abs(b.mean) < 0.03);
}

TEST_CASE("the same seed gives the same parameters, another seed other ones", "[nn][init]") {
  auto build = [](uint64_t seed) {
    manual_seed(seed);
    return std::make_shared<nn::TransformerEncoder>(
        10, 8, 8, 8, 8, std::vector<int64_t>{8}, 8, 16, 2, 2, 0.0);
  };
  auto a = build(42), b = build(42), c = build(43);
  const auto pa = a->parameters(), pb = b->parameters(), pc = c->parameters();
  REQUIRE(pa.size() == pb.size());
  REQUIRE(pa.size() == pc.size());
  int same_as_other_seed = 0;
  for (std::size_t i = 0; i < pa.size(); ++i) {
    CHECK(values(pa[i]) == values(pb[i]));
    // LayerNorm's ones and zeros do not depend on the seed; random tensors must.
    if (values(pa[i]) == values(pc[i])) ++same_as_other_seed;
  }
  CHECK(same_as_other_seed == 2 * 4);  // the 4 LayerNorm tensors of each of the 2 blocks
  CHECK(values(a->embedding->weight) != values(c->embedding->weight));
}

TEST_CASE(
    "xavier_uniform_ respects gain·sqrt(6/(fan_in+fan_out)) with variance bound²/3", "[nn][init]") {
  Tensor w = empty({200, 300});
  Generator generator(3);
  nn::init::xavier_uniform_(w, 2.0, generator);
  const double bound = 2.0 * std::sqrt(6.0 / (300 + 200));
  const Stats s = stats(w);
  CHECK(s.max_abs <= bound);
  CHECK(s.max_abs > 0.999 * bound);
  // 60000 draws: the relative standard error of the variance is about 0.4 %.
  CHECK(s.var == Approx(bound * bound / 3).epsilon(0.03));
  CHECK(std::abs(s.mean) < 0.01 * bound);

  // The fans of a (out, in) weight.
  const nn::init::Fans f = nn::init::fans(w);
  CHECK(f.fan_in == 300);
  CHECK(f.fan_out == 200);

  // Reproducible from the generator's seed.
  Tensor again = empty({200, 300});
  Generator same(3);
  nn::init::xavier_uniform_(again, 2.0, same);
  CHECK(values(again) == values(w));
}

TEST_CASE("calculate_gain gives PyTorch's gains, and refuses another name", "[nn][init]") {
  using nn::init::calculate_gain;
  for (const char* unit : {"linear", "conv2d", "conv_transpose3d", "sigmoid", "identity"})
    CHECK(calculate_gain(unit) == 1.0);
  CHECK(calculate_gain("tanh") == 5.0 / 3.0);
  CHECK(calculate_gain("relu") == std::sqrt(2.0));
  CHECK(calculate_gain("leaky_relu") == std::sqrt(2.0 / (1.0 + 0.01 * 0.01)));  // slope 0.01
  CHECK(calculate_gain("leaky_relu", std::sqrt(5.0)) == std::sqrt(2.0 / 6.0));  // Linear's
  CHECK(calculate_gain("selu") == 0.75);
  CHECK_THROWS_WITH(calculate_gain("gelu"),
      Catch::Matchers::Contains("calculate_gain: unsupported nonlinearity 'gelu'"));
}

TEST_CASE("kaiming_normal_ and xavier_normal_ draw N(0, σ²) with PyTorch's σ, by fan_in or fan_out",
    "[nn][init]") {
  // 60000 draws each: the relative standard error of the variance is about 0.6 %.
  Tensor w = empty({200, 300});  // fan_in 300, fan_out 200
  Generator generator(5);
  const double tanh_gain = 5.0 / 3.0;  // makemore's kaiming_normal_(W, nonlinearity='tanh')
  nn::init::kaiming_normal_(w, 0.0, nn::init::FanMode::fan_in, "tanh", generator);
  Stats s = stats(w);
  CHECK(s.var == Approx(tanh_gain * tanh_gain / 300).epsilon(0.03));
  CHECK(std::abs(s.mean) < 0.02 * std::sqrt(s.var));
  nn::init::kaiming_normal_(w, 0.0, nn::init::FanMode::fan_out, "relu", generator);
  CHECK(stats(w).var == Approx(2.0 / 200).epsilon(0.03));
  nn::init::xavier_normal_(w, 2.0, generator);
  CHECK(stats(w).var == Approx(4.0 * 2.0 / 500).epsilon(0.03));
  // kaiming_uniform_ by fan_out: U(±gain · sqrt(3 / fan_out))
  nn::init::kaiming_uniform_(w, 0.0, nn::init::FanMode::fan_out, "relu", generator);
  const double bound = std::sqrt(2.0) * std::sqrt(3.0 / 200);
  s = stats(w);
  CHECK(s.max_abs <= bound);
  CHECK(s.max_abs > 0.999 * bound);
  CHECK(s.var == Approx(bound * bound / 3).epsilon(0.03));
}

TEST_CASE("Embedding weights are N(0, 1)", "[nn][init]") {
  manual_seed(4);
  nn::Embedding embedding(1000, 64);  // 64000 draws
  const Stats s = stats(embedding.weight);
  CHECK(std::abs(s.mean) < 0.02);             // standard error 0.004
  CHECK(s.var == Approx(1.0).epsilon(0.03));  // standard error 0.0056
  CHECK(s.max_abs > 3.5);                     // a normal, not a bounded uniform
}

TEST_CASE("LearnedPositionalEncoding starts N(0, 0.02²)", "[nn][init]") {
  manual_seed(5);
  nn::LearnedPositionalEncoding encoding(64, 0.0, 500);  // 32000 draws
  const Stats s = stats(encoding.P);
  CHECK(std::abs(s.mean) < 0.001);
  CHECK(std::sqrt(s.var) == Approx(0.02).epsilon(0.03));
}

TEST_CASE("LayerNorm starts with weight 1 and bias 0", "[nn][init]") {
  nn::LayerNorm ln({3, 4});
  CHECK(values(ln.weight) == std::vector<double>(12, 1.0));
  CHECK(values(ln.bias) == std::vector<double>(12, 0.0));
  CHECK(ln.weight.shape() == Shape{3, 4});
}
