// float64 finite-difference gradient checks (ag::gradcheck, default tolerances) of every layer,
// with respect to its inputs and its parameters. Parameters are checked by passing them as
// gradcheck inputs and pointing the layer's members at the copies gradcheck hands to f
// (nn_test::bind_all). Sizes are tiny so that each check stays fast under AddressSanitizer.
#include "nn_test_util.h"

using namespace ag;
using nn_test::bind_all;
using nn_test::input64;
using nn_test::with_parameters;

using Inputs = std::vector<Tensor>;

// ---- basic layers -------------------------------------------------------------------------------

TEST_CASE("gradcheck: Linear with bias, input and parameters", "[nn][gradcheck]") {
  manual_seed(10);
  nn::Linear linear(4, 3);
  linear.to(float64);
  CHECK_GRADCHECK(gradcheck(
      [&](const Inputs& in) {
        bind_all(linear, in, 1);
        return linear(in[0]);
      },
      with_parameters({input64({2, 3, 4}, 1)}, linear)));
}

TEST_CASE("gradcheck: Linear without bias, input and weight", "[nn][gradcheck]") {
  manual_seed(11);
  nn::Linear linear(3, 5, false);
  linear.to(float64);
  const Inputs inputs = with_parameters({input64({4, 3}, 2)}, linear);
  REQUIRE(inputs.size() == 2);
  CHECK_GRADCHECK(gradcheck(
      [&](const Inputs& in) {
        bind_all(linear, in, 1);
        return linear(in[0]);
      },
      inputs));
}

TEST_CASE("gradcheck: Embedding, its table", "[nn][gradcheck]") {
  manual_seed(12);
  nn::Embedding embedding(6, 3);
  embedding.to(float64);
  // Index 2 appears twice (its gradient is a sum), 5 never (its gradient is 0).
  const Tensor indices = tensor({2, 0, 2, 4, 1, 3}, {2, 3}, float64);
  CHECK_GRADCHECK(gradcheck(
      [&](const Inputs& in) {
        bind_all(embedding, in);
        return embedding(indices);
      },
      embedding.parameters()));
}

TEST_CASE("gradcheck: LayerNorm, input, weight and bias", "[nn][gradcheck]") {
  manual_seed(13);
  nn::LayerNorm ln({5});
  ln.to(float64);
  // Start from a non-trivial affine part, so that the input gradient goes through weight.
  Tensor weight = input64({5}, 3, 0.5, 1.5), bias = input64({5}, 4);
  CHECK_GRADCHECK(gradcheck(
      [&](const Inputs& in) {
        bind_all(ln, in, 1);
        return ln(in[0]);
      },
      {input64({2, 3, 5}, 5), weight, bias}));
}

TEST_CASE(
    "gradcheck: BatchNorm1d in training and eval, input, weight and bias", "[nn][gradcheck]") {
  for (bool training : {true, false}) {
    INFO("training " << training);
    nn::BatchNorm1d bn(3);
    bn.to(float64);
    bn.train(training);
    if (!training) {  // running statistics of their own
      bn.running_mean.copy_(input64({3}, 20).detach());
      bn.running_var.copy_(input64({3}, 21, 0.5, 1.5).detach());
    }
    for (const Shape& shape : {Shape{5, 3}, Shape{4, 3, 2}})
      CHECK_GRADCHECK(gradcheck(
          [&](const Inputs& in) {
            bind_all(bn, in, 1);
            return bn(in[0]);
          },
          {input64(shape, 22), input64({3}, 23, 0.5, 1.5), input64({3}, 24)}));
  }
}

TEST_CASE("gradcheck: LayerNorm over two trailing dims", "[nn][gradcheck]") {
  nn::LayerNorm ln({2, 3});
  ln.to(float64);
  CHECK_GRADCHECK(gradcheck(
      [&](const Inputs& in) {
        bind_all(ln, in, 1);
        return ln(in[0]);
      },
      {input64({4, 2, 3}, 6), input64({2, 3}, 7, 0.5, 1.5), input64({2, 3}, 8)}));
}

TEST_CASE("gradcheck: LayerNorm without bias (nanoGPT's), both paths", "[nn][gradcheck]") {
  for (bool fused : {true, false}) {
    INFO("fused_kernels " << fused);
    nn::FusedKernelsGuard path(fused);
    nn::LayerNorm ln({5}, 1e-5, /*elementwise_affine=*/true, /*bias=*/false);
    ln.to(float64);
    CHECK_GRADCHECK(gradcheck(
        [&](const Inputs& in) {
          bind_all(ln, in, 1);
          return ln(in[0]);
        },
        {input64({2, 3, 5}, 14), input64({5}, 15, 0.5, 1.5)}));
  }
}

