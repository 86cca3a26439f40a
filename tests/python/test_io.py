"""ag.io: safetensors, .npy and checkpoint files from Python (python/ag/io.py, python/src/io.cpp).

Round trips must give every value back bit for bit in every dtype; the files ag writes must be
what NumPy and the safetensors format say (read here with numpy.load, or json + struct); the files
NumPy and the format's own layout make must come into ag; damaged files must raise ag's error
class naming the file.
"""

import json
import os
import pathlib
import struct

import numpy as np
import pytest

import ag

# Values that a careless conversion would change: signed zero, infinities, NaN, subnormals, the
# ends of int64 (2^63 - 1 is not a float64), and both bools.
SPECIAL = {
    "float32": np.array(
        [[0.0, -0.0, 1.5, -3.25], [np.inf, -np.inf, np.nan, 1e-40], [3.4e38, -1e-7, 0.1, 7.0]],
        dtype=np.float32,
    ),
    "float64": np.array([[0.1, -0.0, np.nan], [np.inf, 5e-324, -1.7976931348623157e308]]),
    "int64": np.array([[2**63 - 1, -(2**63), 0], [1, -1, 2**53 + 1]], dtype=np.int64),
    "bool": np.array([[True, False, True], [False, False, True]]),
}
DTYPES = {"float32": ag.float32, "float64": ag.float64, "int64": ag.int64, "bool": ag.bool}
SAFETENSORS_DTYPES = {"F32": np.float32, "F64": np.float64, "I64": np.int64, "BOOL": np.bool_}


def tensors_of_every_dtype():
    out = {name: ag.tensor(a) for name, a in SPECIAL.items()}
    out["scalar"] = ag.tensor(np.float64(2.5))  # a 0-d tensor
    out["empty"] = ag.zeros(0, 3)
    return out


def same_bits(tensor, array):
    """Equal dtype, shape and bytes (NaN's bits and -0.0 included)."""
    got = tensor.numpy()
    return got.dtype == array.dtype and got.shape == array.shape and got.tobytes() == array.tobytes()


def read_safetensors_by_hand(path):
    """The format as its specification says: 8-byte little-endian header length, JSON, data."""
    data = pathlib.Path(path).read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    body = data[8 + n :]
    metadata = header.pop("__metadata__", None)
    arrays = {}
    for name, entry in header.items():
        begin, end = entry["data_offsets"]
        dtype = SAFETENSORS_DTYPES[entry["dtype"]]
        arrays[name] = np.frombuffer(body[begin:end], dtype=np.dtype(dtype).newbyteorder("<")).reshape(
            entry["shape"]
        )
    return arrays, metadata, header


def write_safetensors_by_hand(path, arrays, codes, metadata=None):
    header, chunks, offset = {}, [], 0
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, a in arrays.items():
        raw = np.ascontiguousarray(a).tobytes()
        header[name] = {
            "dtype": codes[name], "shape": list(a.shape), "data_offsets": [offset, offset + len(raw)]
        }
        chunks.append(raw)
        offset += len(raw)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    pathlib.Path(path).write_bytes(struct.pack("<Q", len(text)) + text + b"".join(chunks))


# ---- safetensors -------------------------------------------------------------------------------------


def test_safetensors_round_trip_every_dtype_exactly(tmp_path):
    path = tmp_path / "t.safetensors"
    tensors = tensors_of_every_dtype()
    ag.io.save_file(tensors, path)
    back = ag.io.load_file(path)
    assert list(back) == list(tensors)  # the order given is the file's order
    for name, t in tensors.items():
        assert back[name].dtype == t.dtype
        assert same_bits(back[name], t.numpy()), name


