// Resuming is exact: 200 steps straight, and 100 steps + save + a new ag-train process that loads
// the checkpoint into freshly built objects and trains 100 more, give bit-identical parameters,
// optimizer state and loss curves (one thread).
#include <catch2/catch.hpp>

#include <sys/wait.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "io/checkpoint.h"

using namespace ag;
namespace fs = std::filesystem;

namespace {

std::string read_file(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

int run_train(const std::string& arguments) {
  const std::string command = std::string(AG_TRAIN_PATH) + " " + arguments + " > /dev/null";
  return std::system(command.c_str());
}

}  // namespace

TEST_CASE("a run stopped and resumed in a new process equals the run straight through",
    "[checkpoint][resume]") {
  for (const std::string format : {"binary", "json"}) {
    DYNAMIC_SECTION(format) {
      std::string pattern = (fs::temp_directory_path() / "ag-resume-XXXXXX").string();
      REQUIRE(::mkdtemp(pattern.data()) != nullptr);
      const fs::path dir = pattern;
      // A small model with dropout, so the dropout generator's state matters too.
      const std::string run_options =
          "--task sort --steps 200 --batch-size 16 --num-hiddens 16 --ffn-num-hiddens 32 --heads 2 "
          "--layers 1 "
          "--dropout 0.1 --lr 0.005 --eval-every 200 --eval-size 20 --threads 1 "
          "--checkpoint-format " +
          format;
      const std::string a = (dir / "a").string(), b = (dir / "b").string();
      REQUIRE(run_train(run_options + " --checkpoint " + a + ".agc --loss-log " + a + ".csv") == 0);
      REQUIRE(run_train(run_options + " --checkpoint " + b + ".agc --loss-log " + b +
                        ".csv --stop-after 100") == 0);
      CHECK(load_checkpoint(b + ".agc").integer("step") == 100);
      REQUIRE(run_train("--resume " + b + ".agc --checkpoint " + b + ".agc --loss-log " + b +
                        ".csv --eval-every 200 --threads 1 "
                        "--checkpoint-format " +
                        format) == 0);

      // Loss curves: every step's loss, written exactly (hexadecimal floats).
      const std::string straight = read_file(a + ".csv"), resumed = read_file(b + ".csv");
      CHECK(std::count(straight.begin(), straight.end(), '\n') == 201);
      CHECK(straight == resumed);
      // Parameters, Adam's moments and step counts, generator states: all identical.
      const Checkpoint ca = load_checkpoint(a + ".agc"), cb = load_checkpoint(b + ".agc");
      CHECK(ca.integers == cb.integers);
      CHECK(ca.reals == cb.reals);
      REQUIRE(ca.tensors.size() == cb.tensors.size());
      for (const auto& [name, t] : ca.tensors) {
        INFO(name);
        CHECK(t.to_vector<float>() == cb.tensor(name).to_vector<float>());
      }
      fs::remove_all(dir);
    }
  }
}

TEST_CASE("ag-train refuses a damaged checkpoint with a clear message", "[checkpoint][resume]") {
  std::string pattern = (fs::temp_directory_path() / "ag-resume-XXXXXX").string();
  REQUIRE(::mkdtemp(pattern.data()) != nullptr);
  const fs::path dir = pattern;
  const std::string path = (dir / "bad.agc").string();
  std::ofstream(path) << "not a checkpoint";
  const std::string command = std::string(AG_TRAIN_PATH) + " --resume " + path + " > " +
                              (dir / "out.txt").string() + " 2>&1";
  const int status = std::system(command.c_str());
  CHECK(WEXITSTATUS(status) == 1);
  CHECK(read_file(dir / "out.txt").find("not an ag checkpoint") != std::string::npos);
  fs::remove_all(dir);
}
