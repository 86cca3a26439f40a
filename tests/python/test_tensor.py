"""ag.Tensor from Python (python/src/tensor.cpp, python/ag/__init__.py): dtypes, creation, NumPy in
and out without copies, lifetimes, indexing, autograd and the errors."""

import gc
import sys

import numpy as np
import pytest

import ag


# ---- dtypes and creation ---------------------------------------------------------------------------


def test_dtypes_print_as_pytorch_names_them():
    assert repr(ag.float32) == "ag.float32" and str(ag.int64) == "ag.int64"
    assert ag.float is ag.float32 and ag.double is ag.float64 and ag.long is ag.int64
    assert ag.ones(1).dtype is ag.float32 and ag.ones(1, dtype=ag.bool).dtype is ag.bool
    assert ag.float32.is_floating_point and not ag.bool.is_floating_point
    assert [d.itemsize for d in (ag.float32, ag.float64, ag.int64, ag.bool)] == [4, 8, 8, 1]


def test_tensor_infers_dtypes_as_pytorch():
    assert ag.tensor([1, 2]).dtype == ag.int64
    assert ag.tensor([1.0, 2]).dtype == ag.float32  # Python floats: the default dtype
    assert ag.tensor([True, False]).dtype == ag.bool
    assert ag.tensor(np.zeros(2)).dtype == ag.float64  # a NumPy array keeps its dtype
    assert ag.tensor(np.zeros(2, np.int32)).dtype == ag.int64
    assert ag.tensor(3.5).shape == ()
    assert ag.tensor([[1, 2], [3, 4]], dtype=ag.float64).tolist() == [[1.0, 2.0], [3.0, 4.0]]


def test_tensor_refuses_values_its_dtype_would_round():
    with pytest.raises(ValueError, match="0.5"):
        ag.tensor([0.5], dtype=ag.int64)
    with pytest.raises(ValueError):
        ag.tensor([2**24 + 1], dtype=ag.float32)  # a token id that float32 rounds
    assert ag.tensor([2**24 + 1]).item() == 2**24 + 1  # int64 holds it
    with pytest.raises(TypeError, match="strings"):
        ag.tensor(["a"])
    with pytest.raises(ValueError):
        ag.tensor([[1, 2], [3]])  # ragged


def test_creation_takes_sizes_as_pytorch():
    assert ag.zeros(2, 3).shape == (2, 3)
    assert ag.zeros((2, 3)).shape == ag.zeros([2, 3]).shape == ag.Size([2, 3])
    assert repr(ag.ones(2, 4, 100).shape) == "ag.Size([2, 4, 100])"
    assert ag.ones(2, dtype=ag.int64).tolist() == [1, 1]
    assert ag.full((2,), 7.0).tolist() == [7.0, 7.0]
    assert ag.eye(2).tolist() == [[1.0, 0.0], [0.0, 1.0]]
    assert ag.arange(3).dtype == ag.int64 and ag.arange(3).tolist() == [0, 1, 2]
    assert ag.arange(0, 1, 0.5).tolist() == [0.0, 0.5]
    assert ag.arange(4, dtype=ag.float32).dtype == ag.float32
    assert ag.zeros(3, requires_grad=True).requires_grad
    with pytest.raises(TypeError, match="zeros"):
        ag.zeros("3")
    with pytest.raises(ag.ShapeError):
        ag.zeros(-1)


def test_seeded_random_numbers_repeat():
    ag.manual_seed(3)
    a = ag.randn(4).tolist()
    ag.manual_seed(3)
    assert ag.randn(4).tolist() == a
    r = ag.randint(0, 5, (100,))
    assert r.dtype == ag.int64 and 0 <= min(r.tolist()) and max(r.tolist()) < 5


