// flash_attention (ag::attention's tiled, online-softmax kernel) against
// scaled_dot_product_attention (the whole-row kernel, itself tested against d2l's composed
// attention in test_attention_op.cpp), each forced with an AttentionKernelGuard:
// outputs, gradients and dropout draws agree for sequences that span several tiles, for
// every kind of valid_lens (none, (B,), (B, Tq) with 0 and Tk, causal); the backward holds no
// (Tq × Tk) weights; bad shapes are errors naming the op. Its float64 gradchecks are in
// test_gradcheck_ops.cpp.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "attention_kernels.h"
#include "autograd/allocator.h"
#include "autograd/autograd.h"
#include "autograd/ops.h"
#include "relative_diff.h"

using namespace ag;
using Catch::Matchers::Contains;

namespace {

struct KernelRun {
  Tensor out, grad_q, grad_k, grad_v;
  GeneratorState generator_after;
};

// One forward and backward from (B, T, H, C) leaves holding the given values, through their
// (B, H, T, C) head views, tiled or whole-row.
KernelRun run_tiled_or_whole_rows(bool tiled, const Tensor& q_values, const Tensor& k_values,
    const Tensor& v_values, const Tensor& lens, double p, const Tensor& upstream) {
  Tensor q = q_values.detach().clone().requires_grad_();  // (B, Tq, H, d)
  Tensor k = k_values.detach().clone().requires_grad_();  // (B, Tk, H, d)
  Tensor v = v_values.detach().clone().requires_grad_();  // (B, Tk, H, dv)
  Generator generator(11);
  KernelRun r;
  r.out = tiled
              ? tiled_attention(heads(q), heads(k), heads(v), lens, p, /*training=*/true, generator)
              : whole_row_attention(
                    heads(q), heads(k), heads(v), lens, p, /*training=*/true, generator);
  r.generator_after = generator.state();
  r.out.backward(upstream);
  r.grad_q = q.grad();
  r.grad_k = k.grad();
  r.grad_v = v.grad();
  return r;
}

struct LensCase {
  std::string name;
  Tensor lens;
};

}  // namespace

TEST_CASE(
    "flash_attention equals scaled_dot_product_attention across tiles: output, gradients, dropout",
    "[flash_attention]") {
  // Tq 130 and Tk 300: three query blocks of 64 and three key blocks of 128, the last ones partial.
  const int64_t B = 2, H = 3, Tq = 130, Tk = 300, d = 8, dv = 5;
  std::vector<double> per_query(static_cast<std::size_t>(B * Tq));
  for (int64_t i = 0; i < B * Tq; ++i)
    per_query[static_cast<std::size_t>(i)] = static_cast<double>((i * 37) % (Tk + 1));
  per_query[3] = 0;     // a row with no valid key: uniform weights, zero dS
  per_query[140] = Tk;  // a row with every key
  const std::vector<LensCase> lens_cases = {
      {"none", Tensor()},
      {"(B,) 300 and 137", tensor({300, 137})},
      {"(B, Tq) with 0 and Tk", tensor(per_query, {B, Tq})},
  };
  for (DType dtype : {float64, float32})
    for (const LensCase& c : lens_cases)
      for (double p : {0.0, 0.3}) {
        DYNAMIC_SECTION(dtype_name(dtype) << ", valid_lens " << c.name << ", dropout " << p) {
          Generator values(5);
          const Tensor q = randn({B, Tq, H, d}, values, dtype),
                       k = randn({B, Tk, H, d}, values, dtype);
          const Tensor v = randn({B, Tk, H, dv}, values, dtype),
                       upstream = randn({B, H, Tq, dv}, values, dtype);
          const KernelRun tiled = run_tiled_or_whole_rows(true, q, k, v, c.lens, p, upstream);
          const KernelRun whole = run_tiled_or_whole_rows(false, q, k, v, c.lens, p, upstream);
          // float64: both are exact up to rounding (~1e-16 per operation); float32: the exp (1 ulp)
          // and sums over 300 keys in another order, a few float ulps.
          const double tolerance = dtype == float64 ? 1e-12 : 5e-6;
          CHECK(tiled.out.shape() == Shape{B, H, Tq, dv});
          CHECK(tiled.out.strides() == whole.out.strides());
          CHECK(relative_diff(tiled.out, whole.out) <= tolerance);
          CHECK(relative_diff(tiled.grad_q, whole.grad_q) <= tolerance);
          CHECK(relative_diff(tiled.grad_k, whole.grad_k) <= tolerance);
          CHECK(relative_diff(tiled.grad_v, whole.grad_v) <= tolerance);
          // The same Philox blocks reserved: the generator is left in the same place.
          CHECK(tiled.generator_after == whole.generator_after);
        }
      }
}

