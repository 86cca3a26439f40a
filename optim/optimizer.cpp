#include "optim/optimizer.h"

#include <algorithm>
#include <cmath>
#include <sstream>
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
  param.bump_version();  // an in-place write: a graph that saved param can no longer backprop
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

std::vector<ParamGroup> one_group(std::vector<Tensor> params) {
  return {ParamGroup{std::move(params), {}, {}}};
}

// The loop of every optimizer's step: update(group, g, i, param, grad) for parameter i of group g,
// group by group and in order, skipping parameters without a gradient (as PyTorch), under
// NoGradGuard. grad is the gradient, contiguous.
template <class Update>
void for_each_param_with_grad(const std::vector<Optimizer::Group>& groups, Update&& update) {
  NoGradGuard no_grad;
  for (std::size_t g = 0; g < groups.size(); ++g)
    for (std::size_t i = 0; i < groups[g].params.size(); ++i) {
      const Tensor& param = groups[g].params[i];
      if (param.grad().defined()) update(groups[g], g, i, param, param.grad().contiguous());
    }
}

// Adam's update of `count` elements, each on its own: the loop has no calls and no branches (the
// weight-decay rule is chosen outside it), so the compiler vectorises it; each element's arithmetic
// is the same, in the same order, as one element at a time, so are the bits.
template <class T>
struct AdamConstants {
  T b1, b2, one_minus_b1, one_minus_b2, weight_decay, eps, decay, c2, neg_step_size;
};
enum class AdamRule { plain, l2_penalty, decoupled_decay };

template <class T, AdamRule rule>
void adam_update_with(T* __restrict p, const T* __restrict g, T* __restrict m, T* __restrict v,
    int64_t count, const AdamConstants<T>& k) {
  for (int64_t i = 0; i < count; ++i) {
    T gradient = g[i];
    if constexpr (rule == AdamRule::decoupled_decay) p[i] = p[i] * k.decay;  // AdamW: θ ← θ − γλθ
    if constexpr (rule == AdamRule::l2_penalty)
      gradient = gradient + k.weight_decay * p[i];              // g ← ∇ + λθ
    m[i] = m[i] * k.b1 + k.one_minus_b1 * gradient;             // m ← β₁m + (1 − β₁)g
    v[i] = v[i] * k.b2 + k.one_minus_b2 * gradient * gradient;  // v ← β₂v + (1 − β₂)g²
    const T denom = std::sqrt(v[i]) / k.c2 + k.eps;
    // θ ← θ − γ/(1 − β₁ᵗ) · m / (√v/√(1 − β₂ᵗ) + ε), in addcdiv's order of operations
    p[i] = p[i] + k.neg_step_size * m[i] / denom;
  }
}

template <class T>
void adam_update(
    T* p, const T* g, T* m, T* v, int64_t count, const AdamConstants<T>& k, AdamRule rule) {
  switch (rule) {
    case AdamRule::plain:
      return adam_update_with<T, AdamRule::plain>(p, g, m, v, count, k);
    case AdamRule::l2_penalty:
      return adam_update_with<T, AdamRule::l2_penalty>(p, g, m, v, count, k);
    case AdamRule::decoupled_decay:
      return adam_update_with<T, AdamRule::decoupled_decay>(p, g, m, v, count, k);
  }
}

}  // namespace

Optimizer::Optimizer(std::vector<ParamGroup> groups, double default_lr, double default_weight_decay,
    const char* name)
    : name_(name) {
  if (!(default_lr >= 0)) fail<ValueError>(name, ": learning rate ", default_lr, " is negative");
  if (!(default_weight_decay >= 0))
    fail<ValueError>(name, ": weight decay ", default_weight_decay, " is negative");
  for (ParamGroup& g : groups) {
    for (const Tensor& p : g.params) check_param(p, name);
    groups_.push_back({std::move(g.params), g.lr.value_or(default_lr),
        g.weight_decay.value_or(default_weight_decay)});
  }
}

void Optimizer::zero_grad() {
  for (const Group& g : groups_)
    for (const Tensor& p : g.params) p.zero_grad();
}

// ---- state dicts --------------------------------------------------------------------------------

