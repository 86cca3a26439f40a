// Reading and comparing tensors in the tests: a tensor's values, two results to the bit, and the
// largest elementwise difference. (relative_diff.h measures a difference against the scale.)
#pragma once
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <vector>

#include "autograd/tensor.h"

// A tensor's elements in row-major order, as doubles.
inline std::vector<double> values(const ag::Tensor& t) { return t.to_vector<double>(); }

// The same elements to the bit (NaNs of the same payload are the same; 0 and −0 are not).
template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}
// The same shape and the same elements to the bit, in any layout.
inline bool same_bits(const ag::Tensor& a, const ag::Tensor& b) {
  return a.shape() == b.shape() &&
         same_bits(a.contiguous().to_vector<double>(), b.contiguous().to_vector<double>());
}

// The largest |a − b| of two tensors of one shape; a NaN on either side counts as the worst.
inline double max_abs_diff(const ag::Tensor& a, const ag::Tensor& b) {
  REQUIRE(a.shape() == b.shape());
  const std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  double worst = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double d = std::abs(x[i] - y[i]);
    if (!(d <= worst)) worst = d;  // NaN propagates as the worst
  }
  return worst;
}