def test_a_generator_of_its_own_as_torch_generator():
    # makemore: g = torch.Generator().manual_seed(2147483647); torch.randn((27, 27), generator=g)
    g = ag.Generator().manual_seed(2147483647)
    assert isinstance(g, ag.Generator) and g.initial_seed() == 2147483647
    ag.manual_seed(2147483647)  # the default generator's stream of that seed is the same
    expected = ag.randn(27, 27).tolist()
    ag.manual_seed(0)
    assert ag.randn((27, 27), generator=g).tolist() == expected
    state = g.get_state()
    after = [ag.rand(3, generator=g).tolist(), ag.randint(0, 27, (5,), generator=g).tolist(),
             ag.multinomial(ag.ones(27) / 27, 4, replacement=True, generator=g).tolist()]
    g.set_state(state)  # the same draws again
    assert after == [ag.rand(3, generator=g).tolist(), ag.randint(0, 27, (5,), generator=g).tolist(),
                     ag.multinomial(ag.ones(27) / 27, 4, replacement=True, generator=g).tolist()]
    # a generator's draws leave the default one where it was
    ag.manual_seed(1)
    first = ag.randn(2).tolist()
    ag.manual_seed(1)
    ag.randn(5, generator=g)
    assert ag.randn(2).tolist() == first
    with pytest.raises(TypeError, match="generator must be an ag.Generator"):
        ag.randn(2, generator=7)
    with pytest.raises(ag.ValueError, match="int64 tensor of 2"):
        g.set_state(ag.zeros(2))
    with pytest.raises(RuntimeError, match="CPU only"):
        ag.Generator(device="cuda")


def test_metadata():
    x = ag.zeros(2, 3, 4)
    assert (x.ndim, x.dim(), x.numel(), len(x)) == (3, 3, 24, 2)
    assert x.size() == (2, 3, 4) and x.size(-1) == 4 and x.stride() == (12, 4, 1)
    assert x.is_contiguous() and x.is_floating_point() and x.element_size() == 4
    assert x.device == ag.device("cpu") and x.to("cpu") is x
    with pytest.raises(RuntimeError, match="cuda"):
        x.to("cuda")
    with pytest.raises(IndexError):
        x.size(3)


# ---- values ------------------------------------------------------------------------------------------


def test_item_tolist_and_conversions():
    assert ag.tensor([2.5]).item() == 2.5
    assert isinstance(ag.tensor(7).item(), int) and isinstance(ag.tensor(True).item(), bool)
    assert float(ag.tensor(1.5)) == 1.5 and int(ag.tensor(3)) == 3 and int(ag.tensor(-2.7)) == -2
    assert int(ag.tensor(1e30, dtype=ag.float64)) == int(1e30)  # Python's int of the float
    with pytest.raises(ValueError):
        int(ag.tensor(float("nan")))
    with pytest.raises(OverflowError):
        int(ag.tensor(float("inf")))
    assert bool(ag.tensor(2**60)) and not bool(ag.tensor(0)) and bool(ag.tensor(float("nan")))
    assert [0, 1, 2][ag.tensor(2)] == 2  # an int64 scalar is an index
    with pytest.raises(ValueError, match="3 elements"):
        ag.zeros(3).item()
    with pytest.raises(ValueError, match="ambiguous"):
        bool(ag.zeros(2))
    x = ag.tensor([1.7, -1.7])
    assert x.long().tolist() == [1, -1] and x.to(ag.float64).dtype == ag.float64
    assert x.bool().tolist() == [True, True]


def test_float_conversions_carry_the_gradient_as_pytorchs():
    # x.double() computing in double and back: the gradient returns through both conversions
    x = ag.tensor([0.5, -1.25], requires_grad=True)
    loss = (x.double() * 3.0).float().sum()
    loss.backward()
    assert x.grad.dtype == ag.float32 and x.grad.tolist() == [3.0, 3.0]
    with pytest.raises(RuntimeError, match="not differentiable"):
        x.long()  # PyTorch's result would silently stop requiring grad
    with ag.no_grad():
        assert x.long().tolist() == [0, -1]


def test_printing_is_pytorchs_format():
    assert repr(ag.tensor([[0.1, 0.2]])) == "tensor([[0.1000, 0.2000]])"
    assert repr(ag.tensor([1, 2])) == "tensor([1, 2])"
    assert repr(ag.ones(2, requires_grad=True)) == "tensor([1., 1.], requires_grad=True)"


