#include "data/text.h"

#include <locale.h>
#include <wctype.h>

#include <algorithm>
#include <iterator>

#include "autograd/error.h"

namespace ag::data {

namespace {

void check_text(std::string_view text, const char* op) {
  const std::string problem = utf8_problem(text, "<text>");
  if (!problem.empty()) fail<ValueError>(op, ": ", problem);
}

// glibc's C.UTF-8 locale, whose LC_CTYPE tables are Unicode's (made once, never freed).
locale_t unicode_locale() {
  static const locale_t locale = [] {
    const locale_t made = newlocale(LC_CTYPE_MASK, "C.UTF-8", static_cast<locale_t>(nullptr));
    if (made == static_cast<locale_t>(nullptr))
      fail<RuntimeError>("lower_case: the C library has no C.UTF-8 locale (glibc >= 2.35 has)");
    return made;
  }();
  return locale;
}

char32_t simple_lower(char32_t c, locale_t locale) {
  if (c < 0x80) return (c >= 'A' && c <= 'Z') ? c + ('a' - 'A') : c;
  return static_cast<char32_t>(towlower_l(static_cast<wint_t>(c), locale));
}

// Unicode's Cased property (approximately: a letter with a case mapping, or one the tables call
// upper or lower case).
bool is_cased(char32_t c, locale_t locale) {
  const auto w = static_cast<wint_t>(c);
  return iswupper_l(w, locale) || iswlower_l(w, locale) || towlower_l(w, locale) != w ||
         towupper_l(w, locale) != w;
}

// Unicode's Case_Ignorable property, approximately: apostrophes, the period, colon and the other
// ASCII/Latin-1 members, modifier letters and symbols (U+02B0–U+02FF), and the combining marks
// of the blocks European text uses.
bool is_case_ignorable(char32_t c) {
  static constexpr char32_t kSingles[] = {U'\'', U'.', U':', U'^', U'`', 0x00A8, 0x00AD, 0x00AF,
      0x00B4, 0x00B7, 0x00B8, 0x0374, 0x0375, 0x037A, 0x0384, 0x0385, 0x0387, 0x2018, 0x2019,
      0x2024, 0x2027, 0xFE13, 0xFE52, 0xFE55, 0xFF07, 0xFF0E, 0xFF1A};
  if (std::find(std::begin(kSingles), std::end(kSingles), c) != std::end(kSingles)) return true;
  return (c >= 0x02B0 && c <= 0x036F) || (c >= 0x0483 && c <= 0x0489) ||
         (c >= 0x1AB0 && c <= 0x1AFF) || (c >= 0x1DC0 && c <= 0x1DFF) ||
         (c >= 0x200B && c <= 0x200F) || (c >= 0x20D0 && c <= 0x20FF) ||
         (c >= 0xFE00 && c <= 0xFE0F) || (c >= 0xFE20 && c <= 0xFE2F);
}

// Σ (U+03A3) at position i is final — lower-cased to ς, not σ — when, as CPython's
// handle_capital_sigma writes Unicode's Final_Sigma condition,
//   \p{cased} \p{case-ignorable}* U+03A3 !( \p{case-ignorable}* \p{cased} ).
bool is_final_sigma(const std::u32string& text, std::size_t i, locale_t locale) {
  std::size_t j = i;
  while (j > 0 && is_case_ignorable(text[j - 1])) --j;
  if (j == 0 || !is_cased(text[j - 1], locale)) return false;
  std::size_t k = i + 1;
  while (k < text.size() && is_case_ignorable(text[k])) ++k;
  return k == text.size() || !is_cased(text[k], locale);
}

// Python's str.lower() of code points (see text.h), into `out`.
void lower_code_points(const std::u32string& text, std::u32string& out) {
  const locale_t locale = unicode_locale();
  out.clear();
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char32_t c = text[i];
    if (c == 0x0130) {  // İ: SpecialCasing.txt's one unconditional full lower-case mapping
      out += U'i';
      out += char32_t{0x0307};
    } else if (c == 0x03A3) {
      out += is_final_sigma(text, i, locale) ? char32_t{0x03C2} : char32_t{0x03C3};
    } else {
      out += simple_lower(c, locale);
    }
  }
}

template <class Token>
std::vector<Token> split_chars(std::string_view text) {
  check_text(text, "tokenize_chars");
  std::vector<Token> tokens;
  tokens.reserve(text.size());
  for (std::size_t at = 0; at < text.size();) {
    const std::size_t length = utf8_length(static_cast<unsigned char>(text[at]));
    tokens.emplace_back(text.substr(at, length));
    at += length;
  }
  return tokens;
}

template <class Token>
std::vector<Token> split_spaces(std::string_view line) {
  check_text(line, "tokenize_words");
  std::vector<Token> tokens;
  for_each_word(line, [&](std::string_view word) { tokens.emplace_back(word); });
  return tokens;
}

}  // namespace

std::vector<std::string> tokenize_chars(std::string_view text) {
  return split_chars<std::string>(text);
}

std::vector<std::string_view> tokenize_char_views(std::string_view text) {
  return split_chars<std::string_view>(text);
}

std::string lower_case(std::string_view text) {
  check_text(text, "lower_case");
  std::u32string lower;
  lower_code_points(decode_utf8(text), lower);
  return encode_utf8(lower);
}

// One line at a time (a line's end '\n' is neither cased nor case-ignorable, so Final_Sigma never
// looks across it), with ASCII lines — most of English and much of French — on a fast path that
// decodes nothing.
std::string preprocess_nmt(std::string_view text) {
  check_text(text, "preprocess_nmt");
  std::string out;
  out.reserve(text.size() + text.size() / 8);
  std::u32string line, lower;  // reused from line to line
  char32_t previous = U' ';    // the lower-cased code point before; none before the first
  const auto emit = [&](char32_t c) {
    const bool punctuation = c == U',' || c == U'.' || c == U'!' || c == U'?';
    if (punctuation && previous != U' ') out += ' ';
    append_utf8(c, out);
    previous = c;
  };
  for (std::size_t start = 0; start < text.size();) {
    std::size_t end = text.find('\n', start);
    end = end == std::string_view::npos ? text.size() : end + 1;
    const std::string_view piece = text.substr(start, end - start);
    start = end;
    const bool ascii = std::all_of(
        piece.begin(), piece.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; });
    if (ascii) {
      for (const char c : piece) emit(static_cast<char32_t>(c >= 'A' && c <= 'Z' ? c + 32 : c));
      continue;
    }
    line = decode_utf8(piece);
    for (char32_t& c : line)
      if (c == 0x202F || c == 0x00A0) c = U' ';  // narrow and ordinary no-break spaces
    lower_code_points(line, lower);
    for (const char32_t c : lower) emit(c);
  }
  return out;
}

std::vector<std::string> tokenize_words(std::string_view preprocessed_line) {
  return split_spaces<std::string>(preprocessed_line);
}

std::vector<std::string_view> tokenize_word_views(std::string_view preprocessed_line) {
  return split_spaces<std::string_view>(preprocessed_line);
}

}  // namespace ag::data
