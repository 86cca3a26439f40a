#include "autograd/autograd.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <span>
#include <unordered_map>
#include <unordered_set>

#include "autograd/detail/kernels.h"
#include "autograd/ops.h"
#include "autograd/profiler.h"

namespace ag {

// ---- grad mode ----------------------------------------------------------------------------------

namespace {
thread_local bool grad_mode_enabled = true;
std::atomic<uint64_t> next_sequence_nr{0};
std::atomic<int64_t> live_nodes{0};
thread_local std::vector<BackwardObserver> backward_observers;
thread_local bool anomaly_mode_enabled = false;
// The callbacks queued (queue_backward_callback) for the backward pass running on this thread;
// null outside backward.
thread_local std::vector<std::function<void()>>* queued_backward_callbacks = nullptr;
}  // namespace

bool GradMode::is_enabled() { return grad_mode_enabled; }
void GradMode::set_enabled(bool enabled) { grad_mode_enabled = enabled; }

bool AnomalyMode::is_enabled() { return anomaly_mode_enabled; }
void AnomalyMode::set_enabled(bool enabled) { anomaly_mode_enabled = enabled; }

BackwardObserverGuard::BackwardObserverGuard(BackwardObserver observer) {
  backward_observers.push_back(std::move(observer));
}
BackwardObserverGuard::~BackwardObserverGuard() { backward_observers.pop_back(); }

// ---- Node ---------------------------------------------------------------------------------------

Node::Node(Op op, std::string custom_name, std::vector<Edge> inputs, Shape output_shape,
    DType output_dtype, BackwardFn backward, std::vector<SavedVersion> saved)
    : op_(op),
      custom_name_(std::move(custom_name)),
      sequence_nr_(next_sequence_nr.fetch_add(1, std::memory_order_relaxed)),
      inputs_(std::move(inputs)),
      output_shape_(std::move(output_shape)),
      output_dtype_(output_dtype),
      backward_(std::move(backward)),
      saved_(std::move(saved)) {
  live_nodes.fetch_add(1, std::memory_order_relaxed);
}

void Node::check_saved_versions() const {
  for (const SavedVersion& saved : saved_) {
    const uint64_t now = saved.storage->version();
    const bool replaced =
        saved.tensor.defined() && saved.tensor.impl_ptr()->storage != saved.storage;
    if (now == saved.version && !replaced) continue;
    const std::string what = saved.tensor.defined()
                                 ? "a tensor of shape " + shape_str(saved.tensor.shape())
                                 : "its output of shape " + shape_str(output_shape_);
    const std::string change = replaced ? "whose data set_data has replaced since"
                                        : "at version " + std::to_string(saved.version) +
                                              "; it is now at version " + std::to_string(now);
    fail<AutogradError>("backward of '", name(),
        "': one of the variables needed for gradient computation has been modified by an "
        "inplace operation: [",
        name(), " saved ", what, " ", change,
        "]; write it after backward, or pass the op a clone() of it (an in-place write: add_, "
        "mul_, copy_, fill_, an optimizer's step, changes the values the backward reads)");
  }
}

int64_t live_node_count() { return live_nodes.load(std::memory_order_relaxed); }

void Node::set_forward_info(const std::vector<Tensor>& inputs, const Tensor& output) {
  std::size_t count = 0;
  for (const Tensor& input : inputs) count += 1 + (input.defined() ? input.shape().size() : 0);
  input_dims_.clear();
  input_dims_.reserve(count);
  for (const Tensor& input : inputs) {
    if (!input.defined()) {
      input_dims_.push_back(-1);
      continue;
    }
    input_dims_.push_back(input.dim());
    input_dims_.insert(input_dims_.end(), input.shape().begin(), input.shape().end());
  }
  output_ = output.impl_ptr();
}

std::vector<std::optional<Shape>> Node::input_shapes() const {
  std::vector<std::optional<Shape>> shapes;
  for (std::size_t i = 0; i < input_dims_.size();) {
    const int64_t rank = input_dims_[i++];
    if (rank < 0) {
      shapes.emplace_back(std::nullopt);
      continue;
    }
    const auto first = input_dims_.begin() + static_cast<std::ptrdiff_t>(i);
    shapes.emplace_back(Shape(first, first + rank));
    i += static_cast<std::size_t>(rank);
  }
  return shapes;
}

Tensor Node::output() const {
  std::shared_ptr<TensorImpl> impl = output_.lock();
  return impl ? Tensor(std::move(impl)) : Tensor();
}

// ---- gradient hooks -----------------------------------------------------------------------------

HookHandle Tensor::register_hook(GradHook hook) const {
  if (!hook) throw ValueError("register_hook: the hook is an empty function");
  if (!requires_grad())
    fail<AutogradError>("register_hook: the tensor of shape ", shape_str(shape()),
        " does not require grad, so no gradient would reach the hook "
        "(call requires_grad_() on a leaf first)");
  static std::atomic<uint64_t> next_hook_id{1};
  HookHandle handle;
  handle.id_ = next_hook_id.fetch_add(1, std::memory_order_relaxed);
  if (grad_fn()) {
    grad_fn()->grad_hooks_.push_back({handle.id_, std::move(hook)});
    handle.node_ = grad_fn();
  } else {
    impl().grad_hooks.push_back({handle.id_, std::move(hook)});
    handle.leaf_ = impl_;
  }
  return handle;
}

void Tensor::retain_grad() const {
  if (!requires_grad())
    fail<AutogradError>("retain_grad: the tensor of shape ", shape_str(shape()),
        " does not require grad, so it has no gradient to keep");
  if (grad_fn()) grad_fn()->retains_grad_ = true;
}

bool Tensor::retains_grad() const { return grad_fn() && grad_fn()->retains_grad_; }

HookHandle Tensor::register_post_accumulate_grad_hook(PostAccumulateGradHook hook) const {
  if (!hook) throw ValueError("register_post_accumulate_grad_hook: the hook is an empty function");
  if (!requires_grad() || grad_fn())
    fail<AutogradError>("register_post_accumulate_grad_hook: the tensor of shape ",
        shape_str(shape()), " is not a leaf that requires grad (",
        grad_fn() ? "it is the output of '" + std::string(grad_fn()->name()) + "'"
                  : std::string("requires_grad is false"),
        "); only leaves accumulate a .grad");
  static std::atomic<uint64_t> next_hook_id{1};
  HookHandle handle;
  handle.id_ = next_hook_id.fetch_add(1, std::memory_order_relaxed);
  impl().post_accumulate_grad_hooks.push_back({handle.id_, std::move(hook)});
  handle.leaf_ = impl_;
  handle.post_accumulate_ = true;
  return handle;
}

namespace {
template <typename Entry>
bool erase_hook(std::vector<Entry>& hooks, uint64_t id) {
  auto it = std::find_if(hooks.begin(), hooks.end(), [id](const Entry& h) { return h.id == id; });
  if (it == hooks.end()) return false;
  hooks.erase(it);
  return true;
}
template <typename Entry>
bool has_hook(const std::vector<Entry>& hooks, uint64_t id) {
  return std::any_of(hooks.begin(), hooks.end(), [id](const Entry& h) { return h.id == id; });
}
}  // namespace

void HookHandle::remove() {
  if (auto leaf = leaf_.lock()) {
    if (post_accumulate_)
      erase_hook(leaf->post_accumulate_grad_hooks, id_);
    else
      erase_hook(leaf->grad_hooks, id_);
  }
  if (auto node = node_.lock()) erase_hook(node->grad_hooks_, id_);
  leaf_.reset();
  node_.reset();
}

bool HookHandle::active() const {
  if (auto leaf = leaf_.lock())
    return post_accumulate_ ? has_hook(leaf->post_accumulate_grad_hooks, id_)
                            : has_hook(leaf->grad_hooks, id_);
  if (auto node = node_.lock()) return has_hook(node->grad_hooks_, id_);
  return false;
}

void queue_backward_callback(std::function<void()> callback) {
  if (!callback) throw ValueError("queue_backward_callback: the callback is an empty function");
  if (!queued_backward_callbacks)
    fail<AutogradError>(
        "queue_backward_callback: no backward pass is running on this thread "
        "(call it from a hook or a backward function)");
  queued_backward_callbacks->push_back(std::move(callback));
}

// ---- anomaly checks -----------------------------------------------------------------------------

namespace {

// The first anomaly of `t` in row-major order — a NaN, or with infinities too also a ±Inf — its
// index and value; index -1 if there is none.
struct NonFinite {
  int64_t index = -1;
  double value = 0;
};
NonFinite first_anomaly(const Tensor& t, bool infinities) {
  auto bad = [infinities](double v) { return std::isnan(v) || (infinities && std::isinf(v)); };
  NonFinite found;
  if (t.is_contiguous()) {
    dispatch(t.dtype(), [&]<typename T>() {
      const T* p = t.data<T>();
      for (int64_t i = 0, n = t.numel(); i < n; ++i)
        if (bad(static_cast<double>(p[i]))) {
          found = {i, static_cast<double>(p[i])};
          return;
        }
    });
    return found;
  }
  const std::vector<double> values = t.to_vector<double>();  // a strided view: rare, debug-only
  for (std::size_t i = 0; i < values.size(); ++i)
    if (bad(values[i])) return {static_cast<int64_t>(i), values[i]};
  return found;
}

const char* non_finite_name(double value) {
  return std::isnan(value) ? "NaN" : value > 0 ? "+Inf" : "-Inf";
}

// "[3], none, [2,4]" — the shapes of an op's inputs (none: an undefined input).
std::string shapes_str(const std::vector<std::optional<Shape>>& shapes) {
  std::string out;
  for (std::size_t i = 0; i < shapes.size(); ++i)
    out += (i ? ", " : "") + (shapes[i] ? shape_str(*shapes[i]) : std::string("none"));
  return out;
}

void check_forward_anomaly(
    const char* op, const Tensor& output, const std::vector<Tensor>& inputs) {
  // A forward may make infinities on purpose (a −inf causal mask before softmax): only a NaN is
  // an anomaly there, as in PyTorch.
  const NonFinite bad = first_anomaly(output, /*infinities=*/false);
  if (bad.index < 0) return;
  std::vector<std::optional<Shape>> shapes;
  for (const Tensor& input : inputs)
    shapes.push_back(input.defined() ? std::optional<Shape>(input.shape()) : std::nullopt);
  fail<AutogradError>("anomaly mode: forward of '", op, "' (inputs ", shapes_str(shapes),
      " -> output ", shape_str(output.shape()), ") produced ", non_finite_name(bad.value),
      " at element ", bad.index, " of its output");
}

void check_backward_anomaly(const Node& node, const Grads& grads) {
  for (std::size_t i = 0; i < grads.size(); ++i) {
    if (!grads[i].defined()) continue;
    const NonFinite bad = first_anomaly(grads[i], /*infinities=*/true);
    if (bad.index < 0) continue;
    fail<AutogradError>("anomaly mode: backward of '", node.name(), "' (inputs ",
        shapes_str(node.input_shapes()), " -> output ", shape_str(node.output_shape()),
        ") produced ", non_finite_name(bad.value), " at element ", bad.index,
        " of the gradient for its input ", i, " (shape ", shape_str(grads[i].shape()), ")");
  }
}

}  // namespace

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
  // The backward function and saved_ hold saved tensors (and through them their grad_fn nodes);
  // any node that dies now only lands on the work list.
  backward_ = nullptr;
  saved_.clear();
  pending_grad_ = Tensor();
  pending_slices_.clear();
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
    const std::vector<Tensor>& inputs, BackwardFn backward, std::span<const Tensor> saved = {}) {
  if (!any_requires_grad(inputs)) return output;
  // An int64 or bool output (a comparison, an argmax) carries no gradient, as in PyTorch.
  if (!is_floating_point(output.dtype())) return output;
  const char* name = custom_name.empty() ? op_name(op) : custom_name.c_str();
  if (output.impl_ptr()->grad_fn || output.requires_grad())
    fail<AutogradError>(name, ": its output must be a fresh tensor, not one already in the graph");
  if (anomaly_mode_enabled) [[unlikely]]
    check_forward_anomaly(name, output, inputs);
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
  // The version of each saved tensor now; the output is kept by its storage alone (holding the
  // output itself would make the node own the tensor that owns the node).
  std::vector<SavedVersion> versions;
  versions.reserve(saved.size());
  for (const Tensor& tensor : saved) {
    if (!tensor.defined()) continue;
    const std::shared_ptr<Storage>& storage = tensor.impl_ptr()->storage;
    versions.push_back(
        {tensor.impl_ptr() == output.impl_ptr() ? Tensor() : tensor, storage, storage->version()});
  }
  auto node = std::make_shared<Node>(op, std::move(custom_name), std::move(edges), output.shape(),
      output.dtype(), std::move(backward), std::move(versions));
  node->set_forward_info(inputs, output);
  TensorImpl& impl = *output.impl_ptr();
  impl.grad_fn = std::move(node);
  impl.requires_grad = true;
  return output;
}
}  // namespace

