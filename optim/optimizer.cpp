#include "optim/optimizer.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "autograd/ops.h"
#include "autograd/parallel.h"

namespace ag::optim {

namespace {

// Each optimizer updates parameters element by element; this walks parameter, gradient and the
// per-parameter state tensors (all contiguous, same shape) together. Gradients may be views, so
// they are made contiguous first.
// Elements are independent, so ag's threads split them (autograd/parallel.h): the same result on
// any number of threads.
template <class T, class F>
void for_each_element(const Tensor& param, const std::vector<Tensor>& others, F f) {
  T* p = param.data<T>();
  std::vector<T*> ptrs;
  for (const Tensor& t : others) ptrs.push_back(t.data<T>());
  parallel_for(param.numel(), 16, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) f(p[i], ptrs, i);
  });
}

void check_param(const Tensor& p, const char* optimizer) {
  if (!p.defined() || !p.is_leaf() || !p.is_contiguous())
    fail<ValueError>(optimizer, ": parameters must be contiguous leaf tensors");
}

std::vector<ParamGroup> one_group(std::vector<Tensor> params) { return {ParamGroup{std::move(params), {}, {}}}; }

}  // namespace

Optimizer::Optimizer(std::vector<ParamGroup> groups, double default_lr, double default_weight_decay,
                     const char* name)
    : name_(name) {
  if (!(default_lr >= 0)) fail<ValueError>(name, ": learning rate ", default_lr, " is negative");
  if (!(default_weight_decay >= 0))
    fail<ValueError>(name, ": weight decay ", default_weight_decay, " is negative");
  for (ParamGroup& g : groups) {
    for (const Tensor& p : g.params) check_param(p, name);
    groups_.push_back({std::move(g.params), g.lr.value_or(default_lr), g.weight_decay.value_or(default_weight_decay)});
  }
}

void Optimizer::zero_grad() {
  for (const Group& g : groups_)
    for (const Tensor& p : g.params) p.zero_grad();
}

// ---- state ----------------------------------------------------------------------------------------

std::string Optimizer::state_name(const std::string& prefix, std::size_t group, std::size_t index) {
  return prefix + ".state." + std::to_string(group) + "." + std::to_string(index) + ".";
}

void Optimizer::save_state(Checkpoint& c, const std::string& prefix) const {
  c.strings[prefix + ".type"] = name_;
  c.integers[prefix + ".groups"] = groups_.size();
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    const std::string group = prefix + ".group." + std::to_string(g) + ".";
    c.integers[group + "size"] = groups_[g].params.size();
    c.reals[group + "lr"] = groups_[g].lr;
    c.reals[group + "weight_decay"] = groups_[g].weight_decay;
  }
  save_extra(c, prefix);
}

void Optimizer::load_state(const Checkpoint& c, const std::string& prefix) {
  std::vector<std::string> problems;
  auto has = [](const auto& map, const std::string& key) { return map.count(key) > 0; };
  if (!has(c.strings, prefix + ".type") || !has(c.integers, prefix + ".groups")) {
    problems.push_back("no optimizer state under '" + prefix + "'");
  } else if (c.strings.at(prefix + ".type") != name_) {
    problems.push_back("the file holds " + c.strings.at(prefix + ".type") + " state, this optimizer is " + name_);
  } else if (c.integers.at(prefix + ".groups") != groups_.size()) {
    problems.push_back("the file has " + std::to_string(c.integers.at(prefix + ".groups")) +
                       " parameter groups, this optimizer " + std::to_string(groups_.size()));
  } else {
    for (std::size_t g = 0; g < groups_.size(); ++g) {
      const std::string group = prefix + ".group." + std::to_string(g) + ".";
      if (!has(c.integers, group + "size") || !has(c.reals, group + "lr") || !has(c.reals, group + "weight_decay"))
        problems.push_back("group " + std::to_string(g) + " is incomplete in the file");
      else if (c.integers.at(group + "size") != groups_[g].params.size())
        problems.push_back("group " + std::to_string(g) + " has " + std::to_string(c.integers.at(group + "size")) +
                           " parameters in the file, " + std::to_string(groups_[g].params.size()) + " here");
    }
    if (problems.empty()) check_extra(c, prefix, problems);
  }
  if (!problems.empty()) {
    std::string message = "checkpoint: " + name_ + " state does not fit: ";
    for (std::size_t i = 0; i < problems.size(); ++i) message += (i ? "; " : "") + problems[i];
    throw CheckpointError(message);
  }
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    const std::string group = prefix + ".group." + std::to_string(g) + ".";
    groups_[g].lr = c.reals.at(group + "lr");
    groups_[g].weight_decay = c.reals.at(group + "weight_decay");
  }
  load_extra(c, prefix);
}

