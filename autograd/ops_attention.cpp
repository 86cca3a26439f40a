// Attention of B·H heads as one op, ag::attention, and the first of the two kernels it chooses
// between (the d2l function both compute is in ops.h):
//
//   kernel                                        runs (automatic)    holds for the backward
//   scaled_dot_product_attention (below)          Tk < 1024 keys      each head's (Tq × Tk) weights
//   flash_attention (ops_flash_attention.cpp)     Tk ≥ 1024 keys      one log-sum-exp per query row
//
// as tinygrad's scaled_dot_product_attention chooses its flash kernel inside: the layers above
// (nn::MultiHeadAttention) call one op. The 1024 is kTiledAttentionFromKeys, where the tiled kernel
// became the faster one on the benchmark machine (docs/benchmarks.md, "Tiled attention");
// set_attention_kernel forces either kernel. What both kernels share — reading the heads in place,
// checking the operands, the valid length of each query row, the scaled scores — is in this file
// too (declared in detail/attention_kernels.h), so they cannot drift apart.
//
// The whole-row kernel: fused scaled dot-product attention, forward and backward together
// (llm.c-style numbered passes). The same function as d2l's composed DotProductAttention on
// transpose_qkv'd inputs (nn/attention.cpp), in one op:
//
//   S  = Q·Kᵀ / √d + A             (B, H, Tq, Tk)   a gemm per head, Kᵀ read with a BLAS flag; A
//                                                   ALiBi's bias, if asked for (below)
//   P  = masked_softmax(S)         (B, H, Tq, Tk)   key positions ≥ valid_len get weight exactly 0;
//                                                   a row with valid_len 0 is uniform 1/Tk (d2l's
//                                                   −1e6 fill makes every score equal)
//   P̃  = P ⊙ D                     (B, H, Tq, Tk)   D: dropout, 1/(1 − p) or 0 (the draws of
//                                                   ag::dropout)
//   O  = P̃·V                       (B, H, Tq, dv)
//
// No copies for the heads: q, k and v may be any strided (B, H, T, C) views whose last dim is
// adjacent in memory — W_q(x).reshape({B,T,H,d}).permute({0,2,1,3}) is one — and each head's
// (T, C) matrix is handed to BLAS with its row stride (H·d there) as the leading dimension. The
// output is allocated as a dense (B, Tq, H, dv) buffer and returned as its (B, H, Tq, dv) view, so
// that permute({0,2,1,3}).reshape({B, Tq, H·dv}) afterwards is a free view as well.
//
// Dropout: D is the mask ag::dropout would draw for P as a contiguous (B·H, Tq, Tk) tensor — the
// same number of Philox blocks reserved at the same point of the generator's stream — so the fused
// and the composed path drop the same weights. Like ag::dropout, D is kept as one byte per weight.
//
// ALiBi (AttentionOptions::alibi_slopes; Press et al. 2022): A_ij = −m_h·|p_i − j|, with m_h the
// slope of head h and p_i = Tk − Tq + i query i's position among the keys (the queries are the last
// Tq positions, as is_causal's). Under a causal mask j ≤ p_i and A_ij = −m_h·(p_i − j): the further
// back a key, the lower its score, linearly — no position is added to the tokens themselves. The
// bias is added where both kernels scale their scores (scale_scores in detail/attention_kernels.h),
// in double and rounded once, as ag::alibi_bias rounds it: the composed
// softmax(Q·Kᵀ / √d + alibi_bias(...)) gives these weights bit for bit. A is a constant, so S's
// gradient dS (step (4) below) is unchanged, and dQ, dK are still those of Q·Kᵀ / √d.
//
// Grouped-query attention (AttentionOptions::enable_gqa; Ainslie et al. 2023): k and v hold Hkv
// heads, each read by G = H / Hkv query heads — query head h reads key/value head h / G (Llama's
// repeat_kv order), in place, never repeated in memory. Hkv = 1 is multi-query attention. A key
// head K_c enters the scores of its G query heads and V_c their outputs, so by the chain rule their
// gradients are sums over the group:
//   dK_c = Σ_{h: h/G = c} dS_hᵀ·Q_h / √d        dV_c = Σ_{h: h/G = c} P̃_hᵀ·dO_h
// The backward splits the work by key/value head: one thread runs the G query heads of a key/value
// head in order, the first writing dK_c and dV_c and each next one adding to them, so the sums are
// the same on any number of threads; with G = 1 nothing is added and the bits are those of plain
// multi-head attention. The dropout mask stays that of the (B·H, Tq, Tk) weights.
//
// Memory held for the backward: the q, k, v views (the caller's tensors, not copies), P
// (B·H·Tq·Tk elements) and the dropout mask (B·H·Tq·Tk bytes). The composed path holds P, P̃,
// the masking tensor, and Q, K, V in their transpose_qkv copies.
//
// Backward, given dO (B, H, Tq, dv), per head (writing P̃ = P ⊙ D):
//   (1) dV = P̃ᵀ·dO                              (Tk, Tq)·(Tq, dv) -> (Tk, dv)
//   (2) dP̃ = dO·Vᵀ                               (Tq, dv)·(dv, Tk) -> (Tq, Tk)
//   (3) dP = dP̃ ⊙ D                              the forward's mask
//   (4) dS = P ⊙ (dP − Σ_j dP_j P_j) per row     softmax's backward; 0 at masked positions (also in
//                                                a valid_len-0 row, where P is uniform but every
//                                                score was replaced by −1e6)
//   (5) dQ = dS·K / √d                           (Tq, Tk)·(Tk, d) -> (Tq, d)
//   (6) dK = dSᵀ·Q / √d                          (Tk, Tq)·(Tq, d) -> (Tk, d)
// with (1) and (6) added to the key/value head's sums under grouped-query attention (above).
// The B·H heads run in parallel on ag's threads (single-threaded gemms each; in the backward the
// B·Hkv groups of heads). Where rows are masked, each product runs in blocks of rows over the keys
// that carry weight ("the masked keys", below).
#include <cblas.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cmath>
#include <memory>
#include <vector>

