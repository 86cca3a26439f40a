"""ag.nn.functional (python/ag/nn/functional.py): PyTorch's signatures over ag's ops, values
against NumPy computed here, and the arguments ag refuses."""

import math

import numpy as np
import pytest

import ag
import ag.nn.functional as F


def rand(shape, dtype=np.float64, low=-2.0, high=2.0, seed=0):
    a = np.random.default_rng(seed).uniform(low, high, shape).astype(dtype)
    return a, ag.tensor(a)


def close(t, expected, dtype=np.float64):
    assert t.dtype == {np.float32: ag.float32, np.float64: ag.float64}[dtype]
    tol = dict(rtol=1e-5, atol=1e-6) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(t.detach().numpy(), expected, **tol)


def _softmax(a, axis):
    e = np.exp(a - a.max(axis, keepdims=True))
    return e / e.sum(axis, keepdims=True)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_activations(dtype):
    a, x = rand((3, 4), dtype)
    erf = np.vectorize(math.erf)
    close(F.relu(x), np.maximum(a, 0), dtype)
    close(F.gelu(x), (0.5 * a * (1 + erf(a / math.sqrt(2)))).astype(dtype), dtype)
    tanh_gelu = 0.5 * a * (1 + np.tanh(math.sqrt(2 / math.pi) * (a + 0.044715 * a**3)))
    close(F.gelu(x, approximate="tanh"), tanh_gelu.astype(dtype), dtype)
    close(F.silu(x), (a / (1 + np.exp(-a))).astype(dtype), dtype)
    close(F.tanh(x), np.tanh(a), dtype)
    close(F.sigmoid(x), (1 / (1 + np.exp(-a))).astype(dtype), dtype)
    close(F.softmax(x, dim=-1), _softmax(a, -1).astype(dtype), dtype)
    close(F.softmax(x, 0), _softmax(a, 0).astype(dtype), dtype)
    close(F.log_softmax(x, dim=1), np.log(_softmax(a, 1)).astype(dtype), dtype)


def test_inplace_activations_write_into_the_input():
    a, x = rand((5,))
    out = F.relu(x, inplace=True)
    assert out is x
    np.testing.assert_array_equal(x.numpy(), np.maximum(a, 0))
    w = ag.ones(3).requires_grad_()
    with pytest.raises(ag.AutogradError):
        F.relu(w, inplace=True)  # not differentiable in ag: refused, never silently wrong


def test_softmax_needs_dim():
    with pytest.raises(TypeError, match="dim"):
        F.softmax(ag.ones(3))
    with pytest.raises(TypeError, match="dtype"):
        F.log_softmax(ag.ones(3), -1, dtype=ag.float64)


def test_dropout():
    a, x = rand((100,))
    close(F.dropout(x, 0.5, training=False), a)
    close(F.dropout(x, p=0.0), a)
    ag.manual_seed(0)
    d = F.dropout(x, p=0.25).numpy()
    kept = d != 0
    np.testing.assert_allclose(d[kept], a[kept] / 0.75)
    assert 50 < kept.sum() < 100
    with pytest.raises(ValueError, match="between 0 and 1"):
        F.dropout(x, 1.5)


def test_linear_and_layer_norm():
    a, x = rand((2, 3))
    w, W = rand((4, 3), seed=1)
    b, B = rand((4,), seed=2)
    close(F.linear(x, W, B), a @ w.T + b)
    close(F.linear(x, W), a @ w.T)
    g, G = rand((3,), seed=3)
    normed = (a - a.mean(-1, keepdims=True)) / np.sqrt(a.var(-1, keepdims=True) + 1e-5)
    close(F.layer_norm(x, (3,), G, B[:3]), normed * g + b[:3])
    close(F.layer_norm(x, [3], weight=G), normed * g)
    with pytest.raises(ag.ShapeError, match="layer_norm"):
        F.layer_norm(x, (4,))


def test_rms_norm():
    # PyTorch 2.4's F.rms_norm(input, normalized_shape, weight=None, eps=None).
    a, x = rand((2, 3))
    g, G = rand((3,), seed=3)
    eps = np.finfo(np.float64).eps  # eps None: torch.finfo(input.dtype).eps
    normed = a / np.sqrt((a * a).mean(-1, keepdims=True) + eps)
    close(F.rms_norm(x, (3,), G), normed * g)
    close(F.rms_norm(x, [3]), normed)
    close(F.rms_norm(x, (2, 3), eps=0.25), a / np.sqrt((a * a).mean() + 0.25))
    a32, x32 = rand((2, 3), np.float32)
    eps32 = np.finfo(np.float32).eps
    close(F.rms_norm(x32, 3), a32 / np.sqrt((a32 * a32).mean(-1, keepdims=True) + eps32), np.float32)
    assert "rms_norm" in F.__all__
    with pytest.raises(ag.ShapeError, match="rms_norm"):
        F.rms_norm(x, (4,))


