// MultiHeadAttention's fused path (ag::attention on head views, through
// DotProductAttention::forward_heads) against d2l's composed path (transpose_qkv,
// DotProductAttention, transpose_output): the same outputs, attention weights and gradients of
// every parameter and input, in training with dropout (equal generator states give equal masks)
// and in evaluation, in float64 and float32, on both of ag::attention's kernels.
#include "nn_test_util.h"

using namespace ag;
using nn_test::max_abs_diff;

namespace {

struct Pass {
  Tensor output, weights;
  std::vector<std::pair<std::string, Tensor>> parameter_grads;
  Tensor queries_grad, keys_grad, values_grad;
  GeneratorState generator_after;
};

// One forward and backward of `attention` with fused kernels on or off (and, when on, the given
// attention kernel), the default generator seeded with `seed` first.
Pass forward_backward(nn::MultiHeadAttention& attention, bool fused, const Tensor& queries,
    const Tensor& keys, const Tensor& values, const Tensor& valid_lens, const Tensor& upstream,
    uint64_t seed, AttentionKernel kernel = AttentionKernel::automatic) {
  nn::FusedKernelsGuard guard(fused);
  AttentionKernelGuard kernel_guard(kernel);
  attention.zero_grad();
  Tensor q = queries.detach().clone().requires_grad_(), k = keys.detach().clone().requires_grad_();
  Tensor v = values.detach().clone().requires_grad_();
  manual_seed(seed);
  Pass pass;
  pass.output = attention(q, k, v, valid_lens);  // (B, Q, D)
  pass.generator_after = default_generator().state();
  pass.weights = attention.attention_weights();  // (B, H, Q, K)
  pass.output.backward(upstream);
  for (const auto& [name, parameter] : attention.named_parameters())
    pass.parameter_grads.emplace_back(name, parameter.grad());
  pass.queries_grad = q.grad();
  pass.keys_grad = k.grad();
  pass.values_grad = v.grad();
  return pass;
}

void check_same(const Pass& fused, const Pass& composed, double tolerance) {
  CHECK(max_abs_diff(fused.output, composed.output) <= tolerance);
  REQUIRE(fused.weights.defined());
  CHECK(fused.weights.shape() == composed.weights.shape());
  CHECK(max_abs_diff(fused.weights, composed.weights) <= tolerance);
  CHECK(fused.generator_after == composed.generator_after);
  REQUIRE(fused.parameter_grads.size() == composed.parameter_grads.size());
  for (std::size_t i = 0; i < fused.parameter_grads.size(); ++i) {
    INFO("gradient of " << fused.parameter_grads[i].first);
    REQUIRE(fused.parameter_grads[i].second.defined());
    CHECK(max_abs_diff(fused.parameter_grads[i].second, composed.parameter_grads[i].second) <=
          tolerance);
  }
  CHECK(max_abs_diff(fused.queries_grad, composed.queries_grad) <= tolerance);
  CHECK(max_abs_diff(fused.keys_grad, composed.keys_grad) <= tolerance);
  CHECK(max_abs_diff(fused.values_grad, composed.values_grad) <= tolerance);
}

}  // namespace

