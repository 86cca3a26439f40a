// A module's state in a safetensors file: PyTorch's names, parameters and persistent buffers
// only, strict loads that change nothing unless everything fits, and d2l's block names.
#include <catch2/catch.hpp>

#include "autograd/ops.h"
#include "io/safetensors.h"
#include "nn/transformer.h"
#include "tests/temp_folder.h"

using namespace ag;
using ag::testing::TempFolder;
using Catch::Matchers::Contains;

namespace {

std::shared_ptr<nn::EncoderDecoder> transformer(uint64_t seed) {
  manual_seed(seed);
  auto encoder = std::make_shared<nn::TransformerEncoder>(
      11, 8, 8, 8, 8, std::vector<int64_t>{8}, 8, 16, 2, 2, 0.0);
  auto decoder = std::make_shared<nn::TransformerDecoder>(
      11, 8, 8, 8, 8, std::vector<int64_t>{8}, 8, 16, 2, 2, 0.0);
  auto model = std::make_shared<nn::EncoderDecoder>(encoder, decoder);
  model->eval();
  return model;
}

Tensor run(nn::EncoderDecoder& model) {
  const Tensor source = tensor({1, 4, 2, 7, 3, 3}, {2, 3}), target = tensor({2, 5, 9, 1}, {2, 2});
  return model(source, target, tensor({3, 2}));  // (2, 2, 11)
}

}  // namespace

TEST_CASE("module safetensors: a Transformer saved and loaded computes the same, bit for bit",
    "[io][safetensors]") {
  TempFolder dir;
  auto saved = transformer(1), loaded = transformer(2);
  REQUIRE(run(*saved).to_vector<float>() != run(*loaded).to_vector<float>());
  ModuleFileOptions options;
  options.metadata = {{"config", "tiny"}};
  save_safetensors(*saved, dir.file("m.safetensors"), options);

  // The file holds the parameters under their dotted names, and no positional table.
  const Safetensors file = read_safetensors(dir.file("m.safetensors"));
  CHECK(file.tensors.size() == saved->named_parameters().size());
  CHECK(file.at("encoder.blks.1.attention.W_q.weight").shape() == Shape{8, 8});
  for (const auto& [name, tensor] : file.tensors)
    CHECK(name.find("pos_encoding.P") == std::string::npos);

  std::map<std::string, std::string> metadata;
  CHECK(load_safetensors(*loaded, dir.file("m.safetensors"), {}, &metadata).empty());
  CHECK(metadata.at("config") == "tiny");
  CHECK(run(*loaded).to_vector<float>() == run(*saved).to_vector<float>());
}

TEST_CASE("module safetensors: a strict load that does not fit changes nothing and says why",
    "[io][safetensors]") {
  TempFolder dir;
  auto model = transformer(3);
  const std::vector<float> before = run(*model).to_vector<float>();
  Generator gen(4);
  write_safetensors(dir.file("partial.safetensors"),
      {{"encoder.embedding.weight", randn({11, 8}, gen)}, {"extra.weight", randn({2}, gen)}});
  CHECK_THROWS_AS(load_safetensors(*model, dir.file("partial.safetensors")), nn::StateDictError);
  CHECK_THROWS_WITH(load_safetensors(*model, dir.file("partial.safetensors")),
      Contains(dir.file("partial.safetensors")) && Contains("decoder.dense.bias") &&
          Contains("extra.weight"));
  CHECK(run(*model).to_vector<float>() == before);  // nothing was loaded

  ModuleFileOptions lenient;
  lenient.strict = false;
  const std::vector<std::string> problems =
      load_safetensors(*model, dir.file("partial.safetensors"), lenient);
  CHECK_FALSE(problems.empty());
  CHECK(run(*model).to_vector<float>() != before);  // the embedding was loaded

  // A positional table in the file is refused: the module computes it.
  write_safetensors(
      dir.file("with_P.safetensors"), {{"encoder.pos_encoding.P", zeros({1, 1000, 8})}});
  CHECK_THROWS_WITH(load_safetensors(*model, dir.file("with_P.safetensors"), lenient),
      Contains("encoder.pos_encoding.P") && Contains("not persistent"));
}

TEST_CASE("module safetensors: d2l's block names map to ag's and back", "[io][safetensors]") {
  CHECK(d2l_name("encoder.blks.0.attention.W_q.weight") ==
        "encoder.blks.block0.attention.W_q.weight");
  CHECK(d2l_name("decoder.blks.12.addnorm3.ln.bias") == "decoder.blks.block12.addnorm3.ln.bias");
  CHECK(d2l_name("blks.1.ffn.dense1.weight") == "blks.block1.ffn.dense1.weight");
  CHECK(d2l_name("decoder.dense.weight") == "decoder.dense.weight");
  CHECK(from_d2l_name("encoder.blks.block3.ffn.dense2.bias") == "encoder.blks.3.ffn.dense2.bias");
  CHECK(from_d2l_name("myblks.block3.x") == "myblks.block3.x");  // only a whole "blks" segment

  TempFolder dir;
  auto saved = transformer(5), loaded = transformer(6);
  ModuleFileOptions to_d2l, from_d2l;
  to_d2l.rename = d2l_name;
  from_d2l.rename = from_d2l_name;
  save_safetensors(*saved, dir.file("d2l.safetensors"), to_d2l);
  CHECK(read_safetensors(dir.file("d2l.safetensors"))
            .at("decoder.blks.block1.attention2.W_o.weight")
            .shape() == Shape{8, 8});
  CHECK_THROWS_AS(load_safetensors(*loaded, dir.file("d2l.safetensors")), nn::StateDictError);
  load_safetensors(*loaded, dir.file("d2l.safetensors"), from_d2l);
  CHECK(run(*loaded).to_vector<float>() == run(*saved).to_vector<float>());
}

