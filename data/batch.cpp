#include "data/batch.h"

namespace ag::data {

Batch make_batch(const std::vector<Example>& examples, int64_t source_steps, int64_t target_steps) {
  const int64_t B = static_cast<int64_t>(examples.size());
  std::vector<float> source(B * source_steps, TaskVocab::pad),
      decoder_input(B * target_steps, TaskVocab::pad), labels(B * target_steps, TaskVocab::pad),
      source_lens, label_lens;
  for (int64_t b = 0; b < B; ++b) {
    const Example& e = examples[static_cast<std::size_t>(b)];
    const int64_t ls = static_cast<int64_t>(e.source.size()),
                  lt = static_cast<int64_t>(e.target.size());
    if (ls + 1 > source_steps || lt + 1 > target_steps)
      fail<ShapeError>("make_batch: an example of lengths ", ls, " -> ", lt, " does not fit ",
          source_steps, " source and ", target_steps, " target steps");
    for (int64_t t = 0; t < ls; ++t) source[b * source_steps + t] = float(e.source[t]);
    source[b * source_steps + ls] = TaskVocab::eos;
    decoder_input[b * target_steps] = TaskVocab::bos;
    for (int64_t t = 0; t < lt; ++t) {
      decoder_input[b * target_steps + t + 1] = float(e.target[t]);
      labels[b * target_steps + t] = float(e.target[t]);
    }
    labels[b * target_steps + lt] = TaskVocab::eos;
    source_lens.push_back(float(ls + 1));
    label_lens.push_back(float(lt + 1));
  }
  return {tensor(source, {B, source_steps}), tensor(source_lens, {B}),
      tensor(decoder_input, {B, target_steps}), tensor(labels, {B, target_steps}),
      tensor(label_lens, {B})};
}

}  // namespace ag::data
