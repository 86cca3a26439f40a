#include "distributed/distributed.h"

// MPI where CMake found it; otherwise the same calls for a world of one (detail/world_of_one.h).
#if AG_DIST_WITH_MPI
#include <mpi.h>
#else
#include "distributed/detail/world_of_one.h"
#endif
#include "distributed/detail/leak_check.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <memory>
#include <set>
#include <sstream>
#include <thread>

#include "autograd/autograd.h"
#include "autograd/ops.h"

namespace ag::dist {

#if !AG_DIST_WITH_MPI
using namespace world_of_one;
#endif

namespace {

// Set while an Environment that initialised MPI is alive.
bool mpi_initialised_here = false;
MPI_Comm local_comm = MPI_COMM_NULL;  // the ranks on this machine

void require_mpi(const char* what) {
  if (!initialized())
    fail<DistributedError>(what,
        ": MPI is not initialised; create an ag::dist::Environment in main and start the program "
        "with mpirun",
        AG_DIST_WITH_MPI ? ""
                         : " (this ag was built without MPI, as a world of one: install "
                           "libopenmpi-dev, scripts/install-deps.sh, and build again)");
}

MPI_Datatype mpi_type(DType dtype) { return dtype == float64 ? MPI_DOUBLE : MPI_FLOAT; }

// Whether a launcher (mpirun, mpiexec, srun) started this process: OpenMPI, PMIx and MPICH's
// Hydra each set one of these. Without one, ag does not initialise MPI at all — a program built
// with ag::distributed and started on its own is exactly the single process it always was.
bool started_by_launcher() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE", "PMI_RANK"})
    if (std::getenv(name)) return true;
  return false;
}

void check_contiguous(const Tensor& tensor, const char* what) {
  if (!tensor.defined()) fail<ValueError>(what, ": the tensor is undefined");
  if (!tensor.is_contiguous())
    fail<ShapeError>(what, ": the tensor of shape ", shape_str(tensor.shape()),
        " is not contiguous (call contiguous() first)");
}

// SplitMix64's finaliser: a bijection of 64-bit integers that scatters nearby inputs.
uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

}  // namespace

// ---- environment --------------------------------------------------------------------------------

Environment::Environment(int& argc, char**& argv) {
  int already = 0;
  MPI_Initialized(&already);
  if (already || mpi_initialised_here)
    fail<DistributedError>(
        "dist::Environment: MPI is already initialised (create one "
        "Environment per process, in main)");
  if (!started_by_launcher()) return;  // a world of one, without MPI
  if (!AG_DIST_WITH_MPI)
    fail<DistributedError>(
        "dist::Environment: started by mpirun (or another launcher), but this ag was built "
        "without MPI: every process would train alone. Install libopenmpi-dev "
        "(scripts/install-deps.sh) and build again");
  // OpenMPI's non-blocking all-reduce (coll/libnbc, behind MPI_Iallreduce) uses a binomial tree
  // below 4 ranks or for in-place buffers: rank 0 receives every other rank's whole buffer, adds
  // it, and sends the sum back. Rabenseifner's algorithm (a reduce-scatter by vector halving, then
  // an all-gather) gives every rank an equal share of the adding and the traffic: on 2 ranks it
  // all-reduces a 25 MB bucket about twice as fast (docs/distributed.md, "The all-reduce's
  // algorithm"). Every element is still added on one rank and copied to the others, so every rank
  // gets the same bits. A choice made in the environment (mpirun -x, or the shell) is kept.
  setenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm", "3", /*overwrite=*/0);
  int provided = 0;
  // FUNNELED: only this thread calls MPI; ag's pool threads compute and never communicate.
  if (MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
    fail<DistributedError>("dist::Environment: MPI_Init_thread failed");
  mpi_initialised_here = true;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local_comm);
}

