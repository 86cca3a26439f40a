// --profile N and --profile-trace FILE (add_run_options, training/cli.h): the profiler of
// autograd/profiler.h over N steps of a run, after one warm-up step (whose first allocations and
// cold caches are not what a step costs), its table printed when they are done:
//
//   training::StepProfiler profiler(o, run.first_step(), run.last_step());
//   for (int64_t t = run.first_step(); t <= run.last_step(); ++t) {
//     profiler.step_begins(t);
//     ... the batch, step.take(...) ...
//     profiler.step_ends(t);
//     ... report, evaluation, checkpoints (not profiled) ...
//   }
//
// What it prints (rank 0 alone profiles under mpirun): torch.profiler's key_averages().table(),
// sorted by total time — a row per op forward, per op backward ("matmul_backward") and per
// record_function (the optimizer's step) —, the wall time of the profiled steps and the share of
// it the rows account for (the rest: the batch, the progress, what no op covers). With
// --profile-trace, the Chrome trace of those steps (chrome://tracing, ui.perfetto.dev).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "autograd/profiler.h"
#include "training/run.h"

namespace ag::training {

// The table of a finished profile of `steps` steps: a heading naming them, the table sorted by
// total time (at most `row_limit` rows; all when < 0), and the wall time per step.
std::string profile_report(const profiler::profile& profile, int64_t first_step, int64_t last_step,
    int64_t row_limit = -1);

class StepProfiler {
 public:
  // o.profile steps from first_step + 1 on (as many as there are up to last_step); none when
  // o.profile is 0. Says so at once when the run has no step after its warm-up step.
  StepProfiler(const RunOptions& o, int64_t first_step, int64_t last_step);
  ~StepProfiler();
  StepProfiler(const StepProfiler&) = delete;
  StepProfiler& operator=(const StepProfiler&) = delete;

  // Around step `step`: the first profiled step starts the profile; the last stops it, prints
  // profile_report and writes --profile-trace.
  void step_begins(int64_t step);
  void step_ends(int64_t step);

 private:
  int64_t first_ = 0, last_ = -1;  // the profiled steps; none when last_ < first_
  std::string trace_path_;
  std::unique_ptr<profiler::profile> profile_;
};

}  // namespace ag::training
