// Layer normalisation as one fused op, forward and backward together (llm.c's layernorm_forward /
// layernorm_backward, for any number of normalized trailing dims).
//
//   layer_norm(x, normalized_shape, w, b, eps)
//
// Each row of x — the last normalized_shape.size() dims flattened, N = numel(normalized_shape)
// elements — is normalised on its own:
//
//   μ    = Σ_i x_i / N                       mean of the row
//   σ²   = Σ_i (x_i − μ)² / N                biased variance (as torch.nn.functional.layer_norm)
//   rstd = 1 / sqrt(σ² + eps)
//   x̂_i  = (x_i − μ) · rstd
//   y_i  = x̂_i · w_i + b_i                   (w = 1, b = 0 when they are undefined: no affine)
//
// Gradients, with g = ∂L/∂y and ĝ_i = g_i · w_i = ∂L/∂x̂_i:
//
//   ∂μ/∂x_i = 1/N,  ∂rstd/∂x_i = −rstd³ (x_i − μ) / N = −rstd² x̂_i / N, so
//   ∂x̂_j/∂x_i = rstd · (δ_ij − 1/N − x̂_i x̂_j / N) and
//   dx_i = Σ_j ĝ_j ∂x̂_j/∂x_i = rstd · (ĝ_i − mean(ĝ) − x̂_i · mean(ĝ · x̂))   means over the row
//   dw_i = Σ_rows g_i · x̂_i
//   db_i = Σ_rows g_i
//
// The forward saves x, w (ones without a weight) and per row only μ and rstd (float64, shape =
// the leading dims); the backward rebuilds x̂ from them, so no (…, N) intermediate is kept. The
// composed path (nn::LayerNorm with fused_kernels() off) records 8 ops and keeps x − μ and x̂,
// two more full-size tensors, for its backward.
//
//   dropout_add_layer_norm(x, y, normalized_shape, w, b, eps, p)  =  layer_norm(x + dropout(y, p))
//
// d2l's AddNorm (the residual connection of every Transformer sublayer) as one op: the sum
// z = x + m ⊙ y is formed in one pass with the mask m that ag::dropout(y, p) would draw (the same
// Philox blocks, kept as bytes), then normalised as above. Its backward is layer norm's for dz,
// then dx = dz and dy = m ⊙ dz. It saves z (instead of dropout(y) and z in the composed path).
//
//   rms_norm(x, normalized_shape, w, eps)
//
// RMSNorm (Zhang & Sennrich 2019; Llama's normalisation, torch.nn.functional.rms_norm): the same
// rows, scaled by their root mean square instead of centred and scaled by their spread — no μ, no
// bias:
//
//   rstd = 1 / sqrt(Σ_i x_i² / N + eps)      1 / the root mean square of the row
//   x̂_i  = x_i · rstd
//   y_i  = x̂_i · w_i
//
// Its gradients are layer norm's with μ = 0 held fixed (no ∂μ/∂x term, so no − mean(ĝ)):
//
//   ∂rstd/∂x_i = −rstd³ x_i / N = −rstd² x̂_i / N, so
//   ∂x̂_j/∂x_i = rstd · (δ_ij − x̂_i x̂_j / N) and
//   dx_i = rstd · (ĝ_i − x̂_i · mean(ĝ · x̂))
//   dw_i = Σ_rows g_i · x̂_i
//
// It saves x, w and one rstd per row, and runs the very loops of layer norm below with μ = 0 (the
// loops skip μ where a row has none: (x − 0) is x exactly).
//
// Like every ag backward, this one runs with grad mode off and is not itself differentiable (ag has
// no double backward); it is plain loops over the rows, computing only the gradients asked for.
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <optional>
#include <type_traits>
#include <vector>

#include "autograd/allocator.h"
#include "autograd/autograd.h"
#include "autograd/detail/kernels.h"
#include "autograd/detail/target_clones.h"  // one copy of the row loops per instruction set
#include "autograd/ops.h"
#include "autograd/parallel.h"
#include "autograd/profiler.h"

