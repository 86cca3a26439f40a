// Beam search (models/seq2seq.h): the search on distributions the test controls, and through the
// Transformer with its key/value cache — width 1 is greedy decoding, a wide beam is exhaustive
// search, and a beam of 4 scores at least as well as greedy on these sources.
#include <catch2/catch.hpp>

#include <cmath>
#include <map>

#include "autograd/error.h"
#include "models/seq2seq.h"

using namespace ag;
using namespace ag::seq2seq;

namespace {

// A "model" over the vocabulary 0 <pad>, 1 <bos>, 2 <eos>, 3 A, 4 B whose next-token
// distribution depends on the prefix: after <bos>, A 0.5, B 0.4, <eos> 0.1; after A, A 0.3,
// B 0.3, <eos> 0.4; after B, <eos> 0.9, A and B 0.05; after two tokens, <eos> 1 (almost).
// Greedy takes A (0.5), then <eos> (0.4): P = 0.2. The beam keeps B too: B <eos> has P = 0.36.
// It follows `parents` as a cached decoder must, keeping each row's prefix.
struct ToyModel {
  std::vector<std::vector<int64_t>> prefixes{{}};  // per row of the last call
  int calls = 0;
  std::vector<double> operator()(
      const std::vector<int64_t>& parents, const std::vector<int64_t>& tokens) {
    ++calls;
    std::vector<std::vector<int64_t>> next;
    for (std::size_t i = 0; i < parents.size(); ++i) {
      REQUIRE(parents[i] < static_cast<int64_t>(prefixes.size()));
      next.push_back(prefixes[static_cast<std::size_t>(parents[i])]);
      next.back().push_back(tokens[i]);
    }
    prefixes = next;
    std::vector<double> log_probs;
    for (const std::vector<int64_t>& p : prefixes) {
      std::vector<double> probs;  // pad, bos, eos, A, B
      if (p.size() == 1)
        probs = {1e-9, 1e-9, 0.1, 0.5, 0.4};
      else if (p.size() == 2 && p[1] == 3)
        probs = {1e-9, 1e-9, 0.4, 0.3, 0.3};
      else if (p.size() == 2 && p[1] == 4)
        probs = {1e-9, 1e-9, 0.9, 0.05, 0.05};
      else
        probs = {1e-9, 1e-9, 1.0, 1e-9, 1e-9};
      for (double q : probs) log_probs.push_back(std::log(q));
    }
    return log_probs;
  }
};

BeamOptions toy_options(int64_t beam_size) {
  BeamOptions o;
  o.beam_size = beam_size;
  o.alpha = 0.75;
  o.max_steps = 5;
  o.bos = 1;
  o.eos = 2;
  return o;
}

ModelConfig tiny_config() {
  ModelConfig config;
  config.vocab_size = 7;
  config.target_vocab_size = 9;  // a vocabulary per language, as translation has
  config.num_hiddens = 8;
  config.ffn_num_hiddens = 16;
  config.num_heads = 2;
  config.num_layers = 2;
  config.dropout = 0.0;
  return config;
}

// Sources of the tiny model: (B, Ts) ids in 3..6 then <eos> 2, padded with 0; valid lengths.
struct Sources {
  Tensor ids, valid_lens;
};
Sources tiny_sources() {
  const std::vector<std::vector<float>> rows = {
      {3, 4, 5, 2, 0}, {6, 2, 0, 0, 0}, {5, 5, 6, 3, 2}, {4, 3, 2, 0, 0}, {6, 6, 2, 0, 0}};
  std::vector<float> flat, lens;
  for (const auto& r : rows) {
    flat.insert(flat.end(), r.begin(), r.end());
    lens.push_back(static_cast<float>(std::find(r.begin(), r.end(), 2.0f) - r.begin() + 1));
  }
  return {tensor(flat, {static_cast<int64_t>(rows.size()), 5}),
      tensor(lens, {static_cast<int64_t>(rows.size())})};
}

}  // namespace