# ---- NumPy ---------------------------------------------------------------------------------------------


def test_from_numpy_shares_memory_both_ways():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    t = ag.from_numpy(a)
    assert t.dtype == ag.float32 and t.shape == (2, 3)
    assert t.data_ptr() == a.ctypes.data  # no copy
    a[0, 0] = 42
    assert t[0, 0].item() == 42
    t.fill_(1.0)
    assert (a == 1).all()


def test_from_numpy_keeps_strided_views_without_a_copy():
    a = np.arange(12, dtype=np.float64).reshape(3, 4)
    column = a[:, 1]  # stride of 4 elements
    t = ag.from_numpy(column)
    assert t.stride() == (4,) and t.data_ptr() == column.ctypes.data
    assert t.tolist() == [1.0, 5.0, 9.0]
    assert ag.from_numpy(a.T).stride() == (1, 4)


def test_from_numpy_refuses_what_it_cannot_share():
    with pytest.raises(ValueError, match="negative"):
        ag.from_numpy(np.arange(4.0)[::-1])
    read_only = np.arange(3.0)
    read_only.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        ag.from_numpy(read_only)
    with pytest.raises(TypeError, match="int32"):
        ag.from_numpy(np.zeros(2, np.int32))
    with pytest.raises(TypeError, match="byte order"):
        ag.from_numpy(np.zeros(2, ">f8"))
    with pytest.raises(TypeError, match="numpy.ndarray"):
        ag.from_numpy([1.0, 2.0])
    assert ag.tensor(np.arange(4.0)[::-1]).tolist() == [3.0, 2.0, 1.0, 0.0]  # a copy works


def test_numpy_views_the_tensor_and_keeps_it_alive():
    t = ag.arange(6, dtype=ag.float64).reshape(2, 3)
    a = t.numpy()
    assert a.dtype == np.float64 and a.shape == (2, 3) and a.ctypes.data == t.data_ptr()
    a[1, 2] = -1
    assert t[1, 2].item() == -1
    b = np.asarray(t.transpose(0, 1))  # a strided view, still no copy
    assert b.strides == (8, 24) and b[2, 1] == -1
    del t
    gc.collect()
    assert a.sum() == 0 + 1 + 2 + 3 + 4 - 1  # the tensor's memory outlives the Python tensor
    assert b[2, 1] == -1


def test_a_numpy_array_outlives_its_tensor_and_a_tensor_its_array():
    a = np.ones(1000)
    refs = sys.getrefcount(a)
    t = ag.from_numpy(a)
    assert sys.getrefcount(a) == refs + 1  # the tensor holds the array
    del a
    gc.collect()
    assert t.sum().item() == 1000
    view = t.numpy()
    del t
    gc.collect()
    assert view.sum() == 1000
    b = np.zeros(3)
    refs = sys.getrefcount(b)
    u = ag.from_numpy(b)
    del u
    gc.collect()
    assert sys.getrefcount(b) == refs  # dropping the tensor lets go of the array


def test_numpy_of_every_dtype_and_of_expanded_tensors():
    for dtype, np_dtype in ((ag.float32, np.float32), (ag.float64, np.float64), (ag.int64, np.int64), (ag.bool, np.bool_)):
        t = ag.ones(2, dtype=dtype)
        assert t.numpy().dtype == np_dtype and ag.from_numpy(t.numpy()).dtype == dtype
    wide = ag.ones(3).expand(2, 3).numpy()
    assert wide.strides == (0, 4) and not wide.flags.writeable  # one element seen twice
    assert np.asarray(ag.ones(2), dtype=np.float64).dtype == np.float64


def test_numpy_of_a_tensor_that_requires_grad_is_refused():
    w = ag.ones(2, requires_grad=True)
    with pytest.raises(RuntimeError, match="detach"):
        w.numpy()
    assert w.detach().numpy().tolist() == [1.0, 1.0]


# ---- indexing ------------------------------------------------------------------------------------------


