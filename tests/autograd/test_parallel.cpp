// ag's thread pool (autograd/parallel.h): every index once, exceptions reach the caller, nested
// loops run inline, and ops give the same bits on 1 and 2 threads where the split cannot matter.
#include <catch2/catch.hpp>

#include <atomic>
#include <stdexcept>
#include <vector>

#include "autograd/autograd.h"
#include "autograd/ops.h"
#include "autograd/parallel.h"

using namespace ag;

namespace {
struct Threads {  // sets ag's thread count for a scope
  explicit Threads(int n) : previous(get_num_threads()) { set_num_threads(n); }
  ~Threads() { set_num_threads(previous); }
  int previous;
};
}  // namespace

TEST_CASE("parallel_for covers every index exactly once, in contiguous chunks", "[parallel]") {
  Threads two(2);
  for (const int64_t n : {int64_t{1}, int64_t{7}, int64_t{1000}, int64_t{1} << 20}) {
    std::vector<std::atomic<int>> hits(static_cast<std::size_t>(n));
    std::atomic<int> chunks{0};
    parallel_for(n, 1, [&](int64_t begin, int64_t end) {
      CHECK(begin < end);
      ++chunks;
      for (int64_t i = begin; i < end; ++i) ++hits[static_cast<std::size_t>(i)];
    });
    int64_t not_once = 0;
    for (const auto& h : hits) not_once += h.load() != 1;
    CHECK(not_once == 0);
    // Small loops run inline (one chunk); 2^20 items are enough work for both threads.
    CHECK(chunks.load() == (n == (int64_t{1} << 20) ? 2 : 1));
  }
}

TEST_CASE("parallel_for rethrows a chunk's exception and runs nested loops inline", "[parallel]") {
  Threads two(2);
  CHECK_THROWS_WITH(parallel_for(int64_t{1} << 20, 1,
                        [](int64_t begin, int64_t) {
                          if (begin > 0) throw std::runtime_error("chunk failed");
                        }),
      "chunk failed");
  std::atomic<int> inner_chunks{0};
  parallel_for(2, int64_t{1} << 20, [&](int64_t, int64_t) {
    parallel_for(int64_t{1} << 20, 1, [&](int64_t, int64_t) { ++inner_chunks; });
  });
  CHECK(inner_chunks.load() == 2);  // one inline chunk per outer chunk
  // The pool still works after both.
  std::atomic<int64_t> total{0};
  parallel_for(int64_t{1} << 20, 1, [&](int64_t begin, int64_t end) { total += end - begin; });
  CHECK(total.load() == (int64_t{1} << 20));
}

TEST_CASE("elementwise ops, copies and batched matmul give the same bits on 1 and 2 threads",
    "[parallel]") {
  Generator gen(4);
  const Tensor a = randn({64, 8, 64, 32}, gen), b = randn({64, 8, 32, 64}, gen),
               bias = randn({64}, gen);
  auto compute = [&] {
    Tensor product = matmul(a, b);              // (64, 8, 64, 64): 512 products
    Tensor shifted = add(tanh(product), bias);  // broadcast over the last dim
    return std::vector<Tensor>{
        product, shifted, mul(shifted, shifted), contiguous(transpose(a, 1, 2))};
  };
  std::vector<Tensor> one, two;
  {
    Threads t(1);
    one = compute();
  }
  {
    Threads t(2);
    two = compute();
  }
  for (std::size_t i = 0; i < one.size(); ++i)
    CHECK(one[i].to_vector<float>() == two[i].to_vector<float>());
}

TEST_CASE("set_num_threads rejects 0 and sets get_num_threads", "[parallel]") {
  Threads keep(get_num_threads());
  set_num_threads(3);
  CHECK(get_num_threads() == 3);
  CHECK_THROWS_AS(set_num_threads(0), ValueError);
  CHECK(get_num_threads() == 3);
}
