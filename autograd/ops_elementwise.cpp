// Elementwise ops with NumPy/PyTorch broadcasting, each with its backward. Each op's gradient is
// written once, in the docs/ops.md tag beside its backward (test_docs checks it against the table).
//
// Broadcasting: shapes are aligned at the right; two sizes are compatible when equal or when one
// is 1, and the result takes the larger. An input broadcast along some dims received the same
// value in many output positions, so its gradient is the sum of the output gradient over those
// dims: sum_to(grad, input_shape), the one helper every broadcasting op's backward uses.
#include <bit>
#include <cmath>
#include <numbers>

#include "autograd/autograd.h"
#include "autograd/detail/kernels.h"
#include "autograd/detail/vector_math.h"
#include "autograd/ops.h"
#include "autograd/profiler.h"

namespace ag {

using detail::broadcast_strides;
using detail::for_each_row;
using detail::parallel_for_each_row;

// ---- broadcasting helpers -----------------------------------------------------------------------

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  Shape out(std::max(a.size(), b.size()));
  for (std::size_t i = 0; i < out.size(); ++i) {
    // Align from the right; a missing dim acts as size 1.
    int64_t sa = i < out.size() - a.size() ? 1 : a[i - (out.size() - a.size())];
    int64_t sb = i < out.size() - b.size() ? 1 : b[i - (out.size() - b.size())];
    if (sa != sb && sa != 1 && sb != 1)
      fail<ShapeError>(op, ": shapes ", shape_str(a), " and ", shape_str(b),
          " cannot be broadcast (dim ", i, ": ", sa, " vs ", sb, ")");
    out[i] = sa == 1 ? sb : sa;
  }
  return out;
}

Tensor sum_to(const Tensor& grad, const Shape& shape) {
  if (grad.shape() == shape) return grad;
  // Dims that `shape` lacks (leading) or has as 1 where grad does not were broadcast: sum them.
  const std::size_t lead = grad.shape().size() - shape.size();
  if (grad.shape().size() < shape.size() ||
      broadcast_shapes(shape, grad.shape(), "sum_to") != grad.shape())
    fail<ShapeError>(
        "sum_to: shape ", shape_str(shape), " does not broadcast to ", shape_str(grad.shape()));
  Shape dims;
  for (std::size_t d = 0; d < grad.shape().size(); ++d)
    if (d < lead || (shape[d - lead] == 1 && grad.shape()[d] != 1))
      dims.push_back(static_cast<int64_t>(d));
  Tensor reduced = dims.empty() ? grad : sum(grad, dims, /*keepdim=*/true);
  return reshape(reduced, shape);
}

