// ag-bench-train: the speed of a whole training step of d2l's encoder–decoder Transformer, the
// number that bench/bench_train_torch.py measures for PyTorch on the same model and step.
//
//   ag-bench-train --config tiny|small|medium|mha --threads N [--steps S] [--warmup W] [--json]
//
// One step of the seq2seq configs is seq2seq::train_step — ag-train's step: forward with teacher
// forcing, nn::masked_softmax_ce (Σ CE over valid tokens / number of valid tokens), zero_grad,
// backward, clip_grad_norm at 1.0, Adam (lr 0.005) — with dropout 0.1, in training mode.
//
//   config  D    FFN   heads layers  batch  T_src = T_tgt  vocab  batches
//   tiny    32   64    4     2       64     10             20     the reverse task of ag-train
//                                                                 (lengths 1–9 + <eos>, padded to
//                                                                 10)
//   small   128  512   4     2       32     32             32     random ids in [3, V), full length
//   medium  256  1024  8     4       32     64             64     random ids in [3, V), full length
//   mha     nn::MultiHeadAttention(256 wide, 8 heads, dropout 0.1) alone, self-attention on
//           X (32, 64, 256) with requires_grad and no valid_lens; a step is zero_grad, forward,
//           backward of a fixed random upstream gradient (no optimizer).
//
// small / medium batches: the source is B×T random ids in [3, V); the labels are another B×T
// random ids in [3, V); the decoder input is <bos> followed by the labels' first T − 1 ids; all
// valid lengths are T (no padding, so the masks remove nothing and every position is work).
// A pool of 8 batches (tiny: fresh examples from the reverse task's TrainingStream, seed 1) is
// built before timing and cycled through.
//
// Timing: --warmup untimed steps (default 3), then --steps timed steps (defaults: tiny 100,
// small 40, medium 20, mha 40), each timed alone with steady_clock; the median is reported.
//   tokens/s  = B·(T_src + T_tgt) per step / median step time   (mha: B·T)
//   peak RSS  = VmHWM of /proc/self/status after the timed steps (before the sgemm measurement)
//   system_allocs_per_step = storage buffers ag's caching allocator had to get from the system
//               during the timed steps, per step (0: the steady state is served from the cache)
//   GFLOP/s   = matmul FLOPs per step (analytical, see step_flops) / median step time
//   mfu       = GFLOP/s / the sgemm peak this program measures afterwards at the same thread
//               count: cblas_sgemm 2048×2048×2048 into a preallocated output, best of 5 calls
//
// --threads sets ag's threads (ag::set_num_threads: ag's pool splits the matrix products and the
// larger loops; OpenBLAS itself stays on one thread).
// Each config runs in its own process so that the peak RSS is that config's alone
// (bench/compare_train.sh runs them). --json prints one JSON object on one line.
#include <cblas.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "autograd/allocator.h"
#include "autograd/ops.h"
#include "models/seq2seq.h"
#include "nn/fused.h"
#include "optim/optimizer.h"

