// Optimizer state in checkpoints: after a save and a load into a fresh optimizer, training
// continues bit for bit as if it had never stopped; state that does not fit is refused whole.
#include <catch2/catch.hpp>

#include <functional>

#include "optim/optimizer.h"

using namespace ag;
using Catch::Matchers::Contains;

namespace {

using Factory = std::function<std::unique_ptr<optim::Optimizer>(const std::vector<Tensor>&)>;

std::vector<std::pair<std::string, Factory>> optimizers() {
  return {
      {"SGD", [](const std::vector<Tensor>& p) { return std::make_unique<optim::SGD>(p, 0.1); }},
      {"SGD momentum", [](const std::vector<Tensor>& p) { return std::make_unique<optim::SGD>(p, 0.1, 0.9, 0.1, 0.01); }},
      {"SGD nesterov", [](const std::vector<Tensor>& p) { return std::make_unique<optim::SGD>(p, 0.1, 0.9, 0.0, 0.0, true); }},
      {"Adam", [](const std::vector<Tensor>& p) { return std::make_unique<optim::Adam>(p, 0.01, std::pair{0.8, 0.99}, 1e-6, 0.1); }},
      {"AdamW", [](const std::vector<Tensor>& p) { return std::make_unique<optim::AdamW>(p, 0.01); }},
      {"AdamW groups",
       [](const std::vector<Tensor>& p) {
         return std::make_unique<optim::AdamW>(std::vector<optim::ParamGroup>{{{p[0]}, {}, {}}, {{p[1]}, 0.003, 0.0}}, 0.01);
       }},
  };
}

std::vector<Tensor> make_params(DType dtype) {
  Generator g(10);
  return {randn({3, 4}, g, dtype).requires_grad_(), randn({4}, g, dtype).requires_grad_()};
}

// A gradient for each parameter at step `step`, the same in every run.
void set_grads(const std::vector<Tensor>& params, int step) {
  Generator g(100 + static_cast<uint64_t>(step));
  for (const Tensor& p : params) p.set_grad(randn(p.shape(), g, p.dtype()));
}

std::vector<Tensor> copies(const std::vector<Tensor>& params) {
  std::vector<Tensor> out;
  for (const Tensor& p : params) out.push_back(p.detach().clone().requires_grad_());
  return out;
}

}  // namespace

TEST_CASE("every optimizer continues bit for bit after a save and a load", "[optim][checkpoint]") {
  for (const auto& [name, make] : optimizers()) {
    for (CheckpointFormat format : {CheckpointFormat::binary, CheckpointFormat::json}) {
      DYNAMIC_SECTION(name << (format == CheckpointFormat::binary ? " binary" : " JSON")) {
        // Straight: 5 steps. Interrupted: 3 steps, save, fresh parameters and optimizer, load, 2 steps.
        std::vector<Tensor> straight = make_params(float32);
        auto straight_opt = make(straight);
        std::vector<Tensor> first = make_params(float32);
        auto first_opt = make(first);
        for (int step = 0; step < 3; ++step) {
          set_grads(straight, step);
          straight_opt->step();
          set_grads(first, step);
          first_opt->step();
        }
        Checkpoint c;
        c.kind = "test";
        for (std::size_t i = 0; i < first.size(); ++i) c.tensors["param." + std::to_string(i)] = first[i];
        first_opt->save_state(c);
        const Checkpoint file = parse_checkpoint(serialize_checkpoint(c, format));

        std::vector<Tensor> resumed = make_params(float32);  // fresh objects
        {
          NoGradGuard no_grad;
          for (std::size_t i = 0; i < resumed.size(); ++i) resumed[i].copy_(file.tensor("param." + std::to_string(i)));
        }
        auto resumed_opt = make(resumed);
        resumed_opt->load_state(file);
        for (int step = 3; step < 5; ++step) {
          set_grads(straight, step);
          straight_opt->step();
          set_grads(resumed, step);
          resumed_opt->step();
        }
        for (std::size_t i = 0; i < straight.size(); ++i)
          CHECK(straight[i].to_vector<float>() == resumed[i].to_vector<float>());
      }
    }
  }
}

TEST_CASE("optimizer state that does not fit is refused whole", "[optim][checkpoint]") {
  std::vector<Tensor> params = make_params(float32);
  optim::Adam adam(params, 0.01);
  set_grads(params, 0);
  adam.step();
  Checkpoint c;
  adam.save_state(c);

  // Another optimizer type.
  optim::SGD sgd(copies(params), 0.1);
  CHECK_THROWS_WITH(sgd.load_state(c), Contains("the file holds Adam state, this optimizer is SGD"));

  // Other parameter shapes: every mismatch is named, and nothing changes.
  std::vector<Tensor> other = {zeros({4, 3}).requires_grad_(), zeros({4}).requires_grad_()};
  optim::Adam wrong(other, 0.5);
  CHECK_THROWS_WITH(wrong.load_state(c), Contains("shape mismatch optimizer.state.0.0.exp_avg: file [3,4] float32, "
                                                  "parameter [4,3] float32") &&
                                             Contains("optimizer.state.0.0.exp_avg_sq"));
  CHECK(wrong.param_groups()[0].lr == 0.5);
  CHECK(wrong.state[0][1].step == 0);

  // Another grouping.
  optim::Adam grouped(std::vector<optim::ParamGroup>{{{params[0]}, {}, {}}, {{params[1]}, {}, {}}}, 0.01);
  CHECK_THROWS_WITH(grouped.load_state(c), Contains("the file has 1 parameter groups, this optimizer 2"));

  // No state at all.
  CHECK_THROWS_WITH(adam.load_state(Checkpoint{}), Contains("no optimizer state under 'optimizer'"));
}
