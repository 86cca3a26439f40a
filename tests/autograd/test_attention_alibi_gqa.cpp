// ALiBi and grouped-query attention in ag::attention's two kernels (AttentionOptions::alibi_slopes
// and enable_gqa), each kernel forced with an AttentionKernelGuard, against the same attention
// composed from ag's primitives: k and v repeated to every query head with repeat_interleave
// (Llama's repeat_kv order), alibi_bias added to the scaled scores, the valid lengths and the
// causal mask as d2l's −1e6 fill, softmax, dropout on the (B·H, Tq, Tk) weights, matmul. Outputs,
// weights, gradients and dropout draws agree; the key/value gradients of a group do not depend on
// the thread count; alibi_slopes follows the paper's get_slopes, alibi_bias its distance rule; bad
// options are errors naming the op and the shapes. The float64 gradchecks are in
// test_gradcheck_ops.cpp, the PyTorch fixtures in test_ops_torch.cpp.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "attention_kernels.h"
#include "autograd/autograd.h"
#include "autograd/ops.h"
#include "autograd/parallel.h"
#include "relative_diff.h"

using namespace ag;
using Catch::Matchers::Contains;

namespace {

const char* kernel_name(AttentionKernel kernel) {
  return kernel == AttentionKernel::tiled ? "tiled" : "whole rows";
}

// One attention call's settings, as AttentionOptions takes them.
struct Setting {
  Tensor valid_lens;  // undefined, (B,) or (B, Tq)
  bool is_causal = false;
  std::vector<double> slopes;  // ALiBi's, or none
  bool enable_gqa = false;
  double dropout_p = 0;
};

// d2l's attention composed from ag's primitives, with ALiBi and grouped-query attention spelled
// out: q (B, H, Tq, d), k (B, Hkv, Tk, d), v (B, Hkv, Tk, dv) -> (B, H, Tq, dv).
Tensor composed_alibi_gqa_attention(const Tensor& q, const Tensor& k, const Tensor& v,
    const Setting& s, Generator& generator, Tensor* weights_out) {
  const int64_t B = q.size(0), H = q.size(1), Tq = q.size(2), Tk = k.size(2);
  const int64_t G = H / k.size(1);  // query heads per key/value head
  // Llama's repeat_kv: query head h reads key/value head h / G
  const Tensor keys = G > 1 ? repeat_interleave(k, G, 1) : k;    // (B, H, Tk, d)
  const Tensor values = G > 1 ? repeat_interleave(v, G, 1) : v;  // (B, H, Tk, dv)
  Tensor scores = matmul(q, keys.transpose(2, 3)) /
                  std::sqrt(static_cast<double>(q.size(3)));  // (B, H, Tq, Tk)
  if (!s.slopes.empty()) scores = scores + alibi_bias(s.slopes, Tq, Tk, q.dtype());  // (H, Tq, Tk)
  const Tensor positions = arange(static_cast<double>(Tk), q.dtype()).reshape({1, 1, 1, Tk});
  if (s.valid_lens.defined()) {
    const Tensor lens = s.valid_lens.to(q.dtype()).reshape(
        s.valid_lens.dim() == 1 ? Shape{B, 1, 1, 1} : Shape{B, 1, Tq, 1});
    scores = masked_fill(scores, ge(positions, lens), -1e6);
  }
  if (s.is_causal) {
    // query i is key position Tk − Tq + i: the keys after it are masked
    const Tensor query_positions =
        (arange(static_cast<double>(Tq), q.dtype()) + static_cast<double>(Tk - Tq))
            .reshape({1, 1, Tq, 1});
    scores = masked_fill(scores, gt(positions, query_positions), -1e6);
  }
  Tensor weights = softmax(scores, -1);  // (B, H, Tq, Tk)
  if (weights_out) *weights_out = weights.detach();
  const Tensor dropped = dropout(weights.reshape({B * H, Tq, Tk}), s.dropout_p, true, generator)
                             .reshape({B, H, Tq, Tk});
  return matmul(dropped, values);  // (B, H, Tq, dv)
}

Tensor fused_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Setting& s,
    Generator& generator, AttentionWeights* weights_out) {
  return attention(q, k, v,
      {.valid_lens = s.valid_lens,
          .is_causal = s.is_causal,
          .dropout_p = s.dropout_p,
          .generator = &generator,
          .weights_out = weights_out,
          .alibi_slopes = s.slopes,
          .enable_gqa = s.enable_gqa});
}

