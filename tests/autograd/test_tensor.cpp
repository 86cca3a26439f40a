// Tensors: creation, dtypes, views that share storage, contiguous(), values and the generator.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "autograd/autograd.h"
#include "autograd/detail/philox.h"
#include "autograd/ops.h"

using namespace ag;
using Catch::Matchers::Contains;

TEST_CASE("creation functions give the right shapes, dtypes and values", "[tensor]") {
  CHECK(zeros({2, 3}).to_vector<float>() == std::vector<float>(6, 0.0f));
  CHECK(ones({2}, float64).to_vector<double>() == std::vector<double>{1.0, 1.0});
  CHECK(full({3}, 2.5).to_vector<double>() == std::vector<double>{2.5, 2.5, 2.5});
  CHECK(zeros({2, 3}).dtype() == float32);
  CHECK(zeros({2, 3}, float64).dtype() == float64);
  CHECK(arange(4).to_vector<double>() == std::vector<double>{0, 1, 2, 3});
  CHECK(arange(1, 2, 0.25, float64).to_vector<double>() == std::vector<double>{1, 1.25, 1.5, 1.75});
  CHECK(arange(5, 0, -2).to_vector<double>() == std::vector<double>{5, 3, 1});
  Tensor t = tensor({1, 2, 3, 4, 5, 6}, {2, 3}, float64);
  CHECK(t.shape() == Shape{2, 3});
  CHECK(t.strides() == Shape{3, 1});
  CHECK(t.numel() == 6);
  CHECK(t.size(-1) == 3);
  CHECK(scalar_tensor(4.0).dim() == 0);
  CHECK(scalar_tensor(4.0).item() == 4.0);
  CHECK(zeros({0, 3}).numel() == 0);
}

TEST_CASE("from_blob views memory it does not own and releases it once, with the last view",
    "[tensor][views]") {
  std::vector<float> memory{0, 1, 2, 3, 4, 5};
  int releases = 0;
  ag::Tensor column;
  {
    // A (3, 2) tensor over the memory, then its second column: a view that outlives it.
    ag::Tensor t = ag::from_blob(memory.data(), memory.size() * sizeof(float), {3, 2}, {2, 1},
        ag::float32, [&releases] { ++releases; });
    CHECK(t.data<float>() == memory.data());
    column = t.select(1, 1);
    memory[3] = 30;  // writes through the memory are the tensor's
    CHECK(t.to_vector<float>() == std::vector<float>{0, 1, 2, 30, 4, 5});
    t.mul_(2.0);  // and the tensor's writes are the memory's
  }
  CHECK(releases == 0);
  CHECK(column.to_vector<float>() == std::vector<float>{2, 60, 10});
  CHECK(memory[0] == 0);
  CHECK(memory[5] == 10);
  column = ag::Tensor();
  CHECK(releases == 1);

  // The layout must stay inside the memory, with strides that are not negative.
  auto blob = [&](ag::Shape shape, ag::Shape strides) {
    return ag::from_blob(memory.data(), memory.size() * sizeof(float), shape, strides, ag::float32,
        nullptr);  // (an empty release: nothing to give back)
  };
  CHECK(blob({2, 3}, {3, 1}).sum().item() == 0 + 2 + 4 + 60 + 8 + 10);
  CHECK(blob({0, 7}, {7, 1}).numel() == 0);
  CHECK_THROWS_AS(blob({7}, {1}), ag::ShapeError);        // a seventh element of six
  CHECK_THROWS_AS(blob({3, 2}, {3, 1}), ag::ShapeError);  // the last at offset 7
  CHECK_THROWS_AS(blob({2}, {-1}), ag::ShapeError);       // negative
  CHECK_THROWS_AS(blob({2, 2}, {1}), ag::ShapeError);     // a stride per dim
}

TEST_CASE("item needs exactly one element", "[tensor]") {
  CHECK(tensor({7.0}, {1, 1}).item() == 7.0);
  CHECK_THROWS_WITH(zeros({2, 3}).item(), Contains("item") && Contains("[2,3]"));
}

