// ag-attention-graph — looking inside the graph of one multi-head attention.
//
// Builds d2l's multi-head attention example (num_hiddens 100, 5 heads, batch 2, 4 queries, 6
// key-value pairs, valid_lens {3, 2}), runs one forward pass and writes the graph that produced
// the output in Graphviz's DOT language (ag::to_dot): every op with its output shape, the four
// projection weights by name, and the inputs that need no gradient.
//
// By default the layer runs d2l's composed code — transpose_qkv (reshape, permute, reshape), the
// batched matmul Q·Kᵀ, the division by √d, masked_softmax (masked_fill, softmax), the matmul with
// V, transpose_output — because that is what the d2l text describes; --fused shows instead the
// one scaled_dot_product_attention op that training uses (nn::fused_kernels(), nn/fused.h).
//
//   ag-attention-graph                               # writes attention.dot (composed path)
//   ag-attention-graph --fused --dot fused.dot       # the fused kernel instead
//   ag-attention-graph --png attention.png           # also renders it (needs Graphviz's dot)
//   ag-attention-graph --trace                       # prints backward step by step
//   ag-attention-graph --grads --values --dot -      # DOT with values and gradients on stdout
//
// --trace runs backward from the output with a fixed random upstream gradient (seeded) under an
// ag::BackwardTraceGuard: one line per op in the order backward visits it, so the chain rule can
// be followed from W_o back through transpose_output, the attention-weighted matmul,
// masked_softmax and Q·Kᵀ/√d to the three projections W_q, W_k, W_v; then the gradient norm of
// every parameter (nn::grad_norm_summary).
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>

#include "autograd/error.h"
#include "autograd/graph_tools.h"
#include "io/output_path.h"
#include "nn/nn.h"
#include "training/cli.h"

