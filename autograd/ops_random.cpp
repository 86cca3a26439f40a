// Dropout, with its backward.
//
//   dropout(x, p)   y = x · m,  m_i = 1/(1 − p) with probability 1 − p, else 0
//   gradient        g · m       (the same mask: dropped units pass no gradient)
//
// Scaling the kept units by 1/(1 − p) ("inverted dropout") keeps E[y] = x, so evaluation needs
// no rescaling: outside training dropout is the identity.
#include "autograd/autograd.h"
#include "autograd/ops.h"

namespace ag {

Tensor dropout(const Tensor& x, double p, bool training, Generator& generator) {
  if (!(p >= 0.0 && p <= 1.0))
    detail::fail<ValueError>("dropout: probability ", p, " is outside [0, 1] (input shape ",
                             shape_str(x.shape()), ")");
  if (!training || p == 0.0) return x;
  Tensor mask;
  {
    NoGradGuard no_grad;
    // p = 1 drops everything (and would divide by zero): the mask is all zeros.
    mask = p == 1.0 ? zeros(x.shape(), x.dtype())
                    : bernoulli(x.shape(), 1.0 - p, generator, x.dtype()).mul_(1.0 / (1.0 - p));
  }
  Tensor out;
  {
    NoGradGuard no_grad;
    out = mul(x, mask);
  }
  return detail::record(Op::dropout, out, {x}, [mask](const Tensor& g, const NeedsGrad&) -> Grads {
    // dy/dx = m
    return {mul(g, mask)};
  });
}

Tensor dropout(const Tensor& x, double p, bool training) {
  return dropout(x, p, training, default_generator());
}

}  // namespace ag
