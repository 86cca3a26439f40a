"""ag.autograd.gradcheck and gradcheck_parameters: ag's C++ check calling Python functions.

A Python function cannot have a wrong gradient by itself — its gradient is ag's ops' — so the
failing checks use what ag offers to make one: a hook that replaces a gradient, a function that
does not depend on its input, a function that is not deterministic. The functions are built from
what every tensor has (indexing, clone); the tests of ag's arithmetic ops run when they are bound.
"""

import numpy as np
import pytest

import ag
from ag.autograd import GradcheckError, gradcheck, gradcheck_parameters


def leaf(*shape, seed=0):
    values = np.random.default_rng(seed).standard_normal(shape)
    return ag.tensor(values, requires_grad=True)  # float64: a NumPy float64 array keeps its dtype


def wrong_gradient(x):
    """x[1:] whose backward passes ones instead of the upstream gradient."""
    y = x[1:]
    if y.requires_grad:  # the numeric passes run under no_grad
        y.register_hook(lambda grad: ag.ones_like(grad))
    return y


# ---- passing --------------------------------------------------------------------------------------


def test_correct_gradients_pass():
    x = leaf(3, 4)
    assert gradcheck(lambda x: x[1:, ::2], (x,)) is True
    assert gradcheck(lambda x: x[:, 2], x) is True  # a tensor, not a tuple
    assert gradcheck(lambda x: x[0, 1], [x]) is True  # a 0-d output


def test_several_inputs_and_outputs_and_other_arguments():
    x, y = leaf(3, 4), leaf(2, seed=1)
    mask = ag.tensor([True, False])
    # An int and a bool tensor pass to func as they are; a tuple of outputs is checked whole.
    def f(x, y, k, mask):
        assert isinstance(k, int) and mask.dtype == ag.bool
        return x[k:], y.clone(), mask
    assert gradcheck(f, (x, y, 1, mask))


def test_tensors_that_do_not_require_grad_pass_as_they_are():
    x, scale = leaf(3), ag.ones(3)  # a float32 constant, as PyTorch allows
    seen = []
    def f(x, scale):
        seen.append(scale)
        return x.clone()
    assert gradcheck(f, (x, scale))
    assert all(s.is_same(scale) for s in seen)
    # Inputs are numbered by their position among the arguments.
    with pytest.raises(GradcheckError, match=r"input 2 \(shape \[3\]\) at element \[1\]") as caught:
        gradcheck(lambda mask, k, x: wrong_gradient(x), (ag.tensor([True]), 1, x))
    assert "input 0" not in str(caught.value)


def test_func_receives_copies_and_the_callers_tensors_stay():
    x = leaf(2, 3)
    before = x.detach().numpy().copy()
    x.grad = ag.ones(2, 3, dtype=ag.float64)
    seen = []
    def f(t):
        seen.append(t)
        return t.clone()
    assert gradcheck(f, (x,))
    assert all(not t.is_same(x) for t in seen)
    np.testing.assert_array_equal(x.detach().numpy(), before)
    np.testing.assert_array_equal(x.grad.numpy(), np.ones((2, 3)))


def test_the_function_runs_without_grad_in_the_numeric_passes():
    modes = []
    def f(x):
        modes.append(ag.is_grad_enabled())
        return x.clone()
    gradcheck(f, leaf(2))
    assert modes[0] is True and set(modes[1:]) == {False}  # one backward, then differences
    assert ag.is_grad_enabled()


# ---- failing ---------------------------------------------------------------------------------------


def test_a_wrong_gradient_raises_gradcheck_error_naming_the_element():
    x = leaf(3, 2)
    with pytest.raises(GradcheckError) as caught:
        gradcheck(wrong_gradient, (x,))
    assert isinstance(caught.value, RuntimeError)
    message = str(caught.value)
    assert message.startswith("gradcheck failed")
    assert "input 0 (shape [3,2]) at element [1,0]: analytic 1" in message
    assert caught.value.result.failed_elements > 0 and not caught.value.result
    assert "the output" not in message
    assert gradcheck(wrong_gradient, (x,), raise_exception=False) is False


def test_the_wrong_input_is_named():
    x, y = leaf(2), leaf(2, seed=1)
    with pytest.raises(GradcheckError, match="input 1") as caught:
        gradcheck(lambda x, y: (x.clone(), wrong_gradient(y)), (x, y))
    assert "input 0" not in str(caught.value)


