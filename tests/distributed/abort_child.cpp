// Run by the test distributed.a_failing_rank_ends_the_job (tests/distributed/CMakeLists.txt)
// under mpirun: rank 1 fails while rank 0 waits for it in an all-reduce that would never
// complete. dist::abort must end the whole job at once, with a non-zero exit and a message that
// names the rank; without it, rank 0 would wait forever (ctest's TIMEOUT would fail the test).
#include <cstdint>

#include "distributed/distributed.h"

int main(int argc, char** argv) {
  ag::dist::Environment mpi(argc, argv);
  ag::dist::barrier();
  if (ag::dist::rank() == 1) ag::dist::abort("ag_dist_abort_child", "failed on purpose", 3);
  ag::dist::all_reduce_sum(int64_t{1});  // rank 1 never joins
  return 0;
}
