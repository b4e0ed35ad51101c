"""Height field assets (host side): elevation data as MuJoCo's ``mjCHField::Compile`` makes it.

An ``<hfield>`` gives its grid either inline (``nrow``, ``ncol`` and optionally ``elevation``,
written top row first) or from a file: a PNG image (grey levels; rows top first) or MuJoCo's
binary format (int32 nrow, int32 ncol, then nrow * ncol float32 values, bottom row first). The
elevations are stored bottom row first, as float32, shifted and scaled to [0, 1]; ``size``
(radius x, radius y, elevation z, base z) turns them into metres.
"""

from __future__ import annotations

import io
import os
from typing import Any, NamedTuple

import numpy as np

_EPS = 1e-14  # mjEPS: below this elevation span the data is only shifted, not scaled


class HField(NamedTuple):
  """One compiled height field: ``size`` (4,), ``data`` (nrow, ncol) float32 in [0, 1]."""
  size: np.ndarray
  data: np.ndarray


def _png(content: bytes) -> np.ndarray:
  """A PNG's grey levels (rows top first) as lodepng's LCT_GREY conversion gives them: the red
  channel of colour images, the high byte of 16-bit ones."""
  try:
    from PIL import Image  # pylint: disable=import-outside-toplevel
  except ImportError:
    raise ValueError("reading a PNG height field needs Pillow (pip install pillow)") from None
  image = Image.open(io.BytesIO(content))
  if image.mode in ("I;16", "I;16B", "I"):
    return (np.asarray(image, np.int64) >> 8).astype(np.float32)
  return np.asarray(image.convert("RGBA"), np.uint8)[..., 0].astype(np.float32)


def _custom(content: bytes) -> np.ndarray:
  """MuJoCo's binary height field: its rows bottom first."""
  if len(content) < 8:
    raise ValueError("hfield file has no header")
  nrow, ncol = (int(x) for x in np.frombuffer(content[:8], np.int32))
  if nrow < 1 or ncol < 1:
    raise ValueError("non-positive hfield dimensions in file")
  if len(content) != nrow * ncol * 4 + 8:
    raise ValueError("unexpected file size")
  return np.frombuffer(content[8:], np.float32).reshape(nrow, ncol)


def load(size: np.ndarray, nrow: int, ncol: int, elevation: np.ndarray | None,
         file: tuple[bytes, str] | None, content_type: str | None) -> HField:
  """The compiled height field; raises ValueError (with the attribute at fault first, as
  ``"attr: message"``) where MuJoCo's compiler refuses it.

  Args:
    size: (4,) the ``size`` attribute.
    nrow, ncol: the grid (unused where a file gives it).
    elevation: nrow * ncol values, top row first, or None (unused where a file is given).
    file: (content, path) of the ``file`` attribute, or None.
    content_type: the ``content_type`` attribute, or None (then the file's extension decides).
  """
  if file is not None:  # MuJoCo ignores nrow, ncol and elevation then
    content, path = file
    kind = content_type or ("image/png" if os.path.splitext(path)[1].lower() == ".png"
                            else "image/vnd.mujoco.hfield")
    if kind not in ("image/png", "image/vnd.mujoco.hfield"):
      raise ValueError(f"content_type: unsupported content type {kind!r}")
    try:
      data = _png(content)[::-1] if kind == "image/png" else _custom(content)
    except (ValueError, OSError) as e:
      raise ValueError(f"file: {e}") from None
  else:
    if nrow < 1 or ncol < 1:
      raise ValueError("nrow: hfield not specified (give nrow and ncol, or a file)")
    if elevation is not None and len(elevation) != nrow * ncol:
      raise ValueError("elevation: elevation data length must match nrow*ncol")
    data = (np.zeros((nrow, ncol), np.float32) if elevation is None
            else np.asarray(elevation, np.float32).reshape(nrow, ncol)[::-1])
  data = np.array(data, np.float32)
  low, high = data.min(), data.max()
  data -= low
  if float(high - low) > _EPS:
    data /= high - low
  return HField(size=np.asarray(size, np.float64), data=data)


def hfield_fields(hfields: list[HField]) -> dict[str, Any]:
  """hfield_* Model fields of the height fields, in id order."""
  nrow = np.array([h.data.shape[0] for h in hfields], np.int32)
  ncol = np.array([h.data.shape[1] for h in hfields], np.int32)
  count = nrow * ncol
  return dict(hfield_size=np.array([h.size for h in hfields], np.float64).reshape(-1, 4),
              hfield_nrow=nrow, hfield_ncol=ncol,
              hfield_adr=(np.cumsum(count) - count).astype(np.int32),
              hfield_data=(np.concatenate([h.data.ravel() for h in hfields]) if hfields
                           else np.zeros(0, np.float32)))
