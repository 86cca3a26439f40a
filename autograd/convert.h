// Converting one element between ag's dtypes (float, double, int64_t, bool), in the two ways ag
// needs: exactly (reading values out, filling a tensor from values: a token id must not round)
// and as PyTorch's x.to(dtype) converts (truncating, rounding). Tensor::item, to_vector, to and
// the creation functions convert through these; code of your own that moves values between
// dtypes can too.
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "autograd/dtype.h"
#include "autograd/error.h"

namespace ag {

// Whether a floating value has an int64 (after truncation toward zero): finite and in
// [−2^63, 2^63).
template <class F>
bool fits_int64(F v) {
  return v >= F(-0x1p63) && v < F(0x1p63);  // false for NaN
}

// v as To, or a ValueError naming `op` where v does not survive: an int64 past what the floating
// type holds exactly (2^24 for float, 2^53 for double), a floating value that is not an integer in
// int64's range. Between float and double it rounds (a float64 tensor read as floats); to bool it
// is `v != 0`.
template <class To, class From>
To exact_cast(From v, const char* op) {
  if constexpr (std::is_same_v<To, From>) {
    return v;
  } else if constexpr (std::is_same_v<To, bool>) {
    return v != From(0);
  } else if constexpr (std::is_same_v<From, bool>) {
    return static_cast<To>(v);
  } else if constexpr (std::is_floating_point_v<To> && std::is_floating_point_v<From>) {
    return static_cast<To>(v);
  } else if constexpr (std::is_same_v<From, int64_t>) {  // int64 → float or double
    const To r = static_cast<To>(v);
    if (!fits_int64(r) || static_cast<int64_t>(r) != v)
      fail<ValueError>(op, ": the int64 value ", v, " has no exact ", dtype_name(dtype_of<To>),
          " (integers are exact up to 2^", std::is_same_v<To, float> ? 24 : 53, "); keep it int64");
    return r;
  } else {  // float or double → int64
    if (!fits_int64(v) || v != std::trunc(v))
      fail<ValueError>(
          op, ": the value ", static_cast<double>(v), " is not an integer that int64 holds");
    return static_cast<int64_t>(v);
  }
}

// v as To, as PyTorch's x.to(dtype): floating point to int64 truncates toward zero, int64 to
// floating point rounds to the nearest, anything to bool is `v != 0`. Where PyTorch's result is
// undefined — a NaN, an infinity or a value beyond int64's range to int64 — a ValueError.
template <class To, class From>
To converting_cast(From v) {
  if constexpr (std::is_same_v<To, bool>) {
    return v != From(0);
  } else if constexpr (std::is_same_v<To, int64_t> && std::is_floating_point_v<From>) {
    if (!fits_int64(v))
      fail<ValueError>("to: the value ", static_cast<double>(v),
          " has no int64 (int64 holds integers in [-2^63, 2^63))");
    return static_cast<int64_t>(v);
  } else {
    return static_cast<To>(v);
  }
}

}  // namespace ag