namespace {

// Integer arithmetic wraps around on overflow, as PyTorch's (in C++ a signed overflow would be
// undefined, so int64 adds, subtracts and multiplies as uint64).
struct Plus {
  template <class T>
  T operator()(T x, T y) const {
    if constexpr (std::is_same_v<T, int64_t>)
      return static_cast<int64_t>(static_cast<uint64_t>(x) + static_cast<uint64_t>(y));
    else
      return x + y;
  }
};
struct Minus {
  template <class T>
  T operator()(T x, T y) const {
    if constexpr (std::is_same_v<T, int64_t>)
      return static_cast<int64_t>(static_cast<uint64_t>(x) - static_cast<uint64_t>(y));
    else
      return x - y;
  }
};
struct Times {
  template <class T>
  T operator()(T x, T y) const {
    if constexpr (std::is_same_v<T, int64_t>)
      return static_cast<int64_t>(static_cast<uint64_t>(x) * static_cast<uint64_t>(y));
    else
      return x * y;
  }
};

// The element types an elementwise loop is compiled for: the floating ones (most ops), those ag
// does arithmetic in (+ int64_t), or every dtype (comparisons). Only those are instantiated; the
// ops check their operands' dtypes before they get here.
enum class Over { floating, numbers, all };
template <Over over, class T>
inline constexpr bool kAdmits =
    std::is_floating_point_v<T> ||
    (over != Over::floating && std::is_same_v<T, int64_t>) || over == Over::all;

// Whether an elementwise function f, called with T, gives what ag stores: T itself, or bool (a
// comparison). A lambda written for one type (float) is compiled for the other too, where it
// would convert; that instantiation is never run and throws.
template <class T, class Out>
inline constexpr bool kStores = std::is_same_v<Out, T> || std::is_same_v<Out, bool>;

[[noreturn]] inline void unreachable_dtype(const char* op) {
  throw std::logic_error(
      std::string("ag: ") + op + ": an elementwise function got a dtype it does not take");
}

// out[i] = f(a[i], b[i]) over the broadcast shape of a and b (of one dtype: callers promote); a
// fresh contiguous tensor of a's dtype, or bool where f returns bool (comparisons).
template <Over over = Over::floating, class F>
Tensor map_binary(const Tensor& a, const Tensor& b, const char* op, F f) {
  detail::check_same_dtype(a, b, op);
  Shape shape = broadcast_shapes(a.shape(), b.shape(), op);
  return dispatch_all(a.dtype(), [&]<typename T>() {
    if constexpr (!kAdmits<over, T>) {
      unreachable_dtype(op);
      return Tensor();
    } else if constexpr (!kStores<T, decltype(f(T(), T()))>) {
      unreachable_dtype(op);
      return Tensor();
    } else {
      using Out = decltype(f(T(), T()));
      // (Valid shapes can broadcast to one too large to count, [2^32, 1] and [1, 2^32]: checked
      // here.)
      Tensor out = detail::empty(shape, dtype_of<Out>, op);
      Out* po = out.data<Out>();
      const T* pa = a.data<T>();
      const T* pb = b.data<T>();
      parallel_for_each_row<3>(shape,
          {out.strides(), broadcast_strides(a, shape), broadcast_strides(b, shape)},
          [&](const std::array<int64_t, 3>& off, int64_t n, const std::array<int64_t, 3>& st) {
            Out* o = po + off[0];
            const T* x = pa + off[1];
            const T* y = pb + off[2];
            // Fast paths the compiler vectorises: both contiguous, or one a scalar.
            if (st[0] == 1 && st[1] == 1 && st[2] == 1) {
              for (int64_t i = 0; i < n; ++i) o[i] = f(x[i], y[i]);
            } else if (st[0] == 1 && st[1] == 1 && st[2] == 0) {
              const T yv = *y;
              for (int64_t i = 0; i < n; ++i) o[i] = f(x[i], yv);
            } else if (st[0] == 1 && st[1] == 0 && st[2] == 1) {
              const T xv = *x;
              for (int64_t i = 0; i < n; ++i) o[i] = f(xv, y[i]);
            } else {
              for (int64_t i = 0; i < n; ++i) o[i * st[0]] = f(x[i * st[1]], y[i * st[2]]);
            }
          });
      return out;
    }
  });
}

// out[i] = f(x[i]); a fresh contiguous tensor of x's shape, of x's dtype or bool (as map_binary).
template <Over over = Over::floating, class F>
Tensor map_unary(const Tensor& x, F f) {
  return dispatch_all(x.dtype(), [&]<typename T>() {
    if constexpr (!kAdmits<over, T>) {
      unreachable_dtype("map_unary");
      return Tensor();
    } else if constexpr (!kStores<T, decltype(f(T()))>) {
      unreachable_dtype("map_unary");
      return Tensor();
    } else {
      using Out = decltype(f(T()));
      Tensor out = empty(x.shape(), dtype_of<Out>);
      Out* po = out.data<Out>();
      const T* px = x.data<T>();
      parallel_for_each_row<2>(x.shape(), {out.strides(), x.strides()},
          [&](const std::array<int64_t, 2>& off, int64_t n, const std::array<int64_t, 2>& st) {
            Out* o = po + off[0];
            const T* in = px + off[1];
            if (st[0] == 1 && st[1] == 1) {
              for (int64_t i = 0; i < n; ++i) o[i] = f(in[i]);
            } else if (st[0] == 1 && st[1] == 0) {  // one value along the row (an expanded x)
              detail::fill_row(o, n, f(*in));
            } else {
              for (int64_t i = 0; i < n; ++i) o[i * st[0]] = f(in[i * st[1]]);
            }
          });
      return out;
    }
  });
}

// The transcendental activations and their backward passes run on vector_math.h's array
// functions (SLEEF's vector exp, log, tanh and erfc); `pick` chooses one from the table of the
// tensor's element type, e.g. [](const auto& f) { return f.gelu; }.
//
// y = f(x): a fresh contiguous tensor of x's shape and dtype (float32 or float64).
template <class Pick>
Tensor map_unary_vectorised(const Tensor& x, Pick pick) {
  return dispatch(x.dtype(), [&]<typename T>() {
    const auto function = pick(detail::vec::functions(T()));
    Tensor out = empty(x.shape(), x.dtype());
    T* po = out.data<T>();
    const T* px = x.data<T>();
    parallel_for_each_row<2>(x.shape(), {out.strides(), x.strides()},
        [&](const std::array<int64_t, 2>& off, int64_t n, const std::array<int64_t, 2>& st) {
          if (st[0] == 1 && st[1] == 1) return function(px + off[1], po + off[0], n);
          // A strided row (a transposed or sliced x): through a buffer, a block at a time.
          constexpr int64_t kBlock = 256;
          T block[kBlock];
          for (int64_t start = 0; start < n; start += kBlock) {
            const int64_t m = std::min(kBlock, n - start);
            for (int64_t i = 0; i < m; ++i) block[i] = px[off[1] + (start + i) * st[1]];
            function(block, block, m);
            for (int64_t i = 0; i < m; ++i) po[off[0] + (start + i) * st[0]] = block[i];
          }
        });
    return out;
  });
}

// out = g · f′ for a backward function of vector_math.h, from the op's saved tensors (its input x,
// its output y, or both), which have the output's shape, as g (the gradient of its output) has; g
// may be a broadcast view (a sum's gradient is one, expanded). `pick` chooses the function from the
// table of the tensors' element type, e.g. [](const auto& f) { return f.gelu_backward; }.
template <class Pick, class... Saved>
Tensor map_backward_vectorised(const Tensor& g, const char* op, Pick pick, const Saved&... saved) {
  constexpr std::size_t K = sizeof...(Saved);
  const std::array<const Tensor*, K> s{&saved...};
  for (const Tensor* t : s) {
    detail::check_same_dtype(g, *t, op);
    if (g.shape() != t->shape())
      fail<ShapeError>(op, ": gradient of shape ", shape_str(g.shape()),
          " for a saved tensor of shape ", shape_str(t->shape()));
  }
  return dispatch(g.dtype(), [&]<typename T>() {
    const auto function = pick(detail::vec::functions(T()));
    Tensor out = empty(g.shape(), g.dtype());
    T* po = out.data<T>();
    const T* pg = g.data<T>();
    std::array<const T*, K> ps;
    std::array<Shape, K + 2> strides{out.strides(), g.strides()};
    for (std::size_t k = 0; k < K; ++k) {
      ps[k] = s[k]->template data<T>();
      strides[k + 2] = s[k]->strides();
    }
    // function(g, saved…, out, n) on rows of n elements
    auto call = [&](const T* row_g, const std::array<const T*, K>& row_s, T* row_out, int64_t n) {
      std::apply([&](const auto*... each) { function(row_g, each..., row_out, n); }, row_s);
    };
    parallel_for_each_row<K + 2>(g.shape(), strides,
        [&](const std::array<int64_t, K + 2>& off, int64_t n,
            const std::array<int64_t, K + 2>& st) {
          std::array<const T*, K> row_s;
          bool saved_contiguous = true;
          for (std::size_t k = 0; k < K; ++k) {
            row_s[k] = ps[k] + off[k + 2];
            saved_contiguous = saved_contiguous && st[k + 2] == 1;
          }
          if (st[0] == 1 && st[1] == 1 && saved_contiguous)
            return call(pg + off[1], row_s, po + off[0], n);
          constexpr int64_t kBlock = 256;
          T block_g[kBlock];
          if (st[0] == 1 && st[1] == 0 && saved_contiguous) {  // one gradient for the whole row
            std::fill_n(block_g, kBlock, pg[off[1]]);          // (a sum's: 1 everywhere)
            for (int64_t start = 0; start < n; start += kBlock) {
              std::array<const T*, K> block_s;
              for (std::size_t k = 0; k < K; ++k) block_s[k] = row_s[k] + start;
              call(block_g, block_s, po + off[0] + start, std::min(kBlock, n - start));
            }
            return;
          }
          // Strided rows: through buffers, a block at a time.
          T block_saved[K][kBlock];
          std::array<const T*, K> block_s;
          for (std::size_t k = 0; k < K; ++k) block_s[k] = block_saved[k];
          for (int64_t start = 0; start < n; start += kBlock) {
            const int64_t m = std::min(kBlock, n - start);
            for (int64_t i = 0; i < m; ++i) {
              block_g[i] = pg[off[1] + (start + i) * st[1]];
              for (std::size_t k = 0; k < K; ++k)
                block_saved[k][i] = row_s[k][(start + i) * st[k + 2]];
            }
            call(block_g, block_s, block_g, m);
            for (int64_t i = 0; i < m; ++i) po[off[0] + (start + i) * st[0]] = block_g[i];
          }
        });
    return out;
  });
}

// The dtype in which `op` computes on a and b (promote_types), with bool ⊕ bool refused as the
// arithmetic it is not; at least float32 where `floating` (true division).
DType arithmetic_dtype(const Tensor& a, const Tensor& b, const char* op, bool floating = false) {
  const DType dtype = promote_types(a.dtype(), b.dtype(), op);
  if (floating && !is_floating_point(dtype)) return float32;
  if (dtype == bool_)
    fail<DTypeError>(op, ": no arithmetic on two bool tensors (shapes ", shape_str(a.shape()),
        " and ", shape_str(b.shape()), "); convert them first (to(ag::int64))");
  return dtype;
}

}  // namespace

