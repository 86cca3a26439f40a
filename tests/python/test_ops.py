"""ag's ops from Python (python/src/ops.cpp): values against NumPy computed here, dtypes as
PyTorch promotes them, gradients against central differences in float64, and the errors."""

import math

import numpy as np
import pytest

import ag

FLOATS = [ag.float32, ag.float64]
NP = {ag.float32: np.float32, ag.float64: np.float64, ag.int64: np.int64, ag.bool: np.bool_}


def tol(dtype):
    return dict(rtol=1e-5, atol=1e-6) if dtype == ag.float32 else dict(rtol=1e-12, atol=1e-12)


def rand(shape, dtype=ag.float64, low=-2.0, high=2.0, seed=0):
    """A NumPy array and the ag tensor holding a copy of it."""
    a = np.random.default_rng(seed).uniform(low, high, shape).astype(NP[dtype])
    return a, ag.tensor(a)


def close(t, expected, dtype=None):
    """t (an ag tensor) holds `expected` (NumPy) in dtype (default: t's)."""
    assert isinstance(t, ag.Tensor)
    dtype = dtype or t.dtype
    assert t.dtype == dtype
    np.testing.assert_allclose(t.detach().numpy(), expected, **tol(dtype))


# ---- finite differences --------------------------------------------------------------------------


def check_grad(f, *arrays, eps=1e-6, atol=1e-6, rtol=1e-5):
    """The gradient of sum(f(*xs) · w) for a random upstream w, by backward and by central
    differences in float64, for every float64 array given."""
    w = None
    xs = [ag.tensor(a).requires_grad_() for a in arrays]
    out = f(*xs)
    w = np.random.default_rng(1).uniform(0.5, 1.5, tuple(out.shape))
    (out * ag.tensor(w)).sum().backward()
    for i, a in enumerate(arrays):
        numeric = np.zeros_like(a)
        for idx in np.ndindex(a.shape):
            values = []
            for step in (eps, -eps):
                moved = [b.copy() for b in arrays]
                moved[i][idx] += step
                with ag.no_grad():
                    y = f(*[ag.tensor(b) for b in moved]).numpy()
                values.append(float((y * w).sum()))
            numeric[idx] = (values[0] - values[1]) / (2 * eps)
        np.testing.assert_allclose(xs[i].grad.numpy(), numeric, atol=atol, rtol=rtol)


# ---- arithmetic ----------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", FLOATS)
def test_arithmetic_operators_match_numpy(dtype):
    a, x = rand((2, 3), dtype)
    b, y = rand((3,), dtype, 0.5, 2.0, seed=2)
    close(x + y, a + b)
    close(x - y, a - b)
    close(x * y, a * b)
    close(x / y, a / b)
    close(-x, -a)
    close(abs(x), np.abs(a))
    close(x + 2, a + 2)
    close(2 + x, 2 + a)
    close(x - 1.5, a - 1.5)
    close(2 - x, 2 - a)
    close(3 * x, 3 * a)
    close(x * 0.5, a * 0.5)
    close(x / 4, a / 4)
    close(1 / y, 1 / b)
    close(2.5 / y, 2.5 / b)
    close(y**2, b**2)
    close(y**0.5, b**0.5)
    close(ag.add(x, y, alpha=2), a + 2 * b)
    close(x.sub(y, alpha=0.5), a - 0.5 * b)
    close(ag.mul(x, 3), a * 3)
    close(ag.div(x, y), a / b)
    close(ag.multiply(x, y), a * b)


@pytest.mark.parametrize("dtype", FLOATS)
def test_matmul_operator_and_function(dtype):
    a, x = rand((2, 3, 4), dtype)
    b, y = rand((4, 5), dtype, seed=3)
    close(x @ y, a @ b)
    close(ag.matmul(x, y), a @ b)
    close(x.matmul(y), a @ b)
    close(ag.mm(x[0], y), a[0] @ b)
    with pytest.raises(ag.ShapeError, match="mm"):
        ag.mm(x, y)
    c, z = rand((2, 4, 5), dtype, seed=4)
    close(ag.bmm(x, z), a @ c)


def test_python_scalars_follow_pytorch_promotion():
    i = ag.arange(4)  # int64
    assert i.dtype == ag.int64
    assert (i + 1).dtype == ag.int64 and (i + 1).tolist() == [1, 2, 3, 4]
    assert (1 + i).dtype == ag.int64
    assert (i - 1).tolist() == [-1, 0, 1, 2] and (i - 1).dtype == ag.int64
    assert (10 - i).tolist() == [10, 9, 8, 7] and (10 - i).dtype == ag.int64
    assert (i * 2).dtype == ag.int64 and (2 * i).tolist() == [0, 2, 4, 6]
    assert (i + 1.5).dtype == ag.float32 and (i + 1.5).tolist() == [1.5, 2.5, 3.5, 4.5]
    assert (i * 0.5).dtype == ag.float32
    assert (i / 2).dtype == ag.float32 and (i / 2).tolist() == [0.0, 0.5, 1.0, 1.5]
    # an int64 keeps its exactness beyond float's 2^53
    big = ag.tensor([2**60])
    assert (big + 1).tolist() == [2**60 + 1]
    # NumPy scalars are their Python numbers
    assert (i + np.int64(1)).dtype == ag.int64
    assert (i + np.float64(0.5)).dtype == ag.float32
    # tensors promote as PyTorch's do, except that ag does not mix float32 with float64
    f32 = ag.ones(2)
    f64 = ag.ones(2, dtype=ag.float64)
    with pytest.raises(ag.DTypeError, match="add: dtypes float32 and float64 cannot be mixed"):
        f32 + f64
    assert (ag.tensor([True, False]) + f64).dtype == ag.float64
    assert (ag.arange(2) + f32).dtype == ag.float32
    assert (f64 * 2).dtype == ag.float64 and (f32 + 1).dtype == ag.float32
    # an int beyond int64 cannot go into an int64 tensor
    with pytest.raises(ag.ValueError, match="add"):
        i + 2**70
    assert (f64 + 2**70).tolist() == [2.0**70, 2.0**70]


def test_operators_refuse_other_types():
    x = ag.ones(2)
    with pytest.raises(TypeError):
        x + "a"
    with pytest.raises(TypeError):
        ag.add(x, "a")
    with pytest.raises(TypeError, match="NumPy array"):
        x + np.ones(2)
    with pytest.raises(TypeError, match="NumPy array"):
        np.ones(2) + x  # NumPy defers to the tensor (__array_priority__), which refuses
    assert (x == None) is False  # noqa: E711  (Python's fallback, as PyTorch's)
    assert (x != None) is True  # noqa: E711


@pytest.mark.parametrize("dtype", FLOATS + [ag.int64])
def test_comparisons_are_elementwise_bool(dtype):
    a = np.array([[1, 2, 3], [4, 5, 6]]).astype(NP[dtype])
    b = np.array([3, 2, 1]).astype(NP[dtype])
    x, y = ag.tensor(a), ag.tensor(b)
    for got, want in [
        (x == y, a == b),
        (x != y, a != b),
        (x < y, a < b),
        (x <= y, a <= b),
        (x > y, a > b),
        (x >= y, a >= b),
        (x == 2, a == 2),
        (x < 3, a < 3),
        (2 < x, 2 < a),  # reflected: x.__gt__(2)
        (x >= 2.5, a >= 2.5),
        (ag.eq(x, y), a == b),
        (ag.ne(x, 2), a != 2),
        (x.lt(y), a < b),
        (ag.le(x, 4), a <= 4),
        (x.gt(y), a > b),
        (ag.ge(x, y), a >= b),
    ]:
        assert got.dtype == ag.bool
        np.testing.assert_array_equal(got.numpy(), want)


def test_integer_comparison_is_exact_beyond_2_pow_53():
    x = ag.tensor([2**60, 2**60 + 1])
    assert (x == 2**60 + 1).tolist() == [False, True]
    assert (x > 2**60).tolist() == [False, True]


def test_invert_is_logical_not_of_bool():
    m = ag.tensor([True, False])
    assert (~m).tolist() == [False, True]
    with pytest.raises(ag.DTypeError, match="bool"):
        ~ag.ones(2)


# ---- in-place ------------------------------------------------------------------------------------


