// A float64 finite-difference gradient check of every differentiable op, including the
// broadcast cases attention code relies on. test_gradcheck_coverage.cpp fails if an op of
// autograd/op_list.h has no case here.
#include "attention_kernels.h"
#include "gradcheck_cases.h"

using namespace ag;
using ag_test::away_from_zero;
using ag_test::input;
using ag_test::mask;

using Inputs = std::vector<Tensor>;

// ---- elementwise --------------------------------------------------------------------------------

AG_GRADCHECK_CASE(add_same_shape, "add, same shapes") {
  return gradcheck(
      [](const Inputs& x) { return add(x[0], x[1]); }, {input({2, 3}, 1), input({2, 3}, 2)});
}
AG_GRADCHECK_CASE(add_btd_plus_d, "add, (B,T,D) + (D) as a bias") {
  return gradcheck(
      [](const Inputs& x) { return x[0] + x[1]; }, {input({2, 3, 4}, 1), input({4}, 2)});
}
AG_GRADCHECK_CASE(add_two_way, "add, (2,1,3) + (4,1) broadcast both ways") {
  return gradcheck(
      [](const Inputs& x) { return x[0] + x[1]; }, {input({2, 1, 3}, 1), input({4, 1}, 2)});
}
AG_GRADCHECK_CASE(sub_broadcast, "sub, (3,1) - (1,4)") {
  return gradcheck(
      [](const Inputs& x) { return x[0] - x[1]; }, {input({3, 1}, 1), input({1, 4}, 2)});
}
AG_GRADCHECK_CASE(mul_attention_broadcast, "mul, (B,1,T,H) * (B,1,T,1)") {
  return gradcheck([](const Inputs& x) { return x[0] * x[1]; },
      {input({2, 1, 3, 4}, 1), input({2, 1, 3, 1}, 2)});
}
AG_GRADCHECK_CASE(mul_scalar_tensor_broadcast, "mul, (2,3) * 0-dim tensor") {
  return gradcheck([](const Inputs& x) { return x[0] * x[1]; }, {input({2, 3}, 1), input({}, 2)});
}
AG_GRADCHECK_CASE(mul_same_tensor_twice, "mul, x * x (one tensor used twice)") {
  return gradcheck([](const Inputs& x) { return x[0] * x[0]; }, {input({3, 2}, 1)});
}
AG_GRADCHECK_CASE(div_broadcast, "div, (2,3,4) / (3,1)") {
  return gradcheck([](const Inputs& x) { return x[0] / x[1]; },
      {input({2, 3, 4}, 1), away_from_zero({3, 1}, 2, 0.5, 2.0)});
}
AG_GRADCHECK_CASE(scalar_forms, "tensor-scalar add, sub, mul, div") {
  return gradcheck([](const Inputs& x) { return ((x[0] + 2.0) * 3.0 - 1.5) / 4.0 + (2.0 - x[0]); },
      {input({2, 3}, 1)});
}
AG_GRADCHECK_CASE(add_scalar, "add_scalar") {
  return gradcheck([](const Inputs& x) { return 0.5 + x[0]; }, {input({4}, 1)});
}
AG_GRADCHECK_CASE(mul_scalar, "mul_scalar") {
  return gradcheck([](const Inputs& x) { return -3.0 * x[0]; }, {input({4}, 1)});
}
AG_GRADCHECK_CASE(div_scalar, "div_scalar") {
  return gradcheck([](const Inputs& x) { return x[0] / 7.0; }, {input({4}, 1)});
}
AG_GRADCHECK_CASE(rdiv_scalar, "rdiv_scalar, s / x") {
  return gradcheck(
      [](const Inputs& x) { return 2.0 / x[0]; }, {away_from_zero({2, 3}, 1, 0.5, 2.0)});
}
AG_GRADCHECK_CASE(neg, "neg") {
  return gradcheck([](const Inputs& x) { return -x[0]; }, {input({2, 3}, 1)});
}
AG_GRADCHECK_CASE(pow_square, "pow, x^2") {
  return gradcheck([](const Inputs& x) { return pow(x[0], 2.0); }, {input({2, 3}, 1)});
}
AG_GRADCHECK_CASE(pow_cube, "pow, x^3") {
  return gradcheck([](const Inputs& x) { return pow(x[0], 3.0); }, {input({2, 3}, 1)});
}
AG_GRADCHECK_CASE(pow_fractional, "pow, x^0.5 and x^-1.5 on positive x") {
  return gradcheck([](const Inputs& x) { return pow(x[0], 0.5) + pow(x[0], -1.5); },
      {input({2, 3}, 1, 0.5, 2.0)});
}
AG_GRADCHECK_CASE(pow_zero, "pow, x^0 (constant: gradient 0)") {
  // x^0 is constant, so L does not move with x: the check passes with an all-zero gradient.
  return gradcheck([](const Inputs& x) { return pow(x[0], 0.0) + x[0]; }, {input({3}, 1)});
}
AG_GRADCHECK_CASE(exp, "exp") {
  return gradcheck([](const Inputs& x) { return exp(x[0]); }, {input({2, 3}, 1)});
}
AG_GRADCHECK_CASE(log, "log") {
  return gradcheck([](const Inputs& x) { return log(x[0]); }, {input({2, 3}, 1, 0.3, 3.0)});
}
AG_GRADCHECK_CASE(sqrt, "sqrt") {
  return gradcheck([](const Inputs& x) { return sqrt(x[0]); }, {input({2, 3}, 1, 0.3, 3.0)});
}
AG_GRADCHECK_CASE(tanh, "tanh") {
  return gradcheck([](const Inputs& x) { return tanh(x[0]); }, {input({2, 3}, 1, -2.0, 2.0)});
}
AG_GRADCHECK_CASE(sigmoid, "sigmoid") {
  return gradcheck([](const Inputs& x) { return sigmoid(x[0]); }, {input({2, 3}, 1, -4.0, 4.0)});
}
AG_GRADCHECK_CASE(relu, "relu, inputs away from the kink") {
  return gradcheck([](const Inputs& x) { return relu(x[0]); }, {away_from_zero({3, 4}, 1)});
}
AG_GRADCHECK_CASE(gelu, "gelu") {
  return gradcheck([](const Inputs& x) { return gelu(x[0]); }, {input({3, 4}, 1, -3.0, 3.0)});
}
AG_GRADCHECK_CASE(gelu_tanh, "gelu, approximate tanh") {
  return gradcheck(
      [](const Inputs& x) { return gelu(x[0], "tanh"); }, {input({3, 4}, 1, -3.0, 3.0)});
}
AG_GRADCHECK_CASE(silu, "silu") {
  return gradcheck([](const Inputs& x) { return silu(x[0]); }, {input({3, 4}, 1, -4.0, 4.0)});
}
AG_GRADCHECK_CASE(abs, "abs, inputs away from the kink") {
  return gradcheck([](const Inputs& x) { return abs(x[0]); }, {away_from_zero({3, 4}, 1)});
}
AG_GRADCHECK_CASE(sin, "sin") {
  return gradcheck([](const Inputs& x) { return sin(x[0]); }, {input({2, 3}, 1, -3.0, 3.0)});
}
AG_GRADCHECK_CASE(cos, "cos") {
  return gradcheck([](const Inputs& x) { return cos(x[0]); }, {input({2, 3}, 1, -3.0, 3.0)});
}
AG_GRADCHECK_CASE(erf, "erf") {
  return gradcheck([](const Inputs& x) { return erf(x[0]); }, {input({2, 3}, 1, -3.0, 3.0)});
}
AG_GRADCHECK_CASE(rsqrt, "rsqrt") {
  return gradcheck([](const Inputs& x) { return rsqrt(x[0]); }, {input({2, 3}, 1, 0.3, 3.0)});
}
AG_GRADCHECK_CASE(maximum, "maximum, a (3,4) and b (2,3,1) broadcast") {
  return gradcheck(
      [](const Inputs& x) { return maximum(x[0], x[1]); }, {input({3, 4}, 1), input({2, 3, 1}, 2)});
}
AG_GRADCHECK_CASE(minimum, "minimum, a (3,4) and b (4)") {
  return gradcheck(
      [](const Inputs& x) { return minimum(x[0], x[1]); }, {input({3, 4}, 1), input({4}, 2)});
}
AG_GRADCHECK_CASE(clamp, "clamp to [-0.5, 0.5], inputs away from the bounds") {
  // below, inside and above the bounds, each at least 0.1 away from them
  Tensor x = tensor({-1.5, -0.9, -0.3, 0.1, 0.35, 1.7}, {2, 3}, float64).requires_grad_();
  return gradcheck([](const Inputs& x) { return clamp(x[0], -0.5, 0.5); }, {x});
}
AG_GRADCHECK_CASE(logsumexp, "logsumexp over dims 0 and 2 (a composition)") {
  return gradcheck(
      [](const Inputs& x) {
        return logsumexp(x[0], {0, 2});
      },
      {input({2, 3, 4}, 1, -3.0, 3.0)});
}
AG_GRADCHECK_CASE(stack, "stack of three tensors at dim -1 (a composition)") {
  return gradcheck(
      [](const Inputs& x) {
        return stack({x[0], x[1], x[0] * x[1]}, -1);
      },
      {input({2, 3}, 1), input({2, 3}, 2)});
}
AG_GRADCHECK_CASE(tril_triu, "tril and triu of a (2,3,4) batch (compositions)") {
  return gradcheck(
      [](const Inputs& x) { return tril(x[0], 1) + triu(x[0], -1) * 2.0; }, {input({2, 3, 4}, 1)});
}
AG_GRADCHECK_CASE(where_broadcast, "where, condition (2,1,4), a (3,4), b (2,3,1)") {
  Tensor condition = mask({2, 1, 4}, 3);
  return gradcheck([condition](const Inputs& x) { return where(condition, x[0], x[1]); },
      {input({3, 4}, 1), input({2, 3, 1}, 2)});
}
AG_GRADCHECK_CASE(masked_fill, "masked_fill, mask (1,4) broadcast over (3,4)") {
  Tensor m = mask({1, 4}, 3);
  return gradcheck([m](const Inputs& x) { return masked_fill(x[0], m, -1e6); }, {input({3, 4}, 1)});
}