namespace {
Tensor copy_of(const Tensor& t) { return t.detach().clone(); }

std::string str(double value) {
  std::ostringstream text;
  text << value;
  return text.str();
}

// What is wrong with SGD's own hyper-parameters: the constructor and load_state_dict check them
// with this one function (nesterov as a state dict holds it, 1 or 0).
std::vector<std::string> sgd_problems(double momentum, double dampening, double nesterov) {
  std::vector<std::string> problems;
  if (momentum < 0) problems.push_back("momentum " + str(momentum) + " is negative");
  if (nesterov != 0 && nesterov != 1)
    problems.push_back("nesterov " + str(nesterov) + " is not 1 or 0");
  if (nesterov == 1 && (momentum <= 0 || dampening != 0))
    problems.push_back("Nesterov momentum needs momentum > 0 and dampening 0");
  return problems;
}

// The same for Adam's and AdamW's.
std::vector<std::string> adam_problems(double beta1, double beta2, double eps) {
  std::vector<std::string> problems;
  if (!(beta1 >= 0 && beta1 < 1 && beta2 >= 0 && beta2 < 1))
    problems.push_back("betas (" + str(beta1) + ", " + str(beta2) + ") must lie in [0, 1)");
  if (!(eps >= 0)) problems.push_back("eps " + str(eps) + " is negative");
  return problems;
}

// "state.3.exp_avg": how a problem names an entry of a state dict.
std::string state_name(std::size_t number, const std::string& name) {
  return "state." + std::to_string(number) + "." + name;
}
}  // namespace

std::size_t Optimizer::param_number(std::size_t group, std::size_t index) const {
  std::size_t number = index;
  for (std::size_t g = 0; g < group; ++g) number += groups_[g].params.size();
  return number;
}

StateDict Optimizer::common_state_dict(const std::map<std::string, double>& options) const {
  StateDict dict;
  dict.type = name_;
  std::size_t number = 0;
  for (const Group& g : groups_) {
    GroupState group;
    group.options = options;
    group.options["lr"] = g.lr;
    group.options["weight_decay"] = g.weight_decay;
    for (std::size_t i = 0; i < g.params.size(); ++i) group.params.push_back(number++);
    dict.param_groups.push_back(std::move(group));
  }
  return dict;
}

void Optimizer::load_state_dict(const StateDict& saved) {
  std::vector<std::string> problems;
  check_common(saved, problems);
  if (problems.empty()) check_param_states(saved, problems);
  throw_if_any(problems);
  load_common(saved);
  load_own(
      saved.param_groups.empty() ? std::map<std::string, double>{} : saved.param_groups[0].options,
      saved);
}

void Optimizer::check_common(const StateDict& saved, std::vector<std::string>& problems) const {
  if (saved.type.empty()) {
    problems.push_back("no optimizer state (the state dict has no type)");
    return;
  }
  if (saved.type != name_) {
    problems.push_back("the file holds " + saved.type + " state, this optimizer is " + name_);
    return;
  }
  if (saved.param_groups.size() != groups_.size()) {
    problems.push_back("the file has " + std::to_string(saved.param_groups.size()) +
                       " parameter groups, this optimizer " + std::to_string(groups_.size()));
    return;
  }
  std::vector<std::string> names = option_names();
  names.insert(names.begin(), {"lr", "weight_decay"});
  std::size_t number = 0;
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    const GroupState& group = saved.param_groups[g];
    const std::string where = "group " + std::to_string(g);
    if (group.params.size() != groups_[g].params.size()) {
      problems.push_back(where + " has " + std::to_string(group.params.size()) +
                         " parameters in the file, " + std::to_string(groups_[g].params.size()) +
                         " here");
      return;
    }
    // Parameters are matched by position, as in PyTorch; the numbers must be the usual ones.
    for (std::size_t i = 0; i < group.params.size(); ++i, ++number)
      if (group.params[i] != number)
        problems.push_back(where + "'s parameter " + std::to_string(i) + " is numbered " +
                           std::to_string(group.params[i]) + ", not " + std::to_string(number));
    for (const std::string& name : names) {
      const auto it = group.options.find(name);
      const bool per_group = name == "lr" || name == "weight_decay";
      if (it == group.options.end()) {
        problems.push_back(where + " has no " + name);
      } else if (per_group && !(it->second >= 0)) {
        problems.push_back(where + "'s " + name + " " + str(it->second) +
                           (std::isnan(it->second) ? " is not a number" : " is negative"));
      } else if (!per_group && g > 0 && saved.param_groups[0].options.count(name) &&
                 !(saved.param_groups[0].options.at(name) == it->second)) {
        problems.push_back(where + "'s " + name + " differs from group 0's (" + name_ +
                           " keeps one " + name + " for all groups)");
      }
    }
    for (const auto& [name, value] : group.options)
      if (std::find(names.begin(), names.end(), name) == names.end())
        problems.push_back(where + " has an unknown hyper-parameter " + name);
  }
  for (const auto& [n, param_state] : saved.state)
    if (n >= number)
      problems.push_back("state for parameter " + std::to_string(n) + ", but there are only " +
                         std::to_string(number));
  if (problems.empty() && !saved.param_groups.empty())
    for (std::string& problem : option_problems(saved.param_groups[0].options))
      problems.push_back(std::move(problem));
}

