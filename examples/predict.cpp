// ag-predict — loads a trained model and decodes sequences with it (inference only).
//
//   ag-train --save-model reverse.agm        # train, then save the model alone
//   ag-predict reverse.agm "3 9 4 7" "12 5"  # -> 7 4 9 3 / 5 12
//   ag-predict reverse.agm --help            # the usage, with the tokens this model knows
//   ag-train --task translate --save-model en-lingo.agm
//   ag-predict en-lingo.agm "The big dog sees a cat." --beam 4 --attention-png attention.png
//
// A translation model (ag-train --task translate) reads sentences as d2l's predict_seq2seq does,
// after preprocess_nmt: words it does not know become <unk> (with a warning on stderr), words past
// its num_steps are cut (with a warning). It decodes greedily, or by beam search with --beam K;
// --attention-png draws the encoder–decoder attention of every layer and head of one sentence,
// the source's words across and the decoder's (<bos>, then the translation) down.
//
// The file (a model file, or an ag-train checkpoint) carries the task and the model's
// configuration, so the model is rebuilt exactly and its weights loaded strictly by name.
// Exit codes (docs/training.md): 0 done; 1 the file cannot be loaded (or its model would need
// more memory than is available, or than --max-memory) or decoding fails; 2 a bad option or a
// sequence the task cannot hold (an unknown or special token, none, too many).
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "autograd/error.h"
#include "io/output_path.h"
#include "models/memory_budget.h"
#include "models/seq2seq.h"
#include "models/seq2seq_file.h"
#include "models/seq2seq_translation.h"
#include "training/cli.h"
#include "viz/heatmap.h"

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
      if (loaded.translation)
        return model_path + " translates sentences (a source vocabulary of " +
               std::to_string(loaded.translation->source.size()) + " words, " +
               std::to_string(loaded.translation->num_steps - 1) +
               " words a sentence at most; --attention-png draws one sentence's attention).\n";
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

std::string joined(const std::vector<std::string>& tokens) {
  std::string text;
  for (const std::string& t : tokens) text += (text.empty() ? "" : " ") + t;
  return text;
}

// The encoder–decoder attention of one translation: a panel per layer and head.
void write_translation_attention(const std::string& path, ag::nn::EncoderDecoder& model,
    const ag::seq2seq::TranslationVocabs& vocabs, const ag::seq2seq::SourceSentence& source,
    const std::vector<int64_t>& prediction) {
  const std::vector<ag::Tensor> cross = ag::seq2seq::translation_cross_attention(
      model, source, prediction, vocabs.target.id("<bos>"));  // per layer (H, T, Ts)
  std::vector<std::string> keys, queries{"<bos>"};
  const std::vector<float> ids = source.ids.to_vector<float>();
  for (int64_t k = 0; k < cross[0].size(2); ++k)
    keys.push_back(vocabs.source.token(static_cast<int64_t>(ids[static_cast<std::size_t>(k)])));
  for (int64_t id : prediction) queries.push_back(vocabs.target.token(id));
  std::vector<ag::viz::HeatmapPanel> panels;
  for (std::size_t l = 0; l < cross.size(); ++l)
    for (int64_t h = 0; h < cross[l].size(0); ++h)
      panels.push_back(ag::viz::attention_panel(cross[l].select(0, h),  // (T, Ts) of head h
          "layer " + std::to_string(l) + " head " + std::to_string(h), "source (keys)",
          "decoder input (queries)", queries, keys));
  ag::viz::write_heatmap_grid(path, panels, cross[0].size(0),
      "encoder-decoder attention: " + joined(source.tokens) + " => " +
          joined(vocabs.target.tokens(prediction)));
  std::printf("wrote %s (encoder-decoder attention of every layer and head)\n", path.c_str());
}