// ---- binary arithmetic --------------------------------------------------------------------------
//
// Mixed dtypes promote as PyTorch's (autograd/dtype.h, promote_types): int64 + float32 is float32,
// bool · float32 is float32 (a mask), int64 + bool is int64; int64 / int64 is a true division, in
// float32. The operand converted carries no gradient (only floating tensors do).

Tensor add(const Tensor& a_given, const Tensor& b_given) {
  AG_PROFILE_OP(Op::add);
  const DType dtype = arithmetic_dtype(a_given, b_given, "add");
  const Tensor a = detail::promoted(a_given, dtype), b = detail::promoted(b_given, dtype);
  Tensor out = map_binary<Over::numbers>(a, b, "add", Plus());
  // docs/ops.md, add: ga = sum_to(g), gb = sum_to(g)
  return detail::record(Op::add, out, {a, b},
      [sa = a.shape(), sb = b.shape()](const Tensor& g, const NeedsGrad& needs) -> Grads {
        // d(a + b)/da = d(a + b)/db = 1
        return {needs[0] ? sum_to(g, sa) : Tensor(), needs[1] ? sum_to(g, sb) : Tensor()};
      });
}

Tensor sub(const Tensor& a_given, const Tensor& b_given) {
  AG_PROFILE_OP(Op::sub);
  const DType dtype = arithmetic_dtype(a_given, b_given, "sub");
  const Tensor a = detail::promoted(a_given, dtype), b = detail::promoted(b_given, dtype);
  Tensor out = map_binary<Over::numbers>(a, b, "sub", Minus());
  // docs/ops.md, sub: ga = sum_to(g), gb = sum_to(−g)
  return detail::record(Op::sub, out, {a, b},
      [sa = a.shape(), sb = b.shape()](const Tensor& g, const NeedsGrad& needs) -> Grads {
        // d(a − b)/da = 1, d(a − b)/db = −1
        return {needs[0] ? sum_to(g, sa) : Tensor(), needs[1] ? sum_to(neg(g), sb) : Tensor()};
      });
}

Tensor mul(const Tensor& a_given, const Tensor& b_given) {
  AG_PROFILE_OP(Op::mul);
  const DType dtype = arithmetic_dtype(a_given, b_given, "mul");
  const Tensor a = detail::promoted(a_given, dtype), b = detail::promoted(b_given, dtype);
  Tensor out = map_binary<Over::numbers>(a, b, "mul", Times());
  if (!detail::any_requires_grad({a, b})) return out;
  // docs/ops.md, mul: ga = sum_to(g · b), gb = sum_to(g · a)
  return detail::record(Op::mul, out, {a, b}, /*saved=*/{a, b},
      [a, b](const Tensor& g, const NeedsGrad& needs) -> Grads {
        // d(a · b)/da = b, d(a · b)/db = a
        return {needs[0] ? sum_to(mul(g, b), a.shape()) : Tensor(),
            needs[1] ? sum_to(mul(g, a), b.shape()) : Tensor()};
      });
}

Tensor div(const Tensor& a_given, const Tensor& b_given) {
  AG_PROFILE_OP(Op::div);
  const DType dtype = arithmetic_dtype(a_given, b_given, "div", /*floating=*/true);
  const Tensor a = detail::promoted(a_given, dtype), b = detail::promoted(b_given, dtype);
  Tensor out = map_binary(a, b, "div", [](auto x, auto y) { return x / y; });
  if (!detail::any_requires_grad({a, b})) return out;
  // docs/ops.md, div: ga = sum_to(g / b), gb = sum_to(−g · a / b²)
  return detail::record(Op::div, out, {a, b}, /*saved=*/{a, b},
      [a, b](const Tensor& g, const NeedsGrad& needs) -> Grads {
        // d(a / b)/da = 1 / b, d(a / b)/db = −a / b²
        return {needs[0] ? sum_to(div(g, b), a.shape()) : Tensor(),
            needs[1] ? sum_to(neg(div(mul(g, a), mul(b, b))), b.shape()) : Tensor()};
      });
}

