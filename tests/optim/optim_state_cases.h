// Shared by the optimizer state tests (tests/optim/test_optim_state.cpp through state dicts,
// tests/io/test_optimizer_state.cpp through checkpoint files): one optimizer of each kind and
// setting, parameters, and gradients that are the same in every run.
#pragma once

#include <catch2/catch.hpp>

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "optim/optimizer.h"

namespace ag::testing {

using Factory = std::function<std::unique_ptr<optim::Optimizer>(const std::vector<Tensor>&)>;

inline std::vector<std::pair<std::string, Factory>> optimizers() {
  return {
      {"SGD", [](const std::vector<Tensor>& p) { return std::make_unique<optim::SGD>(p, 0.1); }},
      {"SGD momentum",
          [](const std::vector<Tensor>& p) {
            return std::make_unique<optim::SGD>(p, 0.1, 0.9, 0.1, 0.01);
          }},
      {"SGD nesterov",
          [](const std::vector<Tensor>& p) {
            return std::make_unique<optim::SGD>(p, 0.1, 0.9, 0.0, 0.0, true);
          }},
      {"Adam",
          [](const std::vector<Tensor>& p) {
            return std::make_unique<optim::Adam>(p, 0.01, std::pair{0.8, 0.99}, 1e-6, 0.1);
          }},
      {"AdamW",
          [](const std::vector<Tensor>& p) { return std::make_unique<optim::AdamW>(p, 0.01); }},
      {"AdamW groups",
          [](const std::vector<Tensor>& p) {
            return std::make_unique<optim::AdamW>(
                std::vector<optim::ParamGroup>{{{p[0]}, {}, {}}, {{p[1]}, 0.003, 0.0}}, 0.01);
          }},
  };
}

inline std::vector<Tensor> make_params(DType dtype) {
  Generator g(10);
  return {randn({3, 4}, g, dtype).requires_grad_(), randn({4}, g, dtype).requires_grad_()};
}

// A gradient for each parameter at step `step`, the same in every run.
inline void set_grads(const std::vector<Tensor>& params, int step) {
  Generator g(100 + static_cast<uint64_t>(step));
  for (const Tensor& p : params) p.set_grad(randn(p.shape(), g, p.dtype()));
}

// Steps [from, to) of two runs side by side, with the same gradients at each step.
inline void step_both(const std::vector<Tensor>& a, optim::Optimizer& a_opt,
    const std::vector<Tensor>& b, optim::Optimizer& b_opt, int from, int to) {
  for (int step = from; step < to; ++step) {
    set_grads(a, step);
    a_opt.step();
    set_grads(b, step);
    b_opt.step();
  }
}

// Steps 3 and 4 of a run straight through and of the same run resumed from saved state, with the
// same gradients: their parameters must then agree bit for bit.
inline void continue_both_and_compare(const std::vector<Tensor>& straight,
    optim::Optimizer& straight_opt, const std::vector<Tensor>& resumed,
    optim::Optimizer& resumed_opt) {
  step_both(straight, straight_opt, resumed, resumed_opt, 3, 5);
  for (std::size_t i = 0; i < straight.size(); ++i)
    CHECK(straight[i].to_vector<float>() == resumed[i].to_vector<float>());
}

}  // namespace ag::testing
