"""The seed's own code written over ag, once for the tests that run it (test_ops.py,
test_python_module.py, test_seed.py), and PyTorch's repr of its MultiHeadAttention, read from the
fixture that tests/fixtures/make_python_fixtures.py made with PyTorch.

The seed (d2l.ai's chapter) writes these with torch and d2l; here they are the same lines with
torch → ag and d2l → ag.nn. (The notebook docs/notebooks/attention.ipynb writes them out again,
on purpose: it is the chapter to read.)"""

import json
import os
import pathlib

import ag
from ag import nn

FIXTURES = pathlib.Path(os.environ["AG_SOURCE_DIR"]) / "tests" / "fixtures" / "python"

# What PyTorch 1.13 prints for the seed's MultiHeadAttention(100, 100, 100, 100, 5, 0.5).
MHA_REPR = json.loads((FIXTURES / "seed.json").read_text())["repr"][
    "MultiHeadAttention(100, 100, 100, 100, 5, 0.5)"]


def transpose_qkv(X, num_heads):
    """为了多注意力头的并行计算而变换形状 (d2l's transpose_qkv)."""
    # X: (batch_size, queries or key-value pairs, num_hiddens)
    X = X.reshape(X.shape[0], X.shape[1], num_heads, -1)
    # (batch_size, queries or pairs, num_heads, num_hiddens / num_heads)
    X = X.permute(0, 2, 1, 3)
    # (batch_size * num_heads, queries or pairs, num_hiddens / num_heads)
    return X.reshape(-1, X.shape[2], X.shape[3])


def transpose_output(X, num_heads):
    """逆转transpose_qkv函数的操作 (d2l's transpose_output)."""
    X = X.reshape(-1, num_heads, X.shape[1], X.shape[2])
    X = X.permute(0, 2, 1, 3)
    return X.reshape(X.shape[0], X.shape[1], -1)


class MultiHeadAttention(nn.Module):
    """多头注意力 — the seed's class, word for word, with d2l → ag.nn and torch → ag."""

    def __init__(self, key_size, query_size, value_size, num_hiddens, num_heads, dropout, bias=False, **kwargs):
        super(MultiHeadAttention, self).__init__(**kwargs)
        self.num_heads = num_heads
        self.attention = nn.DotProductAttention(dropout)
        self.W_q = nn.Linear(query_size, num_hiddens, bias=bias)
        self.W_k = nn.Linear(key_size, num_hiddens, bias=bias)
        self.W_v = nn.Linear(value_size, num_hiddens, bias=bias)
        self.W_o = nn.Linear(num_hiddens, num_hiddens, bias=bias)

    def forward(self, queries, keys, values, valid_lens):
        queries = transpose_qkv(self.W_q(queries), self.num_heads)
        keys = transpose_qkv(self.W_k(keys), self.num_heads)
        values = transpose_qkv(self.W_v(values), self.num_heads)
        if valid_lens is not None:
            valid_lens = ag.repeat_interleave(valid_lens, repeats=self.num_heads, dim=0)
        output = self.attention(queries, keys, values, valid_lens)
        output_concat = transpose_output(output, self.num_heads)
        return self.W_o(output_concat)
