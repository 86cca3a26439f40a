// Shapes too large to exist, and memory the system cannot give (hardening issue, item 1).
//
// Every op that makes a shape from user numbers counts its elements and bytes with overflow
// checks (checked_numel, and ag::empty's byte count): a shape whose sizes multiply past 2^63 − 1,
// or whose bytes pass PTRDIFF_MAX, is a ShapeError naming the op and the shape — thrown before any
// storage is asked for. A size that passes those checks but that the system cannot allocate is an
// OutOfMemoryError naming the op, the shape and the bytes. Here 2^60 bytes stands for that size:
// beyond any machine's address space (x86-64 and arm64 have at most 2^57 bytes), so it fails the
// same way under any overcommit setting, and nothing is ever touched.
#include <catch2/catch.hpp>

#include <cstdint>
#include <limits>
#include <new>
#include <stdexcept>

#include "autograd/allocator.h"
#include "autograd/autograd.h"
#include "autograd/ops.h"
#include "what_contains.h"

// AddressSanitizer's allocator aborts the process on a request it cannot serve unless
// allocator_may_return_null is set; then aligned_alloc returns null like glibc's, and ag throws
// its OutOfMemoryError. scripts/test.sh --sanitize sets ASAN_OPTIONS without this flag, so it
// keeps this default (a flag in ASAN_OPTIONS still wins). Without ASan this function is unused.
extern "C" __attribute__((used, visibility("default"))) const char* __asan_default_options() {
  return "allocator_may_return_null=1";
}

using namespace ag;

namespace {

constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();
constexpr int64_t k2to32 = int64_t{1} << 32;

// A view of `shape` over a single element (all strides 0): any size at no memory.
Tensor expanded(const Shape& shape, DType dtype = float32) {
  return ones(Shape(shape.size(), 1), dtype).expand(shape);
}

// How many storage buffers have been asked for so far: an op refused for its shape asks for none.
uint64_t storage_requests() { return allocator_stats().requests; }

}  // namespace

TEST_CASE("creation refuses shapes whose sizes multiply past 2^63 - 1", "[overflow]") {
  const uint64_t requests = storage_requests();
  CHECK_THROWS_MATCHES(zeros({k2to32, k2to32}), ShapeError,
      WhatContains({"zeros: shape [4294967296,4294967296] is too large"}));
  CHECK_THROWS_MATCHES(ones({k2to32, k2to32, 1}), ShapeError,
      WhatContains({"ones: shape [4294967296,4294967296,1] is too large"}));
  CHECK_THROWS_MATCHES(empty({kInt64Max, 2}), ShapeError,
      WhatContains({"empty: shape [9223372036854775807,2] is too large"}));
  CHECK_THROWS_MATCHES(full({k2to32, k2to32}, 3.0), ShapeError,
      WhatContains({"full: shape [4294967296,4294967296]"}));
  CHECK_THROWS_MATCHES(
      rand({k2to32, k2to32}), ShapeError, WhatContains({"rand: shape [4294967296,4294967296]"}));
  CHECK_THROWS_MATCHES(
      randn({k2to32, k2to32}), ShapeError, WhatContains({"randn: shape [4294967296,4294967296]"}));
  CHECK_THROWS_MATCHES(uniform({k2to32, k2to32}, 0.0, 1.0), ShapeError,
      WhatContains({"uniform: shape [4294967296,4294967296]"}));
  CHECK_THROWS_MATCHES(bernoulli({k2to32, k2to32}, 0.5), ShapeError,
      WhatContains({"bernoulli: shape [4294967296,4294967296]"}));
  // 4 values do not fill this shape, though its sizes multiply to 4 modulo 2^64
  CHECK_THROWS_MATCHES(tensor({1.0, 2.0, 3.0, 4.0}, {(int64_t{1} << 62) + 1, 4}), ShapeError,
      WhatContains({"tensor: shape [4611686018427387905,4] is too large"}));
  // No element, but the first stride of a contiguous [0, 2^40, 2^40] would be 2^80
  CHECK_THROWS_MATCHES(empty({0, int64_t{1} << 40, int64_t{1} << 40}), ShapeError,
      WhatContains({"empty: shape [0,1099511627776,1099511627776] is too large"}));
  CHECK(storage_requests() == requests);
  // The largest shapes that still fit are fine when they hold no element
  CHECK(empty({0, kInt64Max}).numel() == 0);
  CHECK(empty({0, kInt64Max}).strides() == Shape{kInt64Max, 1});
}

