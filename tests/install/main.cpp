// Checks that an installed ag can be compiled against, linked and run: one gradient with a known
// value, a gradcheck through matmul (OpenBLAS) and tanh, the graph of that gradient as DOT, and an
// SGD step whose state goes through a checkpoint's bytes (ag::optim and ag::io, cereal and zlib).
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "autograd/autograd.h"
#include "autograd/gradcheck.h"
#include "autograd/graph_tools.h"
#include "autograd/ops.h"
#include "autograd/tensor.h"
#include "io/checkpoint.h"
#include "io/optimizer_state.h"
#include "optim/optimizer.h"

int main() {
  // d/dx Σ x² = 2x
  ag::Tensor x = ag::tensor({1.0, 2.0, 3.0}, ag::float64).requires_grad_();
  ag::Tensor y = ag::sum(x * x);
  const std::string dot = ag::to_dot(y);
  if (dot.find("sum\\n[] float64") == std::string::npos || dot.find("mul\\n[3] float64") == std::string::npos) {
    std::fprintf(stderr, "ag_install_check: to_dot misses the sum and mul ops:\n%s", dot.c_str());
    return 1;
  }
  y.backward();
  std::vector<double> grad = x.grad().to_vector();
  const std::vector<double> expected = {2.0, 4.0, 6.0};
  for (std::size_t i = 0; i < expected.size(); ++i) {
    if (std::abs(grad[i] - expected[i]) > 1e-12) {
      std::fprintf(stderr, "ag_install_check: d(sum x^2)/dx[%zu] = %g, expected %g\n", i, grad[i],
                   expected[i]);
      return 1;
    }
  }

  ag::Generator gen(0);
  ag::Tensor a = ag::randn({3, 4}, gen, ag::float64).requires_grad_();
  ag::Tensor w = ag::randn({4, 2}, gen, ag::float64).requires_grad_();
  ag::GradcheckResult result = ag::gradcheck(
      [](const std::vector<ag::Tensor>& in) { return ag::tanh(ag::matmul(in[0], in[1])); }, {a, w});
  if (!result) {
    std::fprintf(stderr, "ag_install_check: gradcheck failed: %s\n", result.message.c_str());
    return 1;
  }

  ag::optim::SGD sgd({w}, 0.1, 0.9);
  w.set_grad(ag::ones_like(w));
  sgd.step();
  ag::Checkpoint c;
  c.kind = "install-check";
  ag::put_optimizer_state(c, sgd.state_dict());
  const ag::Checkpoint back =
      ag::parse_checkpoint(ag::serialize_checkpoint(c, ag::CheckpointFormat::binary));
  const std::vector<double> buffer = back.tensor("optimizer.state.0.0.momentum_buffer").to_vector();
  if (buffer != std::vector<double>(8, 1.0)) {
    std::fprintf(stderr, "ag_install_check: SGD's momentum buffer did not survive a checkpoint\n");
    return 1;
  }
  ag::optim::SGD fresh({w}, 0.1, 0.9);
  fresh.load_state_dict(ag::get_optimizer_state(back));

  std::printf("ag_install_check: installed ag works (grad of sum(x*x) = %s, gradcheck passed)\n",
              x.grad().str().c_str());
  return 0;
}
