"""The constraint solver: MuJoCo's convex primal problem, solved by Newton's method or CG
(``engine_solver.c``), and differentiated implicitly.

The constrained acceleration minimises

    cost(qacc) = 1/2 (qacc - qacc_smooth)' M (qacc - qacc_smooth) + s(J qacc - aref)

where s sums, over the active rows, MuJoCo's soft-constraint costs of ``jar = J qacc - aref``
(``mj_constraintUpdate``): quadratic for equality rows, Huber-like for friction loss, one-sided
quadratic for limits, frictionless contacts and pyramid edges, and the three-zone cone cost of
elliptic contacts. The constraint force is ``efc_force = -ds/djar``.

Newton: the Hessian ``M + J' H_s J`` is factored (a dense Cholesky of nv x nv per world) and
the step is followed by a line search on the convex, piecewise-smooth 1-D cost, whose first
and second derivatives are cheap given ``J search``, stopping as MuJoCo's at
``tolerance * ls_tolerance``. CG (``solver="CG"``) replaces the Hessian by M, factored once,
and conjugates its directions. Both run per constraint island, as MuJoCo's: a line search, a
scale and a stopping test per island. PGS (``solver="PGS"``), MuJoCo's dual method, is
``flexor.solver_pgs``; its forces give qacc as MuJoCo's ``mj_dualFinish`` does, and its
derivatives are those of this primal optimum, which it converges to. The loops are
``lax.while_loop`` with early exit at
MuJoCo's tolerances. The iterations run on the active rows only, gathered into a fixed number
of slots (``_capacities``): the row layout holds every contact a model could make, a running
simulation has a few of them active, and every Hessian would otherwise sum them all. A world
with more active rows than slots is solved on all rows.

Derivatives: the solution is the root of the cost's gradient, so its tangent solves the
linearised optimality condition ``H dqacc = -d(gradient)/dp dp`` with the Hessian at the
solution (a ``custom_jvp``). The iterations are never differentiated: forward and reverse mode
work at any iteration count, and reverse mode's memory does not grow with it.
"""

from __future__ import annotations

import functools
from typing import Callable, NamedTuple

import jax
from jax.ad_checkpoint import checkpoint_name
import jax.numpy as jnp
import numpy as np

from flexor import math, noslip, solver_pgs
from flexor.constraint import active_capacity, dof_trees, islands, rows_of
from flexor.types import ConstraintState, ConstraintType, Data, DisableBit, Model, SolverType

# The name (``jax.ad_checkpoint.checkpoint_name``) of a solver's result, which a step's
# rematerialisation (``integrate.step``) keeps for the backward pass. The tangent needs values
# computed from it (the Hessian's factor at the optimum, the forces), not the loops' own
# results, so a policy that keeps only loops' results made the backward pass run the solver's
# iterations again to recompute them.
LOOP_RESULT = "loop_result"
_SMALLEST_TIER = 256  # rows: a model with fewer conditional rows than 32x this has one tier


class _Rows(NamedTuple):
  """Row classes of a model, from its row layout (numpy), or of its active rows (``_compact``:
  quadratic and friction traced)."""

  quadratic: np.ndarray | jax.Array   # (njmax,) bool: equality rows
  friction: np.ndarray | jax.Array    # (njmax,) bool: dof and tendon friction loss
  in_cone: np.ndarray     # (njmax,) bool: rows of elliptic contacts
  cone: np.ndarray        # (ncone, 6) row indices of each elliptic contact, padded with its first
  cone_mask: np.ndarray   # (ncone, 6) bool: the contact's dimensions


class _Problem(NamedTuple):
  """One world's constraint problem (traced)."""

  M: jax.Array              # (nv, nv)
  qfrc_smooth: jax.Array    # (nv,)
  qacc_smooth: jax.Array    # (nv,)
  J: jax.Array              # (njmax, nv)
  aref: jax.Array           # (njmax,)
  D: jax.Array              # (njmax,) 0 on inactive rows
  R: jax.Array              # (njmax,)
  floss: jax.Array          # (njmax,)
  cone_friction: jax.Array  # (ncone, 5) friction of each elliptic contact


class _Update(NamedTuple):
  """The constraint cost's value, force and curvature at some jar."""

  cost: jax.Array     # ()
  row_cost: jax.Array   # (njmax,) of rows outside elliptic cones
  cone_cost: jax.Array  # (ncone,)
  force: jax.Array    # (njmax,) -ds/djar
  hdiag: jax.Array    # (njmax,) d2s/djar2 of rows outside elliptic cones
  hcone: jax.Array    # (ncone, 6, 6) d2s/djar2 of each elliptic contact's block
  cone_state: jax.Array  # (ncone,) ConstraintState of each elliptic contact


