// vector_math.h's functions on AVX-512: 16 floats or 8 doubles at a time. Compiled with
// -mavx512f -mfma (autograd/CMakeLists.txt); vector_math.cpp calls them only on a CPU that has
// AVX-512F.
#if defined(__x86_64__)
#include <immintrin.h>
#include <sleef.h>

#include "autograd/detail/vector_math_kernels.h"

namespace ag::detail::vec {

AG_SLEEF_ISA(Avx512Float, float, __m512, 16, f16, avx512f, _mm512_sqrt_ps);
AG_SLEEF_ISA(Avx512Double, double, __m512d, 8, d8, avx512f, _mm512_sqrt_pd);

const Functions<float>& avx512_functions(float) { return Kernels<Avx512Float>::functions(); }
const Functions<double>& avx512_functions(double) { return Kernels<Avx512Double>::functions(); }

}  // namespace ag::detail::vec
#endif
