// vector_math.h's functions on SSE2, which every x86-64 CPU has: 4 floats or 2 doubles at a time.
#if defined(__x86_64__)
#include <immintrin.h>
#include <sleef.h>

#include "autograd/detail/vector_math_kernels.h"

namespace ag::detail::vec {

AG_SLEEF_ISA(Sse2Float, float, __m128, 4, f4, sse2, _mm_sqrt_ps);
AG_SLEEF_ISA(Sse2Double, double, __m128d, 2, d2, sse2, _mm_sqrt_pd);

const Functions<float>& sse2_functions(float) { return Kernels<Sse2Float>::functions(); }
const Functions<double>& sse2_functions(double) { return Kernels<Sse2Double>::functions(); }

}  // namespace ag::detail::vec
#endif