// ---- tensor–scalar forms ------------------------------------------------------------------------
//
// A double scalar is a floating one: an int64 or bool tensor becomes float32 first (x * 0.5), as
// with a Python float in PyTorch. An integer scalar (the templates in ops.h: x + 1, positions * 2)
// keeps an int64 tensor int64, as a Python int does.

namespace {
// The float32 tensor an int64 or bool operand of a floating scalar op becomes; x itself otherwise.
Tensor floating(const Tensor& x) {
  return is_floating_point(x.dtype()) ? x : detail::promoted(x, float32);
}
}  // namespace

Tensor add(const Tensor& a_given, double s) {
  AG_PROFILE_OP(Op::add_scalar);
  const Tensor a = floating(a_given);
  Tensor out = dispatch(a.dtype(),
      [&]<typename T>() { return map_unary(a, [v = static_cast<T>(s)](T x) { return x + v; }); });
  // d(x + s)/dx = 1
  // docs/ops.md, add_scalar: g
  return detail::record(
      Op::add_scalar, out, {a}, [](const Tensor& g, const NeedsGrad&) -> Grads { return {g}; });
}

Tensor sub(const Tensor& a, double s) { return add(a, -s); }  // x − s = x + (−s), exactly

// s − x = (−x) + s, exactly; an int64 or bool x becomes float32 first (1.0 - mask)
Tensor sub(double s, const Tensor& b) { return add(neg(floating(b)), s); }

Tensor mul(const Tensor& a_given, double s) {
  AG_PROFILE_OP(Op::mul_scalar);
  const Tensor a = floating(a_given);
  Tensor out = dispatch(a.dtype(),
      [&]<typename T>() { return map_unary(a, [v = static_cast<T>(s)](T x) { return x * v; }); });
  // d(x · s)/dx = s
  // docs/ops.md, mul_scalar: g · s
  return detail::record(Op::mul_scalar, out, {a},
      [s](const Tensor& g, const NeedsGrad&) -> Grads { return {mul(g, s)}; });
}

Tensor div(const Tensor& a_given, double s) {
  AG_PROFILE_OP(Op::div_scalar);
  const Tensor a = floating(a_given);
  Tensor out = dispatch(a.dtype(),
      [&]<typename T>() { return map_unary(a, [v = static_cast<T>(s)](T x) { return x / v; }); });
  // d(x / s)/dx = 1 / s
  // docs/ops.md, div_scalar: g / s
  return detail::record(Op::div_scalar, out, {a},
      [s](const Tensor& g, const NeedsGrad&) -> Grads { return {div(g, s)}; });
}

Tensor div(double s, const Tensor& b_given) {
  AG_PROFILE_OP(Op::rdiv_scalar);
  const Tensor b = floating(b_given);
  Tensor out = dispatch(b.dtype(),
      [&]<typename T>() { return map_unary(b, [v = static_cast<T>(s)](T x) { return v / x; }); });
  if (!detail::any_requires_grad({b})) return out;
  // docs/ops.md, rdiv_scalar: −g · s / x²
  return detail::record(
      Op::rdiv_scalar, out, {b}, /*saved=*/{b}, [s, b](const Tensor& g, const NeedsGrad&) -> Grads {
        // d(s / x)/dx = −s / x²
        return {div(mul(g, -s), mul(b, b))};
      });
}

namespace detail {
Tensor integer_scalar_op(const Tensor& x, int64_t s, IntegerScalarOp op) {
  if (is_floating_point(x.dtype())) {
    const auto v = static_cast<double>(s);
    switch (op) {
      case IntegerScalarOp::add:
        return add(x, v);
      case IntegerScalarOp::sub:
        return sub(x, v);
      case IntegerScalarOp::rsub:
        return sub(v, x);
      default:
        return mul(x, v);
    }
  }
  // int64 (a bool tensor becomes int64 first, as PyTorch's mask + 1): wrapping integer arithmetic
  const Tensor n = promoted(x, int64);
  switch (op) {
    case IntegerScalarOp::add:
      return map_unary<Over::numbers>(n, [s](int64_t v) { return Plus()(v, s); });
    case IntegerScalarOp::sub:
      return map_unary<Over::numbers>(n, [s](int64_t v) { return Minus()(v, s); });
    case IntegerScalarOp::rsub:
      return map_unary<Over::numbers>(n, [s](int64_t v) { return Minus()(s, v); });
    default:
      return map_unary<Over::numbers>(n, [s](int64_t v) { return Times()(v, s); });
  }
}
}  // namespace detail

Tensor neg(const Tensor& x) {
  AG_PROFILE_OP(Op::neg);
  if (x.dtype() == bool_)
    fail<DTypeError>("neg: a bool tensor of shape ", shape_str(x.shape()),
        " has no negation (PyTorch's neither); use logical not, eq(x, 0), or to(ag::int64) first");
  Tensor out = map_unary<Over::numbers>(x, [](auto v) {
    if constexpr (std::is_same_v<decltype(v), int64_t>)
      return Minus()(int64_t{0}, v);
    else
      return -v;
  });
  // d(−x)/dx = −1
  // docs/ops.md, neg: −g
  return detail::record(
      Op::neg, out, {x}, [](const Tensor& g, const NeedsGrad&) -> Grads { return {neg(g)}; });
}

// ---- unary math ---------------------------------------------------------------------------------

namespace {
// xᵖ, with PyTorch's special cases: the powers a user writes most (x², x³, √x, 1/x, 1/x², 1/√x)
// as products, quotients and roots, which cost a fraction of std::pow's, and the rest by std::pow
// in double.
Tensor pow_values(const Tensor& x, double p) {
  if (p == 1) return map_unary(x, [](auto v) { return v; });
  if (p == 2) return map_unary(x, [](auto v) { return v * v; });  // (exactly std::pow's result)
  if (p == 3) return map_unary(x, [](auto v) { return v * v * v; });
  if (p == -1) return map_unary(x, [](auto v) { return decltype(v)(1) / v; });
  if (p == -2) return map_unary(x, [](auto v) { return decltype(v)(1) / (v * v); });
  if (p == 0.5) return map_unary_vectorised(x, [](const auto& f) { return f.sqrt; });
  if (p == -0.5) return map_unary_vectorised(x, [](const auto& f) { return f.rsqrt; });
  return dispatch(x.dtype(), [&]<typename T>() {
    return map_unary(x, [p](T v) { return static_cast<T>(std::pow(double(v), p)); });
  });
}
}  // namespace

