#include "autograd/tensor.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <new>
#include <numbers>
#include <numeric>
#include <ostream>
#include <stdexcept>

#include "autograd/allocator.h"
#include "autograd/autograd.h"
#include "autograd/detail/kernels.h"
#include "autograd/detail/target_clones.h"
#include "autograd/ops.h"

namespace ag {

// ---- Storage ------------------------------------------------------------------------------------

namespace {
std::atomic<uint64_t> storage_allocations{0};
}  // namespace

uint64_t detail::storage_allocation_count() {
  return storage_allocations.load(std::memory_order_relaxed);
}

// The buffer comes from ag's caching allocator (autograd/allocator.h), 64-byte aligned.
Storage::Storage(std::size_t nbytes) : data_(detail::allocate_storage(nbytes)), nbytes_(nbytes) {
  storage_allocations.fetch_add(1, std::memory_order_relaxed);
}

Storage::Storage(void* data, std::size_t nbytes, std::function<void()> release)
    : data_(data), nbytes_(nbytes), release_(std::move(release)) {}

Storage::~Storage() {
  if (release_)
    release_();
  else
    detail::release_storage(data_, nbytes_);
}

// ---- helpers ------------------------------------------------------------------------------------

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) s += ",";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

int64_t numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t size : shape) n *= size;
  return n;
}

int64_t checked_numel(const Shape& shape, const char* op) {
  // The product of the nonzero sizes bounds both the count and every contiguous stride
  // (contiguous_strides skips zeros too), so it must fit: [0, 2^40, 2^40] holds no element, yet its
  // first stride would be 2^80.
  int64_t nonzero_product = 1;
  bool has_zero = false;
  for (std::size_t d = 0; d < shape.size(); ++d) {
    const int64_t size = shape[d];
    if (size < 0)
      fail<ShapeError>(
          op, ": negative size in shape ", shape_str(shape), " (dim ", d, " is ", size, ")");
    if (size == 0) {
      has_zero = true;
    } else if (__builtin_mul_overflow(nonzero_product, size, &nonzero_product)) {
      fail<ShapeError>(op, ": shape ", shape_str(shape),
          " is too large: its sizes multiply to more than 2^63 - 1 = ", INT64_MAX);
    }
  }
  return has_zero ? 0 : nonzero_product;
}

std::size_t detail::checked_nbytes(const Shape& shape, DType dtype, const char* op) {
  const int64_t count = checked_numel(shape, op);
  const auto element_bytes = static_cast<int64_t>(dtype_size(dtype));
  if (count > PTRDIFF_MAX / element_bytes)
    fail<ShapeError>(op, ": shape ", shape_str(shape), " of ", dtype_name(dtype),
        " is too large: its ", count, " elements of ", element_bytes,
        " bytes are more than the 2^63 - 1 bytes a buffer can hold");
  return static_cast<std::size_t>(count * element_bytes);
}

Shape contiguous_strides(const Shape& shape) {
  Shape strides(shape.size());
  int64_t stride = 1;
  for (std::size_t d = shape.size(); d-- > 0;) {
    strides[d] = stride;
    stride *= std::max<int64_t>(shape[d], 1);
  }
  return strides;
}

int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op) {
  // A 0-dim tensor accepts dim 0 and -1, as in PyTorch.
  int64_t range = std::max<int64_t>(ndim, 1);
  if (dim < -range || dim >= range)
    fail<ShapeError>(op, ": dim ", dim, " is out of range for a tensor of ", ndim,
        " dims (expected ", -range, " to ", range - 1, ")");
  return dim < 0 ? dim + range : dim;
}

