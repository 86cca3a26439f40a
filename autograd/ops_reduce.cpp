// Reductions, each with its backward (softmax and log_softmax are in ops_softmax.cpp). Each op's
// gradient is written once, in the docs/ops.md tag beside its backward (test_docs checks it
// against the table), where N is the number of elements in each reduced group. Sums accumulate
// in double.
#include <algorithm>
#include <cmath>
#include <vector>

#include "autograd/allocator.h"
#include "autograd/autograd.h"
#include "autograd/detail/kernels.h"
#include "autograd/detail/row_reductions.h"
#include "autograd/detail/target_clones.h"
#include "autograd/ops.h"
#include "autograd/profiler.h"

namespace ag {

using detail::for_each_row;

namespace {

// Which dims a reduction removes, and the shapes with (keep_shape) and without (out_shape) them.
struct ReductionPlan {
  std::vector<bool> reduced;
  Shape keep_shape;    // reduced dims have size 1
  Shape out_shape;     // reduced dims removed (or kept as 1 with keepdim)
  int64_t group_size;  // elements per output element
};

ReductionPlan plan_reduction(const Tensor& x, const Shape& dims, bool keepdim, const char* op) {
  if (dims.empty())
    fail<ShapeError>(op, ": no dims given for a tensor of shape ", shape_str(x.shape()), "; call ",
        op, "(x) to reduce over all elements");
  ReductionPlan r{std::vector<bool>(x.shape().size(), false), x.shape(), {}, 1};
  for (int64_t dim : dims) {
    int64_t d = wrap_dim(dim, x.dim(), op);
    if (x.dim() == 0) continue;  // dim 0 / -1 of a 0-dim tensor: nothing to reduce
    if (r.reduced[d])
      fail<ShapeError>(
          op, ": dim ", dim, " is listed twice for a tensor of shape ", shape_str(x.shape()));
    r.reduced[d] = true;
    r.keep_shape[d] = 1;
    r.group_size *= x.shape()[d];
  }
  for (std::size_t d = 0; d < x.shape().size(); ++d)
    if (!r.reduced[d] || keepdim) r.out_shape.push_back(r.reduced[d] ? 1 : x.shape()[d]);
  return r;
}

ReductionPlan plan_full_reduction(const Tensor& x) {
  return {
      std::vector<bool>(x.shape().size(), true), Shape(x.shape().size(), 1), Shape{}, x.numel()};
}

// Strides that map an element of x to its group's slot in a contiguous keep_shape buffer.
Shape group_strides(const ReductionPlan& r) {
  Shape strides = contiguous_strides(r.keep_shape);
  for (std::size_t d = 0; d < strides.size(); ++d)
    if (r.reduced[d]) strides[d] = 0;
  return strides;
}

void check_nonempty_groups(const Tensor& x, const ReductionPlan& r, const char* op) {
  if (r.group_size == 0 && numel(r.keep_shape) > 0)
    fail<ShapeError>(
        op, ": cannot reduce over zero elements (input shape ", shape_str(x.shape()), ")");
}

// Σ of a contiguous row, in double: 16 running sums (detail/row_reductions.h) that the compiler
// keeps in vector registers, added pairwise at the end. One running sum would be a chain of
// dependent additions, four cycles each, where the lanes take a fraction of a cycle per element.
// The order is fixed by the row alone, so a sum's bits do not depend on the thread count.
AG_TARGET_CLONES double sum_contiguous(const float* in, int64_t n) {
  return detail::row_sum_lanes<16>(in, n);
}
AG_TARGET_CLONES double sum_contiguous(const double* in, int64_t n) {
  return detail::row_sum_lanes<16>(in, n);
}

// groups[i] += in[i] over a contiguous row, in double: each group's additions keep their order (the
// same bits as one at a time), the loop vectorised across groups, once per instruction set.
AG_TARGET_CLONES void add_row_into_groups(double* groups, const float* in, int64_t n) {
  for (int64_t i = 0; i < n; ++i) groups[i] += double(in[i]);
}
AG_TARGET_CLONES void add_row_into_groups(double* groups, const double* in, int64_t n) {
  for (int64_t i = 0; i < n; ++i) groups[i] += in[i];
}
// groups[i] += value for i in [0, n): a row of one value (stride 0, an expanded gradient's) into
// as many groups, the same additions as the loop above.
AG_TARGET_CLONES void add_value_into_groups(double* groups, double value, int64_t n) {
  for (int64_t i = 0; i < n; ++i) groups[i] += value;
}

// Whether x's elements fill [data, data + numel) exactly, in some order of its dims (a contiguous
// tensor, or a permutation of one): its strides, sorted, are those of a contiguous tensor.
bool dense_in_memory(const Tensor& x) {
  std::vector<std::pair<int64_t, int64_t>> stride_size;  // (stride, size) of the dims of size > 1
  for (int64_t d = 0; d < x.dim(); ++d)
    if (x.shape()[d] > 1) stride_size.emplace_back(x.strides()[d], x.shape()[d]);
  std::sort(stride_size.begin(), stride_size.end());
  int64_t expected = 1;
  for (const auto& [stride, size] : stride_size) {
    if (stride != expected) return false;
    expected *= size;
  }
  return true;
}

// Σ of each group, in double.
std::vector<double> group_sums(const Tensor& x, const ReductionPlan& r, const char* op) {
  std::vector<double> acc;
  detail::reserve_scratch(acc, static_cast<std::size_t>(numel(r.keep_shape)), op, r.out_shape);
  acc.assign(static_cast<std::size_t>(numel(r.keep_shape)), 0.0);
  if (acc.size() == 1 && dense_in_memory(x)) {
    // A sum of everything of a contiguous or permuted tensor: its memory in order, one row.
    dispatch(x.dtype(), [&]<typename T>() { acc[0] = sum_contiguous(x.data<T>(), x.numel()); });
    return acc;
  }
  dispatch(x.dtype(), [&]<typename T>() {
    const T* px = x.data<T>();
    for_each_row<2>(x.shape(), {x.strides(), group_strides(r)},
        [&](const std::array<int64_t, 2>& off, int64_t n, const std::array<int64_t, 2>& st) {
          const T* in = px + off[0];
          if (st[1] == 0 && st[0] == 1) {  // a contiguous row into one group
            acc[off[1]] += sum_contiguous(in, n);
          } else if (st[1] == 0) {  // a strided row into one group
            double s = 0;
            for (int64_t i = 0; i < n; ++i) s += double(in[i * st[0]]);
            acc[off[1]] += s;
          } else if (st[1] == 1 && st[0] == 1) {  // a contiguous row into as many groups
            add_row_into_groups(acc.data() + off[1], in, n);
          } else if (st[1] == 1 && st[0] == 0) {  // one value repeated, into as many groups
            add_value_into_groups(acc.data() + off[1], double(in[0]), n);
          } else {
            for (int64_t i = 0; i < n; ++i) acc[off[1] + i * st[1]] += double(in[i * st[0]]);
          }
        });
  });
  return acc;
}

Tensor from_doubles(
    const std::vector<double>& values, const Shape& shape, DType dtype, double scale) {
  Tensor out = empty(shape, dtype);
  dispatch(dtype, [&]<typename T>() {
    T* p = out.data<T>();
    for (std::size_t i = 0; i < values.size(); ++i) p[i] = static_cast<T>(values[i] * scale);
  });
  return out;
}

// The gradient of a reduction's output, broadcast back to the input's shape (a stride-0 view).
Tensor expand_back(const Tensor& g, const ReductionPlan& r, const Shape& input_shape) {
  return expand(reshape(g, r.keep_shape), input_shape);
}

// Σ of each group of an int64 or bool tensor, in int64 (wrapping on overflow, as PyTorch's): the
// count of a mask, (pred == target).sum().
Tensor integer_sums(const Tensor& x, const ReductionPlan& r) {
  Tensor out = detail::empty(r.out_shape, int64, "sum");
  int64_t* acc = out.data<int64_t>();  // out_shape has keep_shape's elements, in its order
  std::fill_n(acc, out.numel(), int64_t{0});
  dispatch_all(x.dtype(), [&]<typename T>() {
    if constexpr (std::is_same_v<T, int64_t> || std::is_same_v<T, bool>) {
      const T* px = x.data<T>();
      for_each_row<2>(x.shape(), {x.strides(), group_strides(r)},
          [&](const std::array<int64_t, 2>& off, int64_t n, const std::array<int64_t, 2>& st) {
            for (int64_t i = 0; i < n; ++i) {
              int64_t& slot = acc[off[1] + i * st[1]];
              slot = static_cast<int64_t>(
                  static_cast<uint64_t>(slot) + static_cast<uint64_t>(px[off[0] + i * st[0]]));
            }
          });
    }
  });
  return out;
}

Tensor sum_impl(const Tensor& x, const ReductionPlan& r) {
  AG_PROFILE_OP(Op::sum);
  if (!is_floating_point(x.dtype())) return integer_sums(x, r);  // int64, never in the graph
  Tensor out = from_doubles(group_sums(x, r, "sum"), r.out_shape, x.dtype(), 1.0);
  // docs/ops.md, sum: g broadcast back over the dims
  return detail::record(
      Op::sum, out, {x}, [r, shape = x.shape()](const Tensor& g, const NeedsGrad&) -> Grads {
        // ∂(Σ x)/∂x_i = 1 for every x_i of the group
        return {expand_back(g, r, shape)};
      });
}

Tensor mean_impl(const Tensor& x, const ReductionPlan& r, const char* op) {
  AG_PROFILE_OP(Op::mean);
  detail::check_floating(x, op);  // (PyTorch's mean of integers is an error too)
  check_nonempty_groups(x, r, op);
  const double n = static_cast<double>(r.group_size);
  Tensor out = from_doubles(group_sums(x, r, op), r.out_shape, x.dtype(), 1.0 / n);
  // docs/ops.md, mean: g / N broadcast back
  return detail::record(
      Op::mean, out, {x}, [r, n, shape = x.shape()](const Tensor& g, const NeedsGrad&) -> Grads {
        // ∂(Σ x / N)/∂x_i = 1 / N
        return {expand_back(div(g, n), r, shape)};
      });
}

// `op`: the name errors give (max, or amax, min, amin, logsumexp, which are built on it).
Tensor max_impl(const Tensor& x, const ReductionPlan& r, const char* op) {
  AG_PROFILE_OP(Op::max);
  detail::check_floating(x, op);
  check_nonempty_groups(x, r, op);
  Tensor xc = contiguous(x.detach());  // so an element's offset is its flat index
  const std::size_t groups = static_cast<std::size_t>(numel(r.keep_shape));
  std::vector<int64_t> argmax(groups, -1);  // flat index into x of each group's first maximum
  Tensor out = empty(r.out_shape, x.dtype());
  dispatch(x.dtype(), [&]<typename T>() {
    const T* px = xc.data<T>();
    std::vector<T> best(groups);
    for_each_row<2>(xc.shape(), {xc.strides(), group_strides(r)},
        [&](const std::array<int64_t, 2>& off, int64_t n, const std::array<int64_t, 2>& st) {
          for (int64_t i = 0; i < n; ++i) {
            const int64_t at = off[0] + i * st[0];
            const std::size_t group = static_cast<std::size_t>(off[1] + i * st[1]);
            const T v = px[at];
            // Strictly greater keeps the first maximum; NaN wins, as in PyTorch.
            if (argmax[group] < 0 || v > best[group] ||
                (std::isnan(v) && !std::isnan(best[group]))) {
              best[group] = v;
              argmax[group] = at;
            }
          }
        });
    std::copy(best.begin(), best.end(), out.data<T>());
  });
  // docs/ops.md, max: g at the first arg-max, 0 elsewhere
  return detail::record(Op::max, out, {x},
      [argmax = std::move(argmax), shape = x.shape()](const Tensor& g, const NeedsGrad&) -> Grads {
        // ∂ max/∂x_i = 1 for the arg-max of each group, 0 for the others
        Tensor grad = zeros(shape, g.dtype());
        Tensor gc = contiguous(g);
        dispatch(g.dtype(), [&]<typename T>() {
          T* dst = grad.data<T>();
          const T* src = gc.data<T>();
          for (std::size_t j = 0; j < argmax.size(); ++j) dst[argmax[j]] += src[j];
        });
        return {grad};
      });
}

Tensor var_impl(const Tensor& x, const ReductionPlan& r, int64_t correction) {
  AG_PROFILE_OP(Op::var);
  detail::check_floating(x, "var");
  check_nonempty_groups(x, r, "var");
  if (correction < 0) fail<ValueError>("var: correction ", correction, " is negative");
  const int64_t dof = r.group_size - correction;
  if (dof <= 0 && numel(r.keep_shape) > 0)
    fail<ShapeError>("var: ", r.group_size, " element(s) per group of input shape ",
        shape_str(x.shape()), " leave no degrees of freedom with correction ", correction);
  // Two passes: the group means x̄, then Σ (x − x̄)², both in double.
  std::vector<double> means = group_sums(x, r, "var");
  for (double& m : means) m /= static_cast<double>(r.group_size);
  std::vector<double> squares;
  detail::reserve_scratch(squares, means.size(), "var", r.out_shape);
  squares.assign(means.size(), 0.0);
  dispatch(x.dtype(), [&]<typename T>() {
    const T* px = x.data<T>();
    for_each_row<2>(x.shape(), {x.strides(), group_strides(r)},
        [&](const std::array<int64_t, 2>& off, int64_t n, const std::array<int64_t, 2>& st) {
          for (int64_t i = 0; i < n; ++i) {
            const int64_t group = off[1] + i * st[1];
            const double deviation = double(px[off[0] + i * st[0]]) - means[group];
            squares[group] += deviation * deviation;
          }
        });
  });
  Tensor out = from_doubles(squares, r.out_shape, x.dtype(), 1.0 / static_cast<double>(dof));
  if (!detail::any_requires_grad({x})) return out;
  Tensor mean_kept = from_doubles(means, r.keep_shape, x.dtype(), 1.0);
  // docs/ops.md, var: g · 2 (x − x̄) / (N − c)
  return detail::record(Op::var, out, {x}, /*saved=*/{x},
      [x, r, dof, mean_kept](const Tensor& g, const NeedsGrad&) -> Grads {
        // ∂/∂x_i Σ (x − x̄)² / (N − c) = 2 (x_i − x̄) / (N − c)
        // (the x̄ term vanishes: Σ (x − x̄) = 0)
        Tensor centered = sub(x, mean_kept);
        return {mul(expand_back(g, r, x.shape()), mul(centered, 2.0 / double(dof)))};
      });
}

}  // namespace

Tensor sum(const Tensor& x) { return sum_impl(x, plan_full_reduction(x)); }
Tensor sum(const Tensor& x, const Shape& dims, bool keepdim) {
  return sum_impl(x, plan_reduction(x, dims, keepdim, "sum"));
}
Tensor mean(const Tensor& x) { return mean_impl(x, plan_full_reduction(x), "mean"); }
Tensor mean(const Tensor& x, const Shape& dims, bool keepdim) {
  return mean_impl(x, plan_reduction(x, dims, keepdim, "mean"), "mean");
}
Tensor max(const Tensor& x) { return max_impl(x, plan_full_reduction(x), "max"); }
Tensor max(const Tensor& x, const Shape& dims, bool keepdim) {
  return max_impl(x, plan_reduction(x, dims, keepdim, "max"), "max");
}
Tensor var(const Tensor& x, const Shape& dims, int64_t correction, bool keepdim) {
  return var_impl(x, plan_reduction(x, dims, keepdim, "var"), correction);
}
Tensor var(const Tensor& x) { return var_impl(x, plan_full_reduction(x), 1); }

Tensor argmax(const Tensor& x, int64_t dim, bool keepdim) {
  detail::check_floating(x, "argmax");
  ReductionPlan r = plan_reduction(x, {dim}, keepdim, "argmax");
  check_nonempty_groups(x, r, "argmax");
  if (x.dim() == 0) return zeros({}, int64);
  const int64_t d = wrap_dim(dim, x.dim(), "argmax");
  const int64_t length = x.shape()[d];
  Tensor indices = empty(r.keep_shape, int64);
  dispatch(x.dtype(), [&]<typename T>() {
    // Walk the lanes of x along d; `indices` (keep_shape, contiguous) takes one value per lane.
    Shape outer = x.shape();
    outer[d] = 1;
    const T* px = x.data<T>();
    int64_t* pi = indices.data<int64_t>();
    for_each_row<2>(outer, {x.strides(), indices.strides()},
        [&](const std::array<int64_t, 2>& off, int64_t n, const std::array<int64_t, 2>& st) {
          for (int64_t i = 0; i < n; ++i) {
            const T* lane = px + off[0] + i * st[0];
            int64_t best = 0;
            for (int64_t k = 1; k < length; ++k) {
              const T v = lane[k * x.strides()[d]], b = lane[best * x.strides()[d]];
              if (v > b || (std::isnan(v) && !std::isnan(b))) best = k;
            }
            pi[off[1] + i * st[1]] = best;
          }
        });
  });
  return reshape(indices, r.out_shape);
}

namespace {
// Σ x² of each block of kNormBlock elements of p[0, n) from block `begin` to `end`, into
// partial[b]: each block's sum one chain of dependent adds, in order, from 0 (x² is exact in
// double for a float x, and for a double x each x² is rounded once, then added). Whole blocks go
// up to eight side by side, one chain each, so that the chains' adds overlap: each still adds its
// own elements in order, with the bits of the one-block loop below, which takes the last block
// when it is partial.
constexpr int64_t kNormBlock = 4096;
template <class T>
[[gnu::always_inline]] inline void squared_block_sums_impl(
    const T* p, int64_t n, int64_t begin, int64_t end, double* partial) {
  constexpr int64_t kSideBySide = 8;
  const int64_t end_of_whole = std::min(end, n / kNormBlock);  // blocks [begin, this) are whole
  int64_t b = begin;
  for (; b + kSideBySide <= end_of_whole; b += kSideBySide) {
    double sum[kSideBySide] = {};
    const T* first = p + b * kNormBlock;
    for (int64_t i = 0; i < kNormBlock; ++i)
      for (int64_t lane = 0; lane < kSideBySide; ++lane) {
        const double x = double(first[lane * kNormBlock + i]);
        sum[lane] += x * x;
      }
    for (int64_t lane = 0; lane < kSideBySide; ++lane) partial[b + lane] = sum[lane];
  }
  // The 1–7 whole blocks left, side by side as well. (The loop above's body again, with a count
  // known only at run time: one helper for both, templated on it, made the norm 15 % slower.)
  if (b < end_of_whole) {
    const int64_t lanes = end_of_whole - b;
    double sum[kSideBySide] = {};
    const T* first = p + b * kNormBlock;
    for (int64_t i = 0; i < kNormBlock; ++i)
      for (int64_t lane = 0; lane < lanes; ++lane) {
        const double x = double(first[lane * kNormBlock + i]);
        sum[lane] += x * x;
      }
    for (int64_t lane = 0; lane < lanes; ++lane) partial[b + lane] = sum[lane];
    b = end_of_whole;
  }
  for (; b < end; ++b) {  // the last block, shorter than kNormBlock
    double sum = 0;
    for (int64_t i = b * kNormBlock; i < n; ++i) sum += double(p[i]) * double(p[i]);
    partial[b] = sum;
  }
}
// float: compiled per instruction set. A fused multiply-add of x · x + sum rounds as the separate
// product and add do, since x² is exact. double: one portable copy, whose products round alone
// (the AVX-512 copy would fuse them, and give other bits than a CPU without it).
AG_TARGET_CLONES void squared_block_sums(
    const float* p, int64_t n, int64_t begin, int64_t end, double* partial) {
  squared_block_sums_impl(p, n, begin, end, partial);
}
void squared_block_sums(const double* p, int64_t n, int64_t begin, int64_t end, double* partial) {
  squared_block_sums_impl(p, n, begin, end, partial);
}
}  // namespace

std::vector<double> squared_norm_partials(const Tensor& t) {
  NoGradGuard no_grad;
  const Tensor x = t.contiguous();
  const int64_t n = x.numel(), blocks = (n + kNormBlock - 1) / kNormBlock;
  std::vector<double> partial(static_cast<std::size_t>(blocks));  // Σ x² of block b
  dispatch(x.dtype(), [&]<typename T>() {
    const T* p = x.data<T>();
    parallel_for(blocks, kNormBlock,
        [&](int64_t begin, int64_t end) { squared_block_sums(p, n, begin, end, partial.data()); });
  });
  return partial;
}

// ---- single-dim and braced forms (PyTorch's spellings) ------------------------------------------

Tensor sum(const Tensor& x, int64_t dim, bool keepdim) { return sum(x, Shape{dim}, keepdim); }
Tensor sum(const Tensor& x, std::initializer_list<int64_t> dims, bool keepdim) {
  return sum(x, Shape(dims), keepdim);
}
Tensor mean(const Tensor& x, int64_t dim, bool keepdim) { return mean(x, Shape{dim}, keepdim); }
Tensor mean(const Tensor& x, std::initializer_list<int64_t> dims, bool keepdim) {
  return mean(x, Shape(dims), keepdim);
}
Tensor max(const Tensor& x, std::initializer_list<int64_t> dims, bool keepdim) {
  return max(x, Shape(dims), keepdim);
}
ValuesIndices max(const Tensor& x, int64_t dim, bool keepdim) {
  return {max(x, Shape{dim}, keepdim), argmax(x, dim, keepdim)};
}

// min, amin and logsumexp are built on max; their dims are checked under their own names.
// min = −max(−x): its gradient reaches the first minimum (the first maximum of −x).
ValuesIndices min(const Tensor& x, int64_t dim, bool keepdim) {
  const ReductionPlan r = plan_reduction(x, {dim}, keepdim, "min");
  const Tensor negated = neg(x);
  return {neg(max_impl(negated, r, "min")), argmax(negated, dim, keepdim)};
}
Tensor min(const Tensor& x) { return neg(max_impl(neg(x), plan_full_reduction(x), "min")); }
Tensor amax(const Tensor& x, const Shape& dims, bool keepdim) {
  return max_impl(x, plan_reduction(x, dims, keepdim, "amax"), "amax");
}
Tensor amin(const Tensor& x, const Shape& dims, bool keepdim) {
  return neg(max_impl(neg(x), plan_reduction(x, dims, keepdim, "amin"), "amin"));
}

// A composition: its gradient is softmax(x) over dims, through exp and sum (m is a constant).
Tensor logsumexp(const Tensor& x, const Shape& dims, bool keepdim) {
  const ReductionPlan r = plan_reduction(x, dims, /*keepdim=*/true, "logsumexp");
  Tensor m = max_impl(x.detach(), r, "logsumexp");  // the shift, no gradient
  m = masked_fill(m, eq(abs(m), INFINITY), 0.0);    // an infinite max shifts by nothing
  Tensor out = log(sum(exp(x - m), dims, /*keepdim=*/true)) + m;
  return keepdim ? out : sum(out, dims);  // (sum over size-1 dims drops them)
}
Tensor logsumexp(const Tensor& x, int64_t dim, bool keepdim) {
  return logsumexp(x, Shape{dim}, keepdim);
}
Tensor logsumexp(const Tensor& x, std::initializer_list<int64_t> dims, bool keepdim) {
  return logsumexp(x, Shape(dims), keepdim);
}

}  // namespace ag
