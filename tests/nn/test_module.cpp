// The Module system: name checks, the dotted parameter tree of the full Transformer, counts,
// buffers, train/eval, zero_grad, to(float64), and the PyTorch reprs (checked against what
// PyTorch 1.13 prints for d2l's modules, with d2l's Sequential of blocks as a ModuleList).
#include <map>
#include <sstream>

#include "nn_test_util.h"
#include "optim/optimizer.h"

using namespace ag;
using Catch::Matchers::Contains;
using Catch::Matchers::Equals;
using nn_test::values;

namespace {

// A module that registers whatever the test asks for.
struct Registrar : nn::Module {
  std::string type_name() const override { return "Registrar"; }
  Tensor parameter(const std::string& name) { return register_parameter(name, zeros({2})); }
  Tensor buffer(const std::string& name) { return register_buffer(name, zeros({2})); }
  void child(const std::string& name) { register_module(name, std::make_shared<nn::ReLU>()); }
  void null_child(const std::string& name) { register_module(name, std::shared_ptr<nn::ReLU>()); }
  Tensor non_leaf_parameter(const std::string& name) {
    Tensor x = ones({2}).requires_grad_();
    return register_parameter(name, x * 2.0);
  }
};

// The small Transformer of these tests: V = 10, D = 8, FFN 16, 2 heads, `layers` blocks each.
std::shared_ptr<nn::EncoderDecoder> small_transformer(int64_t layers, double dropout = 0.0) {
  auto encoder = std::make_shared<nn::TransformerEncoder>(
      10, 8, 8, 8, 8, std::vector<int64_t>{8}, 8, 16, 2, layers, dropout);
  auto decoder = std::make_shared<nn::TransformerDecoder>(
      10, 8, 8, 8, 8, std::vector<int64_t>{8}, 8, 16, 2, layers, dropout);
  return std::make_shared<nn::EncoderDecoder>(encoder, decoder);
}

std::map<std::string, Tensor> as_map(const std::vector<std::pair<std::string, Tensor>>& named) {
  return {named.begin(), named.end()};
}

}  // namespace

// ---- registration -------------------------------------------------------------------------------

TEST_CASE("an empty name is refused, naming the module type", "[nn][module]") {
  Registrar m;
  CHECK_THROWS_AS(m.parameter(""), ValueError);
  CHECK_THROWS_WITH(m.parameter(""), Contains("Registrar") && Contains("empty"));
  CHECK_THROWS_WITH(m.buffer(""), Contains("Registrar") && Contains("empty"));
  CHECK_THROWS_WITH(m.child(""), Contains("Registrar") && Contains("empty"));
}

TEST_CASE("a name with a dot is refused, naming the module type and the name", "[nn][module]") {
  Registrar m;
  CHECK_THROWS_AS(m.parameter("a.b"), ValueError);
  CHECK_THROWS_WITH(
      m.parameter("a.b"), Contains("Registrar") && Contains("'a.b'") && Contains("dot"));
  CHECK_THROWS_WITH(m.buffer("x.y"), Contains("Registrar") && Contains("'x.y'"));
  CHECK_THROWS_WITH(m.child(".c"), Contains("Registrar") && Contains("'.c'"));
  CHECK(m.named_parameters().empty());  // nothing half-registered
}

TEST_CASE("a name already taken by a parameter, buffer or submodule is refused", "[nn][module]") {
  Registrar m;
  m.parameter("w");
  m.buffer("b");
  m.child("c");
  // Every kind clashes with every other kind: they share one namespace, as in PyTorch.
  for (const std::string name : {"w", "b", "c"}) {
    CHECK_THROWS_AS(m.parameter(name), ValueError);
    CHECK_THROWS_WITH(m.parameter(name),
        Contains("Registrar") && Contains("'" + name + "'") && Contains("already registered"));
    CHECK_THROWS_WITH(m.buffer(name), Contains("Registrar") && Contains("'" + name + "'"));
    CHECK_THROWS_WITH(m.child(name), Contains("Registrar") && Contains("'" + name + "'"));
  }
  CHECK(m.named_parameters().size() == 1);
  CHECK(m.named_buffers().size() == 1);
  CHECK(m.named_children().size() == 1);
}