// A translation model's run: each sentence prepared as d2l's predict_seq2seq does, decoded
// greedily or by beam search, printed "source words => translation".
int translate(const ag::seq2seq::LoadedModel& loaded, const std::vector<std::string>& sentences,
    int64_t beam, const std::string& attention_png) {
  const ag::seq2seq::TranslationVocabs& vocabs = *loaded.translation;
  std::vector<ag::seq2seq::SourceSentence> sources;
  try {
    if (!attention_png.empty() && sentences.size() != 1)
      throw ag::ValueError("--attention-png draws one sentence's attention, not " +
                           std::to_string(sentences.size()));
    for (const std::string& sentence : sentences) {
      sources.push_back(ag::seq2seq::prepare_source(sentence, vocabs));
      for (const std::string& word : sources.back().unknown)
        std::fprintf(stderr,
            "ag-predict: warning: \"%s\" is not in the model's vocabulary: read "
            "as <unk>\n",
            word.c_str());
      if (sources.back().truncated)
        std::fprintf(stderr,
            "ag-predict: warning: \"%s\" is cut to its first %lld words (the "
            "model's num_steps is %lld)\n",
            sentence.c_str(), static_cast<long long>(vocabs.num_steps - 1),
            static_cast<long long>(vocabs.num_steps));
    }
  } catch (const ag::ValueError& e) {
    throw ag::training::UsageError(e.what());
  }
  const int64_t bos = vocabs.target.id("<bos>"), eos = vocabs.target.id("<eos>");
  for (const ag::seq2seq::SourceSentence& source : sources) {
    std::vector<int64_t> prediction;
    if (beam > 0) {
      ag::seq2seq::BeamOptions options;
      options.beam_size = beam;
      options.max_steps = vocabs.num_steps;
      options.bos = bos;
      options.eos = eos;
      prediction =
          ag::seq2seq::beam_decode(*loaded.model, source.ids, source.valid_len, options)[0].tokens;
    } else {
      prediction = ag::seq2seq::greedy_decode(
          *loaded.model, source.ids, source.valid_len, vocabs.num_steps, bos, eos)[0];
    }
    std::printf("%s => %s\n", joined(source.tokens).c_str(),
        joined(vocabs.target.tokens(prediction)).c_str());
    if (!attention_png.empty())
      write_translation_attention(attention_png, *loaded.model, vocabs, source, prediction);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string model_path;
  std::vector<std::string> sequences;
  std::string max_memory, attention_png;
  int64_t beam = 0;
  CLI::App app{
      "ag-predict: decodes sequences (or translates sentences) with a model saved by "
      "ag-train"};
  app.add_option("MODEL", model_path,
         "a model file (ag-train --save-model, ag's format or .safetensors) or an ag-train "
         "checkpoint")
      ->required();
  app.add_option("SEQUENCE", sequences,
         "a source sequence, its tokens separated by spaces: \"3 9 4 7\"; or, for a translation "
         "model, a sentence: \"The big dog sees a cat.\"")
      ->required();
  ag::training::add_whole_number(
      app, "--beam", beam, "beam search of this width (0: greedy decoding)");
  ag::training::OutputFiles outputs;  // a PNG is written whole and renamed (viz::write_png)
  outputs.add(app, "--attention-png", attention_png, ag::OutputKind::renamed_file,
      "translation models: draw the encoder-decoder attention of the (one) sentence into this "
      "PNG");
  ag::training::add_max_memory(app, max_memory, "model");
  // --help ends with the tokens of MODEL (parsed by then). CLI11 ends a footer function's text
  // with a line break of its own: tokens_help's last one goes.
  app.footer([&] {
    std::string help = tokens_help(model_path);
    help.pop_back();
    return help;
  });
  return ag::training::run_main("ag-predict", app, argc, argv, [&] {
    if (beam < 0 || beam > ag::seq2seq::kMaxBeamSize)
      throw ag::training::UsageError("--beam " + std::to_string(beam) + " is outside 0-" +
                                     std::to_string(ag::seq2seq::kMaxBeamSize));
    std::optional<uint64_t> memory_limit;
    try {
      if (!max_memory.empty()) memory_limit = ag::parse_byte_size(max_memory);
    } catch (const ag::ValueError& e) {
      throw ag::training::UsageError(std::string("--max-memory: ") + e.what());
    }
    if (const std::string why = outputs.problem(); !why.empty())
      throw ag::training::UsageError(why);
    // The model's configuration and memory are checked before it is built
    // (models/seq2seq_file.h), for the sequences it decodes at once: a beam of width k decodes
    // k hypotheses of each. A file that cannot be loaded is exit code 1.
    const int64_t decoded = static_cast<int64_t>(sequences.size()) * std::max<int64_t>(1, beam);
    const ag::seq2seq::LoadedModel loaded =
        ag::seq2seq::load_model(model_path, memory_limit, decoded);
    ag::limit_cache_to_headroom(loaded.memory, memory_limit.value_or(ag::available_memory_bytes()));
    if (loaded.translation) return translate(loaded, sequences, beam, attention_png);
    if (!attention_png.empty())
      throw ag::training::UsageError(
          "--attention-png is for translation models (ag-train --task translate); ag-train "
          "--attention-png draws a toy task's attention");
    const ag::data::Task& task = *loaded.task;

    // Each sequence is checked against the task before anything runs: the message names the
    // sequence and lists the task's tokens.
    std::vector<ag::data::Example> examples;
    try {
      for (const std::string& text : sequences)
        examples.push_back({task.source_from_text(text), {}});
    } catch (const ag::ValueError& e) {
      throw ag::training::UsageError(e.what());
    }
    ag::data::Batch batch =
        ag::data::make_batch(examples, task.source_steps(), task.target_steps());
    std::vector<std::vector<int64_t>> predictions;
    if (beam > 0) {
      ag::seq2seq::BeamOptions options;
      options.beam_size = beam;
      options.max_steps = task.target_steps();
      for (auto& h :
          ag::seq2seq::beam_decode(*loaded.model, batch.source, batch.source_valid_lens, options))
        predictions.push_back(std::move(h.tokens));
    } else {
      predictions = ag::seq2seq::greedy_decode(
          *loaded.model, batch.source, batch.source_valid_lens, task.target_steps());
    }
    for (std::size_t i = 0; i < examples.size(); ++i)
      std::printf("%s -> %s\n", task.vocab().to_text(examples[i].source).c_str(),
          task.vocab().to_text(predictions[i]).c_str());
    return 0;
  });
}
