// Language-model files: a trained nn::LanguageModel with its configuration, vocabulary and
// tokenizer, so that ag-generate rebuilds it and decodes without the corpus. As the seq2seq model
// files (models/seq2seq_file.h), two formats chosen by the extension:
//   PATH.safetensors  the weights under their dotted names (no sinusoid table: a non-persistent
//                     buffer), and __metadata__ strings: "config.task": "lm",
//                     "config.vocab_size": "65", "config.num_hiddens", "config.num_heads",
//                     "config.num_layers", "config.ffn_num_hiddens", "config.block_size",
//                     "config.dropout", "config.pre_norm", "config.tie_weights" ("0" or "1"),
//                     "config.positions" ("sinusoidal" | "learned" | "rope" | "alibi" | "none"),
//                     "config.rope_pairs" ("interleaved" | "halves"), "config.rope_base",
//                     "config.num_kv_heads" ("0": as many as heads), "config.norm" ("layer" |
//                     "rms"), "config.ffn" ("relu" | "swiglu"), "tokenizer": "char" | "word", and
//                     "vocab": data::Vocab::serialize()'s text. Files written before positions
//                     had a name hold "config.learned_positions" ("0" | "1") instead, and none of
//                     the settings after it: they load as the sinusoidal or learned model with
//                     LayerNorm, ReLU and every head its own keys they are.
//   anything else     ag's checkpoint format (io/checkpoint.h), kind "model", with the same
//                     entries (integers, reals and strings) and the tensors under "model."
// ag-train's --checkpoint files of --task lm hold the same entries too, so a checkpoint loads as
// a model.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "data/vocab.h"
#include "io/checkpoint.h"
#include "models/lm.h"
#include "models/memory_budget.h"

namespace ag::lm {

// The configuration, tokenizer and vocabulary as checkpoint entries (config.task = "lm").
void save_model_config(Checkpoint& checkpoint, const nn::LanguageModelConfig& config,
    Tokenizer tokenizer, const data::Vocab& vocab);
// Reads them back, checked before anything is built: config.task must be "lm" (a seq2seq model
// file is refused, naming its task), every size bounded (check_config), the vocabulary's size
// config.vocab_size, and the tensors under "model." must number state_dict_numbers(config)
// (parameter_count without positional_tables: safetensors files have no sinusoid table).
// A CheckpointError names `source` and the entry.
struct ModelDescription {
  nn::LanguageModelConfig config;
  Tokenizer tokenizer = Tokenizer::chars;
  data::Vocab vocab = data::Vocab::from_tokens_in_id_order({"<unk>"});
};
ModelDescription load_model_config(
    const Checkpoint& checkpoint, const std::string& source, bool positional_tables = true);

SaveResult save_model(const std::string& path, const nn::LanguageModel& model, Tokenizer tokenizer,
    const data::Vocab& vocab, CheckpointFormat format = CheckpointFormat::binary);

struct LoadedModel {
  ModelDescription description;
  std::shared_ptr<nn::LanguageModel> model;  // in eval mode
  MemoryEstimate memory;  // what load_model estimated and checked (for limit_cache_to_headroom)
};
// Builds the model of a model file (or an ag-train --task lm checkpoint) and loads its weights
// strictly. Before building: load_model_config's checks and the memory estimate of generation
// (estimate_inference_bytes) against max_bytes (default: available_memory_bytes()).
LoadedModel load_model(const std::string& path, std::optional<uint64_t> max_bytes = std::nullopt);
// The same from a file's bytes in memory; `source` names it and, by its ending (.safetensors),
// gives the format (the fuzzer's way in: tests/fuzz/fuzz_model_file.cpp).
LoadedModel load_model_bytes(std::string_view bytes, const std::string& source,
    std::optional<uint64_t> max_bytes = std::nullopt);

// The memory of a training run (batches of batch_size × block_size, evaluations in batches of
// eval_batch) and of generation, in the parts of MemoryEstimate (models/memory_budget.h), with
// the same rounding up: P = parameter_count, N = B·T positions,
//   weights 4·state_dict_numbers, gradients 4P, AdamW moments 8P,
//   activations 4·N·[L·(12D + 2F + 3H·T) + 3V]  (per position and block 12 vectors of D, 2 of F
//                                                — 3 with SwiGLU —, the attention weights 3 times;
//                                                the logits, their softmax and gradient)
//   evaluation  2 · activations at eval_batch, saving 3·12P with checkpoints.
MemoryEstimate estimate_training_bytes(const nn::LanguageModelConfig& config, int64_t batch_size,
    int64_t eval_batch, bool checkpoints);
MemoryEstimate estimate_inference_bytes(const nn::LanguageModelConfig& config);
// Sampling `length` tokens and making them text (lm::generate, detokenize), as ag-train's
// evaluations do, in MemoryEstimate::evaluation: a forward of one window, and per token its id
// twice (the context and the sample), its string and its text — at most the vocabulary's longest
// token.
double estimate_sampling_bytes(
    const nn::LanguageModelConfig& config, int64_t length, const data::Vocab& vocab);

// The memory of a text of `text_bytes` bytes while ag-train --task lm reads and tokenizes it (the
// text, its split and its ids; for words the tokens too), in MemoryEstimate::data, checked before
// it is tokenized: 12 bytes a byte for characters (the ids are 8 a character), 16 for words.
// Measured (2026-12-03, a 30 MB text): peaks of 10 and 14 bytes a byte above the program's own.
double estimate_text_bytes(uint64_t text_bytes, Tokenizer tokenizer);

}  // namespace ag::lm
