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
sweeps are ``lax.while_loop``s and are not differentiated: ``flexor.solver`` gives the solution
the implicit derivative of the primal problem's optimum, which PGS converges to.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from flexor.constraint import dof_trees, islands, rows_of
from flexor.math import MINVAL
from flexor.noslip import cost_change, tangents
from flexor.types import ConstraintType, Data, DisableBit, Model

# a block's kind: how its update is bounded
_EQUALITY, _FRICTION, _ONE_SIDED, _ELLIPTIC = range(4)


class _Blocks(NamedTuple):
  """The constraint blocks of the row layout, in row order (MuJoCo's efc order; numpy)."""

  rows: np.ndarray   # (nblock, width) the block's rows, padded with its first
  mask: np.ndarray   # (nblock, width) bool: real rows
  kind: np.ndarray   # (nblock,) _EQUALITY, _FRICTION, _ONE_SIDED or _ELLIPTIC


def _blocks(m: Model) -> _Blocks:
  """A block per row, but one per elliptic contact (its normal row first)."""
  kind = np.full(m.njmax, _ONE_SIDED)
  kind[rows_of(m, ConstraintType.EQUALITY)] = _EQUALITY
  kind[rows_of(m, ConstraintType.FRICTION_DOF, ConstraintType.FRICTION_TENDON)] = _FRICTION
  ell = rows_of(m, ConstraintType.CONTACT_ELLIPTIC)
  kind[ell] = _ELLIPTIC
  heads = np.setdiff1d(np.arange(m.njmax), ell[m.efc_rowsub[ell] > 0])
  dims = np.ones(len(heads), int)
  is_cone = kind[heads] == _ELLIPTIC
  dims[is_cone] = [np.count_nonzero(m.efc_rowid[ell] == m.efc_rowid[h]) for h in heads[is_cone]]
  width = int(dims.max(initial=1))
  mask = np.arange(width) < dims[:, None]
  rows = np.where(mask, heads[:, None] + np.arange(width), heads[:, None])
  return _Blocks(rows, mask, kind[heads])


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


class _Problem(NamedTuple):
  """One world's dual problem (traced, without derivatives)."""

  J: jax.Array             # (njmax, nv)
  MinvJt: jax.Array        # (nv, njmax) M^-1 J'
  aref: jax.Array          # (njmax,)
  R: jax.Array             # (njmax,)
  floss: jax.Array         # (njmax,)
  friction: jax.Array      # (njmax, 5) an elliptic contact row's contact friction
  island: jax.Array        # (njmax,) int: each row's island
  qacc_smooth: jax.Array   # (nv,)


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


def _block_update(blocks: _Blocks, p: _Problem, force: jax.Array, qacc: jax.Array,
                  rows: jax.Array, mask: jax.Array, kind: jax.Array):
  """One block's new forces (width,), the cost's change and qacc's change (nv,)."""
  Jb = p.J[rows] * mask[:, None]
  Wb = p.MinvJt[:, rows] * mask[None, :]
  R = jnp.where(mask, p.R[rows], 0.0)
  A = Jb @ Wb + jnp.diag(R)
  old = jnp.where(mask, force[rows], 0.0)
  res = jnp.where(mask, Jb @ qacc - p.aref[rows] + R * old, 0.0)
  ainv = 1 / A[0, 0]
  first = old[0] - res[0] * ainv
  floss = p.floss[rows[0]]
  first = jnp.where(kind == _FRICTION, jnp.clip(first, -floss, floss),
                    jnp.where(kind == _EQUALITY, first, jnp.maximum(first, 0.0)))
  new = jnp.zeros_like(old).at[0].set(first)
  a_cost = A.at[0, 0].set(1 / ainv)
  if blocks.rows.shape[1] > 1:
    new = jnp.where(kind == _ELLIPTIC, _cone_update(A, res, old, mask, p.friction[rows[0]]), new)
    a_cost = jnp.where(kind == _ELLIPTIC, A, a_cost)
  new, change = cost_change(a_cost, new, old, res)
  return new, change, Wb @ (new - old)


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


def _project(blocks: _Blocks, p: _Problem, force: jax.Array, moved: jax.Array) -> jax.Array:
  """force with the rows ``moved`` (njmax,) projected onto their bounds and cones (MuJoCo's
  projection after the Nesterov extrapolation)."""
  kind = np.full(force.shape[0], _EQUALITY)
  kind[blocks.rows[blocks.mask]] = np.repeat(blocks.kind, blocks.mask.sum(1))
  out = jnp.where(kind == _FRICTION, jnp.clip(force, -p.floss, p.floss),
                  jnp.where(kind == _ONE_SIDED, jnp.maximum(force, 0.0), force))
  cone = blocks.kind == _ELLIPTIC
  if np.any(cone):
    rows, mask = blocks.rows[cone], blocks.mask[cone]
    f = force[rows]                                              # (ncone, width)
    mu = p.friction[rows[:, 0], :rows.shape[1] - 1]
    s = jnp.sum(jnp.where(mask[:, 1:], f[:, 1:] ** 2 / jnp.where(mask[:, 1:], mu * mu, 1.0),
                          0.0), axis=1)
    n2 = f[:, 0] ** 2
    scale = jnp.where(s > n2, jnp.sqrt(n2 / jnp.maximum(MINVAL, s)), 1.0)
    f = jnp.where(f[:, :1] < 0, 0.0, f.at[:, 1:].multiply(scale[:, None]))
    out = out.at[rows[mask]].set(f[mask])
  return jnp.where(moved, out, force)


