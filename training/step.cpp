#include "training/step.h"

#include <cmath>
#include <cstdio>

#include "autograd/ops.h"

namespace ag::training {

StepOptions StepOptions::of(const RunOptions& o, const std::string& program) {
  StepOptions options;
  options.clip = o.clip;
  options.skip_nonfinite = o.skip_nonfinite;
  options.chunk_rows = o.chunk_rows;
  options.program = program;
  options.checkpoint = o.checkpoint;
  return options;
}

std::string chunk_problem(int64_t batch_size, int64_t chunk_rows) {
  if (chunk_rows == 0) return "";
  const int world = dist::world_size();
  for (int r = 0; r < world; ++r) {
    const int64_t rows = dist::rows_of_rank(batch_size, r, world).size();
    if (rows % chunk_rows != 0)
      return "--chunk-rows " + std::to_string(chunk_rows) + " does not divide the " +
             std::to_string(rows) + " rows of rank " + std::to_string(r) + " (--batch-size " +
             std::to_string(batch_size) + " on " + std::to_string(world) +
             " rank(s)): every rank's rows must be whole chunks";
  }
  return "";
}

Step::Step(nn::Module& model, optim::Optimizer& optimizer, optim::Scheduler& scheduler,
    int64_t batch_size, StepOptions options)
    : model_(model),
      optimizer_(optimizer),
      scheduler_(scheduler),
      batch_size_(batch_size),
      options_(std::move(options)) {
  if (!options_.this_process_only)
    if (const std::string problem = chunk_problem(batch_size, options_.chunk_rows);
        !problem.empty())
      throw ValueError(problem);
  if (options_.chunk_rows > 0)
    chunks_ = std::make_unique<dist::ChunkedGradientSum>(
        model, options_.this_process_only ? dist::ChunkedGradientSum::Scope::this_process
                                          : dist::ChunkedGradientSum::Scope::all_ranks);
  else if (world() > 1)
    ddp_ = std::make_unique<dist::DistributedDataParallel>(model, options_.ddp);
}

Step::~Step() = default;

int Step::world() const { return options_.this_process_only ? 1 : dist::world_size(); }

dist::RowRange Step::rows(int64_t rows) const {
  if (options_.this_process_only) return {0, rows};
  return dist::rows_of_rank(rows, dist::rank(), dist::world_size());
}

// The gradient of the global batch's loss into the parameters' .grad (on every rank); returns the
// batch's loss.
double Step::backward(double global_weight, const LossOfRows& loss_of) {
  const dist::RowRange mine = rows(batch_size_);
  if (chunks_) {
    for (int64_t first = mine.begin; first < mine.end; first += options_.chunk_rows) {
      auto [loss, weight] = loss_of(first, first + options_.chunk_rows);
      loss = loss * (weight / global_weight);  // the chunk's share of the batch's loss
      loss.backward();
      chunks_->add_chunk(loss.item());
    }
    return chunks_->finish();  // Σ in chunk order, the same on every rank
  }
  auto [loss, weight] = loss_of(mine.begin, mine.end);
  // Weighted so that the average over the ranks of the weighted losses is the loss of the whole
  // batch: a loss that is the mean over this rank's `weight` of the batch's `global_weight`
  // becomes loss · weight · N / global_weight, and (1/N) Σ_r loss_r · w_r · N / W = Σ_r loss_r w_r / W.
  if (world() > 1) loss = loss * (weight * world() / global_weight);
  loss.backward();  // frees the graph (under mpirun: and averages the gradients)
  if (world() == 1) return loss.item();
  return dist::all_reduce_sum(loss.item()) / world();
}

// A NaN or infinite loss or gradient norm means the run has diverged, and every later step would
// only spread the NaN through the weights: stop before the update, so that the last checkpoint
// saved is the last good state — or, with skip_nonfinite, skip this update.
StepResult Step::take(int64_t step, double global_weight, const LossOfRows& loss_of) {
  StepResult result;
  optimizer_.zero_grad();
  result.loss = backward(global_weight, loss_of);
  result.grad_norm = optim::clip_grad_norm(model_.parameters(), options_.clip);
  if (std::isfinite(result.loss) && std::isfinite(result.grad_norm)) {
    optimizer_.step();
  } else if (options_.skip_nonfinite) {
    std::fprintf(stderr, "\n%s: step %lld skipped: loss %g, gradient norm %g\n",
        options_.program.c_str(), static_cast<long long>(step), result.loss, result.grad_norm);
    result.applied = false;
  } else {
    std::fprintf(stderr,
        "\n%s: step %lld: the loss is %g and the gradient norm %g: training diverged, "
        "stopped before updating the weights%s. Lower --lr (or --clip), or pass "
        "--skip-nonfinite-steps to skip such steps.\n",
        options_.program.c_str(), static_cast<long long>(step), result.loss, result.grad_norm,
        options_.checkpoint.empty()
            ? ""
            : ("; " + options_.checkpoint + " holds the last checkpoint saved").c_str());
    result.diverged = true;
    return result;
  }
  scheduler_.step();  // the learning rate of the next step
  return result;
}

}  // namespace ag::training
