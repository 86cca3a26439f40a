// ag-bench-matmul: how close ag's float32 ops come to what the hardware and OpenBLAS give directly.
//
//   matmul       ag::matmul (inputs without requires_grad, so no graph is recorded) against a raw
//                loop of cblas_sgemm writing into a preallocated output: same shapes, same input
//                data, same BLAS. Reported in GFLOP/s (2·M·N·K per matrix product).
//   elementwise  ag::add, ag::mul and ag::exp of contiguous 4M-element tensors (16 MB each),
//                reported in GB/s of bytes read + written, against memcpy between two 16 MB
//                buffers (also bytes read + written).
//
// Everything runs on one thread (ag::set_num_threads(1); ag keeps OpenBLAS on one thread).
//
// Timing: each side is warmed up, then called in an inner loop long enough that one timed loop
// lasts at least ~20 ms (steady_clock); a sample is that loop's time divided by its call count.
// The samples of the two sides of a row are interleaved (ag, raw, raw, ag, ...) so that drift —
// clock frequency, other processes — affects both equally, and each side's median is reported.
//
// Usage: ag-bench-matmul [--quick]   (--quick: fewer and shorter samples, for a smoke run)
#include <cblas.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "autograd/ops.h"
#include "autograd/tensor.h"
#include "main_catching.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Settings {
  double min_sample_seconds;  // each timed loop lasts at least this long
  int samples;                // timed loops per side; the median is reported
  int warmup_calls;           // untimed calls per side before calibrating
};

constexpr Settings kFull{0.020, 15, 3};
constexpr Settings kQuick{0.002, 3, 1};

// Keeps results observable so no call can be optimised away.
volatile float g_sink = 0;

// Minor page faults of this process so far: first touches of pages the kernel has to map (and
// zero). ag allocates a fresh output per call, so whether that memory comes back already mapped
// matters; the most seen per ag call is reported under the table (see docs/benchmarks.md).
long minor_faults() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_minflt;
}
double g_max_ag_faults_per_call = 0;

// Seconds per call of fn(), from one loop of `calls` calls timed as a whole.
template <class F>
double time_loop(F& fn, int64_t calls) {
  const auto start = Clock::now();
  for (int64_t i = 0; i < calls; ++i) fn();
  const std::chrono::duration<double> elapsed = Clock::now() - start;
  return elapsed.count() / static_cast<double>(calls);
}

