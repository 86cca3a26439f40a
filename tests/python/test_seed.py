"""The seed's own snippets (d2l.ai: multi-head attention, self-attention, positional encoding) run
on ag through the Python binding, against PyTorch's values.

PyTorch's values are fixtures, tests/fixtures/python/ (made by
`/usr/bin/python3 tests/fixtures/make_python_fixtures.py`, which runs the snippets below in their
PyTorch form; seed.json holds them as run). Each test quotes its snippet and then runs the same
lines on ag, with ag in place of torch and d2l. Values are float32 on both sides and must agree
within 1e-6 (the positional table: see its test).
"""

import json
import os
import pathlib

import numpy as np
import pytest

import ag

FIXTURES = pathlib.Path(
    os.environ.get("AG_SOURCE_DIR", pathlib.Path(__file__).resolve().parents[2])
) / "tests" / "fixtures" / "python"
ATOL = 1e-6


@pytest.fixture(scope="module")
def seed():
    with open(FIXTURES / "seed.json", encoding="utf-8") as f:
        return json.load(f)


@pytest.fixture(scope="module")
def torch_values():
    return ag.io.load_file(FIXTURES / "seed_values.safetensors")


def assert_close(actual, expected, atol=ATOL):
    """float32 on both sides, the same shape, |ag - torch| <= atol everywhere."""
    assert actual.dtype == ag.float32
    assert actual.shape == expected.shape
    np.testing.assert_allclose(actual.detach().numpy(), expected.numpy(), rtol=0, atol=atol)


# ---- multi-head attention ---------------------------------------------------------------------------


def test_multi_head_attention_repr_is_d2ls(seed):
    # num_hiddens, num_heads = 100, 5
    # attention = d2l.MultiHeadAttention(num_hiddens, num_hiddens, num_hiddens,
    #                                    num_hiddens, num_heads, 0.5)
    # attention.eval()
    num_hiddens, num_heads = 100, 5
    attention = ag.nn.MultiHeadAttention(num_hiddens, num_hiddens, num_hiddens, num_hiddens,
                                         num_heads, 0.5)
    attention.eval()
    assert repr(attention) == seed["repr"]["MultiHeadAttention(100, 100, 100, 100, 5, 0.5)"]
    assert str(attention) == repr(attention)


def test_multi_head_attention_has_pytorchs_parameter_names():
    attention = ag.nn.MultiHeadAttention(100, 100, 100, 100, 5, 0.5)
    torch_parameters = ag.io.load_file(FIXTURES / "seed_mha.safetensors")
    assert list(attention.state_dict()) == list(torch_parameters)
    assert [name for name, _ in attention.named_parameters()] == list(torch_parameters)
    for name, t in attention.state_dict().items():
        assert t.shape == torch_parameters[name].shape and t.dtype == ag.float32


def test_self_attention_on_ones_equals_pytorchs(seed, torch_values):
    # batch_size, num_queries, valid_lens = 2, 4, torch.tensor([3, 2])
    # X = torch.ones((batch_size, num_queries, num_hiddens))
    # attention(X, X, X, valid_lens).shape          # torch.Size([2, 4, 100])
    num_hiddens, num_heads = 100, 5
    attention = ag.nn.MultiHeadAttention(num_hiddens, num_hiddens, num_hiddens, num_hiddens,
                                         num_heads, 0.5)
    attention.eval()
    # PyTorch's weights, by PyTorch's names, so both compute with the same numbers.
    assert ag.io.load_model(attention, FIXTURES / "seed_mha.safetensors") == ([], [])
    batch_size, num_queries, valid_lens = 2, 4, ag.tensor([3, 2])
    X = ag.ones((batch_size, num_queries, num_hiddens))
    assert_close(X, torch_values["self_attention.X"], atol=0)
    assert valid_lens.tolist() == torch_values["self_attention.valid_lens"].tolist()
    output = attention(X, X, X, valid_lens)
    assert output.shape == ag.Size(seed["shape"]["self_attention.output"]) == (2, 4, 100)
    assert_close(output, torch_values["self_attention.output"])
    # eval(): dropout is off, so a second call gives the same values exactly.
    np.testing.assert_array_equal(attention(X, X, X, valid_lens).detach().numpy(),
                                  output.detach().numpy())


def test_load_state_dict_of_pytorchs_weights_gives_the_same_output(torch_values):
    attention = ag.nn.MultiHeadAttention(100, 100, 100, 100, 5, 0.5)
    attention.eval()
    attention.load_state_dict(ag.io.load_file(FIXTURES / "seed_mha.safetensors"))
    X = ag.ones((2, 4, 100))
    assert_close(attention(X, X, X, ag.tensor([3, 2])), torch_values["self_attention.output"])


def test_the_seeds_transpose_qkv_and_repeat_interleave_on_ag():
    # The seed's helpers, as written there, on ag's tensors (against NumPy's reshape/transpose).
    from seed_code import transpose_output, transpose_qkv

    values = np.arange(2 * 4 * 100, dtype=np.float32).reshape(2, 4, 100)
    heads = transpose_qkv(ag.tensor(values), 5)
    expected = values.reshape(2, 4, 5, 20).transpose(0, 2, 1, 3).reshape(10, 4, 20)
    assert heads.shape == (10, 4, 20)
    np.testing.assert_array_equal(heads.numpy(), expected)
    np.testing.assert_array_equal(transpose_output(heads, 5).numpy(), values)
    lens = ag.repeat_interleave(ag.tensor([3, 2]), repeats=5, dim=0)
    assert lens.dtype == ag.int64 and lens.tolist() == [3] * 5 + [2] * 5


