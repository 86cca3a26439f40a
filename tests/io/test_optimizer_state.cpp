// Optimizer state dicts in checkpoint files: after a save and a load into a fresh optimizer,
// training continues bit for bit; the entries carry the names version-1 files have; damaged or
// foreign optimizer entries are refused with a CheckpointError, state that does not fit the
// optimizer with optim::StateDictError, and either way nothing changes.
#include <catch2/catch.hpp>
#include <cmath>
#include <functional>

#include "io/optimizer_state.h"
#include "tests/optim/optim_state_cases.h"

using namespace ag;
using namespace ag::testing;
using Catch::Matchers::Contains;

namespace {

// Two groups of AdamW after one step: group 1's first parameter is number 1 in the state dict and
// "state.1.0" in the file.
optim::AdamW two_groups(const std::vector<Tensor>& params) {
  optim::AdamW adamw(
      std::vector<optim::ParamGroup>{{{params[0]}, {}, {}}, {{params[1]}, 0.003, 0.0}}, 0.01,
      {0.8, 0.9}, 1e-6);
  set_grads(params, 0);
  adamw.step();
  return adamw;
}

}  // namespace

TEST_CASE(
    "every optimizer continues bit for bit after a save and a load", "[io][optim][checkpoint]") {
  for (const auto& [name, make] : optimizers()) {
    for (CheckpointFormat format : {CheckpointFormat::binary, CheckpointFormat::json}) {
      DYNAMIC_SECTION(name << (format == CheckpointFormat::binary ? " binary" : " JSON")) {
        // Straight: 5 steps. Interrupted: 3 steps, save, fresh parameters and optimizer, load, 2
        // steps.
        std::vector<Tensor> straight = make_params(float32);
        auto straight_opt = make(straight);
        std::vector<Tensor> first = make_params(float32);
        auto first_opt = make(first);
        step_both(straight, *straight_opt, first, *first_opt, 0, 3);
        Checkpoint c;
        c.kind = "test";
        for (std::size_t i = 0; i < first.size(); ++i)
          c.tensors["param." + std::to_string(i)] = first[i];
        put_optimizer_state(c, first_opt->state_dict());
        const Checkpoint file = parse_checkpoint(serialize_checkpoint(c, format));

        std::vector<Tensor> resumed = make_params(float32);  // fresh objects
        {
          NoGradGuard no_grad;
          for (std::size_t i = 0; i < resumed.size(); ++i)
            resumed[i].copy_(file.tensor("param." + std::to_string(i)));
        }
        auto resumed_opt = make(resumed);
        resumed_opt->load_state_dict(get_optimizer_state(file));
        continue_both_and_compare(straight, *straight_opt, resumed, *resumed_opt);
      }
    }
  }
}

TEST_CASE("optimizer entries carry the names of version-1 files", "[io][optim][checkpoint]") {
  std::vector<Tensor> params = make_params(float32);
  optim::AdamW adamw = two_groups(params);
  Checkpoint c;
  put_optimizer_state(c, adamw.state_dict());
  CHECK(c.strings == std::map<std::string, std::string>{{"optimizer.type", "AdamW"}});
  CHECK(c.integers == std::map<std::string, uint64_t>{{"optimizer.groups", 2},
                          {"optimizer.group.0.size", 1}, {"optimizer.group.1.size", 1},
                          {"optimizer.state.0.0.step", 1}, {"optimizer.state.1.0.step", 1}});
  CHECK(c.reals == std::map<std::string, double>{{"optimizer.beta1", 0.8}, {"optimizer.beta2", 0.9},
                       {"optimizer.eps", 1e-6}, {"optimizer.group.0.lr", 0.01},
                       {"optimizer.group.0.weight_decay", 1e-2}, {"optimizer.group.1.lr", 0.003},
                       {"optimizer.group.1.weight_decay", 0.0}});
  REQUIRE(c.tensors.size() == 4);
  CHECK(c.tensors.at("optimizer.state.1.0.exp_avg").to_vector<float>() ==
        adamw.state[1][0].exp_avg.to_vector<float>());
  CHECK(c.tensors.at("optimizer.state.0.0.exp_avg_sq").to_vector<float>() ==
        adamw.state[0][0].exp_avg_sq.to_vector<float>());

  // And back: the same state dict, numbered across the groups.
  const optim::StateDict back = get_optimizer_state(c);
  const optim::StateDict dict = adamw.state_dict();
  CHECK(back.type == dict.type);
  REQUIRE(back.param_groups.size() == 2);
  for (std::size_t g = 0; g < 2; ++g) {
    CHECK(back.param_groups[g].options == dict.param_groups[g].options);
    CHECK(back.param_groups[g].params == dict.param_groups[g].params);
  }
  REQUIRE(back.state.size() == 2);
  CHECK(back.state.at(1).scalars == dict.state.at(1).scalars);
  CHECK(back.state.at(1).tensors.at("exp_avg").to_vector<float>() ==
        dict.state.at(1).tensors.at("exp_avg").to_vector<float>());

  // SGD: its nesterov flag is an integer, its momentum buffers tensors; under another prefix.
  optim::SGD sgd(params, 0.1, 0.9, 0.0, 0.0, true);
  set_grads(params, 1);
  sgd.step();
  Checkpoint s;
  put_optimizer_state(s, sgd.state_dict(), "opt");
  CHECK(s.integers.at("opt.nesterov") == 1);
  CHECK(s.reals.at("opt.momentum") == 0.9);
  CHECK(s.reals.at("opt.dampening") == 0.0);
  CHECK(s.tensors.count("opt.state.0.1.momentum_buffer") == 1);
  CHECK(get_optimizer_state(s, "opt").param_groups[0].options ==
        sgd.state_dict().param_groups[0].options);
}

