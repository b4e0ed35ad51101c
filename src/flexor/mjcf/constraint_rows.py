"""The static layout of contact slots and constraint rows (host side, numpy).

MuJoCo instantiates constraint rows anew at every step, only for what is active. Under ``jit``
shapes are fixed, so flexor allocates a row for everything that *can* become active, once, in
MuJoCo's order (equality, friction loss, limits, contacts), and the simulation marks the active
ones (``Data.efc_active``). Which elements can produce rows is known from the model's structure,
with one exception decided from compile-time values: a dof or tendon gets a friction-loss row
only if its ``frictionloss`` is positive here (as MuJoCo, which skips zero friction loss).

Contacts: the narrow phase writes every contact a candidate pair can make into its own slot
(``nconslot`` of them). Without ``<size nconmax>`` those are Data's contact slots, each with its
rows. With it, the contacts of each condim are compacted in order into at most nconmax slots
(``contact_groups``), so a large scene's solver sees rows for the contacts that can exist at
once, not for every pair. MuJoCo's order is kept within each condim, and so overall where all
contacts share one condim (the usual case). A model without ``<size nconmax>`` whose slots would
need more rows than the compiler allows (``layout``'s ``max_rows``) gets the largest cap that fits.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from flexor.mjcf import contact_pairs
from flexor.types import (ConeType, ConstraintType, DisableBit, EnableBit, EqType, GeomType,
                          JointType)

def contact_dims(f: dict[str, Any]) -> np.ndarray:
  """condim of each candidate pair (ncollision,): the pair's own, else as mj_contactParam."""
  geom = np.asarray(f["collision_geom"], dtype=np.int64).reshape(-1, 2)
  pairid = np.asarray(f["collision_pairid"], dtype=np.int64)
  condim, priority = np.asarray(f["geom_condim"]), np.asarray(f["geom_priority"])
  c1, c2 = condim[geom[:, 0]], condim[geom[:, 1]]
  p1, p2 = priority[geom[:, 0]], priority[geom[:, 1]]
  mixed = np.where(p1 > p2, c1, np.where(p1 < p2, c2, np.maximum(c1, c2)))
  pair_dim = np.asarray(f["pair_dim"])
  return np.where(pairid >= 0, pair_dim[np.maximum(pairid, 0)] if len(pair_dim) else 0,
                  mixed).astype(np.int32)


def contact_rows(dim: np.ndarray, cone: int) -> np.ndarray:
  """Constraint rows of contacts with ``dim`` (n,) dimensions (n,)."""
  dim = np.asarray(dim)
  return np.where(dim == 1, 1, 2 * (dim - 1) if cone == ConeType.PYRAMIDAL else dim)


class ContactGroup(NamedTuple):
  """The Data contact slots [start, start + size) of one condim, filled in order from the
  narrow-phase slots ``slots`` (n,) of that condim."""
  dim: int
  start: int
  size: int
  slots: np.ndarray


def contact_groups(dims: np.ndarray, connum: np.ndarray, cap: int) -> list[ContactGroup] | None:
  """How Data's contact slots are filled: None where each narrow-phase slot is its own Data slot
  (no ``<size nconmax>``, ``cap`` < 0, or no condim with more slots than ``cap``), else one group
  per condim, ascending, of at most ``cap`` slots.

  Args:
    dims: condim of each candidate pair (ncollision,).
    connum: narrow-phase slots of each candidate pair (ncollision,).
    cap: ``<size nconmax>`` (-1: none).
  """
  slot_dim = np.repeat(np.asarray(dims), np.asarray(connum))
  kinds, counts = np.unique(slot_dim, return_counts=True)
  if cap < 0 or not np.any(counts > cap):
    return None
  groups, start = [], 0
  for dim, count in zip(kinds.tolist(), counts.tolist()):
    size = min(count, cap)
    groups.append(ContactGroup(dim, start, size, np.flatnonzero(slot_dim == dim)))
    start += size
  return groups


def hfield_window(f: dict[str, Any], opt: Any, k: int) -> tuple[int, int] | None:
  """contact_pairs.hfield_window of candidate ``k`` if its first geom is a height field, else
  None; for the margin and gap the model compiled with (a larger one set later is not covered)."""
  g1, g2 = (int(g) for g in np.asarray(f["collision_geom"])[k])
  if f["geom_type"][g1] != GeomType.HFIELD:
    return None
  pair = int(f["collision_pairid"][k])
  value = lambda name, i: float(np.asarray(f[name])[i])
  if pair >= 0:
    margin, gap = value("pair_margin", pair), value("pair_gap", pair)
  else:
    margin = value("geom_margin", g1) + value("geom_margin", g2)
    gap = value("geom_gap", g1) + value("geom_gap", g2)
  if opt.enabled(EnableBit.OVERRIDE):
    margin = float(opt.o_margin)
  h = int(f["geom_dataid"][g1])
  return contact_pairs.hfield_window(np.asarray(f["hfield_size"])[h], f["hfield_nrow"][h],
                                     f["hfield_ncol"][h], value("geom_rbound", g2) + margin + gap)


