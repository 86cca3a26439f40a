// ag's nn layers against d2l.ai's PyTorch code: forward values and every gradient.
//
// tests/fixtures/make_nn_parity_fixtures.py ran d2l's reference classes (masked_softmax, the
// attention layers, PositionalEncoding and the Transformer pieces, copied from d2l's Chinese
// PyTorch edition) and the modern block's (torch.nn.RMSNorm of PyTorch 2.4, Meta's Llama
// FeedForward, Llama's rotary angles; written out in the script, as PyTorch 1.13 lacks them)
// in float32 and wrote into torch_parity_fixtures.inc, per case: the state dict under ag's
// parameter names, the inputs, the upstream gradient fed to backward, the output and the gradient
// of every floating input and of every parameter.
//
// Here each case name maps to a function that builds the ag module with the same constructor
// arguments and runs the same forward. The test loads every fixture parameter into the module by
// its dotted name, runs forward and backward (training mode, dropout 0 — the identity in both
// libraries) and compares the output and all gradients with PyTorch's, in float32.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "nn/nn.h"

namespace {

// ---- the fixtures (filled by torch_parity_fixtures.inc) -----------------------------------------

struct FixtureTensor {
  std::string name;  // a parameter's dotted ag name, or an input's name in the PyTorch snippet
  ag::Shape shape;
  std::vector<float> values;
  // PyTorch's gradient; nullopt for inputs that are not differentiated (token ids, valid lengths)
  // and in forward-only cases.
  std::optional<std::vector<float>> grad;
};

struct ParityFixture {
  std::string name;
  std::string torch_code;                 // d2l's PyTorch code that produced the case
  std::vector<FixtureTensor> parameters;  // the full state dict
  std::vector<FixtureTensor> inputs;
  ag::Shape output_shape;
  std::vector<float> output;
  std::optional<std::vector<float>>
      upstream;  // the gradient backward starts from; nullopt: forward only
};

// Each entry is built by its own small lambda, which compiles much faster than one huge
// initializer.
const std::vector<ParityFixture>& fixtures() {
  static const std::vector<ParityFixture> all = [] {
    std::vector<ParityFixture> out;
#define AG_NN_FIXTURE(...) out.push_back([]() -> ParityFixture { return __VA_ARGS__; }());
#include "torch_parity_fixtures.inc"
#undef AG_NN_FIXTURE
    return out;
  }();
  return all;
}

const ParityFixture* find_fixture(const std::string& name) {
  for (const ParityFixture& fixture : fixtures())
    if (fixture.name == name) return &fixture;
  return nullptr;
}

// ---- the ag side of each case -------------------------------------------------------------------

// A case's inputs by the names the PyTorch snippet uses ("x", "queries", "valid_lens", ...).
class Args {
 public:
  void add(const std::string& name, const ag::Tensor& tensor) { tensors_[name] = tensor; }
  const ag::Tensor& operator[](const std::string& name) const {
    auto it = tensors_.find(name);
    if (it == tensors_.end()) throw std::invalid_argument("the fixture has no input named " + name);
    return it->second;
  }

