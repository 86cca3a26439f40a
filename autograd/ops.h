// ag's differentiable ops: what each computes. Each is defined, forward and backward together, in
// one of ops_elementwise.cpp, ops_reduce.cpp, ops_softmax.cpp, ops_norm.cpp, ops_loss.cpp,
// ops_matmul.cpp, ops_shape.cpp, ops_index.cpp, ops_random.cpp, ops_rotary.cpp, ops_attention.cpp
// and ops_flash_attention.cpp. Its gradient is written in one checked place: beside its backward
// there, as the line `// docs/ops.md, <op>: ...`, and in the table of docs/ops.md
// (tests/autograd/test_docs.cpp keeps the two equal).
//
// Conventions: dims may be negative (counted from the end); binary ops broadcast as NumPy and
// PyTorch do; arithmetic, comparisons and where mix int64 and bool with a floating dtype as
// PyTorch's type promotion does (autograd/dtype.h), everything else takes operands of one dtype;
// the ops that compute in floating point refuse int64 and bool with a DTypeError naming the op;
// every shape error is an ag::ShapeError naming the op and the full shapes.
#pragma once

#include <concepts>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "autograd/parallel.h"
#include "autograd/scoped_setting.h"
#include "autograd/tensor.h"

namespace ag {

// ---- elementwise with broadcasting ------------------------------------------------------------
Tensor add(const Tensor& a, const Tensor& b);  // a + b
Tensor add(const Tensor& a, double b);
Tensor sub(const Tensor& a, const Tensor& b);  // a − b
Tensor sub(const Tensor& a, double b);
Tensor sub(double a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);  // a · b
Tensor mul(const Tensor& a, double b);
Tensor div(const Tensor& a, const Tensor& b);  // a / b
Tensor div(const Tensor& a, double b);
Tensor div(double a, const Tensor& b);
Tensor neg(const Tensor& x);
Tensor pow(const Tensor& x, double exponent);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor relu(const Tensor& x);
// The exact GELU, x·Φ(x) with Φ the standard normal CDF (PyTorch's default).
Tensor gelu(const Tensor& x);
// torch.nn.functional.gelu(x, approximate=...): "none" (the exact one above) or "tanh", GPT-2's
// ½ x (1 + tanh(√(2/π) (x + 0.044715 x³))); anything else is a ValueError.
Tensor gelu(const Tensor& x, const std::string& approximate);
Tensor silu(const Tensor& x);  // x · σ(x) (SiLU, swish): Llama's feed-forward gate
Tensor abs(const Tensor& x);   // |x|; its gradient is 0 at 0, as PyTorch's
// erf x = (2/√π) ∫₀ˣ e^(−t²) dt, the error function (BERT's GELU, x · ½ (1 + erf(x/√2)), is
// ag::gelu, which keeps its digits for x < −4 where 1 + erf cancels)
Tensor erf(const Tensor& x);
Tensor sin(const Tensor& x);
Tensor cos(const Tensor& x);
Tensor rsqrt(const Tensor& x);  // 1 / √x (RMSNorm's scale)
// Elementwise larger / smaller of two broadcast tensors, torch.maximum / torch.minimum: a NaN in
// either wins; at a tie each input gets half the gradient.
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);
// torch.clamp(x, min, max): each value limited to [min, max] (either bound may be left out, not
// both); NaN stays NaN; the gradient passes where min ≤ x ≤ max. A NaN bound, or min above max
// (where PyTorch quietly returns max everywhere), is a ValueError.
Tensor clamp(const Tensor& x, std::optional<double> min, std::optional<double> max = std::nullopt);

// Comparisons give a bool tensor (torch.bool), true where the relation holds; the operands promote
// as arithmetic does (bool with bool compares too). Not differentiable.
Tensor eq(const Tensor& a, const Tensor& b);  // a == b
Tensor eq(const Tensor& a, double b);
Tensor ne(const Tensor& a, const Tensor& b);  // a != b
Tensor ne(const Tensor& a, double b);
Tensor lt(const Tensor& a, const Tensor& b);  // a < b
Tensor lt(const Tensor& a, double b);
Tensor le(const Tensor& a, const Tensor& b);  // a <= b
Tensor le(const Tensor& a, double b);
Tensor gt(const Tensor& a, const Tensor& b);  // a > b
Tensor gt(const Tensor& a, double b);
Tensor ge(const Tensor& a, const Tensor& b);  // a >= b
Tensor ge(const Tensor& a, double b);

