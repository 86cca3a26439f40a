"""ag.nn.functional, as torch.nn.functional: the ops of layers as functions.

    import ag.nn.functional as F
    F.softmax(scores, dim=-1)

Each is one ag op (python/src/ops.cpp) under PyTorch's signature. Arguments ag has no use for
keep PyTorch's defaults and are refused, with a message saying so, when given another value:
inplace=True where ag's in-place update would not be differentiable, a class weight, label
smoothing, an attention mask (ag masks by valid lengths: ag.attention).
"""

from .. import _C

__all__ = [
    "relu",
    "gelu",
    "silu",
    "tanh",
    "sigmoid",
    "softmax",
    "log_softmax",
    "dropout",
    "linear",
    "layer_norm",
    "rms_norm",
    "cross_entropy",
    "one_hot",
    "scaled_dot_product_attention",
    "embedding",
]


def _in_place(input, output):
    """F.relu(x, inplace=True): x's values replaced by the output (ag's copy_, not
    differentiable: an ag.AutogradError for an x that requires grad in grad mode)."""
    input.copy_(output)
    return input


def relu(input, inplace=False):
    out = _C.relu(input)
    return _in_place(input, out) if inplace else out


def gelu(input, approximate="none"):
    """The exact GELU x·Φ(x), or GPT-2's tanh approximation with approximate='tanh'."""
    return _C.gelu(input, approximate=approximate)


def silu(input, inplace=False):
    out = _C.silu(input)
    return _in_place(input, out) if inplace else out


def tanh(input):
    return _C.tanh(input)


def sigmoid(input):
    return _C.sigmoid(input)


def _softmax_dim(name, dim, dtype):
    if dim is None:
        raise TypeError(f"{name}: give dim (PyTorch's implicit choice of dim is deprecated)")
    if dtype is not None:
        raise TypeError(f"{name}: dtype is not supported; convert the input first (x.double())")
    return dim


def softmax(input, dim=None, _stacklevel=3, dtype=None):
    return _C.softmax(input, _softmax_dim("softmax", dim, dtype))


def log_softmax(input, dim=None, _stacklevel=3, dtype=None):
    return _C.log_softmax(input, _softmax_dim("log_softmax", dim, dtype))


def dropout(input, p=0.5, training=True, inplace=False):
    """Inverted dropout: zeros with probability p, the rest scaled by 1/(1 - p), when training."""
    if not 0 <= p <= 1:
        raise ValueError(f"dropout: probability has to be between 0 and 1, but got {p}")
    out = _C.dropout(input, p, training)
    return _in_place(input, out) if inplace else out


def linear(input, weight, bias=None):
    """y = x · Wᵀ + b for x (..., in), weight (out, in), bias (out) or None."""
    return _C.linear(input, weight, bias)


def layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5):
    return _C.layer_norm(input, normalized_shape, weight, bias, eps)


def rms_norm(input, normalized_shape, weight=None, eps=None):
    """x / sqrt(mean(x²) + eps) · weight over the trailing normalized_shape dims, as PyTorch 2.4's;
    eps None is the machine epsilon of input's dtype (torch.finfo(dtype).eps)."""
    return _C.rms_norm(input, normalized_shape, weight, eps)


def cross_entropy(
    input,
    target,
    weight=None,
    size_average=None,
    ignore_index=-100,
    reduce=None,
    reduction="mean",
    label_smoothing=0.0,
):
    """Softmax cross-entropy of logits (N, C) — or (C,), or (N, C, d1, ...) with the classes
    along dim 1 — against integer class ids. reduction 'mean', 'sum' or 'none'. A target equal to
    ignore_index has loss 0 and no gradient, and 'mean' is over the other targets, as PyTorch's
    (nanoGPT passes ignore_index=-1); if every target is ignored, 'mean' is an error (PyTorch's
    NaN would poison the run)."""
    if weight is not None:
        raise ValueError("cross_entropy: a class weight is not supported by ag (only None)")
    if size_average is not None or reduce is not None:
        raise ValueError("cross_entropy: size_average and reduce are deprecated; use reduction=")
    if label_smoothing != 0.0:
        raise ValueError("cross_entropy: label_smoothing is not supported by ag (only 0.0)")
    return _C.cross_entropy(input, target, reduction, ignore_index)


def one_hot(tensor, num_classes=-1):
    """int64 of shape tensor.shape + (num_classes,); num_classes -1 takes the largest id + 1."""
    return _C.one_hot(tensor, num_classes)


def scaled_dot_product_attention(
    query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, *, scale=None, enable_gqa=False
):
    """softmax(Q·Kᵀ/√d) · V over (B, H, T, d) or (N, T, d), as PyTorch's (dropout_p applies
    always). enable_gqa (PyTorch 2.5's): key and value may have fewer heads (dim -3), a divisor of
    the query's; query head h reads key/value head h // (H // Hkv). ag has no attn_mask (only
    None): ag.attention(q, k, v, valid_lens) masks padding."""
    return _C.scaled_dot_product_attention(
        query, key, value, attn_mask, dropout_p, is_causal, scale=scale, enable_gqa=enable_gqa
    )


def embedding(
    input,
    weight,
    padding_idx=None,
    max_norm=None,
    norm_type=2.0,
    scale_grad_by_freq=False,
    sparse=False,
):
    """The rows of weight (num_embeddings, D) picked by the ids: shape input.shape + (D,)."""
    if padding_idx is not None or max_norm is not None or scale_grad_by_freq or sparse:
        raise ValueError(
            "embedding: padding_idx, max_norm, scale_grad_by_freq and sparse are not "
            "supported by ag (only their defaults)"
        )
    return _C.embedding(input, weight)


# The functional forms bound with ag's modules (python/src/nn.cpp's ag._C.nn.functional, when the
# extension has it: mse_loss, d2l's masked_softmax and masked_softmax_ce) belong here too.
_layers = getattr(getattr(_C, "nn", None), "functional", None)
for _name in ("mse_loss", "masked_softmax", "masked_softmax_ce"):
    if _layers is not None and hasattr(_layers, _name) and _name not in globals():
        globals()[_name] = getattr(_layers, _name)
        __all__.append(_name)
