// Fused scaled dot-product attention of B·H heads, forward and backward together (llm.c-style
// numbered passes). The same function as d2l's composed DotProductAttention on transpose_qkv'd
// inputs (nn/attention.cpp), in one op:
//
//   S  = Q·Kᵀ / √d                 (B, H, Tq, Tk)   one gemm per head, Kᵀ read with a BLAS flag
//   P  = masked_softmax(S)         (B, H, Tq, Tk)   key positions ≥ valid_len get weight exactly 0;
//                                                   a row with valid_len 0 is uniform 1/Tk (d2l's
//                                                   −1e6 fill makes every score equal)
//   P̃  = P ⊙ D                     (B, H, Tq, Tk)   D: dropout, 1/(1 − p) or 0 (ag::dropout's draws)
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
// The B·H heads run in parallel on ag's threads (one single-threaded gemm each).
#include <cblas.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <limits>
#include <memory>
#include <type_traits>
#include <vector>

#include "autograd/allocator.h"
#include "autograd/autograd.h"
#include "autograd/detail/blas.h"
#include "autograd/detail/fast_exp.h"
#include "autograd/detail/kernels.h"
#include "autograd/ops.h"
#include "autograd/parallel.h"

namespace ag {

namespace {

constexpr const char* kOpName = "scaled_dot_product_attention";

// A (B, H, T, C) operand as the kernels read it: head (b, h) is the row-major (T, C) matrix at
// element b·batch_stride + h·head_stride of the data, its rows row_stride apart (BLAS's leading
// dimension: H·C for a head view of a (B, T, H·C) projection).
struct Heads {
  Tensor tensor;  // the operand itself, or a contiguous copy when BLAS cannot read its heads
  int64_t batch_stride = 0, head_stride = 0, row_stride = 1;

