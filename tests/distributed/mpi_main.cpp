// The main of the tests that run under mpirun: MPI around Catch2's session, one thread per rank
// (the ranks share the machine's cores), and an exit code that is the worst over the ranks.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include "autograd/parallel.h"
#include "distributed/distributed.h"

int main(int argc, char** argv) {
  ag::dist::Environment mpi(argc, argv);
  ag::set_num_threads(1);
  const int failed = Catch::Session().run(argc, argv);
  return static_cast<int>(ag::dist::all_reduce_max(int64_t{failed}));
}
