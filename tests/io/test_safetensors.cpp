// safetensors: what ag writes it reads back bit for bit, the format's bytes are as the
// specification says, and every malformed file is refused with a message naming the problem.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <filesystem>

#include "autograd/ops.h"
#include "io/safetensors.h"
#include "tests/temp_folder.h"

using namespace ag;
using ag::testing::TempFolder;
using Catch::Matchers::Contains;

namespace {

// A file from its header text and data bytes, as the format lays them out.
std::string file_of(const std::string& header, const std::string& data) {
  const uint64_t length = header.size();
  return std::string(reinterpret_cast<const char*>(&length), 8) + header + data;
}

std::string bytes_of_floats(std::initializer_list<float> values) {
  std::string out;
  for (const float v : values) out.append(reinterpret_cast<const char*>(&v), 4);
  return out;
}

void check_safetensors_refused(const std::string& file, const std::string& problem) {
  INFO("expected: " << problem);
  CHECK_THROWS_AS(parse_safetensors(file, "m.safetensors"), SafetensorsError);
  CHECK_THROWS_WITH(parse_safetensors(file, "m.safetensors"),
      Contains("m.safetensors: not a valid safetensors file") && Contains(problem));
}

}  // namespace

TEST_CASE("safetensors: float32, float64, int64 and bool tensors round-trip bit for bit",
    "[io][safetensors]") {
  Generator gen(1);
  const Tensor a = randn({2, 3}, gen), b = randn({4}, gen, float64);
  // int64 past 2^53, where float64 (and so ag's old I64 reading) would round: 2^53 + 1, the
  // extremes of int64.
  const std::vector<int64_t> id_values = {3, -7, (int64_t{1} << 53) + 1, INT64_MAX, INT64_MIN, 0};
  const Tensor ids = tensor(id_values, {2, 3});
  const Tensor mask = tensor(std::vector<bool>{true, false, false, true, true}, {5});
  const Tensor scalar = full({}, 2.5);
  SafetensorsWriteOptions options;
  options.metadata = {{"format", "pt"}, {"note", "quote \" backslash \\ newline \n é"}};
  const std::string bytes = serialize_safetensors(
      {{"a", a}, {"b.weight", b}, {"ids", ids}, {"mask", mask}, {"scalar", scalar}}, options);
  CHECK(bytes.find(R"("ids":{"dtype":"I64","shape":[2,3])") != std::string::npos);
  CHECK(bytes.find(R"("mask":{"dtype":"BOOL","shape":[5])") != std::string::npos);

  const Safetensors file = parse_safetensors(bytes);
  REQUIRE(file.tensors.size() == 5);
  CHECK(file.tensors[0].first == "a");  // header order
  CHECK(file.tensors[4].first == "scalar");
  CHECK(file.at("a").dtype() == float32);
  CHECK(file.at("a").to_vector<float>() == a.to_vector<float>());
  CHECK(file.at("b.weight").dtype() == float64);
  CHECK(file.at("b.weight").to_vector<double>() == b.to_vector<double>());
  CHECK(file.at("ids").dtype() == int64);
  CHECK(file.at("ids").shape() == Shape{2, 3});
  CHECK(file.at("ids").to_vector<int64_t>() == id_values);
  CHECK(file.at("mask").dtype() == bool_);
  CHECK(file.at("mask").to_vector<bool>() == std::vector<bool>{true, false, false, true, true});
  CHECK(file.at("scalar").shape() == Shape{});
  CHECK(file.at("scalar").item() == 2.5);
  CHECK(file.metadata == options.metadata);
  CHECK_THROWS_WITH(
      file.at("c"), Contains("no tensor \"c\"") && Contains("a, b.weight, ids, mask, scalar"));
}

TEST_CASE("safetensors: the bytes are the specification's", "[io][safetensors]") {
  const std::string bytes = serialize_safetensors({{"w", tensor({1.0, 2.0}, {1, 2})}});
  uint64_t length;
  std::memcpy(&length, bytes.data(), 8);
  REQUIRE(8 + length + 8 == bytes.size());
  CHECK(length % 8 == 0);  // the data starts 8-byte aligned
  const std::string header = bytes.substr(8, length);
  CHECK(header.rfind(R"({"w":{"dtype":"F32","shape":[1,2],"data_offsets":[0,8]}})", 0) == 0);
  CHECK(header.find_first_not_of(' ', 56) == std::string::npos);  // padded with spaces
  CHECK(bytes.substr(8 + length) == bytes_of_floats({1.0f, 2.0f}));
}

