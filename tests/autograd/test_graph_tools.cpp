// ag::to_dot, ag::write_dot, ag::BackwardTraceGuard and the input shapes a Node records.
#include <catch2/catch.hpp>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "autograd/graph_tools.h"
#include "autograd/ops.h"
#include "what_contains.h"

using namespace ag;
using Catch::Matchers::Contains;

namespace {

// The op names of a trace, one per line after the header (the second column).
std::vector<std::string> traced_ops(const std::string& trace) {
  std::vector<std::string> ops;
  std::istringstream lines(trace);
  std::string line;
  std::getline(lines, line);  // header
  while (std::getline(lines, line)) {
    std::istringstream words(line);
    std::string step, op;
    words >> step >> op;
    ops.push_back(op);
  }
  return ops;
}

// Options that only name leaves.
DotOptions named(TensorNames names) {
  DotOptions options;
  options.names = std::move(names);
  return options;
}

int count(const std::string& text, const std::string& part) {
  int n = 0;
  for (std::size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

}  // namespace

TEST_CASE(
    "Node records the shapes of all its inputs, also those without gradient", "[autograd][graph]") {
  Tensor x = ones({2, 3}, float64).requires_grad_();
  Tensor c = ones({3, 4}, float64);
  Tensor y = matmul(x, c);
  const auto shapes = y.grad_fn()->input_shapes();
  REQUIRE(shapes.size() == 2);
  CHECK(*shapes[0] == Shape{2, 3});
  CHECK(*shapes[1] == Shape{3, 4});
  CHECK_FALSE(y.grad_fn()->inputs()[1].needs_grad());

  Tensor out = make_op("with_undefined", x.detach().clone(), {x, Tensor()},
      [](const Tensor& g, const NeedsGrad&) -> Grads {
        return {g, Tensor()};
      });
  const auto custom = out.grad_fn()->input_shapes();
  REQUIRE(custom.size() == 2);
  CHECK(*custom[0] == Shape{2, 3});
  CHECK_FALSE(custom[1].has_value());

  // The node sees its output while something holds it, and lets it go.
  CHECK(y.grad_fn()->output().shares_storage(y));
  auto node = y.grad_fn();
  y = Tensor();
  CHECK_FALSE(node->output().defined());
}

TEST_CASE(
    "to_dot of a small graph: exact text with ids in breadth-first order", "[autograd][graph]") {
  Tensor w = tensor({1.0, 2.0}, float64).requires_grad_();
  Tensor x = ones({3, 2}, float64);  // no grad: drawn as a note
  Tensor y = (x * w).sum();
  const std::string expected =
      "digraph ag {\n"
      "  // Made by ag::to_dot: boxes are ops (name, output shape, dtype), ellipses leaves,\n"
      "  // dashed notes inputs that need no gradient; edges run from inputs to the op using "
      "them.\n"
      "  graph [rankdir=TB];\n"
      "  node [fontname=\"Helvetica\", fontsize=10];\n"
      "  edge [fontname=\"Helvetica\", fontsize=9];\n"
      "  n0 [label=\"sum\\n[] float64\", shape=box, style=\"filled\", fillcolor=\"#eeeeee\", "
      "penwidth=2];\n"
      "  n1 [label=\"mul\\n[3,2] float64\", shape=box, style=\"filled\", fillcolor=\"#eeeeee\"];\n"
      "  n2 [label=\"no grad\\n[3,2]\", shape=note, style=dashed, fontcolor=\"#666666\", "
      "color=\"#999999\"];\n"
      "  n3 [label=\"w\\n[2] float64\", shape=ellipse, style=filled, fillcolor=\"#cfe2f3\"];\n"
      "  n1 -> n0;\n"
      "  n2 -> n1 [label=\"0\", style=dashed, color=\"#999999\"];\n"
      "  n3 -> n1 [label=\"1\"];\n"
      "}\n";
  CHECK(to_dot(y, named({{"w", w}})) == expected);
}

TEST_CASE("to_dot draws data inputs as notes, but not masks or valid lengths (not op inputs)",
    "[autograd][graph]") {
  Tensor w = ones({2}).requires_grad_();
  Tensor x = ones({3, 2});                           // data: an op input with no gradient, a note
  Tensor mask = tensor({0.0, 1.0}).reshape({1, 2});  // masked_fill's argument
  Tensor X = ones({2, 3, 4}).requires_grad_();
  Tensor valid_lens = tensor({4, 1});  // masked_softmax's argument
  Tensor y = masked_fill(x * w, mask, 0.0).sum() + length_masked_softmax(X, valid_lens).sum();
  const std::string dot = to_dot(y);
  CHECK(count(dot, "shape=note") == 1);
  CHECK(count(dot, "no grad\\n[3,2]") == 1);
  CHECK(count(dot, "masked_fill\\n[3,2]") == 1);
  CHECK(count(dot, "length_masked_softmax\\n[2,3,4]") == 1);
  CHECK(count(dot, "[1,2]") == 0);  // the mask
  CHECK(count(dot, "[2]") == 1);    // w's label "leaf\\n[2] float32"; valid_lens [2] is not drawn
}

TEST_CASE(
    "to_dot names leaves, shares nodes used twice and is deterministic", "[autograd][graph]") {
  Tensor a = ones({2, 4}).requires_grad_();
  Tensor b = ones({4, 3}).requires_grad_();
  b.set_name("own_name");
  Tensor unnamed = ones({3}).requires_grad_();
  Tensor h = tanh(matmul(a, b));  // (2, 3)
  Tensor y = (h * h + unnamed).mean();
  const std::string dot = to_dot(y, named({{"layer.a", a}}));
  CHECK(dot == to_dot(y, named({{"layer.a", a}})));
  CHECK_THAT(dot, Contains("mean\\n[] float32"));
  CHECK_THAT(dot, Contains("matmul\\n[2,3] float32"));
  CHECK_THAT(dot, Contains("tanh\\n[2,3] float32"));
  CHECK_THAT(dot, Contains("layer.a\\n[2,4] float32"));   // from options.names
  CHECK_THAT(dot, Contains("own_name\\n[4,3] float32"));  // from Tensor::set_name
  CHECK_THAT(dot, Contains("leaf\\n[3] float32"));        // unnamed: by shape
  CHECK(count(dot, "label=\"tanh") == 1);                 // h feeds mul twice, drawn once
  CHECK(
      count(dot, "label=\"leaf") + count(dot, "label=\"layer.a") + count(dot, "label=\"own_name") ==
      3);
  // Edges: mean<-add, add<-mul, add<-unnamed, mul<-tanh twice (h · h), tanh<-matmul, matmul<-a,
  // matmul<-b.
  CHECK(count(dot, " -> ") == 8);
  // Breadth first: n0 mean, n1 add, n2 mul, n3 the unnamed leaf, n4 tanh, n5 matmul, n6 a, n7 b.
  CHECK_THAT(dot, Contains("n4 -> n2 [label=\"0\"]"));
  CHECK_THAT(dot, Contains("n4 -> n2 [label=\"1\"]"));
  CHECK_THAT(dot, Contains("n7 -> n5 [label=\"1\"]"));
}

TEST_CASE("to_dot escapes labels", "[autograd][graph]") {
  Tensor x = ones({2}).requires_grad_();
  Tensor y = make_op("say \"hi\" \\ bye\n", x.detach().clone(), {x},
      [](const Tensor& g, const NeedsGrad&) -> Grads { return {g}; });
  DotOptions options = named({{"quote\"name", x}});
  options.title = "a \"title\"";
  const std::string dot = to_dot(y, options);
  CHECK_THAT(dot, Contains("label=\"say \\\"hi\\\" \\\\ bye \\n[2] float32\""));
  CHECK_THAT(dot, Contains("label=\"quote\\\"name\\n[2] float32\""));
  CHECK_THAT(dot, Contains("label=\"a \\\"title\\\"\";"));
  CHECK_FALSE(dot.find("say \"hi") != std::string::npos);  // no raw quote inside a label
}

TEST_CASE("to_dot shows values and gradients, small ones in full and large ones summarised",
    "[autograd][graph]") {
  Tensor small = tensor({1.0, -2.0, 0.5}).requires_grad_();
  Tensor large = full({10}, 3.0).requires_grad_();  // norm √90 = 9.487
  // y = (1 − 2 + 0.5) · 30: dy/dsmall = 30 each, dy/dlarge = −0.5 each (norm √2.5 = 1.581)
  Tensor y = small.sum() * large.sum();
  y.backward(Tensor(), /*retain_graph=*/true);  // keep the graph to draw it
  DotOptions options;
  options.names = {{"small", small}, {"large", large}};
  options.values = true;
  options.grads = true;
  options.max_printed = 4;
  const std::string dot = to_dot(y, options);
  CHECK_THAT(dot, Contains("small\\n[3] float32\\nvalue [1, -2, 0.5]\\ngrad [30, 30, 30]"));
  CHECK_THAT(dot, Contains("large\\n[10] float32\\nvalue norm 9.487 min 3 max 3\\n"
                           "grad norm 1.581 min -0.5 max -0.5"));
  CHECK_THAT(
      dot, Contains("mul\\n[] float32\\nvalue [-15]"));  // the root is alive: its value is known
  CHECK_THAT(to_dot(y), !Contains("value"));
}

TEST_CASE("to_dot after backward marks the freed graph — a leaf root is drawn alone",
    "[autograd][graph]") {
  Tensor x = ones({2}).requires_grad_();
  Tensor y = (x * 2.0).sum();
  y.backward();
  const std::string dot = to_dot(y);
  CHECK_THAT(dot, Contains("sum\\n[] float32\\n(graph freed by backward)"));
  CHECK_THAT(dot, Contains("filled,dashed"));
  CHECK(count(dot, " -> ") == 0);

  const std::string leaf = to_dot(x, named({{"x", x}}));
  CHECK_THAT(leaf, Contains("n0 [label=\"x\\n[2] float32\""));
  CHECK(count(leaf, "label=") == 1);
  CHECK_THROWS_AS(to_dot(Tensor()), ValueError);
}

TEST_CASE("write_dot writes the file and names the path when it cannot", "[autograd][graph]") {
  Tensor x = ones({2}).requires_grad_();
  Tensor y = (x * 2.0).sum();
  const std::string path = "ag_test_write_dot.dot";
  write_dot(path, y);
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  CHECK(text.str() == to_dot(y));
  std::remove(path.c_str());
  CHECK_THROWS_MATCHES(write_dot("/nonexistent-dir-ag/graph.dot", y), IoError,
      WhatContains({"write_dot", "/nonexistent-dir-ag/graph.dot"}));
}

TEST_CASE("BackwardTraceGuard prints the nodes in backward's order with shapes and gradient norms",
    "[autograd][graph][trace]") {
  Tensor x = tensor({1.0, 2.0, 2.0}, float64).requires_grad_();  // |x| = 3
  Tensor a = exp(x);
  Tensor b = a * 2.0;
  Tensor c = a + b;  // 3 eˣ
  Tensor y = c.sum();
  std::ostringstream out;
  {
    BackwardTraceGuard trace(out, {{"x", x}});
    y.backward();
  }
  // Reverse creation order: sum, add, mul_scalar (b), exp (a, whose gradient gathers both uses).
  CHECK(traced_ops(out.str()) == std::vector<std::string>{"sum", "add", "mul_scalar", "exp"});
  std::istringstream lines(out.str());
  std::string header, sum_line, add_line, mul_line, exp_line;
  std::getline(lines, header);
  std::getline(lines, sum_line);
  std::getline(lines, add_line);
  std::getline(lines, mul_line);
  std::getline(lines, exp_line);
  CHECK_THAT(header, Contains("|grad out|") && Contains("input shapes -> output shape"));
  CHECK_THAT(sum_line, Contains("    1  sum") && Contains("[3] -> []") && Contains("  1  ") &&
                           Contains("[0] 1.732"));  // |ones(3)| = √3
  CHECK_THAT(add_line, Contains("[3], [3] -> [3]") && Contains("[0] 1.732, [1] 1.732"));
  CHECK_THAT(mul_line, Contains("[0] 3.464"));  // 2 · √3
  CHECK_THAT(
      exp_line, Contains("5.196") && Contains("-> x"));  // (1 + 2) · √3 arrives; eˣ · 3 leaves to x

  // Gone with the guard.
  std::ostringstream after;
  { BackwardTraceGuard header_only(after); }
  (x * 1.0).sum().backward();
  CHECK(traced_ops(after.str()).empty());
}

TEST_CASE("BackwardTraceGuard marks inputs that need no gradient", "[autograd][graph][trace]") {
  Tensor w = ones({2, 2}).requires_grad_();
  Tensor x = ones({3, 2});
  std::ostringstream out;
  {
    BackwardTraceGuard trace(out);
    matmul(x, w).sum().backward();
  }
  CHECK_THAT(out.str(), Contains("matmul") && Contains("[3,2], [2,2] -> [3,2]") &&
                            Contains("[0] -, [1] ") && Contains("-> leaf"));
}
