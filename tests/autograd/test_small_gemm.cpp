// ag's kernel for small float32 products (autograd/small_gemm.cpp), its AVX-512 copy and its AVX2
// one: each element of C is one fma per p, in order, from zero. Up to 16 × 16 with k < 32 (d2l's
// heads) those are the bits of OpenBLAS's sgemm on its AVX-512 kernels, which is what keeps the
// files of tests/io/test_v1_files.cpp resuming bit for bit. (OpenBLAS's AVX2 kernels round
// differently: on an AVX2 CPU the kernel's bits are those it has on AVX-512.)
#include <catch2/catch.hpp>

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "autograd/detail/blas.h"
#include "autograd/error.h"
#include "tensor_compare.h"

using ag::detail::small_sgemm;

namespace {

// One product's operands, with leading dimensions a little larger than the rows they hold.
struct Product {
  bool a_transposed = false, b_transposed = false, accumulate = false;
  int64_t m = 0, n = 0, k = 0, lda = 0, ldb = 0, ldc = 0;
  std::vector<float> a, b, c;  // C's initial values (read when accumulate)

  CBLAS_TRANSPOSE trans_a() const { return a_transposed ? CblasTrans : CblasNoTrans; }
  CBLAS_TRANSPOSE trans_b() const { return b_transposed ? CblasTrans : CblasNoTrans; }
  float op_a(int64_t i, int64_t p) const { return a_transposed ? a[p * lda + i] : a[i * lda + p]; }
  float op_b(int64_t p, int64_t j) const { return b_transposed ? b[j * ldb + p] : b[p * ldb + j]; }
};

// Sizes drawn from 1 .. the bounds: d2l's heads (OpenBLAS's bits) or all the kernel makes.
struct Bounds {
  int64_t m, n, k;
};
constexpr Bounds kOpenblasBits{16, 16, 31};
constexpr Bounds kWholeKernel{
    ag::detail::kSmallGemmMaxM, ag::detail::kSmallGemmMaxN, ag::detail::kSmallGemmMaxK};

Product random_product(std::mt19937& rng, bool a_transposed, bool b_transposed, bool accumulate,
    Bounds bounds = kOpenblasBits) {
  std::normal_distribution<float> normal;
  Product x;
  x.a_transposed = a_transposed, x.b_transposed = b_transposed, x.accumulate = accumulate;
  x.m = 1 + int64_t(rng() % bounds.m), x.n = 1 + int64_t(rng() % bounds.n);
  x.k = 1 + int64_t(rng() % bounds.k);
  x.lda = (a_transposed ? x.m : x.k) + int64_t(rng() % 3);
  x.ldb = (b_transposed ? x.k : x.n) + int64_t(rng() % 3);
  x.ldc = x.n + int64_t(rng() % 3);
  x.a.resize(std::size_t((a_transposed ? x.k : x.m) * x.lda));
  x.b.resize(std::size_t((b_transposed ? x.n : x.k) * x.ldb));
  x.c.resize(std::size_t(x.m * x.ldc));
  for (auto* values : {&x.a, &x.b, &x.c})
    for (float& v : *values) v = normal(rng);
  return x;
}

// The definition: C[i, j] = fma(op(A)[i, p], op(B)[p, j], ·) for p = 0, 1, … from 0, then + C.
std::vector<float> one_fma_per_p(const Product& x) {
  std::vector<float> c = x.c;
  for (int64_t i = 0; i < x.m; ++i)
    for (int64_t j = 0; j < x.n; ++j) {
      float sum = 0;
      for (int64_t p = 0; p < x.k; ++p) sum = std::fma(x.op_a(i, p), x.op_b(p, j), sum);
      c[i * x.ldc + j] = x.accumulate ? c[i * x.ldc + j] + sum : sum;
    }
  return c;
}

std::vector<float> openblas(const Product& x) {
  std::vector<float> c = x.c;
  cblas_sgemm(CblasRowMajor, x.trans_a(), x.trans_b(), int(x.m), int(x.n), int(x.k), 1.0f,
      x.a.data(), int(x.lda), x.b.data(), int(x.ldb), x.accumulate ? 1.0f : 0.0f, c.data(),
      int(x.ldc));
  return c;
}

// The kernel's C, or nothing if it declined (a CPU with neither AVX-512 nor AVX2 and FMA).
bool run_kernel(const Product& x, std::vector<float>& c) {
  c = x.c;
  return small_sgemm(x.trans_a(), x.trans_b(), x.m, x.n, x.k, x.a.data(), x.lda, x.b.data(), x.ldb,
      c.data(), x.ldc, x.accumulate);
}

bool kernel_runs_here() {
  return ag::detail::small_sgemm_makes(CblasNoTrans, CblasNoTrans, 1, 1, 1);
}

// Whether OpenBLAS's products of these sizes are one fma per p too: on its AVX-512 kernels, the
// ones it runs on an AVX-512 CPU (ctest sets OPENBLAS_CORETYPE to them: tests/CMakeLists.txt).
bool openblas_is_one_fma_per_p() {
#if defined(__x86_64__)
  return __builtin_cpu_supports("avx512f");
#else
  return false;
#endif
}

}  // namespace

