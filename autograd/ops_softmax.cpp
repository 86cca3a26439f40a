// Softmax over a dim, and the length-masked softmax of attention, each with its backward. Each op's
// gradient is written once, in the docs/ops.md tag beside its backward (test_docs checks it
// against the table).
//
// Softmax is taken as exp(x − m) / Σ exp(x − m) with m the maximum of the row (subtracting it
// changes nothing mathematically and keeps exp from overflowing). Each row is computed in one
// place, row_softmax below: m, then e = exp(x − m) once per element, written straight to the
// output, and Σ e (in double), then a multiply by 1 / Σ e. The max and the sum run in lanes
// (detail/row_reductions.h), so that neither is a chain of dependent operations.
// float32 rows use the vectorised exp of vector_math.h, which adds Σ e in the pass that computes
// e (detail::exp_shifted_sum: each e within 1 ulp of the exact result, the sum row_sum_lanes'
// bits); float64 rows keep std::exp, so the float64 gradchecks see full precision.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "autograd/allocator.h"
#include "autograd/autograd.h"
#include "autograd/detail/kernels.h"
#include "autograd/detail/row_reductions.h"
#include "autograd/detail/target_clones.h"
#include "autograd/detail/vector_math.h"
#include "autograd/ops.h"
#include "autograd/profiler.h"

