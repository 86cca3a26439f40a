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
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ag::data {

// The hash table of TokenCounter and Vocab: token -> row, where the rows (the tokens) live in
// the owner's vector and the table holds only each row's number and 32 bits of its hash. Open
// addressing with linear probing in a power-of-two array at most half full: one lookup is a hash,
// usually one probe and one string comparison, and no allocation; a copy of the owner copies
// the table with its rows, so nothing points into another object.
class TokenTable {
 public:
  static uint64_t hash(std::string_view token);
  // The row holding `token` (token_of(row) gives a row's token), or -1.
  template <class TokenOf>
  int64_t find(std::string_view token, uint64_t hash, const TokenOf& token_of) const {
    if (slots_.empty()) return -1;
    const uint64_t mask = slots_.size() - 1, tag = hash >> 32;
    for (uint64_t i = hash & mask;; i = (i + 1) & mask) {
      const uint64_t slot = slots_[i];
      if (slot == 0) return -1;
      const auto row = static_cast<int64_t>((slot & 0xFFFFFFFFu) - 1);
      if ((slot >> 32) == tag && token_of(row) == token) return row;
    }
  }
  // Adds a row the caller has found absent. ValueError past 2^31 rows.
  void insert(uint64_t hash, int64_t row);
  int64_t size() const { return size_; }

 private:
  void place(uint64_t slot, uint64_t hash);
  std::vector<uint64_t> slots_;   // 0: empty; else (hash >> 32) << 32 | (row + 1)
  std::vector<uint64_t> hashes_;  // each row's hash, to grow without hashing again
  int64_t size_ = 0;
};

// d2l's count_corpus (a collections.Counter) fed one token at a time: the distinct tokens in
// order of first appearance with their counts. It copies a token only the first time it sees it,
// so counting a large corpus needs no string per token, and no list of all the tokens.
class TokenCounter {
 public:
  void add(std::string_view token);
  // Every code point of `text` as a token (tokenize_chars); ValueError for invalid UTF-8.
  void add_chars(std::string_view text);
  // Every token of `preprocessed_line` split on ' ' (tokenize_words); ValueError for invalid
  // UTF-8.
  void add_words(std::string_view preprocessed_line);
  // (token, count) in order of first appearance.
  const std::vector<std::pair<std::string, int64_t>>& counts() const { return counts_; }

 private:
  std::vector<std::pair<std::string, int64_t>> counts_;
  TokenTable table_;               // token -> its row in counts_
  int32_t ascii_index_[128] = {};  // once ascii_ready_: a one-byte token's row in counts_, or -1
  bool ascii_ready_ = false;
};

class Vocab {
 public:
  // Counts `tokens` (a flat list; d2l's count_corpus flattens a list of lines the same way).
  // Throws ValueError for min_freq < 0, and for reserved tokens that repeat or include <unk>.
  Vocab(const std::vector<std::string>& tokens, int64_t min_freq = 0,
      const std::vector<std::string>& reserved_tokens = {});
  // The same from counted tokens (views from tokenize_char_views and tokenize_word_views go
  // through TokenCounter::add: no string per token).
  Vocab(const TokenCounter& counter, int64_t min_freq = 0,
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
  // The ids of tokenize_chars(text), and of tokenize_words(preprocessed_line), without making
  // the tokens (ASCII characters through a table). ValueError for invalid UTF-8.
  std::vector<int64_t> char_ids(std::string_view text) const;
  std::vector<int64_t> word_ids(std::string_view preprocessed_line) const;
  const std::vector<std::string>& id_to_token() const { return id_to_token_; }
  const std::vector<std::pair<std::string, int64_t>>& token_freqs() const { return token_freqs_; }

  // The tokens in id order as one string (see vocab.cpp for the format):
  //   ag-vocab 1 <count>\n then one token a line, '\' and newline escaped as \\ and \n.
  // ValueError for a token that deserialize() would refuse (invalid UTF-8, a NUL byte), naming it.
  std::string serialize() const;
  // The inverse of serialize(). Strict: throws ValueError naming `source` and the byte offset
  // for a wrong header or count, a bad escape, invalid UTF-8, a repeated token, <unk> not at id
  // 0, or anything after the last token. With `expected_size` (a model's embedding rows), a
  // header that counts other than that many tokens is refused before a token is read: a damaged
  // model file's vocabulary of 10^7 tokens held 915 MB for 10 s before it was refused.
  static Vocab deserialize(std::string_view text, const std::string& source,
      std::optional<int64_t> expected_size = std::nullopt);

 private:
  Vocab() = default;
  void add(std::string token);
  std::vector<std::string> id_to_token_;
  TokenTable token_to_id_;  // token -> id
  std::vector<std::pair<std::string, int64_t>> token_freqs_;
};

// d2l's truncate_pad: the first num_steps ids of `line`, or `line` padded with `pad` to
// num_steps. ValueError for num_steps < 0.
std::vector<int64_t> truncate_pad(std::vector<int64_t> line, int64_t num_steps, int64_t pad);

}  // namespace ag::data
