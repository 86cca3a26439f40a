// ag-nanogpt — nanoGPT (Karpathy's model.py and train.py) in C++, on ag: the same GPT, the same
// recipe, the same log lines, trained on a text's characters. It reads top to bottom as train.py
// does: the data (nanoGPT's data/shakespeare_char/prepare.py and get_batch: data/char_dataset.h),
// the model (model.py's CausalSelfAttention, MLP, Block and GPT: models/gpt.h), then the training
// loop. train.py's globals and the command line that overrides them (configurator.py) are
// config.h. What ag::training adds — checkpoints with an exact --resume, data parallelism under
// mpirun, Ctrl-C that saves — is a few calls around the loop (examples/train_classifier.cpp shows
// them alone).
// docs/nanogpt.md maps each Python line to its C++ line.
//
//   ag-nanogpt                                  # nanoGPT's CPU recipe on Debian's fortunes
//   ag-nanogpt --text input.txt --sample 500    # your text, then 500 sampled characters
//   ag-nanogpt --checkpoint ckpt.agc --stop-after 500
//   ag-nanogpt --resume ckpt.agc                # continues exactly, bit for bit
//   mpirun -np 2 ag-nanogpt                     # each rank takes half of every batch
//
// The defaults are the README's recipe for a CPU (train_shakespeare_char.py with --device=cpu
// --eval_iters=20 --log_interval=1 --block_size=64 --batch_size=12 --n_layer=4 --n_head=4
// --n_embd=128 --max_iters=2000 --lr_decay_iters=2000 --dropout=0.0). bench/nanogpt_torch.py is
// the same program in PyTorch, and bench/compare_nanogpt.sh runs the two side by side.
//
// Where this differs from nanoGPT, on purpose:
//   - the batches' offsets come from a SplitMix64 stream seeded with --seed (data::BatchStream),
//     not from torch.randint, so that bench/nanogpt_torch.py draws the very same batches;
//   - iteration numbers: nanoGPT's iter N is the update that takes the model from N to N + 1
//     updates. "step N: …" is printed after N updates, as nanoGPT's; the run ends after
//     --max-iters updates with the evaluation of that step (nanoGPT takes one more update after
//     it, whose result it does not evaluate), and there is always an evaluation at the end;
//   - the checkpoint is saved at every evaluation (nanoGPT's always_save_checkpoint) and at the
//     end, with ag::training's format, not only when the validation loss improves; it still holds
//     best_val_loss;
//   - "iter N: loss X" is the whole batch's loss (with --gradient-accumulation-steps, the mean over
//     the micro-batches, not the last one's), and its time is the step's alone (nanoGPT's includes
//     an evaluation that happened before it); there is no MFU estimate.
#include <algorithm>
#include <cstdio>
#include <limits>
#include <map>

#include "autograd/ops.h"
#include "config.h"
#include "data/char_dataset.h"
#include "data/text_corpus.h"
#include "data/utf8.h"
#include "distributed/distributed.h"
#include "io/checkpoint.h"
#include "models/gpt.h"
#include "nn/layers.h"
#include "nn/summary.h"
#include "optim/optimizer.h"
#include "optim/schedule.h"
#include "training/cli.h"
#include "training/profile.h"
#include "training/report.h"
#include "training/step.h"

