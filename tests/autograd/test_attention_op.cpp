// scaled_dot_product_attention, ag::attention's whole-row kernel (forced with
// AttentionKernel::whole_rows), against the same attention composed from ag's primitives (d2l's
// DotProductAttention on (B, H, T, C) heads): outputs, weights, gradients and dropout draws agree;
// the head views are read in place; bad shapes and values are errors naming the op and the shapes.
// Its float64 gradchecks are in test_gradcheck_ops.cpp; the kernel choice is tested in
// test_attention_dispatch.cpp.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "attention_kernels.h"
#include "autograd/autograd.h"
#include "autograd/detail/attention_kernels.h"
#include "autograd/detail/blas.h"
#include "autograd/ops.h"
#include "tensor_compare.h"

using namespace ag;
using Catch::Matchers::Contains;

namespace {

// d2l's composed attention on heads: q (B, H, Tq, d), k (B, H, Tk, d), v (B, H, Tk, dv).
Tensor composed_d2l_attention(const Tensor& q, const Tensor& k, const Tensor& v,
    const Tensor& valid_lens, double p, bool training, Generator& generator, Tensor* weights_out) {
  const int64_t B = q.size(0), H = q.size(1), Tq = q.size(2), Tk = k.size(2);
  Tensor scores =
      matmul(q, k.transpose(2, 3)) / std::sqrt(static_cast<double>(q.size(3)));  // (B, H, Tq, Tk)
  if (valid_lens.defined()) {
    // masked_softmax's −1e6 fill at key positions >= the valid length
    const Tensor lens = valid_lens.to(q.dtype()).reshape(
        valid_lens.dim() == 1 ? Shape{B, 1, 1, 1} : Shape{B, 1, Tq, 1});
    const Tensor positions = arange(static_cast<double>(Tk), q.dtype()).reshape({1, 1, 1, Tk});
    scores = masked_fill(scores, ge(positions, lens), -1e6);
  }
  Tensor weights = softmax(scores, -1);  // (B, H, Tq, Tk)
  if (weights_out) *weights_out = weights.detach();
  // Dropout on the weights as the (B·H, Tq, Tk) tensor DotProductAttention sees
  Tensor dropped =
      dropout(weights.reshape({B * H, Tq, Tk}), p, training, generator).reshape({B, H, Tq, Tk});
  return matmul(dropped, v);  // (B, H, Tq, dv)
}

struct SdpaRun {
  Tensor out, weights, grad_q, grad_k, grad_v;
  GeneratorState generator_after;
};

// One forward and backward from leaves (B, T, H, C) of the given values, with upstream gradient
// `upstream` (B, H, Tq, dv), fused or composed.
SdpaRun run_sdpa(bool fused, const Tensor& q_values, const Tensor& k_values, const Tensor& v_values,
    const Tensor& lens, double p, bool training, const Tensor& upstream) {
  Tensor q_source = q_values.detach().clone().requires_grad_();  // (B, Tq, H, d)
  Tensor k_source = k_values.detach().clone().requires_grad_();  // (B, Tk, H, d)
  Tensor v_source = v_values.detach().clone().requires_grad_();  // (B, Tk, H, dv)
  Generator generator(7);
  SdpaRun r;
  r.out = fused ? whole_row_attention(heads(q_source), heads(k_source), heads(v_source), lens, p,
                      training, generator, &r.weights)
                : composed_d2l_attention(heads(q_source), heads(k_source), heads(v_source), lens, p,
                      training, generator, &r.weights);
  r.generator_after = generator.state();
  r.out.backward(upstream);
  r.grad_q = q_source.grad();
  r.grad_k = k_source.grad();
  r.grad_v = v_source.grad();
  return r;
}

}  // namespace

