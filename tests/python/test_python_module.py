"""Modules written in Python over ag.nn.Module, as in PyTorch: registration by assignment,
forward, the tree with C++ children, state dicts, repr, lifetimes, and training with Adam."""

import gc
import weakref

import numpy as np
import pytest

import ag
from ag import nn
from ag.nn import functional as F



def a(t):
    return t.detach().numpy()


class TwoLayers(nn.Module):
    """Two Linears and a Parameter; forward needs no op beyond the layers' (F.linear, Tanh)."""

    def __init__(self):
        super().__init__()
        self.hidden = nn.Linear(3, 8)
        self.act = nn.Tanh()
        self.out = nn.Linear(8, 2)
        self.mix = nn.Parameter(ag.tensor(np.eye(2, dtype=np.float32)))
        self.note = "a plain attribute"
        self.plain = ag.ones(2)  # a plain Tensor: not registered (PyTorch's rule)

    def forward(self, x):
        return F.linear(self.out(self.act(self.hidden(x))), self.mix)


def test_registration_names_and_repr():
    model = TwoLayers()
    assert isinstance(model, nn.Module) and model.training
    assert [n for n, _ in model.named_parameters()] == [
        "mix", "hidden.weight", "hidden.bias", "out.weight", "out.bias",
    ]  # PyTorch's order: the module's own parameters, then its children's
    assert list(model.state_dict()) == ["mix", "hidden.weight", "hidden.bias", "out.weight", "out.bias"]
    assert isinstance(model.mix, nn.Parameter) and isinstance(model.hidden, nn.Linear)
    assert model.note == "a plain attribute" and isinstance(model.plain, ag.Tensor)
    assert "plain" not in dict(model.named_parameters()) and "plain" not in model.state_dict()
    assert repr(model) == (
        "TwoLayers(\n"
        "  (hidden): Linear(in_features=3, out_features=8, bias=True)\n"
        "  (act): Tanh()\n"
        "  (out): Linear(in_features=8, out_features=2, bias=True)\n"
        ")"
    )
    assert model.num_parameters() == 4 + 32 + 18


