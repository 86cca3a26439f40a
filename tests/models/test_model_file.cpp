// Model files (models/model_file.h): a file's configuration is checked as ag-train's options are,
// and the model's memory estimated, before anything is built — a small file with a valid CRC
// cannot make the loader build a model of gigabytes.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <filesystem>

#include "models/memory.h"
#include "models/model_file.h"

using namespace ag;
using namespace ag::seq2seq;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

struct TempFolder {
  fs::path path;
  TempFolder() {
    std::string pattern = (fs::temp_directory_path() / "ag-model-file-XXXXXX").string();
    REQUIRE(::mkdtemp(pattern.data()) != nullptr);
    path = pattern;
  }
  ~TempFolder() { fs::remove_all(path); }
};

}  // namespace

TEST_CASE("a model file's settings are checked before the model is built", "[models][files]") {
  TempFolder folder;
  const std::string path = (folder.path / "reverse.agm").string();
  const ModelConfig config{.vocab_size = 20,
      .num_hiddens = 16,
      .ffn_num_hiddens = 32,
      .num_heads = 2,
      .num_layers = 1,
      .dropout = 0.0};
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
