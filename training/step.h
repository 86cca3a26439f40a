// One training step, as every run takes it — the step ag-train runs, the benchmarks time and the
// equivalence checks test:
//
//   optimizer.zero_grad();
//   loss = the global batch's loss, backward   (this rank's rows; under mpirun the gradients are
//                                               averaged over the ranks while backward runs)
//   clip the gradients' global norm at --clip
//   if the loss or the norm is NaN or ±inf:    stop before the update (exit 1), or skip the step
//   optimizer.step(); scheduler.step()
//
// The caller supplies the loss of any rows of the batch (LossOfRows); the step decides which rows
// this rank takes and how their gradients are combined:
//   - by default, all of this rank's rows at once; with more than one rank, DistributedDataParallel
//     averages the ranks' gradients during backward (dist::DistributedDataParallel);
//   - with --chunk-rows C, chunk by chunk (dist::ChunkedGradientSum): each chunk of C rows has its
//     own forward and backward, and the chunks' gradients are added in their global order, so that
//     every world size whose ranks hold whole chunks (one process included) trains the same model
//     bit for bit when dropout is 0 (docs/distributed.md, "Bit for bit").
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "autograd/tensor.h"
#include "distributed/distributed.h"
#include "nn/module.h"
#include "optim/optimizer.h"
#include "optim/schedule.h"
#include "training/run.h"

namespace ag::training {

// The mean loss of global rows [first, last) of the step's batch, and their weight in the batch:
// their valid tokens, or their number when every row weighs the same.
using LossOfRows = std::function<std::pair<Tensor, double>(int64_t first, int64_t last)>;

struct StepOptions {
  double clip = 1.0;            // the gradients' global norm is clipped to this
  bool skip_nonfinite = false;  // skip a step whose loss or gradient norm is not finite
  int64_t chunk_rows = 0;       // 0: this rank's rows at once; C: chunk by chunk
  // The whole batch in this process, without communicating even under mpirun: the reference run
  // an equivalence check compares the ranks with (bench/ddp_equivalence.cpp).
  bool this_process_only = false;
  dist::DdpOptions ddp;              // DistributedDataParallel's buckets, under mpirun
  std::string program = "ag-train";  // names the messages
  std::string checkpoint;            // named by the divergence message ("" if none)

  // --clip, --skip-nonfinite-steps, --chunk-rows and --checkpoint of a run.
  static StepOptions of(const RunOptions& o, const std::string& program = "ag-train");
};

struct StepResult {
  double loss = 0;        // the global batch's loss (the same on every rank)
  double grad_norm = 0;   // before clipping
  bool applied = true;    // false: skipped (--skip-nonfinite-steps)
  bool diverged = false;  // the loss or the norm was not finite: the run must stop (exit 1)
};

// Why --chunk-rows cannot cut every rank's share of a batch into whole chunks ("" if it can).
std::string chunk_problem(int64_t batch_size, int64_t chunk_rows);

class Step {
 public:
  // Under mpirun (and with chunks), rank 0's parameters and buffers are broadcast to every rank
  // here. ValueError when the chunks do not divide the ranks' rows (chunk_problem).
  Step(nn::Module& model, optim::Optimizer& optimizer, optim::Scheduler& scheduler,
      int64_t batch_size, StepOptions options);
  ~Step();
  Step(const Step&) = delete;
  Step& operator=(const Step&) = delete;

  // This rank's rows [begin, end) of a global batch of `rows` rows.
  dist::RowRange rows(int64_t rows) const;

  // Takes step number `step`: the gradient of the global batch's loss from this rank's rows (see
  // the top of this file), clipping, the update and the schedule. `global_weight` is the whole
  // batch's weight (the sum of LossOfRows' weights over all its rows). Every rank calls it.
  StepResult take(int64_t step, double global_weight, const LossOfRows& loss_of);

  // The DistributedDataParallel that averages the gradients (more than one rank, no chunks), for
  // its statistics and no_sync(); nullptr otherwise.
  dist::DistributedDataParallel* ddp() { return ddp_.get(); }

 private:
  double backward(double global_weight, const LossOfRows& loss_of);
  int world() const;

  nn::Module& model_;
  optim::Optimizer& optimizer_;
  optim::Scheduler& scheduler_;
  int64_t batch_size_;
  StepOptions options_;
  std::unique_ptr<dist::DistributedDataParallel> ddp_;
  std::unique_ptr<dist::ChunkedGradientSum> chunks_;
};

}  // namespace ag::training