Tensor pow(const Tensor& x, double p) {
  AG_PROFILE_OP(Op::pow);
  detail::check_floating(x, "pow");
  Tensor out = pow_values(x, p);
  if (!detail::any_requires_grad({x})) return out;
  // docs/ops.md, pow: g · p · xᵖ⁻¹ (0 for p = 0)
  return detail::record(
      Op::pow, out, {x}, /*saved=*/{x}, [x, p](const Tensor& g, const NeedsGrad&) -> Grads {
        // d(x^p)/dx = p · x^(p−1)   (0 for p = 0, where x^0 is the constant 1)
        if (p == 0) return {zeros_like(g)};
        if (p == 2)  // g · 2x, in one pass
          return {
              map_binary(g, x, "pow_backward", [](auto gv, auto xv) { return gv * (xv + xv); })};
        return {mul(g, mul(pow(x, p - 1), p))};
      });
}

Tensor exp(const Tensor& x) {
  AG_PROFILE_OP(Op::exp);
  detail::check_floating(x, "exp");
  Tensor out = map_unary_vectorised(x, [](const auto& f) { return f.exp; });
  if (!detail::any_requires_grad({x})) return out;
  // docs/ops.md, exp: g · y
  return detail::record(Op::exp, out, {x}, /*saved=*/{out},
      [y = out.detach()](const Tensor& g, const NeedsGrad&) -> Grads {
        // d(eˣ)/dx = eˣ = y: reuse the output
        return {map_backward_vectorised(
            g, "exp_backward", [](const auto& f) { return f.exp_backward; }, y)};
      });
}

Tensor log(const Tensor& x) {
  AG_PROFILE_OP(Op::log);
  detail::check_floating(x, "log");
  Tensor out = map_unary_vectorised(x, [](const auto& f) { return f.log; });
  if (!detail::any_requires_grad({x})) return out;
  // docs/ops.md, log: g / x
  return detail::record(
      Op::log, out, {x}, /*saved=*/{x}, [x](const Tensor& g, const NeedsGrad&) -> Grads {
        // d(ln x)/dx = 1 / x
        return {div(g, x)};
      });
}

Tensor sqrt(const Tensor& x) {
  AG_PROFILE_OP(Op::sqrt);
  detail::check_floating(x, "sqrt");
  Tensor out = map_unary_vectorised(x, [](const auto& f) { return f.sqrt; });
  if (!detail::any_requires_grad({x})) return out;
  // docs/ops.md, sqrt: g / (2y)
  return detail::record(Op::sqrt, out, {x}, /*saved=*/{out},
      [y = out.detach()](const Tensor& g, const NeedsGrad&) -> Grads {
        // d(√x)/dx = 1 / (2√x) = 1 / (2y)
        return {map_backward_vectorised(
            g, "sqrt_backward", [](const auto& f) { return f.sqrt_backward; }, y)};
      });
}

Tensor tanh(const Tensor& x) {
  AG_PROFILE_OP(Op::tanh);
  detail::check_floating(x, "tanh");
  Tensor out = map_unary_vectorised(x, [](const auto& f) { return f.tanh; });
  if (!detail::any_requires_grad({x})) return out;
  // docs/ops.md, tanh: g · (1 − y²)
  return detail::record(Op::tanh, out, {x}, /*saved=*/{out},
      [y = out.detach()](const Tensor& g, const NeedsGrad&) -> Grads {
        // d(tanh x)/dx = 1 − tanh²x = 1 − y²
        return {map_backward_vectorised(
            g, "tanh_backward", [](const auto& f) { return f.tanh_backward; }, y)};
      });
}

Tensor sigmoid(const Tensor& x) {
  AG_PROFILE_OP(Op::sigmoid);
  detail::check_floating(x, "sigmoid");
  // σ(x) = 1 / (1 + e⁻ˣ): e⁻ˣ overflows to +inf for x < −88 (float32), and σ is then 0
  Tensor out = map_unary_vectorised(x, [](const auto& f) { return f.sigmoid; });
  if (!detail::any_requires_grad({x})) return out;
  // docs/ops.md, sigmoid: g · y · (1 − y)
  return detail::record(Op::sigmoid, out, {x}, /*saved=*/{out},
      [y = out.detach()](const Tensor& g, const NeedsGrad&) -> Grads {
        // dσ/dx = σ(x) · (1 − σ(x)) = y · (1 − y)
        return {map_backward_vectorised(
            g, "sigmoid_backward", [](const auto& f) { return f.sigmoid_backward; }, y)};
      });
}

Tensor relu(const Tensor& x) {
  AG_PROFILE_OP(Op::relu);
  detail::check_floating(x, "relu");
  // NaN stays NaN, as in PyTorch: only what is known to be ≤ 0 becomes 0.
  Tensor out = map_unary_vectorised(x, [](const auto& f) { return f.relu; });
  if (!detail::any_requires_grad({x})) return out;
  // docs/ops.md, relu: g · [x > 0]
  return detail::record(
      Op::relu, out, {x}, /*saved=*/{x}, [x](const Tensor& g, const NeedsGrad&) -> Grads {
        // d relu(x)/dx = 1 where x > 0, else 0 (0 at the kink, as PyTorch)
        return {map_backward_vectorised(
            g, "relu_backward", [](const auto& f) { return f.relu_backward; }, x)};
      });
}

