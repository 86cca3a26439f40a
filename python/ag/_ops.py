"""The Python side of ag's ops (the ops themselves are C++: python/src/ops.cpp).

What is here is composed from the C++ ops where Python reads better: unbind, iterating a tensor
over its first dim (`for row in x`, which PyTorch does through unbind), broadcast_shapes, the
logical operators on bool masks (`causal & padding`), isclose and allclose, log10 and log2,
histogram, and the reductions' keepdims= (NumPy's name for keepdim=, which PyTorch's take too).
"""

import collections as _collections
import functools as _functools
import math as _math

from . import _C

__all__ = ["unbind", "broadcast_shapes", "logical_and", "logical_or", "logical_xor", "isclose",
           "allclose", "log10", "log2", "histogram"]


def unbind(input, dim=0):
    """torch.unbind: the slices of `input` along `dim`, each without that dim: a tuple of views."""
    return tuple(input.select(dim, i) for i in range(input.size(dim)))


def broadcast_shapes(*shapes):
    """torch.broadcast_shapes: the shape that tensors of these shapes broadcast to, an ag.Size."""
    from . import Size  # (defined in ag/__init__.py before it imports this file)

    return Size(_C._broadcast_shapes(*shapes))


def _iter(self):
    """for row in x: the rows of dim 0 (a 0-dim tensor is not iterable, as in PyTorch)."""
    if self.dim() == 0:
        raise TypeError("iteration over a 0-d tensor")
    return iter(unbind(self, 0))


_C.Tensor.unbind = unbind
_C.Tensor.__iter__ = _iter


# ---- &, |, ^ on bool tensors (masks), from where and ne ---------------------------------------


def _bool_operands(op, a, b):
    """a and b as bool tensors of one kind; PyTorch's bitwise ops on integers are not in ag."""
    if isinstance(b, _builtin_bool):
        b = _C.full((), b, dtype=_C.bool)
    for x in (a, b):
        if not isinstance(x, _C.Tensor) or x.dtype != _C.bool:
            what = x.dtype if isinstance(x, _C.Tensor) else type(x).__name__
            raise TypeError(f"{op}: ag's {op} takes bool tensors (masks), got {what}")
    return a, b


def logical_and(input, other):
    """input & other on bool masks: True where both are (broadcast)."""
    a, b = _bool_operands("logical_and", input, other)
    return _C.where(a, b, _C.zeros((), dtype=_C.bool))


def logical_or(input, other):
    """input | other on bool masks: True where either is (broadcast)."""
    a, b = _bool_operands("logical_or", input, other)
    return _C.where(a, _C.ones((), dtype=_C.bool), b)


def logical_xor(input, other):
    """input ^ other on bool masks: True where exactly one is (broadcast)."""
    a, b = _bool_operands("logical_xor", input, other)
    return _C.ne(a, b)


_builtin_bool = bool
_C.Tensor.__and__ = _C.Tensor.__rand__ = lambda self, other: logical_and(self, other)
_C.Tensor.__or__ = _C.Tensor.__ror__ = lambda self, other: logical_or(self, other)
_C.Tensor.__xor__ = _C.Tensor.__rxor__ = lambda self, other: logical_xor(self, other)
_C.Tensor.logical_and = logical_and
_C.Tensor.logical_or = logical_or
_C.Tensor.logical_xor = logical_xor


# ---- log10, log2: composed from log (makemore's loss.log10() for its plots) ---------------------


def log10(input):
    """torch.log10: log(input) / ln 10, differentiable through log (within an ulp of PyTorch's)."""
    return _C.log(input) / _math.log(10)


def log2(input):
    """torch.log2: log(input) / ln 2, differentiable through log (within an ulp of PyTorch's)."""
    return _C.log(input) / _math.log(2)


_C.Tensor.log10 = log10
_C.Tensor.log2 = log2


# ---- isclose, allclose: makemore's check of a gradient written by hand ------------------------


