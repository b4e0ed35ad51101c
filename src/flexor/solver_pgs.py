"""MuJoCo's PGS solver (``solver="PGS"``, ``mj_solPGS`` in ``engine_solver.c``): projected
Gauss-Seidel on the dual of the constraint problem.

The dual problem is min 1/2 f' AR f + f' b over the forces f, with AR = J M^-1 J' + R and
b = J qacc_smooth - aref, subject to |f| <= frictionloss on friction-loss rows, f >= 0 on
limits and pyramidal or frictionless contacts, and the friction cone on elliptic contacts. A
sweep visits the constraint blocks (a row, or an elliptic contact's rows) one at a time:

* a row: its 1-D minimum, clamped to its bounds;
* an elliptic contact: a step along its force (a "ray": the normal and friction scaled
  together) or, without normal force, a 1-D step in the normal; then, at the new normal force,
  the friction's minimum on the friction ellipsoid (a QCQP, shared with ``flexor.noslip``);

and a block's update is undone where it raises the cost. As MuJoCo does, per constraint island:

* each sweep visits the island's blocks in a shuffled order: a Fisher-Yates shuffle, carried
  from sweep to sweep, driven by a PCG32 generator seeded afresh for every solve (its raw
  numbers are computed once, on the host);
* each sweep starts from a Nesterov extrapolation of the last two sweeps' forces, projected
  onto the bounds and cones, with O'Donoghue and Candes' restart where the sweep's correction
  opposes the extrapolation;
* the sweeps stop when an island's scaled improvement falls under ``opt.tolerance``.

A step's residual AR_b f + b_b is read from the acceleration qacc(f) = qacc_smooth +
M^-1 J' f (the carry, updated after each block), so it costs O(nv) per row, not O(nefc). The
sweeps run on the active rows gathered into a fixed number of slots (``active_capacity``; a
world with more is solved again on all rows), so the per-sweep work (extrapolation, the
shuffle, M^-1 J') grows with the rows in use, not with the layout. The sweeps are
``lax.while_loop``s and are not differentiated: ``flexor.solver`` gives the solution the
implicit derivative of the primal problem's optimum, which PGS converges to.

The forces agree with MuJoCo's to round-off after any number of sweeps. efc_state is the dual
state of the forces (``noslip.dual_state``); the QCQP puts an elliptic contact's friction on its
cone's boundary, where the zone (cone or satisfied) can differ from MuJoCo's in the last bit.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from flexor.constraint import active_capacity, dof_trees, islands, row_constraints, rows_of
from flexor.math import MINVAL, cho_solve, cholesky, compact, run_if
from flexor.noslip import cost_change, tangents
from flexor.types import ConstraintType, Data, DisableBit, Model

# a row's kind: how its block's update is bounded
_EQUALITY, _FRICTION, _ONE_SIDED, _ELLIPTIC = range(4)


def _layout(m: Model) -> tuple[np.ndarray, np.ndarray]:
  """(kind (njmax,), width (njmax,)) of the row layout: a block per row, but one per elliptic
  contact, whose width is at its normal row and 0 at its other rows (numpy)."""
  kind = np.full(m.njmax, _ONE_SIDED)
  kind[rows_of(m, ConstraintType.EQUALITY)] = _EQUALITY
  kind[rows_of(m, ConstraintType.FRICTION_DOF, ConstraintType.FRICTION_TENDON)] = _FRICTION
  width = np.ones(m.njmax, int)
  ell = rows_of(m, ConstraintType.CONTACT_ELLIPTIC)
  kind[ell] = _ELLIPTIC
  width[ell] = np.where(m.efc_rowsub[ell] == 0,
                        [np.count_nonzero(m.efc_rowid[ell] == m.efc_rowid[r]) for r in ell], 0)
  return kind, width


@functools.lru_cache(maxsize=8)
def _pcg32(n: int) -> np.ndarray:
  """The first n numbers (uint32) of MuJoCo's PCG32 generator after its seeding (state 0,
  increment 1, one number drawn and dropped)."""
  state, out = 0, np.empty(n + 1, np.uint32)
  for k in range(n + 1):
    old = state
    state = (old * 6364136223846793005 + 1) & 0xFFFFFFFFFFFFFFFF
    xorshifted = (((old >> 18) ^ old) >> 27) & 0xFFFFFFFF
    rot = old >> 59
    out[k] = ((xorshifted >> rot) | (xorshifted << ((-rot) & 31))) & 0xFFFFFFFF
  return out[1:]


class _Rows(NamedTuple):
  """One world's dual problem on a set of rows, in layout order: all of them, or the active
  ones gathered (traced, without derivatives)."""

  J: jax.Array          # (n, nv)
  W: jax.Array          # (n, nv) (M^-1 J')': the acceleration of a unit force on each row
  aref: jax.Array       # (n,)
  R: jax.Array          # (n,)
  floss: jax.Array      # (n,)
  friction: jax.Array   # (n, 5) the contact's friction, at an elliptic contact's normal row
  kind: jax.Array       # (n,) int
  width: jax.Array      # (n,) int: the block's rows at its first row, 0 elsewhere and inactive
  island: jax.Array     # (n,) int
  active: jax.Array     # (n,) bool
  force: jax.Array      # (n,) the warm start


def _shuffle(order: jax.Array, start: jax.Array, count: jax.Array, sweep: jax.Array,
             numbers: jax.Array) -> jax.Array:
  """MuJoCo's Fisher-Yates shuffle of each island's blocks, order[start:start + count] for
  each island (count,), at sweep ``sweep``: the island's generator has drawn count - 1
  numbers in each earlier sweep."""
  base = sweep * jnp.maximum(count - 1, 0)
  drop = order.shape[0]

  def swap(s, order):
    i = count - 1 - s
    valid = i >= 1
    r = numbers[jnp.where(valid, base + s, 0)]
    j = (r % jnp.maximum(i + 1, 1).astype(jnp.uint32)).astype(i.dtype)
    at_i, at_j = start + i, start + j
    a, b = order[jnp.where(valid, at_i, 0)], order[jnp.where(valid, at_j, 0)]
    order = order.at[jnp.where(valid, at_i, drop)].set(b, mode="drop")
    return order.at[jnp.where(valid, at_j, drop)].set(a, mode="drop")

  return jax.lax.fori_loop(0, jnp.max(count) - 1, swap, order)


def _block_update(r: _Rows, force: jax.Array, qacc: jax.Array, rows: jax.Array,
                  mask: jax.Array, kind: jax.Array,
                  cones: bool) -> tuple[jax.Array, jax.Array, jax.Array]:
  """One block's new forces (width,), the cost's change and qacc's change (nv,)."""
  Jb = r.J[rows] * mask[:, None]
  Wb = r.W[rows] * mask[:, None]
  R = jnp.where(mask, r.R[rows], 0.0)
  A = Jb @ Wb.T + jnp.diag(R)
  old = jnp.where(mask, force[rows], 0.0)
  res = jnp.where(mask, Jb @ qacc - r.aref[rows] + R * old, 0.0)
  ainv = 1 / A[0, 0]
  first = old[0] - res[0] * ainv
  floss = r.floss[rows[0]]
  first = jnp.where(kind == _FRICTION, jnp.clip(first, -floss, floss),
                    jnp.where(kind == _EQUALITY, first, jnp.maximum(first, 0.0)))
  new = jnp.zeros_like(old).at[0].set(first)
  a_cost = A.at[0, 0].set(1 / ainv)
  if cones:
    new = jnp.where(kind == _ELLIPTIC, _cone_update(A, res, old, mask, r.friction[rows[0]]), new)
    a_cost = jnp.where(kind == _ELLIPTIC, A, a_cost)
  new, change = cost_change(a_cost, new, old, res)
  return new, change, (new - old) @ Wb


