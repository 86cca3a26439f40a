// ag-bench-gemm-backends — the products of one training step, replayed on each GEMM library.
//
//   build/bench/ag-bench-gemm-backends bench/gemm_shapes/medium.shapes --group 256
//
// A shapes file (bench/gemm_trace.c writes one from a real run: bench/compare_gemm_backends.sh) lists
// every distinct product of a configuration's training step and how often the step makes it:
//
//   calls trans_a trans_b m n k lda ldb ldc beta        (row-major, as ag calls cblas_sgemm)
//
// For each shape and each library the build found, the program times the step's calls of that
// shape and prints ms per step, per shape and in total:
//   openblas   cblas_sgemm (ag's default backend)
//   ag         ag's own kernel for products up to 64 × 64 with k ≤ 64 (autograd/small_gemm.cpp, on
//              AVX-512 CPUs; OpenBLAS's time for the shapes it does not make)
//   blis       bli_sgemm (BLIS's typed API, one thread)
//   onednn     dnnl_sgemm (oneDNN's row-major sgemm, one thread)
//   libxsmm    a kernel JIT-compiled for the shape by libxsmm_smmdispatch, looked up per call
//              (OpenBLAS where libxsmm has no kernel for the shape: the column says so)
// and, for shapes called at least --group times a step (the per-head products of attention, one
// per batch row and head), the same products made in groups of --group:
//   onednn-batched   one dnnl::matmul primitive over the group (a batch dimension with strides)
//   libxsmm-batched  the kernel looked up once, then called for each product of the group
// Each product of a shape gets its own operands (a, b, c cycling through up to 64 MiB), so small
// products run from the caches as they do in the step and large ones do not all hit in L2.
// Times are the best of --repeats rounds (each round makes all of the step's calls of the shape).
// One thread: ag's pool splits products itself, so each library must run on one core.
#include <cblas.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "autograd/detail/blas.h"
#include "autograd/gemm_backend.h"

#ifdef AG_BENCH_HAVE_BLIS
#include <blis.h>
#endif
#ifdef AG_BENCH_HAVE_ONEDNN
#include <omp.h>
#include <dnnl.hpp>
#endif
#ifdef AG_BENCH_HAVE_LIBXSMM
#include <libxsmm.h>
#endif

namespace {

struct Shape {
  long calls = 0;
  bool trans_a = false, trans_b = false;
  long m = 0, n = 0, k = 0, lda = 0, ldb = 0, ldc = 0;
  bool accumulate = false;  // beta = 1

  // Elements of each operand's storage (row-major, leading dimension as given).
  long a_size() const { return (trans_a ? k : m) * lda; }
  long b_size() const { return (trans_b ? n : k) * ldb; }
  long c_size() const { return m * ldc; }
  std::string str() const {
    std::ostringstream s;
    s << (trans_a ? 'T' : 'N') << (trans_b ? 'T' : 'N') << ' ' << m << 'x' << n << 'x' << k;
    return s.str();
  }
};

std::vector<Shape> read_shapes(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read shapes file " + path);
  std::vector<Shape> shapes;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    Shape s;
    char ta = 0, tb = 0;
    int beta = 0;
    fields >> s.calls >> ta >> tb >> s.m >> s.n >> s.k >> s.lda >> s.ldb >> s.ldc >> beta;
    const bool sane = fields && s.calls > 0 && (ta == 'N' || ta == 'T') &&
                      (tb == 'N' || tb == 'T') && s.m > 0 && s.n > 0 && s.k > 0 && s.m <= 65536 &&
                      s.n <= 65536 && s.k <= 65536 && (beta == 0 || beta == 1);
    if (!sane) throw std::runtime_error(path + ":" + std::to_string(number) + ": bad shape line");
    s.trans_a = ta == 'T';
    s.trans_b = tb == 'T';
    s.accumulate = beta == 1;
    if (s.lda < (s.trans_a ? s.m : s.k) || s.ldb < (s.trans_b ? s.k : s.n) || s.ldc < s.n)
      throw std::runtime_error(
          path + ":" + std::to_string(number) + ": leading dimension too small");
    shapes.push_back(s);
  }
  return shapes;
}

