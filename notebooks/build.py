"""Builds the notebooks under notebooks/ from their percent-format sources.

Each ``NAME.py`` here that begins with a ``# %%`` line is the source of truth of ``NAME.ipynb``:
``# %%`` starts a code cell and ``# %% [markdown]`` a markdown cell whose lines are comments
(``# `` is stripped). The notebooks are stored without outputs and with numbered cell ids, so a
rebuild of unchanged sources gives identical files and ``--check`` can compare text.

Run from the repository root: ``python notebooks/build.py`` rewrites every notebook;
``python notebooks/build.py --check`` writes nothing and exits 1 if a notebook is out of date.
"""

from __future__ import annotations

import argparse
import glob
import os
import sys

import nbformat

HERE = os.path.dirname(os.path.abspath(__file__))
MARKER = "# %%"


def sources() -> list[str]:
  """Paths of the percent-format sources here, sorted (plain scripts such as muscle_curves.py
  do not start with a cell marker and are left alone)."""
  paths = sorted(glob.glob(os.path.join(HERE, "*.py")))
  return [p for p in paths if _read(p).startswith(MARKER)]


def _read(path: str) -> str:
  with open(path, encoding="utf-8") as f:
    return f.read()


def _cells(text: str) -> list[tuple[str, str]]:
  """(kind, source) of every cell, kind "code" or "markdown"; blank edges are trimmed."""
  cells: list[tuple[str, list[str]]] = []
  for line in text.splitlines():
    if line.startswith(MARKER):
      cells.append(("markdown" if "[markdown]" in line else "code", []))
    else:
      cells[-1][1].append(line)
  out = []
  for kind, lines in cells:
    if kind == "markdown":
      lines = [l[2:] if l.startswith("# ") else l.lstrip("#") for l in lines]
    out.append((kind, "\n".join(lines).strip("\n")))
  return out


def notebook(path: str) -> nbformat.NotebookNode:
  """The notebook built from the percent-format source at ``path``, without outputs."""
  nb = nbformat.v4.new_notebook()
  nb.metadata = {"kernelspec": {"name": "python3", "display_name": "Python 3",
                                "language": "python"},
                 "language_info": {"name": "python"}}
  make = {"code": nbformat.v4.new_code_cell, "markdown": nbformat.v4.new_markdown_cell}
  nb.cells = [make[kind](source, id=f"cell-{i:02d}")
              for i, (kind, source) in enumerate(_cells(_read(path)))]
  nbformat.validate(nb)
  return nb


def ipynb_path(path: str) -> str:
  return os.path.splitext(path)[0] + ".ipynb"


def rendered(path: str) -> str:
  """The text of the .ipynb file for the source at ``path``."""
  return nbformat.writes(notebook(path)) + "\n"


def stale() -> list[str]:
  """Notebooks whose file differs from what their source builds (or that are missing)."""
  out = []
  for src in sources():
    target = ipynb_path(src)
    if not os.path.exists(target) or _read(target) != rendered(src):
      out.append(os.path.relpath(target))
  return out


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--check", action="store_true",
                      help="write nothing; exit 1 if a notebook is out of date")
  args = parser.parse_args(argv)
  if args.check:
    out_of_date = stale()
    for path in out_of_date:
      print(f"out of date: {path} (run python notebooks/build.py)")
    return 1 if out_of_date else 0
  for src in sources():
    with open(ipynb_path(src), "w", encoding="utf-8") as f:
      f.write(rendered(src))
    print(f"wrote {os.path.relpath(ipynb_path(src))}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
