"""The package as a user starts it: `python3 -c "import ag; print(ag.nn.MultiHeadAttention(...))"`
from the build tree prints d2l's repr (PyTorch's text for the seed's class, a fixture), and
`import ag` works in an interpreter without NumPy (only NumPy's conversions need it)."""

import os
import pathlib
import subprocess
import sys

from seed_code import MHA_REPR  # PyTorch's repr of the seed's class, a fixture


def python(code, cwd=None):
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=cwd,
                          env=dict(os.environ), timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_readme_command_prints_d2ls_repr():
    out = python("import ag; print(ag.nn.MultiHeadAttention(100, 100, 100, 100, 5, 0.5))")
    assert out == MHA_REPR + "\n"


def test_the_package_imports_from_its_own_folder_without_a_path():
    package_parent = next(p for p in os.environ["PYTHONPATH"].split(os.pathsep) if p)
    env_free = "import sys; sys.path = [p for p in sys.path if p != %r]; " % package_parent
    out = python(env_free + "import ag; print(ag.__file__)", cwd=package_parent)
    assert out.strip() == str(pathlib.Path(package_parent) / "ag" / "__init__.py")


def test_import_ag_needs_no_numpy():
    out = python(
        "import sys; sys.modules['numpy'] = None  # `import numpy` now fails\n"
        "import ag\n"
        "x = ag.ones(2) + 1\n"
        "print(ag.nn.Linear(2, 3)(x).shape, (x @ x).item())\n"
        "try:\n"
        "    ag.tensor([1.0])\n"
        "except ImportError:\n"
        "    print('ag.tensor needs NumPy')\n"
    )
    assert out == "ag.Size([3]) 8.0\nag.tensor needs NumPy\n"
