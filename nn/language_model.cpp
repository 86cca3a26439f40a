#include "nn/language_model.h"

#include <cmath>

#include "nn/init.h"

namespace ag::nn {

// ---- the registries --------------------------------------------------------------------------

std::string position_scheme_name(PositionScheme scheme) {
  switch (scheme) {
#define AG_POSITION_SCHEME_NAME(name) \
  case PositionScheme::name:          \
    return #name;
    AG_POSITION_SCHEMES(AG_POSITION_SCHEME_NAME)
#undef AG_POSITION_SCHEME_NAME
  }
  fail<ValueError>("position_scheme_name: no scheme ", static_cast<int>(scheme));
}

PositionScheme parse_position_scheme(const std::string& name, const std::string& what) {
  std::string known;
  for (PositionScheme scheme : kPositionSchemes) {
    if (position_scheme_name(scheme) == name) return scheme;
    known += (known.empty() ? "" : ", ") + position_scheme_name(scheme);
  }
  fail<ValueError>(what, ": unknown positions '", name, "' (known: ", known, ")");
}

bool relative_positions(PositionScheme scheme) {
  return scheme != PositionScheme::sinusoidal && scheme != PositionScheme::learned;
}

std::string normalization_name(Normalization norm) {
  return norm == Normalization::layer ? "layer" : "rms";
}

Normalization parse_normalization(const std::string& name, const std::string& what) {
  if (name == "layer") return Normalization::layer;
  if (name == "rms") return Normalization::rms;
  fail<ValueError>(what, ": unknown norm '", name, "' (known: layer, rms)");
}

std::string feed_forward_name(FeedForward ffn) {
  return ffn == FeedForward::relu ? "relu" : "swiglu";
}

FeedForward parse_feed_forward(const std::string& name, const std::string& what) {
  if (name == "relu") return FeedForward::relu;
  if (name == "swiglu") return FeedForward::swiglu;
  fail<ValueError>(what, ": unknown feed-forward '", name, "' (known: relu, swiglu)");
}

// ---- the cache ----------------------------------------------------------------------------------

int64_t KVCache::length() const { return keys.empty() || !keys[0].defined() ? 0 : keys[0].size(2); }

void KVCache::clear() {
  for (Tensor& k : keys) k = Tensor();
  for (Tensor& v : values) v = Tensor();
  first_position = 0;
}

void KVCache::drop_oldest(int64_t n) {
  const int64_t S = length();
  if (n < 0 || n > S) fail<ValueError>("KVCache::drop_oldest: ", n, " positions of a cache of ", S);
  for (std::vector<Tensor>* slots : {&keys, &values})
    for (Tensor& slot : *slots)
      if (slot.defined()) slot = slot.narrow(2, n, slot.size(2) - n);  // (B, Hkv, S − n, D/H)
  first_position += n;
}

// ---- one block ----------------------------------------------------------------------------------

namespace {
// The positions a block's attention has inside (rope, alibi), as MultiHeadAttention's options.
MultiHeadAttentionOptions attention_options(const LanguageModelConfig& c) {
  MultiHeadAttentionOptions options;
  options.num_kv_heads = c.num_kv_heads;
  options.rope_pairs = c.rope_pairs;
  options.rope_base = c.rope_base;
  if (c.positions == PositionScheme::rope) options.positions = AttentionPositions::rope;
  if (c.positions == PositionScheme::alibi) options.positions = AttentionPositions::alibi;
  return options;
}
}  // namespace

DecoderOnlyBlock::DecoderOnlyBlock(const LanguageModelConfig& c, int64_t index)
    : i(index), pre_norm(c.pre_norm) {
  const int64_t D = c.num_hiddens;
  // d2l: key_size = query_size = value_size = num_hiddens, no bias in the projections.
  attention =
      register_module("attention", std::make_shared<MultiHeadAttention>(D, D, D, D, c.num_heads,
                                       c.dropout, false, attention_options(c)));
  if (c.ffn == FeedForward::swiglu)
    swiglu = register_module("ffn", std::make_shared<SwiGLUFFN>(D, c.ffn_num_hiddens, D));
  else
    ffn = register_module("ffn", std::make_shared<PositionWiseFFN>(D, c.ffn_num_hiddens, D));
  const std::vector<int64_t> norm_shape{D};
  if (pre_norm) {
    if (c.norm == Normalization::rms) {
      rms1 = register_module("ln1", std::make_shared<RMSNorm>(norm_shape));
      rms2 = register_module("ln2", std::make_shared<RMSNorm>(norm_shape));
    } else {
      ln1 = register_module("ln1", std::make_shared<LayerNorm>(norm_shape));
      ln2 = register_module("ln2", std::make_shared<LayerNorm>(norm_shape));
    }
    dropout = register_module("dropout", std::make_shared<Dropout>(c.dropout));
  } else {
    if (c.norm != Normalization::layer)
      fail<ValueError>("DecoderOnlyBlock: norm '", normalization_name(c.norm),
          "' needs pre_norm: d2l's post-norm blocks normalise with AddNorm's LayerNorm");
    addnorm1 = register_module("addnorm1", std::make_shared<AddNorm>(norm_shape, c.dropout));
    addnorm2 = register_module("addnorm2", std::make_shared<AddNorm>(norm_shape, c.dropout));
  }
}

Tensor DecoderOnlyBlock::feed_forward(const Tensor& X) const {
  return swiglu ? swiglu->forward(X) : ffn->forward(X);  // (B, T, D)
}

Tensor DecoderOnlyBlock::norm(const LayerNorm* layer, const RMSNorm* rms, const Tensor& X) const {
  return layer ? layer->forward(X) : rms->forward(X);  // (B, T, D)
}

Tensor DecoderOnlyBlock::forward(const Tensor& X, KVCache* cache) {
  if (X.dim() != 3 || X.size(2) != attention->W_q->in_features)
    fail<ShapeError>("DecoderOnlyBlock: input of shape ", shape_str(X.shape()), " is not (B, T, ",
        attention->W_q->in_features, ")");
  if (cache != nullptr && (i < 0 || static_cast<std::size_t>(i) >= cache->keys.size() ||
                              cache->keys.size() != cache->values.size()))
    fail<ValueError>("DecoderOnlyBlock: block ", i, " has no slot in a cache of ",
        cache->keys.size(), " blocks");
  Tensor* keys = cache ? &cache->keys[static_cast<std::size_t>(i)] : nullptr;
  Tensor* values = cache ? &cache->values[static_cast<std::size_t>(i)] : nullptr;
  // The positions of X: after what this block's slot holds (the earlier blocks' slots have grown
  // already in this call).
  const int64_t first = cache ? cache->first_position + (keys->defined() ? keys->size(2) : 0) : 0;
  auto self_attention = [&](const Tensor& input) {
    return attention->causal_self_attention(input, first, keys, values);  // (B, T, D)
  };
  if (pre_norm) {
    // GPT-2: x + attn(ln_1(x)), then x + mlp(ln_2(x)); the residual stream is never normalised.
    Tensor Y = X + dropout->forward(self_attention(norm(ln1.get(), rms1.get(), X)));  // (B, T, D)
    return Y + dropout->forward(feed_forward(norm(ln2.get(), rms2.get(), Y)));        // (B, T, D)
  }
  Tensor Y = addnorm1->forward(X, self_attention(X));  // (B, T, D)
  return addnorm2->forward(Y, feed_forward(Y));        // (B, T, D)
}

// ---- the model ----------------------------------------------------------------------------------

LanguageModel::LanguageModel(const LanguageModelConfig& c) : config(c), max_context_(c.block_size) {
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
  if (c.positions == PositionScheme::learned)
    pos_embedding = register_module("pos_encoding",
        std::make_shared<LearnedPositionalEncoding>(c.num_hiddens, c.dropout, c.block_size));
  else if (c.positions == PositionScheme::sinusoidal)
    pos_encoding = register_module("pos_encoding",
        std::make_shared<PositionalEncoding>(c.num_hiddens, c.dropout, c.block_size));
  else  // the positions are inside the attention, or nowhere: the embeddings' dropout alone
    embedding_dropout = register_module("dropout", std::make_shared<Dropout>(c.dropout));
  blks = register_module("blks", std::make_shared<ModuleList>());
  for (int64_t i = 0; i < c.num_layers; ++i)
    blks->push_back(std::make_shared<DecoderOnlyBlock>(c, i));
  const std::vector<int64_t> norm_shape{c.num_hiddens};
  if (c.pre_norm && c.norm == Normalization::rms)
    rms_f = register_module("ln_f", std::make_shared<RMSNorm>(norm_shape));
  else if (c.pre_norm)
    ln_f = register_module("ln_f", std::make_shared<LayerNorm>(norm_shape));
  if (!c.tie_weights)
    dense = register_module("dense", std::make_shared<Linear>(c.num_hiddens, c.vocab_size));
}

KVCache LanguageModel::make_cache() const {
  KVCache cache;
  cache.keys.resize(static_cast<std::size_t>(config.num_layers));
  cache.values.resize(static_cast<std::size_t>(config.num_layers));
  return cache;
}

void LanguageModel::extend_context(int64_t positions) {
  if (positions < 1)
    fail<ValueError>("LanguageModel::extend_context: ", positions, " positions (at least 1)");
  if (pos_embedding && positions > config.block_size)
    fail<ValueError>("LanguageModel::extend_context: learned positions have a row for each of the ",
        config.block_size, " positions the model was trained on (block_size), none for position ",
        config.block_size, " and beyond; asked for ", positions);
  if (pos_encoding) pos_encoding->set_max_len(positions);
  max_context_ = positions;
}

Tensor LanguageModel::forward(const Tensor& tokens, KVCache* cache) {
  if (tokens.dim() != 2 || tokens.size(1) == 0)
    fail<ShapeError>("LanguageModel: tokens of shape ", shape_str(tokens.shape()),
        " are not (B, T) with T >= 1");
  if (cache != nullptr && cache->keys.size() != static_cast<std::size_t>(config.num_layers))
    fail<ValueError>("LanguageModel: a cache of ", cache->keys.size(), " blocks for a model of ",
        config.num_layers, " (use make_cache())");
  const int64_t S = cache != nullptr ? cache->length() : 0, T = tokens.size(1);
  const int64_t first = cache != nullptr ? cache->next_position() : 0;
  if (cache != nullptr && S > 0 && cache->keys[0].size(0) != tokens.size(0))
    fail<ShapeError>("LanguageModel: tokens of shape ", shape_str(tokens.shape()),
        " for a cache of batch ", cache->keys[0].size(0));
  if (S + T > max_context_)
    fail<ShapeError>("LanguageModel: ", S, " cached + ", T, " new positions exceed ",
        max_context_ == config.block_size ? "block_size " : "the context of ", max_context_,
        relative_positions(config.positions)
            ? " (crop the context, or slide the cache: KVCache::drop_oldest)"
            : " (crop the context to the last block_size tokens)");
  if (cache != nullptr && cache->first_position > 0 && !relative_positions(config.positions))
    fail<ValueError>("LanguageModel: a cache slid to position ", cache->first_position, " for ",
        position_scheme_name(config.positions),
        " positions, which are absolute: its keys were computed at positions that have changed");
  // d2l's TransformerDecoder: embeddings scaled by √D, then the positions first … first + T − 1.
  Tensor scaled = embedding->forward(tokens) * std::sqrt(static_cast<double>(config.num_hiddens));
  Tensor X = pos_encoding    ? pos_encoding->forward(scaled, first)
             : pos_embedding ? pos_embedding->forward(scaled, first)
                             : embedding_dropout->forward(scaled);  // (B, T, D)
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
  if (rms_f) X = rms_f->forward(X);                     // (B, T, D)
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