TEST_CASE("safetensors: F16 and BF16 are read into float32", "[io][safetensors]") {
  // F16: 1.0 = 0x3C00, -2.0 = 0xC000, 65504 = 0x7BFF, the smallest subnormal 2^-24 = 0x0001.
  // BF16: 1.0 = 0x3F80, -0.5 = 0xBF00.
  const uint16_t half[] = {0x3C00, 0xC000, 0x7BFF, 0x0001};
  const uint16_t bf16[] = {0x3F80, 0xBF00};
  const std::string data = std::string(reinterpret_cast<const char*>(half), 8) +
                           std::string(reinterpret_cast<const char*>(bf16), 4);
  const Safetensors file =
      parse_safetensors(file_of(R"({"h":{"dtype":"F16","shape":[4],"data_offsets":[0,8]},)"
                                R"("b":{"dtype":"BF16","shape":[2],"data_offsets":[8,12]}})",
          data));
  CHECK(file.at("h").dtype() == float32);
  CHECK(file.at("h").to_vector<float>() == std::vector<float>{1.0f, -2.0f, 65504.0f, 0x1p-24f});
  CHECK(file.at("b").to_vector<float>() == std::vector<float>{1.0f, -0.5f});
}

TEST_CASE("safetensors: an empty header, a __metadata__ anywhere, blanks and escapes are read",
    "[io][safetensors]") {
  CHECK(parse_safetensors(file_of("{}", "")).tensors.empty());
  const Safetensors file = parse_safetensors(file_of(
      " { \"x\\u00e9\\ud83d\\ude00\" : {\"shape\":[2],\"dtype\":\"F32\",\"data_offsets\":[0,8]},\n"
      "   \"__metadata__\": {\"k\": \"v\"} }   ",
      bytes_of_floats({1, 2})));
  CHECK(file.tensors.at(0).first == "x\xc3\xa9\xf0\x9f\x98\x80");  // é and 😀 in UTF-8
  CHECK(file.metadata.at("k") == "v");
}

