// Files NumPy and PyTorch wrote (tests/io/fixtures/interop/, made by make_interop_fixtures.py
// there): ag reads them as NumPy and PyTorch meant them.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iterator>
#include <sstream>
#include <tuple>

#include "autograd/ops.h"
#include "io/npy.h"
#include "io/safetensors.h"
#include "models/seq2seq_file.h"
#include "nn/transformer.h"

using namespace ag;

namespace {
std::string fixture(const std::string& name) {
  return std::string(AG_INTEROP_FIXTURES) + "/" + name;
}
}  // namespace

TEST_CASE("npy: files numpy.save wrote are read with their dtype, shape and values", "[io][npy]") {
  const Tensor f4 = read_npy(fixture("f4_2x3.npy"));  // np.arange(6, float32).reshape(2, 3) / 7
  CHECK(f4.dtype() == float32);
  CHECK(f4.shape() == Shape{2, 3});
  for (int i = 0; i < 6; ++i) CHECK(f4.to_vector<float>()[i] == static_cast<float>(i) / 7.0f);

  const Tensor scalar = read_npy(fixture("f8_scalar.npy"));  // np.float64(np.pi)
  CHECK(scalar.shape() == Shape{});
  CHECK(scalar.item() == M_PI);

  const Tensor ids = read_npy(fixture("i8_vector.npy"));  // [-3, 0, 2^53] as int64
  CHECK(ids.dtype() == int64);
  CHECK(ids.to_vector<int64_t>() == std::vector<int64_t>{-3, 0, int64_t{1} << 53});
  // [2^53 + 1, -2^63, 2^63 - 1]: exact, where float64 would have rounded the first.
  const Tensor large = read_npy(fixture("i8_large.npy"));
  CHECK(large.dtype() == int64);
  CHECK(large.to_vector<int64_t>() ==
        std::vector<int64_t>{(int64_t{1} << 53) + 1, INT64_MIN, INT64_MAX});
  // np.array([[True, False, True], [False, False, True]]), descr '|b1'.
  const Tensor mask = read_npy(fixture("b1_mask_2x3.npy"));
  CHECK(mask.dtype() == bool_);
  CHECK(mask.shape() == Shape{2, 3});
  CHECK(mask.to_vector<bool>() == std::vector<bool>{true, false, true, false, false, true});

  // np.asfortranarray(np.arange(12.).reshape(2, 3, 2)): stored column-major, read as C order.
  const Tensor fortran = read_npy(fixture("f8_fortran_2x3x2.npy"));
  CHECK(fortran.shape() == Shape{2, 3, 2});
  CHECK(fortran.to_vector<double>() == arange(12, float64).to_vector<double>());

  const Tensor version2 = read_npy(fixture("f4_version2.npy"));  // format 2.0, ones((3, 1)) / 4
  CHECK(version2.shape() == Shape{3, 1});
  CHECK(version2.to_vector<float>() == std::vector<float>{0.25f, 0.25f, 0.25f});
}

TEST_CASE("safetensors: a file written from PyTorch tensors holds PyTorch's values",
    "[io][safetensors]") {
  const Safetensors file = read_safetensors(fixture("torch_tensors.safetensors"));
  CHECK(file.metadata.at("format") == "pt");
  std::vector<std::string> names;
  for (const auto& [name, tensor] : file.tensors) {
    names.push_back(name);
    INFO(name);
    // The same tensor as numpy.save wrote it, in the dtype ag loads it into.
    const Tensor expected = read_npy(fixture("expected/" + name + ".npy"));
    CHECK(tensor.dtype() == expected.dtype());
    CHECK(tensor.shape() == expected.shape());
    dispatch_all(tensor.dtype(),
        [&]<typename T>() { CHECK(tensor.to_vector<T>() == expected.to_vector<T>()); });
  }
  CHECK(names ==
        std::vector<std::string>{"w.f32", "w.f64", "ids", "half", "bf16", "scalar", "empty"});
  CHECK(file.at("ids").dtype() == int64);  // torch.int64 [[1, 5], [2, 2^53]]
  CHECK(file.at("ids").to_vector<int64_t>() == std::vector<int64_t>{1, 5, 2, int64_t{1} << 53});
}

TEST_CASE("safetensors: PyTorch's torch.long and torch.bool tensors load as int64 and bool",
    "[io][safetensors]") {
  const Safetensors file = read_safetensors(fixture("torch_long_bool.safetensors"));
  std::vector<std::string> names;
  for (const auto& [name, tensor] : file.tensors) {
    names.push_back(name);
    INFO(name);
    const Tensor expected = read_npy(fixture("expected/" + name + ".npy"));  // numpy.save's
    CHECK(tensor.dtype() == expected.dtype());
    CHECK(tensor.shape() == expected.shape());
    dispatch_all(tensor.dtype(),
        [&]<typename T>() { CHECK(tensor.to_vector<T>() == expected.to_vector<T>()); });
  }
  CHECK(names ==
        std::vector<std::string>{"token_ids", "bn.num_batches_tracked", "causal_mask", "no_mask"});
  // The values, spelt out (not only compared with numpy's files of them).
  const Tensor& ids = file.at("token_ids");
  CHECK(ids.dtype() == int64);
  CHECK(ids.shape() == Shape{2, 3});
  CHECK(ids.to_vector<int64_t>() ==
        std::vector<int64_t>{(int64_t{1} << 53) + 1, -1, 0, 7, INT64_MAX, INT64_MIN});
  CHECK(file.at("bn.num_batches_tracked").shape() == Shape{});
  CHECK(file.at("bn.num_batches_tracked").item<int64_t>() == 12345);
  const Tensor& causal = file.at("causal_mask");
  CHECK(causal.dtype() == bool_);
  const std::vector<bool> values = causal.to_vector<bool>();
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) CHECK(values[static_cast<std::size_t>(4 * i + j)] == (j <= i));
  CHECK(file.at("no_mask").dtype() == bool_);
  CHECK(file.at("no_mask").shape() == Shape{0, 2});
  // And ag writes them back as the same file, byte for byte: the same compact JSON, padding and
  // tightly packed I64 and BOOL bytes.
  std::ifstream in(fixture("torch_long_bool.safetensors"), std::ios::binary);
  const std::string torch_bytes((std::istreambuf_iterator<char>(in)), {});
  SafetensorsWriteOptions options;
  options.metadata = file.metadata;
  CHECK(serialize_safetensors(file.tensors, options) == torch_bytes);
}

