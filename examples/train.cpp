// ag-train — trains a d2l Transformer on a toy sequence task and shows it learning; or d2l's
// translator on sentence pairs (--task translate), or a language model on text (--task lm).
//
//   ag-train                                   # reverse, the default model: ~100% exact sequences
//   ag-train --task sort --steps 4000
//   ag-train --task translate [--pairs fra.txt]   # BLEU of greedy and beam search (docs/text.md)
//   ag-train --task lm [--text FILE...]        # Debian's fortunes by default; then ag-generate
//   ag-train --checkpoint run.agc              # saves each --checkpoint-every steps and at the end
//   ag-train --resume run.agc                  # continues exactly where run.agc stopped
//   ag-train --save-model reverse.agm          # a model-only file for ag-predict
//   ag-train --curves-dir out                  # out/training_curves.csv and .png (gnuplot)
//   ag-train --attention-png attention.png     # attention heatmaps of a decoded held-out example
//   mpirun -np 2 ag-train                      # data-parallel on 2 processes (docs/distributed.md)
//   ag-train --help
//
// Each step: a batch of fresh examples, the encoder–decoder forward with teacher forcing, the
// masked cross-entropy per valid token, backward, gradient clipping at --clip, an Adam update.
// Every --eval-every steps it evaluates on a fixed held-out set (never trained on): the loss, the
// token accuracy, and the exact-sequence accuracy of greedy decoding, with a few decoded examples.
// Ctrl-C stops after the current step and, with --checkpoint, saves first.
//
// The file reads as three programs sharing their options, checkpoints and reports: train() for
// the toy tasks, train_translate() and train_lm(); main() parses the options and picks one.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <charconv>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>

#include "data/synthetic_pairs.h"
#include "data/text_corpus.h"
#include "io/file.h"
#include "io/optimizer_state.h"
#include "io/output_path.h"
#include "models/lm.h"
#include "models/lm_file.h"
#include "models/memory_budget.h"
#include "models/seq2seq.h"
#include "models/seq2seq_file.h"
#include "models/seq2seq_memory.h"
#include "models/seq2seq_translation.h"
#include "nn/transformer.h"
#include "optim/optimizer.h"
#include "optim/schedule.h"
#include "viz/viz.h"
#ifdef AG_HAVE_DISTRIBUTED
#include "distributed/distributed.h"  // mpirun -np N ag-train ...: data-parallel training
#endif

