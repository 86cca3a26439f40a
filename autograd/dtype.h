// Element types. ag trains in float32 and checks gradients in float64; the dtype of a tensor is
// chosen at run time and every op works in both.
#pragma once

#include <cstddef>
#include <string>
#include <type_traits>
#include <utility>

namespace ag {

enum class DType { float32, float64 };

inline constexpr DType float32 = DType::float32;
inline constexpr DType float64 = DType::float64;

inline std::size_t dtype_size(DType dtype) { return dtype == DType::float32 ? 4 : 8; }
inline const char* dtype_name(DType dtype) {
  return dtype == DType::float32 ? "float32" : "float64";
}

template <class T>
inline constexpr DType dtype_of = std::is_same_v<T, float> ? DType::float32 : DType::float64;

// Runs a templated lambda with T = float or double according to `dtype`:
//   dispatch(x.dtype(), [&]<typename T>() { T* p = x.data<T>(); ... });
template <class F>
decltype(auto) dispatch(DType dtype, F&& f) {
  if (dtype == DType::float32) return std::forward<F>(f).template operator()<float>();
  return std::forward<F>(f).template operator()<double>();
}

}  // namespace ag