TEST_CASE("creation refuses shapes of more bytes than a buffer can hold", "[overflow]") {
  const uint64_t requests = storage_requests();
  // INT64_MAX elements count fine, but their bytes do not
  CHECK_THROWS_MATCHES(empty({kInt64Max}), ShapeError,
      WhatContains({"empty: shape [9223372036854775807] of float32 is too large",
          "9223372036854775807 elements of 4 bytes"}));
  // 2^62 elements of 8 bytes: 2^65 bytes
  CHECK_THROWS_MATCHES(ones({int64_t{1} << 31, int64_t{1} << 31}, float64), ShapeError,
      WhatContains({"ones: shape [2147483648,2147483648] of float64 is too large"}));
  CHECK_THROWS_MATCHES(zeros({int64_t{1} << 61}), ShapeError,
      WhatContains({"zeros: shape [2305843009213693952] of float32 is too large"}));
  CHECK(storage_requests() == requests);
}

TEST_CASE("negative sizes are refused by every creation function", "[overflow]") {
  CHECK_THROWS_MATCHES(
      zeros({2, -1}), ShapeError, WhatContains({"zeros: negative size in shape [2,-1] (dim 1"}));
  CHECK_THROWS_MATCHES(
      empty({-3}), ShapeError, WhatContains({"empty: negative size in shape [-3] (dim 0 is -3)"}));
  CHECK_THROWS_MATCHES(rand({4, -2}), ShapeError, WhatContains({"rand: negative size", "[4,-2]"}));
  CHECK_THROWS_MATCHES(randn({-1}), ShapeError, WhatContains({"randn: negative size", "[-1]"}));
  CHECK_THROWS_MATCHES(
      full({-5}, 1.0), ShapeError, WhatContains({"full: negative size in shape [-5]"}));
  CHECK_THROWS_MATCHES(
      ones({1, 2}).expand({-2, 2}), ShapeError, WhatContains({"expand: invalid size -2"}));
  CHECK_THROWS_MATCHES(
      ones({4}).reshape({-2, -2}), ShapeError, WhatContains({"reshape: invalid size -2"}));
}

TEST_CASE("arange refuses a range of more than 2^63 - 1 elements", "[overflow]") {
  const uint64_t requests = storage_requests();
  // ⌈1e19⌉ is beyond int64: it used to be converted (undefined) to -2^63
  CHECK_THROWS_MATCHES(arange(0, 1e19), ShapeError,
      WhatContains({"arange: start 0, end 1e+19, step 1 give 1e+19 elements"}));
  CHECK_THROWS_MATCHES(arange(1e19), ShapeError, WhatContains({"arange", "end 1e+19"}));
  CHECK_THROWS_MATCHES(arange(0, 1, 1e-300), ShapeError, WhatContains({"arange", "step 1e-300"}));
  // end − start overflows the double range: infinitely many elements
  CHECK_THROWS_MATCHES(arange(-1e308, 1e308), ShapeError, WhatContains({"arange", "inf"}));
  // 2^62 elements count, but not as float32 bytes
  CHECK_THROWS_MATCHES(arange(0, 0x1p62), ShapeError,
      WhatContains({"arange: shape [4611686018427387904] of float32 is too large"}));
  CHECK(storage_requests() == requests);
  // An empty range is fine however far apart its ends are
  CHECK(arange(1e308, -1e308).numel() == 0);
  CHECK(arange(0, 1e19, -1).numel() == 0);
}

TEST_CASE("reshape and view refuse shapes whose sizes overflow", "[overflow]") {
  // (2^62 + 1) · 4 = 4 modulo 2^64: this used to be accepted as a view of 4 elements
  CHECK_THROWS_MATCHES(ones({4}).reshape({(int64_t{1} << 62) + 1, 4}), ShapeError,
      WhatContains({"reshape: shape [4611686018427387905,4] is invalid for input of shape [4]"}));
  CHECK_THROWS_MATCHES(ones({4}).view({(int64_t{1} << 62) + 1, 4}), ShapeError,
      WhatContains({"view: shape [4611686018427387905,4] is invalid for input of shape [4]"}));
  CHECK_THROWS_MATCHES(ones({4}).reshape({-1, k2to32, k2to32}), ShapeError,
      WhatContains({"reshape: shape [-1,4294967296,4294967296] is invalid"}));
  // No element either way, but the target's strides would overflow
  CHECK_THROWS_MATCHES(zeros({0}).reshape({0, int64_t{1} << 40, int64_t{1} << 40}), ShapeError,
      WhatContains({"reshape: shape [0,1099511627776,1099511627776] is too large"}));
  CHECK(zeros({0}).reshape({0, int64_t{1} << 40}).shape() == Shape{0, int64_t{1} << 40});
}

