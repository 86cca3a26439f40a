// nn::RotaryEmbedding (nn/positions.h): the RoPE invariant — scores depend on relative positions
// only —, the link to the seed's sinusoids and their rotation, the cached angle tables (growth,
// dtype), the fused op against the composed path, and its errors.
#include <cmath>

#include "nn_test_util.h"

using namespace ag;
using Catch::Matchers::Equals;
using nn_test::max_abs_diff;
using nn_test::values;

namespace {

// The (T, T) scores q_i · k_j of the rotated q and k (1, T, d), q at positions first … first + T − 1
// and k at the same positions.
Tensor rotated_scores(nn::RotaryEmbedding& rope, const Tensor& q, const Tensor& k, int64_t first) {
  const Tensor q_turned = rope(q, first), k_turned = rope(k, first);  // (1, T, d)
  return matmul(q_turned, k_turned.transpose(-1, -2)).squeeze(0);     // (T, T)
}

std::string name_of(RotaryPairs pairs) { return nn::rotary_pairs_name(pairs); }

}  // namespace

TEST_CASE("RotaryEmbedding: the score of (i, j) equals that of (i + δ, j + δ), for δ up to 1000",
    "[nn][positions][invariants]") {
  // (R(iω) q)ᵀ (R(jω) k) = qᵀ R((j − i)ω) k: shifting both positions by δ changes no score. In
  // float64 the angles t·ω are exact to ~t·2⁻⁵³, so the scores agree to 1e-12 of |q_i| |k_j|, the
  // largest a score can be. Full rotary (dim = d = 16) and partial (dim 8 of d 12, whose passing
  // features add the same q·k at every shift).
  for (const auto& [d, dim] : {std::pair<int64_t, int64_t>{16, 16}, {12, 8}}) {
    for (RotaryPairs pairs : {RotaryPairs::interleaved, RotaryPairs::halves}) {
      for (bool fused : {true, false}) {
        INFO("d " << d << ", dim " << dim << ", " << name_of(pairs) << ", fused " << fused);
        nn::FusedKernelsGuard path(fused);
        nn::RotaryEmbedding rope(dim, 10000.0, pairs);
        rope.to(float64);
        Generator generator(21);
        const int64_t T = 6;
        const Tensor q = randn({1, T, d}, generator, float64),
                     k = randn({1, T, d}, generator, float64);
        const Tensor base_scores = rotated_scores(rope, q, k, 0);  // positions 0 … 5
        // |q_i| |k_j|: the bound of score (i, j)
        const Tensor bound =
            matmul(sqrt(sum(q * q, {-1}, true)), sqrt(sum(k * k, {-1}, true)).transpose(-1, -2))
                .squeeze(0);
        for (int64_t delta : {1, 7, 100, 1000}) {
          const Tensor shifted = rotated_scores(rope, q, k, delta);
          const std::vector<double> a = values(base_scores), b = values(shifted), m = values(bound);
          double worst = 0;  // the largest |a − b| / (|q_i| |k_j|)
          for (std::size_t e = 0; e < a.size(); ++e)
            worst = std::max(worst, std::abs(a[e] - b[e]) / m[e]);
          INFO("δ " << delta << ": largest difference " << worst << " of |q||k|");
          CHECK(worst <= 1e-12);
        }
        // Not a trivial identity: the scores do depend on the relative position j − i.
        CHECK(max_abs_diff(base_scores, matmul(q, k.transpose(-1, -2)).squeeze(0)) > 0.1);
      }
    }
  }
}

