#include "training/run.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <set>

#include "autograd/generator.h"
#include "distributed/distributed.h"
#include "io/optimizer_state.h"
#include "training/interrupt.h"

namespace ag::training {

void describe(Layout& file, RunOptions& o) {
  file.count("config.steps", o.steps, 1);
  file.count("config.batch_size", o.batch_size, 1);
  file.real("config.lr", o.lr);
  file.real("config.clip", o.clip);
  file.choice("config.schedule", o.schedule, "constant|cosine|noam");
  file.count("config.warmup", o.warmup, 1);
  file.integer("config.seed", o.seed);
  file.count_unless("config.chunk_rows", o.chunk_rows, 0);
  // The sizes that allocate, checked as the command line's are.
  if (const std::string problem = size_problem(o); file.reading() && !problem.empty())
    throw CheckpointError("checkpoint " + file.path() + ": its run is refused: " + problem);
  // This invocation's --threads, whatever the run was saved with: say so when they differ.
  int saved_threads = o.threads;
  file.count("config.threads", saved_threads, 1, std::numeric_limits<int>::max());
  if (file.reading() && saved_threads != o.threads)
    std::printf(
        "note: the run was saved with %d thread(s) and continues with %d; the result may differ "
        "in the last bits from an uninterrupted run\n",
        saved_threads, o.threads);
}

std::string size_problem(const RunOptions& o) {
  if (o.batch_size > kMaxBatchSize)
    return "--batch-size " + std::to_string(o.batch_size) + " is above the largest batch, " +
           std::to_string(kMaxBatchSize);
  return "";
}

CheckpointFormat checkpoint_format(const RunOptions& o) {
  return o.checkpoint_format == "json" ? CheckpointFormat::json : CheckpointFormat::binary;
}

optim::Schedule make_schedule(const RunOptions& o, int64_t d_model, double min_factor) {
  if (o.schedule == "cosine") return optim::cosine_with_warmup(o.warmup, o.steps, min_factor);
  if (o.schedule == "noam")
    return [base = optim::transformer_schedule(d_model, o.warmup), w = o.warmup](
               int64_t t) { return base(t) / base(w); };
  return [](int64_t) { return 1.0; };
}

void print_data_parallel(const RunOptions& o, const char* unit) {
  const int world = dist::world_size();
  if (world > 1) {
    const dist::RowRange rows = dist::rows_of_rank(o.batch_size, 0, world);
    std::printf(
        "data-parallel on %d ranks (mpirun): each takes %lld of the %lld %s of every batch (rank "
        "0: rows %lld-%lld) and the gradients are averaged over the ranks; rank 0 prints, "
        "evaluates and saves\n",
        world, static_cast<long long>(rows.size()), static_cast<long long>(o.batch_size), unit,
        static_cast<long long>(rows.begin), static_cast<long long>(rows.end - 1));
  }
  if (o.chunk_rows > 0)
    std::printf(
        "gradients chunk by chunk (--chunk-rows %lld): %lld chunks of %lld %s a batch, each with "
        "its own forward and backward, added in their order — the same bits on any number of "
        "ranks that hold whole chunks\n",
        static_cast<long long>(o.chunk_rows), static_cast<long long>(o.batch_size / o.chunk_rows),
        static_cast<long long>(o.chunk_rows), unit);
}

std::optional<Checkpoint> open_run(
    const RunOptions& o, const std::string& kind, const std::function<void(Layout&)>& settings) {
  if (o.resume.empty()) return std::nullopt;
  const std::string path = o.resume;     // (settings may write into o)
  Checkpoint c = load_checkpoint(path);  // the whole file is checked before anything is used
  if (c.kind != kind)
    throw CheckpointError("checkpoint " + path + ": holds a '" + c.kind + "', not an " + kind +
                          " run (a model file cannot be resumed)");
  if (settings) {
    Layout file = Layout::reader(c, path);
    settings(file);
  }
  return c;
}

void report_removed(const std::string& program, const std::vector<std::string>& removed) {
  if (removed.empty()) return;
  std::string list;
  for (const std::string& path : removed) list += (list.empty() ? "" : ", ") + path;
  std::fprintf(stderr, "%s: removed %zu temporary file%s left by interrupted saves: %s\n",
      program.c_str(), removed.size(), removed.size() == 1 ? "" : "s", list.c_str());
}

Run::Run(const RunOptions& o, nn::Module& model, optim::Optimizer& optimizer,
    optim::Scheduler& scheduler, std::function<void(Layout&)> settings, std::string program,
    std::string kind)
    : o_(o),
      model_(model),
      optimizer_(optimizer),
      scheduler_(scheduler),
      settings_(std::move(settings)),
      program_(std::move(program)),
      kind_(std::move(kind)) {}

void Run::track(std::function<void(Layout&)> state) { state_.push_back(std::move(state)); }

void Run::start(const std::optional<Checkpoint>& resumed) {
  const int rank = dist::rank(), world = dist::world_size();
  if (resumed) {
    // Everything the next step depends on: weights, the optimizer's moments and step counts, the
    // schedule's position, the dropout generator and the data's position.
    Layout file = Layout::reader(*resumed, o_.resume);
    // Weights or moments that are NaN or infinite would only train NaN: refused, by name.
    check_finite(resumed->tensors_under("model"), "checkpoint " + o_.resume);
    check_finite(resumed->tensors_under("optimizer"), "checkpoint " + o_.resume);
    model_.load_state_dict(resumed->tensors_under("model"));
    optimizer_.load_state_dict(get_optimizer_state(*resumed, "optimizer"));
    int64_t step = 0, scheduler_step = 0;
    file.count("step", step);
    if (step >= o_.steps)
      throw CheckpointError("checkpoint " + o_.resume + ": the run already finished (step " +
                            std::to_string(step) + ")");
    file.count("scheduler.step", scheduler_step, 0, o_.steps);
    scheduler_.set_step(scheduler_step);
    GeneratorState dropout;
    file.generator("generator.default", dropout);
    default_generator().set_state(dropout);
    for (const auto& state : state_) state(file);
    first_step_ = step + 1;
    std::printf("resuming %s at step %lld of %lld\n", o_.resume.c_str(),
        static_cast<long long>(first_step_), static_cast<long long>(o_.steps));
  }
  last_step_ = o_.stop_after > 0 ? std::min(o_.stop_after, o_.steps) : o_.steps;
  if (last_step_ < first_step_)
    throw ValueError("--stop-after " + std::to_string(o_.stop_after) +
                     " is before the resumed run's next step " + std::to_string(first_step_));
  // The dropout generator of this rank: rank 0 keeps the seed's stream; rank r > 0 switches to
  // its own seed (dist::rank_seed) at the same offset, after the model is built (so that every
  // rank initialises the same weights) and after a resume has restored rank 0's state. A
  // checkpoint written with the same world size holds every rank's state and restores it exactly.
  if (world == 1 || rank == 0) return;
  const std::string mine = "generator.default.rank" + std::to_string(rank);
  if (resumed && resumed->integers.count("data_parallel.world_size") &&
      resumed->integer("data_parallel.world_size") == static_cast<uint64_t>(world)) {
    GeneratorState state;
    Layout::reader(*resumed, o_.resume).generator(mine, state);
    default_generator().set_state(state);
    return;
  }
  const GeneratorState state = default_generator().state();
  default_generator().set_state({dist::rank_seed(state.seed, rank), state.offset});
}

bool Run::stop_requested() const { return dist::all_reduce_max(int64_t{interrupted()}) != 0; }

bool Run::save_due(int64_t step, bool stop) const {
  const int64_t every = o_.checkpoint_every > 0 ? o_.checkpoint_every : o_.eval_every;
  return step % every == 0 || step == last_step_ || stop;
}

Checkpoint Run::to_checkpoint(int64_t step) {
  Checkpoint c;
  c.kind = kind_;
  Layout file = Layout::writer(c);
  for (const auto& [name, t] : model_.state_dict()) c.tensors["model." + name] = t;
  put_optimizer_state(c, optimizer_.state_dict(), "optimizer");
  settings_(file);
  file.count("step", step);
  int64_t scheduler_step = scheduler_.current_step();
  file.count("scheduler.step", scheduler_step);
  GeneratorState dropout = default_generator().state();
  file.generator("generator.default", dropout);
  for (const auto& state : state_) state(file);
  // Every rank's dropout generator into rank 0's file (a collective: every rank takes part).
  const int world = dist::world_size();
  if (world > 1) {
    c.integers["data_parallel.world_size"] = static_cast<uint64_t>(world);
    const GeneratorState mine = default_generator().state();
    for (int r = 1; r < world; ++r) {
      // Only rank r contributes, so each sum is rank r's value, exactly (two's complement).
      auto from_rank_r = [&](uint64_t value) {
        return static_cast<uint64_t>(
            dist::all_reduce_sum(dist::rank() == r ? static_cast<int64_t>(value) : int64_t{0}));
      };
      GeneratorState state{from_rank_r(mine.seed), from_rank_r(mine.offset)};
      file.generator("generator.default.rank" + std::to_string(r), state);
    }
  }
  return c;
}

void Run::save(int64_t step) {
  if (o_.checkpoint.empty()) return;
  const Checkpoint c = to_checkpoint(step);
  if (dist::rank() == 0) write(c, step);
  dist::barrier();  // the file is complete before any rank goes on
}

// Writes the run's file to --checkpoint and, with --keep, its numbered copy.
void Run::write(const Checkpoint& c, int64_t step) const {
  const SaveOptions save_options{checkpoint_format(o_), {}};
  report_removed(program_, save_checkpoint(c, o_.checkpoint, save_options).removed_temp_files);
  if (o_.keep == 0) return;
  char suffix[32];
  std::snprintf(suffix, sizeof suffix, ".step-%08lld", static_cast<long long>(step));
  report_removed(
      program_, save_checkpoint(c, o_.checkpoint + suffix, save_options).removed_temp_files);
  namespace fs = std::filesystem;
  const fs::path target(o_.checkpoint);
  const fs::path folder = target.has_parent_path() ? target.parent_path() : fs::path(".");
  const std::string stem = target.filename().string() + ".step-";
  std::vector<fs::path> copies;
  std::set<fs::path> with_temp_files;  // copies whose saves may have been killed
  for (const auto& entry : fs::directory_iterator(folder)) {
    const std::string name = entry.path().filename().string();
    const bool numbered = name.rfind(stem, 0) == 0 && name.size() >= stem.size() + 8 &&
                          name.find_first_not_of("0123456789", stem.size()) >= stem.size() + 8;
    if (numbered && name.size() == stem.size() + 8) copies.push_back(entry.path());
    if (numbered && name.compare(stem.size() + 8, 5, ".tmp-") == 0)
      with_temp_files.insert(folder / name.substr(0, stem.size() + 8));
  }
  // A copy is saved once, so the save to its own path never comes again to clean up after it.
  for (const fs::path& copy : with_temp_files)
    report_removed(program_, remove_stale_temp_files(copy.string()));
  std::sort(copies.begin(), copies.end());
  for (std::size_t i = 0; i + static_cast<std::size_t>(o_.keep) < copies.size(); ++i)
    fs::remove(copies[i]);
}

int Run::interrupted_after(int64_t step) const {
  std::printf("\ninterrupted after step %lld%s\n", static_cast<long long>(step),
      o_.checkpoint.empty() ? " (not saved: no --checkpoint)"
                            : ("; saved " + o_.checkpoint).c_str());
  return 130;
}

bool Run::stopped_early() const {
  if (last_step_ >= o_.steps) return false;
  std::printf("stopped after step %lld of %lld%s\n", static_cast<long long>(last_step_),
      static_cast<long long>(o_.steps),
      o_.checkpoint.empty() ? "" : ("; continue with --resume " + o_.checkpoint).c_str());
  return true;
}

}  // namespace ag::training
