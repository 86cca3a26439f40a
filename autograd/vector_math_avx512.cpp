// vector_math.h's functions on AVX-512: 16 floats or 8 doubles at a time. Compiled with
// -mavx512f -mfma (autograd/CMakeLists.txt); vector_math.cpp calls them only on a CPU that has
// AVX-512F.
#if defined(__x86_64__)
#include <immintrin.h>
#include <sleef.h>

#include "autograd/detail/vector_math_kernels.h"

namespace ag::detail::vec {

// GCC 12's unmasked AVX-512 intrinsics (sqrt, scalef, min, max, roundscale) pass
// _mm512_undefined_ps() to their builtins as the unused source, which it then reports as
// uninitialized once inlined (GCC bug 105593). ag calls the masked forms with every lane selected:
// the same instructions, with a source of their own.
inline __m512 sqrt16(__m512 v) { return _mm512_mask_sqrt_ps(v, 0xFFFF, v); }
inline __m512d sqrt8(__m512d v) { return _mm512_mask_sqrt_pd(v, 0xFF, v); }

AG_SLEEF_ISA(Avx512FloatSleef, float, __m512, 16, f16, avx512f, sqrt16);
AG_SLEEF_ISA(Avx512DoubleSleef, double, __m512d, 8, d8, avx512f, sqrt8);

// The last partial vector of an array (Kernels::load_first, store_first): a masked load reads 0
// into the lanes past `count`, and neither it nor the masked store touches their memory.
struct Avx512Tails {
  static __m512 load_first(const float* p, int64_t count) {
    return _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << count) - 1), p);
  }
  static void store_first(float* p, __m512 v, int64_t count) {
    _mm512_mask_storeu_ps(p, static_cast<__mmask16>((1u << count) - 1), v);
  }
  static __m512d load_first(const double* p, int64_t count) {
    return _mm512_maskz_loadu_pd(static_cast<__mmask8>((1u << count) - 1), p);
  }
  static void store_first(double* p, __m512d v, int64_t count) {
    _mm512_mask_storeu_pd(p, static_cast<__mmask8>((1u << count) - 1), v);
  }
};

// SLEEF's functions, but float32's exp on AVX-512's own scaling instruction (1.5 times SLEEF's
// speed, within the same 1-ulp bound: tests/autograd/test_vector_math.cpp); masked tails; and
// x·x − h in one rounding, the exact error of h = x·x (Kernels::square_error).
struct Avx512Float : Avx512FloatSleef, Avx512Tails {
  static __m512 square_error(__m512 x, __m512 h) { return _mm512_fmsub_ps(x, x, h); }

  // e^x = 2^n · e^r (the reduction and polynomial of vector_math_kernels.h's kExpf constants),
  // 2^n · e^r in one rounding by vscalefps, which also gives inf above float's range, and the
  // subnormals and 0 below it. A NaN passes the clamp (max and min return their second operand,
  // x, when it is a NaN).
  static __m512 exp(__m512 x) {
    x = _mm512_mask_max_ps(x, 0xFFFF, _mm512_set1_ps(kExpfLowest),
        _mm512_mask_min_ps(x, 0xFFFF, _mm512_set1_ps(kExpfHighest), x));
    const __m512 n = _mm512_mask_roundscale_ps(
        x, 0xFFFF, x * kExpfLog2e, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(kExpfLn2Hi), x);  // x − n·ln2_hi
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(kExpfLn2Lo), r);         // − n·ln2_lo
    __m512 p = _mm512_set1_ps(kExpfPoly[0]);
    for (int i = 1; i < 6; ++i) p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kExpfPoly[i]));
    const __m512 e_r = _mm512_fmadd_ps(p, r * r, r) + 1.0f;  // e^r
    return _mm512_mask_scalef_ps(e_r, 0xFFFF, e_r, n);       // 2^n · e^r
  }
};
struct Avx512Double : Avx512DoubleSleef, Avx512Tails {};

const Functions<float>& avx512_functions(float) { return Kernels<Avx512Float>::functions(); }
const Functions<double>& avx512_functions(double) { return Kernels<Avx512Double>::functions(); }

}  // namespace ag::detail::vec
#endif