def test_safetensors_file_is_the_format(tmp_path):
    path = tmp_path / "t.safetensors"
    tensors = tensors_of_every_dtype()
    ag.io.save_file(tensors, str(path), metadata={"step": "10", "model": "mha"})
    arrays, metadata, header = read_safetensors_by_hand(path)
    assert metadata == {"step": "10", "model": "mha"}
    assert header["float32"]["dtype"] == "F32" and header["int64"]["dtype"] == "I64"
    assert header["bool"]["dtype"] == "BOOL" and header["float64"]["dtype"] == "F64"
    assert header["scalar"]["shape"] == [] and header["empty"]["shape"] == [0, 3]
    for name, t in tensors.items():
        expected = t.numpy()
        assert arrays[name].shape == expected.shape
        assert arrays[name].tobytes() == expected.tobytes(), name


def test_safetensors_written_elsewhere_comes_in(tmp_path):
    path = tmp_path / "torch.safetensors"
    half = np.array([1.0, -2.5, 65504.0, 6e-8], dtype=np.float16)
    arrays = dict(SPECIAL, half=half)
    codes = {"float32": "F32", "float64": "F64", "int64": "I64", "bool": "BOOL", "half": "F16"}
    write_safetensors_by_hand(path, arrays, codes, metadata={"format": "pt"})
    back = ag.io.load_file(path)
    for name, a in SPECIAL.items():
        assert same_bits(back[name], a), name
    assert back["half"].dtype == ag.float32  # F16 is read into float32, exactly
    assert same_bits(back["half"], half.astype(np.float32))
    with ag.io.safe_open(path, framework="pt") as f:
        assert f.keys() == list(arrays)
        assert f.metadata() == {"format": "pt"}
        assert same_bits(f.get_tensor("int64"), SPECIAL["int64"])
        with pytest.raises(KeyError, match="nothing"):
            f.get_tensor("nothing")
    with ag.io.safe_open(path, framework="numpy") as f:
        assert isinstance(f.get_tensor("bool"), np.ndarray)


def test_safetensors_bytes_round_trip():
    tensors = tensors_of_every_dtype()
    data = ag.io.save(tensors, metadata={"a": "b"})
    assert isinstance(data, bytes)
    (n,) = struct.unpack("<Q", data[:8])
    assert json.loads(data[8 : 8 + n])["__metadata__"] == {"a": "b"}
    back = ag.io.load(data)
    for name, t in tensors.items():
        assert same_bits(back[name], t.numpy())


def test_safetensors_views_and_grad_tensors_save_their_values(tmp_path):
    base = ag.tensor(np.arange(12.0).reshape(3, 4))
    column = base[:, 1]  # not contiguous
    weight = ag.tensor(np.ones((2, 2), dtype=np.float32), requires_grad=True)
    ag.io.save_file({"column": column, "weight": weight}, tmp_path / "v.safetensors")
    back = ag.io.load_file(tmp_path / "v.safetensors")
    np.testing.assert_array_equal(back["column"].numpy(), [1.0, 5.0, 9.0])
    np.testing.assert_array_equal(back["weight"].numpy(), np.ones((2, 2), dtype=np.float32))


def test_paths_as_str_bytes_and_pathlike(tmp_path):
    t = {"x": ag.tensor([1.0, 2.0])}
    for path in (str(tmp_path / "a.safetensors"), tmp_path / "b.safetensors",
                 os.fsencode(tmp_path / "c.safetensors")):
        ag.io.save_file(t, path)
        assert ag.io.load_file(path)["x"].tolist() == [1.0, 2.0]


def test_safetensors_bad_arguments():
    with pytest.raises(TypeError, match="'x'.*not an ag.Tensor"):
        ag.io.save({"x": np.zeros(3)})
    with pytest.raises(TypeError, match="names must be str"):
        ag.io.save({1: ag.zeros(1)})
    with pytest.raises(TypeError, match="metadata must map str to str"):
        ag.io.save({"x": ag.zeros(1)}, metadata={"step": 10})
    with pytest.raises(TypeError, match="dict"):
        ag.io.save([ag.zeros(1)])
    with pytest.raises(TypeError, match="bytes"):
        ag.io.load("not bytes")