// The operands of each of a shape's calls: `sets` distinct (a, b, c), used in turn.
struct Operands {
  long sets = 1;
  std::vector<float> a, b, c;
  explicit Operands(const Shape& s) {
    const long per_set = s.a_size() + s.b_size() + s.c_size();
    const long budget = 16L << 20;  // floats: 64 MiB
    sets = std::clamp<long>(budget / per_set, 1, s.calls);
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    a.resize(sets * s.a_size());
    b.resize(sets * s.b_size());
    c.assign(sets * s.c_size(), 0.0f);
    for (float& x : a) x = uniform(rng);
    for (float& x : b) x = uniform(rng);
  }
  float* a_of(const Shape& s, long i) { return a.data() + (i % sets) * s.a_size(); }
  float* b_of(const Shape& s, long i) { return b.data() + (i % sets) * s.b_size(); }
  float* c_of(const Shape& s, long i) { return c.data() + (i % sets) * s.c_size(); }
};

// One way of making products: `run(shape, operands, first, count)` makes calls first..first+count-1.
struct Backend {
  std::string name;
  std::function<bool(const Shape&)> supports;
  std::function<void(const Shape&, Operands&, long, long)> run;
  bool batched = false;  // makes a group of products in one call (only shapes with calls >= group)
};

using Clock = std::chrono::steady_clock;

// Best of `repeats` rounds of all the step's calls of a shape, in ms.
double time_shape(
    const Backend& backend, const Shape& s, Operands& operands, long group, int repeats) {
  const long chunk = backend.batched ? group : s.calls;
  auto round = [&] {
    for (long first = 0; first < s.calls; first += chunk)
      backend.run(s, operands, first, std::min(chunk, s.calls - first));
  };
  round();  // warm-up: JIT, primitive creation, first touch
  double best = 1e300;
  for (int r = 0; r < repeats; ++r) {
    const auto start = Clock::now();
    round();
    best = std::min(best, std::chrono::duration<double, std::milli>(Clock::now() - start).count());
  }
  return best;
}

void openblas_run(const Shape& s, Operands& o, long first, long count) {
  for (long i = first; i < first + count; ++i)
    cblas_sgemm(CblasRowMajor, s.trans_a ? CblasTrans : CblasNoTrans,
        s.trans_b ? CblasTrans : CblasNoTrans, int(s.m), int(s.n), int(s.k), 1.0f, o.a_of(s, i),
        int(s.lda), o.b_of(s, i), int(s.ldb), s.accumulate ? 1.0f : 0.0f, o.c_of(s, i), int(s.ldc));
}

// ag's own kernel, where it makes the shape.
bool ag_kernel_makes(const Shape& s) {
  return ag::detail::small_sgemm_makes(
      s.trans_a ? CblasTrans : CblasNoTrans, s.trans_b ? CblasTrans : CblasNoTrans, s.m, s.n, s.k);
}
void ag_kernel_run(const Shape& s, Operands& o, long first, long count) {
  for (long i = first; i < first + count; ++i)
    ag::detail::small_sgemm(s.trans_a ? CblasTrans : CblasNoTrans,
        s.trans_b ? CblasTrans : CblasNoTrans, s.m, s.n, s.k, o.a_of(s, i), s.lda, o.b_of(s, i),
        s.ldb, o.c_of(s, i), s.ldc, s.accumulate);
}

#ifdef AG_BENCH_HAVE_BLIS
void blis_run(const Shape& s, Operands& o, long first, long count) {
  float one = 1.0f, beta = s.accumulate ? 1.0f : 0.0f;
  for (long i = first; i < first + count; ++i)  // row-major: row stride = leading dim, column 1
    bli_sgemm(s.trans_a ? BLIS_TRANSPOSE : BLIS_NO_TRANSPOSE,
        s.trans_b ? BLIS_TRANSPOSE : BLIS_NO_TRANSPOSE, s.m, s.n, s.k, &one, o.a_of(s, i), s.lda, 1,
        o.b_of(s, i), s.ldb, 1, &beta, o.c_of(s, i), s.ldc, 1);
}
#endif

