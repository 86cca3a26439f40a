#include "autograd/generator.h"

#include <algorithm>

#include "autograd/detail/philox.h"
#include "autograd/detail/target_clones.h"
#include "autograd/error.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace ag {

namespace {
// Philox4x32 constants (Random123): the round multipliers and the Weyl key increments.
constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;

inline void mulhilo(uint32_t a, uint32_t b, uint32_t& hi, uint32_t& lo) {
  uint64_t product = static_cast<uint64_t>(a) * b;
  hi = static_cast<uint32_t>(product >> 32);
  lo = static_cast<uint32_t>(product);
}
}  // namespace

std::array<uint32_t, 4> philox4x32_10(std::array<uint32_t, 4> c, std::array<uint32_t, 2> key) {
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      key[0] += kWeyl0;
      key[1] += kWeyl1;
    }
    uint32_t hi0, lo0, hi1, lo1;
    mulhilo(kMul0, c[0], hi0, lo0);
    mulhilo(kMul1, c[2], hi1, lo1);
    c = {hi1 ^ c[1] ^ key[0], lo1, hi0 ^ c[3] ^ key[1], lo0};
  }
  return c;
}

std::array<uint32_t, 4> Generator::block(uint64_t counter) const {
  // Counter = (counter low, counter high, 0, 0); key = (seed low, seed high).
  return philox4x32_10(
      {static_cast<uint32_t>(counter), static_cast<uint32_t>(counter >> 32), 0u, 0u},
      {static_cast<uint32_t>(state_.seed), static_cast<uint32_t>(state_.seed >> 32)});
}

namespace detail {

#if defined(__x86_64__)
#define AG_PHILOX_AVX512 1
// GCC 12's avx512fintrin.h warns about its own _mm512_undefined values (-Wmaybe-uninitialized, a
// warning clang does not have).
#pragma GCC diagnostic push
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
// philox4x32_10 on 16 counters at once in AVX-512 registers, one register per word of the state,
// two such groups side by side: the same words as the portable loop below, 3.5× as fast (0.38
// against 1.36 ns a word on the benchmark machine's Zen 4; GCC vectorises that loop's 32 × 32 →
// 64-bit products poorly). One group alone takes 0.49 ns a word: with the masked shuffles below
// a round has few enough instructions that the chain of its dependent multiplies sets the pace.
// (hi, lo) of m · c in each of 16 lanes: vpmuludq multiplies the even lanes into 64-bit products,
// so the odd lanes are shifted down and multiplied too. Each 64-bit product's halves sit in lanes
// 2i (low) and 2i + 1 (high); one masked shuffle each moves them back in order: hi takes the high
// halves of the even products down a lane and keeps those of the odd ones in place, lo the reverse.
__attribute__((target("avx512f"))) inline void mulhilo16(
    __m512i m, __m512i c, __m512i& hi, __m512i& lo) {
  const __m512i even = _mm512_mul_epu32(c, m);                        // lanes 0, 2, ...: 64 bits
  const __m512i odd = _mm512_mul_epu32(_mm512_srli_epi64(c, 32), m);  // lanes 1, 3, ...
  // _MM_PERM_DDBB: lane 2i takes lane 2i + 1; _MM_PERM_CCAA: lane 2i + 1 takes lane 2i.
  hi = _mm512_mask_shuffle_epi32(odd, 0x5555, even, _MM_PERM_DDBB);
  lo = _mm512_mask_shuffle_epi32(even, 0xAAAA, odd, _MM_PERM_CCAA);
}

// The counters start, start + 1, ..., start + 15 as Philox's four state words, one register each:
// (counter low, counter high, 0, 0).
__attribute__((target("avx512f"), always_inline)) inline void philox_counters16(
    uint64_t start, __m512i (&c)[4]) {
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512i low = _mm512_add_epi32(_mm512_set1_epi32(static_cast<int>(start)), lane);
  // The high word is one more in the lanes whose low word wrapped past 2^32.
  const __mmask16 carried = _mm512_cmplt_epu32_mask(low, lane);
  const __m512i high = _mm512_set1_epi32(static_cast<int>(start >> 32));
  c[0] = low;
  c[1] = _mm512_mask_add_epi32(high, carried, high, _mm512_set1_epi32(1));
  c[2] = _mm512_setzero_si512();
  c[3] = _mm512_setzero_si512();
}

// The ten rounds of philox4x32_10 on G groups of 16 counters. The rounds of one group are a chain
// of dependent multiplies; G groups side by side let the CPU overlap G chains.
template <int G>
__attribute__((target("avx512f"), always_inline)) inline void philox_rounds16(
    uint64_t seed, __m512i (&c)[G][4]) {
  const __m512i mul0 = _mm512_set1_epi32(static_cast<int>(kMul0));
  const __m512i mul1 = _mm512_set1_epi32(static_cast<int>(kMul1));
  uint32_t key0 = static_cast<uint32_t>(seed), key1 = static_cast<uint32_t>(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      key0 += kWeyl0;
      key1 += kWeyl1;
    }
    const __m512i k0 = _mm512_set1_epi32(static_cast<int>(key0));
    const __m512i k1 = _mm512_set1_epi32(static_cast<int>(key1));
    for (int g = 0; g < G; ++g) {
      __m512i hi0, lo0, hi1, lo1;
      mulhilo16(mul0, c[g][0], hi0, lo0);
      mulhilo16(mul1, c[g][2], hi1, lo1);
      const __m512i next0 = _mm512_xor_si512(_mm512_xor_si512(hi1, c[g][1]), k0);
      const __m512i next2 = _mm512_xor_si512(_mm512_xor_si512(hi0, c[g][3]), k1);
      c[g][1] = lo1;
      c[g][3] = lo0;
      c[g][0] = next0;
      c[g][2] = next2;
    }
  }
}

