#include "examples/plot.h"

#include <fcntl.h>
#include <png.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

extern char** environ;

namespace ag::plot {

namespace fs = std::filesystem;

// ---- Image -------------------------------------------------------------------------------------------

Image::Image(int64_t width, int64_t height, Rgb background) : width_(width), height_(height) {
  if (width <= 0 || height <= 0 || width > (1 << 15) || height > (1 << 15))
    detail::fail<ValueError>("Image: size ", width, "x", height, " is not in 1…32768 x 1…32768");
  rgb_.resize(static_cast<std::size_t>(3 * width * height));
  for (std::size_t i = 0; i < rgb_.size(); i += 3) {
    rgb_[i] = background.r;
    rgb_[i + 1] = background.g;
    rgb_[i + 2] = background.b;
  }
}

Rgb Image::at(int64_t x, int64_t y) const {
  if (x < 0 || y < 0 || x >= width_ || y >= height_)
    detail::fail<ValueError>("Image::at: pixel (", x, ", ", y, ") is outside the ", width_, "x", height_, " image");
  const std::size_t i = static_cast<std::size_t>(3 * (y * width_ + x));
  return {rgb_[i], rgb_[i + 1], rgb_[i + 2]};
}

void Image::set(int64_t x, int64_t y, Rgb colour) {
  if (x < 0 || y < 0 || x >= width_ || y >= height_) return;
  const std::size_t i = static_cast<std::size_t>(3 * (y * width_ + x));
  rgb_[i] = colour.r;
  rgb_[i + 1] = colour.g;
  rgb_[i + 2] = colour.b;
}

void Image::fill(int64_t x, int64_t y, int64_t w, int64_t h, Rgb colour) {
  for (int64_t row = std::max<int64_t>(y, 0); row < std::min(y + h, height_); ++row)
    for (int64_t col = std::max<int64_t>(x, 0); col < std::min(x + w, width_); ++col) set(col, row, colour);
}

void Image::blit(const Image& source, int64_t x, int64_t y) {
  for (int64_t row = 0; row < source.height(); ++row)
    for (int64_t col = 0; col < source.width(); ++col) set(x + col, y + row, source.at(col, row));
}

// ---- PNG files -----------------------------------------------------------------------------------------

// libpng's simplified API (png_image): no setjmp/longjmp in our code; a failure comes back as a
// zero return with the reason in image.message.

void write_png(const std::string& path, int64_t width, int64_t height, const std::vector<uint8_t>& rgb) {
  if (width <= 0 || height <= 0 || width > (1 << 15) || height > (1 << 15))
    detail::fail<ShapeError>("write_png: size ", width, "x", height, " of '", path, "' is not in 1…32768 x 1…32768");
  if (rgb.size() != static_cast<std::size_t>(3 * width * height))
    detail::fail<ShapeError>("write_png: a ", width, "x", height, " RGB image needs 3·", width, "·", height, " = ",
                             3 * width * height, " bytes, got ", rgb.size(), " (for '", path, "')");
  png_image image;
  std::memset(&image, 0, sizeof image);
  image.version = PNG_IMAGE_VERSION;
  image.width = static_cast<png_uint_32>(width);
  image.height = static_cast<png_uint_32>(height);
  image.format = PNG_FORMAT_RGB;
  if (!png_image_write_to_file(&image, path.c_str(), 0, rgb.data(), static_cast<png_int_32>(3 * width), nullptr)) {
    const std::string reason = image.message;
    png_image_free(&image);
    throw PlotError("write_png: cannot write '" + path + "': " + reason);
  }
}

void write_png(const std::string& path, const Image& image) { write_png(path, image.width(), image.height(), image.rgb()); }

Image read_png(const std::string& path) {
  png_image image;
  std::memset(&image, 0, sizeof image);
  image.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_file(&image, path.c_str())) {
    const std::string reason = image.message;
    png_image_free(&image);
    throw PlotError("read_png: cannot read '" + path + "': " + reason);
  }
  if (image.width > (1u << 15) || image.height > (1u << 15)) {
    png_image_free(&image);
    throw PlotError("read_png: '" + path + "' is " + std::to_string(image.width) + "x" + std::to_string(image.height) +
                    ", larger than 32768x32768");
  }
  image.format = PNG_FORMAT_RGB;
  Image out(image.width, image.height);
  std::vector<uint8_t> pixels(PNG_IMAGE_SIZE(image));
  const png_color background{255, 255, 255};  // where the file has alpha, composite onto white
  if (!png_image_finish_read(&image, &background, pixels.data(), 0, nullptr)) {
    const std::string reason = image.message;
    png_image_free(&image);
    throw PlotError("read_png: cannot decode '" + path + "': " + reason);
  }
  for (int64_t y = 0; y < out.height(); ++y)
    for (int64_t x = 0; x < out.width(); ++x) {
      const std::size_t i = static_cast<std::size_t>(3 * (y * out.width() + x));
      out.set(x, y, {pixels[i], pixels[i + 1], pixels[i + 2]});
    }
  return out;
}

