// A decoder-only language model: d2l's Transformer decoder without its encoder–decoder attention
// (the block of GPT), predicting each next token from the tokens before it.
//
//   tokens (B, T) -> embedding · √D [+ positions] -> num_layers blocks -> [final norm]
//                 -> Linear to the vocabulary -> logits (B, T, V)
//
// Two kinds of block:
//   post-norm (d2l's, the default)   Y = AddNorm(X, attention(X));  Z = AddNorm(Y, ffn(Y))
//                                    with AddNorm(X, Y) = LayerNorm(X + dropout(Y))
//   pre-norm (GPT-2's, Llama's)      Y = X + dropout(attention(ln1(X)));
//                                    Z = Y + dropout(ffn(ln2(Y))); a norm ln_f after the last
// The self-attention is causal: position t sees positions 0 … t, in training and in evaluation.
//
// The positions (LanguageModelConfig::positions, PositionScheme): d2l's sinusoids or a learned
// table added to the embeddings, or RoPE or ALiBi inside every attention, or none. And what makes
// a Llama-style block: RMSNorm instead of LayerNorm, the SwiGLU feed-forward, grouped-query
// attention (fewer key/value heads than query heads).
//
// Generation keeps a real key/value cache (KVCache): each block's projected keys and values of the
// positions seen so far, (B, Hkv, steps, D/H); a new token computes only its own query, key and
// value. (d2l's TransformerDecoder caches the blocks' inputs instead and projects every key again
// at each step.) With relative positions the cache may slide past block_size: the oldest position
// is dropped and the others stay valid (KVCache::drop_oldest).
//
// Dimension names: B batch, T new positions, S positions cached before them, D num_hiddens,
// H heads, Hkv key/value heads, V vocabulary.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "nn/attention.h"
#include "nn/transformer.h"

namespace ag::nn {

// ---- the registries of the model's choices --------------------------------------------------------
// How the model knows where each token is (ag-train --task lm --positions NAME):
//   sinusoidal  d2l's sinusoids P[t] added to the embeddings (PositionalEncoding), the default
//   learned     a trained table of block_size vectors added instead (nanoGPT's wpe)
//   rope        rotary position embedding: every head's queries and keys turned by their positions
//               (Su et al. 2021; Llama)
//   alibi       a bias −m_h·|i − j| on every head's scores (Press et al. 2022; BLOOM)
//   none        no positions (NoPE): the causal mask alone tells a token how many came before it
// The first two are absolute: a vector per position enters the model. The others are relative: no
// position enters but through differences i − j, so keys cached at any position stay valid.
// One X-macro makes the enum, its names and the list (tests go over every scheme with it).
#define AG_POSITION_SCHEMES(X) X(sinusoidal) X(learned) X(rope) X(alibi) X(none)
enum class PositionScheme {
#define AG_POSITION_SCHEME_ENUM(name) name,
  AG_POSITION_SCHEMES(AG_POSITION_SCHEME_ENUM)
#undef AG_POSITION_SCHEME_ENUM
};
inline constexpr PositionScheme kPositionSchemes[] = {
#define AG_POSITION_SCHEME_LIST(name) PositionScheme::name,
    AG_POSITION_SCHEMES(AG_POSITION_SCHEME_LIST)
#undef AG_POSITION_SCHEME_LIST
};
std::string position_scheme_name(PositionScheme scheme);  // "sinusoidal", …
// A ValueError naming `what` (an option, a file) and the known names for any other name.
PositionScheme parse_position_scheme(const std::string& name, const std::string& what);
// rope, alibi and none: only differences of positions reach the model.
bool relative_positions(PositionScheme scheme);

// The normalisation of the blocks: LayerNorm (d2l's, GPT-2's) or RMSNorm (Llama's; pre-norm only:
// d2l's post-norm AddNorm is a LayerNorm). Names "layer" | "rms".
enum class Normalization { layer, rms };
std::string normalization_name(Normalization norm);
Normalization parse_normalization(const std::string& name, const std::string& what);

// The position-wise feed-forward network: d2l's Linear, ReLU, Linear (PositionWiseFFN), or Llama's
// SwiGLU (SwiGLUFFN: w2(silu(w1(x)) ⊙ w3(x)), no biases). Names "relu" | "swiglu".
enum class FeedForward { relu, swiglu };
std::string feed_forward_name(FeedForward ffn);
FeedForward parse_feed_forward(const std::string& name, const std::string& what);

struct LanguageModelConfig {
  int64_t vocab_size = 0;
  int64_t num_hiddens = 128, num_heads = 4, num_layers = 4, ffn_num_hiddens = 512;
  double dropout = 0.1;
  int64_t block_size = 64;  // the longest context trained on: the positions a learned table has
  bool pre_norm = false;    // GPT-2's blocks and a final norm instead of d2l's AddNorm
  PositionScheme positions = PositionScheme::sinusoidal;
  RotaryPairs rope_pairs = RotaryPairs::interleaved;  // rope: which features pair up
  double rope_base = 10000.0;                         // rope: θ_j = base^(−2j/(D/H))
  int64_t num_kv_heads = 0;  // key/value heads: 0 = num_heads; a divisor of it: grouped-query
  Normalization norm = Normalization::layer;
  FeedForward ffn = FeedForward::relu;
  bool tie_weights = false;  // the output layer reuses the token embedding (no bias)