Tensor gelu(const Tensor& x) {
  AG_PROFILE_OP(Op::gelu);
  detail::check_floating(x, "gelu");
  // x Φ(x), with Φ(x) = ½ erfc(−x/√2): PyTorch's ½ (1 + erf(x/√2)) cancels for x < −3 in float32
  Tensor out = map_unary_vectorised(x, [](const auto& f) { return f.gelu; });
  if (!detail::any_requires_grad({x})) return out;
  // docs/ops.md, gelu: g · (Φ(x) + x · φ(x))
  return detail::record(Op::gelu, out, {x}, /*saved=*/{x, out},
      [x, y = out.detach()](const Tensor& g, const NeedsGrad&) -> Grads {
        // d(x · Φ(x))/dx = Φ(x) + x · φ(x),  φ(x) = e^(−x²/2) / √(2π),  Φ(x) = y / x
        return {map_backward_vectorised(
            g, "gelu_backward", [](const auto& f) { return f.gelu_backward; }, x, y)};
      });
}

// GELU's tanh approximation (Hendrycks & Gimpel; GPT-2's and nanoGPT's `new_gelu`):
//   y = ½ x (1 + tanh u),  u = √(2/π) (x + 0.044715 x³)
// computed as x σ(2u), the same number (1 + tanh u = 2σ(2u)) without 1 + tanh u's cancellation.
Tensor gelu(const Tensor& x, const std::string& approximate) {
  detail::check_floating(x, "gelu");
  if (approximate == "none") return gelu(x);
  if (approximate != "tanh")
    fail<ValueError>("gelu: approximate '", approximate, "' is not 'none' or 'tanh'");
  AG_PROFILE_OP(Op::gelu_tanh);
  Tensor out = map_unary_vectorised(x, [](const auto& f) { return f.gelu_tanh; });
  if (!detail::any_requires_grad({x})) return out;
  // docs/ops.md, gelu_tanh: g · (½ (1 + t) + ½ x (1 − t²) · √(2/π) (1 + 3 · 0.044715 x²)), t = tanh u
  return detail::record(
      Op::gelu_tanh, out, {x}, /*saved=*/{x}, [x](const Tensor& g, const NeedsGrad&) -> Grads {
        // dy/dx = ½ (1 + t) + ½ x · (1 − t²) · du/dx,  du/dx = √(2/π) (1 + 3c x²)
        //       = σ + 2 x σ (1 − σ) · du/dx,  σ = σ(2u) = ½ (1 + t)
        return {map_backward_vectorised(
            g, "gelu_tanh_backward", [](const auto& f) { return f.gelu_tanh_backward; }, x)};
      });
}

Tensor silu(const Tensor& x) {
  AG_PROFILE_OP(Op::silu);
  detail::check_floating(x, "silu");
  Tensor out = map_unary_vectorised(x, [](const auto& f) { return f.silu; });
  if (!detail::any_requires_grad({x})) return out;
  // docs/ops.md, silu: g · σ(x) · (1 + x · (1 − σ(x)))
  return detail::record(
      Op::silu, out, {x}, /*saved=*/{x}, [x](const Tensor& g, const NeedsGrad&) -> Grads {
        // d(x σ(x))/dx = σ(x) + x σ(x)(1 − σ(x))
        return {map_backward_vectorised(
            g, "silu_backward", [](const auto& f) { return f.silu_backward; }, x)};
      });
}

Tensor erf(const Tensor& x) {
  AG_PROFILE_OP(Op::erf);
  detail::check_floating(x, "erf");
  Tensor out = map_unary_vectorised(x, [](const auto& f) { return f.erf; });
  if (!detail::any_requires_grad({x})) return out;
  // docs/ops.md, erf: g · 2/√π · e^(−x²)
  return detail::record(
      Op::erf, out, {x}, /*saved=*/{x}, [x](const Tensor& g, const NeedsGrad&) -> Grads {
        return {map_backward_vectorised(
            g, "erf_backward", [](const auto& f) { return f.erf_backward; }, x)};
      });
}

Tensor abs(const Tensor& x) {
  AG_PROFILE_OP(Op::abs);
  detail::check_floating(x, "abs");
  Tensor out = map_unary(x, [](auto v) { return std::abs(v); });
  if (!detail::any_requires_grad({x})) return out;
  // docs/ops.md, abs: g · sign(x) (0 at 0)
  return detail::record(
      Op::abs, out, {x}, /*saved=*/{x}, [x](const Tensor& g, const NeedsGrad&) -> Grads {
        // d|x|/dx = sign(x); PyTorch takes 0 at the kink
        return {map_binary(g, x, "abs_backward", [](auto gv, auto xv) {
          using T = decltype(xv);
          return xv > 0 ? gv : xv < 0 ? -gv : T(0);
        })};
      });
}

Tensor sin(const Tensor& x) {
  AG_PROFILE_OP(Op::sin);
  detail::check_floating(x, "sin");
  Tensor out = map_unary_vectorised(x, [](const auto& f) { return f.sin; });
  if (!detail::any_requires_grad({x})) return out;
  // docs/ops.md, sin: g · cos x
  return detail::record(
      Op::sin, out, {x}, /*saved=*/{x}, [x](const Tensor& g, const NeedsGrad&) -> Grads {
        return {map_backward_vectorised(
            g, "sin_backward", [](const auto& f) { return f.sin_backward; }, x)};
      });
}

Tensor cos(const Tensor& x) {
  AG_PROFILE_OP(Op::cos);
  detail::check_floating(x, "cos");
  Tensor out = map_unary_vectorised(x, [](const auto& f) { return f.cos; });
  if (!detail::any_requires_grad({x})) return out;
  // docs/ops.md, cos: −g · sin x
  return detail::record(
      Op::cos, out, {x}, /*saved=*/{x}, [x](const Tensor& g, const NeedsGrad&) -> Grads {
        return {map_backward_vectorised(
            g, "cos_backward", [](const auto& f) { return f.cos_backward; }, x)};
      });
}

Tensor rsqrt(const Tensor& x) {
  AG_PROFILE_OP(Op::rsqrt);
  detail::check_floating(x, "rsqrt");
  Tensor out = map_unary_vectorised(x, [](const auto& f) { return f.rsqrt; });
  if (!detail::any_requires_grad({x})) return out;
  // docs/ops.md, rsqrt: −g · y³ / 2
  return detail::record(Op::rsqrt, out, {x}, /*saved=*/{out},
      [y = out.detach()](const Tensor& g, const NeedsGrad&) -> Grads {
        // d(x^(−1/2))/dx = −½ x^(−3/2) = −½ y³
        return {map_binary(
            g, y, "rsqrt_backward", [](auto gv, auto yv) { return -gv * yv * yv * yv / 2; })};
      });
}

