// Every differentiable op ag defines, by name. A node of the autograd graph is labelled with one of
// these (or with the name of a user-defined op, see ag::make_op). tests/autograd checks that each
// name in this list is exercised by at least one float64 gradcheck, so adding an op here without a
// gradient test fails the build's tests.
#pragma once

// One row per ops file, laid out by hand.
// clang-format off
#define AG_DIFFERENTIABLE_OPS(X)                                                                  \
  /* elementwise, broadcasting (ops_elementwise.cpp) */                                           \
  X(add) X(sub) X(mul) X(div) X(add_scalar) X(mul_scalar) X(div_scalar) X(rdiv_scalar) X(neg)    \
  X(pow) X(exp) X(log) X(sqrt) X(tanh) X(sigmoid) X(relu) X(gelu) X(where) X(masked_fill)        \
  X(gelu_tanh) X(silu) X(abs) X(sin) X(cos) X(rsqrt) X(maximum) X(minimum) X(clamp) X(erf)       \
  /* reductions (ops_reduce.cpp) */                                                               \
  X(sum) X(mean) X(max) X(var)                                                                   \
  /* softmax (ops_softmax.cpp) */                                                                 \
  X(softmax) X(log_softmax) X(length_masked_softmax)                                              \
  /* normalisation (ops_norm.cpp) */                                                              \
  X(layer_norm) X(dropout_add_layer_norm) X(rms_norm)                                             \
  /* losses (ops_loss.cpp) */                                                                     \
  X(cross_entropy)                                                                                \
  /* matrix product (ops_matmul.cpp) */                                                           \
  X(matmul) X(linear) X(linear_relu)                                                              \
  /* shape and indexing (ops_shape.cpp) */                                                        \
  X(reshape) X(permute) X(squeeze) X(unsqueeze) X(expand) X(slice) X(concat) X(index_select)     \
  X(repeat_interleave) X(contiguous) X(clone) X(to)                                               \
  /* gathering, cumulative sums (ops_index.cpp) */                                                \
  X(gather) X(cumsum) X(topk)                                                                     \
  /* random (ops_random.cpp) */                                                                   \
  X(dropout)                                                                                      \
  /* rotary position embedding (ops_rotary.cpp) */                                                \
  X(rotary_embedding)                                                                             \
  /* ag::attention's kernels (ops_attention.cpp, ops_flash_attention.cpp) */                      \
  X(scaled_dot_product_attention) X(flash_attention)
// clang-format on

namespace ag {

enum class Op {
#define AG_OP_ENUM(name) name,
  AG_DIFFERENTIABLE_OPS(AG_OP_ENUM)
#undef AG_OP_ENUM
      custom  // a user-defined op (ag::make_op); its node carries its own name
};

inline constexpr const char* kOpNames[] = {
#define AG_OP_NAME(name) #name,
    AG_DIFFERENTIABLE_OPS(AG_OP_NAME)
#undef AG_OP_NAME
};
inline constexpr int kNumOps = static_cast<int>(Op::custom);
static_assert(
    sizeof(kOpNames) / sizeof(kOpNames[0]) == kNumOps, "every Op has exactly one name in kOpNames");

inline const char* op_name(Op op) {
  return op == Op::custom ? "custom" : kOpNames[static_cast<int>(op)];
}

}  // namespace ag