// a where condition is true (nonzero), else b; all three broadcast; a and b promote as in
// arithmetic. The condition is a bool tensor, as PyTorch's — or, as ag always took it, a
// tensor of another dtype read as `!= 0`. It is not differentiated.
Tensor where(const Tensor& condition, const Tensor& a, const Tensor& b);
// x with `value` wherever mask (bool, or another dtype read as `!= 0`; broadcast to x) is true.
// For an int64 x the value must be an integer. The mask is not differentiated.
Tensor masked_fill(const Tensor& x, const Tensor& mask, double value);

Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator+(const Tensor& a, double b);
Tensor operator+(double a, const Tensor& b);
Tensor operator-(const Tensor& a, double b);
Tensor operator-(double a, const Tensor& b);
Tensor operator*(const Tensor& a, double b);
Tensor operator*(double a, const Tensor& b);
Tensor operator/(const Tensor& a, double b);
Tensor operator/(double a, const Tensor& b);
Tensor operator-(const Tensor& x);

// An integer scalar (x + 1, 2 * positions, x - n) keeps an int64 tensor int64, as a Python int in
// PyTorch does; a double scalar makes an int64 or bool tensor float32 (x * 0.5). On float tensors
// both are the double forms above. Division is true division: x / 2 of int64 is float32.
template <class I>
concept IntegerScalar = std::integral<I> && !std::same_as<I, bool>;
namespace detail {
enum class IntegerScalarOp { add, sub, rsub, mul };
Tensor integer_scalar_op(const Tensor& x, int64_t s, IntegerScalarOp op);
// An integer scalar as int64: a ValueError naming `op` for an unsigned one beyond 2^63 − 1.
template <IntegerScalar I>
int64_t scalar_int64(I value, const char* op) {
  if constexpr (std::is_unsigned_v<I> && sizeof(I) >= sizeof(int64_t))
    if (value > static_cast<uint64_t>(INT64_MAX))
      fail<ValueError>(op, ": the scalar ", value, " is beyond int64's range");
  return static_cast<int64_t>(value);
}
}  // namespace detail
template <IntegerScalar I>
Tensor add(const Tensor& a, I b) {
  return detail::integer_scalar_op(a, detail::scalar_int64(b, "add"), detail::IntegerScalarOp::add);
}
template <IntegerScalar I>
Tensor sub(const Tensor& a, I b) {
  return detail::integer_scalar_op(a, detail::scalar_int64(b, "sub"), detail::IntegerScalarOp::sub);
}
template <IntegerScalar I>
Tensor sub(I a, const Tensor& b) {
  return detail::integer_scalar_op(
      b, detail::scalar_int64(a, "sub"), detail::IntegerScalarOp::rsub);
}
template <IntegerScalar I>
Tensor mul(const Tensor& a, I b) {
  return detail::integer_scalar_op(a, detail::scalar_int64(b, "mul"), detail::IntegerScalarOp::mul);
}
template <IntegerScalar I>
Tensor operator+(const Tensor& a, I b) {
  return add(a, b);
}
template <IntegerScalar I>
Tensor operator+(I a, const Tensor& b) {
  return add(b, a);
}
template <IntegerScalar I>
Tensor operator-(const Tensor& a, I b) {
  return sub(a, b);
}
template <IntegerScalar I>
Tensor operator-(I a, const Tensor& b) {
  return sub(a, b);
}
template <IntegerScalar I>
Tensor operator*(const Tensor& a, I b) {
  return mul(a, b);
}
template <IntegerScalar I>
Tensor operator*(I a, const Tensor& b) {
  return mul(b, a);
}

