// gather, cumsum, one_hot, topk and multinomial (autograd/ops_index.cpp): the dtypes, edge cases
// and errors that the PyTorch fixtures (test_ops_torch.cpp) and gradchecks do not cover, and
// multinomial's distribution, which no PyTorch value can check (ag has its own random stream).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <vector>

#include "autograd/autograd.h"
#include "autograd/ops.h"
#include "autograd/parallel.h"
#include "what_contains.h"

using namespace ag;

namespace {
std::vector<int64_t> ints(const Tensor& t) { return t.to_vector<int64_t>(); }
std::vector<double> doubles(const Tensor& t) { return t.to_vector<double>(); }
}  // namespace

// ---- gather -------------------------------------------------------------------------------------

TEST_CASE("gather picks along dim for every dtype of x", "[ops_index]") {
  Tensor index = tensor(std::vector<int64_t>{1, 0, 0, 0}, {2, 2});
  // torch.gather(torch.tensor([[1, 2], [3, 4]]), 1, torch.tensor([[1, 0], [0, 0]]))
  //   = [[2, 1], [3, 3]]
  Tensor x = tensor({1, 2, 3, 4}, {2, 2}, int64);
  Tensor out = gather(x, 1, index);
  CHECK(out.dtype() == int64);
  CHECK(ints(out) == std::vector<int64_t>{2, 1, 3, 3});
  Tensor b = tensor(std::vector<bool>{true, false, false, true}, {2, 2});
  // out[i][j] = b[index[i][j]][j] along dim 0: [[b10, b01], [b00, b01]]
  CHECK(gather(b, 0, index).to_vector<bool>() == std::vector<bool>{false, false, true, false});
  // A float index holding integers is taken too (as index_select takes one).
  CHECK(doubles(gather(x.to(float32), 1, index.to(float64))) == std::vector<double>{2, 1, 3, 3});
  // A 0-dim x with a 0-dim index, as PyTorch allows.
  CHECK(
      doubles(gather(scalar_tensor(3.5), 0, scalar_tensor(0, int64))) == std::vector<double>{3.5});
  // An empty index gives an empty result of its shape.
  CHECK(gather(x, 0, zeros({0, 2}, int64)).shape() == Shape{0, 2});
}

TEST_CASE("gather's gradient adds up at positions read twice", "[ops_index]") {
  Tensor x = tensor({1, 2, 3}, {3}, float64).requires_grad_();
  Tensor out = gather(x, 0, tensor(std::vector<int64_t>{2, 2, 0}));  // [x2, x2, x0]
  out.backward(tensor({1, 10, 100}, {3}, float64));
  CHECK(doubles(x.grad()) == std::vector<double>{100, 0, 11});
}

TEST_CASE("gather's backward reads a strided gradient, with the same bits on 1 and 2 threads",
    "[ops_index]") {
  // x (6, 40, 150) and an index large enough for the rows (dim 2) or the blocks of rows (dim 1) to
  // be split across 2 threads. The reference adds w[j] into x's element at(j) in the order of j,
  // as the backward must (float64: the same bits).
  Generator gen(11);
  const Shape x_shape{6, 40, 150};
  // An index as large as x outside dim (along the last dim, each row of x.grad then receives one
  // row of gradients) or smaller.
  for (const bool smaller : {false, true})
    for (const int64_t dim : {0, 1, 2}) {
      Shape index_shape = smaller ? Shape{5, 36, 140} : x_shape;
      index_shape[static_cast<std::size_t>(dim)] = 50;  // more positions than x has along dim
      const Tensor index = randint(0, x_shape[static_cast<std::size_t>(dim)], index_shape, gen);
      const Tensor w = randn(index_shape, gen, float64);
      const std::vector<int64_t> pos = ints(index);
      const std::vector<double> w_values = doubles(w);
      std::vector<double> expected(static_cast<std::size_t>(numel(x_shape)), 0.0);
      std::vector<double> counts(expected.size(), 0.0);
      std::size_t j = 0;
      for (int64_t i0 = 0; i0 < index_shape[0]; ++i0)
        for (int64_t i1 = 0; i1 < index_shape[1]; ++i1)
          for (int64_t i2 = 0; i2 < index_shape[2]; ++i2, ++j) {
            int64_t at[3] = {i0, i1, i2};
            at[dim] = pos[j];
            const auto flat =
                static_cast<std::size_t>((at[0] * x_shape[1] + at[1]) * x_shape[2] + at[2]);
            expected[flat] += w_values[j];
            counts[flat] += 1;
          }
      std::vector<double> first_run;
      for (const int threads : {1, 2}) {
        NumThreadsGuard t(threads);
        // A permuted gradient: mul's gradient (2, 0, 1)-permuted back through permute.
        Tensor x = zeros(x_shape, float64).requires_grad_();
        const Shape order{2, 0, 1};
        mul(permute(gather(x, dim, index), order), permute(w, order)).sum().backward();
        CHECK(doubles(x.grad()) == expected);
        if (threads == 1) first_run = doubles(x.grad());
        CHECK(doubles(x.grad()) == first_run);
        // A sum's gradient, one expanded value (stride 0): x[at] counts the positions reading it.
        Tensor y = zeros(x_shape, float64).requires_grad_();
        gather(y, dim, index).sum().backward();
        CHECK(doubles(y.grad()) == counts);
      }
    }
}

