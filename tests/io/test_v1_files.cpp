// Files written before persistence moved out of the engine and the optimizer (tests/io/fixtures/,
// made by e6d2547; its README has the commands) still load, and ag-train resumes the checkpoint
// to the losses and the final model of e6d2547's run straight through.
//
// Within 1e-5 relative, not bit for bit: issue 32's vectorised math (SLEEF's exp in the
// cross-entropy, softmax's sums in lanes) rounds the last bits of a step differently from the
// kernels that made the fixtures, as does a build that compiles the float arithmetic differently
// (the sanitizer build). 1e-5 over twenty steps still catches any state that failed to load: a
// fresh optimizer state or a wrong step count moves the losses in the third digit.
#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "io/checkpoint.h"
#include "io/optimizer_state.h"
#include "models/seq2seq_file.h"

using namespace ag;
namespace fs = std::filesystem;

namespace {

const fs::path fixtures = AG_FIXTURES_DIR;

std::string read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

void check_same_tensors(
    const std::map<std::string, Tensor>& a, const std::map<std::string, Tensor>& b) {
  REQUIRE(a.size() == b.size());
  for (const auto& [name, t] : a) {
    INFO(name);
    REQUIRE(b.count(name));
    CHECK(t.dtype() == b.at(name).dtype());
    CHECK(t.shape() == b.at(name).shape());
    CHECK(t.to_vector<double>() == b.at(name).to_vector<double>());  // bit for bit
  }
}

// The loss column of a --loss-log file ("step,loss" and a row per step, in hexadecimal floats).
std::vector<double> loss_column(const std::string& csv) {
  std::istringstream lines(csv);
  std::vector<double> losses;
  std::string line;
  std::getline(lines, line);  // the header
  while (std::getline(lines, line))
    losses.push_back(std::strtod(line.substr(line.find(',') + 1).c_str(), nullptr));
  return losses;
}

// The entries of `c` whose name starts with `prefix`.
Checkpoint entries_under(const Checkpoint& c, const std::string& prefix) {
  Checkpoint out;
  auto starts = [&](const std::string& name) { return name.rfind(prefix, 0) == 0; };
  for (const auto& [name, v] : c.tensors)
    if (starts(name)) out.tensors[name] = v;
  for (const auto& [name, v] : c.integers)
    if (starts(name)) out.integers[name] = v;
  for (const auto& [name, v] : c.reals)
    if (starts(name)) out.reals[name] = v;
  for (const auto& [name, v] : c.strings)
    if (starts(name)) out.strings[name] = v;
  return out;
}

}  // namespace

TEST_CASE("the version-1 model file loads", "[io][v1]") {
  const fs::path path = fixtures / "model-v1.agm";
  const Checkpoint file = load_checkpoint(path.string());
  CHECK(file.kind == "model");
  const seq2seq::LoadedModel loaded = seq2seq::load_model(path.string());
  CHECK(loaded.task->name() == "reverse");
  CHECK(loaded.config.num_hiddens == 4);
  CHECK(loaded.config.num_heads == 2);
  check_same_tensors(loaded.model->state_dict(), file.tensors_under("model"));
}

TEST_CASE(
    "the version-1 checkpoint's optimizer state loads and is written back unchanged", "[io][v1]") {
  const Checkpoint file = load_checkpoint((fixtures / "checkpoint-v1.agc").string());
  CHECK(file.kind == "ag-train");
  CHECK(file.integer("step") == 20);
  manual_seed(0);
  auto model = seq2seq::make_transformer(seq2seq::load_model_config(file));
  model->load_state_dict(file.tensors_under("model"));
  optim::Adam adam(model->parameters(), 0.01);
  adam.load_state_dict(get_optimizer_state(file));
  const std::size_t count = model->parameters().size();
  REQUIRE(adam.state.size() == 1);
  REQUIRE(adam.state[0].size() == count);
  for (const optim::AdamState& s : adam.state[0]) CHECK(s.step == 20);
  CHECK(adam.state[0][3].exp_avg.to_vector<float>() ==
        file.tensor("optimizer.state.0.3.exp_avg").to_vector<float>());

  // The state dict written back gives exactly the file's "optimizer." entries, names and values.
  Checkpoint again;
  put_optimizer_state(again, adam.state_dict());
  const Checkpoint expected = entries_under(file, "optimizer.");
  CHECK(again.strings == expected.strings);
  CHECK(again.integers == expected.integers);
  CHECK(again.reals == expected.reals);
  check_same_tensors(again.tensors, expected.tensors);
  CHECK(expected.tensors.size() == 2 * count);
}

TEST_CASE("ag-train resumes the version-1 checkpoint to the run it stopped", "[io][v1][resume]") {
  std::string pattern = (fs::temp_directory_path() / "ag-v1-XXXXXX").string();
  REQUIRE(::mkdtemp(pattern.data()) != nullptr);
  const fs::path dir = pattern;
  fs::copy_file(fixtures / "checkpoint-v1.agc", dir / "r.agc");
  // The loss log of the stopped run: the header and steps 1-20 of the run straight through.
  const std::string straight_losses = read_bytes(fixtures / "loss-v1.csv");
  std::size_t end_of_step_20 = 0;
  for (int line = 0; line < 21; ++line)
    end_of_step_20 = straight_losses.find('\n', end_of_step_20) + 1;
  std::ofstream(dir / "r.csv", std::ios::binary) << straight_losses.substr(0, end_of_step_20);

  const std::string command =
      std::string(AG_TRAIN_PATH) + " --resume " + (dir / "r.agc").string() + " --checkpoint " +
      (dir / "r.agc").string() + " --loss-log " + (dir / "r.csv").string() + " --save-model " +
      (dir / "r.agm").string() + " --eval-every 20 --threads 1 > " + (dir / "out.txt").string();
  REQUIRE(std::system(command.c_str()) == 0);
  CHECK(read_bytes(dir / "out.txt").find("resuming") != std::string::npos);

  const std::vector<double> losses = loss_column(read_bytes(dir / "r.csv"));
  const std::vector<double> expected_losses = loss_column(straight_losses);
  REQUIRE(losses.size() == 40);
  REQUIRE(expected_losses.size() == 40);
  for (std::size_t step = 0; step < losses.size(); ++step) {
    INFO("step " << step + 1);
    CHECK(losses[step] == Approx(expected_losses[step]).epsilon(1e-5));
  }
  const std::map<std::string, Tensor> weights = load_checkpoint((dir / "r.agm").string()).tensors;
  const std::map<std::string, Tensor> expected =
      load_checkpoint((fixtures / "model-v1.agm").string()).tensors;
  REQUIRE(weights.size() == expected.size());
  for (const auto& [name, t] : weights) {
    INFO(name);
    REQUIRE(expected.count(name));
    const std::vector<double> got = t.to_vector<double>(),
                              want = expected.at(name).to_vector<double>();
    REQUIRE(got.size() == want.size());
    for (std::size_t i = 0; i < got.size(); ++i)
      CHECK(got[i] == Approx(want[i]).epsilon(1e-5).margin(1e-7));
  }
  fs::remove_all(dir);
}
