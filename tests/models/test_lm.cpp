// The language model's helpers (models/lm.h, models/lm_file.h): tokens and characters, the split,
// the loss and training step, the deterministic evaluation, sampling, the cache invariant of
// generation, and model files.
#include <catch2/catch.hpp>

#include <cmath>
#include <map>

#include "models/lm.h"
#include "models/lm_file.h"
#include "models/seq2seq_file.h"
#include "tests/temp_folder.h"

using namespace ag;
using ag::testing::TempFolder;
using Catch::Matchers::Contains;

namespace {

nn::LanguageModelConfig tiny_lm(int64_t vocab_size = 9) {
  nn::LanguageModelConfig c;
  c.vocab_size = vocab_size;
  c.num_hiddens = 8;
  c.num_heads = 2;
  c.num_layers = 2;
  c.ffn_num_hiddens = 16;
  c.dropout = 0.0;
  c.block_size = 8;
  return c;
}

std::vector<int64_t> some_ids(int64_t n, int64_t vocab, uint64_t seed) {
  Generator generator(seed);
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < n; ++i) ids.push_back(generator.randint(0, vocab));
  return ids;
}

double max_diff(
    const std::vector<std::vector<double>>& a, const std::vector<std::vector<double>>& b) {
  REQUIRE(a.size() == b.size());
  double largest = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    REQUIRE(a[i].size() == b[i].size());
    for (std::size_t j = 0; j < a[i].size(); ++j)
      largest = std::max(largest, std::abs(a[i][j] - b[i][j]));
  }
  return largest;
}

}  // namespace

// ---- tokens -------------------------------------------------------------------------------------

TEST_CASE("lm tokens: characters are code points, words count their characters", "[models][lm]") {
  const lm::TokenizedText chars = lm::tokenize("né!\n", lm::Tokenizer::chars);
  CHECK(chars.tokens == std::vector<std::string>{"n", "é", "!", "\n"});
  CHECK(chars.characters == std::vector<int64_t>{1, 1, 1, 1});
  CHECK(lm::detokenize(chars.tokens, lm::Tokenizer::chars) == "né!\n");

  // preprocess_nmt: lower case, a space before the punctuation; "\n" ends each line.
  const lm::TokenizedText words = lm::tokenize("Go  now, Été!\nYes\n", lm::Tokenizer::words);
  CHECK(words.tokens == std::vector<std::string>{"go", "now", ",", "été", "!", "\n", "yes", "\n"});
  CHECK(words.characters == std::vector<int64_t>{3, 4, 2, 4, 2, 0, 4, 0});
  // "go now , été !\nyes\n" has 19 code points, and so do the counts (single spaces, final break).
  int64_t total = 0;
  for (int64_t c : lm::tokenize("go now , été !\nyes\n", lm::Tokenizer::words).characters)
    total += c;
  CHECK(total == 19);
  CHECK(lm::detokenize(words.tokens, lm::Tokenizer::words) == "go now , été !\nyes\n");
  CHECK(lm::tokenize("a b", lm::Tokenizer::words).tokens == std::vector<std::string>{"a", "b"});

  CHECK(lm::parse_tokenizer("word") == lm::Tokenizer::words);
  CHECK_THROWS_WITH(lm::parse_tokenizer("bpe", "--tokenizer"),
      "--tokenizer: unknown tokenizer 'bpe' (known: char, word)");
}

TEST_CASE("lm split_text: 90 % of the code points, on a code-point boundary", "[models][lm]") {
  const auto [train, validation] = lm::split_text("ééééééééé\xE2\x82\xAC");  // 10 code points
  CHECK(train == "ééééééééé");
  CHECK(validation == "\xE2\x82\xAC");
  CHECK(lm::split_text("abc", 1.0).second.empty());
  CHECK_THROWS_AS(lm::split_text("ab\xFF", 0.5), ValueError);
}

// ---- the model, the loss, training --------------------------------------------------------------

