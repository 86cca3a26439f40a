// Python's x[...] for ag tensors, as libtorch spells it: x.index({Slice(), -1}) is x[:, -1].
//
//   x.index({0})                     x[0]          select dim 0 (negative counts from the end)
//   x.index({Slice(), -1})           x[:, -1]      every row, last column: the dim goes away
//   x.index({Slice(1, None), 0})     x[1:, 0]
//   x.index({Slice(None, None, 2)})  x[::2]
//   x.index({Ellipsis, -1})          x[..., -1]    the dims before it left whole
//   x.index({None, Slice()})         x[None, :]    a new dim of size 1 (unsqueeze)
//
// Each entry is an integer, a Slice(start, stop, step) (start and stop may be None and follow
// Python's clamping, step must be positive), None or Ellipsis. The result is a view of x
// (select, slice, unsqueeze), and differentiable as those are. Errors are ShapeErrors starting
// "index:" that name the entry and the shape: more entries than dims, two Ellipses, an integer out
// of range.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <variant>

namespace ag {

// Python's None: an open end of a Slice, or, as an index entry, a new dim of size 1.
inline constexpr std::nullopt_t None = std::nullopt;

// Python's `...`: as many whole dims as the other entries leave.
struct EllipsisIndex {};
inline constexpr EllipsisIndex Ellipsis{};

// start:stop:step; None for an end means "from the start" / "to the end".
struct Slice {
  Slice(std::optional<int64_t> start = None, std::optional<int64_t> stop = None, int64_t step = 1)
      : start(start), stop(stop), step(step) {}
  std::optional<int64_t> start, stop;
  int64_t step;
};

// One entry of x.index({...}).
class TensorIndex {
 public:
  TensorIndex(int64_t integer) : entry_(integer) {}  // NOLINT: implicit, as libtorch's
  TensorIndex(int integer) : entry_(int64_t{integer}) {}
  TensorIndex(Slice slice) : entry_(slice) {}
  TensorIndex(std::nullopt_t) : entry_(NewDim{}) {}
  TensorIndex(EllipsisIndex) : entry_(EllipsisIndex{}) {}

  bool is_integer() const { return std::holds_alternative<int64_t>(entry_); }
  bool is_slice() const { return std::holds_alternative<Slice>(entry_); }
  bool is_none() const { return std::holds_alternative<NewDim>(entry_); }
  bool is_ellipsis() const { return std::holds_alternative<EllipsisIndex>(entry_); }
  int64_t integer() const { return std::get<int64_t>(entry_); }
  const Slice& slice() const { return std::get<Slice>(entry_); }
  // As Python writes it: "-1", "1:None:2", "None", "...".
  std::string str() const;

 private:
  struct NewDim {};
  std::variant<int64_t, Slice, NewDim, EllipsisIndex> entry_;
};

}  // namespace ag
