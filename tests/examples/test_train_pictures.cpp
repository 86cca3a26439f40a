// ag-train's pictures (examples/train/toy.cpp): --curves-dir's training_curves.csv and .png, and
// --attention-png's grid of attention heatmaps, from short runs in separate processes.
#include <catch2/catch.hpp>

#include "tests/pictures_test_util.h"

using namespace ag::viz;
using namespace ag::viz::testing;
using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;
namespace fs = std::filesystem;

namespace {
// A small model, 60 steps, evaluated every 20: well under a second.
std::string small_run(int layers = 1) {
  return " --task reverse --steps 60 --eval-every 20 --eval-size 20 --num-hiddens 16 "
         "--ffn-num-hiddens 32 --heads 2 "
         "--threads 1 --layers " +
         std::to_string(layers);
}
}  // namespace

TEST_CASE(
    "ag-train --curves-dir writes a row per evaluation and draws the curves", "[pictures][train]") {
  const fs::path dir = temp_dir();
  const Run r =
      run(std::string(AG_TRAIN_PATH) + small_run() + " --curves-dir " + (dir / "curves").string());
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  // The last line is still the summary that scripts/test.sh reads.
  CHECK_THAT(lines(r.output).back(), StartsWith("done: 60 steps"));
  CHECK_THAT(r.output, Contains("wrote " + (dir / "curves" / "training_curves.png").string()));

  const std::vector<std::string> csv = lines(read_text(dir / "curves" / "training_curves.csv"));
  REQUIRE(csv.size() == 4);
  CHECK(csv[0] == "step,train_loss,heldout_loss,token_accuracy,sequence_accuracy");
  for (int row = 1; row <= 3; ++row) {
    long long step = 0;
    double train_loss = 0, heldout_loss = 0, token_accuracy = -1, sequence_accuracy = -1;
    REQUIRE(std::sscanf(csv[row].c_str(), "%lld,%lf,%lf,%lf,%lf", &step, &train_loss, &heldout_loss,
                &token_accuracy, &sequence_accuracy) == 5);
    CHECK(step == 20 * row);
    // Cross-entropy over a vocabulary of 20 starts near ln 20 ≈ 3 and stays positive.
    CHECK((train_loss > 0 && train_loss < 5));
    CHECK((heldout_loss > 0 && heldout_loss < 5));
    CHECK((token_accuracy >= 0 && token_accuracy <= 1));
    CHECK((sequence_accuracy >= 0 && sequence_accuracy <= 1));
    // The same held-out numbers as the printed evaluation.
    char printed[64];
    std::snprintf(
        printed, sizeof printed, "eval @ step %lld: held-out loss %.4f", step, heldout_loss);
    CHECK_THAT(r.output, Contains(printed));
  }
  const Image png = read_png((dir / "curves" / "training_curves.png").string());
  CHECK(png.width() == 800);
  CHECK(png.height() == 720);  // two panels of 360
  CHECK(distinct_colours(png) >= 4);
  fs::remove_all(dir);
}

TEST_CASE(
    "ag-train --curves-dir continues the curves of a resumed run", "[pictures][train][resume]") {
  const fs::path dir = temp_dir();
  const std::string curves =
      " --curves-dir " + dir.string() + " --checkpoint " + (dir / "run.agc").string();
  const Run first = run(std::string(AG_TRAIN_PATH) + small_run() + curves + " --stop-after 40");
  INFO(first.output);
  REQUIRE(first.exit_code == 0);
  CHECK(lines(read_text(dir / "training_curves.csv")).size() == 3);  // the header, steps 20 and 40
  const Run second = run(std::string(AG_TRAIN_PATH) + " --resume " + (dir / "run.agc").string() +
                         curves + " --eval-every 20 --threads 1");
  INFO(second.output);
  REQUIRE(second.exit_code == 0);
  const std::vector<std::string> csv = lines(read_text(dir / "training_curves.csv"));
  REQUIRE(csv.size() == 4);  // one header, then steps 20, 40, 60
  CHECK(csv[0] == "step,train_loss,heldout_loss,token_accuracy,sequence_accuracy");
  CHECK_THAT(csv[1], StartsWith("20,"));
  CHECK_THAT(csv[2], StartsWith("40,"));
  CHECK_THAT(csv[3], StartsWith("60,"));
  CHECK(read_png((dir / "training_curves.png").string()).height() == 720);
  fs::remove_all(dir);
}

TEST_CASE("ag-train --attention-png draws every layer and head of a decoded held-out example",
    "[pictures][train]") {
  const fs::path dir = temp_dir();
  const fs::path png_path = dir / "attention.png";
  const Run r = run(std::string(AG_TRAIN_PATH) + small_run(2) + " --attention-png " +
                    png_path.string() + " --attention-example 1");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(lines(r.output).back(), StartsWith("done: 60 steps"));
  // Held-out example 1 is the second one printed at each evaluation.
  CHECK_THAT(
      r.output, Contains("wrote " + png_path.string() +
                         " (attention of every layer and head, held-out example 1: 9 8 5 4 -> "));
  const Image png = read_png(png_path.string());
  // 3 kinds × 2 layers = 6 rows of 2 heads, each panel at least 5 cells of 20 pixels wide and high
  // (the source 9 8 5 4 <eos>).
  CHECK(png.width() >= 2 * 5 * 20);
  CHECK(png.height() >= 6 * 5 * 20);
  CHECK(distinct_colours(png) > 50);  // attention weights in many shades, the colour bars, the text
  fs::remove_all(dir);
}

TEST_CASE("ag-train rejects an --attention-example outside the held-out set", "[pictures][train]") {
  const Run r = run(
      std::string(AG_TRAIN_PATH) + small_run() + " --attention-png x.png --attention-example 20");
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, Contains("--attention-example 20 must be -1 or in 0-19"));
}