#include "autograd/allocator.h"
#include "autograd/autograd.h"
#include "autograd/detail/attention_kernels.h"
#include "autograd/detail/blas.h"
#include "autograd/detail/kernels.h"
#include "autograd/detail/target_clones.h"
#include "autograd/ops.h"
#include "autograd/parallel.h"
#include "autograd/profiler.h"

namespace ag {

// ---- the kernel choice -------------------------------------------------------------------------

namespace {
std::atomic<AttentionKernel> g_attention_kernel{AttentionKernel::automatic};
}  // namespace

AttentionKernel attention_kernel() { return g_attention_kernel.load(std::memory_order_relaxed); }
void set_attention_kernel(AttentionKernel kernel) {
  g_attention_kernel.store(kernel, std::memory_order_relaxed);
}

bool use_tiled_attention(int64_t keys) {
  switch (attention_kernel()) {
    case AttentionKernel::whole_rows:
      return false;
    case AttentionKernel::tiled:
      return true;
    case AttentionKernel::automatic:
      break;
  }
  return keys >= kTiledAttentionFromKeys;
}

Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& valid_lens,
    double dropout_p, bool training, Generator& generator, AttentionWeights* weights_out) {
  return attention(q, k, v,
      {.valid_lens = valid_lens,
          .dropout_p = dropout_p,
          .training = training,
          .generator = &generator,
          .weights_out = weights_out});
}

Tensor causal_valid_lens(
    int64_t batch, int64_t queries, int64_t keys, const Tensor& valid_lens, const char* op) {
  if (queries > keys)
    fail<ShapeError>(op, ": is_causal with ", queries, " queries and ", keys,
        " keys: the queries are the last of the key positions, so there cannot be more of them");
  const bool per_row = valid_lens.defined() && valid_lens.shape() == Shape{batch};
  const bool per_query = valid_lens.defined() && valid_lens.shape() == Shape{batch, queries};
  if (valid_lens.defined() && !per_row && !per_query)
    fail<ShapeError>(op, ": valid_lens of shape ", shape_str(valid_lens.shape()), " does not fit ",
        batch, " rows of ", queries, " queries (expected [", batch, "] or [", batch, ",", queries,
        "])");
  const std::vector<double> given =
      valid_lens.defined() ? index_values(valid_lens, op) : std::vector<double>{};
  // Checked here, as the kernels check them: the smaller of both would hide a length past Tk.
  for (double length : given)
    if (!(length >= 0 && length <= static_cast<double>(keys)) || length != std::floor(length))
      fail<ShapeError>(op, ": valid length ", length, " is not an integer in [0, ", keys,
          "] (valid_lens of shape ", shape_str(valid_lens.shape()), ")");
  std::vector<double> lengths(static_cast<std::size_t>(batch * queries));
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t i = 0; i < queries; ++i) {
      // query i is position keys − queries + i: it sees that many keys and itself
      double length = static_cast<double>(keys - queries + i + 1);
      if (valid_lens.defined())
        length = std::min(length, given[static_cast<std::size_t>(per_row ? b : b * queries + i)]);
      lengths[static_cast<std::size_t>(b * queries + i)] = length;
    }
  return tensor(lengths, {batch, queries}, float64);  // (B, Tq)
}

Tensor attention(
    const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& options) {
  Generator& generator = options.generator ? *options.generator : default_generator();
  Tensor valid_lens = options.valid_lens;
  // A q or k that is not 4-D is left to the kernel's checks, which name it.
  if (options.is_causal && q.dim() == 4 && k.dim() == 4)
    valid_lens = causal_valid_lens(q.size(0), q.size(2), k.size(2), valid_lens, "attention");
  const detail::AttentionVariant variant{options.alibi_slopes, options.enable_gqa};
  // The number of keys decides; a k that is not (B, Hkv, Tk, d) is reported by the kernel's checks.
  const int64_t keys = k.dim() == 4 ? k.size(2) : 0;
  if (!use_tiled_attention(keys)) {
    Tensor weights;                                     // (B, H, Tq, Tk), before dropout
    Tensor out = detail::scaled_dot_product_attention(  // (B, H, Tq, dv)
        q, k, v, valid_lens, options.dropout_p, options.training, generator,
        options.weights_out ? &weights : nullptr, variant);
    if (options.weights_out) *options.weights_out = AttentionWeights(weights.detach());
    return out;
  }
  Tensor out = detail::flash_attention(  // (B, H, Tq, dv)
      q, k, v, valid_lens, options.dropout_p, options.training, generator, variant);
  // The tiled kernel never forms the weights: keep what forms them, should they be asked for.
  if (options.weights_out)
    *options.weights_out = AttentionWeights(
        q.detach(), k.detach(), valid_lens, options.alibi_slopes, options.enable_gqa);
  return out;
}

std::vector<double> alibi_slopes(int64_t num_heads) {
  if (num_heads < 1) fail<ValueError>("alibi_slopes: ", num_heads, " heads (expected at least 1)");
  // The reference code's get_slopes (Press et al., github.com/ofirpress/attention_with_linear_biases):
  //   n a power of two:  m_h = 2^(−8h/n), h = 1 … n — a geometric sequence from 2^(−8/n) to 2^(−8);
  //   otherwise:         the n₂ slopes of n₂ = 2^⌊log₂ n⌋ heads, then slopes 1, 3, 5, … (every
  //                      other, from the first) of 2·n₂ heads, which fall between them, until n.
  // Computed as that code computes them, start = 2^(−2^−(log₂ n − 3)) = 2^(−8/n) and
  // m_h = start·start^(h−1), so that the slopes are its bits (exact powers of two up to 8 heads;
  // beyond, within a few ulps of 2^(−8h/n)).
  const auto power_of_two_slopes = [](int64_t n) {
    const double start = std::pow(2.0, -std::pow(2.0, -(std::log2(static_cast<double>(n)) - 3)));
    std::vector<double> slopes(static_cast<std::size_t>(n));
    for (int64_t i = 0; i < n; ++i)
      slopes[static_cast<std::size_t>(i)] = start * std::pow(start, static_cast<double>(i));
    return slopes;
  };
  int64_t below = 1;  // the largest power of two ≤ num_heads
  while (below * 2 <= num_heads) below *= 2;
  std::vector<double> slopes = power_of_two_slopes(below);
  const std::vector<double> twice = power_of_two_slopes(2 * below);
  for (std::size_t h = 0; static_cast<int64_t>(slopes.size()) < num_heads; h += 2)
    slopes.push_back(twice[h]);
  return slopes;
}