 private:
  std::map<std::string, ag::Tensor> tensors_;
};

// An ag module (null for the plain function masked_softmax) and the forward the case runs on it.
struct Built {
  std::shared_ptr<ag::nn::Module> module;
  std::function<ag::Tensor(const Args&)> forward;
};
using Builder = std::function<Built()>;

// A case whose module is one constructor call and whose forward is one expression of `model`
// and the inputs `in`.
#define AG_PARITY_CASE(name, construct, expression)                                 \
  {                                                                                 \
    name, []() -> Built {                                                           \
      auto model = construct;                                                       \
      return {model, [model](const Args& in) -> ag::Tensor { return expression; }}; \
    }                                                                               \
  }

// Each entry mirrors the `// torch:` lines of the fixture with the same name: the same
// constructor arguments (d2l's and ag's argument lists are the same) and the same call.
const std::map<std::string, Builder>& cases() {
  using namespace ag::nn;
  using ag::Shape;
  static const std::map<std::string, Builder> all = {
      // Linear on a 3-D input, with and without bias.
      AG_PARITY_CASE("linear_bias", std::make_shared<Linear>(5, 3), model->forward(in["x"])),
      AG_PARITY_CASE(
          "linear_no_bias", std::make_shared<Linear>(5, 3, false), model->forward(in["x"])),
      // masked_softmax with (B,) and (B, Q) valid lengths; the latter includes a length of 0.
      AG_PARITY_CASE("masked_softmax_1d_valid_lens", std::shared_ptr<Module>(),
          masked_softmax(in["X"], in["valid_lens"])),
      AG_PARITY_CASE("masked_softmax_2d_valid_lens", std::shared_ptr<Module>(),
          masked_softmax(in["X"], in["valid_lens"])),
      // Scaled dot-product attention, without and with valid lengths.
      AG_PARITY_CASE("dot_product_attention", std::make_shared<DotProductAttention>(0.0),
          model->forward(in["queries"], in["keys"], in["values"])),
      AG_PARITY_CASE("dot_product_attention_valid_lens", std::make_shared<DotProductAttention>(0.0),
          model->forward(in["queries"], in["keys"], in["values"], in["valid_lens"])),
      // AdditiveAttention(key_size, query_size, num_hiddens, dropout).
      AG_PARITY_CASE("additive_attention", std::make_shared<AdditiveAttention>(4, 5, 6, 0.0),
          model->forward(in["queries"], in["keys"], in["values"], in["valid_lens"])),
      // MultiHeadAttention(key_size, query_size, value_size, num_hiddens, num_heads, dropout,
      // bias).
      AG_PARITY_CASE("multihead_attention_1d_valid_lens",
          std::make_shared<MultiHeadAttention>(6, 5, 7, 8, 2, 0.0),
          model->forward(in["queries"], in["keys"], in["values"], in["valid_lens"])),
      AG_PARITY_CASE("multihead_attention_2d_valid_lens",
          std::make_shared<MultiHeadAttention>(6, 5, 7, 8, 2, 0.0),
          model->forward(in["queries"], in["keys"], in["values"], in["valid_lens"])),
      AG_PARITY_CASE("multihead_attention_bias",
          std::make_shared<MultiHeadAttention>(6, 5, 7, 8, 2, 0.0, true),
          model->forward(in["queries"], in["keys"], in["values"], in["valid_lens"])),
      // torch.nn.LayerNorm(6).
      AG_PARITY_CASE("layer_norm", std::make_shared<LayerNorm>(Shape{6}), model->forward(in["x"])),
      // torch.nn.BatchNorm1d(num_features) in training mode, on (N, C) and (N, C, L).
      AG_PARITY_CASE("batch_norm_1d", std::make_shared<BatchNorm1d>(6), model->forward(in["x"])),
      AG_PARITY_CASE(
          "batch_norm_1d_three_dims", std::make_shared<BatchNorm1d>(3), model->forward(in["x"])),
      // PositionalEncoding(num_hiddens, dropout) on 6 positions.
      AG_PARITY_CASE("positional_encoding", std::make_shared<PositionalEncoding>(8, 0.0),
          model->forward(in["X"])),
      // PositionWiseFFN(ffn_num_input, ffn_num_hiddens, ffn_num_outputs).
      AG_PARITY_CASE(
          "position_wise_ffn", std::make_shared<PositionWiseFFN>(4, 8, 5), model->forward(in["X"])),
      // RMSNorm(normalized_shape, eps, elementwise_affine), torch.nn.RMSNorm's arguments.
      AG_PARITY_CASE("rms_norm", std::make_shared<RMSNorm>(Shape{6}), model->forward(in["x"])),
      AG_PARITY_CASE("rms_norm_two_dims_no_affine",
          std::make_shared<RMSNorm>(Shape{3, 4}, 1e-6, false), model->forward(in["x"])),
      // Llama's FeedForward(dim, hidden_dim, out_dim, bias) is SwiGLUFFN(in, hidden, out, bias).
      AG_PARITY_CASE("swiglu_ffn", std::make_shared<SwiGLUFFN>(4, 8, 5), model->forward(in["X"])),
      AG_PARITY_CASE(
          "swiglu_ffn_bias", std::make_shared<SwiGLUFFN>(4, 6, 4, true), model->forward(in["X"])),
      // AddNorm over the last two dims.
      AG_PARITY_CASE("add_norm", std::make_shared<AddNorm>(Shape{3, 4}, 0.0),
          model->forward(in["X"], in["Y"])),
      // EncoderBlock(key_size, query_size, value_size, num_hiddens, norm_shape, ffn_num_input,
      //              ffn_num_hiddens, num_heads, dropout).
      AG_PARITY_CASE("encoder_block",
          std::make_shared<TransformerEncoderBlock>(8, 8, 8, 8, Shape{8}, 8, 16, 2, 0.0),
          model->forward(in["X"], in["valid_lens"])),
      // TransformerEncoder(vocab_size, key_size, query_size, value_size, num_hiddens, norm_shape,
      //                    ffn_num_input, ffn_num_hiddens, num_heads, num_layers, dropout).
      AG_PARITY_CASE("transformer_encoder",
          std::make_shared<TransformerEncoder>(12, 8, 8, 8, 8, Shape{8}, 8, 16, 2, 2, 0.0),
          model->forward(in["tokens"], in["valid_lens"])),
      // DecoderBlock(..., dropout, i=0) with the state [enc_outputs, enc_valid_lens, [None]].
      {"decoder_block",
          []() -> Built {
            auto model =
                std::make_shared<TransformerDecoderBlock>(8, 8, 8, 8, Shape{8}, 8, 16, 2, 0.0, 0);
            return {model, [model](const Args& in) {
                      DecoderState state{
                          in["enc_outputs"], in["enc_valid_lens"], std::vector<ag::Tensor>(1)};
                      return model->forward(in["X"], state);
                    }};
          }},
      // EncoderDecoder(TransformerEncoder(...), TransformerDecoder(...)), 2 + 2 layers.
      AG_PARITY_CASE("encoder_decoder",
          std::make_shared<EncoderDecoder>(
              std::make_shared<TransformerEncoder>(12, 8, 8, 8, 8, Shape{8}, 8, 16, 2, 2, 0.0),
              std::make_shared<TransformerDecoder>(12, 8, 8, 8, 8, Shape{8}, 8, 16, 2, 2, 0.0)),
          model->forward(in["enc_X"], in["dec_X"], in["enc_valid_lens"])),
  };
  return all;
}

#undef AG_PARITY_CASE

// The fixtures checked by their own test cases below (tables, not forward passes).
const char* const kTableFixture = "positional_encoding_table";
const char* const kRotaryTableFixture = "rotary_embedding_tables";

// ---- comparing ag's tensors with PyTorch's values -----------------------------------------------

// One tolerance for every output and gradient of every case: |ag − torch| <= atol + rtol · |torch|.
// Both sides compute in float32 (relative rounding ~6e-8 per op); rtol allows for that error
// accumulated over a few dozen ops and for the different summation orders of two BLAS libraries,
// atol for values that come out near zero by cancellation.
struct Tolerance {
  double rtol, atol;
};
constexpr Tolerance kTolerance{1e-5, 1e-6};

bool close(double actual, double expected, Tolerance tol) {
  return std::abs(actual - expected) <= tol.atol + tol.rtol * std::abs(expected);
}

// "" when `actual` is a float32 tensor of the expected shape and values; otherwise what differs.
std::string compare(const ag::Tensor& actual, const ag::Shape& shape,
    const std::vector<float>& expected, Tolerance tol = kTolerance) {
  std::ostringstream report;
  if (!actual.defined()) return "no tensor (undefined)";
  if (actual.dtype() != ag::float32)
    report << "dtype " << ag::dtype_name(actual.dtype()) << " instead of float32; ";
  if (actual.shape() != shape) {
    report << "shape " << ag::shape_str(actual.shape()) << " but torch has "
           << ag::shape_str(shape);
    return report.str();
  }
  const std::vector<double> values = actual.to_vector<double>();
  report.precision(9);
  int mismatches = 0;
  double worst = 0;  // the largest |difference| / (atol + rtol·|torch|)
  for (std::size_t i = 0; i < values.size(); ++i) {
    const double allowed = tol.atol + tol.rtol * std::abs(expected[i]);
    worst = std::max(worst, std::abs(values[i] - expected[i]) / allowed);
    if (close(values[i], expected[i], tol)) continue;
    if (++mismatches <= 6)
      report << "\n  element " << i << ": ag " << values[i] << ", torch " << expected[i]
             << " (difference " << values[i] - expected[i] << ", allowed " << allowed << ")";
  }
  if (mismatches > 0)
    report << "\n  " << mismatches << " of " << values.size() << " elements differ; the worst is "
           << worst << " times the tolerance";
  return report.str();
}

// ---- running a case -----------------------------------------------------------------------------

// Copies every parameter of the fixture's state dict into `module` by dotted name (as
// load_state_dict(strict=True)): a fixture name the module lacks, a module parameter the fixture
// lacks and a shape that differs each fail the test.
void load_state_dict(const ag::nn::Module* module, const ParityFixture& fixture) {
  std::map<std::string, ag::Tensor> parameters;
  if (module != nullptr)
    for (const auto& [name, tensor] : module->named_parameters()) parameters.emplace(name, tensor);
  std::set<std::string> in_fixture;
  ag::NoGradGuard no_grad;
  for (const FixtureTensor& p : fixture.parameters) {
    in_fixture.insert(p.name);
    auto it = parameters.find(p.name);
    if (it == parameters.end()) {
      FAIL_CHECK("the fixture's parameter '" << p.name << "' is not a parameter of the ag module");
      continue;
    }
    if (it->second.shape() != p.shape) {
      FAIL_CHECK("parameter '" << p.name << "' has shape " << ag::shape_str(it->second.shape())
                               << " in ag but " << ag::shape_str(p.shape) << " in the fixture");
      continue;
    }
    it->second.copy_(ag::tensor(p.values, p.shape));
  }
  for (const auto& [name, tensor] : parameters)
    if (!in_fixture.count(name))
      FAIL_CHECK("the ag module's parameter '" << name << "' is not in the fixture");
}

// Builds the case's ag module, loads the fixture's parameters, runs forward and backward from
// PyTorch's upstream gradient, and compares the output and the gradient of every differentiated
// input and every parameter with PyTorch's.
void check_case(const std::string& name) {
  const ParityFixture* fixture = find_fixture(name);
  INFO("torch: " << (fixture ? fixture->torch_code
                             : "(no fixture with this name; regenerate the .inc?)"));
  REQUIRE(fixture != nullptr);
  auto builder = cases().find(name);
  if (builder == cases().end())
    FAIL("case '" << name << "' has no ag builder in test_parity_torch.cpp");

  const Built built = builder->second();
  if (built.module)
    built.module->train();  // dropout is 0; d2l's decoder masks causally only in training
  load_state_dict(built.module.get(), *fixture);

  Args args;
  for (const FixtureTensor& input : fixture->inputs) {
    ag::Tensor t = ag::tensor(input.values, input.shape);  // float32
    if (input.grad) t.requires_grad_();
    args.add(input.name, t);
  }

  ag::Tensor out;
  try {
    out = built.forward(args);
  } catch (const std::exception& e) {
    FAIL("ag threw in forward: " << e.what());
  }
  {
    const std::string diff = compare(out, fixture->output_shape, fixture->output);
    INFO("output: " << diff);
    CHECK(diff.empty());
  }
  if (!fixture->upstream) return;

  REQUIRE(out.requires_grad());
  try {
    out.backward(ag::tensor(*fixture->upstream, fixture->output_shape));
  } catch (const std::exception& e) {
    FAIL("ag threw in backward: " << e.what());
  }
  for (const FixtureTensor& input : fixture->inputs) {
    if (!input.grad) continue;
    const std::string diff = compare(args[input.name].grad(), input.shape, *input.grad);
    INFO("gradient of input '" << input.name << "': " << diff);
    CHECK(diff.empty());
  }
  if (!built.module) return;
  std::map<std::string, ag::Tensor> parameters;
  for (const auto& [pname, tensor] : built.module->named_parameters())
    parameters.emplace(pname, tensor);
  for (const FixtureTensor& p : fixture->parameters) {
    auto it = parameters.find(p.name);
    if (it == parameters.end()) continue;  // reported by load_state_dict
    REQUIRE(p.grad.has_value());
    const std::string diff = compare(it->second.grad(), p.shape, *p.grad);
    INFO("gradient of parameter '" << p.name << "': " << diff);
    CHECK(diff.empty());
  }
}

}  // namespace