def test_an_unused_input_fails_unless_allowed():
    x, y = leaf(2), leaf(3, seed=1)
    with pytest.raises(GradcheckError, match=r"input 1 \(shape \[3\]\): f does not depend on it"):
        gradcheck(lambda x, y: x.clone(), (x, y))
    assert gradcheck(lambda x, y: x.clone(), (x, y), allow_unused=True)


def test_a_function_that_is_not_deterministic_fails():
    calls = [0]
    def noisy(x):
        y = x.clone()
        calls[0] += 1
        if not ag.is_grad_enabled():
            y[0] = float(calls[0])  # a different value at every evaluation
        return y
    with pytest.raises(GradcheckError, match="not deterministic"):
        gradcheck(noisy, (leaf(2),))


def test_a_tolerance_lets_a_small_error_pass():
    # Ones instead of the upstream gradient v, |v| in [0.5, 1.5): |1 - v| < 2.5 is within atol 3,
    # not within 1e-5.
    x = leaf(2)
    with pytest.raises(GradcheckError):
        gradcheck(wrong_gradient, (x,))
    assert gradcheck(wrong_gradient, (x,), atol=3.0, rtol=0.0)


# ---- misuse ----------------------------------------------------------------------------------------


def test_float32_inputs_are_refused():
    x = ag.randn(3, requires_grad=True)  # float32, as PyTorch's default dtype
    with pytest.raises(ag.DTypeError, match=r"gradcheck: input 0 of shape \[3\] is float32"):
        gradcheck(lambda x: x.clone(), (x,))
    with pytest.raises(ag.DTypeError, match="f returned float32; it must compute in float64"):
        gradcheck(lambda x: ag.zeros(3), (leaf(3),))


def test_no_input_requiring_grad_is_refused():
    with pytest.raises(ag.ValueError, match="no input requires grad"):
        gradcheck(lambda x: x.clone(), (ag.zeros(2, dtype=ag.float64),))


def test_what_func_returns_must_be_tensors():
    with pytest.raises(TypeError, match="a tensor or a tuple of tensors, not <class 'int'>"):
        gradcheck(lambda x: 3, (leaf(2),))
    with pytest.raises(TypeError, match="every output must be an ag.Tensor"):
        gradcheck(lambda x: (x.clone(), None), (leaf(2),))


def test_pytorchs_options():
    x = leaf(2)
    assert gradcheck(lambda x: x.clone(), (x,), fast_mode=True, check_undefined_grad=False,
                     nondet_tol=0.0)
    with pytest.raises(ValueError, match="check_forward_ad=True"):
        gradcheck(lambda x: x.clone(), (x,), check_forward_ad=True)
    with pytest.raises(TypeError, match="unexpected keyword argument 'tolerance'"):
        gradcheck(lambda x: x.clone(), (x,), tolerance=1)
    with pytest.raises(ag.ValueError, match="eps must be positive"):
        gradcheck(lambda x: x.clone(), (x,), eps=0)


class Boom(Exception):
    pass


def test_a_python_exception_in_func_comes_out_as_itself():
    error = Boom("raised inside func")
    calls = [0]
    def f(x):
        calls[0] += 1
        if calls[0] == 3:  # in the middle of the numeric passes
            raise error
        return x.clone()
    with pytest.raises(Boom) as caught:
        gradcheck(f, (leaf(4),))
    assert caught.value is error
    with pytest.raises(ZeroDivisionError):
        gradcheck(lambda x: 1 / 0, (leaf(1),))
    assert ag.is_grad_enabled()  # the check's no_grad did not leak out


# ---- gradcheck_parameters ---------------------------------------------------------------------------


def test_gradcheck_parameters_perturbs_in_place_and_restores():
    w, b = leaf(3, 2), leaf(2, seed=1)
    w_values, b_values = w.detach().numpy().copy(), b.detach().numpy().copy()
    w.grad = ag.full((3, 2), 7.0, dtype=ag.float64)
    f = lambda: (w[1:], b.clone())
    assert gradcheck_parameters(f, {"weight": w, "bias": b})
    assert gradcheck_parameters(f, [("weight", w), ("bias", b)])
    assert gradcheck_parameters(f, [w, b])
    np.testing.assert_array_equal(w.detach().numpy(), w_values)
    np.testing.assert_array_equal(b.detach().numpy(), b_values)
    np.testing.assert_array_equal(w.grad.numpy(), np.full((3, 2), 7.0))
    assert b.grad is None


