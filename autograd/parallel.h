// ag's threads: one pool runs every parallel loop, including the matrix products.
//
// OpenBLAS is kept on one thread and ag splits the work itself — the rows of a large product,
// the matrices of a batched one (B·H small products of attention), the rows of softmax and the
// chunks of elementwise loops — so that there is one threading runtime and never a threaded BLAS
// inside a threaded loop (nested pools oversubscribe the cores and spin against each other).
//
// Work is split into contiguous chunks by index only, and each output element is computed by one
// thread, so a run is bit-identical to another on the same number of threads. Loops whose elements
// do not depend on the split (elementwise ops, softmax rows, the matrices of a batch) also give
// the same bits on any number of threads; a product whose rows are split may round differently,
// since OpenBLAS picks its kernels by matrix size.
#pragma once

#include <cstdint>
#include <functional>

#include "autograd/scoped_setting.h"

namespace ag {

// Threads ag runs on: its matrix products and its larger loops. Default: the machine's cores.
// The same thread count gives bit-identical results.
//
// Throws ValueError, naming the value and the bound, for threads < 1 or > max_num_threads():
// threads beyond the cores only wait for each other (4,000 threads made 20 training steps take
// 91 s instead of 0.8 s). The pool's threads start here, all of them or none: if the system
// refuses one (a process or memory limit), the threads already started are joined, the pool goes
// back to its previous size (or to 1 thread if that fails too), and set_num_threads throws
// RuntimeError naming the count asked for, the system's reason and the count kept — an error
// rather than silently fewer threads, since the thread count decides the results' last bits.
// The pool stays usable either way. Without a set_num_threads call, the first parallel loop starts
// the default pool, and throws RuntimeError itself if the system refuses one of its threads.
void set_num_threads(int threads);
int get_num_threads();

// Sets the thread count for a scope and restores the previous one on exit (scoped_setting.h):
//   { ag::NumThreadsGuard one(1); ... }  // runs on 1 thread; the count before it afterwards
using NumThreadsGuard = ScopedSetting<int, &get_num_threads, &set_num_threads>;

// The most threads set_num_threads accepts: 4 × std::thread::hardware_concurrency(), and at
// least 16 (on a machine that does not tell its count, hardware_concurrency() is 0).
int max_num_threads();

// Calls body(begin, end) on disjoint chunks covering [0, n), in parallel on up to
// get_num_threads() threads, and returns when all are done. cost_per_item is the work of one
// index in units of about one element of an elementwise loop. Runs inline (one call, body(0, n))
// when n·cost_per_item is below ~32k (handing work to a thread costs more than the work) or when called
// from inside a parallel loop. An exception thrown by a chunk is rethrown here.
//   ag::parallel_for(n, 1, [&](int64_t begin, int64_t end) {
//     for (int64_t i = begin; i < end; ++i) out[i] = 2 * in[i];  // each chunk writes its own range
//   });
void parallel_for(
    int64_t n, int64_t cost_per_item, const std::function<void(int64_t, int64_t)>& body);

}  // namespace ag