def test_getitem_as_python_and_pytorch():
    a = np.arange(24.0).reshape(2, 3, 4)
    x = ag.from_numpy(a)
    for key in [0, -1, (1, 2), (slice(None), -1), (Ellipsis, 1), (slice(1, None),),
                (slice(None), slice(0, None, 2)), (None, 0), (0, Ellipsis, None)]:
        assert np.array_equal(x[key].numpy(), a[key]), key
    assert x[:, 1].data_ptr() == x.data_ptr() + 4 * 8  # a view: x[0, 0, 1]
    assert np.array_equal(x[ag.tensor([1, 0])].numpy(), a[[1, 0]])
    with pytest.raises(IndexError, match="out of range"):
        x[2]  # Python's IndexError, which ends iteration, as PyTorch's
    with pytest.raises(ag.ShapeError, match="out of range"):
        x[0, 3]
    assert [row.tolist() for row in ag.tensor([[1, 2], [3, 4]])] == [[1, 2], [3, 4]]
    with pytest.raises(ag.ShapeError, match="step"):
        x[::-1]
    with pytest.raises(TypeError, match="bool mask"):
        x[ag.tensor([True, False])]


def test_one_list_or_tensor_index_among_basic_ones_as_pytorch():
    a = np.arange(60.0).reshape(3, 4, 5)
    x = ag.from_numpy(a)
    # One advanced index keeps its place (nanoGPT's v[:, [-1]]); negative ids count from the end.
    every = slice(None)
    for key in [(every, [-1]), ([0, -1],), [2, 0], (Ellipsis, [1, 3]), (None, every, [0]),
                (1, [3, 0]), (slice(0, 2), [1], slice(None, None, 2)), (Ellipsis, [3], every), []]:
        assert np.array_equal(x[key].numpy(), a[key]), key
    # An int apart from the list is a basic index in PyTorch (NumPy moves the list's dim first).
    assert np.array_equal(x[None, 1, ..., [0, 0]].numpy(), a[None, 1][..., [0, 0]])
    assert np.array_equal(x[ag.tensor([1, -2])].numpy(), a[[1, -2]])
    g = ag.zeros(3, 4, requires_grad=True)
    g[:, [0, -1, 0]].sum().backward()  # index_select's gradient: each id's rows added
    assert g.grad.tolist()[0] == [2.0, 0.0, 0.0, 1.0]
    with pytest.raises(IndexError, match="index 7 is out of range for a dim of size 4"):
        x[:, [7]]
    with pytest.raises(TypeError, match="bool mask"):
        x[[True, False, True]]  # a mask in PyTorch, not the ids 1, 0, 1
    with pytest.raises(TypeError, match="must hold ints"):
        x[[0.5]]


def test_list_and_tensor_indices_side_by_side_and_of_any_shape_as_pytorch():
    a = np.arange(120.0).reshape(2, 3, 4, 5)
    x = ag.from_numpy(a)
    # Side by side, the indices pick together (broadcast), and their dims keep the place they had.
    every = slice(None)
    for key in [(every, [0, 1], [1, 2]), ([[0], [1]], [1, 2]), ([1, 0], [2, 0], [3, 3]),
                (Ellipsis, [0, -1], [4, 0]), (None, 1, [0, 2], [3, 3], every),
                ([[1, 0], [0, 1]],), (every, [[2, 1, 0]]), ([],)]:
        assert np.array_equal(x[key].numpy(), a[key]), key
    assert np.array_equal(x[ag.tensor([1, 0]), ag.tensor([2, 0])].numpy(), a[[1, 0], [2, 0]])
    # makemore: an embedding table indexed by a (N, 3) batch of ids, and the log-likelihood's
    # probs[torch.arange(n), ys]; their gradients add up in the rows picked.
    C = ag.zeros(6, 2, requires_grad=True)
    C[ag.tensor([[1, 2, 3], [3, 5, 1]])].sum().backward()
    assert C.grad.tolist() == [[0, 0], [2, 2], [1, 1], [2, 2], [0, 0], [1, 1]]
    p = ag.ones(3, 4, requires_grad=True)
    p[ag.arange(3), ag.tensor([1, 1, 3])].sum().backward()
    assert p.grad.tolist() == [[0, 1, 0, 0], [0, 1, 0, 0], [0, 0, 0, 1]]
    with pytest.raises(TypeError, match="apart from each other"):
        x[[0, 1], :, [2, 3]]  # PyTorch moves these dims first
    with pytest.raises(ag.ShapeError, match="index"):
        x[[0, 1], [0, 1, 2]]  # shapes (2,) and (3,) do not broadcast