TEST_CASE("a null submodule and a non-leaf parameter are refused", "[nn][module]") {
  Registrar m;
  CHECK_THROWS_AS(m.null_child("c"), ValueError);
  CHECK_THROWS_WITH(
      m.null_child("c"), Contains("Registrar") && Contains("'c'") && Contains("null"));
  CHECK_THROWS_AS(m.non_leaf_parameter("p"), ValueError);
  CHECK_THROWS_WITH(
      m.non_leaf_parameter("p"), Contains("Registrar") && Contains("'p'") && Contains("leaf"));
}

TEST_CASE("register_parameter marks the tensor as requiring grad — a buffer is left alone",
    "[nn][module]") {
  Registrar m;
  Tensor p = m.parameter("w");
  Tensor b = m.buffer("b");
  CHECK(p.requires_grad());
  CHECK_FALSE(b.requires_grad());
  CHECK(m.named_parameters()[0].second.impl_ptr() == p.impl_ptr());  // the same handle
}

// ---- the tree -----------------------------------------------------------------------------------

TEST_CASE(
    "named_parameters of the full Transformer: dotted paths, shapes and order", "[nn][module]") {
  manual_seed(0);
  auto model = small_transformer(2);
  const auto named = model->named_parameters();
  const auto by_name = as_map(named);
  REQUIRE(by_name.size() == named.size());  // names are unique

  const std::vector<std::pair<std::string, Shape>> expected_entries = {
      {"encoder.blks.0.attention.W_q.weight", {8, 8}},
      {"encoder.blks.1.ffn.dense1.bias", {16}},
      {"encoder.blks.1.ffn.dense1.weight", {16, 8}},
      {"encoder.blks.0.ffn.dense2.weight", {8, 16}},
      {"encoder.embedding.weight", {10, 8}},
      {"decoder.blks.0.attention2.W_k.weight", {8, 8}},
      {"decoder.blks.1.addnorm3.ln.bias", {8}},
      {"decoder.dense.weight", {10, 8}},
      {"decoder.dense.bias", {10}},
  };
  for (const auto& [name, shape] : expected_entries) {
    INFO(name);
    REQUIRE(by_name.count(name) == 1);
    CHECK(by_name.at(name).shape() == shape);
  }
  // No bias in the attention projections (use_bias = false, d2l's default).
  CHECK(by_name.count("encoder.blks.0.attention.W_q.bias") == 0);

  // The whole order, as PyTorch's named_parameters() lists d2l's model (registration order,
  // depth first). Layer 1 repeats layer 0, so the list of block 0 is checked in full and the
  // rest by its positions.
  const std::vector<std::string> encoder_block = {"attention.W_q.weight", "attention.W_k.weight",
      "attention.W_v.weight", "attention.W_o.weight", "addnorm1.ln.weight", "addnorm1.ln.bias",
      "ffn.dense1.weight", "ffn.dense1.bias", "ffn.dense2.weight", "ffn.dense2.bias",
      "addnorm2.ln.weight", "addnorm2.ln.bias"};
  const std::vector<std::string> decoder_block = {"attention1.W_q.weight", "attention1.W_k.weight",
      "attention1.W_v.weight", "attention1.W_o.weight", "addnorm1.ln.weight", "addnorm1.ln.bias",
      "attention2.W_q.weight", "attention2.W_k.weight", "attention2.W_v.weight",
      "attention2.W_o.weight", "addnorm2.ln.weight", "addnorm2.ln.bias", "ffn.dense1.weight",
      "ffn.dense1.bias", "ffn.dense2.weight", "ffn.dense2.bias", "addnorm3.ln.weight",
      "addnorm3.ln.bias"};
  std::vector<std::string> expected = {"encoder.embedding.weight"};
  for (const char* block : {"0", "1"})
    for (const auto& n : encoder_block)
      expected.push_back(std::string("encoder.blks.") + block + "." + n);
  expected.push_back("decoder.embedding.weight");
  for (const char* block : {"0", "1"})
    for (const auto& n : decoder_block)
      expected.push_back(std::string("decoder.blks.") + block + "." + n);
  expected.push_back("decoder.dense.weight");
  expected.push_back("decoder.dense.bias");

  std::vector<std::string> names;
  for (const auto& [name, tensor] : named) names.push_back(name);
  CHECK(names == expected);
}

