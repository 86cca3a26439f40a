// The layers' errors: each shape mistake is an ag::ShapeError naming the layer and the shapes,
// each bad constructor argument an ag::ValueError.
#include "nn_test_util.h"

using namespace ag;
using Catch::Matchers::Contains;
using Catch::Matchers::Equals;

TEST_CASE("Linear: an input not ending in in_features", "[nn][errors]") {
  manual_seed(0);
  nn::Linear linear(4, 3);
  CHECK_THROWS_AS(linear(ones({2, 5})), ShapeError);
  CHECK_THROWS_WITH(
      linear(ones({2, 5})), Equals("Linear: input of shape [2,5] does not end in in_features = 4"));
  CHECK_THROWS_WITH(
      linear(ones({7, 2, 3})), Contains("Linear") && Contains("[7,2,3]") && Contains("4"));
  CHECK_THROWS_WITH(linear(scalar_tensor(1.0)), Contains("Linear") && Contains("[]"));
  CHECK_THROWS_AS(nn::Linear(0, 3), ValueError);
  CHECK_THROWS_WITH(nn::Linear(4, -1), Contains("Linear") && Contains("-1"));
}

TEST_CASE("LayerNorm: an input not ending in normalized_shape", "[nn][errors]") {
  nn::LayerNorm ln({4});
  CHECK_THROWS_AS(ln(ones({2, 3})), ShapeError);
  CHECK_THROWS_WITH(
      ln(ones({2, 3})), Contains("LayerNorm") && Contains("[2,3]") && Contains("[4]"));
  nn::LayerNorm ln2({3, 4});
  CHECK_THROWS_WITH(
      ln2(ones({2, 4, 3})), Contains("LayerNorm") && Contains("[2,4,3]") && Contains("[3,4]"));
  CHECK_THROWS_WITH(ln2(ones({4})), Contains("LayerNorm") && Contains("[4]") && Contains("[3,4]"));
  CHECK_THROWS_AS(nn::LayerNorm({}), ValueError);
  CHECK_THROWS_WITH(
      nn::LayerNorm({4}, -1e-5), Equals("LayerNorm: eps -1e-05 must not be negative (nor NaN)"));
}

TEST_CASE("LayerNorm: the fused kernel and the composed path reject the same inputs",
    "[nn][errors][fused]") {
  for (bool fused : {true, false}) {
    INFO("fused_kernels " << fused);
    nn::FusedKernelsGuard path(fused);
    nn::LayerNorm ln({4});
    CHECK_THROWS_WITH(ln(ones({2, 3})),
        Equals("LayerNorm: input of shape [2,3] does not end in normalized_shape [4]"));
    // float32 parameters, a float64 input.
    CHECK_THROWS_AS(ln(ones({2, 4}, float64)), DTypeError);
  }
}

TEST_CASE("RMSNorm: its arguments, and inputs both paths reject alike", "[nn][errors][fused]") {
  CHECK_THROWS_WITH(nn::RMSNorm({}), Equals("RMSNorm: normalized_shape cannot be empty"));
  CHECK_THROWS_WITH(
      nn::RMSNorm({}, std::nullopt, false), Equals("RMSNorm: normalized_shape cannot be empty"));
  CHECK_THROWS_WITH(
      nn::RMSNorm({4}, -1e-5), Equals("RMSNorm: eps -1e-05 must not be negative (nor NaN)"));
  for (bool fused : {true, false}) {
    INFO("fused_kernels " << fused);
    nn::FusedKernelsGuard path(fused);
    nn::RMSNorm norm({3, 4});
    CHECK_THROWS_WITH(norm(ones({2, 4, 3})),
        Equals("RMSNorm: input of shape [2,4,3] does not end in normalized_shape [3,4]"));
    CHECK_THROWS_AS(norm(ones({3, 4}, float64)), DTypeError);  // float32 weight, float64 input
    CHECK_THROWS_WITH(norm(ones({3, 4}).to(int64)),
        Equals("RMSNorm: input of dtype int64 and shape [3,4] is not floating point; convert it "
               "first (x.to(ag::float32))"));
  }
}

TEST_CASE("PositionalEncoding: an input of the wrong width or rank", "[nn][errors]") {
  nn::PositionalEncoding encoding(8, 0.0, 10);
  CHECK_THROWS_AS(encoding(ones({2, 3, 6})), ShapeError);
  CHECK_THROWS_WITH(encoding(ones({2, 3, 6})),
      Contains("PositionalEncoding") && Contains("[2,3,6]") && Contains("8"));
  CHECK_THROWS_WITH(encoding(ones({3, 8})), Contains("PositionalEncoding") && Contains("[3,8]"));
  nn::LearnedPositionalEncoding learned(8, 0.0, 10);
  CHECK_THROWS_WITH(
      learned(ones({2, 3, 6})), Contains("LearnedPositionalEncoding") && Contains("[2,3,6]"));
  CHECK_THROWS_AS(nn::PositionalEncoding(0, 0.0), ValueError);
}

