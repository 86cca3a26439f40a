// Vectorised elementwise math over arrays (internal, not part of the public API): the transcendental
// functions of the activations — exp, log, tanh, the sigmoid, GELU (exact and tanh), SiLU — erf,
// sin, cos, √ and 1/√, and the products their backward passes make, for float32 and float64.
//
// The vector functions are SLEEF's (Debian's libsleef-dev, the library PyTorch's CPU kernels use),
// the 1.0-ulp ones (1.5 for erfc), called on 16 floats (AVX-512), 8 (AVX2) or 4 (SSE2) at once —
// and √ the instruction set's own (correctly rounded);
// the formulas around them are written once, in vector_math_kernels.h, and compiled once per
// instruction set (vector_math_avx512.cpp, vector_math_avx2.cpp, vector_math_sse2.cpp). The copy
// for this CPU is picked the first time a function is called: the widest the CPU has, or the one
// the environment variable AG_CPU_CAPABILITY names (avx512, avx2, sse2 — as PyTorch's
// ATEN_CPU_CAPABILITY), so one machine can run and test each.
//
// Each element's result depends only on that element and the copy picked: the same on any number of
// threads and wherever the array starts. Copies for different instruction sets may differ in the
// last bits (they fuse multiply-adds differently), except float32's exp and log, where the AVX-512
// and AVX2 copies take the same steps; each function's accuracy against libm in double
// precision is measured for every copy in tests/autograd/test_vector_math.cpp and listed in
// docs/ops.md ("Accuracy of the elementwise math").
//
// Formulas, chosen so that no result cancels where the mathematical one is small:
//   sigmoid(x)    = 1 / (1 + e⁻ˣ)                (e⁻ˣ = +inf for x < −88 gives 0, not NaN)
//   silu(x)       = x / (1 + e⁻ˣ)
//   gelu(x)       = x · Φ(x),  Φ(x) = ½ erfc(−x/√2)        (erfc, not 1 + erf: 1 + erf(−4) cancels)
//   gelu_tanh(x)  = ½ x (1 + tanh u) = x · σ(2u),  u = √(2/π) (x + 0.044715 x³)
// (tanh-GELU's 1 + tanh u = 2σ(2u) exactly, and σ keeps its precision where 1 + tanh u cancels.)
#pragma once

#include <cmath>
#include <cstdint>
#include <string>

namespace ag::detail::vec {

// The instruction sets a copy of the functions is compiled for, widest first.
enum class Capability { avx512, avx2, sse2, scalar };
const char* capability_name(Capability capability);

// y[i] = f(x[i]) for i in [0, n); x and y may be the same array.
template <class T>
using UnaryFn = void (*)(const T* x, T* y, int64_t n);
// out[i] = the gradient g[i] · f′ at the saved value s[i] (the input x or the output y, as each
// function's comment says); out may be g.
template <class T>
using BackwardFn = void (*)(const T* g, const T* s, T* out, int64_t n);
// The same from both: the input x[i] and the output y[i] = f(x[i]).
template <class T>
using BackwardFromBothFn = void (*)(const T* g, const T* x, const T* y, T* out, int64_t n);
// y[i] = f(x[i] − shift), x − shift rounded first, as its own subtraction would.
template <class T>
using ShiftedFn = void (*)(const T* x, T shift, T* y, int64_t n);

// The same, returning Σ y[i] in double, added as detail::row_sum_lanes adds y (row_reductions.h):
// the same bits as that sum of the stored y, in the pass that computes them.
template <class T>
using ShiftedSumFn = double (*)(const T* x, T shift, T* y, int64_t n);

// One copy of every function, for one element type.
template <class T>
struct Functions {
  UnaryFn<T> exp;
  ShiftedFn<T> exp_shifted;         // e^(x − shift): a softmax row less its maximum
  ShiftedSumFn<T> exp_shifted_sum;  // the same, and Σ e^(x − shift): softmax's denominator
  UnaryFn<T> log, tanh, sigmoid, gelu, gelu_tanh, silu, erf, sin, cos, sqrt, rsqrt, relu;
  BackwardFn<T> exp_backward;           // s = y = eˣ:       g · y
  BackwardFn<T> tanh_backward;          // s = y = tanh x:   g · (1 − y²)
  BackwardFn<T> sigmoid_backward;       // s = y = σ(x):     g · y (1 − y)
  BackwardFromBothFn<T> gelu_backward;  // x, y = x Φ(x):  g · (Φ(x) + x φ(x)),  Φ(x) = y / x
  BackwardFn<T> gelu_tanh_backward;  // s = x:            g · (σ + 2 x σ (1 − σ) u′),  σ = σ(2u)
  BackwardFn<T> silu_backward;  // s = x:            g · σ (1 + x (1 − σ)),        σ = σ(x)
  BackwardFn<T> erf_backward;   // s = x:            g · (2/√π) e^(−x²)
  BackwardFn<T> sin_backward;   // s = x:            g · cos x
  BackwardFn<T> cos_backward;   // s = x:            −g · sin x
  BackwardFn<T> relu_backward;  // s = x:            g · [x > 0]
  BackwardFn<T> sqrt_backward;  // s = y = √x:       g / (y + y)
};

// The copy every op uses (picked once; see above).
const Functions<float>& functions(float);
const Functions<double>& functions(double);
Capability active_capability();

// Whether this CPU (and this build) can run a copy; the copy itself (for the accuracy tests).
bool supported(Capability capability);
const Functions<float>& functions_for(Capability capability, float);
const Functions<double>& functions_for(Capability capability, double);

// The copies each instruction set's file defines (vector_math_<isa>.cpp).
const Functions<float>& avx512_functions(float);
const Functions<double>& avx512_functions(double);
const Functions<float>& avx2_functions(float);
const Functions<double>& avx2_functions(double);
const Functions<float>& sse2_functions(float);
const Functions<double>& sse2_functions(double);
const Functions<float>& scalar_functions(float);
const Functions<double>& scalar_functions(double);

}  // namespace ag::detail::vec

namespace ag::detail {

// out[i] = e^(in[i] − shift) for i in [0, n), by the active copy's exp (1 ulp; subnormal results
// kept, not flushed): softmax's, cross-entropy's and the attention kernels' exp of a row less its
// maximum. in and out may be the same array.
void exp_shifted(const float* in, float shift, float* out, int64_t n);

// The same, returning Σ out[i] in double as row_sum_lanes(out, n) would (detail/row_reductions.h),
// bit for bit, from the exps as they are computed: softmax's denominator without a second pass
// over the row.
double exp_shifted_sum(const float* in, float shift, float* out, int64_t n);

// The same for a row of either dtype: the vectorised exp for float32, std::exp for float64 (so
// that the float64 gradchecks see libm's precision).
inline void exp_shifted_row(const float* in, float shift, float* out, int64_t n) {
  exp_shifted(in, shift, out, n);
}
inline void exp_shifted_row(const double* in, double shift, double* out, int64_t n) {
  for (int64_t k = 0; k < n; ++k) out[k] = std::exp(in[k] - shift);
}

}  // namespace ag::detail
