// The autograd engine: accumulation, graph shapes (diamond, reuse), freeing, deep graphs,
// NoGradGuard, detach, user-defined ops, and the errors of misuse.
#include <catch2/catch.hpp>

#include "autograd/autograd.h"
#include "autograd/ops.h"
#include "tensor_compare.h"

using namespace ag;
using Catch::Matchers::Contains;

TEST_CASE("backward of a scalar fills the leaves' gradients", "[autograd]") {
  Tensor x = tensor({1.0, 2.0, 3.0}, float64).requires_grad_();
  Tensor loss = sum(x * x);  // dL/dx = 2x
  loss.backward();
  CHECK(values(x.grad()) == std::vector<double>{2.0, 4.0, 6.0});
  CHECK(x.is_leaf());
  CHECK_FALSE(loss.is_leaf());
}

TEST_CASE("backward with an explicit upstream gradient for a non-scalar", "[autograd]") {
  Tensor x = tensor({1.0, 2.0}, float64).requires_grad_();
  Tensor y = x * 3.0;
  y.backward(tensor({1.0, -1.0}, float64));
  CHECK(values(x.grad()) == std::vector<double>{3.0, -3.0});
}

TEST_CASE("gradients accumulate across backward calls until zero_grad", "[autograd]") {
  Tensor x = tensor({1.0, 2.0}, float64).requires_grad_();
  sum(x * 2.0).backward();
  sum(x * 3.0).backward();
  CHECK(values(x.grad()) == std::vector<double>{5.0, 5.0});
  x.zero_grad();
  CHECK_FALSE(x.grad().defined());
  sum(x * 4.0).backward();
  CHECK(values(x.grad()) == std::vector<double>{4.0, 4.0});
}

TEST_CASE("accumulation adds into the existing gradient, it does not replace it", "[autograd]") {
  // dlib's check: poison the gradient first; backward must add to it.
  Tensor x = tensor({1.0, 2.0}, float64).requires_grad_();
  x.set_grad(tensor({100.0, 200.0}, float64));
  sum(x * x).backward();
  CHECK(values(x.grad()) == std::vector<double>{102.0, 204.0});
}

TEST_CASE("a diamond graph sums the gradients of both paths", "[autograd]") {
  //        x
  //      /   \        a = x·2, b = x², y = a·b = 2x³, dy/dx = 6x²
  //     a     b
  //      \   /
  //        y
  Tensor x = tensor({1.0, -2.0}, float64).requires_grad_();
  Tensor a = x * 2.0;
  Tensor b = x * x;
  Tensor y = sum(a * b);
  y.backward();
  CHECK(values(x.grad()) == std::vector<double>{6.0, 24.0});
}

TEST_CASE("a tensor used twice in one op and across ops gets both contributions", "[autograd]") {
  Tensor x = tensor({3.0}, float64).requires_grad_();
  Tensor y = x + x;       // dy/dx = 2
  Tensor z = sum(y * x);  // z = 2x², dz/dx = 4x
  z.backward();
  CHECK(x.grad().item() == 12.0);
}

TEST_CASE(
    "an identity backward hands one tensor to two inputs without aliasing them", "[autograd]") {
  // add's backward returns g itself for both a and b; their .grad must be separate buffers, or
  // accumulating into one would change the other.
  Tensor a = tensor({1.0, 2.0}, float64).requires_grad_();
  Tensor b = tensor({3.0, 4.0}, float64).requires_grad_();
  sum(a + b).backward();
  CHECK_FALSE(a.grad().shares_storage(b.grad()));
  sum(a * 10.0).backward();
  CHECK(values(a.grad()) == std::vector<double>{11.0, 11.0});
  CHECK(values(b.grad()) == std::vector<double>{1.0, 1.0});
}

TEST_CASE(
    "a node that keeps an expanded gradient adds a second one into a new tensor", "[autograd]") {
  // sum's gradient is one value expanded over the summed shape (stride 0); permute and the
  // elementwise ops keep it unwritten. A second gradient into the same node must not be added into
  // that one value in place (which would be an error, or 6 writes into one float).
  Tensor x = tensor({1.0, 2.0, 3.0, 4.0, 5.0, 6.0}, float64).reshape({2, 3}).requires_grad_();
  for (const bool permuted : {true, false}) {
    for (const bool exclusive_first : {true, false}) {
      INFO("permuted " << permuted << ", the exclusive gradient first " << exclusive_first);
      x.zero_grad();
      Tensor y = permuted ? x.permute({1, 0}) : exp(x);
      // y.sum() · 2 hands sum's backward a gradient of its own (exclusive); y.sum() alone hands it
      // the upstream gradient, which add's backward shares with its other input
      Tensor loss =
          exclusive_first ? add(mul(y.sum(), 2.0), y.sum()) : add(y.sum(), mul(y.sum(), 2.0));
      loss.backward();
      const std::vector<double> expected_factor =
          values(permuted ? ones({2, 3}, float64) : exp(x.detach()));
      std::vector<double> expected;
      for (double f : expected_factor) expected.push_back(3.0 * f);
      CHECK(values(x.grad()) == expected);
    }
  }
}

