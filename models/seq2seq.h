// d2l's Transformer as a sequence-to-sequence model of the toy tasks: the model builder, the loss
// of a batch with teacher forcing, one training step, greedy decoding with the key/value cache, and
// evaluation — what ag-train, ag-predict, the benchmarks and the tests share (d2l keeps the same
// helpers in d2l/torch.py: train_seq2seq, predict_seq2seq).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "data/batch.h"
#include "data/toy_tasks.h"
#include "nn/nn.h"
#include "optim/optimizer.h"

namespace ag::seq2seq {

struct ModelConfig {
  int64_t vocab_size = 20;
  int64_t num_hiddens = 32, ffn_num_hiddens = 64, num_heads = 4, num_layers = 2;
  double dropout = 0.1;
};
// The d2l Transformer (encoder and decoder of num_layers blocks each), with every Linear weight
// re-initialised by Xavier-uniform as d2l's train_seq2seq does. Uses the default generator.
std::shared_ptr<nn::EncoderDecoder> make_transformer(const ModelConfig& config);

// The loss of a batch with teacher forcing, as d2l's train_seq2seq: the decoder reads <bos> and
// the target, and the masked cross-entropy is averaged over the valid label tokens. A scalar ().
Tensor sequence_loss(nn::EncoderDecoder& model, const data::Batch& batch);

// One training step with teacher forcing: forward, the masked cross-entropy per valid token,
// backward, clipping of the global gradient norm at `clip`, and the optimizer's update. Returns the
// loss before the update.
double train_step(
    nn::EncoderDecoder& model, optim::Optimizer& optimizer, const data::Batch& batch, double clip);

// Greedy decoding of a batch of sources, one token per step with the decoder's key/value cache,
// in eval mode without recording a graph. Each prediction stops before the first <eos> (or after
// max_steps tokens).
std::vector<std::vector<int64_t>> greedy_decode(nn::EncoderDecoder& model, const Tensor& source,
    const Tensor& source_valid_lens, int64_t max_steps);

// Greedy decoding of one source with every attention weight kept, for pictures. The steps run as in
// greedy_decode (one token per step with the key/value cache, eval mode, no graph); after each step
// the decoder's weights — one query row per step, (1, H, 1, keys) — are copied into the full
// matrices below. The source is not padded: Ts = its length + 1 (<eos>).
struct DecodedAttention {
  std::vector<int64_t> source;  // (Ts): the content tokens, then <eos>
  std::vector<int64_t>
      decoder_input;  // (T): <bos>, then each predicted token fed back — one per step
  std::vector<int64_t> prediction;   // the decoded tokens before <eos>
  std::vector<Tensor> encoder;       // per layer (H, Ts, Ts): encoder self-attention
  std::vector<Tensor> decoder_self;  // per layer (H, T, T): causal, 0 above the diagonal
  std::vector<Tensor> cross;         // per layer (H, T, Ts): decoder queries over encoder keys
};
// Throws ValueError for an empty source or max_steps < 1.
DecodedAttention decode_with_attention(
    nn::EncoderDecoder& model, const std::vector<int64_t>& source, int64_t max_steps);

struct Evaluation {
  double loss = 0;               // masked cross-entropy per valid token, teacher forcing
  double token_accuracy = 0;     // argmax = label, over valid label tokens, teacher forcing
  double sequence_accuracy = 0;  // greedy decoding reproduces the whole target
  std::vector<std::vector<int64_t>> predictions;  // greedy, one per example
};
// Evaluates in eval mode under NoGradGuard (then restores the module's mode).
Evaluation evaluate(nn::EncoderDecoder& model, const data::Task& task,
    const std::vector<data::Example>& examples, int64_t batch_size = 256);

}  // namespace ag::seq2seq
