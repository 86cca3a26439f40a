// The attention layers' values: the positional encoding's formula and rotation property,
// masked_softmax's masking (weights, gradients, errors, extreme logits) and MultiHeadAttention's
// per-head weights and valid lengths.
#include "nn_test_util.h"

using namespace ag;
using Catch::Matchers::Contains;
using nn_test::at;
using nn_test::values;

// ---- positional encoding ------------------------------------------------------------------------

TEST_CASE("positional encoding: a shift by δ is a rotation by δ·ω_j of each column pair",
    "[nn][seed][posenc]") {
  // P[i+δ, 2j] + i·P[i+δ, 2j+1] is P[i, 2j] + i·P[i, 2j+1] turned by δ·ω_j, ω_j = 1/10000^(2j/d):
  //   sin((i+δ)ω) =  cos(δω)·sin(iω) + sin(δω)·cos(iω)
  //   cos((i+δ)ω) = −sin(δω)·sin(iω) + cos(δω)·cos(iω)
  const int64_t d = 32, max_len = 1000;
  nn::PositionalEncoding encoding(d, 0.0, max_len);
  REQUIRE(encoding.P.shape() == Shape{1, max_len, d});
  const std::vector<double> P = values(encoding.P);
  auto p = [&](int64_t i, int64_t c) { return P[static_cast<std::size_t>(i * d + c)]; };
  double worst = 0;
  int64_t checked = 0, failures = 0;
  for (int64_t delta = 0; delta <= 50; ++delta)
    for (int64_t j = 0; j < d / 2; ++j) {
      const double omega =
          1.0 / std::pow(10000.0, static_cast<double>(2 * j) / static_cast<double>(d));
      const double c = std::cos(delta * omega), s = std::sin(delta * omega);
      for (int64_t i = 0; i + delta < max_len; ++i) {
        const double sin_shifted = c * p(i, 2 * j) + s * p(i, 2 * j + 1);
        const double cos_shifted = -s * p(i, 2 * j) + c * p(i, 2 * j + 1);
        const double error = std::max(std::abs(sin_shifted - p(i + delta, 2 * j)),
            std::abs(cos_shifted - p(i + delta, 2 * j + 1)));
        worst = std::max(worst, error);
        failures += !(error <= 1e-5);
        ++checked;
      }
    }
  INFO("worst error " << worst << " over " << checked << " (δ, i, j)");
  CHECK(checked == 51 * 16 * (1000 - 25));  // Σ_δ (1000 − δ) = 51·975 positions per pair
  CHECK(failures == 0);
}

TEST_CASE("positional encoding: entries of P by the formula", "[nn][seed][posenc]") {
  // Expected values computed in Python: math.sin(i / 10000**(2*j/32)) and math.cos(...).
  nn::PositionalEncoding encoding(32, 0.0);
  const Tensor& P = encoding.P;
  CHECK(at(P, {0, 0, 0}) == 0.0);
  CHECK(at(P, {0, 0, 1}) == 1.0);
  CHECK(at(P, {0, 0, 31}) == 1.0);
  CHECK(at(P, {0, 1, 0}) == Approx(0.8414709848078965).margin(1e-7));
  CHECK(at(P, {0, 1, 1}) == Approx(0.5403023058681398).margin(1e-7));
  CHECK(at(P, {0, 2, 2}) == Approx(0.9021307149638974).margin(1e-7));
  CHECK(at(P, {0, 2, 3}) == Approx(0.4314628293592941).margin(1e-7));
  CHECK(at(P, {0, 7, 10}) == Approx(0.38355156764576487).margin(1e-7));
  CHECK(at(P, {0, 7, 11}) == Approx(0.9235194610599585).margin(1e-7));
  CHECK(at(P, {0, 500, 0}) == Approx(-0.46777180532247614).margin(1e-7));
  CHECK(at(P, {0, 999, 30}) == Approx(0.17671715981409186).margin(1e-7));
  CHECK(at(P, {0, 999, 31}) == Approx(0.9842616752811423).margin(1e-7));
}