  int64_t kv_heads() const { return num_kv_heads == 0 ? num_heads : num_kv_heads; }
};

// The keys and values of every block for the positions processed so far.
struct KVCache {
  std::vector<Tensor> keys, values;  // per block (B, Hkv, S, D/H); undefined before the first call
  // The position of the first cached key: 0, until drop_oldest slid the window.
  int64_t first_position = 0;
  int64_t length() const;  // S: the positions cached (0 when empty)
  int64_t next_position() const { return first_position + length(); }
  void clear();  // empty, from position 0
  // Drops the n oldest positions of every block (views of the rest), so that the next call's
  // positions go on from next_position(): a window sliding past block_size. Only for relative
  // positions (LanguageModel::forward refuses a slid cache otherwise). ValueError for n outside
  // 0 … length().
  void drop_oldest(int64_t n);
};

// One block: causal multi-head self-attention and a position-wise FFN, post- or pre-norm, with
// the configuration's norm, feed-forward, key/value heads and positions inside the attention.
class DecoderOnlyBlock : public Module {
 public:
  DecoderOnlyBlock(const LanguageModelConfig& config, int64_t i);
  // X (B, T, D): positions P … P + T − 1, where P = cache->first_position + what the cache holds
  // for this block (0 without a cache); the cache grows by those T positions -> (B, T, D).
  Tensor forward(const Tensor& X, KVCache* cache = nullptr);
  std::string type_name() const override { return "DecoderOnlyBlock"; }

  int64_t i;  // this block's index in the model (its slot in the cache)
  bool pre_norm;
  // W_q, W_k, W_v, W_o: d2l's, without bias; with fewer key/value heads, RoPE or ALiBi as the
  // configuration says.
  std::shared_ptr<MultiHeadAttention> attention;
  // The feed-forward network, registered as "ffn": d2l's (relu) or Llama's (swiglu); one is set.
  std::shared_ptr<PositionWiseFFN> ffn;
  std::shared_ptr<SwiGLUFFN> swiglu;
  // post-norm
  std::shared_ptr<AddNorm> addnorm1, addnorm2;
  // pre-norm, registered as "ln1" and "ln2": LayerNorm, or RMSNorm (rms1, rms2); one pair is set.
  std::shared_ptr<LayerNorm> ln1, ln2;
  std::shared_ptr<RMSNorm> rms1, rms2;
  std::shared_ptr<Dropout> dropout;

 private:
  Tensor feed_forward(const Tensor& X) const;  // (B, T, D) -> (B, T, D)
  Tensor norm(const LayerNorm* layer, const RMSNorm* rms, const Tensor& X) const;  // (B, T, D)
};

class LanguageModel : public Module {
 public:
  explicit LanguageModel(const LanguageModelConfig& config);
  // tokens (B, T) of ids at positions P … P + T − 1 (P = cache->next_position(), 0 without a
  // cache) -> logits (B, T, V). The S cached positions and the T new ones must not exceed
  // max_context() (a ShapeError otherwise), nor, with absolute positions, P + T (a slid cache is a
  // ValueError there). With a cache the block's keys and values of the T positions are appended; a
  // call that throws leaves it as it was. Without one, all T positions attend causally among
  // themselves (training).
  Tensor forward(const Tensor& tokens, KVCache* cache = nullptr);
  Tensor operator()(const Tensor& tokens, KVCache* cache = nullptr) {
    return forward(tokens, cache);
  }
  std::string type_name() const override { return "LanguageModel"; }
  // An empty cache with a slot per block.
  KVCache make_cache() const;
  // The self-attention weights of the last forward, one (B, H, T, S + T) per block.
  std::vector<Tensor> attention_weights() const;
  // The longest context forward takes: block_size, unless extend_context changed it.
  int64_t max_context() const { return max_context_; }
  // Lets forward take contexts of up to `positions` tokens, past the block_size it was trained on:
  // for measuring how a model does on longer sequences than it saw (length extrapolation). The
  // sinusoidal table is recomputed to that length (PositionalEncoding::set_max_len); relative
  // positions need nothing; a learned table has no rows past block_size, so that is a ValueError.
  // `positions` below block_size shortens the context again (down to 1).
  void extend_context(int64_t positions);

  LanguageModelConfig config;
  std::shared_ptr<Embedding> embedding;                      // (V, D)
  std::shared_ptr<PositionalEncoding> pos_encoding;          // sinusoidal, or
  std::shared_ptr<LearnedPositionalEncoding> pos_embedding;  // learned (one of the two, or
  std::shared_ptr<Dropout> embedding_dropout;                // neither: this dropout instead)
  std::shared_ptr<ModuleList> blks;                          // num_layers DecoderOnlyBlock
  std::shared_ptr<LayerNorm> ln_f;                           // pre-norm: LayerNorm, or
  std::shared_ptr<RMSNorm> rms_f;                            // RMSNorm, registered as "ln_f"
  // The output layer (V, D) + bias (V). With tie_weights it is absent: the logits are
  // X · embedding.weightᵀ, one Parameter used twice (its gradient is the sum of both uses).
  // PyTorch (nanoGPT: `self.transformer.wte.weight = self.lm_head.weight`) shows a tied weight in
  // state_dict() under both names, sharing storage (safetensors' save_file refuses that, its
  // save_model keeps one name); ag registers it once, so state_dict(), checkpoints and ag's
  // safetensors files hold it once, as "embedding.weight", and parameters() counts it once.
  std::shared_ptr<Linear> dense;

 private:
  int64_t max_context_;
};

}  // namespace ag::nn
