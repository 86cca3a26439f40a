"""ag.nn from Python: the C++ layers under d2l's and PyTorch's names, their trees, state dicts and
modes. Expected reprs are PyTorch 1.13's text for the same modules (printed once from PyTorch);
expected values are NumPy's, computed here."""

import gc
import math

import numpy as np
import pytest

import ag
from ag import nn

from seed_code import MHA_REPR  # PyTorch's repr of the seed's class, a fixture


def a(t):
    return t.detach().numpy()


def randn(*shape, seed=0):
    return ag.tensor(np.random.default_rng(seed).standard_normal(shape).astype(np.float32))


# ---- d2l's multi-head attention ---------------------------------------------------------------


def test_multihead_attention_repr_is_pytorchs():
    attention = nn.MultiHeadAttention(100, 100, 100, 100, 5, 0.5)
    assert repr(attention) == MHA_REPR
    assert str(attention) == MHA_REPR


def test_multihead_attention_keywords_and_attributes():
    attention = nn.MultiHeadAttention(
        key_size=6, query_size=4, value_size=5, num_hiddens=8, num_heads=2, dropout=0.0, bias=True
    )
    assert attention.num_heads == 2
    assert isinstance(attention.W_q, nn.Linear)  # the child as its own class
    assert isinstance(attention.attention, nn.DotProductAttention)
    assert isinstance(attention.attention.dropout, nn.Dropout)
    assert attention.W_q.weight.shape == (8, 4) and attention.W_k.weight.shape == (8, 6)
    assert attention.W_v.bias.shape == (8,)
    assert [n for n, _ in attention.named_parameters()] == [
        "W_q.weight", "W_q.bias", "W_k.weight", "W_k.bias",
        "W_v.weight", "W_v.bias", "W_o.weight", "W_o.bias",
    ]


def numpy_multihead(attention, q, k, v, valid_lens):
    """d2l's multi-head attention in NumPy with the layer's weights."""
    H = attention.num_heads
    Q, K, V = (x @ a(W.weight).T for x, W in ((q, attention.W_q), (k, attention.W_k), (v, attention.W_v)))

    def heads(X):  # (B, T, D) -> (B, H, T, D/H)
        return X.reshape(X.shape[0], X.shape[1], H, -1).transpose(0, 2, 1, 3)

    Q, K, V = heads(Q), heads(K), heads(V)
    scores = Q @ K.transpose(0, 1, 3, 2) / math.sqrt(Q.shape[-1])
    mask = np.arange(K.shape[2])[None, None, None, :] >= np.asarray(valid_lens)[:, None, None, None]
    scores = np.where(mask, -1e6, scores)
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)
    out = (weights @ V).transpose(0, 2, 1, 3).reshape(q.shape[0], q.shape[1], -1)
    return out @ a(attention.W_o.weight).T


def test_seed_self_attention_shape_and_values():
    # The seed: self-attention over ones((2, 4, 100)) with valid_lens [3, 2].
    num_hiddens, num_heads = 100, 5
    attention = nn.MultiHeadAttention(num_hiddens, num_hiddens, num_hiddens, num_hiddens, num_heads, 0.5)
    assert attention.eval() is attention
    X = ag.ones(2, 4, num_hiddens)
    valid_lens = ag.tensor([3, 2])
    Y = attention(X, X, X, valid_lens)
    assert Y.shape == (2, 4, 100)
    # Values on other inputs, against NumPy (ones make every position alike).
    q = np.random.default_rng(1).standard_normal((2, 4, 100)).astype(np.float32)
    Y = attention(ag.tensor(q), ag.tensor(q), ag.tensor(q), valid_lens)
    np.testing.assert_allclose(a(Y), numpy_multihead(attention, q, q, q, [3, 2]), rtol=1e-4, atol=1e-5)
    assert attention.attention_weights.shape == (2, 5, 4, 4)


def test_attention_without_valid_lens_and_causal():
    attention = nn.DotProductAttention(0.0)
    q = np.random.default_rng(2).standard_normal((2, 3, 4)).astype(np.float32)
    v = np.random.default_rng(3).standard_normal((2, 3, 5)).astype(np.float32)
    out = attention(ag.tensor(q), ag.tensor(q), ag.tensor(v))
    s = q @ q.transpose(0, 2, 1) / 2.0
    w = np.exp(s - s.max(-1, keepdims=True))
    w /= w.sum(-1, keepdims=True)
    np.testing.assert_allclose(a(out), w @ v, rtol=1e-5, atol=1e-6)
    causal = attention(ag.tensor(q), ag.tensor(q), ag.tensor(v), is_causal=True)
    np.testing.assert_allclose(a(causal)[:, 0], v[:, 0], rtol=1e-5, atol=1e-6)  # sees itself only


def test_additive_attention():
    attention = nn.AdditiveAttention(key_size=2, query_size=20, num_hiddens=8, dropout=0.1)
    attention.eval()
    queries, keys = ag.ones(2, 1, 20), ag.ones(2, 10, 2)
    values = ag.tensor(np.tile(np.arange(40, dtype=np.float32).reshape(1, 10, 4), (2, 1, 1)))
    out = attention(queries, keys, values, ag.tensor([2, 6]))
    # Equal keys: uniform weights over the valid positions (d2l's example).
    np.testing.assert_allclose(a(out)[0, 0], np.arange(40).reshape(10, 4)[:2].mean(0), rtol=1e-5)
    np.testing.assert_allclose(a(out)[1, 0], np.arange(40).reshape(10, 4)[:6].mean(0), rtol=1e-5)


def test_attention_shape_error_names_the_layer():
    attention = nn.MultiHeadAttention(4, 4, 4, 8, 2, 0.0)
    with pytest.raises(ag.ShapeError, match="MultiHeadAttention"):
        attention(ag.ones(2, 3, 5), ag.ones(2, 3, 4), ag.ones(2, 3, 4))


# ---- the basic layers --------------------------------------------------------------------------


def test_linear():
    lin = nn.Linear(3, 4)
    assert repr(lin) == "Linear(in_features=3, out_features=4, bias=True)"
    assert (lin.in_features, lin.out_features) == (3, 4)
    assert isinstance(lin.weight, nn.Parameter) and isinstance(lin.weight, ag.Tensor)
    assert lin.weight.shape == (4, 3) and lin.weight.requires_grad and lin.weight.is_leaf
    x = np.random.default_rng(0).standard_normal((2, 5, 3)).astype(np.float32)
    y = lin(ag.tensor(x))
    np.testing.assert_allclose(a(y), x @ a(lin.weight).T + a(lin.bias), rtol=1e-5, atol=1e-6)
    bound = 1 / math.sqrt(3)
    assert np.all(np.abs(a(lin.weight)) <= bound)
    no_bias = nn.Linear(3, 4, bias=False)
    assert no_bias.bias is None
    assert [n for n, _ in no_bias.named_parameters()] == ["weight"]
    with pytest.raises(ag.ShapeError):
        lin(ag.ones(2, 5))