TEST_CASE("gather checks every position, and its backward refuses a changed index", "[ops_index]") {
  Tensor x = zeros({3, 20}).requires_grad_();
  std::vector<int64_t> values(60, 19);
  values[47] = 20;  // the one bad position, in the last row
  CHECK_THROWS_MATCHES(gather(x, 1, tensor(values, {3, 20})), ShapeError,
      WhatContains({"gather", "index value 20", "[0, 19]", "dim 1", "[3,20]"}));
  values[47] = -3;
  CHECK_THROWS_MATCHES(gather(x, 1, tensor(values, {3, 20})), ShapeError,
      WhatContains({"gather", "index value -3", "[0, 19]"}));
  // The backward reads the index itself (int64, contiguous), as PyTorch's does: changing it in
  // place before backward is an error, not a gradient at the wrong positions.
  Tensor index = zeros({3, 20}, int64);
  Tensor y = gather(x, 1, index);
  index.fill_(1);
  CHECK_THROWS_MATCHES(y.sum().backward(), AutogradError,
      WhatContains({"gather saved a tensor of shape [3,20] at version 0"}));
}

TEST_CASE("gather refuses bad indices, naming the op, shapes and values", "[ops_index]") {
  Tensor x = zeros({2, 3});
  CHECK_THROWS_MATCHES(gather(x, 1, tensor(std::vector<int64_t>{0, 3}, {1, 2})), ShapeError,
      WhatContains({"gather", "index value 3", "[0, 2]", "dim 1", "[2,3]"}));
  CHECK_THROWS_MATCHES(gather(x, 1, tensor(std::vector<int64_t>{-1}, {1, 1})), ShapeError,
      WhatContains({"gather", "-1", "[0, 2]"}));
  CHECK_THROWS_MATCHES(gather(x, 1, tensor({0.5}, {1, 1})), ShapeError,
      WhatContains({"gather", "0.5", "not an integer"}));
  CHECK_THROWS_MATCHES(gather(x, 0, zeros({3}, int64)), ShapeError,
      WhatContains({"gather", "[3]", "[2,3]", "as many dims"}));
  CHECK_THROWS_MATCHES(gather(x, 1, zeros({3, 1}, int64)), ShapeError,
      WhatContains({"gather", "[3,1]", "[2,3]", "dim 0"}));
  CHECK_THROWS_MATCHES(gather(x, 2, zeros({1, 1}, int64)), ShapeError, WhatContains({"gather"}));
  CHECK_THROWS_MATCHES(
      gather(x, 0, zeros({1, 1}, bool_)), DTypeError, WhatContains({"gather", "bool", "int64"}));
  // An empty dim has no position to name: every index value is bad (and no element is read).
  CHECK_THROWS_MATCHES(gather(zeros({2, 0}), 1, zeros({2, 3}, int64)), ShapeError,
      WhatContains({"gather", "index value 0", "dim 1", "[2,0]"}));
  CHECK_THROWS_MATCHES(gather(zeros({0, 2}), 0, zeros({3, 2}, int64)), ShapeError,
      WhatContains({"gather", "index value 0", "dim 0", "[0,2]"}));
}

// ---- cumsum -------------------------------------------------------------------------------------

