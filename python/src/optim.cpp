// ag.optim from Python (the submodule ag._C.optim; python/ag/optim.py adds lr_scheduler's
// classes): SGD, Adam and AdamW with PyTorch's arguments and parameter groups, param_groups as
// live dicts (group["lr"] = 0.1 changes the optimizer), state_dict / load_state_dict in
// torch.optim's shape, and ag's schedules (optim/schedule.h).
#include <pybind11/stl.h>

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "optim/optimizer.h"
#include "optim/schedule.h"
#include "python/src/bindings.h"

namespace ag::python {

namespace {

using optim::Optimizer;
using OptimizerPtr = std::shared_ptr<Optimizer>;

std::string python_type(py::handle value) {
  return py::str(py::type::handle_of(value).attr("__name__"));
}

// The tensors of a group's "params": one tensor, or an iterable of them.
std::vector<Tensor> tensors_of(py::handle params, const char* optimizer) {
  if (py::isinstance<Tensor>(params)) return {params.cast<Tensor>()};
  if (py::isinstance<py::dict>(params) || !py::hasattr(params, "__iter__"))
    throw py::type_error(std::string(optimizer) +
                         ": a group's params should be a Tensor or an iterable of Tensors, got " +
                         python_type(params));
  std::vector<Tensor> out;
  for (py::handle p : py::iter(params)) {
    if (!py::isinstance<Tensor>(p))
      throw py::type_error(std::string(optimizer) +
                           ": optimizer can only optimize Tensors, but one of the params is " +
                           python_type(p));
    out.push_back(p.cast<Tensor>());
  }
  return out;
}

// PyTorch's params argument: an iterable of tensors (one group), or of dicts, each with "params"
// and its own "lr" and "weight_decay". ag keeps one value of the other options for all groups.
std::vector<optim::ParamGroup> groups_of(py::handle params, const char* optimizer) {
  if (py::isinstance<Tensor>(params) || py::isinstance<py::dict>(params) ||
      !py::hasattr(params, "__iter__"))
    throw py::type_error(std::string(optimizer) +
                         ": params should be an iterable of Tensors or dicts, but got " +
                         python_type(params));
  py::list items;
  for (py::handle item : py::iter(params)) items.append(item);
  if (items.size() == 0)
    throw py::value_error(std::string(optimizer) + ": optimizer got an empty parameter list");
  if (!py::isinstance<py::dict>(items[0])) return {optim::ParamGroup{tensors_of(items, optimizer)}};
  std::vector<optim::ParamGroup> groups;
  for (py::handle item : items) {
    if (!py::isinstance<py::dict>(item))
      throw py::type_error(std::string(optimizer) +
                           ": params mixes dicts and tensors (give a list of one or the other)");
    py::dict d = py::reinterpret_borrow<py::dict>(item);
    if (!d.contains("params"))
      throw py::value_error(std::string(optimizer) + ": a parameter group needs \"params\"");
    optim::ParamGroup group{tensors_of(d["params"], optimizer)};
    for (auto [key, value] : d) {
      const std::string k = py::str(key);
      if (k == "params") continue;
      if (k == "lr")
        group.lr = value.cast<double>();
      else if (k == "weight_decay")
        group.weight_decay = value.cast<double>();
      else
        throw py::value_error(std::string(optimizer) + ": a parameter group of ag takes its own " +
                              "\"lr\" and \"weight_decay\"; \"" + k +
                              "\" is one value for all groups (give it to the optimizer)");
    }
    groups.push_back(std::move(group));
  }
  return groups;
}

// The options every group shows besides params, lr and weight_decay, in PyTorch's names.
py::dict own_options(const Optimizer& o) {
  py::dict d;
  if (auto* sgd = dynamic_cast<const optim::SGD*>(&o)) {
    d["momentum"] = sgd->momentum;
    d["dampening"] = sgd->dampening;
    d["nesterov"] = sgd->nesterov;
  } else if (auto* adam = dynamic_cast<const optim::Adam*>(&o)) {
    d["betas"] = py::make_tuple(adam->beta1, adam->beta2);
    d["eps"] = adam->eps;
  }
  return d;
}

// One of optimizer.param_groups: a live view, so that group["lr"] = x sets the optimizer's lr, as
// in PyTorch (schedules and users do it).
struct GroupView {
  OptimizerPtr optimizer;
  std::size_t index;
  Optimizer::Group& group() const { return optimizer->param_groups().at(index); }

