// d2l's Transformer as a sequence-to-sequence model of the toy tasks: the model builder, the loss
// of a batch with teacher forcing, one training step, greedy decoding with the key/value cache, and
// evaluation — what ag-train, ag-predict, the benchmarks and the tests share (d2l keeps the same
// helpers in d2l/torch.py: train_seq2seq, predict_seq2seq).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "data/batch.h"
#include "data/toy_tasks.h"
#include "nn/nn.h"
#include "optim/optimizer.h"

namespace ag::seq2seq {

struct ModelConfig {
  // The source's vocabulary (the encoder's embedding), and the target's too if the next is 0.
  int64_t vocab_size = 20;
  // The target's vocabulary (the decoder's embedding and output layer). 0: vocab_size — the toy
  // tasks share one vocabulary; translation has one per language, as d2l's src_vocab / tgt_vocab.
  int64_t target_vocab_size = 0;
  int64_t target_vocab() const { return target_vocab_size > 0 ? target_vocab_size : vocab_size; }
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
// max_steps tokens). bos and eos are the target vocabulary's ids (the toy tasks' by default; d2l's
// Vocab gives <bos> 2, <eos> 3).
std::vector<std::vector<int64_t>> greedy_decode(nn::EncoderDecoder& model, const Tensor& source,
    const Tensor& source_valid_lens, int64_t max_steps, int64_t bos = data::TaskVocab::bos,
    int64_t eos = data::TaskVocab::eos);

// ---- beam search (d2l, "Beam Search") ----
//
// At each step every kept hypothesis y1..yt is extended by every token of the vocabulary, scored by
// the sum of log-probabilities log P(y1..yt+1 | source), and the beam_size best of all extensions
// are kept (d2l: "the k candidates with the highest conditional probability"). One that ends in
// <eos> is finished and leaves the beam, which goes on with the others (so it may narrow); after
// max_steps steps the hypotheses still in the beam are candidates too. Of all the candidates the
// result is the one of the highest length-normalised score
//   score = log P(y1..yL) / L^alpha       (d2l's 1/L^α · log P, α = 0.75 by default)
// where a finished hypothesis counts its <eos> in L and in P (the model chose to stop), and one cut
// at max_steps does not. Ties go to the earlier candidate: extensions are ranked by score, then by
// the beam they extend, then by token id — so beam_size 1 is greedy decoding, token for token.
// The widest beam: d2l searches with 2-4; each hypothesis keeps a decoder cache and a row of the
// vocabulary's log-probabilities, so that a beam of 10^5 would run for hours.
constexpr int64_t kMaxBeamSize = 256;
struct BeamOptions {
  int64_t beam_size = 4;
  double alpha = 0.75;
  int64_t max_steps = 10;
  int64_t bos = data::TaskVocab::bos, eos = data::TaskVocab::eos;
};
struct BeamHypothesis {
  std::vector<int64_t> tokens;  // the predicted tokens, without <bos> and <eos>
  double log_prob = 0;          // log P of the tokens (and of <eos> if finished)
  int64_t length = 0;           // L: tokens.size() + 1 if finished, else tokens.size()
  double score = 0;             // log_prob / length^alpha
  bool finished = false;        // ended by <eos> (not cut at max_steps)
};
// The model's next-token distribution for the kept hypotheses: row i of the call extends row
// parents[i] of the previous call (of the first call: the start, row 0) by tokens[i] (<bos> on
// the first call). Returns rows × V log-probabilities, row-major. A decoder with a key/value cache
// reorders its cache rows by `parents` before it runs.
using NextLogProbs = std::function<std::vector<double>(
    const std::vector<int64_t>& parents, const std::vector<int64_t>& tokens)>;
// The search itself, for any model: ValueError for beam_size outside 1-kMaxBeamSize, max_steps
// below 1, a negative or
// non-finite alpha, bos or eos outside the vocabulary, or a row of log-probabilities of another
// length than the first, or a NaN among them.
BeamHypothesis beam_search(const NextLogProbs& next_log_probs, const BeamOptions& options);
// Beam search of each source (row of source (B, Ts) with its valid length) through the
// Transformer, with the decoder's key/value cache, in eval mode without a graph. One per source.
std::vector<BeamHypothesis> beam_decode(nn::EncoderDecoder& model, const Tensor& source,
    const Tensor& source_valid_lens, const BeamOptions& options);

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
// Throws ValueError for an empty source or max_steps < 1. eos ends the source and the decoding;
// bos starts it (the target vocabulary's ids).
DecodedAttention decode_with_attention(nn::EncoderDecoder& model,
    const std::vector<int64_t>& source, int64_t max_steps, int64_t bos = data::TaskVocab::bos,
    int64_t eos = data::TaskVocab::eos, int64_t source_eos = data::TaskVocab::eos);

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