TEST_CASE("optimizer state that does not fit is refused whole", "[io][optim][checkpoint]") {
  std::vector<Tensor> params = make_params(float32);
  optim::Adam adam(params, 0.01);
  set_grads(params, 0);
  adam.step();
  Checkpoint c;
  put_optimizer_state(c, adam.state_dict());

  // Another optimizer type.
  optim::SGD sgd(params, 0.1);
  CHECK_THROWS_WITH(sgd.load_state_dict(get_optimizer_state(c)),
      Contains("the file holds Adam state, this optimizer is SGD"));

  // Other parameter shapes: every mismatch is named, and nothing changes.
  std::vector<Tensor> other = {zeros({4, 3}).requires_grad_(), zeros({4}).requires_grad_()};
  optim::Adam wrong(other, 0.5);
  CHECK_THROWS_WITH(wrong.load_state_dict(get_optimizer_state(c)),
      Contains("shape mismatch state.0.exp_avg: file [3,4] float32, parameter [4,3] float32") &&
          Contains("state.0.exp_avg_sq"));
  CHECK(wrong.param_groups()[0].lr == 0.5);
  CHECK(wrong.state[0][1].step == 0);

  // Another grouping.
  optim::Adam grouped(
      std::vector<optim::ParamGroup>{{{params[0]}, {}, {}}, {{params[1]}, {}, {}}}, 0.01);
  CHECK_THROWS_WITH(grouped.load_state_dict(get_optimizer_state(c)),
      Contains("the file has 1 parameter groups, this optimizer 2"));

  // No state at all.
  CHECK_THROWS_AS(get_optimizer_state(Checkpoint{}), CheckpointError);
  CHECK_THROWS_WITH(
      get_optimizer_state(Checkpoint{}), Contains("no optimizer state under 'optimizer'"));
}

