#include "models/memory.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "autograd/error.h"

namespace ag::seq2seq {

void check_model_config(const ModelConfig& config, SettingNames names) {
  const bool options = names == SettingNames::options;
  // "--num-hiddens 0" or "config.num_hiddens = 0"
  auto setting = [&](const char* option, const char* key, const std::string& value) {
    return options ? std::string(option) + " " + value : std::string(key) + " = " + value;
  };
  auto size = [&](int64_t value, const char* option, const char* key) {
    if (value < 1 || value > kMaxModelSize)
      fail<ValueError>(setting(option, key, std::to_string(value)), " is not a model size (1 to ",
          kMaxModelSize, ")");
  };
  if (!options) size(config.vocab_size, "--vocab-size", "config.vocab_size");
  if (!options && config.target_vocab_size != 0)
    size(config.target_vocab_size, "--target-vocab-size", "config.target_vocab_size");
  size(config.num_hiddens, "--num-hiddens", "config.num_hiddens");
  size(config.ffn_num_hiddens, "--ffn-num-hiddens", "config.ffn_num_hiddens");
  size(config.num_heads, "--heads", "config.num_heads");
  size(config.num_layers, "--layers", "config.num_layers");
  if (config.num_hiddens % config.num_heads != 0)
    fail<ValueError>(setting("--heads", "config.num_heads", std::to_string(config.num_heads)),
        " does not divide ",
        setting("--num-hiddens", "config.num_hiddens", std::to_string(config.num_hiddens)));
  if (!(config.dropout >= 0 && config.dropout < 1)) {
    std::ostringstream value;
    value << config.dropout;
    fail<ValueError>(
        setting("--dropout", "config.dropout", value.str()), " is not a probability in [0, 1)");
  }
}

uint64_t parameter_count(const ModelConfig& c) {
  const uint64_t V = static_cast<uint64_t>(c.vocab_size), D = static_cast<uint64_t>(c.num_hiddens),
                 F = static_cast<uint64_t>(c.ffn_num_hiddens),
                 L = static_cast<uint64_t>(c.num_layers),
                 Vt = static_cast<uint64_t>(c.target_vocab());
  // The embeddings V×D (source) and Vt×D (target), the output layer D×Vt + Vt; per layer (encoder
  // block and decoder block): 4 + 8 attention projections D×D without bias, two FFNs
  // D×F + F + F×D + D, 2 + 3 layer norms of 2D (weight and bias).
  return V * D + 2 * Vt * D + Vt + L * (12 * D * D + 2 * (2 * D * F + F + D) + 5 * 2 * D);
}

namespace {
constexpr double kFloat = 4;                // bytes of a float32
constexpr uint64_t kPositionalRows = 1000;  // nn::PositionalEncoding's max_len
}  // namespace

uint64_t state_dict_numbers(const ModelConfig& c) {
  return parameter_count(c) + 2 * kPositionalRows * static_cast<uint64_t>(c.num_hiddens);
}

namespace {

// A(B) of memory.h: the numbers one forward keeps for backward.
double saved_numbers(const ModelConfig& c, double B, double S, double T) {
  const double D = static_cast<double>(c.num_hiddens), F = static_cast<double>(c.ffn_num_hiddens),
               H = static_cast<double>(c.num_heads), L = static_cast<double>(c.num_layers),
               V = static_cast<double>(c.target_vocab());
  return B * ((L + 1) * (S + 2 * T) * (12 * D + 2 * F) + 3 * L * H * (S * S + T * T + T * S) +
                 3 * T * V);
}

double weight_bytes(const ModelConfig& c) {
  return kFloat * static_cast<double>(state_dict_numbers(c));
}

}  // namespace

MemoryEstimate estimate_training_bytes(const ModelConfig& c, int64_t batch_size,
    int64_t source_steps, int64_t target_steps, int64_t eval_size, bool checkpoints) {
  const double P = static_cast<double>(parameter_count(c)), S = static_cast<double>(source_steps),
               T = static_cast<double>(target_steps), N = static_cast<double>(eval_size);
  MemoryEstimate e;
  e.weights = weight_bytes(c);
  e.gradients = kFloat * P;
  e.optimizer = 2 * kFloat * P;
  e.activations = kFloat * saved_numbers(c, static_cast<double>(batch_size), S, T);
  e.evaluation = kFloat / 2 * saved_numbers(c, std::min(N, 256.0), S, T) + N * (24 * (S + T) + 256);
  e.saving = checkpoints ? 3 * 3 * kFloat * P : 0;
  return e;
}

MemoryEstimate estimate_inference_bytes(
    const ModelConfig& c, int64_t batch_size, int64_t source_steps, int64_t target_steps) {
  MemoryEstimate e;
  e.weights = weight_bytes(c);
  e.activations =
      kFloat * saved_numbers(c, static_cast<double>(batch_size), static_cast<double>(source_steps),
                   static_cast<double>(target_steps));
  return e;
}

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

void check_memory(const MemoryEstimate& estimate, uint64_t limit, const std::string& what,
    const std::string& limit_source) {
  if (estimate.total() > static_cast<double>(limit))
    fail<ValueError>(what, " needs about ", estimate.describe(), ", more than the ",
        format_bytes(static_cast<double>(limit)), " ", limit_source);
}

}  // namespace ag::seq2seq