// ---- reductions ---------------------------------------------------------------------------------

AG_GRADCHECK_CASE(sum_all, "sum over all elements") {
  return gradcheck([](const Inputs& x) { return sum(x[0]); }, {input({2, 3, 4}, 1)});
}
AG_GRADCHECK_CASE(sum_dims, "sum over dims {0,2}, and over dim 1 with keepdim") {
  return gradcheck(
      [](const Inputs& x) {
        return sum(x[0], {0, 2}) + sum(x[0], {1}, true).sum({0, 2});
      },
      {input({2, 3, 4}, 1)});
}
AG_GRADCHECK_CASE(mean, "mean over all, over dim -1 with keepdim") {
  return gradcheck(
      [](const Inputs& x) { return mean(x[0], {-1}, true) * mean(x[0]); }, {input({2, 3, 4}, 1)});
}
AG_GRADCHECK_CASE(max_all, "max over all elements") {
  return gradcheck([](const Inputs& x) { return max(x[0]); }, {input({3, 4}, 1)});
}
AG_GRADCHECK_CASE(max_dims, "max over dim 1, and over dims {0,2} with keepdim") {
  return gradcheck(
      [](const Inputs& x) {
        return concat({max(x[0], {1}).reshape({-1}), max(x[0], {0, 2}, true).reshape({-1})});
      },
      {input({2, 3, 4}, 1)});
}
AG_GRADCHECK_CASE(var_unbiased, "var over dim 1 (correction 1)") {
  return gradcheck([](const Inputs& x) { return var(x[0], {1}); }, {input({3, 5}, 1)});
}
AG_GRADCHECK_CASE(var_biased_all, "var over dims {0,2} keepdim (correction 0) and over all") {
  return gradcheck(
      [](const Inputs& x) {
        return var(x[0], {0, 2}, 0, true) * var(x[0]);
      },
      {input({2, 3, 4}, 1)});
}
AG_GRADCHECK_CASE(softmax_last, "softmax over the last dim") {
  return gradcheck(
      [](const Inputs& x) { return softmax(x[0], -1); }, {input({2, 3, 5}, 1, -2.0, 2.0)});
}
AG_GRADCHECK_CASE(softmax_middle, "softmax over a middle dim of a transposed view") {
  return gradcheck([](const Inputs& x) { return softmax(x[0].transpose(0, 2), 1); },
      {input({4, 3, 2}, 1, -2.0, 2.0)});
}
AG_GRADCHECK_CASE(log_softmax, "log_softmax over dims 0 and -1") {
  return gradcheck([](const Inputs& x) { return log_softmax(x[0], 0) + log_softmax(x[0], -1); },
      {input({3, 4}, 1, -2.0, 2.0)});
}
AG_GRADCHECK_CASE(
    length_masked_softmax_per_row, "length_masked_softmax, (B,) lengths 3 and 0, X (2,3,5)") {
  const Tensor valid_lens = tensor({3, 0});  // (B,)
  return gradcheck([=](const Inputs& x) { return length_masked_softmax(x[0], valid_lens); },
      {input({2, 3, 5}, 1, -2.0, 2.0)});
}
AG_GRADCHECK_CASE(length_masked_softmax_per_query,
    "length_masked_softmax, (B,Q) lengths with 0, 1 and K, X a transposed view") {
  const Tensor valid_lens = tensor({1, 5, 3, 0, 2, 4}, {2, 3});  // (B, Q)
  return gradcheck(
      [=](const Inputs& x) { return length_masked_softmax(x[0].transpose(1, 2), valid_lens); },
      {input({2, 5, 3}, 2, -2.0, 2.0)});  // X = x.transpose(1, 2): (2, 3, 5), not contiguous
}
AG_GRADCHECK_CASE(
    length_masked_softmax_unmasked, "length_masked_softmax without valid lengths, X (2,3,4)") {
  return gradcheck([](const Inputs& x) { return length_masked_softmax(x[0], Tensor()); },
      {input({2, 3, 4}, 3, -2.0, 2.0)});
}

