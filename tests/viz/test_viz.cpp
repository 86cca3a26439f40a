// viz/: PNG files written and read back with libpng, the colour map, the bitmap font,
// heatmaps and their grid, CSV files and gnuplot line plots, and the errors of each.
#include <catch2/catch.hpp>

#include <set>
#include <tuple>

#include "tests/pictures_test_util.h"

using namespace ag;
using namespace ag::viz;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

using namespace ag::viz::testing;

namespace {

// Pixels of `image` that are not white.
int64_t ink(const Image& image) {
  int64_t count = 0;
  for (int64_t y = 0; y < image.height(); ++y)
    for (int64_t x = 0; x < image.width(); ++x) count += !(image.at(x, y) == white);
  return count;
}

// Whether `part` is drawn in `image` with its top-left corner at (x, y), pixel for pixel.
bool contains_at(const Image& image, int64_t x, int64_t y, const Image& part) {
  for (int64_t v = 0; v < part.height(); ++v)
    for (int64_t u = 0; u < part.width(); ++u)
      if (!(image.at(x + u, y + v) == part.at(u, v))) return false;
  return true;
}

// d2l-shaped attention weights: 2 × 3 matrices of shape (2, 4), matrix (r, c) holding the value
// 3r + c everywhere (0 to 5).
Tensor two_by_three_matrices() {
  std::vector<double> values;
  for (int r = 0; r < 2; ++r)
    for (int c = 0; c < 3; ++c)
      for (int i = 0; i < 8; ++i) values.push_back(3 * r + c);
  return tensor(values, {2, 3, 2, 4});  // (num_rows, num_cols, Q, K)
}

}  // namespace

TEST_CASE("write_png writes RGB pixels that read_png reads back exactly", "[plot][png]") {
  const fs::path dir = temp_dir();
  const int64_t w = 7, h = 5;
  std::vector<uint8_t> rgb;
  for (int64_t y = 0; y < h; ++y)
    for (int64_t x = 0; x < w; ++x) {
      rgb.push_back(static_cast<uint8_t>(30 * x));
      rgb.push_back(static_cast<uint8_t>(50 * y));
      rgb.push_back(static_cast<uint8_t>(x * y));
    }
  write_png((dir / "a.png").string(), w, h, rgb);
  const Image back = read_png((dir / "a.png").string());
  CHECK(back.width() == w);
  CHECK(back.height() == h);
  CHECK(back.rgb() == rgb);
  CHECK(distinct_colours(back) == static_cast<std::size_t>(w * h));
  fs::remove_all(dir);
}

TEST_CASE(
    "write_png and read_png name the path and the reason when they fail", "[plot][png][errors]") {
  const std::vector<uint8_t> rgb(12, 0);
  CHECK_THROWS_AS(write_png("/no-such-directory/x.png", 2, 2, rgb), IoError);
  CHECK_THROWS_WITH(write_png("/no-such-directory/x.png", 2, 2, rgb),
      Contains("write_png") && Contains("/no-such-directory/x.png") &&
          Contains("No such file or directory"));
  CHECK_THROWS_WITH(write_png("x.png", 2, 3, rgb),
      Contains("write_png") && Contains("2x3") && Contains("18 bytes") && Contains("got 12"));
  CHECK_THROWS_AS(write_png("x.png", 0, 2, {}), ShapeError);
  CHECK_THROWS_WITH(read_png("/no-such-directory/x.png"),
      Contains("read_png") && Contains("/no-such-directory/x.png"));
  const fs::path dir = temp_dir();
  std::ofstream(dir / "not.png") << "not a picture";
  CHECK_THROWS_WITH(read_png((dir / "not.png").string()),
      Contains((dir / "not.png").string()) && Contains("Not a PNG"));
  fs::remove_all(dir);
}

