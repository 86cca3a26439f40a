// Module state in checkpoints: every module type round-trips through both file encodings
// (strict loading itself is tested in tests/nn/test_state_dict.cpp).
#include <catch2/catch.hpp>

#include <functional>

#include "io/checkpoint.h"
#include "nn/nn.h"

using namespace ag;

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
      {"LayerNorm",
          [] {
            return std::make_shared<nn::LayerNorm>(std::vector<int64_t>{2, 3});
          }},
      {"Dropout", [] { return std::make_shared<nn::Dropout>(0.3); }},
      {"DotProductAttention", [] { return std::make_shared<nn::DotProductAttention>(0.1); }},
      {"AdditiveAttention", [] { return std::make_shared<nn::AdditiveAttention>(3, 4, 5, 0.1); }},
      {"MultiHeadAttention",
          [] { return std::make_shared<nn::MultiHeadAttention>(3, 4, 5, 6, 2, 0.1, true); }},
      {"PositionalEncoding", [] { return std::make_shared<nn::PositionalEncoding>(6, 0.1, 20); }},
      {"LearnedPositionalEncoding",
          [] { return std::make_shared<nn::LearnedPositionalEncoding>(6, 0.1, 20); }},
      {"PositionWiseFFN", [] { return std::make_shared<nn::PositionWiseFFN>(4, 8, 4); }},
      {"AddNorm", [] { return std::make_shared<nn::AddNorm>(std::vector<int64_t>{4}, 0.1); }},
      {"TransformerEncoderBlock",
          [] {
            return std::make_shared<nn::TransformerEncoderBlock>(
                4, 4, 4, 4, std::vector<int64_t>{4}, 4, 8, 2, 0.1);
          }},
      {"TransformerEncoder",
          [] {
            return std::make_shared<nn::TransformerEncoder>(
                9, 4, 4, 4, 4, std::vector<int64_t>{4}, 4, 8, 2, 2, 0.1);
          }},
      {"TransformerDecoderBlock",
          [] {
            return std::make_shared<nn::TransformerDecoderBlock>(
                4, 4, 4, 4, std::vector<int64_t>{4}, 4, 8, 2, 0.1, 0);
          }},
      {"EncoderDecoder",
          [] {
            auto enc = std::make_shared<nn::TransformerEncoder>(
                9, 4, 4, 4, 4, std::vector<int64_t>{4}, 4, 8, 2, 2, 0.1);
            auto dec = std::make_shared<nn::TransformerDecoder>(
                9, 4, 4, 4, 4, std::vector<int64_t>{4}, 4, 8, 2, 2, 0.1);
            return std::make_shared<nn::EncoderDecoder>(enc, dec);
          }},
  };
}

}  // namespace

TEST_CASE("every module type round-trips through binary and JSON checkpoints", "[io][checkpoint]") {
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
          if (t.numel() > 0)
            CHECK(t.to_vector<double>() != target->state_dict().at(name).to_vector<double>());
        round_trip(*source, *target, format);
        check_same_state(*source, *target);
      }
    }
  }
}

TEST_CASE("float64 parameters round-trip exactly", "[io][checkpoint]") {
  manual_seed(3);
  nn::Linear a(3, 2), b(3, 2);
  a.to(float64);
  b.to(float64);
  round_trip(a, b, CheckpointFormat::json);
  check_same_state(a, b);
}

TEST_CASE("a loaded model computes what the saved one computed", "[io][checkpoint]") {
  manual_seed(4);
  auto enc = std::make_shared<nn::TransformerEncoder>(
      9, 4, 4, 4, 4, std::vector<int64_t>{4}, 4, 8, 2, 1, 0.0);
  manual_seed(5);
  auto copy = std::make_shared<nn::TransformerEncoder>(
      9, 4, 4, 4, 4, std::vector<int64_t>{4}, 4, 8, 2, 1, 0.0);
  round_trip(*enc, *copy, CheckpointFormat::binary);
  Tensor tokens = tensor({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor lens = tensor({3, 2});
  CHECK(enc->forward(tokens, lens).to_vector<float>() ==
        copy->forward(tokens, lens).to_vector<float>());
}