// ---- normalisation ------------------------------------------------------------------------------
// layer_norm's hand-written backward against finite differences. The weights stay away from 0 so
// that the input gradient (through ĝ = g · w) is not near zero.

AG_GRADCHECK_CASE(
    layer_norm_last_dim, "layer_norm over the last dim, (B,T,D) with weight and bias") {
  return gradcheck([](const Inputs& x) { return layer_norm(x[0], {5}, x[1], x[2], 1e-5); },
      {input({2, 3, 5}, 1, -2.0, 2.0), away_from_zero({5}, 2, 0.5, 1.5), input({5}, 3)});
}
AG_GRADCHECK_CASE(layer_norm_two_dims, "layer_norm over two trailing dims, weight and bias (2,4)") {
  return gradcheck(
      [](const Inputs& x) {
        return layer_norm(x[0], {2, 4}, x[1], x[2], 1e-5);
      },
      {input({3, 2, 4}, 1, -2.0, 2.0), away_from_zero({2, 4}, 2, 0.5, 1.5), input({2, 4}, 3)});
}
AG_GRADCHECK_CASE(layer_norm_no_affine, "layer_norm without weight and bias, over two dims") {
  return gradcheck(
      [](const Inputs& x) {
        return layer_norm(x[0], {3, 2}, Tensor(), Tensor(), 1e-5);
      },
      {input({4, 3, 2}, 1, -2.0, 2.0)});
}
AG_GRADCHECK_CASE(layer_norm_weight_only_large_eps, "layer_norm with weight and no bias, eps 0.5") {
  return gradcheck([](const Inputs& x) { return layer_norm(x[0], {4}, x[1], Tensor(), 0.5); },
      {input({3, 4}, 1), away_from_zero({4}, 2, 0.5, 1.5)});
}
AG_GRADCHECK_CASE(
    layer_norm_of_transposed, "layer_norm of a transposed view, constant weight and bias") {
  // Only x requires grad: the backward skips dw and db.
  Tensor weight = away_from_zero({3}, 2, 0.5, 1.5).detach(), bias = input({3}, 3).detach();
  return gradcheck(
      [=](const Inputs& x) { return layer_norm(x[0].transpose(0, 1), {3}, weight, bias, 1e-5); },
      {input({3, 4}, 1, -2.0, 2.0)});
}

// dropout_add_layer_norm: layer_norm(x + dropout(y)) with gradients to x, y, weight and bias. The
// generator is reseeded in every call, so finite differences see one mask.
AG_GRADCHECK_CASE(
    dropout_add_layer_norm_train, "dropout_add_layer_norm, p=0.3 in training, weight and bias") {
  return gradcheck(
      [](const Inputs& x) {
        Generator generator(7);
        return dropout_add_layer_norm(
            x[0], x[1], {5}, x[2], x[3], 1e-5, 0.3, /*training=*/true, generator);
      },
      {input({2, 3, 5}, 1, -2.0, 2.0), input({2, 3, 5}, 4, -2.0, 2.0),
          away_from_zero({5}, 2, 0.5, 1.5), input({5}, 3)});
}
AG_GRADCHECK_CASE(
    dropout_add_layer_norm_eval_no_affine, "dropout_add_layer_norm in eval, no affine, two dims") {
  return gradcheck(
      [](const Inputs& x) {
        Generator generator(7);
        return dropout_add_layer_norm(
            x[0], x[1], {2, 3}, Tensor(), Tensor(), 1e-5, 0.5, /*training=*/false, generator);
      },
      {input({4, 2, 3}, 1, -2.0, 2.0), input({4, 2, 3}, 5, -2.0, 2.0)});
}

