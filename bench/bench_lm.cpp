// ag-bench-lm: the char-small language model — the speed of its training step and its validation
// loss after the 2000-step run, the numbers bench/bench_lm_torch.py measures for PyTorch on
// the same model and task — and the speed of generation with and without the key/value cache.
//
//   ag-bench-lm [--steps S] [--threads N] [--seed S] [--warmup W] [--eval-windows N] [--no-eval]
//               [--fortunes DIR] [--positions P] [--json]
//   ag-bench-lm --generation [--context C] [--new-tokens N] [--positions P] [--threads N] [--json]
//   ag-bench-lm --positions-ab P1,P2,... [--steps S] [--warmup W] [--threads N] [--json]
//   ag-bench-lm --long-generation [--block-size B] [--long-tokens N] [--positions P] [--json]
//
// --positions (nn::PositionScheme; default sinusoidal, char-small's) changes only the model's
// positions, in every mode.
//
// Training (what ag-train --task lm does on the fortunes corpus, through the same functions):
//   corpus      data::read_fortunes: every regular file in /usr/share/games/fortunes not ending
//               in .dat, symlinks skipped, name order, concatenated
//   split       lm::split_text: the first 90 % of the code points train, the rest validate
//   vocabulary  data::Vocab of the training split's characters (lm::tokenize, char), no reserved
//               tokens; validation characters outside it become <unk>
//   model       lm::make_language_model(lm::char_small_config(V)): D 128, 4 heads, 4 layers,
//               FFN 512, block 64, dropout 0.1, post-norm d2l blocks, sinusoidal positions,
//               untied, Xavier-uniform Linear weights; parameters and dropout from
//               ag::manual_seed(--seed)
//   batches     data::sample_lm_batch (nanoGPT's get_batch): 32 windows of 65 ids from an
//               ag::Generator seeded with --seed + 1 (as ag-train seeds its windows); drawn
//               before each step, not timed
//   step        training::Step, ag-train's (training/step.h), on lm::lm_loss of the windows as
//               ag-train --task lm gives it: forward, the mean cross-entropy per token, backward,
//               clip_grad_norm at 1.0, the finiteness check, optim::AdamW (lr 1e-3, betas
//               0.9/0.99, eps 1e-8, weight decay 0.1 on every parameter) — then the learning rate
//               of the next update from optim::cosine_with_warmup(100, 2000, 0.1) (100 warm-up
//               updates, cosine to 1e-4).
//               The schedule is always the 2000-step one; --steps S < 2000 runs its first S
//               updates (for timing).
//   evaluation  lm::evaluate on the validation ids: consecutive non-overlapping windows of 64 + 1
//               ids from the start, all that fit (or the first --eval-windows), batches of 32,
//               eval mode: the mean cross-entropy per token (val_loss), perplexity, bits/char
// Timing: every step (training::Step::take, the scheduler's step included) is timed alone with
// steady_clock; the first --warmup (default 10) are left out and the median of the rest is
// reported. The process's CPU time of each step (CLOCK_PROCESS_CPUTIME_ID: all its threads) is
// measured too, cpu_ms_per_step the median: on a machine shared with other work it shows the work
// a step costs, while the wall-clock time shows also the waiting.
//   tokens/s  = B·T per step / median step time
//   peak RSS  = VmHWM of /proc/self/status after the steps (before the evaluation)
//   GFLOP/s   = matmul FLOPs per step (analytical, see step_flops) / median step time
//   mfu       = GFLOP/s / the sgemm peak measured afterwards at the same thread count, on the best
//               of the build's GEMM libraries (bench/sgemm_peak.h); gemm_backend = the library of
//               ag's large float32 products (AG_GEMM_BACKEND=openblas|onednn)
//
// Generation (--generation): the time per new token at --context C tokens of context (default
// 256), with the key/value cache (a step runs the model on the one new token, appending its keys
// and values: nn::LanguageModel::forward(token, &cache)) and without it (a step runs the model on
// the whole prefix again, as lm::generate(use_cache = false) does). The model is char-small's
// shape with block_size 512 (so that context + new tokens fit and nothing is cropped), vocabulary
// 113 (the fortunes corpus's), untrained Xavier weights from seed 0 — speed does not depend on the
// weights. The prompt is C ids drawn from seed 1, decoding greedy, in eval mode without a graph.
// Each way generates --new-tokens N tokens (contexts C … C + N − 1), each step timed alone, twice:
// the second pass's median step is reported, and the ratio (the first pass, reported too, meets
// every buffer size for the first time and pays for getting it from the system). Then lm::generate itself runs both ways for the N tokens
// (end to end, the prompt's forward included); every way must give the same tokens (same_tokens).
//
// Positions A/B (--positions-ab): the training step of char-small with each listed scheme, in one
// process, the models built from the same seed and trained on the same batches, their steps taken
// in turn (scheme 1, 2, …, 1, 2, …) so that a slower or busier moment of the machine falls on all
// of them alike; --warmup rounds untimed, then the median of the rest per scheme, and its ratio to
// the first scheme's (the goal: RoPE's and ALiBi's step ≤ 1.1× the sinusoidal one).
//
// Long generation (--long-generation): lm::generate end to end, greedy from a one-token prompt, of
// --long-tokens new tokens (default 1024) with block_size --block-size (default 256), with the
// cache and without; tokens/s both ways. Past the block, absolute positions rebuild the cache at
// every step (a forward of the whole window, as without the cache) while relative ones slide it
// (models/lm.h, generate), so only the latter keep the cache's speed. The model is --generation's
// (untrained, vocabulary 113).
//
// --threads sets ag's threads (ag::set_num_threads). --json prints one JSON object on one line.
#include <cblas.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "autograd/allocator.h"
#include "autograd/gemm_backend.h"
#include "autograd/ops.h"
#include "data/text.h"
#include "models/lm.h"
#include "optim/optimizer.h"
#include "optim/schedule.h"
#include "sgemm_peak.h"
#include "step_stats.h"
#include "training/cli.h"
#include "training/step.h"