namespace {
// Checks that a state tensor exists with its parameter's shape and dtype.
void check_state_tensor(const Checkpoint& c, const std::string& name, const Tensor& param,
                        std::vector<std::string>& problems) {
  auto it = c.tensors.find(name);
  if (it == c.tensors.end()) {
    problems.push_back("missing " + name);
  } else if (it->second.shape() != param.shape() || it->second.dtype() != param.dtype()) {
    problems.push_back("shape mismatch " + name + ": file " + shape_str(it->second.shape()) + " " +
                       dtype_name(it->second.dtype()) + ", parameter " + shape_str(param.shape()) + " " +
                       dtype_name(param.dtype()));
  }
}
Tensor copy_of(const Tensor& t) { return t.detach().clone(); }
}  // namespace

void SGD::save_extra(Checkpoint& c, const std::string& prefix) const {
  c.reals[prefix + ".momentum"] = momentum;
  c.reals[prefix + ".dampening"] = dampening;
  c.integers[prefix + ".nesterov"] = nesterov;
  for (std::size_t g = 0; g < groups_.size(); ++g)
    for (std::size_t i = 0; i < groups_[g].params.size(); ++i)
      if (momentum_buffers[g][i].defined())
        c.tensors[state_name(prefix, g, i) + "momentum_buffer"] = momentum_buffers[g][i];
}

void SGD::check_extra(const Checkpoint& c, const std::string& prefix, std::vector<std::string>& problems) const {
  if (!c.reals.count(prefix + ".momentum") || !c.reals.count(prefix + ".dampening") || !c.integers.count(prefix + ".nesterov"))
    problems.push_back("SGD hyper-parameters missing");
  for (std::size_t g = 0; g < groups_.size(); ++g)
    for (std::size_t i = 0; i < groups_[g].params.size(); ++i) {
      const std::string name = state_name(prefix, g, i) + "momentum_buffer";
      if (c.tensors.count(name)) check_state_tensor(c, name, groups_[g].params[i], problems);
    }
}

void SGD::load_extra(const Checkpoint& c, const std::string& prefix) {
  momentum = c.reals.at(prefix + ".momentum");
  dampening = c.reals.at(prefix + ".dampening");
  nesterov = c.integers.at(prefix + ".nesterov") != 0;
  for (std::size_t g = 0; g < groups_.size(); ++g)
    for (std::size_t i = 0; i < groups_[g].params.size(); ++i) {
      auto it = c.tensors.find(state_name(prefix, g, i) + "momentum_buffer");
      momentum_buffers[g][i] = it == c.tensors.end() ? Tensor() : copy_of(it->second);
    }
}

void Adam::save_extra(Checkpoint& c, const std::string& prefix) const {
  c.reals[prefix + ".beta1"] = beta1;
  c.reals[prefix + ".beta2"] = beta2;
  c.reals[prefix + ".eps"] = eps;
  for (std::size_t g = 0; g < groups_.size(); ++g)
    for (std::size_t i = 0; i < groups_[g].params.size(); ++i) {
      const AdamState& s = state[g][i];
      const std::string stem = state_name(prefix, g, i);
      c.integers[stem + "step"] = static_cast<uint64_t>(s.step);
      if (s.step > 0) {
        c.tensors[stem + "exp_avg"] = s.exp_avg;
        c.tensors[stem + "exp_avg_sq"] = s.exp_avg_sq;
      }
    }
}

