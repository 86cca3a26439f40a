#include "nn/transformer.h"

#include <cmath>

#include "nn/fused.h"

namespace ag::nn {

namespace {

// The last forward's weights of one attention module of every block, in block order:
// per_block_weights<TransformerDecoderBlock>(*blks, &TransformerDecoderBlock::attention2).
template <class Block>
std::vector<Tensor> per_block_weights(
    const ModuleList& blks, std::shared_ptr<MultiHeadAttention> Block::*attention) {
  std::vector<Tensor> weights;
  for (std::size_t i = 0; i < blks.size(); ++i)
    weights.push_back(((*blks.at<Block>(i)).*attention)->attention_weights());  // (B, H, Q, K)
  return weights;
}

}  // namespace

// ---- PositionWiseFFN, AddNorm -------------------------------------------------------------------

PositionWiseFFN::PositionWiseFFN(
    int64_t ffn_num_input, int64_t ffn_num_hiddens, int64_t ffn_num_outputs) {
  dense1 = register_module("dense1", std::make_shared<Linear>(ffn_num_input, ffn_num_hiddens));
  relu = register_module("relu", std::make_shared<ReLU>());
  dense2 = register_module("dense2", std::make_shared<Linear>(ffn_num_hiddens, ffn_num_outputs));
}

Tensor PositionWiseFFN::forward(const Tensor& X) const {
  // dense1 and relu as one op (the same values): (B, T, in) -> (B, T, hidden)
  if (fused_kernels())
    return dense2->forward(linear_relu(X, dense1->weight, dense1->bias));  // (B, T, out)
  return dense2->forward(
      relu->forward(dense1->forward(X)));  // (B, T, in) -> (B, T, hidden) -> (B, T, out)
}

SwiGLUFFN::SwiGLUFFN(
    int64_t ffn_num_input, int64_t ffn_num_hiddens, int64_t ffn_num_outputs, bool bias) {
  // Registered in Meta's order (its state dict's): w1, w2, w3.
  w1 = register_module("w1", std::make_shared<Linear>(ffn_num_input, ffn_num_hiddens, bias));
  w2 = register_module("w2", std::make_shared<Linear>(ffn_num_hiddens, ffn_num_outputs, bias));
  w3 = register_module("w3", std::make_shared<Linear>(ffn_num_input, ffn_num_hiddens, bias));
}

Tensor SwiGLUFFN::forward(const Tensor& X) const {
  Tensor gate = silu(w1->forward(X));  // (B, T, hidden)
  Tensor up = w3->forward(X);          // (B, T, hidden)
  return w2->forward(gate * up);       // (B, T, hidden) -> (B, T, out)
}

AddNorm::AddNorm(std::vector<int64_t> normalized_shape, double p) {
  dropout = register_module("dropout", std::make_shared<Dropout>(p));
  ln = register_module("ln", std::make_shared<LayerNorm>(std::move(normalized_shape)));
}

Tensor AddNorm::forward(const Tensor& X, const Tensor& Y) const {
  // The fused op computes the same as the composed line below, with one pass for the sum.
  if (fused_kernels() && X.shape() == Y.shape())
    return dropout_add_layer_norm(X, Y, ln->normalized_shape, ln->weight, ln->bias, ln->eps,
        dropout->p, dropout->is_training(), default_generator());  // (B, T, D)
  return ln->forward(dropout->forward(Y) + X);                     // (B, T, D)
}

// ---- what the encoder and the decoder share -----------------------------------------------------

TransformerStack::TransformerStack(int64_t vocab_size, int64_t hiddens, double dropout)
    : num_hiddens(hiddens) {
  embedding = register_module("embedding", std::make_shared<Embedding>(vocab_size, num_hiddens));
  pos_encoding =
      register_module("pos_encoding", std::make_shared<PositionalEncoding>(num_hiddens, dropout));
  blks = register_module("blks", std::make_shared<ModuleList>());
}

Tensor TransformerStack::embed(const Tensor& tokens, int64_t first_position) {
  Tensor scaled = embedding->forward(tokens) * std::sqrt(static_cast<double>(num_hiddens));
  return pos_encoding->forward(scaled, first_position);  // (B, T, D)
}

// ---- encoder ------------------------------------------------------------------------------------

TransformerEncoderBlock::TransformerEncoderBlock(int64_t key_size, int64_t query_size,
    int64_t value_size, int64_t num_hiddens, std::vector<int64_t> norm_shape, int64_t ffn_num_input,
    int64_t ffn_num_hiddens, int64_t num_heads, double dropout, bool use_bias) {
  attention =
      register_module("attention", std::make_shared<MultiHeadAttention>(key_size, query_size,
                                       value_size, num_hiddens, num_heads, dropout, use_bias));
  addnorm1 = register_module("addnorm1", std::make_shared<AddNorm>(norm_shape, dropout));
  ffn = register_module(
      "ffn", std::make_shared<PositionWiseFFN>(ffn_num_input, ffn_num_hiddens, num_hiddens));
  addnorm2 = register_module("addnorm2", std::make_shared<AddNorm>(norm_shape, dropout));
}

Tensor TransformerEncoderBlock::forward(const Tensor& X, const Tensor& valid_lens) {
  Tensor Y = addnorm1->forward(X, attention->forward(X, X, X, valid_lens));  // (B, T, D)
  return addnorm2->forward(Y, ffn->forward(Y));                              // (B, T, D)
}

TransformerEncoder::TransformerEncoder(int64_t vocab_size, int64_t key_size, int64_t query_size,
    int64_t value_size, int64_t hiddens, std::vector<int64_t> norm_shape, int64_t ffn_num_input,
    int64_t ffn_num_hiddens, int64_t num_heads, int64_t num_layers, double dropout, bool use_bias)
    : TransformerStack(vocab_size, hiddens, dropout) {
  for (int64_t i = 0; i < num_layers; ++i)
    blks->push_back(std::make_shared<TransformerEncoderBlock>(key_size, query_size, value_size,
        num_hiddens, norm_shape, ffn_num_input, ffn_num_hiddens, num_heads, dropout, use_bias));
}

Tensor TransformerEncoder::forward(const Tensor& tokens, const Tensor& valid_lens) {
  Tensor X = embed(tokens);  // (B, T, D)
  for (std::size_t i = 0; i < blks->size(); ++i)
    X = blks->at<TransformerEncoderBlock>(i)->forward(X, valid_lens);  // (B, T, D)
  return X;
}

std::vector<Tensor> TransformerEncoder::attention_weights() const {
  return per_block_weights(*blks, &TransformerEncoderBlock::attention);
}

// ---- decoder ------------------------------------------------------------------------------------

TransformerDecoderBlock::TransformerDecoderBlock(int64_t key_size, int64_t query_size,
    int64_t value_size, int64_t num_hiddens, std::vector<int64_t> norm_shape, int64_t ffn_num_input,
    int64_t ffn_num_hiddens, int64_t num_heads, double dropout, int64_t index)
    : i(index) {
  attention1 =
      register_module("attention1", std::make_shared<MultiHeadAttention>(key_size, query_size,
                                        value_size, num_hiddens, num_heads, dropout));
  addnorm1 = register_module("addnorm1", std::make_shared<AddNorm>(norm_shape, dropout));
  attention2 =
      register_module("attention2", std::make_shared<MultiHeadAttention>(key_size, query_size,
                                        value_size, num_hiddens, num_heads, dropout));
  addnorm2 = register_module("addnorm2", std::make_shared<AddNorm>(norm_shape, dropout));
  ffn = register_module(
      "ffn", std::make_shared<PositionWiseFFN>(ffn_num_input, ffn_num_hiddens, num_hiddens));
  addnorm3 = register_module("addnorm3", std::make_shared<AddNorm>(norm_shape, dropout));
}

Tensor TransformerDecoderBlock::forward(const Tensor& X, DecoderState& state) {
  if (i < 0 || static_cast<std::size_t>(i) >= state.key_values.size())
    fail<ValueError>("TransformerDecoderBlock: block ", i, " has no slot in a state with ",
        state.key_values.size(), " blocks");
  const int64_t B = X.size(0), T = X.size(1);
  // The keys and values of self-attention: every position decoded so far, then the new ones.
  Tensor& cache = state.key_values[static_cast<std::size_t>(i)];
  const int64_t past = cache.defined() ? cache.size(1) : 0;
  Tensor key_values = cache.defined() ? concat({cache, X}, 1) : X;  // (B, past + T, D)
  // Causal mask: new position t (absolute position past + t) sees keys 0 … past + t, so its
  // valid length is past + t + 1. (B, T) lengths, one per query.
  Tensor dec_valid_lens =
      arange(static_cast<double>(past + 1), static_cast<double>(past + T + 1), 1, X.dtype())
          .reshape({1, T})
          .expand({B, T});
  Tensor X2 = attention1->forward(X, key_values, key_values, dec_valid_lens);  // (B, T, D)
  Tensor Y = addnorm1->forward(X, X2);
  // Encoder–decoder attention: queries from the decoder, keys and values from the encoder.
  Tensor Y2 = attention2->forward(Y, state.enc_outputs, state.enc_outputs, state.enc_valid_lens);
  Tensor Z = addnorm2->forward(Y, Y2);
  Tensor out = addnorm3->forward(Z, ffn->forward(Z));  // (B, T, D)
  cache = key_values;  // only once the step succeeded, so a failed call leaves the state as it was
  return out;
}

TransformerDecoder::TransformerDecoder(int64_t vocab_size, int64_t key_size, int64_t query_size,
    int64_t value_size, int64_t hiddens, std::vector<int64_t> norm_shape, int64_t ffn_num_input,
    int64_t ffn_num_hiddens, int64_t num_heads, int64_t layers, double dropout)
    : TransformerStack(vocab_size, hiddens, dropout), num_layers(layers) {
  for (int64_t i = 0; i < num_layers; ++i)
    blks->push_back(std::make_shared<TransformerDecoderBlock>(key_size, query_size, value_size,
        num_hiddens, norm_shape, ffn_num_input, ffn_num_hiddens, num_heads, dropout, i));
  dense = register_module("dense", std::make_shared<Linear>(num_hiddens, vocab_size));
}

DecoderState TransformerDecoder::init_state(
    const Tensor& enc_outputs, const Tensor& enc_valid_lens) const {
  return {enc_outputs, enc_valid_lens, std::vector<Tensor>(static_cast<std::size_t>(num_layers))};
}

Tensor TransformerDecoder::forward(const Tensor& tokens, DecoderState& state) {
  const int64_t past =
      state.key_values.empty() || !state.key_values[0].defined() ? 0 : state.key_values[0].size(1);
  // New tokens continue the positions decoded so far: they get P[past : past + T].
  if (tokens.dim() == 2 && past + tokens.size(1) > pos_encoding->max_len)
    fail<ShapeError>("TransformerDecoder: ", past, " cached + ", tokens.size(1),
        " new positions exceed max_len ", pos_encoding->max_len);
  Tensor X = embed(tokens, past);  // (B, T, D)
  // If a later block throws, the caches of the earlier ones must not keep the new positions.
  const std::vector<Tensor> saved_caches = state.key_values;
  try {
    for (std::size_t i = 0; i < blks->size(); ++i)
      X = blks->at<TransformerDecoderBlock>(i)->forward(X, state);  // (B, T, D)
  } catch (...) {
    state.key_values = saved_caches;
    throw;
  }
  return dense->forward(X);  // (B, T, V)
}

std::vector<Tensor> TransformerDecoder::self_attention_weights() const {
  return per_block_weights(*blks, &TransformerDecoderBlock::attention1);
}

std::vector<Tensor> TransformerDecoder::cross_attention_weights() const {
  return per_block_weights(*blks, &TransformerDecoderBlock::attention2);
}

// ---- encoder–decoder ----------------------------------------------------------------------------

EncoderDecoder::EncoderDecoder(
    std::shared_ptr<TransformerEncoder> enc, std::shared_ptr<TransformerDecoder> dec) {
  encoder = register_module("encoder", std::move(enc));
  decoder = register_module("decoder", std::move(dec));
}

Tensor EncoderDecoder::forward(
    const Tensor& enc_X, const Tensor& dec_X, const Tensor& enc_valid_lens) {
  Tensor enc_outputs = encoder->forward(enc_X, enc_valid_lens);  // (B, T_enc, D)
  DecoderState state = decoder->init_state(enc_outputs, enc_valid_lens);
  return decoder->forward(dec_X, state);  // (B, T_dec, V)
}

}  // namespace ag::nn