TEST_CASE("RotaryEmbedding and the seed's sinusoids: the same angles, the seed's map is Rᵀ",
    "[nn][positions]") {
  // d2l's table P[t, 2j] = sin(t ω_j), P[t, 2j+1] = cos(t ω_j), ω_j = 1/10000^(2j/d). With
  // dim = d, base 10000 and interleaved pairs, RoPE turns pair j of position t by the same t ω_j:
  //   R(tω_j) (1, 0) = (cos tω_j, sin tω_j) = (P[t, 2j+1], P[t, 2j])  (the pair, swapped), and
  //   R(tω_j)ᵀ (0, 1) = R(−tω_j) (0, 1) = (sin tω_j, cos tω_j) = (P[t, 2j], P[t, 2j+1]),
  // the second being the gradient the backward hands x for an upstream gradient (0, 1, 0, 1, ...):
  // the seed's matrix [cos δω  sin δω; −sin δω  cos δω] is Rᵀ(δω). Both hold to the last bit, in
  // float64 and float32: the angle is computed by one expression, rounded once.
  const int64_t d = 8, T = 50;
  for (DType dtype : {float64, float32}) {
    INFO(dtype_name(dtype));
    nn::PositionalEncoding encoding(d, 0.0, T);
    encoding.to(dtype);
    const Tensor P = encoding.P.squeeze(0);  // (T, d)
    nn::RotaryEmbedding rope(d);
    rope.to(dtype);
    std::vector<double> unit(static_cast<std::size_t>(T * d)), upstream(unit.size());
    for (std::size_t e = 0; e < unit.size(); ++e) {
      unit[e] = e % 2 == 0 ? 1.0 : 0.0;      // (1, 0) in every pair
      upstream[e] = e % 2 == 0 ? 0.0 : 1.0;  // (0, 1) in every pair
    }
    const Tensor x = tensor(unit, {T, d}, dtype).requires_grad_();
    const Tensor y = rope(x);  // (T, d): row t holds (cos tω_j, sin tω_j) in pair j
    const Tensor P_swapped = index_select(P, -1, std::vector<int64_t>{1, 0, 3, 2, 5, 4, 7, 6});
    CHECK(values(y) == values(P_swapped));
    y.backward(tensor(upstream, {T, d}, dtype));
    CHECK(values(x.grad()) == values(P));
  }
}

TEST_CASE("the seed's rotation identity: P[i + δ] is P[i] turned by the seed's matrix, to 1e-12",
    "[nn][positions]") {
  // (p_{i+δ,2j}, p_{i+δ,2j+1}) = [cos δω_j  sin δω_j; −sin δω_j  cos δω_j] (p_{i,2j}, p_{i,2j+1})
  // for every i: the seed's derivation, checked on d2l's float64 table with ag::rotary_embedding
  // as the matrix — R(−δω_j), so cos δω and −sin δω as its tables, the same for every row i.
  const int64_t d = 16, max_len = 1200;
  nn::PositionalEncoding encoding(d, 0.0, max_len);
  encoding.to(float64);
  const Tensor P = encoding.P.squeeze(0);  // (max_len, d)
  const int64_t rows = 100;
  for (int64_t delta : {1, 5, 64, 1000}) {
    std::vector<double> c(static_cast<std::size_t>(rows * d / 2)), s(c.size());
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < d / 2; ++j) {
        const double omega = 1.0 / std::pow(10000.0, static_cast<double>(2 * j) / d);
        c[static_cast<std::size_t>(i * d / 2 + j)] = std::cos(delta * omega);
        s[static_cast<std::size_t>(i * d / 2 + j)] = -std::sin(delta * omega);
      }
    const Tensor turned = rotary_embedding(narrow(P, 0, 0, rows), tensor(c, {rows, d / 2}, float64),
        tensor(s, {rows, d / 2}, float64));  // rows i = 0 … 99, each turned by R(−δω)
    INFO("δ " << delta);
    CHECK(max_abs_diff(turned, narrow(P, 0, delta, rows)) <= 1e-12);
  }
}