// rms_norm's hand-written backward (layer norm's loops with μ = 0): weights away from 0, as above.
AG_GRADCHECK_CASE(
    rms_norm_last_dim, "rms_norm over the last dim, (B,T,D) with weight, default eps") {
  return gradcheck([](const Inputs& x) { return rms_norm(x[0], {5}, x[1]); },
      {input({2, 3, 5}, 1, -2.0, 2.0), away_from_zero({5}, 2, 0.5, 1.5)});
}
AG_GRADCHECK_CASE(rms_norm_two_dims_no_weight, "rms_norm over two trailing dims, no weight") {
  return gradcheck(
      [](const Inputs& x) {
        return rms_norm(x[0], {2, 4}, Tensor(), 1e-6);
      },
      {input({3, 2, 4}, 1, -2.0, 2.0)});
}
AG_GRADCHECK_CASE(rms_norm_large_eps, "rms_norm with weight, eps 0.5") {
  return gradcheck([](const Inputs& x) { return rms_norm(x[0], {4}, x[1], 0.5); },
      {input({3, 4}, 1), away_from_zero({4}, 2, 0.5, 1.5)});
}
AG_GRADCHECK_CASE(rms_norm_of_transposed, "rms_norm of a transposed view, constant weight") {
  // Only x requires grad: the backward skips dw.
  Tensor weight = away_from_zero({3}, 2, 0.5, 1.5).detach();
  return gradcheck(
      [=](const Inputs& x) { return rms_norm(x[0].transpose(0, 1), {3}, weight, 1e-5); },
      {input({3, 4}, 1, -2.0, 2.0)});
}

// ---- rotary position embedding ------------------------------------------------------------------
// rotary_embedding's backward (the rotation by −θ) against finite differences, with arbitrary
// angles θ (T, r/2) in [−π, π) — cos and sin are constants of the function, not differentiated.

namespace {
struct RotaryTables {
  Tensor cos, sin;  // (T, half) each
};
RotaryTables rotary_tables(int64_t T, int64_t half, uint64_t seed) {
  Generator generator(seed);
  const Tensor theta = uniform({T, half}, -3.14159, 3.14159, generator, float64);
  return {ag::cos(theta), ag::sin(theta)};
}
}  // namespace

AG_GRADCHECK_CASE(rotary_interleaved, "rotary_embedding, interleaved pairs, (B,T,d)") {
  const RotaryTables t = rotary_tables(3, 4, 7);
  return gradcheck(
      [=](const Inputs& x) {
        return rotary_embedding(x[0], t.cos, t.sin, RotaryPairs::interleaved);
      },
      {input({2, 3, 8}, 1)});
}
AG_GRADCHECK_CASE(rotary_halves, "rotary_embedding, halves (rotate_half), (B,T,d)") {
  const RotaryTables t = rotary_tables(3, 4, 7);
  return gradcheck(
      [=](const Inputs& x) { return rotary_embedding(x[0], t.cos, t.sin, RotaryPairs::halves); },
      {input({2, 3, 8}, 1)});
}
AG_GRADCHECK_CASE(rotary_head_view_partial,
    "rotary_embedding of the head view (B,T,H·d) -> (B,H,T,d), partial rotary (r = 4 of d = 6)") {
  const RotaryTables t = rotary_tables(3, 2, 8);
  return gradcheck(
      [=](const Inputs& x) {
        const Tensor heads = x[0].reshape({2, 3, 2, 6}).permute({0, 2, 1, 3});  // (B, H, T, d)
        return rotary_embedding(heads, t.cos, t.sin, RotaryPairs::halves);
      },
      {input({2, 3, 12}, 1)});
}
AG_GRADCHECK_CASE(rotary_strided_features_partial,
    "rotary_embedding of a transposed view (features strided), interleaved, partial rotary") {
  const RotaryTables t = rotary_tables(4, 2, 9);
  return gradcheck(
      [=](const Inputs& x) {
        return rotary_embedding(x[0].transpose(-1, -2), t.cos, t.sin, RotaryPairs::interleaved);
      },
      {input({2, 5, 4}, 1)});
}

// ---- losses -------------------------------------------------------------------------------------

AG_GRADCHECK_CASE(cross_entropy_rows, "cross_entropy per row, (5,4) logits") {
  Tensor targets = tensor({0, 3, 1, 1, 2}, float64);
  return gradcheck(
      [targets](const Inputs& x) { return cross_entropy(x[0], targets, Reduction::none); },
      {input({5, 4}, 1, -2.0, 2.0)});
}
AG_GRADCHECK_CASE(cross_entropy_mean, "cross_entropy mean over rows of a transposed view") {
  Tensor targets = tensor({2, 0, 1}, float64);
  return gradcheck(
      [targets](const Inputs& x) { return cross_entropy(x[0].transpose(0, 1), targets); },
      {input({4, 3}, 1, -2.0, 2.0)});
}
AG_GRADCHECK_CASE(cross_entropy_ignore_index, "cross_entropy mean with two targets ignored") {
  Tensor targets = tensor({2, -1, 0, -1, 3}, float64);  // nanoGPT's ignore_index=-1
  return gradcheck(
      [targets](const Inputs& x) { return cross_entropy(x[0], targets, Reduction::mean, -1); },
      {input({5, 4}, 1, -2.0, 2.0)});
}

// ---- matmul -------------------------------------------------------------------------------------

AG_GRADCHECK_CASE(matmul_2d, "matmul (3,4)·(4,5)") {
  return gradcheck(
      [](const Inputs& x) { return matmul(x[0], x[1]); }, {input({3, 4}, 1), input({4, 5}, 2)});
}
AG_GRADCHECK_CASE(matmul_batched, "matmul (2,3,4)·(2,4,5)") {
  return gradcheck([](const Inputs& x) { return matmul(x[0], x[1]); },
      {input({2, 3, 4}, 1), input({2, 4, 5}, 2)});
}
AG_GRADCHECK_CASE(matmul_3d_2d, "matmul (2,3,4)·(4,5), a shared weight") {
  return gradcheck(
      [](const Inputs& x) { return matmul(x[0], x[1]); }, {input({2, 3, 4}, 1), input({4, 5}, 2)});
}
AG_GRADCHECK_CASE(matmul_broadcast_batch, "matmul (2,1,3,4)·(1,3,4,2), broadcast batch dims") {
  return gradcheck([](const Inputs& x) { return matmul(x[0], x[1]); },
      {input({2, 1, 3, 4}, 1), input({1, 3, 4, 2}, 2)});
}
AG_GRADCHECK_CASE(matmul_transposed, "matmul Q·Kᵀ with Kᵀ a transposed view") {
  return gradcheck([](const Inputs& x) { return matmul(x[0], x[1].transpose(-1, -2)); },
      {input({2, 3, 4}, 1), input({2, 5, 4}, 2)});
}
AG_GRADCHECK_CASE(matmul_vectors, "matmul with 1-D operands") {
  return gradcheck([](const Inputs& x) { return matmul(x[0], x[1]) + matmul(x[1], x[2]).sum(); },
      {input({4}, 1), input({4, 3}, 2), input({3}, 3)});
}

