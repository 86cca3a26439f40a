// ag-train --task translate and ag-predict with a translation model, as a user runs them, in
// separate processes on a tiny model trained once into a temporary directory: ag-predict
// translates as ag-train's evaluation did (greedy and beam), warns of unknown words, draws the
// attention; a stopped and resumed run equals the run straight through; --write-pairs and --pairs
// read back the generated corpus.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <regex>
#include <string>

#include "programs.h"
#include "tests/pictures_test_util.h"
#include "viz/image.h"

using ag::viz::testing::lines;
using ag::viz::testing::read_text;
using ag::viz::testing::run;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

// A tiny run: 400 generated pairs (10 held out), sentences cut to 5 words, 60 steps of a model 16
// wide, some 0.2 s; it translates badly, but not all alike, and greedy and beam differ.
std::string tiny(int64_t steps, const std::string& beam = "2") {
  return " --task translate --generated-pairs 400 --eval-size 10 --num-steps 6 --dropout 0 "
         "--lr 0.01 --batch-size 16 --num-hiddens 16 --ffn-num-hiddens 32 --show 10 --steps " +
         std::to_string(steps) + " --eval-every " + std::to_string(steps) + " --beam " + beam;
}
// Only what `command` prints on stdout, or on stderr (run() collects both).
std::string stdout_of(const std::string& command) { return "{ " + command + " 2>/dev/null; }"; }
std::string stderr_of(const std::string& command) { return "{ " + command + " 2>&1 >/dev/null; }"; }

struct TrainedTranslator {
  fs::path dir = ag::viz::testing::temp_dir();
  std::string path = (dir / "en-lingo.agm").string();
  std::string output;
  TrainedTranslator() {
    const auto trained = run(train + tiny(60) + " --save-model " + path);
    INFO(trained.output);
    REQUIRE(trained.exit_code == 0);
    output = trained.output;
  }
  ~TrainedTranslator() { fs::remove_all(dir); }
};
const TrainedTranslator& translator() {
  static const TrainedTranslator t;
  return t;
}

// The last evaluation's examples: "  SOURCE => GREEDY  | beam: BEAM  (reference: ...)".
struct Shown {
  std::string source, greedy, beam;
};
std::vector<Shown> shown(const std::string& output) {
  const std::regex example("  (.+) => (.*)  \\| beam: (.*)  \\(reference: .*\\)");
  std::vector<Shown> all;
  for (const std::string& line : lines(output)) {
    std::smatch m;
    if (line.rfind("eval @", 0) == 0) all.clear();  // keep the last evaluation's
    if (std::regex_match(line, m, example)) all.push_back({m[1], m[2], m[3]});
  }
  return all;
}

}  // namespace

TEST_CASE("ag-train --task translate reports loss and BLEU — ag-predict translates as it did",
    "[examples][translate]") {
  const TrainedTranslator& t = translator();
  INFO(t.output);
  CHECK_THAT(t.output, Contains("ag-train: task translate, <generated pairs>: 390 training and "
                                "10 held-out pairs"));
  CHECK(std::regex_search(t.output,
      std::regex("eval @ step 60: held-out loss [0-9.]+  BLEU-2 greedy [0-9.]+  beam 2 [0-9.]+  "
                 "\\(mean over 10 held-out pairs\\)")));
  const std::vector<Shown> examples = shown(t.output);
  REQUIRE(examples.size() == 10);
  std::string arguments, greedy, beam;
  for (const Shown& e : examples) {
    arguments += " '" + e.source + "'";
    greedy += e.source + " => " + e.greedy + "\n";
    beam += e.source + " => " + e.beam + "\n";
  }
  CHECK(greedy != beam);  // the test would not tell them apart otherwise
  const auto greedy_run = run(stdout_of(predict + " " + t.path + arguments));
  CHECK(greedy_run.exit_code == 0);
  CHECK(greedy_run.output == greedy);
  const auto beam_run = run(stdout_of(predict + " " + t.path + " --beam 2" + arguments));
  CHECK(beam_run.exit_code == 0);
  CHECK(beam_run.output == beam);
}

TEST_CASE("ag-predict reads a sentence as d2l does and warns of words it does not know",
    "[examples][translate]") {
  const TrainedTranslator& t = translator();
  const auto r = run(stderr_of(predict + " " + t.path + " 'A zebra sleeps.'"));
  CHECK(r.exit_code == 0);
  CHECK(r.output ==
        "ag-predict: warning: \"zebra\" is not in the model's vocabulary: read as "
        "<unk>\n");
  const auto translated = run(stdout_of(predict + " " + t.path + " 'A zebra sleeps.'"));
  CHECK_THAT(translated.output, Contains("a zebra sleeps . => "));
  const auto long_one = run(stderr_of(predict + " " + t.path + " 'The big dog sees a cat.'"));
  CHECK(long_one.output ==
        "ag-predict: warning: \"The big dog sees a cat.\" is cut to its first "
        "5 words (the model's num_steps is 6)\n");
  const auto empty = run(predict + " " + t.path + " '  '");
  CHECK(empty.exit_code == 2);
  CHECK_THAT(empty.output, Contains("ag-predict: the sentence \"  \" has no word to translate"));
  const auto help = run(predict + " " + t.path + " --help");
  CHECK(help.exit_code == 0);
  CHECK_THAT(help.output, Contains("translates sentences (a source vocabulary of"));
}

