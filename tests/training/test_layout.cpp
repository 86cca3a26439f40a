// The run's checkpoint layout (training/layout.h, training/run.h): every entry written is read
// back to the same value, entries out of range are refused with the key named, and a run saved
// with every piece of state resumes with each piece restored; and the command line's options
// (training/cli.h).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <set>

#include "autograd/ops.h"
#include "io/checkpoint.h"
#include "nn/layers.h"
#include "optim/optimizer.h"
#include "optim/schedule.h"
#include "tests/temp_folder.h"
#include "training/cli.h"
#include "training/layout.h"
#include "training/run.h"

using namespace ag;
using Catch::Matchers::Contains;

namespace {

// The largest |a − b| of two tensors of one shape: 0 when they hold the same numbers.
double max_difference(const Tensor& a, const Tensor& b) {
  const Tensor d = a - b;
  return max(d * d).item();
}

struct Settings {
  int64_t count = 7;
  uint64_t seed = 123456789012345ULL;
  double real = 0.25;
  std::string text = "hello";
  std::string choice = "b";
  int64_t rare = 0;  // written only when not 0
  GeneratorState generator{5, 9};
};

void describe(training::Layout& file, Settings& s) {
  file.count("s.count", s.count, 1, 100);
  file.integer("s.seed", s.seed);
  file.real("s.real", s.real, 0.0);
  file.text("s.text", s.text);
  file.choice("s.choice", s.choice, "a|b|c");
  file.count_unless("s.rare", s.rare, 0);
  file.generator("s.generator", s.generator);
}

}  // namespace

TEST_CASE("a Layout reads back what it wrote, entry by entry", "[training][layout]") {
  Settings written;
  written.rare = 3;
  Checkpoint c;
  auto writer = training::Layout::writer(c);
  describe(writer, written);
  CHECK(c.integers.size() == 5);  // count, seed, rare, generator's seed and offset
  CHECK(c.reals.size() == 1);
  CHECK(c.strings.size() == 2);
  Settings read;
  read.count = read.rare = 0;
  read.seed = 0;
  read.real = 0;
  read.text.clear();
  read.choice.clear();
  read.generator = {};
  auto reader = training::Layout::reader(c, "f.agc");
  describe(reader, read);
  CHECK(read.count == 7);
  CHECK(read.seed == written.seed);
  CHECK(read.real == 0.25);
  CHECK(read.text == "hello");
  CHECK(read.choice == "b");
  CHECK(read.rare == 3);
  CHECK(read.generator == GeneratorState{5, 9});
}

TEST_CASE("an entry only some runs have is not written at its absent value, and reads as it",
    "[training][layout]") {
  Settings s;  // rare == 0
  Checkpoint c;
  auto writer = training::Layout::writer(c);
  describe(writer, s);
  CHECK(c.integers.count("s.rare") == 0);
  s.rare = 42;
  auto reader = training::Layout::reader(c, "f.agc");
  describe(reader, s);
  CHECK(s.rare == 0);
}

TEST_CASE("a Layout refuses a value out of its range, naming the file and the key",
    "[training][layout]") {
  Settings s;
  Checkpoint c;
  auto writer = training::Layout::writer(c);
  describe(writer, s);
  auto refused = [&](const std::string& what) {
    Settings read;
    auto reader = training::Layout::reader(c, "f.agc");
    CHECK_THROWS_WITH(describe(reader, read), Contains("checkpoint f.agc") && Contains(what));
  };
  c.integers["s.count"] = 101;
  refused("s.count is 101, outside 1-100");
  c.integers["s.count"] = uint64_t{1} << 63;  // would be negative as int64
  refused("s.count is 9223372036854775808");
  c.integers["s.count"] = 7;
  c.reals["s.real"] = -1;
  refused("s.real is -1");
  c.reals["s.real"] = std::nan("");
  refused("s.real is nan");
  c.reals["s.real"] = 0.5;
  c.strings.insert_or_assign("s.choice", std::string(1, 'z'));  // (GCC 12 -Wrestrict on = "z")
  refused("s.choice is 'z', not one of a|b|c");
  c.strings.erase("s.choice");
  refused("s.choice");  // missing
}