namespace {

using namespace ag;
using namespace ag_nanogpt;  // Config, add_options, describe: train.py's configuration (config.h)

const std::string kProgram = "ag-nanogpt";

// ==== the data: prepare.py and get_batch =========================================================
// data/char_dataset.h: every character a token, the sorted set of the text's characters the
// vocabulary, 90 % train and 10 % validation; batches of random windows whose offsets come from a
// SplitMix64 stream (data::BatchStream) that bench/nanogpt_torch.py draws too. The model, model.py,
// is models/gpt.h.

// prepare.py on --text (or Debian's fortunes), refused when a split has no window of block_size
// characters; and the text's CRC-32: a resumed run must read the same text.
data::CharDataset prepare(const Config& c, uint32_t& crc) {
  try {
    const data::TextCorpus corpus =
        c.text.empty() ? data::read_fortunes() : data::read_text_files({c.text});
    crc = crc32(corpus.text);
    data::CharDataset dataset = data::char_dataset(data::decode_utf8(corpus.text, c.text));
    data::check_windows(dataset, c.block_size);
    return dataset;
  } catch (const std::exception& e) {
    throw training::UsageError(e.what());
  }
}

// prepare.py's report of the dataset, and train.py's of an iteration's tokens and the ranks.
void print_data(const data::CharDataset& dataset, const Config& c, const training::RunOptions& o) {
  std::printf("length of dataset in characters: %s\n", nn::with_commas(dataset.characters).c_str());
  std::printf("vocab size: %zu\n", dataset.itos.size());
  std::printf("train has %s tokens\nval has %s tokens\n",
      nn::with_commas(static_cast<int64_t>(dataset.train.size())).c_str(),
      nn::with_commas(static_cast<int64_t>(dataset.val.size())).c_str());
  std::printf(
      "tokens per iteration will be: %s\n", nn::with_commas(o.batch_size * c.block_size).c_str());
  training::RunOptions shown = o;  // (its chunks are our micro-batches: said below, in our words)
  shown.chunk_rows = 0;
  training::print_data_parallel(shown, "windows");
  if (c.gradient_accumulation_steps > 1)
    std::printf(
        "gradient accumulation: %lld micro-batches of %lld windows an iteration, each with "
        "its own forward and backward, their gradients added in order\n",
        static_cast<long long>(c.gradient_accumulation_steps),
        static_cast<long long>(c.batch_size));
}

// ==== the training: train.py =====================================================================

// configure_optimizers' two groups: any parameter that is 2-D is weight decayed, otherwise not —
// all weight tensors in matmuls and embeddings decay, the biases and LayerNorms do not.
std::vector<optim::ParamGroup> configure_optimizers(const gpt::GPT& model, const Config& c) {
  std::vector<optim::ParamGroup> groups =
      optim::weight_decay_groups(model.parameters(), c.weight_decay);
  for (const auto& [group, what] :
      {std::pair{&groups[0], "decayed"}, std::pair{&groups[1], "non-decayed"}}) {
    int64_t numel = 0;
    for (const Tensor& p : group->params) numel += p.numel();
    std::printf("num %s parameter tensors: %zu, with %s parameters\n", what, group->params.size(),
        nn::with_commas(numel).c_str());
  }
  return groups;
}

// estimate_loss: the mean loss of eval_iters random batches of each split, in eval mode (no
// dropout) and without a graph. Every rank draws the batches (the stream stays the same on every
// rank); rank 0 alone computes them.
std::map<std::string, double> estimate_loss(gpt::GPT& model, const data::CharDataset& dataset,
    const Config& c, data::BatchStream& batches) {
  std::map<std::string, double> out;
  NoGradGuard no_grad;
  model.eval();
  for (const auto& [split, ids] :
      {std::pair{"train", &dataset.train}, std::pair{"val", &dataset.val}}) {
    double losses = 0;
    for (int64_t k = 0; k < c.eval_iters; ++k) {
      const data::WindowBatch batch = data::get_batch(*ids, c.batch_size, c.block_size, batches);
      if (dist::rank() == 0) losses += model.forward(batch.x, batch.y).loss.item();
    }
    out[split] = losses / static_cast<double>(c.eval_iters);
  }
  model.train();
  return out;
}

// sample.py: a continuation of "\n", temperature and top-k.
void sample(gpt::GPT& model, const data::CharDataset& dataset, const Config& c) {
  Generator generator(c.seed);
  const auto newline = dataset.stoi.find(U'\n');
  const std::vector<int64_t> start = {newline == dataset.stoi.end() ? 0 : newline->second};
  const std::vector<int64_t> ids =
      model.generate(start, c.sample, c.temperature, c.top_k, generator);
  std::printf("---------------\n%s\n---------------\n", data::decode(dataset, ids).c_str());
}

int train(Config& c, training::RunOptions& o) {
  // ---- the data, the checkpoint to resume ------------------------------------------------------
  uint32_t text_crc = 0;
  auto settings = [&](training::Layout& file) { describe(file, c, text_crc); };
  const std::optional<Checkpoint> resumed = training::open_run(o, kProgram, settings);
  set_run_options(c, o);
  const uint32_t saved_crc = text_crc;
  const data::CharDataset dataset = prepare(c, text_crc);
  if (resumed && saved_crc != text_crc)
    throw CheckpointError("checkpoint " + o.resume + ": the text it was trained on (" +
                          (c.text.empty() ? std::string("the fortunes") : c.text) +
                          ") has changed since");
  print_data(dataset, c, o);

  // ---- the model -------------------------------------------------------------------------------
  manual_seed(c.seed);  // the initial weights (and dropout's stream)
  gpt::GPT model({.block_size = c.block_size,
      .vocab_size = static_cast<int64_t>(dataset.itos.size()),
      .n_layer = c.n_layer,
      .n_head = c.n_head,
      .n_embd = c.n_embd,
      .dropout = c.dropout,
      .bias = c.bias});
  // report number of parameters (nanoGPT's line, and the exact count)
  std::printf("number of parameters: %.2fM (%s)\n",
      static_cast<double>(model.get_num_params()) / 1e6,
      nn::with_commas(model.get_num_params()).c_str());

  // ---- the optimizer, and get_lr: linear warm-up, cosine decay to min_lr, then min_lr ----------
  optim::AdamW optimizer(
      configure_optimizers(model, c), c.learning_rate, {c.beta1, c.beta2}, /*eps=*/1e-8);
  optim::Scheduler scheduler(optimizer,
      optim::nanogpt_schedule(c.warmup_iters, c.lr_decay_iters, c.min_lr / c.learning_rate));

  // ---- the run: the checkpoint's state, restored on --resume -----------------------------------
  data::BatchStream batches(c.seed);
  double best_val_loss = 1e9;  // really big number
  training::Run run(o, model, optimizer, scheduler, settings, kProgram, kProgram);
  run.track([&](training::Layout& file) {
    file.integer("batches.state", batches.state());
    file.real("best_val_loss", best_val_loss);
  });
  run.start(resumed);  // weights, AdamW's moments, the schedule, the generators: exactly
  training::StepOptions step_options = training::StepOptions::of(o, kProgram);
  if (c.grad_clip == 0) step_options.clip = std::numeric_limits<double>::infinity();  // no clip
  training::Step step(model, optimizer, scheduler, o.batch_size, step_options);
  training::LossLog loss_log(o, run.first_step());  // --loss-log
  auto evaluate = [&](int64_t iter_num) {
    const std::map<std::string, double> losses = estimate_loss(model, dataset, c, batches);
    std::printf("step %lld: train loss %.4f, val loss %.4f\n", static_cast<long long>(iter_num),
        losses.at("train"), losses.at("val"));
    best_val_loss = std::min(best_val_loss, losses.at("val"));
    std::fflush(stdout);
  };

  // ---- the training loop -----------------------------------------------------------------------
  // ag's step t (1, 2, …) is nanoGPT's iter_num t − 1: the update that makes t updates.
  training::IterationTimes times;  // each iteration's wall-clock and CPU time, for the summary
  training::StepProfiler profiler(o, run.first_step(), run.last_step());  // --profile N
  if (run.first_step() == 1) evaluate(0);
  for (int64_t t = run.first_step(); t <= run.last_step(); ++t) {
    profiler.step_begins(t);
    times.begin();
    // The step's global batch: gradient_accumulation_steps micro-batches, one after another.
    const data::WindowBatch batch =
        data::get_batch(dataset.train, o.batch_size, c.block_size, batches);
    // The mean loss of rows [first, last) of the batch and their weight (their number): Step
    // takes this rank's rows, micro-batch by micro-batch with accumulation, averages the ranks'
    // gradients under mpirun, clips at grad_clip, steps AdamW and the schedule.
    auto loss_of = [&](int64_t first, int64_t last) {
      const Tensor x = batch.x.narrow(0, first, last - first);  // (rows, T)
      const Tensor y = batch.y.narrow(0, first, last - first);  // (rows, T)
      return std::pair{model.forward(x, y).loss, static_cast<double>(last - first)};
    };
    const training::StepResult result = step.take(t, static_cast<double>(o.batch_size), loss_of);
    profiler.step_ends(t);
    if (result.diverged) return 1;
    const double dt_ms = times.end();
    loss_log.row(t, result.loss);
    if ((t - 1) % c.log_interval == 0)
      std::printf(
          "iter %lld: loss %.4f, time %.2fms\n", static_cast<long long>(t - 1), result.loss, dt_ms);
    if (t % c.eval_interval == 0 || t == o.steps) evaluate(t);
    const bool stop = run.stop_requested();  // Ctrl-C, on every rank after the same step
    if (run.save_due(t, stop)) run.save(t);
    if (stop) return run.interrupted_after(t);
  }
  if (run.stopped_early()) return 0;
  std::printf("best val loss %.4f\n", best_val_loss);
  // Not nanoGPT's: the median time of an iteration, the first 10 of this invocation left out.
  std::printf("%s", times.summary(10).c_str());
  if (c.sample > 0 && dist::rank() == 0) sample(model, dataset, c);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const auto mpi = training::start(kProgram, argc, argv);  // Ctrl-C, mpirun
  Config c;
  training::RunOptions o;
  CLI::App app{"ag-nanogpt: nanoGPT's GPT and its training recipe (model.py, train.py) in C++"};
  add_options(app, c);  // train.py's configuration, under its names (configurator.py)
  // how this invocation runs, saves and reports: --threads, --checkpoint, --resume, …
  training::add_invocation_options(app, o);
  return training::run_main(kProgram, app, argc, argv, [&] {
    set_run_options(c, o);
    if (const std::string problem = run_problem(c, o); !problem.empty())
      throw training::UsageError(problem);
    set_num_threads(o.threads);
    return train(c, o);
  });
}
