// nanoGPT's GPT (Karpathy's model.py), on ag's layers: token and learned position embeddings,
// pre-norm blocks with one fused QKV Linear and causal attention in ag's fused kernel, a GELU MLP,
// a final LayerNorm, the head tied to the token embedding, nanoGPT's initialisation (N(0, 0.02),
// the residual projections N(0, 0.02/√(2·n_layer)), zero biases). The module and parameter names
// are model.py's ("transformer.h.0.attn.c_attn.weight"), so a state dict or safetensors file of
// either loads into the other. examples/nanogpt/ trains it with train.py's recipe;
// docs/nanogpt.md maps each Python line to its C++ line.
//
//   ag::gpt::GPT model({.block_size = 64, .vocab_size = 65, .n_layer = 4, .n_head = 4,
//                       .n_embd = 128});
//   auto [logits, loss] = model.forward(idx, targets);  // (B, T) ids -> (B, T, V), ()
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "autograd/generator.h"
#include "autograd/tensor.h"
#include "nn/layers.h"
#include "nn/module.h"

namespace ag::gpt {

struct GPTConfig {
  int64_t block_size = 64, vocab_size = 0, n_layer = 4, n_head = 4, n_embd = 128;
  double dropout = 0.0;
  bool bias = false;  // True: bias in Linears and LayerNorms, like GPT-2. False: a bit better and
                      // faster
};

class CausalSelfAttention : public nn::Module {
 public:
  explicit CausalSelfAttention(const GPTConfig& config);

  Tensor forward(const Tensor& x) const;  // (B, T, C) -> (B, T, C)
  std::string type_name() const override { return "CausalSelfAttention"; }

  int64_t n_head, n_embd;
  double dropout;
  std::shared_ptr<nn::Linear> c_attn, c_proj;
  std::shared_ptr<nn::Dropout> resid_dropout;
};

class MLP : public nn::Module {
 public:
  explicit MLP(const GPTConfig& config);
  Tensor forward(Tensor x) const;  // (B, T, C) -> (B, T, C)
  std::string type_name() const override { return "MLP"; }

  std::shared_ptr<nn::Linear> c_fc, c_proj;
  std::shared_ptr<nn::GELU> gelu;
  std::shared_ptr<nn::Dropout> dropout;
};

// A pre-norm block: each sublayer reads a normalised copy of the residual stream x and adds its
// output to it.
class Block : public nn::Module {
 public:
  explicit Block(const GPTConfig& config);
  Tensor forward(Tensor x) const;  // (B, T, C) -> (B, T, C)
  std::string type_name() const override { return "Block"; }

  // model.py's LayerNorm(ndim, bias): "LayerNorm but with an optional bias" — nn::LayerNorm takes
  // PyTorch 2.1's bias argument.
  static std::shared_ptr<nn::LayerNorm> layer_norm(const GPTConfig& config) {
    return std::make_shared<nn::LayerNorm>(
        std::vector<int64_t>{config.n_embd}, 1e-5, /*elementwise_affine=*/true, config.bias);
  }

  std::shared_ptr<nn::LayerNorm> ln_1, ln_2;
  std::shared_ptr<CausalSelfAttention> attn;
  std::shared_ptr<MLP> mlp;
};

class GPT : public nn::Module {
 public:
  explicit GPT(const GPTConfig& c);

  // The parameters, each once (the tied weight once). For the non-embedding count (default), the
  // position embeddings are subtracted; the token embeddings would be too, except that through
  // the tying they are the final layer's weights, so they are counted.
  int64_t get_num_params(bool non_embedding = true) const {
    int64_t n_params = num_parameters();
    if (non_embedding) n_params -= wpe->weight.numel();
    return n_params;
  }

  // idx (B, T) of token ids -> the logits, and with targets (B, T) the mean cross-entropy loss.
  struct Output {
    Tensor logits, loss;
  };
  Output forward(const Tensor& idx, const Tensor& targets = Tensor()) const;

  // sample.py's model.generate: continue idx by max_new_tokens, feeding the predictions back in,
  // each from the last block_size tokens: logits / temperature, only the top_k kept, softmax, one
  // draw (models/lm.h's sample_token).
  std::vector<int64_t> generate(std::vector<int64_t> idx, int64_t max_new_tokens,
      double temperature, int64_t top_k, Generator& generator);
  std::string type_name() const override { return "GPT"; }

  GPTConfig config;
  std::shared_ptr<nn::ModuleDict> transformer;
  std::shared_ptr<nn::Embedding> wte, wpe;
  std::shared_ptr<nn::Dropout> drop;
  std::shared_ptr<nn::ModuleList> h;
  std::shared_ptr<nn::LayerNorm> ln_f;
  std::shared_ptr<nn::Linear> lm_head;
};

}  // namespace ag::gpt