def test_ranges_and_numpy_arrays_are_indices_as_lists():
    a = np.arange(12.0).reshape(3, 4)
    x = ag.from_numpy(a)
    ids = np.array([2, 0, 3])
    # makemore's probs[range(n), Yb]
    assert np.array_equal(x[range(3), ids].numpy(), a[range(3), ids])
    assert np.array_equal(x[:, range(1, 4, 2)].numpy(), a[:, range(1, 4, 2)])
    assert np.array_equal(x[ids[:2]].numpy(), a[ids[:2]])
    with pytest.raises(TypeError, match="bool mask"):
        x[np.array([True, False, True])]


def test_setitem_with_list_and_tensor_indices_as_pytorch_index_put():
    a = np.arange(60.0).reshape(3, 4, 5)
    every = slice(None)
    for key, value in [(([0, 2],), 7.0), ((every, [1, -1]), np.arange(30.0).reshape(3, 2, 5)),
                       (([[0], [2]], [1, 3]), np.arange(5.0)), ((1, [0, 3], [4, 4]), -1.0),
                       ((Ellipsis, [0, 2]), np.arange(2.0)), (([2, 0], [1]), 9.0)]:
        expected = a.copy()
        expected[key] = value
        x = ag.from_numpy(a.copy())
        x[key] = ag.from_numpy(value) if isinstance(value, np.ndarray) else value
        assert np.array_equal(x.numpy(), expected), key
    # Any layout takes the write (a transposed view here), and a value read from the tensor
    # itself is read before it is written.
    t = ag.arange(12.0).reshape(3, 4)
    t.T[[1, 2], [0, 2]] = ag.tensor([-1.0, -2.0])
    assert t.tolist()[0][1] == -1.0 and t.tolist()[2][2] == -2.0
    r = ag.arange(6.0).reshape(3, 2)
    r[[1, 0]] = r[:2]
    assert r.tolist() == [[2.0, 3.0], [0.0, 1.0], [4.0, 5.0]]
    # makemore's manual backprop: dlogprobs[range(n), Yb] = -1.0/n and dC[ix] += demb[k, j]
    n, ys = 3, ag.tensor([1, 0, 1])
    d = ag.zeros(n, 2, dtype=ag.float64)
    d[range(n), ys] = -1.0 / n
    assert d.tolist() == [[0.0, -1.0 / 3], [-1.0 / 3, 0.0], [0.0, -1.0 / 3]]
    dC = ag.zeros(4, 2)
    for ix in [ag.tensor(3), ag.tensor(3), ag.tensor(0)]:
        dC[ix] += ag.ones(2)
    assert dC.tolist() == [[1.0, 1.0], [0.0, 0.0], [0.0, 0.0], [2.0, 2.0]]
    # Repeated ids: the last write stays (as PyTorch's index_put_ on the CPU).
    z = ag.zeros(3)
    z[[1, 1]] = ag.tensor([5.0, 6.0])
    assert z.tolist() == [0.0, 6.0, 0.0]
    with pytest.raises(ag.ShapeError):
        z[[0, 1]] = ag.ones(3)  # (3,) does not broadcast to the (2,) picked
    w = ag.ones(3, requires_grad=True)
    with pytest.raises(ag.AutogradError, match="leaf of shape .3. that requires grad"):
        w[[0, 2]] = 0.0
    assert w.tolist() == [1.0, 1.0, 1.0]  # refused before any write