  py::dict as_dict() const {
    py::dict d;
    d["params"] = py::cast(group().params);
    d["lr"] = group().lr;
    d["weight_decay"] = group().weight_decay;
    for (auto [k, v] : own_options(*optimizer)) d[k] = v;
    return d;
  }
  py::object get(const std::string& key) const {
    py::dict d = as_dict();
    if (!d.contains(key)) throw py::key_error(key);
    return d[py::str(key)];
  }
  void set(const std::string& key, py::handle value) {
    if (key != "lr" && key != "weight_decay") {
      if (key == "params" || as_dict().contains(key))
        throw py::value_error(
            "param_groups: ag sets only \"lr\" and \"weight_decay\" of a group; \"" + key +
            "\" is fixed when the optimizer is made");
      throw py::key_error("param_groups: ag's groups have no \"" + key + "\"");
    }
    const double v = value.cast<double>();
    if (!(v >= 0))
      throw py::value_error("param_groups: " + key + " " + py_repr(value) + " is negative");
    (key == "lr" ? group().lr : group().weight_decay) = v;
  }
};

// optimizer.state_dict() as torch.optim's: {"state": {i: {...}}, "param_groups": [{...,
// "params": [i, ...]}]}, with "type" added (ag checks it when loading). SGD's nesterov is a bool
// and Adam's beta1, beta2 are "betas", as PyTorch names them.
py::dict state_dict_to_python(const optim::StateDict& sd) {
  py::dict state;
  for (const auto& [number, ps] : sd.state) {
    py::dict entry;
    for (const auto& [name, t] : ps.tensors) entry[py::str(name)] = t;
    for (const auto& [name, v] : ps.scalars) entry[py::str(name)] = v;
    state[py::int_(number)] = entry;
  }
  py::list groups;
  for (const auto& g : sd.param_groups) {
    py::dict d;
    for (const auto& [name, v] : g.options) {
      if (name == "beta1" || name == "beta2") continue;
      if (name == "nesterov")
        d["nesterov"] = v != 0;
      else
        d[py::str(name)] = v;
    }
    if (g.options.count("beta1"))
      d["betas"] = py::make_tuple(g.options.at("beta1"), g.options.at("beta2"));
    d["params"] = py::cast(g.params);
    groups.append(d);
  }
  py::dict out;
  out["state"] = state;
  out["param_groups"] = groups;
  out["type"] = sd.type;
  return out;
}

optim::StateDict state_dict_from_python(const Optimizer& o, py::dict d) {
  optim::StateDict sd;
  sd.type = d.contains("type") ? d["type"].cast<std::string>() : o.state_dict().type;
  if (!d.contains("state") || !d.contains("param_groups"))
    throw py::value_error("load_state_dict: a state dict has \"state\" and \"param_groups\"");
  for (auto [number, entry] : d["state"].cast<py::dict>()) {
    optim::ParamState ps;
    for (auto [name, value] : entry.cast<py::dict>()) {
      if (py::isinstance<Tensor>(value))
        ps.tensors[py::str(name)] = value.cast<Tensor>();
      else
        ps.scalars[py::str(name)] = value.cast<int64_t>();
    }
    sd.state[number.cast<std::size_t>()] = std::move(ps);
  }
  for (py::handle item : d["param_groups"]) {
    optim::GroupState g;
    for (auto [key, value] : item.cast<py::dict>()) {
      const std::string k = py::str(key);
      if (k == "params") {
        g.params = value.cast<std::vector<std::size_t>>();
      } else if (k == "betas") {
        auto betas = value.cast<std::pair<double, double>>();
        g.options["beta1"] = betas.first;
        g.options["beta2"] = betas.second;
      } else {
        g.options[k] = value.cast<double>();  // (nesterov: True is 1)
      }
    }
    sd.param_groups.push_back(std::move(g));
  }
  return sd;
}

}  // namespace

void bind_optim(py::module_& m) {
  py::class_<GroupView>(m, "_ParamGroup", "One of optimizer.param_groups, as a live dict.")
      .def("__getitem__", &GroupView::get)
      .def("__setitem__", &GroupView::set)
      .def("__contains__",
          [](const GroupView& g, const std::string& k) { return g.as_dict().contains(k); })
      .def("__iter__", [](const GroupView& g) { return py::iter(g.as_dict()); })
      .def("__len__", [](const GroupView& g) { return g.as_dict().size(); })
      .def("keys", [](const GroupView& g) { return g.as_dict().attr("keys")(); })
      .def("items", [](const GroupView& g) { return g.as_dict().attr("items")(); })
      .def("values", [](const GroupView& g) { return g.as_dict().attr("values")(); })
      .def(
          "get",
          [](const GroupView& g, const std::string& k, py::object fallback) {
            py::dict d = g.as_dict();
            return d.contains(k) ? py::object(d[py::str(k)]) : fallback;
          },
          py::arg("key"), py::arg("default") = py::none())
      .def("__repr__", [](const GroupView& g) { return py_repr(g.as_dict()); });

  py::class_<Optimizer, OptimizerPtr>(m, "Optimizer", "The base of SGD, Adam and AdamW.")
      .def(
          "step",
          [](Optimizer& o, py::object closure) {
            py::object loss = py::none();
            if (!closure.is_none()) loss = closure();  // PyTorch's closure: recomputes the loss
            py::gil_scoped_release release;
            o.step();
            return loss;
          },
          py::arg("closure") = py::none(), "One update of every parameter that has a gradient.")
      .def(
          "zero_grad",
          [](Optimizer& o, bool set_to_none) {
            if (set_to_none) return o.zero_grad();
            for (auto& g : o.param_groups())
              for (auto& p : g.params)
                if (p.grad().defined()) p.grad().zero_();
          },
          py::arg("set_to_none") = true)
      .def_property_readonly("param_groups",
          [](const OptimizerPtr& o) {
            py::list out;
            for (std::size_t i = 0; i < o->param_groups().size(); ++i) out.append(GroupView{o, i});
            return out;
          })
      .def("state_dict", [](const Optimizer& o) { return state_dict_to_python(o.state_dict()); })
      .def(
          "load_state_dict",
          [](Optimizer& o, py::dict state_dict) {
            o.load_state_dict(state_dict_from_python(o, state_dict));
          },
          py::arg("state_dict"))
      .def("__repr__", [](const OptimizerPtr& o) {
        // PyTorch's: "Adam (\nParameter Group 0\n    betas: (0.9, 0.999)\n ...\n)"
        std::string s = o->state_dict().type + " (";
        for (std::size_t i = 0; i < o->param_groups().size(); ++i) {
          s += "\nParameter Group " + std::to_string(i);
          py::dict d = GroupView{o, i}.as_dict();
          py::list keys = py::module_::import("builtins").attr("sorted")(d.attr("keys")());
          for (py::handle k : keys)
            if (py::str(k).cast<std::string>() != "params")
              s += "\n    " + py::str(k).cast<std::string>() + ": " + py_repr(d[k]);
        }
        return s + "\n)";
      });

  py::class_<optim::SGD, Optimizer, std::shared_ptr<optim::SGD>>(m, "SGD",
      "Stochastic gradient descent with momentum, dampening and Nesterov (torch.optim.SGD).")
      .def(py::init([](py::object params, double lr, double momentum, double dampening,
                        double weight_decay, bool nesterov, bool maximize) {
        if (maximize) throw py::value_error("SGD: ag minimises (maximize=True)");
        return std::make_shared<optim::SGD>(
            groups_of(params, "SGD"), lr, momentum, dampening, weight_decay, nesterov);
      }),
          py::arg("params"), py::arg("lr"), py::arg("momentum") = 0.0, py::arg("dampening") = 0.0,
          py::arg("weight_decay") = 0.0, py::arg("nesterov") = false, py::kw_only(),
          py::arg("maximize") = false)
      .def_readonly("momentum", &optim::SGD::momentum)
      .def_readonly("dampening", &optim::SGD::dampening)
      .def_readonly("nesterov", &optim::SGD::nesterov);

  auto adam_init = [](const char* name, bool decoupled) {
    return [name, decoupled](py::object params, double lr, std::pair<double, double> betas,
               double eps, double weight_decay, bool amsgrad) -> std::shared_ptr<optim::Adam> {
      if (amsgrad) throw py::value_error(std::string(name) + ": ag has no amsgrad");
      auto groups = groups_of(params, name);
      if (decoupled) return std::make_shared<optim::AdamW>(groups, lr, betas, eps, weight_decay);
      return std::make_shared<optim::Adam>(groups, lr, betas, eps, weight_decay);
    };
  };
  py::class_<optim::Adam, Optimizer, std::shared_ptr<optim::Adam>>(
      m, "Adam", "Adam, weight decay as an L2 penalty on the gradient (torch.optim.Adam).")
      .def(py::init(adam_init("Adam", false)), py::arg("params"), py::arg("lr") = 1e-3,
          py::arg("betas") = std::pair<double, double>{0.9, 0.999}, py::arg("eps") = 1e-8,
          py::arg("weight_decay") = 0.0, py::arg("amsgrad") = false)
      .def_property_readonly(
          "betas", [](const optim::Adam& a) { return py::make_tuple(a.beta1, a.beta2); })
      .def_readonly("eps", &optim::Adam::eps);
  py::class_<optim::AdamW, optim::Adam, std::shared_ptr<optim::AdamW>>(
      m, "AdamW", "Adam with decoupled weight decay (torch.optim.AdamW).")
      .def(py::init([adam_init](py::object params, double lr, std::pair<double, double> betas,
                        double eps, double weight_decay, bool amsgrad) {
        return std::static_pointer_cast<optim::AdamW>(
            adam_init("AdamW", true)(params, lr, betas, eps, weight_decay, amsgrad));
      }),
          py::arg("params"), py::arg("lr") = 1e-3,
          py::arg("betas") = std::pair<double, double>{0.9, 0.999}, py::arg("eps") = 1e-8,
          py::arg("weight_decay") = 1e-2, py::arg("amsgrad") = false);

  // ---- schedules: a multiplier f(t) of each group's base lr at update t = 1, 2, ... -----------
  py::class_<optim::Schedule>(m, "Schedule", "A multiplier of the base lr at update t = 1, 2, ...")
      .def(
          "__call__", [](const optim::Schedule& f, int64_t t) { return f(t); }, py::arg("t"));
  m.def("step_decay", &optim::step_decay, py::arg("step_size"), py::arg("gamma"),
      "gamma ** ((t - 1) // step_size)");
  m.def("cosine_with_warmup", &optim::cosine_with_warmup, py::arg("warmup"), py::arg("total"),
      py::arg("min_factor") = 0.0,
      "Linear warm-up over `warmup` updates, then a half cosine down to min_factor at `total`.");
  m.def("transformer_schedule", &optim::transformer_schedule, py::arg("d_model"), py::arg("warmup"),
      "d_model^-0.5 * min(t^-0.5, t * warmup^-1.5) (Vaswani et al.)");

  py::class_<optim::Scheduler>(m, "Scheduler",
      "Applies a schedule to an optimizer: each group's lr is its base lr times f(t).")
      .def(py::init<Optimizer&, optim::Schedule>(), py::arg("optimizer"), py::arg("schedule"),
          py::keep_alive<1, 2>())
      .def(py::init([](Optimizer& o, py::function f) {
        // A Python schedule, called from C++ with the GIL held (bindings.h).
        auto function = held(std::move(f));
        return std::make_unique<optim::Scheduler>(o, [function](int64_t t) {
          py::gil_scoped_acquire gil;
          return (*function)(t).cast<double>();
        });
      }),
          py::arg("optimizer"), py::arg("schedule"), py::keep_alive<1, 2>())
      .def("step", &optim::Scheduler::step)
      .def_property("current_step", &optim::Scheduler::current_step, &optim::Scheduler::set_step)
      .def("lr", &optim::Scheduler::lr, py::arg("group") = 0);

  // The classes print as ag.optim.Adam, as Python users import them.
  for (auto item : m.attr("__dict__").cast<py::dict>())
    if (py::isinstance<py::type>(item.second)) item.second.attr("__module__") = "ag.optim";
}

}  // namespace ag::python