def _cone_update(A: jax.Array, res: jax.Array, old: jax.Array, mask: jax.Array,
                 friction: jax.Array) -> jax.Array:
  """An elliptic contact's forces (width,): a ray step (a normal step where it has no normal
  force), then its friction at the new normal force."""
  normal = jnp.maximum(old[0] - res[0] * (1 / A[0, 0]), 0.0)
  free = old[0] < MINVAL
  denom = old @ A @ old
  ray = denom >= MINVAL
  x = -(old @ res) / jnp.where(ray, denom, 1.0)
  x = jnp.where(old[0] + x * old[0] < 0, -old[0] / jnp.where(free, 1.0, old[0]), x)
  stepped = jnp.where(ray, old + x * old, old)
  new = jnp.where(free, jnp.zeros_like(old).at[0].set(normal), stepped)
  res_t = res[1:] + A[1:, 0] * (new[0] - old[0])
  t = tangents(A[1:, 1:], res_t, old[1:], new[0], friction[:len(mask) - 1], mask[1:])
  return new.at[1:].set(jnp.where(mask[1:], t, 0.0))


def _block_rows(r: _Rows, head: jax.Array, width: int) -> tuple[jax.Array, jax.Array]:
  """(rows (..., width), mask) of the blocks starting at rows ``head`` (...,)."""
  offset = jnp.arange(width).reshape((1,) * jnp.ndim(head) + (width,))
  mask = offset < r.width[head][..., None]
  rows = jnp.where(mask, head[..., None] + offset, head[..., None])
  return rows, mask