TEST_CASE("viridis runs from dark purple to yellow, always getting lighter", "[plot][colour]") {
  CHECK(viridis(0.0) == Rgb{68, 1, 84});
  CHECK(viridis(1.0) == Rgb{253, 231, 37});
  CHECK(viridis(-3.0) == viridis(0.0));  // clamped
  CHECK(viridis(7.0) == viridis(1.0));
  double previous = -1;
  for (int i = 0; i <= 200; ++i) {
    const double l = luminance(viridis(i / 200.0));
    INFO("t = " << i / 200.0);
    CHECK(l > previous);
    previous = l;
  }
  CHECK_THROWS_AS(viridis(NAN), ValueError);
}

TEST_CASE("the bitmap font has a distinct 5x7 glyph for every character it lists", "[plot][font]") {
  const std::string characters = font_characters();
  CHECK(characters.find('0') != std::string::npos);
  CHECK(characters.find('Z') != std::string::npos);
  CHECK(characters.find('<') != std::string::npos);
  std::set<std::vector<std::string>> seen;
  for (char c : characters) {
    INFO("glyph '" << c << "'");
    const auto& rows = glyph(c);
    REQUIRE(rows.size() == static_cast<std::size_t>(glyph_height));
    for (const std::string& row : rows) {
      CHECK(row.size() == static_cast<std::size_t>(glyph_width));
      CHECK(row.find_first_not_of(".#") == std::string::npos);
    }
    CHECK(seen.insert(rows).second);  // no two characters look the same
  }
  for (char c : {'\x01', '@', '{', '~', '"'}) {  // anything else as '?'
    INFO("character " << int(c));
    CHECK(glyph(c) == glyph('?'));
  }
  CHECK(text_width("", 2) == 0);
  CHECK(text_width("ab", 1) == 11);  // 5 + 1 + 5
  CHECK(text_width("ab", 3) == 33);
}

TEST_CASE("small letters have glyphs of their own, an x-height of 5 rows and raised descenders",
    "[plot][font]") {
  CHECK(glyph('a') ==
        std::vector<std::string>{".....", ".....", ".###.", "....#", ".####", "#...#", ".####"});
  CHECK(glyph('g') ==
        std::vector<std::string>{".....", ".....", ".####", "#...#", ".####", "....#", ".###."});
  CHECK(glyph('k') ==
        std::vector<std::string>{"#....", "#....", "#..#.", "#.#..", "##...", "#.#..", "#..#."});
  const std::string ascending = "bdfhklt", dotted = "ij";
  for (char c = 'a'; c <= 'z'; ++c) {
    INFO("glyph '" << c << "'");
    const auto& rows = glyph(c);
    CHECK(rows != glyph(static_cast<char>(c - 'a' + 'A')));  // not its capital
    CHECK(font_characters().find(c) != std::string::npos);
    // Above the x-height (rows 0 and 1) only ascenders and the dots of i and j have ink.
    const bool above = rows[0] != "....." || rows[1] != ".....";
    CHECK(above == (ascending.find(c) != std::string::npos || dotted.find(c) != std::string::npos));
    CHECK(rows[2] != ".....");  // every small letter reaches the x-height
  }
  // Drawn: "ace" has no ink in the top two rows where "ACE" has, and is not the same picture.
  Image small(20, 7), capitals(20, 7);
  draw_text(small, 0, 0, "ace", black);
  draw_text(capitals, 0, 0, "ACE", black);
  CHECK(small.rgb() != capitals.rgb());
  auto top_ink = [](const Image& image) {
    int64_t count = 0;
    for (int64_t y = 0; y < 2; ++y)
      for (int64_t x = 0; x < image.width(); ++x) count += !(image.at(x, y) == white);
    return count;
  };
  CHECK(top_ink(small) == 0);
  CHECK(top_ink(capitals) > 0);
}

