// int64 and bool tensors (torch.long, torch.bool): creation, exact values, conversions, type
// promotion, comparisons, masks, indices, and no gradient through integers. Printing is checked
// against PyTorch in test_print_torch.cpp.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "autograd/autograd.h"
#include "autograd/ops.h"

using namespace ag;
using Catch::Matchers::Contains;

namespace {
constexpr int64_t kTwo53 = int64_t{1} << 53;
}

TEST_CASE("int64 tensors hold token ids exactly, past float32's 2^24 and double's 2^53",
    "[dtype][int64]") {
  const std::vector<int64_t> ids = {0, (1 << 24) + 1, kTwo53 + 1, -5};
  Tensor t = tensor(ids);
  CHECK(t.dtype() == int64);
  CHECK(t.shape() == Shape{4});
  CHECK(t.to_vector<int64_t>() == ids);
  CHECK(t.select(0, 2).item<int64_t>() == kTwo53 + 1);
  CHECK(tensor(ids, {2, 2}).shape() == Shape{2, 2});
  // Reading it as doubles, or making float32 of it, would round: refused, not rounded.
  CHECK_THROWS_WITH(t.select(0, 2).item(), Contains("item: the int64 value 9007199254740993"));
  CHECK_THROWS_AS(t.to_vector<double>(), ValueError);
  CHECK_THROWS_WITH(tensor(ids, float32), Contains("no exact float32"));
  CHECK(t.select(0, 1).item() == double((1 << 24) + 1));  // exact in double
  // A braced list is doubles (float32 unless told), as it always was.
  CHECK(tensor({1, 2, 3}, {3}).dtype() == float32);
  CHECK(tensor({1, 2, 3}, {3}, int64).to_vector<int64_t>() == std::vector<int64_t>{1, 2, 3});
  CHECK_THROWS_WITH(tensor({0.5}, {1}, int64), Contains("tensor: the value 0.5 is not an integer"));
}

TEST_CASE("creation functions take int64 and bool", "[dtype][int64][bool]") {
  CHECK(arange(4, int64).to_vector<int64_t>() == std::vector<int64_t>{0, 1, 2, 3});
  CHECK(arange(10, 0, -3, int64).to_vector<int64_t>() == std::vector<int64_t>{10, 7, 4, 1});
  CHECK_THROWS_WITH(arange(0, 2, 0.5, int64), Contains("must be integers"));
  CHECK_THROWS_AS(arange(3, bool_), DTypeError);
  CHECK(zeros({2, 3}, int64).to_vector<int64_t>() == std::vector<int64_t>(6, 0));
  CHECK(full({2}, -3, int64).to_vector<int64_t>() == std::vector<int64_t>{-3, -3});
  CHECK_THROWS_WITH(full({2}, 2.5, int64), Contains("full: the value 2.5 is not an integer"));
  CHECK_THROWS_WITH(full({1}, NAN, int64), Contains("is not an integer"));
  CHECK(ones({3}, bool_).to_vector<bool>() == std::vector<bool>{true, true, true});
  CHECK(full({2}, 0.25, bool_).to_vector<bool>() == std::vector<bool>{true, true});
  CHECK(tensor(std::vector<bool>{true, false}).dtype() == bool_);
  CHECK(
      eye(2, std::nullopt, bool_).to_vector<bool>() == std::vector<bool>{true, false, false, true});
  CHECK(zeros_like(arange(3, int64)).dtype() == int64);
  CHECK_THROWS_WITH(randn({2}, int64), Contains("randn: expected a floating-point"));
  CHECK_THROWS_WITH(linspace(0, 1, 3, int64), Contains("linspace"));
  Tensor filled = zeros({3}, int64);
  filled.fill_(7);
  CHECK(filled.to_vector<int64_t>() == std::vector<int64_t>(3, 7));
  CHECK_THROWS_AS(filled.fill_(0.5), ValueError);
}

TEST_CASE("to(dtype) converts as PyTorch's, and refuses what PyTorch leaves undefined",
    "[dtype][int64][bool]") {
  Tensor x = tensor({-1.7, -0.5, 0.0, 2.9, 3.0}, {5});
  CHECK(x.to(int64).to_vector<int64_t>() == std::vector<int64_t>{-1, 0, 0, 2, 3});  // toward zero
  CHECK(x.to(bool_).to_vector<bool>() == std::vector<bool>{true, true, false, true, true});
  CHECK(tensor(std::vector<bool>{true, false}).to(float32).to_vector<float>() ==
        std::vector<float>{1, 0});
  CHECK(arange(3, int64).to(float64).dtype() == float64);
  CHECK_THROWS_WITH(tensor({NAN}, {1}).to(int64), Contains("to: the value nan has no int64"));
  CHECK_THROWS_WITH(tensor({1e19}, {1}, float64).to(int64), Contains("has no int64"));
  CHECK(tensor({NAN}, {1}).to(bool_).item<bool>());  // NaN is nonzero, as in PyTorch
}

