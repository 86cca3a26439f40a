// ag.nn from Python (the submodule ag._C.nn; python/ag/nn/__init__.py adds what is written in
// Python): Module and its tree, Parameter, ag's layers under d2l's and PyTorch's constructor
// names, ModuleList and ModuleDict, the functional forms, init and clip_grad_norm_.
//
// One tree for C++ and Python modules. ag.nn.Module is ag::nn::Module itself, held by
// std::shared_ptr, with a trampoline (PyModule) so that a Python class can derive from it:
//
//   class MyModel(ag.nn.Module):
//       def __init__(self):
//           super().__init__()
//           self.lin = ag.nn.Linear(3, 4)                # registered in ag's C++ tree
//           self.scale = ag.nn.Parameter(ag.ones(4))     # registered as a parameter
//
// Attribute assignment (__setattr__ below) registers Modules and Parameters into the C++ module,
// and attribute lookup (__getattr__) finds them there: the C++ tree is the only record, so
// named_parameters(), state_dict(), load_state_dict(), train(), to() and repr are ag's C++ walks
// over Python and C++ modules alike, with PyTorch's dotted names.
//
// Lifetimes. A module written in Python is two halves: the C++ PyModule and the Python object
// (its class, forward, __dict__). pybind11's holder makes the Python object own the C++ half, not
// the other way round; so when such a module becomes a child, the parent holds it through an
// aliasing shared_ptr that owns a reference to the Python object (as_child): the Python half
// lives exactly as long as any parent, C++ or Python, still holds the module. A module written in
// C++ needs no Python half and is held by its own shared_ptr; Python wrappers of it come and go.
// (A Python module that keeps its own parent in its __dict__ makes a cycle the garbage collector
// cannot see through C++: it is never freed.)
#include <pybind11/stl.h>

#include <set>
#include <string>
#include <utility>
#include <vector>

#include "autograd/error.h"
#include "nn/attention.h"
#include "nn/fused.h"
#include "nn/init.h"
#include "nn/language_model.h"
#include "nn/layers.h"
#include "nn/loss.h"
#include "nn/module.h"
#include "nn/positions.h"
#include "nn/transformer.h"
#include "optim/optimizer.h"
#include "python/src/bindings.h"

namespace ag::python {

namespace {

using nn::Module;
using ModulePtr = std::shared_ptr<Module>;

// ag.nn.Parameter: a Tensor that Module.__setattr__ registers as a parameter (PyTorch's rule: a
// plain Tensor assigned to a module is just an attribute). The same tensor handle: a Parameter
// of t is t's data as a new leaf, and a module's parameter read back is the module's own tensor.
struct Parameter : Tensor {
  explicit Parameter(const Tensor& t) : Tensor(t) {}
};

// The trampoline: ag::nn::Module written in Python. The class name is the Python class's (or
// what its _get_name returns, as PyTorch's), extra_repr is the Python method when there is one,
// and the protected registration API is public for the bindings below.
class PyModule : public Module {
 public:
  using Module::register_buffer;
  using Module::register_module;
  using Module::register_parameter;
  using Module::replace_module;

