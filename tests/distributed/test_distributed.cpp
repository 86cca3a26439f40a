// ag::dist under mpirun (tests/distributed/CMakeLists.txt runs this binary on 2 ranks, and on 4
// with --oversubscribe). Every rank runs every test case, and the collectives inside a case are
// called in the same order on every rank: a failing CHECK must not skip one (no REQUIRE between
// collectives), or the ranks would wait for each other for ever (ctest's TIMEOUT is the last
// guard).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "autograd/autograd.h"
#include "autograd/generator.h"
#include "autograd/ops.h"
#include "distributed/distributed.h"
#include "nn/layers.h"
#include "optim/optimizer.h"
#include "what_contains.h"

using namespace ag;

namespace {

// A two-layer perceptron: enough parameters for several buckets, small enough to be instant.
struct Mlp : nn::Module {
  Mlp(int64_t in, int64_t hidden, int64_t out) {
    first = register_module("first", std::make_shared<nn::Linear>(in, hidden));
    second = register_module("second", std::make_shared<nn::Linear>(hidden, out));
  }
  Tensor forward(const Tensor& x) const { return second->forward(tanh(first->forward(x))); }
  std::string type_name() const override { return "Mlp"; }
  std::shared_ptr<nn::Linear> first, second;
};

std::shared_ptr<Mlp> make_mlp(uint64_t seed) {
  manual_seed(seed);
  auto mlp = std::make_shared<Mlp>(6, 16, 3);
  mlp->to(float64);
  return mlp;
}

// The mean squared error over the rows of (x, y): a mean over rows of equal weight, so that the
// average over ranks of their slices' losses is the loss of the whole batch.
Tensor mse(const Mlp& mlp, const Tensor& x, const Tensor& y) {
  Tensor difference = mlp.forward(x) - y;  // (rows, 3)
  return (difference * difference).mean();
}

std::vector<double> values(const Tensor& t) { return t.contiguous().to_vector<double>(); }

// The largest |a − b| relative to the largest |b|: two sums of the same terms in another order
// (a rank's rows, then the all-reduce) differ by rounding of the order of the largest terms, so
// an element that nearly cancels (−1.3e−5 among entries of 0.1) can differ by 1e−12 of itself.
double max_relative_difference(const Tensor& a, const Tensor& b) {
  const std::vector<double> va = values(a), vb = values(b);
  double worst = 0, scale = 1e-30;
  for (std::size_t i = 0; i < va.size(); ++i) {
    worst = std::max(worst, std::abs(va[i] - vb[i]));
    scale = std::max(scale, std::abs(vb[i]));
  }
  return worst / scale;
}

}  // namespace

TEST_CASE("the world: ranks, sizes and sums agree", "[distributed]") {
  const int world = dist::world_size();
  CHECK(dist::initialized());
  CHECK(world >= 2);
  CHECK(dist::rank() >= 0);
  CHECK(dist::rank() < world);
  CHECK(dist::all_reduce_sum(int64_t{1}) == world);
  CHECK(dist::all_reduce_max(int64_t{dist::rank()}) == world - 1);
  CHECK(dist::all_reduce_sum(0.5) == 0.5 * world);
  CHECK(dist::local_size() >= 1);
  CHECK(dist::local_rank() < dist::local_size());
  CHECK(dist::all_reduce_sum(int64_t{dist::local_size()}) == int64_t{world} * dist::local_size());
  CHECK_FALSE(dist::processor_name().empty());
}

TEST_CASE("the Environment picks Rabenseifner's algorithm for OpenMPI's non-blocking all-reduce",
    "[distributed]") {
  // Set before MPI_Init (the ctest registration removes any choice of the user's own, which the
  // Environment would keep).
  const char* algorithm = std::getenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm");
  REQUIRE(algorithm != nullptr);
  CHECK(std::string(algorithm) == "3");
}

