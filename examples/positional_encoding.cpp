// The figures of d2l.ai's positional-encoding section, drawn from ag's nn::PositionalEncoding:
//
//   encoding_dim, num_steps = 32, 60
//   pos_encoding = PositionalEncoding(encoding_dim, 0)
//   P = pos_encoding.P[:, :num_steps, :]
//   d2l.plot(torch.arange(num_steps), P[0, :, 6:10].T, xlabel='Row (position)',
//            legend=["Col %d" % d for d in torch.arange(6, 10)])
//   for i in range(8): print(f'{i} in binary is {i:>03b}')
//   d2l.show_heatmaps(P, xlabel='Column (encoding dimension)', ylabel='Row (position)')
//
// and a numerical check of the section's relative-position argument. With ω_j = 1 / 10000^(2j/d),
//   P[i, 2j] = sin(i·ω_j),  P[i, 2j+1] = cos(i·ω_j),
// so for any offset δ the pair at position i + δ is the pair at i turned by the angle δ·ω_j:
//   [P[i+δ, 2j]  ]   [ cos δω_j   sin δω_j ] [P[i, 2j]  ]
//   [P[i+δ, 2j+1]] = [−sin δω_j   cos δω_j ] [P[i, 2j+1]]
// — a linear map that depends on δ but not on i.
//
//   ag-positional-encoding --out-dir pictures
// writes pictures/positional_encoding_columns.{png,csv,gp} and positional_encoding_heatmap.png,
// and exits with status 1 if the rotation property fails by more than the float tolerance.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>

#include "io/output_path.h"
#include "nn/nn.h"
#include "training/cli.h"
#include "viz/viz.h"

