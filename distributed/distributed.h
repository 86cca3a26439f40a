// Data-parallel training over MPI (Debian's OpenMPI): several processes ("ranks"), each with a
// full copy of the model and a slice of every batch, averaging their gradients after each
// backward so that all of them take the same optimizer step — PyTorch's DistributedDataParallel.
//
//   int main(int argc, char** argv) {
//     ag::dist::Environment mpi(argc, argv);              // MPI_Init ... MPI_Finalize
//     ag::manual_seed(0);                                 // the same model on every rank
//     auto model = ag::seq2seq::make_transformer(config);
//     ag::dist::DistributedDataParallel ddp(*model);      // rank 0's parameters everywhere
//     ag::optim::Adam adam(model->parameters(), 1e-3);
//     const auto mine = ag::dist::rows_of_rank(B, ag::dist::rank(), ag::dist::world_size());
//     for (int step = 0; step < steps; ++step) {
//       const ag::data::Batch global = next_batch();     // the same B rows on every rank
//       Tensor loss = ag::seq2seq::sequence_loss(  // (padded rows: weight it, docs/distributed.md)
//           *model, ag::data::batch_rows(global, mine.begin, mine.end));
//       adam.zero_grad();
//       loss.backward();  // gradients are averaged over the ranks before backward() returns
//       adam.step();      // so every rank takes the same step
//     }
//   }
//   mpirun -np 2 ./train
//
// How the averaging overlaps backward. Backward computes the gradients of the last layers first.
// The parameters are grouped into buckets of about `bucket_cap_mb`, in reverse order of
// registration (roughly the order backward finishes them). Each parameter gets a
// post-accumulate-grad hook (Tensor::register_post_accumulate_grad_hook): when the last gradient
// of a bucket is complete, the bucket's gradients are copied into one flat buffer and a
// non-blocking MPI_Iallreduce sums it over the ranks while backward goes on with earlier layers.
// A callback queued on the backward pass (queue_backward_callback) waits for the last bucket,
// divides by the world size and writes the averages back into each .grad before backward()
// returns. Buckets start in index order on every rank, so every rank issues the same collectives
// in the same order.
//
// Equivalence: ranks that each take B/N rows of the same global batch of B rows and average
// their gradients compute the gradient of the mean loss over all B rows — the one a single
// process computes with batch B — up to the order of the floating-point sums (when the loss is a
// mean over rows of equal weight). Dropout masks differ: each rank draws its own (see
// rank_seed).
//
// Threads: every rank runs ag's thread pool; ranks × threads beyond the cores of a machine
// oversubscribe it and everything slows down many times over. check_thread_budget refuses that.
//
// Faults: MPI's errors are fatal (OpenMPI's default): a rank that dies makes mpirun stop every
// other rank and name the one that failed. A rank that throws should call abort() with its
// message (ag-train does), which ends the whole job at once instead of leaving the others
// waiting in a collective.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "autograd/error.h"
#include "autograd/tensor.h"
#include "nn/module.h"