Environment::~Environment() {
  if (!mpi_initialised_here) return;
  if (local_comm != MPI_COMM_NULL) MPI_Comm_free(&local_comm);
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) {
    leak_check::before_mpi_finalize();  // while OpenMPI's memory is still reachable
    MPI_Finalize();
  }
  mpi_initialised_here = false;
}

bool initialized() { return mpi_initialised_here; }

namespace {

// This process's rank in `comm`, and the number of ranks in it (MPI initialised).
int rank_in(MPI_Comm comm) {
  int r = 0;
  MPI_Comm_rank(comm, &r);
  return r;
}
int ranks_in(MPI_Comm comm) {
  int n = 1;
  MPI_Comm_size(comm, &n);
  return n;
}

}  // namespace

// Without MPI, a world of one: rank 0 of 1, on a machine of its own.
int rank() { return initialized() ? rank_in(MPI_COMM_WORLD) : 0; }
int world_size() { return initialized() ? ranks_in(MPI_COMM_WORLD) : 1; }
int local_rank() { return initialized() ? rank_in(local_comm) : 0; }
int local_size() { return initialized() ? ranks_in(local_comm) : 1; }

std::string processor_name() {
  if (!initialized()) return "";
  char name[MPI_MAX_PROCESSOR_NAME];
  int length = 0;
  MPI_Get_processor_name(name, &length);
  return std::string(name, static_cast<std::size_t>(length));
}

// ---- collectives --------------------------------------------------------------------------------

void barrier() {
  if (initialized()) MPI_Barrier(MPI_COMM_WORLD);
}

void broadcast(const Tensor& tensor, int root) {
  check_contiguous(tensor, "dist::broadcast");
  if (root < 0 || root >= world_size())
    fail<ValueError>("dist::broadcast: root ", root, " is not a rank of a world of ", world_size());
  if (!initialized()) return;
  // Every rank must pass the same shape and dtype: compare with the root's first.
  const int64_t mine[2] = {tensor.numel(), static_cast<int64_t>(tensor.dtype())};
  int64_t roots[2] = {mine[0], mine[1]};
  MPI_Bcast(roots, 2, MPI_INT64_T, root, MPI_COMM_WORLD);
  const int64_t mismatch = all_reduce_max(int64_t{roots[0] != mine[0] || roots[1] != mine[1]});
  if (mismatch)
    fail<ShapeError>("dist::broadcast: rank ", rank(), " has ", mine[0], " elements (",
        dtype_name(tensor.dtype()), "); a rank differs from root ", root, "'s ", roots[0],
        " elements (", dtype_name(static_cast<DType>(roots[1])), ")");
  MPI_Bcast(tensor.raw_data(), static_cast<int>(tensor.numel()), mpi_type(tensor.dtype()), root,
      MPI_COMM_WORLD);
  tensor.bump_version();
}

void all_reduce_sum(const Tensor& tensor) {
  check_contiguous(tensor, "dist::all_reduce_sum");
  if (!initialized()) return;
  MPI_Allreduce(MPI_IN_PLACE, tensor.raw_data(), static_cast<int>(tensor.numel()),
      mpi_type(tensor.dtype()), MPI_SUM, MPI_COMM_WORLD);
  tensor.bump_version();
}