def test_iadd_updates_in_place():
    x = ag.ones(2, 3)
    alias, ptr = x, x.data_ptr()
    view = x[0]
    x += 1
    assert x is alias and x.data_ptr() == ptr
    assert view.tolist() == [2.0, 2.0, 2.0]
    x *= 3
    x -= 1
    x /= 5
    assert x.tolist() == [[1.0] * 3] * 2
    x += ag.tensor([1.0, 2.0, 3.0])  # broadcast into x's shape
    assert x.tolist() == [[2.0, 3.0, 4.0]] * 2


def test_iadd_keeps_dtype_or_refuses():
    i = ag.arange(3)
    i += 1
    assert i.dtype == ag.int64 and i.tolist() == [1, 2, 3]
    i *= 2
    assert i.tolist() == [2, 4, 6]
    with pytest.raises(ag.DTypeError, match="can't be cast"):
        i += 1.5
    with pytest.raises(ag.DTypeError, match="can't be cast"):
        i /= 2  # true division: float32
    x = ag.ones(3)
    with pytest.raises(ag.ShapeError, match="doesn't match the broadcast shape"):
        x += ag.ones(2, 3)


def test_in_place_on_a_parameter_or_a_shared_tensor_is_refused():
    w = ag.ones(2).requires_grad_()
    with pytest.raises(ag.AutogradError, match="leaf .* that requires grad"):
        w += 1
    with pytest.raises(ag.AutogradError, match="leaf .* that requires grad"):
        w.add_(ag.ones(2))
    with pytest.raises(ag.AutogradError, match="leaf .* that requires grad"):
        w.mul_(2)
    h = ag.tanh(w)  # tanh keeps its output for its backward
    with pytest.raises(ag.AutogradError, match="memory another tensor shares"):
        h += 1
    y = w * 2
    row = y[0]  # a view of y
    with pytest.raises(ag.AutogradError, match="memory another tensor shares"):
        y += 1
    with pytest.raises(ag.AutogradError, match="memory another tensor shares"):
        row += 1
    with pytest.raises(TypeError, match="unsupported operand type str"):
        (w * 2).__iadd__("a")
    with ag.no_grad():
        w += 1
        w.add_(ag.ones(2), alpha=-0.5)
        w.mul_(4)
    assert w.tolist() == [6.0, 6.0]


def test_in_place_in_the_graph_is_recorded():
    """x ⊕= y where x or y requires grad records the op, as PyTorch's: makemore's Linear adds its
    bias with self.out += self.bias; the gradients are those of x = x ⊕ y."""
    w = ag.tensor([1.0, -2.0, 3.0], dtype=ag.float64).requires_grad_()
    b = ag.tensor([0.5, 0.25, -1.0], dtype=ag.float64).requires_grad_()
    out = w * 3  # (3,)
    alias = out
    out += b
    out *= w  # mul keeps the value before the update for its backward
    out -= 1
    out /= b
    assert alias is out and out.grad_fn == "div" and not out.is_leaf
    out.sum().backward()
    w_grad, b_grad = w.grad.tolist(), b.grad.tolist()
    w2 = ag.tensor([1.0, -2.0, 3.0], dtype=ag.float64).requires_grad_()
    b2 = ag.tensor([0.5, 0.25, -1.0], dtype=ag.float64).requires_grad_()
    (((w2 * 3 + b2) * w2 - 1) / b2).sum().backward()
    assert w_grad == w2.grad.tolist() and b_grad == b2.grad.tolist()
    # a tensor outside the graph joins it, as in PyTorch (its gradient is not lost)
    x = ag.zeros(3, dtype=ag.float64)
    x += w
    x.add_(b, alpha=2)
    assert x.requires_grad and x.grad_fn == "add"
    w.grad = b.grad = None
    x.sum().backward()
    assert w.grad.tolist() == [1.0, 1.0, 1.0] and b.grad.tolist() == [2.0, 2.0, 2.0]
    # copy_ of a source that requires grad, as PyTorch's: broadcast, the gradient summed back
    z = ag.zeros(2, 3, dtype=ag.float64)
    z.copy_(w * 2)
    assert z.grad_fn == "clone" and z.tolist() == [[2.0, -4.0, 6.0]] * 2
    w.grad = None
    z.sum().backward()
    assert w.grad.tolist() == [4.0, 4.0, 4.0]
    y = w * 1
    y.copy_(ag.ones(3, dtype=ag.float64))  # y's old value gets no gradient: y leaves the graph
    assert not y.requires_grad and y.tolist() == [1.0, 1.0, 1.0]
    with pytest.raises(ag.DTypeError, match="copy_: the source's dtype float64 is not"):
        ag.zeros(3).copy_(w)


def test_retain_grad_keeps_an_op_outputs_gradient():
    w = ag.tensor([1.0, 2.0], dtype=ag.float64).requires_grad_()
    h = w * w  # (2,)
    assert not h.retains_grad
    h.retain_grad()
    assert h.retains_grad and not w.retains_grad
    w.retain_grad()  # a leaf keeps its gradient anyway: nothing to do
    (h * 3).sum().backward(retain_graph=True)
    assert h.grad.tolist() == [3.0, 3.0] and w.grad.tolist() == [6.0, 12.0]
    (h * 3).sum().backward()  # accumulated, as a leaf's
    assert h.grad.tolist() == [6.0, 6.0]
    with pytest.raises(ag.AutogradError, match="does not require grad"):
        ag.ones(2).retain_grad()
    # after an in-place update the retained gradient is the updated tensor's
    y = w * 2
    y.retain_grad()
    y *= 5
    assert y.retains_grad
    y.sum().backward()
    assert y.grad.tolist() == [1.0, 1.0]


def test_add_and_mul_methods_in_place():
    x = ag.ones(3, dtype=ag.float64)
    assert x.add_(ag.tensor([1.0, 2.0, 3.0], dtype=ag.float64), alpha=2) is x
    assert x.tolist() == [3.0, 5.0, 7.0]
    assert x.mul_(0.5) is x
    assert x.tolist() == [1.5, 2.5, 3.5]
    x.add_(1)
    x.mul_(ag.tensor([2.0, 0.0, 1.0], dtype=ag.float64))
    assert x.tolist() == [5.0, 0.0, 4.5]
    i = ag.arange(3)
    i.add_(2)
    i.mul_(3)
    assert i.tolist() == [6, 9, 12] and i.dtype == ag.int64


# ---- elementwise math ----------------------------------------------------------------------------


def _sigmoid(a):
    return 1 / (1 + np.exp(-a))


UNARY = {
    "exp": np.exp,
    "tanh": np.tanh,
    "sigmoid": _sigmoid,
    "relu": lambda a: np.maximum(a, 0),
    "sin": np.sin,
    "cos": np.cos,
    "erf": np.vectorize(math.erf),
    "abs": np.abs,
    "neg": np.negative,
}
POSITIVE = {"log": np.log, "sqrt": np.sqrt, "rsqrt": lambda a: 1 / np.sqrt(a)}


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("name", sorted(UNARY) + sorted(POSITIVE))
def test_unary_math_matches_numpy(dtype, name):
    fn = UNARY.get(name) or POSITIVE[name]
    low = 0.1 if name in POSITIVE else -3.0
    a, x = rand((3, 4), dtype, low, 3.0)
    close(getattr(ag, name)(x), fn(a).astype(NP[dtype]))
    close(getattr(x, name)(), fn(a).astype(NP[dtype]))


@pytest.mark.parametrize("dtype", FLOATS)
def test_gelu_and_silu(dtype):
    a, x = rand((10,), dtype, -3.0, 3.0)
    erf = np.vectorize(math.erf)
    close(ag.gelu(x), (0.5 * a * (1 + erf(a / math.sqrt(2)))).astype(NP[dtype]))
    tanh_form = 0.5 * a * (1 + np.tanh(math.sqrt(2 / math.pi) * (a + 0.044715 * a**3)))
    close(ag.gelu(x, approximate="tanh"), tanh_form.astype(NP[dtype]))
    close(ag.silu(x), (a * _sigmoid(a)).astype(NP[dtype]))
    with pytest.raises(ag.ValueError):
        ag.gelu(x, approximate="fast")


def test_unary_math_refuses_int64():
    with pytest.raises(ag.DTypeError, match="sqrt"):
        ag.arange(3).sqrt()
    with pytest.raises(TypeError):  # ag.DTypeError is a TypeError
        ag.exp(ag.arange(3))


