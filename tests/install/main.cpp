// Checks that an installed ag can be compiled against, linked and run, every library of it: one
// gradient with a known value, a gradcheck through matmul (OpenBLAS) and tanh, the graph of that
// gradient as DOT (ag::autograd); an SGD step whose state goes through a checkpoint's bytes
// (ag::optim and ag::io, cereal and zlib); d2l's multi-head attention whose weights are drawn as a
// heatmap (ag::nn, ag::viz, libpng); one loss of d2l's Transformer on a toy batch (ag::data,
// ag::models); and that loss summed over a world of one (ag::distributed, MPI when ag has it).
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "autograd/autograd.h"
#include "autograd/gradcheck.h"
#include "autograd/graph_tools.h"
#include "autograd/ops.h"
#include "autograd/tensor.h"
#include "data/batch.h"
#include "data/toy_tasks.h"
#include "distributed/distributed.h"
#include "io/checkpoint.h"
#include "io/optimizer_state.h"
#include "models/seq2seq.h"
#include "nn/attention.h"
#include "optim/optimizer.h"
#include "viz/heatmap.h"

int main() {
  // d/dx Σ x² = 2x
  ag::Tensor x = ag::tensor({1.0, 2.0, 3.0}, ag::float64).requires_grad_();
  ag::Tensor y = ag::sum(x * x);
  const std::string dot = ag::to_dot(y);
  if (dot.find("sum\\n[] float64") == std::string::npos ||
      dot.find("mul\\n[3] float64") == std::string::npos) {
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

  // d2l's example: 2 heads over 4 queries and 6 keys, its weights (B, H, Q, K) as show_heatmaps.
  ag::manual_seed(0);
  ag::nn::MultiHeadAttention attention(8, 8, 8, 8, 2, 0.0);
  attention.eval();
  const ag::Tensor queries = ag::randn({1, 4, 8}, gen), keys = ag::randn({1, 6, 8}, gen);
  attention.forward(queries, keys, keys, ag::tensor({5.0f}, {1}));
  const ag::Tensor weights = attention.attention_weights();  // (1, 2, 4, 6)
  const std::string png = "ag_install_check_heatmap.png";
  ag::viz::show_heatmaps(weights, png);
  const ag::viz::Image image = ag::viz::read_png(png);
  std::remove(png.c_str());
  if (image.width() < 2 * 6 * 12 || image.height() < 4 * 12) {
    std::fprintf(stderr, "ag_install_check: the heatmap of (1, 2, 4, 6) weights is %lldx%lld\n",
        static_cast<long long>(image.width()), static_cast<long long>(image.height()));
    return 1;
  }

  // One teacher-forced loss of a small d2l Transformer on a batch of the reverse task: about
  // ln(20) = 3.0 before training.
  auto task = ag::data::make_task("reverse");
  ag::seq2seq::ModelConfig config;
  config.vocab_size = task->vocab().size();
  auto model = ag::seq2seq::make_transformer(config);
  ag::data::TrainingStream stream(*task, {}, 1);
  const ag::data::Batch batch =
      ag::data::make_batch(stream.next(4), task->source_steps(), task->target_steps());
  const double loss = ag::seq2seq::sequence_loss(*model, batch).item();
  if (!(loss > 2.0 && loss < 4.5)) {
    std::fprintf(stderr, "ag_install_check: the untrained Transformer's loss is %g\n", loss);
    return 1;
  }
  // Started without mpirun: rank 0 of a world of one, whose sums are their input.
  if (ag::dist::world_size() != 1 || ag::dist::rank() != 0 ||
      ag::dist::all_reduce_sum(loss) != loss) {
    std::fprintf(stderr, "ag_install_check: not a world of one: rank %d of %d\n", ag::dist::rank(),
        ag::dist::world_size());
    return 1;
  }

  std::printf(
      "ag_install_check: installed ag works (grad of sum(x*x) = %s, gradcheck passed, heatmap "
      "%lldx%lld, Transformer loss %.3f)\n",
      x.grad().str().c_str(), static_cast<long long>(image.width()),
      static_cast<long long>(image.height()), loss);
  return 0;
}
