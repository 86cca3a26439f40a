#include "models/seq2seq_file.h"

#include <set>
#include <utility>

#include "io/model_file_format.h"
#include "models/seq2seq_memory.h"

namespace ag::seq2seq {

namespace {

// The sizes of a model file's configuration, each named once: save_model_config writes them,
// load_model_config reads them back in this order (bounded by kMaxModelSize), load_model types
// them in a safetensors file's metadata. config.target_vocab_size, which only a translation
// model has, is apart.
struct SizeSetting {
  const char* key;
  int64_t ModelConfig::*size;
};
const SizeSetting kSizes[] = {{"config.vocab_size", &ModelConfig::vocab_size},
    {"config.num_hiddens", &ModelConfig::num_hiddens},
    {"config.ffn_num_hiddens", &ModelConfig::ffn_num_hiddens},
    {"config.num_heads", &ModelConfig::num_heads}, {"config.num_layers", &ModelConfig::num_layers}};

}  // namespace

void save_model_config(Checkpoint& c, const std::string& task, const ModelConfig& config) {
  c.strings["config.task"] = task;
  for (const auto& [key, size] : kSizes) c.integers[key] = static_cast<uint64_t>(config.*size);
  // Only a model with a vocabulary per language has it: the toy tasks' files stay as they were.
  if (config.target_vocab_size != 0)
    c.integers["config.target_vocab_size"] = static_cast<uint64_t>(config.target_vocab_size);
  c.reals["config.dropout"] = config.dropout;
}

ModelConfig load_model_config(
    const Checkpoint& c, const std::string& source, bool positional_tables) {
  const std::string file =
      "checkpoint " + (source.empty() ? std::string("(") + c.kind + ")" : source);
  ModelConfig config;
  // Sizes are u64 in the file: anything above the bound is refused before it becomes an int64.
  auto size = [&](const char* name) {
    const uint64_t v = c.integer(name);
    if (v > static_cast<uint64_t>(kMaxModelSize))
      throw CheckpointError(file + ": " + name + " = " + std::to_string(v) +
                            " is not a model size (1 to " + std::to_string(kMaxModelSize) + ")");
    return static_cast<int64_t>(v);
  };
  for (const auto& [key, size_member] : kSizes) config.*size_member = size(key);
  if (c.integers.count("config.target_vocab_size"))
    config.target_vocab_size = size("config.target_vocab_size");
  config.dropout = c.real("config.dropout");
  try {
    check_model_config(config, SettingNames::checkpoint);
  } catch (const ValueError& e) {
    throw CheckpointError(file + ": " + e.what());
  }
  // The weights must be those of the model the configuration describes — checked by count before
  // anything is built, so that a changed config.num_hiddens cannot make a loader build a model
  // (of gigabytes, perhaps) that the file has no weights for.
  uint64_t numbers = 0;
  for (const auto& [name, tensor] : c.tensors_under("model"))
    numbers += static_cast<uint64_t>(tensor.numel());
  const uint64_t expected =
      positional_tables ? state_dict_numbers(config) : parameter_count(config);
  if (numbers != expected)
    throw CheckpointError(
        file + ": its configuration (config.num_hiddens = " + std::to_string(config.num_hiddens) +
        ", config.ffn_num_hiddens = " + std::to_string(config.ffn_num_hiddens) +
        ", config.num_layers = " + std::to_string(config.num_layers) +
        ", config.vocab_size = " + std::to_string(config.vocab_size) + ") describes a model of " +
        std::to_string(expected) + " numbers, but the file holds " + std::to_string(numbers));
  return config;
}

void save_translation_vocabs(Checkpoint& c, const TranslationVocabs& vocabs) {
  c.strings["vocab.source"] = vocabs.source.serialize();
  c.strings["vocab.target"] = vocabs.target.serialize();
  c.integers["config.num_steps"] = static_cast<uint64_t>(vocabs.num_steps);
}

TranslationVocabs load_translation_vocabs(
    const Checkpoint& c, const ModelConfig& config, const std::string& source) {
  const std::string file = "checkpoint " + source;
  auto vocab = [&](const std::string& name, int64_t size) {
    if (!c.strings.count(name))
      throw CheckpointError(file + ": a translation model without its " + name);
    try {
      data::Vocab v = data::Vocab::deserialize(c.strings.at(name), file + " (" + name + ")", size);
      for (const char* special : {"<pad>", "<bos>", "<eos>"})
        if (!v.contains(special)) throw CheckpointError(file + ": " + name + " has no " + special);
      return v;
    } catch (const ValueError& e) {
      throw CheckpointError(e.what());
    }
  };
  const uint64_t num_steps =
      c.integers.count("config.num_steps") ? c.integer("config.num_steps") : 0;
  if (num_steps < 1 || num_steps > 1000)
    throw CheckpointError(file + ": config.num_steps = " + std::to_string(num_steps) +
                          " is not a number of steps (1 to 1000)");
  return {vocab("vocab.source", config.vocab_size), vocab("vocab.target", config.target_vocab()),
      static_cast<int64_t>(num_steps)};
}

namespace {

// Every token of the task's vocabulary in id order, separated by spaces ("<pad> <bos> <eos> 3 4 …").
std::string vocabulary_text(const data::TaskVocab& vocab) {
  std::string text;
  for (int64_t id = 0; id < vocab.size(); ++id) {
    if (id > 0) text += ' ';
    text += vocab.token(id);
  }
  return text;
}

}  // namespace

SaveResult save_model(const std::string& path, const nn::EncoderDecoder& model,
    const std::string& task, const ModelConfig& config, CheckpointFormat format,
    const TranslationVocabs* translation) {
  Checkpoint c;
  c.kind = "model";
  save_model_config(c, task, config);
  if ((task == kTranslateTask) != (translation != nullptr))
    fail<ValueError>("save_model: task '", task, "' ", translation ? "with" : "without",
        " translation vocabularies");
  if (translation) save_translation_vocabs(c, *translation);
  // A safetensors file carries a toy task's vocabulary too, so that a reader without ag can turn
  // ids into tokens.
  if (!translation && is_safetensors_path(path))
    c.strings["vocab"] = vocabulary_text(data::make_task(task)->vocab());
  return save_model_file(path, model, std::move(c), format);
}

namespace {

// The settings of a model file, by type, as read_model_file and parse_model_file read them.
std::set<std::string> integer_settings() {
  std::set<std::string> integers = {"config.target_vocab_size", "config.num_steps"};
  for (const auto& [key, size] : kSizes) integers.insert(key);
  return integers;
}
const std::set<std::string> kRealSettings = {"config.dropout"};
const std::set<std::string> kStringSettings = {
    "config.task", "vocab", "vocab.source", "vocab.target"};

// load_model and load_model_bytes, once the file is read.
LoadedModel load_model_file(const ModelFile& file, const std::string& path,
    std::optional<uint64_t> max_bytes, int64_t batch_size) {
  const Checkpoint& c = file.entries;
  LoadedModel loaded;
  if (c.strings.count("config.task") && c.string("config.task") == "lm")
    throw CheckpointError("checkpoint " + path +
                          ": holds a language model (ag-train --task lm): ag-generate runs it");
  loaded.config = load_model_config(c, path, /*positional_tables=*/!file.safetensors);
  int64_t source_steps = 0, target_steps = 0;
  if (c.string("config.task") == kTranslateTask) {
    loaded.translation = load_translation_vocabs(c, loaded.config, path);
    source_steps = target_steps = loaded.translation->num_steps;
  } else {
    try {
      loaded.task = data::make_task(c.string("config.task"));
    } catch (const ValueError& e) {  // a file's damage, not a bad option
      throw CheckpointError("checkpoint " + path + ": config.task: " + e.what());
    }
    if (c.strings.count("vocab") && c.strings.at("vocab") != vocabulary_text(loaded.task->vocab()))
      throw CheckpointError("checkpoint " + path + ": its vocabulary \"" + c.strings.at("vocab") +
                            "\" is not task '" + loaded.task->name() + "''s");
    if (loaded.config.vocab_size != loaded.task->vocab().size() ||
        loaded.config.target_vocab_size != 0)
      throw CheckpointError("checkpoint " + path + ": vocabulary of " +
                            std::to_string(loaded.config.vocab_size) + " does not fit task '" +
                            loaded.task->name() + "'");
    source_steps = loaded.task->source_steps();
    target_steps = loaded.task->target_steps();
  }
  // The memory the model takes, checked before a weight is allocated.
  const MemoryEstimate need =
      estimate_inference_bytes(loaded.config, batch_size, source_steps, target_steps);
  try {
    check_memory(need, max_bytes ? *max_bytes : available_memory_bytes(),
        "its model (config.num_hiddens = " + std::to_string(loaded.config.num_hiddens) +
            ", config.ffn_num_hiddens = " + std::to_string(loaded.config.ffn_num_hiddens) +
            ", config.num_layers = " + std::to_string(loaded.config.num_layers) + ")",
        max_bytes ? "allowed (--max-memory)" : "available (--max-memory sets another limit)");
  } catch (const ValueError& e) {
    throw CheckpointError("checkpoint " + path + ": " + e.what());
  }
  loaded.memory = need;
  loaded.model = make_transformer(loaded.config);
  load_model_weights(*loaded.model, file, path);
  loaded.model->eval();
  return loaded;
}

}  // namespace

LoadedModel load_model(
    const std::string& path, std::optional<uint64_t> max_bytes, int64_t batch_size) {
  return load_model_file(read_model_file(path, integer_settings(), kRealSettings, kStringSettings),
      path, max_bytes, batch_size);
}

LoadedModel load_model_bytes(std::string_view bytes, const std::string& source,
    std::optional<uint64_t> max_bytes, int64_t batch_size) {
  return load_model_file(
      parse_model_file(bytes, source, integer_settings(), kRealSettings, kStringSettings), source,
      max_bytes, batch_size);
}

}  // namespace ag::seq2seq