namespace {

using namespace ag;

// The four columns d2l plots: 6 and 7 (one sine/cosine pair, j = 3) turn faster than 8 and 9 (j =
// 4).
constexpr int64_t first_column = 6, plotted_columns = 4;

// The largest |P[i+δ, 2j+k] − (R(δ·ω_j) · (P[i, 2j], P[i, 2j+1]))_k| over every position i with
// i + δ in the table, every pair j and k ∈ {0, 1}. P is (max_len, d) row-major float32; the
// rotation is computed in double.
double rotation_error(const std::vector<float>& P, int64_t max_len, int64_t d, int64_t delta) {
  double worst = 0;
  for (int64_t j = 0; 2 * j + 1 < d; ++j) {  // an odd d's last column has no partner
    const double omega =
        1.0 / std::pow(10000.0, static_cast<double>(2 * j) / static_cast<double>(d));
    const double c = std::cos(static_cast<double>(delta) * omega),
                 s = std::sin(static_cast<double>(delta) * omega);
    for (int64_t i = 0; i + delta < max_len; ++i) {
      const double sin_i = P[i * d + 2 * j], cos_i = P[i * d + 2 * j + 1];
      // [sin((i+δ)ω), cos((i+δ)ω)] = [c·sin(iω) + s·cos(iω), −s·sin(iω) + c·cos(iω)]
      const double rotated_sin = c * sin_i + s * cos_i, rotated_cos = -s * sin_i + c * cos_i;
      worst = std::max({worst, std::abs(P[(i + delta) * d + 2 * j] - rotated_sin),
          std::abs(P[(i + delta) * d + 2 * j + 1] - rotated_cos)});
    }
  }
  return worst;
}

int run(const std::filesystem::path& out_dir, int64_t num_hiddens, int64_t num_steps) {
  std::filesystem::create_directories(out_dir);
  nn::PositionalEncoding pos_encoding(num_hiddens, 0.0);
  pos_encoding.eval();
  const Tensor table = pos_encoding.P.select(0, 0);  // (max_len, d): the whole buffer
  const Tensor P = table.narrow(0, 0, num_steps);    // (T, d): the first num_steps positions

  // Columns 6–9 against the position, as d2l.plot draws them.
  std::vector<std::string> header{"position"};
  std::vector<std::vector<double>> columns{std::vector<double>()};
  for (int64_t i = 0; i < num_steps; ++i) columns[0].push_back(static_cast<double>(i));
  viz::LinePanel panel{
      .title = "Positional encoding: columns 6-9 of P (d = " + std::to_string(num_hiddens) + ")",
      .xlabel = "Row (position)",
      .ylabel = "P[i, col]",
      .curves = {},
      .ymin = -1.1,
      .ymax = 1.4,  // room above the curves for the legend
      .key = "top right horizontal"};
  for (int64_t col = first_column; col < first_column + plotted_columns; ++col) {
    header.push_back("col_" + std::to_string(col));
    columns.push_back(P.select(1, col).to_vector<double>());  // (T,)
    panel.curves.push_back({header.back(), "Col " + std::to_string(col)});
  }
  const std::filesystem::path csv = out_dir / "positional_encoding_columns.csv",
                              line_png = out_dir / "positional_encoding_columns.png",
                              heatmap_png = out_dir / "positional_encoding_heatmap.png";
  viz::write_csv(csv.string(), header, columns);
  viz::LineFigure figure;
  figure.panels = {panel};
  figure.width = 720;
  figure.height = 360;
  viz::plot_csv(csv.string(), line_png.string(), figure);
  std::printf(
      "wrote %s (columns 6-9 of P against the position) and %s\n", line_png.c_str(), csv.c_str());

  // The whole (T, d) table: rows are positions, columns encoding dimensions. Along a row the
  // frequency ω_j falls from column to column, like the bits of the binary numbers below.
  viz::write_heatmap(heatmap_png.string(), P,
      {.title = "P: " + std::to_string(num_steps) + " positions x " + std::to_string(num_hiddens),
          .xlabel = "Column (encoding dimension)",
          .ylabel = "Row (position)",
          .row_labels = viz::index_labels(num_steps),
          .col_labels = viz::index_labels(num_hiddens),
          .cell = 8,
          .font_scale = 1,
          .vmin = -1.0,
          .vmax = 1.0,
          .colorbar = true});
  std::printf("wrote %s (P: position x encoding dimension)\n\n", heatmap_png.c_str());

  // d2l: "in the binary representation a higher bit alternates less often than a lower one" —
  // bit b flips every 2^b numbers, as column pair j turns with period 2π / ω_j.
  for (int i = 0; i < 8; ++i)
    std::printf("%d in binary is %d%d%d\n", i, (i >> 2) & 1, (i >> 1) & 1, i & 1);

  // The rotation property over the whole table. Each entry of P is the double-precision value
  // rounded once to float32, an error of at most half an ulp: 2^-25 for |p| in [0.5, 1), less for
  // smaller |p|. Rotation preserves length, so the rounding errors of the pair at i (a vector of
  // length ≤ √2·2^-25) come out of the rotation no longer; the entry at i + δ adds its own 2^-25.
  // The largest possible error is therefore (1 + √2)·2^-25 ≈ 7.2e-8 (the double arithmetic adds
  // ~1e-15); the tolerance is 2^-23 ≈ 1.19e-7, the next power of two. A table computed in float32
  // as d2l does (the angle i·ω_j rounded to float before the sine) misses it by far: its largest
  // error over these offsets is about 5e-5, from the rounded angles at large i.
  const double tolerance = std::ldexp(1.0, -23);
  const int64_t max_len = table.size(0);
  const std::vector<float> values = table.to_vector<float>();  // (max_len, d) row-major
  std::printf(
      "\nrelative positions: (P[i+delta, 2j], P[i+delta, 2j+1]) = rotation by delta*w_j of (P[i, "
      "2j], "
      "P[i, 2j+1]), over all %lld positions and %lld pairs\n",
      static_cast<long long>(max_len), static_cast<long long>(num_hiddens / 2));
  double worst = 0;
  for (int64_t delta : {1, 2, 5, 10, 59, 500}) {
    if (delta >= max_len) continue;
    const double error = rotation_error(values, max_len, num_hiddens, delta);
    worst = std::max(worst, error);
    std::printf("  delta %3lld: largest error %.3g\n", static_cast<long long>(delta), error);
  }
  const bool ok = worst <= tolerance;
  std::printf("largest error %.3g %s the float32 tolerance 2^-23 = %.3g: %s\n", worst,
      ok ? "<=" : ">", tolerance, ok ? "the rotation property holds" : "FAILED");
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::string out_dir = ".";
  int64_t num_hiddens = 32, num_steps = 60;
  CLI::App app{
      "ag-positional-encoding: d2l's positional-encoding figures and the relative-position check"};
  app.add_option("--out-dir", out_dir, "directory for the PNG, CSV and gnuplot files")
      ->capture_default_str();
  ag::training::add_whole_number(app, "--num-hiddens", num_hiddens,
      "encoding dimension d (at least 10: columns 6-9 are plotted)");
  ag::training::add_whole_number(app, "--num-steps", num_steps, "positions plotted (1-1000)");
  return ag::training::run_main("ag-positional-encoding", app, argc, argv, [&] {
    if (num_hiddens < first_column + plotted_columns || num_hiddens > 4096 || num_steps < 1 ||
        num_steps > 1000)
      throw ag::training::UsageError("--num-hiddens " + std::to_string(num_hiddens) +
                                     " must be in 10-4096 and --num-steps " +
                                     std::to_string(num_steps) + " in 1-1000");
    // The folder is checked before anything is computed (io/output_path.h); nothing is created.
    if (const std::string why = ag::output_directory_problem(out_dir); !why.empty())
      throw ag::training::UsageError("--out-dir " + out_dir + ": " + why);
    return run(out_dir, num_hiddens, num_steps);
  });
}
