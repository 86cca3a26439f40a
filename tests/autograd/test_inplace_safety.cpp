// In-place safety, as PyTorch: every in-place write bumps the version of the tensor's storage
// (shared by its views); an op that saved a tensor for its backward remembers that version, and
// backward refuses to run once it changed. In-place writes into a tensor whose elements share
// memory (an expanded view) are refused.
#include <catch2/catch.hpp>

#include <memory>
#include <vector>

#include "autograd/autograd.h"
#include "autograd/ops.h"
#include "tensor_compare.h"
#include "what_contains.h"

using namespace ag;

namespace {
const char* const kModified =
    "one of the variables needed for gradient computation has been modified by an inplace "
    "operation";
}  // namespace

TEST_CASE("version: every in-place write bumps it, views share it", "[inplace]") {
  Tensor x = zeros({2, 3});
  Tensor row = x.select(0, 1);  // a view: the same storage
  const uint64_t start = x.version();
  x.fill_(1.0);
  x.add_(ones({3}));
  x.mul_(2.0);
  x.zero_();
  row.copy_(ones({3}));
  CHECK(x.version() == start + 5);
  CHECK(row.version() == x.version());
  CHECK(x.detach().version() == x.version());
  CHECK(x.clone().version() == 0);  // a copy starts its own count
  // Reading and out-of-place ops leave it alone.
  (void)(x + 1.0);
  (void)x.sum().item();
  CHECK(x.version() == start + 5);
}

TEST_CASE("backward refuses a saved input written in place (PyTorch raises)", "[inplace]") {
  // Without the check: y = x · w, x *= 10, dy/dw = x read after the write gives [20, 30]
  // instead of [2, 3].
  Tensor x = tensor({2.0, 3.0});
  Tensor w = tensor({1.0, 1.0}).requires_grad_();
  Tensor y = x * w;
  x.mul_(10.0);
  CHECK_THROWS_MATCHES(sum(y).backward(), AutogradError,
      WhatContains({"backward of 'mul'", kModified,
          "[mul saved a tensor of shape [2] at version 0; it is now at version 1]"}));
  CHECK_FALSE(w.grad().defined());  // nothing was accumulated
}

TEST_CASE("a tensor the op did not save may be written in place", "[inplace]") {
  // add, sub, add_scalar and the shape ops read no tensor of the forward.
  Tensor x = tensor({1.0, 2.0}, float64);
  Tensor w = tensor({3.0, 4.0}, float64).requires_grad_();
  Tensor y = (x + w) - x + (w + 1.0);
  x.add_(ones({2}, float64));
  x.fill_(7.0);
  sum(y.reshape({2, 1})).backward();
  CHECK(w.grad().to_vector() == std::vector<double>{2.0, 2.0});
}

TEST_CASE("an op whose output is saved refuses an in-place write into it", "[inplace]") {
  // exp, sqrt, tanh, sigmoid, softmax, log_softmax read their output in backward.
  Tensor x = tensor({0.1, 0.2, 0.3}, float64).requires_grad_();
  for (auto op : std::vector<Tensor (*)(const Tensor&)>{[](const Tensor& t) { return exp(t); },
           [](const Tensor& t) { return tanh(t); }, [](const Tensor& t) { return sigmoid(t); },
           [](const Tensor& t) { return sqrt(t); }, [](const Tensor& t) { return softmax(t, 0); },
           [](const Tensor& t) { return log_softmax(t, 0); }}) {
    Tensor y = op(x);
    const std::string name = y.grad_fn()->name();
    {
      NoGradGuard no_grad;  // y requires grad: in-place updates need grad mode off
      y.mul_(2.0);
    }
    CHECK_THROWS_MATCHES(sum(y * 1.0).backward(), AutogradError,
        WhatContains({"backward of '" + name + "'", kModified,
            "[" + name + " saved its output of shape [3] at version 0; it is now at version 1]"}));
  }
}

