"""ag.nn: ag's modules under d2l's and PyTorch's names (python/src/nn.cpp).

ag.nn.Module is ag's C++ Module; a Python class derives from it as from torch.nn.Module:

    class MyModel(ag.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = ag.nn.Linear(3, 4)
            self.scale = ag.nn.Parameter(ag.ones(4))

        def forward(self, x):
            return self.lin(x) * self.scale

Assigning a Module or a Parameter registers it in ag's C++ tree (a plain Tensor stays a plain
attribute, as in PyTorch); register_buffer keeps a tensor that is saved but not trained. The C++
tree is the one record: named_parameters(), state_dict(), load_state_dict(), train(), eval(), to()
and repr() walk Python and C++ modules alike, with PyTorch's dotted names.

What is written here is the Python half of Module: calling (forward), PyTorch's generators over
the tree, train/eval/to returning the module, and Sequential.

Where ag differs from PyTorch:
  - load_state_dict(strict=False) returns (missing_keys, unexpected_keys) as PyTorch, and also
    .problems: ag's one line per entry that did not load, shape and dtype mismatches included
    (PyTorch raises on those even when not strict). strict=True raises ag.StateDictError naming
    every entry that does not fit, and changes nothing.
  - C++ layers (Linear, MultiHeadAttention, ...) have a fixed set of parameters and children:
    their slots can be reassigned (tying: lm_head.weight = wte.weight) but not added to. A Python
    subclass of one runs its own forward but prints under the layer's name.
  - module.training is read-only: train() and eval() set it for the whole tree.
  - No hooks on modules, and no pickling or copy.deepcopy of them (save a state_dict instead).
"""

import collections as _collections
import sys as _sys

import ag as _ag  # the package (partly imported: its dtypes, devices and Tensor are there)
from .._C.nn import *  # noqa: F401,F403  Module, Parameter, the layers, ModuleList, ModuleDict
from .._C.nn import Module, Parameter, init, utils

# `import ag.nn.init` and `import ag.nn.utils`: the C++ submodules as modules of the package.
for _name, _module in (("init", init), ("utils", utils)):
    _sys.modules[__name__ + "." + _name] = _module

# ag.nn.functional is python/ag/nn/functional.py (the ops' functions); the functional forms bound
# here with the modules (mse_loss, masked_softmax, masked_softmax_ce, linear) join it where it has
# no function of that name.
import importlib as _importlib  # noqa: E402

from .._C.nn import functional as _bound_functional  # noqa: E402

# (import_module: `from . import functional` would take the star import's ag._C.nn.functional)
functional = _importlib.import_module(__name__ + ".functional")

for _name in dir(_bound_functional):
    if not _name.startswith("_") and not hasattr(functional, _name):
        setattr(functional, _name, getattr(_bound_functional, _name))


# ---- Module's Python half -------------------------------------------------------------------------


def _call(self, *args, **kwargs):
    """module(x, ...) runs module.forward(x, ...) (C++ layers release the GIL inside)."""
    return self.forward(*args, **kwargs)


def _forward(self, *args, **kwargs):
    raise NotImplementedError(f'Module [{type(self).__name__}] is missing the required "forward" function')


def _parameters(self, recurse=True):
    """The trained tensors (ag.nn.Parameter), each once (a tied weight once), as a generator."""
    for _, p in self._named_parameter_list("", recurse, True):
        yield p


def _named_parameters(self, prefix="", recurse=True, remove_duplicate=True):
    """(dotted name, Parameter) pairs in registration order: "encoder.blks.0.attention.W_q.weight"."""
    return iter(self._named_parameter_list(prefix, recurse, remove_duplicate))


def _buffers(self, recurse=True):
    for _, b in self._named_buffer_list("", recurse, True):
        yield b


def _named_buffers(self, prefix="", recurse=True, remove_duplicate=True):
    return iter(self._named_buffer_list(prefix, recurse, remove_duplicate))


def _children(self):
    for _, m in self._named_children_list():
        yield m


def _named_children(self):
    return iter(self._named_children_list())


def _named_modules(self, memo=None, prefix="", remove_duplicate=True):
    """This module and every submodule, depth first, with dotted names ("" for this one)."""
    yield prefix, self
    for name, child in self._named_children_list():
        yield from child.named_modules(memo, prefix + ("." if prefix else "") + name, remove_duplicate)


def _modules(self):
    for _, m in self.named_modules():
        yield m


def _train(self, mode=True):
    """Training mode (dropout active) or not, for the whole tree; returns the module."""
    if not isinstance(mode, bool):
        raise ValueError("training mode is expected to be boolean")
    self._train(mode)
    return self


def _eval(self):
    return self.train(False)


def _requires_grad_(self, requires_grad=True):
    for p in self.parameters():
        p.requires_grad_(requires_grad)
    return self


def _zero_grad(self, set_to_none=True):
    """Drops every parameter's gradient (set_to_none=False: fills them with zeros instead)."""
    if set_to_none:
        self._zero_grad()
        return
    for p in self.parameters():
        if p.grad is not None:
            p.grad.zero_()


def _to(self, *args, **kwargs):
    """module.to(dtype) converts the floating parameters and buffers in place (int64 and bool ones
    stay); module.to("cpu") is the module as it is. Returns the module, as PyTorch's."""
    target = kwargs.pop("dtype", None)
    kwargs.pop("device", None)
    kwargs.pop("non_blocking", None)
    if kwargs:
        raise TypeError(f"to: unexpected arguments {sorted(kwargs)}")
    for arg in args:
        if isinstance(arg, _ag.dtype):
            target = arg
        elif isinstance(arg, _ag.Tensor):
            target = arg.dtype
        else:
            _ag.device(arg)  # the CPU, or an error naming the device
    if target is not None:
        if not target.is_floating_point:
            raise TypeError(f"to: modules are converted to floating dtypes only, not {target!r}")
        self._to_dtype(target)
    return self