TEST_CASE(
    "scaled_dot_product_attention equals the composed attention: output, weights, gradients, "
    "dropout",
    "[attention_op]") {
  const int64_t B = 3, H = 2, Tq = 4, Tk = 5, d = 3, dv = 2;
  struct Lens {
    std::string name;
    Tensor lens;
  };
  const std::vector<Lens> cases = {
      {"no valid_lens", Tensor()},
      {"(B,) valid_lens 2, 0, 5", tensor({2, 0, 5})},
      {"(B,Tq) valid_lens with 0 and Tk", tensor({1, 0, 5, 3, 2, 2, 4, 0, 5, 5, 1, 3}, {B, Tq})},
  };
  for (DType dtype : {float64, float32}) {
    // float64 agrees to rounding; float32 differs only by the order of a few float sums
    const double tolerance = dtype == float64 ? 1e-12 : 2e-6;
    for (const Lens& c : cases)
      for (double p : {0.0, 0.3})
        for (bool training : {true, false}) {
          INFO(dtype_name(dtype) << ", " << c.name << ", dropout " << p
                                 << (training ? ", training" : ", eval"));
          Generator values(11);
          const Tensor q = randn({B, Tq, H, d}, values, dtype),
                       k = randn({B, Tk, H, d}, values, dtype);
          const Tensor v = randn({B, Tk, H, dv}, values, dtype),
                       upstream = randn({B, H, Tq, dv}, values, dtype);
          const SdpaRun fused = run_sdpa(true, q, k, v, c.lens, p, training, upstream);
          const SdpaRun composed = run_sdpa(false, q, k, v, c.lens, p, training, upstream);
          CHECK(fused.out.shape() == Shape{B, H, Tq, dv});
          CHECK(fused.weights.shape() == Shape{B, H, Tq, Tk});
          CHECK(max_abs_diff(fused.out, composed.out) <= tolerance);
          CHECK(max_abs_diff(fused.weights, composed.weights) <= tolerance);
          CHECK(max_abs_diff(fused.grad_q, composed.grad_q) <= tolerance);
          CHECK(max_abs_diff(fused.grad_k, composed.grad_k) <= tolerance);
          CHECK(max_abs_diff(fused.grad_v, composed.grad_v) <= tolerance);
          // Both reserved the same Philox blocks: the next draws of the generator agree too.
          CHECK(fused.generator_after == composed.generator_after);
        }
  }
}

namespace {

// The whole-row kernel making whole products, masked keys and all, for its scope.
struct WholeProducts {
  WholeProducts() { detail::set_skips_masked_keys(false); }
  ~WholeProducts() { detail::set_skips_masked_keys(true); }
  WholeProducts(const WholeProducts&) = delete;
  WholeProducts& operator=(const WholeProducts&) = delete;
};

}  // namespace

TEST_CASE(
    "scaled_dot_product_attention leaves the masked keys out of its products: the whole products' "
    "bits",
    "[attention_op]") {
  // Blocks of 16 query rows (or keys): Tq 40 makes blocks of 16, 16 and 8.
  const int64_t B = 2, H = 3, Tq = 40, d = 8, dv = 12;
  REQUIRE(detail::skips_masked_keys());
  std::vector<double> causal(B * Tq), ragged(B * Tq);  // (B, Tq) lengths
  for (int64_t i = 0; i < B * Tq; ++i) {
    causal[static_cast<std::size_t>(i)] = static_cast<double>(i % Tq + 1);
    ragged[static_cast<std::size_t>(i)] = static_cast<double>((i * 17) % (Tq + 1));  // 0 to Tq
  }
  struct Lens {
    std::string name;
    Tensor lens;
  };
  const std::vector<Lens> cases = {
      {"causal (B,Tq) valid_lens", tensor(causal, {B, Tq})},
      {"(B,Tq) valid_lens 0 to Tq, out of order", tensor(ragged, {B, Tq})},
      {"(B,) valid_lens 23 and 0", tensor({23, 0})},
  };
  // ag's kernel makes every product here when it makes the largest (float32, AVX-512, on): then it
  // sums each element in order, and the terms left out are 0·x at either end of the sum.
  const bool kernel_makes_them =
      detail::small_sgemm_makes(CblasNoTrans, CblasTrans, Tq, Tq, d) &&
      detail::small_sgemm_makes(CblasNoTrans, CblasNoTrans, Tq, dv, Tq) &&
      detail::small_sgemm_makes(CblasTrans, CblasNoTrans, Tq, d, Tq);
  for (DType dtype : {float32, float64})
    for (const Lens& c : cases)
      for (double p : {0.0, 0.3}) {
        INFO(dtype_name(dtype) << ", " << c.name << ", dropout " << p);
        Generator values(21);
        const Tensor q = randn({B, Tq, H, d}, values, dtype),
                     k = randn({B, Tq, H, d}, values, dtype);
        const Tensor v = randn({B, Tq, H, dv}, values, dtype),
                     upstream = randn({B, H, Tq, dv}, values, dtype);
        const SdpaRun skipped = run_sdpa(true, q, k, v, c.lens, p, true, upstream);
        SdpaRun whole;
        {
          WholeProducts whole_products;
          whole = run_sdpa(true, q, k, v, c.lens, p, true, upstream);
        }
        const std::vector<std::pair<const Tensor*, const Tensor*>> pairs = {
            {&skipped.out, &whole.out}, {&skipped.weights, &whole.weights},
            {&skipped.grad_q, &whole.grad_q}, {&skipped.grad_k, &whole.grad_k},
            {&skipped.grad_v, &whole.grad_v}};
        for (const auto& [shorter, full] : pairs) {
          if (dtype == float32 && kernel_makes_them)
            CHECK(shorter->to_vector<float>() == full->to_vector<float>());
          else
            CHECK(max_abs_diff(*shorter, *full) <= (dtype == float64 ? 1e-12 : 2e-6));
        }
        // and both are d2l's attention (to float64's rounding)
        if (dtype == float64) {
          const SdpaRun composed = run_sdpa(false, q, k, v, c.lens, p, true, upstream);
          CHECK(max_abs_diff(skipped.out, composed.out) <= 1e-12);
          CHECK(max_abs_diff(skipped.grad_q, composed.grad_q) <= 1e-12);
          CHECK(max_abs_diff(skipped.grad_k, composed.grad_k) <= 1e-12);
          CHECK(max_abs_diff(skipped.grad_v, composed.grad_v) <= 1e-12);
        }
      }
}