TEST_CASE("cumsum of floats accumulates in double, as PyTorch's CPU kernel", "[ops_index]") {
  // torch.cumsum(torch.tensor([1e8, 1, -1e8]), 0) = [1e8, 1e8, 1] in float32: 1e8 + 1 rounds to
  // 1e8 when stored, but the running double sum keeps the 1 (a float sum would end at 0).
  Tensor out = cumsum(tensor({1e8, 1, -1e8}, {3}, float32), 0);
  CHECK(out.dtype() == float32);
  CHECK(doubles(out) == std::vector<double>{1e8, 1e8, 1});
  CHECK(doubles(cumsum(scalar_tensor(2.5), 0)) == std::vector<double>{2.5});  // 0-dim
  CHECK(cumsum(zeros({2, 0}), 1).shape() == Shape{2, 0});
}

TEST_CASE(
    "cumsum of int64 and bool is int64, wrapping as PyTorch's, not differentiable", "[ops_index]") {
  // torch.cumsum(torch.tensor([2**63 - 1, 1]), 0) = [9223372036854775807, -9223372036854775808]
  Tensor wrapped = cumsum(tensor(std::vector<int64_t>{INT64_MAX, 1}), 0);
  CHECK(wrapped.dtype() == int64);
  CHECK(ints(wrapped) == std::vector<int64_t>{INT64_MAX, INT64_MIN});
  Tensor counts = cumsum(tensor(std::vector<bool>{true, false, true, true}), -1);
  CHECK(counts.dtype() == int64);
  CHECK(ints(counts) == std::vector<int64_t>{1, 1, 2, 3});
  CHECK_FALSE(counts.requires_grad());
  CHECK_THROWS_MATCHES(cumsum(zeros({2, 3}), 2), ShapeError, WhatContains({"cumsum"}));
}

// ---- one_hot ------------------------------------------------------------------------------------

TEST_CASE("one_hot gives int64 of index shape plus C", "[ops_index]") {
  Tensor out = one_hot(tensor(std::vector<int64_t>{2, 0}), 4);
  CHECK(out.dtype() == int64);
  CHECK(out.shape() == Shape{2, 4});
  CHECK(ints(out) == std::vector<int64_t>{0, 0, 1, 0, 1, 0, 0, 0});
  CHECK(one_hot(tensor(std::vector<int64_t>{1, 3}, {1, 2})).shape() == Shape{1, 2, 4});  // max + 1
  CHECK(one_hot(zeros({0}, int64), 3).shape() == Shape{0, 3});
  CHECK(ints(one_hot(scalar_tensor(1, int64), 2)) == std::vector<int64_t>{0, 1});
}

TEST_CASE("one_hot refuses bad indices and sizes with errors naming it", "[ops_index]") {
  Tensor ids = tensor(std::vector<int64_t>{0, 3});
  CHECK_THROWS_MATCHES(one_hot(ids, 3), ValueError, WhatContains({"one_hot", "3", "[0, 2]"}));
  CHECK_THROWS_MATCHES(
      one_hot(tensor(std::vector<int64_t>{-1, 0})), ValueError, WhatContains({"one_hot", "-1"}));
  CHECK_THROWS_MATCHES(
      one_hot(ids.to(float32)), DTypeError, WhatContains({"one_hot", "float32", "to(ag::int64)"}));
  CHECK_THROWS_MATCHES(
      one_hot(ids.to(bool_)), DTypeError, WhatContains({"one_hot", "bool", "int64"}));
  CHECK_THROWS_MATCHES(one_hot(zeros({0}, int64)), ValueError, WhatContains({"one_hot", "empty"}));
  CHECK_THROWS_MATCHES(one_hot(ids, -2), ValueError, WhatContains({"one_hot", "-2"}));
  // Results no tensor can be: [2, 2^62] elements overflow, [1, 2^61] int64s are 2^64 bytes.
  CHECK_THROWS_MATCHES(one_hot(ids, int64_t{1} << 62), ShapeError, WhatContains({"one_hot"}));
  CHECK_THROWS_MATCHES(one_hot(tensor(std::vector<int64_t>{0}), int64_t{1} << 61), ShapeError,
      WhatContains({"one_hot"}));
  CHECK_THROWS_MATCHES(one_hot(tensor(std::vector<int64_t>{INT64_MAX})), ShapeError,
      WhatContains({"one_hot", "9223372036854775807"}));
}

// ---- topk ---------------------------------------------------------------------------------------

