// Text for the language model and the translator: tokenizers as d2l and nanoGPT write them, with
// d2l's Vocab (data/vocab.h), UTF-8 (data/utf8.h), and the readers and batches of text files
// (data/text_corpus.h). Include this one header for all of it.
//
//   character tokens (nanoGPT's shakespeare_char, d2l's tokenize(lines, 'char')): one token per
//       Unicode code point, so "né" is ["n", "é"];
//   word tokens (d2l's preprocess_nmt + tokenize_nmt for English–French): lower case, non-breaking
//       spaces to spaces, a space before , . ! ? — then split on ' '.
//
// Every function here takes and returns UTF-8 and throws ValueError (naming the function, the
// byte offset and line) for text that is not valid UTF-8.
//
// For a large corpus, TokenCounter (data/vocab.h) counts characters or words and Vocab::char_ids
// and Vocab::word_ids encode them without a string per token; ag-bench-text measures both ways.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "data/text_corpus.h"
#include "data/utf8.h"
#include "data/vocab.h"

namespace ag::data {

// One token per code point, each that code point's UTF-8: tokenize_chars("né!") is
// {"n", "é", "!"}.
std::vector<std::string> tokenize_chars(std::string_view text);
// The same tokens as views into `text` (which must outlive them): no string per token.
std::vector<std::string_view> tokenize_char_views(std::string_view text);

// d2l's preprocess_nmt (section 9.5 "Machine Translation and the Dataset"):
//
//   def preprocess_nmt(text):
//       def no_space(char, prev_char):
//           return char in set(',.!?') and prev_char != ' '
//       text = text.replace('\u202f', ' ').replace('\xa0', ' ').lower()
//       out = [' ' + char if i > 0 and no_space(char, text[i - 1]) else char
//              for i, char in enumerate(text)]
//       return ''.join(out)
//
// Python's str.lower() is Unicode's full lower-case mapping; ag uses the C library's tables
// (towlower_l in glibc's C.UTF-8, the same Unicode version as Python 3.11 on Debian 12) plus the
// two rules of Unicode's SpecialCasing.txt that str.lower() applies: U+0130 (İ) becomes "i̇"
// (i + U+0307), and Σ at the end of a word becomes ς (Final_Sigma). The tests check every code
// point against Python's lower(). One difference remains: Final_Sigma's "cased" and
// "case-ignorable" properties are approximated (see lower_case in text.cpp), exact for Greek
// written with Greek, Latin and Cyrillic letters, combining accents and common punctuation.
std::string preprocess_nmt(std::string_view text);
// Python's str.lower() as above, on its own.
std::string lower_case(std::string_view text);

// d2l's tokenize_nmt splits a preprocessed line with line.split(' '): on every single space, so
// "a  b" gives {"a", "", "b"} and "" gives {""}, exactly as Python does.
std::vector<std::string> tokenize_words(std::string_view preprocessed_line);
// The same tokens as views into `preprocessed_line` (which must outlive them).
std::vector<std::string_view> tokenize_word_views(std::string_view preprocessed_line);

// The words of line.split(' ') one at a time, f(word) for each, as views into `line` (which must
// outlive them) and without a vector: what tokenize_words and Vocab::word_ids are made of. No check
// of the text (they check it first).
template <class F>
void for_each_word(std::string_view line, F&& f) {
  std::size_t start = 0;
  for (std::size_t space = line.find(' '); space != std::string_view::npos;
       space = line.find(' ', start)) {
    f(line.substr(start, space - start));
    start = space + 1;
  }
  f(line.substr(start));
}

}  // namespace ag::data