TEST_CASE("broadcast and all_reduce_sum move tensors between ranks", "[distributed]") {
  const int rank = dist::rank(), world = dist::world_size();
  Tensor mine = full({2, 3}, static_cast<double>(rank + 1), float64);
  dist::broadcast(mine, world - 1);
  CHECK(values(mine) == std::vector<double>(6, world));

  Tensor summed = full({4}, static_cast<double>(rank), float32);
  dist::all_reduce_sum(summed);
  CHECK(values(summed) == std::vector<double>(4, world * (world - 1) / 2.0));

  Tensor wrong_size = zeros({rank == 0 ? 3 : 4}, float64);
  CHECK_THROWS_MATCHES(
      dist::broadcast(wrong_size, 0), ShapeError, WhatContains({"dist::broadcast", "elements"}));
  CHECK_THROWS_MATCHES(dist::broadcast(zeros({2, 2}).transpose(0, 1), 0), ShapeError,
      WhatContains({"dist::broadcast", "not contiguous"}));
  CHECK_THROWS_MATCHES(
      dist::broadcast(zeros({1}), world), ValueError, WhatContains({"root", "world of"}));
}

TEST_CASE("DistributedDataParallel starts every rank from rank 0's parameters", "[distributed]") {
  auto mlp = make_mlp(100 + dist::rank());  // a different initialisation on every rank
  auto rank0 = make_mlp(100);
  dist::DistributedDataParallel ddp(*mlp);
  const auto ours = mlp->named_parameters(), theirs = rank0->named_parameters();
  for (std::size_t i = 0; i < ours.size(); ++i) {
    INFO(ours[i].first);
    CHECK(values(ours[i].second) == values(theirs[i].second));
  }
}

TEST_CASE("N ranks with B/N rows each compute one process's gradient and steps for B rows",
    "[distributed]") {
  const int rank = dist::rank(), world = dist::world_size();
  const int64_t global_rows = 8 * world + 1;  // uneven: the first rank takes one row more
  Generator data(7);
  Tensor x = randn({global_rows, 6}, data, float64);  // (B, 6), the same on every rank
  Tensor y = randn({global_rows, 3}, data, float64);  // (B, 3)
  const dist::RowRange mine = dist::rows_of_rank(global_rows, rank, world);

  auto single = make_mlp(3);    // one process, the whole batch
  auto parallel = make_mlp(3);  // this rank's replica
  dist::DdpOptions small_buckets;
  small_buckets.bucket_cap_mb = 200.0 / (1 << 20);  // 200 bytes: one bucket per parameter
  dist::DistributedDataParallel ddp(*parallel, small_buckets);
  CHECK(ddp.bucket_names().size() == 4);
  CHECK(ddp.bucket_names().front() == std::vector<std::string>{"second.bias"});  // reverse order

  optim::Adam single_adam(single->parameters(), 0.01);
  optim::Adam parallel_adam(parallel->parameters(), 0.01);
  for (int step = 0; step < 5; ++step) {
    single_adam.zero_grad();
    mse(*single, x, y).backward();

    // Weighted so that the uneven slices average to the whole batch's mean: rank r's loss is
    // its rows' mean × (rows_r · N / B), and the average over ranks of those is the global mean.
    parallel_adam.zero_grad();
    const double weight = static_cast<double>(mine.size()) * world / global_rows;
    Tensor loss =
        mse(*parallel, x.narrow(0, mine.begin, mine.size()), y.narrow(0, mine.begin, mine.size())) *
        weight;
    loss.backward();
    CHECK(ddp.last_stats().buckets == 4);

    const auto a = single->named_parameters(), b = parallel->named_parameters();
    for (std::size_t i = 0; i < a.size(); ++i) {
      INFO("step " << step << ", gradient of " << a[i].first);
      CHECK(max_relative_difference(b[i].second.grad(), a[i].second.grad()) < 1e-12);
    }
    single_adam.step();
    parallel_adam.step();
  }
  const auto a = single->named_parameters(), b = parallel->named_parameters();
  for (std::size_t i = 0; i < a.size(); ++i) {
    INFO(a[i].first);
    CHECK(max_relative_difference(b[i].second, a[i].second) < 1e-12);
  }
}

