#include "nn/positions.h"

#include <cmath>
#include <limits>
#include <vector>

#include "autograd/parallel.h"
#include "nn/fused.h"

namespace ag::nn {

namespace {

int64_t checked_rotary_dim(int64_t dim, double base) {
  if (dim <= 0 || dim % 2 != 0)
    fail<ValueError>("RotaryEmbedding: dim ", dim,
        " must be positive and even (the features are turned in pairs)");
  if (!(base > 0) || !std::isfinite(base))
    fail<ValueError>("RotaryEmbedding: base ", base, " must be positive and finite");
  return dim;
}

// cos θ (sine false) or sin θ (sine true) of θ_{t,j} = t / base^(2j/dim) for the positions
// t = first … first + count − 1 and the pairs j < dim/2: (count, dim/2), computed in double and
// rounded once to `dtype`. The angle is d2l's sinusoid_table's expression (nn/attention.cpp), so
// for dim = d and base 10000 both tables hold the same numbers.
Tensor rotary_table(
    bool sine, int64_t first, int64_t count, int64_t dim, double base, DType dtype) {
  const int64_t half = dim / 2;
  Tensor table = empty({count, half}, float64);  // (count, dim/2); fails here if too large
  std::vector<double> frequency_divisor(static_cast<std::size_t>(half));  // base^(2j/dim)
  for (int64_t j = 0; j < half; ++j)
    frequency_divisor[static_cast<std::size_t>(j)] =
        std::pow(base, static_cast<double>(2 * j) / static_cast<double>(dim));
  double* p = table.data<double>();
  parallel_for(count, 32 * half, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t)
      for (int64_t j = 0; j < half; ++j) {
        const double angle =
            static_cast<double>(first + t) / frequency_divisor[static_cast<std::size_t>(j)];
        p[t * half + j] = sine ? std::sin(angle) : std::cos(angle);
      }
  });
  return table.to(dtype);
}

// The rotation of ag::rotary_embedding composed of ag's primitives (fused_kernels() off), the op's
// formula line by line: pair (a, b) of row t becomes (a cos θ − b sin θ, a sin θ + b cos θ).
// x (..., T, d); c and s (T, dim/2).
Tensor rotate_composed(
    const Tensor& x, const Tensor& c, const Tensor& s, int64_t dim, RotaryPairs pairs) {
  const int64_t d = x.size(-1), half = dim / 2;
  const Tensor turned = narrow(x, -1, 0, dim);  // (..., T, dim)
  Tensor a, b;                                  // (..., T, dim/2): the pairs' first, second
  if (pairs == RotaryPairs::interleaved) {
    Shape paired = turned.shape();
    paired.back() = half;
    paired.push_back(2);
    const Tensor pair_view = reshape(turned, paired);  // (..., T, dim/2, 2): (x[2j], x[2j+1])
    a = select(pair_view, -1, 0);
    b = select(pair_view, -1, 1);
  } else {
    a = narrow(turned, -1, 0, half);     // x[j]
    b = narrow(turned, -1, half, half);  // x[j + dim/2]
  }
  const Tensor a_turned = a * c - b * s;  // (..., T, dim/2); c and s broadcast over the batch
  const Tensor b_turned = a * s + b * c;  // (..., T, dim/2)
  const Tensor out = pairs == RotaryPairs::interleaved
                         ? reshape(stack({a_turned, b_turned}, -1), turned.shape())  // side by side
                         : concat({a_turned, b_turned}, -1);  // (..., T, dim)
  if (dim == d) return out;
  return concat({out, narrow(x, -1, dim, d - dim)}, -1);  // (..., T, d): the rest passed on
}

}  // namespace

RotaryEmbedding::RotaryEmbedding(int64_t rotated_dim, double theta_base, RotaryPairs pairing)
    : dim(checked_rotary_dim(rotated_dim, theta_base)),
      base(theta_base),
      pairs(pairing),
      // A cache, not state (Hugging Face's Llama keeps its tables out of its state dict too).
      cos_cached(rotary_table(false, 0, kInitialPositions, dim, base, float32)),
      sin_cached(rotary_table(true, 0, kInitialPositions, dim, base, float32)) {}

