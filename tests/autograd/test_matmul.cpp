// matmul: every operand layout against a plain triple loop, and proof that transposed operands
// reach BLAS as flags rather than copies.
#include <catch2/catch.hpp>

#include "autograd/autograd.h"
#include "autograd/ops.h"

using namespace ag;

namespace {

// C[b, i, j] = Σ_k A[b, i, k] · B[b, k, j] by loops, for contiguous 3-D inputs.
std::vector<double> reference_bmm(const Tensor& a, const Tensor& b) {
  const int64_t batch = a.size(0), m = a.size(1), k = a.size(2), n = b.size(2);
  std::vector<double> av = a.to_vector<double>(), bv = b.to_vector<double>(), c(batch * m * n, 0.0);
  for (int64_t p = 0; p < batch; ++p)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t q = 0; q < k; ++q) s += av[(p * m + i) * k + q] * bv[(p * k + q) * n + j];
        c[(p * m + i) * n + j] = s;
      }
  return c;
}

void check_close(
    const std::vector<double>& actual, const std::vector<double>& expected, double tol) {
  REQUIRE(actual.size() == expected.size());
  for (std::size_t i = 0; i < actual.size(); ++i)
    CHECK(actual[i] == Approx(expected[i]).margin(tol));
}

}  // namespace

TEST_CASE("matmul 2-D against loops, float32 and float64", "[matmul]") {
  for (DType dtype : {float32, float64}) {
    Generator g(1);
    Tensor a = randn({5, 7}, g, dtype), b = randn({7, 3}, g, dtype);
    Tensor c = matmul(a, b);
    CHECK(c.shape() == Shape{5, 3});
    check_close(c.to_vector<double>(), reference_bmm(a.unsqueeze(0), b.unsqueeze(0)), 1e-4);
  }
}

TEST_CASE("matmul batched, 3-D x 2-D, broadcast batch dims and vectors", "[matmul]") {
  Generator g(2);
  Tensor a = randn({4, 5, 6}, g, float64), b = randn({4, 6, 3}, g, float64),
         w = randn({6, 3}, g, float64);
  check_close(matmul(a, b).to_vector<double>(), reference_bmm(a, b), 1e-12);
  // 3-D x 2-D: the weight is shared by every batch (one tall gemm).
  check_close(matmul(a, w).to_vector<double>(),
      reference_bmm(a, w.unsqueeze(0).expand({4, 6, 3}).contiguous()), 1e-12);
  // (2,1,5,6) x (1,3,6,3) -> (2,3,5,3)
  Tensor x = randn({2, 1, 5, 6}, g, float64), y = randn({1, 3, 6, 3}, g, float64);
  Tensor z = matmul(x, y);
  CHECK(z.shape() == Shape{2, 3, 5, 3});
  Tensor xe = x.expand({2, 3, 5, 6}).reshape({6, 5, 6}),
         ye = y.expand({2, 3, 6, 3}).reshape({6, 6, 3});
  check_close(z.to_vector<double>(), reference_bmm(xe, ye), 1e-12);
  // 1-D operands, as torch.matmul.
  Tensor v = randn({6}, g, float64);
  CHECK(matmul(v, w).shape() == Shape{3});
  CHECK(matmul(w.transpose(0, 1), v).shape() == Shape{3});
  CHECK(matmul(v, v).dim() == 0);
  CHECK(matmul(v, v).item() == Approx(sum(v * v).item()));
  CHECK(matmul(a, v).shape() == Shape{4, 5});
}