namespace detail {

Shape broadcast_strides(const Tensor& tensor, const Shape& shape) {
  const Shape& own = tensor.shape();
  Shape strides(shape.size(), 0);
  std::size_t lead = shape.size() - own.size();
  for (std::size_t d = 0; d < own.size(); ++d)
    strides[lead + d] = own[d] == 1 ? 0 : tensor.strides()[d];
  return strides;
}

void check_same_dtype(const Tensor& a, const Tensor& b, const char* op) {
  if (a.dtype() != b.dtype())
    fail<DTypeError>(op, ": dtypes ", dtype_name(a.dtype()), " and ", dtype_name(b.dtype()),
        " cannot be mixed (shapes ", shape_str(a.shape()), " and ", shape_str(b.shape()),
        "); convert one of them first");
}

void check_floating(DType dtype, const char* op) {
  if (!is_floating_point(dtype))
    fail<DTypeError>(op, ": expected a floating-point tensor (float32 or float64), got ",
        dtype_name(dtype), "; convert it first (x.to(ag::float32))");
}

void check_floating(const Tensor& x, const char* op) {
  if (!is_floating_point(x.dtype()))
    fail<DTypeError>(op,
        ": expected a floating-point tensor (float32 or float64), got one of dtype ",
        dtype_name(x.dtype()), " and shape ", shape_str(x.shape()),
        "; convert it first (x.to(ag::float32))");
}

Tensor promoted(const Tensor& t, DType dtype) {
  if (t.dtype() == dtype) return t;
  return t.to(dtype);
}

// False if some element of t is reached by two indices (a stride-0 dim of size > 1, as
// expand() makes): then a loop writing t must not be split across threads.
bool has_distinct_elements(const Tensor& t) {
  for (int64_t d = 0; d < t.dim(); ++d)
    if (t.strides()[d] == 0 && t.shape()[d] > 1) return false;
  return true;
}

AG_TARGET_CLONES void fill_row(float* out, int64_t n, float value) { std::fill_n(out, n, value); }
AG_TARGET_CLONES void fill_row(double* out, int64_t n, double value) { std::fill_n(out, n, value); }

namespace {
// A copy whose innermost dim (after merging the dims contiguous for both) is contiguous in dst but
// strided in src, while src is contiguous along another dim a: a transpose, as
// x.transpose(1, 2).contiguous() makes. Row by row, each read of src would take one element of a
// 64-byte line and move on to the next line; square tiles of kTile × kTile elements read and write
// whole lines instead, and stay in L1 while they are copied. Returns false, having copied nothing,
// for any other layout. dst's elements are distinct (no stride 0), so tiles can go to threads.
template <class T>
bool copy_transposed(T* out, const T* in, Shape shape, std::array<Shape, 2> strides) {
  coalesce(shape, strides);
  const std::size_t m = shape.size(), last = m - 1;
  if (m < 2 || strides[0][last] != 1 || strides[1][last] == 1 || strides[1][last] == 0)
    return false;
  std::size_t a = m;  // the dim along which src is contiguous
  for (std::size_t d = 0; d < last; ++d)
    if (strides[1][d] == 1) a = d;
  if (a == m) return false;
  // Each matrix is dst[i · dst_row + j] = src[i + j · src_col] for i < rows (dim a), j < cols
  // (the last dim); the other dims index the matrices.
  const int64_t rows = shape[a], cols = shape[last];
  const int64_t dst_row = strides[0][a], src_col = strides[1][last];
  Shape batch_shape, batch_dst, batch_src;
  int64_t matrices = 1;
  for (std::size_t d = 0; d < last; ++d)
    if (d != a) {
      batch_shape.push_back(shape[d]);
      batch_dst.push_back(strides[0][d]);
      batch_src.push_back(strides[1][d]);
      matrices *= shape[d];
    }
  constexpr int64_t kTile = 16;
  const int64_t row_blocks = (rows + kTile - 1) / kTile;
  // One work item: kTile rows (dim a) of one matrix, all its columns, tile by tile.
  parallel_for(matrices * row_blocks, kTile * cols, [&](int64_t begin, int64_t end) {
    for (int64_t item = begin; item < end; ++item) {
      const int64_t i_begin = (item % row_blocks) * kTile;
      const int64_t i_end = std::min(rows, i_begin + kTile);
      int64_t rest = item / row_blocks, dst_at = 0, src_at = 0;  // the matrix's offsets
      for (std::size_t b = batch_shape.size(); b-- > 0;) {
        const int64_t index = rest % batch_shape[b];
        rest /= batch_shape[b];
        dst_at += index * batch_dst[b];
        src_at += index * batch_src[b];
      }
      for (int64_t j_begin = 0; j_begin < cols; j_begin += kTile) {
        const int64_t j_end = std::min(cols, j_begin + kTile);
        for (int64_t i = i_begin; i < i_end; ++i) {
          T* o = out + dst_at + i * dst_row;
          const T* s = in + src_at + i;
          for (int64_t j = j_begin; j < j_end; ++j) o[j] = s[j * src_col];
        }
      }
    }
  });
  return true;
}
}  // namespace

void copy_into(const Tensor& dst, const Tensor& src) {
  check_same_dtype(dst, src, "copy");
  if (src.dim() > dst.dim() || broadcast_shapes(src.shape(), dst.shape(), "copy") != dst.shape())
    fail<ShapeError>("copy: source of shape ", shape_str(src.shape()),
        " does not broadcast to destination shape ", shape_str(dst.shape()));
  // Nothing to copy. (A transposed copy would otherwise walk its tiles' loops over the other dims
  // however large they are: (2, 5, 4444, 44444, 4444, 44, 4444, 0, 1) took minutes.)
  if (dst.numel() == 0) return;
  dispatch_all(dst.dtype(), [&]<typename T>() {
    T* out = dst.data<T>();
    const T* in = src.data<T>();
    auto copy_row = [&](const std::array<int64_t, 2>& off, int64_t n,
                        const std::array<int64_t, 2>& st) {
      T* o = out + off[0];
      const T* s = in + off[1];
      if (st[0] == 1 && st[1] == 1) {
        std::memcpy(o, s, static_cast<std::size_t>(n) * sizeof(T));
      } else if (st[0] == 1 && st[1] == 0) {  // one value along the row (an expanded source)
        fill_row(o, n, *s);
      } else {
        for (int64_t i = 0; i < n; ++i) o[i * st[0]] = s[i * st[1]];
      }
    };
    // A destination with a stride-0 dim (an expanded view) has elements written more than once:
    // one thread then, so that no two write the same one.
    const std::array<Shape, 2> strides{dst.strides(), broadcast_strides(src, dst.shape())};
    if (has_distinct_elements(dst)) {
      if (copy_transposed(out, in, dst.shape(), strides)) return;
      parallel_for_each_row<2>(dst.shape(), strides, copy_row);
    } else
      for_each_row<2>(dst.shape(), strides, copy_row);
  });
}

Tensor make_view(const Tensor& base, Shape shape, Shape strides, int64_t offset) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = base.impl_ptr()->storage;
  impl->shape = std::move(shape);
  impl->strides = std::move(strides);
  impl->offset = offset;
  impl->dtype = base.dtype();
  return Tensor(std::move(impl));
}

GradientRows gradient_rows(const Tensor& grad_output, std::size_t row_dims) {
  const Shape& shape = grad_output.shape();
  const Shape& strides = grad_output.strides();
  const auto lead = static_cast<std::ptrdiff_t>(shape.size() - row_dims);
  const Shape row_shape(shape.begin() + lead, shape.end());
  const int64_t row_numel =
      std::accumulate(row_shape.begin(), row_shape.end(), int64_t{1}, std::multiplies<int64_t>());
  if (grad_output.is_contiguous()) return {grad_output, row_numel};
  if (std::all_of(strides.begin(), strides.begin() + lead, [](int64_t s) { return s == 0; })) {
    const Tensor first_row = make_view(grad_output, row_shape,
        Shape(strides.begin() + lead, strides.end()), grad_output.offset());  // (*row_shape)
    return {contiguous(first_row), 0};
  }
  return {contiguous(grad_output), row_numel};
}

}  // namespace detail

