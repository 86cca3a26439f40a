// ag-train --profile N (training/profile.h): after a warm-up step it profiles N steps and prints
// torch.profiler's table — forward and backward rows of the model's ops, the optimizer's step —
// with the wall time the rows account for; --profile-trace writes their Chrome trace, JSON that
// chrome://tracing and Perfetto read. Two tiny steps of the reverse task.
#include <rapidjson/document.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <regex>
#include <set>
#include <string>

#include "tests/pictures_test_util.h"

using ag::viz::testing::read_text;
using ag::viz::testing::run;
using Catch::Matchers::Contains;

TEST_CASE("ag-train --profile prints the table of the profiled steps and writes their trace",
    "[examples][train][profiler]") {
  const std::filesystem::path dir = ag::viz::testing::temp_dir();
  const std::string trace_path = (dir / "trace.json").string();
  const auto trained = run(std::string(AG_TRAIN_PATH) +
                           " --task reverse --steps 3 --eval-every 3 --eval-size 10 "
                           "--num-hiddens 16 --ffn-num-hiddens 32 --profile 2 --profile-trace " +
                           trace_path);
  INFO(trained.output);
  REQUIRE(trained.exit_code == 0);
  const std::string& out = trained.output;
  CHECK_THAT(out, Contains("profile of steps 2-3 (after a warm-up step), sorted by total time:"));
  CHECK_THAT(out,
      Contains("Name") && Contains("Self %") && Contains("Total avg") && Contains("Self bytes"));
  // A forward op, its backward (PyTorch's aten names: "<op>_backward") and the optimizer's step,
  // each with its calls: a row "name  self%  self  total  avg  calls  bytes  self bytes".
  for (const std::string name : {"linear", "linear_backward", "Optimizer.step#Adam.step"}) {
    const std::regex row("\n" + std::regex_replace(name, std::regex("[.#]"), "\\$&") +
                         " +[0-9.]+% +[0-9.]+[mu]?s +[0-9.]+[mu]?s +[0-9.]+[mu]?s +([0-9]+) ");
    std::smatch match;
    INFO(name);
    REQUIRE(std::regex_search(out, match, row));
    if (name == "Optimizer.step#Adam.step") CHECK(match[1].str() == "2");  // one per step
  }
  std::smatch share;
  REQUIRE(std::regex_search(out, share,
      std::regex("Profiled wall time: [0-9.]+[mu]?s; the rows' self times add up to [0-9.]+[mu]?s "
                 "\\(([0-9.]+)% of it\\)")));
  CHECK(std::stod(share[1].str()) > 0);
  CHECK(std::stod(share[1].str()) <= 100);
  CHECK_THAT(out, Contains("wrote the Chrome trace of the profiled steps to " + trace_path));
  CHECK_THAT(out, Contains("done: 3 steps"));

  rapidjson::Document trace;
  const std::string text = read_text(trace_path);
  trace.Parse(text.c_str());
  REQUIRE(!trace.HasParseError());
  REQUIRE(trace.HasMember("traceEvents"));
  std::set<std::string> names;
  for (const auto& e : trace["traceEvents"].GetArray())
    if (std::string(e["ph"].GetString()) == "X") {
      CHECK(e["dur"].GetDouble() >= 0);
      names.insert(e["name"].GetString());
    }
  CHECK(names.count("linear") == 1);
  CHECK(names.count("linear_backward") == 1);
  CHECK(names.count("Optimizer.step#Adam.step") == 1);
  std::filesystem::remove_all(dir);
}

TEST_CASE("ag-train --profile with no step after the warm-up says so", "[examples][train]") {
  const auto trained =
      run(std::string(AG_TRAIN_PATH) +
          " --task reverse --steps 1 --schedule constant --eval-every 1 --eval-size 10 "
          "--num-hiddens 16 --ffn-num-hiddens 32 --profile 3");
  INFO(trained.output);
  REQUIRE(trained.exit_code == 0);
  CHECK_THAT(trained.output, Contains("--profile: this run has no step after its warm-up step 1; "
                                      "nothing is profiled"));
  CHECK_THAT(trained.output, !Contains("Profiled wall time"));
}