def isclose(input, other, rtol=1e-05, atol=1e-08, equal_nan=False):
    """torch.isclose: True where |input − other| ≤ atol + rtol · |other| (broadcast), and where the
    two are equal (the infinities); NaN is close to NaN only with equal_nan. The two must have one
    dtype, as in PyTorch."""
    for name, x in (("input", input), ("other", other)):
        if not isinstance(x, _C.Tensor):
            raise TypeError(f"isclose: {name} must be a tensor, got {type(x).__name__}")
    if input.dtype != other.dtype:
        raise TypeError(f"isclose: input's dtype {input.dtype} does not match other's "
                        f"{other.dtype}")
    if rtol < 0 or atol < 0:
        raise ValueError(f"isclose: rtol ({rtol}) and atol ({atol}) must be non-negative")
    close = logical_or(_C.eq(input, other), (input - other).abs() <= atol + rtol * other.abs())
    if equal_nan:
        close = logical_or(close, logical_and(_C.isnan(input), _C.isnan(other)))
    return close


def allclose(input, other, rtol=1e-05, atol=1e-08, equal_nan=False):
    """torch.allclose: whether isclose holds for every element, as a Python bool."""
    return _builtin_bool(isclose(input, other, rtol, atol, equal_nan).all())


_C.Tensor.isclose = isclose
_C.Tensor.allclose = allclose


# ---- histogram: makemore's plots of activations and gradients -----------------------------------

_histogram_result = _collections.namedtuple("histogram", ("hist", "bin_edges"))
_histogram_result.__module__ = "ag.return_types"


def histogram(input, bins=100, *, range=None, weight=None, density=False):
    """torch.histogram: how many of input's elements fall in each of `bins` equal bins over `range`
    (input's min to max by default; a point range widens to ±0.5), or in the bins between the edges
    of a 1-D tensor `bins`. Each bin holds its left edge, the last its right edge too; elements
    outside are not counted. With `weight` (input's shape), the sums of their weights; with
    `density`, scaled so that the histogram integrates to 1. A (hist, bin_edges) namedtuple in
    input's dtype, not differentiable; NumPy's np.histogram counts (PyTorch's rule is NumPy's)."""
    import numpy

    from . import tensor  # (ag/__init__.py, which imports this file)

    if not isinstance(input, _C.Tensor) or not input.is_floating_point():
        what = input.dtype if isinstance(input, _C.Tensor) else type(input).__name__
        raise TypeError(f"histogram: input must be a float32 or float64 tensor, got {what}")
    values = input.detach().contiguous().numpy().ravel()
    if isinstance(bins, _C.Tensor):
        if bins.dim() != 1 or bins.dtype != input.dtype:
            raise TypeError(f"histogram: bins must be a 1-D tensor of input's dtype {input.dtype}, "
                            f"got shape {tuple(bins.shape)} of {bins.dtype}")
        bins = bins.detach().contiguous().numpy()
    elif not isinstance(bins, int) or isinstance(bins, _builtin_bool) or bins < 1:
        raise ValueError(f"histogram: bins must be a positive int or a tensor of edges, "
                         f"got {bins!r}")
    weights = None
    if weight is not None:
        if not isinstance(weight, _C.Tensor) or weight.shape != input.shape:
            raise ValueError("histogram: weight must be a tensor of input's shape "
                             f"{tuple(input.shape)}")
        weights = weight.detach().contiguous().numpy().ravel()
    hist, edges = numpy.histogram(values, bins=bins, range=range, weights=weights, density=density)
    return _histogram_result(tensor(hist.astype(values.dtype)), tensor(edges.astype(values.dtype)))


_C.Tensor.histogram = histogram


# ---- keepdims: NumPy's name for keepdim, which PyTorch's reductions take too ---------------------


def _keepdims_alias(reduce):
    """reduce with keepdims= as another name for keepdim=, as PyTorch's reductions take it
    (makemore's P.sum(1, keepdims=True))."""

    @_functools.wraps(reduce)
    def reduction(*args, **kwargs):
        if "keepdims" in kwargs:
            if "keepdim" in kwargs:
                raise TypeError(f"{reduce.__name__}: keepdim and keepdims are one argument; give one")
            kwargs["keepdim"] = kwargs.pop("keepdims")
        return reduce(*args, **kwargs)

    return reduction


_reductions = ("sum", "mean", "amax", "amin", "std", "var", "logsumexp", "max", "min", "argmax",
               "argmin", "any", "all")
for _name in _reductions:
    setattr(_C.Tensor, _name, _keepdims_alias(getattr(_C.Tensor, _name)))
    globals()[_name] = _keepdims_alias(getattr(_C, _name))
__all__ += list(_reductions)