  std::string type_name() const override {
    py::gil_scoped_acquire gil;  // (a C++ error message may ask with the GIL released)
    py::handle self = py::detail::get_object_handle(
        static_cast<const Module*>(this), py::detail::get_type_info(typeid(Module)));
    if (!self) return "Module";
    if (py::function get_name = py::get_override(static_cast<const Module*>(this), "_get_name"))
      return get_name().cast<std::string>();
    return py::str(py::type::handle_of(self).attr("__name__"));
  }
  std::string extra_repr() const override {
    py::gil_scoped_acquire gil;
    if (py::function f = py::get_override(static_cast<const Module*>(this), "extra_repr"))
      return f().cast<std::string>();
    return Module::extra_repr();
  }
};

std::string python_type_name(py::handle value) {
  return py::str(py::type::handle_of(value).attr("__name__"));
}

// The module of a Python object, or nullptr before Module.__init__ has run (or for a non-module).
Module* module_of(py::handle object) {
  if (!py::isinstance<Module>(object)) return nullptr;
  // (pybind11's cast would read the C++ pointer of an instance whose __init__ has not run)
  auto* instance = reinterpret_cast<py::detail::instance*>(object.ptr());
  if (!instance->get_value_and_holder().holder_constructed()) return nullptr;
  return object.cast<Module*>();
}

// The module of `self` in a method that registers into it: an error before Module.__init__.
Module& initialized(py::handle self, const std::string& what) {
  Module* m = module_of(self);
  if (!m) throw py::attribute_error("cannot " + what + " before Module.__init__() call");
  return *m;
}

// Whether the object's class is written in Python (a subclass of a bound class).
bool written_in_python(py::handle object) {
  PyTypeObject* type = Py_TYPE(object.ptr());
  const py::detail::type_info* bound = py::detail::get_type_info(type);  // (or its bound base's)
  return !bound || bound->type != type;
}

// The shared_ptr a parent holds a child by (see Lifetimes above).
ModulePtr as_child(py::handle object) {
  if (!py::isinstance<Module>(object))
    throw py::type_error(python_type_name(object) + " is not an ag.nn.Module subclass");
  if (!module_of(object))
    throw py::type_error("a module whose Module.__init__() has not run cannot be a submodule");
  auto module = object.cast<ModulePtr>();
  if (!written_in_python(object)) return module;
  std::shared_ptr<py::object> python_half = held(py::reinterpret_borrow<py::object>(object));
  return ModulePtr(python_half, module.get());  // owns the Python object, points at the module
}

// The Python-written module of `self`, for registering new names (C++ layers have a fixed set).
PyModule& python_module(Module& m, const std::string& what) {
  auto* py_module = dynamic_cast<PyModule*>(&m);
  if (!py_module)
    throw py::attribute_error(m.type_name() + ": cannot add " + what +
                              " to a module of ag's C++ (only to modules written in Python)");
  return *py_module;
}

ModulePtr child_named(const Module& m, const std::string& name) {
  for (const auto& [n, child] : m.named_children())
    if (n == name) return child;
  return nullptr;
}

// Removes `name` from the instance __dict__ of a Python module (a plain attribute that a module,
// parameter or buffer now replaces would shadow it).
void forget_plain_attribute(py::handle self, const std::string& name) {
  if (!py::hasattr(self, "__dict__")) return;
  py::dict dict = self.attr("__dict__");
  if (dict.contains(name)) PyDict_DelItemString(dict.ptr(), name.c_str());
}

void set_parameter(py::handle self, Module& m, const std::string& name, py::handle value) {
  Tensor t = value.is_none() ? Tensor() : value.cast<Tensor>();
  if (t.defined() && !t.is_leaf())
    throw py::value_error(m.type_name() + ": parameter '" + name +
                          "' must be a leaf tensor (an ag.nn.Parameter of detached data)");
  if (Tensor* slot = m.parameter_slot(name)) {
    *slot = t;  // ag's tying: the slot is the parameter (lm_head.weight = wte.weight)
    return;
  }
  const bool requires_grad = t.defined() && t.requires_grad();
  Tensor& slot = python_module(m, "parameter '" + name + "'").register_parameter(name, t);
  if (slot.defined()) slot.requires_grad_(requires_grad);  // a frozen Parameter stays frozen
  forget_plain_attribute(self, name);
}

void set_module(py::handle self, Module& m, const std::string& name, py::handle value) {
  if (child_named(m, name)) {
    python_module(m, "a new submodule '" + name + "' in place of the old")
        .replace_module(name, as_child(value));
    return;
  }
  if (m.parameter_slot(name) || m.buffer_slot(name))
    throw py::key_error("attribute '" + name + "' already exists");
  python_module(m, "submodule '" + name + "'").register_module(name, as_child(value));
  forget_plain_attribute(self, name);
}

// Module.__setattr__: PyTorch's rules. A Parameter registers (or fills the parameter slot of that
// name), a Module registers (or replaces the child of that name), a Tensor or None fills a buffer
// slot, None empties a parameter slot; other values assigned to those names are a TypeError, and
// everything else is a plain attribute.
void module_setattr(py::object self, py::str name_object, py::object value) {
  const std::string name = name_object;
  Module* m = module_of(self);
  const bool is_parameter = py::isinstance<Parameter>(value);
  const bool is_module = py::isinstance<Module>(value);
  if (!m) {
    if (is_parameter || is_module)
      throw py::attribute_error("cannot assign " + std::string(is_module ? "module" : "parameter") +
                                " '" + name + "' before Module.__init__() call");
  } else if (is_parameter) {
    return set_parameter(self, *m, name, value);
  } else if (is_module) {
    return set_module(self, *m, name, value);
  } else if (m->parameter_slot(name)) {
    if (!value.is_none())
      throw py::type_error("cannot assign '" + python_type_name(value) + "' as parameter '" + name +
                           "' (ag.nn.Parameter or None expected)");
    return set_parameter(self, *m, name, value);
  } else if (Tensor* slot = m->buffer_slot(name)) {
    if (!value.is_none() && !py::isinstance<Tensor>(value))
      throw py::type_error("cannot assign '" + python_type_name(value) + "' as buffer '" + name +
                           "' (ag.Tensor or None expected)");
    *slot = value.is_none() ? Tensor() : value.cast<Tensor>();
    return;
  } else if (child_named(*m, name)) {
    throw py::type_error("cannot assign '" + python_type_name(value) + "' as child module '" +
                         name + "' (ag.nn.Module expected)");
  }
  py::module_::import("builtins").attr("object").attr("__setattr__")(self, name_object, value);
}

// Module.__getattr__ (Python calls it when the ordinary lookup fails): the module's own
// parameter, buffer or child of that name.
py::object module_getattr(py::handle self, const std::string& name) {
  Module* m = name.rfind("__", 0) == 0 ? nullptr : module_of(self);
  if (m) {
    if (Tensor* p = m->parameter_slot(name))
      return p->defined() ? py::cast(Parameter(*p)) : py::none();
    if (Tensor* b = m->buffer_slot(name)) return tensor_or_none(*b);
    if (ModulePtr child = child_named(*m, name)) return py::cast(child);
  }
  throw py::attribute_error(
      "'" + python_type_name(self) + "' object has no attribute '" + name + "'");
}

// name -> tensor pairs as a list of (name, Parameter) tuples.
py::list named_parameter_list(const std::vector<std::pair<std::string, Tensor>>& entries,
    const std::string& prefix, bool as_parameters) {
  py::list out;
  for (const auto& [name, t] : entries)
    out.append(py::make_tuple(prefix.empty() ? name : prefix + "." + name,
        as_parameters ? py::cast(Parameter(t)) : py::cast(t)));
  return out;
}

// The module's own entries (recurse=False): the names without a dot.
std::vector<std::pair<std::string, Tensor>> local(
    const std::vector<std::pair<std::string, Tensor>>& entries) {
  std::vector<std::pair<std::string, Tensor>> out;
  for (const auto& entry : entries)
    if (entry.first.find('.') == std::string::npos) out.push_back(entry);
  return out;
}

// PyTorch's state_dict: a module's parameters, then its persistent buffers, then each child's
// entries; a tied tensor under each of its names. Non-persistent buffers (PositionalEncoding's P,
// which the module computes itself) are left out, as PyTorch leaves them out.
void collect_state(const Module& m, const std::string& prefix, bool keep_vars, py::dict& out) {
  auto& module = const_cast<Module&>(m);  // (the slot accessors are not const; nothing changes)
  for (const std::string& name : module.parameter_names())
    if (const Tensor& t = *module.parameter_slot(name); t.defined())
      out[py::str(prefix + name)] = keep_vars ? t : t.detach();
  for (const std::string& name : module.buffer_names())
    if (const Tensor& t = *module.buffer_slot(name); t.defined() && m.is_persistent_buffer(name))
      out[py::str(prefix + name)] = keep_vars ? t : t.detach();
  for (const auto& [name, child] : m.named_children())
    collect_state(*child, prefix + name + ".", keep_vars, out);
}

// ag's load_state_dict takes every buffer; a state dict of PyTorch's has no non-persistent ones:
// those it lacks keep the module's own values (PyTorch's load_state_dict leaves them alone).
std::vector<std::string> load_state(Module& m, std::map<std::string, Tensor> state, bool strict) {
  std::set<std::string> persistent;
  for (const auto& entry : m.named_buffers(/*persistent_only=*/true, false))
    persistent.insert(entry.first);
  for (const auto& [name, t] : m.named_buffers(false, false))
    if (!persistent.count(name)) state.emplace(name, t);  // (kept if the state dict has it)
  py::gil_scoped_release release;                         // (copies every tensor)
  return m.load_state_dict(state, strict);
}

template <class M>
using Class = py::class_<M, Module, std::shared_ptr<M>>;

// Binds forward(x) -> Tensor with the GIL released, for the layers of one input.
template <class M>
void def_unary_forward(Class<M>& cls) {
  cls.def(
      "forward",
      [](const M& m, const Tensor& input) {
        py::gil_scoped_release release;
        return m.forward(input);
      },
      py::arg("input"));
}

// The forward of d2l's attention layers: attention(queries, keys, values, valid_lens=None), and
// PyTorch's is_causal keyword.
template <class M>
void def_attention_forward(Class<M>& cls) {
  cls.def(
      "forward",
      [](M& m, const Tensor& queries, const Tensor& keys, const Tensor& values,
          std::optional<Tensor> valid_lens, bool is_causal) {
        py::gil_scoped_release release;
        return m(queries, keys, values, optional_tensor(valid_lens), is_causal);
      },
      py::arg("queries"), py::arg("keys"), py::arg("values"), py::arg("valid_lens") = py::none(),
      py::kw_only(), py::arg("is_causal") = false);
}

std::vector<int64_t> normalized_shape_of(py::handle value, const char* layer = "LayerNorm") {
  return to_shape(value, layer);
}

// MultiHeadAttention's positions= keyword: "none" (d2l's: the positions were added to the input),
// "rope" or "alibi" (nn::AttentionPositions); any other name a ValueError naming the keyword.
nn::AttentionPositions attention_positions_of(const std::string& name) {
  if (name == "none") return nn::AttentionPositions::none;
  if (name == "rope") return nn::AttentionPositions::rope;
  if (name == "alibi") return nn::AttentionPositions::alibi;
  fail<ValueError>("MultiHeadAttention: positions: '", name,
      "' is not a position scheme of the attention ('none', 'rope' or 'alibi')");
}

void bind_module(py::module_& m) {
  py::class_<Parameter, Tensor>(m, "Parameter",
      "A tensor that a module trains: assigned to a module, it is registered as a parameter.")
      .def(py::init([](std::optional<Tensor> data, bool requires_grad) {
        Tensor t = data ? data->detach() : empty({0});
        t.requires_grad_(requires_grad);
        return Parameter(t);
      }),
          py::arg("data") = py::none(), py::arg("requires_grad") = true)
      .def("__repr__", [](const Parameter& p) { return "Parameter containing:\n" + p.str(); });

  py::class_<Module, PyModule, ModulePtr> cls(m, "Module",
      "The base of every layer, as torch.nn.Module; subclass it in Python with a forward.");
  cls.def(py::init<>())
      .def("__setattr__", &module_setattr)
      .def("__getattr__", &module_getattr)
      .def("__repr__", &Module::repr)
      .def("extra_repr", &Module::extra_repr)
      .def("_get_name", &Module::type_name)
      .def(
          "_named_parameter_list",
          [](const Module& m, const std::string& prefix, bool recurse, bool remove_duplicate) {
            auto entries = m.named_parameters(remove_duplicate);
            return named_parameter_list(recurse ? entries : local(entries), prefix, true);
          },
          py::arg("prefix") = "", py::arg("recurse") = true, py::arg("remove_duplicate") = true)
      .def(
          "_named_buffer_list",
          [](const Module& m, const std::string& prefix, bool recurse, bool remove_duplicate) {
            auto entries = m.named_buffers(false, remove_duplicate);
            return named_parameter_list(recurse ? entries : local(entries), prefix, false);
          },
          py::arg("prefix") = "", py::arg("recurse") = true, py::arg("remove_duplicate") = true)
      .def("_named_children_list",
          [](const Module& m) {
            py::list out;
            for (const auto& [name, child] : m.named_children())
              out.append(py::make_tuple(name, child));
            return out;
          })
      .def(
          "_state_dict",
          [](const Module& m, const std::string& prefix, bool keep_vars) {
            py::dict out = py::module_::import("collections").attr("OrderedDict")();
            collect_state(m, prefix, keep_vars, out);
            return out;
          },
          py::kw_only(), py::arg("prefix") = "", py::arg("keep_vars") = false,
          "Every parameter and buffer by dotted name (detached; the module's own tensors with "
          "keep_vars=True), in PyTorch's order; non-persistent buffers left out, as PyTorch's.")
      .def(
          "_load_state_dict",
          [](Module& m, std::map<std::string, Tensor> state, bool strict) {
            return load_state(m, std::move(state), strict);
          },
          py::arg("state_dict"), py::arg("strict") = true)
      .def(
          "_train", [](Module& m, bool mode) { m.train(mode); }, py::arg("mode") = true)
      .def_property_readonly("training", &Module::is_training)
      .def("_zero_grad", &Module::zero_grad)
      .def(
          "_to_dtype",
          [](Module& m, DType dtype) {
            py::gil_scoped_release release;
            m.to(dtype);
          },
          py::arg("dtype"))
      .def("num_parameters", &Module::num_parameters,
          "The number of trained values, a tied tensor once.")
      .def(
          "register_parameter",
          [](py::object self, const std::string& name, py::object param) {
            if (!param.is_none() && !py::isinstance<Parameter>(param))
              throw py::type_error("cannot assign '" + python_type_name(param) +
                                   "' object to parameter '" + name +
                                   "' (ag.nn.Parameter or None required)");
            Module& mod = initialized(self, "register parameter '" + name + "'");
            if (mod.parameter_slot(name))
              throw py::key_error("attribute '" + name + "' already exists");
            set_parameter(self, mod, name, param);
          },
          py::arg("name"), py::arg("param"))
      .def(
          "register_buffer",
          [](py::object self, const std::string& name, std::optional<Tensor> tensor,
              bool persistent) {
            Module& mod = initialized(self, "register buffer '" + name + "'");
            python_module(mod, "buffer '" + name + "'")
                .register_buffer(name, optional_tensor(tensor), persistent);
            forget_plain_attribute(self, name);
          },
          py::arg("name"), py::arg("tensor"), py::arg("persistent") = true)
      .def(
          "add_module",
          [](py::object self, const std::string& name, py::object module) {
            if (!py::isinstance<Module>(module))
              throw py::type_error(python_type_name(module) + " is not an ag.nn.Module subclass");
            Module& mod = initialized(self, "add module '" + name + "'");
            if (child_named(mod, name))
              throw py::key_error("attribute '" + name + "' already exists");
            set_module(self, mod, name, module);
          },
          py::arg("name"), py::arg("module"));

  // ModuleList and ModuleDict: ag's own classes, holding Python modules too.
  Class<nn::ModuleList>(m, "ModuleList", "Submodules named 0, 1, ... (torch.nn.ModuleList).")
      .def(py::init([](std::optional<py::iterable> modules) {
        auto list = std::make_shared<nn::ModuleList>();
        if (modules)
          for (py::handle module : *modules) list->push_back(as_child(module));
        return list;
      }),
          py::arg("modules") = py::none())
      .def(
          "append",
          [](py::object self, py::object module) {
            self.cast<nn::ModuleList&>().push_back(as_child(module));
            return self;
          },
          py::arg("module"))
      .def(
          "extend",
          [](py::object self, py::iterable modules) {
            for (py::handle module : modules)
              self.cast<nn::ModuleList&>().push_back(as_child(module));
            return self;
          },
          py::arg("modules"))
      .def("__len__", &nn::ModuleList::size)
      .def("__getitem__",
          [](const nn::ModuleList& l, const py::slice& slice) {
            // A new ModuleList of the same modules, as PyTorch's (a module may have two parents).
            std::size_t start, stop, step, count;
            if (!slice.compute(l.size(), &start, &stop, &step, &count))
              throw py::error_already_set();
            auto out = std::make_shared<nn::ModuleList>();
            for (std::size_t i = 0; i < count; ++i)
              out->push_back(l[static_cast<int64_t>(start + i * step)]);
            return out;
          })
      .def("__getitem__",
          [](const nn::ModuleList& l, int64_t i) {
            try {
              return l[i];
            } catch (const ValueError& e) {
              throw py::index_error(e.what());  // (Python's for loops over __getitem__ stop here)
            }
          })
      .def("__iter__", [](const nn::ModuleList& l) {
        py::list out;
        for (const auto& module : l) out.append(module);
        return py::iter(out);
      });

  Class<nn::ModuleDict>(m, "ModuleDict", "Submodules by name, in order (torch.nn.ModuleDict).")
      .def(py::init([](std::optional<py::dict> modules) {
        auto dict = std::make_shared<nn::ModuleDict>();
        if (modules)
          for (auto [name, module] : *modules)
            dict->insert(name.cast<std::string>(), as_child(module));
        return dict;
      }),
          py::arg("modules") = py::none())
      .def("__setitem__", [](nn::ModuleDict& d, const std::string& name,
                              py::object module) { d.insert(name, as_child(module)); })
      .def("__getitem__",
          [](const nn::ModuleDict& d, const std::string& name) {
            if (!d.contains(name)) throw py::key_error(name);
            return d[name];
          })
      .def("__contains__", &nn::ModuleDict::contains)
      .def("__len__", &nn::ModuleDict::size)
      .def("keys",
          [](const nn::ModuleDict& d) {
            py::list out;
            for (const auto& entry : d.named_children()) out.append(entry.first);
            return out;
          })
      .def("values",
          [](const nn::ModuleDict& d) {
            py::list out;
            for (const auto& entry : d.named_children()) out.append(entry.second);
            return out;
          })
      .def("items",
          [](const nn::ModuleDict& d) {
            py::list out;
            for (const auto& [name, module] : d.named_children())
              out.append(py::make_tuple(name, module));
            return out;
          })
      .def("__iter__", [](const nn::ModuleDict& d) {
        py::list out;
        for (const auto& entry : d.named_children()) out.append(entry.first);
        return py::iter(out);
      });
}

void bind_layers(py::module_& m) {
  Class<nn::Linear> linear(m, "Linear", "y = x Wᵀ + b (torch.nn.Linear).");
  linear
      .def(py::init<int64_t, int64_t, bool>(), py::arg("in_features"), py::arg("out_features"),
          py::arg("bias") = true)
      .def_readonly("in_features", &nn::Linear::in_features)
      .def_readonly("out_features", &nn::Linear::out_features);
  def_unary_forward(linear);

  Class<nn::Dropout> dropout(m, "Dropout", "Inverted dropout; the identity in eval mode.");
  dropout
      .def(py::init([](double p, bool inplace) {
        if (inplace) throw py::value_error("Dropout: ag has no inplace dropout (inplace=True)");
        return std::make_shared<nn::Dropout>(p);
      }),
          py::arg("p") = 0.5, py::arg("inplace") = false)
      .def_readwrite("p", &nn::Dropout::p);
  def_unary_forward(dropout);

  auto no_inplace = [](const char* name, bool inplace) {
    if (inplace) throw py::value_error(std::string(name) + ": ag has no inplace form");
  };
  Class<nn::ReLU> relu(m, "ReLU");
  relu.def(py::init([no_inplace](bool inplace) {
    no_inplace("ReLU", inplace);
    return std::make_shared<nn::ReLU>();
  }),
      py::arg("inplace") = false);
  def_unary_forward(relu);
  Class<nn::GELU> gelu(m, "GELU");
  gelu.def(py::init<std::string>(), py::arg("approximate") = "none")
      .def_readonly("approximate", &nn::GELU::approximate);
  def_unary_forward(gelu);
  Class<nn::SiLU> silu(m, "SiLU");
  silu.def(py::init([no_inplace](bool inplace) {
    no_inplace("SiLU", inplace);
    return std::make_shared<nn::SiLU>();
  }),
      py::arg("inplace") = false);
  def_unary_forward(silu);
  Class<nn::Tanh> tanh(m, "Tanh");
  tanh.def(py::init<>());
  def_unary_forward(tanh);

  Class<nn::Embedding> embedding(m, "Embedding", "A table of vectors looked up by index.");
  embedding.def(py::init<int64_t, int64_t>(), py::arg("num_embeddings"), py::arg("embedding_dim"))
      .def_readonly("num_embeddings", &nn::Embedding::num_embeddings)
      .def_readonly("embedding_dim", &nn::Embedding::embedding_dim);
  def_unary_forward(embedding);

  Class<nn::LayerNorm> layer_norm(m, "LayerNorm", "Normalises the last dims (torch.nn.LayerNorm).");
  layer_norm
      .def(
          py::init([](py::object normalized_shape, double eps, bool elementwise_affine, bool bias) {
            return std::make_shared<nn::LayerNorm>(
                normalized_shape_of(normalized_shape), eps, elementwise_affine, bias);
          }),
          py::arg("normalized_shape"), py::arg("eps") = 1e-5, py::arg("elementwise_affine") = true,
          py::arg("bias") = true)
      .def_property_readonly("normalized_shape",
          [](const nn::LayerNorm& l) { return py::tuple(py::cast(l.normalized_shape)); })
      .def_readonly("eps", &nn::LayerNorm::eps);
  def_unary_forward(layer_norm);

  // torch.nn.RMSNorm (PyTorch 2.4): eps None is torch.finfo(x.dtype).eps at each forward; without
  // elementwise_affine, weight is None.
  Class<nn::RMSNorm> rms_norm(
      m, "RMSNorm", "x / sqrt(mean(x²) + eps) · weight over the last dims (torch.nn.RMSNorm).");
  rms_norm
      .def(py::init(
               [](py::object normalized_shape, std::optional<double> eps, bool elementwise_affine) {
                 return std::make_shared<nn::RMSNorm>(
                     normalized_shape_of(normalized_shape, "RMSNorm"), eps, elementwise_affine);
               }),
          py::arg("normalized_shape"), py::arg("eps") = py::none(),
          py::arg("elementwise_affine") = true)
      .def_property_readonly("normalized_shape",
          [](const nn::RMSNorm& l) { return py::tuple(py::cast(l.normalized_shape)); })
      .def_readonly("eps", &nn::RMSNorm::eps)
      .def_property_readonly(
          "elementwise_affine", [](const nn::RMSNorm& l) { return l.weight.defined(); });
  def_unary_forward(rms_norm);

  // torch.nn.BatchNorm1d: momentum None is the cumulative average; running_mean, running_var and
  // num_batches_tracked are buffers (module.running_mean reads them, state_dict() holds them).
  Class<nn::BatchNorm1d> batch_norm(
      m, "BatchNorm1d", "Normalises each channel over the batch (torch.nn.BatchNorm1d).");
  batch_norm
      .def(py::init<int64_t, double, std::optional<double>, bool, bool>(), py::arg("num_features"),
          py::arg("eps") = 1e-5, py::arg("momentum") = 0.1, py::arg("affine") = true,
          py::arg("track_running_stats") = true)
      .def_readonly("num_features", &nn::BatchNorm1d::num_features)
      .def_readonly("eps", &nn::BatchNorm1d::eps)
      .def_readonly("momentum", &nn::BatchNorm1d::momentum)
      .def_property_readonly("affine", [](const nn::BatchNorm1d& b) { return b.weight.defined(); })
      .def_property_readonly(
          "track_running_stats", [](const nn::BatchNorm1d& b) { return b.running_mean.defined(); });
  def_unary_forward(batch_norm);
}

void bind_attention(py::module_& m) {
  Class<nn::DotProductAttention> dot(
      m, "DotProductAttention", "d2l's scaled dot-product attention.");
  dot.def(py::init<double>(), py::arg("dropout"))
      .def_property_readonly("attention_weights",
          [](const nn::DotProductAttention& a) { return tensor_or_none(a.attention_weights()); });
  def_attention_forward(dot);

  Class<nn::AdditiveAttention> additive(m, "AdditiveAttention", "d2l's additive attention.");
  additive
      .def(py::init<int64_t, int64_t, int64_t, double>(), py::arg("key_size"),
          py::arg("query_size"), py::arg("num_hiddens"), py::arg("dropout"))
      .def_property_readonly("attention_weights",
          [](const nn::AdditiveAttention& a) { return tensor_or_none(a.attention_weights()); });
  def_attention_forward(additive);

  // d2l's seven arguments, and as keywords the options of the modern block
  // (nn::MultiHeadAttentionOptions): grouped-query heads and positions inside the attention.
  Class<nn::MultiHeadAttention> mha(m, "MultiHeadAttention", "d2l's multi-head attention.");
  mha.def(py::init([](int64_t key_size, int64_t query_size, int64_t value_size, int64_t num_hiddens,
                       int64_t num_heads, double dropout, bool bias, int64_t num_kv_heads,
                       const std::string& positions, const std::string& rope_pairs,
                       double rope_base) {
       nn::MultiHeadAttentionOptions options;
       options.num_kv_heads = num_kv_heads;
       options.positions = attention_positions_of(positions);
       options.rope_pairs = nn::parse_rotary_pairs(rope_pairs, "MultiHeadAttention: rope_pairs");
       options.rope_base = rope_base;
       return std::make_shared<nn::MultiHeadAttention>(
           key_size, query_size, value_size, num_hiddens, num_heads, dropout, bias, options);
     }),
         py::arg("key_size"), py::arg("query_size"), py::arg("value_size"), py::arg("num_hiddens"),
         py::arg("num_heads"), py::arg("dropout"), py::arg("bias") = false, py::kw_only(),
         py::arg("num_kv_heads") = 0, py::arg("positions") = "none",
         py::arg("rope_pairs") = "interleaved", py::arg("rope_base") = 10000.0)
      .def_readonly("num_heads", &nn::MultiHeadAttention::num_heads)
      .def_readonly("num_kv_heads", &nn::MultiHeadAttention::num_kv_heads)
      .def_property_readonly(
          "rotary", [](const nn::MultiHeadAttention& a) { return a.rotary; },
          "The RotaryEmbedding of each head's features (positions='rope'), else None.")
      .def_property_readonly("attention_weights",
          [](const nn::MultiHeadAttention& a) { return tensor_or_none(a.attention_weights()); })
      // A decoder's causal self-attention over its own key/value cache, as a function: X
      // (B, T, query_size) at positions first_position …, the cache (B, num_kv_heads, S, D/H) of
      // the positions before (None: empty) -> (output (B, T, num_hiddens), keys, values), the
      // cache with the T new positions appended.
      .def(
          "causal_self_attention",
          [](nn::MultiHeadAttention& a, const Tensor& X, int64_t first_position,
              std::optional<Tensor> cached_keys, std::optional<Tensor> cached_values) {
            if (cached_keys.has_value() != cached_values.has_value())
              fail<ValueError>(
                  "MultiHeadAttention.causal_self_attention: give both cached_keys and "
                  "cached_values, or neither (an empty cache)");
            Tensor keys = optional_tensor(cached_keys), values = optional_tensor(cached_values);
            Tensor out;
            {
              py::gil_scoped_release release;
              out = a.causal_self_attention(X, first_position, &keys, &values);
            }
            return py::make_tuple(out, keys, values);
          },
          py::arg("X"), py::arg("first_position") = 0, py::arg("cached_keys") = py::none(),
          py::arg("cached_values") = py::none());
  def_attention_forward(mha);
  // DotProductAttention's ALiBi slopes (MultiHeadAttention(positions='alibi') sets them).
  dot.def_property_readonly(
      "alibi_slopes", [](const nn::DotProductAttention& a) { return a.alibi_slopes; });

  // Rotary position embedding (nn/positions.h): no parameters, no buffers; cos and sin cached.
  Class<nn::RotaryEmbedding> rotary(m, "RotaryEmbedding",
      "Turns feature pair j of position t by t·base^(-2j/dim) (RoPE; Su et al. 2021).");
  rotary
      .def(py::init([](int64_t dim, double base, const std::string& pairs) {
        return std::make_shared<nn::RotaryEmbedding>(
            dim, base, nn::parse_rotary_pairs(pairs, "RotaryEmbedding: pairs"));
      }),
          py::arg("dim"), py::arg("base") = 10000.0, py::arg("pairs") = "interleaved")
      .def_readonly("dim", &nn::RotaryEmbedding::dim)
      .def_readonly("base", &nn::RotaryEmbedding::base)
      .def_property_readonly(
          "pairs", [](const nn::RotaryEmbedding& r) { return nn::rotary_pairs_name(r.pairs); })
      .def(
          "forward",
          [](nn::RotaryEmbedding& r, const Tensor& x, int64_t first_position) {
            py::gil_scoped_release release;
            return r.forward(x, first_position);
          },
          py::arg("x"), py::arg("first_position") = 0)
      .def(
          "angles",
          [](nn::RotaryEmbedding& r, int64_t first_position, int64_t T,
              std::optional<DType> dtype) {
            auto [cos, sin] = r.angles(first_position, T, dtype.value_or(r.cos_cached.dtype()));
            return py::make_tuple(cos, sin);
          },
          py::arg("first_position"), py::arg("T"), py::arg("dtype") = py::none(),
          "(cos θ, sin θ) of positions first_position … first_position + T - 1, each (T, dim/2), "
          "in dtype (None: the module's).");

  // forward(X) = dropout(X + P[:, first_position : first_position + T]); P is a buffer.
  auto positional_forward = [](auto& cls) {
    using M = typename std::remove_reference_t<decltype(cls)>::type;
    cls.def(
        "forward",
        [](M& m, const Tensor& X, int64_t first_position) {
          py::gil_scoped_release release;
          return m.forward(X, first_position);
        },
        py::arg("X"), py::arg("first_position") = 0);
  };
  Class<nn::PositionalEncoding> pos(m, "PositionalEncoding", "d2l's sinusoidal positions.");
  pos.def(py::init<int64_t, double, int64_t>(), py::arg("num_hiddens"), py::arg("dropout"),
         py::arg("max_len") = 1000)
      .def_readonly("num_hiddens", &nn::PositionalEncoding::num_hiddens)
      .def_readonly("max_len", &nn::PositionalEncoding::max_len);
  positional_forward(pos);
  Class<nn::LearnedPositionalEncoding> learned(
      m, "LearnedPositionalEncoding", "A trained (1, max_len, num_hiddens) positional table.");
  learned
      .def(py::init<int64_t, double, int64_t>(), py::arg("num_hiddens"), py::arg("dropout"),
          py::arg("max_len") = 1000)
      .def_readonly("num_hiddens", &nn::LearnedPositionalEncoding::num_hiddens)
      .def_readonly("max_len", &nn::LearnedPositionalEncoding::max_len);
  positional_forward(learned);
}

void bind_transformer(py::module_& m) {
  Class<nn::PositionWiseFFN> ffn(m, "PositionWiseFFN", "d2l's position-wise feed-forward network.");
  ffn.def(py::init<int64_t, int64_t, int64_t>(), py::arg("ffn_num_input"),
      py::arg("ffn_num_hiddens"), py::arg("ffn_num_outputs"));
  def_unary_forward(ffn);

  // Llama's feed-forward: w2(silu(w1(X)) * w3(X)), no biases by default.
  Class<nn::SwiGLUFFN> swiglu(m, "SwiGLUFFN", "Llama's SwiGLU feed-forward network.");
  swiglu.def(py::init<int64_t, int64_t, int64_t, bool>(), py::arg("ffn_num_input"),
      py::arg("ffn_num_hiddens"), py::arg("ffn_num_outputs"), py::arg("bias") = false);
  def_unary_forward(swiglu);

  Class<nn::AddNorm>(m, "AddNorm", "d2l's LayerNorm(dropout(Y) + X).")
      .def(py::init([](py::object normalized_shape, double dropout) {
        return std::make_shared<nn::AddNorm>(normalized_shape_of(normalized_shape), dropout);
      }),
          py::arg("normalized_shape"), py::arg("dropout"))
      .def(
          "forward",
          [](const nn::AddNorm& a, const Tensor& X, const Tensor& Y) {
            py::gil_scoped_release release;
            return a.forward(X, Y);
          },
          py::arg("X"), py::arg("Y"));

  Class<nn::TransformerEncoderBlock>(m, "TransformerEncoderBlock", "d2l's encoder block.")
      .def(py::init([](int64_t key_size, int64_t query_size, int64_t value_size,
                        int64_t num_hiddens, py::object norm_shape, int64_t ffn_num_input,
                        int64_t ffn_num_hiddens, int64_t num_heads, double dropout, bool use_bias) {
        return std::make_shared<nn::TransformerEncoderBlock>(key_size, query_size, value_size,
            num_hiddens, normalized_shape_of(norm_shape), ffn_num_input, ffn_num_hiddens, num_heads,
            dropout, use_bias);
      }),
          py::arg("key_size"), py::arg("query_size"), py::arg("value_size"), py::arg("num_hiddens"),
          py::arg("norm_shape"), py::arg("ffn_num_input"), py::arg("ffn_num_hiddens"),
          py::arg("num_heads"), py::arg("dropout"), py::arg("use_bias") = false)
      .def(
          "forward",
          [](nn::TransformerEncoderBlock& b, const Tensor& X, std::optional<Tensor> valid_lens) {
            py::gil_scoped_release release;
            return b.forward(X, optional_tensor(valid_lens));
          },
          py::arg("X"), py::arg("valid_lens") = py::none());

  Class<nn::TransformerEncoder>(m, "TransformerEncoder", "d2l's Transformer encoder.")
      .def(py::init([](int64_t vocab_size, int64_t key_size, int64_t query_size, int64_t value_size,
                        int64_t num_hiddens, py::object norm_shape, int64_t ffn_num_input,
                        int64_t ffn_num_hiddens, int64_t num_heads, int64_t num_layers,
                        double dropout, bool use_bias) {
        return std::make_shared<nn::TransformerEncoder>(vocab_size, key_size, query_size,
            value_size, num_hiddens, normalized_shape_of(norm_shape), ffn_num_input,
            ffn_num_hiddens, num_heads, num_layers, dropout, use_bias);
      }),
          py::arg("vocab_size"), py::arg("key_size"), py::arg("query_size"), py::arg("value_size"),
          py::arg("num_hiddens"), py::arg("norm_shape"), py::arg("ffn_num_input"),
          py::arg("ffn_num_hiddens"), py::arg("num_heads"), py::arg("num_layers"),
          py::arg("dropout"), py::arg("use_bias") = false)
      .def(
          "forward",
          [](nn::TransformerEncoder& e, const Tensor& X, std::optional<Tensor> valid_lens) {
            py::gil_scoped_release release;
            return e.forward(X, optional_tensor(valid_lens));
          },
          py::arg("X"), py::arg("valid_lens") = py::none())
      .def_property_readonly("attention_weights", &nn::TransformerEncoder::attention_weights);

  // d2l's decoder state, opaque but readable; forward updates it in place and returns it.
  py::class_<nn::DecoderState, std::shared_ptr<nn::DecoderState>>(m, "DecoderState",
      "What the decoder carries between calls (d2l's state list): enc_outputs, enc_valid_lens, "
      "and per block the inputs of its self-attention so far.")
      .def_property_readonly(
          "enc_outputs", [](const nn::DecoderState& s) { return tensor_or_none(s.enc_outputs); })
      .def_property_readonly("enc_valid_lens",
          [](const nn::DecoderState& s) { return tensor_or_none(s.enc_valid_lens); })
      .def_property_readonly("key_values", [](const nn::DecoderState& s) {
        py::list out;
        for (const Tensor& t : s.key_values) out.append(tensor_or_none(t));
        return out;
      });

  Class<nn::TransformerDecoderBlock>(m, "TransformerDecoderBlock", "d2l's decoder block.")
      .def(py::init([](int64_t key_size, int64_t query_size, int64_t value_size,
                        int64_t num_hiddens, py::object norm_shape, int64_t ffn_num_input,
                        int64_t ffn_num_hiddens, int64_t num_heads, double dropout, int64_t i) {
        return std::make_shared<nn::TransformerDecoderBlock>(key_size, query_size, value_size,
            num_hiddens, normalized_shape_of(norm_shape), ffn_num_input, ffn_num_hiddens, num_heads,
            dropout, i);
      }),
          py::arg("key_size"), py::arg("query_size"), py::arg("value_size"), py::arg("num_hiddens"),
          py::arg("norm_shape"), py::arg("ffn_num_input"), py::arg("ffn_num_hiddens"),
          py::arg("num_heads"), py::arg("dropout"), py::arg("i"))
      .def_readonly("i", &nn::TransformerDecoderBlock::i)
      .def(
          "forward",
          [](nn::TransformerDecoderBlock& b, const Tensor& X,
              std::shared_ptr<nn::DecoderState> state) {
            Tensor out;
            {
              py::gil_scoped_release release;
              out = b.forward(X, *state);
            }
            return py::make_tuple(out, state);
          },
          py::arg("X"), py::arg("state"));

  Class<nn::TransformerDecoder>(m, "TransformerDecoder", "d2l's Transformer decoder.")
      .def(py::init(
               [](int64_t vocab_size, int64_t key_size, int64_t query_size, int64_t value_size,
                   int64_t num_hiddens, py::object norm_shape, int64_t ffn_num_input,
                   int64_t ffn_num_hiddens, int64_t num_heads, int64_t num_layers, double dropout) {
                 return std::make_shared<nn::TransformerDecoder>(vocab_size, key_size, query_size,
                     value_size, num_hiddens, normalized_shape_of(norm_shape), ffn_num_input,
                     ffn_num_hiddens, num_heads, num_layers, dropout);
               }),
          py::arg("vocab_size"), py::arg("key_size"), py::arg("query_size"), py::arg("value_size"),
          py::arg("num_hiddens"), py::arg("norm_shape"), py::arg("ffn_num_input"),
          py::arg("ffn_num_hiddens"), py::arg("num_heads"), py::arg("num_layers"),
          py::arg("dropout"))
      .def_readonly("num_layers", &nn::TransformerDecoder::num_layers)
      .def(
          "init_state",
          [](const nn::TransformerDecoder& d, const Tensor& enc_outputs,
              std::optional<Tensor> enc_valid_lens) {
            return std::make_shared<nn::DecoderState>(
                d.init_state(enc_outputs, optional_tensor(enc_valid_lens)));
          },
          py::arg("enc_outputs"), py::arg("enc_valid_lens") = py::none())
      .def(
          "forward",
          [](nn::TransformerDecoder& d, const Tensor& X, std::shared_ptr<nn::DecoderState> state) {
            Tensor out;
            {
              py::gil_scoped_release release;
              out = d.forward(X, *state);
            }
            return py::make_tuple(out, state);  // d2l: (logits, state)
          },
          py::arg("X"), py::arg("state"))
      .def_property_readonly(
          "attention_weights",
          [](const nn::TransformerDecoder& d) {
            return py::make_tuple(d.self_attention_weights(), d.cross_attention_weights());
          },
          "(self-attention weights, encoder-decoder attention weights), one per block each.");

  Class<nn::EncoderDecoder>(m, "EncoderDecoder", "d2l's encoder-decoder.")
      .def(py::init<std::shared_ptr<nn::TransformerEncoder>,
               std::shared_ptr<nn::TransformerDecoder>>(),
          py::arg("encoder"), py::arg("decoder"))
      .def(
          "forward",
          [](nn::EncoderDecoder& ed, const Tensor& enc_X, const Tensor& dec_X,
              std::optional<Tensor> enc_valid_lens) {
            // d2l's: decoder(dec_X, decoder.init_state(encoder(enc_X, lens), lens)) -> (Y, state)
            auto state = std::make_shared<nn::DecoderState>();
            Tensor out;
            {
              py::gil_scoped_release release;
              const Tensor lens = optional_tensor(enc_valid_lens);
              *state = ed.decoder->init_state(ed.encoder->forward(enc_X, lens), lens);
              out = ed.decoder->forward(dec_X, *state);
            }
            return py::make_tuple(out, state);
          },
          py::arg("enc_X"), py::arg("dec_X"), py::arg("enc_valid_lens") = py::none());

  // The decoder-only language model (nn/language_model.h), its config as keywords.
  py::class_<nn::KVCache, std::shared_ptr<nn::KVCache>>(
      m, "KVCache", "Every block's keys and values of the positions processed so far.")
      .def("__len__", &nn::KVCache::length)
      .def_readonly("first_position", &nn::KVCache::first_position)
      .def_property_readonly("next_position", &nn::KVCache::next_position)
      .def("drop_oldest", &nn::KVCache::drop_oldest, py::arg("n"),
          "Drops the n oldest positions (a sliding window; relative positions only).")
      .def("clear", &nn::KVCache::clear);
  Class<nn::DecoderOnlyBlock>(m, "DecoderOnlyBlock");
  Class<nn::LanguageModel>(m, "LanguageModel", "A decoder-only Transformer language model.")
      .def(py::init([](int64_t vocab_size, int64_t num_hiddens, int64_t num_heads,
                        int64_t num_layers, int64_t ffn_num_hiddens, double dropout,
                        int64_t block_size, bool pre_norm, const std::string& positions,
                        bool tie_weights, int64_t num_kv_heads, const std::string& norm,
                        const std::string& ffn, const std::string& rope_pairs, double rope_base) {
        nn::LanguageModelConfig c;
        c.vocab_size = vocab_size;
        c.num_hiddens = num_hiddens;
        c.num_heads = num_heads;
        c.num_layers = num_layers;
        c.ffn_num_hiddens = ffn_num_hiddens;
        c.dropout = dropout;
        c.block_size = block_size;
        c.pre_norm = pre_norm;
        c.positions = nn::parse_position_scheme(positions, "LanguageModel: positions");
        c.tie_weights = tie_weights;
        c.num_kv_heads = num_kv_heads;
        c.norm = nn::parse_normalization(norm, "LanguageModel: norm");
        c.ffn = nn::parse_feed_forward(ffn, "LanguageModel: ffn");
        c.rope_pairs = nn::parse_rotary_pairs(rope_pairs, "LanguageModel: rope_pairs");
        c.rope_base = rope_base;
        return std::make_shared<nn::LanguageModel>(c);
      }),
          py::arg("vocab_size"), py::arg("num_hiddens") = 128, py::arg("num_heads") = 4,
          py::arg("num_layers") = 4, py::arg("ffn_num_hiddens") = 512, py::arg("dropout") = 0.1,
          py::arg("block_size") = 64, py::arg("pre_norm") = false,
          py::arg("positions") = "sinusoidal", py::arg("tie_weights") = false,
          py::arg("num_kv_heads") = 0, py::arg("norm") = "layer", py::arg("ffn") = "relu",
          py::arg("rope_pairs") = "interleaved", py::arg("rope_base") = 10000.0)
      .def(
          "forward",
          [](nn::LanguageModel& lm, const Tensor& tokens, std::shared_ptr<nn::KVCache> cache) {
            py::gil_scoped_release release;
            return lm.forward(tokens, cache.get());
          },
          py::arg("tokens"), py::arg("cache") = nullptr)
      .def("make_cache",
          [](const nn::LanguageModel& lm) {
            return std::make_shared<nn::KVCache>(lm.make_cache());
          })
      .def_property_readonly("attention_weights", &nn::LanguageModel::attention_weights)
      .def_property_readonly("max_context", &nn::LanguageModel::max_context)
      .def("extend_context", &nn::LanguageModel::extend_context, py::arg("positions"),
          "Lets forward take up to `positions` tokens (length extrapolation); learned positions "
          "refuse more than block_size.");
}

void bind_functional(py::module_& nn_module) {
  py::module_ f = nn_module.def_submodule("functional", "ag.nn.functional: layers as functions");
  f.def(
      "linear",
      [](const Tensor& input, const Tensor& weight, std::optional<Tensor> bias) {
        py::gil_scoped_release release;
        return linear(input, weight, optional_tensor(bias));
      },
      py::arg("input"), py::arg("weight"), py::arg("bias") = py::none(),
      "input · weightᵀ + bias, as torch.nn.functional.linear.");
  f.def(
      "masked_softmax",
      [](const Tensor& X, std::optional<Tensor> valid_lens) {
        py::gil_scoped_release release;
        return nn::masked_softmax(X, optional_tensor(valid_lens));
      },
      py::arg("X"), py::arg("valid_lens") = py::none(),
      "d2l's masked_softmax: softmax over the last dim ignoring positions at or past valid_lens.");
  f.def(
      "mse_loss",
      [](const Tensor& input, const Tensor& target, const std::string& reduction) {
        if (reduction != "mean")
          throw py::value_error(
              "mse_loss: ag computes reduction='mean' only, not '" + reduction + "'");
        py::gil_scoped_release release;
        return nn::mse_loss(input, target);
      },
      py::arg("input"), py::arg("target"), py::arg("reduction") = "mean");
  f.def(
      "masked_softmax_ce",
      [](const Tensor& logits, const Tensor& labels, const Tensor& valid_lens) {
        py::gil_scoped_release release;
        return nn::masked_softmax_ce(logits, labels, valid_lens);
      },
      py::arg("logits"), py::arg("labels"), py::arg("valid_lens"),
      "d2l's MaskedSoftmaxCELoss, the mean per valid token (nn/loss.h).");
}

void bind_init(py::module_& nn_module) {
  py::module_ init = nn_module.def_submodule("init", "ag.nn.init: fills parameters in place");
  // Each returns its tensor, as torch.nn.init's.
  // The random ones take PyTorch 2's generator= (None: ag's default generator).
  init.def(
      "uniform_",
      [](py::object t, double a, double b, py::handle generator) {
        nn::init::uniform_(t.cast<Tensor>(), a, b, generator_of(generator, "uniform_"));
        return t;
      },
      py::arg("tensor"), py::arg("a") = 0.0, py::arg("b") = 1.0, py::arg("generator") = py::none());
  init.def(
      "normal_",
      [](py::object t, double mean, double std, py::handle generator) {
        nn::init::normal_(t.cast<Tensor>(), mean, std, generator_of(generator, "normal_"));
        return t;
      },
      py::arg("tensor"), py::arg("mean") = 0.0, py::arg("std") = 1.0,
      py::arg("generator") = py::none());
  init.def(
      "constant_",
      [](py::object t, double val) {
        nn::init::constant_(t.cast<Tensor>(), val);
        return t;
      },
      py::arg("tensor"), py::arg("val"));
  init.def(
      "zeros_",
      [](py::object t) {
        nn::init::zeros_(t.cast<Tensor>());
        return t;
      },
      py::arg("tensor"));
  init.def(
      "ones_",
      [](py::object t) {
        nn::init::ones_(t.cast<Tensor>());
        return t;
      },
      py::arg("tensor"));
  init.def("calculate_gain", &nn::init::calculate_gain, py::arg("nonlinearity"),
      py::arg("param") = py::none());
  auto xavier = [&init](const char* name, auto fill) {
    init.def(
        name,
        [fill, name](py::object t, double gain, py::handle generator) {
          fill(t.cast<Tensor>(), gain, generator_of(generator, name));
          return t;
        },
        py::arg("tensor"), py::arg("gain") = 1.0, py::arg("generator") = py::none());
  };
  xavier("xavier_uniform_",
      [](const Tensor& t, double gain, Generator& g) { nn::init::xavier_uniform_(t, gain, g); });
  xavier("xavier_normal_",
      [](const Tensor& t, double gain, Generator& g) { nn::init::xavier_normal_(t, gain, g); });
  auto kaiming = [&init](const char* name, auto fill) {
    init.def(
        name,
        [fill, name](py::object t, double a, const std::string& mode,
            const std::string& nonlinearity, py::handle generator) {
          if (mode != "fan_in" && mode != "fan_out")
            throw py::value_error(
                std::string(name) + ": mode must be 'fan_in' or 'fan_out', not '" + mode + "'");
          const auto fan =
              mode == "fan_in" ? nn::init::FanMode::fan_in : nn::init::FanMode::fan_out;
          fill(t.cast<Tensor>(), a, fan, nonlinearity, generator_of(generator, name));
          return t;
        },
        py::arg("tensor"), py::arg("a") = 0.0, py::arg("mode") = "fan_in",
        py::arg("nonlinearity") = "leaky_relu", py::arg("generator") = py::none());
  };
  kaiming("kaiming_uniform_",
      [](const Tensor& t, double a, nn::init::FanMode mode, const std::string& nonlinearity,
          Generator& g) { nn::init::kaiming_uniform_(t, a, mode, nonlinearity, g); });
  kaiming("kaiming_normal_",
      [](const Tensor& t, double a, nn::init::FanMode mode, const std::string& nonlinearity,
          Generator& g) { nn::init::kaiming_normal_(t, a, mode, nonlinearity, g); });
}

}  // namespace

void bind_nn(py::module_& m) {
  bind_module(m);
  bind_layers(m);
  bind_attention(m);
  bind_transformer(m);
  bind_functional(m);
  bind_init(m);

  // The classes print as ag.nn.Linear, as Python users import them.
  for (auto item : m.attr("__dict__").cast<py::dict>())
    if (py::isinstance<py::type>(item.second)) item.second.attr("__module__") = "ag.nn";

  m.def("fused_kernels", &nn::fused_kernels, "Whether layers use their fused kernels.");
  m.def("set_fused_kernels", &nn::set_fused_kernels, py::arg("enabled"),
      "Fused kernels (the default) or d2l's composed path everywhere (nn/fused.h).");

  py::module_ utils = m.def_submodule("utils", "ag.nn.utils");
  utils.def(
      "clip_grad_norm_",
      [](py::object parameters, double max_norm, double norm_type) {
        if (norm_type != 2.0)
          throw py::value_error("clip_grad_norm_: ag clips the L2 norm only (norm_type=2.0)");
        std::vector<Tensor> params;
        if (py::isinstance<Tensor>(parameters))
          params.push_back(parameters.cast<Tensor>());
        else
          for (py::handle p : py::iter(parameters)) params.push_back(p.cast<Tensor>());
        double total;
        {
          py::gil_scoped_release release;
          total = optim::clip_grad_norm(params, max_norm);
        }
        return scalar_tensor(total);  // the norm before clipping, as a 0-dim tensor (PyTorch's)
      },
      py::arg("parameters"), py::arg("max_norm"), py::arg("norm_type") = 2.0,
      "Scales the gradients so their global L2 norm is at most max_norm; returns the norm before.");
}

}  // namespace ag::python
