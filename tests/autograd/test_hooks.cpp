// Tensor::register_hook: PyTorch's semantics — the hook sees the complete gradient of its tensor,
// a defined return value replaces it, and the handle removes the hook.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "autograd/autograd.h"
#include "autograd/ops.h"
#include "tensor_compare.h"
#include "what_contains.h"

using namespace ag;

TEST_CASE("a hook on a leaf replaces its gradient before it reaches .grad", "[autograd][hooks]") {
  Tensor x = tensor({1.0, 2.0, 3.0}, float64).requires_grad_();
  x.register_hook([](const Tensor& g) { return g * 2.0; });
  (x * 3.0).sum().backward();
  CHECK(values(x.grad()) == std::vector<double>{6.0, 6.0, 6.0});  // 2 · d(3x)/dx
  // A second backward: the hook doubles the new gradient, which then accumulates.
  (x * 1.0).sum().backward();
  CHECK(values(x.grad()) == std::vector<double>{8.0, 8.0, 8.0});
}

TEST_CASE(
    "a leaf's hook runs once per backward with the sum over all its uses", "[autograd][hooks]") {
  Tensor x = tensor({1.0, 2.0}, float64).requires_grad_();
  int calls = 0;
  std::vector<double> seen;
  x.register_hook([&](const Tensor& g) {
    ++calls;
    seen = values(g);
    return Tensor();  // only look
  });
  (x * 2.0 + x * x).sum().backward();  // d/dx = 2 + 2x
  CHECK(calls == 1);
  CHECK(seen == std::vector<double>{4.0, 6.0});
  CHECK(values(x.grad()) == std::vector<double>{4.0, 6.0});
}

TEST_CASE("a hook on an op output changes the gradient that flows on to the inputs",
    "[autograd][hooks]") {
  Tensor x = tensor({1.0, -2.0}, float64).requires_grad_();
  Tensor y = x * 3.0;  // non-leaf
  std::vector<double> seen;
  y.register_hook([&](const Tensor& g) {
    seen = values(g);
    return g * 2.0;
  });
  (y * y).sum().backward();  // dL/dy = 2y = (6, -12)
  CHECK(seen == std::vector<double>{6.0, -12.0});
  CHECK(values(x.grad()) == std::vector<double>{36.0, -72.0});  // 3 · 2 · 2y
  CHECK(!y.grad().defined());                                   // an op output keeps no .grad
}

TEST_CASE("hooks run in registration order, each on the previous result", "[autograd][hooks]") {
  Tensor x = tensor({1.0}, float64).requires_grad_();
  Tensor y = x * 1.0;
  y.register_hook([](const Tensor& g) { return g + 1.0; });
  y.register_hook([](const Tensor& g) { return g * 10.0; });
  y.sum().backward();
  CHECK(values(x.grad()) == std::vector<double>{20.0});  // (1 + 1) · 10, not 1 · 10 + 1
}

TEST_CASE("HookHandle::remove unregisters the hook", "[autograd][hooks]") {
  Tensor x = tensor({1.0, 2.0}, float64).requires_grad_();
  HookHandle leaf_hook = x.register_hook([](const Tensor& g) { return g * 2.0; });
  CHECK(leaf_hook.active());
  leaf_hook.remove();
  CHECK_FALSE(leaf_hook.active());
  leaf_hook.remove();  // twice is fine
  (x * 5.0).sum().backward();
  CHECK(values(x.grad()) == std::vector<double>{5.0, 5.0});

  Tensor z = tensor({1.0}, float64).requires_grad_();
  Tensor y = z * 4.0;
  HookHandle keep = y.register_hook([](const Tensor& g) { return g * 100.0; });
  HookHandle drop = y.register_hook([](const Tensor& g) { return g * 3.0; });
  drop.remove();
  CHECK(keep.active());
  y.sum().backward();
  CHECK(values(z.grad()) == std::vector<double>{400.0});
}

TEST_CASE("a hook may remove itself while it runs", "[autograd][hooks]") {
  Tensor x = tensor({1.0}, float64).requires_grad_();
  HookHandle handle;
  int calls = 0;
  handle = x.register_hook([&](const Tensor& g) {
    ++calls;
    handle.remove();
    return g * 2.0;
  });
  (x * 1.0).sum().backward();
  (x * 1.0).sum().backward();
  CHECK(calls == 1);
  CHECK(values(x.grad()) == std::vector<double>{3.0});  // 2 from the first pass, 1 from the second
}

TEST_CASE("a hook on the root of backward sees the seed", "[autograd][hooks]") {
  Tensor x = tensor({1.0, 2.0}, float64).requires_grad_();
  x.register_hook([](const Tensor& g) { return g * -1.0; });
  x.backward(tensor({0.5, 0.25}, float64));  // the root is the leaf itself
  CHECK(values(x.grad()) == std::vector<double>{-0.5, -0.25});

  Tensor y = x * 2.0;
  x.zero_grad();
  y.register_hook([](const Tensor& g) { return g * 10.0; });
  y.backward(tensor({1.0, 1.0}, float64));
  CHECK(values(x.grad()) ==
        std::vector<double>{-20.0, -20.0});  // root hook · 2, then the leaf's hook
}

