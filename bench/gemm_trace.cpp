// gemm_trace.cpp — the matrix products a program makes, counted by shape (LD_PRELOAD shim).
//
//   AG_GEMM_TRACE=medium.shapes AG_GEMM_BACKEND=openblas LD_PRELOAD=build/bench/libag-gemm-trace.so \
//       build/bench/ag-bench-train --config medium --steps 1 --warmup 0 --no-sgemm-peak
//
// (bench/compare_gemm_backends.sh runs it for each configuration.) One step, so the counts are a
// step's; AG_GEMM_BACKEND=openblas, since the products oneDNN makes do not pass through
// cblas_sgemm.
// It stands in for OpenBLAS's cblas_sgemm: every call is counted under its shape, then passed on
// to the real one (found with dlsym(RTLD_NEXT)), so the program computes exactly what it would
// without the shim. At exit it writes one line per distinct shape to the file named by
// AG_GEMM_TRACE:
//
//   calls trans_a trans_b m n k lda ldb ldc beta
//
// (row-major, as ag calls it; trans N or T; beta 0 or 1). bench/bench_gemm_backends.cpp replays
// such a file on each GEMM library the build found (docs/benchmarks.md, "GEMM backends"). Only the
// float products are counted: the benchmarks train in float32.
#include <cblas.h>
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <tuple>

namespace {

using SgemmFunction = void (*)(CBLAS_ORDER, CBLAS_TRANSPOSE, CBLAS_TRANSPOSE, blasint, blasint,
    blasint, float, const float*, blasint, const float*, blasint, float, float*, blasint);

// trans_a, trans_b, m, n, k, lda, ldb, ldc, beta (0 or 1) -> calls
using Shape = std::tuple<bool, bool, int, int, int, int, int, int, int>;

std::mutex& shapes_mutex() {
  static std::mutex mutex;
  return mutex;
}
std::map<Shape, long long>& shapes() {
  static auto* counts = new std::map<Shape, long long>;  // outlives the destructor below
  return *counts;
}

SgemmFunction real_sgemm() {
  static const auto real = reinterpret_cast<SgemmFunction>(dlsym(RTLD_NEXT, "cblas_sgemm"));
  if (real == nullptr) {
    std::fprintf(stderr, "gemm_trace: the real cblas_sgemm was not found\n");
    std::abort();
  }
  return real;
}

}  // namespace

extern "C" void cblas_sgemm(enum CBLAS_ORDER order, enum CBLAS_TRANSPOSE trans_a,
    enum CBLAS_TRANSPOSE trans_b, blasint m, blasint n, blasint k, float alpha, const float* a,
    blasint lda, const float* b, blasint ldb, float beta, float* c, blasint ldc) {
  if (order != CblasRowMajor || alpha != 1.0f || (beta != 0.0f && beta != 1.0f)) {
    std::fprintf(stderr,
        "gemm_trace: a call outside what the trace records (column-major, "
        "alpha != 1 or beta not 0/1)\n");
    std::abort();
  }
  {
    std::lock_guard<std::mutex> hold(shapes_mutex());
    ++shapes()[Shape{trans_a == CblasTrans, trans_b == CblasTrans, m, n, k, lda, ldb, ldc,
        beta == 1.0f ? 1 : 0}];
  }
  real_sgemm()(order, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

namespace {

__attribute__((destructor)) void write_trace() {
  const char* path = std::getenv("AG_GEMM_TRACE");
  if (path == nullptr || shapes().empty()) return;
  std::FILE* file = std::fopen(path, "w");
  if (file == nullptr) {
    std::fprintf(stderr, "gemm_trace: cannot write %s\n", path);
    return;
  }
  std::fprintf(file, "# calls trans_a trans_b m n k lda ldb ldc beta\n");
  for (const auto& [shape, calls] : shapes()) {
    const auto [trans_a, trans_b, m, n, k, lda, ldb, ldc, beta] = shape;
    std::fprintf(file, "%lld %c %c %d %d %d %d %d %d %d\n", calls, trans_a ? 'T' : 'N',
        trans_b ? 'T' : 'N', m, n, k, lda, ldb, ldc, beta);
  }
  std::fclose(file);
}

}  // namespace
