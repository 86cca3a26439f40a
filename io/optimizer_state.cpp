#include "io/optimizer_state.h"

#include <charconv>
#include <cmath>
#include <optional>
#include <utility>

namespace ag {

namespace {

// More parameter tensors than any model ag can train; a count above it in a file is damage, and
// the bound keeps a damaged count from allocating (a group's parameter numbers are a list).
constexpr uint64_t kMaxParameters = uint64_t(1) << 20;

// Version-1 files hold SGD's nesterov flag as an integer; every other hyper-parameter is a real.
bool is_integer_option(const std::string& name) { return name == "nesterov"; }
// The hyper-parameters a version-1 file keeps per group; the others it keeps once.
bool is_group_option(const std::string& name) { return name == "lr" || name == "weight_decay"; }

bool same_value(double a, double b) { return a == b || (std::isnan(a) && std::isnan(b)); }

// "12" → 12. Only the way std::to_string writes a number: digits, no sign, no leading zero.
std::optional<std::size_t> parse_index(std::string_view text) {
  if (text.empty() || (text.size() > 1 && text[0] == '0')) return std::nullopt;
  std::size_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

// The entries of `map` whose name starts with `stem`, in order.
template <class Map, class F>
void for_each_under(const Map& map, const std::string& stem, F f) {
  for (auto it = map.lower_bound(stem);
       it != map.end() && it->first.compare(0, stem.size(), stem) == 0; ++it)
    f(it->first.substr(stem.size()), it->second);
}

}  // namespace

void put_optimizer_state(
    Checkpoint& checkpoint, const optim::StateDict& state, const std::string& prefix) {
  auto fail = [](const std::string& what) {
    throw CheckpointError("checkpoint: cannot write the optimizer state: " + what);
  };
  // Everything goes into `entries` first: a refused state dict leaves `checkpoint` as it was.
  Checkpoint entries;
  entries.strings[prefix + ".type"] = state.type;
  entries.integers[prefix + ".groups"] = state.param_groups.size();
  // Where each parameter number lives in the file: (group, position in the group).
  std::map<std::size_t, std::pair<std::size_t, std::size_t>> place;
  for (std::size_t g = 0; g < state.param_groups.size(); ++g) {
    const optim::GroupState& group = state.param_groups[g];
    const std::string stem = prefix + ".group." + std::to_string(g) + ".";
    entries.integers[stem + "size"] = group.params.size();
    for (std::size_t i = 0; i < group.params.size(); ++i)
      if (!place.emplace(group.params[i], std::pair{g, i}).second)
        fail("parameter " + std::to_string(group.params[i]) + " is in more than one place");
    for (const auto& [name, value] : group.options) {
      if (is_group_option(name)) {
        entries.reals[stem + name] = value;
        continue;
      }
      // A shared hyper-parameter: written with group 0, and every other group must agree.
      const auto first = state.param_groups[0].options.find(name);
      if (first == state.param_groups[0].options.end() || !same_value(first->second, value))
        fail("group " + std::to_string(g) + "'s " + name +
             " differs from group 0's (a file keeps one " + name + " for all groups)");
      if (g > 0) continue;
      if (!is_integer_option(name)) {
        entries.reals[prefix + "." + name] = value;
      } else if (value == 0 || value == 1) {
        entries.integers[prefix + "." + name] = static_cast<uint64_t>(value);
      } else {
        fail(name + " is " + std::to_string(value) + ", not 0 or 1");
      }
    }
    if (g > 0)
      for (const auto& [name, value] : state.param_groups[0].options)
        if (!is_group_option(name) && !group.options.count(name))
          fail("group " + std::to_string(g) + " has no " + name + " (group 0 has)");
  }
  for (const auto& [number, param_state] : state.state) {
    const auto where = place.find(number);
    if (where == place.end())
      fail("state for parameter " + std::to_string(number) + ", which is in no group");
    const auto [g, i] = where->second;
    const std::string stem = prefix + ".state." + std::to_string(g) + "." + std::to_string(i) + ".";
    for (const auto& [name, tensor] : param_state.tensors) entries.tensors[stem + name] = tensor;
    for (const auto& [name, value] : param_state.scalars) {
      if (value < 0) fail(stem + name + " is negative (" + std::to_string(value) + ")");
      entries.integers[stem + name] = static_cast<uint64_t>(value);
    }
  }
  checkpoint.strings.insert_or_assign(prefix + ".type", state.type);
  for (auto& [name, value] : entries.integers) checkpoint.integers.insert_or_assign(name, value);
  for (auto& [name, value] : entries.reals) checkpoint.reals.insert_or_assign(name, value);
  for (auto& [name, tensor] : entries.tensors) checkpoint.tensors.insert_or_assign(name, tensor);
}

optim::StateDict get_optimizer_state(const Checkpoint& checkpoint, const std::string& prefix) {
  auto fail = [&](const std::string& what) {
    throw CheckpointError("checkpoint: optimizer state under '" + prefix + "': " + what);
  };
  const auto type = checkpoint.strings.find(prefix + ".type");
  const auto groups = checkpoint.integers.find(prefix + ".groups");
  if (type == checkpoint.strings.end() || groups == checkpoint.integers.end())
    throw CheckpointError("checkpoint: no optimizer state under '" + prefix + "'");
  if (groups->second > kMaxParameters)
    fail(std::to_string(groups->second) + " groups is not a group count");

  optim::StateDict state;
  state.type = type->second;
  // The hyper-parameters the file keeps once ("optimizer.beta1"): every entry directly under the
  // prefix except the two that describe the layout.
  std::map<std::string, double> shared;
  for_each_under(checkpoint.reals, prefix + ".", [&](const std::string& name, double value) {
    if (name.find('.') == std::string::npos) shared[name] = value;
  });
  for_each_under(checkpoint.integers, prefix + ".", [&](const std::string& name, uint64_t value) {
    if (name.find('.') != std::string::npos || name == "groups") return;
    if (value > (uint64_t(1) << 53))
      fail(name + " = " + std::to_string(value) + " is out of range");
    shared[name] = static_cast<double>(value);
  });

  std::vector<std::size_t> first_number;  // per group: the number of its first parameter
  std::size_t total = 0;
  for (std::size_t g = 0; g < groups->second; ++g) {
    const std::string stem = prefix + ".group." + std::to_string(g) + ".";
    const auto size = checkpoint.integers.find(stem + "size");
    const auto lr = checkpoint.reals.find(stem + "lr");
    const auto weight_decay = checkpoint.reals.find(stem + "weight_decay");
    if (size == checkpoint.integers.end() || lr == checkpoint.reals.end() ||
        weight_decay == checkpoint.reals.end())
      fail("group " + std::to_string(g) + " is incomplete in the file");
    if (size->second > kMaxParameters - total)
      fail("group " + std::to_string(g) + " has " + std::to_string(size->second) +
           " parameters, more than " + std::to_string(kMaxParameters) + " in all");
    optim::GroupState group;
    group.options = shared;
    group.options["lr"] = lr->second;
    group.options["weight_decay"] = weight_decay->second;
    for (std::size_t i = 0; i < size->second; ++i) group.params.push_back(total + i);
    first_number.push_back(total);
    total += size->second;
    state.param_groups.push_back(std::move(group));
  }

  // "0.3.exp_avg" → parameter 3 of group 0, its "exp_avg".
  auto locate = [&](const std::string& rest) {
    const std::size_t dot1 = rest.find('.');
    const std::size_t dot2 = dot1 == std::string::npos ? dot1 : rest.find('.', dot1 + 1);
    const std::string entry = prefix + ".state." + rest;
    if (dot2 == std::string::npos || dot2 + 1 == rest.size()) fail("unexpected entry " + entry);
    const std::optional<std::size_t> g = parse_index(std::string_view(rest).substr(0, dot1));
    const std::optional<std::size_t> i =
        parse_index(std::string_view(rest).substr(dot1 + 1, dot2 - dot1 - 1));
    if (!g || !i) fail("unexpected entry " + entry);
    if (*g >= state.param_groups.size() || *i >= state.param_groups[*g].params.size())
      fail(entry + " names a parameter outside the groups");
    return std::pair{first_number[*g] + *i, rest.substr(dot2 + 1)};
  };
  const std::string stem = prefix + ".state.";
  for_each_under(checkpoint.tensors, stem, [&](const std::string& rest, const Tensor& tensor) {
    auto [number, name] = locate(rest);
    state.state[number].tensors[name] = tensor;
  });
  for_each_under(checkpoint.integers, stem, [&](const std::string& rest, uint64_t value) {
    auto [number, name] = locate(rest);
    if (value > static_cast<uint64_t>(INT64_MAX))
      fail(stem + rest + " = " + std::to_string(value) + " is out of range");
    state.state[number].scalars[name] = static_cast<int64_t>(value);
  });
  for_each_under(checkpoint.reals, stem,
      [&](const std::string& rest, double) { fail("unexpected entry " + stem + rest); });
  return state;
}

}  // namespace ag