TEST_CASE(
    "scaled_dot_product_attention: dropout drops whole weights, as ag::dropout on (B·H, Tq, Tk)",
    "[attention_op]") {
  // With V the identity (Tk = dv), O = P̃: the output is the dropped weights themselves.
  const int64_t B = 2, H = 3, Tq = 4, Tk = 6;
  Generator values(3);
  const Tensor q = randn({B, H, Tq, 5}, values, float64), k = randn({B, H, Tk, 5}, values, float64);
  const Tensor identity =
      eq(arange(Tk, float64).reshape({Tk, 1}), arange(Tk, float64).reshape({1, Tk})).to(float64);
  const Tensor v =
      identity.reshape({1, 1, Tk, Tk}).expand({B, H, Tk, Tk}).contiguous();  // (B, H, Tk, Tk)
  Generator fused_generator(5), reference_generator(5);
  Tensor weights;
  const Tensor out = whole_row_attention(q, k, v, Tensor(), 0.5, true, fused_generator, &weights);
  const Tensor expected = dropout(weights.reshape({B * H, Tq, Tk}), 0.5, true, reference_generator);
  CHECK(out.reshape({B * H, Tq, Tk}).to_vector<double>() == expected.to_vector<double>());
  int64_t dropped = 0;
  for (double w : out.to_vector<double>()) dropped += w == 0.0;
  CHECK(dropped > 0);
  CHECK(dropped < B * H * Tq * Tk);
}

TEST_CASE(
    "scaled_dot_product_attention: only the inputs that require grad get one", "[attention_op]") {
  Generator values(9), generator(1);
  const Tensor q = randn({2, 3, 2, 4}, values, float64), k = randn({2, 5, 2, 4}, values, float64);
  Tensor v = randn({2, 5, 2, 3}, values, float64).requires_grad_();
  const Tensor upstream = randn({2, 2, 3, 3}, values, float64);
  whole_row_attention(heads(q), heads(k), heads(v), tensor({3, 1}), 0.0, true, generator)
      .backward(upstream);
  Tensor v_reference = v.detach().clone().requires_grad_();
  composed_d2l_attention(
      heads(q), heads(k), heads(v_reference), tensor({3, 1}), 0.0, true, generator, nullptr)
      .backward(upstream);
  CHECK(max_abs_diff(v.grad(), v_reference.grad()) <= 1e-12);
}

