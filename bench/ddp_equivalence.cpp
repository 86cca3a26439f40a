// ag-ddp-equivalence: does data-parallel training over N ranks train the model one process trains?
// The distributed issue's equivalence figure: N ranks × B/N rows against 1 process × B rows, for
// --steps steps of d2l's Transformer (ag-bench-train's tiny or small config) with dropout 0,
// comparing the per-step losses and the final parameters.
//
//   mpirun -np 2 build/bench/ag-ddp-equivalence --config tiny --dtype float64 --steps 50
//   mpirun -np 2 build/bench/ag-ddp-equivalence --config small --dtype float32 --optimizer sgd
//   mpirun -np 4 --oversubscribe build/bench/ag-ddp-equivalence --config tiny --chunk-rows 8
//
// Every rank trains two models from the same seed on the same global batches: its replica under
// DistributedDataParallel on its rows of each batch (dist::rows_of_rank, the loss weighted by its
// share of the batch's valid tokens), and a reference on the whole batch without any
// communication — the single process. Rank 0 prints, per step, the largest relative difference
// of the loss so far and, at the end, of the parameters (the largest over the parameter tensors
// of ‖a − b‖ / ‖b‖), and one JSON line with --json.
// Both take ag-train's step, training::Step (training/step.h): masked cross-entropy per valid
// token, backward, clipping at 1, and Adam (lr 0.005) or SGD (lr 0.1) — the reference with
// StepOptions::this_process_only; float64 models are the float32 ones converted with Module::to.
//
// --chunk-rows C is ag-train's (StepOptions::chunk_rows), on both sides: dist::ChunkedGradientSum
// instead of DistributedDataParallel, the batch cut into chunks of C rows, each chunk's gradient
// computed alone and the chunks' added in their global order — by the ranks together, and by the
// reference on its own. Both then add the same numbers in the same order, so the two must agree
// bit for bit (0 difference).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "autograd/generator.h"
#include "autograd/ops.h"
#include "autograd/parallel.h"
#include "distributed/distributed.h"
#include "models/seq2seq.h"
#include "optim/optimizer.h"
#include "seq2seq_configs.h"
#include "training/cli.h"
#include "training/step.h"

namespace {

using namespace ag;

using bench::Config;

// Batches of the reverse task (tiny: padded, uneven valid lengths) or of random ids (small).
data::Batch global_batch(const std::string& name, const Config& c, int64_t rows,
    data::TrainingStream* stream, Generator& gen) {
  if (name == "tiny") return data::make_batch(stream->next(rows), c.source_steps, c.target_steps);
  return data::random_batch(rows, c.source_steps, c.target_steps, c.vocab, gen);
}

double relative_difference(double a, double b) {
  return std::abs(a - b) / std::max(std::abs(b), 1e-30);
}

// ‖a − b‖ / ‖b‖ (Euclidean norms over all the elements of a parameter).
double tensor_difference(const Tensor& a, const Tensor& b) {
  const std::vector<double> va = a.contiguous().to_vector<double>();
  const std::vector<double> vb = b.contiguous().to_vector<double>();
  double difference = 0, norm = 0;
  for (std::size_t i = 0; i < va.size(); ++i) {
    difference += (va[i] - vb[i]) * (va[i] - vb[i]);
    norm += vb[i] * vb[i];
  }
  return std::sqrt(difference) / std::max(std::sqrt(norm), 1e-30);
}

}  // namespace

