// The attention layers of d2l.ai's attention chapter, with d2l's names, arguments and numbers:
// masked_softmax, DotProductAttention, AdditiveAttention, MultiHeadAttention (with
// transpose_qkv / transpose_output) and PositionalEncoding.
//
// Dimension names: B batch, Q queries, K key–value pairs, D (num_hiddens) width, H heads.
#pragma once

#include "autograd/ops.h"
#include "nn/layers.h"
#include "nn/positions.h"

namespace ag::nn {

// Softmax over the last dim of X (B, Q, K) that ignores the key positions at or beyond each
// query's valid length. valid_lens is undefined (no masking), (B,) — one length per batch row,
// shared by its queries — or (B, Q), one per query; its values are integers in [0, K], in any
// dtype.
//
// As in d2l, masked scores are replaced by −1e6 before the softmax, so masked positions get
// weight exp(−1e6 − max) = 0 and gradient 0. A valid length of 0 masks a whole row: every score
// is then −1e6 and the weights are uniform (1/K) — d2l's result, finite, never NaN — with gradient
// 0 for the whole row.
//
// With nn::fused_kernels() (the default) this is the fused op ag::length_masked_softmax: one pass
// per row that skips the masked positions, and a hand-written backward that saves only the
// weights. Otherwise it is masked_softmax_composed, d2l's code op by op. Both compute the same
// weights and gradients (tests/nn/test_masked_softmax_fused.cpp).
Tensor masked_softmax(const Tensor& X, const Tensor& valid_lens = Tensor());

// d2l's masked_softmax written with ag's primitive ops, as d2l writes it in PyTorch:
//   mask = arange(K) >= valid_len      (B, 1 or Q, K)
//   softmax(masked_fill(X, mask, −1e6), −1)
// so its gradient flows through softmax's and masked_fill's backward. Same arguments, values
// and errors as masked_softmax.
Tensor masked_softmax_composed(const Tensor& X, const Tensor& valid_lens = Tensor());

// What d2l's attention layers share: queries attend to key–value pairs, optionally masked by
// valid lengths, and the layer is called like a function, attention(queries, keys, values).
// With is_causal (PyTorch's keyword), query i of Q also sees only keys 0 … i + K − Q (the queries
// are the last Q of the K positions: ag::AttentionOptions::is_causal): the lengths become per
// query (ag::causal_valid_lens, the smaller of both) and every layer masks them as valid lengths —
// d2l's decoder passes the same lengths by hand as dec_valid_lens; the fused kernel skips the
// masked keys.
class Attention : public Module {
 public:
  virtual Tensor forward(const Tensor& queries, const Tensor& keys, const Tensor& values,
      const Tensor& valid_lens = Tensor()) = 0;
  Tensor operator()(const Tensor& queries, const Tensor& keys, const Tensor& values,
      const Tensor& valid_lens = Tensor(), bool is_causal = false) {
    // (queries (B, Q, ·) and keys (B, K, ·); other shapes are left to forward's errors)
    if (is_causal && queries.dim() == 3 && keys.dim() == 3)
      return forward(queries, keys, values,
          causal_valid_lens(
              queries.size(0), queries.size(1), keys.size(1), valid_lens, type_name().c_str()));
    return forward(queries, keys, values, valid_lens);
  }
};

// Scaled dot-product attention: softmax(Q·Kᵀ / √d) · V, with dropout on the weights; with ALiBi
// slopes, softmax(Q·Kᵀ / √d + alibi_bias) · V (ag::alibi_bias: −m_h·|i − j| for head h).
class DotProductAttention : public Attention {
 public:
  explicit DotProductAttention(double dropout);
  // queries (B, Q, d), keys (B, K, d), values (B, K, v) -> (B, Q, v): d2l's code, op by op.
  // valid_lens as masked_softmax's; a bad one is a ShapeError naming this layer and the shapes.
  // With alibi_slopes (H of them) the batch holds H heads per row, b·H + h as transpose_qkv puts
  // them, and head h's scores get the bias alibi_bias(alibi_slopes, Q, K)[h] before the softmax.
  // final, as forward_heads is not virtual: no subclass can make the two differ.
  Tensor forward(const Tensor& queries, const Tensor& keys, const Tensor& values,
      const Tensor& valid_lens = Tensor()) final;
  // The same attention for the H heads of MultiHeadAttention at once, as one fused op
  // (ag::attention): queries (B, H, Q, d), keys (B, Hkv, K, d), values (B, Hkv, K, v), which may be
  // strided views, and valid_lens undefined, (B,) or (B, Q), shared by the heads -> (B, H, Q, v).
  // Hkv is H, or for grouped-query attention a divisor of H: query head h reads key/value head
  // h / (H / Hkv). The same values, dropout draws and attention_weights() as forward on the heads
  // moved into the batch (transpose_qkv, the key/value heads repeated H / Hkv times) with each
  // length repeated per head.
  Tensor forward_heads(const Tensor& queries, const Tensor& keys, const Tensor& values,
      const Tensor& valid_lens = Tensor());
  std::string type_name() const override { return "DotProductAttention"; }
  // The weights of the last forward (B, Q, K), after masking and before dropout (detached); after
  // forward_heads, those of its B·H heads (B·H, Q, K), as forward would have them.
  Tensor attention_weights() const;

