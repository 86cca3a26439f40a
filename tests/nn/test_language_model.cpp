// The decoder-only language model (nn/language_model.h): gradients in float64, the causal mask,
// the key/value cache against full recomputation, tied weights, and bad inputs — for d2l's blocks
// and GPT-2's, every position scheme, and the Llama-style block (RMSNorm, SwiGLU, grouped-query
// attention). tests/nn/test_position_schemes.cpp holds what is particular to each scheme.
#include <catch2/catch.hpp>

#include "nn_test_util.h"

using namespace ag;
using namespace nn_test;

namespace {

struct Variant {
  const char* name;
  bool pre_norm;
  nn::PositionScheme positions;
  bool tied;
  nn::Normalization norm = nn::Normalization::layer;
  nn::FeedForward ffn = nn::FeedForward::relu;
  int64_t kv_heads = 0;
};
using P = nn::PositionScheme;
const Variant variants[] = {{"post-norm, sinusoidal", false, P::sinusoidal, false},
    {"pre-norm, learned positions", true, P::learned, false},
    {"post-norm, tied", false, P::sinusoidal, true},
    {"pre-norm, learned, tied", true, P::learned, true}, {"post-norm, rope", false, P::rope, false},
    {"pre-norm, alibi, tied", true, P::alibi, true},
    {"post-norm, no positions", false, P::none, false},
    // Llama's block: pre-norm RMSNorm, SwiGLU, RoPE, one key/value head for two query heads
    {"Llama-style: RMSNorm, SwiGLU, rope, multi-query", true, P::rope, false,
        nn::Normalization::rms, nn::FeedForward::swiglu, 1}};

nn::LanguageModelConfig tiny_config(const Variant& v) {
  nn::LanguageModelConfig c;
  c.vocab_size = 7;
  c.num_hiddens = 8;
  c.num_heads = 2;
  c.num_layers = 2;
  c.ffn_num_hiddens = 12;
  c.dropout = 0.0;
  c.block_size = 6;
  c.pre_norm = v.pre_norm;
  c.positions = v.positions;
  c.tie_weights = v.tied;
  c.norm = v.norm;
  c.ffn = v.ffn;
  c.num_kv_heads = v.kv_heads;
  return c;
}

// One block of width 4 keeps each check well under a second; the cache tests below use two.
void check_gradients(const Variant& v) {
  manual_seed(3);
  nn::LanguageModelConfig config = tiny_config(v);
  config.num_hiddens = 4;
  config.ffn_num_hiddens = 6;
  config.num_layers = 1;
  nn::LanguageModel model(config);
  model.to(float64);
  model.eval();
  const Tensor ids = nn_test::tokens({2, 4}, 7, 4, float64);  // (B, T)
  CHECK_GRADCHECK(gradcheck_parameters([&] { return model(ids); }, model.named_parameters()));
}

}  // namespace

TEST_CASE("LanguageModel: gradcheck in float64, post-norm blocks", "[nn][lm][gradcheck]") {
  check_gradients(variants[0]);
  check_gradients(variants[2]);
}

TEST_CASE("LanguageModel: gradcheck in float64, pre-norm blocks", "[nn][lm][gradcheck]") {
  check_gradients(variants[1]);
  check_gradients(variants[3]);
}

TEST_CASE("LanguageModel: gradcheck in float64, relative positions and Llama's block",
    "[nn][lm][gradcheck]") {
  for (std::size_t v = 4; v < std::size(variants); ++v) {
    INFO(variants[v].name);
    check_gradients(variants[v]);
  }
}

TEST_CASE("LanguageModel: names and counts of the parameters", "[nn][lm]") {
  manual_seed(0);
  nn::LanguageModel untied(tiny_config(variants[0]));
  const auto names = untied.state_dict();
  CHECK(names.count("embedding.weight"));
  CHECK(names.count("pos_encoding.P"));  // the sinusoid table: a buffer
  CHECK(names.count("blks.0.attention.W_q.weight"));
  CHECK(names.count("blks.1.addnorm2.ln.weight"));
  CHECK(names.count("dense.weight"));
  CHECK_FALSE(names.count("ln_f.weight"));
  nn::LanguageModel tied(tiny_config(variants[3]));
  const auto tied_names = tied.state_dict();
  CHECK(tied_names.count("ln_f.weight"));
  CHECK(tied_names.count("blks.0.ln1.weight"));
  CHECK(tied_names.count("pos_encoding.P"));  // learned: a parameter
  CHECK_FALSE(tied_names.count("dense.weight"));
  // The tied model lacks the output weight (V·D) and bias (V) but has learned positions (T·D)
  // and three more LayerNorms (ln1, ln2 per block, and ln_f, 2D each) than AddNorm's two.
  const int64_t V = 7, D = 8, T = 6;
  CHECK(tied.num_parameters() == untied.num_parameters() - V * D - V + T * D + 2 * D);
}