TEST_CASE(
    "a gradient kept by one input is not written by the other input's accumulation", "[autograd]") {
  // add's backward hands its upstream gradient g to both a and b's nodes (exp, tanh read any
  // layout and keep it); b's node then receives a second gradient: adding it must not change a's.
  Tensor x = tensor({0.5, -1.0}, float64).requires_grad_();
  Tensor a = exp(x), b = tanh(x);
  Tensor loss = sum(add(a, b) * 3.0) + sum(b);
  loss.backward();
  const std::vector<double> e = values(exp(x.detach())), t = values(tanh(x.detach()));
  for (std::size_t i = 0; i < 2; ++i)
    CHECK(values(x.grad())[i] == Approx(3.0 * e[i] + 4.0 * (1.0 - t[i] * t[i])).epsilon(1e-14));
}

TEST_CASE("the leaf gradient of a broadcast input has the input's shape", "[autograd]") {
  Tensor bias = tensor({1.0, 2.0, 3.0}, float64).requires_grad_();
  Tensor x = ones({2, 4, 3}, float64);
  sum(x + bias).backward();
  CHECK(bias.grad().shape() == Shape{3});
  CHECK(values(bias.grad()) == std::vector<double>{8.0, 8.0, 8.0});
}

TEST_CASE("backward frees the graph — a second backward is a clear error", "[autograd]") {
  Tensor x = tensor({1.0, 2.0}, float64).requires_grad_();
  Tensor loss = sum(exp(x));
  loss.backward();
  CHECK(loss.grad_fn()->released());
  CHECK_THROWS_AS(loss.backward(), AutogradError);
  CHECK_THROWS_WITH(loss.backward(), Contains("already freed") && Contains("retain_graph"));
}

TEST_CASE("retain_graph keeps the graph for a second backward", "[autograd]") {
  Tensor x = tensor({1.0, 2.0}, float64).requires_grad_();
  Tensor loss = sum(x * x);
  loss.backward(Tensor(), /*retain_graph=*/true);
  loss.backward();
  CHECK(values(x.grad()) == std::vector<double>{4.0, 8.0});
}

TEST_CASE("backward through an intermediate of a freed graph is an error", "[autograd]") {
  Tensor x = tensor({1.0, 2.0}, float64).requires_grad_();
  Tensor h = x * 2.0;
  sum(h * h).backward();
  CHECK_THROWS_AS(sum(h).backward(), AutogradError);
}

TEST_CASE(
    "a chain of 1,000,000 ops backpropagates and is freed without deep recursion", "[autograd]") {
  Tensor x = tensor({0.5}, float64).requires_grad_();
  Tensor y = x;
  for (int i = 0; i < 1000000; ++i) y = y + 1.0;
  y.backward();
  CHECK(x.grad().item() == 1.0);
  CHECK(y.item() == 1000000.5);
}

TEST_CASE(
    "a graph of 1,000,000 ops dropped without backward is destroyed iteratively", "[autograd]") {
  Tensor x = tensor({0.5}, float64).requires_grad_();
  {
    Tensor y = x;
    for (int i = 0; i < 1000000; ++i) y = y * 1.0;
  }  // the whole chain dies here: ~Node must not recurse a million frames deep
  SUCCEED("destroyed");
}

TEST_CASE("backward order is deterministic", "[autograd]") {
  auto order_of_run = [] {
    std::vector<std::string> order;
    BackwardObserverGuard observe(
        [&](const Node& node, const Tensor&, const Grads&) { order.push_back(node.name()); });
    Tensor x = tensor({1.0, 2.0, 3.0}, float64).requires_grad_();
    Tensor a = exp(x), b = tanh(x), c = a * b + sigmoid(a);
    sum(c).backward();
    return order;
  };
  const std::vector<std::string> first = order_of_run();
  CHECK(first.front() == "sum");
  CHECK(first == order_of_run());
}