TEST_CASE("attention's backward hands the projections' head views their gradients without a copy",
    "[attention_op]") {
  const int64_t B = 2, T = 5, H = 4, d = 3;
  for (AttentionKernel kernel : {AttentionKernel::whole_rows, AttentionKernel::tiled}) {
    INFO((kernel == AttentionKernel::tiled ? "tiled" : "whole rows"));
    AttentionKernelGuard chosen(kernel);
    Generator values(4), generator(0);
    // MultiHeadAttention's layout: projections (B, T, H·d) split into (B, H, T, d) head views,
    // the output's heads joined back into (B, T, H·d).
    Tensor projected_q = randn({B, T, H * d}, values).requires_grad_();
    Tensor projected_k = randn({B, T, H * d}, values).requires_grad_();
    Tensor projected_v = randn({B, T, H * d}, values).requires_grad_();
    auto split = [&](const Tensor& x) { return x.reshape({B, T, H, d}).permute({0, 2, 1, 3}); };
    const Tensor q = split(projected_q), k = split(projected_k), v = split(projected_v);
    const Tensor out = attention(q, k, v, tensor({5, 2}), 0.2, true, generator);  // (B, H, T, d)
    const Tensor joined = out.permute({0, 2, 1, 3}).reshape({B, T, H * d});       // (B, T, H·d)
    // What reaches the head views: each gradient in its view's layout (a dense (B, T, H, d)
    // buffer), and the output's gradient as the permuted view of the upstream one.
    Shape q_grad_strides, out_grad_strides;
    q.register_hook([&](const Tensor& g) {
      q_grad_strides = g.strides();
      return Tensor();
    });
    out.register_hook([&](const Tensor& g) {
      out_grad_strides = g.strides();
      return Tensor();
    });
    const Tensor upstream = randn({B, T, H * d}, values);
    const uint64_t before = detail::storage_allocation_count();
    joined.backward(upstream);
    CHECK(out_grad_strides == Shape{T * H * d, d, H * d, 1});
    CHECK(q_grad_strides == Shape{T * H * d, d, H * d, 1});
    // dq, dk and dv, which the projections' leaves keep as their .grad: no other buffer. (A copy
    // per head view and one of the output's gradient made it 8; a copy of `upstream`, which the
    // caller keeps and permute's node now reads without writing, made it 4.)
    CHECK(detail::storage_allocation_count() == before + 3);
    for (const Tensor* leaf : {&projected_q, &projected_k, &projected_v}) {
      CHECK(leaf->grad().is_contiguous());
      CHECK(leaf->grad().shape() == Shape{B, T, H * d});
    }
  }
}

TEST_CASE(
    "attention's backward hands a fused QKV projection's head views their gradients "
    "without a copy",
    "[attention_op]") {
  // nanoGPT's CausalSelfAttention: one projection (B, T, 3·H·d), split into q, k and v (slices),
  // each viewed as (B, T, H, d) and transposed to (B, H, T, d). The slices leave gaps, so the
  // views are not dense; their gradients are laid out in the views' stride order all the same.
  const int64_t B = 2, T = 5, H = 4, d = 3, C = H * d;
  for (AttentionKernel kernel : {AttentionKernel::whole_rows, AttentionKernel::tiled}) {
    INFO((kernel == AttentionKernel::tiled ? "tiled" : "whole rows"));
    AttentionKernelGuard chosen(kernel);
    Generator values(6);
    Tensor x = randn({B, T, 3 * C}, values).requires_grad_();
    const Tensor upstream = randn({B, T, C}, values);
    // The same attention on contiguous copies of the heads: the reference gradient.
    auto gradient_of_qkv = [&](bool copy_heads) {
      x.zero_grad();
      // the projection, an op's output (slices of a leaf take slice's own backward)
      const Tensor qkv = mul(x, 2.0);                      // (B, T, 3C)
      const std::vector<Tensor> parts = split(qkv, C, 2);  // 3 × (B, T, C) slices
      std::vector<Tensor> heads;
      for (const Tensor& part : parts) {
        Tensor head = part.view({B, T, H, d}).transpose(1, 2);  // (B, H, T, d)
        heads.push_back(copy_heads ? head.contiguous() : head);
      }
      Shape q_grad_strides;
      heads[0].register_hook([&](const Tensor& g) {
        q_grad_strides = g.strides();
        return Tensor();
      });
      const Tensor out = attention(heads[0], heads[1], heads[2], {.is_causal = true});
      const Tensor joined = out.transpose(1, 2).contiguous().view({B, T, C});  // (B, T, C)
      const uint64_t before = detail::storage_allocation_count();
      joined.backward(upstream);
      return std::tuple{x.grad(), q_grad_strides, detail::storage_allocation_count() - before};
    };
    const Tensor reference = std::get<0>(gradient_of_qkv(true));
    const auto [grad, q_grad_strides, allocations] = gradient_of_qkv(false);
    CHECK(q_grad_strides == Shape{T * C, d, C, 1});  // a dense (B, T, H, d) buffer
    CHECK(max_abs_diff(grad, reference) == 0.0);
    // dq, dk and dv, the projection's gradient they are written into, and x's: nothing else.
    // (Each head's gradient was contiguous (B, H, T, d), and view's backward copied it: 8.)
    CHECK(allocations == 5);
  }
}

