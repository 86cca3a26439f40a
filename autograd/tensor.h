// ag::Tensor — an n-dimensional array of float32, float64, int64 or bool (autograd/dtype.h) with
// reverse-mode autograd.
//
// A Tensor is a cheap handle (one shared_ptr) to a TensorImpl: shape, strides and an offset into a
// Storage that views share. Ops are free functions in autograd/ops.h; the methods below are the
// same ops spelled as methods, as in PyTorch (x.reshape(...), x.sum({1}), x.transpose(0, 1)).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "autograd/dtype.h"
#include "autograd/error.h"
#include "autograd/generator.h"
#include "autograd/indexing.h"

namespace ag {

using Shape = std::vector<int64_t>;

class Node;
class Tensor;
struct ValuesIndices;  // what x.max(dim) returns (below the class)

// A gradient hook (see Tensor::register_hook): called with the gradient of a tensor; a defined
// return value replaces that gradient, an undefined one (Tensor()) leaves it as it is.
using GradHook = std::function<Tensor(const Tensor& grad)>;
struct GradHookEntry {
  uint64_t id;  // what a HookHandle removes it by
  GradHook fn;
};
// A post-accumulate-grad hook (see Tensor::register_post_accumulate_grad_hook): called with the
// leaf itself once backward has finished adding to its .grad.
using PostAccumulateGradHook = std::function<void(const Tensor& leaf)>;
struct PostAccumulateGradHookEntry {
  uint64_t id;  // what a HookHandle removes it by
  PostAccumulateGradHook fn;
};

// A flat, 64-byte aligned buffer. Views of a tensor share one Storage, and with it the version
// counter of its data: every in-place write through any of them bumps it (PyTorch's `_version`),
// so that backward can tell that a tensor an op saved was changed since (see autograd/autograd.h).
class Storage {
 public:
  explicit Storage(std::size_t nbytes);
  // Memory ag does not own (a NumPy array's, lent through the Python binding; see from_blob):
  // `release` runs once, when the last view of it is gone, and must not throw.
  Storage(void* data, std::size_t nbytes, std::function<void()> release);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  std::size_t nbytes() const { return nbytes_; }
  uint64_t version() const { return version_.load(std::memory_order_relaxed); }
  void bump_version() { version_.fetch_add(1, std::memory_order_relaxed); }

 private:
  void* data_ = nullptr;
  std::size_t nbytes_ = 0;
  std::function<void()> release_;  // set for borrowed memory, which the allocator never sees
  std::atomic<uint64_t> version_{0};
};

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  Shape shape;
  Shape strides;       // in elements, one per dim
  int64_t offset = 0;  // in elements, from the start of storage
  DType dtype = DType::float32;

  bool requires_grad = false;
  std::shared_ptr<Node> grad_fn;          // the op that produced this tensor (null for leaves)
  std::shared_ptr<TensorImpl> grad;       // accumulated gradient of a leaf
  std::string name;                       // optional label: parameter names, graph dumps
  std::vector<GradHookEntry> grad_hooks;  // hooks of a leaf (an op output's live in its grad_fn)
  std::vector<PostAccumulateGradHookEntry> post_accumulate_grad_hooks;  // leaves only
};

// Returned by Tensor::register_hook and register_post_accumulate_grad_hook; remove() unregisters the hook (a no-op if it is already
// removed or its tensor is gone). Dropping the handle keeps the hook.
class HookHandle {
 public:
  HookHandle() = default;
  void remove();
  // Whether the hook is still registered.
  bool active() const;

 private:
  friend class Tensor;
  std::weak_ptr<TensorImpl> leaf_;  // the leaf that holds the hook, or
  std::weak_ptr<Node> node_;        // the grad_fn of the op output that holds it
  uint64_t id_ = 0;
  bool post_accumulate_ = false;  // a leaf's post-accumulate-grad hook, not a gradient hook
};

