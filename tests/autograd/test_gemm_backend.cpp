// The GEMM backends (autograd/gemm_backend.h): every backend this build has makes the products of
// every operand layout, forward and backward, to float32 rounding of a float64 reference, and
// each gives the same bits run after run. The products are large enough (m·n·k ≥
// kOnednnMinMultiplyAdds) that oneDNN makes them where it is the backend; scripts/test.sh runs
// the whole suite once per built backend (AG_GEMM_BACKEND).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>

#include "autograd/autograd.h"
#include "autograd/gemm_backend.h"
#include "autograd/ops.h"
#include "autograd/parallel.h"

using namespace ag;

namespace {
// C = A · B in float64 from float32 values, A (m, k) and B (k, n) row-major.
std::vector<double> reference_product(
    const std::vector<double>& a, const std::vector<double>& b, int64_t m, int64_t k, int64_t n) {
  std::vector<double> c(m * n, 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t q = 0; q < k; ++q)
      for (int64_t j = 0; j < n; ++j) c[i * n + j] += a[i * k + q] * b[q * n + j];
  return c;
}

// Largest |actual - expected| relative to the largest |expected|.
double relative_error(const std::vector<float>& actual, const std::vector<double>& expected) {
  REQUIRE(actual.size() == expected.size());
  double largest = 0, diff = 0;
  for (std::size_t i = 0; i < actual.size(); ++i) {
    largest = std::max(largest, std::fabs(expected[i]));
    diff = std::max(diff, std::fabs(double(actual[i]) - expected[i]));
  }
  return diff / largest;
}

}  // namespace

TEST_CASE("gemm backends: openblas is always built, names round-trip, the guard restores",
    "[gemm_backend]") {
  const std::vector<GemmBackend> built = built_gemm_backends();
  REQUIRE(!built.empty());
  CHECK(built.front() == GemmBackend::openblas);
  CHECK(to_string(GemmBackend::openblas) == "openblas");
  CHECK(to_string(GemmBackend::onednn) == "onednn");
  const GemmBackend before = get_gemm_backend();
  for (GemmBackend backend : built) {
    GemmBackendGuard guard(backend);
    CHECK(get_gemm_backend() == backend);
  }
  CHECK(get_gemm_backend() == before);
  if (built.size() == 1) {  // no oneDNN in this build: asking for it names it
    CHECK_THROWS_AS(set_gemm_backend(GemmBackend::onednn), ValueError);
    CHECK_THROWS_WITH(set_gemm_backend(GemmBackend::onednn),
        Catch::Contains("set_gemm_backend") && Catch::Contains("onednn"));
    CHECK(get_gemm_backend() == before);
  }
}

TEST_CASE(
    "gemm backends: each makes large float32 products of every layout, forward and "
    "backward, to float32 rounding",
    "[gemm_backend]") {
  // 96 × 72 · 72 × 80: 552,960 multiply-adds, above kOnednnMinMultiplyAdds.
  const int64_t m = 96, k = 72, n = 80;
  REQUIRE(m * n * k >= kOnednnMinMultiplyAdds);
  for (GemmBackend backend : built_gemm_backends()) {
    GemmBackendGuard guard(backend);
    for (bool transpose_a : {false, true})
      for (bool transpose_b : {false, true}) {
        CAPTURE(to_string(backend), transpose_a, transpose_b);
        Generator g(11);
        // Stored transposed where asked, so that the product sees a transposed view: BLAS's flag.
        Tensor a_storage = transpose_a ? randn({k, m}, g) : randn({m, k}, g);
        Tensor b_storage = transpose_b ? randn({n, k}, g) : randn({k, n}, g);
        a_storage.requires_grad_();
        b_storage.requires_grad_();
        Tensor a = transpose_a ? a_storage.transpose(0, 1) : a_storage;  // (m, k)
        Tensor b = transpose_b ? b_storage.transpose(0, 1) : b_storage;  // (k, n)
        Tensor c = matmul(a, b);                                         // (m, n)
        const std::vector<double> a_values = a.contiguous().to_vector<double>();
        const std::vector<double> b_values = b.contiguous().to_vector<double>();
        CHECK(relative_error(c.to_vector<float>(), reference_product(a_values, b_values, m, k, n)) <
              1e-6);

        // Backward of sum(C · W): dA = W · Bᵀ (m × n · n × k), dB = Aᵀ · W (k × m · m × n).
        Tensor w = randn({m, n}, g);
        sum(mul(c, w)).backward();
        const std::vector<double> w_values = w.to_vector<double>();
        std::vector<double> b_t(n * k), a_t(k * m);
        for (int64_t q = 0; q < k; ++q) {
          for (int64_t j = 0; j < n; ++j) b_t[j * k + q] = b_values[q * n + j];
          for (int64_t i = 0; i < m; ++i) a_t[q * m + i] = a_values[i * k + q];
        }
        const std::vector<double> grad_a = reference_product(w_values, b_t, m, n, k);  // (m, k)
        const std::vector<double> grad_b = reference_product(a_t, w_values, k, m, n);  // (k, n)
        // The gradients of the stored tensors: transposed back where the storage was.
        Tensor stored_grad_a = transpose_a ? a_storage.grad().transpose(0, 1) : a_storage.grad();
        Tensor stored_grad_b = transpose_b ? b_storage.grad().transpose(0, 1) : b_storage.grad();
        CHECK(relative_error(stored_grad_a.contiguous().to_vector<float>(), grad_a) < 1e-6);
        CHECK(relative_error(stored_grad_b.contiguous().to_vector<float>(), grad_b) < 1e-6);
      }
  }
}