TEST_CASE("lm parameter_count is the model's, for every kind of block", "[models][lm]") {
  std::vector<nn::LanguageModelConfig> configs;
  for (int variant = 0; variant < 8; ++variant)
    for (const nn::PositionScheme positions : nn::kPositionSchemes) {
      nn::LanguageModelConfig c = tiny_lm();
      c.pre_norm = variant & 1;
      c.positions = positions;
      c.tie_weights = variant & 2;
      c.num_kv_heads = variant & 4 ? 1 : 0;  // multi-query: W_k and W_v of one head's width
      configs.push_back(c);
    }
  nn::LanguageModelConfig llama = tiny_lm();  // RMSNorm, SwiGLU, grouped-query, RoPE
  llama.pre_norm = true;
  llama.norm = nn::Normalization::rms;
  llama.ffn = nn::FeedForward::swiglu;
  llama.num_kv_heads = 1;
  llama.positions = nn::PositionScheme::rope;
  configs.push_back(llama);
  for (const nn::LanguageModelConfig& c : configs) {
    INFO(nn::position_scheme_name(c.positions) << " pre_norm " << c.pre_norm << " tied "
                                               << c.tie_weights << " kv heads " << c.num_kv_heads);
    auto model = lm::make_language_model(c);
    CHECK(lm::parameter_count(c) == static_cast<uint64_t>(model->num_parameters()));
    uint64_t numbers = 0;
    for (const auto& [name, t] : model->state_dict()) numbers += static_cast<uint64_t>(t.numel());
    CHECK(lm::state_dict_numbers(c) == numbers);
  }
  nn::LanguageModelConfig c = lm::char_small_config(65);
  CHECK(c.num_hiddens == 128);
  CHECK_NOTHROW(lm::check_config(c, true));
  c.num_heads = 3;
  CHECK_THROWS_WITH(lm::check_config(c, true), "--heads 3 does not divide --num-hiddens 128");
  c = tiny_lm();
  c.block_size = 0;
  CHECK_THROWS_WITH(lm::check_config(c, false), Contains("config.block_size 0 is outside"));
  c = tiny_lm();
  c.num_kv_heads = 3;
  CHECK_THROWS_WITH(lm::check_config(c, true),
      "--kv-heads 3 does not divide --heads 2 (0: as "
      "many as the heads)");
  c = tiny_lm();
  c.norm = nn::Normalization::rms;
  CHECK_THROWS_WITH(lm::check_config(c, true), Contains("--norm rms needs pre-norm blocks"));
  c = tiny_lm();
  c.positions = nn::PositionScheme::rope;
  c.num_heads = 8;  // head width 1: nothing to pair
  CHECK_THROWS_WITH(lm::check_config(c, true), Contains("the head width 1"));
  c.num_heads = 2;
  c.rope_base = 1.0;
  CHECK_THROWS_WITH(lm::check_config(c, false), Contains("config.rope_base 1 must be"));
}

TEST_CASE("lm_loss is the mean cross-entropy per token, and training lowers it", "[models][lm]") {
  manual_seed(1);
  auto model = lm::make_language_model(tiny_lm(5));
  const Tensor inputs = tensor({0, 1, 2, 3, 1, 2, 3, 4}, {2, 4});
  const Tensor labels = tensor({1, 2, 3, 4, 2, 3, 4, 0}, {2, 4});
  const Tensor logits = model->forward(inputs);  // (2, 4, 5)
  double expected = 0;
  const std::vector<double> z = logits.to_vector<double>(), y = labels.to_vector<double>();
  for (int64_t n = 0; n < 8; ++n) {
    double partition = 0;
    for (int64_t v = 0; v < 5; ++v) partition += std::exp(z[n * 5 + v]);
    expected += std::log(partition) - z[n * 5 + static_cast<int64_t>(y[n])];
  }
  CHECK(lm::lm_loss(*model, inputs, labels).item() == Approx(expected / 8).epsilon(1e-5));
  CHECK_THROWS_AS(lm::lm_loss(*model, inputs, tensor({1, 2}, {1, 2})), ShapeError);

  optim::AdamW optimizer(model->parameters(), 1e-2);
  const double first = lm::train_step(*model, optimizer, inputs, labels, 1.0);
  double last = first;
  for (int i = 0; i < 30; ++i) last = lm::train_step(*model, optimizer, inputs, labels, 1.0);
  CHECK(last < 0.5 * first);
}