TEST_CASE("beam search finds the sequence that greedy decoding misses", "[beam]") {
  ToyModel greedy_model;
  const BeamHypothesis greedy = beam_search(std::ref(greedy_model), toy_options(1));
  CHECK(greedy.tokens == std::vector<int64_t>{3});  // A, then <eos>
  CHECK(greedy.finished);
  CHECK(greedy.length == 2);
  CHECK(greedy.log_prob == Approx(std::log(0.5 * 0.4)));
  ToyModel beam_model;
  const BeamHypothesis beam = beam_search(std::ref(beam_model), toy_options(2));
  CHECK(beam.tokens == std::vector<int64_t>{4});  // B, then <eos>
  CHECK(beam.log_prob == Approx(std::log(0.4 * 0.9)));
  CHECK(beam.score == Approx(std::log(0.36) / std::pow(2.0, 0.75)));
  CHECK(beam.score > greedy.score);
}

TEST_CASE("beam search: length normalisation and hypotheses cut at max_steps", "[beam]") {
  // <eos> at once has P = 0.1, L = 1: score log 0.1 = −2.30; B <eos> scores log 0.36 / 2^α. With
  // α = 0 (no normalisation) and a wide beam the best is still B <eos> (−1.02 > −2.30).
  BeamOptions o = toy_options(5);
  o.alpha = 0;
  ToyModel model;
  const BeamHypothesis best = beam_search(std::ref(model), o);
  CHECK(best.tokens == std::vector<int64_t>{4});
  CHECK(best.score == Approx(std::log(0.36)));
  // One step only: nothing is finished but <eos> itself (P = 0.1); A (P = 0.5, L = 1, cut) wins.
  o.max_steps = 1;
  ToyModel one_step;
  const BeamHypothesis cut = beam_search(std::ref(one_step), o);
  CHECK(cut.tokens == std::vector<int64_t>{3});
  CHECK_FALSE(cut.finished);
  CHECK(cut.length == 1);
  CHECK(one_step.calls == 1);
}

TEST_CASE("beam search refuses bad options and bad distributions", "[beam]") {
  ToyModel model;
  BeamOptions o = toy_options(0);
  CHECK_THROWS_AS(beam_search(std::ref(model), o), ValueError);
  o = toy_options(kMaxBeamSize + 1);  // a beam of 10^5 ran for hours
  CHECK_THROWS_WITH(beam_search(std::ref(model), o), Catch::Matchers::Contains("beam_size 257"));
  o = toy_options(2);
  o.max_steps = 0;
  CHECK_THROWS_WITH(beam_search(std::ref(model), o), Catch::Matchers::Contains("max_steps 0"));
  o = toy_options(2);
  o.alpha = NAN;
  CHECK_THROWS_AS(beam_search(std::ref(model), o), ValueError);
  o = toy_options(2);
  o.eos = 5;  // outside the 5 tokens
  CHECK_THROWS_WITH(beam_search(std::ref(model), o), Catch::Matchers::Contains("eos 5"));
  auto ragged = [](const std::vector<int64_t>&, const std::vector<int64_t>& tokens) {
    return std::vector<double>(tokens.size() == 1 ? 5 : 3, -1.0);
  };
  CHECK_THROWS_AS(beam_search(ragged, toy_options(2)), ValueError);
  auto nan = [](const std::vector<int64_t>&, const std::vector<int64_t>& tokens) {
    std::vector<double> log_probs(tokens.size() * 5, -1.0);
    log_probs[3] = NAN;
    return log_probs;
  };
  CHECK_THROWS_WITH(
      beam_search(nan, toy_options(2)), Catch::Matchers::Contains("is NaN at step 0"));
}

TEST_CASE("beam width 1 through the Transformer is greedy decoding, token for token", "[beam]") {
  set_num_threads(1);
  const Sources s = tiny_sources();
  for (uint64_t seed : {0, 1, 2}) {
    manual_seed(seed);
    auto model = make_transformer(tiny_config());
    const auto greedy = greedy_decode(*model, s.ids, s.valid_lens, 6, /*bos=*/1, /*eos=*/2);
    BeamOptions o;
    o.beam_size = 1;
    o.max_steps = 6;
    o.bos = 1;
    o.eos = 2;
    const auto beams = beam_decode(*model, s.ids, s.valid_lens, o);
    REQUIRE(beams.size() == greedy.size());
    for (std::size_t i = 0; i < greedy.size(); ++i) CHECK(beams[i].tokens == greedy[i]);
  }
}