TEST_CASE("ChunkedGradientSum: N ranks train one process's model bit for bit", "[distributed]") {
  const int rank = dist::rank(), world = dist::world_size();
  // Chunks of 2 rows; rank 0 holds three chunks and every other rank two (uneven on purpose,
  // so that rank 0 gathers different counts), in rank order as rows_of_rank would give them.
  const int64_t chunk_rows = 2;
  const int64_t global_chunks = 2 * world + 1;
  const int64_t global_rows = chunk_rows * global_chunks;
  const int64_t my_first_chunk = rank == 0 ? 0 : 2 * rank + 1;
  const int64_t my_chunks = rank == 0 ? 3 : 2;
  for (DType dtype : {float32, float64}) {
    INFO(dtype_name(dtype));
    Generator data(17);
    Tensor x = randn({global_rows, 6}, data, dtype);  // (B, 6), the same on every rank
    Tensor y = randn({global_rows, 3}, data, dtype);  // (B, 3)
    auto single = make_mlp(4), parallel = make_mlp(4);
    single->to(dtype);
    parallel->to(dtype);
    dist::ChunkedGradientSum single_chunks(*single, dist::ChunkedGradientSum::Scope::this_process);
    dist::ChunkedGradientSum parallel_chunks(*parallel);
    optim::Adam single_adam(single->parameters(), 0.05);
    optim::Adam parallel_adam(parallel->parameters(), 0.05);
    // One step's chunks [first, first + count) of the batch: each chunk's mean × its share.
    auto add_chunks = [&](Mlp& mlp, dist::ChunkedGradientSum& chunks, int64_t first,
                          int64_t count) {
      for (int64_t k = first; k < first + count; ++k) {
        Tensor loss = mse(mlp, x.narrow(0, k * chunk_rows, chunk_rows),
                          y.narrow(0, k * chunk_rows, chunk_rows)) *
                      (1.0 / global_chunks);
        loss.backward();
        chunks.add_chunk(loss.item());
      }
    };
    for (int step = 0; step < 5; ++step) {
      add_chunks(*single, single_chunks, 0, global_chunks);
      add_chunks(*parallel, parallel_chunks, my_first_chunk, my_chunks);
      CHECK(parallel_chunks.chunks() == my_chunks);
      const double single_loss = single_chunks.finish();
      const double parallel_loss = parallel_chunks.finish();
      CHECK(parallel_chunks.chunks() == 0);
      CHECK(parallel_loss == single_loss);  // bit for bit, not approximately
      const auto a = single->named_parameters(), b = parallel->named_parameters();
      for (std::size_t i = 0; i < a.size(); ++i) {
        INFO("step " << step << ", gradient of " << a[i].first);
        CHECK(values(b[i].second.grad()) == values(a[i].second.grad()));
      }
      single_adam.step();
      parallel_adam.step();
      single_adam.zero_grad();
      parallel_adam.zero_grad();
    }
    const auto a = single->named_parameters(), b = parallel->named_parameters();
    for (std::size_t i = 0; i < a.size(); ++i) {
      INFO(a[i].first);
      CHECK(values(b[i].second) == values(a[i].second));
    }
    // The whole batch's gradient, up to rounding: the chunked sum is a sum of the batch's mean.
    single->zero_grad();
    mse(*single, x, y).backward();
    add_chunks(*parallel, parallel_chunks, my_first_chunk, my_chunks);
    parallel_chunks.finish();
    const auto c = single->parameters(), d = parallel->parameters();
    for (std::size_t i = 0; i < c.size(); ++i)
      CHECK(max_relative_difference(d[i].grad(), c[i].grad()) < (dtype == float64 ? 1e-12 : 1e-4));
  }
}

TEST_CASE("ChunkedGradientSum refuses a chunk without gradients and a step without chunks",
    "[distributed]") {
  auto mlp = make_mlp(2);
  dist::ChunkedGradientSum chunks(*mlp);
  CHECK_THROWS_MATCHES(chunks.add_chunk(0.0), dist::DistributedError,
      WhatContains({"ChunkedGradientSum::add_chunk", "'first.weight'", "'second.bias'"}));
  CHECK_THROWS_MATCHES(chunks.finish(), dist::DistributedError,  // every rank: none added one
      WhatContains({"ChunkedGradientSum::finish", "no rank added a chunk"}));
}