namespace {

using namespace ag;
using Clock = std::chrono::steady_clock;

// The defaults train the reverse task to 100% held-out exact-sequence accuracy (seeds 0–2, 44–46 s
// on one core of the machine in docs/training.md). They differ from d2l's chapter setting (32
// wide, FFN 64, dropout 0.1, constant lr 0.005, 2000 steps — which reaches about 50%, in PyTorch
// as in ag; see docs/training.md): twice the width, a wider FFN, no dropout (every batch is fresh
// data, so there is nothing to overfit) and a warm-up + cosine schedule.
seq2seq::ModelConfig default_model() {
  seq2seq::ModelConfig model;
  model.num_hiddens = 64;
  model.ffn_num_hiddens = 256;
  model.num_heads = 4;
  model.num_layers = 2;
  model.dropout = 0.0;
  return model;
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

struct Options {
  // What defines the run (saved in checkpoints; a resumed run takes them from the file).
  std::string task = "reverse";
  int64_t steps = 2500;
  int64_t batch_size = 64;
  double lr = 0.002;
  double clip = 1.0;
  std::string schedule = "cosine";  // constant | cosine | noam
  int64_t warmup = 0;               // 0: min(200, steps / 10)
  seq2seq::ModelConfig model = default_model();
  // normal | scaled: the token embeddings' initialisation (scale_embedding_init); the add task's
  // default is scaled (toy_task_defaults).
  std::string embedding_init = "normal";
  uint64_t seed = 0;
  int64_t eval_size = 500;
  // 0: a step's gradient from this rank's rows at once; C > 0: chunk by chunk, the same bits on
  // any world size whose ranks hold whole chunks (parallel::DataParallel).
  int64_t chunk_rows = 0;
  // How this invocation runs and reports.
  int threads = 1;
  int64_t eval_every = 500;
  int64_t show = 4;  // decoded examples printed at each evaluation
  std::string checkpoint;
  int64_t checkpoint_every = 0;  // 0: at each evaluation
  int64_t keep = 0;              // numbered copies PATH.step-N kept besides PATH
  std::string checkpoint_format = "binary";
  std::string resume;
  int64_t stop_after = 0;  // 0: run to --steps
  std::string loss_log;
  std::string save_model;
  std::string curves_dir;     // training_curves.csv (a row per evaluation) and training_curves.png
  std::string attention_png;  // at the end: the attention weights of one decoded held-out example
  int64_t attention_example = -1;  // -1: the first held-out example of the longest source
  bool skip_nonfinite = false;     // skip a step whose loss or gradient norm is NaN or ±inf
  bool oversubscribe = false;      // under mpirun: allow ranks × --threads above the cores
  std::string max_memory;          // "4G": the memory limit; "" — what the machine has available
  uint64_t memory_limit = 0;       // in bytes, from --max-memory or what is available
  std::string memory_limit_source;
  // --task translate (d2l's machine translation; the defaults: translate_defaults).
  std::string pairs;                // d2l's fra.txt format; "": the generated corpus
  int64_t generated_pairs = 20000;  // pairs of the generated corpus (data/synthetic_pairs.h)
  std::string write_pairs;          // write the generated corpus to this file, and stop
  int64_t num_steps = 10, min_freq = 2;
  int64_t beam = 4;  // the beam width of the evaluation (0: greedy only)
};

// The largest --batch-size: sizes are bounded before anything is multiplied or allocated.
constexpr int64_t kMaxBatchSize = int64_t{1} << 20;

std::atomic<bool> interrupted{false};
extern "C" void on_interrupt(int) { interrupted = true; }

std::string format_duration(double seconds) {
  const int64_t s = static_cast<int64_t>(seconds + 0.5);
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%lld:%02lld", static_cast<long long>(s / 60),
      static_cast<long long>(s % 60));
  return buffer;
}

void print_evaluation(int64_t step, const seq2seq::Evaluation& e, const data::Task& task,
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

// training_curves.png from training_curves.csv: the losses above, the accuracies below.
void plot_curves(const std::filesystem::path& dir, const std::string& task) {
  const std::filesystem::path csv = dir / "training_curves.csv", png = dir / "training_curves.png";
  viz::LineFigure figure;
  figure.title = "ag-train, task " + task;
  figure.points = true;
  figure.panels.push_back({.title = "loss (masked cross-entropy per token)",
      .xlabel = "step",
      .ylabel = "loss",
      .curves = {{"train_loss", "training (mean since the previous evaluation)"},
          {"heldout_loss", "held-out (teacher forcing)"}},
      .ymin = 0.0,
      .ymax = std::nullopt,
      .key = "top right"});
  figure.panels.push_back({.title = "held-out accuracy",
      .xlabel = "step",
      .ylabel = "accuracy",
      .curves = {{"token_accuracy", "token (teacher forcing)"},
          {"sequence_accuracy", "exact sequence (greedy decoding)"}},
      .ymin = 0.0,
      .ymax = 1.05,
      .key = "bottom right"});
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
        panels.push_back({per_layer[l].select(0, h),  // (queries, keys) of head h
            {.title = name + " layer " + std::to_string(l) + " head " + std::to_string(h),
                .xlabel = xlabel,
                .ylabel = ylabel,
                .row_labels = rows,
                .col_labels = cols,
                .cell = 20,
                .font_scale = 1,
                .vmin = 0.0,
                .vmax = 1.0,
                .colorbar = true}});
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

// ---- sizes: what the run allocates, bounded before anything is built ----------------------------

// The batch and held-out sizes, then the memory of the whole run (models/memory.h), against the
// limit of --max-memory or the memory available. The same checks run for the options of the
// command line and for those of a checkpoint being resumed. "" if the run fits.
std::string size_problem(const Options& o) {
  if (o.batch_size > kMaxBatchSize)
    return "--batch-size " + std::to_string(o.batch_size) + " is above the largest batch, " +
           std::to_string(kMaxBatchSize);
  if (o.task == seq2seq::kTranslateTask) return "";  // the vocabularies first: train_translate
  const std::unique_ptr<data::Task> task = data::make_task(o.task);
  if (o.eval_size > data::max_held_out(*task))
    return "--eval-size " + std::to_string(o.eval_size) +
           " is more than the held-out set can take: the " + o.task + " task has " +
           std::to_string(task->distinct_sources()) + " distinct sources, and at most half of " +
           "them (" + std::to_string(data::max_held_out(*task)) +
           ") are held out, so that training has sources left";
  seq2seq::ModelConfig config = o.model;
  config.vocab_size = task->vocab().size();
  const MemoryEstimate need = seq2seq::estimate_training_bytes(config, o.batch_size,
      task->source_steps(), task->target_steps(), o.eval_size, !o.checkpoint.empty());
  try {
    check_memory(need, o.memory_limit,
        "this run (--num-hiddens " + std::to_string(o.model.num_hiddens) + ", --ffn-num-hiddens " +
            std::to_string(o.model.ffn_num_hiddens) + ", --layers " +
            std::to_string(o.model.num_layers) + ", --batch-size " + std::to_string(o.batch_size) +
            ", --eval-size " + std::to_string(o.eval_size) + ")",
        o.memory_limit_source);
  } catch (const ValueError& e) {
    return e.what();
  }
  return "";
}

// A save removed temporary files that earlier, killed saves had left: say so, once per save.
void report_removed(const std::vector<std::string>& removed) {
  if (removed.empty()) return;
  std::string list;
  for (const std::string& path : removed) list += (list.empty() ? "" : ", ") + path;
  std::fprintf(stderr, "ag-train: removed %zu temporary file%s left by interrupted saves: %s\n",
      removed.size(), removed.size() == 1 ? "" : "s", list.c_str());
}

// ---- checkpoints: the run's definition and state ------------------------------------------------

void save_options(Checkpoint& c, const Options& o) {
  c.integers["config.steps"] = static_cast<uint64_t>(o.steps);
  c.integers["config.batch_size"] = static_cast<uint64_t>(o.batch_size);
  c.reals["config.lr"] = o.lr;
  c.reals["config.clip"] = o.clip;
  c.strings["config.schedule"] = o.schedule;
  c.integers["config.warmup"] = static_cast<uint64_t>(o.warmup);
  c.integers["config.seed"] = o.seed;
  c.integers["config.eval_size"] = static_cast<uint64_t>(o.eval_size);
  c.integers["config.threads"] = static_cast<uint64_t>(o.threads);
  // Only a run that did not start as d2l's has it (add's default): the other runs' checkpoints,
  // translate's and lm's among them, stay as they were, and a file without it began "normal".
  if (o.embedding_init != "normal") c.strings["config.embedding_init"] = o.embedding_init;
  if (o.chunk_rows > 0) c.integers["config.chunk_rows"] = static_cast<uint64_t>(o.chunk_rows);
}

// --chunk-rows of a saved run (0 when the file has none: the run did not chunk).
int64_t saved_chunk_rows(const Checkpoint& c) {
  return c.integers.count("config.chunk_rows")
             ? static_cast<int64_t>(c.integer("config.chunk_rows"))
             : 0;
}

// The run-defining options of a checkpoint, over this invocation's reporting options.
Options options_from(const Checkpoint& c, Options o) {
  o.task = c.string("config.task");
  o.model = seq2seq::load_model_config(c, o.resume);
  o.steps = static_cast<int64_t>(c.integer("config.steps"));
  o.batch_size = static_cast<int64_t>(c.integer("config.batch_size"));
  o.lr = c.real("config.lr");
  o.clip = c.real("config.clip");
  o.schedule = c.string("config.schedule");
  o.warmup = static_cast<int64_t>(c.integer("config.warmup"));
  o.seed = c.integer("config.seed");
  o.eval_size = static_cast<int64_t>(c.integer("config.eval_size"));
  o.chunk_rows = saved_chunk_rows(c);
  // Without the entry the run began as d2l's (as every run did before --embedding-init).
  o.embedding_init =
      c.strings.count("config.embedding_init") ? c.string("config.embedding_init") : "normal";
  if (o.steps <= 0 || o.batch_size <= 0 || o.eval_size <= 0 || o.warmup <= 0 ||
      (o.schedule != "constant" && o.schedule != "cosine" && o.schedule != "noam") ||
      (o.embedding_init != "normal" && o.embedding_init != "scaled"))
    throw CheckpointError(
        "checkpoint " + o.resume + ": the saved run configuration is inconsistent");
  // The sizes that allocate, as for the command line's options.
  if (const std::string problem = size_problem(o); !problem.empty())
    throw CheckpointError("checkpoint " + o.resume + ": its run is refused: " + problem);
  const uint64_t saved_threads = c.integer("config.threads");
  if (saved_threads != static_cast<uint64_t>(o.threads))
    std::printf(
        "note: the run was saved with %llu thread(s) and continues with %d; the result may differ "
        "in "
        "the last bits from an uninterrupted run\n",
        static_cast<unsigned long long>(saved_threads), o.threads);
  return o;
}

// --resume: the checked file, and the options it defines over this invocation's.
Checkpoint load_run(Options& o) {
  Checkpoint c = load_checkpoint(o.resume);  // the whole file is checked before anything is used
  if (c.kind != "ag-train")
    throw CheckpointError("checkpoint " + o.resume + ": holds a '" + c.kind +
                          "', not an ag-train run (a model file cannot be resumed)");
  o = options_from(c, o);
  return c;
}

void put_generator(Checkpoint& c, const std::string& name, const GeneratorState& s) {
  c.integers["generator." + name + ".seed"] = s.seed;
  c.integers["generator." + name + ".offset"] = s.offset;
}
GeneratorState get_generator(const Checkpoint& c, const std::string& name) {
  return {c.integer("generator." + name + ".seed"), c.integer("generator." + name + ".offset")};
}

// ---- data-parallel training: mpirun -np N ag-train ... -------------------------------------------
//
// Under mpirun (with ag built against MPI: ag::distributed), every rank builds the same model from
// the same seed and draws the same global batches from the same seeded stream, then trains on its
// own rows of each (dist::rows_of_rank). DistributedDataParallel averages the gradients while
// backward runs, so that every rank takes the same step: the step one process takes on the whole
// batch, up to the order of the floating-point sums. Dropout masks differ by rank (each rank's
// stream is seeded by dist::rank_seed). Rank 0 alone prints, evaluates and writes files; the
// others wait for it at the next all-reduce, or at the barrier after a checkpoint.
// docs/distributed.md has the commands and what to expect.
namespace parallel {
#ifdef AG_HAVE_DISTRIBUTED
int rank() { return dist::rank(); }
int world() { return dist::world_size(); }
double sum(double value) { return dist::all_reduce_sum(value); }
int64_t sum(int64_t value) { return dist::all_reduce_sum(value); }
bool any(bool flag) { return dist::all_reduce_max(int64_t{flag}) != 0; }
void barrier() { dist::barrier(); }
[[noreturn]] void abort_job(const std::string& message, int exit_code) {
  dist::abort("ag-train", message, exit_code);
}
// Why --threads on this many ranks per machine would oversubscribe its cores ("" if it fits).
std::string thread_budget_problem(int threads, bool oversubscribe) {
  try {
    dist::check_thread_budget(threads, oversubscribe);
    return "";
  } catch (const dist::DistributedError& e) {
    return std::string("--threads ") + std::to_string(threads) + " under mpirun: " + e.what();
  }
}
uint64_t rank_seed(uint64_t seed, int rank) { return dist::rank_seed(seed, rank); }
std::pair<int64_t, int64_t> rows_of_rank(int64_t rows) {
  const dist::RowRange range = dist::rows_of_rank(rows, rank(), world());
  return {range.begin, range.end};
}
#else  // built without MPI: always a single process
int rank() { return 0; }
int world() { return 1; }
double sum(double value) { return value; }
int64_t sum(int64_t value) { return value; }
bool any(bool flag) { return flag; }
void barrier() {}
[[noreturn]] void abort_job(const std::string&, int exit_code) { std::exit(exit_code); }
std::string thread_budget_problem(int, bool) { return ""; }
uint64_t rank_seed(uint64_t seed, int) { return seed; }
std::pair<int64_t, int64_t> rows_of_rank(int64_t rows) { return {0, rows}; }
#endif

// The target tokens a batch of examples is scored on: each target and its <eos>.
double valid_tokens(const std::vector<data::Example>& examples) {
  double tokens = 0;
  for (const data::Example& example : examples)
    tokens += static_cast<double>(example.target.size()) + 1;
  return tokens;
}

// The loss of this rank's rows, weighted so that the average over the ranks of the weighted
// losses is the loss of the whole global batch: a loss that is the mean over this rank's
// `my_weight` (valid tokens) of the global batch's `global_weight` becomes
//   loss · my_weight · N / global_weight,   and   (1/N) Σ_r loss_r · w_r · N / W = Σ_r loss_r w_r / W.
Tensor weighted_for_average(const Tensor& loss, double my_weight, double global_weight) {
  if (world() == 1) return loss;
  return loss * (my_weight * world() / global_weight);
}

// Why --chunk-rows cannot cut this world's share of a batch into whole chunks ("" if it can).
std::string chunk_problem(int64_t batch_size, int64_t chunk_rows) {
  if (chunk_rows == 0) return "";
#ifdef AG_HAVE_DISTRIBUTED
  for (int r = 0; r < world(); ++r) {
    const int64_t rows = dist::rows_of_rank(batch_size, r, world()).size();
    if (rows % chunk_rows != 0)
      return "--chunk-rows " + std::to_string(chunk_rows) + " does not divide the " +
             std::to_string(rows) + " rows of rank " + std::to_string(r) + " (--batch-size " +
             std::to_string(batch_size) + " on " + std::to_string(world()) +
             " rank(s)): every rank's rows must be whole chunks";
  }
  return "";
#else
  (void)batch_size;
  return "--chunk-rows needs ag built with MPI (ag::distributed; scripts/install-deps.sh "
         "installs OpenMPI)";
#endif
}

// The mean loss of global rows [first, last) of the step's batch, and their weight in the batch
// (valid tokens, or rows when every row weighs the same).
using LossOfRows = std::function<std::pair<Tensor, double>(int64_t first, int64_t last)>;

// How a step's gradient is made from this rank's rows of the global batch.
//   By default, from all of them at once; under mpirun DistributedDataParallel averages the
//   ranks' gradients while backward runs.
//   With --chunk-rows C, chunk by chunk (dist::ChunkedGradientSum): each chunk of C rows has its
//   own forward and backward, and the chunks' gradients are added in their global order. Every
//   world size whose ranks hold whole chunks (one process included) then trains the same model,
//   bit for bit, when dropout is 0 (docs/distributed.md, "Bit for bit").
class DataParallel {
 public:
  DataParallel(nn::Module& model, int64_t batch_size, int64_t chunk_rows)
      : chunk_rows_(chunk_rows) {
    if (const std::string problem = chunk_problem(batch_size, chunk_rows); !problem.empty())
      throw ValueError(problem);
#ifdef AG_HAVE_DISTRIBUTED
    if (chunk_rows > 0)
      chunks_ = std::make_unique<dist::ChunkedGradientSum>(model);
    else if (world() > 1)
      ddp_ = std::make_unique<dist::DistributedDataParallel>(model);
#else
    (void)model;
#endif
  }

  // The gradient of the global batch's loss into the parameters' .grad (on every rank), from
  // this rank's rows [begin, end); global_weight is the whole batch's weight. Returns the batch's
  // loss.
  double backward(int64_t begin, int64_t end, double global_weight, const LossOfRows& loss_of) {
#ifdef AG_HAVE_DISTRIBUTED
    if (chunks_) {
      for (int64_t first = begin; first < end; first += chunk_rows_) {
        auto [loss, weight] = loss_of(first, first + chunk_rows_);
        loss = loss * (weight / global_weight);  // the chunk's share of the batch's loss
        loss.backward();
        chunks_->add_chunk(loss.item());
      }
      return chunks_->finish();  // Σ in chunk order, the same on every rank
    }
#endif
    auto [loss, weight] = loss_of(begin, end);
    loss = weighted_for_average(loss, weight, global_weight);
    loss.backward();  // frees the graph (under mpirun: and averages the gradients)
    return sum(loss.item()) / world();
  }

 private:
  int64_t chunk_rows_;
#ifdef AG_HAVE_DISTRIBUTED
  std::unique_ptr<dist::DistributedDataParallel> ddp_;
  std::unique_ptr<dist::ChunkedGradientSum> chunks_;
#endif
};

// The dropout generator of this rank: rank 0 keeps the seed's stream; rank r > 0 switches to
// its own seed (rank_seed) at the same offset, after the model is built (so that every rank
// initialises the same weights) and after a resume has restored rank 0's state. A checkpoint
// written with the same world size holds every rank's state and restores it exactly.
void use_rank_dropout_stream(const std::optional<Checkpoint>& resumed) {
  if (world() == 1 || rank() == 0) return;
  const std::string mine = "generator.default.rank" + std::to_string(rank());
  if (resumed && resumed->integers.count("data_parallel.world_size") &&
      resumed->integer("data_parallel.world_size") == static_cast<uint64_t>(world())) {
    default_generator().set_state(
        {resumed->integer(mine + ".seed"), resumed->integer(mine + ".offset")});
    return;
  }
  const GeneratorState state = default_generator().state();
  default_generator().set_state({rank_seed(state.seed, rank()), state.offset});
}

// Every rank's dropout generator into rank 0's checkpoint (a collective: every rank calls it).
void put_rank_generators(Checkpoint& c) {
  if (world() == 1) return;
  c.integers["data_parallel.world_size"] = static_cast<uint64_t>(world());
  const GeneratorState mine = default_generator().state();
  for (int r = 1; r < world(); ++r) {
    // Only rank r contributes, so each sum is rank r's value, exactly (two's complement).
    const auto seed = static_cast<uint64_t>(sum(rank() == r ? static_cast<int64_t>(mine.seed) : 0));
    const auto offset =
        static_cast<uint64_t>(sum(rank() == r ? static_cast<int64_t>(mine.offset) : 0));
    c.integers["generator.default.rank" + std::to_string(r) + ".seed"] = seed;
    c.integers["generator.default.rank" + std::to_string(r) + ".offset"] = offset;
  }
}

// What the run's first lines say under mpirun, and with --chunk-rows.
void print_data_parallel(int64_t global_batch, int64_t chunk_rows, const char* unit) {
  if (world() > 1) {
    const auto [begin, end] = rows_of_rank(global_batch);
    std::printf(
        "data-parallel on %d ranks (mpirun): each takes %lld of the %lld %s of every batch (rank "
        "0: rows %lld-%lld) and the gradients are averaged over the ranks; rank 0 prints, "
        "evaluates and saves\n",
        world(), static_cast<long long>(end - begin), static_cast<long long>(global_batch), unit,
        static_cast<long long>(begin), static_cast<long long>(end - 1));
  }
  if (chunk_rows > 0)
    std::printf(
        "gradients chunk by chunk (--chunk-rows %lld): %lld chunks of %lld %s a batch, each with "
        "its own forward and backward, added in their order — the same bits on any number of "
        "ranks that hold whole chunks\n",
        static_cast<long long>(chunk_rows), static_cast<long long>(global_batch / chunk_rows),
        static_cast<long long>(chunk_rows), unit);
}

// A run that failed: exit code 1. Under mpirun the whole job ends at once, naming this rank,
// instead of leaving the other ranks waiting for it in their next all-reduce.
int run_failed(const std::string& message) {
  if (world() > 1) abort_job(message, 1);
  std::cerr << "\nag-train: " << message << "\n";
  return 1;
}
}  // namespace parallel

// Everything the next step depends on: weights, Adam's moments and step counts, the schedule's
// position, the dropout generator and the data stream. Returns the step to continue with.
int64_t restore_run(const Checkpoint& c, const Options& o, nn::EncoderDecoder& model,
    optim::Optimizer& optimizer, optim::Scheduler& scheduler, data::TrainingStream& stream) {
  model.load_state_dict(c.tensors_under("model"));
  optimizer.load_state_dict(get_optimizer_state(c, "optimizer"));
  const uint64_t step = c.integer("step");
  if (step >= static_cast<uint64_t>(o.steps))
    throw CheckpointError("checkpoint " + o.resume + ": the run already finished (step " +
                          std::to_string(step) + ")");
  scheduler.set_step(static_cast<int64_t>(c.integer("scheduler.step")));
  default_generator().set_state(get_generator(c, "default"));
  stream.generator().set_state(get_generator(c, "data"));
  std::printf("resuming %s at step %lld of %lld\n", o.resume.c_str(),
      static_cast<long long>(step + 1), static_cast<long long>(o.steps));
  return static_cast<int64_t>(step) + 1;
}

CheckpointFormat checkpoint_format(const Options& o) {
  return o.checkpoint_format == "json" ? CheckpointFormat::json : CheckpointFormat::binary;
}

void write_run(const Checkpoint& c, int64_t step, const Options& o);

// Saves the run after `step` to --checkpoint (atomically) and, with --keep K, a numbered copy
// PATH.step-NNNNNNNN of which only the newest K are kept.
void save_run(int64_t step, const Options& o, const seq2seq::ModelConfig& config,
    const nn::EncoderDecoder& model, const optim::Optimizer& optimizer,
    const optim::Scheduler& scheduler, data::TrainingStream& stream) {
  if (o.checkpoint.empty()) return;
  Checkpoint c;
  c.kind = "ag-train";
  for (const auto& [name, t] : model.state_dict()) c.tensors["model." + name] = t;
  put_optimizer_state(c, optimizer.state_dict(), "optimizer");
  seq2seq::save_model_config(c, o.task, config);
  save_options(c, o);
  c.integers["step"] = static_cast<uint64_t>(step);
  c.integers["scheduler.step"] = static_cast<uint64_t>(scheduler.current_step());
  put_generator(c, "default", default_generator().state());
  put_generator(c, "data", stream.generator().state());
  parallel::put_rank_generators(c);
  if (parallel::rank() == 0) write_run(c, step, o);
  parallel::barrier();  // the file is complete before any rank goes on
}

// Writes a run's checkpoint to --checkpoint and, with --keep, its numbered copy (both tasks).
void write_run(const Checkpoint& c, int64_t step, const Options& o) {
  const SaveOptions save_options{checkpoint_format(o), {}};
  report_removed(save_checkpoint(c, o.checkpoint, save_options).removed_temp_files);
  if (o.keep == 0) return;
  char suffix[32];
  std::snprintf(suffix, sizeof suffix, ".step-%08lld", static_cast<long long>(step));
  report_removed(save_checkpoint(c, o.checkpoint + suffix, save_options).removed_temp_files);
  namespace fs = std::filesystem;
  const fs::path target(o.checkpoint);
  const fs::path folder = target.has_parent_path() ? target.parent_path() : fs::path(".");
  const std::string stem = target.filename().string() + ".step-";
  std::vector<fs::path> copies;
  std::set<fs::path> with_temp_files;  // copies whose saves may have been killed
  for (const auto& entry : fs::directory_iterator(folder)) {
    const std::string name = entry.path().filename().string();
    const bool numbered = name.rfind(stem, 0) == 0 && name.size() >= stem.size() + 8 &&
                          name.find_first_not_of("0123456789", stem.size()) >= stem.size() + 8;
    if (numbered && name.size() == stem.size() + 8) copies.push_back(entry.path());
    if (numbered && name.compare(stem.size() + 8, 5, ".tmp-") == 0)
      with_temp_files.insert(folder / name.substr(0, stem.size() + 8));
  }
  // A copy is saved once, so the save to its own path never comes again to clean up after it.
  for (const fs::path& copy : with_temp_files)
    report_removed(remove_stale_temp_files(copy.string()));
  std::sort(copies.begin(), copies.end());
  for (std::size_t i = 0; i + static_cast<std::size_t>(o.keep) < copies.size(); ++i)
    fs::remove(copies[i]);
}

// ---- the learning-rate schedule -----------------------------------------------------------------

optim::Schedule make_schedule(const Options& o, const seq2seq::ModelConfig& config) {
  if (o.schedule == "cosine") return optim::cosine_with_warmup(o.warmup, o.steps, 0.0);
  // The paper's schedule, rescaled so that its peak (at the end of warm-up) is --lr.
  if (o.schedule == "noam")
    return [base = optim::transformer_schedule(config.num_hiddens, o.warmup), w = o.warmup](
               int64_t t) { return base(t) / base(w); };
  return [](int64_t) { return 1.0; };
}

// ---- reporting ----------------------------------------------------------------------------------

// --loss-log: a CSV file of "step,loss" rows, the loss as a hexadecimal float (exact). A resumed
// run appends to the file of the run it resumes.
std::ofstream open_loss_log(const std::string& path, bool resumed) {
  std::ofstream log(path, resumed ? std::ios::app : std::ios::trunc);
  if (!log) throw IoError("cannot open --loss-log " + path);
  if (!resumed) log << "step,loss\n";
  return log;
}
// One row, flushed (one write a step): `tail -f` follows the run, and a run that is killed keeps
// every step it logged, so a resume from its last checkpoint continues the file.
void write_loss_row(std::ofstream& log, int64_t step, double loss) {
  log << step << ',' << std::hexfloat << loss << std::defaultfloat << '\n' << std::flush;
}

// What the run prints and logs: the progress line (rewritten in place on a terminal, every 100
// steps otherwise), --loss-log's row per step, the evaluations with a few decoded examples,
// --curves-dir's row per evaluation, and the final summary.
class Report {
 public:
  Report(const Options& o, int64_t first_step, int64_t last_step, bool resumed)
      : o_(o), first_step_(first_step), last_step_(last_step), terminal_(isatty(STDOUT_FILENO)) {
    if (parallel::rank() > 0) return;  // under mpirun, rank 0 alone writes the logs
    if (!o.loss_log.empty()) loss_log_ = open_loss_log(o.loss_log, resumed);
    if (!o.curves_dir.empty()) {
      namespace fs = std::filesystem;
      fs::create_directories(o.curves_dir);
      const fs::path path = fs::path(o.curves_dir) / "training_curves.csv";
      // A resumed run continues the file of the run it resumes (as --loss-log does).
      const bool append = resumed && fs::exists(path) && fs::file_size(path) > 0;
      curves_.open(path, append ? std::ios::app : std::ios::trunc);
      if (!curves_) throw IoError("cannot open " + path.string() + " (--curves-dir)");
      if (!append) curves_ << curves_header << '\n';
    }
  }

  void step(int64_t step, double loss, const data::Batch& batch, bool evaluate_now) {
    if (loss_log_.is_open()) write_loss_row(loss_log_, step, loss);
    // Under mpirun, the tokens of every rank's rows (a collective: every rank calls step).
    tokens_ +=
        parallel::sum(sum(batch.source_valid_lens).item() + sum(batch.label_valid_lens).item());
    loss_since_report_ += loss;
    ++steps_since_report_;
    loss_since_evaluation_ += loss;
    ++steps_since_evaluation_;
    recent_losses_.push_back(loss);
    if (recent_losses_.size() > 100) recent_losses_.erase(recent_losses_.begin());
    const double elapsed = seconds();
    const double eta = elapsed / static_cast<double>(step - first_step_ + 1) *
                       static_cast<double>(last_step_ - step);
    if (terminal_) {
      // One live line, rewritten in place.
      std::printf("\rstep %lld/%lld  loss %.4f  %.0f tokens/s  ETA %s   ",
          static_cast<long long>(step), static_cast<long long>(o_.steps), loss, tokens_ / elapsed,
          format_duration(eta).c_str());
      if (evaluate_now) std::printf("\n");
      std::fflush(stdout);
    } else if (step % 100 == 0 || evaluate_now) {
      std::printf("step %lld/%lld  loss %.4f  %.0f tokens/s  ETA %s\n",
          static_cast<long long>(step), static_cast<long long>(o_.steps),
          loss_since_report_ / static_cast<double>(steps_since_report_), tokens_ / elapsed,
          format_duration(eta).c_str());
      loss_since_report_ = 0;
      steps_since_report_ = 0;
      std::fflush(stdout);
    }
  }

  void evaluation(int64_t step, const seq2seq::Evaluation& e, const data::Task& task,
      const std::vector<data::Example>& held_out) {
    last_evaluation_ = e;
    print_evaluation(step, e, task, held_out, o_.show);
    if (curves_.is_open()) {
      char row[160];
      std::snprintf(row, sizeof row, "%lld,%.6g,%.6g,%.6g,%.6g\n", static_cast<long long>(step),
          loss_since_evaluation_ / static_cast<double>(steps_since_evaluation_), e.loss,
          e.token_accuracy, e.sequence_accuracy);
      curves_ << row << std::flush;
    }
    loss_since_evaluation_ = 0;
    steps_since_evaluation_ = 0;
  }

  // The curves' PNG, drawn once the CSV is complete.
  void plot() {
    if (!curves_.is_open()) return;
    curves_.close();
    plot_curves(o_.curves_dir, o_.task);
  }

  void summary(double seconds) const {
    double recent = 0;
    for (double l : recent_losses_) recent += l;
    if (!recent_losses_.empty()) recent /= static_cast<double>(recent_losses_.size());
    std::printf(
        "done: %lld steps in %s; training loss per token (mean of the last %zu steps) %.4f; "
        "held-out exact-sequence accuracy %.1f%%\n",
        static_cast<long long>(o_.steps), format_duration(seconds).c_str(), recent_losses_.size(),
        recent, 100 * last_evaluation_.sequence_accuracy);
  }

  double seconds() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }

 private:
  const Options& o_;
  int64_t first_step_, last_step_;
  bool terminal_;
  Clock::time_point start_ = Clock::now();
  std::ofstream loss_log_, curves_;
  double tokens_ = 0, loss_since_report_ = 0, loss_since_evaluation_ = 0;
  int64_t steps_since_report_ = 0, steps_since_evaluation_ = 0;
  std::vector<double> recent_losses_;  // the last 100 steps' losses, for the final summary
  seq2seq::Evaluation last_evaluation_;
};

void print_run(const Options& o, const seq2seq::ModelConfig& config, const data::Task& task,
    const nn::EncoderDecoder& model) {
  std::printf(
      "ag-train: task %s (vocabulary %lld, %lld -> %lld steps), model %lld parameters "
      "(hidden %lld, ffn %lld, %lld heads, %lld layers, dropout %g), %lld steps of batch %lld, "
      "Adam lr %g (%s), clip %g, embeddings initialised %s, seed %llu, %d thread%s\n",
      o.task.c_str(), static_cast<long long>(config.vocab_size),
      static_cast<long long>(task.source_steps()), static_cast<long long>(task.target_steps()),
      static_cast<long long>(model.num_parameters()), static_cast<long long>(config.num_hiddens),
      static_cast<long long>(config.ffn_num_hiddens), static_cast<long long>(config.num_heads),
      static_cast<long long>(config.num_layers), config.dropout, static_cast<long long>(o.steps),
      static_cast<long long>(o.batch_size), o.lr, o.schedule.c_str(), o.clip,
      o.embedding_init == "scaled" ? "N(0, 1/D)" : "N(0, 1)",
      static_cast<unsigned long long>(o.seed), o.threads, o.threads == 1 ? "" : "s");
}

// ---- what every task's loop shares ---------------------------------------------------------------

// The step after which this invocation stops: --stop-after, or the run's last.
int64_t last_step_of(const Options& o, int64_t first_step) {
  const int64_t last_step = o.stop_after > 0 ? std::min(o.stop_after, o.steps) : o.steps;
  if (last_step < first_step)
    throw ValueError("--stop-after " + std::to_string(o.stop_after) +
                     " is before the resumed run's next step " + std::to_string(first_step));
  return last_step;
}

// After backward: clips the gradients at --clip and updates the weights. A NaN or infinite loss
// or gradient norm means the run has diverged, and every later step would only spread the NaN
// through the weights: stop before the update, so that the last checkpoint saved is the last good
// state — exit code 1 (a runtime failure, docs/training.md) — or, with --skip-nonfinite-steps,
// skip this update. Returns the exit code when the run must stop.
std::optional<int> clip_and_update(
    int64_t step, double loss, nn::Module& model, optim::Optimizer& optimizer, const Options& o) {
  const double grad_norm = optim::clip_grad_norm(model.parameters(), o.clip);
  if (std::isfinite(loss) && std::isfinite(grad_norm)) {
    optimizer.step();
    return std::nullopt;
  }
  if (o.skip_nonfinite) {
    std::fprintf(stderr, "\nag-train: step %lld skipped: loss %g, gradient norm %g\n",
        static_cast<long long>(step), loss, grad_norm);
    return std::nullopt;
  }
  std::fprintf(stderr,
      "\nag-train: step %lld: the loss is %g and the gradient norm %g: training diverged, "
      "stopped before updating the weights%s. Lower --lr (or --clip), or pass "
      "--skip-nonfinite-steps to skip such steps.\n",
      static_cast<long long>(step), loss, grad_norm,
      o.checkpoint.empty() ? ""
                           : ("; " + o.checkpoint + " holds the last checkpoint saved").c_str());
  return 1;
}

// Ctrl-C: the step's checkpoint is saved (with --checkpoint); exit code 130.
int interrupted_after(int64_t step, const Options& o) {
  std::printf("\ninterrupted after step %lld%s\n", static_cast<long long>(step),
      o.checkpoint.empty() ? " (not saved: no --checkpoint)" : ("; saved " + o.checkpoint).c_str());
  return 130;
}

// Whether --stop-after ended this invocation before the run's last step (and says so).
bool stopped_early(int64_t last_step, const Options& o) {
  if (last_step >= o.steps) return false;
  std::printf("stopped after step %lld of %lld%s\n", static_cast<long long>(last_step),
      static_cast<long long>(o.steps),
      o.checkpoint.empty() ? "" : ("; continue with --resume " + o.checkpoint).c_str());
  return true;
}

// ---- --task translate: d2l's machine translation (models/translation.h, docs/text.md) ----------

// The pairs of a translate run: --pairs FILE (d2l's fra.txt format), or the generated corpus.
data::PairsFile translation_pairs(const Options& o) {
  data::PairsFile file =
      o.pairs.empty()
          ? data::parse_pairs(data::synthetic_pairs_text(o.generated_pairs, 0), "<generated pairs>")
          : data::read_pairs(o.pairs);
  if (file.skipped_lines > 0)
    std::printf("%s: skipped %lld line%s without a tab\n", file.path.c_str(),
        static_cast<long long>(file.skipped_lines), file.skipped_lines == 1 ? "" : "s");
  return file;
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

// The run after `step`, as save_run does for the toy tasks, with the translation's own options,
// vocabularies and the position of the shuffled pairs.
void save_translate_run(int64_t step, const Options& o, const seq2seq::ModelConfig& config,
    const seq2seq::TranslationVocabs& vocabs, const nn::EncoderDecoder& model,
    const optim::Optimizer& optimizer, const optim::Scheduler& scheduler,
    const seq2seq::PairStream& stream) {
  if (o.checkpoint.empty()) return;
  Checkpoint c;
  c.kind = "ag-train";
  for (const auto& [name, t] : model.state_dict()) c.tensors["model." + name] = t;
  put_optimizer_state(c, optimizer.state_dict(), "optimizer");
  seq2seq::save_model_config(c, o.task, config);
  seq2seq::save_translation_vocabs(c, vocabs);
  save_options(c, o);
  c.strings["config.pairs"] = o.pairs;
  c.integers["config.generated_pairs"] = static_cast<uint64_t>(o.generated_pairs);
  c.integers["config.min_freq"] = static_cast<uint64_t>(o.min_freq);
  c.integers["step"] = static_cast<uint64_t>(step);
  c.integers["scheduler.step"] = static_cast<uint64_t>(scheduler.current_step());
  put_generator(c, "default", default_generator().state());
  c.integers["data.epoch"] = static_cast<uint64_t>(stream.epoch());
  c.integers["data.position"] = static_cast<uint64_t>(stream.position());
  parallel::put_rank_generators(c);
  if (parallel::rank() == 0) write_run(c, step, o);
  parallel::barrier();  // the file is complete before any rank goes on
}

// ag-train --task translate: d2l's Transformer on sentence pairs, evaluated on a fixed held-out
// slice by the loss and the BLEU of greedy and beam decoding. `resumed`: a checkpoint of such a
// run (its options are in `o` already).
int train_translate(Options o, std::optional<Checkpoint> resumed) {
  if (resumed) {
    o.pairs = resumed->string("config.pairs");
    o.generated_pairs = static_cast<int64_t>(resumed->integer("config.generated_pairs"));
    o.min_freq = static_cast<int64_t>(resumed->integer("config.min_freq"));
    o.num_steps = static_cast<int64_t>(resumed->integer("config.num_steps"));
  }
  const data::PairsFile file = translation_pairs(o);
  seq2seq::TranslationSplit split;
  try {
    split = seq2seq::split_pairs(seq2seq::tokenize_pairs(file.pairs), o.eval_size);
  } catch (const ValueError& e) {
    std::cerr << "ag-train: --eval-size " << o.eval_size << " for " << file.path << ": " << e.what()
              << "\n";
    return 2;
  }
  const seq2seq::TranslationVocabs vocabs =
      seq2seq::make_translation_vocabs(split.train, o.min_freq, o.num_steps);
  if (resumed && (resumed->string("vocab.source") != vocabs.source.serialize() ||
                     resumed->string("vocab.target") != vocabs.target.serialize()))
    throw CheckpointError("checkpoint " + o.resume + ": the vocabularies of " + file.path +
                          " are not those the run was trained with (has the file changed?)");
  seq2seq::ModelConfig config = o.model;
  config.vocab_size = vocabs.source.size();
  config.target_vocab_size = vocabs.target.size();
  try {  // as size_problem does for the toy tasks, once the vocabularies' sizes are known
    check_memory(seq2seq::estimate_training_bytes(config, o.batch_size, o.num_steps, o.num_steps,
                     o.eval_size, !o.checkpoint.empty()),
        o.memory_limit,
        "this run (vocabularies " + std::to_string(config.vocab_size) + " and " +
            std::to_string(config.target_vocab_size) + ", --batch-size " +
            std::to_string(o.batch_size) + ", --num-hiddens " + std::to_string(config.num_hiddens) +
            ")",
        o.memory_limit_source);
  } catch (const ValueError& e) {
    std::cerr << "ag-train: " << e.what() << "\n";
    return 2;
  }

  manual_seed(o.seed);  // model initialisation and dropout masks
  auto model = seq2seq::make_transformer(config);
  seq2seq::PairStream stream(split.train.size(), o.seed + 1);
  optim::Adam optimizer(model->parameters(), o.lr);
  optim::Scheduler scheduler(optimizer, make_schedule(o, config));
  int64_t first_step = 1;
  if (resumed) {
    model->load_state_dict(resumed->tensors_under("model"));
    optimizer.load_state_dict(get_optimizer_state(*resumed, "optimizer"));
    first_step = static_cast<int64_t>(resumed->integer("step")) + 1;
    if (first_step > o.steps)
      throw CheckpointError("checkpoint " + o.resume + ": the run already finished (step " +
                            std::to_string(first_step - 1) + ")");
    scheduler.set_step(static_cast<int64_t>(resumed->integer("scheduler.step")));
    default_generator().set_state(get_generator(*resumed, "default"));
    stream.set_position(static_cast<int64_t>(resumed->integer("data.epoch")),
        static_cast<int64_t>(resumed->integer("data.position")));
    std::printf("resuming %s at step %lld of %lld\n", o.resume.c_str(),
        static_cast<long long>(first_step), static_cast<long long>(o.steps));
  }
  // Under mpirun: rank 0's weights everywhere, gradients averaged during backward (or chunk by
  // chunk with --chunk-rows).
  parallel::DataParallel data_parallel(*model, o.batch_size, o.chunk_rows);
  parallel::use_rank_dropout_stream(resumed);
  const int64_t last_step = last_step_of(o, first_step);
  const int64_t checkpoint_every = o.checkpoint_every > 0 ? o.checkpoint_every : o.eval_every;
  std::printf(
      "ag-train: task translate, %s: %lld training and %lld held-out pairs, vocabularies %lld "
      "(source) and %lld (target) at min_freq %lld, num_steps %lld; model %lld parameters "
      "(hidden %lld, ffn %lld, %lld heads, %lld layers, dropout %g), %lld steps of batch %lld, "
      "Adam lr %g (%s), clip %g, seed %llu, %d thread%s\n",
      file.path.c_str(), static_cast<long long>(split.train.size()),
      static_cast<long long>(split.held_out.size()), static_cast<long long>(vocabs.source.size()),
      static_cast<long long>(vocabs.target.size()), static_cast<long long>(o.min_freq),
      static_cast<long long>(o.num_steps), static_cast<long long>(model->num_parameters()),
      static_cast<long long>(config.num_hiddens), static_cast<long long>(config.ffn_num_hiddens),
      static_cast<long long>(config.num_heads), static_cast<long long>(config.num_layers),
      config.dropout, static_cast<long long>(o.steps), static_cast<long long>(o.batch_size), o.lr,
      o.schedule.c_str(), o.clip, static_cast<unsigned long long>(o.seed), o.threads,
      o.threads == 1 ? "" : "s");
  parallel::print_data_parallel(o.batch_size, o.chunk_rows, "pairs");
  Report report(o, first_step, last_step, resumed.has_value());
  seq2seq::TranslationEvaluation last;
  for (int64_t step = first_step; step <= last_step; ++step) {
    // The global batch of pairs (the same on every rank), of which this rank takes its rows.
    const std::vector<int64_t> indices = stream.next(o.batch_size);
    const auto [begin, end] = parallel::rows_of_rank(static_cast<int64_t>(indices.size()));
    auto batch_of_rows = [&](int64_t first, int64_t last) {  // pairs [first, last) of the batch
      return seq2seq::translation_batch(split.train,
          std::vector<int64_t>(indices.begin() + first, indices.begin() + last), vocabs);
    };
    const data::Batch batch = batch_of_rows(begin, end);
    // Rows [first, last): their cross-entropy per valid token, and their valid tokens.
    auto loss_of = [&](int64_t first, int64_t last) {
      const data::Batch rows = first == begin && last == end ? batch : batch_of_rows(first, last);
      return std::pair{seq2seq::sequence_loss(*model, rows), sum(rows.label_valid_lens).item()};
    };
    const double batch_tokens =
        parallel::world() > 1 || o.chunk_rows > 0
            ? sum(batch_of_rows(0, static_cast<int64_t>(indices.size())).label_valid_lens).item()
            : 0;  // (one process: unused)
    optimizer.zero_grad();
    const double batch_loss = data_parallel.backward(begin, end, batch_tokens, loss_of);
    if (const std::optional<int> exit_code =
            clip_and_update(step, batch_loss, *model, optimizer, o))
      return *exit_code;
    scheduler.step();
    const bool evaluate_now = step % o.eval_every == 0 || step == o.steps;
    report.step(step, batch_loss, batch, evaluate_now);
    if (evaluate_now && parallel::rank() == 0) {
      last = seq2seq::evaluate_translation(*model, split.held_out, vocabs, o.beam);
      print_translation_evaluation(step, last, split.held_out, o);
    }
    const bool stop = parallel::any(interrupted);  // every rank after the same step
    if (step % checkpoint_every == 0 || step == last_step || stop)
      save_translate_run(step, o, config, vocabs, *model, optimizer, scheduler, stream);
    if (stop) return interrupted_after(step, o);
  }
  if (parallel::rank() > 0) return 0;  // rank 0 writes the model and the summary
  if (!o.save_model.empty()) {
    report_removed(
        seq2seq::save_model(o.save_model, *model, o.task, config, checkpoint_format(o), &vocabs)
            .removed_temp_files);
    std::printf("saved the model to %s\n", o.save_model.c_str());
  }
  if (stopped_early(last_step, o)) return 0;
  std::printf("done: %lld steps in %s; held-out loss %.4f, BLEU-2 greedy %.3f%s\n",
      static_cast<long long>(o.steps), format_duration(report.seconds()).c_str(), last.loss,
      last.bleu_greedy,
      o.beam > 0
          ? (", beam " + std::to_string(o.beam) + " " + std::to_string(last.bleu_beam).substr(0, 5))
                .c_str()
          : "");
  return 0;
}

// ---- training -----------------------------------------------------------------------------------

int train(Options o) {
  std::signal(SIGINT, on_interrupt);
  set_num_threads(o.threads);
  std::optional<Checkpoint> resumed;
  if (!o.resume.empty()) resumed = load_run(o);  // its options replace those that define a run
  if (o.task == seq2seq::kTranslateTask) return train_translate(o, std::move(resumed));

  // The task, the model and the optimizer, as d2l's train_seq2seq sets them up.
  manual_seed(o.seed);  // model initialisation and dropout masks
  std::unique_ptr<data::Task> task = data::make_task(o.task);
  seq2seq::ModelConfig config = o.model;
  config.vocab_size = task->vocab().size();
  auto model = seq2seq::make_transformer(config);
  if (o.embedding_init == "scaled") scale_embedding_init(*model);  // (a resumed run loads its own)
  const std::vector<data::Example> held_out = data::held_out_set(*task, o.eval_size);
  data::TrainingStream stream(*task, held_out, o.seed + 1);
  optim::Adam optimizer(model->parameters(), o.lr);
  optim::Scheduler scheduler(optimizer, make_schedule(o, config));
  const int64_t first_step =
      resumed ? restore_run(*resumed, o, *model, optimizer, scheduler, stream) : 1;
  // Under mpirun: rank 0's weights everywhere, gradients averaged during backward (or chunk by
  // chunk with --chunk-rows).
  parallel::DataParallel data_parallel(*model, o.batch_size, o.chunk_rows);
  parallel::use_rank_dropout_stream(resumed);
  const int64_t last_step = last_step_of(o, first_step);
  const int64_t checkpoint_every = o.checkpoint_every > 0 ? o.checkpoint_every : o.eval_every;
  print_run(o, config, *task, *model);
  parallel::print_data_parallel(o.batch_size, o.chunk_rows, "examples");
  Report report(o, first_step, last_step, resumed.has_value());

  for (int64_t step = first_step; step <= last_step; ++step) {
    // The global batch (the same on every rank), of which this rank trains on its rows.
    const std::vector<data::Example> examples = stream.next(o.batch_size);
    const auto [begin, end] = parallel::rows_of_rank(static_cast<int64_t>(examples.size()));
    auto batch_of_rows = [&](int64_t first, int64_t last) {  // examples [first, last)
      return data::make_batch({examples.begin() + first, examples.begin() + last},
          task->source_steps(), task->target_steps());
    };
    const data::Batch batch = batch_of_rows(begin, end);
    // Rows [first, last): their masked cross-entropy per valid token, and their valid tokens.
    auto loss_of = [&](int64_t first, int64_t last) {
      const data::Batch rows = first == begin && last == end ? batch : batch_of_rows(first, last);
      return std::pair{seq2seq::sequence_loss(*model, rows),
          parallel::valid_tokens({examples.begin() + first, examples.begin() + last})};
    };
    optimizer.zero_grad();
    const double batch_loss =
        data_parallel.backward(begin, end, parallel::valid_tokens(examples), loss_of);
    if (const std::optional<int> exit_code =
            clip_and_update(step, batch_loss, *model, optimizer, o))
      return *exit_code;
    scheduler.step();  // the learning rate of the next step

    const bool evaluate_now = step % o.eval_every == 0 || step == o.steps;
    report.step(step, batch_loss, batch, evaluate_now);
    if (evaluate_now && parallel::rank() == 0)
      report.evaluation(step, seq2seq::evaluate(*model, *task, held_out), *task, held_out);
    // Ctrl-C: save (with --checkpoint), then stop — every rank after the same step.
    const bool stop = parallel::any(interrupted);
    if (step % checkpoint_every == 0 || step == last_step || stop)
      save_run(step, o, config, *model, optimizer, scheduler, stream);
    if (stop) return interrupted_after(step, o);
  }

  const double seconds = report.seconds();
  if (parallel::rank() > 0) return 0;  // rank 0 writes the files and the summary
  if (!o.save_model.empty()) {
    report_removed(seq2seq::save_model(o.save_model, *model, o.task, config, checkpoint_format(o))
                       .removed_temp_files);
    std::printf("saved the model to %s\n", o.save_model.c_str());
  }
  report.plot();
  if (!o.attention_png.empty())
    write_attention_png(o.attention_png, *model, *task, held_out, o.attention_example);
  if (stopped_early(last_step, o)) return 0;
  report.summary(seconds);
  return 0;
}

// ---- the language model: --task lm ------------------------------------------------------------
//
// nanoGPT's train.py on ag's pieces: a text (--text, or Debian's fortunes) split 90/10 by
// characters, tokenized (char or word), a Vocab of the training split; each step a batch of random
// windows (data::sample_lm_batch), the mean cross-entropy per token, backward, clipping, AdamW;
// each evaluation the validation loss, perplexity and bits per character on fixed windows, and a
// sampled continuation. The options shared with the seq2seq tasks mean the same; a few defaults
// differ (lm_defaults).

struct LMOptions {
  std::vector<std::string> text;  // files or folders; none: Debian's fortunes
  std::string tokenizer = "char";
  int64_t block_size = 64;
  bool pre_norm = false, learned_positions = false;
  // On by default: it also scales the embedding so that the positions are not drowned
  // (nn/language_model.h; docs/training.md, "--task lm").
  bool tie_weights = true;
  double weight_decay = 0.1;
  int64_t eval_windows = 100;  // validation windows of block_size + 1 tokens per evaluation
  int64_t sample_length = 200;
};

// The defaults of --task lm where the command line gives none: the char-small model
// (D 128, 4 heads, FFN 512, block 64, AdamW lr 1e-3, 100 warm-up steps, then cosine to lr/10)
// with 2 blocks instead of 4, batch 16 instead of 32 and no dropout (every window is almost
// fresh data), for 4000 steps — what ends within 5 minutes on one thread and samples mostly real
// English words (docs/training.md, "The default --task lm run"). The output layer is tied to the
// embedding (LMOptions::tie_weights).
void lm_defaults(const CLI::App& app, Options& o) {
  auto unset = [&](const char* option) { return app.count(option) == 0; };
  if (unset("--steps")) o.steps = 4000;
  if (unset("--batch-size")) o.batch_size = 16;
  if (unset("--lr")) o.lr = 1e-3;
  if (unset("--warmup")) o.warmup = std::min<int64_t>(100, std::max<int64_t>(1, o.steps / 10));
  if (unset("--num-hiddens")) o.model.num_hiddens = 128;
  if (unset("--ffn-num-hiddens")) o.model.ffn_num_hiddens = 512;
  if (unset("--heads")) o.model.num_heads = 4;
  if (unset("--layers")) o.model.num_layers = 2;
  if (unset("--eval-every")) o.eval_every = 1000;
}

// The corpus, split, tokenized and numbered: what a --task lm run trains and validates on.
struct LMData {
  lm::Tokenizer tokenizer = lm::Tokenizer::chars;
  data::Vocab vocab = data::Vocab::from_tokens_in_id_order({"<unk>"});
  std::vector<int64_t> train_ids, validation_ids, validation_characters;
  std::string sources;  // the files read, one a line ("" for the fortunes: the default corpus)
  uint32_t crc = 0;     // of the whole text: a resumed run must read the same
  int64_t files = 0, characters = 0, unknown_validation_tokens = 0;
};

LMData read_lm_data(const LMOptions& lmo) {
  LMData d;
  d.tokenizer = lm::parse_tokenizer(lmo.tokenizer, "--tokenizer");
  const data::TextCorpus corpus =
      lmo.text.empty() ? data::read_fortunes() : data::read_text_files(lmo.text);
  for (const std::string& file : corpus.files) d.sources += file + "\n";
  d.files = static_cast<int64_t>(corpus.files.size());
  d.crc = crc32(corpus.text);
  d.characters = static_cast<int64_t>(data::count_code_points(corpus.text));
  // nanoGPT's n = len(data); train = data[:int(n*0.9)]; val = data[int(n*0.9):] — on characters,
  // before tokenizing, so that no token straddles the split.
  const auto [train_text, validation_text] = lm::split_text(corpus.text, 0.9);
  const lm::TokenizedText train = lm::tokenize(train_text, d.tokenizer);
  const lm::TokenizedText validation = lm::tokenize(validation_text, d.tokenizer);
  d.vocab = data::Vocab(train.tokens);  // <unk> and the training split's tokens
  d.train_ids = d.vocab.ids(train.tokens);
  d.validation_ids = d.vocab.ids(validation.tokens);
  d.validation_characters = validation.characters;
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

nn::LanguageModelConfig lm_config(const Options& o, const LMOptions& lmo, int64_t vocab_size) {
  nn::LanguageModelConfig c;
  c.vocab_size = vocab_size;
  c.num_hiddens = o.model.num_hiddens;
  c.num_heads = o.model.num_heads;
  c.num_layers = o.model.num_layers;
  c.ffn_num_hiddens = o.model.ffn_num_hiddens;
  c.dropout = o.model.dropout;
  c.block_size = lmo.block_size;
  c.pre_norm = lmo.pre_norm;
  c.learned_positions = lmo.learned_positions;
  c.tie_weights = lmo.tie_weights;
  return c;
}

// The sizes that allocate and the memory of the run, as size_problem does for the seq2seq tasks.
std::string lm_size_problem(const Options& o, const nn::LanguageModelConfig& config) {
  if (o.batch_size > kMaxBatchSize)
    return "--batch-size " + std::to_string(o.batch_size) + " is above the largest batch, " +
           std::to_string(kMaxBatchSize);
  try {
    lm::check_config(config, /*options=*/true);
    check_memory(lm::estimate_training_bytes(config, o.batch_size, 32, !o.checkpoint.empty()),
        o.memory_limit,
        "this run (--num-hiddens " + std::to_string(config.num_hiddens) + ", --layers " +
            std::to_string(config.num_layers) + ", --block-size " +
            std::to_string(config.block_size) + ", --batch-size " + std::to_string(o.batch_size) +
            ", vocabulary " + std::to_string(config.vocab_size) + ")",
        o.memory_limit_source);
  } catch (const ValueError& e) {
    return e.what();
  }
  return "";
}

// What a --task lm checkpoint holds besides the seq2seq runs' entries (save_options).
void save_lm_options(Checkpoint& c, const LMOptions& lmo, const LMData& d) {
  c.reals["config.weight_decay"] = lmo.weight_decay;
  c.integers["config.eval_windows"] = static_cast<uint64_t>(lmo.eval_windows);
  c.integers["config.sample_length"] = static_cast<uint64_t>(lmo.sample_length);
  c.strings["text.sources"] = d.sources;
  c.integers["text.crc32"] = d.crc;
}

// --resume of a --task lm run: its options over this invocation's, and the text it was trained on
// (read again from the same files, and checked to be the same).
void load_lm_run(const Checkpoint& c, Options& o, LMOptions& lmo) {
  const lm::ModelDescription m = lm::load_model_config(c, o.resume);
  o.model.num_hiddens = m.config.num_hiddens;
  o.model.num_heads = m.config.num_heads;
  o.model.num_layers = m.config.num_layers;
  o.model.ffn_num_hiddens = m.config.ffn_num_hiddens;
  o.model.dropout = m.config.dropout;
  lmo.block_size = m.config.block_size;
  lmo.pre_norm = m.config.pre_norm;
  lmo.learned_positions = m.config.learned_positions;
  lmo.tie_weights = m.config.tie_weights;
  lmo.tokenizer = lm::tokenizer_name(m.tokenizer);
  o.steps = static_cast<int64_t>(c.integer("config.steps"));
  o.batch_size = static_cast<int64_t>(c.integer("config.batch_size"));
  o.lr = c.real("config.lr");
  o.clip = c.real("config.clip");
  o.schedule = c.string("config.schedule");
  o.warmup = static_cast<int64_t>(c.integer("config.warmup"));
  o.seed = c.integer("config.seed");
  lmo.weight_decay = c.real("config.weight_decay");
  lmo.eval_windows = static_cast<int64_t>(c.integer("config.eval_windows"));
  lmo.sample_length = static_cast<int64_t>(c.integer("config.sample_length"));
  o.chunk_rows = saved_chunk_rows(c);
  if (o.steps <= 0 || o.batch_size <= 0 || o.batch_size > kMaxBatchSize || o.warmup <= 0 ||
      lmo.eval_windows <= 0 || lmo.sample_length < 0 ||
      (o.schedule != "constant" && o.schedule != "cosine" && o.schedule != "noam"))
    throw CheckpointError(
        "checkpoint " + o.resume + ": the saved run configuration is inconsistent");
  lmo.text.clear();
  std::istringstream sources(c.string("text.sources"));
  for (std::string file; std::getline(sources, file);) lmo.text.push_back(file);
  if (c.integer("config.threads") != static_cast<uint64_t>(o.threads))
    std::printf(
        "note: the run was saved with %llu thread(s) and continues with %d; the result "
        "may differ in the last bits from an uninterrupted run\n",
        static_cast<unsigned long long>(c.integer("config.threads")), o.threads);
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

int train_lm(Options o, LMOptions lmo) {
  std::signal(SIGINT, on_interrupt);
  set_num_threads(o.threads);
  std::optional<Checkpoint> resumed;
  if (!o.resume.empty()) {
    resumed = load_checkpoint(o.resume);
    if (resumed->kind != "ag-train")
      throw CheckpointError("checkpoint " + o.resume + ": holds a '" + resumed->kind +
                            "', not an ag-train run (a model file cannot be resumed)");
    load_lm_run(*resumed, o, lmo);
  }
  // The text and its sizes: a bad text or a run that does not fit is a bad input (exit 2).
  LMData d;
  nn::LanguageModelConfig config;
  try {
    d = read_lm_data(lmo);
    config = lm_config(o, lmo, d.vocab.size());
    if (const std::string problem = lm_size_problem(o, config); !problem.empty())
      throw ValueError(problem);
  } catch (const std::exception& e) {
    std::cerr << "ag-train: " << e.what() << "\n";
    return 2;
  }
  if (resumed && resumed->integer("text.crc32") != d.crc)
    throw CheckpointError("checkpoint " + o.resume +
                          ": the text it was trained on has changed since (its files: " +
                          (d.sources.empty() ? std::string("the fortunes") : d.sources) + ")");

  manual_seed(o.seed);  // model initialisation and dropout masks
  auto model = lm::make_language_model(config);
  Generator data_generator(o.seed + 1);  // the training windows
  optim::AdamW optimizer(model->parameters(), o.lr, {0.9, 0.99}, 1e-8, lmo.weight_decay);
  seq2seq::ModelConfig schedule_config = o.model;
  optim::Scheduler scheduler(optimizer, o.schedule == "cosine"
                                            ? optim::cosine_with_warmup(o.warmup, o.steps, 0.1)
                                            : make_schedule(o, schedule_config));
  int64_t first_step = 1;
  if (resumed) {
    const Checkpoint& c = *resumed;
    model->load_state_dict(c.tensors_under("model"));
    optimizer.load_state_dict(get_optimizer_state(c, "optimizer"));
    const uint64_t step = c.integer("step");
    if (step >= static_cast<uint64_t>(o.steps))
      throw CheckpointError("checkpoint " + o.resume + ": the run already finished (step " +
                            std::to_string(step) + ")");
    scheduler.set_step(static_cast<int64_t>(c.integer("scheduler.step")));
    default_generator().set_state(get_generator(c, "default"));
    data_generator.set_state(get_generator(c, "data"));
    first_step = static_cast<int64_t>(step) + 1;
    std::printf("resuming %s at step %lld of %lld\n", o.resume.c_str(),
        static_cast<long long>(first_step), static_cast<long long>(o.steps));
  }
  // Under mpirun: rank 0's weights everywhere, gradients averaged during backward (or chunk by
  // chunk with --chunk-rows).
  parallel::DataParallel data_parallel(*model, o.batch_size, o.chunk_rows);
  parallel::use_rank_dropout_stream(resumed);
  const int64_t last_step = last_step_of(o, first_step);
  const int64_t checkpoint_every = o.checkpoint_every > 0 ? o.checkpoint_every : o.eval_every;
  std::printf(
      "ag-train: task lm, %s (%lld file%s, %lld characters), %s tokens: vocabulary %lld, "
      "%lld training and %lld validation tokens (%lld unknown); model %lld parameters (%s, hidden "
      "%lld, ffn %lld, %lld heads, %lld layers, block %lld, dropout %g); %lld steps of batch %lld, "
      "AdamW lr %g (%s), weight decay %g, clip %g, seed %llu, %d thread%s\n",
      lmo.text.empty() ? "Debian's fortunes" : "--text", static_cast<long long>(d.files),
      d.files == 1 ? "" : "s", static_cast<long long>(d.characters), lmo.tokenizer.c_str(),
      static_cast<long long>(config.vocab_size), static_cast<long long>(d.train_ids.size()),
      static_cast<long long>(d.validation_ids.size()),
      static_cast<long long>(d.unknown_validation_tokens),
      static_cast<long long>(model->num_parameters()), config.pre_norm ? "pre-norm" : "post-norm",
      static_cast<long long>(config.num_hiddens), static_cast<long long>(config.ffn_num_hiddens),
      static_cast<long long>(config.num_heads), static_cast<long long>(config.num_layers),
      static_cast<long long>(config.block_size), config.dropout, static_cast<long long>(o.steps),
      static_cast<long long>(o.batch_size), o.lr, o.schedule.c_str(), lmo.weight_decay, o.clip,
      static_cast<unsigned long long>(o.seed), o.threads, o.threads == 1 ? "" : "s");
  parallel::print_data_parallel(o.batch_size, o.chunk_rows, "windows");
  std::ofstream loss_log;
  if (!o.loss_log.empty() && parallel::rank() == 0)
    loss_log = open_loss_log(o.loss_log, resumed.has_value());

  const Clock::time_point start = Clock::now();
  double loss_since_report = 0, loss_since_evaluation = 0;
  int64_t steps_since_report = 0, steps_since_evaluation = 0;
  lm::Evaluation last;
  for (int64_t step = first_step; step <= last_step; ++step) {
    // The global batch of windows (the same on every rank), of which this rank takes its rows.
    const data::LMBatch batch =
        data::sample_lm_batch(d.train_ids, o.batch_size, config.block_size, data_generator);
    const auto [begin, end] = parallel::rows_of_rank(o.batch_size);
    // Windows [first, last): their mean cross-entropy per token, and their number (every window
    // has block_size tokens).
    auto loss_of = [&](int64_t first, int64_t last) {
      const Tensor inputs = batch.inputs.narrow(0, first, last - first);  // (rows, T)
      const Tensor labels = batch.labels.narrow(0, first, last - first);  // (rows, T)
      return std::pair{lm::lm_loss(*model, inputs, labels), static_cast<double>(last - first)};
    };
    optimizer.zero_grad();
    const double batch_loss =
        data_parallel.backward(begin, end, static_cast<double>(o.batch_size), loss_of);
    if (const std::optional<int> exit_code =
            clip_and_update(step, batch_loss, *model, optimizer, o))
      return *exit_code;
    scheduler.step();  // the learning rate of the next step

    if (loss_log.is_open()) write_loss_row(loss_log, step, batch_loss);
    loss_since_report += batch_loss;
    loss_since_evaluation += batch_loss;
    ++steps_since_report;
    ++steps_since_evaluation;
    const bool evaluate_now = step % o.eval_every == 0 || step == o.steps;
    if (step % 100 == 0 || evaluate_now) {
      const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
      const double done = static_cast<double>(step - first_step + 1);
      std::printf("step %lld/%lld  loss %.4f  %.0f tokens/s  ETA %s\n",
          static_cast<long long>(step), static_cast<long long>(o.steps),
          loss_since_report / static_cast<double>(steps_since_report),
          done * static_cast<double>(o.batch_size * config.block_size) / elapsed,
          format_duration(elapsed / done * static_cast<double>(last_step - step)).c_str());
      std::fflush(stdout);
      loss_since_report = 0;
      steps_since_report = 0;
    }
    if (evaluate_now && parallel::rank() == 0) {
      last = lm::evaluate(*model, d.validation_ids, d.validation_characters, lmo.eval_windows);
      print_lm_evaluation(step, loss_since_evaluation / static_cast<double>(steps_since_evaluation),
          last, *model, lmo, d, o.seed);
      loss_since_evaluation = 0;
      steps_since_evaluation = 0;
    }
    // Ctrl-C: save (with --checkpoint), then stop — every rank after the same step.
    const bool stop = parallel::any(interrupted);
    if (!o.checkpoint.empty() && (step % checkpoint_every == 0 || step == last_step || stop)) {
      Checkpoint c;
      c.kind = "ag-train";
      for (const auto& [name, t] : model->state_dict()) c.tensors["model." + name] = t;
      put_optimizer_state(c, optimizer.state_dict(), "optimizer");
      lm::save_model_config(c, config, d.tokenizer, d.vocab);
      save_options(c, o);
      save_lm_options(c, lmo, d);
      c.integers["step"] = static_cast<uint64_t>(step);
      c.integers["scheduler.step"] = static_cast<uint64_t>(scheduler.current_step());
      put_generator(c, "default", default_generator().state());
      put_generator(c, "data", data_generator.state());
      parallel::put_rank_generators(c);
      if (parallel::rank() == 0) write_run(c, step, o);
      parallel::barrier();  // the file is complete before any rank goes on
    }
    if (stop) return interrupted_after(step, o);
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  if (parallel::rank() > 0) return 0;  // rank 0 writes the model and the summary
  if (!o.save_model.empty()) {
    report_removed(lm::save_model(o.save_model, *model, d.tokenizer, d.vocab, checkpoint_format(o))
                       .removed_temp_files);
    std::printf("saved the model to %s (ag-generate --model %s --prompt TEXT)\n",
        o.save_model.c_str(), o.save_model.c_str());
  }
  if (stopped_early(last_step, o)) return 0;
  std::printf(
      "done: %lld steps in %s; validation loss %.4f, perplexity %.2f, %.3f bits per "
      "character\n",
      static_cast<long long>(o.steps), format_duration(seconds).c_str(), last.loss, last.perplexity,
      last.bits_per_character);
  return 0;
}

// CLI11 2.1 reads an integer option with strtoll or strtoull: 10^30 becomes 2^63 − 1 without a
// word, -1 for an unsigned option becomes 2^64 − 1, and "010" is read as octal 8. This check
// sees the text first: a decimal whole number that T holds, or the option is refused (exit 2).
template <class T>
CLI::Validator whole_number() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        const std::size_t first_digit = !text.empty() && text[0] == '-' ? 1 : 0;
        if (first_digit == 1 && std::is_unsigned_v<T>)
          return text + " is out of range (0 to " + std::to_string(std::numeric_limits<T>::max()) +
                 ")";
        T value{};
        const char* end = text.data() + text.size();
        const auto [stop, error] = std::from_chars(text.data(), end, value);
        if (error == std::errc::result_out_of_range)
          return text + " is out of range (" + std::to_string(std::numeric_limits<T>::min()) +
                 " to " + std::to_string(std::numeric_limits<T>::max()) + ")";
        // No leading zero ("010"), no "+", no "0x": digits as they are read in decimal.
        if (error != std::errc() || stop != end ||
            (text.size() > first_digit + 1 && text[first_digit] == '0'))
          return text + " is not a whole number";
        return "";
      },
      "");
}

// The add task's own default: its sums need where each digit is, which the positional encoding
// tells only when the embeddings do not drown it (scale_embedding_init, docs/training.md).
void toy_task_defaults(Options& o, const CLI::App& app) {
  if (o.task == "add" && app.count("--embedding-init") == 0) o.embedding_init = "scaled";
}

// --task translate starts from d2l's settings (d2l 0.17, "Transformer": num_hiddens 32, 2 layers,
// dropout 0.1, FFN 64, 4 heads, batch 64, num_steps 10, Adam lr 0.005, no schedule; min_freq 2 in
// load_data_nmt) for every option the command line does not give.
void translate_defaults(Options& o, const CLI::App& app) {
  auto unset = [&](const char* option) { return app.count(option) == 0; };
  if (unset("--num-hiddens")) o.model.num_hiddens = 32;
  if (unset("--ffn-num-hiddens")) o.model.ffn_num_hiddens = 64;
  if (unset("--heads")) o.model.num_heads = 4;
  if (unset("--layers")) o.model.num_layers = 2;
  if (unset("--dropout")) o.model.dropout = 0.1;
  if (unset("--lr")) o.lr = 0.005;
  if (unset("--schedule")) o.schedule = "constant";
  if (unset("--batch-size")) o.batch_size = 64;
  if (unset("--steps")) o.steps = 2000;
  if (unset("--eval-size")) o.eval_size = 200;
}

}  // namespace

int main(int argc, char** argv) {
#ifdef AG_HAVE_DISTRIBUTED
  // Under mpirun, MPI for the whole run; started on its own, ag-train never touches MPI.
  dist::Environment mpi(argc, argv);
  if (dist::rank() > 0 && !std::freopen("/dev/null", "w", stdout))  // rank 0 alone prints
    std::perror("ag-train: silencing the standard output of this rank");
#endif
  Options o;
  LMOptions lmo;
  CLI::App app{
      "ag-train: train a d2l Transformer on a toy sequence task (copy, reverse, sort, add), on "
      "sentence pairs (translate), or a language model on text (lm)"};
  app.add_option("--task", o.task,
         "copy | reverse | sort | add (what the defaults reach on each: docs/training.md) | "
         "translate (sentence pairs, d2l's settings: docs/text.md) | lm (a language model of "
         "text; its defaults: docs/training.md)")
      ->capture_default_str();
  app.add_option("--pairs", o.pairs,
      "translate: sentence pairs in d2l's fra.txt format (source<TAB>target a line); without it, "
      "a corpus ag generates (English to an invented language)");
  app.add_option("--generated-pairs", o.generated_pairs, "translate: pairs of the generated corpus")
      ->check(whole_number<int64_t>())
      ->capture_default_str();
  app.add_option("--write-pairs", o.write_pairs,
      "write the generated corpus (--generated-pairs pairs) to this file in fra.txt format, and "
      "stop");
  app.add_option("--num-steps", o.num_steps,
         "translate: tokens of a sentence with <eos> (longer ones are cut, as d2l's truncate_pad)")
      ->check(whole_number<int64_t>())
      ->capture_default_str();
  app.add_option("--min-freq", o.min_freq, "translate: rarer words become <unk>")
      ->check(whole_number<int64_t>())
      ->capture_default_str();
  app.add_option("--beam", o.beam,
         "translate: the beam width of each evaluation's beam search (0: greedy only)")
      ->check(whole_number<int64_t>())
      ->capture_default_str();
  app.add_option("--steps", o.steps, "training steps")
      ->check(whole_number<int64_t>())
      ->capture_default_str();
  app.add_option("--batch-size", o.batch_size, "sequences per step")
      ->check(whole_number<int64_t>())
      ->capture_default_str();
  app.add_option("--lr", o.lr, "Adam learning rate")->capture_default_str();
  app.add_option("--clip", o.clip, "clip the global gradient norm to this")->capture_default_str();
  app.add_option("--schedule", o.schedule,
         "learning-rate schedule: constant | cosine (warm-up, then cosine to 0) | noam")
      ->capture_default_str();
  app.add_option("--warmup", o.warmup,
         "warm-up steps of the cosine and noam schedules (0: min(200, steps/10))")
      ->check(whole_number<int64_t>())
      ->capture_default_str();
  app.add_option("--num-hiddens", o.model.num_hiddens, "model width D")
      ->check(whole_number<int64_t>())
      ->capture_default_str();
  app.add_option("--ffn-num-hiddens", o.model.ffn_num_hiddens, "width of the position-wise FFN")
      ->check(whole_number<int64_t>())
      ->capture_default_str();
  app.add_option("--heads", o.model.num_heads, "attention heads (must divide --num-hiddens)")
      ->check(whole_number<int64_t>())
      ->capture_default_str();
  app.add_option("--layers", o.model.num_layers, "encoder and decoder blocks")
      ->check(whole_number<int64_t>())
      ->capture_default_str();
  app.add_option("--dropout", o.model.dropout, "dropout probability")->capture_default_str();
  app.add_option("--embedding-init", o.embedding_init,
         "toy tasks: how token embeddings start: normal (N(0, 1), d2l's) | scaled (N(0, 1/D): "
         "times √D, the size of the positional encoding); add's default: scaled "
         "(docs/training.md)")
      ->capture_default_str();
  app.add_option("--seed", o.seed, "seeds initialisation, dropout and the training data")
      ->check(whole_number<uint64_t>())
      ->capture_default_str();
  app.add_option("--threads", o.threads,
         "threads of ag's pool, which runs the matrix products and the larger loops "
         "(OpenBLAS itself stays on one)")
      ->capture_default_str();
  app.add_option("--eval-every", o.eval_every, "evaluate every this many steps")
      ->check(whole_number<int64_t>())
      ->capture_default_str();
  app.add_option("--eval-size", o.eval_size, "held-out sequences")
      ->check(whole_number<int64_t>())
      ->capture_default_str();
  app.add_option("--show", o.show, "decoded examples printed at each evaluation")
      ->check(whole_number<int64_t>())
      ->capture_default_str();
  app.add_option("--checkpoint", o.checkpoint,
      "save the run here (atomically) every --checkpoint-every steps and at the end");
  app.add_option("--checkpoint-every", o.checkpoint_every,
         "steps between checkpoints (0: at each evaluation)")
      ->check(whole_number<int64_t>())
      ->capture_default_str();
  app.add_option("--checkpoint-format", o.checkpoint_format, "binary | json")
      ->capture_default_str();
  app.add_option("--keep", o.keep, "also keep the last K saves as PATH.step-NNNNNNNN")
      ->check(whole_number<int64_t>())
      ->capture_default_str();
  app.add_option("--resume", o.resume,
      "continue the run saved in this checkpoint (its settings replace the options "
      "that define a run)");
  app.add_option("--stop-after", o.stop_after, "stop (and save) after this step, to --resume later")
      ->check(whole_number<int64_t>())
      ->capture_default_str();
  app.add_option("--loss-log", o.loss_log,
      "write every step's loss to this CSV file, a row as each step ends (appended on --resume)");
  app.add_option("--save-model", o.save_model,
      "at the end, save the model alone here (for ag-predict); a path ending in .safetensors gets "
      "PyTorch's format (docs/interop.md)");
  app.add_option("--curves-dir", o.curves_dir,
      "write training_curves.csv (a row per evaluation) and, at the end, "
      "training_curves.png (gnuplot) into this directory");
  app.add_option("--attention-png", o.attention_png,
      "at the end, draw the attention weights of every layer and head "
      "for one decoded held-out example into this PNG");
  app.add_option("--chunk-rows", o.chunk_rows,
         "0: each step's gradient from a rank's rows at once; C > 0: chunk by chunk, each chunk of "
         "C rows with its own forward and backward, the chunks' gradients added in their order, so "
         "that any number of ranks whose rows are whole chunks (and one process) trains the same "
         "model bit for bit with --dropout 0 (slower; docs/distributed.md)")
      ->capture_default_str();
  app.add_flag("--oversubscribe", o.oversubscribe,
      "under mpirun: allow more ranks x --threads on a machine than it has hardware threads "
      "(many times slower, the same numbers: to check 4 or 8 ranks on a small machine)");
  app.add_flag("--skip-nonfinite-steps", o.skip_nonfinite,
      "skip (do not apply) a step whose loss or gradient norm is NaN or infinite, instead of "
      "stopping the run with exit code 1");
  app.add_option("--attention-example", o.attention_example,
         "the held-out example drawn by --attention-png (-1: the first with the longest source)")
      ->check(whole_number<int64_t>())
      ->capture_default_str();
  app.add_option("--max-memory", o.max_memory,
      "refuse a run whose estimated memory is above this (512M, 4G; default: the memory "
      "available: MemAvailable of /proc/meminfo, within the cgroup's limit)");
  // --task lm only (docs/training.md, "--task lm").
  app.add_option("--text", lmo.text,
      "--task lm: UTF-8 text files or folders to train on (default: Debian's fortunes)");
  app.add_option("--tokenizer", lmo.tokenizer, "--task lm: char | word")->capture_default_str();
  app.add_option("--block-size", lmo.block_size, "--task lm: context length in tokens")
      ->check(whole_number<int64_t>())
      ->capture_default_str();
  app.add_flag("--pre-norm", lmo.pre_norm, "--task lm: GPT-2's pre-norm blocks (default: d2l's)");
  app.add_flag("--learned-positions", lmo.learned_positions,
      "--task lm: learned positions (default: d2l's sinusoids)");
  app.add_flag("--tie-weights,!--no-tie-weights", lmo.tie_weights,
      "--task lm: the output layer reuses the token embedding (the default; --no-tie-weights: a "
      "separate Linear)");
  app.add_option("--weight-decay", lmo.weight_decay, "--task lm: AdamW's weight decay")
      ->capture_default_str();
  app.add_option("--eval-windows", lmo.eval_windows,
         "--task lm: validation windows of --block-size + 1 tokens per evaluation")
      ->check(whole_number<int64_t>())
      ->capture_default_str();
  app.add_option(
         "--sample-length", lmo.sample_length, "--task lm: tokens sampled at each evaluation")
      ->check(whole_number<int64_t>())
      ->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "ag-train: " << e.what() << " (see --help)\n";
    return 2;
  }
  // A --task lm checkpoint resumes as one without --task.
  if (!o.resume.empty() && app.count("--task") == 0) try {
      const Checkpoint c = load_checkpoint(o.resume);
      if (c.strings.count("config.task") && c.string("config.task") == "lm") o.task = "lm";
    } catch (const std::exception&) {  // reported when the run loads it
    }
  if (o.task == "lm") lm_defaults(app, o);
  // Option values CLI11 cannot check by type alone.
  std::string problem;
  const auto names = data::task_names();
  const bool translate = o.task == seq2seq::kTranslateTask;
  if (translate) translate_defaults(o, app);
  toy_task_defaults(o, app);
  if (!o.write_pairs.empty()) {
    try {
      if (const std::string why = output_file_problem(o.write_pairs, OutputKind::renamed_file);
          !why.empty())
        throw ValueError("--write-pairs " + o.write_pairs + ": " + why);
      report_removed(write_file_atomically(
          o.write_pairs, data::synthetic_pairs_text(o.generated_pairs, 0), "--write-pairs")
                         .removed_temp_files);
      std::printf("wrote %lld generated pairs to %s\n", static_cast<long long>(o.generated_pairs),
          o.write_pairs.c_str());
      return 0;
    } catch (const std::exception& e) {
      std::cerr << "ag-train: " << e.what() << "\n";
      return 2;
    }
  }
  const bool lm_only_options =
      app.count("--text") + app.count("--tokenizer") + app.count("--block-size") +
          app.count("--pre-norm") + app.count("--learned-positions") + app.count("--tie-weights") +
          app.count("--weight-decay") + app.count("--eval-windows") + app.count("--sample-length") >
      0;
  if (!translate && o.task != "lm" && std::find(names.begin(), names.end(), o.task) == names.end())
    problem = "unknown task '" + o.task + "' (known: copy, reverse, sort, add, translate, lm)";
  else if (translate && (o.num_steps < 1 || o.num_steps > 1000 || o.min_freq < 0 || o.beam < 0 ||
                            o.generated_pairs < 1 || o.generated_pairs > 1000000))
    problem =
        "--num-steps must be in 1-1000, --generated-pairs in 1-1000000, --min-freq and --beam "
        "not negative";
  else if (translate && (!o.curves_dir.empty() || !o.attention_png.empty()))
    problem =
        "--curves-dir and --attention-png are for the toy tasks (ag-predict --attention-png "
        "draws a translation's attention)";
  else if ((translate || o.task == "lm") && app.count("--embedding-init"))
    problem = "--embedding-init is for the toy tasks (copy, reverse, sort, add)";
  else if (o.embedding_init != "normal" && o.embedding_init != "scaled")
    problem = "unknown --embedding-init '" + o.embedding_init + "' (known: normal, scaled)";
  else if (o.task != "lm" && lm_only_options)
    problem =
        "--text, --tokenizer, --block-size, --pre-norm, --learned-positions, "
        "--tie-weights, --weight-decay, --eval-windows and --sample-length are for --task lm";
  else if (o.task == "lm" && (!o.curves_dir.empty() || !o.attention_png.empty()))
    problem = "--curves-dir and --attention-png are not for --task lm";
  else if (o.task == "lm" && (lmo.tokenizer != "char" && lmo.tokenizer != "word"))
    problem = "unknown --tokenizer '" + lmo.tokenizer + "' (known: char, word)";
  else if (o.task == "lm" && (lmo.block_size < 1 || lmo.eval_windows < 1 || lmo.sample_length < 0 ||
                                 !(lmo.weight_decay >= 0) || !std::isfinite(lmo.weight_decay)))
    problem =
        "--block-size and --eval-windows must be positive, --sample-length and "
        "--weight-decay not negative";
  else if (o.steps <= 0)
    problem = "--steps must be positive";
  else if (o.schedule != "constant" && o.schedule != "cosine" && o.schedule != "noam")
    problem = "unknown --schedule '" + o.schedule + "' (known: constant, cosine, noam)";
  else if (o.warmup < 0 || (o.schedule == "cosine" && o.warmup >= o.steps))
    problem = "--warmup must not be negative (and must be below --steps for the cosine schedule)";
  else if (o.batch_size <= 0)
    problem = "--batch-size must be positive";
  else if (!(o.lr > 0) || !std::isfinite(o.lr))
    problem = "--lr must be a positive number";
  else if (!(o.clip > 0) || !std::isfinite(o.clip))
    problem = "--clip must be a positive number";
  else if (o.threads < 1 || o.threads > max_num_threads())
    problem = "--threads " + std::to_string(o.threads) + " is outside 1-" +
              std::to_string(max_num_threads()) +
              " (at most 4 times this machine's hardware threads, and at least 16)";
  else if (const std::string why = parallel::thread_budget_problem(o.threads, o.oversubscribe);
           !why.empty())
    problem = why;
  else if (o.chunk_rows < 0)
    problem = "--chunk-rows must not be negative";
  else if (const std::string why = parallel::chunk_problem(o.batch_size, o.chunk_rows);
           !why.empty())
    problem = why;
  else if (o.eval_every <= 0 || o.eval_size <= 0 || o.show < 0)
    problem = "--eval-every and --eval-size must be positive, --show not negative";
  else if (o.checkpoint_every < 0 || o.keep < 0 || o.stop_after < 0)
    problem = "--checkpoint-every, --keep and --stop-after must not be negative";
  else if (o.checkpoint_format != "binary" && o.checkpoint_format != "json")
    problem = "unknown --checkpoint-format '" + o.checkpoint_format + "' (known: binary, json)";
  else if (o.keep > 0 && o.checkpoint.empty())
    problem = "--keep needs --checkpoint";
  else if (o.attention_example < -1 || o.attention_example >= o.eval_size)
    problem = "--attention-example " + std::to_string(o.attention_example) +
              " must be -1 or in 0-" + std::to_string(o.eval_size - 1) +
              " (an index into the --eval-size held-out examples)";
  // The model's sizes, as a checkpoint's are checked (models/memory.h); then the sizes that
  // allocate and the memory of the whole run, against --max-memory or what is available.
  try {
    if (problem.empty()) seq2seq::check_model_config(o.model, seq2seq::SettingNames::options);
    o.memory_limit =
        o.max_memory.empty() ? available_memory_bytes() : parse_byte_size(o.max_memory);
    o.memory_limit_source = o.max_memory.empty() ? "available (--max-memory sets another limit)"
                                                 : "allowed by --max-memory";
  } catch (const ValueError& e) {
    if (problem.empty())
      problem = (o.max_memory.empty() ? "" : "--max-memory: ") + std::string(e.what());
  }
  if (problem.empty() && o.resume.empty() && o.task != "lm") problem = size_problem(o);
  // Every output, checked before the run starts (nothing is created or truncated here): a path
  // that cannot be written fails now, not after the training it would have saved.
  for (const auto& [option, path, kind] :
      {std::tuple{"--checkpoint", o.checkpoint, OutputKind::renamed_file},
          std::tuple{"--save-model", o.save_model, OutputKind::renamed_file},
          std::tuple{"--loss-log", o.loss_log, OutputKind::file},
          std::tuple{"--attention-png", o.attention_png, OutputKind::file}})
    if (problem.empty() && !path.empty())
      if (const std::string why = output_file_problem(path, kind); !why.empty())
        problem = std::string(option) + " " + path + ": " + why;
  if (problem.empty() && !o.curves_dir.empty())
    if (const std::string why = output_directory_problem(o.curves_dir); !why.empty())
      problem = "--curves-dir " + o.curves_dir + ": " + why;
  if (!problem.empty()) {
    std::cerr << "ag-train: " << problem << "\n";
    return 2;
  }
  if (o.warmup == 0) o.warmup = std::max<int64_t>(1, std::min<int64_t>(200, o.steps / 10));
  // The cosine schedule warms up for at least one step and must have steps after it: --steps 1
  // used to fail there only after the held-out set had been drawn.
  if (o.resume.empty() && o.schedule == "cosine" && o.warmup >= o.steps) {
    std::cerr << "ag-train: --steps " << o.steps << " leaves no step after the warm-up of "
              << o.warmup
              << " (the cosine schedule needs at least 2 steps; or --schedule constant)\n";
    return 2;
  }
  try {
    return o.task == "lm" ? train_lm(o, lmo) : train(o);
  } catch (const CheckpointError& e) {
    return parallel::run_failed(e.what());
  } catch (const nn::StateDictError& e) {  // a checkpoint whose model does not fit
    return parallel::run_failed(e.what());
  } catch (const optim::StateDictError& e) {  // … or whose optimizer state does not
    return parallel::run_failed(e.what());
  } catch (const std::exception& e) {
    return parallel::run_failed(std::string("error: ") + e.what());
  }
}