namespace {

using namespace ag;
using Clock = std::chrono::steady_clock;

struct Config {
  std::string name;
  int64_t num_hiddens, ffn_num_hiddens, num_heads, num_layers;
  int64_t batch, source_steps, target_steps, vocab;
  int64_t default_steps;
};

// mha uses num_hiddens, num_heads, batch and source_steps (= T) only.
const std::vector<Config> kConfigs = {
    {"tiny", 32, 64, 4, 2, 64, 10, 10, 20, 100},
    {"small", 128, 512, 4, 2, 32, 32, 32, 32, 40},
    {"medium", 256, 1024, 8, 4, 32, 64, 64, 64, 20},
    {"mha", 256, 0, 8, 0, 32, 64, 0, 0, 40},
};

// Matmul FLOPs of one training step, counted analytically (2·M·N·K per matrix product of the
// forward, × 3 for forward + backward: the backward of C = A·B computes dA = dC·Bᵀ and dB = Aᵀ·dC,
// two products of the same size). With B batch, S source steps, T target steps, D width, F FFN
// width, L layers, V vocabulary (the heads split D, so H heads of D/H together cost as one of D):
//   encoder block:  Q, K, V, O projections            4 · 2·B·S·D·D
//                   Q·Kᵀ and weights·V                 2 · 2·B·S·S·D
//                   FFN (D→F→D)                        2 · 2·B·S·D·F
//   decoder block:  self-attention over T             4 · 2·B·T·D·D + 2 · 2·B·T·T·D
//                   cross-attention: Q, O on T         2 · 2·B·T·D·D
//                                    K, V on S         2 · 2·B·S·D·D
//                                    Q·Kᵀ, weights·V   2 · 2·B·T·S·D
//                   FFN                                2 · 2·B·T·D·F
//   output layer                                       2·B·T·D·V
//   step = 3 · (L · (encoder block + decoder block) + output layer)
// The masked (causal or padding) scores are computed all the same, so they count. Embeddings
// (row gathers), softmax, LayerNorm, dropout, the loss and Adam are not matmuls and do not count.
// mha: 3 · (4 · 2·B·T·D·D + 2 · 2·B·T·T·D).
double step_flops(const Config& c) {
  const double B = double(c.batch), S = double(c.source_steps), T = double(c.target_steps);
  const double D = double(c.num_hiddens), F = double(c.ffn_num_hiddens), L = double(c.num_layers);
  const double V = double(c.vocab);
  if (c.name == "mha") return 3 * (4 * 2 * B * S * D * D + 2 * 2 * B * S * S * D);
  const double encoder_block =
      4 * 2 * B * S * D * D + 2 * 2 * B * S * S * D + 2 * 2 * B * S * D * F;
  const double decoder_block = 4 * 2 * B * T * D * D + 2 * 2 * B * T * T * D  // self-attention
                               + 2 * 2 * B * T * D * D +
                               2 * 2 * B * S * D * D     // cross: projections
                               + 2 * 2 * B * T * S * D   // cross: Q·Kᵀ, weights·V
                               + 2 * 2 * B * T * D * F;  // FFN
  const double output_layer = 2 * B * T * D * V;
  return 3 * (L * (encoder_block + decoder_block) + output_layer);
}

// A field of /proc/self/status ("VmHWM", "VmRSS") in MB (its kB / 1024).
double proc_status_mb(const std::string& field) {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind(field + ":", 0) == 0) return std::stod(line.substr(field.size() + 1)) / 1024.0;
  return -1;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

volatile float g_sink = 0;

// The machine's float32 matmul peak on `threads` threads: multithreaded OpenBLAS cblas_sgemm of two
// 2048×2048 matrices into a preallocated output (all touched first), one untimed call, then the
// best of 5 timed calls, in GFLOP/s.
double sgemm_peak_gflops(int threads) {
  // OpenBLAS's own threads here (ag keeps it on one thread and splits products itself).
  openblas_set_num_threads(threads);
  constexpr int n = 2048;
  Generator gen(7);
  const Tensor a = randn({n, n}, gen), b = randn({n, n}, gen), c = zeros({n, n});
  auto call = [&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data<float>(), n,
        b.data<float>(), n, 0.0f, c.data<float>(), n);
    g_sink = c.data<float>()[0];
  };
  call();
  double best = 1e30;
  for (int i = 0; i < 5; ++i) {
    const auto start = Clock::now();
    call();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - start).count());
  }
  openblas_set_num_threads(1);
  return 2.0 * n * double(n) * n / best * 1e-9;
}

// small / medium: full-length random sequences (see the top of the file).
data::Batch random_batch(const Config& c, Generator& gen) {
  const int64_t B = c.batch, S = c.source_steps, T = c.target_steps;
  std::vector<float> source(B * S), decoder_input(B * T), labels(B * T);
  for (auto& x : source) x = float(gen.randint(3, c.vocab));
  for (auto& x : labels) x = float(gen.randint(3, c.vocab));
  for (int64_t b = 0; b < B; ++b) {
    decoder_input[b * T] = float(data::TaskVocab::bos);
    for (int64_t t = 1; t < T; ++t) decoder_input[b * T + t] = labels[b * T + t - 1];
  }
  return {tensor(source, {B, S}), full({B}, double(S)), tensor(decoder_input, {B, T}),
      tensor(labels, {B, T}), full({B}, double(T))};
}

struct Result {
  std::vector<double> seconds;  // per timed step
  double first_loss = 0, last_loss = 0;
  int64_t parameters = 0;
  double rss_start_mb = 0;  // VmRSS just before the first (warm-up) step
  // Buffers that ag's caching allocator had to get from the system during the timed steps, per
  // step (0 in the steady state: every buffer comes from the cache).
  double system_allocations_per_step = 0;
};