@pytest.mark.parametrize(
    "damage, problem",
    [
        (lambda d: d[: len(d) - 5], "truncated"),
        (lambda d: d[:6], "no header length"),
        (lambda d: struct.pack("<Q", 1 << 40) + d[8:], "header length past the file"),
        (lambda d: d[:8] + b"[" + d[9:], "JSON that is not an object"),
        (lambda d: d[:8] + d[8:].replace(b'"F32"', b'"X32"', 1), "unknown dtype"),
    ],
)
def test_damaged_safetensors_raise_safetensors_error_naming_the_file(tmp_path, damage, problem):
    good = tmp_path / "good.safetensors"
    ag.io.save_file({"w": ag.ones(2, 3), "b": ag.zeros(3)}, good)
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(damage(good.read_bytes()))
    with pytest.raises(ag.SafetensorsError) as caught:
        ag.io.load_file(bad)
    assert isinstance(caught.value, OSError) and isinstance(caught.value, ag.IoError)
    assert str(bad) in str(caught.value), problem
    with pytest.raises(ag.SafetensorsError, match="<bytes>"):
        ag.io.load(damage(good.read_bytes()))


def test_missing_file_is_an_oserror_naming_it(tmp_path):
    missing = tmp_path / "missing.safetensors"
    with pytest.raises(OSError, match="missing.safetensors"):
        ag.io.load_file(missing)
    with pytest.raises(ag.IoError, match="missing.npy"):
        ag.io.load_npy(tmp_path / "missing.npy")
    with pytest.raises(ag.IoError, match="missing.agc"):
        ag.io.load_checkpoint(tmp_path / "missing.agc")
    with pytest.raises(ag.IoError, match="no-such-folder"):
        ag.io.save_file({"x": ag.zeros(1)}, tmp_path / "no-such-folder" / "x.safetensors")


# ---- modules' safetensors ----------------------------------------------------------------------


class StateModule:
    """The two methods of a module that save_model and load_model use (PyTorch's)."""

    def __init__(self, **tensors):
        self.tensors = tensors
        self.loaded = None

    def state_dict(self):
        return dict(self.tensors)

    def load_state_dict(self, state, strict=True):
        self.loaded = (dict(state), strict)
        for name, t in state.items():
            self.tensors[name] = t


def test_save_model_and_load_model_by_name(tmp_path):
    W = ag.tensor(np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32))
    lens = ag.tensor([3, 2])
    ag.io.save_model(StateModule(**{"W_q.weight": W, "lens": lens}), tmp_path / "m.safetensors")
    arrays, _, _ = read_safetensors_by_hand(tmp_path / "m.safetensors")
    assert sorted(arrays) == ["W_q.weight", "lens"]

    target = StateModule(**{"W_q.weight": ag.zeros(3, 4), "lens": ag.zeros(2, dtype=ag.int64)})
    missing, unexpected = ag.io.load_model(target, tmp_path / "m.safetensors")
    assert (missing, unexpected) == ([], [])
    assert same_bits(target.tensors["W_q.weight"], W.numpy())
    assert same_bits(target.tensors["lens"], lens.numpy())


def test_load_model_strict_and_not(tmp_path):
    path = tmp_path / "m.safetensors"
    ag.io.save_file({"a": ag.ones(2), "extra": ag.ones(1)}, path)
    target = StateModule(a=ag.zeros(2), b=ag.zeros(2))
    with pytest.raises(ag.StateDictError, match=r"m.safetensors.*missing b.*unexpected extra"):
        ag.io.load_model(target, path)
    assert target.loaded is None  # strict: nothing loaded
    missing, unexpected = ag.io.load_model(target, path, strict=False)
    assert (missing, unexpected) == (["b"], ["extra"])
    assert list(target.loaded[0]) == ["a"] and target.loaded[1] is False


def test_d2l_names():
    ours, d2ls = "encoder.blks.0.attention.W_q.weight", "encoder.blks.block0.attention.W_q.weight"
    assert ag.io.d2l_name(ours) == d2ls and ag.io.from_d2l_name(d2ls) == ours


