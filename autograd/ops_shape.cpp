// Shape and indexing ops, each with its backward. Most are views: they share the input's storage
// and only change shape, strides and offset.
//
// Each op's gradient is written once, in the docs/ops.md tag beside its backward (test_docs
// checks it against the table).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <optional>

#include "autograd/allocator.h"
#include "autograd/autograd.h"
#include "autograd/detail/kernels.h"
#include "autograd/detail/target_clones.h"
#include "autograd/ops.h"
#include "autograd/profiler.h"

namespace ag {

using detail::around;
using detail::Around;

namespace {

// x.to(target) of a tensor that requires grad, with grad mode on, is an op of the graph only
// between float32 and float64; anything else would silently cut the gradient (PyTorch's result
// stops requiring grad), so it is an error naming both dtypes.
void check_to_differentiable(const Tensor& x, DType target) {
  if (!x.requires_grad() || !GradMode::is_enabled()) return;
  if (is_floating_point(target)) return;  // (x requires grad, so it is floating too)
  fail<AutogradError>("to: converting a tensor of shape ", shape_str(x.shape()),
      " that requires grad from ", dtype_name(x.dtype()), " to ", dtype_name(target),
      " is not differentiable (only float32 <-> float64 is); detach() it or use NoGradGuard");
}

// Resolves one -1 in `shape` so that it holds `count` elements, or throws naming `op`.
Shape infer_shape(const Shape& shape, const Tensor& x, const char* op) {
  Shape out = shape;
  int64_t known = 1;
  std::optional<std::size_t> inferred;
  for (std::size_t d = 0; d < out.size(); ++d) {
    if (out[d] == -1) {
      if (inferred) fail<ShapeError>(op, ": only one dim can be -1 in shape ", shape_str(shape));
      inferred = d;
    } else if (out[d] < 0) {
      fail<ShapeError>(op, ": invalid size ", out[d], " in shape ", shape_str(shape));
    } else if (__builtin_mul_overflow(known, out[d], &known)) {
      // More than the 2^63 - 1 elements any tensor can have: certainly not x's count.
      fail<ShapeError>(op, ": shape ", shape_str(shape), " is invalid for input of shape ",
          shape_str(x.shape()), " (", x.numel(), " elements; its sizes multiply to more than ",
          INT64_MAX, ")");
    }
  }
  const int64_t count = x.numel();
  if (inferred) {
    if (known == 0 || count % known != 0)
      fail<ShapeError>(op, ": shape ", shape_str(shape), " is invalid for input of shape ",
          shape_str(x.shape()), " (", count, " elements)");
    out[*inferred] = count / known;
  } else if (known != count) {
    fail<ShapeError>(op, ": shape ", shape_str(shape), " is invalid for input of shape ",
        shape_str(x.shape()), " (", count, " elements)");
  }
  // A shape of no elements still needs strides that fit: [0, 2^40, 2^40] is refused too.
  checked_numel(out, op);
  return out;
}

// Strides that show x's elements in `shape` without copying, if they exist. Dims of x are
// grouped into runs that are contiguous with each other; each run must split exactly into
// consecutive dims of the new shape (the algorithm of PyTorch's computeStride).
std::optional<Shape> view_strides(const Tensor& x, const Shape& shape) {
  if (x.numel() == 0 || x.dim() == 0) return contiguous_strides(shape);
  const Shape& old_shape = x.shape();
  const Shape& old_strides = x.strides();
  Shape strides(shape.size(), 1);
  int64_t view_d = static_cast<int64_t>(shape.size()) - 1;
  int64_t chunk_base_stride = old_strides.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t tensor_d = x.dim() - 1; tensor_d >= 0; --tensor_d) {
    tensor_numel *= old_shape[tensor_d];
    // A run ends where the next-outer dim is not laid out right after this one.
    if (tensor_d == 0 || (old_shape[tensor_d - 1] != 1 &&
                             old_strides[tensor_d - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || shape[view_d] == 1)) {
        strides[view_d] = view_numel * chunk_base_stride;
        view_numel *= shape[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return std::nullopt;
      if (tensor_d > 0) {
        chunk_base_stride = old_strides[tensor_d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return std::nullopt;
  return strides;
}

// Records a view-like op whose gradient is g reshaped back to the input's shape.
Tensor record_reshape_like(Op op, const Tensor& out, const Tensor& x) {
  return detail::record(
      op, out, {x}, [shape = x.shape()](const Tensor& g, const NeedsGrad&) -> Grads {
        // Same elements, other shape: the gradient is reshaped back
        return {reshape(g, shape)};
      });
}

}  // namespace

// ---- reshape / view ---------------------------------------------------------------------------

Tensor reshape(const Tensor& x, const Shape& shape) {
  AG_PROFILE_OP(Op::reshape);
  Shape target = infer_shape(shape, x, "reshape");
  if (target == x.shape()) return x;
  std::optional<Shape> strides = view_strides(x, target);
  Tensor out;
  if (strides) {
    out = detail::make_view(x, target, *strides, x.offset());
  } else {
    Tensor copy = empty(x.shape(), x.dtype());
    detail::copy_into(copy, x);
    out = detail::make_view(copy, target, contiguous_strides(target), 0);
  }
  // docs/ops.md, reshape: reshape(g, input shape)
  return record_reshape_like(Op::reshape, out, x);
}

Tensor view(const Tensor& x, const Shape& shape) {
  Shape target = infer_shape(shape, x, "view");
  if (!view_strides(x, target))
    fail<ShapeError>("view: shape ", shape_str(target),
        " is not compatible with the input's "
        "shape ",
        shape_str(x.shape()), " and strides ", shape_str(x.strides()),
        " without a copy; use reshape");
  return reshape(x, target);
}

// ---- permute / transpose ----------------------------------------------------------------------

Tensor permute(const Tensor& x, const Shape& dims) {
  AG_PROFILE_OP(Op::permute);
  const int64_t n = x.dim();
  Shape order(dims.size());
  std::vector<bool> used(static_cast<std::size_t>(n), false);
  bool valid = static_cast<int64_t>(dims.size()) == n;
  for (std::size_t i = 0; valid && i < dims.size(); ++i) {
    valid = dims[i] >= -n && dims[i] < n;
    if (!valid) break;
    order[i] = dims[i] < 0 ? dims[i] + n : dims[i];
    valid = !used[order[i]];
    used[order[i]] = true;
  }
  if (!valid)
    fail<ShapeError>("permute: dims ", shape_str(dims), " are not a permutation of the ", n,
        " dims of shape ", shape_str(x.shape()));
  Shape shape(n), strides(n), inverse(n);
  for (int64_t i = 0; i < n; ++i) {
    shape[i] = x.shape()[order[i]];
    strides[i] = x.strides()[order[i]];
    inverse[order[i]] = i;
  }
  Tensor out = detail::make_view(x, shape, strides, x.offset());
  // docs/ops.md, permute: permute(g, inverse order)
  return detail::record(
      Op::permute, out, {x}, [inverse](const Tensor& g, const NeedsGrad&) -> Grads {
        // Output dim i is input dim order[i]: put the gradient's dims back with the inverse order
        return {permute(g, inverse)};
      });
}

Tensor transpose(const Tensor& x, int64_t dim0, int64_t dim1) {
  const int64_t n = x.dim();
  dim0 = wrap_dim(dim0, n, "transpose");
  dim1 = wrap_dim(dim1, n, "transpose");
  if (n == 0 || dim0 == dim1) return x;
  Shape order(n);
  std::iota(order.begin(), order.end(), 0);
  std::swap(order[dim0], order[dim1]);
  return permute(x, order);
}

// ---- squeeze / unsqueeze / expand -------------------------------------------------------------

Tensor squeeze(const Tensor& x) {
  AG_PROFILE_OP(Op::squeeze);
  Shape shape, strides;
  for (int64_t d = 0; d < x.dim(); ++d)
    if (x.shape()[d] != 1) {
      shape.push_back(x.shape()[d]);
      strides.push_back(x.strides()[d]);
    }
  if (shape.size() == x.shape().size()) return x;
  // docs/ops.md, squeeze: reshape(g, input shape)
  return record_reshape_like(Op::squeeze, detail::make_view(x, shape, strides, x.offset()), x);
}

Tensor squeeze(const Tensor& x, int64_t dim) {
  AG_PROFILE_OP(Op::squeeze);
  dim = wrap_dim(dim, x.dim(), "squeeze");
  if (x.dim() == 0 || x.shape()[dim] != 1) return x;  // as PyTorch: only a size-1 dim goes
  Shape shape = x.shape(), strides = x.strides();
  shape.erase(shape.begin() + dim);
  strides.erase(strides.begin() + dim);
  return record_reshape_like(Op::squeeze, detail::make_view(x, shape, strides, x.offset()), x);
}

Tensor unsqueeze(const Tensor& x, int64_t dim) {
  AG_PROFILE_OP(Op::unsqueeze);
  dim = wrap_dim(dim, x.dim() + 1, "unsqueeze");
  Shape shape = x.shape(), strides = x.strides();
  // Any stride works for a size-1 dim; this one keeps contiguous tensors contiguous.
  const int64_t stride = dim < x.dim() ? x.strides()[dim] * x.shape()[dim] : 1;
  shape.insert(shape.begin() + dim, 1);
  strides.insert(strides.begin() + dim, stride);
  // docs/ops.md, unsqueeze: reshape(g, input shape)
  return record_reshape_like(Op::unsqueeze, detail::make_view(x, shape, strides, x.offset()), x);
}

Tensor expand(const Tensor& x, const Shape& shape) {
  AG_PROFILE_OP(Op::expand);
  if (shape.size() < x.shape().size())
    fail<ShapeError>("expand: shape ", shape_str(x.shape()), " cannot be expanded to ",
        shape_str(shape), " (fewer dims)");
  const std::size_t lead = shape.size() - x.shape().size();
  Shape target = shape, strides(shape.size(), 0);
  for (std::size_t d = 0; d < shape.size(); ++d) {
    const bool existing = d >= lead;
    const int64_t own = existing ? x.shape()[d - lead] : 1;
    if (target[d] == -1) {
      if (!existing)
        fail<ShapeError>(
            "expand: -1 is not allowed for the new leading dim ", d, " in ", shape_str(shape));
      target[d] = own;
    }
    if (own != target[d] && own != 1)
      fail<ShapeError>("expand: shape ", shape_str(x.shape()), " cannot be expanded to ",
          shape_str(shape), " (dim ", d, ": ", own, " vs ", target[d], ")");
    if (target[d] < 0)
      fail<ShapeError>("expand: invalid size ", target[d], " in ", shape_str(shape));
    strides[d] = existing && own == target[d] ? x.strides()[d - lead] : 0;
  }
  if (target == x.shape()) return x;
  // No memory is allocated, but the view's element count must still fit in int64.
  checked_numel(target, "expand");
  Tensor out = detail::make_view(x, target, strides, x.offset());
  // docs/ops.md, expand: sum_to(g, input shape)
  return detail::record(
      Op::expand, out, {x}, [shape = x.shape()](const Tensor& g, const NeedsGrad&) -> Grads {
        // Each input element fed every position it was repeated to: sum those gradients
        return {sum_to(g, shape)};
      });
}

Tensor broadcast_to(const Tensor& x, const Shape& shape) { return expand(x, shape); }

// ---- slicing ----------------------------------------------------------------------------------

Tensor slice(const Tensor& x, int64_t dim, int64_t start, int64_t end, int64_t step) {
  AG_PROFILE_OP(Op::slice);
  if (x.dim() == 0) fail<ShapeError>("slice: a 0-dim tensor has no dim to slice");
  dim = wrap_dim(dim, x.dim(), "slice");
  if (step <= 0)
    fail<ShapeError>("slice: step ", step, " must be positive (shape ", shape_str(x.shape()), ")");
  const int64_t size = x.shape()[dim];
  // Python's rules: negative positions count from the end; out-of-range ones are clamped.
  auto clamp = [size](int64_t i) { return std::clamp<int64_t>(i < 0 ? i + size : i, 0, size); };
  start = clamp(start);
  end = std::max(clamp(end), start);
  // ⌈(end − start) / step⌉, without the overflow of end − start + step − 1 for a huge step.
  const int64_t length = end == start ? 0 : (end - start - 1) / step + 1;
  const detail::SliceRegion region{dim, start, step, length};
  Tensor out = detail::slice_region_view(x, region);
  // docs/ops.md, slice: zeros with g written into the slice
  Tensor recorded = detail::record(
      Op::slice, out, {x}, [shape = x.shape(), region](const Tensor& g, const NeedsGrad&) -> Grads {
        // Sliced-out elements get 0; the others their gradient
        Tensor grad = zeros(shape, g.dtype());
        detail::copy_into(detail::slice_region_view(grad, region), g);
        return {grad};
      });
  // Where x is another op's output, backward writes g into the region of x's gradient instead
  // (autograd.h, Node::slice_region_), with the same values.
  detail::mark_slice_region(recorded, x, region);
  return recorded;
}

Tensor detail::slice_region_view(const Tensor& whole, const SliceRegion& region) {
  Shape shape = whole.shape(), strides = whole.strides();
  shape[region.dim] = region.length;
  // With 2 or more elements step < size, so the new stride stays within the old extent; with fewer
  // it is never used (and stride · step could overflow).
  if (region.length > 1) strides[region.dim] *= region.step;
  return detail::make_view(
      whole, shape, strides, whole.offset() + region.start * whole.strides()[region.dim]);
}

Tensor narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length) {
  if (x.dim() == 0) fail<ShapeError>("narrow: a 0-dim tensor has no dim to narrow");
  dim = wrap_dim(dim, x.dim(), "narrow");
  const int64_t size = x.shape()[dim];
  if (start < 0) start += size;
  if (start < 0 || start > size || length < 0 || length > size - start)
    fail<ShapeError>("narrow: start ", start, " and length ", length, " do not fit dim ", dim,
        " of shape ", shape_str(x.shape()));
  return slice(x, dim, start, start + length);
}

Tensor select(const Tensor& x, int64_t dim, int64_t index) {
  if (x.dim() == 0) fail<ShapeError>("select: a 0-dim tensor has no dim to select from");
  dim = wrap_dim(dim, x.dim(), "select");
  const int64_t size = x.shape()[dim];
  if (index < -size || index >= size)
    fail<ShapeError>("select: index ", index, " is out of range for dim ", dim, " of shape ",
        shape_str(x.shape()));
  return squeeze(narrow(x, dim, index < 0 ? index + size : index, 1), dim);
}

std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim) {
  if (x.dim() == 0) fail<ShapeError>("split: a 0-dim tensor cannot be split");
  dim = wrap_dim(dim, x.dim(), "split");
  int64_t total = 0;
  for (int64_t s : sizes) {
    if (s < 0) fail<ShapeError>("split: negative size ", s, " in ", shape_str(sizes));
    if (__builtin_add_overflow(total, s, &total))
      fail<ShapeError>("split: sizes ", shape_str(sizes), " sum to more than ", INT64_MAX,
          ", not to dim ", dim, " of shape ", shape_str(x.shape()));
  }
  if (total != x.shape()[dim])
    fail<ShapeError>("split: sizes ", shape_str(sizes), " sum to ", total, ", not to dim ", dim,
        " of shape ", shape_str(x.shape()));
  std::vector<Tensor> pieces;
  int64_t start = 0;
  for (int64_t s : sizes) {
    pieces.push_back(narrow(x, dim, start, s));
    start += s;
  }
  return pieces;
}

std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim) {
  if (x.dim() == 0) fail<ShapeError>("split: a 0-dim tensor cannot be split");
  if (split_size <= 0)
    fail<ShapeError>(
        "split: split size ", split_size, " must be positive (shape ", shape_str(x.shape()), ")");
  const int64_t size = x.shape()[wrap_dim(dim, x.dim(), "split")];
  std::vector<int64_t> sizes;
  for (int64_t start = 0; start < size; start += split_size)
    sizes.push_back(std::min(split_size, size - start));
  if (sizes.empty()) sizes.push_back(0);
  return split(x, sizes, dim);
}

Tensor concat(const std::vector<Tensor>& tensors, int64_t dim) {
  AG_PROFILE_OP(Op::concat);
  if (tensors.empty()) fail<ShapeError>("concat: needs at least one tensor");
  const Tensor& first = tensors.front();
  if (first.dim() == 0) fail<ShapeError>("concat: 0-dim tensors cannot be concatenated");
  dim = wrap_dim(dim, first.dim(), "concat");
  Shape shape = first.shape();
  shape[dim] = 0;
  for (const Tensor& t : tensors) {
    detail::check_same_dtype(first, t, "concat");
    bool fits = t.dim() == first.dim();
    for (int64_t d = 0; fits && d < first.dim(); ++d)
      fits = d == dim || t.shape()[d] == first.shape()[d];
    if (!fits)
      fail<ShapeError>("concat: shapes ", shape_str(first.shape()), " and ", shape_str(t.shape()),
          " differ outside dim ", dim);
    if (__builtin_add_overflow(shape[dim], t.shape()[dim], &shape[dim]))
      fail<ShapeError>("concat: the sizes along dim ", dim, " of the ", tensors.size(),
          " tensors (the first of shape ", shape_str(first.shape()), ") add up to more than ",
          INT64_MAX);
  }
  Tensor out = detail::empty(shape, first.dtype(), "concat");
  std::vector<int64_t> sizes;
  int64_t start = 0;
  for (const Tensor& t : tensors) {
    detail::copy_into(
        detail::make_view(out, t.shape(), out.strides(), start * out.strides()[dim]), t);
    sizes.push_back(t.shape()[dim]);
    start += t.shape()[dim];
  }
  // docs/ops.md, concat: narrow(g, d, offset_i, size_i) for input i
  return detail::record(
      Op::concat, out, tensors, [sizes, dim](const Tensor& g, const NeedsGrad& needs) -> Grads {
        // Each input receives the part of the gradient where it was placed
        Grads grads;
        int64_t at = 0;
        for (std::size_t i = 0; i < sizes.size(); ++i) {
          grads.push_back(needs[i] ? narrow(g, dim, at, sizes[i]) : Tensor());
          at += sizes[i];
        }
        return grads;
      });
}

// ---- gather-like ------------------------------------------------------------------------------

namespace {

// x's rows `row_of(j)` along `dim`, for j in [0, count): with x seen as a contiguous (outer, size,
// inner) block, output row (o, j) is a copy of the `inner` elements of row (o, row_of(j)). The
// rows are already checked; errors name `op`.
template <class RowOf>
Tensor gather_rows(const Tensor& x, int64_t dim, int64_t count, RowOf row_of, const char* op) {
  const Around a = around(x.shape(), dim);
  Shape shape = x.shape();
  shape[dim] = count;
  Tensor out = detail::empty(shape, x.dtype(), op);
  if (out.numel() == 0) return out;  // nothing to copy (and count may be huge when inner is 0)
  Tensor xc = contiguous(x.detach());
  dispatch_all(x.dtype(), [&]<typename T>() {
    const T* src = xc.data<T>();
    T* dst = out.data<T>();
    const std::size_t row_bytes = static_cast<std::size_t>(a.inner) * sizeof(T);
    // Each outer block writes its own rows of out: blocks go to threads.
    parallel_for(a.outer, count * a.inner, [&](int64_t begin, int64_t end) {
      for (int64_t o = begin; o < end; ++o)
        for (int64_t j = 0; j < count; ++j)
          std::memcpy(
              dst + (o * count + j) * a.inner, src + (o * a.size + row_of(j)) * a.inner, row_bytes);
    });
  });
  return out;
}

// to[k] += from[k] and to[k] += value for k < n: scatter_add_rows's rows, one copy per
// instruction set (AVX-512 adds 16 floats at once where the portable build's SSE2 adds 4).
AG_TARGET_CLONES void add_row(float* to, const float* from, int64_t n) {
  for (int64_t k = 0; k < n; ++k) to[k] += from[k];
}
AG_TARGET_CLONES void add_row(double* to, const double* from, int64_t n) {
  for (int64_t k = 0; k < n; ++k) to[k] += from[k];
}
AG_TARGET_CLONES void add_value(float* to, float value, int64_t n) {
  for (int64_t k = 0; k < n; ++k) to[k] += value;
}
AG_TARGET_CLONES void add_value(double* to, double value, int64_t n) {
  for (int64_t k = 0; k < n; ++k) to[k] += value;
}

// The gradient of gather_rows: zeros of the input's shape, with row j of g added into row
// row_of(j) (a scatter-add: a row picked several times receives the sum of its gradients, added
// in the order of j). g is read through its strides when they show it as (outer, count, inner) —
// a sum's expanded gradient is not written out first — and copied otherwise.
template <class RowOf>
Tensor scatter_add_rows(const Tensor& g, const Shape& input_shape, int64_t dim, RowOf row_of) {
  const Around a = around(input_shape, dim);
  const int64_t count = g.shape()[dim];
  Tensor grad = zeros(input_shape, g.dtype());
  if (g.numel() == 0) return grad;
  const std::optional<Shape> strides = view_strides(g, {a.outer, count, a.inner});
  const Tensor gv = strides ? g : contiguous(g);
  const Shape gs =
      strides ? *strides : Shape{count * a.inner, a.inner, 1};  // g's (o, j, k) strides
  dispatch(g.dtype(), [&]<typename T>() {
    const T* src = gv.data<T>();
    T* dst = grad.data<T>();
    // Each outer block adds into its own rows of grad: blocks go to threads.
    parallel_for(a.outer, count * a.inner, [&](int64_t begin, int64_t end) {
      for (int64_t o = begin; o < end; ++o)
        for (int64_t j = 0; j < count; ++j) {
          const T* from = src + o * gs[0] + j * gs[1];
          T* to = dst + (o * a.size + row_of(j)) * a.inner;
          const int64_t step = gs[2];
          if (step == 1)
            add_row(to, from, a.inner);
          else if (step == 0)  // an expanded gradient: one value along the row
            add_value(to, *from, a.inner);
          else
            for (int64_t k = 0; k < a.inner; ++k) to[k] += from[k * step];
        }
    });
  });
  return grad;
}

}  // namespace

Tensor index_select(const Tensor& x, int64_t dim, const std::vector<int64_t>& index) {
  AG_PROFILE_OP(Op::index_select);
  if (x.dim() == 0) fail<ShapeError>("index_select: a 0-dim tensor has no dim to index");
  dim = wrap_dim(dim, x.dim(), "index_select");
  for (int64_t i : index)
    if (i < 0 || i >= x.shape()[dim])
      fail<ShapeError>("index_select: index ", i, " is out of range for dim ", dim, " of shape ",
          shape_str(x.shape()));
  const auto picked = [&index](int64_t j) { return index[static_cast<std::size_t>(j)]; };
  Tensor out = gather_rows(x, dim, static_cast<int64_t>(index.size()), picked, "index_select");
  // docs/ops.md, index_select: g scatter-added into rows i
  return detail::record(Op::index_select, out, {x},
      [index, dim, shape = x.shape()](const Tensor& g, const NeedsGrad&) -> Grads {
        // Row index[j] of x receives g's row j — several times if the index
        // repeats it (an embedding row used by several tokens)
        const auto picked = [&index](int64_t j) { return index[static_cast<std::size_t>(j)]; };
        return {scatter_add_rows(g, shape, dim, picked)};
      });
}

std::vector<double> index_values(const Tensor& index, const char* op) {
  if (index.dtype() == bool_)
    fail<DTypeError>(op, ": indices must be integers (int64), got a bool tensor of shape ",
        shape_str(index.shape()), " (to(ag::int64) makes them 0 and 1)");
  if (index.dtype() != int64) return index.to_vector<double>();
  std::vector<double> values;
  detail::reserve_scratch(values, static_cast<std::size_t>(index.numel()), op, index.shape());
  for (int64_t v : index.to_vector<int64_t>()) {
    if (v > (int64_t{1} << 53) || v < -(int64_t{1} << 53))
      fail<ShapeError>(op, ": index value ", v, " is out of range for every tensor (index shape ",
          shape_str(index.shape()), ")");
    values.push_back(static_cast<double>(v));
  }
  return values;
}

Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index) {
  if (index.dim() > 1)
    fail<ShapeError>("index_select: index must be 1-D, got shape ", shape_str(index.shape()),
        " (input shape ", shape_str(x.shape()), ")");
  std::vector<int64_t> positions;
  for (double v : index_values(index, "index_select")) {
    if (v != std::floor(v) || !std::isfinite(v))
      fail<ShapeError>("index_select: index value ", v, " is not an integer (input shape ",
          shape_str(x.shape()), ")");
    positions.push_back(static_cast<int64_t>(v));
  }
  return index_select(x, dim, positions);
}

Tensor repeat_interleave(const Tensor& x, int64_t repeats, int64_t dim) {
  AG_PROFILE_OP(Op::repeat_interleave);
  if (repeats < 0)
    fail<ShapeError>(
        "repeat_interleave: repeats ", repeats, " is negative (shape ", shape_str(x.shape()), ")");
  if (x.dim() == 0) fail<ShapeError>("repeat_interleave: a 0-dim tensor has no dim to repeat");
  dim = wrap_dim(dim, x.dim(), "repeat_interleave");
  int64_t rows = 0;
  if (__builtin_mul_overflow(x.shape()[dim], repeats, &rows))
    fail<ShapeError>("repeat_interleave: ", repeats, " repeats of the ", x.shape()[dim],
        " rows of dim ", dim, " of shape ", shape_str(x.shape()), " are more than ", INT64_MAX,
        " rows");
  // Output row j is input row j / repeats: [0, 0, 0, 1, 1, 1, ...] for repeats = 3.
  const auto repeated = [repeats](int64_t j) { return j / repeats; };
  Tensor out = gather_rows(x, dim, rows, repeated, "repeat_interleave");
  // docs/ops.md, repeat_interleave: g summed over each run of r
  return detail::record(Op::repeat_interleave, out, {x},
      [repeated, dim, shape = x.shape()](const Tensor& g, const NeedsGrad&) -> Grads {
        // Each input row fed `repeats` consecutive output rows: their
        // gradients are summed back into it
        return {scatter_add_rows(g, shape, dim, repeated)};
      });
}

// ---- copies -------------------------------------------------------------------------------------

Tensor clone(const Tensor& x) {
  AG_PROFILE_OP(Op::clone);
  Tensor out = empty(x.shape(), x.dtype());
  detail::copy_into(out, x);
  // docs/ops.md, clone: g
  return detail::record(Op::clone, out, {x}, [](const Tensor& g, const NeedsGrad&) -> Grads {
    return {g};  // a copy: the identity
  });
}

// x.to(dtype): each element converted (converting_cast, autograd/convert.h). Between float32 and
// float64 it is differentiable, as PyTorch's: y = x in the target's precision, so ∂L/∂x is ∂L/∂y
// converted back to x's dtype (float64 → float32 rounds the gradient, as the forward rounded x).
// A conversion to or from int64 or bool has no gradient: PyTorch's result then silently stops
// requiring grad; ag refuses (check_to_differentiable, above).
Tensor Tensor::to(DType target) const {
  if (target == dtype()) return *this;
  AG_PROFILE_OP(Op::to);
  check_to_differentiable(*this, target);
  Tensor out = detail::empty(shape(), target, "to");
  dispatch_all(dtype(), [&]<typename S>() {
    dispatch_all(target, [&]<typename T>() {
      const S* in = data<S>();
      T* o = out.data<T>();
      auto convert_row = [&](const std::array<int64_t, 2>& off, int64_t n,
                             const std::array<int64_t, 2>& st) {
        if (st[0] == 1 && st[1] == 1) {  // contiguous rows: a loop the compiler vectorises
          for (int64_t k = 0; k < n; ++k) o[off[0] + k] = converting_cast<T>(in[off[1] + k]);
        } else if (st[0] == 1 && st[1] == 0) {  // one value expanded (a sum's gradient): a fill
          std::fill(o + off[0], o + off[0] + n, converting_cast<T>(in[off[1]]));
        } else {
          for (int64_t k = 0; k < n; ++k)
            o[off[0] + k * st[0]] = converting_cast<T>(in[off[1] + k * st[1]]);
        }
      };
      // Rows split across threads, but in order on one where a value may be refused (a NaN to
      // int64): the error then names the first such value.
      if constexpr (std::is_same_v<T, int64_t> && std::is_floating_point_v<S>)
        detail::for_each_row<2>(shape(), {out.strides(), strides()}, convert_row);
      else
        detail::parallel_for_each_row<2>(shape(), {out.strides(), strides()}, convert_row);
    });
  });
  const DType source = dtype();
  // docs/ops.md, to: g converted to x's dtype
  return detail::record(Op::to, out, {*this},
      [source](const Tensor& g, const NeedsGrad&) -> Grads { return {g.to(source)}; });
}

Tensor contiguous(const Tensor& x) {
  AG_PROFILE_OP(Op::contiguous);
  if (x.is_contiguous()) return x;
  Tensor out = empty(x.shape(), x.dtype());
  detail::copy_into(out, x);
  // docs/ops.md, contiguous: g
  return detail::record(Op::contiguous, out, {x}, [](const Tensor& g, const NeedsGrad&) -> Grads {
    return {g};  // same values, another layout: the identity
  });
}

// ---- compositions: stack, tril, triu ------------------------------------------------------------

Tensor stack(const std::vector<Tensor>& tensors, int64_t dim) {
  if (tensors.empty()) fail<ShapeError>("stack: no tensors to stack");
  std::vector<Tensor> unsqueezed;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    if (tensors[i].shape() != tensors[0].shape())
      fail<ShapeError>("stack: tensor ", i, " of shape ", shape_str(tensors[i].shape()),
          " is not of the shape ", shape_str(tensors[0].shape()), " of tensor 0");
    unsqueezed.push_back(unsqueeze(tensors[i], dim));  // (..., 1 at dim, ...)
  }
  return concat(unsqueezed, dim);
}

namespace {
// x with 0 at the (row, col) positions of its last two dims that `keep` refuses (a NaN there
// too, as PyTorch's); masked_fill masks the gradient the same way.
template <class Keep>
Tensor triangle(const Tensor& x, const char* op, Keep keep) {
  if (x.dim() < 2)
    fail<ShapeError>(op, ": input of shape ", shape_str(x.shape()), " has fewer than 2 dims");
  const int64_t rows = x.size(-2), cols = x.size(-1);
  Tensor dropped = zeros({rows, cols}, bool_);  // true where the element becomes 0
  bool* drop = dropped.data<bool>();
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) drop[i * cols + j] = !keep(i, j);
  return masked_fill(x, dropped, 0.0);
}
}  // namespace

Tensor tril(const Tensor& x, int64_t diagonal) {
  return triangle(x, "tril", [diagonal](int64_t i, int64_t j) { return j - i <= diagonal; });
}
Tensor triu(const Tensor& x, int64_t diagonal) {
  return triangle(x, "triu", [diagonal](int64_t i, int64_t j) { return j - i >= diagonal; });
}

}  // namespace ag
