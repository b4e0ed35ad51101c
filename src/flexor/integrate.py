"""Time integration: ``integrate_pos``, ``euler``, ``rk4``, ``implicit``, ``implicitfast``, ``step``.

Each integrator follows its MuJoCo counterpart in ``engine_forward.c`` (``mj_Euler``,
``mj_RungeKutta``, ``mj_implicit``) and ends in ``_advance`` (``mj_advance``): activations, then
velocities, then positions with the new velocities (semi-implicit), then time. The integrators
expect ``d`` to hold the output of ``forward`` at the current state; ``step`` runs both.

Two behaviours of MuJoCo 4 that older sources and MJX lack were found by comparing steps with
the C engine, and are reproduced: RK4 integrates quaternions as a Runge-Kutta-Munthe-Kaas method
(``_dexpinv``), and implicitfast integrates the gyroscopic torque of childless free bodies
implicitly (``_gyro_blocks``).

MuJoCo builds the velocity derivative ``qDeriv`` of the implicit integrators analytically
(``mjd_smooth_vel``). Here its passive part is analytic too (dampers; the fluid forces by
``jax.jacfwd``, and only in a moving medium) and its bias part, which only ``implicit`` and
implicitfast's free bodies need, is ``jax.jacfwd`` of RNE with respect to qvel; all restricted to
MuJoCo's sparsity (a dof and its ancestors or descendants): entries between dofs of unrelated
branches, e.g. a fixed tendon's damping across two trees, are dropped there and here alike.
The actuator part reproduces MuJoCo's deliberate approximation (it drops saturated actuators and
ignores the tendon force scaling), ``actuation.actuator_vel_deriv``, so that implicit steps match
MuJoCo's rather than the exact derivative's.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from flexor import actuation, history, kinematics, math, passive, sensor
from flexor.crb import spd_solve
from flexor.forward import forward
from flexor.rne import rne
from flexor.types import Data, DisableBit, IntegratorType, JointType, Model

# mj_RungeKutta's N = 4 tableau. A is zero except A[i, i-1], so stage i evaluates the derivative
# at the initial state advanced by _RK4_A[i-1] times the derivative of stage i-1; C = rowsum(A).
_RK4_A = (0.5, 0.5, 1.0)
_RK4_B = (1.0 / 6.0, 1.0 / 3.0, 1.0 / 3.0, 1.0 / 6.0)


def _position_groups(m: Model):
  """Static qpos/qvel addresses of the scalar and the quaternion coordinates.

  Returns:
    lin_q, lin_v: (nlin,) addresses of hinge and slide coordinates and free-joint positions,
      which all advance by ``dt * qvel``.
    quat_q (nquat, 4), quat_v (nquat, 3): ball and free-joint quaternions and the local angular
      velocities that rotate them.
  """
  jtype, qadr, vadr = m.jnt_type, m.jnt_qposadr, m.jnt_dofadr
  scalar = (jtype == JointType.HINGE) | (jtype == JointType.SLIDE)
  free = jtype == JointType.FREE
  ball = jtype == JointType.BALL
  lin_q = np.concatenate([qadr[scalar], (qadr[free, None] + np.arange(3)).ravel()])
  lin_v = np.concatenate([vadr[scalar], (vadr[free, None] + np.arange(3)).ravel()])
  quat_q = np.concatenate([qadr[ball, None] + np.arange(4), qadr[free, None] + 3 + np.arange(4)])
  quat_v = np.concatenate([vadr[ball, None] + np.arange(3), vadr[free, None] + 3 + np.arange(3)])
  return lin_q.astype(np.int32), lin_v.astype(np.int32), quat_q.astype(np.int32), quat_v.astype(np.int32)


def integrate_pos(m: Model, qpos: jax.Array, qvel: jax.Array, dt: jax.Array | float) -> jax.Array:
  """Advances positions by velocities over time dt, as ``mj_integratePos``.

  Hinge and slide coordinates and free-joint positions add ``dt * qvel``; ball and free-joint
  quaternions are normalized, then rotated by their local angular velocity (``mju_quatIntegrate``).

  Args:
    qpos: (nq,) positions.
    qvel: (nv,) velocities.
    dt: () time step in s.
  Returns:
    (nq,) the new positions.
  """
  qpos, qvel = jnp.asarray(qpos), jnp.asarray(qvel)
  lin_q, lin_v, quat_q, quat_v = _position_groups(m)
  if lin_q.size:
    qpos = qpos.at[lin_q].add(dt * qvel[lin_v])
  if quat_q.size:
    # Normalizing first, as MuJoCo does, maps a degenerate (near-zero) quaternion to the identity.
    quat = math.quat_integrate(math.quat_normalize(qpos[quat_q]), qvel[quat_v], dt)
    qpos = qpos.at[quat_q].set(quat)
  return qpos


def _advance(m: Model, d: Data, act_dot: jax.Array, qacc: jax.Array,
             qvel: jax.Array | None = None, recorded: bool = False) -> Data:
  """Records the history buffers (``history.advance``), then advances act, qvel, qpos and time
  by one time step (``mj_advance``).

  Activations advance as ``actuation.advance_act`` describes (exact integration of filterexact
  dynamics, actrange clamping, setpoint wrapping). Positions advance with ``qvel`` if given (RK4),
  else with the new velocities (semi-implicit Euler); the plastic state follows them
  (``passive.update_plastic``). Sets ``warning_nan`` when the new state is not finite.

  Args:
    act_dot: (na,) activation derivatives.
    qacc: (nv,) accelerations.
    qvel: optional (nv,) velocities for the position update.
  """
  h = m.opt.timestep
  if not recorded:
    d = history.advance(m, d, sensor.compute)
  act = d.act
  if m.na and not m.opt.disabled(DisableBit.ACTUATION):
    act = actuation.advance_act(m, d, act_dot)
  new_qvel = d.qvel + h * qacc
  vel = new_qvel if qvel is None else qvel
  qpos = integrate_pos(m, d.qpos, vel, h)
  plastic = passive.update_plastic(m, d, qpos, h * vel)
  finite = (jnp.all(jnp.isfinite(qpos)) & jnp.all(jnp.isfinite(new_qvel))
            & jnp.all(jnp.isfinite(act)))
  return d.replace(qpos=qpos, qvel=new_qvel, act=act, time=d.time + h, qacc_warmstart=d.qacc,
                   plastic=plastic, warning_nan=d.warning_nan | ~finite)


def euler(m: Model, d: Data) -> Data:
  """Semi-implicit Euler step (``mj_Euler``): advances qpos, qvel, act, time.

  With dof damping (see ``passive.dof_damper_deriv``; unless the eulerdamp or damper flag is
  disabled) the damping is integrated implicitly: ``qacc = (qM + h diag(B))^-1 (qfrc_smooth +
  qfrc_constraint)`` with B the damper force's derivative (polynomial and actuator damping
  included). Without it, ``qacc`` from ``forward`` is used as is.
  """
  with jax.named_scope("euler"):
    qacc = d.qacc
    if m.nv and not (m.opt.disabled(DisableBit.EULERDAMP) or m.opt.disabled(DisableBit.DAMPER)):
      h = m.opt.timestep
      deriv, any_damping = passive.dof_damper_deriv(m, d.qvel)
      damped = spd_solve(d.qM + jnp.diag(h * deriv), d.qfrc_smooth + d.qfrc_constraint)
      # The damping is traced, so MuJoCo's "any damping" test is a select; both branches are finite.
      qacc = jnp.where(any_damping, damped, qacc)
    return _advance(m, d, d.act_dot, qacc)


def _dexpinv(m: Model, theta: jax.Array, qvel: jax.Array) -> jax.Array:
  """Velocities whose position integral is consistent across RK stages (Munthe-Kaas), (nv,).

  A stage's ball and free-joint quaternions are q0 * exp(theta); their local angular velocity w
  maps to the derivative of theta through the inverse exponential differential, which MuJoCo
  truncates after the second order: w + theta x w / 2 + theta x (theta x w) / 12. Scalar and
  translational velocities are unchanged.

  Args:
    theta: (nv,) rotation vectors (h times the velocity that led to the stage).
    qvel: (nv,) the stage's velocities.
  """
  _, _, _, quat_v = _position_groups(m)
  if not quat_v.size:
    return qvel
  t, w = theta[quat_v], qvel[quat_v]
  tw = math.cross(t, w)
  return qvel.at[quat_v].set(w + 0.5 * tw + math.cross(t, tw) / 12.0)


def rk4(m: Model, d: Data) -> Data:
  """Explicit 4th-order Runge-Kutta step (``mj_RungeKutta`` with N = 4).

  Stages 2-4 run ``forward`` at intermediate states and times; the final update combines the
  stage accelerations and activation derivatives with weights B. Quaternions are integrated on
  the rotation group as MuJoCo 4 does (Runge-Kutta-Munthe-Kaas): the position velocities of the
  stages pass through ``_dexpinv`` before they are combined. As in MuJoCo, most derived fields
  of the result (qacc, qM, ...) are those of the last stage; tendon lengths and Jacobians and
  actuator velocities are those of the first.
  """
  with jax.named_scope("rk4"):
    h = m.opt.timestep
    qpos0, qvel0, act0, time0 = d.qpos, d.qvel, d.act, d.time
    b0 = _RK4_B[0]
    sums = (b0 * qvel0, b0 * d.qacc, b0 * d.act_dot)

    def stage(carry, coef):
      (sum_kvel, sum_qacc, sum_act_dot), (kvel, kqacc, kact_dot), dk = carry
      a, b = coef[0], coef[1]
      dpos = a * kvel
      qpos = integrate_pos(m, qpos0, dpos, h)
      qvel = qvel0 + h * (a * kqacc)
      act = act0 + h * (a * kact_dot)
      dk = forward(m, dk.replace(qpos=qpos, qvel=qvel, act=act, time=time0 + a * h),
                   sensors=False)
      kvel = _dexpinv(m, h * dpos, qvel)
      sums = (sum_kvel + b * kvel, sum_qacc + b * dk.qacc, sum_act_dot + b * dk.act_dot)
      return (sums, (kvel, dk.qacc, dk.act_dot), dk), None

    # One scan over the three stages keeps a single copy of forward in the compiled program.
    coefs = jnp.asarray(np.stack([_RK4_A, _RK4_B[1:]], axis=-1), dtype=qvel0.dtype)
    start = d
    (sums, _, d), _ = jax.lax.scan(stage, (sums, (qvel0, d.qacc, d.act_dot), d), coefs)
    # MuJoCo 4 advances with the tendon lengths, Jacobians and actuator velocities of the start
    # of the step (measured): the plastic update and the bristle states of dcmotors use them;
    # its history buffers record the start of the step too (measured: delayed sensors' values).
    d = d.replace(qpos=qpos0, qvel=qvel0, act=act0, time=time0, ten_length=start.ten_length,
                  ten_J=start.ten_J, actuator_velocity=start.actuator_velocity,
                  history=history.advance(m, start, sensor.compute).history)
    return _advance(m, d, sums[2], sums[1], sums[0], recorded=True)


def _vel_jacobians(m: Model, d: Data, bias: bool) -> tuple[jax.Array, ...]:
  """Derivatives with respect to qvel on MuJoCo's sparsity, each (nv, nv).

  Returns d(qfrc_passive + qfrc_actuator)/d(qvel), and, if ``bias``, -d(qfrc_bias)/d(qvel).
  The passive part is analytic (``passive.passive_vel_deriv``), the actuator part MuJoCo's own
  approximation (``actuation.actuator_vel_deriv``); the bias part is forward-mode AD of RNE.
  """
  related = m.dof_ancestor | m.dof_ancestor.T
  jacs = (passive.passive_vel_deriv(m, d) + actuation.actuator_vel_deriv(m, d),)
  if bias:
    # MuJoCo's mjd_rne_vel leaves out the tendon armature's bias (mj_tendonBias): rne alone.
    rne_vel = lambda qvel: -rne(m, kinematics.com_vel(m, d.replace(qvel=qvel)))
    jacs += (jax.jacfwd(rne_vel)(d.qvel),)
  return tuple(jnp.where(related, jac, 0.0) for jac in jacs)


def _gyro_blocks(m: Model) -> np.ndarray:
  """(nv, nv) bool: the rotational 3x3 block of each free joint whose body has no children.

  MuJoCo 4's implicitfast integrates the gyroscopic torque of such single floating bodies
  implicitly: their block of -d(qfrc_bias)/d(qvel) joins qDeriv, unsymmetrized.
  """
  alone = m.body_subtree.sum(axis=1) == 1
  free = (m.jnt_type == JointType.FREE) & alone[m.jnt_bodyid]
  dofs = m.jnt_dofadr[free][:, None] + 3 + np.arange(3)
  mask = np.zeros((m.nv, m.nv), dtype=bool)
  mask[dofs[:, :, None], dofs[:, None, :]] = True
  return mask


def implicit(m: Model, d: Data) -> Data:
  """Step implicit in velocity (``mj_implicit``, integrator implicit).

  ``qacc = (qM - h qDeriv)^-1 (qfrc_smooth + qfrc_constraint)`` with qDeriv the derivative of
  passive, actuator and (minus) bias forces with respect to qvel; the matrix is not symmetric, so
  it is solved by LU.
  """
  with jax.named_scope("implicit"):
    qacc = d.qacc
    if m.nv:
      smooth, bias = _vel_jacobians(m, d, bias=True)
      a = d.qM - m.opt.timestep * (smooth + bias)
      qacc = jnp.linalg.solve(a, d.qfrc_smooth + d.qfrc_constraint)
    return _advance(m, d, d.act_dot, qacc)


def implicitfast(m: Model, d: Data) -> Data:
  """Step implicit in velocity without most of the Coriolis derivative (integrator implicitfast).

  As ``implicit``, but qDeriv is the symmetrized derivative of passive and actuator forces
  (MuJoCo symmetrizes the fluid-force derivative and keeps the lower triangle), plus the
  gyroscopic blocks of childless free bodies (``_gyro_blocks``). Without such bodies the matrix is
  symmetric positive definite and solved by Cholesky, else by LU.
  """
  with jax.named_scope("implicitfast"):
    qacc = d.qacc
    if m.nv:
      gyro = _gyro_blocks(m)
      jacs = _vel_jacobians(m, d, bias=bool(gyro.any()))
      deriv = 0.5 * (jacs[0] + jacs[0].T)
      qfrc = d.qfrc_smooth + d.qfrc_constraint
      if gyro.any():
        a = d.qM - m.opt.timestep * (deriv + jnp.where(gyro, jacs[1], 0.0))
        qacc = jnp.linalg.solve(a, qfrc)
      else:
        qacc = spd_solve(d.qM - m.opt.timestep * deriv, qfrc)
    return _advance(m, d, d.act_dot, qacc)


# The step function of each IntegratorType: ``step`` runs ``forward`` and then it.
INTEGRATORS = {
    IntegratorType.EULER: euler,
    IntegratorType.RK4: rk4,
    IntegratorType.IMPLICIT: implicit,
    IntegratorType.IMPLICITFAST: implicitfast,
}


def _loops_saveable(prim: jax.extend.core.Primitive, *_, **__) -> bool:
  """``jax.checkpoint`` policy of a step: keep the results of its loops (the solver's iterations,
  the convex collision searches, the active-row passes) for the backward pass."""
  return prim is jax.lax.while_p


def _step(m: Model, d: Data) -> Data:
  integrator = INTEGRATORS[IntegratorType(m.opt.integrator)]
  return integrator(m, forward(m, d))


# Reverse mode recomputes a step from its input and the loops' saved results rather than storing
# its hundreds of intermediate arrays: a rollout gradient's memory falls 35-80x, and on a CPU,
# where a step's backward pass is bound by the number of kernels it runs, the smooth models'
# gradients get faster, and the contact models' take -10% to +20% longer (benchmarks/README.md).
# prevent_cse=False: within a scan, as in a rollout, XLA cannot merge the recomputation back into
# the forward pass, and outside one, merging only forgoes the memory saving.
_remat_step = jax.checkpoint(_step, policy=_loops_saveable, prevent_cse=False)


def step(m: Model, d: Data) -> Data:
  """Advances the simulation by one time step (``mj_step``): ``forward``, then the integrator
  chosen by the static ``m.opt.integrator``.

  Never raises under jit: a non-finite new state sets ``warning_nan`` (sticky; MuJoCo would warn
  and reset the state instead). In reverse mode the step is rematerialised (``jax.checkpoint``):
  the backward pass recomputes the step's forward, all but its loops, instead of storing it.
  """
  with jax.named_scope("step"):
    return _remat_step(m, d)