// ---- reductions -----------------------------------------------------------------------------
// Over all elements (a 0-dim result) or over `dims` (each listed once), keeping them as size 1
// with keepdim. sum of an int64 or bool tensor is int64 (a count: eq(pred, target).sum()); the
// others compute in floating point (mean of int64 is a DTypeError, as in PyTorch).
Tensor sum(const Tensor& x);
Tensor sum(const Tensor& x, const Shape& dims, bool keepdim = false);
Tensor mean(const Tensor& x);
Tensor mean(const Tensor& x, const Shape& dims, bool keepdim = false);
// The largest element, over all elements or over `dims`.
Tensor max(const Tensor& x);
Tensor max(const Tensor& x, const Shape& dims, bool keepdim = false);
// One dim, as PyTorch's x.sum(-1), x.mean(1, true) (a negative dim counts from the end). A braced
// list is a list of dims — sum(x, {-1}) one, sum(x, {0, 1}) two — never a single int: these
// overloads make sum(x, {}) the Shape form it always was, not dim 0.
Tensor sum(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor sum(const Tensor& x, std::initializer_list<int64_t> dims, bool keepdim = false);
Tensor mean(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor mean(const Tensor& x, std::initializer_list<int64_t> dims, bool keepdim = false);
// torch.max(x, dim) and torch.min(x, dim): the values along dim and the index of the first of
// each (argmax's: int64, not differentiable); the values' gradient goes to that index.
//   auto [values, indices] = ag::max(logits, -1);  (ValuesIndices: autograd/tensor.h)
ValuesIndices max(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor max(const Tensor& x, std::initializer_list<int64_t> dims, bool keepdim = false);
ValuesIndices min(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor min(const Tensor& x);  // the smallest element
// torch.amax / torch.amin: the largest / smallest over dims, values only (amin is −amax(−x)).
Tensor amax(const Tensor& x, const Shape& dims, bool keepdim = false);
Tensor amin(const Tensor& x, const Shape& dims, bool keepdim = false);
// log Σ exp(x) over dims, computed as m + log Σ exp(x − m) with m the largest (0 where it is
// infinite), as torch.logsumexp: finite for any finite x, and −inf for a row of −inf.
Tensor logsumexp(const Tensor& x, const Shape& dims, bool keepdim = false);
Tensor logsumexp(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor logsumexp(const Tensor& x, std::initializer_list<int64_t> dims, bool keepdim = false);
// Σ(x − mean)² / (N − correction): correction 1 is the unbiased estimate, 0 the biased one.
Tensor var(const Tensor& x, const Shape& dims, int64_t correction = 1, bool keepdim = false);
Tensor var(const Tensor& x);  // over all elements, unbiased
// Index of the first maximum along `dim`, as an int64 tensor. Not differentiable.
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim = false);

// exp(x − max) / Σ exp(x − max) along dim.
Tensor softmax(const Tensor& x, int64_t dim);
// x − max − log Σ exp(x − max) along dim.
Tensor log_softmax(const Tensor& x, int64_t dim);
// Softmax over the last dim of X (B, Q, K) restricted to the first L entries of each row, as the
// attention of d2l.ai masks padded keys (nn::masked_softmax; this is its fused kernel). valid_lens
// holds integer values in any dtype and is (B,) — one L per batch row, shared by its Q queries —,
// (B, Q) — one L per query — or undefined: no masking, a plain softmax over the last dim of an X
// of any shape. It computes exactly d2l's function, which fills the masked scores with −1e6:
//   y_k = exp(x_k − m) / Σ_{j<L} exp(x_j − m) for k < L, m = max_{j<L} x_j;  y_k = 0 for k ≥ L;
//   y_k = 1/K for every k of a row with L = 0 (all K scores −1e6: a uniform softmax).
// (d2l's masked entries would only get weight if every valid score were below about −1e6.)
// Its backward saves only y and the lengths.
// Invalid valid_lens are a ShapeError starting "masked_softmax:", as nn::masked_softmax's were.
Tensor length_masked_softmax(const Tensor& X, const Tensor& valid_lens);

// ---- normalisation ------------------------------------------------------------------------------
// As torch.nn.functional.layer_norm: each row of x over its trailing normalized_shape dims is
// normalised with its mean and biased variance, then scaled by weight and shifted by bias:
//   y = (x − mean) / sqrt(var + eps) · weight + bias
// weight and bias have shape normalized_shape, or are undefined Tensors (no scale / no shift).
// One fused op with a hand-written backward that saves only x, weight and each row's mean and
// 1/sqrt(var + eps) (ops_norm.cpp).
Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight,
    const Tensor& bias, double eps = 1e-5);
// As torch.nn.functional.rms_norm (PyTorch 2.4; RMSNorm, Zhang & Sennrich 2019, Llama's
// normalisation): each row of x over its trailing normalized_shape dims is divided by its root mean
// square, then scaled by weight:
//   y = x / sqrt(mean(x²) + eps) · weight
// weight has shape normalized_shape, or is undefined (no scale). eps nullopt: machine_epsilon of
// x's dtype (torch.finfo(dtype).eps), PyTorch's default. The same fused loops as layer_norm, whose
// backward saves only x, weight and each row's 1/sqrt(mean(x²) + eps) (ops_norm.cpp).
Tensor rms_norm(const Tensor& input, const Shape& normalized_shape, const Tensor& weight = Tensor(),
    std::optional<double> eps = std::nullopt);
// torch.finfo(dtype).eps: the gap between 1 and the next number of a floating dtype, 2⁻²³ for
// float32 and 2⁻⁵² for float64 (rms_norm's default eps). A DTypeError for int64 and bool.
double machine_epsilon(DType dtype);
// layer_norm(x + dropout(y, p, training, generator), ...) in one op: d2l's AddNorm, the residual
// connection around every Transformer sublayer. The same draws and the same numbers as the
// composed ops (dropout's mask is the one ag::dropout(y) would draw from the same generator
// state); one pass forms the sum (ops_norm.cpp). x and y have the same shape, ending in
// normalized_shape.
Tensor dropout_add_layer_norm(const Tensor& x, const Tensor& y, const Shape& normalized_shape,
    const Tensor& weight, const Tensor& bias, double eps, double p, bool training,
    Generator& generator);

// ---- losses -------------------------------------------------------------------------------------
enum class Reduction { none, mean, sum };
// Softmax cross-entropy of logits (N, V) against target class ids (N,) (integer values, any
// dtype): loss_n = log Σ_v exp(x_nv) − x_n,t_n, fused from log-sum-exp so that it stays finite for
// any logits. Per row with Reduction::none, else the mean or the sum over rows. A row whose target
// is ignore_index (PyTorch's default −100; nanoGPT passes −1) has loss 0 and no gradient, and the
// mean is over the other rows (an error if there are none, where PyTorch gives NaN).
Tensor cross_entropy(const Tensor& logits, const Tensor& targets,
    Reduction reduction = Reduction::mean, int64_t ignore_index = -100);

// ---- matrix product -------------------------------------------------------------------------
// As torch.matmul: 1-D operands are promoted to matrices; for N-D the last two dims multiply
// and the batch dims broadcast. Runs on OpenBLAS sgemm/dgemm; transposed operands are passed
// as BLAS flags, not copied.
Tensor matmul(const Tensor& a, const Tensor& b);
// As torch.nn.functional.linear: y = x · Wᵀ + b for x (..., in), weight (out, in) and bias (out)
// or an undefined Tensor (no bias); y (..., out). One op and one pass over the output (the bias
// is added to each row as its product is written), with the same bits as matmul(x, Wᵀ) + b; its
// backward computes dx, dW and db together (nn::Linear's forward).
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());
// relu(linear(x, weight, bias)) as one op: relu applied to each row as its product is written,
// and a backward that masks the gradient and sums db in one pass (it saves the output, not
// x · Wᵀ + b). Same bits as the two ops (nn::PositionWiseFFN's dense1 and relu).
Tensor linear_relu(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());

// ---- shape and indexing ---------------------------------------------------------------------
// A view when the strides allow it, else a copy; one dim may be -1 (inferred).
Tensor reshape(const Tensor& x, const Shape& shape);
// Like reshape, but throws instead of copying.
Tensor view(const Tensor& x, const Shape& shape);
Tensor permute(const Tensor& x, const Shape& dims);
Tensor transpose(const Tensor& x, int64_t dim0, int64_t dim1);
Tensor squeeze(const Tensor& x);               // drops every size-1 dim
Tensor squeeze(const Tensor& x, int64_t dim);  // drops `dim` if its size is 1
Tensor unsqueeze(const Tensor& x, int64_t dim);
// A view with size-1 dims repeated to `shape` (stride 0); -1 keeps a size.
Tensor expand(const Tensor& x, const Shape& shape);
Tensor broadcast_to(const Tensor& x, const Shape& shape);
// Elements start, start+step, ... < end along dim (a view). start/end are clamped like Python's.
Tensor slice(const Tensor& x, int64_t dim, int64_t start, int64_t end, int64_t step = 1);
Tensor narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length);
Tensor select(const Tensor& x, int64_t dim, int64_t index);  // narrow to one, drop the dim
// Pieces of `split_size` along dim (the last may be smaller), or pieces of the given sizes.
std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim = 0);
std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim = 0);
Tensor concat(const std::vector<Tensor>& tensors, int64_t dim = 0);
// torch.stack: tensors of one shape joined along a new dim (concat of each unsqueezed at dim).
// ShapeError naming the first tensor whose shape differs, or for no tensors.
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim = 0);
// torch.tril / torch.triu over the last two dims: the elements on and below (above) the
// `diagonal`-th diagonal kept, the others 0; the gradient is masked the same way.
Tensor tril(const Tensor& x, int64_t diagonal = 0);
Tensor triu(const Tensor& x, int64_t diagonal = 0);
// Rows (along dim) of x picked by the integer values of the 1-D `index` (any dtype) — an
// embedding lookup when dim is 0.
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);
Tensor index_select(const Tensor& x, int64_t dim, const std::vector<int64_t>& index);
// Each element along dim repeated `repeats` times: [a, b] -> [a, a, b, b].
Tensor repeat_interleave(const Tensor& x, int64_t repeats, int64_t dim);
Tensor contiguous(const Tensor& x);  // x itself if already contiguous, else a row-major copy
Tensor clone(const Tensor& x);       // always a copy

