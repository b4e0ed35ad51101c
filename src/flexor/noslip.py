"""MuJoCo's noslip solver (``mj_solNoSlip`` in ``engine_solver.c``), run after the main solver
when ``opt.noslip_iterations > 0``.

The main solver's soft constraints let contacts slip a little under friction. Noslip keeps the
main solver's equality, limit and normal forces and re-solves the friction forces alone by
projected Gauss-Seidel on the dual problem without regularisation: the Delassus matrix
A = J M^-1 J' (not A + R), so friction holds as hard as its cone allows. A sweep visits, in row
order:

* each dof or tendon friction-loss row: the 1-D minimum clamped to [-frictionloss, frictionloss];
* each pyramidal contact's pairs of opposing edges: a 1-D problem in their difference with their
  sum (so the normal force) kept;
* each elliptic contact's tangential block at its fixed normal force: a QCQP on the friction
  ellipsoid (``mju_QCQP2``, ``mju_QCQP3``, ``mju_QCQP``), undone where it raises the cost.

MuJoCo runs noslip per constraint island and stops an island's sweeps once its scaled
improvement falls under ``opt.noslip_tolerance``; flexor finds the islands (kinematic trees
joined by rows) and stops each one the same way, so the forces agree at any iteration count.
MuJoCo 4 scales an island's improvement by the trace of its mass matrix (3.x used
``meaninertia * nv`` for all). Afterwards qacc = qacc_smooth + M^-1 J' efc_force and efc_state is the dual state
(``mj_dualFinish``, ``dualState``).

Speed: a sweep is a ``lax.scan`` over static blocks of at most 5 rows whose carry is the
acceleration qacc(f) = qacc_smooth + M^-1 J' f, so a block's residual J_b qacc - aref_b costs
O(5 nv) and reverse mode stores one nv-vector per block, not the force vector. Blocks of empty
contact slots and of converged islands take a ``lax.cond`` branch that does nothing (under
``vmap`` both branches run). The sweeps are unrolled, so derivatives are exact for the
iterations run.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from flexor import math
from flexor.constraint import dof_trees, islands, rows_of
from flexor.types import ConstraintState, ConstraintType, Data, Model

_MINVAL = 1e-15   # mjMINVAL
_QCQP_ITERATIONS = 20


class _Blocks(NamedTuple):
  """Static blocks of one kind, in sweep order (numpy)."""

  rows: np.ndarray     # (nblock, n) the rows each block solves for, padded with its first row
  mask: np.ndarray     # (nblock, n) bool: real rows
  normal: np.ndarray   # (nblock,) an elliptic contact's normal row (the first row otherwise)


def _blocks(m: Model) -> tuple[_Blocks, _Blocks, _Blocks]:
  """(friction loss, pyramid edge pairs, elliptic tangents) of the model's row layout."""
  def pack(groups: list[np.ndarray], normals: list[int], n: int) -> _Blocks:
    rows = np.zeros((len(groups), n), np.int64)
    mask = np.zeros((len(groups), n), bool)
    for k, g in enumerate(groups):
      rows[k], mask[k, :len(g)] = g[0], True
      rows[k, :len(g)] = g
    return _Blocks(rows, mask, np.asarray(normals, np.int64).reshape(-1))

  friction = rows_of(m, ConstraintType.FRICTION_DOF, ConstraintType.FRICTION_TENDON)
  pairs, tangents, normals = [], [], []
  for kind, out in ((ConstraintType.CONTACT_PYRAMIDAL, pairs),
                    (ConstraintType.CONTACT_ELLIPTIC, tangents)):
    rows = rows_of(m, kind)
    for first in rows[m.efc_rowsub[rows] == 0]:
      n = np.count_nonzero(m.efc_rowid[rows] == m.efc_rowid[first])
      if kind == ConstraintType.CONTACT_PYRAMIDAL:
        out.extend(first + np.arange(2 * k, 2 * k + 2) for k in range(n // 2))
      elif n > 1:
        out.append(first + np.arange(1, n))
        normals.append(first)
  width = max((len(t) for t in tangents), default=1)
  return (pack([np.array([r]) for r in friction], list(friction), 1),
          pack(pairs, [p[0] for p in pairs], 2), pack(tangents, normals, width))


def _pivots(a: jax.Array) -> jax.Array:
  """(n,) the pivots of a's Cholesky factorisation (the squared diagonal of its factor), from
  Gaussian elimination without pivoting; a (n, n) with n <= 5."""
  pivots = []
  for j in range(a.shape[0]):
    pivots.append(a[j, j])
    col = a[:, j] / jnp.where(a[j, j] == 0, 1.0, a[j, j])
    a = a - jnp.outer(col, a[j]) * (jnp.arange(a.shape[0]) > j)[:, None]
  return jnp.stack(pivots)


def _qcqp(A: jax.Array, b: jax.Array, d: jax.Array, r: jax.Array,
          mask: jax.Array) -> tuple[jax.Array, jax.Array]:
  """min 1/2 x'Ax + x'b subject to sum (x_i / d_i)^2 <= r^2 over the masked entries (n <= 5):
  MuJoCo's mju_QCQP2/3 and mju_QCQP, Newton's method on the multiplier la.

  Returns (x (n,), la != 0); x is 0 where A + la is not positive definite (det < 1e-10 for
  2 and 3 dimensions, a Cholesky pivot < 1e-10 above).
  """
  n = mask.shape[0]
  dim = jnp.sum(mask)
  d = jnp.where(mask, d, 0.0)
  bs, As = b * d, A * d[:, None] * d[None, :]
  on, off = jnp.diag(mask.astype(A.dtype)), jnp.diag((~mask).astype(A.dtype))

  def body(_, state):
    la, v, stop, failed = state
    ala = As + la * on + off
    pivots = _pivots(jax.lax.stop_gradient(ala))
    singular = jnp.where(dim <= 3, jnp.prod(pivots) < 1e-10, jnp.min(pivots) < 1e-10)
    ala = jnp.where(singular, jnp.eye(n, dtype=A.dtype), ala)
    v_new = -jnp.linalg.solve(ala, bs)
    val = v_new @ v_new - r * r
    deriv = -2.0 * v_new @ jnp.linalg.solve(ala, v_new)
    delta = -val / jnp.where(deriv == 0, -1.0, deriv)
    converged = (val < 1e-10) | (delta < 1e-10)
    failed = jnp.where(stop, failed, singular)
    la_new = jnp.where(converged | singular, la, la + delta)
    return (jnp.where(stop, la, la_new), jnp.where(stop, v, v_new),
            stop | converged | singular, failed)

  zero = jnp.zeros((), A.dtype)
  la, v, _, failed = jax.lax.fori_loop(
      0, _QCQP_ITERATIONS, body, (zero, jnp.zeros(n, A.dtype), jnp.zeros((), bool),
                                  jnp.zeros((), bool)))
  return jnp.where(failed, 0.0, v * d), ~failed & (la != 0)


def cost_change(A: jax.Array, force: jax.Array, old: jax.Array, res: jax.Array):
  """MuJoCo's costChange: the cost's change from old to force, and force with old restored
  where it would rise (by more than 1e-10)."""
  delta = force - old
  change = 0.5 * delta @ A @ delta + delta @ res
  rises = change > 1e-10
  return jnp.where(rises, old, force), jnp.where(rises, 0.0, change)


def _pair(A: jax.Array, res: jax.Array, old: jax.Array) -> jax.Array:
  """Two opposing pyramid edges f0 = mid + y, f1 = mid - y at fixed mid: y minimising the cost
  within [-mid, mid]."""
  bc = res - A @ old
  mid = 0.5 * (old[0] + old[1])
  k1 = A[0, 0] + A[1, 1] - A[0, 1] - A[1, 0]
  k0 = mid * (A[0, 0] - A[1, 1]) + bc[0] - bc[1]
  y = jnp.clip(-k0 / jnp.where(k1 < _MINVAL, 1.0, k1), -mid, mid)
  y = jnp.where(k1 < _MINVAL, 0.0, y)
  return jnp.stack([mid + y, mid - y])


def tangents(A: jax.Array, res: jax.Array, old: jax.Array, normal: jax.Array,
             friction: jax.Array, mask: jax.Array) -> jax.Array:
  """An elliptic contact's friction at fixed normal force: the QCQP's minimiser, put on the
  ellipsoid where its constraint is active; zero without normal force."""
  bc = res - A @ old
  v, on_boundary = _qcqp(A, bc, friction, normal, mask)
  s = jnp.sum(jnp.where(mask, v * v / jnp.where(mask, friction * friction, 1.0), 0.0))
  # safe where no normal force, so the square root's derivative stays finite
  ratio = jnp.where(normal < _MINVAL, 1.0, normal * normal / jnp.maximum(_MINVAL, s))
  v = jnp.where(on_boundary, v * jnp.sqrt(ratio), v)
  return jnp.where(normal < _MINVAL, 0.0, v)


class _Problem(NamedTuple):
  """One world's dual problem (traced)."""

  J: jax.Array          # (njmax, nv)
  MinvJt: jax.Array     # (nv, njmax) M^-1 J'
  aref: jax.Array       # (njmax,)
  floss: jax.Array      # (njmax,)
  friction: jax.Array   # (njmax, 5) each contact row's contact friction
  island: jax.Array     # (njmax,) int
  active: jax.Array     # (njmax,) bool


def _sweep(kind: str, blocks: _Blocks, p: _Problem, force: jax.Array, qacc: jax.Array,
           frozen: jax.Array, improvement: jax.Array):
  """One Gauss-Seidel pass over ``blocks``; islands marked ``frozen`` are left as they are.
  Returns (force, qacc, improvement (nisland,))."""
  if not len(blocks.rows):
    return force, qacc, improvement

  def update(qacc, rows, mask, normal, old):
    Jb = p.J[rows] * mask[:, None]
    Wb = p.MinvJt[:, rows] * mask[None, :]
    A = Jb @ Wb
    res = jnp.where(mask, Jb @ qacc - p.aref[rows], 0.0)
    if kind == "friction":
      ainv = 1 / jnp.maximum(_MINVAL, A[0, 0])
      new = jnp.clip(old - res * ainv, -p.floss[rows], p.floss[rows])
      delta = new - old
      change = 0.5 * delta[0] ** 2 / ainv + delta[0] * res[0]
    else:
      # the block's A with MuJoCo's floor on its diagonal (extractBlock)
      A = A + jnp.diag(jnp.where(mask, jnp.maximum(1e-10, jnp.diag(A)) - jnp.diag(A), 0.0))
      if kind == "pair":
        new = _pair(A, res, old)
      else:
        new = tangents(A, res, old, force[normal], p.friction[normal, :len(mask)], mask)
      new, change = cost_change(A, jnp.where(mask, new, 0.0), old, res)
    return new, change, Wb @ (new - old)

  def keep(qacc, rows, mask, normal, old):
    return old, jnp.zeros((), qacc.dtype), jnp.zeros_like(qacc)

  def step(carry, block):
    qacc, improvement = carry
    rows, mask, normal = block
    old = jnp.where(mask, force[rows], 0.0)
    island = p.island[rows[0]]
    # a branch, not a mask: one world skips the empty slots' work (under vmap both run)
    skip = frozen[island] | ~p.active[rows[0]]
    new, change, dq = jax.lax.cond(skip, keep, update, qacc, rows, mask, normal, old)
    return (qacc + dq, improvement.at[island].add(-change)), new

  (qacc, improvement), new = jax.lax.scan(
      step, (qacc, improvement), (blocks.rows, blocks.mask, blocks.normal))
  return force.at[blocks.rows[blocks.mask]].set(new[blocks.mask]), qacc, improvement


def dual_state(m: Model, d: Data, force: jax.Array) -> jax.Array:
  """efc_state (njmax,) int of the forces of a dual solver (MuJoCo's dualState): friction loss
  saturated against its sign (LINEARPOS when force <= -frictionloss), one-sided rows by the sign
  of their force, elliptic contacts by the zone of their force in the cone."""
  kind = m.efc_rowtype
  floss = d.efc_frictionloss
  friction = jnp.where(force <= -floss, ConstraintState.LINEARPOS,
                       jnp.where(force >= floss, ConstraintState.LINEARNEG,
                                 ConstraintState.QUADRATIC))
  one_sided = jnp.where(force <= 0, ConstraintState.SATISFIED, ConstraintState.QUADRATIC)
  state = jnp.where(kind == ConstraintType.EQUALITY, ConstraintState.QUADRATIC, jnp.where(
      (kind == ConstraintType.FRICTION_DOF) | (kind == ConstraintType.FRICTION_TENDON),
      friction, one_sided))
  ell = rows_of(m, ConstraintType.CONTACT_ELLIPTIC)
  if len(ell):
    first = ell - m.efc_rowsub[ell]                  # each row's normal row
    slot = m.efc_rowid[ell]
    fr = d.contact_friction[slot]                    # (n, 5)
    R = d.efc_R
    mu = fr[:, 0] * jnp.sqrt(R[first + 1] / R[first])
    sub = m.efc_rowsub[ell]
    scale = jnp.where(sub == 0, mu, fr[jnp.arange(len(ell)), np.maximum(sub - 1, 0)])
    f = force[ell] / scale
    normal = f[np.searchsorted(ell, first)]
    t2 = jax.ops.segment_sum(jnp.where(sub == 0, 0.0, f * f),
                             np.searchsorted(np.unique(first), first),
                             num_segments=len(np.unique(first)))
    t = jnp.sqrt(t2[np.searchsorted(np.unique(first), first)])
    zone = jnp.where(mu * normal >= t, ConstraintState.SATISFIED,
                     jnp.where(normal + mu * t <= 0, ConstraintState.QUADRATIC,
                               ConstraintState.CONE))
    state = state.at[ell].set(zone)
  return jnp.where(d.efc_active, state, ConstraintState.SATISFIED).astype(jnp.int32)


def noslip(m: Model, d: Data) -> Data:
  """Re-solves the friction forces of d's solution (after ``solver.solve``) and sets efc_force,
  efc_state, qfrc_constraint and qacc as mj_solNoSlip followed by mj_dualFinish."""
  with jax.named_scope("noslip"):
    friction_blocks, pair_blocks, tangent_blocks = _blocks(m)
    factor = math.cholesky(d.qM)
    force = d.efc_force
    contact = np.isin(m.efc_rowtype, (ConstraintType.CONTACT_PYRAMIDAL,
                                      ConstraintType.CONTACT_ELLIPTIC))
    # without contact slots (no geom pair can collide) there is no contact to read
    friction = (d.contact_friction[np.where(contact, m.efc_rowid, 0)] if m.nconmax
                else jnp.zeros((len(m.efc_rowid), 5), d.efc_force.dtype))
    dof_tree, nisland = dof_trees(m)
    island, dof_island = islands(dof_tree, nisland, d.efc_J, d.efc_active)
    p = _Problem(d.efc_J, math.cho_solve(factor, d.efc_J.T), d.efc_aref,
                 d.efc_frictionloss, friction, island, d.efc_active)
    # MuJoCo 4 scales an island's improvement by its dofs' current inertia, the trace of M
    inertia = jax.ops.segment_sum(jnp.diagonal(d.qM), dof_island, num_segments=nisland)
    scale = 1 / jnp.where(inertia > 0, inertia, 1.0)
    # MuJoCo counts the regularisation's cost, which noslip drops, as the first improvement
    regularisation = jax.ops.segment_sum(
        jnp.where(d.efc_active, 0.5 * force * force * d.efc_R, 0.0), island,
        num_segments=nisland)

    def iteration(carry, it):
      force, qacc, done = carry
      improvement = jnp.where(it == 0, regularisation, 0.0)
      for kind, blocks in (("friction", friction_blocks), ("pair", pair_blocks),
                           ("tangents", tangent_blocks)):
        force, qacc, improvement = _sweep(kind, blocks, p, force, qacc, done, improvement)
      done = done | (improvement * scale < m.opt.noslip_tolerance)
      return (force, qacc, done), None

    qacc = d.qacc_smooth + p.MinvJt @ force
    start = (force, qacc, jnp.zeros(nisland, bool))
    force, _, _ = jax.lax.scan(iteration, start, jnp.arange(m.opt.noslip_iterations))[0]
    qfrc_constraint = d.efc_J.T @ force
    qacc = d.qacc_smooth + math.cho_solve(factor, qfrc_constraint)
    return d.replace(efc_force=force, efc_state=dual_state(m, d, force), qacc=qacc,
                     qfrc_constraint=qfrc_constraint)
