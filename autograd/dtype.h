// Element types, as PyTorch's: ag trains in float32 and checks gradients in float64; int64
// (torch.long) holds token ids, positions and indices exactly, and bool (torch.bool) holds masks
// and the results of comparisons. The dtype of a tensor is chosen at run time.
//
// Only float32 and float64 tensors take part in autograd: an int64 or bool tensor cannot require
// grad, and an op that computes in floating point (exp, matmul, softmax, ...) refuses one with a
// DTypeError naming the op — convert it first, x.to(ag::float32). Arithmetic and comparisons mix
// them as PyTorch does (promote_types below).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>

#include "autograd/error.h"

namespace ag {

enum class DType { float32, float64, int64, bool_ };

inline constexpr DType float32 = DType::float32;
inline constexpr DType float64 = DType::float64;
inline constexpr DType int64 = DType::int64;  // torch.long
inline constexpr DType bool_ = DType::bool_;  // torch.bool (C++ has `bool` for itself)

inline std::size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::float32:
      return 4;
    case DType::bool_:
      return 1;
    default:
      return 8;
  }
}
inline const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::float32:
      return "float32";
    case DType::float64:
      return "float64";
    case DType::int64:
      return "int64";
    default:
      return "bool";
  }
}
inline bool is_floating_point(DType dtype) {
  return dtype == DType::float32 || dtype == DType::float64;
}

// The C++ element type of each dtype: float, double, int64_t, bool.
template <class T>
inline constexpr DType dtype_of = std::is_same_v<T, float>     ? DType::float32
                                  : std::is_same_v<T, double>  ? DType::float64
                                  : std::is_same_v<T, int64_t> ? DType::int64
                                                               : DType::bool_;

// The dtype of `a ⊕ b` for arithmetic and comparisons, as torch.promote_types for the pairs ag
// mixes: a floating dtype wins over int64 and bool (int64 + float32 → float32), int64 wins over
// bool. float32 with float64 is refused (ag never converts a model's precision behind its back):
// a DTypeError naming `op` and both dtypes.
inline DType promote_types(DType a, DType b, const char* op) {
  if (a == b) return a;
  if (is_floating_point(a) && is_floating_point(b))
    fail<DTypeError>(op, ": dtypes ", dtype_name(a), " and ", dtype_name(b),
        " cannot be mixed; convert one of them first (x.to(ag::", dtype_name(b), "))");
  if (is_floating_point(a)) return a;
  if (is_floating_point(b)) return b;
  return DType::int64;  // int64 with bool
}

// Runs a templated lambda with T = float or double according to `dtype`:
//   dispatch(x.dtype(), [&]<typename T>() { T* p = x.data<T>(); ... });
// For the floating dtypes only: the ops that compute in floating point check their operands with
// detail::check_floating (naming themselves) before they get here; this throw is the backstop.
template <class F>
decltype(auto) dispatch(DType dtype, F&& f) {
  if (dtype == DType::float32) return std::forward<F>(f).template operator()<float>();
  if (dtype != DType::float64)
    fail<DTypeError>("ag: an op that computes in floating point got a tensor of dtype ",
        dtype_name(dtype), "; convert it first (x.to(ag::float32))");
  return std::forward<F>(f).template operator()<double>();
}

// The same over every dtype (T = float, double, int64_t, bool): for ops that move or compare
// values (copies, views made contiguous, concat, where, comparisons) rather than compute with
// them.
template <class F>
decltype(auto) dispatch_all(DType dtype, F&& f) {
  switch (dtype) {
    case DType::float32:
      return std::forward<F>(f).template operator()<float>();
    case DType::float64:
      return std::forward<F>(f).template operator()<double>();
    case DType::int64:
      return std::forward<F>(f).template operator()<int64_t>();
    default:
      return std::forward<F>(f).template operator()<bool>();
  }
}

}  // namespace ag
