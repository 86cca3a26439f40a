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

// SLEEF's functions, but float32's exp on AVX-512's own scaling instruction (1.5 times SLEEF's
// speed, within the same 1-ulp bound: tests/autograd/test_vector_math.cpp); and x·x − h in one
// rounding, the exact error of h = x·x (Kernels::square_error).
struct Avx512Float : Avx512FloatSleef {
  static __m512 square_error(__m512 x, __m512 h) { return _mm512_fmsub_ps(x, x, h); }

  // e^x = 2^n · e^r, n = round(x / ln 2), r = x − n·ln 2 ∈ [−ln 2 / 2, ln 2 / 2]:
  //   - r to float's precision: ln 2 in two parts (Cody & Waite), the first of 15 bits, so that
  //     n·ln2_hi is exact for every |n| ≤ 150 here;
  //   - e^r ≈ 1 + r + r²·P(r), P of degree 5 — SLEEF's minimax coefficients for expf;
  //   - 2^n · e^r in one rounding by vscalefps, which also gives inf above float's range, and the
  //     subnormals and 0 below it.
  // x is first clamped to [−104, 89] (e^x is 0 below and inf above in float32 anyway), so that
  // x·log2(e) stays finite; a NaN passes the clamp (max and min return their second operand, x,
  // when it is a NaN).
  static __m512 exp(__m512 x) {
    x = _mm512_mask_max_ps(x, 0xFFFF, _mm512_set1_ps(-104.0f),
        _mm512_mask_min_ps(x, 0xFFFF, _mm512_set1_ps(89.0f), x));
    const __m512 n = _mm512_mask_roundscale_ps(x, 0xFFFF, x * 1.44269504088896341f,  // x / ln 2
        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);  // − n·ln2_hi
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606765330187045e-06f), r);  // − n·ln2_lo
    __m512 p = _mm512_set1_ps(0.000198527617612853646278381f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.00139304355252534151077271f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.00833336077630519866943359f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.0416664853692054748535156f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.166666671633720397949219f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    const __m512 e_r = _mm512_fmadd_ps(p, r * r, r) + 1.0f;  // e^r
    return _mm512_mask_scalef_ps(e_r, 0xFFFF, e_r, n);       // 2^n · e^r
  }
};
AG_SLEEF_ISA(Avx512Double, double, __m512d, 8, d8, avx512f, sqrt8);

const Functions<float>& avx512_functions(float) { return Kernels<Avx512Float>::functions(); }
const Functions<double>& avx512_functions(double) { return Kernels<Avx512Double>::functions(); }

}  // namespace ag::detail::vec
#endif