TEST_CASE("safetensors: every malformed file is refused, naming the problem", "[io][safetensors]") {
  const std::string two = bytes_of_floats({1, 2});
  const std::string entry = R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  check_safetensors_refused("short", "too short for the 8-byte header length");
  check_safetensors_refused(file_of(entry, two).substr(0, 20), "runs past the file");
  {
    std::string huge = file_of(entry, two);
    const uint64_t length = 200'000'000;
    std::memcpy(huge.data(), &length, 8);
    check_safetensors_refused(huge, "over 100 MB");
  }
  check_safetensors_refused(
      file_of(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})", two),
      "expected '}' to end the header");
  check_safetensors_refused(
      file_of(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},})", two),
      "expected '\"' to start a string");
  check_safetensors_refused(file_of(entry + "x", two), "something after the header's closing '}'");
  check_safetensors_refused(
      file_of(R"({"w":{"dtype":"F32","shape":[2.0],"data_offsets":[0,8]}})", two),
      "not a whole number");
  check_safetensors_refused(
      file_of(R"({"w":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", two),
      "expected a non-negative integer");
  check_safetensors_refused(
      file_of(R"({"w":{"dtype":"F32","shape":[99999999999999999999],"data_offsets":[0,8]}})", two),
      "an integer too large");
  check_safetensors_refused(file_of(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                    R"("w":{"dtype":"F32","shape":[0],"data_offsets":[8,8]}})",
                                two),
      "two tensors named \"w\"");
  check_safetensors_refused(
      file_of(R"({"w":{"dtype":"F32","dtype":"F32","shape":[2],"data_offsets":[0,8]}})", two),
      "has two \"dtype\" fields");
  check_safetensors_refused(
      file_of(R"({"w":{"dtype":"F32","shape":[2]}})", two), "lacks data_offsets");
  check_safetensors_refused(
      file_of(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":1}})", two),
      "unknown field \"x\"");
  check_safetensors_refused(
      file_of(R"({"w":{"dtype":"Q7","shape":[2],"data_offsets":[0,8]}})", two),
      "unknown dtype \"Q7\"");
  check_safetensors_refused(
      file_of(R"({"w":{"dtype":"I32","shape":[2],"data_offsets":[0,8]}})", two),
      "dtype I32 is not one ag reads");
  check_safetensors_refused(
      file_of(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", two),
      "the shape needs 12 bytes, the range holds 8");
  check_safetensors_refused(
      file_of(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})", two + two),
      "data bytes [0, 8) belong to no tensor");
  check_safetensors_refused(
      file_of(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", two + two),
      "data bytes [8, 16) after the last tensor belong to no tensor");
  check_safetensors_refused(file_of(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                    R"("v":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                                two),
      "overlaps the bytes of another tensor");
  check_safetensors_refused(
      file_of(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", two),
      "runs past the file's 8 data bytes");
  check_safetensors_refused(
      file_of(R"({"w":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", two),
      "begin is after end");
  check_safetensors_refused(
      file_of(
          R"({"w":{"dtype":"F32","shape":[4294967296,4294967296,4294967296],"data_offsets":[0,8]}})",
          two),
      "too large (over 2^63 bytes)");
  check_safetensors_refused(
      file_of(
          R"({"w":{"dtype":"F32","shape":[0,4294967296,4294967296],"data_offsets":[0,0]}})", ""),
      "too large (over 2^63 bytes)");  // empty, yet its strides would overflow
  check_safetensors_refused(
      file_of(R"({"__metadata__":{"k":1}})", ""), "expected '\"' to start a string");
  check_safetensors_refused(
      file_of(R"({"w\ud800":{}})", ""), "a high surrogate without its low half");
  // A BOOL byte is 0 or 1; a 2 (or 255) is damage, named by tensor, element and byte offset.
  check_safetensors_refused(file_of(R"({"m":{"dtype":"BOOL","shape":[3],"data_offsets":[0,3]}})",
                                std::string("\x01\x00\x02", 3)),
      "tensor \"m\" (BOOL) element 2 is the byte 2, not 0 or 1 (data byte 2)");
  check_safetensors_refused(file_of(R"({"a":{"dtype":"BOOL","shape":[1],"data_offsets":[0,1]},)"
                                    R"("m":{"dtype":"BOOL","shape":[2,1],"data_offsets":[1,3]}})",
                                std::string("\x01\x01\xff", 3)),
      "tensor \"m\" (BOOL) element 1 is the byte 255, not 0 or 1 (data byte 2)");
  // A BOOL shape counts bytes, not 8-byte elements.
  check_safetensors_refused(
      file_of(R"({"m":{"dtype":"BOOL","shape":[2],"data_offsets":[0,16]}})", std::string(16, '\0')),
      "the shape needs 2 bytes, the range holds 16");
}

TEST_CASE("safetensors: a header of 200 000 tensors has its names checked in one pass",
    "[io][safetensors]") {
  // Each name against a set: with a scan of the names before it (as before), this file took 41 s
  // to refuse, and one of 400 000 names 175 s (a 30 MB header; issue 35, item 7); now well under a
  // second. The repeated name is the first one, found at the very end.
  const int count = 200'000;
  std::string header = "{";
  for (int i = 0; i < count; ++i)
    header +=
        "\"t" + std::to_string(i) + "\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]},";
  check_safetensors_refused(
      file_of(header + R"("t0":{"dtype":"F32","shape":[0],"data_offsets":[0,0]}})", ""),
      "two tensors named \"t0\"");
  header.back() = '}';
  const Safetensors file = parse_safetensors(file_of(header, ""));
  REQUIRE(file.tensors.size() == static_cast<std::size_t>(count));
  CHECK(file.tensors.back().first == "t199999");
}

TEST_CASE("safetensors: writing refuses what the format cannot say", "[io][safetensors]") {
  const Tensor t = ones({2});
  CHECK_THROWS_AS(serialize_safetensors({{"w", t}, {"w", t}}), ValueError);
  CHECK_THROWS_AS(serialize_safetensors({{"__metadata__", t}}), ValueError);
  CHECK_THROWS_AS(serialize_safetensors({{"w", Tensor()}}), ValueError);
}

TEST_CASE("safetensors: floats holding whole numbers become I64 by an exact conversion",
    "[io][safetensors]") {
  // What the write option int64_names did before int64 tensors: now the caller converts, exactly.
  const Tensor lengths = tensor({3, 9007199254740992.0}, {2}, float64);  // 2^53
  const Tensor as_int = tensor(lengths.to_vector<int64_t>(), lengths.shape());
  const Safetensors file = parse_safetensors(serialize_safetensors({{"lengths", as_int}}));
  CHECK(file.at("lengths").dtype() == int64);
  CHECK(file.at("lengths").to_vector<int64_t>() == std::vector<int64_t>{3, int64_t{1} << 53});
  // A value that is not whole is refused by that conversion, not truncated.
  CHECK_THROWS_AS(tensor({1.5}).to_vector<int64_t>(), ValueError);
}

TEST_CASE("safetensors: files are written whole, and read back", "[io][safetensors]") {
  TempFolder folder;
  const std::filesystem::path dir = folder.path;
  const std::string path = folder.file("m.safetensors");
  const Tensor w = arange(6).reshape({2, 3});
  write_safetensors(path, {{"w", w}});
  CHECK(read_safetensors(path).at("w").to_vector<float>() == w.to_vector<float>());
  // Non-contiguous tensors are written in C order.
  write_safetensors(path, {{"wt", w.transpose(0, 1)}});
  CHECK(read_safetensors(path).at("wt").to_vector<float>() ==
        w.transpose(0, 1).contiguous().to_vector<float>());
  std::size_t files = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator(dir)) ++files;
  CHECK(files == 1);  // no temporary file left
  CHECK_THROWS_AS(read_safetensors((dir / "missing.safetensors").string()), IoError);
  CHECK_THROWS_WITH(read_safetensors(dir.string()), Contains("not a regular file"));
}
