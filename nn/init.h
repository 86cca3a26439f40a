// Parameter initialisation, as torch.nn.init. Every draw comes from a seeded ag::Generator
// (the default one unless given): ag::manual_seed(0) before building a model makes it reproducible.
#pragma once

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

// U(−b, b) with b = gain · sqrt(6 / (fan_in + fan_out))  (Glorot & Bengio, 2010).
void xavier_uniform_(
    const Tensor& weight, double gain = 1.0, Generator& generator = default_generator());

// U(−b, b) with b = gain · sqrt(3 / fan_in) and gain = sqrt(2 / (1 + a²)) (He et al., 2015).
// torch.nn.Linear uses a = √5, which makes b = 1 / sqrt(fan_in).
void kaiming_uniform_(
    const Tensor& weight, double a = 0.0, Generator& generator = default_generator());

}  // namespace ag::nn::init
