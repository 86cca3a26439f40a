// The position schemes (nn::PositionScheme) and the modern attention options, pinned by what
// makes each what it is:
//   - relative schemes (rope, alibi, none): a whole sequence moved to later positions gives the
//     same outputs — only differences of positions reach the model;
//   - the seed's rotation identity on d2l's sinusoid table, in float64 to 1e-12;
//   - MultiHeadAttention with RoPE, ALiBi and grouped-query heads: the fused path is the composed
//     one (d2l's code with Llama's repeat_kv), values and gradients, and gradcheck in float64;
//   - a grouped-query layer is the full-heads layer whose key/value heads are repeated;
//   - LanguageModel::extend_context.
// (test_language_model.cpp and tests/models/test_lm.cpp run the model and its cache for every
// scheme; the rotation itself is tested beside nn::RotaryEmbedding, ALiBi's kernels in
// tests/autograd.)
#include <catch2/catch.hpp>

#include <cmath>

#include "nn_test_util.h"

using namespace ag;
using Catch::Matchers::Contains;
using nn_test::bit_identical;
using nn_test::max_abs_diff;

namespace {

// Two blocks, no dropout, width 8 with 2 heads: enough to see positions at work.
nn::LanguageModelConfig small_config(nn::PositionScheme positions) {
  nn::LanguageModelConfig c;
  c.vocab_size = 11;
  c.num_hiddens = 8;
  c.num_heads = 2;
  c.num_layers = 2;
  c.ffn_num_hiddens = 12;
  c.dropout = 0.0;
  c.block_size = 16;
  c.positions = positions;
  return c;
}

// The model's logits (B, T, V) for `ids` placed at positions first … first + T − 1: an empty
// cache whose window has slid to `first` (as KVCache::drop_oldest leaves it), then the sequence.
Tensor logits_at(nn::LanguageModel& model, const Tensor& ids, int64_t first) {
  nn::KVCache cache = model.make_cache();
  cache.first_position = first;
  return model.forward(ids, &cache);  // (B, T, V)
}

struct AttentionCase {
  const char* name;
  nn::MultiHeadAttentionOptions options;
};
std::vector<AttentionCase> attention_cases() {
  using nn::AttentionPositions;
  nn::MultiHeadAttentionOptions rope, rope_halves_gqa, alibi_mqa, gqa;
  rope.positions = AttentionPositions::rope;
  rope_halves_gqa.positions = AttentionPositions::rope;
  rope_halves_gqa.rope_pairs = RotaryPairs::halves;
  rope_halves_gqa.num_kv_heads = 2;
  alibi_mqa.positions = AttentionPositions::alibi;
  alibi_mqa.num_kv_heads = 1;
  gqa.num_kv_heads = 2;
  return {{"rope", rope}, {"rope (halves), 2 key/value heads", rope_halves_gqa},
      {"alibi, multi-query", alibi_mqa}, {"grouped-query, no positions", gqa}};
}

}  // namespace

TEST_CASE("position schemes: names, and which are relative", "[nn][positions]") {
  for (const nn::PositionScheme scheme : nn::kPositionSchemes)
    CHECK(nn::parse_position_scheme(nn::position_scheme_name(scheme), "test") == scheme);
  CHECK_FALSE(nn::relative_positions(nn::PositionScheme::sinusoidal));
  CHECK_FALSE(nn::relative_positions(nn::PositionScheme::learned));
  CHECK(nn::relative_positions(nn::PositionScheme::rope));
  CHECK(nn::relative_positions(nn::PositionScheme::alibi));
  CHECK(nn::relative_positions(nn::PositionScheme::none));
  CHECK_THROWS_WITH(nn::parse_position_scheme("absolute", "--positions"),
      "--positions: unknown positions 'absolute' (known: sinusoidal, learned, rope, alibi, none)");
  CHECK_THROWS_WITH(nn::parse_normalization("batch", "--norm"),
      "--norm: unknown norm 'batch' (known: layer, rms)");
  CHECK_THROWS_WITH(nn::parse_feed_forward("geglu", "--ffn"),
      "--ffn: unknown feed-forward 'geglu' (known: relu, swiglu)");
}