TEST_CASE("the small float32 kernel is one fma per p in order, and OpenBLAS's bits", "[gemm]") {
  if (!kernel_runs_here()) {
    WARN(
        "this CPU has neither AVX-512 nor AVX2 and FMA: ag's products of these sizes are the "
        "library's");
    return;
  }
  std::mt19937 rng(7);
  int checked = 0;
  for (const Bounds bounds : {kOpenblasBits, kWholeKernel})
    for (int trial = 0; trial < 500; ++trial)
      for (const auto& [a_transposed, b_transposed] :
          {std::pair{false, false}, std::pair{false, true}, std::pair{true, false}})
        for (bool accumulate : {false, true}) {
          const Product x = random_product(rng, a_transposed, b_transposed, accumulate, bounds);
          INFO("m " << x.m << " n " << x.n << " k " << x.k << " A" << (a_transposed ? "ᵀ" : "")
                    << " B" << (b_transposed ? "ᵀ" : "") << (accumulate ? " accumulate" : ""));
          std::vector<float> c;
          REQUIRE(run_kernel(x, c));
          REQUIRE(same_bits(c, one_fma_per_p(x)));  // C's padding between rows is untouched too
          // From k = 32 on OpenBLAS splits the sum: there the kernel's bits are its own.
          if (bounds.k == kOpenblasBits.k && openblas_is_one_fma_per_p())
            REQUIRE(same_bits(c, openblas(x)));
          ++checked;
        }
  CHECK(checked == 6000);
}

TEST_CASE("the small float32 kernel makes every size up to its bounds", "[gemm]") {
  if (!kernel_runs_here()) return;
  // Each m, n and k at the edges of the kernel's blocks: rows in blocks of 6 to 12 then 4, 2, 1;
  // columns in registers of 16 (the last one partly); Bᵀ transposed 16 × 16 at a time.
  std::mt19937 rng(3);
  std::normal_distribution<float> normal;
  int checked = 0;
  for (int64_t m : {1, 2, 3, 5, 6, 7, 8, 11, 12, 13, 24, 31, 64})
    for (int64_t n : {1, 15, 16, 17, 31, 32, 33, 47, 48, 49, 63, 64})
      for (int64_t k : {1, 15, 16, 17, 33, 64})
        for (const auto& [a_transposed, b_transposed] :
            {std::pair{false, false}, std::pair{false, true}, std::pair{true, false}}) {
          Product x;
          x.a_transposed = a_transposed, x.b_transposed = b_transposed;
          x.m = m, x.n = n, x.k = k;
          x.lda = (a_transposed ? m : k) + 1, x.ldb = (b_transposed ? k : n) + 1, x.ldc = n + 1;
          x.a.resize(std::size_t((a_transposed ? k : m) * x.lda));
          x.b.resize(std::size_t((b_transposed ? n : k) * x.ldb));
          x.c.resize(std::size_t(m * x.ldc));
          for (auto* values : {&x.a, &x.b, &x.c})
            for (float& v : *values) v = normal(rng);
          INFO("m " << m << " n " << n << " k " << k << " A" << (a_transposed ? "ᵀ" : "") << " B"
                    << (b_transposed ? "ᵀ" : ""));
          std::vector<float> c;
          REQUIRE(run_kernel(x, c));
          REQUIRE(same_bits(c, one_fma_per_p(x)));
          ++checked;
        }
  CHECK(checked == 13 * 12 * 6 * 3);
}

