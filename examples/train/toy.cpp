// ag-train on the toy tasks (copy, reverse, sort, add): d2l's Transformer learns to map a
// sequence of digits to another. Each step: a batch of fresh examples, the encoder–decoder forward
// with teacher forcing, the masked cross-entropy per valid token, backward, clipping at --clip, an
// Adam update (training::Step). Every --eval-every steps it evaluates on a fixed held-out set
// (never trained on): the loss, the token accuracy, and the exact-sequence accuracy of greedy
// decoding, with a few decoded examples.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>

#include "data/toy_tasks.h"
#include "models/memory_budget.h"
#include "models/seq2seq_file.h"
#include "models/seq2seq_memory.h"
#include "nn/transformer.h"
#include "optim/optimizer.h"
#include "train.h"
#include "training/profile.h"
#include "training/report.h"
#include "training/step.h"
#include "viz/viz.h"

namespace ag_train {

using namespace ag;

namespace {

// The toy tasks' checkpoint entries: the shared ones, then the task and the model's sizes
// (models/seq2seq_file.h, as in a model file).
void describe_toy(training::Layout& file, Options& o) {
  describe_common(file, o);
  if (!file.reading()) return seq2seq::save_model_config(file.out(), o.task, o.model);
  o.task = file.in().string("config.task");
  o.model = seq2seq::load_model_config(file.in(), file.path());
}

// --embedding-init scaled: the encoder's and decoder's token embeddings start N(0, 1/D) instead of
// d2l's N(0, 1) — the same draws times D^(-1/2), so nothing else of the run changes. The embedding
// is multiplied by √D before the positional encoding (entries in [−1, 1]) is added: from N(0, 1)
// a token's entries are some √D = 8 times the position's at D = 64, from N(0, 1/D) the same size,
// which is what the scaling was meant for (fairseq's Transformer initialises its embeddings so).
// The add task needs where each digit is, and learns with it (docs/training.md).
void scale_embedding_init(nn::EncoderDecoder& model) {
  NoGradGuard no_grad;
  const std::vector<const nn::TransformerStack*> stacks = {
      model.encoder.get(), model.decoder.get()};
  for (const nn::TransformerStack* stack : stacks)  // weight (V, D) *= D^(-1/2)
    stack->embedding->weight.mul_(1.0 / std::sqrt(static_cast<double>(stack->num_hiddens)));
}

// The target tokens examples [first, last) are scored on: each target and its <eos>.
double valid_tokens(const std::vector<data::Example>& examples, int64_t first, int64_t last) {
  double tokens = 0;
  for (int64_t i = first; i < last; ++i)
    tokens += static_cast<double>(examples[static_cast<std::size_t>(i)].target.size()) + 1;
  return tokens;
}

void print_toy_run(const Options& o, const data::Task& task, const nn::EncoderDecoder& model) {
  const seq2seq::ModelConfig& m = o.model;
  std::printf(
      "ag-train: task %s (vocabulary %lld, %lld -> %lld steps), model %lld parameters "
      "(hidden %lld, ffn %lld, %lld heads, %lld layers, dropout %g), %lld steps of batch %lld, "
      "Adam lr %g (%s), clip %g, embeddings initialised %s, seed %llu, %d thread%s\n",
      o.task.c_str(), static_cast<long long>(m.vocab_size),
      static_cast<long long>(task.source_steps()), static_cast<long long>(task.target_steps()),
      static_cast<long long>(model.num_parameters()), static_cast<long long>(m.num_hiddens),
      static_cast<long long>(m.ffn_num_hiddens), static_cast<long long>(m.num_heads),
      static_cast<long long>(m.num_layers), m.dropout, static_cast<long long>(o.run.steps),
      static_cast<long long>(o.run.batch_size), o.run.lr, o.run.schedule.c_str(), o.run.clip,
      o.embedding_init == "scaled" ? "N(0, 1/D)" : "N(0, 1)",
      static_cast<unsigned long long>(o.run.seed), o.run.threads, o.run.threads == 1 ? "" : "s");
}

void print_toy_evaluation(int64_t step, const seq2seq::Evaluation& e, const data::Task& task,
    const std::vector<data::Example>& held_out, int64_t show) {
  std::printf(
      "eval @ step %lld: held-out loss %.4f  token accuracy %.1f%%  exact-sequence accuracy "
      "%.1f%%\n",
      static_cast<long long>(step), e.loss, 100 * e.token_accuracy, 100 * e.sequence_accuracy);
  const data::TaskVocab& vocab = task.vocab();
  for (int64_t i = 0; i < show && i < static_cast<int64_t>(held_out.size()); ++i) {
    const bool correct = e.predictions[i] == held_out[i].target;
    std::printf("  %s -> %s %s\n", vocab.to_text(held_out[i].source).c_str(),
        vocab.to_text(e.predictions[i]).c_str(),
        correct ? "\u2713"
                : ("\u2717 (expected " + vocab.to_text(held_out[i].target) + ")").c_str());
  }
  std::fflush(stdout);
}

// ---- pictures -----------------------------------------------------------------------------------

const char* const curves_header = "step,train_loss,heldout_loss,token_accuracy,sequence_accuracy";

// --curves-dir: training_curves.csv, a row per evaluation (a resumed run continues the file).
training::LogFile open_curves(const Options& o, int64_t first_step) {
  if (o.curves_dir.empty() || dist::rank() > 0) return {};
  std::filesystem::create_directories(o.curves_dir);
  return training::LogFile((std::filesystem::path(o.curves_dir) / "training_curves.csv").string(),
      "--curves-dir", curves_header, first_step);
}

void write_curves_row(
    training::LogFile& curves, int64_t step, double train_loss, const seq2seq::Evaluation& e) {
  if (!curves.is_open()) return;
  char row[160];
  std::snprintf(row, sizeof row, "%lld,%.6g,%.6g,%.6g,%.6g", static_cast<long long>(step),
      train_loss, e.loss, e.token_accuracy, e.sequence_accuracy);
  curves.row(row);
}

// training_curves.png from training_curves.csv: the losses above, the accuracies below.
void plot_curves(const std::filesystem::path& dir, const std::string& task) {
  const std::filesystem::path csv = dir / "training_curves.csv", png = dir / "training_curves.png";
  viz::LineFigure figure;
  figure.title = "ag-train, task " + task;
  figure.points = true;
  // Both panels: against the step, from 0 up.
  viz::LinePanel by_step;
  by_step.xlabel = "step";
  by_step.ymin = 0.0;
  viz::LinePanel loss = by_step, accuracy = by_step;
  loss.title = "loss (masked cross-entropy per token)";
  loss.ylabel = "loss";
  loss.curves = {{"train_loss", "training (mean since the previous evaluation)"},
      {"heldout_loss", "held-out (teacher forcing)"}};
  accuracy.title = "held-out accuracy";
  accuracy.ylabel = "accuracy";
  accuracy.curves = {{"token_accuracy", "token (teacher forcing)"},
      {"sequence_accuracy", "exact sequence (greedy decoding)"}};
  accuracy.ymax = 1.05;
  accuracy.key = "bottom right";
  figure.panels = {loss, accuracy};
  viz::plot_csv(csv.string(), png.string(), figure);
  std::printf("wrote %s and %s\n", png.c_str(), csv.c_str());
}

// One grid of heatmaps: a row of panels (one per head) for each layer of encoder self-attention,
// decoder self-attention and encoder–decoder attention; queries down, keys across, weight 0 to 1.
void write_attention_png(const std::string& path, nn::EncoderDecoder& model, const data::Task& task,
    const std::vector<data::Example>& held_out, int64_t index) {
  if (index == -1) {
    // The first of the longest sources: the most positions, the clearest pattern.
    index = 0;
    for (std::size_t i = 0; i < held_out.size(); ++i)
      if (held_out[i].source.size() > held_out[static_cast<std::size_t>(index)].source.size())
        index = static_cast<int64_t>(i);
  }
  if (index < 0 || index >= static_cast<int64_t>(held_out.size()))
    throw ValueError("--attention-example " + std::to_string(index) + " is not one of the " +
                     std::to_string(held_out.size()) + " held-out examples");
  const data::Example& example = held_out[static_cast<std::size_t>(index)];
  const seq2seq::DecodedAttention a =
      seq2seq::decode_with_attention(model, example.source, task.target_steps());
  const data::TaskVocab& vocab = task.vocab();
  auto labels = [&](const std::vector<int64_t>& ids) {
    std::vector<std::string> out;
    for (int64_t id : ids) out.push_back(vocab.token(id));
    return out;
  };
  const std::vector<std::string> source = labels(a.source), decoder = labels(a.decoder_input);
  std::vector<viz::HeatmapPanel> panels;
  auto add = [&](const std::vector<Tensor>& per_layer, const std::string& name,
                 const std::vector<std::string>& rows, const std::vector<std::string>& cols,
                 const std::string& ylabel, const std::string& xlabel) {
    for (std::size_t l = 0; l < per_layer.size(); ++l)
      for (int64_t h = 0; h < per_layer[l].size(0); ++h)
        panels.push_back(viz::attention_panel(per_layer[l].select(0, h),  // (queries, keys)
            name + " layer " + std::to_string(l) + " head " + std::to_string(h), xlabel, ylabel,
            rows, cols));
  };
  add(a.encoder, "enc", source, source, "source", "source");  // (H, Ts, Ts) per layer
  add(a.decoder_self, "dec self", decoder, decoder, "decoder in",
      "decoder in");                                                 // (H, T, T) per layer
  add(a.cross, "enc-dec", decoder, source, "decoder in", "source");  // (H, T, Ts) per layer
  const std::string decoded = vocab.to_text(example.source) + " -> " + vocab.to_text(a.prediction);
  viz::write_heatmap_grid(path, panels, static_cast<int64_t>(a.encoder[0].size(0)),
      task.name() + ", held-out example " + std::to_string(index) + ": " + decoded +
          "  (rows: queries, columns: keys)");
  std::printf("wrote %s (attention of every layer and head, held-out example %lld: %s)\n",
      path.c_str(), static_cast<long long>(index), decoded.c_str());
}

// After the last step, on rank 0: the model file, the curves, the attention, the summary.
int finish_toy(const Options& o, const training::Run& run, training::Report& report,
    training::LogFile& curves, nn::EncoderDecoder& model, const data::Task& task,
    const std::vector<data::Example>& held_out, const seq2seq::Evaluation& last) {
  const double seconds = report.seconds();
  if (dist::rank() > 0) return 0;
  if (!o.save_model.empty()) {
    training::report_removed("ag-train", seq2seq::save_model(o.save_model, model, o.task, o.model,
                                             training::checkpoint_format(o.run))
                                             .removed_temp_files);
    std::printf("saved the model to %s\n", o.save_model.c_str());
  }
  if (curves.is_open()) {  // the curves' PNG, drawn once the CSV is complete
    curves.close();
    plot_curves(o.curves_dir, o.task);
  }
  if (!o.attention_png.empty())
    write_attention_png(o.attention_png, model, task, held_out, o.attention_example);
  if (run.stopped_early()) return 0;
  std::printf(
      "done: %lld steps in %s; training loss per token (mean of the last %zu steps) %.4f; "
      "held-out exact-sequence accuracy %.1f%%\n",
      static_cast<long long>(o.run.steps), training::format_duration(seconds).c_str(),
      report.recent_steps(), report.recent_loss(), 100 * last.sequence_accuracy);
  return 0;
}

// The memory of a toy run (models/seq2seq_memory.h).
MemoryEstimate toy_estimate(const Options& o, const data::Task& task) {
  seq2seq::ModelConfig config = o.model;
  config.vocab_size = task.vocab().size();
  return seq2seq::estimate_training_bytes(config, o.run.batch_size, task.source_steps(),
      task.target_steps(), o.eval_size, !o.run.checkpoint.empty());
}

}  // namespace

// The held-out size, then the memory of the whole run (models/seq2seq_memory.h), against the limit of
// --max-memory or the memory available. "" if the run fits.
std::string toy_size_problem(const Options& o) {
  const std::unique_ptr<data::Task> task = data::make_task(o.task);
  if (o.eval_size > data::max_held_out(*task))
    return "--eval-size " + std::to_string(o.eval_size) +
           " is more than the held-out set can take: the " + o.task + " task has " +
           std::to_string(task->distinct_sources()) + " distinct sources, and at most half of " +
           "them (" + std::to_string(data::max_held_out(*task)) +
           ") are held out, so that training has sources left";
  try {
    check_memory(toy_estimate(o, *task), o.run.memory_limit,
        "this run (--num-hiddens " + std::to_string(o.model.num_hiddens) + ", --ffn-num-hiddens " +
            std::to_string(o.model.ffn_num_hiddens) + ", --layers " +
            std::to_string(o.model.num_layers) + ", --batch-size " +
            std::to_string(o.run.batch_size) + ", --eval-size " + std::to_string(o.eval_size) + ")",
        o.run.memory_limit_source);
  } catch (const ValueError& e) {
    return e.what();
  }
  return "";
}

int train_toy(Options o) {
  // --resume: the file's settings replace those that define a run.
  const std::optional<Checkpoint> resumed = resume(o, [&](auto& file) { describe_toy(file, o); });
  if (const std::string problem = resumed ? toy_size_problem(o) : ""; !problem.empty())
    throw CheckpointError("checkpoint " + o.run.resume + ": its run is refused: " + problem);
  // The task, the model and the optimizer, as d2l's train_seq2seq sets them up.
  manual_seed(o.run.seed);  // model initialisation and dropout masks
  const std::unique_ptr<data::Task> task = data::make_task(o.task);
  o.model.vocab_size = task->vocab().size();
  limit_cache_to_headroom(toy_estimate(o, *task), o.run.memory_limit);
  auto model = seq2seq::make_transformer(o.model);
  if (o.embedding_init == "scaled") scale_embedding_init(*model);  // (a resumed run loads its own)
  const std::vector<data::Example> held_out = data::held_out_set(*task, o.eval_size);
  data::TrainingStream stream(*task, held_out, o.run.seed + 1);
  optim::Adam optimizer(model->parameters(), o.run.lr);
  optim::Scheduler scheduler(optimizer, training::make_schedule(o.run, o.model.num_hiddens));
  training::Run run(o.run, *model, optimizer, scheduler, [&](auto& f) { describe_toy(f, o); });
  run.track([&](training::Layout& f) { f.generator("generator.data", stream.generator()); });
  run.start(resumed);
  training::Step step(
      *model, optimizer, scheduler, o.run.batch_size, training::StepOptions::of(o.run));
  print_toy_run(o, *task, *model);
  training::print_data_parallel(o.run, "examples");
  training::Report report(o.run, run.first_step(), run.last_step());
  training::StepProfiler profiler(o.run, run.first_step(), run.last_step());  // --profile
  training::LogFile curves = open_curves(o, run.first_step());
  seq2seq::Evaluation last;

  for (int64_t t = run.first_step(); t <= run.last_step(); ++t) {
    profiler.step_begins(t);
    // The global batch (the same on every rank), of which this rank trains on its rows.
    const std::vector<data::Example> examples = stream.next(o.run.batch_size);
    const dist::RowRange mine = step.rows(static_cast<int64_t>(examples.size()));
    auto batch_of = [&](int64_t first, int64_t last) {  // examples [first, last)
      return data::make_batch({examples.begin() + first, examples.begin() + last},
          task->source_steps(), task->target_steps());
    };
    const data::Batch batch = batch_of(mine.begin, mine.end);
    // Rows [first, last): their masked cross-entropy per valid token, and their valid tokens.
    auto loss_of = [&](int64_t first, int64_t last) {
      const data::Batch rows =
          first == mine.begin && last == mine.end ? batch : batch_of(first, last);
      return std::pair{seq2seq::sequence_loss(*model, rows), valid_tokens(examples, first, last)};
    };
    const double batch_tokens = valid_tokens(examples, 0, static_cast<int64_t>(examples.size()));
    const training::StepResult result = step.take(t, batch_tokens, loss_of);
    profiler.step_ends(t);
    if (result.diverged) return 1;
    report.step(
        t, result.loss, sum(batch.source_valid_lens).item() + sum(batch.label_valid_lens).item());
    if (report.evaluation_due(t) && dist::rank() == 0) {
      last = seq2seq::evaluate(*model, *task, held_out);
      print_toy_evaluation(t, last, *task, held_out, o.show);
      write_curves_row(curves, t, report.take_train_loss(), last);
    }
    const bool stop = run.stop_requested();  // Ctrl-C: every rank after the same step
    if (run.save_due(t, stop)) run.save(t);
    if (stop) return run.interrupted_after(t);
  }
  return finish_toy(o, run, report, curves, *model, *task, held_out, last);
}

}  // namespace ag_train