def test_save_model_of_an_ag_module(tmp_path):
    linear = ag.nn.Linear(4, 3)
    ag.io.save_model(linear, tmp_path / "l.safetensors")
    other = ag.nn.Linear(4, 3)
    assert ag.io.load_model(other, tmp_path / "l.safetensors") == ([], [])
    for name, t in linear.state_dict().items():
        assert same_bits(other.state_dict()[name], t.numpy())


# ---- .npy ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(SPECIAL))
def test_npy_round_trip_and_numpy_reads_it(tmp_path, name):
    path = tmp_path / f"{name}.npy"
    t = ag.tensor(SPECIAL[name])
    ag.io.save_npy(path, t)
    assert os.path.exists(path)  # no ".npy" appended
    read = np.load(path)
    assert read.dtype == SPECIAL[name].dtype and read.tobytes() == SPECIAL[name].tobytes()
    back = ag.io.load_npy(path)
    assert back.dtype == DTYPES[name] and same_bits(back, SPECIAL[name])


def test_npy_of_numpy_save_comes_in(tmp_path):
    a = np.arange(24, dtype=np.float64).reshape(2, 3, 4)
    np.save(tmp_path / "c.npy", a)
    np.save(tmp_path / "f.npy", np.asfortranarray(a))
    np.save(tmp_path / "s.npy", np.float32(1.25))
    np.save(tmp_path / "e.npy", np.zeros((0, 5), dtype=np.int64))
    assert same_bits(ag.io.load_npy(tmp_path / "c.npy"), a)
    assert same_bits(ag.io.load_npy(tmp_path / "f.npy"), a)  # Fortran order, values in C order
    assert ag.io.load_npy(tmp_path / "s.npy").tolist() == 1.25
    assert ag.io.load_npy(tmp_path / "e.npy").shape == ag.Size([0, 5])
    # A view saves its values.
    ag.io.save_npy(tmp_path / "v.npy", ag.tensor(a)[:, 1])
    np.testing.assert_array_equal(np.load(tmp_path / "v.npy"), a[:, 1])


@pytest.mark.parametrize(
    "make, problem",
    [
        (lambda p: np.save(p, np.arange(3, dtype=np.int32)), "a dtype ag has not ('<i4')"),
        (lambda p: np.save(p, np.zeros(3, dtype=">f8")), "big-endian"),
        (lambda p: p.write_bytes(b"\x93NUMPY\x01\x00"), "truncated header"),
        (lambda p: p.write_bytes(b"PK\x03\x04 not numpy at all"), "wrong magic"),
    ],
)
def test_damaged_npy_raise_npy_error_naming_the_file(tmp_path, make, problem):
    path = tmp_path / "bad.npy"
    make(path)
    with pytest.raises(ag.NpyError) as caught:
        ag.io.load_npy(path)
    assert isinstance(caught.value, OSError)
    assert str(path) in str(caught.value), problem


def test_truncated_npy_data(tmp_path):
    path = tmp_path / "cut.npy"
    np.save(path, np.ones(100))
    path.write_bytes(path.read_bytes()[:-8])
    with pytest.raises(ag.NpyError, match="cut.npy"):
        ag.io.load_npy(path)


# ---- checkpoints -----------------------------------------------------------------------------------


def a_checkpoint():
    return ag.io.Checkpoint(
        kind="test",
        tensors=tensors_of_every_dtype(),
        integers={"step": 12, "seed": 2**64 - 1},
        reals={"lr": 0.1, "tiny": 5e-324},
        strings={"name": "multi-head attention", "empty": ""},
    )


@pytest.mark.parametrize("format", ["binary", "json"])
def test_checkpoint_round_trip(tmp_path, format):
    path = tmp_path / f"c.{format}"
    c = a_checkpoint()
    ag.io.save_checkpoint(c, path, format=format)
    data = path.read_bytes()
    assert data[:8] == b"\x89AGC\r\n\x1a\n"
    assert struct.unpack("<II", data[8:16]) == (1, 0 if format == "binary" else 1)
    back = ag.io.load_checkpoint(path)
    assert back.kind == "test"
    assert back.integers == c.integers and back.reals == c.reals and back.strings == c.strings
    assert sorted(back.tensors) == sorted(c.tensors)
    for name, t in c.tensors.items():
        assert back.tensors[name].dtype == t.dtype
        assert same_bits(back.tensors[name], t.numpy()), name


