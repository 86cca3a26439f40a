// Optimizers, as torch.optim: SGD (with momentum, dampening, Nesterov), Adam (L2 penalty added
// to the gradient) and AdamW (decoupled weight decay), with parameter groups, and global
// gradient-norm clipping.
//
// Each step follows the pseudocode of PyTorch's documentation (torch.optim.SGD / Adam / AdamW,
// PyTorch 1.13) in the same order of floating-point operations, so that a few steps agree with
// PyTorch to float32 rounding.
#pragma once

#include <cstddef>
#include <functional>
#include <initializer_list>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "autograd/autograd.h"
#include "autograd/ops.h"

namespace ag::optim {

// A set of parameters sharing hyper-parameters. Unset options take the optimizer's defaults, so
//   {{decay_params}, {no_decay_params, {}, 0.0}}
// excludes biases and LayerNorm weights from weight decay.
struct ParamGroup {
  std::vector<Tensor> params;
  std::optional<double> lr = std::nullopt;  // (initialised, so {params} alone draws no warning)
  std::optional<double> weight_decay = std::nullopt;
};
// nanoGPT's configure_optimizers: weight decay only for the parameters of two or more dims — the
// matrices of the Linears and the embeddings — and none for the rest — biases and LayerNorm
// weights. Group 0: the >= 2-D parameters with weight_decay; group 1: the others with 0; each in
// the order given (either may be empty).
//   optim::AdamW optimizer(optim::weight_decay_groups(model.parameters(), 0.1), 1e-3, {0.9, 0.99});
std::vector<ParamGroup> weight_decay_groups(const std::vector<Tensor>& params, double weight_decay);

// Groups written as lists of tensors, AdamW({{a, b}, {c}}, lr): each inner list is a group with
// the optimizer's defaults. Every optimizer takes them, so that the braces mean groups — without
// this overload {{a}, {b}} compiled as one group of two tensors, silently.
using BracedGroups = std::initializer_list<std::initializer_list<Tensor>>;
std::vector<ParamGroup> groups_of(BracedGroups groups);

// Every optimizer refuses a tensor given twice — twice in a group or in two groups — with a
// ValueError naming both places: it would be stepped twice a step (PyTorch refuses a parameter in
// two groups too). A tied weight is one tensor: Module::parameters() lists it once.

// ---- state dicts --------------------------------------------------------------------------------
// An optimizer's state as plain data, shaped like torch.optim's Optimizer.state_dict():
//   state         per parameter, numbered across the groups in order (group 0's parameters
//                 first, then group 1's, …): named tensors and named scalars
//                   SGD          momentum_buffer (once it exists)
//                   Adam, AdamW  step, and exp_avg and exp_avg_sq once step > 0
//   param_groups  per group: its hyper-parameters by name and the numbers of its parameters
//                   every optimizer  lr, weight_decay
//                   SGD              momentum, dampening, nesterov (1 or 0)
//                   Adam, AdamW      beta1, beta2, eps
// The tensors are the optimizer's own, not copies (as in PyTorch); load_state_dict copies them.
// io/optimizer_state.h writes a state dict into a checkpoint file and reads it back.
struct ParamState {
  std::map<std::string, Tensor> tensors;
  std::map<std::string, int64_t> scalars;
};

struct GroupState {
  std::map<std::string, double> options;
  std::vector<std::size_t> params;
};

struct StateDict {
  std::string type;  // "SGD", "Adam" or "AdamW"
  std::map<std::size_t, ParamState> state;
  std::vector<GroupState> param_groups;
};

// A state dict that does not fit the optimizer: another type, other groups, a state tensor whose
// shape or dtype is not its parameter's, a hyper-parameter the constructor would refuse.
class StateDictError : public RuntimeError {
 public:
  using RuntimeError::RuntimeError;
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // One update of every parameter that has a gradient (parameters without one are skipped, as in
  // PyTorch). Runs under NoGradGuard.
  virtual void step() = 0;
  // Drops every parameter's gradient.
  void zero_grad();

