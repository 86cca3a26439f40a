// ag::nn::Module — the base of every layer, as torch.nn.Module.
//
// A module owns named parameters (trained), named buffers (saved, not trained: the positional
// encoding table) and named submodules. Names are what checkpoints and printing use:
// named_parameters() walks the tree and joins names with dots, as PyTorch's state_dict does
// ("encoder.blks.0.attention.W_q.weight").
//
// A layer's parameters are members bound to the module's own slots (`Tensor& weight;`, bound to
// what register_parameter returns), so the member and the registration are one: assigning another
// tensor to the member — nanoGPT's tying, `lm_head->weight = wte->weight` — replaces the
// registration, as PyTorch's setattr does. A tensor reachable under two names (tied) is one
// parameter: parameters() and named_parameters() list it once, under its first name (PyTorch's
// remove_duplicate); state_dict() keeps both names, and load_state_dict keeps them tied.
#pragma once

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "autograd/autograd.h"
#include "autograd/ops.h"

namespace ag::nn {

// A state dict that does not fit the module strictly: missing or unexpected names, other shapes
// or dtypes (PyTorch's load_state_dict raises a RuntimeError here).
class StateDictError : public RuntimeError {
 public:
  using RuntimeError::RuntimeError;
};

class Module {
 public:
  virtual ~Module() = default;
  Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // The class name printed in the repr ("Linear", "MultiHeadAttention").
  virtual std::string type_name() const = 0;
  // What goes between the parentheses of the repr, as PyTorch's extra_repr
  // ("in_features=100, out_features=100, bias=False").
  virtual std::string extra_repr() const { return {}; }
  // PyTorch's repr: the extra repr, then one "(name): child" line per submodule, indented.
  std::string repr() const;

  // ---- the tree ---------------------------------------------------------------------------------
  // Dotted names, in registration order; a tensor under two names once, at its first (or, with
  // remove_duplicate false, under every name).
  std::vector<std::pair<std::string, Tensor>> named_parameters(bool remove_duplicate = true) const;
  std::vector<Tensor> parameters() const;  // each tensor once
  // Every buffer, or only the persistent ones: what PyTorch's state_dict() holds and a
  // safetensors file of the module carries (io/safetensors.h). Each tensor once, as above.
  std::vector<std::pair<std::string, Tensor>> named_buffers(
      bool persistent_only = false, bool remove_duplicate = true) const;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> named_children() const {
    return children_;
  }
  int64_t num_parameters() const;  // total number of elements, a tied tensor once

  // Runs fn on this module and every submodule, depth first (parents before children).
  void apply(const std::function<void(Module&)>& fn);

  // ---- modes ------------------------------------------------------------------------------------
  // Training mode (dropout active) or evaluation mode; recursive.
  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }

  // Drops the gradients of every parameter.
  void zero_grad();

  // ---- state (what checkpoints hold; io/checkpoint.h writes it to files) ------------------------
  // Every parameter and buffer by dotted name (the tensors themselves, not copies); a tied tensor
  // under each of its names, as PyTorch's state_dict.
  std::map<std::string, Tensor> state_dict() const;
  // Copies `state` into the parameters and buffers of the same names. Strict (the default): the
  // names must match exactly and every shape and dtype too; all problems are reported together in
  // one StateDictError ("checkpoint: missing [decoder.dense.bias]; shape mismatch
  // encoder.blks.0.ffn.dense1.weight: file [64,32], model [128,32]") and nothing is changed.
  // A dtype may differ only where no value changes: an int64 or bool entry loads into a float
  // parameter, and a float one into an int64 or bool buffer, when each of its values is exact in the
  // model's dtype (whole numbers within 2^24 for float32, 2^53 for float64; 0 and 1 for bool);
  // otherwise it is a "dtype mismatch" naming the first value that is not. float32 and float64 do
  // not mix (convert the model or the file's tensors first).
  // The names of one tied tensor must hold equal values (else "tied ... differ"): it stays tied.
  // A non-persistent buffer (computed by its module) of another shape in `state` is no mismatch:
  // the module keeps its own (RotaryEmbedding's tables, grown to the longest sequence seen).
  // Not strict: the entries that fit are loaded and the problems are returned, one per entry.
  std::vector<std::string> load_state_dict(
      const std::map<std::string, Tensor>& state, bool strict = true);

