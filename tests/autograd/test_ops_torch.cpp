// Every ag op against PyTorch: forward values and input gradients.
//
// tests/fixtures/make_torch_fixtures.py ran each case in PyTorch (float64) and wrote its inputs,
// the upstream gradient it fed to backward, the output and each input's gradient into
// torch_fixtures.inc. Here each case name maps to a lambda doing the same with ag; the test runs
// it forward, runs backward with the same upstream gradient and compares everything with what
// PyTorch computed — in float64 (to 1e-10) and again with the inputs converted to float32.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "autograd/autograd.h"
#include "autograd/ops.h"

namespace {

// ---- the fixtures (filled by torch_fixtures.inc) ----------------------------------------------

struct FixtureInput {
  std::string name;
  ag::Shape shape;
  std::vector<double> values;
  // PyTorch's gradient of this input; nullopt for inputs that are not differentiated (masks,
  // conditions, indices) and for forward-only cases.
  std::optional<std::vector<double>> grad;
};

struct FixtureOutput {
  ag::Shape shape;
  std::vector<double> values;
  // The gradient backward starts from (random, not ones); nullopt for forward-only cases.
  std::optional<std::vector<double>> upstream;
};

struct OpFixture {
  std::string name;
  std::string torch_code;  // the PyTorch code that produced the case
  std::vector<FixtureInput> inputs;
  std::vector<FixtureOutput> outputs;  // several for ops like split
};

// torch_fixtures.inc is a list of AG_OP_FIXTURE({...}) and AG_PRINT_FIXTURE({...}) entries; this
// test reads the op entries and skips the print ones. Each entry is built by its own small lambda,
// which compiles much faster than one huge initializer.
const std::vector<OpFixture>& op_fixtures() {
  static const std::vector<OpFixture> fixtures = [] {
    std::vector<OpFixture> all;
#define AG_OP_FIXTURE(...) all.push_back([]() -> OpFixture { return __VA_ARGS__; }());
#define AG_PRINT_FIXTURE(...)
#include "torch_fixtures.inc"
#undef AG_OP_FIXTURE
#undef AG_PRINT_FIXTURE
    return all;
  }();
  return fixtures;
}

const OpFixture* find_fixture(const std::string& name) {
  for (const OpFixture& fixture : op_fixtures())
    if (fixture.name == name) return &fixture;
  return nullptr;
}

// ---- the ag side of each case -------------------------------------------------------------------

// A case's inputs by the names the PyTorch code uses ("x", "a", "mask", ...).
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

using Outputs = std::vector<ag::Tensor>;
using OpFn = std::function<Outputs(const Args&)>;

// A case whose ag code is one expression with one output.
#define AG_CASE(name, expression)                                \
  {                                                              \
    name, [](const Args& in) -> Outputs { return {expression}; } \
  }

// The integer positions held by an index tensor, for the std::vector overload of index_select.
std::vector<int64_t> positions(const ag::Tensor& index) {
  std::vector<int64_t> out;
  for (double v : index.to_vector<double>()) out.push_back(static_cast<int64_t>(v));
  return out;
}

// An index held by the fixture as float64 integers (its only format), as the int64 tensor PyTorch's
// code makes of it with index.long(). Detached: a forward-only case feeds inputs that require
// grad, and converting one is not differentiable.
ag::Tensor as_int64(const ag::Tensor& index) { return index.detach().to(ag::int64); }

// ag::attention on the head views (B, H, T, C) of (B, T, H, C) inputs, without dropout, on its
// whole-row kernel (fused_attention_of_heads) or its tiled one (tiled_attention_of_heads).
ag::Tensor fused_attention_of_heads(const Args& in) {
  ag::Generator unused(0);
  auto heads = [](const ag::Tensor& x) { return x.permute({0, 2, 1, 3}); };
  ag::AttentionKernelGuard whole_rows(ag::AttentionKernel::whole_rows);
  return ag::attention(heads(in["q"]), heads(in["k"]), heads(in["v"]), in["lens"], 0.0,
      /*training=*/true, unused);
}

ag::Tensor tiled_attention_of_heads(const Args& in) {
  ag::Generator unused(0);
  auto heads = [](const ag::Tensor& x) { return x.permute({0, 2, 1, 3}); };
  ag::AttentionKernelGuard tiled(ag::AttentionKernel::tiled);
  return ag::attention(heads(in["q"]), heads(in["k"]), heads(in["v"]), in["lens"], 0.0,
      /*training=*/true, unused);
}

// ag::attention with is_causal on the head views, on the kernel `kernel`.
ag::Tensor causal_attention_of_heads(const Args& in, ag::AttentionKernel kernel) {
  auto heads = [](const ag::Tensor& x) { return x.permute({0, 2, 1, 3}); };
  ag::AttentionKernelGuard guard(kernel);
  return ag::attention(heads(in["q"]), heads(in["k"]), heads(in["v"]), {.is_causal = true});
}

// ag::attention on the head views with AttentionOptions' ALiBi (ag::alibi_slopes(H), the paper's
// get_slopes) when `alibi`, grouped-query attention (k and v may have fewer heads than q), and the
// fixture's valid lengths `lens` or is_causal, on the kernel `kernel`.
ag::Tensor alibi_gqa_attention_of_heads(
    const Args& in, ag::AttentionKernel kernel, bool alibi, bool causal) {
  auto heads = [](const ag::Tensor& x) { return x.permute({0, 2, 1, 3}); };
  const int64_t H = in["q"].size(2);  // q is (B, Tq, H, d)
  ag::AttentionKernelGuard guard(kernel);
  return ag::attention(heads(in["q"]), heads(in["k"]), heads(in["v"]),
      {.valid_lens = causal ? ag::Tensor() : in["lens"],
          .is_causal = causal,
          .alibi_slopes = alibi ? ag::alibi_slopes(H) : std::vector<double>{},
          .enable_gqa = true});
}

struct Family {
  std::string name;
  std::map<std::string, OpFn> cases;  // fixture name -> ag code
};

// Each lambda mirrors the `// torch:` line of the fixture with the same name. Each family is run
// by its own TEST_CASE at the end of this file.
const std::vector<Family>& families() {
  static const std::vector<Family> all = {
      {"binary arithmetic",
          {
              AG_CASE("add", in["a"] + in["b"]),
              AG_CASE("add_broadcast_btd_d", in["a"] + in["b"]),
              AG_CASE("add_broadcast_both", in["a"] + in["b"]),
              AG_CASE("sub", in["a"] - in["b"]),
              AG_CASE("sub_broadcast_btd_d", in["a"] - in["b"]),
              AG_CASE("sub_broadcast_d_btd", in["b"] - in["a"]),
              AG_CASE("mul", in["a"] * in["b"]),
              AG_CASE("mul_broadcast_btd_d", in["a"] * in["b"]),
              AG_CASE("mul_broadcast_b1th_b1t1", in["a"] * in["b"]),
              AG_CASE("mul_broadcast_both", in["a"] * in["b"]),
              AG_CASE("mul_same_input", in["x"] * in["x"]),
              AG_CASE("div", in["a"] / in["b"]),
              AG_CASE("div_broadcast_btd_d", in["a"] / in["b"]),
              AG_CASE("div_broadcast_b1th_b1t1", in["a"] / in["b"]),
          }},
      {"tensor-scalar arithmetic",
          {
              AG_CASE("add_scalar", in["x"] + 1.5),
              AG_CASE("scalar_add", 1.5 + in["x"]),
              AG_CASE("sub_scalar", in["x"] - 0.75),
              AG_CASE("scalar_sub", 2.5 - in["x"]),
              AG_CASE("mul_scalar", in["x"] * -1.25),
              AG_CASE("scalar_mul", 0.5 * in["x"]),
              AG_CASE("div_scalar", in["x"] / 3.0),
              AG_CASE("scalar_div", 2.0 / in["x"]),
              AG_CASE("neg", -in["x"]),
          }},
      {"unary math",
          {
              AG_CASE("pow_2", in["x"].pow(2)),
              AG_CASE("pow_3", in["x"].pow(3)),
              AG_CASE("pow_0_5", in["x"].pow(0.5)),
              AG_CASE("pow_neg1", in["x"].pow(-1)),
              AG_CASE("pow_0", in["x"].pow(0)),
              AG_CASE("exp", ag::exp(in["x"])),
              AG_CASE("log", ag::log(in["x"])),
              AG_CASE("sqrt", ag::sqrt(in["x"])),
              AG_CASE("tanh", ag::tanh(in["x"])),
              AG_CASE("sigmoid", ag::sigmoid(in["x"])),
              AG_CASE("relu", ag::relu(in["x"])),
              AG_CASE("gelu", ag::gelu(in["x"])),
              AG_CASE("gelu_tanh", ag::gelu(in["x"], "tanh")),
              AG_CASE("amax_dims", ag::amax(in["x"], {0, 2})),
              AG_CASE("logsumexp_dim", ag::logsumexp(in["x"], -1)),
              AG_CASE("logsumexp_dims_keepdim", ag::logsumexp(in["x"], {0, 2}, true)),
              AG_CASE("stack_dim1", ag::stack({in["a"], in["b"], in["a"] * in["b"]}, 1)),
              AG_CASE("tril", ag::tril(in["x"])),
              AG_CASE("triu_diagonal1", ag::triu(in["x"], 1)),
              AG_CASE("tril_diagonal_neg1", ag::tril(in["x"], -1)),
              AG_CASE("amin_dim1_keepdim", ag::amin(in["x"], {1}, true)),
              AG_CASE("min_values_dim", in["x"].min(-1).values),
              AG_CASE("sum_int_dim", in["x"].sum(-1)),
              AG_CASE("mean_int_dim_keepdim", in["x"].mean(1, true)),
              AG_CASE("silu", ag::silu(in["x"])),
              AG_CASE("abs", ag::abs(in["x"])),
              AG_CASE("sin", ag::sin(in["x"])),
              AG_CASE("cos", ag::cos(in["x"])),
              AG_CASE("erf", ag::erf(in["x"])),
              AG_CASE("rsqrt", ag::rsqrt(in["x"])),
              AG_CASE("maximum", ag::maximum(in["a"], in["b"])),
              AG_CASE("maximum_broadcast", ag::maximum(in["a"], in["b"])),
              AG_CASE("maximum_ties", ag::maximum(in["a"], in["b"])),
              AG_CASE("minimum", ag::minimum(in["a"], in["b"])),
              AG_CASE("minimum_ties", ag::minimum(in["a"], in["b"])),
              AG_CASE("clamp", ag::clamp(in["x"], -0.5, 0.7)),
              AG_CASE("clamp_min", ag::clamp(in["x"], -0.5)),
              AG_CASE("clamp_max", ag::clamp(in["x"], std::nullopt, 0.7)),
          }},
      {"where and masked_fill",
          {
              AG_CASE("where", ag::where(in["cond"], in["a"], in["b"])),
              AG_CASE("where_broadcast", ag::where(in["cond"], in["a"], in["b"])),
              AG_CASE("masked_fill", ag::masked_fill(in["x"], in["mask"], -2.5)),
              AG_CASE("masked_fill_broadcast", ag::masked_fill(in["x"], in["mask"], -2.5)),
          }},
      {"reductions",
          {
              AG_CASE("sum_all", in["x"].sum()),
              AG_CASE("sum_dim1", in["x"].sum({1})),
              AG_CASE("sum_last_dim_keepdim", in["x"].sum({-1}, /*keepdim=*/true)),
              AG_CASE("sum_dims_0_2", in["x"].sum({0, 2})),
              AG_CASE("sum_dims_0_2_keepdim", in["x"].sum({0, 2}, /*keepdim=*/true)),
              AG_CASE("mean_all", in["x"].mean()),
              AG_CASE("mean_dim1_keepdim", in["x"].mean({1}, /*keepdim=*/true)),
              AG_CASE("mean_dims_0_2", in["x"].mean({0, 2})),
              AG_CASE("max_all", in["x"].max()),
              AG_CASE("max_dim1", in["x"].max({1})),
              AG_CASE("max_last_dim_keepdim", in["x"].max({-1}, /*keepdim=*/true)),
              AG_CASE("max_dims_0_2", in["x"].max({0, 2})),
              AG_CASE("max_dims_0_2_keepdim", in["x"].max({0, 2}, /*keepdim=*/true)),
              AG_CASE("var_all", ag::var(in["x"])),
              // ag::var(x) is unbiased only; the biased variance of everything lists every dim.
              AG_CASE("var_all_correction0", ag::var(in["x"], {0, 1, 2}, /*correction=*/0)),
              AG_CASE("var_dim1", in["x"].var({1}, /*correction=*/1)),
              AG_CASE("var_last_dim_correction0_keepdim",
                  in["x"].var({-1}, /*correction=*/0, /*keepdim=*/true)),
              AG_CASE("var_dims_0_2_correction0", in["x"].var({0, 2}, /*correction=*/0)),
              AG_CASE(
                  "var_dims_0_2_keepdim", in["x"].var({0, 2}, /*correction=*/1, /*keepdim=*/true)),
          }},
      {"softmax",
          {
              AG_CASE("softmax_last", ag::softmax(in["x"], -1)),
              AG_CASE("softmax_dim0", ag::softmax(in["x"], 0)),
              AG_CASE("softmax_dim1", ag::softmax(in["x"], 1)),
              AG_CASE("log_softmax_last", ag::log_softmax(in["x"], -1)),
              AG_CASE("log_softmax_dim0", ag::log_softmax(in["x"], 0)),
              AG_CASE("log_softmax_dim1", ag::log_softmax(in["x"], 1)),
              AG_CASE("length_masked_softmax_per_row",
                  ag::length_masked_softmax(in["x"], in["valid_lens"])),
              AG_CASE("length_masked_softmax_per_query",
                  ag::length_masked_softmax(in["x"], in["valid_lens"])),
              AG_CASE("length_masked_softmax_unmasked",
                  ag::length_masked_softmax(in["x"], ag::Tensor())),
          }},
      {"layer_norm",
          {
              AG_CASE(
                  "layer_norm_op_last_dim", ag::layer_norm(in["x"], {4}, in["w"], in["b"], 1e-5)),
              AG_CASE("layer_norm_op_two_dims_no_affine",
                  ag::layer_norm(in["x"], {3, 4}, ag::Tensor(), ag::Tensor(), 1e-5)),
              AG_CASE("layer_norm_op_weight_only_eps",
                  ag::layer_norm(in["x"], {5}, in["w"], ag::Tensor(), 0.25)),
              AG_CASE("layer_norm_op_of_transposed",
                  ag::layer_norm(in["x"].transpose(0, 1), {3}, in["w"], in["b"], 1e-5)),
          }},
      {"dropout_add_layer_norm",
          {
              AG_CASE("dropout_add_layer_norm_eval",
                  ag::dropout_add_layer_norm(in["x"], in["y"], {4}, in["w"], in["b"], 1e-5, 0.5,
                      /*training=*/false, ag::default_generator())),
          }},
      {"rms_norm",
          {
              AG_CASE("rms_norm_op_last_dim", ag::rms_norm(in["x"], {4}, in["w"])),
              AG_CASE("rms_norm_op_two_dims_no_weight",
                  ag::rms_norm(in["x"], {3, 4}, ag::Tensor(), 1e-6)),
              AG_CASE("rms_norm_op_weight_large_eps", ag::rms_norm(in["x"], {5}, in["w"], 0.25)),
              AG_CASE("rms_norm_op_of_transposed",
                  ag::rms_norm(in["x"].transpose(0, 1), {3}, in["w"], 1e-5)),
          }},
      {"rotary_embedding",
          {
              // x is (B, T, H, d); each case turns its head view (B, H, T, d).
              AG_CASE("rotary_interleaved_llama",
                  ag::rotary_embedding(in["x"].permute({0, 2, 1, 3}), in["cos"],
                      in["sin"], ag::RotaryPairs::interleaved)),
              AG_CASE("rotary_interleaved_partial_from_7",
                  ag::rotary_embedding(in["x"].permute({0, 2, 1, 3}), in["cos"],
                      in["sin"], ag::RotaryPairs::interleaved)),
              AG_CASE("rotary_halves_neox",
                  ag::rotary_embedding(in["x"].permute({0, 2, 1, 3}), in["cos"],
                      in["sin"], ag::RotaryPairs::halves)),
              AG_CASE("rotary_halves_partial_from_2",
                  ag::rotary_embedding(in["x"].permute({0, 2, 1, 3}), in["cos"],
                      in["sin"], ag::RotaryPairs::halves)),
          }},
      {"matmul",
          {
              AG_CASE("matmul_2d", ag::matmul(in["a"], in["b"])),
              AG_CASE("matmul_3d", ag::matmul(in["a"], in["b"])),
              AG_CASE("matmul_3d_2d", ag::matmul(in["a"], in["b"])),
              AG_CASE("matmul_2d_3d", ag::matmul(in["a"], in["b"])),
              AG_CASE("matmul_4d_broadcast", ag::matmul(in["a"], in["b"])),
              AG_CASE("matmul_1d_1d", ag::matmul(in["a"], in["b"])),
              AG_CASE("matmul_1d_2d", ag::matmul(in["a"], in["b"])),
              AG_CASE("matmul_2d_1d", ag::matmul(in["a"], in["b"])),
              AG_CASE("matmul_1d_3d", ag::matmul(in["a"], in["b"])),
              AG_CASE("matmul_3d_1d", ag::matmul(in["a"], in["b"])),
              AG_CASE("matmul_transposed_b", ag::matmul(in["a"], in["b"].transpose(-1, -2))),
              AG_CASE("matmul_transposed_a", ag::matmul(in["a"].transpose(-1, -2), in["b"])),
          }},
      {"linear",
          {
              AG_CASE("linear_2d", ag::linear(in["x"], in["w"], in["b"])),
              AG_CASE("linear_3d", ag::linear(in["x"], in["w"], in["b"])),
              AG_CASE("linear_3d_no_bias", ag::linear(in["x"], in["w"])),
              AG_CASE("linear_1d", ag::linear(in["x"], in["w"], in["b"])),
              AG_CASE("linear_of_permuted", ag::linear(in["x"].transpose(0, 1), in["w"], in["b"])),
              AG_CASE("linear_of_transposed", ag::linear(in["x"].transpose(0, 1), in["w"])),
              AG_CASE("linear_relu_3d", ag::linear_relu(in["x"], in["w"], in["b"])),
              AG_CASE("linear_relu_no_bias", ag::linear_relu(in["x"], in["w"])),
          }},
      {"shape and indexing",
          {
              AG_CASE("reshape", in["x"].reshape({4, 6})),
              AG_CASE("reshape_infer", in["x"].reshape({3, -1})),
              AG_CASE("reshape_of_permuted", in["x"].permute({2, 0, 1}).reshape({4, 6})),
              AG_CASE("view", in["x"].view({6, 4})),
              AG_CASE("permute", in["x"].permute({2, 0, 1})),
              AG_CASE("permute_negative_dims", in["x"].permute({-1, 0, -2})),
              AG_CASE("transpose", in["x"].transpose(0, 2)),
              AG_CASE("transpose_last_two", in["x"].transpose(-1, -2)),
              AG_CASE("squeeze_all", in["x"].squeeze()),
              AG_CASE("squeeze_dim", in["x"].squeeze(1)),
              AG_CASE("squeeze_dim_not_one", in["x"].squeeze(0)),
              AG_CASE("unsqueeze", in["x"].unsqueeze(1)),
              AG_CASE("unsqueeze_last", in["x"].unsqueeze(-1)),
              AG_CASE("expand", in["x"].expand({2, 3, 4})),
              AG_CASE("expand_keep_size", in["x"].expand({2, -1, 4})),
              AG_CASE("slice_step", in["x"].slice(1, 1, 5, 2)),        // x[:, 1:5:2]
              AG_CASE("slice_negative_end", in["x"].slice(0, 1, -1)),  // x[1:-1]
              AG_CASE("slice_last_dim_step3",
                  in["x"].slice(-1, 0, in["x"].size(-1), 3)),  // x[..., ::3]
              AG_CASE("narrow", in["x"].narrow(1, 1, 3)),
              AG_CASE("select", in["x"].select(1, 2)),
              AG_CASE("concat_dim0", ag::concat({in["a"], in["b"]}, 0)),
              AG_CASE("concat_dim1", ag::concat({in["a"], in["b"], in["c"]}, 1)),
              AG_CASE("concat_last_dim", ag::concat({in["a"], in["b"]}, -1)),
              {"split_size", [](const Args& in) { return ag::split(in["x"], 2, 1); }},
              {"split_sizes",
                  [](const Args& in) {
                    return ag::split(in["x"], {1, 3}, 0);
                  }},
              // The index is a float tensor holding integers (ag accepts any dtype) ...
              AG_CASE("index_select_dim0", ag::index_select(in["x"], 0, in["index"])),
              AG_CASE("index_select_dim1", ag::index_select(in["x"], 1, in["index"])),
              // ... or a std::vector<int64_t>.
              AG_CASE("index_select_vector", ag::index_select(in["x"], 0, positions(in["index"]))),
              AG_CASE("repeat_interleave_dim0", ag::repeat_interleave(in["x"], 2, 0)),
              AG_CASE("repeat_interleave_dim1", ag::repeat_interleave(in["x"], 3, 1)),
              AG_CASE("contiguous_of_permuted", in["x"].permute({2, 0, 1}).contiguous()),
              AG_CASE("clone_of_permuted", in["x"].permute({2, 0, 1}).clone()),
              AG_CASE("to_float32_and_back", (in["x"].to(ag::float32) * 3.1).to(in["x"].dtype())),
          }},
      {"gathering, cumulative sums, topk",
          {
              // The fixtures hold every value as float64: an index arrives as a float tensor
              // holding integers and is made int64 here (index.long() in PyTorch's code), and an
              // int64 result (one_hot, topk's indices, cumsum of int64 or bool) is compared in the
              // dtype of the case's inputs (.double() in PyTorch's code).
              AG_CASE("gather_dim0", ag::gather(in["x"], 0, as_int64(in["index"]))),
              AG_CASE("gather_dim1_smaller_index", ag::gather(in["x"], 1, as_int64(in["index"]))),
              AG_CASE("gather_last_dim", ag::gather(in["x"], -1, as_int64(in["index"]))),
              AG_CASE("cumsum_dim0", ag::cumsum(in["x"], 0)),
              AG_CASE("cumsum_last_dim", ag::cumsum(in["x"], -1)),
              AG_CASE("cumsum_int64", ag::cumsum(as_int64(in["x"]), 1).to(in["x"].dtype())),
              AG_CASE("cumsum_bool", ag::cumsum(ag::ne(in["m"], 0.0), 0).to(in["m"].dtype())),
              AG_CASE("one_hot_inferred_classes",
                  ag::one_hot(as_int64(in["index"])).to(in["index"].dtype())),
              AG_CASE("one_hot_num_classes",
                  ag::one_hot(as_int64(in["index"]), 6).to(in["index"].dtype())),
              AG_CASE("topk_values", ag::topk(in["x"], 3).values),
              AG_CASE("topk_indices", ag::topk(in["x"], 3).indices.to(in["x"].dtype())),
              AG_CASE(
                  "topk_smallest_dim0_values", ag::topk(in["x"], 2, 0, /*largest=*/false).values),
              AG_CASE("topk_smallest_dim0_indices",
                  ag::topk(in["x"], 2, 0, /*largest=*/false).indices.to(in["x"].dtype())),
              AG_CASE("topk_all_of_middle_dim", ag::topk(in["x"], 4, 1).values),
              // Forward only (a NaN has no gradient to compare): the values of a detached x.
              {"topk_with_nan",
                  [](const Args& in) -> Outputs {
                    auto [values, indices] = ag::topk(in["x"].detach(), 2);
                    return {values, indices.to(in["x"].dtype())};
                  }},
              {"topk_smallest_with_nan",
                  [](const Args& in) -> Outputs {
                    auto [values, indices] = ag::topk(in["x"].detach(), 3, -1, /*largest=*/false);
                    return {values, indices.to(in["x"].dtype())};
                  }},
          }},
      {"losses",
          {
              AG_CASE(
                  "cross_entropy_none", ag::cross_entropy(in["x"], in["t"], ag::Reduction::none)),
              AG_CASE("cross_entropy_mean", ag::cross_entropy(in["x"], in["t"])),
              AG_CASE("cross_entropy_ignore_index_mean",
                  ag::cross_entropy(in["x"], in["t"], ag::Reduction::mean, -1)),
              AG_CASE("cross_entropy_ignore_default_none",
                  ag::cross_entropy(in["x"], in["t"], ag::Reduction::none)),
              AG_CASE("cross_entropy_sum_large_logits",
                  ag::cross_entropy(in["x"], in["t"], ag::Reduction::sum)),
          }},
      {"non-contiguous operands",
          {
              AG_CASE("mul_transposed", in["a"].transpose(0, 1) * in["b"]),
              AG_CASE("div_broadcast_d_btd", in["a"] / in["b"]),
              AG_CASE("sum_of_permuted", in["x"].permute({2, 0, 1}).sum({1})),
              AG_CASE("sum_dims_negative", in["x"].sum({-1, -3})),
              AG_CASE("max_of_transposed", in["x"].transpose(0, 1).max({0})),
              AG_CASE("var_of_permuted", in["x"].permute({1, 2, 0}).var({-1}, /*correction=*/1)),
              AG_CASE("softmax_of_transposed", ag::softmax(in["x"].transpose(0, 2), 1)),
              AG_CASE("matmul_3d_2d_transposed", ag::matmul(in["a"], in["b"].transpose(0, 1))),
              AG_CASE("matmul_strided_slice",
                  ag::matmul(in["a"].slice(1, 0, in["a"].size(1), 2), in["b"])),  // a[:, ::2]
              AG_CASE("matmul_permuted_batch", ag::matmul(in["a"].transpose(0, 1), in["b"])),
              AG_CASE("matmul_expanded", ag::matmul(in["a"].expand({3, 4}), in["b"])),
              AG_CASE("gather_of_transposed",
                  ag::gather(in["x"].transpose(0, 1), 0, as_int64(in["index"]))),
              AG_CASE("cumsum_of_permuted", ag::cumsum(in["x"].permute({2, 0, 1}), 1)),
              AG_CASE("index_select_of_transposed",
                  ag::index_select(in["x"].transpose(0, 1), 0, in["index"])),
              AG_CASE("repeat_interleave_of_transposed",
                  ag::repeat_interleave(in["x"].transpose(0, 1), 2, 1)),
              AG_CASE("concat_of_transposed", ag::concat({in["a"].transpose(0, 1), in["b"]}, 0)),
              AG_CASE("reshape_of_expanded", in["x"].expand({2, 3, 4}).reshape({6, 4})),
              AG_CASE("reshape_of_slice", in["x"].slice(1, 1, 3).reshape({-1})),  // x[:, 1:3]
          }},
      {"0-dim and empty tensors",
          {
              AG_CASE("expand_0dim", in["x"].expand({2, 3})),
              AG_CASE("unsqueeze_0dim", in["x"].unsqueeze(0)),
              AG_CASE("softmax_0dim", ag::softmax(in["x"], 0)),
              AG_CASE("log_softmax_0dim", ag::log_softmax(in["x"], 0)),
              AG_CASE("sum_0dim", in["x"].sum()),
              AG_CASE("concat_with_empty", ag::concat({in["a"], in["b"]}, 1)),
              AG_CASE("slice_empty", in["x"].slice(0, 3, 1)),                           // x[3:1]
              AG_CASE("slice_step_past_end", in["x"].slice(0, 1, in["x"].size(0), 5)),  // x[1::5]
          }},
      {"compositions",
          {
              AG_CASE("causal_masked_softmax",
                  ag::softmax(ag::masked_fill(in["x"], in["mask"], -INFINITY), -1)),
              AG_CASE("attention",
                  ag::matmul(
                      ag::softmax(
                          ag::matmul(in["q"], in["k"].transpose(-1, -2)) / std::sqrt(4.0), -1),
                      in["v"])),
              AG_CASE("scaled_dot_product_attention_batch_lens", fused_attention_of_heads(in)),
              AG_CASE("scaled_dot_product_attention_query_lens", fused_attention_of_heads(in)),
              AG_CASE("flash_attention_batch_lens", tiled_attention_of_heads(in)),
              AG_CASE("flash_attention_tiles", tiled_attention_of_heads(in)),
              AG_CASE("causal_attention_square",
                  causal_attention_of_heads(in, ag::AttentionKernel::whole_rows)),
              AG_CASE("causal_attention_cached",
                  causal_attention_of_heads(in, ag::AttentionKernel::tiled)),
              AG_CASE("causal_flash_attention_tiles",
                  causal_attention_of_heads(in, ag::AttentionKernel::tiled)),
              AG_CASE("alibi_attention_query_lens",
                  alibi_gqa_attention_of_heads(in, ag::AttentionKernel::whole_rows, true, false)),
              AG_CASE("alibi_causal_attention_cached",
                  alibi_gqa_attention_of_heads(in, ag::AttentionKernel::whole_rows, true, true)),
              AG_CASE("alibi_causal_flash_attention_tiles",
                  alibi_gqa_attention_of_heads(in, ag::AttentionKernel::tiled, true, true)),
              AG_CASE("gqa_attention_batch_lens",
                  alibi_gqa_attention_of_heads(in, ag::AttentionKernel::whole_rows, false, false)),
              AG_CASE("mqa_causal_attention_square",
                  alibi_gqa_attention_of_heads(in, ag::AttentionKernel::whole_rows, false, true)),
              AG_CASE("gqa_alibi_causal_flash_attention_cached",
                  alibi_gqa_attention_of_heads(in, ag::AttentionKernel::tiled, true, true)),
              AG_CASE("gqa_alibi_flash_attention_tiles",
                  alibi_gqa_attention_of_heads(in, ag::AttentionKernel::tiled, true, false)),
              AG_CASE("layer_norm",
                  (in["x"] - in["x"].mean({-1}, true)) /
                          ag::sqrt(in["x"].var({-1}, /*correction=*/0, /*keepdim=*/true) + 1e-5) *
                          in["w"] +
                      in["b"]),
          }},
      {"comparisons and argmax (forward only)",
          {
              AG_CASE("eq", ag::eq(in["a"], in["b"])),
              AG_CASE("eq_broadcast", ag::eq(in["a"], in["b"])),
              AG_CASE("eq_scalar", ag::eq(in["a"], 0.5)),
              AG_CASE("ne", ag::ne(in["a"], in["b"])),
              AG_CASE("ne_broadcast", ag::ne(in["a"], in["b"])),
              AG_CASE("ne_scalar", ag::ne(in["a"], 0.5)),
              AG_CASE("lt", ag::lt(in["a"], in["b"])),
              AG_CASE("lt_broadcast", ag::lt(in["a"], in["b"])),
              AG_CASE("lt_scalar", ag::lt(in["a"], 0.5)),
              AG_CASE("le", ag::le(in["a"], in["b"])),
              AG_CASE("le_broadcast", ag::le(in["a"], in["b"])),
              AG_CASE("le_scalar", ag::le(in["a"], 0.5)),
              AG_CASE("gt", ag::gt(in["a"], in["b"])),
              AG_CASE("gt_broadcast", ag::gt(in["a"], in["b"])),
              AG_CASE("gt_scalar", ag::gt(in["a"], 0.5)),
              AG_CASE("ge", ag::ge(in["a"], in["b"])),
              AG_CASE("ge_broadcast", ag::ge(in["a"], in["b"])),
              AG_CASE("ge_scalar", ag::ge(in["a"], 0.5)),
              AG_CASE("eq_nonfinite", ag::eq(in["a"], in["b"])),
              AG_CASE("ne_nonfinite", ag::ne(in["a"], in["b"])),
              AG_CASE("lt_nonfinite", ag::lt(in["a"], in["b"])),
              AG_CASE("le_nonfinite", ag::le(in["a"], in["b"])),
              AG_CASE("gt_nonfinite", ag::gt(in["a"], in["b"])),
              AG_CASE("ge_nonfinite", ag::ge(in["a"], in["b"])),
              AG_CASE("argmax_with_nan", ag::argmax(in["x"], 1)),
              AG_CASE("argmax_dim0", ag::argmax(in["x"], 0)),
              AG_CASE("argmax_dim1", ag::argmax(in["x"], 1)),
              AG_CASE("argmax_last_dim_keepdim", ag::argmax(in["x"], -1, /*keepdim=*/true)),
          }},
  };
  return all;
}

#undef AG_CASE

// ---- comparing ag's tensors with PyTorch's values -----------------------------------------------

struct Tolerance {
  double rtol, atol;  // |ag − torch| <= atol + rtol · |torch|
};
constexpr Tolerance kFloat64Tolerance{1e-10, 1e-10};
// float32 inputs carry a relative rounding error of ~6e-8 that each op propagates.
constexpr Tolerance kFloat32Tolerance{1e-5, 1e-5};

bool close(double actual, double expected, Tolerance tol) {
  if (std::isnan(expected) || std::isinf(expected))  // nan matches nan, inf the same inf
    return std::isnan(expected) ? std::isnan(actual) : actual == expected;
  return std::abs(actual - expected) <= tol.atol + tol.rtol * std::abs(expected);
}

// "" when `actual` has the expected dtype, shape and values; otherwise what differs.
std::string compare(const ag::Tensor& actual, ag::DType dtype, const ag::Shape& shape,
    const std::vector<double>& expected, Tolerance tol) {
  std::ostringstream report;
  if (!actual.defined()) return "no tensor (undefined)";
  if (actual.dtype() != dtype)
    report << "dtype " << ag::dtype_name(actual.dtype()) << " instead of " << ag::dtype_name(dtype)
           << "; ";
  if (actual.shape() != shape) {
    report << "shape " << ag::shape_str(actual.shape()) << " but torch has "
           << ag::shape_str(shape);
    return report.str();
  }
  const std::vector<double> values = actual.to_vector<double>();
  report.precision(17);
  int mismatches = 0;
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (close(values[i], expected[i], tol)) continue;
    if (++mismatches <= 6)
      report << "\n  element " << i << ": ag " << values[i] << ", torch " << expected[i]
             << " (difference " << values[i] - expected[i] << ")";
  }
  if (mismatches > 0)
    report << "\n  " << mismatches << " of " << values.size() << " elements differ";
  return report.str();
}