TEST_CASE("MultiHeadAttention: the fused path equals d2l's composed path, with dropout and in eval",
    "[nn][mha][fused]") {
  const int64_t B = 3, Q = 4, K = 6, H = 2, D = 8;
  struct Lens {
    std::string name;
    Tensor lens;
  };
  const std::vector<Lens> cases = {
      {"no valid_lens", Tensor()},
      {"(B,) valid_lens 3, 0, 6", tensor({3, 0, 6})},
      {"(B, Q) valid_lens with 0 and K", tensor({1, 2, 3, 4, 6, 0, 5, 5, 2, 6, 1, 0}, {B, Q})},
  };
  for (DType dtype : {float64, float32}) {
    // float64 agrees to rounding; float32 differs only by the order of a few float sums
    const double tolerance = dtype == float64 ? 1e-12 : 1e-5;
    for (bool bias : {false, true})
      for (const Lens& c : cases)
        for (bool training : {true, false}) {
          INFO(dtype_name(dtype) << (bias ? ", bias" : "") << ", " << c.name
                                 << (training ? ", training" : ", eval"));
          manual_seed(1);
          nn::MultiHeadAttention attention(5, 7, 3, D, H, 0.3, bias);  // key 5, query 7, value 3
          attention.to(dtype);
          attention.train(training);
          Generator values_generator(2);
          const Tensor queries = randn({B, Q, 7}, values_generator, dtype);
          const Tensor keys = randn({B, K, 5}, values_generator, dtype);
          const Tensor values = randn({B, K, 3}, values_generator, dtype);
          const Tensor upstream = randn({B, Q, D}, values_generator, dtype);
          const Pass fused =
              forward_backward(attention, true, queries, keys, values, c.lens, upstream, 42);
          const Pass composed =
              forward_backward(attention, false, queries, keys, values, c.lens, upstream, 42);
          check_same(fused, composed, tolerance);
          if (training) {
            // Dropout really ran: another seed gives another output.
            const Pass reseeded =
                forward_backward(attention, true, queries, keys, values, c.lens, upstream, 43);
            CHECK(max_abs_diff(fused.output, reseeded.output) > 1e-3);
          }
        }
  }
}

TEST_CASE("MultiHeadAttention: the fused path splits and joins the heads without copies",
    "[nn][mha][fused]") {
  // Per forward, the composed path copies Q, K and V in transpose_qkv, the valid lengths in
  // repeat_interleave and the output in transpose_output; the fused path none of them.
  const int64_t B = 2, T = 5, D = 8, H = 4;
  nn::MultiHeadAttention attention(D, D, D, D, H, 0.0);
  attention.eval();
  const Tensor X = nn_test::randn32({B, T, D}, 3), lens = tensor({5, 2});
  auto allocations = [&](bool fused) {
    nn::FusedKernelsGuard guard(fused);
    NoGradGuard no_grad;
    const uint64_t before = detail::storage_allocation_count();
    attention(X, X, X, lens);
    return detail::storage_allocation_count() - before;
  };
  const uint64_t fused = allocations(true), composed = allocations(false);
  // 4 projections, the weights and the output of the attention
  CHECK(fused == 6);
  CHECK(composed > fused + 4);
}

TEST_CASE("MultiHeadAttention: the fused path keeps the composed path's shape errors",
    "[nn][mha][fused][errors]") {
  nn::MultiHeadAttention attention(4, 4, 4, 4, 2, 0.0);
  const Tensor X = zeros({2, 3, 4});
  for (bool fused : {true, false}) {
    nn::FusedKernelsGuard guard(fused);
    INFO((fused ? "fused" : "composed"));
    CHECK_THROWS_AS(attention(zeros({2, 3, 5}), X, X), ShapeError);
    CHECK_THROWS_AS(attention(X, X, X, zeros({3})), ShapeError);
    CHECK_THROWS_AS(attention(X, X, X, tensor({4, 1})), ShapeError);  // a valid length beyond K = 3
  }
}

TEST_CASE(
    "MultiHeadAttention: the tiled kernel (flash_attention) equals the whole-row kernel and the "
    "composed path",
    "[nn][mha][fused]") {
  // 140 keys and 66 queries: two tiles each way (64 queries × 128 keys). The weights, never formed
  // by the tiled kernel, are formed on request from the same q and k, so they are the whole-row
  // kernel's bits.
  const int64_t B = 2, Q = 66, K = 140, H = 2, D = 8;
  std::vector<double> per_query(static_cast<std::size_t>(B * Q));
  for (int64_t i = 0; i < B * Q; ++i)
    per_query[static_cast<std::size_t>(i)] = static_cast<double>((i * 13) % (K + 1));
  const Tensor lens = tensor(per_query, {B, Q});  // (B, Q), 0 and K among them
  for (DType dtype : {float64, float32}) {
    const double tolerance = dtype == float64 ? 1e-12 : 1e-5;
    for (bool training : {true, false}) {
      INFO(dtype_name(dtype) << (training ? ", training" : ", eval"));
      manual_seed(1);
      nn::MultiHeadAttention attention(5, 7, 3, D, H, 0.2);
      attention.to(dtype);
      attention.train(training);
      Generator values_generator(2);
      const Tensor queries = randn({B, Q, 7}, values_generator, dtype);
      const Tensor keys = randn({B, K, 5}, values_generator, dtype);
      const Tensor values = randn({B, K, 3}, values_generator, dtype);
      const Tensor upstream = randn({B, Q, D}, values_generator, dtype);
      const Pass tiled = forward_backward(
          attention, true, queries, keys, values, lens, upstream, 42, AttentionKernel::tiled);
      const Pass whole = forward_backward(
          attention, true, queries, keys, values, lens, upstream, 42, AttentionKernel::whole_rows);
      const Pass composed =
          forward_backward(attention, false, queries, keys, values, lens, upstream, 42);
      check_same(tiled, whole, tolerance);
      check_same(tiled, composed, tolerance);
      CHECK(tiled.weights.to_vector<double>() == whole.weights.to_vector<double>());
    }
  }
}

