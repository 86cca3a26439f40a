// Gathering, cumulative sums and sampling: gather, cumsum, one_hot, topk and multinomial, each
// with its backward where it has one.
//
// Each op's gradient is written once, in the docs/ops.md tag beside its backward (test_docs
// checks it against the table). gather and topk share their two loops: picking x's elements at
// integer positions along one dim, and the backward's scatter-add of g back into those positions.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <numeric>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

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

// Whether every v[j], j < n, is in [0, size): one unsigned comparison each (a negative value is a
// huge unsigned one), no branch, so that it runs as vector instructions.
AG_TARGET_CLONES bool all_in_range(const int64_t* v, int64_t n, int64_t size) {
  bool outside = false;
  for (int64_t j = 0; j < n; ++j)
    outside |= static_cast<uint64_t>(v[j]) >= static_cast<uint64_t>(size);
  return !outside;
}

// o[k] = row[p[k]] for k < n, checking each position as it is read (one pass over p, where a
// check before the copy would be a second): whether every p[k] is in [0, size). A position outside
// reads row[0] instead, so that no read leaves the row; the caller then discards o.
template <class T>
[[gnu::always_inline]] inline bool pick_row_checked_impl(const T* __restrict row,
    const int64_t* __restrict p, T* __restrict o, int64_t n, int64_t size) {
  bool outside = false;
  for (int64_t k = 0; k < n; ++k) {
    const uint64_t position = static_cast<uint64_t>(p[k]);  // a negative one is huge
    const bool inside = position < static_cast<uint64_t>(size);
    outside |= !inside;
    o[k] = row[inside ? position : 0];
  }
  return !outside;
}
AG_TARGET_CLONES bool pick_row_checked(
    const float* row, const int64_t* p, float* o, int64_t n, int64_t size) {
  return pick_row_checked_impl(row, p, o, n, size);
}
AG_TARGET_CLONES bool pick_row_checked(
    const double* row, const int64_t* p, double* o, int64_t n, int64_t size) {
  return pick_row_checked_impl(row, p, o, n, size);
}
bool pick_row_checked(const int64_t* row, const int64_t* p, int64_t* o, int64_t n, int64_t size) {
  return pick_row_checked_impl(row, p, o, n, size);
}
bool pick_row_checked(const bool* row, const int64_t* p, bool* o, int64_t n, int64_t size) {
  return pick_row_checked_impl(row, p, o, n, size);
}

// The rows of an index of shape `index_shape` (m dims) along its last dim, n = index_shape[m − 1]
// elements each, for rows r in [begin, end) in row-major order: calls row(r, x_base, other_base)
// with
//   x_base     = Σ_{d < m−1, d ≠ dim} i_d · x_strides[d]   the row's offset in x, dim left out
//   other_base = Σ_{d < m−1} i_d · other_strides[d]         its offset in another tensor of the
//                                                            index's shape (the gradient)
// for the row's multi-index (i_0, ..., i_{m−2}). Element k of the row, j = r·n + k, then names
// x[x_base + k · x_strides[m−1] + pos[j] · x_strides[dim]] (the k term is absent when dim is the
// last dim). A row is walked by the caller's own loop, so its inner loop is a plain one over k.
template <class Row>
void for_each_index_row(const Shape& index_shape, const Shape& x_strides, int64_t dim,
    const Shape& other_strides, int64_t begin, int64_t end, Row row) {
  const std::size_t outer_dims = index_shape.size() - 1;
  // The multi-index of row `begin` over the outer dims, and its two offsets.
  Shape i(outer_dims, 0);
  int64_t x_base = 0, other_base = 0, rest = begin;
  for (std::size_t d = outer_dims; d-- > 0;) {
    i[d] = rest % index_shape[d];
    rest /= index_shape[d];
    if (static_cast<int64_t>(d) != dim) x_base += i[d] * x_strides[d];
    other_base += i[d] * other_strides[d];
  }
  for (int64_t r = begin; r < end; ++r) {
    row(r, x_base, other_base);
    for (std::size_t d = outer_dims; d-- > 0;) {  // the next row, like an odometer
      const int64_t x_stride = static_cast<int64_t>(d) != dim ? x_strides[d] : 0;
      if (++i[d] < index_shape[d]) {
        x_base += x_stride;
        other_base += other_strides[d];
        break;
      }
      x_base -= (index_shape[d] - 1) * x_stride;
      other_base -= (index_shape[d] - 1) * other_strides[d];
      i[d] = 0;
    }
  }
}

