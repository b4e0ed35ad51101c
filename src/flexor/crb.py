"""Joint-space inertia: composite rigid bodies (``crb``), its factor and solves with it.

In com-based frames a body's composite inertia is the plain sum of ``cinert`` over its subtree,
and entry (i, j) of the mass matrix, for dof j an ancestor of dof i, is
``cdof[j] . (crb[body(i)] * cdof[i])``. Both are therefore matmuls with the static masks of
``flexor.tree``: no pass over bodies or tree levels.

flexor stores qM dense and factors it as ``qM = qLD qLD'`` (lower Cholesky), unlike MuJoCo's
sparse ``LDL'``; the solves agree to rounding. The factorisation and the solves run tree by
tree (``tree_blocks``): qM couples no two kinematic trees.

Armature: qM adds dof_armature, MuJoCo 4's actuator armature (times gear^2) on joints, and the
tendon armature term ``a ten_J' ten_J``. A tendon's armature also has a velocity-dependent bias
(``tendon_bias``, part of qfrc_bias) and an inertial force that MuJoCo 4 passes, with the
tendon's other forces, to the bodies along its path (``tendon_cfrc_ext``, part of cfrc_ext).
"""

from __future__ import annotations

import functools
from typing import Callable

import jax
from jax.ad_checkpoint import checkpoint_name
import jax.numpy as jnp
import numpy as np

from flexor import kinematics, math, passive, tendon, tree
from flexor.types import Data, Model, TrnType

# The name (``jax.ad_checkpoint.checkpoint_name``) of the Cholesky factors that a step's
# rematerialisation (``integrate.step``) keeps for the backward pass: the solves' tangents need
# the factor, and recomputing it (a LAPACK call per matrix) was the largest recomputed kernel.
FACTOR = "cholesky_factor"


def dof_armature(m: Model) -> jax.Array:
  """Armature (nv,) of each dof: dof_armature plus the armature reflected from joint actuators
  (MuJoCo 4: actuator_armature * gear^2 on every dof of the target joint, mj_actuatorArmature)."""
  return m.dof_armature + passive.reflected(m, m.actuator_armature, "jnt")[m.dof_jntid]


def _tendon_armature(m: Model) -> jax.Array:
  """Armature (ntendon,) of each tendon: tendon_armature plus that of its tendon actuators."""
  return m.tendon_armature + passive.reflected(m, m.actuator_armature, "tendon")


def _with_armature(m: Model, term: Callable[[], jax.Array], zero: Callable[[], jax.Array]
                   ) -> jax.Array:
  """``term()`` where some tendon has armature (its own or an actuator's), else ``zero()``;
  decided while tracing where the Model is known then (``math.known_cond``)."""
  return math.known_cond(lambda tendon, actuator: (tendon != 0).any() | (actuator != 0).any(),
                         (m.tendon_armature, m.actuator_armature), term, zero)


def _tendon_term(m: Model, d: Data) -> jax.Array:
  """Tendon armature term (nv, nv) of qM (mj_tendonArmature): sum over tendons of a J' J.

  MuJoCo adds it within qM's sparsity only, so entries between dofs of which neither is an
  ancestor of the other (e.g. a fixed tendon across two trees) are dropped, here as there.
  Needs ten_J from the tendon stage.
  """
  armature = _tendon_armature(m)

  def term() -> jax.Array:
    return _mirrored_lower(m, (armature[:, None] * d.ten_J).T @ d.ten_J)

  # skipped (as in tendon_bias) where no tendon has armature, the common case
  return _with_armature(m, term, lambda: jnp.zeros_like(d.qM))


def _mirrored_lower(m: Model, full: jax.Array) -> jax.Array:
  """The entries (nv, nv) of ``full`` within qM's lower triangle (a dof and its ancestors),
  diagonal included, with the strict lower triangle mirrored above it: exactly symmetric."""
  return full * m.dof_ancestor + (full * (m.dof_ancestor & ~np.eye(m.nv, dtype=bool))).T


def armature(m: Model, d: Data) -> jax.Array:
  """The armature part (nv, nv) of qM: dof and joint-actuator armature on the diagonal, plus
  the tendon armature term. qM = (composite rigid-body inertia) + armature(m, d)."""
  arm = jnp.diag(dof_armature(m))
  return arm + _tendon_term(m, d) if m.ntendon else arm


