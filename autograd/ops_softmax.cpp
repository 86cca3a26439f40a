// Softmax and log_softmax, each with its backward.
//
//   op                  forward                               gradient
//   softmax(x, d)       y = exp(x − m) / Σ exp(x − m)         y · (g − Σ_d g·y)
//   log_softmax(x, d)   y = x − m − log Σ exp(x − m)          g − exp(y) · Σ_d g
//
// m is the maximum along d (subtracting it changes nothing mathematically and keeps exp from
// overflowing). Sums accumulate in double.
#include <algorithm>
#include <cmath>
#include <limits>

#include "autograd/autograd.h"
#include "autograd/kernels.h"
#include "autograd/ops.h"

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

// y = x − m − log Σ exp(x − m) (log = true) or y = exp(x − m) / Σ exp(x − m) along dim.
Tensor softmax_forward(const Tensor& x, int64_t dim, bool log) {
  Tensor out = empty(x.shape(), x.dtype());
  if (x.dim() == 0) {  // a single element: softmax 1, log_softmax 0
    out.fill_(log ? 0.0 : 1.0);
    return out;
  }
  const int64_t length = x.shape()[dim];
  dispatch(x.dtype(), [&]<typename T>() {
    for_each_lane<T>(x, out, dim, [&](const T* in, int64_t is, T* o, int64_t os) {
      T m = -std::numeric_limits<T>::infinity();
      for (int64_t k = 0; k < length; ++k) m = std::max(m, in[k * is]);
      if (std::isinf(m) && m < 0) m = 0;  // all −inf: avoid (−inf) − (−inf) = NaN in the shift
      double total = 0;
      for (int64_t k = 0; k < length; ++k) total += std::exp(double(in[k * is] - m));
      if (log) {
        const double log_total = std::log(total);
        for (int64_t k = 0; k < length; ++k) o[k * os] = static_cast<T>(double(in[k * is] - m) - log_total);
      } else {
        for (int64_t k = 0; k < length; ++k) o[k * os] = static_cast<T>(std::exp(double(in[k * is] - m)) / total);
      }
    });
  });
  return out;
}

}  // namespace

Tensor softmax(const Tensor& x, int64_t dim) {
  dim = wrap_dim(dim, x.dim(), "softmax");
  Tensor out = softmax_forward(x, dim, /*log=*/false);
  if (!detail::any_requires_grad({x})) return out;
  return detail::record(Op::softmax, out, {x}, [y = out.detach(), dim](const Tensor& g, const NeedsGrad&) -> Grads {
    // ∂y_j/∂x_i = y_j (δ_ij − y_i), so gx_i = Σ_j g_j y_j (δ_ij − y_i) = y_i (g_i − Σ_j g_j y_j)
    if (y.dim() == 0) return {zeros_like(g)};
    return {mul(y, sub(g, sum(mul(g, y), {dim}, /*keepdim=*/true)))};
  });
}

Tensor log_softmax(const Tensor& x, int64_t dim) {
  dim = wrap_dim(dim, x.dim(), "log_softmax");
  Tensor out = softmax_forward(x, dim, /*log=*/true);
  if (!detail::any_requires_grad({x})) return out;
  return detail::record(Op::log_softmax, out, {x}, [y = out.detach(), dim](const Tensor& g, const NeedsGrad&) -> Grads {
    // ∂y_j/∂x_i = δ_ij − softmax_i, so gx_i = g_i − exp(y_i) Σ_j g_j
    if (y.dim() == 0) return {zeros_like(g)};
    return {sub(g, mul(exp(y), sum(g, {dim}, /*keepdim=*/true)))};
  });
}

}  // namespace ag