void Optimizer::check_state_tensor(const Tensor& tensor, const std::string& name,
    std::size_t number, std::vector<std::string>& problems, bool non_negative) const {
  // check_common has made sure that the number is one of a parameter.
  const Tensor* param = nullptr;
  for (std::size_t g = 0, first = 0; g < groups_.size() && !param;
       first += groups_[g].params.size(), ++g)
    if (number >= first && number - first < groups_[g].params.size())
      param = &groups_[g].params[number - first];
  if (param == nullptr) {
    problems.push_back(name + " is for no parameter");
  } else if (!tensor.defined()) {
    problems.push_back(name + " is undefined");
  } else if (tensor.shape() != param->shape() || tensor.dtype() != param->dtype()) {
    problems.push_back("shape mismatch " + name + ": file " + shape_str(tensor.shape()) + " " +
                       dtype_name(tensor.dtype()) + ", parameter " + shape_str(param->shape()) +
                       " " + dtype_name(param->dtype()));
  } else {
    // The values, as a step of the optimizer leaves them: finite, and a second moment (a running
    // mean of squares, whose square root the update divides by) not negative.
    const Tensor values = tensor.contiguous();
    dispatch(values.dtype(), [&]<typename T>() {
      const T* p = values.data<T>();
      const int64_t count = values.numel();
      for (int64_t i = 0; i < count; ++i)
        if (!std::isfinite(p[i]) || (non_negative && p[i] < 0)) {
          problems.push_back(
              name + " holds " + str(static_cast<double>(p[i])) + " at flat index " +
              std::to_string(i) +
              (non_negative ? " (it must be finite and not negative)" : " (it must be finite)"));
          return;
        }
    });
  }
}

void Optimizer::throw_if_any(const std::vector<std::string>& problems) const {
  if (problems.empty()) return;
  std::string message = "checkpoint: " + name_ + " state does not fit: ";
  for (std::size_t i = 0; i < problems.size(); ++i) message += (i ? "; " : "") + problems[i];
  throw StateDictError(message);
}

void Optimizer::load_common(const StateDict& saved) {
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    groups_[g].lr = saved.param_groups[g].options.at("lr");
    groups_[g].weight_decay = saved.param_groups[g].options.at("weight_decay");
  }
}

StateDict SGD::state_dict() const {
  StateDict dict =
      common_state_dict({{"momentum", momentum}, {"dampening", dampening}, {"nesterov", nesterov}});
  for (std::size_t g = 0; g < groups_.size(); ++g)
    for (std::size_t i = 0; i < groups_[g].params.size(); ++i)
      if (momentum_buffers[g][i].defined())
        dict.state[param_number(g, i)].tensors["momentum_buffer"] = momentum_buffers[g][i];
  return dict;
}

std::vector<std::string> SGD::option_names() const { return {"momentum", "dampening", "nesterov"}; }

std::vector<std::string> SGD::option_problems(const std::map<std::string, double>& o) const {
  return sgd_problems(o.at("momentum"), o.at("dampening"), o.at("nesterov"));
}

void SGD::check_param_states(const StateDict& saved, std::vector<std::string>& problems) const {
  for (const auto& [number, param_state] : saved.state) {
    for (const auto& [name, tensor] : param_state.tensors)
      if (name == "momentum_buffer")
        check_state_tensor(tensor, state_name(number, name), number, problems);
      else
        problems.push_back("unexpected " + state_name(number, name));
    for (const auto& [name, value] : param_state.scalars)
      problems.push_back("unexpected " + state_name(number, name));
  }
}

