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

// max of in[0, n) (−inf for n = 0). A NaN is skipped, as by std::max: callers that must
// propagate it do so through the values themselves (exp(NaN − m) is NaN). The lanes are one GCC
// vector (`v > lanes ? v : lanes` is one max instruction on kLanes elements: the compiler does not
// vectorise the array form of this loop itself); always inlined, as row_sum_lanes below.
template <class T>
[[gnu::always_inline]] inline T row_max_lanes(const T* in, int64_t n) {
  typedef T Lanes __attribute__((vector_size(kLanes * sizeof(T))));
  Lanes lanes;
  for (int64_t j = 0; j < kLanes; ++j) lanes[j] = -std::numeric_limits<T>::infinity();
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    Lanes v;
    std::memcpy(&v, in + i, sizeof v);
    lanes = v > lanes ? v : lanes;  // std::max(lanes, v), lane by lane
  }
  T tail[kLanes];
  std::memcpy(tail, &lanes, sizeof lanes);
  for (int64_t j = 0; i + j < n; ++j) tail[j] = std::max(tail[j], in[i + j]);
  return combine_lanes(tail, [](T a, T b) { return std::max(a, b); });
}

// Σ in[0, n), in double. (Always inlined, so that a caller compiled once per instruction set —
// detail/target_clones.h — gets the loop in each.)
template <int64_t Lanes = kLanes, class T>
[[gnu::always_inline]] inline double row_sum_lanes(const T* in, int64_t n) {
  double lanes[Lanes] = {};
  int64_t i = 0;
  for (; i + Lanes <= n; i += Lanes)
    for (int64_t j = 0; j < Lanes; ++j) lanes[j] += double(in[i + j]);
  for (int64_t j = 0; i + j < n; ++j) lanes[j] += double(in[i + j]);
  return combine_lanes(lanes, [](double a, double b) { return a + b; });
}

// Σ a[k] · b[k] over [0, n), in double (each product exact, so a fused multiply-add rounds as
// the two operations: every copy gives the same bits). Always inlined, as row_sum_lanes.
template <class T>
[[gnu::always_inline]] inline double row_dot_lanes(const T* a, const T* b, int64_t n) {
  double lanes[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int64_t j = 0; j < kLanes; ++j) lanes[j] += double(a[i + j]) * double(b[i + j]);
  for (int64_t j = 0; i + j < n; ++j) lanes[j] += double(a[i + j]) * double(b[i + j]);
  return combine_lanes(lanes, [](double x, double y) { return x + y; });
}

}  // namespace ag::detail
