// The benchmark programs' main: bad input or a bad environment (AG_GEMM_BACKEND, AG_SMALL_GEMM,
// an option the parser could not check) ends the program with "<program>: <message>" on stderr
// and exit code 1, never with an uncaught exception (std::terminate). tests/bench/ checks it.
//
//   int main(int argc, char** argv) { return bench::main_catching("ag-bench-x", run, argc, argv); }
#pragma once

#include <cstdio>
#include <exception>

namespace bench {

inline int main_catching(const char* program, int (*run)(int, char**), int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", program, e.what());
    return 1;
  }
}

}  // namespace bench
