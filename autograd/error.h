// ag's exception family.
//
// Every error ag throws derives from ag::Error, so `catch (const ag::Error&)` catches all of them.
// Each is also exactly one standard exception, so `catch (const std::exception&)` catches it too:
//
//   ag::Error                  everything ag throws (an interface, not itself a std::exception)
//   ├─ InvalidArgument         the caller passed something wrong (a std::invalid_argument)
//   │  ├─ ShapeError             shapes that do not fit the op, or too large to exist
//   │  ├─ DTypeError             mixed or unsupported dtypes
//   │  ├─ AutogradError          misuse of autograd
//   │  └─ ValueError             any other bad argument value
//   └─ RuntimeError            the call was fine but the world failed (a std::runtime_error)
//      ├─ IoError                a file: missing, unreadable, damaged, unwritable
//      ├─ ExternalProgramError   a program ag runs (gnuplot, Graphviz's dot) missing or failing
//      └─ OutOfMemoryError       the system could not provide a tensor's memory
//
// Messages name the op (or the file, or the program) and, for shapes, the full shapes involved:
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

// What every ag exception is. It is not a std::exception itself: each concrete error is one
// through InvalidArgument or RuntimeError below, so that a catch of std::exception (or of
// std::invalid_argument, std::runtime_error) finds exactly one base.
class Error {
 public:
  virtual ~Error() = default;
  // The message; the same string as the std::exception's what().
  virtual const char* what() const noexcept = 0;

 protected:
  Error() = default;
  Error(const Error&) = default;
  Error& operator=(const Error&) = default;
};

// Base of the errors that bad arguments cause: calling again with the same arguments fails again.
class InvalidArgument : public std::invalid_argument, public Error {
 public:
  explicit InvalidArgument(const std::string& message) : std::invalid_argument(message) {}
  explicit InvalidArgument(const char* message) : std::invalid_argument(message) {}
  const char* what() const noexcept override { return std::invalid_argument::what(); }
};

// Base of the errors of the world outside the arguments: files, programs, memory.
class RuntimeError : public std::runtime_error, public Error {
 public:
  explicit RuntimeError(const std::string& message) : std::runtime_error(message) {}
  explicit RuntimeError(const char* message) : std::runtime_error(message) {}
  const char* what() const noexcept override { return std::runtime_error::what(); }
};

// Shapes that do not fit the op: broadcasting, matmul, reshape, out-of-range dims or indices; and
// shapes too large to exist (negative sizes, more elements than int64 counts, more bytes than a
// buffer can hold), refused before anything is allocated.
class ShapeError : public InvalidArgument {
 public:
  using InvalidArgument::InvalidArgument;
};

// Mixing float32 and float64 in one op, or a dtype an op does not accept.
class DTypeError : public InvalidArgument {
 public:
  using InvalidArgument::InvalidArgument;
};

// Misuse of autograd: backward through a freed graph, a gradient of the wrong shape, an op
// without backward, backward on a non-scalar without an upstream gradient.
class AutogradError : public InvalidArgument {
 public:
  using InvalidArgument::InvalidArgument;
};

// Other bad argument values (a probability outside [0, 1], a negative size, ...).
class ValueError : public InvalidArgument {
 public:
  using InvalidArgument::InvalidArgument;
};

// A file that cannot be opened, read or written, or whose contents are damaged. The message
// names the path.
class IoError : public RuntimeError {
 public:
  using RuntimeError::RuntimeError;
};

// A program ag runs (gnuplot for the plots, Graphviz's dot for graph pictures) that is not
// installed, cannot be started or fails. The message names the program.
class ExternalProgramError : public RuntimeError {
 public:
  using RuntimeError::RuntimeError;
};

// The system could not provide the memory of a tensor (or of a buffer an op needs). The message
// names the op, the shape and the bytes:
//   empty: out of memory: cannot allocate 1152921504606846976 bytes for shape [288230376151711744]
// A shape too large for any memory (its element count or bytes beyond what int64 and the address
// space hold) is a ShapeError instead: asking again cannot succeed.
class OutOfMemoryError : public RuntimeError {
 public:
  using RuntimeError::RuntimeError;
};

// "[2,3]" — the one way ag spells a shape in messages.
std::string shape_str(const std::vector<int64_t>& shape);

// Throws an E whose message is the streamed pieces, e.g.
//   fail<ShapeError>("sum: dim ", d, " is out of range for a tensor of ", n, " dims");
template <class E, class... Parts>
[[noreturn]] void fail(const Parts&... parts) {
  static_assert(
      std::is_base_of_v<Error, E>, "fail<E>: E must be one of ag's errors (autograd/error.h)");
  std::ostringstream message;
  (message << ... << parts);
  throw E(message.str());
}

}  // namespace ag