  template <class T>
  T* head(int64_t b, int64_t h) const {
    return tensor.data<T>() + b * batch_stride + h * head_stride;
  }
};

Heads heads_of(const Tensor& t) {
  const int64_t rows = t.size(2), cols = t.size(3);
  const bool columns_adjacent = t.strides()[3] == 1 || cols <= 1;
  const bool rows_apart = rows <= 1 || (t.strides()[2] >= std::max<int64_t>(cols, 1) && t.strides()[2] <= INT_MAX);
  Tensor readable = t;
  if (!columns_adjacent || !rows_apart) {
    NoGradGuard no_grad;  // a private copy for reading; the op's input stays t
    readable = contiguous(t);
  }
  const int64_t row_stride = rows <= 1 ? std::max<int64_t>(cols, 1) : readable.strides()[2];
  return {readable, readable.strides()[0], readable.strides()[1], row_stride};
}

// The valid length of every query row, (B·Tq) entries in row-major (b, i) order; empty when
// valid_lens is undefined (every key is valid). Checked as nn::masked_softmax checks them.
std::vector<int64_t> query_valid_lengths(const Tensor& valid_lens, const Tensor& q, const Tensor& k,
                                         const char* op = kOpName) {
  if (!valid_lens.defined()) return {};
  return valid_lengths_per_query(valid_lens, q.size(0), q.size(2), k.size(2), op,
                                         "queries of shape " + shape_str(q.shape()),
                                         "keys of shape " + shape_str(k.shape()));
}

void check_operands(const Tensor& q, const Tensor& k, const Tensor& v, double dropout_p, const char* op = kOpName) {
  if (q.dim() != 4 || k.dim() != 4 || v.dim() != 4 || q.size(0) != k.size(0) || q.size(0) != v.size(0) ||
      q.size(1) != k.size(1) || q.size(1) != v.size(1) || q.size(3) != k.size(3) || k.size(2) != v.size(2))
    detail::fail<ShapeError>(op, ": q ", shape_str(q.shape()), ", k ", shape_str(k.shape()), " and v ",
                             shape_str(v.shape()), " do not fit (expected (B,H,Tq,d), (B,H,Tk,d), (B,H,Tk,dv))");
  detail::check_same_dtype(q, k, op);
  detail::check_same_dtype(q, v, op);
  for (const Tensor* t : {&q, &k, &v})
    for (int64_t size : t->shape())
      if (size > INT_MAX)
        detail::fail<ShapeError>(op, ": q ", shape_str(q.shape()), ", k ", shape_str(k.shape()), " and v ",
                                 shape_str(v.shape()), " exceed BLAS's 32-bit sizes");
  if (!(dropout_p >= 0.0 && dropout_p <= 1.0))
    detail::fail<ValueError>(op, ": dropout probability ", dropout_p, " is outside [0, 1] (q of shape ",
                             shape_str(q.shape()), ")");
}

// Turns one row of raw scores Q_i·K_jᵀ (length Tk) into attention weights in place:
//   s_j = score_j / √d,  P_j = exp(s_j − max) / Σ_{j' < len} exp(s_j' − max) for j < len, P_j = 0 for j ≥ len
// and for len = 0 (every score masked, all −1e6 in d2l) P_j = 1/Tk. The division and the softmax
// are the composed path's (the div op, then softmax's row arithmetic, detail::softmax_row), so
// the fused and the composed path give the same bits.
template <class T>
void masked_softmax_row(T* row, int64_t Tk, int64_t len, T sqrt_d) {
  if (len == 0) {
    std::fill(row, row + Tk, static_cast<T>(1.0 / static_cast<double>(Tk)));
    return;
  }
  for (int64_t j = 0; j < len; ++j) row[j] = row[j] / sqrt_d;
  detail::softmax_row(row, row, len);
  std::fill(row + len, row + Tk, T(0));
}

}  // namespace

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& valid_lens,
                                    double dropout_p, bool training, Generator& generator, Tensor* weights_out) {
  check_operands(q, k, v, dropout_p);
  const int64_t B = q.size(0), H = q.size(1), Tq = q.size(2), d = q.size(3);
  const int64_t Tk = k.size(2), dv = v.size(3);
  const std::vector<int64_t> lengths = query_valid_lengths(valid_lens, q, k);
  const bool masked = !lengths.empty();
  auto valid_length = [lengths, masked, Tq, Tk](int64_t b, int64_t i) {
    return masked ? lengths[static_cast<std::size_t>(b * Tq + i)] : Tk;
  };

  // The dropout mask of P as a contiguous (B·H, Tq, Tk) tensor: reserved now, drawn per head.
  const bool drop = training && dropout_p > 0.0;
  detail::DropoutMask mask;
  if (drop) mask = detail::reserve_dropout_mask(B * H * Tq * Tk, q.dtype(), dropout_p, generator);
  // The mask itself, one byte per weight (a quarter of P), drawn head by head in the forward and
  // read again by the backward.
  const std::shared_ptr<uint8_t> keep =
      drop ? detail::allocate_bytes(static_cast<std::size_t>(B * H * Tq * Tk)) : nullptr;  // from the cache

  const Heads Q = heads_of(q), K = heads_of(k), V = heads_of(v);
  Tensor P = empty({B, H, Tq, Tk}, q.dtype());  // (B, H, Tq, Tk), contiguous: head (b, h) at (b·H + h)·Tq·Tk
  // O as a dense (B, Tq, H, dv) buffer, returned as its (B, H, Tq, dv) view
  const Tensor out_buffer = empty({B, Tq, H, dv}, q.dtype());                                     // (B, Tq, H, dv)
  Tensor out = detail::make_view(out_buffer, {B, H, Tq, dv}, {Tq * H * dv, dv, H * dv, 1}, 0);  // (B, H, Tq, dv)
  const Heads O = heads_of(out);

  dispatch(q.dtype(), [&]<typename T>() {
    const T sqrt_d = static_cast<T>(std::sqrt(static_cast<double>(d)));
    parallel_for(B * H, Tq * Tk * (d + dv), [&](int64_t begin, int64_t end) {
      std::vector<T> dropped(drop ? static_cast<std::size_t>(Tq * Tk) : 0);  // (Tq, Tk) P̃ of one head
      for (int64_t head = begin; head < end; ++head) {
        const int64_t b = head / H, h = head % H;
        T* P_head = P.data<T>() + head * Tq * Tk;  // (Tq, Tk)
        // (1) Q·Kᵀ: (Tq, d)·(d, Tk) -> (Tq, Tk), into P's memory
        detail::gemm<T>(CblasNoTrans, CblasTrans, Tq, Tk, d, Q.head<T>(b, h), Q.row_stride, K.head<T>(b, h), K.row_stride,
                P_head, Tk);
        // (2) S = Q·Kᵀ / √d and P = masked_softmax(S), row by row in place
        for (int64_t i = 0; i < Tq; ++i) masked_softmax_row(P_head + i * Tk, Tk, valid_length(b, i), sqrt_d);
        // (3) P̃ = P ⊙ D: this head's elements of the (B·H, Tq, Tk) mask
        const T* weights = P_head;
        if (drop) {
          uint8_t* keep_head = keep.get() + head * Tq * Tk;
          detail::draw_dropout_keep(mask, P.dtype(), head * Tq * Tk, Tq * Tk, keep_head);
          detail::apply_dropout_keep(P_head, dropped.data(), keep_head, Tq * Tk, mask.scale);
          weights = dropped.data();
        }
        // (4) O = P̃·V: (Tq, Tk)·(Tk, dv) -> (Tq, dv), written into O's interleaved rows
        detail::gemm<T>(CblasNoTrans, CblasNoTrans, Tq, dv, Tk, weights, Tk, V.head<T>(b, h), V.row_stride, O.head<T>(b, h),
                O.row_stride);
      }
    });
  });
  if (weights_out) *weights_out = P;  // before dropout, as d2l's attention_weights
  if (!detail::any_requires_grad({q, k, v})) return out;

  auto backward = [Q, K, V, P, valid_length, drop, mask, keep, B, H, Tq, Tk, d, dv](const Tensor& grad_out,
                                                                                const NeedsGrad& needs) -> Grads {
    const Heads dO = heads_of(grad_out);  // (B, H, Tq, dv), e.g. a view of W_o's (B, Tq, H·dv) gradient
    const bool want_q = needs[0], want_k = needs[1], want_v = needs[2];
    Tensor dq, dk, dv_tensor;
    // Contiguous gradients: the engine keeps a contiguous gradient as it is, and the permute
    // backward of a head view then needs the one copy into the projection's (B, T, H·C) layout.
    if (want_q) dq = empty(Q.tensor.shape(), P.dtype());         // (B, H, Tq, d)
    if (want_k) dk = empty(K.tensor.shape(), P.dtype());         // (B, H, Tk, d)
    if (want_v) dv_tensor = empty(V.tensor.shape(), P.dtype());  // (B, H, Tk, dv)
    const Heads dQ = want_q ? heads_of(dq) : Heads{}, dK = want_k ? heads_of(dk) : Heads{};
    const Heads dV = want_v ? heads_of(dv_tensor) : Heads{};

    dispatch(P.dtype(), [&]<typename T>() {
      const T sqrt_d = static_cast<T>(std::sqrt(static_cast<double>(d)));
      parallel_for(B * H, Tq * Tk * (2 * d + 2 * dv), [&](int64_t begin, int64_t end) {
        std::vector<T> dropped(drop ? static_cast<std::size_t>(Tq * Tk) : 0);  // (Tq, Tk) P̃ of one head
        std::vector<T> dS(static_cast<std::size_t>(Tq * Tk));                 // (Tq, Tk) dP̃, then dP, then dS / √d
        for (int64_t head = begin; head < end; ++head) {
          const int64_t b = head / H, h = head % H;
          const T* P_head = P.data<T>() + head * Tq * Tk;  // (Tq, Tk)
          const uint8_t* keep_head = drop ? keep.get() + head * Tq * Tk : nullptr;
          const T* weights = P_head;  // P̃ = P ⊙ D, from the forward's mask
          if (drop) {
            detail::apply_dropout_keep(P_head, dropped.data(), keep_head, Tq * Tk, mask.scale);
            weights = dropped.data();
          }
          // in the forward pass this was: O = P̃·V, so
          // (1) dV = P̃ᵀ·dO: (Tk, Tq)·(Tq, dv) -> (Tk, dv)
          if (want_v)
            detail::gemm<T>(CblasTrans, CblasNoTrans, Tk, dv, Tq, weights, Tk, dO.head<T>(b, h), dO.row_stride,
                    dV.head<T>(b, h), dV.row_stride);
          if (!want_q && !want_k) continue;
          // (2) dP̃ = dO·Vᵀ: (Tq, dv)·(dv, Tk) -> (Tq, Tk)
          detail::gemm<T>(CblasNoTrans, CblasTrans, Tq, Tk, dv, dO.head<T>(b, h), dO.row_stride, V.head<T>(b, h), V.row_stride,
                  dS.data(), Tk);
          // in the forward pass this was: P̃ = P ⊙ D, so
          // (3) dP = dP̃ ⊙ D (in place)
          if (drop) detail::apply_dropout_keep(dS.data(), dS.data(), keep_head, Tq * Tk, mask.scale);
          // in the forward pass this was: P = softmax(S) over the valid keys, so
          // (4) dS_j = P_j (dP_j − Σ_j' dP_j' P_j'), 0 at masked keys; stored already divided by
          //     √d, the factor S = Q·Kᵀ / √d gives both (5) and (6)
          for (int64_t i = 0; i < Tq; ++i) {
            T* dS_row = dS.data() + i * Tk;
            const T* P_row = P_head + i * Tk;
            const int64_t len = valid_length(b, i);
            double row_dot = 0;  // Σ_j dP_j P_j (masked keys have P_j = 0 unless len = 0)
            for (int64_t j = 0; j < len; ++j) row_dot += double(dS_row[j]) * double(P_row[j]);
            const T dot = static_cast<T>(row_dot);
            for (int64_t j = 0; j < len; ++j) dS_row[j] = P_row[j] * (dS_row[j] - dot) / sqrt_d;
            std::fill(dS_row + len, dS_row + Tk, T(0));  // masked scores were the constant −1e6
          }
          // in the forward pass this was: S = Q·Kᵀ / √d, so
          // (5) dQ = (dS / √d)·K: (Tq, Tk)·(Tk, d) -> (Tq, d)
          if (want_q)
            detail::gemm<T>(CblasNoTrans, CblasNoTrans, Tq, d, Tk, dS.data(), Tk, K.head<T>(b, h), K.row_stride,
                    dQ.head<T>(b, h), dQ.row_stride);
          // (6) dK = (dS / √d)ᵀ·Q: (Tk, Tq)·(Tq, d) -> (Tk, d)
          if (want_k)
            detail::gemm<T>(CblasTrans, CblasNoTrans, Tk, d, Tq, dS.data(), Tk, Q.head<T>(b, h), Q.row_stride,
                    dK.head<T>(b, h), dK.row_stride);
        }
      });
    });
    return {dq, dk, dv_tensor};
  };
  // docs/ops.md, scaled_dot_product_attention: dV = P̃ᵀ · g, dP = (g · Vᵀ) ⊙ D, dS = P ⊙ (dP − rowsum(dP ⊙ P)) (0
  //   where masked), dQ = dS · K / √d, dK = dSᵀ · Q / √d
  return detail::record(Op::scaled_dot_product_attention, out, {q, k, v}, backward);
}

