// Fused kernels or the composed d2l path: one process-wide switch.
//
// Several layers have two implementations that compute the same function:
//   - the composed path, written with ag's primitive ops exactly as d2l's PyTorch code is (the one
//     to read when learning how backprop flows through attention), and
//   - a fused kernel: one op with a hand-written backward that makes one pass over memory and saves
//     only what its backward needs (faster, and far less memory held for the backward pass).
// Both are tested against each other and by gradcheck. The fused kernels are the default;
// set_fused_kernels(false), or a FusedKernelsGuard, selects the composed path everywhere.
//
//   layer                              fused op (autograd/)                 composed path
//   Linear                             linear                               matmul (of Wᵀ), add
//   PositionWiseFFN (dense1, relu)     linear_relu                          Linear, ReLU
//   masked_softmax                     length_masked_softmax                masked_softmax_composed
//   MultiHeadAttention (its heads)     attention (whole-row or tiled        transpose_qkv,
//                                      kernel: ag::AttentionKernel)         DotProductAttention,
//                                                                           transpose_output
//   LayerNorm                          layer_norm                           mean, var, sub, div,
//                                                                           mul, add
//   AddNorm                            dropout_add_layer_norm               dropout, add, LayerNorm
//   RMSNorm                            rms_norm                             mul, mean, add, rsqrt,
//                                                                           mul
//   RotaryEmbedding                    rotary_embedding                     narrow, reshape, select,
//                                                                           mul, sub, add, stack,
//                                                                           concat
#pragma once

#include "autograd/scoped_setting.h"

namespace ag::nn {

// Whether layers use their fused kernels (true by default).
bool fused_kernels();
void set_fused_kernels(bool enabled);

// Sets fused_kernels() for a scope and restores the previous setting on exit:
//   { nn::FusedKernelsGuard composed(false); Tensor y = layer.forward(x); }  // the d2l path
using FusedKernelsGuard = ScopedSetting<bool, &fused_kernels, &set_fused_kernels>;

}  // namespace ag::nn