class Tensor {
 public:
  Tensor() = default;  // an undefined tensor (no data); defined() is false
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}
  Tensor(const Tensor&) = default;
  Tensor(Tensor&&) noexcept = default;
  // Assignment rebinds a handle, so only a named one can be assigned: `p.grad() = g` or
  // `x.view({-1}) = y` would change a temporary handle and nothing else, silently — they do not
  // compile (use p.set_grad(g), y.copy_ into a view).
  Tensor& operator=(const Tensor&) & = default;
  Tensor& operator=(Tensor&&) & noexcept = default;

  bool defined() const { return impl_ != nullptr; }

  // ---- metadata ----------------------------------------------------------------------------
  const Shape& shape() const { return impl().shape; }
  const Shape& strides() const { return impl().strides; }
  int64_t offset() const { return impl().offset; }
  DType dtype() const { return impl().dtype; }
  int64_t dim() const { return static_cast<int64_t>(impl().shape.size()); }
  int64_t size(int64_t dim) const;  // negative dims count from the end
  int64_t numel() const;
  bool is_contiguous() const;
  bool shares_storage(const Tensor& other) const;

  // Pointer to the first element. T must match the dtype (checked): float, double, int64_t, bool.
  template <class T>
  T* data() const;
  void* raw_data() const;

  // ---- values ------------------------------------------------------------------------------
  // The value of a one-element tensor, and all elements in row-major order, as T = double, float,
  // int64_t or bool. Between integers and floating point the value must survive the trip: an
  // int64 beyond what T holds exactly (2^53 for double, 2^24 for float), or a float that is not an
  // integer in int64's range, is a ValueError — x.item<int64_t>() reads a token id exactly.
  // (float64 to float rounds, as it always did; anything to bool is `!= 0`.)
  template <class T = double>
  T item() const;
  template <class T = double>
  std::vector<T> to_vector() const;
  std::string str() const;  // as PyTorch prints it: tensor([[0.1000, 0.2000]])

  // ---- autograd ----------------------------------------------------------------------------
  bool requires_grad() const { return impl().requires_grad; }
  // Marks a leaf as a parameter to differentiate with respect to. Returns *this. Only float32 and
  // float64 tensors can require grad (an AutogradError for int64 and bool, as in PyTorch).
  Tensor& requires_grad_(bool requires_grad = true);
  bool is_leaf() const { return impl().grad_fn == nullptr; }
  const std::shared_ptr<Node>& grad_fn() const { return impl().grad_fn; }
  // The gradient accumulated by backward() (undefined until the first backward reaches it).
  Tensor grad() const;
  // Like the in-place updates below these are const: they change what the handle points to.
  void set_grad(const Tensor& grad) const;
  // Drops the accumulated gradient.
  void zero_grad() const;
  // Backpropagates from this tensor. Without `grad` the tensor must hold one element (the
  // upstream gradient is 1); otherwise `grad` has this tensor's shape. The graph is freed unless
  // retain_graph is true.
  void backward(const Tensor& grad = Tensor(), bool retain_graph = false) const;
  // The same data, cut from the graph: no grad_fn, requires_grad false.
  Tensor detach() const;
  // Registers `hook`, as PyTorch's Tensor.register_hook: during backward it is called with the
  // gradient of this tensor once that gradient is complete (summed over every use), and a defined
  // tensor it returns replaces the gradient — it must have this tensor's shape and dtype, or
  // backward throws an AutogradError naming register_hook and both shapes. Return Tensor() to only
  // look. Hooks run in the order they were registered, each on the previous one's result, with
  // grad mode off.
  //   - On a leaf, the hook runs before the gradient is added to .grad, once per backward() with
  //     the sum of everything that reached the leaf in that pass.
  //   - On an op output (a tensor with a grad_fn), it runs before the op's backward, so a
  //     replaced gradient flows on to the op's inputs.
  // As PyTorch's, a hook must not write its argument in place: the gradient may be another
  // tensor's too (an identity backward's, the caller's upstream gradient) or an expanded view of
  // one value (a sum's); return the changed gradient instead.
  // The tensor must require grad (AutogradError otherwise). Hooks of an op output live as long as
  // its grad_fn; those of a leaf as long as the leaf.
  //   HookHandle h = x.register_hook([](const Tensor& g) { return g * 2.0; });  // doubles x's grad
  //   h.remove();
  HookHandle register_hook(GradHook hook) const;
  // Keeps the gradient of an op output in its .grad, as PyTorch's Tensor.retain_grad: makemore's
  // manual backprop checks each intermediate's gradient against the one backward computed. The
  // gradient is the one after the tensor's hooks (as in PyTorch 2), accumulated over backward
  // passes as a leaf's is. On a leaf it does nothing (a leaf keeps its gradient anyway); on a
  // tensor that does not require grad it is an AutogradError.
  void retain_grad() const;
  // Whether backward keeps this tensor's gradient in .grad: true after retain_grad on an op
  // output, false for a leaf (as in PyTorch).
  bool retains_grad() const;
  // Registers `hook`, as PyTorch's Tensor.register_post_accumulate_grad_hook: on a leaf that
  // requires grad (AutogradError otherwise), it is called with the leaf once a backward pass has
  // added everything that pass sends it to .grad — as soon as the last op that uses the leaf has
  // run its backward, while backward goes on with the rest of the graph. A pass that sends the
  // leaf no gradient does not call it. This is what lets data-parallel training start averaging
  // a layer's gradients while backward is still computing those of the layers before it
  // (ag::dist::DistributedDataParallel). Runs with grad mode off; may read and write leaf.grad().
  //   w.register_post_accumulate_grad_hook([](const Tensor& w) { w.grad().mul_(0.5); });
  HookHandle register_post_accumulate_grad_hook(PostAccumulateGradHook hook) const;

  const std::string& name() const { return impl().name; }
  Tensor& set_name(std::string name);

  // ---- in-place updates (not differentiable; e.g. optimizer steps under NoGradGuard) --------
  // Like PyTorch's, they are const: they change the data a handle points to, not the handle.
  // Each one bumps the version of the tensor's storage, also under NoGradGuard (see version()),
  // and each refuses, with a ValueError naming it and the shape and strides, a tensor in which
  // several elements are one memory location (a stride-0 dim of size > 1, as expand() makes),
  // as PyTorch does: x.expand({4}).add_(1) would add 1 four times to the same element.
  const Tensor& fill_(double value) const;
  const Tensor& zero_() const { return fill_(0.0); }
  const Tensor& copy_(const Tensor& source) const;  // source broadcasts to this shape
  const Tensor& add_(const Tensor& other, double alpha = 1) const;  // this += alpha * other
  const Tensor& mul_(double factor) const;                          // this *= factor
  // Points this tensor at source's data — its storage, strides, offset and dtype — so that every
  // handle to this tensor sees the new values (PyTorch's `param.data = source`; nn::Module::to
  // converts parameters with it). The shapes must be equal (ShapeError otherwise). Gradient,
  // requires_grad, grad_fn and name stay as they are.
  void set_data(const Tensor& source) const;
  // How many in-place writes the tensor's storage has had (PyTorch's `_version`); views share it.
  // An op that saves a tensor for its backward remembers its version, and backward throws an
  // AutogradError if the tensor was written in place since:
  //   y = x * w;  x.mul_(2);  y.backward();  // AutogradError: 'mul' saved a tensor ... modified
  uint64_t version() const { return impl().storage->version(); }
  // Marks the data as written in place: code that writes through data<T>() into a tensor that
  // others may have saved (an optimizer's step) calls it, as the methods above do.
  void bump_version() const { impl().storage->bump_version(); }

  // ---- ops as methods (see autograd/ops.h) --------------------------------------------------
  Tensor reshape(const Shape& shape) const;
  Tensor view(const Shape& shape) const;
  Tensor permute(const Shape& dims) const;
  Tensor transpose(int64_t dim0, int64_t dim1) const;
  Tensor squeeze() const;
  Tensor squeeze(int64_t dim) const;
  Tensor unsqueeze(int64_t dim) const;
  Tensor expand(const Shape& shape) const;
  Tensor slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1) const;
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  Tensor select(int64_t dim, int64_t index) const;
  // Python's x[...], as libtorch's: x.index({Slice(), -1}) is x[:, -1] (autograd/indexing.h).
  Tensor index(std::initializer_list<TensorIndex> indices) const;
  Tensor index(const std::vector<TensorIndex>& indices) const;  // the Python binding's x[...]
  Tensor contiguous() const;
  Tensor clone() const;
  // A copy converted to `dtype` (the tensor itself if it already has that dtype), as PyTorch's:
  // floating point to int64 truncates toward zero, anything to bool is `!= 0`, bool to a number
  // is 0 or 1, int64 to floating point rounds to the nearest. A NaN, an infinity or a value
  // beyond int64's range converted to int64 (where PyTorch gives an undefined number) is a
  // ValueError naming the value. Differentiable between float32 and float64, as PyTorch's (the
  // gradient is converted back); converting a tensor that requires grad to int64 or bool while
  // grad mode is on is an error (PyTorch's result would silently stop requiring grad).
  Tensor to(DType dtype) const;

  Tensor sum() const;
  Tensor sum(const Shape& dims, bool keepdim = false) const;
  Tensor sum(int64_t dim, bool keepdim = false) const;  // x.sum(-1); {…} is a list of dims
  Tensor sum(std::initializer_list<int64_t> dims, bool keepdim = false) const;
  Tensor mean() const;
  Tensor mean(const Shape& dims, bool keepdim = false) const;
  Tensor mean(int64_t dim, bool keepdim = false) const;
  Tensor mean(std::initializer_list<int64_t> dims, bool keepdim = false) const;
  Tensor max() const;
  Tensor max(const Shape& dims, bool keepdim = false) const;
  Tensor max(std::initializer_list<int64_t> dims, bool keepdim = false) const;
  // x.max(-1) as PyTorch's: the values and the indices (ag::max, autograd/ops.h).
  ValuesIndices max(int64_t dim, bool keepdim = false) const;
  Tensor min() const;
  ValuesIndices min(int64_t dim, bool keepdim = false) const;
  Tensor var(const Shape& dims, int64_t correction = 1, bool keepdim = false) const;

  Tensor exp() const;
  Tensor log() const;
  Tensor sqrt() const;
  Tensor tanh() const;
  Tensor sigmoid() const;
  Tensor relu() const;
  Tensor pow(double exponent) const;
  Tensor softmax(int64_t dim) const;
  Tensor log_softmax(int64_t dim) const;
  Tensor matmul(const Tensor& other) const;

  // What makes two handles one tensor (libtorch's is_same; Python's id): equal for copies of a
  // handle, such as a tied parameter under two names; different for two views of one storage.
  const void* identity() const { return impl_.get(); }
  bool is_same(const Tensor& other) const { return impl_ == other.impl_; }

  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }

 private:
  TensorImpl& impl() const;
  std::shared_ptr<TensorImpl> impl_;
};