TEST_CASE("to(dtype) is differentiable between float32 and float64, and refuses to cut a gradient",
    "[dtype][autograd]") {
  // float64 -> float32 -> float64: the gradient comes back through both conversions, rounded to
  // float32 on the way as the values were (PyTorch's ToCopyBackward).
  Tensor x = tensor({0.1, -2.5, 1.0 / 3.0}, {3}, float64).requires_grad_();
  Tensor y = x.to(float32);  // (3) float32
  REQUIRE(y.requires_grad());
  CHECK(std::string(y.grad_fn()->name()) == "to");
  Tensor loss = (y * y).to(float64).sum();  // Σ y², in float32, then double
  loss.backward();
  REQUIRE(x.grad().dtype() == float64);
  const std::vector<float> y_values = y.to_vector<float>();
  const std::vector<double> expected{
      double(2.0f * y_values[0]), double(2.0f * y_values[1]), double(2.0f * y_values[2])};
  CHECK(x.grad().to_vector<double>() == expected);  // 2y in float32, exactly
  // the same dtype is the tensor itself, no node
  CHECK(x.to(float64).is_leaf());
  // to int64 or bool would silently stop the gradient: refused, naming both dtypes
  CHECK_THROWS_WITH(x.to(int64), Contains("to: converting a tensor of shape [3] that requires grad "
                                          "from float64 to int64 is not differentiable"));
  CHECK_THROWS_AS(y.to(bool_), AutogradError);
  {
    NoGradGuard no_grad;
    CHECK(x.to(int64).to_vector<int64_t>() == std::vector<int64_t>{0, -2, 0});
    CHECK_FALSE(x.to(float32).requires_grad());
  }
  CHECK(x.detach().to(bool_).to_vector<bool>() == std::vector<bool>{true, true, true});

  // A sum's gradient, one value expanded, is converted as it is (a fill): the bits of the same
  // gradient written out first. Through a transposed view too.
  Tensor w = (randn({5, 7}, float64) * 3.0).requires_grad_();  // (5, 7)
  Tensor v = w.detach().requires_grad_();
  sum(w.transpose(0, 1).to(float32)).backward();
  sum(mul(v.transpose(0, 1).to(float32), ones({7, 5}))).backward();
  CHECK(w.grad().to_vector<double>() == v.grad().to_vector<double>());
}

TEST_CASE("integers carry no gradient", "[dtype][autograd]") {
  Tensor ids = arange(3, int64);
  CHECK_THROWS_WITH(ids.requires_grad_(),
      Contains("requires_grad_: only floating-point tensors can require gradients; this int64"));
  CHECK_THROWS_AS(ones({2}, bool_).requires_grad_(), AutogradError);
  CHECK_NOTHROW(ids.requires_grad_(false));
  // An int64 result of a differentiable input is never in the graph.
  Tensor w = randn({2, 3}, float64).requires_grad_();
  CHECK_FALSE(argmax(w, 1).requires_grad());
  CHECK_FALSE(gt(w, 0.0).requires_grad());
}

