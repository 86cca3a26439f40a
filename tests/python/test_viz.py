"""ag.viz: d2l's show_heatmaps and plot as PNG images a notebook displays (python/ag/viz.py).

The pictures are checked as files (PNG signature, the IHDR's size, the pixels read back) and by
the colours the data must give (viridis' ends for the smallest and largest value), not against
stored images.
"""

import struct

import numpy as np
import pytest

import ag

SIGNATURE = b"\x89PNG\r\n\x1a\n"
VIRIDIS_LOW, VIRIDIS_HIGH = (68, 1, 84), (253, 231, 37)  # viz/colormap.cpp's end anchors


def ihdr_size(data):
    """(width, height) from a PNG's first chunk, which must be IHDR."""
    assert data[:8] == SIGNATURE
    length, kind = struct.unpack(">I4s", data[8:16])
    assert kind == b"IHDR" and length == 13
    return struct.unpack(">II", data[16:24])


def count(pixels, colour):
    return int(np.all(pixels == np.array(colour, dtype=np.uint8), axis=-1).sum())


def positional_table(num_steps=60, encoding_dim=32):
    """The seed's P[0, :60, :32], computed with NumPy as d2l's PositionalEncoding does."""
    X = np.arange(num_steps, dtype=np.float32)[:, None] / np.power(
        10000, np.arange(0, encoding_dim, 2, dtype=np.float32) / encoding_dim
    )
    P = np.zeros((num_steps, encoding_dim), dtype=np.float32)
    P[:, 0::2], P[:, 1::2] = np.sin(X), np.cos(X)
    return P


def test_show_heatmaps_returns_png_bytes_a_notebook_displays(tmp_path):
    weights = ag.tensor(np.random.default_rng(1).random((2, 3, 4, 5)))
    png = ag.viz.show_heatmaps(weights, xlabel="Keys", ylabel="Queries", titles=["h0", "h1", "h2"])
    assert isinstance(png, bytes) and png[:8] == SIGNATURE
    assert (png.width, png.height) == ihdr_size(png)
    assert png._repr_png_() == bytes(png) and png.data == bytes(png)
    assert type(png._repr_png_()) is bytes
    assert repr(png) == f"<ag.viz.PNG {png.width}x{png.height}, {len(png)} bytes>"
    png.save(tmp_path / "saved.png")
    assert (tmp_path / "saved.png").read_bytes() == png
    again = ag.viz.show_heatmaps(weights, titles=["h0", "h1", "h2"], path=str(tmp_path / "w.png"))
    assert again == png  # deterministic, and path= writes the same bytes
    assert (tmp_path / "w.png").read_bytes() == png
    pixels = png.pixels()
    assert pixels.shape == (png.height, png.width, 3) and pixels.dtype == np.uint8
    np.testing.assert_array_equal(ag.viz.read_png(tmp_path / "w.png"), pixels)


def test_ipython_displays_it_as_a_picture():
    from IPython.core import formatters  # Debian's python3-ipython, which python3-ipykernel brings
    png = ag.viz.show_heatmaps(ag.rand(1, 1, 3, 3))
    data, _ = formatters.DisplayFormatter().format(png)
    assert data["image/png"] == png
    assert data["text/plain"] == repr(png)  # not the bytes


def test_show_heatmaps_colours_span_the_values():
    m = ag.tensor([[[[0.0, 1.0], [1.0, 0.0]]]])  # (1, 1, 2, 2)
    pixels = ag.viz.show_heatmaps(m, cell=20).pixels()
    # Two 20x20 cells at each end of the colour map (the colour bar adds a few more pixels).
    assert count(pixels, VIRIDIS_LOW) >= 2 * 20 * 20
    assert count(pixels, VIRIDIS_HIGH) >= 2 * 20 * 20
    # A uniform matrix is drawn in neither end colour's full cells.
    flat = ag.viz.show_heatmaps(ag.ones(1, 1, 2, 2), cell=20).pixels()
    assert count(flat, VIRIDIS_LOW) < 20 * 20 and count(flat, VIRIDIS_HIGH) < 20 * 20


def test_show_heatmaps_grid_grows_with_rows_and_columns():
    def grid(rows, cols):  # values from 0 to 1, so that the colour bars' labels are the same
        return ag.tensor(np.linspace(0, 1, rows * cols * 16).reshape(rows, cols, 4, 4))

    one = ag.viz.show_heatmaps(grid(1, 1))
    wide = ag.viz.show_heatmaps(grid(1, 3))
    tall = ag.viz.show_heatmaps(grid(3, 1))
    assert wide.width > one.width and wide.height == one.height
    assert tall.height > one.height and tall.width == one.width


