// nanoGPT's GPT (models/gpt.h): model.py's names and tying, its initialisation, a float64
// gradcheck of a tiny one, causality, and the block-size check.
#include <catch2/catch.hpp>

#include <cmath>
#include <set>
#include <string>

#include "autograd/gradcheck.h"
#include "models/gpt.h"
#include "tests/autograd/what_contains.h"

using namespace ag;

namespace {
gpt::GPTConfig tiny(bool bias) {
  return {.block_size = 6,
      .vocab_size = 7,
      .n_layer = 2,
      .n_head = 2,
      .n_embd = 4,
      .dropout = 0,
      .bias = bias};
}
}  // namespace

TEST_CASE(
    "GPT has model.py's parameter names, with the head tied to the token embedding", "[gpt]") {
  manual_seed(0);
  gpt::GPT model(tiny(/*bias=*/true));
  std::set<std::string> names;
  for (const auto& [name, p] : model.named_parameters()) names.insert(name);
  CHECK(names.count("transformer.wte.weight"));
  CHECK(names.count("transformer.wpe.weight"));
  CHECK(names.count("transformer.h.1.attn.c_attn.weight"));
  CHECK(names.count("transformer.h.1.attn.c_attn.bias"));
  CHECK(names.count("transformer.h.0.mlp.c_proj.weight"));
  CHECK(names.count("transformer.ln_f.bias"));
  CHECK(!names.count("lm_head.weight"));  // the tied weight is listed once, under wte
  CHECK(model.lm_head->weight.is_same(model.wte->weight));
  gpt::GPT no_bias(tiny(/*bias=*/false));
  for (const auto& [name, p] : no_bias.named_parameters()) CHECK(!name.ends_with(".bias"));
  // get_num_params: everything once, less the position embeddings
  CHECK(model.get_num_params() == model.num_parameters() - 6 * 4);
}

TEST_CASE("GPT's residual projections start at N(0, 0.02/sqrt(2 n_layer))", "[gpt]") {
  manual_seed(1);
  gpt::GPT model({.block_size = 8, .vocab_size = 11, .n_layer = 8, .n_head = 4, .n_embd = 64});
  auto std_of = [](const Tensor& w) {
    const std::vector<double> v = w.to_vector<double>();
    double sum = 0, squares = 0;
    for (double x : v) sum += x, squares += x * x;
    const double n = static_cast<double>(v.size()), mean = sum / n;
    return std::sqrt(squares / n - mean * mean);
  };
  // 4096 to 16384 samples each: within 5 % of the scale they were drawn at
  for (const auto& [name, p] : model.named_parameters()) {
    if (p.dim() < 2) continue;
    INFO(name);
    const double expected = name.ends_with("c_proj.weight") ? 0.02 / std::sqrt(16.0) : 0.02;
    CHECK(std_of(p) == Approx(expected).epsilon(0.05));
  }
}

TEST_CASE(
    "a tiny GPT passes a float64 gradcheck, and its logits at t see only tokens up to t", "[gpt]") {
  for (bool bias : {false, true}) {
    manual_seed(2);
    gpt::GPT model(tiny(bias));
    model.to(float64);
    const Tensor idx = tensor(std::vector<int64_t>{1, 4, 2, 6, 0, 3, 5, 5}, {2, 4});      // (B, T)
    const Tensor targets = tensor(std::vector<int64_t>{4, 2, 6, 0, 3, 5, 5, 1}, {2, 4});  // (B, T)
    INFO("bias " << bias);
    CHECK(gradcheck_parameters(
        [&] { return model.forward(idx, targets).loss; }, model.named_parameters())
              .passed);

    // Changing the last token changes no logit before it.
    NoGradGuard no_grad;
    const Tensor before = model.forward(idx, targets).logits;  // (B, T, V)
    const Tensor changed_idx = tensor(std::vector<int64_t>{1, 4, 2, 1, 0, 3, 5, 2}, {2, 4});
    const Tensor after = model.forward(changed_idx, targets).logits;
    CHECK(before.narrow(1, 0, 3).to_vector<double>() == after.narrow(1, 0, 3).to_vector<double>());
    CHECK(before.narrow(1, 3, 1).to_vector<double>() != after.narrow(1, 3, 1).to_vector<double>());
  }
}

TEST_CASE("GPT refuses a sequence longer than its block", "[gpt]") {
  manual_seed(3);
  gpt::GPT model(tiny(false));
  const Tensor idx = zeros({1, 7}, int64);
  CHECK_THROWS_MATCHES(model.forward(idx), ValueError, WhatContains({"GPT", "7", "6"}));
}