namespace ag::dist {

// A collective that cannot be done: MPI not initialised, ranks whose models differ, a parameter
// that got no gradient, a thread budget beyond the machine.
class DistributedError : public RuntimeError {
 public:
  using RuntimeError::RuntimeError;
};

// MPI's lifetime, as RAII: the constructor initialises MPI (MPI_Init_thread, with only the
// calling thread making MPI calls — ag's pool threads never do), the destructor finalises it.
// One per process, in main. Without mpirun, it runs as a world of one rank, leaving MPI alone. An
// ag built without MPI is always a world of one: there, under mpirun (or another launcher), the
// constructor refuses to start (DistributedError). Before MPI_Init it sets
// OMPI_MCA_coll_libnbc_iallreduce_algorithm=3 (Rabenseifner's algorithm for OpenMPI's
// MPI_Iallreduce, twice as fast as its binomial default on 2 ranks) unless the environment has
// one (docs/distributed.md, "The all-reduce's algorithm").
class Environment {
 public:
  Environment(int& argc, char**& argv);
  ~Environment();
  Environment(const Environment&) = delete;
  Environment& operator=(const Environment&) = delete;
};

// Whether MPI is initialised (an Environment is alive).
bool initialized();
// This process's rank in the world (0 .. world_size - 1); 0 without an Environment.
int rank();
// How many ranks the job has; 1 without an Environment.
int world_size();
// How many ranks run on this machine (MPI's shared-memory neighbourhood), and this one's index
// among them; 1 and 0 without an Environment.
int local_size();
int local_rank();
// The machine's name as MPI reports it ("" without an Environment).
std::string processor_name();

// Waits until every rank has called it.
void barrier();
// Gives every rank `tensor`'s values on rank `root`, in place (a contiguous tensor of the same
// shape and dtype on every rank; ShapeError/DistributedError otherwise).
void broadcast(const Tensor& tensor, int root = 0);
// Sums `tensor` over the ranks, in place: every rank ends with the sum.
void all_reduce_sum(const Tensor& tensor);
// The sum over the ranks of a number (a loss, a count of correct answers).
double all_reduce_sum(double value);
int64_t all_reduce_sum(int64_t value);
// The largest over the ranks of a number (e.g. "did any rank fail").
int64_t all_reduce_max(int64_t value);
// Ends the whole job at once: prints "<program>: rank R of N: <message>" on standard error and
// calls MPI_Abort with `exit_code`. Without an Environment it exits the process with exit_code.
[[noreturn]] void abort(const std::string& program, const std::string& message, int exit_code);

// A seed for rank `rank` derived from the job's `seed`: rank 0 keeps `seed` (so that a world of
// one rank is a single process exactly), every other rank gets a different, well-mixed one. For
// the streams that must differ between ranks (dropout masks); the streams that must agree (the
// data) use `seed` itself on every rank.
uint64_t rank_seed(uint64_t seed, int rank);

// Refuses (DistributedError, naming both numbers and the fix) `threads` per rank when threads ×
// local_size() exceeds the machine's hardware threads, unless `allow_oversubscribe` is set (as
// mpirun's --oversubscribe: slow, but the same numbers).
void check_thread_budget(int threads, bool allow_oversubscribe);

// Rows [begin, end) of a global batch of `global_rows` that rank `rank` of `world` takes: a
// contiguous, disjoint slice, the first global_rows % world ranks taking one row more. Throws
// ValueError when global_rows < world (a rank would get nothing).
struct RowRange {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t size() const { return end - begin; }
};
RowRange rows_of_rank(int64_t global_rows, int rank, int world);

// Gives every rank rank 0's parameters and buffers, in place, after checking that every rank's
// module has the same parameters (names, shapes and dtypes; DistributedError naming the first
// difference otherwise). `who` names the caller in the errors. Needs an Environment.
void broadcast_module(nn::Module& module, const char* who = "dist::broadcast_module");

struct DdpOptions {
  // Gradients are averaged in buckets of about this many megabytes (2^20 bytes; PyTorch's
  // default is 25). A parameter larger than that gets a bucket of its own.
  double bucket_cap_mb = 25.0;
};

// What the last synchronised backward pass communicated.
struct DdpStats {
  int64_t buckets = 0;         // all-reduces started
  int64_t bytes = 0;           // gradient bytes each rank contributed
  double wait_seconds = 0;     // time spent blocked in MPI_Wait at the end of backward
  double overlap_seconds = 0;  // time from the first all-reduce's start to the end of backward
};

// Data-parallel training of `module` (see the top of this file). The constructor broadcasts
// rank 0's parameters and buffers to every rank, after checking that every rank's module has
// the same parameters (names, shapes and dtypes; DistributedError naming the first difference
// otherwise), and registers the gradient hooks; the destructor removes them. The module must
// outlive it. Every parameter that requires grad must get a gradient in every backward pass
// that is synchronised (DistributedError naming those that did not: freeze them with
// requires_grad_(false) instead). Needs an Environment (DistributedError otherwise).
class DistributedDataParallel {
 public:
  explicit DistributedDataParallel(nn::Module& module, DdpOptions options = {});
  ~DistributedDataParallel();
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

  nn::Module& module() { return module_; }
  // How the parameters are grouped: for each bucket, the names of its parameters, in the order
  // their gradients are expected (reverse registration order).
  std::vector<std::vector<std::string>> bucket_names() const;
  const DdpStats& last_stats() const { return stats_; }
  // How many buckets' all-reduces the backward pass running now has started (0 between passes):
  // what a hook or an observer sees of the overlap while backward is still computing.
  std::size_t buckets_started() const { return next_bucket_; }

  // While a NoSync is alive, backward passes only accumulate gradients locally (gradient
  // accumulation, PyTorch's `with ddp.no_sync():`); the first backward after it ends averages
  // everything accumulated.
  //   { auto no_sync = ddp.no_sync(); loss1.backward(); }  loss2.backward();  // averaged once
  class NoSync {
   public:
    explicit NoSync(DistributedDataParallel& ddp);
    ~NoSync();
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;

   private:
    DistributedDataParallel& ddp_;
    bool was_enabled_;
  };
  [[nodiscard]] NoSync no_sync() { return NoSync(*this); }