TEST_CASE("topk orders ties by index and takes NaN as the largest", "[ops_index]") {
  Tensor x = tensor({1, 3, 3, 2, 3}, {5}, float64);
  auto [values, indices] = topk(x, 2);
  CHECK(indices.dtype() == int64);
  CHECK(doubles(values) == std::vector<double>{3, 3});
  CHECK(ints(indices) == std::vector<int64_t>{1, 2});  // the lower indices among the three 3s
  CHECK(ints(topk(x, 4, 0, /*largest=*/false).indices) == std::vector<int64_t>{0, 3, 1, 2});
  // sorted = false gives the same order (PyTorch leaves it unspecified).
  CHECK(ints(topk(x, 3, 0, true, /*sorted=*/false).indices) == std::vector<int64_t>{1, 2, 4});
  Tensor with_nan = tensor({NAN, 1, NAN, 5}, {4}, float32);
  CHECK(ints(topk(with_nan, 3).indices) == std::vector<int64_t>{0, 2, 3});
  CHECK(ints(topk(with_nan, 3, -1, /*largest=*/false).indices) == std::vector<int64_t>{1, 3, 0});
}

TEST_CASE("topk's gradient goes to the picked positions — k may be 0 or the size", "[ops_index]") {
  Tensor x = tensor({1, 3, 3, 2}, {2, 2}, float64).requires_grad_();
  auto [values, indices] = topk(x, 1, 0);  // per column: x[1][0] = 3, x[0][1] = 3 (lower index)
  CHECK(ints(indices) == std::vector<int64_t>{1, 0});
  CHECK_FALSE(indices.requires_grad());
  values.backward(tensor({5, 7}, {1, 2}, float64));
  CHECK(doubles(x.grad()) == std::vector<double>{0, 7, 5, 0});
  CHECK(topk(x, 0, 1).values.shape() == Shape{2, 0});
  CHECK(doubles(topk(x, 2, 1).values) == std::vector<double>{3, 1, 3, 2});
  CHECK(doubles(topk(scalar_tensor(4.0), 1).values) == std::vector<double>{4});  // 0-dim
}

TEST_CASE("topk on long rows picks as a full sort does: ties, signed zeros, NaN, infinities",
    "[ops_index]") {
  // Rows long enough for topk's radix select to narrow them byte by byte (ops_index.cpp), against
  // a stable sort of each row by topk's order: NaN largest (all NaN equal), −0 equal to +0, ties
  // by index. The values: normal numbers, many repeats, both zeros, ±∞, NaN, subnormals; a row of
  // one repeated value, which no byte narrows; the rows along dim 1 of (2, n, 3), 3 apart.
  const int64_t n = 300;
  Generator generator(5);
  std::vector<double> values = randn({2, n, 3}, generator, float64).to_vector<double>();
  const std::vector<double> specials = {
      0.0, -0.0, 1.0, -1.0, 2.5, INFINITY, -INFINITY, NAN, 1e-310, -1e-310, 1.0000001};
  for (std::size_t i = 0; i < values.size(); ++i)
    if (i % 3 != 2 && i % 5 < 3)
      values[i] = specials[(i * 7) % specials.size()];
    else if (i % 3 == 2 && i >= 3 * n)
      values[i] = 0.75;  // row (1, ·, 2): one value throughout
  for (DType dtype : {float32, float64}) {
    const Tensor x = tensor(values, {2, n, 3}, float64).to(dtype);
    const std::vector<double> xs = x.to_vector<double>();
    for (bool largest : {true, false})
      for (int64_t k : {int64_t{1}, int64_t{7}, int64_t{150}, n}) {
        INFO(dtype_name(dtype) << ", largest " << largest << ", k " << k);
        std::vector<int64_t> expected(static_cast<std::size_t>(2 * k * 3));  // (2, k, 3)
        for (int64_t o = 0; o < 2; ++o)
          for (int64_t in = 0; in < 3; ++in) {
            const auto value = [&](int64_t i) {
              return xs[static_cast<std::size_t>((o * n + i) * 3 + in)];
            };
            std::vector<int64_t> order(static_cast<std::size_t>(n));
            for (int64_t i = 0; i < n; ++i) order[static_cast<std::size_t>(i)] = i;
            std::stable_sort(order.begin(), order.end(), [&](int64_t i, int64_t j) {
              const double vi = value(i), vj = value(j);
              if (std::isnan(vi) || std::isnan(vj))
                return std::isnan(vi) != std::isnan(vj) &&
                       (largest ? std::isnan(vi) : std::isnan(vj));
              return largest ? vi > vj : vi < vj;
            });
            for (int64_t j = 0; j < k; ++j)
              expected[static_cast<std::size_t>((o * k + j) * 3 + in)] =
                  order[static_cast<std::size_t>(j)];
          }
        CHECK(ints(topk(x, k, 1, largest).indices) == expected);
      }
  }
}

