#include "autograd/graph_tools.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <deque>
#include <fstream>
#include <sstream>
#include <unordered_map>

namespace ag {

namespace {

// A number with 4 significant digits, as the graph labels and the trace print them.
std::string num(double value) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.4g", value);
  return buffer;
}

std::string shape_and_dtype(const Shape& shape, DType dtype) {
  return shape_str(shape) + " " + dtype_name(dtype);
}

// Label text inside a DOT double-quoted string: quotes and backslashes escaped (a backslash
// would otherwise start one of DOT's own escapes such as \n or \l), control characters dropped
// to spaces. Lines are joined by the caller with DOT's "\n".
std::string escape(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      out += ' ';
    } else {
      out += c;
    }
  }
  return out;
}

std::string label(const std::vector<std::string>& lines) {
  std::string out;
  for (std::size_t i = 0; i < lines.size(); ++i) out += (i ? "\\n" : "") + escape(lines[i]);
  return out;
}

}  // namespace

namespace detail {

// Leaf names by identity: options.names first (first entry wins), then the tensor's own name.
// (In a named namespace: BackwardTraceGuard::State, which the header declares, holds one.)
class LeafNames {
 public:
  explicit LeafNames(const TensorNames& names) {
    for (const auto& [name, tensor] : names)
      if (tensor.defined()) by_impl_.emplace(tensor.impl_ptr().get(), name);
  }
  // The name of `leaf`, or "" if it has none.
  std::string find(const TensorImpl& leaf) const {
    auto it = by_impl_.find(&leaf);
    if (it != by_impl_.end()) return it->second;
    return leaf.name;
  }

 private:
  std::unordered_map<const TensorImpl*, std::string> by_impl_;
};

}  // namespace detail

using detail::LeafNames;

double l2_norm(const Tensor& t) {
  double sum = 0;
  for (double v : t.to_vector<double>()) sum += v * v;
  return std::sqrt(sum);
}

std::string tensor_brief(const Tensor& t, int64_t max_printed) {
  if (!t.defined()) return "undefined";
  const std::vector<double> values = t.to_vector<double>();
  if (static_cast<int64_t>(values.size()) <= max_printed) {
    std::string out = "[";
    for (std::size_t i = 0; i < values.size(); ++i) out += (i ? ", " : "") + num(values[i]);
    return out + "]";
  }
  double sum = 0, low = values[0], high = values[0];
  bool nan = false;
  for (double v : values) {
    sum += v * v;
    nan = nan || std::isnan(v);
    low = std::min(low, v);
    high = std::max(high, v);
  }
  if (nan) return "norm nan (contains NaN)";
  return "norm " + num(std::sqrt(sum)) + " min " + num(low) + " max " + num(high);
}

// ---- to_dot -------------------------------------------------------------------------------------