TEST_CASE("named_parameters entries are the layers' own handles", "[nn][module]") {
  manual_seed(0);
  auto model = small_transformer(1);
  const auto by_name = as_map(model->named_parameters());
  auto block = model->encoder->blks->at<nn::TransformerEncoderBlock>(0);
  CHECK(by_name.at("encoder.blks.0.attention.W_q.weight").impl_ptr() ==
        block->attention->W_q->weight.impl_ptr());
  CHECK(by_name.at("encoder.blks.0.ffn.dense1.bias").impl_ptr() ==
        block->ffn->dense1->bias.impl_ptr());
  CHECK(by_name.at("decoder.dense.weight").impl_ptr() == model->decoder->dense->weight.impl_ptr());
  for (const auto& [name, p] : model->named_parameters()) {
    INFO(name);
    CHECK(p.requires_grad());
    CHECK(p.is_leaf());
    CHECK(p.dtype() == float32);
  }
}

TEST_CASE("parameters() follows named_parameters(), num_parameters() matches a hand count",
    "[nn][module]") {
  manual_seed(0);
  auto model = small_transformer(2);
  const auto named = model->named_parameters();
  const auto params = model->parameters();
  REQUIRE(params.size() == named.size());
  for (std::size_t i = 0; i < params.size(); ++i)
    CHECK(params[i].impl_ptr() == named[i].second.impl_ptr());
  CHECK(params.size() == 1 + 2 * 12 + 1 + 2 * 18 + 2);

  // V = 10, D = 8, F = 16:
  //   embedding V·D = 80 (each side)
  //   attention 4·D·D = 256 (no bias), LayerNorm 2·D = 16, FFN D·F + F + F·D + D = 280
  //   encoder block 256 + 2·16 + 280 = 568; decoder block 2·256 + 3·16 + 280 = 840
  //   output layer D·V + V = 90
  const int64_t hand_count = 80 + 2 * 568 + 80 + 2 * 840 + 90;
  CHECK(hand_count == 3066);  // PyTorch's count for d2l's model of this size
  CHECK(model->num_parameters() == hand_count);
  CHECK(small_transformer(1)->num_parameters() == 1658);

  nn::Linear linear(5, 3);
  CHECK(linear.num_parameters() == 5 * 3 + 3);
  CHECK(nn::Linear(5, 3, false).num_parameters() == 15);
  CHECK(nn::LayerNorm({3, 4}).num_parameters() == 24);
  CHECK(nn::Dropout(0.5).num_parameters() == 0);
}

TEST_CASE("named_buffers holds the positional-encoding tables, which are not parameters",
    "[nn][module]") {
  manual_seed(0);
  auto model = small_transformer(1);
  const auto buffers = as_map(model->named_buffers());
  CHECK(buffers.size() == 2);
  REQUIRE(buffers.count("encoder.pos_encoding.P") == 1);
  REQUIRE(buffers.count("decoder.pos_encoding.P") == 1);
  CHECK(buffers.at("encoder.pos_encoding.P").shape() == Shape{1, 1000, 8});
  CHECK(buffers.at("encoder.pos_encoding.P").impl_ptr() ==
        model->encoder->pos_encoding->P.impl_ptr());
  CHECK_FALSE(buffers.at("encoder.pos_encoding.P").requires_grad());
  CHECK(as_map(model->named_parameters()).count("encoder.pos_encoding.P") == 0);
  // They are computed, not learned: not persistent (left out of files for PyTorch, as d2l leaves
  // P out of its state dict), yet in ag's own state_dict().
  CHECK(model->named_buffers(/*persistent_only=*/true).empty());
  CHECK(model->state_dict().count("decoder.pos_encoding.P") == 1);

  // The learned encoding's table is a parameter instead.
  nn::LearnedPositionalEncoding learned(4, 0.0, 6);
  CHECK(learned.named_buffers().empty());
  REQUIRE(learned.named_parameters().size() == 1);
  CHECK(learned.named_parameters()[0].first == "P");
  CHECK(learned.named_parameters()[0].second.shape() == Shape{1, 6, 4});
}