// ---- Tensor: metadata ---------------------------------------------------------------------------

TensorImpl& Tensor::impl() const {
  if (!impl_)
    throw ValueError(
        "tensor: use of an undefined tensor (default-constructed, or a missing gradient)");
  return *impl_;
}

int64_t Tensor::size(int64_t d) const { return shape()[wrap_dim(d, dim(), "size")]; }

int64_t Tensor::numel() const { return ag::numel(shape()); }

bool Tensor::is_contiguous() const {
  // A tensor with no elements is contiguous whatever its strides, as in PyTorch (there is nothing
  // to lay out; a fresh (2, 0, 3) has strides (3, 3, 1), since contiguous_strides counts a 0 as 1).
  if (numel() == 0) return true;
  int64_t expected = 1;
  for (std::size_t d = shape().size(); d-- > 0;) {
    if (shape()[d] == 1) continue;
    if (strides()[d] != expected) return false;
    expected *= shape()[d];
  }
  return true;
}

bool Tensor::shares_storage(const Tensor& other) const {
  return impl().storage == other.impl().storage;
}

template <class T>
T* Tensor::data() const {
  if (dtype() != dtype_of<T>)
    fail<DTypeError>(
        "data: tensor of dtype ", dtype_name(dtype()), " accessed as ", dtype_name(dtype_of<T>));
  return static_cast<T*>(impl().storage->data()) + impl().offset;
}
template float* Tensor::data<float>() const;
template double* Tensor::data<double>() const;
template int64_t* Tensor::data<int64_t>() const;
template bool* Tensor::data<bool>() const;

void* Tensor::raw_data() const {
  return static_cast<char*>(impl().storage->data()) + impl().offset * dtype_size(dtype());
}

// ---- Tensor: values -----------------------------------------------------------------------------

template <class T>
T Tensor::item() const {
  if (numel() != 1)
    fail<ShapeError>("item: a tensor of shape ", shape_str(shape()), " has ", numel(),
        " elements; item() needs exactly one");
  return dispatch_all(dtype(), [&]<typename S>() { return exact_cast<T>(*data<S>(), "item"); });
}
template double Tensor::item<double>() const;
template float Tensor::item<float>() const;
template int64_t Tensor::item<int64_t>() const;
template bool Tensor::item<bool>() const;

template <class T>
std::vector<T> Tensor::to_vector() const {
  std::vector<T> values;
  detail::reserve_scratch(values, static_cast<std::size_t>(numel()), "to_vector", shape());
  dispatch_all(dtype(), [&]<typename S>() {
    const S* base = data<S>();
    detail::for_each_row<1>(shape(), {strides()},
        [&](const std::array<int64_t, 1>& off, int64_t n, const std::array<int64_t, 1>& st) {
          for (int64_t i = 0; i < n; ++i)
            values.push_back(exact_cast<T>(base[off[0] + i * st[0]], "to_vector"));
        });
  });
  return values;
}
template std::vector<float> Tensor::to_vector<float>() const;
template std::vector<double> Tensor::to_vector<double>() const;
template std::vector<int64_t> Tensor::to_vector<int64_t>() const;
template std::vector<bool> Tensor::to_vector<bool>() const;

std::ostream& operator<<(std::ostream& out, const Tensor& tensor) { return out << tensor.str(); }

// ---- Tensor: autograd ---------------------------------------------------------------------------

Tensor& Tensor::requires_grad_(bool requires_grad) {
  if (requires_grad && !is_floating_point(dtype()))
    fail<AutogradError>("requires_grad_: only floating-point tensors can require gradients; this ",
        dtype_name(dtype()), " tensor of shape ", shape_str(shape()),
        " holds integers (convert it with to(ag::float32) to differentiate through its values)");
  if (!is_leaf() && !requires_grad)
    fail<AutogradError>("requires_grad_: a tensor computed by '", impl().grad_fn->name(),
        "' always requires grad; use detach() to get a copy cut from the graph");
  impl().requires_grad = requires_grad;
  return *this;
}

Tensor Tensor::grad() const { return impl().grad ? Tensor(impl().grad) : Tensor(); }

void Tensor::set_grad(const Tensor& grad) const {
  if (grad.defined() && (grad.shape() != shape() || grad.dtype() != dtype()))
    fail<ShapeError>("set_grad: gradient of shape ", shape_str(grad.shape()), " (",
        dtype_name(grad.dtype()), ") for a tensor of shape ", shape_str(shape()), " (",
        dtype_name(dtype()), ")");
  impl().grad = grad.defined() ? grad.impl_ptr() : nullptr;
}

void Tensor::zero_grad() const { impl().grad = nullptr; }

void Tensor::set_data(const Tensor& source) const {
  if (source.shape() != shape())
    fail<ShapeError>("set_data: source of shape ", shape_str(source.shape()),
        " for a tensor of shape ", shape_str(shape()));
  TensorImpl& target = impl();
  const TensorImpl& data = source.impl();
  target.storage = data.storage;
  target.strides = data.strides;
  target.offset = data.offset;
  target.dtype = data.dtype;
}

void Tensor::backward(const Tensor& grad, bool retain_graph) const {
  run_backward(*this, grad, retain_graph);
}

Tensor Tensor::detach() const { return detail::make_view(*this, shape(), strides(), offset()); }

Tensor& Tensor::set_name(std::string name) {
  impl().name = std::move(name);
  return *this;
}

// ---- Tensor: in-place updates -------------------------------------------------------------------