// torch.max(x, dim)'s pair: the values and the index of each (ag::max and ag::min, ops.h).
struct ValuesIndices {
  Tensor values, indices;
};

std::ostream& operator<<(std::ostream& out, const Tensor& tensor);

// ---- creation ---------------------------------------------------------------------------------
// Every creation function takes a dtype: float32 unless given (also for integer values, as ag's
// arange(5) always was — pass ag::int64 for token ids and positions).
Tensor empty(const Shape& shape, DType dtype = float32);  // uninitialised
Tensor zeros(const Shape& shape, DType dtype = float32);
Tensor ones(const Shape& shape, DType dtype = float32);
// For int64 the value must be an integer in range, for bool it is `value != 0`.
Tensor full(const Shape& shape, double value, DType dtype = float32);
Tensor zeros_like(const Tensor& like);  // like's shape and dtype
Tensor ones_like(const Tensor& like);
Tensor full_like(const Tensor& like, double value);
// The n × m identity (m = n by default), torch.eye.
Tensor eye(int64_t n, std::optional<int64_t> m = std::nullopt, DType dtype = float32);
// `steps` values from start to end, evenly spaced, both ends included (torch.linspace): steps 1
// gives [start]; a negative steps or a non-finite end is a ValueError.
Tensor linspace(double start, double end, int64_t steps, DType dtype = float32);
// 0, 1, ..., end-1 and start, start+step, ... (< end for step > 0, > end for step < 0). In int64
// (arange(T, ag::int64): positions) start, end and step must be integers.
Tensor arange(double end, DType dtype = float32);
Tensor arange(double start, double end, double step = 1, DType dtype = float32);
// A tensor holding `values` (row-major) with `shape`; numel(shape) must equal values.size().
// A braced list is doubles, float32 by default: tensor({1, 2, 3}, {3}) is float32, and
// tensor({1, 2, 3}, {3}, ag::int64) int64. A std::vector<int64_t> (or of bool, of float) makes a
// tensor of its own dtype unless another is given — token ids stay exact:
//   std::vector<int64_t> ids = vocab.encode(text);  Tensor x = ag::tensor(ids);  // int64, (N,)
// Values that the dtype cannot hold exactly (an id past 2^24 into float32, 0.5 into int64) are a
// ValueError.
Tensor tensor(const std::vector<double>& values, const Shape& shape, DType dtype = float32);
// (Templates so that a braced list like tensor({1.0, 2.0}, {2}) picks the double overload.)
template <class V>
concept TensorElement =
    std::is_same_v<V, float> || std::is_same_v<V, int64_t> || std::is_same_v<V, bool>;
