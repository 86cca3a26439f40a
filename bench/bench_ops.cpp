// ag-bench-ops: every op of autograd/op_list.h, forward + backward, timed alone — the numbers that
// bench/bench_ops_torch.py measures for PyTorch on the same inputs, so that bench/compare_ops.sh
// can put the two side by side (docs/benchmarks.md, "Every op against PyTorch").
//
//   ag-bench-ops [--op NAME,...] [--size small,medium,large,BxTxD] [--threads 1,2] [--quick]
//                [--json] [--list]
//
// One call of a row is what a user's training step does with the op: the leaves' gradients
// dropped (zero_grad), the op's forward on fresh leaves that require grad, and backward of the
// sum of its output:
//   y = f(inputs)            // the row's call
//   y.sum().backward()       // the upstream gradient of y is all ones
// Multi-input ops take their natural inputs (kRows below): two tensors for binary ops, a weight
// (D, D) for matmul and linear, int64 targets for cross_entropy and indices for index_select and
// gather, q, k, v (B, H, T, d) for attention.
//
// Sizes are (B, T, D): the shape of the activations a Transformer's ops see, batch × sequence ×
// width. small (4, 8, 32) is a toy row where the per-call overhead shows; medium (32, 64, 512) the
// issue's size; large (32, 256, 512) four times its elements, over sequences of 256. Attention splits D into heads of
// d = 64 features (one head of d = D when D is not a multiple of 64).
//
// Inputs are the same numbers in ag and in PyTorch: element i of input stream s is built from
// splitmix64 hashes of (s, i) — a normal value ~N(0, 1) by Box–Muller, an index by a remainder —
// in double, rounded to float32 (normal(), below; bench_ops_torch.py computes the same with
// numpy). The magnitudes matter: erf and exp take longer on some ranges than others.
//
// Timing: one warm-up call; then samples, each a loop of calls lasting at least 10 ms (the call
// count is calibrated once), until --budget-ms (100) has passed and there are at least 3, at most
// 15 of them; the median time per call is reported. --quick: 2 ms samples, 20 ms, 3 to 5 of them
// (a smoke run, or a first look).
//
// --op takes row names (e.g. gelu, flash_attention:causal) or op names (all of that op's rows);
// --threads sets ag's threads (ag::set_num_threads). Before timing a row, the program checks that
// its call records a node of the row's op (so that, e.g., the flash_attention row really runs the
// tiled kernel); at start it checks that every op of op_list.h has a row: an op added to the list
// without a row here is an error, not a silent gap in the table.
// --json prints one JSON object per row, size and thread count on its own line; --list prints the
// row names, one a line, and exits.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "autograd/autograd.h"
#include "autograd/error.h"
#include "autograd/generator.h"
#include "autograd/op_list.h"
#include "autograd/ops.h"
#include "main_catching.h"

