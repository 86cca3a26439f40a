// Every error a user can trigger is an ag::Error whose message names the op and the full shapes;
// argument errors are std::invalid_argument, file and program failures std::runtime_error.
#include <catch2/catch.hpp>

#include <cmath>
#include <stdexcept>
#include <string>

#include "autograd/autograd.h"
#include "autograd/gradcheck.h"
#include "autograd/graph_tools.h"
#include "autograd/ops.h"

using namespace ag;
using Catch::Matchers::Contains;
using Catch::Matchers::Equals;

TEST_CASE("argument errors are std::invalid_argument and ag::Error", "[errors]") {
  CHECK_THROWS_AS(matmul(ones({2, 3}), ones({4, 5})), std::invalid_argument);
  CHECK_THROWS_AS(matmul(ones({2, 3}), ones({4, 5})), InvalidArgument);
  CHECK_THROWS_AS(matmul(ones({2, 3}), ones({4, 5})), Error);
  CHECK_THROWS_AS(matmul(ones({2, 3}), ones({4, 5})), ShapeError);
}

namespace {
// The message of the exception `f` throws, if it is caught as an ag::Error; "" if it is not.
template <class F>
std::string caught_as_ag_error(F f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  } catch (...) {
  }
  return "";
}

// What kind of standard exception `f` throws: the first of these catch clauses that takes it.
template <class F>
std::string standard_kind(F f) {
  try {
    f();
  } catch (const std::invalid_argument&) {
    return "invalid_argument";
  } catch (const std::runtime_error&) {
    return "runtime_error";
  } catch (const std::exception&) {
    return "other exception";
  } catch (...) {
    return "not a std::exception";
  }
  return "nothing thrown";
}
}  // namespace

TEST_CASE("catch (const ag::Error&) catches every kind of ag error, with its message", "[errors]") {
  // ShapeError, ValueError, DTypeError and AutogradError from the ops that throw them
  CHECK(caught_as_ag_error([] {
    matmul(ones({2, 3}), ones({4, 5}));
  }) == "matmul: shapes [2,3] and [4,5] cannot be multiplied (3 != 4)");
  CHECK(caught_as_ag_error([] { bernoulli({2}, 2.0); }) ==
        "bernoulli: probability 2 is outside [0, 1]");
  CHECK_THAT(caught_as_ag_error([] { add(ones({2}), ones({2}, float64)); }),
      Contains("float32 and float64"));
  CHECK_THAT(
      caught_as_ag_error([] { ones({2}).requires_grad_().backward(); }), Contains("backward"));
  // IoError and ExternalProgramError
  CHECK(caught_as_ag_error([] { throw IoError("model.ag: no such file"); }) ==
        "model.ag: no such file");
  CHECK(
      caught_as_ag_error([] { throw ExternalProgramError("gnuplot failed"); }) == "gnuplot failed");
  // and nothing else
  CHECK(caught_as_ag_error([] { throw std::runtime_error("not ag's"); }) == "");
}

TEST_CASE("argument errors are std::invalid_argument, I/O and program errors std::runtime_error",
    "[errors]") {
  CHECK(standard_kind([] { matmul(ones({2, 3}), ones({4, 5})); }) == "invalid_argument");
  CHECK(standard_kind([] { throw ShapeError("s"); }) == "invalid_argument");
  CHECK(standard_kind([] { throw DTypeError("d"); }) == "invalid_argument");
  CHECK(standard_kind([] { throw AutogradError("a"); }) == "invalid_argument");
  CHECK(standard_kind([] { throw ValueError("v"); }) == "invalid_argument");
  CHECK(standard_kind([] { throw IoError("i"); }) == "runtime_error");
  CHECK(standard_kind([] { throw ExternalProgramError("e"); }) == "runtime_error");
  CHECK_THROWS_AS(throw IoError("i"), RuntimeError);
  CHECK_THROWS_AS(throw ExternalProgramError("e"), RuntimeError);
  // std::exception's what() and ag::Error's what() are the one message.
  try {
    throw IoError("checkpoint 'a.ag': truncated");
  } catch (const std::exception& e) {
    CHECK(std::string(e.what()) == "checkpoint 'a.ag': truncated");
    const Error* ag_error = dynamic_cast<const Error*>(&e);
    REQUIRE(ag_error != nullptr);
    CHECK(std::string(ag_error->what()) == "checkpoint 'a.ag': truncated");
  }
}