TEST_CASE("a write through a view of a saved tensor is seen", "[inplace]") {
  Tensor x = tensor({1.0, 2.0, 3.0, 4.0}, float64);
  Tensor w = ones({2, 2}, float64).requires_grad_();
  Tensor y = matmul(x.reshape({2, 2}), w);  // saves the (2,2) view of x
  x.slice(0, 2, 4).fill_(0.0);              // another view of the same storage
  CHECK_THROWS_MATCHES(sum(y).backward(), AutogradError,
      WhatContains({"backward of 'matmul'", "saved a tensor of shape [2,2] at version 0"}));
}

TEST_CASE("a masked_fill mask and a where condition are saved too", "[inplace]") {
  Tensor x = tensor({1.0, 2.0}, float64).requires_grad_();
  Tensor mask = tensor({1.0, 0.0}, float64);
  Tensor y = masked_fill(x, mask, 0.0);
  mask.fill_(0.0);  // the backward would let the gradient through at element 0
  CHECK_THROWS_MATCHES(
      sum(y).backward(), AutogradError, WhatContains({"backward of 'masked_fill'", kModified}));

  Tensor condition = tensor({1.0, 0.0}, float64);
  Tensor z = where(condition, x, zeros({2}, float64));
  condition.copy_(tensor({0.0, 1.0}, float64));
  CHECK_THROWS_MATCHES(
      sum(z).backward(), AutogradError, WhatContains({"backward of 'where'", kModified}));
}

TEST_CASE("set_data replacing a saved tensor's data is refused", "[inplace]") {
  Tensor x = tensor({2.0, 3.0});
  Tensor w = tensor({1.0, 1.0}).requires_grad_();
  Tensor y = x * w;
  x.set_data(tensor({20.0, 30.0}));
  CHECK_THROWS_MATCHES(sum(y).backward(), AutogradError,
      WhatContains({"backward of 'mul'", "whose data set_data has replaced since"}));
}

TEST_CASE(
    "an optimizer-style step between two backwards of a retained graph is refused", "[inplace]") {
  Tensor x = tensor({2.0, 3.0}, float64);
  Tensor w = tensor({1.0, 1.0}, float64).requires_grad_();
  Tensor loss = sum(x * w * w);
  loss.backward(Tensor(), /*retain_graph=*/true);
  CHECK(w.grad().to_vector() == std::vector<double>{4.0, 6.0});
  {
    NoGradGuard no_grad;      // as optim::SGD::step, which bumps the version the same way
    w.add_(w.grad(), -0.25);  // w = [0, -0.5]
  }
  CHECK_THROWS_MATCHES(loss.backward(), AutogradError, WhatContains({"backward of 'mul'"}));
  // A new forward after the step is fine: d/dw Σ x·w² = 2·x·w.
  w.zero_grad();
  sum(x * w * w).backward();
  CHECK(w.grad().to_vector() == std::vector<double>{0.0, -3.0});
}

TEST_CASE("bump_version marks a write through data<T>()", "[inplace]") {
  Tensor x = tensor({2.0, 3.0});
  Tensor w = tensor({1.0, 1.0}).requires_grad_();
  Tensor y = x * w;
  x.data<float>()[0] = 5.0f;
  x.bump_version();
  CHECK_THROWS_AS(sum(y).backward(), AutogradError);
}

TEST_CASE("make_op checks the tensors it is told the backward reads", "[inplace]") {
  Tensor x = tensor({2.0, 3.0}, float64).requires_grad_();
  auto cube = [&] {
    Tensor out = x.detach().pow(3);
    return make_op("cube", out, {x}, /*saved=*/{x},
        [x](const Tensor& g, const NeedsGrad&) -> Grads { return {g * 3.0 * x * x}; });
  };
  Tensor y = cube();
  sum(y).backward();
  CHECK(x.grad().to_vector() == std::vector<double>{12.0, 27.0});
  Tensor again = cube();
  {
    NoGradGuard no_grad;
    x.mul_(2.0);
  }
  CHECK_THROWS_MATCHES(sum(again).backward(), AutogradError,
      WhatContains({"backward of 'cube'", "[cube saved a tensor of shape [2] at version"}));
}