namespace ag {

using detail::for_each_row;

namespace {

// Calls lane(in, in_stride, out, out_stride) for every 1-D lane of x along `dim`, where `out` is
// the matching lane of the contiguous tensor `out` of the same shape.
template <class T, class LaneFn>
void for_each_lane(const Tensor& x, const Tensor& out, int64_t dim, LaneFn&& lane) {
  Shape outer = x.shape();
  outer[dim] = 1;
  const T* px = x.data<T>();
  T* po = out.data<T>();
  const int64_t x_stride = x.strides()[dim], out_stride = out.strides()[dim];
  for_each_row<2>(outer, {x.strides(), out.strides()},
      [&](const std::array<int64_t, 2>& off, int64_t n, const std::array<int64_t, 2>& st) {
        for (int64_t i = 0; i < n; ++i)
          lane(px + off[0] + i * st[0], x_stride, po + off[1] + i * st[1], out_stride);
      });
}

// ---- one contiguous row -------------------------------------------------------------------------

using detail::exp_shifted_row;

// The largest of in[0, n), or 0 if all are −inf (so that x − m is −inf rather than NaN).
template <class T>
[[gnu::always_inline]] inline T row_max(const T* in, int64_t n) {
  const T m = detail::row_max_lanes(in, n);
  return std::isinf(m) && m < 0 ? T(0) : m;
}

// e = exp(x − m) into out[0, n), and Σ e in double with row_sum_lanes' bits: for float32 in the
// pass that computes e (vector_math.h's exp_shifted_sum), for float64 after it.
[[gnu::always_inline]] inline double exp_shifted_row_sum(
    const float* in, float m, float* out, int64_t n) {
  return detail::exp_shifted_sum(in, m, out, n);
}
[[gnu::always_inline]] inline double exp_shifted_row_sum(
    const double* in, double m, double* out, int64_t n) {
  exp_shifted_row(in, m, out, n);
  return detail::row_sum_lanes(out, n);
}

// y = e / Σ e with e = exp(x − max x), over in[r][0, n[r]) into out[r][0, n[r]) for G rows (in
// may be out: the max is taken first, and each e_k is computed from in[k] alone). The G rows go
// step by step — their maxima, then their exps and sums, then their scalings — so that the CPU
// overlaps their chains of dependent steps (the max's combining, the division by the sum), where
// a short row (d2l's 10 keys) would wait on each in turn; each row rounds as it would alone.
// Always inlined, here and above, into the copies per instruction set below.
template <int64_t G, class T>
[[gnu::always_inline]] inline void softmax_of_rows(
    const T* const* in, T* const* out, const int64_t* n) {
  T m[G];
  for (int64_t r = 0; r < G; ++r) m[r] = row_max(in[r], n[r]);
  T inverse[G];
  for (int64_t r = 0; r < G; ++r)  // out = e = exp(x − m), one exp per element, and 1 / Σ e
    inverse[r] = static_cast<T>(1.0 / exp_shifted_row_sum(in[r], m[r], out[r], n[r]));
  for (int64_t r = 0; r < G; ++r)
    for (int64_t k = 0; k < n[r]; ++k) out[r][k] *= inverse[r];  // y = e / Σ e
}
template <class T>
[[gnu::always_inline]] inline void row_softmax(const T* in, T* out, int64_t n) {
  softmax_of_rows<1>(&in, &out, &n);
}

// y = x − m − log Σ exp(x − m), over in[0, n) into out[0, n) (distinct arrays).
template <class T>
[[gnu::always_inline]] inline void row_log_softmax(const T* in, T* out, int64_t n) {
  const T m = row_max(in, n);
  const double total = exp_shifted_row_sum(in, m, out, n);  // out = exp(x − m), only summed
  const double log_total = std::log(total);
  for (int64_t k = 0; k < n; ++k) out[k] = static_cast<T>(double(in[k] - m) - log_total);
}

// The rows above compiled once per instruction set (detail/target_clones.h): the max, the sums
// and the scaling on 8 or 16 elements at a time. None of their steps is a multiply-add the
// compiler could fuse, so every copy gives the same bits. (softmax_row: detail/kernels.h.)
AG_TARGET_CLONES void log_softmax_row(const float* in, float* out, int64_t n) {
  row_log_softmax(in, out, n);
}
AG_TARGET_CLONES void log_softmax_row(const double* in, double* out, int64_t n) {
  row_log_softmax(in, out, n);
}

// y = x − m − log Σ exp(x − m) (log = true) or y = exp(x − m) / Σ exp(x − m) along dim.
Tensor softmax_forward(const Tensor& x, int64_t dim, bool log) {
  detail::check_floating(x, log ? "log_softmax" : "softmax");
  Tensor out = empty(x.shape(), x.dtype());
  if (x.dim() == 0) {  // a single element: softmax 1, log_softmax 0
    out.fill_(log ? 0.0 : 1.0);
    return out;
  }
  const int64_t length = x.shape()[dim];
  dispatch(x.dtype(), [&]<typename T>() {
    auto row = [log](const T* in, T* o, int64_t n) {
      log ? log_softmax_row(in, o, n) : detail::softmax_row(in, o, n);
    };
    if (dim == x.dim() - 1 && x.is_contiguous()) {
      // Rows of the last dim, one after another: ag's threads split them (each row is computed
      // whole by one thread, so the bits do not depend on the thread count).
      const int64_t rows = length == 0 ? 0 : x.numel() / length;
      const T* px = x.data<T>();
      T* po = out.data<T>();
      parallel_for(rows, 4 * length, [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) row(px + r * length, po + r * length, length);
      });
      return;
    }
    std::vector<T> lane_in, lane_out;  // a strided lane (a dim other than the last), gathered
    for_each_lane<T>(x, out, dim, [&](const T* in, int64_t is, T* o, int64_t os) {
      if (is == 1 && os == 1) return row(in, o, length);
      lane_in.resize(static_cast<std::size_t>(length));
      lane_out.resize(static_cast<std::size_t>(length));
      for (int64_t k = 0; k < length; ++k) lane_in[k] = in[k * is];
      row(lane_in.data(), lane_out.data(), length);
      for (int64_t k = 0; k < length; ++k) o[k * os] = lane_out[k];
    });
  });
  return out;
}

// ---- length_masked_softmax: checking the valid lengths ------------------------------------------

// The valid length of every row (b, q) of X (B, Q, K), checked with the messages
// nn::masked_softmax has always had.
std::vector<int64_t> valid_length_per_row(const Tensor& X, const Tensor& valid_lens) {
  if (X.dim() != 3)
    fail<ShapeError>("masked_softmax: X must be (B, Q, K), got shape ", shape_str(X.shape()));
  const std::string x = "X of shape " + shape_str(X.shape());
  return valid_lengths_per_query(
      valid_lens, X.size(0), X.size(1), X.size(2), "masked_softmax", x, x);
}

}  // namespace

std::vector<int64_t> valid_lengths_per_query(const Tensor& valid_lens, int64_t B, int64_t Q,
    int64_t K, const char* op, const std::string& queries, const std::string& keys) {
  const bool per_row = valid_lens.shape() == Shape{B};
  const bool per_query = valid_lens.shape() == Shape{B, Q};
  if (!per_row && !per_query)
    fail<ShapeError>(op, ": valid_lens of shape ", shape_str(valid_lens.shape()), " does not fit ",
        queries, " (expected [", B, "] or [", B, ",", Q, "])");
  const std::vector<double> lens = index_values(valid_lens, op);
  for (double len : lens)
    if (!(len >= 0 && len <= static_cast<double>(K)) || len != std::floor(len))
      fail<ShapeError>(op, ": valid length ", len, " is not an integer in [0, ", K,
          "] (valid_lens of shape ", shape_str(valid_lens.shape()), ", ", keys, ")");
  std::vector<int64_t> lengths;
  detail::reserve_scratch(lengths, static_cast<std::size_t>(B * Q), op, {B, Q});
  lengths.resize(static_cast<std::size_t>(B * Q));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t q = 0; q < Q; ++q)
      lengths[static_cast<std::size_t>(b * Q + q)] =
          static_cast<int64_t>(lens[static_cast<std::size_t>(per_row ? b : b * Q + q)]);
  return lengths;
}