// ---- gathering, cumulative sums, sampling (ops_index.cpp) ----
// torch.gather: out has index's shape and x's dtype (any dtype), and picks along dim
//   out[i][j][k] = x[index[i][j][k]][j][k]   (dim 0; likewise for the other dims)
// index is int64 (or floating holding integers; bool is a DTypeError) with as many dims as x,
// index.size(d) <= x.size(d) for d != dim, and values in [0, x.size(dim)) (negative ones do not
// count from the end, as in PyTorch); else a ShapeError naming gather. The gradient of x is g
// scatter-added back to the gathered positions.
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index);
// torch.cumsum: out_i = x_0 + ... + x_i along dim. Floating x sums in double and rounds each
// partial sum to x's dtype (PyTorch's CPU kernel accumulates float32 in double too) and is
// differentiable; int64 and bool x give int64 (wrapping on overflow), not differentiable.
Tensor cumsum(const Tensor& x, int64_t dim);
// torch.nn.functional.one_hot: an int64 tensor of shape index.shape + [num_classes], 1 at each
// element's id and 0 elsewhere. index must be int64 (a DTypeError otherwise: pass
// index.to(ag::int64)); num_classes −1 takes the largest id + 1. An id outside [0, num_classes)
// is a ValueError naming one_hot. Not differentiable.
Tensor one_hot(const Tensor& index, int64_t num_classes = -1);
// torch.topk: the k largest (smallest without `largest`) values of floating x along dim, and
// their int64 indices; x's shape with k at dim. NaN counts as larger than every number, as in
// PyTorch; among equal values the lower index comes first (PyTorch leaves ties unordered), and
// the values are always in order (sorted = false, where PyTorch's order is unspecified, gives the
// same). k outside [0, x.size(dim)] is a ShapeError. The values' gradient goes to the picked
// positions; the indices are not differentiable.
//   auto [top, ids] = ag::topk(logits, 5);  // nanoGPT's top-k sampling
ValuesIndices topk(
    const Tensor& x, int64_t k, int64_t dim = -1, bool largest = true, bool sorted = true);
