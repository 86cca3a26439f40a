// The seed's self-attention example: X of ones (2, 4, 100), valid_lens [3, 2] -> (2, 4, 100),
// and the module prints exactly as PyTorch prints d2l's MultiHeadAttention(100, 100, 100, 100, 5,
// 0.5).
#include <catch2/catch.hpp>

#include "nn/nn.h"

using namespace ag;

TEST_CASE("the seed's self-attention example: print and output shape", "[nn][seed]") {
  nn::MultiHeadAttention attention(100, 100, 100, 100, 5, 0.5);
  attention.eval();
  CHECK(attention.repr() ==
        "MultiHeadAttention(\n"
        "  (attention): DotProductAttention(\n"
        "    (dropout): Dropout(p=0.5, inplace=False)\n"
        "  )\n"
        "  (W_q): Linear(in_features=100, out_features=100, bias=False)\n"
        "  (W_k): Linear(in_features=100, out_features=100, bias=False)\n"
        "  (W_v): Linear(in_features=100, out_features=100, bias=False)\n"
        "  (W_o): Linear(in_features=100, out_features=100, bias=False)\n"
        ")");
  Tensor X = ones({2, 4, 100});
  Tensor Y = attention(X, X, X, tensor({3, 2}));
  CHECK(Y.shape() == Shape{2, 4, 100});
}