TEST_CASE("positional encoding: forward adds P[:T] to every batch row", "[nn][posenc]") {
  nn::PositionalEncoding encoding(6, 0.0, 10);
  Tensor X = nn_test::randn32({2, 4, 6}, 1);
  Tensor Y = encoding(X);
  REQUIRE(Y.shape() == Shape{2, 4, 6});
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t t = 0; t < 4; ++t)
      for (int64_t c = 0; c < 6; ++c)
        CHECK(at(Y, {b, t, c}) == static_cast<float>(at(X, {b, t, c}) + at(encoding.P, {0, t, c})));
}

TEST_CASE("positional encoding: forward from a first position adds P[first : first + T]",
    "[nn][posenc]") {
  nn::PositionalEncoding encoding(6, 0.0, 10);
  nn::LearnedPositionalEncoding learned(6, 0.0, 10);
  Tensor X = nn_test::randn32({2, 3, 6}, 2);
  for (const int64_t first : {0, 4, 7}) {  // 7: positions 7, 8, 9, the last three of the table
    Tensor Y = encoding(X, first), Y_learned = learned(X, first);
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t t = 0; t < 3; ++t)
        for (int64_t c = 0; c < 6; ++c) {
          CHECK(at(Y, {b, t, c}) ==
                static_cast<float>(at(X, {b, t, c}) + at(encoding.P, {0, first + t, c})));
          CHECK(at(Y_learned, {b, t, c}) ==
                static_cast<float>(at(X, {b, t, c}) + at(learned.P, {0, first + t, c})));
        }
  }
  CHECK_THROWS_AS(encoding(X, 8), ShapeError);  // positions 8, 9, 10
  CHECK_THROWS_WITH(encoding(X, 8), Contains("PositionalEncoding") &&
                                        Contains("3 positions from position 8") &&
                                        Contains("[2,3,6]") && Contains("max_len 10"));
  CHECK_THROWS_WITH(learned(X, int64_t{1} << 62), Contains("LearnedPositionalEncoding"));
  CHECK_THROWS_AS(encoding(X, -1), ValueError);
  CHECK_THROWS_WITH(encoding(X, -1), Contains("first_position -1 is negative"));
}

TEST_CASE("positional encoding: to(float64) computes P in float64, not widened from float32",
    "[nn][posenc]") {
  nn::PositionalEncoding encoding(32, 0.0, 1000);
  const std::vector<float> float32_table = encoding.P.to_vector<float>();
  encoding.to(float64);
  REQUIRE(encoding.P.dtype() == float64);
  for (const int64_t i : {1, 17, 999})
    for (const int64_t j : {0, 5, 15}) {
      const double angle = static_cast<double>(i) / std::pow(10000.0, 2.0 * j / 32);
      CHECK(at(encoding.P, {0, i, 2 * j}) == std::sin(angle));  // exact: the same double formula
      CHECK(at(encoding.P, {0, i, 2 * j + 1}) == std::cos(angle));
    }
  // Forward adds the float64 table.
  Tensor Y = encoding(zeros({1, 3, 32}, float64), 997);
  CHECK(at(Y, {0, 2, 30}) == at(encoding.P, {0, 999, 30}));
  // And back: the float32 table as it was, bit for bit.
  encoding.to(float32);
  CHECK(encoding.P.to_vector<float>() == float32_table);
}