// The number of calls that makes one timed loop last at least `target` seconds.
template <class F>
int64_t calibrate(F& fn, double target) {
  int64_t calls = 1;
  while (true) {
    const double per_call = time_loop(fn, calls);
    if (per_call * static_cast<double>(calls) >= target) return calls;
    // Aim 20% past the target from this estimate; at least double, at most x100 per step.
    const auto estimate = static_cast<int64_t>(1.2 * target / std::max(per_call, 1e-9)) + 1;
    calls = std::clamp(estimate, calls * 2, calls * 100);
  }
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Median seconds per call of two competitors, measured interleaved.
struct Timings {
  double ag;
  double reference;
};

template <class FA, class FB>
Timings measure(FA&& ag_call, FB&& reference_call, const Settings& s) {
  for (int i = 0; i < s.warmup_calls; ++i) {
    ag_call();
    reference_call();
  }
  const int64_t ag_calls = calibrate(ag_call, s.min_sample_seconds);
  const int64_t ref_calls = calibrate(reference_call, s.min_sample_seconds);
  std::vector<double> ag, ref;
  long ag_faults = 0;
  auto time_ag = [&] {
    const long before = minor_faults();
    ag.push_back(time_loop(ag_call, ag_calls));
    ag_faults += minor_faults() - before;
  };
  for (int r = 0; r < s.samples; ++r) {
    // Alternate which side goes first, so neither always follows the other.
    if (r % 2 == 0) {
      time_ag();
      ref.push_back(time_loop(reference_call, ref_calls));
    } else {
      ref.push_back(time_loop(reference_call, ref_calls));
      time_ag();
    }
  }
  g_max_ag_faults_per_call =
      std::max(g_max_ag_faults_per_call, double(ag_faults) / double(ag_calls * int64_t{s.samples}));
  return {median(ag), median(ref)};
}

// ---- table ------------------------------------------------------------------------------------

// Columns: case, ag's rate, the reference's rate, ratio ag / reference, and the median time per
// call of each side (the raw material of the rates; for matmul their difference is ag's overhead).
void print_header(const char* reference_name, const char* unit) {
  std::printf(
      "\n%-34s %10s %10s %7s %22s\n", "case", "ag", reference_name, "ratio", "time/call ag | ref");
  std::printf("%-34s %10s %10s %7s %22s\n", "", unit, unit, "", "us");
}

void print_row(const std::string& name, double ag_rate, double ref_rate, const Timings& t) {
  std::printf("%-34s %10.1f %10.1f %7.3f %11.1f | %8.1f\n", name.c_str(), ag_rate, ref_rate,
      ag_rate / ref_rate, t.ag * 1e6, t.reference * 1e6);
  std::fflush(stdout);
}

// ---- matmul -------------------------------------------------------------------------------------

struct MatmulCase {
  std::string name;
  int64_t batch;  // 0: plain 2-D matrices; else 3-D tensors of `batch` matrices
  int64_t m, k, n;
  bool transpose_b;   // a · bᵀ with b stored (n, k): ag::transpose view vs CblasTrans
  bool square_goal;   // counts toward the ">= 0.95 from N = 256 up" goal
  bool batched_goal;  // counts toward the ">= 0.80 on batched small shapes" goal
};

struct GoalTally {
  double min_ratio = 1e30;
  std::string worst;
  void add(const std::string& name, double ratio) {
    if (ratio < min_ratio) {
      min_ratio = ratio;
      worst = name;
    }
  }
};

// Largest |x - y| over two float buffers of n elements.
float max_abs_diff(const float* x, const float* y, int64_t n) {
  float d = 0;
  for (int64_t i = 0; i < n; ++i) d = std::max(d, std::abs(x[i] - y[i]));
  return d;
}

void bench_matmul(const MatmulCase& c, const Settings& s, ag::Generator& gen, GoalTally& square,
    GoalTally& batched) {
  const int64_t count = std::max<int64_t>(c.batch, 1);
  auto shape = [&](int64_t rows, int64_t cols) {
    return c.batch == 0 ? ag::Shape{rows, cols} : ag::Shape{c.batch, rows, cols};
  };
  // The same input buffers feed both sides. b is stored (k, n), or (n, k) when transposed.
  const ag::Tensor a = ag::randn(shape(c.m, c.k), gen);
  const ag::Tensor b = c.transpose_b ? ag::randn(shape(c.n, c.k), gen)  // bᵀ is (k, n)
                                     : ag::randn(shape(c.k, c.n), gen);
  const ag::Tensor raw_out = ag::zeros(shape(c.m, c.n));  // preallocated (and touched) once

  const float* pa = a.data<float>();
  const float* pb = b.data<float>();
  float* pc = raw_out.data<float>();
  const int m = int(c.m), n = int(c.n), k = int(c.k);
  const CBLAS_TRANSPOSE tb = c.transpose_b ? CblasTrans : CblasNoTrans;
  const int ldb = c.transpose_b ? k : n;

  // ag side: what a user writes. ag::matmul allocates its output on every call; the transpose
  // (a view, no copy) is made inside the call as well.
  auto ag_matmul = [&] {
    return c.transpose_b ? ag::matmul(a, ag::transpose(b, 0, 1)) : ag::matmul(a, b);
  };
  auto ag_call = [&] {
    const ag::Tensor out = ag_matmul();
    g_sink = out.data<float>()[0];
  };
  // Raw side: one sgemm per matrix into the preallocated output.
  auto raw_call = [&] {
    for (int64_t i = 0; i < count; ++i)
      cblas_sgemm(CblasRowMajor, CblasNoTrans, tb, m, n, k, 1.0f, pa + i * c.m * c.k, k,
          pb + i * c.k * c.n, ldb, 0.0f, pc + i * c.m * c.n, n);
    g_sink = pc[0];
  };

  // Both sides must compute the same thing.
  {
    raw_call();
    const ag::Tensor out = ag_matmul();
    const float diff = max_abs_diff(out.data<float>(), pc, out.numel());
    if (diff > 1e-3f * float(c.k)) {
      std::fprintf(stderr, "%s: ag::matmul and sgemm differ by %g\n", c.name.c_str(), double(diff));
      std::exit(1);
    }
  }

  const Timings t = measure(ag_call, raw_call, s);
  const double flops = 2.0 * double(count) * double(c.m) * double(c.n) * double(c.k);
  const double ag_gflops = flops / t.ag * 1e-9, raw_gflops = flops / t.reference * 1e-9;
  print_row(c.name, ag_gflops, raw_gflops, t);
  if (c.square_goal) square.add(c.name, ag_gflops / raw_gflops);
  if (c.batched_goal) batched.add(c.name, ag_gflops / raw_gflops);
}

// ---- elementwise --------------------------------------------------------------------------------

void bench_elementwise(const Settings& s, ag::Generator& gen) {
  constexpr int64_t kElements = int64_t{4} << 20;  // 4M floats = 16 MB per tensor
  constexpr std::size_t kBytes = std::size_t{kElements} * sizeof(float);
  const ag::Tensor x = ag::randn({kElements}, gen);
  const ag::Tensor y = ag::randn({kElements}, gen);

  // memcpy reference: 16 MB from one buffer into another (both touched beforehand, so no page
  // faults are timed), i.e. 16 MB read + 16 MB written.
  const ag::Tensor src = ag::randn({kElements}, gen);
  const ag::Tensor dst = ag::zeros({kElements});
  auto memcpy_call = [&] {
    std::memcpy(dst.raw_data(), src.raw_data(), kBytes);
    g_sink = dst.data<float>()[0];
  };

  struct Case {
    const char* name;
    int operands;  // tensors read; one more is written
    ag::Tensor (*op)(const ag::Tensor&, const ag::Tensor&);
  };
  using T = ag::Tensor;
  const Case cases[] = {
      {"add 4M (2 x 16 MB in, 16 MB out)", 2, [](const T& p, const T& q) { return ag::add(p, q); }},
      {"mul 4M (2 x 16 MB in, 16 MB out)", 2, [](const T& p, const T& q) { return ag::mul(p, q); }},
      {"exp 4M (16 MB in, 16 MB out)", 1, [](const T& p, const T&) { return ag::exp(p); }},
  };
  for (const Case& c : cases) {
    // ag side: the op as a user calls it, including the allocation of its fresh output.
    auto ag_call = [&] {
      const ag::Tensor out = c.op(x, y);
      g_sink = out.data<float>()[0];
    };
    const Timings t = measure(ag_call, memcpy_call, s);
    const double ag_bytes = double(kBytes) * (c.operands + 1), copy_bytes = 2.0 * double(kBytes);
    print_row(c.name, ag_bytes / t.ag * 1e-9, copy_bytes / t.reference * 1e-9, t);
  }
}

}  // namespace