// Runs one fixture through its ag lambda in `dtype` and checks the output(s) and every input
// gradient against PyTorch's.
void check_against_torch(const OpFixture& fixture, const OpFn& fn, ag::DType dtype, Tolerance tol) {
  const bool forward_only = !fixture.outputs.front().upstream.has_value();
  // The inputs, as leaves of `dtype`. Inputs PyTorch differentiated require grad here too; in a
  // forward-only case all of them do, to check that the op records nothing.
  Args args;
  for (const FixtureInput& input : fixture.inputs) {
    ag::Tensor t = ag::tensor(input.values, input.shape, dtype);
    if (input.grad || forward_only) t.requires_grad_();
    args.add(input.name, t);
  }

  // Forward: each output against PyTorch's.
  const Outputs outputs = fn(args);
  CHECK(outputs.size() == fixture.outputs.size());
  if (outputs.size() != fixture.outputs.size()) return;
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    // A comparison or argmax gives bool or int64, as PyTorch's; the fixture holds its values as
    // numbers (test_dtypes.cpp checks those dtypes).
    const ag::Tensor out =
        ag::is_floating_point(outputs[i].dtype()) ? outputs[i] : outputs[i].to(dtype);
    const std::string diff =
        compare(out, dtype, fixture.outputs[i].shape, fixture.outputs[i].values, tol);
    INFO("output " << i << ": " << diff);
    CHECK(diff.empty());
  }

  if (forward_only) {
    // Comparisons and argmax are not differentiable (PyTorch returns bool / int64 tensors).
    for (const ag::Tensor& out : outputs) CHECK_FALSE(out.requires_grad());
    return;
  }

  // Backward from PyTorch's upstream gradient of each output. retain_graph: outputs of one op
  // (split) share the input's graph, and each backward adds into the inputs' .grad.
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    CHECK(outputs[i].requires_grad());
    outputs[i].backward(ag::tensor(*fixture.outputs[i].upstream, fixture.outputs[i].shape, dtype),
        /*retain_graph=*/true);
  }
  for (const FixtureInput& input : fixture.inputs) {
    if (!input.grad) continue;
    const std::string diff = compare(args[input.name].grad(), dtype, input.shape, *input.grad, tol);
    INFO("gradient of input '" << input.name << "': " << diff);
    CHECK(diff.empty());
  }
}