TEST_CASE("positional encoding: an odd width ends in a sine column", "[nn][posenc]") {
  // d = 7: pairs (0,1), (2,3), (4,5) and column 6 = sin(i / 10000^(6/7)), with no cosine partner.
  nn::PositionalEncoding encoding(7, 0.0, 1000);
  REQUIRE(encoding.P.shape() == Shape{1, 1000, 7});
  CHECK(at(encoding.P, {0, 0, 6}) == 0.0);  // a cosine would give 1
  CHECK(at(encoding.P, {0, 1, 6}) == Approx(0.0003727593633990364).margin(1e-9));
  CHECK(at(encoding.P, {0, 2, 6}) == Approx(0.0007455186750033279).margin(1e-9));
  CHECK(at(encoding.P, {0, 999, 6}) == Approx(0.3638395042326189).margin(1e-7));
  CHECK(at(encoding.P, {0, 999, 5}) ==
        Approx(std::cos(999 / std::pow(10000.0, 4.0 / 7))).margin(1e-7));
  Tensor Y = encoding(zeros({2, 3, 7}));
  CHECK(Y.shape() == Shape{2, 3, 7});
  CHECK(values(Y.select(0, 1)) == values(encoding.P.narrow(1, 0, 3).select(0, 0)));
}

TEST_CASE("positional encoding: a sequence longer than max_len is a ShapeError naming the shapes",
    "[nn][posenc]") {
  nn::PositionalEncoding encoding(8, 0.0, 5);
  CHECK_NOTHROW(encoding(zeros({2, 5, 8})));
  CHECK_THROWS_AS(encoding(zeros({2, 6, 8})), ShapeError);
  CHECK_THROWS_WITH(encoding(zeros({2, 6, 8})),
      Contains("PositionalEncoding") && Contains("[2,6,8]") && Contains("max_len 5"));
  nn::LearnedPositionalEncoding learned(8, 0.0, 5);
  CHECK_THROWS_WITH(learned(zeros({1, 7, 8})),
      Contains("LearnedPositionalEncoding") && Contains("[1,7,8]") && Contains("max_len 5"));
}

// ---- masked_softmax -----------------------------------------------------------------------------

TEST_CASE("masked_softmax: masked positions get weight exactly 0 and gradient exactly 0",
    "[nn][masked_softmax]") {
  const int64_t B = 2, Q = 3, K = 5;
  SECTION("one valid length per batch row") {
    Tensor X = nn_test::randn32({B, Q, K}, 2).requires_grad_();
    const std::vector<int64_t> lens = {2, 4};
    Tensor W = nn::masked_softmax(X, tensor({2, 4}));
    W.backward(nn_test::randn32({B, Q, K}, 3));
    for (int64_t b = 0; b < B; ++b)
      for (int64_t q = 0; q < Q; ++q) {
        double row_sum = 0;
        for (int64_t k = 0; k < K; ++k) {
          INFO("b " << b << " q " << q << " k " << k);
          row_sum += at(W, {b, q, k});
          if (k >= lens[b]) {
            CHECK(at(W, {b, q, k}) == 0.0);
            CHECK(at(X.grad(), {b, q, k}) == 0.0);
          } else {
            CHECK(at(W, {b, q, k}) > 0.0);
            CHECK(at(X.grad(), {b, q, k}) != 0.0);
          }
        }
        CHECK(row_sum == Approx(1.0).margin(1e-6));
      }
  }
  SECTION("one valid length per query") {
    Tensor X = nn_test::randn32({B, Q, K}, 4).requires_grad_();
    const std::vector<std::vector<int64_t>> lens = {{1, 5, 3}, {2, 2, 4}};
    Tensor W = nn::masked_softmax(X, tensor({1, 5, 3, 2, 2, 4}, {B, Q}));
    W.backward(nn_test::randn32({B, Q, K}, 5));
    for (int64_t b = 0; b < B; ++b)
      for (int64_t q = 0; q < Q; ++q)
        for (int64_t k = 0; k < K; ++k) {
          INFO("b " << b << " q " << q << " k " << k);
          const bool masked = k >= lens[b][q];
          CHECK((at(W, {b, q, k}) == 0.0) == masked);
          if (masked)
            CHECK(at(X.grad(), {b, q, k}) == 0.0);
          else if (lens[b][q] > 1)  // a single valid key has weight 1 whatever its score
            CHECK(at(X.grad(), {b, q, k}) != 0.0);
        }
  }
}

