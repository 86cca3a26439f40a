#include "models/model_file.h"

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

ModelConfig load_model_config(const Checkpoint& c) {
  ModelConfig config;
  auto size = [&](const char* name) {
    const uint64_t v = c.integer(name);
    if (v == 0 || v > (1u << 20))
      throw CheckpointError(
          std::string("checkpoint: ") + name + " = " + std::to_string(v) + " is not a model size");
    return static_cast<int64_t>(v);
  };
  config.vocab_size = size("config.vocab_size");
  config.num_hiddens = size("config.num_hiddens");
  config.ffn_num_hiddens = size("config.ffn_num_hiddens");
  config.num_heads = size("config.num_heads");
  config.num_layers = size("config.num_layers");
  config.dropout = c.real("config.dropout");
  if (config.num_hiddens % config.num_heads != 0 || !(config.dropout >= 0 && config.dropout < 1))
    throw CheckpointError("checkpoint: the model configuration is inconsistent");
  return config;
}

void save_model(const std::string& path, const nn::EncoderDecoder& model, const std::string& task,
    const ModelConfig& config, CheckpointFormat format) {
  Checkpoint c;
  c.kind = "model";
  for (const auto& [name, t] : model.state_dict()) c.tensors["model." + name] = t;
  save_model_config(c, task, config);
  save_checkpoint(c, path, {format, {}});
}

LoadedModel load_model(const std::string& path) {
  const Checkpoint c = load_checkpoint(path);
  LoadedModel loaded;
  loaded.task = data::make_task(c.string("config.task"));
  loaded.config = load_model_config(c);
  if (loaded.config.vocab_size != loaded.task->vocab().size())
    throw CheckpointError("checkpoint " + path + ": vocabulary of " +
                          std::to_string(loaded.config.vocab_size) + " does not fit task '" +
                          loaded.task->name() + "'");
  loaded.model = make_transformer(loaded.config);
  loaded.model->load_state_dict(c.tensors_under("model"));
  loaded.model->eval();
  return loaded;
}

}  // namespace ag::seq2seq