AG_TARGET_CLONES void detail::softmax_row(const float* in, float* out, int64_t n) {
  row_softmax(in, out, n);
}
AG_TARGET_CLONES void detail::softmax_row(const double* in, double* out, int64_t n) {
  row_softmax(in, out, n);
}

namespace {

// row_softmax in place on each row (the attention kernels' rows of scores), four at a time.
template <class T>
[[gnu::always_inline]] inline void softmax_rows_impl(
    T* const* rows, const int64_t* lengths, int64_t count) {
  constexpr int64_t kGroup = 4;
  int64_t i = 0;
  for (; i + kGroup <= count; i += kGroup) softmax_of_rows<kGroup>(rows + i, rows + i, lengths + i);
  for (; i < count; ++i) row_softmax(rows[i], rows[i], lengths[i]);
}

}  // namespace

AG_TARGET_CLONES void detail::softmax_rows(
    float* const* rows, const int64_t* lengths, int64_t count) {
  softmax_rows_impl(rows, lengths, count);
}
AG_TARGET_CLONES void detail::softmax_rows(
    double* const* rows, const int64_t* lengths, int64_t count) {
  softmax_rows_impl(rows, lengths, count);
}

namespace {
// softmax's backward on one row, dx = y · (g − Σ g · y), once per instruction set (a product of
// a difference: nothing to fuse, the same bits in every copy).
template <class T>
[[gnu::always_inline]] inline void softmax_backward_row_impl(
    const T* g, const T* y, T* dx, int64_t n) {
  const T g_dot_y = static_cast<T>(detail::row_dot_lanes(g, y, n));  // Σ g · y
  for (int64_t k = 0; k < n; ++k) dx[k] = y[k] * (g[k] - g_dot_y);
}
AG_TARGET_CLONES void softmax_backward_row(const float* g, const float* y, float* dx, int64_t n) {
  softmax_backward_row_impl(g, y, dx, n);
}
AG_TARGET_CLONES void softmax_backward_row(
    const double* g, const double* y, double* dx, int64_t n) {
  softmax_backward_row_impl(g, y, dx, n);
}

// The backward of softmax (log = false) or log_softmax (log = true) over the last dim of a
// contiguous y, a row at a time in one pass (the composed ops would take four):
//   softmax:      dx = y · (g − Σ g · y)
//   log_softmax:  dx = g − exp(y) · Σ g
Tensor softmax_backward_rows(const Tensor& g_given, const Tensor& y, bool log) {
  // g's rows: a sum's gradient arrives expanded, one row read for every row (row_stride 0)
  const detail::GradientRows g_rows = detail::gradient_rows(g_given, 1);
  Tensor dx = empty(y.shape(), y.dtype());
  const int64_t n = y.size(-1);
  const int64_t rows = n == 0 ? 0 : y.numel() / n;
  dispatch(y.dtype(), [&]<typename T>() {
    const auto exp = detail::vec::functions(T()).exp;
    parallel_for(rows, 3 * n, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const T* g_row = g_rows.g.data<T>() + r * g_rows.row_stride;
        const T* y_row = y.data<T>() + r * n;
        T* dx_row = dx.data<T>() + r * n;
        if (log) {
          const T g_sum = static_cast<T>(detail::row_sum_lanes(g_row, n));  // Σ g
          exp(y_row, dx_row, n);                                            // softmax = exp(y)
          for (int64_t k = 0; k < n; ++k) dx_row[k] = g_row[k] - dx_row[k] * g_sum;
        } else {
          softmax_backward_row(g_row, y_row, dx_row, n);  // y · (g − Σ g · y)
        }
      }
    });
  });
  return dx;
}
}  // namespace

Tensor softmax(const Tensor& x, int64_t dim) {
  AG_PROFILE_OP(Op::softmax);
  dim = wrap_dim(dim, x.dim(), "softmax");
  Tensor out = softmax_forward(x, dim, /*log=*/false);  // y = exp(x − max) / Σ_d exp(x − max)
  if (!detail::any_requires_grad({x})) return out;
  // docs/ops.md, softmax: y · (g − Σ_d g · y)
  return detail::record(Op::softmax, out, {x}, /*saved=*/{out},
      [y = out.detach(), dim](const Tensor& g, const NeedsGrad&) -> Grads {
        // ∂y_j/∂x_i = y_j (δ_ij − y_i), so gx_i = Σ_j g_j y_j (δ_ij − y_i) = y_i (g_i − Σ_j g_j
        // y_j)
        if (y.dim() == 0) return {zeros_like(g)};
        if (dim == y.dim() - 1 && y.is_contiguous()) return {softmax_backward_rows(g, y, false)};
        return {mul(y, sub(g, sum(mul(g, y), {dim}, /*keepdim=*/true)))};
      });
}