struct AlibiGqaRun {
  Tensor out, weights, grad_q, grad_k, grad_v;
  GeneratorState generator_after;
};

// One forward and backward from (B, T, H, C) leaves of the given values through their head views,
// on the kernel `kernel` or composed (kernel null).
AlibiGqaRun run_alibi_gqa(const AttentionKernel* kernel, const Tensor& q_values,
    const Tensor& k_values, const Tensor& v_values, const Setting& s, const Tensor& upstream) {
  Tensor q = q_values.detach().clone().requires_grad_();  // (B, Tq, H, d)
  Tensor k = k_values.detach().clone().requires_grad_();  // (B, Tk, Hkv, d)
  Tensor v = v_values.detach().clone().requires_grad_();  // (B, Tk, Hkv, dv)
  Generator generator(17);
  AlibiGqaRun r;
  if (kernel) {
    AttentionKernelGuard chosen(*kernel);
    AttentionWeights weights;
    r.out = fused_attention(heads(q), heads(k), heads(v), s, generator, &weights);
    r.weights = weights.tensor();
  } else {
    r.out = composed_alibi_gqa_attention(heads(q), heads(k), heads(v), s, generator, &r.weights);
  }
  r.generator_after = generator.state();
  r.out.backward(upstream);
  r.grad_q = q.grad();
  r.grad_k = k.grad();
  r.grad_v = v.grad();
  return r;
}

// (B, Tq) valid lengths: row i of batch row b gets (i·step + b) mod (Tk + 1), with a 0 and Tk.
Tensor ragged_lengths(int64_t B, int64_t Tq, int64_t Tk, int64_t step) {
  std::vector<double> lengths(static_cast<std::size_t>(B * Tq));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < Tq; ++i)
      lengths[static_cast<std::size_t>(b * Tq + i)] =
          static_cast<double>((i * step + b) % (Tk + 1));
  lengths[1] = 0;  // a row with no valid key: uniform weights 1/Tk, the bias ignored
  lengths[2] = static_cast<double>(Tk);
  return tensor(lengths, {B, Tq}, float64);
}

struct Heads {
  std::string name;
  int64_t H, Hkv;
  bool alibi;
};

struct Shapes {
  std::string name;
  int64_t B, Tq, Tk, d, dv;
};

}  // namespace

