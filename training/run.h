// A training run: its options, its checkpoint file, and the loop's bookkeeping — what every
// training program shares, whatever its model (examples/train/ for ag's tasks,
// examples/train_classifier.cpp for a model of your own).
//
//   training::RunOptions o;                              // --steps, --lr, --checkpoint, --resume, …
//   auto describe = [&](training::Layout& file) { ... };   // what defines the run, each entry once
//   std::optional<Checkpoint> resumed = training::open_run(o, "my-program", describe);
//   ... build the model, the optimizer and its schedule from the settings ...
//   training::Run run(o, model, optimizer, scheduler, describe, "my-program", "my-program");
//   run.track([&](training::Layout& f) { f.generator("generator.data", data_state); });
//   run.start(resumed);                                  // restores everything, exactly
//   for (int64_t step = run.first_step(); step <= run.last_step(); ++step) {
//     ... the step ...
//     const bool stop = run.stop_requested();            // Ctrl-C, on every rank after the same step
//     if (run.save_due(step, stop)) run.save(step);
//     if (stop) return run.interrupted_after(step);
//   }
//
// A checkpoint holds the run's whole state — "model.*" (the module's state_dict), "optimizer.*",
// "step", "scheduler.step", "generator.default.*" (dropout), the data's position (track), and the
// settings that define the run ("config.*", describe) — and under mpirun every rank's dropout
// generator ("data_parallel.world_size", "generator.default.rank<R>.*"). Layout (layout.h)
// describes each entry once, for the save and for the resume.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "io/checkpoint.h"
#include "nn/module.h"
#include "optim/optimizer.h"
#include "optim/schedule.h"
#include "training/layout.h"

namespace ag::training {

// The options every run shares (their command-line flags: cli.h, add_run_options).
struct RunOptions {
  // What defines the run: saved in its checkpoint, and taken from it on --resume (describe).
  int64_t steps = 1000;
  int64_t batch_size = 32;
  double lr = 1e-3;
  double clip = 1.0;
  std::string schedule = "cosine";  // constant | cosine | noam
  int64_t warmup = 0;               // 0: min(200, steps / 10)
  uint64_t seed = 0;
  // 0: a step's gradient from this rank's rows at once; C > 0: chunk by chunk, the same bits on
  // any world size whose ranks hold whole chunks (step.h).
  int64_t chunk_rows = 0;
  // How this invocation runs and reports.
  int threads = 1;
  int64_t eval_every = 500;
  std::string checkpoint;
  int64_t checkpoint_every = 0;  // 0: at each evaluation
  int64_t keep = 0;              // numbered copies PATH.step-N kept besides PATH
  std::string checkpoint_format = "binary";
  std::string resume;
  int64_t stop_after = 0;  // 0: run to --steps
  std::string loss_log;
  int64_t profile = 0;          // --profile N: profile N steps after a warm-up (training/profile.h)
  std::string profile_trace;    // --profile-trace: their Chrome trace
  bool skip_nonfinite = false;  // skip a step whose loss or gradient norm is NaN or ±inf
  bool oversubscribe = false;   // under mpirun: allow ranks × --threads above the cores
  std::string max_memory;       // "4G": the memory limit; "": what the machine has available
  uint64_t memory_limit = 0;    // in bytes, from --max-memory or what is available
  std::string memory_limit_source;
};

// The largest --batch-size: sizes are bounded before anything is multiplied or allocated.
constexpr int64_t kMaxBatchSize = int64_t{1} << 20;

// Why the run's sizes cannot be allocated ("" if they can): --batch-size above kMaxBatchSize. The
// same check for the command line's options and for a resumed checkpoint's.
std::string size_problem(const RunOptions& o);

// The entries of a run's definition every run has: config.steps, config.batch_size, config.lr,
// config.clip, config.schedule, config.warmup, config.seed, config.threads, config.chunk_rows
// (only when chunking). Reading them back keeps this invocation's --threads and says so when the
// run was saved with another number; a value out of its range, or sizes that size_problem refuses,
// are a CheckpointError.
void describe(Layout& file, RunOptions& o);

CheckpointFormat checkpoint_format(const RunOptions& o);

// The learning-rate factor of --schedule: constant; cosine (linear warm-up over --warmup steps,
// then cosine from 1 to min_factor at --steps); noam (the paper's schedule for width d_model,
// rescaled so that its peak, at the end of the warm-up, is 1 — the peak learning rate is --lr).
optim::Schedule make_schedule(const RunOptions& o, int64_t d_model, double min_factor = 0.0);

// What a run's first lines say under mpirun ("data-parallel on N ranks …") and with --chunk-rows;
// `unit` names a batch's rows ("examples", "windows").
void print_data_parallel(const RunOptions& o, const char* unit);

// --resume: the checked file (CheckpointError for one that is not a training run of `kind`), or
// nothing without --resume. With `settings`, the file's settings are read into the program's
// options through it (Layout::reader) — the same function Run saves them with.
std::optional<Checkpoint> open_run(const RunOptions& o, const std::string& kind = "ag-train",
    const std::function<void(Layout&)>& settings = {});

// Reports the temporary files that a save removed, left by earlier saves that were killed.
void report_removed(const std::string& program, const std::vector<std::string>& removed);

class Run {
 public:
  // `settings`: the program's own entries that define the run (its model's configuration,
  // vocabularies, data files), written with every save; the program reads them itself before it
  // builds the model (Layout::reader).
  Run(const RunOptions& o, nn::Module& model, optim::Optimizer& optimizer,
      optim::Scheduler& scheduler, std::function<void(Layout&)> settings,
      std::string program = "ag-train", std::string kind = "ag-train");

  // State beyond the model, the optimizer, the schedule and the default generator that the next
  // step depends on — a data generator, a position in shuffled data — saved and restored with the
  // run.
  void track(std::function<void(Layout&)> state);

  // Restores a resumed run's state (weights, optimizer moments, schedule, generators, tracked
  // state) and says so; then, under mpirun, gives each rank its own dropout stream. Call it once,
  // after the model, the optimizer and the tracked state exist.
  void start(const std::optional<Checkpoint>& resumed);

  int64_t first_step() const { return first_step_; }
  // --stop-after, or the run's last step.
  int64_t last_step() const { return last_step_; }

  // Ctrl-C (training/interrupt.h), on every rank after the same step (a collective).
  bool stop_requested() const;
  // Whether to save after `step`: every --checkpoint-every steps (0: every --eval-every), after
  // the last step, and when stopping.
  bool save_due(int64_t step, bool stop) const;
  // Saves the run after `step` to --checkpoint (atomically) and, with --keep K, a numbered copy
  // PATH.step-NNNNNNNN of which the newest K are kept. A collective: every rank calls it; rank 0
  // writes. Nothing without --checkpoint.
  void save(int64_t step);

  // "interrupted after step N; saved PATH": exit code 130.
  int interrupted_after(int64_t step) const;
  // Whether --stop-after ended this invocation before the run's last step (and says so).
  bool stopped_early() const;

 private:
  Checkpoint to_checkpoint(int64_t step);
  void write(const Checkpoint& c, int64_t step) const;

  const RunOptions& o_;
  nn::Module& model_;
  optim::Optimizer& optimizer_;
  optim::Scheduler& scheduler_;
  std::function<void(Layout&)> settings_;
  std::vector<std::function<void(Layout&)>> state_;
  std::string program_, kind_;
  int64_t first_step_ = 1, last_step_ = 0;
};

}  // namespace ag::training