def _row_classes(m: Model) -> _Rows:
  """The rows' cost classes, from the static row layout and the enabled constraint types."""
  quadratic = np.zeros(m.njmax, bool)
  quadratic[rows_of(m, ConstraintType.EQUALITY)] = True
  friction = np.zeros(m.njmax, bool)
  friction[rows_of(m, ConstraintType.FRICTION_DOF, ConstraintType.FRICTION_TENDON)] = True
  ell = rows_of(m, ConstraintType.CONTACT_ELLIPTIC)
  first = ell[m.efc_rowsub[ell] == 0]
  dims = np.array([np.count_nonzero(m.efc_rowid[ell] == m.efc_rowid[f]) for f in first], int)
  mask = (np.arange(6) < dims[:, None]).reshape(-1, 6)
  cone = np.where(mask, first[:, None] + np.arange(6), first[:, None]).reshape(-1, 6)
  in_cone = np.zeros(m.njmax, bool)
  in_cone[ell] = True
  return _Rows(quadratic, friction, in_cone, cone, mask)


def _cone_update(jar: jax.Array, D: jax.Array, R: jax.Array, friction: jax.Array,
                 mask: jax.Array):
  """Cost, force (6,) and Hessian (6, 6) of one elliptic contact; jar, D, R (6,) padded.

  In the scaled space U = (mu jar_0, friction_k jar_k), N = U_0, T = |U_1:|, with the
  regularised cone's mu = friction_0 sqrt(R_1 / R_0): zero in the top zone (N >= mu T),
  quadratic 1/2 D jar^2 in the bottom zone (mu N + T <= 0), and 1/2 Dm (N - mu T)^2 with
  Dm = D_0 / (mu^2 (1 + mu^2)) in between (MuJoCo's mj_constraintUpdate and its cone Hessian).
  """
  active = D[0] > 0
  mu = jnp.where(active, friction[0] * jnp.sqrt(R[1] / R[0]), 1.0)
  scale = jnp.where(mask, jnp.concatenate([mu[None], friction]), 0.0)    # d U / d jar
  u = jar * scale
  n = u[0]
  t = math.safe_norm(u[1:])
  top = (n >= mu * t) | ((t <= 0) & (n >= 0))
  bottom = ~top & ((mu * n + t <= 0) | ((t <= 0) & (n < 0)))
  middle = ~top & ~bottom
  dm = D[0] / (mu * mu * (1 + mu * mu))
  nmt = n - mu * t
  safe_t = jnp.where(middle, t, 1.0)
  # middle zone, in U space: gradient dm nmt (1, -mu U_1:/T); Hessian dm times
  # [[1, -mu U'/T], [-mu U/T, mu N/T^3 U U' + (mu^2 - mu N/T) I]]
  dir_t = u[1:] / safe_t
  grad_u = dm * nmt * jnp.concatenate([jnp.ones(1, jar.dtype), -mu * dir_t])
  eye = jnp.eye(5, dtype=jar.dtype)
  h_tt = (mu * n / safe_t) * (jnp.outer(dir_t, dir_t) - eye) + mu * mu * eye
  h_u = dm * jnp.block([[jnp.ones((1, 1), jar.dtype), -mu * dir_t[None, :]],
                        [-mu * dir_t[:, None], h_tt]])
  quad = jnp.where(mask, D, 0.0)
  cost = jnp.where(top, 0.0, jnp.where(bottom, 0.5 * jnp.sum(quad * jar * jar),
                                       0.5 * dm * nmt**2))
  force = jnp.where(top, 0.0, jnp.where(bottom, -quad * jar, -scale * grad_u))
  hess = jnp.where(top, 0.0, jnp.where(bottom, jnp.diag(quad),
                                       scale[:, None] * h_u * scale[None, :]))
  zone = jnp.where(top, ConstraintState.SATISFIED,
                   jnp.where(bottom, ConstraintState.QUADRATIC, ConstraintState.CONE))
  return cost, force, hess, zone


