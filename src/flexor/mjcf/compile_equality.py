"""Equality constraints: ``eq_*`` fields in MuJoCo's order.

``eq_data`` (mjNEQDATA = 12 per constraint): connect (anchor in body1 (3), anchor in body2 at
qpos0 (3), ..., [10] torquescale); weld (anchor (3), relpose pos (3), relpose quat (4),
[10] torquescale, [11] 1 if relpose was taken from qpos0); joint/tendon (polycoef (5), ...,
[10] 1).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from flexor.mjcf import frames
from flexor.mjcf.compile_body import world_poses
from flexor.mjcf.defaults import Defaults, attributes
from flexor.mjcf.parse import Source
from flexor.mjcf.values import Names, Reader
from flexor.types import EqType, ObjType

_NEQDATA = 12  # mjNEQDATA of MuJoCo 4
_SOLREF = (0.02, 1.0)
_SOLIMP = (0.9, 0.95, 0.001, 0.5, 2.0)
_KINDS = {"connect": EqType.CONNECT, "weld": EqType.WELD, "joint": EqType.JOINT,
          "tendon": EqType.TENDON}


def compile_equality(source: Source, defaults: Defaults, names: dict[str, Names],
                     fields: dict[str, Any]) -> dict[str, Any]:
  """eq_* fields, in document order."""
  rows: dict[str, list[Any]] = {}
  poses = None
  for section in source.sections("equality"):
    for element in section:
      if element.tag not in _KINDS:
        raise source.error(element, "flex equality constraints are not supported by flexor yet")
      r = Reader(source, attributes(defaults, element, "equality"))
      etype = _KINDS[element.tag]
      data = np.zeros(_NEQDATA)
      obj2 = -1
      objtype = ObjType.BODY
      if etype in (EqType.CONNECT, EqType.WELD):
        if element.get("site1") is not None:
          obj1, obj2 = names["site"](r, "site1"), names["site"](r, "site2")
          objtype = ObjType.SITE
          if etype == EqType.WELD:
            # site semantics take the poses from the sites; MuJoCo keeps the raw attributes
            data[:3] = r.floats("anchor", 3, (0.0, 0.0, 0.0))
            data[3:10] = r.floats("relpose", 7, (0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0))
            data[10] = r.float("torquescale", 1.0)
        else:
          obj1 = names["body"](r, "body1")
          obj2 = names["body"](r, "body2") if element.get("body2") is not None else 0
          if poses is None:
            poses = world_poses(fields)
          xpos, xquat = poses
          data[:3] = r.floats("anchor", 3, (0.0, 0.0, 0.0))
          data[10] = r.float("torquescale", 1.0)
          if etype == EqType.CONNECT:
            world = frames.frame_accum(xpos[obj1], xquat[obj1], data[:3], [1.0, 0, 0, 0])[0]
            data[3:6] = _to_local(world, xpos[obj2], xquat[obj2])
          else:
            relpose = r.floats("relpose", 7, (0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0))
            if np.all(relpose[3:] == 0):
              # relpose unset: the anchor (in body2's frame) and body2's orientation in body1's
              # frame at qpos0 (flagged in data[11])
              world = frames.frame_accum(xpos[obj2], xquat[obj2], data[:3], [1.0, 0, 0, 0])[0]
              data[3:6] = _to_local(world, xpos[obj1], xquat[obj1])
              data[6:10] = frames.mulquat(_conj(xquat[obj1]), xquat[obj2])
              data[11] = 1.0
            else:
              data[3:10] = relpose
              data[6:10] /= np.linalg.norm(relpose[3:])
      else:
        objtype = ObjType.UNKNOWN
        prefix = "joint" if etype == EqType.JOINT else "tendon"
        table = names["jnt" if etype == EqType.JOINT else "tendon"]
        obj1 = table(r, f"{prefix}1")
        obj2 = table(r, f"{prefix}2") if element.get(f"{prefix}2") is not None else -1
        data[:5] = r.floats("polycoef", 5, (0.0, 1.0, 0.0, 0.0, 0.0), at_most=True)
        data[10] = 1.0
      for key, value in (("type", etype), ("obj1id", obj1), ("obj2id", obj2), ("objtype", objtype),
                         ("active0", int(r.bool("active", True))), ("data", data),
                         ("solref", r.floats("solref", 2, _SOLREF, at_most=True)),
                         ("solimp", r.floats("solimp", 5, _SOLIMP, at_most=True))):
        rows.setdefault(key, []).append(value)
  out = {f"eq_{k}": np.array(v) for k, v in rows.items()}
  out.setdefault("eq_data", np.zeros((0, _NEQDATA)))
  return out


def _conj(quat: np.ndarray) -> np.ndarray:
  return np.array([quat[0], -quat[1], -quat[2], -quat[3]])


def _to_local(world: np.ndarray, pos: np.ndarray, quat: np.ndarray) -> np.ndarray:
  mat = np.array(frames.quat2mat(quat)).reshape(3, 3)
  return mat.T @ (np.asarray(world) - pos)