def test_dropout_train_and_eval():
    drop = nn.Dropout(p=0.5)
    assert repr(drop) == "Dropout(p=0.5, inplace=False)" and drop.p == 0.5
    assert drop.training
    ag.manual_seed(0)
    y = a(drop(ag.ones(1000)))
    assert set(np.unique(y)) <= {0.0, 2.0} and 300 < (y == 0).sum() < 700
    drop.eval()
    assert not drop.training
    np.testing.assert_array_equal(a(drop(ag.ones(1000))), np.ones(1000))
    assert drop.train() is drop and drop.training
    assert repr(nn.Dropout()) == "Dropout(p=0.5, inplace=False)"


def test_activations():
    x = np.linspace(-3, 3, 13).astype(np.float32)
    t = ag.tensor(x)
    np.testing.assert_allclose(a(nn.ReLU()(t)), np.maximum(x, 0))
    np.testing.assert_allclose(a(nn.Tanh()(t)), np.tanh(x), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(a(nn.SiLU()(t)), x / (1 + np.exp(-x)), rtol=1e-5, atol=1e-6)
    erf = np.vectorize(math.erf)
    np.testing.assert_allclose(a(nn.GELU()(t)), 0.5 * x * (1 + erf(x / math.sqrt(2))), rtol=1e-5, atol=1e-6)
    tanh_gelu = 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))
    np.testing.assert_allclose(a(nn.GELU(approximate="tanh")(t)), tanh_gelu, rtol=1e-5, atol=1e-6)
    assert repr(nn.GELU()) == "GELU(approximate='none')" and repr(nn.ReLU()) == "ReLU()"
    with pytest.raises(ValueError):
        nn.GELU(approximate="fast")


def test_layer_norm():
    ln = nn.LayerNorm(4)
    assert repr(ln) == "LayerNorm((4,), eps=1e-05, elementwise_affine=True)"
    assert ln.normalized_shape == (4,) and ln.eps == 1e-5
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    expected = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(a(ln(ag.tensor(x))), expected, rtol=1e-4, atol=1e-5)
    assert nn.LayerNorm([2, 4], eps=1e-6).weight.shape == (2, 4)
    # PyTorch 2.1's bias=False (nanoGPT's LayerNorm) and elementwise_affine=False: no such parameter.
    no_bias = nn.LayerNorm(4, bias=False)
    assert [name for name, _ in no_bias.named_parameters()] == ["weight"]
    np.testing.assert_allclose(a(no_bias(ag.tensor(x))), expected, rtol=1e-4, atol=1e-5)
    plain = nn.LayerNorm(4, elementwise_affine=False)
    assert list(plain.named_parameters()) == []
    assert repr(plain) == "LayerNorm((4,), eps=1e-05, elementwise_affine=False)"


def test_batch_norm_1d_as_pytorch():
    bn = nn.BatchNorm1d(4)
    assert repr(bn) == ("BatchNorm1d(4, eps=1e-05, momentum=0.1, affine=True, "
                        "track_running_stats=True)")
    assert (bn.num_features, bn.eps, bn.momentum, bn.affine, bn.track_running_stats) == (
        4, 1e-5, 0.1, True, True)
    assert sorted(bn.state_dict()) == ["bias", "num_batches_tracked", "running_mean",
                                       "running_var", "weight"]
    assert [name for name, _ in bn.named_parameters()] == ["weight", "bias"]
    x = np.random.default_rng(1).standard_normal((8, 4)) * 3 + 1
    y = bn.to(ag.float64)(ag.tensor(x))  # training: the batch's statistics, the variance biased
    expected = (x - x.mean(0)) / np.sqrt(x.var(0) + 1e-5)
    np.testing.assert_allclose(a(y), expected, rtol=1e-12, atol=1e-12)
    # the running statistics move by momentum 0.1, the variance unbiased
    np.testing.assert_allclose(a(bn.running_mean), 0.1 * x.mean(0), rtol=1e-12)
    np.testing.assert_allclose(a(bn.running_var), 0.9 + 0.1 * x.var(0, ddof=1), rtol=1e-12)
    assert bn.num_batches_tracked.item() == 1
    bn.eval()
    np.testing.assert_allclose(a(bn(ag.tensor(x))), (x - a(bn.running_mean)) / np.sqrt(
        a(bn.running_var) + 1e-5), rtol=1e-12)
    # makemore's MLP: Linear, BatchNorm1d, Tanh; (N, C, L) inputs; momentum=None
    torch_like = nn.Sequential(nn.Linear(6, 5, bias=False), nn.BatchNorm1d(5), nn.Tanh())
    out = torch_like(ag.randn(16, 6))
    out.sum().backward()
    assert torch_like[1].weight.grad is not None and out.shape == (16, 5)
    assert nn.BatchNorm1d(3, momentum=None)(ag.randn(4, 3, 7)).shape == (4, 3, 7)
    with pytest.raises(ValueError, match="more than 1 value per channel"):
        nn.BatchNorm1d(3)(ag.randn(1, 3))
    with pytest.raises(ag.ShapeError, match="neither"):
        nn.BatchNorm1d(3)(ag.randn(2, 4))


def test_embedding():
    emb = nn.Embedding(10, 3)
    assert repr(emb) == "Embedding(10, 3)" and (emb.num_embeddings, emb.embedding_dim) == (10, 3)
    idx = np.array([[1, 2], [9, 1]])
    np.testing.assert_array_equal(a(emb(ag.tensor(idx))), a(emb.weight)[idx])