def _update(rows: _Rows, p: _Problem, jar: jax.Array) -> _Update:
  """Cost, force and curvature of the constraint cost at jar (mj_constraintUpdate)."""
  quad_cost = 0.5 * p.D * jar * jar
  rf = p.R * p.floss
  neg, pos = jar <= -rf, jar >= rf
  friction_cost = jnp.where(neg, -0.5 * rf * p.floss - p.floss * jar,
                            jnp.where(pos, -0.5 * rf * p.floss + p.floss * jar, quad_cost))
  friction_force = jnp.where(neg, p.floss, jnp.where(pos, -p.floss, -p.D * jar))
  satisfied = jar >= 0
  cost = jnp.where(rows.quadratic, quad_cost, jnp.where(
      rows.friction, friction_cost, jnp.where(satisfied, 0.0, quad_cost)))
  force = jnp.where(rows.quadratic, -p.D * jar, jnp.where(
      rows.friction, friction_force, jnp.where(satisfied, 0.0, -p.D * jar)))
  hdiag = jnp.where(rows.quadratic, p.D, jnp.where(
      rows.friction, jnp.where(neg | pos, 0.0, p.D), jnp.where(satisfied, 0.0, p.D)))
  row_cost = jnp.where(rows.in_cone, 0.0, cost)
  cost = jnp.sum(row_cost)
  force = jnp.where(rows.in_cone, 0.0, force)
  hdiag = jnp.where(rows.in_cone, 0.0, hdiag)
  hcone = jnp.zeros((len(rows.cone), 6, 6), jar.dtype)
  cone_state = jnp.zeros(len(rows.cone), jnp.int32)
  c_cost = jnp.zeros(len(rows.cone), jar.dtype)
  if len(rows.cone):
    idx = rows.cone
    c_cost, c_force, hcone, cone_state = jax.vmap(_cone_update)(jar[idx], p.D[idx], p.R[idx],
                                                     p.cone_friction, rows.cone_mask)
    cost = cost + jnp.sum(c_cost)
    force = force.at[idx[rows.cone_mask]].set(c_force[rows.cone_mask])
  return _Update(cost, row_cost, c_cost, force, hdiag, hcone, cone_state)


def _cone_mul(hcone: jax.Array, x: jax.Array) -> jax.Array:
  """Each cone's Hessian block times its rows of x: hcone (ncone, 6, 6), x (ncone, 6, ...).

  Six multiply-adds rather than a batched matmul: XLA's CPU backend runs a batch of 6 x 6
  products as one small matmul call per block (on dm_control's finger, 36 cones by 64 worlds:
  1.2 ms a Hessian), where the multiply-adds fuse into one loop."""
  lead = (slice(None), slice(None)) + (None,) * (x.ndim - 2)
  return sum(hcone[..., j][lead] * x[:, None, j] for j in range(hcone.shape[-1]))


def _hessian(rows: _Rows, p: _Problem, u: _Update) -> jax.Array:
  """The cost's Hessian M + J' H_s J (nv, nv)."""
  H = p.M + (p.J.T * u.hdiag[None, :]) @ p.J
  if len(rows.cone):
    Jc = p.J[rows.cone] * rows.cone_mask[..., None]                          # (ncone, 6, nv)
    H = H + Jc.reshape(-1, Jc.shape[-1]).T @ _cone_mul(u.hcone, Jc).reshape(-1, Jc.shape[-1])
  return H


def _gradient(rows: _Rows, p: _Problem, qacc: jax.Array) -> jax.Array:
  """d cost / d qacc = M qacc - qfrc_smooth - J' efc_force (nv,)."""
  return _evaluate(rows, p, qacc, p.J @ qacc - p.aref).grad


def _cost(rows: _Rows, p: _Problem, qacc: jax.Array) -> jax.Array:
  return _evaluate(rows, p, qacc, p.J @ qacc - p.aref).cost


class _Point(NamedTuple):
  """An iterate of the solver and what the next step needs of it."""

  qacc: jax.Array   # (nv,)
  jar: jax.Array    # (njmax,) J qacc - aref
  u: _Update
  grad: jax.Array   # (nv,) d cost / d qacc
  cost: jax.Array   # ()


def _evaluate(rows: _Rows, p: _Problem, qacc: jax.Array, jar: jax.Array) -> _Point:
  """The cost, its gradient and the rows' update at qacc, given jar = J qacc - aref."""
  u = _update(rows, p, jar)
  dq = qacc - p.qacc_smooth
  grad = p.M @ qacc - p.qfrc_smooth - p.J.T @ u.force
  return _Point(qacc, jar, u, grad, 0.5 * dq @ p.M @ dq + u.cost)


