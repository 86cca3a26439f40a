// docs/training.md, "The default settings on each task", gives what ag-train's defaults reach on
// each task and the settings line they were measured with. This test keeps that line the defaults
// `ag-train --help` shows — a changed default fails here until the table is measured again — and
// keeps --help's --task text pointing to the table. The add task's own default
// (--embedding-init scaled) is in both, and is what a run of add does.
#include <catch2/catch.hpp>

#include <map>
#include <regex>
#include <sstream>
#include <string>

#include "io/checkpoint.h"
#include "tests/pictures_test_util.h"
#include "tests/temp_folder.h"

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

TEST_CASE("--help and docs/training.md give add's own default, --embedding-init scaled",
    "[examples][train]") {
  const auto help = run(std::string(AG_TRAIN_PATH) + " --help");
  REQUIRE(help.exit_code == 0);
  // "  --embedding-init TEXT=normal\n     toy tasks: ...; add's default: scaled (...)\n  --seed"
  const std::size_t option = help.output.find("--embedding-init TEXT=normal");
  REQUIRE(option != std::string::npos);
  const std::string described =
      help.output.substr(option, help.output.find("\n  --", option) - option);
  INFO(described);
  CHECK_THAT(described, Contains("add's default: scaled") && Contains("docs/training.md"));

  const std::string doc = read_text(std::string(AG_SOURCE_DIR) + "/docs/training.md");
  const std::size_t section = doc.find("### The default settings on each task");
  REQUIRE(section != std::string::npos);
  CHECK_THAT(doc.substr(section, doc.find("\n## ", section) - section),
      Contains("add has one default of its own: `--embedding-init scaled`"));
}

TEST_CASE("add starts its embeddings N(0, 1/D): d2l's draws times D^-1/2, all else the same",
    "[examples][train]") {
  // Two steps at lr 1e-30 leave every weight as it was initialised (an update that small vanishes
  // next to a float32 weight; only the biases that start at 0 move, to some ±1e-30), so the saved
  // models show the initialisation.
  ag::testing::TempFolder folder;
  const std::string tiny = std::string(AG_TRAIN_PATH) +
                           " --steps 2 --schedule constant --lr 1e-30 --eval-every 2 "
                           "--eval-size 2 --show 0 --num-hiddens 16 --ffn-num-hiddens 32 --heads 2 "
                           "--layers 1 --threads 1";
  auto trained = [&](const std::string& options, const std::string& name) {
    const auto result = run(tiny + " " + options + " --save-model " + folder.file(name));
    INFO(result.output);
    REQUIRE(result.exit_code == 0);
    return std::pair{result.output, ag::load_checkpoint(folder.file(name))};
  };
  const auto [add_output, add] = trained("--task add", "add.agm");
  const auto [normal_output, normal] = trained("--task add --embedding-init normal", "normal.agm");
  const auto [reverse_output, reverse] = trained("--task reverse", "reverse.agm");
  CHECK_THAT(add_output, Contains("embeddings initialised N(0, 1/D)"));
  CHECK_THAT(normal_output, Contains("embeddings initialised N(0, 1),"));
  CHECK_THAT(reverse_output, Contains("embeddings initialised N(0, 1),"));

  // D = 16: the scaled embeddings are d2l's times 1/4, exactly (a power of two); the rest is equal.
  REQUIRE(add.tensors.size() == normal.tensors.size());
  int scaled = 0;
  for (const auto& [name, tensor] : normal.tensors) {
    INFO(name);
    std::vector<float> expected = tensor.to_vector<float>();
    if (name.find("embedding.weight") != std::string::npos) {
      for (float& w : expected) w *= 0.25f;
      ++scaled;
    }
    const std::vector<float> got = add.tensor(name).to_vector<float>();
    REQUIRE(got.size() == expected.size());
    for (std::size_t i = 0; i < got.size(); ++i)
      CHECK(got[i] == Approx(expected[i]).epsilon(0).margin(1e-20));
  }
  CHECK(scaled == 2);  // the encoder's and the decoder's
}

TEST_CASE("a scaled run's checkpoint records --embedding-init — one without it resumes as normal",
    "[examples][train]") {
  ag::testing::TempFolder folder;
  const std::string train = AG_TRAIN_PATH, path = folder.file("add.agc");
  const std::string stopped_run =
      train +
      " --task add --steps 4 --warmup 1 --eval-every 4 --eval-size 2 --show 0 --num-hiddens 16 "
      "--ffn-num-hiddens 32 --heads 2 --layers 1 --stop-after 2 --checkpoint ";
  // A normal run's checkpoint is what it was before the option: no entry.
  REQUIRE(run(stopped_run + folder.file("normal.agc") + " --embedding-init normal").exit_code == 0);
  CHECK(ag::load_checkpoint(folder.file("normal.agc")).strings.count("config.embedding_init") == 0);
  const auto stopped = run(stopped_run + path);
  INFO(stopped.output);
  REQUIRE(stopped.exit_code == 0);
  ag::Checkpoint c = ag::load_checkpoint(path);
  CHECK(c.string("config.embedding_init") == "scaled");
  // Without --task: the run is the file's (its task and its initialisation).
  const auto resumed = run(train + " --resume " + path);
  INFO(resumed.output);
  CHECK(resumed.exit_code == 0);
  CHECK_THAT(resumed.output, Contains("task add") && Contains("embeddings initialised N(0, 1/D)"));

  c.strings.erase("config.embedding_init");  // as a normal run's, or one from before the option
  ag::save_checkpoint(c, folder.file("old.agc"));
  const auto old = run(train + " --resume " + folder.file("old.agc"));
  INFO(old.output);
  CHECK(old.exit_code == 0);
  CHECK_THAT(old.output, Contains("embeddings initialised N(0, 1),"));

  c.strings["config.embedding_init"] = "uniform";
  ag::save_checkpoint(c, folder.file("bad.agc"));
  const auto bad = run(train + " --resume " + folder.file("bad.agc"));
  CHECK(bad.exit_code == 1);
  CHECK_THAT(bad.output, Contains("the saved run configuration is inconsistent"));
}