// Calls step(i) for the warm-up and the timed steps, timing each timed one alone.
template <class Step>
void time_steps(Result& r, int64_t warmup, int64_t steps, Step&& step) {
  uint64_t system_allocations_at_start = 0;
  for (int64_t i = 0; i < warmup + steps; ++i) {
    if (i == warmup) system_allocations_at_start = allocator_stats().system_allocations;
    const auto start = Clock::now();
    step(i);
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    if (i >= warmup) r.seconds.push_back(seconds);
  }
  r.system_allocations_per_step =
      double(allocator_stats().system_allocations - system_allocations_at_start) / double(steps);
}

Result run_seq2seq(const Config& c, int64_t warmup, int64_t steps) {
  manual_seed(0);
  seq2seq::ModelConfig mc;
  mc.vocab_size = c.vocab;
  mc.num_hiddens = c.num_hiddens;
  mc.ffn_num_hiddens = c.ffn_num_hiddens;
  mc.num_heads = c.num_heads;
  mc.num_layers = c.num_layers;
  mc.dropout = 0.1;
  auto model = seq2seq::make_transformer(mc);
  model->train();
  optim::Adam optimizer(model->parameters(), 0.005);

  std::vector<data::Batch> batches;
  if (c.name == "tiny") {
    auto task = data::make_task("reverse");
    if (task->vocab().size() != c.vocab || task->source_steps() != c.source_steps ||
        task->target_steps() != c.target_steps)
      throw std::runtime_error("the reverse task no longer has the tiny config's shape");
    const auto held_out = data::held_out_set(*task, 500);
    data::TrainingStream stream(*task, held_out, 1);
    for (int i = 0; i < 8; ++i)
      batches.push_back(
          data::make_batch(stream.next(c.batch), task->source_steps(), task->target_steps()));
  } else {
    Generator gen(1);
    for (int i = 0; i < 8; ++i) batches.push_back(random_batch(c, gen));
  }

  Result r;
  r.parameters = model->num_parameters();
  r.rss_start_mb = proc_status_mb("VmRSS");
  time_steps(r, warmup, steps, [&](int64_t i) {
    const data::Batch& batch = batches[static_cast<std::size_t>(i) % batches.size()];
    const double loss = seq2seq::train_step(*model, optimizer, batch, 1.0);
    if (i == 0) r.first_loss = loss;
    r.last_loss = loss;
  });
  return r;
}

