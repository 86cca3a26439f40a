#include "autograd/autograd.h"

#include <algorithm>
#include <atomic>
#include <unordered_set>

#include "autograd/ops.h"

namespace ag {

// ---- grad mode ------------------------------------------------------------------------------------

namespace {
thread_local bool grad_mode_enabled = true;
std::atomic<uint64_t> next_sequence_nr{0};
std::atomic<int64_t> live_nodes{0};
thread_local std::vector<BackwardObserver> backward_observers;
}  // namespace

bool GradMode::is_enabled() { return grad_mode_enabled; }
void GradMode::set_enabled(bool enabled) { grad_mode_enabled = enabled; }

BackwardObserverGuard::BackwardObserverGuard(BackwardObserver observer) {
  backward_observers.push_back(std::move(observer));
}
BackwardObserverGuard::~BackwardObserverGuard() { backward_observers.pop_back(); }

// ---- Node ---------------------------------------------------------------------------------------

Node::Node(Op op, std::string custom_name, std::vector<Edge> inputs, Shape output_shape,
           DType output_dtype, BackwardFn backward)
    : op_(op),
      custom_name_(std::move(custom_name)),
      sequence_nr_(next_sequence_nr.fetch_add(1, std::memory_order_relaxed)),
      inputs_(std::move(inputs)),
      output_shape_(std::move(output_shape)),
      output_dtype_(output_dtype),
      backward_(std::move(backward)) {
  live_nodes.fetch_add(1, std::memory_order_relaxed);
}

int64_t live_node_count() { return live_nodes.load(std::memory_order_relaxed); }

namespace {
// Nodes whose last owner went away while another ~Node was running; drained by the outermost one.
thread_local std::vector<std::shared_ptr<Node>> nodes_to_delete;
thread_local bool deleting_nodes = false;
}  // namespace

Node::~Node() {
  // Dropping the last reference to the head of a long chain would otherwise destroy the chain
  // recursively (node -> edge -> node -> ...) and overflow the stack. Instead each dying node
  // hands its input nodes to a work list that the outermost destructor drains in a loop.
  live_nodes.fetch_sub(1, std::memory_order_relaxed);
  const bool outermost = !deleting_nodes;
  deleting_nodes = true;
  for (Edge& edge : inputs_)
    if (edge.node) nodes_to_delete.push_back(std::move(edge.node));
  // The backward function holds saved tensors (and through them their grad_fn nodes); any node
  // that dies now only lands on the work list.
  backward_ = nullptr;
  pending_grad_ = Tensor();
  if (!outermost) return;
  while (!nodes_to_delete.empty()) {
    std::shared_ptr<Node> node = std::move(nodes_to_delete.back());
    nodes_to_delete.pop_back();
    node.reset();  // may push more nodes onto the list; never recurses deeper than one level
  }
  deleting_nodes = false;
}

// ---- recording ----------------------------------------------------------------------------------

namespace detail {

bool any_requires_grad(const std::vector<Tensor>& inputs) {
  if (!GradMode::is_enabled()) return false;
  for (const Tensor& input : inputs)
    if (input.defined() && input.requires_grad()) return true;
  return false;
}

namespace {
Tensor record_node(Op op, std::string custom_name, const Tensor& output,
                   const std::vector<Tensor>& inputs, BackwardFn backward) {
  if (!any_requires_grad(inputs)) return output;
  if (output.impl_ptr()->grad_fn || output.requires_grad())
    fail<AutogradError>(custom_name.empty() ? op_name(op) : custom_name.c_str(),
                        ": its output must be a fresh tensor, not one already in the graph");
  std::vector<Edge> edges;
  edges.reserve(inputs.size());
  for (const Tensor& input : inputs) {
    Edge edge;
    if (input.defined() && input.requires_grad()) {
      if (input.grad_fn())
        edge.node = input.grad_fn();
      else
        edge.leaf = input.impl_ptr();
    }
    edges.push_back(std::move(edge));
  }
  auto node = std::make_shared<Node>(op, std::move(custom_name), std::move(edges), output.shape(),
                                     output.dtype(), std::move(backward));
  TensorImpl& impl = *output.impl_ptr();
  impl.grad_fn = std::move(node);
  impl.requires_grad = true;
  return output;
}
}  // namespace

Tensor record(Op op, const Tensor& output, const std::vector<Tensor>& inputs, BackwardFn backward) {
  return record_node(op, {}, output, inputs, std::move(backward));
}

}  // namespace detail

Tensor make_op(std::string name, const Tensor& output, const std::vector<Tensor>& inputs,
               BackwardFn backward) {
  if (name.empty()) throw ValueError("make_op: the op needs a name");
  return detail::record_node(Op::custom, std::move(name), output, inputs, std::move(backward));
}

// ---- backward -----------------------------------------------------------------------------------

namespace {

// Adds `grad` into `slot` (a node's pending gradient or a leaf's .grad). Every gradient in ag
// flows through here, so this is where a gradient of the wrong shape or dtype is caught.
void accumulate(std::shared_ptr<TensorImpl>& slot, Tensor grad, const Shape& expected_shape,
                DType expected_dtype, const char* producer, std::size_t input_index,
                const char* receiver) {
  if (grad.shape() != expected_shape || grad.dtype() != expected_dtype)
    detail::fail<AutogradError>(
        "backward of '", producer, "' returned a gradient of shape ", shape_str(grad.shape()),
        " (", dtype_name(grad.dtype()), ") for its input ", input_index, " (", receiver,
        ") of shape ", shape_str(expected_shape), " (", dtype_name(expected_dtype), ")");
  if (!slot) {
    // Keep the gradient itself when nothing else can see its memory and it is a plain
    // contiguous buffer; otherwise copy it, so that accumulating into it in place later cannot
    // write into another tensor (an identity backward hands one tensor to several inputs).
    bool exclusive = grad.impl_ptr().use_count() == 1 &&
                     grad.impl_ptr()->storage.use_count() == 1 && grad.is_contiguous() &&
                     grad.offset() == 0;
    slot = exclusive ? grad.impl_ptr() : clone(grad).impl_ptr();
    return;
  }
  Tensor(slot).add_(grad);
}

}  // namespace

void run_backward(const Tensor& root, const Tensor& grad, bool retain_graph) {
  if (!root.requires_grad())
    detail::fail<AutogradError>("backward: the tensor of shape ", shape_str(root.shape()),
                                " does not require grad and has no grad_fn");
  Tensor seed;
  if (grad.defined()) {
    if (grad.shape() != root.shape() || grad.dtype() != root.dtype())
      detail::fail<AutogradError>("backward: gradient of shape ", shape_str(grad.shape()), " (",
                                  dtype_name(grad.dtype()), ") for a tensor of shape ",
                                  shape_str(root.shape()), " (", dtype_name(root.dtype()), ")");
    seed = grad.detach();
  } else {
    if (root.numel() != 1)
      detail::fail<AutogradError>("backward: a tensor of shape ", shape_str(root.shape()),
                                  " is not a scalar; pass the upstream gradient explicitly");
    seed = ones(root.shape(), root.dtype());
  }
  NoGradGuard no_grad;  // backward functions record nothing

  if (root.is_leaf()) {
    accumulate(root.impl_ptr()->grad, seed, root.shape(), root.dtype(), "backward", 0, "leaf");
    return;
  }

  // Every node reachable from the root, found by an explicit-stack DFS (no recursion: a chain
  // of a million ops is fine).
  std::vector<std::shared_ptr<Node>> nodes;
  std::unordered_set<Node*> seen;
  std::vector<Node*> stack = {root.grad_fn().get()};
  nodes.push_back(root.grad_fn());
  seen.insert(root.grad_fn().get());
  while (!stack.empty()) {
    Node* node = stack.back();
    stack.pop_back();
    for (const Edge& edge : node->inputs())
      if (edge.node && seen.insert(edge.node.get()).second) {
        nodes.push_back(edge.node);
        stack.push_back(edge.node.get());
      }
  }
  // An op's inputs are always created before it, so decreasing creation order is a topological
  // order: a node runs only after every node that feeds gradient into it. It is also
  // deterministic, unlike an order that depends on pointer values.
  std::sort(nodes.begin(), nodes.end(), [](const auto& a, const auto& b) {
    return a->sequence_nr() > b->sequence_nr();
  });

  root.grad_fn()->pending_grad_ = std::move(seed);
  try {
    for (const std::shared_ptr<Node>& node : nodes) {
      Tensor grad_output = std::move(node->pending_grad_);
      node->pending_grad_ = Tensor();
      if (grad_output.defined()) {
        if (node->released_)
          detail::fail<AutogradError>(
              "backward: the graph through '", node->name(),
              "' was already freed by an earlier backward(); call the first backward with "
              "retain_graph=true to backpropagate through it twice");
        if (!node->backward_)
          detail::fail<AutogradError>("backward: op '", node->name(), "' (output shape ",
                                      shape_str(node->output_shape()),
                                      ") has no backward function");
        std::vector<bool> flags;
        flags.reserve(node->inputs().size());
        for (const Edge& edge : node->inputs()) flags.push_back(edge.needs_grad());
        Grads grads = node->backward_(grad_output, NeedsGrad(std::move(flags)));
        if (grads.size() != node->inputs().size())
          detail::fail<AutogradError>("backward of '", node->name(), "' returned ", grads.size(),
                                      " gradients for ", node->inputs().size(), " inputs");
        for (const BackwardObserver& observer : backward_observers)
          observer(*node, grad_output, grads);
        grad_output = Tensor();  // so a gradient passed through unchanged can be kept, not copied
        for (std::size_t i = 0; i < grads.size(); ++i) {
          const Edge& edge = node->inputs()[i];
          if (!edge.needs_grad() || !grads[i].defined()) continue;
          if (edge.node) {
            std::shared_ptr<TensorImpl> slot =
                edge.node->pending_grad_.defined() ? edge.node->pending_grad_.impl_ptr() : nullptr;
            accumulate(slot, std::move(grads[i]), edge.node->output_shape(), edge.node->output_dtype(),
                       node->name(), i, edge.node->name());
            edge.node->pending_grad_ = Tensor(slot);
          } else {
            accumulate(edge.leaf->grad, std::move(grads[i]), edge.leaf->shape, edge.leaf->dtype,
                       node->name(), i, "leaf");
          }
        }
      }
      if (!retain_graph) {
        // Free what the graph holds: saved tensors (in the backward function) and the edges.
        node->backward_ = nullptr;
        node->inputs_.clear();
        node->released_ = true;
      }
    }
  } catch (...) {
    for (const std::shared_ptr<Node>& node : nodes) node->pending_grad_ = Tensor();
    throw;
  }
}

}  // namespace ag