namespace {
// maximum and minimum share their backward: the gradient goes to the larger (smaller) input, and
// is split in halves at a tie, as PyTorch's.
Grads pick_backward(
    const Tensor& g, const Tensor& a, const Tensor& b, bool larger, const NeedsGrad& needs) {
  // share of a: 1 where a wins, ½ at a tie, 0 where b wins; b takes the rest
  // (As sums of 0/1 flags rather than a chain of ?:, so that the loop has no branch to mispredict
  // and vectorises.)
  const Tensor share_a = larger ? map_binary(a, b, "pick_backward",
                                      [](auto x, auto y) {
                                        using T = decltype(x);
                                        return T(x > y) + T(0.5) * T(x == y);
                                      })
                                : map_binary(a, b, "pick_backward", [](auto x, auto y) {
                                    using T = decltype(x);
                                    return T(x < y) + T(0.5) * T(x == y);
                                  });
  return {needs[0] ? sum_to(mul(g, share_a), a.shape()) : Tensor(),
      needs[1] ? sum_to(mul(g, 1.0 - share_a), b.shape()) : Tensor()};
}
}  // namespace

Tensor maximum(const Tensor& a, const Tensor& b) {
  AG_PROFILE_OP(Op::maximum);
  detail::check_floating(a, "maximum");
  detail::check_floating(b, "maximum");
  // A NaN in either input wins, as in PyTorch. (| rather than ||: no branch, a select that
  // vectorises.)
  Tensor out =
      map_binary(a, b, "maximum", [](auto x, auto y) { return ((x != x) | (x > y)) ? x : y; });
  if (!detail::any_requires_grad({a, b})) return out;
  // docs/ops.md, maximum: ga = sum_to(g · [a > b] + g/2 · [a = b]), gb the rest
  return detail::record(Op::maximum, out, {a, b}, /*saved=*/{a, b},
      [a, b](const Tensor& g, const NeedsGrad& needs) -> Grads {
        return pick_backward(g, a, b, /*larger=*/true, needs);
      });
}

Tensor minimum(const Tensor& a, const Tensor& b) {
  AG_PROFILE_OP(Op::minimum);
  detail::check_floating(a, "minimum");
  detail::check_floating(b, "minimum");
  Tensor out =
      map_binary(a, b, "minimum", [](auto x, auto y) { return ((x != x) | (x < y)) ? x : y; });
  if (!detail::any_requires_grad({a, b})) return out;
  // docs/ops.md, minimum: ga = sum_to(g · [a < b] + g/2 · [a = b]), gb the rest
  return detail::record(Op::minimum, out, {a, b}, /*saved=*/{a, b},
      [a, b](const Tensor& g, const NeedsGrad& needs) -> Grads {
        return pick_backward(g, a, b, /*larger=*/false, needs);
      });
}

Tensor clamp(const Tensor& x, std::optional<double> min, std::optional<double> max) {
  AG_PROFILE_OP(Op::clamp);
  detail::check_floating(x, "clamp");
  if (!min && !max) fail<ValueError>("clamp: at least one of min and max must be given");
  if ((min && std::isnan(*min)) || (max && std::isnan(*max)))
    fail<ValueError>("clamp: a bound is NaN (min ", min.value_or(-INFINITY), ", max ",
        max.value_or(INFINITY), ")");
  if (min && max && !(*min <= *max)) fail<ValueError>("clamp: min ", *min, " is above max ", *max);
  const double lo = min.value_or(-INFINITY), hi = max.value_or(INFINITY);
  Tensor out = dispatch(x.dtype(), [&]<typename T>() {
    // NaN stays NaN, as in PyTorch: both comparisons are false for it. (Two selects, no branch.)
    return map_unary(x, [l = T(lo), h = T(hi)](T v) {
      const T above_min = v < l ? l : v;
      return above_min > h ? h : above_min;
    });
  });
  if (!detail::any_requires_grad({x})) return out;
  // docs/ops.md, clamp: g · [min ≤ x ≤ max]
  return detail::record(
      Op::clamp, out, {x}, /*saved=*/{x}, [x, lo, hi](const Tensor& g, const NeedsGrad&) -> Grads {
        return {dispatch(x.dtype(), [&]<typename T>() {
          return map_binary(g, x, "clamp_backward",
              [l = T(lo), h = T(hi)](T gv, T xv) { return ((xv >= l) & (xv <= h)) ? gv : T(0); });
        })};
      });
}

// ---- comparisons ------------------------------------------------------------------------------

