// Helpers shared by the nn tests: seeded inputs, element access, and bind(), which points a
// layer's parameter members at given tensors so that ag::gradcheck can differentiate with respect
// to the parameters (gradcheck hands f copies of its inputs, so f must compute from those copies).
#pragma once

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "autograd/autograd.h"
#include "autograd/gradcheck.h"
#include "autograd/ops.h"
#include "nn/nn.h"

namespace nn_test {

using ag::Shape;
using ag::Tensor;

// A float64 leaf requiring grad, uniform in [low, high), from its own seed.
inline Tensor input64(const Shape& shape, uint64_t seed, double low = -1.0, double high = 1.0) {
  ag::Generator generator(seed);
  return ag::uniform(shape, low, high, generator, ag::float64).requires_grad_();
}

// A float32 N(0, 1) tensor from its own seed (no grad).
inline Tensor randn32(const Shape& shape, uint64_t seed) {
  ag::Generator generator(seed);
  return ag::randn(shape, generator, ag::float32);
}

// Integer token ids in [0, vocab) as a float tensor of `dtype`, from its own seed.
inline Tensor tokens(
    const Shape& shape, int64_t vocab, uint64_t seed, ag::DType dtype = ag::float32) {
  ag::Generator generator(seed);
  std::vector<double> ids(static_cast<std::size_t>(ag::numel(shape)));
  for (double& id : ids) id = static_cast<double>(generator.randint(0, vocab));
  return ag::tensor(ids, shape, dtype);
}

inline std::vector<double> values(const Tensor& t) { return t.to_vector<double>(); }

// The element of `t` at a full multi-index.
inline double at(const Tensor& t, const Shape& index) {
  Tensor x = t;
  for (int64_t i : index) x = x.select(0, i);
  return x.item();
}

inline double max_abs_diff(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape()) throw std::logic_error("max_abs_diff: shapes differ");
  const std::vector<double> x = values(a), y = values(b);
  double worst = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double d = std::abs(x[i] - y[i]);
    if (!(d <= worst)) worst = d;  // NaN propagates as the worst
  }
  return worst;
}

inline bool all_finite(const Tensor& t) {
  for (double v : values(t))
    if (!std::isfinite(v)) return false;
  return true;
}

inline bool bit_identical(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && values(a) == values(b);
}

// ---- bind: point a module's parameter members at given tensors --------------------------------
// The tensors are taken in named_parameters() order. Every member must receive a tensor of its
// own shape, and bind_all checks that every tensor was used.

class Cursor {
 public:
  Cursor(const std::vector<Tensor>& tensors, std::size_t first) : tensors_(tensors), next_(first) {}
  void take(Tensor& member) {
    if (next_ >= tensors_.size()) throw std::logic_error("bind: ran out of tensors");
    const Tensor& t = tensors_[next_++];
    if (t.shape() != member.shape())
      throw std::logic_error("bind: tensor " + std::to_string(next_ - 1) + " has shape " +
                             ag::shape_str(t.shape()) + ", the member " +
                             ag::shape_str(member.shape()));
    member = t;
  }
  std::size_t next() const { return next_; }

 private:
  const std::vector<Tensor>& tensors_;
  std::size_t next_;
};