TEST_CASE("train() and eval() reach every submodule", "[nn][module]") {
  manual_seed(0);
  auto model = small_transformer(2, 0.1);
  auto modes = [&] {
    std::vector<bool> out;
    model->apply([&](nn::Module& m) { out.push_back(m.is_training()); });
    return out;
  };
  const std::size_t count = modes().size();
  CHECK(count > 50);                                 // the walk really goes down the tree
  CHECK(modes() == std::vector<bool>(count, true));  // modules start in training mode
  model->eval();
  CHECK(modes() == std::vector<bool>(count, false));
  model->train();
  CHECK(modes() == std::vector<bool>(count, true));
  model->train(false);
  CHECK(modes() == std::vector<bool>(count, false));
  // A deep leaf in particular.
  CHECK_FALSE(model->decoder->blks->at<nn::TransformerDecoderBlock>(1)
                  ->attention1->attention->dropout->is_training());
}

TEST_CASE("zero_grad clears the gradient of every parameter", "[nn][module]") {
  manual_seed(0);
  auto model = small_transformer(1);
  Tensor enc_X = nn_test::tokens({2, 4}, 10, 1), dec_X = nn_test::tokens({2, 3}, 10, 2);
  sum((*model)(enc_X, dec_X, tensor({4, 2}))).backward();
  for (const auto& [name, p] : model->named_parameters()) {
    INFO(name);
    CHECK(p.grad().defined());  // backward reached every parameter
  }
  model->zero_grad();
  for (const auto& [name, p] : model->named_parameters()) {
    INFO(name);
    CHECK_FALSE(p.grad().defined());
  }
}

TEST_CASE(
    "to(float64) converts every parameter and buffer under the same handles", "[nn][module]") {
  manual_seed(0);
  auto model = small_transformer(1);
  nn::Linear& dense = *model->decoder->dense;
  const Tensor weight_handle = dense.weight;  // a copy of the handle, taken before
  const std::vector<double> weight_before = values(dense.weight);
  const std::vector<double> P_before = values(model->encoder->pos_encoding->P);
  const auto named_before = model->named_parameters();
  sum((*model)(nn_test::tokens({1, 3}, 10, 1), nn_test::tokens({1, 2}, 10, 2), Tensor()))
      .backward();
  REQUIRE(dense.weight.grad().defined());

  model->to(float64);

  for (const auto& [name, p] : model->named_parameters()) {
    INFO(name);
    CHECK(p.dtype() == float64);
    CHECK(p.requires_grad());
    CHECK_FALSE(p.grad().defined());  // gradients are dropped
  }
  for (const auto& [name, b] : model->named_buffers()) {
    INFO(name);
    CHECK(b.dtype() == float64);
  }
  // The same objects: the member, the handle taken before and the named_parameters entries.
  const auto named_after = model->named_parameters();
  REQUIRE(named_after.size() == named_before.size());
  for (std::size_t i = 0; i < named_after.size(); ++i)
    CHECK(named_after[i].second.impl_ptr() == named_before[i].second.impl_ptr());
  CHECK(weight_handle.impl_ptr() == dense.weight.impl_ptr());
  CHECK(weight_handle.dtype() == float64);
  CHECK(as_map(named_after).at("decoder.dense.weight").shares_storage(dense.weight));
  CHECK(model->encoder->pos_encoding->P.dtype() == float64);
  CHECK(as_map(model->named_buffers())
            .at("encoder.pos_encoding.P")
            .shares_storage(model->encoder->pos_encoding->P));
  // The values survive the conversion exactly (float32 -> float64 is exact); the positional
  // table, computed by a formula, is computed again in float64: within float32's rounding of it.
  CHECK(values(dense.weight) == weight_before);
  const std::vector<double> P_after = values(model->encoder->pos_encoding->P);
  REQUIRE(P_after.size() == P_before.size());
  for (std::size_t i = 0; i < P_after.size(); ++i)
    CHECK(P_after[i] == Approx(P_before[i]).margin(6e-8));

  // And the model now computes in float64.
  Tensor logits = (*model)(
      nn_test::tokens({1, 3}, 10, 1, float64), nn_test::tokens({1, 2}, 10, 2, float64), Tensor());
  CHECK(logits.dtype() == float64);
  CHECK(logits.shape() == Shape{1, 2, 10});

  // An update through the named_parameters entry is seen by the layer.
  {
    NoGradGuard no_grad;
    as_map(model->named_parameters()).at("decoder.dense.bias").fill_(0.25);
  }
  CHECK(values(dense.bias) == std::vector<double>(10, 0.25));
}

// ---- reprs --------------------------------------------------------------------------------------

