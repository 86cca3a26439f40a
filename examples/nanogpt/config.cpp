// ag-nanogpt's configuration (config.h): its options, its checks and its checkpoint entries, each
// under nanoGPT's name.
#include "config.h"

#include <cmath>

#include "distributed/distributed.h"
#include "io/checkpoint.h"
#include "training/cli.h"

namespace ag_nanogpt {

using namespace ag;

void add_options(CLI::App& app, Config& c) {
  app.add_option("--text", c.text, "the UTF-8 text to train on (default: Debian's fortunes)")
      ->type_name("FILE");
  training::add_whole_number(
      app, "--n-layer", c.n_layer, "Transformer blocks", int64_t{1}, kMaxLayers);
  training::add_whole_number(app, "--n-head", c.n_head, "attention heads", int64_t{1}, kMaxWidth);
  training::add_whole_number(
      app, "--n-embd", c.n_embd, "the embedding width", int64_t{1}, kMaxWidth);
  training::add_whole_number(
      app, "--block-size", c.block_size, "the context, in characters", int64_t{1}, kMaxBlock);
  app.add_option("--dropout", c.dropout, "dropout probability")->capture_default_str();
  app.add_flag("--bias", c.bias, "biases in the Linears and LayerNorms, like GPT-2");
  training::add_whole_number(app, "--batch-size", c.batch_size, "windows per micro-batch",
      int64_t{1}, training::kMaxBatchSize);
  training::add_whole_number(app, "--gradient-accumulation-steps", c.gradient_accumulation_steps,
      "micro-batches per iteration, their gradients added", int64_t{1}, training::kMaxBatchSize);
  training::add_whole_number(
      app, "--max-iters", c.max_iters, "training iterations", int64_t{1}, int64_t{1} << 40);
  app.add_option("--learning-rate", c.learning_rate, "the peak learning rate")
      ->capture_default_str();
  app.add_option("--min-lr", c.min_lr, "the learning rate at --lr-decay-iters and after")
      ->capture_default_str();
  training::add_whole_number(app, "--warmup-iters", c.warmup_iters, "iterations of linear warm-up",
      int64_t{0}, int64_t{1} << 40);
  training::add_whole_number(app, "--lr-decay-iters", c.lr_decay_iters,
      "the iteration where the cosine decay reaches --min-lr", int64_t{1}, int64_t{1} << 40);
  app.add_option("--weight-decay", c.weight_decay, "AdamW's weight decay of the >= 2-D parameters")
      ->capture_default_str();
  app.add_option("--beta1", c.beta1, "AdamW's beta1")->capture_default_str();
  app.add_option("--beta2", c.beta2, "AdamW's beta2")->capture_default_str();
  app.add_option("--grad-clip", c.grad_clip, "clip the gradients' global norm to this (0: none)")
      ->capture_default_str();
  training::add_whole_number(app, "--eval-interval", c.eval_interval,
      "evaluate every this many iterations", int64_t{1}, int64_t{1} << 40);
  training::add_whole_number(app, "--eval-iters", c.eval_iters,
      "batches of each split an evaluation averages", int64_t{1}, int64_t{1} << 20);
  training::add_whole_number(app, "--log-interval", c.log_interval,
      "print an iteration's loss and time every this many iterations", int64_t{1},
      int64_t{1} << 40);
  training::add_whole_number(
      app, "--seed", c.seed, "seeds the initial weights, dropout and the batches");
  training::add_whole_number(app, "--sample", c.sample,
      "after training, sample this many characters (sample.py)", int64_t{0}, int64_t{1} << 20);
  app.add_option("--temperature", c.temperature, "the sampling temperature")->capture_default_str();
  training::add_whole_number(
      app, "--top-k", c.top_k, "sample among the k likeliest characters", int64_t{1}, kMaxWidth);
}

void set_run_options(const Config& c, training::RunOptions& o) {
  o.steps = c.max_iters;
  // One step's global batch: gradient_accumulation_steps micro-batches of batch_size windows.
  o.batch_size = c.batch_size * c.gradient_accumulation_steps;
  o.lr = c.learning_rate;
  o.clip = c.grad_clip > 0 ? c.grad_clip : 1.0;  // (Step's clip is set in train: none for 0)
  o.seed = c.seed;
  o.eval_every = c.eval_interval;
  o.schedule = "constant";  // (the schedule is nanoGPT's get_lr, optim::nanogpt_schedule)
  // Gradient accumulation: each micro-batch its own forward and backward, the gradients added in
  // their order (nanoGPT's loop over micro_step with loss / gradient_accumulation_steps).
  o.chunk_rows = c.gradient_accumulation_steps > 1 ? c.batch_size : 0;
}

std::string config_problem(const Config& c) {
  auto positive = [](double x) { return x > 0 && std::isfinite(x); };
  auto non_negative = [](double x) { return x >= 0 && std::isfinite(x); };
  if (c.n_embd % c.n_head != 0)  // model.py: assert config.n_embd % config.n_head == 0
    return "--n-head " + std::to_string(c.n_head) + " does not divide --n-embd " +
           std::to_string(c.n_embd);
  if (c.batch_size * c.gradient_accumulation_steps > training::kMaxBatchSize)
    return "--batch-size x --gradient-accumulation-steps is above " +
           std::to_string(training::kMaxBatchSize) + " rows";
  if (!(c.dropout >= 0 && c.dropout < 1)) return "--dropout must be in [0, 1)";
  if (!positive(c.learning_rate)) return "--learning-rate must be a positive number";
  if (!non_negative(c.min_lr) || c.min_lr > c.learning_rate)
    return "--min-lr must be in [0, --learning-rate]";
  if (c.warmup_iters >= c.lr_decay_iters)
    return "--warmup-iters must be below --lr-decay-iters (get_lr's cosine runs between them)";
  if (!non_negative(c.weight_decay)) return "--weight-decay must not be negative";
  if (!(c.beta1 >= 0 && c.beta1 < 1) || !(c.beta2 >= 0 && c.beta2 < 1))
    return "--beta1 and --beta2 must be in [0, 1)";
  if (!non_negative(c.grad_clip)) return "--grad-clip must not be negative (0: no clipping)";
  if (!(c.temperature >= 0) || !std::isfinite(c.temperature))
    return "--temperature must not be negative (0: the most likely character)";
  return "";
}

std::string run_problem(const Config& c, training::RunOptions& o) {
  if (std::string problem = config_problem(c); !problem.empty()) return problem;
  // train.py: assert gradient_accumulation_steps % ddp_world_size == 0
  if (const int world = dist::world_size();
      c.gradient_accumulation_steps > 1 && c.gradient_accumulation_steps % world != 0)
    return "--gradient-accumulation-steps " + std::to_string(c.gradient_accumulation_steps) +
           " must be a multiple of the " + std::to_string(world) + " ranks";
  return training::run_options_problem(o);
}

void describe(training::Layout& file, Config& c, uint32_t& text_crc) {
  file.count("config.n_layer", c.n_layer, 1, kMaxLayers);
  file.count("config.n_head", c.n_head, 1, kMaxWidth);
  file.count("config.n_embd", c.n_embd, 1, kMaxWidth);
  file.count("config.block_size", c.block_size, 1, kMaxBlock);
  int64_t bias = c.bias ? 1 : 0;
  file.count("config.bias", bias, 0, 1);
  c.bias = bias == 1;
  file.real("config.dropout", c.dropout, 0.0);
  file.count("config.batch_size", c.batch_size, 1, training::kMaxBatchSize);
  file.count("config.gradient_accumulation_steps", c.gradient_accumulation_steps, 1,
      training::kMaxBatchSize);
  file.count("config.max_iters", c.max_iters, 1);
  file.real("config.learning_rate", c.learning_rate, 0.0);
  file.real("config.min_lr", c.min_lr, 0.0);
  file.count("config.warmup_iters", c.warmup_iters, 0);
  file.count("config.lr_decay_iters", c.lr_decay_iters, 1);
  file.real("config.weight_decay", c.weight_decay, 0.0);
  file.real("config.beta1", c.beta1, 0.0);
  file.real("config.beta2", c.beta2, 0.0);
  file.real("config.grad_clip", c.grad_clip, 0.0);
  // The evaluations draw their batches from the same stream as the training: they define the run.
  file.count("config.eval_interval", c.eval_interval, 1);
  file.count("config.eval_iters", c.eval_iters, 1, 1 << 20);
  file.integer("config.seed", c.seed);
  file.text("text.source", c.text);
  file.integer("text.crc32", text_crc);
  if (const std::string problem = config_problem(c); file.reading() && !problem.empty())
    throw CheckpointError("checkpoint " + file.path() + ": its run is refused: " + problem);
}

}  // namespace ag_nanogpt
