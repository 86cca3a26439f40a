// Which copy of vector_math.h's functions runs (see there), and the portable scalar copy: the same
// formulas on one element at a time with libm's functions, for CPUs other than x86-64.
#include "autograd/detail/vector_math.h"

#include <cmath>
#include <cstdlib>
#include <string>

#include "autograd/detail/vector_math_kernels.h"
#include "autograd/error.h"

namespace ag::detail::vec {

namespace {

template <class Real>
struct Scalar {
  using T = Real;
  using V = Real;
  static constexpr int kWidth = 1;
  static V exp(V v) { return std::exp(v); }
  static V log(V v) { return std::log(v); }
  static V tanh(V v) { return std::tanh(v); }
  static V tanh_u35(V v) { return std::tanh(v); }
  static V erf(V v) { return std::erf(v); }
  static V erfc(V v) { return std::erfc(v); }
  static V sin(V v) { return std::sin(v); }
  static V cos(V v) { return std::cos(v); }
  static V sqrt(V v) { return std::sqrt(v); }
};

constexpr Capability kWidestFirst[] = {
    Capability::avx512, Capability::avx2, Capability::sse2, Capability::scalar};

// AG_CPU_CAPABILITY if set (it must name a copy this CPU runs), else the widest this CPU runs.
Capability pick_capability() {
  const char* asked = std::getenv("AG_CPU_CAPABILITY");
  if (asked == nullptr || *asked == '\0') {
    for (Capability capability : kWidestFirst)
      if (supported(capability)) return capability;
  }
  std::string runnable;
  for (Capability capability : kWidestFirst) {
    if (!supported(capability)) continue;
    if (asked == std::string(capability_name(capability))) return capability;
    runnable += runnable.empty() ? "" : ", ";
    runnable += capability_name(capability);
  }
  fail<ValueError>("AG_CPU_CAPABILITY=", asked, ": this CPU and build run ", runnable);
}

}  // namespace

const char* capability_name(Capability capability) {
  switch (capability) {
    case Capability::avx512:
      return "avx512";
    case Capability::avx2:
      return "avx2";
    case Capability::sse2:
      return "sse2";
    case Capability::scalar:
      return "scalar";
  }
  return "unknown";
}

bool supported(Capability capability) {
#if defined(__x86_64__)
  switch (capability) {
    case Capability::avx512:
      return __builtin_cpu_supports("avx512f");
    case Capability::avx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case Capability::sse2:
    case Capability::scalar:
      return true;
  }
  return false;
#else
  return capability == Capability::scalar;
#endif
}

Capability active_capability() {
  static const Capability active = pick_capability();
  return active;
}

const Functions<float>& scalar_functions(float) { return Kernels<Scalar<float>>::functions(); }
const Functions<double>& scalar_functions(double) { return Kernels<Scalar<double>>::functions(); }

namespace {
template <class T>
const Functions<T>& copy_for(Capability capability) {
  if (!supported(capability))
    fail<ValueError>("vector math: this CPU does not run the ", capability_name(capability),
        " copy of the elementwise functions");
  switch (capability) {
#if defined(__x86_64__)
    case Capability::avx512:
      return avx512_functions(T());
    case Capability::avx2:
      return avx2_functions(T());
    case Capability::sse2:
      return sse2_functions(T());
#endif
    default:
      return scalar_functions(T());
  }
}
}  // namespace

const Functions<float>& functions_for(Capability capability, float) {
  return copy_for<float>(capability);
}
const Functions<double>& functions_for(Capability capability, double) {
  return copy_for<double>(capability);
}

const Functions<float>& functions(float) {
  static const Functions<float>& active = copy_for<float>(active_capability());
  return active;
}
const Functions<double>& functions(double) {
  static const Functions<double>& active = copy_for<double>(active_capability());
  return active;
}

}  // namespace ag::detail::vec

namespace ag::detail {

void exp_shifted(const float* in, float shift, float* out, int64_t n) {
  vec::functions(0.0f).exp_shifted(in, shift, out, n);
}

double exp_shifted_sum(const float* in, float shift, float* out, int64_t n) {
  return vec::functions(0.0f).exp_shifted_sum(in, shift, out, n);
}

}  // namespace ag::detail