TEST_CASE("expand refuses a view of more than 2^63 - 1 elements", "[overflow]") {
  CHECK_THROWS_MATCHES(ones({1, 1}).expand({k2to32, k2to32}), ShapeError,
      WhatContains({"expand: shape [4294967296,4294967296] is too large"}));
  CHECK_THROWS_MATCHES(ones({1}).expand({k2to32, k2to32, 1}), ShapeError,
      WhatContains({"expand: shape [4294967296,4294967296,1] is too large"}));
  // A view needs no memory: the largest count is fine
  const uint64_t requests = storage_requests();
  const Tensor big = ones({1}).expand({kInt64Max});
  CHECK(storage_requests() == requests + 1);  // the one element of ones({1}) only
  CHECK(big.numel() == kInt64Max);
}

TEST_CASE("broadcasting refuses a result too large to count", "[overflow]") {
  const Tensor column = expanded({k2to32, 1}), row = expanded({1, k2to32}), one = ones({1});
  const uint64_t requests = storage_requests();
  CHECK_THROWS_MATCHES(
      column + row, ShapeError, WhatContains({"add: shape [4294967296,4294967296] is too large"}));
  CHECK_THROWS_MATCHES(
      column * row, ShapeError, WhatContains({"mul: shape [4294967296,4294967296] is too large"}));
  CHECK_THROWS_MATCHES(gt(column, row), ShapeError,
      WhatContains({"gt: shape [4294967296,4294967296] is too large"}));
  CHECK_THROWS_MATCHES(where(column, row, one), ShapeError,
      WhatContains({"where: shape [4294967296,4294967296] is too large"}));
  CHECK(storage_requests() == requests);
}

TEST_CASE("matmul refuses an output too large to count", "[overflow]") {
  const int64_t m = int64_t{1} << 31;
  const Tensor column = expanded({k2to32, 1}), row = expanded({1, k2to32});
  const Tensor batch_column = expanded({k2to32, 1, 2, 2}), batch_row = expanded({1, k2to32, 2, 2});
  const Tensor column64 = expanded({m, 1}, float64), row64 = expanded({1, m}, float64);
  const Tensor tall = expanded({m, 1}), one = expanded({1, 1});  // (2^31, 1): no memory
  const uint64_t requests = storage_requests();
  // [2^32, 1] · [1, 2^32]: M · N overflows
  CHECK_THROWS_MATCHES(matmul(column, row), ShapeError,
      WhatContains({"matmul: shape [4294967296,4294967296] is too large"}));
  // broadcast batch dims [2^32, 1] and [1, 2^32]
  CHECK_THROWS_MATCHES(matmul(batch_column, batch_row), ShapeError,
      WhatContains({"matmul: shape [4294967296,4294967296,2,2] is too large"}));
  // float64 bytes: 2^31 · 2^31 elements of 8 bytes
  CHECK_THROWS_MATCHES(matmul(column64, row64), ShapeError,
      WhatContains({"matmul: shape [2147483648,2147483648] of float64 is too large"}));
  // An output that fits memory's arithmetic but not BLAS's 32-bit M: refused before its 8 GB are
  // allocated (it was allocated first, then refused).
  CHECK_THROWS_MATCHES(matmul(tall, one), ShapeError,
      WhatContains({"matmul: shapes [2147483648,1] and [1,1] exceed BLAS's 32-bit sizes"}));
  CHECK_THROWS_MATCHES(linear(tall, one), ShapeError,
      WhatContains({"linear: shapes [2147483648,1] and [1,1] exceed BLAS's 32-bit sizes"}));
  CHECK(storage_requests() == requests);
}