TEST_CASE("views share storage and copy nothing", "[tensor][views]") {
  Tensor x = arange(24, float64).reshape({2, 3, 4});
  const uint64_t allocations = detail::storage_allocation_count();
  Tensor v1 = x.reshape({6, 4});
  Tensor v2 = x.transpose(0, 2);
  Tensor v3 = x.permute({1, 0, 2});
  Tensor v4 = x.unsqueeze(1).squeeze(1);
  Tensor v5 = x.slice(2, 1, 4, 2);
  Tensor v6 = x.narrow(1, 1, 2);
  Tensor v7 = x.select(0, 1);
  Tensor v8 = x.slice(0, 0, 1).expand({5, 3, 4});
  CHECK(detail::storage_allocation_count() == allocations);
  for (const Tensor& v : {v1, v2, v3, v4, v5, v6, v7, v8}) CHECK(v.shares_storage(x));
  CHECK(v2.strides() == Shape{1, 4, 12});
  CHECK(v5.shape() == Shape{2, 3, 2});
  CHECK(v5.strides() == Shape{12, 4, 2});
  CHECK(v5.to_vector<double>() == std::vector<double>{1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23});
  CHECK(v7.to_vector<double>() ==
        std::vector<double>{12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23});
  CHECK(v8.strides()[0] == 0);
  // Writing through a view changes the base.
  {
    NoGradGuard no_grad;
    v7.fill_(-1.0);
  }
  CHECK(x.select(0, 1).sum().item() == -12.0);
}

TEST_CASE("contiguous copies only when needed", "[tensor][views]") {
  Tensor x = arange(6).reshape({2, 3});
  CHECK(x.is_contiguous());
  CHECK(x.contiguous().shares_storage(x));
  Tensor t = x.transpose(0, 1);
  CHECK_FALSE(t.is_contiguous());
  Tensor c = t.contiguous();
  CHECK(c.is_contiguous());
  CHECK_FALSE(c.shares_storage(x));
  CHECK(c.to_vector<double>() == std::vector<double>{0, 3, 1, 4, 2, 5});
  // A size-1 dim's stride does not matter for contiguity.
  CHECK(x.unsqueeze(1).is_contiguous());
}

TEST_CASE("a tensor with no elements is contiguous, as in PyTorch", "[tensor][views]") {
  // torch.empty(2, 0, 3).is_contiguous() and its transpose's are True; so are ag's, and
  // contiguous() of one returns it, copying nothing.
  for (const Shape& shape : {Shape{0}, Shape{2, 0, 3}, Shape{4, 5, 0}, Shape{0, 1, 7}}) {
    const Tensor empty = zeros(shape);
    CHECK(empty.is_contiguous());
    CHECK(empty.transpose(0, -1).is_contiguous());
    CHECK(empty.contiguous().shares_storage(empty));
  }
  const Tensor sliced = arange(12).reshape({3, 4}).slice(1, 2, 2);  // (3, 0), strides (4, 1)
  CHECK(sliced.is_contiguous());
}

TEST_CASE(
    "contiguous copies a transposed tensor tile by tile, any size and dtype", "[tensor][views]") {
  // copy_into copies a layout whose innermost dim is strided in the source but contiguous along
  // another dim in 16 × 16 tiles: sizes that are not multiples of 16, one matrix or several, a
  // sliced source and every dtype give the values to_vector reads element by element.
  const std::vector<std::function<Tensor(const Tensor&)>> views = {
      [](const Tensor& x) { return x.transpose(1, 2); },
      [](const Tensor& x) { return x.transpose(0, 2); },
      [](const Tensor& x) {
        return x.permute({2, 0, 1});
      },
      [](const Tensor& x) { return x.select(0, 1).transpose(0, 1); },
      [](const Tensor& x) { return x.slice(2, 3, 30).transpose(1, 2); }};
  std::vector<double> values(3 * 17 * 35);
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<double>(i % 7);
  const Tensor x = tensor(values, {3, 17, 35}, float64);  // 0, 1, ..., 6, 0, 1, ...
  for (const auto& view : views)
    for (const DType dtype : {float32, float64, int64, bool_}) {
      const Tensor strided = view(x.to(dtype));
      REQUIRE_FALSE(strided.is_contiguous());
      const Tensor copy = contiguous(strided);
      CHECK(copy.is_contiguous());
      CHECK(copy.to_vector<double>() == strided.to_vector<double>());
    }
}

