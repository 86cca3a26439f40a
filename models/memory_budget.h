// The memory a run may take: an estimate's parts, the memory the machine can give, a size the user
// types ("4G"), and the check that refuses a run above its limit with the estimate in the message.
// Nothing here knows a model: models/seq2seq_memory.h estimates the seq2seq model's memory and
// models/lm_file.h the language model's, both as a MemoryEstimate.
#pragma once

#include <cstdint>
#include <string>

namespace ag {

// An estimate of the memory a run takes, part by part, in bytes.
struct MemoryEstimate {
  double weights = 0, gradients = 0, optimizer = 0, activations = 0, evaluation = 0, saving = 0;
  double data = 0;  // the inputs read and made into batches: a text, sentence pairs, vocabularies
  double total() const {
    return weights + gradients + optimizer + activations + evaluation + saving + data;
  }
  // "2.7 GiB (weights 12 MiB, gradients …, Adam moments …, activations …, …)": the parts above 0.
  std::string describe() const;
};

// The memory the machine can give this process: MemAvailable of /proc/meminfo (the kernel's
// estimate of what can be allocated without swapping), or where there is none, the free
// physical pages (sysconf) — and no more than the control group's memory limit less its usage
// (a container's limit; cgroup v2 memory.max, or v1 memory.limit_in_bytes).
uint64_t available_memory_bytes();

// "512M", "4G", "1.5GiB", "100000": bytes, with K, M, G, T for powers of 1024 (an optional
// "B" or "iB" after them). Throws ValueError naming the text for anything else, for 0, and for
// more than 2^62 bytes.
uint64_t parse_byte_size(const std::string& text);
// 1536 -> "1.5 KiB".
std::string format_bytes(double bytes);

// Throws ValueError "<what> needs about <estimate>, more than <limit> (<limit_source>)" when
// the estimate exceeds the limit.
void check_memory(const MemoryEstimate& estimate, uint64_t limit, const std::string& what,
    const std::string& limit_source);

// ag's caching allocator (autograd/allocator.h) keeps freed buffers for reuse, up to 1 GiB by
// default: memory that no estimate counts. A run that fits its limit gives the cache only what
// the limit leaves above the estimate (never more than the cache's limit already is), so that the
// process stays within the limit: beam search's many buffer sizes (rows × steps so far) kept
// 360 MB in the cache of a run estimated at 41 MiB.
void limit_cache_to_headroom(const MemoryEstimate& estimate, uint64_t limit);

}  // namespace ag
