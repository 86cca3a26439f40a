// Pictures for the examples: PNG files written with libpng, heatmaps of matrices (attention weights,
// the positional-encoding table) with a perceptual colour map and axis labels drawn in a small
// built-in bitmap font, and line plots drawn by gnuplot from a CSV file.
//
//   ag::plot::write_heatmap("P.png", P, {.title = "P", .xlabel = "column", .ylabel = "row"});
//   ag::plot::write_csv("loss.csv", {"step", "loss"}, {steps, losses});
//   ag::plot::plot_csv("loss.csv", "loss.png", {.panels = {{.title = "loss", .curves = {{"loss", "training"}}}}});
//
// Every failure is an exception that names the function, and the path, command or sizes involved.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "autograd/error.h"
#include "autograd/tensor.h"

namespace ag::plot {

// A file could not be written or read, or gnuplot could not be run or failed.
class PlotError : public RuntimeError {
 public:
  using RuntimeError::RuntimeError;
};

// ---- images and PNG files --------------------------------------------------------------------------

struct Rgb {
  uint8_t r = 0, g = 0, b = 0;
  bool operator==(const Rgb&) const = default;
};
inline constexpr Rgb white{255, 255, 255}, black{0, 0, 0};

// An RGB image, 8 bits per channel, rows top to bottom, pixels left to right.
class Image {
 public:
  Image(int64_t width, int64_t height, Rgb background = white);  // throws ValueError for sizes <= 0
  int64_t width() const { return width_; }
  int64_t height() const { return height_; }
  Rgb at(int64_t x, int64_t y) const;  // throws ValueError outside the image
  void set(int64_t x, int64_t y, Rgb colour);  // drawing outside the image is ignored (clipping)
  void fill(int64_t x, int64_t y, int64_t w, int64_t h, Rgb colour);  // clipped rectangle
  void blit(const Image& source, int64_t x, int64_t y);              // clipped copy, top-left at (x, y)
  const std::vector<uint8_t>& rgb() const { return rgb_; }            // 3 · width · height bytes

