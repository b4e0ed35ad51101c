"""The narrow phase's candidate geom pairs, found once at compile time (host side, numpy).

MuJoCo filters geom pairs at every step (``mj_collision``): explicit ``<pair>`` elements, then
every pair of geoms on different weld bodies that passes the parent-child, ``<exclude>`` and
contype/conaffinity filters. All of these depend only on the model's structure, so flexor runs
them here and the simulation sees a static list. What MuJoCo decides at run time (broad phase
bounding volumes, the bounding-sphere test, sleeping bodies) is left to the narrow phase, or to
MJX's max_geom_pairs broad phase where a model sets it (``flexor.collision``): every pair that
passes the static filters is a candidate.

The candidates come in the order MuJoCo emits their contacts, so a driver that fills contact
slots in candidate order and compacts the existing ones reproduces ``d.contact``'s order:

* body pairs by signature ``(body1 << 16) + body2`` (body1 < body2), as the broad phase sorts
  them; an explicit pair goes before the dynamic pairs of the first body pair whose signature is
  >= its own (pair_signature is sorted, so: by signature, explicit pairs first on a tie, then in
  pair order);
* within a body pair, geom pairs ordered by (geom1, geom2) after the type swap below when the
  midphase runs (MuJoCo sorts the contacts of ``mj_collideTree``), else in the loop order over
  body1's then body2's geoms (``mjDSBL_MIDPHASE``, or one geom on each body);
* geom1 of the lower geom type (``pushGeomGeom``); pair_geom1 first if the types are equal.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from flexor.types import DisableBit, GeomType

_P, _H, _S, _C, _E, _Y, _B, _M, _D = (GeomType.PLANE, GeomType.HFIELD, GeomType.SPHERE,
                                      GeomType.CAPSULE, GeomType.ELLIPSOID, GeomType.CYLINDER,
                                      GeomType.BOX, GeomType.MESH, GeomType.SDF)

# (type1, type2), type1 <= type2, with a collision function in MuJoCo's mjCOLLISIONFUNC: all but
# plane-plane, plane-hfield and hfield-hfield
HAS_FUNCTION = {(a, b) for a in GeomType for b in GeomType
                 if a <= b and not (a in (_P, _H) and b in (_P, _H))}

# the pairs MuJoCo sends to mjc_Convex that flexor's GJK/EPA covers: those with a sphere or an
# ellipsoid, where MuJoCo 4.0 makes one contact
CONVEX = frozenset({(_S, _E), (_S, _M), (_C, _E), (_E, _E), (_E, _Y), (_E, _B), (_E, _M)})

# the other mjc_Convex pairs: MuJoCo 4.0 gives them up to 4 contacts (2 with a capsule) by its
# multi-contact search (flexor.collision_multi), or one GJK/EPA contact where the model disables
# multiccd
MULTI = frozenset({(_C, _Y), (_Y, _Y), (_Y, _B), (_C, _M), (_Y, _M), (_B, _M), (_M, _M)})

# a height field against a sphere, capsule, ellipsoid, cylinder, box or mesh: mjc_ConvexHField,
# one GJK/EPA contact per prism
HFIELD = frozenset((_H, t) for t in (_S, _C, _E, _Y, _B, _M))
MAXCONPAIR = 50  # mjMAXCONPAIR: the most contacts one geom pair makes

# the subset flexor's narrow phase implements (MuJoCo's primitive colliders, mjc_PlaneConvex,
# the CONVEX pairs of mjc_Convex and mjc_ConvexHField; not SDFs)
SUPPORTED = frozenset({(_P, _S), (_P, _C), (_P, _E), (_P, _Y), (_P, _B), (_P, _M), (_S, _S),
                       (_S, _C), (_S, _Y), (_S, _B), (_C, _C), (_C, _B),
                       (_B, _B)}) | CONVEX | HFIELD


# the pairs mj_geomDistance (distance sensors) measures with a primitive collider, as flexor's
# narrow phase has them: not mjc_Convex's, not box-box (native CCD takes it)
DISTANCE_PAIRS = SUPPORTED - CONVEX - HFIELD - {(_B, _B)}
# the pairs it measures with native CCD (mj_geomDistanceCCD): mjc_Convex's and box-box
DISTANCE_CCD = CONVEX | MULTI | {(_B, _B)}


def hfield_window(size: np.ndarray, nrow: int, ncol: int, reach: float) -> tuple[int, int]:
  """The grid cells (columns, rows) of the sub-grid mjc_ConvexHField can visit for a geom whose
  bounding radius plus the pair's margin is ``reach``, on a height field of ``size`` (4,) and
  nrow x ncol points.

  The sub-grid spans the geom's bounding box grown by the margin, in the height field's frame,
  at most 2 reach wide: a span of w cells, rounded out at both ends, covers at most floor(w) + 2
  cells."""
  cells = lambda radius, n: min(int(np.floor(2 * reach * (n - 1) / (2 * radius))) + 2,
                                max(n - 1, 0))
  return cells(float(size[0]), int(ncol)), cells(float(size[1]), int(nrow))


def max_contacts(type1: int, type2: int, window: tuple[int, int] | None = None,
                 multiccd: bool = False) -> int:
  """MuJoCo's mj_maxContact(type1, type2, has_margin=1) for the supported type pairs: the
  contacts one narrow phase call can return (a height field's: one per prism of the sub-grid
  ``window``, at most MAXCONPAIR; a MULTI pair's, with ``multiccd``, those of the multi-contact
  search)."""
  pair = (min(int(type1), int(type2)), max(int(type1), int(type2)))
  if pair not in SUPPORTED | MULTI:
    raise ValueError(f"geom types {pair} are not supported by flexor's narrow phase")
  if pair in HFIELD:
    if window is None:
      raise ValueError("a height field pair needs its sub-grid window")
    return min(2 * window[0] * window[1], MAXCONPAIR)
  if pair in MULTI and multiccd:
    return 2 if _C in pair else 4
  if _S in pair or _E in pair or pair in MULTI:
    return 1
  return {(_B, _B): 8, (_C, _C): 2, (_C, _B): 4, (_P, _C): 2, (_P, _Y): 4, (_P, _B): 4,
          (_P, _M): 4}[pair]


def _skip_body_pair(b1: int, b2: int, weld: np.ndarray, parent: np.ndarray,
                    dofnum: np.ndarray, filterparent: bool) -> bool:
  """MuJoCo's filterBodyPair without sleeping: True to discard the body pair."""
  w1, w2 = weld[b1], weld[b2]
  if w1 == w2:
    return True
  # neither weld group can move: no force could act (also: static geoms never collide)
  if dofnum[w1] == 0 and dofnum[w2] == 0:
    return True
  pw1, pw2 = weld[parent[w1]], weld[parent[w2]]
  return bool(filterparent and w1 != 0 and w2 != 0 and (w1 == pw2 or w2 == pw1))