// Stores the first `count` (≤ 16) of the 16 blocks in c (c[w] holds word w of each block) with
// each block's four words together: a 4 × 16 transpose in registers. Within each 128-bit lane
// the unpacks put block 4L + k's words together in register k; the lane shuffles then gather
// blocks 4r .. 4r + 3 into register r.
__attribute__((target("avx512f"), always_inline)) inline void philox_store16(
    const __m512i (&c)[4], uint32_t* words, int64_t count) {
  const __m512i t0 = _mm512_unpacklo_epi32(c[0], c[1]), t1 = _mm512_unpackhi_epi32(c[0], c[1]);
  const __m512i t2 = _mm512_unpacklo_epi32(c[2], c[3]), t3 = _mm512_unpackhi_epi32(c[2], c[3]);
  const __m512i u0 = _mm512_unpacklo_epi64(t0, t2), u1 = _mm512_unpackhi_epi64(t0, t2);
  const __m512i u2 = _mm512_unpacklo_epi64(t1, t3), u3 = _mm512_unpackhi_epi64(t1, t3);
  const __m512i v0 = _mm512_shuffle_i32x4(u0, u1, 0x44), v1 = _mm512_shuffle_i32x4(u2, u3, 0x44);
  const __m512i v2 = _mm512_shuffle_i32x4(u0, u1, 0xEE), v3 = _mm512_shuffle_i32x4(u2, u3, 0xEE);
  const __m512i blocks[4] = {_mm512_shuffle_i32x4(v0, v1, 0x88), _mm512_shuffle_i32x4(v0, v1, 0xDD),
      _mm512_shuffle_i32x4(v2, v3, 0x88), _mm512_shuffle_i32x4(v2, v3, 0xDD)};
  for (int r = 0; r < 4 && 4 * r < count; ++r) {
    const int64_t in_register = std::min<int64_t>(4, count - 4 * r);  // blocks 4r, 4r + 1, ...
    const __mmask16 lanes = static_cast<__mmask16>((1u << (4 * in_register)) - 1);
    _mm512_mask_storeu_epi32(words + 16 * r, lanes, blocks[r]);
  }
}

