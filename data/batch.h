// Batches for a sequence-to-sequence model, as d2l's train_seq2seq feeds it (teacher forcing).
//
// A source is its content tokens followed by <eos>, padded with <pad> to source_steps. The decoder
// reads <bos> followed by the target, and learns to predict the target followed by <eos>.
#pragma once

#include <cstdint>
#include <vector>

#include "autograd/tensor.h"
#include "data/toy_tasks.h"

namespace ag::data {

// A batch as the model consumes it (all id tensors are float32 holding integers).
struct Batch {
  Tensor source;             // (B, Ts): content, <eos>, <pad>…
  Tensor source_valid_lens;  // (B,): content length + 1
  Tensor decoder_input;      // (B, Tt): <bos>, target, <pad>…
  Tensor labels;             // (B, Tt): target, <eos>, <pad>…
  Tensor label_valid_lens;   // (B,): target length + 1
  int64_t size() const { return source.size(0); }
};
Batch make_batch(const std::vector<Example>& examples, int64_t source_steps, int64_t target_steps);

}  // namespace ag::data