// ---- linear (x · Wᵀ + b) --------------------------------------------------------------------------

AG_GRADCHECK_CASE(linear_2d_bias, "linear (3,4) with weight (5,4) and bias (5)") {
  return gradcheck([](const Inputs& x) { return linear(x[0], x[1], x[2]); },
      {input({3, 4}, 1), input({5, 4}, 2), input({5}, 3)});
}
AG_GRADCHECK_CASE(linear_3d_no_bias, "linear (2,3,4) with weight (5,4), no bias") {
  return gradcheck(
      [](const Inputs& x) { return linear(x[0], x[1]); }, {input({2, 3, 4}, 1), input({5, 4}, 2)});
}
AG_GRADCHECK_CASE(linear_3d_bias, "linear (2,3,4) with weight (5,4) and bias (5)") {
  return gradcheck([](const Inputs& x) { return linear(x[0], x[1], x[2]); },
      {input({2, 3, 4}, 1), input({5, 4}, 2), input({5}, 3)});
}
AG_GRADCHECK_CASE(linear_permuted_input, "linear of a permuted (3,2,4) view: rows do not fold") {
  // x = x0.transpose(0, 1): (2, 3, 4) whose batch dim does not fold into rows (one gemm each)
  return gradcheck([](const Inputs& x) { return linear(x[0].transpose(0, 1), x[1], x[2]); },
      {input({3, 2, 4}, 1), input({5, 4}, 2), input({5}, 3)});
}
AG_GRADCHECK_CASE(linear_transposed_2d, "linear of a transposed (4,3) view, a weight view") {
  // x = x0ᵀ: (3, 4) read by BLAS with a transpose flag; W = w0[:, ::2]: (5, 4), a strided view
  return gradcheck(
      [](const Inputs& x) { return linear(x[0].transpose(0, 1), x[1].slice(1, 0, 8, 2), x[2]); },
      {input({4, 3}, 1), input({5, 8}, 2), input({5}, 3)});
}
AG_GRADCHECK_CASE(linear_broadcast_input, "linear of an expanded (2,3,4) input and a 1-D input") {
  // x = x0.expand(2, 3, 4): stride 0 along the batch; plus a (4) vector -> (5)
  return gradcheck(
      [](const Inputs& x) {
        return linear(x[0].expand({2, 3, 4}), x[1], x[2]).sum() + linear(x[3], x[1], x[2]).sum();
      },
      {input({1, 3, 4}, 1), input({5, 4}, 2), input({5}, 3), input({4}, 4)});
}

AG_GRADCHECK_CASE(linear_relu_2d_bias, "linear_relu (4,3) with weight (6,3) and bias (6)") {
  // Some of the 24 pre-activations are negative (relu's mask at work), none near the kink.
  return gradcheck([](const Inputs& x) { return linear_relu(x[0], x[1], x[2]); },
      {input({4, 3}, 5), input({6, 3}, 6), input({6}, 7)});
}
AG_GRADCHECK_CASE(linear_relu_3d_no_bias, "linear_relu of a permuted (3,2,4) view, no bias") {
  return gradcheck([](const Inputs& x) { return linear_relu(x[0].transpose(0, 1), x[1]); },
      {input({3, 2, 4}, 8), input({5, 4}, 9)});
}

// ---- shape and indexing -------------------------------------------------------------------------

