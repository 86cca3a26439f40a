// The report's logs (training/report.h): every row of a LogFile is checked as it is written, so a
// full disk ends the run with an error naming the log instead of leaving a short one.
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "autograd/error.h"
#include "tests/temp_folder.h"
#include "training/report.h"

using namespace ag;
using Catch::Matchers::Contains;

TEST_CASE("a LogFile on a full disk fails at the row that does not fit", "[training][report]") {
  // /dev/full: every write fails with ENOSPC, as on a disk with no space left.
  training::LogFile log("/dev/full", "--loss-log", "", 1);
  CHECK_THROWS_AS(log.row("1,0x1p+0"), IoError);
  CHECK_THROWS_WITH(
      log.row("2,0x1p+0"), Contains("writing --loss-log /dev/full failed (is the disk full?)"));
}

TEST_CASE("a resumed LogFile keeps the rows before the resumed step", "[training][report]") {
  ag::testing::TempFolder folder;
  const std::string path = folder.file("loss.csv");
  {
    training::LogFile log(path, "--loss-log", "step,loss", 1);
    for (int step = 1; step <= 5; ++step) log.row(std::to_string(step) + ",0");
    log.close();
  }
  training::LogFile resumed(path, "--loss-log", "step,loss", 4);  // steps 4 and 5 run again
  resumed.row("4,1");
  resumed.close();
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  CHECK(text.str() == "step,loss\n1,0\n2,0\n3,0\n4,1\n");
}

TEST_CASE("median is Python's statistics.median", "[training][report]") {
  CHECK(training::median({3.0, 1.0, 2.0}) == 2.0);
  CHECK(training::median({4.0, 1.0, 3.0, 2.0}) == 2.5);  // the mean of the middle two
  CHECK(training::median({7.5}) == 7.5);
  CHECK(std::isnan(training::median({})));
}

TEST_CASE("IterationTimes summarises the iterations after the warm-up ones", "[training][report]") {
  training::IterationTimes times;
  for (int i = 0; i < 3; ++i) {
    times.begin();
    CHECK(times.end() >= 0.0);
  }
  CHECK(times.count() == 3);
  CHECK(times.summary(3).empty());  // every iteration is a warm-up one: nothing to summarise
  const std::string line = times.summary(1);
  CHECK_THAT(line, Contains("time per iteration: median "));
  CHECK_THAT(line, Contains("ms, CPU time median "));
  CHECK_THAT(line, Contains("ms (iterations from 1 on)\n"));
}
