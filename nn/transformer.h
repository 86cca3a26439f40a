// The Transformer of d2l.ai (section "Transformer"), built from the attention layers:
// PositionWiseFFN, AddNorm, TransformerEncoderBlock, TransformerEncoder, TransformerDecoderBlock,
// TransformerDecoder and EncoderDecoder, with the arguments of d2l's code.
//
// Dimension names: B batch, T sequence length, D num_hiddens, V vocabulary size.
#pragma once

#include <vector>

#include "nn/attention.h"

namespace ag::nn {

// Two Linear layers with a ReLU between them, applied at every position alike. With fused kernels
// on (nn/fused.h), dense1 and the ReLU are one op, ag::linear_relu.
class PositionWiseFFN : public Module {
 public:
  PositionWiseFFN(int64_t ffn_num_input, int64_t ffn_num_hiddens, int64_t ffn_num_outputs);
  Tensor forward(const Tensor& X) const;  // (B, T, in) -> (B, T, out)
  Tensor operator()(const Tensor& X) const { return forward(X); }
  std::string type_name() const override { return "PositionWiseFFN"; }

  std::shared_ptr<Linear> dense1;
  std::shared_ptr<ReLU> relu;
  std::shared_ptr<Linear> dense2;
};

// Llama's feed-forward (Meta's FeedForward; the SwiGLU of Shazeer 2020, "GLU Variants Improve
// Transformer"): a gated pair of projections to the hidden width, then one back,
//   SwiGLUFFN(X) = w2(silu(w1(X)) ⊙ w3(X))
// with Meta's names: w1 the gate (in -> hidden), w3 the "up" projection (in -> hidden), w2 the
// "down" projection (hidden -> out) — Hugging Face's Llama calls them gate_proj, up_proj and
// down_proj. No biases by default, as Llama's. (Llama takes the hidden width 2/3 of a ReLU FFN's 4D,
// so that its three matrices hold as many weights as the ReLU FFN's two; here it is an argument.)
class SwiGLUFFN : public Module {
 public:
  SwiGLUFFN(
      int64_t ffn_num_input, int64_t ffn_num_hiddens, int64_t ffn_num_outputs, bool bias = false);
  Tensor forward(const Tensor& X) const;  // (B, T, in) -> (B, T, out)
  Tensor operator()(const Tensor& X) const { return forward(X); }
  std::string type_name() const override { return "SwiGLUFFN"; }

  std::shared_ptr<Linear> w1;  // gate: in -> hidden
  std::shared_ptr<Linear> w2;  // down: hidden -> out
  std::shared_ptr<Linear> w3;  // up: in -> hidden
};

// The residual connection followed by layer normalisation: LayerNorm(dropout(Y) + X).
class AddNorm : public Module {
 public:
  AddNorm(std::vector<int64_t> normalized_shape, double dropout);
  Tensor forward(const Tensor& X, const Tensor& Y) const;  // (B, T, D), (B, T, D) -> (B, T, D)
  Tensor operator()(const Tensor& X, const Tensor& Y) const { return forward(X, Y); }
  std::string type_name() const override { return "AddNorm"; }

  std::shared_ptr<Dropout> dropout;
  std::shared_ptr<LayerNorm> ln;
};

// Self-attention and a position-wise FFN, each wrapped in AddNorm.
class TransformerEncoderBlock : public Module {
 public:
  TransformerEncoderBlock(int64_t key_size, int64_t query_size, int64_t value_size,
      int64_t num_hiddens, std::vector<int64_t> norm_shape, int64_t ffn_num_input,
      int64_t ffn_num_hiddens, int64_t num_heads, double dropout, bool use_bias = false);
  // X (B, T, D), valid_lens (B,) or undefined -> (B, T, D)
  Tensor forward(const Tensor& X, const Tensor& valid_lens);
  Tensor operator()(const Tensor& X, const Tensor& valid_lens) { return forward(X, valid_lens); }
  std::string type_name() const override { return "TransformerEncoderBlock"; }

  std::shared_ptr<MultiHeadAttention> attention;  // self-attention: X attends to X
  std::shared_ptr<AddNorm> addnorm1;              // Y = AddNorm(X, attention's output)
  std::shared_ptr<PositionWiseFFN> ffn;           // applied to Y at every position
  std::shared_ptr<AddNorm> addnorm2;              // AddNorm(Y, ffn(Y))
};

// What d2l's TransformerEncoder and TransformerDecoder share: token embeddings scaled by √D plus
// the positional encoding, feeding a list of blocks that each subclass fills.
class TransformerStack : public Module {
 public:
  // tokens (B, T) at positions first_position … first_position + T − 1
  //   -> dropout(embedding(tokens) · √D + P[first_position : first_position + T]) (B, T, D)
  // The embedding is scaled by √D before the positions are added, whose entries lie in [−1, 1].
  // From d2l's N(0, 1) embeddings a token's entries are then some √D times its position's: the
  // tokens all but drown the positions. ag-train --embedding-init scaled starts the embeddings
  // N(0, 1/D), so that after the √D both are the same size (docs/training.md).
  Tensor embed(const Tensor& tokens, int64_t first_position = 0);

