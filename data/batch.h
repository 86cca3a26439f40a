// Batches for a sequence-to-sequence model, as d2l's train_seq2seq feeds it (teacher forcing).
//
// A source is its content tokens followed by <eos>, padded with <pad> to source_steps. The decoder
// reads <bos> followed by the target, and learns to predict the target followed by <eos>.
#pragma once

#include <cstdint>
#include <vector>

#include "autograd/generator.h"
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

// Rows [begin, end) of a batch, as views (no copy): one rank's share of a global batch in
// data-parallel training. ValueError naming the range and the batch size unless
// 0 <= begin <= end <= batch.size().
Batch batch_rows(const Batch& batch, int64_t begin, int64_t end);

// A batch of full-length random sequences, as the benchmarks train on: source and labels are
// batch × steps ids drawn uniformly from [3, vocab) (no <pad>, <bos> or <eos>; the source first,
// then the labels), the decoder input is <bos> followed by the labels' first target_steps − 1
// ids, and every valid length is the whole sequence (the masks remove nothing).
Batch random_batch(
    int64_t batch, int64_t source_steps, int64_t target_steps, int64_t vocab, Generator& generator);

}  // namespace ag::data
