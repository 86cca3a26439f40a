// A decoder-only language model: d2l's Transformer decoder without its encoder–decoder attention
// (the block of GPT), predicting each next token from the tokens before it.
//
//   tokens (B, T) -> embedding · √D + positions -> num_layers blocks -> [final LayerNorm]
//                 -> Linear to the vocabulary -> logits (B, T, V)
//
// Two kinds of block:
//   post-norm (d2l's, the default)   Y = AddNorm(X, attention(X));  Z = AddNorm(Y, ffn(Y))
//                                    with AddNorm(X, Y) = LayerNorm(X + dropout(Y))
//   pre-norm (GPT-2's)               Y = X + dropout(attention(ln1(X)));
//                                    Z = Y + dropout(ffn(ln2(Y))); a LayerNorm ln_f after the last
// The self-attention is causal: position t sees positions 0 … t, in training and in evaluation.
//
// Generation keeps a real key/value cache (KVCache): each block's projected keys and values of the
// positions seen so far, (B, H, steps, D/H); a new token computes only its own query, key and
// value. (d2l's TransformerDecoder caches the blocks' inputs instead and projects every key again
// at each step.)
//
// Dimension names: B batch, T new positions, S positions cached before them, D num_hiddens,
// H heads, V vocabulary.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "nn/attention.h"
#include "nn/transformer.h"

namespace ag::nn {

struct LanguageModelConfig {
  int64_t vocab_size = 0;
  int64_t num_hiddens = 128, num_heads = 4, num_layers = 4, ffn_num_hiddens = 512;
  double dropout = 0.1;
  int64_t block_size = 64;         // the longest context: the positions the model has
  bool pre_norm = false;           // GPT-2's blocks and final LayerNorm instead of d2l's AddNorm
  bool learned_positions = false;  // a trained (1, block_size, D) table instead of d2l's sinusoids
  bool tie_weights = false;        // the output layer reuses the token embedding (no bias)
};

// The keys and values of every block for the positions processed so far.
struct KVCache {
  std::vector<Tensor> keys, values;  // per block (B, H, S, D/H); undefined before the first call
  int64_t length() const;            // S: the positions cached (0 when empty)
  void clear();
};

// One block: causal multi-head self-attention and a position-wise FFN, post- or pre-norm.
class DecoderOnlyBlock : public Module {
 public:
  DecoderOnlyBlock(int64_t num_hiddens, int64_t ffn_num_hiddens, int64_t num_heads, double dropout,
      bool pre_norm, int64_t i);
  // X (B, T, D): positions S … S + T − 1, where S = what cache holds for this block (0 without a
  // cache); the cache grows by those T positions -> (B, T, D).
  Tensor forward(const Tensor& X, KVCache* cache = nullptr);
  std::string type_name() const override { return "DecoderOnlyBlock"; }

  int64_t i;  // this block's index in the model (its slot in the cache)
  bool pre_norm;
  std::shared_ptr<MultiHeadAttention> attention;  // W_q, W_k, W_v, W_o: d2l's, without bias
  std::shared_ptr<PositionWiseFFN> ffn;
  // post-norm
  std::shared_ptr<AddNorm> addnorm1, addnorm2;
  // pre-norm
  std::shared_ptr<LayerNorm> ln1, ln2;
  std::shared_ptr<Dropout> dropout;

 private:
  // The causal self-attention of X (B, T, D) against the cached positions and itself -> (B, T, D).
  Tensor self_attention(const Tensor& X, KVCache* cache);
};

class LanguageModel : public Module {
 public:
  explicit LanguageModel(const LanguageModelConfig& config);
  // tokens (B, T) of ids at positions S … S + T − 1 (S = cache->length(), 0 without a cache)
  //   -> logits (B, T, V). S + T must not exceed block_size (a ShapeError otherwise). With a cache
  // the block's keys and values of the T positions are appended; a call that throws leaves it as
  // it was. Without one, all T positions attend causally among themselves (training).
  Tensor forward(const Tensor& tokens, KVCache* cache = nullptr);
  Tensor operator()(const Tensor& tokens, KVCache* cache = nullptr) {
    return forward(tokens, cache);
  }
  std::string type_name() const override { return "LanguageModel"; }
  // An empty cache with a slot per block.
  KVCache make_cache() const;
  // The self-attention weights of the last forward, one (B, H, T, S + T) per block.
  std::vector<Tensor> attention_weights() const;

  LanguageModelConfig config;
  std::shared_ptr<Embedding> embedding;                      // (V, D)
  std::shared_ptr<PositionalEncoding> pos_encoding;          // sinusoidal, or
  std::shared_ptr<LearnedPositionalEncoding> pos_embedding;  // learned (one of the two is set)
  std::shared_ptr<ModuleList> blks;                          // num_layers DecoderOnlyBlock
  std::shared_ptr<LayerNorm> ln_f;                           // pre-norm only
  // The output layer (V, D) + bias (V). With tie_weights it is absent: the logits are
  // X · embedding.weightᵀ, one Parameter used twice (its gradient is the sum of both uses).
  // PyTorch (nanoGPT: `self.transformer.wte.weight = self.lm_head.weight`) shows a tied weight in
  // state_dict() under both names, sharing storage (safetensors' save_file refuses that, its
  // save_model keeps one name); ag registers it once, so state_dict(), checkpoints and ag's
  // safetensors files hold it once, as "embedding.weight", and parameters() counts it once.
  std::shared_ptr<Linear> dense;
};

}  // namespace ag::nn