@pytest.mark.parametrize(
    "damage, problem",
    [
        (lambda d: d[:-3], "truncated"),
        (lambda d: d[:40] + bytes([d[40] ^ 0xFF]) + d[41:], "a flipped byte (the CRC)"),
        (lambda d: b"\x93NUMPY" + d[6:], "another kind of file"),
        (lambda d: d[:10], "shorter than its header"),
    ],
)
def test_damaged_checkpoints_raise_checkpoint_error_naming_the_file(tmp_path, damage, problem):
    good = tmp_path / "good.agc"
    ag.io.save_checkpoint(a_checkpoint(), good)
    bad = tmp_path / "bad.agc"
    bad.write_bytes(damage(good.read_bytes()))
    with pytest.raises(ag.CheckpointError) as caught:
        ag.io.load_checkpoint(bad)
    assert isinstance(caught.value, OSError)
    assert str(bad) in str(caught.value), problem


def test_checkpoint_bad_entries(tmp_path):
    with pytest.raises(ValueError, match="'step'"):
        ag.io.save_checkpoint(ag.io.Checkpoint(integers={"step": -1}), tmp_path / "c")
    with pytest.raises(ValueError, match="format"):
        ag.io.save_checkpoint(ag.io.Checkpoint(), tmp_path / "c", format="xml")
    with pytest.raises(TypeError, match="Checkpoint or a module"):
        ag.io.save_checkpoint({"x": ag.zeros(1)}, tmp_path / "c")


def test_checkpoint_of_a_module(tmp_path):
    path = tmp_path / "model.agc"
    module = StateModule(**{"W_o.weight": ag.tensor([[1.0, 2.0]]), "lens": ag.tensor([4])})
    ag.io.save_checkpoint(module, path)
    c = ag.io.load_checkpoint(path)
    assert c.kind == "model"
    assert sorted(c.tensors) == ["model.W_o.weight", "model.lens"]
    target = StateModule(**{"W_o.weight": ag.zeros(1, 2), "lens": ag.tensor([0])})
    ag.io.load_checkpoint(path, target)
    assert target.tensors["W_o.weight"].tolist() == [[1.0, 2.0]]
    assert target.tensors["lens"].tolist() == [4]


def test_checkpoint_of_broken_weights_is_refused_on_load(tmp_path):
    path = tmp_path / "nan.agc"
    ag.io.save_checkpoint(StateModule(w=ag.tensor([1.0, float("nan")])), path)
    with pytest.raises(ag.CheckpointError, match=r"nan\.agc.*tensor w holds nan"):
        ag.io.load_checkpoint(path, StateModule(w=ag.zeros(2)))
    ag.io.save_checkpoint(ag.io.Checkpoint(kind="other", tensors={"x": ag.ones(1)}), path)
    with pytest.raises(ag.CheckpointError, match="no tensors under 'model.'"):
        ag.io.load_checkpoint(path, StateModule(w=ag.zeros(2)))


def test_checkpoint_of_views_and_grad_tensors(tmp_path):
    base = ag.tensor(np.arange(12.0).reshape(3, 4))
    c = ag.io.Checkpoint(tensors={"column": base[:, 1], "w": ag.ones(2, requires_grad=True)})
    ag.io.save_checkpoint(c, tmp_path / "v.agc")
    back = ag.io.load_checkpoint(tmp_path / "v.agc")
    assert back.tensors["column"].tolist() == [1.0, 5.0, 9.0]
    assert back.tensors["w"].tolist() == [1.0, 1.0] and not back.tensors["w"].requires_grad
    assert back.tensors_under("nothing") == {}
