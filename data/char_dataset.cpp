// A text as nanoGPT's character-level dataset (data/char_dataset.h).
#include "data/char_dataset.h"

#include <set>

#include "autograd/error.h"
#include "data/utf8.h"

namespace ag::data {

CharDataset char_dataset(const std::u32string& text, double train_fraction) {
  if (!(train_fraction > 0 && train_fraction < 1))
    fail<ValueError>("char_dataset: train_fraction ", train_fraction, " is not in (0, 1)");
  CharDataset d;
  // chars = sorted(list(set(data)))
  const std::set<char32_t> chars(text.begin(), text.end());
  d.itos.assign(chars.begin(), chars.end());
  for (std::size_t i = 0; i < d.itos.size(); ++i) d.stoi[d.itos[i]] = static_cast<int64_t>(i);
  // n = len(data); train_data = data[:int(n*0.9)]; val_data = data[int(n*0.9):]
  d.characters = static_cast<int64_t>(text.size());
  const auto n_train = static_cast<std::size_t>(static_cast<double>(text.size()) * train_fraction);
  for (std::size_t i = 0; i < text.size(); ++i)
    (i < n_train ? d.train : d.val).push_back(d.stoi.at(text[i]));
  return d;
}

std::string decode(const CharDataset& dataset, const std::vector<int64_t>& ids) {
  std::u32string text;
  for (int64_t id : ids) {
    if (id < 0 || id >= static_cast<int64_t>(dataset.itos.size()))
      fail<ValueError>(
          "decode: id ", id, " is outside the vocabulary of ", dataset.itos.size(), " characters");
    text.push_back(dataset.itos[static_cast<std::size_t>(id)]);
  }
  return encode_utf8(text);
}

void check_windows(const CharDataset& dataset, int64_t block_size) {
  for (const auto& [split, ids] :
      {std::pair{"train", &dataset.train}, std::pair{"val", &dataset.val}})
    if (static_cast<int64_t>(ids->size()) <= block_size)
      fail<ShapeError>("the text is too short: its ", split, " split has ", ids->size(),
          " characters, and a window of block_size ", block_size, " needs ", block_size + 1);
}

WindowBatch get_batch(
    const std::vector<int64_t>& data, int64_t rows, int64_t block_size, BatchStream& stream) {
  if (rows < 1 || block_size < 1)
    fail<ValueError>("get_batch: rows ", rows, " and block_size ", block_size, " must be >= 1");
  if (static_cast<int64_t>(data.size()) <= block_size)
    fail<ShapeError>("get_batch: a split of ", data.size(), " tokens has no window of block_size ",
        block_size, " with its next token");
  const auto range = static_cast<uint64_t>(data.size()) - static_cast<uint64_t>(block_size);
  std::vector<int64_t> x, y;
  for (int64_t b = 0; b < rows; ++b) {
    const auto i = static_cast<std::ptrdiff_t>(stream.next() % range);
    x.insert(x.end(), data.begin() + i, data.begin() + i + block_size);
    y.insert(y.end(), data.begin() + i + 1, data.begin() + i + 1 + block_size);
  }
  return {tensor(x, {rows, block_size}), tensor(y, {rows, block_size})};
}

}  // namespace ag::data
