// ag's Tensor::str() against PyTorch's str(tensor), byte for byte.
//
// tests/fixtures/make_torch_fixtures.py printed each tensor with PyTorch's default print options
// and wrote its values and the printed text into torch_fixtures.inc. Here ag builds a tensor from
// the very same values (float32 ones are exactly representable, so both print the same numbers)
// and must print exactly the same text: notation, widths, line wrapping at 80 columns, "..."
// summaries of tensors with more than 1000 elements, and suffixes.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "autograd/autograd.h"
#include "autograd/ops.h"

namespace {

struct PrintFixture {
  std::string name;
  std::string torch_code;  // the PyTorch code that made the tensor
  ag::Shape shape;
  ag::DType dtype;
  bool requires_grad;
  std::vector<double> values;  // row-major
  std::string expected;        // str(t) in PyTorch ("dtype=torch.float64" spelled as ag does)
};

// torch_fixtures.inc is a list of AG_OP_FIXTURE({...}) and AG_PRINT_FIXTURE({...}) entries; this
// test reads the print entries and skips the op ones (test_ops_torch.cpp reads those).
const std::vector<PrintFixture>& print_fixtures() {
  static const std::vector<PrintFixture> fixtures = [] {
    std::vector<PrintFixture> all;
#define AG_OP_FIXTURE(...)
#define AG_PRINT_FIXTURE(...) all.push_back([]() -> PrintFixture { return __VA_ARGS__; }());
#include "torch_fixtures.inc"
#undef AG_OP_FIXTURE
#undef AG_PRINT_FIXTURE
    return all;
  }();
  return fixtures;
}

// Where two strings first differ, shown as "line L, column C".
std::string first_difference(const std::string& a, const std::string& b) {
  const std::size_t at = static_cast<std::size_t>(
      std::mismatch(a.begin(),
          a.begin() + static_cast<std::ptrdiff_t>(std::min(a.size(), b.size())), b.begin())
          .first -
      a.begin());
  const std::size_t line = static_cast<std::size_t>(
      std::count(a.begin(), a.begin() + static_cast<std::ptrdiff_t>(at), '\n'));
  const std::size_t line_start = a.rfind('\n', at == 0 ? 0 : at - 1);
  const std::size_t column = line_start == std::string::npos ? at : at - line_start - 1;
  return "line " + std::to_string(line + 1) + ", column " + std::to_string(column + 1);
}

}  // namespace

TEST_CASE("printing matches PyTorch", "[torch][print]") {
  REQUIRE(!print_fixtures().empty());
  for (const PrintFixture& fixture : print_fixtures()) {
    DYNAMIC_SECTION(fixture.name) {
      INFO("torch: " << fixture.torch_code);
      ag::Tensor t = ag::tensor(fixture.values, fixture.shape, fixture.dtype);
      if (fixture.requires_grad) t.requires_grad_();
      const std::string printed = t.str();
      INFO("first difference at " << first_difference(printed, fixture.expected));
      CHECK(printed == fixture.expected);
    }
  }
}