def test_setitem_with_a_bool_mask_fills_as_pytorch():
    # nanoGPT's generate: logits[logits < v[:, [-1]]] = -float('Inf')
    a = np.random.RandomState(0).randn(2, 6)
    logits = ag.from_numpy(a.copy())
    v, _ = ag.topk(logits, 3)
    logits[logits < v[:, [-1]]] = -float("Inf")
    expected = a.copy()
    expected[a < np.sort(a, -1)[:, -3:-2]] = -np.inf
    assert np.array_equal(logits.numpy(), expected)
    # a mask of the leading dims fills whole rows; a one-element tensor is a value
    x = ag.ones(3, 2)
    x[ag.tensor([True, False, True])] = ag.tensor(7.0)
    assert x.tolist() == [[7.0, 7.0], [1.0, 1.0], [7.0, 7.0]]
    with pytest.raises(IndexError, match="does not match the leading dims"):
        x[ag.tensor([True, False])] = 0.0
    with pytest.raises(TypeError, match="a number or a one-element tensor"):
        x[ag.tensor([True, False, True])] = ag.ones(2)
    w = ag.ones(3, requires_grad=True)
    with pytest.raises(ag.AutogradError, match=r"requires grad.*in Python: with ag.no_grad\(\)"):
        w[ag.tensor([True, False, True])] = 0.0
    with ag.no_grad():
        w[ag.tensor([True, False, True])] = 0.0
    assert w.tolist() == [0.0, 1.0, 0.0]


def test_setitem_writes_the_view():
    P = ag.zeros(1, 4, 6)
    X = ag.arange(24, dtype=ag.float32).reshape(1, 4, 6)
    P[:, :, 0::2] = X[:, :, 0::2]  # PositionalEncoding's columns
    P[0, 0, 1] = 5
    expected = np.zeros((1, 4, 6), np.float32)
    expected[:, :, 0::2] = np.arange(24).reshape(1, 4, 6)[:, :, 0::2]
    expected[0, 0, 1] = 5
    assert np.array_equal(P.numpy(), expected)


def test_setitem_in_the_graph_is_recorded_as_pytorch_index_put():
    """x[index] = value where x or the value requires grad, in grad mode: recorded, as PyTorch's
    differentiable index_put_ and masked_fill_; the gradient reaches the value where it was
    written and x where it was kept."""
    w = ag.tensor([1.0, 2.0], dtype=ag.float64, requires_grad=True)
    x = ag.zeros(3, dtype=ag.float64)
    x[0:2] = w * 3  # a slice
    assert x.requires_grad and x.grad_fn == "where" and x.tolist() == [3.0, 6.0, 0.0]
    (x * ag.tensor([1.0, 10.0, 100.0], dtype=ag.float64)).sum().backward()
    assert w.grad.tolist() == [3.0, 30.0]
    # list indices, a repeated id (its last value stays, and alone gets the gradient), a scalar
    a = ag.tensor([1.0, 2.0, 3.0, 4.0], dtype=ag.float64, requires_grad=True)
    v = ag.tensor([5.0, 6.0, 7.0], dtype=ag.float64, requires_grad=True)
    y = a * 1
    y[[0, 2, 0]] = v
    y[ag.tensor([True, False, False, True])] = v[1] * 2  # a mask, a one-element value
    assert y.tolist() == [12.0, 2.0, 6.0, 12.0]
    (y * ag.tensor([1.0, 2.0, 3.0, 4.0], dtype=ag.float64)).sum().backward()
    assert a.grad.tolist() == [0.0, 2.0, 0.0, 0.0]
    assert v.grad.tolist() == [0.0, 3.0 + 2 * (1.0 + 4.0), 0.0]
    # makemore's dC[ix] += demb[k, j] in grad mode: the values of the loop under no_grad
    demb = ag.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], dtype=ag.float64, requires_grad=True)
    dC = ag.zeros(2, 2, dtype=ag.float64)
    for k, ix in enumerate([1, 0, 1]):
        dC[ag.tensor(ix)] += demb[k]
    assert dC.tolist() == [[3.0, 4.0], [6.0, 8.0]]
    dC.sum().backward()
    assert demb.grad.tolist() == [[1.0, 1.0]] * 3
    # refused: a parameter, and a tensor an op kept for its backward (softmax keeps its output)
    with pytest.raises(ag.AutogradError, match="leaf of shape .2. that requires grad"):
        w[0] = 3.0
    p = ag.softmax(w, 0)
    with pytest.raises(ag.AutogradError, match="memory another tensor shares"):
        p[0] = 1.0
    with pytest.raises(ag.DTypeError, match="value's dtype float64 is not the tensor's float32"):
        ag.zeros(3)[0:2] = w
    with ag.no_grad():  # outside the graph: written, not recorded
        x = ag.zeros(3, dtype=ag.float64)
        x[0:2] = w
    assert x.tolist() == [1.0, 2.0, 0.0] and not x.requires_grad