// x's elements at positions `pos` (row-major over index_shape) along `dim`, x seen with shape
// x_shape (its own, or [1] for a 0-dim x): a new tensor of index_shape and x's dtype (any dtype:
// values are only moved). Errors name `op`. The positions are checked as they are read, row by
// row (a separate pass would read them all from memory once more): if one is outside
// [0, x_shape[dim]), the result is an undefined tensor, for the caller to name the bad position.
// Along the last dim the check and the copy are one loop (pick_row_checked), elsewhere a row is
// checked before it is copied; no read leaves x either way.
Tensor pick_along(const Tensor& x, const Shape& x_shape, int64_t dim, const Shape& index_shape,
    std::span<const int64_t> pos, const char* op) {
  Tensor out = detail::empty(index_shape, x.dtype(), op);
  if (out.numel() == 0) return out;
  Tensor xc = contiguous(x.detach());
  const Shape x_strides = contiguous_strides(x_shape),
              out_strides = contiguous_strides(index_shape);
  const int64_t last = static_cast<int64_t>(index_shape.size()) - 1;
  const int64_t n = index_shape[last], rows = out.numel() / n, along = x_strides[dim];
  std::atomic<bool> outside{false};
  dispatch_all(x.dtype(), [&]<typename T>() {
    const T* src = xc.data<T>();
    T* dst = out.data<T>();
    // out[j] = x[x_base + k + pos[j] · along] (x_base + pos[j] when dim is the last dim); each row
    // writes its own n elements of out, so rows can go to threads.
    parallel_for(rows, n, [&](int64_t begin, int64_t end) {
      for_each_index_row(index_shape, x_strides, dim, out_strides, begin, end,
          [&](int64_t r, int64_t x_base, int64_t out_base) {
            const int64_t* p = pos.data() + r * n;
            T* o = dst + out_base;
            if (dim == last) {  // (an empty dim has no element to read: every position is bad)
              if (x_shape[dim] == 0 || !pick_row_checked(src + x_base, p, o, n, x_shape[dim]))
                outside.store(true, std::memory_order_relaxed);
              return;
            }
            if (!all_in_range(p, n, x_shape[dim])) {
              outside.store(true, std::memory_order_relaxed);
              return;
            }
            for (int64_t k = 0; k < n; ++k) o[k] = src[x_base + k + p[k] * along];
          });
    });
  });
  return outside.load() ? Tensor() : out;
}

// The backward of pick_along: zeros of x's shape with g[j] added at the position element j was
// picked from (a scatter-add: an element picked twice receives both gradients, added in the
// order of j). g is read through its strides (a sum's gradient, expanded, is not copied first).
Tensor scatter_add_along(
    const Tensor& g, const Shape& input_shape, int64_t dim, std::span<const int64_t> pos) {
  const Shape& index_shape = g.shape();
  const int64_t last = static_cast<int64_t>(index_shape.size()) - 1;
  // Along the last dim, with g as large as the input in every other dim, each row of grad receives
  // the gradients of exactly one row of g: it is zeroed just before them, in L1, rather than all
  // of grad in a pass of its own.
  bool rows_cover = dim == last && g.numel() > 0;
  for (int64_t d = 0; d < last; ++d) rows_cover = rows_cover && index_shape[d] == input_shape[d];
  Tensor grad = rows_cover ? empty(input_shape, g.dtype()) : zeros(input_shape, g.dtype());
  if (g.numel() == 0) return grad;
  const Shape x_strides = contiguous_strides(input_shape);
  const int64_t n = index_shape[last], along = x_strides[dim], g_step = g.strides()[last];
  // Rows that differ in a dim before `dim` add into disjoint parts of grad, rows that differ only
  // from `dim` on may add into the same elements: blocks of the latter go to threads whole, each
  // walked in row-major order, so every element's additions come in the order of j on any number
  // of threads.
  int64_t rows_per_block = 1;
  for (int64_t d = dim; d < last; ++d) rows_per_block *= index_shape[d];
  const int64_t blocks = g.numel() / n / rows_per_block;
  dispatch(g.dtype(), [&]<typename T>() {
    const T* src = g.data<T>();
    T* dst = grad.data<T>();
    parallel_for(blocks, rows_per_block * n, [&](int64_t begin, int64_t end) {
      for_each_index_row(index_shape, x_strides, dim, g.strides(), begin * rows_per_block,
          end * rows_per_block, [&](int64_t r, int64_t x_base, int64_t g_base) {
            const int64_t* p = pos.data() + r * n;
            const T* g_row = src + g_base;
            if (dim == last) {
              if (rows_cover) std::fill_n(dst + x_base, input_shape[last], T(0));
              for (int64_t k = 0; k < n; ++k) dst[x_base + p[k]] += g_row[k * g_step];
            } else {
              for (int64_t k = 0; k < n; ++k) dst[x_base + k + p[k] * along] += g_row[k * g_step];
            }
          });
    });
  });
  return grad;
}

