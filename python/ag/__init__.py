"""ag from Python: the C++ engine (ag._C) under PyTorch's names (docs/python.md).

    import ag
    x = ag.ones(2, 4, 100)
    attention = ag.nn.MultiHeadAttention(100, 100, 100, 100, 5, 0.5)

What is written here in Python is the layer a PyTorch user expects around the engine: ag.Size,
ag.tensor's inference of dtypes from Python values, ag.no_grad() as a context manager and a
decorator, ag.nn.Module for models written in Python. Everything that computes is C++.
"""

import builtins as _builtins
import functools as _functools


from . import _C
from ._C import *  # noqa: F401,F403  Tensor, the dtypes, the errors, creation, the ops

# ag._C's submodules are the C++ halves of the packages below (ag.nn is python/ag/nn/).
for _name in ("nn", "optim", "io", "viz"):
    globals().pop(_name, None)

__version__ = "0.1.0"

# ag.bool, ag.float and ag.ValueError (dtypes, an error class) shadow the built-ins in this file.
_builtin_bool = _builtins.bool
_builtin_float = _builtins.float


class Size(tuple):
    """A tensor's shape, as torch.Size: a tuple that prints as ag.Size([2, 4, 100])."""

    def __repr__(self):
        return "ag.Size([" + ", ".join(str(s) for s in self) + "])"

    def numel(self):
        n = 1
        for s in self:
            n *= s
        return n


Tensor.shape = property(lambda self: Size(self._shape), doc="The sizes of the dims (an ag.Size).")


def _size(self, dim=None):
    """t.size() is t.shape; t.size(d) the size of dim d (negative counts from the end)."""
    shape = Size(self._shape)
    if dim is None:
        return shape
    if not -len(shape) <= dim < len(shape):
        raise IndexError(
            f"size: dim {dim} is out of range for a tensor of {len(shape)} dims (shape {list(shape)})"
        )
    return shape[dim]


Tensor.size = _size


# ---- devices: ag computes on the CPU; PyTorch code that moves tensors around still runs ----------


class device:
    """The one device ag has (torch.device('cpu')): .to(device) and .device keep d2l's code as it is."""

    def __init__(self, spec="cpu"):
        name = spec.type if isinstance(spec, device) else str(spec)
        if name.split(":")[0] != "cpu":
            raise RuntimeError(f"device: ag computes on the CPU only, not on {name!r}")
        self.type = "cpu"

    def __repr__(self):
        return "device(type='cpu')"

    def __eq__(self, other):
        return isinstance(other, device)

    def __hash__(self):
        return hash("cpu")


_cpu = device("cpu")
_device = device  # (the class, for functions whose `device` argument hides it)
Tensor.device = property(lambda self: _cpu)
Tensor.is_cuda = property(lambda self: False)


def _on_the_cpu(make):
    """make as PyTorch's creation functions are called, with device= (nanoGPT's
    torch.arange(0, t, dtype=torch.long, device=device)): the CPU — 'cpu', ag.device('cpu') or
    None — or the error ag.device gives for another; the other arguments go to make as they are."""

    @_functools.wraps(make)
    def create(*args, device=None, **kwargs):
        _device(device or "cpu")
        return make(*args, **kwargs)

    return create


_creation = ("zeros", "ones", "empty", "rand", "randn", "full", "zeros_like", "ones_like",
             "full_like", "rand_like", "randn_like", "eye", "linspace", "randint", "randperm",
             "scalar_tensor")
for _name in _creation:
    globals()[_name] = _on_the_cpu(getattr(_C, _name))


def _to(self, *args, **kwargs):
    """t.to(dtype), t.to(device), t.to(other) as PyTorch's: a copy in another dtype, or t itself."""
    target = kwargs.pop("dtype", None)
    kwargs.pop("device", None)
    kwargs.pop("non_blocking", None)
    copy = kwargs.pop("copy", False)
    if kwargs:
        raise TypeError(f"to: unexpected arguments {sorted(kwargs)}")
    for arg in args:
        if isinstance(arg, dtype):
            target = arg
        elif isinstance(arg, Tensor):
            target = arg.dtype
        else:
            device(arg)  # a device: the CPU, or an error naming it
    out = self if target is None else self._to_dtype(target)
    return out.clone() if copy and out.is_same(self) else out


Tensor.to = _to
Tensor.cpu = lambda self: self


# ---- creation ---------------------------------------------------------------------------------------

def _numpy():
    """NumPy, imported when first needed: `import ag` works in an interpreter without it (ag.tensor,
    from_numpy and t.numpy() need it; Debian's python3-numpy)."""
    import numpy

    return numpy


def _infer_dtype(array, from_python):
    """PyTorch's rule: Python floats make float32 (the default dtype), ints int64, bools bool; a
    NumPy array keeps its dtype (float64 stays float64, any integer type becomes int64)."""
    kind = array.dtype.kind
    if kind == "b":
        return bool
    if kind in "iu":
        if kind == "u" and array.size and array.max() > _numpy().iinfo(_numpy().int64).max:
            raise ValueError(f"tensor: the value {array.max()} is beyond int64's range")
        return int64
    if kind == "f":
        if array.dtype.itemsize == 8 and not from_python:
            return float64
        return float32
    what = {"U": "strings", "S": "bytes", "c": "complex numbers", "O": "Python objects"}.get(kind)
    raise TypeError(
        f"tensor: cannot make a tensor of {what or str(array.dtype) + ' values'} "
        "(ag has float32, float64, int64 and bool)"
    )