 private:
  int64_t width_, height_;
  std::vector<uint8_t> rgb_;
};

// Writes 8-bit RGB pixels (3 · width · height bytes, row-major, top row first) as a PNG with libpng.
// Throws ShapeError if the sizes do not match, PlotError naming the path and libpng's reason
// (e.g. "No such file or directory") if the file cannot be written.
void write_png(const std::string& path, int64_t width, int64_t height, const std::vector<uint8_t>& rgb);
void write_png(const std::string& path, const Image& image);

// Reads any PNG (palette, grey, 16-bit and alpha are converted; alpha is composited on white) as
// 8-bit RGB. Throws PlotError naming the path and the reason.
Image read_png(const std::string& path);

// ---- colour map ------------------------------------------------------------------------------------

// A viridis-like perceptual colour map: dark purple (t = 0) through blue and green to yellow
// (t = 1), its lightness rising monotonically, so a larger value is always a lighter cell, also in
// grey print and for colour-blind readers. Linear interpolation between 10 evenly spaced anchor
// colours; t is clamped to [0, 1].
Rgb viridis(double t);
// Relative luminance 0.2126 R + 0.7152 G + 0.0722 B (Rec. 709 weights, on the 0–255 values).
double luminance(Rgb colour);

// ---- text ------------------------------------------------------------------------------------------

// A 5×7 bitmap font of digits, capital letters and the punctuation  <>-+.,:()/_=?%'![]*  — lower
// case is drawn in capitals, any other character as '?'. Each glyph is 5 pixels wide with 1 pixel
// of spacing, scaled up by `scale` (an integer ≥ 1).
inline constexpr int64_t glyph_width = 5, glyph_height = 7, glyph_advance = 6;
// The glyph of a character: 7 rows of 5 characters, '#' for ink and '.' for background.
const std::vector<std::string>& glyph(char c);
// Characters the font draws (their lower-case letters aside).
std::string font_characters();
// Width in pixels of `text` drawn horizontally: 6 · length · scale − scale (0 for "").
int64_t text_width(const std::string& text, int64_t scale = 1);
// Draws `text` with its top-left corner at (x, y). vertical: rotated a quarter turn
// counter-clockwise (read from bottom to top), its bounding box 7·scale wide and text_width high
// with the top-left corner at (x, y).
void draw_text(Image& image, int64_t x, int64_t y, const std::string& text, Rgb colour, int64_t scale = 1,
               bool vertical = false);

// ---- heatmaps --------------------------------------------------------------------------------------

struct HeatmapOptions {
  std::string title;                    // above the map
  std::string xlabel, ylabel;           // axis names: below the column labels, left of the row labels
  std::vector<std::string> row_labels;  // tick labels, one per row (empty: none)
  std::vector<std::string> col_labels;  // one per column, drawn vertically (empty: none)
  int64_t cell = 12;                    // pixels per matrix cell (square)
  int64_t font_scale = 1;
  std::optional<double> vmin, vmax;     // the values of the ends of the colour map (default: data min, max)
  bool colorbar = true;                 // a colour bar labelled with vmin and vmax, right of the map
};

// "0", "1", …, "n − 1": tick labels for positions.
std::vector<std::string> index_labels(int64_t n);

// A 2-D tensor (rows, cols), float32 or float64, drawn as a rows × cols grid of cells of
// options.cell pixels: value v gets viridis((v − vmin) / (vmax − vmin)) (vmax = vmin: the middle
// colour). Tick labels that would overlap are thinned to every k-th row or column. Throws
// ShapeError for a tensor that is not 2-D or labels whose count does not match, ValueError for a
// non-finite value (naming its row and column) or bad options.
Image render_heatmap(const Tensor& matrix, const HeatmapOptions& options = {});
void write_heatmap(const std::string& path, const Tensor& matrix, const HeatmapOptions& options = {});

struct HeatmapPanel {
  Tensor matrix;  // (rows, cols)
  HeatmapOptions options;
};
// Several heatmaps in one picture, `columns` panels per row in the given order, each panel in a
// cell as large as the largest panel, under an optional overall title.
Image render_heatmap_grid(const std::vector<HeatmapPanel>& panels, int64_t columns, const std::string& title = "",
                          int64_t font_scale = 1);
void write_heatmap_grid(const std::string& path, const std::vector<HeatmapPanel>& panels, int64_t columns,
                        const std::string& title = "", int64_t font_scale = 1);

// ---- line plots with gnuplot -----------------------------------------------------------------------

// Writes a CSV file: the header line, then one row per index of the (equally long) columns, with
// 9 significant digits. Throws ShapeError for columns of different lengths or a header of another
// count, PlotError naming the path if it cannot be written.
void write_csv(const std::string& path, const std::vector<std::string>& header,
               const std::vector<std::vector<double>>& columns);

struct Curve {
  std::string column;  // a column name in the CSV header
  std::string title;   // its legend entry
};
struct LinePanel {
  std::string title, xlabel, ylabel;
  std::vector<Curve> curves;
  std::optional<double> ymin, ymax;  // default: gnuplot's autoscaling
  std::string key = "top right";     // gnuplot's legend placement ("bottom right", "outside", …)
};
struct LineFigure {
  std::vector<LinePanel> panels;     // drawn one above the other
  std::string title;                 // over all panels (empty: none)
  int64_t width = 800, height = 0;   // pixels; height 0: 360 per panel
  bool points = false;               // a marker at each data point, besides the lines
  std::string gnuplot = "gnuplot";   // the program run (looked up on PATH)
};

// Plots the CSV file's columns against its first column with gnuplot's png terminal (which
// gnuplot-nox has): writes a gnuplot script next to the PNG (png_path with extension .gp, so the
// picture can be redrawn by hand with `gnuplot FILE.gp`) and runs `gnuplot FILE.gp`. Throws
// PlotError naming the command if gnuplot cannot be started (not installed) or exits with a
// non-zero status (with its status and messages), or if a curve names a column the CSV lacks.
void plot_csv(const std::string& csv_path, const std::string& png_path, const LineFigure& figure);

}  // namespace ag::plot