TEST_CASE("fail<E> builds the message for every kind of ag error", "[errors]") {
  CHECK_THROWS_AS(fail<ShapeError>("op: shape ", shape_str({2, 3})), ShapeError);
  CHECK_THROWS_WITH(fail<ShapeError>("op: shape ", shape_str({2, 3})), Equals("op: shape [2,3]"));
  CHECK_THROWS_AS(fail<ValueError>("op: p = ", 1.5), ValueError);
  CHECK_THROWS_WITH(fail<ValueError>("op: p = ", 1.5), Equals("op: p = 1.5"));
  CHECK_THROWS_AS(fail<IoError>("write: '", "a.txt", "'"), IoError);
  CHECK_THROWS_WITH(fail<IoError>("write: '", "a.txt", "'"), Equals("write: 'a.txt'"));
  CHECK_THROWS_AS(fail<ExternalProgramError>("dot exited with ", 1), ExternalProgramError);
  CHECK_THROWS_WITH(fail<ExternalProgramError>("dot exited with ", 1), Equals("dot exited with 1"));
}

TEST_CASE("write_dot to an unwritable path throws an IoError naming the path and the reason",
    "[errors]") {
  Tensor y = (ones({2}).requires_grad_() * 2.0).sum();
  const std::string path = "/nonexistent-dir-ag/graph.dot";
  CHECK_THROWS_AS(write_dot(path, y), IoError);
  CHECK_THROWS_WITH(write_dot(path, y),
      Equals("write_dot: cannot open '/nonexistent-dir-ag/graph.dot' for writing: "
             "No such file or directory"));
  CHECK(standard_kind([&] { write_dot(path, y); }) == "runtime_error");
}

TEST_CASE("matmul errors", "[errors]") {
  CHECK_THROWS_WITH(matmul(ones({2, 3}), ones({4, 5})),
      Equals("matmul: shapes [2,3] and [4,5] cannot be multiplied (3 != 4)"));
  CHECK_THROWS_WITH(matmul(ones({7, 2, 3}), ones({5, 3, 4})),
      Equals("matmul: batch dims of shapes [7,2,3] and [5,3,4] cannot be broadcast ([7] vs [5])"));
  CHECK_THROWS_WITH(matmul(ones({}), ones({3})),
      Contains("matmul: shapes [] and [3]") && Contains("at least 1 dim"));
  CHECK_THROWS_WITH(matmul(ones({3}), ones({4})), Contains("[3] and [4]") && Contains("(3 != 4)"));
}

