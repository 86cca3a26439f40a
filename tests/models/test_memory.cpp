// The memory a seq2seq configuration needs (models/seq2seq_memory.h): the parameter count is
// exact, the estimate lies above what a real training step, evaluation and decoding allocate and
// within a small factor of it, sizes are bounded before they are multiplied; and memory sizes
// parse (models/memory_budget.h).
//
// Its own test program: the allocator's peak counts from the start of the process, so the first
// test case below must be the first thing that allocates tensors (ctest runs each case in its own
// process; run by hand, run it alone: ag_models_memory_tests "[peak]").
#include <catch2/catch.hpp>

#include <cmath>
#include <string>

#include "autograd/allocator.h"
#include "models/memory_budget.h"
#include "models/seq2seq.h"
#include "models/seq2seq_memory.h"

using namespace ag;
using namespace ag::seq2seq;
using Catch::Matchers::Contains;

namespace {

// ag-train's default model (examples/train/main.cpp) on the reverse task.
ModelConfig default_model() {
  ModelConfig config;
  config.vocab_size = 20;
  config.num_hiddens = 64;
  config.ffn_num_hiddens = 256;
  config.num_heads = 4;
  config.num_layers = 2;
  config.dropout = 0.0;
  return config;
}

}  // namespace

TEST_CASE("the training estimate lies above a real run's peak, within a factor 4", "[peak]") {
  REQUIRE(allocator_stats().peak_bytes < 4096);  // nothing before this test case
  // ag-train's allocator keeps freed buffers (1 GiB at most); AddressSanitizer builds start
  // without the cache, so it is set here as a program runs with it.
  set_cache_limit(std::size_t{1} << 30);
  manual_seed(0);
  const ModelConfig config = default_model();
  const int64_t batch_size = 64, eval_size = 300;
  auto task = data::make_task("reverse");
  const MemoryEstimate estimate = estimate_training_bytes(
      config, batch_size, task->source_steps(), task->target_steps(), eval_size, false);

  // What ag-train does: the model, Adam, a few steps, an evaluation.
  auto model = make_transformer(config);
  const std::vector<data::Example> held_out = data::held_out_set(*task, eval_size);
  data::TrainingStream stream(*task, held_out, 1);
  optim::Adam adam(model->parameters(), 0.002);
  for (int step = 0; step < 3; ++step)
    train_step(*model, adam,
        data::make_batch(stream.next(batch_size), task->source_steps(), task->target_steps()), 1.0);
  const Evaluation evaluation = evaluate(*model, *task, held_out);
  CHECK(evaluation.predictions.size() == held_out.size());

  const double peak = static_cast<double>(allocator_stats().peak_bytes);
  INFO("estimate " << estimate.describe() << ", allocator peak " << format_bytes(peak));
  CHECK(estimate.total() >= peak);
  CHECK(estimate.total() <= 4 * peak);
  // Weights, gradients and moments are counted exactly: 16 bytes a parameter, plus the buffers.
  CHECK(estimate.weights + estimate.gradients + estimate.optimizer ==
        16.0 * static_cast<double>(model->num_parameters()) + 4.0 * 2 * 1000 * 64);
}

TEST_CASE("the parameter count is make_transformer's, exactly", "[memory]") {
  for (const ModelConfig& config : {default_model(),
           ModelConfig{.vocab_size = 14,
           .num_hiddens = 16,
           .ffn_num_hiddens = 32,
           .num_heads = 2,
           .num_layers = 1,
           .dropout = 0.1},
           ModelConfig{.vocab_size = 20,
           .num_hiddens = 24,
           .ffn_num_hiddens = 40,
           .num_heads = 3,
           .num_layers = 3,
           .dropout = 0.0}}) {
    auto model = make_transformer(config);
    CHECK(parameter_count(config) == static_cast<uint64_t>(model->num_parameters()));
    uint64_t state = 0;
    for (const auto& [name, tensor] : model->state_dict())
      state += static_cast<uint64_t>(tensor.numel());
    CHECK(state_dict_numbers(config) == state);
  }
}

TEST_CASE("estimates grow with the sizes and never overflow", "[memory]") {
  ModelConfig config = default_model();
  const MemoryEstimate base = estimate_training_bytes(config, 64, 10, 10, 500, false);
  // The hardening issue's cases: far above any machine, yet finite numbers.
  const MemoryEstimate huge_batch = estimate_training_bytes(config, 100000000, 10, 10, 500, false);
  CHECK(huge_batch.activations > 1e12);
  config.num_hiddens = 20000;
  const MemoryEstimate wide = estimate_training_bytes(config, 64, 10, 10, 500, false);
  CHECK(wide.weights + wide.gradients + wide.optimizer > 16 * 12 * 2 * 20000.0 * 20000.0);
  CHECK(wide.total() > 100 * base.total());
  // Every size at the bound at once: still a finite number, no wrap-around.
  config = {.vocab_size = kMaxModelSize,
      .num_hiddens = kMaxModelSize,
      .ffn_num_hiddens = kMaxModelSize,
      .num_heads = kMaxModelSize,
      .num_layers = kMaxModelSize,
      .dropout = 0};
  const MemoryEstimate most =
      estimate_training_bytes(config, INT64_MAX, INT64_MAX, INT64_MAX, INT64_MAX, true);
  CHECK(std::isfinite(most.total()));
  CHECK(most.total() > 1e60);
  // With checkpoints, the archive's copies of weights and moments.
  CHECK(estimate_training_bytes(default_model(), 64, 10, 10, 500, true).saving ==
        3 * 12.0 * static_cast<double>(parameter_count(default_model())));
  // Decoding needs the weights and one forward, no gradients or moments.
  const MemoryEstimate decoding = estimate_inference_bytes(default_model(), 1, 10, 10);
  CHECK(decoding.weights == base.weights);
  CHECK(decoding.gradients == 0);
  CHECK(decoding.optimizer == 0);
  CHECK(decoding.total() < base.total());
}

