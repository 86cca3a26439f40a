// Optimizer state dicts: after state_dict() and load_state_dict() into a fresh optimizer, training
// continues bit for bit as if it had never stopped; state that does not fit is refused whole.
// (tests/io/test_optimizer_state.cpp does the same through checkpoint files.)
#include <catch2/catch.hpp>

#include <functional>
#include <map>

#include "optim/optimizer.h"
#include "tests/optim/optim_state_cases.h"

using namespace ag;
using namespace ag::testing;
using Catch::Matchers::Contains;

namespace {

std::vector<Tensor> copies(const std::vector<Tensor>& params) {
  std::vector<Tensor> out;
  for (const Tensor& p : params) out.push_back(p.detach().clone().requires_grad_());
  return out;
}

}  // namespace

TEST_CASE("every optimizer continues bit for bit after state_dict and load_state_dict",
    "[optim][state_dict]") {
  for (const auto& [name, make] : optimizers()) {
    DYNAMIC_SECTION(name) {
      // Straight: 5 steps. Interrupted: 3 steps, state dict, fresh parameters and optimizer,
      // load, 2 steps.
      std::vector<Tensor> straight = make_params(float32);
      auto straight_opt = make(straight);
      std::vector<Tensor> first = make_params(float32);
      auto first_opt = make(first);
      step_both(straight, *straight_opt, first, *first_opt, 0, 3);
      const optim::StateDict saved = first_opt->state_dict();

      std::vector<Tensor> resumed = copies(first);  // fresh objects
      auto resumed_opt = make(resumed);
      resumed_opt->load_state_dict(saved);
      // The loaded state is a copy: stepping the first optimizer further does not change it.
      set_grads(first, 99);
      first_opt->step();
      continue_both_and_compare(straight, *straight_opt, resumed, *resumed_opt);
    }
  }
}

TEST_CASE("a state dict is shaped like torch.optim's", "[optim][state_dict]") {
  std::vector<Tensor> params = make_params(float32);
  optim::AdamW adamw(
      std::vector<optim::ParamGroup>{{{params[0]}, {}, {}}, {{params[1]}, 0.003, 0.0}}, 0.01,
      {0.8, 0.9}, 1e-6);
  set_grads({params[0]}, 0);  // only the first parameter gets a gradient
  adamw.step();
  const optim::StateDict dict = adamw.state_dict();
  CHECK(dict.type == "AdamW");
  REQUIRE(dict.param_groups.size() == 2);
  // Parameters are numbered across the groups: group 1's first parameter is number 1.
  CHECK(dict.param_groups[0].params == std::vector<std::size_t>{0});
  CHECK(dict.param_groups[1].params == std::vector<std::size_t>{1});
  CHECK(
      dict.param_groups[0].options == std::map<std::string, double>{{"beta1", 0.8}, {"beta2", 0.9},
                                          {"eps", 1e-6}, {"lr", 0.01}, {"weight_decay", 1e-2}});
  CHECK(dict.param_groups[1].options.at("lr") == 0.003);
  CHECK(dict.param_groups[1].options.at("weight_decay") == 0.0);
  REQUIRE(dict.state.size() == 2);
  CHECK(dict.state.at(0).scalars == std::map<std::string, int64_t>{{"step", 1}});
  CHECK(dict.state.at(0).tensors.at("exp_avg").to_vector<float>() ==
        adamw.state[0][0].exp_avg.to_vector<float>());
  CHECK(dict.state.at(0).tensors.at("exp_avg_sq").shape() == std::vector<int64_t>{3, 4});
  CHECK(dict.state.at(1).scalars == std::map<std::string, int64_t>{{"step", 0}});
  CHECK(dict.state.at(1).tensors.empty());

  optim::SGD sgd(params, 0.1, 0.9, 0.0, 0.0, true);
  set_grads({params[1]}, 0);
  params[0].zero_grad();
  sgd.step();
  const optim::StateDict sgd_dict = sgd.state_dict();
  CHECK(sgd_dict.param_groups[0].options == std::map<std::string, double>{{"dampening", 0},
                                                {"lr", 0.1}, {"momentum", 0.9}, {"nesterov", 1},
                                                {"weight_decay", 0}});
  // Only the parameter that has a momentum buffer has state.
  REQUIRE(sgd_dict.state.size() == 1);
  CHECK(sgd_dict.state.at(1).tensors.count("momentum_buffer") == 1);
}