TEST_CASE("reshape is a view when the strides allow, a copy otherwise — view refuses to copy",
    "[tensor][views]") {
  Tensor x = arange(12).reshape({3, 4});
  Tensor t = x.transpose(0, 1);                    // (4, 3), strides (1, 4)
  CHECK(t.reshape({2, 2, 3}).shares_storage(x));   // splits a dim: still a view
  CHECK_FALSE(t.reshape({12}).shares_storage(x));  // flattening a transpose needs a copy
  CHECK(t.reshape({12}).to_vector<double>() ==
        std::vector<double>{0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11});
  CHECK_THROWS_AS(t.view({12}), ShapeError);
  CHECK_THROWS_WITH(t.view({12}), Contains("view") && Contains("[4,3]") && Contains("reshape"));
  CHECK(x.reshape({-1, 6}).shape() == Shape{2, 6});
  CHECK_THROWS_WITH(
      x.reshape({5, -1}), Contains("reshape") && Contains("[5,-1]") && Contains("[3,4]"));
  CHECK_THROWS_WITH(x.reshape({-1, -1}), Contains("only one dim can be -1"));
}

TEST_CASE("to_vector reads views in row-major order", "[tensor]") {
  Tensor x = tensor({1, 2, 3, 4, 5, 6}, {2, 3});
  CHECK(x.transpose(0, 1).to_vector<float>() == std::vector<float>{1, 4, 2, 5, 3, 6});
  CHECK(x.slice(1, 0, 3, 2).to_vector<double>() == std::vector<double>{1, 3, 4, 6});
}

TEST_CASE("printing follows PyTorch's format", "[tensor][print]") {
  CHECK(tensor({0.1, 0.2, 0.3, 0.4}, {2, 2}).str() ==
        "tensor([[0.1000, 0.2000],\n        [0.3000, 0.4000]])");
  CHECK(tensor({1.0, 2.0}).str() == "tensor([1., 2.])");
  CHECK(scalar_tensor(3.5).str() == "tensor(3.5000)");
  CHECK(tensor({1.0, -2.5}, float64).str() == "tensor([ 1.0000, -2.5000], dtype=float64)");
  Tensor x = ones({2}).requires_grad_();
  CHECK(x.str() == "tensor([1., 1.], requires_grad=True)");
  CHECK((x * 2.0).str() == "tensor([2., 2.], grad_fn=<mul_scalar>)");
  CHECK(zeros({0}).str() == "tensor([])");
}

TEST_CASE("mixing dtypes in one op is a clear error", "[tensor][dtype]") {
  Tensor a = ones({2}, float32), b = ones({2}, float64);
  CHECK_THROWS_AS(a + b, DTypeError);
  CHECK_THROWS_WITH(a * b, Contains("mul") && Contains("float32") && Contains("float64"));
  CHECK_THROWS_AS(matmul(ones({2, 2}), ones({2, 2}, float64)), DTypeError);
  CHECK_THROWS_AS(concat({a, b}), DTypeError);
  CHECK_THROWS_AS(a.data<double>(), DTypeError);
}

TEST_CASE("every op works in float32 and float64", "[tensor][dtype]") {
  for (DType dtype : {float32, float64}) {
    Tensor x = arange(1, 7, 1, dtype).reshape({2, 3});
    Tensor y = softmax(log(x) * 2.0 + sqrt(x), -1).sum({1});
    CHECK(y.dtype() == dtype);
    CHECK(y.to_vector<double>()[0] == Approx(1.0).epsilon(1e-6));
    CHECK(matmul(x, x.transpose(0, 1)).to_vector<double>() == std::vector<double>{14, 32, 32, 77});
  }
}