namespace {
// What every in-place update checks first: that autograd allows it, and that each element of t is
// its own memory location — in an expanded view (a stride-0 dim of size > 1) one location stands
// for several elements, and add_ would add to it once per element (PyTorch refuses it too).
void check_inplace_allowed(const Tensor& t, const char* op) {
  if (t.requires_grad() && GradMode::is_enabled())
    fail<AutogradError>(op, ": in-place update of a tensor of shape ", shape_str(t.shape()),
        " that requires grad; wrap the update in ag::NoGradGuard (in Python: with ag.no_grad())");
  if (!detail::has_distinct_elements(t))
    fail<ValueError>(op,
        ": unsupported operation: more than one element of the written-to tensor "
        "(shape ",
        shape_str(t.shape()), ", strides ", shape_str(t.strides()),
        ") refers to a single memory location; clone() it before the in-place update");
}

// An in-place update of `t` that reads `source` (copy_, add_) is not recorded in the graph: in
// grad mode a source that requires grad is an error, since its gradient would be lost silently.
void check_source_without_grad(const Tensor& t, const Tensor& source, const char* op) {
  if (source.requires_grad() && GradMode::is_enabled())
    fail<AutogradError>(op, ": the source of shape ", shape_str(source.shape()),
        " requires grad, and the in-place update of the tensor of shape ", shape_str(t.shape()),
        " is not recorded (its gradient would be lost); write a new tensor, or update under "
        "ag::NoGradGuard (in Python: with ag.no_grad())");
}

// The elements an in-place update of `t` reads from `source` (copy_, add_), as a tensor that no
// write to t changes under the reader: `source` itself when it is another storage, another range
// of t's, or t's very elements (x.add_(x)); otherwise the rows written would be read half
// updated, in an order that depends on the threads. Then, as PyTorch does, an error when both
// are dense (x[1:].add_(x[:3]), x.add_(x[0]) broadcast over x's rows) — and a copy of `source`
// when the views interleave (x[:, 1] and x[:, 0] share a range, no element), where PyTorch
// cannot tell.
Tensor unaliased_source(const Tensor& t, const Tensor& source, const char* op) {
  if (!t.shares_storage(source)) return source;
  if (source.offset() == t.offset() && source.shape() == t.shape() &&
      source.strides() == t.strides())
    return source;
  // [first, last] element of each in the storage (strides are not negative), or none if empty
  auto extent = [](const Tensor& x) -> std::optional<std::pair<int64_t, int64_t>> {
    int64_t last = x.offset();
    for (int64_t d = 0; d < x.dim(); ++d) {
      if (x.shape()[d] == 0) return std::nullopt;
      last += x.strides()[d] * (x.shape()[d] - 1);
    }
    return std::pair{x.offset(), last};
  };
  const auto written = extent(t), read = extent(source);
  if (!written || !read || read->second < written->first || written->second < read->first)
    return source;
  if (t.is_contiguous() && source.is_contiguous())
    fail<ValueError>(op, ": unsupported operation: some elements of the input tensor (shape ",
        shape_str(source.shape()), ", offset ", source.offset(),
        ") and the written-to tensor (shape ", shape_str(t.shape()), ", offset ", t.offset(),
        ") refer to a single memory location; clone() the input first");
  NoGradGuard no_grad;
  return ag::clone(source);
}

// x ← update(x, s) for every element x of t, through its strides, with s = `scalar` in t's dtype.
template <class Update>
void update_each_element(const Tensor& t, const char* op, double scalar, Update update) {
  check_inplace_allowed(t, op);
  dispatch_all(t.dtype(), [&]<typename T>() {
    const T s = exact_cast<T>(scalar, op);
    t.bump_version();
    T* base = t.data<T>();
    detail::for_each_row<1>(t.shape(), {t.strides()},
        [&](const std::array<int64_t, 1>& off, int64_t n, const std::array<int64_t, 1>& st) {
          for (int64_t i = 0; i < n; ++i) {
            T& x = base[off[0] + i * st[0]];
            x = update(x, s);
          }
        });
  });
}
}  // namespace

const Tensor& Tensor::fill_(double value) const {
  check_inplace_allowed(*this, "fill_");
  dispatch_all(dtype(), [&]<typename T>() {
    const T v = exact_cast<T>(value, "fill_");
    bump_version();
    T* base = data<T>();
    detail::for_each_row<1>(shape(), {strides()},
        [&](const std::array<int64_t, 1>& off, int64_t n, const std::array<int64_t, 1>& st) {
          if (st[0] == 1) {
            detail::fill_row(base + off[0], n, v);  // a contiguous row: vector stores
          } else {
            for (int64_t i = 0; i < n; ++i) base[off[0] + i * st[0]] = v;
          }
        });
  });
  return *this;
}

const Tensor& Tensor::copy_(const Tensor& source_given) const {
  check_inplace_allowed(*this, "copy_");
  check_source_without_grad(*this, source_given, "copy_");
  const Tensor source = unaliased_source(*this, source_given, "copy_");
  bump_version();
  detail::copy_into(*this, source);
  return *this;
}

const Tensor& Tensor::add_(const Tensor& other_given, double alpha) const {
  check_inplace_allowed(*this, "add_");
  check_source_without_grad(*this, other_given, "add_");
  detail::check_floating(*this, "add_");
  detail::check_same_dtype(*this, other_given, "add_");
  if (broadcast_shapes(other_given.shape(), shape(), "add_") != shape())
    fail<ShapeError>("add_: shape ", shape_str(other_given.shape()),
        " does not broadcast to the updated tensor's shape ", shape_str(shape()));
  const Tensor other = unaliased_source(*this, other_given, "add_");
  bump_version();
  dispatch(dtype(), [&]<typename T>() {
    T* out = data<T>();
    const T* in = other.data<T>();
    const T a = static_cast<T>(alpha);
    auto add_row = [&](const std::array<int64_t, 2>& off, int64_t n,
                       const std::array<int64_t, 2>& st) {
      T* o = out + off[0];
      const T* s = in + off[1];
      if (st[0] == 1 && st[1] == 1) {
        for (int64_t i = 0; i < n; ++i) o[i] += a * s[i];
      } else {
        for (int64_t i = 0; i < n; ++i) o[i * st[0]] += a * s[i * st[1]];
      }
    };
    // Threads split the rows: every element of this tensor is its own (checked above).
    detail::parallel_for_each_row<2>(
        shape(), {strides(), detail::broadcast_strides(other, shape())}, add_row);
  });
  return *this;
}