TEST_CASE("lm evaluate: consecutive windows from the start, loss, perplexity, bits per character",
    "[models][lm]") {
  manual_seed(2);
  auto model = lm::make_language_model(tiny_lm());
  const std::vector<int64_t> ids = some_ids(30, 9, 3);  // (30 − 1) / 8 = 3 whole windows
  const lm::Evaluation all = lm::evaluate(*model, ids, {}, 100, 2);
  CHECK(all.windows == 3);
  CHECK(all.tokens == 24);
  // The same windows by hand: window w is ids[8w … 8w + 8].
  double nats = 0;
  model->eval();
  for (int64_t w = 0; w < 3; ++w) {
    std::vector<double> x(ids.begin() + 8 * w, ids.begin() + 8 * w + 8);
    std::vector<double> y(ids.begin() + 8 * w + 1, ids.begin() + 8 * w + 9);
    nats += 8 * lm::lm_loss(*model, tensor(x, {1, 8}), tensor(y, {1, 8})).item();
  }
  CHECK(all.loss == Approx(nats / 24).epsilon(1e-6));
  CHECK(all.perplexity == Approx(std::exp(all.loss)));
  CHECK(all.bits_per_character == Approx(all.loss / std::log(2.0)));  // one character a token
  CHECK(lm::evaluate(*model, ids, {}, 100, 2).loss == all.loss);      // deterministic
  CHECK(lm::evaluate(*model, ids, {}, 1).windows == 1);
  // Two characters a token: half the bits per character.
  const std::vector<int64_t> two(ids.size(), 2);
  CHECK(lm::evaluate(*model, ids, two, 100).bits_per_character ==
        Approx(all.bits_per_character / 2).epsilon(1e-6));
  CHECK_THROWS_WITH(lm::evaluate(*model, some_ids(8, 9, 4), {}, 10),
      Contains("8 validation tokens are fewer than block_size + 1 = 9"));
  CHECK_THROWS_AS(lm::evaluate(*model, ids, {}, 0), ValueError);
  CHECK_THROWS_AS(lm::evaluate(*model, ids, {1, 2}, 10), ValueError);
}

// ---- sampling and generation --------------------------------------------------------------------

TEST_CASE("lm sample_token: greedy, temperature and top-k", "[models][lm]") {
  Generator generator(5);
  const std::vector<double> logits{0.5, 2.0, -1.0, 2.0, 1.5};
  CHECK(lm::sample_token(logits, {0.0, 0}, generator) == 1);  // the first largest
  // top-k 1 keeps the largest logit only — and, as nanoGPT's `logits < v[:, [-1]]`, every logit
  // equal to it.
  CHECK(lm::sample_token({0.5, 2.0, -1.0, 1.9}, {1.0, 1}, generator) == 1);
  std::map<int64_t, int> tied;
  for (int i = 0; i < 50; ++i) ++tied[lm::sample_token(logits, {1.0, 1}, generator)];
  CHECK(tied.size() == 2);
  CHECK(tied.count(1) + tied.count(3) == 2);
  std::map<int64_t, int> counts;
  for (int i = 0; i < 3000; ++i) ++counts[lm::sample_token(logits, {1.0, 3}, generator)];
  // Top 3: the logits >= 1.5 (ids 1, 3, 4) with probabilities e²/Σ, e²/Σ, e^1.5/Σ.
  CHECK(counts.size() == 3);
  const double sum = 2 * std::exp(2.0) + std::exp(1.5);
  CHECK(counts[4] / 3000.0 == Approx(std::exp(1.5) / sum).margin(0.03));
  // A low temperature concentrates on the largest logits; a fixed seed repeats the draws.
  Generator a(9), b(9);
  for (int i = 0; i < 20; ++i)
    CHECK(lm::sample_token(logits, {0.7, 0}, a) == lm::sample_token(logits, {0.7, 0}, b));
  CHECK_THROWS_WITH(lm::sample_token(logits, {-1.0, 0}, generator),
      Contains("temperature -1 must be a number >= 0"));
  CHECK_THROWS_AS(lm::sample_token(logits, {std::nan(""), 0}, generator), ValueError);
  CHECK_THROWS_WITH(
      lm::sample_token(logits, {1.0, -1}, generator), Contains("top-k -1 is outside 0-5"));
  CHECK_THROWS_WITH(
      lm::sample_token(logits, {1.0, 6}, generator), Contains("top-k 6 is outside 0-5"));
}

