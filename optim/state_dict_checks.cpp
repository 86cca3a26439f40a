// load_state_dict and the checks it runs before it changes anything: the part every optimizer
// shares (type, groups, numbering, lr and weight_decay), each optimizer's hooks (its options, its
// per-parameter state), and the hyper-parameter checks its constructor shares with them. The
// steps themselves are in optim/optimizer.cpp.
#include "optim/state_dict_checks.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "optim/optimizer.h"

namespace ag::optim {

namespace {

Tensor copy_of(const Tensor& t) { return t.detach().clone(); }

std::string str(double value) {
  std::ostringstream text;
  text << value;
  return text.str();
}

// "state.3.exp_avg": how a problem names an entry of a state dict.
std::string state_name(std::size_t number, const std::string& name) {
  return "state." + std::to_string(number) + "." + name;
}

// What does not fit in the shared part: the type, the group count and sizes, the numbering, each
// group having exactly lr, weight_decay and option_names, lr and weight_decay not negative, the
// options the same in every group, state only for numbered parameters. `optimizer` is the
// optimizer's name ("SGD"), `groups` its groups.
std::vector<std::string> shared_problems(const StateDict& saved, const std::string& optimizer,
    const std::vector<Optimizer::Group>& groups, const std::vector<std::string>& option_names) {
  std::vector<std::string> problems;
  if (saved.type.empty()) {
    problems.push_back("no optimizer state (the state dict has no type)");
    return problems;
  }
  if (saved.type != optimizer) {
    problems.push_back("the file holds " + saved.type + " state, this optimizer is " + optimizer);
    return problems;
  }
  if (saved.param_groups.size() != groups.size()) {
    problems.push_back("the file has " + std::to_string(saved.param_groups.size()) +
                       " parameter groups, this optimizer " + std::to_string(groups.size()));
    return problems;
  }
  std::vector<std::string> names = option_names;
  names.insert(names.begin(), {"lr", "weight_decay"});
  std::size_t number = 0;
  for (std::size_t g = 0; g < groups.size(); ++g) {
    const GroupState& group = saved.param_groups[g];
    const std::string where = "group " + std::to_string(g);
    if (group.params.size() != groups[g].params.size()) {
      problems.push_back(where + " has " + std::to_string(group.params.size()) +
                         " parameters in the file, " + std::to_string(groups[g].params.size()) +
                         " here");
      return problems;
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
        problems.push_back(where + "'s " + name + " differs from group 0's (" + optimizer +
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
  return problems;
}

}  // namespace

// ---- what every optimizer shares ----------------------------------------------------------------

void Optimizer::load_state_dict(const StateDict& saved) {
  std::vector<std::string> problems = shared_problems(saved, name_, groups_, option_names_);
  // Once the shared part fits, the values of the optimizer's own options (group 0's: they are the
  // same in every group), then its per-parameter state.
  if (problems.empty() && !saved.param_groups.empty())
    problems = option_problems(saved.param_groups[0].options);
  if (problems.empty()) check_param_states(saved, problems);
  if (!problems.empty()) {
    std::string message = "checkpoint: " + name_ + " state does not fit: ";
    for (std::size_t i = 0; i < problems.size(); ++i) message += (i ? "; " : "") + problems[i];
    throw StateDictError(message);
  }
  // Everything fits: every group's lr and weight_decay, then the optimizer's own part.
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    groups_[g].lr = saved.param_groups[g].options.at("lr");
    groups_[g].weight_decay = saved.param_groups[g].options.at("weight_decay");
  }
  load_own(
      saved.param_groups.empty() ? std::map<std::string, double>{} : saved.param_groups[0].options,
      saved);
}

void Optimizer::check_state_tensor(const Tensor& tensor, const std::string& name,
    std::size_t number, std::vector<std::string>& problems, bool non_negative) const {
  // load_state_dict's shared checks have made sure that the number is one of a parameter.
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

// ---- SGD ----------------------------------------------------------------------------------------

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

// ---- Adam / AdamW -------------------------------------------------------------------------------

// What is wrong with Adam's and AdamW's own hyper-parameters (the constructor's and
// load_state_dict's check, as SGD's).
std::vector<std::string> adam_problems(double beta1, double beta2, double eps) {
  std::vector<std::string> problems;
  if (!(beta1 >= 0 && beta1 < 1 && beta2 >= 0 && beta2 < 1))
    problems.push_back("betas (" + str(beta1) + ", " + str(beta2) + ") must lie in [0, 1)");
  if (!(eps >= 0)) problems.push_back("eps " + str(eps) + " is negative");
  return problems;
}

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

}  // namespace ag::optim
