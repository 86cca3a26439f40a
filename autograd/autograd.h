// Reverse-mode automatic differentiation.
//
// Every op that gets an input requiring grad (while grad mode is on) records a Node: the op's
// name, one Edge per input (to the Node that produced it, or to the leaf tensor that accumulates
// its gradient), and the op's backward function, which maps the gradient of the op's output to
// the gradients of its inputs. Tensor::backward() runs these functions in reverse creation order —
// an iterative, deterministic topological order — and frees the graph as it goes.
//
// Saved tensors, as in PyTorch: a backward function that reads tensors of the forward (mul's
// inputs, exp's output, a mask) names them when the op is recorded, and the node remembers the
// version of each one's storage (Tensor::version). Writing one of them in place afterwards —
// x.mul_(2), an optimizer's step, copy_, fill_ — bumps that version, and backward then refuses to
// run the op's backward function with the values it would silently get wrong:
//   one of the variables needed for gradient computation has been modified by an inplace
//   operation: [mul saved a tensor of shape [2] at version 0; it is now at version 1]
// A tensor an op did not save may be changed freely: y = x + 1; x.add_(1); y.backward() works.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "autograd/op_list.h"
#include "autograd/scoped_setting.h"
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

namespace detail {
// The elements of a tensor that slice(x, dim, start, end, step) views: `length` positions along
// `dim`, from `start`, `step` apart.
struct SliceRegion {
  int64_t dim, start, step, length;
};
// Marks the node of `output` = slice(x, region) (ops_shape.cpp) so that backward writes its
// gradient straight into that region of x's gradient (run_backward). Nothing when x has no node.
void mark_slice_region(const Tensor& output, const Tensor& x, const SliceRegion& region);
}  // namespace detail

struct Edge {
  std::shared_ptr<Node> node;        // the op that produced this input, or
  std::shared_ptr<TensorImpl> leaf;  // the leaf whose .grad receives the gradient
  bool needs_grad() const { return node || leaf; }
};

// A tensor an op's backward function reads, with the version of its storage when the op ran.
struct SavedVersion {
  Tensor tensor;  // undefined for the op's own output (the node would hold itself)
  std::shared_ptr<Storage> storage;  // the storage the backward reads
  uint64_t version = 0;              // storage->version() when the op ran
};

class Node {
 public:
  Node(Op op, std::string custom_name, std::vector<Edge> inputs, Shape output_shape,
      DType output_dtype, BackwardFn backward, std::vector<SavedVersion> saved);
  ~Node();  // iterative: dropping a graph of a million nodes does not recurse a million deep
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  Op op() const { return op_; }
  const char* name() const { return op_ == Op::custom ? custom_name_.c_str() : op_name(op_); }
  uint64_t sequence_nr() const { return sequence_nr_; }
  const std::vector<Edge>& inputs() const { return inputs_; }
  const Shape& output_shape() const { return output_shape_; }
  DType output_dtype() const { return output_dtype_; }
  // The shapes of all the op's inputs as the forward saw them, in input order — also those that
  // need no gradient (whose Edge is empty); an input that was an undefined Tensor has no shape
  // (std::nullopt). Kept after backward frees the graph. For graph dumps, traces and messages.
  std::vector<std::optional<Shape>> input_shapes() const;
  // The op's output tensor while something else keeps it alive (the caller, or a later op's
  // saved state); undefined otherwise. The node holds it weakly, so this creates no cycle.
  Tensor output() const;
  // True once a backward() without retain_graph has run through this node.
  bool released() const { return released_; }
  // Throws an AutogradError naming the op, if a tensor it saved for its backward function was
  // written in place (or given other data by set_data) since the op ran. Backward calls it before
  // the node's backward function.
  void check_saved_versions() const;

  // Attaches what the recording op knows beyond the constructor's arguments: its inputs' shapes
  // (see input_shapes) and a weak reference to its output. Called once by ag's recording.
  void set_forward_info(const std::vector<Tensor>& inputs, const Tensor& output);