TEST_CASE("lm generate: the key/value cache gives the tokens and logits of full recomputation",
    "[models][lm][cache]") {
  for (const DType dtype : {float32, float64}) {
    for (const lm::Sampling sampling : {lm::Sampling{0.0, 0}, lm::Sampling{1.0, 4}}) {
      manual_seed(6);
      nn::LanguageModelConfig c = tiny_lm();
      c.pre_norm = dtype == float64;  // both kinds of block
      auto model = lm::make_language_model(c);
      model->to(dtype);
      // A prompt of 3, then 12 new tokens: the context passes block_size 8 and is cropped.
      const std::vector<int64_t> prompt{1, 4, 2};
      std::vector<std::vector<double>> cached_logits, full_logits;
      Generator g1(11), g2(11);
      const auto cached = lm::generate(*model, prompt, 12, sampling, g1, true, &cached_logits);
      const auto full = lm::generate(*model, prompt, 12, sampling, g2, false, &full_logits);
      CHECK(cached.size() == 12);
      CHECK(cached == full);
      CHECK(max_diff(cached_logits, full_logits) < (dtype == float32 ? 1e-6 : 1e-12));
      // From step 6 on, the context is full and the cache is rebuilt from the cropped window:
      // the same computation as without the cache, bit for bit.
      for (std::size_t step = 6; step < 12; ++step) CHECK(cached_logits[step] == full_logits[step]);
      CHECK(g1.state() == g2.state());
    }
  }
}

TEST_CASE(
    "lm generate: for every position scheme, the cache gives full recomputation's tokens "
    "while the context fits",
    "[models][lm][cache]") {
  for (const nn::PositionScheme positions : nn::kPositionSchemes) {
    for (const DType dtype : {float32, float64}) {
      INFO(nn::position_scheme_name(positions) << ", " << dtype_name(dtype));
      manual_seed(12);
      nn::LanguageModelConfig c = tiny_lm();
      c.positions = positions;
      c.pre_norm = dtype == float64;
      c.num_kv_heads = dtype == float64 ? 1 : 0;  // and grouped-query attention's smaller cache
      auto model = lm::make_language_model(c);
      model->to(dtype);
      // A prompt of 2, then 6 new tokens: contexts 2 … 7, within block_size 8.
      std::vector<std::vector<double>> cached_logits, full_logits;
      Generator g1(3), g2(3);
      const auto cached = lm::generate(*model, {5, 1}, 6, {1.0, 0}, g1, true, &cached_logits);
      const auto full = lm::generate(*model, {5, 1}, 6, {1.0, 0}, g2, false, &full_logits);
      CHECK(cached == full);
      CHECK(max_diff(cached_logits, full_logits) < (dtype == float32 ? 1e-5 : 1e-12));
    }
  }
}

TEST_CASE(
    "lm generate: relative positions slide the cache past block_size — with one block that "
    "is full recomputation of the cropped window",
    "[models][lm][cache]") {
  for (const nn::PositionScheme positions : nn::kPositionSchemes) {
    if (!nn::relative_positions(positions)) continue;
    INFO(nn::position_scheme_name(positions));
    manual_seed(13);
    nn::LanguageModelConfig c = tiny_lm();
    c.positions = positions;
    c.num_layers = 1;  // a cached key then depends on its own token alone, not on its context
    auto model = lm::make_language_model(c);
    model->to(float64);
    // 20 new tokens after a prompt of 3: from the 6th on, the window of 8 slides.
    std::vector<std::vector<double>> cached_logits, full_logits;
    Generator g1(4), g2(4);
    const auto cached = lm::generate(*model, {2, 7, 3}, 20, {1.0, 0}, g1, true, &cached_logits);
    const auto full = lm::generate(*model, {2, 7, 3}, 20, {1.0, 0}, g2, false, &full_logits);
    CHECK(cached == full);
    // The same numbers up to rounding: one row's products instead of the window's, and for RoPE
    // other absolute angles with the same differences.
    CHECK(max_diff(cached_logits, full_logits) < 1e-12);
  }
}