# ---- autograd -------------------------------------------------------------------------------------------


def test_backward_grad_and_leaves():
    w = ag.tensor([1.0, 2.0], requires_grad=True)
    assert w.is_leaf and w.grad is None and w.grad_fn is None
    y = w.sum()
    assert y.grad_fn is not None and not y.is_leaf
    y.backward()
    assert w.grad.tolist() == [1.0, 1.0]
    w.grad = None
    assert w.grad is None


def test_hooks_are_called_with_the_gradient_and_may_replace_it():
    w = ag.tensor([1.0, 2.0], requires_grad=True)
    seen = []

    def double(grad):
        seen.append(grad.tolist())
        return ag.tensor([2.0, 2.0])

    handle = w.register_hook(double)
    w.sum().backward()
    assert seen == [[1.0, 1.0]] and w.grad.tolist() == [2.0, 2.0]
    handle.remove()
    assert not handle.active


def test_an_exception_in_a_hook_reaches_python():
    w = ag.tensor([1.0], requires_grad=True)

    def broken(grad):
        raise KeyError("from the hook")

    w.register_hook(broken)
    with pytest.raises(KeyError, match="from the hook"):
        w.sum().backward()


def test_no_grad_as_context_manager_and_decorator():
    w = ag.ones(2, requires_grad=True)
    with ag.no_grad():
        assert not ag.is_grad_enabled()
        assert not w.sum().requires_grad
        with ag.enable_grad():
            assert w.sum().requires_grad
    assert ag.is_grad_enabled()

    @ag.no_grad()
    def evaluate():
        return w.sum()

    assert not evaluate().requires_grad and ag.is_grad_enabled()
    with ag.set_grad_enabled(False):
        assert not ag.is_grad_enabled()
    assert ag.is_grad_enabled()


def test_autograd_errors_are_python_exceptions_with_ags_message():
    with pytest.raises(ag.AutogradError) as error:
        ag.ones(2).sum().backward()
    assert isinstance(error.value, RuntimeError)  # what PyTorch raises here
    with pytest.raises(ag.AutogradError, match="int64"):
        ag.ones(2, dtype=ag.int64).requires_grad_()


def test_error_classes_have_the_builtin_bases_pytorch_users_catch():
    assert issubclass(ag.ShapeError, ValueError) and issubclass(ag.ShapeError, RuntimeError)
    assert issubclass(ag.DTypeError, TypeError)
    assert issubclass(ag.IoError, OSError) and issubclass(ag.CheckpointError, ag.IoError)
    assert issubclass(ag.OutOfMemoryError, MemoryError)
    assert issubclass(ag.ValueError, ValueError)


def test_pytorchs_dtypes_that_ag_has_not_say_which_to_use():
    # makemore's first line is torch.zeros((27, 27), dtype=torch.int32)
    with pytest.raises(AttributeError, match=r"ag has no dtype int32: .*use int64 \(ag.long\)"):
        ag.zeros((27, 27), dtype=ag.int32)
    with pytest.raises(AttributeError, match="use float32"):
        ag.float16
    assert not hasattr(ag, "bfloat16") and hasattr(ag, "int64")
    with pytest.raises(AttributeError, match="module 'ag' has no attribute 'no_such_name'"):
        ag.no_such_name