TEST_CASE("concat, split, slice and narrow check their size arithmetic", "[overflow]") {
  const Tensor largest = expanded({kInt64Max}), one = expanded({1});
  const Tensor half = expanded({int64_t{1} << 61});
  const uint64_t requests = storage_requests();
  // The sizes along the dim add up past 2^63 - 1
  CHECK_THROWS_MATCHES(concat({largest, one}), ShapeError,
      WhatContains({"concat: the sizes along dim 0 of the 2 tensors (the first of shape "
                    "[9223372036854775807]) add up to more than 9223372036854775807"}));
  // They add up, but not their bytes
  CHECK_THROWS_MATCHES(concat({half, half}), ShapeError,
      WhatContains({"concat: shape [4611686018427387904] of float32 is too large"}));
  CHECK(storage_requests() == requests);

  // Split sizes whose sum wraps around to the dim's size 2
  CHECK_THROWS_MATCHES(split(ones({2}), std::vector<int64_t>{kInt64Max, kInt64Max, 4}), ShapeError,
      WhatContains({"split: sizes [9223372036854775807,9223372036854775807,4] sum "
                    "to more than"}));
  // start + length overflows
  CHECK_THROWS_MATCHES(narrow(ones({5}), 0, 2, kInt64Max), ShapeError,
      WhatContains({"narrow: start 2 and length 9223372036854775807 do not fit dim 0"}));
  // The largest step keeps the first element only
  const Tensor x = arange(5.0);
  CHECK(slice(x, 0, 1, 5, kInt64Max).to_vector() == std::vector<double>{1.0});
  CHECK(slice(x, 0, 0, kInt64Max, kInt64Max).to_vector() == std::vector<double>{0.0});
  CHECK(slice(x, 0, 1, 5, 3).to_vector() == std::vector<double>{1.0, 4.0});
}

TEST_CASE("repeat_interleave and index_select check their output shape first", "[overflow]") {
  const Tensor two = ones({2}), two_by_three = ones({2, 3});
  const Tensor wide = expanded({1, int64_t{1} << 62});
  const uint64_t requests = storage_requests();
  CHECK_THROWS_MATCHES(repeat_interleave(two, int64_t{1} << 62, 0), ShapeError,
      WhatContains({"repeat_interleave: 4611686018427387904 repeats of the 2 rows of dim 0 of "
                    "shape [2]"}));
  CHECK_THROWS_MATCHES(repeat_interleave(two_by_three, int64_t{1} << 61, 0), ShapeError,
      WhatContains({"repeat_interleave: shape [4611686018427387904,3] is too large"}));
  CHECK_THROWS_MATCHES(index_select(wide, 0, std::vector<int64_t>{0, 0, 0}), ShapeError,
      WhatContains({"index_select: shape [3,4611686018427387904] is too large"}));
  CHECK(storage_requests() == requests);
  // Huge repeats of rows that hold no element: an empty result at once, no index of its rows
  const Tensor empty_rows = zeros({3, 0}).requires_grad_();
  const Tensor repeated = repeat_interleave(empty_rows, int64_t{1} << 60, 0);
  CHECK(repeated.shape() == Shape{3 * (int64_t{1} << 60), 0});
  repeated.sum().backward();
  CHECK(empty_rows.grad().shape() == Shape{3, 0});
}

TEST_CASE("attention refuses weights too large to count", "[overflow]") {
  // B·H·Tq·Tk = 2^30 · (2^31 − 1)²: each size fits BLAS, each operand fits int64, the weights not
  const int64_t B = int64_t{1} << 30, T = (int64_t{1} << 31) - 1;
  const Tensor q = expanded({B, 1, T, 1}), k = expanded({B, 1, T, 1}), v = expanded({B, 1, T, 1});
  Generator generator(0);
  for (AttentionKernel kernel : {AttentionKernel::whole_rows, AttentionKernel::tiled}) {
    AttentionKernelGuard guard(kernel);
    CHECK_THROWS_MATCHES(attention(q, k, v, Tensor(), 0.0, false, generator), ShapeError,
        WhatContains({"attention: q [1073741824,1,2147483647,1] and k "
                      "[1073741824,1,2147483647,1] give more than 9223372036854775807 attention "
                      "weights"}));
  }
}

TEST_CASE("a conversion refuses a result of more bytes than a buffer can hold", "[overflow]") {
  // 2^61 float32 elements are a valid view; as float64 they would be 2^64 bytes
  CHECK_THROWS_MATCHES(expanded({int64_t{1} << 61}).to(float64), ShapeError,
      WhatContains({"to: shape [2305843009213693952] of float64 is too large"}));
}

