// ag against d2l's own Python: Vocab (ids, token_freqs, min_freq, reserved tokens, ties),
// preprocess_nmt + tokenize_nmt on French sentences, and Python's str.lower() on every code point.
// The expected values come from tests/data/fixtures/make_text_fixtures.py (d2l 0.17's code).
#include <catch2/catch.hpp>

#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "data/text.h"

using namespace ag::data;

namespace {

// The fixtures hold C strings, not std::string: thousands of std::string constructors in
// initializer lists take minutes to compile with ASan.
struct TokenFreq {
  const char* token;
  int64_t freq;
};
struct VocabCase {
  const char* name;
  std::vector<const char*> idx_to_token;
  std::vector<TokenFreq> token_freqs;
};

// A string and its lower case, as Python's str.lower() gives it.
struct LowerCase {
  const char* text;
  const char* lower;
};
struct CodePointLowerCase {
  char32_t code_point;
  const char* lower;
};

#include "fixtures/text_fixtures.inc"

// d2l's tokenize_nmt, on ag's tokenize_words: a line is used only if it has exactly one tab.
std::pair<std::vector<std::vector<std::string>>, std::vector<std::vector<std::string>>>
tokenize_nmt(const std::string& text) {
  std::vector<std::vector<std::string>> source, target;
  std::size_t start = 0;
  while (start <= text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(start, end - start);
    start = end + 1;
    const std::size_t tab = line.find('\t');
    if (tab == std::string::npos || line.find('\t', tab + 1) != std::string::npos) continue;
    source.push_back(tokenize_words(line.substr(0, tab)));
    target.push_back(tokenize_words(line.substr(tab + 1)));
  }
  return {source, target};
}

std::vector<std::string> strings(const std::vector<const char*>& c_strings) {
  return {c_strings.begin(), c_strings.end()};
}

std::vector<std::vector<std::string>> lines(const std::vector<std::vector<const char*>>& c_lines) {
  std::vector<std::vector<std::string>> out;
  for (const auto& line : c_lines) out.push_back(strings(line));
  return out;
}

}  // namespace

TEST_CASE("Vocab gives d2l's ids and token_freqs", "[data][text][fixture]") {
  const std::vector<std::string> reserved = {"<pad>", "<bos>", "<eos>"};
  const std::vector<std::string> words = tokenize_words(kWords);
  const std::vector<std::string> chars = tokenize_chars(kChars);
  const auto [source, target] = tokenize_nmt(preprocess_nmt(kFra));
  std::vector<std::string> source_flat, target_flat;  // d2l's count_corpus flattens the lines
  for (const auto& line : source) source_flat.insert(source_flat.end(), line.begin(), line.end());
  for (const auto& line : target) target_flat.insert(target_flat.end(), line.begin(), line.end());
  const std::map<std::string, Vocab> ag = {
      {"words", Vocab(words)},
      {"words min_freq 2", Vocab(words, 2)},
      {"words min_freq 3 reserved", Vocab(words, 3, reserved)},
      {"chars", Vocab(chars)},
      {"fra source min_freq 2 reserved", Vocab(source_flat, 2, reserved)},
      {"fra target min_freq 1 reserved", Vocab(target_flat, 1, reserved)},
  };
  REQUIRE(ag.size() == kVocabCases.size());
  for (const VocabCase& expected : kVocabCases) {
    INFO(expected.name);
    const Vocab& vocab = ag.at(expected.name);
    const std::vector<std::string> idx_to_token = strings(expected.idx_to_token);
    std::vector<std::pair<std::string, int64_t>> token_freqs;
    for (const TokenFreq& f : expected.token_freqs) token_freqs.emplace_back(f.token, f.freq);
    CHECK(vocab.id_to_token() == idx_to_token);
    CHECK(vocab.token_freqs() == token_freqs);
    for (std::size_t i = 0; i < idx_to_token.size(); ++i)
      CHECK(vocab.id(idx_to_token[i]) == static_cast<int64_t>(i));
    CHECK(Vocab::deserialize(vocab.serialize(), expected.name).id_to_token() == idx_to_token);
  }
}

TEST_CASE("preprocess_nmt and tokenize_words give d2l's French tokens", "[data][text][fixture]") {
  CHECK(preprocess_nmt(kFra) == kFraPreprocessed);
  const auto [source, target] = tokenize_nmt(preprocess_nmt(kFra));
  CHECK(source == lines(kFraSource));
  CHECK(target == lines(kFraTarget));
}

TEST_CASE(
    "parse_pairs of the preprocessed file gives d2l's tokenize_nmt", "[data][text][fixture]") {
  const PairsFile file = parse_pairs(preprocess_nmt(kFra), "fra.txt");
  CHECK(file.skipped_lines == 1);
  std::vector<std::vector<std::string>> source, target;
  for (const SentencePair& pair : file.pairs) {
    if (pair.source == "be calm .") continue;  // a third column: d2l drops the line, ag keeps it
    source.push_back(tokenize_words(pair.source));
    target.push_back(tokenize_words(pair.target));
  }
  CHECK(source == lines(kFraSource));
  CHECK(target == lines(kFraTarget));
}

TEST_CASE("lower_case is Python's str.lower() for every code point and final sigmas",
    "[data][text][fixture]") {
  for (const auto& [word, lower] : kSigmas) {
    INFO(word);
    CHECK(lower_case(word) == lower);
  }
  // Every code point but U+0000, the surrogates and '\n' (the separator), one a line, lower-cased in one call: a line
  // is Python's chr(c).lower(), which differs from chr(c) only for kLowerCase's code points.
  std::u32string all;
  for (char32_t c = 1; c <= 0x10FFFF; ++c) {
    if ((c >= 0xD800 && c <= 0xDFFF) || c == U'\n') continue;
    all += c;
    all += U'\n';
  }
  const std::string lower = lower_case(encode_utf8(all));
  std::map<char32_t, std::string_view> expected;
  for (const CodePointLowerCase& entry : kLowerCase)
    expected.emplace(entry.code_point, entry.lower);
  std::size_t at = 0, mismatches = 0;
  std::string same;
  for (std::size_t i = 0; i < all.size(); i += 2) {
    const char32_t c = all[i];
    const std::size_t end = lower.find('\n', at);
    const std::string_view got = std::string_view(lower).substr(at, end - at);
    at = end + 1;
    const auto it = expected.find(c);
    same.clear();
    append_utf8(c, same);
    const std::string_view want = it != expected.end() ? it->second : same;
    if (got != want && ++mismatches <= 10) {
      INFO("U+" << std::hex << static_cast<uint32_t>(c));
      CHECK(got == want);
    }
  }
  CHECK(mismatches == 0);
}