TEST_CASE("check_memory refuses with the estimate in the message", "[memory]") {
  const MemoryEstimate need = estimate_training_bytes(default_model(), 64, 10, 10, 500, false);
  CHECK_NOTHROW(check_memory(need, uint64_t{1} << 30, "this run", "allowed"));
  CHECK_THROWS_AS(check_memory(need, 1 << 20, "this run", "allowed by --max-memory"), ValueError);
  CHECK_THROWS_WITH(check_memory(need, 1 << 20, "this run", "allowed by --max-memory"),
      Contains("this run needs about " + format_bytes(need.total()) + " (weights ") &&
          Contains("activations ") && Contains("), more than the 1 MiB allowed by --max-memory"));
}

TEST_CASE("model settings are bounded and named as options or as checkpoint entries", "[memory]") {
  ModelConfig config = default_model();
  CHECK_NOTHROW(check_model_config(config, SettingNames::options));
  config.num_hiddens = 2000000;
  CHECK_THROWS_WITH(check_model_config(config, SettingNames::options),
      "--num-hiddens 2000000 is not a model size (1 to 1048576)");
  CHECK_THROWS_WITH(check_model_config(config, SettingNames::checkpoint),
      "config.num_hiddens = 2000000 is not a model size (1 to 1048576)");
  config = default_model();
  config.num_layers = 0;
  CHECK_THROWS_WITH(check_model_config(config, SettingNames::options),
      Contains("--layers 0 is not a model size"));
  config = default_model();
  config.num_heads = 5;
  CHECK_THROWS_WITH(check_model_config(config, SettingNames::checkpoint),
      "config.num_heads = 5 does not divide config.num_hiddens = 64");
  config = default_model();
  config.dropout = std::nan("");
  CHECK_THROWS_WITH(check_model_config(config, SettingNames::options),
      "--dropout nan is not a probability in [0, 1)");
  config = default_model();
  config.vocab_size = 0;  // ag-train takes the vocabulary from the task; a file must have one
  CHECK_NOTHROW(check_model_config(config, SettingNames::options));
  CHECK_THROWS_WITH(check_model_config(config, SettingNames::checkpoint),
      Contains("config.vocab_size = 0 is not a model size"));
}

TEST_CASE("memory sizes parse in bytes and powers of 1024", "[memory]") {
  CHECK(parse_byte_size("100000") == 100000);
  CHECK(parse_byte_size("512M") == 512ull << 20);
  CHECK(parse_byte_size("4G") == 4ull << 30);
  CHECK(parse_byte_size("4g") == 4ull << 30);
  CHECK(parse_byte_size("1.5GiB") == 3ull << 29);
  CHECK(parse_byte_size("2KB") == 2048);
  CHECK(parse_byte_size("1T") == 1ull << 40);
  for (const char* bad : {"", "0", "-1G", "G", "4X", "1e9", "nan", "inf", "4 G", "99999999T"})
    CHECK_THROWS_WITH(parse_byte_size(bad),
        "'" + std::string(bad) +
            "' is not a memory size (a positive number of bytes, or with K, M, G or T: 512M, 4G)");
  CHECK(format_bytes(1536) == "1.5 KiB");
  CHECK(format_bytes(100) == "100 bytes");
  CHECK(format_bytes(24.0 * (1ull << 30)) == "24 GiB");
  CHECK(available_memory_bytes() > 0);
}

TEST_CASE("beam search adds its rows and its ranking to an evaluation's memory", "[memory]") {
  const ModelConfig config = default_model();
  CHECK(estimate_beam_search_bytes(config, 0, 10, 10) == 0);
  const double four = estimate_beam_search_bytes(config, 4, 10, 10);
  // A decoder forward of 4 rows, and 4 × V extensions ranked (floats, doubles and their order).
  CHECK(four == estimate_inference_bytes(config, 4, 10, 10).activations +
                    4.0 * static_cast<double>(config.target_vocab()) * 20);
  CHECK(estimate_beam_search_bytes(config, 256, 10, 10) == Approx(64 * four));
}

TEST_CASE("the allocator's cache gets only what the limit leaves above the estimate", "[memory]") {
  const std::size_t before = cache_limit();
  set_cache_limit(std::size_t{1} << 30);
  MemoryEstimate estimate;
  estimate.activations = 100 << 20;
  limit_cache_to_headroom(estimate, uint64_t{150} << 20);
  CHECK(cache_limit() == std::size_t{50} << 20);
  // It never raises the cache's limit, and a limit below the estimate leaves no cache.
  limit_cache_to_headroom(estimate, uint64_t{1} << 40);
  CHECK(cache_limit() == std::size_t{50} << 20);
  limit_cache_to_headroom(estimate, uint64_t{10} << 20);
  CHECK(cache_limit() == 0);
  set_cache_limit(before);
}