// Both operands in their promoted dtype (int64 == float32 compares as float32, bool == int64 as
// int64); a bool result. A scalar compares in the tensor's floating dtype, or in double for an
// int64 or bool tensor (x.eq(3) on token ids is exact for every id below 2^53).
#define AG_COMPARISON(name, expr)                                                            \
  Tensor name(const Tensor& a_given, const Tensor& b_given) {                                \
    const DType dtype = promote_types(a_given.dtype(), b_given.dtype(), #name);              \
    const Tensor a = detail::promoted(a_given, dtype), b = detail::promoted(b_given, dtype); \
    return map_binary<Over::all>(a, b, #name, [](auto x, auto y) -> bool { return expr; });  \
  }                                                                                          \
  Tensor name(const Tensor& a, double s) {                                                   \
    if (a.dtype() == float32)                                                                \
      return map_unary(a, [y = static_cast<float>(s)](float x) -> bool { return expr; });    \
    return dispatch_all(a.dtype(), [&]<typename T>() {                                       \
      return map_unary<Over::all>(a, [y = s](T v) -> bool {                                  \
        const auto x = static_cast<double>(v);                                               \
        return expr;                                                                         \
      });                                                                                    \
    });                                                                                      \
  }
AG_COMPARISON(eq, x == y)
AG_COMPARISON(ne, x != y)
AG_COMPARISON(lt, x < y)
AG_COMPARISON(le, x <= y)
AG_COMPARISON(gt, x > y)
AG_COMPARISON(ge, x >= y)
#undef AG_COMPARISON

// ---- where / masked_fill ----------------------------------------------------------------------

Tensor where(const Tensor& condition, const Tensor& a_given, const Tensor& b_given) {
  AG_PROFILE_OP(Op::where);
  const DType dtype = promote_types(a_given.dtype(), b_given.dtype(), "where");
  const Tensor a = detail::promoted(a_given, dtype), b = detail::promoted(b_given, dtype);
  Shape shape =
      broadcast_shapes(broadcast_shapes(condition.shape(), a.shape(), "where"), b.shape(), "where");
  Tensor out = detail::empty(shape, a.dtype(), "where");
  dispatch_all(condition.dtype(), [&]<typename C>() {
    dispatch_all(a.dtype(), [&]<typename T>() {
      T* po = out.data<T>();
      const C* pc = condition.data<C>();
      const T* pa = a.data<T>();
      const T* pb = b.data<T>();
      // Every element is read from a and b and one is kept: a select, no branch (a random condition
      // would mispredict every other one), which the compiler vectorises where the rows are
      // contiguous or one value (a scalar, as masked_fill's and the backward's zeros).
      auto select_rows = [&]<bool kAContiguous, bool kBContiguous>(
                             T* o, const C* c, const T* x, const T* y, int64_t n) {
        // The select by bit masks: a plain ?: compiles to a branch here.
        using Bits = std::conditional_t<sizeof(T) == 8, uint64_t,
            std::conditional_t<sizeof(T) == 4, uint32_t, uint8_t>>;
        static_assert(sizeof(Bits) == sizeof(T));
        for (int64_t i = 0; i < n; ++i) {
          const Bits from_a = std::bit_cast<Bits>(kAContiguous ? x[i] : *x);
          const Bits from_b = std::bit_cast<Bits>(kBContiguous ? y[i] : *y);
          const Bits mask = Bits(0) - static_cast<Bits>(c[i] != C(0));  // all ones where c holds
          o[i] = std::bit_cast<T>(static_cast<Bits>((from_a & mask) | (from_b & ~mask)));
        }
      };
      parallel_for_each_row<4>(shape,
          {out.strides(), broadcast_strides(condition, shape), broadcast_strides(a, shape),
              broadcast_strides(b, shape)},
          [&](const std::array<int64_t, 4>& off, int64_t n, const std::array<int64_t, 4>& st) {
            T* o = po + off[0];
            const C* c = pc + off[1];
            const T* x = pa + off[2];
            const T* y = pb + off[3];
            const bool dense = st[0] == 1 && st[1] == 1 && st[2] <= 1 && st[3] <= 1;
            if (dense && st[2] == 1 && st[3] == 1)
              select_rows.template operator()<true, true>(o, c, x, y, n);
            else if (dense && st[2] == 1)
              select_rows.template operator()<true, false>(o, c, x, y, n);
            else if (dense && st[3] == 1)
              select_rows.template operator()<false, true>(o, c, x, y, n);
            else if (dense)
              select_rows.template operator()<false, false>(o, c, x, y, n);
            else
              for (int64_t i = 0; i < n; ++i)
                o[i * st[0]] = c[i * st[1]] != C(0) ? x[i * st[2]] : y[i * st[3]];
          });
    });
  });
  if (!detail::any_requires_grad({a, b})) return out;
  // docs/ops.md, where: ga = sum_to(c ? g : 0), gb = sum_to(c ? 0 : g); c not differentiated
  return detail::record(Op::where, out, {a, b}, /*saved=*/{condition},
      [condition, sa = a.shape(), sb = b.shape()](
          const Tensor& g, const NeedsGrad& needs) -> Grads {
        // The gradient flows to a where the condition holds, to b elsewhere.
        Tensor zero = zeros({}, g.dtype());
        return {needs[0] ? sum_to(where(condition, g, zero), sa) : Tensor(),
            needs[1] ? sum_to(where(condition, zero, g), sb) : Tensor()};
      });
}

Tensor masked_fill(const Tensor& x, const Tensor& mask, double value) {
  AG_PROFILE_OP(Op::masked_fill);
  if (x.dtype() == int64 && !(value == std::trunc(value) && fits_int64(value)))
    fail<ValueError>("masked_fill: the value ", value, " does not fit the int64 tensor of shape ",
        shape_str(x.shape()), " (an integer in int64's range does)");
  if (broadcast_shapes(mask.shape(), x.shape(), "masked_fill") != x.shape())
    fail<ShapeError>("masked_fill: mask of shape ", shape_str(mask.shape()),
        " does not broadcast to the input's shape ", shape_str(x.shape()));
  Tensor out;
  {
    NoGradGuard no_grad;
    out = where(mask, full({}, value, x.dtype()), x);
  }
  if (!detail::any_requires_grad({x})) return out;
  // docs/ops.md, masked_fill: gx = m ? 0 : g; m not differentiated
  return detail::record(Op::masked_fill, out, {x}, /*saved=*/{mask},
      [mask](const Tensor& g, const NeedsGrad&) -> Grads {
        // Filled positions no longer depend on x: their gradient is 0.
        return {masked_fill(g, mask, 0.0)};
      });
}

// ---- operators ----------------------------------------------------------------------------------

Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
Tensor operator+(const Tensor& a, double b) { return add(a, b); }
Tensor operator+(double a, const Tensor& b) { return add(b, a); }
Tensor operator-(const Tensor& a, double b) { return sub(a, b); }
Tensor operator-(double a, const Tensor& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, double b) { return mul(a, b); }
Tensor operator*(double a, const Tensor& b) { return mul(b, a); }
Tensor operator/(const Tensor& a, double b) { return div(a, b); }
Tensor operator/(double a, const Tensor& b) { return div(a, b); }
Tensor operator-(const Tensor& x) { return neg(x); }

}  // namespace ag
