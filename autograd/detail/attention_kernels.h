// The two kernels ag::attention chooses between, and what they share: how they read the heads,
// check their operands, find the keys each query row attends to and scale its scores. Internal to
// autograd: the whole-row kernel and the dispatch are in ops_attention.cpp, the tiled kernel in
// ops_flash_attention.cpp.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "autograd/autograd.h"
#include "autograd/generator.h"
#include "autograd/tensor.h"

namespace ag::detail {

// ---- the kernels ------------------------------------------------------------------------------
// Both take ag::attention's arguments, check them with their own name in the error messages, and
// record an op of that name: Op::scaled_dot_product_attention or Op::flash_attention
// (docs/ops.md).

// What AttentionOptions adds to d2l's attention, as the kernels take it (ops.h).
struct AttentionVariant {
  std::vector<double> alibi_slopes;  // empty, or ALiBi's slope m_h of each of the H query heads
  bool enable_gqa = false;           // k and v may have Hkv heads, a divisor of H
};

// Each head's (Tq × Tk) weights at once, kept for the backward (ops_attention.cpp).
// weights_out, if given, receives them before dropout (B, H, Tq, Tk); dv may be 0 (the weights
// alone).
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
    const Tensor& valid_lens, double dropout_p, bool training, Generator& generator,
    Tensor* weights_out, const AttentionVariant& variant);

// In (64 × 128) tiles with an online softmax, no weights kept (ops_flash_attention.cpp).
Tensor flash_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& valid_lens,
    double dropout_p, bool training, Generator& generator, const AttentionVariant& variant);

// ---- what they share (ops_attention.cpp) ----------------------------------------------------

// Whether the whole-row kernel leaves the masked keys out of its products (see ops_attention.cpp,
// "the masked keys"). On unless turned off; tests turn it off to hold the shorter products to the
// whole ones, bit for bit.
bool skips_masked_keys();
void set_skips_masked_keys(bool skip);

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
Heads heads_of(const Tensor& t);

// Softmax's backward on one head's Tq rows in place (dS and P each Tq × Tk, contiguous; lengths[i]
// the valid keys of row i): dS holds dP on entry, and on exit
//   dS_j = P_j (dP_j − Σ_j' dP_j' P_j') / √d   for j < len,   0 for j ≥ len
// with Σ in double from j' = 0 up, so that each row rounds as a loop over it alone. Several rows
// at a time (for float32, one copy per instruction set; ops_attention.cpp).
void softmax_backward_head(
    float* dS, const float* P, const int64_t* lengths, int64_t Tq, int64_t Tk, float sqrt_d);
void softmax_backward_head(
    double* dS, const double* P, const int64_t* lengths, int64_t Tq, int64_t Tk, double sqrt_d);

// A buffer for the gradient of the operand t (B, H, T, C): its dims in the order of t's strides
// (PyTorch's empty_like) — W_q(x).reshape({B,T,H,d}).permute({0,2,1,3}) is (B, T, H, d) memory
// read as (B, H, T, d), and so is the gradient buffer; so is it for the same view of a slice of a
// fused QKV projection's (B, T, 3·H·d) — and contiguous where t is, is expanded, or its last dim
// would not be adjacent. Then the gradient that the permute's backward hands on is (B, T, H, d)
// contiguous and the reshape's (or view's) backward a free view: no copy between attention and the
// projection's backward (or the slice's, which writes it into the projection's gradient).
// Uninitialised, or zeros when `zero`.
Tensor gradient_like(const Tensor& t, bool zero);

// The gradients an attention backward writes: for each operand the backward's `needs` asks for,
// a gradient_like buffer (zeros when `zero`, for kernels that accumulate) and its Heads; an empty
// Tensor and Heads{} for the others.
struct HeadGradients {
  Tensor dq, dk, dv;  // (B, H, Tq, d), (B, H, Tk, d), (B, H, Tk, dv)
  Heads dQ, dK, dV;   // the same, as the kernels read them
};
HeadGradients head_gradients(
    const Heads& Q, const Heads& K, const Heads& V, const NeedsGrad& needs, bool zero);

