// AG_TARGET_CLONES: compile a hot loop once per instruction set, the copy for this CPU picked when
// the program loads (GCC ≥ 6, clang ≥ 14 on x86-64): AVX-512 and AVX2 process 16 and 8 floats at
// once where the portable x86-64 build has SSE2's 4. Elsewhere it is empty (one portable copy).
// Internal to ag's kernels.
#pragma once

#if defined(__x86_64__) && defined(__has_attribute)
#if __has_attribute(target_clones)
#define AG_TARGET_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#endif
#endif
#ifndef AG_TARGET_CLONES
#define AG_TARGET_CLONES
#endif