// ---- colour map ------------------------------------------------------------------------------------------

Rgb viridis(double t) {
  // Anchors at t = 0, 1/9, …, 1 along the viridis colour map (van der Walt and Smith, 2015): it was
  // designed so that equal steps in t look like equal steps of lightness (CAM02-UCS), from dark
  // purple to yellow.
  static constexpr std::array<Rgb, 10> anchors{{{68, 1, 84},    {72, 40, 120},  {62, 74, 137},  {49, 104, 142},
                                                {38, 130, 142}, {31, 158, 137}, {53, 183, 121}, {109, 205, 89},
                                                {180, 222, 44}, {253, 231, 37}}};
  if (std::isnan(t)) detail::fail<ValueError>("viridis: t is NaN");
  t = std::clamp(t, 0.0, 1.0);
  // t lies between anchors k and k + 1 at fraction f: colour = (1 − f)·anchor_k + f·anchor_{k+1}.
  const double position = t * static_cast<double>(anchors.size() - 1);
  const std::size_t k = std::min(static_cast<std::size_t>(position), anchors.size() - 2);
  const double f = position - static_cast<double>(k);
  auto mix = [f](uint8_t a, uint8_t b) { return static_cast<uint8_t>(std::lround((1 - f) * a + f * b)); };
  return {mix(anchors[k].r, anchors[k + 1].r), mix(anchors[k].g, anchors[k + 1].g), mix(anchors[k].b, anchors[k + 1].b)};
}

double luminance(Rgb c) { return 0.2126 * c.r + 0.7152 * c.g + 0.0722 * c.b; }

// ---- the 5×7 font ----------------------------------------------------------------------------------------

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
    for (const GlyphEntry& e : font) t[e.c] = std::vector<std::string>(e.rows.begin(), e.rows.end());
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

int64_t text_width(const std::string& text, int64_t scale) {
  if (text.empty()) return 0;
  return (glyph_advance * static_cast<int64_t>(text.size()) - 1) * scale;
}

void draw_text(Image& image, int64_t x, int64_t y, const std::string& text, Rgb colour, int64_t scale, bool vertical) {
  if (scale < 1) detail::fail<ValueError>("draw_text: scale ", scale, " must be at least 1");
  const int64_t length = text_width(text, scale);
  for (std::size_t n = 0; n < text.size(); ++n) {
    const std::vector<std::string>& rows = glyph(text[n]);
    for (int64_t gy = 0; gy < glyph_height; ++gy)
      for (int64_t gx = 0; gx < glyph_width; ++gx) {
        if (rows[gy][gx] != '#') continue;
        // (u, v): the top-left pixel of this glyph pixel's scale × scale block in horizontal text.
        const int64_t u = (glyph_advance * static_cast<int64_t>(n) + gx) * scale, v = gy * scale;
        for (int64_t dy = 0; dy < scale; ++dy)
          for (int64_t dx = 0; dx < scale; ++dx) {
            // A quarter turn counter-clockwise maps horizontal (u, v) to (v, length − 1 − u).
            if (vertical) image.set(x + v + dy, y + length - 1 - (u + dx), colour);
            else image.set(x + u + dx, y + v + dy, colour);
          }
      }
  }
}

