// The extension module ag._C: its parts (bindings.h), and ag's errors as Python exceptions.
//
// Every ag error derives from ag::Error (autograd/error.h); each kind becomes a Python exception
// class of ag's name whose bases are the built-in exceptions a PyTorch user catches:
//   ag.ShapeError      ValueError, RuntimeError   (PyTorch raises RuntimeError for shapes)
//   ag.DTypeError      TypeError, RuntimeError
//   ag.AutogradError   RuntimeError, ValueError   (PyTorch: "element 0 ... does not require grad")
//   ag.ValueError      ValueError
//   ag.IoError         OSError  (ag.CheckpointError, ag.SafetensorsError, ag.NpyError below it)
//   ag.OutOfMemoryError MemoryError
//   ag.StateDictError  RuntimeError (load_state_dict, the module's and the optimizer's)
//   ag.Error           RuntimeError (an ag::RuntimeError of no kind above; an ag::InvalidArgument
//                      of none is an ag.ValueError)
// The message is ag's, word for word. No C++ exception reaches the interpreter: pybind11 turns
// any other std::exception into a RuntimeError.
#include <pybind11/pybind11.h>

#include <exception>
#include <initializer_list>

#include "autograd/error.h"
#include "io/checkpoint.h"
#include "io/npy.h"
#include "io/safetensors.h"
#include "nn/module.h"
#include "optim/optimizer.h"
#include "python/src/bindings.h"

namespace ag::python {

namespace {
// The exception classes, made once when ag._C is imported (the translator below is a plain
// function: pybind11 takes no captures there).
struct ExceptionClasses {
  PyObject *error, *value, *shape, *dtype, *autograd, *io, *checkpoint, *safetensors, *npy, *memory,
      *state_dict;
};
ExceptionClasses classes;

// A new exception class ag.<name> with these bases, as a module attribute.
PyObject* exception_class(
    py::module_& m, const char* name, std::initializer_list<py::handle> bases, const char* doc) {
  py::tuple base_tuple(bases.size());
  std::size_t i = 0;
  for (py::handle base : bases) base_tuple[i++] = py::reinterpret_borrow<py::object>(base);
  const std::string qualified = std::string("ag.") + name;
  PyObject* type = PyErr_NewExceptionWithDoc(qualified.c_str(), doc, base_tuple.ptr(), nullptr);
  if (!type) throw py::error_already_set();
  m.attr(name) = py::reinterpret_borrow<py::object>(type);
  return type;  // the module attribute keeps it alive
}
}  // namespace

void bind_errors(py::module_& m) {
  py::handle value_error = PyExc_ValueError, runtime_error = PyExc_RuntimeError,
             type_error = PyExc_TypeError;
  ExceptionClasses& c = classes;
  PyObject* error = exception_class(m, "Error", {runtime_error}, "An ag error of no other kind.");
  PyObject* value = exception_class(
      m, "ValueError", {value_error}, "An argument's value ag cannot take (ag::ValueError).");
  PyObject* shape = exception_class(m, "ShapeError", {value_error, runtime_error},
      "Shapes that do not fit the op (ag::ShapeError).");
  PyObject* dtype = exception_class(m, "DTypeError", {type_error, runtime_error},
      "A dtype the op does not take (ag::DTypeError).");
  PyObject* autograd = exception_class(m, "AutogradError", {runtime_error, value_error},
      "A misuse of autograd (ag::AutogradError).");
  PyObject* io = exception_class(
      m, "IoError", {py::handle(PyExc_OSError)}, "A file ag cannot read or write (ag::IoError).");
  PyObject* checkpoint =
      exception_class(m, "CheckpointError", {io}, "A damaged checkpoint (io/checkpoint.h).");
  PyObject* safetensors = exception_class(
      m, "SafetensorsError", {io}, "A damaged safetensors file (io/safetensors.h).");
  PyObject* npy = exception_class(m, "NpyError", {io}, "A damaged .npy file (io/npy.h).");
  PyObject* memory = exception_class(m, "OutOfMemoryError", {py::handle(PyExc_MemoryError)},
      "Memory the system cannot give (ag::OutOfMemoryError).");
  PyObject* state_dict = exception_class(m, "StateDictError", {runtime_error},
      "A state dict that does not fit the module or optimizer strictly.");

  c = {error, value, shape, dtype, autograd, io, checkpoint, safetensors, npy, memory, state_dict};

  // Most derived first: the first catch that matches sets the Python error.
  py::register_exception_translator([](std::exception_ptr thrown) {
    const ExceptionClasses& c = classes;
    if (!thrown) return;
    try {
      std::rethrow_exception(thrown);
    } catch (const CheckpointError& e) {
      PyErr_SetString(c.checkpoint, e.what());
    } catch (const SafetensorsError& e) {
      PyErr_SetString(c.safetensors, e.what());
    } catch (const NpyError& e) {
      PyErr_SetString(c.npy, e.what());
    } catch (const IoError& e) {
      PyErr_SetString(c.io, e.what());
    } catch (const OutOfMemoryError& e) {
      PyErr_SetString(c.memory, e.what());
    } catch (const nn::StateDictError& e) {
      PyErr_SetString(c.state_dict, e.what());
    } catch (const optim::StateDictError& e) {
      PyErr_SetString(c.state_dict, e.what());
    } catch (const ShapeError& e) {
      PyErr_SetString(c.shape, e.what());
    } catch (const DTypeError& e) {
      PyErr_SetString(c.dtype, e.what());
    } catch (const AutogradError& e) {
      PyErr_SetString(c.autograd, e.what());
    } catch (const InvalidArgument& e) {  // ag::ValueError and any other argument error
      PyErr_SetString(c.value, e.what());
    } catch (const RuntimeError& e) {
      PyErr_SetString(c.error, e.what());
    }
    // Anything else goes on to pybind11's own translators (std::exception: RuntimeError).
  });
}

}  // namespace ag::python

PYBIND11_MODULE(_C, m) {
  namespace py = pybind11;
  m.doc() = "ag's C++ engine; import the package ag, which wraps it (docs/python.md).";
  ag::python::bind_errors(m);
  ag::python::bind_tensor(m);
  ag::python::bind_ops(m);
  py::module_ nn = m.def_submodule("nn", "ag's modules (nn/)");
  ag::python::bind_nn(nn);
  py::module_ optim = m.def_submodule("optim", "ag's optimizers and schedules (optim/)");
  ag::python::bind_optim(optim);
  ag::python::bind_io(m);
  py::module_ profiler = m.def_submodule("_profiler", "ag's profiler (autograd/profiler.h)");
  ag::python::bind_profiler(profiler);
}