def _project(r: _Rows, force: jax.Array, moved: jax.Array, width: int) -> jax.Array:
  """force with the rows ``moved`` (n,) projected onto their bounds and cones (MuJoCo's
  projection after the Nesterov extrapolation)."""
  out = jnp.where(r.kind == _FRICTION, jnp.clip(force, -r.floss, r.floss),
                  jnp.where(r.kind == _ONE_SIDED, jnp.maximum(force, 0.0), force))
  if width > 1:
    rows, mask = _block_rows(r, jnp.arange(force.shape[0]), width)
    cone = (r.kind == _ELLIPTIC) & (r.width > 1)
    f = force[rows]                                              # (n, width)
    mu = r.friction[:, :width - 1]
    s = jnp.sum(jnp.where(mask[:, 1:], f[:, 1:] ** 2 / jnp.where(mask[:, 1:], mu * mu, 1.0),
                          0.0), axis=1)
    n2 = f[:, 0] ** 2
    scale = jnp.where(s > n2, jnp.sqrt(n2 / jnp.maximum(MINVAL, s)), 1.0)
    f = jnp.where(f[:, :1] < 0, 0.0, f.at[:, 1:].multiply(scale[:, None]))
    drop = force.shape[0]
    out = out.at[jnp.where(mask & cone[:, None], rows, drop)].set(f, mode="drop")
  return jnp.where(moved, out, force)


def _solve(m: Model, r: _Rows, qacc_smooth: jax.Array, scale: jax.Array, ntree: int,
           width: int) -> jax.Array:
  """The forces (n,) of PGS on rows r, from their warm start; scale (ntree,) scales each
  island's improvement."""
  n = r.J.shape[0]
  force = r.force
  # each island's blocks, in row order, then shuffled in place
  key = jnp.where(r.width > 0, r.island * n + jnp.arange(n), ntree * n)
  order = jnp.argsort(key)
  count = jax.ops.segment_sum((r.width > 0).astype(jnp.int32), r.island, num_segments=ntree)
  start = jnp.cumsum(count) - count
  total = jnp.sum(count)
  numbers = jnp.asarray(_pcg32(max(1, m.opt.iterations * (n - 1))))
  cones = width > 1

  def iteration(state):
    it, force, prev, nesterov, order, done = state
    beta = jnp.where((it > 0) & ~done, (nesterov - 1) / (nesterov + 2.0), 0.0)
    beta = jnp.maximum(beta, 0.0)[r.island]
    extrapolated = _project(r, force + beta * (force - prev), beta > 0, width)
    prev = jnp.where(done[r.island], prev, force)
    force = jnp.where(r.active, extrapolated, 0.0)
    momentum = force
    order = _shuffle(order, start, count, it, numbers)

    def sweep(k, carry):
      force, qacc, improvement = carry
      head = order[k]
      rows, mask = _block_rows(r, head, width)
      island = r.island[head]
      new, change, dq = _block_update(r, force, qacc, rows, mask, r.kind[head], cones)
      go = ~done[island]
      force = force.at[jnp.where(mask & go, rows, n)].set(new, mode="drop")
      return (force, qacc + jnp.where(go, dq, 0.0),
              improvement.at[island].add(jnp.where(go, -change, 0.0)))

    improvement = jnp.zeros(ntree, force.dtype)
    force, _, improvement = jax.lax.fori_loop(
        0, total, sweep, (force, qacc_smooth + force @ r.W, improvement))
    dot = jax.ops.segment_sum((force - momentum) * (momentum - prev), r.island,
                              num_segments=ntree)
    nesterov = jnp.where((it > 0) & (dot < 0), 0, nesterov + 1)
    done = done | (improvement * scale < m.opt.tolerance)
    return it + 1, force, prev, nesterov, order, done

  state = (0, force, force, jnp.zeros(ntree, jnp.int32), order, count == 0)
  state = jax.lax.while_loop(lambda s: (s[0] < m.opt.iterations) & ~jnp.all(s[5]),
                             iteration, state)
  return state[1]


