"""Public loading API: ``load_mjcf`` and ``load_mjcf_string``."""

from __future__ import annotations

import os
from typing import Any

from flexor import setconst
from flexor.errors import MJCFError
from flexor.mjcf import parse
from flexor.mjcf.compile import compile_model
from flexor.types import Model


def _compile(source: parse.Source, dtype: Any, convex: bool) -> Model:
  """Compiles ``source``, then fills the compile-time constants that need the simulation."""
  model, pending = compile_model(source, dtype, convex)
  try:
    return setconst.set_const(model, setconst.Pending(
        springdamper=pending["springdamper"],
        lengthrange=setconst.LengthRangeOptions(**pending["lengthrange"])))
  except setconst.LengthRangeError as e:
    element = pending["actuator_elements"][e.actuator]
    raise source.error(element, f"{e}; give the muscle a lengthrange, or limit its joint or "
                       "tendon and set <compiler><lengthrange uselimit=\"true\">") from None


def load_mjcf(path: str | os.PathLike, *, dtype: Any = None, root: str | os.PathLike | None = None,
              convex: bool = True) -> Model:
  """Compiles the MJCF file at ``path`` into a Model.

  Args:
    path: the model file; ``<include>`` and asset files are resolved relative to its folder.
    dtype: float dtype of the Model's traced fields (default: float64 if x64 is enabled).
    root: optional folder that every file the model reads must lie in (for untrusted models).
    convex: collide the pairs MuJoCo sends to GJK and EPA that flexor supports (an ellipsoid
      against anything, a sphere or an ellipsoid against a mesh), as MuJoCo does. False leaves
      them out (with a warning naming them) to save their kernel's compile time (17 s for
      dm_control's quadruped on a 2-core CPU) and run time, at the price of those contacts.
  Raises:
    MJCFError: naming file, line, element and attribute of the first problem found.
  """
  path = os.fspath(path)
  try:
    with open(path, "rb") as f:
      data = f.read()
  except OSError as e:
    raise MJCFError(f"cannot read model file: {e.strerror}", file=path) from None
  if root is not None:
    real_root, real = os.path.realpath(root), os.path.realpath(path)
    if os.path.commonpath([real_root, real]) != real_root:
      raise MJCFError(f"model file is outside the allowed root folder {real_root}", file=path)
  source = parse.load(data, path, root_dir=os.fspath(root) if root is not None else None)
  return _compile(source, dtype, convex)


def load_mjcf_string(xml: str | bytes, assets: dict[str, bytes] | None = None, *,
                     dtype: Any = None, convex: bool = True) -> Model:
  """Compiles MJCF text into a Model.

  Args:
    xml: the model document.
    assets: files it names (includes, meshes, ...), by the path the model uses; nothing is read
      from disk.
    dtype: float dtype of the Model's traced fields.
    convex: as for :func:`load_mjcf`.
  Raises:
    MJCFError: naming line, element and attribute of the first problem found.
  """
  data = xml.encode() if isinstance(xml, str) else xml
  source = parse.load(data, None, assets=assets)
  return _compile(source, dtype, convex)