void Adam::check_extra(const Checkpoint& c, const std::string& prefix, std::vector<std::string>& problems) const {
  if (!c.reals.count(prefix + ".beta1") || !c.reals.count(prefix + ".beta2") || !c.reals.count(prefix + ".eps"))
    problems.push_back(name_ + " hyper-parameters missing");
  for (std::size_t g = 0; g < groups_.size(); ++g)
    for (std::size_t i = 0; i < groups_[g].params.size(); ++i) {
      const std::string stem = state_name(prefix, g, i);
      auto step = c.integers.find(stem + "step");
      if (step == c.integers.end()) {
        problems.push_back("missing " + stem + "step");
      } else if (step->second > 0) {
        check_state_tensor(c, stem + "exp_avg", groups_[g].params[i], problems);
        check_state_tensor(c, stem + "exp_avg_sq", groups_[g].params[i], problems);
      }
    }
}

void Adam::load_extra(const Checkpoint& c, const std::string& prefix) {
  beta1 = c.reals.at(prefix + ".beta1");
  beta2 = c.reals.at(prefix + ".beta2");
  eps = c.reals.at(prefix + ".eps");
  for (std::size_t g = 0; g < groups_.size(); ++g)
    for (std::size_t i = 0; i < groups_[g].params.size(); ++i) {
      const std::string stem = state_name(prefix, g, i);
      AdamState& s = state[g][i];
      s.step = static_cast<int64_t>(c.integers.at(stem + "step"));
      s.exp_avg = s.step > 0 ? copy_of(c.tensors.at(stem + "exp_avg")) : Tensor();
      s.exp_avg_sq = s.step > 0 ? copy_of(c.tensors.at(stem + "exp_avg_sq")) : Tensor();
    }
}

// ---- SGD ----------------------------------------------------------------------------------------

SGD::SGD(std::vector<Tensor> params, double lr, double mom, double damp, double weight_decay, bool nest)
    : SGD(one_group(std::move(params)), lr, mom, damp, weight_decay, nest) {}

SGD::SGD(std::vector<ParamGroup> groups, double lr, double mom, double damp, double weight_decay, bool nest)
    : Optimizer(std::move(groups), lr, weight_decay, "SGD"), momentum(mom), dampening(damp), nesterov(nest) {
  if (momentum < 0) fail<ValueError>("SGD: momentum ", momentum, " is negative");
  if (nesterov && (momentum <= 0 || dampening != 0))
    fail<ValueError>("SGD: Nesterov momentum needs momentum > 0 and dampening 0");
  for (const Group& g : groups_) momentum_buffers.emplace_back(g.params.size());
}

void SGD::step() {
  NoGradGuard no_grad;
  for (std::size_t gi = 0; gi < groups_.size(); ++gi) {
    const Group& group = groups_[gi];
    for (std::size_t pi = 0; pi < group.params.size(); ++pi) {
      const Tensor& param = group.params[pi];
      if (!param.grad().defined()) continue;
      Tensor grad = param.grad().contiguous();
      Tensor& buffer = momentum_buffers[gi][pi];
      const bool first = !buffer.defined();
      if (momentum != 0 && first) buffer = zeros_like(param);
      const std::vector<Tensor> others = momentum != 0 ? std::vector<Tensor>{grad, buffer} : std::vector<Tensor>{grad};
      dispatch(param.dtype(), [&]<typename T>() {
        const T lr = T(group.lr), wd = T(group.weight_decay), mu = T(momentum), damp = T(1 - dampening);
        for_each_element<T>(param, others, [&](T& p, const std::vector<T*>& s, int64_t i) {
          T g = s[0][i];
          if (wd != 0) g = g + wd * p;  // g ← ∇ + λθ
          if (mu != 0) {
            T& b = s[1][i];
            b = first ? g : mu * b + damp * g;  // b ← μb + (1 − τ)g
            g = nesterov ? g + mu * b : b;
          }
          p = p - lr * g;  // θ ← θ − γg
        });
      });
    }
  }
}

// ---- Adam / AdamW ---------------------------------------------------------------------------------

Adam::Adam(std::vector<Tensor> params, double lr, std::pair<double, double> betas, double eps_, double wd)
    : Adam(one_group(std::move(params)), lr, betas, eps_, wd, false, "Adam") {}

Adam::Adam(std::vector<ParamGroup> groups, double lr, std::pair<double, double> betas, double eps_, double wd)
    : Adam(std::move(groups), lr, betas, eps_, wd, false, "Adam") {}