#ifdef AG_BENCH_HAVE_ONEDNN
void onednn_run(const Shape& s, Operands& o, long first, long count) {
  for (long i = first; i < first + count; ++i)
    dnnl_sgemm(s.trans_a ? 'T' : 'N', s.trans_b ? 'T' : 'N', s.m, s.n, s.k, 1.0f, o.a_of(s, i),
        s.lda, o.b_of(s, i), s.ldb, s.accumulate ? 1.0f : 0.0f, o.c_of(s, i), s.ldc);
}

// One matmul primitive over a group of products whose operands sit `set` floats apart: a batch
// dimension with that stride (how a batched attention kernel would see its heads), made once
// per (shape, group) and reused.
struct OnednnBatched {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  std::map<std::pair<std::string, long>, dnnl::matmul> primitives;

  void run(const Shape& s, Operands& o, long first, long count) {
    // A group may wrap around the operand sets; those products are made in two parts.
    const long start = first % o.sets;
    const long fits = std::min(count, o.sets - start);
    run_group(s, o, start, fits);
    if (fits < count) run(s, o, first + fits, count - fits);
  }

  void run_group(const Shape& s, Operands& o, long start, long count) {
    using dims = dnnl::memory::dims;
    const auto f32 = dnnl::memory::data_type::f32;
    const auto key = std::make_pair(s.str() + "/" + std::to_string(s.lda) + "/" +
                                        std::to_string(s.ldb) + "/" + std::to_string(s.ldc),
        count);
    // Logical shapes (count, m, k) · (count, k, n) -> (count, m, n); transposes are strides.
    const dims a_strides = s.trans_a ? dims{s.a_size(), 1, s.lda} : dims{s.a_size(), s.lda, 1};
    const dims b_strides = s.trans_b ? dims{s.b_size(), 1, s.ldb} : dims{s.b_size(), s.ldb, 1};
    const dnnl::memory::desc a_md({count, s.m, s.k}, f32, a_strides);
    const dnnl::memory::desc b_md({count, s.k, s.n}, f32, b_strides);
    const dnnl::memory::desc c_md({count, s.m, s.n}, f32, dims{s.c_size(), s.ldc, 1});
    auto found = primitives.find(key);
    if (found == primitives.end()) {
      dnnl::primitive_attr attr;
      if (s.accumulate) {
        dnnl::post_ops ops;
        ops.append_sum(1.0f);
        attr.set_post_ops(ops);
      }
      const dnnl::matmul::desc desc(a_md, b_md, c_md);
      found =
          primitives.emplace(key, dnnl::matmul(dnnl::matmul::primitive_desc(desc, attr, engine)))
              .first;
    }
    dnnl::memory a(a_md, engine, o.a_of(s, start));
    dnnl::memory b(b_md, engine, o.b_of(s, start));
    dnnl::memory c(c_md, engine, o.c_of(s, start));
    found->second.execute(stream, {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}});
    stream.wait();
  }
};
#endif

#ifdef AG_BENCH_HAVE_LIBXSMM
// Row-major C = op(A)·op(B) is column-major Cᵀ = op(B)ᵀ·op(A)ᵀ: libxsmm (column-major) gets B
// as its first operand and A as its second, m and n swapped.
libxsmm_smmfunction xsmm_kernel(const Shape& s) {
  const libxsmm_blasint m = s.n, n = s.m, k = s.k, lda = s.ldb, ldb = s.lda, ldc = s.ldc;
  const float alpha = 1.0f, beta = s.accumulate ? 1.0f : 0.0f;
  const int flags =
      (s.trans_b ? LIBXSMM_GEMM_FLAG_TRANS_A : 0) | (s.trans_a ? LIBXSMM_GEMM_FLAG_TRANS_B : 0);
  return libxsmm_smmdispatch(m, n, k, &lda, &ldb, &ldc, &alpha, &beta, &flags, nullptr);
}