TEST_CASE("the fused kernels check what they saved", "[inplace]") {
  Generator generator(0);
  SECTION("layer_norm's weight, written by an update before backward") {
    Tensor x = randn({2, 4}, generator, float64).requires_grad_();
    Tensor w = ones({4}, float64).requires_grad_();
    Tensor b = zeros({4}, float64).requires_grad_();
    Tensor y = layer_norm(x, {4}, w, b, 1e-5);
    {
      NoGradGuard no_grad;
      w.mul_(3.0);
    }
    CHECK_THROWS_MATCHES(sum(y * y).backward(), AutogradError,
        WhatContains({"backward of 'layer_norm'", "saved a tensor of shape [4] at version 0"}));
  }
  SECTION("both attention kernels' q, k, v") {
    for (AttentionKernel kernel : {AttentionKernel::whole_rows, AttentionKernel::tiled}) {
      set_attention_kernel(kernel);
      Tensor q = randn({1, 2, 3, 4}, generator, float64).requires_grad_();
      Tensor k = randn({1, 2, 5, 4}, generator, float64);
      Tensor v = randn({1, 2, 5, 4}, generator, float64);
      Tensor out = attention(q, k, v, Tensor(), 0.0, false, generator);
      k.mul_(2.0);
      CHECK_THROWS_MATCHES(sum(out).backward(), AutogradError,
          WhatContains({kModified, "saved a tensor of shape [1,2,5,4] at version 0"}));
    }
    set_attention_kernel(AttentionKernel::automatic);
  }
  SECTION("rms_norm's weight, written by an update before backward") {
    Tensor x = randn({2, 4}, generator, float64).requires_grad_();
    Tensor w = ones({4}, float64).requires_grad_();
    Tensor y = rms_norm(x, {4}, w);
    {
      NoGradGuard no_grad;
      w.mul_(3.0);
    }
    CHECK_THROWS_MATCHES(sum(y * y).backward(), AutogradError,
        WhatContains({"backward of 'rms_norm'", "saved a tensor of shape [4] at version 0"}));
  }
  SECTION("rotary_embedding's sin table, written before backward") {
    Tensor x = randn({2, 3, 4}, generator, float64).requires_grad_();
    Tensor c = ones({3, 2}, float64), s = zeros({3, 2}, float64);
    Tensor y = rotary_embedding(x, c, s);
    s.fill_(0.5);
    CHECK_THROWS_MATCHES(sum(y * y).backward(), AutogradError,
        WhatContains(
            {"backward of 'rotary_embedding'", "saved a tensor of shape [3,2] at version 0"}));
  }
  SECTION("the whole-row kernel's weights, handed out to the caller") {
    Tensor q = randn({1, 1, 2, 3}, generator, float64).requires_grad_();
    Tensor k = randn({1, 1, 2, 3}, generator, float64);
    AttentionWeights weights;
    Tensor out = attention(q, k, k, Tensor(), 0.0, false, generator, &weights);
    weights.tensor().fill_(0.5);
    CHECK_THROWS_MATCHES(sum(out).backward(), AutogradError,
        WhatContains({"backward of 'scaled_dot_product_attention'",
            "saved a tensor of shape [1,1,2,2] at version 0"}));
  }
}

TEST_CASE("a chain of 1,000,000 ops saving their input is destroyed iteratively", "[inplace]") {
  Tensor x = tensor({0.5}, float64).requires_grad_();
  {
    Tensor y = x;
    for (int i = 0; i < 1000000; ++i) y = y * y;  // each mul saves the previous output
  }  // ~Node must not recurse through the saved tensors either
  SUCCEED("destroyed");
}