Tensor record(Op op, const Tensor& output, const std::vector<Tensor>& inputs, BackwardFn backward) {
  return record_node(op, {}, output, inputs, std::move(backward));
}

Tensor record(Op op, const Tensor& output, const std::vector<Tensor>& inputs,
    std::initializer_list<Tensor> saved, BackwardFn backward) {
  return record_node(op, {}, output, inputs, std::move(backward), saved);
}

void mark_slice_region(const Tensor& output, const Tensor& x, const SliceRegion& region) {
  const std::shared_ptr<Node>& node = output.grad_fn();
  const std::shared_ptr<Node>& x_node = x.grad_fn();
  if (!node || node->op() != Op::slice || !x_node) return;  // x a leaf: backward's function
  // The region is of x's shape, which is its node's output's.
  if (x.shape() != x_node->output_shape() || x.dtype() != x_node->output_dtype()) return;
  node->slice_region_ = region;
}

}  // namespace detail

void check_in_place_result(const Tensor& x, const Tensor& result, const char* op) {
  if (result.dtype() != x.dtype())
    fail<DTypeError>(op, ": result type ", dtype_name(result.dtype()),
        " can't be cast to the desired output type ", dtype_name(x.dtype()), " (shape ",
        shape_str(x.shape()), ")");
  if (result.shape() != x.shape())
    fail<ShapeError>(op, ": output with shape ", shape_str(x.shape()),
        " doesn't match the broadcast shape ", shape_str(result.shape()));
}

