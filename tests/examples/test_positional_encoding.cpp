// ag-positional-encoding (examples/positional_encoding.cpp) run as a user runs it: d2l's figures of
// the positional-encoding table, the binary numbers beside them, and the rotation check.
#include <catch2/catch.hpp>

#include <cmath>

#include "tests/pictures_test_util.h"

using namespace ag::viz;
using namespace ag::viz::testing;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

TEST_CASE("ag-positional-encoding draws columns 6-9 and the heatmap of P, and checks the rotations",
    "[pictures][positional-encoding]") {
  const fs::path dir = temp_dir() / "out";  // created by the program
  const Run r = run(std::string(AG_POSITIONAL_ENCODING_PATH) + " --out-dir " + dir.string());
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  for (int i = 0; i < 8; ++i) {
    const std::string bits{
        char('0' + ((i >> 2) & 1)), char('0' + ((i >> 1) & 1)), char('0' + (i & 1))};
    CHECK_THAT(r.output, Contains(std::to_string(i) + " in binary is " + bits + "\n"));
  }
  CHECK_THAT(r.output, Contains("the rotation property holds"));

  // The CSV: the position, then d2l's four columns, with P's values
  //   P[i, 2j] = sin(i / 10000^(2j/32)), P[i, 2j+1] = cos(i / 10000^(2j/32)) (columns 6, 7: j = 3;
  //   8, 9: j = 4).
  const std::vector<std::string> csv = lines(read_text(dir / "positional_encoding_columns.csv"));
  REQUIRE(csv.size() == 61);
  CHECK(csv[0] == "position,col_6,col_7,col_8,col_9");
  for (int i = 0; i < 60; ++i) {
    double position = 0, c6 = 0, c7 = 0, c8 = 0, c9 = 0;
    REQUIRE(
        std::sscanf(csv[i + 1].c_str(), "%lf,%lf,%lf,%lf,%lf", &position, &c6, &c7, &c8, &c9) == 5);
    const double w3 = 1 / std::pow(10000.0, 6.0 / 32), w4 = 1 / std::pow(10000.0, 8.0 / 32);
    CHECK(position == i);
    CHECK(c6 == Approx(std::sin(i * w3)).margin(1e-6));
    CHECK(c7 == Approx(std::cos(i * w3)).margin(1e-6));
    CHECK(c8 == Approx(std::sin(i * w4)).margin(1e-6));
    CHECK(c9 == Approx(std::cos(i * w4)).margin(1e-6));
  }
  CHECK_THAT(read_text(dir / "positional_encoding_columns.gp"),
      Contains("'Col 6'") && Contains("'Col 9'") && Contains("'Row (position)'"));

  // The line plot: the size asked of gnuplot, background, axes and four curve colours at least.
  const Image lines_png = read_png((dir / "positional_encoding_columns.png").string());
  CHECK(lines_png.width() == 720);
  CHECK(lines_png.height() == 360);
  CHECK(distinct_colours(lines_png) >= 6);

  // The heatmap: 60 rows × 32 columns of 8-pixel cells plus the labels, in many viridis shades.
  const Image heatmap = read_png((dir / "positional_encoding_heatmap.png").string());
  CHECK(heatmap.width() > 32 * 8);
  CHECK(heatmap.height() > 60 * 8);
  CHECK(distinct_colours(heatmap) > 100);
  fs::remove_all(dir.parent_path());
}

TEST_CASE("ag-positional-encoding rejects bad options with exit code 2",
    "[pictures][positional-encoding]") {
  for (const std::string options : {"--num-hiddens 8", "--num-steps 0", "--num-steps 1001",
           "--no-such-option", "--num-steps 010", "--num-hiddens +32", "--num-hiddens 0x20"}) {
    const Run r = run(std::string(AG_POSITIONAL_ENCODING_PATH) + " " + options);
    INFO(options << ": " << r.output);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.output, Contains("ag-positional-encoding: "));
  }
  // An output directory that cannot be created is a bad option, refused before anything runs:
  // exit code 2, the option, the path and the system's reason.
  const Run r = run(std::string(AG_POSITIONAL_ENCODING_PATH) + " --out-dir /proc/no-such-dir");
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, Contains("ag-positional-encoding: --out-dir /proc/no-such-dir: cannot "
                                "create files in /proc: "));
}
