// AG_TARGET_CLONES: compile a hot loop once per instruction set, the copy for this CPU picked when
// the program loads (GCC ≥ 6, clang ≥ 14 on x86-64): AVX-512 and AVX2 process 16 and 8 floats at
// once where the portable x86-64 build has SSE2's 4. Elsewhere it is empty (one portable copy).
// Internal to ag's kernels. Only what is inlined into a kernel is compiled per instruction set: its
// helpers are [[gnu::always_inline]], and tests/architecture/check_clone_calls.py fails on a copy
// that calls one left out of line (compiled once, for the portable target).
//
// Rounding: GCC fuses a · b + c into one multiply-add (C++'s default -ffp-contract=fast) wherever
// the instruction set has FMA, and its avx512f target has it where avx2 does not. So the AVX-512
// copy may round a loop's multiply-adds once where the AVX2 and portable copies round twice: an
// AVX-512 CPU's results can differ in the last bit from another CPU's. One machine always runs the
// same copy, so its runs repeat bit for bit; the bit-pinned tests were made on AVX-512.
#pragma once

#if defined(__x86_64__) && defined(__has_attribute)
#if __has_attribute(target_clones)
#define AG_TARGET_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#endif
#endif
#ifndef AG_TARGET_CLONES
#define AG_TARGET_CLONES
#endif