void update_in_graph(const Tensor& x, const char* op,
    const std::function<Tensor(const Tensor& before)>& out_of_place) {
  if (x.is_leaf() && x.requires_grad())
    fail<AutogradError>(op, ": in-place update of a leaf of shape ", shape_str(x.shape()),
        " that requires grad (a parameter); update it under ag::NoGradGuard (in Python: with "
        "ag.no_grad())");
  // x's handle alone holds its TensorImpl (a tensor an op saved is another handle to it), and
  // that TensorImpl alone its memory (a view shares the storage)
  if (x.impl_ptr().use_count() != 1 || x.impl_ptr()->storage.use_count() != 1)
    fail<AutogradError>(op, ": in-place update of a tensor of shape ", shape_str(x.shape()),
        " in the graph whose memory another tensor shares (another handle to it, a view of it, "
        "or a tensor an op saved for its backward), which would keep the old values; write "
        "y = y + ... (a new tensor)");
  TensorImpl& target = *x.impl_ptr();
  auto before_impl = std::make_shared<TensorImpl>();  // x's value and history, another handle
  before_impl->storage = target.storage;
  before_impl->shape = target.shape;
  before_impl->strides = target.strides;
  before_impl->offset = target.offset;
  before_impl->dtype = target.dtype;
  before_impl->requires_grad = target.requires_grad;
  before_impl->grad_fn = target.grad_fn;
  const Tensor before(before_impl);
  const Tensor result = out_of_place(before);
  check_in_place_result(x, result, op);
  if (result.impl_ptr() == before_impl) return;  // an op that gave back its input: x is unchanged
  if (x.impl_ptr().use_count() != 1)  // the op kept x's own handle, which is about to change
    fail<AutogradError>(op, ": the update of the tensor of shape ", shape_str(x.shape()),
        " keeps the tensor itself for its backward (x *= x), which would read the new values; "
        "write y = x * x (a new tensor)");
  // x takes the result's place: its data, and its op as x's history
  const std::shared_ptr<Node> old_node = target.grad_fn;
  const TensorImpl& source = *result.impl_ptr();
  target.storage = source.storage;
  target.strides = source.strides;
  target.offset = source.offset;
  target.requires_grad = source.requires_grad;
  target.grad_fn = source.grad_fn;
  // x's old op now made `before`; retain_grad follows x to its new value (a result outside the
  // graph, as copy_ of a source without grad gives, has none)
  const bool retained = old_node && old_node->retains_grad_;
  if (old_node) {
    old_node->output_ = before_impl;
    old_node->retains_grad_ = false;
  }
  if (target.grad_fn) {
    target.grad_fn->output_ = x.impl_ptr();
    target.grad_fn->retains_grad_ = retained;
  }
}

