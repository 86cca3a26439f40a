// Which library makes ag's matrix products (autograd/gemm_backend.h), and the call into oneDNN.
#include "autograd/gemm_backend.h"

#include <atomic>
#include <cstdlib>
#include <string_view>

#include "autograd/detail/blas.h"
#include "autograd/error.h"

#ifdef AG_HAVE_ONEDNN
#include <dnnl.h>
#include <omp.h>
#endif

namespace ag {
namespace {

constexpr bool kOnednnBuilt =
#ifdef AG_HAVE_ONEDNN
    true;
#else
    false;
#endif

constexpr GemmBackend kDefaultBackend = kOnednnBuilt ? GemmBackend::onednn : GemmBackend::openblas;

// -1 until the first get_gemm_backend() or set_gemm_backend(); then the backend's value.
std::atomic<int> g_backend{-1};

std::string built_names() {
  std::string names;
  for (GemmBackend backend : built_gemm_backends())
    names += (names.empty() ? "" : ", ") + to_string(backend);
  return names;
}

bool is_built(GemmBackend backend) { return backend == GemmBackend::openblas || kOnednnBuilt; }

// The backend AG_GEMM_BACKEND names, or the default when it is unset or empty.
GemmBackend backend_from_environment() {
  const char* value = std::getenv("AG_GEMM_BACKEND");
  if (value == nullptr || *value == '\0') return kDefaultBackend;
  const std::string_view name(value);
  for (GemmBackend backend : {GemmBackend::openblas, GemmBackend::onednn}) {
    if (name != to_string(backend)) continue;
    if (!is_built(backend))
      fail<ValueError>("AG_GEMM_BACKEND=", name, ": this build of ag has no ", name,
          " (built: ", built_names(), "; oneDNN needs libdnnl-dev and AG_WITH_ONEDNN=ON)");
    return backend;
  }
  fail<ValueError>(
      "AG_GEMM_BACKEND=", name, " is not a GEMM backend (expected one of: ", built_names(), ")");
}

}  // namespace

bool onednn_has_avx512_kernels() {
#if defined(__x86_64__)
  static const bool avx512 = __builtin_cpu_supports("avx512f");
  return avx512;
#else
  return false;
#endif
}

std::string to_string(GemmBackend backend) {
  return backend == GemmBackend::onednn ? "onednn" : "openblas";
}

std::vector<GemmBackend> built_gemm_backends() {
  if (kOnednnBuilt) return {GemmBackend::openblas, GemmBackend::onednn};
  return {GemmBackend::openblas};
}

void set_gemm_backend(GemmBackend backend) {
  if (!is_built(backend))
    fail<ValueError>("set_gemm_backend: this build of ag has no ", to_string(backend),
        " (built: ", built_names(), "; oneDNN needs libdnnl-dev and AG_WITH_ONEDNN=ON)");
  g_backend.store(static_cast<int>(backend), std::memory_order_relaxed);
}

GemmBackend get_gemm_backend() {
  const int current = g_backend.load(std::memory_order_relaxed);
  if (current >= 0) return static_cast<GemmBackend>(current);
  const GemmBackend backend = backend_from_environment();  // throws for a bad value, every time
  int unset = -1;  // another thread may have set it meanwhile: that choice stands
  g_backend.compare_exchange_strong(unset, static_cast<int>(backend), std::memory_order_relaxed);
  return static_cast<GemmBackend>(g_backend.load(std::memory_order_relaxed));
}

#ifdef AG_HAVE_ONEDNN
namespace detail {

void onednn_sgemm(CBLAS_TRANSPOSE trans_a, CBLAS_TRANSPOSE trans_b, int64_t m, int64_t n, int64_t k,
    const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  // oneDNN runs its loops on OpenMP threads. ag's pool already splits the work between the cores
  // (autograd/parallel.h), so each call runs on its calling thread alone: one OpenMP thread for
  // the call, then the caller's own setting back.
  const int caller_threads = omp_get_max_threads();
  if (caller_threads != 1) omp_set_num_threads(1);
  const dnnl_status_t status = dnnl_sgemm(trans_a == CblasTrans ? 'T' : 'N',
      trans_b == CblasTrans ? 'T' : 'N', m, n, k, 1.0f, a, lda, b, ldb, beta, c, ldc);
  if (caller_threads != 1) omp_set_num_threads(caller_threads);
  if (status != dnnl_success)
    fail<RuntimeError>("matmul: oneDNN's sgemm failed (dnnl_status_t ", int(status), ") on a ", m,
        "×", k, " · ", k, "×", n, " product");
}

}  // namespace detail
#endif

}  // namespace ag