// ---- heatmaps ---------------------------------------------------------------------------------------------

std::vector<std::string> index_labels(int64_t n) {
  std::vector<std::string> labels;
  for (int64_t i = 0; i < n; ++i) labels.push_back(std::to_string(i));
  return labels;
}

namespace {

std::string format_value(double v) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.3g", v);
  return buffer;
}

int64_t longest_label(const std::vector<std::string>& labels, int64_t scale) {
  int64_t longest = 0;
  for (const std::string& l : labels) longest = std::max(longest, text_width(l, scale));
  return longest;
}

}  // namespace

Image render_heatmap(const Tensor& matrix, const HeatmapOptions& o) {
  if (!matrix.defined() || matrix.dim() != 2 || matrix.size(0) == 0 || matrix.size(1) == 0)
    detail::fail<ShapeError>("render_heatmap: expected a non-empty 2-D tensor (rows, cols), got ",
                             matrix.defined() ? shape_str(matrix.shape()) : std::string("an undefined tensor"));
  const int64_t rows = matrix.size(0), cols = matrix.size(1);
  if (!o.row_labels.empty() && static_cast<int64_t>(o.row_labels.size()) != rows)
    detail::fail<ShapeError>("render_heatmap: ", o.row_labels.size(), " row labels for a matrix of shape ",
                             shape_str(matrix.shape()));
  if (!o.col_labels.empty() && static_cast<int64_t>(o.col_labels.size()) != cols)
    detail::fail<ShapeError>("render_heatmap: ", o.col_labels.size(), " column labels for a matrix of shape ",
                             shape_str(matrix.shape()));
  if (o.cell < 1 || o.cell > 256 || o.font_scale < 1 || o.font_scale > 8)
    detail::fail<ValueError>("render_heatmap: cell ", o.cell, " must be in 1…256 and font_scale ", o.font_scale,
                             " in 1…8");
  const std::vector<double> values = matrix.to_vector<double>();  // row-major (rows, cols)
  double low = values[0], high = values[0];
  for (int64_t i = 0; i < rows * cols; ++i) {
    const double v = values[static_cast<std::size_t>(i)];
    if (!std::isfinite(v))
      detail::fail<ValueError>("render_heatmap: the value at row ", i / cols, ", column ", i % cols, " of the ",
                               shape_str(matrix.shape()), " matrix is ", v);
    low = std::min(low, v);
    high = std::max(high, v);
  }
  const double vmin = o.vmin.value_or(low), vmax = o.vmax.value_or(high);
  if (!std::isfinite(vmin) || !std::isfinite(vmax) || vmin > vmax)
    detail::fail<ValueError>("render_heatmap: vmin ", vmin, " and vmax ", vmax, " must be finite with vmin <= vmax");
  // Value v -> t = (v − vmin) / (vmax − vmin) in [0, 1] (clamped) -> viridis(t).
  auto colour_of = [&](double v) { return viridis(vmax > vmin ? (v - vmin) / (vmax - vmin) : 0.5); };

  const int64_t s = o.font_scale, line = glyph_height * s, pad = 4 * s;
  // Tick labels every k-th row/column, k the smallest of 1, 2, 5, 10, 20, 50, … with k·cell at
  // least a label's height plus a gap (7·s + 3·s), so that neighbouring labels never touch.
  const int64_t spacing = line + 3 * s;
  int64_t every = 1;
  for (int64_t decade = 1; every * o.cell < spacing; decade *= 10)
    for (int64_t m : {1, 2, 5})
      if (every * o.cell < spacing) every = m * decade;
  // Layout, left to right: ylabel (vertical), row labels, the map, colour bar and its labels;
  // top to bottom: title, the map, column labels (vertical), xlabel.
  const int64_t ylabel_w = o.ylabel.empty() ? 0 : line + pad;
  const int64_t row_labels_w = o.row_labels.empty() ? 0 : longest_label(o.row_labels, s) + pad;
  const int64_t map_x = pad + ylabel_w + row_labels_w, map_w = cols * o.cell, map_h = rows * o.cell;
  const int64_t title_h = o.title.empty() ? 0 : line + pad;
  const int64_t map_y = pad + title_h;
  const int64_t col_labels_h = o.col_labels.empty() ? 0 : longest_label(o.col_labels, s) + pad;
  const int64_t xlabel_h = o.xlabel.empty() ? 0 : line + pad;
  const std::string top_text = format_value(vmax), bottom_text = format_value(vmin);
  const int64_t bar_w = o.colorbar ? 3 * pad + 2 * pad + std::max(text_width(top_text, s), text_width(bottom_text, s)) : 0;
  const int64_t width = std::max(map_x + map_w + bar_w + pad, pad + text_width(o.title, s) + pad);
  const int64_t below = std::max(col_labels_h + xlabel_h, o.colorbar ? line : 0);
  const int64_t height = std::max({map_y + map_h + below + pad, map_y + line * 2 + pad,
                                   map_y + text_width(o.ylabel, s) + pad});
  Image image(width, height);
  const Rgb ink{40, 40, 40};

  if (!o.title.empty()) draw_text(image, (width - text_width(o.title, s)) / 2, pad, o.title, ink, s);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      image.fill(map_x + c * o.cell, map_y + r * o.cell, o.cell, o.cell, colour_of(values[static_cast<std::size_t>(r * cols + c)]));
  // Row labels right-aligned against the map, centred on their row.
  for (int64_t r = 0; r < static_cast<int64_t>(o.row_labels.size()); r += every) {
    const std::string& label = o.row_labels[static_cast<std::size_t>(r)];
    draw_text(image, map_x - pad / 2 - text_width(label, s), map_y + r * o.cell + (o.cell - line) / 2, label, ink, s);
  }
  // Column labels vertical under the map, reading upwards, their top end against the map.
  for (int64_t c = 0; c < static_cast<int64_t>(o.col_labels.size()); c += every) {
    const std::string& label = o.col_labels[static_cast<std::size_t>(c)];
    draw_text(image, map_x + c * o.cell + (o.cell - line) / 2, map_y + map_h + pad / 2, label, ink, s, true);
  }
  if (!o.xlabel.empty())
    draw_text(image, map_x + (map_w - text_width(o.xlabel, s)) / 2, map_y + map_h + col_labels_h + pad / 2, o.xlabel,
              ink, s);
  if (!o.ylabel.empty())
    draw_text(image, pad, map_y + std::max<int64_t>(0, (map_h - text_width(o.ylabel, s)) / 2), o.ylabel, ink, s,
              true);
  if (o.colorbar) {
    // A bar as high as the map (at least two text lines), vmax at the top, vmin at the bottom.
    const int64_t bar_x = map_x + map_w + 2 * pad, bar_h = std::max(map_h, 2 * line), bar_width = 3 * pad;
    for (int64_t y = 0; y < bar_h; ++y)
      image.fill(bar_x, map_y + y, bar_width, 1, viridis(1.0 - static_cast<double>(y) / static_cast<double>(bar_h - 1)));
    draw_text(image, bar_x + bar_width + pad, map_y, top_text, ink, s);
    draw_text(image, bar_x + bar_width + pad, map_y + bar_h - line, bottom_text, ink, s);
  }
  return image;
}

