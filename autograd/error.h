// ag's exception family.
//
// Every error that user input can trigger is an exception derived from ag::Error, and its message
// names the op and the full shapes involved, e.g.
//   matmul: shapes [2,3] and [4,5] cannot be multiplied (3 != 4)
// `assert` is only used for ag's own internal invariants, never for user input.
#pragma once

#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace ag {

// Base of every exception ag throws on bad input or misuse.
class Error : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// Shapes that do not fit the op: broadcasting, matmul, reshape, out-of-range dims or indices.
class ShapeError : public Error {
 public:
  using Error::Error;
};

// Mixing float32 and float64 in one op, or a dtype an op does not accept.
class DTypeError : public Error {
 public:
  using Error::Error;
};

// Misuse of autograd: backward through a freed graph, a gradient of the wrong shape, an op
// without backward, backward on a non-scalar without an upstream gradient.
class AutogradError : public Error {
 public:
  using Error::Error;
};

// Other bad argument values (a probability outside [0, 1], a negative size, ...).
class ValueError : public Error {
 public:
  using Error::Error;
};

// "[2,3]" — the one way ag spells a shape in messages.
std::string shape_str(const std::vector<int64_t>& shape);

namespace detail {
// Builds a message from any streamable pieces: fail<ShapeError>("sum: dim ", d, " out of range").
template <class E, class... Parts>
[[noreturn]] void fail(const Parts&... parts) {
  std::ostringstream message;
  (message << ... << parts);
  throw E(message.str());
}
}  // namespace detail

}  // namespace ag