TEST_CASE("NoGradGuard records nothing and restores the mode", "[autograd]") {
  Tensor x = tensor({1.0}, float64).requires_grad_();
  {
    NoGradGuard no_grad;
    CHECK_FALSE(GradMode::is_enabled());
    Tensor y = x * 2.0;
    CHECK_FALSE(y.requires_grad());
    CHECK(y.grad_fn() == nullptr);
    { NoGradGuard nested; }
    CHECK_FALSE(GradMode::is_enabled());
  }
  CHECK(GradMode::is_enabled());
  CHECK((x * 2.0).requires_grad());
}

TEST_CASE("detach cuts the graph and shares the data", "[autograd]") {
  Tensor x = tensor({2.0}, float64).requires_grad_();
  Tensor y = x * x;
  Tensor d = y.detach();
  CHECK_FALSE(d.requires_grad());
  CHECK(d.grad_fn() == nullptr);
  CHECK(d.shares_storage(y));
  Tensor z = sum(d * x);  // d is a constant here: dz/dx = d = 4
  z.backward();
  CHECK(x.grad().item() == 4.0);
}

TEST_CASE("tensors that need no grad record no graph", "[autograd]") {
  Tensor a = ones({2, 2}), b = ones({2, 2});
  Tensor c = matmul(a, b) + a;
  CHECK_FALSE(c.requires_grad());
  CHECK(c.grad_fn() == nullptr);
  CHECK_THROWS_AS(c.backward(), AutogradError);
}

TEST_CASE("make_op connects a user-defined op to the graph", "[autograd]") {
  Tensor x = tensor({1.0, 2.0}, float64).requires_grad_();
  Tensor out;
  {
    NoGradGuard no_grad;
    out = x * x * x;  // computed outside autograd
  }
  Tensor cube = make_op("cube", out, {x}, [x](const Tensor& g, const NeedsGrad&) -> Grads {
    return {g * 3.0 * x * x};  // d(x³)/dx = 3x²
  });
  CHECK(std::string(cube.grad_fn()->name()) == "cube");
  sum(cube).backward();
  CHECK(values(x.grad()) == std::vector<double>{3.0, 12.0});
}

TEST_CASE("an op without backward throws at backward time, naming the op", "[autograd]") {
  Tensor x = tensor({1.0}, float64).requires_grad_();
  Tensor out = make_op("no_backward_op", x.detach().clone(), {x}, nullptr);
  CHECK_THROWS_AS(sum(out).backward(), AutogradError);
  Tensor again = make_op("no_backward_op", x.detach().clone(), {x}, nullptr);
  CHECK_THROWS_WITH(sum(again).backward(), Contains("no_backward_op") && Contains("no backward"));
}

TEST_CASE("a gradient of the wrong shape is rejected, naming the op and the shapes", "[autograd]") {
  Tensor x = tensor({1.0, 2.0}, float64).requires_grad_();
  Tensor out =
      make_op("bad_shape", x.detach().clone(), {x}, [](const Tensor& g, const NeedsGrad&) -> Grads {
        return {sum(g)};  // shape [] instead of [2]
      });
  CHECK_THROWS_WITH(
      sum(out).backward(), Contains("bad_shape") && Contains("shape []") && Contains("[2]"));
}

TEST_CASE("backward misuse errors", "[autograd]") {
  Tensor x = tensor({1.0, 2.0}, float64).requires_grad_();
  Tensor y = x * 2.0;
  CHECK_THROWS_WITH(
      y.backward(), Contains("backward") && Contains("[2]") && Contains("not a scalar"));
  CHECK_THROWS_WITH(y.backward(ones({3}, float64)), Contains("[3]") && Contains("[2]"));
  CHECK_THROWS_AS(y.backward(ones({2}, float32)), AutogradError);
  CHECK_THROWS_AS(y.requires_grad_(false), AutogradError);
}

TEST_CASE("in-place updates of a tensor requiring grad need NoGradGuard", "[autograd]") {
  Tensor w = tensor({1.0, 2.0}, float64).requires_grad_();
  CHECK_THROWS_AS(w.add_(ones({2}, float64)), AutogradError);
  {
    NoGradGuard no_grad;
    w.add_(ones({2}, float64), -0.5);
  }
  CHECK(values(w) == std::vector<double>{0.5, 1.5});
}

TEST_CASE("the graph releases saved tensors after backward", "[autograd]") {
  Tensor x = ones({1000}, float64).requires_grad_();
  std::weak_ptr<TensorImpl> saved;
  Tensor loss;
  {
    Tensor h = exp(x);  // exp's backward saves its output
    saved = h.impl_ptr();
    loss = sum(h * h);  // mul saves h
  }
  CHECK_FALSE(saved.expired());  // kept alive by the graph
  loss.backward();
  CHECK(saved.expired());  // freed with the graph
}
