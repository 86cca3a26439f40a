#include "models/memory_budget.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <optional>

#include "autograd/allocator.h"
#include "autograd/error.h"

namespace ag {

std::string format_bytes(double bytes) {
  const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int unit = 0;
  while (bytes >= 1024 && unit < 6) {
    bytes /= 1024;
    ++unit;
  }
  char text[64];
  if (unit == 0)
    std::snprintf(text, sizeof text, "%.0f bytes", bytes);
  else if (unit == 6 && bytes >= 1024)
    std::snprintf(text, sizeof text, "%.3g EiB", bytes);
  else
    std::snprintf(text, sizeof text, "%.3g %s", bytes, units[unit]);
  return text;
}

std::string MemoryEstimate::describe() const {
  std::string parts;
  auto part = [&](const char* name, double bytes) {
    if (bytes > 0)
      parts += (parts.empty() ? "" : ", ") + std::string(name) + " " + format_bytes(bytes);
  };
  part("weights", weights);
  part("gradients", gradients);
  part("Adam moments", optimizer);
  part("activations", activations);
  part("evaluation", evaluation);
  part("saving", saving);
  part("data", data);
  return format_bytes(total()) + " (" + parts + ")";
}

namespace {
// The first number in a file ("max" or a missing file: nothing).
std::optional<uint64_t> read_number(const char* path) {
  std::ifstream in(path);
  unsigned long long value = 0;
  if (in >> value) return value;
  return std::nullopt;
}
}  // namespace

uint64_t available_memory_bytes() {
  uint64_t available = UINT64_MAX;  // unknown: only --max-memory limits
  std::ifstream meminfo("/proc/meminfo");
  for (std::string line; std::getline(meminfo, line);) {
    unsigned long long kib = 0;
    if (std::sscanf(line.c_str(), "MemAvailable: %llu kB", &kib) == 1) available = kib * 1024;
  }
  if (available == UINT64_MAX) {
    const long pages = ::sysconf(_SC_AVPHYS_PAGES), page_size = ::sysconf(_SC_PAGESIZE);
    if (pages > 0 && page_size > 0)
      available = static_cast<uint64_t>(pages) * static_cast<uint64_t>(page_size);
  }
  // In a container the machine's memory is not ours: the control group's limit, less what the
  // group already uses, bounds it too (cgroup v2, then v1).
  for (const auto& [limit_path, usage_path] :
      {std::pair{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"},
          std::pair{"/sys/fs/cgroup/memory/memory.limit_in_bytes",
              "/sys/fs/cgroup/memory/memory.usage_in_bytes"}}) {
    const std::optional<uint64_t> limit = read_number(limit_path), usage = read_number(usage_path);
    if (limit && usage) {
      available = std::min(available, *limit > *usage ? *limit - *usage : 0);
      break;
    }
  }
  return available;
}

uint64_t parse_byte_size(const std::string& text) {
  auto refuse = [&]() -> uint64_t {
    fail<ValueError>("'", text,
        "' is not a memory size (a positive number of bytes, or with K, M, G or T: 512M, 4G)");
  };
  const char* begin = text.data();
  const char* end = text.data() + text.size();
  double number = 0;
  const auto [rest, error] = std::from_chars(begin, end, number, std::chars_format::fixed);
  if (error != std::errc() || rest == begin || !(number > 0) || !std::isfinite(number))
    return refuse();
  std::string unit(rest, end);
  for (char& ch : unit) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  if (unit.size() > 1 && unit.back() == 'B') unit.pop_back();  // "MB", "MiB" -> "M", "Mi"
  if (unit.size() > 1 && unit.back() == 'I') unit.pop_back();  // "Mi" -> "M"
  const std::string units = "KMGT";
  double scale = 1;
  if (unit == "B" || unit.empty()) {
    scale = 1;
  } else if (unit.size() == 1 && units.find(unit[0]) != std::string::npos) {
    scale = std::pow(1024.0, static_cast<double>(units.find(unit[0]) + 1));
  } else {
    return refuse();
  }
  const double bytes = std::floor(number * scale);
  if (bytes < 1 || bytes > std::ldexp(1.0, 62)) return refuse();
  return static_cast<uint64_t>(bytes);
}

void limit_cache_to_headroom(const MemoryEstimate& estimate, uint64_t limit) {
  const double headroom = static_cast<double>(limit) - estimate.total();
  const std::size_t allowed = headroom <= 0 ? 0 : static_cast<std::size_t>(headroom);
  set_cache_limit(std::min(cache_limit(), allowed));
}

void check_memory(const MemoryEstimate& estimate, uint64_t limit, const std::string& what,
    const std::string& limit_source) {
  if (estimate.total() > static_cast<double>(limit))
    fail<ValueError>(what, " needs about ", estimate.describe(), ", more than the ",
        format_bytes(static_cast<double>(limit)), " ", limit_source);
}

}  // namespace ag