def test_cross_entropy_reductions_and_refused_arguments():
    a, x = rand((3, 5))
    t = np.array([4, 0, 2])
    lse = np.log(np.exp(a).sum(-1))
    per_row = lse - a[np.arange(3), t]
    target = ag.tensor(t)
    close(F.cross_entropy(x, target), per_row.mean())
    close(F.cross_entropy(x, target, reduction="sum"), per_row.sum())
    close(F.cross_entropy(x, target, reduction="none"), per_row)
    # d2l's MaskedSoftmaxCELoss: pred (B, T, V) permuted to (B, V, T), label (B, T)
    p, pred = rand((2, 4, 5), seed=4)
    label = np.array([[1, 2, 3, 4], [0, 0, 1, 1]])
    loss = F.cross_entropy(pred.permute(0, 2, 1), ag.tensor(label), reduction="none")
    expected = np.log(np.exp(p).sum(-1)) - np.take_along_axis(p, label[..., None], -1)[..., 0]
    close(loss, expected)
    # ignore_index: nanoGPT's -1, and PyTorch's default -100; the mean is over the rest
    ignored = ag.tensor([4, -1, 2])
    close(F.cross_entropy(x, ignored, ignore_index=-1), per_row[[0, 2]].mean())
    close(F.cross_entropy(x, ignored, ignore_index=-1, reduction="none"), per_row * [1, 0, 1])
    close(F.cross_entropy(x, ag.tensor([-100, 0, -100])), per_row[1])
    loss = F.cross_entropy(pred.permute(0, 2, 1), ag.tensor([[1, -100, 3, 4], [-100, 0, 1, 1]]))
    close(loss, expected[[0, 0, 0, 1, 1, 1], [0, 2, 3, 1, 2, 3]].mean())
    with pytest.raises(ag.ValueError, match="every one of the 3 targets is ignore_index"):
        F.cross_entropy(x, ag.tensor([-1, -1, -1]), ignore_index=-1)
    for kwargs in ({"weight": ag.ones(5)}, {"label_smoothing": 0.1}, {"reduce": False}):
        with pytest.raises(ValueError):
            F.cross_entropy(x, target, **kwargs)


def test_one_hot_and_embedding():
    oh = F.one_hot(ag.tensor([[0, 2], [1, 0]]), num_classes=3)
    assert oh.dtype == ag.int64 and oh.shape == (2, 2, 3)
    np.testing.assert_array_equal(oh.numpy(), np.eye(3, dtype=np.int64)[[[0, 2], [1, 0]]])
    with pytest.raises(ag.ValueError, match="one_hot"):
        F.one_hot(ag.tensor([3]), 3)
    w, W = rand((6, 4))
    ids = np.array([[5, 0, 2], [1, 1, 3]])
    e = F.embedding(ag.tensor(ids), W)
    assert e.shape == (2, 3, 4)
    close(e, w[ids])
    with pytest.raises(ValueError, match="padding_idx"):
        F.embedding(ag.tensor(ids), W, padding_idx=0)
    with pytest.raises(ag.ShapeError, match="embedding"):
        F.embedding(ag.tensor(ids), ag.ones(6))


def _sdpa(q, k, v, causal=False):
    s = q @ k.swapaxes(-1, -2) / math.sqrt(q.shape[-1])
    if causal:
        s = np.where(np.tril(np.ones(s.shape[-2:], bool)), s, -np.inf)
    return _softmax(s, -1) @ v


def test_scaled_dot_product_attention():
    q, Q = rand((2, 2, 3, 4), seed=5)
    k, K = rand((2, 2, 3, 4), seed=6)
    v, V = rand((2, 2, 3, 5), seed=7)
    close(F.scaled_dot_product_attention(Q, K, V), _sdpa(q, k, v))
    close(F.scaled_dot_product_attention(Q, K, V, is_causal=True), _sdpa(q, k, v, True))
    close(F.scaled_dot_product_attention(Q[0], K[0], V[0]), _sdpa(q[0], k[0], v[0]))  # (N, T, d)
    with pytest.raises(ValueError, match="attn_mask is not supported"):
        F.scaled_dot_product_attention(Q, K, V, attn_mask=ag.ones(3, 3).bool())
    with pytest.raises(ValueError, match="scale"):
        F.scaled_dot_product_attention(Q, K, V, scale=0.5)


def test_scaled_dot_product_attention_enable_gqa():
    # PyTorch 2.5's enable_gqa: key and value have fewer heads (dim -3), each read by a group of
    # consecutive query heads (repeat_interleave along the heads).
    q, Q = rand((2, 4, 3, 5), seed=5)
    k, K = rand((2, 2, 3, 5), seed=6)
    v, V = rand((2, 2, 3, 6), seed=7)
    k4, v4 = np.repeat(k, 2, axis=1), np.repeat(v, 2, axis=1)
    close(F.scaled_dot_product_attention(Q, K, V, enable_gqa=True), _sdpa(q, k4, v4))
    close(F.scaled_dot_product_attention(Q, K, V, is_causal=True, enable_gqa=True), _sdpa(q, k4, v4, True))
    # (N, T, d): PyTorch reads dim -3 as the heads, here 4 query heads over 2.
    close(F.scaled_dot_product_attention(Q[0], K[0], V[0], enable_gqa=True), _sdpa(q[0], k4[0], v4[0]))
    with pytest.raises(ag.ShapeError, match="enable_gqa"):
        F.scaled_dot_product_attention(Q, K, V)  # fewer heads, enable_gqa not set
    with pytest.raises(TypeError):
        F.scaled_dot_product_attention(Q, K, V, None, 0.0, False, None, True)  # keyword-only


def test_gradient_through_functional_against_finite_differences():
    rng = np.random.default_rng(8)
    a = rng.normal(size=(3, 4))
    w = rng.normal(size=(2, 4))
    target = ag.tensor([1, 0, 1])

    def loss(x, weight):
        return F.cross_entropy(F.linear(F.gelu(x), weight), target)

    xs = [ag.tensor(a).requires_grad_(), ag.tensor(w).requires_grad_()]
    loss(*xs).backward()
    for i, base in enumerate((a, w)):
        numeric = np.zeros_like(base)
        for idx in np.ndindex(base.shape):
            vals = []
            for step in (1e-6, -1e-6):
                args = [a.copy(), w.copy()]
                args[i][idx] += step
                vals.append(loss(*[ag.tensor(b) for b in args]).item())
            numeric[idx] = (vals[0] - vals[1]) / 2e-6
        np.testing.assert_allclose(xs[i].grad.numpy(), numeric, atol=1e-7, rtol=1e-5)
