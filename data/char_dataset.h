// A text as a character-level language-modelling dataset, nanoGPT's way (its
// data/shakespeare_char/prepare.py and train.py's get_batch): every character is a token, the
// vocabulary is the sorted set of the text's characters, the first 90 % train and the rest
// validate, and a batch is B windows of block_size characters at random offsets with their
// next-character targets. examples/nanogpt/ trains on it.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "autograd/tensor.h"

namespace ag::data {

struct CharDataset {
  std::u32string itos;               // id -> character
  std::map<char32_t, int64_t> stoi;  // character -> id
  std::vector<int64_t> train, val;   // the two splits' ids
  int64_t characters = 0;            // len(data)
};

// prepare.py: chars = sorted(list(set(data))); the first ⌊n · train_fraction⌋ characters train.
// Throws ValueError for a train_fraction outside (0, 1).
CharDataset char_dataset(const std::u32string& text, double train_fraction = 0.9);

// The text of token ids (decode = lambda l: ''.join([itos[i] for i in l])), in UTF-8. Throws
// ValueError for an id outside the vocabulary.
std::string decode(const CharDataset& dataset, const std::vector<int64_t>& ids);

// Where each batch's windows start: nanoGPT's torch.randint(len(data) - block_size, (B,)), drawn
// here from SplitMix64 (Steele, Lea & Flood 2014), six lines that bench/nanogpt_torch.py writes
// again in Python, so that both programs train and evaluate on the very same windows. An offset
// is next() mod (len(data) − block_size): its bias, under 2^-40 for texts below 2^24 characters,
// is far below the noise. Every rank draws every offset (the whole batch), so the stream is the
// same on every rank.
class BatchStream {
 public:
  explicit BatchStream(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  uint64_t& state() { return state_; }  // saved with a run and restored on --resume

 private:
  uint64_t state_;
};

// x: the windows data[i : i + block_size], y: the same shifted by one, data[i + 1 : i + 1 +
// block_size] — each y[b, t] is the character that follows x[b, 0..t].
struct WindowBatch {
  Tensor x, y;  // (rows, block_size) int64
};

// Throws ShapeError naming the split when the train or the validation split has no window of
// block_size characters with its next one (get_batch's need), so that a program can refuse a short
// text before it builds a model.
void check_windows(const CharDataset& dataset, int64_t block_size);

// get_batch: rows windows at offsets from `stream`. Throws ShapeError when data has no window of
// block_size + 1 characters, ValueError for rows or block_size below 1.
WindowBatch get_batch(
    const std::vector<int64_t>& data, int64_t rows, int64_t block_size, BatchStream& stream);

}  // namespace ag::data