TEST_CASE(
    "MultiHeadAttention: the tiled kernel's weights are formed on request, for the last forward",
    "[nn][mha][fused]") {
  AttentionKernelGuard tiled(AttentionKernel::tiled);
  nn::MultiHeadAttention attention(4, 4, 4, 4, 2, 0.0);
  attention.eval();
  const Tensor first = nn_test::randn32({1, 3, 4}, 1), second = nn_test::randn32({1, 5, 4}, 2);
  attention(first, first, first);
  attention(second, second, second, tensor({2}));
  const Tensor weights = attention.attention_weights();  // (B, H, Q, K) of the second forward
  CHECK(weights.shape() == Shape{1, 2, 5, 5});
  // valid length 2: keys 2..4 weigh 0, keys 0 and 1 share each row
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t i = 0; i < 5; ++i) {
      const Tensor row = weights.select(0, 0).select(0, h).select(0, i);  // (K)
      CHECK(row.to_vector<double>()[2] == 0.0);
      CHECK(row.to_vector<double>()[4] == 0.0);
      CHECK(std::abs(row.to_vector<double>()[0] + row.to_vector<double>()[1] - 1.0) < 1e-6);
    }
  CHECK(attention.attention_weights().shares_storage(weights));  // formed once, then kept
}

TEST_CASE("DotProductAttention: forward_heads equals forward on the heads moved into the batch",
    "[nn][mha][fused]") {
  // MultiHeadAttention's two paths at the level of the attention module: (B, H, T, d) heads against
  // their (B·H, T, d) copies with each valid length repeated per head; attention_weights() follows
  // whichever ran last.
  const int64_t B = 2, H = 3, Q = 4, K = 5, d = 2;
  nn::DotProductAttention attention(0.0);
  Generator values(4);
  const Tensor q = randn({B, H, Q, d}, values, float64), k = randn({B, H, K, d}, values, float64);
  const Tensor v = randn({B, H, K, d}, values, float64), lens = tensor({3, 0});
  // (B, H, T, d) -> (B·H, T, d)
  auto batched = [&](const Tensor& x) { return x.reshape({B * H, x.size(2), x.size(3)}); };
  const Tensor per_head_lens = repeat_interleave(lens, H, 0);  // (B·H,)
  const Tensor composed = attention.forward(batched(q), batched(k), batched(v), per_head_lens);
  const Tensor composed_weights = attention.attention_weights();  // (B·H, Q, K)
  for (AttentionKernel kernel : {AttentionKernel::whole_rows, AttentionKernel::tiled}) {
    AttentionKernelGuard guard(kernel);
    const Tensor fused = attention.forward_heads(q, k, v, lens);  // (B, H, Q, d)
    CHECK(max_abs_diff(batched(fused), composed) <= 1e-12);
    CHECK(attention.attention_weights().shape() == Shape{B * H, Q, K});
    CHECK(max_abs_diff(attention.attention_weights(), composed_weights) <= 1e-12);
  }
  attention.forward(batched(q).narrow(1, 0, 1), batched(k), batched(v));  // one query per head now
  CHECK(attention.attention_weights().shape() == Shape{B * H, 1, K});
}
