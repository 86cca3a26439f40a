// ag.Tensor from Python: dtypes, creation, NumPy in and out, indexing, autograd (docs/python.md).
//
// A Python ag.Tensor holds an ag::Tensor handle (one shared_ptr), as a C++ variable does: two
// Python objects may be handles of one tensor (p.grad read twice), so identity is `is_same`, not
// Python's `is`, and hash() follows the tensor, as PyTorch's does.
//
// NumPy, without copies where the layout allows:
//   ag.from_numpy(a)   borrows a's buffer (ag::from_blob); the tensor keeps `a` alive, and writes
//                      through either are seen by both. A read-only array, a negative or
//                      non-element stride, a byte order or a dtype ag has not are refused.
//   t.numpy(), np.asarray(t)   a NumPy view of t's elements whose base keeps the tensor alive.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "autograd/autograd.h"
#include "autograd/generator.h"
#include "autograd/ops.h"
#include "autograd/parallel.h"
#include "python/src/bindings.h"

namespace ag::python {

namespace {

// ---- shapes and dtypes ------------------------------------------------------------------------

py::tuple shape_tuple(const Shape& shape) {
  py::tuple out(shape.size());
  for (std::size_t i = 0; i < shape.size(); ++i) out[i] = shape[i];
  return out;
}

// The NumPy dtype of an ag dtype, and back (a TypeError for one ag has not).
py::dtype numpy_dtype(DType dtype) {
  switch (dtype) {
    case DType::float32:
      return py::dtype::of<float>();
    case DType::float64:
      return py::dtype::of<double>();
    case DType::int64:
      return py::dtype::of<int64_t>();
    case DType::bool_:
      return py::dtype::of<bool>();
  }
  fail<ValueError>("numpy: unknown dtype");
}

DType ag_dtype(const py::dtype& dtype, const char* op) {
  const char kind = dtype.kind();
  const auto size = dtype.itemsize();
  if (!dtype.attr("isnative").cast<bool>())
    throw py::type_error(
        std::string(op) + ": the array's byte order (" + py_repr(dtype) +
        ") is not this machine's; convert it with a.astype(a.dtype.newbyteorder('='))");
  if (kind == 'f' && size == 4) return DType::float32;
  if (kind == 'f' && size == 8) return DType::float64;
  if (kind == 'i' && size == 8) return DType::int64;
  if (kind == 'b' && size == 1) return DType::bool_;
  throw py::type_error(std::string(op) + ": NumPy dtype " + py_repr(dtype) +
                       " has no ag dtype (ag has float32, float64, int64 and bool)");
}

// The module's dtype objects (ag.float32, ...), made once in bind_tensor. Leaked on purpose: they
// live as long as the interpreter, and no C++ destructor may touch Python after it is gone.
std::array<py::object, 4>& dtype_objects() {
  static auto* objects = new std::array<py::object, 4>();
  return *objects;
}
py::object dtype_object(DType d) { return dtype_objects()[static_cast<std::size_t>(d)]; }

// ---- NumPy ------------------------------------------------------------------------------------

Tensor from_numpy(const py::object& object) {
  if (!py::isinstance<py::array>(object))
    throw py::type_error(
        "from_numpy: expected a numpy.ndarray, got " + py_repr(py::type::of(object)));
  auto array = py::reinterpret_borrow<py::array>(object);
  const DType dtype = ag_dtype(array.dtype(), "from_numpy");
  if (!array.writeable())
    fail<ValueError>(
        "from_numpy: the array is read-only, and a tensor over it could be written; "
        "ag.tensor(a) copies it");
  const auto itemsize = static_cast<int64_t>(array.itemsize());
  Shape shape, strides;
  for (py::ssize_t d = 0; d < array.ndim(); ++d) {
    shape.push_back(array.shape(d));
    const int64_t stride = array.strides(d);
    if (stride < 0 || stride % itemsize != 0)
      fail<ValueError>("from_numpy: the stride of ", stride, " bytes of dim ", d,
          " is negative or not a whole number of elements (", itemsize,
          " bytes); ag.tensor(a) copies the array");
    strides.push_back(stride / itemsize);
  }
  std::size_t nbytes = 0;  // from the first element to the end of the last
  if (array.size() > 0) {
    int64_t last = 0;
    for (std::size_t d = 0; d < shape.size(); ++d) last += (shape[d] - 1) * strides[d];
    nbytes = static_cast<std::size_t>((last + 1) * itemsize);
  }
  auto keep = held(array);
  return from_blob(
      array.mutable_data(), nbytes, shape, strides, dtype, [keep]() mutable { keep.reset(); });
}

// A NumPy array over t's elements; `owner` (the Python tensor) is its base and keeps them alive.
py::array to_numpy(const Tensor& t, py::handle owner) {
  if (t.requires_grad())
    fail<AutogradError>(
        "numpy: can't call numpy() on a tensor that requires grad; use "
        "t.detach().numpy()");
  std::vector<py::ssize_t> shape(t.shape().begin(), t.shape().end());
  std::vector<py::ssize_t> strides;
  bool aliased = false;  // a stride-0 dim (expand): many elements are one location
  for (std::size_t d = 0; d < t.shape().size(); ++d) {
    strides.push_back(static_cast<py::ssize_t>(t.strides()[d] * dtype_size(t.dtype())));
    aliased = aliased || (t.strides()[d] == 0 && t.shape()[d] > 1);
  }
  py::array out(numpy_dtype(t.dtype()), shape, strides, t.raw_data(), owner);
  if (aliased) out.attr("flags").attr("writeable") = false;  // as np.broadcast_to's
  return out;
}

// A copy of `array`'s values in `dtype` (ag.tensor): the values must be exact in it, as
// ag::tensor requires — 0.5 into int64, or 2^24 + 1 into float32, is a ValueError.
Tensor tensor_from_array(const py::array& array, DType dtype) {
  const DType source = ag_dtype(array.dtype(), "tensor");
  Shape shape(array.shape(), array.shape() + array.ndim());
  // A C-ordered copy of the values in their own dtype, then ag's exact conversion.
  auto values = [&]<typename T>() {
    auto c = py::array_t<T, py::array::c_style | py::array::forcecast>::ensure(array);
    if (!c) throw py::error_already_set();
    return std::vector<T>(c.data(), c.data() + c.size());
  };
  switch (source) {
    case DType::float32:
      return tensor(values.operator()<float>(), shape, dtype);
    case DType::float64:
      return tensor(values.operator()<double>(), shape, dtype);
    case DType::int64:
      return tensor(values.operator()<int64_t>(), shape, dtype);
    case DType::bool_: {
      auto c = py::array_t<bool, py::array::c_style | py::array::forcecast>::ensure(array);
      if (!c) throw py::error_already_set();
      return tensor(std::vector<bool>(c.data(), c.data() + c.size()), shape, dtype);
    }
  }
  fail<ValueError>("tensor: unknown dtype");
}

// t.tolist(): nested lists of Python numbers, as PyTorch's.
py::object to_list(const Tensor& t) {
  auto element = [&](int64_t flat, const std::vector<double>* f, const std::vector<int64_t>* i,
                     const std::vector<bool>* b) -> py::object {
    if (f) return py::float_((*f)[flat]);
    if (i) return py::int_((*i)[flat]);
    return py::bool_((*b)[flat]);
  };
  std::vector<double> f;
  std::vector<int64_t> i;
  std::vector<bool> b;
  const std::vector<double>* fp = nullptr;
  const std::vector<int64_t>* ip = nullptr;
  const std::vector<bool>* bp = nullptr;
  if (is_floating_point(t.dtype())) {
    f = t.to_vector<double>();
    fp = &f;
  } else if (t.dtype() == DType::int64) {
    i = t.to_vector<int64_t>();
    ip = &i;
  } else {
    b = t.to_vector<bool>();
    bp = &b;
  }
  const Shape& shape = t.shape();
  int64_t next = 0;
  std::function<py::object(std::size_t)> build = [&](std::size_t d) -> py::object {
    if (d == shape.size()) return element(next++, fp, ip, bp);
    py::list out;
    for (int64_t k = 0; k < shape[d]; ++k) out.append(build(d + 1));
    return out;
  };
  return build(0);
}

// ---- indexing ---------------------------------------------------------------------------------

std::optional<int64_t> slice_end(py::handle v) {
  if (v.is_none()) return std::nullopt;
  return v.cast<int64_t>();
}

// Python's index (an int, a slice, None, ..., or a tuple of them) as ag's entries; lists, ranges
// and NumPy arrays of ints and integer tensors among them are advanced indices (get_item, below).
bool is_advanced(py::handle item) {
  return py::isinstance<Tensor>(item) || py::isinstance<py::list>(item) ||
         PyObject_TypeCheck(item.ptr(), &PyRange_Type) ||  // makemore's probs[range(n), ys]
         is_numpy_array(item);
}

TensorIndex entry(py::handle item) {
  if (py::isinstance<py::bool_>(item))
    throw py::type_error("index: a bool index (x[True]) is not supported");
  if (py::isinstance<py::int_>(item)) return TensorIndex(item.cast<int64_t>());
  if (py::isinstance<py::slice>(item)) {
    auto s = py::reinterpret_borrow<py::slice>(item);
    const auto step = slice_end(s.attr("step"));
    return TensorIndex(
        Slice(slice_end(s.attr("start")), slice_end(s.attr("stop")), step.value_or(1)));
  }
  if (item.is_none()) return TensorIndex(None);
  if (item.ptr() == Py_Ellipsis) return TensorIndex(Ellipsis);
  if (py::hasattr(item, "__index__")) return TensorIndex(item.attr("__index__")().cast<int64_t>());
  throw py::type_error("index: " + py_repr(item) +
                       " is not an index ag takes (ints, slices, None, ..., lists and tensors of "
                       "ints)");
}

const char* const kMaskRefused =
    "index: a bool mask (x[mask]) is not supported: its result's shape depends on the values; "
    "use ag.where(mask, x, other) or masked_fill (x[mask] = value is supported)";

// A list index, nested or not ([2, 0], makemore's [[1], [2]]), as an int64 tensor of its shape:
// through NumPy's asarray, which ag.tensor uses too. A list of bools is a mask in PyTorch (refused
// here), and one of floats no index.
Tensor list_index(py::handle list) {
  const py::array array = py::module_::import("numpy").attr("asarray")(list);
  const char kind = array.dtype().kind();
  Shape shape(array.shape(), array.shape() + array.ndim());
  if (kind == 'b') throw py::type_error(kMaskRefused);
  if (array.size() == 0) return empty(shape, DType::int64);  // [] (NumPy's float64)
  if (kind != 'i' && kind != 'u')
    throw py::type_error("index: a list index must hold ints, got " + py_repr(list));
  const auto ints = py::array_t<int64_t, py::array::c_style | py::array::forcecast>::ensure(array);
  if (!ints) throw py::error_already_set();
  return tensor(std::vector<int64_t>(ints.data(), ints.data() + ints.size())).reshape(shape);
}

// An advanced index — a list of ints or an integer tensor of any shape — along a dim of `size`:
// its ids as int64, a negative one counted from the end, as in PyTorch's indexing (index_select
// takes none), and one out of range Python's IndexError.
Tensor advanced_ids(py::handle item, int64_t size) {
  const Tensor index = py::isinstance<Tensor>(item) ? item.cast<Tensor>() : list_index(item);
  if (index.dtype() == DType::bool_) throw py::type_error(kMaskRefused);
  std::vector<int64_t> ids;
  if (index.dtype() == DType::int64) {
    ids = index.to_vector<int64_t>();
  } else {  // floating ids holding integers, as index_select takes them
    for (const double v : index.to_vector<double>()) {
      if (v != std::floor(v))
        throw py::type_error(
            "index: an index tensor must hold integers, got " + py_repr(py::float_(v)));
      ids.push_back(static_cast<int64_t>(v));
    }
  }
  for (int64_t& id : ids) {
    if (id < -size || id >= size)
      throw py::index_error("index " + std::to_string(id) + " is out of range for a dim of size " +
                            std::to_string(size));
    if (id < 0) id += size;
  }
  return tensor(ids).reshape(index.shape());
}

// Python's index split into its entries (a tuple's items, or the one key).
std::vector<py::handle> index_items(py::handle key) {
  std::vector<py::handle> items;
  if (py::isinstance<py::tuple>(key))
    for (py::handle item : key) items.push_back(item);
  else
    items.push_back(key);
  return items;
}

// x[..., ids_1, ..., ids_k, ...] with the advanced indices side by side, as PyTorch's: the basic
// entries first (the advanced ones as ':'), giving `view`; then the k dims the advanced ones stand
// for are picked together: ids broadcast to one shape S, element s of the result taking
// x[..., ids_1[s], ..., ids_k[s], ...]. The k dims of the view are merged into one (`merged_shape`)
// and read at the merged ids Σ_j ids_j · (the product of the sizes after dim j); the merged dim
// then splits into S, in the place the k dims had (`result_shape`). out_dim: the first of the k
// dims in the view.
struct AdvancedIndex {
  Tensor view;                  // t indexed by the basic entries
  int64_t out_dim = 0;          // where the k dims start in the view
  int64_t count = 0;            // k
  Shape merged_shape;           // the view's shape with the k dims as one
  std::vector<int64_t> merged;  // the merged ids, one per element of S
  Shape result_shape;           // the view's shape with the k dims replaced by S
};

std::optional<AdvancedIndex> advanced_index(const Tensor& t, const std::vector<py::handle>& items) {
  // The advanced indices (lists, ranges, integer tensors): side by side, as [first, last).
  std::size_t first = items.size(), last = items.size();
  for (std::size_t k = 0; k < items.size(); ++k) {
    if (!is_advanced(items[k])) continue;
    if (first == items.size()) first = k;
    if (last != items.size() && last != k)
      throw py::type_error(
          "index: list or tensor indices apart from each other (x[[0, 1], :, [2, 3]]) are not "
          "supported (PyTorch moves their dims first); index them one at a time");
    last = k + 1;
  }
  if (first == items.size()) return std::nullopt;
  AdvancedIndex plan;
  std::vector<TensorIndex> basic;
  for (std::size_t k = 0; k < items.size(); ++k)
    basic.push_back(k >= first && k < last ? TensorIndex(Slice()) : entry(items[k]));
  plan.view = t.index(basic);
  // in_dim: the first of the k dims in t. An int takes a dim of t and leaves none, None adds one,
  // and ... stands for the dims no other entry takes.
  int64_t takes = 0;  // the dims of t that the entries take
  for (py::handle item : items)
    if (!item.is_none() && item.ptr() != Py_Ellipsis) ++takes;
  int64_t in_dim = 0;
  for (std::size_t k = 0; k < first; ++k) {
    const py::handle item = items[k];
    if (item.is_none()) {
      ++plan.out_dim;
    } else if (item.ptr() == Py_Ellipsis) {
      in_dim += t.dim() - takes;
      plan.out_dim += t.dim() - takes;
    } else if (py::isinstance<py::slice>(item)) {
      ++in_dim;
      ++plan.out_dim;
    } else {  // an int
      ++in_dim;
    }
  }
  plan.count = static_cast<int64_t>(last - first);
  const int64_t count = plan.count;
  std::vector<Tensor> ids;  // each advanced index's ids, wrapped
  Shape S;                  // their broadcast shape
  for (int64_t j = 0; j < count; ++j) {
    ids.push_back(advanced_ids(items[first + static_cast<std::size_t>(j)], t.shape()[in_dim + j]));
    S = j == 0 ? ids.back().shape() : broadcast_shapes(S, ids.back().shape(), "index");
  }
  plan.merged.assign(static_cast<std::size_t>(numel(S)), 0);  // Σ_j ids_j · stride_j
  int64_t stride = 1;
  for (int64_t j = count; j-- > 0;) {
    const std::vector<int64_t> column = ids[j].expand(S).to_vector<int64_t>();
    for (std::size_t e = 0; e < plan.merged.size(); ++e) plan.merged[e] += column[e] * stride;
    stride *= t.shape()[in_dim + j];
  }
  const Shape& view_shape = plan.view.shape();
  const auto out_dim = static_cast<std::ptrdiff_t>(plan.out_dim);
  plan.merged_shape.assign(view_shape.begin(), view_shape.begin() + out_dim);
  plan.merged_shape.push_back(stride);  // the k dims as one
  plan.merged_shape.insert(
      plan.merged_shape.end(), view_shape.begin() + out_dim + count, view_shape.end());
  plan.result_shape.assign(view_shape.begin(), view_shape.begin() + out_dim);
  plan.result_shape.insert(plan.result_shape.end(), S.begin(), S.end());
  plan.result_shape.insert(
      plan.result_shape.end(), view_shape.begin() + out_dim + count, view_shape.end());
  return plan;
}

Tensor get_item(const Tensor& t, py::handle key) {
  const std::vector<py::handle> items = index_items(key);
  // x[i] past the end of dim 0 is Python's IndexError, as PyTorch's: it ends `for row in x`
  // and iter() over __getitem__ (the other entries' errors are ag's ShapeError).
  if (py::isinstance<py::int_>(key) && !py::isinstance<py::bool_>(key) && t.dim() > 0) {
    const int64_t i = key.cast<int64_t>(), size = t.shape()[0];
    if (i < -size || i >= size)
      throw py::index_error("index " + std::to_string(i) + " is out of range for dim 0 of size " +
                            std::to_string(size) + " (shape " + py_repr(shape_tuple(t.shape())) +
                            ")");
  }
  const std::optional<AdvancedIndex> plan = advanced_index(t, items);
  if (!plan) {
    std::vector<TensorIndex> basic;
    for (py::handle item : items) basic.push_back(entry(item));
    return t.index(basic);
  }
  // The k dims merged into one (reshape: a view where the strides allow, else a copy) and
  // index_select at the merged ids; then the merged dim split into S.
  const Tensor picked =
      index_select(reshape(plan->view, plan->merged_shape), plan->out_dim, plan->merged);
  return reshape(picked, plan->result_shape);
}

// x[mask] = value with a bool mask of x's shape, or of its leading dims: the elements where the
// mask holds take the value (a number or a one-element tensor), as PyTorch's — nanoGPT's top-k
// sampling, logits[logits < v[:, [-1]]] = -float('Inf'). In the graph (updates_in_graph), x
// takes where(mask, value, x): the gradient reaches the value where the mask holds, x elsewhere.
void set_masked(const Tensor& t, const Tensor& mask, py::handle value) {
  const Shape& shape = t.shape();
  if (mask.dim() > t.dim() || !std::equal(mask.shape().begin(), mask.shape().end(), shape.begin()))
    throw py::index_error("index: the mask of shape " + py_repr(shape_tuple(mask.shape())) +
                          " does not match the leading dims of the indexed tensor of shape " +
                          py_repr(shape_tuple(shape)));
  if (py::isinstance<Tensor>(value) && value.cast<const Tensor&>().numel() != 1)
    throw py::type_error(
        "x[mask] = value: the value must be a number or a one-element tensor, got shape " +
        py_repr(shape_tuple(value.cast<const Tensor&>().shape())));
  Tensor leading = mask;  // (*mask.shape, 1, ..., 1): broadcast over x's other dims
  while (leading.dim() < t.dim()) leading = unsqueeze(leading, -1);
  if (updates_in_graph(t, value)) {
    const Tensor fill = py::isinstance<Tensor>(value)
                            ? reshape(value.cast<Tensor>(), {})
                            : scalar_tensor(value.cast<double>(), t.dtype());
    update_in_graph(t, "masked_fill_",
        [&](const Tensor& before) { return where(leading, fill.to(before.dtype()), before); });
    return;
  }
  const double v =
      py::isinstance<Tensor>(value) ? value.cast<const Tensor&>().item() : value.cast<double>();
  Tensor filled;
  {
    NoGradGuard no_grad;  // the new values; writing them is the update below
    filled = masked_fill(t, leading, v);
  }
  t.copy_(filled);
}

// x[index] = value in the graph (updates_in_graph), as PyTorch's differentiable index_put_: x
// takes the recorded
//   where(kept, x, written)
// kept: the elements of x that x[index] does not name; written: the value, broadcast to
// x[index]'s shape, at the elements it names (where an index names one twice, its last value).
// The gradient reaches x where it was kept and the value where it was written — makemore's
// dC[ix] += demb[k, j] in grad mode. The elements x[index] names are read through the index from
// a tensor of x's positions.
void set_item_in_graph(const Tensor& t, py::handle key, py::handle value) {
  update_in_graph(t, "index_put_", [&](const Tensor& before) {
    const DType dtype = before.dtype();
    const int64_t n = before.numel();
    const Tensor positions =  // x[index]'s shape: the position in x of each element named
        get_item(reshape(arange(0, static_cast<double>(n), 1, DType::int64), before.shape()), key);
    const std::vector<int64_t> named = positions.to_vector<int64_t>();
    const auto count = static_cast<int64_t>(named.size());
    // per element of x: the element of the value written there, or `count` where none is
    std::vector<int64_t> source(static_cast<std::size_t>(n), count);
    for (int64_t e = 0; e < count; ++e) source[static_cast<std::size_t>(named[e])] = e;
    const Tensor given = py::isinstance<Tensor>(value) ? value.cast<Tensor>()
                                                       : scalar_tensor(value.cast<double>(), dtype);
    if (given.dtype() != dtype)  // (as copy_ refuses them outside the graph)
      fail<DTypeError>("index_put_: the value's dtype ", dtype_name(given.dtype()),
          " is not the tensor's ", dtype_name(dtype), " (shapes ", shape_str(given.shape()),
          " and ", shape_str(before.shape()), "); convert one of them first");
    const Tensor values =  // (count,)
        reshape(contiguous(given.expand(positions.shape())), {count});
    const Tensor padded = concat({values, zeros({1}, dtype)});  // (count + 1,): a 0 for the kept
    const Tensor written = reshape(index_select(padded, 0, source), before.shape());
    const Tensor kept = reshape(eq(tensor(source), static_cast<double>(count)), before.shape());
    return where(kept, before, written);
  });
}

// x[..., ids, ...] = value with advanced indices, as PyTorch's index_put_: the value broadcasts to
// the shape x[..., ids, ...] has, and element s of it is written at x[..., ids[s], ...] (where ids
// repeat, the last write stays) — makemore's dlogprobs[range(n), Yb] = -1.0/n, and
// dC[ix] += demb[k, j], which Python runs as x[ix] = x[ix] + value.
void set_advanced(const Tensor& t, const AdvancedIndex& plan, py::handle value) {
  const int64_t dim = plan.out_dim, count = plan.count;
  // x[..., ids_1[s], ..., ids_k[s], ...] for the merged id Σ_j ids_j[s] · stride_j: a view of t
  // (selecting the k dims one by one, so any layout of t takes the write)
  auto element = [&](int64_t merged) {
    Tensor out = plan.view;
    for (int64_t j = count; j-- > 0;) {  // the last of the k dims varies fastest
      const int64_t size = plan.view.size(dim + j);
      out = out.select(dim + j, merged % size);
      merged /= size;
    }
    return out;
  };
  if (!py::isinstance<Tensor>(value)) {
    const double v = value.cast<double>();
    for (const int64_t id : plan.merged) element(id).fill_(v);
    return;
  }
  const Tensor source = value.cast<Tensor>();
  Shape picked_shape = plan.merged_shape;  // the result's shape with S as one dim
  picked_shape[static_cast<std::size_t>(dim)] = static_cast<int64_t>(plan.merged.size());
  Tensor rows;  // (..., |S|, ...): the value broadcast to x[index]'s shape, S as one dim
  {
    NoGradGuard no_grad;
    rows = reshape(contiguous(source.expand(plan.result_shape)), picked_shape);
    if (rows.shares_storage(t)) rows = rows.clone();  // (x[[1, 0]] = x[:2] reads what it writes)
  }
  for (std::size_t e = 0; e < plan.merged.size(); ++e)
    element(plan.merged[e]).copy_(rows.select(dim, static_cast<int64_t>(e)));
}

// x[index] = value: written through the view of x the index names, or element by element for list
// and tensor indices; in the graph (x or the value requires grad, in grad mode), recorded.
void set_item(const Tensor& t, py::handle key, py::handle value) {
  if (py::isinstance<Tensor>(key) && key.cast<Tensor>().dtype() == DType::bool_)
    return set_masked(t, key.cast<Tensor>(), value);
  if (updates_in_graph(t, value)) return set_item_in_graph(t, key, value);
  const std::vector<py::handle> items = index_items(key);
  if (const std::optional<AdvancedIndex> plan = advanced_index(t, items))
    return set_advanced(t, *plan, value);
  std::vector<TensorIndex> basic;
  for (py::handle item : items) basic.push_back(entry(item));
  const Tensor target = t.index(basic);
  if (py::isinstance<Tensor>(value)) {
    target.copy_(value.cast<Tensor>());
  } else {
    target.fill_(value.cast<double>());
  }
}

// ---- hooks ------------------------------------------------------------------------------------

GradHook python_grad_hook(py::function fn) {
  auto function = held(std::move(fn));
  return [function](const Tensor& grad) -> Tensor {
    py::gil_scoped_acquire gil;
    py::object result = (*function)(grad);
    if (result.is_none()) return Tensor();
    return result.cast<Tensor>();
  };
}

}  // namespace

// ---- shared helpers (bindings.h) ----------------------------------------------------------------

Shape to_shape(py::handle value, const char* op) {
  if (py::isinstance<py::int_>(value) && !py::isinstance<py::bool_>(value))
    return {value.cast<int64_t>()};
  if (py::isinstance<py::sequence>(value) && !py::isinstance<py::str>(value)) {
    Shape shape;
    for (py::handle item : value) {
      if (!py::isinstance<py::int_>(item) || py::isinstance<py::bool_>(item))
        throw py::type_error(std::string(op) + ": a size must be an int, got " + py_repr(item) +
                             " in " + py_repr(value));
      shape.push_back(item.cast<int64_t>());
    }
    return shape;
  }
  throw py::type_error(
      std::string(op) + ": a shape is an int or a sequence of ints, got " + py_repr(value));
}

Shape shape_from_args(const py::args& args, const char* op) {
  if (args.size() == 1 && !py::isinstance<py::int_>(args[0])) return to_shape(args[0], op);
  return to_shape(args, op);
}

py::object tensor_or_none(const Tensor& t) { return t.defined() ? py::cast(t) : py::none(); }

Generator& generator_of(py::handle generator, const char* op) {
  if (generator.is_none()) return default_generator();
  if (!py::isinstance<Generator>(generator))
    throw py::type_error(
        std::string(op) + ": generator must be an ag.Generator, got " + py_repr(generator));
  return generator.cast<Generator&>();
}

void bind_tensor(py::module_& m) {
  // ---- dtypes: ag.float32, ag.float64, ag.int64, ag.bool (and PyTorch's aliases) ---------------
  py::enum_<DType> dtype(m, "dtype", "A tensor's element type, as torch.dtype.");
  dtype.value("float32", DType::float32)
      .value("float64", DType::float64)
      .value("int64", DType::int64)
      .value("bool", DType::bool_)
      .def_property_readonly("is_floating_point", [](DType d) { return is_floating_point(d); })
      .def_property_readonly("itemsize", [](DType d) { return dtype_size(d); });
  dtype.attr("__module__") = "ag";
  // (enum_ makes its own __repr__ and __str__; these replace them: ag.float32, as torch.float32)
  auto dtype_repr = [](DType d) { return std::string("ag.") + dtype_name(d); };
  dtype.attr("__repr__") = py::cpp_function(dtype_repr, py::is_method(dtype));
  dtype.attr("__str__") = py::cpp_function(dtype_repr, py::is_method(dtype));
  // One Python object per dtype, which t.dtype returns: `t.dtype is ag.float32` holds, as in PyTorch.
  for (DType d : {DType::float32, DType::float64, DType::int64, DType::bool_})
    dtype_objects()[static_cast<std::size_t>(d)] = py::cast(d);
  m.attr("float32") = dtype_object(DType::float32);
  m.attr("float64") = dtype_object(DType::float64);
  m.attr("int64") = dtype_object(DType::int64);
  m.attr("bool") = dtype_object(DType::bool_);
  m.attr("float") = dtype_object(DType::float32);
  m.attr("double") = dtype_object(DType::float64);
  m.attr("long") = dtype_object(DType::int64);

  // ---- the Tensor class -------------------------------------------------------------------------
  py::class_<Tensor> cls(m, "Tensor", "An n-dimensional array with reverse-mode autograd.");
  cls.attr("__module__") = "ag";  // ag.Tensor, as Python users read it
  cls.def_property_readonly("_shape", [](const Tensor& t) { return shape_tuple(t.shape()); })
      .def(
          "stride",
          [](const Tensor& t, std::optional<int64_t> d) -> py::object {
            if (d) return py::int_(t.strides()[wrap_dim(*d, t.dim(), "stride")]);
            return shape_tuple(t.strides());
          },
          py::arg("dim") = py::none())
      .def_property_readonly("dtype", [](const Tensor& t) { return dtype_object(t.dtype()); })
      .def_property_readonly("ndim", &Tensor::dim)
      .def("dim", &Tensor::dim)
      .def("numel", &Tensor::numel)
      .def("nelement", &Tensor::numel)
      .def("element_size", [](const Tensor& t) { return dtype_size(t.dtype()); })
      .def("is_contiguous", &Tensor::is_contiguous)
      .def("is_floating_point", [](const Tensor& t) { return is_floating_point(t.dtype()); })
      .def("storage_offset", &Tensor::offset)
      .def("data_ptr", [](const Tensor& t) { return reinterpret_cast<uintptr_t>(t.raw_data()); })
      .def("__len__",
          [](const Tensor& t) {
            if (t.dim() == 0) throw py::type_error("len() of a 0-d tensor");
            return t.shape()[0];
          })
      .def("__repr__", &Tensor::str)
      .def("__hash__", [](const Tensor& t) { return std::hash<const void*>()(t.identity()); })
      .def("is_same", &Tensor::is_same, "Whether two handles are one tensor (a tied parameter).")

      // ---- values ---------------------------------------------------------------------------------
      .def("item",
          [](const Tensor& t) -> py::object {
            if (t.numel() != 1)
              fail<ValueError>("item: a tensor with ", t.numel(),
                  " elements cannot be converted to a Python number");
            if (is_floating_point(t.dtype())) return py::float_(t.item<double>());
            if (t.dtype() == DType::int64) return py::int_(t.item<int64_t>());
            return py::bool_(t.item<bool>());
          })
      .def("tolist", &to_list)
      .def("__float__", [](const Tensor& t) { return t.item<double>(); })
      .def("__int__",
          [](const Tensor& t) -> py::object {
            if (!is_floating_point(t.dtype())) return py::int_(t.item<int64_t>());
            // Python's int(float): truncation, any size, and a ValueError or OverflowError for
            // NaN and the infinities (a C++ cast of those would be undefined)
            PyObject* integer = PyNumber_Long(py::float_(t.item<double>()).ptr());
            if (!integer) throw py::error_already_set();
            return py::reinterpret_steal<py::object>(integer);
          })
      .def("__index__",
          [](const Tensor& t) {
            if (t.dtype() != DType::int64 || t.numel() != 1)
              throw py::type_error("only a one-element int64 tensor can be an index");
            return t.item<int64_t>();
          })
      .def("__bool__",
          [](const Tensor& t) {
            if (t.numel() != 1)
              fail<ValueError>("bool: the truth value of a tensor with ", t.numel(),
                  " elements is ambiguous (use .any() or .all())");
            if (t.dtype() == DType::int64) return t.item<int64_t>() != 0;  // exact past 2^53
            return t.item<double>() != 0;  // (NaN is true, as Python's)
          })
      .def("numpy", [](py::object self) { return to_numpy(self.cast<const Tensor&>(), self); })
      .def(
          "__array__",
          [](py::object self, py::object dtype) -> py::object {
            py::array out = to_numpy(self.cast<const Tensor&>(), self);
            if (dtype.is_none()) return out;
            return out.attr("astype")(dtype);
          },
          py::arg("dtype") = py::none())

      // ---- indexing -------------------------------------------------------------------------------
      .def("__getitem__", [](const Tensor& t, py::handle key) { return get_item(t, key); })
      .def("__setitem__",
          [](const Tensor& t, py::handle key, py::handle value) { set_item(t, key, value); })

      // ---- autograd -------------------------------------------------------------------------------
      .def_property(
          "requires_grad", &Tensor::requires_grad, [](Tensor& t, bool on) { t.requires_grad_(on); })
      .def(
          "requires_grad_",
          [](py::object self, bool on) {
            self.cast<Tensor&>().requires_grad_(on);
            return self;
          },
          py::arg("requires_grad") = true)
      .def_property(
          "grad", [](const Tensor& t) { return tensor_or_none(t.grad()); },
          [](const Tensor& t, std::optional<Tensor> g) {
            if (g)
              t.set_grad(*g);
            else
              t.zero_grad();
          })
      .def_property_readonly("is_leaf", &Tensor::is_leaf)
      .def("retain_grad", &Tensor::retain_grad,
          "Keeps this op output's gradient in .grad after backward (a leaf keeps its own).")
      .def_property_readonly("retains_grad", &Tensor::retains_grad)
      .def_property_readonly(
          "grad_fn",
          [](const Tensor& t) -> py::object {
            if (!t.grad_fn()) return py::none();
            return py::str(t.grad_fn()->name());
          },
          "The name of the op that made the tensor (None for a leaf).")
      .def_property(
          "name", &Tensor::name, [](Tensor& t, std::string n) { t.set_name(std::move(n)); })
      .def_property_readonly("_version", &Tensor::version)
      .def(
          "backward",
          [](const Tensor& t, std::optional<Tensor> gradient, bool retain_graph) {
            py::gil_scoped_release release;  // hooks take the GIL back to run
            t.backward(gradient.value_or(Tensor()), retain_graph);
          },
          py::arg("gradient") = py::none(), py::arg("retain_graph") = false)
      .def("detach", &Tensor::detach)
      .def(
          "register_hook",
          [](const Tensor& t, py::function fn) { return t.register_hook(python_grad_hook(fn)); },
          "hook(grad) -> Tensor or None, run when the gradient of this tensor is complete.")
      .def("register_post_accumulate_grad_hook",
          [](const Tensor& t, py::function fn) {
            auto function = held(std::move(fn));
            return t.register_post_accumulate_grad_hook([function](const Tensor& leaf) {
              py::gil_scoped_acquire gil;
              (*function)(leaf);
            });
          })
      .def_property(
          "data", [](const Tensor& t) { return t.detach(); },
          [](const Tensor& t, const Tensor& source) { t.set_data(source); },
          "The same data without autograd; assigning points the tensor at another's data.")

      // ---- in-place updates (fill_ and zero_ not differentiable: under ag.no_grad(); copy_
      // recorded where the source requires grad) ------------------------------------------------
      .def("fill_",
          [](py::object self, double value) {
            self.cast<const Tensor&>().fill_(value);
            return self;
          })
      .def("zero_",
          [](py::object self) {
            self.cast<const Tensor&>().zero_();
            return self;
          })
      .def("copy_",
          [](py::object self, const Tensor& source) {
            const Tensor& x = self.cast<const Tensor&>();
            if (!updates_in_graph(x, py::cast(source))) {
              x.copy_(source);
              return self;
            }
            // recorded, as PyTorch's differentiable copy_: x takes a copy of the source,
            // broadcast to x's shape (its gradient reaches the source, none x's old value)
            if (source.dtype() != x.dtype())  // (as copy_ refuses them outside the graph)
              fail<DTypeError>("copy_: the source's dtype ", dtype_name(source.dtype()),
                  " is not the tensor's ", dtype_name(x.dtype()), " (shapes ",
                  shape_str(source.shape()), " and ", shape_str(x.shape()),
                  "); convert one of them first");
            update_in_graph(
                x, "copy_", [&](const Tensor&) { return clone(source.expand(x.shape())); });
            return self;
          })

      // ---- conversions ----------------------------------------------------------------------------
      .def("clone", &Tensor::clone)
      .def("contiguous", &Tensor::contiguous)
      .def("float", [](const Tensor& t) { return t.to(DType::float32); })
      .def("double", [](const Tensor& t) { return t.to(DType::float64); })
      .def("long", [](const Tensor& t) { return t.to(DType::int64); })
      .def("bool", [](const Tensor& t) { return t.to(DType::bool_); })
      .def("_to_dtype", [](const Tensor& t, DType d) { return t.to(d); });

  py::class_<HookHandle>(
      m, "RemovableHandle", "What register_hook returns: remove() drops the hook.")
      .def("remove", &HookHandle::remove)
      .def_property_readonly("active", &HookHandle::active);

  // ---- creation -----------------------------------------------------------------------------------
  m.def("from_numpy", &from_numpy, py::arg("array"),
      "A tensor over the array's memory (no copy); the tensor keeps the array alive.");
  m.def("_tensor_from_array", &tensor_from_array, py::arg("array"), py::arg("dtype"));
  auto creation = [&m](const char* name, auto make) {
    m.def(
        name,
        [make, name](py::args size, DType dtype, bool requires_grad) {
          Tensor t = make(shape_from_args(size, name), dtype);
          if (requires_grad) t.requires_grad_();
          return t;
        },
        py::kw_only(), py::arg("dtype") = DType::float32, py::arg("requires_grad") = false);
  };
  creation("zeros", [](const Shape& s, DType d) { return zeros(s, d); });
  creation("ones", [](const Shape& s, DType d) { return ones(s, d); });
  creation("empty", [](const Shape& s, DType d) { return empty(s, d); });
  // rand and randn take generator= too (makemore's torch.randn((27, 27), generator=g)).
  auto random_creation = [&m](const char* name, auto make) {
    m.def(
        name,
        [make, name](py::args size, py::handle generator, DType dtype, bool requires_grad) {
          Tensor t = make(shape_from_args(size, name), generator_of(generator, name), dtype);
          if (requires_grad) t.requires_grad_();
          return t;
        },
        py::kw_only(), py::arg("generator") = py::none(), py::arg("dtype") = DType::float32,
        py::arg("requires_grad") = false);
  };
  random_creation("rand", [](const Shape& s, Generator& g, DType d) { return rand(s, g, d); });
  random_creation("randn", [](const Shape& s, Generator& g, DType d) { return randn(s, g, d); });
  m.def(
      "full",
      [](py::handle size, double value, DType dtype, bool requires_grad) {
        Tensor t = full(to_shape(size, "full"), value, dtype);
        if (requires_grad) t.requires_grad_();
        return t;
      },
      py::arg("size"), py::arg("fill_value"), py::kw_only(), py::arg("dtype") = DType::float32,
      py::arg("requires_grad") = false);
  m.def("zeros_like", &zeros_like, py::arg("input"));
  m.def("ones_like", &ones_like, py::arg("input"));
  m.def("full_like", &full_like, py::arg("input"), py::arg("fill_value"));
  m.def(
      "rand_like", [](const Tensor& t) { return rand(t.shape(), t.dtype()); }, py::arg("input"));
  m.def(
      "randn_like", [](const Tensor& t) { return randn(t.shape(), t.dtype()); }, py::arg("input"));
  m.def(
      "eye",
      [](int64_t n, std::optional<int64_t> cols, DType dtype) { return eye(n, cols, dtype); },
      py::arg("n"), py::arg("m") = py::none(), py::kw_only(), py::arg("dtype") = DType::float32);
  m.def("linspace", &linspace, py::arg("start"), py::arg("end"), py::arg("steps"), py::kw_only(),
      py::arg("dtype") = DType::float32);
  m.def(
      "_arange",
      [](double start, double end, double step, DType dtype) {
        return arange(start, end, step, dtype);
      },
      py::arg("start"), py::arg("end"), py::arg("step"), py::arg("dtype"));
  m.def(
      "randint",
      [](int64_t low, int64_t high, py::handle size, py::handle generator, DType dtype) {
        return randint(
            low, high, to_shape(size, "randint"), generator_of(generator, "randint"), dtype);
      },
      py::arg("low"), py::arg("high"), py::arg("size"), py::kw_only(),
      py::arg("generator") = py::none(), py::arg("dtype") = DType::int64);
  m.def(
      "randperm",
      [](int64_t n, py::handle generator, DType dtype) {
        return randperm(n, generator_of(generator, "randperm"), dtype);
      },
      py::arg("n"), py::kw_only(), py::arg("generator") = py::none(),
      py::arg("dtype") = DType::int64);
  m.def("scalar_tensor", &scalar_tensor, py::arg("value"), py::kw_only(),
      py::arg("dtype") = DType::float32);

  // ---- global state: seeds, grad mode, threads -------------------------------------------------
  m.def("manual_seed", &manual_seed, py::arg("seed"), "Seeds ag's default generator.");
  // torch.Generator: a stream of its own, for generator= (makemore's
  // g = torch.Generator().manual_seed(2147483647)). Its state is two integers, the seed and the
  // Philox blocks used (autograd/generator.h); get_state() gives them as an int64 tensor of 2
  // (their bits), which set_state() takes back.
  py::class_<Generator>(m, "Generator", "A random number generator of its own (torch.Generator).")
      .def(py::init([](py::handle device) {
        const std::string name =
            py::str(py::hasattr(device, "type") ? device.attr("type") : device).cast<std::string>();
        if (name.rfind("cpu", 0) != 0)
          throw std::runtime_error("Generator: ag computes on the CPU only, not on '" + name + "'");
        return Generator(0);
      }),
          py::arg("device") = "cpu")
      .def(
          "manual_seed",
          [](py::object self, uint64_t seed) {
            self.cast<Generator&>().manual_seed(seed);
            return self;  // as torch.Generator.manual_seed, for g = Generator().manual_seed(s)
          },
          py::arg("seed"))
      .def("initial_seed", &Generator::seed)
      .def("get_state",
          [](const Generator& g) {
            const GeneratorState s = g.state();
            return tensor(
                std::vector<int64_t>{static_cast<int64_t>(s.seed), static_cast<int64_t>(s.offset)});
          })
      .def(
          "set_state",
          [](Generator& g, const Tensor& state) {
            if (state.dtype() != DType::int64 || state.shape() != Shape{2})
              fail<ValueError>(
                  "Generator.set_state: a state is the int64 tensor of 2 that "
                  "get_state() gives, got ",
                  dtype_name(state.dtype()), " of shape ", shape_str(state.shape()));
            const std::vector<int64_t> v = state.to_vector<int64_t>();
            g.set_state({static_cast<uint64_t>(v[0]), static_cast<uint64_t>(v[1])});
          },
          py::arg("new_state"));
  m.def("is_grad_enabled", &GradMode::is_enabled);
  m.def("_set_grad_enabled", &GradMode::set_enabled, py::arg("enabled"));
  m.def("set_num_threads", &set_num_threads, py::arg("threads"));
  m.def("get_num_threads", &get_num_threads);
}

}  // namespace ag::python