// q (B, H, Tq, d), k (B, Hkv, Tk, d), v (B, Hkv, Tk, dv) of one dtype, sizes within BLAS's 32
// bits, a dropout probability in [0, 1], and the variant's options: Hkv = H, or with enable_gqa a
// divisor of H; no ALiBi slopes or H finite ones. Else a ShapeError, DTypeError or ValueError
// starting "op:". Returns the group size G = H / Hkv: query head h reads key/value head h / G.
int64_t check_attention_operands(const Tensor& q, const Tensor& k, const Tensor& v,
    double dropout_p, const AttentionVariant& variant, const char* op);

// The keys query row i of batch row b attends to: [0, length), or, for a valid length of 0, all Tk
// of them with every score taken as equal (d2l's −1e6 fill): the uniform weights 1/Tk, dS = 0.
struct RowKeys {
  int64_t length = 0;    // keys [0, length) count (Tk for a valid length of 0)
  bool uniform = false;  // valid length 0
};

// The valid length of every query row: Tk when valid_lens is undefined, else row (b, i)'s entry of
// the (B,) or (B, Tq) valid_lens, checked as nn::masked_softmax checks them (a ShapeError starting
// "op:" naming the shapes of q and k).
class ValidLengths {
 public:
  ValidLengths(const Tensor& valid_lens, const Tensor& q, const Tensor& k, const char* op);
  int64_t operator()(int64_t b, int64_t i) const {
    return per_query_.empty() ? keys_ : per_query_[static_cast<std::size_t>(b * queries_ + i)];
  }
  RowKeys keys(int64_t b, int64_t i) const {
    const int64_t length = (*this)(b, i);
    return length == 0 ? RowKeys{keys_, true} : RowKeys{length, false};
  }

 private:
  std::vector<int64_t> per_query_;  // (B·Tq) lengths, row-major (b, i); empty: every key counts
  int64_t queries_ = 0, keys_ = 0;  // Tq, Tk
};

// ALiBi's bias for a query at `distance` = p_i − j from key j: −m·|p_i − j|, in double, rounded
// once to T. ag::alibi_bias and the kernels both round it here.
template <class T>
T alibi_term(double slope, int64_t distance) {
  return static_cast<T>(-slope * static_cast<double>(distance < 0 ? -distance : distance));
}

// ALiBi on one row of scores: the row's query at position p_i among the keys, the row's first
// column key j0; `position` is p_i − j0, so that column c is at distance position − c.
struct RowBias {
  double slope = 0;      // m_h of the row's head
  int64_t position = 0;  // p_i − j0
};

// One row of raw scores Q_i·K_jᵀ (cols of them) as the softmax sees them, in place:
//   s_j = score_j / √d                     without ALiBi (bias null)
//   s_j = score_j / √d − m·|p_i − j|       with it, the bias rounded once to T (alibi_term)
// for the n keys that count (all 0 in a uniform row: every score taken as equal, bias or not),
// 0 past them. Both kernels, and the tiled kernel's backward when it recomputes a tile, scale
// their scores here, so they see the same scores bit for bit; and the composed path
// scores / √d + alibi_bias(...) rounds as they do (a division, then an addition, each rounded).
template <class T>
void scale_scores(
    T* s, const RowKeys& keys, int64_t n, int64_t cols, T sqrt_d, const RowBias* bias = nullptr) {
  if (keys.uniform)
    std::fill(s, s + n, T(0));
  else if (bias == nullptr)
    for (int64_t j = 0; j < n; ++j) s[j] = s[j] / sqrt_d;
  else
    for (int64_t j = 0; j < n; ++j)
      s[j] = s[j] / sqrt_d + alibi_term<T>(bias->slope, bias->position - j);
  std::fill(s + n, s + cols, T(0));
}

}  // namespace ag::detail