TEST_CASE("in-place updates", "[tensor]") {
  Tensor x = zeros({2, 2});
  x.fill_(3.0);
  x.add_(ones({2}), 2.0);  // broadcasts
  x.mul_(0.5);
  CHECK(x.to_vector<double>() == std::vector<double>{2.5, 2.5, 2.5, 2.5});
  x.copy_(tensor({1.0, 2.0}));
  CHECK(x.to_vector<double>() == std::vector<double>{1, 2, 1, 2});
  CHECK_THROWS_AS(x.add_(ones({3})), ShapeError);
  CHECK_THROWS_AS(x.copy_(ones({3, 2})), ShapeError);
  CHECK(x.zero_().sum().item() == 0.0);
}

TEST_CASE("set_data points every handle of a tensor at new data", "[tensor]") {
  Tensor param = ones({2, 2}).requires_grad_();
  param.set_name("weight");
  param.set_grad(full({2, 2}, 5.0));
  const Tensor other_handle = param;  // e.g. the one an optimizer holds
  Tensor source = tensor({1.0, 2.0, 3.0, 4.0}, {2, 2}, float64).transpose(0, 1);  // a view
  param.set_data(source);
  CHECK(other_handle.dtype() == float64);
  CHECK(other_handle.to_vector<double>() == std::vector<double>{1, 3, 2, 4});
  CHECK(other_handle.shares_storage(source));
  CHECK(other_handle.strides() == Shape{1, 2});
  // Only the data changes: name, requires_grad and the gradient stay.
  CHECK(param.name() == "weight");
  CHECK(param.requires_grad());
  CHECK(param.grad().to_vector<double>() == std::vector<double>(4, 5.0));
  CHECK_THROWS_AS(param.set_data(ones({4})), ShapeError);
  CHECK_THROWS_WITH(param.set_data(ones({4})),
      Contains("set_data: source of shape [4] for a tensor of shape [2,2]"));
}

// ---- generator ----------------------------------------------------------------------------------

TEST_CASE("Philox4x32-10 matches Random123's known-answer vectors", "[generator]") {
  // From Random123's kat_vectors (philox4x32 10 rounds): counter words then key words.
  CHECK(philox4x32_10({0, 0, 0, 0}, {0, 0}) ==
        std::array<uint32_t, 4>{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8});
  CHECK(philox4x32_10({0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff}) ==
        std::array<uint32_t, 4>{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd});
  CHECK(philox4x32_10({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0}) ==
        std::array<uint32_t, 4>{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1});
}

TEST_CASE("fill_blocks gives block() words, 16 lanes at a time, across 2^32", "[generator]") {
  // 37 blocks: two full groups of 16 lanes and a partial one; the counters cross 2^32, where
  // the counter's high word changes.
  const Generator g(0x0123456789abcdefULL);
  const uint64_t first = (uint64_t{1} << 32) - 20;
  std::vector<uint32_t> words(4 * 37 + 1, 0xdeadbeef);
  g.fill_blocks(first, words.data(), 37);
  for (uint64_t i = 0; i < 37; ++i) {
    const auto expected = g.block(first + i);
    for (int w = 0; w < 4; ++w) CHECK(words[4 * i + w] == expected[w]);
  }
  CHECK(words.back() == 0xdeadbeef);  // nothing written past the blocks asked for
}

#if defined(__x86_64__)
namespace {
// The vector Philox loops this CPU runs, by name: the AVX-512 one and the AVX2 one.
using PhiloxLoop = void (*)(uint64_t seed, uint64_t first, uint32_t* words, int64_t num_blocks);
std::vector<std::pair<std::string, PhiloxLoop>> vector_philox_loops() {
  std::vector<std::pair<std::string, PhiloxLoop>> loops;
  if (__builtin_cpu_supports("avx512f"))
    loops.emplace_back("AVX-512", detail::philox_fill_blocks_avx512);
  if (__builtin_cpu_supports("avx2")) loops.emplace_back("AVX2", detail::philox_fill_blocks_avx2);
  return loops;
}
}  // namespace
#endif

