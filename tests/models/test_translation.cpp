// d2l's translation pipeline (models/seq2seq_translation.h): pairs to tokens, the held-out slice,
// the vocabularies, the shuffled stream of pairs, the evaluation with BLEU, a typed sentence, the
// attention of a translation, and translation model files with both vocabularies.
#include <catch2/catch.hpp>

#include <algorithm>
#include <set>

#include "data/synthetic_pairs.h"
#include "models/seq2seq_bleu.h"
#include "models/seq2seq_file.h"
#include "models/seq2seq_translation.h"
#include "tests/temp_folder.h"

using namespace ag;
using namespace ag::seq2seq;
using ag::testing::TempFolder;
using Catch::Matchers::Contains;

namespace {

TokenizedPairs generated(int64_t count) {
  return tokenize_pairs(data::parse_pairs(data::synthetic_pairs_text(count, 0), "<test>").pairs);
}

ModelConfig tiny_translation_config(const TranslationVocabs& vocabs) {
  ModelConfig config;
  config.vocab_size = vocabs.source.size();
  config.target_vocab_size = vocabs.target.size();
  config.num_hiddens = 16;
  config.ffn_num_hiddens = 32;
  config.num_heads = 2;
  config.num_layers = 2;
  config.dropout = 0.0;
  return config;
}

}  // namespace

TEST_CASE("translation pairs: d2l's tokens, a fixed held-out slice, a vocabulary per language",
    "[translation]") {
  const TokenizedPairs pairs = tokenize_pairs({{"Go.", "Va !"}, {"I lost.", "J'ai perdu."},
      {"He's calm.", "Il est calme."}, {"I'm home.", "Je suis chez moi."}, {"Go.", "Bouge !"}});
  CHECK(pairs.source[0] == std::vector<std::string>{"go", "."});
  CHECK(pairs.target[1] == std::vector<std::string>{"j'ai", "perdu", "."});
  const TranslationSplit split = split_pairs(pairs, 2);  // stride 2: pairs 1 and 3
  CHECK(split.held_out.source ==
        std::vector<std::vector<std::string>>{pairs.source[1], pairs.source[3]});
  CHECK(split.train.size() == 3);
  CHECK_THROWS_WITH(split_pairs(pairs, 3), Contains("3 held-out pairs of 5"));
  CHECK_THROWS_AS(split_pairs(pairs, 0), ValueError);
  const TranslationVocabs vocabs = make_translation_vocabs(split.train, 2, 10);
  // d2l: <unk>, then <pad> <bos> <eos>, then the training words seen twice or more, the most
  // frequent first ("." 3 times, "go" twice; "he's", "calm" once).
  CHECK(vocabs.source.id_to_token() ==
        std::vector<std::string>{"<unk>", "<pad>", "<bos>", "<eos>", ".", "go"});
  CHECK(vocabs.target.id_to_token() ==
        std::vector<std::string>{"<unk>", "<pad>", "<bos>", "<eos>", "!"});
  const data::Batch batch = translation_batch(split.train, {0, 2}, vocabs);
  CHECK(batch.source.to_vector<float>() ==
        std::vector<float>{5, 4, 3, 1, 1, 1, 1, 1, 1, 1, 5, 4, 3, 1, 1, 1, 1, 1, 1, 1});
  CHECK(batch.decoder_input.to_vector<float>()[0] == 2);  // <bos>
}