TEST_CASE(
    "gemm backends: a batched product on 2 threads gives the same bits run after run, and "
    "the backends agree to float32 rounding",
    "[gemm_backend]") {
  NumThreadsGuard two(2);
  Generator g(5);
  Tensor a = randn({6, 128, 64}, g), b = randn({6, 64, 96}, g);  // 786,432 multiply-adds each
  std::vector<std::vector<float>> per_backend;
  for (GemmBackend backend : built_gemm_backends()) {
    GemmBackendGuard guard(backend);
    const std::vector<float> first = matmul(a, b).to_vector<float>();
    CHECK(matmul(a, b).to_vector<float>() == first);  // bit for bit
    per_backend.push_back(first);
  }
  const std::vector<float>& openblas = per_backend.front();
  for (std::size_t i = 1; i < per_backend.size(); ++i) {
    double largest = 0, diff = 0;
    for (std::size_t j = 0; j < openblas.size(); ++j) {
      largest = std::max(largest, double(std::fabs(openblas[j])));
      diff = std::max(diff, double(std::fabs(openblas[j] - per_backend[i][j])));
    }
    CHECK(diff / largest < 1e-6);
  }
}

TEST_CASE("gemm backends: without AVX-512, the oneDNN backend makes attention's larger heads",
    "[gemm_backend]") {
  // A 64 × 64 × 32 head (2^17 multiply-adds: onednn_makes) goes to oneDNN before ag's small
  // kernel only with the oneDNN backend on a CPU without AVX-512 (there oneDNN's AVX2 kernels are
  // the faster); d2l's smaller heads stay the kernel's everywhere.
  for (GemmBackend backend : built_gemm_backends()) {
    GemmBackendGuard guard(backend);
    INFO(to_string(backend) << (onednn_has_avx512_kernels() ? ", AVX-512" : ", no AVX-512"));
    const bool expected = backend == GemmBackend::onednn && !onednn_has_avx512_kernels();
    CHECK(onednn_before_small_kernel(false, true, 64, 64, 32) == expected);   // q kᵀ
    CHECK(onednn_before_small_kernel(false, false, 64, 32, 64) == expected);  // weights · v
    CHECK_FALSE(onednn_before_small_kernel(false, true, 32, 32, 32));         // below 2^17
    CHECK_FALSE(onednn_before_small_kernel(true, false, 256, 256, 64));  // tall Aᵀ · B: OpenBLAS
  }
}

TEST_CASE("gemm backends: a tall Aᵀ · B is OpenBLAS's under either backend (onednn_makes)",
    "[gemm_backend]") {
  // Aᵀ · B with m ≥ min_rows and m · n ≥ min_outputs (this CPU's openblas_transposed_a_rule)
  // stays on OpenBLAS, where oneDNN is slower: every backend gives OpenBLAS's bits for it.
  // k = 1000: long enough that oneDNN's blocking of the sum would give other bits than OpenBLAS's.
  // One thread, so that the product is one call of m rows (threads split a product's rows).
  NumThreadsGuard one(1);
  const TransposedARule rule = openblas_transposed_a_rule();
  CHECK(rule.min_outputs == (onednn_has_avx512_kernels() ? int64_t(1) << 17 : int64_t(1) << 16));
  const int64_t m = std::max<int64_t>(rule.min_rows, 256), n = rule.min_outputs / m, k = 1000;
  CHECK_FALSE(onednn_makes(true, false, m, n, k));
  // Each bound on its own, and the other layouts of the same sizes, go to oneDNN.
  if (rule.min_rows > 1) CHECK(onednn_makes(true, false, rule.min_rows - 1, 2 * n, k));
  CHECK(onednn_makes(true, false, m, n - 1, k));
  CHECK(onednn_makes(false, false, m, n, k));
  CHECK(onednn_makes(false, true, m, n, k));
  CHECK_FALSE(onednn_makes(false, false, 16, 16, 16));  // below kOnednnMinMultiplyAdds

  Generator g(7);
  Tensor a_storage = randn({k, m}, g), b = randn({k, n}, g);
  Tensor a = a_storage.transpose(0, 1);  // (m, k), read through BLAS's transpose flag
  std::vector<std::vector<float>> per_backend;
  for (GemmBackend backend : built_gemm_backends()) {
    GemmBackendGuard guard(backend);
    per_backend.push_back(matmul(a, b).to_vector<float>());  // (m, n)
  }
  for (const std::vector<float>& product : per_backend) CHECK(product == per_backend.front());
}

// Run by ctest with AG_GEMM_BACKEND set to a bad value and AG_GEMM_BACKEND_EXPECT naming a piece
// of the message (tests/autograd/CMakeLists.txt): the first look at the backend throws
// ValueError naming the variable and its value. Hidden: the normal runs leave it out.
TEST_CASE("gemm backends: a bad AG_GEMM_BACKEND is an error naming it", "[.gemm_backend_env]") {
  const char* value = std::getenv("AG_GEMM_BACKEND");
  const char* expect = std::getenv("AG_GEMM_BACKEND_EXPECT");
  REQUIRE(value != nullptr);
  REQUIRE(expect != nullptr);
  CHECK_THROWS_AS(get_gemm_backend(), ValueError);
  CHECK_THROWS_WITH(get_gemm_backend(),
      Catch::Contains(std::string("AG_GEMM_BACKEND=") + value) && Catch::Contains(expect));
  // A product needs the backend only when oneDNN could make it; a float64 one never does.
  Generator g(1);
  CHECK_NOTHROW(matmul(randn({4, 4}, g, float64), randn({4, 4}, g, float64)));
}
