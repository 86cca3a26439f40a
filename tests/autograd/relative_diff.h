// relative_diff: how far two results of one computation are apart, measured against the larger
// result's scale — for kernels that sum in another order than their reference and so round
// differently by a few ulps of the largest terms (the tiled attention against the whole-row one,
// the fused kernels against the composed ops).
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <vector>

#include "autograd/tensor.h"

// The largest |a − b| relative to the largest |b| (1 if b is all 0); NaN counts as the worst.
inline double relative_diff(const ag::Tensor& a, const ag::Tensor& b) {
  REQUIRE(a.shape() == b.shape());
  const std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  double worst = 0, scale = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double d = std::abs(x[i] - y[i]);
    if (!(d <= worst)) worst = d;  // NaN propagates as the worst
    scale = std::max(scale, std::abs(y[i]));
  }
  return worst / (scale > 0 ? scale : 1.0);
}
