#include "nn/module.h"

#include <charconv>
#include <iomanip>
#include <ostream>
#include <sstream>
#include <type_traits>
#include <variant>

#include "autograd/convert.h"

namespace ag::nn {

void Module::check_new_name(const std::string& name) const {
  if (name.empty())
    fail<ValueError>(type_name(), ": a parameter, buffer or submodule name cannot be empty");
  if (name.find('.') != std::string::npos)
    fail<ValueError>(
        type_name(), ": name '", name, "' contains a dot (dots join the names of nested modules)");
  auto taken = [&](const auto& list) {
    for (const auto& entry : list)
      if (entry.first == name) return true;
    return false;
  };
  if (taken(parameters_) || taken(buffers_) || taken(children_))
    fail<ValueError>(type_name(), ": name '", name, "' is already registered");
}

Tensor& Module::register_parameter(const std::string& name, Tensor tensor) {
  check_new_name(name);
  if (tensor.defined() && !tensor.is_leaf())
    fail<ValueError>(type_name(), ": parameter '", name,
        "' must be a leaf tensor (create it under NoGradGuard or detach it)");
  if (tensor.defined()) tensor.requires_grad_(true);
  parameters_.emplace_back(name, std::move(tensor));
  return parameters_.back().second;
}

Tensor& Module::register_buffer(const std::string& name, Tensor tensor, bool persistent) {
  check_new_name(name);
  buffers_.emplace_back(name, std::move(tensor));
  if (!persistent) non_persistent_buffers_.insert(name);
  return buffers_.back().second;
}

void Module::add_child(const std::string& name, std::shared_ptr<Module> module) {
  check_new_name(name);
  if (!module) fail<ValueError>(type_name(), ": submodule '", name, "' is null");
  module->train(training_);
  children_.emplace_back(name, std::move(module));
}

void Module::replace_module(const std::string& name, std::shared_ptr<Module> module) {
  if (!module) fail<ValueError>(type_name(), ": submodule '", name, "' is null");
  for (auto& [child_name, child] : children_)
    if (child_name == name) {
      module->train(training_);
      child = std::move(module);
      return;
    }
  fail<ValueError>(type_name(), ": there is no submodule '", name, "' to replace");
}

Tensor* Module::parameter_slot(const std::string& name) {
  for (auto& [n, t] : parameters_)
    if (n == name) return &t;
  return nullptr;
}

Tensor* Module::buffer_slot(const std::string& name) {
  for (auto& [n, t] : buffers_)
    if (n == name) return &t;
  return nullptr;
}

std::vector<std::string> Module::parameter_names() const {
  std::vector<std::string> names;
  for (const auto& entry : parameters_) names.push_back(entry.first);
  return names;
}

std::vector<std::string> Module::buffer_names() const {
  std::vector<std::string> names;
  for (const auto& entry : buffers_) names.push_back(entry.first);
  return names;
}

void Module::collect(const std::string& prefix, Collect what,
    std::vector<std::pair<std::string, Tensor>>& out, std::unordered_set<const void*>* seen) const {
  for (const auto& [name, tensor] : what == Collect::parameters ? parameters_ : buffers_) {
    if (!tensor.defined()) continue;  // an empty slot (bias=False)
    if (what == Collect::persistent_buffers && non_persistent_buffers_.count(name)) continue;
    // A slot the user assigned (tying): it must still be something an optimizer can train.
    if (what == Collect::parameters && !tensor.is_leaf())
      fail<ValueError>(type_name(), ": parameter '", prefix + name,
          "' holds a tensor computed by an op, not a leaf (assign a parameter, or detach it)");
    if (seen && !seen->insert(tensor.identity()).second) continue;  // tied: listed already
    out.emplace_back(prefix + name, tensor);
  }
  for (const auto& [name, child] : children_) child->collect(prefix + name + ".", what, out, seen);
}

std::vector<std::pair<std::string, Tensor>> Module::named_parameters(bool remove_duplicate) const {
  std::vector<std::pair<std::string, Tensor>> out;
  std::unordered_set<const void*> seen;
  collect("", Collect::parameters, out, remove_duplicate ? &seen : nullptr);
  return out;
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& [name, tensor] : named_parameters()) out.push_back(tensor);
  return out;
}

std::vector<std::pair<std::string, Tensor>> Module::named_buffers(
    bool persistent_only, bool remove_duplicate) const {
  std::vector<std::pair<std::string, Tensor>> out;
  std::unordered_set<const void*> seen;
  collect("", persistent_only ? Collect::persistent_buffers : Collect::buffers, out,
      remove_duplicate ? &seen : nullptr);
  return out;
}

int64_t Module::num_parameters() const {
  int64_t total = 0;
  for (const Tensor& p : parameters()) total += p.numel();
  return total;
}

void Module::apply(const std::function<void(Module&)>& fn) {
  fn(*this);
  for (auto& [name, child] : children_) child->apply(fn);
}