def test_positional_encoding_buffer_P():
    pos = nn.PositionalEncoding(32, 0.0, max_len=60)
    P = pos.P
    assert P.shape == (1, 60, 32) and not P.requires_grad
    i = np.arange(60)[:, None]
    angle = i / np.power(10000, np.arange(0, 32, 2) / 32)
    np.testing.assert_allclose(a(P)[0, :, 0::2], np.sin(angle), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(a(P)[0, :, 1::2], np.cos(angle), rtol=1e-5, atol=1e-5)
    pos.eval()
    np.testing.assert_allclose(a(pos(ag.zeros(2, 5, 32))), np.broadcast_to(a(P)[:, :5], (2, 5, 32)))
    assert [n for n, _ in pos.named_buffers()] == ["P"] and list(pos.parameters()) == []
    # P is not persistent: not in the state dict (d2l's P is a plain attribute in PyTorch), and a
    # state dict without it loads.
    assert list(pos.state_dict()) == []
    assert pos.load_state_dict({}).missing_keys == []
    assert nn.PositionalEncoding(8, 0.1).P.shape == (1, 1000, 8)  # d2l's max_len


# ---- the Transformer ---------------------------------------------------------------------------


def test_ffn_addnorm_encoder_block():
    ffn = nn.PositionWiseFFN(4, 4, 8)
    ffn.eval()
    assert ffn(ag.ones(2, 3, 4)).shape == (2, 3, 8)
    add_norm = nn.AddNorm([3, 4], 0.5)
    add_norm.eval()
    assert add_norm(ag.ones(2, 3, 4), ag.ones(2, 3, 4)).shape == (2, 3, 4)
    block = nn.TransformerEncoderBlock(24, 24, 24, 24, [100, 24], 24, 48, 8, 0.5)
    block.eval()
    assert block(ag.ones(2, 100, 24), ag.tensor([3, 2])).shape == (2, 100, 24)


def test_transformer_encoder_decoder():
    enc = nn.TransformerEncoder(200, 24, 24, 24, 24, [24], 24, 48, 8, 2, 0.5)
    dec = nn.TransformerDecoder(200, 24, 24, 24, 24, [24], 24, 48, 8, 2, 0.5)
    model = nn.EncoderDecoder(enc, dec)
    model.eval()
    assert not enc.training and not dec.blks[0].training
    tokens = ag.tensor(np.arange(16).reshape(2, 8) % 200)
    valid_lens = ag.tensor([3, 2])
    enc_out = enc(tokens, valid_lens)
    assert enc_out.shape == (2, 8, 24)
    assert isinstance(enc.blks, nn.ModuleList) and isinstance(enc.blks[1], nn.TransformerEncoderBlock)
    assert len(enc.attention_weights) == 2 and enc.attention_weights[0].shape == (2, 8, 8, 8)
    state = dec.init_state(enc_out, valid_lens)
    logits, state2 = dec(tokens[:, :3], state)
    assert logits.shape == (2, 3, 200) and state2 is state
    assert state.key_values[0].shape == (2, 3, 24)
    # One step more continues the same state.
    step, _ = dec(tokens[:, 3:4], state)
    assert step.shape == (2, 1, 200) and state.key_values[0].shape == (2, 4, 24)
    out, _ = model(tokens, tokens, valid_lens)
    assert out.shape == (2, 8, 200)
    sd = model.state_dict()
    assert "encoder.blks.0.attention.W_q.weight" in sd and "encoder.pos_encoding.P" not in sd
    assert list(sd) == [n for n, _ in model.named_parameters()]
    model.load_state_dict(sd)


def test_language_model():
    lm = nn.LanguageModel(vocab_size=11, num_hiddens=16, num_heads=2, num_layers=2, ffn_num_hiddens=32,
                          block_size=8, pre_norm=True, tie_weights=True)
    lm.eval()
    tokens = ag.tensor([[1, 2, 3], [4, 5, 6]])
    logits = lm(tokens)
    assert logits.shape == (2, 3, 11)
    cache = lm.make_cache()
    first = lm(tokens[:, :2], cache)
    assert len(cache) == 2 and first.shape == (2, 2, 11)
    np.testing.assert_allclose(a(lm(tokens[:, 2:], cache))[:, 0], a(logits)[:, 2], rtol=1e-4, atol=1e-5)


# ---- the modern block: RMSNorm, SwiGLUFFN, RotaryEmbedding, grouped-query and positional attention


def test_rms_norm():
    norm = nn.RMSNorm(4)
    assert repr(norm) == "RMSNorm((4,), eps=None, elementwise_affine=True)"  # PyTorch 2.4's text
    assert norm.normalized_shape == (4,) and norm.eps is None and norm.elementwise_affine
    assert isinstance(norm.weight, nn.Parameter) and norm.weight.shape == (4,)
    np.testing.assert_array_equal(a(norm.weight), np.ones(4))
    x = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)
    w = np.random.default_rng(1).uniform(0.5, 1.5, 4).astype(np.float32)
    with ag.no_grad():
        norm.weight.copy_(ag.tensor(w))
    eps = np.finfo(np.float32).eps  # eps=None: torch.finfo(x.dtype).eps
    expected = x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w
    np.testing.assert_allclose(a(norm(ag.tensor(x))), expected, rtol=1e-5, atol=1e-6)
    bare = nn.RMSNorm([3, 4], eps=1e-6, elementwise_affine=False)
    assert repr(bare) == "RMSNorm((3, 4), eps=1e-06, elementwise_affine=False)"
    assert bare.weight is None and list(bare.parameters()) == [] and not bare.elementwise_affine
    np.testing.assert_allclose(a(bare(ag.tensor(x))), x / np.sqrt((x * x).mean((1, 2), keepdims=True) + 1e-6),
                               rtol=1e-5, atol=1e-6)
    assert [n for n, _ in norm.named_parameters()] == ["weight"] and list(norm.state_dict()) == ["weight"]
    # The gradient reaches the weight and the input.
    xt = ag.tensor(x).requires_grad_()
    norm(xt).sum().backward()
    assert norm.weight.grad.shape == (4,) and xt.grad.shape == (2, 3, 4)
    with pytest.raises(ag.ShapeError, match=r"RMSNorm.*\[2,3\]"):
        norm(ag.ones(2, 3))
    with pytest.raises(ag.DTypeError, match="RMSNorm"):
        norm(ag.ones(2, 4, dtype=ag.int64))
    with pytest.raises(TypeError):
        nn.RMSNorm("4")


def test_swiglu_ffn():
    ffn = nn.SwiGLUFFN(4, 6, 5)
    assert repr(ffn) == (
        "SwiGLUFFN(\n  (w1): Linear(in_features=4, out_features=6, bias=False)\n"
        "  (w2): Linear(in_features=6, out_features=5, bias=False)\n"
        "  (w3): Linear(in_features=4, out_features=6, bias=False)\n)"
    )
    assert [n for n, _ in ffn.named_parameters()] == ["w1.weight", "w2.weight", "w3.weight"]  # Meta's order
    x = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)
    gate = x @ a(ffn.w1.weight).T
    up = x @ a(ffn.w3.weight).T
    expected = (gate / (1 + np.exp(-gate)) * up) @ a(ffn.w2.weight).T  # w2(silu(w1 x) · w3 x)
    np.testing.assert_allclose(a(ffn(ag.tensor(x))), expected, rtol=1e-5, atol=1e-6)
    biased = nn.SwiGLUFFN(ffn_num_input=4, ffn_num_hiddens=6, ffn_num_outputs=4, bias=True)
    assert biased.w1.bias.shape == (6,) and biased.w2.bias.shape == (4,)
    with pytest.raises(ag.ShapeError):
        ffn(ag.ones(2, 3, 5))


def _rope_angles(positions, dim, base=10000.0):
    """θ_tj = t · base^(-2j/dim), in float64."""
    return np.asarray(positions, np.float64)[:, None] * base ** (-np.arange(0, dim, 2) / dim)


