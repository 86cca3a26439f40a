// Looking inside d2l's MultiHeadAttention: its DOT graph on the composed and the fused path, and
// the backward trace that walks the chain rule through it.
#include <catch2/catch.hpp>

#include <sstream>
#include <string>
#include <vector>

#include "autograd/graph_tools.h"
#include "nn_test_util.h"

using namespace ag;
using Catch::Matchers::Contains;

namespace {

// d2l's example: num_hiddens 100, 5 heads, batch 2, 4 queries, 6 key-value pairs, valid_lens {3,
// 2}.
struct D2lAttention {
  nn::MultiHeadAttention attention{100, 100, 100, 100, 5, 0.5};
  Tensor output;
  explicit D2lAttention(bool fused) {
    nn::FusedKernelsGuard path(fused);
    attention.eval();
    Tensor X = nn_test::randn32({2, 4, 100}, 1);  // queries (B, Q, D)
    Tensor Y = nn_test::randn32({2, 6, 100}, 2);  // keys and values (B, K, D)
    output = attention(X, Y, Y, tensor({3, 2}));  // (B, Q, D)
  }
  std::string dot() const {
    DotOptions options;
    options.names = attention.named_parameters();
    return to_dot(output, options);
  }
};

int count(const std::string& text, const std::string& part) {
  int n = 0;
  for (std::size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

}  // namespace

TEST_CASE(
    "to_dot of MultiHeadAttention, composed path: d2l's ops with their shapes", "[nn][graph]") {
  manual_seed(0);
  D2lAttention d2l(/*fused=*/false);
  const std::string dot = d2l.dot();
  INFO(dot);
  // The four projections, by parameter name, with their shapes.
  for (const char* name : {"W_q.weight", "W_k.weight", "W_v.weight", "W_o.weight"})
    CHECK_THAT(dot, Contains(std::string(name) + "\\n[100,100] float32"));
  // transpose_qkv's (B·H, T, D/H) heads, the scores Q·Kᵀ/√d, masked_softmax, the weighted sum.
  CHECK_THAT(dot, Contains("reshape\\n[10,4,20] float32"));
  CHECK_THAT(dot, Contains("reshape\\n[10,6,20] float32"));
  CHECK_THAT(dot, Contains("permute\\n[10,20,6] float32"));    // Kᵀ
  CHECK(count(dot, "matmul\\n[10,4,6] float32") == 1);         // Q·Kᵀ
  CHECK_THAT(dot, Contains("div_scalar\\n[10,4,6] float32"));  // / √d
  CHECK_THAT(dot, Contains("masked_fill\\n[10,4,6] float32"));
  CHECK_THAT(dot, Contains("softmax\\n[10,4,6] float32"));
  CHECK_THAT(dot, Contains("matmul\\n[10,4,20] float32"));                // weights · V
  CHECK_THAT(dot, Contains("n0 [label=\"matmul\\n[2,4,100] float32\""));  // W_o, the root
  CHECK_THAT(dot, !Contains("scaled_dot_product_attention"));
  CHECK(count(dot, "no grad\\n[2,6,100]") == 2);  // keys and values, the same Y, projected twice
}

TEST_CASE("to_dot of MultiHeadAttention, fused path: one scaled_dot_product_attention node",
    "[nn][graph]") {
  manual_seed(0);
  D2lAttention d2l(/*fused=*/true);
  const std::string dot = d2l.dot();
  INFO(dot);
  CHECK(count(dot, "scaled_dot_product_attention\\n[2,5,4,20] float32") == 1);
  for (const char* name : {"W_q.weight", "W_k.weight", "W_v.weight", "W_o.weight"})
    CHECK_THAT(dot, Contains(std::string(name) + "\\n[100,100] float32"));
  CHECK_THAT(dot, !Contains("softmax"));
  CHECK_THAT(dot, !Contains("masked_fill"));
  CHECK_THAT(dot, !Contains("div_scalar"));
}

TEST_CASE("the backward trace of MultiHeadAttention walks from W_o back to the projections",
    "[nn][graph][trace]") {
  manual_seed(0);
  D2lAttention d2l(/*fused=*/false);
  const int ops_in_graph = count(d2l.dot(), "shape=box");
  std::ostringstream out;
  {
    BackwardTraceGuard trace(out, d2l.attention.named_parameters());
    d2l.output.backward(nn_test::randn32(d2l.output.shape(), 3));
  }
  const std::string text = out.str();
  INFO(text);
  // Each of these must appear, in this order: backward visits the ops in reverse.
  const std::vector<std::string> expected = {
      "matmul                [2,4,100], [100,100] -> [2,4,100]",  // W_o
      "-> W_o.weight",
      "reshape               [2,4,5,20] -> [2,4,100]",           // transpose_output
      "matmul                [10,4,6], [10,6,20] -> [10,4,20]",  // weights · V
      "softmax               [10,4,6] -> [10,4,6]",              // masked_softmax
      "masked_fill           [10,4,6] -> [10,4,6]",
      "div_scalar            [10,4,6] -> [10,4,6]",              // / √d
      "matmul                [10,4,20], [10,20,6] -> [10,4,6]",  // Q·Kᵀ
      "-> W_v.weight",
      "-> W_k.weight",
      "reshape               [2,4,100] -> [2,4,5,20]",  // transpose_qkv of the queries
      "-> W_q.weight",
  };
  std::size_t at = 0;
  for (const std::string& part : expected) {
    INFO("looking for: " << part);
    const std::size_t found = text.find(part, at);
    REQUIRE(found != std::string::npos);
    at = found + part.size();
  }
  // A header, then one line per op of the graph.
  CHECK(ops_in_graph > 20);
  CHECK(count(text, "\n") == 1 + ops_in_graph);
}
