// ag-nanogpt (examples/nanogpt/) against nanoGPT's model.py and train.py: the state dict's names
// and shapes are nanoGPT's (bench/nanogpt_torch.py's state_dict() printed them for these
// configurations), the parameter count it prints is model.py's get_num_params(), and AdamW's
// weight decay reaches the >= 2-D parameters only (configure_optimizers). Each case runs the
// program for one iteration of a tiny model on the README, into a checkpoint it then reads.
#include <catch2/catch.hpp>

#include <algorithm>
#include <regex>
#include <string>
#include <utility>
#include <vector>

#include "io/checkpoint.h"
#include "io/optimizer_state.h"
#include "tests/pictures_test_util.h"
#include "tests/temp_folder.h"

using ag::viz::testing::run;

namespace {

// One iteration of a GPT of 1 block, width 8, 2 heads, block 4, on the README (vocabulary V):
// its output, and the checkpoint it saved.
struct TinyRun {
  std::string output;
  ag::Checkpoint checkpoint;
};

TinyRun run_tiny(const ag::testing::TempFolder& folder, const std::string& options) {
  const std::string checkpoint = folder.file("tiny.agc");
  const auto result = run(std::string(AG_NANOGPT_PATH) + " --text " + AG_SOURCE_DIR +
                          "/README.md --n-layer 1 --n-embd 8 --n-head 2 --block-size 4 "
                          "--batch-size 2 --max-iters 1 --eval-iters 1 --checkpoint " +
                          checkpoint + " " + options);
  INFO(result.output);
  REQUIRE(result.exit_code == 0);
  return {result.output, ag::load_checkpoint(checkpoint)};
}

// The model's entries of the checkpoint, "model." dropped, in name order, with their shapes.
std::vector<std::pair<std::string, ag::Shape>> model_entries(const ag::Checkpoint& c) {
  std::vector<std::pair<std::string, ag::Shape>> entries;
  for (const auto& [name, tensor] : c.tensors_under("model"))
    entries.emplace_back(name, tensor.shape());
  return entries;
}

// The number the program printed after `label` ("number of parameters: 0.00M (1,234)" -> 1234).
long long printed_count(const std::string& output, const std::string& pattern) {
  std::smatch match;
  REQUIRE(std::regex_search(output, match, std::regex(pattern)));
  std::string digits = match[1].str();
  std::erase(digits, ',');
  return std::stoll(digits);
}

int64_t vocabulary(const std::string& output) {
  return printed_count(output, "vocab size: ([0-9,]+)");
}

}  // namespace

TEST_CASE("ag-nanogpt's state dict has nanoGPT's names and shapes, with and without --bias",
    "[examples][nanogpt]") {
  ag::testing::TempFolder folder;
  using Entries = std::vector<std::pair<std::string, ag::Shape>>;
  for (const bool bias : {false, true}) {
    INFO("--bias " << bias);
    const TinyRun tiny = run_tiny(folder, bias ? "--bias" : "");
    const int64_t V = vocabulary(tiny.output), C = 8;
    // GPT(vocab_size=V, n_layer=1, n_head=2, n_embd=8, block_size=4, bias).state_dict(), sorted
    Entries expected = {{"lm_head.weight", {V, C}},  // the tied weight, under both names
        {"transformer.h.0.attn.c_attn.weight", {3 * C, C}},
        {"transformer.h.0.attn.c_proj.weight", {C, C}}, {"transformer.h.0.ln_1.weight", {C}},
        {"transformer.h.0.ln_2.weight", {C}}, {"transformer.h.0.mlp.c_fc.weight", {4 * C, C}},
        {"transformer.h.0.mlp.c_proj.weight", {C, 4 * C}}, {"transformer.ln_f.weight", {C}},
        {"transformer.wpe.weight", {4, C}}, {"transformer.wte.weight", {V, C}}};
    if (bias) {
      expected.insert(expected.end(),
          {{"transformer.h.0.attn.c_attn.bias", {3 * C}}, {"transformer.h.0.attn.c_proj.bias", {C}},
              {"transformer.h.0.ln_1.bias", {C}}, {"transformer.h.0.ln_2.bias", {C}},
              {"transformer.h.0.mlp.c_fc.bias", {4 * C}}, {"transformer.h.0.mlp.c_proj.bias", {C}},
              {"transformer.ln_f.bias", {C}}});
      std::sort(expected.begin(), expected.end());
    }
    CHECK(model_entries(tiny.checkpoint) == expected);
    // Tied: the same values under both names.
    const auto model = tiny.checkpoint.tensors_under("model");
    CHECK(model.at("lm_head.weight").to_vector<float>() ==
          model.at("transformer.wte.weight").to_vector<float>());
    // get_num_params(): every parameter once (the tied one once), the position embeddings left
    // out. A block: 12 C² in its matrices, 2 C in its LayerNorm weights, and with biases 3 C + C
    // + 4 C + C in the Linears and 2 C in the LayerNorms; ln_f C (+ C); wte V C.
    const int64_t block = 12 * C * C + 2 * C + (bias ? 11 * C : 0);
    const int64_t expected_count = block + C + (bias ? C : 0) + V * C;
    CHECK(printed_count(tiny.output, R"(number of parameters: [0-9.]+M \(([0-9,]+)\))") ==
          expected_count);
  }
}

TEST_CASE("ag-nanogpt decays only the >= 2-D parameters, in nanoGPT's two groups",
    "[examples][nanogpt]") {
  ag::testing::TempFolder folder;
  const TinyRun tiny = run_tiny(folder, "--bias --weight-decay 0.25");
  const int64_t V = vocabulary(tiny.output), C = 8;
  // configure_optimizers' lines: the decayed tensors are c_attn, c_proj, c_fc, c_proj and the two
  // embeddings; the others the 7 biases and the 3 LayerNorm weights.
  CHECK(printed_count(tiny.output, "num decayed parameter tensors: 6, with ([0-9,]+) parameters") ==
        12 * C * C + V * C + 4 * C);
  CHECK(printed_count(tiny.output,
            "num non-decayed parameter tensors: 10, with ([0-9,]+) parameters") == 15 * C);
  // The optimizer saved: group 0 decays (0.25) exactly the parameters whose moments are >= 2-D,
  // group 1 (0) the others.
  const ag::optim::StateDict state = ag::get_optimizer_state(tiny.checkpoint, "optimizer");
  REQUIRE(state.param_groups.size() == 2);
  CHECK(state.param_groups[0].options.at("weight_decay") == 0.25);
  CHECK(state.param_groups[1].options.at("weight_decay") == 0.0);
  CHECK(state.param_groups[0].params.size() == 6);
  CHECK(state.param_groups[1].params.size() == 10);
  for (std::size_t g = 0; g < 2; ++g)
    for (std::size_t number : state.param_groups[g].params) {
      INFO("group " << g << ", parameter " << number);
      const ag::Tensor& moment = state.state.at(number).tensors.at("exp_avg");
      CHECK((moment.dim() >= 2) == (g == 0));
    }
}
