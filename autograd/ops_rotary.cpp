// Rotary position embedding (RoPE; Su et al. 2021, "RoFormer") as one op, forward and backward
// together.
//
//   rotary_embedding(x, cos, sin, pairs)
//
// From the seed's rotation to RoPE. The seed ends with the property of d2l's sinusoids: with
// ω_j = 1 / 10000^(2j/d), the column pair (p_{i,2j}, p_{i,2j+1}) = (sin iω_j, cos iω_j) of position
// i + δ is that of position i turned by a 2 × 2 rotation of angle δω_j, the same for every i:
//
//   [  cos δω_j   sin δω_j ] [ p_{i,2j}   ]   [ p_{i+δ,2j}   ]
//   [ −sin δω_j   cos δω_j ] [ p_{i,2j+1} ] = [ p_{i+δ,2j+1} ]
//
// Write R(θ) for the rotation of the plane by θ, counter-clockwise (the seed's matrix is R(−δω_j):
// its pairs put the sine first):
//
//   R(θ) = [ cos θ  −sin θ ]      R(θ) (a, b) = (a cos θ − b sin θ,  a sin θ + b cos θ)
//          [ sin θ   cos θ ]
//
// Rotations compose by adding their angles, R(α) R(β) = R(α + β), and R(θ)ᵀ = R(−θ). RoPE does not
// add a table to the embeddings: it turns feature pair j of the query at position i by R(iω_j) and
// of the key at position k by R(kω_j), just before their dot product, which becomes
//
//   (R(iω_j) q)ᵀ (R(kω_j) k) = qᵀ R(iω_j)ᵀ R(kω_j) k = qᵀ R((k − i) ω_j) k
//
// — a function of k − i alone: the seed's rotation "that does not depend on i", moved to where the
// scores are formed, makes attention see relative positions.
//
// The op: x (..., T, d) and cos, sin (T, r/2) holding cos θ_{t,j} and sin θ_{t,j} for any angles
// (nn::RotaryEmbedding makes θ_{t,j} = t · base^(−2j/r)); r = 2 · cos.size(1) is even by
// construction, 0 < r ≤ d. Row t of x has r/2 feature pairs,
//
//   interleaved  pair j = (x[2j], x[2j+1])      RoFormer, Meta's Llama (torch.view_as_complex)
//   halves       pair j = (x[j], x[j + r/2])     GPT-NeoX's rotate_half, Hugging Face's Llama
//
// and each is turned:  y[pair j] = R(θ_{t,j}) x[pair j];  y[i] = x[i] for the features i ≥ r
// (partial rotary: GPT-NeoX's rotary_pct).
//
// Backward. y = M x with M block diagonal — a rotation R(θ_{t,j}) per pair, a 1 per passing
// feature — so y is linear in x and dx = Mᵀ g, block diagonal in R(θ)ᵀ = R(−θ):
//
//   dx[pair j] = R(−θ_{t,j}) g[pair j] = (g_a cos θ + g_b sin θ,  −g_a sin θ + g_b cos θ)
//   dx[i] = g[i] for i ≥ r
//
// — the forward's loop with sin θ negated. The backward reads no x: it saves only cos and sin. They
// are not differentiated (the angles are positions times fixed frequencies, not learned), and one
// that requires grad is refused rather than left without its gradient.
//
// Layout. The output, and x's gradient, are laid out like x when x is a dense permuted view:
// rotary_embedding(W_q(X).reshape({B,T,H,d}).permute({0,2,1,3}), ...) is (B, H, T, d) over
// (B, T, H, d) memory, as the head view it turns, so that ag::attention reads its heads in place
// and the backward hands the reshape a (B, T, H, d) gradient it views without a copy. The rows are
// split across ag's threads; each element is computed on its own, so the bits do not depend on
// their number.
#include <algorithm>
#include <numeric>
#include <vector>

#include "autograd/autograd.h"
#include "autograd/detail/attention_kernels.h"  // gradient_like
#include "autograd/detail/kernels.h"
#include "autograd/ops.h"
#include "autograd/parallel.h"
#include "autograd/profiler.h"