TEST_CASE(
    "the stream of pairs: a permutation per epoch, resumable at any position", "[translation]") {
  PairStream stream(10, 3);
  std::vector<int64_t> first_epoch;
  for (int i = 0; i < 5; ++i)
    for (int64_t index : stream.next(2)) first_epoch.push_back(index);
  std::vector<int64_t> sorted = first_epoch;
  std::sort(sorted.begin(), sorted.end());
  CHECK(sorted == std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
  CHECK(first_epoch != sorted);  // shuffled
  // A batch across the end of an epoch is full: 10 pairs, batches of 4 -> the third takes 2 + 2.
  PairStream wrap(10, 3);
  wrap.next(4);
  wrap.next(4);
  CHECK(wrap.next(4).size() == 4);
  CHECK(wrap.epoch() == 1);
  CHECK(wrap.position() == 2);
  const std::vector<int64_t> after = wrap.next(3);
  PairStream resumed(10, 3);
  resumed.set_position(1, 2);
  CHECK(resumed.next(3) == after);
  CHECK_THROWS_AS(resumed.set_position(0, 11), ValueError);
  CHECK_THROWS_AS(PairStream(0, 1), ValueError);
}

TEST_CASE("the evaluation: loss, BLEU of greedy and beam decoding, one prediction per pair",
    "[translation]") {
  set_num_threads(1);
  const TranslationSplit split = split_pairs(generated(120), 12);
  const TranslationVocabs vocabs = make_translation_vocabs(split.train, 1, 10);
  manual_seed(0);
  auto model = make_transformer(tiny_translation_config(vocabs));
  model->train();
  const TranslationEvaluation e = evaluate_translation(*model, split.held_out, vocabs, 1, 2);
  CHECK(model->is_training());  // restored
  REQUIRE(e.greedy.size() == 12);
  REQUIRE(e.beam.size() == 12);
  CHECK(e.beam == e.greedy);  // a beam of 1 is greedy decoding
  double mean = 0;
  for (std::size_t i = 0; i < 12; ++i) mean += bleu(e.greedy[i], split.held_out.target[i], 2) / 12;
  CHECK(e.bleu_greedy == Approx(mean).epsilon(1e-12));
  CHECK(e.bleu_beam == e.bleu_greedy);
  CHECK(e.loss > 0);
  // Batches of 5 give the same numbers as one batch of 12.
  const TranslationEvaluation chunked =
      evaluate_translation(*model, split.held_out, vocabs, 0, 2, 0.75, 5);
  CHECK(chunked.greedy == e.greedy);
  CHECK(chunked.beam.empty());
  CHECK(chunked.bleu_beam == 0);
  CHECK(chunked.loss == Approx(e.loss).epsilon(1e-6));
}

TEST_CASE("a sentence to translate: preprocess_nmt, <unk> for unknown words, cut at num_steps",
    "[translation]") {
  const std::vector<std::string> reserved{"<pad>", "<bos>", "<eos>"};
  const TranslationVocabs vocabs{
      data::Vocab(std::vector<std::string>{"go", ".", "go", ".", "now"}, 1, reserved),
      data::Vocab(std::vector<std::string>{"va", "!"}, 1, reserved), 4};
  // Ids: <unk> 0, <pad> 1, <bos> 2, <eos> 3, go 4, . 5, now 6.
  const SourceSentence go = prepare_source("Go.", vocabs);
  CHECK(go.tokens == std::vector<std::string>{"go", "."});
  CHECK(go.unknown.empty());
  CHECK_FALSE(go.truncated);
  CHECK(go.ids.to_vector<float>() == std::vector<float>{4, 5, 3, 1});
  CHECK(go.valid_len.item() == 3);
  const SourceSentence away = prepare_source("Go away away now!", vocabs);
  CHECK(away.unknown == std::vector<std::string>{"away", "!"});
  CHECK(away.truncated);
  CHECK(away.ids.to_vector<float>() == std::vector<float>{4, 0, 0, 6});  // d2l cuts the <eos> too
  CHECK_THROWS_WITH(prepare_source("  ", vocabs), Contains("has no word to translate"));
  CHECK_THROWS_AS(prepare_source("", vocabs), ValueError);
}

TEST_CASE("the attention of a translation: a distribution over the source's valid steps",
    "[translation]") {
  set_num_threads(1);
  const TranslationSplit split = split_pairs(generated(60), 6);
  const TranslationVocabs vocabs = make_translation_vocabs(split.train, 1, 10);
  manual_seed(1);
  auto model = make_transformer(tiny_translation_config(vocabs));
  const SourceSentence source = prepare_source("The big dog sees a cat.", vocabs);
  const std::vector<Tensor> cross = translation_cross_attention(*model, source, {5, 6, 7}, 2);
  REQUIRE(cross.size() == 2);                 // per layer
  CHECK(cross[1].shape() == Shape{2, 4, 8});  // heads, <bos> + 3 tokens, 7 words + <eos>
  const std::vector<float> rows = sum(cross[1], Shape{2}).to_vector<float>();
  for (float r : rows) CHECK(r == Approx(1.0f).epsilon(1e-5));
}

TEST_CASE("a translation model file carries both vocabularies and num_steps", "[translation]") {
  set_num_threads(1);
  TempFolder folder;
  const TranslationSplit split = split_pairs(generated(60), 6);
  const TranslationVocabs vocabs = make_translation_vocabs(split.train, 1, 9);
  const ModelConfig config = tiny_translation_config(vocabs);
  REQUIRE(config.vocab_size != config.target_vocab_size);
  manual_seed(2);
  auto model = make_transformer(config);
  const SourceSentence source = prepare_source("Some small children like the old horses.", vocabs);
  const auto expected = greedy_decode(*model, source.ids, source.valid_len, 9, 2, 3);
  for (const std::string name : {"en.agm", "en.safetensors"}) {
    INFO(name);
    const std::string path = folder.file(name);
    save_model(path, *model, kTranslateTask, config, CheckpointFormat::binary, &vocabs);
    const LoadedModel loaded = load_model(path);
    CHECK(loaded.task == nullptr);
    REQUIRE(loaded.translation.has_value());
    CHECK(loaded.translation->num_steps == 9);
    CHECK(loaded.translation->source.id_to_token() == vocabs.source.id_to_token());
    CHECK(loaded.translation->target.id_to_token() == vocabs.target.id_to_token());
    CHECK(loaded.config.target_vocab_size == config.target_vocab_size);
    CHECK(greedy_decode(*loaded.model, source.ids, source.valid_len, 9, 2, 3) == expected);
  }
  // Damaged: a vocabulary of another size than the embedding, no num_steps, no vocabulary.
  const std::string path = folder.file("en.agm");
  auto damaged = [&](const std::function<void(Checkpoint&)>& change) {
    Checkpoint c = load_checkpoint(path);
    change(c);
    const std::string out = folder.file("damaged.agm");
    save_checkpoint(c, out);
    return out;
  };
  CHECK_THROWS_WITH(load_model(damaged([&](Checkpoint& c) {
    c.strings["vocab.target"] = vocabs.source.serialize();
  })),
      Contains("(vocab.target): the token count"));
  CHECK_THROWS_WITH(
      load_model(damaged([](Checkpoint& c) { c.integers.erase("config.num_steps"); })),
      Contains("config.num_steps = 0"));
  CHECK_THROWS_WITH(load_model(damaged([](Checkpoint& c) { c.strings.erase("vocab.source"); })),
      Contains("without its vocab.source"));
  CHECK_THROWS_AS(load_model(damaged([](Checkpoint& c) { c.strings["vocab.source"] = "junk"; })),
      CheckpointError);
  // Saving needs the vocabularies for task "translate", and no others.
  CHECK_THROWS_AS(save_model(folder.file("x.agm"), *model, kTranslateTask, config), ValueError);
}

TEST_CASE("a toy task's model file has no target vocabulary entry", "[translation]") {
  TempFolder folder;
  ModelConfig config;
  config.num_hiddens = 8;
  config.ffn_num_hiddens = 8;
  config.num_heads = 2;
  config.num_layers = 1;
  manual_seed(0);
  save_model(folder.file("r.agm"), *make_transformer(config), "reverse", config);
  const Checkpoint c = load_checkpoint(folder.file("r.agm"));
  CHECK(c.integers.count("config.target_vocab_size") == 0);
  CHECK(c.strings.count("vocab.source") == 0);
  CHECK(load_model(folder.file("r.agm")).task->name() == "reverse");
}