def crb(m: Model, d: Data) -> Data:
  """Computes crb (nbody, 10) composite inertias and qM (nv, nv) with armature (mj_makeM).

  The diagonal gets dof_armature plus the armature reflected from joint actuators (MuJoCo 4:
  actuator_armature * gear^2, on every dof of the target joint); models with tendons get the
  tendon armature term ``_tendon_term`` (needs ten_J, i.e. the tendon stage before crb).
  """
  with jax.named_scope("crb"):
    cinert = d.cinert
    composite = tree.subtree_sum(m, cinert)
    # Spatial force of each dof's subtree moving at unit speed along that dof, (nv, 6).
    # a static gather as slices (math.take): in reverse mode its transpose fuses, where a
    # gather's is a scatter loop (the smooth cheetah's rollout gradient: about 6% faster)
    dof_force = math.inert_mul(math.take(composite, m.dof_bodyid), d.cdof)
    # full[i, j] = cdof[j] . dof_force[i]; meaningful where j is an ancestor (or self) of i.
    full = math.rows_dot(dof_force, d.cdof)
    # the diagonal is part of the product too: no separate reduction
    qM = _mirrored_lower(m, full) + jnp.diag(dof_armature(m))
    if m.ntendon:
      qM = qM + _tendon_term(m, d)
  return d.replace(crb=composite, qM=qM)


# --- tendon armature's bias, and the forces tendons apply to bodies ---------------------------


def tendon_jdot(m: Model, d: Data) -> jax.Array:
  """d(ten_J)/dt . qvel (ntendon,) (mj_tendonDot with vec = qvel).

  Zero for fixed tendons; for spatial tendons the sum over the site-site pieces between
  different bodies of ``(acc1 - acc0) . u + (vel1 - vel0) . perp`` divided by the pulley divisor,
  with u the unit direction, perp its rate of change and acc the Jacobian derivative of the sites
  times qvel (``kinematics.point_jac_dot``). MuJoCo rejects tendon armature on tendons that wrap around geoms, so
  wrapping pieces are left out.
  """
  zero = jnp.zeros(m.ntendon, dtype=d.qvel.dtype)
  path = tendon.path_of(m)
  b0, b1 = m.site_bodyid[path.span_site0], m.site_bodyid[path.span_site1]
  spans = np.flatnonzero((path.span_geom < 0) & (b0 != b1))
  if not spans.size:
    return zero
  b0, b1 = b0[spans], b1[spans]
  p0, p1 = d.site_xpos[path.span_site0[spans]], d.site_xpos[path.span_site1[spans]]
  vel0, acc0, _ = kinematics.point_jac_dot(m, d, p0, b0)
  vel1, acc1, _ = kinematics.point_jac_dot(m, d, p1, b1)
  norm = math.safe_norm(p1 - p0, keepdims=True)
  far = norm > math.MINVAL
  unit = (p1 - p0) / jnp.where(far, norm, 1.0)
  dvel = vel1 - vel0
  perp = jnp.where(far, (dvel - unit * jnp.sum(unit * dvel, -1, keepdims=True))
                   / jnp.where(far, norm, 1.0), 0.0)
  jdot = jnp.sum((acc1 - acc0) * unit, -1) + jnp.sum(dvel * perp, -1)
  pulley = path.span_pulley[spans]
  divisor = jnp.where(pulley >= 0, m.wrap_prm[np.maximum(pulley, 0)], 1.0)
  return jax.ops.segment_sum(jdot / divisor, path.span_ten[spans], num_segments=m.ntendon)


def tendon_bias(m: Model, d: Data) -> jax.Array:
  """Bias force (nv,) of the tendon armature: sum over tendons of ten_J a (Jdot . qvel)
  (mj_tendonBias, which MuJoCo adds to qfrc_bias and qfrc_inverse)."""
  if not m.ntendon:
    return jnp.zeros(m.nv, dtype=d.qvel.dtype)
  armature = _tendon_armature(m)
  return _with_armature(m, lambda: (armature * tendon_jdot(m, d)) @ d.ten_J,
                        lambda: jnp.zeros(m.nv, dtype=d.qvel.dtype))


