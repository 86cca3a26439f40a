// The row kernels of the attention ops that handle several rows at once — softmax_rows (the
// forward's softmax) and softmax_backward_head (its backward) — give exactly the bits of the
// one-row loops they replaced, for every row length, masked rows and extreme values included.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "autograd/detail/attention_kernels.h"
#include "autograd/detail/kernels.h"
#include "tensor_compare.h"

namespace {

// Scores for `rows` rows of `cols`, normal with scale `scale`, with a few extreme values.
template <class T>
std::vector<T> scores(std::mt19937& rng, int64_t rows, int64_t cols, double scale) {
  std::normal_distribution<double> normal(0.0, scale);
  std::vector<T> x(static_cast<std::size_t>(rows * cols));
  for (T& v : x) v = static_cast<T>(normal(rng));
  if (!x.empty()) {
    x[rng() % x.size()] = static_cast<T>(-1e6);  // d2l's masked score
    x[rng() % x.size()] = -std::numeric_limits<T>::infinity();
    x[rng() % x.size()] = static_cast<T>(80);
  }
  return x;
}

// The one-row softmax backward of the attention kernel before it took several rows at a time.
template <class T>
void one_row_backward(T* dS, const T* P, const int64_t* lengths, int64_t Tq, int64_t Tk, T sqrt_d) {
  for (int64_t i = 0; i < Tq; ++i) {
    T* dS_row = dS + i * Tk;
    const T* P_row = P + i * Tk;
    const int64_t len = lengths[i];
    double row_dot = 0;
    for (int64_t j = 0; j < len; ++j) row_dot += double(dS_row[j]) * double(P_row[j]);
    const T dot = static_cast<T>(row_dot);
    for (int64_t j = 0; j < len; ++j) dS_row[j] = P_row[j] * (dS_row[j] - dot) / sqrt_d;
    for (int64_t j = len; j < Tk; ++j) dS_row[j] = 0;
  }
}

}  // namespace

TEMPLATE_TEST_CASE(
    "softmax_rows gives softmax_row's bits on every row", "[softmax_rows]", float, double) {
  std::mt19937 rng(3);
  for (int trial = 0; trial < 300; ++trial) {
    const int64_t rows = 1 + int64_t(rng() % 11), cols = 1 + int64_t(rng() % 70);
    std::vector<TestType> x = scores<TestType>(rng, rows, cols, trial % 2 ? 1.0 : 30.0);
    std::vector<int64_t> lengths(static_cast<std::size_t>(rows));
    for (int64_t& len : lengths) len = 1 + int64_t(rng() % cols);  // 1 .. cols valid keys
    std::vector<TestType> expected = x, got = x;
    std::vector<TestType*> row_pointers;
    for (int64_t r = 0; r < rows; ++r) {
      ag::detail::softmax_row(expected.data() + r * cols, expected.data() + r * cols,
          lengths[static_cast<std::size_t>(r)]);
      row_pointers.push_back(got.data() + r * cols);
    }
    ag::detail::softmax_rows(row_pointers.data(), lengths.data(), rows);
    INFO("rows " << rows << ", cols " << cols);
    REQUIRE(same_bits(got, expected));
  }
}

TEMPLATE_TEST_CASE(
    "softmax_backward_head gives the one-row loop's bits", "[softmax_rows]", float, double) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 300; ++trial) {
    const int64_t Tq = 1 + int64_t(rng() % 11), Tk = 1 + int64_t(rng() % 70);
    std::vector<TestType> P = scores<TestType>(rng, Tq, Tk, 1.0);
    for (TestType& p : P) p = std::abs(p) / TestType(Tk);  // weights-like, with the odd extreme
    const std::vector<TestType> dP = scores<TestType>(rng, Tq, Tk, 1.0);
    std::vector<int64_t> lengths(static_cast<std::size_t>(Tq));
    for (int64_t& len : lengths) len = int64_t(rng() % (Tk + 1));  // 0 (no valid key) .. Tk
    const TestType sqrt_d = std::sqrt(TestType(1 + rng() % 64));
    std::vector<TestType> expected = dP, got = dP;
    one_row_backward(expected.data(), P.data(), lengths.data(), Tq, Tk, sqrt_d);
    ag::detail::softmax_backward_head(got.data(), P.data(), lengths.data(), Tq, Tk, sqrt_d);
    INFO("Tq " << Tq << ", Tk " << Tk);
    REQUIRE(same_bits(got, expected));
  }
}
