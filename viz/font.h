// Text in pictures without a font library: a built-in 5×7 bitmap font.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "viz/image.h"

namespace ag::viz {

// A 5×7 bitmap font of digits, capital and small letters and the punctuation  <>-+.,:()/_=?%'![]*
// — any other character is drawn as '?'. Capitals fill the 7 rows; small letters have an x-height
// of 5 rows, and as the cell has no rows below the baseline, g j p q y sit raised with their tails
// in the bottom 2 rows (as on a character LCD). Each glyph is 5 pixels wide with 1 pixel of
// spacing, scaled up by `scale` (an integer ≥ 1). Text is UTF-8 (see drawable_text).
inline constexpr int64_t glyph_width = 5, glyph_height = 7, glyph_advance = 6;
// The glyph of a character: 7 rows of 5 characters, '#' for ink and '.' for background.
const std::vector<std::string>& glyph(char c);
// Characters the font draws, each with a glyph of its own.
std::string font_characters();
// What draw_text draws for UTF-8 `text`, one byte per glyph: ASCII as it is; the Latin letters
// with accents of French, German, Spanish … (U+00C0–U+00FF, Œ œ Ÿ) without them ("é" -> "e",
// "Œ" -> "OE", "ß" -> "ss"), ’ as '; any other code point, and each byte of invalid UTF-8, '?'.
std::string drawable_text(const std::string& text);
// Width in pixels of `text` drawn horizontally: 6 · length · scale − scale (0 for ""), length
// that of drawable_text(text).
int64_t text_width(const std::string& text, int64_t scale = 1);
// Draws `text` with its top-left corner at (x, y). vertical: rotated a quarter turn
// counter-clockwise (read from bottom to top), its bounding box 7·scale wide and text_width high
// with the top-left corner at (x, y).
void draw_text(Image& image, int64_t x, int64_t y, const std::string& text, Rgb colour,
    int64_t scale = 1, bool vertical = false);

}  // namespace ag::viz