def tensor(data, dtype=None, device=None, requires_grad=False):
    """A new tensor holding a copy of `data` (nested lists of numbers, a NumPy array, a scalar), as
    torch.tensor. dtype: inferred as PyTorch does unless given. Values the dtype cannot hold exactly
    (0.5 into int64, an int beyond 2^24 into float32) are an ag.ValueError, not rounded."""
    _device(device or "cpu")  # the CPU, or an error naming the device
    if isinstance(data, Tensor):
        out = data.detach().clone()
        out = out if dtype is None else out._to_dtype(dtype)
    else:
        _np = _numpy()
        from_python = not isinstance(data, (_np.ndarray, _np.generic))
        array = _np.asarray(data)
        inferred = _infer_dtype(array, from_python)
        if array.dtype.kind in "iu" and array.dtype != _np.int64:
            array = array.astype(_np.int64)  # exact: _infer_dtype checked uint64's range
        elif array.dtype.kind == "f" and array.dtype.itemsize < 4:
            array = array.astype(_np.float32)  # exact: float16 values are float32 values
        out = _C._tensor_from_array(array, dtype if dtype is not None else inferred)
    if requires_grad:
        out.requires_grad_()
    return out


as_tensor = tensor


def arange(start, end=None, step=1, *, dtype=None, device=None, requires_grad=False):
    """torch.arange: int64 when start, end and step are ints (positions, token ids), else float32."""
    _device(device or "cpu")  # the CPU, or an error naming the device
    if end is None:
        start, end = 0, start
    if dtype is None:
        ints = _builtins.all(isinstance(v, int) and not isinstance(v, _builtin_bool) for v in (start, end, step))
        dtype = int64 if ints else float32
    out = _C._arange(_builtin_float(start), _builtin_float(end), _builtin_float(step), dtype)
    if requires_grad:
        out.requires_grad_()
    return out


# ---- grad mode --------------------------------------------------------------------------------------


class _GradMode:
    """A context manager and decorator that sets grad mode while it is active."""

    enabled = True

    def __enter__(self):
        self._previous = is_grad_enabled()
        _C._set_grad_enabled(self.enabled)
        return self

    def __exit__(self, *exc):
        _C._set_grad_enabled(self._previous)
        return False

    def __call__(self, fn):
        @_functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with self.__class__():
                return fn(*args, **kwargs)

        return wrapper


class no_grad(_GradMode):
    """with ag.no_grad(): ops record nothing (evaluation, updates by hand); also a decorator."""

    enabled = False


class enable_grad(_GradMode):
    """with ag.enable_grad(): ops record again inside a no_grad block."""

    enabled = True


class set_grad_enabled(_GradMode):
    """ag.set_grad_enabled(False) as a context manager, as torch.set_grad_enabled."""

    def __init__(self, mode):
        self.enabled = _builtin_bool(mode)
        self._previous = is_grad_enabled()
        _C._set_grad_enabled(self.enabled)  # also works as a plain call, as PyTorch's

    def __enter__(self):
        return self

    def __call__(self, fn):
        raise TypeError("set_grad_enabled: use ag.no_grad() or ag.enable_grad() as a decorator")


# ---- the rest of the package: the ops' Python side, modules, optimizers, files, pictures -------
from ._ops import *  # noqa: E402,F401,F403  (python/ag/_ops.py)
from . import autograd, io, nn, optim, profiler, viz  # noqa: E402,F401
from .autograd import gradcheck, gradcheck_parameters  # noqa: E402,F401


# ---- PyTorch's dtypes that ag has not -----------------------------------------------------------
# ag computes in float32 and float64, counts in int64 and masks in bool. A name of another of
# PyTorch's dtypes (makemore's first line: torch.zeros((27, 27), dtype=torch.int32)) is an
# AttributeError that says which of ag's to use, not a silent stand-in of another width.
_dtypes_ag_has_not = {
    "int32": "int64 (ag.long)", "int": "int64 (ag.long)", "int16": "int64 (ag.long)",
    "short": "int64 (ag.long)", "int8": "int64 (ag.long)", "uint8": "int64 or bool",
    "float16": "float32", "half": "float32", "bfloat16": "float32",
    "complex64": "none (ag has no complex numbers)", "cfloat": "none (ag has no complex numbers)",
    "complex128": "none (ag has no complex numbers)",
}


def __getattr__(name):
    if name in _dtypes_ag_has_not:
        raise AttributeError(f"ag has no dtype {name}: ag's dtypes are float32, float64, int64 and "
                             f"bool; use {_dtypes_ag_has_not[name]}")
    raise AttributeError(f"module 'ag' has no attribute {name!r}")
