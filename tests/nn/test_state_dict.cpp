// Module state in checkpoints: every module type round-trips through both file encodings, and
// strict loading reports every mismatch at once and changes nothing.
#include <catch2/catch.hpp>

#include <functional>

#include "nn/nn.h"

using namespace ag;
using Catch::Matchers::Contains;
using Catch::Matchers::Equals;

namespace {

// Saves `source`'s state into a file image and loads it into `target`.
void round_trip(const nn::Module& source, nn::Module& target, CheckpointFormat format) {
  Checkpoint c;
  c.kind = "test";
  for (const auto& [name, t] : source.state_dict()) c.tensors["model." + name] = t;
  const Checkpoint back = parse_checkpoint(serialize_checkpoint(c, format));
  target.load_state_dict(back.tensors_under("model"));
}

void check_same_state(const nn::Module& a, const nn::Module& b) {
  const auto sa = a.state_dict(), sb = b.state_dict();
  REQUIRE(sa.size() == sb.size());
  for (const auto& [name, t] : sa) {
    INFO(name);
    REQUIRE(sb.count(name));
    CHECK(t.dtype() == sb.at(name).dtype());
    CHECK(t.to_vector<double>() == sb.at(name).to_vector<double>());  // bit for bit
  }
}

using Factory = std::function<std::shared_ptr<nn::Module>()>;

std::vector<std::pair<std::string, Factory>> every_module_type() {
  return {
      {"Linear", [] { return std::make_shared<nn::Linear>(3, 4); }},
      {"Embedding", [] { return std::make_shared<nn::Embedding>(7, 3); }},
      {"LayerNorm", [] { return std::make_shared<nn::LayerNorm>(std::vector<int64_t>{2, 3}); }},
      {"Dropout", [] { return std::make_shared<nn::Dropout>(0.3); }},
      {"DotProductAttention", [] { return std::make_shared<nn::DotProductAttention>(0.1); }},
      {"AdditiveAttention", [] { return std::make_shared<nn::AdditiveAttention>(3, 4, 5, 0.1); }},
      {"MultiHeadAttention", [] { return std::make_shared<nn::MultiHeadAttention>(3, 4, 5, 6, 2, 0.1, true); }},
      {"PositionalEncoding", [] { return std::make_shared<nn::PositionalEncoding>(6, 0.1, 20); }},
      {"LearnedPositionalEncoding", [] { return std::make_shared<nn::LearnedPositionalEncoding>(6, 0.1, 20); }},
      {"PositionWiseFFN", [] { return std::make_shared<nn::PositionWiseFFN>(4, 8, 4); }},
      {"AddNorm", [] { return std::make_shared<nn::AddNorm>(std::vector<int64_t>{4}, 0.1); }},
      {"TransformerEncoderBlock",
       [] { return std::make_shared<nn::TransformerEncoderBlock>(4, 4, 4, 4, std::vector<int64_t>{4}, 4, 8, 2, 0.1); }},
      {"TransformerEncoder",
       [] { return std::make_shared<nn::TransformerEncoder>(9, 4, 4, 4, 4, std::vector<int64_t>{4}, 4, 8, 2, 2, 0.1); }},
      {"TransformerDecoderBlock",
       [] { return std::make_shared<nn::TransformerDecoderBlock>(4, 4, 4, 4, std::vector<int64_t>{4}, 4, 8, 2, 0.1, 0); }},
      {"EncoderDecoder",
       [] {
         auto enc = std::make_shared<nn::TransformerEncoder>(9, 4, 4, 4, 4, std::vector<int64_t>{4}, 4, 8, 2, 2, 0.1);
         auto dec = std::make_shared<nn::TransformerDecoder>(9, 4, 4, 4, 4, std::vector<int64_t>{4}, 4, 8, 2, 2, 0.1);
         return std::make_shared<nn::EncoderDecoder>(enc, dec);
       }},
  };
}

}  // namespace