namespace ag {

namespace {

// One row: dst[pair j] = R(sign · θ_j) src[pair j] for j < half, and dst[i] = src[i] for
// 2·half ≤ i < d, both rows contiguous. sign +1 is the rotation (the forward), −1 its transpose
// R(−θ) (the backward); sign · sin θ only flips a sign, so both round alike. Unit steps let the
// compiler vectorise the loops.
template <class T>
inline void rotate_row(const T* __restrict src, T* __restrict dst, const T* __restrict cos_row,
    const T* __restrict sin_row, T sign, int64_t half, int64_t d, RotaryPairs pairs) {
  if (pairs == RotaryPairs::interleaved) {
    for (int64_t j = 0; j < half; ++j) {  // pair j = (2j, 2j + 1)
      const T a = src[2 * j], b = src[2 * j + 1];
      const T c = cos_row[j], s = sign * sin_row[j];
      dst[2 * j] = a * c - b * s;
      dst[2 * j + 1] = a * s + b * c;
    }
  } else {
    for (int64_t j = 0; j < half; ++j) {  // pair j = (j, j + half)
      const T a = src[j], b = src[j + half];
      const T c = cos_row[j], s = sign * sin_row[j];
      dst[j] = a * c - b * s;
      dst[j + half] = a * s + b * c;
    }
  }
  std::copy(src + 2 * half, src + d, dst + 2 * half);  // partial rotary: passed on
}

// dst = M src (sign +1) or Mᵀ src (sign −1), M the rotations of the header, for src and dst of one
// shape (..., T, d) and any strides (dst a new dense buffer; src may be a sum's expanded gradient,
// stride 0), cos and sin (T, half) contiguous.
//
// The rows are walked in the order of dst's memory, not in the order of their index: for the head
// view (B, H, T, d) of a (B, T, H, d) buffer that is (B, T, H), so x is read and y written front
// to back in one stream each, rather than in H streams a row of H · d elements apart (which cost
// the forward a third of its time in cache misses). A row whose features are not contiguous
// (src's or dst's feature stride ≠ 1) goes through a contiguous copy of d elements.
void rotate(const Tensor& src, const Tensor& dst, const Tensor& cos, const Tensor& sin,
    RotaryPairs pairs, double sign) {
  const int64_t d = src.size(-1), half = cos.size(1);
  const std::size_t lead = static_cast<std::size_t>(src.dim() - 1);  // the row dims (..., T)
  // The row dims from dst's largest stride to its smallest; t_at is where T went.
  std::vector<std::size_t> order(lead);
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(),
      [&](std::size_t a, std::size_t b) { return dst.strides()[a] > dst.strides()[b]; });
  Shape rows_shape, src_strides, dst_strides;  // the row dims in that order
  std::size_t t_at = 0;
  for (std::size_t k = 0; k < lead; ++k) {
    if (order[k] == lead - 1) t_at = k;
    rows_shape.push_back(src.size(static_cast<int64_t>(order[k])));
    src_strides.push_back(src.strides()[order[k]]);
    dst_strides.push_back(dst.strides()[order[k]]);
  }
  const int64_t rows = numel(rows_shape);
  if (rows == 0 || d == 0) return;
  const int64_t ss = src.strides().back(), ds = dst.strides().back();
  dispatch(src.dtype(), [&]<typename T>() {
    const T* ps = src.data<T>();
    T* pd = dst.data<T>();
    const T* pc = cos.data<T>();
    const T* psin = sin.data<T>();
    const T sgn = static_cast<T>(sign);
    parallel_for(rows, 2 * d, [&](int64_t begin, int64_t end) {
      // contiguous copies of a row whose features are strided
      std::vector<T> src_row(ss == 1 ? 0 : static_cast<std::size_t>(d));
      std::vector<T> dst_row(ds == 1 ? 0 : static_cast<std::size_t>(d));
      int64_t copied_offset = -1;  // src's offset of the row in src_row (none yet)
      // Row `begin`'s multi-index over the row dims and its offsets in src and dst; then row by
      // row, advancing the index like an odometer.
      std::vector<int64_t> index(lead, 0);
      int64_t src_offset = 0, dst_offset = 0;
      for (std::size_t k = lead, rest = static_cast<std::size_t>(begin); k-- > 0;) {
        index[k] = static_cast<int64_t>(rest % static_cast<std::size_t>(rows_shape[k]));
        rest /= static_cast<std::size_t>(rows_shape[k]);
        src_offset += index[k] * src_strides[k];
        dst_offset += index[k] * dst_strides[k];
      }
      for (int64_t r = begin; r < end; ++r) {
        const int64_t t = index[t_at];  // the row's position: its index along T
        const T* in = ps + src_offset;
        if (ss != 1) {
          if (src_offset != copied_offset)  // not the row copied last (an expanded gradient's)
            for (int64_t i = 0; i < d; ++i) src_row[static_cast<std::size_t>(i)] = in[i * ss];
          copied_offset = src_offset;
          in = src_row.data();
        }
        T* out = ds == 1 ? pd + dst_offset : dst_row.data();
        rotate_row(in, out, pc + t * half, psin + t * half, sgn, half, d, pairs);
        if (ds != 1)
          for (int64_t i = 0; i < d; ++i) pd[dst_offset + i * ds] = out[i];
        for (std::size_t k = lead; k-- > 0;) {
          src_offset += src_strides[k];
          dst_offset += dst_strides[k];
          if (++index[k] < rows_shape[k]) break;
          src_offset -= src_strides[k] * rows_shape[k];
          dst_offset -= dst_strides[k] * rows_shape[k];
          index[k] = 0;
        }
      }
    });
  });
}

// An uninitialised tensor of `shape` laid out with `strides`, those of a dense tensor (the
// forward's output: contiguous, or gradient_like's permuted layout): its buffer holds the dims
// from the largest stride to the smallest.
Tensor empty_with_strides(const Shape& shape, const Shape& strides, DType dtype) {
  std::vector<std::size_t> order(shape.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(),
      [&](std::size_t a, std::size_t b) { return strides[a] > strides[b]; });
  Shape buffer_shape;
  for (std::size_t dim : order) buffer_shape.push_back(shape[dim]);
  return detail::make_view(empty(buffer_shape, dtype), shape, strides, 0);
}

void check_rotary_args(const Tensor& x, const Tensor& cos, const Tensor& sin) {
  constexpr const char* op = "rotary_embedding";
  if (!x.defined() || !cos.defined() || !sin.defined())
    fail<ValueError>(op, ": x, cos and sin must all be defined tensors");
  detail::check_floating(x, op);
  if (cos.dtype() != x.dtype() || sin.dtype() != x.dtype())
    fail<DTypeError>(op, ": cos (", dtype_name(cos.dtype()), ") and sin (", dtype_name(sin.dtype()),
        ") must have x's dtype ", dtype_name(x.dtype()), " (x of shape ", shape_str(x.shape()),
        "); convert them first");
  if (x.dim() < 2)
    fail<ShapeError>(op, ": x of shape ", shape_str(x.shape()), " is not (..., T, d)");
  const int64_t T = x.size(-2), d = x.size(-1);
  if (cos.dim() != 2 || sin.shape() != cos.shape() || cos.size(0) != T)
    fail<ShapeError>(op, ": cos of shape ", shape_str(cos.shape()), " and sin of shape ",
        shape_str(sin.shape()), " must both be (T, r/2) with T = ", T, " for x of shape ",
        shape_str(x.shape()));
  const int64_t r = 2 * cos.size(1);
  if (r == 0 || r > d)
    fail<ShapeError>(op, ": cos and sin of shape ", shape_str(cos.shape()), " turn r = ", r,
        " features, but x of shape ", shape_str(x.shape()), " has d = ", d,
        " (0 < r <= d is needed)");
  if (cos.requires_grad() || sin.requires_grad())
    fail<ValueError>(op, ": ", cos.requires_grad() ? "cos" : "sin",
        " requires grad, but cos and sin are not differentiated (their gradient would be "
        "dropped); pass them detached");
}

}  // namespace