def _ordered(g1: int, g2: int, geom_type: np.ndarray) -> tuple[int, int]:
  return (g2, g1) if geom_type[g1] > geom_type[g2] else (g1, g2)


def _function_types(g1: int, g2: int, geom_type: np.ndarray) -> tuple[int, int]:
  t1, t2 = int(geom_type[g1]), int(geom_type[g2])
  return (t1, t2) if t1 <= t2 else (t2, t1)


def candidates(f: dict[str, Any], disableflags: int, convex: bool = True) -> dict[str, Any]:
  """Returns collision_geom (ncollision, 2), collision_pairid (ncollision,) and ncollision.

  Pairs MuJoCo would collide but flexor's narrow phase cannot (SDFs, and the CONVEX, MULTI and
  HFIELD pairs unless ``convex``) are left out, with one warning naming them.
  ``mjDSBL_CONTACT``/``CONSTRAINT`` are not applied here: the driver checks them at run time.

  Args:
    f: mjModel-named arrays of the model (geoms, bodies, pairs, excludes; body_parentid,
      body_jntnum, body_dofnum and body_mocapid included).
    disableflags: the model's opt.disableflags (FILTERPARENT changes the parent-child rule,
      MIDPHASE the order within a body pair).
    convex: keep the CONVEX pairs (GJK and EPA; False saves their compile and run time).
  """
  geom_type = np.asarray(f["geom_type"]).astype(np.int64)
  geom_bodyid = np.asarray(f["geom_bodyid"]).astype(np.int64)
  contype = np.asarray(f["geom_contype"]).astype(np.int64)
  conaffinity = np.asarray(f["geom_conaffinity"]).astype(np.int64)
  parent = np.asarray(f["body_parentid"]).astype(np.int64)
  dofnum = np.asarray(f["body_dofnum"]).astype(np.int64)
  pair_geom1 = np.asarray(f.get("pair_geom1", ())).astype(np.int64)
  pair_geom2 = np.asarray(f.get("pair_geom2", ())).astype(np.int64)
  pair_signature = np.asarray(f.get("pair_signature", ())).astype(np.int64)
  excluded = set(np.asarray(f.get("exclude_signature", ())).astype(np.int64).tolist())
  filterparent = not disableflags & DisableBit.FILTERPARENT
  midphase = not disableflags & DisableBit.MIDPHASE
  weld = np.asarray(f["body_weldid"])
  nbody = len(parent)

  # (sort key, geom1, geom2, pair id); see the module docstring for the order
  found: list[tuple[tuple[int, ...], int, int, int]] = []
  merged: dict[int, set[tuple[int, int]]] = {}
  signature_max = -1
  for k, (g1, g2) in enumerate(zip(pair_geom1.tolist(), pair_geom2.tolist())):
    # MuJoCo merges pairs in array order, each before the first body pair at or above the
    # signatures so far (pair_signature is sorted when MuJoCo or flexor compiled it)
    signature_max = max(signature_max, int(pair_signature[k]))
    merged.setdefault(int(pair_signature[k]), set()).update({(g1, g2), (g2, g1)})
    if _function_types(g1, g2, geom_type) in HAS_FUNCTION:
      found.append(((signature_max, 0, k), *_ordered(g1, g2, geom_type), k))

  geoms_of = [np.flatnonzero(geom_bodyid == b).tolist() for b in range(nbody)]
  for b1 in range(nbody):
    for b2 in range(b1 + 1, nbody):
      if not geoms_of[b1] or not geoms_of[b2]:
        continue
      signature = (b1 << 16) + b2
      if signature in excluded or _skip_body_pair(b1, b2, weld, parent, dofnum, filterparent):
        continue
      explicit = merged.get(signature, set())
      # every body with geoms has a BVH, so the midphase runs unless both have one geom
      sorted_by_geom = midphase and not (len(geoms_of[b1]) == 1 and len(geoms_of[b2]) == 1)
      for n, (g1, g2) in enumerate((g1, g2) for g1 in geoms_of[b1] for g2 in geoms_of[b2]):
        if (g1, g2) in explicit:
          continue
        if not (contype[g1] & conaffinity[g2] or contype[g2] & conaffinity[g1]):
          continue
        if _function_types(g1, g2, geom_type) not in HAS_FUNCTION:
          continue
        o1, o2 = _ordered(g1, g2, geom_type)
        key = (signature, 1, o1, o2) if sorted_by_geom else (signature, 1, n)
        found.append((key, o1, o2, -1))

  found.sort(key=lambda item: item[0])
  known = (SUPPORTED | MULTI) - (frozenset() if convex else CONVEX | MULTI | HFIELD)
  supported = [_function_types(g1, g2, geom_type) in known for _, g1, g2, _ in found]
  keep = [item for item, ok in zip(found, supported) if ok]
  dropped = [item for item, ok in zip(found, supported) if not ok]
  if dropped:
    kinds = sorted({_function_types(g1, g2, geom_type) for _, g1, g2, _ in dropped})
    names = lambda ks: ", ".join(f"{GeomType(a).name.lower()}-{GeomType(b).name.lower()}"
                                 for a, b in ks)
    missing = [k for k in kinds if k not in SUPPORTED | MULTI]
    off = [k for k in kinds if k in CONVEX | HFIELD | MULTI and not convex]
    why = ([f"flexor's narrow phase does not support {names(missing)} yet"] if missing else []) + (
        [f"GJK/EPA for {names(off)} is off (convex=False)"] if off else [])
    warnings.warn(f"{len(dropped)} geom pair(s) that MuJoCo would collide are left out: "
                  + "; ".join(why), stacklevel=2)
  geom = np.array([(g1, g2) for _, g1, g2, _ in keep], dtype=np.int32).reshape(-1, 2)
  pairid = np.array([k for _, _, _, k in keep], dtype=np.int32)
  return dict(collision_geom=geom, collision_pairid=pairid, ncollision=len(keep))