Tensor make_op(std::string name, const Tensor& output, const std::vector<Tensor>& inputs,
    BackwardFn backward) {
  if (name.empty()) throw ValueError("make_op: the op needs a name");
  return detail::record_node(Op::custom, std::move(name), output, inputs, std::move(backward));
}

Tensor make_op(std::string name, const Tensor& output, const std::vector<Tensor>& inputs,
    const std::vector<Tensor>& saved, BackwardFn backward) {
  if (name.empty()) throw ValueError("make_op: the op needs a name");
  return detail::record_node(
      Op::custom, std::move(name), output, inputs, std::move(backward), saved);
}

// ---- backward -----------------------------------------------------------------------------------

namespace {

// Ops whose backward reads its gradient in any layout without copying it: permute's backward is a
// view again, and the attention kernels read each head through its row stride. Such a node keeps
// a strided gradient as it is: the (B, H, T, C) head view of a (B, T, H, C) buffer that attention's
// backward returns for a projection's heads (and that permute's backward hands to attention) goes
// through permute and reshape back to the projection without a copy.
//
// The elementwise ops and the sums read their gradient through ops that take any strides (their
// backward formulas are ops, or maps over rows with strides), so they too keep it: a sum's
// gradient, one value expanded over the summed shape (stride 0), reaches exp or relu's backward
// without being written out as a full tensor of ones first.
//
// gather's backward scatter-adds its gradient read through the gradient's strides (ops_index.cpp,
// scatter_add_along), so it too keeps any layout. contiguous's backward is the identity: it does
// not read its gradient but hands it on, to be kept or copied by the rule of whoever receives it
// (a sum's expanded gradient reaches x of x.transpose(1, 2).contiguous() through permute as one
// expanded value, written out once into x.grad instead of twice). concat's backward only narrows
// its gradient, a view of any layout; repeat_interleave's and index_select's add it up read
// through its strides (ops_shape.cpp, scatter_add_rows).
bool reads_any_gradient_layout(Op op) {
  switch (op) {
    case Op::permute:
    case Op::scaled_dot_product_attention:
    case Op::flash_attention:
    case Op::add:
    case Op::sub:
    case Op::mul:
    case Op::div:
    case Op::add_scalar:
    case Op::mul_scalar:
    case Op::div_scalar:
    case Op::rdiv_scalar:
    case Op::neg:
    case Op::pow:
    case Op::exp:
    case Op::log:
    case Op::sqrt:
    case Op::rsqrt:
    case Op::tanh:
    case Op::sigmoid:
    case Op::relu:
    case Op::gelu:
    case Op::gelu_tanh:
    case Op::silu:
    case Op::erf:
    case Op::abs:
    case Op::sin:
    case Op::cos:
    case Op::maximum:
    case Op::minimum:
    case Op::clamp:
    case Op::where:
    case Op::masked_fill:
    case Op::sum:
    case Op::mean:
    // expand's backward sums its gradient over the expanded dims (sum_to: group sums read through
    // the strides), so a sum's gradient reaches it as one expanded value, not written out first.
    case Op::expand:
    // rotary_embedding's backward (ops_rotary.cpp's rotate) walks its gradient's rows through the
    // gradient's strides, copying a row whose features are strided (a sum's stride 0) first.
    case Op::rotary_embedding:
    // layer_norm's backward (detail::gradient_rows, autograd/detail/kernels.h) reads a gradient
    // that is one row expanded over the leading dims (a sum's) from a copy of that row, and copies
    // any other non-contiguous gradient itself; rms_norm's and dropout_add_layer_norm's are
    // layer_norm's.
    case Op::layer_norm:
    case Op::rms_norm:
    case Op::dropout_add_layer_norm:
    // softmax's and log_softmax's row backward (ops_softmax.cpp) read it as layer_norm's does,
    // through gradient_rows; their other paths are composed ops, which read any layout.
    case Op::softmax:
    case Op::log_softmax:
    case Op::gather:
    // slice's backward copies its gradient into a slice of zeros through the gradient's strides
    // (copy_into: a sum's expanded gradient becomes a fill).
    case Op::slice:
    case Op::contiguous:
    // to's backward converts its gradient through the gradient's strides (a sum's: a fill).
    case Op::to:
    // linear's and linear_relu's backward (ops_matmul.cpp, linear_grads) read their gradient as
    // matmul's operands, which take any strides (a copy where BLAS cannot), and copy it for the
    // bias's column sums where its rows are not contiguous; they never write into it. So add's
    // gradient, which add hands to both of its inputs (a residual connection and the projection
    // before it), reaches the projection uncopied.
    case Op::linear:
    case Op::linear_relu:
    case Op::concat:
    case Op::repeat_interleave:
    case Op::index_select:
      return true;
    default:
      return false;
  }
}

// Adds `grad` into `slot` (a node's pending gradient or a leaf's .grad). Every gradient a backward
// function returns flows through here, so this is where a gradient of the wrong shape or dtype is
// caught. (A slice's gradient, handed on by send_slice_gradient below, is its node's own, checked
// here when the node received it.)
// A receiver that reads any layout (above) keeps a strided gradient uncopied. A node's slot is
// passed taken out of the node, so that it is the only reference when nothing else holds it.
enum class Receiver { leaf, node, node_reading_any_layout };
void accumulate(std::shared_ptr<TensorImpl>& slot, Tensor grad, const Shape& expected_shape,
    DType expected_dtype, const char* producer, std::size_t input_index, const char* receiver_name,
    Receiver receiver) {
  if (grad.shape() != expected_shape || grad.dtype() != expected_dtype)
    fail<AutogradError>("backward of '", producer, "' returned a gradient of shape ",
        shape_str(grad.shape()), " (", dtype_name(grad.dtype()), ") for its input ", input_index,
        " (", receiver_name, ") of shape ", shape_str(expected_shape), " (",
        dtype_name(expected_dtype), ")");
  if (!slot) {
    // Keep the gradient itself when nothing else can see its memory and it is a plain
    // contiguous buffer, or for a receiver that reads any layout; otherwise copy it, so that
    // accumulating into it in place later cannot write into another tensor (an identity backward
    // hands one tensor to several inputs).
    const bool exclusive = grad.impl_ptr().use_count() == 1 &&
                           grad.impl_ptr()->storage.use_count() == 1 && grad.is_contiguous() &&
                           grad.offset() == 0;
    const bool keep = exclusive || receiver == Receiver::node_reading_any_layout;
    slot = keep ? grad.impl_ptr() : clone(grad).impl_ptr();
    return;
  }
  // The second gradient and later ones. A leaf's .grad is added into in place (as PyTorch's, so
  // that a reference to it sees the sum). A node's pending gradient is added into in place where
  // the slot alone owns its memory and each of its elements is its own; otherwise (a gradient
  // that another node keeps too, a sum's expanded gradient, the caller's upstream gradient) into a
  // new tensor.
  const bool owned = slot.use_count() == 1 && slot->storage.use_count() == 1;
  const Tensor accumulated(slot);
  if (receiver == Receiver::leaf || (owned && detail::has_distinct_elements(accumulated)))
    accumulated.add_(grad);
  else
    slot = add(accumulated, grad).impl_ptr();
}

// Whether the regions of `slices` cover a tensor of `shape` once each (split's pieces): each a
// run of consecutive positions along one dim, the runs back to back from 0 to its end.
bool slices_tile(
    const std::vector<std::pair<Tensor, detail::SliceRegion>>& slices, const Shape& shape) {
  std::vector<std::pair<int64_t, int64_t>> runs;  // [start, end) along the dim
  const int64_t dim = slices.front().second.dim;
  for (const auto& [grad, region] : slices) {
    if (region.dim != dim || (region.step != 1 && region.length > 1)) return false;
    if (region.length > 0) runs.emplace_back(region.start, region.start + region.length);
  }
  std::sort(runs.begin(), runs.end());
  int64_t covered = 0;
  for (const auto& [start, end] : runs) {
    if (start != covered) return false;
    covered = end;
  }
  return covered == shape[static_cast<std::size_t>(dim)];
}

// The gradients slices of a node's output sent it (Node::pending_slices_), as one gradient of the
// whole output in `pending` (undefined until now): each written into its region of a new tensor —
// zeros first, unless the regions tile it — and added where regions overlap, in the order they
// came.
void write_pending_slices(Tensor& pending,
    std::vector<std::pair<Tensor, detail::SliceRegion>>& slices, const Shape& shape, DType dtype) {
  const bool tiled = slices_tile(slices, shape);
  Tensor whole = tiled ? empty(shape, dtype) : zeros(shape, dtype);
  for (std::size_t i = 0; i < slices.size(); ++i) {
    const Tensor region = detail::slice_region_view(whole, slices[i].second);
    if (tiled || i == 0)
      detail::copy_into(region, slices[i].first);
    else
      region.add_(slices[i].first);
  }
  slices.clear();
  pending = std::move(whole);
}

// Hands a slice's gradient `grad` to the node of the sliced tensor, with the slice's region: held
// beside any other slices' until that node runs, or, where a gradient of the node's whole output
// has come first, added into its region there (in place where that gradient is the node's own,
// as accumulate below).
void send_slice_gradient(Tensor& pending,
    std::vector<std::pair<Tensor, detail::SliceRegion>>& slices, Tensor grad,
    const detail::SliceRegion& region) {
  if (!pending.defined()) {
    slices.emplace_back(std::move(grad), region);
    return;
  }
  Tensor whole = std::move(pending);
  const bool owned = whole.impl_ptr().use_count() == 1 &&
                     whole.impl_ptr()->storage.use_count() == 1 &&
                     detail::has_distinct_elements(whole);
  if (!owned) whole = clone(whole);
  detail::slice_region_view(whole, region).add_(grad);
  pending = std::move(whole);
}

// Runs the hooks registered on a tensor (Tensor::register_hook) on its gradient `grad`, each on
// the previous one's result; a hook that returns a defined tensor replaces the gradient.
Tensor run_hooks(const std::vector<GradHookEntry>& registered, Tensor grad, const Shape& shape,
    DType dtype, const char* tensor_kind) {
  const std::vector<GradHookEntry> hooks = registered;  // a hook may remove itself (or others)
  for (const GradHookEntry& hook : hooks) {
    Tensor replaced = hook.fn(grad);
    if (!replaced.defined()) continue;
    if (replaced.shape() != shape || replaced.dtype() != dtype)
      fail<AutogradError>("register_hook: a hook on ", tensor_kind, " of shape ", shape_str(shape),
          " (", dtype_name(dtype), ") returned a gradient of shape ", shape_str(replaced.shape()),
          " (", dtype_name(replaced.dtype()), ")");
    grad = std::move(replaced);
  }
  return grad;
}

// Runs a leaf's post-accumulate-grad hooks (Tensor::register_post_accumulate_grad_hook).
void run_post_accumulate_hooks(const std::shared_ptr<TensorImpl>& leaf) {
  if (leaf->post_accumulate_grad_hooks.empty()) return;
  const std::vector<PostAccumulateGradHookEntry> hooks = leaf->post_accumulate_grad_hooks;
  const Tensor tensor(leaf);
  for (const PostAccumulateGradHookEntry& hook : hooks) hook.fn(tensor);
}

}  // namespace