TEST_CASE("memory the system cannot give is an OutOfMemoryError naming op, shape and bytes",
    "[overflow]") {
  // 2^58 float32 elements: 2^60 bytes, which pass every overflow check
  const int64_t n = int64_t{1} << 58;
  const Tensor column = expanded({int64_t{1} << 29, 1}), row = expanded({1, int64_t{1} << 29});
  const Tensor half = expanded({n / 2}), two = ones({2}), mask_input = expanded({n * 4});
  // 2^62 float64 elements: twice as many random words as int64 counts
  const Tensor mask_input64 = expanded({n * 16}, float64);
  Generator generator(0);
  const std::size_t in_use = allocator_stats().in_use_bytes;
  CHECK_THROWS_MATCHES(empty({n}), OutOfMemoryError,
      WhatContains({"empty: out of memory: cannot allocate 1152921504606846976 bytes for shape "
                    "[288230376151711744]"}));
  CHECK_THROWS_MATCHES(zeros({n}), OutOfMemoryError, WhatContains({"zeros: out of memory"}));
  CHECK_THROWS_MATCHES(randn({int64_t{1} << 29, int64_t{1} << 29}), OutOfMemoryError,
      WhatContains({"randn: out of memory: cannot allocate 1152921504606846976 bytes for shape "
                    "[536870912,536870912]"}));
  CHECK_THROWS_MATCHES(arange(0, 0x1p58), OutOfMemoryError,
      WhatContains({"arange: out of memory", "[288230376151711744]"}));
  // Ops name themselves: a broadcast, a product, a concatenation, repeats, a dropout mask
  CHECK_THROWS_MATCHES(column + row, OutOfMemoryError,
      WhatContains({"add: out of memory: cannot allocate 1152921504606846976 bytes for shape "
                    "[536870912,536870912]"}));
  CHECK_THROWS_MATCHES(matmul(column, row), OutOfMemoryError,
      WhatContains({"matmul: out of memory", "[536870912,536870912]"}));
  CHECK_THROWS_MATCHES(concat({half, half}), OutOfMemoryError,
      WhatContains({"concat: out of memory", "[288230376151711744]"}));
  CHECK_THROWS_MATCHES(repeat_interleave(two, n / 2, 0), OutOfMemoryError,
      WhatContains({"repeat_interleave: out of memory", "[288230376151711744]"}));
  CHECK_THROWS_MATCHES(dropout(mask_input, 0.5, true, generator), OutOfMemoryError,
      WhatContains({"dropout: out of memory: cannot allocate 1152921504606846976 bytes for shape "
                    "[1152921504606846976]"}));
  CHECK_THROWS_MATCHES(dropout(mask_input64, 0.5, true, generator), OutOfMemoryError,
      WhatContains({"dropout: out of memory: cannot allocate 4611686018427387904 bytes"}));
  // Scratch vectors too: what to_vector reads out, a reduction's sums, a row's valid lengths
  CHECK_THROWS_MATCHES(half.to_vector<float>(), OutOfMemoryError,
      WhatContains({"to_vector: out of memory: cannot allocate 576460752303423488 bytes for shape "
                    "[144115188075855872]"}));
  CHECK_THROWS_MATCHES(sum(expanded({n / 2, 2}), {1}), OutOfMemoryError,
      WhatContains({"sum: out of memory", "[144115188075855872]"}));
  CHECK_THROWS_MATCHES(mean(expanded({n / 2, 2}), {1}), OutOfMemoryError,
      WhatContains({"mean: out of memory", "[144115188075855872]"}));
  CHECK_THROWS_MATCHES(var(expanded({n / 2, 2}), {1}), OutOfMemoryError,
      WhatContains({"var: out of memory", "[144115188075855872]"}));
  CHECK_THROWS_MATCHES(length_masked_softmax(expanded({1, n / 2, 1}), ones({1})), OutOfMemoryError,
      WhatContains({"masked_softmax: out of memory", "[1,144115188075855872]"}));
  // Each failed allocation gave back what it had counted
  CHECK(allocator_stats().in_use_bytes == in_use);
}

TEST_CASE("OutOfMemoryError is a RuntimeError, an ag::Error and a std::runtime_error",
    "[overflow][errors]") {
  const Shape shape{int64_t{1} << 58};
  CHECK_THROWS_AS(empty(shape), RuntimeError);
  CHECK_THROWS_AS(empty(shape), Error);
  CHECK_THROWS_AS(empty(shape), std::runtime_error);
  // Never a bare std::bad_alloc
  bool bare_bad_alloc = false;
  try {
    empty(shape);
  } catch (const Error&) {
  } catch (const std::bad_alloc&) {
    bare_bad_alloc = true;
  }
  CHECK_FALSE(bare_bad_alloc);
}

TEST_CASE("Storage refuses more than PTRDIFF_MAX bytes instead of wrapping its size",
    "[overflow][allocator]") {
  // Rounding SIZE_MAX up to the 64-byte alignment used to wrap to 0 and hand out 64 bytes.
  CHECK_THROWS_AS(Storage(std::numeric_limits<std::size_t>::max()), std::bad_alloc);
  CHECK_THROWS_AS(Storage(static_cast<std::size_t>(std::numeric_limits<std::ptrdiff_t>::max()) + 1),
      std::bad_alloc);
}