TEST_CASE(
    "lm generate: past block_size a sliding cache keeps block_size positions and the "
    "absolute schemes refuse one",
    "[models][lm][cache]") {
  manual_seed(14);
  nn::LanguageModelConfig c = tiny_lm();
  c.positions = nn::PositionScheme::rope;
  auto model = lm::make_language_model(c);
  model->eval();
  NoGradGuard no_grad;
  nn::KVCache cache = model->make_cache();
  model->forward(tensor({1, 2, 3, 4, 5, 6, 7, 8}, {1, 8}), &cache);
  CHECK(cache.length() == 8);
  CHECK_THROWS_WITH(model->forward(tensor({1}, {1, 1}), &cache),
      Contains("8 cached + 1 new positions exceed block_size 8 (crop the context, or slide the "
               "cache: KVCache::drop_oldest)"));
  for (int64_t step = 0; step < 30; ++step) {  // 30 positions past the block
    cache.drop_oldest(1);
    model->forward(tensor({3}, {1, 1}), &cache);
    CHECK(cache.length() == 8);
  }
  CHECK(cache.first_position == 30);
  CHECK(cache.next_position() == 38);
  CHECK_THROWS_WITH(cache.drop_oldest(9), Contains("9 positions of a cache of 8"));
  // Absolute positions: the cached keys were computed where the positions were, so a slid cache
  // is refused.
  nn::LanguageModelConfig absolute = tiny_lm();
  auto sinusoidal = lm::make_language_model(absolute);
  nn::KVCache slid = sinusoidal->make_cache();
  sinusoidal->forward(tensor({1, 2, 3}, {1, 3}), &slid);
  slid.drop_oldest(1);
  CHECK_THROWS_WITH(sinusoidal->forward(tensor({1}, {1, 1}), &slid),
      Contains("a cache slid to position 1 for sinusoidal positions, which are absolute"));
}

TEST_CASE(
    "lm generate: after extend_context the window is the longer context", "[models][lm][cache]") {
  manual_seed(15);
  nn::LanguageModelConfig c = tiny_lm();
  c.positions = nn::PositionScheme::alibi;
  auto model = lm::make_language_model(c);
  model->to(float64);
  model->extend_context(20);
  // 16 new tokens after 2: contexts up to 17, past block_size 8 but within the context of 20, so
  // nothing slides or is cropped, and the cache gives recomputation's tokens and logits.
  std::vector<std::vector<double>> cached_logits, full_logits;
  Generator g1(5), g2(5);
  const auto cached = lm::generate(*model, {3, 1}, 16, {1.0, 0}, g1, true, &cached_logits);
  const auto full = lm::generate(*model, {3, 1}, 16, {1.0, 0}, g2, false, &full_logits);
  CHECK(cached == full);
  CHECK(max_diff(cached_logits, full_logits) < 1e-12);
}