// A 0-dim tensor indexed as the 1-D tensor of its one element, as PyTorch does (dim 0 or -1).
Shape at_least_1d(const Shape& shape) { return shape.empty() ? Shape{1} : shape; }

}  // namespace

// ---- gather -------------------------------------------------------------------------------------

Tensor gather(const Tensor& x, int64_t dim, const Tensor& index) {
  AG_PROFILE_OP(Op::gather);
  if (index.dim() != x.dim())
    fail<ShapeError>("gather: index of shape ", shape_str(index.shape()),
        " must have as many dims as the input of shape ", shape_str(x.shape()), " (", index.dim(),
        " != ", x.dim(), ")");
  const Shape x_shape = at_least_1d(x.shape()), index_shape = at_least_1d(index.shape());
  dim = wrap_dim(dim, static_cast<int64_t>(x_shape.size()), "gather");
  for (std::size_t d = 0; d < x_shape.size(); ++d)
    if (static_cast<int64_t>(d) != dim && index_shape[d] > x_shape[d])
      fail<ShapeError>("gather: index of shape ", shape_str(index.shape()),
          " is larger than the input of shape ", shape_str(x.shape()), " in dim ", d, " (",
          index_shape[d], " > ", x_shape[d], "; only dim ", dim, " may differ)");
  // Each index value must name an element along dim: an integer in [0, size). Negative values do
  // not count from the end, as in PyTorch.
  const int64_t size = x_shape[dim];
  const auto refuse = [&](const auto& v) {
    fail<ShapeError>("gather: index value ", v, " is not an integer in [0, ", size - 1,
        "] for dim ", dim, " of the input of shape ", shape_str(x.shape()), " (index shape ",
        shape_str(index.shape()), ")");
  };
  // positions (index's shape, int64, contiguous): the index itself when it is one already, which
  // the backward then reads as a saved tensor (an in-place change of the index before backward
  // is an error, as in PyTorch) rather than a copy.
  Tensor positions;
  if (index.dtype() == int64) {
    positions = contiguous(index.detach());
  } else {
    // float indices with integer values
    const std::vector<double> values = index_values(index, "gather");
    positions = detail::empty(index.shape(), int64, "gather");
    int64_t* pos = positions.data<int64_t>();
    for (std::size_t j = 0; j < values.size(); ++j) {
      const double v = values[j];
      if (!(v >= 0 && v < static_cast<double>(size)) || v != std::floor(v)) refuse(v);
      pos[j] = static_cast<int64_t>(v);
    }
  }
  const std::span<const int64_t> pos(
      positions.data<int64_t>(), static_cast<std::size_t>(positions.numel()));
  Tensor out = pick_along(x, x_shape, dim, index_shape, pos, "gather");
  if (!out.defined())  // an int64 position outside [0, size): name the first
    for (int64_t v : pos)
      if (v < 0 || v >= size) refuse(v);
  out = out.reshape(index.shape());
  // docs/ops.md, gather: g scatter-added into zeros of the input's shape at the gathered
  //   positions
  return detail::record(Op::gather, out, {x}, {positions},
      [positions, dim, x_shape, shape = x.shape()](const Tensor& g, const NeedsGrad&) -> Grads {
        // out[j] = x[at(j)], so x[at] receives the sum of g[j] over every j that read it
        const std::span<const int64_t> pos(
            positions.data<int64_t>(), static_cast<std::size_t>(positions.numel()));
        return {
            scatter_add_along(g.reshape(at_least_1d(g.shape())), x_shape, dim, pos).reshape(shape)};
      });
}