def _islands(m: Model, d: Data) -> tuple[jax.Array, jax.Array, int]:
  """(row labels (njmax,), dof labels (nv,), ntree): the constraint islands (``islands``), with
  a row whose Jacobian is zero (a connect's row across a slider) in its constraint's island, as
  MuJoCo's efc_tree puts it: PGS visits it in that island's sweeps."""
  dof_tree, ntree = dof_trees(m)
  row, dof = islands(dof_tree, ntree, d.efc_J, d.efc_active)
  _, constraint = np.unique(np.stack([m.efc_rowtype, m.efc_rowid], -1), axis=0,
                            return_inverse=True)
  constraint = constraint.reshape(-1)
  touches = jnp.any(d.efc_J != 0, axis=1)
  label = jax.ops.segment_min(jnp.where(touches, row, ntree), constraint,
                              num_segments=int(constraint.max(initial=0)) + 1)[constraint]
  return jnp.where(touches, row, label % ntree), dof, ntree


def solve_pgs(m: Model, d: Data, warm: jax.Array | None) -> jax.Array:
  """efc_force (njmax,) by MuJoCo's PGS from d's constraint rows (after make_constraint and
  reference_constraint), without derivatives. It starts from ``warm`` (njmax,), the forces the
  primal cost gives qacc_warmstart, unless their dual cost is positive; from zero where
  ``warm`` is None (warmstart disabled)."""
  d, warm = jax.lax.stop_gradient((d, warm))
  blocks = _blocks(m)
  nblock, width = blocks.rows.shape
  factor = jax.scipy.linalg.cho_factor(d.qM, lower=True)
  cone_heads = blocks.rows[blocks.kind == _ELLIPTIC, 0]
  friction = jnp.zeros((m.njmax, 5), d.qM.dtype)
  if len(cone_heads):
    friction = friction.at[cone_heads].set(d.contact_friction[m.efc_rowid[cone_heads]])
  row_island, dof_island, ntree = _islands(m, d)
  p = _Problem(d.efc_J, jax.scipy.linalg.cho_solve(factor, d.efc_J.T), d.efc_aref, d.efc_R,
               d.efc_frictionloss, friction, row_island, d.qacc_smooth)
  active = d.efc_active
  b = p.J @ p.qacc_smooth - p.aref

  force = jnp.zeros(m.njmax, d.qM.dtype)
  if warm is not None:
    force = jnp.where(active, warm, 0.0)
    dual_cost = force @ b + 0.5 * force @ (p.J @ (p.MinvJt @ force) + p.R * force)
    force = jnp.where(dual_cost > 0, 0.0, force)

  # each island's active blocks, in row order, then shuffled in place
  head = blocks.rows[:, 0]
  kind = jnp.where((blocks.kind == _ELLIPTIC)
                   & (d.efc_type[head] != ConstraintType.CONTACT_ELLIPTIC), _ONE_SIDED,
                   blocks.kind)
  block_active = active[head]
  block_island = row_island[head]
  key = jnp.where(block_active, block_island * nblock + jnp.arange(nblock), ntree * nblock)
  order = jnp.argsort(key)
  count = jax.ops.segment_sum(block_active.astype(jnp.int32), block_island, num_segments=ntree)
  start = jnp.cumsum(count) - count
  total = jnp.sum(count)
  numbers = jnp.asarray(_pcg32(max(1, m.opt.iterations * (nblock - 1))))
  # MuJoCo 4 scales an island's improvement by the trace of its block of M (as noslip's)
  if m.opt.disabled(DisableBit.ISLAND):
    scale = jnp.full(ntree, 1 / (m.stat_meaninertia * max(1, m.nv)), d.qM.dtype)
  else:
    scale = 1 / jnp.maximum(jax.ops.segment_sum(jnp.diagonal(d.qM), dof_island,
                                                num_segments=ntree), MINVAL)
  row_of_island = lambda x: x[row_island]

  def sweep(k, carry):
    force, qacc, improvement, order, done = carry
    block = order[k]
    rows = jnp.asarray(blocks.rows)[block]
    mask = jnp.asarray(blocks.mask)[block] & active[rows]
    island = block_island[block]
    new, change, dq = _block_update(blocks, p, force, qacc, rows, mask, kind[block])
    go = ~done[island]
    force = force.at[jnp.where(mask & go, rows, m.njmax)].set(new, mode="drop")
    return (force, qacc + jnp.where(go, dq, 0.0),
            improvement.at[island].add(jnp.where(go, -change, 0.0)), order, done)

  def iteration(state):
    it, force, prev, nesterov, order, done = state
    beta = jnp.where((it > 0) & ~done, (nesterov - 1) / (nesterov + 2.0), 0.0)
    beta = row_of_island(jnp.maximum(beta, 0.0))
    extrapolated = _project(blocks, p, force + beta * (force - prev), beta > 0)
    prev = jnp.where(row_of_island(done), prev, force)
    force = jnp.where(active, extrapolated, 0.0)
    momentum = force
    order = _shuffle(order, start, count, it, numbers)
    qacc = p.qacc_smooth + p.MinvJt @ force
    improvement = jnp.zeros(ntree, d.qM.dtype)
    force, _, improvement, order, _ = jax.lax.fori_loop(
        0, total, sweep, (force, qacc, improvement, order, done))
    dot = jax.ops.segment_sum((force - momentum) * (momentum - prev), row_island,
                              num_segments=ntree)
    nesterov = jnp.where((it > 0) & (dot < 0), 0, nesterov + 1)
    done = done | (improvement * scale < m.opt.tolerance)
    return it + 1, force, prev, nesterov, order, done

  state = (0, force, force, jnp.zeros(ntree, jnp.int32), order, count == 0)
  state = jax.lax.while_loop(lambda s: (s[0] < m.opt.iterations) & ~jnp.all(s[5]),
                             iteration, state)
  return state[1]
