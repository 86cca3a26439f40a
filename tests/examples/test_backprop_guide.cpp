// docs/backprop_attention.md quotes the output of ag-backprop-attention and names the files and
// functions that implement each formula. This test keeps both true: every block the guide marks
// as printed must appear, character for character, in the program's output, and every
// `path: function` it names must be a file of the source tree that contains that function's name.
#include <catch2/catch.hpp>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  INFO("reading " << path);
  REQUIRE(in.good());
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The standard output of `command`, and its exit status.
std::string run(const std::string& command, int& status) {
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(command.c_str(), "r"), pclose);
  REQUIRE(pipe != nullptr);
  std::string output;
  std::array<char, 4096> buffer{};
  while (std::size_t n = std::fread(buffer.data(), 1, buffer.size(), pipe.get()))
    output.append(buffer.data(), n);
  status = pclose(pipe.release());
  return output;
}

const std::string kMarker = "<!-- printed by ag-backprop-attention -->";

// The fenced blocks that follow a marker line in `guide`.
std::vector<std::string> quoted_blocks(const std::string& guide) {
  std::vector<std::string> blocks;
  for (std::size_t at = guide.find(kMarker); at != std::string::npos;
       at = guide.find(kMarker, at + 1)) {
    const std::size_t open = guide.find("```text\n", at);
    REQUIRE(open == at + kMarker.size() + 1);  // the fence starts on the marker's next line
    const std::size_t begin = open + 8;
    const std::size_t close = guide.find("\n```", begin);
    REQUIRE(close != std::string::npos);
    blocks.push_back(guide.substr(begin, close - begin + 1));  // with its last newline
  }
  return blocks;
}

}  // namespace

TEST_CASE(
    "docs/backprop_attention.md: every quoted output block is what ag-backprop-attention prints",
    "[guide]") {
  const std::string guide = read_file(AG_SOURCE_DIR "/docs/backprop_attention.md");
  int status = -1;
  const std::string output = run(AG_BACKPROP_ATTENTION_PATH, status);
  REQUIRE(status == 0);
  const std::vector<std::string> blocks = quoted_blocks(guide);
  CHECK(blocks.size() == 7);  // one per section of the example
  for (const std::string& block : blocks) {
    INFO("quoted block:\n" << block << "\nprogram output:\n" << output);
    CHECK(block.size() > 40);
    CHECK(output.find(block) != std::string::npos);
  }
}

TEST_CASE("docs/backprop_attention.md: every `file: function` it names exists", "[guide]") {
  const std::string guide = read_file(AG_SOURCE_DIR "/docs/backprop_attention.md");
  // `autograd/ops_matmul.cpp: matmul`, `nn/attention.cpp: DotProductAttention::forward`
  const std::regex reference(
      "`((?:autograd|nn|optim|examples)/[A-Za-z0-9_/]+\\.(?:cpp|h)): ([A-Za-z0-9_:]+)`");
  int references = 0;
  for (auto it = std::sregex_iterator(guide.begin(), guide.end(), reference);
       it != std::sregex_iterator(); ++it) {
    const std::string path = (*it)[1], function = (*it)[2];
    INFO("the guide names " << path << ": " << function);
    REQUIRE(std::filesystem::exists(std::string(AG_SOURCE_DIR) + "/" + path));
    CHECK(read_file(std::string(AG_SOURCE_DIR) + "/" + path).find(function) != std::string::npos);
    ++references;
  }
  CHECK(references >= 12);
}
