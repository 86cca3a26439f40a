// vector_math.h's functions on AVX2 with FMA: 8 floats or 4 doubles at a time. Compiled with
// -mavx2 -mfma (autograd/CMakeLists.txt); vector_math.cpp calls them only on a CPU that has both.
#if defined(__x86_64__)
#include <immintrin.h>
#include <sleef.h>

#include "autograd/detail/vector_math_kernels.h"

namespace ag::detail::vec {

AG_SLEEF_ISA(Avx2FloatSleef, float, __m256, 8, f8, avx2, _mm256_sqrt_ps);

// SLEEF's functions, and x·x − h in one rounding, the exact error of h = x·x
// (Kernels::square_error).
struct Avx2Float : Avx2FloatSleef {
  static __m256 square_error(__m256 x, __m256 h) { return _mm256_fmsub_ps(x, x, h); }
};
AG_SLEEF_ISA(Avx2Double, double, __m256d, 4, d4, avx2, _mm256_sqrt_pd);

const Functions<float>& avx2_functions(float) { return Kernels<Avx2Float>::functions(); }
const Functions<double>& avx2_functions(double) { return Kernels<Avx2Double>::functions(); }

}  // namespace ag::detail::vec
#endif
