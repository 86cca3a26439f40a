// docs/ops.md is the one-screen table of every op's gradient; it must list exactly the ops of
// autograd/op_list.h, each in the source file that defines it.
#include <catch2/catch.hpp>

#include <fstream>
#include <regex>
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
  const std::regex row(R"(\n\| `([a-z_0-9]+)` \|[^\n]*\| ([a-z_]+\.cpp) \|)");
  std::set<std::string> documented;
  for (auto it = std::sregex_iterator(table.begin(), table.end(), row); it != std::sregex_iterator(); ++it) {
    const std::string name = (*it)[1], file = (*it)[2];
    INFO("docs/ops.md row for " << name);
    CHECK(documented.insert(name).second);  // listed once
    // The op is recorded with Op::name in the file the table names.
    CHECK(read(AG_SOURCE_DIR "/autograd/" + file).find("Op::" + name + ",") != std::string::npos);
  }
  std::set<std::string> ops(std::begin(ag::kOpNames), std::end(ag::kOpNames));
  CHECK(documented == ops);
}