TEST_CASE("reprs of the basic layers are PyTorch's", "[nn][module][repr]") {
  manual_seed(0);
  CHECK(nn::Linear(3, 4).repr() == "Linear(in_features=3, out_features=4, bias=True)");
  CHECK(nn::Linear(3, 4, false).repr() == "Linear(in_features=3, out_features=4, bias=False)");
  CHECK(nn::Embedding(20, 32).repr() == "Embedding(20, 32)");
  CHECK(nn::LayerNorm({32}).repr() == "LayerNorm((32,), eps=1e-05, elementwise_affine=True)");
  CHECK(nn::LayerNorm({3, 4}).repr() == "LayerNorm((3, 4), eps=1e-05, elementwise_affine=True)");
  // torch.nn.RMSNorm (PyTorch 2.4): eps None is the dtype's machine epsilon.
  CHECK(nn::RMSNorm({4}).repr() == "RMSNorm((4,), eps=None, elementwise_affine=True)");
  CHECK(nn::RMSNorm({3, 4}, 1e-6, false).repr() ==
        "RMSNorm((3, 4), eps=1e-06, elementwise_affine=False)");
  CHECK(nn::Dropout(0.0).repr() == "Dropout(p=0.0, inplace=False)");
  CHECK(nn::Dropout().repr() == "Dropout(p=0.5, inplace=False)");
  CHECK(nn::ReLU().repr() == "ReLU()");
  std::ostringstream out;
  out << nn::Embedding(20, 32);
  CHECK(out.str() == "Embedding(20, 32)");
}

TEST_CASE("reprs of the attention and Transformer layers match PyTorch's for d2l's",
    "[nn][module][repr]") {
  manual_seed(0);
  CHECK(nn::AdditiveAttention(2, 20, 8, 0.1).repr() ==
        "AdditiveAttention(\n"
        "  (W_k): Linear(in_features=2, out_features=8, bias=False)\n"
        "  (W_q): Linear(in_features=20, out_features=8, bias=False)\n"
        "  (w_v): Linear(in_features=8, out_features=1, bias=False)\n"
        "  (dropout): Dropout(p=0.1, inplace=False)\n"
        ")");
  CHECK(nn::PositionWiseFFN(32, 64, 32).repr() ==
        "PositionWiseFFN(\n"
        "  (dense1): Linear(in_features=32, out_features=64, bias=True)\n"
        "  (relu): ReLU()\n"
        "  (dense2): Linear(in_features=64, out_features=32, bias=True)\n"
        ")");
  CHECK(nn::AddNorm({32}, 0.5).repr() ==
        "AddNorm(\n"
        "  (dropout): Dropout(p=0.5, inplace=False)\n"
        "  (ln): LayerNorm((32,), eps=1e-05, elementwise_affine=True)\n"
        ")");
  CHECK(nn::PositionalEncoding(32, 0.1).repr() ==
        "PositionalEncoding(\n"
        "  (dropout): Dropout(p=0.1, inplace=False)\n"
        ")");
  // TransformerEncoder(200, 32, 32, 32, 32, [32], 32, 64, 4, 1, 0.5): nesting four deep.
  CHECK(nn::TransformerEncoder(200, 32, 32, 32, 32, {32}, 32, 64, 4, 1, 0.5).repr() ==
        "TransformerEncoder(\n"
        "  (embedding): Embedding(200, 32)\n"
        "  (pos_encoding): PositionalEncoding(\n"
        "    (dropout): Dropout(p=0.5, inplace=False)\n"
        "  )\n"
        "  (blks): ModuleList(\n"
        "    (0): TransformerEncoderBlock(\n"
        "      (attention): MultiHeadAttention(\n"
        "        (attention): DotProductAttention(\n"
        "          (dropout): Dropout(p=0.5, inplace=False)\n"
        "        )\n"
        "        (W_q): Linear(in_features=32, out_features=32, bias=False)\n"
        "        (W_k): Linear(in_features=32, out_features=32, bias=False)\n"
        "        (W_v): Linear(in_features=32, out_features=32, bias=False)\n"
        "        (W_o): Linear(in_features=32, out_features=32, bias=False)\n"
        "      )\n"
        "      (addnorm1): AddNorm(\n"
        "        (dropout): Dropout(p=0.5, inplace=False)\n"
        "        (ln): LayerNorm((32,), eps=1e-05, elementwise_affine=True)\n"
        "      )\n"
        "      (ffn): PositionWiseFFN(\n"
        "        (dense1): Linear(in_features=32, out_features=64, bias=True)\n"
        "        (relu): ReLU()\n"
        "        (dense2): Linear(in_features=64, out_features=32, bias=True)\n"
        "      )\n"
        "      (addnorm2): AddNorm(\n"
        "        (dropout): Dropout(p=0.5, inplace=False)\n"
        "        (ln): LayerNorm((32,), eps=1e-05, elementwise_affine=True)\n"
        "      )\n"
        "    )\n"
        "  )\n"
        ")");
}