def test_gradcheck_parameters_names_the_parameter():
    w = leaf(3)
    with pytest.raises(GradcheckError, match="parameter weight"):
        gradcheck_parameters(lambda: wrong_gradient(w), {"weight": w})
    result = gradcheck_parameters(lambda: wrong_gradient(w), {"weight": w}, raise_exception=False)
    assert result is False


def test_gradcheck_parameters_skips_frozen_ones_and_needs_one():
    w, frozen = leaf(2), ag.zeros(2, dtype=ag.float64)
    assert gradcheck_parameters(lambda: (w.clone(), frozen.clone()), {"w": w, "frozen": frozen})
    with pytest.raises(ag.ValueError, match="none of the 1 tensors requires grad"):
        gradcheck_parameters(lambda: frozen.clone(), {"frozen": frozen})


def test_gradcheck_parameters_restores_values_when_func_raises():
    w = leaf(5)
    values = w.detach().numpy().copy()
    calls = [0]
    def f():
        calls[0] += 1
        if calls[0] == 6:  # while an element is perturbed
            raise Boom()
        return w.clone()
    with pytest.raises(Boom):
        gradcheck_parameters(f, {"w": w})
    np.testing.assert_array_equal(w.detach().numpy(), values)


class PythonModule:
    """What gradcheck_parameters reads of a module: named_parameters()."""

    def __init__(self):
        self.weight = leaf(2, 2)

    def named_parameters(self):
        return [("weight", self.weight)]


def test_gradcheck_parameters_of_a_module():
    m = PythonModule()
    assert gradcheck_parameters(lambda: m.weight[0], m)
    with pytest.raises(GradcheckError, match="parameter weight"):
        gradcheck_parameters(lambda: wrong_gradient(m.weight), m)


# ---- with ag's ops (bound by python/src/ops.cpp and nn.cpp) ---------------------------------------



def test_gradcheck_of_ops():
    x, y = leaf(3, 4), leaf(3, 4, seed=1)
    assert gradcheck(lambda x, y: ag.sin(x) * y + x * x, (x, y))


def test_gradcheck_of_rotary_embedding_and_rms_norm():
    # float64 checks of the modern block's two fused ops through the binding.
    x = leaf(2, 3, 6)
    theta = np.random.default_rng(2).uniform(-3, 3, (3, 2))
    cos, sin = ag.tensor(np.cos(theta)), ag.tensor(np.sin(theta))  # constants: not checked
    for pairs in ("interleaved", "halves"):
        assert gradcheck(lambda x: ag.rotary_embedding(x, cos, sin, pairs), (x,))
    weight = leaf(3, 6, seed=1)
    assert gradcheck(lambda x, w: ag.rms_norm(x, (3, 6), w), (x, weight))
    assert gradcheck(lambda x: ag.nn.functional.rms_norm(x, 6, eps=1e-3), (x,))


def test_gradcheck_parameters_of_the_modern_block():
    ag.manual_seed(0)
    x = ag.randn(2, 4, 8, dtype=ag.float64)
    norm = ag.nn.RMSNorm(8).double()
    ag.nn.init.uniform_(norm.weight, 0.5, 1.5)  # not ones, where a gradient forgetting w would pass
    assert gradcheck_parameters(lambda: norm(x), norm)
    ffn = ag.nn.SwiGLUFFN(8, 12, 8, bias=True).double()
    assert gradcheck_parameters(lambda: ffn(x), ffn)
    attention = ag.nn.MultiHeadAttention(8, 8, 8, 8, 4, 0.0, positions="rope", num_kv_heads=2).double()
    assert gradcheck_parameters(lambda: attention(x, x, x, is_causal=True), attention)


def test_gradcheck_parameters_of_linear():
    linear = ag.nn.Linear(4, 3).double()
    x = ag.randn(2, 4, dtype=ag.float64)
    assert gradcheck_parameters(lambda: linear(x), linear)
