// .npy: what ag writes reads back bit for bit and is laid out as NumPy's format says; NumPy's
// own files (tests/io/fixtures/npy/, written by numpy.save) are read; damaged files are refused.
#include <catch2/catch.hpp>

#include <cstring>

#include "autograd/ops.h"
#include "io/npy.h"

using namespace ag;
using Catch::Matchers::Contains;

namespace {
// A version 1.0 file from its dict text (padded here) and data bytes.
std::string npy_of(std::string dict, const std::string& data) {
  dict.append((64 - (10 + dict.size() + 1) % 64) % 64, ' ');
  dict += '\n';
  std::string file = "\x93NUMPY\x01";
  file += '\0';
  const uint16_t length = static_cast<uint16_t>(dict.size());
  file.append(reinterpret_cast<const char*>(&length), 2);
  return file + dict + data;
}

std::string doubles(std::initializer_list<double> values) {
  std::string out;
  for (const double v : values) out.append(reinterpret_cast<const char*>(&v), 8);
  return out;
}

void check_npy_refused(const std::string& file, const std::string& problem) {
  INFO("expected: " << problem);
  CHECK_THROWS_AS(parse_npy(file, "x.npy"), NpyError);
  CHECK_THROWS_WITH(
      parse_npy(file, "x.npy"), Contains("x.npy: not a valid .npy file") && Contains(problem));
}
}  // namespace

TEST_CASE("npy: float32, float64, int64 and bool round-trip, every rank", "[io][npy]") {
  Generator gen(3);
  for (const Shape& shape : {Shape{}, Shape{5}, Shape{2, 3}, Shape{2, 0, 3}, Shape{2, 1, 3, 2}}) {
    INFO(shape_str(shape));
    const Tensor a = randn(shape, gen), b = randn(shape, gen, float64);
    CHECK(parse_npy(serialize_npy(a)).to_vector<float>() == a.to_vector<float>());
    CHECK(parse_npy(serialize_npy(a)).shape() == shape);
    CHECK(parse_npy(serialize_npy(b)).to_vector<double>() == b.to_vector<double>());
    // int64 and bool of the same shape: -3, 0, 3, ... and whether each is over 0.
    std::vector<int64_t> id_values;
    std::vector<bool> over_zero;
    for (int64_t i = 0; i < numel(shape); ++i) {
      id_values.push_back(3 * (i - 1));
      over_zero.push_back(i > 1);
    }
    const Tensor ids_back = parse_npy(serialize_npy(tensor(id_values, shape)));
    const Tensor mask_back = parse_npy(serialize_npy(tensor(over_zero, shape)));
    CHECK(ids_back.dtype() == int64);
    CHECK(ids_back.shape() == shape);
    CHECK(ids_back.to_vector<int64_t>() == id_values);
    CHECK(mask_back.dtype() == bool_);
    CHECK(mask_back.shape() == shape);
    CHECK(mask_back.to_vector<bool>() == over_zero);
  }
  // Past 2^53 int64 stays exact (float64, as ag read '<i8' before, would round 2^53 + 1).
  const std::vector<int64_t> big = {-4, (int64_t{1} << 53) + 1, INT64_MAX, INT64_MIN};
  const std::string file = serialize_npy(tensor(big));
  CHECK(file.find("'descr': '<i8'") != std::string::npos);
  CHECK(parse_npy(file).to_vector<int64_t>() == big);
  CHECK(serialize_npy(tensor(std::vector<bool>{true})).find("'descr': '|b1'") != std::string::npos);
}

TEST_CASE(
    "npy: the layout is NumPy's (magic, version 1.0, a 64-byte aligned header)", "[io][npy]") {
  const std::string file = serialize_npy(tensor({1.0, 2.0, 3.0}, {3}, float64));
  CHECK(file.substr(0, 8) == std::string("\x93NUMPY\x01\x00", 8));
  uint16_t length;
  std::memcpy(&length, file.data() + 8, 2);
  CHECK((10 + length) % 64 == 0);
  const std::string header = file.substr(10, length);
  CHECK(header.rfind("{'descr': '<f8', 'fortran_order': False, 'shape': (3,), }", 0) == 0);
  CHECK(header.back() == '\n');
  CHECK(file.substr(10 + length) == doubles({1, 2, 3}));
}