class _Islands(NamedTuple):
  """Constraint islands of a problem: labels in [0, count) of its rows, dofs and elliptic
  cones. MuJoCo's CG and Newton solve each island on its own: a line search, a scale and a
  stopping test per island. With one island (``count`` 1) the per-island sums are the whole
  problem's, computed as plain dot products and sums."""

  row: jax.Array    # (nrow,) int
  dof: jax.Array    # (nv,) int
  cone: jax.Array   # (ncone,) int
  count: int

  def sum(self, x: jax.Array, labels: jax.Array) -> jax.Array:
    """(count,) sums of x (n,) over each island's elements."""
    if self.count == 1:
      return jnp.sum(x)[None]
    return jax.ops.segment_sum(x, labels, num_segments=self.count)

  def dot(self, a: jax.Array, b: jax.Array, labels: jax.Array) -> jax.Array:
    """(count,) dot products of a and b (n,) over each island's elements."""
    return (a @ b)[None] if self.count == 1 else self.sum(a * b, labels)

  def norm(self, x: jax.Array, labels: jax.Array) -> jax.Array:
    return jnp.linalg.norm(x)[None] if self.count == 1 else jnp.sqrt(self.sum(x * x, labels))

  def spread(self, v: jax.Array, labels: jax.Array) -> jax.Array:
    """Each element's value of its island's v (count,)."""
    return v[0] if self.count == 1 else v[labels]


def _island_cost(p: _Problem, isl: _Islands, x: _Point) -> jax.Array:
  """(count,) the cost of each island at x."""
  if isl.count == 1:
    return x.cost[None]
  dq = x.qacc - p.qacc_smooth
  return (0.5 * isl.dot(dq, p.M @ dq, isl.dof) + isl.sum(x.u.row_cost, isl.row)
          + isl.sum(x.u.cone_cost, isl.cone))


def _line_search(rows: _Rows, p: _Problem, isl: _Islands, x: _Point, search: jax.Array,
                 jv: jax.Array, gtol: jax.Array, searching: jax.Array,
                 ls_iterations: int) -> jax.Array:
  """The step alpha >= 0 (count,) of each island minimising its cost along qacc + alpha search,
  given jv = J search: safeguarded Newton on the derivative of the convex 1-D cost, keeping a
  bracket of the minimum; islands not ``searching`` (count,) keep alpha 0.

  As MuJoCo's ``PrimalSearch`` it always takes one Newton step, then stops when the derivative
  is under ``gtol`` (count,) (MuJoCo's tolerance * ls_tolerance * |search| / scale). It also
  stops, or takes no step, when the derivative is within its own rounding error (16 ulps of the
  sum of its terms' magnitudes), and stops when a step no longer moves alpha: in float32 gtol
  can be out of reach, and without these a world would search until ls_iterations (on
  dm_control's humanoid, 20 evaluations per search on average instead of 1.5) while a batch of
  worlds runs as long as its slowest world; a search that takes no step ends the iterations."""
  lin = isl.dot(search, p.M @ (x.qacc - p.qacc_smooth), isl.dof)
  quad = isl.dot(search, p.M @ search, isl.dof)
  jv_cone = jv[rows.cone] * rows.cone_mask
  ulps = 16 * jnp.finfo(x.qacc.dtype).eps

  def derivs(alpha):
    """First and second derivatives at alpha, and the first's rounding error, per island."""
    u = _update(rows, p, x.jar + isl.spread(alpha, isl.row) * jv)
    d1 = lin + alpha * quad - isl.dot(jv, u.force, isl.row)
    hjv = _cone_mul(u.hcone, jv_cone)
    # summed by components: a reduction would be a kernel of its own that recomputes the cone
    # update for each of its terms
    cone = sum(jv_cone[:, i] * hjv[:, i] for i in range(jv_cone.shape[-1]))
    cone = jnp.sum(cone)[None] if isl.count == 1 else isl.sum(cone, isl.cone)
    d2 = quad + isl.sum(u.hdiag * jv * jv, isl.row) + cone
    noise = ulps * (jnp.abs(lin) + jnp.abs(alpha * quad)
                    + isl.sum(jnp.abs(jv * u.force), isl.row))
    return d1, d2, noise

  def going(state):
    it, _, g, _, noise, _, _, moved = state
    resolved = jnp.abs(g) > noise
    return searching & (((it == 0) & resolved) | (
        (it < ls_iterations) & resolved & (jnp.abs(g) >= gtol) & moved))

  def body(state):
    it, alpha, g, h, noise, lo, hi, moved = state
    go = going(state)
    trial = alpha - g / h
    bracketed = jnp.isfinite(hi)
    outside = (trial <= lo) | (trial >= hi)
    trial = jnp.where(outside, jnp.where(bracketed, 0.5 * (lo + hi), 2 * trial), trial)
    trial = jnp.where(go, trial, alpha)
    g_new, h_new, noise_new = derivs(trial)
    keep = lambda new, old: jnp.where(go, new, old)
    return (it + go, trial, keep(g_new, g), keep(h_new, h), keep(noise_new, noise),
            keep(jnp.where(g_new < 0, trial, lo), lo), keep(jnp.where(g_new >= 0, trial, hi), hi),
            keep(trial != alpha, moved))

  zero = jnp.zeros(isl.count, x.qacc.dtype)
  g0, h0, noise0 = derivs(zero)
  state = (jnp.zeros(isl.count, jnp.int32), zero, g0, h0, noise0, zero,
           jnp.full(isl.count, jnp.inf, x.qacc.dtype), jnp.ones(isl.count, bool))
  return jax.lax.while_loop(lambda state: jnp.any(going(state)), body, state)[1]