AG_GRADCHECK_CASE(reshape_view, "reshape as a view") {
  return gradcheck(
      [](const Inputs& x) {
        return x[0].reshape({4, -1}) * x[0].reshape({4, 6});
      },
      {input({2, 3, 4}, 1)});
}
AG_GRADCHECK_CASE(reshape_copy, "reshape of a transposed view (copies)") {
  return gradcheck(
      [](const Inputs& x) { return x[0].transpose(0, 1).reshape({-1}); }, {input({3, 4}, 1)});
}
AG_GRADCHECK_CASE(view, "view") {
  return gradcheck([](const Inputs& x) { return x[0].view({6, 2}); }, {input({3, 4}, 1)});
}
AG_GRADCHECK_CASE(permute, "permute (0,2,1,3) as in transpose_qkv") {
  return gradcheck(
      [](const Inputs& x) {
        return x[0].permute({0, 2, 1, 3}) * x[1];
      },
      {input({2, 3, 4, 5}, 1), input({2, 4, 3, 5}, 2)});
}
AG_GRADCHECK_CASE(transpose_qkv, "d2l's transpose_qkv and transpose_output round trip") {
  // (B, T, D) -> (B, T, H, D/H) -> (B, H, T, D/H) -> (B·H, T, D/H), then back to (B, T, D)
  return gradcheck(
      [](const Inputs& x) {
        const int64_t heads = 2;
        Tensor q = x[0].reshape({2, 3, heads, -1}).permute({0, 2, 1, 3}).reshape({-1, 3, 2});
        Tensor scaled = q * x[1];
        Tensor back = scaled.reshape({-1, heads, 3, 2}).permute({0, 2, 1, 3});
        return back.reshape({2, 3, -1});
      },
      {input({2, 3, 4}, 1), input({4, 3, 2}, 2)});
}
AG_GRADCHECK_CASE(transpose, "transpose") {
  return gradcheck([](const Inputs& x) { return x[0].transpose(0, 2) * x[1]; },
      {input({2, 3, 4}, 1), input({4, 3, 2}, 2)});
}
AG_GRADCHECK_CASE(squeeze_unsqueeze, "squeeze and unsqueeze") {
  return gradcheck(
      [](const Inputs& x) { return x[0].squeeze().unsqueeze(1) * x[0].squeeze(1).unsqueeze(0); },
      {input({3, 1, 2}, 1)});
}
AG_GRADCHECK_CASE(expand, "expand (3,1) to (2,3,4)") {
  return gradcheck(
      [](const Inputs& x) {
        return x[0].expand({2, 3, 4}) * x[1];
      },
      {input({3, 1}, 1), input({2, 3, 4}, 2)});
}
AG_GRADCHECK_CASE(slice_step, "slice with a step, x[:, 1:5:2]") {
  return gradcheck([](const Inputs& x) { return x[0].slice(1, 1, 5, 2); }, {input({3, 6}, 1)});
}
AG_GRADCHECK_CASE(narrow_select, "narrow and select") {
  return gradcheck(
      [](const Inputs& x) { return x[0].narrow(0, 1, 2).sum({0}) + x[0].select(0, -1); },
      {input({4, 3}, 1)});
}
AG_GRADCHECK_CASE(split, "split into sizes {1,3}") {
  return gradcheck(
      [](const Inputs& x) {
        std::vector<Tensor> parts = split(x[0], std::vector<int64_t>{1, 3}, 1);
        return parts[0] * parts[1].sum({1}, true);
      },
      {input({2, 4}, 1)});
}
AG_GRADCHECK_CASE(concat, "concat along dim 1") {
  return gradcheck(
      [](const Inputs& x) {
        return concat({x[0], x[1], x[0]}, 1);
      },
      {input({2, 1, 3}, 1), input({2, 2, 3}, 2)});
}
AG_GRADCHECK_CASE(index_select_rows, "index_select rows with a repeated index (embedding)") {
  Tensor index = tensor({2, 0, 2, 1}, float64);
  return gradcheck(
      [index](const Inputs& x) { return index_select(x[0], 0, index); }, {input({3, 4}, 1)});
}
AG_GRADCHECK_CASE(index_select_dim1, "index_select along dim 1") {
  return gradcheck(
      [](const Inputs& x) {
        return index_select(x[0], 1, std::vector<int64_t>{3, 3, 0});
      },
      {input({2, 4, 2}, 1)});
}
AG_GRADCHECK_CASE(repeat_interleave, "repeat_interleave along dims 0 and 1") {
  return gradcheck(
      [](const Inputs& x) { return repeat_interleave(x[0], 3, 0) * repeat_interleave(x[1], 3, 1); },
      {input({2, 3}, 1), input({6, 1}, 2)});
}
AG_GRADCHECK_CASE(contiguous, "contiguous of a permuted view") {
  return gradcheck(
      [](const Inputs& x) {
        return x[0].permute({1, 0}).contiguous() * x[1];
      },
      {input({3, 2}, 1), input({2, 3}, 2)});
}
AG_GRADCHECK_CASE(clone, "clone") {
  return gradcheck([](const Inputs& x) { return x[0].clone() * x[0]; }, {input({2, 3}, 1)});
}

AG_GRADCHECK_CASE(to, "to: float64 -> float32 -> float64, on values float32 holds exactly") {
  // Finite differences through a float32 conversion would measure its rounding, not its gradient:
  // x and the step (2^-10) are multiples of 2^-10 below 4 in magnitude, and so are x ± step, all
  // exact in float32, as are the products by w (2^-20 multiples of at most 22 bits).
  Tensor x = tensor({0.5, -1.25, 3.0 + 1.0 / 1024, -2.0 / 1024}, {4}, float64).requires_grad_();
  Tensor w = tensor({1.5f, -0.75f, 2.0f, 0.25f}, {4});
  GradcheckOptions options;
  options.eps = 1.0 / 1024;
  return gradcheck(
      [w](const Inputs& in) { return (in[0].to(float32) * w).to(float64); }, {x}, options);
}

// ---- gathering, cumulative sums, topk (ops_index.cpp) -------------------------------------------

AG_GRADCHECK_CASE(gather_dim1, "gather along dim 1 with repeated positions (int64 index)") {
  // index (3, 5) into x (3, 4): position 2 of row 0 is read twice, so its gradient is a sum
  Tensor index = tensor(std::vector<int64_t>{2, 0, 2, 3, 1, 1, 1, 0, 3, 2, 3, 0, 0, 1, 2}, {3, 5});
  return gradcheck([index](const Inputs& x) { return gather(x[0], 1, index); }, {input({3, 4}, 1)});
}
AG_GRADCHECK_CASE(gather_dim0_smaller, "gather along dim 0, index smaller in dim 1") {
  Tensor index = tensor(std::vector<int64_t>{1, 0, 3, 3, 2, 0}, {3, 2});  // (3, 2) into (4, 3)
  return gradcheck([index](const Inputs& x) { return gather(x[0], 0, index); }, {input({4, 3}, 1)});
}
AG_GRADCHECK_CASE(cumsum, "cumsum along dims 0 and -1") {
  return gradcheck(
      [](const Inputs& x) { return cumsum(x[0], 0) * cumsum(x[0], -1); }, {input({3, 4}, 1)});
}
AG_GRADCHECK_CASE(topk, "topk values, largest along dim 1 and smallest along dim 0") {
  // Random values: no two within the step of the finite differences, so the picks do not move
  return gradcheck(
      [](const Inputs& x) {
        return concat({topk(x[0], 2, 1).values.reshape({-1}),
            topk(x[0], 3, 0, /*largest=*/false).values.reshape({-1})});
      },
      {input({4, 5}, 1)});
}

// ---- random -------------------------------------------------------------------------------------

AG_GRADCHECK_CASE(dropout, "dropout p=0.4 with a reseeded generator (the same mask every call)") {
  return gradcheck(
      [](const Inputs& x) {
        Generator generator(42);  // reseeded each call, so finite differences see one mask
        return dropout(x[0], 0.4, /*training=*/true, generator);
      },
      {input({4, 5}, 1)});
}

// ---- fused attention ----------------------------------------------------------------------------
// q, k, v are the head views MultiHeadAttention hands the op: leaves of shape (B, T, H, C),
// permuted to (B, H, T, C) without a copy (each head's rows H·C apart).