void RotaryEmbedding::recompute_buffers(DType dtype) {
  // Computed again rather than widened: float32 angles in a float64 model would limit its
  // positions to float32 accuracy.
  const int64_t positions = cos_cached.size(0);
  cos_cached.set_data(rotary_table(false, 0, positions, dim, base, dtype));
  sin_cached.set_data(rotary_table(true, 0, positions, dim, base, dtype));
}

void RotaryEmbedding::grow_to(int64_t positions) {
  int64_t rows = cos_cached.size(0);
  if (positions <= rows) return;
  while (rows < positions)
    rows =
        rows > std::numeric_limits<int64_t>::max() / 2 ? positions : std::max<int64_t>(2 * rows, 1);
  const DType dtype = cos_cached.dtype();
  // New tensors (not set_data: the shape changes); the old ones stay intact for whatever still
  // reads them (a backward that saved a view).
  cos_cached = rotary_table(false, 0, rows, dim, base, dtype);
  sin_cached = rotary_table(true, 0, rows, dim, base, dtype);
}

std::pair<Tensor, Tensor> RotaryEmbedding::angles(int64_t first_position, int64_t T, DType dtype) {
  if (first_position < 0)
    fail<ValueError>("RotaryEmbedding: first_position ", first_position, " is negative");
  if (T < 0) fail<ValueError>("RotaryEmbedding: the number of positions ", T, " is negative");
  if (first_position > std::numeric_limits<int64_t>::max() - T)
    fail<ValueError>("RotaryEmbedding: positions ", first_position, " + ", T, " overflow int64");
  if (!is_floating_point(dtype))
    fail<DTypeError>("RotaryEmbedding: angles in ", dtype_name(dtype),
        " asked for; cos θ and sin θ are float32 or float64");
  if (dtype != cos_cached.dtype())  // the rows asked for, from double
    return {rotary_table(false, first_position, T, dim, base, dtype),
        rotary_table(true, first_position, T, dim, base, dtype)};
  grow_to(first_position + T);
  return {cos_cached.narrow(0, first_position, T),  // (T, dim/2), a view of the table
      sin_cached.narrow(0, first_position, T)};     // (T, dim/2)
}

Tensor RotaryEmbedding::forward(const Tensor& x, int64_t first_position) {
  if (x.dim() < 2)
    fail<ShapeError>(
        "RotaryEmbedding: input of shape ", shape_str(x.shape()), " is not (..., T, d)");
  if (x.size(-1) < dim)
    fail<ShapeError>("RotaryEmbedding: input of shape ", shape_str(x.shape()),
        " has d = ", x.size(-1), " features, fewer than the dim = ", dim, " it turns");
  if (!is_floating_point(x.dtype()))
    fail<DTypeError>("RotaryEmbedding: input of dtype ", dtype_name(x.dtype()), " and shape ",
        shape_str(x.shape()), " is not floating point");
  const auto [c, s] = angles(first_position, x.size(-2), x.dtype());  // (T, dim/2) each
  if (fused_kernels()) return rotary_embedding(x, c, s, pairs);       // (..., T, d), one op
  return rotate_composed(x, c, s, dim, pairs);                        // (..., T, d)
}

std::string RotaryEmbedding::extra_repr() const {
  return "dim=" + std::to_string(dim) + ", base=" + python_float(base) + ", pairs='" +
         rotary_pairs_name(pairs) + "'";
}

std::string rotary_pairs_name(RotaryPairs pairs) {
  return pairs == RotaryPairs::interleaved ? "interleaved" : "halves";
}

RotaryPairs parse_rotary_pairs(const std::string& name, const std::string& what) {
  if (name == "interleaved") return RotaryPairs::interleaved;
  if (name == "halves") return RotaryPairs::halves;
  fail<ValueError>(what, ": '", name,
      "' is not a pairing of rotary position embedding (interleaved: Llama's, RoFormer's; "
      "halves: GPT-NeoX's rotate_half)");
}

}  // namespace ag::nn
