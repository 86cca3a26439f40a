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
//   masked_softmax                     length_masked_softmax                masked_softmax_composed
//   MultiHeadAttention (its heads)     scaled_dot_product_attention, or     transpose_qkv, DotProductAttention,
//                                      flash_attention (see below)          transpose_output
//   LayerNorm                          layer_norm                           mean, var, sub, div, mul, add
//   AddNorm                            dropout_add_layer_norm               dropout, add, LayerNorm
#pragma once

#include <cstdint>

namespace ag::nn {

// Whether layers use their fused kernels (true by default).
bool fused_kernels();
void set_fused_kernels(bool enabled);

// Sets fused_kernels() for a scope and restores the previous setting on exit:
//   { nn::FusedKernelsGuard composed(false); Tensor y = layer.forward(x); }  // the d2l path
class FusedKernelsGuard {
 public:
  explicit FusedKernelsGuard(bool enabled) : previous_(fused_kernels()) { set_fused_kernels(enabled); }
  ~FusedKernelsGuard() { set_fused_kernels(previous_); }
  FusedKernelsGuard(const FusedKernelsGuard&) = delete;
  FusedKernelsGuard& operator=(const FusedKernelsGuard&) = delete;

 private:
  bool previous_;
};

// Which fused kernel runs MultiHeadAttention's heads (when fused_kernels() is on):
//   whole_rows  ag::scaled_dot_product_attention: each head's (Tq × Tk) weights at once, kept for
//               the backward;
//   tiled       ag::flash_attention: 64 × 128 tiles with an online softmax, no weights kept (the
//               backward recomputes them), O(T) memory per head instead of O(T²);
//   automatic   (the default) tiled when there are at least kTiledAttentionFromKeys keys, where it
//               is the faster one on the benchmark machine (docs/benchmarks.md); whole_rows below,
//               where a head's weights fit in the core's cache anyway.
// Both compute the same function (up to rounding) and give the same attention_weights().
enum class AttentionKernel { automatic, whole_rows, tiled };
inline constexpr int64_t kTiledAttentionFromKeys = 1024;

AttentionKernel attention_kernel();
void set_attention_kernel(AttentionKernel kernel);
// Whether MultiHeadAttention runs flash_attention for `keys` keys under the current setting.
bool use_tiled_attention(int64_t keys);

// Sets attention_kernel() for a scope and restores the previous setting on exit.
class AttentionKernelGuard {
 public:
  explicit AttentionKernelGuard(AttentionKernel kernel) : previous_(attention_kernel()) { set_attention_kernel(kernel); }
  ~AttentionKernelGuard() { set_attention_kernel(previous_); }
  AttentionKernelGuard(const AttentionKernelGuard&) = delete;
  AttentionKernelGuard& operator=(const AttentionKernelGuard&) = delete;

 private:
  AttentionKernel previous_;
};

}  // namespace ag::nn