  int64_t num_hiddens;
  std::shared_ptr<Embedding> embedding;
  std::shared_ptr<PositionalEncoding> pos_encoding;
  std::shared_ptr<ModuleList> blks;

 protected:
  TransformerStack(int64_t vocab_size, int64_t num_hiddens, double dropout);
};

// Token embedding scaled by √D, positional encoding, then num_layers encoder blocks.
class TransformerEncoder : public TransformerStack {
 public:
  TransformerEncoder(int64_t vocab_size, int64_t key_size, int64_t query_size, int64_t value_size,
      int64_t num_hiddens, std::vector<int64_t> norm_shape, int64_t ffn_num_input,
      int64_t ffn_num_hiddens, int64_t num_heads, int64_t num_layers, double dropout,
      bool use_bias = false);
  // tokens (B, T) of integer ids, valid_lens (B,) -> (B, T, D)
  Tensor forward(const Tensor& tokens, const Tensor& valid_lens);
  Tensor operator()(const Tensor& tokens, const Tensor& valid_lens) {
    return forward(tokens, valid_lens);
  }
  std::string type_name() const override { return "TransformerEncoder"; }
  // Self-attention weights of the last forward, one (B, H, T, T) per block.
  std::vector<Tensor> attention_weights() const;
};

// What the decoder carries between calls: the encoder's outputs and valid lengths, and for each
// block the inputs of its self-attention seen so far (the key/value cache of step-by-step
// decoding, as d2l keeps it).
struct DecoderState {
  Tensor enc_outputs;              // (B, T_enc, D)
  Tensor enc_valid_lens;           // (B,) or undefined
  std::vector<Tensor> key_values;  // per block: (B, steps so far, D), undefined before the first
};

// Causal (masked) self-attention, encoder–decoder attention and an FFN, each with AddNorm.
// Query t may attend to every position up to and including itself — in training and in
// evaluation alike (d2l's evaluation path drops this mask; here it is always on, so a full
// forward and step-by-step decoding agree).
class TransformerDecoderBlock : public Module {
 public:
  TransformerDecoderBlock(int64_t key_size, int64_t query_size, int64_t value_size,
      int64_t num_hiddens, std::vector<int64_t> norm_shape, int64_t ffn_num_input,
      int64_t ffn_num_hiddens, int64_t num_heads, double dropout, int64_t i);
  // X (B, T, D): the new positions; state.key_values[i] grows by T positions -> (B, T, D)
  Tensor forward(const Tensor& X, DecoderState& state);
  Tensor operator()(const Tensor& X, DecoderState& state) { return forward(X, state); }
  std::string type_name() const override { return "TransformerDecoderBlock"; }

  int64_t i;  // this block's index in the decoder (its slot in state.key_values)
  std::shared_ptr<MultiHeadAttention> attention1;  // causal self-attention over the decoded tokens
  std::shared_ptr<AddNorm> addnorm1;
  std::shared_ptr<MultiHeadAttention> attention2;  // encoder–decoder attention
  std::shared_ptr<AddNorm> addnorm2;
  std::shared_ptr<PositionWiseFFN> ffn;
  std::shared_ptr<AddNorm> addnorm3;
};

class TransformerDecoder : public TransformerStack {
 public:
  TransformerDecoder(int64_t vocab_size, int64_t key_size, int64_t query_size, int64_t value_size,
      int64_t num_hiddens, std::vector<int64_t> norm_shape, int64_t ffn_num_input,
      int64_t ffn_num_hiddens, int64_t num_heads, int64_t num_layers, double dropout);
  DecoderState init_state(const Tensor& enc_outputs, const Tensor& enc_valid_lens) const;
  // tokens (B, T) -> logits (B, T, V). Call with all target tokens at once (training), or one
  // step at a time with the same state (decoding): both give the same numbers in eval mode.
  Tensor forward(const Tensor& tokens, DecoderState& state);
  Tensor operator()(const Tensor& tokens, DecoderState& state) { return forward(tokens, state); }
  std::string type_name() const override { return "TransformerDecoder"; }
  // Per block, the last forward's self-attention and encoder–decoder attention weights (B, H, Q,
  // K).
  std::vector<Tensor> self_attention_weights() const;
  std::vector<Tensor> cross_attention_weights() const;

  int64_t num_layers;
  std::shared_ptr<Linear> dense;
};

// The encoder–decoder: decoder(dec_X, decoder.init_state(encoder(enc_X, valid_lens), valid_lens)).
class EncoderDecoder : public Module {
 public:
  EncoderDecoder(
      std::shared_ptr<TransformerEncoder> encoder, std::shared_ptr<TransformerDecoder> decoder);
  // enc_X (B, T_enc), dec_X (B, T_dec), enc_valid_lens (B,) -> logits (B, T_dec, V)
  Tensor forward(const Tensor& enc_X, const Tensor& dec_X, const Tensor& enc_valid_lens);
  Tensor operator()(const Tensor& enc_X, const Tensor& dec_X, const Tensor& enc_valid_lens) {
    return forward(enc_X, dec_X, enc_valid_lens);
  }
  std::string type_name() const override { return "EncoderDecoder"; }

  std::shared_ptr<TransformerEncoder> encoder;
  std::shared_ptr<TransformerDecoder> decoder;
};

}  // namespace ag::nn