  // The optimizer's whole state, so that loading it into an optimizer built over the same
  // parameters continues exactly where this one stopped.
  virtual StateDict state_dict() const = 0;
  // Checks everything first — the type, the groups and their sizes, every state tensor's shape
  // and dtype against its parameter, every hyper-parameter as the constructor would — and changes
  // nothing unless all of it fits; otherwise throws one StateDictError listing the problems.
  // The same steps for every optimizer; each adds its own part through the hooks below.
  void load_state_dict(const StateDict& saved);

  struct Group {
    std::vector<Tensor> params;
    double lr;
    double weight_decay;
  };
  std::vector<Group>& param_groups() { return groups_; }
  const std::vector<Group>& param_groups() const { return groups_; }

 protected:
  // option_names: the optimizer's own hyper-parameters, beyond lr and weight_decay, as its state
  // dict names them (one value for all groups).
  Optimizer(std::vector<ParamGroup> groups, double default_lr, double default_weight_decay,
      const char* name, std::vector<std::string> option_names);

  // What every optimizer's state dict shares: the type, and per group lr, weight_decay, the
  // optimizer's own hyper-parameters `options` (ag keeps one value for all groups) and the
  // numbers of its parameters. The per-parameter state is the optimizer's to add.
  StateDict common_state_dict(const std::map<std::string, double>& options) const;
  // The number of parameter i of group g in a state dict.
  std::size_t param_number(std::size_t group, std::size_t index) const;
  // For check_param_states: appends a problem unless `tensor` has the shape and dtype of
  // parameter `number` and finite values (with non_negative, none below 0: a second moment, a sum
  // of squares).
  void check_state_tensor(const Tensor& tensor, const std::string& name, std::size_t number,
      std::vector<std::string>& problems, bool non_negative = false) const;

  std::string name_;
  std::vector<Group> groups_;

 private:
  // ---- what each optimizer adds to load_state_dict (optim/state_dict_checks.cpp) -------------
  // load_state_dict first checks the shared part: the type, the group count and sizes, the
  // numbering, each group having exactly lr, weight_decay and option_names, lr and weight_decay
  // not negative, the options the same in every group, state only for numbered parameters. Then,
  // each only while nothing is wrong yet, it calls:
  //   option_problems     what is wrong with the values of group 0's options, in the
  //                       constructor's words (when there are groups)
  //   check_param_states  appends what does not fit in the per-parameter state
  //   load_own            takes group 0's options (none without groups) and the per-parameter
  //                       state, once everything has been checked and lr and weight_decay taken
  virtual std::vector<std::string> option_problems(
      const std::map<std::string, double>& options) const = 0;
  virtual void check_param_states(
      const StateDict& saved, std::vector<std::string>& problems) const = 0;
  virtual void load_own(const std::map<std::string, double>& options, const StateDict& saved) = 0;

  std::vector<std::string> option_names_;
};

class SGD : public Optimizer {
 public:
  // PyTorch's torch.optim.SGD:
  //   g ← ∇ + λ·θ                        (weight decay λ)
  //   b ← g at the first step, else μ·b + (1 − τ)·g        (momentum μ, dampening τ)
  //   g ← g + μ·b if nesterov, else b    (when μ ≠ 0)
  //   θ ← θ − γ·g                        (learning rate γ)
  SGD(std::vector<Tensor> params, double lr, double momentum = 0, double dampening = 0,
      double weight_decay = 0, bool nesterov = false);
  SGD(std::vector<ParamGroup> groups, double lr, double momentum = 0, double dampening = 0,
      double weight_decay = 0, bool nesterov = false);
  SGD(BracedGroups groups, double lr, double momentum = 0, double dampening = 0,
      double weight_decay = 0, bool nesterov = false)
      : SGD(groups_of(groups), lr, momentum, dampening, weight_decay, nesterov) {}
  void step() override;

  double momentum, dampening;
  bool nesterov;
  // Momentum buffers, per group and parameter (undefined until the first step with a gradient).
  std::vector<std::vector<Tensor>> momentum_buffers;

  StateDict state_dict() const override;

