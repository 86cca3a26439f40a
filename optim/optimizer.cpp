// The optimizers' steps first (the formulas they follow are in optim/optimizer.h, and beside each
// line of the update), then clipping, construction and state dicts. load_state_dict and its
// checks are in optim/state_dict_checks.cpp.
#include "optim/optimizer.h"

#include <algorithm>
#include <cmath>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "autograd/ops.h"
#include "autograd/parallel.h"
#include "autograd/profiler.h"
#include "optim/state_dict_checks.h"

namespace ag::optim {

namespace {

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

}  // namespace

// ---- SGD ----------------------------------------------------------------------------------------

void SGD::step() {
  const profiler::record_function scope("Optimizer.step#SGD.step");  // torch.profiler's name
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

namespace {

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

void Adam::step() {
  const profiler::record_function scope(
      decoupled_ ? "Optimizer.step#AdamW.step" : "Optimizer.step#Adam.step");  // torch's names
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

// ---- clipping -----------------------------------------------------------------------------------

double clip_grad_norm(const std::vector<Tensor>& params, double max_norm) {
  const profiler::record_function scope("clip_grad_norm_");
  if (!(max_norm > 0)) fail<ValueError>("clip_grad_norm: max_norm ", max_norm, " must be positive");
  NoGradGuard no_grad;
  // Each tensor once: a tied weight listed under two names is one gradient (counted and scaled once).
  std::vector<Tensor> distinct;
  std::unordered_set<const void*> seen;
  for (const Tensor& p : params)
    if (p.defined() && seen.insert(p.identity()).second) distinct.push_back(p);
  double total_sq = 0;
  for (const Tensor& p : distinct) {
    if (!p.grad().defined()) continue;
    // ‖∇ᵢ‖², accumulated in double, the same on any number of threads
    for (double sum : squared_norm_partials(p.grad())) total_sq += sum;
  }
  const double total = std::sqrt(total_sq);
  const double coef = max_norm / (total + 1e-6);
  if (coef < 1)
    for (const Tensor& p : distinct)
      if (p.grad().defined()) p.grad().mul_(coef);
  return total;
}

// ---- construction -------------------------------------------------------------------------------

namespace {

void check_param(const Tensor& p, const char* optimizer) {
  if (!p.defined() || !p.is_leaf() || !p.is_contiguous())
    fail<ValueError>(optimizer, ": parameters must be contiguous leaf tensors");
}

std::vector<ParamGroup> one_group(std::vector<Tensor> params) {
  return {ParamGroup{std::move(params), {}, {}}};
}

}  // namespace

std::vector<ParamGroup> weight_decay_groups(
    const std::vector<Tensor>& params, double weight_decay) {
  ParamGroup decay{{}, std::nullopt, weight_decay}, no_decay{{}, std::nullopt, 0.0};
  for (const Tensor& p : params) (p.dim() >= 2 ? decay : no_decay).params.push_back(p);
  return {decay, no_decay};
}

std::vector<ParamGroup> groups_of(BracedGroups groups) {
  std::vector<ParamGroup> out;
  for (const auto& params : groups) out.push_back({std::vector<Tensor>(params), {}, {}});
  return out;
}

Optimizer::Optimizer(std::vector<ParamGroup> groups, double default_lr, double default_weight_decay,
    const char* name, std::vector<std::string> option_names)
    : name_(name), option_names_(std::move(option_names)) {
  if (!(default_lr >= 0)) fail<ValueError>(name, ": learning rate ", default_lr, " is negative");
  if (!(default_weight_decay >= 0))
    fail<ValueError>(name, ": weight decay ", default_weight_decay, " is negative");
  // Where each tensor was first seen: (group, index).
  std::unordered_map<const void*, std::pair<std::size_t, std::size_t>> seen;
  for (std::size_t gi = 0; gi < groups.size(); ++gi) {
    ParamGroup& g = groups[gi];
    for (std::size_t i = 0; i < g.params.size(); ++i) {
      check_param(g.params[i], name);
      const auto [at, fresh] = seen.emplace(g.params[i].identity(), std::pair{gi, i});
      if (!fresh)
        fail<ValueError>(name, ": parameter ", i, " of group ", gi, " is parameter ",
            at->second.second, " of group ", at->second.first,
            " again (one tensor given twice would be stepped twice; a tied weight is one "
            "parameter: Module::parameters() lists it once)");
    }
    groups_.push_back({std::move(g.params), g.lr.value_or(default_lr),
        g.weight_decay.value_or(default_weight_decay)});
  }
}

void Optimizer::zero_grad() {
  for (const Group& g : groups_)
    for (const Tensor& p : g.params) p.zero_grad();
}

SGD::SGD(
    std::vector<Tensor> params, double lr, double mom, double damp, double weight_decay, bool nest)
    : SGD(one_group(std::move(params)), lr, mom, damp, weight_decay, nest) {}

SGD::SGD(std::vector<ParamGroup> groups, double lr, double mom, double damp, double weight_decay,
    bool nest)
    : Optimizer(std::move(groups), lr, weight_decay, "SGD", {"momentum", "dampening", "nesterov"}),
      momentum(mom),
      dampening(damp),
      nesterov(nest) {
  if (const auto problems = sgd_problems(momentum, dampening, nesterov); !problems.empty())
    fail<ValueError>("SGD: ", problems.front());
  for (const Group& g : groups_) momentum_buffers.emplace_back(g.params.size());
}

Adam::Adam(
    std::vector<Tensor> params, double lr, std::pair<double, double> betas, double eps_, double wd)
    : Adam(one_group(std::move(params)), lr, betas, eps_, wd, false, "Adam") {}

Adam::Adam(std::vector<ParamGroup> groups, double lr, std::pair<double, double> betas, double eps_,
    double wd)
    : Adam(std::move(groups), lr, betas, eps_, wd, false, "Adam") {}

Adam::Adam(std::vector<ParamGroup> groups, double lr, std::pair<double, double> betas, double eps_,
    double wd, bool decoupled, const char* name)
    : Optimizer(std::move(groups), lr, wd, name, {"beta1", "beta2", "eps"}),
      beta1(betas.first),
      beta2(betas.second),
      eps(eps_),
      decoupled_(decoupled) {
  if (const auto problems = adam_problems(beta1, beta2, eps); !problems.empty())
    fail<ValueError>(name, ": ", problems.front());
  for (const Group& g : groups_) state.emplace_back(g.params.size());
}

AdamW::AdamW(
    std::vector<Tensor> params, double lr, std::pair<double, double> betas, double eps_, double wd)
    : Adam(one_group(std::move(params)), lr, betas, eps_, wd, true, "AdamW") {}

AdamW::AdamW(std::vector<ParamGroup> groups, double lr, std::pair<double, double> betas,
    double eps_, double wd)
    : Adam(std::move(groups), lr, betas, eps_, wd, true, "AdamW") {}

// ---- state dicts --------------------------------------------------------------------------------

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

StateDict SGD::state_dict() const {
  StateDict dict =
      common_state_dict({{"momentum", momentum}, {"dampening", dampening}, {"nesterov", nesterov}});
  for (std::size_t g = 0; g < groups_.size(); ++g)
    for (std::size_t i = 0; i < groups_[g].params.size(); ++i)
      if (momentum_buffers[g][i].defined())
        dict.state[param_number(g, i)].tensors["momentum_buffer"] = momentum_buffers[g][i];
  return dict;
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

}  // namespace ag::optim