TEST_CASE("a beam wide enough to keep every hypothesis is exhaustive search", "[beam]") {
  // Two steps over a target vocabulary of 9: every sequence is <eos>, a <eos>, or a b (cut). A
  // beam of 81 keeps them all, so its result must be the best of all, scored here by full
  // teacher-forced forwards without the cache — which checks the cache's reordering too.
  set_num_threads(1);
  manual_seed(3);
  const ModelConfig config = tiny_config();
  auto model = make_transformer(config);
  model->eval();
  const Sources s = tiny_sources();
  const double alpha = 0.75;
  for (int64_t row = 0; row < s.ids.size(0); ++row) {
    const Tensor source = s.ids.narrow(0, row, 1), valid = s.valid_lens.narrow(0, row, 1);
    BeamOptions o;
    o.beam_size = 81;
    o.max_steps = 2;
    o.bos = 1;
    o.eos = 2;
    const BeamHypothesis beam = beam_decode(*model, source, valid, o)[0];
    // All decoder inputs <bos> a, a in 0..8, in one batch: log P of each first and second token.
    NoGradGuard no_grad;
    const int64_t V = config.target_vocab();
    std::vector<float> inputs;
    for (int64_t a = 0; a < V; ++a) inputs.insert(inputs.end(), {1.0f, float(a)});
    const Tensor logits = model->forward(source.expand({V, 5}).contiguous(), tensor(inputs, {V, 2}),
        valid.expand({V}).contiguous());  // (V, 2, V)
    const std::vector<double> lp = log_softmax(logits, -1).to_vector<double>();
    double best = -INFINITY;
    std::vector<int64_t> best_tokens;
    auto consider = [&](double log_prob, int64_t length, std::vector<int64_t> tokens) {
      const double score = log_prob / std::pow(static_cast<double>(length), alpha);
      if (score > best) best = score, best_tokens = tokens;
    };
    consider(lp[2], 1, {});  // <eos> first (row 0's first step: every row has the same)
    for (int64_t a = 0; a < V; ++a) {
      if (a == 2) continue;
      const double first = lp[a];  // log P(a | <bos>)
      for (int64_t b = 0; b < V; ++b)
        consider(first + lp[(a * 2 + 1) * V + b], 2,
            b == 2 ? std::vector<int64_t>{a} : std::vector<int64_t>{a, b});
    }
    INFO("source row " << row);
    CHECK(beam.tokens == best_tokens);
    CHECK(beam.score == Approx(best).margin(1e-5));
  }
}

TEST_CASE("a beam of 4 scores at least as well as greedy decoding on a tiny model", "[beam]") {
  // Not a theorem (the beam may prune greedy's path), but what a beam is for; it holds on every
  // source here. Greedy's normalised score is that of the beam of width 1.
  set_num_threads(1);
  const Sources s = tiny_sources();
  int better = 0;
  for (uint64_t seed : {4, 5, 6}) {
    manual_seed(seed);
    auto model = make_transformer(tiny_config());
    BeamOptions o;
    o.max_steps = 6;
    o.bos = 1;
    o.eos = 2;
    o.beam_size = 1;
    const auto greedy = beam_decode(*model, s.ids, s.valid_lens, o);
    o.beam_size = 4;
    const auto beam = beam_decode(*model, s.ids, s.valid_lens, o);
    for (std::size_t i = 0; i < beam.size(); ++i) {
      INFO("seed " << seed << ", source row " << i);
      if (beam[i].tokens == greedy[i].tokens) {
        // The same sequence, scored in a batch of 4 rows instead of 1: its products may round
        // differently (they do on OpenBLAS's AVX2 kernels), so the scores agree to float32's
        // precision, not to the bit.
        CHECK(beam[i].score == Approx(greedy[i].score).epsilon(1e-6));
      } else {
        CHECK(beam[i].score > greedy[i].score);
        ++better;
      }
    }
  }
  CHECK(better > 0);  // the beam does find better sequences, not only greedy's
}