TEST_CASE("masked_softmax: a valid length of 0 gives uniform weights 1/K, finite everywhere",
    "[nn][masked_softmax]") {
  Tensor X = nn_test::randn32({2, 2, 4}, 6).requires_grad_();
  Tensor W = nn::masked_softmax(X, tensor({0, 3}));
  W.backward(nn_test::randn32({2, 2, 4}, 7));
  CHECK(nn_test::all_finite(W));
  CHECK(nn_test::all_finite(X.grad()));
  for (int64_t q = 0; q < 2; ++q)
    for (int64_t k = 0; k < 4; ++k) CHECK(at(W, {0, q, k}) == Approx(0.25).margin(1e-7));
  // The whole row is masked, so its scores do not matter: zero gradient.
  CHECK(values(X.grad().select(0, 0)) == std::vector<double>(8, 0.0));
  // Per query as well, in float64.
  Tensor W64 = nn::masked_softmax(nn_test::input64({1, 2, 3}, 8), tensor({0, 2}, {1, 2}));
  CHECK(values(W64.select(0, 0).select(0, 0)) == std::vector<double>(3, 1.0 / 3.0));
}

TEST_CASE("masked_softmax: valid lengths of the wrong shape are a ShapeError naming both shapes",
    "[nn][masked_softmax]") {
  const Tensor X = zeros({2, 3, 5});
  CHECK_THROWS_AS(nn::masked_softmax(X, tensor({1, 2, 3})), ShapeError);
  CHECK_THROWS_WITH(nn::masked_softmax(X, tensor({1, 2, 3})),
      Contains("masked_softmax") && Contains("[3]") && Contains("[2,3,5]"));
  CHECK_THROWS_WITH(nn::masked_softmax(X, ones({3, 2})), Contains("[3,2]") && Contains("[2,3,5]"));
  CHECK_THROWS_WITH(
      nn::masked_softmax(X, ones({2, 3, 1})), Contains("[2,3,1]") && Contains("[2,3,5]"));
  CHECK_THROWS_WITH(nn::masked_softmax(zeros({2, 5}), ones({2})),
      Contains("masked_softmax") && Contains("[2,5]"));
}

TEST_CASE(
    "masked_softmax: negative, too large or fractional valid lengths are a ShapeError naming both "
    "shapes",
    "[nn][masked_softmax]") {
  const Tensor X = zeros({2, 3, 5});
  for (const std::vector<double>& lens : {std::vector<double>{-1, 2}, {2, 6}, {2.5, 1}}) {
    INFO("valid_lens " << tensor(lens).str());
    CHECK_THROWS_AS(nn::masked_softmax(X, tensor(lens)), ShapeError);
    CHECK_THROWS_WITH(nn::masked_softmax(X, tensor(lens)),
        Contains("masked_softmax") && Contains("[2]") && Contains("[2,3,5]"));
  }
  CHECK_THROWS_AS(nn::masked_softmax(X, tensor({1, 2, 3, 4, 5, 7}, {2, 3})), ShapeError);
  CHECK_THROWS_WITH(nn::masked_softmax(X, tensor({1, 2, 3, 4, 5, 7}, {2, 3})),
      Contains("masked_softmax") && Contains("[2,3]") && Contains("[2,3,5]"));
}

