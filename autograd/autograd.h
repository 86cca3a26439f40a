// Reverse-mode automatic differentiation.
//
// Every op that gets an input requiring grad (while grad mode is on) records a Node: the op's
// name, one Edge per input (to the Node that produced it, or to the leaf tensor that accumulates
// its gradient), and the op's backward function, which maps the gradient of the op's output to
// the gradients of its inputs. Tensor::backward() runs these functions in reverse creation order —
// an iterative, deterministic topological order — and frees the graph as it goes.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "autograd/op_list.h"
#include "autograd/tensor.h"

namespace ag {

// Gradients for an op's inputs, in input order; an undefined Tensor means "no gradient".
using Grads = std::vector<Tensor>;

// Which inputs of an op need a gradient (a backward function may skip the others).
class NeedsGrad {
 public:
  explicit NeedsGrad(std::vector<bool> flags) : flags_(std::move(flags)) {}
  bool operator[](std::size_t input) const { return flags_[input]; }

 private:
  std::vector<bool> flags_;
};

// Maps the gradient of an op's output to the gradients of its inputs. It runs with grad mode
// off, so it may use any ag op.
using BackwardFn = std::function<Grads(const Tensor& grad_output, const NeedsGrad& needs)>;

struct Edge {
  std::shared_ptr<Node> node;        // the op that produced this input, or
  std::shared_ptr<TensorImpl> leaf;  // the leaf whose .grad receives the gradient
  bool needs_grad() const { return node || leaf; }
};

class Node {
 public:
  Node(Op op, std::string custom_name, std::vector<Edge> inputs, Shape output_shape,
       DType output_dtype, BackwardFn backward);
  ~Node();  // iterative: dropping a graph of a million nodes does not recurse a million deep
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  Op op() const { return op_; }
  const char* name() const { return op_ == Op::custom ? custom_name_.c_str() : op_name(op_); }
  uint64_t sequence_nr() const { return sequence_nr_; }
  const std::vector<Edge>& inputs() const { return inputs_; }
  const Shape& output_shape() const { return output_shape_; }
  DType output_dtype() const { return output_dtype_; }
  // True once a backward() without retain_graph has run through this node.
  bool released() const { return released_; }

 private:
  friend void run_backward(const Tensor&, const Tensor&, bool);
  Op op_;
  std::string custom_name_;
  uint64_t sequence_nr_;
  std::vector<Edge> inputs_;
  Shape output_shape_;
  DType output_dtype_;
  BackwardFn backward_;
  bool released_ = false;
  Tensor pending_grad_;  // sum of the gradients received so far during a backward pass
};

// How many autograd nodes exist right now in this process: a training loop whose graph is freed
// every step keeps this flat (tests use it to find leaks of whole graphs).
int64_t live_node_count();

// Runs backward from `root` with upstream gradient `grad` (see Tensor::backward).
void run_backward(const Tensor& root, const Tensor& grad, bool retain_graph);

// ---- grad mode ------------------------------------------------------------------------------------
class GradMode {
 public:
  static bool is_enabled();
  static void set_enabled(bool enabled);
};

// While alive, ops record nothing (evaluation, optimizer updates). Restores the previous mode.
class NoGradGuard {
 public:
  NoGradGuard() : previous_(GradMode::is_enabled()) { GradMode::set_enabled(false); }
  ~NoGradGuard() { GradMode::set_enabled(previous_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

// ---- user-defined ops ---------------------------------------------------------------------------
// Connects `output`, computed by the caller from `inputs` without autograd, to the graph under
// the op name `name`; `backward` computes the inputs' gradients. An empty `backward` makes an op
// that throws when backward reaches it. Returns `output` (with grad_fn set when any input
// requires grad and grad mode is on).
Tensor make_op(std::string name, const Tensor& output, const std::vector<Tensor>& inputs,
               BackwardFn backward);

// ---- observing backward ---------------------------------------------------------------------------
// Called for each node as backward runs it, after its gradients are computed.
using BackwardObserver =
    std::function<void(const Node& node, const Tensor& grad_output, const Grads& grad_inputs)>;

// While alive, `observer` sees every node that backward runs on this thread (nested guards stack;
// all are called).
class BackwardObserverGuard {
 public:
  explicit BackwardObserverGuard(BackwardObserver observer);
  ~BackwardObserverGuard();
  BackwardObserverGuard(const BackwardObserverGuard&) = delete;
  BackwardObserverGuard& operator=(const BackwardObserverGuard&) = delete;
};

namespace detail {
// Records `op` as producing `output` from `inputs` (built-in ops). Same contract as make_op.
Tensor record(Op op, const Tensor& output, const std::vector<Tensor>& inputs, BackwardFn backward);
// Whether any of `inputs` requires grad while grad mode is on — ops skip saving state otherwise.
bool any_requires_grad(const std::vector<Tensor>& inputs);
}  // namespace detail

}  // namespace ag
