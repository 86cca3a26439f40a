// ag-backprop-attention: the numbers of docs/backprop_attention.md.
//
// Seven small computations, each in float64, each printing what the guide quotes:
//   1. scaled dot-product attention: the forward, the backward by the formulas, and autograd's
//   2. masked softmax: masked keys get weight 0 and gradient 0; a row of valid length 0
//   3. transpose_qkv's backward is transpose_output
//   4. layer norm's backward and the two sums it makes 0
//   5. the positional encoding's rotation property
//   6. RoPE: the same rotation applied to queries and keys, and its backward
//   7. the backward trace of a whole MultiHeadAttention, composed and fused
// tests/examples/test_backprop_guide.cpp runs this program and checks that every output block the
// guide quotes is still printed exactly so.
//
//   ag-backprop-attention      (no options; --help says what it prints)
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <string>

#include "autograd/graph_tools.h"
#include "nn/nn.h"
#include "training/cli.h"

using namespace ag;

namespace {

void section(const std::string& title) { std::cout << "\n== " << title << " ==\n"; }

// The largest |x| over all elements.
double max_abs(const Tensor& x) {
  double worst = 0;
  for (double value : x.to_vector<double>()) worst = std::max(worst, std::abs(value));
  return worst;
}

double max_abs_difference(const Tensor& a, const Tensor& b) { return max_abs(sub(a, b)); }

const char* yes_no(bool condition) { return condition ? "yes" : "no"; }

// 1. S = Q·Kᵀ/√d, P = softmax(S), O = P·V; the loss is Σ O ⊙ G, so dO = G.
void scaled_dot_product_attention_by_hand() {
  section("1. scaled dot-product attention");
  const double d = 2;
  Tensor Q = tensor({1.0, 0.0, 0.5, -1.0}, {2, 2}, float64).requires_grad_();  // (queries 2, d 2)
  Tensor K =
      tensor({1.0, 1.0, 0.0, 2.0, -1.0, 0.5}, {3, 2}, float64).requires_grad_();  // (keys 3, d 2)
  Tensor V =
      tensor({1.0, 0.0, 0.0, 1.0, 2.0, 2.0}, {3, 2}, float64).requires_grad_();  // (keys 3, dv 2)
  const Tensor G = tensor({1.0, -1.0, 0.5, 2.0}, {2, 2}, float64);               // (2, 2) dO

  // The forward, op by op (what DotProductAttention::forward does per head)
  Tensor S = matmul(Q, K.transpose(0, 1)) / std::sqrt(d);  // (2, 3)
  Tensor P = softmax(S, -1);                               // (2, 3)
  Tensor O = matmul(P, V);                                 // (2, 2)
  std::cout << "P = softmax(Q·Kᵀ/√d):\n" << P << "\nO = P·V:\n" << O << "\n";

  // Autograd's gradients: backward from O with upstream gradient G
  O.backward(G);

  // The backward by the formulas, with no autograd
  NoGradGuard formulas_only;
  const Tensor dV = matmul(P.transpose(0, 1), G);  // (3, 2)  dV = Pᵀ·dO
  const Tensor dP = matmul(G, V.transpose(0, 1));  // (2, 3)  dP = dO·Vᵀ
  const Tensor dS = mul(P,
      sub(dP, sum(mul(dP, P), {-1}, /*keepdim=*/true)));  // (2, 3)  dS = P ⊙ (dP − rowsum(dP ⊙ P))
  const Tensor dQ = matmul(dS, K) / std::sqrt(d);         // (2, 2)  dQ = dS·K/√d
  const Tensor dK = matmul(dS.transpose(0, 1), Q) / std::sqrt(d);  // (3, 2)  dK = dSᵀ·Q/√d
  std::cout << "dS = P ⊙ (dP − rowsum(dP ⊙ P)):\n" << dS << "\n";
  std::cout << "each row of dS sums to 0: " << yes_no(max_abs(sum(dS, {-1})) < 1e-12) << "\n";
  std::cout << "dQ = dS·K/√d:\n"
            << dQ << "\ndK = dSᵀ·Q/√d:\n"
            << dK << "\ndV = Pᵀ·dO:\n"
            << dV << "\n";

  const double worst = std::max({max_abs_difference(Q.grad(), dQ), max_abs_difference(K.grad(), dK),
      max_abs_difference(V.grad(), dV)});
  std::cout << "autograd's dQ, dK, dV equal the formulas' (to 1e-12): " << yes_no(worst < 1e-12)
            << "\n";
}

// 2. Two query rows over 4 keys: valid length 2, then 0.
void masked_softmax_gradient() {
  section("2. masked softmax");
  Tensor X = tensor({0.5, 1.0, 3.0, -2.0, 0.5, 1.0, 3.0, -2.0}, {1, 2, 4}, float64)
                 .requires_grad_();                           // (B 1, Q 2, K 4)
  const Tensor valid_lens = tensor({2, 0}, {1, 2}, float64);  // (B, Q)
  const Tensor G =
      tensor({1.0, 2.0, 3.0, 4.0, 1.0, 2.0, 3.0, 4.0}, {1, 2, 4}, float64);  // (1, 2, 4)
  nn::FusedKernelsGuard composed(false);  // d2l's code: masked_fill(−1e6), then softmax
  Tensor weights = nn::masked_softmax(X, valid_lens);  // (1, 2, 4)
  weights.backward(G);
  std::cout << "weights (valid lengths 2 and 0):\n"
            << weights << "\ngradient of the scores:\n"
            << X.grad() << "\n";
}

// 3. X (B 1, T 2, D 4) split into 2 heads of width 2.
void transpose_qkv_backward() {
  section("3. transpose_qkv and transpose_output");
  Tensor X = arange(8.0, float64).reshape({1, 2, 4}).requires_grad_();     // (B, T, D)
  Tensor heads = nn::transpose_qkv(X, 2);                                  // (B·H, T, D/H)
  const Tensor G = arange(100.0, 108.0, 1.0, float64).reshape({2, 2, 2});  // (B·H, T, D/H)
  heads.backward(G);
  std::cout << "transpose_qkv(X):\n" << heads << "\ngradient of X:\n" << X.grad() << "\n";
  const Tensor joined = nn::transpose_output(G, 2);  // (B, T, D)
  std::cout << "equals transpose_output(dY) element for element: "
            << yes_no(X.grad().to_vector<double>() == joined.to_vector<double>()) << "\n";
}

// 4. One row of 4, γ = 1, β = 0.
void layer_norm_backward() {
  section("4. layer norm");
  Tensor x = tensor({1.0, 2.0, 4.0, 7.0}, {1, 4}, float64).requires_grad_();  // (1, 4)
  const Tensor gamma = ones({4}, float64), beta = zeros({4}, float64);        // (4)
  const Tensor g = tensor({0.1, -0.2, 0.3, 0.05}, {1, 4}, float64);           // (1, 4) dy
  Tensor y = layer_norm(x, {4}, gamma, beta, 1e-5);                           // (1, 4) = x̂
  y.backward(g);
  NoGradGuard formulas_only;
  const Tensor x_hat = y;
  const double sigma = std::sqrt(var(x, {-1}, /*correction=*/0).item() + 1e-5);
  // dx = (g − mean(g) − x̂ · mean(g ⊙ x̂)) / σ
  const Tensor dx = div(sub(sub(g, mean(g)), mul(x_hat, mean(mul(g, x_hat)))), sigma);  // (1, 4)
  std::cout << "x̂ = (x − μ)/σ:\n" << x_hat << "\ndx by autograd:\n" << x.grad() << "\n";
  std::cout << "dx equals (g − mean(g) − x̂·mean(g ⊙ x̂))/σ (to 1e-12): "
            << yes_no(max_abs_difference(x.grad(), dx) < 1e-12) << "\n";
  // Σ dx = 0: adding a constant to x changes nothing after the normalisation. Σ dx ⊙ x̂ = 0 would
  // follow from scaling x changing nothing, which eps breaks slightly (x̂ = (x − μ)/√(var + eps)).
  std::cout << "Σ dx = 0 (to 1e-12): " << yes_no(std::abs(sum(x.grad()).item()) < 1e-12) << "\n";
  std::cout << "Σ dx ⊙ x̂ = 0 for eps = 0; with eps = 1e-5 below 1e-6: "
            << yes_no(std::abs(sum(mul(x.grad(), x_hat)).item()) < 1e-6) << "\n";
}

// 5. [P(i+δ, 2j), P(i+δ, 2j+1)] = R(δ·ω_j) [P(i, 2j), P(i, 2j+1)], ω_j = 1/10000^(2j/d).
void positional_encoding_rotation() {
  section("5. positional encoding: a shift by δ is a rotation");
  const int64_t d = 8, max_len = 60;
  nn::PositionalEncoding encoding(d, 0.0, max_len);
  const Tensor P = encoding.P.select(0, 0).to(float64);  // (max_len, d)
  auto at = [&](int64_t i, int64_t c) { return P.select(0, i).select(0, c).item(); };
  double worst = 0;
  for (int64_t delta = 1; delta <= 10; ++delta)
    for (int64_t i = 0; i + delta < max_len; ++i)
      for (int64_t j = 0; j < d / 2; ++j) {
        const double omega =
            1.0 / std::pow(10000.0, 2.0 * static_cast<double>(j) / static_cast<double>(d));
        const double angle = static_cast<double>(delta) * omega;
        const double sin_i = at(i, 2 * j), cos_i = at(i, 2 * j + 1);
        // sin(a + b) = sin a cos b + cos a sin b,  cos(a + b) = cos a cos b − sin a sin b
        const double sin_shifted = std::cos(angle) * sin_i + std::sin(angle) * cos_i;
        const double cos_shifted = -std::sin(angle) * sin_i + std::cos(angle) * cos_i;
        worst = std::max({worst, std::abs(sin_shifted - at(i + delta, 2 * j)),
            std::abs(cos_shifted - at(i + delta, 2 * j + 1))});
      }
  // One pair spelled out: j = 1 (ω_1 = 10000^(−2/8) = 0.1), position 5 shifted by δ = 3
  const double angle = 3 * std::pow(10000.0, -2.0 / static_cast<double>(d));
  char line[200];
  std::snprintf(line, sizeof line,
      "P[5, 2:4] = (%.6f, %.6f), rotated by 3·ω_1 = 0.3: (%.6f, %.6f), P[8, 2:4] = (%.6f, %.6f)",
      at(5, 2), at(5, 3), std::cos(angle) * at(5, 2) + std::sin(angle) * at(5, 3),
      -std::sin(angle) * at(5, 2) + std::cos(angle) * at(5, 3), at(8, 2), at(8, 3));
  std::cout << line << "\n";
  std::cout << "largest error over δ = 1..10, all positions and pairs, float32 table (below 1e-6): "
            << yes_no(worst < 1e-6) << "\n";
}

// 6. RoPE: pair j of a query or key at position t turned by R(t·ω_j); the score of (t, s) then
//    depends on s − t alone, and the backward turns the gradient back by −θ.
void rotary_position_embedding() {
  section("6. RoPE: the rotation moved into the queries and keys");
  const int64_t d = 8, max_len = 60;
  // (a) The unit vector (1, 0) turned by t·ω_j at every position t is d2l's table, its pair read
  //     as (cos, sin): (P[t, 2j+1], P[t, 2j]).
  nn::RotaryEmbedding rope(d);  // θ_{t,j} = t · 10000^(−2j/d), d2l's angles
  rope.to(float64);
  nn::PositionalEncoding encoding(d, 0.0, max_len);
  encoding.to(float64);
  const Tensor P = encoding.P.select(0, 0);  // (max_len, d)
  std::vector<double> unit(static_cast<std::size_t>(max_len * d), 0.0);
  for (std::size_t e = 0; e < unit.size(); e += 2) unit[e] = 1;     // (1, 0) in every pair
  const Tensor turned = rope(tensor(unit, {max_len, d}, float64));  // (max_len, d)
  bool table = true;
  for (int64_t t = 0; t < max_len; ++t)
    for (int64_t j = 0; j < d / 2; ++j)
      table =
          table &&
          turned.select(0, t).select(0, 2 * j).item() ==
              P.select(0, t).select(0, 2 * j + 1).item() &&
          turned.select(0, t).select(0, 2 * j + 1).item() == P.select(0, t).select(0, 2 * j).item();
  std::cout << "(1, 0) turned by t·ω_j is d2l's (P[t, 2j+1], P[t, 2j]), t < 60, every pair, bit "
               "for bit: "
            << yes_no(table) << "\n";
  // (b) One query and one key, turned at positions (t, s) and at (t + δ, s + δ): the same score.
  Generator data(2);
  const Tensor q = randn({1, d}, data, float64), k = randn({1, d}, data, float64);  // (1, d)
  auto score = [&](int64_t t, int64_t s) {
    return sum(mul(rope(q, t), rope(k, s))).item();  // (R(tω) q) · (R(sω) k)
  };
  char line[200];
  std::snprintf(line, sizeof line,
      "q·k = %.6f unturned; turned at (t, s) = (5, 2): %.6f, (105, 102): %.6f, (1005, 1002): "
      "%.6f",
      sum(mul(q, k)).item(), score(5, 2), score(105, 102), score(1005, 1002));
  std::cout << line << "\n";
  std::cout << "at (5, 2) and (1005, 1002) the same to 1e-12: "
            << yes_no(std::abs(score(5, 2) - score(1005, 1002)) < 1e-12) << "\n";
  // (c) The backward: y = R(θ) x, so dx = R(θ)ᵀ g = R(−θ) g — the forward with sin θ negated.
  const Tensor x = randn({3, d}, data, float64).requires_grad_();  // 3 positions
  const Tensor g = randn({3, d}, data, float64);                   // the upstream gradient
  mul(rope(x, 7), g).sum().backward();
  const auto [c, s] = rope.angles(7, 3, float64);         // (3, d/2) cos θ, sin θ
  const Tensor by_hand = rotary_embedding(g, c, neg(s));  // R(−θ) g
  std::cout << "dx = R(−θ)·g, autograd's and by hand, the same bits: "
            << yes_no(max_abs_difference(x.grad(), by_hand) == 0) << "\n";
}

// 7. One MultiHeadAttention (D 8, 2 heads) on B 1, Q 3 queries, K 4 key–value pairs, valid length
//    3; backward from a fixed upstream gradient, with every node printed as it runs.
void multi_head_attention_trace() {
  section("7. the backward trace of multi-head attention");
  manual_seed(0);
  nn::MultiHeadAttention attention(8, 8, 8, 8, 2, 0.0);
  attention.to(float64);
  attention.eval();
  Generator data(1);
  const Tensor queries = randn({1, 3, 8}, data, float64);   // (B, Q, D)
  const Tensor keys = randn({1, 4, 8}, data, float64);      // (B, K, D), also the values
  const Tensor upstream = randn({1, 3, 8}, data, float64);  // (B, Q, D) dLoss/dOutput
  const Tensor valid_lens = tensor({3}, float64);           // (B,)
  for (bool fused : {false, true}) {
    nn::FusedKernelsGuard path(fused);
    attention.zero_grad();
    Tensor output = attention(queries, keys, keys, valid_lens);  // (B, Q, D)
    std::cout << (fused ? "fused kernels (nn::fused_kernels() on, the default):\n"
                        : "composed d2l path (nn::set_fused_kernels(false)):\n");
    BackwardTraceGuard trace(std::cout, attention.named_parameters());
    output.backward(upstream);
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "ag-backprop-attention: prints the numbers docs/backprop_attention.md quotes: scaled\n"
      "dot-product attention, masked softmax, transpose_qkv, layer norm, the positional\n"
      "encoding and RoPE, each by its formula and by autograd (float64), and the backward trace\n"
      "of a MultiHeadAttention. It takes no options."};
  return ag::training::run_main("ag-backprop-attention", app, argc, argv, [] {
    std::cout << "ag-backprop-attention: the numbers of docs/backprop_attention.md (float64)\n";
    scaled_dot_product_attention_by_hand();
    masked_softmax_gradient();
    transpose_qkv_backward();
    layer_norm_backward();
    positional_encoding_rotation();
    rotary_position_embedding();
    multi_head_attention_trace();
    return 0;
  });
}