TEST_CASE("lm generate: a long prompt is cropped, bad arguments are errors", "[models][lm]") {
  manual_seed(7);
  auto model = lm::make_language_model(tiny_lm());
  Generator g1(1), g2(1);
  const std::vector<int64_t> long_prompt = some_ids(20, 9, 8);
  const std::vector<int64_t> last8(long_prompt.end() - 8, long_prompt.end());
  // Only the last block_size tokens matter.
  CHECK(lm::generate(*model, long_prompt, 5, {0.0, 0}, g1) ==
        lm::generate(*model, last8, 5, {0.0, 0}, g2));
  CHECK(lm::generate(*model, {1}, 0, {0.0, 0}, g1).empty());
  CHECK_THROWS_WITH(lm::generate(*model, {}, 5, {}, g1), Contains("the prompt is empty"));
  CHECK_THROWS_WITH(lm::generate(*model, {1}, -1, {}, g1), Contains("max_new -1 is negative"));
  CHECK_THROWS_AS(lm::generate(*model, {1}, 5, {-0.5, 0}, g1), ValueError);
  CHECK_THROWS_AS(lm::generate(*model, {1}, 5, {1.0, 10}, g1), ValueError);
  CHECK_THROWS_AS(lm::generate(*model, {9}, 5, {}, g1), ValueError);
  CHECK(model->is_training());  // the mode is restored
}

// ---- model files --------------------------------------------------------------------------------

TEST_CASE("lm model files: both formats give the same model, vocabulary and tokenizer back",
    "[models][lm][files]") {
  TempFolder folder;
  const data::Vocab vocab(std::vector<std::string>{"a", "b", "a", "c", " ", "\n", "é", "a"});
  nn::LanguageModelConfig c = tiny_lm(vocab.size());
  c.positions = nn::PositionScheme::learned;
  manual_seed(8);
  auto model = lm::make_language_model(c);
  model->eval();
  const Tensor ids = tensor({1, 2, 3, 4, 5}, {1, 5});
  const Tensor expected = model->forward(ids);
  for (const std::string name : {"m.agm", "m.safetensors"}) {
    const std::string path = folder.file(name);
    lm::save_model(path, *model, lm::Tokenizer::chars, vocab);
    const lm::LoadedModel loaded = lm::load_model(path);
    CHECK(loaded.description.vocab.id_to_token() == vocab.id_to_token());
    CHECK(loaded.description.tokenizer == lm::Tokenizer::chars);
    CHECK(loaded.description.config.positions == nn::PositionScheme::learned);
    CHECK(loaded.model->forward(ids).to_vector<float>() == expected.to_vector<float>());
  }
  // A seq2seq model file is not a language model.
  const std::string reverse = folder.file("reverse.agm");
  const seq2seq::ModelConfig s{.vocab_size = 20,
      .num_hiddens = 8,
      .ffn_num_hiddens = 8,
      .num_heads = 2,
      .num_layers = 1,
      .dropout = 0.0};
  seq2seq::save_model(reverse, *seq2seq::make_transformer(s), "reverse", s);
  CHECK_THROWS_WITH(
      lm::load_model(reverse), Contains("holds a model of task 'reverse', not a language model"));
  // A changed size is refused before anything is built.
  Checkpoint file = load_checkpoint(folder.file("m.agm"));
  file.integers["config.num_hiddens"] = 4096;
  save_checkpoint(file, folder.file("wide.agm"));
  CHECK_THROWS_WITH(lm::load_model(folder.file("wide.agm")), Contains("but the file holds"));
  file = load_checkpoint(folder.file("m.agm"));
  file.strings["tokenizer"] = "bpe";
  save_checkpoint(file, folder.file("bpe.agm"));
  CHECK_THROWS_WITH(lm::load_model(folder.file("bpe.agm")), Contains("unknown tokenizer 'bpe'"));
  CHECK_THROWS_AS(lm::load_model(folder.file("m.agm"), uint64_t{1000}), CheckpointError);
  // A vocabulary that counts other tokens than the embedding has rows is refused from its
  // header, before a token is read: here it claims 10^7 tokens (it holds 7).
  file = load_checkpoint(folder.file("m.agm"));
  std::string& text = file.strings["vocab"];
  text.replace(0, text.find('\n'), "ag-vocab 1 10000000");
  save_checkpoint(file, folder.file("huge-vocab.agm"));
  CHECK_THROWS_WITH(lm::load_model(folder.file("huge-vocab.agm")),
      Contains("(vocab): the token count 10000000 is not the 7 the model's embedding has"));
}