def _step(rows: _Rows, p: _Problem, isl: _Islands, x: _Point, search: jax.Array,
          tolerance: jax.Array, ls_tolerance: jax.Array, scale: jax.Array, done: jax.Array,
          ls_iterations: int) -> tuple[_Point, jax.Array]:
  """One iteration's line search and move along ``search`` in the islands not ``done``
  (count,); returns the new point and which islands are done after it: MuJoCo stops an island
  on a small scaled improvement or gradient, or a line search that takes no step."""
  jv = p.J @ search
  gtol = tolerance * ls_tolerance * isl.norm(search, isl.dof) / scale
  alpha = _line_search(rows, p, isl, x, search, jv, gtol, ~done, ls_iterations)
  new = _evaluate(rows, p, x.qacc + isl.spread(alpha, isl.dof) * search,
                  x.jar + isl.spread(alpha, isl.row) * jv)
  improvement = scale * (_island_cost(p, isl, x) - _island_cost(p, isl, new))
  gradient = scale * isl.norm(new.grad, isl.dof)
  return new, done | ((improvement > 0) & (improvement < tolerance)) | (gradient < tolerance) | (
      alpha == 0)


def _newton(rows: _Rows, p: _Problem, isl: _Islands, qacc0: jax.Array, tolerance: jax.Array,
            ls_tolerance: jax.Array, scale: jax.Array, iterations: int,
            ls_iterations: int) -> jax.Array:
  """Newton's method from qacc0 (MuJoCo's ``mj_solNewton``).

  An iterate carries J qacc - aref, moved along J search as MuJoCo's solver moves it, so that a
  step reads the (njmax, nv) Jacobian four times (Hessian, J search, J' force): on a GPU,
  where a batch of Jacobians lives in memory, those reads are the step's cost. The Hessian is
  block diagonal over the islands, so its Newton direction is each island's. Besides the
  improvement and gradient tests, an island stops where its Newton decrement, the predicted
  improvement 1/2 grad' H^-1 grad, is under the tolerance; it does not start where that and its
  gradient are (MuJoCo's test of the gap 1/2 grad' M^-1 grad there is implied: H >= M)."""

  def direction(x: _Point) -> tuple[jax.Array, jax.Array]:
    """(H^-1 grad (nv,), scaled Newton decrement (count,)) at x."""
    factor = math.cholesky(_hessian(rows, p, x.u))
    hgrad = math.cho_solve(factor, x.grad)
    return hgrad, 0.5 * scale * isl.dot(x.grad, hgrad, isl.dof)

  def body(state):
    it, x, hgrad, done = state
    new, done = _step(rows, p, isl, x, -hgrad, tolerance, ls_tolerance, scale, done,
                      ls_iterations)
    hgrad, decrement = direction(new)
    return it + 1, new, hgrad, done | (decrement < tolerance)

  x0 = _evaluate(rows, p, qacc0, p.J @ qacc0 - p.aref)
  hgrad0, decrement0 = direction(x0)
  done0 = (scale * isl.norm(x0.grad, isl.dof) < tolerance) & (decrement0 < tolerance)
  return jax.lax.while_loop(lambda s: (s[0] < iterations) & ~jnp.all(s[3]), body,
                            (0, x0, hgrad0, done0))[1].qacc


