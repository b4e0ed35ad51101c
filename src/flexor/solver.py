"""The constraint solver: MuJoCo's convex primal problem, solved by Newton's method
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
``tolerance * ls_tolerance``. Both loops are ``lax.while_loop`` with early exit at MuJoCo's
tolerances. The iterations run on the active rows only, gathered
into a fixed number of slots (``_capacity``): the row layout holds every contact a model could
make, a running simulation has a few of them active, and every Hessian would otherwise sum them
all. A world with more active rows than slots is solved on all rows.

Derivatives: the solution is the root of the cost's gradient, so its tangent solves the
linearised optimality condition ``H dqacc = -d(gradient)/dp dp`` with the Hessian at the
solution (a ``custom_jvp``). The iterations are never differentiated: forward and reverse mode
work at any iteration count, and reverse mode's memory does not grow with it.
"""

from __future__ import annotations

import functools
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from flexor import math
from flexor.constraint import active_capacity, rows_of, unless_overflow
from flexor.types import ConstraintState, ConstraintType, Data, DisableBit, Model


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
  cost = jnp.sum(jnp.where(rows.in_cone, 0.0, cost))
  force = jnp.where(rows.in_cone, 0.0, force)
  hdiag = jnp.where(rows.in_cone, 0.0, hdiag)
  hcone = jnp.zeros((len(rows.cone), 6, 6), jar.dtype)
  cone_state = jnp.zeros(len(rows.cone), jnp.int32)
  if len(rows.cone):
    idx = rows.cone
    c_cost, c_force, hcone, cone_state = jax.vmap(_cone_update)(jar[idx], p.D[idx], p.R[idx],
                                                     p.cone_friction, rows.cone_mask)
    cost = cost + jnp.sum(c_cost)
    force = force.at[idx[rows.cone_mask]].set(c_force[rows.cone_mask])
  return _Update(cost, force, hdiag, hcone, cone_state)


def _hessian(rows: _Rows, p: _Problem, u: _Update) -> jax.Array:
  """The cost's Hessian M + J' H_s J (nv, nv)."""
  H = p.M + (p.J.T * u.hdiag[None, :]) @ p.J
  if len(rows.cone):
    Jc = p.J[rows.cone] * rows.cone_mask[..., None]                          # (ncone, 6, nv)
    H = H + jnp.einsum("cin,cij,cjm->nm", Jc, u.hcone, Jc)
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


def _line_search(rows: _Rows, p: _Problem, x: _Point, search: jax.Array, jv: jax.Array,
                 gtol: jax.Array, ls_iterations: int) -> jax.Array:
  """The step alpha >= 0 minimising cost(qacc + alpha search), given jv = J search:
  safeguarded Newton on the derivative of the convex 1-D cost, keeping a bracket of the
  minimum.

  As MuJoCo's ``PrimalSearch`` it always takes one Newton step, then stops when the derivative
  is under ``gtol`` (MuJoCo's tolerance * ls_tolerance * |search| / scale). It also stops, or
  takes no step, when the derivative is within its own rounding error (16 ulps of the sum of its
  terms' magnitudes), and stops when a step no longer moves alpha: in float32 gtol can be out of
  reach, and without these a world would search until ls_iterations (on dm_control's humanoid,
  20 evaluations per search on average instead of 1.5) while a batch of worlds runs as long as
  its slowest world; a search that takes no step ends the Newton iterations."""
  lin = search @ (p.M @ (x.qacc - p.qacc_smooth))
  quad = search @ (p.M @ search)
  jv_cone = jv[rows.cone] * rows.cone_mask
  ulps = 16 * jnp.finfo(x.qacc.dtype).eps

  def derivs(alpha):
    """First and second derivatives at alpha, and the first's rounding error."""
    u = _update(rows, p, x.jar + alpha * jv)
    d1 = lin + alpha * quad - jv @ u.force
    d2 = quad + jnp.sum(u.hdiag * jv * jv) + jnp.einsum("ci,cij,cj->", jv_cone, u.hcone, jv_cone)
    noise = ulps * (jnp.abs(lin) + jnp.abs(alpha * quad) + jnp.sum(jnp.abs(jv * u.force)))
    return d1, d2, noise

  zero = jnp.zeros((), x.qacc.dtype)
  g0, h0, noise0 = derivs(zero)

  def cond(state):
    it, _, g, _, noise, _, _, moved = state
    resolved = jnp.abs(g) > noise
    return ((it == 0) & resolved) | (
        (it < ls_iterations) & resolved & (jnp.abs(g) >= gtol) & moved)

  def body(state):
    it, alpha, g, h, _, lo, hi, _ = state
    trial = alpha - g / h
    bracketed = jnp.isfinite(hi)
    outside = (trial <= lo) | (trial >= hi)
    trial = jnp.where(outside, jnp.where(bracketed, 0.5 * (lo + hi), 2 * trial), trial)
    g_new, h_new, noise = derivs(trial)
    lo = jnp.where(g_new < 0, trial, lo)
    hi = jnp.where(g_new >= 0, trial, hi)
    return it + 1, trial, g_new, h_new, noise, lo, hi, trial != alpha

  state = (0, zero, g0, h0, noise0, zero, jnp.full((), jnp.inf, x.qacc.dtype), jnp.array(True))
  return jax.lax.while_loop(cond, body, state)[1]