TEST_CASE("npy: Fortran order is read into C order", "[io][npy]") {
  // The 2 × 3 array [[1, 2, 3], [4, 5, 6]] stored column by column.
  const Tensor t = parse_npy(npy_of(
      "{'descr': '<f8', 'fortran_order': True, 'shape': (2, 3), }", doubles({1, 4, 2, 5, 3, 6})));
  CHECK(t.shape() == Shape{2, 3});
  CHECK(t.is_contiguous());
  CHECK(t.to_vector<double>() == std::vector<double>{1, 2, 3, 4, 5, 6});
}

TEST_CASE("npy: an empty Fortran-order array of large other dims is read at once", "[io][npy]") {
  // ag-fuzz-npy's find (tests/fuzz/crashes/npy/): no elements, but the copy into C order walked its
  // tiles over the other dims, 2 · 5 · 4444 · 44444 · 4444 · 44 · 4444 of them, for minutes.
  const Tensor t =
      parse_npy(npy_of("{'descr': '|b1', 'fortran_order': True, 'shape': (2, 5, "
                       "4444, 44444, 4444, 44, 4444, 0, 1), }",
          ""));
  CHECK(t.shape() == Shape{2, 5, 4444, 44444, 4444, 44, 4444, 0, 1});
  CHECK(t.numel() == 0);
}

TEST_CASE("npy: damaged files are refused, naming the problem", "[io][npy]") {
  const std::string one = doubles({1});
  check_npy_refused("hello", "does not start with \\x93NUMPY");
  check_npy_refused(
      npy_of("{'descr': '<f8', 'fortran_order': False, 'shape': (1,), }", one).substr(0, 30),
      "runs past the file");
  check_npy_refused(npy_of("{'descr': '>f8', 'fortran_order': False, 'shape': (1,), }", one),
      "dtype '>f8' is not one ag reads ('<f4', '<f8', '<i8', '|b1')");
  check_npy_refused(npy_of("{'descr': '<i4', 'fortran_order': False, 'shape': (2,), }", one),
      "dtype '<i4' is not one ag reads");
  check_npy_refused(npy_of("{'descr': '<b1', 'fortran_order': False, 'shape': (1,), }", "\x01"),
      "dtype '<b1' is not one ag reads");  // NumPy writes bool as '|b1' only
  // A bool byte is 0 or 1; 2 is damage, named by element and file offset (preamble and header:
  // 128 bytes).
  check_npy_refused(npy_of("{'descr': '|b1', 'fortran_order': False, 'shape': (3,), }",
                        std::string("\x00\x01\x02", 3)),
      "'|b1' element 2 is the byte 2, not 0 or 1 (file byte 130)");
  check_npy_refused(npy_of("{'descr': '|b1', 'fortran_order': False, 'shape': (2,), }", "\x01"),
      "needs 2 × 1 bytes, the file holds 1");
  check_npy_refused(npy_of("{'descr': '<f8', 'fortran_order': False, 'shape': (2,), }", one),
      "needs 2 × 8 bytes, the file holds 8");
  check_npy_refused(npy_of("{'descr': '<f8', 'fortran_order': False, 'shape': (1,), }", one + one),
      "the file holds 16");
  check_npy_refused(
      npy_of("{'descr': '<f8', 'fortran_order': False, 'shape': (1,), 'x': 1, }", one),
      "an unknown key 'x'");
  check_npy_refused(
      npy_of("{'descr': '<f8', 'descr': '<f8', 'fortran_order': False, 'shape': (1,), }", one),
      "the key 'descr' twice");
  check_npy_refused(npy_of("{'descr': '<f8', 'shape': (1,), }", one), "lacks 'fortran_order'");
  check_npy_refused(npy_of("{'descr': '<f8', 'fortran_order': Maybe, 'shape': (1,), }", one),
      "expected True or False");
  check_npy_refused(npy_of("{'descr': '<f8', 'fortran_order': False, 'shape': (1), }", one),
      "a one-element shape needs a comma");
  check_npy_refused(
      npy_of("{'descr': '<f8', 'fortran_order': False, 'shape': (4294967296, 4294967296, "
             "4294967296), }",
          one),
      "too large (over 2^63 bytes)");
  check_npy_refused(
      npy_of(
          "{'descr': '<f8', 'fortran_order': False, 'shape': (0, 4294967296, 4294967296), }", ""),
      "too large (over 2^63 bytes)");  // empty, yet its strides would overflow
  std::string version9 = npy_of("{'descr': '<f8', 'fortran_order': False, 'shape': (1,), }", one);
  version9[6] = 9;
  check_npy_refused(version9, "version 9.0");
}
