// The row reductions of the kernels (autograd/detail/row_reductions.h) — max, sum and dot product
// in lanes — give the bits of their definition for every row length: lane j takes elements j,
// j + L, j + 2L, … in order from +0 (−inf for the max), and the lanes combine pairwise, j ⊕ j + L/2
// halving down to lane 0 (L = 8; 32 for the max of a row of 64 elements or more). The kernels take
// the row's last partial vector in registers, padded with +0 (−inf); this pins that the padding
// changes no result. Each reduction is compiled here once per instruction set, as in the kernels,
// and the copy for this CPU runs.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "autograd/detail/row_reductions.h"
#include "autograd/detail/target_clones.h"

namespace {

// The definition, one element at a time.
template <int64_t Lanes, class T, class Add>
double by_definition(int64_t n, double start, Add add_element) {
  double lanes[Lanes];
  std::fill(lanes, lanes + Lanes, start);
  for (int64_t k = 0; k < n; ++k) lanes[k % Lanes] = add_element(lanes[k % Lanes], k);
  for (int64_t half = Lanes / 2; half > 0; half /= 2)
    for (int64_t j = 0; j < half; ++j) lanes[j] = add_element.combine(lanes[j], lanes[j + half]);
  return lanes[0];
}

template <class T>
struct Sum {
  const T* in;
  double operator()(double lane, int64_t k) const { return lane + double(in[k]); }
  double combine(double a, double b) const { return a + b; }
};
template <class T>
struct Dot {
  const T *a, *b;
  double operator()(double lane, int64_t k) const { return lane + double(a[k]) * double(b[k]); }
  double combine(double x, double y) const { return x + y; }
};
template <class T>
struct Max {  // in T, as std::max(lane, element): NaNs skipped
  const T* in;
  double operator()(double lane, int64_t k) const {
    return static_cast<double>(std::max(static_cast<T>(lane), in[k]));
  }
  double combine(double x, double y) const { return std::max(x, y); }
};

// The reductions as the kernels compile them: one copy per instruction set.
AG_TARGET_CLONES float max_of(const float* in, int64_t n) {
  return ag::detail::row_max_lanes(in, n);
}
AG_TARGET_CLONES double max_of(const double* in, int64_t n) {
  return ag::detail::row_max_lanes(in, n);
}
AG_TARGET_CLONES double sum_of(const float* in, int64_t n) {
  return ag::detail::row_sum_lanes(in, n);
}
AG_TARGET_CLONES double sum_of(const double* in, int64_t n) {
  return ag::detail::row_sum_lanes(in, n);
}
AG_TARGET_CLONES double sum16_of(const float* in, int64_t n) {
  return ag::detail::row_sum_lanes<16>(in, n);
}
AG_TARGET_CLONES double sum16_of(const double* in, int64_t n) {
  return ag::detail::row_sum_lanes<16>(in, n);
}
AG_TARGET_CLONES double dot_of(const float* a, const float* b, int64_t n) {
  return ag::detail::row_dot_lanes(a, b, n);
}
AG_TARGET_CLONES double dot_of(const double* a, const double* b, int64_t n) {
  return ag::detail::row_dot_lanes(a, b, n);
}

// The same bits, or both NaN (a NaN's sign follows the operand order the compiler picks).
template <class T>
bool same(T a, T b) {
  return (std::isnan(a) && std::isnan(b)) || std::memcmp(&a, &b, sizeof a) == 0;
}

}  // namespace

TEMPLATE_TEST_CASE("the row reductions give their definition's bits for every length",
    "[row_reductions]", float, double) {
  using T = TestType;
  const T inf = std::numeric_limits<T>::infinity();
  const T specials[] = {T(0), T(-0.0), inf, -inf, std::numeric_limits<T>::quiet_NaN(), T(-1e6),
      std::numeric_limits<T>::max(), std::numeric_limits<T>::denorm_min()};
  std::mt19937 rng(7);
  std::normal_distribution<double> normal;
  for (int trial = 0; trial < 6; ++trial) {
    // trial 0: normal values; 1: huge; 2: with specials; 3: signed zeros only; 4: all −inf;
    // 5: values whose sums round differently in every order
    for (int64_t n = 0; n <= 140; ++n) {
      // one element before the row and one after it, so that the row starts unaligned and a read
      // past its end would see a value that changes the result
      std::vector<T> x(static_cast<std::size_t>(n + 2)), y(x.size());
      for (std::size_t k = 0; k < x.size(); ++k) {
        double v = normal(rng) * (trial == 1 ? 1e30 : 3.0);
        if (trial == 2 && rng() % 5 == 0) v = static_cast<double>(specials[rng() % 8]);
        if (trial == 3) v = rng() % 2 ? 0.0 : -0.0;
        if (trial == 4) v = -static_cast<double>(inf);
        if (trial == 5) v = std::ldexp(1.0 + normal(rng), static_cast<int>(rng() % 60) - 30);
        x[k] = static_cast<T>(v);
        y[k] = static_cast<T>(normal(rng));
      }
      x.back() = y.back() = std::numeric_limits<T>::quiet_NaN();
      const T* row = x.data() + 1;
      const T* other = y.data() + 1;
      INFO("trial " << trial << ", n " << n);
      const double max_by_definition =
          n < ag::detail::kLongRow
              ? by_definition<ag::detail::kLanes, T>(n, -double(inf), Max<T>{row})
              : by_definition<ag::detail::kLongRowLanes, T>(n, -double(inf), Max<T>{row});
      CHECK(same(max_of(row, n), static_cast<T>(max_by_definition)));
      CHECK(same(sum_of(row, n), by_definition<ag::detail::kLanes, T>(n, 0.0, Sum<T>{row})));
      CHECK(same(sum16_of(row, n), by_definition<16, T>(n, 0.0, Sum<T>{row})));
      CHECK(same(
          dot_of(row, other, n), by_definition<ag::detail::kLanes, T>(n, 0.0, Dot<T>{row, other})));
    }
  }
}