namespace ag {

namespace {

// Throws unless x ends in normalized_shape and weight and bias (when defined) have exactly that
// shape and x's dtype.
// eps keeps 1 / sqrt(σ² + eps) finite for a constant row; a negative one would make it NaN there
// (or infinite), so it is refused, as PyTorch's layer_norm documents eps as a positive value.
void check_eps(double eps, const char* op) {
  if (!(eps >= 0)) fail<ValueError>(op, ": eps ", eps, " must not be negative (nor NaN)");
}

void check_layer_norm_args(const Tensor& x, const Shape& normalized_shape, const Tensor& weight,
    const Tensor& bias, const char* op) {
  if (normalized_shape.empty())
    fail<ValueError>(
        op, ": normalized_shape cannot be empty (input of shape ", shape_str(x.shape()), ")");
  const int64_t n = static_cast<int64_t>(normalized_shape.size());
  const bool fits = x.dim() >= n && Shape(x.shape().end() - n, x.shape().end()) == normalized_shape;
  if (!fits)
    fail<ShapeError>(op, ": input of shape ", shape_str(x.shape()),
        " does not end in normalized_shape ", shape_str(normalized_shape));
  for (const auto& [name, parameter] : {std::pair{"weight", &weight}, std::pair{"bias", &bias}}) {
    if (!parameter->defined()) continue;
    if (parameter->shape() != normalized_shape)
      fail<ShapeError>(op, ": ", name, " of shape ", shape_str(parameter->shape()),
          " does not match normalized_shape ", shape_str(normalized_shape), " (input of shape ",
          shape_str(x.shape()), ")");
    detail::check_same_dtype(x, *parameter, op);
  }
}

// Σ_i term(i) over a row of n elements, in double. Four partial sums instead of one running sum:
// each add then need not wait for the previous one to finish (the compiler may not reorder
// floating-point adds itself), which makes these reductions several times faster.
template <class Term>
[[gnu::always_inline]] inline double row_sum(int64_t n, Term&& term) {
  double partial[4] = {0.0, 0.0, 0.0, 0.0};
  int64_t i = 0;
  for (; i + 4 <= n; i += 4)
    for (int64_t k = 0; k < 4; ++k) partial[k] += term(i + k);
  for (; i < n; ++i) partial[0] += term(i);
  return (partial[0] + partial[1]) + (partial[2] + partial[3]);
}

}  // namespace

// The loops over rows and columns, one copy per instruction set (AG_TARGET_CLONES): with AVX2, the
// four partial sums of row_sum and the element loops run four doubles at a time. Every sum's order
// is the portable copy's, and so is every element's arithmetic in the AVX2 copy: the same bits.
// The AVX-512 copy fuses the double multiply-adds ((x − μ)² into Σ, x̂ · w + b; target_clones.h),
// which can move a double's last bit and, rarely, a float32 result's. In every copy, a row gets the
// same bits whichever rows are around it (the group functions take the leftover rows too). (Not in
// an anonymous namespace, which target clones do not support everywhere.)
//
// The loops serve layer norm and RMSNorm alike: a null pmean means rows that are not centred
// (RMSNorm: μ = 0, and nothing to save), a null pb no bias.
namespace detail {

// Four doubles as one vector (GCC's and clang's vector extension): row_sum's four partial sums,
// each lane added as its scalar is. (The portable copy splits it into two SSE2 vectors.) The
// always inlined helpers below return it by value, which GCC's and clang's -Wpsabi flag (when the
// templates are instantiated, at the end of the file) as an ABI that changes with AVX: no call of
// them crosses a library boundary, so the warning is off for this file.
typedef double Double4 __attribute__((vector_size(4 * sizeof(double))));
#if defined(__GNUC__)
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

// Elements p[0, 4) in double. (Written element by element, which the compiler turns into one
// load, and for float32 a convert, per instruction set; a float vector converted as a whole was
// split in two.)
template <class T>
[[gnu::always_inline]] inline Double4 load4(const T* p) {
  return Double4{double(p[0]), double(p[1]), double(p[2]), double(p[3])};
}

// row_sum's result from its four partial sums.
[[gnu::always_inline]] inline double combine(Double4 partial) {
  return (partial[0] + partial[1]) + (partial[2] + partial[3]);
}

// p[0, n) in double, for the loops below that read elements more than once: float32 elements are
// converted (exactly) into `scratch` once, float64 ones are read where they are. The arithmetic
// is in double either way, so the values, and the bits, are those of converting at each read.
// Converting at each read cost more than the arithmetic: the forward read each x three times and
// w and b once per row, the backward x, w and g three times.
template <class T>
[[gnu::always_inline]] inline const double* in_double(const T* p, int64_t n, double* scratch) {
  if constexpr (std::is_same_v<T, double>) {
    return p;
  } else {
    for (int64_t i = 0; i < n; ++i) scratch[i] = double(p[i]);
    return scratch;
  }
}

// Room for `count` doubles, left uninitialised (every element is written before it is read).
inline std::unique_ptr<double[]> scratch_doubles(int64_t count) {
  return std::unique_ptr<double[]>(new double[static_cast<std::size_t>(count)]);
}

// Row r of x (N contiguous elements): y = x̂ · w + b, and μ (unless pmean is null) and rstd.
// (w and b in x's dtype, or in double: in_double's.)
template <class T, class W>
[[gnu::always_inline]] inline void layer_norm_row(const T* __restrict px, const W* __restrict w,
    const W* __restrict b, T* __restrict py, double* __restrict pmean, double* __restrict prstd,
    int64_t r, int64_t N, double eps) {
  const T* x_row = px + r * N;
  T* y_row = py + r * N;
  // Two sweeps over the row (it stays in cache): μ, then Σ (x − μ)², both in double as mean()
  // and var() do — no cancellation as in Σx² − Nμ². RMSNorm's rows skip the first: μ = 0, and
  // the second is then the mean square Σ x² / N.
  const double mu =
      pmean ? row_sum(N, [&](int64_t i) { return double(x_row[i]); }) / double(N) : 0.0;
  const double variance = row_sum(N, [&](int64_t i) {
    const double centered = double(x_row[i]) - mu;
    return centered * centered;
  }) / double(N);
  const double s = 1.0 / std::sqrt(variance + eps);
  if (pmean) pmean[r] = mu;
  prstd[r] = s;
  if (b) {  // y = x̂ · w + b
    for (int64_t i = 0; i < N; ++i)
      y_row[i] = static_cast<T>((double(x_row[i]) - mu) * s * double(w[i]) + double(b[i]));
  } else {  // y = x̂ · w
    for (int64_t i = 0; i < N; ++i)
      y_row[i] = static_cast<T>((double(x_row[i]) - mu) * s * double(w[i]));
  }
}

// Rows [r, r + G) of x as layer_norm_row, for N a multiple of 4, read from x_rows (in double:
// in_double's, G · N elements, row g's element i at x_rows[g · N + i]).
//
// The sums are row_sum's, in its order, for G rows at once. One row's sum is a chain of N / 4
// dependent vector adds, each waiting for the last to finish (4 cycles), which leaves the core
// mostly idle; G rows' chains are independent, so it overlaps them. The bits are layer_norm_row's
// in the AVX2 and portable copies: the same adds in the same order, and no tail (N % 4 elements,
// where the compilers fuse a multiply-add or not depending on the code around it: such rows take
// layer_norm_row). The AVX-512 copy may fuse differently here and there, so the rows a group
// leaves over take this function too, with G = 1.
template <int64_t G, class T>
[[gnu::always_inline]] inline void layer_norm_row_group(const double* __restrict x_rows,
    const double* __restrict w, const double* __restrict b, T* __restrict py,
    double* __restrict pmean, double* __restrict prstd, int64_t r, int64_t N, double eps) {
  const double* x = x_rows;
  // Two sweeps over the rows (they stay in cache): μ, then Σ (x − μ)², as layer_norm_row.
  double mu[G] = {};
  if (pmean) {
    Double4 partial[G] = {};
    for (int64_t i = 0; i < N; i += 4)
      for (int64_t g = 0; g < G; ++g) partial[g] += load4(x + g * N + i);
    for (int64_t g = 0; g < G; ++g) mu[g] = combine(partial[g]) / double(N);
  }
  double variance[G];
  {
    Double4 partial[G] = {};
    for (int64_t i = 0; i < N; i += 4)
      for (int64_t g = 0; g < G; ++g) {
        const Double4 centered = load4(x + g * N + i) - mu[g];
        partial[g] += centered * centered;
      }
    for (int64_t g = 0; g < G; ++g) variance[g] = combine(partial[g]) / double(N);
  }
  for (int64_t g = 0; g < G; ++g) {
    const double* x_row = x + g * N;
    T* y_row = py + (r + g) * N;
    const double m = mu[g], s = 1.0 / std::sqrt(variance[g] + eps);
    if (pmean) pmean[r + g] = m;
    prstd[r + g] = s;
    if (b) {  // y = x̂ · w + b
      for (int64_t i = 0; i < N; ++i) y_row[i] = static_cast<T>((x_row[i] - m) * s * w[i] + b[i]);
    } else {  // y = x̂ · w
      for (int64_t i = 0; i < N; ++i) y_row[i] = static_cast<T>((x_row[i] - m) * s * w[i]);
    }
  }
}

// Rows per group of the row loops (G above).
inline constexpr int64_t kRowGroup = 4;
// The longest rows the group loops take. Their scratch holds a few rows in double (up to 10 N
// doubles in the backward: 640 KB here), which must stay in the core's cache to pay, and must not
// grow with a huge row (layer norm over a whole image is one row of millions): longer rows take
// the one-row loops, which keep nothing (the same bits).
inline constexpr int64_t kGroupMaxN = 8192;

// Whether rows of N elements take the group loops.
inline bool group_rows(int64_t N) { return N % 4 == 0 && N <= kGroupMaxN; }

// Rows [begin, end): kRowGroup at a time where group_rows(N), the others one by one.
template <class T>
[[gnu::always_inline]] inline void layer_norm_rows_impl(const T* px, const T* pw, const T* pb,
    T* py, double* pmean, double* prstd, int64_t begin, int64_t end, int64_t N, double eps) {
  if (!group_rows(N)) {
    for (int64_t r = begin; r < end; ++r) layer_norm_row(px, pw, pb, py, pmean, prstd, r, N, eps);
    return;
  }
  // w and b in double, a group's x in double (float32's: in_double)
  const auto scratch = scratch_doubles((2 + kRowGroup) * N);
  const double* w = in_double(pw, N, scratch.get());
  const double* b = pb ? in_double(pb, N, scratch.get() + N) : nullptr;
  double* x_group = scratch.get() + 2 * N;
  int64_t r = begin;
  for (; r + kRowGroup <= end; r += kRowGroup)
    layer_norm_row_group<kRowGroup>(
        in_double(px + r * N, kRowGroup * N, x_group), w, b, py, pmean, prstd, r, N, eps);
  // the rows left over, one at a time by the same code (see layer_norm_backward_rows_impl)
  for (; r < end; ++r)
    layer_norm_row_group<1>(in_double(px + r * N, N, x_group), w, b, py, pmean, prstd, r, N, eps);
}
AG_TARGET_CLONES void layer_norm_rows(const float* px, const float* pw, const float* pb, float* py,
    double* pmean, double* prstd, int64_t begin, int64_t end, int64_t N, double eps) {
  layer_norm_rows_impl(px, pw, pb, py, pmean, prstd, begin, end, N, eps);
}
AG_TARGET_CLONES void layer_norm_rows(const double* px, const double* pw, const double* pb,
    double* py, double* pmean, double* prstd, int64_t begin, int64_t end, int64_t N, double eps) {
  layer_norm_rows_impl(px, pw, pb, py, pmean, prstd, begin, end, N, eps);
}

// Row r of dx = rstd · (ĝ − mean(ĝ) − x̂ · mean(ĝ · x̂)), ĝ = g · w, x̂ rebuilt from the saved μ
// and rstd; g's row r at pg + r · g_row_stride (0: one row for all); w in x's dtype or in double.
// Rows that are not centred (pmean null, RMSNorm) have μ = 0 and no − mean(ĝ) term:
// dx = rstd · (ĝ − x̂ · mean(ĝ · x̂)).
template <class T, class W>
[[gnu::always_inline]] inline void layer_norm_dx_row(const T* __restrict px, const W* __restrict w,
    const T* __restrict pg, const double* __restrict pmean, const double* __restrict prstd,
    T* __restrict pdx, int64_t r, int64_t N, int64_t g_row_stride) {
  const T* x_row = px + r * N;
  const T* g_row = pg + r * g_row_stride;
  const double mu = pmean ? pmean[r] : 0.0, s = prstd[r];
  auto x_hat = [&](int64_t i) { return (double(x_row[i]) - mu) * s; };
  auto g_hat = [&](int64_t i) { return double(g_row[i]) * double(w[i]); };
  const double mean_g_hat = pmean ? row_sum(N, g_hat) / double(N) : 0.0;
  const double mean_g_hat_x_hat =
      row_sum(N, [&](int64_t i) { return g_hat(i) * x_hat(i); }) / double(N);
  T* dx_row = pdx + r * N;
  for (int64_t i = 0; i < N; ++i)
    dx_row[i] = static_cast<T>(s * (g_hat(i) - mean_g_hat - x_hat(i) * mean_g_hat_x_hat));
}

// Rows [r, r + G) of dx as layer_norm_dx_row, for N a multiple of 4, from the rows' x̂ and g in
// double (row k's elements at x_hat + k · N and g_rows + k · g_stride; g_stride 0: one row of g
// for all): the sums G rows at once, in row_sum's order (as layer_norm_row_group's). Centered:
// layer norm's rows (the − mean(ĝ) term); RMSNorm's are not.
template <bool Centered, int64_t G, class T>
[[gnu::always_inline]] inline void layer_norm_dx_row_group(const double* __restrict x_hat,
    const double* __restrict w, const double* __restrict g_rows, int64_t g_stride,
    const double* __restrict prstd, T* __restrict pdx, int64_t r, int64_t N) {
  double mean_g_hat[G] = {}, mean_g_hat_x_hat[G];
  {
    Double4 partial_g_hat[G] = {}, partial_g_hat_x_hat[G] = {};
    for (int64_t i = 0; i < N; i += 4) {
      const Double4 w4 = load4(w + i);
      for (int64_t k = 0; k < G; ++k) {
        const Double4 g_hat = load4(g_rows + k * g_stride + i) * w4;
        if constexpr (Centered) partial_g_hat[k] += g_hat;
        partial_g_hat_x_hat[k] += g_hat * load4(x_hat + k * N + i);
      }
    }
    for (int64_t k = 0; k < G; ++k) {
      if constexpr (Centered) mean_g_hat[k] = combine(partial_g_hat[k]) / double(N);
      mean_g_hat_x_hat[k] = combine(partial_g_hat_x_hat[k]) / double(N);
    }
  }
  for (int64_t k = 0; k < G; ++k) {
    const double* x_hat_row = x_hat + k * N;
    const double* g_row = g_rows + k * g_stride;
    const double s = prstd[r + k];
    T* dx_row = pdx + (r + k) * N;
    for (int64_t i = 0; i < N; ++i) {
      const double g_hat = g_row[i] * w[i];
      if constexpr (Centered)
        dx_row[i] =
            static_cast<T>(s * (g_hat - mean_g_hat[k] - x_hat_row[i] * mean_g_hat_x_hat[k]));
      else
        dx_row[i] = static_cast<T>(s * (g_hat - x_hat_row[i] * mean_g_hat_x_hat[k]));
    }
  }
}

// G rows' terms of the column sums, added in row order: dw += g · x̂ (when pdw is not null), db +=
// g (when pdb is not null), for the rows at x_hat + k · N and g_rows + k · g_stride (in double).
// A column's G terms are added in registers, one after the other as a row at a time would: the
// same sums, with one load and store of the column.
template <int64_t G>
[[gnu::always_inline]] inline void add_column_terms(const double* __restrict x_hat,
    const double* __restrict g_rows, int64_t g_stride, double* __restrict pdw,
    double* __restrict pdb, int64_t N) {
  if (pdw)
    for (int64_t i = 0; i < N; ++i) {
      double column = pdw[i];
      for (int64_t k = 0; k < G; ++k) column += g_rows[k * g_stride + i] * x_hat[k * N + i];
      pdw[i] = column;
    }
  if (pdb)
    for (int64_t i = 0; i < N; ++i) {
      double column = pdb[i];
      for (int64_t k = 0; k < G; ++k) column += g_rows[k * g_stride + i];
      pdb[i] = column;
    }
}

// x̂ = (x − μ) · rstd of the `count` rows from row r (μ = 0 where pmean is null), in double, into
// x_hat: computed once for the backward's three sweeps over a row (dx's two, the column sums'),
// the very values each sweep computed for itself before.
template <class T>
[[gnu::always_inline]] inline void normalized_rows(const T* __restrict px,
    const double* __restrict pmean, const double* __restrict prstd, double* __restrict x_hat,
    int64_t r, int64_t count, int64_t N) {
  for (int64_t k = 0; k < count; ++k) {
    const T* x_row = px + (r + k) * N;
    const double mu = pmean ? pmean[r + k] : 0.0, s = prstd[r + k];
    for (int64_t i = 0; i < N; ++i) x_hat[k * N + i] = (double(x_row[i]) - mu) * s;
  }
}

// Row r's terms of the column sums, from x itself (x̂ rebuilt at each use, the same values as
// normalized_rows'): dw += g · x̂, db += g (each when not null), for rows taken one by one.
template <class T>
[[gnu::always_inline]] inline void add_row_column_terms(const T* __restrict px,
    const T* __restrict pg, const double* __restrict pmean, const double* __restrict prstd,
    double* __restrict pdw, double* __restrict pdb, int64_t r, int64_t N, int64_t g_row_stride) {
  const T* x_row = px + r * N;
  const T* g_row = pg + r * g_row_stride;
  const double mu = pmean ? pmean[r] : 0.0, s = prstd[r];
  if (pdw)
    for (int64_t i = 0; i < N; ++i) pdw[i] += double(g_row[i]) * ((double(x_row[i]) - mu) * s);
  if (pdb)
    for (int64_t i = 0; i < N; ++i) pdb[i] += double(g_row[i]);
}

// Rows [r, r + G) of the backward, for N a multiple of 4: their x̂ into x_hat and their g in double
// into g_group (unless g is one shared row, g_shared), then dx (when pdx is not null) and the rows'
// terms of the column sums (into pdw and pdb, when not null). w in double.
template <int64_t G, class T>
[[gnu::always_inline]] inline void layer_norm_backward_row_group(const T* px, const T* pg,
    const double* pmean, const double* prstd, T* pdx, double* pdw, double* pdb, const double* w,
    const double* g_shared, double* x_hat, double* g_group, int64_t r, int64_t N) {
  normalized_rows(px, pmean, prstd, x_hat, r, G, N);
  // g's rows are contiguous when they are not one shared row
  const double* g = g_shared ? g_shared : in_double(pg + r * N, G * N, g_group);
  const int64_t g_stride = g_shared ? 0 : N;
  if (pdx && pmean)
    layer_norm_dx_row_group<true, G>(x_hat, w, g, g_stride, prstd, pdx, r, N);
  else if (pdx)
    layer_norm_dx_row_group<false, G>(x_hat, w, g, g_stride, prstd, pdx, r, N);
  add_column_terms<G>(x_hat, g, g_stride, pdw, pdb, N);
}

// Rows [begin, end) of the backward, kRowGroup at a time where group_rows(N), the others one by
// one: dx (when pdx is not null), and the rows' terms of the column sums added into pdw and pdb
// (when not null) in row order, while the rows are still in cache.
template <class T>
[[gnu::always_inline]] inline void layer_norm_backward_rows_impl(const T* px, const T* pw,
    const T* pg, const double* pmean, const double* prstd, T* pdx, double* pdw, double* pdb,
    int64_t begin, int64_t end, int64_t N, int64_t g_row_stride) {
  if (!group_rows(N)) {
    for (int64_t r = begin; r < end; ++r) {
      if (pdx) layer_norm_dx_row(px, pw, pg, pmean, prstd, pdx, r, N, g_row_stride);
      add_row_column_terms(px, pg, pmean, prstd, pdw, pdb, r, N, g_row_stride);
    }
    return;
  }
  // w and g's one row (g_row_stride 0) in double, a group's x̂, a group's g in double
  const auto scratch = scratch_doubles((2 + 2 * kRowGroup) * N);
  const double* w = in_double(pw, N, scratch.get());
  const double* g_shared = g_row_stride == 0 ? in_double(pg, N, scratch.get() + N) : nullptr;
  double* x_hat = scratch.get() + 2 * N;
  double* g_group = x_hat + kRowGroup * N;
  // The rows a group leaves over take the same code, one at a time (G = 1). (The AVX-512 copy
  // fuses multiply-adds, and where it fuses can differ between two functions of the same formulas
  // — layer_norm_dx_row's and the group's gave RMSNorm's float64 dx other last bits —, so that a
  // row's bits would depend on whether it fell in a group.) Always inlined, as every helper here:
  // a function left out of line is compiled for the portable target, not the clone's.
  int64_t r = begin;
  for (; r + kRowGroup <= end; r += kRowGroup)
    layer_norm_backward_row_group<kRowGroup>(
        px, pg, pmean, prstd, pdx, pdw, pdb, w, g_shared, x_hat, g_group, r, N);
  for (; r < end; ++r)
    layer_norm_backward_row_group<1>(
        px, pg, pmean, prstd, pdx, pdw, pdb, w, g_shared, x_hat, g_group, r, N);
}
AG_TARGET_CLONES void layer_norm_backward_rows(const float* px, const float* pw, const float* pg,
    const double* pmean, const double* prstd, float* pdx, double* pdw, double* pdb, int64_t begin,
    int64_t end, int64_t N, int64_t g_row_stride) {
  layer_norm_backward_rows_impl(
      px, pw, pg, pmean, prstd, pdx, pdw, pdb, begin, end, N, g_row_stride);
}
AG_TARGET_CLONES void layer_norm_backward_rows(const double* px, const double* pw, const double* pg,
    const double* pmean, const double* prstd, double* pdx, double* pdw, double* pdb, int64_t begin,
    int64_t end, int64_t N, int64_t g_row_stride) {
  layer_norm_backward_rows_impl(
      px, pw, pg, pmean, prstd, pdx, pdw, pdb, begin, end, N, g_row_stride);
}
}  // namespace detail

namespace {

// What the forward keeps for the backward: the rows it normalised, the scale, and per row μ and
// rstd. x is (R, N) in memory — R rows (the leading dims) of N contiguous elements.
struct NormalizedRows {
  Tensor x, w;        // (..., *normalized_shape) contiguous, (*normalized_shape)
  Tensor mean, rstd;  // (...) float64: μ (layer norm's only) and 1 / sqrt(σ² + eps) of each row
  bool centered = true;  // layer norm's rows; RMSNorm's are not (μ = 0, no mean kept)
  int64_t R = 0, N = 0;
  Shape normalized_shape;
};

// y = x̂ · w + b (b undefined: no bias) for every row of x (contiguous); fills rows.rstd, and
// rows.mean when the rows are centred.
Tensor normalize_rows(NormalizedRows& rows, const Tensor& b, double eps) {
  const Tensor& x = rows.x;
  const int64_t R = rows.R, N = rows.N;
  const Shape row_shape(
      x.shape().begin(), x.shape().end() - static_cast<int64_t>(rows.normalized_shape.size()));
  Tensor out = empty(x.shape(), x.dtype());  // (..., *normalized_shape)
  if (rows.centered)
    rows.mean = empty(row_shape, float64);  // (...)  μ of each row, saved for the backward
  rows.rstd = empty(row_shape, float64);    // (...)  1 / sqrt(σ² + eps) of each row, saved
  dispatch(x.dtype(), [&]<typename T>() {
    const T* px = x.data<T>();
    const T* pw = rows.w.data<T>();
    const T* pb = b.defined() ? b.data<T>() : nullptr;
    T* py = out.data<T>();
    double* pmean = rows.centered ? rows.mean.data<double>() : nullptr;
    double* prstd = rows.rstd.data<double>();
    // Rows are independent: ag's threads split them.
    parallel_for(R, 4 * N, [&](int64_t begin, int64_t end) {
      detail::layer_norm_rows(px, pw, pb, py, pmean, prstd, begin, end, N, eps);
    });
  });
  return out;
}

// Rows per block of layer norm's backward, whose column sums (dw, db) are added block by block.
constexpr int64_t kSumBlockRows = 64;

// The gradients of layer norm (or RMSNorm, for rows that are not centred) with respect to x, w and
// b (each only if asked for), from the upstream gradient g: see the formulas at the top of the
// file.
Grads layer_norm_grads(const NormalizedRows& rows, const Tensor& grad_output, bool want_dx,
    bool want_dw, bool want_db) {
  const Tensor& x = rows.x;
  const int64_t R = rows.R, N = rows.N;
  // (Not a structured binding: clang 14 cannot capture one in the lambdas below.)
  const detail::GradientRows g_rows =
      detail::gradient_rows(grad_output, rows.normalized_shape.size());
  const Tensor& g = g_rows.g;  // (R, N) rows of g
  const int64_t g_row_stride = g_rows.row_stride;
  Tensor dx = want_dx ? empty(x.shape(), x.dtype()) : Tensor();       // (..., *normalized_shape)
  std::vector<double> dw(want_dw ? static_cast<std::size_t>(N) : 0);  // (N) Σ_rows g · x̂
  std::vector<double> db(want_db ? static_cast<std::size_t>(N) : 0);  // (N) Σ_rows g
  dispatch(x.dtype(), [&]<typename T>() {
    const T* px = x.data<T>();
    const T* pw = rows.w.data<T>();
    const T* pg = g.data<T>();
    T* pdx = want_dx ? dx.data<T>() : nullptr;
    double* pdw = want_dw ? dw.data() : nullptr;
    double* pdb = want_db ? db.data() : nullptr;
    const double* pmean = rows.centered ? rows.mean.data<double>() : nullptr;
    const double* prstd = rows.rstd.data<double>();
    // One pass over blocks of kSumBlockRows rows, blocks split across threads. For each block,
    // a few rows at a time: dx = rstd · (ĝ − mean(ĝ) − x̂ · mean(ĝ · x̂)), ĝ = g · w; then, while
    // those rows are still in this core's cache, their terms of the block's own column sums
    // Σ g · x̂ and Σ g (in order over the block's rows). Then dw and db add the blocks' sums in
    // block order. The blocks do not depend on the thread count, so neither do the bits.
    // (Columns split across threads instead had each thread read every row, half of them from
    // the other core's cache: on 2 threads that pass took 3–10 times its 1-thread time in
    // medium's step.)
    const int64_t blocks = (R + kSumBlockRows - 1) / kSumBlockRows;
    std::vector<double> block_dw(pdw ? static_cast<std::size_t>(blocks * N) : 0);  // (blocks, N)
    std::vector<double> block_db(pdb ? static_cast<std::size_t>(blocks * N) : 0);  // (blocks, N)
    parallel_for(blocks, 8 * kSumBlockRows * N, [&](int64_t first_block, int64_t end_block) {
      for (int64_t block = first_block; block < end_block; ++block) {
        const int64_t r0 = block * kSumBlockRows, r1 = std::min(r0 + kSumBlockRows, R);
        detail::layer_norm_backward_rows(px, pw, pg, pmean, prstd, pdx,
            pdw ? block_dw.data() + block * N : nullptr,
            pdb ? block_db.data() + block * N : nullptr, r0, r1, N, g_row_stride);
      }
    });
    // dw[i] = Σ_blocks block_dw[block, i], db likewise, block after block
    for (int64_t block = 0; block < blocks; ++block)
      for (int64_t i = 0; i < N; ++i) {
        if (pdw) pdw[i] += block_dw[static_cast<std::size_t>(block * N + i)];
        if (pdb) pdb[i] += block_db[static_cast<std::size_t>(block * N + i)];
      }
  });
  // dw and db: (*normalized_shape), in x's dtype.
  auto to_tensor = [&](const std::vector<double>& sums) {
    Tensor t = empty(rows.normalized_shape, x.dtype());
    dispatch(x.dtype(), [&]<typename T>() {
      T* p = t.data<T>();
      for (std::size_t i = 0; i < sums.size(); ++i) p[i] = static_cast<T>(sums[i]);
    });
    return t;
  };
  return {dx, want_dw ? to_tensor(dw) : Tensor(), want_db ? to_tensor(db) : Tensor()};
}

// The rows of x (contiguous) with w = weight or 1 and b = bias or 0 — no affine needs no branches.
NormalizedRows rows_of(const Tensor& x, const Shape& normalized_shape, const Tensor& weight,
    Tensor& b, const Tensor& bias) {
  NormalizedRows rows;
  rows.x = x;
  rows.w = weight.defined() ? contiguous(weight.detach())
                            : ones(normalized_shape, x.dtype());  // (*normalized_shape)
  b = bias.defined() ? contiguous(bias.detach())
                     : zeros(normalized_shape, x.dtype());  // (*normalized_shape)
  rows.N = numel(normalized_shape);
  rows.R = rows.N == 0 ? 0 : x.numel() / rows.N;
  rows.normalized_shape = normalized_shape;
  return rows;
}

}  // namespace

Tensor layer_norm(const Tensor& input, const Shape& normalized_shape, const Tensor& weight,
    const Tensor& bias, double eps) {
  AG_PROFILE_OP(Op::layer_norm);
  detail::check_floating(input, "layer_norm");
  check_layer_norm_args(input, normalized_shape, weight, bias, "layer_norm");
  check_eps(eps, "layer_norm");
  Tensor b;
  NormalizedRows rows = rows_of(contiguous(input.detach()), normalized_shape, weight, b, bias);
  Tensor out = normalize_rows(rows, b, eps);  // (..., *normalized_shape)
  if (!detail::any_requires_grad({input, weight, bias})) return out;
  // docs/ops.md, layer_norm: dx = rstd · (ĝ − mean(ĝ) − x̂ · mean(ĝ · x̂)) with ĝ = g · w, dw =
  //   Σ_rows g · x̂, db = Σ_rows g
  return detail::record(Op::layer_norm, out, {input, weight, bias},
      /*saved=*/{rows.x, rows.w},
      [rows](const Tensor& grad_output, const NeedsGrad& needs) -> Grads {
        return layer_norm_grads(rows, grad_output, needs[0], needs[1], needs[2]);
      });
}

double machine_epsilon(DType dtype) {
  detail::check_floating(dtype, "machine_epsilon");
  return dtype == float32 ? double(std::numeric_limits<float>::epsilon())
                          : std::numeric_limits<double>::epsilon();
}

Tensor rms_norm(const Tensor& input, const Shape& normalized_shape, const Tensor& weight,
    std::optional<double> eps) {
  AG_PROFILE_OP(Op::rms_norm);
  detail::check_floating(input, "rms_norm");
  check_layer_norm_args(input, normalized_shape, weight, Tensor(), "rms_norm");
  // PyTorch's default eps: torch.finfo(x.dtype).eps.
  const double epsilon = eps.value_or(machine_epsilon(input.dtype()));
  check_eps(epsilon, "rms_norm");
  NormalizedRows rows;
  rows.x = contiguous(input.detach());  // (..., *normalized_shape)
  rows.w = weight.defined() ? contiguous(weight.detach())
                            : ones(normalized_shape, input.dtype());  // (*normalized_shape)
  rows.centered = false;  // μ = 0: only the mean square, no mean
  rows.N = numel(normalized_shape);
  rows.R = rows.N == 0 ? 0 : input.numel() / rows.N;
  rows.normalized_shape = normalized_shape;
  Tensor out = normalize_rows(rows, /*b=*/Tensor(), epsilon);  // (..., *normalized_shape)
  if (!detail::any_requires_grad({input, weight})) return out;
  // docs/ops.md, rms_norm: dx = rstd · (ĝ − x̂ · mean(ĝ · x̂)) with ĝ = g · w, dw = Σ_rows g · x̂
  return detail::record(Op::rms_norm, out, {input, weight},
      /*saved=*/{rows.x, rows.w},
      [rows](const Tensor& grad_output, const NeedsGrad& needs) -> Grads {
        // Layer norm's backward for rows with μ = 0 (the derivation at the top of the file).
        Grads grads = layer_norm_grads(rows, grad_output, needs[0], needs[1], /*want_db=*/false);
        return {grads[0], grads[1]};
      });
}

Tensor dropout_add_layer_norm(const Tensor& x, const Tensor& y, const Shape& normalized_shape,
    const Tensor& weight, const Tensor& bias, double eps, double p, bool training,
    Generator& generator) {
  AG_PROFILE_OP(Op::dropout_add_layer_norm);
  if (x.shape() != y.shape())
    fail<ShapeError>("dropout_add_layer_norm: x of shape ", shape_str(x.shape()),
        " and y of shape ", shape_str(y.shape()),
        " differ (the residual sum x + dropout(y) needs one shape)");
  detail::check_floating(x, "dropout_add_layer_norm");
  detail::check_same_dtype(x, y, "dropout_add_layer_norm");
  check_layer_norm_args(x, normalized_shape, weight, bias, "dropout_add_layer_norm");
  check_eps(eps, "dropout_add_layer_norm");
  if (!(p >= 0.0 && p <= 1.0))
    fail<ValueError>("dropout_add_layer_norm: probability ", p, " is outside [0, 1] (input shape ",
        shape_str(x.shape()), ")");
  const int64_t n = x.numel();
  const bool drop = training && p > 0.0;
  // The mask ag::dropout(y, p) would draw from this generator state (the same blocks), as bytes.
  detail::DropoutMask mask;
  std::shared_ptr<uint8_t> keep;
  if (drop) {
    mask = detail::reserve_dropout_mask(n, y.dtype(), p, generator);
    keep = detail::allocate_bytes(static_cast<std::size_t>(n), "dropout_add_layer_norm", y.shape());
    parallel_for(n, 8, [&](int64_t begin, int64_t end) {
      detail::draw_dropout_keep(mask, y.dtype(), begin, end - begin, keep.get() + begin);
    });
  }
  // z = x + dropout(y), one pass: (..., *normalized_shape)
  const Tensor xc = contiguous(x.detach()), yc = contiguous(y.detach());
  Tensor z = empty(x.shape(), x.dtype());
  dispatch(x.dtype(), [&]<typename T>() {
    const T* px = xc.data<T>();
    const T* py = yc.data<T>();
    T* pz = z.data<T>();
    parallel_for(n, 2, [&](int64_t begin, int64_t end) {
      if (drop) {
        detail::apply_dropout_keep(
            py + begin, pz + begin, keep.get() + begin, end - begin, mask.scale);
        for (int64_t i = begin; i < end; ++i)
          pz[i] = px[i] + pz[i];  // x + m ⊙ y, as add(x, dropout(y))
      } else {
        for (int64_t i = begin; i < end; ++i) pz[i] = px[i] + py[i];
      }
    });
  });
  Tensor b;
  NormalizedRows rows = rows_of(z, normalized_shape, weight, b, bias);
  Tensor out = normalize_rows(rows, b, eps);  // (..., *normalized_shape)
  if (!detail::any_requires_grad({x, y, weight, bias})) return out;
  // docs/ops.md, dropout_add_layer_norm: dz from layer_norm's backward; dx = dz, dy = m ⊙ dz, dw
  //   and db as layer_norm's
  return detail::record(Op::dropout_add_layer_norm, out, {x, y, weight, bias},
      /*saved=*/{rows.x, rows.w},
      [rows, keep, mask, drop, n](const Tensor& grad_output, const NeedsGrad& needs) -> Grads {
        // In the forward pass this was out = layer_norm(z), z = x + m ⊙ y, so
        //   dz = layer norm's dx (above),  dx = dz,  dy = m ⊙ dz,  dw and db as layer norm's.
        Grads grads = layer_norm_grads(rows, grad_output, needs[0] || needs[1], needs[2], needs[3]);
        const Tensor dz = grads[0];
        Tensor dy;
        if (needs[1]) {
          dy = dz;
          if (drop) {
            dy = empty(dz.shape(), dz.dtype());
            dispatch(dz.dtype(), [&]<typename T>() {
              const T* pdz = dz.data<T>();
              T* pdy = dy.data<T>();
              parallel_for(n, 1, [&](int64_t begin, int64_t end) {
                detail::apply_dropout_keep(
                    pdz + begin, pdy + begin, keep.get() + begin, end - begin, mask.scale);
              });
            });
          }
        }
        return {needs[0] ? dz : Tensor(), dy, grads[1], grads[2]};
      });
}

}  // namespace ag
