// The self-attention example of d2l.ai's multi-head attention section, in ag:
//
//   num_hiddens, num_heads = 100, 5
//   attention = d2l.MultiHeadAttention(num_hiddens, num_hiddens, num_hiddens,
//                                      num_hiddens, num_heads, 0.5)
//   attention.eval()
//   batch_size, num_queries, valid_lens = 2, 4, torch.tensor([3, 2])
//   X = torch.ones((batch_size, num_queries, num_hiddens))
//   attention(X, X, X, valid_lens).shape        # torch.Size([2, 4, 100])
//
// Self-attention: queries, keys and values are all the same X. It prints the module (the same
// text PyTorch prints), the output's shape, and the attention weights of head 0 for batch row 1,
// whose valid length 2 masks keys 2 and 3.
//
//   ag-self-attention          (no options; --help says what it prints)
#include <iostream>

#include "nn/nn.h"
#include "training/cli.h"

int main(int argc, char** argv) {
  CLI::App app{
      "ag-self-attention: d2l's self-attention example. Prints a MultiHeadAttention (100 wide,\n"
      "5 heads), the output shape of attention(X, X, X, valid_lens {3, 2}) and head 0's weights\n"
      "for batch row 1. It takes no options."};
  return ag::training::run_main("ag-self-attention", app, argc, argv, [] {
    ag::manual_seed(0);
    const int64_t num_hiddens = 100, num_heads = 5;
    ag::nn::MultiHeadAttention attention(
        num_hiddens, num_hiddens, num_hiddens, num_hiddens, num_heads, 0.5);
    attention.eval();
    std::cout << attention << "\n";

    const int64_t batch_size = 2, num_queries = 4;
    ag::Tensor valid_lens = ag::tensor({3, 2});                       // (B,)
    ag::Tensor X = ag::ones({batch_size, num_queries, num_hiddens});  // (B, Q, D)
    ag::Tensor Y = attention(X, X, X, valid_lens);                    // (B, Q, D)
    std::cout << "output shape: " << ag::shape_str(Y.shape()) << "\n";

    // (B, H, Q, K) -> batch row 1, head 0: (Q, K)
    std::cout << "attention weights, batch row 1, head 0:\n"
              << attention.attention_weights().select(0, 1).select(0, 0) << "\n";
    return 0;
  });
}