TEST_CASE(
    "flash_attention with a causal mask skips the key tiles past the diagonal and still agrees",
    "[flash_attention]") {
  // The decoder's training mask: query i sees keys 0..i (d2l's dec_valid_lens = 1..T).
  const int64_t B = 2, H = 2, T = 300, d = 4;
  std::vector<double> causal(static_cast<std::size_t>(B * T));
  for (int64_t i = 0; i < B * T; ++i)
    causal[static_cast<std::size_t>(i)] = static_cast<double>(i % T + 1);
  const Tensor lens = tensor(causal, {B, T});
  Generator values(8);
  const Tensor q = randn({B, T, H, d}, values, float64), k = randn({B, T, H, d}, values, float64);
  const Tensor v = randn({B, T, H, d}, values, float64),
               upstream = randn({B, H, T, d}, values, float64);
  const KernelRun tiled = run_tiled_or_whole_rows(true, q, k, v, lens, 0.1, upstream);
  const KernelRun whole = run_tiled_or_whole_rows(false, q, k, v, lens, 0.1, upstream);
  CHECK(relative_diff(tiled.out, whole.out) <= 1e-12);
  CHECK(relative_diff(tiled.grad_q, whole.grad_q) <= 1e-12);
  CHECK(relative_diff(tiled.grad_k, whole.grad_k) <= 1e-12);
  CHECK(relative_diff(tiled.grad_v, whole.grad_v) <= 1e-12);
  // Query 0 sees only key 0: its output is v_0 (no dropout here to rescale it)
  Generator unused(0);
  // (B, H, T, d)
  const Tensor first = tiled_attention(heads(q), heads(k), heads(v), lens, 0.0, false, unused);
  CHECK(relative_diff(first.select(2, 0), heads(v).select(2, 0)) <= 1e-15);
}

TEST_CASE("flash_attention's backward holds O(T) per head, the whole-row kernel O(T²)",
    "[flash_attention]") {
  const int64_t B = 1, H = 2, T = 256, d = 16;
  Generator values(1), generator(0);
  const Tensor q = randn({B, H, T, d}, values).requires_grad_(),
               k = randn({B, H, T, d}, values).requires_grad_();
  const Tensor v = randn({B, H, T, d}, values).requires_grad_();
  const std::size_t weights_bytes =
      static_cast<std::size_t>(B * H * T * T) * sizeof(float);  // 512 KB
  auto held_by_forward = [&](bool tiled) {
    const std::size_t before = allocator_stats().in_use_bytes;
    const Tensor out = tiled ? tiled_attention(q, k, v, Tensor(), 0.0, true, generator)
                             : whole_row_attention(q, k, v, Tensor(), 0.0, true, generator);
    return allocator_stats().in_use_bytes - before;  // the output and what the backward saved
  };
  const std::size_t output_bytes = static_cast<std::size_t>(B * H * T * d) * sizeof(float);
  CHECK(held_by_forward(false) >= output_bytes + weights_bytes);
  CHECK(held_by_forward(true) <=
        output_bytes + static_cast<std::size_t>(B * H * T) * sizeof(float) + 4096);
}

TEST_CASE("flash_attention: only the inputs that require grad get one", "[flash_attention]") {
  Generator values(9), generator(1);
  const Tensor q = randn({2, 70, 2, 4}, values, float64),
               k = randn({2, 140, 2, 4}, values, float64);
  Tensor v = randn({2, 140, 2, 3}, values, float64).requires_grad_();
  const Tensor upstream = randn({2, 2, 70, 3}, values, float64);
  const Tensor out =
      tiled_attention(heads(q), heads(k), heads(v), tensor({130, 1}), 0.0, true, generator);
  out.backward(upstream);
  Tensor v_reference = v.detach().clone().requires_grad_();
  whole_row_attention(
      heads(q), heads(k), heads(v_reference), tensor({130, 1}), 0.0, true, generator)
      .backward(upstream);
  CHECK(relative_diff(v.grad(), v_reference.grad()) <= 1e-12);
}

TEST_CASE("flash_attention: errors name the op and the shapes", "[flash_attention][errors]") {
  Generator g(0);
  const Tensor q = zeros({2, 3, 4, 5}), k = zeros({2, 3, 6, 5}), v = zeros({2, 3, 6, 7});
  CHECK_NOTHROW(tiled_attention(q, k, v, Tensor(), 0.0, true, g));
  CHECK_THROWS_WITH(tiled_attention(zeros({2, 4, 5}), k, v, Tensor(), 0.0, true, g),
      Contains("flash_attention: q [2,4,5], k [2,3,6,5] and v [2,3,6,7] do not fit"));
  CHECK_THROWS_AS(tiled_attention(q, k, zeros({2, 3, 5, 7}), Tensor(), 0.0, true, g), ShapeError);
  CHECK_THROWS_AS(tiled_attention(q, k.to(float64), v, Tensor(), 0.0, true, g), DTypeError);
  CHECK_THROWS_WITH(
      tiled_attention(q, k, v, tensor({7, 1}), 0.0, true, g), Contains("flash_attention:"));
  CHECK_THROWS_WITH(tiled_attention(q, k, v, Tensor(), 1.5, true, g),
      Contains("flash_attention: dropout probability 1.5 is outside [0, 1]"));
}
