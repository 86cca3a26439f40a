// The decoder-only language model (nn/language_model.h): gradients in float64, the causal mask,
// the key/value cache against full recomputation, tied weights, and bad inputs.
#include <catch2/catch.hpp>

#include "nn_test_util.h"

using namespace ag;
using namespace nn_test;

namespace {

nn::LanguageModelConfig tiny_config(bool pre_norm, bool learned, bool tied) {
  nn::LanguageModelConfig c;
  c.vocab_size = 7;
  c.num_hiddens = 8;
  c.num_heads = 2;
  c.num_layers = 2;
  c.ffn_num_hiddens = 12;
  c.dropout = 0.0;
  c.block_size = 6;
  c.pre_norm = pre_norm;
  c.learned_positions = learned;
  c.tie_weights = tied;
  return c;
}

struct Variant {
  const char* name;
  bool pre_norm, learned, tied;
};
const Variant variants[] = {{"post-norm, sinusoidal", false, false, false},
    {"pre-norm, learned positions", true, true, false}, {"post-norm, tied", false, false, true},
    {"pre-norm, learned, tied", true, true, true}};

// One block of width 4 keeps each check well under a second; the cache tests below use two.
void check_gradients(const Variant& v) {
  manual_seed(3);
  nn::LanguageModelConfig config = tiny_config(v.pre_norm, v.learned, v.tied);
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

TEST_CASE("LanguageModel: names and counts of the parameters", "[nn][lm]") {
  manual_seed(0);
  nn::LanguageModel untied(tiny_config(false, false, false));
  const auto names = untied.state_dict();
  CHECK(names.count("embedding.weight"));
  CHECK(names.count("pos_encoding.P"));  // the sinusoid table: a buffer
  CHECK(names.count("blks.0.attention.W_q.weight"));
  CHECK(names.count("blks.1.addnorm2.ln.weight"));
  CHECK(names.count("dense.weight"));
  CHECK_FALSE(names.count("ln_f.weight"));
  nn::LanguageModel tied(tiny_config(true, true, true));
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
      nn::LanguageModel model(tiny_config(v.pre_norm, v.learned, v.tied));
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
      nn::LanguageModel model(tiny_config(v.pre_norm, v.learned, v.tied));
      model.to(float64);
      model.eval();
      NoGradGuard no_grad;
      const Tensor ids = nn_test::tokens({2, 6}, 7, 8, float64);  // (B, T)
      const Tensor full = model(ids);                             // (2, 6, 7)
      // A prompt of 2 positions, then one position at a time.
      nn::KVCache cache = model.make_cache();
      std::vector<Tensor> pieces{model(ids.narrow(1, 0, 2), &cache)};
      CHECK(cache.length() == 2);
      CHECK(cache.keys[1].shape() == Shape{2, 2, 2, 4});  // (B, H, S, D/H)
      for (int64_t t = 2; t < 6; ++t) pieces.push_back(model(ids.narrow(1, t, 1), &cache));
      CHECK(cache.length() == 6);
      CHECK(max_abs_diff(concat(pieces, 1), full) < 1e-12);
    }
  }
}

TEST_CASE("LanguageModel: bad inputs are errors that leave the cache as it was", "[nn][lm]") {
  manual_seed(9);
  nn::LanguageModel model(tiny_config(false, false, false));
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
  nn::LanguageModelConfig bad = tiny_config(false, false, false);
  bad.num_heads = 3;
  CHECK_THROWS_AS(nn::LanguageModel(bad), ValueError);
  bad = tiny_config(false, false, false);
  bad.block_size = 0;
  CHECK_THROWS_AS(nn::LanguageModel(bad), ValueError);
}