// torch.multinomial: num_samples category ids drawn from each row of probs, 1-D (n) or 2-D
// (rows, n) non-negative finite weights (need not sum to 1): int64 (num_samples) or (rows,
// num_samples). With replacement each draw picks i with probability w_i / Σ w; without, each
// draw picks among the categories not drawn yet (then num_samples may not exceed the number of
// positive weights). A negative, NaN or infinite weight, a row without a positive weight, or
// num_samples <= 0 is a ValueError naming multinomial. Seeded by `generator` (its own stream:
// not PyTorch's numbers). Not differentiable.
Tensor multinomial(
    const Tensor& probs, int64_t num_samples, bool replacement, Generator& generator);
Tensor multinomial(const Tensor& probs, int64_t num_samples, bool replacement = false);

// ---- random -----------------------------------------------------------------------------------
// Inverted dropout: in training each element is zeroed with probability p and the rest scaled by
// 1/(1 − p); p = 0 is the identity, p = 1 gives zeros; outside training it is the identity.
Tensor dropout(const Tensor& x, double p, bool training, Generator& generator);
Tensor dropout(const Tensor& x, double p, bool training = true);

// ---- rotary position embedding (ops_rotary.cpp) -------------------------------------------------
// Which features of a row form the pairs that rotary position embedding turns:
//   interleaved  pair j = (x[2j], x[2j+1]): RoFormer (Su et al. 2021), Meta's Llama
//                (view_as_complex), the column pairs (2j, 2j+1) of d2l's sinusoid table
//   halves       pair j = (x[j], x[j + r/2]): GPT-NeoX's rotate_half (also Hugging Face's Llama)
enum class RotaryPairs { interleaved, halves };
// x (..., T, d), cos and sin (T, r/2) with r even, 0 < r ≤ d: row t's pair j is turned by θ_{t,j}
// (cos and sin give cos θ and sin θ): (a, b) -> (a cos θ − b sin θ, a sin θ + b cos θ); features
// r … d − 1 pass through (partial rotary, GPT-NeoX's rotary_pct). Backward: the rotation by −θ.
// x may be any strided view; when it is a dense permuted one — the head view
// W_q(X).reshape({B,T,H,d}).permute({0,2,1,3}) — the output and x's gradient are laid out like it,
// so ag::attention reads the heads in place and the projection gets a (B, T, H, d) gradient
// without a copy. cos and sin have x's dtype (a DTypeError otherwise) and are not differentiated:
// one that requires grad is a ValueError. Other shapes are a ShapeError naming them.
// (The derivation from the seed's 2 × 2 rotation: ops_rotary.cpp; the angles:
// nn::RotaryEmbedding.)
Tensor rotary_embedding(const Tensor& x, const Tensor& cos, const Tensor& sin,
    RotaryPairs pairs = RotaryPairs::interleaved);