TEST_CASE("in-place writes into an expanded view are refused (PyTorch refuses them)", "[inplace]") {
  // One memory location stands for 4 elements: add_ would add 4 times to it.
  Tensor base = zeros({1});
  Tensor expanded = base.expand({4});  // strides [0]
  CHECK_THROWS_MATCHES(expanded.add_(ones({4})), ValueError,
      WhatContains({"add_: unsupported operation: more than one element of the written-to tensor",
          "shape [4], strides [0]", "clone()"}));
  CHECK_THROWS_MATCHES(expanded.mul_(2.0), ValueError, WhatContains({"mul_", "strides [0]"}));
  CHECK_THROWS_MATCHES(expanded.fill_(1.0), ValueError, WhatContains({"fill_", "strides [0]"}));
  CHECK_THROWS_MATCHES(expanded.zero_(), ValueError, WhatContains({"fill_", "strides [0]"}));
  CHECK_THROWS_MATCHES(
      expanded.copy_(ones({4})), ValueError, WhatContains({"copy_", "strides [0]"}));
  Tensor rows = zeros({3}).unsqueeze(0).expand({2, 3});  // strides [0,1]
  CHECK_THROWS_MATCHES(
      rows.add_(ones({2, 3})), ValueError, WhatContains({"shape [2,3], strides [0,1]"}));
  CHECK(base.to_vector() == std::vector<double>{0.0});  // nothing was written
  CHECK(base.version() == 0);                           // nor counted
  // A size-1 dim of stride 0 is one element: fine; so is a clone of the expanded view.
  Tensor one = zeros({3}).unsqueeze(0).expand({1, 3});
  one.add_(ones({1, 3}));
  CHECK(one.to_vector() == std::vector<double>{1.0, 1.0, 1.0});
  Tensor copy = expanded.clone();
  copy.add_(ones({4}));
  CHECK(copy.to_vector() == std::vector<double>{1.0, 1.0, 1.0, 1.0});
}

TEST_CASE(
    "an in-place update reading part of what it writes is refused, or reads a copy", "[inplace]") {
  // x.add_(shifted view of x) read rows already updated, in an order the threads chose.
  Tensor x = arange(0, 8, 1).reshape({4, 2});  // rows [0 1] [2 3] [4 5] [6 7]
  // The very same elements: fine, as in PyTorch (x += x).
  x.add_(x);
  CHECK(x.to_vector<float>() == std::vector<float>{0, 2, 4, 6, 8, 10, 12, 14});
  // Dense and overlapping: PyTorch's error, naming the op.
  const Tensor head = narrow(x, 0, 0, 3), tail = narrow(x, 0, 1, 3);  // rows 0-2 and 1-3
  CHECK_THROWS_MATCHES(tail.add_(head), ValueError,
      WhatContains({"add_: unsupported operation: some elements of the input tensor",
          "refer to a single memory location; clone() the input first"}));
  CHECK_THROWS_MATCHES(x.add_(select(x, 0, 0)), ValueError, WhatContains({"add_: unsupported"}));
  CHECK_THROWS_MATCHES(tail.copy_(head), ValueError, WhatContains({"copy_: unsupported"}));
  CHECK(x.to_vector<float>() == std::vector<float>{0, 2, 4, 6, 8, 10, 12, 14});  // unchanged
  // Interleaved (columns 0 and 1 share a range, no element): the update reads a copy, as if the
  // two were apart — x[:, 1] += x[:, 0].
  select(x, 1, 1).add_(select(x, 1, 0));
  CHECK(x.to_vector<float>() == std::vector<float>{0, 2, 4, 10, 8, 18, 12, 26});
  // Apart in one storage: read as they are.
  narrow(x, 0, 2, 2).copy_(narrow(x, 0, 0, 2));
  CHECK(x.to_vector<float>() == std::vector<float>{0, 2, 4, 10, 0, 2, 4, 10});
}

// update_in_graph: Python's x ⊕= y on a tensor in the graph, as PyTorch's.
TEST_CASE(
    "update_in_graph records the op: backward runs through it into the old history", "[inplace]") {
  Tensor w = tensor({1.0, -2.0, 3.0}, float64).requires_grad_();
  Tensor x = w * 3.0;  // (3,)
  const std::shared_ptr<Node> old_node = x.grad_fn();
  x.retain_grad();
  update_in_graph(x, "mul_", [&](const Tensor& before) { return before * w; });
  CHECK(x.grad_fn() != old_node);
  CHECK(x.grad_fn()->op() == Op::mul);
  CHECK(values(x) == std::vector<double>{3.0, 12.0, 27.0});  // 3w · w
  CHECK(x.retains_grad());  // the retained gradient is the updated tensor's
  x.sum().backward();
  CHECK(values(w.grad()) == std::vector<double>{6.0, -12.0, 18.0});  // d(3w²)/dw = 6w
  CHECK(values(x.grad()) == std::vector<double>{1.0, 1.0, 1.0});
  // A tensor outside the graph joins it through a value that requires grad
  Tensor y = zeros({3}, float64);
  update_in_graph(y, "add_", [&](const Tensor& before) { return before + w; });
  CHECK(y.requires_grad());
  CHECK(y.grad_fn()->op() == Op::add);
}