@pytest.mark.parametrize("dtype", FLOATS)
def test_pow_with_a_scalar_base_is_exp_of_log(dtype):
    # d2l's PositionalEncoding: X = torch.pow(10000, torch.arange(0, num_hiddens, 2) / num_hiddens)
    a = (np.arange(0, 32, 2) / 32).astype(NP[dtype])
    x = ag.tensor(a)
    expected = np.power(10000.0, a.astype(np.float64))
    got = ag.pow(10000, x)
    assert got.dtype == dtype
    np.testing.assert_allclose(got.numpy(), expected, rtol=2e-6 if dtype == ag.float32 else 1e-12)
    np.testing.assert_allclose((2**x).numpy(), 2.0 ** a.astype(np.float64), rtol=2e-6)
    close(ag.pow(x, 2), a**2)
    close(x.pow(3.0), a**3)
    with pytest.raises(ag.ValueError, match="pow: a scalar base must be positive"):
        ag.pow(-2, x)
    with pytest.raises(ag.DTypeError, match="pow"):
        ag.pow(2, ag.arange(3))
    with pytest.raises(ag.DTypeError, match="tensor exponent"):
        x**x


@pytest.mark.parametrize("dtype", FLOATS)
def test_maximum_minimum_clamp(dtype):
    a, x = rand((2, 3), dtype)
    b, y = rand((3,), dtype, seed=5)
    close(ag.maximum(x, y), np.maximum(a, b))
    close(x.minimum(y), np.minimum(a, b))
    close(ag.max(x, y), np.maximum(a, b))  # torch.max(a, b) is maximum
    close(ag.min(x, y), np.minimum(a, b))
    close(ag.clamp(x, -0.5, 0.5), np.clip(a, -0.5, 0.5))
    close(x.clamp(min=0.0), np.maximum(a, 0))
    close(x.clamp(max=1), np.minimum(a, 1))
    close(ag.clip(x, -1, 1), np.clip(a, -1, 1))
    with pytest.raises(ag.ValueError, match="clamp"):
        x.clamp()


def test_where_and_masked_fill():
    a, x = rand((2, 3), ag.float32)
    mask = x > 0
    m = a > 0
    close(ag.where(mask, x, -x), np.where(m, a, -a))
    close(ag.where(mask, x, 0.0), np.where(m, a, 0.0).astype(np.float32))
    close(ag.where(mask, 1.0, x), np.where(m, 1.0, a).astype(np.float32))
    close(x.where(mask, 0), np.where(m, a, 0).astype(np.float32))
    i = ag.arange(6).reshape(2, 3)
    assert ag.where(i > 2, i, 0).dtype == ag.int64  # an int scalar keeps int64
    assert ag.where(i > 2, i, 0.5).dtype == ag.float32
    close(x.masked_fill(mask, -1e6), np.where(m, -1e6, a).astype(np.float32))
    close(ag.masked_fill(x, ~mask, 0), np.where(~m, 0, a).astype(np.float32))
    assert i.masked_fill(i > 3, 7).tolist() == [[0, 1, 2], [3, 7, 7]]
    assert ag.isnan(ag.tensor([1.0, float("nan")])).tolist() == [False, True]


# ---- reductions ----------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", FLOATS)
def test_sum_mean_over_dims(dtype):
    a, x = rand((2, 3, 4), dtype)
    close(x.sum(), a.sum())
    close(ag.sum(x), a.sum())
    close(x.sum(1), a.sum(1))
    close(x.sum(-1, keepdim=True), a.sum(-1, keepdims=True))
    close(x.sum((0, 2)), a.sum((0, 2)))
    close(x.sum([0, 2], True), a.sum((0, 2), keepdims=True))
    close(ag.sum(x, dim=()), a.sum())
    close(x.mean(), a.mean())
    close(ag.mean(x, (1, 2)), a.mean((1, 2)))
    close(x.mean(dim=0, keepdim=True), a.mean(0, keepdims=True))
    assert x.sum().shape == ()
    assert x.sum(dim=None, keepdim=True).shape == (1, 1, 1)


def test_reductions_take_numpys_keepdims_as_pytorchs_do():
    a, x = rand((3, 4), ag.float64)
    close(x.sum(1, keepdims=True), a.sum(1, keepdims=True))  # makemore's P / P.sum(1, keepdims=True)
    close(ag.mean(x, 0, keepdims=True), a.mean(0, keepdims=True))
    for name in ("sum", "mean", "amax", "amin", "std", "var", "logsumexp", "argmax", "argmin"):
        assert getattr(x, name)(1, keepdims=True).shape == (3, 1), name
        assert getattr(ag, name)(x, 1, keepdims=True).shape == (3, 1), name
    assert x.max(1, keepdims=True).values.shape == (3, 1) and (x > 0).any(1, keepdims=True).shape == (3, 1)
    with pytest.raises(TypeError, match="keepdim and keepdims are one argument"):
        x.sum(1, keepdim=True, keepdims=True)


def test_sum_of_int64_and_bool_is_int64():
    i = ag.arange(6).reshape(2, 3)
    assert i.sum().dtype == ag.int64 and i.sum().item() == 15
    assert i.sum(0).tolist() == [3, 5, 7]
    assert (i > 1).sum().dtype == ag.int64 and (i > 1).sum().item() == 4
    with pytest.raises(ag.DTypeError, match="mean"):
        i.mean()


@pytest.mark.parametrize("dtype", FLOATS)
def test_max_min_values_and_namedtuples(dtype):
    a, x = rand((3, 4), dtype)
    close(x.max(), a.max())
    close(ag.min(x), a.min())
    r = x.max(1)
    assert isinstance(r, ag.return_types.max) and isinstance(r, tuple)
    values, indices = r
    close(values, a.max(1))
    assert indices.dtype == ag.int64
    np.testing.assert_array_equal(indices.numpy(), a.argmax(1))
    assert r.values is values or r.values.is_same(values)
    r = ag.min(x, dim=0, keepdim=True)
    assert type(r).__name__ == "min"
    close(r.values, a.min(0, keepdims=True))
    np.testing.assert_array_equal(r.indices.numpy(), a.argmin(0)[None])
    assert "values=" in repr(r) and "indices=" in repr(r)
    with pytest.raises(TypeError, match="amax"):
        x.max((0, 1))
    close(x.amax((0, 1)), a.max())
    close(ag.amax(x, 1, keepdim=True), a.max(1, keepdims=True))
    close(x.amin(0), a.min(0))
    close(ag.amin(x), a.min())


@pytest.mark.parametrize("dtype", FLOATS)
def test_argmax_logsumexp_var(dtype):
    a, x = rand((3, 4), dtype)
    assert x.argmax().item() == a.argmax()
    np.testing.assert_array_equal(ag.argmax(x, 1).numpy(), a.argmax(1))
    np.testing.assert_array_equal(x.argmax(dim=0, keepdim=True).numpy(), a.argmax(0)[None])
    np.testing.assert_array_equal(x.argmin(1).numpy(), a.argmin(1))
    assert x.argmax(keepdim=True).shape == (1, 1)
    lse = np.log(np.exp(a).sum(1))
    close(x.logsumexp(1), lse.astype(NP[dtype]))
    close(ag.logsumexp(x, (0, 1)), np.log(np.exp(a).sum()).astype(NP[dtype]))
    close(x.var(), a.var(ddof=1))
    close(x.var(1), a.var(1, ddof=1))
    close(x.var(1, unbiased=False), a.var(1))
    close(ag.var(x, 0, keepdim=True, correction=0), a.var(0, keepdims=True))
    close(x.var(False), a.var())
    close(x.std(1), a.std(1, ddof=1))
    with pytest.raises(TypeError, match="unbiased or correction"):
        x.var(0, unbiased=True, correction=1)


def test_any_all():
    x = ag.tensor([[0.0, 1.0], [0.0, 0.0]])
    assert x.any().item() is True and x.all().item() is False
    assert x.any(1).tolist() == [True, False]
    assert ag.all(x + 1).item() is True
    assert x.any(dim=0, keepdim=True).tolist() == [[False, True]]