// ---- masked_softmax and attention ---------------------------------------------------------------

TEST_CASE("gradcheck: RMSNorm, input and weight, both paths", "[nn][gradcheck]") {
  for (bool fused : {true, false}) {
    INFO("fused_kernels " << fused);
    nn::FusedKernelsGuard path(fused);
    nn::RMSNorm norm({5});
    norm.to(float64);
    CHECK_GRADCHECK(gradcheck(
        [&](const Inputs& in) {
          bind_all(norm, in, 1);
          return norm(in[0]);
        },
        {input64({2, 3, 5}, 9, -2.0, 2.0), input64({5}, 10, 0.5, 1.5)}));
  }
}

TEST_CASE("gradcheck: RMSNorm over two trailing dims without weight", "[nn][gradcheck]") {
  nn::RMSNorm norm({2, 3}, 1e-6, /*elementwise_affine=*/false);
  norm.to(float64);
  CHECK_GRADCHECK(gradcheck(
      [&](const Inputs& in) { return norm(in[0]); }, {input64({4, 2, 3}, 11, -2.0, 2.0)}));
}

TEST_CASE("gradcheck: masked_softmax with one valid length per row, including 0 and K",
    "[nn][gradcheck]") {
  const Tensor lens = tensor({2, 0, 4}, float64);
  CHECK_GRADCHECK(gradcheck([&](const Inputs& in) { return nn::masked_softmax(in[0], lens); },
      {input64({3, 2, 4}, 20, -2, 2)}));
}

TEST_CASE(
    "gradcheck: masked_softmax with one valid length per query, including 0", "[nn][gradcheck]") {
  const Tensor lens = tensor({1, 3, 0, 2, 4, 1}, {2, 3}, float64);
  CHECK_GRADCHECK(gradcheck([&](const Inputs& in) { return nn::masked_softmax(in[0], lens); },
      {input64({2, 3, 4}, 21, -2, 2)}));
}

TEST_CASE("gradcheck: masked_softmax without valid lengths", "[nn][gradcheck]") {
  CHECK_GRADCHECK(gradcheck(
      [](const Inputs& in) { return nn::masked_softmax(in[0]); }, {input64({2, 3, 4}, 22, -2, 2)}));
}

TEST_CASE("gradcheck: DotProductAttention, queries, keys and values", "[nn][gradcheck]") {
  nn::DotProductAttention attention(0.0);
  const Tensor lens = tensor({3, 1}, float64);
  CHECK_GRADCHECK(gradcheck([&](const Inputs& in) { return attention(in[0], in[1], in[2], lens); },
      {input64({2, 2, 4}, 23), input64({2, 3, 4}, 24), input64({2, 3, 5}, 25)}));
  // Unmasked, and with a per-query length of 0 (a uniform row).
  CHECK_GRADCHECK(gradcheck([&](const Inputs& in) { return attention(in[0], in[1], in[2]); },
      {input64({2, 2, 4}, 26), input64({2, 3, 4}, 27), input64({2, 3, 5}, 28)}));
  const Tensor per_query = tensor({0, 2, 3, 1}, {2, 2}, float64);
  CHECK_GRADCHECK(
      gradcheck([&](const Inputs& in) { return attention(in[0], in[1], in[2], per_query); },
          {input64({2, 2, 4}, 29), input64({2, 3, 4}, 30), input64({2, 3, 5}, 31)}));
}

TEST_CASE("gradcheck: AdditiveAttention, inputs and parameters", "[nn][gradcheck]") {
  manual_seed(14);
  nn::AdditiveAttention attention(3, 2, 4, 0.0);  // key_size 3, query_size 2, num_hiddens 4
  attention.to(float64);
  const Tensor lens = tensor({2, 3}, float64);
  CHECK_GRADCHECK(gradcheck(
      [&](const Inputs& in) {
        bind_all(attention, in, 3);
        return attention(in[0], in[1], in[2], lens);
      },
      with_parameters(
          {input64({2, 2, 2}, 32), input64({2, 3, 3}, 33), input64({2, 3, 4}, 34)}, attention)));
}

