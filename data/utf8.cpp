#include "data/utf8.h"

#include <algorithm>
#include <cstdio>

#include "autograd/error.h"

namespace ag::data {

namespace {

// "C0 80": the bytes of a bad sequence, for the message.
std::string hex_bytes(std::string_view bytes, std::size_t at, std::size_t count) {
  std::string out;
  char buffer[4];
  for (std::size_t i = at; i < std::min(bytes.size(), at + count); ++i) {
    std::snprintf(buffer, sizeof buffer, "%02X", static_cast<unsigned char>(bytes[i]));
    if (!out.empty()) out += ' ';
    out += buffer;
  }
  return out;
}

// The first problem in bytes[at..]: sets `code_point` and `length` for a good sequence and
// returns nullptr, or returns why the sequence at `at` is bad (and its byte count in `length`).
//
// The table of RFC 3629, section 4: the second byte's range depends on the first so that overlong
// forms (E0 80–9F, F0 80–8F), surrogates (ED A0–BF) and values past U+10FFFF (F4 90–BF) fail.
//   00–7F                   one byte
//   C2–DF  80–BF            two
//   E0     A0–BF  80–BF     three (E1–EC, EE–EF: 80–BF; ED: 80–9F)
//   F0     90–BF  80–BF  80–BF  four (F1–F3: 80–BF; F4: 80–8F)
const char* sequence_at(
    std::string_view bytes, std::size_t at, char32_t& code_point, std::size_t& length) {
  const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(bytes[at + i]); };
  const unsigned char lead = byte(0);
  if (lead == 0) {
    length = 1;
    return "a NUL byte (a binary file, not text)";
  }
  if (lead < 0x80) {
    code_point = lead;
    length = 1;
    return nullptr;
  }
  if (lead < 0xC0) {
    length = 1;
    return "a continuation byte without a lead byte";
  }
  if (lead < 0xC2) {
    length = 2;
    return "overlong encoding";
  }
  if (lead > 0xF4) {
    length = 1;
    return lead < 0xF8 ? "a code point beyond U+10FFFF" : "a byte that never occurs in UTF-8";
  }
  length = utf8_length(lead);
  unsigned char low = 0x80, high = 0xBF;  // the second byte's range
  if (lead == 0xE0) low = 0xA0;
  if (lead == 0xED) high = 0x9F;
  if (lead == 0xF0) low = 0x90;
  if (lead == 0xF4) high = 0x8F;
  for (std::size_t i = 1; i < length; ++i) {
    if (at + i >= bytes.size()) {
      length = i;
      return "a sequence cut short by the end of the text";
    }
    const unsigned char c = byte(i);
    if (c < 0x80 || c > 0xBF) {
      length = i;
      return "a sequence cut short (a byte that is not a continuation byte follows)";
    }
    if (i == 1 && (c < low || c > high)) {
      length = 2;
      if (lead == 0xED) return "a UTF-16 surrogate (U+D800-U+DFFF)";
      if (lead == 0xF4) return "a code point beyond U+10FFFF";
      return "overlong encoding";
    }
  }
  char32_t value = lead & (0xFF >> (length + 1));
  for (std::size_t i = 1; i < length; ++i) value = (value << 6) | (byte(i) & 0x3F);
  code_point = value;
  return nullptr;
}

// The message for a bad sequence at byte `at`.
std::string problem_message(std::string_view bytes, const std::string& source, std::size_t at,
    std::size_t length, const char* why) {
  const std::size_t line =
      1 + static_cast<std::size_t>(std::count(bytes.begin(), bytes.begin() + at, '\n'));
  return source + ": invalid UTF-8 at byte " + std::to_string(at) + " (line " +
         std::to_string(line) + "): " + why + " " +
         hex_bytes(bytes, at, std::max<std::size_t>(1, length));
}

// Walks `bytes`, calling emit(code_point) for each; returns the problem or "".
template <class Emit>
std::string walk(std::string_view bytes, const std::string& source, Emit&& emit) {
  std::size_t at = 0;
  const std::size_t n = bytes.size();
  while (at < n) {
    // ASCII fast path: most text is ASCII, one byte one code point.
    const unsigned char c = static_cast<unsigned char>(bytes[at]);
    if (c - 1u < 0x7Fu) {  // 01–7F
      emit(static_cast<char32_t>(c));
      ++at;
      continue;
    }
    char32_t code_point = 0;
    std::size_t length = 0;
    if (const char* why = sequence_at(bytes, at, code_point, length))
      return problem_message(bytes, source, at, length, why);
    emit(code_point);
    at += length;
  }
  return {};
}

}  // namespace

std::u32string decode_utf8(std::string_view bytes, const std::string& source) {
  std::u32string out;
  out.reserve(bytes.size());
  std::string problem = walk(bytes, source, [&](char32_t c) { out.push_back(c); });
  if (!problem.empty()) fail<ValueError>("decode_utf8: ", problem);
  out.shrink_to_fit();
  return out;
}

std::string utf8_problem(std::string_view bytes, const std::string& source) {
  return walk(bytes, source, [](char32_t) {});
}

void append_utf8(char32_t c, std::string& out) {
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xC0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += static_cast<char>(0xE0 | (c >> 12));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (c >> 18));
    out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  }
}

std::string encode_utf8(std::u32string_view code_points) {
  std::string out;
  out.reserve(code_points.size());
  for (std::size_t i = 0; i < code_points.size(); ++i) {
    const char32_t c = code_points[i];
    if ((c >= 0xD800 && c <= 0xDFFF) || c > 0x10FFFF) {
      char buffer[16];
      std::snprintf(buffer, sizeof buffer, "U+%04X", static_cast<unsigned>(c));
      fail<ValueError>("encode_utf8: code point ", i, " is ", buffer,
          c > 0x10FFFF ? ", beyond U+10FFFF" : ", a UTF-16 surrogate");
    }
    append_utf8(c, out);
  }
  return out;
}

std::size_t count_code_points(std::string_view valid_utf8) {
  std::size_t count = 0;
  for (const char c : valid_utf8) count += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return count;
}

}  // namespace ag::data