TEST_CASE(
    "scaled_dot_product_attention reads permuted head views in place and returns a view of (B, Tq, "
    "H, dv)",
    "[attention_op]") {
  const int64_t B = 2, T = 5, H = 4, d = 3;
  Generator values(2), generator(0);
  // The projections as MultiHeadAttention has them: (B, T, H·d), split into heads by views.
  const Tensor projected_q = randn({B, T, H * d}, values),
               projected_k = randn({B, T, H * d}, values);
  const Tensor projected_v = randn({B, T, H * d}, values);
  auto split = [&](const Tensor& x) {
    return x.reshape({B, T, H, d}).permute({0, 2, 1, 3});
  };  // (B, H, T, d)
  const Tensor q = split(projected_q), k = split(projected_k), v = split(projected_v);
  REQUIRE(q.shares_storage(projected_q));
  const Tensor lens = tensor({5, 2});
  const uint64_t before = detail::storage_allocation_count();
  Tensor weights;
  const Tensor out = whole_row_attention(q, k, v, lens, 0.2, true, generator, &weights);
  CHECK(detail::storage_allocation_count() ==
        before + 2);  // the weights P and the output, nothing else
  CHECK(out.shape() == Shape{B, H, T, d});
  CHECK(out.strides() ==
        Shape{T * H * d, d, H * d, 1});  // a dense (B, T, H, d) buffer seen as (B, H, T, d)
  const Tensor joined = out.permute({0, 2, 1, 3}).reshape({B, T, H * d});  // (B, T, H·d)
  CHECK(joined.shares_storage(out));
  CHECK(joined.is_contiguous());
  CHECK(detail::storage_allocation_count() == before + 2);
}

TEST_CASE(
    "scaled_dot_product_attention: errors name the op and the shapes", "[attention_op][errors]") {
  Generator g(0);
  const Tensor q = zeros({2, 3, 4, 5}), k = zeros({2, 3, 6, 5}), v = zeros({2, 3, 6, 7});
  CHECK_NOTHROW(whole_row_attention(q, k, v, Tensor(), 0.0, true, g));
  CHECK_THROWS_AS(whole_row_attention(zeros({2, 4, 5}), k, v, Tensor(), 0.0, true, g), ShapeError);
  CHECK_THROWS_WITH(whole_row_attention(zeros({2, 4, 5}), k, v, Tensor(), 0.0, true, g),
      Contains("scaled_dot_product_attention: q [2,4,5], k [2,3,6,5] and v [2,3,6,7] do not fit"));
  // d of q and k differ; Tk of k and v differ; heads differ
  CHECK_THROWS_AS(
      whole_row_attention(q, zeros({2, 3, 6, 4}), v, Tensor(), 0.0, true, g), ShapeError);
  CHECK_THROWS_AS(
      whole_row_attention(q, k, zeros({2, 3, 5, 7}), Tensor(), 0.0, true, g), ShapeError);
  CHECK_THROWS_WITH(whole_row_attention(q, zeros({2, 2, 6, 5}), v, Tensor(), 0.0, true, g),
      Contains("k [2,2,6,5]") && Contains("(B,H,Tq,d), (B,H,Tk,d), (B,H,Tk,dv)"));
  CHECK_THROWS_AS(whole_row_attention(q, k.to(float64), v, Tensor(), 0.0, true, g), DTypeError);
  // valid_lens: shape (B,) or (B, Tq), integers in [0, Tk]
  CHECK_THROWS_WITH(whole_row_attention(q, k, v, zeros({3}), 0.0, true, g),
      Contains(
          "scaled_dot_product_attention: valid_lens of shape [3] does not fit queries of shape "
          "[2,3,4,5] (expected [2] or [2,4])"));
  CHECK_THROWS_AS(whole_row_attention(q, k, v, zeros({2, 3}), 0.0, true, g), ShapeError);
  CHECK_THROWS_WITH(whole_row_attention(q, k, v, tensor({7, 1}), 0.0, true, g),
      Contains("scaled_dot_product_attention: valid length 7 is not an integer in [0, 6]") &&
          Contains("keys of shape [2,3,6,5]"));
  CHECK_THROWS_AS(whole_row_attention(q, k, v, tensor({-1, 1}), 0.0, true, g), ShapeError);
  CHECK_THROWS_AS(whole_row_attention(q, k, v, tensor({1.5, 1}), 0.0, true, g), ShapeError);
  CHECK_THROWS_AS(whole_row_attention(q, k, v, Tensor(), 1.5, true, g), ValueError);
  CHECK_THROWS_WITH(whole_row_attention(q, k, v, Tensor(), -0.1, true, g),
      Contains("scaled_dot_product_attention: dropout probability -0.1 is outside [0, 1]"));
}

