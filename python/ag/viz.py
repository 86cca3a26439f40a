"""ag.viz: d2l's pictures — show_heatmaps and plot — as PNG images (python/src/io.cpp over viz/).

    png = ag.viz.show_heatmaps(P.unsqueeze(0).unsqueeze(0), xlabel='Column (encoding dimension)',
                               ylabel='Row (position)')
    png                      # in a notebook: the picture (png._repr_png_())
    png.save("P.png")        # or show_heatmaps(..., path="P.png")
    ag.viz.plot(ag.arange(60), P[0, :, 6:10].T, xlabel='Row (position)',
                legend=["Col %d" % d for d in range(6, 10)])

Every function returns an ag.viz.PNG: the PNG file's bytes (a bytes object: write it, send it,
compare it) that IPython and Jupyter display as the picture by itself, with no import of IPython
here. path=...: also written there, atomically.

Where ag draws differently from d2l's matplotlib it says so here rather than failing: heatmaps
are always in viridis (cmap is accepted and not used) and sized by `cell` pixels per matrix entry
(figsize is not used); plot's curves are drawn by gnuplot (installed with ag: gnuplot-nox), in
its colours (fmts is not used), at figsize × 100 pixels. What ag cannot draw — xlim, log scales,
curves over different x — is a ValueError.
"""

import os as _os
import struct as _struct
import tempfile as _tempfile


from . import _C
from . import _numpy

_viz = _C.viz

gnuplot_problem = _viz.gnuplot_problem


class PNG(bytes):
    """A PNG image: its file's bytes, displayed by IPython as the picture (_repr_png_)."""

    @property
    def data(self):
        """The bytes of the PNG file (as IPython.display.Image's .data)."""
        return bytes(self)

    @property
    def width(self):
        return _struct.unpack(">I", self[16:20])[0]  # the IHDR chunk: width, then height

    @property
    def height(self):
        return _struct.unpack(">I", self[20:24])[0]

    def _repr_png_(self):
        return bytes(self)

    def save(self, path):
        """Writes the PNG file to path (str or os.PathLike), atomically."""
        _C.io._write_file(_os.fsdecode(_os.fspath(path)), bytes(self), "PNG")

    def pixels(self):
        """The picture as a NumPy array of shape (height, width, 3), dtype uint8 (RGB)."""
        with _tempfile.TemporaryDirectory(prefix="ag-viz-") as folder:
            path = _os.path.join(folder, "image.png")
            self.save(path)
            return read_png(path)

    def __repr__(self):
        return f"<ag.viz.PNG {self.width}x{self.height}, {len(self)} bytes>"


def read_png(path):
    """A PNG file as a NumPy array (height, width, 3) of uint8 (alpha composited on white)."""
    width, height, rgb = _viz.read_png(_os.fsdecode(_os.fspath(path)))
    return _numpy().frombuffer(rgb, dtype=_numpy().uint8).reshape(height, width, 3).copy()


def _render(draw, path):
    """Runs draw(file) into a temporary folder, returns the PNG, and writes it to path if given."""
    with _tempfile.TemporaryDirectory(prefix="ag-viz-") as folder:
        file = _os.path.join(folder, "figure.png")
        draw(folder, file)
        with open(file, "rb") as f:
            png = PNG(f.read())
    if path is not None:
        png.save(path)
    return png


def _float_tensor(value):
    """An ag.Tensor of floats to draw: NumPy arrays and nested lists are converted; int64 and
    bool tensors are drawn as their float64 values."""
    from . import Tensor, tensor  # ag's, imported late: ag/__init__.py imports this file

    if not isinstance(value, Tensor):
        value = tensor(_numpy().asarray(value, dtype=_numpy().float64))
    value = value.detach()
    if not value.is_floating_point():
        value = value.double()
    return value


def _strings(values, op, what):
    if values is None:
        return []
    if isinstance(values, str):
        raise TypeError(f"{op}: {what} must be a list of str, not a str")
    return [str(v) for v in values]


def show_heatmaps(matrices, xlabel="Keys", ylabel="Queries", titles=None, figsize=None,
                  cmap=None, *, row_titles=None, row_labels=None, col_labels=None, cell=12,
                  path=None):
    """d2l's show_heatmaps: a (num_rows, num_cols, Q, K) tensor drawn as a grid of heatmaps on one
    colour scale, queries down and keys across, with the shared axis names.

    titles: None, one per grid column (d2l's use) or one per matrix, row-major; row_titles: None or
    one per grid row. row_labels/col_labels: tick labels for the Q rows and K columns of every
    matrix (the tokens). cell: pixels per matrix entry. figsize and cmap are d2l's and not used
    (ag draws viridis). Returns an ag.viz.PNG; path: also written there."""
    m = _float_tensor(matrices)
    options = _viz._ShowHeatmapsOptions()
    options.xlabel, options.ylabel = str(xlabel), str(ylabel)
    options.titles = _strings(titles, "show_heatmaps", "titles")
    options.row_titles = _strings(row_titles, "show_heatmaps", "row_titles")
    options.row_labels = _strings(row_labels, "show_heatmaps", "row_labels")
    options.col_labels = _strings(col_labels, "show_heatmaps", "col_labels")
    options.cell = int(cell)
    return _render(lambda folder, file: _viz._show_heatmaps(m, file, options), path)