namespace {
void check_conversion_target(DType dtype) {
  if (!is_floating_point(dtype))
    fail<DTypeError>("Module::to: a module converts to a floating dtype (float32 or float64), not ",
        dtype_name(dtype), " (its int64 and bool buffers keep their dtype anyway)");
}
}  // namespace

void Module::train(bool on) {
  training_ = on;
  for (auto& [name, child] : children_) child->train(on);
}

void Module::zero_grad() {
  for (const Tensor& p : parameters()) p.zero_grad();
}

void Module::to(DType dtype) {
  check_conversion_target(dtype);
  NoGradGuard no_grad;
  auto convert = [dtype](const Tensor& t) {
    // As PyTorch's module.to(dtype): only floating tensors change; an int64 or bool buffer (token
    // ids, a causal mask) keeps what it holds.
    if (!is_floating_point(t.dtype())) return;
    // Swap the data under the handle, so every holder of this tensor sees the new dtype.
    Tensor converted = t.to(dtype).contiguous();
    if (converted.shares_storage(t)) return;
    t.set_data(converted);
    t.zero_grad();  // a gradient of the old dtype would no longer fit
  };
  for (auto& [name, p] : named_parameters()) convert(p);
  for (auto& [name, b] : named_buffers()) convert(b);
  apply([dtype](Module& module) { module.recompute_buffers(dtype); });
}

std::map<std::string, Tensor> Module::state_dict() const {
  std::map<std::string, Tensor> state;
  for (auto& [name, t] : named_parameters(/*remove_duplicate=*/false)) state.emplace(name, t);
  for (auto& [name, t] : named_buffers(false, /*remove_duplicate=*/false)) state.emplace(name, t);
  return state;
}

namespace {
// A value for a message: an integer as it is, a float with all its digits.
template <class S>
std::string value_text(S v) {
  if constexpr (std::is_same_v<S, int64_t>) return std::to_string(v);
  std::ostringstream out;
  out << std::setprecision(17) << static_cast<double>(v);
  return out.str();
}

// `source` in `target` dtype when that changes no value, else why not (empty: the dtypes say it). The same dtype is taken as
// it is; float32 and float64 do not mix (ag never changes a model's precision behind its back:
// convert the file's tensors or the model first). Between int64 or bool and the others every
// element must survive exactly: an I64 file of whole-number weights loads into a float parameter,
// 2^24 + 1 into a float32 one does not, nor 0.5 into an int64 buffer, nor 2 into a bool one.
// (PyTorch's load_state_dict copies any of them, rounding and truncating silently.)
std::variant<Tensor, std::string> exactly_as(const Tensor& source, DType target) {
  if (source.dtype() == target) return source;
  if (is_floating_point(source.dtype()) && is_floating_point(target))
    return std::string();  // (the dtypes say it all)
  const Tensor from = source.contiguous();
  Tensor out = empty(source.shape(), target);
  std::string problem;
  dispatch_all(source.dtype(), [&]<typename S>() {
    dispatch_all(target, [&]<typename T>() {
      const S* x = from.data<S>();
      T* y = out.data<T>();
      for (int64_t i = 0; i < from.numel() && problem.empty(); ++i) {
        if constexpr (std::is_same_v<T, bool>) {
          if (x[i] != S(0) && x[i] != S(1))
            problem = "element " + std::to_string(i) + " is " + value_text(x[i]) +
                      ", which bool cannot hold (0 or 1)";
          else
            y[i] = x[i] == S(1);
        } else {
          try {
            y[i] = exact_cast<T>(x[i], "load_state_dict");
          } catch (const ValueError&) {
            problem = "element " + std::to_string(i) + " is " + value_text(x[i]) + ", which " +
                      dtype_name(target) + " cannot hold exactly";
          }
        }
      }
    });
  });
  if (!problem.empty()) return problem;
  return out;
}

// Whether two tensors of one shape hold the same values in the same dtype.
bool same_values(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype()) return false;
  return dispatch_all(
      a.dtype(), [&]<typename T>() { return a.to_vector<T>() == b.to_vector<T>(); });
}
}  // namespace