TEST_CASE(
    "ALiBi and grouped-query attention, both kernels: the composed attention's output, weights, "
    "gradients and dropout draws",
    "[attention][alibi][gqa]") {
  const std::vector<Heads> head_cases = {
      {"ALiBi, H 4", 4, 4, true},
      {"GQA, H 4 over Hkv 2", 4, 2, false},
      {"GQA and ALiBi, H 6 over Hkv 3", 6, 3, true},
      {"MQA and ALiBi, H 4 over Hkv 1", 4, 1, true},
  };
  // Tq 70 and Tk 131 split the tiled kernel's tiles (64 queries × 128 keys) both ways; Tq < Tk is
  // cached decoding (the queries the last Tq positions).
  const std::vector<Shapes> shape_cases = {
      {"Tq 5, Tk 5", 2, 5, 5, 3, 2},
      {"Tq 3 of Tk 7", 2, 3, 7, 4, 3},
      {"Tq 70, Tk 131", 2, 70, 131, 4, 3},
  };
  for (AttentionKernel kernel : {AttentionKernel::whole_rows, AttentionKernel::tiled})
    for (DType dtype : {float64, float32})
      for (const Heads& hc : head_cases)
        for (const Shapes& sc : shape_cases) {
          const int64_t B = sc.B, Tq = sc.Tq, Tk = sc.Tk;
          struct Mask {
            std::string name;
            Tensor lens;
            bool causal;
          };
          const std::vector<Mask> masks = {
              {"no mask", Tensor(), false},
              {"causal", Tensor(), true},
              {"(B,Tq) lengths with 0 and Tk", ragged_lengths(B, Tq, Tk, 7), false},
              {"causal and (B,) lengths", tensor({static_cast<double>(Tk - 1), 0.0}), true},
          };
          for (const Mask& m : masks)
            for (double p : {0.0, 0.3}) {
              INFO(kernel_name(kernel) << ", " << dtype_name(dtype) << ", " << hc.name << ", "
                                       << sc.name << ", " << m.name << ", dropout " << p);
              Setting s{m.lens, m.causal, hc.alibi ? alibi_slopes(hc.H) : std::vector<double>{},
                  hc.Hkv != hc.H, p};
              Generator values(23);
              const Tensor q = randn({B, Tq, hc.H, sc.d}, values, dtype);
              const Tensor k = randn({B, Tk, hc.Hkv, sc.d}, values, dtype);
              const Tensor v = randn({B, Tk, hc.Hkv, sc.dv}, values, dtype);
              const Tensor upstream = randn({B, hc.H, Tq, sc.dv}, values, dtype);
              const AlibiGqaRun fused = run_alibi_gqa(&kernel, q, k, v, s, upstream);
              const AlibiGqaRun composed = run_alibi_gqa(nullptr, q, k, v, s, upstream);
              // float64: both exact up to rounding; float32: sums in another order, a few ulps
              const double tolerance = dtype == float64 ? 1e-12 : 5e-6;
              CHECK(fused.out.shape() == Shape{B, hc.H, Tq, sc.dv});
              CHECK(fused.weights.shape() == Shape{B, hc.H, Tq, Tk});
              CHECK(relative_diff(fused.out, composed.out) <= tolerance);
              CHECK(relative_diff(fused.weights, composed.weights) <= tolerance);
              CHECK(relative_diff(fused.grad_q, composed.grad_q) <= tolerance);
              CHECK(fused.grad_k.shape() == Shape{B, Tk, hc.Hkv, sc.d});
              CHECK(relative_diff(fused.grad_k, composed.grad_k) <= tolerance);
              CHECK(relative_diff(fused.grad_v, composed.grad_v) <= tolerance);
              // The same Philox blocks reserved: the draws of the (B·H, Tq, Tk) weights.
              CHECK(fused.generator_after == composed.generator_after);
            }
        }
}

TEST_CASE(
    "grouped-query attention: attention on the repeated key/value heads (the same output bits and "
    "dropout draws), with dK and dV summed over each group",
    "[attention][gqa]") {
  const int64_t B = 2, H = 6, Hkv = 2, G = H / Hkv, Tq = 70, Tk = 131, d = 4, dv = 3;
  for (AttentionKernel kernel : {AttentionKernel::whole_rows, AttentionKernel::tiled})
    for (DType dtype : {float32, float64}) {
      INFO(kernel_name(kernel) << ", " << dtype_name(dtype));
      AttentionKernelGuard chosen(kernel);
      Generator values(5);
      const Tensor q = randn({B, H, Tq, d}, values, dtype).requires_grad_();
      const Tensor k = randn({B, Hkv, Tk, d}, values, dtype).requires_grad_();
      const Tensor v = randn({B, Hkv, Tk, dv}, values, dtype).requires_grad_();
      const Tensor upstream = randn({B, H, Tq, dv}, values, dtype);
      const std::vector<double> slopes = alibi_slopes(H);
      Generator grouped_generator(3), repeated_generator(3);
      const Tensor grouped = attention(q, k, v,
          {.is_causal = true,
              .dropout_p = 0.2,
              .generator = &grouped_generator,
              .alibi_slopes = slopes,
              .enable_gqa = true});
      const Tensor q2 = q.detach().clone().requires_grad_();
      const Tensor k2 = k.detach().clone().requires_grad_();
      const Tensor v2 = v.detach().clone().requires_grad_();
      const Tensor repeated =
          attention(q2, repeat_interleave(k2, G, 1), repeat_interleave(v2, G, 1),
              {.is_causal = true,
                  .dropout_p = 0.2,
                  .generator = &repeated_generator,
                  .alibi_slopes = slopes});
      // Each query head computes exactly what it computes on its own copy of the key/value head.
      CHECK(grouped.to_vector<double>() == repeated.to_vector<double>());
      CHECK(grouped_generator.state() == repeated_generator.state());
      grouped.backward(upstream);
      repeated.backward(upstream);
      CHECK(q.grad().to_vector<double>() == q2.grad().to_vector<double>());
      // dK of a key/value head: the G query heads' dK, added in order
      const double tolerance = dtype == float64 ? 1e-13 : 1e-6;
      CHECK(relative_diff(k.grad(), k2.grad()) <= tolerance);
      CHECK(relative_diff(v.grad(), v2.grad()) <= tolerance);
    }
}