void SGD::load_own(const std::map<std::string, double>& options, const StateDict& saved) {
  if (!options.empty()) {
    momentum = options.at("momentum");
    dampening = options.at("dampening");
    nesterov = options.at("nesterov") != 0;
  }
  for (std::size_t g = 0; g < groups_.size(); ++g)
    for (std::size_t i = 0; i < groups_[g].params.size(); ++i) {
      const auto it = saved.state.find(param_number(g, i));
      const bool has_buffer =
          it != saved.state.end() && it->second.tensors.count("momentum_buffer");
      momentum_buffers[g][i] =
          has_buffer ? copy_of(it->second.tensors.at("momentum_buffer")) : Tensor();
    }
}

StateDict Adam::state_dict() const {
  StateDict dict = common_state_dict({{"beta1", beta1}, {"beta2", beta2}, {"eps", eps}});
  for (std::size_t g = 0; g < groups_.size(); ++g)
    for (std::size_t i = 0; i < groups_[g].params.size(); ++i) {
      const AdamState& s = state[g][i];
      ParamState& entry = dict.state[param_number(g, i)];
      entry.scalars["step"] = s.step;
      if (s.step > 0) {
        entry.tensors["exp_avg"] = s.exp_avg;
        entry.tensors["exp_avg_sq"] = s.exp_avg_sq;
      }
    }
  return dict;
}

std::vector<std::string> Adam::option_names() const { return {"beta1", "beta2", "eps"}; }

std::vector<std::string> Adam::option_problems(const std::map<std::string, double>& o) const {
  return adam_problems(o.at("beta1"), o.at("beta2"), o.at("eps"));
}

void Adam::check_param_states(const StateDict& saved, std::vector<std::string>& problems) const {
  // Every parameter has a step count (0 before its first update), and moments once it is above 0.
  const std::size_t count = param_number(groups_.size(), 0);  // all parameters
  for (std::size_t number = 0; number < count; ++number) {
    const auto it = saved.state.find(number);
    if (it == saved.state.end() || !it->second.scalars.count("step")) {
      problems.push_back("missing " + state_name(number, "step"));
      continue;
    }
    const int64_t step = it->second.scalars.at("step");
    if (step < 0) problems.push_back(state_name(number, "step") + " is negative");
    for (const auto& [name, value] : it->second.scalars)
      if (name != "step") problems.push_back("unexpected " + state_name(number, name));
    for (const auto& [name, tensor] : it->second.tensors)
      if (name != "exp_avg" && name != "exp_avg_sq")
        problems.push_back("unexpected " + state_name(number, name));
    const bool has_moments = step > 0;
    for (const char* name : {"exp_avg", "exp_avg_sq"}) {
      const auto tensor = it->second.tensors.find(name);
      if (tensor == it->second.tensors.end() && has_moments)
        problems.push_back("missing " + state_name(number, name));
      else if (tensor != it->second.tensors.end() && !has_moments)
        problems.push_back(state_name(number, name) + " with step 0");
      else if (tensor != it->second.tensors.end())
        check_state_tensor(tensor->second, state_name(number, name), number, problems,
            std::string(name) == "exp_avg_sq");
    }
  }
}

void Adam::load_own(const std::map<std::string, double>& options, const StateDict& saved) {
  if (!options.empty()) {
    beta1 = options.at("beta1");
    beta2 = options.at("beta2");
    eps = options.at("eps");
  }
  for (std::size_t g = 0; g < groups_.size(); ++g)
    for (std::size_t i = 0; i < groups_[g].params.size(); ++i) {
      const ParamState& entry = saved.state.at(param_number(g, i));
      AdamState& s = state[g][i];
      s.step = entry.scalars.at("step");
      s.exp_avg = s.step > 0 ? copy_of(entry.tensors.at("exp_avg")) : Tensor();
      s.exp_avg_sq = s.step > 0 ? copy_of(entry.tensors.at("exp_avg_sq")) : Tensor();
    }
}

// ---- SGD ----------------------------------------------------------------------------------------

