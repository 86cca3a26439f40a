#include "data/vocab.h"

#include <algorithm>
#include <charconv>

#include "autograd/error.h"
#include "data/text.h"
#include "data/utf8.h"

namespace ag::data {

namespace {

const std::string kUnk = "<unk>";

}  // namespace

// FNV-1a over the bytes, then MurmurHash3's 64-bit finalizer so that every bit of the result
// depends on every byte (the table uses the low bits as the slot and the high bits as a tag).
uint64_t TokenTable::hash(std::string_view token) {
  uint64_t h = 0xcbf29ce484222325u;
  for (const char c : token) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3u;
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdu;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53u;
  h ^= h >> 33;
  return h;
}

void TokenTable::place(uint64_t slot, uint64_t hash) {
  const uint64_t mask = slots_.size() - 1;
  uint64_t i = hash & mask;
  while (slots_[i] != 0) i = (i + 1) & mask;
  slots_[i] = slot;
}

void TokenTable::insert(uint64_t hash, int64_t row) {
  if (row >= (int64_t{1} << 31))
    fail<ValueError>("a vocabulary or token count holds at most 2^31 distinct tokens");
  if (2 * (size_ + 1) > static_cast<int64_t>(slots_.size())) {  // keep it at most half full
    std::vector<uint64_t> old = std::move(slots_);
    slots_.assign(std::max<std::size_t>(16, 2 * old.size()), 0);
    for (const uint64_t slot : old)
      if (slot != 0) place(slot, hashes_[(slot & 0xFFFFFFFFu) - 1]);
  }
  if (static_cast<int64_t>(hashes_.size()) <= row)
    hashes_.resize(static_cast<std::size_t>(row) + 1);
  hashes_[static_cast<std::size_t>(row)] = hash;
  place(((hash >> 32) << 32) | static_cast<uint64_t>(row + 1), hash);
  ++size_;
}

void TokenCounter::add(std::string_view token) {
  const uint64_t hash = TokenTable::hash(token);
  const int64_t row =
      table_.find(token, hash, [&](int64_t r) -> const std::string& { return counts_[r].first; });
  if (row >= 0) {
    ++counts_[static_cast<std::size_t>(row)].second;
    return;
  }
  if (ascii_ready_ && token.size() == 1 && static_cast<unsigned char>(token[0]) < 128)
    ascii_index_[static_cast<unsigned char>(token[0])] = static_cast<int32_t>(counts_.size());
  table_.insert(hash, static_cast<int64_t>(counts_.size()));
  counts_.emplace_back(std::string(token), 1);
}

namespace {

void check_utf8(std::string_view text, const char* op) {
  const std::string problem = utf8_problem(text, "<text>");
  if (!problem.empty()) fail<ValueError>(op, ": ", problem);
}

}  // namespace

void TokenCounter::add_chars(std::string_view text) {
  check_utf8(text, "TokenCounter::add_chars");
  if (!ascii_ready_) {
    std::fill(std::begin(ascii_index_), std::end(ascii_index_), -1);
    for (std::size_t row = 0; row < counts_.size(); ++row)
      if (counts_[row].first.size() == 1 && static_cast<unsigned char>(counts_[row].first[0]) < 128)
        ascii_index_[static_cast<unsigned char>(counts_[row].first[0])] = static_cast<int32_t>(row);
    ascii_ready_ = true;
  }
  for (std::size_t at = 0; at < text.size();) {
    const auto lead = static_cast<unsigned char>(text[at]);
    if (lead < 128) {
      int32_t& row = ascii_index_[lead];
      if (row < 0) {
        add(std::string_view(&text[at], 1));  // sets row
      } else {
        ++counts_[static_cast<std::size_t>(row)].second;
      }
      ++at;
    } else {
      const std::size_t length = utf8_length(lead);
      add(text.substr(at, length));
      at += length;
    }
  }
}

void TokenCounter::add_words(std::string_view line) {
  check_utf8(line, "TokenCounter::add_words");
  std::size_t start = 0;
  while (true) {
    const std::size_t space = line.find(' ', start);
    if (space == std::string_view::npos) break;
    add(line.substr(start, space - start));
    start = space + 1;
  }
  add(line.substr(start));
}

void Vocab::add(std::string token) {
  token_to_id_.insert(TokenTable::hash(token), size());
  id_to_token_.push_back(std::move(token));
}

namespace {

TokenCounter count(const std::vector<std::string>& tokens) {
  TokenCounter counter;
  for (const std::string& token : tokens) counter.add(token);
  return counter;
}

}  // namespace

Vocab::Vocab(const std::vector<std::string>& tokens, int64_t min_freq,
    const std::vector<std::string>& reserved_tokens)
    : Vocab(count(tokens), min_freq, reserved_tokens) {}

Vocab::Vocab(const TokenCounter& counter, int64_t min_freq,
    const std::vector<std::string>& reserved_tokens) {
  if (min_freq < 0) fail<ValueError>("Vocab: min_freq must be >= 0, got ", min_freq);
  add(kUnk);
  for (const std::string& token : reserved_tokens) {
    if (contains(token))
      fail<ValueError>("Vocab: the reserved token '", token, "' ",
          token == kUnk ? "is <unk>, which is always id 0" : "is given twice");
    add(token);
  }
  // sorted(counter.items(), key=lambda x: x[1], reverse=True): stable, so ties keep the order
  // of first appearance.
  token_freqs_ = counter.counts();
  std::stable_sort(token_freqs_.begin(), token_freqs_.end(),
      [](const auto& a, const auto& b) { return a.second > b.second; });
  for (const auto& [token, count] : token_freqs_) {
    if (count < min_freq) break;
    if (!contains(token)) add(token);
  }
}

Vocab Vocab::from_tokens_in_id_order(std::vector<std::string> id_to_token) {
  if (id_to_token.empty() || id_to_token[0] != kUnk)
    fail<ValueError>("Vocab::from_tokens_in_id_order: id 0 must be <unk>, got ",
        id_to_token.empty() ? "no tokens" : "'" + id_to_token[0] + "'");
  Vocab vocab;
  for (std::string& token : id_to_token) {
    if (vocab.contains(token))
      fail<ValueError>("Vocab::from_tokens_in_id_order: the token '", token, "' at id ",
          vocab.size(), " is also id ", vocab.id(token));
    vocab.add(std::move(token));
  }
  return vocab;
}

int64_t Vocab::id(std::string_view token) const {
  const int64_t found = token_to_id_.find(token, TokenTable::hash(token),
      [&](int64_t i) -> const std::string& { return id_to_token_[static_cast<std::size_t>(i)]; });
  return found < 0 ? unk() : found;
}

bool Vocab::contains(std::string_view token) const {
  return token_to_id_.find(token, TokenTable::hash(token), [&](int64_t i) -> const std::string& {
    return id_to_token_[static_cast<std::size_t>(i)];
  }) >= 0;
}

std::vector<int64_t> Vocab::ids(const std::vector<std::string>& tokens) const {
  std::vector<int64_t> out;
  out.reserve(tokens.size());
  for (const std::string& token : tokens) out.push_back(id(token));
  return out;
}

std::vector<int64_t> Vocab::char_ids(std::string_view text) const {
  check_utf8(text, "Vocab::char_ids");
  int64_t ascii[128];
  for (int c = 0; c < 128; ++c)
    ascii[c] = id(std::string_view(std::string(1, static_cast<char>(c))));
  std::vector<int64_t> out;
  out.reserve(text.size());
  for (std::size_t at = 0; at < text.size();) {
    const auto lead = static_cast<unsigned char>(text[at]);
    if (lead < 128) {
      out.push_back(ascii[lead]);
      ++at;
    } else {
      const std::size_t length = utf8_length(lead);
      out.push_back(id(text.substr(at, length)));
      at += length;
    }
  }
  return out;
}

std::vector<int64_t> Vocab::word_ids(std::string_view line) const {
  check_utf8(line, "Vocab::word_ids");
  std::vector<int64_t> out;
  for_each_word(line, [&](std::string_view word) { out.push_back(id(word)); });
  return out;
}

const std::string& Vocab::token(int64_t id) const {
  if (id < 0 || id >= size())
    fail<ValueError>(
        "Vocab::token: id ", id, " is out of range for a vocabulary of ", size(), " tokens");
  return id_to_token_[static_cast<std::size_t>(id)];
}

std::vector<std::string> Vocab::tokens(const std::vector<int64_t>& ids) const {
  std::vector<std::string> out;
  out.reserve(ids.size());
  for (const int64_t i : ids) out.push_back(token(i));
  return out;
}

// The format, chosen to survive a JSON string (safetensors' __metadata__) and a human reading it:
//
//   ag-vocab 1 <number of tokens>\n
//   <token 0>\n          always <unk>
//   <token 1>\n ...
//
// A token is written as its UTF-8 with two escapes, so that the one-token-a-line layout holds
// for any token (a character tokenizer's tokens include " " and "\n", a word tokenizer's "",
// the empty string): '\' as "\\" and a newline as "\n". Nothing else is escaped, and the
// parser accepts nothing else after a '\', so every vocabulary has exactly one text.
std::string Vocab::serialize() const {
  std::string out = "ag-vocab 1 " + std::to_string(size()) + "\n";
  for (const std::string& token : id_to_token_) {
    // What deserialize() would refuse is not written: a model file must load again.
    if (const std::string problem =
            utf8_problem(token, "token " + std::to_string(&token - id_to_token_.data()));
        !problem.empty())
      fail<ValueError>(
          "Vocab::serialize: ", problem, " (a vocabulary file could not be read back)");
    for (const char c : token) {
      if (c == '\\')
        out += "\\\\";
      else if (c == '\n')
        out += "\\n";
      else
        out += c;
    }
    out += '\n';
  }
  return out;
}

Vocab Vocab::deserialize(
    std::string_view text, const std::string& source, std::optional<int64_t> expected_size) {
  const auto bad = [&](std::size_t offset, const std::string& why) {
    fail<ValueError>("Vocab::deserialize: ", source, ": ", why, " at byte ", offset);
  };
  const std::string problem = utf8_problem(text, source);
  if (!problem.empty()) fail<ValueError>("Vocab::deserialize: ", problem);
  const std::string_view magic = "ag-vocab 1 ";
  if (text.substr(0, magic.size()) != magic)
    bad(0, "not a vocabulary (it does not start with \"ag-vocab 1 \")");
  std::size_t at = magic.size();
  const std::size_t end_of_count = text.find('\n', at);
  if (end_of_count == std::string_view::npos) bad(at, "no newline after the token count");
  int64_t count = 0;
  const char* first = text.data() + at;
  const char* last = text.data() + end_of_count;
  const auto [stop, error] = std::from_chars(first, last, count);
  if (error != std::errc() || stop != last || first == last || *first == '+' || count < 1 ||
      (last - first > 1 && *first == '0'))
    bad(at, "the token count \"" + std::string(first, last) + "\" is not a whole number >= 1");
  if (expected_size && count != *expected_size)
    bad(at, "the token count " + std::to_string(count) + " is not the " +
                std::to_string(*expected_size) + " the model's embedding has");
  // Each token takes at least its newline: a count beyond the bytes left cannot be right, and
  // reserving for it would let a damaged file ask for any amount of memory.
  if (static_cast<uint64_t>(count) > text.size() - end_of_count - 1)
    bad(at, "the token count " + std::to_string(count) + " is more than the " +
                std::to_string(text.size() - end_of_count - 1) + " bytes that follow can hold");
  at = end_of_count + 1;
  Vocab vocab;
  vocab.id_to_token_.reserve(static_cast<std::size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    const std::size_t start = at;
    std::string token;
    while (true) {
      if (at >= text.size())
        bad(at, "token " + std::to_string(i) + " of " + std::to_string(count) +
                    " has no newline (the text ends)");
      const char c = text[at];
      if (c == '\n') break;
      if (c == '\\') {
        const char next = at + 1 < text.size() ? text[at + 1] : '\0';
        if (next == '\\')
          token += '\\';
        else if (next == 'n')
          token += '\n';
        else
          bad(at, "a bad escape (only \\\\ and \\n are escapes) in token " + std::to_string(i));
        at += 2;
        continue;
      }
      token += c;
      ++at;
    }
    ++at;  // the newline
    if (i == 0 && token != kUnk) bad(start, "token 0 is '" + token + "', not <unk>");
    if (vocab.contains(token))
      bad(start, "token " + std::to_string(i) + " '" + token + "' is also token " +
                     std::to_string(vocab.id(token)));
    vocab.add(std::move(token));
  }
  if (at != text.size())
    bad(at, std::to_string(text.size() - at) + " bytes follow the last of the " +
                std::to_string(count) + " tokens");
  return vocab;
}

std::vector<int64_t> truncate_pad(std::vector<int64_t> line, int64_t num_steps, int64_t pad) {
  if (num_steps < 0) fail<ValueError>("truncate_pad: num_steps must be >= 0, got ", num_steps);
  line.resize(static_cast<std::size_t>(num_steps), pad);
  return line;
}

}  // namespace ag::data
