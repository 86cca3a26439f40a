// x.index({...}): Python's basic indexing (autograd/indexing.h), against what the same
// expression gives in PyTorch (written out by hand: the tensors are aranges).
#include <catch2/catch.hpp>

#include <vector>

#include "autograd/autograd.h"
#include "autograd/gradcheck.h"
#include "autograd/ops.h"

using namespace ag;
using Catch::Matchers::Contains;

namespace {
// x = torch.arange(24.).reshape(2, 3, 4)
Tensor x234() { return arange(24).reshape({2, 3, 4}); }
}  // namespace

TEST_CASE("index picks what Python indexing picks", "[index]") {
  const Tensor x = x234();
  // x[0] → (3, 4), elements 0..11
  CHECK(x.index({0}).shape() == Shape{3, 4});
  CHECK(x.index({0}).to_vector<double>()[11] == 11);
  // x[:, -1] → (2, 4): rows 8..11 and 20..23
  CHECK(x.index({Slice(), -1}).to_vector<double>() ==
        std::vector<double>{8, 9, 10, 11, 20, 21, 22, 23});
  // x[..., -1] → (2, 3): the last of each row
  CHECK(x.index({Ellipsis, -1}).to_vector<double>() == std::vector<double>{3, 7, 11, 15, 19, 23});
  // x[1, 1:, ::2] → (2, 2)
  CHECK(x.index({1, Slice(1, None), Slice(None, None, 2)}).to_vector<double>() ==
        std::vector<double>{16, 18, 20, 22});
  // x[-1, :-1, 1:3]
  CHECK(x.index({-1, Slice(None, -1), Slice(1, 3)}).to_vector<double>() ==
        std::vector<double>{13, 14, 17, 18});
  // x[None, :, 0] → (1, 2, 4)
  CHECK(x.index({None, Slice(), 0}).shape() == Shape{1, 2, 4});
  // x[0, ..., None] → (3, 4, 1)
  CHECK(x.index({0, Ellipsis, None}).shape() == Shape{3, 4, 1});
  // x[5:] along a dim of 2 → empty, as Python clamps
  CHECK(x.index({Slice(5)}).shape() == Shape{0, 3, 4});
  // x[...] and x[()] are x itself (a view of it)
  CHECK(x.index({Ellipsis}).shape() == x.shape());
  CHECK(x.index({}).shape() == x.shape());
  // a view: no copy
  CHECK(x.index({Slice(), -1}).shares_storage(x));
  // token ids: the last position of each sequence
  Tensor ids = arange(6, int64).reshape({2, 3});
  CHECK(ids.index({Slice(), -1}).to_vector<int64_t>() == std::vector<int64_t>{2, 5});
}

TEST_CASE("index is differentiable as the views it is made of", "[index][gradcheck]") {
  Tensor x = randn({2, 3, 4}, float64).requires_grad_();
  CHECK(gradcheck(
      [](const std::vector<Tensor>& in) {
        return in[0].index({Slice(), -1, Slice(1)});
      },
      {x}));
  sum(x.index({1, Ellipsis, 0})).backward();
  const std::vector<double> g = x.grad().to_vector<double>();
  for (int64_t i = 0; i < 24; ++i)
    CHECK(g[static_cast<std::size_t>(i)] == (i >= 12 && i % 4 == 0 ? 1.0 : 0.0));
}

TEST_CASE("index errors name the entry and the shape", "[index][errors]") {
  const Tensor x = x234();
  CHECK_THROWS_WITH(x.index({0, 0, 0, 0}),
      Contains("index: {0, 0, 0, 0} names 4 dims of a tensor of 3 (shape [2,3,4])"));
  CHECK_THROWS_WITH(x.index({Slice(), 3}),
      Contains("index: 3 in {None:None:1, 3} is out of range for dim 1 of size 3"));
  CHECK_THROWS_WITH(x.index({-3}), Contains("is out of range for dim 0 of size 2"));
  CHECK_THROWS_WITH(x.index({Ellipsis, 0, Ellipsis}), Contains("more than one Ellipsis"));
  CHECK_THROWS_WITH(x.index({Slice(None, None, -1)}), Contains("a step must be positive"));
  CHECK_THROWS_AS(x.index({0}).index({0}).index({0}).index({0}), ShapeError);  // a 0-dim tensor
}