namespace {

using namespace ag;
using Clock = std::chrono::steady_clock;

// char-small's optimizer and schedule (the issue's): the model's sizes are lm::char_small_config's.
constexpr int64_t kBatch = 32;
constexpr int64_t kScheduleSteps = 2000, kWarmupUpdates = 100;
constexpr double kLr = 1e-3, kBeta1 = 0.9, kBeta2 = 0.99, kEps = 1e-8, kWeightDecay = 0.1;
constexpr double kMinLrFactor = 0.1, kClip = 1.0;

// Matmul FLOPs of one training step, counted analytically (2·M·N·K per matrix product of the
// forward, × 3 for forward + backward: the backward of C = A·B computes dA = dC·Bᵀ and dB = Aᵀ·dC).
// With B batch, T block, D width, F FFN width, L layers, V vocabulary:
//   block:         Q, K, V, O projections       4 · 2·B·T·D·D
//                  Q·Kᵀ and weights·V            2 · 2·B·T·T·D   (the masked half is computed too)
//                  FFN (D→F→D)                   2 · 2·B·T·D·F
//   output layer                                 2·B·T·D·V
//   step = 3 · (L · block + output layer)        (bench_lm_torch.py counts the same)
double step_flops(const nn::LanguageModelConfig& c, int64_t batch) {
  const double B = double(batch), T = double(c.block_size), D = double(c.num_hiddens);
  const double F = double(c.ffn_num_hiddens), L = double(c.num_layers), V = double(c.vocab_size);
  const double block = 4 * 2 * B * T * D * D + 2 * 2 * B * T * T * D + 2 * 2 * B * T * D * F;
  return 3 * (L * block + 2 * B * T * D * V);
}

using bench::median;
using bench::proc_status_mb;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// The CPU time of the process so far (all its threads), in seconds.
double process_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

struct TrainOptions {
  int64_t steps = kScheduleSteps, warmup = 10, eval_windows = 0;
  nn::PositionScheme positions = nn::PositionScheme::sinusoidal;
  uint64_t seed = 0;
  bool evaluate = true;
  bool sgemm_peak = true;  // measure the machine's sgemm peak for the MFU
  std::string fortunes = "/usr/share/games/fortunes";
};

// The task's ids and vocabulary. As in ag-train --task lm (read_lm_data), the text and its tokens
// (a std::string per character) are gone before training starts: only the ids are kept.
struct Task {
  data::Vocab vocab;
  std::vector<int64_t> train_ids, val_ids;
};

Task read_task(const std::string& fortunes) {
  const data::TextCorpus corpus = data::read_fortunes(fortunes);
  const auto [train_text, val_text] = lm::split_text(corpus.text, 0.9);
  const lm::TokenizedText train_tokens = lm::tokenize(train_text, lm::Tokenizer::chars);
  const lm::TokenizedText val_tokens = lm::tokenize(val_text, lm::Tokenizer::chars);
  Task task{data::Vocab(train_tokens.tokens), {}, {}};
  task.train_ids = task.vocab.ids(train_tokens.tokens);
  task.val_ids = task.vocab.ids(val_tokens.tokens);
  return task;
}

int run_training(const TrainOptions& o, int threads, bool json) {
  // The task, as ag-train --task lm builds it without --text.
  const Task task = read_task(o.fortunes);
  const data::Vocab& vocab = task.vocab;
  const std::vector<int64_t>& train_ids = task.train_ids;
  const std::vector<int64_t>& val_ids = task.val_ids;

  manual_seed(o.seed);
  nn::LanguageModelConfig config = lm::char_small_config(vocab.size());
  config.positions = o.positions;
  auto model = lm::make_language_model(config);
  model->train();
  optim::AdamW optimizer(model->parameters(), kLr, {kBeta1, kBeta2}, kEps, kWeightDecay);
  optim::Scheduler scheduler(
      optimizer, optim::cosine_with_warmup(kWarmupUpdates, kScheduleSteps, kMinLrFactor));
  Generator batches(o.seed + 1);  // ag-train's data generator
  training::StepOptions step_options;
  step_options.clip = kClip;
  step_options.program = "ag-bench-lm";
  training::Step train_step(*model, optimizer, scheduler, kBatch, step_options);

  std::vector<double> seconds, cpu_seconds;
  double first_loss = 0, last_loss = 0;
  const double rss_start_mb = proc_status_mb("VmRSS");
  uint64_t system_allocations_at_start = allocator_stats().system_allocations;
  for (int64_t step = 1; step <= o.steps; ++step) {
    const data::LMBatch batch =
        data::sample_lm_batch(train_ids, kBatch, config.block_size, batches);
    if (step == o.warmup + 1) system_allocations_at_start = allocator_stats().system_allocations;
    const auto start = Clock::now();
    const double start_cpu = process_cpu_seconds();
    // Windows [first, last) of the batch: their mean cross-entropy, and their number.
    const training::StepResult result =
        train_step.take(step, double(kBatch), [&](int64_t first, int64_t last) {
          return std::pair{lm::lm_loss(*model, batch.inputs.narrow(0, first, last - first),
                               batch.labels.narrow(0, first, last - first)),
              double(last - first)};
        });
    const double loss = result.loss;
    const double elapsed = seconds_since(start), elapsed_cpu = process_cpu_seconds() - start_cpu;
    if (step > o.warmup) {
      seconds.push_back(elapsed);
      cpu_seconds.push_back(elapsed_cpu);
    }
    if (step == 1) first_loss = loss;
    last_loss = loss;
    if (result.diverged) return 1;  // (training::Step says why)
  }
  const double system_allocations_per_step =
      double(allocator_stats().system_allocations - system_allocations_at_start) /
      double(o.steps - o.warmup);
  const double peak_rss_mb = proc_status_mb("VmHWM");  // before the evaluation and sgemm buffers

  lm::Evaluation eval;
  if (o.evaluate) {
    const int64_t fit = (static_cast<int64_t>(val_ids.size()) - 1) / config.block_size;
    eval = lm::evaluate(*model, val_ids, {}, o.eval_windows > 0 ? o.eval_windows : fit, kBatch);
  }

  const double median_s = median(seconds);
  double train_seconds = 0;
  for (double s : seconds) train_seconds += s;
  const double tokens = double(kBatch * config.block_size);
  const double flops = step_flops(config, kBatch);
  const double gflops = flops / median_s * 1e-9;
  const bench::SgemmPeak peaks =
      o.sgemm_peak ? bench::measure_sgemm_peak(threads) : bench::SgemmPeak{};
  const double peak = peaks.best();
  const double mfu = peak > 0 ? gflops / peak : 0;
  const double ms_min = *std::min_element(seconds.begin(), seconds.end()) * 1e3;
  const std::string val_loss = o.evaluate ? std::to_string(eval.loss) : "null";

  if (json) {
    std::printf(
        "{\"impl\": \"ag\", \"config\": \"char-small\", \"threads\": %d, \"seed\": %llu, "
        "\"ms_per_step\": %.3f, \"ms_min\": %.3f, \"cpu_ms_per_step\": %.3f, "
        "\"tokens_per_s\": %.1f, \"peak_rss_mb\": %.1f, "
        "\"rss_start_mb\": %.1f, \"gflops\": %.2f, \"mfu\": %.4f, \"sgemm_peak_gflops\": %.2f, "
        "\"flops_per_step\": %.0f, \"steps\": %lld, \"warmup\": %lld, \"parameters\": %lld, "
        "\"vocab\": %lld, \"train_chars\": %zu, \"val_chars\": %zu, \"first_loss\": %.4f, "
        "\"last_loss\": %.4f, \"val_loss\": %s, \"val_windows\": %lld, \"train_seconds\": %.2f, "
        "\"system_allocs_per_step\": %.2f, \"gemm_backend\": \"%s\", "
        "\"sgemm_peak_openblas_gflops\": %.2f, \"sgemm_peak_onednn_gflops\": %.2f}\n",
        threads, static_cast<unsigned long long>(o.seed), median_s * 1e3, ms_min,
        median(cpu_seconds) * 1e3, tokens / median_s, peak_rss_mb, rss_start_mb, gflops, mfu, peak,
        flops, static_cast<long long>(o.steps), static_cast<long long>(o.warmup),
        static_cast<long long>(model->num_parameters()), static_cast<long long>(vocab.size()),
        train_ids.size(), val_ids.size(), first_loss, last_loss, val_loss.c_str(),
        static_cast<long long>(eval.windows), train_seconds, system_allocations_per_step,
        to_string(get_gemm_backend()).c_str(), peaks.openblas, peaks.onednn);
  } else {
    std::printf(
        "ag-bench-lm: char-small, %d thread(s), seed %llu, %lld steps (%lld left out of "
        "the timing)\n",
        threads, static_cast<unsigned long long>(o.seed), static_cast<long long>(o.steps),
        static_cast<long long>(o.warmup));
    std::printf("  fortunes: %zu training and %zu validation characters, vocabulary %lld\n",
        train_ids.size(), val_ids.size(), static_cast<long long>(vocab.size()));
    std::printf("  %.3f ms/step (median; min %.3f), %.0f tokens/s; CPU time %.3f ms/step\n",
        median_s * 1e3, ms_min, tokens / median_s, median(cpu_seconds) * 1e3);
    std::printf("  peak RSS %.1f MB (%.1f MB before the first step), %lld parameters\n",
        peak_rss_mb, rss_start_mb, static_cast<long long>(model->num_parameters()));
    std::printf(
        "  matmul work %.3f GFLOP/step -> %.2f GFLOP/s; sgemm peak %.2f GFLOP/s (OpenBLAS %.2f, "
        "oneDNN %.2f); mfu %.1f%%; GEMM backend %s\n",
        flops * 1e-9, gflops, peak, peaks.openblas, peaks.onednn, 100 * mfu,
        to_string(get_gemm_backend()).c_str());
    std::printf("  training loss %.4f (first step) -> %.4f (last)\n", first_loss, last_loss);
    if (o.evaluate)
      std::printf(
          "  validation loss %.4f over %lld windows of %lld (perplexity %.3f, %.4f bits/char)\n",
          eval.loss, static_cast<long long>(eval.windows),
          static_cast<long long>(config.block_size), eval.perplexity, eval.bits_per_character);
  }
  std::fflush(stdout);
  return 0;
}

// ---- generation ---------------------------------------------------------------------------------

struct GenerationOptions {
  int64_t context = 256, new_tokens = 32;
  nn::PositionScheme positions = nn::PositionScheme::sinusoidal;
  int64_t block_size = 256, long_tokens = 1024;  // --long-generation
};

// The id of the largest logit of the last position of logits (1, T, V) (the first on ties).
int64_t last_argmax(const Tensor& logits) {
  const Tensor last = logits.select(1, logits.size(1) - 1).contiguous();  // (1, V)
  const float* row = last.data<float>();
  return std::max_element(row, row + last.size(1)) - row;
}

int run_generation(const GenerationOptions& o, int threads, bool json) {
  constexpr int64_t kVocab = 113;  // the fortunes corpus's character vocabulary
  nn::LanguageModelConfig config = lm::char_small_config(kVocab);
  config.block_size = 512;
  config.positions = o.positions;
  if (o.context + o.new_tokens > config.block_size) {
    std::fprintf(stderr,
        "ag-bench-lm: --context %lld + --new-tokens %lld must fit block_size %lld\n",
        static_cast<long long>(o.context), static_cast<long long>(o.new_tokens),
        static_cast<long long>(config.block_size));
    return 2;
  }
  manual_seed(0);
  auto model = lm::make_language_model(config);
  model->eval();
  Generator prompt_gen(1);
  std::vector<int64_t> prompt(static_cast<std::size_t>(o.context));
  for (auto& id : prompt) id = prompt_gen.randint(0, kVocab);
  auto ids_tensor = [](const std::vector<int64_t>& ids) {  // (1, n) float32 ids
    return tensor(std::vector<float>(ids.begin(), ids.end()), {1, int64_t(ids.size())});
  };

  // Per token, step by step (what lm::generate does at each step, greedy), each step timed alone.
  // Each way runs twice and the second pass is timed: the first meets every buffer size (the
  // cache and the prefix grow by a token a step) for the first time, and ag's caching allocator
  // gets those from the system, page faults included; the second runs on buffers it already has,
  // as lm::generate afterwards does.
  NoGradGuard no_grad;
  // With the cache: the prompt's forward fills it (not timed), then one new token per step.
  auto cached_pass = [&](std::vector<double>& seconds, std::vector<int64_t>& tokens) {
    seconds.clear();
    tokens.clear();
    nn::KVCache cache = model->make_cache();
    int64_t next = last_argmax(model->forward(ids_tensor(prompt), &cache));  // (1, C, V)
    for (int64_t i = 0; i < o.new_tokens; ++i) {
      tokens.push_back(next);
      const Tensor token = ids_tensor({next});  // (1, 1)
      const auto start = Clock::now();
      next = last_argmax(model->forward(token, &cache));  // (1, 1, V)
      seconds.push_back(seconds_since(start));
    }
  };
  // Without: each step runs the whole prefix, context C + i tokens.
  auto recompute_pass = [&](std::vector<double>& seconds, std::vector<int64_t>& tokens) {
    seconds.clear();
    tokens.clear();
    std::vector<int64_t> prefix = prompt;
    int64_t next = last_argmax(model->forward(ids_tensor(prefix)));
    for (int64_t i = 0; i < o.new_tokens; ++i) {
      tokens.push_back(next);
      prefix.push_back(next);
      const Tensor tokens_so_far = ids_tensor(prefix);  // (1, C + i + 1)
      const auto start = Clock::now();
      next = last_argmax(model->forward(tokens_so_far));  // (1, C + i + 1, V)
      seconds.push_back(seconds_since(start));
    }
  };
  std::vector<double> cached_s, recompute_s, cold_cached_s, cold_recompute_s;
  std::vector<int64_t> cached_tokens, recomputed_tokens;
  cached_pass(cold_cached_s, cached_tokens);
  recompute_pass(cold_recompute_s, recomputed_tokens);
  cached_pass(cached_s, cached_tokens);
  recompute_pass(recompute_s, recomputed_tokens);
  const double cached_ms = median(cached_s) * 1e3, recompute_ms = median(recompute_s) * 1e3;
  const double cold_cached_ms = median(cold_cached_s) * 1e3;
  const double cold_recompute_ms = median(cold_recompute_s) * 1e3;

  // End to end: lm::generate (the prompt's forward included) both ways, and its tokens.
  const lm::Sampling greedy{0.0, 0};
  auto timed_generate = [&](bool use_cache, std::vector<int64_t>& tokens) {
    Generator sampling_gen(0);  // greedy draws nothing
    const auto start = Clock::now();
    tokens = lm::generate(*model, prompt, o.new_tokens, greedy, sampling_gen, use_cache);
    return seconds_since(start);
  };
  std::vector<int64_t> generated_cached, generated_recomputed;
  const double generate_cached_s = timed_generate(true, generated_cached);
  const double generate_recompute_s = timed_generate(false, generated_recomputed);
  const bool same = cached_tokens == recomputed_tokens && generated_cached == cached_tokens &&
                    generated_recomputed == cached_tokens;

  if (json) {
    std::printf(
        "{\"impl\": \"ag\", \"config\": \"generation\", \"threads\": %d, \"context\": %lld, "
        "\"new_tokens\": %lld, \"num_hiddens\": %lld, \"num_layers\": %lld, \"block_size\": %lld, "
        "\"vocab\": %lld, \"ms_per_token_cached\": %.4f, \"ms_per_token_recompute\": %.4f, "
        "\"speedup\": %.3f, \"first_pass_ms_per_token_cached\": %.4f, "
        "\"first_pass_ms_per_token_recompute\": %.4f, \"generate_ms_cached\": %.3f, "
        "\"generate_ms_recompute\": %.3f, \"same_tokens\": %s, \"positions\": \"%s\"}\n",
        threads, static_cast<long long>(o.context), static_cast<long long>(o.new_tokens),
        static_cast<long long>(config.num_hiddens), static_cast<long long>(config.num_layers),
        static_cast<long long>(config.block_size), static_cast<long long>(kVocab), cached_ms,
        recompute_ms, recompute_ms / cached_ms, cold_cached_ms, cold_recompute_ms,
        generate_cached_s * 1e3, generate_recompute_s * 1e3, same ? "true" : "false",
        nn::position_scheme_name(o.positions).c_str());
  } else {
    std::printf(
        "ag-bench-lm --generation: %lld tokens of context, %lld new tokens (greedy), "
        "char-small's shape with block_size %lld, %s positions, %d thread(s)\n",
        static_cast<long long>(o.context), static_cast<long long>(o.new_tokens),
        static_cast<long long>(config.block_size), nn::position_scheme_name(o.positions).c_str(),
        threads);
    std::printf(
        "  per token (median of the steps):  with the cache %.4f ms, recomputing the "
        "prefix %.4f ms: %.2fx\n",
        cached_ms, recompute_ms, recompute_ms / cached_ms);
    std::printf("  the first pass (every buffer size new to the allocator): %.4f ms and %.4f ms\n",
        cold_cached_ms, cold_recompute_ms);
    std::printf(
        "  lm::generate of %lld tokens, the prompt's forward included: %.2f ms with the "
        "cache, %.2f ms without\n",
        static_cast<long long>(o.new_tokens), generate_cached_s * 1e3, generate_recompute_s * 1e3);
    std::printf("  same tokens every way: %s\n", same ? "yes" : "NO");
  }
  std::fflush(stdout);
  return same ? 0 : 1;
}

// ---- positions A/B ------------------------------------------------------------------------------

int run_positions_ab(
    const TrainOptions& o, const std::vector<nn::PositionScheme>& schemes, int threads, bool json) {
  const Task task = read_task(o.fortunes);
  struct Arm {  // one scheme's model, optimizer, schedule and step
    nn::PositionScheme positions;
    std::shared_ptr<nn::LanguageModel> model;
    std::unique_ptr<optim::AdamW> optimizer;
    std::unique_ptr<optim::Scheduler> scheduler;
    std::unique_ptr<training::Step> step;
    std::vector<double> seconds;
  };
  std::vector<Arm> arms;
  for (const nn::PositionScheme positions : schemes) {
    Arm arm{positions, nullptr, nullptr, nullptr, nullptr, {}};
    manual_seed(o.seed);
    nn::LanguageModelConfig config = lm::char_small_config(task.vocab.size());
    config.positions = positions;
    arm.model = lm::make_language_model(config);
    arm.model->train();
    arm.optimizer = std::make_unique<optim::AdamW>(
        arm.model->parameters(), kLr, std::pair{kBeta1, kBeta2}, kEps, kWeightDecay);
    arm.scheduler = std::make_unique<optim::Scheduler>(
        *arm.optimizer, optim::cosine_with_warmup(kWarmupUpdates, kScheduleSteps, kMinLrFactor));
    training::StepOptions step_options;
    step_options.clip = kClip;
    step_options.program = "ag-bench-lm";
    arm.step = std::make_unique<training::Step>(
        *arm.model, *arm.optimizer, *arm.scheduler, kBatch, step_options);
    arms.push_back(std::move(arm));
  }
  Generator batches(o.seed + 1);
  for (int64_t step = 1; step <= o.steps; ++step) {
    // One batch for the round: every scheme trains on the same windows.
    const data::LMBatch batch = data::sample_lm_batch(task.train_ids, kBatch, 64, batches);
    for (Arm& arm : arms) {
      const auto start = Clock::now();
      const training::StepResult result =
          arm.step->take(step, double(kBatch), [&](int64_t first, int64_t last) {
            return std::pair{lm::lm_loss(*arm.model, batch.inputs.narrow(0, first, last - first),
                                 batch.labels.narrow(0, first, last - first)),
                double(last - first)};
          });
      const double elapsed = seconds_since(start);
      if (result.diverged) return 1;
      if (step > o.warmup) arm.seconds.push_back(elapsed);
    }
  }
  const double base_ms = median(arms[0].seconds) * 1e3;
  if (json) {
    std::printf(
        "{\"impl\": \"ag\", \"config\": \"positions-ab\", \"threads\": %d, \"steps\": %lld, "
        "\"warmup\": %lld, \"schemes\": [",
        threads, static_cast<long long>(o.steps), static_cast<long long>(o.warmup));
    for (std::size_t a = 0; a < arms.size(); ++a) {
      const double ms = median(arms[a].seconds) * 1e3;
      std::printf("%s{\"positions\": \"%s\", \"ms_per_step\": %.3f, \"ratio\": %.4f}",
          a == 0 ? "" : ", ", nn::position_scheme_name(arms[a].positions).c_str(), ms,
          ms / base_ms);
    }
    std::printf("]}\n");
  } else {
    std::printf(
        "ag-bench-lm --positions-ab: char-small's training step, %d thread(s), %lld "
        "rounds (%lld untimed), the schemes in turn\n",
        threads, static_cast<long long>(o.steps), static_cast<long long>(o.warmup));
    for (const Arm& arm : arms) {
      const double ms = median(arm.seconds) * 1e3;
      std::printf("  %-10s  %8.3f ms/step (median)  %.3fx %s\n",
          nn::position_scheme_name(arm.positions).c_str(), ms, ms / base_ms,
          nn::position_scheme_name(arms[0].positions).c_str());
    }
  }
  std::fflush(stdout);
  return 0;
}

// ---- long generation ----------------------------------------------------------------------------

int run_long_generation(const GenerationOptions& o, int threads, bool json) {
  constexpr int64_t kVocab = 113;
  nn::LanguageModelConfig config = lm::char_small_config(kVocab);
  config.block_size = o.block_size;
  config.positions = o.positions;
  manual_seed(0);
  auto model = lm::make_language_model(config);
  model->eval();
  auto tokens_per_s = [&](bool use_cache, std::vector<int64_t>& tokens) {
    Generator sampling_gen(0);  // greedy draws nothing
    const auto start = Clock::now();
    tokens = lm::generate(*model, {1}, o.long_tokens, {0.0, 0}, sampling_gen, use_cache);
    return double(o.long_tokens) / seconds_since(start);
  };
  std::vector<int64_t> cached, recomputed;
  const double with_cache = tokens_per_s(true, cached);
  const double without = tokens_per_s(false, recomputed);
  // The two agree while the context fits the block; past it a sliding cache differs from a
  // recomputed window (models/lm.h), so only that part is compared.
  const auto fits = static_cast<std::ptrdiff_t>(std::min(o.long_tokens, o.block_size - 1));
  const bool same_in_block = std::equal(cached.begin(), cached.begin() + fits, recomputed.begin());
  if (json) {
    std::printf(
        "{\"impl\": \"ag\", \"config\": \"long-generation\", \"threads\": %d, "
        "\"positions\": \"%s\", \"block_size\": %lld, \"new_tokens\": %lld, "
        "\"tokens_per_s_cached\": %.1f, \"tokens_per_s_recompute\": %.1f, "
        "\"speedup\": %.3f, \"same_tokens_in_block\": %s}\n",
        threads, nn::position_scheme_name(o.positions).c_str(),
        static_cast<long long>(o.block_size), static_cast<long long>(o.long_tokens), with_cache,
        without, with_cache / without, same_in_block ? "true" : "false");
  } else {
    std::printf(
        "ag-bench-lm --long-generation: %s positions, block_size %lld, %lld new tokens "
        "from one, %d thread(s)\n",
        nn::position_scheme_name(o.positions).c_str(), static_cast<long long>(o.block_size),
        static_cast<long long>(o.long_tokens), threads);
    std::printf(
        "  %.1f tokens/s with the cache, %.1f without: %.2fx; the same tokens while the "
        "context fits: %s\n",
        with_cache, without, with_cache / without, same_in_block ? "yes" : "NO");
  }
  std::fflush(stdout);
  return same_in_block ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 1;
  bool json = false, generation = false, long_generation = false, no_eval = false, no_peak = false;
  TrainOptions train;
  GenerationOptions gen;
  std::string positions = "sinusoidal", positions_ab;
  CLI::App app{
      "ag-bench-lm: the char-small language model — training step time and validation "
      "loss, or generation with and without the key/value cache (see "
      "docs/benchmarks.md)"};
  using training::add_whole_number;
  add_whole_number(app, "--threads", threads, "ag's threads", 1, max_num_threads());
  app.add_flag("--json", json, "print one JSON object on one line");
  add_whole_number(app, "--steps", train.steps,
      "training steps (updates) of the 2000-step schedule", int64_t{1}, int64_t{1000000});
  add_whole_number(
      app, "--warmup", train.warmup, "steps left out of the timing", int64_t{0}, int64_t{1000000});
  app.add_option("--seed", train.seed, "parameters, dropout and batches")->capture_default_str();
  add_whole_number(app, "--eval-windows", train.eval_windows,
      "validation windows to evaluate (0: all that fit)", int64_t{0}, int64_t{1000000000});
  app.add_flag("--no-eval", no_eval, "skip the final evaluation");
  app.add_flag("--no-sgemm-peak", no_peak,
      "skip the sgemm peak measurement (for profiling and tracing runs; mfu is then 0)");
  app.add_option("--fortunes", train.fortunes, "the fortunes folder")->capture_default_str();
  app.add_flag("--generation", generation,
      "time generation with and without the key/value cache instead of training");
  add_whole_number(
      app, "--context", gen.context, "--generation: tokens of context", int64_t{1}, int64_t{511});
  add_whole_number(app, "--new-tokens", gen.new_tokens, "--generation: tokens timed per way",
      int64_t{1}, int64_t{511});
  app.add_option("--positions", positions,
         "the model's positions: sinusoidal | learned | rope | alibi | none")
      ->capture_default_str();
  app.add_option("--positions-ab", positions_ab,
      "time the training step of these schemes (comma-separated) in turn, in one run");
  app.add_flag("--long-generation", long_generation,
      "tokens/s of lm::generate past the block, with and without the cache");
  add_whole_number(app, "--block-size", gen.block_size, "--long-generation: the model's block",
      int64_t{2}, int64_t{4096});
  add_whole_number(app, "--long-tokens", gen.long_tokens, "--long-generation: new tokens",
      int64_t{1}, int64_t{100000});
  CLI11_PARSE(app, argc, argv);
  std::vector<nn::PositionScheme> ab_schemes;
  try {
    train.positions = gen.positions = nn::parse_position_scheme(positions, "--positions");
    std::stringstream list(positions_ab);
    for (std::string name; std::getline(list, name, ',');)
      ab_schemes.push_back(nn::parse_position_scheme(name, "--positions-ab"));
  } catch (const ValueError& e) {
    std::fprintf(stderr, "ag-bench-lm: %s\n", e.what());
    return 2;
  }
  train.evaluate = !no_eval;
  train.sgemm_peak = !no_peak;
  if (!generation && !long_generation && train.warmup >= train.steps) {
    std::fprintf(stderr, "ag-bench-lm: --warmup %lld must be below --steps %lld\n",
        static_cast<long long>(train.warmup), static_cast<long long>(train.steps));
    return 2;
  }
  set_num_threads(threads);
  try {
    if (!ab_schemes.empty()) return run_positions_ab(train, ab_schemes, threads, json);
    if (long_generation) return run_long_generation(gen, threads, json);
    return generation ? run_generation(gen, threads, json) : run_training(train, threads, json);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ag-bench-lm: %s\n", e.what());
    return 1;
  }
}