TEST_CASE("damaged optimizer entries are refused", "[io][optim][checkpoint]") {
  std::vector<Tensor> params = make_params(float32);
  optim::AdamW adamw = two_groups(params);
  Checkpoint good;
  put_optimizer_state(good, adamw.state_dict());

  auto refused = [&](const std::function<void(Checkpoint&)>& damage, const std::string& message) {
    Checkpoint c = good;
    damage(c);
    CHECK_THROWS_AS(get_optimizer_state(c), CheckpointError);
    CHECK_THROWS_WITH(get_optimizer_state(c), Contains(message));
  };
  refused([](Checkpoint& c) { c.integers.erase("optimizer.groups"); },
      "no optimizer state under 'optimizer'");
  refused([](Checkpoint& c) { c.reals.erase("optimizer.group.1.lr"); },
      "group 1 is incomplete in the file");
  // Counts that would allocate without bound are damage, not a reason to allocate.
  refused([](Checkpoint& c) { c.integers["optimizer.groups"] = uint64_t(1) << 62; },
      "4611686018427387904 groups is not a group count");
  refused([](Checkpoint& c) { c.integers["optimizer.group.1.size"] = uint64_t(1) << 40; },
      "group 1 has 1099511627776 parameters, more than 1048576 in all");
  refused([](Checkpoint& c) { c.tensors["optimizer.state.1.1.exp_avg"] = zeros({4}); },
      "optimizer.state.1.1.exp_avg names a parameter outside the groups");
  refused([](Checkpoint& c) { c.tensors["optimizer.state.01.0.exp_avg"] = zeros({4}); },
      "unexpected entry optimizer.state.01.0.exp_avg");
  refused([](Checkpoint& c) { c.integers["optimizer.state.0.step"] = 1; },
      "unexpected entry optimizer.state.0.step");
  refused([](Checkpoint& c) { c.reals["optimizer.state.0.0.step"] = 1; },
      "unexpected entry optimizer.state.0.0.step");
  refused([](Checkpoint& c) { c.integers["optimizer.state.0.0.step"] = uint64_t(1) << 63; },
      "optimizer.state.0.0.step = 9223372036854775808 is out of range");
  refused(
      [](Checkpoint& c) { c.integers["optimizer.nesterov"] = uint64_t(1) << 60; }, "nesterov = ");

  // What reads, but does not fit the optimizer, is the optimizer's to refuse.
  Checkpoint c = good;
  c.reals["optimizer.beta1"] = 1.5;
  optim::AdamW fresh = two_groups(make_params(float32));
  CHECK_THROWS_AS(fresh.load_state_dict(get_optimizer_state(c)), optim::StateDictError);
  CHECK(fresh.beta1 == 0.8);
  // The hardening issue's values, each refused through a file as the constructor refuses it.
  auto unfit = [&](const std::function<void(Checkpoint&)>& damage, const std::string& message) {
    Checkpoint changed = good;
    damage(changed);
    optim::AdamW target = two_groups(make_params(float32));
    CHECK_THROWS_WITH(target.load_state_dict(get_optimizer_state(changed)),
        Contains("checkpoint: AdamW state does not fit: ") && Contains(message));
    CHECK(target.beta1 == 0.8);
  };
  unfit([](Checkpoint& c) { c.reals["optimizer.group.1.lr"] = std::nan(""); },
      "group 1's lr nan is not a number");
  unfit([](Checkpoint& c) { c.reals["optimizer.beta1"] = 5; }, "betas (5, 0.9) must lie in [0, 1)");
  unfit([](Checkpoint& c) { c.reals["optimizer.eps"] = -1; }, "eps -1 is negative");
  unfit([](Checkpoint& c) { c.tensors["optimizer.state.1.0.exp_avg_sq"] = full({4}, -1.0); },
      "state.1.exp_avg_sq holds -1 at flat index 0 (it must be finite and not negative)");
}

TEST_CASE("a state dict a version-1 file cannot hold is not written", "[io][optim][checkpoint]") {
  std::vector<Tensor> params = make_params(float32);
  const optim::StateDict good = two_groups(params).state_dict();
  Checkpoint c;
  c.integers["step"] = 7;

  optim::StateDict bad = good;
  bad.param_groups[1].options["beta1"] = 0.5;
  CHECK_THROWS_WITH(
      put_optimizer_state(c, bad), Contains("group 1's beta1 differs from group 0's"));
  bad = good;
  bad.param_groups[1].options.erase("eps");
  CHECK_THROWS_WITH(put_optimizer_state(c, bad), Contains("group 1 has no eps (group 0 has)"));
  bad = good;
  bad.state[5].scalars["step"] = 1;
  CHECK_THROWS_WITH(
      put_optimizer_state(c, bad), Contains("state for parameter 5, which is in no group"));
  bad = good;
  bad.state[0].scalars["step"] = -1;
  CHECK_THROWS_WITH(
      put_optimizer_state(c, bad), Contains("optimizer.state.0.0.step is negative (-1)"));
  bad = good;
  bad.param_groups[1].params = {0};
  CHECK_THROWS_WITH(put_optimizer_state(c, bad), Contains("parameter 0 is in more than one place"));
  // Nothing was written by the refused attempts.
  CHECK(c.integers == std::map<std::string, uint64_t>{{"step", 7}});
  CHECK(c.strings.empty());
  CHECK(c.tensors.empty());
}