 private:
  friend void run_backward(const Tensor&, const Tensor&, bool);
  friend void detail::mark_slice_region(const Tensor&, const Tensor&, const detail::SliceRegion&);
  friend class Tensor;  // register_hook, retain_grad
  friend void update_in_graph(
      const Tensor&, const char*, const std::function<Tensor(const Tensor&)>&);
  friend class HookHandle;  // remove
  Op op_;
  std::string custom_name_;
  uint64_t sequence_nr_;
  std::vector<Edge> inputs_;
  Shape output_shape_;
  DType output_dtype_;
  BackwardFn backward_;
  std::vector<SavedVersion> saved_;  // what backward_ reads, checked before it runs
  bool released_ = false;
  Tensor pending_grad_;  // sum of the gradients received so far during a backward pass
  // A slice's node whose input x is another node's output: the region of x its output views.
  // Backward does not call its backward function (zeros of x's shape with the gradient written
  // into the region) but hands the gradient to x's node, to be written into that region of x's
  // gradient: split's pieces (nanoGPT's q, k, v) then fill one gradient, instead of each writing
  // a tensor of x's shape that the engine adds up. (The same values, but that a −0 of the
  // gradient stays −0, as in PyTorch's split, where adding the zeros made it +0.)
  std::optional<detail::SliceRegion> slice_region_;
  // Gradients received from slices of this node's output (above), each zero outside its region,
  // in the order they came; written into pending_grad_ before this node runs, or before a
  // gradient of the whole output is added to it.
  std::vector<std::pair<Tensor, detail::SliceRegion>> pending_slices_;
  // Every input's rank followed by its dims, back to back (rank -1: an undefined input): one
  // allocation per node instead of one per input.
  std::vector<int64_t> input_dims_;
  std::weak_ptr<TensorImpl> output_;
  std::vector<GradHookEntry> grad_hooks_;  // Tensor::register_hook on this node's output
  bool retains_grad_ = false;              // Tensor::retain_grad on this node's output
};

// How many autograd nodes exist right now in this process: a training loop whose graph is freed
// every step keeps this flat (tests use it to find leaks of whole graphs).
int64_t live_node_count();

// Runs backward from `root` with upstream gradient `grad` (see Tensor::backward).
void run_backward(const Tensor& root, const Tensor& grad, bool retain_graph);

// x ⊕= y as a recorded op, as PyTorch's differentiable in-place updates (the Python binding's
// +=, -=, *=, /= in grad mode on a tensor in the graph: makemore's `self.out += self.bias`; ag's
// C++ in-place ops are not differentiable). `out_of_place(before)` computes x ⊕ y from a handle
// to x's value before the update; x's own handle then takes the result's data and grad_fn, so
// that every name of x sees the update and backward runs through the op into x's old history.
// The result must have x's shape and dtype. An AutogradError naming `op` where x is a leaf that
// requires grad (as in PyTorch) or where anything else holds x or its memory — another handle, a
// view of it, a tensor an op saved for backward — since that would keep the old values silently.
void update_in_graph(const Tensor& x, const char* op,
    const std::function<Tensor(const Tensor& before)>& out_of_place);
// What x ⊕= y asks of the result r = x ⊕ y, in place or in the graph: x's dtype (a DTypeError
// naming `op`) and x's shape (a ShapeError), in PyTorch's words.
void check_in_place_result(const Tensor& x, const Tensor& result, const char* op);

// ---- grad mode ----------------------------------------------------------------------------------
class GradMode {
 public:
  static bool is_enabled();
  static void set_enabled(bool enabled);
};

// While alive, ops record nothing (evaluation, optimizer updates). Restores the previous mode.
class NoGradGuard : public ScopedSetting<bool, &GradMode::is_enabled, &GradMode::set_enabled> {
 public:
  NoGradGuard() : ScopedSetting(false) {}
};