TEST_CASE(
    "a run saved with every piece of state resumes with each piece restored", "[training][run]") {
  ag::testing::TempFolder folder;
  training::RunOptions o;
  o.steps = 10;
  o.warmup = 2;
  o.checkpoint = folder.file("run.agc");
  Settings settings;
  settings.rare = 1;

  manual_seed(3);
  nn::Linear model(4, 3);
  optim::Adam optimizer(model.parameters(), 0.01);
  optim::Scheduler scheduler(optimizer, training::make_schedule(o, 4));
  Generator data(77);
  training::Run run(o, model, optimizer, scheduler, [&](training::Layout& f) {
    training::describe(f, o);
    describe(f, settings);
  });
  run.track([&](training::Layout& f) { f.generator("generator.data", data); });
  run.start(std::nullopt);
  for (int64_t step = 1; step <= 4; ++step) {  // four steps: moments, counts, the schedule move
    optimizer.zero_grad();
    sum(model.forward(randn({2, 4}, data)) * 3.0).backward();
    optimizer.step();
    scheduler.step();
  }
  default_generator().set_state({11, 13});
  run.save(4);

  const Checkpoint c = load_checkpoint(o.checkpoint);
  std::set<std::string> keys;
  for (const auto& [k, v] : c.integers) keys.insert(k);
  for (const auto& [k, v] : c.reals) keys.insert(k);
  for (const auto& [k, v] : c.strings) keys.insert(k);
  for (const std::string key : {"step", "scheduler.step", "generator.default.seed",
           "generator.default.offset", "generator.data.seed", "generator.data.offset",
           "config.steps", "config.batch_size", "config.lr", "config.clip", "config.schedule",
           "config.warmup", "config.seed", "config.threads", "s.count", "s.seed", "s.real",
           "s.text", "s.choice", "s.rare", "s.generator.seed", "s.generator.offset"})
    CHECK(keys.count(key) == 1);
  CHECK(c.tensors.count("model.weight") == 1);
  CHECK(c.tensors.count("model.bias") == 1);

  // A fresh run from other weights and states, resumed from the file.
  training::RunOptions resumed_options = o;
  resumed_options.resume = o.checkpoint;
  manual_seed(99);
  nn::Linear other(4, 3);
  optim::Adam other_optimizer(other.parameters(), 0.01);
  optim::Scheduler other_scheduler(other_optimizer, training::make_schedule(o, 4));
  Generator other_data(1);
  Settings read;
  const std::optional<Checkpoint> resumed = training::open_run(resumed_options);
  REQUIRE(resumed);
  auto reader = training::Layout::reader(*resumed, o.checkpoint);
  training::describe(reader, resumed_options);
  describe(reader, read);
  CHECK(read.rare == 1);
  training::Run again(resumed_options, other, other_optimizer, other_scheduler,
      [&](training::Layout& f) { describe(f, read); });
  again.track([&](training::Layout& f) { f.generator("generator.data", other_data); });
  default_generator().set_state({0, 0});
  again.start(resumed);
  CHECK(again.first_step() == 5);
  CHECK(other_scheduler.current_step() == scheduler.current_step());
  CHECK(default_generator().state() == GeneratorState{11, 13});
  CHECK(other_data.state() == data.state());
  for (const auto& [name, t] : model.state_dict())
    CHECK(max_difference(other.state_dict().at(name), t) == 0);
  const optim::StateDict a = optimizer.state_dict(), b = other_optimizer.state_dict();
  REQUIRE(a.state.size() == b.state.size());
  for (const auto& [index, state] : a.state) {
    CHECK(b.state.at(index).scalars == state.scalars);
    for (const auto& [key, tensor] : state.tensors)
      CHECK(max_difference(b.state.at(index).tensors.at(key), tensor) == 0);
  }
}

