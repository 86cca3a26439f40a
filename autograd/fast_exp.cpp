// The vectorised loop over exp_approx (see fast_exp.h).
#include "autograd/fast_exp.h"

// One copy of the loop per instruction set, picked when the program loads (GCC ≥ 6, clang ≥ 14):
// AVX-512 and AVX2 evaluate 16 and 8 exps at once, where the portable x86-64 build has SSE2's 4.
#if defined(__x86_64__) && defined(__has_attribute)
#if __has_attribute(target_clones)
#define AG_TARGET_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#endif
#endif
#ifndef AG_TARGET_CLONES
#define AG_TARGET_CLONES
#endif

namespace ag::detail {

AG_TARGET_CLONES void exp_shifted(const float* in, float shift, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = exp_approx(in[i] - shift);
}

}  // namespace ag::detail
