// ag-nanogpt's configuration, apart from its training loop (train.cpp): train.py's globals under
// their names (Config), the command line that overrides them (configurator.py's --n_layer=… as
// --n-layer …), the check of a configuration that cannot run, and what of it a checkpoint saves
// (nanoGPT's checkpoint['config']).
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

#include "training/layout.h"
#include "training/run.h"

namespace ag_nanogpt {

// train.py's globals, with their names. The defaults are nanoGPT's README recipe for a CPU.
struct Config {
  // I/O
  int64_t eval_interval = 250;
  int64_t log_interval = 1;
  int64_t eval_iters = 20;
  std::string text;  // "": Debian's fortunes (nanoGPT: dataset = 'shakespeare_char')
  // data
  int64_t gradient_accumulation_steps = 1;
  int64_t batch_size = 12;  // the micro-batch, when gradient_accumulation_steps > 1
  int64_t block_size = 64;
  // model
  int64_t n_layer = 4, n_head = 4, n_embd = 128;
  double dropout = 0.0;
  bool bias = false;  // bias inside the LayerNorms and Linears?
  // adamw optimizer
  double learning_rate = 1e-3;
  int64_t max_iters = 2000;
  double weight_decay = 1e-1;
  double beta1 = 0.9, beta2 = 0.99;
  double grad_clip = 1.0;  // 0: no clipping
  // learning rate decay settings
  int64_t warmup_iters = 100;
  int64_t lr_decay_iters = 2000;
  double min_lr = 1e-4;
  // system
  uint64_t seed = 1337;  // nanoGPT: torch.manual_seed(1337 + seed_offset)
  // sampling at the end (nanoGPT's sample.py)
  int64_t sample = 0;  // characters to sample; 0: none
  double temperature = 0.8;
  int64_t top_k = 200;
};

// configurator.py: every field of Config as an option, nanoGPT's name with dashes.
void add_options(CLI::App& app, Config& c);

// The options ag::training's Run and Step read, from nanoGPT's (o.threads, o.checkpoint, … are
// the invocation's own and stay).
void set_run_options(const Config& c, ag::training::RunOptions& o);

// The largest sizes accepted: the checks come before anything is allocated.
constexpr int64_t kMaxWidth = 1 << 16, kMaxLayers = 1024, kMaxBlock = 1 << 20;

// Why the configuration cannot run ("" if it can), in nanoGPT's option names.
std::string config_problem(const Config& c);

// Why the run cannot start ("" if it can): config_problem, then what the ranks of mpirun need,
// then ag::training's run_options_problem on `o` (set from `c` by set_run_options, and completed
// by it).
std::string run_problem(const Config& c, ag::training::RunOptions& o);

// What defines the run, saved in its checkpoint and read back on --resume (nanoGPT's
// checkpoint['model_args'] and checkpoint['config']): each entry once, for the save and the load,
// with the CRC-32 of the text it trains on.
void describe(ag::training::Layout& file, Config& c, uint32_t& text_crc);

}  // namespace ag_nanogpt
