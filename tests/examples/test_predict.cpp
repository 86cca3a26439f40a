// ag-predict as a user runs it, in a separate process, on a small model that ag-train trains and
// saves into a temporary directory: a prediction, --help with and without the model, and the
// sequences it refuses (exit code 2, a message naming the sequence and the task's tokens).
#include <catch2/catch.hpp>

#include <filesystem>
#include <regex>
#include <string>

#include "programs.h"
#include "tests/pictures_test_util.h"

using ag::viz::testing::run;
using Catch::Matchers::Contains;
using Catch::Matchers::EndsWith;
using Catch::Matchers::Matches;

namespace {

// A reverse model of 40 steps, trained once for all the tests below and removed at exit: it need
// not be good, only saved (lr 0.01 makes its predictions non-empty). Its task fixes the tokens
// (3–19) and the longest source (9 tokens). ag-train's output ends with its held-out examples
// decoded by the same model: "  9 8 5 4 -> 8 8 8 8 8 ✗ (expected 4 5 8 9)".
// ag-train's run of the reverse model below, saving it to `path` (its extension picks the format).
ag::viz::testing::Run train_reverse_model(const std::string& path) {
  return run(std::string(AG_TRAIN_PATH) +
             " --task reverse --steps 40 --eval-every 40 --eval-size 20 "
             "--num-hiddens 16 --ffn-num-hiddens 32 --lr 0.01 --save-model " +
             path);
}

struct TrainedModel {
  std::filesystem::path dir = ag::viz::testing::temp_dir();
  std::string path = (dir / "reverse.agm").string();
  std::string training_output;
  TrainedModel() {
    const auto trained = train_reverse_model(path);
    INFO(trained.output);
    REQUIRE(trained.exit_code == 0);
    training_output = trained.output;
  }
  ~TrainedModel() { std::filesystem::remove_all(dir); }
};

const TrainedModel& trained_model() {
  static const TrainedModel model;
  return model;
}
const std::string& reverse_model() { return trained_model().path; }

const std::string reverse_tokens = "3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19";

}  // namespace

TEST_CASE("ag-predict decodes as ag-train did with the model it saved", "[examples][predict]") {
  // The decoded held-out examples of ag-train's last evaluation, "  SOURCE -> PREDICTION ✓|✗".
  const std::regex shown("  ([0-9 ]+) -> (.*) (✓|✗)( \\(expected .*\\))?");
  std::string arguments, expected;
  for (const std::string& line : ag::viz::testing::lines(trained_model().training_output)) {
    std::smatch match;
    if (!std::regex_match(line, match, shown)) continue;
    arguments += " '" + match[1].str() + "'";
    expected += match[1].str() + " -> " + match[2].str() + "\n";
  }
  INFO(trained_model().training_output);
  REQUIRE(!expected.empty());
  const auto result = run(predict + " " + reverse_model() + arguments);
  CHECK(result.exit_code == 0);
  CHECK(result.output == expected);
}

TEST_CASE("ag-predict takes sources of 1 to 9 tokens, with any spacing", "[examples][predict]") {
  const auto result = run(predict + " " + reverse_model() + " ' 12  5 ' '3 4 5 6 7 8 9 10 11' 19");
  INFO(result.output);
  CHECK(result.exit_code == 0);
  CHECK_THAT(
      result.output, Matches("12 5 -> [0-9 ]*\n3 4 5 6 7 8 9 10 11 -> [0-9 ]*\n19 -> [0-9 ]*\n"));
}

TEST_CASE("ag-predict --help lists the model's tokens, or every task's without a model",
    "[examples][predict]") {
  const auto with_model = run(predict + " " + reverse_model() + " --help");
  INFO(with_model.output);
  CHECK(with_model.exit_code == 0);
  CHECK_THAT(with_model.output, Contains("Usage: ") && Contains("MODEL SEQUENCE"));
  CHECK_THAT(with_model.output,
      Contains("The tokens of " + reverse_model() +
               " (task reverse), at most 9 in a sequence:\n  " + reverse_tokens + "\n"));
  CHECK_THAT(with_model.output, EndsWith(reverse_tokens + "\n\n"));  // one blank line, not two

  const auto without = run(predict + " --help");
  INFO(without.output);
  CHECK(without.exit_code == 0);
  CHECK_THAT(without.output, Contains("Give MODEL with --help to list its tokens"));
  CHECK_THAT(
      without.output, Contains("  reverse: " + reverse_tokens + " (at most 9 in a sequence)"));
  CHECK_THAT(without.output, Contains("  add: 0 1 2 3 4 5 6 7 8 9 + (at most 7 in a sequence)"));
  CHECK_THAT(without.output, EndsWith(" in a sequence)\n\n"));
}

