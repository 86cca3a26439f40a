// The machine's float32 matmul peak, as the benchmarks report it (ag-bench-train, ag-bench-lm):
// each GEMM library the build has multiplies two 2048×2048 matrices into a preallocated output
// (all touched first) on `threads` threads — one untimed call, then the best of 5 timed calls —
// and the best library's GFLOP/s is the peak that MFU divides by. OpenBLAS always; oneDNN's
// dnnl_sgemm where ag was built with it (AG_BENCH_HAVE_ONEDNN, autograd/gemm_backend.h).
#pragma once

#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <functional>

#include "autograd/ops.h"

#ifdef AG_BENCH_HAVE_ONEDNN
#include <dnnl.h>
#include <omp.h>
#endif

namespace bench {

struct SgemmPeak {
  double openblas = 0;  // GFLOP/s
  double onednn = 0;    // 0 where the build has no oneDNN
  double best() const { return std::max(openblas, onednn); }
};

inline volatile float g_sgemm_sink = 0;

// Best of 5 calls of `product` (C = A · B, n × n, row-major), in GFLOP/s.
inline double best_gflops(
    int n, const std::function<void(const float*, const float*, float*)>& product) {
  ag::Generator gen(7);
  const ag::Tensor a = ag::randn({n, n}, gen), b = ag::randn({n, n}, gen), c = ag::zeros({n, n});
  auto call = [&] {
    product(a.data<float>(), b.data<float>(), c.data<float>());
    g_sgemm_sink = c.data<float>()[0];
  };
  call();
  double best = 1e30;
  for (int i = 0; i < 5; ++i) {
    const auto start = std::chrono::steady_clock::now();
    call();
    best = std::min(
        best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return 2.0 * n * double(n) * n / best * 1e-9;
}

inline SgemmPeak measure_sgemm_peak(int threads) {
  constexpr int n = 2048;
  SgemmPeak peak;
  // The libraries' own threads here (ag keeps each product on one thread and splits them itself).
  openblas_set_num_threads(threads);
  peak.openblas = best_gflops(n, [](const float* a, const float* b, float* c) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
  });
  openblas_set_num_threads(1);
#ifdef AG_BENCH_HAVE_ONEDNN
  const int caller_threads = omp_get_max_threads();
  omp_set_num_threads(threads);
  peak.onednn = best_gflops(n, [](const float* a, const float* b, float* c) {
    dnnl_sgemm('N', 'N', n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
  });
  omp_set_num_threads(caller_threads);
#endif
  return peak;
}

}  // namespace bench