Tensor alibi_bias(const std::vector<double>& slopes, int64_t queries, int64_t keys, DType dtype) {
  constexpr const char* kOpName = "alibi_bias";
  if (queries < 0 || keys < 0)
    fail<ValueError>(
        kOpName, ": ", queries, " queries and ", keys, " keys (expected sizes of at least 0)");
  if (dtype != float32 && dtype != float64)
    fail<DTypeError>(
        kOpName, ": dtype ", dtype_name(dtype), " is not floating (expected float32 or float64)");
  for (std::size_t h = 0; h < slopes.size(); ++h)
    if (!std::isfinite(slopes[h]))
      fail<ValueError>(kOpName, ": slope ", slopes[h], " of head ", h, " is not finite");
  const int64_t H = static_cast<int64_t>(slopes.size());
  Tensor bias = empty({H, queries, keys}, dtype);  // (H, Tq, Tk)
  dispatch(dtype, [&]<typename T>() {
    T* out = bias.data<T>();
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < queries; ++i)
        for (int64_t j = 0; j < keys; ++j)  // query i is key position Tk − Tq + i
          *out++ =
              detail::alibi_term<T>(slopes[static_cast<std::size_t>(h)], keys - queries + i - j);
  });
  return bias;
}

const Tensor& AttentionWeights::tensor() const {
  if (!weights_.defined() && queries_.defined()) {
    // The whole-row kernel with no values (dv = 0) on the tiled call's q and k (and its ALiBi
    // slopes and head grouping): its weights, bit for bit, with no dropout (d2l's
    // attention_weights are taken before it).
    NoGradGuard no_grad;
    Generator unused(0);
    const int64_t B = keys_.size(0), Hkv = keys_.size(1), Tk = keys_.size(2);
    const Tensor no_values = empty({B, Hkv, Tk, 0}, keys_.dtype());  // (B, Hkv, Tk, 0)
    detail::scaled_dot_product_attention(queries_, keys_, no_values, valid_lens_, 0.0, false,
        unused, &weights_, {alibi_slopes_, enable_gqa_});  // weights (B, H, Tq, Tk)
    queries_ = keys_ = valid_lens_ = Tensor();             // formed once, then kept
    alibi_slopes_.clear();
  }
  return weights_;
}

