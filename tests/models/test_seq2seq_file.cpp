// Model files (models/seq2seq_file.h): a file's configuration is checked as ag-train's options are,
// and the model's memory estimated, before anything is built — a small file with a valid CRC
// cannot make the loader build a model of gigabytes.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <utility>
#include <vector>

#include "io/file.h"
#include "io/safetensors.h"
#include "models/memory_budget.h"
#include "models/seq2seq_file.h"
#include "models/seq2seq_memory.h"
#include "tests/temp_folder.h"

using namespace ag;
using ag::testing::TempFolder;
using namespace ag::seq2seq;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

// A reverse-task model of width 16 (FFN 32, 2 heads).
ModelConfig small_file_config(int64_t num_layers, double dropout) {
  return {.vocab_size = 20,
      .num_hiddens = 16,
      .ffn_num_hiddens = 32,
      .num_heads = 2,
      .num_layers = num_layers,
      .dropout = dropout};
}

}  // namespace

TEST_CASE("a model file's settings are checked before the model is built", "[models][files]") {
  TempFolder folder;
  const std::string path = (folder.path / "reverse.agm").string();
  const ModelConfig config = small_file_config(/*num_layers=*/1, /*dropout=*/0.0);
  manual_seed(0);
  save_model(path, *make_transformer(config), "reverse", config);
  CHECK(load_model(path).config.num_hiddens == 16);

  // The same file with one setting changed, through the library's own writer (a valid CRC).
  auto damaged = [&](const std::string& key, uint64_t value) {
    Checkpoint c = load_checkpoint(path);
    c.integers[key] = value;
    const std::string out = (folder.path / (key + "-" + std::to_string(value) + ".agm")).string();
    save_checkpoint(c, out);
    return out;
  };
  // The hardening issue's file: 16384 wide would be a model of some 24 GiB; the file's weights
  // are those of a 16-wide one.
  const std::string wide = damaged("config.num_hiddens", 16384);
  CHECK_THROWS_AS(load_model(wide), CheckpointError);
  CHECK_THROWS_WITH(load_model(wide),
      "checkpoint " + wide +
          ": its configuration (config.num_hiddens = 16384, config.ffn_num_hiddens = 32, "
          "config.num_layers = 1, config.vocab_size = 20) describes a model of " +
          std::to_string(state_dict_numbers({.vocab_size = 20,
              .num_hiddens = 16384,
              .ffn_num_hiddens = 32,
              .num_heads = 2,
              .num_layers = 1,
              .dropout = 0})) +
          " numbers, but the file holds " + std::to_string(state_dict_numbers(config)));
  // The checks of ag-train's options, with the file's names for the settings.
  CHECK_THROWS_WITH(load_model(damaged("config.num_hiddens", 0)),
      "checkpoint " + (folder.path / "config.num_hiddens-0.agm").string() +
          ": config.num_hiddens = 0 is not a model size (1 to 1048576)");
  CHECK_THROWS_WITH(load_model(damaged("config.num_layers", uint64_t{1} << 63)),
      Contains(": config.num_layers = 9223372036854775808 is not a model size (1 to 1048576)"));
  CHECK_THROWS_WITH(load_model(damaged("config.num_heads", 3)),
      Contains(": config.num_heads = 3 does not divide config.num_hiddens = 16"));
  // A consistent model that needs more memory than allowed: refused with the estimate.
  const MemoryEstimate need = estimate_inference_bytes(config, 1, 10, 10);
  CHECK_THROWS_WITH(load_model(path, static_cast<uint64_t>(need.total()) - 1),
      "checkpoint " + path +
          ": its model (config.num_hiddens = 16, config.ffn_num_hiddens = 32, config.num_layers "
          "= 1) needs about " +
          need.describe() + ", more than the " + format_bytes(need.total() - 1) +
          " allowed (--max-memory)");
  CHECK_NOTHROW(load_model(path, static_cast<uint64_t>(need.total()) + 1));
}

