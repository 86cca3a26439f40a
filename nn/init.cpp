#include "nn/init.h"

#include <cmath>

#include "autograd/autograd.h"
#include "autograd/ops.h"

namespace ag::nn::init {

Fans fans(const Tensor& weight) {
  if (weight.dim() < 2)
    fail<ShapeError>("init: fan in and fan out need a weight of at least 2 dims, got shape ",
        shape_str(weight.shape()));
  // As PyTorch: dim 1 is the input, dim 0 the output; further dims are a receptive field.
  int64_t receptive = 1;
  for (int64_t d = 2; d < weight.dim(); ++d) receptive *= weight.size(d);
  return {weight.size(1) * receptive, weight.size(0) * receptive};
}

void uniform_(const Tensor& tensor, double low, double high, Generator& generator) {
  NoGradGuard no_grad;
  tensor.copy_(uniform(tensor.shape(), low, high, generator, tensor.dtype()));
}

void normal_(const Tensor& tensor, double mean, double std, Generator& generator) {
  NoGradGuard no_grad;
  tensor.copy_(add(mul(randn(tensor.shape(), generator, tensor.dtype()), std), mean));
}

void constant_(const Tensor& tensor, double value) {
  NoGradGuard no_grad;
  tensor.fill_(value);
}

void zeros_(const Tensor& tensor) { constant_(tensor, 0.0); }
void ones_(const Tensor& tensor) { constant_(tensor, 1.0); }

double calculate_gain(const std::string& nonlinearity, std::optional<double> param) {
  for (const char* unit : {"linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d",
           "conv_transpose2d", "conv_transpose3d", "sigmoid", "identity"})
    if (nonlinearity == unit) return 1.0;
  if (nonlinearity == "tanh") return 5.0 / 3.0;
  if (nonlinearity == "relu") return std::sqrt(2.0);
  if (nonlinearity == "leaky_relu") {
    const double slope = param.value_or(0.01);
    return std::sqrt(2.0 / (1.0 + slope * slope));
  }
  if (nonlinearity == "selu") return 3.0 / 4.0;
  fail<ValueError>("calculate_gain: unsupported nonlinearity '", nonlinearity,
      "' (linear, conv1d … conv_transpose3d, sigmoid, identity, tanh, relu, leaky_relu, selu)");
}

void xavier_uniform_(const Tensor& weight, double gain, Generator& generator) {
  const Fans f = fans(weight);
  const double bound = gain * std::sqrt(6.0 / static_cast<double>(f.fan_in + f.fan_out));
  uniform_(weight, -bound, bound, generator);
}

void xavier_normal_(const Tensor& weight, double gain, Generator& generator) {
  const Fans f = fans(weight);
  normal_(
      weight, 0.0, gain * std::sqrt(2.0 / static_cast<double>(f.fan_in + f.fan_out)), generator);
}

namespace {
// kaiming's fan: the weight's fan_in or fan_out
double kaiming_fan(const Tensor& weight, FanMode mode) {
  const Fans f = fans(weight);
  return static_cast<double>(mode == FanMode::fan_in ? f.fan_in : f.fan_out);
}
}  // namespace

void kaiming_uniform_(const Tensor& weight, double a, FanMode mode, const std::string& nonlinearity,
    Generator& generator) {
  // b = √3 σ = gain · sqrt(3 / fan), in the order ag always computed it (Linear's init keeps its
  // bits)
  const double bound = calculate_gain(nonlinearity, a) * std::sqrt(3.0 / kaiming_fan(weight, mode));
  uniform_(weight, -bound, bound, generator);
}

void kaiming_normal_(const Tensor& weight, double a, FanMode mode, const std::string& nonlinearity,
    Generator& generator) {
  normal_(weight, 0.0, calculate_gain(nonlinearity, a) / std::sqrt(kaiming_fan(weight, mode)),
      generator);
}

}  // namespace ag::nn::init
