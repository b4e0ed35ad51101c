"""The notebooks under notebooks/ run: the plain scripts agree with MuJoCo (each exits non-zero
if not), and every Jupyter notebook is in sync with its percent-format source and executes at
small size (its assertions are the checks)."""

from __future__ import annotations

import importlib.util
import os
import sys

import nbclient
import nbformat
import pytest
from ipykernel.kernelspec import write_kernel_spec
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import KernelManager

HERE = os.path.dirname(os.path.abspath(__file__))
NOTEBOOKS = os.path.join(HERE, "..", "notebooks")
# Seconds one cell may run at small size; the slowest (gradient_checks' compiles) takes about a
# minute on two busy cores.
CELL_TIMEOUT = 300


def _load(name: str):
  path = os.path.join(NOTEBOOKS, f"{name}.py")
  spec = importlib.util.spec_from_file_location(name, path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def test_muscle_curves(tmp_path):
  out = tmp_path / "curves.png"
  assert _load("muscle_curves").main(["--out", str(out)]) == 0
  assert out.stat().st_size > 10_000


def test_notebooks_in_sync():
  """Every .ipynb is what notebooks/build.py makes of its .py (rebuild after editing a .py)."""
  assert _load("build").stale() == []


# Every notebook built from a percent-format source.
NAMES = [os.path.splitext(os.path.basename(p))[0] for p in _load("build").sources()]


@pytest.mark.parametrize("notebook", NAMES)
def test_notebook_executes(notebook, tmp_path, monkeypatch):
  """Runs the notebook in a fresh kernel of this interpreter with FLEXOR_NOTEBOOK_SMALL=1; a
  failing assertion in a cell fails the test with that cell's traceback."""
  # A kernel spec of our own, naming sys.executable, so that a "python3" spec installed for the
  # user or system (another interpreter, without flexor) cannot be picked instead.
  write_kernel_spec(str(tmp_path / "kernels" / "python3"))
  specs = KernelSpecManager(kernel_dirs=[str(tmp_path / "kernels")])
  km = KernelManager(kernel_name="python3", kernel_spec_manager=specs)
  assert km.kernel_spec.argv[0] == sys.executable

  monkeypatch.setenv("FLEXOR_NOTEBOOK_SMALL", "1")
  nb = nbformat.read(os.path.join(NOTEBOOKS, f"{notebook}.ipynb"), as_version=4)
  # A client given a kernel manager does not own the kernel: shut it down here, else every
  # notebook leaves an idle kernel holding its gigabytes until pytest exits.
  try:
    nbclient.NotebookClient(nb, km=km, timeout=CELL_TIMEOUT,
                            resources={"metadata": {"path": str(tmp_path)}}).execute()
  finally:
    if km.has_kernel:
      km.shutdown_kernel(now=True)