TEST_CASE("every module type round-trips through binary and JSON checkpoints", "[nn][checkpoint]") {
  for (const auto& [type, make] : every_module_type()) {
    for (CheckpointFormat format : {CheckpointFormat::binary, CheckpointFormat::json}) {
      DYNAMIC_SECTION(type << (format == CheckpointFormat::binary ? " binary" : " JSON")) {
        manual_seed(1);
        auto source = make();
        auto target = make();
        // Random values in every parameter and buffer of the source (LayerNorm's ones and the
        // positional table would otherwise start out equal in both).
        Generator g(2);
        {
          NoGradGuard no_grad;
          for (auto& [name, t] : source->state_dict()) t.copy_(randn(t.shape(), g, t.dtype()));
        }
        for (auto& [name, t] : source->state_dict())
          if (t.numel() > 0) CHECK(t.to_vector<double>() != target->state_dict().at(name).to_vector<double>());
        round_trip(*source, *target, format);
        check_same_state(*source, *target);
      }
    }
  }
}

TEST_CASE("float64 parameters round-trip exactly", "[nn][checkpoint]") {
  manual_seed(3);
  nn::Linear a(3, 2), b(3, 2);
  a.to(float64);
  b.to(float64);
  round_trip(a, b, CheckpointFormat::json);
  check_same_state(a, b);
}

TEST_CASE("a loaded model computes what the saved one computed", "[nn][checkpoint]") {
  manual_seed(4);
  auto enc = std::make_shared<nn::TransformerEncoder>(9, 4, 4, 4, 4, std::vector<int64_t>{4}, 4, 8, 2, 1, 0.0);
  manual_seed(5);
  auto copy = std::make_shared<nn::TransformerEncoder>(9, 4, 4, 4, 4, std::vector<int64_t>{4}, 4, 8, 2, 1, 0.0);
  round_trip(*enc, *copy, CheckpointFormat::binary);
  Tensor tokens = tensor({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor lens = tensor({3, 2});
  CHECK(enc->forward(tokens, lens).to_vector<float>() == copy->forward(tokens, lens).to_vector<float>());
}

TEST_CASE("strict loading reports missing, unexpected and mismatched entries together", "[nn][checkpoint]") {
  manual_seed(6);
  nn::PositionWiseFFN model(4, 8, 4);
  auto state = model.state_dict();
  const std::vector<float> before = model.dense1->weight.to_vector<float>();
  std::map<std::string, Tensor> file = {
      {"dense1.weight", zeros({16, 4})},  // shape mismatch
      {"dense1.bias", zeros({8})},
      {"dense2.weight", zeros({4, 8}, float64)},  // dtype mismatch
      {"dense3.weight", zeros({1})},              // unexpected
      // dense2.bias missing
  };
  CHECK_THROWS_AS(model.load_state_dict(file), CheckpointError);
  CHECK_THROWS_WITH(model.load_state_dict(file),
                    Equals("checkpoint: missing [dense2.bias]; unexpected [dense3.weight]; "
                           "shape mismatch dense1.weight: file [16,4], model [8,4]; "
                           "dtype mismatch dense2.weight: file float64, model float32"));
  // Nothing was loaded, not even the entry that fits (dense1.bias).
  CHECK(model.dense1->weight.to_vector<float>() == before);
  CHECK(model.dense1->bias.to_vector<float>() != std::vector<float>(8, 0.0f));
}

TEST_CASE("non-strict loading loads what fits and returns the rest", "[nn][checkpoint]") {
  manual_seed(7);
  nn::PositionWiseFFN model(4, 8, 4);
  std::map<std::string, Tensor> file = {{"dense1.bias", zeros({8})}, {"dense2.weight", zeros({5, 8})}, {"extra", zeros({1})}};
  const std::vector<std::string> problems = model.load_state_dict(file, /*strict=*/false);
  CHECK(model.dense1->bias.to_vector<float>() == std::vector<float>(8, 0.0f));
  CHECK(problems == std::vector<std::string>{"missing dense1.weight", "missing dense2.bias", "unexpected extra",
                                             "shape mismatch dense2.weight: file [5,8], model [4,8]"});
}