namespace {}  // namespace

TEST_CASE("grouped-query attention: the key/value gradients do not depend on the thread count",
    "[attention][gqa]") {
  // B·Hkv = 6 key/value heads of G = 4 query heads each: enough work to be split among threads.
  const int64_t B = 3, H = 8, Hkv = 2, Tq = 70, Tk = 131, d = 8, dv = 8;
  Generator values(9);
  const Tensor q_values = randn({B, Tq, H, d}, values), k_values = randn({B, Tk, Hkv, d}, values);
  const Tensor v_values = randn({B, Tk, Hkv, dv}, values), upstream = randn({B, H, Tq, dv}, values);
  const Tensor lens = ragged_lengths(B, Tq, Tk, 11);
  const Setting s{lens, false, alibi_slopes(H), true, 0.1};
  for (AttentionKernel kernel : {AttentionKernel::whole_rows, AttentionKernel::tiled}) {
    INFO(kernel_name(kernel));
    AlibiGqaRun one, two;
    {
      NumThreadsGuard threads(1);
      one = run_alibi_gqa(&kernel, q_values, k_values, v_values, s, upstream);
    }
    {
      NumThreadsGuard threads(2);
      two = run_alibi_gqa(&kernel, q_values, k_values, v_values, s, upstream);
    }
    CHECK(one.out.to_vector<float>() == two.out.to_vector<float>());
    CHECK(one.grad_q.to_vector<float>() == two.grad_q.to_vector<float>());
    CHECK(one.grad_k.to_vector<float>() == two.grad_k.to_vector<float>());
    CHECK(one.grad_v.to_vector<float>() == two.grad_v.to_vector<float>());
  }
}

