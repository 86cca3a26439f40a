#include "training/profile.h"

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <sstream>

#include "distributed/distributed.h"
#include "training/report.h"

namespace ag::training {

std::string profile_report(
    const profiler::profile& profile, int64_t first_step, int64_t last_step, int64_t row_limit) {
  const int64_t steps = last_step - first_step + 1;
  std::ostringstream out;
  out << "profile of step" << (steps == 1 ? " " : "s ") << first_step;
  if (steps > 1) out << "-" << last_step;
  out << " (after a warm-up step), sorted by total time:\n";
  out << profile.key_averages().table("total", row_limit);
  char per_step[64];
  std::snprintf(per_step, sizeof per_step, "%.3f", profile.wall_ns() / 1e6 / steps);
  out << "Wall time per profiled step: " << per_step << " ms\n";
  return out.str();
}

StepProfiler::StepProfiler(const RunOptions& o, int64_t first_step, int64_t last_step)
    : trace_path_(o.profile_trace) {
  if (o.profile <= 0 || dist::rank() != 0) return;
  first_ = first_step + 1;  // first_step is the warm-up
  last_ = std::min(last_step, first_step + o.profile);
  if (last_ < first_)
    std::cout << "--profile: this run has no step after its warm-up step " << first_step
              << "; nothing is profiled\n";
}

StepProfiler::~StepProfiler() = default;

void StepProfiler::step_begins(int64_t step) {
  if (step == first_ && first_ <= last_) profile_ = std::make_unique<profiler::profile>();
}

void StepProfiler::step_ends(int64_t step) {
  if (step != last_ || !profile_) return;
  profile_->stop();
  // On a new line: a terminal's progress line is rewritten in place.
  std::cout << "\n" << profile_report(*profile_, first_, last_) << std::flush;
  if (!trace_path_.empty()) {
    profile_->export_chrome_trace(trace_path_);
    std::cout << "wrote the Chrome trace of the profiled steps to " << trace_path_
              << " (chrome://tracing or https://ui.perfetto.dev)\n";
  }
  profile_.reset();
}

}  // namespace ag::training
