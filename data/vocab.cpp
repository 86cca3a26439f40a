#include "data/vocab.h"

#include <algorithm>
#include <charconv>

#include "autograd/error.h"
#include "data/utf8.h"

namespace ag::data {

namespace {

const std::string kUnk = "<unk>";

// d2l's count_corpus and sort: (token, count) in order of first appearance, then stably sorted
// by descending count.
template <class Token>
std::vector<std::pair<std::string_view, int64_t>> sorted_counts(const std::vector<Token>& tokens) {
  std::unordered_map<std::string_view, std::size_t> index;  // token -> its row in `counts`
  std::vector<std::pair<std::string_view, int64_t>> counts;
  for (const Token& token : tokens) {
    const std::string_view view(token);
    auto [it, inserted] = index.try_emplace(view, counts.size());
    if (inserted)
      counts.emplace_back(view, 1);
    else
      ++counts[it->second].second;
  }
  std::stable_sort(counts.begin(), counts.end(),
      [](const auto& a, const auto& b) { return a.second > b.second; });
  return counts;
}

}  // namespace

void Vocab::add(std::string token) {
  token_to_id_.emplace(token, size());
  id_to_token_.push_back(std::move(token));
}

Vocab::Vocab(const std::vector<std::string>& tokens, int64_t min_freq,
    const std::vector<std::string>& reserved_tokens)
    : Vocab(
          std::vector<std::string_view>(tokens.begin(), tokens.end()), min_freq, reserved_tokens) {}

Vocab::Vocab(const std::vector<std::string_view>& tokens, int64_t min_freq,
    const std::vector<std::string>& reserved_tokens) {
  if (min_freq < 0) fail<ValueError>("Vocab: min_freq must be >= 0, got ", min_freq);
  add(kUnk);
  for (const std::string& token : reserved_tokens) {
    if (contains(token))
      fail<ValueError>("Vocab: the reserved token '", token, "' ",
          token == kUnk ? "is <unk>, which is always id 0" : "is given twice");
    add(token);
  }
  const auto counts = sorted_counts(tokens);
  token_freqs_.reserve(counts.size());
  for (const auto& [token, count] : counts) token_freqs_.emplace_back(std::string(token), count);
  for (const auto& [token, count] : counts) {
    if (count < min_freq) break;
    if (!contains(token)) add(std::string(token));
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
  const auto it = token_to_id_.find(token);
  return it == token_to_id_.end() ? unk() : it->second;
}

bool Vocab::contains(std::string_view token) const {
  return token_to_id_.find(token) != token_to_id_.end();
}

std::vector<int64_t> Vocab::ids(const std::vector<std::string>& tokens) const {
  std::vector<int64_t> out;
  out.reserve(tokens.size());
  for (const std::string& token : tokens) out.push_back(id(token));
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

Vocab Vocab::deserialize(std::string_view text, const std::string& source) {
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
