// How much memory a seq2seq configuration needs, checked before anything is built.
//
// Sizes come from the command line (ag-train's options) and from files (a checkpoint's
// "config.num_hiddens", …). Both go through the same checks before a tensor is allocated: each
// size is bounded first (check_model_config), then the memory the run would take is estimated
// and compared with what the machine has (check_memory, models/memory_budget.h). A width of 20000
// or a batch of 10^8 is refused with the estimate in the message, instead of dying in
// std::bad_alloc or swapping.
//
// The estimate, in bytes (float32, 4 bytes a number; B batch, S source steps, T target steps,
// D width, F FFN width, H heads, L layers, V vocabulary):
//
//   P = 3VD + V + L(12D² + 4DF + 2F + 12D)      parameters, exactly as make_transformer builds:
//                                               two embeddings and the output layer (3VD + V),
//                                               per layer 4 + 8 attention projections D×D, two
//                                               FFNs (2DF + F + D each) and 5 layer norms (2D)
//   weights       4P + 4·2·1000·D               plus the two positional-encoding buffers
//   gradients     4P
//   Adam moments  8P                            exp_avg and exp_avg_sq
//   activations   4 · A(B)                      the numbers a training step holds at its peak:
//     A(B) = B·[ (L + 1)·(S + 2T)·(12D + 2F)    per position and layer (the decoder's positions
//                                               twice: two attentions) 12 vectors of D and 2 of F
//              + 3·L·H·(S² + T² + T·S)          the attention weights of the encoder's self-, the
//                                               decoder's self- and cross-attention, 3 times
//              + 3·T·V ]                        the logits, their softmax and its gradient
//                                               (the forward keeps about half as many; backward's
//                                               gradients, freed as it goes, take the rest)
//   evaluation    2 · A(min(eval_size, 256))    a forward without gradients, in batches of 256
//                 + eval_size·(24(S + T) + 256)  the held-out examples, the training stream's copy
//                                               of their sources, the predictions
//   saving        3 · 12P (with checkpoints)    the archive's buffer, its copy and the file's bytes
//                                               of weights and moments
//
// The constants round up: tests/models/test_memory.cpp checks the estimate against the allocator's
// peak of real training steps and an evaluation (ag-train's default model: about twice the peak;
// the test wants it above the peak and within a factor 4).
// Everything is computed in double, so sizes up to 2^63 cannot overflow the estimate.
#pragma once

#include <cstdint>

#include "models/memory_budget.h"
#include "models/seq2seq.h"

namespace ag::seq2seq {

// Every model size (vocabulary, width, FFN width, heads, layers) must lie in 1..kMaxModelSize.
constexpr int64_t kMaxModelSize = int64_t{1} << 20;

// How a message names a setting: as ag-train's option ("--num-hiddens 0") or as a checkpoint's
// entry ("config.num_hiddens = 0").
enum class SettingNames { options, checkpoint };

// Throws ValueError naming the setting and its value for a size outside 1..kMaxModelSize, heads
// that do not divide the width, or a dropout outside [0, 1). The vocabulary is checked only as a
// checkpoint's (ag-train takes it from the task).
void check_model_config(const ModelConfig& config, SettingNames names);

// The number of parameters make_transformer(config) builds (P above), exactly, and the numbers
// in its state dict: those and the two positional-encoding buffers (1000 × D each).
uint64_t parameter_count(const ModelConfig& config);
uint64_t state_dict_numbers(const ModelConfig& config);

// A training run of ag-train: batches of batch_size, a held-out set of eval_size, checkpoints.
MemoryEstimate estimate_training_bytes(const ModelConfig& config, int64_t batch_size,
    int64_t source_steps, int64_t target_steps, int64_t eval_size, bool checkpoints);
// The memory of a sentence-pairs file of `bytes` bytes and `lines` lines while ag-train --task
// translate reads, tokenizes and batches it, in MemoryEstimate::data, checked before it is parsed:
// 16 bytes a byte and 512 a line (a pair's strings, token vectors and ids). Measured (2026-12-03,
// 24 MB files of 300 000 and 1.7 million pairs): 11.4 bytes a byte and 450 a line.
double estimate_pairs_bytes(uint64_t bytes, uint64_t lines);
// Beam search of beam_size hypotheses (beam_decode, one source sentence at a time), as ag-train's
// evaluations run it after greedy decoding, in MemoryEstimate::evaluation: a decoder forward of
// beam_size rows (estimate_inference_bytes' activations) and the search's ranking of
// beam_size × V extensions (their log-probabilities as floats and doubles, and their order).
// 0 for beam_size 0.
double estimate_beam_search_bytes(
    const ModelConfig& config, int64_t beam_size, int64_t source_steps, int64_t target_steps);
// Decoding batch_size sequences with a loaded model (ag-predict): the weights and a forward.
MemoryEstimate estimate_inference_bytes(
    const ModelConfig& config, int64_t batch_size, int64_t source_steps, int64_t target_steps);

}  // namespace ag::seq2seq
