// Rotary position embedding (RoPE; Su et al. 2021): the angles of ag::rotary_embedding for the
// positions of a sequence, cached, and the rotation of queries or keys with them. (d2l's additive
// encodings, PositionalEncoding and LearnedPositionalEncoding, are in nn/attention.h.)
//
// The seed's sinusoids turn column pair j of the encoding by the angle t·ω_j at position t, with
// ω_j = 1 / 10000^(2j/d); RoPE turns feature pair j of every query and key of position t by the same
// angle, θ_{t,j} = t · base^(−2j/dim), so that their dot products depend on relative positions only
// (the derivation: autograd/ops_rotary.cpp).
#pragma once

#include <string>
#include <utility>

#include "autograd/ops.h"
#include "nn/module.h"

namespace ag::nn {

// Turns the first `dim` features of each row of x (..., T, d), the row of position t, by
// θ_{t,j} = t · base^(−2j/dim) on feature pair j (the pairs `pairs` names); features dim … d − 1
// pass through (partial rotary). With fused_kernels() (the default) this is the one op
// ag::rotary_embedding; otherwise the same rotation composed of ag's primitives (narrow, reshape,
// select, mul, sub, add, stack, concat: nn/fused.h). It has no parameters and no buffers: cos θ
// and sin θ are computed in double, rounded once to the module's dtype and cached as (positions,
// dim/2) tables, grown by doubling when a position past them is asked for (1024 positions at
// first) and computed again by Module::to.
//   nn::RotaryEmbedding rope(head_dim);
//   Tensor q = rope(W_q(X).reshape({B, T, H, head_dim}).permute({0, 2, 1, 3}));  // (B, H, T, d)
class RotaryEmbedding : public Module {
 public:
  // dim: the features rotated per head (even: the head width, or fewer for partial rotary); base:
  // θ's base (10000 as RoFormer, Llama and d2l's sinusoids). dim odd or not positive, or base not
  // positive and finite, is a ValueError.
  explicit RotaryEmbedding(
      int64_t dim, double base = 10000.0, RotaryPairs pairs = RotaryPairs::interleaved);
  // x (..., T, d), d ≥ dim, at positions first_position … first_position + T − 1 -> the same shape,
  // pair j of position t turned by θ_{t,j} = t · base^(−2j/dim). A negative first_position is a
  // ValueError; x of fewer than 2 dims or d < dim a ShapeError.
  Tensor forward(const Tensor& x, int64_t first_position = 0);
  Tensor operator()(const Tensor& x, int64_t first_position = 0) {
    return forward(x, first_position);
  }
  // cos θ and sin θ of positions [first_position, first_position + T), each (T, dim/2) in dtype:
  // views of the cached tables (grown, by doubling, when a position past them is asked for),
  // computed in double and rounded once to dtype. For a dtype other than the module's, the rows
  // asked for are computed alone (from double, never converted from the cache's dtype).
  std::pair<Tensor, Tensor> angles(int64_t first_position, int64_t T, DType dtype);
  std::string type_name() const override { return "RotaryEmbedding"; }
  std::string extra_repr() const override;  // "dim=16, base=10000.0, pairs='interleaved'"

  int64_t dim;
  double base;
  RotaryPairs pairs;
  // The cache of cos θ and sin θ (positions, dim/2), in the module's dtype. A cache, not state:
  // neither parameters nor buffers, so state dicts and checkpoints leave them out (their length
  // follows the longest sequence seen, not the configuration), and Module::to computes them again.
  Tensor cos_cached, sin_cached;

  static constexpr int64_t kInitialPositions = 1024;

 protected:
  void recompute_buffers(DType dtype) override;  // the cache from its formula, in dtype

 private:
  void grow_to(int64_t positions);  // at least `positions` rows, doubling
};

// Names of the pairings for command lines and files: "interleaved" | "halves"; parse_rotary_pairs
// throws a ValueError naming `what` (the option or field) for any other name.
std::string rotary_pairs_name(RotaryPairs pairs);
RotaryPairs parse_rotary_pairs(const std::string& name, const std::string& what);

}  // namespace ag::nn