// ================================================================================================
// Tiled attention with an online softmax: the FlashAttention idea on a CPU
// ================================================================================================
//
// The same function as scaled_dot_product_attention, computed without ever holding a head's
// (Tq × Tk) weights: the queries are taken in blocks of kQueryBlock rows, the keys in blocks of
// kKeyBlock, and each (query block × key block) tile of scores lives only in a small buffer that
// stays in the core's cache. The softmax is computed "online": for every query row i the kernel
// keeps the running maximum m_i of the scores seen so far, the running sum l_i of exp(s − m_i), and
// the running output O_i = Σ exp(s_j − m_i) D_j V_j; when a key block raises the maximum to m', the
// old sums are rescaled by exp(m_i − m') (the same rows, just measured from a new maximum):
//
//   for each key block J:
//     S_J   = Q·K_Jᵀ / √d                          (rows × cols), the tile
//     m'    = max(m, max_j S_J)                     per row
//     P_J   = exp(S_J − m')                         unnormalised weights; 0 at masked keys
//     l     = l · exp(m − m') + Σ_j P_J             the denominator, without dropout
//     O     = O · exp(m − m') + (P_J ⊙ D_J) · V_J   the numerator, with dropout (one gemm)
//     m     = m'
//   O = O / l,   L = m + log l                      the row's log-sum-exp, kept for the backward
//
// At the end O_i = Σ_j P_ij D_ij V_j with P_ij = exp(s_ij − L_i) = softmax(s_i)_j: the weights are
// those of scaled_dot_product_attention, and so is the output, up to the rounding of the sums,
// taken in another order (tests/autograd/test_flash_attention.cpp holds outputs and gradients to
// 5e-6 of the largest value in float32 and 1e-12 in float64).
// Key blocks past the longest valid length of a query block are skipped outright, so the causal
// mask of a decoder (valid length i + 1 for query i) halves the work.
//
// Memory held for the backward: q, k, v (the caller's views), O, and L (B·H·Tq numbers): no P and
// no dropout mask — the backward recomputes each tile of P from Q, K and L, and redraws the
// dropout mask from the generator's reserved Philox blocks (a pure function of the element
// index). scaled_dot_product_attention saves B·H·Tq·Tk numbers and as many mask bytes.
//
// Backward, given dO, per head (FlashAttention-2's order):
//   (0) Δ_i = Σ_c dO_ic O_ic                     = Σ_j dP_ij P_ij, softmax's row sum (below)
//   then for each query block I and key block J:
//   (1) P   = exp(Q_I·K_Jᵀ / √d − L_I)          the forward's weights of the tile, recomputed
//   (2) P̃   = P ⊙ D                              the same dropout draws as the forward
//   (3) dV_J += P̃ᵀ·dO_I                          (cols, rows)·(rows, dv)
//   (4) dP̃  = dO_I·V_Jᵀ                          (rows, dv)·(dv, cols)
//   (5) dS  = P ⊙ (dP̃ ⊙ D − Δ_I) / √d            softmax's backward, as in the whole-row kernel;
//                                                0 at masked keys
//   (6) dQ_I += dS·K_J                           (rows, cols)·(cols, d)
//   (7) dK_J += dSᵀ·Q_I                          (cols, rows)·(rows, d)
// Why Δ = rowsum(dO ⊙ O): softmax's backward needs Σ_j dP_j P_j with dP_j = (dO·V_j) D_j, and
// Σ_j (dO·V_j) D_j P_j = dO·(Σ_j P̃_j V_j) = dO·O — one dot product per row instead of a pass over
// the row's Tk weights.
//
// A row with valid length 0 gets the uniform weights 1/Tk over all Tk keys, as
// scaled_dot_product_attention: its scores are taken as all equal (0), so the online softmax gives
// exactly 1/Tk, and its dS is 0 (d2l replaced every score by the constant −1e6).

