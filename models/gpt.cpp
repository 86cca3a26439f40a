// nanoGPT's GPT: the layers' constructors and forward passes (models/gpt.h).
#include "models/gpt.h"

#include <algorithm>
#include <cmath>

#include "autograd/autograd.h"
#include "autograd/error.h"
#include "autograd/ops.h"
#include "models/lm.h"
#include "nn/init.h"

namespace ag::gpt {

CausalSelfAttention::CausalSelfAttention(const GPTConfig& config)
    : n_head(config.n_head), n_embd(config.n_embd), dropout(config.dropout) {
  // key, query, value projections for all heads, but in a batch: one Linear
  c_attn = register_module("c_attn", std::make_shared<nn::Linear>(n_embd, 3 * n_embd, config.bias));
  // output projection
  c_proj = register_module("c_proj", std::make_shared<nn::Linear>(n_embd, n_embd, config.bias));
  resid_dropout = register_module("resid_dropout", std::make_shared<nn::Dropout>(dropout));
}

Tensor CausalSelfAttention::forward(const Tensor& x) const {
  // batch size, sequence length, embedding dimensionality (n_embd)
  const int64_t B = x.size(0), T = x.size(1), C = x.size(2);
  // query, key, value for all heads in one product, then the heads moved next to the batch
  const std::vector<Tensor> qkv = split(c_attn->forward(x), n_embd, 2);      // 3 x (B, T, C)
  const Tensor q = qkv[0].view({B, T, n_head, C / n_head}).transpose(1, 2);  // (B, nh, T, hs)
  const Tensor k = qkv[1].view({B, T, n_head, C / n_head}).transpose(1, 2);  // (B, nh, T, hs)
  const Tensor v = qkv[2].view({B, T, n_head, C / n_head}).transpose(1, 2);  // (B, nh, T, hs)
  // causal self-attention, softmax(q kᵀ / √hs, keys after the query masked) v, in one fused
  // kernel: PyTorch 2's F.scaled_dot_product_attention(q, k, v, is_causal=True), which nanoGPT
  // calls its flash attention. The heads are read in place (views of c_attn's output).
  Tensor y = attention(q, k, v,
      {.is_causal = true, .dropout_p = dropout, .training = is_training()});  // (B, nh, T, hs)
  y = y.transpose(1, 2).contiguous().view({B, T, C});  // the heads side by side again
  // output projection
  return resid_dropout->forward(c_proj->forward(y));  // (B, T, C)
}

MLP::MLP(const GPTConfig& config) {
  c_fc = register_module(
      "c_fc", std::make_shared<nn::Linear>(config.n_embd, 4 * config.n_embd, config.bias));
  gelu = register_module("gelu", std::make_shared<nn::GELU>());  // the exact erf form
  c_proj = register_module(
      "c_proj", std::make_shared<nn::Linear>(4 * config.n_embd, config.n_embd, config.bias));
  dropout = register_module("dropout", std::make_shared<nn::Dropout>(config.dropout));
}

Tensor MLP::forward(Tensor x) const {
  x = c_fc->forward(x);    // (B, T, 4C)
  x = gelu->forward(x);    // (B, T, 4C)
  x = c_proj->forward(x);  // (B, T, C)
  return dropout->forward(x);
}

Block::Block(const GPTConfig& config) {
  ln_1 = register_module("ln_1", layer_norm(config));
  attn = register_module("attn", std::make_shared<CausalSelfAttention>(config));
  ln_2 = register_module("ln_2", layer_norm(config));
  mlp = register_module("mlp", std::make_shared<MLP>(config));
}

Tensor Block::forward(Tensor x) const {
  x = x + attn->forward(ln_1->forward(x));  // (B, T, C)
  x = x + mlp->forward(ln_2->forward(x));   // (B, T, C)
  return x;
}

GPT::GPT(const GPTConfig& c) : config(c) {
  // self.transformer = nn.ModuleDict(dict(wte=..., wpe=..., drop=..., h=..., ln_f=...)): the
  // names of the state dict, "transformer.h.0.attn.c_attn.weight", are nanoGPT's, so that a
  // safetensors file of either model loads into the other.
  transformer = register_module("transformer", std::make_shared<nn::ModuleDict>());
  wte = transformer->insert("wte", std::make_shared<nn::Embedding>(c.vocab_size, c.n_embd));
  wpe = transformer->insert("wpe", std::make_shared<nn::Embedding>(c.block_size, c.n_embd));
  drop = transformer->insert("drop", std::make_shared<nn::Dropout>(c.dropout));
  h = transformer->insert("h", std::make_shared<nn::ModuleList>());
  for (int64_t i = 0; i < c.n_layer; ++i) h->push_back(std::make_shared<Block>(c));
  ln_f = transformer->insert("ln_f", Block::layer_norm(c));
  lm_head = register_module(
      "lm_head", std::make_shared<nn::Linear>(c.n_embd, c.vocab_size, /*bias=*/false));
  // weight tying: the output layer's weight is the token embedding — one (V, C) tensor, listed
  // once by parameters() (as "transformer.wte.weight") and saved under both names
  wte->weight = lm_head->weight;

  // init all weights: N(0, 0.02) for every Linear and Embedding weight, zero biases
  apply([](nn::Module& m) {
    if (auto* linear = dynamic_cast<nn::Linear*>(&m)) {
      nn::init::normal_(linear->weight, 0.0, 0.02);
      if (linear->bias.defined()) nn::init::zeros_(linear->bias);
    } else if (auto* embedding = dynamic_cast<nn::Embedding*>(&m)) {
      nn::init::normal_(embedding->weight, 0.0, 0.02);
    }
  });
  // apply special scaled init to the residual projections, per GPT-2 paper: the 2·n_layer
  // projections that add into the residual stream start smaller, so that the stream's variance
  // does not grow with the depth
  for (const auto& [name, p] : named_parameters())
    if (name.ends_with("c_proj.weight"))
      nn::init::normal_(p, 0.0, 0.02 / std::sqrt(2.0 * static_cast<double>(c.n_layer)));
}

GPT::Output GPT::forward(const Tensor& idx, const Tensor& targets) const {
  const int64_t t = idx.size(1);
  if (t > config.block_size)
    fail<ValueError>(
        "GPT: cannot forward a sequence of length ", t, ", block size is only ", config.block_size);
  const Tensor pos = arange(0, static_cast<double>(t), 1, int64);  // (T)

  // forward the GPT model itself
  const Tensor tok_emb = wte->forward(idx);     // token embeddings (B, T, C)
  const Tensor pos_emb = wpe->forward(pos);     // position embeddings (T, C)
  Tensor x = drop->forward(tok_emb + pos_emb);  // (B, T, C)
  for (const auto& block : *h) x = std::static_pointer_cast<Block>(block)->forward(x);
  x = ln_f->forward(x);  // (B, T, C)

  if (targets.defined()) {
    // if we are given some desired targets also calculate the loss
    const Tensor logits = lm_head->forward(x);  // (B, T, V)
    const Tensor loss = cross_entropy(logits.reshape({-1, logits.size(-1)}), targets.reshape({-1}),
        Reduction::mean, /*ignore_index=*/-1);  // (B·T, V), (B·T) -> ()
    return {logits, loss};
  }
  // inference-time mini-optimization: only forward the lm_head on the very last position
  return {lm_head->forward(x.narrow(1, t - 1, 1)), Tensor()};  // (B, 1, V)
}

std::vector<int64_t> GPT::generate(std::vector<int64_t> idx, int64_t max_new_tokens,
    double temperature, int64_t top_k, Generator& generator) {
  NoGradGuard no_grad;
  eval();
  const lm::Sampling sampling{temperature, std::min(top_k, config.vocab_size)};
  for (int64_t i = 0; i < max_new_tokens; ++i) {
    // if the sequence context is growing too long we must crop it at block_size
    const auto start = idx.size() > static_cast<std::size_t>(config.block_size)
                           ? idx.end() - config.block_size
                           : idx.begin();
    const std::vector<int64_t> idx_cond(start, idx.end());
    const Tensor logits = forward(tensor(idx_cond, {1, static_cast<int64_t>(idx_cond.size())}))
                              .logits.to(float64);  // (1, 1, V)
    idx.push_back(lm::sample_token(logits.to_vector<double>(), sampling, generator));
  }
  train();
  return idx;
}

}  // namespace ag::gpt