// ---- the tests ----------------------------------------------------------------------------------

TEST_CASE("d2l parity: every fixture has an ag case and every case a fixture", "[nn][torch]") {
  std::set<std::string> names;
  for (const ParityFixture& fixture : fixtures()) {
    INFO("fixture '" << fixture.name << "' is listed twice");
    CHECK(names.insert(fixture.name).second);
  }
  for (const std::string& name : names) {
    INFO("fixture '" << name << "' has no ag case in test_parity_torch.cpp");
    CHECK((cases().count(name) == 1 || name == kTableFixture || name == kRotaryTableFixture));
  }
  for (const auto& [name, builder] : cases()) {
    INFO("case '" << name << "' has no fixture in torch_parity_fixtures.inc (regenerate it?)");
    CHECK(names.count(name) == 1);
  }
}

TEST_CASE("d2l parity: Linear with bias", "[nn][torch]") { check_case("linear_bias"); }
TEST_CASE("d2l parity: Linear without bias", "[nn][torch]") { check_case("linear_no_bias"); }
TEST_CASE("d2l parity: masked_softmax with (B,) valid_lens", "[nn][torch]") {
  check_case("masked_softmax_1d_valid_lens");
}
TEST_CASE("d2l parity: masked_softmax with (B, Q) valid_lens and a length of 0", "[nn][torch]") {
  check_case("masked_softmax_2d_valid_lens");
}
TEST_CASE("d2l parity: DotProductAttention", "[nn][torch]") { check_case("dot_product_attention"); }
TEST_CASE("d2l parity: DotProductAttention with valid_lens", "[nn][torch]") {
  check_case("dot_product_attention_valid_lens");
}
TEST_CASE("d2l parity: AdditiveAttention", "[nn][torch]") { check_case("additive_attention"); }
TEST_CASE("d2l parity: MultiHeadAttention with (B,) valid_lens", "[nn][torch]") {
  check_case("multihead_attention_1d_valid_lens");
}
TEST_CASE("d2l parity: MultiHeadAttention with (B, Q) valid_lens", "[nn][torch]") {
  check_case("multihead_attention_2d_valid_lens");
}
TEST_CASE("d2l parity: MultiHeadAttention with bias", "[nn][torch]") {
  check_case("multihead_attention_bias");
}
TEST_CASE("d2l parity: LayerNorm", "[nn][torch]") { check_case("layer_norm"); }
TEST_CASE("parity: BatchNorm1d in training", "[nn][torch]") { check_case("batch_norm_1d"); }
TEST_CASE("parity: BatchNorm1d over (N, C, L) in training", "[nn][torch]") {
  check_case("batch_norm_1d_three_dims");
}
TEST_CASE("d2l parity: PositionalEncoding", "[nn][torch]") { check_case("positional_encoding"); }
TEST_CASE("d2l parity: PositionWiseFFN", "[nn][torch]") { check_case("position_wise_ffn"); }
TEST_CASE("d2l parity: AddNorm", "[nn][torch]") { check_case("add_norm"); }
TEST_CASE("parity: RMSNorm (torch.nn.RMSNorm of PyTorch 2.4)", "[nn][torch]") {
  check_case("rms_norm");
}
TEST_CASE("parity: RMSNorm over two dims without weight", "[nn][torch]") {
  check_case("rms_norm_two_dims_no_affine");
}
TEST_CASE("parity: SwiGLUFFN (Llama's FeedForward)", "[nn][torch]") { check_case("swiglu_ffn"); }
TEST_CASE("parity: SwiGLUFFN with biases", "[nn][torch]") { check_case("swiglu_ffn_bias"); }
TEST_CASE("d2l parity: EncoderBlock", "[nn][torch]") { check_case("encoder_block"); }
TEST_CASE("d2l parity: TransformerEncoder with 2 layers", "[nn][torch]") {
  check_case("transformer_encoder");
}
TEST_CASE("d2l parity: DecoderBlock in training mode", "[nn][torch]") {
  check_case("decoder_block");
}
TEST_CASE("d2l parity: EncoderDecoder with 2 + 2 layers in training mode", "[nn][torch]") {
  check_case("encoder_decoder");
}