void write_heatmap(const std::string& path, const Tensor& matrix, const HeatmapOptions& options) {
  write_png(path, render_heatmap(matrix, options));
}

Image render_heatmap_grid(const std::vector<HeatmapPanel>& panels, int64_t columns, const std::string& title,
                          int64_t font_scale) {
  if (panels.empty() || columns < 1 || font_scale < 1)
    detail::fail<ValueError>("render_heatmap_grid: ", panels.size(), " panels in ", columns,
                             " columns (font scale ", font_scale, "): need at least one panel and one column");
  std::vector<Image> images;
  int64_t cell_w = 0, cell_h = 0;
  for (const HeatmapPanel& p : panels) {
    images.push_back(render_heatmap(p.matrix, p.options));
    cell_w = std::max(cell_w, images.back().width());
    cell_h = std::max(cell_h, images.back().height());
  }
  const int64_t count = static_cast<int64_t>(panels.size());
  const int64_t grid_columns = std::min(columns, count), grid_rows = (count + columns - 1) / columns;
  const int64_t pad = 4 * font_scale, title_h = title.empty() ? 0 : glyph_height * font_scale + 2 * pad;
  const int64_t width = std::max(grid_columns * cell_w, text_width(title, font_scale) + 2 * pad);
  Image grid(width, title_h + grid_rows * cell_h);
  if (!title.empty()) draw_text(grid, (width - text_width(title, font_scale)) / 2, pad, title, {40, 40, 40}, font_scale);
  for (int64_t i = 0; i < count; ++i)
    grid.blit(images[static_cast<std::size_t>(i)], (i % columns) * cell_w, title_h + (i / columns) * cell_h);
  return grid;
}