@pytest.mark.parametrize("dtype", FLOATS)
def test_softmax_log_softmax_cumsum(dtype):
    a, x = rand((2, 5), dtype)
    e = np.exp(a - a.max(-1, keepdims=True))
    sm = e / e.sum(-1, keepdims=True)
    close(x.softmax(-1), sm.astype(NP[dtype]))
    close(ag.softmax(x, dim=1), sm.astype(NP[dtype]))
    close(ag.log_softmax(x, -1), np.log(sm).astype(NP[dtype]))
    close(x.log_softmax(1), np.log(sm).astype(NP[dtype]))
    close(ag.softmax(x, 0), (np.exp(a) / np.exp(a).sum(0)).astype(NP[dtype]))
    close(x.cumsum(1), np.cumsum(a, 1))
    close(ag.cumsum(x, dim=0), np.cumsum(a, 0))
    assert ag.arange(4).cumsum(0).tolist() == [0, 1, 3, 6]


def test_topk_gather_one_hot_multinomial():
    a = np.array([[1.0, 5.0, 3.0, 2.0], [0.0, -1.0, 4.0, 4.5]], dtype=np.float32)
    x = ag.tensor(a)
    r = x.topk(2)
    assert isinstance(r, ag.return_types.topk)
    assert r.values.tolist() == [[5.0, 3.0], [4.5, 4.0]]
    assert r.indices.tolist() == [[1, 2], [3, 2]]
    v, i = ag.topk(x, 1, dim=0, largest=False)
    assert v.tolist() == [[0.0, -1.0, 3.0, 2.0]] and i.tolist() == [[1, 1, 0, 0]]
    idx = ag.tensor([[0, 3], [2, 1]])
    np.testing.assert_array_equal(x.gather(1, idx).numpy(), np.take_along_axis(a, idx.numpy(), 1))
    assert ag.gather(x, 0, ag.tensor([[1, 0, 1, 0]])).tolist() == [[0.0, 5.0, 4.0, 2.0]]
    oh = ag.one_hot(ag.tensor([0, 2, 1]), 4)
    assert oh.dtype == ag.int64
    np.testing.assert_array_equal(oh.numpy(), np.eye(4, dtype=np.int64)[[0, 2, 1]])
    assert ag.one_hot(ag.tensor([3])).shape == (1, 4)
    ag.manual_seed(0)
    probs = ag.tensor([[0.0, 1.0, 0.0], [0.5, 0.0, 0.5]])
    s = probs.multinomial(2, replacement=True)
    assert s.dtype == ag.int64 and s.shape == (2, 2)
    assert s[0].tolist() == [1, 1] and set(s[1].tolist()) <= {0, 2}
    s = ag.multinomial(ag.tensor([1.0, 1.0, 1.0, 1.0]), 4)
    assert sorted(s.tolist()) == [0, 1, 2, 3]  # without replacement: each once
    with pytest.raises(ag.ValueError, match="multinomial"):
        ag.multinomial(ag.tensor([1.0, -1.0]), 1)


# ---- shapes ------------------------------------------------------------------------------------


def test_reshape_view_permute_transpose():
    a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    x = ag.tensor(a)
    for got in (x.reshape(6, -1), x.reshape((6, -1)), x.reshape([6, 4]), ag.reshape(x, (6, -1))):
        np.testing.assert_array_equal(got.numpy(), a.reshape(6, -1))
    np.testing.assert_array_equal(x.view(-1).numpy(), a.reshape(-1))
    np.testing.assert_array_equal(x.view(4, 6).numpy(), a.reshape(4, 6))
    np.testing.assert_array_equal(x.permute(2, 0, 1).numpy(), a.transpose(2, 0, 1))
    np.testing.assert_array_equal(x.permute((2, 0, 1)).numpy(), a.transpose(2, 0, 1))
    np.testing.assert_array_equal(ag.permute(x, [1, 0, 2]).numpy(), a.transpose(1, 0, 2))
    np.testing.assert_array_equal(x.transpose(0, 2).numpy(), a.swapaxes(0, 2))
    np.testing.assert_array_equal(ag.transpose(x, -1, -2).numpy(), a.swapaxes(-1, -2))
    np.testing.assert_array_equal(x.T.numpy(), a.T)
    np.testing.assert_array_equal(x.mT.numpy(), a.swapaxes(-1, -2))
    np.testing.assert_array_equal(x[0].t().numpy(), a[0].T)
    assert x[0, 0].t().shape == (4,)
    with pytest.raises(ag.ShapeError, match="t: "):
        x.t()
    with pytest.raises(ag.ShapeError, match="view"):
        x.transpose(0, 1).view(-1)  # not expressible as a view: PyTorch refuses too
    flat = x.transpose(0, 1).reshape(-1)  # a copy where a view cannot be
    np.testing.assert_array_equal(flat.numpy(), a.swapaxes(0, 1).reshape(-1))
    assert x.view_as(ag.zeros(4, 6)).shape == (4, 6)
    assert x.reshape_as(ag.zeros(24)).shape == (24,)


def test_squeeze_unsqueeze_expand_flatten():
    a = np.arange(6, dtype=np.float64).reshape(1, 2, 1, 3)
    x = ag.tensor(a)
    assert x.squeeze().shape == (2, 3)
    assert x.squeeze(0).shape == (2, 1, 3)
    assert ag.squeeze(x, dim=2).shape == (1, 2, 3)
    assert x.squeeze(1).shape == (1, 2, 1, 3)  # not of size 1: unchanged
    assert x.unsqueeze(-1).shape == (1, 2, 1, 3, 1)
    assert ag.unsqueeze(x, 0).shape == (1, 1, 2, 1, 3)
    e = x.expand(4, 2, 5, 3)
    np.testing.assert_array_equal(e.numpy(), np.broadcast_to(a, (4, 2, 5, 3)))
    assert x.expand((-1, 2, 2, 3)).shape == (1, 2, 2, 3)
    assert x.expand_as(ag.zeros(2, 2, 2, 3)).shape == (2, 2, 2, 3)
    assert ag.broadcast_to(x, (3, 2, 4, 3)).shape == (3, 2, 4, 3)
    assert x.flatten().shape == (6,)
    assert x.flatten(1).shape == (1, 6)
    assert ag.flatten(x, 1, 2).shape == (1, 2, 3)
    assert x.flatten(start_dim=0, end_dim=-2).shape == (2, 3)
    assert ag.tensor(3.0).flatten().shape == (1,)
    assert ag.zeros(2, 0, 3).flatten(1).shape == (2, 0)
    with pytest.raises(ag.ShapeError, match="flatten"):
        x.flatten(2, 1)


def test_narrow_select_split_chunk_unbind():
    a = np.arange(20, dtype=np.float32).reshape(4, 5)
    x = ag.tensor(a)
    np.testing.assert_array_equal(x.narrow(1, 1, 3).numpy(), a[:, 1:4])
    np.testing.assert_array_equal(ag.select(x, 0, -1).numpy(), a[-1])
    parts = x.split(2, dim=1)
    assert isinstance(parts, tuple) and [p.shape[1] for p in parts] == [2, 2, 1]
    np.testing.assert_array_equal(parts[2].numpy(), a[:, 4:])
    parts = ag.split(x, [1, 3], 0)
    assert [p.shape for p in parts] == [(1, 5), (3, 5)]
    chunks = x.chunk(2, 1)
    assert isinstance(chunks, tuple) and [c.shape[1] for c in chunks] == [3, 2]
    assert [c.shape[0] for c in ag.chunk(x, 3)] == [2, 2]  # as PyTorch: ceil(4/3) = 2 each
    rows = x.unbind(0)
    assert isinstance(rows, tuple) and len(rows) == 4
    np.testing.assert_array_equal(ag.unbind(x, 1)[3].numpy(), a[:, 3])
    np.testing.assert_array_equal(np.stack([r.numpy() for r in x]), a)  # iteration
    with pytest.raises(TypeError):
        iter(ag.tensor(1.0))


