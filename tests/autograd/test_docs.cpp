// docs/ops.md is the one-screen table of every op's gradient; it must list exactly the ops of
// autograd/op_list.h, each in the source file that defines it.
#include <catch2/catch.hpp>

#include <fstream>
#include <set>
#include <sstream>

#include "autograd/op_list.h"

namespace {
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
    CHECK(read(AG_SOURCE_DIR "/autograd/" + file).find("Op::" + name + ",") != std::string::npos);
  }
  std::set<std::string> ops(std::begin(ag::kOpNames), std::end(ag::kOpNames));
  CHECK(documented == ops);
}