TEST_CASE("gradcheck: transpose_qkv and transpose_output", "[nn][gradcheck]") {
  CHECK_GRADCHECK(gradcheck(
      [](const Inputs& in) { return nn::transpose_qkv(in[0], 2); }, {input64({2, 3, 4}, 35)}));
  CHECK_GRADCHECK(gradcheck(
      [](const Inputs& in) { return nn::transpose_output(in[0], 2); }, {input64({4, 3, 2}, 36)}));
}

TEST_CASE(
    "gradcheck: MultiHeadAttention with valid_lens, inputs and parameters", "[nn][gradcheck]") {
  manual_seed(15);
  nn::MultiHeadAttention attention(3, 5, 2, 4, 2, 0.0);  // key 3, query 5, value 2, D 4, 2 heads
  attention.to(float64);
  const Tensor lens = tensor({3, 1}, float64);
  const Inputs inputs = with_parameters(
      {input64({2, 2, 5}, 37), input64({2, 3, 3}, 38), input64({2, 3, 2}, 39)}, attention);
  REQUIRE(inputs.size() == 7);
  CHECK_GRADCHECK(gradcheck(
      [&](const Inputs& in) {
        bind_all(attention, in, 3);
        return attention(in[0], in[1], in[2], lens);
      },
      inputs));
}

TEST_CASE("gradcheck: MultiHeadAttention with bias and per-query valid_lens", "[nn][gradcheck]") {
  manual_seed(16);
  nn::MultiHeadAttention attention(4, 4, 4, 4, 2, 0.0, true);
  attention.to(float64);
  const Tensor lens = tensor({1, 2, 3, 0, 3, 3}, {2, 3}, float64);
  CHECK_GRADCHECK(gradcheck(
      [&](const Inputs& in) {
        bind_all(attention, in, 1);
        return attention(in[0], in[0], in[0], lens);  // self-attention: one input used three times
      },
      with_parameters({input64({2, 3, 4}, 40)}, attention)));
}

// ---- positional encodings -----------------------------------------------------------------------

TEST_CASE("gradcheck: PositionalEncoding, input", "[nn][gradcheck]") {
  nn::PositionalEncoding encoding(4, 0.0, 10);
  encoding.to(float64);
  CHECK_GRADCHECK(
      gradcheck([&](const Inputs& in) { return encoding(in[0]); }, {input64({2, 3, 4}, 41)}));
}

TEST_CASE("gradcheck: PositionalEncoding with dropout 0.5, the same mask in every call",
    "[nn][gradcheck]") {
  nn::PositionalEncoding encoding(4, 0.5, 10);
  encoding.to(float64);
  REQUIRE(encoding.is_training());
  auto f = [&](const Inputs& in) {
    manual_seed(7);  // every call draws the same mask
    return encoding(in[0]);
  };
  const Tensor X = input64({2, 3, 4}, 42);
  // The dropout really drops something here: some outputs are 0, the others scaled by 2.
  int zeros = 0;
  for (double v : nn_test::values(f({X}))) zeros += v == 0.0;
  CHECK(zeros > 0);
  CHECK_GRADCHECK(gradcheck(f, {X}));
}

TEST_CASE("gradcheck: LearnedPositionalEncoding, input and table", "[nn][gradcheck]") {
  manual_seed(17);
  nn::LearnedPositionalEncoding encoding(4, 0.0, 5);  // T = 3 < max_len: rows 3, 4 get no gradient
  encoding.to(float64);
  CHECK_GRADCHECK(gradcheck(
      [&](const Inputs& in) {
        bind_all(encoding, in, 1);
        return encoding(in[0]);
      },
      with_parameters({input64({2, 3, 4}, 43)}, encoding)));
}

TEST_CASE("gradcheck: RotaryEmbedding of a head view, both pairings, both paths, partial rotary",
    "[nn][gradcheck]") {
  for (RotaryPairs pairs : {RotaryPairs::interleaved, RotaryPairs::halves})
    for (bool fused : {true, false}) {
      INFO(nn::rotary_pairs_name(pairs) << ", fused_kernels " << fused);
      nn::FusedKernelsGuard path(fused);
      nn::RotaryEmbedding rope(4, 10000.0, pairs);  // 4 of the head's 6 features
      rope.to(float64);
      CHECK_GRADCHECK(gradcheck(
          [&](const Inputs& in) {
            const Tensor heads = in[0].reshape({2, 3, 2, 6}).permute({0, 2, 1, 3});  // (B, H, T, d)
            return rope(heads, /*first_position=*/5);
          },
          {input64({2, 3, 12}, 49)}));
    }
}

