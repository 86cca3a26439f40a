// Looking inside the graph: a Graphviz picture of the ops that produced a tensor (to_dot), and a
// printed trace of backward as it runs (BackwardTraceGuard).
//
//   ag::Tensor y = attention(X, X, X, valid_lens);
//   ag::DotOptions options;
//   options.names = attention.named_parameters();  // label the leaves W_q.weight, ...
//   ag::write_dot("attention.dot", y, options);
//   // shell: dot -Tpng attention.dot -o attention.png
//
//   { ag::BackwardTraceGuard trace(std::cout, attention.named_parameters()); y.sum().backward(); }
//
// See also Tensor::register_hook (autograd/tensor.h) and AnomalyModeGuard (autograd/autograd.h).
#pragma once

#include <cstdint>
#include <iostream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "autograd/autograd.h"

namespace ag {

// Names for leaf tensors, e.g. module.named_parameters() ("W_q.weight"); from a map such as
// module.state_dict(), TensorNames(map.begin(), map.end()). A leaf is matched by identity (the
// same TensorImpl), not by value.
using TensorNames = std::vector<std::pair<std::string, Tensor>>;

struct DotOptions {
  // Labels for leaves; a leaf not listed here shows its Tensor::name() if it has one, else "leaf".
  TensorNames names;
  // Show values: of leaves, and of op outputs that are still alive (held by the caller or saved
  // by a later op for its backward; see Node::output).
  bool values = false;
  // Show the .grad of leaves (gradients of op outputs are not kept; see Tensor::register_hook).
  // Call backward(..., /*retain_graph=*/true) first, or the graph is gone.
  bool grads = false;
  // Tensors of at most this many elements are printed in full; larger ones as
  // "norm … min … max …".
  int64_t max_printed = 6;
  // Also draw the op inputs that need no gradient — the data a layer reads, such as X in X·W — as
  // dashed grey notes with their shape (they have no node in the graph, so only the shape is
  // known). Masks and valid lengths are not drawn: masked_fill, masked_softmax and the attention
  // ops read them as arguments, keep them for their backward and send them no gradient, so they
  // are not op inputs; the box of the op that reads them (masked_fill, length_masked_softmax,
  // scaled_dot_product_attention) shows where masking happens.
  bool constants = true;
  // Printed as the graph's caption when not empty.
  std::string title;
};

// The graph that produced `root` in Graphviz's DOT language: one box per op with its name, output
// shape and dtype; one ellipse per leaf that requires grad, with its name from options.names;
// edges from each input to the op that used it (labelled with the input's position when the op
// has several). Node ids (n0, n1, ...) follow a breadth-first walk from the root, inputs in
// order, so the text is the same on every run. Ops whose graph a backward() has already freed
// are drawn dashed, without their inputs. A root without a grad_fn is drawn alone.
std::string to_dot(const Tensor& root, const DotOptions& options = {});

// Writes to_dot(root, options) to `path`; throws ag::IoError naming the path if it cannot.
void write_dot(const std::string& path, const Tensor& root, const DotOptions& options = {});

// While alive, prints one line for every node backward runs on this thread, in the order it runs
// them (see BackwardObserverGuard):
//
//   step  op                  input shapes -> output shape     |grad out|  |grad in| per input
//      4  matmul              [2,4,100], [100,100] -> [2,4,100]  11.2      [0] 9.81, [1] 10.3
//
// |grad out| is the L2 norm of the gradient arriving at the op's output (dLoss/dOutput);
// |grad in| the norms of the gradients the op sends to each input by the chain rule ("-": the
// input needs no gradient; a leaf named in `names` is shown as "-> W_o.weight"). Steps count
// from 1 for the life of the guard; a header line explains the columns. Nested guards all print.
class BackwardTraceGuard {
 public:
  explicit BackwardTraceGuard(std::ostream& out = std::cout, TensorNames names = {});
  ~BackwardTraceGuard();
  BackwardTraceGuard(const BackwardTraceGuard&) = delete;
  BackwardTraceGuard& operator=(const BackwardTraceGuard&) = delete;

 private:
  struct State;
  std::shared_ptr<State> state_;
  BackwardObserverGuard observer_;
};

// "[0.1, -2, 3.5]" for a tensor of at most max_printed elements, else
// "norm 12.3 min -1.5 max 2.25" (row-major values, 4 significant digits). For graph labels.
std::string tensor_brief(const Tensor& t, int64_t max_printed = 6);

// The L2 norm of all elements, accumulated in double.
double l2_norm(const Tensor& t);

}  // namespace ag