namespace {
// The largest |a − b| over two tensors of one shape, in float64.
double max_difference(const Tensor& a, const Tensor& b) {
  REQUIRE(a.shape() == b.shape());
  const std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  double most = 0;
  for (std::size_t i = 0; i < x.size(); ++i) most = std::max(most, std::abs(x[i] - y[i]));
  return most;
}
}  // namespace

TEST_CASE(
    "d2l's PyTorch MultiHeadAttention weights, saved by PyTorch, give PyTorch's outputs in ag",
    "[io][safetensors][torch]") {
  for (const auto& [suffix, dtype, tolerance] :
      {std::tuple{"f32", float32, 1e-6}, std::tuple{"f64", float64, 1e-12}}) {
    INFO(suffix);
    const std::string stem = fixture(std::string("d2l_attention_") + suffix);
    nn::MultiHeadAttention attention(8, 8, 8, 8, 2, 0.0);
    attention.to(dtype);
    CHECK(load_safetensors(attention, stem + ".safetensors").empty());
    const Tensor X = read_npy(stem + "_X.npy");
    REQUIRE(X.dtype() == dtype);
    const Tensor Y = attention(X, X, X, read_npy(stem + "_valid_lens.npy"));
    CHECK(max_difference(Y, read_npy(stem + "_Y.npy")) <= tolerance);
  }
}

TEST_CASE("d2l's PyTorch Transformer weights (blks.blockN names) give PyTorch's logits in ag",
    "[io][safetensors][torch]") {
  for (const auto& [suffix, dtype, tolerance] :
      {std::tuple{"f32", float32, 1e-6}, std::tuple{"f64", float64, 1e-12}}) {
    INFO(suffix);
    const std::string stem = fixture(std::string("d2l_transformer_") + suffix);
    auto encoder = std::make_shared<nn::TransformerEncoder>(
        12, 8, 8, 8, 8, std::vector<int64_t>{8}, 8, 16, 2, 2, 0.0);
    auto decoder = std::make_shared<nn::TransformerDecoder>(
        12, 8, 8, 8, 8, std::vector<int64_t>{8}, 8, 16, 2, 2, 0.0);
    nn::EncoderDecoder model(encoder, decoder);
    model.to(dtype);
    ModuleFileOptions from_d2l;
    from_d2l.rename = from_d2l_name;
    CHECK(load_safetensors(model, stem + ".safetensors", from_d2l).empty());
    // Token ids come as int64 ('<i8', read into float64); the model takes them in its dtype.
    const Tensor logits = model(read_npy(stem + "_enc_X.npy").to(dtype),
        read_npy(stem + "_dec_X.npy").to(dtype), read_npy(stem + "_enc_valid_lens.npy"));
    CHECK(max_difference(logits, read_npy(stem + "_Y.npy")) <= tolerance);
  }
}

TEST_CASE("a reverse model trained by ag decodes in d2l's PyTorch classes as it does in ag",
    "[io][safetensors][torch]") {
  // ag_reverse_torch_decodes.txt: "SOURCE -> PREDICTION" per line, decoded greedily by d2l's
  // PyTorch EncoderDecoder holding ag_reverse.safetensors's weights (make_interop_fixtures.py).
  const seq2seq::LoadedModel loaded = seq2seq::load_model(fixture("ag_reverse.safetensors"));
  std::ifstream decodes(fixture("ag_reverse_torch_decodes.txt"));
  std::string line;
  int compared = 0;
  while (std::getline(decodes, line)) {
    INFO(line);
    const std::size_t arrow = line.find(" -> ");
    REQUIRE(arrow != std::string::npos);
    auto ids = [](const std::string& text) {
      std::vector<int64_t> out;
      std::istringstream words(text);
      for (int64_t id; words >> id;) out.push_back(id);
      return out;
    };
    const std::vector<int64_t> source = ids(line.substr(0, arrow));
    const std::vector<int64_t> torch_prediction = ids(line.substr(arrow + 4));
    // The source as ag batches it: content, <eos>, <pad>…; valid length content + 1.
    std::vector<double> padded(static_cast<std::size_t>(loaded.task->source_steps()),
        static_cast<double>(data::TaskVocab::pad));
    for (std::size_t i = 0; i < source.size(); ++i) padded[i] = static_cast<double>(source[i]);
    padded[source.size()] = static_cast<double>(data::TaskVocab::eos);
    const Tensor source_tensor = tensor(padded, {1, loaded.task->source_steps()});
    const auto predictions = seq2seq::greedy_decode(*loaded.model, source_tensor,
        tensor({static_cast<double>(source.size() + 1)}), loaded.task->target_steps());
    CHECK(predictions.at(0) == torch_prediction);
    ++compared;
  }
  CHECK(compared == 12);
}