double all_reduce_sum(double value) {
  if (initialized()) MPI_Allreduce(MPI_IN_PLACE, &value, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  return value;
}

int64_t all_reduce_sum(int64_t value) {
  if (initialized()) MPI_Allreduce(MPI_IN_PLACE, &value, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
  return value;
}

int64_t all_reduce_max(int64_t value) {
  if (initialized()) MPI_Allreduce(MPI_IN_PLACE, &value, 1, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD);
  return value;
}

void abort(const std::string& program, const std::string& message, int exit_code) {
  std::fprintf(
      stderr, "%s: rank %d of %d: %s\n", program.c_str(), rank(), world_size(), message.c_str());
  std::fflush(stderr);
  std::fflush(stdout);
  if (initialized()) MPI_Abort(MPI_COMM_WORLD, exit_code);
  std::exit(exit_code);
}

uint64_t rank_seed(uint64_t seed, int rank) {
  if (rank == 0) return seed;
  return mix64(seed + 0x9e3779b97f4a7c15ULL * static_cast<uint64_t>(rank));
}

void check_thread_budget(int threads, bool allow_oversubscribe) {
  const unsigned hardware = std::thread::hardware_concurrency();
  if (hardware == 0 || allow_oversubscribe) return;  // a machine that does not tell its count
  const int64_t wanted = static_cast<int64_t>(threads) * local_size();
  if (wanted > static_cast<int64_t>(hardware))
    fail<DistributedError>(local_size(), " ranks on this machine × ", threads,
        " threads each = ", wanted, " threads on ", hardware,
        " hardware threads would oversubscribe the cores (every step many times slower); use "
        "--threads ",
        std::max<int64_t>(1, hardware / local_size()),
        " or fewer ranks (or --oversubscribe to run anyway: same numbers, slowly)");
}

RowRange rows_of_rank(int64_t global_rows, int rank, int world) {
  if (world < 1 || rank < 0 || rank >= world)
    fail<ValueError>("dist::rows_of_rank: rank ", rank, " is not a rank of a world of ", world);
  if (global_rows < world)
    fail<ValueError>("dist::rows_of_rank: a global batch of ", global_rows, " rows cannot give ",
        world, " ranks a row each (use a batch of at least ", world, ")");
  const int64_t base = global_rows / world;
  const int64_t extra = global_rows % world;  // the first `extra` ranks take one row more
  RowRange range;
  range.begin = rank * base + std::min<int64_t>(rank, extra);
  range.end = range.begin + base + (rank < extra ? 1 : 0);
  return range;
}

// ---- the same module on every rank --------------------------------------------------------------

void broadcast_module(nn::Module& module, const char* who) {
  require_mpi(who);
  // Every rank must hold the same parameters: rank 0's list, one line per parameter, is
  // broadcast and each rank compares its own with it.
  std::ostringstream signature;
  const auto named = module.named_parameters();
  for (const auto& [name, parameter] : named)
    signature << name << ' ' << shape_str(parameter.shape()) << ' ' << dtype_name(parameter.dtype())
              << '\n';
  std::string mine = signature.str();
  int64_t length = static_cast<int64_t>(mine.size());
  MPI_Bcast(&length, 1, MPI_INT64_T, 0, MPI_COMM_WORLD);
  std::string rank0(static_cast<std::size_t>(length), '\0');
  if (rank() == 0) rank0 = mine;
  MPI_Bcast(rank0.data(), static_cast<int>(length), MPI_CHAR, 0, MPI_COMM_WORLD);
  const bool differs = rank0 != mine;
  if (all_reduce_max(int64_t{differs})) {
    if (!differs)
      fail<DistributedError>(who,
          ": another rank's module has different "
          "parameters from rank 0's (that rank's error names the first)");
    std::istringstream theirs(rank0), ours(mine);
    std::string their_line, our_line;
    while (std::getline(theirs, their_line) && std::getline(ours, our_line) &&
           their_line == our_line) {
    }
    fail<DistributedError>(who, ": rank ", rank(), "'s module differs from rank 0's: rank 0 has '",
        their_line, "' where rank ", rank(), " has '", our_line, "' (", named.size(),
        " parameters here)");
  }

  // Rank 0's values everywhere: the parameters and the buffers (PositionalEncoding's table).
  std::vector<std::pair<std::string, Tensor>> values = named;
  for (auto& entry : module.named_buffers()) values.push_back(entry);
  for (const auto& [name, tensor] : values)
    if (!tensor.is_contiguous())
      fail<DistributedError>(who, ": '", name, "' of shape ", shape_str(tensor.shape()),
          " is not contiguous, so it cannot be broadcast in place");
  for (const auto& [name, tensor] : values) broadcast(tensor, 0);
}

// ---- DistributedDataParallel --------------------------------------------------------------------

struct DistributedDataParallel::Bucket {
  std::vector<std::size_t> parameters;  // indices into parameters_, in expected gradient order
  std::vector<int64_t> offsets;         // of each parameter's gradient in `flat`
  DType dtype = float32;
  int64_t numel = 0;
  Tensor flat;            // [numel]: the gradients, back to back, summed in place by MPI
  std::size_t ready = 0;  // parameters whose gradient is complete in this pass
  MPI_Request request = MPI_REQUEST_NULL;
};

DistributedDataParallel::DistributedDataParallel(nn::Module& module, DdpOptions options)
    : module_(module) {
  require_mpi("DistributedDataParallel");
  if (!(options.bucket_cap_mb > 0))
    fail<ValueError>(
        "DistributedDataParallel: bucket_cap_mb must be > 0, got ", options.bucket_cap_mb);

  broadcast_module(module, "DistributedDataParallel");
  const auto named = module.named_parameters();

  std::set<const void*> seen;  // a tensor registered under two names is averaged once
  for (const auto& [name, parameter] : named) {
    if (!parameter.requires_grad()) continue;  // frozen: never averaged
    if (!seen.insert(parameter.raw_data()).second) continue;
    names_.push_back(name);
    parameters_.push_back(parameter);
  }

  // Buckets in reverse registration order — roughly the order backward completes gradients.
  const double cap_bytes = options.bucket_cap_mb * 1024.0 * 1024.0;
  bucket_of_.assign(parameters_.size(), 0);
  double bucket_bytes = 0;
  for (std::size_t k = parameters_.size(); k-- > 0;) {
    const Tensor& parameter = parameters_[k];
    const double bytes = static_cast<double>(parameter.numel()) * dtype_size(parameter.dtype());
    const bool start_new =
        buckets_.empty() || buckets_.back().dtype != parameter.dtype() ||
        (bucket_bytes + bytes > cap_bytes && !buckets_.back().parameters.empty());
    if (start_new) {
      buckets_.emplace_back();
      buckets_.back().dtype = parameter.dtype();
      bucket_bytes = 0;
    }
    Bucket& bucket = buckets_.back();
    bucket.parameters.push_back(k);
    bucket.offsets.push_back(bucket.numel);
    bucket.numel += parameter.numel();
    bucket_bytes += bytes;
    bucket_of_[k] = buckets_.size() - 1;
  }
  for (Bucket& bucket : buckets_) {
    if (bucket.numel > std::numeric_limits<int>::max())
      fail<DistributedError>("DistributedDataParallel: a bucket of ", bucket.numel,
          " elements exceeds MPI's count limit; use a smaller bucket_cap_mb");
    bucket.flat = zeros({bucket.numel}, bucket.dtype);  // [numel]
  }

  ready_.assign(parameters_.size(), 0);
  for (std::size_t k = 0; k < parameters_.size(); ++k)
    hooks_.push_back(parameters_[k].register_post_accumulate_grad_hook(
        [this, k](const Tensor&) { on_gradient_ready(k); }));
}

DistributedDataParallel::~DistributedDataParallel() {
  for (HookHandle& hook : hooks_) hook.remove();
  // An all-reduce left in flight by a pass that threw is not waited for here: the other ranks
  // may never join it, and a destructor must not hang (the program is ending with an error).
}

std::vector<std::vector<std::string>> DistributedDataParallel::bucket_names() const {
  std::vector<std::vector<std::string>> names;
  for (const Bucket& bucket : buckets_) {
    names.emplace_back();
    for (std::size_t k : bucket.parameters) names.back().push_back(names_[k]);
  }
  return names;
}

DistributedDataParallel::NoSync::NoSync(DistributedDataParallel& ddp)
    : ddp_(ddp), was_enabled_(ddp.sync_enabled_) {
  ddp_.sync_enabled_ = false;
}
DistributedDataParallel::NoSync::~NoSync() { ddp_.sync_enabled_ = was_enabled_; }

void DistributedDataParallel::on_gradient_ready(std::size_t k) {
  if (!sync_enabled_) return;  // no_sync: the gradient only accumulates here
  if (!pass_started_) {
    pass_started_ = true;
    // finish_backward runs when this backward pass ends. If the pass throws instead, its queued
    // callbacks are dropped unrun: PassEnd's destructor then forgets the pass's counts, so that
    // the next backward starts afresh (an all-reduce still in flight is waited for before its
    // bucket is used again).
    struct PassEnd {
      explicit PassEnd(DistributedDataParallel* owner) : ddp(owner) {}
      PassEnd(const PassEnd&) = delete;
      PassEnd& operator=(const PassEnd&) = delete;
      ~PassEnd() {
        if (!finished) ddp->reset_pass();
      }
      DistributedDataParallel* ddp;
      bool finished = false;
    };
    auto pass_end = std::make_shared<PassEnd>(this);
    queue_backward_callback([pass_end] {
      pass_end->finished = true;
      pass_end->ddp->finish_backward();
    });
  }
  if (ready_[k]) return;
  ready_[k] = 1;
  ++buckets_[bucket_of_[k]].ready;
  launch_ready_buckets();
  // Let MPI move the all-reduces in flight along while backward computes (OpenMPI progresses
  // non-blocking collectives only inside MPI calls).
  for (std::size_t b = 0; b < next_bucket_; ++b)
    if (buckets_[b].request != MPI_REQUEST_NULL) {
      int done = 0;
      MPI_Test(&buckets_[b].request, &done, MPI_STATUS_IGNORE);
    }
}

void DistributedDataParallel::launch_ready_buckets() {
  // In index order only, so that every rank issues the same collectives in the same order.
  while (next_bucket_ < buckets_.size() &&
         buckets_[next_bucket_].ready == buckets_[next_bucket_].parameters.size()) {
    Bucket& bucket = buckets_[next_bucket_];
    if (bucket.request != MPI_REQUEST_NULL)  // left in flight by a pass that threw
      MPI_Wait(&bucket.request, MPI_STATUS_IGNORE);
    for (std::size_t i = 0; i < bucket.parameters.size(); ++i) {
      const Tensor& parameter = parameters_[bucket.parameters[i]];
      bucket.flat.narrow(0, bucket.offsets[i], parameter.numel())
          .view(parameter.shape())
          .copy_(parameter.grad());
    }
    if (next_bucket_ == 0) pass_first_launch_ = MPI_Wtime();
    MPI_Iallreduce(MPI_IN_PLACE, bucket.flat.raw_data(), static_cast<int>(bucket.numel),
        mpi_type(bucket.dtype), MPI_SUM, MPI_COMM_WORLD, &bucket.request);
    ++next_bucket_;
  }
}

void DistributedDataParallel::finish_backward() {
  const double wait_start = MPI_Wtime();
  for (Bucket& bucket : buckets_)
    if (bucket.request != MPI_REQUEST_NULL) MPI_Wait(&bucket.request, MPI_STATUS_IGNORE);
  const double wait_end = MPI_Wtime();
  if (next_bucket_ < buckets_.size()) {
    std::string missing;
    int listed = 0;
    for (std::size_t k = 0; k < parameters_.size(); ++k)
      if (!ready_[k] && listed++ < 8) missing += (missing.empty() ? "'" : ", '") + names_[k] + "'";
    const std::size_t count =
        static_cast<std::size_t>(std::count(ready_.begin(), ready_.end(), static_cast<char>(0)));
    reset_pass();
    fail<DistributedError>("DistributedDataParallel: ", count,
        " parameter(s) got no gradient in this backward pass (", missing, count > 8 ? ", ..." : "",
        "), so their gradients cannot be averaged; freeze unused parameters with "
        "requires_grad_(false) before building DistributedDataParallel");
  }
  // Average: the sum over the ranks times 1/N, written back into each .grad in one pass over the
  // bucket (as mul_ computes it: in the gradient's dtype).
  const double inverse_world = 1.0 / world_size();
  for (Bucket& bucket : buckets_) {
    for (std::size_t i = 0; i < bucket.parameters.size(); ++i) {
      const Tensor& parameter = parameters_[bucket.parameters[i]];
      const Tensor summed =
          bucket.flat.narrow(0, bucket.offsets[i], parameter.numel()).view(parameter.shape());
      Tensor grad = parameter.grad();
      if (!grad.is_contiguous()) {  // a .grad set by hand as a view: the general way
        grad.copy_(summed).mul_(inverse_world);
        continue;
      }
      grad.bump_version();
      dispatch(bucket.dtype, [&]<typename T>() {
        const T* sum = summed.data<T>();
        T* average = grad.data<T>();
        const T scale = static_cast<T>(inverse_world);
        // The count in a local: numel() in the loop's condition is a call per element, and the
        // stores through `average` would keep the compiler from hoisting it (nor vectorising).
        const int64_t count = parameter.numel();
        for (int64_t j = 0; j < count; ++j) average[j] = sum[j] * scale;
      });
    }
  }
  stats_.buckets = static_cast<int64_t>(buckets_.size());
  stats_.bytes = 0;
  for (const Bucket& bucket : buckets_)
    stats_.bytes += bucket.numel * static_cast<int64_t>(dtype_size(bucket.dtype));
  stats_.wait_seconds = wait_end - wait_start;
  stats_.overlap_seconds = wait_start - pass_first_launch_;
  reset_pass();
}

void DistributedDataParallel::reset_pass() {
  pass_started_ = false;
  next_bucket_ = 0;
  std::fill(ready_.begin(), ready_.end(), 0);
  for (Bucket& bucket : buckets_) bucket.ready = 0;
}

// ---- ChunkedGradientSum -------------------------------------------------------------------------

ChunkedGradientSum::ChunkedGradientSum(nn::Module& module, Scope scope) : scope_(scope) {
  if (scope_ == Scope::all_ranks && initialized()) broadcast_module(module, "ChunkedGradientSum");
  std::set<const void*> seen;  // a tensor registered under two names is summed once
  for (const auto& [name, parameter] : module.named_parameters()) {
    if (!parameter.requires_grad() || !seen.insert(parameter.raw_data()).second) continue;
    if (!parameters_.empty() && parameter.dtype() != dtype_)
      fail<ValueError>("ChunkedGradientSum: the parameters must share one dtype; '", names_[0],
          "' is ", dtype_name(dtype_), " but '", name, "' is ", dtype_name(parameter.dtype()));
    dtype_ = parameter.dtype();
    names_.push_back(name);
    parameters_.push_back(parameter);
    numel_ += parameter.numel();
  }
  if (parameters_.empty())
    fail<ValueError>("ChunkedGradientSum: the module has no parameter that requires grad");
}

void ChunkedGradientSum::add_chunk(double loss) {
  std::string missing;
  for (std::size_t k = 0; k < parameters_.size(); ++k)
    if (!parameters_[k].grad().defined())
      missing += (missing.empty() ? "'" : ", '") + names_[k] + "'";
  if (!missing.empty())
    fail<DistributedError>("ChunkedGradientSum::add_chunk: no gradient for ", missing,
        " (call it after the chunk's backward; freeze unused parameters with "
        "requires_grad_(false))");
  Tensor flat = empty({numel_}, dtype_);  // [numel_]: the parameters' gradients, back to back
  int64_t offset = 0;
  for (const Tensor& parameter : parameters_) {
    flat.narrow(0, offset, parameter.numel()).view(parameter.shape()).copy_(parameter.grad());
    offset += parameter.numel();
    parameter.zero_grad();  // the next chunk's backward starts afresh
  }
  gradients_.push_back(flat);
  losses_.push_back(loss);
}

double ChunkedGradientSum::finish() {
  const bool communicate = scope_ == Scope::all_ranks && initialized();
  const int world = communicate ? world_size() : 1;
  const int me = communicate ? rank() : 0;

  // Rank 0 learns how many chunks each rank holds; ranks hold consecutive chunks in rank order.
  const int64_t mine = chunks();
  std::vector<int64_t> counts(static_cast<std::size_t>(world), mine);
  if (communicate)
    MPI_Gather(&mine, 1, MPI_INT64_T, counts.data(), 1, MPI_INT64_T, 0, MPI_COMM_WORLD);
  int64_t total = 0;
  for (int64_t count : counts) total += count;
  if (communicate) MPI_Bcast(&total, 1, MPI_INT64_T, 0, MPI_COMM_WORLD);
  if (total == 0) fail<DistributedError>("ChunkedGradientSum::finish: no rank added a chunk");
  if (communicate && total * numel_ > std::numeric_limits<int>::max()) {
    gradients_.clear();  // the step is lost either way; the next one starts afresh
    losses_.clear();
    fail<DistributedError>("ChunkedGradientSum::finish: ", total, " chunks × ", numel_,
        " gradient elements exceed MPI's count limit; use fewer, larger chunks");
  }

  // Every chunk's gradient and loss on rank 0, in global chunk order.
  std::vector<Tensor> gradients = gradients_;
  std::vector<double> losses = losses_;
  if (communicate) {
    Tensor mine_flat = empty({mine * numel_}, dtype_);  // [mine · numel_]: my chunks, in order
    for (int64_t k = 0; k < mine; ++k) mine_flat.narrow(0, k * numel_, numel_).copy_(gradients_[k]);
    Tensor all;  // [total · numel_] on rank 0
    std::vector<int> element_counts, element_offsets, loss_counts, loss_offsets;
    if (me == 0) {
      all = empty({total * numel_}, dtype_);
      losses.assign(static_cast<std::size_t>(total), 0.0);
      int64_t chunk_offset = 0;
      for (int64_t count : counts) {
        element_counts.push_back(static_cast<int>(count * numel_));
        element_offsets.push_back(static_cast<int>(chunk_offset * numel_));
        loss_counts.push_back(static_cast<int>(count));
        loss_offsets.push_back(static_cast<int>(chunk_offset));
        chunk_offset += count;
      }
    }
    MPI_Gatherv(mine_flat.raw_data(), static_cast<int>(mine * numel_), mpi_type(dtype_),
        me == 0 ? all.raw_data() : nullptr, element_counts.data(), element_offsets.data(),
        mpi_type(dtype_), 0, MPI_COMM_WORLD);
    MPI_Gatherv(losses_.data(), static_cast<int>(mine), MPI_DOUBLE, losses.data(),
        loss_counts.data(), loss_offsets.data(), MPI_DOUBLE, 0, MPI_COMM_WORLD);
    gradients.clear();
    if (me == 0)
      for (int64_t k = 0; k < total; ++k) gradients.push_back(all.narrow(0, k * numel_, numel_));
  }

  // The sum in chunk order: g = ((g_0 + g_1) + g_2) + ..., the loss likewise.
  Tensor sum = empty({numel_}, dtype_);  // [numel_]
  double loss = 0;
  if (me == 0) {
    sum.copy_(gradients[0]);
    loss = losses[0];
    for (std::size_t k = 1; k < gradients.size(); ++k) {
      sum.add_(gradients[k]);
      loss += losses[k];
    }
  }
  if (communicate) {
    MPI_Bcast(sum.raw_data(), static_cast<int>(numel_), mpi_type(dtype_), 0, MPI_COMM_WORLD);
    MPI_Bcast(&loss, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  }
  int64_t offset = 0;
  for (const Tensor& parameter : parameters_) {
    parameter.set_grad(sum.narrow(0, offset, parameter.numel()).view(parameter.shape()).clone());
    offset += parameter.numel();
  }
  gradients_.clear();
  losses_.clear();
  return loss;
}

}  // namespace ag::dist