std::vector<std::string> Module::load_state_dict(
    const std::map<std::string, Tensor>& state, bool strict) {
  const std::map<std::string, Tensor> own = state_dict();
  // Check everything first; copy only what fits (and, when strict, only if everything fits).
  std::vector<std::string> missing, unexpected, mismatched, problems;
  std::vector<std::pair<Tensor, Tensor>> copies;  // (destination, source)
  for (const auto& [name, target] : own) {
    auto it = state.find(name);
    if (it == state.end()) {
      missing.push_back(name);
      continue;
    }
    const Tensor& source = it->second;
    if (source.shape() != target.shape())
      mismatched.push_back("shape mismatch " + name + ": file " + shape_str(source.shape()) +
                           ", model " + shape_str(target.shape()));
    else if (auto converted = exactly_as(source, target.dtype());
             const std::string* problem = std::get_if<std::string>(&converted))
      mismatched.push_back("dtype mismatch " + name + ": file " + dtype_name(source.dtype()) +
                           ", model " + dtype_name(target.dtype()) +
                           (problem->empty() ? "" : " (" + *problem + ")"));
    else
      copies.emplace_back(target, std::get<Tensor>(converted));
  }
  for (const auto& [name, source] : state)
    if (!own.count(name)) unexpected.push_back(name);
  // One tensor under several names (tied) takes one value: the file's entries must agree.
  std::map<const void*, std::pair<std::string, Tensor>> first_source;  // by model tensor
  for (const auto& [name, target] : own) {
    auto it = state.find(name);
    if (it == state.end() || it->second.shape() != target.shape()) continue;
    const auto [at, fresh] = first_source.emplace(target.identity(), std::pair{name, it->second});
    if (!fresh && !same_values(at->second.second, it->second))
      mismatched.push_back("tied " + at->second.first + " and " + name +
                           " (one tensor in the model) differ in the file");
  }
  auto join = [](const std::vector<std::string>& names) {
    std::string s;
    for (const std::string& n : names) s += (s.empty() ? "" : ", ") + n;
    return s;
  };
  std::vector<std::string> parts;
  if (!missing.empty()) parts.push_back("missing [" + join(missing) + "]");
  if (!unexpected.empty()) parts.push_back("unexpected [" + join(unexpected) + "]");
  for (const std::string& m : mismatched) parts.push_back(m);
  if (strict && !parts.empty()) {
    std::string message = "checkpoint: ";
    for (std::size_t i = 0; i < parts.size(); ++i) message += (i ? "; " : "") + parts[i];
    throw StateDictError(message);
  }
  NoGradGuard no_grad;
  for (auto& [target, source] : copies) target.copy_(source);
  for (const std::string& n : missing) problems.push_back("missing " + n);
  for (const std::string& n : unexpected) problems.push_back("unexpected " + n);
  for (const std::string& m : mismatched) problems.push_back(m);
  return problems;
}

std::string Module::repr() const {
  // PyTorch: "Name(extra)" for a leaf; otherwise "Name(" + extra and children, one per line,
  // each indented by two spaces (also the continuation lines of a child's own repr) + ")".
  std::vector<std::string> lines;
  const std::string extra = extra_repr();
  if (!extra.empty()) lines.push_back(extra);
  for (const auto& [name, child] : children_) {
    std::string child_repr = child->repr();
    std::string indented;
    for (char c : child_repr) {
      indented += c;
      if (c == '\n') indented += "  ";
    }
    lines.push_back("(" + name + "): " + indented);
  }
  std::string out = type_name() + "(";
  if (children_.empty()) return out + extra + ")";
  for (const std::string& line : lines) out += "\n  " + line;
  return out + "\n)";
}

std::ostream& operator<<(std::ostream& out, const Module& module) { return out << module.repr(); }

bool ModuleDict::contains(const std::string& name) const {
  for (const auto& [key, module] : named_children())
    if (key == name) return true;
  return false;
}

std::shared_ptr<Module> ModuleDict::operator[](const std::string& name) const {
  std::string keys;
  for (const auto& [key, module] : named_children()) {
    if (key == name) return module;
    keys += (keys.empty() ? "" : ", ") + key;
  }
  fail<ValueError>(
      "ModuleDict: no module '", name, "' (its keys: ", keys.empty() ? "none" : keys, ")");
}

std::string python_float(double value) {
  // Python's repr: the shortest digits that round-trip, written in fixed notation when the
  // decimal exponent is in [-4, 16) and in scientific notation (two exponent digits) otherwise.
  if (value != value) return "nan";
  if (value == 1.0 / 0.0) return "inf";
  if (value == -1.0 / 0.0) return "-inf";
  char buffer[64];
  auto [end, ec] =
      std::to_chars(buffer, buffer + sizeof buffer, value, std::chars_format::scientific);
  std::string sci(buffer, end);  // e.g. "-1.25e-05"
  const std::size_t e = sci.find('e');
  std::string sign = sci[0] == '-' ? "-" : "";
  std::string digits;
  for (std::size_t i = sign.size(); i < e; ++i)
    if (sci[i] != '.') digits += sci[i];
  const int exponent = std::stoi(sci.substr(e + 1));
  if (exponent < -4 || exponent >= 16) {
    std::string out = sign;
    out += digits[0];
    if (digits.size() > 1) out.append(".").append(digits, 1);
    const int magnitude = exponent < 0 ? -exponent : exponent;
    out += exponent < 0 ? "e-" : "e+";
    if (magnitude < 10) out += '0';
    return out + std::to_string(magnitude);
  }
  if (exponent < 0) return sign + "0." + std::string(-exponent - 1, '0') + digits;
  const std::size_t int_digits = static_cast<std::size_t>(exponent) + 1;
  if (digits.size() <= int_digits)
    return sign + digits + std::string(int_digits - digits.size(), '0') + ".0";
  return sign + digits.substr(0, int_digits) + "." + digits.substr(int_digits);
}

std::string python_bool(bool value) { return value ? "True" : "False"; }

}  // namespace ag::nn