TEST_CASE("one bucket or many: the same averages", "[distributed]") {
  Generator data(11 + dist::rank());  // each rank its own rows
  Tensor x = randn({5, 6}, data, float64);
  Tensor y = randn({5, 3}, data, float64);
  auto one = make_mlp(5), many = make_mlp(5);
  dist::DistributedDataParallel one_bucket(*one);
  dist::DdpOptions tiny;
  tiny.bucket_cap_mb = 1e-9;
  dist::DistributedDataParallel many_buckets(*many, tiny);
  CHECK(one_bucket.bucket_names().size() == 1);
  CHECK(many_buckets.bucket_names().size() == 4);
  mse(*one, x, y).backward();
  mse(*many, x, y).backward();
  // On 2 ranks every element's sum is one addition, a + b, whatever the bucket: the same bits. On
  // more, OpenMPI's all-reduce adds in an order that can depend on where the element sits in the
  // bucket (Rabenseifner's algorithm falls back to a ring for a bucket of fewer elements than
  // ranks, such as second.bias on 4): the same averages up to that order.
  const auto a = one->parameters(), b = many->parameters();
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (dist::world_size() == 2)
      CHECK(values(a[i].grad()) == values(b[i].grad()));
    else
      CHECK(max_relative_difference(b[i].grad(), a[i].grad()) < 1e-14);
  }
  CHECK(one_bucket.last_stats().bytes == many_buckets.last_stats().bytes);
  CHECK(one_bucket.last_stats().bytes == one->num_parameters() * 8);
}

TEST_CASE("no_sync accumulates locally; the next backward averages the sum", "[distributed]") {
  const int world = dist::world_size();
  Generator data(21 + dist::rank());
  Tensor x1 = randn({4, 6}, data, float64), y1 = randn({4, 3}, data, float64);
  Tensor x2 = randn({4, 6}, data, float64), y2 = randn({4, 3}, data, float64);
  auto mlp = make_mlp(9);
  auto local = make_mlp(9);  // the same model without DDP, to see what each rank accumulates
  dist::DistributedDataParallel ddp(*mlp);
  {
    auto no_sync = ddp.no_sync();
    mse(*mlp, x1, y1).backward();
  }
  mse(*mlp, x2, y2).backward();  // synchronised: averages both micro-batches' sum
  mse(*local, x1, y1).backward();
  mse(*local, x2, y2).backward();
  const auto a = mlp->parameters(), b = local->parameters();
  for (std::size_t i = 0; i < a.size(); ++i) {
    Tensor expected = b[i].grad().clone();
    dist::all_reduce_sum(expected);
    expected.mul_(1.0 / world);
    CHECK(max_relative_difference(a[i].grad(), expected) < 1e-12);
  }
}

TEST_CASE(
    "DistributedDataParallel refuses unused parameters and models that differ", "[distributed]") {
  auto mlp = make_mlp(1);
  dist::DistributedDataParallel ddp(*mlp);
  Tensor x = randn({2, 6}, float64);
  // Only the first layer: the second's parameters get no gradient.
  CHECK_THROWS_MATCHES(mlp->first->forward(x).sum().backward(), dist::DistributedError,
      WhatContains({"2 parameter(s) got no gradient", "'second.weight'", "requires_grad_(false)"}));
  // The next pass starts afresh.
  mlp->zero_grad();
  mse(*mlp, x, zeros({2, 3}, float64)).backward();
  CHECK(ddp.last_stats().buckets == 1);

  // Rank 1 builds a wider hidden layer than the others.
  manual_seed(0);
  Mlp different(6, dist::rank() == 1 ? 17 : 16, 3);
  if (dist::rank() == 1) {
    CHECK_THROWS_MATCHES(dist::DistributedDataParallel(different), dist::DistributedError,
        WhatContains({"rank 1's module differs from rank 0's", "first.weight [16,6]",
            "first.weight [17,6]"}));
  } else {
    CHECK_THROWS_MATCHES(dist::DistributedDataParallel(different), dist::DistributedError,
        WhatContains({"another rank's module has different parameters"}));
  }
}