TEST_CASE(
    "masked_softmax: logits of ±1e4 stay finite in forward and backward", "[nn][masked_softmax]") {
  for (DType dtype : {float32, float64}) {
    INFO(dtype_name(dtype));
    Tensor X =
        tensor({1e4, -1e4, 1e4, -1e4, 0, -1e4, -1e4, -1e4, 1e4, 1e4, -1e4, 1e4}, {2, 2, 3}, dtype)
            .requires_grad_();
    Tensor W = nn::masked_softmax(X, tensor({3, 2}));
    Generator generator(9);
    W.backward(randn({2, 2, 3}, generator, dtype));
    CHECK(nn_test::all_finite(W));
    CHECK(nn_test::all_finite(X.grad()));
    CHECK(at(W, {0, 0, 0}) == Approx(0.5));  // two equal maxima share the weight
    CHECK(at(W, {0, 0, 1}) == 0.0);
    CHECK(at(W, {0, 1, 1}) == 1.0);
    Tensor unmasked = nn::masked_softmax(X.detach());
    CHECK(nn_test::all_finite(unmasked));
  }
}

// ---- MultiHeadAttention -------------------------------------------------------------------------

TEST_CASE(
    "MultiHeadAttention: num_hiddens not divisible by num_heads is a ValueError", "[nn][mha]") {
  CHECK_THROWS_AS(nn::MultiHeadAttention(8, 8, 8, 10, 3, 0.0), ValueError);
  CHECK_THROWS_WITH(nn::MultiHeadAttention(8, 8, 8, 10, 3, 0.0),
      Contains("MultiHeadAttention") && Contains("10") && Contains("3"));
  CHECK_THROWS_AS(nn::MultiHeadAttention(8, 8, 8, 8, 0, 0.0), ValueError);
}

TEST_CASE(
    "MultiHeadAttention: attention_weights() is (B, H, Q, K) with rows summing to 1", "[nn][mha]") {
  manual_seed(30);
  nn::MultiHeadAttention attention(6, 4, 3, 8, 4, 0.0);
  CHECK_FALSE(attention.attention_weights().defined());  // before any forward
  Tensor Y = attention(nn_test::randn32({2, 3, 4}, 1), nn_test::randn32({2, 5, 6}, 2),
      nn_test::randn32({2, 5, 3}, 3));
  CHECK(Y.shape() == Shape{2, 3, 8});
  Tensor W = attention.attention_weights();
  REQUIRE(W.shape() == Shape{2, 4, 3, 5});
  CHECK_FALSE(W.requires_grad());
  const std::vector<double> row_sums = values(sum(W, {3}));
  REQUIRE(row_sums.size() == 2 * 4 * 3);
  for (double s : row_sums) CHECK(s == Approx(1.0).margin(1e-6));
}

TEST_CASE("MultiHeadAttention: every head of batch row b uses b's valid length", "[nn][mha]") {
  // transpose_qkv puts head h of row b at b·H + h: the lengths must be repeated batch-major
  // ([l0, l0, l0, l1, l1, l1, ...]), not tiled head-major.
  manual_seed(31);
  const int64_t B = 3, H = 3, Q = 2, K = 5;
  nn::MultiHeadAttention attention(4, 4, 4, 6, H, 0.0);
  SECTION("per batch row") {
    const std::vector<int64_t> lens = {1, 4, 2};
    attention(nn_test::randn32({B, Q, 4}, 4), nn_test::randn32({B, K, 4}, 5),
        nn_test::randn32({B, K, 4}, 6), tensor({1, 4, 2}));
    Tensor W = attention.attention_weights();
    REQUIRE(W.shape() == Shape{B, H, Q, K});
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t q = 0; q < Q; ++q)
          for (int64_t k = 0; k < K; ++k) {
            INFO("b " << b << " h " << h << " q " << q << " k " << k);
            if (k >= lens[b])
              CHECK(at(W, {b, h, q, k}) == 0.0);
            else
              CHECK(at(W, {b, h, q, k}) > 0.0);
          }
  }
  SECTION("per query") {
    const std::vector<std::vector<int64_t>> lens = {{1, 5}, {3, 2}, {4, 0}};
    attention(nn_test::randn32({B, Q, 4}, 7), nn_test::randn32({B, K, 4}, 8),
        nn_test::randn32({B, K, 4}, 9), tensor({1, 5, 3, 2, 4, 0}, {B, Q}));
    Tensor W = attention.attention_weights();
    REQUIRE(W.shape() == Shape{B, H, Q, K});
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t q = 0; q < Q; ++q)
          for (int64_t k = 0; k < K; ++k) {
            INFO("b " << b << " h " << h << " q " << q << " k " << k);
            if (lens[b][q] == 0)
              CHECK(at(W, {b, h, q, k}) == Approx(1.0 / K).margin(1e-7));
            else if (k >= lens[b][q])
              CHECK(at(W, {b, h, q, k}) == 0.0);
            else
              CHECK(at(W, {b, h, q, k}) > 0.0);
          }
  }
}