void write_heatmap_grid(const std::string& path, const std::vector<HeatmapPanel>& panels, int64_t columns,
                        const std::string& title, int64_t font_scale) {
  write_png(path, render_heatmap_grid(panels, columns, title, font_scale));
}

// ---- CSV and gnuplot -------------------------------------------------------------------------------------

void write_csv(const std::string& path, const std::vector<std::string>& header,
               const std::vector<std::vector<double>>& columns) {
  if (header.size() != columns.size() || columns.empty())
    detail::fail<ShapeError>("write_csv: ", header.size(), " header names for ", columns.size(), " columns ('", path, "')");
  for (const auto& column : columns)
    if (column.size() != columns[0].size())
      detail::fail<ShapeError>("write_csv: columns of ", columns[0].size(), " and ", column.size(), " rows ('", path, "')");
  std::ofstream out(path, std::ios::trunc);
  if (!out) throw PlotError("write_csv: cannot open '" + path + "' for writing: " + std::strerror(errno));
  for (std::size_t c = 0; c < header.size(); ++c) out << (c ? "," : "") << header[c];
  out << '\n';
  char buffer[32];
  for (std::size_t r = 0; r < columns[0].size(); ++r) {
    for (std::size_t c = 0; c < columns.size(); ++c) {
      std::snprintf(buffer, sizeof buffer, "%.9g", columns[c][r]);
      out << (c ? "," : "") << buffer;
    }
    out << '\n';
  }
  out.close();
  if (!out) throw PlotError("write_csv: writing '" + path + "' failed");
}

namespace {

// A gnuplot single-quoted string: nothing is special inside except '' for a quote.
std::string quoted(const std::string& text) {
  std::string q = "'";
  for (char c : text) q += c == '\'' ? std::string("''") : std::string(1, c);
  return q + "'";
}

std::vector<std::string> csv_header(const std::string& csv_path) {
  std::ifstream in(csv_path);
  std::string line;
  if (!in || !std::getline(in, line))
    throw PlotError("plot_csv: cannot read the header line of '" + csv_path + "'");
  std::vector<std::string> names;
  std::stringstream fields(line);
  for (std::string name; std::getline(fields, name, ',');) names.push_back(name);
  return names;
}

// Runs program with arguments, its stdout and stderr collected; returns the wait status.
int run_program(const std::vector<std::string>& argv, std::string& output) {
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0)
    throw PlotError("plot_csv: cannot create a pipe for '" + argv[0] + "': " + std::strerror(errno));
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], STDERR_FILENO);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  const int spawned = ::posix_spawnp(&pid, argv[0].c_str(), &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(pipe_fds[1]);
  if (spawned != 0) {
    ::close(pipe_fds[0]);
    throw PlotError("plot_csv: cannot run '" + argv[0] + "': " + std::strerror(spawned) +
                    " (gnuplot draws the line plots; install it with scripts/install-deps.sh, Debian package "
                    "gnuplot-nox)");
  }
  char buffer[4096];
  for (ssize_t n; (n = ::read(pipe_fds[0], buffer, sizeof buffer)) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    output.append(buffer, static_cast<std::size_t>(n));
  }
  ::close(pipe_fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) throw PlotError("plot_csv: waiting for '" + argv[0] + "' failed: " + std::strerror(errno));
  return status;
}

}  // namespace

