// ag::Generator — the one source of randomness in ag (initialisation, dropout, data).
//
// It is the counter-based Philox4x32-10 generator (Salmon et al., "Parallel random numbers: as
// easy as 1, 2, 3", SC 2011), the one PyTorch uses on GPUs. Its whole state is two integers — the
// seed and a counter of 128-bit blocks already used — so it can be read, saved in a checkpoint and
// restored exactly, and block i can be computed without computing blocks 0..i-1, so a tensor can
// be filled in parallel with the same result on any number of threads.
//
// The same seed gives the same numbers on every machine: the distributions below are written out
// here instead of using <random>'s, whose algorithms differ between standard libraries.
#pragma once

#include <array>
#include <cstdint>

namespace ag {

// One Philox4x32-10 block: 10 rounds of the bijection keyed by `key`, applied to `counter`.
std::array<uint32_t, 4> philox4x32_10(std::array<uint32_t, 4> counter, std::array<uint32_t, 2> key);

struct GeneratorState {
  uint64_t seed = 0;
  uint64_t offset = 0;  // 128-bit Philox blocks consumed so far
  bool operator==(const GeneratorState&) const = default;
};

class Generator {
 public:
  explicit Generator(uint64_t seed = 0) : state_{seed, 0} {}

  // Restarts the stream of `seed` from its beginning.
  void manual_seed(uint64_t seed) { state_ = {seed, 0}; }
  uint64_t seed() const { return state_.seed; }

  GeneratorState state() const { return state_; }
  void set_state(const GeneratorState& state) { state_ = state; }

  // The four 32-bit words of block `counter` under this generator's seed (does not advance).
  std::array<uint32_t, 4> block(uint64_t counter) const;

  // Blocks first, first + 1, ..., first + num_blocks − 1 into words[0 .. 4·num_blocks): the same
  // words as block() gives one at a time, computed 32 blocks side by side so that the loop
  // vectorises (does not advance).
  void fill_blocks(uint64_t first, uint32_t* words, int64_t num_blocks) const;

  // Reserves `num_blocks` consecutive blocks and returns the first counter; a tensor fill uses
  // block (first + i / 4) word (i % 4) for its i-th 32-bit word.
  uint64_t reserve_blocks(uint64_t num_blocks) {
    uint64_t first = state_.offset;
    state_.offset += num_blocks;
    return first;
  }

  // Single draws (each uses one block).
  uint64_t next_u64();
  double next_double();                        // uniform in [0, 1)
  int64_t randint(int64_t low, int64_t high);  // uniform integer in [low, high), unbiased

 private:
  GeneratorState state_;
};

// The process-wide generator used when an op is not given one.
Generator& default_generator();
// Seeds the default generator: ag::manual_seed(0) at the top of a program makes it reproducible.
void manual_seed(uint64_t seed);

namespace detail {
// Raw bits to floating point: 24 random bits give a float in [0, 1), 53 bits a double in [0, 1).
inline float uniform_float(uint32_t word) { return static_cast<float>(word >> 8) * 0x1.0p-24f; }
inline double uniform_double(uint32_t hi, uint32_t lo) {
  uint64_t bits = ((static_cast<uint64_t>(hi) << 32) | lo) >> 11;
  return static_cast<double>(bits) * 0x1.0p-53;
}
}  // namespace detail

}  // namespace ag