TEST_CASE("topk refuses k out of range and non-floating x", "[ops_index]") {
  Tensor x = zeros({2, 4});
  CHECK_THROWS_MATCHES(topk(x, 5), ShapeError, WhatContains({"topk", "5", "[0, 4]", "[2,4]"}));
  CHECK_THROWS_MATCHES(topk(x, -1, 0), ShapeError, WhatContains({"topk", "-1", "[0, 2]"}));
  CHECK_THROWS_MATCHES(topk(x, 1, 2), ShapeError, WhatContains({"topk"}));
  CHECK_THROWS_MATCHES(topk(zeros({3}, int64), 1), DTypeError, WhatContains({"topk", "int64"}));
}

// ---- multinomial --------------------------------------------------------------------------------

namespace {
// |count − N p| within 6 standard deviations √(N p (1 − p)) of a binomial count: a draw outside it
// has probability below 2·10⁻⁹, so a failure means a wrong distribution, not bad luck (and the
// seeds are fixed: the test gives the same answer every run).
void check_frequency(int64_t count, int64_t n, double p) {
  const double sigma = std::sqrt(n * p * (1 - p));
  INFO("count " << count << " of " << n << ", expected " << n * p << " ± 6 · " << sigma);
  CHECK(std::abs(count - n * p) <= 6 * sigma);
}
}  // namespace

TEST_CASE(
    "multinomial with replacement draws each category in proportion to its weight", "[ops_index]") {
  Generator generator(1234);
  constexpr int64_t N = 20000;
  // Weights need not sum to 1: {1, 2, 7} is {0.1, 0.2, 0.7}.
  Tensor samples = multinomial(tensor({1, 2, 7}, {3}), N, /*replacement=*/true, generator);
  CHECK(samples.dtype() == int64);
  CHECK(samples.shape() == Shape{N});
  std::map<int64_t, int64_t> counts;
  for (int64_t s : ints(samples)) ++counts[s];
  CHECK(counts.size() == 3);
  check_frequency(counts[0], N, 0.1);
  check_frequency(counts[1], N, 0.2);
  check_frequency(counts[2], N, 0.7);
}

TEST_CASE(
    "multinomial without replacement draws successively from the weights left", "[ops_index]") {
  // 20000 rows of {1, 2, 7}, two samples each: the first is i with p_i = w_i / 10, the second j
  // with w_j / (10 − w_i), so the ordered pair (i, j) has probability p_i · w_j / (10 − w_i).
  Generator generator(99);
  constexpr int64_t N = 20000;
  Tensor weights = tensor({1, 2, 7}, {1, 3}, float64).expand({N, 3});
  Tensor samples = multinomial(weights, 2, /*replacement=*/false, generator);  // (N, 2)
  CHECK(samples.shape() == Shape{N, 2});
  const std::vector<int64_t> s = ints(samples);
  std::map<std::pair<int64_t, int64_t>, int64_t> pairs;
  for (int64_t r = 0; r < N; ++r) ++pairs[{s[2 * r], s[2 * r + 1]}];
  const double w[3] = {1, 2, 7};
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < 3; ++j) {
      INFO("pair (" << i << ", " << j << ")");
      if (i == j) {
        CHECK(pairs[{i, j}] == 0);  // never the same category twice
      } else {
        check_frequency(pairs[{i, j}], N, w[i] / 10 * w[j] / (10 - w[i]));
      }
    }
}