TEST_CASE("arithmetic promotes as PyTorch's: a floating operand wins, int64 beats bool",
    "[dtype][promotion]") {
  Tensor i = tensor(std::vector<int64_t>{1, 2, 3});
  Tensor f = tensor({0.5, 0.25, 2.0}, {3});
  Tensor b = tensor(std::vector<bool>{true, false, true});
  Tensor sum_if = i + f;
  CHECK(sum_if.dtype() == float32);
  CHECK(sum_if.to_vector<double>() == std::vector<double>{1.5, 2.25, 5.0});
  CHECK((f * b).dtype() == float32);
  CHECK((f * b).to_vector<double>() == std::vector<double>{0.5, 0.0, 2.0});
  CHECK((i + i).dtype() == int64);
  CHECK((i * i).to_vector<int64_t>() == std::vector<int64_t>{1, 4, 9});
  CHECK((i - b).to_vector<int64_t>() == std::vector<int64_t>{0, 2, 2});
  Tensor quotient = i / tensor(std::vector<int64_t>{2, 2, 2});  // true division
  CHECK(quotient.dtype() == float32);
  CHECK(quotient.to_vector<double>() == std::vector<double>{0.5, 1.0, 1.5});
  CHECK_THROWS_WITH(b + b, Contains("add: no arithmetic on two bool tensors"));
  CHECK_THROWS_WITH(-b, Contains("neg: a bool tensor"));
  CHECK_THROWS_WITH(f + f.to(float64), Contains("add: dtypes float32 and float64 cannot be mixed"));
  // Integer scalars keep int64 int64; a double scalar makes it float32.
  CHECK((i + 1).dtype() == int64);
  CHECK((i + 1).to_vector<int64_t>() == std::vector<int64_t>{2, 3, 4});
  CHECK((2 * i).to_vector<int64_t>() == std::vector<int64_t>{2, 4, 6});
  CHECK((10 - i).to_vector<int64_t>() == std::vector<int64_t>{9, 8, 7});
  CHECK((i - int64_t{1}).to_vector<int64_t>() == std::vector<int64_t>{0, 1, 2});
  CHECK((i * 0.5).dtype() == float32);
  CHECK((i * 0.5).to_vector<double>() == std::vector<double>{0.5, 1.0, 1.5});
  CHECK((b + 1).to_vector<int64_t>() == std::vector<int64_t>{2, 1, 2});
  CHECK((1.0 - b).dtype() == float32);  // the complement of a mask, as a float
  CHECK((1.0 - b).to_vector<double>() == std::vector<double>{0, 1, 0});
  CHECK((f * 2).dtype() == float32);  // a float tensor stays float
  CHECK((f * 2).to_vector<double>() == std::vector<double>{1.0, 0.5, 4.0});
  // int64 wraps around on overflow, as PyTorch's (two's complement).
  Tensor big = tensor(std::vector<int64_t>{std::numeric_limits<int64_t>::max()});
  CHECK((big + 1).item<int64_t>() == std::numeric_limits<int64_t>::min());
  CHECK_THROWS_WITH(exp(i), Contains("exp: expected a floating-point tensor (float32 or float64), "
                                     "got one of dtype int64 and shape [3]"));
  CHECK_THROWS_WITH(matmul(i, i), Contains("matmul: expected a floating-point tensor"));
  CHECK_THROWS_WITH(mean(i), Contains("mean: expected a floating-point tensor"));
}

TEST_CASE("a bool mask times a float tensor passes the gradient where it is true",
    "[dtype][promotion][autograd]") {
  Tensor x = tensor({1.0, 2.0, 3.0}, {3}, float64).requires_grad_();
  Tensor mask = gt(x, 1.5);
  CHECK(mask.dtype() == bool_);
  sum(x * mask).backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{0, 1, 1});
}

TEST_CASE("comparisons give bool — sum of bool counts", "[dtype][bool]") {
  Tensor pred = tensor(std::vector<int64_t>{1, 2, 3, 4});
  Tensor target = tensor(std::vector<int64_t>{1, 0, 3, 0});
  Tensor hit = eq(pred, target);
  CHECK(hit.dtype() == bool_);
  CHECK(hit.to_vector<bool>() == std::vector<bool>{true, false, true, false});
  Tensor count = sum(hit);
  CHECK(count.dtype() == int64);
  CHECK(count.item<int64_t>() == 2);
  CHECK(sum(pred, 0).item<int64_t>() == 10);
  CHECK(sum(pred.reshape({2, 2}), {1}).to_vector<int64_t>() == std::vector<int64_t>{3, 7});
  CHECK(eq(pred, 3.0).to_vector<bool>() == std::vector<bool>{false, false, true, false});
  CHECK(lt(pred, tensor({2.5}, {1})).to_vector<bool>() ==
        std::vector<bool>{true, true, false, false});  // int64 vs float32 compares as float32
  CHECK(eq(hit, hit).to_vector<bool>() == std::vector<bool>(4, true));
  // The accuracy idiom: (pred == target).to(float32).mean()
  CHECK(mean(hit.to(float32)).item() == 0.5);
}

TEST_CASE(
    "where and masked_fill take bool masks — tril makes a bool causal mask", "[dtype][bool]") {
  Tensor causal = tril(ones({3, 3}, bool_));
  CHECK(causal.dtype() == bool_);
  CHECK(causal.to_vector<bool>() ==
        std::vector<bool>{true, false, false, true, true, false, true, true, true});
  Tensor scores = zeros({3, 3}, float64).requires_grad_();
  Tensor masked = masked_fill(scores, eq(causal, false), -INFINITY);
  Tensor weights = softmax(masked, -1);
  CHECK(weights.to_vector<double>()[0] == 1.0);
  CHECK(weights.to_vector<double>()[1] == 0.0);
  sum(weights * arange(9, float64).reshape({3, 3})).backward();
  CHECK(scores.grad().to_vector<double>()[1] == 0.0);  // masked: no gradient
  Tensor chosen = where(causal, arange(9, int64).reshape({3, 3}), zeros({}, int64));
  CHECK(chosen.dtype() == int64);
  CHECK(chosen.to_vector<int64_t>() == std::vector<int64_t>{0, 0, 0, 3, 4, 0, 6, 7, 8});
  CHECK(where(causal, 1.0 * ones({3, 3}), zeros({}, int64)).dtype() == float32);  // promoted
  Tensor ids = arange(3, int64);
  CHECK(masked_fill(ids, eq(ids, 1.0), -1).to_vector<int64_t>() == std::vector<int64_t>{0, -1, 2});
  CHECK_THROWS_WITH(masked_fill(ids, eq(ids, 1.0), 0.5), Contains("masked_fill: the value 0.5"));
}

