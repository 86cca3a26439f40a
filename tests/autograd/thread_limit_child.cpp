// The child process of test_parallel.cpp's thread-limit test: it limits its own address space
// (RLIMIT_AS) so that the system can start only about two more threads — each thread's stack is
// a mapping of the default stack size — and asks ag for max_num_threads() threads. ag must throw
// RuntimeError naming the count, keep its previous pool of 2 threads, and run loops on it.
// Exit code 0 when all of that holds; 3–7 name what failed (printed on stdout). The parent kills
// this process if it hangs (the pool once hung in pthread_cond_destroy here).
//
// RLIMIT_AS rather than RLIMIT_NPROC: the tests may run as root, for whom RLIMIT_NPROC is not
// enforced. The parent runs it with OPENBLAS_NUM_THREADS=1, so that no OpenBLAS thread maps its
// buffer after the limit is set.
#include <pthread.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>

#include "autograd/error.h"
#include "autograd/parallel.h"

namespace {

// Bytes of address space this process has mapped (/proc/self/statm, first field, in pages).
uint64_t address_space_in_use() {
  std::ifstream statm("/proc/self/statm");
  uint64_t pages = 0;
  statm >> pages;
  return pages * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
}

// The stack size of a new thread (glibc's default: RLIMIT_STACK, usually 8 MiB).
uint64_t default_thread_stack() {
  pthread_attr_t attr;
  std::size_t size = 0;
  pthread_getattr_default_np(&attr);
  pthread_attr_getstacksize(&attr, &size);
  pthread_attr_destroy(&attr);
  return size;
}

}  // namespace

int main() {
  ag::set_num_threads(2);  // the pool to come back to: the caller and one worker thread
  const int asked = ag::max_num_threads();
  // Room for two more stacks and 4 MiB of anything else: max_num_threads() (>= 16) cannot fit.
  const uint64_t limit = address_space_in_use() + 2 * default_thread_stack() + (4u << 20);
  // The soft limit only, lifted again before exit (LeakSanitizer's exit check starts a thread).
  rlimit address_space{};
  getrlimit(RLIMIT_AS, &address_space);
  const rlim_t unlimited = address_space.rlim_cur;
  address_space.rlim_cur = limit;
  if (setrlimit(RLIMIT_AS, &address_space) != 0) {
    std::printf("setrlimit(RLIMIT_AS) failed\n");
    return 7;
  }
  try {
    ag::set_num_threads(asked);
    std::printf("set_num_threads(%d) started every thread under an address-space limit\n", asked);
    return 3;
  } catch (const ag::RuntimeError& e) {
    std::printf("%s\n", e.what());
    const std::string message = e.what();
    const std::string expected =
        "set_num_threads: could not start " + std::to_string(asked) + " threads (";
    if (message.rfind(expected, 0) != 0 ||
        message.find("ag keeps running on 2 threads") == std::string::npos)
      return 4;
  }
  if (ag::get_num_threads() != 2) {
    std::printf("get_num_threads() is %d, not the previous 2\n", ag::get_num_threads());
    return 5;
  }
  // The pool still works: a loop large enough for both threads runs as two chunks covering it.
  const int64_t n = int64_t{1} << 20;
  std::atomic<int64_t> covered{0};
  std::atomic<int> chunks{0};
  ag::parallel_for(n, 1, [&](int64_t begin, int64_t end) {
    covered += end - begin;
    ++chunks;
  });
  if (covered.load() != n || chunks.load() != 2) {
    std::printf("parallel_for covered %lld of %lld in %d chunks after the failure\n",
        static_cast<long long>(covered.load()), static_cast<long long>(n), chunks.load());
    return 6;
  }
  address_space.rlim_cur = unlimited;
  setrlimit(RLIMIT_AS, &address_space);
  ag::set_num_threads(1);
  return 0;
}