const Tensor& Tensor::mul_(double factor) const {
  detail::check_floating(*this, "mul_");
  update_each_element(*this, "mul_", factor, [](auto x, auto f) { return x * f; });
  return *this;
}

// ---- Tensor: ops as methods ---------------------------------------------------------------------

Tensor Tensor::reshape(const Shape& s) const { return ag::reshape(*this, s); }
Tensor Tensor::view(const Shape& s) const { return ag::view(*this, s); }
Tensor Tensor::permute(const Shape& dims) const { return ag::permute(*this, dims); }
Tensor Tensor::transpose(int64_t d0, int64_t d1) const { return ag::transpose(*this, d0, d1); }
Tensor Tensor::squeeze() const { return ag::squeeze(*this); }
Tensor Tensor::squeeze(int64_t d) const { return ag::squeeze(*this, d); }
Tensor Tensor::unsqueeze(int64_t d) const { return ag::unsqueeze(*this, d); }
Tensor Tensor::expand(const Shape& s) const { return ag::expand(*this, s); }
Tensor Tensor::slice(int64_t d, int64_t start, int64_t end, int64_t step) const {
  return ag::slice(*this, d, start, end, step);
}
Tensor Tensor::narrow(int64_t d, int64_t start, int64_t length) const {
  return ag::narrow(*this, d, start, length);
}
Tensor Tensor::select(int64_t d, int64_t index) const { return ag::select(*this, d, index); }
Tensor Tensor::contiguous() const { return ag::contiguous(*this); }
Tensor Tensor::clone() const { return ag::clone(*this); }

// Tensor::to is an op (differentiable between the floating dtypes): ops_shape.cpp, with clone.
Tensor Tensor::sum() const { return ag::sum(*this); }
Tensor Tensor::sum(const Shape& dims, bool keepdim) const { return ag::sum(*this, dims, keepdim); }
Tensor Tensor::mean() const { return ag::mean(*this); }
Tensor Tensor::mean(const Shape& dims, bool keepdim) const {
  return ag::mean(*this, dims, keepdim);
}
Tensor Tensor::sum(int64_t dim, bool keepdim) const { return ag::sum(*this, dim, keepdim); }
Tensor Tensor::sum(std::initializer_list<int64_t> dims, bool keepdim) const {
  return ag::sum(*this, dims, keepdim);
}
Tensor Tensor::mean(int64_t dim, bool keepdim) const { return ag::mean(*this, dim, keepdim); }
Tensor Tensor::mean(std::initializer_list<int64_t> dims, bool keepdim) const {
  return ag::mean(*this, dims, keepdim);
}
Tensor Tensor::max(std::initializer_list<int64_t> dims, bool keepdim) const {
  return ag::max(*this, dims, keepdim);
}
ValuesIndices Tensor::max(int64_t dim, bool keepdim) const { return ag::max(*this, dim, keepdim); }
Tensor Tensor::min() const { return ag::min(*this); }
ValuesIndices Tensor::min(int64_t dim, bool keepdim) const { return ag::min(*this, dim, keepdim); }
Tensor Tensor::max() const { return ag::max(*this); }
Tensor Tensor::max(const Shape& dims, bool keepdim) const { return ag::max(*this, dims, keepdim); }
Tensor Tensor::var(const Shape& dims, int64_t correction, bool keepdim) const {
  return ag::var(*this, dims, correction, keepdim);
}
Tensor Tensor::exp() const { return ag::exp(*this); }
Tensor Tensor::log() const { return ag::log(*this); }
Tensor Tensor::sqrt() const { return ag::sqrt(*this); }
Tensor Tensor::tanh() const { return ag::tanh(*this); }
Tensor Tensor::sigmoid() const { return ag::sigmoid(*this); }
Tensor Tensor::relu() const { return ag::relu(*this); }
Tensor Tensor::pow(double exponent) const { return ag::pow(*this, exponent); }
Tensor Tensor::softmax(int64_t d) const { return ag::softmax(*this, d); }
Tensor Tensor::log_softmax(int64_t d) const { return ag::log_softmax(*this, d); }
Tensor Tensor::matmul(const Tensor& other) const { return ag::matmul(*this, other); }

// ---- creation -----------------------------------------------------------------------------------

