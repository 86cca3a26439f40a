#include "training/cli.h"

#include <unistd.h>

#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <limits>

#include "autograd/parallel.h"
#include "distributed/distributed.h"
#include "io/output_path.h"
#include "models/memory_budget.h"
#include "models/seq2seq_memory.h"
#include "training/interrupt.h"
#include "training/step.h"

namespace ag::training {

template <class T>
CLI::Validator whole_number() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        const std::size_t first_digit = !text.empty() && text[0] == '-' ? 1 : 0;
        if (first_digit == 1 && std::is_unsigned_v<T>)
          return text + " is out of range (0 to " + std::to_string(std::numeric_limits<T>::max()) +
                 ")";
        T value{};
        const char* end = text.data() + text.size();
        const auto [stop, error] = std::from_chars(text.data(), end, value);
        if (error == std::errc::result_out_of_range)
          return text + " is out of range (" + std::to_string(std::numeric_limits<T>::min()) +
                 " to " + std::to_string(std::numeric_limits<T>::max()) + ")";
        if (error != std::errc() || stop != end ||
            (text.size() > first_digit + 1 && text[first_digit] == '0'))
          return text + " is not a whole number";
        return "";
      },
      "");
}
template CLI::Validator whole_number<int>();
template CLI::Validator whole_number<int64_t>();
template CLI::Validator whole_number<uint64_t>();

CLI::Option* add_max_memory(CLI::App& app, std::string& value, const std::string& what) {
  return app.add_option("--max-memory", value,
      "refuse a " + what +
          " whose estimated memory is above this (512M, 4G; default: the memory available: "
          "MemAvailable of /proc/meminfo, within the cgroup's limit)");
}

void add_run_options(CLI::App& app, RunOptions& o, const RunHelp& help) {
  add_whole_number(app, "--steps", o.steps, "training steps");
  add_whole_number(app, "--batch-size", o.batch_size, help.batch_size);
  app.add_option("--lr", o.lr, help.lr)->capture_default_str();
  app.add_option("--clip", o.clip, "clip the global gradient norm to this")->capture_default_str();
  app.add_option("--schedule", o.schedule,
         "learning-rate schedule: constant | cosine (warm-up, then cosine to 0) | noam")
      ->capture_default_str();
  add_whole_number(app, "--warmup", o.warmup,
      "warm-up steps of the cosine and noam schedules (0: min(200, steps/10))");
  add_whole_number(app, "--seed", o.seed, "seeds initialisation, dropout and the training data");
  add_whole_number(app, "--eval-every", o.eval_every, "evaluate every this many steps");
  app.add_option("--chunk-rows", o.chunk_rows,
         "0: each step's gradient from a rank's rows at once; C > 0: chunk by chunk, each chunk of "
         "C rows with its own forward and backward, the chunks' gradients added in their order, so "
         "that any number of ranks whose rows are whole chunks (and one process) trains the same "
         "model bit for bit with --dropout 0 (slower; docs/distributed.md)")
      ->capture_default_str();
  add_invocation_options(app, o);
}

void add_invocation_options(CLI::App& app, RunOptions& o) {
  add_whole_number(app, "--threads", o.threads,
      "threads of ag's pool, which runs the matrix products and the larger loops "
      "(OpenBLAS itself stays on one)");
  app.add_option("--checkpoint", o.checkpoint,
         "save the run here (atomically) every --checkpoint-every steps and at the end")
      ->type_name("PATH");
  add_whole_number(app, "--checkpoint-every", o.checkpoint_every,
      "steps between checkpoints (0: at each evaluation)");
  app.add_option("--checkpoint-format", o.checkpoint_format, "binary | json")
      ->capture_default_str();
  add_whole_number(app, "--keep", o.keep, "also keep the last K saves as PATH.step-NNNNNNNN");
  app.add_option("--resume", o.resume,
         "continue the run saved in this checkpoint (its settings replace the options "
         "that define a run)")
      ->type_name("PATH");
  add_whole_number(
      app, "--stop-after", o.stop_after, "stop (and save) after this step, to --resume later");
  app.add_option("--loss-log", o.loss_log,
         "write every step's loss to this CSV file, a row as each step ends (appended on --resume)")
      ->type_name("PATH");
  add_whole_number(app, "--profile", o.profile,
      "profile this many steps after a warm-up step and print where their time went, op by op "
      "(torch.profiler's table; docs/profiler.md)");
  app.add_option("--profile-trace", o.profile_trace,
         "with --profile: write the profiled steps' Chrome trace here (chrome://tracing, "
         "ui.perfetto.dev)")
      ->type_name("PATH");
  app.add_flag("--oversubscribe", o.oversubscribe,
      "under mpirun: allow more ranks x --threads on a machine than it has hardware threads "
      "(many times slower, the same numbers: to check 4 or 8 ranks on a small machine)");
  app.add_flag("--skip-nonfinite-steps", o.skip_nonfinite,
      "skip (do not apply) a step whose loss or gradient norm is NaN or infinite, instead of "
      "stopping the run with exit code 1");
  add_max_memory(app, o.max_memory, "run");
}

namespace {

// Why --threads on this many ranks per machine would oversubscribe its cores ("" if it fits).
std::string thread_budget_problem(int threads, bool oversubscribe) {
  try {
    dist::check_thread_budget(threads, oversubscribe);
    return "";
  } catch (const dist::DistributedError& e) {
    return std::string("--threads ") + std::to_string(threads) + " under mpirun: " + e.what();
  }
}

}  // namespace

std::string output_problem(const std::string& option, const std::string& path, OutputKind kind) {
  if (path.empty()) return "";
  const std::string why = output_file_problem(path, kind);
  return why.empty() ? "" : option + " " + path + ": " + why;
}