TEST_CASE("linear errors", "[errors]") {
  CHECK_THROWS_WITH(linear(ones({2, 3}), ones({5, 4}), ones({5})),
      Equals("linear: the input must end in in_features = 4, got input [2,3], weight [5,4], "
             "bias [5]"));
  CHECK_THROWS_WITH(linear(ones({}), ones({5, 4})), Contains("input [], weight [5,4], bias none"));
  CHECK_THROWS_WITH(linear(ones({2, 4}), ones({4})),
      Equals("linear: the weight must be (out_features, in_features), got input [2,4], weight [4], "
             "bias none"));
  CHECK_THROWS_WITH(linear(ones({2, 4}), ones({5, 4}), ones({4})),
      Equals("linear: the bias must be (out_features) = (5), got input [2,4], weight [5,4], bias "
             "[4]"));
  CHECK_THROWS_WITH(linear(ones({2, 4}), ones({5, 4}), ones({1, 5})),
      Contains("linear: the bias must be") && Contains("bias [1,5]"));
  CHECK_THROWS_AS(linear(ones({2, 4}), ones({5, 4}, float64)), DTypeError);
  CHECK_THROWS_WITH(linear(ones({2, 4}), ones({5, 4}), ones({5}, float64)),
      Contains("linear: dtypes float32 and float64"));
  CHECK_THROWS_WITH(linear(Tensor(), ones({5, 4})), Contains("linear: the input and the weight"));
  CHECK_THROWS_AS(linear(ones({2, 4}), Tensor()), ValueError);
  CHECK_THROWS_WITH(linear_relu(ones({2, 3}), ones({5, 4})),
      Equals("linear_relu: the input must end in in_features = 4, got input [2,3], weight [5,4], "
             "bias none"));
}

TEST_CASE("broadcasting errors", "[errors]") {
  CHECK_THROWS_WITH(ones({2, 3}) + ones({4}),
      Equals("add: shapes [2,3] and [4] cannot be broadcast (dim 1: 3 vs 4)"));
  CHECK_THROWS_WITH(ones({2, 3}) * ones({3, 3}), Contains("mul: shapes [2,3] and [3,3]"));
  CHECK_THROWS_WITH(sub(ones({2}), ones({3})), Contains("sub: shapes [2] and [3]"));
  CHECK_THROWS_WITH(div(ones({2}), ones({3})), Contains("div: shapes [2] and [3]"));
  CHECK_THROWS_WITH(where(ones({2}), ones({3}), ones({3})), Contains("where: shapes [2] and [3]"));
  CHECK_THROWS_WITH(masked_fill(ones({2, 3}), ones({4}), 0.0),
      Contains("masked_fill") && Contains("[2,3]") && Contains("[4]"));
  CHECK_THROWS_WITH(masked_fill(ones({3}), ones({2, 3}), 0.0),
      Contains("masked_fill: mask of shape [2,3] does not broadcast to the input's shape [3]"));
  CHECK_THROWS_WITH(lt(ones({2}), ones({3})), Contains("lt: shapes [2] and [3]"));
}

TEST_CASE("dim errors", "[errors]") {
  CHECK_THROWS_WITH(sum(ones({2, 3}), {2}),
      Equals("sum: dim 2 is out of range for a tensor of 2 dims (expected -2 to 1)"));
  CHECK_THROWS_WITH(
      sum(ones({2, 3}), {1, -1}), Contains("sum: dim -1 is listed twice") && Contains("[2,3]"));
  CHECK_THROWS_WITH(
      sum(ones({2, 3}), Shape{}), Contains("sum: no dims given") && Contains("[2,3]"));
  CHECK_THROWS_WITH(softmax(ones({2, 3}), 3), Contains("softmax: dim 3 is out of range"));
  CHECK_THROWS_WITH(log_softmax(ones({2, 3}), -3), Contains("log_softmax: dim -3"));
  CHECK_THROWS_WITH(transpose(ones({2, 3}), 0, 2), Contains("transpose: dim 2"));
  CHECK_THROWS_WITH(unsqueeze(ones({2, 3}), 4), Contains("unsqueeze: dim 4"));
  CHECK_THROWS_WITH(ones({2}).size(1), Contains("size: dim 1"));
  CHECK_THROWS_WITH(argmax(ones({2}), 1), Contains("argmax: dim 1"));
}

TEST_CASE("reduction errors", "[errors]") {
  CHECK_THROWS_WITH(mean(ones({0, 3}), {0}),
      Contains("mean: cannot reduce over zero elements (input shape [0,3])"));
  CHECK_THROWS_WITH(max(ones({0})), Contains("max: cannot reduce over zero elements"));
  CHECK_THROWS_WITH(var(ones({3, 1}), {1}),
      Contains("var: 1 element(s) per group of input shape [3,1] leave no degrees of freedom"));
  CHECK(sum(ones({0, 3})).item() == 0.0);  // a sum over nothing is 0, not an error
}