TEST_CASE("shape ops, copies and joins keep int64 and bool", "[dtype][shape]") {
  Tensor ids = arange(6, int64).reshape({2, 3});
  CHECK(ids.dtype() == int64);
  CHECK(ids.transpose(0, 1).contiguous().to_vector<int64_t>() ==
        std::vector<int64_t>{0, 3, 1, 4, 2, 5});
  CHECK(ids.select(1, -1).to_vector<int64_t>() == std::vector<int64_t>{2, 5});
  CHECK(concat({ids, ids}, 0).shape() == Shape{4, 3});
  CHECK(stack({ids, ids}, 0).dtype() == int64);
  CHECK(ids.clone().to_vector<int64_t>() == ids.to_vector<int64_t>());
  CHECK(index_select(ids, 1, tensor(std::vector<int64_t>{2, 0})).to_vector<int64_t>() ==
        std::vector<int64_t>{2, 0, 5, 3});
  Tensor copy = zeros({2, 3}, int64);
  copy.copy_(ids);
  CHECK(copy.to_vector<int64_t>() == ids.to_vector<int64_t>());
  Tensor mask = ones({2, 1}, bool_).expand({2, 3}).contiguous();
  CHECK(mask.dtype() == bool_);
  CHECK(mask.numel() == 6);
}

TEST_CASE("int64 indices: argmax, max's indices, index_select, cross_entropy, valid_lens",
    "[dtype][int64]") {
  Tensor logits = tensor({0.1, 2.0, -1.0, 3.0, 0.5, 0.2}, {2, 3}, float64);
  Tensor best = argmax(logits, -1);
  CHECK(best.dtype() == int64);
  CHECK(best.to_vector<int64_t>() == std::vector<int64_t>{1, 0});
  CHECK(max(logits, -1).indices.dtype() == int64);
  CHECK(min(logits, 1).indices.to_vector<int64_t>() == std::vector<int64_t>{2, 2});
  // cross_entropy takes int64 targets, and float ones holding integers as before: the same loss.
  Tensor targets = tensor(std::vector<int64_t>{1, 2});
  CHECK(cross_entropy(logits, targets).item() == cross_entropy(logits, targets.to(float64)).item());
  CHECK_THROWS_WITH(cross_entropy(logits, tensor(std::vector<int64_t>{1, 3})),
      Contains("cross_entropy: target 3 is not a class index in [0, 3)"));
  CHECK_THROWS_WITH(cross_entropy(logits, tensor(std::vector<bool>{true, false})),
      Contains("cross_entropy: indices must be integers (int64), got a bool tensor"));
  CHECK_THROWS_WITH(index_select(logits, 0, tensor(std::vector<int64_t>{kTwo53 * 4})),
      Contains("index_select: index value 36028797018963968 is out of range"));
  // valid_lens as int64 masks exactly as the float ones
  Tensor X = randn({2, 2, 4}, float64);
  Tensor lens = tensor(std::vector<int64_t>{1, 3});
  CHECK(length_masked_softmax(X, lens).to_vector<double>() ==
        length_masked_softmax(X, lens.to(float64)).to_vector<double>());
}

TEST_CASE("randint draws int64 from low to below high, seeded", "[dtype][int64][random]") {
  Generator a(7), b(7);
  Tensor x = randint(-3, 5, {1000}, a);
  CHECK(x.dtype() == int64);
  const std::vector<int64_t> values = x.to_vector<int64_t>();
  CHECK(values == randint(-3, 5, {1000}, b).to_vector<int64_t>());
  std::vector<int> seen(8, 0);
  for (int64_t v : values) {
    REQUIRE(v >= -3);
    REQUIRE(v < 5);
    ++seen[static_cast<std::size_t>(v + 3)];
  }
  for (int count : seen) CHECK(count > 80);  // each of 8 values about 125 times
  CHECK(randint(0, 10, {4}, a, float32).dtype() == float32);
  CHECK_THROWS_WITH(randint(5, 5, {2}, a), Contains("randint: low 5 must be below high 5"));
  CHECK_THROWS_AS(randint(0, 2, {2}, a, bool_), DTypeError);
}
