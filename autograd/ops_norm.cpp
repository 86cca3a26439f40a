// Layer normalisation as one fused op, forward and backward together (llm.c's layernorm_forward /
// layernorm_backward, for any number of normalized trailing dims).
//
//   layer_norm(x, normalized_shape, w, b, eps)
//
// Each row of x — the last normalized_shape.size() dims flattened, N = numel(normalized_shape)
// elements — is normalised on its own:
//
//   μ    = Σ_i x_i / N                       mean of the row
//   σ²   = Σ_i (x_i − μ)² / N                biased variance (as torch.nn.functional.layer_norm)
//   rstd = 1 / sqrt(σ² + eps)
//   x̂_i  = (x_i − μ) · rstd
//   y_i  = x̂_i · w_i + b_i                   (w = 1, b = 0 when they are undefined: no affine)
//
// Gradients, with g = ∂L/∂y and ĝ_i = g_i · w_i = ∂L/∂x̂_i:
//
//   ∂μ/∂x_i = 1/N,  ∂rstd/∂x_i = −rstd³ (x_i − μ) / N = −rstd² x̂_i / N, so
//   ∂x̂_j/∂x_i = rstd · (δ_ij − 1/N − x̂_i x̂_j / N) and
//   dx_i = Σ_j ĝ_j ∂x̂_j/∂x_i = rstd · (ĝ_i − mean(ĝ) − x̂_i · mean(ĝ · x̂))   means over the row
//   dw_i = Σ_rows g_i · x̂_i
//   db_i = Σ_rows g_i
//
// The forward saves x, w (ones without a weight) and per row only μ and rstd (float64, shape =
// the leading dims); the backward rebuilds x̂ from them, so no (…, N) intermediate is kept. The
// composed path (nn::LayerNorm with fused_kernels() off) records 8 ops and keeps x − μ and x̂,
// two more full-size tensors, for its backward.
// Like every ag backward, this one runs with grad mode off and is not itself differentiable (ag has
// no double backward); it is plain loops over the rows, computing only the gradients asked for.
#include <cmath>
#include <vector>

#include "autograd/autograd.h"
#include "autograd/kernels.h"
#include "autograd/ops.h"

