// The caching allocator (autograd/allocator.h): freed storage is reused by the next request of
// the same size, the cache keeps at most its limit, and empty_cache gives everything back.
#include <sys/mman.h>  // MADV_HUGEPAGE, mincore
#include <unistd.h>    // sysconf

#include <algorithm>
#include <catch2/catch.hpp>
#include <cerrno>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

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

// Builds with AddressSanitizer cut no buffer from an arena (allocator.cpp): ASan is to see them all.
#if defined(__SANITIZE_ADDRESS__)
#define AG_TEST_ARENAS 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define AG_TEST_ARENAS 0
#endif
#endif
#if !defined(AG_TEST_ARENAS) && defined(MADV_HUGEPAGE)
#define AG_TEST_ARENAS 1
#endif

#if AG_TEST_ARENAS
namespace {
// Whether the mapping that holds `address` is advised as one for huge pages: its VmFlags in
// /proc/self/smaps hold "hg" (madvise(MADV_HUGEPAGE)).
bool advised_huge(const void* address) {
  std::ifstream smaps("/proc/self/smaps");
  const auto target = reinterpret_cast<uintptr_t>(address);
  bool inside = false;
  for (std::string line; std::getline(smaps, line);) {
    uintptr_t begin = 0, end = 0;
    char dash = 0;
    std::istringstream range(line);
    if (range >> std::hex >> begin >> dash >> end && dash == '-') {
      inside = begin <= target && target < end;  // a mapping's first line: "begin-end perms …"
    } else if (inside && line.rfind("VmFlags:", 0) == 0) {
      return (line + " ").find(" hg ") != std::string::npos;
    }
  }
  return false;
}

// The float tensors' storage, in address order: [start, start + bytes).
std::vector<std::pair<uintptr_t, std::size_t>> address_ranges(const std::vector<Tensor>& tensors) {
  std::vector<std::pair<uintptr_t, std::size_t>> ranges;
  for (const Tensor& t : tensors)
    ranges.emplace_back(reinterpret_cast<uintptr_t>(t.data<float>()),
        static_cast<std::size_t>(t.numel()) * sizeof(float));
  std::sort(ranges.begin(), ranges.end());
  return ranges;
}
}  // namespace

TEST_CASE(
    "allocator: buffers of 256 KiB to 2 MiB are cut from huge-page arenas, and each arena "
    "goes back to the system with its last buffer",
    "[allocator]") {
  CacheLimit off(0);  // every free goes back to the system
  constexpr std::size_t kArena = std::size_t{32} << 20;
  const std::size_t arenas_before = allocator_stats().arena_bytes;
  // 40 buffers of 1 MiB and a cache line, 40 MiB: more than one arena holds.
  constexpr int64_t kFloats = (int64_t{1} << 18) + 16;
  std::vector<Tensor> buffers;
  for (int i = 0; i < 40; ++i) buffers.push_back(full({kFloats}, static_cast<double>(i)));
  CHECK(allocator_stats().arena_bytes >= arenas_before + kArena);

  const auto ranges = address_ranges(buffers);
  for (std::size_t k = 0; k < ranges.size(); ++k) {
    INFO("buffer " << k << " of the address order");
    CHECK(ranges[k].first % 64 == 0);
    if (k + 1 < ranges.size()) CHECK(ranges[k].first + ranges[k].second <= ranges[k + 1].first);
  }
  for (int i = 0; i < 40; ++i)  // each still holds its own values: no buffer overlaps another
    CHECK(sum(buffers[static_cast<std::size_t>(i)]).item() == static_cast<double>(i) * kFloats);
  // (Linux without transparent huge pages has no such advice to give.)
  if (std::ifstream("/sys/kernel/mm/transparent_hugepage/enabled")) {
    CHECK(advised_huge(buffers.front().data<float>()));
    CHECK(advised_huge(buffers.back().data<float>()));
  }

  buffers.clear();
  CHECK(allocator_stats().arena_bytes == arenas_before);  // the arenas mapped here are unmapped
}

TEST_CASE(
    "allocator: a buffer given back from an arena that stays gives its pages back", "[allocator]") {
  // Addresses in an arena are not handed out twice, so a freed buffer's pages would stay resident
  // for nothing while the arena's other buffers live: the memory a --max-memory run counts on the
  // cache to give back.
  CacheLimit off(0);
  const Tensor kept = full({int64_t{1} << 18}, 1.0);  // 1 MiB, written
  Tensor freed = full({int64_t{1} << 18}, 2.0);       // 1 MiB, written: resident
  const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const auto start = reinterpret_cast<uintptr_t>(freed.data<float>());
  const uintptr_t first = (start + page - 1) / page * page,
                  last = (start + (1u << 20)) / page * page;
  std::vector<unsigned char> resident((last - first) / page);
  REQUIRE(mincore(reinterpret_cast<void*>(first), last - first, resident.data()) == 0);
  CHECK(std::all_of(resident.begin(), resident.end(), [](unsigned char r) { return r & 1; }));
  freed = Tensor();  // back to the system
  if (mincore(reinterpret_cast<void*>(first), last - first, resident.data()) == 0) {
    // its arena stays (kept, or other buffers, live in it): the pages are no longer resident
    CHECK(std::none_of(resident.begin(), resident.end(), [](unsigned char r) { return r & 1; }));
  } else {
    CHECK(errno == ENOMEM);  // its arena was unmapped with it: given back all the same
  }
}

TEST_CASE("allocator: empty_cache gives cached arena buffers back, and their arenas with them",
    "[allocator]") {
  CacheLimit on(std::size_t{1} << 28);
  const std::size_t arenas_before = allocator_stats().arena_bytes;
  {
    std::vector<Tensor> buffers;
    for (int i = 0; i < 40; ++i) buffers.push_back(empty({int64_t{1} << 18}));  // 40 × 1 MiB
  }
  CHECK(allocator_stats().cached_bytes == std::size_t{40} << 20);  // kept, and their arenas
  CHECK(allocator_stats().arena_bytes > arenas_before);
  empty_cache();
  CHECK(allocator_stats().cached_bytes == 0);
  CHECK(allocator_stats().arena_bytes == arenas_before);
}
#endif

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