  std::shared_ptr<Dropout> dropout;
  // ALiBi (Press et al. 2022): empty, or one slope per head (ag::alibi_slopes(H)), set by
  // MultiHeadAttention; not trained, not state (computed from the number of heads).
  std::vector<double> alibi_slopes;

 private:
  Tensor attention_weights_;        // forward's (B, Q, K)
  AttentionWeights heads_weights_;  // forward_heads's (B, H, Q, K), formed on request if tiled
};

// Additive attention: the score of query q and key k is w_vᵀ tanh(W_q q + W_k k).
class AdditiveAttention : public Attention {
 public:
  AdditiveAttention(int64_t key_size, int64_t query_size, int64_t num_hiddens, double dropout);
  // queries (B, Q, query_size), keys (B, K, key_size), values (B, K, v) -> (B, Q, v)
  Tensor forward(const Tensor& queries, const Tensor& keys, const Tensor& values,
      const Tensor& valid_lens = Tensor()) override;
  std::string type_name() const override { return "AdditiveAttention"; }
  const Tensor& attention_weights() const { return attention_weights_; }

  std::shared_ptr<Linear> W_k, W_q, w_v;
  std::shared_ptr<Dropout> dropout;

 private:
  Tensor attention_weights_;
};

// d2l's transpose_qkv: splits the width into heads and moves the heads into the batch so that
// one batched matmul serves all of them.
//   X (B, T, D) -> (B, T, H, D/H) -> (B, H, T, D/H) -> (B·H, T, D/H)
// Row b·H + h of the result is head h of batch row b (batch-major, head-minor).
Tensor transpose_qkv(const Tensor& X, int64_t num_heads);

// d2l's transpose_output, the inverse of transpose_qkv: joins the heads back into the width.
//   X (B·H, T, D/H) -> (B, H, T, D/H) -> (B, T, H, D/H) -> (B, T, D)
// Its backward is transpose_qkv's forward, and the other way round.
Tensor transpose_output(const Tensor& X, int64_t num_heads);

// What d2l's MultiHeadAttention leaves out and Llama-style models add; the defaults give d2l's
// layer.
enum class AttentionPositions {
  none,   // the attention itself knows no positions (d2l's: they were added to its input)
  rope,   // rotary position embedding: each head's queries and keys turned by their positions
  alibi,  // ALiBi: each head's scores biased by −m_h·|i − j| (ag::alibi_slopes(num_heads))
};
struct MultiHeadAttentionOptions {
  // Key/value heads: 0 means num_heads (d2l's); a divisor of num_heads gives grouped-query
  // attention (Ainslie et al. 2023), 1 multi-query attention (Shazeer 2019): W_k and W_v project to
  // num_kv_heads·D/H features, query head h attends with key/value head h / (H / num_kv_heads),
  // and a decoder's key/value cache holds H / num_kv_heads times fewer numbers.
  int64_t num_kv_heads = 0;
  AttentionPositions positions = AttentionPositions::none;
  RotaryPairs rope_pairs = RotaryPairs::interleaved;  // rope: which features pair up
  double rope_base = 10000.0;                         // rope: θ_j = base^(−2j/(D/H))
};

// Multi-head attention, exactly d2l's: project queries, keys and values with W_q, W_k, W_v to
// num_hiddens, run num_heads scaled dot-product attentions of width num_hiddens / num_heads in
// parallel, concatenate the heads and project with W_o.
//
// With nn::fused_kernels() false it runs d2l's code: transpose_qkv, DotProductAttention::forward,
// transpose_output. With fused_kernels() (the default) the same steps run without copies: the
// projections are split into heads by reshape/permute views, all heads attend in one fused op
// (DotProductAttention::forward_heads, ag::attention), the per-head valid lengths need no
// repeat_interleave, and the heads are joined by a view. Same results, same dropout draws, same
// attention_weights(). Both paths run the attention of `attention` itself: DotProductAttention's
// forward is final and forward_heads not virtual, so no subclass can make them differ.
//
// MultiHeadAttentionOptions add grouped-query heads and positions inside the attention. Positions:
// the keys are positions 0 … K − 1 and the queries the last Q of them, K − Q … K − 1 (for
// self-attention, Q = K: the same positions), as AttentionOptions::is_causal counts them. RoPE
// turns q and k by those positions (`rotary`), ALiBi biases the scores by their distance
// (attention->alibi_slopes). The composed path repeats each key/value head H / num_kv_heads times
// (Llama's repeat_kv) before d2l's attention; the fused one reads them in place.
class MultiHeadAttention : public Attention {
 public:
  MultiHeadAttention(int64_t key_size, int64_t query_size, int64_t value_size, int64_t num_hiddens,
      int64_t num_heads, double dropout, bool bias = false);
  MultiHeadAttention(int64_t key_size, int64_t query_size, int64_t value_size, int64_t num_hiddens,
      int64_t num_heads, double dropout, bool bias, const MultiHeadAttentionOptions& options);
  // queries (B, Q, query_size), keys (B, K, key_size), values (B, K, value_size),
  // valid_lens undefined, (B,) or (B, Q) of integers in [0, K] -> (B, Q, num_hiddens).
  // Other shapes or lengths are a ShapeError naming MultiHeadAttention and these shapes.
  Tensor forward(const Tensor& queries, const Tensor& keys, const Tensor& values,
      const Tensor& valid_lens = Tensor()) override;
  // A decoder's causal self-attention over a key/value cache: X (B, T, query_size) holds the
  // positions first_position … first_position + T − 1, which follow the S positions whose
  // projected keys and values (B, num_kv_heads, S, D/H), already turned by RoPE, are in
  // *cached_keys and *cached_values (undefined, or null pointers: none). New position t sees the
  // S cached positions and the new ones up to itself. The T new keys and values are appended to
  // the cache (when given). -> (B, T, num_hiddens). Always the fused path.
  Tensor causal_self_attention(const Tensor& X, int64_t first_position,
      Tensor* cached_keys = nullptr, Tensor* cached_values = nullptr);
  std::string type_name() const override { return "MultiHeadAttention"; }
  // The last forward's attention weights per head: (B, H, Q, K), detached.
  Tensor attention_weights() const;