// ---- attention (ops_attention.cpp, ops_flash_attention.cpp) -------------------------------------
// Which kernel ag::attention runs; both compute the same function (up to the rounding of sums
// taken in another order), with the same dropout draws and the same weights on request:
//   whole_rows  each head's (Tq × Tk) weights at once, kept for the backward; recorded as
//               Op::scaled_dot_product_attention;
//   tiled       64 × 128 tiles with an online softmax (FlashAttention's algorithm on a CPU), no
//               weights kept: the backward recomputes them, O(T) memory per head instead of O(T²);
//               recorded as Op::flash_attention;
//   automatic   (the default) tiled from kTiledAttentionFromKeys keys on, where it is the faster
//               one on the benchmark machine (docs/benchmarks.md, "Tiled attention"); whole_rows
//               below, where a head's weights fit in the core's cache anyway.
// One process-wide setting, like nn::fused_kernels(): benchmarks and tests force a kernel with it.
enum class AttentionKernel { automatic, whole_rows, tiled };
inline constexpr int64_t kTiledAttentionFromKeys = 1024;

AttentionKernel attention_kernel();
void set_attention_kernel(AttentionKernel kernel);
// Whether ag::attention runs the tiled kernel for `keys` keys under the current setting.
bool use_tiled_attention(int64_t keys);

// Sets attention_kernel() for a scope and restores the previous setting on exit:
//   { ag::AttentionKernelGuard tiled(ag::AttentionKernel::tiled); Tensor O = ag::attention(...); }
using AttentionKernelGuard =
    ScopedSetting<AttentionKernel, &attention_kernel, &set_attention_kernel>;

struct AttentionOptions;

// The attention weights of one ag::attention call, before dropout, as d2l's attention_weights.
// The whole-row kernel forms them anyway and they are kept; the tiled kernel never does, so they
// are formed on the first request (from that call's q, k, valid lengths, ALiBi slopes and head
// grouping, by the whole-row kernel: the same bits either way) and then kept.
class AttentionWeights {
 public:
  AttentionWeights() = default;  // none: tensor() is undefined
  // (B, H, Tq, Tk), detached. The whole-row kernel's backward reads this very tensor: changing it
  // in place makes that backward throw an AutogradError.
  const Tensor& tensor() const;