// One section per fixture of the family and dtype, so a failure names the case.
void check_family(const std::string& family_name) {
  const Family* family = nullptr;
  for (const Family& f : families())
    if (f.name == family_name) family = &f;
  REQUIRE(family != nullptr);
  for (const auto& [name, fn] : family->cases) {
    const OpFixture* fixture = find_fixture(name);
    for (const auto& [dtype, tol] :
        {std::pair{ag::float64, kFloat64Tolerance}, std::pair{ag::float32, kFloat32Tolerance}}) {
      DYNAMIC_SECTION(name << " (" << ag::dtype_name(dtype) << ")") {
        INFO("torch: " << (fixture ? fixture->torch_code : "(no fixture with this name)"));
        REQUIRE(fixture != nullptr);
        try {
          check_against_torch(*fixture, fn, dtype, tol);
        } catch (const std::exception& e) {
          FAIL_CHECK("ag threw: " << e.what());
        }
      }
    }
  }
}

}  // namespace

// ---- the tests ----------------------------------------------------------------------------------

TEST_CASE("torch fixtures: every fixture has an ag lambda and every lambda a fixture", "[torch]") {
  std::set<std::string> lambdas;
  for (const Family& family : families())
    for (const auto& [name, fn] : family.cases) {
      INFO("lambda '" << name << "' in two families");
      CHECK(lambdas.insert(name).second);
    }
  std::set<std::string> fixtures;
  for (const OpFixture& fixture : op_fixtures()) {
    INFO("fixture '" << fixture.name << "' is listed twice");
    CHECK(fixtures.insert(fixture.name).second);
  }
  for (const std::string& name : fixtures) {
    INFO("fixture '" << name << "' has no lambda in test_ops_torch.cpp");
    CHECK(lambdas.count(name) == 1);
  }
  for (const std::string& name : lambdas) {
    INFO("lambda '" << name << "' has no fixture in torch_fixtures.inc (regenerate it?)");
    CHECK(fixtures.count(name) == 1);
  }
}

