#include "autograd/gradcheck.h"

#include <bit>
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

// A tensor whose gradient is checked: how messages name it ("input 0", "parameter W_q.weight")
// and the tensor f reads, perturbed in place.
struct Checked {
  std::string name;
  Tensor tensor;
};

// The multi-index of flat position `flat` in `shape`, as "[i,j,k]".
std::string multi_index(int64_t flat, const Shape& shape) {
  Shape index(shape.size());
  for (std::size_t d = shape.size(); d-- > 0;) {
    index[d] = flat % shape[d];
    flat /= shape[d];
  }
  return shape_str(index);
}

// L = Σ f() · v, computed without recording.
double weighted_output(const std::function<Tensor()>& f, const Tensor& v) {
  NoGradGuard no_grad;
  return sum(mul(f(), v)).item();
}

// Two evaluations agree when they are the same number (bit for bit), NaN included.
bool same_value(double a, double b) {
  return std::bit_cast<uint64_t>(a) == std::bit_cast<uint64_t>(b);
}

// Writes a value into one element for the lifetime of the scope, then puts the old one back —
// also when f throws, so that a module's weights are never left perturbed.
class PerturbedElement {
 public:
  PerturbedElement(double* element, double value) : element_(element), saved_(*element) {
    *element_ = value;
  }
  ~PerturbedElement() { *element_ = saved_; }
  PerturbedElement(const PerturbedElement&) = delete;
  PerturbedElement& operator=(const PerturbedElement&) = delete;

 private:
  double* element_;
  double saved_;
};

// Sets each checked tensor's .grad aside for the analytic pass and puts it back afterwards, so
// that backward starts from nothing and the caller's gradients survive the check.
class GradsSetAside {
 public:
  explicit GradsSetAside(const std::vector<Checked>& checked) : checked_(checked) {
    for (const Checked& c : checked_) {
      saved_.push_back(c.tensor.grad());
      c.tensor.zero_grad();
    }
  }
  ~GradsSetAside() {
    for (std::size_t i = 0; i < checked_.size(); ++i) checked_[i].tensor.set_grad(saved_[i]);
  }
  GradsSetAside(const GradsSetAside&) = delete;
  GradsSetAside& operator=(const GradsSetAside&) = delete;

 private:
  const std::vector<Checked>& checked_;
  std::vector<Tensor> saved_;
};