__attribute__((target("avx512f"))) void philox_fill_blocks_avx512(
    uint64_t seed, uint64_t first, uint32_t* words, int64_t num_blocks) {
  int64_t base = 0;
  for (; base + 32 <= num_blocks; base += 32) {  // two groups of 16 side by side
    __m512i c[2][4];
    philox_counters16(first + static_cast<uint64_t>(base), c[0]);
    philox_counters16(first + static_cast<uint64_t>(base + 16), c[1]);
    philox_rounds16<2>(seed, c);
    philox_store16(c[0], words + 4 * base, 16);
    philox_store16(c[1], words + 4 * (base + 16), 16);
  }
  for (; base < num_blocks; base += 16) {
    __m512i c[1][4];
    philox_counters16(first + static_cast<uint64_t>(base), c[0]);
    philox_rounds16<1>(seed, c);
    philox_store16(c[0], words + 4 * base, std::min<int64_t>(16, num_blocks - base));
  }
}

// The same loop on AVX2 (8 lanes a register, no masks): the AVX-512 loop's scheme, with blends
// where it has masked shuffles and a signed compare on flipped sign bits where it has an unsigned
// one. GCC's vectorisation of the portable loop ran at 2.1–2.3 ns a word on Zen 3.
__attribute__((target("avx2"))) inline void mulhilo8(
    __m256i m, __m256i c, __m256i& hi, __m256i& lo) {
  const __m256i even = _mm256_mul_epu32(c, m);                        // lanes 0, 2, ...: 64 bits
  const __m256i odd = _mm256_mul_epu32(_mm256_srli_epi64(c, 32), m);  // lanes 1, 3, ...
  // _MM_SHUFFLE(3, 3, 1, 1): lane 2i takes lane 2i + 1; (2, 2, 0, 0): lane 2i + 1 takes lane 2i.
  hi = _mm256_blend_epi32(_mm256_shuffle_epi32(even, _MM_SHUFFLE(3, 3, 1, 1)), odd, 0xAA);
  lo = _mm256_blend_epi32(even, _mm256_shuffle_epi32(odd, _MM_SHUFFLE(2, 2, 0, 0)), 0xAA);
}

// The counters start, start + 1, ..., start + 7 as Philox's four state words.
__attribute__((target("avx2"), always_inline)) inline void philox_counters8(
    uint64_t start, __m256i (&c)[4]) {
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i low = _mm256_add_epi32(_mm256_set1_epi32(static_cast<int>(start)), lane);
  // The high word is one more in the lanes whose low word wrapped past 2^32 (low < lane as
  // unsigned numbers: as signed ones once both sign bits are flipped); the compare gives −1 there.
  const __m256i sign = _mm256_set1_epi32(static_cast<int>(0x80000000u));
  const __m256i carried =
      _mm256_cmpgt_epi32(_mm256_xor_si256(lane, sign), _mm256_xor_si256(low, sign));
  c[0] = low;
  c[1] = _mm256_sub_epi32(_mm256_set1_epi32(static_cast<int>(start >> 32)), carried);
  c[2] = _mm256_setzero_si256();
  c[3] = _mm256_setzero_si256();
}

