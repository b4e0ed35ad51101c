"""The scripts under notebooks/ run and agree with MuJoCo (each exits non-zero if not)."""

from __future__ import annotations

import importlib.util
import os

HERE = os.path.dirname(os.path.abspath(__file__))


def _load(name: str):
  path = os.path.join(HERE, "..", "notebooks", f"{name}.py")
  spec = importlib.util.spec_from_file_location(name, path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def test_muscle_curves(tmp_path):
  out = tmp_path / "curves.png"
  assert _load("muscle_curves").main(["--out", str(out)]) == 0
  assert out.stat().st_size > 10_000