TEST_CASE("ALiBi's weights: the composed path's bits, from either kernel, with the distance rule",
    "[attention][alibi]") {
  const int64_t B = 2, H = 4, Tq = 5, Tk = 9, d = 3;
  const std::vector<double> slopes = alibi_slopes(H);
  for (DType dtype : {float32, float64}) {
    INFO(dtype_name(dtype));
    Generator values(2);
    const Tensor q = randn({B, H, Tq, d}, values, dtype), k = randn({B, 2, Tk, d}, values, dtype);
    const Tensor v = randn({B, 2, Tk, 2}, values, dtype);
    AttentionWeights whole_weights, tiled_weights;
    {
      AttentionKernelGuard whole(AttentionKernel::whole_rows);
      attention(
          q, k, v, {.weights_out = &whole_weights, .alibi_slopes = slopes, .enable_gqa = true});
    }
    {
      AttentionKernelGuard tiled(AttentionKernel::tiled);
      attention(
          q, k, v, {.weights_out = &tiled_weights, .alibi_slopes = slopes, .enable_gqa = true});
    }
    // The tiled call's weights, formed on request by the whole-row kernel: the same bits.
    CHECK(tiled_weights.tensor().to_vector<double>() == whole_weights.tensor().to_vector<double>());
    // softmax(Q·Kᵀ / √d + alibi_bias(...)) composed from ag's ops: the same product (matmul hands
    // the transposed keys to the same gemm), the division, then the addition of the bias rounded
    // once, and softmax's row arithmetic, as the kernels do: the same bits.
    const Tensor scores = matmul(q, repeat_interleave(k, 2, 1).transpose(2, 3)) /
                          std::sqrt(static_cast<double>(d));  // (B, H, Tq, Tk)
    const Tensor composed = softmax(scores + alibi_bias(slopes, Tq, Tk, dtype), -1);
    CHECK(whole_weights.tensor().to_vector<double>() == composed.to_vector<double>());
  }
  // With all scores equal the bias alone decides: one query over Tk = 9 keys is key position 8,
  // and a head of slope 1/2 weights key j as exp(−(8 − j)/2), normalised.
  const Tensor q = zeros({1, 1, 1, 2}, float64), k = zeros({1, 1, Tk, 2}, float64);
  const Tensor v = eye(Tk, std::nullopt, float64).reshape({1, 1, Tk, Tk});  // O = the weights
  for (AttentionKernel kernel : {AttentionKernel::whole_rows, AttentionKernel::tiled}) {
    AttentionKernelGuard chosen(kernel);
    const std::vector<double> out = attention(q, k, v, {.alibi_slopes = {0.5}}).to_vector<double>();
    double total = 0;
    for (int64_t j = 0; j < Tk; ++j) total += std::exp(-0.5 * static_cast<double>(8 - j));
    for (int64_t j = 0; j < Tk; ++j) {
      INFO(kernel_name(kernel) << ", key " << j);
      CHECK(out[static_cast<std::size_t>(j)] ==
            Approx(std::exp(-0.5 * static_cast<double>(8 - j)) / total).epsilon(1e-14));
    }
  }
}

namespace {
// The reference code's get_slopes (Press et al., github.com/ofirpress/attention_with_linear_biases),
// written out as its Python is:
//   def get_slopes_power_of_2(n):
//       start = (2**(-2**-(math.log2(n)-3))); ratio = start
//       return [start*ratio**i for i in range(n)]
//   get_slopes(n) = get_slopes_power_of_2(n) for n a power of two, else
//       get_slopes_power_of_2(c) + get_slopes(2*c)[0::2][:n-c], c = 2**floor(log2(n))
std::vector<double> reference_slopes_power_of_2(int n) {
  const double start = std::pow(2.0, -std::pow(2.0, -(std::log2(n) - 3)));
  std::vector<double> slopes;
  for (int i = 0; i < n; ++i) slopes.push_back(start * std::pow(start, i));
  return slopes;
}
std::vector<double> reference_slopes(int n) {
  if (std::log2(n) == std::floor(std::log2(n))) return reference_slopes_power_of_2(n);
  const int closest = 1 << static_cast<int>(std::floor(std::log2(n)));
  std::vector<double> slopes = reference_slopes_power_of_2(closest);
  const std::vector<double> twice = reference_slopes(2 * closest);
  for (int i = 0; static_cast<int>(slopes.size()) < n; i += 2)
    slopes.push_back(twice[static_cast<std::size_t>(i)]);
  return slopes;
}
}  // namespace

