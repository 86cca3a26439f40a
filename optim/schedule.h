// Learning-rate schedules. A schedule is a multiplier f(t) of each group's base learning rate at
// update t = 1, 2, …; a Scheduler applies it to an optimizer:
//
//   Scheduler scheduler(optimizer, cosine_with_warmup(100, 2000));   // lr of update 1 set
//   for (...) { ...; optimizer.step(); scheduler.step(); }           // lr of the next update
#pragma once

#include <functional>

#include "optim/optimizer.h"

namespace ag::optim {

using Schedule = std::function<double(int64_t step)>;

// γ^⌊(t − 1) / step_size⌋: the rate is multiplied by γ every step_size updates
// (torch.optim.lr_scheduler.StepLR counted in updates).
Schedule step_decay(int64_t step_size, double gamma);

// Linear warm-up from 1/warmup to 1 over the first `warmup` updates, then a half cosine from 1
// down to min_factor at update `total`, and min_factor after it.
Schedule cosine_with_warmup(int64_t warmup, int64_t total, double min_factor = 0.0);

// nanoGPT's get_lr (train.py) as a factor of the peak rate: update t = 1, 2, … is nanoGPT's
// iteration it = t − 1, and
//   it < warmup_iters                   (it + 1) / (warmup_iters + 1)     linear warm-up
//   warmup_iters <= it <= lr_decay_iters  m + ½ (1 + cos(π r)) (1 − m),    r = (it − warmup_iters)
//                                                                  / (lr_decay_iters − warmup_iters)
//   it > lr_decay_iters                 m                                  (m = min_lr / lr)
// so that the peak rate is reached at it = warmup_iters and min_lr at it = lr_decay_iters.
// ValueError unless 0 <= warmup_iters < lr_decay_iters and 0 <= min_factor <= 1.
Schedule nanogpt_schedule(int64_t warmup_iters, int64_t lr_decay_iters, double min_factor);

// The schedule of "Attention Is All You Need" (Vaswani et al., 2017, eq. 3):
//   d_model^−0.5 · min(t^−0.5, t · warmup^−1.5)
// — linear growth for `warmup` updates, then decay as 1/√t. Use it with base lr 1 for the
// paper's rates, or scale it.
Schedule transformer_schedule(int64_t d_model, int64_t warmup);

class Scheduler {
 public:
  // Remembers each group's current lr as its base and sets the lr of update 1.
  Scheduler(Optimizer& optimizer, Schedule schedule);
  // Moves to the next update and sets its lr.
  void step();
  // The update whose lr is set (1 before the first step()); restoring it restores the schedule.
  int64_t current_step() const { return step_; }
  void set_step(int64_t step);
  double lr(std::size_t group = 0) const;

 private:
  void apply();
  Optimizer& optimizer_;
  Schedule schedule_;
  std::vector<double> base_lrs_;
  int64_t step_ = 1;
};

}  // namespace ag::optim