def tendon_cfrc_ext(m: Model, d: Data, constraint_force: jax.Array | float = 0.0) -> jax.Array:
  """Forces of spatial tendons on bodies (nbody, 6), com-based (torque, force), as MuJoCo 4's
  mj_rnePostConstraint adds them to cfrc_ext.

  A tendon's force along its path is its spring and damper force, the force of the actuators
  that drive it (actuator_force times gear), its armature's inertial force
  ``-a (ten_J qacc + Jdot qvel)`` and ``constraint_force`` (ntendon,), its limit, friction-loss
  and equality forces (``constraint.tendon_forces``). Each straight piece of the path between
  points on different bodies pulls its end points together: ``f u`` at the far end, ``-f u`` at
  the near one, f divided by the pulley divisor. Fixed tendons act on joints only and add
  nothing. Needs qacc.
  """
  spring, damper = passive.tendon_forces(m, d)
  force = (spring + damper - _tendon_armature(m) * (d.ten_J @ d.qacc + tendon_jdot(m, d))
           + constraint_force)
  acts = np.flatnonzero(m.actuator_trntype == TrnType.TENDON) if m.nactuator else []
  if len(acts):
    out = m.actuator_outadr[acts]
    force = force + jax.ops.segment_sum(d.actuator_force[out] * m.actuator_gear[out, 0],
                                        m.actuator_trnid[acts, 0], num_segments=m.ntendon)
  path = tendon.path_of(m)
  if not path.seg_span.size:
    return jnp.zeros((m.nbody, 6), dtype=d.qvel.dtype)
  x0, x1 = d.site_xpos[path.span_site0], d.site_xpos[path.span_site1]
  _, t0, t1, wrapped = tendon.wrap_spans(m, d, path, x0, x1)
  points = jnp.stack([x0, t0, t1, x1], axis=1).reshape(-1, 3)
  ends = points[path.seg_src]                                                    # (nseg, 2, 3)
  delta = ends[:, 1] - ends[:, 0]
  norm = math.safe_norm(delta, keepdims=True)
  unit = delta / jnp.where(norm > math.MINVAL, norm, 1.0)
  span = path.seg_span
  pulley = path.span_pulley[span]
  divisor = jnp.where(pulley >= 0, m.wrap_prm[np.maximum(pulley, 0)], 1.0)
  used = wrapped[span] == path.seg_wrapped
  pull = jnp.where(used, force[path.span_ten[span]] / divisor, 0.0)[:, None] * unit
  frc = jnp.concatenate([-pull, pull])                                           # (2 nseg, 3)
  at = jnp.concatenate([ends[:, 0], ends[:, 1]])
  body = np.concatenate([path.seg_body[:, 0], path.seg_body[:, 1]])
  offset = at - d.subtree_com[m.body_rootid[body]]
  wrench = jnp.concatenate([math.cross(offset, frc), frc], axis=-1)
  cfrc = jax.ops.segment_sum(wrench, body, num_segments=m.nbody)
  return cfrc.at[0].set(0.0)


def factor_m(m: Model, d: Data) -> Data:
  """Computes qLD (nv, nv), the lower Cholesky factor of qM (mj_factorM), tree by tree."""
  with jax.named_scope("factor_m"):
    qLD = cholesky_m(m, d.qM) if d.qM.shape[-1] else d.qM
  return d.replace(qLD=qLD)


def solve_m(m: Model, d: Data, x: jax.Array) -> jax.Array:
  """Returns qM^-1 x via qLD (mj_solveM); x is (nv,) or (nv, k)."""
  if not x.shape[0]:
    return x
  return spd_solve(d.qM, x, d.qLD, tree_blocks(m))


# Dof ids of the kinematic trees, grouped by size (``tree_blocks``): a tuple of (t, k) tables,
# as nested tuples so that it can be a static argument; None for one tree holding every dof.
Blocks = tuple[tuple[tuple[int, ...], ...], ...] | None


def tree_blocks(m: Model) -> Blocks:
  """The dofs of each kinematic tree (a dof without a parent dof and its descendants), trees
  of k dofs together: one (t, k) table per k, a row of increasing dof ids per tree; None where
  one tree holds every dof.

  qM joins a dof to its ancestors only, so it couples no two trees: it and its factor are
  block diagonal, and a factorisation or a solve can run on the trees' blocks, those of one
  size as one batch. Four arms of two hinges factor as four 2 x 2 matrices rather than one
  8 x 8: arithmetic that XLA fuses instead of LAPACK calls, and a fraction of the flops."""
  top = np.argmax(m.dof_ancestor, axis=1)    # each dof's lowest ancestor id: its tree's root
  roots, sizes = np.unique(top, return_counts=True)
  if roots.size <= 1:
    return None
  return tuple(tuple(tuple(int(i) for i in np.flatnonzero(top == root))
                     for root in roots[sizes == k]) for k in np.unique(sizes))