def _apply(self, fn):
    """fn(module) for every submodule, then for this one (PyTorch's order); returns the module."""
    for child in self.children():
        child.apply(fn)
    fn(self)
    return self


def _state_dict(self, *args, destination=None, prefix="", keep_vars=False):
    """Every parameter and buffer by dotted name, in PyTorch's order (an OrderedDict). The values
    are detached tensors sharing the module's storage (keep_vars=True: the tensors themselves)."""
    if args:
        raise TypeError("state_dict: pass destination, prefix and keep_vars by keyword")
    out = self._state_dict(prefix=prefix, keep_vars=keep_vars)
    if destination is None:
        return out
    destination.update(out)
    return destination


class _IncompatibleKeys(_collections.namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])):
    """What load_state_dict returns: PyTorch's (missing_keys, unexpected_keys), and ag's problems,
    one line per entry that did not load (shape and dtype mismatches included)."""

    problems = ()

    def __repr__(self):
        if not self.problems:
            return "<All keys matched successfully>"
        return super().__repr__()


def _load_state_dict(self, state_dict, strict=True):
    """Copies the entries of state_dict into the parameters and buffers of those names. strict:
    everything must fit (names, shapes, dtypes), else ag.StateDictError naming each entry and
    nothing changes. Not strict: what fits is loaded; the rest is in the result's .problems."""
    problems = self._load_state_dict(dict(state_dict), strict)
    missing = [p[len("missing ") :] for p in problems if p.startswith("missing ")]
    unexpected = [p[len("unexpected ") :] for p in problems if p.startswith("unexpected ")]
    result = _IncompatibleKeys(missing, unexpected)
    result.problems = tuple(problems)
    return result


def _get_submodule(self, target):
    module = self
    for name in target.split(".") if target else []:
        child = dict(module._named_children_list()).get(name)
        if child is None:
            raise AttributeError(f"{module._get_name()} has no attribute `{name}`")
        module = child
    return module


def _dir(self):
    """The attributes, with the module's own parameters, buffers and children (tab completion)."""
    names = set(object.__dir__(self))
    names.update(n for n, _ in self._named_parameter_list("", False, True))
    names.update(n for n, _ in self._named_buffer_list("", False, True))
    names.update(n for n, _ in self._named_children_list())
    return sorted(names)


def _cuda(self, *args, **kwargs):
    raise RuntimeError("cuda: ag computes on the CPU only")


for _name, _fn in {
    "__call__": _call,
    "forward": _forward,
    "parameters": _parameters,
    "named_parameters": _named_parameters,
    "buffers": _buffers,
    "named_buffers": _named_buffers,
    "children": _children,
    "named_children": _named_children,
    "modules": _modules,
    "named_modules": _named_modules,
    "train": _train,
    "eval": _eval,
    "requires_grad_": _requires_grad_,
    "zero_grad": _zero_grad,
    "to": _to,
    "float": lambda self: self.to(_ag.float32),
    "double": lambda self: self.to(_ag.float64),
    "cpu": lambda self: self,
    "cuda": _cuda,
    "apply": _apply,
    "state_dict": _state_dict,
    "load_state_dict": _load_state_dict,
    "get_submodule": _get_submodule,
    "__dir__": _dir,
}.items():
    setattr(Module, _name, _fn)
Module.register_module = Module.add_module


# ---- containers and small modules written in Python ----------------------------------------------


class Sequential(Module):
    """Modules applied one after another (torch.nn.Sequential), named "0", "1", ... or by the keys
    of an OrderedDict."""

    def __init__(self, *args):
        super().__init__()
        if len(args) == 1 and isinstance(args[0], _collections.OrderedDict):
            for name, module in args[0].items():
                self.add_module(name, module)
        else:
            for i, module in enumerate(args):
                self.add_module(str(i), module)

    def forward(self, input):
        for module in self.children():
            input = module(input)
        return input

    def __len__(self):
        return len(self._named_children_list())

    def __iter__(self):
        return self.children()

    def __getitem__(self, idx):
        modules = list(self.children())
        if isinstance(idx, slice):
            return Sequential(*modules[idx])
        return modules[idx]

    def append(self, module):
        self.add_module(str(len(self)), module)
        return self


class Identity(Module):
    """forward(x) is x (torch.nn.Identity)."""

    def __init__(self, *args, **kwargs):
        super().__init__()

    def forward(self, input):
        return input


class CrossEntropyLoss(Module):
    """Softmax cross-entropy of logits against class ids, as torch.nn.CrossEntropyLoss: the
    functional.cross_entropy of python/ag/nn/functional.py, with its arguments."""

    def __init__(self, weight=None, size_average=None, ignore_index=-100, reduce=None, reduction="mean",
                 label_smoothing=0.0):
        super().__init__()
        self._options = dict(weight=weight, size_average=size_average, ignore_index=ignore_index, reduce=reduce,
                             reduction=reduction, label_smoothing=label_smoothing)
        self.reduction = reduction

    def forward(self, input, target):
        return functional.cross_entropy(input, target, **self._options)


class MSELoss(Module):
    """mean((input - target)²), as torch.nn.MSELoss() (reduction='mean' only)."""

    def __init__(self, reduction="mean"):
        super().__init__()
        if reduction != "mean":
            raise ValueError(f"MSELoss: ag computes reduction='mean' only, not {reduction!r}")

    def forward(self, input, target):
        return functional.mse_loss(input, target)
