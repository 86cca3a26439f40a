// ag-train --task lm: nanoGPT's train.py on ag's pieces. A text (--text, or Debian's fortunes)
// split 90/10 by characters, tokenized (char or word), a Vocab of the training split; each step a
// batch of random windows (data::sample_lm_batch), the mean cross-entropy per token, backward,
// clipping, AdamW (training::Step); each evaluation the validation loss, perplexity and bits per
// character on fixed windows, and a sampled continuation. The options shared with the seq2seq
// tasks mean the same; a few defaults differ (lm_defaults in main.cpp).
#include <cstdio>
#include <sstream>

#include "data/text_corpus.h"
#include "models/lm.h"
#include "models/lm_file.h"
#include "models/memory_budget.h"
#include "models/seq2seq_memory.h"
#include "optim/optimizer.h"
#include "train.h"
#include "training/cli.h"
#include "training/profile.h"
#include "training/report.h"
#include "training/step.h"

namespace ag_train {

using namespace ag;

namespace {

// The longest --sample-length: an evaluation's sample is a glimpse, not a generation job.
constexpr int64_t kMaxSampleLength = 100000;

// The corpus, split, tokenized and numbered: what a --task lm run trains and validates on.
struct LMData {
  lm::Tokenizer tokenizer = lm::Tokenizer::chars;
  data::Vocab vocab = data::Vocab::from_tokens_in_id_order({"<unk>"});
  std::vector<int64_t> train_ids, validation_ids, validation_characters;
  std::string sources;  // the files read, one a line ("" for the fortunes: the default corpus)
  uint32_t crc = 0;     // of the whole text: a resumed run must read the same
  int64_t files = 0, characters = 0, unknown_validation_tokens = 0;
};

nn::LanguageModelConfig lm_config(const Options& o, int64_t vocab_size) {
  nn::LanguageModelConfig c;
  c.vocab_size = vocab_size;
  c.num_hiddens = o.model.num_hiddens;
  c.num_heads = o.model.num_heads;
  c.num_layers = o.model.num_layers;
  c.ffn_num_hiddens = o.model.ffn_num_hiddens;
  c.dropout = o.model.dropout;
  c.block_size = o.lm.block_size;
  c.pre_norm = o.lm.pre_norm;
  c.positions = nn::parse_position_scheme(o.lm.positions, "--positions");
  c.rope_pairs = nn::parse_rotary_pairs(o.lm.rope_pairs, "--rope-pairs");
  c.rope_base = o.lm.rope_base;
  c.num_kv_heads = o.lm.kv_heads;
  c.norm = nn::parse_normalization(o.lm.norm, "--norm");
  c.ffn = nn::parse_feed_forward(o.lm.ffn, "--ffn");
  c.tie_weights = o.lm.tie_weights;
  return c;
}

// A --task lm run's checkpoint entries: the shared ones, its own options, the text it reads (its
// files and their CRC-32), and the model's configuration, tokenizer and vocabulary
// (models/lm_file.h, as in a model file: a checkpoint loads as a model).
void describe_lm(training::Layout& file, Options& o, const LMData* d = nullptr) {
  describe_common(file, o);
  file.real("config.weight_decay", o.lm.weight_decay, 0.0);
  file.count("config.eval_windows", o.lm.eval_windows, 1);
  file.count("config.sample_length", o.lm.sample_length, 0, kMaxSampleLength);
  std::string sources = d ? d->sources : "";
  file.text("text.sources", sources);
  uint32_t crc = d ? d->crc : 0;
  file.integer("text.crc32", crc);
  if (!file.reading())
    return lm::save_model_config(file.out(), lm_config(o, d->vocab.size()), d->tokenizer, d->vocab);
  const lm::ModelDescription m = lm::load_model_config(file.in(), file.path());
  o.model.num_hiddens = m.config.num_hiddens;
  o.model.num_heads = m.config.num_heads;
  o.model.num_layers = m.config.num_layers;
  o.model.ffn_num_hiddens = m.config.ffn_num_hiddens;
  o.model.dropout = m.config.dropout;
  o.lm.block_size = m.config.block_size;
  o.lm.pre_norm = m.config.pre_norm;
  o.lm.positions = nn::position_scheme_name(m.config.positions);
  o.lm.rope_pairs = nn::rotary_pairs_name(m.config.rope_pairs);
  o.lm.rope_base = m.config.rope_base;
  o.lm.kv_heads = m.config.num_kv_heads;
  o.lm.norm = nn::normalization_name(m.config.norm);
  o.lm.ffn = nn::feed_forward_name(m.config.ffn);
  o.lm.tie_weights = m.config.tie_weights;
  o.lm.tokenizer = lm::tokenizer_name(m.tokenizer);
  o.lm.text.clear();  // read again from the same files (and checked to be the same: train_lm)
  std::istringstream lines(sources);
  for (std::string line; std::getline(lines, line);) o.lm.text.push_back(line);
}

LMData read_lm_data(const LMOptions& lmo, const training::RunOptions& run) {
  LMData d;
  d.tokenizer = lm::parse_tokenizer(lmo.tokenizer, "--tokenizer");
  const data::TextCorpus corpus =
      lmo.text.empty() ? data::read_fortunes() : data::read_text_files(lmo.text);
  for (const std::string& file : corpus.files) d.sources += file + "\n";
  d.files = static_cast<int64_t>(corpus.files.size());
  // What tokenizing it will take, before it starts (the model's memory is checked once the
  // vocabulary's size is known).
  check_memory({.data = lm::estimate_text_bytes(corpus.text.size(), d.tokenizer)}, run.memory_limit,
      "reading the text (" + format_bytes(static_cast<double>(corpus.text.size())) + " in " +
          std::to_string(d.files) + " file" + (d.files == 1 ? "" : "s") + ", " + lmo.tokenizer +
          " tokens)",
      run.memory_limit_source);
  d.crc = crc32(corpus.text);
  d.characters = static_cast<int64_t>(data::count_code_points(corpus.text));
  // nanoGPT's n = len(data); train = data[:int(n*0.9)]; val = data[int(n*0.9):] — on characters,
  // before tokenizing, so that no token straddles the split.
  const auto [train_text, validation_text] = lm::split_text(corpus.text, 0.9);
  if (d.tokenizer == lm::Tokenizer::chars) {
    // Characters straight to ids, without a string per character (40 bytes each, for a token of
    // one or two bytes): the same vocabulary, in the same order, and the same ids.
    data::TokenCounter counter;
    counter.add_chars(train_text);
    d.vocab = data::Vocab(counter);  // <unk> and the training split's characters
    d.train_ids = d.vocab.char_ids(train_text);
    d.validation_ids = d.vocab.char_ids(validation_text);
    // (validation_characters stays empty: a token is one character)
  } else {
    const lm::TokenizedText train = lm::tokenize(train_text, d.tokenizer);
    const lm::TokenizedText validation = lm::tokenize(validation_text, d.tokenizer);
    d.vocab = data::Vocab(train.tokens);  // <unk> and the training split's words
    d.train_ids = d.vocab.ids(train.tokens);
    d.validation_ids = d.vocab.ids(validation.tokens);
    d.validation_characters = validation.characters;
  }
  for (int64_t id : d.validation_ids) d.unknown_validation_tokens += id == d.vocab.unk();
  const int64_t T = lmo.block_size;
  for (const auto& [split, ids] :
      {std::pair{"training", &d.train_ids}, std::pair{"validation", &d.validation_ids}})
    if (static_cast<int64_t>(ids->size()) < T + 1)
      fail<ValueError>("the text is too short: its ", split, " split has ", ids->size(), " ",
          lmo.tokenizer, " tokens, and --block-size ", T, " needs at least ", T + 1,
          " (a longer text, or a smaller --block-size)");
  return d;
}

// The text and the model's sizes and memory: a bad text or a run that does not fit is a bad input
// (exit 2); a resumed run's text must be the one it was trained on.
LMData lm_data(const Options& o, const std::optional<Checkpoint>& resumed) {
  LMData d;
  try {
    d = read_lm_data(o.lm, o.run);
    const nn::LanguageModelConfig config = lm_config(o, d.vocab.size());
    lm::check_config(config, /*options=*/true);
    MemoryEstimate estimate =
        lm::estimate_training_bytes(config, o.run.batch_size, 32, !o.run.checkpoint.empty());
    // the ids the run keeps: 8 bytes a token (and a character count a word token)
    estimate.data = 8.0 * static_cast<double>(d.train_ids.size() + d.validation_ids.size() +
                                              d.validation_characters.size());
    estimate.evaluation += lm::estimate_sampling_bytes(config, o.lm.sample_length, d.vocab);
    check_memory(estimate, o.run.memory_limit,
        "this run (--num-hiddens " + std::to_string(config.num_hiddens) + ", --layers " +
            std::to_string(config.num_layers) + ", --block-size " +
            std::to_string(config.block_size) + ", --batch-size " +
            std::to_string(o.run.batch_size) + ", vocabulary " + std::to_string(config.vocab_size) +
            ", --sample-length " + std::to_string(o.lm.sample_length) + ")",
        o.run.memory_limit_source);
    limit_cache_to_headroom(estimate, o.run.memory_limit);
  } catch (const std::exception& e) {
    throw training::UsageError(e.what());
  }
  if (resumed && resumed->integer("text.crc32") != d.crc)
    throw CheckpointError("checkpoint " + o.run.resume +
                          ": the text it was trained on has changed since (its files: " +
                          (d.sources.empty() ? std::string("the fortunes") : d.sources) + ")");
  return d;
}

// "sinusoidal", "rope (interleaved, base 10000)", …: the banner's words for the positions.
std::string position_description(const nn::LanguageModelConfig& c) {
  std::string words = nn::position_scheme_name(c.positions);
  if (c.positions == nn::PositionScheme::rope) {
    char base[32];
    std::snprintf(base, sizeof base, "%g", c.rope_base);
    words += " (" + nn::rotary_pairs_name(c.rope_pairs) + ", base " + base + ")";
  }
  return words;
}

// "" for as many key/value heads as heads, else " (2 key/value heads)".
std::string kv_heads_description(const nn::LanguageModelConfig& c) {
  if (c.kv_heads() == c.num_heads) return "";
  return " (" + std::to_string(c.kv_heads()) + " key/value head" + (c.kv_heads() == 1 ? "" : "s") +
         ")";
}

void print_lm_run(const Options& o, const LMData& d, const nn::LanguageModelConfig& config,
    const nn::LanguageModel& model) {
  std::printf(
      "ag-train: task lm, %s (%lld file%s, %lld characters), %s tokens: vocabulary %lld, "
      "%lld training and %lld validation tokens (%lld unknown); model %lld parameters (%s, %s "
      "positions, hidden %lld, ffn %lld%s, %lld heads%s, %lld layers, block %lld, dropout %g); "
      "%lld steps of batch %lld, AdamW lr %g (%s), weight decay %g, clip %g, seed %llu, %d "
      "thread%s\n",
      o.lm.text.empty() ? "Debian's fortunes" : "--text", static_cast<long long>(d.files),
      d.files == 1 ? "" : "s", static_cast<long long>(d.characters), o.lm.tokenizer.c_str(),
      static_cast<long long>(config.vocab_size), static_cast<long long>(d.train_ids.size()),
      static_cast<long long>(d.validation_ids.size()),
      static_cast<long long>(d.unknown_validation_tokens),
      static_cast<long long>(model.num_parameters()),
      config.pre_norm ? (config.norm == nn::Normalization::rms ? "pre-norm RMSNorm" : "pre-norm")
                      : "post-norm",
      position_description(config).c_str(), static_cast<long long>(config.num_hiddens),
      static_cast<long long>(config.ffn_num_hiddens),
      config.ffn == nn::FeedForward::swiglu ? " SwiGLU" : "",
      static_cast<long long>(config.num_heads), kv_heads_description(config).c_str(),
      static_cast<long long>(config.num_layers), static_cast<long long>(config.block_size),
      config.dropout, static_cast<long long>(o.run.steps), static_cast<long long>(o.run.batch_size),
      o.run.lr, o.run.schedule.c_str(), o.lm.weight_decay, o.run.clip,
      static_cast<unsigned long long>(o.run.seed), o.run.threads, o.run.threads == 1 ? "" : "s");
}

void print_lm_evaluation(int64_t step, double train_loss, const lm::Evaluation& e,
    nn::LanguageModel& model, const LMOptions& lmo, const LMData& d, uint64_t seed) {
  std::printf(
      "eval @ step %lld: train loss %.4f  validation loss %.4f  perplexity %.2f  "
      "bits/char %.3f  (%lld windows, %lld tokens)\n",
      static_cast<long long>(step), train_loss, e.loss, e.perplexity, e.bits_per_character,
      static_cast<long long>(e.windows), static_cast<long long>(e.tokens));
  // nanoGPT's sample.py: from a line break (or the first training token), temperature 0.8, the
  // same seed at every evaluation so that the samples differ only by what the model learned.
  const int64_t newline = d.vocab.id("\n");
  const std::vector<int64_t> prompt{newline != d.vocab.unk() ? newline : d.train_ids[0]};
  Generator generator(seed);
  const std::vector<int64_t> sample =
      lm::generate(model, prompt, lmo.sample_length, {0.8, 0}, generator);
  std::string text = lm::detokenize(d.vocab.tokens(sample), d.tokenizer);
  std::printf(
      "  sample (temperature 0.8, seed %llu):\n  | ", static_cast<unsigned long long>(seed));
  for (char c : text) {
    if (c == '\n')
      std::fputs("\n  | ", stdout);
    else
      std::fputc(c, stdout);
  }
  std::printf("\n");
  std::fflush(stdout);
}

// After the last step, on rank 0: the model file and the summary.
int finish_lm(const Options& o, const training::Run& run, const training::Report& report,
    const nn::LanguageModel& model, const LMData& d, const lm::Evaluation& last) {
  if (dist::rank() > 0) return 0;
  if (!o.save_model.empty()) {
    training::report_removed("ag-train", lm::save_model(o.save_model, model, d.tokenizer, d.vocab,
                                             training::checkpoint_format(o.run))
                                             .removed_temp_files);
    std::printf("saved the model to %s (ag-generate --model %s --prompt TEXT)\n",
        o.save_model.c_str(), o.save_model.c_str());
  }
  if (run.stopped_early()) return 0;
  std::printf(
      "done: %lld steps in %s; validation loss %.4f, perplexity %.2f, %.3f bits per "
      "character\n",
      static_cast<long long>(o.run.steps), training::format_duration(report.seconds()).c_str(),
      last.loss, last.perplexity, last.bits_per_character);
  return 0;
}

}  // namespace

int train_lm(Options o) {
  // --resume: the file's settings replace those that define a run.
  const std::optional<Checkpoint> resumed = resume(o, [&](auto& file) { describe_lm(file, o); });
  const LMData d = lm_data(o, resumed);
  const nn::LanguageModelConfig config = lm_config(o, d.vocab.size());
  manual_seed(o.run.seed);  // model initialisation and dropout masks
  auto model = lm::make_language_model(config);
  Generator data_generator(o.run.seed + 1);  // the training windows
  optim::AdamW optimizer(model->parameters(), o.run.lr, {0.9, 0.99}, 1e-8, o.lm.weight_decay);
  optim::Scheduler scheduler(optimizer, training::make_schedule(o.run, config.num_hiddens, 0.1));
  training::Run run(o.run, *model, optimizer, scheduler, [&](auto& f) { describe_lm(f, o, &d); });
  run.track([&](training::Layout& f) { f.generator("generator.data", data_generator); });
  run.start(resumed);
  training::Step step(
      *model, optimizer, scheduler, o.run.batch_size, training::StepOptions::of(o.run));
  print_lm_run(o, d, config, *model);
  training::print_data_parallel(o.run, "windows");
  training::Report report(o.run, run.first_step(), run.last_step());
  training::StepProfiler profiler(o.run, run.first_step(), run.last_step());  // --profile
  lm::Evaluation last;

  for (int64_t t = run.first_step(); t <= run.last_step(); ++t) {
    profiler.step_begins(t);
    // The global batch of windows (the same on every rank), of which this rank takes its rows.
    const data::LMBatch batch =
        data::sample_lm_batch(d.train_ids, o.run.batch_size, config.block_size, data_generator);
    // Windows [first, last): their mean cross-entropy per token, and their number (every window
    // has block_size tokens).
    auto loss_of = [&](int64_t first, int64_t last) {
      const Tensor inputs = batch.inputs.narrow(0, first, last - first);  // (rows, T)
      const Tensor labels = batch.labels.narrow(0, first, last - first);  // (rows, T)
      return std::pair{lm::lm_loss(*model, inputs, labels), static_cast<double>(last - first)};
    };
    const training::StepResult result =
        step.take(t, static_cast<double>(o.run.batch_size), loss_of);
    profiler.step_ends(t);
    if (result.diverged) return 1;
    report.step(t, result.loss,
        static_cast<double>(step.rows(o.run.batch_size).size() * config.block_size));
    if (report.evaluation_due(t) && dist::rank() == 0) {
      last = lm::evaluate(*model, d.validation_ids, d.validation_characters, o.lm.eval_windows);
      print_lm_evaluation(t, report.take_train_loss(), last, *model, o.lm, d, o.run.seed);
    }
    const bool stop = run.stop_requested();  // Ctrl-C: every rank after the same step
    if (run.save_due(t, stop)) run.save(t);
    if (stop) return run.interrupted_after(t);
  }
  return finish_lm(o, run, report, *model, d, last);
}

}  // namespace ag_train
