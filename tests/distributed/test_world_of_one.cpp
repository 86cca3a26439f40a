// ag::dist without mpirun: a world of one rank, in which the collectives are the identity, and
// the helpers that need no MPI at all.
#include <catch2/catch.hpp>

#include <set>

#include "autograd/ops.h"
#include "distributed/distributed.h"
#include "nn/layers.h"
#include "what_contains.h"

using namespace ag;

TEST_CASE("without mpirun: a world of one, and collectives that change nothing", "[distributed]") {
  CHECK_FALSE(dist::initialized());
  CHECK(dist::rank() == 0);
  CHECK(dist::world_size() == 1);
  CHECK(dist::local_size() == 1);
  CHECK(dist::all_reduce_sum(2.5) == 2.5);
  CHECK(dist::all_reduce_sum(int64_t{7}) == 7);
  Tensor t = tensor({1.0, 2.0});
  dist::all_reduce_sum(t);
  dist::broadcast(t, 0);
  dist::barrier();
  CHECK(t.to_vector<float>() == std::vector<float>{1.0f, 2.0f});
  nn::Linear linear(2, 2);
  CHECK_THROWS_MATCHES(dist::DistributedDataParallel(linear), dist::DistributedError,
      WhatContains({"DistributedDataParallel", "MPI is not initialised", "mpirun"}));
}

TEST_CASE("without mpirun: ChunkedGradientSum adds the chunks in their order", "[distributed]") {
  nn::Linear linear(3, 2);
  linear.to(float64);
  dist::ChunkedGradientSum chunks(linear);                // Scope::all_ranks: a world of one
  const std::vector<double> scales = {1.0, 1e16, -1e16};  // (a + b) + c = 0, a + (b + c) = 1
  std::vector<std::vector<double>> gradients;
  for (double scale : scales) {
    Tensor x = full({1, 3}, scale, float64);  // (1, 3)
    Tensor loss = linear.forward(x).sum();
    loss.backward();
    gradients.push_back(linear.weight.grad().to_vector<double>());
    chunks.add_chunk(scale);
    CHECK_FALSE(linear.weight.grad().defined());  // taken, for the next chunk
  }
  CHECK(chunks.finish() == (scales[0] + scales[1]) + scales[2]);
  const std::vector<double> summed = linear.weight.grad().to_vector<double>();
  REQUIRE(summed.size() == gradients[0].size());
  for (std::size_t i = 0; i < summed.size(); ++i)
    CHECK(summed[i] == (gradients[0][i] + gradients[1][i]) + gradients[2][i]);  // here 0, not 1
  CHECK(linear.bias.grad().to_vector<double>() == std::vector<double>{3.0, 3.0});

  nn::Linear mixed(2, 2);
  mixed.bias.set_data(mixed.bias.detach().to(float64));
  CHECK_THROWS_MATCHES(dist::ChunkedGradientSum(mixed), ValueError,
      WhatContains(
          {"ChunkedGradientSum", "one dtype", "'weight' is float32", "'bias' is float64"}));
}

TEST_CASE("rows_of_rank: disjoint slices that cover the batch", "[distributed]") {
  for (int world : {1, 2, 3, 4, 8})
    for (int64_t rows : {8, 9, 31, 64}) {
      if (rows < world) continue;
      int64_t next = 0;
      for (int rank = 0; rank < world; ++rank) {
        const dist::RowRange range = dist::rows_of_rank(rows, rank, world);
        CHECK(range.begin == next);
        CHECK((range.size() == rows / world || range.size() == rows / world + 1));
        next = range.end;
      }
      CHECK(next == rows);
    }
  CHECK(dist::rows_of_rank(64, 1, 2).begin == 32);
  CHECK(dist::rows_of_rank(9, 0, 2).size() == 5);  // the first ranks take the remainder
  CHECK_THROWS_MATCHES(dist::rows_of_rank(3, 0, 4), ValueError,
      WhatContains({"a global batch of 3 rows", "4 ranks"}));
  CHECK_THROWS_MATCHES(
      dist::rows_of_rank(8, 2, 2), ValueError, WhatContains({"rank 2", "world of 2"}));
}

TEST_CASE("rank_seed: rank 0 keeps the seed, the others get distinct ones", "[distributed]") {
  CHECK(dist::rank_seed(42, 0) == 42);
  std::set<uint64_t> seeds;
  for (int rank = 0; rank < 64; ++rank) seeds.insert(dist::rank_seed(42, rank));
  CHECK(seeds.size() == 64);
  CHECK(dist::rank_seed(42, 1) != dist::rank_seed(43, 1));
}

TEST_CASE(
    "the thread budget of a world of one is the machine's hardware threads", "[distributed]") {
  CHECK_NOTHROW(dist::check_thread_budget(1, false));
}