TEST_CASE("ag-predict --attention-png draws a translation's encoder-decoder attention",
    "[examples][translate]") {
  const TrainedTranslator& t = translator();
  const std::string png = (t.dir / "attention.png").string();
  const auto r = run(predict + " " + t.path + " 'The big dog sees a cat.' --attention-png " + png);
  INFO(r.output);
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.output, Contains("wrote " + png));
  const ag::viz::Image image = ag::viz::read_png(png);
  CHECK(image.width() > image.height());  // 2 layers of 4 heads: 4 panels across, 2 down
  CHECK(ag::viz::testing::distinct_colours(image) >= 8);
  // One sentence only, and translation models only.
  const auto two = run(predict + " " + t.path + " 'a dog .' 'a cat .' --attention-png " + png);
  CHECK(two.exit_code == 2);
  CHECK_THAT(two.output, Contains("--attention-png draws one sentence's attention, not 2"));
}

TEST_CASE("a translate run stopped and resumed equals the run straight through",
    "[examples][translate]") {
  const fs::path dir = ag::viz::testing::temp_dir();
  const std::string straight = (dir / "straight.csv").string(),
                    parts = (dir / "parts.csv").string(), checkpoint = (dir / "run.agc").string();
  REQUIRE(run(train + tiny(20, "0") + " --loss-log " + straight).exit_code == 0);
  REQUIRE(run(train + tiny(20, "0") + " --loss-log " + parts + " --checkpoint " + checkpoint +
              " --stop-after 12")
              .exit_code == 0);
  const auto resumed = run(train + " --resume " + checkpoint + " --loss-log " + parts);
  INFO(resumed.output);
  CHECK(resumed.exit_code == 0);
  CHECK_THAT(resumed.output, Contains("resuming " + checkpoint + " at step 13 of 20"));
  CHECK(read_text(parts) == read_text(straight));
  fs::remove_all(dir);
}

TEST_CASE("a translate run refuses to resume on pairs that changed since, even in their order",
    "[examples][translate]") {
  const fs::path dir = ag::viz::testing::temp_dir();
  const std::string file = (dir / "pairs.txt").string(), checkpoint = (dir / "run.agc").string();
  REQUIRE(run(train + " --write-pairs " + file + " --generated-pairs 400").exit_code == 0);
  REQUIRE(run(train + tiny(20, "0") + " --pairs " + file + " --checkpoint " + checkpoint +
              " --stop-after 10")
              .exit_code == 0);
  // The same pairs, two of them swapped: the same vocabularies, another order of batches.
  std::vector<std::string> pairs = lines(read_text(file));
  std::swap(pairs[0], pairs[1]);
  std::ofstream out(file);
  for (const std::string& pair : pairs) out << pair << "\n";
  out.close();
  const auto resumed = run(train + " --resume " + checkpoint);
  CHECK(resumed.exit_code == 1);
  CHECK_THAT(resumed.output, Contains("the pairs of " + file + " are not those the run was"));
  fs::remove_all(dir);
}

TEST_CASE("ag-train refuses pairs whose every source, or every target, is empty",
    "[examples][translate]") {
  const fs::path dir = ag::viz::testing::temp_dir();
  for (const std::string side : {"source", "target"}) {
    const std::string file = (dir / (side + ".txt")).string();
    std::ofstream out(file);
    for (int i = 0; i < 50; ++i)
      out << (side == "source" ? " " : "a word " + std::to_string(i)) << "\t"
          << (side == "target" ? "" : "un mot " + std::to_string(i)) << "\n";
    out.close();
    const auto refused = run(train + tiny(10) + " --pairs " + file);
    INFO(refused.output);
    CHECK(refused.exit_code == 1);
    CHECK_THAT(refused.output, Contains("the " + side + " of every one of its 50 pairs is empty"));
  }
  fs::remove_all(dir);
}

TEST_CASE("ag-train --write-pairs writes the generated corpus that --pairs reads back",
    "[examples][translate]") {
  const fs::path dir = ag::viz::testing::temp_dir();
  const std::string file = (dir / "pairs.txt").string();
  const auto written = run(train + " --write-pairs " + file + " --generated-pairs 400");
  CHECK(written.exit_code == 0);
  CHECK(lines(read_text(file)).size() == 400);
  const auto generated = run(train + tiny(10));
  const auto from_file = run(train + tiny(10) + " --pairs " + file);
  REQUIRE(generated.exit_code == 0);
  REQUIRE(from_file.exit_code == 0);
  CHECK(shown(from_file.output).size() == 10);
  // The evaluation and the last line, without the run's duration ("done: 10 steps in 0:01;"),
  // which depends on the machine (under the sanitizers one run took a second, the other less).
  const auto results = [](const std::string& output) {
    std::string text = output.substr(output.find("eval @ step 10:"));
    const std::size_t in = text.find(" steps in "), end = text.find(';', in);
    if (in != std::string::npos && end != std::string::npos) text.erase(in, end - in);
    return text;
  };
  CHECK(results(from_file.output) == results(generated.output));
  CHECK_THAT(from_file.output, Contains(file + ": 390 training and 10 held-out pairs"));
  // A file without a usable line is refused, naming it.
  std::ofstream(dir / "bad.txt") << "no tab here\n";
  const auto bad = run(train + tiny(10) + " --pairs " + (dir / "bad.txt").string());
  CHECK(bad.exit_code == 1);
  CHECK_THAT(bad.output, Contains((dir / "bad.txt").string()));
  fs::remove_all(dir);
}