Adam::Adam(std::vector<ParamGroup> groups, double lr, std::pair<double, double> betas, double eps_,
           double wd, bool decoupled, const char* name)
    : Optimizer(std::move(groups), lr, wd, name), beta1(betas.first), beta2(betas.second), eps(eps_),
      decoupled_(decoupled) {
  if (!(beta1 >= 0 && beta1 < 1 && beta2 >= 0 && beta2 < 1))
    fail<ValueError>(name, ": betas (", beta1, ", ", beta2, ") must lie in [0, 1)");
  if (!(eps >= 0)) fail<ValueError>(name, ": eps ", eps, " is negative");
  for (const Group& g : groups_) state.emplace_back(g.params.size());
}

void Adam::step() {
  NoGradGuard no_grad;
  for (std::size_t gi = 0; gi < groups_.size(); ++gi) {
    const Group& group = groups_[gi];
    for (std::size_t pi = 0; pi < group.params.size(); ++pi) {
      const Tensor& param = group.params[pi];
      if (!param.grad().defined()) continue;
      Tensor grad = param.grad().contiguous();
      AdamState& s = state[gi][pi];
      if (s.step == 0) {
        s.exp_avg = zeros_like(param);
        s.exp_avg_sq = zeros_like(param);
      }
      s.step += 1;
      // As PyTorch: the bias corrections in double, then one step size and one divisor.
      const double bias_correction1 = 1 - std::pow(beta1, static_cast<double>(s.step));
      const double bias_correction2 = 1 - std::pow(beta2, static_cast<double>(s.step));
      const double step_size = group.lr / bias_correction1;
      const double bias_correction2_sqrt = std::sqrt(bias_correction2);
      dispatch(param.dtype(), [&]<typename T>() {
        const T b1 = T(beta1), b2 = T(beta2), one_minus_b1 = T(1 - beta1), one_minus_b2 = T(1 - beta2);
        const T wd = T(group.weight_decay), e = T(eps), decay = T(1 - group.lr * group.weight_decay);
        const T c2 = T(bias_correction2_sqrt), neg_step_size = T(-step_size);
        for_each_element<T>(param, {grad, s.exp_avg, s.exp_avg_sq}, [&](T& p, const std::vector<T*>& st, int64_t i) {
          T g = st[0][i];
          if (decoupled_) {
            p = p * decay;                   // AdamW: θ ← θ − γλθ
          } else if (wd != 0) {
            g = g + wd * p;                  // Adam: g ← ∇ + λθ
          }
          T& m = st[1][i];
          T& v = st[2][i];
          m = m * b1 + one_minus_b1 * g;     // m ← β₁m + (1 − β₁)g
          v = v * b2 + one_minus_b2 * g * g; // v ← β₂v + (1 − β₂)g²
          const T denom = std::sqrt(v) / c2 + e;
          // θ ← θ − γ/(1 − β₁ᵗ) · m / (√v/√(1 − β₂ᵗ) + ε), in addcdiv's order of operations
          p = p + neg_step_size * m / denom;
        });
      });
    }
  }
}

AdamW::AdamW(std::vector<Tensor> params, double lr, std::pair<double, double> betas, double eps_, double wd)
    : Adam(one_group(std::move(params)), lr, betas, eps_, wd, true, "AdamW") {}

AdamW::AdamW(std::vector<ParamGroup> groups, double lr, std::pair<double, double> betas, double eps_, double wd)
    : Adam(std::move(groups), lr, betas, eps_, wd, true, "AdamW") {}

// ---- clipping -------------------------------------------------------------------------------------

double clip_grad_norm(const std::vector<Tensor>& params, double max_norm) {
  if (!(max_norm > 0)) fail<ValueError>("clip_grad_norm: max_norm ", max_norm, " must be positive");
  NoGradGuard no_grad;
  double total_sq = 0;
  for (const Tensor& p : params) {
    if (!p.grad().defined()) continue;
    // ‖∇ᵢ‖², accumulated in double, the same on any number of threads
    for (double sum : squared_norm_partials(p.grad())) total_sq += sum;
  }
  const double total = std::sqrt(total_sq);
  const double coef = max_norm / (total + 1e-6);
  if (coef < 1)
    for (const Tensor& p : params)
      if (p.grad().defined()) p.grad().mul_(coef);
  return total;
}

}  // namespace ag::optim