namespace detail {

// ---- what the two kernels share ----------------------------------------------------------------

Heads heads_of(const Tensor& t) {
  const int64_t rows = t.size(2), cols = t.size(3);
  const bool columns_adjacent = t.strides()[3] == 1 || cols <= 1;
  const bool rows_apart =
      rows <= 1 || (t.strides()[2] >= std::max<int64_t>(cols, 1) && t.strides()[2] <= INT_MAX);
  Tensor readable = t;
  if (!columns_adjacent || !rows_apart) {
    NoGradGuard no_grad;  // a private copy for reading; the op's input stays t
    readable = contiguous(t);
  }
  const int64_t row_stride = rows <= 1 ? std::max<int64_t>(cols, 1) : readable.strides()[2];
  return {readable, readable.strides()[0], readable.strides()[1], row_stride};
}

Tensor gradient_like(const Tensor& t, bool zero) {
  const Shape& sizes = t.shape();
  const Shape& strides = t.strides();
  const auto fresh = [&] { return zero ? zeros(sizes, t.dtype()) : empty(sizes, t.dtype()); };
  if (t.is_contiguous() || t.numel() == 0) return fresh();
  // t's dims from the largest stride to the smallest (ties keep their order), and a buffer that
  // holds them in that order, contiguous: PyTorch's empty_like (preserve_format) for a tensor that
  // is not dense. A permuted view keeps its layout; a slice's (q of a fused QKV projection) closes
  // up its gaps, (B, T, 3·H·d) memory read as (B, H, T, d) becoming (B, T, H, d).
  std::vector<std::size_t> order(sizes.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
      [&](std::size_t a, std::size_t b) { return strides[a] > strides[b]; });
  Shape buffer_shape(sizes.size()), view_strides(sizes.size());
  int64_t expected_stride = 1;
  for (std::size_t i = order.size(); i-- > 0;) {
    const std::size_t dim = order[i];
    if (sizes[dim] > 1 && strides[dim] == 0) return fresh();  // expanded: no layout to keep
    buffer_shape[i] = sizes[dim];
    view_strides[dim] = expected_stride;
    expected_stride *= sizes[dim];
  }
  // The kernels write rows of adjacent elements: a layout whose last dim is strided is of no use.
  if (sizes.back() > 1 && view_strides.back() != 1) return fresh();
  const Tensor buffer = zero ? zeros(buffer_shape, t.dtype()) : empty(buffer_shape, t.dtype());
  return detail::make_view(buffer, sizes, view_strides, 0);
}

HeadGradients head_gradients(
    const Heads& Q, const Heads& K, const Heads& V, const NeedsGrad& needs, bool zero) {
  // one operand's gradient buffer and its Heads, where the backward asks for it
  const auto allocate = [zero](bool wanted, const Heads& operand, Tensor& grad, Heads& grad_heads) {
    if (!wanted) return;
    grad = gradient_like(operand.tensor, zero);
    grad_heads = heads_of(grad);
  };
  HeadGradients g;
  allocate(needs[0], Q, g.dq, g.dQ);
  allocate(needs[1], K, g.dk, g.dK);
  allocate(needs[2], V, g.dv, g.dV);
  return g;
}

ValidLengths::ValidLengths(
    const Tensor& valid_lens, const Tensor& q, const Tensor& k, const char* op)
    : queries_(q.size(2)), keys_(k.size(2)) {
  if (!valid_lens.defined()) return;
  per_query_ = valid_lengths_per_query(valid_lens, q.size(0), q.size(2), k.size(2), op,
      "queries of shape " + shape_str(q.shape()), "keys of shape " + shape_str(k.shape()));
}

int64_t check_attention_operands(const Tensor& q, const Tensor& k, const Tensor& v,
    double dropout_p, const AttentionVariant& variant, const char* op) {
  const auto shapes = [&] {
    return "q " + shape_str(q.shape()) + ", k " + shape_str(k.shape()) + " and v " +
           shape_str(v.shape());
  };
  if (q.dim() != 4 || k.dim() != 4 || v.dim() != 4 || q.size(0) != k.size(0) ||
      q.size(0) != v.size(0) || k.size(1) != v.size(1) || q.size(3) != k.size(3) ||
      k.size(2) != v.size(2))
    fail<ShapeError>(op, ": ", shapes(), " do not fit (expected (B,H,Tq,d), ",
        variant.enable_gqa ? "(B,Hkv,Tk,d), (B,Hkv,Tk,dv)" : "(B,H,Tk,d), (B,H,Tk,dv)", ")");
  // The heads: H of each, or with grouped-query attention Hkv key/value heads, G = H / Hkv query
  // heads reading each.
  const int64_t H = q.size(1), Hkv = k.size(1);
  if (!variant.enable_gqa && H != Hkv)
    fail<ShapeError>(op, ": ", shapes(),
        " do not fit (expected (B,H,Tq,d), (B,H,Tk,d), (B,H,Tk,dv)); for fewer key/value heads "
        "than query heads, set enable_gqa");
  // (A key/value head read by no query head would have no gradient: refused too.)
  if (variant.enable_gqa && (Hkv == 0 ? H != 0 : (H % Hkv != 0 || H == 0)))
    fail<ShapeError>(op, ": enable_gqa with ", H, " query heads and ", Hkv,
        " key/value heads: the query heads must split evenly among the key/value heads, at least "
        "one each (",
        shapes(), ")");
  check_same_dtype(q, k, op);
  check_same_dtype(q, v, op);
  for (const Tensor* t : {&q, &k, &v})
    for (int64_t size : t->shape())
      if (size > INT_MAX) fail<ShapeError>(op, ": ", shapes(), " exceed BLAS's 32-bit sizes");
  // The (B, H, Tq, Tk) weights, formed or not, are counted in int64 (dropout's mask indexes them).
  int64_t weights = 0;
  if (__builtin_mul_overflow(q.size(0) * q.size(1), q.size(2) * k.size(2), &weights))
    fail<ShapeError>(op, ": q ", shape_str(q.shape()), " and k ", shape_str(k.shape()),
        " give more than ", INT64_MAX, " attention weights (B·H·Tq·Tk)");
  if (!(dropout_p >= 0.0 && dropout_p <= 1.0))
    fail<ValueError>(op, ": dropout probability ", dropout_p, " is outside [0, 1] (q of shape ",
        shape_str(q.shape()), ")");
  const std::vector<double>& slopes = variant.alibi_slopes;
  if (!slopes.empty() && static_cast<int64_t>(slopes.size()) != H)
    fail<ShapeError>(op, ": ", slopes.size(), " ALiBi slopes for q ", shape_str(q.shape()),
        " with ", H, " heads (expected one slope per query head)");
  for (std::size_t h = 0; h < slopes.size(); ++h)
    if (!std::isfinite(slopes[h]))
      fail<ValueError>(op, ": ALiBi slope ", slopes[h], " of head ", h,
          " is not finite (q of shape ", shape_str(q.shape()), ")");
  return Hkv == 0 ? 1 : H / Hkv;  // G ≥ 1
}

// ---- the whole-row kernel ----------------------------------------------------------------------

namespace {

// The forward draws the dropout mask of at least this many weights per call (whole heads).
constexpr int64_t kMaskDrawElements = 4096;

// Prefetching the next head. A head's operands are a few rows of Q, K, V and dO, 128 to 1024 bytes
// apart in the projections' (B, T, H·d) outputs, and its P: too short and too scattered for the
// CPU's own prefetchers to catch, and at medium's sizes (6 MB of Q, K and V a call, 4 MB of P)
// mostly out of the caches. So while one head computes, the loops ask for the next head's rows,
// each part one step before it is needed: the rows a product will read, and the rows it will write
// (fetched for writing, so that its stores do not wait for the lines). In medium's step this made
// attention 11 % faster (docs/benchmarks.md). Heads smaller than kPrefetchHeadWeights (d2l's
// 10 × 10) sit in the L1 cache already, and there the prefetches cost more than they save.
constexpr int64_t kPrefetchHeadWeights = 1024;
enum class Access { read, write };

// Asks for the cache lines of `rows` rows of `width` elements, `row_stride` elements apart, to be
// brought to the L2 cache (a hint: it never faults, and the CPU may drop it).
template <class T>
void prefetch_rows(const T* first, int64_t rows, int64_t row_stride, int64_t width, Access access) {
  constexpr int64_t kLineBytes = 64;
  const int64_t row_bytes = width * int64_t(sizeof(T));
  for (int64_t r = 0; r < rows; ++r) {
    const char* row = reinterpret_cast<const char*>(first + r * row_stride);
    for (int64_t offset = 0; offset < row_bytes; offset += kLineBytes) {
      if (access == Access::write)
        __builtin_prefetch(row + offset, /*rw=*/1, /*locality=*/2);
      else
        __builtin_prefetch(row + offset, /*rw=*/0, /*locality=*/2);
    }
  }
}

// ---- the masked keys ----
// Query row i gives the keys past its valid length len_i weight exactly 0, and softmax's backward
// gives them dS = 0 too. So every product over a head's (Tq × Tk) weights needs only the keys
// below each row's length — for a decoder's causal mask (len_i = i + 1) about half of them. The
// products below run in blocks of kMaskedKeysBlock query rows (or keys), each block over what its
// rows need:
//   scores            S[rows, 0:e] = A[rows]·B[0:e]ᵀ       e: the block's longest row; the scores
//                                                          past a row's length are never read
//   weights · B       C[rows] = W[rows, 0:e]·B[0:e]        the terms j ≥ e are 0·B_j
//   weightsᵀ · B      C[keys] = W[i0:Tq, keys]ᵀ·B[i0:Tq]   i0: the first row whose length reaches
//                                                          the block's keys; the rows above it
//                                                          weigh them 0
// Each element of C is a sum over k. ag's kernel makes it one fused multiply-add at a time, in
// order, from 0 (test_small_gemm), and a term 0·x (x finite) at either end of that chain changes
// no bit of it: the shorter products give the whole products' bits, and so the same losses.
// Products that ag's kernel does not make (float64, heads past 64, AG_SMALL_GEMM=off) may round
// differently in blocks, within float tolerance. Where no row is masked, one whole product runs.
constexpr int64_t kMaskedKeysBlock = 16;
std::atomic<bool> g_skips_masked_keys{true};

// True when some row of `lengths` (Tq of them) stops short of Tk keys, and skipping is on.
inline bool masks_keys(const int64_t* lengths, int64_t Tq, int64_t Tk) {
  if (!g_skips_masked_keys.load(std::memory_order_relaxed)) return false;
  for (int64_t i = 0; i < Tq; ++i)
    if (lengths[i] < Tk) return true;
  return false;
}

// The longest of lengths[i0, i1).
inline int64_t longest(const int64_t* lengths, int64_t i0, int64_t i1) {
  return *std::max_element(lengths + i0, lengths + i1);
}

// product(i0, rows, keys) for each block of rows [i0, i0 + rows) of kMaskedKeysBlock, keys the
// longest of their lengths: a row's masked keys are left out of its products, save those the
// longer rows of its block need. Where no row is masked, one product of all Tq rows and Tk keys.
template <class Product>
void by_row_blocks(int64_t Tq, int64_t Tk, const int64_t* lengths, const Product& product) {
  if (!masks_keys(lengths, Tq, Tk)) {
    product(0, Tq, Tk);
    return;
  }
  for (int64_t i0 = 0; i0 < Tq; i0 += kMaskedKeysBlock) {
    const int64_t rows = std::min(kMaskedKeysBlock, Tq - i0);
    product(i0, rows, longest(lengths, i0, i0 + rows));
  }
}

// S (Tq × Tk, row stride ldc) = A (Tq × k)·Bᵀ (B: Tk × k) on the keys [0, lengths[i]) of each row
// i (the entries past them are left as they were).
template <class T>
void masked_scores(int64_t Tq, int64_t Tk, int64_t k, const T* A, int64_t lda, const T* B,
    int64_t ldb, T* S, int64_t ldc, const int64_t* lengths) {
  by_row_blocks(Tq, Tk, lengths, [&](int64_t i0, int64_t rows, int64_t keys) {
    // (rows, k)·(k, keys) -> (rows, keys) of S
    gemm<T>(CblasNoTrans, CblasTrans, rows, keys, k, A + i0 * lda, lda, B, ldb, S + i0 * ldc, ldc);
  });
}

// C (Tq × n) = W (Tq × Tk, row stride Tk)·B (Tk × n), where W[i, j] = 0 for j ≥ lengths[i].
template <class T>
void masked_weights_times(int64_t Tq, int64_t Tk, int64_t n, const T* W, const T* B, int64_t ldb,
    T* C, int64_t ldc, const int64_t* lengths) {
  by_row_blocks(Tq, Tk, lengths, [&](int64_t i0, int64_t rows, int64_t keys) {
    // (rows, keys)·(keys, n) -> (rows, n) of C
    gemm<T>(CblasNoTrans, CblasNoTrans, rows, n, keys, W + i0 * Tk, Tk, B, ldb, C + i0 * ldc, ldc);
  });
}

// C (Tk × n) = Wᵀ (W: Tq × Tk, row stride Tk)·B (Tq × n), where W[i, j] = 0 for j ≥ lengths[i];
// or C += Wᵀ·B with accumulate (the key/value gradients of grouped-query attention, summed over
// the query heads of a group).
template <class T>
void masked_weights_transposed_times(int64_t Tq, int64_t Tk, int64_t n, const T* W, const T* B,
    int64_t ldb, T* C, int64_t ldc, const int64_t* lengths, bool accumulate) {
  if (!masks_keys(lengths, Tq, Tk)) {
    gemm<T>(CblasTrans, CblasNoTrans, Tk, n, Tq, W, Tk, B, ldb, C, ldc, accumulate);
    return;
  }
  for (int64_t j0 = 0; j0 < Tk; j0 += kMaskedKeysBlock) {
    const int64_t keys = std::min(kMaskedKeysBlock, Tk - j0);
    int64_t first_row = 0;  // rows above it have lengths ≤ j0: weight 0 on keys [j0, j0 + keys)
    while (first_row < Tq && lengths[first_row] <= j0) ++first_row;
    // (keys, Tq − first_row)·(Tq − first_row, n); with no rows, C's rows are 0 (or stay)
    gemm<T>(CblasTrans, CblasNoTrans, keys, n, Tq - first_row, W + first_row * Tk + j0, Tk,
        B + first_row * ldb, ldb, C + j0 * ldc, ldc, accumulate);
  }
}

// Turns the raw scores Q_i·K_jᵀ of one head's Tq query rows (Tq × Tk, contiguous) into attention
// weights in place: for row i with `len` valid keys
//   s_j = score_j / √d (− m·|p_i − j| with ALiBi, slope m of the head, p_i = Tk − Tq + i),
//   P_j = exp(s_j − max) / Σ_{j' < len} exp(s_j' − max) for j < len, P_j = 0 for j ≥ len
// and for a uniform row (len = 0: every score masked, all −1e6 in d2l) P_j = 1/Tk. The division,
// the bias and the softmax are the composed path's (the div op, the add of alibi_bias, then
// softmax's row arithmetic, softmax_rows giving softmax_row's bits), so the fused and the composed
// path give the same bits. `slope` is null without ALiBi. `rows` and `lengths` are scratch space
// for Tq entries.
template <class T>
void masked_softmax_head(T* P_head, int64_t Tq, int64_t Tk, const ValidLengths& valid_length,
    int64_t b, T sqrt_d, const double* slope, std::vector<T*>& rows,
    std::vector<int64_t>& lengths) {
  int64_t count = 0;  // rows with keys to take the softmax over
  for (int64_t i = 0; i < Tq; ++i) {
    T* row = P_head + i * Tk;
    const RowKeys keys = valid_length.keys(b, i);
    if (keys.uniform) {
      std::fill(row, row + Tk, static_cast<T>(1.0 / static_cast<double>(Tk)));
      continue;
    }
    const RowBias bias{slope ? *slope : 0.0, Tk - Tq + i};  // query i is key position Tk − Tq + i
    scale_scores(row, keys, keys.length, Tk, sqrt_d, slope ? &bias : nullptr);
    rows[static_cast<std::size_t>(count)] = row;
    lengths[static_cast<std::size_t>(count++)] = keys.length;
  }
  softmax_rows(rows.data(), lengths.data(), count);
}

// Softmax's backward on R rows of one head, in place (the backward's step (4)): on entry
// dS[r][0, len_r) holds dP, on exit
//   dS_j = P_j (dP_j − Σ_j' dP_j' P_j') / √d   for j < len_r   (Σ in double, from j' = 0 up)
// R rows side by side, so that the CPU overlaps their Σ loops (a chain of dependent adds each);
// every row rounds as a loop over that row alone would.
template <int R, class T>
[[gnu::always_inline]] inline void softmax_backward_row_group(
    T* const* dS, const T* const* P, const int64_t* lengths, T sqrt_d) {
  int64_t common = lengths[0];  // every row has elements [0, common)
  for (int r = 1; r < R; ++r) common = std::min(common, lengths[r]);
  double row_dot[R];  // Σ_j dP_j P_j
  for (int r = 0; r < R; ++r) row_dot[r] = 0;
  for (int64_t j = 0; j < common; ++j)
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) row_dot[r] += double(dS[r][j]) * double(P[r][j]);
  for (int r = 0; r < R; ++r) {
    for (int64_t j = common; j < lengths[r]; ++j) row_dot[r] += double(dS[r][j]) * double(P[r][j]);
    const T dot = static_cast<T>(row_dot[r]);
    for (int64_t j = 0; j < lengths[r]; ++j) dS[r][j] = P[r][j] * (dS[r][j] - dot) / sqrt_d;
  }
}

// Step (4) on a head's Tq rows (detail/attention_kernels.h): the rule above, and dS_j = 0 at the
// masked keys j ≥ len (their scores were the constant −1e6; a row with no valid key gets 0
// throughout). For float32 one copy per instruction set: the product of two floats is exact in
// double, so a fused multiply-add in Σ rounds as the separate multiply and add would. For float64
// (gradchecks) it would not, so that copy stays portable and rounds as before.
template <class T>
[[gnu::always_inline]] inline void softmax_backward_head_impl(
    T* dS, const T* P, const int64_t* lengths, int64_t Tq, int64_t Tk, T sqrt_d) {
  int64_t i = 0;
  for (; i + 4 <= Tq; i += 4) {
    T* const dS_rows[4] = {dS + i * Tk, dS + (i + 1) * Tk, dS + (i + 2) * Tk, dS + (i + 3) * Tk};
    const T* const P_rows[4] = {P + i * Tk, P + (i + 1) * Tk, P + (i + 2) * Tk, P + (i + 3) * Tk};
    softmax_backward_row_group<4>(dS_rows, P_rows, lengths + i, sqrt_d);
  }
  for (; i < Tq; ++i) {
    T* const dS_row = dS + i * Tk;
    const T* const P_row = P + i * Tk;
    softmax_backward_row_group<1>(&dS_row, &P_row, lengths + i, sqrt_d);
  }
  for (i = 0; i < Tq; ++i) std::fill(dS + i * Tk + lengths[i], dS + (i + 1) * Tk, T(0));
}

}  // namespace

