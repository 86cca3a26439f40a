// ag-bench-train: the speed of a whole training step of d2l's encoder–decoder Transformer, the
// number that bench/bench_train_torch.py measures for PyTorch on the same model and step.
//
//   ag-bench-train --config tiny|small|medium|mha --threads N [--steps S] [--warmup W] [--json]
//
// One step of the seq2seq configs is training::Step — the step ag-train runs (training/step.h):
// zero_grad, forward with teacher forcing, nn::masked_softmax_ce (Σ CE over valid tokens / number
// of valid tokens), backward, clip_grad_norm at 1.0, the finiteness check, Adam (lr 0.005), the
// (constant) schedule — with dropout 0.1, in training mode.
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
//               count: 2048×2048×2048 into a preallocated output, best of 5 calls, on the best
//               of the GEMM libraries the build has (bench/sgemm_peak.h: OpenBLAS, oneDNN)
//   gemm_backend = the library of ag's large float32 products (autograd/gemm_backend.h; set it
//               with AG_GEMM_BACKEND=openblas|onednn)
//
// --batch B replaces the config's batch (the JSON does not repeat it; tokens/s and the FLOPs
// follow it): e.g. --batch 16 times one rank's share of medium's 32 rows in one process.
// --threads sets ag's threads (ag::set_num_threads: ag's pool splits the matrix products and the
// larger loops; OpenBLAS itself stays on one thread).
// Each config runs in its own process so that the peak RSS is that config's alone
// (bench/compare_train.sh runs them). --json prints one JSON object on one line.
//
// Data parallel (where CMake found MPI), under mpirun:
//
//   mpirun -np 2 ag-bench-train --config tiny|small|medium --threads 1 [--compare-no-sync] [--json]
//
// Each rank builds the same model (manual_seed(0)) and the same pool of global batches, takes
// rows_of_rank(batch, rank, world) of every batch (sliced before the timing), and trains through
// DistributedDataParallel (gradients averaged over the ranks in buckets, overlapped with
// backward): the step is the same training::Step on B/N rows, as ag-train takes it under mpirun.
// Every step starts after a barrier and its time is the slowest rank's, so the ranks agree on the
// median. Rank 0 prints (impl "ag-ddp"): world_size, the global and its own per-rank batch,
// ms/step, the time blocked waiting for the all-reduce at the end of backward
// (DdpStats::wait_seconds, mean over the timed steps and the ranks: comm_wait_ms) and from the
// first bucket's start to the end of backward (overlap_ms), buckets and gradient bytes, tokens/s
// of the global batch, the global batch's loss (weighted by valid tokens, as ag-train's), rank 0's
// peak RSS, and the MFU against the sum of the ranks' sgemm peaks (measured by all ranks at once).
// --compare-no-sync times as many steps again with every backward under no_sync: the ranks'
// compute, side by side, without the gradients' all-reduce (ms_per_step_no_sync; the step still
// averages its one-number loss over the ranks); ms_per_step minus that is what the gradients'
// communication costs a step.
// --bucket-mb sets DistributedDataParallel's bucket_cap_mb (default 25, as PyTorch's).
// The thread budget is enforced: ranks on this machine × --threads ≤ its hardware threads
// (--oversubscribe lifts it).
// MPI starts only when mpirun launched the process (OMPI_COMM_WORLD_SIZE, PMI_SIZE or PMIX_RANK
// set); a plain run, or a world of one rank, is the single-process benchmark above, unchanged.
// bench/compare_distributed.sh compares it with 1 process and with PyTorch's DDP.
#include <cblas.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "autograd/allocator.h"
#include "autograd/gemm_backend.h"
#include "autograd/ops.h"
#include "main_catching.h"
#include "models/seq2seq.h"
#include "nn/fused.h"
#include "optim/optimizer.h"
#include "seq2seq_configs.h"
#include "sgemm_peak.h"
#include "step_stats.h"
#include "training/cli.h"
#include "training/step.h"

