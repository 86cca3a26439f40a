// docs/ops.md is the one-screen table of every op's gradient; it must list exactly the ops of
// autograd/op_list.h, each in the source file that defines it, and each op's gradient column must
// be the one written beside the op's backward in that file, on a line
//   // docs/ops.md, <op>: <gradient>
// (continued on lines starting "//   "), so that the table cannot drift from the code.
#include <catch2/catch.hpp>

#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "autograd/op_list.h"

namespace {
// Runs of spaces as one space, no space at either end.
std::string normalize_spaces(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == ' ' && (out.empty() || out.back() == ' ')) continue;
    out += c;
  }
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

// The gradient written beside `op` in `source` (the tag line and its continuation lines, joined),
// or "" if there is no tag.
std::string gradient_tag(const std::string& source, const std::string& op) {
  const std::string tag = "// docs/ops.md, " + op + ": ";
  const std::size_t at = source.find(tag);
  if (at == std::string::npos) return "";
  std::istringstream rest(source.substr(at + tag.size()));
  std::string line, text;
  std::getline(rest, text);
  while (std::getline(rest, line)) {
    const std::size_t comment = line.find_first_not_of(' ');
    if (comment == std::string::npos || line.compare(comment, 5, "//   ") != 0) break;
    text += " " + line.substr(comment + 5);
  }
  return normalize_spaces(text);
}

std::string read(const std::string& path) {
  std::ifstream in(path);
  REQUIRE(in.good());
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}
}  // namespace

TEST_CASE("docs/ops.md lists every differentiable op, in the file that defines it", "[docs]") {
  const std::string table = read(AG_SOURCE_DIR "/docs/ops.md");
  // Table rows look like: | `name` | forward | gradient | file.cpp |
  std::set<std::string> documented;
  std::istringstream lines(table);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("| `", 0) != 0) continue;
    const std::size_t name_end = line.find('`', 3);
    const std::size_t file_start = line.rfind("| ", line.size() - 3);
    REQUIRE(name_end != std::string::npos);
    const std::string name = line.substr(3, name_end - 3);
    const std::string file = line.substr(file_start + 2, line.size() - file_start - 4);
    INFO("docs/ops.md row for " << name << " names file '" << file << "'");
    CHECK(documented.insert(name).second);  // listed once
    // The op is recorded with Op::name in the file the table names.
    const std::string source = read(AG_SOURCE_DIR "/autograd/" + file);
    CHECK(source.find("Op::" + name + ",") != std::string::npos);
    // Its gradient column (the third cell) is the one tagged beside its backward there.
    std::vector<std::string> cells;
    std::istringstream row(line.substr(1));
    for (std::string cell; std::getline(row, cell, '|');) cells.push_back(normalize_spaces(cell.substr(cell.find_first_not_of(' '))));
    REQUIRE(cells.size() >= 4);
    INFO("the gradient in docs/ops.md: " << cells[2]);
    CHECK(gradient_tag(source, name) == cells[2]);
  }
  std::set<std::string> ops(std::begin(ag::kOpNames), std::end(ag::kOpNames));
  CHECK(documented == ops);
}