  // Converts every floating parameter and buffer to `dtype` (float32 or float64: float64 for
  // gradient checks) in place; int64 and bool buffers stay as they are, as in PyTorch.
  // The handles the layers hold stay valid; gradients are dropped. Buffers computed by a formula
  // are computed again in the new dtype (recompute_buffers), not widened from float32.
  void to(DType dtype);

  // ---- this module's own entries by local name (no dots), for bindings: Python's attribute
  // access `lin.weight`, `lin.bias = None`, `lm_head.weight = wte.weight` (python/src/nn.cpp) ----
  // The slot of parameter / buffer `name` of this module itself, or nullptr if there is none.
  // Assigning to a parameter slot is the tying above.
  Tensor* parameter_slot(const std::string& name);
  Tensor* buffer_slot(const std::string& name);
  // The local names, in registration order (empty parameter slots included).
  std::vector<std::string> parameter_names() const;
  std::vector<std::string> buffer_names() const;
  bool is_persistent_buffer(const std::string& name) const {
    return !non_persistent_buffers_.count(name);
  }

 protected:
  // Called by to(dtype) on every module of the tree once its tensors are converted. A module
  // whose buffers come from a formula (PositionalEncoding's table) recomputes them in `dtype`.
  virtual void recompute_buffers(DType /*dtype*/) {}

  // Registers `tensor` as the trained parameter `name` (sets requires_grad) and returns the
  // module's slot for it, valid as long as the module: bind a member to it
  // (`Tensor& weight;` initialised with `weight(register_parameter("weight", ...))`) and the
  // member is the registration. An undefined tensor registers an empty slot (PyTorch's
  // register_parameter(name, None), Linear's bias=False), which the walks skip.
  Tensor& register_parameter(const std::string& name, Tensor tensor);
  // A tensor the module keeps but does not train, in a slot as above. Persistent by default (in
  // every state dict); not persistent (PyTorch's persistent=False): computed by the module itself
  // (PositionalEncoding's table), so files for other programs (safetensors) leave it out and
  // nn::summary counts it apart. ag's own checkpoints hold every buffer.
  Tensor& register_buffer(const std::string& name, Tensor tensor, bool persistent = true);
  template <class M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> module) {
    add_child(name, module);
    return module;
  }
  // Puts `module` in the place of the registered submodule `name` (a ValueError if there is
  // none): Python's `self.lin = Linear(...)` a second time. Only for modules that hold their
  // children by name alone (written in Python): a C++ layer's typed members would still point at
  // the old child.
  void replace_module(const std::string& name, std::shared_ptr<Module> module);

 private:
  void check_new_name(const std::string& name) const;
  void add_child(const std::string& name, std::shared_ptr<Module> module);
  enum class Collect { parameters, buffers, persistent_buffers };
  // Appends the entries of this module and its children; with `seen`, each tensor once.
  void collect(const std::string& prefix, Collect what,
      std::vector<std::pair<std::string, Tensor>>& out,
      std::unordered_set<const void*>* seen) const;

  bool training_ = true;
  // deques: the slots stay where they are as more are registered (members are bound to them).
  std::deque<std::pair<std::string, Tensor>> parameters_;
  std::deque<std::pair<std::string, Tensor>> buffers_;
  std::set<std::string> non_persistent_buffers_;  // local names, a subset of buffers_
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
};

std::ostream& operator<<(std::ostream& out, const Module& module);