TEST_CASE("a hook returning the wrong shape is an error naming register_hook and both shapes",
    "[autograd][hooks]") {
  Tensor x = ones({2, 3}, float64).requires_grad_();
  x.register_hook([](const Tensor& g) { return g.sum({0}); });  // [3] for a [2,3] tensor
  CHECK_THROWS_MATCHES(
      (x * 2.0).sum().backward(), AutogradError, WhatContains({"register_hook", "[2,3]", "[3]"}));

  Tensor w = ones({4}, float64).requires_grad_();
  Tensor y = w * 2.0;
  y.register_hook([](const Tensor&) { return ones({2, 2}, float64); });
  CHECK_THROWS_MATCHES(y.sum().backward(), AutogradError,
      WhatContains({"register_hook", "mul_scalar", "[4]", "[2,2]"}));

  Tensor v = ones({2}, float64).requires_grad_();
  v.register_hook([](const Tensor& g) { return g.to(float32); });
  CHECK_THROWS_MATCHES((v * 1.0).sum().backward(), AutogradError, WhatContains({"float32"}));
}

TEST_CASE("register_hook needs a tensor that requires grad", "[autograd][hooks]") {
  Tensor x = ones({2, 2});
  CHECK_THROWS_MATCHES(x.register_hook([](const Tensor& g) { return g; }), AutogradError,
      WhatContains({"register_hook", "[2,2]"}));
  Tensor y = ones({1}).requires_grad_();
  CHECK_THROWS_AS(y.register_hook(nullptr), ValueError);
}

// ---- register_post_accumulate_grad_hook and queue_backward_callback ----------------------------

TEST_CASE("a post-accumulate hook sees a leaf's whole .grad once, summed over all its uses",
    "[autograd][hooks]") {
  Tensor w = tensor({1.0, 2.0}, float64).requires_grad_();
  Tensor a = tensor({3.0, 4.0}, float64);
  int calls = 0;
  std::vector<double> seen;
  w.register_post_accumulate_grad_hook([&](const Tensor& leaf) {
    ++calls;
    seen = values(leaf.grad());
  });
  // Three uses in three ops, far apart in the graph: d/dw = a + 2w + 1.
  Tensor y = (w * a).sum() + (w * w).sum() * 1.0 + w.sum();
  y.backward();
  CHECK(calls == 1);
  CHECK(seen == std::vector<double>{6.0, 9.0});
  // A second pass adds to .grad first, then calls the hook with the sum.
  (w * 2.0).sum().backward();
  CHECK(calls == 2);
  CHECK(seen == std::vector<double>{8.0, 11.0});
}

TEST_CASE("a post-accumulate hook runs as soon as its leaf is done, before earlier layers",
    "[autograd][hooks]") {
  // x -> (w1) -> (w2) -> loss: backward reaches w2 first; w1's gradient does not exist yet when
  // w2's hook runs, which is what lets data-parallel training overlap communication.
  Tensor x = tensor({1.0, 2.0}, float64);
  Tensor w1 = tensor({0.5, -1.0}, float64).requires_grad_();
  Tensor w2 = tensor({2.0, 3.0}, float64).requires_grad_();
  std::vector<std::string> order;
  bool w1_grad_existed_at_w2_hook = true;
  w1.register_post_accumulate_grad_hook([&](const Tensor&) { order.push_back("w1"); });
  w2.register_post_accumulate_grad_hook([&](const Tensor&) {
    order.push_back("w2");
    w1_grad_existed_at_w2_hook = w1.grad().defined();
  });
  (tanh(x * w1) * w2).sum().backward();
  CHECK(order == std::vector<std::string>{"w2", "w1"});
  CHECK_FALSE(w1_grad_existed_at_w2_hook);
}

TEST_CASE("a post-accumulate hook may change .grad, and sees what register_hook made of it",
    "[autograd][hooks]") {
  Tensor w = tensor({1.0, 2.0}, float64).requires_grad_();
  w.register_hook([](const Tensor& g) { return g * 10.0; });
  std::vector<double> seen;
  w.register_post_accumulate_grad_hook([&](const Tensor& leaf) {
    seen = values(leaf.grad());
    leaf.grad().mul_(0.5);
  });
  (w * 3.0).sum().backward();
  CHECK(seen == std::vector<double>{30.0, 30.0});
  CHECK(values(w.grad()) == std::vector<double>{15.0, 15.0});
}

TEST_CASE("a post-accumulate hook is not called when a pass sends its leaf no gradient",
    "[autograd][hooks]") {
  Tensor w = tensor({1.0}, float64).requires_grad_();
  Tensor v = tensor({2.0}, float64).requires_grad_();
  int w_calls = 0;
  w.register_post_accumulate_grad_hook([&](const Tensor&) { ++w_calls; });
  // An op whose backward returns no gradient for w (as an integer index would get none).
  Tensor out = make_op(
      "ignores_first", (w * v).detach(), {w, v}, [](const Tensor& g, const NeedsGrad&) -> Grads {
        return {Tensor(), g};
      });
  out.sum().backward();
  CHECK(w_calls == 0);
  CHECK_FALSE(w.grad().defined());
  // Backward from the leaf itself calls it.
  w.backward(ones({1}, float64));
  CHECK(w_calls == 1);
}

