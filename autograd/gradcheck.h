// ag::gradcheck — compares the gradients backward() computes with finite differences.
//
// For a function f of tensors, with a random upstream gradient v (so every output element
// matters, with different weights), the scalar L = Σ f(inputs) · v has, for each element x_i of
// each input that requires grad,
//   analytic  dL/dx_i  from backward(v)
//   numeric   (L(x_i + eps) − L(x_i − eps)) / (2 eps)          (central differences)
// and the check passes when |analytic − numeric| ≤ atol + rtol · |numeric| for every element.
// Run it in float64: float32 rounding makes finite differences meaningless at eps = 1e-6.
#pragma once

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <string>
#include <vector>

#include "autograd/tensor.h"

namespace ag {

struct GradcheckOptions {
  double eps = 1e-6;   // finite-difference step (PyTorch's default)
  double atol = 1e-5;  // absolute tolerance (PyTorch's default)
  double rtol = 1e-3;  // relative tolerance (PyTorch's default)
  uint64_t seed = 0;   // seeds the random upstream gradient
};

struct GradcheckResult {
  bool passed = true;
  std::string message;  // empty when passed; otherwise which input, which element, both values
  explicit operator bool() const { return passed; }
};

std::ostream& operator<<(std::ostream& out, const GradcheckResult& result);

using GradcheckFn = std::function<Tensor(const std::vector<Tensor>& inputs)>;

// Checks the gradient of `f` with respect to every input that requires grad. The inputs must be
// float64 leaves; gradcheck works on copies, so the caller's tensors and their .grad are untouched.
// f must be deterministic (reseed any generator it uses inside f).
GradcheckResult gradcheck(
    const GradcheckFn& f, const std::vector<Tensor>& inputs, const GradcheckOptions& options = {});

}  // namespace ag
