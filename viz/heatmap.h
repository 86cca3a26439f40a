// Heatmaps of matrices — attention weights, the positional-encoding table — as PNG files: cells
// coloured by viridis, tick labels and titles in the built-in font, an optional colour bar; several
// heatmaps in a grid; and d2l's show_heatmaps.
//
//   ag::viz::write_heatmap("P.png", P, {.title = "P", .xlabel = "column", .ylabel = "row"});
//   ag::viz::show_heatmaps(attention_weights.reshape({1, 1, Q, K}), "weights.png");  // d2l 10.1
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "autograd/tensor.h"
#include "viz/image.h"

namespace ag::viz {

struct HeatmapOptions {
  std::string title;           // above the map
  std::string xlabel, ylabel;  // axis names: below the column labels, left of the row labels
  std::vector<std::string> row_labels;  // tick labels, one per row (empty: none)
  std::vector<std::string> col_labels;  // one per column, drawn vertically (empty: none)
  int64_t cell = 12;                    // pixels per matrix cell (square)
  int64_t font_scale = 1;
  std::optional<double> vmin,
      vmax;              // the values of the ends of the colour map (default: data min, max)
  bool colorbar = true;  // a colour bar labelled with vmin and vmax, right of the map
};

// "0", "1", …, "n − 1": tick labels for positions.
std::vector<std::string> index_labels(int64_t n);

// A 2-D tensor (rows, cols), float32 or float64, drawn as a rows × cols grid of cells of
// options.cell pixels: value v gets viridis((v − vmin) / (vmax − vmin)) (vmax = vmin: the middle
// colour). Tick labels that would overlap are thinned to every k-th row or column. Throws
// ShapeError for a tensor that is not 2-D or labels whose count does not match, ValueError for a
// non-finite value (naming its row and column) or bad options.
Image render_heatmap(const Tensor& matrix, const HeatmapOptions& options = {});
void write_heatmap(
    const std::string& path, const Tensor& matrix, const HeatmapOptions& options = {});

struct HeatmapPanel {
  Tensor matrix;  // (rows, cols)
  HeatmapOptions options;
};
// One panel of attention weights, queries down and keys across: the weights on the scale 0 to 1
// (so that panels compare), 20-pixel cells, a colour bar.
HeatmapPanel attention_panel(const Tensor& weights, const std::string& title,
    const std::string& xlabel, const std::string& ylabel, std::vector<std::string> row_labels,
    std::vector<std::string> col_labels);

// Several heatmaps in one picture, `columns` panels per row in the given order, each panel in a
// cell as large as the largest panel, under an optional overall title.
Image render_heatmap_grid(const std::vector<HeatmapPanel>& panels, int64_t columns,
    const std::string& title = "", int64_t font_scale = 1);
void write_heatmap_grid(const std::string& path, const std::vector<HeatmapPanel>& panels,
    int64_t columns, const std::string& title = "", int64_t font_scale = 1);

// d2l's show_heatmaps(matrices, xlabel, ylabel, titles) (chapter 10.1): `matrices` of shape
// (num_rows, num_cols, Q, K) drawn as a num_rows × num_cols grid of heatmaps, each with the shared
// axis names and its title, on one colour scale from the smallest to the largest value of all the
// matrices. Labels name each row and column of every matrix (the query and key tokens of
// attention weights; empty: none).
//
// Titles: `titles` is empty, one per grid column (as in d2l: each column's title repeated down
// the column) or one per matrix (num_rows · num_cols, row-major: matrix (r, c) gets
// titles[r · num_cols + c]); `row_titles` is empty or one per grid row, drawn left of the row as
// its header. With 1 grid row the two counts of `titles` are the same and mean the same.
//
//   // Weights (2 layers, 3 heads, Q, K): heads across, layers down.
//   show_heatmaps(weights, "weights.png",
//       {.titles = {"head 0", "head 1", "head 2"}, .row_titles = {"layer 0", "layer 1"}});
struct ShowHeatmapsOptions {
  std::string xlabel = "Keys", ylabel = "Queries";
  std::vector<std::string> titles;      // above the panels: none, num_cols or num_rows · num_cols
  std::vector<std::string> row_titles;  // left of the grid rows: none or num_rows
  std::vector<std::string> row_labels;  // Q labels, or empty
  std::vector<std::string> col_labels;  // K labels, or empty
  int64_t cell = 12;                    // pixels per matrix cell
};
// Throws ShapeError for a tensor that is not 4-D, or labels or titles of the wrong count (naming
// the count given and the counts allowed).
Image render_show_heatmaps(const Tensor& matrices, const ShowHeatmapsOptions& options = {});
void show_heatmaps(
    const Tensor& matrices, const std::string& path, const ShowHeatmapsOptions& options = {});

}  // namespace ag::viz