 private:
  friend Tensor attention(
      const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& options);
  explicit AttentionWeights(Tensor weights) : weights_(std::move(weights)) {}
  AttentionWeights(Tensor queries, Tensor keys, Tensor valid_lens, std::vector<double> alibi_slopes,
      bool enable_gqa)
      : queries_(std::move(queries)),
        keys_(std::move(keys)),
        valid_lens_(std::move(valid_lens)),
        alibi_slopes_(std::move(alibi_slopes)),
        enable_gqa_(enable_gqa) {}

  mutable Tensor weights_;                      // (B, H, Tq, Tk), once formed
  mutable Tensor queries_, keys_, valid_lens_;  // the tiled call's, until then
  mutable std::vector<double> alibi_slopes_;    // and its AttentionOptions
  bool enable_gqa_ = false;
};

// Scaled dot-product attention of B·H heads in one op, d2l's DotProductAttention fused:
//   O = dropout(masked_softmax(Q·Kᵀ / √d, valid_lens)) · V
// q (B, H, Tq, d), k (B, H, Tk, d), v (B, H, Tk, dv) -> O (B, H, Tq, dv), by the kernel
// attention_kernel() picks for Tk keys (above). q, k, v may be any strided views whose last dim
// has stride 1 (e.g. x.reshape({B,T,H,d}).permute({0,2,1,3})): each head is read in place, never
// copied. O is a view of a dense (B, Tq, H, dv) buffer, so that
// O.permute({0,2,1,3}).reshape({B, Tq, H·dv}) is a view too.
// valid_lens is undefined, (B,) or (B, Tq) (integers in [0, Tk], any dtype; the same for every
// head): key positions ≥ the valid length get weight 0, and a length of 0 gives the uniform
// weights 1/Tk, as nn::masked_softmax. Dropout with probability dropout_p (when training) drops
// the weights ag::dropout would drop on them as a contiguous (B·H, Tq, Tk) tensor drawn from
// `generator`. weights_out, if given, receives the weights (AttentionWeights). dv may be 0.
// Errors name the kernel's op: "scaled_dot_product_attention: ..." or "flash_attention: ...".
// AttentionOptions (below) adds a causal mask, ALiBi's biases and grouped-query attention.
Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& valid_lens,
    double dropout_p, bool training, Generator& generator, AttentionWeights* weights_out = nullptr);

// The same with PyTorch's keywords, F.scaled_dot_product_attention(q, k, v, is_causal=True):
//   Tensor O = ag::attention(q, k, v, {.is_causal = true});  // nanoGPT's CausalSelfAttention
//   Tensor O = ag::attention(q, k, v,                        // Llama's grouped-query attention:
//       {.is_causal = true, .enable_gqa = true});            // k, v (B, Hkv, Tk, d), Hkv | H
//   Tensor O = ag::attention(q, k, v,                        // ALiBi's linear distance biases
//       {.is_causal = true, .alibi_slopes = ag::alibi_slopes(H)});
struct AttentionOptions {
  Tensor valid_lens = Tensor();  // undefined, (B,) or (B, Tq), as above
  // Query i sees keys 0 … i + (Tk − Tq): the queries are the last Tq of the Tk positions. For
  // Tq = Tk that is PyTorch's is_causal; for Tq < Tk (decoding with a key/value cache) it is
  // PyTorch's causal_lower_right — its is_causal would align the queries with the first keys.
  // Tq > Tk is a ShapeError (a query would see no key). With valid_lens too, a query sees the keys
  // both allow. The kernels skip the masked keys, as they skip those past a valid length.
  bool is_causal = false;
  double dropout_p = 0;            // applied when training, as ag::dropout
  bool training = true;            // (PyTorch's function applies dropout_p always)
  Generator* generator = nullptr;  // for dropout; null: default_generator()
  AttentionWeights* weights_out = nullptr;
  // ALiBi (Press et al. 2022, "Train Short, Test Long"): empty, or one slope m_h per query head
  // (H of them): the score of query i and key j becomes q·k/√d − m_h·|p_i − j|, where p_i = Tk − Tq
  // + i is query i's position among the keys (the queries are the last Tq of the Tk positions, as
  // is_causal's). Under a causal mask j ≤ p_i and the bias is the paper's −m_h·(p_i − j); without
  // one it is symmetric. The bias is a constant: it changes the weights, not the gradient formulas.
  // The slopes must be finite (ValueError); H of them, else a ShapeError.
  std::vector<double> alibi_slopes = {};
  // Grouped-query attention (PyTorch's enable_gqa): k and v may have Hkv heads where Hkv divides
  // q's H; query head h reads key/value head h / (H / Hkv) (Llama's repeat_kv order), and the
  // gradient of a key/value head is the sum over the H / Hkv query heads that read it. Hkv = 1 is
  // multi-query attention. Without it, Hkv != H stays a ShapeError.
  bool enable_gqa = false;
};
Tensor attention(
    const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& options = {});