AG_GRADCHECK_CASE(
    sdpa_permuted_views, "scaled_dot_product_attention, permuted head views, no valid_lens") {
  // B 2, H 2, Tq 3, Tk 4, d 3, dv 2
  return gradcheck(
      [](const Inputs& x) {
        Generator unused(0);
        return whole_row_attention(
            heads(x[0]), heads(x[1]), heads(x[2]), Tensor(), 0.0, true, unused);
      },
      {input({2, 3, 2, 3}, 1, -2, 2), input({2, 4, 2, 3}, 2, -2, 2), input({2, 4, 2, 2}, 3)});
}

AG_GRADCHECK_CASE(
    sdpa_batch_lens, "scaled_dot_product_attention, (B,) valid_lens 2, 0, 4, heads joined after") {
  // B 3, H 2, Tq 3, Tk 4, d 3, dv 2; the output's heads joined as MultiHeadAttention does: the
  // upstream gradient then reaches the op as a strided (B, H, Tq, dv) view.
  return gradcheck(
      [](const Inputs& x) {
        Generator unused(0);
        const Tensor lens = tensor({2, 0, 4}, float64);
        Tensor out =
            whole_row_attention(heads(x[0]), heads(x[1]), heads(x[2]), lens, 0.0, true, unused);
        return out.permute({0, 2, 1, 3}).reshape({3, 3, 4});  // (B, Tq, H·dv)
      },
      {input({3, 3, 2, 3}, 4, -2, 2), input({3, 4, 2, 3}, 5, -2, 2), input({3, 4, 2, 2}, 6)});
}

AG_GRADCHECK_CASE(sdpa_causal, "scaled_dot_product_attention, is_causal, Tq 3 of Tk 4, (B,) lens") {
  return gradcheck(
      [](const Inputs& x) {
        AttentionKernelGuard whole_rows(AttentionKernel::whole_rows);
        return attention(heads(x[0]), heads(x[1]), heads(x[2]),
            {.valid_lens = tensor({4, 2}, float64), .is_causal = true});
      },
      {input({2, 3, 2, 3}, 10, -2, 2), input({2, 4, 2, 3}, 11, -2, 2), input({2, 4, 2, 2}, 12)});
}

AG_GRADCHECK_CASE(flash_causal, "flash_attention, is_causal, Tq 3 of Tk 4") {
  return gradcheck(
      [](const Inputs& x) {
        AttentionKernelGuard tiled(AttentionKernel::tiled);
        return attention(heads(x[0]), heads(x[1]), heads(x[2]), {.is_causal = true});
      },
      {input({2, 3, 2, 3}, 13, -2, 2), input({2, 4, 2, 3}, 14, -2, 2), input({2, 4, 2, 2}, 15)});
}

AG_GRADCHECK_CASE(
    sdpa_query_lens, "scaled_dot_product_attention, (B,Tq) valid_lens with 0 and Tk") {
  return gradcheck(
      [](const Inputs& x) {
        Generator unused(0);
        const Tensor lens = tensor({1, 0, 4, 2, 3, 0}, {2, 3}, float64);
        return whole_row_attention(heads(x[0]), heads(x[1]), heads(x[2]), lens, 0.0, true, unused);
      },
      {input({2, 3, 2, 3}, 7, -2, 2), input({2, 4, 2, 3}, 8, -2, 2), input({2, 4, 2, 2}, 9)});
}

AG_GRADCHECK_CASE(
    sdpa_dropout, "scaled_dot_product_attention, dropout 0.3 with a reseeded generator") {
  return gradcheck(
      [](const Inputs& x) {
        Generator generator(42);  // reseeded each call, so finite differences see one mask
        const Tensor lens = tensor({3, 4}, float64);
        return whole_row_attention(
            heads(x[0]), heads(x[1]), heads(x[2]), lens, 0.3, true, generator);
      },
      {input({2, 3, 2, 3}, 10, -2, 2), input({2, 4, 2, 3}, 11, -2, 2), input({2, 4, 2, 2}, 12)});
}

AG_GRADCHECK_CASE(sdpa_copied_operand,
    "scaled_dot_product_attention, contiguous q and a k whose last dim is strided") {
  // k is the transpose of a (B, H, d, Tk) leaf: its last dim is not adjacent, so the op reads a
  // copy.
  return gradcheck(
      [](const Inputs& x) {
        Generator unused(0);
        return whole_row_attention(x[0], x[1].transpose(2, 3), x[2], Tensor(), 0.0, true, unused);
      },
      {input({1, 2, 3, 3}, 13, -2, 2), input({1, 2, 3, 4}, 14, -2, 2), input({1, 2, 4, 2}, 15)});
}

// The whole-row kernel leaves the masked keys out of its products in blocks of 16 query rows (or
// keys): Tq 37 and Tk 35 make three blocks each way, with a causal mask in batch row 0 and ragged
// lengths (0, short, Tk, not in order) in batch row 1.
AG_GRADCHECK_CASE(sdpa_masked_key_blocks,
    "scaled_dot_product_attention, Tq 37 and Tk 35 across blocks of 16, causal and ragged "
    "lengths") {
  return gradcheck(
      [](const Inputs& x) {
        Generator unused(0);
        std::vector<double> lens(2 * 37);
        for (int64_t i = 0; i < 37; ++i) {
          lens[static_cast<std::size_t>(i)] = static_cast<double>(std::min<int64_t>(i + 1, 35));
          lens[static_cast<std::size_t>(37 + i)] = static_cast<double>((i * 13) % 36);
        }
        return whole_row_attention(heads(x[0]), heads(x[1]), heads(x[2]),
            tensor(lens, {2, 37}, float64), 0.0, true, unused);
      },
      {input({2, 37, 1, 3}, 16, -2, 2), input({2, 35, 1, 3}, 17, -2, 2), input({2, 35, 1, 2}, 18)});
}

// flash_attention, across its tiles (64 queries × 128 keys): Tq 70 and Tk 131 make two query
// blocks and two key blocks, so the online softmax rescales the running sums when the second key
// block arrives. The keys are scaled up with their position so that later blocks hold the larger
// scores and the running maxima really move.