namespace {

using namespace ag;
using Clock = std::chrono::steady_clock;

// ---- sizes --------------------------------------------------------------------------------------

struct Size {
  std::string name;  // small, medium, large, or BxTxD as given
  int64_t B, T, D;
  // Attention's heads: d = 64 features each where D is a multiple of 64, else one head of D.
  int64_t head_dim() const { return D % 64 == 0 ? 64 : D; }
  int64_t heads() const { return D / head_dim(); }
  std::string shape() const {
    return std::to_string(B) + "x" + std::to_string(T) + "x" + std::to_string(D);
  }
};

Size parse_size(const std::string& text) {
  if (text == "small") return {"small", 4, 8, 32};
  if (text == "medium") return {"medium", 32, 64, 512};
  if (text == "large") return {"large", 32, 256, 512};
  long long B = 0, T = 0, D = 0;
  char tail = 0;
  if (std::sscanf(text.c_str(), "%lldx%lldx%lld%c", &B, &T, &D, &tail) != 3 || B < 1 || T < 1 ||
      D < 2 || D % 2 != 0)
    fail<ValueError>("--size '", text,
        "': expected small, medium, large or BxTxD with B, T >= 1 and an even D >= 2 (rotary "
        "embedding turns pairs of features)");
  return {text, B, T, D};
}

// ---- inputs: the same numbers as bench_ops_torch.py's ---------------------------------------------

// splitmix64's output function (Steele, Lea and Flood 2014): a 64-bit hash of a 64-bit key.
uint64_t splitmix64(uint64_t key) {
  uint64_t z = key + 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
// The key of element i of stream s.
uint64_t key_of(uint64_t stream, uint64_t i) { return (stream << 40) + i; }
// A uniform number in (0, 1) from the top 53 bits of a hash.
double uniform_of(uint64_t hash) { return (static_cast<double>(hash >> 11) + 0.5) * 0x1p-53; }

int64_t numel_of(const Shape& shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

// Element i of stream s: Box–Muller on the uniforms of keys 2i and 2i + 1,
//   z = √(−2 ln u₁) · cos(2π u₂) ~ N(0, 1),
// computed in double and rounded to float32; a leaf that requires grad.
Tensor normal(const Shape& shape, uint64_t stream) {
  std::vector<float> values(static_cast<size_t>(numel_of(shape)));
  for (size_t i = 0; i < values.size(); ++i) {
    const double u1 = uniform_of(splitmix64(key_of(stream, 2 * i)));
    const double u2 = uniform_of(splitmix64(key_of(stream, 2 * i + 1)));
    values[i] = static_cast<float>(std::sqrt(-2 * std::log(u1)) * std::cos(2 * M_PI * u2));
  }
  Tensor t = tensor(values, shape);
  t.requires_grad_();
  return t;
}
// |z| + 0.1 for the ops defined on positive numbers (log, sqrt, rsqrt, 1.5 / x).
Tensor positive(const Shape& shape, uint64_t stream) {
  Tensor t = add(abs(normal(shape, stream).detach()), 0.1);
  t.requires_grad_();
  return t;
}
// int64 indices in [0, high): the hash of element i's key modulo high.
Tensor indices(const Shape& shape, int64_t high, uint64_t stream) {
  std::vector<int64_t> values(static_cast<size_t>(numel_of(shape)));
  for (size_t i = 0; i < values.size(); ++i)
    values[i] = static_cast<int64_t>(splitmix64(key_of(stream, i)) % static_cast<uint64_t>(high));
  return tensor(values, shape);
}
// A bool mask, true where the normal value of stream s is positive (about half the elements).
Tensor mask(const Shape& shape, uint64_t stream) { return gt(normal(shape, stream).detach(), 0.0); }
// Rotary embedding's tables (T, d/2): cos and sin of θ_{t,j} = t · 10000^(−2j/d), in double,
// rounded to float32 (Llama's precompute_freqs_cis).
Tensor rotary_table(int64_t T, int64_t d, bool sine) {
  std::vector<float> values(static_cast<size_t>(T * (d / 2)));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = 0; j < d / 2; ++j) {
      const double theta = static_cast<double>(t) * std::pow(10000.0, -2.0 * j / d);
      values[t * (d / 2) + j] = static_cast<float>(sine ? std::sin(theta) : std::cos(theta));
    }
  return tensor(values, {T, d / 2});
}

// ---- the rows: one per op, and one per internal variant ----------------------------------------

using Inputs = std::vector<Tensor>;
struct Row {
  std::string name;  // the op's name, or op:variant
  Op op;             // the op of op_list.h it measures: its call must record a node of it
  std::function<Inputs(const Size&)> inputs;  // leaves (requires grad) and constants
  // y = f(inputs), whose sum the timing loop backpropagates: y.sum().backward()
  std::function<Tensor(const Inputs& in, const Size& s)> call;
};

// x (B, T, D) ~ N(0, 1), the input of most rows.
Inputs x_of(const Size& s) { return {normal({s.B, s.T, s.D}, 1)}; }
Inputs positive_x_of(const Size& s) { return {positive({s.B, s.T, s.D}, 1)}; }
Inputs a_b_of(const Size& s) { return {normal({s.B, s.T, s.D}, 1), normal({s.B, s.T, s.D}, 2)}; }
// x (B, T, D), weight (D, D) and bias (D) of a Linear from D to D features.
Inputs x_w_b_of(const Size& s) {
  return {normal({s.B, s.T, s.D}, 1), normal({s.D, s.D}, 2), normal({s.D}, 3)};
}
// q, k, v (B, H, T, d).
Inputs q_k_v_of(const Size& s) {
  const Shape heads{s.B, s.heads(), s.T, s.head_dim()};
  return {normal(heads, 1), normal(heads, 2), normal(heads, 3)};
}
Tensor attention_on(const Inputs& in, AttentionKernel kernel, bool is_causal) {
  AttentionKernelGuard forced(kernel);
  return attention(in[0], in[1], in[2], {.is_causal = is_causal});
}

// Each row's PyTorch side is the row of the same name in bench_ops_torch.py.
const std::vector<Row>& rows() {
  static const std::vector<Row> kRows = {
      // elementwise, broadcasting (ops_elementwise.cpp)
      {"add", Op::add, a_b_of, [](const Inputs& in, const Size&) { return add(in[0], in[1]); }},
      {"sub", Op::sub, a_b_of, [](const Inputs& in, const Size&) { return sub(in[0], in[1]); }},
      {"mul", Op::mul, a_b_of, [](const Inputs& in, const Size&) { return mul(in[0], in[1]); }},
      {"div", Op::div,
          [](const Size& s) {
            return Inputs{normal({s.B, s.T, s.D}, 1), positive({s.B, s.T, s.D}, 2)};
          },
          [](const Inputs& in, const Size&) { return div(in[0], in[1]); }},
      {"add_scalar", Op::add_scalar, x_of,
          [](const Inputs& in, const Size&) { return add(in[0], 1.5); }},
      {"mul_scalar", Op::mul_scalar, x_of,
          [](const Inputs& in, const Size&) { return mul(in[0], 1.5); }},
      {"div_scalar", Op::div_scalar, x_of,
          [](const Inputs& in, const Size&) { return div(in[0], 1.5); }},
      {"rdiv_scalar", Op::rdiv_scalar, positive_x_of,
          [](const Inputs& in, const Size&) { return div(1.5, in[0]); }},
      {"neg", Op::neg, x_of, [](const Inputs& in, const Size&) { return neg(in[0]); }},
      {"pow", Op::pow, x_of, [](const Inputs& in, const Size&) { return pow(in[0], 2.0); }},
      {"exp", Op::exp, x_of, [](const Inputs& in, const Size&) { return exp(in[0]); }},
      {"log", Op::log, positive_x_of, [](const Inputs& in, const Size&) { return log(in[0]); }},
      {"sqrt", Op::sqrt, positive_x_of, [](const Inputs& in, const Size&) { return sqrt(in[0]); }},
      {"tanh", Op::tanh, x_of, [](const Inputs& in, const Size&) { return tanh(in[0]); }},
      {"sigmoid", Op::sigmoid, x_of, [](const Inputs& in, const Size&) { return sigmoid(in[0]); }},
      {"relu", Op::relu, x_of, [](const Inputs& in, const Size&) { return relu(in[0]); }},
      {"gelu", Op::gelu, x_of, [](const Inputs& in, const Size&) { return gelu(in[0]); }},
      {"where", Op::where,
          [](const Size& s) {
            return Inputs{
                normal({s.B, s.T, s.D}, 1), normal({s.B, s.T, s.D}, 2), mask({s.B, s.T, s.D}, 3)};
          },
          [](const Inputs& in, const Size&) { return where(in[2], in[0], in[1]); }},
      {"masked_fill", Op::masked_fill,
          [](const Size& s) {
            return Inputs{normal({s.B, s.T, s.D}, 1), mask({s.B, s.T, s.D}, 3)};
          },
          [](const Inputs& in, const Size&) { return masked_fill(in[0], in[1], 0.0); }},
      {"gelu_tanh", Op::gelu_tanh, x_of,
          [](const Inputs& in, const Size&) { return gelu(in[0], "tanh"); }},
      {"silu", Op::silu, x_of, [](const Inputs& in, const Size&) { return silu(in[0]); }},
      {"abs", Op::abs, x_of, [](const Inputs& in, const Size&) { return abs(in[0]); }},
      {"sin", Op::sin, x_of, [](const Inputs& in, const Size&) { return sin(in[0]); }},
      {"cos", Op::cos, x_of, [](const Inputs& in, const Size&) { return cos(in[0]); }},
      {"erf", Op::erf, x_of, [](const Inputs& in, const Size&) { return erf(in[0]); }},
      {"rsqrt", Op::rsqrt, positive_x_of,
          [](const Inputs& in, const Size&) { return rsqrt(in[0]); }},
      {"maximum", Op::maximum, a_b_of,
          [](const Inputs& in, const Size&) { return maximum(in[0], in[1]); }},
      {"minimum", Op::minimum, a_b_of,
          [](const Inputs& in, const Size&) { return minimum(in[0], in[1]); }},
      {"clamp", Op::clamp, x_of,
          [](const Inputs& in, const Size&) { return clamp(in[0], -0.5, 0.5); }},
      // reductions over the last dim (ops_reduce.cpp)
      {"sum", Op::sum, x_of, [](const Inputs& in, const Size&) { return sum(in[0], -1); }},
      {"mean", Op::mean, x_of, [](const Inputs& in, const Size&) { return mean(in[0], -1); }},
      {"max", Op::max, x_of,
          [](const Inputs& in, const Size&) { return max(in[0], {-1}); }},  // torch.amax
      {"var", Op::var, x_of, [](const Inputs& in, const Size&) { return var(in[0], Shape{-1}); }},
      // softmax over the last dim (ops_softmax.cpp)
      {"softmax", Op::softmax, x_of,
          [](const Inputs& in, const Size&) { return softmax(in[0], -1); }},
      {"log_softmax", Op::log_softmax, x_of,
          [](const Inputs& in, const Size&) { return log_softmax(in[0], -1); }},
      // scores (B, T, D) of T queries over D keys, the first L_b of each batch row valid, L_b in
      // [D/2, D]: d2l's masked softmax
      {"length_masked_softmax", Op::length_masked_softmax,
          [](const Size& s) {
            return Inputs{normal({s.B, s.T, s.D}, 1), add(indices({s.B}, s.D / 2 + 1, 4), s.D / 2)};
          },
          [](const Inputs& in, const Size&) { return length_masked_softmax(in[0], in[1]); }},
      // normalisation over the last dim (ops_norm.cpp): weight ~ N(0, 1) and bias ~ N(0, 1) (D)
      {"layer_norm", Op::layer_norm,
          [](const Size& s) {
            return Inputs{normal({s.B, s.T, s.D}, 1), normal({s.D}, 2), normal({s.D}, 3)};
          },
          [](const Inputs& in, const Size&) {
            return layer_norm(in[0], {in[0].size(-1)}, in[1], in[2]);
          }},
      // d2l's AddNorm: layer_norm(x + dropout(y, 0.1)), in training
      {"dropout_add_layer_norm", Op::dropout_add_layer_norm,
          [](const Size& s) {
            return Inputs{normal({s.B, s.T, s.D}, 1), normal({s.B, s.T, s.D}, 4), normal({s.D}, 2),
                normal({s.D}, 3)};
          },
          [](const Inputs& in, const Size&) {
            return dropout_add_layer_norm(
                in[0], in[1], {in[0].size(-1)}, in[2], in[3], 1e-5, 0.1, true, default_generator());
          }},
      {"rms_norm", Op::rms_norm,
          [](const Size& s) {
            return Inputs{normal({s.B, s.T, s.D}, 1), normal({s.D}, 2)};
          },
          [](const Inputs& in, const Size&) { return rms_norm(in[0], {in[0].size(-1)}, in[1]); }},
      // losses (ops_loss.cpp): logits (B·T, D) over D classes, targets (B·T) int64, the mean
      {"cross_entropy", Op::cross_entropy,
          [](const Size& s) {
            return Inputs{normal({s.B * s.T, s.D}, 1), indices({s.B * s.T}, s.D, 4)};
          },
          [](const Inputs& in, const Size&) { return cross_entropy(in[0], in[1]); }},
      // matrix product (ops_matmul.cpp): (B, T, D) · (D, D)
      {"matmul", Op::matmul,
          [](const Size& s) {
            return Inputs{normal({s.B, s.T, s.D}, 1), normal({s.D, s.D}, 2)};
          },
          [](const Inputs& in, const Size&) { return matmul(in[0], in[1]); }},
      {"linear", Op::linear, x_w_b_of,
          [](const Inputs& in, const Size&) { return linear(in[0], in[1], in[2]); }},
      {"linear_relu", Op::linear_relu, x_w_b_of,
          [](const Inputs& in, const Size&) { return linear_relu(in[0], in[1], in[2]); }},
      // shape and indexing (ops_shape.cpp)
      {"reshape", Op::reshape, x_of,
          [](const Inputs& in, const Size&) {
            return reshape(in[0], {-1, in[0].size(-1)});
          }},
      {"permute", Op::permute, x_of,
          [](const Inputs& in, const Size&) {
            return permute(in[0], {0, 2, 1});
          }},
      {"squeeze", Op::squeeze,
          [](const Size& s) {
            return Inputs{normal({s.B, 1, s.T, s.D}, 1)};
          },
          [](const Inputs& in, const Size&) { return squeeze(in[0], 1); }},
      {"unsqueeze", Op::unsqueeze, x_of,
          [](const Inputs& in, const Size&) { return unsqueeze(in[0], 1); }},
      // (B, 1, D) -> (B, T, D)
      {"expand", Op::expand,
          [](const Size& s) {
            return Inputs{normal({s.B, 1, s.D}, 1)};
          },
          [](const Inputs& in, const Size& s) {
            return expand(in[0], {s.B, s.T, s.D});
          }},
      // the first half of the features, x[..., :D/2]
      {"slice", Op::slice, x_of,
          [](const Inputs& in, const Size&) { return slice(in[0], -1, 0, in[0].size(-1) / 2); }},
      {"concat", Op::concat, a_b_of,
          [](const Inputs& in, const Size&) {
            return concat({in[0], in[1]}, -1);
          }},
      // an embedding lookup: B·T rows of a table (B·T, D), by int64 ids
      {"index_select", Op::index_select,
          [](const Size& s) {
            return Inputs{normal({s.B * s.T, s.D}, 1), indices({s.B * s.T}, s.B * s.T, 4)};
          },
          [](const Inputs& in, const Size&) { return index_select(in[0], 0, in[1]); }},
      // each time step twice: (B, T, D) -> (B, 2T, D)
      {"repeat_interleave", Op::repeat_interleave, x_of,
          [](const Inputs& in, const Size&) { return repeat_interleave(in[0], 2, 1); }},
      // the row-major copy of a transposed x: x.transpose(1, 2).contiguous()
      {"contiguous", Op::contiguous, x_of,
          [](const Inputs& in, const Size&) { return contiguous(transpose(in[0], 1, 2)); }},
      {"clone", Op::clone, x_of, [](const Inputs& in, const Size&) { return clone(in[0]); }},
      {"to", Op::to, x_of, [](const Inputs& in, const Size&) { return in[0].to(float64); }},
      // gathering, cumulative sums (ops_index.cpp)
      {"gather", Op::gather,
          [](const Size& s) {
            return Inputs{normal({s.B, s.T, s.D}, 1), indices({s.B, s.T, s.D}, s.D, 4)};
          },
          [](const Inputs& in, const Size&) { return gather(in[0], -1, in[1]); }},
      {"cumsum", Op::cumsum, x_of, [](const Inputs& in, const Size&) { return cumsum(in[0], -1); }},
      // the D/8 largest of each row
      {"topk", Op::topk, x_of,
          [](const Inputs& in, const Size&) {
            return topk(in[0], std::max<int64_t>(1, in[0].size(-1) / 8), -1).values;
          }},
      // random (ops_random.cpp)
      {"dropout", Op::dropout, x_of,
          [](const Inputs& in, const Size&) { return dropout(in[0], 0.1, true); }},
      // rotary position embedding (ops_rotary.cpp): x (B, T, H, d), as a projection makes it,
      // turned on its head view (B, H, T, d) with interleaved pairs (Llama's)
      {"rotary_embedding", Op::rotary_embedding,
          [](const Size& s) {
            return Inputs{normal({s.B, s.T, s.heads(), s.head_dim()}, 1),
                rotary_table(s.T, s.head_dim(), false), rotary_table(s.T, s.head_dim(), true)};
          },
          [](const Inputs& in, const Size&) {
            return rotary_embedding(permute(in[0], {0, 2, 1, 3}), in[1], in[2]);
          }},
      // ag::attention's two kernels, forced, without and with a causal mask
      {"scaled_dot_product_attention", Op::scaled_dot_product_attention, q_k_v_of,
          [](const Inputs& in, const Size&) {
            return attention_on(in, AttentionKernel::whole_rows, false);
          }},
      {"scaled_dot_product_attention:causal", Op::scaled_dot_product_attention, q_k_v_of,
          [](const Inputs& in, const Size&) {
            return attention_on(in, AttentionKernel::whole_rows, true);
          }},
      {"flash_attention", Op::flash_attention, q_k_v_of,
          [](const Inputs& in, const Size&) {
            return attention_on(in, AttentionKernel::tiled, false);
          }},
      {"flash_attention:causal", Op::flash_attention, q_k_v_of,
          [](const Inputs& in, const Size&) {
            return attention_on(in, AttentionKernel::tiled, true);
          }},
  };
  return kRows;
}

// Every op of op_list.h has a row, every row name is unique: otherwise the table would silently
// miss an op (a std::logic_error: the program's own mistake, not the user's).
void check_rows_cover_op_list() {
  std::set<std::string> names;
  for (const Row& row : rows())
    if (!names.insert(row.name).second)
      throw std::logic_error("two rows are named '" + row.name + "'");
  std::vector<std::string> missing;
  for (int i = 0; i < kNumOps; ++i) {
    const bool covered = std::any_of(rows().begin(), rows().end(),
        [i](const Row& row) { return static_cast<int>(row.op) == i; });
    if (!covered) missing.push_back(kOpNames[i]);
  }
  if (!missing.empty()) {
    std::string list;
    for (const std::string& name : missing) list += (list.empty() ? "" : ", ") + name;
    throw std::logic_error(
        "no row in bench/bench_ops.cpp (and bench/bench_ops_torch.py) for the "
        "op(s) of autograd/op_list.h: " +
        list);
  }
}

// Whether the graph of y holds a node of `op`: a walk over grad_fn and the nodes' input edges.
bool records(const Tensor& y, Op op) {
  std::vector<std::shared_ptr<Node>> stack;
  std::set<const Node*> seen;
  if (y.grad_fn()) stack.push_back(y.grad_fn());
  while (!stack.empty()) {
    std::shared_ptr<Node> node = stack.back();
    stack.pop_back();
    if (!seen.insert(node.get()).second) continue;
    if (node->op() == op) return true;
    for (const Edge& edge : node->inputs())
      if (edge.node) stack.push_back(edge.node);
  }
  return false;
}

// ---- timing -------------------------------------------------------------------------------------

struct Settings {
  double sample_seconds;  // each timed loop of calls lasts at least this long
  double budget_seconds;  // samples are taken until this much time has passed ...
  int min_samples;        // ... and there are at least this many
  int max_samples;        // (but no more than this many)
  int warmup_calls;       // untimed calls first
};
constexpr Settings kFull{0.010, 0.10, 3, 15, 1};
constexpr Settings kQuick{0.002, 0.02, 3, 5, 1};

volatile float g_sink = 0;  // keeps every result observable

struct Timing {
  int calls_per_sample = 1;
  std::vector<double> sample_ms;  // per call, one per sample
  double median_ms = 0;
};

Timing time_row(const Row& row, const Size& size, const Settings& settings) {
  const Inputs in = row.inputs(size);
  std::vector<Tensor> leaves;
  for (const Tensor& t : in)
    if (t.requires_grad()) leaves.push_back(t);
  auto one_call = [&]() {
    for (const Tensor& leaf : leaves) leaf.zero_grad();
    Tensor y = row.call(in, size);
    y.sum().backward();
    g_sink = g_sink + leaves[0].grad().data<float>()[0];
  };
  // Check, untimed, that the row measures its op.
  {
    Tensor y = row.call(in, size);
    if (!records(y, row.op))
      throw std::logic_error("row '" + row.name + "' records no " + op_name(row.op) + " node");
  }
  for (int i = 0; i < settings.warmup_calls; ++i) one_call();
  auto seconds_of = [&](int calls) {
    const auto start = Clock::now();
    for (int i = 0; i < calls; ++i) one_call();
    return std::chrono::duration<double>(Clock::now() - start).count();
  };
  Timing timing;
  // Calibrate: double the calls until one loop lasts sample_seconds (that loop is a sample).
  double first = seconds_of(1);
  while (first < settings.sample_seconds) {
    timing.calls_per_sample *= 2;
    first = seconds_of(timing.calls_per_sample);
  }
  timing.sample_ms.push_back(1e3 * first / timing.calls_per_sample);
  double spent = first;
  while (static_cast<int>(timing.sample_ms.size()) < settings.max_samples &&
         (spent < settings.budget_seconds ||
             static_cast<int>(timing.sample_ms.size()) < settings.min_samples)) {
    const double t = seconds_of(timing.calls_per_sample);
    timing.sample_ms.push_back(1e3 * t / timing.calls_per_sample);
    spent += t;
  }
  std::vector<double> sorted = timing.sample_ms;
  std::sort(sorted.begin(), sorted.end());
  const size_t n = sorted.size();
  timing.median_ms = n % 2 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
  return timing;
}

// ---- the command line ---------------------------------------------------------------------------

std::vector<std::string> split_commas(const std::string& text) {
  std::vector<std::string> parts;
  std::stringstream list(text);
  for (std::string part; std::getline(list, part, ',');)
    if (!part.empty()) parts.push_back(part);
  return parts;
}

// The rows --op names: a row's own name, or an op's name for all its rows.
std::vector<const Row*> selected_rows(const std::string& ops) {
  if (ops.empty()) {
    std::vector<const Row*> all;
    for (const Row& row : rows()) all.push_back(&row);
    return all;
  }
  std::vector<const Row*> picked;
  for (const std::string& name : split_commas(ops)) {
    bool found = false;
    for (const Row& row : rows())
      if (row.name == name || op_name(row.op) == name) {
        if (std::find(picked.begin(), picked.end(), &row) == picked.end()) picked.push_back(&row);
        found = true;
      }
    if (!found) fail<ValueError>("--op '", name, "' is no row or op (see --list)");
  }
  return picked;
}

int run(int argc, char** argv) {
  std::string ops, sizes = "small,medium,large", threads = "1";
  bool quick = false, json = false, list = false;
  Settings settings = kFull;
  CLI::App app{
      "ag-bench-ops: every op of autograd/op_list.h, forward + backward of f(x).sum(), "
      "timed (see docs/benchmarks.md, \"Every op against PyTorch\")"};
  app.add_option("--op", ops, "rows or ops to time, comma-separated (default: all; see --list)");
  app.add_option("--size", sizes, "small, medium, large or BxTxD, comma-separated")
      ->capture_default_str();
  app.add_option("--threads", threads, "ag's thread counts, comma-separated")
      ->capture_default_str();
  app.add_flag("--quick", quick, "short samples, few of them (a smoke run)");
  double budget_ms = 0;
  app.add_option("--budget-ms", budget_ms,
         "time spent sampling each row at each size and thread count (default 100, --quick 20)")
      ->check(CLI::PositiveNumber);
  app.add_flag("--json", json, "one JSON object per row, size and thread count, a line each");
  app.add_flag("--list", list, "print the row names and exit");
  CLI11_PARSE(app, argc, argv);

  check_rows_cover_op_list();
  if (list) {
    for (const Row& row : rows()) std::printf("%s\n", row.name.c_str());
    return 0;
  }
  if (quick) settings = kQuick;
  if (budget_ms > 0) settings.budget_seconds = budget_ms / 1e3;
  const std::vector<const Row*> picked = selected_rows(ops);
  std::vector<Size> size_list;
  for (const std::string& s : split_commas(sizes)) size_list.push_back(parse_size(s));
  std::vector<int> thread_counts;
  for (const std::string& t : split_commas(threads)) {
    char* end = nullptr;
    const long n = std::strtol(t.c_str(), &end, 10);
    if (*end != '\0' || n < 1 || n > max_num_threads())
      fail<ValueError>("--threads '", t, "': expected a count in [1, ", max_num_threads(), "]");
    thread_counts.push_back(static_cast<int>(n));
  }
  if (size_list.empty() || thread_counts.empty())
    fail<ValueError>("--size and --threads need at least one value each");

  if (!json)
    std::printf(
        "%-38s %-8s %-12s %3s %10s %8s\n", "row", "size", "shape", "thr", "ms/call", "samples");
  for (int thread_count : thread_counts) {
    set_num_threads(thread_count);
    for (const Size& size : size_list)
      for (const Row* row : picked) {
        const Timing t = time_row(*row, size, settings);
        if (json) {
          std::printf(
              "{\"impl\": \"ag\", \"name\": \"%s\", \"op\": \"%s\", \"size\": \"%s\", "
              "\"shape\": \"%s\", \"threads\": %d, \"median_ms\": %.6g, "
              "\"calls_per_sample\": %d, \"samples_ms\": [",
              row->name.c_str(), op_name(row->op), size.name.c_str(), size.shape().c_str(),
              thread_count, t.median_ms, t.calls_per_sample);
          for (size_t i = 0; i < t.sample_ms.size(); ++i)
            std::printf("%s%.6g", i ? ", " : "", t.sample_ms[i]);
          std::printf("]}\n");
        } else {
          std::printf("%-38s %-8s %-12s %3d %10.4f %8zu\n", row->name.c_str(), size.name.c_str(),
              size.shape().c_str(), thread_count, t.median_ms, t.sample_ms.size());
        }
        std::fflush(stdout);
      }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return bench::main_catching("ag-bench-ops", run, argc, argv); }
