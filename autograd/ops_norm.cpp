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
// The forward saves x, w and per row only μ and rstd (float64, shape = the leading dims); the
// backward rebuilds x̂ from them, so no (…, N) intermediate is kept. The composed path
// (nn::LayerNorm with fused_kernels() off) records ~8 ops and keeps several full-size tensors.
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

}  // namespace

Tensor layer_norm(const Tensor& input, const Shape& normalized_shape, const Tensor& weight,
                  const Tensor& bias, double eps) {
  check_layer_norm_args(input, normalized_shape, weight, bias);
  // x: (R, N) in memory — R rows (the leading dims) of N contiguous elements.
  const Tensor x = contiguous(input.detach());                 // (..., *normalized_shape)
  const Tensor w = weight.defined() ? contiguous(weight.detach()) : Tensor();  // (*normalized_shape)
  const Tensor b = bias.defined() ? contiguous(bias.detach()) : Tensor();      // (*normalized_shape)
  const int64_t N = numel(normalized_shape);
  const Shape row_shape(x.shape().begin(), x.shape().end() - static_cast<int64_t>(normalized_shape.size()));
  const int64_t R = numel(row_shape);

  Tensor out = empty(x.shape(), x.dtype());   // (..., *normalized_shape)
  Tensor mean = empty(row_shape, float64);    // (...)  μ of each row, saved for the backward
  Tensor rstd = empty(row_shape, float64);    // (...)  1 / sqrt(σ² + eps) of each row, saved
  dispatch(x.dtype(), [&]<typename T>() {
    const T* px = x.data<T>();
    const T* pw = w.defined() ? w.data<T>() : nullptr;
    const T* pb = b.defined() ? b.data<T>() : nullptr;
    T* py = out.data<T>();
    double* pmean = mean.data<double>();
    double* prstd = rstd.data<double>();
    for (int64_t r = 0; r < R; ++r) {
      const T* x_row = px + r * N;
      T* y_row = py + r * N;
      // Two sweeps over the row (it stays in cache): μ, then Σ (x − μ)², both in double — the
      // same arithmetic as mean() and var(), and no cancellation as in Σx² − Nμ².
      double sum = 0;
      for (int64_t i = 0; i < N; ++i) sum += double(x_row[i]);
      const double mu = sum / double(N);
      double squares = 0;
      for (int64_t i = 0; i < N; ++i) {
        const double centered = double(x_row[i]) - mu;
        squares += centered * centered;
      }
      const double s = 1.0 / std::sqrt(squares / double(N) + eps);
      pmean[r] = mu;
      prstd[r] = s;
      // y = x̂ · w + b
      for (int64_t i = 0; i < N; ++i) {
        const double x_hat = (double(x_row[i]) - mu) * s;
        const double scale = pw ? double(pw[i]) : 1.0;
        const double shift = pb ? double(pb[i]) : 0.0;
        y_row[i] = static_cast<T>(x_hat * scale + shift);
      }
    }
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
          const T* pw = w.defined() ? w.data<T>() : nullptr;
          const T* pg = g.data<T>();
          T* pdx = want_dx ? dx.data<T>() : nullptr;
          double* pdw = want_dw ? dw.data() : nullptr;
          double* pdb = want_db ? db.data() : nullptr;
          const double* pmean = mean.data<double>();
          const double* prstd = rstd.data<double>();
          for (int64_t r = 0; r < R; ++r) {
            const T* x_row = px + r * N;
            const T* g_row = pg + r * N;
            const double mu = pmean[r], s = prstd[r];
            // Sweep 1: Σ ĝ and Σ ĝ · x̂ over the row (for dx); g · x̂ and g into dw and db.
            double sum_g_hat = 0, sum_g_hat_x_hat = 0;
            for (int64_t i = 0; i < N; ++i) {
              const double x_hat = (double(x_row[i]) - mu) * s;
              const double g_i = double(g_row[i]);
              const double g_hat = pw ? g_i * double(pw[i]) : g_i;  // ĝ = g · w
              sum_g_hat += g_hat;
              sum_g_hat_x_hat += g_hat * x_hat;
              if (pdw) pdw[i] += g_i * x_hat;
              if (pdb) pdb[i] += g_i;
            }
            if (!pdx) continue;
            // Sweep 2: dx = rstd · (ĝ − mean(ĝ) − x̂ · mean(ĝ · x̂))
            const double mean_g_hat = sum_g_hat / double(N);
            const double mean_g_hat_x_hat = sum_g_hat_x_hat / double(N);
            T* dx_row = pdx + r * N;
            for (int64_t i = 0; i < N; ++i) {
              const double x_hat = (double(x_row[i]) - mu) * s;
              const double g_hat = pw ? double(g_row[i]) * double(pw[i]) : double(g_row[i]);
              dx_row[i] = static_cast<T>(s * (g_hat - mean_g_hat - x_hat * mean_g_hat_x_hat));
            }
          }
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
