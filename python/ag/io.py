"""ag.io: safetensors, .npy and ag's checkpoint files (python/src/io.cpp over io/).

safetensors, under the names of the safetensors package (safetensors.torch):

    ag.io.save_file({"W": W, "lens": lens}, "weights.safetensors", metadata={"step": "10"})
    tensors = ag.io.load_file("weights.safetensors")          # {name: ag.Tensor}, file order
    data = ag.io.save(tensors); ag.io.load(data)               # the same in bytes
    with ag.io.safe_open("weights.safetensors", framework="pt") as f:
        f.keys(), f.metadata(), f.get_tensor("W")
    ag.io.save_model(model, "model.safetensors")              # model.state_dict(), by name
    missing, unexpected = ag.io.load_model(model, "model.safetensors")

Each tensor is written in its own dtype (F32, F64, I64, BOOL), so float32 and int64 values come
back bit for bit; F16 and BF16 files are read into float32. PyTorch's files load as they are,
under PyTorch's names (a d2l Transformer's "blks.block0." names: rename=ag.io.from_d2l_name).

NumPy's .npy: ag.io.save_npy(path, t) and ag.io.load_npy(path), read and written by numpy.save
and numpy.load alike.

ag's checkpoints (io/checkpoint.h: a header with a CRC, then named tensors, integers, reals and
strings): ag.io.Checkpoint, save_checkpoint(checkpoint, path) and load_checkpoint(path); a module
alone is saved as kind "model" with its state under "model." (as ag's C++ programs write it), and
load_checkpoint(path, model) loads it back. An optimizer's state is not written here (its state
dict is the optimizer binding's; save it into a Checkpoint's entries yourself).

Paths are str, bytes or os.PathLike. A file that is damaged raises ag.SafetensorsError,
ag.NpyError or ag.CheckpointError; one that cannot be opened at all ag.IoError — all of them
OSError, with ag's message naming the file.
"""

import os as _os

from . import _C

_io = _C.io

d2l_name = _io.d2l_name
from_d2l_name = _io.from_d2l_name
check_finite = _io.check_finite


def _path(path):
    """A path argument as ag's C++ takes it: str, bytes (decoded as the OS does) or os.PathLike."""
    return _os.fsdecode(_os.fspath(path))


# ---- safetensors ------------------------------------------------------------------------------------


def save_file(tensors, filename, metadata=None):
    """Writes a dict {name: ag.Tensor} to a safetensors file, as safetensors.torch.save_file.

    metadata: the header's __metadata__, a dict of str to str. The file appears whole or not at
    all (ag writes a temporary file and renames it)."""
    _io.save_file(_dict(tensors, "save_file"), _path(filename), metadata)


def load_file(filename, device="cpu"):
    """The tensors of a safetensors file as a dict {name: ag.Tensor}, in the header's order, as
    safetensors.torch.load_file. device: 'cpu' (ag's only device)."""
    _cpu(device, "load_file")
    tensors, _ = _io._load_file(_path(filename))
    return dict(tensors)


def save(tensors, metadata=None):
    """The bytes of a safetensors file holding the tensors, as safetensors.torch.save."""
    return _io.save(_dict(tensors, "save"), metadata)


def load(data):
    """The tensors of safetensors bytes (what save returned), as safetensors.torch.load."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError(f"load: expected the bytes of a safetensors file, not {type(data).__name__}")
    tensors, _ = _io._load(bytes(data))
    return dict(tensors)


class safe_open:
    """A safetensors file opened for reading, as safetensors.safe_open(filename, framework="pt"):
    keys(), get_tensor(name), metadata(). ag reads the whole file when it is opened (its checks
    cover every tensor before any is used)."""

    def __init__(self, filename, framework="pt", device="cpu"):
        if framework not in ("pt", "torch", "numpy", "np", "ag"):
            raise ValueError(f"safe_open: unknown framework {framework!r}")
        _cpu(device, "safe_open")
        self._numpy = framework in ("numpy", "np")
        self._filename = _path(filename)
        tensors, self._metadata = _io._load_file(self._filename)
        self._tensors = dict(tensors)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def keys(self):
        return list(self._tensors)

    def metadata(self):
        """The header's __metadata__ (a dict of str to str), or None when the file has none."""
        return dict(self._metadata) if self._metadata else None

    def get_tensor(self, name):
        if name not in self._tensors:
            raise KeyError(
                f"safe_open: {self._filename} has no tensor {name!r} (it has {sorted(self._tensors)})"
            )
        t = self._tensors[name]
        return t.numpy() if self._numpy else t


def save_model(model, filename, metadata=None, *, rename=None):
    """Writes model.state_dict() — parameters and persistent buffers under their dotted names —
    to a safetensors file, as safetensors.torch.save_model; PyTorch's load_state_dict reads it.
    rename: a function of each name (ag.io.d2l_name writes a d2l Transformer's names)."""
    state = model.state_dict()
    if rename is not None:
        state = {rename(name): t for name, t in state.items()}
    save_file(state, filename, metadata)


