#include "optim/schedule.h"

#include <cmath>
#include <numbers>

namespace ag::optim {

Schedule step_decay(int64_t step_size, double gamma) {
  if (step_size <= 0) fail<ValueError>("step_decay: step_size ", step_size, " must be positive");
  return [=](int64_t t) { return std::pow(gamma, static_cast<double>((t - 1) / step_size)); };
}

Schedule cosine_with_warmup(int64_t warmup, int64_t total, double min_factor) {
  if (warmup < 0 || total <= warmup)
    fail<ValueError>("cosine_with_warmup: need 0 <= warmup (", warmup, ") < total (", total, ")");
  return [=](int64_t t) {
    if (t <= warmup) return static_cast<double>(t) / static_cast<double>(warmup);
    if (t >= total) return min_factor;
    const double progress = static_cast<double>(t - warmup) / static_cast<double>(total - warmup);
    return min_factor + (1 - min_factor) * 0.5 * (1 + std::cos(std::numbers::pi * progress));
  };
}

Schedule nanogpt_schedule(int64_t warmup_iters, int64_t lr_decay_iters, double min_factor) {
  if (warmup_iters < 0 || lr_decay_iters <= warmup_iters)
    fail<ValueError>("nanogpt_schedule: need 0 <= warmup_iters (", warmup_iters,
        ") < lr_decay_iters (", lr_decay_iters, ")");
  if (!(min_factor >= 0 && min_factor <= 1))
    fail<ValueError>("nanogpt_schedule: min_factor ", min_factor, " must be in [0, 1]");
  return [=](int64_t t) {
    const int64_t it = t - 1;  // nanoGPT counts its iterations from 0
    if (it < warmup_iters)
      return static_cast<double>(it + 1) / static_cast<double>(warmup_iters + 1);
    if (it > lr_decay_iters) return min_factor;
    const double decay_ratio =
        static_cast<double>(it - warmup_iters) / static_cast<double>(lr_decay_iters - warmup_iters);
    const double coeff = 0.5 * (1.0 + std::cos(std::numbers::pi * decay_ratio));  // 1 → 0
    return min_factor + coeff * (1.0 - min_factor);
  };
}

Schedule transformer_schedule(int64_t d_model, int64_t warmup) {
  if (d_model <= 0 || warmup <= 0)
    fail<ValueError>(
        "transformer_schedule: d_model ", d_model, " and warmup ", warmup, " must be positive");
  return [=](int64_t t) {
    const double step = static_cast<double>(t), w = static_cast<double>(warmup);
    return std::pow(static_cast<double>(d_model), -0.5) *
           std::min(std::pow(step, -0.5), step * std::pow(w, -1.5));
  };
}

Scheduler::Scheduler(Optimizer& optimizer, Schedule schedule)
    : optimizer_(optimizer), schedule_(std::move(schedule)) {
  for (const Optimizer::Group& g : optimizer_.param_groups()) base_lrs_.push_back(g.lr);
  apply();
}

void Scheduler::step() {
  ++step_;
  apply();
}

void Scheduler::set_step(int64_t step) {
  if (step < 1) fail<ValueError>("Scheduler: step ", step, " must be at least 1");
  step_ = step;
  apply();
}

double Scheduler::lr(std::size_t group) const { return optimizer_.param_groups().at(group).lr; }

void Scheduler::apply() {
  const double factor = schedule_(step_);
  for (std::size_t i = 0; i < base_lrs_.size(); ++i)
    optimizer_.param_groups()[i].lr = base_lrs_[i] * factor;
}

}  // namespace ag::optim
