// ag-bench-allreduce: how long the all-reduce of a DistributedDataParallel bucket takes on its
// own, under mpirun — MPI_Allreduce (blocking; OpenMPI's coll/tuned) against MPI_Iallreduce +
// MPI_Wait (non-blocking, what DistributedDataParallel uses; OpenMPI's coll/libnbc), in place,
// float32 sums, best of --repeat calls after a barrier each, for each --mb size.
//
//   mpirun -np 2 build/bench/ag-bench-allreduce          # the algorithm ag picks (3)
//   export OMPI_MCA_coll_libnbc_iallreduce_algorithm=2    # libnbc's own choice here: binomial
//   mpirun -np 2 -x OMPI_MCA_coll_libnbc_iallreduce_algorithm build/bench/ag-bench-allreduce
//
// dist::Environment sets OMPI_MCA_coll_libnbc_iallreduce_algorithm=3 (Rabenseifner's algorithm)
// unless the environment already chooses one; the first line says which is in force.
#include <mpi.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "distributed/distributed.h"
#include "training/cli.h"

namespace {

// The fastest of `repeats` calls of f, each after a barrier, in ms (the slowest rank's).
template <class F>
double best_ms(int repeats, F&& f) {
  double best = 1e30;
  for (int r = 0; r < repeats; ++r) {
    MPI_Barrier(MPI_COMM_WORLD);
    const double start = MPI_Wtime();
    f();
    double seconds = MPI_Wtime() - start;
    MPI_Allreduce(MPI_IN_PLACE, &seconds, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    best = std::min(best, seconds);
  }
  return best * 1e3;
}

}  // namespace

int main(int argc, char** argv) {
  // MPI under mpirun; a failure on any rank ends the whole job (run_main)
  const auto mpi = ag::training::start("ag-bench-allreduce", argc, argv);
  std::vector<double> sizes_mb = {25.0, 4.6, 1.0};
  int repeats = 7;
  CLI::App app{"ag-bench-allreduce: MPI_Allreduce against MPI_Iallreduce + MPI_Wait (mpirun)"};
  app.add_option("--mb", sizes_mb, "buffer sizes in MiB (medium's two buckets: 25 and 4.6)")
      ->check(CLI::Range(0.001, 4096.0));
  app.add_option("--repeat", repeats, "calls per measurement (the best counts)")
      ->check(CLI::Range(1, 1000));
  return ag::training::run_main("ag-bench-allreduce", app, argc, argv, [&] {
    if (!ag::dist::initialized()) throw ag::training::UsageError("run it under mpirun");
    const bool report = ag::dist::rank() == 0;
    const char* algorithm = std::getenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm");
    if (report)
      std::printf("%d ranks; OMPI_MCA_coll_libnbc_iallreduce_algorithm=%s\n",
          ag::dist::world_size(), algorithm ? algorithm : "(unset)");
    for (double mb : sizes_mb) {
      const auto count = static_cast<int>(mb * 1024 * 1024 / sizeof(float));
      std::vector<float> buffer(static_cast<std::size_t>(count), 1.0f);
      const double blocking = best_ms(repeats, [&] {
        MPI_Allreduce(MPI_IN_PLACE, buffer.data(), count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      });
      const double nonblocking = best_ms(repeats, [&] {
        MPI_Request request;
        MPI_Iallreduce(
            MPI_IN_PLACE, buffer.data(), count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &request);
        MPI_Wait(&request, MPI_STATUS_IGNORE);
      });
      if (report)
        std::printf("%7.2f MiB: MPI_Allreduce %7.2f ms, MPI_Iallreduce + MPI_Wait %7.2f ms\n", mb,
            blocking, nonblocking);
    }
    return 0;
  });
}
