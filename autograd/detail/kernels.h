// Internal loops shared by the op implementations (not part of the public API).
//
// Every op reads its operands through their strides, so views (transposes, slices, broadcasts
// with stride 0) need no copies. for_each_row walks a shape for K operands at once: it merges
// dims that are contiguous for all operands (so a contiguous tensor is one long row) and hands the
// innermost rows to a callback, whose inner loop the compiler can vectorise when the strides are 1.
#pragma once

#include <algorithm>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "autograd/convert.h"
#include "autograd/parallel.h"
#include "autograd/tensor.h"

namespace ag::detail {

// Strides of `tensor` seen in the index space of `shape` it broadcasts to: 0 along broadcast dims.
Shape broadcast_strides(const Tensor& tensor, const Shape& shape);

// Merges adjacent dims that are contiguous for every operand and drops size-1 dims.
template <std::size_t K>
void coalesce(Shape& shape, std::array<Shape, K>& strides) {
  Shape merged_shape;
  std::array<Shape, K> merged_strides;
  for (std::size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    bool mergeable = !merged_shape.empty();
    for (std::size_t k = 0; k < K && mergeable; ++k)
      mergeable = merged_strides[k].back() == strides[k][d] * shape[d];
    if (mergeable) {
      merged_shape.back() *= shape[d];
      for (std::size_t k = 0; k < K; ++k) merged_strides[k].back() = strides[k][d];
    } else {
      merged_shape.push_back(shape[d]);
      for (std::size_t k = 0; k < K; ++k) merged_strides[k].push_back(strides[k][d]);
    }
  }
  shape = std::move(merged_shape);
  strides = std::move(merged_strides);
}

// Calls row(offsets, n, inner_strides) for every innermost row of `shape`, where offsets[k] is
// operand k's element offset of the row's first element and inner_strides[k] its stride along
// the row. Rows come in row-major order.
template <std::size_t K, class RowFn>
void for_each_row(Shape shape, std::array<Shape, K> strides, RowFn&& row) {
  for (int64_t size : shape)
    if (size == 0) return;
  coalesce(shape, strides);
  std::array<int64_t, K> offsets{};
  std::array<int64_t, K> inner{};
  if (shape.empty()) {  // a single element
    row(offsets, int64_t{1}, inner);
    return;
  }
  const std::size_t outer_dims = shape.size() - 1;
  const int64_t n = shape.back();
  for (std::size_t k = 0; k < K; ++k) inner[k] = strides[k].back();
  std::vector<int64_t> counter(outer_dims, 0);
  while (true) {
    row(offsets, n, inner);
    // Advance the outer multi-index like an odometer, updating every operand's offset.
    std::size_t d = outer_dims;
    while (true) {
      if (d == 0) return;  // every outer index wrapped: done
      --d;
      if (++counter[d] < shape[d]) {
        for (std::size_t k = 0; k < K; ++k) offsets[k] += strides[k][d];
        break;
      }
      for (std::size_t k = 0; k < K; ++k) offsets[k] -= strides[k][d] * (shape[d] - 1);
      counter[d] = 0;
    }
  }
}

// for_each_row with the work split across ag's threads (autograd/parallel.h): whole rows, or pieces
// of the one row a contiguous tensor coalesces into. `row` must only write what its row owns.
template <std::size_t K, class RowFn>
void parallel_for_each_row(Shape shape, std::array<Shape, K> strides, RowFn&& row) {
  for (int64_t size : shape)
    if (size == 0) return;
  coalesce(shape, strides);
  std::array<int64_t, K> offsets{}, inner{};
  if (shape.empty()) {  // a single element
    row(offsets, int64_t{1}, inner);
    return;
  }
  const std::size_t outer_dims = shape.size() - 1;
  const int64_t n = shape.back();
  int64_t rows = 1;
  for (std::size_t d = 0; d < outer_dims; ++d) rows *= shape[d];
  for (std::size_t k = 0; k < K; ++k) inner[k] = strides[k].back();
  if (rows == 1) {
    parallel_for(n, 1, [&](int64_t begin, int64_t end) {
      std::array<int64_t, K> start{};
      for (std::size_t k = 0; k < K; ++k) start[k] = begin * inner[k];
      row(start, end - begin, inner);
    });
    return;
  }
  parallel_for(rows, n, [&](int64_t begin, int64_t end) {
    // The multi-index of row `begin` over the outer dims (row-major), and each operand's offset;
    // then row by row like for_each_row's odometer.
    std::vector<int64_t> counter(outer_dims, 0);
    std::array<int64_t, K> start{};
    int64_t rest = begin;
    for (std::size_t d = outer_dims; d-- > 0;) {
      counter[d] = rest % shape[d];
      rest /= shape[d];
      for (std::size_t k = 0; k < K; ++k) start[k] += counter[d] * strides[k][d];
    }
    for (int64_t r = begin; r < end; ++r) {
      row(start, n, inner);
      for (std::size_t d = outer_dims; d-- > 0;) {
        if (++counter[d] < shape[d]) {
          for (std::size_t k = 0; k < K; ++k) start[k] += strides[k][d];
          break;
        }
        for (std::size_t k = 0; k < K; ++k) start[k] -= strides[k][d] * (shape[d] - 1);
        counter[d] = 0;
      }
    }
  });
}

// False if some element of t is reached by two indices (a stride-0 dim of size > 1).
bool has_distinct_elements(const Tensor& t);

// out[0, n) = value: std::fill_n, compiled once per instruction set for float and double (the
// portable build's 16-byte stores take twice as long as AVX-512's 64-byte ones to write a tensor
// that stays in cache, such as a sum's expanded gradient written out).
void fill_row(float* out, int64_t n, float value);
void fill_row(double* out, int64_t n, double value);
template <class T>
void fill_row(T* out, int64_t n, T value) {
  std::fill_n(out, n, value);
}

// dst[i] = src[i] for every index of dst's shape; src broadcasts to dst. Same dtype.
void copy_into(const Tensor& dst, const Tensor& src);

struct SliceRegion;  // autograd/autograd.h
// The view of `whole` that a slice with `region` takes (ops_shape.cpp): where slice's gradient
// goes in its input's.
Tensor slice_region_view(const Tensor& whole, const SliceRegion& region);

// A shape seen as a contiguous (outer, size, inner) block around `dim`: the ops that pick or
// sum along one dim (index_select, gather, cumsum, topk) walk outer × size × inner.
struct Around {
  int64_t outer, size, inner;
};
inline Around around(const Shape& shape, int64_t dim) {
  Around a{1, shape.empty() ? 1 : shape[dim], 1};
  for (int64_t d = 0; d < dim; ++d) a.outer *= shape[d];
  for (std::size_t d = static_cast<std::size_t>(dim) + 1; d < shape.size(); ++d)
    a.inner *= shape[d];
  return a;
}

// A new view of `base`'s storage with the given geometry (no autograd).
Tensor make_view(const Tensor& base, Shape shape, Shape strides, int64_t offset);

// The upstream gradient of an op that works on rows (its last `row_dims` dims) as contiguous rows,
// row r at g.data() + r · row_stride: g itself when contiguous (row_stride: a row's elements);
// when every row is the same row (g expanded over the leading dims, as a sum's gradient is: the
// receiving node keeps it unwritten, autograd.cpp's reads_any_gradient_layout), a contiguous copy
// of that one row, read for every row (row_stride 0); else a contiguous copy of g. The values read
// are the same either way, so are the bits.
struct GradientRows {
  Tensor g;
  int64_t row_stride;
};
GradientRows gradient_rows(const Tensor& grad_output, std::size_t row_dims);

// The bytes a tensor of `shape` and `dtype` needs: checked_numel(shape, op) elements, or a
// ShapeError naming `op` and the shape if that is more than PTRDIFF_MAX bytes (no buffer can be).
std::size_t checked_nbytes(const Shape& shape, DType dtype, const char* op);
// ag::empty whose errors name `op`: a ShapeError for a shape checked_nbytes refuses, an
// OutOfMemoryError (naming the shape and the bytes) when the system cannot provide the memory.
// Ops allocate a result whose shape they made through this.
Tensor empty(const Shape& shape, DType dtype, const char* op);

// ---- softmax of one row (ops_softmax.cpp) -------------------------------------------------------
// out[k] = exp(in[k] − m) / Σ_j exp(in[j] − m), m = max in, for k < n; in may be out. ag::softmax's
// row arithmetic (the fast float exp for float32), shared so that fused kernels give its bits.
void softmax_row(const float* in, float* out, int64_t n);
void softmax_row(const double* in, double* out, int64_t n);
// softmax_row in place on rows[i][0, lengths[i]) for i < count, with the same bits.
void softmax_rows(float* const* rows, const int64_t* lengths, int64_t count);
void softmax_rows(double* const* rows, const int64_t* lengths, int64_t count);

// ---- dropout masks (ops_random.cpp) -------------------------------------------------------------
// Philox draws are a pure function of the seed and the block counter, so the mask of any element
// range can be drawn on its own (in parallel, head by head) from these four numbers.
struct DropoutMask {
  uint64_t seed = 0;
  uint64_t first_block = 0;  // the first Philox block the mask reserved
  double keep_prob = 1.0;    // 1 − p
  double scale = 1.0;        // 1/(1 − p), or 0 when p = 1
};

// Reserves the blocks of a mask over `numel` elements of `dtype` from `generator` — as many, and
// in the same place of its stream, as ag::dropout on a tensor of numel elements reserves.
DropoutMask reserve_dropout_mask(int64_t numel, DType dtype, double p, Generator& generator);

// keep[i] = 1 if element first_element + i of the mask keeps its unit, else 0, for i in [0, n):
// ag::dropout's draws for a contiguous tensor of `dtype` (bernoulli(1 − p)'s, word for word).
void draw_dropout_keep(
    const DropoutMask& mask, DType dtype, int64_t first_element, int64_t n, uint8_t* keep);

// out[i] = in[i] · m_i with m_i = scale where keep[i] else 0, for i in [0, n); in may be out.
// One copy per instruction set (ops_random.cpp).
void apply_dropout_keep(const float* in, float* out, const uint8_t* keep, int64_t n, double scale);
void apply_dropout_keep(
    const double* in, double* out, const uint8_t* keep, int64_t n, double scale);

// Throws DTypeError unless a and b have the same dtype.
void check_same_dtype(const Tensor& a, const Tensor& b, const char* op);
// Throws DTypeError, naming `op`, unless the tensor (the dtype) is float32 or float64: for the ops
// that compute in floating point (exp, matmul, softmax, ...).
void check_floating(const Tensor& x, const char* op);
void check_floating(DType dtype, const char* op);
// `t` converted to `dtype` for an op that mixes dtypes (promote_types: an int64 or bool operand
// of a floating op); t itself when it has that dtype already. Not differentiable — only integer
// and bool tensors are ever converted, and they carry no gradient.
Tensor promoted(const Tensor& t, DType dtype);

}  // namespace ag::detail