TEST_CASE(
    "ag-predict refuses sequences the task cannot hold, with exit code 2", "[examples][predict]") {
  const std::string tokens_are = "; the reverse task's tokens are " + reverse_tokens + "\n";
  SECTION("an unknown token") {
    const auto result = run(predict + " " + reverse_model() + " '3 9' '3 99 4'");
    CHECK(result.exit_code == 2);
    CHECK(result.output == "ag-predict: unknown token '99' in \"3 99 4\"" + tokens_are);
  }
  SECTION("a special token") {
    for (const std::string special : {"<pad>", "<bos>", "<eos>"}) {
      const auto result = run(predict + " " + reverse_model() + " '3 9 " + special + "'");
      CHECK(result.exit_code == 2);
      CHECK_THAT(result.output,
          Contains("ag-predict: '" + special + "' in \"3 9 " + special + "\" is a special token") &&
              Contains(tokens_are));
    }
  }
  SECTION("more tokens than the task's longest source") {
    const auto result = run(predict + " " + reverse_model() + " '3 4 5 6 7 8 9 10 11 12 13'");
    CHECK(result.exit_code == 2);
    CHECK(result.output ==
          "ag-predict: \"3 4 5 6 7 8 9 10 11 12 13\" has 11 tokens, but the reverse task's "
          "sources have at most 9\n");
  }
  SECTION("no tokens") {
    const auto result = run(predict + " " + reverse_model() + " ''");
    CHECK(result.exit_code == 2);
    CHECK_THAT(result.output, Contains("ag-predict: \"\" has no tokens" + tokens_are));
  }
  SECTION("no sequence") {
    const auto result = run(predict + " " + reverse_model());
    CHECK(result.exit_code == 2);
    CHECK_THAT(result.output, Contains("ag-predict: SEQUENCE is required"));
  }
}

TEST_CASE("ag-predict exits 1 when the model file cannot be loaded", "[examples][predict]") {
  const std::filesystem::path missing =
      std::filesystem::temp_directory_path() / "ag-predict-no-such-dir" / "missing.agm";
  const auto result = run(predict + " " + missing.string() + " '3 9 4 7'");
  CHECK(result.exit_code == 1);
  CHECK_THAT(result.output, Contains("ag-predict: ") && Contains(missing.string()));
}

TEST_CASE("ag-train --save-model M.safetensors: ag-predict decodes with it as with ag's format",
    "[examples][predict]") {
  // The same run as trained_model()'s (same settings and seed), its model in safetensors.
  const std::string path = (trained_model().dir / "reverse.safetensors").string();
  const auto trained = train_reverse_model(path);
  INFO(trained.output);
  REQUIRE(trained.exit_code == 0);
  const std::string sources = " '3 4 5' '19 18 17 16 15 14 13 12 11' '7'";
  const auto from_ag = run(predict + " " + reverse_model() + sources);
  const auto from_safetensors = run(predict + " " + path + sources);
  CHECK(from_safetensors.exit_code == 0);
  CHECK(from_safetensors.output == from_ag.output);
}

TEST_CASE("ag-predict --beam: width 1 is greedy decoding — the toy tasks draw no --attention-png",
    "[examples][predict]") {
  const std::string sources = " '3 9 4 7' '12 5' '19 18 17 3 4 5 6 7 8'";
  const auto greedy = run(predict + " " + reverse_model() + sources);
  const auto beam1 = run(predict + " " + reverse_model() + " --beam 1" + sources);
  CHECK(greedy.exit_code == 0);
  CHECK(beam1.output == greedy.output);
  const auto beam3 = run(predict + " " + reverse_model() + " --beam 3" + sources);
  CHECK(beam3.exit_code == 0);
  CHECK_THAT(beam3.output, Matches("3 9 4 7 -> [0-9 ]*\n12 5 -> [0-9 ]*\n19 18 .*\n"));
  const auto picture = run(predict + " " + reverse_model() + " --attention-png x.png 3");
  CHECK(picture.exit_code == 2);
  CHECK_THAT(picture.output, Contains("--attention-png is for translation models"));
}

TEST_CASE("ag-predict reads --beam as written, as ag-train reads its whole numbers",
    "[examples][predict]") {
  // CLI11 alone read 010 as 8 and 0x10 as 16, and took +5.
  for (const std::string value : {"010", "0x10", "+5"}) {
    const auto result = run(predict + " " + reverse_model() + " --beam " + value + " '3 9 4 7'");
    INFO(result.output);
    CHECK(result.exit_code == 2);
    CHECK(
        result.output == "ag-predict: --beam: " + value + " is not a whole number (see --help)\n");
  }
  const auto negative = run(predict + " " + reverse_model() + " --beam -1 3");
  CHECK(negative.exit_code == 2);
  CHECK(negative.output == "ag-predict: --beam -1 is outside 0-256\n");
}