TEST_CASE("python_float writes floats as Python's repr does", "[nn][module][repr]") {
  // Each expected string is the output of /usr/bin/python3 -c 'print(repr(x))'.
  CHECK(nn::python_float(0.5) == "0.5");
  CHECK(nn::python_float(0.0) == "0.0");
  CHECK(nn::python_float(0.1) == "0.1");
  CHECK(nn::python_float(1e-05) == "1e-05");
  CHECK(nn::python_float(0.0001) == "0.0001");
  CHECK(nn::python_float(100000.0) == "100000.0");
  CHECK(nn::python_float(1e16) == "1e+16");
  CHECK(nn::python_float(1e-7) == "1e-07");
  CHECK(nn::python_float(2.5e-05) == "2.5e-05");
  // The edges of fixed notation and a few more.
  CHECK(nn::python_float(1e15) == "1000000000000000.0");
  CHECK(nn::python_float(123456789012345.6) == "123456789012345.6");
  CHECK(nn::python_float(-0.0) == "-0.0");
  CHECK(nn::python_float(1.0 / 3.0) == "0.3333333333333333");
  CHECK(nn::python_float(0.00012) == "0.00012");
  CHECK(nn::python_float(-2.5e-05) == "-2.5e-05");
  CHECK(nn::python_bool(true) == "True");
  CHECK(nn::python_bool(false) == "False");
}

// ---- parameter sharing (the own-model issue: tying done right) ---------------------------------

using nn_test::TiedLM;  // nanoGPT's weight tying in miniature (nn_test_util.h)

TEST_CASE("assigning one layer's parameter to another's member ties them: one parameter",
    "[nn][module][sharing]") {
  TiedLM m;
  // nanoGPT's count: the shared (5, 3) matrix once (it was 30: the replaced lm_head.weight too).
  CHECK(m.num_parameters() == 15);
  const auto named = m.named_parameters();
  REQUIRE(named.size() == 1);
  CHECK(named[0].first == "wte.weight");
  CHECK(named[0].second.is_same(m.lm_head->weight));
  CHECK(m.parameters().size() == 1);
  CHECK(m.named_parameters(/*remove_duplicate=*/false).size() == 2);
  // Each layer still sees the tensor through its own member.
  CHECK(m.lm_head->named_parameters()[0].second.is_same(m.wte->weight));
  // state_dict keeps both names, as PyTorch's does.
  const std::map<std::string, Tensor> state = m.state_dict();
  CHECK(state.size() == 2);
  CHECK(state.at("lm_head.weight").is_same(state.at("wte.weight")));
}

TEST_CASE("a tensor registered under two names is listed once and loads as one",
    "[nn][module][sharing]") {
  struct Alias : nn::Module {
    Tensor& weight = register_parameter("weight", zeros({2}));
    Alias() { register_parameter("alias", weight); }
    std::string type_name() const override { return "Alias"; }
  } m;
  CHECK(m.parameters().size() == 1);
  CHECK(m.num_parameters() == 2);
  // Loading a state dict whose two names agree keeps the tensor tied, with the file's values.
  std::map<std::string, Tensor> state{{"weight", tensor({1, 2})}, {"alias", tensor({1, 2})}};
  m.load_state_dict(state);
  CHECK(values(m.weight) == std::vector<double>{1, 2});
  CHECK(m.named_parameters(false)[1].second.is_same(m.weight));
  // Two different values for one tensor cannot both be loaded: refused, nothing changed.
  state["alias"] = tensor({3, 4});
  CHECK_THROWS_WITH(m.load_state_dict(state),
      Contains("tied alias and weight (one tensor in the model) differ in the file"));
  CHECK(values(m.weight) == std::vector<double>{1, 2});
}