namespace {

using namespace ag;
using Clock = std::chrono::steady_clock;

volatile float g_sink = 0;

using bench::Config;

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

using bench::median;
using bench::proc_status_mb;

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

// The model of a seq2seq config, built after manual_seed(0): the same weights in every process.
std::shared_ptr<nn::EncoderDecoder> make_model(const Config& c) {
  manual_seed(0);
  auto model = seq2seq::make_transformer(bench::model_config(c, /*dropout=*/0.1));
  model->train();
  return model;
}

// The pool of 8 batches of a seq2seq config (see the top of the file); each from its own seeded
// stream, so every process builds the same pool.
std::vector<data::Batch> make_batches(const Config& c) {
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
    for (int i = 0; i < 8; ++i)
      batches.push_back(data::random_batch(c.batch, c.source_steps, c.target_steps, c.vocab, gen));
  }
  return batches;
}

// The valid target tokens of a batch: the weight of its rows in the step's mean loss.
double valid_tokens(const data::Batch& batch) { return sum(batch.label_valid_lens).item(); }

// A batch of the pool as the step takes it, prepared before the timing: this process's rows of
// it (one process: the batch itself) and the valid tokens of both.
struct PoolBatch {
  data::Batch global, mine;
  double global_tokens = 0, mine_tokens = 0;
};

std::vector<PoolBatch> make_pool(const Config& c, dist::RowRange mine) {
  std::vector<PoolBatch> pool;
  for (data::Batch& global : make_batches(c)) {
    PoolBatch b;
    b.mine = mine.begin == 0 && mine.end == c.batch
                 ? global
                 : data::batch_rows(global, mine.begin, mine.end);
    b.global_tokens = valid_tokens(global);
    b.mine_tokens = valid_tokens(b.mine);
    b.global = std::move(global);
    pool.push_back(std::move(b));
  }
  return pool;
}

// Step `number` (training::Step, ag-train's) on a batch of the pool: the loss of rows
// [first, last) is their masked cross-entropy per valid token, weighted by their valid tokens, as
// ag-train's toy and translation tasks give it; this process's rows are the ones prepared for it.
// Returns the global batch's loss.
double take_step(training::Step& step, int64_t number, nn::EncoderDecoder& model,
    const PoolBatch& b, dist::RowRange mine) {
  const training::StepResult result =
      step.take(number, b.global_tokens, [&](int64_t first, int64_t last) {
        if (first == mine.begin && last == mine.end)
          return std::pair{seq2seq::sequence_loss(model, b.mine), b.mine_tokens};
        const data::Batch rows = data::batch_rows(b.global, first, last);
        return std::pair{seq2seq::sequence_loss(model, rows), valid_tokens(rows)};
      });
  if (result.diverged)  // (training::Step has said why)
    throw std::runtime_error("step " + std::to_string(number) + " diverged");
  return result.loss;
}

// The step's options: clip 1.0 (ag-train's default), its messages named for this program.
training::StepOptions step_options() {
  training::StepOptions options;
  options.program = "ag-bench-train";
  return options;
}

Result run_seq2seq(const Config& c, int64_t warmup, int64_t steps) {
  auto model = make_model(c);
  optim::Adam optimizer(model->parameters(), 0.005);
  optim::Scheduler constant(optimizer, [](int64_t) { return 1.0; });
  training::Step step(*model, optimizer, constant, c.batch, step_options());  // one process
  const dist::RowRange all{0, c.batch};
  const std::vector<PoolBatch> pool = make_pool(c, all);

  Result r;
  r.parameters = model->num_parameters();
  r.rss_start_mb = proc_status_mb("VmRSS");
  time_steps(r, warmup, steps, [&](int64_t i) {
    const double loss = take_step(step, i + 1, *model, pool[std::size_t(i) % pool.size()], all);
    if (i == 0) r.first_loss = loss;
    r.last_loss = loss;
  });
  return r;
}

// ---- data parallel, under mpirun (see "Data parallel" at the top of the file) ----

// What a data-parallel run measures beyond a single process's Result.
struct DistributedResult {
  Result steps;                 // seconds: each step's slowest rank; losses: the global batch's
  std::vector<double> no_sync;  // --compare-no-sync: the same steps without the all-reduce
  int64_t rank_rows = 0;        // rows of each global batch this rank (rank 0) takes
  dist::DdpStats last;          // of the last timed step (buckets, bytes)
  double wait_seconds = 0;      // blocked in MPI_Wait per timed step, mean over steps and ranks
  double overlap_seconds = 0;   // first all-reduce start -> end of backward, mean as above
};