TEST_CASE(
    "the vector Philox loops write exactly the blocks asked for, at every count", "[generator]") {
  // AVX-512's makes 32 blocks a step (two groups of 16), then 16, then a partial group; AVX2's
  // 16 (two groups of 8), then 8, then a partial group: every count from 1 to 70 covers each way
  // a count can end, also across the counter's 2^32 boundary.
#if defined(__x86_64__)
  const uint64_t seed = 0x0badc0ffee123457ULL;
  const Generator g(seed);
  for (const auto& [name, fill] : vector_philox_loops())
    for (const uint64_t first : {uint64_t{5}, (uint64_t{1} << 32) - 33}) {
      for (int64_t blocks = 1; blocks <= 70; ++blocks) {
        std::vector<uint32_t> words(static_cast<std::size_t>(4 * blocks + 16), 0xdeadbeef);
        fill(seed, first, words.data(), blocks);
        INFO(name << ": first " << first << ", blocks " << blocks);
        for (int64_t i = 0; i < blocks; ++i) {
          const auto expected = g.block(first + static_cast<uint64_t>(i));
          for (int w = 0; w < 4; ++w)
            REQUIRE(words[static_cast<std::size_t>(4 * i + w)] == expected[w]);
        }
        for (std::size_t i = static_cast<std::size_t>(4 * blocks); i < words.size(); ++i)
          REQUIRE(words[i] == 0xdeadbeef);  // nothing past the blocks asked for
      }
    }
#endif
}

TEST_CASE(
    "the vector and the portable Philox loops give the same words as block()", "[generator]") {
  // 1,000 blocks from just below 2^32 (the counter's high word changes inside a group of lanes)
  // and from a large counter: every full group, then a partial one.
  const uint64_t seed = 0xfedcba9876543210ULL;
  const Generator g(seed);
  for (const uint64_t first : {(uint64_t{1} << 32) - 7, uint64_t{0x0123456789abcdefULL}}) {
    constexpr int64_t kBlocks = 1000;
    std::vector<uint32_t> expected(4 * kBlocks);
    for (int64_t i = 0; i < kBlocks; ++i) {
      const auto block = g.block(first + static_cast<uint64_t>(i));
      std::copy(block.begin(), block.end(), expected.begin() + 4 * i);
    }
    std::vector<uint32_t> portable(4 * kBlocks + 1, 0xdeadbeef);
    detail::philox_fill_blocks_portable(seed, first, portable.data(), kBlocks);
    CHECK(std::equal(expected.begin(), expected.end(), portable.begin()));
    CHECK(portable.back() == 0xdeadbeef);
#if defined(__x86_64__)
    for (const auto& [name, fill] : vector_philox_loops()) {
      INFO(name);
      std::vector<uint32_t> words(4 * kBlocks + 1, 0xdeadbeef);
      fill(seed, first, words.data(), kBlocks);
      CHECK(std::equal(expected.begin(), expected.end(), words.begin()));
      CHECK(words.back() == 0xdeadbeef);  // nothing written past the blocks asked for
    }
#endif
  }
}

TEST_CASE("bernoulli draws word by word as rand does: 1 where the uniform is < p", "[generator]") {
  // bernoulli compares the words as integers; rand from the same state gives the uniforms.
  for (const double p : {0.0, 0.1, 0.5, 0.9, 1.0, 1.0 / 3.0}) {
    for (const DType dtype : {float32, float64}) {
      Generator a(11), b(11);
      const std::vector<double> bits = bernoulli({1000}, p, a, dtype).to_vector<double>();
      const std::vector<double> u = rand({1000}, b, dtype).to_vector<double>();
      for (std::size_t i = 0; i < bits.size(); ++i) CHECK(bits[i] == (u[i] < p ? 1.0 : 0.0));
      CHECK(a.state() == b.state());
    }
  }
}

