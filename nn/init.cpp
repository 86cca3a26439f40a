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

void xavier_uniform_(const Tensor& weight, double gain, Generator& generator) {
  const Fans f = fans(weight);
  const double bound = gain * std::sqrt(6.0 / static_cast<double>(f.fan_in + f.fan_out));
  uniform_(weight, -bound, bound, generator);
}

void kaiming_uniform_(const Tensor& weight, double a, Generator& generator) {
  const Fans f = fans(weight);
  const double gain = std::sqrt(2.0 / (1.0 + a * a));
  const double bound = gain * std::sqrt(3.0 / static_cast<double>(f.fan_in));
  uniform_(weight, -bound, bound, generator);
}

}  // namespace ag::nn::init