// ---- cumsum -------------------------------------------------------------------------------------

namespace {
// dst[o, i, k] = Σ_{j ≤ i} src[o, j, k] (or Σ_{j ≥ i} with `reverse`) on contiguous blocks,
// summed in Acc: double for float and double, as PyTorch's CPU kernel accumulates (each partial
// sum is rounded to T as it is stored), uint64_t for int64 and bool (two's complement wrapping,
// as int64 addition in PyTorch wraps, without the undefined behaviour of signed overflow).
template <class Acc, class T, class Out>
void cumulative_sum(const T* src, Out* dst, Around a, bool reverse) {
  for (int64_t o = 0; o < a.outer; ++o)
    for (int64_t k = 0; k < a.inner; ++k) {
      Acc acc = 0;
      for (int64_t step = 0; step < a.size; ++step) {
        const int64_t i = reverse ? a.size - 1 - step : step;
        const int64_t at = (o * a.size + i) * a.inner + k;
        acc += static_cast<Acc>(src[at]);
        dst[at] = static_cast<Out>(acc);
      }
    }
}
}  // namespace

Tensor cumsum(const Tensor& x, int64_t dim) {
  AG_PROFILE_OP(Op::cumsum);
  const Shape shape = at_least_1d(x.shape());
  dim = wrap_dim(dim, static_cast<int64_t>(shape.size()), "cumsum");
  const Around a = around(shape, dim);
  Tensor xc = contiguous(x.detach());
  if (!is_floating_point(x.dtype())) {
    // int64 and bool sum to int64 (true counts 1), as torch.cumsum; no gradient.
    Tensor out = detail::empty(x.shape(), int64, "cumsum");
    dispatch_all(x.dtype(), [&]<typename T>() {
      if constexpr (!std::is_floating_point_v<T>)
        cumulative_sum<uint64_t>(xc.data<T>(), out.data<int64_t>(), a, /*reverse=*/false);
    });
    return out;
  }
  Tensor out = detail::empty(x.shape(), x.dtype(), "cumsum");
  dispatch(x.dtype(), [&]<typename T>() {
    cumulative_sum<double>(xc.data<T>(), out.data<T>(), a, /*reverse=*/false);
  });
  // docs/ops.md, cumsum: gx_i = Σ_{j ≥ i} g_j along d (g summed from the end)
  return detail::record(Op::cumsum, out, {x}, [a](const Tensor& g, const NeedsGrad&) -> Grads {
    // out_j = Σ_{i ≤ j} x_i, so x_i reaches every out_j with j ≥ i: ∂L/∂x_i = Σ_{j ≥ i} g_j
    Tensor gc = contiguous(g);
    Tensor grad = empty(g.shape(), g.dtype());
    dispatch(g.dtype(), [&]<typename T>() {
      cumulative_sum<double>(gc.data<T>(), grad.data<T>(), a, /*reverse=*/true);
    });
    return {grad};
  });
}

// ---- one_hot ------------------------------------------------------------------------------------

Tensor one_hot(const Tensor& index, int64_t num_classes) {
  if (index.dtype() != int64)
    fail<DTypeError>("one_hot: index must be int64 (class ids), got a ", dtype_name(index.dtype()),
        " tensor of shape ", shape_str(index.shape()), "; pass index.to(ag::int64)");
  if (num_classes < -1)
    fail<ValueError>("one_hot: num_classes ", num_classes,
        " must be -1 (the largest index + 1) or a number of classes");
  const std::vector<int64_t> ids = index.to_vector<int64_t>();
  if (num_classes == -1) {
    if (ids.empty())
      fail<ValueError>("one_hot: cannot infer num_classes from an empty index of shape ",
          shape_str(index.shape()), "; pass num_classes");
    const int64_t largest = *std::max_element(ids.begin(), ids.end());
    if (largest == INT64_MAX)
      fail<ShapeError>("one_hot: index value ", largest, " leaves no room for a class count");
    num_classes = std::max<int64_t>(largest, 0) + 1;  // a negative id fails just below
  }
  for (int64_t id : ids)
    if (id < 0 || id >= num_classes)
      fail<ValueError>("one_hot: index value ", id, " is out of range [0, ", num_classes - 1,
          "] for num_classes ", num_classes, " (index shape ", shape_str(index.shape()), ")");
  Shape shape = index.shape();  // index's shape + [C]
  shape.push_back(num_classes);
  Tensor out = detail::empty(shape, int64, "one_hot");  // refuses an [N, 2^62] before any write
  int64_t* dst = out.data<int64_t>();
  std::fill(dst, dst + out.numel(), int64_t{0});
  // out[..., c] = 1 where c is the element's id
  for (std::size_t j = 0; j < ids.size(); ++j)
    dst[static_cast<int64_t>(j) * num_classes + ids[j]] = 1;
  return out;
}