// A list of submodules named "0", "1", ... (torch.nn.ModuleList): the Transformer's blocks.
//   for (const auto& block : *blocks) x = std::static_pointer_cast<Block>(block)->forward(x);
//   auto first = blocks->at<Block>(0);  // checked: a ValueError if module 0 is no Block
class ModuleList : public Module {
 public:
  std::string type_name() const override { return "ModuleList"; }
  template <class M>
  std::shared_ptr<M> push_back(std::shared_ptr<M> module) {
    register_module(std::to_string(modules_.size()), module);
    modules_.push_back(module);
    return module;
  }
  std::size_t size() const { return modules_.size(); }
  bool empty() const { return modules_.empty(); }
  // Module i; a negative i counts from the end, as Python's; out of range is a ValueError.
  std::shared_ptr<Module> operator[](int64_t i) const {
    const auto n = static_cast<int64_t>(modules_.size());
    if (i < -n || i >= n)
      fail<ValueError>("ModuleList: index ", i, " is out of range for ", n, " modules");
    return modules_[static_cast<std::size_t>(i < 0 ? i + n : i)];
  }
  auto begin() const { return modules_.begin(); }
  auto end() const { return modules_.end(); }
  // Module i as an M; throws ValueError if it is not one.
  template <class M>
  std::shared_ptr<M> at(std::size_t i) const {
    if (i >= modules_.size())
      fail<ValueError>(
          "ModuleList: index ", i, " is out of range for ", modules_.size(), " modules");
    auto module = std::dynamic_pointer_cast<M>(modules_[i]);
    if (!module)
      fail<ValueError>(
          "ModuleList: module ", i, " is a ", modules_[i]->type_name(), ", not the type asked for");
    return module;
  }

 private:
  std::vector<std::shared_ptr<Module>> modules_;
};

// Modules applied one after another (torch.nn.Sequential), named "0", "1", ...:
//   auto mlp = std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(4, 16),
//       std::make_shared<nn::GELU>(), std::make_shared<nn::Linear>(16, 4));
//   Tensor y = mlp->forward(x);  // Linear, then GELU, then Linear
// Any module with a `Tensor forward(const Tensor&)` can be a step.
class Sequential : public Module {
 public:
  Sequential() = default;
  template <class... M>
  explicit Sequential(std::shared_ptr<M>... modules) {
    (push_back(std::move(modules)), ...);
  }
  std::string type_name() const override { return "Sequential"; }
  template <class M>
  std::shared_ptr<M> push_back(std::shared_ptr<M> module) {
    register_module(std::to_string(steps_.size()), module);
    steps_.push_back([module](const Tensor& x) { return module->forward(x); });
    return module;
  }
  Tensor forward(const Tensor& x) const {
    Tensor y = x;
    for (const auto& step : steps_) y = step(y);
    return y;
  }
  Tensor operator()(const Tensor& x) const { return forward(x); }
  std::size_t size() const { return steps_.size(); }

 private:
  std::vector<std::function<Tensor(const Tensor&)>> steps_;
};

// Submodules by name, in insertion order (torch.nn.ModuleDict): nanoGPT's
// `self.transformer = nn.ModuleDict(dict(wte=..., wpe=..., h=..., ln_f=...))`, whose names make
// the state dict's "transformer.h.0.attn.c_attn.weight".
class ModuleDict : public Module {
 public:
  std::string type_name() const override { return "ModuleDict"; }
  // Adds `module` under `name` (the rules of every module name: not empty, no dot, not taken).
  template <class M>
  std::shared_ptr<M> insert(const std::string& name, std::shared_ptr<M> module) {
    return register_module(name, std::move(module));
  }
  bool contains(const std::string& name) const;
  std::size_t size() const { return named_children().size(); }
  // The module under `name`; a ValueError naming the keys if there is none.
  std::shared_ptr<Module> operator[](const std::string& name) const;
  // The same as an M; a ValueError if it is not one.
  template <class M>
  std::shared_ptr<M> at(const std::string& name) const {
    auto module = std::dynamic_pointer_cast<M>((*this)[name]);
    if (!module)
      fail<ValueError>("ModuleDict: module '", name, "' is a ", (*this)[name]->type_name(),
          ", not the type asked for");
    return module;
  }
};

// Python's repr of a float, as PyTorch prints it in module reprs: 0.5, 0.0, 1e-05.
std::string python_float(double value);
std::string python_bool(bool value);

}  // namespace ag::nn