TEST_CASE("DotProductAttention: queries, keys and values that do not fit", "[nn][errors]") {
  nn::DotProductAttention attention(0.0);
  // Query width 4 against key width 3.
  CHECK_THROWS_AS(attention(ones({2, 3, 4}), ones({2, 5, 3}), ones({2, 5, 6})), ShapeError);
  CHECK_THROWS_WITH(attention(ones({2, 3, 4}), ones({2, 5, 3}), ones({2, 5, 6})),
      Contains("DotProductAttention") && Contains("[2,3,4]") && Contains("[2,5,3]") &&
          Contains("[2,5,6]"));
  // 5 keys but 4 values.
  CHECK_THROWS_WITH(attention(ones({2, 3, 4}), ones({2, 5, 4}), ones({2, 4, 6})),
      Contains("DotProductAttention") && Contains("[2,5,4]") && Contains("[2,4,6]"));
  // Batch sizes differ.
  CHECK_THROWS_WITH(attention(ones({3, 3, 4}), ones({2, 5, 4}), ones({2, 5, 6})),
      Contains("DotProductAttention") && Contains("[3,3,4]"));
  // Not 3-D.
  CHECK_THROWS_WITH(attention(ones({3, 4}), ones({5, 4}), ones({5, 6})),
      Contains("DotProductAttention") && Contains("[3,4]"));
  // valid_lens that do not fit the scores.
  CHECK_THROWS_AS(
      attention(ones({2, 3, 4}), ones({2, 5, 4}), ones({2, 5, 6}), tensor({1, 2, 3})), ShapeError);
}

TEST_CASE(
    "transpose_qkv and transpose_output: widths that do not split into the heads", "[nn][errors]") {
  CHECK_THROWS_AS(nn::transpose_qkv(ones({2, 3, 5}), 2), ShapeError);
  CHECK_THROWS_WITH(nn::transpose_qkv(ones({2, 3, 5}), 2),
      Contains("transpose_qkv") && Contains("[2,3,5]") && Contains("2 heads"));
  CHECK_THROWS_WITH(
      nn::transpose_qkv(ones({3, 6}), 2), Contains("transpose_qkv") && Contains("[3,6]"));
  CHECK_THROWS_AS(nn::transpose_qkv(ones({2, 3, 4}), 0), ShapeError);
  CHECK_THROWS_WITH(nn::transpose_output(ones({3, 2, 2}), 2),
      Contains("transpose_output") && Contains("[3,2,2]") && Contains("2 heads"));
}

TEST_CASE(
    "MultiHeadAttention: inputs and valid_lens of the wrong shape name the layer and the shapes",
    "[nn][errors]") {
  manual_seed(0);
  nn::MultiHeadAttention attention(4, 4, 4, 4, 2, 0.0);
  CHECK_THROWS_AS(attention(ones({2, 3, 5}), ones({2, 3, 4}), ones({2, 3, 4})), ShapeError);
  CHECK_THROWS_WITH(attention(ones({2, 3, 5}), ones({2, 3, 4}), ones({2, 3, 4})),
      Contains("MultiHeadAttention") && Contains("queries [2,3,5]") && Contains("(B,Q,4)"));
  CHECK_THROWS_AS(
      attention(ones({2, 3, 4}), ones({2, 3, 4}), ones({2, 3, 4}), tensor({4, 1})), ShapeError);
  CHECK_THROWS_WITH(attention(ones({2, 3, 4}), ones({2, 3, 4}), ones({2, 3, 4}), tensor({1, 1, 1})),
      Contains("MultiHeadAttention: valid_lens of shape [3]") && Contains("[2,3,4]"));
}