def _conjugate_gradient(rows: _Rows, p: _Problem, isl: _Islands, qacc0: jax.Array,
                        tolerance: jax.Array, ls_tolerance: jax.Array, scale: jax.Array,
                        iterations: int, ls_iterations: int) -> jax.Array:
  """MuJoCo's CG from qacc0 (``mj_solCG``): nonlinear conjugate gradients preconditioned by M,
  with Newton's line search and Hager and Zhang's direction update, per island.

  A step costs a solve with M's Cholesky factor (computed once) instead of a Hessian's
  factorization, and convergence takes more steps. An island does not start where its scaled
  duality gap 1/2 grad' M^-1 grad is already under the tolerance (a good warm start)."""
  factor = math.cholesky(p.M)

  def body(state):
    it, x, mgrad, search, done = state
    new, new_done = _step(rows, p, isl, x, search, tolerance, ls_tolerance, scale, done,
                          ls_iterations)
    new_mgrad = math.cho_solve(factor, new.grad)
    # restart from steepest descent where conjugacy is lost; the lower bound keeps the
    # direction from turning orthogonal to the gradient
    y, my = new.grad - x.grad, new_mgrad - mgrad
    d_dot_y = isl.dot(search, y, isl.dof)
    lost = d_dot_y < math.MINVAL
    d_dot_y = jnp.where(lost, 1.0, d_dot_y)
    beta = (isl.dot(y, new_mgrad, isl.dof)
            - 2 * (isl.dot(y, my, isl.dof) / d_dot_y) * isl.dot(search, new.grad, isl.dof)
            ) / d_dot_y
    floor = -1 / jnp.maximum(math.MINVAL, isl.norm(search, isl.dof)
                             * jnp.minimum(0.01, isl.norm(new.grad, isl.dof)))
    beta = jnp.where(lost, 0.0, jnp.maximum(floor, beta))
    search = -new_mgrad + isl.spread(beta, isl.dof) * search
    return it + 1, new, new_mgrad, search, new_done

  x0 = _evaluate(rows, p, qacc0, p.J @ qacc0 - p.aref)
  mgrad0 = math.cho_solve(factor, x0.grad)
  done0 = 0.5 * scale * isl.dot(x0.grad, mgrad0, isl.dof) < tolerance
  state = (0, x0, mgrad0, -mgrad0, done0)
  return jax.lax.while_loop(lambda s: (s[0] < iterations) & ~jnp.all(s[4]), body,
                            state)[1].qacc


