// ag-predict — loads a trained model and decodes sequences with it (inference only).
//
//   ag-train --save-model reverse.agm        # train, then save the model alone
//   ag-predict reverse.agm "3 9 4 7" "12 5"  # -> 7 4 9 3 / 5 12
//   ag-predict reverse.agm --help            # the usage, with the tokens this model knows
//
// The file (a model file, or an ag-train checkpoint) carries the task and the model's
// configuration, so the model is rebuilt exactly and its weights loaded strictly by name.
// Exit codes (docs/training.md): 0 done; 1 the file cannot be loaded (or its model would need
// more memory than is available, or than --max-memory) or decoding fails; 2 a bad option or a
// sequence the task cannot hold (an unknown or special token, none, too many).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "autograd/error.h"
#include "models/memory.h"
#include "models/model_file.h"
#include "models/seq2seq.h"

namespace {

// "3 4 5 … 19": a task's content tokens, as a sequence is written.
std::string token_list(const ag::data::Task& task) {
  std::string list;
  for (const std::string& token : task.vocab().content_tokens())
    list += (list.empty() ? "" : " ") + token;
  return list;
}

// What --help says about the tokens. They belong to the task the model was trained on, so with a
// MODEL it loads the model and lists its task's tokens; without one it lists every task's.
std::string tokens_help(const std::string& model_path) {
  std::string help;
  if (!model_path.empty()) {
    try {
      const ag::seq2seq::LoadedModel loaded = ag::seq2seq::load_model(model_path);
      return "The tokens of " + model_path + " (task " + loaded.task->name() + "), at most " +
             std::to_string(loaded.task->max_source_len()) + " in a sequence:\n  " +
             token_list(*loaded.task) + "\n";
    } catch (const std::exception& e) {
      help = "(" + model_path + " cannot be loaded: " + e.what() + ")\n";
    }
  }
  help +=
      "A SEQUENCE holds tokens of the task the model was trained on (ag-train --task).\n"
      "Give MODEL with --help to list its tokens. The tasks' tokens:\n";
  for (const std::string& name : ag::data::task_names()) {
    const std::unique_ptr<ag::data::Task> task = ag::data::make_task(name);
    help += "  " + name + ": " + token_list(*task) + " (at most " +
            std::to_string(task->max_source_len()) + " in a sequence)\n";
  }
  return help;
}

}  // namespace

int main(int argc, char** argv) {
  std::string model_path;
  std::vector<std::string> sequences;
  std::string max_memory;
  CLI::App app{"ag-predict: decodes sequences greedily with a model saved by ag-train"};
  app.add_option("MODEL", model_path,
         "a model file (ag-train --save-model, ag's format or .safetensors) or an ag-train "
         "checkpoint")
      ->required();
  app.add_option(
         "SEQUENCE", sequences, "a source sequence, its tokens separated by spaces: \"3 9 4 7\"")
      ->required();
  app.add_option("--max-memory", max_memory,
      "refuse a model whose estimated memory is above this (512M, 4G; default: the memory "
      "available: MemAvailable of /proc/meminfo, within the cgroup's limit)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    app.footer(tokens_help(model_path));
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // CLI11 checks the required arguments before the unknown ones: `ag-predict --bogus` would
    // say only "MODEL is required". An unknown option is the first thing to tell.
    const std::vector<std::string> unknown = app.remaining();
    std::cerr << "ag-predict: " << (unknown.empty() ? e.what() : CLI::ExtrasError(unknown).what())
              << " (see --help)\n";
    return 2;
  }

  std::optional<uint64_t> memory_limit;
  try {
    if (!max_memory.empty()) memory_limit = ag::seq2seq::parse_byte_size(max_memory);
  } catch (const ag::ValueError& e) {
    std::cerr << "ag-predict: --max-memory: " << e.what() << "\n";
    return 2;
  }
  ag::seq2seq::LoadedModel loaded;
  try {
    // The model's configuration and memory are checked before it is built (model_file.h).
    loaded =
        ag::seq2seq::load_model(model_path, memory_limit, static_cast<int64_t>(sequences.size()));
  } catch (const std::exception& e) {
    std::cerr << "ag-predict: " << e.what() << "\n";
    return 1;
  }
  const ag::data::Task& task = *loaded.task;

  // Each sequence is checked against the task before anything runs: the message names the
  // sequence and lists the task's tokens.
  std::vector<ag::data::Example> examples;
  try {
    for (const std::string& text : sequences) examples.push_back({task.source_from_text(text), {}});
  } catch (const ag::ValueError& e) {
    std::cerr << "ag-predict: " << e.what() << "\n";
    return 2;
  }

  try {
    ag::data::Batch batch =
        ag::data::make_batch(examples, task.source_steps(), task.target_steps());
    auto predictions = ag::seq2seq::greedy_decode(
        *loaded.model, batch.source, batch.source_valid_lens, task.target_steps());
    for (std::size_t i = 0; i < examples.size(); ++i)
      std::printf("%s -> %s\n", task.vocab().to_text(examples[i].source).c_str(),
          task.vocab().to_text(predictions[i]).c_str());
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "ag-predict: " << e.what() << "\n";
    return 1;
  }
}