TEST_CASE("post-accumulate hooks: removal, and refusal on what is not a leaf requiring grad",
    "[autograd][hooks]") {
  Tensor w = tensor({1.0}, float64).requires_grad_();
  int calls = 0;
  HookHandle handle = w.register_post_accumulate_grad_hook([&](const Tensor&) { ++calls; });
  HookHandle gradient_hook = w.register_hook([](const Tensor&) { return Tensor(); });
  CHECK(handle.active());
  handle.remove();
  CHECK_FALSE(handle.active());
  CHECK(gradient_hook.active());  // removing one kind leaves the other
  (w * 2.0).sum().backward();
  CHECK(calls == 0);

  CHECK_THROWS_MATCHES(tensor({1.0}).register_post_accumulate_grad_hook([](const Tensor&) {}),
      AutogradError, WhatContains({"register_post_accumulate_grad_hook", "[1]", "not a leaf"}));
  Tensor y = w * 2.0;
  CHECK_THROWS_MATCHES(y.register_post_accumulate_grad_hook([](const Tensor&) {}), AutogradError,
      WhatContains({"register_post_accumulate_grad_hook", "output of 'mul_scalar'"}));
  CHECK_THROWS_AS(w.register_post_accumulate_grad_hook(nullptr), ValueError);
}

TEST_CASE(
    "queue_backward_callback runs after every hook of the pass, in order", "[autograd][hooks]") {
  Tensor w1 = tensor({1.0}, float64).requires_grad_();
  Tensor w2 = tensor({2.0}, float64).requires_grad_();
  std::vector<std::string> events;
  w2.register_post_accumulate_grad_hook([&](const Tensor&) {
    events.push_back("w2");
    queue_backward_callback([&] {
      events.push_back("first callback");
      queue_backward_callback([&] { events.push_back("queued by a callback"); });
    });
    queue_backward_callback([&] { events.push_back("second callback"); });
  });
  w1.register_post_accumulate_grad_hook([&](const Tensor&) { events.push_back("w1"); });
  (exp(w1 * 3.0) * w2).sum().backward();
  CHECK(events == std::vector<std::string>{
                      "w2", "w1", "first callback", "second callback", "queued by a callback"});

  // Outside a backward pass there is nothing to queue on.
  CHECK_THROWS_MATCHES(queue_backward_callback([] {}), AutogradError,
      WhatContains({"queue_backward_callback", "no backward pass"}));

  // A pass that throws drops its callbacks.
  bool ran = false;
  Tensor bad = make_op("throws", w1.detach(), {w1}, [&](const Tensor&, const NeedsGrad&) -> Grads {
    queue_backward_callback([&] { ran = true; });
    throw ValueError("backward of 'throws' failed");
  });
  CHECK_THROWS_AS(bad.sum().backward(), ValueError);
  CHECK_FALSE(ran);
  CHECK_THROWS_AS(queue_backward_callback([] {}), AutogradError);  // the queue is gone with it
}

TEST_CASE("retain_grad keeps an op output's gradient, after its hooks, accumulated",
    "[autograd][hooks]") {
  Tensor w = tensor({1.0, 2.0}, float64).requires_grad_();
  Tensor h = w * w;  // (2,)
  CHECK_FALSE(h.retains_grad());
  h.register_hook([](const Tensor& g) { return g * 10.0; });
  h.retain_grad();
  h.retain_grad();  // once is enough
  CHECK(h.retains_grad());
  Tensor y = (h * 3.0).sum();
  y.retain_grad();  // the root's gradient is the seed
  y.backward(Tensor(), /*retain_graph=*/true);
  CHECK(values(y.grad()) == std::vector<double>{1.0});
  CHECK(values(h.grad()) == std::vector<double>{30.0, 30.0});  // 3, then the hook's · 10
  CHECK(values(w.grad()) == std::vector<double>{60.0, 120.0});
  y.backward();
  CHECK(values(h.grad()) == std::vector<double>{60.0, 60.0});
  Tensor unused = w * 2.0;  // no gradient reaches it: none kept
  unused.retain_grad();
  (w * 1.0).sum().backward();
  CHECK_FALSE(unused.grad().defined());
}

TEST_CASE("retain_grad: nothing on a leaf, an error without requires_grad", "[autograd][hooks]") {
  Tensor w = tensor({1.0, 2.0}, float64).requires_grad_();
  w.retain_grad();
  CHECK_FALSE(w.retains_grad());  // as PyTorch's: a leaf keeps its gradient anyway
  (w * 2.0).sum().backward();
  CHECK(values(w.grad()) == std::vector<double>{2.0, 2.0});
  CHECK_THROWS_MATCHES(ones({2}).retain_grad(), AutogradError,
      WhatContains({"retain_grad: the tensor of shape [2] does not require grad"}));
}