def _newton(rows: _Rows, p: _Problem, qacc0: jax.Array, tolerance: jax.Array,
            ls_tolerance: jax.Array, scale: jax.Array, iterations: int,
            ls_iterations: int) -> jax.Array:
  """Newton's method from qacc0, stopping as MuJoCo on a small scaled improvement or gradient;
  ``tolerance * ls_tolerance`` is the line search's (MuJoCo's ``opt.ls_tolerance``).

  An iterate carries J qacc - aref, moved along J search as MuJoCo's solver moves it, so that a
  step reads the (njmax, nv) Jacobian four times (Hessian, J search, J' force): on a GPU,
  where a batch of Jacobians lives in memory, those reads are the step's cost."""

  def cond(state):
    it, _, done = state
    return (it < iterations) & ~done

  def body(state):
    it, x, _ = state
    factor = jax.scipy.linalg.cho_factor(_hessian(rows, p, x.u), lower=True)
    search = -jax.scipy.linalg.cho_solve(factor, x.grad)
    jv = p.J @ search
    gtol = tolerance * ls_tolerance * jnp.linalg.norm(search) / scale
    alpha = _line_search(rows, p, x, search, jv, gtol, ls_iterations)
    new = _evaluate(rows, p, x.qacc + alpha * search, x.jar + alpha * jv)
    done = ((scale * (x.cost - new.cost) < tolerance)
            | (scale * jnp.linalg.norm(new.grad) < tolerance) | (alpha == 0))
    return it + 1, new, done

  x0 = _evaluate(rows, p, qacc0, p.J @ qacc0 - p.aref)
  done0 = scale * jnp.linalg.norm(x0.grad) < tolerance
  return jax.lax.while_loop(cond, body, (0, x0, done0))[1].qacc


def _capacity(rows: _Rows) -> int | None:
  """How many rows outside elliptic cones the Newton iterations carry (static), or None for all.

  A row is active (D > 0) while its constraint is on: equality and friction-loss rows always,
  limits and contacts only near their violation. The iterations work on the active rows
  gathered into this many slots: every row they leave out has D = 0 and adds nothing to the
  cost, its gradient or its Hessian, so the solution is the same. The always-active rows and
  ``active_capacity`` of the conditional ones make room; a world that needs more is solved
  again on all rows (``_on_active_rows``)."""
  free = ~rows.in_cone
  always = int(np.count_nonzero((rows.quadratic | rows.friction) & free))
  conditional = active_capacity(int(np.count_nonzero(free)) - always)
  return None if conditional is None else always + conditional