def heatmap(matrix, title="", xlabel="", ylabel="", *, row_labels=None, col_labels=None, cell=12,
            vmin=None, vmax=None, colorbar=True, font_scale=1, path=None):
    """One (rows, cols) matrix as a heatmap (viridis, from vmin to vmax: the data's range unless
    given), with a colour bar. Returns an ag.viz.PNG; path: also written there."""
    m = _float_tensor(matrix)
    options = _viz._HeatmapOptions()
    options.title, options.xlabel, options.ylabel = str(title), str(xlabel), str(ylabel)
    options.row_labels = _strings(row_labels, "heatmap", "row_labels")
    options.col_labels = _strings(col_labels, "heatmap", "col_labels")
    options.cell, options.font_scale, options.colorbar = int(cell), int(font_scale), bool(colorbar)
    options.vmin = None if vmin is None else float(vmin)
    options.vmax = None if vmax is None else float(vmax)
    return _render(lambda folder, file: _viz._write_heatmap(file, m, options), path)


def _rows(value):
    """d2l's plot arguments as a list of 1-D float64 arrays: a 1-D value is one curve, a 2-D one
    a curve per row, a list of 1-D values a curve each."""
    from . import Tensor

    def array(v):
        if isinstance(v, Tensor):
            v = v.detach().double().numpy()
        return _numpy().asarray(v, dtype=_numpy().float64)

    if isinstance(value, (list, tuple)) and value and hasattr(value[0], "__len__"):
        return [array(v).reshape(-1) for v in value]
    a = array(value)
    if a.ndim == 1:
        return [a]
    if a.ndim == 2:
        return list(a)
    raise ValueError(f"plot: expected 1-D or 2-D values, got shape {list(a.shape)}")


def plot(X, Y=None, xlabel=None, ylabel=None, legend=None, xlim=None, ylim=None,
         xscale="linear", yscale="linear", fmts=None, figsize=(3.5, 2.5), axes=None, *,
         title="", points=False, path=None):
    """d2l's plot: curves Y (one per row, or a list of them) over X, drawn by gnuplot.

    X: 1-D (shared by every curve) or one row per curve, all equal; Y None: X's rows are the
    curves, over 0, 1, 2, .... legend: a title per curve; ylim: (ymin, ymax); figsize in inches,
    at 100 pixels each. fmts is not used (gnuplot's colours); xlim, log scales and axes are not
    available (ValueError). Returns an ag.viz.PNG; path: also written there."""
    if xlim is not None:
        raise ValueError("plot: ag's curves take no xlim (they span their x values)")
    if xscale != "linear" or yscale != "linear":
        raise ValueError(f"plot: ag draws linear axes only, not xscale={xscale!r}, yscale={yscale!r}")
    if axes is not None:
        raise ValueError("plot: ag draws its own figure; axes (matplotlib's) cannot be given")
    xs = _rows(X)
    if Y is None:
        ys = xs
        xs = [_numpy().arange(len(ys[0]), dtype=_numpy().float64)]
    else:
        ys = _rows(Y)
    if any(not _numpy().array_equal(x, xs[0]) for x in xs):
        raise ValueError("plot: ag draws every curve over one x; the X given differ")
    x = xs[0]
    for i, y in enumerate(ys):
        if len(y) != len(x):
            raise ValueError(f"plot: curve {i} has {len(y)} values for {len(x)} x values")
    names = _strings(legend, "plot", "legend")
    if names and len(names) != len(ys):
        raise ValueError(f"plot: {len(names)} legend entries for {len(ys)} curves")
    ymin, ymax = (None, None) if ylim is None else (float(ylim[0]), float(ylim[1]))
    width, height = (int(round(100 * float(s))) for s in figsize)

    def draw(folder, file):
        _viz._plot(_os.path.join(folder, "figure.csv"), file, [float(v) for v in x],
                   [[float(v) for v in y] for y in ys], names, xlabel or "", ylabel or "",
                   str(title), ymin, ymax, width, height, bool(points))

    return _render(draw, path)


__all__ = ["PNG", "show_heatmaps", "heatmap", "plot", "read_png", "gnuplot_problem"]
