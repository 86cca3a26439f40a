#include "nn/layers.h"

#include <cmath>

#include "nn/fused.h"
#include "nn/init.h"

namespace ag::nn {

namespace {
// The sizes a layer is built with, checked before its parameters are made (in the members'
// initialisers, which run before the constructor's body).
Shape linear_weight_shape(int64_t in, int64_t out) {
  if (in <= 0 || out <= 0)
    fail<ValueError>("Linear: in_features ", in, " and out_features ", out, " must be positive");
  return {out, in};
}
Shape embedding_shape(int64_t num, int64_t dim) {
  if (num <= 0 || dim <= 0)
    fail<ValueError>(
        "Embedding: num_embeddings ", num, " and embedding_dim ", dim, " must be positive");
  return {num, dim};
}
const Shape& layer_norm_shape(const Shape& shape, double eps, const char* layer = "LayerNorm") {
  if (shape.empty()) fail<ValueError>(layer, ": normalized_shape cannot be empty");
  if (!(eps >= 0)) fail<ValueError>(layer, ": eps ", eps, " must not be negative (nor NaN)");
  return shape;
}

// LayerNorm's weight, ones of normalized_shape (undefined without elementwise_affine), once the
// arguments are checked.
Tensor layer_norm_weight(const Shape& shape, double eps, bool elementwise_affine) {
  layer_norm_shape(shape, eps);
  return elementwise_affine ? ones(shape) : Tensor();
}

// RMSNorm's weight, ones of normalized_shape (undefined without elementwise_affine), once the
// arguments are checked.
Tensor rms_norm_weight(const Shape& shape, std::optional<double> eps, bool elementwise_affine) {
  layer_norm_shape(shape, eps.value_or(0.0), "RMSNorm");
  return elementwise_affine ? ones(shape) : Tensor();
}

// BatchNorm1d's per-channel tensors, once the arguments are checked: `value` of shape (C), or
// undefined where `wanted` is false.
Tensor batch_norm_channels(
    int64_t num_features, double eps, std::optional<double> momentum, bool wanted, double value) {
  if (num_features <= 0)
    fail<ValueError>("BatchNorm1d: num_features ", num_features, " must be positive");
  if (!(eps >= 0)) fail<ValueError>("BatchNorm1d: eps ", eps, " must not be negative (nor NaN)");
  if (momentum && !(*momentum >= 0 && *momentum <= 1))
    fail<ValueError>("BatchNorm1d: momentum ", *momentum, " must be in [0, 1] (or None)");
  return wanted ? full({num_features}, value) : Tensor();
}

// Throws unless x is (N, C) or (N, C, L) with C = num_features, of a floating dtype.
void check_batch_norm_input(const Tensor& x, int64_t num_features) {
  if ((x.dim() != 2 && x.dim() != 3) || x.size(1) != num_features)
    fail<ShapeError>("BatchNorm1d: input of shape ", shape_str(x.shape()), " is neither (N, ",
        num_features, ") nor (N, ", num_features, ", L)");
  if (!is_floating_point(x.dtype()))
    fail<DTypeError>("BatchNorm1d: input of dtype ", dtype_name(x.dtype()), " and shape ",
        shape_str(x.shape()), " is not floating point; convert it first (x.to(ag::float32))");
}

// Throws unless the batch has values to take statistics of: one per channel at least, and more
// than one in training (PyTorch's rule: the unbiased variance of one value is undefined).
void check_batch_norm_count(const Tensor& x, int64_t count, bool training) {
  if (count == 0)
    fail<ShapeError>("BatchNorm1d: input of shape ", shape_str(x.shape()),
        " has no values per channel to take statistics of");
  if (training && count == 1)
    fail<ValueError>(
        "BatchNorm1d: expected more than 1 value per channel when training, got "
        "input of shape ",
        shape_str(x.shape()));
}

// Throws unless x ends in normalized_shape (the message names `layer`).
void check_normalized_input(const Tensor& x, const Shape& normalized_shape, const char* layer) {
  const int64_t n = static_cast<int64_t>(normalized_shape.size());
  const bool fits = x.dim() >= n && Shape(x.shape().end() - n, x.shape().end()) == normalized_shape;
  if (!fits)
    fail<ShapeError>(layer, ": input of shape ", shape_str(x.shape()),
        " does not end in normalized_shape ", shape_str(normalized_shape));
}

// The trailing dims of x that normalized_shape covers: {x.dim() − n, ..., x.dim() − 1}.
Shape normalized_dims(const Tensor& x, const Shape& normalized_shape) {
  Shape dims;
  for (int64_t d = x.dim() - static_cast<int64_t>(normalized_shape.size()); d < x.dim(); ++d)
    dims.push_back(d);
  return dims;
}

// A shape as Python prints a tuple of ints: "(4,)", "(3, 4)" (PyTorch's extra_repr of the norms).
std::string python_tuple(const Shape& shape) {
  std::string out = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + (shape.size() == 1 ? ",)" : ")");
}
}  // namespace

Linear::Linear(int64_t in, int64_t out, bool has_bias)
    : in_features(in),
      out_features(out),
      weight(register_parameter("weight", empty(linear_weight_shape(in, out)))),
      bias(register_parameter("bias", has_bias ? empty({out}) : Tensor())) {
  // torch.nn.Linear.reset_parameters: kaiming_uniform_(W, a=√5) gives U(±1/sqrt(in)), and the
  // bias is U(±1/sqrt(in)) too.
  init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (has_bias) {
    const double bound = 1.0 / std::sqrt(static_cast<double>(in));
    init::uniform_(bias, -bound, bound);
  }
}

Tensor Linear::forward(const Tensor& x) const {
  if (x.dim() == 0 || x.size(-1) != in_features)
    fail<ShapeError>("Linear: input of shape ", shape_str(x.shape()),
        " does not end in in_features = ", in_features);
  // y = x · Wᵀ + b: (..., in)·(in, out) + (out) -> (..., out)
  if (fused_kernels()) return linear(x, weight, bias);  // one op
  Tensor y = matmul(x, weight.transpose(0, 1));         // (..., in)·(in, out) -> (..., out)
  return bias.defined() ? y + bias : y;                 // + (out), broadcast
}

std::string Linear::extra_repr() const {
  return "in_features=" + std::to_string(in_features) +
         ", out_features=" + std::to_string(out_features) + ", bias=" + python_bool(bias.defined());
}

GELU::GELU(std::string how) : approximate(std::move(how)) {
  if (approximate != "none" && approximate != "tanh")
    fail<ValueError>("GELU: approximate '", approximate, "' is not 'none' or 'tanh'");
}

Dropout::Dropout(double probability) : p(probability) {
  if (!(p >= 0.0 && p <= 1.0)) fail<ValueError>("Dropout: probability ", p, " is outside [0, 1]");
}

std::string Dropout::extra_repr() const { return "p=" + python_float(p) + ", inplace=False"; }

Embedding::Embedding(int64_t num, int64_t dim)
    : num_embeddings(num),
      embedding_dim(dim),
      weight(register_parameter("weight", empty(embedding_shape(num, dim)))) {
  init::normal_(weight, 0.0, 1.0);
}

Tensor Embedding::forward(const Tensor& indices) const {
  Shape out_shape = indices.shape();
  out_shape.push_back(embedding_dim);
  // Rows of the table, one per index: (N,) indices -> (N, dim), then the indices' shape back.
  return index_select(weight, 0, indices.reshape({-1})).reshape(out_shape);
}

std::string Embedding::extra_repr() const {
  return std::to_string(num_embeddings) + ", " + std::to_string(embedding_dim);
}

LayerNorm::LayerNorm(
    std::vector<int64_t> shape, double epsilon, bool elementwise_affine, bool has_bias)
    : normalized_shape(std::move(shape)),
      eps(epsilon),
      weight(register_parameter(
          "weight", layer_norm_weight(normalized_shape, eps, elementwise_affine))),
      bias(register_parameter(
          "bias", elementwise_affine && has_bias ? zeros(normalized_shape) : Tensor())) {}

Tensor LayerNorm::forward(const Tensor& x) const {
  check_normalized_input(x, normalized_shape, "LayerNorm");
  // The fused kernel: one op, whose backward saves only x, weight and each row's mean and rstd.
  if (fused_kernels())
    return layer_norm(x, normalized_shape, weight, bias, eps);  // (..., *normalized_shape)
  // The composed d2l path: mean, var, sub, add, sqrt, div, mul, add.
  const Shape dims = normalized_dims(x, normalized_shape);
  Tensor mu = mean(x, dims, /*keepdim=*/true);                       // (..., 1)
  Tensor sigma2 = var(x, dims, /*correction=*/0, /*keepdim=*/true);  // (..., 1), biased
  Tensor normalized = (x - mu) / sqrt(sigma2 + eps);                 // (..., *normalized_shape)
  const Tensor scaled = weight.defined() ? normalized * weight : normalized;
  return bias.defined() ? scaled + bias : scaled;
}

std::string LayerNorm::extra_repr() const {
  // PyTorch's: '{normalized_shape}, eps={eps}, elementwise_affine={elementwise_affine}' (2.1
  // added bias without adding it to the repr)
  return python_tuple(normalized_shape) + ", eps=" + python_float(eps) +
         ", elementwise_affine=" + python_bool(weight.defined());
}

RMSNorm::RMSNorm(std::vector<int64_t> shape, std::optional<double> epsilon, bool elementwise_affine)
    : normalized_shape(std::move(shape)),
      eps(epsilon),
      weight(register_parameter(
          "weight", rms_norm_weight(normalized_shape, eps, elementwise_affine))) {}

Tensor RMSNorm::forward(const Tensor& x) const {
  check_normalized_input(x, normalized_shape, "RMSNorm");
  if (!is_floating_point(x.dtype()))
    fail<DTypeError>("RMSNorm: input of dtype ", dtype_name(x.dtype()), " and shape ",
        shape_str(x.shape()), " is not floating point; convert it first (x.to(ag::float32))");
  // The fused kernel: one op, whose backward saves only x, weight and each row's rstd.
  if (fused_kernels()) return rms_norm(x, normalized_shape, weight, eps);  // (..., *normalized)
  // The composed path, as Llama writes it: x * rsqrt(x.pow(2).mean(-1, keepdim) + eps) * w.
  const double epsilon = eps.value_or(machine_epsilon(x.dtype()));  // PyTorch's default
  Tensor mean_square = mean(x * x, normalized_dims(x, normalized_shape),
      /*keepdim=*/true);                                 // (..., 1 per normalized dim)
  Tensor normalized = x * rsqrt(mean_square + epsilon);  // (..., *normalized_shape)
  return weight.defined() ? normalized * weight : normalized;
}

BatchNorm1d::BatchNorm1d(int64_t features, double epsilon, std::optional<double> momentum_factor,
    bool affine, bool track_running_stats)
    : num_features(features),
      eps(epsilon),
      momentum(momentum_factor),
      weight(register_parameter(
          "weight", batch_norm_channels(features, epsilon, momentum_factor, affine, 1.0))),
      bias(register_parameter("bias", affine ? zeros({features}) : Tensor())),
      running_mean(
          register_buffer("running_mean", track_running_stats ? zeros({features}) : Tensor())),
      running_var(
          register_buffer("running_var", track_running_stats ? ones({features}) : Tensor())),
      num_batches_tracked(register_buffer(
          "num_batches_tracked", track_running_stats ? zeros({}, int64) : Tensor())) {}

Tensor BatchNorm1d::forward(const Tensor& x) const {
  check_batch_norm_input(x, num_features);                    // (N, C) or (N, C, L), floating
  const Shape dims = x.dim() == 2 ? Shape{0} : Shape{0, 2};   // all but the channels
  Shape channel_shape(static_cast<std::size_t>(x.dim()), 1);  // (1, C) or (1, C, 1)
  channel_shape[1] = num_features;
  const bool batch_statistics = is_training() || !running_mean.defined();
  Tensor normalized;  // (N, C) or (N, C, L)
  if (batch_statistics) {
    const int64_t count = x.numel() / num_features;  // the values per channel
    check_batch_norm_count(x, count, is_training());
    const Tensor mean_x = mean(x, dims, /*keepdim=*/true);                  // (1, C[, 1])
    const Tensor var_x = var(x, dims, /*correction=*/0, /*keepdim=*/true);  // biased, (1, C[, 1])
    normalized = (x - mean_x) * rsqrt(var_x + eps);
    if (is_training() && running_mean.defined()) {
      // running ← (1 − f) · running + f · batch, the variance unbiased: · count / (count − 1)
      NoGradGuard no_grad;
      const int64_t batches = num_batches_tracked.item<int64_t>() + 1;
      num_batches_tracked.fill_(static_cast<double>(batches));  // (exact below 2^53)
      const double f = momentum.value_or(1.0 / static_cast<double>(batches));
      const double unbiased = static_cast<double>(count) / static_cast<double>(count - 1);
      const Tensor batch_mean = mean_x.reshape({num_features}).to(running_mean.dtype());  // (C)
      const Tensor batch_var = (var_x * unbiased).reshape({num_features}).to(running_var.dtype());
      running_mean.copy_(running_mean * (1 - f) + batch_mean * f);
      running_var.copy_(running_var * (1 - f) + batch_var * f);
    }
  } else {
    normalized =
        (x - running_mean.reshape(channel_shape)) * rsqrt(running_var.reshape(channel_shape) + eps);
  }
  if (!weight.defined()) return normalized;
  return normalized * weight.reshape(channel_shape) + bias.reshape(channel_shape);
}

std::string BatchNorm1d::extra_repr() const {
  // PyTorch's: '{num_features}, eps={eps}, momentum={momentum}, affine={affine},
  // track_running_stats={track_running_stats}'
  return std::to_string(num_features) + ", eps=" + python_float(eps) +
         ", momentum=" + (momentum ? python_float(*momentum) : "None") +
         ", affine=" + python_bool(weight.defined()) +
         ", track_running_stats=" + python_bool(running_mean.defined());
}

std::string RMSNorm::extra_repr() const {
  // PyTorch's: '{normalized_shape}, eps={eps}, elementwise_affine={elementwise_affine}'
  return python_tuple(normalized_shape) + ", eps=" + (eps ? python_float(*eps) : "None") +
         ", elementwise_affine=" + python_bool(weight.defined());
}

}  // namespace ag::nn
