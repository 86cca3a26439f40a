// x.index({...}): Python's basic indexing, as select, slice and unsqueeze views (indexing.h).
#include "autograd/indexing.h"

#include <span>
#include <vector>

#include "autograd/ops.h"
#include "autograd/tensor.h"

namespace ag {

std::string TensorIndex::str() const {
  auto end = [](const std::optional<int64_t>& v) { return v ? std::to_string(*v) : "None"; };
  if (is_integer()) return std::to_string(integer());
  if (is_none()) return "None";
  if (is_ellipsis()) return "...";
  return end(slice().start) + ":" + end(slice().stop) + ":" + std::to_string(slice().step);
}

namespace {
std::string entries_str(std::span<const TensorIndex> indices) {
  std::string s = "{";
  for (const TensorIndex& index : indices) s += (s.size() > 1 ? ", " : "") + index.str();
  return s + "}";
}
}  // namespace

Tensor Tensor::index(std::initializer_list<TensorIndex> indices) const {
  return index(std::vector<TensorIndex>(indices));
}

Tensor Tensor::index(const std::vector<TensorIndex>& indices) const {
  // How many of x's dims the entries name: integers and slices one each; None adds a dim and
  // names none; an Ellipsis stands for the dims left over.
  int64_t named = 0, ellipses = 0;
  for (const TensorIndex& index : indices) {
    if (index.is_integer() || index.is_slice()) ++named;
    if (index.is_ellipsis()) ++ellipses;
  }
  if (ellipses > 1)
    fail<ShapeError>("index: ", entries_str(indices), " has more than one Ellipsis (shape ",
        shape_str(shape()), ")");
  if (named > dim())
    fail<ShapeError>("index: ", entries_str(indices), " names ", named, " dims of a tensor of ",
        dim(), " (shape ", shape_str(shape()), ")");

  // Walk the entries over x's dims; `at` is the dim of `out` the next entry applies to.
  Tensor out = *this;
  int64_t at = 0;
  for (const TensorIndex& index : indices) {
    if (index.is_integer()) {
      const int64_t size = out.size(at);
      if (index.integer() < -size || index.integer() >= size)
        fail<ShapeError>("index: ", index.str(), " in ", entries_str(indices),
            " is out of range for dim ", at, " of size ", size, " (shape ", shape_str(shape()),
            ")");
      out = ag::select(out, at, index.integer());  // the dim goes away
    } else if (index.is_slice()) {
      const Slice& s = index.slice();
      if (s.step <= 0)
        fail<ShapeError>("index: ", index.str(), " in ", entries_str(indices), " has step ", s.step,
            "; a step must be positive (shape ", shape_str(shape()), ")");
      out = ag::slice(out, at, s.start.value_or(0), s.stop.value_or(INT64_MAX), s.step);
      ++at;
    } else if (index.is_none()) {
      out = ag::unsqueeze(out, at);
      ++at;
    } else {  // Ellipsis: skip the dims no entry names
      at += dim() - named;
    }
  }
  return out;
}

}  // namespace ag