TEST_CASE("LanguageModel: position t sees the tokens up to t and no later one", "[nn][lm]") {
  for (const Variant& v : variants) {
    SECTION(v.name) {
      manual_seed(5);
      nn::LanguageModel model(tiny_config(v));
      model.eval();
      const Tensor a = tensor({1, 2, 3, 4, 5, 6}, {1, 6});
      const Tensor b = tensor({1, 2, 3, 0, 0, 2}, {1, 6});  // the same first three tokens
      const Tensor la = model(a), lb = model(b);            // (1, 6, 7)
      CHECK(bit_identical(la.narrow(1, 0, 3), lb.narrow(1, 0, 3)));
      CHECK(max_abs_diff(la.narrow(1, 3, 1), lb.narrow(1, 3, 1)) > 1e-4);
      // … and does see the earlier ones: another first token changes every later position.
      const Tensor c = tensor({6, 2, 3, 4, 5, 6}, {1, 6});
      const Tensor lc = model(c);
      for (int64_t t = 1; t < 6; ++t)
        CHECK(max_abs_diff(la.narrow(1, t, 1), lc.narrow(1, t, 1)) > 1e-6);
    }
  }
}

TEST_CASE(
    "LanguageModel: the key/value cache gives the logits of the full forward", "[nn][lm][cache]") {
  for (const Variant& v : variants) {
    SECTION(v.name) {
      manual_seed(7);
      nn::LanguageModel model(tiny_config(v));
      model.to(float64);
      model.eval();
      NoGradGuard no_grad;
      const Tensor ids = nn_test::tokens({2, 6}, 7, 8, float64);  // (B, T)
      const Tensor full = model(ids);                             // (2, 6, 7)
      // A prompt of 2 positions, then one position at a time.
      nn::KVCache cache = model.make_cache();
      std::vector<Tensor> pieces{model(ids.narrow(1, 0, 2), &cache)};
      CHECK(cache.length() == 2);
      const int64_t Hkv = v.kv_heads == 0 ? 2 : v.kv_heads;
      CHECK(cache.keys[1].shape() == Shape{2, Hkv, 2, 4});  // (B, Hkv, S, D/H)
      for (int64_t t = 2; t < 6; ++t) pieces.push_back(model(ids.narrow(1, t, 1), &cache));
      CHECK(cache.length() == 6);
      CHECK(max_abs_diff(concat(pieces, 1), full) < 1e-12);
    }
  }
}

TEST_CASE("LanguageModel: bad inputs are errors that leave the cache as it was", "[nn][lm]") {
  manual_seed(9);
  nn::LanguageModel model(tiny_config(variants[0]));
  model.eval();
  NoGradGuard no_grad;
  CHECK_THROWS_AS(model(tensor({1, 2, 3}, {3})), ShapeError);
  CHECK_THROWS_WITH(model(zeros({1, 7})), Catch::Contains("exceed block_size 6"));
  nn::KVCache cache = model.make_cache();
  model(tensor({1, 2, 3, 4}, {1, 4}), &cache);
  CHECK_THROWS_WITH(model(tensor({1, 2, 3}, {1, 3}), &cache),
      Catch::Contains("4 cached + 3 new positions exceed block_size 6"));
  CHECK_THROWS_AS(model(tensor({1, 2, 3, 4}, {2, 2}), &cache), ShapeError);  // another batch
  CHECK_THROWS(model(tensor({9}, {1, 1}), &cache));  // an id outside the vocabulary
  CHECK(cache.length() == 4);
  nn::KVCache wrong;
  CHECK_THROWS_WITH(model(zeros({1, 1}), &wrong), Catch::Contains("a cache of 0 blocks"));
  nn::LanguageModelConfig bad = tiny_config(variants[0]);
  bad.num_heads = 3;
  CHECK_THROWS_AS(nn::LanguageModel(bad), ValueError);
  bad = tiny_config(variants[0]);
  bad.block_size = 0;
  CHECK_THROWS_AS(nn::LanguageModel(bad), ValueError);
  bad = tiny_config(variants[0]);
  bad.num_kv_heads = 3;  // does not divide 2 heads
  CHECK_THROWS_WITH(nn::LanguageModel(bad), Catch::Contains("num_kv_heads 3 does not divide"));
  bad = tiny_config(variants[0]);
  bad.norm = nn::Normalization::rms;  // post-norm: AddNorm is a LayerNorm
  CHECK_THROWS_WITH(nn::LanguageModel(bad), Catch::Contains("needs pre_norm"));
}
