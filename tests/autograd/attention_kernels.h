// ag::attention on each of its kernels, for the tests that hold them against each other and
// against d2l's composed attention; and the head views MultiHeadAttention hands the op.
#pragma once
#include "autograd/generator.h"
#include "autograd/ops.h"
#include "autograd/tensor.h"

// (B, T, H, C) -> (B, H, T, C), a view (each head's rows H·C apart), as MultiHeadAttention has it.
inline ag::Tensor heads(const ag::Tensor& x) { return x.permute({0, 2, 1, 3}); }

// ag::attention on its whole-row kernel: (B, H, Tq, dv); the weights (B, H, Tq, Tk) into
// weights_out if given.
inline ag::Tensor whole_row_attention(const ag::Tensor& q, const ag::Tensor& k, const ag::Tensor& v,
    const ag::Tensor& valid_lens, double p, bool training, ag::Generator& generator,
    ag::Tensor* weights_out = nullptr) {
  ag::AttentionKernelGuard whole_rows(ag::AttentionKernel::whole_rows);
  ag::AttentionWeights weights;
  ag::Tensor out = ag::attention(q, k, v, valid_lens, p, training, generator,
      weights_out ? &weights : nullptr);  // (B, H, Tq, dv)
  if (weights_out) *weights_out = weights.tensor();
  return out;
}

// ag::attention on its tiled kernel: (B, H, Tq, dv).
inline ag::Tensor tiled_attention(const ag::Tensor& q, const ag::Tensor& k, const ag::Tensor& v,
    const ag::Tensor& valid_lens, double p, bool training, ag::Generator& generator) {
  ag::AttentionKernelGuard tiled(ag::AttentionKernel::tiled);
  return ag::attention(q, k, v, valid_lens, p, training, generator);  // (B, H, Tq, dv)
}
