// ag's caching allocator: where tensor storage comes from.
//
// A training step allocates the same buffers step after step — the activations of the forward
// pass, the gradients of the backward pass — and frees them again. Handing each one back to the
// system and asking for it again costs more than many of the small ops that use them: large blocks
// come from mmap, and every fresh page is zeroed by the kernel on first touch. So a freed buffer
// is kept in a free list for its size (rounded up to 64 bytes) and the next request of that size
// takes it back. From the second step of a training loop on, every request is served from the
// cache: a steady-state step allocates nothing from the system (tests/autograd checks it).
//
// Buffers of 256 KiB or more are backed by 2-MiB huge pages where Linux has them to give
// (madvise(MADV_HUGEPAGE)), so that passes over large tensors do not miss the TLB page after page:
// one of 2 MiB or more starts at a huge page's boundary; smaller ones are slices of 32-MiB arenas
// that do, and share their huge pages (allocator.cpp, "where buffers come from").
//
// The cache keeps at most cache_limit() bytes of free buffers (1 GiB by default); a buffer freed
// beyond that goes back to the system. empty_cache() returns every cached buffer. Builds with
// AddressSanitizer start with a limit of 0 (no caching) and take no buffer from an arena, so that
// ASan still sees every use-after-free; set_cache_limit() turns the cache on there too (its own
// tests do).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <stdexcept>
#include <vector>

namespace ag {

struct AllocatorStats {
  uint64_t requests = 0;            // storage buffers asked for, since the process started
  uint64_t system_allocations = 0;  // of those, the ones the cache could not serve
  std::size_t in_use_bytes = 0;     // held by live storage now
  std::size_t cached_bytes = 0;     // held in the free lists now
  std::size_t peak_bytes = 0;       // the most in_use + cached ever held at once
  uint64_t requested_bytes = 0;     // bytes asked for (before rounding), since the process started
  // Mapped now for the arenas that buffers of 256 KiB to 2 MiB are cut from: those of in_use_bytes
  // and cached_bytes, and the arenas' rest, address space that is resident only where touched.
  std::size_t arena_bytes = 0;
};

AllocatorStats allocator_stats();

// Gives every cached buffer back to the system.
void empty_cache();

// The most bytes of free buffers the cache keeps; 0 turns caching off (and empties the cache).
void set_cache_limit(std::size_t bytes);
std::size_t cache_limit();

namespace detail {
// A 64-byte aligned buffer of at least `nbytes` bytes (never null: throws std::bad_alloc, also for
// more than PTRDIFF_MAX bytes, which no buffer can hold), and its release. Storage is their only
// caller; release must get the size that allocate was given.
void* allocate_storage(std::size_t nbytes);
void release_storage(void* data, std::size_t nbytes) noexcept;

// AllocatorStats::requested_bytes without the cache's lock: the profiler (autograd/profiler.h)
// reads it when a scope opens and closes, and the difference is what the scope asked for.
uint64_t bytes_requested() noexcept;

// `nbytes` uninitialised bytes from the same cache, given back when the last owner lets go: for
// what a kernel saves for its backward that is not a tensor (dropout's byte masks). When the
// system has no memory to give, an OutOfMemoryError names `op` and the `shape` the bytes are for.
std::shared_ptr<uint8_t> allocate_bytes(
    std::size_t nbytes, const char* op, const std::vector<int64_t>& shape);

// Throws the OutOfMemoryError of an allocation of `nbytes` for `shape` that failed in `op`:
//   op: out of memory: cannot allocate 1152921504606846976 bytes for shape [288230376151711744]
[[noreturn]] void fail_out_of_memory(
    const char* op, const std::vector<int64_t>& shape, std::size_t nbytes);

// Room for n values in an op's scratch vector (what it reads out of a tensor, or sums before it
// makes one), with a tensor's OutOfMemoryError when the system cannot give it: a view of 2^58
// elements over one number costs nothing until a vector of all of them is asked for.
template <class T>
void reserve_scratch(
    std::vector<T>& values, std::size_t n, const char* op, const std::vector<int64_t>& shape) {
  const std::size_t nbytes = n > SIZE_MAX / sizeof(T) ? SIZE_MAX : n * sizeof(T);
  // Beyond 2^57 bytes, more than any x86-64 or arm64 address space: no machine has it, so it is
  // not asked for (AddressSanitizer's operator new would abort the process rather than throw).
  if (nbytes > (std::size_t{1} << 57)) fail_out_of_memory(op, shape, nbytes);
  try {
    values.reserve(n);
  } catch (const std::bad_alloc&) {
    fail_out_of_memory(op, shape, nbytes);
  } catch (const std::length_error&) {
    fail_out_of_memory(op, shape, nbytes);
  }
}
}  // namespace detail

}  // namespace ag