 private:
  // load_state_dict's part for SGD (options: momentum, dampening, nesterov).
  std::vector<std::string> option_problems(  // momentum < 0, nesterov without momentum, ...
      const std::map<std::string, double>& options) const override;
  void check_param_states(  // a momentum_buffer per parameter, or none before its first step
      const StateDict& saved, std::vector<std::string>& problems) const override;
  void load_own(const std::map<std::string, double>& options, const StateDict& saved) override;
};

struct AdamState {
  int64_t step = 0;
  Tensor exp_avg;     // m, the first-moment estimate
  Tensor exp_avg_sq;  // v, the second-moment estimate
};

class Adam : public Optimizer {
 public:
  // PyTorch's torch.optim.Adam (weight decay as an L2 penalty added to the gradient):
  //   g ← ∇ + λ·θ
  //   m ← β₁·m + (1 − β₁)·g,    v ← β₂·v + (1 − β₂)·g²
  //   θ ← θ − (γ / (1 − β₁ᵗ)) · m / (√v / √(1 − β₂ᵗ) + ε)
  Adam(std::vector<Tensor> params, double lr = 1e-3, std::pair<double, double> betas = {0.9, 0.999},
      double eps = 1e-8, double weight_decay = 0);
  Adam(std::vector<ParamGroup> groups, double lr = 1e-3,
      std::pair<double, double> betas = {0.9, 0.999}, double eps = 1e-8, double weight_decay = 0);
  Adam(BracedGroups groups, double lr = 1e-3, std::pair<double, double> betas = {0.9, 0.999},
      double eps = 1e-8, double weight_decay = 0)
      : Adam(groups_of(groups), lr, betas, eps, weight_decay) {}
  void step() override;

  double beta1, beta2, eps;
  std::vector<std::vector<AdamState>> state;  // per group and parameter

  StateDict state_dict() const override;

 protected:
  Adam(std::vector<ParamGroup> groups, double lr, std::pair<double, double> betas, double eps,
      double weight_decay, bool decoupled, const char* name);

 private:
  // load_state_dict's part for Adam and AdamW (options: beta1, beta2, eps).
  std::vector<std::string> option_problems(  // a beta outside [0, 1), eps < 0
      const std::map<std::string, double>& options) const override;
  void check_param_states(  // every parameter's step, and exp_avg, exp_avg_sq once it is above 0
      const StateDict& saved, std::vector<std::string>& problems) const override;
  void load_own(const std::map<std::string, double>& options, const StateDict& saved) override;

  bool decoupled_;  // AdamW: decay θ directly instead of adding λ·θ to the gradient
};

class AdamW : public Adam {
 public:
  // PyTorch's torch.optim.AdamW (decoupled weight decay, Loshchilov & Hutter 2019):
  //   θ ← θ − γ·λ·θ, then the Adam update above with g = ∇ (no L2 term).
  AdamW(std::vector<Tensor> params, double lr = 1e-3,
      std::pair<double, double> betas = {0.9, 0.999}, double eps = 1e-8,
      double weight_decay = 1e-2);
  AdamW(std::vector<ParamGroup> groups, double lr = 1e-3,
      std::pair<double, double> betas = {0.9, 0.999}, double eps = 1e-8,
      double weight_decay = 1e-2);
  AdamW(BracedGroups groups, double lr = 1e-3, std::pair<double, double> betas = {0.9, 0.999},
      double eps = 1e-8, double weight_decay = 1e-2)
      : AdamW(groups_of(groups), lr, betas, eps, weight_decay) {}
};

// Scales all gradients together so that their global L2 norm ‖(∇₁, ∇₂, …)‖ is at most max_norm,
// as torch.nn.utils.clip_grad_norm_: with total = sqrt(Σ ‖∇ᵢ‖²), every gradient is multiplied by
// min(1, max_norm / (total + 1e-6)). Returns total (the norm before clipping). Parameters without
// a gradient are ignored, and a tensor listed twice (a tied weight) counts once.
double clip_grad_norm(const std::vector<Tensor>& params, double max_norm);

}  // namespace ag::optim