def load_model(model, filename, strict=True, device="cpu", *, rename=None):
    """Loads a safetensors file into the model by name, as safetensors.torch.load_model, and
    returns (missing, unexpected): the model's names the file lacks and the file's names the
    model lacks. strict: any of either is an ag.StateDictError naming the file, and nothing is
    loaded. rename: a function of each name in the file (ag.io.from_d2l_name reads d2l's)."""
    state = load_file(filename, device)
    if rename is not None:
        state = {rename(name): t for name, t in state.items()}
    expected = list(model.state_dict())
    missing = [name for name in expected if name not in state]
    unexpected = [name for name in state if name not in set(expected)]
    if strict and (missing or unexpected):
        problems = []
        if missing:
            problems.append("missing " + ", ".join(missing))
        if unexpected:
            problems.append("unexpected " + ", ".join(unexpected))
        raise _C.StateDictError(f"load_model: {_path(filename)}: " + "; ".join(problems))
    model.load_state_dict({name: state[name] for name in expected if name in state}, strict=strict)
    return missing, unexpected


def _dict(tensors, op):
    if not isinstance(tensors, dict):
        raise TypeError(f"{op}: expected a dict of name to ag.Tensor, not {type(tensors).__name__}")
    return tensors


def _cpu(device, op):
    if str(getattr(device, "type", device)).split(":")[0] != "cpu":
        raise RuntimeError(f"{op}: ag computes on the CPU only, not on {device!r}")


# ---- NumPy's .npy -----------------------------------------------------------------------------------


def save_npy(file, tensor):
    """Writes the tensor as a .npy file in its own dtype ('<f4', '<f8', '<i8', '|b1'), as
    numpy.save(file, tensor.numpy()) does (no '.npy' is appended to the name)."""
    _io.save_npy(_path(file), tensor)


def load_npy(file):
    """A .npy file (numpy.save's, of float32, float64, int64 or bool) as a tensor; a
    Fortran-ordered array comes in C order."""
    return _io.load_npy(_path(file))


# ---- ag's checkpoints -------------------------------------------------------------------------------


class Checkpoint:
    """A checkpoint's contents (io/checkpoint.h): what wrote it (kind), and entries by dotted
    name — tensors, integers (0 to 2^64 − 1: steps, seeds), reals and strings. The dict
    torch.save would be given, kept flat."""

    def __init__(self, kind="", tensors=None, integers=None, reals=None, strings=None):
        self.kind = kind
        self.tensors = dict(tensors or {})
        self.integers = dict(integers or {})
        self.reals = dict(reals or {})
        self.strings = dict(strings or {})

    @classmethod
    def from_module(cls, module, kind="model", prefix="model"):
        """A checkpoint of the module's state_dict() under "PREFIX.", as ag's programs write."""
        return cls(kind, {f"{prefix}.{name}": t for name, t in module.state_dict().items()})

    def tensors_under(self, prefix):
        """The tensors named PREFIX.rest, as {rest: tensor} (checkpoint.tensors_under("model"))."""
        start = prefix + "."
        return {name[len(start):]: t for name, t in self.tensors.items() if name.startswith(start)}

    def __repr__(self):
        return (
            f"Checkpoint(kind={self.kind!r}, {len(self.tensors)} tensors, {len(self.integers)} "
            f"integers, {len(self.reals)} reals, {len(self.strings)} strings)"
        )


def save_checkpoint(checkpoint, path, format="binary"):
    """Writes an ag.io.Checkpoint — or a module, as Checkpoint.from_module(module) — to `path`
    atomically. format: 'binary' (portable) or 'json' (to read by eye)."""
    if not isinstance(checkpoint, Checkpoint):
        if not hasattr(checkpoint, "state_dict"):
            raise TypeError(
                "save_checkpoint: expected an ag.io.Checkpoint or a module, "
                f"not {type(checkpoint).__name__}"
            )
        checkpoint = Checkpoint.from_module(checkpoint)
    c = checkpoint
    for name, value in c.integers.items():
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**64:
            raise ValueError(
                f"save_checkpoint: integer {name!r} is {value!r}; checkpoints hold integers in "
                "[0, 2^64) (store others as reals or strings)"
            )
    _io._save_checkpoint(
        _path(path), c.kind, _dict(c.tensors, "save_checkpoint"), c.integers,
        {k: float(v) for k, v in c.reals.items()}, c.strings, format,
    )


def load_checkpoint(path, model=None, strict=True):
    """Reads and checks a checkpoint file (its CRC, its lengths) and returns the Checkpoint.
    model: also loads the tensors under "model." into it (model.load_state_dict, strict), after
    checking that they are finite."""
    kind, tensors, integers, reals, strings = _io._load_checkpoint(_path(path))
    c = Checkpoint(kind, tensors, integers, reals, strings)
    if model is not None:
        state = c.tensors_under("model")
        if not state:
            raise _C.CheckpointError(
                f"load_checkpoint: {_path(path)} holds no tensors under 'model.' (kind {kind!r})"
            )
        check_finite(state, "checkpoint " + _path(path))
        model.load_state_dict(state, strict=strict)
    return c


__all__ = [
    "save_file", "load_file", "save", "load", "safe_open", "save_model", "load_model",
    "save_npy", "load_npy", "Checkpoint", "save_checkpoint", "load_checkpoint", "check_finite",
    "d2l_name", "from_d2l_name",
]