namespace {
// The message of the exception `call` throws ("" if none).
template <class Call>
std::string error_of(Call call) {
  try {
    call();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST_CASE(
    "the attention layers: valid lengths outside [0, K] name the layer and the caller's "
    "shapes, not the op inside",
    "[nn][errors]") {
  manual_seed(0);
  const Tensor queries = ones({2, 3, 4}), keys = ones({2, 5, 4});  // B 2, Q 3, K 5, D 4
  const Tensor beyond_k = tensor({6, 1}), negative = tensor({1, 2, 3, 0, -1, 5}).reshape({2, 3});
  nn::MultiHeadAttention mha(4, 4, 4, 4, 2, 0.0);
  for (const bool fused : {true, false}) {
    nn::FusedKernelsGuard guard(fused);
    INFO((fused ? "fused kernels" : "composed d2l ops"));
    const std::string message = error_of([&] { mha(queries, keys, keys, beyond_k); });
    CHECK(message ==
          "MultiHeadAttention: valid length 6 is not an integer in [0, 5] (valid_lens of shape "
          "[2], keys of shape [2,5,4])");
    CHECK_THAT(error_of([&] { mha(queries, keys, keys, negative); }),
        Equals("MultiHeadAttention: valid length -1 is not an integer in [0, 5] (valid_lens of "
               "shape [2,3], keys of shape [2,5,4])"));
    CHECK_THAT(error_of([&] {
      mha(queries, keys, keys, tensor({1.5, 2.0}));
    }),
        Contains("MultiHeadAttention: valid length 1.5"));
    CHECK_THAT(error_of([&] { mha(queries, keys, keys, ones({3})); }),
        Equals("MultiHeadAttention: valid_lens of shape [3] does not fit queries of shape "
               "[2,3,4] (expected [2] or [2,3])"));
    CHECK_THROWS_AS(mha(queries, keys, keys, beyond_k), ShapeError);
    // 0 and K are valid: K masks nothing.
    CHECK(mha(queries, keys, keys, tensor({5, 0})).shape() == Shape{2, 3, 4});

    nn::DotProductAttention dot(0.0);
    CHECK_THAT(error_of([&] { dot(queries, keys, keys, beyond_k); }),
        Equals("DotProductAttention: valid length 6 is not an integer in [0, 5] (valid_lens of "
               "shape [2], keys of shape [2,5,4])"));
    nn::AdditiveAttention additive(4, 4, 8, 0.0);
    CHECK_THAT(error_of([&] { additive(queries, keys, keys, negative); }),
        Contains("AdditiveAttention: valid length -1") && Contains("keys of shape [2,5,4]"));
  }
  // forward_heads takes the heads' shapes (B, H, Q, d) from its caller, and names them.
  nn::DotProductAttention dot(0.0);
  const Tensor q_heads = ones({2, 2, 3, 2}), k_heads = ones({2, 2, 5, 2});
  CHECK_THAT(error_of([&] { dot.forward_heads(q_heads, k_heads, k_heads, beyond_k); }),
      Equals("DotProductAttention::forward_heads: valid length 6 is not an integer in [0, 5] "
             "(valid_lens of shape [2], keys of shape [2,2,5,2])"));
  CHECK_THAT(error_of([&] {
    dot.forward_heads(q_heads, ones({2, 5, 2}), k_heads);
  }),
      Contains("DotProductAttention::forward_heads: queries [2,2,3,2], keys [2,5,2]"));
}

TEST_CASE("Dropout and Embedding: bad constructor arguments and indices", "[nn][errors]") {
  CHECK_THROWS_AS(nn::Dropout(1.5), ValueError);
  CHECK_THROWS_WITH(nn::Dropout(-0.1), Contains("Dropout") && Contains("-0.1"));
  CHECK_THROWS_AS(nn::Embedding(0, 4), ValueError);
  manual_seed(0);
  nn::Embedding embedding(5, 3);
  CHECK_THROWS_AS(embedding(tensor({1, 5})), ShapeError);  // index 5 of a table of 5
}

TEST_CASE("TransformerDecoderBlock: a state without a slot for the block", "[nn][errors]") {
  manual_seed(0);
  nn::TransformerDecoderBlock block(4, 4, 4, 4, {4}, 4, 8, 2, 0.0, 1);
  nn::DecoderState state{ones({1, 2, 4}), Tensor(), std::vector<Tensor>(1)};  // only slot 0
  CHECK_THROWS_AS(block.forward(ones({1, 2, 4}), state), ValueError);
  CHECK_THROWS_WITH(block.forward(ones({1, 2, 4}), state),
      Contains("TransformerDecoderBlock") && Contains("block 1"));
}

TEST_CASE("a decoder step that fails leaves the decoder state as it was", "[nn][errors]") {
  manual_seed(0);
  nn::TransformerDecoder decoder(5, 4, 4, 4, 4, {4}, 4, 8, 2, 2, 0.0);
  decoder.eval();
  nn::DecoderState state = decoder.init_state(ones({1, 3, 4}), tensor({3}));
  decoder(ones({1, 1}), state);  // one good step
  REQUIRE(state.key_values[0].size(1) == 1);
  state.enc_valid_lens =
      tensor({7});  // longer than the 3 encoder positions: the cross-attention throws
  CHECK_THROWS_AS(decoder(ones({1, 1}), state), ShapeError);
  // The failed step grew neither block's cache.
  CHECK(state.key_values[0].size(1) == 1);
  CHECK(state.key_values[1].size(1) == 1);
}