def test_cat_stack_tril_triu_index_select_repeat_interleave():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    x = ag.tensor(a)
    np.testing.assert_array_equal(ag.cat([x, x], 0).numpy(), np.concatenate([a, a], 0))
    np.testing.assert_array_equal(ag.concat((x, x), dim=1).numpy(), np.concatenate([a, a], 1))
    np.testing.assert_array_equal(ag.stack([x, x], dim=1).numpy(), np.stack([a, a], 1))
    np.testing.assert_array_equal(ag.stack([x, x]).numpy(), np.stack([a, a]))
    with pytest.raises(ag.ShapeError, match="stack"):
        ag.stack([x, x.T])
    m = np.arange(1, 17, dtype=np.float64).reshape(4, 4)
    t = ag.tensor(m)
    np.testing.assert_array_equal(t.tril().numpy(), np.tril(m))
    np.testing.assert_array_equal(ag.triu(t, 1).numpy(), np.triu(m, 1))
    np.testing.assert_array_equal(t.tril(diagonal=-1).numpy(), np.tril(m, -1))
    idx = ag.tensor([2, 0, 2])
    np.testing.assert_array_equal(t.index_select(0, idx).numpy(), m[[2, 0, 2]])
    np.testing.assert_array_equal(ag.index_select(t, 1, idx).numpy(), m[:, [2, 0, 2]])
    # d2l's MultiHeadAttention: valid_lens = torch.repeat_interleave(valid_lens, repeats=h, dim=0)
    valid_lens = ag.tensor([3, 2])
    assert ag.repeat_interleave(valid_lens, repeats=2, dim=0).tolist() == [3, 3, 2, 2]
    np.testing.assert_array_equal(x.repeat_interleave(2, 1).numpy(), np.repeat(a, 2, 1))
    assert x.repeat_interleave(2).tolist() == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5]
    assert ag.repeat_interleave(valid_lens, ag.tensor(2), dim=0).tolist() == [3, 3, 2, 2]
    c = ag.contiguous(x.T)
    assert c.is_contiguous() and c.tolist() == a.T.tolist()
    d = ag.clone(x)
    assert not d.is_same(x) and d.data_ptr() != x.data_ptr()


# ---- layers, losses, attention -------------------------------------------------------------------


@pytest.mark.parametrize("dtype", FLOATS)
def test_linear_layer_norm_dropout(dtype):
    a, x = rand((2, 3, 4), dtype)
    w, W = rand((5, 4), dtype, seed=6)
    b, B = rand((5,), dtype, seed=7)
    close(ag.linear(x, W, B), a @ w.T + b)
    close(ag.linear(x, W), a @ w.T)
    g, G = rand((4,), dtype, seed=8)
    mu = a.mean(-1, keepdims=True)
    var = a.var(-1, keepdims=True)
    normed = (a - mu) / np.sqrt(var + 1e-5)
    close(ag.layer_norm(x, (4,), G, B[:4]), normed * g + b[:4])
    close(ag.layer_norm(x, 4), normed)
    normed2 = (a - a.mean((1, 2), keepdims=True)) / np.sqrt(a.var((1, 2), keepdims=True) + 1e-3)
    close(ag.layer_norm(x, [3, 4], eps=1e-3), normed2)
    close(ag.dropout(x, 0.0), a)
    close(ag.dropout(x, 0.9, False), a)
    d = ag.dropout(x, 0.5).numpy()
    assert np.all((d == 0) | np.isclose(d, 2 * a))
    assert np.all(ag.dropout(x, 1.0).numpy() == 0)


def _cross_entropy(logits, targets):
    lse = np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1)) + logits.max(-1)
    return lse - logits[np.arange(len(targets)), targets]


@pytest.mark.parametrize("dtype", FLOATS)
def test_cross_entropy(dtype):
    a, x = rand((4, 5), dtype)
    t = np.array([0, 4, 2, 2])
    per_row = _cross_entropy(a, t)
    close(ag.cross_entropy(x, ag.tensor(t), reduction="none"), per_row)
    close(ag.cross_entropy(x, ag.tensor(t)), per_row.mean())
    close(ag.cross_entropy(x, ag.tensor(t), reduction="sum"), per_row.sum())
    # one row (C,), and (N, C, T) with targets (N, T): the classes along dim 1
    close(ag.cross_entropy(x[1], ag.tensor(4), reduction="none"), per_row[1])
    b, y = rand((2, 5, 3), dtype, seed=9)
    tt = np.array([[0, 1, 4], [3, 3, 2]])
    rows = b.transpose(0, 2, 1).reshape(-1, 5)
    expected = _cross_entropy(rows, tt.reshape(-1)).reshape(2, 3)
    close(ag.cross_entropy(y, ag.tensor(tt), reduction="none"), expected)
    close(ag.cross_entropy(y, ag.tensor(tt)), expected.mean())
    with pytest.raises(ag.ValueError, match="reduction"):
        ag.cross_entropy(x, ag.tensor(t), reduction="average")
    with pytest.raises(ag.ShapeError, match="cross_entropy"):
        ag.cross_entropy(y, ag.tensor(t))


def _d2l_masked_softmax(X, valid_lens):
    """d2l's masked_softmax in NumPy: scores at and past the valid length set to -1e6."""
    if valid_lens is None:
        e = np.exp(X - X.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)
    shape = X.shape
    lens = np.repeat(valid_lens, shape[1]) if valid_lens.ndim == 1 else valid_lens.reshape(-1)
    X = X.reshape(-1, shape[-1]).copy()
    X[np.arange(shape[-1])[None, :] >= lens[:, None]] = -1e6
    e = np.exp(X - X.max(-1, keepdims=True))
    return (e / e.sum(-1, keepdims=True)).reshape(shape)


@pytest.mark.parametrize("dtype", FLOATS)
def test_masked_softmax_with_1d_and_2d_valid_lens(dtype):
    # d2l: masked_softmax(torch.rand(2, 2, 4), torch.tensor([2, 3])) and with [[1, 3], [2, 4]]
    a, X = rand((2, 2, 4), dtype, 0.0, 1.0)
    for lens in (np.array([2, 3]), np.array([[1, 3], [2, 4]])):
        got = ag.masked_softmax(X, ag.tensor(lens))
        close(got, _d2l_masked_softmax(a, lens))
        flat_lens = np.repeat(lens, 2) if lens.ndim == 1 else lens.reshape(-1)
        rows = got.numpy().reshape(-1, 4)
        for row, n in zip(rows, flat_lens):
            assert np.all(row[n:] == 0) and np.isclose(row[:n].sum(), 1)
    close(ag.masked_softmax(X), _d2l_masked_softmax(a, None))
    float_lens = ag.tensor([2.0, 3.0])  # d2l passes lengths of any dtype
    close(ag.masked_softmax(X, valid_lens=float_lens), _d2l_masked_softmax(a, np.array([2, 3])))
    with pytest.raises(ag.ShapeError, match="masked_softmax"):
        ag.masked_softmax(X, ag.tensor([1, 2, 3]))


def _attention(q, k, v, lens=None, causal=False):
    scores = q @ k.swapaxes(-1, -2) / math.sqrt(q.shape[-1])
    B, H, Q, K = scores.shape
    if causal:
        scores = np.where(np.tril(np.ones((Q, K), bool), K - Q), scores, -np.inf)
    if lens is not None:
        scores = np.where(np.arange(K) < lens[:, None, None, None], scores, -np.inf)
    e = np.exp(scores - scores.max(-1, keepdims=True))
    return (e / e.sum(-1, keepdims=True)) @ v


@pytest.mark.parametrize("dtype", FLOATS)
def test_attention(dtype):
    q, Q = rand((2, 3, 4, 8), dtype, seed=10)
    k, K = rand((2, 3, 5, 8), dtype, seed=11)
    v, V = rand((2, 3, 5, 6), dtype, seed=12)
    close(ag.attention(Q, K, V), _attention(q, k, v).astype(NP[dtype]))
    lens = np.array([2, 5])
    close(ag.attention(Q, K, V, ag.tensor(lens)), _attention(q, k, v, lens).astype(NP[dtype]))
    close(ag.attention(Q, K, V, is_causal=True), _attention(q, k, v, causal=True).astype(NP[dtype]))
    no_dropout = ag.attention(Q, K, V, dropout_p=0.5, training=False)
    close(no_dropout, _attention(q, k, v).astype(NP[dtype]))
    close(ag.scaled_dot_product_attention(Q, K, V), _attention(q, k, v).astype(NP[dtype]))
    close(
        ag.scaled_dot_product_attention(Q[:, 0], K[:, 0], V[:, 0], is_causal=True),
        _attention(q[:, :1], k[:, :1], v[:, :1], causal=True)[:, 0].astype(NP[dtype]),
    )
    with pytest.raises(ag.ValueError, match="attn_mask"):
        ag.scaled_dot_product_attention(Q, K, V, attn_mask=ag.ones(4, 5))
    with pytest.raises(ag.ShapeError, match="attention"):
        ag.attention(Q, K[..., :4], V)


# ---- the modern block: rms_norm, rotary_embedding, ALiBi, grouped-query attention ---------------