Result run_mha(const Config& c, int64_t warmup, int64_t steps) {
  manual_seed(0);
  const int64_t D = c.num_hiddens;
  nn::MultiHeadAttention mha(D, D, D, D, c.num_heads, 0.1);
  mha.train();
  Generator gen(1);
  Tensor X = randn({c.batch, c.source_steps, D}, gen);
  X.requires_grad_();
  const Tensor upstream = randn({c.batch, c.source_steps, D}, gen);

  Result r;
  r.parameters = mha.num_parameters();
  r.rss_start_mb = proc_status_mb("VmRSS");
  time_steps(r, warmup, steps, [&](int64_t) {
    mha.zero_grad();
    X.zero_grad();
    Tensor out = mha.forward(X, X, X);
    out.backward(upstream);
  });
  g_sink = X.grad().data<float>()[0];
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  std::string config_name;
  int threads = 1;
  int64_t steps = 0, warmup = 3;
  bool json = false, skip_peak = false, composed = false;
  std::string attention = "auto";
  int64_t sequence = 0;
  CLI::App app{
      "ag-bench-train: time the training step of d2l's Transformer (see docs/benchmarks.md)"};
  app.add_option("--config", config_name, "tiny | small | medium | mha")
      ->required()
      ->check(CLI::IsMember({"tiny", "small", "medium", "mha"}));
  app.add_option("--threads", threads, "ag's threads")
      ->capture_default_str()
      ->check(CLI::Range(1, max_num_threads()));
  app.add_option("--steps", steps, "timed steps (default: tiny 100, small 40, medium 20, mha 40)")
      ->check(CLI::Range(int64_t{1}, int64_t{1000000}));
  app.add_option("--warmup", warmup, "untimed steps first")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{1000}));
  app.add_flag("--json", json, "print one JSON object on one line");
  app.add_flag("--composed", composed,
      "run the composed d2l path instead of the fused kernels (nn::set_fused_kernels(false))");
  app.add_option("--attention", attention,
         "MultiHeadAttention's fused kernel: auto (tiled from "
         "ag::kTiledAttentionFromKeys keys on), whole (scaled_dot_product_attention) or "
         "tiled (flash_attention)")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "whole", "tiled"}));
  app.add_option("--sequence", sequence, "mha only: the sequence length T instead of 64")
      ->check(CLI::Range(int64_t{1}, int64_t{16384}));
  app.add_flag("--no-sgemm-peak", skip_peak,
      "skip the sgemm peak measurement (for profiling runs; mfu is then 0)");
  CLI11_PARSE(app, argc, argv);

  Config c = *std::find_if(
      kConfigs.begin(), kConfigs.end(), [&](const Config& k) { return k.name == config_name; });
  if (steps == 0) steps = c.default_steps;
  if (sequence > 0) {
    if (c.name != "mha") {
      std::fprintf(stderr, "ag-bench-train: --sequence applies to --config mha only\n");
      return 2;
    }
    c.source_steps = sequence;
  }
  set_attention_kernel(attention == "whole"   ? AttentionKernel::whole_rows
                       : attention == "tiled" ? AttentionKernel::tiled
                                              : AttentionKernel::automatic);
  set_num_threads(threads);
  nn::set_fused_kernels(!composed);

  const Result r = c.name == "mha" ? run_mha(c, warmup, steps) : run_seq2seq(c, warmup, steps);
  const double peak_rss_mb = proc_status_mb("VmHWM");  // before the sgemm buffers exist

  const double seconds = median(r.seconds);
  const double tokens = c.name == "mha" ? double(c.batch * c.source_steps)
                                        : double(c.batch * (c.source_steps + c.target_steps));
  const double flops = step_flops(c);
  const double gflops = flops / seconds * 1e-9;
  const double peak = skip_peak ? 0 : sgemm_peak_gflops(threads);
  const double mfu = peak > 0 ? gflops / peak : 0;
  const double ms_min = *std::min_element(r.seconds.begin(), r.seconds.end()) * 1e3;

  if (json) {
    std::printf(
        "{\"impl\": \"%s\", \"config\": \"%s\", \"threads\": %d, \"ms_per_step\": %.3f, "
        "\"ms_min\": %.3f, "
        "\"tokens_per_s\": %.1f, \"peak_rss_mb\": %.1f, \"rss_start_mb\": %.1f, \"gflops\": %.2f, "
        "\"mfu\": %.4f, \"sgemm_peak_gflops\": %.2f, \"flops_per_step\": %.0f, \"steps\": %lld, "
        "\"warmup\": %lld, \"parameters\": %lld, \"first_loss\": %.4f, \"last_loss\": %.4f, "
        "\"system_allocs_per_step\": %.2f, \"sequence\": %lld, \"attention\": \"%s\"}\n",
        composed ? "ag-composed" : "ag", c.name.c_str(), threads, seconds * 1e3, ms_min,
        tokens / seconds, peak_rss_mb, r.rss_start_mb, gflops, mfu, peak, flops,
        static_cast<long long>(steps), static_cast<long long>(warmup),
        static_cast<long long>(r.parameters), r.first_loss, r.last_loss,
        r.system_allocations_per_step, static_cast<long long>(c.source_steps), attention.c_str());
  } else {
    std::printf(
        "ag-bench-train: config %s%s, sequence %lld, attention %s, %d thread(s), %lld timed steps "
        "after %lld "
        "warm-up\n",
        c.name.c_str(), composed ? " (composed d2l path)" : "",
        static_cast<long long>(c.source_steps), attention.c_str(), threads,
        static_cast<long long>(steps), static_cast<long long>(warmup));
    std::printf("  %.3f ms/step (median; min %.3f), %.0f tokens/s\n", seconds * 1e3, ms_min,
        tokens / seconds);
    std::printf("  peak RSS %.1f MB (%.1f MB before the first step), %lld parameters\n",
        peak_rss_mb, r.rss_start_mb, static_cast<long long>(r.parameters));
    std::printf(
        "  %.2f buffers per timed step allocated from the system (the rest from the cache)\n",
        r.system_allocations_per_step);
    std::printf(
        "  matmul work %.3f GFLOP/step -> %.2f GFLOP/s; sgemm peak %.2f GFLOP/s; mfu %.1f%%\n",
        flops * 1e-9, gflops, peak, 100 * mfu);
    if (c.name != "mha")
      std::printf("  loss %.4f (first step) -> %.4f (last)\n", r.first_loss, r.last_loss);
  }
  std::fflush(stdout);
  return 0;
}
