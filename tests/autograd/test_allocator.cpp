// The caching allocator (autograd/allocator.h): freed storage is reused by the next request of
// the same size, the cache keeps at most its limit, and empty_cache gives everything back.
#include <sys/mman.h>  // MADV_HUGEPAGE

#include <catch2/catch.hpp>
#include <cstdint>

#include "autograd/allocator.h"
#include "autograd/autograd.h"
#include "autograd/ops.h"

using namespace ag;

namespace {
// Turns the cache on (AddressSanitizer builds start with it off) and restores the limit after.
struct CacheLimit {
  explicit CacheLimit(std::size_t bytes) : previous(cache_limit()) {
    empty_cache();
    set_cache_limit(bytes);
  }
  ~CacheLimit() {
    empty_cache();
    set_cache_limit(previous);
  }
  std::size_t previous;
};
}  // namespace

TEST_CASE("allocator: a freed buffer serves the next request of its size", "[allocator]") {
  CacheLimit on(std::size_t{1} << 24);
  const void* first_data = nullptr;
  {
    Tensor a = zeros({100, 7});  // 2800 bytes, rounded up to 2816
    first_data = a.data<float>();
  }
  const AllocatorStats before = allocator_stats();
  CHECK(before.cached_bytes == 2816);
  Tensor b = ones({7, 100});  // the same size: the cached buffer, not a new one
  const AllocatorStats after = allocator_stats();
  CHECK(b.data<float>() == first_data);
  CHECK(after.requests == before.requests + 1);
  CHECK(after.system_allocations == before.system_allocations);
  CHECK(after.cached_bytes == 0);
  CHECK(b.sum().item() == 700.0);  // the reused buffer holds the new values

  const uint64_t system_before_c = allocator_stats().system_allocations;
  Tensor c = zeros({100, 8});  // a size the cache does not hold: from the system
  CHECK(allocator_stats().system_allocations == system_before_c + 1);
}

TEST_CASE(
    "allocator: a buffer of a huge page or more starts at a huge page's boundary", "[allocator]") {
  // So that the kernel can back it with 2-MiB pages (allocator.cpp, system_allocation); smaller
  // buffers keep the cache line's alignment. Straight from the system: the cache off.
  CacheLimit off(0);
  constexpr uintptr_t kHugePage = uintptr_t{2} << 20, kLine = 64;
#ifdef MADV_HUGEPAGE  // (Linux)
  for (const int64_t elements : {int64_t{1} << 19, (int64_t{1} << 20) + 3, int64_t{3} << 20}) {
    INFO(elements << " floats");
    const Tensor t = empty({elements});
    const auto address = reinterpret_cast<uintptr_t>(t.data<float>());
    CHECK(address % kHugePage == 0);
  }
#else
  (void)kHugePage;
#endif
  const Tensor small = empty({(int64_t{1} << 19) - 16});  // 16 floats short of 2 MiB
  CHECK(reinterpret_cast<uintptr_t>(small.data<float>()) % kLine == 0);
}

TEST_CASE("allocator: the cache keeps at most its limit, empty_cache frees it all", "[allocator]") {
  CacheLimit on(4096);
  { Tensor a = zeros({512}), b = zeros({512}), c = zeros({512}); }  // 3 × 2048 bytes freed
  CHECK(allocator_stats().cached_bytes == 4096);  // two kept, the third given back
  empty_cache();
  CHECK(allocator_stats().cached_bytes == 0);

  { Tensor a = zeros({512}); }
  CHECK(allocator_stats().cached_bytes == 2048);
  set_cache_limit(0);  // off: what is cached goes back, and nothing more is kept
  CHECK(allocator_stats().cached_bytes == 0);
  { Tensor a = zeros({512}); }
  CHECK(allocator_stats().cached_bytes == 0);
}

TEST_CASE(
    "allocator: a training loop's steady state allocates nothing from the system", "[allocator]") {
  CacheLimit on(std::size_t{1} << 28);
  // y = tanh(x·W1)·W2, mean squared error, one SGD step written out: every step allocates the
  // same buffers, so after the first step the cache serves them all.
  Generator gen(5);
  Tensor W1 = randn({8, 16}, gen), W2 = randn({16, 1}, gen);
  W1.requires_grad_();
  W2.requires_grad_();
  const Tensor x = randn({32, 8}, gen), target = randn({32, 1}, gen);
  auto step = [&] {
    Tensor loss = mean(pow(sub(matmul(tanh(matmul(x, W1)), W2), target), 2.0));
    W1.zero_grad();
    W2.zero_grad();
    loss.backward();
    NoGradGuard no_grad;
    W1.add_(W1.grad(), -0.01);
    W2.add_(W2.grad(), -0.01);
  };
  step();
  step();
  const AllocatorStats before = allocator_stats();
  for (int i = 0; i < 3; ++i) step();
  const AllocatorStats after = allocator_stats();
  CHECK(after.requests > before.requests + 30);  // the steps did allocate storage...
  CHECK(after.system_allocations == before.system_allocations);  // ...all of it from the cache
  CHECK(after.in_use_bytes == before.in_use_bytes);              // and gave it back
}