TEST_CASE(
    "text is UTF-8: accented Latin letters drawn without accents, others as '?'", "[plot][font]") {
  // French words as d2l's fra.txt has them, as heatmap labels of a translation show them.
  CHECK(drawable_text("été") == "ete");
  CHECK(drawable_text("Ça coûte cher, n’est-ce pas ?") == "Ca coute cher, n'est-ce pas ?");
  CHECK(drawable_text("Œuvre, cœur, Straße, ÀÉÎÕÜ, æ") == "OEuvre, coeur, Strasse, AEIOU, ae");
  CHECK(drawable_text("×÷") == "??");                      // Latin-1's signs have no stand-in
  CHECK(drawable_text("日本, Ω, 🙂") == "??, ?, ?");  // one '?' per code point
  CHECK(drawable_text("a\xff\xc3") == "a??");              // invalid UTF-8: one '?' per byte
  CHECK(drawable_text("\xe9t\xe9") == "?t?");              // Latin-1 bytes are not UTF-8
  CHECK(text_width("été") == text_width("ete"));
  Image accented(60, 10), plain(60, 10);
  draw_text(accented, 0, 0, "Ça été", black);
  draw_text(plain, 0, 0, "Ca ete", black);
  for (int64_t y = 0; y < 10; ++y)
    for (int64_t x = 0; x < 60; ++x) CHECK(accented.at(x, y) == plain.at(x, y));
}

TEST_CASE("draw_text draws the same ink horizontally and turned a quarter turn", "[plot][font]") {
  const std::string text = "L0";
  Image flat(40, 40), turned(40, 40);
  draw_text(flat, 0, 0, text, black, 2);
  draw_text(turned, 0, 0, text, black, 2, true);
  CHECK(ink(flat) > 0);
  CHECK(ink(flat) == ink(turned));
  // Bounding boxes: text_width × 14 flat, 14 × text_width turned.
  auto box = [](const Image& image) {
    int64_t right = 0, bottom = 0;
    for (int64_t y = 0; y < image.height(); ++y)
      for (int64_t x = 0; x < image.width(); ++x)
        if (!(image.at(x, y) == white))
          right = std::max(right, x + 1), bottom = std::max(bottom, y + 1);
    return std::pair<int64_t, int64_t>{right, bottom};
  };
  CHECK(box(flat) == std::pair<int64_t, int64_t>{text_width(text, 2), 14});
  CHECK(box(turned) == std::pair<int64_t, int64_t>{14, text_width(text, 2)});
  // 'L' read upwards: its foot (the bottom row of the glyph) becomes the left column, starting at
  // the bottom of the box.
  CHECK(turned.at(13, text_width(text, 2) - 1) == black);
  CHECK(turned.at(0, text_width(text, 2) - 1) == black);
  // Drawing off the image is clipped, not an error.
  CHECK_NOTHROW(draw_text(flat, 35, 35, "WIDE TEXT", black));
}

TEST_CASE(
    "a heatmap colours each cell by its value: larger values are lighter", "[plot][heatmap]") {
  // (2, 3): the values in a scrambled order, each twice in no cell.
  const Tensor m = tensor({4.0, 0.0, 2.0, 1.0, 5.0, 3.0}, {2, 3});
  HeatmapOptions o;
  o.cell = 10;
  o.colorbar = false;
  const Image image = render_heatmap(m, o);
  // No title or labels: the map starts at (pad, pad) = (4, 4).
  auto centre = [&](int64_t r, int64_t c) { return image.at(4 + c * 10 + 5, 4 + r * 10 + 5); };
  CHECK(centre(0, 1) == viridis(0.0));  // the minimum
  CHECK(centre(1, 1) == viridis(1.0));  // the maximum
  // Sorted by value, the cells' luminance rises strictly.
  const std::vector<std::pair<int64_t, int64_t>> by_value{
      {0, 1}, {1, 0}, {0, 2}, {1, 2}, {0, 0}, {1, 1}};
  for (std::size_t i = 1; i < by_value.size(); ++i)
    CHECK(luminance(centre(by_value[i].first, by_value[i].second)) >
          luminance(centre(by_value[i - 1].first, by_value[i - 1].second)));
  // A whole cell is one colour.
  CHECK(image.at(4 + 10, 4) == centre(0, 1));
  CHECK(image.at(4 + 19, 4 + 9) == centre(0, 1));

  // Written and read back: the same pixels.
  const fs::path dir = temp_dir();
  write_heatmap((dir / "m.png").string(), m, o);
  const Image back = read_png((dir / "m.png").string());
  CHECK(back.width() == image.width());
  CHECK(back.height() == image.height());
  CHECK(back.rgb() == image.rgb());
  CHECK(distinct_colours(back) == 7);  // six cells and the white margin
  fs::remove_all(dir);

  // vmin/vmax fix the scale: with [0, 10] the maximum 5 is the middle colour.
  o.vmin = 0.0;
  o.vmax = 10.0;
  const Image fixed = render_heatmap(m, o);
  CHECK(fixed.at(4 + 15, 4 + 15) == viridis(0.5));
}

