// The basic layers: Linear, Dropout, ReLU, Embedding, LayerNorm, RMSNorm — torch.nn's names,
// arguments, parameter names and initialisation.
#pragma once

#include <optional>
#include <vector>

#include "nn/module.h"

namespace ag::nn {

// Parameters are members bound to the module's slots (nn/module.h): `lm_head->weight =
// wte->weight` ties two layers, as in PyTorch.
//
// y = x Wᵀ + b.  W: (out_features, in_features), b: (out_features) — PyTorch's layout, so
// checkpoints and PyTorch state dicts line up. Wᵀ is a strided view read by BLAS with a
// transpose flag, never copied. Init as torch.nn.Linear: W and b uniform in ±1/sqrt(in_features).
// One op, ag::linear, with fused kernels on (nn/fused.h); matmul then add on the composed path.
class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true);
  Tensor forward(const Tensor& x) const;  // (..., in) -> (..., out)
  Tensor operator()(const Tensor& x) const { return forward(x); }
  std::string type_name() const override { return "Linear"; }
  std::string extra_repr() const override;

  int64_t in_features, out_features;
  Tensor& weight;  // (out, in)
  Tensor& bias;    // (out), undefined when bias = false
};

// Inverted dropout with probability p (see ag::dropout); the identity in eval mode. Draws its
// masks from the default generator.
class Dropout : public Module {
 public:
  explicit Dropout(double p = 0.5);
  Tensor forward(const Tensor& x) const { return dropout(x, p, is_training()); }
  Tensor operator()(const Tensor& x) const { return forward(x); }
  std::string type_name() const override { return "Dropout"; }
  std::string extra_repr() const override;

  double p;
};

// Activations as modules, torch.nn's: for a Sequential, or a member a forward calls.
class ReLU : public Module {
 public:
  Tensor forward(const Tensor& x) const { return relu(x); }
  Tensor operator()(const Tensor& x) const { return forward(x); }
  std::string type_name() const override { return "ReLU"; }
};

// approximate "none" (exact, PyTorch's default) or "tanh" (GPT-2's); ValueError otherwise.
class GELU : public Module {
 public:
  explicit GELU(std::string approximate = "none");
  Tensor forward(const Tensor& x) const { return gelu(x, approximate); }
  Tensor operator()(const Tensor& x) const { return forward(x); }
  std::string type_name() const override { return "GELU"; }
  std::string extra_repr() const override { return "approximate='" + approximate + "'"; }

  std::string approximate;
};

class SiLU : public Module {
 public:
  Tensor forward(const Tensor& x) const { return silu(x); }
  Tensor operator()(const Tensor& x) const { return forward(x); }
  std::string type_name() const override { return "SiLU"; }
};

class Tanh : public Module {
 public:
  Tensor forward(const Tensor& x) const { return tanh(x); }
  Tensor operator()(const Tensor& x) const { return forward(x); }
  std::string type_name() const override { return "Tanh"; }
};

// A table of num_embeddings vectors of size embedding_dim, looked up by integer index; init
// N(0, 1) as torch.nn.Embedding.
class Embedding : public Module {
 public:
  Embedding(int64_t num_embeddings, int64_t embedding_dim);
  // indices: any shape (...) of integer values in any dtype -> (..., embedding_dim)
  Tensor forward(const Tensor& indices) const;
  Tensor operator()(const Tensor& indices) const { return forward(indices); }
  std::string type_name() const override { return "Embedding"; }
  std::string extra_repr() const override;

  int64_t num_embeddings, embedding_dim;
  Tensor& weight;  // (num_embeddings, embedding_dim)
};

