// What the parts of the Python binding share: each python/src/*.cpp binds one part of ag's C++ API
// into the extension module ag._C, and python/ag/ wraps it as PyTorch users expect
// (docs/python.md).
#pragma once

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "autograd/autograd.h"
#include "autograd/tensor.h"

// An int64 argument (a dim, a count, an index) refuses a bool, as PyTorch's do: pybind11's own int
// caster takes True as 1, so x.softmax(True) would silently be softmax(dim=1). An int, or any
// object with __index__ (a NumPy integer, a one-element int64 tensor), converts; a float does not.
// Every file of python/src/ includes this header, so every one sees this caster. (int64_t is long
// on the platforms ag builds for.)
static_assert(std::is_same_v<int64_t, long>, "the int64 caster below is pybind11's for long");
namespace pybind11::detail {
template <>
class type_caster<long> {
 public:
  PYBIND11_TYPE_CASTER(long, const_name("int"));
  bool load(handle src, bool /*convert*/) {
    if (!src || PyBool_Check(src.ptr()) || PyFloat_Check(src.ptr())) return false;
    if (!PyLong_Check(src.ptr()) && !PyIndex_Check(src.ptr())) return false;
    object index = reinterpret_steal<object>(PyNumber_Index(src.ptr()));
    if (!index) {
      PyErr_Clear();
      return false;
    }
    int overflow = 0;
    const long v = PyLong_AsLongAndOverflow(index.ptr(), &overflow);
    if (overflow != 0 || (v == -1 && PyErr_Occurred())) {
      PyErr_Clear();
      return false;  // beyond int64: a TypeError naming the signature, as a float is
    }
    value = v;
    return true;
  }
  static handle cast(long src, return_value_policy /*policy*/, handle /*parent*/) {
    return PyLong_FromLong(src);
  }
};
}  // namespace pybind11::detail

namespace ag::python {

namespace py = pybind11;

void bind_errors(py::module_& m);    // module.cpp: ag's errors as Python exceptions
void bind_tensor(py::module_& m);    // tensor.cpp: Tensor, dtypes, creation, NumPy, autograd
void bind_ops(py::module_& m);       // ops.cpp: the ops of autograd/ops.h, functions and methods
void bind_nn(py::module_& m);        // nn.cpp: modules, losses, init (ag._C.nn)
void bind_optim(py::module_& m);     // optim.cpp: optimizers and schedules (ag._C.optim)
void bind_profiler(py::module_& m);  // profiler.cpp: ag::profiler (ag._C._profiler)
void bind_io(py::module_& m);        // io.cpp: files (ag._C.io), pictures (ag._C.viz), gradcheck

// A shape as Python passes one: an int, or a sequence of ints (a tuple, a list, an ag.Size).
// `op` names the caller in the TypeError of anything else.
Shape to_shape(py::handle value, const char* op);
// PyTorch's `*size` arguments: zeros(2, 3), zeros((2, 3)) and zeros([2, 3]) are one shape.
Shape shape_from_args(const py::args& args, const char* op);
// repr(value) as a std::string, for messages.
inline std::string py_repr(py::handle value) { return py::repr(value).cast<std::string>(); }

// Keeps a Python object alive for C++ (a borrowed array, a hook's or gradcheck's function) and
// lets it go with the GIL held, from whichever thread drops the last reference. Call the object
// with the GIL held: `py::gil_scoped_acquire gil; (*function)(args...)`.
inline std::shared_ptr<py::object> held(py::object object) {
  return std::shared_ptr<py::object>(new py::object(std::move(object)), [](py::object* o) {
    if (Py_IsInitialized()) {
      py::gil_scoped_acquire gil;
      delete o;
    } else {
      o->release();  // the interpreter is gone: nothing to decrement
      delete o;
    }
  });
}

// Whether `value` is a NumPy array, without importing NumPy: an interpreter without NumPy can
// still import ag, and no value can be an array before NumPy is imported.
inline bool is_numpy_array(py::handle value) {
  PyObject* numpy = PyDict_GetItemString(PyImport_GetModuleDict(), "numpy");  // borrowed
  if (!numpy || numpy == Py_None) return false;
  return py::isinstance(value, py::handle(numpy).attr("ndarray"));
}

// Whether x ⊕= value or x[index] = value is an update in the graph, recorded as PyTorch's
// differentiable in-place ops are (ag::update_in_graph): grad mode is on, and x or the value
// requires grad.
inline bool updates_in_graph(const Tensor& x, py::handle value) {
  const bool value_requires_grad =
      py::isinstance<Tensor>(value) && value.cast<const Tensor&>().requires_grad();
  return GradMode::is_enabled() && (x.requires_grad() || value_requires_grad);
}

// The generator= argument of the random functions (tensor.cpp): ag's default generator (seeded by
// ag.manual_seed) for None, else the ag.Generator given; anything else is a TypeError naming op.
Generator& generator_of(py::handle generator, const char* op);

// A tensor, or None for an undefined one (grad before backward, Linear's bias=False).
py::object tensor_or_none(const Tensor& t);

// An optional tensor as Python passes it (None: an undefined Tensor, as ag's C++ API takes it):
// valid_lens, attention masks, biases.
inline Tensor optional_tensor(const std::optional<Tensor>& t) { return t.value_or(Tensor()); }

}  // namespace ag::python