TEST_CASE(
    "alibi_slopes: the paper's slopes, for powers of two and between them", "[attention][alibi]") {
  // 8 heads: 2^(−8h/8) = 1/2, 1/4, …, 1/256 (the paper's example)
  const std::vector<double> eight = {
      1.0 / 2, 1.0 / 4, 1.0 / 8, 1.0 / 16, 1.0 / 32, 1.0 / 64, 1.0 / 128, 1.0 / 256};
  CHECK(alibi_slopes(8) == eight);
  CHECK(reference_slopes(8) == eight);
  // 6 heads: the 4 slopes of 4 heads (1/4, 1/16, 1/64, 1/256), then every other slope of 8 heads
  // (1/2, 1/8)
  const std::vector<double> six = {1.0 / 4, 1.0 / 16, 1.0 / 64, 1.0 / 256, 1.0 / 2, 1.0 / 8};
  CHECK(alibi_slopes(6) == six);
  CHECK(reference_slopes(6) == six);
  CHECK(alibi_slopes(1) == std::vector<double>{1.0 / 256});
  CHECK(alibi_slopes(3) == std::vector<double>{1.0 / 16, 1.0 / 256, 1.0 / 4});
  // Beyond 8 heads the powers are not integers: the reference's products, bit for bit, within a
  // few ulps of the formula 2^(−8h/n) (of n₂ = 2^⌊log₂ n⌋ heads, then of 2·n₂).
  for (int n : {5, 12, 16, 20, 24, 32, 40, 128}) {
    const std::vector<double> got = alibi_slopes(n);
    CHECK(got == reference_slopes(n));
    const int below = 1 << static_cast<int>(std::floor(std::log2(n)));
    for (int h = 1; h <= n; ++h) {
      const double formula = h <= below ? std::exp2(-8.0 * h / below)
                                        : std::exp2(-8.0 * (2 * (h - below) - 1) / (2 * below));
      INFO(n << " heads, head " << h);
      CHECK(got[static_cast<std::size_t>(h - 1)] == Approx(formula).epsilon(1e-14));
    }
  }
  CHECK_THROWS_AS(alibi_slopes(0), ValueError);
  CHECK_THROWS_WITH(alibi_slopes(-2), Contains("alibi_slopes: -2 heads"));
}

TEST_CASE("alibi_bias: −m·|(Tk − Tq + i) − j|, rounded once, depending on i − j alone",
    "[attention][alibi]") {
  const std::vector<double> slopes = {0.5, 0.1, 1.0 / 3};
  const int64_t Tq = 3, Tk = 5;
  for (DType dtype : {float64, float32}) {
    INFO(dtype_name(dtype));
    const Tensor bias = alibi_bias(slopes, Tq, Tk, dtype);
    CHECK(bias.shape() == Shape{3, Tq, Tk});
    CHECK(bias.dtype() == dtype);
    CHECK_FALSE(bias.requires_grad());
    const std::vector<double> got = bias.to_vector<double>();
    for (int64_t h = 0; h < 3; ++h)
      for (int64_t i = 0; i < Tq; ++i)
        for (int64_t j = 0; j < Tk; ++j) {
          const double exact =
              -slopes[static_cast<std::size_t>(h)] * std::abs(static_cast<double>(Tk - Tq + i - j));
          const double rounded = dtype == float32 ? double(static_cast<float>(exact)) : exact;
          INFO("h " << h << ", i " << i << ", j " << j);
          CHECK(got[static_cast<std::size_t>((h * Tq + i) * Tk + j)] == rounded);
          if (i + 1 < Tq && j + 1 < Tk)  // the same i − j, the same bias
            CHECK(got[static_cast<std::size_t>((h * Tq + i) * Tk + j)] ==
                  got[static_cast<std::size_t>((h * Tq + i + 1) * Tk + j + 1)]);
        }
  }
  // The last query is the last key: 0 on the diagonal of the lower right, symmetric about it.
  CHECK(alibi_bias({1.0}, 1, 3, float64).to_vector<double>() == std::vector<double>{-2, -1, 0});
  CHECK(alibi_bias({1.0}, 3, 3, float64).to_vector<double>() ==
        std::vector<double>{0, -1, -2, -1, 0, -1, -2, -1, 0});
  CHECK(alibi_bias({}, 2, 3, float32).shape() == Shape{0, 2, 3});
  CHECK_THROWS_AS(alibi_bias({1.0}, -1, 3, float32), ValueError);
  CHECK_THROWS_WITH(alibi_bias({1.0, NAN}, 2, 3, float32),
      Contains("alibi_bias: slope nan of head 1 is not finite"));
  CHECK_THROWS_AS(alibi_bias({1.0}, 2, 3, int64), DTypeError);
}