TEST_CASE(
    "update_in_graph refuses a parameter, shared memory, a result of another shape and an "
    "op that keeps x",
    "[inplace]") {
  Tensor w = tensor({1.0, 2.0}, float64).requires_grad_();
  auto plus_one = [](const Tensor& before) { return before + 1.0; };
  CHECK_THROWS_MATCHES(update_in_graph(w, "add_", plus_one), AutogradError,
      WhatContains({"add_: in-place update of a leaf of shape [2] that requires grad"}));
  Tensor h = tanh(w);  // tanh saved its output for its backward
  CHECK_THROWS_MATCHES(update_in_graph(h, "add_", plus_one), AutogradError,
      WhatContains({"whose memory another tensor shares"}));
  Tensor y = w * 2.0;
  {
    const Tensor row = y.select(0, 0);  // a view of y
    CHECK_THROWS_MATCHES(update_in_graph(y, "add_", plus_one), AutogradError,
        WhatContains({"whose memory another tensor shares"}));
  }
  {
    const Tensor alias = y;  // another handle to y's TensorImpl (C++; Python's names share one)
    CHECK_THROWS_MATCHES(update_in_graph(y, "add_", plus_one), AutogradError,
        WhatContains({"whose memory another tensor shares"}));
  }
  const std::vector<double> before = values(y);
  CHECK_THROWS_MATCHES(update_in_graph(y, "add_",
                           [](const Tensor& b) {
                             return b + zeros({3, 2}, float64);
                           }),
      ShapeError,
      WhatContains({"add_: output with shape [2] doesn't match the broadcast shape [3,2]"}));
  CHECK_THROWS_MATCHES(
      update_in_graph(y, "add_", [](const Tensor& b) { return b.to(DType::float32); }), DTypeError,
      WhatContains({"add_: result type float32 can't be cast to the desired output type float64"}));
  // mul keeps both factors: `before` keeps the old values, y's own handle would not
  CHECK_THROWS_MATCHES(update_in_graph(y, "mul_", [&](const Tensor& b) { return b * y; }),
      AutogradError,
      WhatContains({"mul_: the update of the tensor of shape [2] keeps the tensor itself"}));
  CHECK(values(y) == before);            // refused before anything changed
  update_in_graph(y, "add_", plus_one);  // the view gone, y alone holds its memory
  CHECK(values(y) == std::vector<double>{3.0, 5.0});
  const std::shared_ptr<Node> node = y.grad_fn();
  update_in_graph(y, "add_", [](const Tensor& b) { return b; });  // the input itself: no change
  CHECK(y.grad_fn() == node);
  CHECK(values(y) == std::vector<double>{3.0, 5.0});
}

TEST_CASE("copy_ and add_ refuse a source that requires grad in grad mode (a lost gradient)",
    "[inplace]") {
  Tensor w = tensor({1.0, 2.0}, float64).requires_grad_();
  Tensor x = zeros({2}, float64);
  CHECK_THROWS_MATCHES(x.copy_(w * 2.0), AutogradError,
      WhatContains({"copy_: the source of shape [2] requires grad", "shape [2]"}));
  CHECK_THROWS_MATCHES(
      x.add_(w), AutogradError, WhatContains({"add_: the source of shape [2] requires grad"}));
  CHECK(values(x) == std::vector<double>{0.0, 0.0});
  {
    NoGradGuard no_grad;  // outside the graph: a plain write
    x.copy_(w);
    x.add_(w);
  }
  CHECK(values(x) == std::vector<double>{2.0, 4.0});
}
