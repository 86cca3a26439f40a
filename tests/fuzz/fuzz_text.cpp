// libFuzzer target for the text layer's parsers (the selector byte of fuzz_input.h chooses one):
//   decode_utf8        must decode or throw ValueError; what it decodes must encode back to the
//                      same bytes, tokenize into as many characters, go through
//                      preprocess_nmt and tokenize_words without an error, and give the same
//                      vocabulary and ids through TokenCounter and char_ids / word_ids;
//   Vocab::deserialize must parse or throw ValueError; a vocabulary it parses must serialize
//                      back to exactly the input (the text form is canonical);
//   parse_pairs        must parse or throw IoError; each pair holds no tab or newline, and
//                      pairs plus skipped lines are at most the input's lines.
// Anything else is a finding, as in fuzz_checkpoint.cpp. Build and run with tests/fuzz/run.sh.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "autograd/error.h"
#include "data/text.h"
#include "fuzz_input.h"

namespace {

[[noreturn]] void finding(const std::string& what) {
  std::fprintf(stderr, "ag-fuzz-text: %s\n", what.c_str());
  std::abort();
}

void fuzz_utf8(std::string_view input) {
  std::u32string code_points;
  try {
    code_points = ag::data::decode_utf8(input);
  } catch (const ag::ValueError&) {
    return;
  }
  try {
    if (ag::data::encode_utf8(code_points) != input)
      finding("decoded text does not encode back to the same bytes");
    if (ag::data::tokenize_chars(input).size() != code_points.size())
      finding("tokenize_chars does not give one token per code point");
    // The counting and encoding fast paths give what the token lists give.
    const std::vector<std::string> chars = ag::data::tokenize_chars(input);
    ag::data::TokenCounter char_counter;
    char_counter.add_chars(input);
    const ag::data::Vocab char_vocab(char_counter);
    if (char_vocab.id_to_token() != ag::data::Vocab(chars).id_to_token() ||
        char_vocab.char_ids(input) != char_vocab.ids(chars))
      finding("the character fast paths differ from tokenize_chars");
    const std::string preprocessed = ag::data::preprocess_nmt(input);
    if (ag::data::utf8_problem(preprocessed, "<preprocessed>") != "")
      finding("preprocess_nmt made invalid UTF-8");
    const std::vector<std::string> words = ag::data::tokenize_words(preprocessed);
    ag::data::TokenCounter word_counter;
    word_counter.add_words(preprocessed);
    const ag::data::Vocab word_vocab(word_counter);
    if (word_vocab.id_to_token() != ag::data::Vocab(words).id_to_token() ||
        word_vocab.word_ids(preprocessed) != word_vocab.ids(words))
      finding("the word fast paths differ from tokenize_words");
  } catch (const ag::Error& e) {
    finding(std::string("valid UTF-8 fails later: ") + e.what());
  }
}

void fuzz_vocab(std::string_view input) {
  std::string text;
  try {
    text = ag::data::Vocab::deserialize(input, "<fuzz>").serialize();
  } catch (const ag::ValueError&) {
    return;
  }
  if (text != input) finding("a parsed vocabulary does not serialize back to its text");
}

void fuzz_pairs(std::string_view input) {
  ag::data::PairsFile file;
  try {
    file = ag::data::parse_pairs(input, "<fuzz>");
  } catch (const ag::IoError&) {
    return;
  }
  const auto lines = static_cast<int64_t>(std::count(input.begin(), input.end(), '\n') + 1);
  if (file.pairs.empty() || static_cast<int64_t>(file.pairs.size()) + file.skipped_lines > lines)
    finding("pairs and skipped lines do not add up to the lines");
  for (const auto& pair : file.pairs)
    for (const std::string* side : {&pair.source, &pair.target})
      if (side->find_first_of("\t\n") != std::string::npos)
        finding("a pair holds a tab or a newline");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string_view input(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 3) {
    case ag_fuzz::text::kUtf8:
      fuzz_utf8(input);
      break;
    case ag_fuzz::text::kVocab:
      fuzz_vocab(input);
      break;
    default:
      fuzz_pairs(input);
      break;
  }
  return 0;
}