Tensor detail::empty(const Shape& shape, DType dtype, const char* op) {
  const std::size_t nbytes = checked_nbytes(shape, dtype, op);
  auto impl = std::make_shared<TensorImpl>();
  try {
    impl->storage = std::make_shared<Storage>(nbytes);
  } catch (const std::bad_alloc&) {
    detail::fail_out_of_memory(op, shape, nbytes);
  }
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

Tensor empty(const Shape& shape, DType dtype) { return detail::empty(shape, dtype, "empty"); }

Tensor from_blob(void* data, std::size_t nbytes, const Shape& shape, const Shape& strides,
    DType dtype, std::function<void()> release) {
  if (strides.size() != shape.size())
    fail<ShapeError>("from_blob: ", strides.size(), " strides for the shape ", shape_str(shape));
  // The last element's offset, which must lie inside the memory (an empty tensor reads none).
  const int64_t count = checked_numel(shape, "from_blob");
  uint64_t last = 0;
  for (std::size_t d = 0; d < shape.size(); ++d) {
    if (strides[d] < 0)
      fail<ShapeError>("from_blob: the stride ", strides[d], " of dim ", d, " is negative (shape ",
          shape_str(shape), ", strides ", shape_str(strides), ")");
    if (shape[d] > 1)
      last += static_cast<uint64_t>(shape[d] - 1) * static_cast<uint64_t>(strides[d]);
  }
  if (count > 0 && (last + 1) * dtype_size(dtype) > nbytes)
    fail<ShapeError>("from_blob: the shape ", shape_str(shape), " with strides ",
        shape_str(strides), " reaches beyond the ", nbytes, " bytes given");
  if (!release) release = [] {};  // nothing to give back: the caller keeps the memory alive
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>(data, nbytes, std::move(release));
  impl->shape = shape;
  impl->strides = strides;
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

namespace {
Tensor full_for(const char* op, const Shape& shape, double value, DType dtype) {
  Tensor t = detail::empty(shape, dtype, op);
  dispatch_all(
      dtype, [&]<typename T>() { std::fill_n(t.data<T>(), t.numel(), exact_cast<T>(value, op)); });
  return t;
}
}  // namespace

Tensor full(const Shape& shape, double value, DType dtype) {
  return full_for("full", shape, value, dtype);
}
Tensor zeros(const Shape& shape, DType dtype) { return full_for("zeros", shape, 0.0, dtype); }
Tensor ones(const Shape& shape, DType dtype) { return full_for("ones", shape, 1.0, dtype); }
Tensor zeros_like(const Tensor& like) { return zeros(like.shape(), like.dtype()); }
Tensor ones_like(const Tensor& like) { return ones(like.shape(), like.dtype()); }
Tensor full_like(const Tensor& like, double value) {
  return full_for("full_like", like.shape(), value, like.dtype());
}

Tensor eye(int64_t n, std::optional<int64_t> m, DType dtype) {
  const int64_t cols = m.value_or(n);
  if (n < 0 || cols < 0) fail<ValueError>("eye: sizes ", n, " and ", cols, " must not be negative");
  Tensor t = full_for("eye", {n, cols}, 0.0, dtype);
  dispatch_all(dtype, [&]<typename T>() {
    for (int64_t i = 0; i < std::min(n, cols); ++i) t.data<T>()[i * cols + i] = T(1);
  });
  return t;
}

Tensor linspace(double start, double end, int64_t steps, DType dtype) {
  if (steps < 0 || !std::isfinite(start) || !std::isfinite(end))
    fail<ValueError>("linspace: start ", start, ", end ", end, ", steps ", steps,
        " (need finite ends and steps >= 0)");
  detail::check_floating(dtype, "linspace");
  Tensor t = detail::empty({steps}, dtype, "linspace");
  const double step = steps > 1 ? (end - start) / static_cast<double>(steps - 1) : 0;
  dispatch(dtype, [&]<typename T>() {
    T* p = t.data<T>();
    // As PyTorch: the first half counted from start, the second from end, so both ends are exact.
    for (int64_t i = 0; i < steps; ++i)
      p[i] = static_cast<T>(i < steps / 2 ? start + step * static_cast<double>(i)
                                          : end - step * static_cast<double>(steps - 1 - i));
  });
  return t;
}

Tensor arange(double end, DType dtype) { return arange(0, end, 1, dtype); }

Tensor arange(double start, double end, double step, DType dtype) {
  if (step == 0 || !std::isfinite(start) || !std::isfinite(end) || !std::isfinite(step))
    fail<ValueError>(
        "arange: start ", start, ", end ", end, ", step ", step, " do not describe a finite range");
  // ⌈(end − start) / step⌉ elements. A double of 2^63 or more (or the infinity of an end − start
  // beyond the double range) has no int64 value: refused before it is converted.
  const double count = std::ceil((end - start) / step);
  if (!(count < 0x1p63))
    fail<ShapeError>("arange: start ", start, ", end ", end, ", step ", step, " give ", count,
        " elements, more than 2^63 - 1 = ", INT64_MAX);
  const int64_t n = count > 0 ? static_cast<int64_t>(count) : 0;
  if (dtype == bool_) fail<DTypeError>("arange: a range of bool is not a thing; use int64");
  if (dtype == int64) {
    // In integers, exactly: start + i · step with every value an int64 (so |start|, |end| and
    // |step| below 2^63, and integers: a double up to 2^53 is exact, beyond it every double is an
    // integer anyway).
    for (double v : {start, end, step})
      if (v != std::trunc(v) || !(std::abs(v) < 0x1p63))
        fail<ValueError>("arange: start ", start, ", end ", end, ", step ", step,
            " must be integers in int64's range for an int64 range");
    Tensor t = detail::empty({n}, dtype, "arange");
    int64_t* p = t.data<int64_t>();
    const auto first = static_cast<int64_t>(start), stride = static_cast<int64_t>(step);
    // Each value lies between start and end, but i · step alone may not fit in int64 (start near
    // −2^63, a step near 2^63): computed as uint64, which wraps to the same value.
    for (int64_t i = 0; i < n; ++i)
      p[i] = static_cast<int64_t>(
          static_cast<uint64_t>(first) + static_cast<uint64_t>(i) * static_cast<uint64_t>(stride));
    return t;
  }
  Tensor t = detail::empty({n}, dtype, "arange");
  dispatch(dtype, [&]<typename T>() {
    T* p = t.data<T>();
    for (int64_t i = 0; i < n; ++i) p[i] = static_cast<T>(start + static_cast<double>(i) * step);
  });
  return t;
}

namespace {
template <class V>
Tensor tensor_from(const std::vector<V>& values, const Shape& shape, DType dtype) {
  const int64_t count = checked_numel(shape, "tensor");
  if (count != static_cast<int64_t>(values.size()))
    fail<ShapeError>("tensor: ", values.size(), " values cannot fill shape ", shape_str(shape),
        " (", count, " elements)");
  Tensor t = detail::empty(shape, dtype, "tensor");
  dispatch_all(dtype, [&]<typename T>() {
    T* p = t.data<T>();
    for (std::size_t i = 0; i < values.size(); ++i)
      p[i] = exact_cast<T>(static_cast<V>(values[i]), "tensor");
  });
  return t;
}
}  // namespace

Tensor tensor(const std::vector<double>& values, const Shape& shape, DType dtype) {
  return tensor_from(values, shape, dtype);
}
template <TensorElement V>
Tensor tensor(const std::vector<V>& values, const Shape& shape, DType dtype) {
  return tensor_from(values, shape, dtype);
}
template <TensorElement V>
Tensor tensor(const std::vector<V>& values, DType dtype) {
  return tensor_from(values, {static_cast<int64_t>(values.size())}, dtype);
}
template Tensor tensor<float>(const std::vector<float>&, const Shape&, DType);
template Tensor tensor<int64_t>(const std::vector<int64_t>&, const Shape&, DType);
template Tensor tensor<bool>(const std::vector<bool>&, const Shape&, DType);
template Tensor tensor<float>(const std::vector<float>&, DType);
template Tensor tensor<int64_t>(const std::vector<int64_t>&, DType);
template Tensor tensor<bool>(const std::vector<bool>&, DType);
Tensor tensor(const std::vector<double>& values, DType dtype) {
  return tensor_from(values, {static_cast<int64_t>(values.size())}, dtype);
}
Tensor scalar_tensor(double value, DType dtype) { return full({}, value, dtype); }

// ---- random -------------------------------------------------------------------------------------
//
// Word j of a fill is word (j % 4) of Philox block (first + j / 4), where `first` is reserved from
// the generator; float32 elements use one word each, float64 elements two (53 random bits).

namespace {

// The words of one fill, in order. Blocks are computed kBufferBlocks at a time by
// Generator::fill_blocks (vectorised), never past the blocks the fill reserved.
class WordStream {
 public:
  static constexpr int64_t kBufferBlocks = 64;

  WordStream(const Generator& generator, uint64_t first_block, int64_t num_blocks)
      : generator_(generator), next_block_(first_block), blocks_left_(num_blocks) {}

  uint32_t next() {
    if (position_ == available_) refill();
    return buffer_[position_++];
  }

  // Calls chunk(words, count) on the next `n` words, in pieces of at most the buffer's size.
  template <class Chunk>
  void for_each_chunk(int64_t n, Chunk&& chunk) {
    while (n > 0) {
      if (position_ == available_) refill();
      const int64_t count = std::min(n, available_ - position_);
      chunk(buffer_.data() + position_, count);
      position_ += count;
      n -= count;
    }
  }

 private:
  void refill() {
    const int64_t blocks = std::min(kBufferBlocks, blocks_left_);
    if (blocks <= 0)
      throw std::logic_error("ag: a random fill read past the Philox blocks it reserved");
    generator_.fill_blocks(next_block_, buffer_.data(), blocks);
    next_block_ += static_cast<uint64_t>(blocks);
    blocks_left_ -= blocks;
    available_ = 4 * blocks;
    position_ = 0;
  }

  const Generator& generator_;
  uint64_t next_block_;
  int64_t blocks_left_;
  std::array<uint32_t, 4 * kBufferBlocks> buffer_{};
  int64_t position_ = 0, available_ = 0;
};

// Reserves blocks for `words` 32-bit words.
WordStream reserve_words(Generator& generator, int64_t words) {
  const int64_t blocks = (words + 3) / 4;
  return WordStream(generator, generator.reserve_blocks(static_cast<uint64_t>(blocks)), blocks);
}

template <class T>
T next_uniform(WordStream& words) {
  if constexpr (std::is_same_v<T, float>) {
    return detail::uniform_float(words.next());
  } else {
    uint32_t hi = words.next();
    return detail::uniform_double(hi, words.next());
  }
}

constexpr int64_t words_per_element(DType dtype) { return dtype == DType::float32 ? 1 : 2; }

// uniform, with errors naming `op` (rand draws through it too).
Tensor uniform_for(const char* op, const Shape& shape, double low, double high,
    Generator& generator, DType dtype) {
  if (!(low <= high) || !std::isfinite(low) || !std::isfinite(high))
    fail<ValueError>(op, ": invalid range [", low, ", ", high, ")");
  detail::check_floating(dtype, op);
  Tensor t = detail::empty(shape, dtype, op);
  const int64_t n = t.numel();
  WordStream words = reserve_words(generator, n * words_per_element(dtype));
  dispatch(dtype, [&]<typename T>() {
    T* p = t.data<T>();
    const T lo = static_cast<T>(low), width = static_cast<T>(high - low);
    for (int64_t i = 0; i < n; ++i) p[i] = lo + width * next_uniform<T>(words);
  });
  return t;
}
}  // namespace

Tensor uniform(const Shape& shape, double low, double high, Generator& generator, DType dtype) {
  return uniform_for("uniform", shape, low, high, generator, dtype);
}

Tensor rand(const Shape& shape, Generator& generator, DType dtype) {
  return uniform_for("rand", shape, 0.0, 1.0, generator, dtype);
}

Tensor randn(const Shape& shape, Generator& generator, DType dtype) {
  // Box–Muller: from u1 in (0, 1] and u2 in [0, 1),
  //   z0 = sqrt(−2 ln u1) · cos(2π u2),   z1 = sqrt(−2 ln u1) · sin(2π u2)
  // are two independent standard normal draws.
  detail::check_floating(dtype, "randn");
  Tensor t = detail::empty(shape, dtype, "randn");
  const int64_t n = t.numel(), pairs = (n + 1) / 2;
  WordStream words = reserve_words(generator, 2 * pairs * words_per_element(dtype));
  dispatch(dtype, [&]<typename T>() {
    T* p = t.data<T>();
    for (int64_t pair = 0; pair < pairs; ++pair) {
      double u1 = 1.0 - static_cast<double>(next_uniform<T>(words));
      double u2 = static_cast<double>(next_uniform<T>(words));
      double radius = std::sqrt(-2.0 * std::log(u1));
      double angle = 2.0 * std::numbers::pi * u2;
      p[2 * pair] = static_cast<T>(radius * std::cos(angle));
      if (2 * pair + 1 < n) p[2 * pair + 1] = static_cast<T>(radius * std::sin(angle));
    }
  });
  return t;
}

Tensor bernoulli(const Shape& shape, double p, Generator& generator, DType dtype) {
  if (!(p >= 0.0 && p <= 1.0)) fail<ValueError>("bernoulli: probability ", p, " is outside [0, 1]");
  detail::check_floating(dtype, "bernoulli");
  Tensor t = detail::empty(shape, dtype, "bernoulli");
  const int64_t n = t.numel();
  WordStream words = reserve_words(generator, n * words_per_element(dtype));
  if (dtype == float32) {
    // u = (w >> 8) · 2⁻²⁴ < p ⇔ (w >> 8) < p · 2²⁴ ⇔ (w >> 8) < ⌈p · 2²⁴⌉ (w >> 8 is an integer):
    // the same draw as next_uniform<float>, compared as integers so that the loop vectorises.
    const auto threshold = static_cast<uint32_t>(std::ceil(p * 0x1.0p24));
    float* out = t.data<float>();
    int64_t done = 0;
    words.for_each_chunk(n, [&](const uint32_t* w, int64_t count) {
      for (int64_t i = 0; i < count; ++i) out[done + i] = (w[i] >> 8) < threshold ? 1.0f : 0.0f;
      done += count;
    });
  } else {
    double* out = t.data<double>();
    for (int64_t i = 0; i < n; ++i) out[i] = next_uniform<double>(words) < p ? 1.0 : 0.0;
  }
  return t;
}

Tensor randint(int64_t low, int64_t high, const Shape& shape, Generator& generator, DType dtype) {
  if (!(low < high))
    fail<ValueError>(
        "randint: low ", low, " must be below high ", high, " (draws are in [low, high))");
  if (dtype == bool_)
    fail<DTypeError>("randint: draws integers: int64, float32 or float64, not bool");
  Tensor t = detail::empty(shape, dtype, "randint");
  const int64_t n = t.numel();
  // Each draw is low + (w mod (high − low)) for a 64-bit word w (two Philox words), as PyTorch's
  // random_(low, high): for ranges far below 2^64 the bias of the modulo is below 2^-32.
  const auto range = static_cast<uint64_t>(high) - static_cast<uint64_t>(low);
  WordStream words = reserve_words(generator, 2 * n);
  dispatch_all(dtype, [&]<typename T>() {
    T* p = t.data<T>();
    for (int64_t i = 0; i < n; ++i) {
      const uint64_t hi = words.next();
      const uint64_t w = (hi << 32) | words.next();
      const auto value = static_cast<int64_t>(static_cast<uint64_t>(low) + w % range);
      p[i] = exact_cast<T>(value, "randint");
    }
  });
  return t;
}

Tensor randint(int64_t low, int64_t high, const Shape& shape, DType dtype) {
  return randint(low, high, shape, default_generator(), dtype);
}

Tensor randperm(int64_t n, Generator& generator, DType dtype) {
  if (n < 0) fail<ValueError>("randperm: n must be non-negative, got ", n);
  if (dtype == bool_)
    fail<DTypeError>("randperm: draws integers: int64, float32 or float64, not bool");
  Tensor t = detail::empty({n}, dtype, "randperm");
  // Fisher–Yates: for i = n − 1 down to 1, swap element i with element j drawn from [0, i], each
  // draw a 64-bit word (two Philox words) mod (i + 1), as randint's
  std::vector<int64_t> order(static_cast<std::size_t>(n));
  std::iota(order.begin(), order.end(), int64_t{0});
  WordStream words = reserve_words(generator, 2 * std::max<int64_t>(n - 1, 0));
  for (int64_t i = n - 1; i > 0; --i) {
    const uint64_t hi = words.next();
    const uint64_t w = (hi << 32) | words.next();
    const auto j = static_cast<int64_t>(w % static_cast<uint64_t>(i + 1));
    std::swap(order[static_cast<std::size_t>(i)], order[static_cast<std::size_t>(j)]);
  }
  dispatch_all(dtype, [&]<typename T>() {
    T* p = t.data<T>();
    for (int64_t i = 0; i < n; ++i)
      p[i] = exact_cast<T>(order[static_cast<std::size_t>(i)], "randperm");
  });
  return t;
}

Tensor randperm(int64_t n, DType dtype) { return randperm(n, default_generator(), dtype); }

Tensor rand(const Shape& shape, DType dtype) { return rand(shape, default_generator(), dtype); }
Tensor randn(const Shape& shape, DType dtype) { return randn(shape, default_generator(), dtype); }
Tensor uniform(const Shape& shape, double low, double high, DType dtype) {
  return uniform(shape, low, high, default_generator(), dtype);
}
Tensor bernoulli(const Shape& shape, double p, DType dtype) {
  return bernoulli(shape, p, default_generator(), dtype);
}

}  // namespace ag