def _other_rows(f: dict[str, Any]) -> list[tuple[int, int, int]]:
  """(type, id, sub) of the rows before the contacts', in MuJoCo's order: equality, friction
  loss, limits."""
  rows: list[tuple[int, int, int]] = []
  eq_size = {EqType.CONNECT: 3, EqType.WELD: 6, EqType.JOINT: 1, EqType.TENDON: 1}
  for i, (kind, active) in enumerate(zip(f["eq_type"], f["eq_active0"])):
    if active and kind in eq_size:
      rows += [(ConstraintType.EQUALITY, i, k) for k in range(eq_size[kind])]
  for i in np.flatnonzero(np.asarray(f["dof_frictionloss"]) > 0):
    rows.append((ConstraintType.FRICTION_DOF, i, 0))
  for i in np.flatnonzero(np.asarray(f["tendon_frictionloss"]) > 0):
    rows.append((ConstraintType.FRICTION_TENDON, i, 0))
  for i in np.flatnonzero(np.asarray(f["jnt_limited"])):
    kind = f["jnt_type"][i]
    if kind in (JointType.HINGE, JointType.SLIDE):
      rows += [(ConstraintType.LIMIT_JOINT, i, 0), (ConstraintType.LIMIT_JOINT, i, 1)]
    elif kind == JointType.BALL:
      rows.append((ConstraintType.LIMIT_JOINT, i, 0))
  for i in np.flatnonzero(np.asarray(f["tendon_limited"])):
    rows += [(ConstraintType.LIMIT_TENDON, i, 0), (ConstraintType.LIMIT_TENDON, i, 1)]
  return rows


def fitting_cap(dims: np.ndarray, connum: np.ndarray, cone: int, other_rows: int,
                max_rows: int) -> int:
  """The largest ``<size nconmax>`` (at least 1) whose layout has at most ``max_rows`` rows,
  ``other_rows`` of them not contacts' (equality, friction loss, limits)."""
  kinds, counts = np.unique(np.repeat(dims, connum), return_counts=True)
  per_contact = contact_rows(kinds, cone)
  rows = lambda cap: other_rows + int(np.sum(np.minimum(counts, cap) * per_contact))
  lo, hi = 1, int(counts.max(initial=1))
  while lo < hi:  # rows(cap) grows with cap: the last cap that fits
    mid = (lo + hi + 1) // 2
    lo, hi = (mid, hi) if rows(mid) <= max_rows else (lo, mid - 1)
  return lo


def layout(f: dict[str, Any], opt: Any, max_rows: int | None = None) -> dict[str, Any]:
  """The contact slot and constraint row tables of Model (see its field comments) and njmax.

  Args:
    f: mjModel-named arrays of the model, with the candidate tables of ``contact_pairs``.
    opt: the model's Option (its cone decides the rows of a frictional contact).
    max_rows: where the model sets no ``<size nconmax>`` and a slot for every contact its
      candidates can make would need more rows than this, the contacts are capped as by the
      largest nconmax that fits (``fitting_cap``). ``njmax_uncapped`` gives the rows without a
      cap.
  """
  geom = np.asarray(f["collision_geom"], dtype=np.int64).reshape(-1, 2)
  geom_type = np.asarray(f["geom_type"])
  windows = [hfield_window(f, opt, k) for k in range(len(geom))]
  multiccd = not opt.disabled(DisableBit.MULTICCD)
  connum = np.array([contact_pairs.max_contacts(geom_type[a], geom_type[b], w, multiccd)
                     for (a, b), w in zip(geom, windows)], dtype=np.int32)
  conadr = (np.cumsum(connum) - connum).astype(np.int32)
  dims = contact_dims(f)
  cap = int(f.get("size_nconmax", -1))
  other_rows = _other_rows(f)
  full_rows = len(other_rows) + int(np.sum(connum * contact_rows(dims, opt.cone)))
  if cap < 0 and max_rows is not None and full_rows > max_rows:
    cap = fitting_cap(dims, connum, opt.cone, len(other_rows), max_rows)
  groups = contact_groups(dims, connum, cap)
  if groups is None:
    slot_dim = np.repeat(dims, connum)
  else:
    slot_dim = np.concatenate([np.full(g.size, g.dim) for g in groups])

  rows = list(other_rows)
  for slot, (dim, n) in enumerate(zip(slot_dim.tolist(),
                                      contact_rows(slot_dim, opt.cone).tolist())):
    kind = (ConstraintType.CONTACT_FRICTIONLESS if dim == 1 else
            ConstraintType.CONTACT_PYRAMIDAL if opt.cone == ConeType.PYRAMIDAL else
            ConstraintType.CONTACT_ELLIPTIC)
    rows += [(kind, slot, k) for k in range(n)]
  table = np.array(rows, dtype=np.int32).reshape(-1, 3)
  return dict(collision_dim=dims, collision_conadr=conadr, collision_connum=connum,
              collision_window=np.array([w or (0, 0) for w in windows], np.int32).reshape(-1, 2),
              nconslot=int(connum.sum()), nconmax=len(slot_dim), size_nconmax=cap,
              njmax_uncapped=full_rows,
              njmax=len(table), efc_rowtype=table[:, 0], efc_rowid=table[:, 1],
              efc_rowsub=table[:, 2])