TEST_CASE("the small float32 kernel carries inf and NaN as BLAS does", "[gemm]") {
  if (!kernel_runs_here()) return;
  constexpr float kInf = std::numeric_limits<float>::infinity();
  std::mt19937 rng(11);
  Product x = random_product(rng, false, true, false);
  x.a[0] = kInf;  // row 0 of C: ±inf, or NaN where inf·0 or inf − inf
  x.b[0] = std::numeric_limits<float>::quiet_NaN();                 // column 0 of C: NaN
  x.c.assign(x.c.size(), std::numeric_limits<float>::quiet_NaN());  // beta = 0: never read
  std::vector<float> c;
  REQUIRE(run_kernel(x, c));
  // inf and NaN where OpenBLAS has them, and elsewhere the definition's values (OpenBLAS's own
  // where it is one fma per p: openblas_is_one_fma_per_p).
  const std::vector<float> blas = openblas(x), definition = one_fma_per_p(x);
  for (int64_t i = 0; i < x.m; ++i)
    for (int64_t j = 0; j < x.n; ++j) {
      const float got = c[i * x.ldc + j], want = blas[i * x.ldc + j];
      INFO("C[" << i << ", " << j << "] = " << got << ", OpenBLAS " << want);
      CHECK(std::isnan(got) == std::isnan(want));
      CHECK(std::isinf(got) == std::isinf(want));
      if (!std::isnan(got)) CHECK(got == definition[i * x.ldc + j]);
      if (i > 0 && j > 0) CHECK(std::isfinite(got));
    }
}

TEST_CASE("the small float32 kernel declines what it does not make, and leaves C alone", "[gemm]") {
  const std::vector<float> a(80 * 80, 1.0f), b(80 * 80, 1.0f);
  std::vector<float> c(80 * 80, 5.0f);
  const auto declines = [&](CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int64_t m, int64_t n,
                            int64_t k) {
    return !small_sgemm(ta, tb, m, n, k, a.data(), 80, b.data(), 80, c.data(), 80, false);
  };
  CHECK(declines(CblasTrans, CblasTrans, 4, 4, 4));  // Aᵀ·Bᵀ: OpenBLAS's
  CHECK(declines(CblasNoTrans, CblasNoTrans, 65, 4, 4));
  CHECK(declines(CblasNoTrans, CblasNoTrans, 4, 65, 4));
  CHECK(declines(CblasNoTrans, CblasNoTrans, 4, 4, 65));
  CHECK(declines(CblasNoTrans, CblasNoTrans, 0, 4, 4));
  CHECK(declines(CblasNoTrans, CblasNoTrans, 4, 4, 0));
  CHECK(std::all_of(c.begin(), c.end(), [](float v) { return v == 5.0f; }));
}

// Run by ctest with AG_SMALL_GEMM set (tests/autograd/CMakeLists.txt): "off" sends every product
// to the libraries, and any value but on or off is a ValueError naming the variable at the first
// product. Hidden: the normal runs leave it out. (x86-64 only: elsewhere there is no kernel.)
TEST_CASE("the small float32 kernel: AG_SMALL_GEMM=off declines, a bad value is an error",
    "[.small_gemm_env]") {
#if defined(__x86_64__)
  const char* value = std::getenv("AG_SMALL_GEMM");
  REQUIRE(value != nullptr);
  const float one = 1;
  float c = 0;
  const auto product = [&] {
    return small_sgemm(CblasNoTrans, CblasNoTrans, 1, 1, 1, &one, 1, &one, 1, &c, 1, false);
  };
  if (std::string(value) == "off") {
    CHECK_FALSE(product());
    CHECK(c == 0);
  } else {
    CHECK_THROWS_AS(product(), ag::ValueError);
    CHECK_THROWS_WITH(product(), Catch::Contains(std::string("AG_SMALL_GEMM=") + value) &&
                                     Catch::Contains("expected on or off"));
  }
#endif
}
