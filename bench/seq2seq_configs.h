// The seq2seq configurations of the step benchmarks: d2l's Transformer at four sizes, timed by
// ag-bench-train (bench/bench_train.cpp, which says what each measures) and, tiny and small, run
// data-parallel by ag-ddp-equivalence; bench/bench_train_torch.py holds PyTorch's copy.
#pragma once

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "models/seq2seq.h"

namespace bench {

struct Config {
  std::string name;
  int64_t num_hiddens, ffn_num_hiddens, num_heads, num_layers;  // D, F, H, L
  int64_t batch, source_steps, target_steps, vocab;             // B, S, T, V
  int64_t default_steps;                                        // timed steps by default
};

// mha uses num_hiddens, num_heads, batch and source_steps (= T) only.
inline const std::vector<Config> kConfigs = {
    {"tiny", 32, 64, 4, 2, 64, 10, 10, 20, 100},
    {"small", 128, 512, 4, 2, 32, 32, 32, 32, 40},
    {"medium", 256, 1024, 8, 4, 32, 64, 64, 64, 20},
    {"mha", 256, 0, 8, 0, 32, 64, 0, 0, 40},
};

inline const Config& config_named(const std::string& name) {
  const auto it = std::find_if(
      kConfigs.begin(), kConfigs.end(), [&](const Config& c) { return c.name == name; });
  if (it == kConfigs.end()) throw std::invalid_argument("unknown benchmark config '" + name + "'");
  return *it;
}

// The Transformer of a seq2seq config (not mha) with this dropout.
inline ag::seq2seq::ModelConfig model_config(const Config& c, double dropout) {
  ag::seq2seq::ModelConfig mc;
  mc.vocab_size = c.vocab;
  mc.num_hiddens = c.num_hiddens;
  mc.ffn_num_hiddens = c.ffn_num_hiddens;
  mc.num_heads = c.num_heads;
  mc.num_layers = c.num_layers;
  mc.dropout = dropout;
  return mc;
}

}  // namespace bench
