// UTF-8: bytes to Unicode code points and back, strictly (RFC 3629), with errors that say where.
//
// Text in ag is UTF-8 bytes in a std::string; a character tokenizer works on code points, so that
// "é" is one token, not two bytes. Decoding refuses what Python's bytes.decode("utf-8") refuses:
// overlong forms (C0 80 for U+0000), UTF-16 surrogates (U+D800–U+DFFF), code points beyond
// U+10FFFF, stray continuation bytes and sequences cut short. It also refuses a NUL byte: text
// never holds one, and a file that does is binary (an image, a .dat index), not text.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace ag::data {

// The code points of `bytes`. Throws ValueError naming `source` (a file path, or "<text>"), the
// byte offset and line number (1-based, counting '\n') of the first bad byte, and why:
//   decode_utf8: <text>: invalid UTF-8 at byte 5 (line 1): overlong encoding C0 80
std::u32string decode_utf8(std::string_view bytes, const std::string& source = "<text>");

// UTF-8 of `code_points`. Throws ValueError for a surrogate or a value beyond U+10FFFF.
std::string encode_utf8(std::u32string_view code_points);
// Appends the UTF-8 of one code point (1–4 bytes) to `out`; the caller guarantees it is valid.
void append_utf8(char32_t code_point, std::string& out);

// The byte length of the UTF-8 sequence that starts with `lead` (1–4), or 0 if `lead` cannot
// start one. Only for text already validated by decode_utf8 or check_utf8.
inline std::size_t utf8_length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if (lead < 0xC2) return 0;
  if (lead < 0xE0) return 2;
  if (lead < 0xF0) return 3;
  if (lead < 0xF5) return 4;
  return 0;
}

// What is wrong with `bytes` as text, or "" if nothing: the same checks and message as
// decode_utf8 (without the "decode_utf8: " prefix), for readers that throw their own error type.
std::string utf8_problem(std::string_view bytes, const std::string& source);

// The number of code points of valid UTF-8 (bytes that are not continuation bytes).
std::size_t count_code_points(std::string_view valid_utf8);

}  // namespace ag::data