// What both entry points share: the analytic gradients from one backward, the determinism check,
// then central differences element by element, collecting every problem.
GradcheckResult check_gradients(const std::function<Tensor()>& f,
    const std::vector<Checked>& checked, const GradcheckOptions& options) {
  if (checked.empty())
    throw ValueError(
        "gradcheck: no input requires grad; call requires_grad_() on the inputs to check");
  for (const Checked& c : checked) {
    if (c.tensor.dtype() != float64)
      fail<DTypeError>("gradcheck: ", c.name, " of shape ", shape_str(c.tensor.shape()), " is ",
          dtype_name(c.tensor.dtype()),
          "; finite differences need float64 (convert first, e.g. module.to(ag::float64))");
    if (!c.tensor.is_contiguous())
      fail<ValueError>("gradcheck: ", c.name, " of shape ", shape_str(c.tensor.shape()),
          " is not contiguous; it is perturbed in place one element at a time");
  }

  // Analytic gradients: one backward with a random upstream gradient v. Uniform in [0.5, 1.5)
  // with random signs: never all ones (which would hide a transposed gradient) and never ~0.
  std::vector<std::vector<double>> analytic;
  Tensor v;
  {
    GradsSetAside set_aside(checked);
    Tensor output = f();
    if (output.dtype() != float64)
      fail<DTypeError>(
          "gradcheck: f returned ", dtype_name(output.dtype()), "; it must compute in float64");
    Generator generator(options.seed);
    v = mul(uniform(output.shape(), 0.5, 1.5, generator, float64),
        sub(mul(bernoulli(output.shape(), 0.5, generator, float64), 2.0), 1.0));
    if (!output.requires_grad() && !options.allow_unused)
      return {false,
          "gradcheck failed: the output does not depend on any input that requires grad "
          "(no grad_fn)",
          0};
    if (output.requires_grad()) output.backward(v);
    for (const Checked& c : checked)
      analytic.push_back(c.tensor.grad().defined() ? c.tensor.grad().to_vector<double>()
                                                   : std::vector<double>(c.tensor.numel(), 0.0));
  }

  std::ostringstream problems;
  problems << std::setprecision(10);
  // Finite differences of a function that gives two answers at one point are noise.
  const double first = weighted_output(f, v), second = weighted_output(f, v);
  if (!same_value(first, second)) {
    problems << "\n  f is not deterministic: two evaluations at the same point gave L = " << first
             << " and " << second
             << " (dropout in training mode? reseed the generator inside f, or call eval())";
    return {false, "gradcheck failed:" + problems.str(), 0};
  }

  int64_t failed_elements = 0, other_problems = 0;
  for (std::size_t i = 0; i < checked.size(); ++i) {
    const Checked& c = checked[i];
    const std::string described = c.name + " (shape " + shape_str(c.tensor.shape()) + ")";
    double* x = c.tensor.data<double>();
    bool analytic_all_zero = true, numeric_all_zero = true;
    for (int64_t e = 0; e < c.tensor.numel(); ++e) {
      // Numeric gradient by central differences.
      double plus, minus;
      {
        PerturbedElement perturbed(&x[e], x[e] + options.eps);
        plus = weighted_output(f, v);
      }
      {
        PerturbedElement perturbed(&x[e], x[e] - options.eps);
        minus = weighted_output(f, v);
      }
      const double numeric = (plus - minus) / (2 * options.eps);
      const double analytic_value = analytic[i][static_cast<std::size_t>(e)];
      analytic_all_zero = analytic_all_zero && analytic_value == 0;
      numeric_all_zero = numeric_all_zero && numeric == 0;
      const double error = std::abs(analytic_value - numeric);
      const double tolerance = options.atol + options.rtol * std::abs(numeric);
      if (!(error <= tolerance)) {  // also catches NaN
        if (++failed_elements <= options.max_failures)
          problems << "\n  " << described << " at element " << multi_index(e, c.tensor.shape())
                   << ": analytic " << analytic_value << ", numeric " << numeric
                   << ", |difference| " << error << " > tolerance " << tolerance;
      }
    }
    if (c.tensor.numel() == 0) continue;
    if (analytic_all_zero && numeric_all_zero && !options.allow_unused) {
      ++other_problems;
      problems << "\n  " << described
               << ": f does not depend on it (its gradient is zero everywhere, analytic and "
                  "numeric); pass allow_unused if that is intended";
    } else if (analytic_all_zero && !numeric_all_zero) {
      // Within tolerance everywhere, perhaps, yet identically zero while the function does move
      // with it: a backward that forgets an input must not hide behind atol.
      ++other_problems;
      problems << "\n  " << described
               << ": the analytic gradient is identically zero but the numeric one is not";
    }
  }
  if (failed_elements == 0 && other_problems == 0) return {true, {}, 0};
  std::ostringstream header;
  header << std::setprecision(10) << "gradcheck failed (atol " << options.atol << ", rtol "
         << options.rtol << ", eps " << options.eps << "): " << failed_elements
         << " element(s) out of tolerance";
  if (failed_elements > options.max_failures)
    header << ", the first " << options.max_failures << " listed";
  if (other_problems > 0) header << "; " << other_problems << " other problem(s)";
  return {false, header.str() + problems.str(), failed_elements};
}

}  // namespace

GradcheckResult gradcheck(
    const GradcheckFn& f, const std::vector<Tensor>& inputs, const GradcheckOptions& options) {
  // Contiguous float64 leaf copies, so the caller's tensors are untouched and perturbing element
  // i is writing one number.
  std::vector<Tensor> leaves;
  std::vector<Checked> checked;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& input = inputs[i];
    // int64 and bool inputs (indices, masks) carry no gradient and go to f as they are.
    if (input.dtype() != float64 && is_floating_point(input.dtype()))
      fail<DTypeError>("gradcheck: input ", i, " of shape ", shape_str(input.shape()), " is ",
          dtype_name(input.dtype()),
          "; finite differences need float64 inputs (int64 and bool ones pass as they are)");
    Tensor leaf = input.detach().clone();
    leaf.requires_grad_(input.requires_grad());
    leaves.push_back(leaf);
    if (input.requires_grad()) checked.push_back({"input " + std::to_string(i), leaf});
  }
  return check_gradients([&] { return f(leaves); }, checked, options);
}

GradcheckResult gradcheck_parameters(const std::function<Tensor()>& f,
    const NamedTensors& parameters, const GradcheckOptions& options) {
  std::vector<Checked> checked;
  for (const auto& [name, tensor] : parameters)
    if (tensor.requires_grad()) checked.push_back({"parameter " + name, tensor});
  if (checked.empty())
    throw ValueError("gradcheck_parameters: none of the " + std::to_string(parameters.size()) +
                     " tensors requires grad");
  return check_gradients(f, checked, options);
}

}  // namespace ag