def _block_entries(a: jax.Array, ids: np.ndarray) -> jax.Array:
  """The trees' diagonal blocks (t, k, k) of a (n, n), for dof ids (t, k)."""
  return a[ids[:, :, None], ids[:, None, :]]


def _factor_blocks(blocks: Blocks, a: jax.Array) -> jax.Array:
  """The lower Cholesky factor (n, n) of a (n, n) with qM's sparsity, tree by tree."""
  if blocks is None:
    return cholesky(a)
  factors = [math.cholesky(_block_entries(a, np.asarray(ids))) for ids in blocks]
  flat = jnp.concatenate([f.reshape(-1) for f in factors] + [jnp.zeros(1, a.dtype)])
  # each entry of the factor is a block's, or the trailing zero
  n = a.shape[-1]
  source = np.full((n, n), flat.size - 1)
  start = 0
  for ids in map(np.asarray, blocks):
    t, k = ids.shape
    source[ids[:, :, None], ids[:, None, :]] = start + np.arange(t * k * k).reshape(t, k, k)
    start += t * k * k
  return checkpoint_name(math.take(flat, source.reshape(-1)).reshape(n, n), FACTOR)


def cholesky_m(m: Model, a: jax.Array) -> jax.Array:
  """The lower Cholesky factor (nv, nv) of a matrix a (nv, nv) with qM's sparsity (qM, or qM
  plus a diagonal), factored tree by tree (``tree_blocks``); reads a's lower triangle only."""
  return _factor_blocks(tree_blocks(m), a)


def cho_solve_m(blocks: Blocks, factor: jax.Array, b: jax.Array) -> jax.Array:
  """a^-1 b (n,) or (n, r) from the lower Cholesky factor (n, n) of a matrix with qM's
  sparsity (``cholesky_m``), tree by tree (``blocks``, from ``tree_blocks``)."""
  if blocks is None:
    return math.cho_solve(factor, b)
  pieces = []
  for ids in map(np.asarray, blocks):
    rhs = b[ids] if b.ndim == 2 else b[ids][..., None]       # (t, k, r)
    x = math.cho_solve(_block_entries(factor, ids), rhs)
    pieces.append(x.reshape((ids.size,) + b.shape[1:]))
  order = np.empty(b.shape[0], int)
  order[np.concatenate([np.asarray(ids).reshape(-1) for ids in blocks])] = np.arange(b.shape[0])
  return math.take(jnp.concatenate(pieces), order)


def spd_solve(a: jax.Array, b: jax.Array, factor: jax.Array | None = None,
              blocks: Blocks = None) -> jax.Array:
  """a^-1 b for a symmetric positive definite a (n, n) and b (n,) or (n, k), by Cholesky;
  ``factor``, if given, is a's lower Cholesky factor, which is then not recomputed, and
  ``blocks`` the trees of qM's sparsity where a has it (``tree_blocks``).

  Differentiated as a solve: the tangent is a^-1 (db - da x), which reuses the factor, so
  neither mode differentiates the factorisation (a factor passed in gets no derivative).
  """
  if factor is None:  # its tangent would be discarded: do not compute it
    factor = _factor_blocks(blocks, jax.lax.stop_gradient(a))
  return _factored_solve(blocks, a, factor, b)


def cholesky(a: jax.Array) -> jax.Array:
  """The lower Cholesky factor of a symmetric positive definite a (n, n).

  Reads a's lower triangle only: every matrix factored here is symmetric by construction, and
  jnp's default averaging of a and a' (a transposing copy of a batch of matrices) cost as much
  as the factorisation itself on a CPU."""
  return checkpoint_name(math.cholesky(a), FACTOR)


@functools.partial(jax.custom_jvp, nondiff_argnums=(0,))
def _factored_solve(blocks: Blocks, a: jax.Array, factor: jax.Array, b: jax.Array) -> jax.Array:
  return cho_solve_m(blocks, factor, b)


@_factored_solve.defjvp
def _factored_solve_jvp(blocks: Blocks, primals: tuple, tangents: tuple):
  a, factor, b = primals
  da, _, db = tangents
  x = _factored_solve(blocks, a, factor, b)
  return x, cho_solve_m(blocks, factor, db - da @ x)
