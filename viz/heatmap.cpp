#include "viz/heatmap.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "viz/colormap.h"
#include "viz/font.h"

namespace ag::viz {

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
    fail<ShapeError>("render_heatmap: expected a non-empty 2-D tensor (rows, cols), got ",
        matrix.defined() ? shape_str(matrix.shape()) : std::string("an undefined tensor"));
  const int64_t rows = matrix.size(0), cols = matrix.size(1);
  if (!o.row_labels.empty() && static_cast<int64_t>(o.row_labels.size()) != rows)
    fail<ShapeError>("render_heatmap: ", o.row_labels.size(), " row labels for a matrix of shape ",
        shape_str(matrix.shape()));
  if (!o.col_labels.empty() && static_cast<int64_t>(o.col_labels.size()) != cols)
    fail<ShapeError>("render_heatmap: ", o.col_labels.size(),
        " column labels for a matrix of shape ", shape_str(matrix.shape()));
  if (o.cell < 1 || o.cell > 256 || o.font_scale < 1 || o.font_scale > 8)
    fail<ValueError>("render_heatmap: cell ", o.cell, " must be in 1…256 and font_scale ",
        o.font_scale, " in 1…8");
  const std::vector<double> values = matrix.to_vector<double>();  // row-major (rows, cols)
  double low = values[0], high = values[0];
  for (int64_t i = 0; i < rows * cols; ++i) {
    const double v = values[static_cast<std::size_t>(i)];
    if (!std::isfinite(v))
      fail<ValueError>("render_heatmap: the value at row ", i / cols, ", column ", i % cols,
          " of the ", shape_str(matrix.shape()), " matrix is ", v);
    low = std::min(low, v);
    high = std::max(high, v);
  }
  const double vmin = o.vmin.value_or(low), vmax = o.vmax.value_or(high);
  if (!std::isfinite(vmin) || !std::isfinite(vmax) || vmin > vmax)
    fail<ValueError>(
        "render_heatmap: vmin ", vmin, " and vmax ", vmax, " must be finite with vmin <= vmax");
  // Value v -> t = (v − vmin) / (vmax − vmin) in [0, 1] (clamped) -> viridis(t).
  auto colour_of = [&](double v) {
    return viridis(vmax > vmin ? (v - vmin) / (vmax - vmin) : 0.5);
  };

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
  const int64_t bar_w =
      o.colorbar ? 3 * pad + 2 * pad + std::max(text_width(top_text, s), text_width(bottom_text, s))
                 : 0;
  const int64_t width = std::max(map_x + map_w + bar_w + pad, pad + text_width(o.title, s) + pad);
  const int64_t below = std::max(col_labels_h + xlabel_h, o.colorbar ? line : 0);
  const int64_t height = std::max(
      {map_y + map_h + below + pad, map_y + line * 2 + pad, map_y + text_width(o.ylabel, s) + pad});
  Image image(width, height);
  const Rgb ink{40, 40, 40};