TEST_CASE("heatmap labels, title and colour bar make the picture larger and are drawn",
    "[plot][heatmap]") {
  const Tensor m = tensor({0.1, 0.9, 0.5, 0.3}, {2, 2});
  HeatmapOptions bare;
  bare.colorbar = false;
  HeatmapOptions labelled{.title = "enc layer 0 head 1",
      .xlabel = "keys",
      .ylabel = "queries",
      .row_labels = {"<bos>", "7"},
      .col_labels = {"3", "<eos>"},
      .cell = 20,
      .font_scale = 1,
      .vmin = 0.0,
      .vmax = 1.0,
      .colorbar = true};
  const Image a = render_heatmap(m, bare), b = render_heatmap(m, labelled);
  CHECK(b.width() > a.width() + text_width("<bos>") + text_width("1"));
  CHECK(b.height() > a.height() + text_width("<eos>"));
  CHECK(distinct_colours(b) > 20);  // the cells, text and the colour bar's gradient
  // The title is drawn in the top text line.
  int64_t title_ink = 0;
  for (int64_t x = 0; x < b.width(); ++x)
    for (int64_t y = 4; y < 4 + glyph_height; ++y) title_ink += !(b.at(x, y) == white);
  CHECK(title_ink > 50);
}

TEST_CASE(
    "heatmaps reject bad input with the function's name and the sizes", "[plot][heatmap][errors]") {
  CHECK_THROWS_WITH(
      render_heatmap(tensor({1.0, 2.0, 3.0})), Contains("render_heatmap") && Contains("[3]"));
  CHECK_THROWS_AS(render_heatmap(zeros({0, 3})), ShapeError);
  HeatmapOptions o;
  o.row_labels = {"a"};
  CHECK_THROWS_WITH(
      render_heatmap(zeros({2, 3}), o), Contains("1 row labels") && Contains("[2,3]"));
  o.row_labels = {};
  o.col_labels = {"a", "b"};
  CHECK_THROWS_WITH(
      render_heatmap(zeros({2, 3}), o), Contains("2 column labels") && Contains("[2,3]"));
  CHECK_THROWS_WITH(render_heatmap(tensor({1.0, NAN, 3.0, 4.0}, {2, 2})),
      Contains("row 0, column 1") && Contains("nan"));
  HeatmapOptions inverted;
  inverted.vmin = 1.0;
  inverted.vmax = 0.0;
  CHECK_THROWS_AS(render_heatmap(zeros({2, 2}), inverted), ValueError);
  CHECK_THROWS_AS(render_heatmap_grid({}, 2), ValueError);
}

