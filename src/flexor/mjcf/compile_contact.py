"""``<contact>``: explicit geom pairs (``pair_*``) and excluded body pairs (``exclude_signature``).

As MuJoCo's mjCPair and mjCBodyPair: a pair's geoms are swapped so that geom1 is on the body
with the lower id; a signature is ``(body1 << 16) + body2`` with body1 <= body2; pairs and
excludes are then stably sorted by signature (``mj_collision`` merges them with the broad
phase's body pairs in that order).

A pair's parameters not given on it or its default class are MuJoCo's fixed pair defaults
(``mjs_defaultPair``: condim 3, friction 1 1 0.005 0.0001 0.0001, the default solref and solimp,
margin and gap 0). They are *not* combined from the two geoms: MuJoCo 4's reader starts every
pair from these defined values, so mjCPair::Compile's "undefined -> from geoms" branches never
run for MJCF input.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from flexor.mjcf.defaults import Defaults, attributes
from flexor.mjcf.parse import Source
from flexor.mjcf.values import Names, Reader

_SOLREF = (0.02, 1.0)
_SOLIMP = (0.9, 0.95, 0.001, 0.5, 2.0)
_FRICTION = (1.0, 1.0, 0.005, 0.0001, 0.0001)
_CONDIMS = (1, 3, 4, 6)


def _signature(body1: int, body2: int) -> int:
  return (body1 << 16) + body2


def _pair(r: Reader, geom_names: Names, geom_bodyid: np.ndarray) -> dict[str, Any]:
  condim = r.int("condim", 3)
  if condim not in _CONDIMS:
    raise r.error(f"invalid condim {condim} in contact pair; expected 1, 3, 4 or 6", "condim")
  g1, g2 = geom_names(r, "geom1"), geom_names(r, "geom2")
  if geom_bodyid[g1] > geom_bodyid[g2]:
    g1, g2 = g2, g1
  return dict(
      dim=condim, geom1=g1, geom2=g2,
      signature=_signature(int(geom_bodyid[g1]), int(geom_bodyid[g2])),
      # partial values overwrite the leading entries of the class's (MuJoCo's partial reads)
      solref=r.floats("solref", 2, _SOLREF, at_most=True),
      solreffriction=r.floats("solreffriction", 2, (0.0, 0.0), at_most=True),
      solimp=r.floats("solimp", 5, _SOLIMP, at_most=True),
      margin=r.float("margin", 0.0), gap=r.float("gap", 0.0),
      adhesion=r.float("adhesion", 0.0),
      friction=r.floats("friction", 5, _FRICTION, at_most=True))


def compile_contact(source: Source, defaults: Defaults, names: dict[str, Names],
                    fields: dict[str, Any]) -> dict[str, Any]:
  """pair_* and exclude_signature fields, each list sorted by signature as MuJoCo sorts it.

  Args:
    source: the parsed MJCF.
    defaults: its default classes (``<default><pair>`` applies to pairs).
    names: name tables by kind; ``geom`` and ``body`` are used.
    fields: the tree's compiled fields (``geom_bodyid``).
  Raises:
    MJCFError: an unknown geom or body name, or an invalid condim.
  """
  geom_bodyid = np.asarray(fields["geom_bodyid"])
  pairs: list[dict[str, Any]] = []
  excludes: list[int] = []
  for section in source.sections("contact"):
    for element in section:
      if element.tag == "pair":
        pairs.append(_pair(Reader(source, attributes(defaults, element)), names["geom"],
                           geom_bodyid))
      elif element.tag == "exclude":
        r = Reader(source, attributes(defaults, element))
        b1, b2 = sorted((names["body"](r, "body1"), names["body"](r, "body2")))
        excludes.append(_signature(b1, b2))
  # Python's sort is stable, as MuJoCo's std::stable_sort: equal signatures keep file order
  pairs.sort(key=lambda p: p["signature"])
  excludes.sort()
  out: dict[str, Any] = dict(exclude_signature=np.array(excludes, dtype=np.int64))
  for key, shape, dtype in (("dim", (), np.int32), ("geom1", (), np.int32),
                            ("geom2", (), np.int32), ("signature", (), np.int64),
                            ("solref", (2,), np.float64), ("solreffriction", (2,), np.float64),
                            ("solimp", (5,), np.float64), ("margin", (), np.float64),
                            ("gap", (), np.float64), ("adhesion", (), np.float64),
                            ("friction", (5,), np.float64)):
    out[f"pair_{key}"] = np.array([p[key] for p in pairs], dtype=dtype).reshape((-1,) + shape)
  return out