# ---- masked softmax ---------------------------------------------------------------------------------


@pytest.mark.parametrize("case", ["masked_softmax_1d", "masked_softmax_2d"])
def test_masked_softmax_equals_pytorchs(torch_values, case):
    # masked_softmax(torch.rand(2, 2, 4), torch.tensor([2, 3]))
    # masked_softmax(torch.rand(2, 2, 4), torch.tensor([[1, 3], [2, 4]]))
    X = torch_values[f"{case}.X_before"].clone()
    valid_lens = torch_values[f"{case}.valid_lens"]
    output = ag.masked_softmax(X, valid_lens)
    assert_close(output, torch_values[f"{case}.output"])
    # d2l's sequence_mask writes -1e6 into its argument (the fixture's X shows it); ag's
    # masked_softmax leaves its input as it was.
    np.testing.assert_array_equal(X.numpy(), torch_values[f"{case}.X_before"].numpy())


# ---- positional encoding --------------------------------------------------------------------------


def sinusoid_table_float64(num_steps, encoding_dim):
    """d2l's formula in float64 (NumPy): P[i, 2j] = sin(i / 10000^(2j/d)), P[i, 2j+1] = cos."""
    periods = np.power(10000.0, np.arange(0, encoding_dim, 2) / encoding_dim)
    angle = np.arange(num_steps)[:, None] / periods
    P = np.zeros((num_steps, encoding_dim))
    P[:, 0::2], P[:, 1::2] = np.sin(angle), np.cos(angle)
    return P


def test_positional_encoding_table_and_columns(torch_values):
    # encoding_dim, num_steps = 32, 60
    # pos_encoding = PositionalEncoding(encoding_dim, 0)
    # pos_encoding.eval()
    # X = pos_encoding(torch.zeros((1, num_steps, encoding_dim)))
    # P = pos_encoding.P[:, :X.shape[1], :]
    # d2l.plot(torch.arange(num_steps), P[0, :, 6:10].T, ...)
    encoding_dim, num_steps = 32, 60
    pos_encoding = ag.nn.PositionalEncoding(encoding_dim, 0)
    pos_encoding.eval()
    X = pos_encoding(ag.zeros((1, num_steps, encoding_dim)))
    P = pos_encoding.P[:, : X.shape[1], :]
    assert X.shape == (1, 60, 32) and P.shape == (1, 60, 32)
    # ag computes the table in float64 and rounds it once to float32; d2l computes it in float32
    # (the angle i / 10000^(2j/d) already rounded), which puts PyTorch's entries up to 1.6e-6 from
    # the exact values at 60 positions. So: ag's table is d2l's formula within float32's rounding
    # (half an ulp of 1: 6e-8), and PyTorch's within 2e-6.
    exact = sinusoid_table_float64(num_steps, encoding_dim)
    np.testing.assert_allclose(P[0].numpy(), exact, rtol=0, atol=6e-8)
    assert_close(P[0, :, :], torch_values["positional_encoding.table"], atol=2e-6)
    assert_close(X, torch_values["positional_encoding.X"], atol=2e-6)
    assert_close(P[0, :, 6:10].T, torch_values["positional_encoding.columns"], atol=2e-6)


def test_positional_encoding_pictures():
    encoding_dim, num_steps = 32, 60
    pos_encoding = ag.nn.PositionalEncoding(encoding_dim, 0)
    pos_encoding.eval()
    X = pos_encoding(ag.zeros((1, num_steps, encoding_dim)))
    P = pos_encoding.P[:, : X.shape[1], :]
    # d2l.show_heatmaps(P, xlabel='Column (encoding dimension)', ylabel='Row (position)',
    #                   figsize=(3.5, 4), cmap='Blues')   with P = P[0, :, :].unsqueeze(0).unsqueeze(0)
    heatmap = ag.viz.show_heatmaps(P[0, :, :].unsqueeze(0).unsqueeze(0),
                                   xlabel="Column (encoding dimension)", ylabel="Row (position)",
                                   figsize=(3.5, 4), cmap="Blues")
    assert heatmap[:8] == b"\x89PNG\r\n\x1a\n" and heatmap.height > heatmap.width
    # (gnuplot draws the curves: gnuplot-nox, which install-deps.sh installs)
    # d2l.plot(torch.arange(num_steps), P[0, :, 6:10].T, xlabel='Row (position)',
    #          figsize=(6, 2.5), legend=["Col %d" % d for d in torch.arange(6, 10)])
    curves = ag.viz.plot(ag.arange(num_steps), P[0, :, 6:10].T, xlabel="Row (position)",
                         figsize=(6, 2.5), legend=["Col %d" % d for d in ag.arange(6, 10)])
    assert (curves.width, curves.height) == (600, 250)