TEST_CASE("a heatmap grid lays the panels out in rows of `columns`", "[plot][heatmap]") {
  std::vector<HeatmapPanel> panels;
  for (int i = 0; i < 5; ++i) {
    HeatmapPanel p{tensor({0.0, 1.0, 2.0, double(i)}, {2, 2}), {}};
    p.options.title = "panel " + std::to_string(i);
    p.options.colorbar = false;
    panels.push_back(p);
  }
  const Image one = render_heatmap(panels[0].matrix, panels[0].options);
  const Image grid = render_heatmap_grid(panels, 2, "five panels");
  CHECK(grid.width() == 2 * one.width());
  // Three rows of panels under the title line (7 pixels and a pad of 4 above and below).
  CHECK(grid.height() == 3 * one.height() + glyph_height + 8);
  // Inside a panel the map starts at (pad, pad + title line) = (4, 15) and cells are 12 pixels, so
  // cell (1, 1)'s centre is at (4 + 18, 15 + 18); the grid's title line is 15 pixels high. That
  // cell holds panel i's value i: the minimum 0 of panel 0, the maximum 3 of panel 3 (row 1,
  // column 1 of the grid).
  CHECK(grid.at(22, 15 + 33) == viridis(0.0));
  CHECK(grid.at(one.width() + 22, 15 + one.height() + 33) == viridis(1.0));
  const fs::path dir = temp_dir();
  write_heatmap_grid((dir / "grid.png").string(), panels, 2, "five panels");
  CHECK(read_png((dir / "grid.png").string()).rgb() == grid.rgb());
  fs::remove_all(dir);
}

TEST_CASE(
    "show_heatmaps draws d2l's (rows, cols, Q, K) grid on one colour scale", "[plot][heatmap]") {
  const Tensor matrices = two_by_three_matrices();  // matrix (r, c) holds 3r + c everywhere
  ShowHeatmapsOptions options;
  options.titles = {"head 0", "head 1", "head 2"};
  options.row_labels = {"q0", "q1"};
  options.col_labels = {"k0", "k1", "k2", "k3"};
  const Image picture = render_show_heatmaps(matrices, options);
  // Each matrix alone is uniform (one heatmap of it would be viridis' middle colour); on the
  // shared scale matrix (0, 0) is the minimum, (1, 2) the maximum and (0, 2) is 2/5 of the way.
  std::set<std::tuple<int, int, int>> colours;
  for (int64_t y = 0; y < picture.height(); ++y)
    for (int64_t x = 0; x < picture.width(); ++x)
      colours.insert({picture.at(x, y).r, picture.at(x, y).g, picture.at(x, y).b});
  for (double t : {0.0, 0.2, 0.4, 0.6, 0.8, 1.0}) {
    const Rgb c = viridis(t);
    CHECK(colours.count({c.r, c.g, c.b}) == 1);
  }
  // Six panels, three to a row: the picture is three panels wide and two high.
  HeatmapOptions last_panel;
  last_panel.title = "head 2";
  last_panel.xlabel = "Keys";
  last_panel.ylabel = "Queries";
  last_panel.row_labels = options.row_labels;
  last_panel.col_labels = options.col_labels;
  const Image last = render_heatmap(zeros({2, 4}), last_panel);
  CHECK(picture.width() == 3 * last.width());
  CHECK(picture.height() == 2 * last.height());
  const fs::path dir = temp_dir();
  show_heatmaps(matrices, (dir / "weights.png").string(), options);
  CHECK(read_png((dir / "weights.png").string()).rgb() == picture.rgb());
  fs::remove_all(dir);
  CHECK_THROWS_WITH(
      render_show_heatmaps(zeros({3, 2, 4})), Contains("show_heatmaps") && Contains("[3,2,4]"));
  ShowHeatmapsOptions one_title, one_row_label;
  one_title.titles = {"only one"};
  one_row_label.row_labels = {"q0"};
  CHECK_THROWS_AS(render_show_heatmaps(matrices, one_title), ShapeError);
  CHECK_THROWS_AS(render_show_heatmaps(matrices, one_row_label), ShapeError);
}

