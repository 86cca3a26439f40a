"""The Python side of ag's ops (the ops themselves are C++: python/src/ops.cpp).

What is here is composed from the C++ ops where Python reads better: unbind, iterating a tensor
over its first dim (`for row in x`, which PyTorch does through unbind), broadcast_shapes.
"""

from . import _C

__all__ = ["unbind", "broadcast_shapes"]


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
