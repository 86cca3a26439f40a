// ag-predict — loads a trained model and decodes sequences with it (inference only).
//
//   ag-train --save-model reverse.agm        # train, then save the model alone
//   ag-predict reverse.agm "3 9 4 7" "12 5"  # -> 7 4 9 3 / 5 12
//
// The file (a model file, or an ag-train checkpoint) carries the task and the model's
// configuration, so the model is rebuilt exactly and its weights loaded strictly by name.
#include <cstdio>
#include <iostream>

#include "models/model_file.h"
#include "models/seq2seq.h"

int main(int argc, char** argv) {
  if (argc < 3 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h") {
    std::fprintf(argc < 3 ? stderr : stdout,
        "usage: ag-predict MODEL_FILE \"SEQUENCE\" [\"SEQUENCE\" ...]\n");
    return argc < 3 ? 2 : 0;
  }
  try {
    ag::seq2seq::LoadedModel loaded = ag::seq2seq::load_model(argv[1]);
    const ag::data::Task& task = *loaded.task;
    std::vector<ag::data::Example> examples;
    for (int i = 2; i < argc; ++i) examples.push_back({task.vocab().from_text(argv[i]), {}});
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