TEST_CASE("relative positions: a sequence moved to later positions gives the same logits",
    "[nn][positions]") {
  for (const nn::PositionScheme scheme : nn::kPositionSchemes) {
    if (!nn::relative_positions(scheme)) continue;
    INFO(nn::position_scheme_name(scheme));
    manual_seed(21);
    nn::LanguageModel model(small_config(scheme));
    model.to(float64);
    model.eval();
    NoGradGuard no_grad;
    const Tensor ids = nn_test::tokens({2, 7}, 11, 22, float64);  // (B, T)
    const Tensor at_zero = logits_at(model, ids, 0);              // (2, 7, 11)
    for (const int64_t shift : {1, 5, 9, 1000}) {
      INFO("positions from " << shift);
      // ALiBi's bias and "none" never see a position but through i − j of the window: the same
      // bits. RoPE turns q and k by other angles with the same differences: the same scores up
      // to rounding.
      if (scheme == nn::PositionScheme::rope)
        CHECK(max_abs_diff(logits_at(model, ids, shift), at_zero) < 1e-12);
      else
        CHECK(bit_identical(logits_at(model, ids, shift), at_zero));
    }
  }
}

TEST_CASE("the seed's rotation identity holds for d2l's sinusoid table in float64 to 1e-12",
    "[nn][positions]") {
  // P[i + δ, 2j:2j+2] = R(δ·ω_j) P[i, 2j:2j+2], R(θ) = [[cos θ, sin θ], [−sin θ, cos θ]] acting on
  // (sin, cos): the 2 × 2 matrix depends on δ and not on i.
  const int64_t d = 16, max_len = 200;
  nn::PositionalEncoding encoding(d, 0.0, max_len);
  encoding.to(float64);
  const std::vector<double> P = encoding.P.to_vector<double>();  // (1, max_len, d)
  double worst = 0;
  for (int64_t delta = 1; delta <= 50; ++delta)
    for (int64_t i = 0; i + delta < max_len; ++i)
      for (int64_t j = 0; 2 * j < d; ++j) {
        const double omega = 1.0 / std::pow(10000.0, double(2 * j) / double(d));
        const double c = std::cos(double(delta) * omega), s = std::sin(double(delta) * omega);
        const double sin_i = P[static_cast<std::size_t>(i * d + 2 * j)];
        const double cos_i = P[static_cast<std::size_t>(i * d + 2 * j + 1)];
        const double sin_shifted = P[static_cast<std::size_t>((i + delta) * d + 2 * j)];
        const double cos_shifted = P[static_cast<std::size_t>((i + delta) * d + 2 * j + 1)];
        worst = std::max(worst, std::abs(c * sin_i + s * cos_i - sin_shifted));
        worst = std::max(worst, std::abs(-s * sin_i + c * cos_i - cos_shifted));
      }
  CHECK(worst < 1e-12);
}

TEST_CASE("MultiHeadAttention with RoPE, ALiBi and grouped-query heads: fused = composed",
    "[nn][positions]") {
  for (const AttentionCase& test : attention_cases()) {
    INFO(test.name);
    for (const bool self_attention : {true, false}) {
      INFO((self_attention ? "self-attention" : "4 queries, 6 keys"));
      manual_seed(31);
      nn::MultiHeadAttention layer(8, 8, 8, 8, 4, 0.0, false, test.options);
      layer.to(float64);
      const Tensor queries = nn_test::input64({2, self_attention ? 6 : 4, 8}, 32);
      const Tensor keys = nn_test::input64({2, 6, 8}, 33);
      const Tensor values = self_attention ? keys : nn_test::input64({2, 6, 8}, 34);
      const Tensor lens = tensor({3, 6}, {2});
      const Tensor upstream = nn_test::input64({2, queries.size(1), 8}, 35).detach();
      auto run = [&](bool fused) {
        nn::FusedKernelsGuard guard(fused);
        layer.zero_grad();
        Tensor q = queries.detach().requires_grad_(), k = keys.detach().requires_grad_();
        Tensor out = layer(q, k, self_attention ? k : values, lens);  // (B, Q, 8)
        (out * upstream).sum().backward();
        std::vector<Tensor> results{out.detach(), q.grad(), k.grad()};
        for (const auto& [name, p] : layer.named_parameters()) results.push_back(p.grad());
        return results;
      };
      const std::vector<Tensor> fused = run(true), composed = run(false);
      REQUIRE(fused.size() == composed.size());
      for (std::size_t i = 0; i < fused.size(); ++i) {
        INFO("result " << i << " (output, dq, dk, then the parameters' gradients)");
        CHECK(max_abs_diff(fused[i], composed[i]) < 1e-12);
      }
    }
  }
}

TEST_CASE("MultiHeadAttention with RoPE, ALiBi and grouped-query heads: gradcheck in float64",
    "[nn][positions][gradcheck]") {
  for (const AttentionCase& test : attention_cases()) {
    for (const bool fused : {true, false}) {
      INFO(test.name << (fused ? ", fused" : ", composed"));
      nn::FusedKernelsGuard guard(fused);
      manual_seed(41);
      nn::MultiHeadAttention layer(8, 8, 8, 8, 4, 0.0, false, test.options);
      layer.to(float64);
      const Tensor X = nn_test::input64({2, 3, 8}, 42);
      CHECK_GRADCHECK(gradcheck_parameters(
          [&] { return layer(X, X, X, Tensor(), /*is_causal=*/true); }, layer.named_parameters()));
    }
  }
}

