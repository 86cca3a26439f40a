#include "viz/font.h"

#include <array>
#include <map>

namespace ag::viz {

namespace {

struct GlyphEntry {
  char c;
  std::array<const char*, 7> rows;
};

// Drawn for this project, one row per string, '#' ink.
constexpr GlyphEntry font[] = {
    {' ', {".....", ".....", ".....", ".....", ".....", ".....", "....."}},
    {'0', {".###.", "#...#", "#..##", "#.#.#", "##..#", "#...#", ".###."}},
    {'1', {"..#..", ".##..", "..#..", "..#..", "..#..", "..#..", ".###."}},
    {'2', {".###.", "#...#", "....#", "...#.", "..#..", ".#...", "#####"}},
    {'3', {"#####", "...#.", "..#..", "...#.", "....#", "#...#", ".###."}},
    {'4', {"...#.", "..##.", ".#.#.", "#..#.", "#####", "...#.", "...#."}},
    {'5', {"#####", "#....", "####.", "....#", "....#", "#...#", ".###."}},
    {'6', {"..##.", ".#...", "#....", "####.", "#...#", "#...#", ".###."}},
    {'7', {"#####", "....#", "...#.", "..#..", ".#...", ".#...", ".#..."}},
    {'8', {".###.", "#...#", "#...#", ".###.", "#...#", "#...#", ".###."}},
    {'9', {".###.", "#...#", "#...#", ".####", "....#", "...#.", ".##.."}},
    {'A', {".###.", "#...#", "#...#", "#####", "#...#", "#...#", "#...#"}},
    {'B', {"####.", "#...#", "#...#", "####.", "#...#", "#...#", "####."}},
    {'C', {".###.", "#...#", "#....", "#....", "#....", "#...#", ".###."}},
    {'D', {"###..", "#..#.", "#...#", "#...#", "#...#", "#..#.", "###.."}},
    {'E', {"#####", "#....", "#....", "####.", "#....", "#....", "#####"}},
    {'F', {"#####", "#....", "#....", "####.", "#....", "#....", "#...."}},
    {'G', {".###.", "#...#", "#....", "#.###", "#...#", "#...#", ".####"}},
    {'H', {"#...#", "#...#", "#...#", "#####", "#...#", "#...#", "#...#"}},
    {'I', {".###.", "..#..", "..#..", "..#..", "..#..", "..#..", ".###."}},
    {'J', {"..###", "...#.", "...#.", "...#.", "...#.", "#..#.", ".##.."}},
    {'K', {"#...#", "#..#.", "#.#..", "##...", "#.#..", "#..#.", "#...#"}},
    {'L', {"#....", "#....", "#....", "#....", "#....", "#....", "#####"}},
    {'M', {"#...#", "##.##", "#.#.#", "#.#.#", "#...#", "#...#", "#...#"}},
    {'N', {"#...#", "#...#", "##..#", "#.#.#", "#..##", "#...#", "#...#"}},
    {'O', {".###.", "#...#", "#...#", "#...#", "#...#", "#...#", ".###."}},
    {'P', {"####.", "#...#", "#...#", "####.", "#....", "#....", "#...."}},
    {'Q', {".###.", "#...#", "#...#", "#...#", "#.#.#", "#..#.", ".##.#"}},
    {'R', {"####.", "#...#", "#...#", "####.", "#.#..", "#..#.", "#...#"}},
    {'S', {".####", "#....", "#....", ".###.", "....#", "....#", "####."}},
    {'T', {"#####", "..#..", "..#..", "..#..", "..#..", "..#..", "..#.."}},
    {'U', {"#...#", "#...#", "#...#", "#...#", "#...#", "#...#", ".###."}},
    {'V', {"#...#", "#...#", "#...#", "#...#", "#...#", ".#.#.", "..#.."}},
    {'W', {"#...#", "#...#", "#...#", "#.#.#", "#.#.#", "#.#.#", ".#.#."}},
    {'X', {"#...#", "#...#", ".#.#.", "..#..", ".#.#.", "#...#", "#...#"}},
    {'Y', {"#...#", "#...#", ".#.#.", "..#..", "..#..", "..#..", "..#.."}},
    {'Z', {"#####", "....#", "...#.", "..#..", ".#...", "#....", "#####"}},
    {'<', {"...#.", "..#..", ".#...", "#....", ".#...", "..#..", "...#."}},
    {'>', {".#...", "..#..", "...#.", "....#", "...#.", "..#..", ".#..."}},
    {'-', {".....", ".....", ".....", "#####", ".....", ".....", "....."}},
    {'+', {".....", "..#..", "..#..", "#####", "..#..", "..#..", "....."}},
    {'.', {".....", ".....", ".....", ".....", ".....", ".##..", ".##.."}},
    {',', {".....", ".....", ".....", ".....", ".##..", "..#..", ".#..."}},
    {':', {".....", ".##..", ".##..", ".....", ".##..", ".##..", "....."}},
    {'(', {"...#.", "..#..", ".#...", ".#...", ".#...", "..#..", "...#."}},
    {')', {".#...", "..#..", "...#.", "...#.", "...#.", "..#..", ".#..."}},
    {'/', {".....", "....#", "...#.", "..#..", ".#...", "#....", "....."}},
    {'_', {".....", ".....", ".....", ".....", ".....", ".....", "#####"}},
    {'=', {".....", ".....", "#####", ".....", "#####", ".....", "....."}},
    {'?', {".###.", "#...#", "....#", "...#.", "..#..", ".....", "..#.."}},
    {'%', {"##...", "##..#", "...#.", "..#..", ".#...", "#..##", "...##"}},
    {'\'', {"..#..", "..#..", ".#...", ".....", ".....", ".....", "....."}},
    {'!', {"..#..", "..#..", "..#..", "..#..", "..#..", ".....", "..#.."}},
    {'[', {".###.", ".#...", ".#...", ".#...", ".#...", ".#...", ".###."}},
    {']', {".###.", "...#.", "...#.", "...#.", "...#.", "...#.", ".###."}},
    {'*', {".....", "..#..", "#.#.#", ".###.", "#.#.#", "..#..", "....."}},
};

const std::map<char, std::vector<std::string>>& glyph_table() {
  static const std::map<char, std::vector<std::string>> table = [] {
    std::map<char, std::vector<std::string>> t;
    for (const GlyphEntry& e : font)
      t[e.c] = std::vector<std::string>(e.rows.begin(), e.rows.end());
    return t;
  }();
  return table;
}

}  // namespace

const std::vector<std::string>& glyph(char c) {
  const auto& table = glyph_table();
  if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
  auto it = table.find(c);
  return it != table.end() ? it->second : table.at('?');
}

std::string font_characters() {
  std::string characters;
  for (const GlyphEntry& e : font) characters += e.c;
  return characters;
}

std::string drawable_text(const std::string& text) {
  // Latin-1's letters U+00C0 … U+00FF without their accents ("" where the font has no stand-in).
  static const char* const latin1[64] = {"A", "A", "A", "A", "A", "A", "AE", "C", "E", "E", "E",
      "E", "I", "I", "I", "I", "D", "N", "O", "O", "O", "O", "O", "", "O", "U", "U", "U", "U", "Y",
      "", "SS", "a", "a", "a", "a", "a", "a", "ae", "c", "e", "e", "e", "e", "i", "i", "i", "i",
      "d", "n", "o", "o", "o", "o", "o", "", "o", "u", "u", "u", "u", "y", "", "y"};
  std::string out;
  for (std::size_t i = 0; i < text.size();) {
    const auto byte = static_cast<unsigned char>(text[i]);
    if (byte < 0x80) {
      out += text[i++];
      continue;
    }
    // The length of a UTF-8 sequence by its lead byte, and its code point (a stray continuation
    // byte, a truncated or otherwise invalid sequence: '?' for its first byte, and on).
    const int length = byte >= 0xf0   ? (byte < 0xf5 ? 4 : 0)
                       : byte >= 0xe0 ? 3
                       : byte >= 0xc2 ? 2
                                      : 0;
    uint32_t code_point = length == 2 ? byte & 0x1f : length == 3 ? byte & 0x0f : byte & 0x07;
    bool valid = length > 0 && i + static_cast<std::size_t>(length) <= text.size();
    for (int k = 1; valid && k < length; ++k) {
      const auto next = static_cast<unsigned char>(text[i + static_cast<std::size_t>(k)]);
      valid = (next & 0xc0) == 0x80;
      code_point = (code_point << 6) | (next & 0x3f);
    }
    if (!valid) {
      out += '?';
      ++i;
      continue;
    }
    i += static_cast<std::size_t>(length);
    const char* stand_in = "?";
    if (code_point >= 0xc0 && code_point <= 0xff && *latin1[code_point - 0xc0] != '\0')
      stand_in = latin1[code_point - 0xc0];
    else if (code_point == 0x152 || code_point == 0x153)  // Œ œ
      stand_in = code_point == 0x152 ? "OE" : "oe";
    else if (code_point == 0x178)  // Ÿ
      stand_in = "Y";
    else if (code_point == 0x2019)  // ’, French's apostrophe
      stand_in = "'";
    out += stand_in;
  }
  return out;
}

int64_t text_width(const std::string& text, int64_t scale) {
  const std::string drawn = drawable_text(text);
  if (drawn.empty()) return 0;
  return (glyph_advance * static_cast<int64_t>(drawn.size()) - 1) * scale;
}

void draw_text(Image& image, int64_t x, int64_t y, const std::string& text, Rgb colour,
    int64_t scale, bool vertical) {
  if (scale < 1) fail<ValueError>("draw_text: scale ", scale, " must be at least 1");
  const std::string drawn = drawable_text(text);
  const int64_t length = text_width(text, scale);
  for (std::size_t n = 0; n < drawn.size(); ++n) {
    const std::vector<std::string>& rows = glyph(drawn[n]);
    for (int64_t gy = 0; gy < glyph_height; ++gy)
      for (int64_t gx = 0; gx < glyph_width; ++gx) {
        if (rows[gy][gx] != '#') continue;
        // (u, v): the top-left pixel of this glyph pixel's scale × scale block in horizontal text.
        const int64_t u = (glyph_advance * static_cast<int64_t>(n) + gx) * scale, v = gy * scale;
        for (int64_t dy = 0; dy < scale; ++dy)
          for (int64_t dx = 0; dx < scale; ++dx) {
            // A quarter turn counter-clockwise maps horizontal (u, v) to (v, length − 1 − u).
            if (vertical)
              image.set(x + v + dy, y + length - 1 - (u + dx), colour);
            else
              image.set(x + u + dx, y + v + dy, colour);
          }
      }
  }
}

}  // namespace ag::viz
