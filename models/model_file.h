// Model files: a trained seq2seq model with its task and configuration, in ag's checkpoint format
// (io/checkpoint.h), so that ag-predict can rebuild and run it without the training run.
#pragma once

#include <memory>
#include <string>

#include "data/toy_tasks.h"
#include "io/checkpoint.h"
#include "models/seq2seq.h"

namespace ag::seq2seq {

// The task and model configuration as checkpoint entries "config.task", "config.num_hiddens", …
void save_model_config(Checkpoint& checkpoint, const std::string& task, const ModelConfig& config);
ModelConfig load_model_config(const Checkpoint& checkpoint);

// A model-only file (kind "model"): the model's parameters and buffers under "model." and its
// configuration — for inference and for sharing.
void save_model(const std::string& path, const nn::EncoderDecoder& model, const std::string& task,
    const ModelConfig& config, CheckpointFormat format = CheckpointFormat::binary);

struct LoadedModel {
  std::unique_ptr<data::Task> task;
  ModelConfig config;
  std::shared_ptr<nn::EncoderDecoder> model;
};
// Builds the model a model file or an ag-train checkpoint describes and loads its weights
// (strictly: every name, shape and dtype must match).
LoadedModel load_model(const std::string& path);

}  // namespace ag::seq2seq
