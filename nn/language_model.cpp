#include "nn/language_model.h"

#include <cmath>

#include "nn/init.h"

namespace ag::nn {

// ---- the cache ----------------------------------------------------------------------------------

int64_t KVCache::length() const { return keys.empty() || !keys[0].defined() ? 0 : keys[0].size(2); }

void KVCache::clear() {
  for (Tensor& k : keys) k = Tensor();
  for (Tensor& v : values) v = Tensor();
}

// ---- one block ----------------------------------------------------------------------------------

DecoderOnlyBlock::DecoderOnlyBlock(int64_t num_hiddens, int64_t ffn_num_hiddens, int64_t num_heads,
    double p, bool pre, int64_t index)
    : i(index), pre_norm(pre) {
  // d2l: key_size = query_size = value_size = num_hiddens, no bias in the projections.
  attention =
      register_module("attention", std::make_shared<MultiHeadAttention>(num_hiddens, num_hiddens,
                                       num_hiddens, num_hiddens, num_heads, p));
  ffn = register_module(
      "ffn", std::make_shared<PositionWiseFFN>(num_hiddens, ffn_num_hiddens, num_hiddens));
  const std::vector<int64_t> norm_shape{num_hiddens};
  if (pre_norm) {
    ln1 = register_module("ln1", std::make_shared<LayerNorm>(norm_shape));
    ln2 = register_module("ln2", std::make_shared<LayerNorm>(norm_shape));
    dropout = register_module("dropout", std::make_shared<Dropout>(p));
  } else {
    addnorm1 = register_module("addnorm1", std::make_shared<AddNorm>(norm_shape, p));
    addnorm2 = register_module("addnorm2", std::make_shared<AddNorm>(norm_shape, p));
  }
}

namespace {
// (B, T, D) -> (B, T, H, D/H) -> (B, H, T, D/H): d2l's transpose_qkv without moving the heads into
// the batch (a view).
Tensor split_heads(const Tensor& X, int64_t num_heads) {
  return X.reshape({X.size(0), X.size(1), num_heads, -1}).permute({0, 2, 1, 3});
}
}  // namespace

Tensor DecoderOnlyBlock::self_attention(const Tensor& X, KVCache* cache) {
  const int64_t B = X.size(0), T = X.size(1), H = attention->num_heads;
  Tensor q = split_heads(attention->W_q->forward(X), H);  // (B, H, T, D/H)
  Tensor k = split_heads(attention->W_k->forward(X), H);  // (B, H, T, D/H)
  Tensor v = split_heads(attention->W_v->forward(X), H);  // (B, H, T, D/H)
  int64_t S = 0;
  if (cache != nullptr) {
    Tensor& cached_k = cache->keys[static_cast<std::size_t>(i)];
    Tensor& cached_v = cache->values[static_cast<std::size_t>(i)];
    if (cached_k.defined()) {
      S = cached_k.size(2);
      k = concat({cached_k, k}, 2);  // (B, H, S + T, D/H)
      v = concat({cached_v, v}, 2);  // (B, H, S + T, D/H)
    }
  }
  // Causal mask: new position t (absolute S + t) sees keys 0 … S + t, a valid length of S + t + 1
  // per query, (B, T).
  Tensor valid_lens =
      arange(static_cast<double>(S + 1), static_cast<double>(S + T + 1), 1, X.dtype())
          .reshape({1, T})
          .expand({B, T});
  Tensor heads = attention->attention->forward_heads(q, k, v, valid_lens);  // (B, H, T, D/H)
  Tensor joined = heads.permute({0, 2, 1, 3}).reshape({B, T, -1});          // (B, T, D)
  Tensor out = attention->W_o->forward(joined);                             // (B, T, D)
  if (cache != nullptr) {
    cache->keys[static_cast<std::size_t>(i)] = k;
    cache->values[static_cast<std::size_t>(i)] = v;
  }
  return out;
}

Tensor DecoderOnlyBlock::forward(const Tensor& X, KVCache* cache) {
  if (X.dim() != 3 || X.size(2) != attention->W_q->in_features)
    fail<ShapeError>("DecoderOnlyBlock: input of shape ", shape_str(X.shape()), " is not (B, T, ",
        attention->W_q->in_features, ")");
  if (cache != nullptr && (i < 0 || static_cast<std::size_t>(i) >= cache->keys.size() ||
                              cache->keys.size() != cache->values.size()))
    fail<ValueError>("DecoderOnlyBlock: block ", i, " has no slot in a cache of ",
        cache->keys.size(), " blocks");
  if (pre_norm) {
    // GPT-2: x + attn(ln_1(x)), then x + mlp(ln_2(x)); the residual stream is never normalised.
    Tensor Y = X + dropout->forward(self_attention(ln1->forward(X), cache));  // (B, T, D)
    return Y + dropout->forward(ffn->forward(ln2->forward(Y)));               // (B, T, D)
  }
  Tensor Y = addnorm1->forward(X, self_attention(X, cache));  // (B, T, D)
  return addnorm2->forward(Y, ffn->forward(Y));               // (B, T, D)
}

// ---- the model ----------------------------------------------------------------------------------

LanguageModel::LanguageModel(const LanguageModelConfig& c) : config(c) {
  if (c.vocab_size <= 0 || c.num_hiddens <= 0 || c.num_layers <= 0 || c.ffn_num_hiddens <= 0 ||
      c.block_size <= 0)
    fail<ValueError>("LanguageModel: vocab_size ", c.vocab_size, ", num_hiddens ", c.num_hiddens,
        ", num_layers ", c.num_layers, ", ffn_num_hiddens ", c.ffn_num_hiddens, " and block_size ",
        c.block_size, " must be positive");
  embedding =
      register_module("embedding", std::make_shared<Embedding>(c.vocab_size, c.num_hiddens));
  if (c.tie_weights) {
    // The embedding is read twice: scaled by √D at the input, and as the output layer, where
    // N(0, 1) rows would make logits of size √D. N(0, 1/D) makes embedding · √D N(0, 1) as untied
    // and unit-scale logits (the scaling of "Attention Is All You Need", §3.4).
    init::normal_(embedding->weight, 0.0, 1.0 / std::sqrt(static_cast<double>(c.num_hiddens)));
  }
  if (c.learned_positions)
    pos_embedding = register_module("pos_encoding",
        std::make_shared<LearnedPositionalEncoding>(c.num_hiddens, c.dropout, c.block_size));
  else
    pos_encoding = register_module("pos_encoding",
        std::make_shared<PositionalEncoding>(c.num_hiddens, c.dropout, c.block_size));
  blks = register_module("blks", std::make_shared<ModuleList>());
  for (int64_t i = 0; i < c.num_layers; ++i)
    blks->push_back(std::make_shared<DecoderOnlyBlock>(
        c.num_hiddens, c.ffn_num_hiddens, c.num_heads, c.dropout, c.pre_norm, i));
  if (c.pre_norm)
    ln_f =
        register_module("ln_f", std::make_shared<LayerNorm>(std::vector<int64_t>{c.num_hiddens}));
  if (!c.tie_weights)
    dense = register_module("dense", std::make_shared<Linear>(c.num_hiddens, c.vocab_size));
}

KVCache LanguageModel::make_cache() const {
  KVCache cache;
  cache.keys.resize(static_cast<std::size_t>(config.num_layers));
  cache.values.resize(static_cast<std::size_t>(config.num_layers));
  return cache;
}

Tensor LanguageModel::forward(const Tensor& tokens, KVCache* cache) {
  if (tokens.dim() != 2 || tokens.size(1) == 0)
    fail<ShapeError>("LanguageModel: tokens of shape ", shape_str(tokens.shape()),
        " are not (B, T) with T >= 1");
  if (cache != nullptr && cache->keys.size() != static_cast<std::size_t>(config.num_layers))
    fail<ValueError>("LanguageModel: a cache of ", cache->keys.size(), " blocks for a model of ",
        config.num_layers, " (use make_cache())");
  const int64_t S = cache != nullptr ? cache->length() : 0, T = tokens.size(1);
  if (cache != nullptr && S > 0 && cache->keys[0].size(0) != tokens.size(0))
    fail<ShapeError>("LanguageModel: tokens of shape ", shape_str(tokens.shape()),
        " for a cache of batch ", cache->keys[0].size(0));
  if (S + T > config.block_size)
    fail<ShapeError>("LanguageModel: ", S, " cached + ", T, " new positions exceed block_size ",
        config.block_size, " (crop the context to the last block_size tokens)");
  // d2l's TransformerDecoder: embeddings scaled by √D, then the positions S … S + T − 1.
  Tensor scaled = embedding->forward(tokens) * std::sqrt(static_cast<double>(config.num_hiddens));
  Tensor X = pos_encoding ? pos_encoding->forward(scaled, S)
                          : pos_embedding->forward(scaled, S);  // (B, T, D)
  // If a later block throws, the earlier blocks' caches must not keep the new positions.
  KVCache saved;
  if (cache != nullptr) saved = *cache;
  try {
    for (std::size_t b = 0; b < blks->size(); ++b)
      X = blks->at<DecoderOnlyBlock>(b)->forward(X, cache);  // (B, T, D)
  } catch (...) {
    if (cache != nullptr) *cache = saved;
    throw;
  }
  if (ln_f) X = ln_f->forward(X);                       // (B, T, D)
  if (dense) return dense->forward(X);                  // (B, T, V)
  return matmul(X, embedding->weight.transpose(0, 1));  // (B, T, D)·(D, V) -> (B, T, V)
}

std::vector<Tensor> LanguageModel::attention_weights() const {
  std::vector<Tensor> weights;
  for (std::size_t b = 0; b < blks->size(); ++b)
    weights.push_back(blks->at<DecoderOnlyBlock>(b)->attention->attention_weights());
  return weights;
}

}  // namespace ag::nn
