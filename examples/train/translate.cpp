// ag-train --task translate: d2l's machine translation — the Transformer on sentence pairs
// (d2l's fra.txt format, or a corpus ag generates), a vocabulary per language, evaluated on a
// fixed held-out slice by the loss and the BLEU of greedy and beam decoding (docs/text.md).
#include <algorithm>
#include <cstdio>

#include "data/synthetic_pairs.h"
#include "data/text_corpus.h"
#include "io/file.h"
#include "models/memory_budget.h"
#include "models/seq2seq_file.h"
#include "models/seq2seq_memory.h"
#include "models/seq2seq_translation.h"
#include "optim/optimizer.h"
#include "train.h"
#include "training/cli.h"
#include "training/profile.h"
#include "training/report.h"
#include "training/step.h"

namespace ag_train {

using namespace ag;

namespace {

struct TranslateData {
  std::string path;
  seq2seq::TranslationSplit split;
  seq2seq::TranslationVocabs vocabs;
  uint32_t crc = 0;  // of the pairs, in their order: a resumed run must read the same
};

// CRC-32 of the pairs as "source<TAB>target\n" lines, in the file's order.
uint32_t pairs_crc(const std::vector<data::SentencePair>& pairs) {
  std::string lines;
  for (const data::SentencePair& pair : pairs) lines += pair.source + '\t' + pair.target + '\n';
  return crc32(lines);
}

// A translate run's checkpoint entries: the shared ones, the model's sizes and both vocabularies
// (models/seq2seq_file.h, as in a model file), the pairs it reads and their CRC. (A resume checks
// the CRC against the pairs read again: translate_data.)
void describe_translate(training::Layout& file, Options& o, const TranslateData* d = nullptr) {
  describe_common(file, o);
  file.text("config.pairs", o.pairs);
  file.count("config.generated_pairs", o.generated_pairs, 1, 1000000);
  file.count("config.min_freq", o.min_freq);
  if (!file.reading()) {
    seq2seq::save_model_config(file.out(), o.task, o.model);
    seq2seq::save_translation_vocabs(file.out(), d->vocabs);
    uint32_t crc = d->crc;
    file.integer("pairs.crc32", crc);  // (read back by translate_data, which checks it)
    return;
  }
  o.model = seq2seq::load_model_config(file.in(), file.path());
  file.count("config.num_steps", o.num_steps, 1, 1000);
}

// The pairs of a translate run: --pairs FILE (d2l's fra.txt format), or the generated corpus.
data::PairsFile translation_pairs(const Options& o) {
  const std::string text = o.pairs.empty() ? data::synthetic_pairs_text(o.generated_pairs, 0)
                                           : read_whole_file(o.pairs, "--pairs");
  const std::string source = o.pairs.empty() ? "<generated pairs>" : o.pairs;
  // What parsing, tokenizing and batching them will take, before it starts (the model's memory
  // is checked once the vocabularies' sizes are known).
  const auto lines = static_cast<uint64_t>(std::count(text.begin(), text.end(), '\n')) + 1;
  try {
    check_memory({.data = seq2seq::estimate_pairs_bytes(text.size(), lines)}, o.run.memory_limit,
        "reading the pairs of " + source + " (" + format_bytes(static_cast<double>(text.size())) +
            ", " + std::to_string(lines) + " lines)",
        o.run.memory_limit_source);
  } catch (const ValueError& e) {
    throw training::UsageError(e.what());
  }
  data::PairsFile file = data::parse_pairs(text, source);
  if (file.skipped_lines > 0)
    std::printf("%s: skipped %lld line%s without a tab\n", file.path.c_str(),
        static_cast<long long>(file.skipped_lines), file.skipped_lines == 1 ? "" : "s");
  return file;
}

// The bytes a run keeps of its tokenized pairs: a vector (24 bytes) a sentence, a string (32) and
// its text a token.
double tokenized_bytes(const seq2seq::TokenizedPairs& pairs) {
  double bytes = 0;
  for (const auto* side : {&pairs.source, &pairs.target})
    for (const std::vector<std::string>& sentence : *side) {
      bytes += 24;
      for (const std::string& token : sentence) bytes += 32 + static_cast<double>(token.size());
    }
  return bytes;
}

// The pairs, split into training and held-out pairs, and the vocabularies of the training pairs;
// for a resumed run, the vocabularies it was trained with. Then the memory of the run, as
// toy_size_problem does for the toy tasks, once the vocabularies' sizes are known.
TranslateData translate_data(Options& o, const std::optional<Checkpoint>& resumed) {
  const data::PairsFile file = translation_pairs(o);
  seq2seq::TranslationSplit split;
  try {
    split = seq2seq::split_pairs(seq2seq::tokenize_pairs(file.pairs), o.eval_size);
  } catch (const ValueError& e) {
    throw training::UsageError(
        "--eval-size " + std::to_string(o.eval_size) + " for " + file.path + ": " + e.what());
  }
  seq2seq::TranslationVocabs vocabs =
      seq2seq::make_translation_vocabs(split.train, o.min_freq, o.num_steps);
  TranslateData d{file.path, std::move(split), std::move(vocabs), pairs_crc(file.pairs)};
  // A resumed run reads the pairs it was trained on, in the same order (a file saved before the
  // pairs' CRC was: the same vocabularies, at least).
  if (resumed) {
    const bool same = resumed->integers.count("pairs.crc32")
                          ? resumed->integer("pairs.crc32") == d.crc
                          : resumed->string("vocab.source") == d.vocabs.source.serialize() &&
                                resumed->string("vocab.target") == d.vocabs.target.serialize();
    if (!same)
      throw CheckpointError("checkpoint " + o.run.resume + ": the pairs of " + file.path +
                            " are not those the run was trained with (has the file changed?)");
  }
  o.model.vocab_size = d.vocabs.source.size();
  o.model.target_vocab_size = d.vocabs.target.size();
  try {
    MemoryEstimate estimate = seq2seq::estimate_training_bytes(o.model, o.run.batch_size,
        o.num_steps, o.num_steps, o.eval_size, !o.run.checkpoint.empty());
    estimate.evaluation +=
        seq2seq::estimate_beam_search_bytes(o.model, o.beam, o.num_steps, o.num_steps);
    estimate.data = tokenized_bytes(d.split.train) + tokenized_bytes(d.split.held_out);
    check_memory(estimate, o.run.memory_limit,
        "this run (vocabularies " + std::to_string(o.model.vocab_size) + " and " +
            std::to_string(o.model.target_vocab_size) + ", --batch-size " +
            std::to_string(o.run.batch_size) + ", --num-hiddens " +
            std::to_string(o.model.num_hiddens) +
            (o.beam > 0 ? ", --beam " + std::to_string(o.beam) : std::string()) + ")",
        o.run.memory_limit_source);
    limit_cache_to_headroom(estimate, o.run.memory_limit);
  } catch (const ValueError& e) {
    throw training::UsageError(e.what());
  }
  return d;
}

void print_translation_run(
    const Options& o, const TranslateData& d, const nn::EncoderDecoder& model) {
  const seq2seq::ModelConfig& m = o.model;
  std::printf(
      "ag-train: task translate, %s: %lld training and %lld held-out pairs, vocabularies %lld "
      "(source) and %lld (target) at min_freq %lld, num_steps %lld; model %lld parameters "
      "(hidden %lld, ffn %lld, %lld heads, %lld layers, dropout %g), %lld steps of batch %lld, "
      "Adam lr %g (%s), clip %g, seed %llu, %d thread%s\n",
      d.path.c_str(), static_cast<long long>(d.split.train.size()),
      static_cast<long long>(d.split.held_out.size()),
      static_cast<long long>(d.vocabs.source.size()),
      static_cast<long long>(d.vocabs.target.size()), static_cast<long long>(o.min_freq),
      static_cast<long long>(o.num_steps), static_cast<long long>(model.num_parameters()),
      static_cast<long long>(m.num_hiddens), static_cast<long long>(m.ffn_num_hiddens),
      static_cast<long long>(m.num_heads), static_cast<long long>(m.num_layers), m.dropout,
      static_cast<long long>(o.run.steps), static_cast<long long>(o.run.batch_size), o.run.lr,
      o.run.schedule.c_str(), o.run.clip, static_cast<unsigned long long>(o.run.seed),
      o.run.threads, o.run.threads == 1 ? "" : "s");
}

std::string joined(const std::vector<std::string>& tokens) {
  std::string text;
  for (const std::string& t : tokens) text += (text.empty() ? "" : " ") + t;
  return text;
}

void print_translation_evaluation(int64_t step, const seq2seq::TranslationEvaluation& e,
    const seq2seq::TokenizedPairs& held_out, const Options& o) {
  std::printf("eval @ step %lld: held-out loss %.4f  BLEU-2 greedy %.3f",
      static_cast<long long>(step), e.loss, e.bleu_greedy);
  if (o.beam > 0) std::printf("  beam %lld %.3f", static_cast<long long>(o.beam), e.bleu_beam);
  std::printf("  (mean over %lld held-out pairs)\n", static_cast<long long>(held_out.size()));
  for (int64_t i = 0; i < o.show && i < held_out.size(); ++i) {
    const auto k = static_cast<std::size_t>(i);
    std::printf("  %s => %s", joined(held_out.source[k]).c_str(), joined(e.greedy[k]).c_str());
    if (o.beam > 0) std::printf("  | beam: %s", joined(e.beam[k]).c_str());
    std::printf("  (reference: %s)\n", joined(held_out.target[k]).c_str());
  }
  std::fflush(stdout);
}

// After the last step, on rank 0: the model file and the summary.
int finish_translation(const Options& o, const training::Run& run, const training::Report& report,
    const nn::EncoderDecoder& model, const TranslateData& d,
    const seq2seq::TranslationEvaluation& last) {
  if (dist::rank() > 0) return 0;
  if (!o.save_model.empty()) {
    training::report_removed("ag-train", seq2seq::save_model(o.save_model, model, o.task, o.model,
                                             training::checkpoint_format(o.run), &d.vocabs)
                                             .removed_temp_files);
    std::printf("saved the model to %s\n", o.save_model.c_str());
  }
  if (run.stopped_early()) return 0;
  std::printf("done: %lld steps in %s; held-out loss %.4f, BLEU-2 greedy %.3f%s\n",
      static_cast<long long>(o.run.steps), training::format_duration(report.seconds()).c_str(),
      last.loss, last.bleu_greedy,
      o.beam > 0
          ? (", beam " + std::to_string(o.beam) + " " + std::to_string(last.bleu_beam).substr(0, 5))
                .c_str()
          : "");
  return 0;
}

}  // namespace

int train_translate(Options o) {
  // --resume: the file's settings replace those that define a run.
  const std::optional<Checkpoint> resumed =
      resume(o, [&](auto& file) { describe_translate(file, o); });
  const TranslateData d = translate_data(o, resumed);
  const seq2seq::TokenizedPairs& train_pairs = d.split.train;
  manual_seed(o.run.seed);  // model initialisation and dropout masks
  auto model = seq2seq::make_transformer(o.model);
  seq2seq::PairStream stream(train_pairs.size(), o.run.seed + 1);
  optim::Adam optimizer(model->parameters(), o.run.lr);
  optim::Scheduler scheduler(optimizer, training::make_schedule(o.run, o.model.num_hiddens));
  training::Run run(o.run, *model, optimizer, scheduler,
      [&](training::Layout& f) { describe_translate(f, o, &d); });
  run.track([&](training::Layout& f) {  // the position in the shuffled pairs
    int64_t epoch = stream.epoch(), position = stream.position();
    f.count("data.epoch", epoch);
    f.count("data.position", position);
    if (f.reading()) stream.set_position(epoch, position);
  });
  run.start(resumed);
  training::Step step(
      *model, optimizer, scheduler, o.run.batch_size, training::StepOptions::of(o.run));
  print_translation_run(o, d, *model);
  training::print_data_parallel(o.run, "pairs");
  training::Report report(o.run, run.first_step(), run.last_step());
  training::StepProfiler profiler(o.run, run.first_step(), run.last_step());  // --profile
  seq2seq::TranslationEvaluation last;

  for (int64_t t = run.first_step(); t <= run.last_step(); ++t) {
    profiler.step_begins(t);
    // The global batch of pairs (the same on every rank), of which this rank takes its rows.
    const std::vector<int64_t> indices = stream.next(o.run.batch_size);
    const dist::RowRange mine = step.rows(static_cast<int64_t>(indices.size()));
    auto batch_of = [&](int64_t first, int64_t last) {  // pairs [first, last) of the batch
      return seq2seq::translation_batch(train_pairs,
          std::vector<int64_t>(indices.begin() + first, indices.begin() + last), d.vocabs);
    };
    const data::Batch batch = batch_of(mine.begin, mine.end);
    // Rows [first, last): their cross-entropy per valid token, and their valid tokens.
    auto loss_of = [&](int64_t first, int64_t last) {
      const data::Batch rows =
          first == mine.begin && last == mine.end ? batch : batch_of(first, last);
      return std::pair{seq2seq::sequence_loss(*model, rows), sum(rows.label_valid_lens).item()};
    };
    const double batch_tokens =  // (one process: unused)
        dist::world_size() > 1 || o.run.chunk_rows > 0
            ? sum(batch_of(0, static_cast<int64_t>(indices.size())).label_valid_lens).item()
            : 0;
    const training::StepResult result = step.take(t, batch_tokens, loss_of);
    profiler.step_ends(t);
    if (result.diverged) return 1;
    report.step(
        t, result.loss, sum(batch.source_valid_lens).item() + sum(batch.label_valid_lens).item());
    if (report.evaluation_due(t) && dist::rank() == 0) {
      last = seq2seq::evaluate_translation(*model, d.split.held_out, d.vocabs, o.beam);
      print_translation_evaluation(t, last, d.split.held_out, o);
    }
    const bool stop = run.stop_requested();  // Ctrl-C: every rank after the same step
    if (run.save_due(t, stop)) run.save(t);
    if (stop) return run.interrupted_after(t);
  }
  return finish_translation(o, run, report, *model, d, last);
}

}  // namespace ag_train