// y = (x − mean) / sqrt(var + eps) · weight + bias over the last normalized_shape.size() dims,
// with the biased variance, as torch.nn.LayerNorm. weight starts at 1, bias at 0. With
// fused_kernels() (the default) it is the one op ag::layer_norm; otherwise it is composed of
// mean, var and elementwise ops as in d2l (nn/fused.h).
// PyTorch 2.1's arguments: bias = false leaves out the shift, y = x̂ · weight (nanoGPT's
// `LayerNorm(ndim, bias=False)`, GPT-2 without biases); elementwise_affine = false leaves out
// both, y = x̂. A parameter left out is an empty slot (PyTorch's None), absent from
// named_parameters() and state_dict().
class LayerNorm : public Module {
 public:
  explicit LayerNorm(std::vector<int64_t> normalized_shape, double eps = 1e-5,
      bool elementwise_affine = true, bool bias = true);
  Tensor forward(const Tensor& x) const;
  Tensor operator()(const Tensor& x) const { return forward(x); }
  std::string type_name() const override { return "LayerNorm"; }
  std::string extra_repr() const override;

  std::vector<int64_t> normalized_shape;
  double eps;
  Tensor& weight;  // normalized_shape; undefined without elementwise_affine
  Tensor& bias;    // normalized_shape; undefined without elementwise_affine or without bias
};

// y = x / sqrt(mean(x²) + eps) · weight over the last normalized_shape.size() dims, as
// torch.nn.RMSNorm (PyTorch 2.4; Zhang & Sennrich 2019, the normalisation of Llama): each row
// scaled by its root mean square, neither centred nor shifted. eps nullopt: the machine epsilon of
// x's dtype (ag::machine_epsilon), PyTorch's default. weight starts at 1; without
// elementwise_affine there is none (an empty slot, as PyTorch's weight = None). With
// fused_kernels() (the default) it is the one op ag::rms_norm; otherwise it is composed as Llama
// writes it, x · rsqrt(mean(x · x) + eps) · weight (nn/fused.h).
class RMSNorm : public Module {
 public:
  explicit RMSNorm(std::vector<int64_t> normalized_shape, std::optional<double> eps = std::nullopt,
      bool elementwise_affine = true);
  Tensor forward(const Tensor& x) const;  // (..., *normalized_shape) -> the same shape
  Tensor operator()(const Tensor& x) const { return forward(x); }
  std::string type_name() const override { return "RMSNorm"; }
  std::string extra_repr() const override;  // "(4,), eps=None, elementwise_affine=True"

  std::vector<int64_t> normalized_shape;
  std::optional<double> eps;
  Tensor& weight;  // normalized_shape; undefined without elementwise_affine
};

// y = (x − mean) / sqrt(var + eps) · weight + bias per channel, as torch.nn.BatchNorm1d (Ioffe &
// Szegedy 2015; d2l's batch normalization, makemore's part 3), for x of shape (N, C) or (N, C, L).
// In training the statistics are the batch's, over N (and L), the variance biased; the running
// statistics then move towards them by `momentum` (nullopt: the cumulative average over the
// batches so far), the variance unbiased. In eval mode the running statistics normalise instead.
// weight starts at 1 and bias at 0 (neither without affine). Buffers, by PyTorch's state_dict
// names: running_mean (C), running_var (C) and num_batches_tracked (an int64 scalar); none
// without track_running_stats, which then normalises by the batch's statistics in eval mode too.
class BatchNorm1d : public Module {
 public:
  explicit BatchNorm1d(int64_t num_features, double eps = 1e-5,
      std::optional<double> momentum = 0.1, bool affine = true, bool track_running_stats = true);
  Tensor forward(const Tensor& x) const;  // (N, C) or (N, C, L) -> the same shape
  Tensor operator()(const Tensor& x) const { return forward(x); }
  std::string type_name() const override { return "BatchNorm1d"; }
  std::string extra_repr() const override;  // "4, eps=1e-05, momentum=0.1, affine=True, ..."

  int64_t num_features;
  double eps;
  std::optional<double> momentum;
  Tensor& weight;               // (C); undefined without affine
  Tensor& bias;                 // (C); undefined without affine
  Tensor& running_mean;         // (C); undefined without track_running_stats
  Tensor& running_var;          // (C); undefined without track_running_stats
  Tensor& num_batches_tracked;  // () int64; undefined without track_running_stats
};

}  // namespace ag::nn