TEST_CASE("show_heatmaps takes a title per column or per matrix, and a title per grid row",
    "[plot][heatmap]") {
  const Tensor matrices = two_by_three_matrices();
  ShowHeatmapsOptions by_column, by_matrix, with_rows;
  by_column.titles = {"a0", "a1", "a2"};
  by_matrix.titles = {"a0", "a1", "a2", "b0", "b1", "b2"};
  with_rows.titles = by_column.titles;
  with_rows.row_titles = {"encoder", "dec"};
  const Image columns = render_show_heatmaps(matrices, by_column);
  const Image matrix_titles = render_show_heatmaps(matrices, by_matrix);
  const Image rows = render_show_heatmaps(matrices, with_rows);
  const int64_t cell_h = columns.height() / 2;  // two rows of panels

  // One title per matrix: the panel of matrix (1, 0) is titled "b0", not its column's "a0".
  HeatmapOptions panel{.title = "b0",
      .xlabel = "Keys",
      .ylabel = "Queries",
      .row_labels = {},
      .col_labels = {},
      .cell = 12,
      .font_scale = 1,
      .vmin = 0.0,
      .vmax = 5.0,
      .colorbar = false};
  CHECK(contains_at(
      matrix_titles, 0, cell_h, render_heatmap(matrices.select(0, 1).select(0, 0), panel)));
  panel.title = "a0";
  CHECK(contains_at(columns, 0, cell_h, render_heatmap(matrices.select(0, 1).select(0, 0), panel)));
  CHECK(matrix_titles.width() == columns.width());
  CHECK(matrix_titles.rgb() != columns.rgb());

  // Row titles: a column as wide as the longest title and a pad either side, left of the grid,
  // which is drawn beside it unchanged.
  const int64_t header_w = text_width("encoder") + 2 * 4;
  CHECK(rows.width() == columns.width() + header_w);
  CHECK(rows.height() == columns.height());
  CHECK(contains_at(rows, header_w, 0, columns));
  // Each title right-aligned against the grid (a pad from it), centred on its row of panels.
  Image header(header_w, rows.height());
  draw_text(header, 4, (cell_h - glyph_height) / 2, "encoder", Rgb{40, 40, 40});
  draw_text(header, header_w - 4 - text_width("dec"), cell_h + (cell_h - glyph_height) / 2, "dec",
      Rgb{40, 40, 40});
  CHECK(ink(header) > 0);
  CHECK(contains_at(rows, 0, 0, header));

  // Any other count names the function, the count given and the counts allowed.
  ShowHeatmapsOptions four_titles, three_row_titles;
  four_titles.titles = {"a", "b", "c", "d"};
  three_row_titles.row_titles = {"x", "y", "z"};
  CHECK_THROWS_AS(render_show_heatmaps(matrices, four_titles), ShapeError);
  CHECK_THROWS_WITH(render_show_heatmaps(matrices, four_titles),
      Contains("show_heatmaps: 4 titles") && Contains("[2,3,2,4]") &&
          Contains("3 (one per grid column)") && Contains("6 (one per matrix)"));
  CHECK_THROWS_AS(render_show_heatmaps(matrices, three_row_titles), ShapeError);
  CHECK_THROWS_WITH(render_show_heatmaps(matrices, three_row_titles),
      Contains("show_heatmaps: 3 row titles for 2 rows") && Contains("[2,3,2,4]"));
}

TEST_CASE("write_csv writes a header and one row per index", "[plot][csv]") {
  const fs::path dir = temp_dir();
  write_csv((dir / "a.csv").string(), {"x", "y"}, {{0, 1, 2}, {0.5, -1.25, 1e-7}});
  CHECK(read_text(dir / "a.csv") == "x,y\n0,0.5\n1,-1.25\n2,1e-07\n");
  CHECK_THROWS_WITH(write_csv((dir / "b.csv").string(), {"x", "y"}, {{0, 1}, {0}}),
      Contains("write_csv") && Contains("2 and 1 rows"));
  CHECK_THROWS_AS(write_csv((dir / "b.csv").string(), {"x"}, {{0}, {1}}), ShapeError);
  CHECK_THROWS_WITH(write_csv("/no-such-directory/a.csv", {"x"}, {{0}}),
      Contains("/no-such-directory/a.csv") && Contains("No such file"));
  fs::remove_all(dir);
}