TEST_CASE("a tied model: SGD steps the shared tensor once, clip_grad_norm counts it once",
    "[nn][module][sharing]") {
  TiedLM m;
  m.wte->weight.set_grad(ones({5, 3}));
  {
    NoGradGuard no_grad;
    m.wte->weight.fill_(1.0);
  }
  optim::SGD sgd(m.parameters(), 0.1);
  sgd.step();
  // not 0.8: stepped once (1 − 0.1 · 1 in float32)
  CHECK(values(m.lm_head->weight) == std::vector<double>(15, static_cast<double>(0.9f)));
  // ‖∇‖ of one (5, 3) gradient of ones is √15, under both names.
  std::vector<Tensor> both;
  for (const auto& [name, p] : m.named_parameters(false)) both.push_back(p);
  CHECK(optim::clip_grad_norm(both, 1e9) == Approx(std::sqrt(15.0)));
  // An optimizer given the tensor under both names refuses it, naming the two places.
  CHECK_THROWS_WITH(optim::SGD(both, 0.1),
      Contains("SGD: parameter 1 of group 0 is parameter 0 of group 0 again"));
}

TEST_CASE("a parameter slot assigned a computed tensor, or left empty, is handled clearly",
    "[nn][module][sharing]") {
  nn::Linear with_bias(2, 3), without_bias(2, 3, /*bias=*/false);
  CHECK(without_bias.parameters().size() == 1);  // the empty bias slot is skipped
  CHECK_FALSE(without_bias.bias.defined());
  CHECK(without_bias.repr() == "Linear(in_features=2, out_features=3, bias=False)");
  // A result of an op is no parameter: the walk names the slot.
  with_bias.bias = with_bias.bias * 2.0;
  CHECK_THROWS_WITH(with_bias.parameters(),
      Contains("Linear: parameter 'bias' holds a tensor computed by an op, not a leaf"));
}

// ---- containers and activations for a user's own model (the own-model issue, item 4) ----------

TEST_CASE("activation modules compute their ops and print as PyTorch's", "[nn][module][own]") {
  const Tensor x = tensor({-2.0, -0.5, 0.0, 0.5, 2.0});
  CHECK(values(nn::GELU()(x)) == values(gelu(x)));
  CHECK(values(nn::GELU("tanh")(x)) == values(gelu(x, "tanh")));
  CHECK(values(nn::SiLU()(x)) == values(silu(x)));
  CHECK(values(nn::Tanh()(x)) == values(tanh(x)));
  CHECK(nn::GELU().repr() == "GELU(approximate='none')");
  CHECK(nn::GELU("tanh").repr() == "GELU(approximate='tanh')");
  CHECK(nn::SiLU().repr() == "SiLU()");
  CHECK(nn::Tanh().repr() == "Tanh()");
  CHECK(nn::ReLU().repr() == "ReLU()");
  CHECK_THROWS_WITH(nn::GELU("erf"), Contains("GELU: approximate 'erf' is not 'none' or 'tanh'"));
}

TEST_CASE(
    "Sequential applies its modules in order, named 0, 1, ... as PyTorch's", "[nn][module][own]") {
  manual_seed(3);
  auto first = std::make_shared<nn::Linear>(4, 16), last = std::make_shared<nn::Linear>(16, 4);
  nn::Sequential mlp(first, std::make_shared<nn::GELU>(), last);
  const Tensor x = randn({2, 4});
  CHECK(values(mlp(x)) == values(last->forward(gelu(first->forward(x)))));
  CHECK(mlp.size() == 3);
  std::vector<std::string> names;
  for (const auto& [name, p] : mlp.named_parameters()) names.push_back(name);
  CHECK(names == std::vector<std::string>{"0.weight", "0.bias", "2.weight", "2.bias"});
  // print(nn.Sequential(nn.Linear(4, 16), nn.GELU(), nn.Linear(16, 4))) in PyTorch 1.13:
  CHECK(mlp.repr() ==
        "Sequential(\n"
        "  (0): Linear(in_features=4, out_features=16, bias=True)\n"
        "  (1): GELU(approximate='none')\n"
        "  (2): Linear(in_features=16, out_features=4, bias=True)\n"
        ")");
  nn::Sequential empty;
  CHECK(values(empty(x)) == values(x));  // no steps: the identity, as PyTorch's
}