namespace {

// Pipes `dot_text` through Graphviz's `dot -Tpng` into `png_path`; throws ag::ExternalProgramError
// if dot is missing or fails.
void render_png(const std::string& dot_text, const std::string& png_path) {
  if (std::system("command -v dot >/dev/null 2>&1") != 0)
    throw ag::ExternalProgramError(
        "--png needs Graphviz's dot, which is not installed (Debian: apt-get install graphviz)");
  std::string quoted = "'";  // the path in single quotes for the shell, ' written as '\''
  for (char c : png_path) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  quoted += "'";
  // A dot that exits before reading everything must be an error to report, not a SIGPIPE that
  // kills this program: the write then fails with EPIPE instead, and pclose says dot failed.
  struct sigaction ignore {
  }, previous{};
  ignore.sa_handler = SIG_IGN;
  sigaction(SIGPIPE, &ignore, &previous);
  FILE* pipe = popen(("dot -Tpng -o " + quoted).c_str(), "w");
  bool written = false;
  int status = -1;
  if (pipe) {
    written = std::fwrite(dot_text.data(), 1, dot_text.size(), pipe) == dot_text.size();
    status = pclose(pipe);
  }
  sigaction(SIGPIPE, &previous, nullptr);
  if (!pipe) throw ag::ExternalProgramError("could not run dot");
  if (status != 0 || !written)
    throw ag::ExternalProgramError("dot -Tpng failed to write '" + png_path + "'");
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "Writes the autograd graph of one d2l multi-head attention forward pass as Graphviz DOT"};
  std::string dot_path = "attention.dot", png_path;
  bool fused = false, composed = false, trace = false, values = false, grads = false;
  uint64_t seed = 0;
  app.add_option("--dot", dot_path, "where to write the DOT text ('-': standard output)")
      ->capture_default_str();
  app.add_option("--png", png_path, "also render the graph to this PNG with Graphviz's dot -Tpng");
  auto* fused_flag =
      app.add_flag("--fused", fused, "use the fused scaled_dot_product_attention kernel");
  app.add_flag("--composed", composed, "use d2l's composed ops (the default)")
      ->excludes(fused_flag);
  app.add_flag("--trace", trace, "run backward and print each op as backward visits it");
  app.add_flag("--values", values, "show the values of leaves and live op outputs in the graph");
  app.add_flag(
      "--grads", grads, "run backward first and show the parameters' gradients in the graph");
  ag::training::add_whole_number(
      app, "--seed", seed, "seed of the weights, inputs and upstream gradient");
  return ag::training::run_main("ag-attention-graph", app, argc, argv, [&] {
    // The outputs, checked before anything runs (io/output_path.h).
    for (const auto& [option, path] : {std::pair{"--dot", dot_path}, std::pair{"--png", png_path}})
      if (!path.empty() && path != "-")
        if (const std::string why = ag::output_file_problem(path); !why.empty())
          throw ag::training::UsageError(std::string(option) + " " + path + ": " + why);
    // With --dot - the graph goes to stdout, so everything else goes to stderr.
    std::ostream& info = dot_path == "-" ? std::cerr : std::cout;
    ag::manual_seed(seed);
    ag::nn::FusedKernelsGuard path(fused);
    info << (fused ? "path: fused — the heads run in one scaled_dot_product_attention op (what "
                     "training uses)\n"
                   : "path: composed — d2l's code op by op (transpose_qkv, Q·Kᵀ/√d, "
                     "masked_softmax, the matmul "
                     "with V, transpose_output); the default here because it is what the d2l text "
                     "describes. "
                     "--fused shows the single fused op instead.\n");

    // d2l: MultiHeadAttention(num_hiddens, num_hiddens, num_hiddens, num_hiddens, num_heads, 0.5);
    // eval()
    const int64_t num_hiddens = 100, num_heads = 5, batch_size = 2, num_queries = 4,
                  num_kvpairs = 6;
    ag::nn::MultiHeadAttention attention(
        num_hiddens, num_hiddens, num_hiddens, num_hiddens, num_heads, 0.5);
    attention.eval();  // as d2l: no dropout, so the graph has none
    info << ag::nn::summary(attention) << "\n";

    // Random inputs rather than d2l's torch.ones: with identical keys every attention weight is
    // equal and the gradient through softmax is exactly zero, which would make the trace dull.
    ag::Generator generator(seed + 1);
    ag::Tensor X =
        ag::randn({batch_size, num_queries, num_hiddens}, generator);  // queries (B, Q, D)
    ag::Tensor Y =
        ag::randn({batch_size, num_kvpairs, num_hiddens}, generator);  // keys = values (B, K, D)
    ag::Tensor valid_lens = ag::tensor({3, 2});                        // (B,)
    ag::Tensor output = attention(X, Y, Y, valid_lens);                // (B, Q, D)
    info << "output shape: " << ag::shape_str(output.shape()) << "\n";

    if (trace || grads) {
      // A fixed random upstream gradient dLoss/dOutput, as if a loss sat on top. retain_graph
      // keeps the graph for the DOT text below.
      ag::Tensor upstream = ag::randn(output.shape(), generator);  // (B, Q, D)
      if (trace) {
        info << "\nbackward, step by step (upstream gradient: N(0, 1) of shape "
             << ag::shape_str(upstream.shape()) << "):\n";
        {
          ag::BackwardTraceGuard tracer(info, attention.named_parameters());
          output.backward(upstream, /*retain_graph=*/true);
        }
        if (!fused)
          info
              << "\nReading it against d2l's code (ops of the trace -> the line of d2l that "
                 "recorded them):\n"
                 "  matmul, permute -> W_o.weight   W_o(output_concat): a Linear is X · Wᵀ, the "
                 "permute is Wᵀ\n"
                 "  reshape, permute, reshape       transpose_output: the heads back into the "
                 "width\n"
                 "  matmul [10,4,6], [10,6,20]      torch.bmm(dropout(attention_weights), values)\n"
                 "  softmax, masked_fill            masked_softmax(scores, valid_lens)\n"
                 "  div_scalar, matmul, permute     torch.bmm(queries, keys.transpose(1, 2)) / "
                 "math.sqrt(d)\n"
                 "  reshape, permute, reshape,      transpose_qkv(self.W_v(values)), then the same "
                 "for the keys\n"
                 "  matmul, permute -> W_v.weight   and the queries: the gradient of each "
                 "projection weight\n"
                 "The inputs X and Y are data, not parameters: they need no gradient, so their "
                 "column shows \"-\".\n";
      } else {
        output.backward(upstream, /*retain_graph=*/true);
      }
      info << "\n" << ag::nn::grad_norm_summary(attention);
    }

    ag::DotOptions options;
    options.names = attention.named_parameters();
    options.values = values;
    options.grads = grads;
    options.title = std::string("d2l MultiHeadAttention, ") +
                    (fused ? "fused kernel" : "composed d2l ops") +
                    ": B=2, Q=4, K=6, D=100, H=5, valid_lens {3, 2}";
    const std::string dot_text = ag::to_dot(output, options);
    if (dot_path == "-") {
      std::cout << dot_text;
    } else {
      ag::write_dot(dot_path, output, options);
      info << "\nwrote " << dot_path << " (render it with: dot -Tpng " << dot_path
           << " -o attention.png)\n";
    }
    if (!png_path.empty()) {
      render_png(dot_text, png_path);
      info << "wrote " << png_path << "\n";
    }
    return 0;
  });
}