TEST_CASE("plot_csv draws the CSV's columns with gnuplot into a PNG of the requested size",
    "[plot][gnuplot]") {
  const fs::path dir = temp_dir();
  std::vector<double> x, up, down;
  for (int i = 0; i < 50; ++i) {
    x.push_back(i);
    up.push_back(i * 0.1);
    down.push_back(5 - i * 0.1);
  }
  write_csv((dir / "lines.csv").string(), {"step", "up", "down"}, {x, up, down});
  LineFigure figure;
  figure.width = 500;
  figure.height = 300;
  figure.panels.push_back({.title = "two lines",
      .xlabel = "step",
      .ylabel = "value",
      .curves = {{"up", "rising"}, {"down", "falling"}},
      .ymin = std::nullopt,
      .ymax = std::nullopt,
      .key = "top right"});
  plot_csv((dir / "lines.csv").string(), (dir / "lines.png").string(), figure);
  const Image png = read_png((dir / "lines.png").string());
  CHECK(png.width() == 500);
  CHECK(png.height() == 300);
  CHECK(distinct_colours(png) >= 3);  // background, axes/text and the curves' colours
  const std::string script = read_text(dir / "lines.gp");
  CHECK_THAT(script, Contains("using 1:2") && Contains("using 1:3") && Contains("title 'rising'"));

  // Two panels: the default height is 360 per panel.
  figure.height = 0;
  figure.panels.push_back(figure.panels[0]);
  plot_csv((dir / "lines.csv").string(), (dir / "two.png").string(), figure);
  CHECK(read_png((dir / "two.png").string()).height() == 720);
  fs::remove_all(dir);
}

TEST_CASE("plot_csv names the command, its exit status or the missing column when it fails",
    "[plot][gnuplot][errors]") {
  const fs::path dir = temp_dir();
  const std::string csv = (dir / "a.csv").string(), png = (dir / "a.png").string();
  write_csv(csv, {"x", "y"}, {{0, 1}, {2, 3}});
  LineFigure figure;
  figure.panels.push_back({.title = "",
      .xlabel = "",
      .ylabel = "",
      .curves = {{"y", "y"}},
      .ymin = std::nullopt,
      .ymax = std::nullopt,
      .key = "top right"});
  // gnuplot is not installed (here: a program that does not exist).
  LineFigure missing = figure;
  missing.gnuplot = "no-such-gnuplot-ag-test";
  CHECK_THROWS_WITH(plot_csv(csv, png, missing), Contains("cannot run 'no-such-gnuplot-ag-test'") &&
                                                     Contains("No such file or directory") &&
                                                     Contains("gnuplot-nox"));
  // A program that fails: `false` exits with status 1.
  LineFigure failing = figure;
  failing.gnuplot = "false";
  CHECK_THROWS_WITH(
      plot_csv(csv, png, failing), Contains("'false ") && Contains("exited with status 1"));
  // gnuplot itself failing on a bad script line (here an invalid legend placement).
  LineFigure bad_key = figure;
  bad_key.panels[0].key = "nowhere-at-all";
  CHECK_THROWS_WITH(
      plot_csv(csv, png, bad_key), Contains("gnuplot ") && Contains("exited with status"));
  // A curve naming a column the CSV does not have.
  LineFigure bad_column = figure;
  bad_column.panels[0].curves = {{"z", "z"}};
  CHECK_THROWS_WITH(
      plot_csv(csv, png, bad_column), Contains("no column 'z'") && Contains("it has: x, y"));
  CHECK_THROWS_WITH(plot_csv((dir / "none.csv").string(), png, figure), Contains("none.csv"));
  // A program that cannot run or fails is an ExternalProgramError, a file an IoError: both are
  // runtime errors, not argument errors.
  CHECK_THROWS_AS(plot_csv(csv, png, missing), ExternalProgramError);
  CHECK_THROWS_AS(plot_csv(csv, png, failing), ExternalProgramError);
  CHECK_THROWS_AS(plot_csv((dir / "none.csv").string(), png, figure), IoError);
  CHECK_THROWS_AS(plot_csv(csv, png, failing), std::runtime_error);
  fs::remove_all(dir);
}