// ---- topk ---------------------------------------------------------------------------------------

namespace {

__extension__ typedef unsigned __int128 Uint128;  // GCC's and clang's (the key of a double)

// topk's order as one unsigned integer per element, so that a row is ranked by plain integer
// comparisons: i comes before j when x_i is better (larger, or smaller without `largest`; NaN is
// larger than every number, as in PyTorch) and, among equal values, when i < j. The key is
//
//   (rank of the value) · 2^h + (2^h − 1 − i)        h = half the key's bits
//
// so a larger key is a better element, and of two equal values the lower index has the larger key.
// The rank maps a float's bits to an unsigned integer in the order of the numbers: a positive
// number gets its bits with the sign bit set, a negative one its bits flipped (larger magnitude,
// smaller rank). −0 counts as +0 (they are equal), every NaN as one value above +∞; without
// `largest` the rank is flipped, so that the smallest value has the largest key.
template <class Key, class T>
Key topk_key(T v, int64_t i, bool largest) {
  using Bits = std::conditional_t<sizeof(T) == 4, std::uint32_t, std::uint64_t>;
  constexpr int half_bits = 4 * sizeof(Key);
  constexpr Key low_mask = (Key{1} << half_bits) - 1;
  constexpr Bits sign = Bits{1} << (8 * sizeof(T) - 1);
  Key rank;
  if (std::isnan(v)) {
    rank = low_mask;
  } else {
    if (v == T(0)) v = T(0);  // −0 → +0
    Bits bits;
    std::memcpy(&bits, &v, sizeof(T));
    rank = static_cast<Key>((bits & sign) ? ~bits : (bits | sign));
  }
  if (!largest) rank = low_mask - rank;
  return (rank << half_bits) | (low_mask - static_cast<Key>(i));
}

// For each row along dim (a.size elements a.inner apart in the contiguous src): the positions of
// its k best elements, best first, into pos (row-major over x's shape with k at dim).
//
// The keys are distinct, so the k largest are one set in one order, whatever the selection: a
// radix select narrows the row down byte by byte of the rank, from the top. A histogram of the
// candidates' byte counts how many fall in each of 256 bins; the bins above the one where the
// count from the top reaches the number still needed are all kept, that bin's keys are the next
// candidates, the bins below are dropped. For a row of normal numbers the first byte (sign and
// exponent) leaves about an eighth of the row, the second a few keys, which std::nth_element
// finishes; only the k kept are sorted. Each pass is two branch-free sweeps, where comparing keys
// one against another (a sort, a heap) mispredicts about every other branch.
template <class Key, class T>
void pick_best(const T* src, Around a, int64_t k, bool largest, std::vector<int64_t>& pos) {
  const int64_t n = a.size;
  if (k == 0) return;
  constexpr int half_bits = 4 * sizeof(Key);
  constexpr Key low_mask = (Key{1} << half_bits) - 1;
  std::vector<Key> candidates(static_cast<std::size_t>(n));
  std::vector<Key> kept(static_cast<std::size_t>(k) + 1);  // + 1: the compaction's spare write
  for (int64_t o = 0; o < a.outer; ++o)
    for (int64_t in = 0; in < a.inner; ++in) {
      const T* row = src + o * n * a.inner + in;  // element i at row[i · inner]
      Key* cand = candidates.data();
      Key* keep = kept.data();
      for (int64_t i = 0; i < n; ++i) cand[i] = topk_key<Key>(row[i * a.inner], i, largest);
      int64_t m = n;       // candidates cand[0, m)
      int64_t need = k;    // of which the best `need` belong to the answer
      int64_t n_kept = 0;  // keep[0, n_kept): certainly in it
      for (int shift = 8 * static_cast<int>(sizeof(Key)) - 8;
           need < m && m > 16 && shift >= half_bits; shift -= 8) {
        int64_t count[256] = {};
        for (int64_t i = 0; i < m; ++i) ++count[static_cast<int>((cand[i] >> shift) & 0xFF)];
        int bin = 255;  // the bin where the count from the top reaches `need`
        int64_t above = 0;
        while (above + count[bin] < need) above += count[bin--];
        int64_t next_m = 0;
        for (int64_t i = 0; i < m; ++i) {  // in place: next_m ≤ i
          const Key key = cand[i];
          const int b = static_cast<int>((key >> shift) & 0xFF);
          keep[n_kept] = key;
          n_kept += b > bin;
          cand[next_m] = key;
          next_m += b == bin;
        }
        m = next_m;
        need -= above;
      }
      if (need < m) std::nth_element(cand, cand + need - 1, cand + m, std::greater<Key>());
      std::copy(cand, cand + need, keep + n_kept);
      std::sort(keep, keep + k, std::greater<Key>());
      for (int64_t j = 0; j < k; ++j)  // the position back from the key's low half
        pos[static_cast<std::size_t>((o * k + j) * a.inner + in)] =
            static_cast<int64_t>(low_mask - (keep[j] & low_mask));
    }
}

}  // namespace