TEST_CASE("a run that already finished, or a step counter beyond the run, is refused",
    "[training][run]") {
  ag::testing::TempFolder folder;
  training::RunOptions o;
  o.steps = 4;
  o.warmup = 1;
  o.checkpoint = folder.file("run.agc");
  nn::Linear model(2, 2);
  optim::SGD optimizer(model.parameters(), 0.1);
  optim::Scheduler scheduler(optimizer, training::make_schedule(o, 2));
  training::Run run(
      o, model, optimizer, scheduler, [&](training::Layout& f) { training::describe(f, o); });
  run.start(std::nullopt);
  run.save(4);
  training::RunOptions resume = o;
  resume.resume = o.checkpoint;
  Checkpoint c = *training::open_run(resume);
  training::Run again(resume, model, optimizer, scheduler, [](training::Layout&) {});
  CHECK_THROWS_WITH(again.start(c), Contains("the run already finished (step 4)"));
  c.integers["step"] = ~uint64_t{0};
  CHECK_THROWS_WITH(again.start(c), Contains("step is 18446744073709551615"));
  c.integers["step"] = 1;
  c.integers["scheduler.step"] = 1000000000000;
  CHECK_THROWS_WITH(again.start(c), Contains("scheduler.step is 1000000000000, outside 0-4"));
  c.integers["scheduler.step"] = 1;
  // Weights or moments that are not finite (a run saved after it diverged) are refused by name.
  Checkpoint broken = c;
  broken.tensors["model.weight"] = tensor({0.5, std::nan(""), 1, 2}, {2, 2});
  CHECK_THROWS_AS(again.start(broken), CheckpointError);
  CHECK_THROWS_WITH(again.start(broken),
      Contains("checkpoint " + o.checkpoint + ": tensor weight holds nan (element 1 of 4)"));
  broken = c;
  broken.tensors["optimizer.state.0.exp_avg"] = full({2, 2}, -HUGE_VAL);  // Adam's first moment
  CHECK_THROWS_WITH(
      again.start(broken), Contains(": tensor state.0.exp_avg holds -inf (element 0 of 4)"));
}

// ---- the command line (cli.h) -------------------------------------------------------------------

TEST_CASE("add_invocation_options adds how a run runs and saves, not what defines it",
    "[training][cli]") {
  CLI::App app{"test"};
  training::RunOptions o;
  training::add_invocation_options(app, o);
  for (const char* name : {"--threads", "--checkpoint", "--checkpoint-every", "--checkpoint-format",
           "--keep", "--resume", "--stop-after", "--loss-log", "--oversubscribe",
           "--skip-nonfinite-steps", "--max-memory"}) {
    INFO(name);
    CHECK(app.get_option_no_throw(name) != nullptr);
  }
  // The options that define the run are the program's to name (nanoGPT's --max-iters, …).
  for (const char* name : {"--steps", "--batch-size", "--lr", "--clip", "--schedule", "--warmup",
           "--seed", "--eval-every", "--chunk-rows"}) {
    INFO(name);
    CHECK(app.get_option_no_throw(name) == nullptr);
  }
  std::vector<std::string> args = {"--stop-after", "5", "--resume", "run.agc", "--threads", "2"};
  std::reverse(args.begin(), args.end());  // CLI11 parses a vector from its back
  app.parse(args);
  CHECK(o.stop_after == 5);
  CHECK(o.resume == "run.agc");
  CHECK(o.threads == 2);
  // add_run_options adds both kinds.
  CLI::App all{"test"};
  training::add_run_options(all, o);
  CHECK(all.get_option_no_throw("--steps") != nullptr);
  CHECK(all.get_option_no_throw("--checkpoint") != nullptr);
}
