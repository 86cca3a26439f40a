#include "nn/attention.h"

#include <algorithm>
#include <cmath>

#include "autograd/ops.h"
#include "nn/fused.h"
#include "nn/init.h"

namespace ag::nn {

// ---- masked_softmax -----------------------------------------------------------------------------

Tensor masked_softmax(const Tensor& X, const Tensor& valid_lens) {
  // The fused kernel computes the same function as the composed code below, in one pass per row.
  if (fused_kernels()) return length_masked_softmax(X, valid_lens);  // (B, Q, K)
  return masked_softmax_composed(X, valid_lens);                     // (B, Q, K)
}

// d2l's code, op by op: a 0/1 mask from the positions and the lengths, −1e6 where it is 1, softmax.
Tensor masked_softmax_composed(const Tensor& X, const Tensor& valid_lens) {
  if (!valid_lens.defined()) return softmax(X, -1);
  if (X.dim() != 3)
    fail<ShapeError>("masked_softmax: X must be (B, Q, K), got shape ", shape_str(X.shape()));
  const int64_t B = X.size(0), Q = X.size(1), K = X.size(2);
  // valid_lens (B,) or (B, Q) of integers in [0, K]: checked as the fused kernel checks them.
  const std::string x = "X of shape " + shape_str(X.shape());
  (void)valid_lengths_per_query(valid_lens, B, Q, K, "masked_softmax", x, x);
  const bool per_row = valid_lens.shape() == Shape{B};
  Tensor lens;
  {
    NoGradGuard no_grad;
    lens = valid_lens.to(X.dtype()).reshape(per_row ? Shape{B, 1, 1} : Shape{B, Q, 1});
  }
  Tensor positions = arange(static_cast<double>(K), X.dtype()).reshape({1, 1, K});  // (1, 1, K)
  Tensor masked = ge(positions, lens);  // (B, 1 or Q, K): 1 at positions >= the valid length
  // d2l fills with −1e6 (not −inf), so a fully masked row becomes uniform instead of NaN.
  return softmax(masked_fill(X, masked, -1e6), -1);  // (B, Q, K)
}

// ---- the layers' valid lengths ------------------------------------------------------------------

namespace {
// valid_lens undefined, (B,) or (B, Q) with integers in [0, K] for queries (B, Q, d) or
// (B, H, Q, d) and keys (B, K, d) or (B, H, K, d); else a ShapeError starting "layer:" that names
// the caller's shapes. Checked at the layer's entry because the ops inside would name themselves
// (masked_softmax, scaled_dot_product_attention) and, in MultiHeadAttention, the heads' shapes.
void check_valid_lens(
    const Tensor& valid_lens, const Tensor& queries, const Tensor& keys, const char* layer) {
  if (!valid_lens.defined()) return;
  (void)valid_lengths_per_query(valid_lens, queries.size(0), queries.size(-2), keys.size(-2), layer,
      "queries of shape " + shape_str(queries.shape()), "keys of shape " + shape_str(keys.shape()));
}
}  // namespace

// ---- DotProductAttention ------------------------------------------------------------------------

namespace {
// ALiBi on scores (B·H, Q, K) whose rows are b·H + h (transpose_qkv's order), H = slopes.size():
// head h's scores + alibi_bias(slopes, Q, K)[h], the bias the fused kernels add, bit for bit.
Tensor add_alibi_bias(const Tensor& scores, const std::vector<double>& slopes) {
  const int64_t H = static_cast<int64_t>(slopes.size());
  const int64_t BH = scores.size(0), Q = scores.size(1), K = scores.size(2);
  if (BH % H != 0)
    fail<ShapeError>("DotProductAttention: ", BH, " rows of scores ", shape_str(scores.shape()),
        " are not whole batches of the ", H, " heads its ", H, " ALiBi slopes are for");
  Tensor bias = alibi_bias(slopes, Q, K, scores.dtype());                 // (H, Q, K)
  return (scores.reshape({BH / H, H, Q, K}) + bias).reshape({BH, Q, K});  // (B·H, Q, K)
}
}  // namespace

DotProductAttention::DotProductAttention(double p) {
  dropout = register_module("dropout", std::make_shared<Dropout>(p));
}

Tensor DotProductAttention::forward(
    const Tensor& queries, const Tensor& keys, const Tensor& values, const Tensor& valid_lens) {
  if (queries.dim() != 3 || keys.dim() != 3 || values.dim() != 3 ||
      queries.size(2) != keys.size(2) || keys.size(1) != values.size(1) ||
      queries.size(0) != keys.size(0) || keys.size(0) != values.size(0))
    fail<ShapeError>("DotProductAttention: queries ", shape_str(queries.shape()), ", keys ",
        shape_str(keys.shape()), " and values ", shape_str(values.shape()),
        " do not fit (expected (B,Q,d), (B,K,d), (B,K,v))");
  check_valid_lens(valid_lens, queries, keys, "DotProductAttention");
  const double d = static_cast<double>(queries.size(-1));
  // Kᵀ is a view; matmul passes it to BLAS as a transpose flag.
  Tensor scores = matmul(queries, keys.transpose(1, 2)) / std::sqrt(d);      // (B, Q, K)
  if (!alibi_slopes.empty()) scores = add_alibi_bias(scores, alibi_slopes);  // (B, Q, K)
  Tensor weights = masked_softmax(scores, valid_lens);                       // (B, Q, K)
  attention_weights_ = weights.detach();
  heads_weights_ = AttentionWeights();
  return matmul(dropout->forward(weights), values);  // (B, Q, v)
}

Tensor DotProductAttention::forward_heads(
    const Tensor& queries, const Tensor& keys, const Tensor& values, const Tensor& valid_lens) {
  // The scores, masked softmax, dropout and weighted sum of forward, for every head in one op;
  // the valid lengths (B,) or (B, Q) serve every head as they are.
  // (Hkv = H, or a divisor of H: grouped-query attention)
  if (queries.dim() != 4 || keys.dim() != 4 || values.dim() != 4 ||
      queries.size(3) != keys.size(3) || keys.size(2) != values.size(2) ||
      queries.size(0) != keys.size(0) || keys.size(0) != values.size(0) || keys.size(1) < 1 ||
      queries.size(1) % keys.size(1) != 0 || keys.size(1) != values.size(1))
    fail<ShapeError>("DotProductAttention::forward_heads: queries ", shape_str(queries.shape()),
        ", keys ", shape_str(keys.shape()), " and values ", shape_str(values.shape()),
        " do not fit (expected (B,H,Q,d), (B,Hkv,K,d), (B,Hkv,K,v) with Hkv dividing H)");
  check_valid_lens(valid_lens, queries, keys, "DotProductAttention::forward_heads");
  attention_weights_ = Tensor();
  AttentionOptions options;
  options.valid_lens = valid_lens;
  options.dropout_p = dropout->p;
  options.training = dropout->is_training();
  options.weights_out = &heads_weights_;
  options.alibi_slopes = alibi_slopes;
  options.enable_gqa = keys.size(1) != queries.size(1);
  return ag::attention(queries, keys, values, options);  // (B, H, Q, v)
}

Tensor DotProductAttention::attention_weights() const {
  const Tensor& heads = heads_weights_.tensor();    // (B, H, Q, K) after forward_heads
  if (!heads.defined()) return attention_weights_;  // (B, Q, K)
  const int64_t B = heads.size(0), H = heads.size(1), Q = heads.size(2), K = heads.size(3);
  return heads.reshape({B * H, Q, K});  // (B·H, Q, K), a view
}

// ---- AdditiveAttention --------------------------------------------------------------------------

AdditiveAttention::AdditiveAttention(
    int64_t key_size, int64_t query_size, int64_t num_hiddens, double p) {
  W_k = register_module("W_k", std::make_shared<Linear>(key_size, num_hiddens, false));
  W_q = register_module("W_q", std::make_shared<Linear>(query_size, num_hiddens, false));
  w_v = register_module("w_v", std::make_shared<Linear>(num_hiddens, 1, false));
  dropout = register_module("dropout", std::make_shared<Dropout>(p));
}

Tensor AdditiveAttention::forward(
    const Tensor& queries, const Tensor& keys, const Tensor& values, const Tensor& valid_lens) {
  if (queries.dim() != 3 || keys.dim() != 3 || values.dim() != 3 ||
      queries.size(0) != keys.size(0) || keys.size(0) != values.size(0) ||
      keys.size(1) != values.size(1) || queries.size(2) != W_q->in_features ||
      keys.size(2) != W_k->in_features)
    fail<ShapeError>("AdditiveAttention: queries ", shape_str(queries.shape()), ", keys ",
        shape_str(keys.shape()), " and values ", shape_str(values.shape()),
        " do not fit (expected (B,Q,", W_q->in_features, "), (B,K,", W_k->in_features,
        "), (B,K,v))");
  check_valid_lens(valid_lens, queries, keys, "AdditiveAttention");
  Tensor q = W_q->forward(queries);  // (B, Q, h)
  Tensor k = W_k->forward(keys);     // (B, K, h)
  // Every query against every key by broadcasting: (B, Q, 1, h) + (B, 1, K, h) -> (B, Q, K, h)
  Tensor features = tanh(q.unsqueeze(2) + k.unsqueeze(1));
  Tensor scores = w_v->forward(features).squeeze(-1);   // (B, Q, K, 1) -> (B, Q, K)
  Tensor weights = masked_softmax(scores, valid_lens);  // (B, Q, K)
  attention_weights_ = weights.detach();
  return matmul(dropout->forward(weights), values);  // (B, Q, v)
}

// ---- MultiHeadAttention -------------------------------------------------------------------------

Tensor transpose_qkv(const Tensor& X, int64_t num_heads) {
  if (X.dim() != 3 || num_heads <= 0 || X.size(2) % num_heads != 0)
    fail<ShapeError>("transpose_qkv: X of shape ", shape_str(X.shape()), " cannot be split into ",
        num_heads, " heads (expected (B, T, D) with D divisible by ", num_heads, ")");
  const int64_t B = X.size(0), T = X.size(1);
  Tensor heads = X.reshape({B, T, num_heads, -1});  // (B, T, H, D/H)
  heads = heads.permute({0, 2, 1, 3});              // (B, H, T, D/H)
  return heads.reshape({-1, T, heads.size(3)});     // (B·H, T, D/H)
}

Tensor transpose_output(const Tensor& X, int64_t num_heads) {
  if (X.dim() != 3 || num_heads <= 0 || X.size(0) % num_heads != 0)
    fail<ShapeError>("transpose_output: X of shape ", shape_str(X.shape()),
        " is not (B·H, T, D/H) for ", num_heads, " heads");
  const int64_t T = X.size(1), Dh = X.size(2);
  Tensor heads = X.reshape({-1, num_heads, T, Dh});  // (B, H, T, D/H)
  heads = heads.permute({0, 2, 1, 3});               // (B, T, H, D/H)
  return heads.reshape({heads.size(0), T, -1});      // (B, T, D)
}

namespace {
// queries (B, Q, query_size), keys (B, K, key_size), values (B, K, value_size), valid_lens
// undefined, (B,) or (B, Q) of integers in [0, K]; else a ShapeError naming the layer and these
// shapes, not the per-head (B, H, Q, K) ones of the op inside.
void check_inputs(const MultiHeadAttention& layer, const Tensor& queries, const Tensor& keys,
    const Tensor& values, const Tensor& valid_lens) {
  const int64_t query_size = layer.W_q->in_features, key_size = layer.W_k->in_features;
  const int64_t value_size = layer.W_v->in_features;
  if (queries.dim() != 3 || keys.dim() != 3 || values.dim() != 3 ||
      queries.size(0) != keys.size(0) || keys.size(0) != values.size(0) ||
      keys.size(1) != values.size(1) || queries.size(2) != query_size || keys.size(2) != key_size ||
      values.size(2) != value_size)
    fail<ShapeError>("MultiHeadAttention: queries ", shape_str(queries.shape()), ", keys ",
        shape_str(keys.shape()), " and values ", shape_str(values.shape()),
        " do not fit (expected (B,Q,", query_size, "), (B,K,", key_size, "), (B,K,", value_size,
        "))");
  check_valid_lens(valid_lens, queries, keys, "MultiHeadAttention");
}

// transpose_qkv without the copy: X (B, T, D) -> (B, T, H, D/H) -> (B, H, T, D/H), a view whose
// head rows are H·D/H apart, as ag::attention reads them.
Tensor split_heads(const Tensor& X, int64_t num_heads) {
  return X.reshape({X.size(0), X.size(1), num_heads, -1}).permute({0, 2, 1, 3});
}

// transpose_output without the copy: ag::attention's output (B, H, T, D/H) lies in memory as
// (B, T, H, D/H), so (B, H, T, D/H) -> (B, T, H, D/H) -> (B, T, D) is a view.
Tensor join_heads(const Tensor& X) {
  return X.permute({0, 2, 1, 3}).reshape({X.size(0), X.size(2), -1});
}
}  // namespace

MultiHeadAttention::MultiHeadAttention(int64_t key_size, int64_t query_size, int64_t value_size,
    int64_t num_hiddens, int64_t heads, double p, bool bias)
    : MultiHeadAttention(key_size, query_size, value_size, num_hiddens, heads, p, bias, {}) {}

MultiHeadAttention::MultiHeadAttention(int64_t key_size, int64_t query_size, int64_t value_size,
    int64_t num_hiddens, int64_t heads, double p, bool bias,
    const MultiHeadAttentionOptions& options)
    : num_heads(heads), num_kv_heads(options.num_kv_heads == 0 ? heads : options.num_kv_heads) {
  if (heads <= 0 || num_hiddens % heads != 0)
    fail<ValueError>(
        "MultiHeadAttention: num_hiddens ", num_hiddens, " is not divisible by num_heads ", heads);
  if (num_kv_heads < 1 || heads % num_kv_heads != 0)
    fail<ValueError>("MultiHeadAttention: num_kv_heads ", options.num_kv_heads,
        " does not divide num_heads ", heads, " (0: as many as num_heads)");
  const int64_t head_width = num_hiddens / heads, kv_width = num_kv_heads * head_width;
  attention = register_module("attention", std::make_shared<DotProductAttention>(p));
  W_q = register_module("W_q", std::make_shared<Linear>(query_size, num_hiddens, bias));
  W_k = register_module("W_k", std::make_shared<Linear>(key_size, kv_width, bias));
  W_v = register_module("W_v", std::make_shared<Linear>(value_size, kv_width, bias));
  W_o = register_module("W_o", std::make_shared<Linear>(num_hiddens, num_hiddens, bias));
  if (options.positions == AttentionPositions::rope)
    rotary = register_module("rotary",
        std::make_shared<RotaryEmbedding>(head_width, options.rope_base, options.rope_pairs));
  if (options.positions == AttentionPositions::alibi) attention->alibi_slopes = alibi_slopes(heads);
}

Tensor MultiHeadAttention::turn(const Tensor& heads, int64_t first_position) {
  return rotary ? rotary->forward(heads, first_position) : heads;  // (…, T, D/H)
}

Tensor MultiHeadAttention::forward(
    const Tensor& queries, const Tensor& keys, const Tensor& values, const Tensor& valid_lens) {
  // The caller's shapes, checked here so that errors name them rather than the per-head ones
  check_inputs(*this, queries, keys, values, valid_lens);
  // Positions (RoPE): the keys are 0 … K − 1, the queries the last Q of them.
  const int64_t K = keys.size(1), first_query = K - queries.size(1);
  if (rotary && first_query < 0)
    fail<ShapeError>("MultiHeadAttention: RoPE places the ", queries.size(1),
        " queries at the last of the ", K, " key positions: there cannot be more of them (queries ",
        shape_str(queries.shape()), ", keys ", shape_str(keys.shape()), ")");
  if (!fused_kernels()) {
    // d2l's code: the heads moved into the batch (copies), one DotProductAttention for all of them.
    Tensor q = turn(transpose_qkv(W_q->forward(queries), num_heads), first_query);  // (B·H, Q, D/H)
    Tensor k = turn(transpose_qkv(W_k->forward(keys), num_kv_heads), 0);  // (B·Hkv, K, D/H)
    Tensor v = transpose_qkv(W_v->forward(values), num_kv_heads);         // (B·Hkv, K, D/H)
    if (num_kv_heads != num_heads) {
      // Grouped-query attention as Llama's repeat_kv writes it: each key/value head once per query
      // head that reads it, rows b·Hkv + g -> b·H + g·(H/Hkv) + r, r < H/Hkv.
      k = repeat_interleave(k, num_heads / num_kv_heads, 0);  // (B·H, K, D/H)
      v = repeat_interleave(v, num_heads / num_kv_heads, 0);  // (B·H, K, D/H)
    }
    Tensor lens = valid_lens;
    if (lens.defined()) {
      // One copy of each batch row's lengths per head, in the order of transpose_qkv's rows:
      // (B,) -> (B·H,) or (B, Q) -> (B·H, Q)
      lens = repeat_interleave(lens, num_heads, 0);
    }
    Tensor output = attention->forward(q, k, v, lens);           // (B·H, Q, D/H)
    Tensor output_concat = transpose_output(output, num_heads);  // (B, Q, D)
    return W_o->forward(output_concat);                          // (B, Q, D)
  }
  // The same steps without copies: the heads as views of the projections, all of them attended in
  // one fused op with the lengths as they are, and joined again by a view.
  Tensor q = turn(split_heads(W_q->forward(queries), num_heads), first_query);  // (B, H, Q, D/H)
  Tensor k = turn(split_heads(W_k->forward(keys), num_kv_heads), 0);            // (B, Hkv, K, D/H)
  Tensor v = split_heads(W_v->forward(values), num_kv_heads);                   // (B, Hkv, K, D/H)
  Tensor output = attention->forward_heads(q, k, v, valid_lens);                // (B, H, Q, D/H)
  Tensor output_concat = join_heads(output);                                    // (B, Q, D)
  return W_o->forward(output_concat);                                           // (B, Q, D)
}

namespace {
// The cache of causal_self_attention: keys and values both given or both not, both undefined or
// both (B, Hkv, S, D/H) for X (B, T, ·); else a ShapeError or ValueError naming the layer.
void check_cache(
    const MultiHeadAttention& layer, const Tensor& X, const Tensor* keys, const Tensor* values) {
  constexpr const char* kWhere = "MultiHeadAttention::causal_self_attention";
  if ((keys == nullptr) != (values == nullptr))
    fail<ValueError>(kWhere, ": a cache of keys without values, or of values without keys");
  if (keys == nullptr) return;
  if (keys->defined() != values->defined())
    fail<ValueError>(kWhere, ": cached keys ", keys->defined() ? "" : "un", "defined but values ",
        values->defined() ? "" : "un", "defined");
  if (!keys->defined()) return;
  const int64_t head_width = layer.W_q->out_features / layer.num_heads;
  const Shape expected{
      X.size(0), layer.num_kv_heads, keys->dim() == 4 ? keys->size(2) : -1, head_width};
  if (keys->shape() != expected || values->shape() != expected)
    fail<ShapeError>(kWhere, ": cached keys ", shape_str(keys->shape()), " and values ",
        shape_str(values->shape()), " are not (B, Hkv, S, D/H) = (", X.size(0), ", ",
        layer.num_kv_heads, ", S, ", head_width, ") for input ", shape_str(X.shape()));
}
}  // namespace

Tensor MultiHeadAttention::causal_self_attention(
    const Tensor& X, int64_t first_position, Tensor* cached_keys, Tensor* cached_values) {
  if (X.dim() != 3 || X.size(2) != W_q->in_features)
    fail<ShapeError>("MultiHeadAttention::causal_self_attention: input of shape ",
        shape_str(X.shape()), " is not (B, T, ", W_q->in_features, ")");
  if (first_position < 0)
    fail<ValueError>(
        "MultiHeadAttention::causal_self_attention: first_position ", first_position, " < 0");
  check_cache(*this, X, cached_keys, cached_values);
  const int64_t B = X.size(0), T = X.size(1);
  Tensor q = turn(split_heads(W_q->forward(X), num_heads), first_position);     // (B, H, T, D/H)
  Tensor k = turn(split_heads(W_k->forward(X), num_kv_heads), first_position);  // (B, Hkv, T, D/H)
  Tensor v = split_heads(W_v->forward(X), num_kv_heads);                        // (B, Hkv, T, D/H)
  int64_t S = 0;  // positions cached before these T
  if (cached_keys != nullptr && cached_keys->defined()) {
    S = cached_keys->size(2);
    k = concat({*cached_keys, k}, 2);    // (B, Hkv, S + T, D/H)
    v = concat({*cached_values, v}, 2);  // (B, Hkv, S + T, D/H)
  }
  // Causal: new position t (key S + t) sees keys 0 … S + t, a valid length of S + t + 1, (B, T).
  const Tensor valid_lens = causal_valid_lens(B, T, S + T, Tensor(), "MultiHeadAttention");
  Tensor heads = attention->forward_heads(q, k, v, valid_lens);  // (B, H, T, D/H)
  Tensor out = W_o->forward(join_heads(heads));                  // (B, T, D)
  if (cached_keys != nullptr) *cached_keys = k;
  if (cached_values != nullptr) *cached_values = v;
  return out;
}

Tensor MultiHeadAttention::attention_weights() const {
  const Tensor& w = attention->attention_weights();  // (B·H, Q, K)
  if (!w.defined()) return w;
  return w.reshape({-1, num_heads, w.size(1), w.size(2)});  // (B, H, Q, K)
}

// ---- positional encodings -----------------------------------------------------------------------

namespace {
// X (B, T, num_hiddens) is to be given positions first … first + T − 1 of a max_len table.
void check_positions(const Tensor& X, int64_t first_position, int64_t num_hiddens, int64_t max_len,
    const char* layer) {
  if (X.dim() != 3 || X.size(2) != num_hiddens)
    fail<ShapeError>(
        layer, ": input of shape ", shape_str(X.shape()), " is not (B, T, ", num_hiddens, ")");
  if (first_position < 0)
    fail<ValueError>(layer, ": first_position ", first_position, " is negative");
  if (X.size(1) > max_len - std::min(first_position, max_len))
    fail<ShapeError>(layer, ": ", X.size(1), " positions from position ", first_position,
        " (input shape ", shape_str(X.shape()), ") exceed max_len ", max_len);
}
}  // namespace

namespace {
// d2l's table P (1, max_len, d): P[i, 2j] = sin(i / 10000^(2j/d)), P[i, 2j+1] = cos(same),
// computed in double and stored in `dtype`.
Tensor sinusoid_table(int64_t max_len, int64_t d, DType dtype) {
  std::vector<double> table(static_cast<std::size_t>(max_len * d));
  for (int64_t i = 0; i < max_len; ++i)
    for (int64_t j = 0; 2 * j < d; ++j) {
      // Column pair (2j, 2j+1) turns at the angular frequency ω_j = 1 / 10000^(2j/d).
      const double angle = static_cast<double>(i) /
                           std::pow(10000.0, static_cast<double>(2 * j) / static_cast<double>(d));
      table[static_cast<std::size_t>(i * d + 2 * j)] = std::sin(angle);
      if (2 * j + 1 < d) table[static_cast<std::size_t>(i * d + 2 * j + 1)] = std::cos(angle);
    }
  return tensor(table, {1, max_len, d}, dtype);
}
}  // namespace

PositionalEncoding::PositionalEncoding(int64_t d, double p, int64_t max_positions)
    : num_hiddens(d), max_len(max_positions) {
  if (d <= 0 || max_positions <= 0)
    fail<ValueError>(
        "PositionalEncoding: num_hiddens ", d, " and max_len ", max_positions, " must be positive");
  dropout = register_module("dropout", std::make_shared<Dropout>(p));
  // Not persistent: computed here, and d2l keeps it out of its state dict too.
  P = register_buffer("P", sinusoid_table(max_len, d, float32), /*persistent=*/false);
}

void PositionalEncoding::recompute_buffers(DType dtype) {
  // Computed again rather than widened: float32 values in a float64 model would limit its
  // positions to float32 accuracy.
  P.set_data(sinusoid_table(max_len, num_hiddens, dtype));
}

void PositionalEncoding::set_max_len(int64_t positions) {
  if (positions <= 0)
    fail<ValueError>("PositionalEncoding::set_max_len: max_len ", positions, " must be positive");
  max_len = positions;
  // A new tensor in the buffer's slot (set_data keeps a shape), and P its handle again.
  Tensor& slot = *buffer_slot("P");
  slot = sinusoid_table(max_len, num_hiddens, P.dtype());  // (1, max_len, d)
  P = slot;
}

Tensor PositionalEncoding::forward(const Tensor& X, int64_t first_position) {
  check_positions(X, first_position, num_hiddens, max_len, "PositionalEncoding");
  Tensor positions = P.narrow(1, first_position, X.size(1));  // (1, T, d), a view of the table
  return dropout->forward(X + positions);                     // (B, T, d)
}

LearnedPositionalEncoding::LearnedPositionalEncoding(int64_t d, double p, int64_t max_positions)
    : num_hiddens(d), max_len(max_positions) {
  if (d <= 0 || max_positions <= 0)
    fail<ValueError>("LearnedPositionalEncoding: num_hiddens ", d, " and max_len ", max_positions,
        " must be positive");
  dropout = register_module("dropout", std::make_shared<Dropout>(p));
  P = register_parameter("P", empty({1, max_len, d}));
  init::normal_(P, 0.0, 0.02);
}

Tensor LearnedPositionalEncoding::forward(const Tensor& X, int64_t first_position) {
  check_positions(X, first_position, num_hiddens, max_len, "LearnedPositionalEncoding");
  return dropout->forward(X + P.narrow(1, first_position, X.size(1)));  // (B, T, d)
}

}  // namespace ag::nn