 private:
  struct Bucket;
  void on_gradient_ready(std::size_t parameter_index);
  void launch_ready_buckets();
  void finish_backward();
  void reset_pass();

  nn::Module& module_;
  std::vector<std::string> names_;  // of the parameters, in registration order
  std::vector<Tensor> parameters_;  // that require grad, in registration order
  std::vector<Bucket> buckets_;
  std::vector<std::size_t> bucket_of_;  // parameter index -> bucket
  std::vector<char> ready_;             // parameter index -> its gradient is complete this pass
  std::vector<HookHandle> hooks_;
  bool sync_enabled_ = true;
  bool pass_started_ = false;     // a hook ran in the current backward pass
  std::size_t next_bucket_ = 0;   // the next bucket to start (they start in order)
  double pass_first_launch_ = 0;  // MPI_Wtime of the first all-reduce of the pass
  DdpStats stats_;
};

// World-size-invariant gradients: 1, 2, 4 ... ranks train bit-identical models.
//
// DistributedDataParallel's average is one process's gradient only up to the order of the
// floating-point sums: each rank sums over its own rows first, and MPI then adds the ranks'
// sums. The two differ in the last bits, and training amplifies that (ReLU's kinks, Adam's
// division by √v) until after ~50 steps two such runs differ in the fourth digit
// (docs/distributed.md, "Equivalence"). ChunkedGradientSum removes the difference by fixing the
// order. The global batch is cut into chunks of a fixed number of rows; each chunk's gradient
// g_k is computed on its own (its own forward and backward: the same bits on whichever rank runs
// it), and the K chunks' gradients are added in their global order,
//
//   g = ((g_0 + g_1) + g_2) + ... + g_(K-1)
//
// on rank 0, which gathers the other ranks' chunk gradients and broadcasts the sum. A single
// process adds the same chunks in the same order, so one process and N ranks give identical
// gradients, losses and parameters whenever each rank's rows are whole chunks, the ranks hold
// consecutive chunks in rank order (dist::rows_of_rank), and every rank runs the same thread
// count. Dropout must be off (each rank draws its own masks).
//
// It costs what it buys: each chunk's gradient is kept until the end of the step, no
// communication overlaps backward, the products shrink to a chunk's rows, and rank 0 receives
// every chunk's gradient. For reproducibility and tests, not for speed.
//
//   dist::ChunkedGradientSum chunks(*model);       // rank 0's parameters everywhere
//   for (int64_t begin = mine.begin; begin < mine.end; begin += chunk_rows) {
//     data::Batch chunk = data::batch_rows(global, begin, begin + chunk_rows);
//     // this chunk's share of the batch's mean loss per token
//     Tensor loss = seq2seq::sequence_loss(*model, chunk) * (chunk_tokens / batch_tokens);
//     loss.backward();
//     chunks.add_chunk(loss.item());               // takes .grad, and clears it
//   }
//   double batch_loss = chunks.finish();           // every rank: the sum in .grad, the loss
//   adam.step();
class ChunkedGradientSum {
 public:
  enum class Scope {
    all_ranks,     // every rank's chunks, in rank order (a world of one without an Environment)
    this_process,  // this process's chunks only, without communicating (a reference run)
  };
  // The parameters of `module` that require grad (a tensor registered under two names once),
  // all of one dtype (ValueError otherwise). With Scope::all_ranks under an Environment, rank 0's
  // parameters and buffers are first broadcast (broadcast_module).
  explicit ChunkedGradientSum(nn::Module& module, Scope scope = Scope::all_ranks);

  // Takes the gradients now in the parameters' .grad as this process's next chunk, with the
  // chunk's `loss` (its share of the batch's loss), and clears .grad for the next chunk's
  // backward. DistributedError names the parameters that got no gradient.
  void add_chunk(double loss);
  // How many chunks this process has added since the last finish().
  int64_t chunks() const { return static_cast<int64_t>(losses_.size()); }
  // Adds every chunk of every rank (Scope::all_ranks) or of this process in the global chunk
  // order, writes the sum into each parameter's .grad, forgets the chunks, and returns the sum
  // of the chunks' losses, added in the same order. Every rank calls it once per step (it is a
  // collective); DistributedError when no rank added a chunk.
  double finish();

 private:
  Scope scope_;
  std::vector<std::string> names_;  // of the parameters, in registration order
  std::vector<Tensor> parameters_;  // that require grad
  int64_t numel_ = 0;               // of all of them together
  DType dtype_ = float32;
  std::vector<Tensor> gradients_;  // one flat [numel_] tensor per chunk added
  std::vector<double> losses_;     // one per chunk added
};

}  // namespace ag::dist