std::string to_dot(const Tensor& root, const DotOptions& options) {
  if (!root.defined()) throw ValueError("to_dot: the root tensor is undefined");
  if (options.max_printed < 0)
    fail<ValueError>("to_dot: max_printed ", options.max_printed, " must be >= 0");
  const LeafNames names(options.names);

  std::ostringstream nodes, edges;  // node lines in id order, then edge lines
  int next_id = 0;
  std::unordered_map<const void*, int> ids;  // Node* or TensorImpl* -> id
  std::deque<const Node*> queue;             // ops discovered but not yet expanded

  auto value_lines = [&](const Tensor& value, const Tensor& grad, bool is_leaf,
                         std::vector<std::string>& lines) {
    if (options.values && value.defined())
      lines.push_back("value " + tensor_brief(value, options.max_printed));
    if (options.grads && is_leaf)
      lines.push_back(
          grad.defined() ? "grad " + tensor_brief(grad, options.max_printed) : "grad none");
  };
  auto leaf_id = [&](const std::shared_ptr<TensorImpl>& leaf, bool is_root) {
    auto [it, fresh] = ids.emplace(leaf.get(), next_id);
    if (!fresh) return it->second;
    const Tensor tensor(leaf);
    const std::string name = names.find(*leaf);
    std::vector<std::string> lines = {
        name.empty() ? (leaf->requires_grad ? "leaf" : "tensor") : name,
        shape_and_dtype(leaf->shape, leaf->dtype)};
    value_lines(tensor, tensor.grad(), true, lines);
    nodes << "  n" << next_id << " [label=\"" << label(lines)
          << "\", shape=ellipse, style=filled, fillcolor=\"#cfe2f3\""
          << (is_root ? ", penwidth=2" : "") << "];\n";
    return next_id++;
  };
  auto op_id = [&](const std::shared_ptr<Node>& node, bool is_root) {
    auto [it, fresh] = ids.emplace(node.get(), next_id);
    if (!fresh) return it->second;
    std::vector<std::string> lines = {
        node->name(), shape_and_dtype(node->output_shape(), node->output_dtype())};
    value_lines(node->output(), Tensor(), false, lines);
    if (node->released()) lines.push_back("(graph freed by backward)");
    nodes << "  n" << next_id << " [label=\"" << label(lines) << "\", shape=box, style=\""
          << (node->released() ? "filled,dashed" : "filled") << "\", fillcolor=\"#eeeeee\""
          << (is_root ? ", penwidth=2" : "") << "];\n";
    queue.push_back(node.get());
    return next_id++;
  };

  if (root.grad_fn())
    op_id(root.grad_fn(), true);
  else
    leaf_id(root.impl_ptr(), true);

  while (!queue.empty()) {
    const Node* node = queue.front();
    queue.pop_front();
    const int consumer = ids.at(node);
    const std::vector<std::optional<Shape>> shapes = node->input_shapes();
    const std::size_t arity = std::max(shapes.size(), node->inputs().size());
    // After a backward without retain_graph the edges are gone; the shapes remain but there is
    // nothing to connect, so a freed node is drawn alone.
    const bool edges_known = !node->released();
    for (std::size_t i = 0; edges_known && i < node->inputs().size(); ++i) {
      const Edge& edge = node->inputs()[i];
      int producer;
      bool constant = false;
      if (edge.node) {
        producer = op_id(edge.node, false);
      } else if (edge.leaf) {
        producer = leaf_id(edge.leaf, false);
      } else {
        // An input that needs no gradient: no Edge, only its shape (or an undefined Tensor).
        if (!options.constants || i >= shapes.size() || !shapes[i]) continue;
        producer = next_id++;
        nodes << "  n" << producer << " [label=\"" << label({"no grad", shape_str(*shapes[i])})
              << "\", shape=note, style=dashed, fontcolor=\"#666666\", color=\"#999999\"];\n";
        constant = true;
      }
      // Edges into an op with several inputs carry the input's position (matmul's 0 and 1).
      std::string attributes = arity > 1 ? "label=\"" + std::to_string(i) + "\"" : "";
      if (constant)
        attributes +=
            std::string(attributes.empty() ? "" : ", ") + "style=dashed, color=\"#999999\"";
      edges << "  n" << producer << " -> n" << consumer;
      if (!attributes.empty()) edges << " [" << attributes << "]";
      edges << ";\n";
    }
  }

  std::ostringstream out;
  out << "digraph ag {\n";
  out << "  // Made by ag::to_dot: boxes are ops (name, output shape, dtype), ellipses leaves,\n"
         "  // dashed notes inputs that need no gradient; edges run from inputs to the op using "
         "them.\n";
  out << "  graph [rankdir=TB];\n";
  out << "  node [fontname=\"Helvetica\", fontsize=10];\n";
  out << "  edge [fontname=\"Helvetica\", fontsize=9];\n";
  if (!options.title.empty())
    out << "  label=\"" << escape(options.title) << "\";\n  labelloc=t;\n";
  out << nodes.str() << edges.str() << "}\n";
  return out.str();
}

void write_dot(const std::string& path, const Tensor& root, const DotOptions& options) {
  const std::string text = to_dot(root, options);
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  if (!file)
    fail<IoError>("write_dot: cannot open '", path, "' for writing: ", std::strerror(errno));
  file << text;
  file.close();
  if (!file) fail<IoError>("write_dot: writing '", path, "' failed");
}

// ---- BackwardTraceGuard -------------------------------------------------------------------------

struct BackwardTraceGuard::State {
  std::ostream* out;
  LeafNames names;
  int64_t step = 0;
};

namespace {

// Pads `text` with spaces to `width` (at least two spaces after it), for the trace's columns.
std::string column(const std::string& text, std::size_t width) {
  return text.size() + 2 <= width ? text + std::string(width - text.size(), ' ') : text + "  ";
}

}  // namespace

BackwardTraceGuard::BackwardTraceGuard(std::ostream& out, TensorNames names)
    : state_(std::make_shared<State>(State{&out, LeafNames(names)})),
      observer_([state = state_](const Node& node, const Tensor& grad_output, const Grads& grads) {
        std::string shapes;
        const std::vector<std::optional<Shape>> inputs = node.input_shapes();
        for (std::size_t i = 0; i < inputs.size(); ++i)
          shapes += (i ? ", " : "") + (inputs[i] ? shape_str(*inputs[i]) : std::string("none"));
        shapes += " -> " + shape_str(node.output_shape());

        std::string sent;  // the gradient sent to each input
        for (std::size_t i = 0; i < node.inputs().size(); ++i) {
          const Edge& edge = node.inputs()[i];
          sent += (i ? ", [" : "[") + std::to_string(i) + "] ";
          if (!edge.needs_grad()) {
            sent += "-";
            continue;
          }
          sent += i < grads.size() && grads[i].defined() ? num(l2_norm(grads[i])) : "none";
          if (edge.leaf) {
            const std::string name = state->names.find(*edge.leaf);
            sent += " -> " + (name.empty() ? std::string("leaf") : name);
          }
        }
        char step[32];
        std::snprintf(step, sizeof step, "%5lld  ", static_cast<long long>(++state->step));
        *state->out << step << column(node.name(), 22) << column(shapes, 40)
                    << column(num(l2_norm(grad_output)), 12) << sent << "\n";
      }) {
  *state_->out << " step  " << column("op", 22) << column("input shapes -> output shape", 40)
               << column("|grad out|", 12) << "|grad in| per input (-: needs none)\n";
}

BackwardTraceGuard::~BackwardTraceGuard() { state_->out->flush(); }

}  // namespace ag