TEST_CASE("grouped-query attention is full-heads attention with each key/value head repeated",
    "[nn][positions]") {
  // Llama's repeat_kv: a layer with 2 key/value heads for 4 query heads computes what a 4-head
  // layer computes whose W_k and W_v rows repeat each key/value head's twice.
  manual_seed(51);
  nn::MultiHeadAttentionOptions grouped_options;
  grouped_options.num_kv_heads = 2;
  grouped_options.positions = nn::AttentionPositions::rope;
  nn::MultiHeadAttentionOptions full_options;
  full_options.positions = nn::AttentionPositions::rope;
  nn::MultiHeadAttention grouped(8, 8, 8, 8, 4, 0.0, false, grouped_options);
  nn::MultiHeadAttention full(8, 8, 8, 8, 4, 0.0, false, full_options);
  grouped.to(float64);
  full.to(float64);
  NoGradGuard no_grad;
  CHECK(grouped.W_k->weight.shape() == Shape{4, 8});  // 2 heads of width 2
  full.W_q->weight.copy_(grouped.W_q->weight);
  full.W_o->weight.copy_(grouped.W_o->weight);
  for (const auto& [from, to] : {std::pair{grouped.W_k, full.W_k}, {grouped.W_v, full.W_v}}) {
    const Tensor heads =
        from->weight.reshape({2, 1, 2, 8}).expand({2, 2, 2, 8});  // (Hkv, G, w, in)
    to->weight.copy_(heads.reshape({8, 8}));
  }
  const Tensor X = nn_test::input64({2, 5, 8}, 52).detach();
  CHECK(max_abs_diff(grouped(X, X, X, Tensor(), true), full(X, X, X, Tensor(), true)) < 1e-12);
}

TEST_CASE("LanguageModel::extend_context: longer contexts for every scheme but a learned table",
    "[nn][positions]") {
  for (const nn::PositionScheme scheme : nn::kPositionSchemes) {
    INFO(nn::position_scheme_name(scheme));
    manual_seed(61);
    nn::LanguageModel model(small_config(scheme));
    model.eval();
    NoGradGuard no_grad;
    const Tensor ids = nn_test::tokens({1, 40}, 11, 62);  // (1, 40): past block_size 16
    const Tensor first16 = model(ids.narrow(1, 0, 16));   // (1, 16, V)
    CHECK_THROWS_WITH(model(ids), Contains("exceed block_size 16"));
    if (scheme == nn::PositionScheme::learned) {
      CHECK_THROWS_WITH(model.extend_context(40),
          Contains("learned positions have a row for each of the 16 positions"));
      continue;
    }
    model.extend_context(40);
    CHECK(model.max_context() == 40);
    const Tensor longer = model(ids);  // (1, 40, V)
    // Causal: the first 16 positions are computed as before (the sinusoid table's first rows
    // are the same numbers).
    CHECK(max_abs_diff(longer.narrow(1, 0, 16), first16) < 1e-6);
    CHECK_THROWS_WITH(model(zeros({1, 41})), Contains("exceed the context of 40"));
  }
}

TEST_CASE("MultiHeadAttention::causal_self_attention: a cache of the wrong shape is refused",
    "[nn][positions]") {
  manual_seed(71);
  nn::MultiHeadAttentionOptions options;
  options.num_kv_heads = 2;
  nn::MultiHeadAttention layer(8, 8, 8, 8, 4, 0.0, false, options);
  NoGradGuard no_grad;
  const Tensor X = nn_test::randn32({2, 3, 8}, 72);  // (B, T, D)
  Tensor keys, values;
  layer.causal_self_attention(X, 0, &keys, &values);
  CHECK(keys.shape() == Shape{2, 2, 3, 2});  // (B, Hkv, S, D/H)
  Tensor wrong = zeros({2, 4, 3, 2}), other_values = values;
  CHECK_THROWS_WITH(layer.causal_self_attention(X, 3, &wrong, &other_values),
      Contains("cached keys [2,4,3,2] and values [2,2,3,2] are not (B, Hkv, S, D/H) = (2, 2, S, "
               "2)"));
  CHECK_THROWS_WITH(layer.causal_self_attention(X, 3, &keys, nullptr),
      Contains("a cache of keys without values"));
  Tensor none;
  CHECK_THROWS_WITH(
      layer.causal_self_attention(X, 3, &keys, &none), Contains("cached keys defined but values"));
  CHECK(keys.shape() == Shape{2, 2, 3, 2});  // unchanged by the refused calls
}
