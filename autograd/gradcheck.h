// ag::gradcheck — compares the gradients backward() computes with finite differences.
//
// For a function f of tensors, with a random upstream gradient v (so every output element
// matters, with different weights), the scalar L = Σ f(...) · v has, for each element x_i of
// each checked tensor,
//   analytic  dL/dx_i  from backward(v)
//   numeric   (L(x_i + eps) − L(x_i − eps)) / (2 eps)          (central differences)
// and the check passes when |analytic − numeric| ≤ atol + rtol · |numeric| for every element.
//
// Two ways to say what is checked:
//   gradcheck(f, inputs)                 f receives copies of `inputs`; every input that requires
//                                        grad is checked ("input 0", "input 1", ...).
//   gradcheck_parameters(f, parameters)  f() reads the named tensors itself — a module's
//                                        named_parameters() — which are perturbed in place and
//                                        restored, their .grad kept as it was:
//     nn::Linear linear(4, 3);
//     linear.to(ag::float64);
//     Tensor x = ag::randn({2, 4}, ag::float64);
//     ag::GradcheckResult check =
//         ag::gradcheck_parameters([&] { return linear(x); }, linear.named_parameters());
//
// A check fails, and its message lists every problem (up to max_failures elements, all counted):
//   - an element whose analytic and numeric gradients differ beyond the tolerance, with the
//     tensor's name and shape, the element's index and both values;
//   - a checked tensor whose gradient is zero everywhere both ways: f does not depend on it, which
//     is usually a mistake in the test (pass allow_unused to accept it);
//   - a gradient that is identically zero while the numeric one is not (a forgotten input);
//   - an f that is not deterministic: two evaluations at the same point differ (dropout in
//     training mode, a generator not reseeded inside f) — finite differences would be noise.
// Everything is float64: float32 rounding makes finite differences meaningless at eps = 1e-6, so
// a float32 tensor or output is an error naming it (call module.to(ag::float64) first).
#pragma once

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <string>
#include <utility>
#include <vector>

#include "autograd/tensor.h"

namespace ag {

struct GradcheckOptions {
  double eps = 1e-6;          // finite-difference step (PyTorch's default)
  double atol = 1e-5;         // absolute tolerance (PyTorch's default)
  double rtol = 1e-3;         // relative tolerance (PyTorch's default)
  uint64_t seed = 0;          // seeds the random upstream gradient
  int64_t max_failures = 10;  // elements out of tolerance listed in the message (all are counted)
  bool allow_unused = false;  // a checked tensor f does not depend on passes instead of failing
};

struct GradcheckResult {
  bool passed = true;
  std::string message;          // empty when passed; otherwise one line per problem
  int64_t failed_elements = 0;  // elements out of tolerance, over every checked tensor
  explicit operator bool() const { return passed; }
};

std::ostream& operator<<(std::ostream& out, const GradcheckResult& result);

using GradcheckFn = std::function<Tensor(const std::vector<Tensor>& inputs)>;

// Checks the gradient of `f` with respect to every input that requires grad. The floating inputs
// must be float64; int64 and bool ones (indices, masks) are passed as they are. gradcheck works on
// copies, so the caller's tensors and their .grad are untouched.
GradcheckResult gradcheck(
    const GradcheckFn& f, const std::vector<Tensor>& inputs, const GradcheckOptions& options = {});

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

// Checks the gradient of `f()` with respect to every named tensor that requires grad (frozen
// ones are skipped), e.g. a module's named_parameters(). f must read these very tensors: they are
// perturbed in place one element at a time and restored afterwards, even if f throws; their
// .grad is restored too. They must be float64 and contiguous.
GradcheckResult gradcheck_parameters(const std::function<Tensor()>& f,
    const NamedTensors& parameters, const GradcheckOptions& options = {});

}  // namespace ag