AG_TARGET_CLONES void softmax_backward_head(
    float* dS, const float* P, const int64_t* lengths, int64_t Tq, int64_t Tk, float sqrt_d) {
  softmax_backward_head_impl(dS, P, lengths, Tq, Tk, sqrt_d);
}
void softmax_backward_head(
    double* dS, const double* P, const int64_t* lengths, int64_t Tq, int64_t Tk, double sqrt_d) {
  softmax_backward_head_impl(dS, P, lengths, Tq, Tk, sqrt_d);
}

bool skips_masked_keys() { return g_skips_masked_keys.load(std::memory_order_relaxed); }
void set_skips_masked_keys(bool skip) {
  g_skips_masked_keys.store(skip, std::memory_order_relaxed);
}

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
    const Tensor& valid_lens, double dropout_p, bool training, Generator& generator,
    Tensor* weights_out, const AttentionVariant& variant) {
  AG_PROFILE_OP(Op::scaled_dot_product_attention);
  constexpr const char* kOpName = "scaled_dot_product_attention";
  detail::check_floating(q, kOpName);
  // G query heads per key/value head: query head h reads key/value head h / G
  const int64_t G = check_attention_operands(q, k, v, dropout_p, variant, kOpName);
  const int64_t B = q.size(0), H = q.size(1), Tq = q.size(2), d = q.size(3);
  const int64_t Tk = k.size(2), dv = v.size(3);
  const double* slopes = variant.alibi_slopes.empty() ? nullptr : variant.alibi_slopes.data();
  const ValidLengths valid_length(valid_lens, q, k, kOpName);  // valid_length(b, i) of row (b, i)

  // The dropout mask of P as a contiguous (B·H, Tq, Tk) tensor: reserved now, drawn per head.
  const bool drop = training && dropout_p > 0.0;
  detail::DropoutMask mask;
  if (drop) mask = detail::reserve_dropout_mask(B * H * Tq * Tk, q.dtype(), dropout_p, generator);
  // The mask itself, one byte per weight (a quarter of P), drawn head by head in the forward and
  // read again by the backward.
  const std::shared_ptr<uint8_t> keep =
      drop ? detail::allocate_bytes(
                 static_cast<std::size_t>(B * H * Tq * Tk), kOpName, {B, H, Tq, Tk})
           : nullptr;  // from the cache

  const Heads Q = heads_of(q), K = heads_of(k), V = heads_of(v);
  // (B, H, Tq, Tk), contiguous: head (b, h) at (b·H + h)·Tq·Tk
  Tensor P = detail::empty({B, H, Tq, Tk}, q.dtype(), kOpName);
  // O as a dense (B, Tq, H, dv) buffer, returned as its (B, H, Tq, dv) view
  const Tensor out_buffer = empty({B, Tq, H, dv}, q.dtype());  // (B, Tq, H, dv)
  Tensor out = detail::make_view(
      out_buffer, {B, H, Tq, dv}, {Tq * H * dv, dv, H * dv, 1}, 0);  // (B, H, Tq, dv)
  const Heads O = heads_of(out);

  dispatch(q.dtype(), [&]<typename T>() {
    const T sqrt_d = static_cast<T>(std::sqrt(static_cast<double>(d)));
    const bool prefetch = Tq * Tk >= kPrefetchHeadWeights;
    parallel_for(B * H, Tq * Tk * (d + dv), [&](int64_t begin, int64_t end) {
      std::vector<T> dropped(
          drop ? static_cast<std::size_t>(Tq * Tk) : 0);           // (Tq, Tk) P̃ of one head
      std::vector<T*> softmax_rows(static_cast<std::size_t>(Tq));  // scratch for the softmax
      std::vector<int64_t> softmax_lengths(static_cast<std::size_t>(Tq));
      // the keys of each row that (1) must score, and that (4) weighs (a uniform row weighs all)
      std::vector<int64_t> score_lengths(static_cast<std::size_t>(Tq)),
          weight_lengths(static_cast<std::size_t>(Tq));
      // The mask is drawn for several heads at once when heads are small (d2l's 10 × 10), so
      // that each call fills whole vectors of Philox blocks: the same bits, element for element.
      const int64_t heads_per_draw = std::max<int64_t>(1, kMaskDrawElements / (Tq * Tk));
      int64_t drawn_until = begin;  // heads whose mask is drawn: [begin, drawn_until)
      for (int64_t head = begin; head < end; ++head) {
        const int64_t b = head / H, h = head % H, kv = h / G;  // kv: the key/value head it reads
        if (drop && head == drawn_until) {
          const int64_t heads = std::min(heads_per_draw, end - head);
          detail::draw_dropout_keep(
              mask, P.dtype(), head * Tq * Tk, heads * Tq * Tk, keep.get() + head * Tq * Tk);
          drawn_until = head + heads;
        }
        T* P_head = P.data<T>() + head * Tq * Tk;  // (Tq, Tk)
        // the next head (nb, nh), prefetched a part at a time (see prefetch_rows)
        const bool fetch_next = prefetch && head + 1 < end;
        const int64_t nb = (head + 1) / H, nh = (head + 1) % H, nkv = nh / G;
        if (fetch_next) {
          prefetch_rows(Q.head<T>(nb, nh), Tq, Q.row_stride, d, Access::read);
          prefetch_rows(K.head<T>(nb, nkv), Tk, K.row_stride, d, Access::read);
        }
        for (int64_t i = 0; i < Tq; ++i) {
          const RowKeys keys = valid_length.keys(b, i);
          score_lengths[static_cast<std::size_t>(i)] = keys.uniform ? 0 : keys.length;
          weight_lengths[static_cast<std::size_t>(i)] = keys.length;
        }
        // (1) Q·Kᵀ: (Tq, d)·(d, Tk) -> (Tq, Tk), into P's memory, on the keys each row scores
        masked_scores<T>(Tq, Tk, d, Q.head<T>(b, h), Q.row_stride, K.head<T>(b, kv), K.row_stride,
            P_head, Tk, score_lengths.data());
        if (fetch_next) prefetch_rows(P_head + Tq * Tk, Tq, Tk, Tk, Access::write);
        // (2) S = Q·Kᵀ / √d (+ ALiBi's bias) and P = masked_softmax(S), in place
        masked_softmax_head(P_head, Tq, Tk, valid_length, b, sqrt_d, slopes ? slopes + h : nullptr,
            softmax_rows, softmax_lengths);
        // (3) P̃ = P ⊙ D: this head's elements of the (B·H, Tq, Tk) mask, drawn above
        const T* weights = P_head;
        if (drop) {
          const uint8_t* keep_head = keep.get() + head * Tq * Tk;
          detail::apply_dropout_keep(P_head, dropped.data(), keep_head, Tq * Tk, mask.scale);
          weights = dropped.data();
        }
        if (fetch_next) {
          prefetch_rows(V.head<T>(nb, nkv), Tk, V.row_stride, dv, Access::read);
          prefetch_rows(O.head<T>(nb, nh), Tq, O.row_stride, dv, Access::write);
        }
        // (4) O = P̃·V: (Tq, Tk)·(Tk, dv) -> (Tq, dv), written into O's interleaved rows
        masked_weights_times<T>(Tq, Tk, dv, weights, V.head<T>(b, kv), V.row_stride,
            O.head<T>(b, h), O.row_stride, weight_lengths.data());
      }
    });
  });
  if (weights_out) *weights_out = P;  // before dropout, as d2l's attention_weights
  if (!detail::any_requires_grad({q, k, v})) return out;

  auto backward = [Q, K, V, P, valid_length, drop, mask, keep, B, H, G, Tq, Tk, d, dv](
                      const Tensor& grad_out, const NeedsGrad& needs) -> Grads {
    const Heads dO =
        heads_of(grad_out);  // (B, H, Tq, dv), e.g. a view of W_o's (B, Tq, H·dv) gradient
    const bool want_q = needs[0], want_k = needs[1], want_v = needs[2];
    // Each gradient in its operand's layout: for the head views of a projection, a (B, T, H, C)
    // buffer, which the permute and reshape backward above hand on without a copy. Every element
    // is written (by the first query head of each group, the others adding to it), so the buffers
    // start uninitialised.
    const HeadGradients grads = head_gradients(Q, K, V, needs, /*zero=*/false);
    const Heads &dQ = grads.dQ, &dK = grads.dK, &dV = grads.dV;

    dispatch(P.dtype(), [&]<typename T>() {
      const T sqrt_d = static_cast<T>(std::sqrt(static_cast<double>(d)));
      const bool prefetch = Tq * Tk >= kPrefetchHeadWeights;
      // Split by key/value head: chunk [begin, end) of the B·Hkv key/value heads runs the query
      // heads [begin·G, end·G) in order (query head b·H + h is key/value head b·Hkv + h / G's
      // (h / G)·G + (h % G)-th), so that each of them sums its G query heads' dK and dV in one
      // order on any number of threads.
      parallel_for(B * (H / G), G * Tq * Tk * (2 * d + 2 * dv), [&](int64_t begin, int64_t end) {
        std::vector<T> dropped(
            drop ? static_cast<std::size_t>(Tq * Tk) : 0);     // (Tq, Tk) P̃ of one head
        std::vector<T> dS(static_cast<std::size_t>(Tq * Tk));  // (Tq, Tk) dP̃, dP, then dS / √d
        // the valid keys of each row, and the keys each row of P̃ weighs (a uniform row: all Tk)
        std::vector<int64_t> lengths(static_cast<std::size_t>(Tq)),
            weight_lengths(static_cast<std::size_t>(Tq));
        for (int64_t head = begin * G; head < end * G; ++head) {
          const int64_t b = head / H, h = head % H, kv = h / G;  // kv: the key/value head it reads
          // The group's first query head writes dK and dV of its key/value head; the others add:
          // dK = Σ_g dK_g over the G query heads g that read it (and dV likewise).
          const bool add_to_kv = h % G != 0;
          const T* P_head = P.data<T>() + head * Tq * Tk;  // (Tq, Tk)
          // the next head (nb, nh), prefetched a part at a time (see prefetch_rows)
          const bool fetch_next = prefetch && head + 1 < end * G;
          const int64_t nb = (head + 1) / H, nh = (head + 1) % H, nkv = nh / G;
          // ahead of (5) and (6): the next head's (rows, d) operand (of head operand_head), and its
          // (grad_rows, d) gradient (of head grad_head) where it is wanted
          const auto prefetch_next_product = [&](const Heads& operand, int64_t operand_head,
                                                 int64_t rows, const Heads& grad, int64_t grad_head,
                                                 int64_t grad_rows, bool want) {
            if (!fetch_next) return;
            prefetch_rows(
                operand.head<T>(nb, operand_head), rows, operand.row_stride, d, Access::read);
            if (want)
              prefetch_rows(
                  grad.head<T>(nb, grad_head), grad_rows, grad.row_stride, d, Access::write);
          };
          if (fetch_next) {
            prefetch_rows(P_head + Tq * Tk, Tq, Tk, Tk, Access::read);
            prefetch_rows(dO.head<T>(nb, nh), Tq, dO.row_stride, dv, Access::read);
            if (want_v) prefetch_rows(dV.head<T>(nb, nkv), Tk, dV.row_stride, dv, Access::write);
          }
          for (int64_t i = 0; i < Tq; ++i) {
            const RowKeys keys = valid_length.keys(b, i);
            lengths[static_cast<std::size_t>(i)] = keys.uniform ? 0 : keys.length;
            weight_lengths[static_cast<std::size_t>(i)] = keys.length;
          }
          const uint8_t* keep_head = drop ? keep.get() + head * Tq * Tk : nullptr;
          const T* weights = P_head;  // P̃ = P ⊙ D, from the forward's mask
          if (drop) {
            detail::apply_dropout_keep(P_head, dropped.data(), keep_head, Tq * Tk, mask.scale);
            weights = dropped.data();
          }
          // in the forward pass this was: O = P̃·V, so
          // (1) dV = P̃ᵀ·dO: (Tk, Tq)·(Tq, dv) -> (Tk, dv), added to the group's sum
          if (want_v)
            masked_weights_transposed_times<T>(Tq, Tk, dv, weights, dO.head<T>(b, h), dO.row_stride,
                dV.head<T>(b, kv), dV.row_stride, weight_lengths.data(), add_to_kv);
          if (!want_q && !want_k) continue;
          if (fetch_next) prefetch_rows(V.head<T>(nb, nkv), Tk, V.row_stride, dv, Access::read);
          // (2) dP̃ = dO·Vᵀ: (Tq, dv)·(dv, Tk) -> (Tq, Tk), on the valid keys of each row (step
          //     (4) reads no other)
          masked_scores<T>(Tq, Tk, dv, dO.head<T>(b, h), dO.row_stride, V.head<T>(b, kv),
              V.row_stride, dS.data(), Tk, lengths.data());
          // in the forward pass this was: P̃ = P ⊙ D, so
          // (3) dP = dP̃ ⊙ D (in place)
          if (drop)
            detail::apply_dropout_keep(dS.data(), dS.data(), keep_head, Tq * Tk, mask.scale);
          // in the forward pass this was: P = softmax(S) over the valid keys, so
          // (4) dS_j = P_j (dP_j − Σ_j' dP_j' P_j'), 0 at masked keys; stored already divided by
          //     √d, the factor S = Q·Kᵀ / √d gives both (5) and (6). ALiBi's bias, a constant
          //     added to S, changes P but has no gradient: dS is the same formula.
          softmax_backward_head(dS.data(), P_head, lengths.data(), Tq, Tk, sqrt_d);
          // in the forward pass this was: S = Q·Kᵀ / √d (+ bias), so
          // (5) dQ = (dS / √d)·K: (Tq, Tk)·(Tk, d) -> (Tq, d)
          prefetch_next_product(K, nkv, Tk, dQ, nh, Tq, want_q);
          if (want_q)
            masked_weights_times<T>(Tq, Tk, d, dS.data(), K.head<T>(b, kv), K.row_stride,
                dQ.head<T>(b, h), dQ.row_stride, lengths.data());
          prefetch_next_product(Q, nh, Tq, dK, nkv, Tk, want_k);
          // (6) dK = (dS / √d)ᵀ·Q: (Tk, Tq)·(Tq, d) -> (Tk, d), added to the group's sum
          if (want_k)
            masked_weights_transposed_times<T>(Tq, Tk, d, dS.data(), Q.head<T>(b, h), Q.row_stride,
                dK.head<T>(b, kv), dK.row_stride, lengths.data(), add_to_kv);
        }
      });
    });
    return {grads.dq, grads.dk, grads.dv};
  };
  // docs/ops.md, scaled_dot_product_attention: dV = P̃ᵀ · g, dP = (g · Vᵀ) ⊙ D, dS = P ⊙ (dP −
  //   rowsum(dP ⊙ P)) (0 where masked; the bias is a constant), dQ = dS · K / √d, dK = dSᵀ · Q /
  //   √d; dK, dV summed over the query heads sharing a kv head
  return detail::record(Op::scaled_dot_product_attention, out, {q, k, v},
      /*saved=*/{Q.tensor, K.tensor, V.tensor, P}, backward);
}

}  // namespace detail

}  // namespace ag