TEST_CASE("shape op errors", "[errors]") {
  CHECK_THROWS_WITH(reshape(ones({2, 3}), {4, 2}),
      Equals("reshape: shape [4,2] is invalid for input of shape [2,3] (6 elements)"));
  CHECK_THROWS_WITH(permute(ones({2, 3}), {0, 0}),
      Equals("permute: dims [0,0] are not a permutation of the 2 dims of shape [2,3]"));
  CHECK_THROWS_WITH(permute(ones({2, 3}), {0}), Contains("permute: dims [0]"));
  CHECK_THROWS_WITH(expand(ones({2, 3}), {4, 3}),
      Equals("expand: shape [2,3] cannot be expanded to [4,3] (dim 0: 2 vs 4)"));
  CHECK_THROWS_WITH(
      expand(ones({2, 3}), {3}), Contains("expand: shape [2,3] cannot be expanded to [3]"));
  CHECK_THROWS_WITH(
      slice(ones({2, 3}), 1, 0, 2, 0), Contains("slice: step 0 must be positive (shape [2,3])"));
  CHECK_THROWS_WITH(narrow(ones({2, 3}), 1, 2, 2),
      Equals("narrow: start 2 and length 2 do not fit dim 1 of shape [2,3]"));
  CHECK_THROWS_WITH(select(ones({2, 3}), 0, 2),
      Equals("select: index 2 is out of range for dim 0 of shape [2,3]"));
  CHECK_THROWS_WITH(split(ones({2, 3}), std::vector<int64_t>{1, 1}, 1),
      Equals("split: sizes [1,1] sum to 2, not to dim 1 of shape [2,3]"));
  CHECK_THROWS_WITH(split(ones({2, 3}), int64_t{0}, 1),
      Contains("split: split size 0 must be positive (shape [2,3])"));
  CHECK_THROWS_WITH(concat({ones({2, 3}), ones({2, 4})}, 0),
      Equals("concat: shapes [2,3] and [2,4] differ outside dim 0"));
  CHECK_THROWS_WITH(concat({}), Contains("concat: needs at least one tensor"));
  CHECK_THROWS_WITH(index_select(ones({3, 2}), 0, std::vector<int64_t>{3}),
      Equals("index_select: index 3 is out of range for dim 0 of shape [3,2]"));
  CHECK_THROWS_WITH(index_select(ones({3, 2}), 0, tensor({0.5})),
      Contains("index_select: index value 0.5 is not an integer (input shape [3,2])"));
  CHECK_THROWS_WITH(
      index_select(ones({3, 2}), 0, ones({1, 1})), Contains("index must be 1-D, got shape [1,1]"));
  CHECK_THROWS_WITH(repeat_interleave(ones({2}), -1, 0),
      Contains("repeat_interleave: repeats -1 is negative (shape [2])"));
}

TEST_CASE("layer_norm and dropout_add_layer_norm refuse a negative or NaN eps", "[errors]") {
  CHECK_THROWS_AS(layer_norm(ones({2, 4}), {4}, Tensor(), Tensor(), -1e-5), ValueError);
  CHECK_THROWS_WITH(layer_norm(ones({2, 4}), {4}, Tensor(), Tensor(), -1),
      Equals("layer_norm: eps -1 must not be negative (nor NaN)"));
  CHECK_THROWS_WITH(layer_norm(ones({2, 4}), {4}, Tensor(), Tensor(), std::nan("")),
      Contains("layer_norm: eps nan"));
  Generator generator(0);
  CHECK_THROWS_WITH(dropout_add_layer_norm(ones({2, 4}), ones({2, 4}), {4}, Tensor(), Tensor(), -1,
                        0.0, false, generator),
      Equals("dropout_add_layer_norm: eps -1 must not be negative (nor NaN)"));
  // eps 0 is allowed (a constant row then divides by 0, as in PyTorch).
  CHECK_NOTHROW(layer_norm(ones({2, 4}), {4}, Tensor(), Tensor(), 0.0));
}

