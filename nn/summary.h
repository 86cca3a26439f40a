// Summaries of a module for reading and debugging: its layers and parameter counts (summary, as
// torchinfo's or Keras's model summary) and the norms of its gradients after a backward
// (grad_norm_summary: which layer's gradients vanish or explode).
#pragma once

#include <string>
#include <vector>

#include "nn/module.h"

namespace ag::nn {

// 1234567 -> "1,234,567": a count as summary() prints it (Python's f"{n:,}").
std::string with_commas(int64_t n);

// One line per module of the tree, depth first in registration order (the order of
// named_parameters): its dotted name ("(root)" for `module` itself), its type, its own parameters
// with their shapes, its own parameter count and the count of its whole subtree; then the total
// (equal to module.num_parameters()) and the number of buffer elements (saved but not trained,
// such as the positional encoding table). A tied tensor (nanoGPT's lm_head.weight = wte.weight)
// is each holder's own parameter, marked "(= wte.weight)" after the first, and counted once in
// the total; a line after the total names each tie. Deterministic text:
//
//   module           type                 own parameters             own  with children
//   (root)           MultiHeadAttention   -                            0         40,000
//   attention        DotProductAttention  -                            0              0
//   W_q              Linear               weight [100,100]        10,000         10,000
//   ...
//   total parameters: 40,000
std::string summary(const Module& module);

// The gradient norms of each parameter after a backward.
struct ParamGradNorm {
  std::string name;  // dotted, as named_parameters
  Shape shape;
  bool has_grad;      // false if no backward has reached the parameter (grad_norm is then 0)
  double grad_norm;   // ‖∇‖₂ of its .grad
  double param_norm;  // ‖p‖₂
};
struct GradNormReport {
  std::vector<ParamGradNorm> params;  // in named_parameters order
  // sqrt(Σ ‖∇ᵢ‖²) over the parameters that have a gradient: the same number, summed in the same
  // order, as optim::clip_grad_norm returns (the norm it clips).
  double total_norm = 0;
};
GradNormReport grad_norms(const Module& module);

// grad_norms as a table: name, shape, grad norm, parameter norm and their ratio ‖∇‖/‖p‖ (roughly
// how far one SGD step of learning rate 1 would move the parameter, relative to its size), and
// the total gradient norm at the end. Parameters without a gradient say "no grad".
std::string grad_norm_summary(const Module& module);

}  // namespace ag::nn
