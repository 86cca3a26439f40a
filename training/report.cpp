#include "training/report.h"

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <sstream>

#include "distributed/distributed.h"
#include "io/file.h"

namespace ag::training {

LogFile::LogFile(
    const std::string& path, const std::string& what, const std::string& header, int64_t first_step)
    : path_(path), what_(what) {
  namespace fs = std::filesystem;
  std::error_code error;
  std::string kept;  // the header and the rows of steps before first_step
  if (first_step > 1 && fs::is_regular_file(path, error) && fs::file_size(path, error) > 0) {
    std::istringstream rows(read_whole_file(path, what));
    for (std::string line; std::getline(rows, line);) {
      int64_t step = 0;
      const auto [end, parse_error] = std::from_chars(line.data(), line.data() + line.size(), step);
      if (parse_error != std::errc() || step < first_step) kept += line + '\n';
    }
    write_file_atomically(path, kept, what);
  }
  file_.open(path, kept.empty() ? std::ios::trunc : std::ios::app);
  if (!file_) throw IoError("cannot open " + what_ + " " + path_);
  if (kept.empty() && !header.empty()) row(header);
}

void LogFile::row(const std::string& text) {
  file_ << text << '\n' << std::flush;
  if (!file_) throw IoError("writing " + what_ + " " + path_ + " failed (is the disk full?)");
}

void LogFile::close() {
  if (!file_.is_open()) return;
  file_.close();
  if (!file_) throw IoError("closing " + what_ + " " + path_ + " failed (is the disk full?)");
}

void IterationTimes::begin() {
  wall_start_ = std::chrono::steady_clock::now();
  cpu_start_ = std::clock();
}

double IterationTimes::end() {
  const std::chrono::duration<double, std::milli> wall =
      std::chrono::steady_clock::now() - wall_start_;
  wall_ms_.push_back(wall.count());
  cpu_ms_.push_back(1000.0 * static_cast<double>(std::clock() - cpu_start_) / CLOCKS_PER_SEC);
  return wall.count();
}

std::string IterationTimes::summary(std::size_t skip) const {
  if (wall_ms_.size() <= skip) return "";
  const auto from_skip = [skip](const std::vector<double>& v) {
    return median(std::vector<double>(v.begin() + static_cast<std::ptrdiff_t>(skip), v.end()));
  };
  char line[160];
  std::snprintf(line, sizeof line,
      "time per iteration: median %.2fms, CPU time median %.2fms (iterations from %zu on)\n",
      from_skip(wall_ms_), from_skip(cpu_ms_), skip);
  return line;
}

double median(std::vector<double> values) {
  const std::size_t n = values.size();
  if (n == 0) return std::numeric_limits<double>::quiet_NaN();
  std::sort(values.begin(), values.end());
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

std::string format_duration(double seconds) {
  const int64_t s = static_cast<int64_t>(seconds + 0.5);
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%lld:%02lld", static_cast<long long>(s / 60),
      static_cast<long long>(s % 60));
  return buffer;
}

LossLog::LossLog(const RunOptions& o, int64_t first_step) {
  if (dist::rank() == 0 && !o.loss_log.empty())
    file_ = LogFile(o.loss_log, "--loss-log", "step,loss", first_step);
}

void LossLog::row(int64_t step, double loss) {
  if (!file_.is_open()) return;
  std::ostringstream row;
  row << step << ',' << std::hexfloat << loss;
  file_.row(row.str());
}

Report::Report(const RunOptions& o, int64_t first_step, int64_t last_step)
    : o_(o),
      first_step_(first_step),
      last_step_(last_step),
      terminal_(isatty(STDOUT_FILENO) == 1),
      loss_log_(o, first_step) {}

void Report::step(int64_t step, double loss, double tokens) {
  loss_log_.row(step, loss);
  tokens_ += dist::world_size() > 1 ? dist::all_reduce_sum(tokens) : tokens;
  loss_since_report_ += loss;
  ++steps_since_report_;
  loss_since_evaluation_ += loss;
  ++steps_since_evaluation_;
  recent_losses_.push_back(loss);
  if (recent_losses_.size() > 100) recent_losses_.pop_front();
  const bool evaluate_now = evaluation_due(step);
  const double elapsed = seconds();
  const double eta = elapsed / static_cast<double>(step - first_step_ + 1) *
                     static_cast<double>(last_step_ - step);
  if (terminal_) {
    // One live line, rewritten in place — at most ten times a second, and at an evaluation: a
    // small model runs hundreds of steps a second, and under mpirun a line a step fills the pipe
    // to mpirun, which stops reading it when it ends a job (a Ctrl-C), so rank 0 blocked in
    // printf until killed instead of saving.
    if (elapsed - last_live_line_ < 0.1 && !evaluate_now) return;
    last_live_line_ = elapsed;
    std::printf("\rstep %lld/%lld  loss %.4f  %.0f tokens/s  ETA %s   ",
        static_cast<long long>(step), static_cast<long long>(o_.steps), loss, tokens_ / elapsed,
        format_duration(eta).c_str());
    if (evaluate_now) std::printf("\n");
    std::fflush(stdout);
  } else if (step % 100 == 0 || evaluate_now) {
    std::printf("step %lld/%lld  loss %.4f  %.0f tokens/s  ETA %s\n", static_cast<long long>(step),
        static_cast<long long>(o_.steps),
        loss_since_report_ / static_cast<double>(steps_since_report_), tokens_ / elapsed,
        format_duration(eta).c_str());
    loss_since_report_ = 0;
    steps_since_report_ = 0;
    std::fflush(stdout);
  }
}

bool Report::evaluation_due(int64_t step) const {
  return step % o_.eval_every == 0 || step == o_.steps;
}

double Report::take_train_loss() {
  const double mean = steps_since_evaluation_ > 0
                          ? loss_since_evaluation_ / static_cast<double>(steps_since_evaluation_)
                          : 0;
  loss_since_evaluation_ = 0;
  steps_since_evaluation_ = 0;
  return mean;
}

double Report::recent_loss() const {
  double recent = 0;
  for (double l : recent_losses_) recent += l;
  return recent_losses_.empty() ? 0 : recent / static_cast<double>(recent_losses_.size());
}

double Report::seconds() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

}  // namespace ag::training