inline void bind(Cursor& c, ag::nn::Linear& m) {
  c.take(m.weight);
  if (m.bias.defined()) c.take(m.bias);
}
inline void bind(Cursor& c, ag::nn::Embedding& m) { c.take(m.weight); }
inline void bind(Cursor& c, ag::nn::LayerNorm& m) {
  if (m.weight.defined()) c.take(m.weight);
  if (m.bias.defined()) c.take(m.bias);
}
inline void bind(Cursor& c, ag::nn::BatchNorm1d& m) {
  c.take(m.weight);
  c.take(m.bias);
}
inline void bind(Cursor& c, ag::nn::RMSNorm& m) {
  if (m.weight.defined()) c.take(m.weight);
}
inline void bind(Cursor& c, ag::nn::LearnedPositionalEncoding& m) { c.take(m.P); }
inline void bind(Cursor& c, ag::nn::AdditiveAttention& m) {
  bind(c, *m.W_k);
  bind(c, *m.W_q);
  bind(c, *m.w_v);
}
inline void bind(Cursor& c, ag::nn::MultiHeadAttention& m) {
  bind(c, *m.W_q);
  bind(c, *m.W_k);
  bind(c, *m.W_v);
  bind(c, *m.W_o);
}
inline void bind(Cursor& c, ag::nn::PositionWiseFFN& m) {
  bind(c, *m.dense1);
  bind(c, *m.dense2);
}
inline void bind(Cursor& c, ag::nn::SwiGLUFFN& m) {
  bind(c, *m.w1);
  bind(c, *m.w2);
  bind(c, *m.w3);
}
inline void bind(Cursor& c, ag::nn::AddNorm& m) { bind(c, *m.ln); }
inline void bind(Cursor& c, ag::nn::TransformerEncoderBlock& m) {
  bind(c, *m.attention);
  bind(c, *m.addnorm1);
  bind(c, *m.ffn);
  bind(c, *m.addnorm2);
}
inline void bind(Cursor& c, ag::nn::TransformerDecoderBlock& m) {
  bind(c, *m.attention1);
  bind(c, *m.addnorm1);
  bind(c, *m.attention2);
  bind(c, *m.addnorm2);
  bind(c, *m.ffn);
  bind(c, *m.addnorm3);
}
inline void bind(Cursor& c, ag::nn::TransformerEncoder& m) {
  bind(c, *m.embedding);
  for (std::size_t i = 0; i < m.blks->size(); ++i)
    bind(c, *m.blks->at<ag::nn::TransformerEncoderBlock>(i));
}
inline void bind(Cursor& c, ag::nn::TransformerDecoder& m) {
  bind(c, *m.embedding);
  for (std::size_t i = 0; i < m.blks->size(); ++i)
    bind(c, *m.blks->at<ag::nn::TransformerDecoderBlock>(i));
  bind(c, *m.dense);
}
inline void bind(Cursor& c, ag::nn::EncoderDecoder& m) {
  bind(c, *m.encoder);
  bind(c, *m.decoder);
}

// Binds tensors[first..] to the parameters of `module`; all of them must be used.
template <class M>
void bind_all(M& module, const std::vector<Tensor>& tensors, std::size_t first = 0) {
  Cursor cursor(tensors, first);
  bind(cursor, module);
  if (cursor.next() != tensors.size())
    throw std::logic_error(
        "bind: " + std::to_string(tensors.size() - cursor.next()) + " tensors left over");
}

// `inputs` followed by the module's parameters: the inputs of a gradcheck over both.
inline std::vector<Tensor> with_parameters(
    std::vector<Tensor> inputs, const ag::nn::Module& module) {
  for (const Tensor& p : module.parameters()) inputs.push_back(p);
  return inputs;
}

// nanoGPT's weight tying in miniature: a token table and an output layer sharing one matrix.
struct TiedLM : ag::nn::Module {
  std::shared_ptr<ag::nn::Embedding> wte =
      register_module("wte", std::make_shared<ag::nn::Embedding>(5, 3));
  std::shared_ptr<ag::nn::Linear> lm_head =
      register_module("lm_head", std::make_shared<ag::nn::Linear>(3, 5, /*bias=*/false));
  TiedLM() { lm_head->weight = wte->weight; }  // nanoGPT: self.transformer.wte.weight = ...
  std::string type_name() const override { return "TiedLM"; }
};

}  // namespace nn_test

// Runs a gradcheck and reports its message on failure.
#define CHECK_GRADCHECK(...)                                  \
  do {                                                        \
    const ag::GradcheckResult gradcheck_result = __VA_ARGS__; \
    INFO(gradcheck_result.message);                           \
    CHECK(gradcheck_result.passed);                           \
  } while (false)