def _turn(x, theta, pairs):
    """Feature pair j of row t turned by θ_tj (NumPy); features past 2·theta.shape[1] kept."""
    r = 2 * theta.shape[1]
    out = x.copy()
    first, second = (slice(0, r, 2), slice(1, r, 2)) if pairs == "interleaved" else (
        slice(0, r // 2), slice(r // 2, r))
    a_, b_ = x[..., first], x[..., second]
    out[..., first] = a_ * np.cos(theta) - b_ * np.sin(theta)
    out[..., second] = a_ * np.sin(theta) + b_ * np.cos(theta)
    return out


@pytest.mark.parametrize("pairs", ["interleaved", "halves"])
def test_rotary_embedding(pairs):
    rope = nn.RotaryEmbedding(8, pairs=pairs)
    assert repr(rope) == f"RotaryEmbedding(dim=8, base=10000.0, pairs='{pairs}')"
    assert (rope.dim, rope.base, rope.pairs) == (8, 10000.0, pairs)
    # No parameters and no buffers: the angle tables are a cache, not state.
    assert list(rope.parameters()) == [] and list(rope.buffers()) == [] and list(rope.state_dict()) == []
    cos, sin = rope.angles(3, 5, ag.float64)
    assert cos.shape == (5, 4) and cos.dtype == ag.float64
    theta = _rope_angles(range(3, 8), 8)
    np.testing.assert_allclose(a(cos), np.cos(theta), rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(a(sin), np.sin(theta), rtol=1e-12, atol=1e-15)
    assert rope.angles(0, 2)[0].dtype == ag.float32  # the module's dtype by default
    x = np.random.default_rng(0).standard_normal((2, 3, 5, 10))  # d = 10: 8 turned, 2 kept
    got = a(rope(ag.tensor(x), 3))
    np.testing.assert_allclose(got, _turn(x, theta, pairs).astype(np.float32), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(a(rope(ag.tensor(x), first_position=3)), got)
    # forward is the op with the module's angles, and the positions past the first 1024 work too.
    far = ag.tensor(x[0, 0].astype(np.float32))
    np.testing.assert_array_equal(a(rope(far, 5000)), a(ag.rotary_embedding(far, *rope.angles(5000, 5), pairs=pairs)))
    # float64 after .double(): the tables computed again from double.
    rope.double()
    np.testing.assert_allclose(a(rope(ag.tensor(x), 3)), _turn(x, theta, pairs), rtol=1e-12, atol=1e-12)


def test_rotary_scores_depend_on_relative_positions_only():
    # RoPE's point: the score of query i and key j depends on i - j alone. Moving both by δ keeps
    # every score (float64, to rounding).
    rope = nn.RotaryEmbedding(8).double()
    rng = np.random.default_rng(2)
    q, k = ag.tensor(rng.standard_normal((6, 8))), ag.tensor(rng.standard_normal((6, 8)))
    scores = a(rope(q) @ rope(k).mT)
    assert not np.allclose(scores, a(q @ k.mT))  # the positions did change the scores
    for delta in (1, 7, 1000):
        np.testing.assert_allclose(a(rope(q, delta) @ rope(k, delta).mT), scores, rtol=1e-10, atol=1e-12)


def test_rotary_embedding_errors():
    with pytest.raises(ag.ValueError, match="RotaryEmbedding: dim 7"):
        nn.RotaryEmbedding(7)
    with pytest.raises(ag.ValueError, match="RotaryEmbedding: pairs: 'rotate_half'"):
        nn.RotaryEmbedding(8, pairs="rotate_half")
    with pytest.raises(ag.ValueError, match="RotaryEmbedding"):
        nn.RotaryEmbedding(8, base=0.0)
    rope = nn.RotaryEmbedding(8)
    with pytest.raises(ag.ShapeError, match="RotaryEmbedding"):
        rope(ag.ones(2, 3, 6))  # fewer features than dim
    with pytest.raises(ag.ValueError, match="RotaryEmbedding: first_position -1"):
        rope(ag.ones(2, 3, 8), -1)
    with pytest.raises(ag.DTypeError, match="RotaryEmbedding"):
        rope.angles(0, 3, ag.int64)


def test_multihead_attention_options():
    mha = nn.MultiHeadAttention(12, 12, 12, 12, 6, 0.0, num_kv_heads=2, positions="rope", rope_base=500.0)
    assert (mha.num_heads, mha.num_kv_heads) == (6, 2)
    assert mha.W_q.weight.shape == (12, 12) and mha.W_k.weight.shape == (4, 12) and mha.W_v.weight.shape == (4, 12)
    assert isinstance(mha.rotary, nn.RotaryEmbedding)
    assert (mha.rotary.dim, mha.rotary.base, mha.rotary.pairs) == (2, 500.0, "interleaved")
    assert repr(mha).endswith("  (rotary): RotaryEmbedding(dim=2, base=500.0, pairs='interleaved')\n)")
    assert "rotary" not in "".join(mha.state_dict())  # the angles are not state
    plain = nn.MultiHeadAttention(12, 12, 12, 12, 6, 0.0)
    assert plain.num_kv_heads == 6 and plain.rotary is None and plain.attention.alibi_slopes == []
    assert repr(plain) == repr(nn.MultiHeadAttention(12, 12, 12, 12, 6, 0.0, positions="none"))
    alibi = nn.MultiHeadAttention(12, 12, 12, 12, 6, 0.0, positions="alibi")
    assert alibi.attention.alibi_slopes == ag.alibi_slopes(6) and alibi.rotary is None
    halves = nn.MultiHeadAttention(12, 12, 12, 12, 3, 0.0, positions="rope", rope_pairs="halves")
    assert halves.rotary.pairs == "halves" and halves.rotary.dim == 4
    with pytest.raises(ag.ValueError, match="MultiHeadAttention: positions: 'sinusoidal'"):
        nn.MultiHeadAttention(12, 12, 12, 12, 6, 0.0, positions="sinusoidal")
    with pytest.raises(ag.ValueError, match="MultiHeadAttention: rope_pairs: 'neox'"):
        nn.MultiHeadAttention(12, 12, 12, 12, 6, 0.0, positions="rope", rope_pairs="neox")
    with pytest.raises(ag.ValueError, match="num_kv_heads 4 does not divide num_heads 6"):
        nn.MultiHeadAttention(12, 12, 12, 12, 6, 0.0, num_kv_heads=4)
    with pytest.raises(TypeError):
        nn.MultiHeadAttention(12, 12, 12, 12, 6, 0.0, False, 2)  # the options are keywords only


def python_multihead(mha, X, is_causal):
    """MultiHeadAttention written in Python with ag's ops and the layer's own weights: the
    key/value heads repeated for their query heads (Llama's repeat_kv), RoPE by the layer's
    RotaryEmbedding, ALiBi as an explicit bias, softmax(Q·Kᵀ/√d + bias) · V."""
    B, T, _ = X.shape
    H, Hkv = mha.num_heads, mha.num_kv_heads

    def heads(Y, n):  # (B, T, n·d) -> (B, n, T, d)
        return Y.reshape(B, T, n, -1).permute(0, 2, 1, 3)

    q, k, v = heads(mha.W_q(X), H), heads(mha.W_k(X), Hkv), heads(mha.W_v(X), Hkv)
    if mha.rotary is not None:
        q, k = mha.rotary(q), mha.rotary(k)
    k, v = k.repeat_interleave(H // Hkv, dim=1), v.repeat_interleave(H // Hkv, dim=1)  # (B, H, T, d)
    scores = q @ k.mT / math.sqrt(q.shape[-1])  # (B, H, T, T)
    if mha.attention.alibi_slopes:
        scores = scores + ag.alibi_bias(mha.attention.alibi_slopes, T, T, X.dtype)
    if is_causal:
        scores = scores.masked_fill(ag.ones(T, T, dtype=ag.bool).triu(1), -math.inf)
    out = ag.softmax(scores, -1) @ v  # (B, H, T, d)
    return mha.W_o(out.permute(0, 2, 1, 3).reshape(B, T, -1))


@pytest.mark.parametrize("positions", ["none", "rope", "alibi"])
@pytest.mark.parametrize("num_kv_heads", [0, 2, 1])
def test_grouped_query_attention_with_positions_is_the_python_reference(positions, num_kv_heads):
    ag.manual_seed(0)
    mha = nn.MultiHeadAttention(8, 8, 8, 16, 4, 0.0, positions=positions, num_kv_heads=num_kv_heads).double()
    X = ag.tensor(np.random.default_rng(1).standard_normal((2, 5, 8)))
    for is_causal in (False, True):
        np.testing.assert_allclose(a(mha(X, X, X, is_causal=is_causal)), a(python_multihead(mha, X, is_causal)),
                                   rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("positions", ["none", "rope", "alibi"])
def test_causal_self_attention_with_a_cache_is_the_causal_forward(positions):
    ag.manual_seed(0)
    mha = nn.MultiHeadAttention(8, 8, 8, 16, 4, 0.0, positions=positions, num_kv_heads=2).double()
    X = ag.tensor(np.random.default_rng(1).standard_normal((2, 6, 8)))
    full = a(mha(X, X, X, is_causal=True))
    out, keys, values = mha.causal_self_attention(X[:, :2])  # positions 0, 1; an empty cache
    assert keys.shape == (2, 2, 2, 4) and values.shape == (2, 2, 2, 4)  # (B, Hkv, S, D/H)
    steps = [out]
    for t in range(2, 6):  # one position at a time over the cache
        out, keys, values = mha.causal_self_attention(X[:, t : t + 1], t, keys, values)
        steps.append(out)
    assert keys.shape == (2, 2, 6, 4)
    np.testing.assert_allclose(a(ag.cat(steps, 1)), full, rtol=1e-10, atol=1e-12)
    with pytest.raises(ag.ValueError, match="both cached_keys and cached_values"):
        mha.causal_self_attention(X[:, :1], 6, keys)
    with pytest.raises(ag.ShapeError, match="causal_self_attention"):
        mha.causal_self_attention(ag.ones(2, 1, 5, dtype=ag.float64), 6, keys, values)


class LlamaBlock(nn.Module):
    """Llama's block in Python: pre-norm RMSNorm, causal grouped-query attention with RoPE, SwiGLU."""

    def __init__(self, dim, num_heads, num_kv_heads, hidden):
        super().__init__()
        self.attention_norm = nn.RMSNorm(dim)
        self.attention = nn.MultiHeadAttention(dim, dim, dim, dim, num_heads, 0.0, positions="rope",
                                               num_kv_heads=num_kv_heads)
        self.ffn_norm = nn.RMSNorm(dim)
        self.feed_forward = nn.SwiGLUFFN(dim, hidden, dim)

    def forward(self, x):
        h = self.attention_norm(x)
        x = x + self.attention(h, h, h, is_causal=True)
        return x + self.feed_forward(self.ffn_norm(x))


class TinyLlama(nn.Module):
    def __init__(self, vocab, dim=16, num_heads=4, num_kv_heads=2, hidden=32, layers=2):
        super().__init__()
        self.tok_embeddings = nn.Embedding(vocab, dim)
        self.layers = nn.ModuleList([LlamaBlock(dim, num_heads, num_kv_heads, hidden) for _ in range(layers)])
        self.norm = nn.RMSNorm(dim)
        self.output = nn.Linear(dim, vocab, bias=False)

    def forward(self, tokens):
        h = self.tok_embeddings(tokens)
        for layer in self.layers:
            h = layer(h)
        return self.output(self.norm(h))


def test_a_llama_block_written_in_python_trains():
    ag.manual_seed(0)
    vocab = 7
    model = TinyLlama(vocab)
    names = [n for n, _ in model.named_parameters()]
    assert names[:3] == ["tok_embeddings.weight", "layers.0.attention_norm.weight", "layers.0.attention.W_q.weight"]
    assert model.layers[0].attention.W_k.weight.shape == (8, 16)  # 2 key/value heads of width 4
    assert "layers.0.feed_forward.w3.weight" in model.state_dict()
    assert isinstance(model.layers[1].attention.rotary, nn.RotaryEmbedding)
    optimizer = ag.optim.AdamW(model.parameters(), lr=0.01)
    rng = np.random.default_rng(0)
    losses = []
    for step in range(60):
        # Four random tokens repeated: from position 4 on, the next token is the one 4 positions
        # back, which only attention can fetch (and only by relative position: RoPE).
        seq = np.tile(rng.integers(0, vocab, (8, 4)), (1, 4))[:, :13]
        logits = model(ag.tensor(seq[:, :-1]))[:, 3:]  # (8, 9, vocab): predictions of tokens 4 ...
        loss = nn.functional.cross_entropy(logits.reshape(-1, vocab), ag.tensor(seq[:, 4:]).reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert all(math.isfinite(l) for l in losses)
    # From about log(7) ≈ 1.95 (guessing) to well below it (about 0.15 at step 60).
    assert losses[0] > 1.5 and np.mean(losses[-5:]) < 0.3 * losses[0], losses


@pytest.mark.parametrize("positions", ["rope", "alibi", "none"])
def test_language_model_relative_positions_extend_and_slide(positions):
    ag.manual_seed(0)
    lm = nn.LanguageModel(vocab_size=11, num_hiddens=16, num_heads=4, num_layers=1, ffn_num_hiddens=24,
                          dropout=0.0, block_size=6, pre_norm=True, positions=positions, num_kv_heads=2,
                          norm="rms", ffn="swiglu", rope_pairs="halves", rope_base=1000.0)
    lm.eval()
    attention = lm.blks[0].attention
    assert attention.num_kv_heads == 2 and (attention.rotary is not None) == (positions == "rope")
    tokens = ag.tensor(np.random.default_rng(1).integers(0, 11, (2, 10)))
    assert lm.max_context == 6
    with pytest.raises(ag.ShapeError):
        lm(tokens)  # 10 positions, past the context of 6
    lm.extend_context(10)
    assert lm.max_context == 10
    full = a(lm(tokens))  # (2, 10, 11)
    cache = lm.make_cache()
    steps = [a(lm(tokens[:, t : t + 1], cache)) for t in range(10)]
    np.testing.assert_allclose(np.concatenate(steps, 1), full, rtol=1e-4, atol=1e-5)
    assert len(cache) == 10 and cache.first_position == 0 and cache.next_position == 10
    # A window sliding on: drop the 4 oldest; the next token is position 10, and its logits are
    # those of the last 6 tokens and itself read afresh (only distances reach the model).
    cache.drop_oldest(4)
    assert len(cache) == 6 and cache.first_position == 4 and cache.next_position == 10
    more = ag.tensor([[3], [5]])
    slid = a(lm(more, cache))[:, 0]
    window = ag.cat([tokens[:, 4:], more], 1)  # positions 4 ... 10, read from 0
    np.testing.assert_allclose(slid, a(lm(window))[:, -1], rtol=1e-4, atol=1e-5)
    with pytest.raises(ag.ValueError):
        cache.drop_oldest(8)  # more than it holds


def test_language_model_keyword_errors_and_absolute_positions():
    with pytest.raises(ag.ValueError, match="LanguageModel: positions"):
        nn.LanguageModel(vocab_size=5, positions="relative")
    with pytest.raises(ag.ValueError, match="LanguageModel: rope_pairs"):
        nn.LanguageModel(vocab_size=5, positions="rope", rope_pairs="pairs")
    with pytest.raises(ag.ValueError, match="LanguageModel: norm"):
        nn.LanguageModel(vocab_size=5, norm="batch")
    with pytest.raises(ag.ValueError, match="LanguageModel: ffn"):
        nn.LanguageModel(vocab_size=5, ffn="geglu")
    learned = nn.LanguageModel(vocab_size=5, num_hiddens=8, num_heads=2, num_layers=1, ffn_num_hiddens=8,
                               block_size=4, positions="learned")
    with pytest.raises(ag.ValueError):
        learned.extend_context(8)  # a learned table has no rows past block_size
    sinusoidal = nn.LanguageModel(vocab_size=5, num_hiddens=8, num_heads=2, num_layers=1, ffn_num_hiddens=8,
                                  block_size=4)
    sinusoidal.eval()
    cache = sinusoidal.make_cache()
    sinusoidal(ag.tensor([[1, 2, 3]]), cache)
    cache.drop_oldest(1)
    with pytest.raises(ag.ValueError):
        sinusoidal(ag.tensor([[4]]), cache)  # absolute positions: a slid cache is refused


# ---- containers --------------------------------------------------------------------------------


def test_sequential():
    seq = nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.GELU(), nn.LayerNorm(3), nn.Embedding(4, 5))
    assert repr(seq) == (
        "Sequential(\n  (0): Linear(in_features=2, out_features=3, bias=True)\n  (1): ReLU()\n"
        "  (2): GELU(approximate='none')\n  (3): LayerNorm((3,), eps=1e-05, elementwise_affine=True)\n"
        "  (4): Embedding(4, 5)\n)"
    )
    assert len(seq) == 5 and isinstance(seq[0], nn.Linear) and isinstance(seq[-1], nn.Embedding)
    mlp = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    h = np.maximum(x @ a(mlp[0].weight).T + a(mlp[0].bias), 0)
    np.testing.assert_allclose(a(mlp(ag.tensor(x))), h @ a(mlp[2].weight).T + a(mlp[2].bias), rtol=1e-5, atol=1e-6)
    assert [n for n, _ in mlp.named_parameters()] == ["0.weight", "0.bias", "2.weight", "2.bias"]
    import collections

    named = nn.Sequential(collections.OrderedDict([("fc", nn.Linear(1, 1)), ("act", nn.Tanh())]))
    assert [n for n, _ in named.named_children()] == ["fc", "act"]


def test_module_list_and_dict():
    layers = nn.ModuleList([nn.ReLU()])
    assert repr(layers) == "ModuleList(\n  (0): ReLU()\n)"
    layers.append(nn.Linear(2, 2)).extend([nn.Tanh()])
    assert len(layers) == 3 and isinstance(layers[1], nn.Linear) and isinstance(layers[-1], nn.Tanh)
    assert [type(m).__name__ for m in layers] == ["ReLU", "Linear", "Tanh"]
    with pytest.raises(IndexError):
        layers[3]
    d = nn.ModuleDict({"a": nn.Tanh()})
    assert repr(d) == "ModuleDict(\n  (a): Tanh()\n)"
    d["lin"] = nn.Linear(2, 3)
    assert "lin" in d and len(d) == 2 and d.keys() == ["a", "lin"]
    assert [n for n, _ in d.named_parameters()] == ["lin.weight", "lin.bias"]
    with pytest.raises(KeyError):
        d["missing"]
    with pytest.raises(TypeError, match="int is not an ag.nn.Module"):
        nn.ModuleList([3])
    with pytest.raises(TypeError, match="str is not an ag.nn.Module"):
        nn.Sequential("relu")


# ---- the tree: parameters, state dicts, modes, dtypes ------------------------------------------


def test_tree_walks():
    enc = nn.TransformerEncoder(50, 8, 8, 8, 8, [8], 8, 16, 2, 2, 0.1)
    names = [n for n, _ in enc.named_parameters()]
    assert names[:2] == ["embedding.weight", "blks.0.attention.W_q.weight"]
    assert len(list(enc.parameters())) == len(names)
    assert enc.num_parameters() == sum(p.numel() for p in enc.parameters())
    assert [n for n, _ in enc.named_children()] == ["embedding", "pos_encoding", "blks"]
    assert [type(m).__name__ for m in enc.children()] == ["Embedding", "PositionalEncoding", "ModuleList"]
    modules = dict(enc.named_modules())
    assert isinstance(modules["blks.1.ffn.dense2"], nn.Linear) and modules[""] is enc
    assert enc.get_submodule("blks.0.addnorm1.ln").__class__ is nn.LayerNorm
    assert [n for n, _ in enc.named_buffers()] == ["pos_encoding.P"]
    assert [n for n, _ in enc.named_parameters(recurse=False)] == []
    assert [n for n, _ in enc.embedding.named_parameters(prefix="embedding")] == ["embedding.weight"]
    visited = []
    enc.apply(lambda m: visited.append(type(m).__name__))
    assert visited[-1] == "TransformerEncoder" and visited[0] == "Embedding"  # children first


def test_state_dict_round_trip():
    a_ = nn.MultiHeadAttention(4, 4, 4, 8, 2, 0.0, bias=True)
    b_ = nn.MultiHeadAttention(4, 4, 4, 8, 2, 0.0, bias=True)
    sd = a_.state_dict()
    assert list(sd) == [n for n, _ in a_.named_parameters()]
    assert not sd["W_q.weight"].requires_grad  # detached, as PyTorch's
    assert a_.state_dict(keep_vars=True)["W_q.weight"].is_same(a_.W_q.weight)
    result = b_.load_state_dict(sd)
    assert result.missing_keys == [] and result.unexpected_keys == [] and repr(result) == "<All keys matched successfully>"
    for name, p in b_.named_parameters():
        np.testing.assert_array_equal(a(p), a(sd[name]))
    # state_dict shares storage: a change to the module shows.
    with ag.no_grad():
        a_.W_o.bias.fill_(3.0)
    np.testing.assert_array_equal(a(sd["W_o.bias"]), np.full(8, 3.0, np.float32))


def test_load_state_dict_errors_name_the_entry():
    lin = nn.Linear(3, 4)
    before = a(lin.weight).copy()
    bad = {"weight": ag.zeros(4, 5), "bias": ag.zeros(4)}
    with pytest.raises(ag.StateDictError, match=r"shape mismatch weight: file \[4, ?5\], model \[4, ?3\]"):
        lin.load_state_dict(bad)
    np.testing.assert_array_equal(a(lin.weight), before)  # nothing changed
    assert isinstance(ag.StateDictError("x"), RuntimeError)
    with pytest.raises(ag.StateDictError, match=r"missing \[bias\]"):
        lin.load_state_dict({"weight": ag.zeros(4, 3)})
    result = lin.load_state_dict({"weight": ag.zeros(4, 3), "extra": ag.ones(1)}, strict=False)
    assert result.missing_keys == ["bias"] and result.unexpected_keys == ["extra"]
    missing, unexpected = result
    assert missing == ["bias"] and len(result.problems) == 2
    np.testing.assert_array_equal(a(lin.weight), np.zeros((4, 3)))  # what fits is loaded


def test_train_eval_recursive_and_to_dtype():
    model = nn.Sequential(nn.Linear(2, 2), nn.Dropout(0.5), nn.MultiHeadAttention(2, 2, 2, 2, 1, 0.5))
    assert model.eval() is model
    assert all(not m.training for m in model.modules())
    assert model.train() is model and model[2].attention.dropout.training
    with pytest.raises(ValueError):
        model.train("yes")
    assert model.to(ag.float64) is model
    assert all(p.dtype == ag.float64 for p in model.parameters())
    assert model.to("cpu") is model and model.float() is model
    assert model[0].weight.dtype == ag.float32
    pos = nn.PositionalEncoding(4, 0.0, 10).double()
    assert pos.P.dtype == ag.float64
    with pytest.raises(TypeError):
        model.to(ag.int64)
    with pytest.raises(RuntimeError):
        model.to("cuda")


def test_zero_grad():
    lin = nn.Linear(2, 2)
    loss = nn.functional.mse_loss(lin(ag.ones(1, 2)), ag.zeros(1, 2))
    loss.backward()
    assert lin.weight.grad is not None
    lin.zero_grad(set_to_none=False)
    np.testing.assert_array_equal(a(lin.weight.grad), np.zeros((2, 2)))
    lin.zero_grad()
    assert lin.weight.grad is None and lin.bias.grad is None
    lin.requires_grad_(False)
    assert not lin.weight.requires_grad


# ---- attribute assignment on C++ layers: tying, emptying --------------------------------------


def test_tying_weights():
    wte = nn.Embedding(10, 4)
    lm_head = nn.Linear(4, 10, bias=False)
    lm_head.weight = wte.weight  # nanoGPT's tying (PyTorch's setattr)
    assert lm_head.weight.is_same(wte.weight)
    model = nn.ModuleDict({"wte": wte, "lm_head": lm_head})
    assert [n for n, _ in model.named_parameters()] == ["wte.weight"]  # one tensor, once
    assert model.num_parameters() == 40
    assert set(model.state_dict()) == {"wte.weight", "lm_head.weight"}  # both names
    loss = nn.functional.mse_loss(lm_head(wte(ag.tensor([1, 2]))), ag.zeros(2, 10))
    loss.backward()
    assert wte.weight.grad is not None and wte.weight.grad.is_same(lm_head.weight.grad)


def test_assignment_rules_on_cpp_layers():
    lin = nn.Linear(3, 4)
    with pytest.raises(TypeError, match="cannot assign 'Tensor' as parameter 'weight'"):
        lin.weight = ag.zeros(4, 3)
    lin.bias = None  # PyTorch's: a parameter slot may be emptied
    assert lin.bias is None and [n for n, _ in lin.named_parameters()] == ["weight"]
    lin.bias = nn.Parameter(ag.zeros(4))
    assert lin.bias.shape == (4,) and lin.bias.requires_grad
    with pytest.raises(AttributeError):
        lin.extra = nn.Parameter(ag.zeros(1))  # C++ layers have a fixed set of parameters
    with pytest.raises(AttributeError):
        lin.note = "plain"
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        lin.nothing
    mha = nn.MultiHeadAttention(2, 2, 2, 2, 1, 0.0)
    with pytest.raises(AttributeError):
        mha.W_q = nn.Linear(2, 2)  # would leave the C++ member pointing at the old one
    with pytest.raises(TypeError, match="child module 'W_q'"):
        mha.W_q = 3
    pos = nn.PositionalEncoding(4, 0.0, 10)
    pos.P = ag.zeros(1, 10, 4)  # a buffer slot takes a tensor
    np.testing.assert_array_equal(a(pos.P), np.zeros((1, 10, 4)))
    with pytest.raises(TypeError, match="buffer 'P'"):
        pos.P = 1.0


def test_parameter():
    t = ag.ones(3)
    p = nn.Parameter(t)
    assert isinstance(p, ag.Tensor) and isinstance(p, nn.Parameter)
    assert p.requires_grad and p.is_leaf and not t.requires_grad
    assert repr(p) == "Parameter containing:\ntensor([1., 1., 1.], requires_grad=True)"
    with ag.no_grad():
        p.fill_(2.0)
    np.testing.assert_array_equal(a(t), np.full(3, 2.0))  # the same data, as PyTorch's
    frozen = nn.Parameter(ag.ones(2), requires_grad=False)
    assert not frozen.requires_grad
    assert nn.Parameter().shape == (0,)


# ---- functional, init, utils --------------------------------------------------------------------


def test_functional():
    import ag.nn.functional as F

    x = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    w = np.random.default_rng(1).standard_normal((4, 3)).astype(np.float32)
    np.testing.assert_allclose(a(F.linear(ag.tensor(x), ag.tensor(w))), x @ w.T, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(a(F.mse_loss(ag.tensor(x), ag.zeros(2, 3))), (x**2).mean(), rtol=1e-5)
    weights = a(F.masked_softmax(ag.ones(2, 2, 4), ag.tensor([2, 3])))
    np.testing.assert_allclose(weights[0, 0], [0.5, 0.5, 0, 0], atol=1e-7)
    np.testing.assert_allclose(weights[1, 1], [1 / 3, 1 / 3, 1 / 3, 0], rtol=1e-6, atol=1e-7)
    loss = F.masked_softmax_ce(ag.zeros(2, 3, 5), ag.zeros(2, 3, dtype=ag.int64), ag.tensor([1, 2]))
    np.testing.assert_allclose(loss.item(), math.log(5), rtol=1e-6)


def test_init():
    w = ag.empty(3, 4)
    assert nn.init.constant_(w, 0.5) is w
    np.testing.assert_array_equal(a(w), np.full((3, 4), 0.5))
    nn.init.zeros_(w)
    assert a(w).sum() == 0
    nn.init.ones_(w)
    assert a(w).sum() == 12
    nn.init.uniform_(w, -0.1, 0.1)
    assert np.all(np.abs(a(w)) <= 0.1)
    bound = math.sqrt(6 / 7)
    nn.init.xavier_uniform_(w)
    assert np.all(np.abs(a(w)) <= bound)
    nn.init.normal_(w, 0.0, 0.02)
    assert np.all(np.abs(a(w)) < 0.2)
    nn.init.kaiming_uniform_(w, a=math.sqrt(5))
    assert np.all(np.abs(a(w)) <= 1 / math.sqrt(4))
    # PyTorch's gains, kaiming_normal_ (makemore's nonlinearity='tanh'), xavier_normal_, fan_out,
    # and PyTorch 2's generator=
    assert nn.init.calculate_gain("tanh") == 5 / 3
    assert nn.init.calculate_gain("relu") == math.sqrt(2)
    assert nn.init.calculate_gain("leaky_relu", 0.2) == math.sqrt(2 / 1.04)
    big = ag.empty(300, 200)  # fan_in 200, fan_out 300
    assert nn.init.kaiming_normal_(big, nonlinearity="tanh") is big
    assert abs(a(big).std() / ((5 / 3) / math.sqrt(200)) - 1) < 0.03
    nn.init.kaiming_normal_(big, mode="fan_out", nonlinearity="relu")
    assert abs(a(big).std() / math.sqrt(2 / 300) - 1) < 0.03
    nn.init.xavier_normal_(big)
    assert abs(a(big).std() / math.sqrt(2 / 500) - 1) < 0.03
    seeded = lambda: nn.init.normal_(ag.empty(5), generator=ag.Generator().manual_seed(7))  # noqa: E731
    assert a(seeded()).tolist() == a(seeded()).tolist()
    ag.manual_seed(7)
    assert a(seeded()).tolist() == a(nn.init.normal_(ag.empty(5))).tolist()
    with pytest.raises(ValueError, match="mode must be 'fan_in' or 'fan_out'"):
        nn.init.kaiming_normal_(big, mode="fan_avg")
    with pytest.raises(ag.ValueError, match="unsupported nonlinearity 'gelu'"):
        nn.init.kaiming_uniform_(big, nonlinearity="gelu")


def test_clip_grad_norm():
    p1 = nn.Parameter(ag.zeros(2))
    p2 = nn.Parameter(ag.zeros(2))
    p1.grad = ag.tensor([3.0, 0.0])
    p2.grad = ag.tensor([0.0, 4.0])
    total = nn.utils.clip_grad_norm_([p1, p2], max_norm=1.0)
    assert isinstance(total, ag.Tensor) and total.item() == pytest.approx(5.0)
    np.testing.assert_allclose(a(p1.grad), [0.6, 0.0], rtol=1e-5)
    np.testing.assert_allclose(a(p2.grad), [0.0, 0.8], rtol=1e-5)
    assert nn.utils.clip_grad_norm_(p1, 10.0).item() == pytest.approx(0.6, rel=1e-5)
    with pytest.raises(ValueError):
        nn.utils.clip_grad_norm_([p1], 1.0, norm_type=1.0)


def test_fused_kernels_switch():
    assert nn.fused_kernels()
    attention = nn.MultiHeadAttention(8, 8, 8, 8, 2, 0.0)
    x = randn(2, 3, 8)
    fused = a(attention(x, x, x, ag.tensor([2, 3])))
    nn.set_fused_kernels(False)
    try:
        composed = a(attention(x, x, x, ag.tensor([2, 3])))
    finally:
        nn.set_fused_kernels(True)
    np.testing.assert_allclose(fused, composed, rtol=1e-5, atol=1e-6)


def test_python_children_outlive_their_names():
    class Half(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(2, 2)
            self.tag = "python half"

        def forward(self, x):
            return self.lin(x)

    layers = nn.ModuleList([Half()])
    seq = nn.Sequential(Half())
    d = nn.ModuleDict({"h": Half()})
    gc.collect()
    for module in (layers[0], seq[0], d["h"]):
        assert type(module) is Half and module.tag == "python half"
    assert seq(ag.ones(1, 2)).shape == (1, 2)
    assert repr(layers) == "ModuleList(\n  (0): Half(\n    (lin): Linear(in_features=2, out_features=2, bias=True)\n  )\n)"


def test_module_list_slices():
    layers = nn.ModuleList([nn.ReLU(), nn.Tanh(), nn.Linear(1, 1)])
    tail = layers[1:]
    assert isinstance(tail, nn.ModuleList) and [type(m).__name__ for m in tail] == ["Tanh", "Linear"]
    assert tail[1].weight.is_same(layers[2].weight)  # the same modules
    assert [type(m).__name__ for m in layers[::-1]] == ["Linear", "Tanh", "ReLU"]


def test_python_subclass_of_a_cpp_layer():
    class Unbiased(nn.Linear):
        def forward(self, input):  # a Python forward over the C++ layer's parameters
            return nn.functional.linear(input, self.weight)

    layer = Unbiased(3, 2)
    assert isinstance(layer, nn.Linear) and layer.in_features == 3
    x = np.ones((1, 3), np.float32)
    np.testing.assert_allclose(a(layer(ag.tensor(x))), x @ a(layer.weight).T, rtol=1e-6)
    holder = nn.ModuleList([Unbiased(2, 2)])
    gc.collect()
    assert type(holder[0]) is Unbiased  # the Python half is kept with the C++ parent


def test_forward_releases_the_gil():
    # Four threads run one layer at once (each forward releases the GIL): the serial results.
    # (A stateless layer: the attention layers keep their last weights, written by each call.)
    import threading

    ffn = nn.PositionWiseFFN(16, 64, 16)
    inputs = [randn(2, 8, 16, seed=s) for s in range(4)]
    expected = [a(ffn(x)) for x in inputs]
    results = [None] * 4

    def work(i):
        for _ in range(20):
            results[i] = a(ffn(inputs[i]))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for got, want in zip(results, expected):
        np.testing.assert_array_equal(got, want)


def test_dir_lists_parameters_and_children():
    names = dir(nn.MultiHeadAttention(2, 2, 2, 2, 1, 0.0))
    assert {"W_q", "W_o", "attention", "forward", "num_heads"} <= set(names)
    assert "weight" in dir(nn.Linear(1, 1)) and "P" in dir(nn.PositionalEncoding(2, 0.0, 4))


def test_dropout_p_is_writable():
    drop = nn.Dropout(0.5)
    drop.p = 0.25
    assert drop.p == 0.25 and repr(drop) == "Dropout(p=0.25, inplace=False)"


def test_loss_modules():
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    assert nn.MSELoss()(ag.tensor(x), ag.zeros(3, 4)).item() == pytest.approx(float((x**2).mean()), rel=1e-6)
    with pytest.raises(ValueError):
        nn.MSELoss(reduction="sum")
    target = np.array([0, 3, 1])
    logp = x - np.log(np.exp(x).sum(1, keepdims=True))
    loss = nn.CrossEntropyLoss()(ag.tensor(x), ag.tensor(target))
    assert loss.item() == pytest.approx(float(-logp[np.arange(3), target].mean()), rel=1e-5)
    per_row = nn.CrossEntropyLoss(reduction="none")(ag.tensor(x), ag.tensor(target))
    np.testing.assert_allclose(a(per_row), -logp[np.arange(3), target], rtol=1e-5)
