// ag-attention-graph as a user runs it: the DOT file of the composed and the fused path, the PNG
// that Graphviz's dot renders from it (its header, then its pixels), and the trace.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <tuple>

#include <unistd.h>

#include "viz/viz.h"

namespace {

namespace fs = std::filesystem;

std::string read(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

// Runs ag-attention-graph with `args`, its stdout (and stderr unless only_stdout) into `log`;
// returns the exit code.
// `environment` ("NAME=value ") goes before the command.
int run_attention_graph(const std::string& args, const fs::path& log, bool only_stdout = false,
    const std::string& environment = "") {
  const std::string command = environment + "\"" + AG_ATTENTION_GRAPH_PATH + "\" " + args +
                              " > \"" + log.string() + (only_stdout ? "\" 2>/dev/null" : "\" 2>&1");
  const int status = std::system(command.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// A fresh directory for one test's files, removed afterwards.
struct TempDir {
  fs::path path = fs::temp_directory_path() / ("ag_attention_graph_" + std::to_string(::getpid()));
  TempDir() { fs::create_directories(path); }
  ~TempDir() { fs::remove_all(path); }
};

uint32_t big_endian_u32(const std::string& bytes, std::size_t at) {
  uint32_t v = 0;
  for (std::size_t i = 0; i < 4; ++i) v = (v << 8) | static_cast<unsigned char>(bytes[at + i]);
  return v;
}

}  // namespace

TEST_CASE("ag-attention-graph writes the composed graph by default and renders it to a PNG",
    "[examples][graph]") {
  INFO("Graphviz's dot must be installed: scripts/install-deps.sh installs it (package graphviz)");
  REQUIRE(std::system("command -v dot > /dev/null 2>&1") == 0);
  TempDir dir;
  const fs::path dot = dir.path / "attention.dot", png = dir.path / "attention.png",
                 log = dir.path / "log";
  REQUIRE(run_attention_graph(
              "--dot \"" + dot.string() + "\" --png \"" + png.string() + "\"", log) == 0);
  const std::string out = read(log);
  INFO(out);
  CHECK(out.find("path: composed") != std::string::npos);
  CHECK(out.find("total parameters: 40,000") != std::string::npos);  // the summary: 4 × 100·100

  const std::string text = read(dot);
  CHECK(text.rfind("digraph ag {", 0) == 0);
  CHECK(text.find("masked_fill\\n[10,4,6] float32") != std::string::npos);
  CHECK(text.find("W_q.weight\\n[100,100] float32") != std::string::npos);
  CHECK(text.find("scaled_dot_product_attention") == std::string::npos);

  // A PNG: the 8-byte signature, then the IHDR chunk (length 13, "IHDR", width, height).
  const std::string bytes = read(png);
  REQUIRE(bytes.size() > 24);
  CHECK(bytes.substr(0, 8) == std::string("\x89PNG\r\n\x1a\n", 8));
  CHECK(big_endian_u32(bytes, 8) == 13);
  CHECK(bytes.substr(12, 4) == "IHDR");
  const uint32_t width = big_endian_u32(bytes, 16), height = big_endian_u32(bytes, 20);
  CHECK(width > 0);
  CHECK(height > 0);
  CHECK(height > width);  // a tall graph: the ops of attention stacked from the inputs to W_o
  // Not blank: decoded, the picture has the white page, the black text and edges, the grey op
  // boxes and the blue parameter ellipses (and their anti-aliased blends).
  const ag::viz::Image image = ag::viz::read_png(png.string());
  CHECK(image.width() == int64_t{width});
  CHECK(image.height() == int64_t{height});
  std::set<std::tuple<int, int, int>> colours;
  for (int64_t y = 0; y < image.height(); ++y)
    for (int64_t x = 0; x < image.width(); ++x) {
      const ag::viz::Rgb c = image.at(x, y);
      colours.insert({c.r, c.g, c.b});
    }
  CHECK(colours.size() >= 4);
  CHECK(colours.count({255, 255, 255}) == 1);
  CHECK(colours.count({0, 0, 0}) == 1);
}

TEST_CASE(
    "ag-attention-graph --fused --dot - prints the fused graph on stdout", "[examples][graph]") {
  TempDir dir;
  const fs::path log = dir.path / "log";
  REQUIRE(run_attention_graph("--fused --dot -", log, /*only_stdout=*/true) == 0);
  const std::string text = read(log);
  INFO(text);
  CHECK(text.rfind("digraph ag {", 0) == 0);  // only the DOT text on stdout
  CHECK(text.find("scaled_dot_product_attention\\n[2,5,4,20] float32") != std::string::npos);
  CHECK(text.find("softmax") == std::string::npos);
}

TEST_CASE(
    "ag-attention-graph --trace prints backward from W_o to W_q", "[examples][graph][trace]") {
  TempDir dir;
  const fs::path log = dir.path / "log";
  REQUIRE(run_attention_graph("--trace --dot \"" + (dir.path / "a.dot").string() + "\"", log) == 0);
  const std::string out = read(log);
  INFO(out);
  const std::size_t w_o = out.find("-> W_o.weight"), softmax = out.find("  softmax "),
                    w_q = out.find("-> W_q.weight"), table = out.find("W_q.weight  [100,100]");
  REQUIRE(w_o != std::string::npos);
  REQUIRE(softmax != std::string::npos);
  REQUIRE(w_q != std::string::npos);
  REQUIRE(table != std::string::npos);  // the grad-norm table after the trace
  CHECK(w_o < softmax);
  CHECK(softmax < w_q);
  CHECK(w_q < table);
  CHECK(out.find("total gradient norm") != std::string::npos);
}

TEST_CASE("ag-attention-graph refuses output paths it cannot write, before it runs",
    "[examples][graph]") {
  TempDir dir;
  const fs::path log = dir.path / "log";
  // Checked first (io/output_path.h): a bad option, exit code 2, the option, path and reason.
  CHECK(run_attention_graph("--dot /nonexistent-dir-ag/attention.dot", log) == 2);
  CHECK(read(log) ==
        "ag-attention-graph: --dot /nonexistent-dir-ag/attention.dot: the folder "
        "/nonexistent-dir-ag does not exist\n");
  CHECK(run_attention_graph(
            "--dot \"" + (dir.path / "a.dot").string() + "\" --png /proc/ag-attention.png", log) ==
        2);
  CHECK(read(log).find("ag-attention-graph: --png /proc/ag-attention.png: cannot create files in "
                       "/proc: ") == 0);
  CHECK_FALSE(fs::exists(dir.path / "a.dot"));
}

TEST_CASE("ag-attention-graph reports a PNG that dot fails to write", "[examples][graph]") {
  TempDir dir;
  const fs::path log = dir.path / "log";
  // A dot that fails, first on the PATH: the path itself is fine, the program is not. A link to
  // false(1), not a script written here: executing a file just written can fail with ETXTBSY
  // when another process forks while it is still open for writing.
  const fs::path bin = dir.path / "bin";
  fs::create_directories(bin);
  fs::create_symlink(fs::exists("/bin/false") ? "/bin/false" : "/usr/bin/false", bin / "dot");
  const std::string dot = (dir.path / "a.dot").string();
  const std::string png = (dir.path / "attention.png").string();
  CHECK(run_attention_graph("--dot \"" + dot + "\" --png \"" + png + "\"", log, false,
            "PATH=\"" + bin.string() + ":$PATH\" ") == 1);
  const std::string expected = "ag-attention-graph: dot -Tpng failed to write '" + png + "'";
  CHECK(read(log).find(expected) != std::string::npos);
}