namespace {

// An Adam over `params` after one step, and its state dict.
optim::StateDict adam_state(const std::vector<Tensor>& params) {
  optim::Adam adam(params, 0.01);
  set_grads(params, 0);
  adam.step();
  return adam.state_dict();
}

// The optimizer's state as it is, to check that a refused load changed none of it.
std::vector<float> adam_fingerprint(const optim::Adam& adam) {
  std::vector<float> out = {
      float(adam.param_groups()[0].lr), float(adam.beta1), float(adam.beta2), float(adam.eps)};
  for (const auto& group : adam.state)
    for (const optim::AdamState& s : group) {
      out.push_back(float(s.step));
      if (s.exp_avg.defined())
        for (float v : s.exp_avg.to_vector<float>()) out.push_back(v);
    }
  return out;
}

}  // namespace

TEST_CASE("optimizer state that does not fit is refused whole", "[optim][state_dict]") {
  std::vector<Tensor> params = make_params(float32);
  const optim::StateDict saved = adam_state(params);

  // Another optimizer type.
  optim::SGD sgd(copies(params), 0.1);
  CHECK_THROWS_AS(sgd.load_state_dict(saved), optim::StateDictError);
  CHECK_THROWS_WITH(
      sgd.load_state_dict(saved), Contains("the file holds Adam state, this optimizer is SGD"));

  // Other parameter shapes: every mismatch is named, and nothing changes.
  std::vector<Tensor> other = {zeros({4, 3}).requires_grad_(), zeros({4}).requires_grad_()};
  optim::Adam wrong(other, 0.5);
  CHECK_THROWS_WITH(
      wrong.load_state_dict(saved), Contains("shape mismatch state.0.exp_avg: file [3,4] float32, "
                                             "parameter [4,3] float32") &&
                                        Contains("state.0.exp_avg_sq"));
  CHECK(wrong.param_groups()[0].lr == 0.5);
  CHECK(wrong.state[0][1].step == 0);

  // Another grouping.
  optim::Adam grouped(
      std::vector<optim::ParamGroup>{{{params[0]}, {}, {}}, {{params[1]}, {}, {}}}, 0.01);
  CHECK_THROWS_WITH(grouped.load_state_dict(saved),
      Contains("the file has 1 parameter groups, this optimizer 2"));
  // Another group size.
  optim::Adam smaller(std::vector<Tensor>{copies(params)[0]}, 0.01);
  CHECK_THROWS_WITH(
      smaller.load_state_dict(saved), Contains("group 0 has 2 parameters in the file, 1 here"));

  // No state at all.
  CHECK_THROWS_WITH(optim::Adam(copies(params)).load_state_dict(optim::StateDict{}),
      Contains("no optimizer state (the state dict has no type)"));
}

