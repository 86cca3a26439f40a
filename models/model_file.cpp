#include "models/model_file.h"

#include <charconv>
#include <cstdio>

#include "io/safetensors.h"
#include "models/memory.h"

namespace ag::seq2seq {

void save_model_config(Checkpoint& c, const std::string& task, const ModelConfig& config) {
  c.strings["config.task"] = task;
  c.integers["config.vocab_size"] = static_cast<uint64_t>(config.vocab_size);
  c.integers["config.num_hiddens"] = static_cast<uint64_t>(config.num_hiddens);
  c.integers["config.ffn_num_hiddens"] = static_cast<uint64_t>(config.ffn_num_hiddens);
  c.integers["config.num_heads"] = static_cast<uint64_t>(config.num_heads);
  c.integers["config.num_layers"] = static_cast<uint64_t>(config.num_layers);
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
  config.vocab_size = size("config.vocab_size");
  config.num_hiddens = size("config.num_hiddens");
  config.ffn_num_hiddens = size("config.ffn_num_hiddens");
  config.num_heads = size("config.num_heads");
  config.num_layers = size("config.num_layers");
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

namespace {

bool is_safetensors(const std::string& path) { return path.ends_with(".safetensors"); }

// The configuration entries of `c` as safetensors metadata strings: integers in decimal, reals
// with the 17 digits that give the same double back.
std::map<std::string, std::string> config_metadata(const Checkpoint& c) {
  std::map<std::string, std::string> metadata = {{"format", "pt"}};
  for (const auto& [name, value] : c.strings) metadata[name] = value;
  for (const auto& [name, value] : c.integers) metadata[name] = std::to_string(value);
  for (const auto& [name, value] : c.reals) {
    char text[32];
    std::snprintf(text, sizeof text, "%.17g", value);
    metadata[name] = text;
  }
  return metadata;
}

// A safetensors model file as the checkpoint load_model_config reads: its metadata back into
// typed entries (strictly: a size must be all digits, the dropout a number), its tensors under
// "model.".
Checkpoint model_checkpoint(const Safetensors& file, const std::string& path) {
  Checkpoint c;
  c.kind = "model";
  for (const auto& [name, value] : file.metadata) {
    if (!name.starts_with("config.")) continue;
    const char* begin = value.data();
    const char* end = begin + value.size();
    if (name == "config.task") {
      c.strings[name] = value;
    } else if (name == "config.dropout") {
      double real = 0;
      const auto [stop, error] = std::from_chars(begin, end, real);
      if (error != std::errc() || stop != end || value.empty())
        throw CheckpointError("checkpoint " + path + ": __metadata__ " + name + " = \"" + value +
                              "\" is not a number");
      c.reals[name] = real;
    } else {
      uint64_t integer = 0;
      const auto [stop, error] = std::from_chars(begin, end, integer);
      if (error != std::errc() || stop != end || value.empty())
        throw CheckpointError("checkpoint " + path + ": __metadata__ " + name + " = \"" + value +
                              "\" is not a whole number");
      c.integers[name] = integer;
    }
  }
  if (file.metadata.count("vocab")) c.strings["vocab"] = file.metadata.at("vocab");
  for (const auto& [name, tensor] : file.tensors) c.tensors["model." + name] = tensor;
  return c;
}

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
    const std::string& task, const ModelConfig& config, CheckpointFormat format) {
  Checkpoint c;
  c.kind = "model";
  save_model_config(c, task, config);
  if (is_safetensors(path)) {
    ModuleFileOptions options;
    options.metadata = config_metadata(c);
    // The vocabulary too, so that a reader without ag can turn ids into tokens.
    options.metadata["vocab"] = vocabulary_text(data::make_task(task)->vocab());
    try {
      return save_safetensors(model, path, options);
    } catch (const CheckpointError&) {
      throw;
    } catch (const IoError& e) {
      throw CheckpointError(e.what());  // a model file's error type, whatever its format
    }
  }
  for (const auto& [name, t] : model.state_dict()) c.tensors["model." + name] = t;
  return save_checkpoint(c, path, {format, {}});
}

LoadedModel load_model(
    const std::string& path, std::optional<uint64_t> max_bytes, int64_t batch_size) {
  const bool safetensors = is_safetensors(path);
  std::optional<Safetensors> file;
  Checkpoint c;
  if (safetensors) {
    try {
      file = read_safetensors(path);
    } catch (const IoError& e) {
      throw CheckpointError(e.what());
    }
    c = model_checkpoint(*file, path);
  } else {
    c = load_checkpoint(path);
  }
  LoadedModel loaded;
  if (c.strings.count("config.task") && c.string("config.task") == "lm")
    throw CheckpointError("checkpoint " + path +
                          ": holds a language model (ag-train --task lm): ag-generate runs it");
  loaded.task = data::make_task(c.string("config.task"));
  loaded.config = load_model_config(c, path, /*positional_tables=*/!safetensors);
  if (c.strings.count("vocab") && c.strings.at("vocab") != vocabulary_text(loaded.task->vocab()))
    throw CheckpointError("checkpoint " + path + ": its vocabulary \"" + c.strings.at("vocab") +
                          "\" is not task '" + loaded.task->name() + "''s");
  if (loaded.config.vocab_size != loaded.task->vocab().size())
    throw CheckpointError("checkpoint " + path + ": vocabulary of " +
                          std::to_string(loaded.config.vocab_size) + " does not fit task '" +
                          loaded.task->name() + "'");
  // The memory the model takes, checked before a weight is allocated.
  const MemoryEstimate need = estimate_inference_bytes(
      loaded.config, batch_size, loaded.task->source_steps(), loaded.task->target_steps());
  try {
    check_memory(need, max_bytes ? *max_bytes : available_memory_bytes(),
        "its model (config.num_hiddens = " + std::to_string(loaded.config.num_hiddens) +
            ", config.ffn_num_hiddens = " + std::to_string(loaded.config.ffn_num_hiddens) +
            ", config.num_layers = " + std::to_string(loaded.config.num_layers) + ")",
        max_bytes ? "allowed (--max-memory)" : "available (--max-memory sets another limit)");
  } catch (const ValueError& e) {
    throw CheckpointError("checkpoint " + path + ": " + e.what());
  }
  loaded.model = make_transformer(loaded.config);
  if (safetensors)
    load_safetensors(*loaded.model, *file, path);  // the positional tables are the model's own
  else
    loaded.model->load_state_dict(c.tensors_under("model"));
  loaded.model->eval();
  return loaded;
}

}  // namespace ag::seq2seq
