#include "training/layout.h"

#include <cmath>
#include <sstream>

namespace ag::training {

Layout Layout::writer(Checkpoint& checkpoint) { return Layout(&checkpoint, nullptr, ""); }

Layout Layout::reader(const Checkpoint& checkpoint, const std::string& path) {
  return Layout(nullptr, &checkpoint, path);
}

void Layout::refuse(const std::string& key, const std::string& why) const {
  throw CheckpointError(
      "checkpoint " + path_ + ": the saved run configuration is inconsistent: " + key + " " + why);
}

void Layout::count(const std::string& key, int64_t& value, int64_t min, int64_t max) {
  if (!reading()) {
    out_->integers[key] = static_cast<uint64_t>(value);
    return;
  }
  if (!in_->integers.count(key)) refuse(key, "is missing");
  const uint64_t saved = in_->integer(key);
  if (saved > static_cast<uint64_t>(max) || static_cast<int64_t>(saved) < min)
    refuse(key, "is " + std::to_string(saved) + ", outside " + std::to_string(min) + "-" +
                    std::to_string(max));
  value = static_cast<int64_t>(saved);
}

void Layout::count(const std::string& key, int& value, int min, int max) {
  int64_t wide = value;
  count(key, wide, min, max);
  value = static_cast<int>(wide);
}

void Layout::integer(const std::string& key, uint64_t& value) {
  if (!reading()) {
    out_->integers[key] = value;
    return;
  }
  if (!in_->integers.count(key)) refuse(key, "is missing");
  value = in_->integer(key);
}

void Layout::integer(const std::string& key, uint32_t& value) {
  uint64_t wide = value;
  integer(key, wide);
  if (wide > std::numeric_limits<uint32_t>::max())
    refuse(key, "is " + std::to_string(wide) + ", more than 32 bits");
  value = static_cast<uint32_t>(wide);
}

void Layout::real(const std::string& key, double& value, double min) {
  if (!reading()) {
    out_->reals[key] = value;
    return;
  }
  if (!in_->reals.count(key)) refuse(key, "is missing");
  const double saved = in_->real(key);
  if (!std::isfinite(saved) || saved < min) {
    std::ostringstream why;
    why << "is " << saved << ", not a finite number >= " << min;
    refuse(key, why.str());
  }
  value = saved;
}

void Layout::text(const std::string& key, std::string& value) {
  if (!reading()) {
    out_->strings[key] = value;
    return;
  }
  if (!in_->strings.count(key)) refuse(key, "is missing");
  value = in_->string(key);
}

void Layout::choice(const std::string& key, std::string& value, const std::string& choices) {
  text(key, value);
  if (!reading()) return;
  std::istringstream known(choices);
  for (std::string choice; std::getline(known, choice, '|');)
    if (choice == value) return;
  refuse(key, "is '" + value + "', not one of " + choices);
}

void Layout::count_unless(const std::string& key, int64_t& value, int64_t absent) {
  if (!reading() ? value == absent : in_->integers.count(key) == 0) {
    if (reading()) value = absent;
    return;
  }
  count(key, value);
}

void Layout::choice_unless(const std::string& key, std::string& value, const std::string& choices,
    const std::string& absent) {
  if (!reading() ? value == absent : in_->strings.count(key) == 0) {
    if (reading()) value = absent;
    return;
  }
  choice(key, value, choices);
}

void Layout::generator(const std::string& name, GeneratorState& state) {
  integer(name + ".seed", state.seed);
  integer(name + ".offset", state.offset);
}

void Layout::generator(const std::string& name, Generator& generator) {
  GeneratorState state = generator.state();
  this->generator(name, state);
  if (reading()) generator.set_state(state);
}

}  // namespace ag::training