template <TensorElement V>
Tensor tensor(const std::vector<V>& values, const Shape& shape, DType dtype = dtype_of<V>);
template <TensorElement V>
Tensor tensor(const std::vector<V>& values, DType dtype = dtype_of<V>);  // 1-D
// A 1-D tensor of the values.
Tensor tensor(const std::vector<double>& values, DType dtype = float32);
Tensor scalar_tensor(double value, DType dtype = float32);  // 0-dimensional

// A tensor over memory that someone else owns (libtorch's from_blob): `data` holds the elements
// at `strides` (in elements, none negative) from it, and `release` runs once when the last view of
// the tensor is gone — the Python binding's ag.from_numpy lends a NumPy array's buffer this way,
// without a copy. `nbytes` is the size of the memory; an element beyond it is a ShapeError. An
// empty `release` gives nothing back (the caller keeps the memory alive longer than the tensor).
Tensor from_blob(void* data, std::size_t nbytes, const Shape& shape, const Shape& strides,
    DType dtype, std::function<void()> release);

// ---- random (seeded; see autograd/generator.h) -------------------------------------------------
Tensor rand(const Shape& shape, Generator& generator, DType dtype = float32);  // U[0, 1)
Tensor rand(const Shape& shape, DType dtype = float32);
Tensor randn(const Shape& shape, Generator& generator, DType dtype = float32);  // N(0, 1)
Tensor randn(const Shape& shape, DType dtype = float32);
Tensor uniform(const Shape& shape, double low, double high, Generator& generator,
    DType dtype = float32);  // U[low, high)