TEST_CASE("torch fixtures: every differentiable op is checked against PyTorch", "[torch]") {
  // Runs every case's backward in float64 and records the ops it goes through. dropout is the
  // one op left out: its random mask cannot match PyTorch's generator (the fused attention ops'
  // cases run them without dropout).
  std::set<std::string> reached;
  ag::BackwardObserverGuard observe([&](const ag::Node& node, const ag::Tensor&, const ag::Grads&) {
    reached.insert(node.name());
  });
  for (const Family& family : families())
    for (const auto& [name, fn] : family.cases) {
      const OpFixture* fixture = find_fixture(name);
      if (fixture == nullptr || !fixture->outputs.front().upstream) continue;
      Args args;
      for (const FixtureInput& input : fixture->inputs) {
        ag::Tensor t = ag::tensor(input.values, input.shape, ag::float64);
        if (input.grad) t.requires_grad_();
        args.add(input.name, t);
      }
      try {
        const Outputs outputs = fn(args);
        for (std::size_t i = 0; i < outputs.size() && i < fixture->outputs.size(); ++i)
          outputs[i].backward(
              ag::tensor(*fixture->outputs[i].upstream, fixture->outputs[i].shape, ag::float64),
              /*retain_graph=*/true);
      } catch (const std::exception&) {
        // reported by the family's test case
      }
    }
  std::string missing;
  for (const char* op : ag::kOpNames)
    if (std::string(op) != "dropout" && !reached.count(op)) missing += std::string(op) + " ";
  INFO("ops no torch fixture reaches: " << missing);
  CHECK(missing.empty());
}