// ---- Transformer --------------------------------------------------------------------------------

TEST_CASE("gradcheck: PositionWiseFFN, input and parameters", "[nn][gradcheck]") {
  manual_seed(18);
  nn::PositionWiseFFN ffn(4, 6, 3);
  ffn.to(float64);
  CHECK_GRADCHECK(gradcheck(
      [&](const Inputs& in) {
        bind_all(ffn, in, 1);
        return ffn(in[0]);
      },
      with_parameters({input64({2, 3, 4}, 44)}, ffn)));
}

TEST_CASE(
    "gradcheck: SwiGLUFFN, input and parameters, with and without biases", "[nn][gradcheck]") {
  for (bool bias : {false, true}) {
    INFO("bias " << bias);
    manual_seed(20);
    nn::SwiGLUFFN ffn(4, 6, 3, bias);
    ffn.to(float64);
    const Inputs inputs = with_parameters({input64({2, 3, 4}, 50)}, ffn);
    REQUIRE(inputs.size() == (bias ? 7u : 4u));
    CHECK_GRADCHECK(gradcheck(
        [&](const Inputs& in) {
          bind_all(ffn, in, 1);
          return ffn(in[0]);
        },
        inputs));
  }
}

TEST_CASE("gradcheck: AddNorm, both inputs and parameters", "[nn][gradcheck]") {
  nn::AddNorm addnorm({4}, 0.0);
  addnorm.to(float64);
  CHECK_GRADCHECK(gradcheck(
      [&](const Inputs& in) {
        bind_all(addnorm, in, 2);
        return addnorm(in[0], in[1]);
      },
      {input64({2, 3, 4}, 45), input64({2, 3, 4}, 46), input64({4}, 47, 0.5, 1.5),
          input64({4}, 48)}));
}

TEST_CASE("gradcheck: TransformerEncoderBlock, input and parameters", "[nn][gradcheck]") {
  manual_seed(19);
  nn::TransformerEncoderBlock block(4, 4, 4, 4, {4}, 4, 6, 2, 0.0);
  block.to(float64);
  const Tensor lens = tensor({3, 2}, float64);
  CHECK_GRADCHECK(gradcheck(
      [&](const Inputs& in) {
        bind_all(block, in, 1);
        return block(in[0], lens);
      },
      with_parameters({input64({2, 3, 4}, 49)}, block)));
}

TEST_CASE("gradcheck: TransformerEncoderBlock in training with dropout 0.2, reseeded in f",
    "[nn][gradcheck]") {
  manual_seed(20);
  nn::TransformerEncoderBlock block(4, 4, 4, 4, {4}, 4, 6, 2, 0.2);
  block.to(float64);
  REQUIRE(block.is_training());
  const Tensor lens = tensor({3, 2}, float64);
  auto f = [&](const Inputs& in) {
    manual_seed(8);  // the same dropout masks in every call
    bind_all(block, in, 1);
    return block(in[0], lens);
  };
  const Inputs inputs = with_parameters({input64({2, 3, 4}, 50)}, block);
  // Dropout is active: the output differs from the evaluation-mode output.
  Tensor train_out = f(inputs);
  block.eval();
  Tensor eval_out = f(inputs);
  block.train();
  CHECK(nn_test::max_abs_diff(train_out, eval_out) > 1e-3);
  CHECK_GRADCHECK(gradcheck(f, inputs));
}

TEST_CASE("gradcheck: TransformerEncoder through all its parameters", "[nn][gradcheck]") {
  manual_seed(21);
  nn::TransformerEncoder encoder(5, 4, 4, 4, 4, {4}, 4, 4, 2, 2, 0.0);
  encoder.to(float64);
  const Tensor tokens = tensor({1, 4, 4, 0, 2, 3}, {2, 3}, float64);
  const Tensor lens = tensor({3, 2}, float64);
  CHECK_GRADCHECK(gradcheck(
      [&](const Inputs& in) {
        bind_all(encoder, in);
        return encoder(tokens, lens);
      },
      encoder.parameters()));
}

