"""docs/notebooks/attention.ipynb, the seed's chapter on ag, runs headless from top to bottom
(Debian's python3-nbclient and python3-ipykernel), so that it never rots; its key outputs are the
chapter's."""

import os
import pathlib

import nbclient
import nbformat

NOTEBOOK = pathlib.Path(os.environ["AG_SOURCE_DIR"]) / "docs" / "notebooks" / "attention.ipynb"


def outputs_text(cell):
    texts = []
    for output in cell.get("outputs", []):
        if "text" in output:
            texts.append(output["text"])
        texts.append(output.get("data", {}).get("text/plain", ""))
    return "".join(texts)


def test_the_notebook_runs_and_shows_the_chapters_results():
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    # The kernel inherits this process's environment: PYTHONPATH finds the build's ag.
    nbclient.NotebookClient(notebook, timeout=300, kernel_name="python3").execute()
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    shown = [outputs_text(cell) for cell in code]
    assert any("ag.Size([2, 4, 100])" in text for text in shown)
    assert any("MultiHeadAttention(\n" in text and "(W_q): Linear(in_features=100, out_features=100, bias=False)" in text for text in shown)
    assert any("5 in binary is 101" in text for text in shown)
    pictures = [o for cell in code for o in cell.get("outputs", []) if "image/png" in o.get("data", {})]
    assert len(pictures) >= 2  # the columns of P, and its heatmap