@pytest.mark.parametrize("dtype", FLOATS)
def test_rms_norm(dtype):
    a, x = rand((2, 3, 4), dtype)
    g, G = rand((4,), dtype, seed=8)
    eps = np.finfo(NP[dtype]).eps  # eps None: torch.finfo(dtype).eps, PyTorch's default
    normed = a / np.sqrt((a * a).mean(-1, keepdims=True) + eps)
    close(ag.rms_norm(x, (4,), G), normed * g)
    close(ag.rms_norm(x, 4), normed)
    close(ag.rms_norm(x, [4], weight=None, eps=None), normed)
    # Where eps counts: x = √eps has mean(x²) = eps, so y = √eps / √(2 eps) = 1/√2.
    close(ag.rms_norm(ag.full((2, 4), math.sqrt(eps), dtype=dtype), 4), np.full((2, 4), 0.5**0.5))
    normed2 = a / np.sqrt((a * a).mean((1, 2), keepdims=True) + 0.5)
    close(ag.rms_norm(x, [3, 4], eps=0.5), normed2)
    with pytest.raises(ag.ShapeError, match=r"rms_norm.*\[2,3,4\].*\[3\]"):
        ag.rms_norm(x, (3,))
    with pytest.raises(ag.ShapeError, match="rms_norm: weight"):
        ag.rms_norm(x, (4,), ag.ones(3, dtype=dtype))
    with pytest.raises(ag.ValueError, match="eps"):
        ag.rms_norm(x, 4, eps=-1.0)
    with pytest.raises(ag.DTypeError, match="rms_norm"):
        ag.rms_norm(ag.ones(2, 4, dtype=ag.int64), 4)