// ---- anomaly mode -------------------------------------------------------------------------------
// While anomaly mode is on (on this thread), every op recorded in the graph has its output checked
// for NaN as the forward computes it (an infinity is no anomaly there: nanoGPT's −inf causal mask
// through masked_fill, as PyTorch's anomaly mode lets it pass), and backward checks every gradient
// an op returns for its inputs for NaN and ±Inf (no gradient should be infinite). The first
// anomaly throws an AutogradError that names the op, its input shapes and output shape, which
// element went bad and whether it happened in forward or backward:
//   anomaly mode: forward of 'log' (inputs [3] -> output [3]) produced NaN at element 1 of its
//   output
// It finds the op where a NaN is born instead of the loss where it shows up. Ops on tensors that
// need no gradient (and everything under NoGradGuard) are not recorded and so not checked. It
// costs one flag test per op when off; when on, one pass over every output and gradient.
class AnomalyMode {
 public:
  static bool is_enabled();
  static void set_enabled(bool enabled);
};

// Turns anomaly mode on for a scope (as torch.autograd.detect_anomaly) and restores the previous
// setting on exit:
//   { ag::AnomalyModeGuard anomaly; loss = model(x); loss.backward(); }
class AnomalyModeGuard
    : public ScopedSetting<bool, &AnomalyMode::is_enabled, &AnomalyMode::set_enabled> {
 public:
  explicit AnomalyModeGuard(bool enabled = true) : ScopedSetting(enabled) {}
};

// ---- user-defined ops ---------------------------------------------------------------------------
// Connects `output`, computed by the caller from `inputs` without autograd, to the graph under
// the op name `name`; `backward` computes the inputs' gradients. An empty `backward` makes an op
// that throws when backward reaches it. Returns `output` (with grad_fn set when any input
// requires grad and grad mode is on).
Tensor make_op(
    std::string name, const Tensor& output, const std::vector<Tensor>& inputs, BackwardFn backward);
// The same, for a backward function that reads tensors of the forward (PyTorch's
// ctx.save_for_backward): `saved` lists them — inputs, `output` itself, or any other tensor the
// function captured — and backward throws an AutogradError naming the op if one of them was
// written in place between this call and the backward:
//   Tensor y = make_op("cube", x.detach().pow(3), {x}, /*saved=*/{x},
//       [x](const Tensor& g, const NeedsGrad&) -> Grads { return {g * 3.0 * x * x}; });
Tensor make_op(std::string name, const Tensor& output, const std::vector<Tensor>& inputs,
    const std::vector<Tensor>& saved, BackwardFn backward);

// ---- observing backward -------------------------------------------------------------------------
// Called for each node as backward runs it, after its gradients are computed (grad_output is the
// gradient of the node's output after its hooks; see also BackwardTraceGuard in
// autograd/graph_tools.h, which prints these calls).
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

// Queues `callback` to run once the backward pass now running has finished — after every node's
// backward function and every hook — as PyTorch's Variable._execution_engine.queue_callback.
// Callable only from inside a backward pass (a hook or a backward function; AutogradError
// otherwise); callbacks run in the order queued, and a callback may queue another. If backward
// throws, queued callbacks do not run. Data-parallel training queues one to wait for its last
// gradient averages before backward() returns.
void queue_backward_callback(std::function<void()> callback);

namespace detail {
// Records `op` as producing `output` from `inputs` (built-in ops). Same contract as make_op: the
// first form for a backward function that reads no tensor of the forward (add's reads only
// shapes), the second with the tensors it reads, `saved`, whose versions backward checks.
Tensor record(Op op, const Tensor& output, const std::vector<Tensor>& inputs, BackwardFn backward);
Tensor record(Op op, const Tensor& output, const std::vector<Tensor>& inputs,
    std::initializer_list<Tensor> saved, BackwardFn backward);
// Whether any of `inputs` requires grad while grad mode is on — ops skip saving state otherwise.
bool any_requires_grad(const std::vector<Tensor>& inputs);
}  // namespace detail

}  // namespace ag