TEST_CASE("RotaryEmbedding: cached tables, grown by doubling, views of them — to() recomputes",
    "[nn][positions]") {
  nn::RotaryEmbedding rope(6);
  CHECK(rope.cos_cached.shape() == Shape{nn::RotaryEmbedding::kInitialPositions, 3});
  CHECK(rope.cos_cached.dtype() == float32);
  CHECK(rope.named_parameters().empty());
  CHECK(rope.named_buffers().empty());  // a cache, not state (test_state_dict.cpp)
  // Within the table: views of it.
  auto [c, s] = rope.angles(10, 5, float32);
  CHECK(c.shape() == Shape{5, 3});
  CHECK(c.shares_storage(rope.cos_cached));
  CHECK(s.shares_storage(rope.sin_cached));
  // cos θ and sin θ of θ_{t,j} = t · 10000^(−2j/6), rounded once from double.
  for (int64_t t = 10; t < 15; ++t)
    for (int64_t j = 0; j < 3; ++j) {
      const double theta = t / std::pow(10000.0, 2.0 * j / 6.0);
      CHECK(nn_test::at(c, {t - 10, j}) == static_cast<float>(std::cos(theta)));
      CHECK(nn_test::at(s, {t - 10, j}) == static_cast<float>(std::sin(theta)));
    }
  // Past the table: grown by doubling (1024 -> 2048 -> 4096), the earlier rows unchanged.
  const std::vector<double> first_rows = values(rope.cos_cached.narrow(0, 0, 20));
  auto [far_cos, far_sin] = rope.angles(3000, 2, float32);
  CHECK(rope.cos_cached.size(0) == 4096);
  CHECK(rope.sin_cached.size(0) == 4096);
  CHECK(values(rope.cos_cached.narrow(0, 0, 20)) == first_rows);
  CHECK(nn_test::at(far_sin, {1, 2}) ==
        static_cast<float>(std::sin(3001 / std::pow(10000.0, 4.0 / 6.0))));
  // to(float64): computed again in double (not widened from float32), every row kept.
  rope.to(float64);
  CHECK(rope.cos_cached.dtype() == float64);
  CHECK(rope.cos_cached.size(0) == 4096);
  CHECK(nn_test::at(rope.cos_cached, {3001, 1}) == std::cos(3001 / std::pow(10000.0, 2.0 / 6.0)));
  // Another dtype than the module's: the rows asked for, computed from double, not cached.
  auto [c32, s32] = rope.angles(5, 3, float32);
  CHECK(c32.dtype() == float32);
  CHECK(nn_test::at(s32, {2, 0}) == static_cast<float>(std::sin(7.0)));
  CHECK_FALSE(c32.shares_storage(rope.cos_cached));
  // T = 0 at the table's end.
  CHECK(rope.angles(4096, 0, float64).first.shape() == Shape{0, 3});
  // So an input of another dtype than the module's is turned by exact angles of its own dtype:
  // float64 queries in a float32 module, as in a float64 one.
  nn::RotaryEmbedding rope32(6);
  const Tensor q = nn_test::input64({2, 40, 6}, 3);
  CHECK(values(rope32(q, 2000)) == values(rope(q, 2000)));
}

namespace {
// One RotaryEmbedding forward and backward of the head view of a (B, T, H·d) projection, on the
// fused op or the composed path: the output and the projection's gradient.
std::pair<Tensor, Tensor> run_rope(bool fused, DType dtype, int64_t dim, int64_t d,
    RotaryPairs pairs, int64_t first, uint64_t seed) {
  nn::FusedKernelsGuard path(fused);
  nn::RotaryEmbedding rope(dim, 10000.0, pairs);
  rope.to(dtype);
  Generator generator(seed);
  const int64_t B = 2, T = 5, H = 3;
  const Tensor projection = randn({B, T, H * d}, generator, dtype).requires_grad_();
  const Tensor heads = projection.reshape({B, T, H, d}).permute({0, 2, 1, 3});  // (B, H, T, d)
  const Tensor y = rope(heads, first);                                          // (B, H, T, d)
  sum(y * randn({B, H, T, d}, generator, dtype)).backward();
  return {y.detach(), projection.grad()};
}
}  // namespace