// ALiBi's slopes for num_heads heads, as the paper's reference code (get_slopes): for n a power of
// two, m_h = 2^(−8h/n), h = 1 … n; otherwise the slopes of the largest power of two below n, then
// every other slope of twice that power, until there are n. ValueError for num_heads < 1.
//   ag::alibi_slopes(8)  // {1/2, 1/4, …, 1/256}
//   ag::alibi_slopes(6)  // {1/4, 1/16, 1/64, 1/256} of 4 heads, then {1/2, 1/8} of 8
std::vector<double> alibi_slopes(int64_t num_heads);
// The bias ALiBi adds to the scaled scores, (H, Tq, Tk): bias[h, i, j] = −slopes[h]·|(Tk − Tq + i) −
// j|, computed in double and rounded once to dtype — exactly what the kernels add, so that the
// composed path softmax(Q·Kᵀ/√d + alibi_bias(...)) gives the fused kernels' bits. Not
// differentiable (a constant). ValueError for negative sizes or a non-finite slope, DTypeError for
// a dtype that is not floating.
Tensor alibi_bias(const std::vector<double>& slopes, int64_t queries, int64_t keys, DType dtype);
// The per-query valid lengths (B, Tq) of a causal mask over Tk keys, combined with valid_lens
// (undefined, (B,) or (B, Tq)) as AttentionOptions::is_causal does; float64. ShapeError naming
// `op` for Tq > Tk.
Tensor causal_valid_lens(
    int64_t batch, int64_t queries, int64_t keys, const Tensor& valid_lens, const char* op);

// ---- threads ----------------------------------------------------------------------------------
// set_num_threads, get_num_threads and parallel_for are declared in autograd/parallel.h
// (included above).

// ---- helpers shared by the ops (public because custom ops need them too) ---------------------
// The broadcast shape of a and b, or a ShapeError naming `op` and both shapes. It may hold more
// elements than int64 counts ([2^32, 1] and [1, 2^32]): check it with checked_numel (ag::empty
// does) before using its element count.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);
// Sums `grad` over the dims along which `shape` was broadcast to grad's shape, giving `shape`.
// Every op that broadcasts reduces its input gradients through this one function.
Tensor sum_to(const Tensor& grad, const Shape& shape);
// d2l's valid_lens for B·Q query rows over K keys: (B,) — one length per batch row, shared by its
// Q queries — or (B, Q), holding integers in [0, K]. Returns the length of every row (b, q) in
// row-major order, or throws a ShapeError starting "op:" that names valid_lens's shape and
// `queries` (e.g. "X of shape [2,3,4]") for a wrong shape, or `keys` for a length out of range.
// masked_softmax, its fused kernel and the attention ops all check valid_lens through this.
std::vector<int64_t> valid_lengths_per_query(const Tensor& valid_lens, int64_t B, int64_t Q,
    int64_t K, const char* op, const std::string& queries, const std::string& keys);

// The values of an index tensor — token ids, class targets, valid lengths — as doubles for `op` to
// range-check and use: an int64 tensor's exactly (one beyond ±2^53, past any size a tensor has, is
// a ShapeError naming `op`), a float32/float64 tensor's as they are (ag took ids in them before it
// had int64; the caller checks that each is an integer), a bool tensor a DTypeError naming `op`.
std::vector<double> index_values(const Tensor& index, const char* op);

// ---- norms (not differentiable) -------------------------------------------------------------
// Σ x² of t's elements in double, as one partial sum per block of 4096 elements (ag's threads
// split the blocks), returned in block order: adding them in that order gives the same result on
// any number of threads. optim::clip_grad_norm and nn::grad_norms both sum through this, so the
// norm the summary reports is the one clipping sees, to the last bit.
std::vector<double> squared_norm_partials(const Tensor& t);

}  // namespace ag
