// Matrix product on OpenBLAS, with its backward; and linear, the product with a bias (a layer),
// and linear_relu, the same followed by relu (the first half of a Transformer's FFN).
//
//   C = A · B        A: (..., M, K)   B: (..., K, N)   C: (..., M, N), batch dims broadcast
//   y = x · Wᵀ + b   x: (..., in)     W: (out, in)     b: (out)        y: (..., out)
//
// Its gradient is the docs/ops.md tag beside its backward, with the shapes of each product.
//
// BLAS reads a row-major matrix either as it is or transposed, so an operand whose last two dims
// are a transposed view (Kᵀ in Q·Kᵀ, the Bᵀ and Aᵀ of the backward) is passed with a transpose
// flag and its own leading dimension — no copy. Only layouts BLAS cannot express (a stride-0
// broadcast inside the matrix, a slice with a step along both dims) are copied first.
#include <cblas.h>

#include <array>
#include <climits>
#include <string>
#include <vector>

#include "autograd/autograd.h"
#include "autograd/detail/blas.h"
#include "autograd/detail/kernels.h"
#include "autograd/detail/target_clones.h"
#include "autograd/ops.h"
#include "autograd/parallel.h"
#include "autograd/profiler.h"

namespace ag {

namespace {

// How BLAS reads the last two dims (rows × cols) of an operand.
struct BlasMatrix {
  Tensor tensor;  // the operand, or a contiguous copy of it when BLAS could not read it
  CBLAS_TRANSPOSE trans = CblasNoTrans;
  int ld = 1;
};

BlasMatrix blas_matrix(const Tensor& t) {
  const int64_t rows = t.shape()[t.dim() - 2], cols = t.shape()[t.dim() - 1];
  const int64_t row_stride = t.strides()[t.dim() - 2], col_stride = t.strides()[t.dim() - 1];
  // Row-major as stored: elements of a row adjacent, rows ld apart (ld >= cols).
  if ((col_stride == 1 || cols == 1) && (rows == 1 || row_stride >= std::max<int64_t>(cols, 1)))
    return {t, CblasNoTrans, static_cast<int>(rows == 1 ? std::max<int64_t>(cols, 1) : row_stride)};
  // The transpose of a row-major (cols × rows) matrix: columns adjacent, ld = the column stride.
  if ((row_stride == 1 || rows == 1) && (cols == 1 || col_stride >= std::max<int64_t>(rows, 1)))
    return {t, CblasTrans, static_cast<int>(cols == 1 ? std::max<int64_t>(rows, 1) : col_stride)};
  Tensor copy = contiguous(t);
  return {copy, CblasNoTrans, static_cast<int>(std::max<int64_t>(cols, 1))};
}

// Whether a matrix is the transposed view of a row-major one, as Wᵀ = transpose(W, 0, 1) is:
// columns adjacent, each as long as the stride between them.
bool stored_transposed(const Tensor& m) {
  return m.dim() == 2 && m.size(0) > 1 && m.size(1) > 1 && m.strides()[0] == 1 &&
         m.strides()[1] == m.size(0);
}

// parallel_for's cost unit is about one element of an elementwise loop; a gemm's multiply-add is
// some 16 times cheaper (vectorised, in cache), so a product splits only when it is large enough
// to pay for waking a thread.
constexpr int64_t gemm_cost(int64_t multiply_adds) {
  return std::max<int64_t>(multiply_adds / 16, 1);
}

// Whether the batch dims of a row-major operand followed by its rows form one evenly strided
// run, so that the batch of matrices is a single tall matrix: (B..., M, K) -> (B·M, K).
bool batch_folds_into_rows(const BlasMatrix& t, const Shape& batch_strides, const Shape& batch) {
  int64_t expected = int64_t{t.ld} * t.tensor.shape()[t.tensor.dim() - 2];
  for (std::size_t d = batch.size(); d-- > 0;) {
    if (batch[d] == 1) continue;
    if (batch_strides[d] != expected) return false;
    expected *= batch[d];
  }
  return true;
}

}  // namespace

// linear's kernels, one copy per instruction set (AG_TARGET_CLONES; not in an anonymous namespace,
// which target clones do not support everywhere). Each thread runs them on rows or columns of its
// own, and vectorising them keeps every element's arithmetic (and each column sum's order) as is.
namespace detail {

// The epilogue on rows [0, count) of c (row stride n), in place, while they are still in cache:
// + bias (n) when bias is not null, then max(·, 0) (relu's rule: NaN stays NaN) with relu.
template <class T>
[[gnu::always_inline]] inline void linear_epilogue_impl(
    T* __restrict c, int64_t count, int64_t n, const T* __restrict bias, bool relu) {
  for (int64_t i = 0; i < count; ++i) {
    T* __restrict row = c + i * n;
    if (bias && relu) {
      for (int64_t j = 0; j < n; ++j) {
        const T v = row[j] + bias[j];
        row[j] = v <= 0 ? T(0) : v;
      }
    } else if (bias) {
      for (int64_t j = 0; j < n; ++j) row[j] += bias[j];
    } else if (relu) {
      for (int64_t j = 0; j < n; ++j) row[j] = row[j] <= 0 ? T(0) : row[j];
    }
  }
}
AG_TARGET_CLONES void linear_epilogue(
    float* c, int64_t count, int64_t n, const float* bias, bool relu) {
  linear_epilogue_impl(c, count, n, bias, relu);
}
AG_TARGET_CLONES void linear_epilogue(
    double* c, int64_t count, int64_t n, const double* bias, bool relu) {
  linear_epilogue_impl(c, count, n, bias, relu);
}

// Over columns [begin, end) of g (rows × n, row stride ld, contiguous rows): with y (rows × n,
// contiguous), masked = (y > 0 ? g : 0) (relu's backward, into rows × n); then, with sums,
// sums[j] += each row's element j of masked (or of g without y), row after row.
template <class T>
[[gnu::always_inline]] inline void linear_backward_columns_impl(const T* __restrict g, int64_t ld,
    const T* __restrict y, T* __restrict masked, double* __restrict sums, int64_t rows, int64_t n,
    int64_t begin, int64_t end) {
  for (int64_t r = 0; r < rows; ++r) {
    const T* __restrict g_row = g + r * ld;
    if (y) {
      const T* __restrict y_row = y + r * n;
      T* __restrict m_row = masked + r * n;
      for (int64_t j = begin; j < end; ++j) m_row[j] = y_row[j] > 0 ? g_row[j] : T(0);
      g_row = m_row;
    }
    if (sums)
      for (int64_t j = begin; j < end; ++j) sums[j] += double(g_row[j]);
  }
}
AG_TARGET_CLONES void linear_backward_columns(const float* g, int64_t ld, const float* y,
    float* masked, double* sums, int64_t rows, int64_t n, int64_t begin, int64_t end) {
  linear_backward_columns_impl(g, ld, y, masked, sums, rows, n, begin, end);
}
AG_TARGET_CLONES void linear_backward_columns(const double* g, int64_t ld, const double* y,
    double* masked, double* sums, int64_t rows, int64_t n, int64_t begin, int64_t end) {
  linear_backward_columns_impl(g, ld, y, masked, sums, rows, n, begin, end);
}

}  // namespace detail

namespace {

// BLAS takes each of M, N and K as a 32-bit int: checked before the output is allocated (an
// expanded (2^31, 1) view costs no memory, its product's (2^31, N) output 8·N GB).
void check_blas_sizes(const Shape& a_shape, const Shape& b_shape, const char* op) {
  const int64_t m = a_shape[a_shape.size() - 2], k = a_shape.back(), n = b_shape.back();
  if (std::max({m, n, k}) > INT_MAX)
    fail<ShapeError>(op, ": shapes ", shape_str(a_shape), " and ", shape_str(b_shape),
        " exceed BLAS's 32-bit sizes (M, N and K at most 2^31 - 1)");
}

// out (contiguous, batch + [M, N]) = a (..., M, K) · b (..., K, N), batch dims broadcast; then
// + bias (N) on every row when bias is defined (contiguous, a's dtype), then relu with relu. The
// caller has checked the sizes (check_blas_sizes).
//
// The bias is added by each thread to the rows its gemm has just written: fl(fl(A·B) + b), the
// bits of matmul followed by add. Putting b in C first for a gemm with beta = 1 would not give
// them: OpenBLAS splits a long K loop into blocks (from K = 324 on with 0.3.21's Cooperlake
// kernels) and adds each block's partial sum p_i to C, fl(fl(b + p1) + p2) instead.
void matmul_into(const Tensor& a_in, const Tensor& b_in, const Tensor& out, const Shape& batch,
    const Tensor& bias = Tensor(), bool relu = false) {
  const int64_t m = a_in.shape()[a_in.dim() - 2], k = a_in.shape()[a_in.dim() - 1];
  const int64_t n = b_in.shape()[b_in.dim() - 1];
  if (m == 0 || n == 0) return;
  if (k == 0) {  // an empty sum: 0, or the bias on every row (then relu)
    if (bias.defined())
      out.copy_(relu ? ag::relu(bias.detach()) : bias);
    else
      out.fill_(0.0);
    return;
  }
  BlasMatrix a = blas_matrix(a_in), b = blas_matrix(b_in);
  // Batch strides of each operand in the output's batch index space (0 where broadcast).
  auto batch_strides = [&](const Tensor& t) {
    Shape full = detail::broadcast_strides(t, [&] {
      Shape s = batch;
      s.push_back(t.shape()[t.dim() - 2]);
      s.push_back(t.shape()[t.dim() - 1]);
      return s;
    }());
    return Shape(full.begin(), full.end() - 2);
  };
  const Shape a_batch = batch_strides(a.tensor), b_batch = batch_strides(b.tensor);
  Shape out_batch = contiguous_strides(batch);
  for (int64_t& s : out_batch) s *= m * n;

  dispatch(out.dtype(), [&]<typename T>() {
    const T* pa = a.tensor.data<T>();
    const T* pb = b.tensor.data<T>();
    T* pc = out.data<T>();
    const T* pbias = bias.defined() ? bias.data<T>() : nullptr;
    const bool epilogue = pbias || relu;
    // op(A) rows [begin, end) start at row begin of A as stored, or at its column begin when A is
    // read transposed.
    auto a_rows = [&](const T* a_matrix, int64_t begin) {
      return a_matrix + (a.trans == CblasNoTrans ? begin * a.ld : begin);
    };
    const bool b_shared =
        std::all_of(b_batch.begin(), b_batch.end(), [](int64_t s) { return s == 0; });
    // (folded only while the rows stay within BLAS's 32 bits; one batch's M is checked already)
    const bool one_product =
        numel(batch) == 1 || (b_shared && a.trans == CblasNoTrans && numel(batch) * m <= INT_MAX &&
                                 batch_folds_into_rows(a, a_batch, batch));
    if (one_product) {
      // One gemm: (M, K) · (K, N), or (B..., M, K) · (K, N) as one tall (B·M, K) · (K, N) instead
      // of B small ones. Threads split its rows: rows [begin, end) of C = op(A)[begin, end) ·
      // op(B).
      const int64_t rows = numel(batch) * m;
      parallel_for(rows, gemm_cost(n * k), [&](int64_t begin, int64_t end) {
        detail::gemm<T>(a.trans, b.trans, static_cast<int>(end - begin), int(n), int(k),
            a_rows(pa, begin), a.ld, pb, b.ld, pc + begin * n, int(n));
        if (epilogue) detail::linear_epilogue(pc + begin * n, end - begin, n, pbias, relu);
      });
      return;
    }
    // A batch of products (attention's B·H heads): threads split the batch, one gemm each.
    std::vector<std::array<int64_t, 3>> offsets;  // per product: A's, B's and C's element offsets
    offsets.reserve(static_cast<std::size_t>(numel(batch)));
    detail::for_each_row<3>(batch, {a_batch, b_batch, out_batch},
        [&](const std::array<int64_t, 3>& off, int64_t count, const std::array<int64_t, 3>& st) {
          for (int64_t i = 0; i < count; ++i)
            offsets.push_back({off[0] + i * st[0], off[1] + i * st[1], off[2] + i * st[2]});
        });
    parallel_for(static_cast<int64_t>(offsets.size()), gemm_cost(m * n * k),
        [&](int64_t begin, int64_t end) {
          for (int64_t i = begin; i < end; ++i) {
            const auto& off = offsets[static_cast<std::size_t>(i)];
            detail::gemm<T>(a.trans, b.trans, int(m), int(n), int(k), pa + off[0], a.ld,
                pb + off[1], b.ld, pc + off[2], int(n));
            if (epilogue) detail::linear_epilogue(pc + off[2], m, n, pbias, relu);
          }
        });
  });
}

// The product of operands of at least 2 dims: batch dims broadcast, recorded for autograd.
Tensor matmul_nd(const Tensor& a, const Tensor& b, const Shape& user_a, const Shape& user_b) {
  const int64_t k = a.shape()[a.dim() - 1];
  if (k != b.shape()[b.dim() - 2])
    fail<ShapeError>("matmul: shapes ", shape_str(user_a), " and ", shape_str(user_b),
        " cannot be multiplied (", k, " != ", b.shape()[b.dim() - 2], ")");
  const Shape a_batch(a.shape().begin(), a.shape().end() - 2);
  const Shape b_batch(b.shape().begin(), b.shape().end() - 2);
  Shape batch;
  try {
    batch = broadcast_shapes(a_batch, b_batch, "matmul");
  } catch (const ShapeError&) {
    fail<ShapeError>("matmul: batch dims of shapes ", shape_str(user_a), " and ", shape_str(user_b),
        " cannot be broadcast (", shape_str(a_batch), " vs ", shape_str(b_batch), ")");
  }
  Shape out_shape = batch;
  out_shape.push_back(a.shape()[a.dim() - 2]);
  out_shape.push_back(b.shape()[b.dim() - 1]);
  // (..., M, N): valid operands can still make an output too large to count, [2^32, 1]·[1, 2^32];
  // then BLAS's sizes, both before the output is allocated
  detail::checked_nbytes(out_shape, a.dtype(), "matmul");
  check_blas_sizes(a.shape(), b.shape(), "matmul");
  Tensor out = detail::empty(out_shape, a.dtype(), "matmul");
  matmul_into(a, b, out, batch);
  if (!detail::any_requires_grad({a, b})) return out;
  // docs/ops.md, matmul: dA = sum_to(dC · Bᵀ), dB = sum_to(Aᵀ · dC)
  return detail::record(Op::matmul, out, {a, b}, /*saved=*/{a, b},
      [a, b, k](const Tensor& g, const NeedsGrad& needs) -> Grads {
        Tensor ga, gb;
        if (needs[0]) {
          // dA = dC · Bᵀ: (..., M, N)·(..., N, K) -> (..., M, K); Bᵀ is a view read with a BLAS
          // flag
          ga = sum_to(matmul(g, transpose(b, -1, -2)), a.shape());
        }
        if (needs[1]) {
          if (b.dim() == 2 && a.dim() >= 2 && stored_transposed(b)) {
            // B = Wᵀ, a transposed view (x · Wᵀ, as linear): dB = (dC'ᵀ · A')ᵀ, the gradient in
            // B's own layout, so that dW = dC'ᵀ · A' comes out contiguous — and by the very gemm
            // call linear's backward makes for dW, so that the two give the same bits on every
            // BLAS kernel (A'ᵀ · dC' and (dC'ᵀ · A')ᵀ sum in the same order on some, not on all).
            const int64_t rows = a.numel() / k;
            gb = transpose(matmul(transpose(reshape(g, Shape{rows, g.size(-1)}), 0, 1),
                               reshape(a, Shape{rows, k})),
                0, 1);
          } else if (b.dim() == 2 && a.dim() > 2) {
            // B was shared by every batch: dB = Σ_batch Aᵀ·dC = A'ᵀ · dC' with the batch folded
            // into the rows, A' (B·M, K) and dC' (B·M, N) — one gemm instead of B gemms and a sum.
            const int64_t rows = a.numel() / k;
            gb = matmul(
                transpose(reshape(a, Shape{rows, k}), 0, 1), reshape(g, Shape{rows, g.size(-1)}));
          } else {
            // dB = Aᵀ · dC: (..., K, M)·(..., M, N) -> (..., K, N)
            gb = sum_to(matmul(transpose(a, -1, -2), g), b.shape());
          }
        }
        return {ga, gb};
      });
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) {
  AG_PROFILE_OP(Op::matmul);
  if (a.dim() == 0 || b.dim() == 0)
    fail<ShapeError>("matmul: shapes ", shape_str(a.shape()), " and ", shape_str(b.shape()),
        " cannot be multiplied (both operands need at least 1 dim)");
  detail::check_floating(a, "matmul");
  detail::check_same_dtype(a, b, "matmul");
  // As torch.matmul: a 1-D left operand is a row vector (1, K), a 1-D right operand a column
  // vector (K, 1); the added dim is removed from the result.
  const bool a_vector = a.dim() == 1, b_vector = b.dim() == 1;
  Tensor a2 = a_vector ? unsqueeze(a, 0) : a;
  Tensor b2 = b_vector ? unsqueeze(b, 1) : b;
  Tensor out = matmul_nd(a2, b2, a.shape(), b.shape());
  if (b_vector) out = squeeze(out, -1);
  if (a_vector) out = squeeze(out, b_vector ? -1 : -2);
  return out;
}

namespace {

// Checks linear's (or linear_relu's) arguments and computes y = x · Wᵀ + b, then relu with relu:
// (..., in)·(in, out) + (out) -> (..., out). The product is matmul's (Wᵀ is read with a BLAS flag,
// the batch dims of x folded into rows when its layout allows, else one gemm per matrix), and each
// thread applies the epilogue to the rows it has just written — no second pass over the output.
Tensor linear_forward(
    const Tensor& x, const Tensor& weight, const Tensor& bias, bool relu, const char* op) {
  if (!x.defined() || !weight.defined())
    fail<ValueError>(
        op, ": the input and the weight must be defined tensors (bias may be undefined: no bias)");
  detail::check_floating(x, op);
  auto shapes = [&] {  // for the errors
    return "input " + shape_str(x.shape()) + ", weight " + shape_str(weight.shape()) + ", bias " +
           (bias.defined() ? shape_str(bias.shape()) : "none");
  };
  if (weight.dim() != 2)
    fail<ShapeError>(op, ": the weight must be (out_features, in_features), got ", shapes());
  const int64_t out_features = weight.size(0), in_features = weight.size(1);
  if (x.dim() == 0 || x.size(-1) != in_features)
    fail<ShapeError>(op, ": the input must end in in_features = ", in_features, ", got ", shapes());
  if (bias.defined() && (bias.dim() != 1 || bias.size(0) != out_features))
    fail<ShapeError>(
        op, ": the bias must be (out_features) = (", out_features, "), got ", shapes());
  detail::check_same_dtype(x, weight, op);
  if (bias.defined()) detail::check_same_dtype(x, bias, op);

  Shape out_shape = x.shape();
  out_shape.back() = out_features;  // (..., out)
  detail::checked_nbytes(out_shape, x.dtype(), op);
  check_blas_sizes(
      x.dim() == 1 ? Shape{1, in_features} : x.shape(), {in_features, out_features}, op);
  Tensor out = detail::empty(out_shape, x.dtype(), op);  // (..., out)
  // A 1-D x is one row: (in) -> (1, in), its output (out) written as (1, out).
  const Tensor x_matrix = x.dim() == 1 ? x.detach().reshape({1, in_features}) : x.detach();
  const Tensor out_matrix = x.dim() == 1 ? out.detach().reshape({1, out_features}) : out;
  const Shape batch(x_matrix.shape().begin(), x_matrix.shape().end() - 2);
  matmul_into(x_matrix, transpose(weight.detach(), 0, 1), out_matrix, batch,
      bias.defined() ? contiguous(bias.detach()) : Tensor(), relu);
  return out;
}

// The gradients of y = x · Wᵀ + b from g, the gradient of y (..., out), seen as (rows, out) with
// rows all dims of x but the last. With relu_out (linear_relu's output y = relu(x · Wᵀ + b)), g is
// first masked to relu's gradient g · [y > 0] — [y > 0] = [x · Wᵀ + b > 0], relu's own mask —
// in the same pass that sums db.
Grads linear_grads(const Tensor& x, const Tensor& weight, const Tensor& g, const NeedsGrad& needs,
    const Tensor& relu_out = Tensor()) {
  const int64_t out_features = weight.size(0), in_features = weight.size(1);
  const int64_t rows = numel(Shape(x.shape().begin(), x.shape().end() - 1));
  Tensor g_rows = reshape(g, Shape{rows, out_features});  // (rows, out)
  Tensor db;
  std::vector<double> sums;  // db in double, column by column
  if (needs[2]) {
    sums.assign(static_cast<std::size_t>(out_features), 0.0);
    db = empty(Shape{out_features}, g.dtype());  // (out)
  }
  if (relu_out.defined() || needs[2]) {
    // One pass over g: masked[r, j] = y[r, j] > 0 ? g[r, j] : 0 (relu's backward) with relu, and
    // db[j] = Σ_r g[r, j] in double, row after row — sum_to's order, so the bits are those of
    // relu's backward and add's. Threads split the columns: each column is summed in row order
    // by one thread, whatever the thread count.
    const Tensor y_rows = relu_out.defined() ? reshape(relu_out.detach(), Shape{rows, out_features})
                                             : Tensor();  // (rows, out), contiguous
    const Tensor masked =
        relu_out.defined() ? empty(Shape{rows, out_features}, g.dtype()) : Tensor();  // (rows, out)
    if (g_rows.strides()[1] != 1) g_rows = contiguous(g_rows);  // rows of adjacent elements
    dispatch(g.dtype(), [&]<typename T>() {
      const T* pg = g_rows.data<T>();
      const int64_t ld = g_rows.strides()[0];
      const T* py = relu_out.defined() ? y_rows.data<T>() : nullptr;
      T* pm = relu_out.defined() ? masked.data<T>() : nullptr;
      double* acc = sums.empty() ? nullptr : sums.data();
      parallel_for(out_features, std::max<int64_t>(rows, 1), [&](int64_t begin, int64_t end) {
        detail::linear_backward_columns(pg, ld, py, pm, acc, rows, out_features, begin, end);
      });
      if (acc) {
        T* pdb = db.data<T>();
        for (int64_t j = 0; j < out_features; ++j) pdb[j] = static_cast<T>(acc[j]);
      }
    });
    if (relu_out.defined()) g_rows = masked;
  }
  Tensor dx, dw;
  // dx = g · W: (..., out)·(out, in) -> (..., in), the batch dims folded into rows
  if (needs[0])
    dx = relu_out.defined() ? reshape(matmul(g_rows, weight), x.shape()) : matmul(g, weight);
  // dW = gᵀ · x: (out, rows)·(rows, in) -> (out, in), one gemm over all rows; gᵀ is read with a
  // BLAS flag
  if (needs[1]) dw = matmul(transpose(g_rows, 0, 1), reshape(x, Shape{rows, in_features}));
  return {dx, dw, db};
}

}  // namespace

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  AG_PROFILE_OP(Op::linear);
  Tensor out = linear_forward(x, weight, bias, /*relu=*/false, "linear");
  if (!detail::any_requires_grad({x, weight, bias})) return out;
  // docs/ops.md, linear: dx = g · W, dW = gᵀ · x, db = Σ_rows g (rows: all dims of x but the last)
  return detail::record(Op::linear, out, {x, weight, bias}, /*saved=*/{x, weight},
      [x, weight](const Tensor& g, const NeedsGrad& needs) -> Grads {
        return linear_grads(x, weight, g, needs);
      });
}

Tensor linear_relu(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  AG_PROFILE_OP(Op::linear_relu);
  Tensor out = linear_forward(x, weight, bias, /*relu=*/true, "linear_relu");
  if (!detail::any_requires_grad({x, weight, bias})) return out;
  // docs/ops.md, linear_relu: linear's, with g · [y > 0] in place of g
  return detail::record(Op::linear_relu, out, {x, weight, bias}, /*saved=*/{x, weight, out},
      [x, weight, y = out.detach()](const Tensor& g, const NeedsGrad& needs) -> Grads {
        return linear_grads(x, weight, g, needs, y);
      });
}

}  // namespace ag