int main(int argc, char** argv) {
  // MPI under mpirun, Ctrl-C's policy; a failure on any rank ends the whole job (run_main)
  const auto mpi = training::start("ag-ddp-equivalence", argc, argv);
  std::string config_name = "tiny", dtype_name_option = "float32", optimizer_name = "adam";
  int64_t steps = 50, global_rows = 64, print_every = 10, chunk_rows = 0;
  bool json = false;
  CLI::App app{
      "ag-ddp-equivalence: N ranks x B/N rows against 1 process x B rows (run it under "
      "mpirun)"};
  app.add_option("--config", config_name, "tiny | small")
      ->check(CLI::IsMember({"tiny", "small"}))
      ->capture_default_str();
  app.add_option("--dtype", dtype_name_option, "float32 | float64")
      ->check(CLI::IsMember({"float32", "float64"}))
      ->capture_default_str();
  app.add_option("--optimizer", optimizer_name, "adam | sgd")
      ->check(CLI::IsMember({"adam", "sgd"}))
      ->capture_default_str();
  app.add_option("--steps", steps, "training steps")->check(CLI::Range(1, 100000));
  app.add_option("--batch", global_rows, "global batch B")->check(CLI::Range(1, 4096));
  app.add_option("--print-every", print_every, "print a line every this many steps (and steps 1-5)")
      ->check(CLI::Range(1, 100000));
  app.add_option("--chunk-rows", chunk_rows,
         "0: DistributedDataParallel; C > 0: dist::ChunkedGradientSum over chunks of C rows "
         "(each rank's rows must be whole chunks)")
      ->check(CLI::Range(0, 4096));
  app.add_flag("--json", json, "one JSON line at the end");
  return training::run_main("ag-ddp-equivalence", app, argc, argv, [&] {
    const int rank = dist::rank(), world = dist::world_size();
    if (world < 2) throw training::UsageError("run it under mpirun with 2 or more ranks");
    set_num_threads(1);
    const DType dtype = dtype_name_option == "float64" ? float64 : float32;
    // ag-bench-train's tiny (the reverse task's shapes) or small config, without dropout
    const Config& c = bench::config_named(config_name);
    const seq2seq::ModelConfig mc = bench::model_config(c, /*dropout=*/0.0);
    manual_seed(0);
    auto replica = seq2seq::make_transformer(mc);
    manual_seed(0);
    auto reference = seq2seq::make_transformer(mc);
    replica->to(dtype);
    reference->to(dtype);
    auto make_optimizer = [&](nn::Module& m) -> std::unique_ptr<optim::Optimizer> {
      if (optimizer_name == "sgd") return std::make_unique<optim::SGD>(m.parameters(), 0.1);
      return std::make_unique<optim::Adam>(m.parameters(), 0.005);
    };
    auto replica_optimizer = make_optimizer(*replica);
    auto reference_optimizer = make_optimizer(*reference);
    optim::Scheduler replica_schedule(*replica_optimizer, [](int64_t) { return 1.0; });
    optim::Scheduler reference_schedule(*reference_optimizer, [](int64_t) { return 1.0; });
    training::StepOptions options;  // clip 1.0
    options.chunk_rows = chunk_rows;
    options.program = "ag-ddp-equivalence";
    if (const std::string problem = training::chunk_problem(global_rows, chunk_rows);
        !problem.empty())
      dist::abort("ag-ddp-equivalence", problem, 2);
    training::Step replica_step(
        *replica, *replica_optimizer, replica_schedule, global_rows, options);
    options.this_process_only = true;  // the whole batch here, without communicating
    training::Step reference_step(
        *reference, *reference_optimizer, reference_schedule, global_rows, options);

    std::unique_ptr<data::Task> task = data::make_task("reverse");
    const auto held_out = data::held_out_set(*task, 500);
    data::TrainingStream stream(*task, held_out, 1);
    Generator gen(1);
    const dist::RowRange mine = replica_step.rows(global_rows);
    double worst_loss = 0;
    if (rank == 0)
      std::printf(
          "ag-ddp-equivalence: %s, %s, %s, %d ranks x ~%lld rows vs 1 process x %lld rows\n",
          config_name.c_str(), dtype_name_option.c_str(), optimizer_name.c_str(), world,
          static_cast<long long>(mine.size()), static_cast<long long>(global_rows));
    for (int64_t step = 1; step <= steps; ++step) {
      data::Batch batch = global_batch(config_name, c, global_rows, &stream, gen);
      if (dtype == float64) {  // ids and lengths in the models' dtype
        batch.source = batch.source.to(float64);
        batch.source_valid_lens = batch.source_valid_lens.to(float64);
        batch.decoder_input = batch.decoder_input.to(float64);
        batch.labels = batch.labels.to(float64);
        batch.label_valid_lens = batch.label_valid_lens.to(float64);
      }
      // Rows [first, last) of the batch: their loss per valid token, and their valid tokens.
      auto loss_of = [&](nn::EncoderDecoder& model) {
        return [&](int64_t first, int64_t last) {
          const data::Batch rows = data::batch_rows(batch, first, last);
          return std::pair{seq2seq::sequence_loss(model, rows), sum(rows.label_valid_lens).item()};
        };
      };
      const double tokens = sum(batch.label_valid_lens).item();
      const training::StepResult reference_result =
          reference_step.take(step, tokens, loss_of(*reference));
      const training::StepResult replica_result =
          replica_step.take(step, tokens, loss_of(*replica));
      if (reference_result.diverged || replica_result.diverged) return 1;  // (Step has said why)
      const double reference_loss = reference_result.loss, replica_loss = replica_result.loss;

      worst_loss = std::max(worst_loss, relative_difference(replica_loss, reference_loss));
      if (rank == 0 && (step <= 5 || step % print_every == 0 || step == steps))
        std::printf(
            "step %3lld  loss %.10g (1 process) %.10g (%d ranks)  max relative difference "
            "so far %.3g\n",
            static_cast<long long>(step), reference_loss, replica_loss, world, worst_loss);
    }
    double worst_parameter = 0;
    std::string worst_name;
    const auto a = replica->named_parameters(), b = reference->named_parameters();
    for (std::size_t i = 0; i < a.size(); ++i) {
      const double d = tensor_difference(a[i].second, b[i].second);
      if (d > worst_parameter) {
        worst_parameter = d;
        worst_name = a[i].first;
      }
    }
    if (rank == 0) {
      std::printf(
          "after %lld steps: losses agree to %.3g relative, parameters to %.3g (worst: %s)\n",
          static_cast<long long>(steps), worst_loss, worst_parameter, worst_name.c_str());
      if (json)
        std::printf(
            "{\"config\": \"%s\", \"dtype\": \"%s\", \"optimizer\": \"%s\", \"ranks\": %d, "
            "\"steps\": %lld, \"batch\": %lld, \"chunk_rows\": %lld, \"loss_rel\": %.6g, "
            "\"param_rel\": %.6g}\n",
            config_name.c_str(), dtype_name_option.c_str(), optimizer_name.c_str(), world,
            static_cast<long long>(steps), static_cast<long long>(global_rows),
            static_cast<long long>(chunk_rows), worst_loss, worst_parameter);
    }
    return 0;
  });
}
