// Parameter initialisation, as torch.nn.init. Every draw comes from a seeded ag::Generator
// (the default one unless given): ag::manual_seed(0) before building a model makes it reproducible.
#pragma once

#include <optional>
#include <string>

#include "autograd/generator.h"
#include "autograd/tensor.h"

namespace ag::nn::init {

// fan_in and fan_out of a weight: for a (out, in) Linear weight, in and out.
struct Fans {
  int64_t fan_in, fan_out;
};
Fans fans(const Tensor& weight);

// Fills `tensor` in place with U(low, high) / N(mean, std) / a constant.
void uniform_(
    const Tensor& tensor, double low, double high, Generator& generator = default_generator());
void normal_(
    const Tensor& tensor, double mean, double std, Generator& generator = default_generator());
void constant_(const Tensor& tensor, double value);
void zeros_(const Tensor& tensor);  // constant_(tensor, 0): nanoGPT's biases
void ones_(const Tensor& tensor);   // constant_(tensor, 1)

// The gain PyTorch recommends for a nonlinearity (torch.nn.init.calculate_gain): 1 for linear,
// the convolutions, identity and sigmoid; 5/3 for tanh; √2 for relu; √(2 / (1 + a²)) for
// leaky_relu with negative slope a = param (0.01 when not given); 3/4 for selu. Another name is a
// ValueError that names it.
double calculate_gain(const std::string& nonlinearity, std::optional<double> param = std::nullopt);

// U(−b, b) with b = gain · sqrt(6 / (fan_in + fan_out))  (Glorot & Bengio, 2010).
void xavier_uniform_(
    const Tensor& weight, double gain = 1.0, Generator& generator = default_generator());
// N(0, σ²) with σ = gain · sqrt(2 / (fan_in + fan_out)): the same variance, normal.
void xavier_normal_(
    const Tensor& weight, double gain = 1.0, Generator& generator = default_generator());

// He et al. (2015): σ = gain / sqrt(fan) with gain = calculate_gain(nonlinearity, a) and fan the
// weight's fan_in (keeps the forward pass's variance) or fan_out (the backward's).
enum class FanMode { fan_in, fan_out };
// U(−b, b) with b = √3 σ. torch.nn.Linear uses a = √5 (leaky_relu): b = 1 / sqrt(fan_in).
void kaiming_uniform_(const Tensor& weight, double a = 0.0, FanMode mode = FanMode::fan_in,
    const std::string& nonlinearity = "leaky_relu", Generator& generator = default_generator());
// N(0, σ²) (makemore's kaiming_normal_(W, nonlinearity='tanh'): σ = (5/3) / sqrt(fan_in)).
void kaiming_normal_(const Tensor& weight, double a = 0.0, FanMode mode = FanMode::fan_in,
    const std::string& nonlinearity = "leaky_relu", Generator& generator = default_generator());

}  // namespace ag::nn::init
