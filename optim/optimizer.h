// Optimizers, as torch.optim: SGD (with momentum, dampening, Nesterov), Adam (L2 penalty added
// to the gradient) and AdamW (decoupled weight decay), with parameter groups, and global
// gradient-norm clipping.
//
// Each step follows the pseudocode of PyTorch's documentation (torch.optim.SGD / Adam / AdamW,
// PyTorch 1.13) in the same order of floating-point operations, so that a few steps agree with
// PyTorch to float32 rounding.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "autograd/autograd.h"
#include "autograd/checkpoint.h"
#include "autograd/ops.h"

namespace ag::optim {

// A set of parameters sharing hyper-parameters. Unset options take the optimizer's defaults, so
//   {{decay_params}, {no_decay_params, {}, 0.0}}
// excludes biases and LayerNorm weights from weight decay.
struct ParamGroup {
  std::vector<Tensor> params;
  std::optional<double> lr;
  std::optional<double> weight_decay;
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // One update of every parameter that has a gradient (parameters without one are skipped, as in
  // PyTorch). Runs under NoGradGuard.
  virtual void step() = 0;
  // Drops every parameter's gradient.
  void zero_grad();

  // Writes the optimizer's whole state into `checkpoint` under `prefix` ("optimizer.type",
  // "optimizer.group.0.lr", "optimizer.state.0.3.exp_avg", …), so that loading it into an
  // optimizer built over the same parameters continues exactly where this one stopped.
  void save_state(Checkpoint& checkpoint, const std::string& prefix = "optimizer") const;
  // Checks everything first — the optimizer's type, the groups and their sizes, every state
  // tensor's shape and dtype against its parameter — and changes nothing unless all of it fits;
  // otherwise throws one CheckpointError listing the problems.
  void load_state(const Checkpoint& checkpoint, const std::string& prefix = "optimizer");

  struct Group {
    std::vector<Tensor> params;
    double lr;
    double weight_decay;
  };
  std::vector<Group>& param_groups() { return groups_; }
  const std::vector<Group>& param_groups() const { return groups_; }

 protected:
  Optimizer(std::vector<ParamGroup> groups, double default_lr, double default_weight_decay, const char* name);
  // Per-optimizer state: hyper-parameters and per-parameter tensors and counters.
  virtual void save_extra(Checkpoint& checkpoint, const std::string& prefix) const = 0;
  // Appends what does not fit to `problems`; applies nothing.
  virtual void check_extra(const Checkpoint& checkpoint, const std::string& prefix,
                           std::vector<std::string>& problems) const = 0;
  virtual void load_extra(const Checkpoint& checkpoint, const std::string& prefix) = 0;
  // "prefix.state.g.i.": the name stem of parameter i of group g.
  static std::string state_name(const std::string& prefix, std::size_t group, std::size_t index);
  std::string name_;
  std::vector<Group> groups_;
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
  void step() override;

  double momentum, dampening;
  bool nesterov;
  // Momentum buffers, per group and parameter (undefined until the first step with a gradient).
  std::vector<std::vector<Tensor>> momentum_buffers;

 protected:
  void save_extra(Checkpoint& checkpoint, const std::string& prefix) const override;
  void check_extra(const Checkpoint& checkpoint, const std::string& prefix, std::vector<std::string>& problems) const override;
  void load_extra(const Checkpoint& checkpoint, const std::string& prefix) override;
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
  Adam(std::vector<ParamGroup> groups, double lr = 1e-3, std::pair<double, double> betas = {0.9, 0.999},
       double eps = 1e-8, double weight_decay = 0);
  void step() override;

  double beta1, beta2, eps;
  std::vector<std::vector<AdamState>> state;  // per group and parameter

 protected:
  Adam(std::vector<ParamGroup> groups, double lr, std::pair<double, double> betas, double eps,
       double weight_decay, bool decoupled, const char* name);
  void save_extra(Checkpoint& checkpoint, const std::string& prefix) const override;
  void check_extra(const Checkpoint& checkpoint, const std::string& prefix, std::vector<std::string>& problems) const override;
  void load_extra(const Checkpoint& checkpoint, const std::string& prefix) override;

 private:
  bool decoupled_;  // AdamW: decay θ directly instead of adding λ·θ to the gradient
};

class AdamW : public Adam {
 public:
  // PyTorch's torch.optim.AdamW (decoupled weight decay, Loshchilov & Hutter 2019):
  //   θ ← θ − γ·λ·θ, then the Adam update above with g = ∇ (no L2 term).
  AdamW(std::vector<Tensor> params, double lr = 1e-3, std::pair<double, double> betas = {0.9, 0.999},
        double eps = 1e-8, double weight_decay = 1e-2);
  AdamW(std::vector<ParamGroup> groups, double lr = 1e-3, std::pair<double, double> betas = {0.9, 0.999},
        double eps = 1e-8, double weight_decay = 1e-2);
};

// Scales all gradients together so that their global L2 norm ‖(∇₁, ∇₂, …)‖ is at most max_norm,
// as torch.nn.utils.clip_grad_norm_: with total = sqrt(Σ ‖∇ᵢ‖²), every gradient is multiplied by
// min(1, max_norm / (total + 1e-6)). Returns total (the norm before clipping). Parameters without
// a gradient are ignored.
double clip_grad_norm(const std::vector<Tensor>& params, double max_norm);

}  // namespace ag::optim
