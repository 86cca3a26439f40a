// AddNorm's fused path (ag::dropout_add_layer_norm) against d2l's composed path
// (ln(dropout(Y) + X)): the same output and gradients of X, Y, weight and bias, in training with
// dropout (equal generator states give equal masks) and in evaluation, in float64 and float32.
#include "nn_test_util.h"

using namespace ag;
using nn_test::max_abs_diff;

namespace {

struct AddNormPass {
  Tensor output, X_grad, Y_grad, weight_grad, bias_grad;
  GeneratorState generator_after;
  bool recorded_fused_op = false;  // the output's node is dropout_add_layer_norm
};

AddNormPass add_norm_forward_backward(nn::AddNorm& add_norm, bool fused, const Tensor& X,
    const Tensor& Y, const Tensor& upstream, uint64_t seed) {
  nn::FusedKernelsGuard guard(fused);
  add_norm.zero_grad();
  Tensor x = X.detach().clone().requires_grad_(), y = Y.detach().clone().requires_grad_();
  manual_seed(seed);
  AddNormPass pass;
  pass.output = add_norm(x, y);  // (B, T, D)
  pass.generator_after = default_generator().state();
  pass.recorded_fused_op = pass.output.grad_fn() != nullptr &&
                           std::string(pass.output.grad_fn()->name()) == "dropout_add_layer_norm";
  pass.output.backward(upstream);
  pass.X_grad = x.grad();
  pass.Y_grad = y.grad();
  pass.weight_grad = add_norm.ln->weight.grad();
  pass.bias_grad = add_norm.ln->bias.grad();
  return pass;
}

void check_same_add_norm(const AddNormPass& fused, const AddNormPass& composed, double tolerance) {
  CHECK(fused.recorded_fused_op);
  CHECK_FALSE(composed.recorded_fused_op);
  CHECK(fused.generator_after == composed.generator_after);  // the same Philox blocks were reserved
  CHECK(max_abs_diff(fused.output, composed.output) <= tolerance);
  CHECK(max_abs_diff(fused.X_grad, composed.X_grad) <= tolerance);
  CHECK(max_abs_diff(fused.Y_grad, composed.Y_grad) <= tolerance);
  CHECK(max_abs_diff(fused.weight_grad, composed.weight_grad) <= tolerance);
  CHECK(max_abs_diff(fused.bias_grad, composed.bias_grad) <= tolerance);
}

}  // namespace

TEST_CASE("AddNorm: the fused path equals d2l's composed path, with dropout and in eval",
    "[nn][addnorm][fused]") {
  for (const DType dtype : {float64, float32}) {
    INFO("dtype " << dtype_name(dtype));
    const double tolerance = dtype == float64 ? 1e-12 : 1e-5;
    manual_seed(3);
    nn::AddNorm add_norm({6}, 0.3);
    add_norm.to(dtype);
    // A non-trivial affine part, so that the gradients go through weight.
    Generator gen(9);
    add_norm.ln->weight.detach().copy_(uniform({6}, 0.5, 1.5, gen, dtype));
    add_norm.ln->bias.detach().copy_(randn({6}, gen, dtype));
    const Tensor X = randn({3, 4, 6}, gen, dtype), Y = randn({3, 4, 6}, gen, dtype);
    const Tensor upstream = randn({3, 4, 6}, gen, dtype);
    for (const bool training : {true, false}) {
      INFO((training ? "training, dropout 0.3" : "eval"));
      training ? add_norm.train() : add_norm.eval();
      const AddNormPass fused = add_norm_forward_backward(add_norm, true, X, Y, upstream, 11);
      const AddNormPass composed = add_norm_forward_backward(add_norm, false, X, Y, upstream, 11);
      check_same_add_norm(fused, composed, tolerance);
      if (training) {  // dropout dropped something: Y's gradient has zeros X's has not
        int64_t dropped = 0;
        for (double g : fused.Y_grad.to_vector<double>()) dropped += g == 0.0;
        CHECK(dropped > 0);
      }
    }
  }
}

TEST_CASE("dropout_add_layer_norm: shape errors name the op and the shapes",
    "[nn][addnorm][fused][errors]") {
  Generator gen(1);
  const Tensor w = ones({4}), b = zeros({4});
  CHECK_THROWS_WITH(
      dropout_add_layer_norm(ones({2, 4}), ones({3, 4}), {4}, w, b, 1e-5, 0.1, true, gen),
      Catch::Contains("dropout_add_layer_norm: x of shape [2,4] and y of shape [3,4] differ"));
  CHECK_THROWS_WITH(
      dropout_add_layer_norm(ones({2, 5}), ones({2, 5}), {4}, w, b, 1e-5, 0.1, true, gen),
      Catch::Contains(
          "dropout_add_layer_norm: input of shape [2,5] does not end in normalized_shape [4]"));
  CHECK_THROWS_WITH(
      dropout_add_layer_norm(ones({2, 4}), ones({2, 4}), {4}, w, b, 1e-5, 1.5, true, gen),
      Catch::Contains("dropout_add_layer_norm: probability 1.5 is outside [0, 1]"));
}