ValuesIndices topk(const Tensor& x, int64_t k, int64_t dim, bool largest, bool sorted) {
  AG_PROFILE_OP(Op::topk);
  (void)sorted;  // PyTorch leaves the order unspecified when not sorted: ag always sorts
  detail::check_floating(x, "topk");
  const Shape x_shape = at_least_1d(x.shape());
  dim = wrap_dim(dim, static_cast<int64_t>(x_shape.size()), "topk");
  const int64_t n = x_shape[dim];
  if (k < 0 || k > n)
    fail<ShapeError>("topk: k = ", k, " is out of range [0, ", n, "] for dim ", dim,
        " of the input of shape ", shape_str(x.shape()));
  const Around a = around(x_shape, dim);
  Shape picked_shape = x_shape;  // x's shape with k at dim
  picked_shape[dim] = k;
  std::vector<int64_t> pos;  // position along dim of each picked element, row-major
  const auto picked = static_cast<std::size_t>(checked_numel(picked_shape, "topk"));
  detail::reserve_scratch(pos, picked, "topk", picked_shape);
  pos.resize(picked);
  Tensor xc = contiguous(x.detach());
  dispatch(x.dtype(), [&]<typename T>() {
    // Each key needs the value's bits and the position's: a float's in 64 bits when n fits in 32,
    // else 128.
    if (sizeof(T) == 4 && n <= int64_t{0xFFFFFFFF})
      pick_best<std::uint64_t>(xc.data<T>(), a, k, largest, pos);
    else
      pick_best<Uint128>(xc.data<T>(), a, k, largest, pos);
  });
  Shape out_shape = x.shape();
  if (!out_shape.empty()) out_shape[dim] = k;
  Tensor indices = tensor(pos, picked_shape).reshape(out_shape);  // int64, positions along dim
  Tensor values = pick_along(x, x_shape, dim, picked_shape, pos, "topk").reshape(out_shape);
  // docs/ops.md, topk: g scattered into zeros of the input's shape at the picked indices
  values = detail::record(Op::topk, values, {x},
      [pos = std::move(pos), dim, x_shape, shape = x.shape()](
          const Tensor& g, const NeedsGrad&) -> Grads {
        // values[j] = x[indices[j]]: each picked element gets its g, the others 0
        return {
            scatter_add_along(g.reshape(at_least_1d(g.shape())), x_shape, dim, pos).reshape(shape)};
      });
  return {values, indices};
}

// ---- multinomial --------------------------------------------------------------------------------