namespace ag {

namespace {

// Throws unless x ends in normalized_shape and weight and bias (when defined) have exactly that
// shape and x's dtype.
void check_layer_norm_args(const Tensor& x, const Shape& normalized_shape, const Tensor& weight,
                           const Tensor& bias) {
  if (normalized_shape.empty())
    detail::fail<ValueError>("layer_norm: normalized_shape cannot be empty (input of shape ",
                             shape_str(x.shape()), ")");
  const int64_t n = static_cast<int64_t>(normalized_shape.size());
  const bool fits = x.dim() >= n && Shape(x.shape().end() - n, x.shape().end()) == normalized_shape;
  if (!fits)
    detail::fail<ShapeError>("layer_norm: input of shape ", shape_str(x.shape()),
                             " does not end in normalized_shape ", shape_str(normalized_shape));
  for (const auto& [name, parameter] : {std::pair{"weight", &weight}, std::pair{"bias", &bias}}) {
    if (!parameter->defined()) continue;
    if (parameter->shape() != normalized_shape)
      detail::fail<ShapeError>("layer_norm: ", name, " of shape ", shape_str(parameter->shape()),
                               " does not match normalized_shape ", shape_str(normalized_shape),
                               " (input of shape ", shape_str(x.shape()), ")");
    detail::check_same_dtype(x, *parameter, "layer_norm");
  }
}

// Σ_i term(i) over a row of n elements, in double. Four partial sums instead of one running sum:
// each add then need not wait for the previous one to finish (the compiler may not reorder
// floating-point adds itself), which makes these reductions several times faster.
template <class Term>
double row_sum(int64_t n, Term&& term) {
  double partial[4] = {0.0, 0.0, 0.0, 0.0};
  int64_t i = 0;
  for (; i + 4 <= n; i += 4)
    for (int64_t k = 0; k < 4; ++k) partial[k] += term(i + k);
  for (; i < n; ++i) partial[0] += term(i);
  return (partial[0] + partial[1]) + (partial[2] + partial[3]);
}

}  // namespace

Tensor layer_norm(const Tensor& input, const Shape& normalized_shape, const Tensor& weight,
                  const Tensor& bias, double eps) {
  check_layer_norm_args(input, normalized_shape, weight, bias);
  // x: (R, N) in memory — R rows (the leading dims) of N contiguous elements.
  const Tensor x = contiguous(input.detach());                 // (..., *normalized_shape)
  // No affine is w = 1 and b = 0: N elements each, so that the loops below need no branches.
  const Tensor w = weight.defined() ? contiguous(weight.detach())
                                    : ones(normalized_shape, x.dtype());  // (*normalized_shape)
  const Tensor b = bias.defined() ? contiguous(bias.detach())
                                  : zeros(normalized_shape, x.dtype());  // (*normalized_shape)
  const int64_t N = numel(normalized_shape);
  const Shape row_shape(x.shape().begin(), x.shape().end() - static_cast<int64_t>(normalized_shape.size()));
  const int64_t R = numel(row_shape);

  Tensor out = empty(x.shape(), x.dtype());   // (..., *normalized_shape)
  Tensor mean = empty(row_shape, float64);    // (...)  μ of each row, saved for the backward
  Tensor rstd = empty(row_shape, float64);    // (...)  1 / sqrt(σ² + eps) of each row, saved
  dispatch(x.dtype(), [&]<typename T>() {
    const T* px = x.data<T>();
    const T* pw = w.data<T>();
    const T* pb = b.data<T>();
    T* py = out.data<T>();
    double* pmean = mean.data<double>();
    double* prstd = rstd.data<double>();
    // Rows are independent: ag's threads split them.
    detail::parallel_for(R, 4 * N, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const T* x_row = px + r * N;
        T* y_row = py + r * N;
        // Two sweeps over the row (it stays in cache): μ, then Σ (x − μ)², both in double as
        // mean() and var() do — no cancellation as in Σx² − Nμ².
        const double mu = row_sum(N, [&](int64_t i) { return double(x_row[i]); }) / double(N);
        const double variance = row_sum(N, [&](int64_t i) {
                                  const double centered = double(x_row[i]) - mu;
                                  return centered * centered;
                                }) / double(N);
        const double s = 1.0 / std::sqrt(variance + eps);
        pmean[r] = mu;
        prstd[r] = s;
        // y = x̂ · w + b
        for (int64_t i = 0; i < N; ++i)
          y_row[i] = static_cast<T>((double(x_row[i]) - mu) * s * double(pw[i]) + double(pb[i]));
      }
    });
  });
  if (!detail::any_requires_grad({input, weight, bias})) return out;

  return detail::record(
      Op::layer_norm, out, {input, weight, bias},
      [x, w, mean, rstd, R, N, normalized_shape](const Tensor& grad_output, const NeedsGrad& needs) -> Grads {
        const bool want_dx = needs[0], want_dw = needs[1], want_db = needs[2];
        const Tensor g = contiguous(grad_output);                             // (..., *normalized_shape)
        Tensor dx = want_dx ? empty(x.shape(), x.dtype()) : Tensor();         // (..., *normalized_shape)
        std::vector<double> dw(want_dw ? static_cast<std::size_t>(N) : 0);  // (N) Σ_rows g · x̂
        std::vector<double> db(want_db ? static_cast<std::size_t>(N) : 0);  // (N) Σ_rows g
        dispatch(x.dtype(), [&]<typename T>() {
          const T* px = x.data<T>();
          const T* pw = w.data<T>();
          const T* pg = g.data<T>();
          T* pdx = want_dx ? dx.data<T>() : nullptr;
          double* pdw = want_dw ? dw.data() : nullptr;
          double* pdb = want_db ? db.data() : nullptr;
          const double* pmean = mean.data<double>();
          const double* prstd = rstd.data<double>();
          // x̂_i = (x_i − μ) · rstd of row r, rebuilt from the saved μ and rstd.
          auto x_hat = [&](int64_t r, int64_t i) { return (double(px[r * N + i]) - pmean[r]) * prstd[r]; };
          // Pass 1, rows split across threads: dx = rstd · (ĝ − mean(ĝ) − x̂ · mean(ĝ · x̂)), ĝ = g · w.
          if (pdx)
            detail::parallel_for(R, 6 * N, [&](int64_t begin, int64_t end) {
              for (int64_t r = begin; r < end; ++r) {
                const T* g_row = pg + r * N;
                auto g_hat = [&](int64_t i) { return double(g_row[i]) * double(pw[i]); };
                const double mean_g_hat = row_sum(N, g_hat) / double(N);
                const double mean_g_hat_x_hat =
                    row_sum(N, [&](int64_t i) { return g_hat(i) * x_hat(r, i); }) / double(N);
                T* dx_row = pdx + r * N;
                for (int64_t i = 0; i < N; ++i)
                  dx_row[i] = static_cast<T>(prstd[r] * (g_hat(i) - mean_g_hat - x_hat(r, i) * mean_g_hat_x_hat));
              }
            });
          // Pass 2, columns split across threads (each sums its columns over the rows in order, so
          // the result is the same on any number of threads): dw = Σ_rows g · x̂, db = Σ_rows g.
          if (pdw || pdb)
            detail::parallel_for(N, 2 * R, [&](int64_t begin, int64_t end) {
              for (int64_t r = 0; r < R; ++r) {
                const T* g_row = pg + r * N;
                if (pdw)
                  for (int64_t i = begin; i < end; ++i) pdw[i] += double(g_row[i]) * x_hat(r, i);
                if (pdb)
                  for (int64_t i = begin; i < end; ++i) pdb[i] += double(g_row[i]);
              }
            });
        });
        // dw and db: (*normalized_shape), in x's dtype.
        auto to_tensor = [&](const std::vector<double>& sums) {
          Tensor t = empty(normalized_shape, x.dtype());
          dispatch(x.dtype(), [&]<typename T>() {
            T* p = t.data<T>();
            for (std::size_t i = 0; i < sums.size(); ++i) p[i] = static_cast<T>(sums[i]);
          });
          return t;
        };
        return {dx, want_dw ? to_tensor(dw) : Tensor(), want_db ? to_tensor(db) : Tensor()};
      });
}

}  // namespace ag