  if (!o.title.empty())
    draw_text(image, (width - text_width(o.title, s)) / 2, pad, o.title, ink, s);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      image.fill(map_x + c * o.cell, map_y + r * o.cell, o.cell, o.cell,
          colour_of(values[static_cast<std::size_t>(r * cols + c)]));
  // Row labels right-aligned against the map, centred on their row.
  for (int64_t r = 0; r < static_cast<int64_t>(o.row_labels.size()); r += every) {
    const std::string& label = o.row_labels[static_cast<std::size_t>(r)];
    draw_text(image, map_x - pad / 2 - text_width(label, s),
        map_y + r * o.cell + (o.cell - line) / 2, label, ink, s);
  }
  // Column labels vertical under the map, reading upwards, their top end against the map.
  for (int64_t c = 0; c < static_cast<int64_t>(o.col_labels.size()); c += every) {
    const std::string& label = o.col_labels[static_cast<std::size_t>(c)];
    draw_text(image, map_x + c * o.cell + (o.cell - line) / 2, map_y + map_h + pad / 2, label, ink,
        s, true);
  }
  if (!o.xlabel.empty())
    draw_text(image, map_x + (map_w - text_width(o.xlabel, s)) / 2,
        map_y + map_h + col_labels_h + pad / 2, o.xlabel, ink, s);
  if (!o.ylabel.empty())
    draw_text(image, pad, map_y + std::max<int64_t>(0, (map_h - text_width(o.ylabel, s)) / 2),
        o.ylabel, ink, s, true);
  if (o.colorbar) {
    // A bar as high as the map (at least two text lines), vmax at the top, vmin at the bottom.
    const int64_t bar_x = map_x + map_w + 2 * pad, bar_h = std::max(map_h, 2 * line),
                  bar_width = 3 * pad;
    for (int64_t y = 0; y < bar_h; ++y)
      image.fill(bar_x, map_y + y, bar_width, 1,
          viridis(1.0 - static_cast<double>(y) / static_cast<double>(bar_h - 1)));
    draw_text(image, bar_x + bar_width + pad, map_y, top_text, ink, s);
    draw_text(image, bar_x + bar_width + pad, map_y + bar_h - line, bottom_text, ink, s);
  }
  return image;
}

void write_heatmap(const std::string& path, const Tensor& matrix, const HeatmapOptions& options) {
  write_png(path, render_heatmap(matrix, options));
}

namespace {

// Pictures laid out `columns` to a row, each in a cell as large as the largest, under an optional
// title; row_titles (empty, or one per grid row) right-aligned in a column to the left of the
// rows, each centred on its row.
Image image_grid(const std::vector<Image>& images, int64_t columns, const std::string& title,
    const std::vector<std::string>& row_titles, int64_t font_scale) {
  int64_t cell_w = 0, cell_h = 0;
  for (const Image& image : images) {
    cell_w = std::max(cell_w, image.width());
    cell_h = std::max(cell_h, image.height());
  }
  const int64_t count = static_cast<int64_t>(images.size());
  const int64_t grid_columns = std::min(columns, count),
                grid_rows = (count + columns - 1) / columns;
  const int64_t s = font_scale, pad = 4 * s, line = glyph_height * s;
  const int64_t title_h = title.empty() ? 0 : line + 2 * pad;
  // A column for the row titles only if one has text: none (or all "") leaves no blank strip.
  const int64_t longest_row_title = longest_label(row_titles, s);
  const int64_t row_titles_w = longest_row_title > 0 ? longest_row_title + 2 * pad : 0;
  const int64_t width =
      std::max(row_titles_w + grid_columns * cell_w, text_width(title, s) + 2 * pad);
  Image grid(width, title_h + grid_rows * cell_h);
  const Rgb ink{40, 40, 40};
  if (!title.empty()) draw_text(grid, (width - text_width(title, s)) / 2, pad, title, ink, s);
  for (int64_t r = 0; r < static_cast<int64_t>(row_titles.size()); ++r) {
    const std::string& row_title = row_titles[static_cast<std::size_t>(r)];
    draw_text(grid, row_titles_w - pad - text_width(row_title, s),
        title_h + r * cell_h + (cell_h - line) / 2, row_title, ink, s);
  }
  for (int64_t i = 0; i < count; ++i)
    grid.blit(images[static_cast<std::size_t>(i)], row_titles_w + (i % columns) * cell_w,
        title_h + (i / columns) * cell_h);
  return grid;
}

}  // namespace

Image render_heatmap_grid(const std::vector<HeatmapPanel>& panels, int64_t columns,
    const std::string& title, int64_t font_scale) {
  if (panels.empty() || columns < 1 || font_scale < 1)
    fail<ValueError>("render_heatmap_grid: ", panels.size(), " panels in ", columns,
        " columns (font scale ", font_scale, "): need at least one panel and one column");
  std::vector<Image> images;
  for (const HeatmapPanel& p : panels) images.push_back(render_heatmap(p.matrix, p.options));
  return image_grid(images, columns, title, {}, font_scale);
}