Tensor log_softmax(const Tensor& x, int64_t dim) {
  AG_PROFILE_OP(Op::log_softmax);
  dim = wrap_dim(dim, x.dim(), "log_softmax");
  Tensor out = softmax_forward(x, dim, /*log=*/true);  // y = x − max − log Σ_d exp(x − max)
  if (!detail::any_requires_grad({x})) return out;
  // docs/ops.md, log_softmax: g − exp(y) · Σ_d g
  return detail::record(Op::log_softmax, out, {x}, /*saved=*/{out},
      [y = out.detach(), dim](const Tensor& g, const NeedsGrad&) -> Grads {
        // ∂y_j/∂x_i = δ_ij − softmax_i, so gx_i = g_i − exp(y_i) Σ_j g_j
        if (y.dim() == 0) return {zeros_like(g)};
        if (dim == y.dim() - 1 && y.is_contiguous()) return {softmax_backward_rows(g, y, true)};
        return {sub(g, mul(exp(y), sum(g, {dim}, /*keepdim=*/true)))};
      });
}

Tensor length_masked_softmax(const Tensor& X, const Tensor& valid_lens) {
  AG_PROFILE_OP(Op::length_masked_softmax);
  detail::check_floating(X, "masked_softmax");
  // X seen as rows of its last dim: (B, Q, K) is B·Q rows of K (a 0-dim X is one row of 1).
  const int64_t K = X.dim() == 0 ? 1 : X.size(-1);
  const int64_t rows = K == 0 ? 0 : X.numel() / K;
  // One valid length per row; empty when valid_lens is undefined (every row has all K).
  std::vector<int64_t> lengths;
  if (valid_lens.defined()) lengths = valid_length_per_row(X, valid_lens);
  const Tensor x = contiguous(X.detach());  // row r starts at r·K
  Tensor y = empty(X.shape(), X.dtype());
  dispatch(X.dtype(), [&]<typename T>() {
    // Rows are independent: ag's threads split them (the same result on any number of threads).
    parallel_for(rows, 4 * K, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const T* x_row = x.data<T>() + r * K;
        T* y_row = y.data<T>() + r * K;
        const int64_t valid = lengths.empty() ? K : lengths[r];
        if (valid == 0) {
          // d2l fills the whole row with −1e6: equal scores, so uniform weights.
          std::fill(y_row, y_row + K, static_cast<T>(1.0 / static_cast<double>(K)));
          continue;
        }
        detail::softmax_row(x_row, y_row, valid);   // y_k = e_k / Σ_{j<L} e_j for k < L
        std::fill(y_row + valid, y_row + K, T(0));  // d2l: exp(−1e6 − m) underflows to exactly 0
      }
    });
  });
  if (!detail::any_requires_grad({X})) return y;
  // docs/ops.md, length_masked_softmax: y · (g − Σ_{j<L} g · y) on the first L entries, 0 after; 0
  //   everywhere when L = 0
  return detail::record(Op::length_masked_softmax, y, {X}, /*saved=*/{y},
      [y = y.detach(), lengths = std::move(lengths), rows, K](
          const Tensor& g, const NeedsGrad&) -> Grads {
        // In the forward pass this was y_k = e_k / Σ_{j<L} e_j for k < L, and a constant for k ≥ L
        // (0) or for every k when L = 0 (1/K). On the valid entries ∂y_j/∂x_i = y_j (δ_ij − y_i),
        // so
        //   dx_i = Σ_j g_j y_j (δ_ij − y_i) = y_i (g_i − Σ_{j<L} g_j y_j)   for i < L,
        //   dx_i = 0                                                         otherwise.
        const Tensor g_rows = contiguous(g);      // (…, K)
        Tensor dx = empty(y.shape(), y.dtype());  // (…, K)
        dispatch(y.dtype(), [&]<typename T>() {
          parallel_for(rows, 3 * K, [&](int64_t begin, int64_t end) {
            for (int64_t r = begin; r < end; ++r) {
              const T* y_row = y.data<T>() + r * K;
              const T* g_row = g_rows.data<T>() + r * K;
              T* dx_row = dx.data<T>() + r * K;
              const int64_t valid = lengths.empty() ? K : lengths[r];
              double g_dot_y = 0;  // Σ_j g_j y_j
              for (int64_t j = 0; j < valid; ++j) g_dot_y += double(g_row[j]) * double(y_row[j]);
              for (int64_t i = 0; i < valid; ++i)
                dx_row[i] = y_row[i] * (g_row[i] - static_cast<T>(g_dot_y));
              std::fill(dx_row + valid, dx_row + K, T(0));
            }
          });
        });
        return {dx};
      });
}

}  // namespace ag