TEST_CASE("the same seed gives the same numbers — state can be saved and restored", "[generator]") {
  Generator a(7), b(7), c(8);
  Tensor ra = randn({100}, a), rb = randn({100}, b), rc = randn({100}, c);
  CHECK(ra.to_vector<float>() == rb.to_vector<float>());
  CHECK(ra.to_vector<float>() != rc.to_vector<float>());

  GeneratorState saved = a.state();
  Tensor next1 = rand({10}, a, float64);
  Tensor bits1 = bernoulli({10}, 0.3, a);
  a.set_state(saved);
  CHECK(rand({10}, a, float64).to_vector<double>() == next1.to_vector<double>());
  CHECK(bernoulli({10}, 0.3, a).to_vector<float>() == bits1.to_vector<float>());
  CHECK(a.state() != saved);

  manual_seed(3);
  Tensor d1 = randn({5});
  manual_seed(3);
  CHECK(randn({5}).to_vector<float>() == d1.to_vector<float>());
}

TEST_CASE("distributions have the right moments", "[generator]") {
  // Fixed seeds make these deterministic; the bounds are > 6 standard errors wide.
  Generator g(123);
  const int64_t n = 200000;
  Tensor u = rand({n}, g, float64);
  CHECK(mean(u).item() == Approx(0.5).margin(0.005));
  CHECK(var(u).item() == Approx(1.0 / 12).margin(0.002));
  CHECK(max(u).item() < 1.0);
  CHECK(-max(-u).item() >= 0.0);

  Tensor z = randn({n}, g, float64);
  CHECK(mean(z).item() == Approx(0.0).margin(0.015));
  CHECK(var(z).item() == Approx(1.0).margin(0.02));
  Tensor z32 = randn({n}, g, float32);
  CHECK(mean(z32).item() == Approx(0.0).margin(0.015));
  CHECK(var(z32).item() == Approx(1.0).margin(0.02));

  Tensor w = uniform({n}, -2.0, 3.0, g);
  CHECK(mean(w).item() == Approx(0.5).margin(0.03));
  CHECK(max(w).item() < 3.0);
  CHECK(-max(-w).item() >= -2.0);

  Tensor b = bernoulli({n}, 0.3, g);
  CHECK(mean(b).item() == Approx(0.3).margin(0.006));
  CHECK(bernoulli({10}, 0.0, g).sum().item() == 0.0);
  CHECK(bernoulli({10}, 1.0, g).sum().item() == 10.0);
}

TEST_CASE("randint is uniform over its range and rejects an empty one", "[generator]") {
  Generator g(5);
  std::vector<int> counts(6, 0);
  for (int i = 0; i < 60000; ++i) ++counts[static_cast<std::size_t>(g.randint(0, 6))];
  for (int count : counts) CHECK(count == Approx(10000).margin(600));
  CHECK_THROWS_AS(g.randint(3, 3), ValueError);
}

TEST_CASE(
    "randperm orders 0 … n − 1 uniformly, seeded, in the dtypes that hold them", "[generator]") {
  Generator g(7);
  std::map<std::vector<int64_t>, int> seen;  // each of the 6 orders of 3
  for (int i = 0; i < 6000; ++i) ++seen[randperm(3, g).to_vector<int64_t>()];
  CHECK(seen.size() == 6);
  for (const auto& [order, count] : seen) CHECK(count == Approx(1000).margin(120));
  std::vector<int64_t> big = randperm(1000, g).to_vector<int64_t>();
  std::sort(big.begin(), big.end());
  for (int64_t i = 0; i < 1000; ++i) CHECK(big[static_cast<std::size_t>(i)] == i);
  Generator a(3), b(3);
  CHECK(randperm(50, a).to_vector<int64_t>() == randperm(50, b).to_vector<int64_t>());
  CHECK(randperm(0, g).numel() == 0);
  CHECK(randperm(1, g).to_vector<int64_t>() == std::vector<int64_t>{0});
  Tensor f = randperm(4, g, float64);
  CHECK(f.dtype() == float64);
  std::vector<double> fv = f.to_vector<double>();
  std::sort(fv.begin(), fv.end());
  CHECK(fv == std::vector<double>{0, 1, 2, 3});
  CHECK_THROWS_WITH(randperm(-1, g), Catch::Contains("randperm: n must be non-negative, got -1"));
  CHECK_THROWS_AS(randperm(3, g, bool_), DTypeError);
}
