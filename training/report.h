// What a run prints and logs as it trains: the progress line (step, loss, tokens/s, ETA) —
// rewritten in place on a terminal, every 100 steps otherwise —, --loss-log's row per step, and
// the means a program's evaluation reports (the training loss since the previous evaluation, the
// last 100 steps'). Under mpirun, rank 0 alone prints and writes.
#pragma once

#include <chrono>
#include <cstdint>
#include <ctime>
#include <deque>
#include <fstream>
#include <string>
#include <vector>

#include "training/run.h"

namespace ag::training {

// A text file written a row at a time, each row starting with its step — each row flushed and
// checked, so that `tail -f` follows the run, a killed run keeps every row it wrote, and a full
// disk or a failing device ends the run with an IoError naming the file instead of a log that
// silently stops. A resumed run (first_step > 1) continues the file of the run it resumes: the
// rows of steps from first_step on — written by the run after its last checkpoint, before it was
// killed, and about to be taken again — are dropped first, so that every step has one row. A new
// or empty file gets the header.
class LogFile {
 public:
  LogFile() = default;
  LogFile(const std::string& path, const std::string& what, const std::string& header,
      int64_t first_step);
  bool is_open() const { return file_.is_open(); }
  void row(const std::string& text);  // text without its '\n'
  void close();

 private:
  std::ofstream file_;
  std::string path_, what_;
};

// --loss-log: a row "step,loss" per step, the loss as a hexadecimal float (exact, so that two
// runs' logs compare bit for bit), written by rank 0 alone; nothing when --loss-log is not given.
//   LossLog loss_log(o, run.first_step());   …   loss_log.row(step, loss);
class LossLog {
 public:
  LossLog(const RunOptions& o, int64_t first_step);
  void row(int64_t step, double loss);

 private:
  LogFile file_;
};

class Report {
 public:
  // `first_step` and `last_step`: this invocation's (Run): a resumed run continues --loss-log.
  Report(const RunOptions& o, int64_t first_step, int64_t last_step);

  // After each step, on every rank: `tokens`, the tokens this rank trained on in the step (summed
  // over the ranks here: a collective).
  void step(int64_t step, double loss, double tokens);

  // Whether to evaluate after `step`: every --eval-every steps and after the run's last step.
  bool evaluation_due(int64_t step) const;
  // The mean training loss since the previous call (or the start), for an evaluation's report.
  double take_train_loss();
  // The mean loss of the last (up to) 100 steps, and how many that is.
  double recent_loss() const;
  std::size_t recent_steps() const { return recent_losses_.size(); }
  // Seconds since the report was made (the run's start).
  double seconds() const;

 private:
  const RunOptions& o_;
  int64_t first_step_, last_step_;
  bool terminal_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  double last_live_line_ = -1;  // seconds() when the live line was last written
  LossLog loss_log_;
  double tokens_ = 0, loss_since_report_ = 0, loss_since_evaluation_ = 0;
  int64_t steps_since_report_ = 0, steps_since_evaluation_ = 0;
  std::deque<double> recent_losses_;
};

// Each iteration's wall-clock and CPU time (the process's, all its threads), and their medians:
// on a machine shared with other work, the CPU time shows the work, the wall-clock time also the
// waiting. The first iterations (warm-up: the allocator's cache, the first pages) are left out.
//   IterationTimes times;
//   times.begin();  …the iteration…  const double ms = times.end();
//   std::printf("%s", times.summary().c_str());
class IterationTimes {
 public:
  void begin();
  double end();  // the iteration's wall-clock milliseconds
  std::size_t count() const { return wall_ms_.size(); }
  // "time per iteration: median 50.12ms, CPU time median 49.88ms (iterations from 10 on)\n", or ""
  // when there are no more than `skip` iterations (the line bench/compare_nanogpt.sh reads).
  std::string summary(std::size_t skip = 10) const;

 private:
  std::chrono::steady_clock::time_point wall_start_;
  std::clock_t cpu_start_ = 0;
  std::vector<double> wall_ms_, cpu_ms_;
};

// The median of `values` (Python's statistics.median: the mean of the middle two of an even count);
// NaN for none.
double median(std::vector<double> values);

// "m:ss": 95.4 s -> "1:35".
std::string format_duration(double seconds);

}  // namespace ag::training