void xsmm_run(const Shape& s, Operands& o, long first, long count, bool lookup_each) {
  libxsmm_smmfunction kernel = xsmm_kernel(s);
  for (long i = first; i < first + count; ++i) {
    if (lookup_each) kernel = xsmm_kernel(s);
    kernel(o.b_of(s, i), o.a_of(s, i), o.c_of(s, i));
  }
}
#endif

// Largest difference between a backend's result and OpenBLAS's for the first product of a shape,
// relative to the largest |entry| of OpenBLAS's: a wrong call would show here.
double check_against_openblas(const Backend& backend, const Shape& s, long group) {
  Shape one = s;
  one.calls = backend.batched ? std::min(group, s.calls) : 1;
  Operands reference(one), tested(one);
  openblas_run(one, reference, 0, one.calls);
  backend.run(one, tested, 0, one.calls);
  double largest = 0, diff = 0;
  for (size_t i = 0; i < reference.c.size(); ++i) {
    largest = std::max(largest, double(std::fabs(reference.c[i])));
    diff = std::max(diff, double(std::fabs(reference.c[i] - tested.c[i])));
  }
  return largest > 0 ? diff / largest : diff;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "ag-bench-gemm-backends: a training step's products (a shapes file from "
      "bench/compare_gemm_backends.sh) timed on each GEMM library the build found"};
  std::string path;
  long group = 256;
  int repeats = 7;
  app.add_option("shapes", path, "the shapes file")->required();
  app.add_option("--group", group, "products per batched call (the step's batch x heads)")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--repeats", repeats, "rounds per shape; the best is kept")
      ->check(CLI::Range(1, 1000));
  CLI11_PARSE(app, argc, argv);

  std::vector<Shape> shapes;
  try {
    shapes = read_shapes(path);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ag-bench-gemm-backends: %s\n", e.what());
    return 1;
  }

  openblas_set_num_threads(1);
  std::vector<Backend> backends;
  auto always = [](const Shape&) { return true; };
  backends.push_back({"openblas", always, openblas_run});
  backends.push_back({"ag", ag_kernel_makes, ag_kernel_run});
#ifdef AG_BENCH_HAVE_BLIS
  bli_thread_set_num_threads(1);
  backends.push_back({"blis", always, blis_run});
#endif
#ifdef AG_BENCH_HAVE_ONEDNN
  omp_set_num_threads(1);
  backends.push_back({"onednn", always, onednn_run});
  auto batched = std::make_shared<OnednnBatched>();
  backends.push_back({"onednn-batched", always,
      [batched](const Shape& s, Operands& o, long first, long count) {
        batched->run(s, o, first, count);
      },
      true});
#endif
#ifdef AG_BENCH_HAVE_LIBXSMM
  libxsmm_init();
  auto jits = [](const Shape& s) { return xsmm_kernel(s) != nullptr; };
  backends.push_back({"libxsmm", jits, [](const Shape& s, Operands& o, long first, long count) {
                        xsmm_run(s, o, first, count, true);
                      }});
  backends.push_back({"libxsmm-batched", jits,
      [](const Shape& s, Operands& o, long first, long count) {
        xsmm_run(s, o, first, count, false);
      },
      true});
