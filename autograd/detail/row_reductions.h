// The max, sum and dot product of a contiguous row, as the kernels take them (internal).
//
// A loop `total += in[k]` is a chain of dependent additions: each waits for the last (4 cycles),
// and the compiler may not reorder floating-point sums to vectorise it. These keep kLanes running
// results instead (the max of a row of kLongRow elements or more: kLongRowLanes) — lane j takes
// elements j, j + kLanes, j + 2·kLanes, … — which the compiler holds in vector registers, and
// combine them pairwise at the end: lane j ⊕ lane j + L/2 for the L lanes, halving until lane 0
// holds the result. The order is fixed by the row's length alone, so the result does not depend on
// the thread count or on where the row lives (tests/autograd/test_row_reductions.cpp holds each
// reduction to it).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

namespace ag::detail {

// Eight lanes by default: short rows (attention's keys) pay little for the final combine. A long
// sum (ops_reduce.cpp's full sums) takes 16, two AVX-512 registers of doubles.
inline constexpr int64_t kLanes = 8;

// The GCC vector of N elements of type T. (Named through a template: GCC deduces a plain T for a
// template argument of a vector typedef declared inside a template.)
template <class T, int64_t N>
struct VectorType {
  typedef T type __attribute__((vector_size(N * sizeof(T))));
};
template <class T, int64_t N>
using VectorOf = typename VectorType<T, N>::type;

// The elements in[0, count), 0 < count < N, as the first lanes of a vector of N, and `pad` in the
// others. Each lane reads in[min(j, count − 1)], so nothing past the row is read, and the vector
// is built in registers: a row's last partial vector makes no round trip through memory (an array
// filled element by element and then read whole waits on the stores each time). (Vectors are
// given by reference here: by value, GCC warns that the ABI of an AVX vector changes where the
// instruction set lacks its registers, always inlined though these are.)
template <int64_t N, class T>
[[gnu::always_inline]] inline void first_lanes(
    const T* in, int64_t count, T pad, VectorOf<T, N>& out) {
  using Index = decltype(VectorOf<T, N>{} < VectorOf<T, N>{});  // integer lanes of T's width
  using IndexLane = std::remove_cvref_t<decltype(Index{}[0])>;
  VectorOf<T, N> v, pads;
  Index index;
  for (int64_t j = 0; j < N; ++j) {
    v[j] = in[std::min(j, count - 1)];
    pads[j] = pad;
    index[j] = static_cast<IndexLane>(j);
  }
  out = index < static_cast<IndexLane>(count) ? v : pads;
}

// lanes[0] ⊕ … ⊕ lanes[N − 1] in the order above, from a vector of N lanes kept in registers: its
// lower half ⊕ its upper half, halving until one lane is left. ⊕ is + or max (as
// std::max: a unless a < b).
enum class LaneCombine { add, max };
template <LaneCombine op, class T>
[[gnu::always_inline]] inline T combined(T a, T b) {
  return op == LaneCombine::add ? a + b : std::max(a, b);
}
template <LaneCombine op, class T, int64_t N>
[[gnu::always_inline]] inline T combine_vector_lanes(const VectorOf<T, N>& lanes) {
  if constexpr (N == 2) {
    return combined<op>(lanes[0], lanes[1]);
  } else {
    VectorOf<T, N / 2> low, high;
    std::memcpy(&low, &lanes, sizeof low);
    std::memcpy(&high, reinterpret_cast<const char*>(&lanes) + sizeof low, sizeof high);
    const VectorOf<T, N / 2> halves =
        op == LaneCombine::add ? low + high : (low < high ? high : low);
    return combine_vector_lanes<op, T, N / 2>(halves);
  }
}

// max of in[0, n) (−inf for n = 0) in Vectors · kLanes lanes, each of the Vectors a GCC vector of
// kLanes (`v > lanes ? v : lanes` is one max instruction on kLanes elements: the compiler does not
// vectorise the array form of this loop itself). A NaN is skipped, as by std::max: callers that
// must propagate it do so through the values themselves (exp(NaN − m) is NaN). The last partial
// vector is padded with −inf, which changes no max. Always inlined, as row_sum_lanes below.
template <int64_t Vectors, class T>
[[gnu::always_inline]] inline T row_max_in_vectors(const T* in, int64_t n) {
  using Lanes = VectorOf<T, kLanes>;
  constexpr T kLowest = -std::numeric_limits<T>::infinity();
  Lanes lanes[Vectors];
  for (int64_t q = 0; q < Vectors; ++q)
    for (int64_t j = 0; j < kLanes; ++j) lanes[q][j] = kLowest;
  int64_t i = 0;
  for (; i + Vectors * kLanes <= n; i += Vectors * kLanes)
    for (int64_t q = 0; q < Vectors; ++q) {
      Lanes v;
      std::memcpy(&v, in + i + q * kLanes, sizeof v);
      lanes[q] = v > lanes[q] ? v : lanes[q];  // std::max(lanes, v), lane by lane
    }
  int64_t q = 0;  // fewer than Vectors · kLanes elements are left: whole vectors, then one part
  if constexpr (Vectors > 1)
    for (; i + kLanes <= n; i += kLanes, ++q) {
      Lanes v;
      std::memcpy(&v, in + i, sizeof v);
      lanes[q] = v > lanes[q] ? v : lanes[q];
    }
  if (i < n) {
    Lanes v;
    first_lanes<kLanes>(in + i, n - i, kLowest, v);
    lanes[q] = v > lanes[q] ? v : lanes[q];
  }
  for (int64_t half = Vectors / 2; half > 0; half /= 2)  // lanes j ⊕ j + half · kLanes, as above
    for (int64_t p = 0; p < half; ++p)
      lanes[p] = lanes[p + half] > lanes[p] ? lanes[p + half] : lanes[p];
  return combine_vector_lanes<LaneCombine::max, T, kLanes>(lanes[0]);
}
// Rows of at least kLongRow elements take four vectors (kLongRowLanes lanes): one vector's chain
// of dependent maxima waits 4 cycles a step, four overlap (rows of 512 floats 20 % faster, of 4096
// 2.4 times). Shorter rows (attention's keys) keep one, whose setup and combining cost less.
inline constexpr int64_t kLongRow = 64, kLongRowLanes = 4 * kLanes;
template <class T>
[[gnu::always_inline]] inline T row_max_lanes(const T* in, int64_t n) {
  return n < kLongRow ? row_max_in_vectors<1>(in, n) : row_max_in_vectors<4>(in, n);
}

// Lanes 4·q + j (q < Fours) held as sums[q][j], combined pairwise: lanes j ⊕ j + 4·half, halving
// until sums[0] holds four, then those as combine_vector_lanes does.
template <int64_t Fours>
[[gnu::always_inline]] inline double combined_fours(VectorOf<double, 4> (&sums)[Fours]) {
  for (int64_t half = Fours / 2; half > 0; half /= 2)
    for (int64_t q = 0; q < half; ++q) sums[q] += sums[q + half];
  return combine_vector_lanes<LaneCombine::add, double, 4>(sums[0]);
}

// Σ f(k) over a row in double, in Lanes lanes (lane j: k = j, j + Lanes, …). The whole vectors
// run as an array loop, `lanes[j] += f(i + j)`, which GCC vectorises well (its own conversions
// of float to double); the last partial vector and the combining run on vectors of four doubles,
// one AVX2 register each, where add_four(k, count, four) adds f(k + q) to lane q of `four` for
// q < count ≤ 4 (+0 to the others). (A generic vector of 8 or 16 doubles GCC spills to the stack
// where the instruction set's registers are narrower.) A lane starts at +0 and so is never −0:
// the +0 added past the row changes no sum.
template <int64_t Lanes, class AddOne, class AddFour>
[[gnu::always_inline]] inline double sum_in_lanes(int64_t n, AddOne add_one, AddFour add_four) {
  double lanes[Lanes] = {};
  int64_t i = 0;
  for (; i + Lanes <= n; i += Lanes)
    for (int64_t j = 0; j < Lanes; ++j) lanes[j] = add_one(lanes[j], i + j);
  using Four = VectorOf<double, 4>;
  constexpr int64_t kFours = Lanes / 4;
  Four sums[kFours];
  std::memcpy(sums, lanes, sizeof lanes);
  for (int64_t q = 0; q < kFours && i + 4 * q < n; ++q)
    add_four(i + 4 * q, std::min<int64_t>(4, n - i - 4 * q), sums[q]);
  return combined_fours<kFours>(sums);
}

// The Lanes lanes of a sum added pairwise, in sum_in_lanes' order: from lanes already complete
// (vector_math_kernels.h's exp_shifted_sum keeps them while it computes the elements).
template <int64_t Lanes>
[[gnu::always_inline]] inline double combined_lanes(const double (&lanes)[Lanes]) {
  VectorOf<double, 4> sums[Lanes / 4];
  std::memcpy(sums, lanes, sizeof lanes);
  return combined_fours<Lanes / 4>(sums);
}

// in[0, count), count ≤ 4, as four lanes (+0 past count), each converted to double.
template <class T>
[[gnu::always_inline]] inline void four_in_double(
    const T* in, int64_t count, VectorOf<double, 4>& out) {
  VectorOf<T, 4> v;
  if (count == 4)
    std::memcpy(&v, in, sizeof v);
  else
    first_lanes<4>(in, count, T(0), v);
  out = __builtin_convertvector(v, VectorOf<double, 4>);
}

// Σ in[0, n), in double. (Always inlined, so that a caller compiled once per instruction set —
// detail/target_clones.h — gets the loop in each.)
template <int64_t Lanes = kLanes, class T>
[[gnu::always_inline]] inline double row_sum_lanes(const T* in, int64_t n) {
  return sum_in_lanes<Lanes>(
      n, [in](double lane, int64_t k) { return lane + double(in[k]); },
      [in](int64_t k, int64_t count, VectorOf<double, 4>& sums) {
        VectorOf<double, 4> x;
        four_in_double(in + k, count, x);
        sums += x;
      });
}

// Σ a[k] · b[k] over [0, n), in double (each product exact, so a fused multiply-add rounds as
// the two operations: every copy gives the same bits). Always inlined, as row_sum_lanes.
template <class T>
[[gnu::always_inline]] inline double row_dot_lanes(const T* a, const T* b, int64_t n) {
  return sum_in_lanes<kLanes>(
      n, [a, b](double lane, int64_t k) { return lane + double(a[k]) * double(b[k]); },
      [a, b](int64_t k, int64_t count, VectorOf<double, 4>& sums) {
        VectorOf<double, 4> x, y;
        four_in_double(a + k, count, x);
        four_in_double(b + k, count, y);
        sums += x * y;
      });
}

}  // namespace ag::detail
