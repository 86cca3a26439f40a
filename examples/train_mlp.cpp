// ag-train-mlp — the smallest complete training loop in ag.
//
// A two-layer perceptron (Linear -> tanh -> Linear) learns the smooth non-linear function
//
//     y = sin(3 x1) * x2 + noise,      x = (x1, x2) uniform in [-1, 1]^2
//
// from 512 noisy samples, by full-batch gradient descent with momentum on the mean squared error.
// Everything an nn/optim library would hide is written out: the parameters are plain leaf
// tensors with requires_grad_(), the forward pass is a few ops, loss.backward() fills p.grad(),
// and the update runs under ag::NoGradGuard so that it is not itself recorded in the graph.
//
// Every random number (data, noise, initial weights) comes from one seeded ag::Generator, and ag
// runs on one thread (OpenBLAS always does), so the same --seed prints the same numbers on every
// run.
//
//   ag-train-mlp [--steps N] [--seed S] [--lr LR]
#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "autograd/autograd.h"  // NoGradGuard
#include "autograd/ops.h"       // matmul, tanh, mean, ...
#include "autograd/tensor.h"    // Tensor, uniform, randn, tensor
#include "training/cli.h"       // run_main: the command line and the exit codes

namespace {

// ---- the task --------------------------------------------------------------------------------
constexpr int64_t kTrainSize = 512;  // training points
constexpr int64_t kTestSize = 256;   // held-out points, never trained on
constexpr int64_t kInputs = 2;       // x = (x1, x2)
constexpr int64_t kHidden = 32;      // width of the hidden layer
constexpr int64_t kOutputs = 1;      // y
constexpr double kNoiseStd = 0.05;   // standard deviation of the label noise
constexpr double kMomentum = 0.9;

struct Options {
  int64_t steps = 3000;
  uint64_t seed = 0;
  double lr = 0.1;
};

struct Dataset {
  ag::Tensor x;  // (N, 2)
  ag::Tensor y;  // (N, 1)
};

// Draws n points x uniform in [-1, 1]^2 and their noisy labels.
Dataset make_dataset(int64_t n, ag::Generator& gen) {
  ag::Tensor x = ag::uniform({n, kInputs}, -1.0, 1.0, gen);  // (n, 2)
  ag::Tensor noise = ag::randn({n, kOutputs}, gen);          // (n, 1)

  // ag has no sin op yet, and the labels need no gradient, so compute them element by element
  // on the host: to_vector() copies a tensor out in row-major order, ag::tensor() copies back in.
  std::vector<float> xs = x.to_vector<float>();  // x1, x2, x1, x2, ...  (2n values)
  std::vector<float> ns = noise.to_vector<float>();
  std::vector<float> ys(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < ys.size(); ++i) {
    float x1 = xs[2 * i];
    float x2 = xs[2 * i + 1];
    ys[i] = std::sin(3.0f * x1) * x2 + static_cast<float>(kNoiseStd) * ns[i];
  }
  return {x, ag::tensor(ys, {n, kOutputs})};  // y: (n, 1)
}

// A Linear layer's weights, created by hand: y = x W + b. (PyTorch's nn.Linear stores W as
// (out, in) and computes x W^T; storing (in, out) saves the transpose.) Both start uniform in
// ±1/sqrt(fan_in), PyTorch's default, so the hidden pre-activations start in tanh's useful range.
struct Linear {
  ag::Tensor weight;  // (in, out)
  ag::Tensor bias;    // (out)

  Linear(int64_t in, int64_t out, ag::Generator& gen) {
    double bound = 1.0 / std::sqrt(static_cast<double>(in));
    weight = ag::uniform({in, out}, -bound, bound, gen);
    bias = ag::uniform({out}, -bound, bound, gen);
    weight.requires_grad_();  // a leaf parameter: backward() accumulates into weight.grad()
    bias.requires_grad_();
  }

  // x: (B, in) -> (B, out). The bias (out) broadcasts over the B rows.
  ag::Tensor operator()(const ag::Tensor& x) const { return ag::matmul(x, weight) + bias; }
};

struct Mlp {
  Linear fc1;
  Linear fc2;

  explicit Mlp(ag::Generator& gen) : fc1(kInputs, kHidden, gen), fc2(kHidden, kOutputs, gen) {}

  ag::Tensor operator()(const ag::Tensor& x) const {  // x: (B, 2)
    ag::Tensor h = ag::tanh(fc1(x));                  // (B, 32)
    return fc2(h);                                    // (B, 1)
  }