TEST_CASE("lm model files: every setting of a modern model comes back, in both formats",
    "[models][lm][files]") {
  TempFolder folder;
  const data::Vocab vocab(std::vector<std::string>{"a", "b", "c", " ", "\n"});
  nn::LanguageModelConfig c = tiny_lm(vocab.size());
  c.pre_norm = true;
  c.positions = nn::PositionScheme::rope;
  c.rope_pairs = RotaryPairs::halves;
  c.rope_base = 500.0;
  c.num_kv_heads = 1;
  c.norm = nn::Normalization::rms;
  c.ffn = nn::FeedForward::swiglu;
  manual_seed(9);
  auto model = lm::make_language_model(c);
  model->eval();
  const Tensor ids = tensor({1, 2, 3, 4, 5}, {1, 5});
  const Tensor expected = model->forward(ids);
  for (const std::string name : {"llama.agm", "llama.safetensors"}) {
    const std::string path = folder.file(name);
    lm::save_model(path, *model, lm::Tokenizer::chars, vocab);
    const nn::LanguageModelConfig& back = lm::load_model(path).description.config;
    CHECK(back.positions == c.positions);
    CHECK(back.rope_pairs == c.rope_pairs);
    CHECK(back.rope_base == c.rope_base);
    CHECK(back.num_kv_heads == c.num_kv_heads);
    CHECK(back.norm == c.norm);
    CHECK(back.ffn == c.ffn);
    CHECK(
        lm::load_model(path).model->forward(ids).to_vector<float>() == expected.to_vector<float>());
  }
  Checkpoint file = load_checkpoint(folder.file("llama.agm"));
  file.strings["config.positions"] = "wavelets";
  save_checkpoint(file, folder.file("bad.agm"));
  CHECK_THROWS_WITH(lm::load_model(folder.file("bad.agm")),
      Contains("config.positions: unknown positions 'wavelets' (known: sinusoidal, learned, "
               "rope, alibi, none)"));
  file = load_checkpoint(folder.file("llama.agm"));
  file.integers["config.learned_positions"] = 0;  // an older file's entry beside the new one
  save_checkpoint(file, folder.file("both.agm"));
  CHECK_THROWS_WITH(lm::load_model(folder.file("both.agm")),
      Contains("has both config.positions and the older config.learned_positions"));
}

TEST_CASE("lm model files written before the position schemes load and generate as they did",
    "[models][lm][files]") {
  // tests/models/fixtures/README.md: written by ag-train at e002bca, and what ag-generate printed
  // with them then (--prompt "The " --temperature 1 --seed 5 --max-new 40).
  const std::pair<const char*, const char*> files[] = {
      {"lm-before-positions.agm", "The co!ynax\n%\n%iruinbag TOTe uw b ore tp car"},
      {"lm-before-positions-learned.safetensors", "The mokasoYr n  lloabo.iAD! tak b onoe C win"}};
  for (const auto& [name, printed] : files) {
    INFO(name);
    const lm::LoadedModel loaded = lm::load_model(std::string(AG_MODELS_FIXTURES_DIR) + "/" + name);
    const nn::LanguageModelConfig& c = loaded.description.config;
    const bool learned = std::string(name).find("learned") != std::string::npos;
    CHECK(c.positions == (learned ? nn::PositionScheme::learned : nn::PositionScheme::sinusoidal));
    CHECK(c.pre_norm == learned);
    CHECK(c.num_kv_heads == 0);
    CHECK(c.norm == nn::Normalization::layer);
    CHECK(c.ffn == nn::FeedForward::relu);
    const data::Vocab& vocab = loaded.description.vocab;
    const std::vector<std::string> prompt = lm::tokenize("The ", lm::Tokenizer::chars).tokens;
    Generator generator(5);
    const std::vector<int64_t> generated =
        lm::generate(*loaded.model, vocab.ids(prompt), 40, {1.0, 0}, generator);
    std::vector<std::string> text = prompt;
    for (const std::string& token : vocab.tokens(generated)) text.push_back(token);
    CHECK(lm::detokenize(text, lm::Tokenizer::chars) == printed);
  }
}
