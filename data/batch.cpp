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

Batch batch_rows(const Batch& batch, int64_t begin, int64_t end) {
  if (begin < 0 || begin > end || end > batch.size())
    fail<ValueError>(
        "batch_rows: rows [", begin, ", ", end, ") of a batch of ", batch.size(), " rows");
  const int64_t rows = end - begin;
  return {batch.source.narrow(0, begin, rows), batch.source_valid_lens.narrow(0, begin, rows),
      batch.decoder_input.narrow(0, begin, rows), batch.labels.narrow(0, begin, rows),
      batch.label_valid_lens.narrow(0, begin, rows)};
}

Batch random_batch(int64_t batch, int64_t source_steps, int64_t target_steps, int64_t vocab,
    Generator& generator) {
  if (batch < 1 || source_steps < 1 || target_steps < 1 || vocab < 4)
    fail<ValueError>("random_batch: batch ", batch, ", steps ", source_steps, " and ", target_steps,
        ", vocabulary ", vocab,
        " (positive sizes, a vocabulary above the 3 "
        "special tokens)");
  const int64_t B = batch, S = source_steps, T = target_steps;
  std::vector<float> source(B * S), decoder_input(B * T), labels(B * T);
  for (auto& x : source) x = float(generator.randint(3, vocab));
  for (auto& x : labels) x = float(generator.randint(3, vocab));
  for (int64_t b = 0; b < B; ++b) {
    decoder_input[b * T] = float(TaskVocab::bos);
    for (int64_t t = 1; t < T; ++t) decoder_input[b * T + t] = labels[b * T + t - 1];
  }
  return {tensor(source, {B, S}), full({B}, double(S)), tensor(decoder_input, {B, T}),
      tensor(labels, {B, T}), full({B}, double(T))};
}

}  // namespace ag::data