void write_heatmap_grid(const std::string& path, const std::vector<HeatmapPanel>& panels,
    int64_t columns, const std::string& title, int64_t font_scale) {
  write_png(path, render_heatmap_grid(panels, columns, title, font_scale));
}

// ---- d2l's show_heatmaps ------------------------------------------------------------------------

Image render_show_heatmaps(const Tensor& matrices, const ShowHeatmapsOptions& o) {
  if (matrices.dim() != 4)
    fail<ShapeError>("show_heatmaps: matrices of shape ", shape_str(matrices.shape()),
        " are not (num_rows, num_cols, Q, K)");
  const int64_t num_rows = matrices.size(0), num_cols = matrices.size(1);
  if (num_rows == 0 || num_cols == 0)
    fail<ShapeError>("show_heatmaps: no matrices to draw in shape ", shape_str(matrices.shape()));
  const int64_t num_titles = static_cast<int64_t>(o.titles.size());
  const bool title_per_matrix = num_titles == num_rows * num_cols;
  if (num_titles != 0 && num_titles != num_cols && !title_per_matrix)
    fail<ShapeError>("show_heatmaps: ", num_titles, " titles for matrices ",
        shape_str(matrices.shape()), ": need none, ", num_cols, " (one per grid column) or ",
        num_rows * num_cols, " (one per matrix)");
  if (!o.row_titles.empty() && static_cast<int64_t>(o.row_titles.size()) != num_rows)
    fail<ShapeError>("show_heatmaps: ", o.row_titles.size(), " row titles for ", num_rows,
        " rows of matrices ", shape_str(matrices.shape()), ": need none or ", num_rows);
  // One colour scale for every panel, as d2l's shared colorbar: the extremes of all the matrices.
  // (A non-finite value is left to render_heatmap, which names its row and column.)
  double vmin = INFINITY, vmax = -INFINITY;
  for (double v : matrices.to_vector<double>())
    if (std::isfinite(v)) vmin = std::min(vmin, v), vmax = std::max(vmax, v);
  std::vector<Image> panels;
  for (int64_t row = 0; row < num_rows; ++row)
    for (int64_t col = 0; col < num_cols; ++col) {
      const int64_t title_index = title_per_matrix ? row * num_cols + col : col;
      HeatmapOptions panel{
          .title = o.titles.empty() ? "" : o.titles[static_cast<std::size_t>(title_index)],
          .xlabel = o.xlabel,
          .ylabel = o.ylabel,
          .row_labels = o.row_labels,
          .col_labels = o.col_labels,
          .cell = o.cell,
          .vmin = vmin,
          .vmax = vmax,
          .colorbar = col == num_cols - 1};  // one colour bar per grid row
      panels.push_back(render_heatmap(matrices.select(0, row).select(0, col), panel));  // (Q, K)
    }
  return image_grid(panels, num_cols, /*title=*/"", o.row_titles, /*font_scale=*/1);
}

void show_heatmaps(
    const Tensor& matrices, const std::string& path, const ShowHeatmapsOptions& options) {
  write_png(path, render_show_heatmaps(matrices, options));
}

HeatmapPanel attention_panel(const Tensor& weights, const std::string& title,
    const std::string& xlabel, const std::string& ylabel, std::vector<std::string> row_labels,
    std::vector<std::string> col_labels) {
  return {weights, {.title = title,
                       .xlabel = xlabel,
                       .ylabel = ylabel,
                       .row_labels = std::move(row_labels),
                       .col_labels = std::move(col_labels),
                       .cell = 20,
                       .font_scale = 1,
                       .vmin = 0.0,
                       .vmax = 1.0,
                       .colorbar = true}};
}

}  // namespace ag::viz