namespace {

constexpr int64_t kQueryBlock = 64;  // query rows per tile
constexpr int64_t kKeyBlock = 128;   // keys per tile: a float (64 × 128) tile is 32 KB, in L1

// out[j] = e^(in[j] − shift) for j < n (in may be out): the fast float exp of the softmax
// kernels, std::exp for float64.
void exp_shifted_row(const float* in, float shift, float* out, int64_t n) { detail::exp_shifted(in, shift, out, n); }
void exp_shifted_row(const double* in, double shift, double* out, int64_t n) {
  for (int64_t j = 0; j < n; ++j) out[j] = std::exp(in[j] - shift);
}

// Per query row of one block: how many of the tile's keys count, and whether the row is the
// uniform one of valid length 0.
struct RowKeys {
  int64_t length = 0;     // keys [0, length) count (Tk for a valid length of 0)
  bool uniform = false;   // valid length 0: every score taken as 0, dS = 0
};

// One row of a tile of raw scores Q_i·K_jᵀ (cols of them) as the softmax sees them, in place:
// s_j = score_j / √d for the n keys that count (all 0 in a uniform row), 0 past them. The forward
// and the backward both call it, so the backward recomputes the forward's scores bit for bit.
template <class T>
void scale_scores(T* s, const RowKeys& keys, int64_t n, int64_t cols, T sqrt_d) {
  if (keys.uniform) std::fill(s, s + n, T(0));
  else
    for (int64_t j = 0; j < n; ++j) s[j] = s[j] / sqrt_d;
  std::fill(s + n, s + cols, T(0));
}

}  // namespace