TEST_CASE("load_state_dict checks hyper-parameters and state as the constructor would",
    "[optim][state_dict]") {
  std::vector<Tensor> params = make_params(float32);
  const optim::StateDict good = adam_state(params);
  optim::Adam adam(copies(params), 0.02, {0.7, 0.95}, 1e-5);
  set_grads(adam.param_groups()[0].params, 1);
  adam.step();
  const std::vector<float> before = adam_fingerprint(adam);

  auto refused = [&](const optim::StateDict& bad, const std::string& problem) {
    CHECK_THROWS_WITH(adam.load_state_dict(bad),
        Contains("checkpoint: Adam state does not fit: ") && Contains(problem));
    CHECK(adam_fingerprint(adam) == before);
  };
  optim::StateDict bad = good;
  bad.param_groups[0].options["beta1"] = 1.0;
  refused(bad, "betas (1, 0.999) must lie in [0, 1)");
  bad = good;
  bad.param_groups[0].options["eps"] = -1e-8;
  refused(bad, "eps -1e-08 is negative");
  bad = good;
  bad.param_groups[0].options["lr"] = -0.1;
  refused(bad, "group 0's lr -0.1 is negative");
  bad = good;
  bad.param_groups[0].options.erase("beta2");
  refused(bad, "group 0 has no beta2");
  bad = good;
  bad.param_groups[0].options["momentum"] = 0.9;
  refused(bad, "group 0 has an unknown hyper-parameter momentum");
  bad = good;
  bad.param_groups[0].params = {1, 0};
  refused(bad, "group 0's parameter 0 is numbered 1, not 0");
  bad = good;
  bad.state.erase(1);
  refused(bad, "missing state.1.step");
  bad = good;
  bad.state[0].tensors.erase("exp_avg_sq");
  refused(bad, "missing state.0.exp_avg_sq");
  bad = good;
  bad.state[0].scalars["step"] = -1;
  refused(bad, "state.0.step is negative");
  bad = good;
  bad.state[0].tensors["exp_avg"] = zeros({3, 4}, float64);
  refused(bad, "shape mismatch state.0.exp_avg: file [3,4] float64, parameter [3,4] float32");
  bad = good;
  bad.state[0].tensors["momentum_buffer"] = zeros({3, 4});
  refused(bad, "unexpected state.0.momentum_buffer");
  bad = good;
  bad.state[2].scalars["step"] = 1;
  refused(bad, "state for parameter 2, but there are only 2");
  // The hardening issue's cases: what the constructor refuses, a load refuses too.
  bad = good;
  bad.param_groups[0].options["lr"] = std::nan("");
  refused(bad, "group 0's lr nan is not a number");
  bad = good;
  bad.param_groups[0].options["beta1"] = 5;
  refused(bad, "betas (5, 0.999) must lie in [0, 1)");
  bad = good;
  bad.param_groups[0].options["eps"] = -1;
  refused(bad, "eps -1 is negative");
  // The moments' values, as a step leaves them: finite, and exp_avg_sq (a mean of squares, whose
  // square root the update divides by) not negative.
  bad = good;
  bad.state[1].tensors["exp_avg_sq"] = full({4}, -0.5);
  refused(
      bad, "state.1.exp_avg_sq holds -0.5 at flat index 0 (it must be finite and not negative)");
  bad = good;
  bad.state[0].tensors["exp_avg"] = zeros({3, 4});
  bad.state[0].tensors["exp_avg"].data<float>()[5] = std::nanf("");
  refused(bad, "state.0.exp_avg holds nan at flat index 5 (it must be finite)");
  bad = good;
  bad.state[0].tensors["exp_avg_sq"] = full({3, 4}, INFINITY);
  refused(bad, "state.0.exp_avg_sq holds inf at flat index 0");

  // Every problem at once.
  bad = good;
  bad.param_groups[0].options["beta1"] = 1.0;
  bad.param_groups[0].options["eps"] = -1.0;
  CHECK_THROWS_WITH(
      adam.load_state_dict(bad), Contains("betas (1, 0.999)") && Contains("eps -1 is negative"));

  // SGD: Nesterov needs momentum and no dampening; nesterov is a flag.
  optim::SGD sgd(copies(params), 0.1, 0.9, 0.0, 0.0, true);
  optim::StateDict sgd_bad = sgd.state_dict();
  sgd_bad.param_groups[0].options["dampening"] = 0.1;
  CHECK_THROWS_WITH(sgd.load_state_dict(sgd_bad),
      Contains("Nesterov momentum needs momentum > 0 and dampening 0"));
  sgd_bad = sgd.state_dict();
  sgd_bad.param_groups[0].options["nesterov"] = 0.5;
  CHECK_THROWS_WITH(sgd.load_state_dict(sgd_bad), Contains("nesterov 0.5 is not 1 or 0"));
  sgd_bad = sgd.state_dict();
  sgd_bad.param_groups[0].options["momentum"] = -0.5;
  CHECK_THROWS_WITH(sgd.load_state_dict(sgd_bad), Contains("momentum -0.5 is negative"));
  sgd_bad = sgd.state_dict();
  sgd_bad.state[0].tensors["momentum_buffer"] = full({3, 4}, -INFINITY);
  CHECK_THROWS_WITH(sgd.load_state_dict(sgd_bad),
      Contains("state.0.momentum_buffer holds -inf at flat index 0 (it must be finite)"));
  CHECK(sgd.momentum == 0.9);
  CHECK(sgd.nesterov);

  // Groups that disagree on a hyper-parameter ag keeps once.
  optim::Adam grouped(
      std::vector<optim::ParamGroup>{{{params[0]}, {}, {}}, {{params[1]}, {}, {}}}, 0.01);
  optim::StateDict split = grouped.state_dict();
  split.param_groups[1].options["beta1"] = 0.5;
  CHECK_THROWS_WITH(grouped.load_state_dict(split),
      Contains("group 1's beta1 differs from group 0's (Adam keeps one beta1 for all groups)"));
  CHECK(grouped.beta1 == 0.9);
}