static int run_program(int argc, char** argv) {
  Settings settings = kFull;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) {
      settings = kQuick;
    } else {
      const bool help = std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0;
      std::fprintf(help ? stdout : stderr,
          "usage: %s [--quick]\n  --quick  fewer, shorter samples (smoke run)\n", argv[0]);
      return help ? 0 : 2;
    }
  }

  ag::set_num_threads(1);  // ag and OpenBLAS on one thread
  ag::Generator gen(42);

  std::printf(
      "ag-bench-matmul%s: float32, %d thread(s), median of %d samples per side, "
      "each >= %g ms\n",
      settings.samples == kQuick.samples ? " --quick" : "", ag::get_num_threads(), settings.samples,
      settings.min_sample_seconds * 1e3);
  std::printf("%s (core %s)\n", openblas_get_config(), openblas_get_corename());

  // ---- matmul: ag::matmul vs cblas_sgemm ----
  std::vector<MatmulCase> cases;
  for (int64_t n : {64, 128, 256, 512, 1024}) {
    const std::string dim = std::to_string(n);
    cases.push_back({"matmul " + dim + "x" + dim + " @ " + dim + "x" + dim, 0, n, n, n, false,
        n >= 256, false});
  }
  cases.push_back({"matmul 512x512 @ (512x512)^T", 0, 512, 512, 512, true, true, false});
  cases.push_back({"batched 32 x (64x64 @ 64x64)", 32, 64, 64, 64, false, false, true});
  cases.push_back({"batched 32 x (128x64 @ 64x128)", 32, 128, 64, 128, false, false, true});

  GoalTally square, batched;
  print_header("raw sgemm", "GFLOP/s");
  for (const MatmulCase& c : cases) bench_matmul(c, settings, gen, square, batched);

  // ---- elementwise: ag ops vs memcpy ----
  print_header("memcpy", "GB/s");
  bench_elementwise(settings, gen);

  std::printf("\nratio = ag / reference (higher is better)\n");
  std::printf(
      "page faults per ag call: at most %.1f "
      "(0 when freed outputs are reused as mapped memory)\n",
      g_max_ag_faults_per_call);
  std::printf("goal: >= 0.95 of raw sgemm from N=256 up, >= 0.80 on the batched small shapes\n");
  std::printf("  N >= 256:       lowest ratio %.3f (%s) -> %s\n", square.min_ratio,
      square.worst.c_str(), square.min_ratio >= 0.95 ? "met" : "MISSED");
  std::printf("  batched small:  lowest ratio %.3f (%s) -> %s\n", batched.min_ratio,
      batched.worst.c_str(), batched.min_ratio >= 0.80 ? "met" : "MISSED");
  return 0;
}

int main(int argc, char** argv) {
  return bench::main_catching("ag-bench-matmul", run_program, argc, argv);
}
