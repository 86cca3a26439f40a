// Strict loading of a module's state dict reports every mismatch at once and changes nothing
// (tests/io/test_module_state.cpp round-trips state dicts through checkpoint files).
#include <catch2/catch.hpp>

#include "nn/nn.h"

using namespace ag;
using Catch::Matchers::Equals;

TEST_CASE("strict loading reports missing, unexpected and mismatched entries together",
    "[nn][state_dict]") {
  manual_seed(6);
  nn::PositionWiseFFN model(4, 8, 4);
  auto state = model.state_dict();
  const std::vector<float> before = model.dense1->weight.to_vector<float>();
  std::map<std::string, Tensor> file = {
      {"dense1.weight", zeros({16, 4})},                                       // shape mismatch
      {"dense1.bias", zeros({8})}, {"dense2.weight", zeros({4, 8}, float64)},  // dtype mismatch
      {"dense3.weight", zeros({1})},                                           // unexpected
      // dense2.bias missing
  };
  CHECK_THROWS_AS(model.load_state_dict(file), nn::StateDictError);
  CHECK_THROWS_WITH(model.load_state_dict(file),
      Equals("checkpoint: missing [dense2.bias]; unexpected [dense3.weight]; "
             "shape mismatch dense1.weight: file [16,4], model [8,4]; "
             "dtype mismatch dense2.weight: file float64, model float32"));
  // Nothing was loaded, not even the entry that fits (dense1.bias).
  CHECK(model.dense1->weight.to_vector<float>() == before);
  CHECK(model.dense1->bias.to_vector<float>() != std::vector<float>(8, 0.0f));
}

TEST_CASE("non-strict loading loads what fits and returns the rest", "[nn][state_dict]") {
  manual_seed(7);
  nn::PositionWiseFFN model(4, 8, 4);
  std::map<std::string, Tensor> file = {
      {"dense1.bias", zeros({8})}, {"dense2.weight", zeros({5, 8})}, {"extra", zeros({1})}};
  const std::vector<std::string> problems = model.load_state_dict(file, /*strict=*/false);
  CHECK(model.dense1->bias.to_vector<float>() == std::vector<float>(8, 0.0f));
  CHECK(
      problems == std::vector<std::string>{"missing dense1.weight", "missing dense2.bias",
                      "unexpected extra", "shape mismatch dense2.weight: file [5,8], model [4,8]"});
}

TEST_CASE("RotaryEmbedding's angle tables are a cache, not state", "[nn][state_dict]") {
  // Their length follows the longest sequence a model has seen: in a state dict, a checkpoint
  // saved after a long generation would not load into a fresh model.
  nn::RotaryEmbedding grown(8), fresh(8);
  grown.angles(3000, 10, float32);
  REQUIRE(grown.cos_cached.size(0) == 4096);
  CHECK(grown.state_dict().empty());
  CHECK(grown.named_buffers().empty());
  CHECK(fresh.load_state_dict(grown.state_dict()).empty());
  CHECK(fresh.cos_cached.size(0) == nn::RotaryEmbedding::kInitialPositions);
}
