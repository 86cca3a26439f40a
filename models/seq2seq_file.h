// Model files: a trained seq2seq model with its task and configuration, so that ag-predict can
// rebuild and run it without the training run. Two formats, chosen by the file's extension:
//   PATH.safetensors  the weights under PyTorch's names (what d2l's EncoderDecoder.state_dict()
//                     holds, io/safetensors.h) and the configuration as __metadata__ strings
//                     ("config.task": "reverse", "config.num_hiddens": "32", …) and the
//                     vocabulary, every token in id order ("vocab": "<pad> <bos> <eos> 3 4 …")
//   anything else     ag's checkpoint format (io/checkpoint.h), kind "model"
// A translation model (task "translate") carries its two vocabularies instead of a task's: the
// strings "vocab.source" and "vocab.target" (data::Vocab::serialize()) and "config.num_steps".
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "data/toy_tasks.h"
#include "data/vocab.h"
#include "io/checkpoint.h"
#include "models/memory_budget.h"
#include "models/seq2seq.h"

namespace ag::seq2seq {

// The task and model configuration as checkpoint entries "config.task", "config.num_hiddens", …
// Loading runs check_model_config (models/seq2seq_memory.h), the checks of ag-train's options,
// before anything is built: a CheckpointError names `source` (the file) and the setting.
// positional_tables: whether the file holds the encoder's and decoder's positional-encoding tables
// (ag's checkpoints do; safetensors files, like PyTorch's state dicts, do not), for the check that
// the weights number what the configuration describes.
void save_model_config(Checkpoint& checkpoint, const std::string& task, const ModelConfig& config);
ModelConfig load_model_config(
    const Checkpoint& checkpoint, const std::string& source = "", bool positional_tables = true);

// The name of the translation task in model files and checkpoints ("config.task").
inline constexpr const char* kTranslateTask = "translate";
// What a translation model needs besides its weights: d2l's src_vocab and tgt_vocab, and the
// num_steps its sentences are truncated or padded to (decoding stops after as many tokens).
struct TranslationVocabs {
  data::Vocab source, target;
  int64_t num_steps = 10;
};
void save_translation_vocabs(Checkpoint& checkpoint, const TranslationVocabs& vocabs);
// Strict: a CheckpointError names `source` (the file) for a missing or malformed vocabulary, one
// without <pad> <bos> <eos>, sizes that differ from the configuration's, or a num_steps outside
// 1 to 1000 (the positional table's rows).
TranslationVocabs load_translation_vocabs(
    const Checkpoint& checkpoint, const ModelConfig& config, const std::string& source);

// A model-only file: the model's weights and its configuration — for inference and for sharing.
// In ag's format (kind "model") the parameters and buffers go under "model."; a path ending in
// .safetensors gets the safetensors file described above (`format` then does not apply). Returns
// what the write did besides writing (the stale temporary files it removed).
SaveResult save_model(const std::string& path, const nn::EncoderDecoder& model,
    const std::string& task, const ModelConfig& config,
    CheckpointFormat format = CheckpointFormat::binary,
    const TranslationVocabs* translation = nullptr);  // required for kTranslateTask

struct LoadedModel {
  std::unique_ptr<data::Task> task;  // null for a translation model, which has `translation`
  std::optional<TranslationVocabs> translation;
  ModelConfig config;
  std::shared_ptr<nn::EncoderDecoder> model;
  MemoryEstimate memory;  // what load_model estimated and checked (for limit_cache_to_headroom)
};
// Builds the model a model file or an ag-train checkpoint describes and loads its weights
// (strictly: every name, shape and dtype must match). Before building, the configuration is
// checked (load_model_config) and the memory to decode batch_size sequences is estimated
// (estimate_inference_bytes): above max_bytes (by default available_memory_bytes()) the file is
// refused with a CheckpointError that names it, the setting and the estimate.
LoadedModel load_model(const std::string& path, std::optional<uint64_t> max_bytes = std::nullopt,
    int64_t batch_size = 1);
// The same from a file's bytes in memory; `source` names it and, by its ending (.safetensors),
// gives the format (the fuzzer's way in: tests/fuzz/fuzz_model_file.cpp).
LoadedModel load_model_bytes(std::string_view bytes, const std::string& source,
    std::optional<uint64_t> max_bytes = std::nullopt, int64_t batch_size = 1);

}  // namespace ag::seq2seq
