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

namespace ag {

// Threads ag runs on: its matrix products and its larger loops. Default: the machine's cores.
// The same thread count gives bit-identical results. Throws ValueError for threads < 1.
void set_num_threads(int threads);
int get_num_threads();

// Calls body(begin, end) on disjoint chunks covering [0, n), in parallel on up to
// get_num_threads() threads, and returns when all are done. cost_per_item is the work of one
// index in units of about one element of an elementwise loop. Runs inline (one call, body(0, n))
// when n·cost_per_item is below ~64k (waking a thread costs more than the work) or when called
// from inside a parallel loop. An exception thrown by a chunk is rethrown here.
//   ag::parallel_for(n, 1, [&](int64_t begin, int64_t end) {
//     for (int64_t i = begin; i < end; ++i) out[i] = 2 * in[i];  // each chunk writes its own range
//   });
void parallel_for(
    int64_t n, int64_t cost_per_item, const std::function<void(int64_t, int64_t)>& body);

}  // namespace ag
