// ag::dist without mpirun: a world of one rank, in which the collectives are the identity, and
// the helpers that need no MPI at all. The same in a build with MPI (started without mpirun) and
// in one without (distributed/detail/world_of_one.h): every test here runs in both.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <set>
#include <string>
#include <vector>

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
  CHECK(dist::local_rank() == 0);
  CHECK(dist::processor_name().empty());
  CHECK(dist::all_reduce_sum(2.5) == 2.5);
  CHECK(dist::all_reduce_sum(0.1) == 0.1);  // the very bits, not a sum that rounds
  CHECK(dist::all_reduce_sum(int64_t{7}) == 7);
  CHECK(dist::all_reduce_sum(int64_t{-1} << 62) == int64_t{-1} << 62);
  CHECK(dist::all_reduce_max(int64_t{-3}) == -3);
  Tensor t = tensor({1.0, 2.0});
  dist::all_reduce_sum(t);
  dist::broadcast(t, 0);
  dist::barrier();
  CHECK(t.to_vector<float>() == std::vector<float>{1.0f, 2.0f});
  Tensor d = tensor({0.1, -1e300, 3.0}, float64);
  dist::all_reduce_sum(d);
  dist::broadcast(d);
  CHECK(d.to_vector<double>() == std::vector<double>{0.1, -1e300, 3.0});
  // What would be wrong on any number of ranks is wrong in a world of one too.
  CHECK_THROWS_MATCHES(
      dist::broadcast(t, 1), ValueError, WhatContains({"dist::broadcast", "root 1", "world of 1"}));
  CHECK_THROWS_MATCHES(dist::all_reduce_sum(full({2, 3}, 1.0).transpose(0, 1)), ShapeError,
      WhatContains({"dist::all_reduce_sum", "not contiguous"}));
  // DistributedDataParallel needs ranks to average over: MPI started by an Environment under
  // mpirun. A program that may run alone asks world_size() > 1 first, as training::Step does.
  nn::Linear linear(2, 2);
  CHECK_THROWS_MATCHES(dist::DistributedDataParallel(linear), dist::DistributedError,
      WhatContains({"DistributedDataParallel", "MPI is not initialised", "mpirun"}));
}

TEST_CASE("an Environment without a launcher: a world of one, MPI left alone", "[distributed]") {
  std::string program = "ag_distributed_world_of_one_tests", option = "--flag";
  std::vector<char*> arguments = {program.data(), option.data(), nullptr};
  int argc = 2;
  char** argv = arguments.data();
  for (int round = 0; round < 2; ++round) {  // and again after the first one ended
    INFO("round " << round);
    dist::Environment environment(argc, argv);
    CHECK(argc == 2);  // the command line as it was
    CHECK(argv == arguments.data());
    CHECK(std::string(argv[1]) == "--flag");
    CHECK_FALSE(dist::initialized());
    CHECK(dist::rank() == 0);
    CHECK(dist::world_size() == 1);
    CHECK(dist::local_size() == 1);
    CHECK(dist::all_reduce_sum(1.5) == 1.5);
    CHECK(dist::all_reduce_max(int64_t{4}) == 4);
    dist::barrier();
    CHECK_NOTHROW(dist::check_thread_budget(1, false));
    nn::Linear linear(2, 2);
    CHECK_THROWS_MATCHES(dist::DistributedDataParallel(linear), dist::DistributedError,
        WhatContains({"DistributedDataParallel", "MPI is not initialised", "mpirun"}));
  }
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

TEST_CASE("without mpirun: ChunkedGradientSum over all ranks is this process's sum, bit for bit",
    "[distributed]") {
  // Scope::all_ranks in a world of one (what ag-train --chunk-rows runs alone) against
  // Scope::this_process (the reference run, which never communicates): the same gradients and
  // losses to the last bit, step after step, in float32 where the order of the sums shows.
  Generator data(5);
  const int64_t chunk_rows = 3, chunks_per_step = 4;
  nn::Linear all(6, 4), alone(6, 4);
  alone.weight.set_data(all.weight.detach().clone());
  alone.bias.set_data(all.bias.detach().clone());
  dist::ChunkedGradientSum all_chunks(all);
  dist::ChunkedGradientSum alone_chunks(alone, dist::ChunkedGradientSum::Scope::this_process);
  for (int step = 0; step < 3; ++step) {
    INFO("step " << step);
    all.zero_grad();
    alone.zero_grad();
    Tensor x = randn({chunk_rows * chunks_per_step, 6}, data);  // (12, 6)
    for (int64_t k = 0; k < chunks_per_step; ++k) {
      Tensor chunk = x.narrow(0, k * chunk_rows, chunk_rows);  // (3, 6)
      for (auto [linear, chunks] :
          {std::pair{&all, &all_chunks}, std::pair{&alone, &alone_chunks}}) {
        Tensor out = linear->forward(chunk).tanh();  // (3, 4)
        Tensor loss = (out * out).mean() * (1.0 / chunks_per_step);
        loss.backward();
        chunks->add_chunk(loss.item());
      }
    }
    CHECK(all_chunks.chunks() == chunks_per_step);
    CHECK(all_chunks.finish() == alone_chunks.finish());
    CHECK(all_chunks.chunks() == 0);
    CHECK(all.weight.grad().to_vector<float>() == alone.weight.grad().to_vector<float>());
    CHECK(all.bias.grad().to_vector<float>() == alone.bias.grad().to_vector<float>());
  }
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

// Run by ctest only (tests/distributed/CMakeLists.txt), hidden from the normal runs. abort ends
// the process at once with the exit code and the message on standard error.
TEST_CASE("a world of one's abort exits with its code", "[.world_of_one_abort]") {
  dist::abort("ag_world_of_one", "failed on purpose", 3);
}

// Run by ctest only in a build without MPI, with OMPI_COMM_WORLD_SIZE set as mpirun sets it
// (tests/distributed/CMakeLists.txt): such an ag refuses to start under a launcher, where each of
// the N processes would train the whole batch alone.
TEST_CASE(
    "without MPI, an Environment under a launcher refuses to start", "[.launcher_without_mpi]") {
  REQUIRE(std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr);
  std::string program = "ag_distributed_world_of_one_tests";
  std::vector<char*> arguments = {program.data(), nullptr};
  int argc = 1;
  char** argv = arguments.data();
  CHECK_THROWS_MATCHES(dist::Environment(argc, argv), dist::DistributedError,
      WhatContains({"dist::Environment", "mpirun", "built without MPI", "libopenmpi-dev"}));
  CHECK_FALSE(dist::initialized());
  CHECK(dist::world_size() == 1);
}
