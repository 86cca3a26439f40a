#!/usr/bin/env python3
"""profile_buckets.py: sums a flat profile of ag-bench-train (self cost per function) into the
buckets of docs/benchmarks.md ("Training step: ag vs PyTorch", Profile), so that a later profile can
be compared bucket by bucket with the recorded one.

    # time (perf's cpu-clock sampling; hardware counters are not available in this VM):
    perf record -e cpu-clock -F 999 --call-graph dwarf,16384 -o perf.data \\
        build/bench/ag-bench-train --config medium --threads 1 --steps 8 --warmup 1 --no-sgemm-peak
    perf report -i perf.data --no-children --sort dso,sym -g none --stdio | bench/profile_buckets.py perf

    # instructions (valgrind; only the training::Step::take calls are counted):
    valgrind --tool=callgrind --callgrind-out-file=cg.out '--toggle-collect=ag::training::Step::take(*' \\
        build/bench/ag-bench-train --config tiny --threads 1 --steps 5 --warmup 2 --no-sgemm-peak
    callgrind_annotate --auto=no --threshold=100 cg.out | bench/profile_buckets.py callgrind

Build with -g for readable names (e.g. -DCMAKE_CXX_FLAGS=-g next to Release; GCC's code is the same).
Each function goes to the first bucket whose pattern matches "dso symbol" (perf) or
"file:function [dso]" (callgrind); --unmatched lists the largest functions that no pattern
matched (they make up the bookkeeping bucket).
"""

import re
import sys

BUCKETS = [  # (bucket, pattern); the first match wins
    # oneDNN's products run in kernels it JIT-compiles: perf names their dso "[JIT] tid N".
    ("gemm (OpenBLAS sgemm: kernels, packing, beta; oneDNN's JIT kernels; ag's kernel for the heads)",
     r"libopenblas|cblas_sgemm|sgemm_|libdnnl|\[JIT\]|small_gemm|small_sgemm|masked_scores|"
     r"masked_weights|transpose_into"),
    ("dropout (Philox words, the keep mask, applying it)",
     r"bernoulli|philox|Generator::block|fill_blocks|next_uniform|reserve_words|draw_keep|"
     r"keep_from_words|apply_dropout|uniform_for|ag::dropout"),
    ("exp in libm (scalar double exp, incl. its underflow path)",
     r"libm\.so|exp@plt|exp@@GLIBC|__exp|xflow|__math_check|with_errno|__ieee754|e_exp\.c|w_exp"),
    ("softmax / masked softmax rows, incl. the fast float exp (ag's own code)",
     r"softmax_forward|softmax_rows|softmax_backward|row_softmax|row_log_softmax|length_masked_softmax|"
     r"exp_shifted|exp_approx"),
    ("layer norm (fused kernel)", r"layer_norm"),
    ("reductions (sum, mean, var: LayerNorm, softmax backward, sum_to)",
     r"group_sums|var_impl|sum_impl|mean_impl|max_impl|sum_to"),
    ("shape re-evaluated per element (ag::numel, Tensor::numel/impl in loop bounds)",
     r"ag::numel|Tensor::numel|Tensor::impl"),
    ("copies (copy_into/contiguous, clone, memcpy)", r"copy_into|contiguous|clone|memmove|memcpy"),
    ("zero fill (memset, fill_, zeros)", r"memset|fill_|ag::zeros"),
    ("optimizer + clipping (Adam::step, clip_grad_norm, to_vector)",
     r"Adam::step|adam_update|clip_grad_norm|squared_norm_partials|to_vector"),
    ("linear's epilogue and bias-gradient column sums", r"linear_epilogue|linear_backward_columns"),
    ("attention's own loops (scaling, masking, the fused kernel's row loops)",
     r"scaled_dot_product_attention|flash_attention"),
    ("heap (malloc/free/new/delete)",
     r"malloc|_int_free|cfree|free@|\bfree\b|operator new|operator delete|unlink_chunk|aligned_alloc|"
     r"memalign|tcache|sysmalloc|systrim|mmap|munmap"),
    ("kernel (page faults: zeroing fresh pages; syscalls)", r"\[kernel|kallsyms|\[k\]"),
    ("thread pool (a thread spinning while the other finishes its share; the hand-off)",
     r"ThreadPool|ag::parallel_for$|sched_yield"),
    ("elementwise kernels (add, mul, sub, div, where, relu, masked_fill, ...)",
     r"ag::(mul|add|sub|div|where|neg|relu|sqrt|masked_fill|ge|gt|lt|le|eq|pow|exp|log|abs)\b|map_binary|"
     r"map_unary|Tensor::(add_|mul_|sub_|div_|addcmul_|addcdiv_|copy_)"),
    ("index_select / embedding / cross-entropy", r"index_select|cross_entropy|Embedding|nll"),
]
OTHER = "bookkeeping (autograd engine, shape vectors, Tensor handles, std::function, locks)"


def parse(mode, lines):
    for line in lines:
        if mode == "perf":
            # dso (which may hold spaces: "[JIT] tid 2865"), [.] or [k], symbol
            m = re.match(r"\s*([\d.]+)%\s+(.+?)\s+(\[.\])\s+(.*)", line)
            if m:
                yield float(m.group(1)), f"{m.group(2)} {m.group(3)} {m.group(4)}"
        else:
            m = re.match(r"\s*([\d,]+) \(\s*[\d.]+%\)\s+(.*)", line)
            if m and "PROGRAM TOTALS" not in line:
                yield float(m.group(1).replace(",", "")), m.group(2)


def main():
    if len(sys.argv) < 2 or sys.argv[1] not in ("perf", "callgrind"):
        sys.exit("usage: profile_buckets.py perf|callgrind [--unmatched] < flat profile (see the docstring)")
    rows = list(parse(sys.argv[1], sys.stdin))
    total = sum(cost for cost, _ in rows) or 1.0
    sums, unmatched = {}, []
    for cost, key in rows:
        bucket = next((b for b, p in BUCKETS if re.search(p, key)), None)
        if bucket is None:
            bucket = OTHER
            unmatched.append((cost, key))
        sums[bucket] = sums.get(bucket, 0.0) + cost
    for bucket, cost in sorted(sums.items(), key=lambda kv: -kv[1]):
        print(f"{100 * cost / total:6.1f}%  {bucket}")
    if "--unmatched" in sys.argv:
        print("\nlargest unmatched functions:")
        for cost, key in sorted(unmatched, reverse=True)[:20]:
            print(f"{100 * cost / total:6.2f}%  {key[:150]}")


if __name__ == "__main__":
    main()