// Barrier, then one call of step(i) timed; returns the slowest rank's seconds (every rank
// returns the same number, so the ranks' medians agree).
template <class Step>
double timed_on_every_rank(Step&& step, int64_t i) {
  dist::barrier();
  const auto start = Clock::now();
  step(i);
  const auto nanoseconds =
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count();
  return double(dist::all_reduce_max(int64_t(nanoseconds))) * 1e-9;
}

DistributedResult run_seq2seq_distributed(
    const Config& c, int64_t warmup, int64_t steps, bool compare_no_sync, double bucket_mb) {
  const int rank = dist::rank(), world = dist::world_size();
  auto model = make_model(c);  // the same weights on every rank, broadcast from rank 0 anyway
  optim::Adam optimizer(model->parameters(), 0.005);
  optim::Scheduler constant(optimizer, [](int64_t) { return 1.0; });
  training::StepOptions options = step_options();
  options.ddp.bucket_cap_mb = bucket_mb;
  training::Step step(*model, optimizer, constant, c.batch, options);  // DDP: rank 0's weights
  dist::DistributedDataParallel& ddp = *step.ddp();
  // The same pool of global batches on every rank; this rank trains on its rows of each.
  const dist::RowRange rows = step.rows(c.batch);
  const std::vector<PoolBatch> pool = make_pool(c, rows);
  manual_seed(dist::rank_seed(0, rank));  // dropout masks differ between the ranks

  DistributedResult d;
  d.rank_rows = rows.size();
  Result& r = d.steps;
  r.parameters = model->num_parameters();
  r.rss_start_mb = proc_status_mb("VmRSS");
  double loss = 0;  // the global batch's (the same on every rank)
  auto timed_step = [&](int64_t i) {
    loss = take_step(step, i + 1, *model, pool[std::size_t(i) % pool.size()], rows);
  };
  uint64_t system_allocations_at_start = 0;
  for (int64_t i = 0; i < warmup + steps; ++i) {
    if (i == warmup) system_allocations_at_start = allocator_stats().system_allocations;
    const double seconds = timed_on_every_rank(timed_step, i);
    if (i == 0) r.first_loss = loss;
    r.last_loss = loss;
    if (i < warmup) continue;
    r.seconds.push_back(seconds);
    d.last = ddp.last_stats();
    d.wait_seconds += d.last.wait_seconds;
    d.overlap_seconds += d.last.overlap_seconds;
  }
  r.system_allocations_per_step =
      double(allocator_stats().system_allocations - system_allocations_at_start) / double(steps);
  d.wait_seconds = dist::all_reduce_sum(d.wait_seconds) / double(world * steps);
  d.overlap_seconds = dist::all_reduce_sum(d.overlap_seconds) / double(world * steps);
  if (compare_no_sync) {
    // The same steps with every backward under no_sync: each rank's compute alone, as it runs
    // beside the others (sharing the machine), without the all-reduce. The ranks' parameters
    // drift apart here, which does not change the work.
    auto step_no_sync = [&](int64_t i) {
      auto no_sync = ddp.no_sync();
      timed_step(i);
    };
    for (int64_t i = 0; i < steps; ++i) d.no_sync.push_back(timed_on_every_rank(step_no_sync, i));
  }
  return d;
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

// Whether mpirun (OpenMPI's or another PMI launcher) started this process: only then does the
// program start MPI, so that a plain run is the single-process benchmark exactly, without MPI.
bool launched_by_mpirun() {
  for (const char* variable : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"})
    if (std::getenv(variable) != nullptr) return true;
  return false;
}

struct Options {
  int threads = 1;
  int64_t steps = 0, warmup = 3;
  bool json = false, skip_peak = false, composed = false, compare_no_sync = false;
  bool oversubscribe = false;
  double bucket_mb = 25.0;
  std::string attention;
};

// A seq2seq config trained data-parallel by world_size() ranks; rank 0 prints.
int main_distributed(const Config& c, const Options& o) {
  const int rank = dist::rank(), world = dist::world_size();
  if (c.name == "mha") {
    if (rank == 0)
      std::fprintf(stderr,
          "ag-bench-train: --config mha runs in one process only (it has no optimizer step to "
          "synchronise); under mpirun use tiny, small or medium\n");
    return 2;
  }
  dist::check_thread_budget(o.threads, o.oversubscribe);
  const DistributedResult d =
      run_seq2seq_distributed(c, o.warmup, o.steps, o.compare_no_sync, o.bucket_mb);
  const Result& r = d.steps;
  const double peak_rss_mb = proc_status_mb("VmHWM");  // rank 0's, before the sgemm buffers
  // The job's sgemm peak: every rank measures at the same time, on its own core(s).
  dist::barrier();
  const double peak =
      o.skip_peak ? 0 : dist::all_reduce_sum(bench::measure_sgemm_peak(o.threads).best());
  if (rank != 0) return 0;

  const double seconds = median(r.seconds);
  const double ms_min = *std::min_element(r.seconds.begin(), r.seconds.end()) * 1e3;
  const double no_sync_ms = d.no_sync.empty() ? 0 : median(d.no_sync) * 1e3;
  const double tokens = double(c.batch * (c.source_steps + c.target_steps));  // global batch
  const double gflops = step_flops(c) / seconds * 1e-9;
  const double mfu = peak > 0 ? gflops / peak : 0;
  if (o.json) {
    std::printf(
        "{\"impl\": \"%s\", \"config\": \"%s\", \"world_size\": %d, \"local_size\": %d, "
        "\"threads\": %d, \"global_batch\": %lld, \"rank_batch\": %lld, \"ms_per_step\": %.3f, "
        "\"ms_min\": %.3f, \"ms_per_step_no_sync\": %.3f, \"comm_wait_ms\": %.3f, "
        "\"overlap_ms\": %.3f, \"buckets\": %lld, \"bucket_mb\": %g, \"gradient_bytes\": %lld, "
        "\"tokens_per_s\": %.1f, \"peak_rss_mb\": %.1f, \"rss_start_mb\": %.1f, \"gflops\": %.2f, "
        "\"mfu\": %.4f, \"sgemm_peak_gflops\": %.2f, \"flops_per_step\": %.0f, \"steps\": %lld, "
        "\"warmup\": %lld, \"parameters\": %lld, \"first_loss\": %.4f, \"last_loss\": %.4f, "
        "\"system_allocs_per_step\": %.2f, \"sequence\": %lld, \"attention\": \"%s\"}\n",
        o.composed ? "ag-ddp-composed" : "ag-ddp", c.name.c_str(), world, dist::local_size(),
        o.threads, static_cast<long long>(c.batch), static_cast<long long>(d.rank_rows),
        seconds * 1e3, ms_min, no_sync_ms, d.wait_seconds * 1e3, d.overlap_seconds * 1e3,
        static_cast<long long>(d.last.buckets), o.bucket_mb, static_cast<long long>(d.last.bytes),
        tokens / seconds, peak_rss_mb, r.rss_start_mb, gflops, mfu, peak, step_flops(c),
        static_cast<long long>(o.steps), static_cast<long long>(o.warmup),
        static_cast<long long>(r.parameters), r.first_loss, r.last_loss,
        r.system_allocations_per_step, static_cast<long long>(c.source_steps), o.attention.c_str());
  } else {
    std::printf(
        "ag-bench-train: config %s%s, data parallel over %d ranks (%d on this machine) x %d "
        "thread(s), global batch %lld (rank 0: %lld rows), %lld timed steps after %lld warm-up\n",
        c.name.c_str(), o.composed ? " (composed d2l path)" : "", world, dist::local_size(),
        o.threads, static_cast<long long>(c.batch), static_cast<long long>(d.rank_rows),
        static_cast<long long>(o.steps), static_cast<long long>(o.warmup));
    std::printf("  %.3f ms/step (median of the slowest rank's; min %.3f), %.0f tokens/s\n",
        seconds * 1e3, ms_min, tokens / seconds);
    if (!d.no_sync.empty())
      std::printf("  %.3f ms/step under no_sync (no all-reduce)\n", no_sync_ms);
    std::printf(
        "  all-reduce: %lld bucket(s), %lld gradient bytes per rank; waited %.3f ms/step at the "
        "end of backward (mean over ranks), %.3f ms from the first bucket's start to the end\n",
        static_cast<long long>(d.last.buckets), static_cast<long long>(d.last.bytes),
        d.wait_seconds * 1e3, d.overlap_seconds * 1e3);
    std::printf("  rank 0: peak RSS %.1f MB (%.1f MB before the first step), %lld parameters\n",
        peak_rss_mb, r.rss_start_mb, static_cast<long long>(r.parameters));
    std::printf(
        "  matmul work %.3f GFLOP/step -> %.2f GFLOP/s; sgemm peak of all ranks %.2f GFLOP/s; "
        "mfu %.1f%%\n",
        step_flops(c) * 1e-9, gflops, peak, 100 * mfu);
    std::printf(
        "  loss of the global batch %.4f (first step) -> %.4f (last)\n", r.first_loss, r.last_loss);
  }
  std::fflush(stdout);
  return 0;
}

}  // namespace

static int run_program(int argc, char** argv) {
  std::optional<dist::Environment> mpi;  // MPI_Init ... MPI_Finalize, only under mpirun
  if (launched_by_mpirun()) mpi.emplace(argc, argv);
  bool compare_no_sync = false, oversubscribe = false;
  double bucket_mb = 25.0;
  std::string config_name;
  int threads = 1;
  int64_t steps = 0, warmup = 3;
  bool json = false, skip_peak = false, composed = false;
  std::string attention = "auto";
  int64_t sequence = 0, batch = 0;
  CLI::App app{
      "ag-bench-train: time the training step of d2l's Transformer (see docs/benchmarks.md)"};
  app.add_option("--config", config_name, "tiny | small | medium | mha")
      ->required()
      ->check(CLI::IsMember({"tiny", "small", "medium", "mha"}));
  using training::add_whole_number;
  add_whole_number(app, "--threads", threads, "ag's threads", 1, max_num_threads());
  add_whole_number(app, "--steps", steps,
      "timed steps (0: the config's, tiny 100, small 40, medium 20, mha 40)", int64_t{0},
      int64_t{1000000});
  add_whole_number(app, "--warmup", warmup, "untimed steps first", int64_t{0}, int64_t{1000});
  app.add_flag("--json", json, "print one JSON object on one line");
  app.add_flag("--composed", composed,
      "run the composed d2l path instead of the fused kernels (nn::set_fused_kernels(false))");
  app.add_option("--attention", attention,
         "MultiHeadAttention's fused kernel: auto (tiled from "
         "ag::kTiledAttentionFromKeys keys on), whole (scaled_dot_product_attention) or "
         "tiled (flash_attention)")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "whole", "tiled"}));
  add_whole_number(app, "--sequence", sequence,
      "mha only: the sequence length T instead of 64 (0: 64)", int64_t{0}, int64_t{16384});
  add_whole_number(app, "--batch", batch,
      "the batch instead of the config's (0: the config's; under mpirun: the global batch); e.g. "
      "one rank's share, timed alone",
      int64_t{0}, int64_t{4096});
  app.add_flag("--no-sgemm-peak", skip_peak,
      "skip the sgemm peak measurement (for profiling runs; mfu is then 0)");
  app.add_flag("--compare-no-sync", compare_no_sync,
      "under mpirun: after the timed steps, time as many again under no_sync (each rank's "
      "compute without the all-reduce)");
  app.add_flag("--oversubscribe", oversubscribe,
      "under mpirun: run even when ranks on this machine x --threads exceed its hardware "
      "threads (slow)");
  app.add_option("--bucket-mb", bucket_mb,
         "under mpirun: DistributedDataParallel's bucket_cap_mb (gradients all-reduced in "
         "buckets of about this many MiB)")
      ->capture_default_str()
      ->check(CLI::Range(0.001, 1e6));
  CLI11_PARSE(app, argc, argv);

  Config c = bench::config_named(config_name);  // a copy: --sequence and --batch change it
  if (steps == 0) steps = c.default_steps;
  if (sequence > 0) {
    if (c.name != "mha") {
      std::fprintf(stderr, "ag-bench-train: --sequence applies to --config mha only\n");
      return 2;
    }
    c.source_steps = sequence;
  }
  if (batch > 0) c.batch = batch;
  set_attention_kernel(attention == "whole"   ? AttentionKernel::whole_rows
                       : attention == "tiled" ? AttentionKernel::tiled
                                              : AttentionKernel::automatic);
  set_num_threads(threads);
  nn::set_fused_kernels(!composed);

  if (mpi && dist::world_size() > 1) {
    try {
      return main_distributed(c, {threads, steps, warmup, json, skip_peak, composed,
                                     compare_no_sync, oversubscribe, bucket_mb, attention});
    } catch (const std::exception& e) {
      dist::abort("ag-bench-train", e.what(), 1);  // ends every rank, not only this one
    }
  }
  const Result r = c.name == "mha" ? run_mha(c, warmup, steps) : run_seq2seq(c, warmup, steps);
  const double peak_rss_mb = proc_status_mb("VmHWM");  // before the sgemm buffers exist

  const double seconds = median(r.seconds);
  const double tokens = c.name == "mha" ? double(c.batch * c.source_steps)
                                        : double(c.batch * (c.source_steps + c.target_steps));
  const double flops = step_flops(c);
  const double gflops = flops / seconds * 1e-9;
  const bench::SgemmPeak peaks =
      skip_peak ? bench::SgemmPeak{} : bench::measure_sgemm_peak(threads);
  const double peak = peaks.best();
  const double mfu = peak > 0 ? gflops / peak : 0;
  const double ms_min = *std::min_element(r.seconds.begin(), r.seconds.end()) * 1e3;

  if (json) {
    std::printf(
        "{\"impl\": \"%s\", \"config\": \"%s\", \"threads\": %d, \"ms_per_step\": %.3f, "
        "\"ms_min\": %.3f, "
        "\"tokens_per_s\": %.1f, \"peak_rss_mb\": %.1f, \"rss_start_mb\": %.1f, \"gflops\": %.2f, "
        "\"mfu\": %.4f, \"sgemm_peak_gflops\": %.2f, \"flops_per_step\": %.0f, \"steps\": %lld, "
        "\"warmup\": %lld, \"parameters\": %lld, \"first_loss\": %.4f, \"last_loss\": %.4f, "
        "\"system_allocs_per_step\": %.2f, \"sequence\": %lld, \"attention\": \"%s\", "
        "\"gemm_backend\": \"%s\", \"sgemm_peak_openblas_gflops\": %.2f, "
        "\"sgemm_peak_onednn_gflops\": %.2f}\n",
        composed ? "ag-composed" : "ag", c.name.c_str(), threads, seconds * 1e3, ms_min,
        tokens / seconds, peak_rss_mb, r.rss_start_mb, gflops, mfu, peak, flops,
        static_cast<long long>(steps), static_cast<long long>(warmup),
        static_cast<long long>(r.parameters), r.first_loss, r.last_loss,
        r.system_allocations_per_step, static_cast<long long>(c.source_steps), attention.c_str(),
        to_string(get_gemm_backend()).c_str(), peaks.openblas, peaks.onednn);
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
        "  matmul work %.3f GFLOP/step -> %.2f GFLOP/s; sgemm peak %.2f GFLOP/s (OpenBLAS %.2f, "
        "oneDNN %.2f); mfu %.1f%%; GEMM backend %s\n",
        flops * 1e-9, gflops, peak, peaks.openblas, peaks.onednn, 100 * mfu,
        to_string(get_gemm_backend()).c_str());
    if (c.name != "mha")
      std::printf("  loss %.4f (first step) -> %.4f (last)\n", r.first_loss, r.last_loss);
  }
  std::fflush(stdout);
  return 0;
}

int main(int argc, char** argv) {
  return bench::main_catching("ag-bench-train", run_program, argc, argv);
}
