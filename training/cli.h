// The command line every program shares: the options of a training run, strict whole numbers,
// and main's parse-and-catch block with the exit codes of docs/training.md ("Exit codes"):
//   0 success · 1 a runtime error (the run failed) · 2 a bad option or input · 130 interrupted.
//
//   int main(int argc, char** argv) {
//     CLI::App app{"my-program: what it does"};
//     int64_t width = 32;
//     app.add_option("--width", width, "hidden width")->check(training::whole_number<int64_t>());
//     return training::run_main("my-program", app, argc, argv, [&] { ...; return 0; });
//   }
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "autograd/error.h"
#include "distributed/distributed.h"
#include "io/output_path.h"
#include "training/run.h"

namespace ag::training {

// A bad option or input found after parsing: run_main prints "<program>: <message>" and exits 2.
class UsageError : public ValueError {
 public:
  using ValueError::ValueError;
};

// CLI11 2.1 reads an integer option with strtoll or strtoull: 10^30 becomes 2^63 − 1 without a
// word, -1 for an unsigned option becomes 2^64 − 1, and "010" is read as octal 8. This check sees
// the text first: a decimal whole number that T holds, or the option is refused (exit 2) — no
// leading zero, no "+", no "0x".
template <class T>
CLI::Validator whole_number();

// app.add_option(name, value, help) for a whole number, checked by whole_number<T>, with its
// default shown in --help.
template <class T>
CLI::Option* add_whole_number(
    CLI::App& app, const std::string& name, T& value, const std::string& help) {
  return app.add_option(name, value, help)->check(whole_number<T>())->capture_default_str();
}
// The same, within [min, max] (CLI11's Range, after whole_number's check of the text).
template <class T>
CLI::Option* add_whole_number(
    CLI::App& app, const std::string& name, T& value, const std::string& help, T min, T max) {
  return add_whole_number(app, name, value, help)->check(CLI::Range(min, max));
}

// --max-memory into `value` (a byte size such as 512M or 4G, parsed by ag::parse_byte_size; ""
// when not given): the limit above which a program refuses the `what` ("run", "model") whose
// memory it estimates; without it, the memory available (models/memory_budget.h).
CLI::Option* add_max_memory(CLI::App& app, std::string& value, const std::string& what);

// What the shared options' help says where programs differ.
struct RunHelp {
  std::string batch_size = "examples per step";
  std::string lr = "the optimizer's learning rate";
};

// --steps --batch-size --lr --clip --schedule --warmup --seed --eval-every --chunk-rows (what
// defines the run), then add_invocation_options's, into `o` (its values are the defaults).
void add_run_options(CLI::App& app, RunOptions& o, const RunHelp& help = {});

// --threads --checkpoint --checkpoint-every --checkpoint-format --keep --resume --stop-after
// --loss-log --profile --profile-trace --oversubscribe --skip-nonfinite-steps --max-memory: how
// this invocation runs, saves and reports, into `o`. For a program that names the options defining its run itself
// (examples/nanogpt/ takes nanoGPT's --max-iters, --learning-rate, --grad-clip, …) and fills
// in the rest of RunOptions from them.
void add_invocation_options(CLI::App& app, RunOptions& o);

// Why the shared options cannot run ("" if they can), checked in a fixed order: the schedule,
// the sizes, the numbers, the threads (under mpirun: ranks × threads against the cores), the
// chunks, the checkpoint options, --profile, --max-memory (which sets o.memory_limit) and the
// output paths (--checkpoint, --loss-log, --profile-trace). Fills in --warmup's 0 (min(200, steps / 10), at least 1).
std::string run_options_problem(RunOptions& o);

// Why the output `path` that `option` names cannot be written as `kind` — "<option> <path>:
// <why>" (io/output_path.h's output_file_problem) — or "" if it can or was not asked for ("").
std::string output_problem(const std::string& option, const std::string& path, OutputKind kind);

// The output files a program's options name, each declared once with how it is written: add()
// makes the option, problem() checks every path given before the run starts (nothing created or
// truncated). The paths must outlive it: the program's options.
class OutputFiles {
 public:
  CLI::Option* add(CLI::App& app, const std::string& option, std::string& path, OutputKind kind,
      const std::string& help);
  std::string problem() const;  // the first output_problem, or ""

 private:
  struct Output {
    std::string option;
    const std::string* path;
    OutputKind kind;
  };
  std::vector<Output> outputs_;
};

// What a training program's main does first, before it parses anything: Ctrl-C's policy
// (interrupt.h) before any thread starts, then MPI under mpirun (a world of one otherwise), with
// rank 0 alone printing to the standard output. A failure to start (an MPI that will not
// initialise, a launcher for a build without MPI) prints "<program>: <message>" and exits 1.
//   int main(int argc, char** argv) { const auto mpi = training::start(program, argc, argv); ... }
std::unique_ptr<dist::Environment> start(const std::string& program, int& argc, char**& argv);

// Parses the command line, then runs `body` and returns its exit code. --help prints the usage
// (0); a bad option prints "<program>: <message> (see --help)" (2); a UsageError from `body`
// "<program>: <message>" (2); any other exception "<program>: <message>" (1). Under mpirun a rank
// that fails ends the whole job (dist::abort), and rank 0 alone reports a bad option.
int run_main(const std::string& program, CLI::App& app, int argc, char** argv,
    const std::function<int()>& body);

}  // namespace ag::training
