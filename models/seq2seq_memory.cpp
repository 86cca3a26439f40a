#include "models/seq2seq_memory.h"

#include <algorithm>
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

// A(B) of seq2seq_memory.h: the numbers one forward keeps for backward.
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

double estimate_pairs_bytes(uint64_t bytes, uint64_t lines) {
  return 16.0 * static_cast<double>(bytes) + 512.0 * static_cast<double>(lines);
}

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

double estimate_beam_search_bytes(
    const ModelConfig& c, int64_t beam_size, int64_t source_steps, int64_t target_steps) {
  if (beam_size == 0) return 0;
  const double B = static_cast<double>(beam_size), V = static_cast<double>(c.target_vocab());
  return kFloat * saved_numbers(
                      c, B, static_cast<double>(source_steps), static_cast<double>(target_steps)) +
         B * V * (4 + 8 + 8);
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

}  // namespace ag::seq2seq