Tensor uniform(const Shape& shape, double low, double high, DType dtype = float32);
// Each element 1 with probability p, else 0.
Tensor bernoulli(const Shape& shape, double p, Generator& generator, DType dtype = float32);
Tensor bernoulli(const Shape& shape, double p, DType dtype = float32);
// torch.randint(low, high, shape): integers drawn uniformly from [low, high), int64 by default
// (float32 and float64 take them too). low < high, else a ValueError.
Tensor randint(
    int64_t low, int64_t high, const Shape& shape, Generator& generator, DType dtype = int64);
Tensor randint(int64_t low, int64_t high, const Shape& shape, DType dtype = int64);
// torch.randperm(n): the integers 0 … n − 1 in an order drawn uniformly (Fisher–Yates), int64
// by default (float32 and float64 hold them too, up to 2^24 and 2^53). n ≥ 0, else a ValueError.
Tensor randperm(int64_t n, Generator& generator, DType dtype = int64);
Tensor randperm(int64_t n, DType dtype = int64);

// ---- helpers ------------------------------------------------------------------------------------
// The number of elements of the shape of a tensor that exists (its sizes are known to be valid).
int64_t numel(const Shape& shape);
// The number of elements of a shape built from user numbers: a ShapeError naming `op` and the shape
// for a negative size, or for nonzero sizes that multiply to more than INT64_MAX (then neither the
// count nor the strides of the shape fit in int64). Every op that makes a new shape checks it here.
int64_t checked_numel(const Shape& shape, const char* op);
Shape contiguous_strides(const Shape& shape);
// Wraps a possibly negative dim into [0, ndim); throws ShapeError naming `op` if out of range.
int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op);

namespace detail {
// How many Storage buffers this process has allocated so far (tests use it to prove that an op
// made no copy; benchmarks to count allocations per training step).
uint64_t storage_allocation_count();
}  // namespace detail

}  // namespace ag