  // Handles to the four parameter tensors (copies of a Tensor share its data and its grad).
  std::vector<ag::Tensor> parameters() const {
    return {fc1.weight, fc1.bias, fc2.weight, fc2.bias};
  }
};

// Mean squared error, a 0-dim tensor: mean over all (B, 1) elements of (prediction - target)².
ag::Tensor mse(const ag::Tensor& prediction, const ag::Tensor& target) {
  return ag::mean(ag::pow(prediction - target, 2.0));
}

// ---- the run ---------------------------------------------------------------------------------
// Data, model, the training loop and the final evaluation; returns the exit code.
int train(const Options& options) {
  // The matrices here are tiny: one thread of ag's pool is fastest (OpenBLAS always runs on one),
  // and it keeps every sum in the same order, so runs are bit-for-bit reproducible.
  ag::set_num_threads(1);

  ag::Generator gen(options.seed);
  Dataset train = make_dataset(kTrainSize, gen);  // x (512, 2), y (512, 1)
  Dataset test = make_dataset(kTestSize, gen);    // x (256, 2), y (256, 1)
  Mlp model(gen);
  std::vector<ag::Tensor> params = model.parameters();

  // One momentum buffer per parameter, same shape, starting at zero (PyTorch's SGD momentum):
  //   v = momentum * v + grad;   p = p - lr * v
  std::vector<ag::Tensor> velocity;
  for (const ag::Tensor& p : params) velocity.push_back(ag::zeros_like(p));

  std::printf("ag-train-mlp: 2-layer MLP (2 -> %lld -> 1, tanh), y = sin(3 x1) x2 + noise\n",
      static_cast<long long>(kHidden));
  std::printf("%lld train / %lld held-out points, full batch, SGD lr %g momentum %g, seed %llu\n",
      static_cast<long long>(kTrainSize), static_cast<long long>(kTestSize), options.lr, kMomentum,
      static_cast<unsigned long long>(options.seed));

  const int64_t print_every = options.steps >= 10 ? options.steps / 10 : 1;
  const int width = static_cast<int>(std::to_string(options.steps).size());
  double initial_loss = 0;

  for (int64_t step = 1; step <= options.steps; ++step) {
    // Forward: every op on a tensor that requires grad records a node of the graph.
    ag::Tensor prediction = model(train.x);      // (512, 1)
    ag::Tensor loss = mse(prediction, train.y);  // () — a single number
    double value = loss.item();
    if (step == 1) initial_loss = value;
    if (!std::isfinite(value)) {
      std::fflush(stdout);
      std::fprintf(stderr,
          "ag-train-mlp: the loss diverged (%g) at step %lld; try a smaller --lr\n", value,
          static_cast<long long>(step));
      return 1;
    }
    if (step == 1 || step % print_every == 0 || step == options.steps) {
      std::printf("step %*lld/%lld  loss %.4f\n", width, static_cast<long long>(step),
          static_cast<long long>(options.steps), value);
      std::fflush(stdout);  // show progress at once, even through a pipe
    }

    // Backward: fills p.grad() for every parameter (same shape as p) and frees the graph.
    loss.backward();

    // Update, without recording: these in-place ops are not part of any model.
    ag::NoGradGuard no_grad;
    for (std::size_t i = 0; i < params.size(); ++i) {
      ag::Tensor& p = params[i];
      velocity[i].mul_(kMomentum).add_(p.grad());  // v = momentum * v + grad
      p.add_(velocity[i], -options.lr);            // p = p - lr * v
      p.zero_grad();  // backward() adds to .grad, so clear it before the next step
    }
  }

  // Evaluation needs no graph: NoGradGuard makes the forward pass record nothing.
  ag::NoGradGuard no_grad;
  double train_loss = mse(model(train.x), train.y).item();
  double test_loss = mse(model(test.x), test.y).item();
  std::printf(
      "final train loss %.4f  held-out loss %.4f  (initial %.4f, %.1f%% of it; noise floor %.4f)\n",
      train_loss, test_loss, initial_loss, 100.0 * train_loss / initial_loss,
      kNoiseStd * kNoiseStd);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  CLI::App app{"ag-train-mlp: trains a 2-layer MLP (2 -> " + std::to_string(kHidden) +
               " -> 1, tanh) on y = sin(3 x1) x2 + noise\nby full-batch SGD with momentum, "
               "printing the loss as it falls"};
  ag::training::add_whole_number(app, "--steps", options.steps, "gradient steps, at least 1");
  ag::training::add_whole_number(app, "--seed", options.seed, "seed for data and weights");
  app.add_option("--lr", options.lr, "learning rate, above 0")->capture_default_str();
  return ag::training::run_main("ag-train-mlp", app, argc, argv, [&] {
    if (options.steps < 1) throw ag::training::UsageError("--steps must be positive");
    if (!(options.lr > 0) || !std::isfinite(options.lr))
      throw ag::training::UsageError("--lr must be a positive number");
    return train(options);
  });
}