def _rotary(x, cos, sin, pairs):
    """Feature pair j of row t turned by θ_tj: (a, b) -> (a cos θ - b sin θ, a sin θ + b cos θ);
    the pairs (2j, 2j+1) (interleaved) or (j, j + r/2) (halves); features r ... d - 1 kept."""
    r = 2 * cos.shape[-1]
    out = x.copy()
    first, second = (slice(0, r, 2), slice(1, r, 2)) if pairs == "interleaved" else (
        slice(0, r // 2), slice(r // 2, r))
    a, b = x[..., first], x[..., second]
    out[..., first] = a * cos - b * sin
    out[..., second] = a * sin + b * cos
    return out


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("pairs", ["interleaved", "halves"])
def test_rotary_embedding(dtype, pairs):
    a, x = rand((2, 3, 5, 8), dtype)
    theta = np.random.default_rng(1).uniform(-4, 4, (5, 4))
    cos, sin = np.cos(theta).astype(NP[dtype]), np.sin(theta).astype(NP[dtype])
    got = ag.rotary_embedding(x, ag.tensor(cos), ag.tensor(sin), pairs=pairs)
    close(got, _rotary(a, cos, sin, pairs))
    # A rotation keeps every pair's length, so every row's norm.
    np.testing.assert_allclose(np.linalg.norm(got.numpy(), axis=-1), np.linalg.norm(a, axis=-1), **tol(dtype))
    # Partial rotary (GPT-NeoX's rotary_pct): r = 4 of d = 8 features turned, the rest as they were.
    part = ag.rotary_embedding(x, ag.tensor(cos[:, :2]), ag.tensor(sin[:, :2]), pairs)
    close(part, _rotary(a, cos[:, :2], sin[:, :2], pairs))
    np.testing.assert_array_equal(part.numpy()[..., 4:], a[..., 4:])


def test_rotary_embedding_default_pairs_and_errors():
    a, x = rand((3, 4))
    cos, sin = ag.cos(ag.ones(3, 2, dtype=ag.float64)), ag.sin(ag.ones(3, 2, dtype=ag.float64))
    close(ag.rotary_embedding(x, cos, sin), _rotary(a, cos.numpy(), sin.numpy(), "interleaved"))
    with pytest.raises(ag.ValueError, match="rotary_embedding: pairs: 'zigzag'"):
        ag.rotary_embedding(x, cos, sin, pairs="zigzag")
    with pytest.raises(ag.ShapeError, match=r"rotary_embedding.*\[3,3\]"):
        ag.rotary_embedding(x, ag.ones(3, 3, dtype=ag.float64), sin)
    with pytest.raises(ag.ShapeError, match="rotary_embedding"):
        ag.rotary_embedding(x[:2], cos, sin)  # 2 rows, angles for 3
    with pytest.raises(ag.DTypeError, match="rotary_embedding"):
        ag.rotary_embedding(x, cos.float(), sin.float())
    with pytest.raises(ag.ValueError, match="rotary_embedding"):
        ag.rotary_embedding(x, cos.requires_grad_(), sin)  # the angles are not differentiated


def test_alibi_slopes_and_bias():
    # The paper's slopes: 2^(-8h/n) for n a power of two; else those of the power below, then
    # every other slope of twice it.
    slopes = ag.alibi_slopes(8)
    assert isinstance(slopes, list) and all(isinstance(m, float) for m in slopes)
    assert slopes == [2.0 ** -h for h in range(1, 9)]
    assert ag.alibi_slopes(4) == [2.0 ** (-2 * h) for h in range(1, 5)]
    assert ag.alibi_slopes(6) == [1 / 4, 1 / 16, 1 / 64, 1 / 256, 1 / 2, 1 / 8]
    # bias[h, i, j] = -m_h |(Tk - Tq + i) - j|: the queries are the last Tq of the Tk positions.
    bias = ag.alibi_bias([0.5, 0.25], 3, 5)
    assert bias.dtype == ag.float32 and bias.shape == (2, 3, 5) and not bias.requires_grad
    i, j = np.arange(3)[:, None] + 2, np.arange(5)[None, :]
    expected = -np.array([0.5, 0.25])[:, None, None] * np.abs(i - j)
    np.testing.assert_array_equal(bias.numpy(), expected.astype(np.float32))
    close(ag.alibi_bias(slopes, 4, 4, ag.float64), -np.array(slopes)[:, None, None] * np.abs(
        np.arange(4)[:, None] - np.arange(4)[None, :]))
    with pytest.raises(ag.ValueError, match="alibi_slopes"):
        ag.alibi_slopes(0)
    with pytest.raises(ag.ValueError, match="alibi_bias"):
        ag.alibi_bias([1.0], -1, 3)
    with pytest.raises(ag.ValueError, match="alibi_bias"):
        ag.alibi_bias([math.inf], 1, 3)
    with pytest.raises(ag.DTypeError, match="alibi_bias"):
        ag.alibi_bias([1.0], 1, 3, ag.int64)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("causal", [False, True])
def test_alibi_attention_is_softmax_of_scores_plus_alibi_bias(dtype, causal):
    q, Q = rand((2, 4, 3, 8), dtype, seed=10)
    k, K = rand((2, 4, 5, 8), dtype, seed=11)
    v, V = rand((2, 4, 5, 6), dtype, seed=12)
    slopes = ag.alibi_slopes(4)
    # Query i is position 2 + i among the 5 keys; causal: the keys after it are masked.
    future = ~ag.tensor(np.tril(np.ones((3, 5), bool), 2))

    def fused(q, k, v):
        return ag.attention(q, k, v, is_causal=causal, alibi_slopes=slopes)

    def composed(q, k, v):  # softmax(Q·Kᵀ/√d + alibi_bias) · V in ag's ops
        scores = q @ k.mT / math.sqrt(8) + ag.alibi_bias(slopes, 3, 5, dtype)  # (B, H, Tq, Tk)
        if causal:
            scores = scores.masked_fill(future, -math.inf)
        return ag.softmax(scores, -1) @ v

    close(fused(Q, K, V), composed(Q, K, V).numpy())
    s = q @ k.swapaxes(-1, -2) / math.sqrt(8) - np.array(slopes)[:, None, None] * np.abs(
        np.arange(3)[:, None] + 2 - np.arange(5)[None, :])
    if causal:
        s = np.where(np.tril(np.ones((3, 5), bool), 2), s, -np.inf)
    e = np.exp(s - s.max(-1, keepdims=True))
    close(fused(Q, K, V), ((e / e.sum(-1, keepdims=True)) @ v).astype(NP[dtype]))
    # The same gradients as the composed ops: the bias is a constant.
    w = ag.tensor(np.random.default_rng(3).uniform(0.5, 1.5, (2, 4, 3, 6)).astype(NP[dtype]))
    grads = []
    for f in (fused, composed):
        xs = [t.detach().requires_grad_() for t in (Q, K, V)]
        (f(*xs) * w).sum().backward()
        grads.append([t.grad for t in xs])
    for got, want in zip(*grads):
        close(got, want.numpy())
    with pytest.raises(ag.ShapeError, match="ALiBi slopes"):
        ag.attention(Q, K, V, alibi_slopes=[0.5])  # one per head


@pytest.mark.parametrize("dtype", FLOATS)
def test_grouped_query_attention_is_attention_on_repeated_heads(dtype):
    # enable_gqa: 6 query heads over 2 key/value heads; query head h reads head h // 3 (Llama's
    # repeat_kv), with the gradient of a key/value head summed over its 3 query heads.
    q, Q = rand((2, 6, 4, 8), dtype, seed=10)
    k, K = rand((2, 2, 4, 8), dtype, seed=11)
    v, V = rand((2, 2, 4, 5), dtype, seed=12)
    lens = ag.tensor([3, 4])
    for kwargs in ({}, {"is_causal": True}, {"alibi_slopes": ag.alibi_slopes(6)}):
        xs = [t.detach().requires_grad_() for t in (Q, K, V)]
        gqa = ag.attention(*xs, lens, enable_gqa=True, **kwargs)
        ys = [t.detach().requires_grad_() for t in (Q, K, V)]
        repeated = ag.attention(ys[0], ys[1].repeat_interleave(3, dim=1), ys[2].repeat_interleave(3, dim=1), lens,
                                **kwargs)
        close(gqa, repeated.detach().numpy())
        w = ag.tensor(np.random.default_rng(4).uniform(0.5, 1.5, (2, 6, 4, 5)).astype(NP[dtype]))
        (gqa * w).sum().backward()
        (repeated * w).sum().backward()
        for x, y in zip(xs, ys):
            close(x.grad, y.grad.numpy())
    multi_query = ag.attention(Q, K[:, :1], V[:, :1], enable_gqa=True)  # one key/value head
    close(multi_query, ag.attention(Q, K[:, :1].expand(2, 6, 4, 8), V[:, :1].expand(2, 6, 4, 5)).numpy())
    with pytest.raises(ag.ShapeError, match="enable_gqa"):
        ag.attention(Q, K, V)  # fewer key/value heads without enable_gqa
    with pytest.raises(ag.ShapeError, match="enable_gqa"):
        ag.attention(Q, K[:, :1].expand(2, 4, 4, 8), V[:, :1].expand(2, 4, 4, 5), enable_gqa=True)  # 4 ∤ 6
    close(ag.scaled_dot_product_attention(Q, K, V, enable_gqa=True),
          ag.attention(Q, K.repeat_interleave(3, dim=1), V.repeat_interleave(3, dim=1)).numpy())


# ---- errors --------------------------------------------------------------------------------------


def test_shape_errors_name_the_op():
    with pytest.raises(ag.ShapeError, match=r"matmul.*\[2,3\].*\[4,5\]"):
        ag.ones(2, 3) @ ag.ones(4, 5)
    with pytest.raises(ag.ShapeError, match="add"):
        ag.ones(2, 3) + ag.ones(4)
    with pytest.raises(ag.ShapeError, match="reshape"):
        ag.ones(2, 3).reshape(4, -1)
    with pytest.raises(ag.ShapeError, match="permute"):
        ag.ones(2, 3).permute(0, 0)
    with pytest.raises(ag.ShapeError, match="cat"):
        ag.cat([ag.ones(2, 3), ag.ones(2, 4)])
    with pytest.raises(ag.ShapeError, match="sum"):
        ag.ones(2).sum(3)
    with pytest.raises(ag.ShapeError, match="linear"):
        ag.linear(ag.ones(2, 3), ag.ones(4, 5))
    with pytest.raises(ValueError):  # ag.ShapeError is also Python's ValueError and RuntimeError
        ag.ones(2).softmax(2)
    with pytest.raises(RuntimeError):
        ag.ones(2).softmax(2)


def test_dtype_errors():
    with pytest.raises(ag.DTypeError, match="softmax"):
        ag.arange(3).softmax(0)
    with pytest.raises(ag.DTypeError, match="one_hot"):
        ag.one_hot(ag.ones(2))
    with pytest.raises(TypeError):
        ag.matmul(ag.ones(2, 2), 3)  # a number is not a tensor here
    with pytest.raises(TypeError):
        ag.reshape(ag.ones(4), "2x2")


# ---- gradients ----------------------------------------------------------------------------------


def test_gradients_of_arithmetic_against_finite_differences():
    a = np.random.default_rng(3).uniform(0.5, 2.0, (2, 3))
    b = np.random.default_rng(4).uniform(0.5, 2.0, (3,))
    check_grad(lambda x, y: x * y - x / y + 2 / x - 3 * y, a, b)
    check_grad(lambda x: x**3 + ag.pow(10000, x / 8) + 2**x, a)
    check_grad(lambda x: ag.tanh(x) * ag.sigmoid(x) + ag.exp(-x) + ag.sqrt(x) + ag.log(x), a)
    check_grad(lambda x, y: ag.maximum(x, y * 1.1) + x.clamp(min=1.0), a, b)


def test_gradients_of_softmax_norm_loss_matmul():
    rng = np.random.default_rng(5)
    a = rng.normal(size=(3, 4))
    check_grad(lambda x: x.softmax(-1), a)
    check_grad(lambda x: ag.log_softmax(x, 0), a)
    check_grad(lambda x: x.logsumexp(1), a)
    check_grad(lambda x, w: ag.layer_norm(x, 4, w, None), a, rng.normal(size=4))
    targets = ag.tensor([1, 0, 3])
    check_grad(lambda x: ag.cross_entropy(x, targets, reduction="none"), a)
    check_grad(lambda x, y: x @ y, a, rng.normal(size=(4, 2)))
    check_grad(lambda x, w, b: ag.linear(x, w, b), a, rng.normal(size=(2, 4)), rng.normal(size=2))
    check_grad(lambda x: x.var(1) + x.mean(0).sum() + x.amax(1), a)


def test_gradients_of_shape_and_index_ops():
    rng = np.random.default_rng(6)
    a = rng.normal(size=(2, 3, 4))
    check_grad(lambda x: x.permute(2, 0, 1).reshape(4, -1).flatten() * ag.arange(24), a)
    check_grad(lambda x: x.gather(2, ag.tensor([[[0, 3], [1, 1], [2, 0]]] * 2)), a)
    check_grad(lambda x: ag.masked_softmax(x, ag.tensor([2, 3])), a)
    check_grad(lambda x: ag.cat([x.T, x.mT.permute(1, 2, 0)], 0) + 0, a)
    check_grad(lambda x: x.max(1).values.sum(-1) + x.topk(2).values.sum((1, 2)), a)
    check_grad(lambda x: x.tril().repeat_interleave(2, 1).cumsum(0), a)


# ---- d2l's snippets ------------------------------------------------------------------------------


def test_d2l_transpose_qkv_and_transpose_output():
    from seed_code import transpose_output, transpose_qkv  # the seed's, over ag

    a = np.arange(2 * 4 * 10, dtype=np.float32).reshape(2, 4, 10)
    X = ag.tensor(a)
    heads = transpose_qkv(X, 5)
    assert heads.shape == (10, 4, 2)
    expected = a.reshape(2, 4, 5, 2).transpose(0, 2, 1, 3).reshape(10, 4, 2)
    np.testing.assert_array_equal(heads.numpy(), expected)
    back = transpose_output(heads, 5)
    assert back.shape == (2, 4, 10)
    np.testing.assert_array_equal(back.numpy(), a)


def test_d2l_positional_encoding_columns():
    # d2l: X = torch.arange(max_len, dtype=torch.float32).reshape(-1, 1) / torch.pow(
    #          10000, torch.arange(0, num_hiddens, 2, dtype=torch.float32) / num_hiddens)
    max_len, num_hiddens = 6, 8
    X = ag.arange(max_len, dtype=ag.float32).reshape(-1, 1) / ag.pow(
        10000, ag.arange(0, num_hiddens, 2, dtype=ag.float32) / num_hiddens
    )
    P = ag.zeros(1, max_len, num_hiddens)
    P[:, :, 0::2] = ag.sin(X)
    P[:, :, 1::2] = ag.cos(X)
    pos = np.arange(max_len)[:, None] / np.power(10000, np.arange(0, num_hiddens, 2) / num_hiddens)
    expected = np.zeros((1, max_len, num_hiddens))
    expected[:, :, 0::2] = np.sin(pos)
    expected[:, :, 1::2] = np.cos(pos)
    np.testing.assert_allclose(P.numpy(), expected, atol=1e-6)


def test_broadcast_shapes():
    assert ag.broadcast_shapes((2, 1, 3), (4, 1), 3) == ag.Size([2, 4, 3])
    assert isinstance(ag.broadcast_shapes((1,)), ag.Size)
    with pytest.raises(ag.ShapeError, match="broadcast_shapes"):
        ag.broadcast_shapes((2, 3), (4,))


def test_ops_that_release_the_gil_run_from_threads():
    # matmul, softmax, layer_norm, cross_entropy and attention compute without the GIL; four
    # Python threads calling them at once get the serial results.
    import threading

    a, x = rand((4, 2, 16, 8), ag.float64)
    targets = ag.tensor([0, 3, 7, 1])

    def work():
        o = ag.attention(x, x, x)
        s = ag.softmax(x @ x.mT, -1)
        n = ag.layer_norm(s, 16)
        return [o, s, n, ag.cross_entropy(n[0, 0, :4], targets)]

    expected = [t.numpy() for t in work()]
    results = [None] * 4

    def run(i):
        results[i] = [t.numpy() for t in work()]

    threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for r in results:
        for got, want in zip(r, expected):
            np.testing.assert_array_equal(got, want)


def test_int64_tensors_stay_int64_where_pytorch_keeps_them():
    a = np.array([[5, -3, 8], [0, 7, -1]])
    b = np.array([2, 4, -3])
    x, y = ag.tensor(a), ag.tensor(b)
    for got, want in [(x + y, a + b), (x - y, a - b), (x * y, a * b), (-x, -a)]:
        assert got.dtype == ag.int64
        np.testing.assert_array_equal(got.numpy(), want)
    with pytest.raises(ag.DTypeError, match="abs"):  # ag's abs is floating only (PyTorch's is not)
        abs(x)
    assert (x / y).dtype == ag.float32
    np.testing.assert_allclose((x / y).numpy(), a / b, rtol=1e-6)
    # ag's max, argmax, maximum, clamp and topk are floating only (PyTorch's take int64 too)
    for op in (lambda: x.max(), lambda: x.max(1), lambda: x.argmax(), lambda: x.clamp(0, 3)):
        with pytest.raises(ag.DTypeError, match="floating-point"):
            op()
    assert x.float().max(1).indices.tolist() == [2, 1]
    assert x.sum(1).tolist() == [10, 6] and x.cumsum(1).dtype == ag.int64
    assert x.reshape(-1).tolist() == a.reshape(-1).tolist() and x.T.dtype == ag.int64
    assert ag.cat([x, x]).dtype == ag.int64 and x.tril().tolist() == np.tril(a).tolist()


def test_tensors_stay_hashable_beside_elementwise_eq():
    # __eq__ is elementwise, and hash() follows the tensor (sets of parameters, dict keys)
    x, y = ag.ones(2), ag.ones(2)
    assert len({x, y, x}) == 2
    assert {x: 1}[x] == 1


def test_logical_operators_on_bool_masks():
    a = np.array([True, True, False, False])
    b = np.array([True, False, True, False])
    A, B = ag.tensor(a), ag.tensor(b)
    for got, expected in ((A & B, a & b), (A | B, a | b), (A ^ B, a ^ b), (A & True, a & True),
                          (False | A, False | a), (ag.logical_xor(A, B), a ^ b)):
        assert got.dtype == ag.bool and got.tolist() == expected.tolist()
    causal = ag.tril(ag.ones(3, 3, dtype=ag.bool))
    padding = ag.tensor([True, True, False])  # broadcast over the rows, as masks are combined
    assert (causal & padding).tolist() == (np.tril(np.ones((3, 3), bool)) & [True, True, False]).tolist()
    with pytest.raises(TypeError, match="bool tensors"):
        ag.tensor([1, 2]) & ag.tensor([1, 0])  # integers' bitwise ops are not ag's
    with pytest.raises(TypeError, match="bool tensors"):
        A | 1


def test_an_int_argument_refuses_a_bool_and_takes_an_index():
    x = ag.ones(2, 3)
    with pytest.raises(TypeError):
        x.softmax(True)  # not softmax(dim=1): PyTorch refuses a bool for an int, as ag does
    with pytest.raises(TypeError):
        x.transpose(0, 1.0)
    with pytest.raises(TypeError):
        x.transpose(0, 2**70)  # beyond int64
    assert x.softmax(np.int64(0)).shape == (2, 3)  # NumPy integers and int64 scalars are ints
    assert x.select(1, ag.tensor(2)).shape == (2,)


def test_isclose_and_allclose_as_pytorch():
    a = ag.tensor([1.0, 1e-9, float("inf"), float("nan"), 100.0], dtype=ag.float64)
    b = ag.tensor([1.0 + 1e-6, 0.0, float("inf"), float("nan"), 100.002], dtype=ag.float64)
    expected = np.isclose(a.numpy(), b.numpy())  # NumPy's rule is PyTorch's: atol + rtol · |b|
    assert ag.isclose(a, b).tolist() == expected.tolist() == [True, True, True, False, False]
    assert a.isclose(b, equal_nan=True).tolist() == [True, True, True, True, False]
    assert ag.isclose(a, b, rtol=1e-4).tolist()[4]
    assert ag.allclose(a[:3], b[:3]) is True and ag.allclose(a, b) is False
    assert ag.ones(2, 3).allclose(ag.ones(3))  # broadcast
    with pytest.raises(TypeError, match="dtype"):
        ag.isclose(ag.ones(2), ag.ones(2, dtype=ag.float64))
    with pytest.raises(ValueError, match="non-negative"):
        ag.isclose(a, b, atol=-1.0)


def test_log10_and_log2_are_logs_divided():
    x = ag.tensor([0.5, 1.0, 8.0, 1000.0], dtype=ag.float64, requires_grad=True)
    assert np.allclose(ag.log10(x).detach().numpy(), np.log10(x.detach().numpy()), rtol=1e-15)
    assert np.allclose(x.log2().detach().numpy(), np.log2(x.detach().numpy()), rtol=1e-15)
    x.log10().sum().backward()  # d/dx log10(x) = 1 / (x ln 10)
    assert np.allclose(x.grad.numpy(), 1 / (x.detach().numpy() * np.log(10)), rtol=1e-15)


def test_histogram_as_pytorch_and_numpy():
    x = ag.randn(1000, generator=ag.Generator().manual_seed(3))
    a = x.numpy()
    for kwargs in [{}, {"bins": 7, "density": True}, {"bins": 4, "range": (-1.0, 0.5)}]:
        hist, edges = ag.histogram(x, **kwargs)
        np_hist, np_edges = np.histogram(a, bins=kwargs.get("bins", 100),
                                         range=kwargs.get("range"), density=kwargs.get("density",
                                                                                       False))
        assert hist.dtype == edges.dtype == ag.float32
        assert np.allclose(hist.numpy(), np_hist) and np.allclose(edges.numpy(), np_edges)
    # a point range widens to ±0.5; given edges and weights (the value 3 is outside: not counted)
    assert ag.tensor([2.0, 2.0]).histogram(bins=4).bin_edges.tolist() == [1.5, 1.75, 2, 2.25, 2.5]
    result = ag.histogram(ag.tensor([0.0, 1.0, 1.0, 3.0]), bins=ag.tensor([0.0, 0.5, 2.0]),
                          weight=ag.tensor([1.0, 2.0, 3.0, 4.0]))
    assert result.hist.tolist() == [1.0, 5.0] and type(result).__module__ == "ag.return_types"
    with pytest.raises(TypeError, match="float32 or float64"):
        ag.histogram(ag.arange(3))
    with pytest.raises(ValueError, match="positive int"):
        ag.histogram(x, bins=0)


def test_randperm_is_a_seeded_permutation():
    g = ag.Generator().manual_seed(11)
    p = ag.randperm(20, generator=g)
    assert p.dtype == ag.int64 and sorted(p.tolist()) == list(range(20))
    assert p.tolist() == ag.randperm(20, generator=ag.Generator().manual_seed(11)).tolist()
    assert ag.randperm(4, dtype=ag.float64, device="cpu").dtype == ag.float64
    with pytest.raises(ValueError, match="non-negative"):
        ag.randperm(-2)
