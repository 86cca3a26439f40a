// docs/training.md, "The default settings on each task", gives what ag-train's defaults reach on
// each task and the settings line they were measured with. This test keeps that line the defaults
// `ag-train --help` shows — a changed default fails here until the table is measured again — and
// keeps --help's --task text pointing to the table.
#include <catch2/catch.hpp>

#include <map>
#include <regex>
#include <sstream>
#include <string>

#include "tests/pictures_test_util.h"

using ag::viz::testing::lines;
using ag::viz::testing::read_text;
using ag::viz::testing::run;
using Catch::Matchers::Contains;

TEST_CASE("docs/training.md measured each task with the defaults ag-train --help shows",
    "[examples][train]") {
  const auto help = run(std::string(AG_TRAIN_PATH) + " --help");
  INFO(help.output);
  REQUIRE(help.exit_code == 0);
  // "  --steps INT=2500            training steps" -> defaults["--steps"] == "2500"
  std::map<std::string, std::string> defaults;
  std::string task_help;
  const std::regex option(R"(\s*(--[a-z-]+) [A-Z]+=(\S+)(.*))");
  for (const std::string& line : lines(help.output)) {
    std::smatch match;
    if (!std::regex_match(line, match, option)) continue;
    defaults[match[1].str()] = match[2].str();
    if (match[1].str() == "--task") task_help = match[3].str();
  }
  CHECK_THAT(task_help, Contains("docs/training.md"));

  const std::string doc = read_text(std::string(AG_SOURCE_DIR) + "/docs/training.md");
  const std::size_t section = doc.find("### The default settings on each task");
  REQUIRE(section != std::string::npos);
  const std::string text = doc.substr(section);
  std::smatch settings;  // Settings: `--steps 2500 --batch-size 64 ...`
  REQUIRE(std::regex_search(text, settings, std::regex("Settings:\\s*`([^`]*)`")));
  std::istringstream words(settings[1].str());
  std::string name, value;
  int checked = 0;
  while (words >> name >> value) {
    INFO("docs/training.md says " << name << " " << value);
    REQUIRE(defaults.count(name) == 1);
    CHECK(defaults[name] == value);
    ++checked;
  }
  CHECK(checked >= 10);
}