// The ten rounds on G groups of 8 counters (as philox_rounds16).
template <int G>
__attribute__((target("avx2"), always_inline)) inline void philox_rounds8(
    uint64_t seed, __m256i (&c)[G][4]) {
  const __m256i mul0 = _mm256_set1_epi32(static_cast<int>(kMul0));
  const __m256i mul1 = _mm256_set1_epi32(static_cast<int>(kMul1));
  uint32_t key0 = static_cast<uint32_t>(seed), key1 = static_cast<uint32_t>(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      key0 += kWeyl0;
      key1 += kWeyl1;
    }
    const __m256i k0 = _mm256_set1_epi32(static_cast<int>(key0));
    const __m256i k1 = _mm256_set1_epi32(static_cast<int>(key1));
    for (int g = 0; g < G; ++g) {
      __m256i hi0, lo0, hi1, lo1;
      mulhilo8(mul0, c[g][0], hi0, lo0);
      mulhilo8(mul1, c[g][2], hi1, lo1);
      const __m256i next0 = _mm256_xor_si256(_mm256_xor_si256(hi1, c[g][1]), k0);
      const __m256i next2 = _mm256_xor_si256(_mm256_xor_si256(hi0, c[g][3]), k1);
      c[g][1] = lo1;
      c[g][3] = lo0;
      c[g][0] = next0;
      c[g][2] = next2;
    }
  }
}

// Stores the first `count` (≤ 8) of the 8 blocks in c with each block's four words together: a
// 4 × 8 transpose. Within each 128-bit half the unpacks put blocks k and 4 + k in register k; the
// half swaps then pair blocks 2r and 2r + 1 in register r.
__attribute__((target("avx2"), always_inline)) inline void philox_store8(
    const __m256i (&c)[4], uint32_t* words, int64_t count) {
  const __m256i t0 = _mm256_unpacklo_epi32(c[0], c[1]), t1 = _mm256_unpackhi_epi32(c[0], c[1]);
  const __m256i t2 = _mm256_unpacklo_epi32(c[2], c[3]), t3 = _mm256_unpackhi_epi32(c[2], c[3]);
  const __m256i u0 = _mm256_unpacklo_epi64(t0, t2), u1 = _mm256_unpackhi_epi64(t0, t2);
  const __m256i u2 = _mm256_unpacklo_epi64(t1, t3), u3 = _mm256_unpackhi_epi64(t1, t3);
  const __m256i blocks[4] = {_mm256_permute2x128_si256(u0, u1, 0x20),
      _mm256_permute2x128_si256(u2, u3, 0x20), _mm256_permute2x128_si256(u0, u1, 0x31),
      _mm256_permute2x128_si256(u2, u3, 0x31)};
  if (count == 8) {
    for (int r = 0; r < 4; ++r)
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(words + 8 * r), blocks[r]);
    return;
  }
  alignas(32) uint32_t all[32];
  for (int r = 0; r < 4; ++r)
    _mm256_store_si256(reinterpret_cast<__m256i*>(all + 8 * r), blocks[r]);
  std::copy(all, all + 4 * count, words);
}

__attribute__((target("avx2"))) void philox_fill_blocks_avx2(
    uint64_t seed, uint64_t first, uint32_t* words, int64_t num_blocks) {
  int64_t base = 0;
  for (; base + 16 <= num_blocks; base += 16) {  // two groups of 8 side by side
    __m256i c[2][4];
    philox_counters8(first + static_cast<uint64_t>(base), c[0]);
    philox_counters8(first + static_cast<uint64_t>(base + 8), c[1]);
    philox_rounds8<2>(seed, c);
    philox_store8(c[0], words + 4 * base, 8);
    philox_store8(c[1], words + 4 * (base + 8), 8);
  }
  for (; base < num_blocks; base += 8) {
    __m256i c[1][4];
    philox_counters8(first + static_cast<uint64_t>(base), c[0]);
    philox_rounds8<1>(seed, c);
    philox_store8(c[0], words + 4 * base, std::min<int64_t>(8, num_blocks - base));
  }
}
#pragma GCC diagnostic pop
#endif

