// Helpers of the picture tests: temporary directories, running an example as a separate process,
// and what a PNG's pixels hold.
#pragma once

#include <catch2/catch.hpp>

#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <tuple>

#include "viz/viz.h"

namespace ag::viz::testing {

// A fresh directory under the system's temporary directory.
inline std::filesystem::path temp_dir() {
  std::string pattern = (std::filesystem::temp_directory_path() / "ag-pictures-XXXXXX").string();
  REQUIRE(::mkdtemp(pattern.data()) != nullptr);
  return pattern;
}

inline std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

struct Run {
  int exit_code = -1;  // -1 if it did not exit normally
  std::string output;  // stdout and stderr
};
// Runs a shell command, collecting what it prints.
inline Run run(const std::string& command) {
  Run result;
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  REQUIRE(pipe != nullptr);
  char buffer[4096];
  for (std::size_t n; (n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0;)
    result.output.append(buffer, n);
  const int status = ::pclose(pipe);
  if (WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  return result;
}

inline std::size_t distinct_colours(const Image& image) {
  std::set<std::tuple<int, int, int>> colours;
  for (int64_t y = 0; y < image.height(); ++y)
    for (int64_t x = 0; x < image.width(); ++x) {
      const Rgb c = image.at(x, y);
      colours.insert({c.r, c.g, c.b});
    }
  return colours.size();
}

// The lines of a text, without their '\n'.
inline std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

}  // namespace ag::viz::testing