TEST_CASE("multinomial never draws a zero weight and is deterministic per seed", "[ops_index]") {
  Tensor weights = tensor({0, 3, 0, 1, 0}, {5}, float64);
  for (bool replacement : {true, false}) {
    Generator generator(7);
    for (int64_t id : ints(multinomial(weights, replacement ? 500 : 2, replacement, generator)))
      CHECK((id == 1 || id == 3));
  }
  // Without replacement all positive weights drawn is a permutation of them.
  Generator all(3);
  std::vector<int64_t> both = ints(multinomial(weights, 2, false, all));
  CHECK(((both == std::vector<int64_t>{1, 3}) || (both == std::vector<int64_t>{3, 1})));
  // The same seed gives the same samples, and scaling the weights changes nothing (they are
  // divided by their largest: 1/16 and 10/160 are the same double).
  Tensor w = tensor({0.5, 1, 2, 4, 8, 16}, {2, 3});
  for (bool replacement : {true, false}) {
    Generator a(42), b(42);
    const std::vector<int64_t> first = ints(multinomial(w, 3, replacement, a));
    CHECK(first == ints(multinomial(w * 10.0, 3, replacement, b)));
  }
  // Another seed, other samples (50 draws from 6 categories: the seeds are fixed, so this is a
  // check of the generator being used, not a bet).
  Generator a(42), c(43);
  CHECK(ints(multinomial(w.reshape({6}), 50, true, a)) !=
        ints(multinomial(w.reshape({6}), 50, true, c)));
  manual_seed(5);
  const std::vector<int64_t> first = ints(multinomial(weights, 20, true));
  manual_seed(5);
  CHECK(first == ints(multinomial(weights, 20, true)));
}

TEST_CASE("multinomial refuses bad weights and sample counts, naming itself", "[ops_index]") {
  Generator g(0);
  CHECK_THROWS_MATCHES(multinomial(tensor({1, -1}), 1, true, g), ValueError,
      WhatContains({"multinomial", "-1", "at [1]"}));
  CHECK_THROWS_MATCHES(multinomial(tensor({1, 2, 3, -4}, {2, 2}), 1, true, g), ValueError,
      WhatContains({"multinomial", "-4", "at [1, 1]", "[2,2]"}));
  CHECK_THROWS_MATCHES(
      multinomial(tensor({1, NAN}), 1, true, g), ValueError, WhatContains({"multinomial", "nan"}));
  CHECK_THROWS_MATCHES(multinomial(tensor({INFINITY, 1}), 1, true, g), ValueError,
      WhatContains({"multinomial", "inf"}));
  CHECK_THROWS_MATCHES(multinomial(tensor({1, 1, 0, 0}, {2, 2}), 1, true, g), ValueError,
      WhatContains({"multinomial", "row 1", "no positive weight"}));
  CHECK_THROWS_MATCHES(multinomial(zeros({0}), 1, true, g), ValueError,
      WhatContains({"multinomial", "no positive weight"}));
  CHECK_THROWS_MATCHES(multinomial(tensor({1, 0, 2}), 3, false, g), ValueError,
      WhatContains({"multinomial", "3 samples", "2 positive"}));
  CHECK_THROWS_MATCHES(
      multinomial(tensor({1, 2}), 0, true, g), ValueError, WhatContains({"multinomial", "0"}));
  CHECK_THROWS_MATCHES(multinomial(ones({2, 2, 2}), 1, true, g), ShapeError,
      WhatContains({"multinomial", "[2,2,2]"}));
  CHECK_THROWS_MATCHES(
      multinomial(ones({3}, int64), 1, true, g), DTypeError, WhatContains({"multinomial"}));
  // An output no tensor can be: a ShapeError before any draw.
  CHECK_THROWS_MATCHES(multinomial(ones({4, 3}), int64_t{1} << 62, true, g), ShapeError,
      WhatContains({"multinomial"}));
}

TEST_CASE("top-k sampling as nanoGPT's: topk, softmax, multinomial, gather", "[ops_index]") {
  // logits (B, V) = (2, 6); only the k = 2 largest of each row may be drawn.
  Tensor logits = tensor({0.1, 2.0, -1.0, 3.0, 0.5, 0.2, 1.0, -2.0, 4.0, 0.0, 3.5, -0.5}, {2, 6});
  Generator generator(11);
  for (int draw = 0; draw < 50; ++draw) {
    auto [top, ids] = topk(logits, 2);                       // (B, k), (B, k)
    Tensor probs = softmax(top, -1);                         // (B, k)
    Tensor pick = multinomial(probs, 1, false, generator);   // (B, 1), in [0, k)
    std::vector<int64_t> next = ints(gather(ids, 1, pick));  // (B, 1) token ids
    CHECK((next[0] == 3 || next[0] == 1));
    CHECK((next[1] == 2 || next[1] == 4));
  }
}