TEST_CASE("gradcheck: TransformerDecoderBlock, input, encoder outputs and parameters",
    "[nn][gradcheck]") {
  manual_seed(22);
  nn::TransformerDecoderBlock block(4, 4, 4, 4, {4}, 4, 4, 2, 0.0, 0);
  block.to(float64);
  const Tensor enc_lens = tensor({2, 4}, float64);
  CHECK_GRADCHECK(gradcheck(
      [&](const Inputs& in) {
        bind_all(block, in, 2);
        nn::DecoderState state{in[1], enc_lens, std::vector<Tensor>(1)};
        return block.forward(in[0], state);
      },
      with_parameters({input64({2, 3, 4}, 51), input64({2, 4, 4}, 52)}, block)));
}

TEST_CASE("gradcheck: TransformerDecoderBlock over two cached steps", "[nn][gradcheck]") {
  // The second step attends to the first step's input through the cache: its gradient must
  // flow back into that input.
  manual_seed(23);
  nn::TransformerDecoderBlock block(4, 4, 4, 4, {4}, 4, 4, 2, 0.0, 0);
  block.to(float64);
  CHECK_GRADCHECK(gradcheck(
      [&](const Inputs& in) {
        bind_all(block, in, 3);
        nn::DecoderState state{in[2], Tensor(), std::vector<Tensor>(1)};
        Tensor first = block.forward(in[0], state);   // (2, 2, 4)
        Tensor second = block.forward(in[1], state);  // (2, 1, 4), keys: 3 positions
        return concat({first, second}, 1);
      },
      with_parameters(
          {input64({2, 2, 4}, 53), input64({2, 1, 4}, 54), input64({2, 3, 4}, 55)}, block)));
}

TEST_CASE("gradcheck: EncoderDecoder through all its parameters", "[nn][gradcheck]") {
  manual_seed(24);
  auto encoder = std::make_shared<nn::TransformerEncoder>(
      5, 4, 4, 4, 4, std::vector<int64_t>{4}, 4, 4, 2, 1, 0.0);
  auto decoder = std::make_shared<nn::TransformerDecoder>(
      5, 4, 4, 4, 4, std::vector<int64_t>{4}, 4, 4, 2, 1, 0.0);
  nn::EncoderDecoder model(encoder, decoder);
  model.to(float64);
  const Tensor enc_X = tensor({1, 3, 4, 2, 0, 0}, {2, 3}, float64);
  const Tensor dec_X = tensor({0, 4, 2, 0, 1, 1}, {2, 3}, float64);
  const Tensor lens = tensor({3, 1}, float64);
  CHECK_GRADCHECK(gradcheck(
      [&](const Inputs& in) {
        bind_all(model, in);
        return model(enc_X, dec_X, lens);
      },
      model.parameters()));
}

// ---- gradcheck_parameters on modules: their own weights, perturbed in place --------------------

TEST_CASE("gradcheck_parameters: a module's named parameters, checked where the module reads them",
    "[nn][gradcheck]") {
  manual_seed(40);
  nn::MultiHeadAttention attention(4, 4, 4, 4, 2, 0.0);
  attention.to(float64);
  attention.eval();
  const Tensor X = input64({2, 3, 4}, 41), valid_lens = tensor({2.0, 3.0}, {2}, float64);
  const GradcheckResult result = gradcheck_parameters(
      [&] { return attention(X, X, X, valid_lens); }, attention.named_parameters());
  CHECK_GRADCHECK(result);
  // Handing the parameters to gradcheck, which perturbs copies the module never reads, is a
  // mistake that is now reported instead of passing silently.
  const GradcheckResult copies = gradcheck(
      [&](const Inputs&) { return attention(X, X, X, valid_lens); }, attention.parameters());
  CHECK_FALSE(copies.passed);
}

TEST_CASE("gradcheck_parameters: a module left in training mode with dropout is named",
    "[nn][gradcheck]") {
  manual_seed(42);
  nn::Linear linear(3, 3);
  nn::Dropout dropout(0.5);
  linear.to(float64);
  const Tensor x = input64({2, 3}, 43);
  const GradcheckResult result =
      gradcheck_parameters([&] { return dropout(linear(x)); }, linear.named_parameters());
  CHECK_FALSE(result.passed);
  CHECK_THAT(result.message, Catch::Matchers::Contains("not deterministic"));
  dropout.eval();
  CHECK_GRADCHECK(
      gradcheck_parameters([&] { return dropout(linear(x)); }, linear.named_parameters()));
}