TEST_CASE("attention is_causal: query i sees keys up to i + Tk - Tq, on both kernels",
    "[attention][causal]") {
  manual_seed(5);
  // (B, H, T, d): 2 heads of 5 queries over 5 keys, and 2 cached-decoding queries over 5 keys.
  const Tensor q = randn({2, 2, 5, 3}), k = randn({2, 2, 5, 3}), v = randn({2, 2, 5, 4});
  for (int64_t Tq : {5, 2}) {
    const Tensor queries = q.narrow(2, 5 - Tq, Tq);
    // nanoGPT's mask: -inf above the (lower-right) diagonal, then softmax.
    const Tensor future = tensor(std::vector<float>(static_cast<std::size_t>(Tq * 5)), {Tq, 5});
    {
      NoGradGuard no_grad;
      for (int64_t i = 0; i < Tq; ++i)
        for (int64_t j = 5 - Tq + i + 1; j < 5; ++j) future.select(0, i).select(0, j).fill_(1.0);
    }
    const Tensor scores = matmul(queries, k.transpose(-1, -2)) / std::sqrt(3.0);  // (B,H,Tq,Tk)
    const Tensor expected = matmul(softmax(masked_fill(scores, future, -INFINITY), -1), v);
    for (AttentionKernel kernel : {AttentionKernel::whole_rows, AttentionKernel::tiled}) {
      AttentionKernelGuard guard(kernel);
      const Tensor out = attention(queries, k, v, {.is_causal = true});
      INFO("Tq " << Tq << ", kernel " << static_cast<int>(kernel));
      const std::vector<float> got = out.to_vector<float>(), want = expected.to_vector<float>();
      REQUIRE(got.size() == want.size());
      for (std::size_t e = 0; e < got.size(); ++e) CHECK(got[e] == Approx(want[e]).margin(1e-6));
    }
  }
  // More queries than keys: some query would see nothing.
  CHECK_THROWS_WITH(
      attention(randn({1, 1, 4, 3}), randn({1, 1, 3, 3}), randn({1, 1, 3, 2}), {.is_causal = true}),
      Contains("attention: is_causal with 4 queries and 3 keys"));
  // A valid length past Tk is refused with is_causal too (the smaller of both would hide it).
  CHECK_THROWS_WITH(attention(randn({1, 1, 3, 3}), randn({1, 1, 3, 3}), randn({1, 1, 3, 2}),
                        {.valid_lens = tensor({7.0}), .is_causal = true}),
      Contains("attention: valid length 7 is not an integer in [0, 3]"));
  // With valid_lens as well, a query sees what both allow: length min(2, i + 1).
  const Tensor one = randn({1, 1, 4, 3}), keys = randn({1, 1, 4, 3}), values = randn({1, 1, 4, 2});
  const Tensor both =
      attention(one, keys, values, {.valid_lens = tensor({2.0}), .is_causal = true});
  Generator unused(0);
  const Tensor lens = tensor({1.0, 2.0, 2.0, 2.0}, {1, 4});
  CHECK(both.to_vector<float>() ==
        attention(one, keys, values, lens, 0.0, true, unused).to_vector<float>());
}
