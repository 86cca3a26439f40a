// Line plots (training curves, the positional encoding's columns) drawn by gnuplot from a CSV file:
//
//   ag::viz::write_csv("loss.csv", {"step", "loss"}, {steps, losses});
//   ag::viz::plot_csv("loss.csv", "loss.png", {.panels = {{.title = "loss", .curves = {{"loss",
//   "training"}}}}});
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "viz/image.h"

namespace ag::viz {

// Writes a CSV file: the header line, then one row per index of the (equally long) columns, with
// 9 significant digits. Throws ShapeError for columns of different lengths or a header of another
// count, IoError naming the path if it cannot be written.
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
  std::vector<LinePanel> panels;    // drawn one above the other
  std::string title;                // over all panels (empty: none)
  int64_t width = 800, height = 0;  // pixels; height 0: 360 per panel
  bool points = false;              // a marker at each data point, besides the lines
  std::string gnuplot = "gnuplot";  // the program run (looked up on PATH)
};

// Plots the CSV file's columns against its first column with gnuplot's png terminal (which
// gnuplot-nox has): writes a gnuplot script next to the PNG (png_path with extension .gp, so the
// picture can be redrawn by hand with `gnuplot FILE.gp`) and runs `gnuplot FILE.gp`. Throws
// ExternalProgramError naming the command if gnuplot cannot be started (not installed) or exits
// with a non-zero status (with its status and messages); IoError if the CSV cannot be read, or a
// curve names a column it lacks.
void plot_csv(const std::string& csv_path, const std::string& png_path, const LineFigure& figure);

// Why plot_csv could not run `gnuplot` (the program figure.gnuplot names): "" when it is an
// executable file — given with a '/', or found on PATH — otherwise what is missing, to be said
// before a run whose curves it would draw at the end.
std::string gnuplot_problem(const std::string& gnuplot = "gnuplot");

}  // namespace ag::viz