def _capacities(rows: _Rows) -> tuple[int, ...]:
  """How many rows outside elliptic cones the Newton iterations carry (static): tiers, the
  smallest first, each tried where the active rows overflow the one before; none for all.

  A row is active (D > 0) while its constraint is on: equality and friction-loss rows always,
  limits and contacts only near their violation. The iterations work on the active rows
  gathered into a tier's slots: every row they leave out has D = 0 and adds nothing to the
  cost, its gradient or its Hessian, so the solution is the same. The always-active rows and
  ``active_capacity`` of the conditional ones make the largest tier; a world that needs more
  is solved again on all rows (``_on_active_rows``). A scene of many bodies has many more
  contact slots than contacts (MuJoCo's dice.xml: 21,800 slots, 400 contacts at rest), and
  each Newton step's Hessian costs rows x nv^2: there, tiers an eighth as large come first,
  down to ``_SMALLEST_TIER`` rows, each one more compiled solve."""
  free = ~rows.in_cone
  always = int(np.count_nonzero((rows.quadratic | rows.friction) & free))
  conditional = active_capacity(int(np.count_nonzero(free)) - always)
  if conditional is None:
    return ()
  tiers = [conditional]
  while tiers[0] // 8 >= _SMALLEST_TIER:
    tiers.insert(0, -(-tiers[0] // 64) * 8)
  return tuple(always + tier for tier in tiers)


def _compact(rows: _Rows, p: _Problem, capacity: int) -> tuple[_Rows, _Problem, jax.Array]:
  """The problem on its active rows: (rows, problem, overflow).

  The first ``capacity`` rows are the active rows outside elliptic cones, in order and padded
  with rows of zero Jacobian and D; the rows of the elliptic cones follow, all of them. overflow
  () bool says whether active rows were left out."""
  free, cone_rows = np.flatnonzero(~rows.in_cone), np.flatnonzero(rows.in_cone)
  active = p.D[free] > 0
  pick, _ = math.compact(active, capacity, 0)
  valid = jnp.arange(capacity) < jnp.sum(active)
  keep = jnp.concatenate([valid, jnp.ones(len(cone_rows), bool)])
  idx = jnp.concatenate([jnp.asarray(free)[pick], jnp.asarray(cone_rows, pick.dtype)])
  place = np.zeros(len(rows.in_cone), int)
  place[cone_rows] = capacity + np.arange(len(cone_rows))
  zeros = np.zeros(len(cone_rows), bool)
  compact_rows = _Rows(
      quadratic=jnp.concatenate([jnp.asarray(rows.quadratic[free])[pick] & valid, zeros]),
      friction=jnp.concatenate([jnp.asarray(rows.friction[free])[pick] & valid, zeros]),
      in_cone=np.concatenate([np.zeros(capacity, bool), ~zeros]),
      cone=place[rows.cone], cone_mask=rows.cone_mask)
  compact = p._replace(J=p.J[idx] * keep[:, None], aref=p.aref[idx],
                       D=jnp.where(keep, p.D[idx], 0.0), R=p.R[idx],
                       floss=jnp.where(keep, p.floss[idx], 0.0))
  return compact_rows, compact, jnp.sum(active) > capacity


class _Config:
  """What the solve needs besides the traced problem: static, compared by identity."""

  def __init__(self, m: Model, rows: _Rows):
    self.rows, self.iterations, self.ls_iterations = rows, m.opt.iterations, m.opt.ls_iterations
    self.capacities = _capacities(rows)
    self.cg = m.opt.solver == SolverType.CG
    self.per_island = not m.opt.disabled(DisableBit.ISLAND)
    self.trees = dof_trees(m)


def _minimise(config: _Config, rows: _Rows, p: _Problem, warm: jax.Array | None,
              tolerance: jax.Array, ls_tolerance: jax.Array, scale: jax.Array) -> jax.Array:
  """The minimiser qacc (nv,) of problem p by CG or Newton, per constraint island as MuJoCo's
  solvers: each island is scaled by the trace of its block of M, and the dofs of trees no
  active row touches take qacc_smooth. Where islands are disabled, one solve scaled by
  1 / (meaninertia nv). It starts from qacc_smooth, or from ``warm`` where that costs less
  (MuJoCo's warm start; on the active rows, as the other rows cost nothing)."""
  start = p.qacc_smooth
  if warm is not None:
    start = jnp.where(_cost(rows, p, warm) < _cost(rows, p, start), warm, start)
  zeros = np.zeros(0, np.int32)
  isl = _Islands(zeros, zeros, zeros, 1)
  if config.per_island:
    active = p.D > 0
    row, dof = islands(*config.trees, p.J, active)
    isl = _Islands(row, dof, row[rows.cone[:, 0]], config.trees[1])
    scale = 1 / isl.sum(jnp.diagonal(p.M), isl.dof)
    constrained = isl.sum(active.astype(p.M.dtype), isl.row) > 0
    start = jnp.where(isl.spread(constrained, isl.dof), start, p.qacc_smooth)
  method = _conjugate_gradient if config.cg else _newton
  return method(rows, p, isl, start, tolerance, ls_tolerance, scale, config.iterations,
                config.ls_iterations)


def _on_active_rows(config: _Config, problem: _Problem,
                    fn: Callable[[_Rows, _Problem], jax.Array]) -> jax.Array:
  """fn(rows, problem) on the problem's active rows (``_compact``) in the smallest tier of
  ``_capacities`` they fit, or on all its rows where they fit none."""
  def attempt(tiers: tuple[int, ...], problem: _Problem) -> jax.Array:
    if not tiers:
      return fn(config.rows, problem)
    rows, compact, overflow = _compact(config.rows, problem, tiers[0])
    return math.run_if(overflow, fn(rows, compact), functools.partial(attempt, tiers[1:]),
                       problem)

  return attempt(config.capacities, problem)


def _optimum(config: _Config, problem: _Problem, warm: jax.Array | None, tolerance: jax.Array,
             ls_tolerance: jax.Array, scale: jax.Array) -> jax.Array:
  """The minimiser qacc (nv,) of ``problem``, found by Newton or CG (``_minimise``)."""
  qacc = _on_active_rows(config, jax.lax.stop_gradient(problem), lambda rows, p: _minimise(
      config, rows, p, warm, tolerance, ls_tolerance, scale))
  return _implicit(config, problem, checkpoint_name(qacc, LOOP_RESULT))


@functools.partial(jax.custom_jvp, nondiff_argnums=(0,))
def _implicit(config: _Config, problem: _Problem, qacc: jax.Array) -> jax.Array:
  """qacc (nv,), a solver's minimiser of ``problem``, with the tangent of the exact one."""
  return qacc


@_implicit.defjvp
def _implicit_jvp(config: _Config, primals: tuple, tangents: tuple):
  """Implicit tangent: H dqacc = -(d gradient / d problem) dproblem at the optimum; the start,
  the solver and its stopping rule do not move the optimum."""
  problem, qacc = primals

  def factor(rows: _Rows, p: _Problem) -> jax.Array:
    hessian = _hessian(rows, p, _update(rows, p, p.J @ qacc - p.aref))
    return math.cholesky(hessian)

  cholesky = _on_active_rows(config, problem, factor)
  _, dgrad = jax.jvp(lambda q: _gradient(config.rows, q, qacc), (problem,), (tangents[0],))
  return qacc, -math.cho_solve(cholesky, dgrad)


def _problem(m: Model, d: Data, rows: _Rows) -> _Problem:
  friction = d.contact_friction[m.efc_rowid[rows.cone[:, 0]]]
  return _Problem(d.qM, d.qfrc_smooth, d.qacc_smooth, d.efc_J, d.efc_aref, d.efc_D, d.efc_R,
                  d.efc_frictionloss, friction)


def solve(m: Model, d: Data) -> Data:
  """Computes qacc, efc_force, efc_state and qfrc_constraint (mj_fwdConstraint) with the solver
  opt.solver names: Newton's method, CG or PGS (``flexor.solver_pgs``)."""
  with jax.named_scope("solve"):
    rows = _row_classes(m)
    p = _problem(m, d, rows)
    if m.opt.solver == SolverType.PGS:
      return _solve_dual(m, d, rows, p)
    tolerance = jax.lax.stop_gradient(m.opt.tolerance)
    ls_tolerance = jax.lax.stop_gradient(m.opt.ls_tolerance)
    scale = jax.lax.stop_gradient(1 / (m.stat_meaninertia * max(1, m.nv)))
    warm = None
    if not m.opt.disabled(DisableBit.WARMSTART):
      warm = jax.lax.stop_gradient(d.qacc_warmstart)

    config = _Config(m, rows)
    qacc = _optimum(config, p, warm, tolerance, ls_tolerance, scale)
    u = _update(rows, p, p.J @ qacc - p.aref)
    force = jnp.where(d.efc_active, u.force, 0.0)
    state = _state(rows, p, p.J @ qacc - p.aref, u, d.efc_active)
    return d.replace(qacc=qacc, efc_force=force, efc_state=state, qfrc_constraint=p.J.T @ force)


def _solve_dual(m: Model, d: Data, rows: _Rows, p: _Problem) -> Data:
  """solve's results by PGS, then mj_dualFinish: qacc = qacc_smooth + M^-1 J' efc_force.

  Derivatives are the primal optimum's, which PGS converges to: qacc takes the implicit tangent
  and efc_force the tangent of the primal forces at qacc."""
  warm = None
  if not m.opt.disabled(DisableBit.WARMSTART):
    warm = _update(rows, p, p.J @ d.qacc_warmstart - p.aref).force
  force = checkpoint_name(solver_pgs.solve_pgs(m, d, warm), LOOP_RESULT)
  qacc = jax.lax.stop_gradient(
      p.qacc_smooth + math.cho_solve(math.cholesky(p.M), p.J.T @ force))
  qacc = _implicit(_Config(m, rows), p, qacc)
  primal = jnp.where(d.efc_active, _update(rows, p, p.J @ qacc - p.aref).force, 0.0)
  force = force + (primal - jax.lax.stop_gradient(primal))
  return d.replace(qacc=qacc, efc_force=force, efc_state=noslip.dual_state(m, d, force),
                   qfrc_constraint=p.J.T @ force)


def constraint_force(m: Model, d: Data, qacc: jax.Array) -> tuple[jax.Array, jax.Array]:
  """(efc_force (njmax,), efc_state (njmax,)) at a given qacc, as mj_inverse's
  mj_invConstraint: no solve, the forces the constraint model assigns to that acceleration."""
  rows = _row_classes(m)
  p = _problem(m, d, rows)
  jar = p.J @ qacc - p.aref
  u = _update(rows, p, jar)
  return jnp.where(d.efc_active, u.force, 0.0), _state(rows, p, jar, u, d.efc_active)


def _state(rows: _Rows, p: _Problem, jar: jax.Array, u: _Update, active: jax.Array) -> jax.Array:
  """efc_state (njmax,) int: mjtConstraintState of each row."""
  rf = p.R * p.floss
  friction = jnp.where(jar <= -rf, ConstraintState.LINEARNEG,
                       jnp.where(jar >= rf, ConstraintState.LINEARPOS, ConstraintState.QUADRATIC))
  one_sided = jnp.where(jar >= 0, ConstraintState.SATISFIED, ConstraintState.QUADRATIC)
  state = jnp.where(rows.quadratic, ConstraintState.QUADRATIC,
                    jnp.where(rows.friction, friction, one_sided))
  if len(rows.cone):
    idx = rows.cone
    state = state.at[idx[rows.cone_mask]].set(
        jnp.broadcast_to(u.cone_state[:, None], idx.shape)[rows.cone_mask])
  return jnp.where(active, state, ConstraintState.SATISFIED).astype(jnp.int32)