def _compact(rows: _Rows, p: _Problem, capacity: int) -> tuple[_Rows, _Problem, jax.Array]:
  """The problem on its active rows: (rows, problem, overflow).

  The first ``capacity`` rows are the active rows outside elliptic cones, in order and padded
  with rows of zero Jacobian and D; the rows of the elliptic cones follow, all of them. overflow
  () bool says whether active rows were left out."""
  free, cone_rows = np.flatnonzero(~rows.in_cone), np.flatnonzero(rows.in_cone)
  active = p.D[free] > 0
  pick = jnp.nonzero(active, size=capacity, fill_value=0)[0]
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

  def __init__(self, rows: _Rows, iterations: int, ls_iterations: int):
    self.rows, self.iterations, self.ls_iterations = rows, iterations, ls_iterations
    self.capacity = _capacity(rows)


def _on_active_rows(config: _Config, problem: _Problem,
                    fn: Callable[[_Rows, _Problem], jax.Array]) -> jax.Array:
  """fn(rows, problem) on the problem's active rows (``_compact``), or on all its rows where
  the active rows do not fit."""
  if config.capacity is None:
    return fn(config.rows, problem)
  rows, compact, overflow = _compact(config.rows, problem, config.capacity)
  return unless_overflow(overflow, fn(rows, compact), lambda p: fn(config.rows, p), problem)


@functools.partial(jax.custom_jvp, nondiff_argnums=(0,))
def _optimum(config: _Config, problem: _Problem, start: jax.Array, tolerance: jax.Array,
             ls_tolerance: jax.Array, scale: jax.Array) -> jax.Array:
  """The minimiser qacc (nv,) of ``problem``, found by Newton from ``start``."""
  return _on_active_rows(config, problem, lambda rows, p: _newton(
      rows, p, start, tolerance, ls_tolerance, scale, config.iterations, config.ls_iterations))


@_optimum.defjvp
def _optimum_jvp(config: _Config, primals: tuple, tangents: tuple):
  """Implicit tangent: H dqacc = -(d gradient / d problem) dproblem at the optimum; the start and
  the stopping rule do not move the optimum."""
  qacc = _optimum(config, *primals)
  problem = primals[0]

  def factor(rows: _Rows, p: _Problem) -> jax.Array:
    hessian = _hessian(rows, p, _update(rows, p, p.J @ qacc - p.aref))
    return jax.scipy.linalg.cho_factor(hessian, lower=True)[0]

  cholesky = _on_active_rows(config, problem, factor)
  _, dgrad = jax.jvp(lambda q: _gradient(config.rows, q, qacc), (problem,), (tangents[0],))
  return qacc, -jax.scipy.linalg.cho_solve((cholesky, True), dgrad)


def _problem(m: Model, d: Data, rows: _Rows) -> _Problem:
  friction = d.contact_friction[m.efc_rowid[rows.cone[:, 0]]]
  return _Problem(d.qM, d.qfrc_smooth, d.qacc_smooth, d.efc_J, d.efc_aref, d.efc_D, d.efc_R,
                  d.efc_frictionloss, friction)


def solve(m: Model, d: Data) -> Data:
  """Computes qacc, efc_force, efc_state and qfrc_constraint (mj_fwdConstraint) with Newton's
  method, whatever opt.solver says: CG and PGS solve the same convex problem."""
  with jax.named_scope("solve"):
    rows = _row_classes(m)
    p = _problem(m, d, rows)
    tolerance = jax.lax.stop_gradient(m.opt.tolerance)
    ls_tolerance = jax.lax.stop_gradient(m.opt.ls_tolerance)
    scale = jax.lax.stop_gradient(1 / (m.stat_meaninertia * max(1, m.nv)))
    start = p.qacc_smooth
    if not m.opt.disabled(DisableBit.WARMSTART):
      warm = d.qacc_warmstart
      start = jnp.where(_cost(rows, p, warm) < _cost(rows, p, start), warm, start)
    start = jax.lax.stop_gradient(start)

    config = _Config(rows, m.opt.iterations, m.opt.ls_iterations)
    qacc = _optimum(config, p, start, tolerance, ls_tolerance, scale)
    u = _update(rows, p, p.J @ qacc - p.aref)
    force = jnp.where(d.efc_active, u.force, 0.0)
    state = _state(rows, p, p.J @ qacc - p.aref, u, d.efc_active)
    return d.replace(qacc=qacc, efc_force=force, efc_state=state, qfrc_constraint=p.J.T @ force)


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
