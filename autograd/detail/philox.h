// Philox4x32-10 words for a range of counters, the loop behind Generator::fill_blocks (internal):
// num_blocks blocks of 4 words, block i from counter first + i under the key seed, written to
// words[4i .. 4i + 3]. philox_fill_blocks picks the AVX-512 loop where the CPU has it, the AVX2
// loop where it has that, and the portable one (compiled per instruction set) elsewhere; all give
// the words of philox4x32_10.
#pragma once

#include <cstdint>

namespace ag::detail {

void philox_fill_blocks(uint64_t seed, uint64_t first, uint32_t* words, int64_t num_blocks);
void philox_fill_blocks_portable(
    uint64_t seed, uint64_t first, uint32_t* words, int64_t num_blocks);
#if defined(__x86_64__)
// Only on a CPU with AVX-512F, and with AVX2.
void philox_fill_blocks_avx512(uint64_t seed, uint64_t first, uint32_t* words, int64_t num_blocks);
void philox_fill_blocks_avx2(uint64_t seed, uint64_t first, uint32_t* words, int64_t num_blocks);
#endif

}  // namespace ag::detail