TEST_CASE("layer_norm errors", "[errors]") {
  CHECK_THROWS_AS(layer_norm(ones({2, 3}), {4}, Tensor(), Tensor(), 1e-5), ShapeError);
  CHECK_THROWS_WITH(layer_norm(ones({2, 3}), {4}, Tensor(), Tensor(), 1e-5),
      Equals("layer_norm: input of shape [2,3] does not end in normalized_shape [4]"));
  CHECK_THROWS_WITH(layer_norm(ones({4}), {3, 4}, Tensor(), Tensor(), 1e-5),
      Equals("layer_norm: input of shape [4] does not end in normalized_shape [3,4]"));
  CHECK_THROWS_WITH(layer_norm(ones({2, 4, 3}), {3, 4}, Tensor(), Tensor(), 1e-5),
      Contains("[2,4,3] does not end in normalized_shape [3,4]"));
  CHECK_THROWS_WITH(layer_norm(ones({2, 4}), {4}, ones({3}), ones({4}), 1e-5),
      Equals("layer_norm: weight of shape [3] does not match normalized_shape [4] "
             "(input of shape [2,4])"));
  CHECK_THROWS_WITH(layer_norm(ones({2, 3, 4}), {3, 4}, ones({3, 4}), ones({12}), 1e-5),
      Equals("layer_norm: bias of shape [12] does not match normalized_shape [3,4] "
             "(input of shape [2,3,4])"));
  CHECK_THROWS_AS(layer_norm(ones({2, 4}), {4}, ones({4}, float64), Tensor(), 1e-5), DTypeError);
  CHECK_THROWS_WITH(layer_norm(ones({2, 4}), {4}, Tensor(), ones({4}, float64), 1e-5),
      Contains("layer_norm: dtypes float32 and float64 cannot be mixed"));
  CHECK_THROWS_AS(layer_norm(ones({2, 4}), Shape{}, Tensor(), Tensor(), 1e-5), ValueError);
  CHECK_THROWS_WITH(layer_norm(ones({2, 4}), Shape{}, Tensor(), Tensor(), 1e-5),
      Contains("layer_norm: normalized_shape cannot be empty"));
}

TEST_CASE("value errors", "[errors]") {
  CHECK_THROWS_WITH(dropout(ones({2, 3}), 1.5),
      Contains("dropout: probability 1.5 is outside [0, 1] (input shape [2,3])"));
  CHECK_THROWS_WITH(bernoulli({2}, -0.1), Contains("bernoulli: probability -0.1"));
  CHECK_THROWS_WITH(uniform({2}, 1.0, 0.0), Contains("uniform: invalid range"));
  CHECK_THROWS_WITH(arange(0, 1, 0), Contains("arange"));
  CHECK_THROWS_WITH(zeros({2, -1}), Contains("negative size in shape [2,-1]"));
  CHECK_THROWS_WITH(
      tensor({1.0, 2.0}, {3}), Equals("tensor: 2 values cannot fill shape [3] (3 elements)"));
  CHECK_THROWS_AS(set_num_threads(0), ValueError);
  CHECK_THROWS_AS(Tensor().shape(), Error);
}

TEST_CASE("gradcheck argument errors", "[errors]") {
  auto f = [](const std::vector<Tensor>& x) { return x[0] * 2.0; };
  CHECK_THROWS_WITH(gradcheck(f, {ones({2}).requires_grad_()}),
      Contains("gradcheck: input 0 of shape [2] is float32"));
  CHECK_THROWS_WITH(gradcheck(f, {ones({2}, float64)}), Contains("no input requires grad"));
}