def _islands(m: Model, d: Data) -> tuple[jax.Array, jax.Array, int]:
  """(row labels (njmax,), dof labels (nv,), ntree): the constraint islands (``islands``), with
  a row whose Jacobian is zero (a connect's row across a slider) in its constraint's island, as
  MuJoCo's efc_tree puts it: PGS visits it in that island's sweeps."""
  dof_tree, ntree = dof_trees(m)
  row, dof = islands(dof_tree, ntree, d.efc_J, d.efc_active)
  constraint, nconstraint = row_constraints(m)
  touches = jnp.any(d.efc_J != 0, axis=1)
  label = jax.ops.segment_min(jnp.where(touches, row, ntree), constraint,
                              num_segments=nconstraint)[constraint]
  return jnp.where(touches, row, label % ntree), dof, ntree


def _capacity(kind: np.ndarray) -> int | None:
  """How many rows the sweeps carry (static), or None for all: the equality and friction-loss
  rows, always active, and ``active_capacity`` of the others."""
  always = int(np.count_nonzero((kind == _EQUALITY) | (kind == _FRICTION)))
  conditional = active_capacity(len(kind) - always)
  return None if conditional is None else always + conditional


def solve_pgs(m: Model, d: Data, warm: jax.Array | None) -> jax.Array:
  """efc_force (njmax,) by MuJoCo's PGS from d's constraint rows (after make_constraint and
  reference_constraint), without derivatives. It starts from ``warm`` (njmax,), the forces the
  primal cost gives qacc_warmstart, unless their dual cost is positive; from zero where
  ``warm`` is None (warmstart disabled)."""
  d, warm = jax.lax.stop_gradient((d, warm))
  layout_kind, layout_width = _layout(m)
  max_width = int(layout_width.max(initial=1))
  active = d.efc_active
  # an elliptic contact's row alone (an adhesive contact in its gap) is a frictionless row
  single = (layout_kind == _ELLIPTIC) & (d.efc_type != ConstraintType.CONTACT_ELLIPTIC)
  kind = jnp.where(single, _ONE_SIDED, layout_kind)
  width = jnp.where(active, jnp.where(single, 1, layout_width), 0)
  friction = jnp.zeros((m.njmax, 5), d.qM.dtype)
  heads = np.flatnonzero((layout_kind == _ELLIPTIC) & (layout_width > 0))
  if len(heads):
    friction = friction.at[heads].set(d.contact_friction[m.efc_rowid[heads]])
  row_island, dof_island, ntree = _islands(m, d)
  factor = cholesky(d.qM)

  force = jnp.zeros(m.njmax, d.qM.dtype)
  if warm is not None:
    force = jnp.where(active, warm, 0.0)
    jf = d.efc_J.T @ force
    b = d.efc_J @ d.qacc_smooth - d.efc_aref
    dual_cost = force @ b + 0.5 * (jf @ cho_solve(factor, jf)
                                   + force @ (d.efc_R * force))
    force = jnp.where(dual_cost > 0, 0.0, force)

  # MuJoCo 4 scales an island's improvement by the trace of its block of M (as noslip's)
  if m.opt.disabled(DisableBit.ISLAND):
    scale = jnp.full(ntree, 1 / (m.stat_meaninertia * max(1, m.nv)), d.qM.dtype)
  else:
    scale = 1 / jnp.maximum(jax.ops.segment_sum(jnp.diagonal(d.qM), dof_island,
                                                num_segments=ntree), MINVAL)
  columns = (d.efc_J, d.efc_aref, d.efc_R, d.efc_frictionloss, friction, kind, width,
             row_island, active, force)

  def solve(idx: jax.Array | slice, valid: jax.Array | bool, columns: tuple, factor: jax.Array,
            qacc_smooth: jax.Array, scale: jax.Array) -> jax.Array:
    """The forces of the rows idx (all, or the active ones padded: valid says which)."""
    J, aref, R, floss, fr, kd, wd, isl, act, f = (c[idx] for c in columns)
    W = cho_solve(factor, J.T).T
    rows = _Rows(J, W, aref, R, floss, fr, kd, jnp.where(valid, wd, 0), isl, act & valid,
                 jnp.where(valid, f, 0.0))
    return _solve(m, rows, qacc_smooth, scale, ntree, max_width)

  args = (columns, factor, d.qacc_smooth, scale)
  capacity = _capacity(layout_kind)
  if capacity is None:
    return solve(slice(None), True, *args)
  pick, _ = compact(active, capacity, 0)
  nactive = jnp.sum(active)
  valid = jnp.arange(capacity) < nactive
  on_active = jnp.zeros(m.njmax, d.qM.dtype).at[jnp.where(valid, pick, m.njmax)].set(
      solve(pick, valid, *args), mode="drop")
  return run_if(nactive > capacity, on_active, lambda *args: solve(slice(None), True, *args),
                *args)