TEST_CASE("a .safetensors model file: PyTorch's names, the configuration as metadata, checked",
    "[models][files]") {
  TempFolder folder;
  const std::string path = (folder.path / "reverse.safetensors").string();
  const ModelConfig config = small_file_config(/*num_layers=*/2, /*dropout=*/0.1);
  manual_seed(0);
  auto model = make_transformer(config);
  model->eval();
  save_model(path, *model, "reverse", config);

  // The weights under d2l's EncoderDecoder names, no positional tables, the config as strings.
  const Safetensors file = read_safetensors(path);
  CHECK(file.tensors.size() == model->named_parameters().size());
  CHECK(file.at("decoder.blks.1.attention2.W_q.weight").shape() == Shape{16, 16});
  CHECK(file.metadata.at("config.task") == "reverse");
  CHECK(file.metadata.at("config.num_hiddens") == "16");
  CHECK(file.metadata.at("config.dropout") == "0.10000000000000001");
  CHECK(file.metadata.at("format") == "pt");
  CHECK(
      file.metadata.at("vocab") == "<pad> <bos> <eos> 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19");

  // Loaded back, the same model: the same logits, bit for bit.
  const LoadedModel loaded = load_model(path);
  CHECK(loaded.task->name() == "reverse");
  CHECK(loaded.config.num_layers == 2);
  CHECK(loaded.config.dropout == 0.1);
  const Tensor source = tensor({4, 5, 6}, {1, 3}), target = tensor({1, 6, 5}, {1, 3});
  CHECK((*loaded.model)(source, target, tensor({3})).to_vector<float>() ==
        (*model)(source, target, tensor({3})).to_vector<float>());

  // Metadata that is no number, or a configuration the weights do not fit, is refused by name.
  auto rewritten = [&](const std::string& key, const std::string& value) {
    SafetensorsWriteOptions options;
    options.metadata = file.metadata;
    options.metadata[key] = value;
    const std::string out = (folder.path / (key + ".safetensors")).string();
    write_safetensors(out, file.tensors, options);
    return out;
  };
  const std::string words = rewritten("config.num_layers", "two");
  CHECK_THROWS_AS(load_model(words), CheckpointError);
  CHECK_THROWS_WITH(load_model(words), Contains(words) && Contains("config.num_layers = \"two\""));
  const std::string wide = rewritten("config.num_hiddens", "16384");
  CHECK_THROWS_WITH(load_model(wide),
      Contains(wide) && Contains("config.num_hiddens = 16384") && Contains("the file holds"));
  CHECK_THROWS_WITH(load_model(rewritten("config.dropout", "")), Contains("is not a number"));
  CHECK_THROWS_WITH(load_model(rewritten("vocab", "<pad> <bos> <eos> a b")),
      Contains("its vocabulary \"<pad> <bos> <eos> a b\" is not task 'reverse''s"));
}

TEST_CASE(
    "a model file whose weights are not finite is refused, naming the tensor", "[models][files]") {
  // A run that diverged can save NaN weights; loaded, they would decode garbage with exit 0.
  TempFolder folder;
  const ModelConfig config = small_file_config(/*num_layers=*/1, /*dropout=*/0.0);
  manual_seed(0);
  auto model = make_transformer(config);
  const std::string weight = "decoder.blks.0.ffn.dense1.weight";  // (32, 16)
  for (const auto& [value, shown] :
      {std::pair{std::nan(""), "nan"}, std::pair{HUGE_VAL, "inf"}, std::pair{-HUGE_VAL, "-inf"}}) {
    const Tensor w = model->state_dict().at(weight);
    std::vector<double> values;
    for (const float v : w.to_vector<float>()) values.push_back(v);
    values[21] = value;  // element 21: row 1, column 5
    auto state = model->state_dict();
    state[weight] = tensor(values, w.shape());
    auto broken = make_transformer(config);
    broken->load_state_dict(state);
    for (const std::string file : {"broken.agm", "broken.safetensors"}) {
      const std::string path = (folder.path / file).string();
      save_model(path, *broken, "reverse", config);
      CHECK_THROWS_AS(load_model(path), CheckpointError);
      CHECK_THROWS_WITH(load_model(path),
          Contains("model file " + path) &&
              Contains("tensor " + weight + " holds " + shown + " (element 21 of 512)"));
    }
  }
}

TEST_CASE("load_model_bytes loads a file's bytes as load_model loads the file", "[models][files]") {
  TempFolder folder;
  ModelConfig config;
  config.vocab_size = 20;
  config.num_hiddens = config.ffn_num_hiddens = 8;
  config.num_heads = 2;
  config.num_layers = 1;
  manual_seed(0);
  auto model = make_transformer(config);
  for (const std::string name : {"m.agm", "m.safetensors"}) {
    const std::string path = (folder.path / name).string();
    save_model(path, *model, "reverse", config);
    const std::string bytes = read_whole_file(path, "test");
    const LoadedModel from_bytes = load_model_bytes(bytes, path), from_file = load_model(path);
    CHECK(from_bytes.task->name() == "reverse");
    for (const auto& [key, t] : from_file.model->state_dict())
      CHECK(from_bytes.model->state_dict().at(key).to_vector<float>() == t.to_vector<float>());
    CHECK_THROWS_AS(load_model_bytes(bytes.substr(0, bytes.size() / 2), path), CheckpointError);
  }
}
