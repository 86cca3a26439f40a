// Softmax cross-entropy, fused, with its backward.
//
//   loss_n = log Σ_v exp(x_nv) − x_n,t_n          (x: logits (N, V), t: target ids (N,))
//          = m_n + log Σ_v exp(x_nv − m_n) − x_n,t_n     with m_n = max_v x_nv
//   ∂loss_n/∂x_nv = softmax(x_n)_v − [v = t_n]
//
// A row whose target is ignore_index (PyTorch's, −100 unless given) has loss 0 and gradient 0, and
// the mean is over the other rows (nanoGPT's ignore_index=-1, a padded batch's −100).
//
// Computing log-sum-exp after subtracting the row maximum (never log(softmax(x))) keeps the loss
// finite for logits of any size: a logit of +1e4 neither overflows exp nor loses the small terms.
#include <algorithm>
#include <cmath>
#include <limits>

#include "autograd/autograd.h"
#include "autograd/detail/kernels.h"
#include "autograd/detail/row_reductions.h"
#include "autograd/detail/target_clones.h"
#include "autograd/detail/vector_math.h"
#include "autograd/ops.h"
#include "autograd/parallel.h"
#include "autograd/profiler.h"

namespace ag {

namespace {

// One row of logits x[0, V) with target t: softmax(x) into p[0, V), and the loss, the log-sum-exp
// with the max m taken out:
//   loss = m + log Σ_v exp(x_v − m) − x_t,   softmax_v = exp(x_v − m) / Σ exp(x − m),
// one vectorised exp per element (detail/vector_math.h), the max and the sum in lanes
// (detail/row_reductions.h). Compiled once per instruction set: no multiply-add to fuse, so every
// copy gives the same bits.
template <class T>
[[gnu::always_inline]] inline T cross_entropy_row_impl(
    const T* x, T* p, int64_t V, int64_t target) {
  const T m = detail::row_max_lanes(x, V);
  // e = exp(x − m) into p, and Σ e (as row_sum_lanes adds it), in one pass
  const double total = detail::vec::functions(T()).exp_shifted_sum(x, m, p, V);
  const T inverse = static_cast<T>(1.0 / total);
  for (int64_t v = 0; v < V; ++v) p[v] *= inverse;  // softmax = e / Σ e
  return static_cast<T>(double(m) + std::log(total) - double(x[target]));
}
AG_TARGET_CLONES float cross_entropy_row(const float* x, float* p, int64_t V, int64_t target) {
  return cross_entropy_row_impl(x, p, V, target);
}
AG_TARGET_CLONES double cross_entropy_row(const double* x, double* p, int64_t V, int64_t target) {
  return cross_entropy_row_impl(x, p, V, target);
}

}  // namespace

Tensor cross_entropy(
    const Tensor& logits, const Tensor& targets, Reduction reduction, int64_t ignore_index) {
  AG_PROFILE_OP(Op::cross_entropy);
  detail::check_floating(logits, "cross_entropy");
  if (logits.dim() != 2 || targets.shape() != Shape{logits.size(0)})
    fail<ShapeError>("cross_entropy: logits of shape ", shape_str(logits.shape()),
        " and targets of shape ", shape_str(targets.shape()),
        " do not fit (expected (N, V) and (N,))");
  const int64_t N = logits.size(0), V = logits.size(1);
  if (V == 0)
    fail<ShapeError>(
        "cross_entropy: logits of shape ", shape_str(logits.shape()), " have no classes");
  constexpr int64_t kIgnored = -1;  // target_ids' mark for a row whose target is ignore_index
  std::vector<int64_t> target_ids;
  target_ids.reserve(static_cast<std::size_t>(N));
  int64_t counted = 0;  // the rows whose target is not ignore_index
  for (double t : index_values(targets, "cross_entropy")) {
    if (t == static_cast<double>(ignore_index)) {
      target_ids.push_back(kIgnored);
      continue;
    }
    if (!(t >= 0 && t < static_cast<double>(V)) || t != std::floor(t))
      fail<ShapeError>("cross_entropy: target ", t, " is not a class index in [0, ", V,
          ") nor ignore_index (", ignore_index, ") for logits of shape ",
          shape_str(logits.shape()));
    target_ids.push_back(static_cast<int64_t>(t));
    ++counted;
  }
  Tensor x = contiguous(logits.detach());
  Tensor losses = empty({N}, logits.dtype());
  Tensor probabilities = empty({N, V}, logits.dtype());  // softmax(x), saved for the backward
  dispatch(x.dtype(), [&]<typename T>() {
    const T* px = x.data<T>();
    T* loss = losses.data<T>();
    T* prob = probabilities.data<T>();
    // Row by row (cross_entropy_row), rows split between the threads: each row is one thread's
    // whole work, so the result does not depend on the thread count.
    parallel_for(N, 8 * V, [&](int64_t begin, int64_t end) {
      for (int64_t n = begin; n < end; ++n)
        loss[n] = target_ids[n] == kIgnored
                      ? T(0)
                      : cross_entropy_row(px + n * V, prob + n * V, V, target_ids[n]);
    });
  });
  // docs/ops.md, cross_entropy: g · (softmax(x) − onehot(t)); 0 where t is ignore_index
  Tensor out = detail::record(Op::cross_entropy, losses, {logits},
      [probabilities, target_ids, V](const Tensor& g, const NeedsGrad&) -> Grads {
        // gx_nv = g_n · (softmax(x_n)_v − [v = t_n]), rows split between the threads; 0 in an
        // ignored row (its softmax was not computed)
        Tensor grad = empty(probabilities.shape(), probabilities.dtype());
        Tensor gc = contiguous(g);
        dispatch(grad.dtype(), [&]<typename T>() {
          const T* prob = probabilities.data<T>();
          const T* up = gc.data<T>();
          T* out = grad.data<T>();
          const auto rows = static_cast<int64_t>(target_ids.size());
          parallel_for(rows, 2 * V, [&](int64_t begin, int64_t end) {
            for (int64_t n = begin; n < end; ++n) {
              const T* p = prob + n * V;
              T* row = out + n * V;
              const int64_t t = target_ids[n];
              if (t == kIgnored) {
                std::fill_n(row, V, T(0));
                continue;
              }
              for (int64_t v = 0; v < V; ++v) row[v] = p[v] * up[n];
              row[t] = (p[t] - T(1)) * up[n];
            }
          });
        });
        return {grad};
      });
  switch (reduction) {
    case Reduction::none:
      return out;
    case Reduction::sum:
      return sum(out);
    case Reduction::mean:
      break;
  }
  if (N == 0) fail<ShapeError>("cross_entropy: the mean over 0 rows is undefined");
  if (counted == 0)  // PyTorch gives NaN (0 / 0), which would poison a training run silently
    fail<ValueError>("cross_entropy: every one of the ", N, " targets is ignore_index (",
        ignore_index, "): the mean over no rows is undefined");
  if (counted == N) return mean(out);
  return sum(out) / static_cast<double>(counted);  // the mean over the rows not ignored
}

}  // namespace ag
