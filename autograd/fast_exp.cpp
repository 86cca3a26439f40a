// The vectorised loop over exp_approx (see fast_exp.h).
#include "autograd/detail/fast_exp.h"

#include "autograd/detail/target_clones.h"  // one copy of the loop per instruction set

namespace ag::detail {

AG_TARGET_CLONES void exp_shifted(const float* in, float shift, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = exp_approx(in[i] - shift);
}

}  // namespace ag::detail