TEST_CASE("MultiHeadAttention: the heads are independent attentions of width D/H", "[nn][mha]") {
  // Recompute d2l's multi-head attention by hand, head by head, from the projections.
  manual_seed(32);
  const int64_t B = 2, Q = 3, K = 4, D = 6, H = 2, Dh = D / H;
  nn::MultiHeadAttention attention(5, 5, 5, D, H, 0.0);
  attention.to(float64);
  Tensor queries = nn_test::input64({B, Q, 5}, 10).detach(),
         keys = nn_test::input64({B, K, 5}, 11).detach();
  Tensor lens = tensor({2, 4});
  Tensor Y = attention(queries, keys, keys, lens);
  Tensor q = attention.W_q->forward(queries), k = attention.W_k->forward(keys),
         v = attention.W_v->forward(keys);
  std::vector<Tensor> heads;
  for (int64_t h = 0; h < H; ++h) {
    Tensor qh = q.narrow(2, h * Dh, Dh), kh = k.narrow(2, h * Dh, Dh), vh = v.narrow(2, h * Dh, Dh);
    Tensor scores = matmul(qh, kh.transpose(1, 2)) / std::sqrt(static_cast<double>(Dh));
    heads.push_back(matmul(nn::masked_softmax(scores, lens), vh));
  }
  Tensor expected = attention.W_o->forward(concat(heads, 2));
  CHECK(nn_test::max_abs_diff(Y, expected) < 1e-12);
}

TEST_CASE("attention layers take is_causal: d2l's dec_valid_lens without building them",
    "[nn][attention][causal]") {
  manual_seed(9);
  nn::MultiHeadAttention attention(8, 8, 8, 8, 2, 0.0);
  attention.eval();
  const Tensor X = randn({2, 4, 8});  // (B, T, D)
  // d2l's decoder: dec_valid_lens = arange(1, T + 1) per batch row.
  const Tensor dec_valid_lens = tensor({1, 2, 3, 4, 1, 2, 3, 4}, {2, 4});
  const Tensor causal = attention(X, X, X, Tensor(), /*is_causal=*/true);
  CHECK(causal.to_vector<float>() == attention(X, X, X, dec_valid_lens).to_vector<float>());
  // With valid lengths too, the smaller of both (here 2 for row 0: keys 0 and 1 at most).
  const Tensor both = attention(X, X, X, tensor({2, 4}), true);
  const Tensor lens = tensor({1, 2, 2, 2, 1, 2, 3, 4}, {2, 4});
  CHECK(both.to_vector<float>() == attention(X, X, X, lens).to_vector<float>());
  // The composed path (d2l's code op by op) masks the same way.
  nn::DotProductAttention plain(0.0);
  CHECK(plain(X, X, X, Tensor(), true).to_vector<float>() ==
        plain(X, X, X, dec_valid_lens).to_vector<float>());
  CHECK_THROWS_WITH(
      attention(randn({1, 5, 8}), X.narrow(0, 0, 1), X.narrow(0, 0, 1), Tensor(), true),
      Contains("MultiHeadAttention: is_causal with 5 queries and 4 keys"));
}