TEST_CASE("the thread budget: ranks on a machine × threads within its hardware threads",
    "[distributed]") {
  const int hardware = static_cast<int>(std::thread::hardware_concurrency());
  const int per_rank = std::max(1, hardware / dist::local_size());
  if (per_rank * dist::local_size() <= hardware)
    CHECK_NOTHROW(dist::check_thread_budget(per_rank, false));
  CHECK_THROWS_MATCHES(dist::check_thread_budget(hardware + 1, false), dist::DistributedError,
      WhatContains({"ranks on this machine", "oversubscribe"}));
  CHECK_NOTHROW(dist::check_thread_budget(hardware + 1, true));
}

TEST_CASE("a backward pass that throws after its all-reduce started leaves the next pass sound",
    "[distributed]") {
  const int world = dist::world_size();
  Generator data(31 + dist::rank());
  Tensor x = randn({3, 6}, data, float64).requires_grad_();
  Tensor y = randn({3, 3}, data, float64);
  auto mlp = make_mlp(4);
  auto local = make_mlp(4);
  dist::DistributedDataParallel ddp(*mlp);
  // Every parameter's gradient is complete (and the bucket's all-reduce started) before
  // backward reaches this op, which then throws.
  Tensor fails_in_backward = make_op("fails_in_backward", x.detach(), {x},
      [](const Tensor&, const NeedsGrad&) -> Grads { throw ValueError("fails_in_backward"); });
  CHECK_THROWS_AS(mse(*mlp, fails_in_backward, y).backward(), ValueError);

  mlp->zero_grad();
  mse(*mlp, x.detach(), y).backward();
  mse(*local, x.detach(), y).backward();
  const auto a = mlp->parameters(), b = local->parameters();
  for (std::size_t i = 0; i < a.size(); ++i) {
    Tensor expected = b[i].grad().clone();
    dist::all_reduce_sum(expected);
    expected.mul_(1.0 / world);
    CHECK(max_relative_difference(a[i].grad(), expected) < 1e-12);
  }
}

TEST_CASE("buckets start their all-reduce while backward is still computing earlier layers",
    "[distributed]") {
  auto mlp = make_mlp(6);
  dist::DdpOptions tiny;
  tiny.bucket_cap_mb = 1e-9;  // one bucket per parameter
  dist::DistributedDataParallel ddp(*mlp, tiny);
  // Buckets follow reverse registration: second.bias, second.weight, first.bias, first.weight.
  // Backward completes the second layer's weight and bias (one linear node), then the first
  // layer's. When second.bias is done (this hook runs after DDP's own, registered first), the
  // second layer's two buckets are on their way while the first layer's weight gradient does not
  // exist yet.
  std::size_t started = 0;
  bool weight_gradient_existed = true;
  mlp->second->bias.register_post_accumulate_grad_hook([&](const Tensor&) {
    started = ddp.buckets_started();
    weight_gradient_existed = mlp->first->weight.grad().defined();
  });
  Generator data(41);
  mse(*mlp, randn({4, 6}, data, float64), randn({4, 3}, data, float64)).backward();
  CHECK(started == 2);
  CHECK_FALSE(weight_gradient_existed);
  CHECK(ddp.buckets_started() == 0);  // the pass is over
  CHECK(ddp.last_stats().buckets == 4);
  CHECK(ddp.last_stats().overlap_seconds >= 0);
  CHECK(ddp.last_stats().wait_seconds >= 0);
}

TEST_CASE("a parameter registered under two names is averaged once", "[distributed]") {
  struct Tied : nn::Module {
    Tied() {
      weight = register_parameter("weight", randn({3, 3}, float64).requires_grad_());
      register_parameter("alias", weight);  // the same tensor again, as tied weights are
    }
    std::string type_name() const override { return "Tied"; }
    Tensor weight;
  };
  manual_seed(8);
  Tied tied;
  dist::DistributedDataParallel ddp(tied);
  CHECK(ddp.bucket_names() == std::vector<std::vector<std::string>>{{"weight"}});
  Tensor x = full({3}, static_cast<double>(dist::rank() + 1), float64);
  matmul(tied.weight, x).sum().backward();
  // d/dW of Σ W x is x broadcast over the rows; averaged over ranks: mean of (r + 1) = (N + 1) / 2.
  CHECK(values(tied.weight.grad()) == std::vector<double>(9, (dist::world_size() + 1) / 2.0));
  CHECK(ddp.last_stats().bytes == 9 * 8);
}