TEST_CASE("matmul reads transposed and sliced operands without copying them", "[matmul]") {
  Generator g(3);
  Tensor q = randn({8, 10, 16}, g), k = randn({8, 12, 16}, g);
  Tensor kt = k.transpose(-1, -2);  // (8, 16, 12), a view
  const uint64_t before = detail::storage_allocation_count();
  Tensor scores = matmul(q, kt);
  CHECK(detail::storage_allocation_count() == before + 1);  // only the output
  check_close(scores.to_vector<double>(), reference_bmm(q, kt.contiguous()), 1e-4);

  // Both operands transposed, and a row-sliced operand (leading dimension > cols).
  Tensor a = randn({6, 4}, g), b = randn({5, 6}, g);
  const uint64_t before2 = detail::storage_allocation_count();
  Tensor c = matmul(a.transpose(0, 1), b.transpose(0, 1));   // (4,6)·(6,5)
  Tensor d = matmul(randn({3, 9}, g).slice(1, 0, 6), a);     // (3,6) view with ld 9
  CHECK(detail::storage_allocation_count() == before2 + 3);  // c, the randn, d
  check_close(c.to_vector<double>(),
      reference_bmm(
          a.transpose(0, 1).contiguous().unsqueeze(0), b.transpose(0, 1).contiguous().unsqueeze(0)),
      1e-4);
  CHECK(d.shape() == Shape{3, 4});
}

TEST_CASE("matmul backward with transposed operands copies nothing but its results", "[matmul]") {
  Generator g(4);
  Tensor a = randn({32, 16}, g).requires_grad_(), b = randn({16, 8}, g).requires_grad_();
  Tensor c = matmul(a, b);
  Tensor upstream = randn({32, 8}, g);
  const uint64_t before = detail::storage_allocation_count();
  c.backward(upstream);
  // dA = dC·Bᵀ and dB = Aᵀ·dC: one allocation each, the transposes are BLAS flags.
  CHECK(detail::storage_allocation_count() - before == 2);
}

TEST_CASE("matmul with size-0 dims", "[matmul]") {
  CHECK(matmul(ones({0, 3}), ones({3, 4})).shape() == Shape{0, 4});
  Tensor empty_k = matmul(ones({2, 0}), ones({0, 3}));
  CHECK(empty_k.shape() == Shape{2, 3});
  CHECK(empty_k.sum().item() == 0.0);
}

TEST_CASE(
    "matmul of a broadcast (stride-0) operand copies it first and stays correct", "[matmul]") {
  Tensor row = tensor({1.0, 2.0, 3.0}, float64).reshape({1, 3});
  Tensor a = row.expand({4, 3});  // stride 0 between rows: BLAS cannot read that
  Tensor b = ones({3, 2}, float64);
  CHECK(matmul(a, b).to_vector<double>() == std::vector<double>(8, 6.0));
}

// ---- linear -------------------------------------------------------------------------------------

namespace {

// Restores ag's thread count when it goes out of scope.
struct ThreadCount {
  explicit ThreadCount(int n) : previous(get_num_threads()) { set_num_threads(n); }
  ~ThreadCount() { set_num_threads(previous); }
  int previous;
};

struct LinearRun {
  std::vector<float> out, dx, dw, db;
};

// y = linear(x, W, b) (fused) or matmul(x, Wᵀ) + b (composed), or with relu: linear_relu or
// relu(matmul(x, Wᵀ) + b); then backward with `upstream`. x_of maps the leaf x0 to the input (a
// view of it, or itself).
template <class XOf>
LinearRun run_linear(bool fused, const Tensor& x_values, const Tensor& w_values,
    const Tensor& b_values, const Tensor& upstream, XOf x_of, bool with_relu = false) {
  Tensor x0 = x_values.clone().requires_grad_();
  Tensor w = w_values.clone().requires_grad_();
  Tensor b = b_values.defined() ? b_values.clone().requires_grad_() : Tensor();
  Tensor x = x_of(x0);
  Tensor y;
  if (fused) {
    y = with_relu ? linear_relu(x, w, b) : linear(x, w, b);
  } else {
    y = matmul(x, w.transpose(0, 1));
    if (b.defined()) y = y + b;
    if (with_relu) y = relu(y);
  }
  y.backward(upstream);
  return {y.to_vector<float>(), x0.grad().to_vector<float>(), w.grad().to_vector<float>(),
      b.defined() ? b.grad().to_vector<float>() : std::vector<float>()};
}

}  // namespace