AG_GRADCHECK_CASE(flash_tiles_query_lens,
    "flash_attention, two tiles each way, (B,Tq) valid_lens with 0, 129, Tk") {
  return gradcheck(
      [](const Inputs& x) {
        Generator unused(0);
        std::vector<double> lens(70);
        for (int64_t i = 0; i < 70; ++i)
          lens[static_cast<std::size_t>(i)] = static_cast<double>((i * 29) % 132);
        lens[1] = 0;    // uniform weights
        lens[2] = 129;  // one key of the second block
        lens[3] = 131;  // every key
        std::vector<double> key_scale(131);
        for (int64_t j = 0; j < 131; ++j)
          key_scale[static_cast<std::size_t>(j)] = 1.0 + 3.0 * static_cast<double>(j) / 131;
        const Tensor k = x[1] * tensor(key_scale, {1, 131, 1, 1}, float64);  // (B, Tk, H, d)
        return tiled_attention(
            heads(x[0]), heads(k), heads(x[2]), tensor(lens, {1, 70}, float64), 0.0, true, unused);
      },
      {input({1, 70, 1, 2}, 16, -2, 2), input({1, 131, 1, 2}, 17, -2, 2),
          input({1, 131, 1, 2}, 18)});
}

AG_GRADCHECK_CASE(flash_dropout_heads,
    "flash_attention, dropout 0.3 with a reseeded generator, (B,) valid_lens") {
  return gradcheck(
      [](const Inputs& x) {
        Generator generator(42);  // reseeded each call, so finite differences see one mask
        Tensor out = tiled_attention(
            heads(x[0]), heads(x[1]), heads(x[2]), tensor({3, 0}, float64), 0.3, true, generator);
        return out.permute({0, 2, 1, 3})
            .reshape({2, 3, 4});  // (B, Tq, H·dv), a strided upstream gradient
      },
      {input({2, 3, 2, 3}, 19, -2, 2), input({2, 4, 2, 3}, 20, -2, 2), input({2, 4, 2, 2}, 21)});
}

// ALiBi and grouped-query attention (AttentionOptions::alibi_slopes, enable_gqa) on both kernels.
// The slopes are larger than the paper's for 2 or 4 heads, so that the bias moves the weights
// well away from those without it. With GQA the key/value leaves have fewer heads than the
// queries: their gradients are the sums over the query heads of each group.

AG_GRADCHECK_CASE(sdpa_alibi,
    "scaled_dot_product_attention, ALiBi, is_causal, Tq 3 of Tk 5, (B,Tq) lens with 0") {
  return gradcheck(
      [](const Inputs& x) {
        AttentionKernelGuard whole_rows(AttentionKernel::whole_rows);
        return attention(heads(x[0]), heads(x[1]), heads(x[2]),
            {.valid_lens = tensor({5, 0, 2, 4, 3, 1}, {2, 3}, float64),
                .is_causal = true,
                .alibi_slopes = {0.7, 0.3}});
      },
      {input({2, 3, 2, 3}, 22, -2, 2), input({2, 5, 2, 3}, 23, -2, 2), input({2, 5, 2, 2}, 24)});
}

AG_GRADCHECK_CASE(sdpa_gqa,
    "scaled_dot_product_attention, GQA H 4 over Hkv 2, ALiBi, dropout 0.3 with a reseeded "
    "generator") {
  return gradcheck(
      [](const Inputs& x) {
        AttentionKernelGuard whole_rows(AttentionKernel::whole_rows);
        Generator generator(42);  // reseeded each call, so finite differences see one mask
        return attention(heads(x[0]), heads(x[1]), heads(x[2]),
            {.valid_lens = tensor({4, 2}, float64),
                .dropout_p = 0.3,
                .generator = &generator,
                .alibi_slopes = {0.5, 0.25, 0.9, 0.1},
                .enable_gqa = true});
      },
      {input({2, 3, 4, 3}, 25, -2, 2), input({2, 4, 2, 3}, 26, -2, 2), input({2, 4, 2, 2}, 27)});
}

AG_GRADCHECK_CASE(sdpa_mqa, "scaled_dot_product_attention, MQA H 3 over Hkv 1, is_causal") {
  return gradcheck(
      [](const Inputs& x) {
        AttentionKernelGuard whole_rows(AttentionKernel::whole_rows);
        return attention(
            heads(x[0]), heads(x[1]), heads(x[2]), {.is_causal = true, .enable_gqa = true});
      },
      {input({1, 4, 3, 2}, 28, -2, 2), input({1, 4, 1, 2}, 29, -2, 2), input({1, 4, 1, 3}, 30)});
}

// Across the tiled kernel's tiles: Tq 70 of Tk 131 with is_causal (query i at key position
// 61 + i) makes two query blocks and two key blocks; the backward recomputes each tile's weights
// with the bias.
AG_GRADCHECK_CASE(flash_tiles_alibi, "flash_attention, two tiles each way, ALiBi, is_causal") {
  return gradcheck(
      [](const Inputs& x) {
        AttentionKernelGuard tiled(AttentionKernel::tiled);
        return attention(
            heads(x[0]), heads(x[1]), heads(x[2]), {.is_causal = true, .alibi_slopes = {0.05}});
      },
      {input({1, 70, 1, 2}, 31, -2, 2), input({1, 131, 1, 2}, 32, -2, 2),
          input({1, 131, 1, 2}, 33)});
}

AG_GRADCHECK_CASE(flash_gqa,
    "flash_attention, GQA H 4 over Hkv 2, ALiBi, (B,Tq) lens with 0, dropout 0.3 with a "
    "reseeded generator") {
  return gradcheck(
      [](const Inputs& x) {
        AttentionKernelGuard tiled(AttentionKernel::tiled);
        Generator generator(42);  // reseeded each call, so finite differences see one mask
        return attention(heads(x[0]), heads(x[1]), heads(x[2]),
            {.valid_lens = tensor({4, 0, 2, 3, 1, 4}, {2, 3}, float64),
                .dropout_p = 0.3,
                .generator = &generator,
                .alibi_slopes = {0.5, 0.25, 0.9, 0.1},
                .enable_gqa = true});
      },
      {input({2, 3, 4, 3}, 34, -2, 2), input({2, 4, 2, 3}, 35, -2, 2), input({2, 4, 2, 2}, 36)});
}