// Generator::fill_blocks's loop, a free function with external linkage so that it can have one
// copy per instruction set (clang 14 does not multiversion member functions).
AG_TARGET_CLONES void philox_fill_blocks_portable(
    uint64_t seed, uint64_t first, uint32_t* words, int64_t num_blocks) {
  // philox4x32_10 above, on kLanes counters at once, one array per word of the state
  // (struct of arrays), so each round is a loop over lanes the compiler turns into SIMD code.
  constexpr int64_t kLanes = 32;
  const uint32_t seed_lo = static_cast<uint32_t>(seed), seed_hi = static_cast<uint32_t>(seed >> 32);
  for (int64_t base = 0; base < num_blocks; base += kLanes) {
    uint32_t c0[kLanes], c1[kLanes], c2[kLanes], c3[kLanes];
    for (int64_t i = 0; i < kLanes; ++i) {
      const uint64_t counter = first + static_cast<uint64_t>(base + i);
      c0[i] = static_cast<uint32_t>(counter);
      c1[i] = static_cast<uint32_t>(counter >> 32);
      c2[i] = 0;
      c3[i] = 0;
    }
    uint32_t key0 = seed_lo, key1 = seed_hi;
    for (int round = 0; round < 10; ++round) {
      if (round > 0) {
        key0 += kWeyl0;
        key1 += kWeyl1;
      }
      // Not unrolled, so that GCC vectorises the loop instead (pmuludq: 2.4x faster at SSE2).
#pragma GCC unroll 1
      for (int64_t i = 0; i < kLanes; ++i) {
        const uint64_t product0 = static_cast<uint64_t>(kMul0) * c0[i];
        const uint64_t product1 = static_cast<uint64_t>(kMul1) * c2[i];
        const uint32_t next0 = static_cast<uint32_t>(product1 >> 32) ^ c1[i] ^ key0;
        const uint32_t next2 = static_cast<uint32_t>(product0 >> 32) ^ c3[i] ^ key1;
        c1[i] = static_cast<uint32_t>(product1);
        c3[i] = static_cast<uint32_t>(product0);
        c0[i] = next0;
        c2[i] = next2;
      }
    }
    const int64_t lanes = std::min(kLanes, num_blocks - base);
    for (int64_t i = 0; i < lanes; ++i) {
      uint32_t* out = words + 4 * (base + i);
      out[0] = c0[i];
      out[1] = c1[i];
      out[2] = c2[i];
      out[3] = c3[i];
    }
  }
}

// The AVX-512 loop where the CPU has it, else the AVX2 loop where it has that (checked once), the
// portable one elsewhere.
void philox_fill_blocks(uint64_t seed, uint64_t first, uint32_t* words, int64_t num_blocks) {
#ifdef AG_PHILOX_AVX512
  static const bool has_avx512 = __builtin_cpu_supports("avx512f");
  static const bool has_avx2 = __builtin_cpu_supports("avx2");
  if (has_avx512) return philox_fill_blocks_avx512(seed, first, words, num_blocks);
  if (has_avx2) return philox_fill_blocks_avx2(seed, first, words, num_blocks);
#endif
  philox_fill_blocks_portable(seed, first, words, num_blocks);
}

}  // namespace detail

void Generator::fill_blocks(uint64_t first, uint32_t* words, int64_t num_blocks) const {
  detail::philox_fill_blocks(state_.seed, first, words, num_blocks);
}

uint64_t Generator::next_u64() {
  auto words = block(reserve_blocks(1));
  return (static_cast<uint64_t>(words[0]) << 32) | words[1];
}

double Generator::next_double() {
  auto words = block(reserve_blocks(1));
  return detail::uniform_double(words[0], words[1]);
}

int64_t Generator::randint(int64_t low, int64_t high) {
  if (high <= low) fail<ValueError>("randint: empty range [", low, ", ", high, ")");
  // Rejection sampling: accept draws below the largest multiple of the range size.
  uint64_t range = static_cast<uint64_t>(high) - static_cast<uint64_t>(low);
  uint64_t limit = UINT64_MAX - UINT64_MAX % range;
  uint64_t draw;
  do draw = next_u64();
  while (draw >= limit);
  return low + static_cast<int64_t>(draw % range);
}

Generator& default_generator() {
  static Generator generator(0);
  return generator;
}

void manual_seed(uint64_t seed) { default_generator().manual_seed(seed); }

}  // namespace ag