TEST_CASE("module safetensors: a tied weight is saved once and loads tied", "[io][safetensors]") {
  // nanoGPT's tying: the output layer's weight is the token table.
  struct Tied : nn::Module {
    std::shared_ptr<nn::Embedding> wte =
        register_module("wte", std::make_shared<nn::Embedding>(5, 3));
    std::shared_ptr<nn::Linear> lm_head =
        register_module("lm_head", std::make_shared<nn::Linear>(3, 5, false));
    Tied() { lm_head->weight = wte->weight; }
    std::string type_name() const override { return "Tied"; }
  };
  TempFolder dir;
  manual_seed(1);
  Tied saved;
  save_safetensors(saved, dir.file("tied.safetensors"));
  const Safetensors file = read_safetensors(dir.file("tied.safetensors"));
  CHECK(file.tensors.size() == 1);  // under its first name, as safetensors' save_model
  CHECK(file.tensors[0].first == "wte.weight");
  manual_seed(2);
  Tied loaded;
  CHECK(load_safetensors(loaded, dir.file("tied.safetensors")).empty());
  CHECK(loaded.lm_head->weight.to_vector<float>() == saved.wte->weight.to_vector<float>());
  CHECK(loaded.lm_head->weight.is_same(loaded.wte->weight));  // still one tensor
}

namespace {
// A module with a float parameter and int64 and bool buffers (a step count, a mask), as PyTorch
// modules hold torch.long and torch.bool buffers (BatchNorm's num_batches_tracked, a causal mask).
struct Counted : nn::Module {
  Tensor& weight;
  Tensor& steps;
  Tensor& mask;
  Counted()
      : weight(register_parameter("weight", zeros({3}))),
        steps(register_buffer("steps", tensor(std::vector<int64_t>{0}, {1}))),
        mask(register_buffer("mask", tensor(std::vector<bool>{false, false}, {2}))) {}
  std::string type_name() const override { return "Counted"; }
};
}  // namespace

TEST_CASE("module safetensors: int64 and bool buffers load as they are, float entries exactly",
    "[io][safetensors]") {
  TempFolder dir;
  const std::string path = dir.file("counted.safetensors");
  Counted saved;
  {
    NoGradGuard no_grad;
    saved.weight.copy_(tensor({0.5, -1, 2}));
  }
  saved.steps.copy_(tensor(std::vector<int64_t>{(int64_t{1} << 53) + 1}, {1}));
  saved.mask.copy_(tensor(std::vector<bool>{true, false}, {2}));
  save_safetensors(saved, path);
  const Safetensors file = read_safetensors(path);
  CHECK(file.at("steps").dtype() == int64);
  CHECK(file.at("mask").dtype() == bool_);

  Counted loaded;
  CHECK(load_safetensors(loaded, path).empty());
  CHECK(loaded.weight.to_vector<float>() == std::vector<float>{0.5f, -1, 2});
  CHECK(loaded.steps.dtype() == int64);
  CHECK(loaded.steps.to_vector<int64_t>() == std::vector<int64_t>{(int64_t{1} << 53) + 1});
  CHECK(loaded.mask.to_vector<bool>() == std::vector<bool>{true, false});

  // Whole-number weights stored as I64 (as int64_names wrote them) load into the float
  // parameter exactly; a float file of whole numbers loads into the int64 and bool buffers.
  write_safetensors(path, {{"weight", tensor(std::vector<int64_t>{4, -5, 16777216})},
                              {"steps", tensor({7.0})}, {"mask", tensor({0.0, 1.0})}});
  CHECK(load_safetensors(loaded, path).empty());
  CHECK(loaded.weight.dtype() == float32);
  CHECK(loaded.weight.to_vector<float>() == std::vector<float>{4, -5, 16777216});
  CHECK(loaded.steps.to_vector<int64_t>() == std::vector<int64_t>{7});
  CHECK(loaded.mask.to_vector<bool>() == std::vector<bool>{false, true});

  // A value that would change is refused, naming the entry and the value, and nothing loads.
  write_safetensors(path, {{"weight", tensor(std::vector<int64_t>{1, 16777217, 0})},
                              {"steps", tensor({2.5})}, {"mask", tensor({0.0, 2.0})}});
  CHECK_THROWS_AS(load_safetensors(loaded, path), nn::StateDictError);
  CHECK_THROWS_WITH(load_safetensors(loaded, path),
      Contains(path) &&
          Contains("dtype mismatch weight: file int64, model float32 (element 1 is 16777217, "
                   "which float32 cannot hold exactly)") &&
          Contains("dtype mismatch steps: file float32, model int64 (element 0 is 2.5") &&
          Contains("dtype mismatch mask: file float32, model bool (element 1 is 2, which bool "
                   "cannot hold (0 or 1))"));
  CHECK(loaded.weight.to_vector<float>() == std::vector<float>{4, -5, 16777216});
  CHECK(loaded.steps.to_vector<int64_t>() == std::vector<int64_t>{7});
  // float32 and float64 still do not mix.
  write_safetensors(
      path, {{"weight", zeros({3}, float64)}, {"steps", loaded.steps}, {"mask", loaded.mask}});
  CHECK_THROWS_WITH(load_safetensors(loaded, path),
      Contains("dtype mismatch weight: file float64, model float32"));
}