Tensor multinomial(
    const Tensor& probs, int64_t num_samples, bool replacement, Generator& generator) {
  detail::check_floating(probs, "multinomial");
  if (probs.dim() != 1 && probs.dim() != 2)
    fail<ShapeError>("multinomial: weights must be 1-D (n) or 2-D (rows, n), got shape ",
        shape_str(probs.shape()));
  if (num_samples <= 0)
    fail<ValueError>("multinomial: num_samples ", num_samples, " must be positive");
  const int64_t n = probs.size(-1), rows = probs.dim() == 2 ? probs.size(0) : 1;
  Shape out_shape = probs.dim() == 2 ? Shape{rows, num_samples} : Shape{num_samples};
  Tensor out = detail::empty(out_shape, int64, "multinomial");  // (rows, S) or (S), size checked
  // Checks: every weight finite and ≥ 0, each row with a positive one, and without replacement
  // at least num_samples positive ones. The weights are divided by the row's largest (so their
  // sum cannot overflow) and kept in double: w (rows, n). (A weight below 2^−1074 of its row's
  // largest becomes 0 and is never drawn: its probability is smaller than any double.)
  std::vector<double> w = probs.to_vector<double>();
  for (int64_t r = 0; r < rows; ++r) {
    double* row = w.data() + r * n;
    double largest = 0;
    for (int64_t i = 0; i < n; ++i) {
      if (!std::isfinite(row[i]) || row[i] < 0)
        fail<ValueError>("multinomial: weight ", row[i], " at [",
            probs.dim() == 2 ? std::to_string(r) + ", " : std::string(), i, "] of shape ",
            shape_str(probs.shape()), " is not finite and non-negative");
      largest = std::max(largest, row[i]);
    }
    if (largest == 0)
      fail<ValueError>("multinomial: row ", r, " of the weights of shape ",
          shape_str(probs.shape()), " has no positive weight");
    int64_t positive = 0;
    for (int64_t i = 0; i < n; ++i) {
      row[i] /= largest;
      positive += row[i] > 0;
    }
    if (!replacement && num_samples > positive)
      fail<ValueError>("multinomial: cannot draw ", num_samples,
          " samples without replacement from row ", r, ", which has ", positive,
          " positive weights (shape ", shape_str(probs.shape()), ")");
  }
  int64_t* dst = out.data<int64_t>();
  if (replacement) {
    // Inverse-CDF sampling: with c_i = w_0 + ... + w_i, draw u ~ U[0, 1) and pick the first i
    // with c_i > u · c_{n−1}; category i is picked with probability w_i / c_{n−1}. That i has
    // w_i > 0 (c_i > u · c_{n-1} ≥ c_{i−1}).
    const std::vector<double> u =
        rand({rows * num_samples}, generator, float64).to_vector<double>();
    std::vector<double> cdf(static_cast<std::size_t>(n));
    for (int64_t r = 0; r < rows; ++r) {
      const double* row = w.data() + r * n;
      std::partial_sum(row, row + n, cdf.begin());
      int64_t last_positive = n - 1;  // for u · c_{n−1} rounding up to c_{n−1}
      while (row[last_positive] == 0) --last_positive;
      for (int64_t s = 0; s < num_samples; ++s) {
        const double t = u[r * num_samples + s] * cdf.back();
        const auto it = std::upper_bound(cdf.begin(), cdf.end(), t);
        dst[r * num_samples + s] = it == cdf.end() ? last_positive : it - cdf.begin();
      }
    }
  } else {
    // Without replacement, PyTorch's exponential race: category i finishes at time E_i / w_i with
    // E_i ~ Exp(1) (E = −log(1 − u)); the order of finishing is the order of successive draws
    // each proportional to the weights left, so the num_samples categories with the largest
    // w_i / E_i are the sample, in that order. Compared as log w_i − log E_i (no underflow for
    // tiny weights; a zero weight is −inf and is never picked), ties to the lower index.
    const std::vector<double> u = rand({rows * n}, generator, float64).to_vector<double>();
    std::vector<double> key(static_cast<std::size_t>(n));
    std::vector<int64_t> order(static_cast<std::size_t>(n));
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t i = 0; i < n; ++i) {
        const double wi = w[r * n + i];
        const double e = -std::log1p(-u[r * n + i]);  // Exp(1); 0 for u = 0 (key +inf)
        key[i] = wi == 0 ? -INFINITY : std::log(wi) - std::log(e);
      }
      std::iota(order.begin(), order.end(), int64_t{0});
      std::partial_sort(order.begin(), order.begin() + num_samples, order.end(),
          [&](int64_t i, int64_t j) { return key[i] != key[j] ? key[i] > key[j] : i < j; });
      std::copy(order.begin(), order.begin() + num_samples, dst + r * num_samples);
    }
  }
  return out;
}

Tensor multinomial(const Tensor& probs, int64_t num_samples, bool replacement) {
  return multinomial(probs, num_samples, replacement, default_generator());
}

}  // namespace ag
