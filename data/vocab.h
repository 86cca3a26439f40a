// d2l's Vocab: tokens counted in a corpus and numbered by frequency, as d2l 0.17 (the seed's
// edition, zh-v2 section 8.2 "Text Preprocessing") writes it:
//
//   class Vocab:
//       def __init__(self, tokens=None, min_freq=0, reserved_tokens=None):
//           counter = count_corpus(tokens)            # collections.Counter
//           self._token_freqs = sorted(counter.items(), key=lambda x: x[1], reverse=True)
//           self.idx_to_token = ['<unk>'] + reserved_tokens
//           self.token_to_idx = {token: idx for idx, token in enumerate(self.idx_to_token)}
//           for token, freq in self._token_freqs:
//               if freq < min_freq:
//                   break
//               if token not in self.token_to_idx:
//                   self.idx_to_token.append(token)
//                   self.token_to_idx[token] = len(self.idx_to_token) - 1
//
// So: id 0 is <unk>, then the reserved tokens in the order given, then the corpus's tokens by
// descending frequency; Python's sort is stable and a Counter keeps insertion order, so equal
// frequencies keep the order of first appearance. The loop stops at the first frequency below
// min_freq. token_freqs() is d2l's token_freqs: every distinct token with its count, sorted so.
//
// A vocabulary travels inside model files (safetensors' __metadata__ is string -> string) as
// serialize()'s text, so that a trained model decodes without its corpus.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace ag::data {

class Vocab {
 public:
  // Counts `tokens` (a flat list; d2l's count_corpus flattens a list of lines the same way).
  // Throws ValueError for min_freq < 0, and for reserved tokens that repeat or include <unk>.
  Vocab(const std::vector<std::string>& tokens, int64_t min_freq = 0,
      const std::vector<std::string>& reserved_tokens = {});
  // The same from views (no string per token: the tokenizers' *_views give these).
  Vocab(const std::vector<std::string_view>& tokens, int64_t min_freq = 0,
      const std::vector<std::string>& reserved_tokens = {});
  // A vocabulary whose id i is id_to_token[i], as a model file stores it: id_to_token[0] must be
  // <unk> and no token may repeat (ValueError otherwise). token_freqs() is empty.
  static Vocab from_tokens_in_id_order(std::vector<std::string> id_to_token);

  int64_t size() const { return static_cast<int64_t>(id_to_token_.size()); }
  int64_t unk() const { return 0; }
  // The id of `token`, or unk() if the vocabulary does not hold it (d2l's vocab[token]).
  int64_t id(std::string_view token) const;
  bool contains(std::string_view token) const;
  std::vector<int64_t> ids(const std::vector<std::string>& tokens) const;
  // The token of `id`; ValueError for an id outside [0, size()) (d2l's to_tokens).
  const std::string& token(int64_t id) const;
  std::vector<std::string> tokens(const std::vector<int64_t>& ids) const;
  const std::vector<std::string>& id_to_token() const { return id_to_token_; }
  const std::vector<std::pair<std::string, int64_t>>& token_freqs() const { return token_freqs_; }

  // The tokens in id order as one string (see vocab.cpp for the format):
  //   ag-vocab 1 <count>\n then one token a line, '\' and newline escaped as \\ and \n.
  std::string serialize() const;
  // The inverse of serialize(). Strict: throws ValueError naming `source` and the byte offset
  // for a wrong header or count, a bad escape, invalid UTF-8, a repeated token, <unk> not at id
  // 0, or anything after the last token.
  static Vocab deserialize(std::string_view text, const std::string& source);

 private:
  Vocab() = default;
  void add(std::string token);
  // token -> id, looked up with a string_view (no string built per lookup).
  struct Hash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  std::vector<std::string> id_to_token_;
  std::unordered_map<std::string, int64_t, Hash, std::equal_to<>> token_to_id_;
  std::vector<std::pair<std::string, int64_t>> token_freqs_;
};

// d2l's truncate_pad: the first num_steps ids of `line`, or `line` padded with `pad` to
// num_steps. ValueError for num_steps < 0.
std::vector<int64_t> truncate_pad(std::vector<int64_t> line, int64_t num_steps, int64_t pad);

}  // namespace ag::data