TEST_CASE("torch fixtures: binary arithmetic", "[torch]") { check_family("binary arithmetic"); }
TEST_CASE("torch fixtures: tensor-scalar arithmetic", "[torch]") {
  check_family("tensor-scalar arithmetic");
}
TEST_CASE("torch fixtures: unary math", "[torch]") { check_family("unary math"); }
TEST_CASE("torch fixtures: where and masked_fill", "[torch]") {
  check_family("where and masked_fill");
}
TEST_CASE("torch fixtures: reductions", "[torch]") { check_family("reductions"); }
TEST_CASE("torch fixtures: softmax", "[torch]") { check_family("softmax"); }
TEST_CASE("torch fixtures: layer_norm", "[torch]") { check_family("layer_norm"); }
TEST_CASE("torch fixtures: dropout_add_layer_norm", "[torch]") {
  check_family("dropout_add_layer_norm");
}
TEST_CASE("torch fixtures: rms_norm", "[torch]") { check_family("rms_norm"); }
TEST_CASE("torch fixtures: rotary_embedding", "[torch]") { check_family("rotary_embedding"); }
TEST_CASE("torch fixtures: matmul", "[torch]") { check_family("matmul"); }
TEST_CASE("torch fixtures: linear", "[torch]") { check_family("linear"); }
TEST_CASE("torch fixtures: losses", "[torch]") { check_family("losses"); }
TEST_CASE("torch fixtures: shape and indexing", "[torch]") { check_family("shape and indexing"); }
TEST_CASE("torch fixtures: gathering, cumulative sums, topk", "[torch][ops_index]") {
  check_family("gathering, cumulative sums, topk");
}
TEST_CASE("torch fixtures: non-contiguous operands", "[torch]") {
  check_family("non-contiguous operands");
}
TEST_CASE("torch fixtures: 0-dim and empty tensors", "[torch]") {
  check_family("0-dim and empty tensors");
}
TEST_CASE("torch fixtures: compositions", "[torch]") { check_family("compositions"); }
TEST_CASE("torch fixtures: comparisons and argmax", "[torch]") {
  check_family("comparisons and argmax (forward only)");
}