TEST_CASE("RotaryEmbedding: the fused op and the composed path agree, forward and gradients",
    "[nn][positions][fused]") {
  // The composed path computes each element as the op does (a cos θ − b sin θ, a sin θ + b cos θ),
  // so the two agree to rounding: bit for bit, or, where the compiler fuses a multiply-add into
  // one rounding, to an ulp or two of values below 8 (2e-15 in float64, 1e-6 in float32).
  for (const auto& [dtype, tolerance] : {std::pair{float64, 2e-15}, std::pair{float32, 1e-6}})
    for (RotaryPairs pairs : {RotaryPairs::interleaved, RotaryPairs::halves})
      for (const auto& [dim, d] : {std::pair<int64_t, int64_t>{6, 6}, {4, 6}}) {
        INFO(dtype_name(dtype) << ", " << name_of(pairs) << ", dim " << dim << " of d " << d);
        const auto [y_fused, g_fused] = run_rope(true, dtype, dim, d, pairs, 37, 50);
        const auto [y_composed, g_composed] = run_rope(false, dtype, dim, d, pairs, 37, 50);
        CHECK(max_abs_diff(y_fused, y_composed) <= tolerance);
        CHECK(max_abs_diff(g_fused, g_composed) <= tolerance);
      }
}

TEST_CASE("RotaryEmbedding: the fused path records one op, the composed path the primitives",
    "[nn][positions][fused]") {
  Generator generator(3);
  const Tensor x = randn({1, 4, 8}, generator).requires_grad_();
  nn::RotaryEmbedding rope(8);
  {
    nn::FusedKernelsGuard fused(true);
    CHECK(rope(x).grad_fn()->name() == std::string("rotary_embedding"));
  }
  {
    nn::FusedKernelsGuard composed(false);
    CHECK(rope(x).grad_fn()->name() == std::string("reshape"));  // the pairs put back side by side
  }
}

TEST_CASE("RotaryEmbedding: repr, pairing names, errors", "[nn][positions][errors]") {
  CHECK(nn::RotaryEmbedding(16).repr() ==
        "RotaryEmbedding(dim=16, base=10000.0, pairs='interleaved')");
  CHECK(nn::RotaryEmbedding(8, 500000.0, RotaryPairs::halves).repr() ==
        "RotaryEmbedding(dim=8, base=500000.0, pairs='halves')");
  CHECK(nn::rotary_pairs_name(RotaryPairs::interleaved) == "interleaved");
  CHECK(nn::rotary_pairs_name(RotaryPairs::halves) == "halves");
  CHECK(nn::parse_rotary_pairs("halves", "--rope-pairs") == RotaryPairs::halves);
  CHECK(nn::parse_rotary_pairs("interleaved", "--rope-pairs") == RotaryPairs::interleaved);
  CHECK_THROWS_MATCHES(nn::parse_rotary_pairs("neox", "--rope-pairs"), ValueError,
      Catch::Matchers::Message(
          "--rope-pairs: 'neox' is not a pairing of rotary position embedding "
          "(interleaved: Llama's, RoFormer's; halves: GPT-NeoX's rotate_half)"));
  CHECK_THROWS_WITH(nn::RotaryEmbedding(7),
      Equals(
          "RotaryEmbedding: dim 7 must be positive and even (the features are turned in pairs)"));
  CHECK_THROWS_AS(nn::RotaryEmbedding(0), ValueError);
  CHECK_THROWS_AS(nn::RotaryEmbedding(8, 0.0), ValueError);
  CHECK_THROWS_AS(nn::RotaryEmbedding(8, -2.0), ValueError);
  CHECK_THROWS_AS(nn::RotaryEmbedding(8, INFINITY), ValueError);
  nn::RotaryEmbedding rope(8);
  CHECK_THROWS_WITH(
      rope(ones({2, 3, 8}), -1), Equals("RotaryEmbedding: first_position -1 is negative"));
  CHECK_THROWS_AS(rope.angles(0, -1, float32), ValueError);
  CHECK_THROWS_AS(rope.angles(INT64_MAX, 2, float32), ValueError);
  CHECK_THROWS_AS(rope.angles(0, 2, int64), DTypeError);
  CHECK_THROWS_WITH(rope(ones({2, 3, 6})),
      Equals(
          "RotaryEmbedding: input of shape [2,3,6] has d = 6 features, fewer than the dim = 8 it "
          "turns"));
  CHECK_THROWS_WITH(
      rope(ones({8})), Equals("RotaryEmbedding: input of shape [8] is not (..., T, d)"));
  CHECK_THROWS_AS(rope(ones({2, 8}).to(int64)), DTypeError);
}