TEST_CASE(
    "linear and linear_relu give the bits of matmul(x, Wᵀ) + b (and relu), forward and "
    "backward",
    "[matmul][linear]") {
  // in = 400: past the K at which OpenBLAS splits a product's sum into blocks (a gemm with
  // beta = 1 would round differently there); 2 × 33 rows of 400 · 70 are enough work for the
  // product to be split over 2 threads.
  Generator g(7);
  const Tensor w = randn({70, 400}, g), b = randn({70}, g);
  const Tensor x3 = randn({2, 33, 400}, g), x_permuted = randn({33, 2, 400}, g);
  const Tensor x2 = randn({45, 400}, g), x1 = randn({400}, g);
  const Tensor up3 = randn({2, 33, 70}, g), up2 = randn({45, 70}, g), up1 = randn({70}, g);
  auto itself = [](const Tensor& x) { return x; };
  auto swap_01 = [](const Tensor& x) { return x.transpose(0, 1); };  // rows do not fold
  for (int threads : {1, 2}) {
    ThreadCount count(threads);
    INFO(threads << " thread(s)");
    struct Case {
      const char* name;
      Tensor x, bias, upstream;
      bool permuted;
    };
    for (const Case& c :
        {Case{"3-D", x3, b, up3, false}, Case{"3-D, no bias", x3, Tensor(), up3, false},
            Case{"permuted 3-D", x_permuted, b, up3, true}, Case{"2-D", x2, b, up2, false},
            Case{"1-D", x1, b, up1, false}}) {
      INFO(c.name);
      for (bool with_relu : {false, true}) {
        INFO((with_relu ? "linear_relu" : "linear"));
        LinearRun fused, composed;
        if (c.permuted) {
          fused = run_linear(true, c.x, w, c.bias, c.upstream, swap_01, with_relu);
          composed = run_linear(false, c.x, w, c.bias, c.upstream, swap_01, with_relu);
        } else {
          fused = run_linear(true, c.x, w, c.bias, c.upstream, itself, with_relu);
          composed = run_linear(false, c.x, w, c.bias, c.upstream, itself, with_relu);
        }
        CHECK(fused.out == composed.out);
        CHECK(fused.dx == composed.dx);
        CHECK(fused.dw == composed.dw);
        CHECK(fused.db == composed.db);
      }
    }
  }
}

TEST_CASE("linear records one node and skips the gradients nobody needs", "[matmul][linear]") {
  Generator g(8);
  Tensor x = randn({4, 3}, g), w = randn({5, 3}, g).requires_grad_(), b = randn({5}, g);
  Tensor y = linear(x, w, b);
  REQUIRE(y.grad_fn() != nullptr);
  CHECK(y.grad_fn()->name() == std::string("linear"));
  y.sum().backward();
  // dW = gᵀ · x with g all ones: column sums of x on every row of dW
  const std::vector<double> xs = x.to_vector<double>(), dw = w.grad().to_vector<double>();
  for (int64_t o = 0; o < 5; ++o)
    for (int64_t i = 0; i < 3; ++i)
      CHECK(dw[o * 3 + i] == Approx(xs[i] + xs[3 + i] + xs[6 + i] + xs[9 + i]));
  CHECK_FALSE(x.grad().defined());
  CHECK_FALSE(b.grad().defined());
  // Nothing requires grad: no node.
  CHECK(linear(x, w.detach(), b).grad_fn() == nullptr);
}

TEST_CASE("linear with size-0 dims", "[matmul][linear]") {
  Tensor b = tensor({1.0, 2.0}, float64);
  // in = 0: an empty product, so every row is the bias
  Tensor y = linear(ones({3, 0}, float64), ones({2, 0}, float64), b);
  CHECK(y.shape() == Shape{3, 2});
  CHECK(y.to_vector<double>() == std::vector<double>{1, 2, 1, 2, 1, 2});
  CHECK(linear(ones({3, 0}, float64), ones({2, 0}, float64)).to_vector<double>() ==
        std::vector<double>(6, 0.0));
  // no rows
  Tensor w = ones({2, 4}, float64).requires_grad_();
  Tensor empty_rows = linear(ones({0, 4}, float64), w, b);
  CHECK(empty_rows.shape() == Shape{0, 2});
  empty_rows.sum().backward();
  CHECK(w.grad().to_vector<double>() == std::vector<double>(8, 0.0));
}
