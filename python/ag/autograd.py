"""ag.autograd: gradient checks, as torch.autograd.gradcheck (python/src/io.cpp binds ag's
autograd/gradcheck.h).

    x = ag.randn(3, 4, dtype=ag.float64, requires_grad=True)
    ag.autograd.gradcheck(lambda x: (x * x).sum(1), (x,))          # True, or GradcheckError

    linear = ag.nn.Linear(4, 3).double()
    ag.autograd.gradcheck_parameters(lambda: linear(x), linear)   # its parameters, in place

The check is ag's: for a random upstream gradient v, L = sum(func(...) * v) is differentiated by
backward and by central differences element by element, and every element must satisfy
|analytic - numeric| <= atol + rtol * |numeric|. It also fails when the function does not depend
on a checked input or is not deterministic (dropout in training mode). The message lists the
input, the element's index and both values.

As PyTorch's, gradcheck returns True or raises GradcheckError (a RuntimeError) with that message;
raise_exception=False returns False instead. Everything is float64: a float32 input that requires
grad is an ag.DTypeError (PyTorch only warns, and its check is noise at eps=1e-6). Only the
backward-mode check exists: PyTorch's forward-mode and batched checks are a ValueError if asked
for; fast_mode=True runs ag's full check, which is stricter.

func is a Python function called by ag's C++ under the GIL; an exception it raises comes out of
gradcheck as itself, and whatever gradcheck perturbed is restored.
"""

from . import _C

GradcheckResult = _C._autograd.GradcheckResult


class GradcheckError(RuntimeError):
    """A gradient check that failed (torch.autograd.gradcheck.GradcheckError); .result holds ag's
    GradcheckResult (passed, message, failed_elements)."""

    def __init__(self, result):
        super().__init__(result.message)
        self.result = result


# PyTorch's options of checks ag does not make, with the values at which that is no difference.
_torch_options = {
    "check_sparse_nnz": (False,),
    "nondet_tol": (0.0,),
    "check_undefined_grad": (True, False),  # ag's backward passes no undefined gradients
    "check_grad_dtypes": (True, False),  # ag's gradients always have their tensor's dtype
    "check_batched_grad": (False,),
    "check_batched_forward_grad": (False,),
    "check_forward_ad": (False,),
    "check_backward_ad": (True,),
    "fast_mode": (True, False),  # ag always runs the full (slow) check
}


def _check_torch_options(options, op):
    for name, value in options.items():
        if name not in _torch_options:
            raise TypeError(f"{op}() got an unexpected keyword argument {name!r}")
        if value not in _torch_options[name]:
            raise ValueError(
                f"{op}: ag's check is the backward-mode one only; {name}={value!r} is not available"
            )


def _finish(result, raise_exception):
    if result.passed:
        return True
    if raise_exception:
        raise GradcheckError(result)
    return False


def gradcheck(func, inputs, *, eps=1e-6, atol=1e-5, rtol=1e-3, raise_exception=True, seed=0,
              max_failures=10, allow_unused=False, **torch_options):
    """Checks the gradients of func(*inputs) with respect to every input tensor that requires
    grad, as torch.autograd.gradcheck.

    inputs: a tensor or a tuple of them. Each that requires grad (float64) is checked: func
    receives a copy, perturbed element by element; other values — tensors that do not require
    grad (indices, masks, constants), numbers — pass to func as they are. func may return a tensor
    or a tuple of them (their floating-point ones are checked together); messages name "input i",
    the i-th of `inputs`. seed: the upstream gradient's;
    max_failures: elements listed in the message; allow_unused: an input func does not depend on
    passes. Returns True, or raises GradcheckError (raise_exception=False: returns False)."""
    _check_torch_options(torch_options, "gradcheck")
    args = tuple(inputs) if isinstance(inputs, (tuple, list)) else (inputs,)
    result = _C._autograd._gradcheck(func, args, eps, atol, rtol, seed, max_failures, allow_unused)
    return _finish(result, raise_exception)


def _named_parameters(parameters):
    """(name, tensor) pairs from a module, a dict, or a list of tensors or of pairs."""
    if hasattr(parameters, "named_parameters"):
        return list(parameters.named_parameters())
    if isinstance(parameters, dict):
        return list(parameters.items())
    from . import Tensor

    if isinstance(parameters, Tensor):
        return [("0", parameters)]
    return [
        p if isinstance(p, tuple) and len(p) == 2 and isinstance(p[0], str) else (str(i), p)
        for i, p in enumerate(parameters)
    ]


def gradcheck_parameters(func, parameters, *, eps=1e-6, atol=1e-5, rtol=1e-3,
                         raise_exception=True, seed=0, max_failures=10, allow_unused=False):
    """Checks the gradients of func() — which takes no arguments and reads the tensors itself —
    with respect to the parameters: a module (its named_parameters(); call module.double()
    first), a dict {name: tensor}, or a list of tensors or (name, tensor) pairs. They are perturbed
    in place one element at a time and restored, with their .grad, also if func raises. Frozen
    ones (requires_grad False) are skipped. Returns True or raises GradcheckError, as gradcheck."""
    named = _named_parameters(parameters)
    result = _C._autograd._gradcheck_parameters(
        func, named, eps, atol, rtol, seed, max_failures, allow_unused
    )
    return _finish(result, raise_exception)


__all__ = ["gradcheck", "gradcheck_parameters", "GradcheckError", "GradcheckResult"]
