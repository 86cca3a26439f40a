#include "autograd/allocator.h"

#include <sys/mman.h>  // mmap, munmap, madvise
#include <unistd.h>    // sysconf

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <mutex>
#include <new>
#include <unordered_map>
#include <vector>

#include "autograd/error.h"

namespace ag {

namespace {

constexpr std::size_t kAlignment = 64;  // a cache line; enough for AVX-512 loads

// Under AddressSanitizer the cache starts off and no buffer comes from an arena (below), so that
// ASan sees every allocation and every free.
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kAddressSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kAddressSanitizer = true;
#else
constexpr bool kAddressSanitizer = false;
#endif
#else
constexpr bool kAddressSanitizer = false;
#endif

constexpr std::size_t kDefaultCacheLimit = kAddressSanitizer ? 0 : std::size_t{1} << 30;

// Sizes are rounded up to the alignment (aligned_alloc needs a multiple of it); 0 becomes 64.
std::size_t rounded_size(std::size_t nbytes) {
  const std::size_t padded = (nbytes + kAlignment - 1) / kAlignment * kAlignment;
  return padded == 0 ? kAlignment : padded;
}

// ---- where buffers come from: huge pages ------------------------------------------------------
//
// A pass over a tensor of many 4-KiB pages misses the TLB page after page; a 2-MiB huge page needs
// one entry of it for 512 of them. Linux backs memory with huge pages where it is advised to
// (madvise(MADV_HUGEPAGE): transparent huge pages in "madvise" mode, the default of many
// distributions) and where a whole 2-MiB page, at a 2-MiB boundary, lies inside the advised range.
// So buffers come from the system in three ways, by size:
//   - 2 MiB or more: a buffer of its own that starts at a huge page's boundary, advised. On an
//     Intel Xeon the op benchmark's rows at (32, 64, 512), whose tensors are 4 MiB, took 5–16 %
//     less time (docs/benchmarks.md).
//   - 256 KiB to 2 MiB: a slice of an arena, a 32-MiB range that starts at a huge page's boundary,
//     advised, and is handed out front to back, so that such buffers share huge pages and none is
//     rounded up. nanoGPT's tensors are of this size: its step took 7.5 % less time, for 5 % more
//     resident memory (the rest of the huge pages the arenas have touched). An arena goes back to
//     the system when its last buffer does; the tail of one too short for the next request is left
//     (untouched, it costs address space, not memory).
//   - less: aligned_alloc.
// The advice is only advice: where the kernel has no huge pages to give, a buffer is as before.
constexpr std::size_t kHugePage = std::size_t{2} << 20;
constexpr std::size_t kArenaBytes = std::size_t{32} << 20;
constexpr std::size_t kSmallestArenaBuffer = std::size_t{256} << 10;

constexpr bool kArenas = !kAddressSanitizer;

// The arenas, and the current one's free range [next, end); all of it under one mutex.
struct Arenas {
  std::mutex mutex;
  std::map<uintptr_t, std::size_t> live_buffers;  // an arena's start -> its buffers not given back
  uintptr_t current = 0, next = 0, end = 0;
  std::size_t mapped_bytes = 0;  // of the arenas mapped now

  // `size` bytes (a multiple of 64, at most a huge page) from the current arena, or from a new one
  // where it has no room; null when the system has no memory to map.
  void* take(std::size_t size) {
    std::lock_guard lock(mutex);
    if (current == 0 || end - next < size) {
      const uintptr_t start = map_arena();
      if (start == 0) return nullptr;
      live_buffers.emplace(start, 0);
      mapped_bytes += kArenaBytes;
      current = next = start;
      end = start + kArenaBytes;
    }
    void* buffer = reinterpret_cast<void*>(next);
    next += size;
    ++live_buffers[current];
    return buffer;
  }

  // Takes back a buffer of take's of `size` bytes: unmaps its arena if it was the arena's last,
  // else gives the system the pages that lie wholly inside the buffer (no address is handed out
  // twice, so they would stay resident and unused: the memory a --max-memory run counts on the
  // cache to give back). False, and nothing done, for a buffer that is not from an arena.
  bool give_back(void* buffer, std::size_t size) {
    const auto address = reinterpret_cast<uintptr_t>(buffer);
    std::lock_guard lock(mutex);
    auto arena = live_buffers.upper_bound(address);  // the first arena past the buffer
    if (arena == live_buffers.begin()) return false;
    --arena;  // the last arena that starts at or before it
    if (address >= arena->first + kArenaBytes) return false;
    if (--arena->second > 0) {
      static const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
      const uintptr_t first_page = (address + page - 1) / page * page;
      const uintptr_t past_last_page = (address + size) / page * page;
      if (past_last_page > first_page)
        madvise(reinterpret_cast<void*>(first_page), past_last_page - first_page, MADV_DONTNEED);
      return true;
    }
    munmap(reinterpret_cast<void*>(arena->first), kArenaBytes);
    mapped_bytes -= kArenaBytes;
    if (arena->first == current) current = next = end = 0;
    live_buffers.erase(arena);
    return true;
  }

  // A fresh arena's start (at a huge page's boundary, advised), or 0: a mapping one huge page
  // longer, less what lies before that boundary and after the arena.
  static uintptr_t map_arena() {
#ifdef MADV_HUGEPAGE
    const std::size_t length = kArenaBytes + kHugePage;
    void* mapped =
        mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mapped == MAP_FAILED) return 0;
    const auto first = reinterpret_cast<uintptr_t>(mapped);
    const uintptr_t start = (first + kHugePage - 1) / kHugePage * kHugePage;
    if (start > first) munmap(mapped, start - first);
    const uintptr_t after = start + kArenaBytes, last = first + length;
    if (last > after) munmap(reinterpret_cast<void*>(after), last - after);
    madvise(reinterpret_cast<void*>(start), kArenaBytes, MADV_HUGEPAGE);
    return start;
#else
    return 0;
#endif
  }
};

// Never destroyed, as the cache (below) is not.
Arenas& arenas() {
  static Arenas* const instance = new Arenas;
  return *instance;
}

// A buffer of `size` bytes (a multiple of 64) from the system, or null.
void* system_allocation(std::size_t size) {
#ifdef MADV_HUGEPAGE
  if (size >= kHugePage) {
    void* buffer = nullptr;
    if (posix_memalign(&buffer, kHugePage, size) != 0) return nullptr;
    madvise(buffer, size, MADV_HUGEPAGE);
    return buffer;
  }
  if (kArenas && size >= kSmallestArenaBuffer) return arenas().take(size);
#endif
  return std::aligned_alloc(kAlignment, size);
}

// Gives a buffer of system_allocation's (of `size` bytes) back to the system.
void system_release(void* buffer, std::size_t size) {
  if (kArenas && arenas().give_back(buffer, size)) return;
  std::free(buffer);
}

struct Cache {
  std::mutex mutex;
  std::unordered_map<std::size_t, std::vector<void*>> free_lists;  // rounded size -> free buffers
  std::size_t limit = kDefaultCacheLimit;
  AllocatorStats stats;

  // Frees every cached buffer; the caller holds the mutex.
  void release_all() {
    for (auto& [size, buffers] : free_lists)
      for (void* buffer : buffers) system_release(buffer, size);
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
  system_release(data, size);
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
  {
    std::lock_guard arenas_lock(arenas().mutex);
    stats.arena_bytes = arenas().mapped_bytes;
  }
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