void plot_csv(const std::string& csv_path, const std::string& png_path, const LineFigure& figure) {
  if (figure.panels.empty()) detail::fail<ValueError>("plot_csv: the figure for '", png_path, "' has no panels");
  const int64_t panels = static_cast<int64_t>(figure.panels.size());
  const int64_t height = figure.height > 0 ? figure.height : 360 * panels;
  if (figure.width < 100 || height < 100 || figure.width > 10000 || height > 10000)
    detail::fail<ValueError>("plot_csv: size ", figure.width, "x", height, " is not in 100…10000 x 100…10000");
  const std::vector<std::string> header = csv_header(csv_path);
  if (header.size() < 2) throw PlotError("plot_csv: '" + csv_path + "' has fewer than two columns");
  auto column_index = [&](const std::string& name) {  // 1-based, as gnuplot counts
    auto it = std::find(header.begin(), header.end(), name);
    if (it == header.end()) {
      std::string known;
      for (const std::string& h : header) known += (known.empty() ? "" : ", ") + h;
      throw PlotError("plot_csv: '" + csv_path + "' has no column '" + name + "' (it has: " + known + ")");
    }
    return (it - header.begin()) + 1;
  };

  // Absolute paths, so that the script works from any directory.
  const fs::path csv = fs::absolute(csv_path), png = fs::absolute(png_path);
  const fs::path script_path = fs::path(png).replace_extension(".gp");
  std::ostringstream gp;
  gp << "# Drawn by ag (examples/plot.cpp); redraw with: gnuplot " << quoted(script_path.string()) << "\n"
     << "set terminal png noenhanced size " << figure.width << "," << height << "\n"
     << "set output " << quoted(png.string()) << "\n"
     << "set datafile separator ','\n"
     << "set grid\n";
  if (panels > 1 || !figure.title.empty()) {
    gp << "set multiplot layout " << panels << ",1";
    if (!figure.title.empty()) gp << " title " << quoted(figure.title);
    gp << "\n";
  }
  for (const LinePanel& p : figure.panels) {
    if (p.curves.empty()) detail::fail<ValueError>("plot_csv: panel '", p.title, "' of '", png_path, "' has no curves");
    gp << "set title " << quoted(p.title) << "\n"
       << "set xlabel " << quoted(p.xlabel.empty() ? header[0] : p.xlabel) << "\n"
       << "set ylabel " << quoted(p.ylabel) << "\n"
       << "set key " << p.key << "\n"
       << "set yrange [" << (p.ymin ? std::to_string(*p.ymin) : "*") << ":" << (p.ymax ? std::to_string(*p.ymax) : "*")
       << "]\n"
       << "plot ";
    for (std::size_t i = 0; i < p.curves.size(); ++i)
      gp << (i ? ", \\\n     " : "") << quoted(csv.string()) << " skip 1 using 1:" << column_index(p.curves[i].column)
         << " with " << (figure.points ? "linespoints" : "lines") << " linewidth 2 title " << quoted(p.curves[i].title);
    gp << "\n";
  }
  if (panels > 1 || !figure.title.empty()) gp << "unset multiplot\n";
  {
    std::ofstream out(script_path, std::ios::trunc);
    out << gp.str();
    out.close();
    if (!out) throw PlotError("plot_csv: cannot write the gnuplot script '" + script_path.string() + "'");
  }
  // A picture left by an earlier run must not pass for this one's.
  std::error_code error;
  fs::remove(png, error);
  std::string output;
  const int status = run_program({figure.gnuplot, script_path.string()}, output);
  const std::string command = figure.gnuplot + " " + script_path.string();
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    const std::string how = WIFEXITED(status) ? "exited with status " + std::to_string(WEXITSTATUS(status))
                                               : "was killed by signal " + std::to_string(WTERMSIG(status));
    throw PlotError("plot_csv: '" + command + "' " + how + (output.empty() ? "" : ":\n" + output));
  }
  // gnuplot reports some problems (an unwritable output file) as warnings with status 0.
  if (!fs::exists(png, error) || fs::file_size(png, error) == 0)
    throw PlotError("plot_csv: '" + command + "' did not write '" + png.string() + "'" +
                    (output.empty() ? "" : ":\n" + output));
}

}  // namespace ag::plot
