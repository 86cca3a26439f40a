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
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "autograd/autograd.h"  // NoGradGuard
#include "autograd/ops.h"       // matmul, tanh, mean, ...
#include "autograd/tensor.h"    // Tensor, uniform, randn, tensor

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

// ---- command line ------------------------------------------------------------------------------
void print_usage(std::FILE* out) {
  std::fprintf(out,
      "usage: ag-train-mlp [--steps N] [--seed S] [--lr LR]\n"
      "\n"
      "Trains a 2-layer MLP (2 -> %lld -> 1, tanh) on y = sin(3 x1) x2 + noise with\n"
      "full-batch SGD + momentum %.1f, printing the loss as it falls.\n"
      "\n"
      "  --steps N   gradient steps, N >= 1              (default 3000)\n"
      "  --seed S    seed for data and weights, S >= 0   (default 0)\n"
      "  --lr LR     learning rate, LR > 0               (default 0.1)\n"
      "  --help      show this message\n",
      static_cast<long long>(kHidden), kMomentum);
}

// Returns false on a malformed or out-of-range value.
template <class T>
bool parse_number(std::string_view text, T& value) {
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  return ec == std::errc() && ptr == end;
}

// 0: parsed; 1: --help printed; 2: usage error printed on stderr.
int parse_options(int argc, char** argv, Options& options) {
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      print_usage(stdout);
      return 1;
    }
    if (arg != "--steps" && arg != "--seed" && arg != "--lr") {
      std::fprintf(stderr, "ag-train-mlp: unknown argument '%s' (see --help)\n", argv[i]);
      return 2;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "ag-train-mlp: %s needs a value (see --help)\n", argv[i]);
      return 2;
    }
    std::string_view value = argv[++i];
    bool ok = false;
    if (arg == "--steps") {
      ok = parse_number(value, options.steps) && options.steps >= 1;
    } else if (arg == "--seed") {
      ok = !value.empty() && value[0] != '-' && parse_number(value, options.seed);
    } else {  // --lr
      ok = parse_number(value, options.lr) && std::isfinite(options.lr) && options.lr > 0;
    }
    if (!ok) {
      std::fprintf(stderr, "ag-train-mlp: bad value '%s' for %s (see --help)\n", argv[i],
          std::string(arg).c_str());
      return 2;
    }
  }
  return 0;
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
  if (int status = parse_options(argc, argv, options); status != 0) return status == 1 ? 0 : 2;
  try {
    return train(options);
  } catch (const std::exception& e) {  // nothing here should throw; if it does, say so
    std::fflush(stdout);
    std::fprintf(stderr, "ag-train-mlp: error: %s\n", e.what());
    return 1;
  }
}
