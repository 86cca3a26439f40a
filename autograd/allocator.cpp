#include "autograd/allocator.h"

#include <sys/mman.h>  // madvise

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <new>
#include <unordered_map>
#include <vector>

#include "autograd/error.h"

namespace ag {

namespace {

constexpr std::size_t kAlignment = 64;  // a cache line; enough for AVX-512 loads

#if defined(__SANITIZE_ADDRESS__)
constexpr std::size_t kDefaultCacheLimit = 0;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr std::size_t kDefaultCacheLimit = 0;
#else
constexpr std::size_t kDefaultCacheLimit = std::size_t{1} << 30;
#endif
#else
constexpr std::size_t kDefaultCacheLimit = std::size_t{1} << 30;
#endif

// Sizes are rounded up to the alignment (aligned_alloc needs a multiple of it); 0 becomes 64.
std::size_t rounded_size(std::size_t nbytes) {
  const std::size_t padded = (nbytes + kAlignment - 1) / kAlignment * kAlignment;
  return padded == 0 ? kAlignment : padded;
}

// A buffer of `size` bytes from the system, or null. One of at least a huge page (2 MiB) starts at
// a huge page's boundary and is advised to the kernel as one to back with huge pages
// (MADV_HUGEPAGE: transparent huge pages in Linux's "madvise" mode, the default of many
// distributions). A pass over a 4-MiB tensor then needs 2 entries of the TLB instead of 1024, and
// an op reading two tensors and writing a third no longer misses it page after page: on an Intel
// Xeon, the op benchmark's rows at (32, 64, 512), whose tensors are 4 MiB, took 5–16 % less time
// (exp 5 %, sigmoid and gelu 11 %, layer_norm 16 %: docs/benchmarks.md). Only whole huge pages
// inside the buffer get one; nothing is rounded up, so no memory is added. The advice is only
// advice: where the kernel has no huge pages to give, the buffer is as before.
void* system_allocation(std::size_t size) {
#ifdef MADV_HUGEPAGE
  constexpr std::size_t kHugePage = std::size_t{2} << 20;
  if (size >= kHugePage) {
    void* buffer = nullptr;
    if (posix_memalign(&buffer, kHugePage, size) != 0) return nullptr;
    madvise(buffer, size, MADV_HUGEPAGE);
    return buffer;
  }
#endif
  return std::aligned_alloc(kAlignment, size);
}

struct Cache {
  std::mutex mutex;
  std::unordered_map<std::size_t, std::vector<void*>> free_lists;  // rounded size -> free buffers
  std::size_t limit = kDefaultCacheLimit;
  AllocatorStats stats;

  // Frees every cached buffer; the caller holds the mutex.
  void release_all() {
    for (auto& [size, buffers] : free_lists)
      for (void* buffer : buffers) std::free(buffer);
    free_lists.clear();
    stats.cached_bytes = 0;
  }
};

// Never destroyed: storage of static tensors may be released after main returns.
Cache& cache() {
  static Cache* const instance = new Cache;
  return *instance;
}

// Every byte asked of allocate_storage, by any thread: a running count the profiler subtracts.
std::atomic<uint64_t> requested_bytes{0};

}  // namespace

void* detail::allocate_storage(std::size_t nbytes) {
  // No object may be larger than PTRDIFF_MAX bytes (pointer differences must fit); refusing them
  // here also keeps rounded_size from wrapping around.
  if (nbytes > static_cast<std::size_t>(PTRDIFF_MAX)) throw std::bad_alloc();
  const std::size_t size = rounded_size(nbytes);
  requested_bytes.fetch_add(nbytes, std::memory_order_relaxed);
  Cache& c = cache();
  {
    std::lock_guard lock(c.mutex);
    ++c.stats.requests;
    c.stats.in_use_bytes += size;
    auto it = c.free_lists.find(size);
    if (it != c.free_lists.end() && !it->second.empty()) {
      void* buffer = it->second.back();
      it->second.pop_back();
      c.stats.cached_bytes -= size;
      return buffer;
    }
    ++c.stats.system_allocations;
    c.stats.peak_bytes = std::max(c.stats.peak_bytes, c.stats.in_use_bytes + c.stats.cached_bytes);
  }
  void* buffer = system_allocation(size);
  if (buffer == nullptr) {
    std::lock_guard lock(c.mutex);
    c.stats.in_use_bytes -= size;
    --c.stats.system_allocations;
    throw std::bad_alloc();
  }
  return buffer;
}

void detail::release_storage(void* data, std::size_t nbytes) noexcept {
  if (data == nullptr) return;
  const std::size_t size = rounded_size(nbytes);
  Cache& c = cache();
  {
    std::lock_guard lock(c.mutex);
    c.stats.in_use_bytes -= size;
    if (c.stats.cached_bytes + size <= c.limit) {
      try {
        c.free_lists[size].push_back(data);
        c.stats.cached_bytes += size;
        return;
      } catch (...) {  // no memory for the list entry: give the buffer back instead
      }
    }
  }
  std::free(data);
}

std::shared_ptr<uint8_t> detail::allocate_bytes(
    std::size_t nbytes, const char* op, const std::vector<int64_t>& shape) {
  try {
    auto* data = static_cast<uint8_t*>(allocate_storage(nbytes));
    // (Should the control block's allocation throw, shared_ptr releases `data` with the deleter.)
    return std::shared_ptr<uint8_t>(data, [nbytes](uint8_t* p) { release_storage(p, nbytes); });
  } catch (const std::bad_alloc&) {
    fail_out_of_memory(op, shape, nbytes);
  }
}

void detail::fail_out_of_memory(
    const char* op, const std::vector<int64_t>& shape, std::size_t nbytes) {
  fail<OutOfMemoryError>(
      op, ": out of memory: cannot allocate ", nbytes, " bytes for shape ", shape_str(shape));
}

uint64_t detail::bytes_requested() noexcept {
  return requested_bytes.load(std::memory_order_relaxed);
}

AllocatorStats allocator_stats() {
  std::lock_guard lock(cache().mutex);
  AllocatorStats stats = cache().stats;
  stats.requested_bytes = requested_bytes.load(std::memory_order_relaxed);
  return stats;
}

void empty_cache() {
  std::lock_guard lock(cache().mutex);
  cache().release_all();
}

void set_cache_limit(std::size_t bytes) {
  std::lock_guard lock(cache().mutex);
  cache().limit = bytes;
  if (cache().stats.cached_bytes > bytes) cache().release_all();
}

std::size_t cache_limit() {
  std::lock_guard lock(cache().mutex);
  return cache().limit;
}

}  // namespace ag