TEST_CASE("d2l parity: the PositionalEncoding table against d2l's float32 table", "[nn][torch]") {
  // d2l computes the angles i / 10000^(2j/d) and their sines and cosines in float32; ag computes
  // them in double and rounds once. Below 12 positions the angles stay under 12 (exact for j = 0,
  // under 4 otherwise), so d2l's rounded angle is off by at most about one float32 ulp of 4
  // (2^-22) and the sine adds half an ulp of 1 (2^-25): an absolute 4·2^-23 ≈ 4.8e-7 bounds the
  // difference. (For long sequences the float32 angle error grows with i; see the script.)
  const ParityFixture* fixture = find_fixture(kTableFixture);
  INFO("torch: " << (fixture ? fixture->torch_code : "(no fixture; regenerate the .inc?)"));
  REQUIRE(fixture != nullptr);
  REQUIRE(fixture->output_shape.size() == 3);
  const int64_t max_len = fixture->output_shape[1], num_hiddens = fixture->output_shape[2];
  ag::nn::PositionalEncoding encoding(num_hiddens, 0.0, max_len);
  constexpr Tolerance kFloat32TableTolerance{0.0, 4.0 / (1 << 23)};
  const std::string diff =
      compare(encoding.P, fixture->output_shape, fixture->output, kFloat32TableTolerance);
  INFO("P: " << diff);
  CHECK(diff.empty());
}

TEST_CASE("parity: RotaryEmbedding's tables against Llama's precompute_freqs_cis", "[nn][torch]") {
  // Llama's angles t · (1 / θ^(2j/dim)) and ag's t / base^(2j/dim), both in double, differ by an
  // ulp or so of the angle (about 2⁻⁴³ at t ≈ 1000); rounded to float32 they agree, or differ by
  // one float32 ulp where a value sits next to a rounding boundary: at most 2⁻²⁴ for |values| < 1.
  const ParityFixture* fixture = find_fixture(kRotaryTableFixture);
  INFO("torch: " << (fixture ? fixture->torch_code : "(no fixture; regenerate the .inc?)"));
  REQUIRE(fixture != nullptr);
  REQUIRE(fixture->output_shape == ag::Shape{2, 40, 4});
  ag::nn::RotaryEmbedding rope(8);
  const auto [c, s] = rope.angles(1000, 40, ag::float32);  // (40, 4) each
  constexpr Tolerance kOneUlpBelowOne{0.0, 1.0 / (1 << 24)};
  const std::string diff =
      compare(ag::stack({c, s}), fixture->output_shape, fixture->output, kOneUlpBelowOne);
  INFO("cos and sin: " << diff);
  CHECK(diff.empty());
}