SGD::SGD(
    std::vector<Tensor> params, double lr, double mom, double damp, double weight_decay, bool nest)
    : SGD(one_group(std::move(params)), lr, mom, damp, weight_decay, nest) {}

SGD::SGD(std::vector<ParamGroup> groups, double lr, double mom, double damp, double weight_decay,
    bool nest)
    : Optimizer(std::move(groups), lr, weight_decay, "SGD"),
      momentum(mom),
      dampening(damp),
      nesterov(nest) {
  if (const auto problems = sgd_problems(momentum, dampening, nesterov); !problems.empty())
    fail<ValueError>("SGD: ", problems.front());
  for (const Group& g : groups_) momentum_buffers.emplace_back(g.params.size());
}

void SGD::step() {
  for_each_param_with_grad(groups_, [&](const Group& group, std::size_t gi, std::size_t pi,
                                        const Tensor& param, const Tensor& grad) {
    Tensor& buffer = momentum_buffers[gi][pi];
    const bool first = !buffer.defined();
    if (momentum != 0 && first) buffer = zeros_like(param);
    const std::vector<Tensor> others =
        momentum != 0 ? std::vector<Tensor>{grad, buffer} : std::vector<Tensor>{grad};
    dispatch(param.dtype(), [&]<typename T>() {
      const T lr = T(group.lr), wd = T(group.weight_decay), mu = T(momentum),
              damp = T(1 - dampening);
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
  });
}

// ---- Adam / AdamW -------------------------------------------------------------------------------

Adam::Adam(
    std::vector<Tensor> params, double lr, std::pair<double, double> betas, double eps_, double wd)
    : Adam(one_group(std::move(params)), lr, betas, eps_, wd, false, "Adam") {}

Adam::Adam(std::vector<ParamGroup> groups, double lr, std::pair<double, double> betas, double eps_,
    double wd)
    : Adam(std::move(groups), lr, betas, eps_, wd, false, "Adam") {}

Adam::Adam(std::vector<ParamGroup> groups, double lr, std::pair<double, double> betas, double eps_,
    double wd, bool decoupled, const char* name)
    : Optimizer(std::move(groups), lr, wd, name),
      beta1(betas.first),
      beta2(betas.second),
      eps(eps_),
      decoupled_(decoupled) {
  if (const auto problems = adam_problems(beta1, beta2, eps); !problems.empty())
    fail<ValueError>(name, ": ", problems.front());
  for (const Group& g : groups_) state.emplace_back(g.params.size());
}

void Adam::step() {
  for_each_param_with_grad(groups_, [&](const Group& group, std::size_t gi, std::size_t pi,
                                        const Tensor& param, const Tensor& grad) {
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
      const AdamConstants<T> k{.b1 = T(beta1),
          .b2 = T(beta2),
          .one_minus_b1 = T(1 - beta1),
          .one_minus_b2 = T(1 - beta2),
          .weight_decay = T(group.weight_decay),
          .eps = T(eps),
          .decay = T(1 - group.lr * group.weight_decay),
          .c2 = T(bias_correction2_sqrt),
          .neg_step_size = T(-step_size)};
      const AdamRule rule = decoupled_               ? AdamRule::decoupled_decay
                            : k.weight_decay != T(0) ? AdamRule::l2_penalty
                                                     : AdamRule::plain;
      param.bump_version();  // an in-place write: a graph that saved param can no longer backprop
      T* p = param.data<T>();
      const T* g = grad.data<T>();
      T* m = s.exp_avg.data<T>();
      T* v = s.exp_avg_sq.data<T>();
      parallel_for(param.numel(), 16, [&](int64_t begin, int64_t end) {
        adam_update(p + begin, g + begin, m + begin, v + begin, end - begin, k, rule);
      });
    });
  });
}

AdamW::AdamW(
    std::vector<Tensor> params, double lr, std::pair<double, double> betas, double eps_, double wd)
    : Adam(one_group(std::move(params)), lr, betas, eps_, wd, true, "AdamW") {}

AdamW::AdamW(std::vector<ParamGroup> groups, double lr, std::pair<double, double> betas,
    double eps_, double wd)
    : Adam(std::move(groups), lr, betas, eps_, wd, true, "AdamW") {}

// ---- clipping -----------------------------------------------------------------------------------

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