def test_the_briefs_model_repr():
    class MyModel(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(3, 4)
            self.scale = nn.Parameter(ag.ones(4))

        def forward(self, x):
            return self.lin(x) * self.scale

    model = MyModel()
    assert repr(model) == "MyModel(\n  (lin): Linear(in_features=3, out_features=4, bias=True)\n)"
    assert [n for n, _ in model.named_parameters()] == ["scale", "lin.weight", "lin.bias"]
    x = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    expected = (x @ a(model.lin.weight).T + a(model.lin.bias)) * 1.0
    np.testing.assert_allclose(a(model(ag.tensor(x))), expected, rtol=1e-5, atol=1e-6)


def test_the_briefs_model_forward_and_backward():
    class MyModel(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(3, 4)
            self.scale = nn.Parameter(ag.ones(4))

        def forward(self, x):
            return self.lin(x) * self.scale

    model = MyModel()
    F.mse_loss(model(ag.ones(2, 3)), ag.zeros(2, 4)).backward()
    assert model.scale.grad.shape == (4,) and model.lin.weight.grad.shape == (4, 3)


def test_training_with_adam_lowers_the_loss():
    ag.manual_seed(0)
    model = TwoLayers()
    rng = np.random.default_rng(0)
    x = ag.tensor(rng.standard_normal((32, 3)).astype(np.float32))
    y = ag.tensor(rng.standard_normal((32, 2)).astype(np.float32) * 0.5)
    optimizer = ag.optim.Adam(model.parameters(), lr=0.02)
    losses = []
    for _ in range(30):
        optimizer.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.7 * losses[0]
    assert all(np.isfinite(losses))
    assert model.mix.grad is not None  # the Python-registered Parameter was trained too
    assert not np.allclose(a(model.mix), np.eye(2))
    # The trained state moves into a fresh model by name.
    other = TwoLayers()
    other.load_state_dict(model.state_dict())
    np.testing.assert_array_equal(a(other(x)), a(model(x)))


def test_extra_repr_and_get_name():
    class Scaled(nn.Module):
        def __init__(self, factor):
            super().__init__()
            self.factor = factor
            self.inner = nn.ReLU()

        def extra_repr(self):
            return f"factor={self.factor}"

    assert repr(Scaled(2)) == "Scaled(\n  factor=2\n  (inner): ReLU()\n)"

    class Leaf(nn.Module):
        def extra_repr(self):
            return "k=1"

    assert repr(Leaf()) == "Leaf(k=1)"
    assert repr(nn.Module()) == "Module()"
    # A Python module inside a C++ container prints with its class name too.
    assert repr(nn.ModuleList([Leaf()])) == "ModuleList(\n  (0): Leaf(k=1)\n)"


def test_buffers_and_register_calls():
    class WithBuffers(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("running", ag.zeros(3))
            self.register_buffer("table", ag.ones(2), persistent=False)
            self.register_parameter("w", nn.Parameter(ag.ones(2)))
            self.register_parameter("absent", None)
            self.add_module("lin", nn.Linear(2, 2))

    m = WithBuffers()
    assert [n for n, _ in m.named_buffers()] == ["running", "table"]
    assert [n for n, _ in m.named_parameters()] == ["w", "lin.weight", "lin.bias"]
    assert m.absent is None and not m.running.requires_grad
    assert list(m.state_dict()) == ["w", "running", "lin.weight", "lin.bias"]  # PyTorch's
    m.load_state_dict(m.state_dict())  # the non-persistent table keeps its values
    m.running = ag.full((3,), 7.0)  # a buffer slot takes a tensor
    np.testing.assert_array_equal(a(m.state_dict()["running"]), np.full(3, 7.0))
    with pytest.raises(TypeError):
        m.register_parameter("bad", ag.ones(1))  # a plain Tensor is no Parameter
    with pytest.raises(KeyError):
        m.register_parameter("w", nn.Parameter(ag.ones(1)))
    with pytest.raises(KeyError):
        m.add_module("lin", nn.Tanh())
    with pytest.raises(TypeError):
        m.add_module("x", 3)
    with pytest.raises(ValueError, match="dot"):
        m.add_module("a.b", nn.Tanh())
    m.double()
    assert m.running.dtype == ag.float64 and m.w.dtype == ag.float64


def test_assignment_rules():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(2, 3)
            self.p = nn.Parameter(ag.zeros(2))

    m = M()
    with pytest.raises(TypeError, match="ag.nn.Parameter or None expected"):
        m.p = ag.ones(2)
    m.p = nn.Parameter(ag.ones(5))  # a new Parameter fills the slot
    assert m.p.shape == (5,)
    m.p = None
    assert m.p is None and "p" not in m.state_dict()
    m.lin = nn.Linear(2, 7)  # a module replaces the child, as in PyTorch
    assert m.lin.out_features == 7 and m.state_dict()["lin.weight"].shape == (7, 2)
    with pytest.raises(TypeError, match="child module 'lin'"):
        m.lin = "text"
    m.x = 1
    m.x = nn.Parameter(ag.ones(1))  # a plain attribute becomes a parameter
    assert isinstance(m.x, nn.Parameter) and "x" in m.state_dict()
    frozen = M()
    frozen.q = nn.Parameter(ag.ones(1), requires_grad=False)
    assert not frozen.q.requires_grad
    grown = nn.Parameter(F.linear(ag.ones(1, 2, requires_grad=True), ag.ones(3, 2)))
    assert grown.is_leaf  # a Parameter of a computed tensor is a new leaf, as PyTorch's
    frozen.r = grown
    assert frozen.r.is_same(grown)


def test_before_init_is_an_error():
    class Forgot(nn.Module):
        def __init__(self):
            self.lin = nn.Linear(1, 1)

    with pytest.raises((AttributeError, TypeError)):
        Forgot()

    class Missing(nn.Module):
        pass

    with pytest.raises(NotImplementedError, match="forward"):
        Missing()(ag.ones(1))


def test_python_module_in_python_module_lifetime():
    class Inner(nn.Module):
        def __init__(self):
            super().__init__()
            self.tag = "inner"
            self.lin = nn.Linear(2, 2)

        def forward(self, x):
            return self.lin(x)

    class Outer(nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = nn.ModuleList([Inner(), Inner()])
            self.head = Inner()

        def forward(self, x):
            for block in self.blocks:
                x = block(x)
            return self.head(x)

    outer = Outer()
    gc.collect()
    assert outer.head.tag == "inner" and type(outer.blocks[1]) is Inner
    assert outer(ag.ones(1, 2)).shape == (1, 2)
    assert [n for n, _ in outer.named_parameters()][:2] == ["blocks.0.lin.weight", "blocks.0.lin.bias"]
    assert outer.eval() is outer and not outer.blocks[0].lin.training
    # The Python halves go when the last parent does.
    probes = [weakref.ref(outer.head), weakref.ref(outer.blocks[0])]  # in a Python, a C++ parent
    del outer
    gc.collect()
    assert [probe() for probe in probes] == [None, None]


def test_python_module_in_cpp_sequence_keeps_state():
    class Counter(nn.Module):
        def __init__(self):
            super().__init__()
            self.calls = 0

        def forward(self, x):
            self.calls += 1
            return x

    seq = nn.Sequential(nn.Linear(2, 2), Counter())
    seq(ag.ones(1, 2))
    seq(ag.ones(1, 2))
    gc.collect()
    assert seq[1].calls == 2


# ---- the seed's MultiHeadAttention, written in Python over ag ----------------------------------

from seed_code import MHA_REPR as SEED_REPR  # noqa: E402  PyTorch's repr, a fixture
from seed_code import MultiHeadAttention  # noqa: E402  the seed's class over ag.nn


def test_seed_class_in_python_repr_and_names():
    attention = MultiHeadAttention(100, 100, 100, 100, 5, 0.5)
    assert repr(attention) == SEED_REPR
    assert repr(attention) == repr(nn.MultiHeadAttention(100, 100, 100, 100, 5, 0.5))
    assert list(attention.state_dict()) == ["W_q.weight", "W_k.weight", "W_v.weight", "W_o.weight"]
    # Its state dict loads into ag's C++ layer and back: the same names.
    cpp = nn.MultiHeadAttention(100, 100, 100, 100, 5, 0.5)
    cpp.load_state_dict(attention.state_dict())
    attention.load_state_dict(cpp.state_dict())


def test_seed_class_in_python_computes_ags_layer():
    attention = MultiHeadAttention(100, 100, 100, 100, 5, 0.5)
    attention.eval()
    X = ag.ones(2, 4, 100)
    valid_lens = ag.tensor([3, 2])
    assert attention(X, X, X, valid_lens).shape == (2, 4, 100)
    cpp = nn.MultiHeadAttention(100, 100, 100, 100, 5, 0.5)
    cpp.load_state_dict(attention.state_dict())
    cpp.eval()
    q = ag.tensor(np.random.default_rng(0).standard_normal((2, 4, 100)).astype(np.float32))
    np.testing.assert_allclose(a(attention(q, q, q, valid_lens)), a(cpp(q, q, q, valid_lens)), rtol=1e-4, atol=1e-5)