Tensor flash_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& valid_lens, double dropout_p,
                       bool training, Generator& generator) {
  constexpr const char* kFlash = "flash_attention";
  check_operands(q, k, v, dropout_p, kFlash);
  const int64_t B = q.size(0), H = q.size(1), Tq = q.size(2), d = q.size(3);
  const int64_t Tk = k.size(2), dv = v.size(3);
  const std::vector<int64_t> lengths = query_valid_lengths(valid_lens, q, k, kFlash);
  // The keys that count for query row i of batch row b (see RowKeys).
  auto row_keys = [lengths, Tq, Tk](int64_t b, int64_t i) {
    const int64_t length = lengths.empty() ? Tk : lengths[static_cast<std::size_t>(b * Tq + i)];
    return length == 0 ? RowKeys{Tk, true} : RowKeys{length, false};
  };

  // The dropout mask of the weights as a contiguous (B·H, Tq, Tk) tensor, as
  // scaled_dot_product_attention reserves it: never stored, drawn tile by tile.
  const bool drop = training && dropout_p > 0.0;
  detail::DropoutMask mask;
  if (drop) mask = detail::reserve_dropout_mask(B * H * Tq * Tk, q.dtype(), dropout_p, generator);

  const Heads Q = heads_of(q), K = heads_of(k), V = heads_of(v);
  const Tensor out_buffer = empty({B, Tq, H, dv}, q.dtype());  // (B, Tq, H, dv), O's memory
  Tensor out = detail::make_view(out_buffer, {B, H, Tq, dv}, {Tq * H * dv, dv, H * dv, 1}, 0);  // (B, H, Tq, dv)
  const Heads O = heads_of(out);
  Tensor logsumexp = empty({B, H, Tq}, q.dtype());  // (B, H, Tq): L_i = m_i + log l_i

  dispatch(q.dtype(), [&]<typename T>() {
    const T sqrt_d = static_cast<T>(std::sqrt(static_cast<double>(d)));
    parallel_for(B * H, Tq * Tk * (d + dv), [&](int64_t begin, int64_t end) {
      std::vector<T> tile(static_cast<std::size_t>(kQueryBlock * kKeyBlock));  // (rows, cols) S, then P ⊙ D
      std::vector<uint8_t> keep(drop ? static_cast<std::size_t>(kKeyBlock) : 0);  // one row of the tile's mask
      T row_max[kQueryBlock], row_sum[kQueryBlock];                               // m_i and l_i
      RowKeys keys[kQueryBlock];
      for (int64_t head = begin; head < end; ++head) {
        const int64_t b = head / H, h = head % H;
        for (int64_t i0 = 0; i0 < Tq; i0 += kQueryBlock) {
          const int64_t rows = std::min(kQueryBlock, Tq - i0);
          T* O_block = O.head<T>(b, h) + i0 * O.row_stride;  // (rows, dv), rows O.row_stride apart
          int64_t block_keys = 0;                            // the longest valid length of the block
          for (int64_t r = 0; r < rows; ++r) {
            keys[r] = row_keys(b, i0 + r);
            block_keys = std::max(block_keys, keys[r].length);
            row_max[r] = -std::numeric_limits<T>::infinity();
            row_sum[r] = 0;
            std::fill(O_block + r * O.row_stride, O_block + r * O.row_stride + dv, T(0));
          }
          for (int64_t j0 = 0; j0 < block_keys; j0 += kKeyBlock) {
            const int64_t cols = std::min(kKeyBlock, Tk - j0);
            // S = Q_I·K_Jᵀ: (rows, d)·(d, cols) -> (rows, cols), row stride kKeyBlock
            detail::gemm<T>(CblasNoTrans, CblasTrans, rows, cols, d, Q.head<T>(b, h) + i0 * Q.row_stride, Q.row_stride,
                            K.head<T>(b, h) + j0 * K.row_stride, K.row_stride, tile.data(), kKeyBlock);
            for (int64_t r = 0; r < rows; ++r) {
              T* s = tile.data() + r * kKeyBlock;  // (cols) this row's scores, then its weights
              const int64_t n = std::clamp<int64_t>(keys[r].length - j0, 0, cols);  // keys that count
              // s_j = score_j / √d (all 0 for a uniform row); the keys past the valid length weigh 0
              scale_scores(s, keys[r], n, cols, sqrt_d);
              if (n == 0) continue;  // nothing of this row in the tile: m, l and O stay
              // m' = max(m, max_j s_j); the old sums are rescaled by exp(m − m') (0 on the first tile)
              const T new_max = std::max(row_max[r], *std::max_element(s, s + n));
              const T rescale = std::exp(row_max[r] - new_max);
              row_max[r] = new_max;
              exp_shifted_row(s, new_max, s, n);  // P_j = exp(s_j − m')
              T tile_sum = 0;
              for (int64_t j = 0; j < n; ++j) tile_sum += s[j];
              row_sum[r] = row_sum[r] * rescale + tile_sum;  // l = l·exp(m − m') + Σ_j P_j
              T* O_row = O_block + r * O.row_stride;         // (dv)
              if (rescale != T(1))
                for (int64_t c = 0; c < dv; ++c) O_row[c] *= rescale;
              if (drop) {  // P̃_j = P_j ⊙ D_j: the mask of elements (head, i0 + r, j0 .. j0 + n)
                detail::draw_dropout_keep(mask, q.dtype(), (head * Tq + i0 + r) * Tk + j0, n, keep.data());
                detail::apply_dropout_keep(s, s, keep.data(), n, mask.scale);
              }
            }
            // O_I += P̃·V_J: (rows, cols)·(cols, dv) -> (rows, dv)
            detail::gemm<T>(CblasNoTrans, CblasNoTrans, rows, dv, cols, tile.data(), kKeyBlock,
                            V.head<T>(b, h) + j0 * V.row_stride, V.row_stride, O_block, O.row_stride,
                            /*accumulate=*/true);
          }
          // O = O / l and L = m + log l (a row without keys, Tk = 0, keeps O = 0)
          T* L_block = logsumexp.data<T>() + head * Tq + i0;
          for (int64_t r = 0; r < rows; ++r) {
            const T inverse = row_sum[r] > T(0) ? T(1) / row_sum[r] : T(0);
            for (int64_t c = 0; c < dv; ++c) O_block[r * O.row_stride + c] *= inverse;
            L_block[r] = row_sum[r] > T(0) ? row_max[r] + std::log(row_sum[r]) : T(0);
          }
        }
      }
    });
  });
  if (!detail::any_requires_grad({q, k, v})) return out;

  // O for the backward's Δ, as a second view of its buffer (the returned `out` carries the node,
  // which must not hold itself).
  const Heads O_saved = heads_of(detail::make_view(out_buffer, out.shape(), out.strides(), 0));
  auto backward = [Q, K, V, O_saved, logsumexp, row_keys, drop, mask, B, H, Tq, Tk, d, dv](
                      const Tensor& grad_out, const NeedsGrad& needs) -> Grads {
    const Heads dO = heads_of(grad_out);  // (B, H, Tq, dv)
    const bool want_q = needs[0], want_k = needs[1], want_v = needs[2];
    const DType dtype = logsumexp.dtype();
    // Accumulated tile by tile, so they start at 0.
    Tensor dq, dk, dv_tensor;
    if (want_q) dq = zeros(Q.tensor.shape(), dtype);         // (B, H, Tq, d)
    if (want_k) dk = zeros(K.tensor.shape(), dtype);         // (B, H, Tk, d)
    if (want_v) dv_tensor = zeros(V.tensor.shape(), dtype);  // (B, H, Tk, dv)
    const Heads dQ = want_q ? heads_of(dq) : Heads{}, dK = want_k ? heads_of(dk) : Heads{};
    const Heads dV = want_v ? heads_of(dv_tensor) : Heads{};

    dispatch(dtype, [&]<typename T>() {
      const T sqrt_d = static_cast<T>(std::sqrt(static_cast<double>(d)));
      parallel_for(B * H, Tq * Tk * (2 * d + 3 * dv), [&](int64_t begin, int64_t end) {
        std::vector<T> P(static_cast<std::size_t>(kQueryBlock * kKeyBlock));   // (rows, cols) P, then P̃
        std::vector<T> dS(static_cast<std::size_t>(kQueryBlock * kKeyBlock));  // (rows, cols) dP̃, then dS
        std::vector<uint8_t> keep(drop ? static_cast<std::size_t>(kQueryBlock * kKeyBlock) : 0);
        T delta[kQueryBlock];  // Δ_i
        RowKeys keys[kQueryBlock];
        for (int64_t head = begin; head < end; ++head) {
          const int64_t b = head / H, h = head % H;
          const T* L = logsumexp.data<T>() + head * Tq;  // (Tq)
          for (int64_t i0 = 0; i0 < Tq; i0 += kQueryBlock) {
            const int64_t rows = std::min(kQueryBlock, Tq - i0);
            const T* Q_block = Q.head<T>(b, h) + i0 * Q.row_stride;     // (rows, d)
            const T* dO_block = dO.head<T>(b, h) + i0 * dO.row_stride;  // (rows, dv)
            T* dQ_block = want_q ? dQ.head<T>(b, h) + i0 * dQ.row_stride : nullptr;  // (rows, d)
            int64_t block_keys = 0;
            for (int64_t r = 0; r < rows; ++r) {
              keys[r] = row_keys(b, i0 + r);
              block_keys = std::max(block_keys, keys[r].length);
              // (0) Δ_i = dO_i · O_i
              const T* O_row = O_saved.head<T>(b, h) + (i0 + r) * O_saved.row_stride;
              double dot = 0;
              for (int64_t c = 0; c < dv; ++c) dot += double(dO_block[r * dO.row_stride + c]) * double(O_row[c]);
              delta[r] = static_cast<T>(dot);
            }
            for (int64_t j0 = 0; j0 < block_keys; j0 += kKeyBlock) {
              const int64_t cols = std::min(kKeyBlock, Tk - j0);
              const T* K_block = K.head<T>(b, h) + j0 * K.row_stride;  // (cols, d)
              const T* V_block = V.head<T>(b, h) + j0 * V.row_stride;  // (cols, dv)
              // in the forward pass this was: P = exp(Q·Kᵀ / √d − L), so
              // (1) P of the tile, recomputed: (rows, d)·(d, cols) -> (rows, cols)
              detail::gemm<T>(CblasNoTrans, CblasTrans, rows, cols, d, Q_block, Q.row_stride, K_block, K.row_stride,
                              P.data(), kKeyBlock);
              for (int64_t r = 0; r < rows; ++r) {
                T* p = P.data() + r * kKeyBlock;
                const int64_t n = std::clamp<int64_t>(keys[r].length - j0, 0, cols);
                scale_scores(p, keys[r], n, cols, sqrt_d);
                exp_shifted_row(p, L[i0 + r], p, n);
                // the forward's dropout draws of this tile row, for (2) and (5)
                if (drop) detail::draw_dropout_keep(mask, dtype, (head * Tq + i0 + r) * Tk + j0, n,
                                                    keep.data() + r * kKeyBlock);
              }
              const bool want_scores = want_q || want_k;  // dS serves only (6) and (7)
              // (4) dP̃ = dO_I·V_Jᵀ: (rows, dv)·(dv, cols) -> (rows, cols)
              if (want_scores)
                detail::gemm<T>(CblasNoTrans, CblasTrans, rows, cols, dv, dO_block, dO.row_stride, V_block,
                                V.row_stride, dS.data(), kKeyBlock);
              for (int64_t r = 0; r < rows; ++r) {
                T* p = P.data() + r * kKeyBlock;
                T* ds = dS.data() + r * kKeyBlock;
                const uint8_t* keep_row = keep.data() + r * kKeyBlock;
                const int64_t n = std::clamp<int64_t>(keys[r].length - j0, 0, cols);
                // (5) dS = P ⊙ (dP̃ ⊙ D − Δ) / √d; 0 past the valid length and in a uniform row
                if (want_scores) {
                  if (drop) detail::apply_dropout_keep(ds, ds, keep_row, n, mask.scale);
                  if (keys[r].uniform) std::fill(ds, ds + n, T(0));
                  else
                    for (int64_t j = 0; j < n; ++j) ds[j] = p[j] * (ds[j] - delta[r]) / sqrt_d;
                  std::fill(ds + n, ds + cols, T(0));
                }
                // (2) P̃ = P ⊙ D, for (3)
                if (drop) detail::apply_dropout_keep(p, p, keep_row, n, mask.scale);
              }
              // (3) dV_J += P̃ᵀ·dO_I: (cols, rows)·(rows, dv) -> (cols, dv)
              if (want_v)
                detail::gemm<T>(CblasTrans, CblasNoTrans, cols, dv, rows, P.data(), kKeyBlock, dO_block, dO.row_stride,
                                dV.head<T>(b, h) + j0 * dV.row_stride, dV.row_stride, /*accumulate=*/true);
              // (6) dQ_I += dS·K_J: (rows, cols)·(cols, d) -> (rows, d)
              if (want_q)
                detail::gemm<T>(CblasNoTrans, CblasNoTrans, rows, d, cols, dS.data(), kKeyBlock, K_block, K.row_stride,
                                dQ_block, dQ.row_stride, /*accumulate=*/true);
              // (7) dK_J += dSᵀ·Q_I: (cols, rows)·(rows, d) -> (cols, d)
              if (want_k)
                detail::gemm<T>(CblasTrans, CblasNoTrans, cols, d, rows, dS.data(), kKeyBlock, Q_block, Q.row_stride,
                                dK.head<T>(b, h) + j0 * dK.row_stride, dK.row_stride, /*accumulate=*/true);
            }
          }
        }
      });
    });
    return {dq, dk, dv_tensor};
  };
  // docs/ops.md, flash_attention: per tile: P = exp(S − L), dV += P̃ᵀ · g, dS = P ⊙ ((g · Vᵀ) ⊙ D − rowsum(g ⊙ O))
  //   (0 where masked), dQ += dS · K / √d, dK += dSᵀ · Q / √d
  return detail::record(Op::flash_attention, out, {q, k, v}, backward);
}

}  // namespace ag