def test_the_seeds_positional_encoding_heatmap():
    P = positional_table()
    # d2l: show_heatmaps(P, xlabel=..., ylabel=..., figsize=(3.5, 4), cmap='Blues')
    png = ag.viz.show_heatmaps(P.reshape(1, 1, 60, 32), xlabel="Column (encoding dimension)",
                               ylabel="Row (position)", figsize=(3.5, 4), cmap="Blues")
    assert png.height > png.width  # 60 rows, 32 columns
    pixels = png.pixels()
    assert count(pixels, VIRIDIS_HIGH) > 0 and count(pixels, VIRIDIS_LOW) > 0  # cos(0) = 1, -1


def test_heatmap_of_one_matrix(tmp_path):
    png = ag.viz.heatmap(ag.tensor([[0.0, 0.5], [0.25, 1.0]]), title="m", xlabel="col",
                         ylabel="row", cell=16, vmin=0.0, vmax=1.0, path=tmp_path / "m.png")
    assert (tmp_path / "m.png").read_bytes() == png
    pixels = png.pixels()
    assert count(pixels, VIRIDIS_LOW) >= 16 * 16 and count(pixels, VIRIDIS_HIGH) >= 16 * 16


def test_integer_tensors_and_arrays_are_drawn():
    assert ag.viz.show_heatmaps(ag.tensor([[[[0, 1], [2, 3]]]]))[:8] == SIGNATURE
    assert ag.viz.show_heatmaps(np.eye(3).reshape(1, 1, 3, 3))[:8] == SIGNATURE


def test_show_heatmaps_errors_are_ags():
    with pytest.raises(ag.ShapeError, match=r"show_heatmaps: matrices of shape \[4,5\]"):
        ag.viz.show_heatmaps(ag.rand(4, 5))
    with pytest.raises(ValueError, match="show_heatmaps: 2 titles"):
        ag.viz.show_heatmaps(ag.rand(1, 3, 2, 2), titles=["a", "b"])
    with pytest.raises(ag.ValueError, match="row 0, column 1"):
        ag.viz.heatmap(ag.tensor([[0.0, float("nan")]]))
    with pytest.raises(TypeError, match="list of str"):
        ag.viz.show_heatmaps(ag.rand(1, 1, 2, 2), titles="abc")
    with pytest.raises(OSError, match="no-such-folder"):
        ag.viz.heatmap(ag.rand(2, 2), path="/nonexistent/no-such-folder/x.png")




def test_plot_the_seeds_positional_encoding_columns(tmp_path):
    P = positional_table()
    # d2l: plot(arange(num_steps), P[0, :, 6:10].T, xlabel='Row (position)', figsize=(6, 2.5),
    #           legend=["Col %d" % d for d in arange(6, 10)])
    png = ag.viz.plot(ag.arange(60), ag.tensor(P[:, 6:10].T), xlabel="Row (position)",
                      figsize=(6, 2.5), legend=["Col %d" % d for d in range(6, 10)],
                      path=tmp_path / "columns.png")
    assert ihdr_size(png) == (600, 250)  # figsize at 100 pixels an inch
    assert (tmp_path / "columns.png").read_bytes() == png
    assert sorted(p.name for p in tmp_path.iterdir()) == ["columns.png"]  # no CSV or script left
    pixels = png.pixels()
    assert (pixels != 255).any(axis=-1).sum() > 1000  # something was drawn on the white


def test_plot_takes_d2ls_shapes_of_arguments():
    x = np.linspace(0, 1, 11)
    one = ag.viz.plot(x, x**2)
    rows = ag.viz.plot(ag.tensor(x), [ag.tensor(x), ag.tensor(x**2)], legend=["x", "x^2"], ylim=(0, 1))
    only_y = ag.viz.plot(ag.tensor(np.stack([x, x**3])))
    for png in (one, rows, only_y):
        assert ihdr_size(png) == (350, 250)  # d2l's default figsize (3.5, 2.5)


def test_plot_refuses_what_ag_cannot_draw():
    x = np.arange(5.0)
    with pytest.raises(ValueError, match="xlim"):
        ag.viz.plot(x, x, xlim=(0, 1))
    with pytest.raises(ValueError, match="linear"):
        ag.viz.plot(x, x, yscale="log")
    with pytest.raises(ValueError, match="one x"):
        ag.viz.plot([x, x + 1], [x, x])
    with pytest.raises(ValueError, match="2 legend entries for 1 curves"):
        ag.viz.plot(x, x, legend=["a", "b"])
    with pytest.raises(ValueError, match="curve 0 has 4 values for 5"):
        ag.viz.plot(x, x[:4])