void run_backward(const Tensor& root, const Tensor& grad, bool retain_graph) {
  if (!root.requires_grad())
    fail<AutogradError>("backward: the tensor of shape ", shape_str(root.shape()),
        " does not require grad and has no grad_fn");
  Tensor seed;
  if (grad.defined()) {
    if (grad.shape() != root.shape() || grad.dtype() != root.dtype())
      fail<AutogradError>("backward: gradient of shape ", shape_str(grad.shape()), " (",
          dtype_name(grad.dtype()), ") for a tensor of shape ", shape_str(root.shape()), " (",
          dtype_name(root.dtype()), ")");
    seed = grad.detach();
  } else {
    if (root.numel() != 1)
      fail<AutogradError>("backward: a tensor of shape ", shape_str(root.shape()),
          " is not a scalar; pass the upstream gradient explicitly");
    seed = ones(root.shape(), root.dtype());
  }
  NoGradGuard no_grad;  // backward functions record nothing

  // Callbacks queued during this pass (queue_backward_callback) run once it has finished; an
  // enclosing pass (a hook may call backward) keeps its own.
  std::vector<std::function<void()>> callbacks;
  struct CallbackQueueScope {
    std::vector<std::function<void()>>* enclosing = queued_backward_callbacks;
    explicit CallbackQueueScope(std::vector<std::function<void()>>* queue) {
      queued_backward_callbacks = queue;
    }
    ~CallbackQueueScope() { queued_backward_callbacks = enclosing; }
  } callback_queue_scope(&callbacks);
  auto run_queued_callbacks = [&callbacks] {
    for (std::size_t i = 0; i < callbacks.size(); ++i) {  // a callback may queue another
      std::function<void()> callback = std::move(callbacks[i]);
      callback();
    }
  };

  if (root.is_leaf()) {
    TensorImpl& leaf = *root.impl_ptr();
    if (!leaf.grad_hooks.empty())
      seed = run_hooks(leaf.grad_hooks, std::move(seed), leaf.shape, leaf.dtype, "a leaf");
    accumulate(leaf.grad, seed, root.shape(), root.dtype(), "backward", 0, "leaf", Receiver::leaf);
    run_post_accumulate_hooks(root.impl_ptr());
    run_queued_callbacks();
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
  std::sort(nodes.begin(), nodes.end(),
      [](const auto& a, const auto& b) { return a->sequence_nr() > b->sequence_nr(); });

  // Leaves with post-accumulate-grad hooks: the position in `nodes` of the last node with an edge
  // to each, after which its .grad is complete for this pass (found only if such leaves exist).
  std::unordered_map<TensorImpl*, std::size_t> last_sender;
  for (std::size_t n = 0; n < nodes.size(); ++n)
    for (const Edge& edge : nodes[n]->inputs())
      if (edge.leaf && !edge.leaf->post_accumulate_grad_hooks.empty())
        last_sender[edge.leaf.get()] = n;
  std::unordered_set<TensorImpl*> received;  // of those, the ones this pass sent a gradient

  // Leaves with hooks collect their gradient here first, in the order backward first reaches
  // them, so that each hook sees the leaf's whole gradient once, after the last node has run.
  std::vector<std::pair<std::shared_ptr<TensorImpl>, std::shared_ptr<TensorImpl>>> hooked_leaves;

  // Runs `node`'s backward function on its gradient and adds each gradient it returns into the
  // input's: a node's pending gradient, or a leaf's .grad (through its hooks, at the end, if it
  // has any).
  auto run_backward_function = [&](Node& node, Tensor grad_output) {
    std::vector<bool> flags;
    flags.reserve(node.inputs().size());
    for (const Edge& edge : node.inputs()) flags.push_back(edge.needs_grad());
    Grads grads = node.backward_(grad_output, NeedsGrad(std::move(flags)));
    if (grads.size() != node.inputs().size())
      fail<AutogradError>("backward of '", node.name(), "' returned ", grads.size(),
          " gradients for ", node.inputs().size(), " inputs");
    for (const BackwardObserver& observer : backward_observers) observer(node, grad_output, grads);
    if (anomaly_mode_enabled) [[unlikely]]
      check_backward_anomaly(node, grads);
    grad_output = Tensor();  // so a gradient passed through unchanged can be kept, not copied
    for (std::size_t i = 0; i < grads.size(); ++i) {
      const Edge& edge = node.inputs()[i];
      if (!edge.needs_grad() || !grads[i].defined()) continue;
      if (edge.node) {
        if (!edge.node->pending_slices_.empty())  // slices' gradients came first
          write_pending_slices(edge.node->pending_grad_, edge.node->pending_slices_,
              edge.node->output_shape(), edge.node->output_dtype());
        std::shared_ptr<TensorImpl> slot =
            edge.node->pending_grad_.defined() ? edge.node->pending_grad_.impl_ptr() : nullptr;
        edge.node->pending_grad_ = Tensor();
        accumulate(slot, std::move(grads[i]), edge.node->output_shape(), edge.node->output_dtype(),
            node.name(), i, edge.node->name(),
            reads_any_gradient_layout(edge.node->op()) ? Receiver::node_reading_any_layout
                                                       : Receiver::node);
        edge.node->pending_grad_ = Tensor(slot);
      } else if (edge.leaf->grad_hooks.empty()) {
        accumulate(edge.leaf->grad, std::move(grads[i]), edge.leaf->shape, edge.leaf->dtype,
            node.name(), i, "leaf", Receiver::leaf);
        if (!last_sender.empty()) received.insert(edge.leaf.get());
      } else {
        auto hooked = std::find_if(hooked_leaves.begin(), hooked_leaves.end(),
            [&](const auto& entry) { return entry.first == edge.leaf; });
        if (hooked == hooked_leaves.end())
          hooked = hooked_leaves.insert(hooked_leaves.end(), {edge.leaf, nullptr});
        accumulate(hooked->second, std::move(grads[i]), edge.leaf->shape, edge.leaf->dtype,
            node.name(), i, "leaf", Receiver::leaf);
      }
    }
  };

  root.grad_fn()->pending_grad_ = std::move(seed);
  try {
    for (std::size_t n = 0; n < nodes.size(); ++n) {
      const std::shared_ptr<Node>& node = nodes[n];
      if (!node->pending_slices_.empty()) {
        // Slices' gradients, written out as one: the time of slice's backward in a profile.
        const profiler::detail::BackwardScope profile_scope(Op::slice);
        write_pending_slices(
            node->pending_grad_, node->pending_slices_, node->output_shape(), node->output_dtype());
      }
      Tensor grad_output = std::move(node->pending_grad_);
      node->pending_grad_ = Tensor();
      if (grad_output.defined()) {
        if (node->released_)
          fail<AutogradError>("backward: the graph through '", node->name(),
              "' was already freed by an earlier backward(); call the first backward with "
              "retain_graph=true to backpropagate through it twice");
        if (!node->backward_)
          fail<AutogradError>("backward: op '", node->name(), "' (output shape ",
              shape_str(node->output_shape()), ") has no backward function");
        node->check_saved_versions();
        if (!node->grad_hooks_.empty()) {
          const std::string tensor_kind = std::string("the output of '") + node->name() + "'";
          grad_output = run_hooks(node->grad_hooks_, std::move(grad_output), node->output_shape(),
              node->output_dtype(), tensor_kind.c_str());
        }
        if (node->retains_grad_) {  // Tensor::retain_grad: a copy kept in the output's .grad
          if (const std::shared_ptr<TensorImpl> output = node->output_.lock())
            accumulate(output->grad, grad_output, node->output_shape(), node->output_dtype(),
                "retain_grad", 0, "retained output", Receiver::leaf);
        }
        // While a profile records, the node's backward and the adding of its gradients into its
        // inputs' are one scope, "<op>_backward" (autograd/profiler.h).
        const profiler::detail::BackwardScope profile_scope(*node);
        const Edge* sliced = node->slice_region_ ? &node->inputs().front() : nullptr;
        if (sliced && sliced->node && backward_observers.empty() && !anomaly_mode_enabled) {
          // slice's backward, its zeros left out: the gradient goes to the sliced node, to be
          // written into the region (Node::slice_region_). (Observers and anomaly mode see the
          // backward function's gradient of the whole input instead.)
          send_slice_gradient(sliced->node->pending_grad_, sliced->node->pending_slices_,
              std::move(grad_output), *node->slice_region_);
        } else {
          run_backward_function(*node, std::move(grad_output));
        }
      }
      if (!last_sender.empty()) {
        // A leaf whose last sender this node was has its whole gradient now (unless gradient
        // hooks defer its accumulation to the end of the pass).
        for (const Edge& edge : node->inputs()) {
          auto last = edge.leaf ? last_sender.find(edge.leaf.get()) : last_sender.end();
          if (last == last_sender.end() || last->second != n) continue;
          last_sender.erase(last);  // once, even if the node uses the leaf twice (x * x)
          if (received.count(edge.leaf.get())) run_post_accumulate_hooks(edge.leaf);
        }
      }
      if (!retain_graph) {
        // Free what the graph holds: saved tensors (in the backward function) and the edges.
        node->backward_ = nullptr;
        node->saved_.clear();
        node->inputs_.clear();
        node->released_ = true;
      }
    }
    for (auto& [leaf, grad] : hooked_leaves) {
      Tensor hooked =
          run_hooks(leaf->grad_hooks, Tensor(std::move(grad)), leaf->shape, leaf->dtype, "a leaf");
      accumulate(leaf->grad, std::move(hooked), leaf->shape, leaf->dtype, "register_hook", 0,
          "leaf", Receiver::leaf);
      run_post_accumulate_hooks(leaf);
    }
    run_queued_callbacks();
  } catch (...) {
    for (const std::shared_ptr<Node>& node : nodes) {
      node->pending_grad_ = Tensor();
      node->pending_slices_.clear();
    }
    throw;
  }
}

}  // namespace ag
