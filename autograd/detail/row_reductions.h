// The max, sum and dot product of a contiguous row, as the kernels take them (internal).
//
// A loop `total += in[k]` is a chain of dependent additions: each waits for the last (4 cycles),
// and the compiler may not reorder floating-point sums to vectorise it. These keep kLanes running
// results instead — lane j takes elements j, j + kLanes, j + 2·kLanes, … — which the compiler
// holds in vector registers, and combine them pairwise at the end. The order is fixed by the row's
// length alone, so the result does not depend on the thread count or on where the row lives.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <utility>

namespace ag::detail {

// Eight lanes by default: short rows (attention's keys) pay little for the final combine. A long
// sum (ops_reduce.cpp's full sums) takes 16, two AVX-512 registers of doubles.
inline constexpr int64_t kLanes = 8;

// lanes[j] = lanes[j] ⊕ lanes[j + half], halving until lanes[0] holds the result.
template <int64_t Lanes, class A, class Combine>
A combine_lanes(A (&lanes)[Lanes], Combine combine) {
  for (int64_t half = Lanes / 2; half > 0; half /= 2)
    for (int64_t j = 0; j < half; ++j) lanes[j] = combine(lanes[j], lanes[j + half]);
  return lanes[0];
}

// The elements in[0, count), 0 < count < the vector's lanes, as the first lanes of a GCC vector,
// and `pad` in the others. Each lane reads in[min(j, count − 1)], so nothing past the row is read,
// and the vector is built in registers: a row's last partial vector makes no round trip through
// memory (an array filled element by element and then read whole waits for the stores each time).
// (These take and give vectors by reference: by value, GCC warns that the ABI of an AVX vector
// changes where the instruction set lacks its registers, always inlined though they are.)
template <class Vector, class T>
[[gnu::always_inline]] inline void first_lanes(const T* in, int64_t count, T pad, Vector& out) {
  constexpr int64_t kCount = sizeof(Vector) / sizeof(T);
  using Index = decltype(Vector{} < Vector{});  // integer lanes of T's width
  using IndexLane = std::remove_cvref_t<decltype(Index{}[0])>;
  Vector v, pads;
  Index index;
  for (int64_t j = 0; j < kCount; ++j) {
    v[j] = in[std::min(j, count - 1)];
    pads[j] = pad;
    index[j] = static_cast<IndexLane>(j);
  }
  out = index < static_cast<IndexLane>(count) ? v : pads;
}

// The GCC vector of N elements of type T. (Named through a template: GCC deduces a plain T for a
// template argument of a vector typedef declared inside a template.)
template <class T, int64_t N>
struct VectorOf {
  typedef T type __attribute__((vector_size(N * sizeof(T))));
};

// lanes[0] ⊕ … ⊕ lanes[N − 1] in combine_lanes's order, from a vector of N lanes kept in
// registers: lanes [0, N/2) ⊕ lanes [N/2, N), then halving until lane 0 holds the result. ⊕ is +
// or max (as std::max: a unless a < b).
enum class LaneCombine { add, max };
template <LaneCombine op, int64_t Half, class Vector, std::size_t... Lane>
[[gnu::always_inline]] inline void combine_halves(Vector& v, std::index_sequence<Lane...> lanes) {
  // w[j] = v[j + Half], so that lanes [0, Half) become v[j] ⊕ v[j + Half]
  const Vector w = __builtin_shufflevector(v, v, ((Lane + Half) % sizeof...(Lane))...);
  v = op == LaneCombine::add ? v + w : (v < w ? w : v);
  if constexpr (Half > 1) combine_halves<op, Half / 2>(v, lanes);
}
template <LaneCombine op, class T, int64_t N>
[[gnu::always_inline]] inline T combine_vector_lanes(const typename VectorOf<T, N>::type& lanes) {
  typename VectorOf<T, N>::type v = lanes;
  combine_halves<op, N / 2>(v, std::make_index_sequence<N>{});
  return v[0];
}

// max of in[0, n) (−inf for n = 0). A NaN is skipped, as by std::max: callers that must
// propagate it do so through the values themselves (exp(NaN − m) is NaN). The lanes are one GCC
// vector (`v > lanes ? v : lanes` is one max instruction on kLanes elements: the compiler does not
// vectorise the array form of this loop itself); always inlined, as row_sum_lanes below.
template <class T>
[[gnu::always_inline]] inline T row_max_lanes(const T* in, int64_t n) {
  using Lanes = typename VectorOf<T, kLanes>::type;
  constexpr T kLowest = -std::numeric_limits<T>::infinity();
  Lanes lanes;
  for (int64_t j = 0; j < kLanes; ++j) lanes[j] = kLowest;
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    Lanes v;
    std::memcpy(&v, in + i, sizeof v);
    lanes = v > lanes ? v : lanes;  // std::max(lanes, v), lane by lane
  }
  if (i < n) {
    Lanes v;
    first_lanes(in + i, n - i, kLowest, v);  // −inf changes no max
    lanes = v > lanes ? v : lanes;
  }
  return combine_vector_lanes<LaneCombine::max, T, kLanes>(lanes);
}

// Σ in[0, n), in double. (Always inlined, so that a caller compiled once per instruction set —
// detail/target_clones.h — gets the loop in each.) The last partial vector adds +0 in the lanes
// past the row, which changes no sum: a lane starts at +0 and so is never −0.
template <int64_t Lanes = kLanes, class T>
[[gnu::always_inline]] inline double row_sum_lanes(const T* in, int64_t n) {
  using In = typename VectorOf<T, Lanes>::type;
  using Sums = typename VectorOf<double, Lanes>::type;
  Sums lanes = {};
  int64_t i = 0;
  for (; i + Lanes <= n; i += Lanes) {
    In v;
    std::memcpy(&v, in + i, sizeof v);
    lanes += __builtin_convertvector(v, Sums);
  }
  if (i < n) {
    In v;
    first_lanes(in + i, n - i, T(0), v);
    lanes += __builtin_convertvector(v, Sums);
  }
  return combine_vector_lanes<LaneCombine::add, double, Lanes>(lanes);
}

// Σ a[k] · b[k] over [0, n), in double (each product exact, so a fused multiply-add rounds as
// the two operations: every copy gives the same bits). Always inlined, as row_sum_lanes; its
// last partial vector, as there, adds +0 · +0.
template <class T>
[[gnu::always_inline]] inline double row_dot_lanes(const T* a, const T* b, int64_t n) {
  using In = typename VectorOf<T, kLanes>::type;
  using Sums = typename VectorOf<double, kLanes>::type;
  Sums lanes = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    In u, v;
    std::memcpy(&u, a + i, sizeof u);
    std::memcpy(&v, b + i, sizeof v);
    lanes += __builtin_convertvector(u, Sums) * __builtin_convertvector(v, Sums);
  }
  if (i < n) {
    In u, v;
    first_lanes(a + i, n - i, T(0), u);
    first_lanes(b + i, n - i, T(0), v);
    lanes += __builtin_convertvector(u, Sums) * __builtin_convertvector(v, Sums);
  }
  return combine_vector_lanes<LaneCombine::add, double, kLanes>(lanes);
}

}  // namespace ag::detail