Tensor rotary_embedding(const Tensor& x, const Tensor& cos, const Tensor& sin, RotaryPairs pairs) {
  AG_PROFILE_OP(Op::rotary_embedding);
  check_rotary_args(x, cos, sin);
  const Tensor c = contiguous(cos.detach()), s = contiguous(sin.detach());  // (T, r/2)
  // (..., T, d), laid out like x when x is a dense permuted view (the head view of a projection)
  Tensor out = detail::gradient_like(x, /*zero=*/false);
  rotate(x.detach(), out, c, s, pairs, +1.0);  // y = R(θ) x on every pair
  if (!detail::any_requires_grad({x})) return out;
  // docs/ops.md, rotary_embedding: dx = R(−θ) g on each pair (R(θ)ᵀ = R(−θ)), dx = g on the
  //   features past r; cos and sin not differentiated
  return detail::record(Op::rotary_embedding, out, {x, cos, sin}, /*saved=*/{c, s},
      [c, s, pairs, shape = out.shape(), strides = out.strides()](
          const Tensor& grad_output, const NeedsGrad& needs) -> Grads {
        if (!needs[0]) return {Tensor(), Tensor(), Tensor()};
        // In the forward pass this was y = M x, M block diagonal in the rotations R(θ_{t,j}), so
        // dx = Mᵀ g: each pair of g turned back by R(θ)ᵀ = R(−θ), the passing features copied.
        Tensor dx = empty_with_strides(shape, strides, grad_output.dtype());  // x's layout
        rotate(grad_output, dx, c, s, pairs, -1.0);
        return {dx, Tensor(), Tensor()};
      });
}

}  // namespace ag
