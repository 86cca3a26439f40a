// The ops of autograd/ops.h from Python, under PyTorch's names: each is a function ag.<op>(input,
// ...) and, where PyTorch has one, a Tensor method (x.<op>(...)); the operators + - * / @ ** and
// the comparisons are Tensor's dunder methods (docs/python.md).
//
// Python scalars follow PyTorch: a Python int goes to ag's integer-scalar overloads (an int64
// tensor + 1 stays int64), a Python float to the double ones (an int64 tensor + 1.5 is float32).
// Where ag composes what PyTorch has as one op (scalar ** tensor, flatten, .T, chunk, a K-dim
// cross_entropy) the composition is written here with a comment. The long ops (matmul, linear,
// softmax, layer_norm, rms_norm, rotary_embedding, cross_entropy, attention) release the GIL while
// they compute. What PyTorch has not (rotary_embedding, alibi_slopes, alibi_bias, ag.attention's
// valid lengths and ALiBi slopes) keeps ag's C++ names and arguments.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "autograd/autograd.h"
#include "autograd/error.h"
#include "autograd/ops.h"
#include "nn/positions.h"
#include "python/src/bindings.h"

namespace ag::python {

namespace {

// Lets other Python threads run while a long op computes; the arguments are converted before.
using ReleaseGil = py::call_guard<py::gil_scoped_release>;

// ---- Python operands: a tensor, a Python int or a Python float ---------------------------------

struct Operand {
  enum Kind { tensor, integer, floating, unsupported } kind = unsupported;
  Tensor t;
  int64_t i = 0;
  double d = 0;
};

// What `value` is as the other operand of `x` (x + value, ag.add(x, value)). A bool is the
// integer 0 or 1, a NumPy scalar is its Python number; an int beyond int64 is a float for a
// floating x and a ValueError naming `op` otherwise (it would not fit x's dtype).
Operand operand(py::handle value, const Tensor& x, const char* op) {
  Operand out;
  if (py::isinstance<Tensor>(value)) {
    out.kind = Operand::tensor;
    out.t = value.cast<Tensor>();
  } else if (PyLong_Check(value.ptr()) || (!is_numpy_array(value) && !PyFloat_Check(value.ptr()) &&
                                              py::hasattr(value, "__index__"))) {
    py::int_ integer = py::reinterpret_steal<py::int_>(PyNumber_Index(value.ptr()));
    if (!integer) throw py::error_already_set();
    int overflow = 0;
    const long long v = PyLong_AsLongLongAndOverflow(integer.ptr(), &overflow);
    if (overflow == 0) {
      out.kind = Operand::integer;
      out.i = v;
    } else if (x.defined() && is_floating_point(x.dtype())) {
      out.kind = Operand::floating;
      out.d = PyLong_AsDouble(integer.ptr());
    } else {
      fail<ValueError>(op, ": the scalar ", py_repr(value), " is beyond int64's range");
    }
  } else if (PyFloat_Check(value.ptr()) ||
             (!is_numpy_array(value) && py::hasattr(value, "__float__"))) {
    out.kind = Operand::floating;
    out.d = value.cast<double>();
  }
  return out;
}

// A scalar as a 0-dim tensor beside `like` (where's and masked ops' scalar arguments): it takes
// like's dtype when its kind fits (an int with any number dtype, a float with a floating one), as
// PyTorch's scalars do; else int64 for an int, float32 for a float.
Tensor scalar_like(const Operand& s, const Tensor* like) {
  if (s.kind == Operand::integer) {
    if (like && like->dtype() != DType::bool_ && like->dtype() != DType::int64)
      return scalar_tensor(static_cast<double>(s.i), like->dtype());
    return tensor(std::vector<int64_t>{s.i}, Shape{}, DType::int64);
  }
  if (like && is_floating_point(like->dtype())) return scalar_tensor(s.d, like->dtype());
  return scalar_tensor(s.d, DType::float32);
}

// A tensor or a Python number as a tensor (ag.where(mask, x, 0.0)).
Tensor tensor_or_scalar(py::handle value, const Tensor* like, const char* op) {
  const Operand o = operand(value, like ? *like : Tensor(), op);
  if (o.kind == Operand::tensor) return o.t;
  if (o.kind == Operand::unsupported)
    throw py::type_error(
        std::string(op) + ": expected a tensor or a number, got " + py_repr(py::type::of(value)));
  return scalar_like(o, like);
}

// x ⊕ value for the operators: NotImplemented for a value of another type (Python then tries
// the other operand's method, or raises its TypeError).
template <class OnTensor, class OnInt, class OnDouble>
py::object binary(const Tensor& x, py::handle value, const char* op, OnTensor on_tensor,
    OnInt on_int, OnDouble on_double) {
  if (is_numpy_array(value))
    throw py::type_error(std::string(op) +
                         ": a NumPy array is not a tensor; convert it with ag.tensor(a) or "
                         "ag.from_numpy(a)");
  const Operand o = operand(value, x, op);
  switch (o.kind) {
    case Operand::tensor:
      return py::cast(on_tensor(x, o.t));
    case Operand::integer:
      return py::cast(on_int(x, o.i));
    case Operand::floating:
      return py::cast(on_double(x, o.d));
    case Operand::unsupported:
      break;
  }
  return py::reinterpret_borrow<py::object>(Py_NotImplemented);
}

// The comparisons: an int compares exactly with an int64 or bool tensor (as a 0-dim int64
// tensor: the double overload would round ints beyond 2^53).
template <class OnTensor, class OnDouble>
py::object compare(
    const Tensor& x, py::handle value, const char* op, OnTensor on_tensor, OnDouble on_double) {
  return binary(
      x, value, op, on_tensor,
      [&](const Tensor& a, int64_t i) {
        if (is_floating_point(a.dtype())) return on_double(a, static_cast<double>(i));
        return on_tensor(a, tensor(std::vector<int64_t>{i}, Shape{}, DType::int64));
      },
      on_double);
}

// The same, for the functions (ag.add(x, 2)): a TypeError instead of NotImplemented.
Tensor required(py::object result, py::handle value, const char* op) {
  if (result.is(py::reinterpret_borrow<py::object>(Py_NotImplemented)))
    throw py::type_error(
        std::string(op) + ": expected a tensor or a number, got " + py_repr(py::type::of(value)));
  return result.cast<Tensor>();
}

py::object add_op(const Tensor& x, py::handle y) {
  return binary(
      x, y, "add", [](const Tensor& a, const Tensor& b) { return add(a, b); },
      [](const Tensor& a, int64_t b) { return add(a, b); },
      [](const Tensor& a, double b) { return add(a, b); });
}
py::object sub_op(const Tensor& x, py::handle y) {
  return binary(
      x, y, "sub", [](const Tensor& a, const Tensor& b) { return sub(a, b); },
      [](const Tensor& a, int64_t b) { return sub(a, b); },
      [](const Tensor& a, double b) { return sub(a, b); });
}
py::object rsub_op(const Tensor& x, py::handle y) {  // y - x
  return binary(
      x, y, "sub", [](const Tensor& a, const Tensor& b) { return sub(b, a); },
      [](const Tensor& a, int64_t b) { return sub(b, a); },
      [](const Tensor& a, double b) { return sub(b, a); });
}
py::object mul_op(const Tensor& x, py::handle y) {
  return binary(
      x, y, "mul", [](const Tensor& a, const Tensor& b) { return mul(a, b); },
      [](const Tensor& a, int64_t b) { return mul(a, b); },
      [](const Tensor& a, double b) { return mul(a, b); });
}
// True division, as PyTorch's /: an int64 tensor / 2 is float32.
py::object div_op(const Tensor& x, py::handle y) {
  return binary(
      x, y, "div", [](const Tensor& a, const Tensor& b) { return div(a, b); },
      [](const Tensor& a, int64_t b) { return div(a, static_cast<double>(b)); },
      [](const Tensor& a, double b) { return div(a, b); });
}
py::object rdiv_op(const Tensor& x, py::handle y) {  // y / x
  return binary(
      x, y, "div", [](const Tensor& a, const Tensor& b) { return div(b, a); },
      [](const Tensor& a, int64_t b) { return div(static_cast<double>(b), a); },
      [](const Tensor& a, double b) { return div(b, a); });
}

// base ** x for a scalar base (torch.pow(10000, x), d2l's PositionalEncoding). ag has no such op:
// it is composed as exp(x · log(base)), whose gradient log(base) · base^x comes through exp and
// mul. A base ≤ 0 has no real log, and an int64 exponent would give int64 in PyTorch: both refused.
Tensor scalar_pow(double base, const Tensor& x) {
  if (!(base > 0))
    fail<ValueError>(
        "pow: a scalar base must be positive (ag computes base ** x as "
        "exp(x * log(base))), got ",
        base, " for an exponent of shape ", shape_str(x.shape()));
  if (!is_floating_point(x.dtype()))
    fail<DTypeError>("pow: a scalar base with an exponent of dtype ", dtype_name(x.dtype()),
        " would be ", dtype_name(x.dtype()),
        " in PyTorch; ag computes it in floating point: convert the exponent with .float()");
  return exp(mul(x, std::log(base)));
}

py::object pow_op(const Tensor& x, py::handle exponent) {
  auto tensor_exponent = [](const Tensor& a, const Tensor& b) -> Tensor {
    fail<DTypeError>("pow: a tensor exponent (shapes ", shape_str(a.shape()), " and ",
        shape_str(b.shape()),
        ") is not supported by ag; the exponent must be a number, or the base a number "
        "(ag.pow(10000, x))");
  };
  return binary(
      x, exponent, "pow", tensor_exponent,
      [](const Tensor& a, int64_t e) { return pow(a, static_cast<double>(e)); },
      [](const Tensor& a, double e) { return pow(a, e); });
}

// ---- in-place updates ---------------------------------------------------------------------------

// self ⊕= value, in place as PyTorch's: the result, computed out of place, is copied into self,
// which must be able to hold it (same shape, same dtype). In grad mode, where self or the value
// requires grad, the update is recorded instead (update_in_graph: self takes the result's
// data and op), as PyTorch's differentiable in-place ops — makemore's `self.out += self.bias` —
// or refused with an AutogradError where it cannot be (a parameter, a view): never a silent
// rebinding of the name to a new tensor, nor a lost gradient.
py::object update_in_place(py::object self, py::handle value, const char* op,
    py::object (*compute)(const Tensor&, py::handle)) {
  const Tensor& x = self.cast<const Tensor&>();
  if (updates_in_graph(x, value)) {
    update_in_graph(x, op, [&](const Tensor& before) {
      py::object result = compute(before, value);
      if (result.is(py::reinterpret_borrow<py::object>(Py_NotImplemented)))
        throw py::type_error(std::string(op) + ": unsupported operand type " +
                             py::type::of(value).attr("__name__").cast<std::string>());
      return result.cast<Tensor>();
    });
    return self;
  }
  py::object result = compute(x, value);
  if (result.is(py::reinterpret_borrow<py::object>(Py_NotImplemented))) return result;
  const Tensor& r = result.cast<const Tensor&>();
  check_in_place_result(x, r, op);
  x.copy_(r);
  return self;
}

// ---- dims ------------------------------------------------------------------------------------

// PyTorch's `dim` of a reduction: None or () for every dim, an int, or a tuple/list of ints.
Shape reduction_dims(const Tensor& x, py::handle dim, const char* op) {
  Shape dims;
  if (!dim.is_none()) dims = to_shape(dim, op);
  if (dims.empty())
    for (int64_t d = 0; d < x.dim(); ++d) dims.push_back(d);
  return dims;
}

// The reductions over the dims PyTorch's `dim` names; `all` reduces a tensor whole (0-dim).
template <class All, class Dims>
Tensor reduce(const Tensor& x, py::handle dim, bool keepdim, const char* op, All all, Dims dims) {
  if (dim.is_none() && !keepdim) return all(x);
  const Shape d = reduction_dims(x, dim, op);
  if (d.empty()) return keepdim ? x : all(x);  // a 0-dim x: nothing to reduce
  return dims(x, d, keepdim);
}

// torch.return_types: max/min along a dim and topk return (values, indices) namedtuples. The
// types live as long as the process (deliberately leaked: no destructor after the interpreter).
struct ReturnTypes {
  py::handle max, min, topk;
};
ReturnTypes return_types;

py::object values_indices(py::handle type, const ValuesIndices& r) {
  return type(r.values, r.indices);
}

int64_t checked_dim(py::handle dim, const char* op) {
  if (!py::isinstance<py::int_>(dim) || py::isinstance<py::bool_>(dim))
    throw py::type_error(
        std::string(op) + ": dim must be an int, got " + py_repr(dim) +
        (py::isinstance<py::sequence>(dim) ? " (for several dims use amax/amin)" : ""));
  return dim.cast<int64_t>();
}

// torch.max(x), torch.max(x, dim, keepdim) and torch.max(x, other) (= maximum), and min's.
py::object max_op(const Tensor& x, py::handle dim, bool keepdim) {
  if (py::isinstance<Tensor>(dim)) return py::cast(maximum(x, dim.cast<Tensor>()));
  if (dim.is_none()) return py::cast(max(x));
  return values_indices(return_types.max, max(x, checked_dim(dim, "max"), keepdim));
}
py::object min_op(const Tensor& x, py::handle dim, bool keepdim) {
  if (py::isinstance<Tensor>(dim)) return py::cast(minimum(x, dim.cast<Tensor>()));
  if (dim.is_none()) return py::cast(min(x));
  return values_indices(return_types.min, min(x, checked_dim(dim, "min"), keepdim));
}

// argmax over the flattened tensor when dim is None, as PyTorch's.
Tensor argmax_op(const Tensor& x, std::optional<int64_t> dim, bool keepdim) {
  if (dim) return argmax(x, *dim, keepdim);
  Tensor flat = argmax(reshape(x, {-1}), 0);
  return keepdim ? reshape(flat, Shape(x.dim(), 1)) : flat;
}
// argmin(x) = argmax(−x): the first smallest is the first largest of the negation.
Tensor argmin_op(const Tensor& x, std::optional<int64_t> dim, bool keepdim) {
  return argmax_op(neg(x.detach()), dim, keepdim);
}

// torch.var(x, dim, unbiased, keepdim, *, correction): correction 1 (unbiased, the default) or 0.
// PyTorch 1.13 also reads a lone bool as `unbiased` (x.var(False)).
Tensor var_op(const Tensor& x, py::handle dim_given, std::optional<bool> unbiased, bool keepdim,
    std::optional<int64_t> correction) {
  py::object dim = py::reinterpret_borrow<py::object>(dim_given);
  if (py::isinstance<py::bool_>(dim)) {
    if (unbiased) throw py::type_error("var: dim must be an int or a tuple of ints, not a bool");
    unbiased = dim.cast<bool>();
    dim = py::none();
  }
  if (unbiased && correction)
    throw py::type_error("var: give either unbiased or correction, not both");
  const int64_t c = correction.value_or(unbiased.value_or(true) ? 1 : 0);
  return reduce(
      x, dim, keepdim, "var",
      [c](const Tensor& t) {
        return c == 1 ? var(t) : var(t, reduction_dims(t, py::none(), "var"), c);
      },
      [c](const Tensor& t, const Shape& d, bool k) { return var(t, d, c, k); });
}

// ---- shapes ----------------------------------------------------------------------------------

// x.flatten(start_dim, end_dim): dims start..end merged into one, composed as a reshape.
Tensor flatten(const Tensor& x, int64_t start_dim, int64_t end_dim) {
  if (x.dim() == 0) return reshape(x, {1});
  const int64_t s = wrap_dim(start_dim, x.dim(), "flatten");
  const int64_t e = wrap_dim(end_dim, x.dim(), "flatten");
  if (s > e)
    fail<ShapeError>("flatten: start_dim ", start_dim, " comes after end_dim ", end_dim,
        " for a tensor of shape ", shape_str(x.shape()));
  Shape shape(x.shape().begin(), x.shape().begin() + s);
  shape.push_back(-1);
  shape.insert(shape.end(), x.shape().begin() + e + 1, x.shape().end());
  // -1 cannot be inferred when another dim is 0: give the merged size then.
  int64_t merged = 1;
  for (int64_t d = s; d <= e; ++d) merged *= x.shape()[d];
  shape[s] = merged;
  return reshape(x, shape);
}

// PyTorch's .T: the dims reversed (a permute).
Tensor reversed_dims(const Tensor& x) {
  Shape dims;
  for (int64_t d = x.dim() - 1; d >= 0; --d) dims.push_back(d);
  return permute(x, dims);
}

// x.t(): the transpose of a matrix; a tensor of fewer dims is itself.
Tensor matrix_t(const Tensor& x) {
  if (x.dim() > 2)
    fail<ShapeError>("t: expects a tensor with <= 2 dimensions, got shape ", shape_str(x.shape()),
        "; use transpose(dim0, dim1) or permute");
  return x.dim() < 2 ? x : transpose(x, 0, 1);
}

py::tuple tensor_tuple(const std::vector<Tensor>& pieces) {
  py::tuple out(pieces.size());
  for (std::size_t i = 0; i < pieces.size(); ++i) out[i] = py::cast(pieces[i]);
  return out;
}

// torch.split(x, split_size_or_sections, dim): pieces of one size, or of the listed sizes.
py::tuple split_op(const Tensor& x, py::handle sizes, int64_t dim) {
  if (py::isinstance<py::int_>(sizes)) return tensor_tuple(split(x, sizes.cast<int64_t>(), dim));
  return tensor_tuple(split(x, to_shape(sizes, "split"), dim));
}

// torch.chunk(x, chunks, dim): split into pieces of ceil(size / chunks) (the last may be smaller,
// and there may be fewer than `chunks`, as in PyTorch).
py::tuple chunk_op(const Tensor& x, int64_t chunks, int64_t dim) {
  if (chunks <= 0) fail<ValueError>("chunk: chunks must be positive, got ", chunks);
  const int64_t size = x.size(wrap_dim(dim, x.dim(), "chunk"));
  const int64_t piece = std::max<int64_t>((size + chunks - 1) / chunks, 1);
  return tensor_tuple(split(x, piece, dim));
}

// torch.repeat_interleave(x, repeats, dim): repeats an int (or a one-element tensor); without a
// dim the flattened tensor is repeated, as PyTorch does.
Tensor repeat_interleave_op(const Tensor& x, py::handle repeats, std::optional<int64_t> dim) {
  int64_t r = 0;
  if (py::isinstance<Tensor>(repeats)) {
    const Tensor t = repeats.cast<Tensor>();
    if (t.numel() != 1)
      fail<ValueError>("repeat_interleave: repeats of shape ", shape_str(t.shape()),
          " (one count per element) is not supported by ag; give one int");
    r = t.item<int64_t>();
  } else if (py::isinstance<py::int_>(repeats)) {
    r = repeats.cast<int64_t>();
  } else {
    throw py::type_error("repeat_interleave: repeats must be an int, got " + py_repr(repeats));
  }
  if (!dim) return repeat_interleave(reshape(x, {-1}), r, 0);
  return repeat_interleave(x, r, *dim);
}

// ---- losses, normalisation, attention -----------------------------------------------------------

Reduction reduction_of(const std::string& name, const char* op) {
  if (name == "mean") return Reduction::mean;
  if (name == "sum") return Reduction::sum;
  if (name == "none") return Reduction::none;
  fail<ValueError>(op, ": reduction must be 'mean', 'sum' or 'none', got '", name, "'");
}

// F.cross_entropy(input, target, reduction, ignore_index): ag's op takes logits (N, C) and
// targets (N,).
// PyTorch's other layouts are composed around it: (C,) with a 0-dim target is one row, and
// (N, C, d1, ...) with targets (N, d1, ...) — the class dim 1, as d2l's MaskedSoftmaxCELoss
// passes pred.permute(0, 2, 1) — moves the classes last and flattens the rest into rows.
Tensor cross_entropy_op(
    const Tensor& input, const Tensor& target, Reduction reduction, int64_t ignore_index) {
  if (input.dim() == 1) {
    Tensor loss = cross_entropy(unsqueeze(input, 0), reshape(target, {1}), reduction, ignore_index);
    return reduction == Reduction::none ? reshape(loss, {}) : loss;
  }
  if (input.dim() <= 2) return cross_entropy(input, target, reduction, ignore_index);
  Shape dims{0};  // (N, C, d1, ..., dk) -> (N, d1, ..., dk, C)
  for (int64_t d = 2; d < input.dim(); ++d) dims.push_back(d);
  dims.push_back(1);
  Shape expected{input.size(0)};
  expected.insert(expected.end(), input.shape().begin() + 2, input.shape().end());
  if (target.shape() != expected)
    fail<ShapeError>("cross_entropy: input of shape ", shape_str(input.shape()),
        " (classes along dim 1) needs targets of shape ", shape_str(expected), ", got ",
        shape_str(target.shape()));
  Tensor rows = reshape(permute(input, dims), {-1, input.size(1)});  // (N·d1···dk, C)
  Tensor loss = cross_entropy(rows, reshape(target, {-1}), reduction, ignore_index);
  return reduction == Reduction::none ? reshape(loss, expected) : loss;
}

// F.scaled_dot_product_attention over ag::attention. ag's kernels take (B, H, T, d); a 3-D
// (N, T, d) input is one head per batch row, or with enable_gqa (PyTorch 2.5's keyword: k and v
// may have fewer heads, dim −3) N heads of one batch row, as PyTorch reads dim −3 as the heads.
// attn_mask and scale are refused: ag masks by valid lengths (ag.attention(q, k, v,
// valid_lens=...)) and by is_causal, and scales by 1/√d.
Tensor sdpa(const Tensor& q, const Tensor& k, const Tensor& v, py::handle attn_mask,
    double dropout_p, bool is_causal, py::handle scale, bool enable_gqa) {
  if (!attn_mask.is_none())
    fail<ValueError>(
        "scaled_dot_product_attention: attn_mask is not supported by ag (only None); mask "
        "padded keys with ag.attention(q, k, v, valid_lens=...) or future ones with "
        "is_causal=True");
  if (!scale.is_none())
    fail<ValueError>(
        "scaled_dot_product_attention: scale is not supported by ag (only None: 1/sqrt(d))");
  AttentionOptions options{
      .is_causal = is_causal, .dropout_p = dropout_p, .training = true, .enable_gqa = enable_gqa};
  py::gil_scoped_release release;
  if (q.dim() == 3 && k.dim() == 3 && v.dim() == 3) {
    const int64_t heads = enable_gqa ? 0 : 1;  // (N, T, d) -> (1, N, T, d) or (N, 1, T, d)
    return squeeze(
        attention(unsqueeze(q, heads), unsqueeze(k, heads), unsqueeze(v, heads), options), heads);
  }
  return attention(q, k, v, options);
}

// F.embedding(input, weight): the rows of weight picked by the ids, of shape input.shape + (D,).
Tensor embedding_op(const Tensor& input, const Tensor& weight) {
  if (weight.dim() != 2)
    fail<ShapeError>("embedding: weight must be 2-D (num_embeddings, embedding_dim), got shape ",
        shape_str(weight.shape()));
  Shape shape = input.shape();
  shape.push_back(weight.size(1));
  return reshape(index_select(weight, 0, reshape(input, {-1})), shape);
}

// Defines `name` as a function of ag (its first argument `input`) and as a Tensor method (self).
template <class F, class... Extra>
void both(py::module_& m, py::class_<Tensor>& cls, const char* name, F f, const Extra&... extra) {
  m.def(name, f, py::arg("input"), extra...);
  cls.def(name, f, extra...);
}

}  // namespace

void bind_ops(py::module_& m) {
  auto cls = py::reinterpret_borrow<py::class_<Tensor>>(py::type::of<Tensor>());
  // NumPy defers to a tensor's reflected operators (a + t is t.__radd__(a)), as for torch.Tensor.
  cls.attr("__array_priority__") = 1000;

  // ---- return types -----------------------------------------------------------------------------
  py::module_ rt = m.def_submodule("return_types", "The namedtuples of max, min and topk.");
  auto namedtuple = py::module_::import("collections").attr("namedtuple");
  for (const char* name : {"max", "min", "topk"}) {
    py::object type = namedtuple(name, py::make_tuple("values", "indices"));
    type.attr("__module__") = "ag.return_types";
    rt.attr(name) = type;
  }
  auto keep = [&rt](const char* name) { return py::object(rt.attr(name)).release(); };
  return_types = {keep("max"), keep("min"), keep("topk")};

  // ---- operators --------------------------------------------------------------------------------
  cls.def("__add__", &add_op)
      .def("__radd__", &add_op)
      .def("__sub__", &sub_op)
      .def("__rsub__", &rsub_op)
      .def("__mul__", &mul_op)
      .def("__rmul__", &mul_op)
      .def("__truediv__", &div_op)
      .def("__rtruediv__", &rdiv_op)
      .def("__pow__", &pow_op)
      .def("__rpow__",
          [](const Tensor& x, py::handle base) -> py::object {
            const Operand o = operand(base, x, "pow");
            if (o.kind == Operand::integer)
              return py::cast(scalar_pow(static_cast<double>(o.i), x));
            if (o.kind == Operand::floating) return py::cast(scalar_pow(o.d, x));
            return py::reinterpret_borrow<py::object>(Py_NotImplemented);
          })
      .def(
          "__matmul__", [](const Tensor& a, const Tensor& b) { return matmul(a, b); }, ReleaseGil())
      .def("__neg__", [](const Tensor& x) { return neg(x); })
      .def("__abs__", [](const Tensor& x) { return abs(x); })
      .def("__invert__",
          [](const Tensor& x) {
            if (x.dtype() != DType::bool_)
              fail<DTypeError>("bitwise_not: ~ is supported for bool tensors only, got ",
                  dtype_name(x.dtype()), " of shape ", shape_str(x.shape()));
            return eq(x, 0.0);  // logical not
          })
      // x += y updates x in place (PyTorch's semantics); see update_in_place.
      .def("__iadd__",
          [](py::object self, py::handle y) { return update_in_place(self, y, "add_", add_op); })
      .def("__isub__",
          [](py::object self, py::handle y) { return update_in_place(self, y, "sub_", sub_op); })
      .def("__imul__",
          [](py::object self, py::handle y) { return update_in_place(self, y, "mul_", mul_op); })
      .def("__itruediv__",
          [](py::object self, py::handle y) { return update_in_place(self, y, "div_", div_op); });

#define AG_COMPARISON(dunder, op)                                                                 \
  cls.def(dunder, [](const Tensor& x, py::handle y) {                                             \
    return compare(                                                                               \
        x, y, #op, [](const Tensor& a, const Tensor& b) { return op(a, b); },                     \
        [](const Tensor& a, double b) { return op(a, b); });                                      \
  });                                                                                             \
  both(                                                                                           \
      m, cls, #op,                                                                                \
      [](const Tensor& x, py::handle y) {                                                         \
        return required(compare(                                                                  \
                            x, y, #op, [](const Tensor& a, const Tensor& b) { return op(a, b); }, \
                            [](const Tensor& a, double b) { return op(a, b); }),                  \
            y, #op);                                                                              \
      },                                                                                          \
      py::arg("other"));
  AG_COMPARISON("__eq__", eq)
  AG_COMPARISON("__ne__", ne)
  AG_COMPARISON("__lt__", lt)
  AG_COMPARISON("__le__", le)
  AG_COMPARISON("__gt__", gt)
  AG_COMPARISON("__ge__", ge)
#undef AG_COMPARISON

  // ---- arithmetic as functions and methods ------------------------------------------------------
  // ag.add(x, y, alpha=1) is x + alpha·y, as torch.add.
  both(
      m, cls, "add",
      [](const Tensor& x, py::handle y, double alpha) {
        if (alpha == 1) return required(add_op(x, y), y, "add");
        return add(x, mul(tensor_or_scalar(y, &x, "add"), alpha));
      },
      py::arg("other"), py::kw_only(), py::arg("alpha") = 1.0);
  both(
      m, cls, "sub",
      [](const Tensor& x, py::handle y, double alpha) {
        if (alpha == 1) return required(sub_op(x, y), y, "sub");
        return sub(x, mul(tensor_or_scalar(y, &x, "sub"), alpha));
      },
      py::arg("other"), py::kw_only(), py::arg("alpha") = 1.0);
  both(
      m, cls, "mul", [](const Tensor& x, py::handle y) { return required(mul_op(x, y), y, "mul"); },
      py::arg("other"));
  both(
      m, cls, "div", [](const Tensor& x, py::handle y) { return required(div_op(x, y), y, "div"); },
      py::arg("other"));
  m.attr("multiply") = m.attr("mul");
  m.attr("divide") = m.attr("div");
  m.attr("subtract") = m.attr("sub");
  // ag.pow(x, 2.0), x.pow(2.0), and ag.pow(10000, x) with a scalar base (see scalar_pow).
  m.def(
      "pow",
      [](py::handle input, py::handle exponent) {
        if (!py::isinstance<Tensor>(input)) {
          const Operand base = operand(input, Tensor(), "pow");
          if (base.kind == Operand::unsupported || !py::isinstance<Tensor>(exponent))
            throw py::type_error("pow: expected a tensor base or a tensor exponent, got " +
                                 py_repr(py::type::of(input)) + " and " +
                                 py_repr(py::type::of(exponent)));
          const double b = base.kind == Operand::integer ? static_cast<double>(base.i) : base.d;
          return scalar_pow(b, exponent.cast<Tensor>());
        }
        return required(pow_op(input.cast<Tensor>(), exponent), exponent, "pow");
      },
      py::arg("input"), py::arg("exponent"));
  cls.def(
      "pow", [](const Tensor& x, py::handle e) { return required(pow_op(x, e), e, "pow"); },
      py::arg("exponent"));

  // In place. add_ with a tensor of the same floating dtype is ag's own kernel, mul_ by a number
  // too, where nothing requires grad in grad mode; the rest update_in_place, which records the
  // update in the graph where something does (or refuses it: a parameter, a view).
  cls.def(
      "add_",
      [](py::object self, py::handle y, double alpha) -> py::object {
        const Tensor& x = self.cast<const Tensor&>();
        if (py::isinstance<Tensor>(y) && is_floating_point(x.dtype()) &&
            y.cast<const Tensor&>().dtype() == x.dtype() && !updates_in_graph(x, y)) {
          x.add_(y.cast<const Tensor&>(), alpha);
          return self;
        }
        if (alpha == 1) return update_in_place(self, y, "add_", add_op);
        py::object scaled = py::cast(mul(tensor_or_scalar(y, &x, "add_"), alpha));
        return update_in_place(self, scaled, "add_", add_op);
      },
      py::arg("other"), py::kw_only(), py::arg("alpha") = 1.0);
  cls.def(
      "mul_",
      [](py::object self, py::handle y) -> py::object {
        const Tensor& x = self.cast<const Tensor&>();
        const Operand o = operand(y, x, "mul_");
        if (is_floating_point(x.dtype()) && !updates_in_graph(x, y) &&
            (o.kind == Operand::floating || o.kind == Operand::integer)) {
          x.mul_(o.kind == Operand::floating ? o.d : static_cast<double>(o.i));
          return self;
        }
        return update_in_place(self, y, "mul_", mul_op);
      },
      py::arg("other"));
  cls.def(
      "sub_",
      [](py::object self, py::handle y) { return update_in_place(self, y, "sub_", sub_op); },
      py::arg("other"));
  cls.def(
      "div_",
      [](py::object self, py::handle y) { return update_in_place(self, y, "div_", div_op); },
      py::arg("other"));

  // ---- elementwise math -------------------------------------------------------------------------
#define AG_UNARY(name) both(m, cls, #name, [](const Tensor& x) { return name(x); });
  AG_UNARY(neg)
  AG_UNARY(abs)
  AG_UNARY(exp)
  AG_UNARY(log)
  AG_UNARY(sqrt)
  AG_UNARY(rsqrt)
  AG_UNARY(tanh)
  AG_UNARY(sigmoid)
  AG_UNARY(relu)
  AG_UNARY(sin)
  AG_UNARY(cos)
  AG_UNARY(erf)
#undef AG_UNARY
  m.attr("negative") = m.attr("neg");
  m.def(
      "gelu", [](const Tensor& x, const std::string& approximate) { return gelu(x, approximate); },
      py::arg("input"), py::kw_only(), py::arg("approximate") = "none");
  m.def(
      "silu", [](const Tensor& x) { return silu(x); }, py::arg("input"));
  both(
      m, cls, "maximum", [](const Tensor& a, const Tensor& b) { return maximum(a, b); },
      py::arg("other"));
  both(
      m, cls, "minimum", [](const Tensor& a, const Tensor& b) { return minimum(a, b); },
      py::arg("other"));
  both(
      m, cls, "clamp",
      [](const Tensor& x, std::optional<double> lo, std::optional<double> hi) {
        if (!lo && !hi) fail<ValueError>("clamp: at least one of min and max must be given");
        return clamp(x, lo, hi);
      },
      py::arg("min") = py::none(), py::arg("max") = py::none());
  m.attr("clip") = m.attr("clamp");
  cls.attr("clip") = cls.attr("clamp");
  // torch.where(condition, input, other); input and other may be numbers.
  m.def(
      "where",
      [](const Tensor& condition, py::handle a, py::handle b) {
        // A number takes the dtype of the other operand when its kind fits (scalar_like).
        if (py::isinstance<Tensor>(a)) {
          const Tensor A = a.cast<Tensor>();
          return where(condition, A, tensor_or_scalar(b, &A, "where"));
        }
        if (py::isinstance<Tensor>(b)) {
          const Tensor B = b.cast<Tensor>();
          return where(condition, tensor_or_scalar(a, &B, "where"), B);
        }
        return where(condition, tensor_or_scalar(a, nullptr, "where"),
            tensor_or_scalar(b, nullptr, "where"));
      },
      py::arg("condition"), py::arg("input"), py::arg("other"));
  cls.def(
      "where",
      [](const Tensor& x, const Tensor& condition, py::handle other) {
        return where(condition, x, tensor_or_scalar(other, &x, "where"));
      },
      py::arg("condition"), py::arg("other"));
  both(
      m, cls, "masked_fill",
      [](const Tensor& x, const Tensor& mask, py::handle value) {
        const double v = py::isinstance<Tensor>(value) ? value.cast<Tensor>().item<double>()
                                                       : value.cast<double>();
        return masked_fill(x, mask, v);
      },
      py::arg("mask"), py::arg("value"));
  both(m, cls, "isnan", [](const Tensor& x) { return ne(x, x); });  // NaN alone is not itself

  // ---- reductions -------------------------------------------------------------------------------
  both(
      m, cls, "sum",
      [](const Tensor& x, py::handle dim, bool keepdim) {
        return reduce(
            x, dim, keepdim, "sum", [](const Tensor& t) { return sum(t); },
            [](const Tensor& t, const Shape& d, bool k) { return sum(t, d, k); });
      },
      py::arg("dim") = py::none(), py::arg("keepdim") = false);
  both(
      m, cls, "mean",
      [](const Tensor& x, py::handle dim, bool keepdim) {
        return reduce(
            x, dim, keepdim, "mean", [](const Tensor& t) { return mean(t); },
            [](const Tensor& t, const Shape& d, bool k) { return mean(t, d, k); });
      },
      py::arg("dim") = py::none(), py::arg("keepdim") = false);
  both(m, cls, "max", &max_op, py::arg("dim") = py::none(), py::arg("keepdim") = false);
  both(m, cls, "min", &min_op, py::arg("dim") = py::none(), py::arg("keepdim") = false);
  both(
      m, cls, "amax",
      [](const Tensor& x, py::handle dim, bool keepdim) {
        return reduce(
            x, dim, keepdim, "amax", [](const Tensor& t) { return max(t); },
            [](const Tensor& t, const Shape& d, bool k) { return amax(t, d, k); });
      },
      py::arg("dim") = py::tuple(), py::arg("keepdim") = false);
  both(
      m, cls, "amin",
      [](const Tensor& x, py::handle dim, bool keepdim) {
        return reduce(
            x, dim, keepdim, "amin", [](const Tensor& t) { return min(t); },
            [](const Tensor& t, const Shape& d, bool k) { return amin(t, d, k); });
      },
      py::arg("dim") = py::tuple(), py::arg("keepdim") = false);
  both(m, cls, "argmax", &argmax_op, py::arg("dim") = py::none(), py::arg("keepdim") = false);
  both(m, cls, "argmin", &argmin_op, py::arg("dim") = py::none(), py::arg("keepdim") = false);
  both(
      m, cls, "logsumexp",
      [](const Tensor& x, py::handle dim, bool keepdim) {
        return logsumexp(x, reduction_dims(x, dim, "logsumexp"), keepdim);
      },
      py::arg("dim"), py::arg("keepdim") = false);
  both(m, cls, "var", &var_op, py::arg("dim") = py::none(), py::arg("unbiased") = py::none(),
      py::arg("keepdim") = false, py::kw_only(), py::arg("correction") = py::none());
  // std = sqrt(var), composed.
  both(
      m, cls, "std",
      [](const Tensor& x, py::handle dim, std::optional<bool> unbiased, bool keepdim,
          std::optional<int64_t> correction) {
        return sqrt(var_op(x, dim, unbiased, keepdim, correction));
      },
      py::arg("dim") = py::none(), py::arg("unbiased") = py::none(), py::arg("keepdim") = false,
      py::kw_only(), py::arg("correction") = py::none());
  // any / all: whether some / every element is nonzero, composed from a count.
  both(
      m, cls, "any",
      [](const Tensor& x, py::handle dim, bool keepdim) {
        Tensor count = reduce(
            ne(x, 0.0), dim, keepdim, "any", [](const Tensor& t) { return sum(t); },
            [](const Tensor& t, const Shape& d, bool k) { return sum(t, d, k); });
        return gt(count, 0.0);
      },
      py::arg("dim") = py::none(), py::arg("keepdim") = false);
  both(
      m, cls, "all",
      [](const Tensor& x, py::handle dim, bool keepdim) {
        Tensor count = reduce(
            eq(x, 0.0), dim, keepdim, "all", [](const Tensor& t) { return sum(t); },
            [](const Tensor& t, const Shape& d, bool k) { return sum(t, d, k); });
        return eq(count, 0.0);
      },
      py::arg("dim") = py::none(), py::arg("keepdim") = false);
  both(
      m, cls, "softmax", [](const Tensor& x, int64_t dim) { return softmax(x, dim); },
      py::arg("dim"), ReleaseGil());
  both(
      m, cls, "log_softmax", [](const Tensor& x, int64_t dim) { return log_softmax(x, dim); },
      py::arg("dim"), ReleaseGil());
  both(
      m, cls, "cumsum", [](const Tensor& x, int64_t dim) { return cumsum(x, dim); },
      py::arg("dim"));
  both(
      m, cls, "topk",
      [](const Tensor& x, int64_t k, int64_t dim, bool largest, bool sorted) {
        return values_indices(return_types.topk, topk(x, k, dim, largest, sorted));
      },
      py::arg("k"), py::arg("dim") = -1, py::arg("largest") = true, py::arg("sorted") = true);
  both(
      m, cls, "gather",
      [](const Tensor& x, int64_t dim, const Tensor& index) { return gather(x, dim, index); },
      py::arg("dim"), py::arg("index"));
  m.def(
      "one_hot", [](const Tensor& t, int64_t n) { return one_hot(t, n); }, py::arg("tensor"),
      py::arg("num_classes") = -1);
  both(
      m, cls, "multinomial",
      [](const Tensor& probs, int64_t n, bool replacement, py::handle generator) {
        return multinomial(probs, n, replacement, generator_of(generator, "multinomial"));
      },
      py::arg("num_samples"), py::arg("replacement") = false, py::kw_only(),
      py::arg("generator") = py::none());

  // ---- shapes ----------------------------------------------------------------------------------
  cls.def("reshape", [](const Tensor& x, py::args shape) {
    return reshape(x, shape_from_args(shape, "reshape"));
  });
  m.def(
      "reshape",
      [](const Tensor& x, py::handle shape) { return reshape(x, to_shape(shape, "reshape")); },
      py::arg("input"), py::arg("shape"));
  cls.def("view",
      [](const Tensor& x, py::args shape) { return view(x, shape_from_args(shape, "view")); });
  cls.def(
      "view_as", [](const Tensor& x, const Tensor& other) { return view(x, other.shape()); },
      py::arg("other"));
  cls.def(
      "reshape_as", [](const Tensor& x, const Tensor& other) { return reshape(x, other.shape()); },
      py::arg("other"));
  cls.def("permute",
      [](const Tensor& x, py::args dims) { return permute(x, shape_from_args(dims, "permute")); });
  m.def(
      "permute",
      [](const Tensor& x, py::handle dims) { return permute(x, to_shape(dims, "permute")); },
      py::arg("input"), py::arg("dims"));
  both(
      m, cls, "transpose",
      [](const Tensor& x, int64_t d0, int64_t d1) { return transpose(x, d0, d1); }, py::arg("dim0"),
      py::arg("dim1"));
  m.attr("swapaxes") = m.attr("transpose");
  cls.attr("swapaxes") = cls.attr("transpose");
  both(m, cls, "t", &matrix_t);
  cls.def_property_readonly("T", &reversed_dims, "The dims reversed, as PyTorch's .T.");
  cls.def_property_readonly(
      "mT", [](const Tensor& x) { return transpose(x, -2, -1); },
      "The last two dims swapped (a batch of matrices transposed).");
  both(
      m, cls, "squeeze",
      [](const Tensor& x, std::optional<int64_t> dim) {
        return dim ? squeeze(x, *dim) : squeeze(x);
      },
      py::arg("dim") = py::none());
  both(
      m, cls, "unsqueeze", [](const Tensor& x, int64_t dim) { return unsqueeze(x, dim); },
      py::arg("dim"));
  cls.def("expand",
      [](const Tensor& x, py::args sizes) { return expand(x, shape_from_args(sizes, "expand")); });
  cls.def(
      "expand_as", [](const Tensor& x, const Tensor& other) { return expand(x, other.shape()); },
      py::arg("other"));
  both(
      m, cls, "broadcast_to",
      [](const Tensor& x, py::handle shape) {
        return broadcast_to(x, to_shape(shape, "broadcast_to"));
      },
      py::arg("size"));
  both(m, cls, "flatten", &flatten, py::arg("start_dim") = 0, py::arg("end_dim") = -1);
  both(
      m, cls, "narrow",
      [](const Tensor& x, int64_t dim, int64_t start, int64_t length) {
        return narrow(x, dim, start, length);
      },
      py::arg("dim"), py::arg("start"), py::arg("length"));
  both(
      m, cls, "select",
      [](const Tensor& x, int64_t dim, int64_t index) { return select(x, dim, index); },
      py::arg("dim"), py::arg("index"));
  m.def(
      "split", &split_op, py::arg("tensor"), py::arg("split_size_or_sections"), py::arg("dim") = 0);
  cls.def("split", &split_op, py::arg("split_size"), py::arg("dim") = 0);
  both(m, cls, "chunk", &chunk_op, py::arg("chunks"), py::arg("dim") = 0);
  m.def(
      "cat", [](const std::vector<Tensor>& tensors, int64_t dim) { return concat(tensors, dim); },
      py::arg("tensors"), py::arg("dim") = 0);
  m.attr("concat") = m.attr("cat");
  m.def(
      "stack", [](const std::vector<Tensor>& tensors, int64_t dim) { return stack(tensors, dim); },
      py::arg("tensors"), py::arg("dim") = 0);
  both(
      m, cls, "tril", [](const Tensor& x, int64_t diagonal) { return tril(x, diagonal); },
      py::arg("diagonal") = 0);
  both(
      m, cls, "triu", [](const Tensor& x, int64_t diagonal) { return triu(x, diagonal); },
      py::arg("diagonal") = 0);
  both(
      m, cls, "index_select",
      [](const Tensor& x, int64_t dim, const Tensor& index) { return index_select(x, dim, index); },
      py::arg("dim"), py::arg("index"));
  both(m, cls, "repeat_interleave", &repeat_interleave_op, py::arg("repeats"),
      py::arg("dim") = py::none());
  // torch.broadcast_shapes(*shapes) (ag.broadcast_shapes makes it an ag.Size: python/ag/_ops.py).
  m.def("_broadcast_shapes", [](py::args shapes) {
    Shape out;
    for (py::handle s : shapes)
      out = broadcast_shapes(out, to_shape(s, "broadcast_shapes"), "broadcast_shapes");
    return out;
  });
  m.def(
      "contiguous", [](const Tensor& x) { return contiguous(x); }, py::arg("input"));
  m.def(
      "clone", [](const Tensor& x) { return clone(x); }, py::arg("input"));

  // ---- matrix products, layers, losses ----------------------------------------------------------
  both(
      m, cls, "matmul", [](const Tensor& a, const Tensor& b) { return matmul(a, b); },
      py::arg("other"), ReleaseGil());
  // torch.mm and torch.bmm: matmul restricted to 2-D and 3-D operands.
  both(
      m, cls, "mm",
      [](const Tensor& a, const Tensor& b) {
        if (a.dim() != 2 || b.dim() != 2)
          fail<ShapeError>("mm: expects two matrices, got shapes ", shape_str(a.shape()), " and ",
              shape_str(b.shape()));
        return matmul(a, b);
      },
      py::arg("mat2"), ReleaseGil());
  both(
      m, cls, "bmm",
      [](const Tensor& a, const Tensor& b) {
        if (a.dim() != 3 || b.dim() != 3)
          fail<ShapeError>("bmm: expects two 3-D tensors, got shapes ", shape_str(a.shape()),
              " and ", shape_str(b.shape()));
        return matmul(a, b);
      },
      py::arg("mat2"), ReleaseGil());
  m.def(
      "linear",
      [](const Tensor& x, const Tensor& w, const std::optional<Tensor>& b) {
        return linear(x, w, optional_tensor(b));
      },
      py::arg("input"), py::arg("weight"), py::arg("bias") = py::none(), ReleaseGil());
  m.def(
      "dropout", [](const Tensor& x, double p, bool training) { return dropout(x, p, training); },
      py::arg("input"), py::arg("p") = 0.5, py::arg("train") = true);
  m.def(
      "layer_norm",
      [](const Tensor& x, py::handle normalized_shape, const std::optional<Tensor>& weight,
          const std::optional<Tensor>& bias, double eps) {
        const Shape shape = to_shape(normalized_shape, "layer_norm");
        py::gil_scoped_release release;
        return layer_norm(x, shape, optional_tensor(weight), optional_tensor(bias), eps);
      },
      py::arg("input"), py::arg("normalized_shape"), py::arg("weight") = py::none(),
      py::arg("bias") = py::none(), py::arg("eps") = 1e-5);
  // torch.rms_norm (PyTorch 2.4): eps None is torch.finfo(input.dtype).eps, as PyTorch's.
  m.def(
      "rms_norm",
      [](const Tensor& x, py::handle normalized_shape, const std::optional<Tensor>& weight,
          std::optional<double> eps) {
        const Shape shape = to_shape(normalized_shape, "rms_norm");
        py::gil_scoped_release release;
        return rms_norm(x, shape, optional_tensor(weight), eps);
      },
      py::arg("input"), py::arg("normalized_shape"), py::arg("weight") = py::none(),
      py::arg("eps") = py::none());
  // ag's rotary position embedding (PyTorch has no such op): x (..., T, d) with cos and sin
  // (T, r/2); pairs "interleaved" (Llama's, RoFormer's) or "halves" (GPT-NeoX's rotate_half).
  m.def(
      "rotary_embedding",
      [](const Tensor& x, const Tensor& cos, const Tensor& sin, const std::string& pairs) {
        const RotaryPairs p = nn::parse_rotary_pairs(pairs, "rotary_embedding: pairs");
        py::gil_scoped_release release;
        return rotary_embedding(x, cos, sin, p);
      },
      py::arg("input"), py::arg("cos"), py::arg("sin"), py::arg("pairs") = "interleaved");
  m.def(
      "cross_entropy",
      [](const Tensor& input, const Tensor& target, const std::string& reduction,
          int64_t ignore_index) {
        const Reduction r = reduction_of(reduction, "cross_entropy");
        py::gil_scoped_release release;
        return cross_entropy_op(input, target, r, ignore_index);
      },
      py::arg("input"), py::arg("target"), py::arg("reduction") = "mean",
      py::arg("ignore_index") = -100);
  m.def("embedding", &embedding_op, py::arg("input"), py::arg("weight"));

  // ---- attention --------------------------------------------------------------------------------
  // d2l's masked_softmax(X, valid_lens): a softmax over X's last dim with the entries at and past
  // each row's valid length 0 (the fused ag::length_masked_softmax).
  m.def(
      "masked_softmax",
      [](const Tensor& X, const std::optional<Tensor>& valid_lens) {
        return length_masked_softmax(X, optional_tensor(valid_lens));
      },
      py::arg("X"), py::arg("valid_lens") = py::none(), ReleaseGil());
  m.def(
      "attention",
      [](const Tensor& q, const Tensor& k, const Tensor& v, const std::optional<Tensor>& valid_lens,
          bool is_causal, double dropout_p, bool training,
          const std::optional<std::vector<double>>& alibi_slopes, bool enable_gqa) {
        AttentionOptions options{.valid_lens = optional_tensor(valid_lens),
            .is_causal = is_causal,
            .dropout_p = dropout_p,
            .training = training,
            .alibi_slopes = alibi_slopes.value_or(std::vector<double>{}),
            .enable_gqa = enable_gqa};
        return attention(q, k, v, options);
      },
      py::arg("query"), py::arg("key"), py::arg("value"), py::arg("valid_lens") = py::none(),
      py::kw_only(), py::arg("is_causal") = false, py::arg("dropout_p") = 0.0,
      py::arg("training") = true, py::arg("alibi_slopes") = py::none(),
      py::arg("enable_gqa") = false, ReleaseGil());
  m.def("scaled_dot_product_attention", &sdpa, py::arg("query"), py::arg("key"), py::arg("value"),
      py::arg("attn_mask") = py::none(), py::arg("dropout_p") = 0.0, py::arg("is_causal") = false,
      py::kw_only(), py::arg("scale") = py::none(), py::arg("enable_gqa") = false);
  // ALiBi's slopes (a list of floats, the paper's get_slopes) and the bias (H, Tq, Tk) they give,
  // −slopes[h]·|(Tk − Tq + i) − j|: what ag.attention(..., alibi_slopes=...) adds to the scores.
  m.def("alibi_slopes", &alibi_slopes, py::arg("num_heads"));
  m.def(
      "alibi_bias",
      [](const std::vector<double>& slopes, int64_t queries, int64_t keys, DType dtype) {
        return alibi_bias(slopes, queries, keys, dtype);
      },
      py::arg("slopes"), py::arg("queries"), py::arg("keys"), py::arg("dtype") = DType::float32);
}

}  // namespace ag::python