CLI::Option* OutputFiles::add(CLI::App& app, const std::string& option, std::string& path,
    OutputKind kind, const std::string& help) {
  outputs_.push_back({option, &path, kind});
  return app.add_option(option, path, help)->type_name("PATH");
}

std::string OutputFiles::problem() const {
  for (const Output& output : outputs_)
    if (std::string why = output_problem(output.option, *output.path, output.kind); !why.empty())
      return why;
  return "";
}

std::string run_options_problem(RunOptions& o) {
  std::string problem;
  if (o.steps <= 0)
    problem = "--steps must be positive";
  else if (o.schedule != "constant" && o.schedule != "cosine" && o.schedule != "noam")
    problem = "unknown --schedule '" + o.schedule + "' (known: constant, cosine, noam)";
  else if (o.warmup < 0 || (o.schedule == "cosine" && o.warmup >= o.steps))
    problem = "--warmup must not be negative (and must be below --steps for the cosine schedule)";
  else if (o.batch_size <= 0)
    problem = "--batch-size must be positive";
  else if (const std::string why = size_problem(o); !why.empty())
    problem = why;
  else if (!(o.lr > 0) || !std::isfinite(o.lr))
    problem = "--lr must be a positive number";
  else if (!(o.clip > 0) || !std::isfinite(o.clip))
    problem = "--clip must be a positive number";
  else if (o.threads < 1 || o.threads > max_num_threads())
    problem = "--threads " + std::to_string(o.threads) + " is outside 1-" +
              std::to_string(max_num_threads()) +
              " (at most 4 times this machine's hardware threads, and at least 16)";
  else if (const std::string why = thread_budget_problem(o.threads, o.oversubscribe); !why.empty())
    problem = why;
  else if (o.chunk_rows < 0)
    problem = "--chunk-rows must not be negative";
  else if (const std::string why = chunk_problem(o.batch_size, o.chunk_rows); !why.empty())
    problem = why;
  else if (o.eval_every <= 0)
    problem = "--eval-every must be positive";
  else if (o.checkpoint_every < 0 || o.keep < 0 || o.stop_after < 0)
    problem = "--checkpoint-every, --keep and --stop-after must not be negative";
  else if (o.checkpoint_format != "binary" && o.checkpoint_format != "json")
    problem = "unknown --checkpoint-format '" + o.checkpoint_format + "' (known: binary, json)";
  else if (o.keep > 0 && o.checkpoint.empty())
    problem = "--keep needs --checkpoint";
  else if (o.profile < 0)
    problem = "--profile must not be negative";
  else if (!o.profile_trace.empty() && o.profile == 0)
    problem = "--profile-trace needs --profile N (the steps to profile)";
  if (!problem.empty()) return problem;
  try {
    o.memory_limit =
        o.max_memory.empty() ? available_memory_bytes() : parse_byte_size(o.max_memory);
    o.memory_limit_source = o.max_memory.empty() ? "available (--max-memory sets another limit)"
                                                 : "allowed by --max-memory";
  } catch (const ValueError& e) {
    return (o.max_memory.empty() ? "" : "--max-memory: ") + std::string(e.what());
  }
  // Every output, checked before the run starts (nothing is created or truncated here): a path
  // that cannot be written fails now, not after the training it would have saved.
  if (std::string why = output_problem("--checkpoint", o.checkpoint, OutputKind::renamed_file);
      !why.empty())
    return why;
  if (std::string why = output_problem("--loss-log", o.loss_log, OutputKind::file); !why.empty())
    return why;
  if (std::string why = output_problem("--profile-trace", o.profile_trace, OutputKind::file);
      !why.empty())
    return why;
  if (o.warmup == 0) o.warmup = std::max<int64_t>(1, std::min<int64_t>(200, o.steps / 10));
  return "";
}

namespace {

// A failure's message: on a terminal after a live progress line, on a line of its own.
void print_failure(const std::string& program, const std::string& message) {
  std::fflush(stdout);
  std::cerr << (isatty(STDOUT_FILENO) == 1 ? "\n" : "") << program << ": " << message << "\n";
}

int fail_run(const std::string& program, const std::string& message, int exit_code) {
  if (dist::world_size() > 1) dist::abort(program, message, exit_code);
  print_failure(program, message);
  return exit_code;
}

}  // namespace

std::unique_ptr<dist::Environment> start(const std::string& program, int& argc, char**& argv) {
  catch_interrupts();
  std::unique_ptr<dist::Environment> mpi;
  try {
    mpi = std::make_unique<dist::Environment>(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << program << ": " << e.what() << "\n";
    std::exit(1);
  }
  if (dist::rank() > 0 && !std::freopen("/dev/null", "w", stdout))  // rank 0 alone prints
    std::perror((program + ": silencing the standard output of this rank").c_str());
  return mpi;
}

int run_main(const std::string& program, CLI::App& app, int argc, char** argv,
    const std::function<int()>& body) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // CLI11 checks the required arguments before the unknown ones: `--bogus` alone would say only
    // "MODEL is required". An unknown option is the first thing to tell.
    const std::vector<std::string> unknown = app.remaining();
    if (dist::rank() == 0)
      std::cerr << program << ": "
                << (unknown.empty() ? e.what() : CLI::ExtrasError(unknown).what())
                << " (see --help)\n";
    return 2;
  }
  try {
    return body();
  } catch (const UsageError& e) {
    if (dist::rank() == 0) print_failure(program, e.what());
    return 2;
  } catch (const std::exception& e) {
    return fail_run(program, e.what(), 1);
  }
}

}  // namespace ag::training