TEST_CASE("attention with ALiBi or grouped-query attention: errors name the op and the shapes",
    "[attention][alibi][gqa][errors]") {
  const Tensor q = zeros({2, 4, 3, 5}), k = zeros({2, 2, 6, 5}), v = zeros({2, 2, 6, 7});
  for (AttentionKernel kernel : {AttentionKernel::whole_rows, AttentionKernel::tiled}) {
    AttentionKernelGuard chosen(kernel);
    const std::string op =
        kernel == AttentionKernel::tiled ? "flash_attention" : "scaled_dot_product_attention";
    INFO(op);
    CHECK_NOTHROW(attention(q, k, v, {.alibi_slopes = alibi_slopes(4), .enable_gqa = true}));
    // Hkv != H without enable_gqa: today's error, with a hint
    CHECK_THROWS_AS(attention(q, k, v), ShapeError);
    CHECK_THROWS_WITH(attention(q, k, v),
        Contains(op + ": q [2,4,3,5], k [2,2,6,5] and v [2,2,6,7] do not fit") &&
            Contains("set enable_gqa"));
    // Hkv not dividing H
    CHECK_THROWS_WITH(attention(q, zeros({2, 3, 6, 5}), zeros({2, 3, 6, 7}), {.enable_gqa = true}),
        Contains(op + ": enable_gqa with 4 query heads and 3 key/value heads") &&
            Contains("k [2,3,6,5]"));
    CHECK_THROWS_AS(
        attention(q, zeros({2, 0, 6, 5}), zeros({2, 0, 6, 7}), {.enable_gqa = true}), ShapeError);
    CHECK_THROWS_AS(attention(zeros({2, 0, 3, 5}), k, v, {.enable_gqa = true}), ShapeError);
    // no heads at all: an empty attention, as without enable_gqa
    CHECK(attention(
              zeros({2, 0, 3, 5}), zeros({2, 0, 6, 5}), zeros({2, 0, 6, 7}), {.enable_gqa = true})
              .shape() == Shape{2, 0, 3, 7});
    // k and v with different heads, batches or lengths
    CHECK_THROWS_WITH(attention(q, k, zeros({2, 1, 6, 7}), {.enable_gqa = true}),
        Contains(op + ": q [2,4,3,5], k [2,2,6,5] and v [2,1,6,7] do not fit") &&
            Contains("(B,Hkv,Tk,d)"));
    CHECK_THROWS_AS(
        attention(q, zeros({1, 2, 6, 5}), zeros({1, 2, 6, 7}), {.enable_gqa = true}), ShapeError);
    CHECK_THROWS_AS(attention(q, k, zeros({2, 2, 5, 7}), {.enable_gqa = true}), ShapeError);
    // the slopes: one per query head, finite
    CHECK_THROWS_WITH(attention(q, k, v, {.alibi_slopes = alibi_slopes(2), .enable_gqa = true}),
        Contains(op + ": 2 ALiBi slopes for q [2,4,3,5] with 4 heads"));
    CHECK_THROWS_AS(
        attention(q, k, v, {.alibi_slopes = {0.5, 0.25, INFINITY, 0.1}, .enable_gqa = true}),
        ValueError);
    CHECK_THROWS_WITH(
        attention(q, k, v, {.alibi_slopes = {0.5, NAN, 0.1, 0.1}, .enable_gqa = true}),
        Contains(op + ": ALiBi slope nan of head 1 is not finite"));
    // valid lengths are checked as before
    CHECK_THROWS_AS(
        attention(q, k, v, {.valid_lens = tensor({7.0, 1.0}), .enable_gqa = true}), ShapeError);
  }
}
