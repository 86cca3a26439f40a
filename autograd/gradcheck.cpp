#include "autograd/gradcheck.h"

#include <cmath>
#include <iomanip>
#include <ostream>
#include <sstream>

#include "autograd/autograd.h"
#include "autograd/ops.h"

namespace ag {

std::ostream& operator<<(std::ostream& out, const GradcheckResult& result) {
  return out << (result.passed ? "gradcheck passed" : result.message);
}

namespace {

// The multi-index of flat position `flat` in `shape`, as "[i,j,k]".
std::string multi_index(int64_t flat, const Shape& shape) {
  Shape index(shape.size());
  for (std::size_t d = shape.size(); d-- > 0;) {
    index[d] = flat % shape[d];
    flat /= shape[d];
  }
  return shape_str(index);
}

// L = Σ f(inputs) · v, computed without recording.
double weighted_output(const GradcheckFn& f, const std::vector<Tensor>& inputs, const Tensor& v) {
  NoGradGuard no_grad;
  return sum(mul(f(inputs), v)).item();
}

}  // namespace

GradcheckResult gradcheck(
    const GradcheckFn& f, const std::vector<Tensor>& inputs, const GradcheckOptions& options) {
  // Contiguous float64 leaf copies, so the caller's tensors are untouched and perturbing element
  // i is writing one number.
  std::vector<Tensor> leaves;
  bool any_differentiable = false;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& input = inputs[i];
    if (input.dtype() != float64)
      fail<DTypeError>("gradcheck: input ", i, " of shape ", shape_str(input.shape()), " is ",
          dtype_name(input.dtype()), "; finite differences need float64 inputs");
    Tensor leaf = input.detach().clone();
    leaf.requires_grad_(input.requires_grad());
    any_differentiable = any_differentiable || input.requires_grad();
    leaves.push_back(leaf);
  }
  if (!any_differentiable)
    throw ValueError(
        "gradcheck: no input requires grad; call requires_grad_() on the inputs to check");

  // Analytic gradients: one backward with a random upstream gradient v. Uniform in [0.5, 1.5)
  // with random signs: never all ones (which would hide a transposed gradient) and never ~0.
  Tensor output = f(leaves);
  if (output.dtype() != float64)
    fail<DTypeError>(
        "gradcheck: f returned ", dtype_name(output.dtype()), "; it must compute in float64");
  Generator generator(options.seed);
  Tensor v = mul(uniform(output.shape(), 0.5, 1.5, generator, float64),
      sub(mul(bernoulli(output.shape(), 0.5, generator, float64), 2.0), 1.0));
  if (!output.requires_grad())
    return {false,
        "gradcheck failed: the output does not depend on any input that requires grad "
        "(no grad_fn)"};
  output.backward(v);

  for (std::size_t i = 0; i < leaves.size(); ++i) {
    Tensor& leaf = leaves[i];
    if (!leaf.requires_grad()) continue;
    Tensor analytic = leaf.grad().defined() ? leaf.grad() : zeros_like(leaf);
    const std::vector<double> analytic_values = analytic.to_vector<double>();
    double* x = leaf.data<double>();
    bool analytic_all_zero = true, numeric_all_zero = true;
    for (int64_t e = 0; e < leaf.numel(); ++e) {
      // Numeric gradient by central differences.
      const double saved = x[e];
      x[e] = saved + options.eps;
      const double plus = weighted_output(f, leaves, v);
      x[e] = saved - options.eps;
      const double minus = weighted_output(f, leaves, v);
      x[e] = saved;
      const double numeric = (plus - minus) / (2 * options.eps);
      const double analytic_value = analytic_values[static_cast<std::size_t>(e)];
      analytic_all_zero = analytic_all_zero && analytic_value == 0;
      numeric_all_zero = numeric_all_zero && numeric == 0;
      const double error = std::abs(analytic_value - numeric);
      const double tolerance = options.atol + options.rtol * std::abs(numeric);
      if (!(error <= tolerance)) {  // also catches NaN
        std::ostringstream message;
        message << std::setprecision(10) << "gradcheck failed for input " << i << " (shape "
                << shape_str(leaf.shape()) << ") at element " << multi_index(e, leaf.shape())
                << ": analytic " << analytic_value << ", numeric " << numeric << ", |difference| "
                << error << " > tolerance " << tolerance << " (atol " << options.atol << ", rtol "
                << options.rtol << ")";
        return {false, message.str()};
      }
    }
    // Within tolerance everywhere, yet identically zero while the function does move with this
    // input: a backward that forgets an input must not hide behind atol when gradients are small.
    if (analytic_all_zero && !numeric_all_zero && leaf.numel() > 0) {
      std::ostringstream message;
      message << "gradcheck failed for input " << i << " (shape " << shape_str(leaf.shape())
              << "): the analytic gradient is identically zero but the numeric one is not";
      return {false, message.str()};
    }
  }
  return {true, {}};
}

}  // namespace ag