  int64_t num_heads, num_kv_heads;
  std::shared_ptr<DotProductAttention> attention;
  std::shared_ptr<Linear> W_q, W_k, W_v, W_o;
  std::shared_ptr<RotaryEmbedding> rotary;  // RoPE of each head's D/H features; null without

 private:
  // RoPE: heads (…, T, D/H) turned as positions first_position … first_position + T − 1 (rotary);
  // the heads as they are without it.
  Tensor turn(const Tensor& heads, int64_t first_position);
};

// The sinusoidal positional encoding of "Attention Is All You Need", as d2l:
//   P[i, 2j]   = sin(i / 10000^(2j/d)),   P[i, 2j+1] = cos(i / 10000^(2j/d))
// forward(X) = dropout(X + P[:T]) for X (B, T, d). P is a buffer (not trained, and not persistent:
// recomputed rather than saved for PyTorch) of shape (1, max_len, d), computed in double precision
// and rounded once to the module's dtype. An odd d works: the last
// column is a sine with no cosine partner.
class PositionalEncoding : public Module {
 public:
  PositionalEncoding(int64_t num_hiddens, double dropout, int64_t max_len = 1000);
  // X (B, T, d) -> dropout(X + P[first_position : first_position + T]) (B, T, d). A sequence
  // starts at position 0; step-by-step decoding passes the positions decoded so far.
  Tensor forward(const Tensor& X, int64_t first_position = 0);
  Tensor operator()(const Tensor& X, int64_t first_position = 0) {
    return forward(X, first_position);
  }
  std::string type_name() const override { return "PositionalEncoding"; }
  // Recomputes P for max_len positions (more or fewer), from the same formula: positions past
  // the ones a model was trained on, for an experiment (nn::LanguageModel::extend_context). P is
  // a buffer: a checkpoint saved afterwards holds the longer table, and loads into a model extended
  // the same way.
  void set_max_len(int64_t max_len);

  int64_t num_hiddens, max_len;
  Tensor P;  // (1, max_len, num_hiddens), in the module's dtype
  std::shared_ptr<Dropout> dropout;

 protected:
  void recompute_buffers(DType dtype) override;  // P from its formula, in dtype
};

// A learned positional embedding (the other kind the chapter mentions): P is a trained
// parameter of shape (1, max_len, d), initialised N(0, 0.02²); forward(X) = dropout(X + P[:T]).
class LearnedPositionalEncoding : public Module {
 public:
  LearnedPositionalEncoding(int64_t num_hiddens, double dropout, int64_t max_len = 1000);
  Tensor forward(const Tensor& X, int64_t first_position = 0);  // as PositionalEncoding's
  Tensor operator()(const Tensor& X, int64_t first_position = 0) {
    return forward(X, first_position);
  }
  std::string type_name() const override { return "LearnedPositionalEncoding"; }

  int64_t num_hiddens, max_len;
  Tensor P;  // (1, max_len, num_hiddens), trained
  std::shared_ptr<Dropout> dropout;
};

}  // namespace ag::nn
