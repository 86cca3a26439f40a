// LeakSanitizer's check, run before MPI_Finalize in the sanitizer build (scripts/test.sh
// --sanitize); nothing in any other build.
//
// At the end of a process LeakSanitizer reports the memory nothing points to any more. After
// MPI_Finalize that is much of OpenMPI's: it frees its components' code and data, and with them
// the pointers to what they allocated. Those are not ag's leaks, but telling them apart needs each
// allocation's whole stack, unwound without frame pointers (system libraries have none) at every
// malloc of the run, which made the sanitizer build's mpirun tests several times slower. Before
// MPI_Finalize, everything OpenMPI holds is still reachable: a leak found then is ag's (or a
// leak that lost its last pointer in OpenMPI, which the end-of-process check would report too).
// The check runs once; the end-of-process check is then skipped (its documented behaviour).
#pragma once

#if defined(__SANITIZE_ADDRESS__)
#define AG_LEAK_CHECK 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define AG_LEAK_CHECK 1
#endif
#endif

#ifdef AG_LEAK_CHECK
#include <sanitizer/lsan_interface.h>
#endif

namespace ag::dist::leak_check {

// LeakSanitizer's check now, when this is a sanitizer build with leak detection on; it ends the
// process with LeakSanitizer's report and exit code if ag has leaked.
inline void before_mpi_finalize() {
#ifdef AG_LEAK_CHECK
  __lsan_do_leak_check();
#endif
}

}  // namespace ag::dist::leak_check
