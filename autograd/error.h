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
#include <type_traits>
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

// Throws an E whose message is the streamed pieces, e.g.
//   fail<ShapeError>("sum: dim ", d, " is out of range for a tensor of ", n, " dims");
template <class E, class... Parts>
[[noreturn]] void fail(const Parts&... parts) {
  static_assert(std::is_base_of_v<Error, E>,
                "fail<E>: E must be one of ag's errors (autograd/error.h)");
  std::ostringstream message;
  (message << ... << parts);
  throw E(message.str());
}

namespace detail {
// The old spelling, detail::fail<E>(...), still used in code being rewritten elsewhere
// (autograd/checkpoint.cpp, ops_attention.cpp, examples/plot.cpp, examples/seq2seq.cpp). New code
// writes ag::fail; this alias goes once those call sites do.
using ag::fail;
}  // namespace detail

}  // namespace ag
