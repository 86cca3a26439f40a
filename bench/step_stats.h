// What the step benchmarks (ag-bench-train, ag-bench-lm) measure besides time: a process's memory
// from /proc/self/status, and the median of the steps' times.
#pragma once

#include <algorithm>
#include <fstream>
#include <string>
#include <vector>

namespace bench {

// A field of /proc/self/status ("VmHWM", "VmRSS") in MB (its kB / 1024); -1 if it has none.
inline double proc_status_mb(const std::string& field) {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind(field + ":", 0) == 0) return std::stod(line.substr(field.size() + 1)) / 1024.0;
  return -1;
}

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace bench