TEST_CASE("ModuleDict and ModuleList name a model as nanoGPT's", "[nn][module][own]") {
  struct Block : nn::Module {
    std::shared_ptr<nn::Linear> c_attn =
        register_module("c_attn", std::make_shared<nn::Linear>(2, 6));
    std::string type_name() const override { return "Block"; }
  };
  nn::ModuleDict transformer;
  transformer.insert("wte", std::make_shared<nn::Embedding>(5, 2));
  auto h = transformer.insert("h", std::make_shared<nn::ModuleList>());
  h->push_back(std::make_shared<Block>());
  h->push_back(std::make_shared<Block>());
  CHECK(transformer.size() == 2);
  CHECK(transformer.contains("h"));
  CHECK_FALSE(transformer.contains("ln_f"));
  CHECK(transformer.state_dict().count("h.1.c_attn.weight") == 1);
  CHECK(transformer.at<nn::Embedding>("wte")->num_embeddings == 5);
  CHECK_THROWS_WITH(
      transformer["ln_f"], Contains("ModuleDict: no module 'ln_f' (its keys: wte, h)"));
  CHECK_THROWS_WITH(transformer.at<nn::Linear>("wte"),
      Contains("ModuleDict: module 'wte' is a Embedding, not the type asked for"));
  // The list: size, [i] with Python's negative indices, iteration in order.
  CHECK(h->size() == 2);
  CHECK((*h)[-1].get() == (*h)[1].get());
  CHECK_THROWS_WITH((*h)[2], Contains("ModuleList: index 2 is out of range for 2 modules"));
  int64_t blocks = 0;
  for (const auto& block : *h) blocks += block->type_name() == "Block";
  CHECK(blocks == 2);
  CHECK(transformer.repr() ==
        "ModuleDict(\n"
        "  (wte): Embedding(5, 2)\n"
        "  (h): ModuleList(\n"
        "    (0): Block(\n"
        "      (c_attn): Linear(in_features=2, out_features=6, bias=True)\n"
        "    )\n"
        "    (1): Block(\n"
        "      (c_attn): Linear(in_features=2, out_features=6, bias=True)\n"
        "    )\n"
        "  )\n"
        ")");
}

TEST_CASE("init::zeros_ and init::ones_ fill in place", "[nn][module][own]") {
  nn::Linear layer(3, 2);
  nn::init::zeros_(layer.bias);
  nn::init::ones_(layer.weight);
  CHECK(values(layer.bias) == std::vector<double>(2, 0.0));
  CHECK(values(layer.weight) == std::vector<double>(6, 1.0));
}

TEST_CASE("module.to(float64) converts floating tensors only: int64 and bool buffers stay",
    "[nn][module][dtype]") {
  struct WithIntegerBuffers : nn::Module {
    std::string type_name() const override { return "WithIntegerBuffers"; }
    nn::Linear& proj;
    Tensor& positions;
    Tensor& causal;
    WithIntegerBuffers()
        : proj(*register_module("proj", std::make_shared<nn::Linear>(2, 2))),
          positions(register_buffer("positions", arange(4, int64))),
          causal(register_buffer("causal", tril(ones({4, 4}, bool_)), /*persistent=*/false)) {}
  };
  WithIntegerBuffers m;
  m.to(float64);
  CHECK(m.proj.weight.dtype() == float64);
  CHECK(m.positions.dtype() == int64);
  CHECK(m.positions.to_vector<int64_t>() == std::vector<int64_t>{0, 1, 2, 3});
  CHECK(m.causal.dtype() == bool_);
  CHECK_THROWS_WITH(m.to(int64), Catch::Matchers::Contains("Module::to: a module converts to a "
                                                           "floating dtype"));
}

TEST_CASE(
    "Embedding takes int64 ids, and float ids holding integers as before", "[nn][module][dtype]") {
  nn::Embedding embedding(10, 3);
  const Tensor ids = tensor(std::vector<int64_t>{7, 0, 7, 2}, {2, 2});
  const Tensor looked_up = embedding.forward(ids);  // (2, 2, 3)
  CHECK(looked_up.shape() == Shape{2, 2, 3});
  CHECK(looked_up.to_vector<double>() == embedding.forward(ids.to(float32)).to_vector<double>());
  CHECK_THROWS_WITH(embedding.forward(tensor(std::vector<int64_t>{10})),
      Catch::Matchers::Contains("index_select: index 10 is out of range"));
}