#endif

  std::printf("%s: ms per step of each shape's calls (best of %d rounds), 1 thread\n", path.c_str(),
      repeats);
  std::printf("%-22s %6s %9s", "shape (ta tb m x n x k)", "calls", "MFLOP");
  for (const Backend& b : backends) std::printf(" %15s", b.name.c_str());
  std::printf("\n");
  std::vector<double> totals(backends.size(), 0.0);
  double best_total = 0, total_flops = 0;
  // ag's choice (autograd/detail/blas.h): its own kernel where it makes the shape (on a CPU
  // without AVX-512, where oneDNN does not), else oneDNN where ag::onednn_makes says so (from
  // kOnednnMinMultiplyAdds on, but for tall Aᵀ · B), else OpenBLAS
  double ag_rule_total = 0;
  bool fallbacks = false;
  for (const Shape& s : shapes) {
    Operands operands(s);
    const double flops = 2.0 * s.m * s.n * s.k * s.calls;
    total_flops += flops;
    std::printf("%-22s %6ld %9.2f", s.str().c_str(), s.calls, flops / 1e6);
    double openblas_ms = 0, best = 1e300;
    for (size_t i = 0; i < backends.size(); ++i) {
      const Backend& b = backends[i];
      const bool eligible = !b.batched || s.calls >= group;
      const bool supported = b.supports(s);
      const bool at_openblas_time = !eligible || !supported;  // printed with a *
      fallbacks = fallbacks || !supported;
      double ms;
      if (at_openblas_time) {
        ms = openblas_ms;
      } else {
        const double error = check_against_openblas(b, s, group);
        if (error > 1e-5) {
          std::fprintf(stderr, "ag-bench-gemm-backends: %s differs from OpenBLAS on %s by %g\n",
              b.name.c_str(), s.str().c_str(), error);
          return 1;
        }
        ms = time_shape(b, s, operands, group, repeats);
      }
      if (i == 0) openblas_ms = ms;
      const bool to_onednn = ag::onednn_makes(s.trans_a, s.trans_b, s.m, s.n, s.k);
      const bool onednn_first = ag::onednn_before_small_kernel(s.trans_a, s.trans_b, s.m, s.n, s.k);
      const bool ag_rule_picks = ag_kernel_makes(s) && !onednn_first ? b.name == "ag"
                                 : b.name == "onednn"                ? to_onednn
                                                      : b.name == "openblas" && !to_onednn;
      if (ag_rule_picks) ag_rule_total += ms;
      totals[i] += ms;
      best = std::min(best, ms);
      std::printf(" %9.3f%-6s", ms, at_openblas_time ? "*" : "");
    }
    best_total += best;
    std::printf("\n");
  }
  std::printf("%-22s %6s %9.1f", "total ms per step", "", total_flops / 1e6);
  for (double t : totals) std::printf(" %9.2f      ", t);
  std::printf("\n%-22s %6s %9s", "GFLOP/s", "", "");
  for (double t : totals) std::printf(" %9.1f      ", total_flops / (t * 1e6));
  std::printf("\nbest library per shape: %.2f ms per step (%.1f GFLOP/s), %.1f%% of OpenBLAS's\n",
      best_total, total_flops / (best_total * 1e6), 100 * best_total / totals[0]);
#ifdef AG_BENCH_HAVE_ONEDNN
  std::printf(
      "ag's rule (its own kernel up to 64 x 64 x 64%s, else oneDNN from %lld multiply-adds a "
      "product on but for A^T B with m >= %lld and m n >= %lld, OpenBLAS for the rest): "
      "%.2f ms per step (%.1f GFLOP/s), %.1f%% of OpenBLAS's\n",
      ag::onednn_has_avx512_kernels() ? "" : " but for what oneDNN makes (no AVX-512)",
      static_cast<long long>(ag::kOnednnMinMultiplyAdds),
      static_cast<long long>(ag::openblas_transposed_a_rule().min_rows),
      static_cast<long long>(ag::openblas_transposed_a_rule().min_outputs), ag_rule_total,
      total_flops / (ag_rule_total * 1e6), 100 * ag_rule_total / totals[0]);
#endif
  std::printf(
      "* counted at OpenBLAS's time: a batched column's shape made fewer than --group "
      "times a step%s\n",
      fallbacks ? ", or a shape that column's library does not make (ag's kernel beyond "
                  "64 x 64 x 64, libxsmm's NT shapes)"
                : "");
  return 0;
}
