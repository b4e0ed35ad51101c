"""Time integration: ``integrate_pos``, ``euler``, ``rk4``, ``implicit``, ``implicitfast``,
``step``, and flexor's own ``adaptive`` substeps.

Each integrator follows its MuJoCo counterpart in ``engine_forward.c`` (``mj_Euler``,
``mj_RungeKutta``, ``mj_implicit``) and ends in ``_advance`` (``mj_advance``): activations, then
velocities, then positions with the new velocities (semi-implicit), then time. The integrators
expect ``d`` to hold the output of ``forward`` at the current state; ``step`` runs both.

Two behaviours of MuJoCo 4 that older sources and MJX lack were found by comparing steps with
the C engine, and are reproduced: RK4 integrates quaternions as a Runge-Kutta-Munthe-Kaas method
(``_dexpinv``), and implicitfast integrates the gyroscopic torque of free-standing bodies
implicitly, their fluid forces' derivative unsymmetrized (``_free_blocks``).

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

from flexor import actuation, crb, history, kinematics, math, passive, sensor, solver
from flexor.crb import spd_solve
from flexor.forward import ACCELERATION, applied_forces, forward, solve_dynamics
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
  new_qvel = d.qvel + h * qacc
  vel = new_qvel if qvel is None else qvel
  return _finish(m, d, act_dot, integrate_pos(m, d.qpos, vel, h), new_qvel, h * vel, recorded)


def _finish(m: Model, d: Data, act_dot: jax.Array, qpos: jax.Array, qvel: jax.Array,
            dpos: jax.Array, recorded: bool = False) -> Data:
  """The rest of ``mj_advance`` once the new qpos (nq,) and qvel (nv,) are known: the history
  buffers, the activations, the plastic state (which follows the displacement ``dpos`` (nv,)),
  time and ``warning_nan``."""
  if not recorded:
    d = history.advance(m, d, sensor.compute)
  act = d.act
  if m.na and not m.opt.disabled(DisableBit.ACTUATION):
    act = actuation.advance_act(m, d, act_dot)
  plastic = passive.update_plastic(m, d, qpos, dpos)
  finite = (jnp.all(jnp.isfinite(qpos)) & jnp.all(jnp.isfinite(qvel))
            & jnp.all(jnp.isfinite(act)))
  return d.replace(qpos=qpos, qvel=qvel, act=act, time=d.time + m.opt.timestep,
                   qacc_warmstart=d.qacc, plastic=plastic, warning_nan=d.warning_nan | ~finite)


def euler(m: Model, d: Data) -> Data:
  """Semi-implicit Euler step (``mj_Euler``): advances qpos, qvel, act, time.

  With dof damping (see ``passive.dof_damper_deriv``; unless the eulerdamp or damper flag is
  disabled) the damping is integrated implicitly: ``qacc = (qM + h diag(B))^-1 (qfrc_smooth +
  qfrc_constraint)`` with B the damper force's derivative (polynomial and actuator damping
  included). Without it, ``qacc`` from ``forward`` is used as is; a Model known while tracing
  to have no damper at all compiles no solve (``passive.if_dof_dampers``).
  """
  with jax.named_scope("euler"):
    qacc = d.qacc
    if m.nv and not (m.opt.disabled(DisableBit.EULERDAMP) or m.opt.disabled(DisableBit.DAMPER)):
      def implicit() -> jax.Array:
        deriv, any_damping = passive.dof_damper_deriv(m, d.qvel)
        damping = m.opt.timestep * deriv
        factor = crb.cholesky_m(m, jax.lax.stop_gradient(d.qM + jnp.diag(damping)))
        damped = solve_dynamics(m, d, d.qfrc_smooth + d.qfrc_constraint,
                                applied_forces(m, d) + (d.qfrc_constraint,), factor, damping)
        # MuJoCo's "any damping" test; on traced damping a select, both of whose values are
        # finite. Where it is known, forward's qacc and its gradient path leave the program.
        return math.known_where(any_damping, damped, qacc)

      qacc = passive.if_dof_dampers(m, implicit, lambda: qacc)
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


def _free_blocks(m: Model) -> np.ndarray:
  """(nv, nv) bool: the 6 x 6 block of each free-standing body (``body_freestanding``).

  MuJoCo 4's implicitfast solves each such block on its own, unsymmetrized: its ellipsoid fluid
  derivative as it is, and the derivative of the bias force with respect to the angular velocity
  (the gyroscopic torque, and the linear force's where the centre of mass is off the origin).
  """
  dofs = m.jnt_dofadr[m.body_freestanding[m.jnt_bodyid] & (m.jnt_type == JointType.FREE)]
  block = (dofs[:, None] + np.arange(6))[:, :, None]
  mask = np.zeros((m.nv, m.nv), dtype=bool)
  mask[block, np.swapaxes(block, 1, 2)] = True
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
  (MuJoCo symmetrizes the fluid-force derivative and keeps the lower triangle), except in the
  blocks of free-standing bodies, which keep theirs and add the bias force's derivative with
  respect to their angular velocity (``_free_blocks``). Without such bodies the matrix is
  symmetric positive definite and solved by Cholesky, else by LU.
  """
  with jax.named_scope("implicitfast"):
    qacc = d.qacc
    if m.nv:
      free = _free_blocks(m)
      jacs = _vel_jacobians(m, d, bias=bool(free.any()))
      deriv = 0.5 * (jacs[0] + jacs[0].T)
      qfrc = d.qfrc_smooth + d.qfrc_constraint
      if free.any():
        angular = free & (np.arange(m.nv) - m.jnt_dofadr[m.dof_jntid] >= 3)  # columns
        deriv = jnp.where(free, jacs[0], deriv) + jnp.where(angular, jacs[1], 0.0)
        qacc = jnp.linalg.solve(d.qM - m.opt.timestep * deriv, qfrc)
      else:
        qacc = spd_solve(d.qM - m.opt.timestep * deriv, qfrc)
    return _advance(m, d, d.act_dot, qacc)


# Bogacki-Shampine 3(2), first same as last. Stage i (1-3) evaluates the derivative at the
# substep's start advanced by dt * sum_j A[i-1, j] k_j; the last row is the third-order solution,
# so stage 3 is the derivative at the new state and opens the next substep. E weighs the stages
# into the difference between the third- and the second-order solutions (the error estimate).
_BS_A = ((0.5, 0.0, 0.0, 0.0), (0.0, 0.75, 0.0, 0.0), (2 / 9, 1 / 3, 4 / 9, 0.0))
_BS_C = (0.5, 0.75, 1.0)
_BS_E = (2 / 9 - 7 / 24, 1 / 3 - 1 / 4, 4 / 9 - 1 / 3, -1 / 8)
_CHUNK = 8  # adaptive tries per chunk; a finished step skips the remaining chunks at once


def adaptive(m: Model, d: Data) -> Data:
  """Step of ``opt.timestep`` made of adaptive substeps (flexor's own; DiffMJX's remedy for the
  gradient error of stiff contacts at a fixed time step, Paulus et al., ICLR 2026).

  Positions and velocities follow the continuous dynamics qdot = qvel, vdot = qacc(q, v), with
  ``forward`` (collision and constraint solve included) evaluated at every stage, integrated by
  an embedded Bogacki-Shampine 3(2) pair on the rotation group (Munthe-Kaas, as ``rk4``). Each
  substep's error, ``|E| / (atol + rtol |y|)`` over positions (in the tangent space, where a
  rotation's magnitude counts as 1) and velocities in the root mean square, decides whether it is
  kept; the next size is ``dt * clip(0.9 / err**(1/3), 0.2, 5)`` and the first try is the whole
  step. There are ``opt.adaptive_substeps`` tries at most (``lax.scan``s, so reverse mode works;
  a finished step skips the rest by ``lax.cond``, in chunks of eight; under ``vmap`` the conds
  become selects and every world runs all tries); the last one covers what is left of the step
  whatever its error. Step sizes and decisions carry no derivative: the gradient is that of the
  accepted substeps, which approaches the continuous flow's as rtol falls.

  Controls and activations are held over the step, and activations then advance as in ``euler``;
  damping is integrated explicitly (no eulerdamp). The derived fields of the result (qacc,
  contacts, ...) are those of the start of the step. The constraint model is MuJoCo's for
  ``opt.timestep`` (refsafe's 2 * timestep floor on solref's time constant included), whatever
  the substeps.
  """
  with jax.named_scope("adaptive"):
    h = m.opt.timestep
    rtol, atol = m.opt.adaptive_rtol, m.opt.adaptive_atol
    lin_q, lin_v, _, _ = _position_groups(m)
    dtype = d.qvel.dtype
    tableau = jnp.asarray(np.column_stack([_BS_A, _BS_C]), dtype=dtype)
    err_weights = jnp.asarray(_BS_E, dtype=dtype)

    def magnitude(qpos: jax.Array) -> jax.Array:
      return jnp.ones_like(d.qvel).at[lin_v].set(jnp.abs(qpos[lin_q]))

    def attempt(carry, last):
      left, dt, qpos, qvel, kacc0 = carry
      # Step sizes and decisions are not differentiated: the gradient is the accepted substeps'.
      dt = jax.lax.stop_gradient(jnp.where(last | (dt >= left), left, dt))
      start = d.time + h - left

      def stage(ks, row_index):
        row, i = row_index
        kpos, kacc = ks
        theta = dt * (row[:4] @ kpos)
        vel = qvel + dt * (row[:4] @ kacc)
        dk = d.replace(qpos=integrate_pos(m, qpos, theta, 1.0), qvel=vel,
                       time=start + row[4] * dt, qacc_warmstart=kacc[i - 1])
        acc = forward(m, dk, sensors=False).qacc
        ks = (kpos.at[i].set(_dexpinv(m, theta, vel)), kacc.at[i].set(acc))
        return ks, (theta, vel)

      zeros = jnp.zeros((3, m.nv), dtype)
      ks = (jnp.concatenate([qvel[None], zeros]), jnp.concatenate([kacc0[None], zeros]))
      (kpos, kacc), (theta, vel) = jax.lax.scan(stage, ks, (tableau, jnp.arange(1, 4)))
      theta, vel = theta[-1], vel[-1]
      new_qpos = integrate_pos(m, qpos, theta, 1.0)

      scale_pos = atol + rtol * jnp.maximum(magnitude(qpos), magnitude(new_qpos))
      scale_vel = atol + rtol * jnp.maximum(jnp.abs(qvel), jnp.abs(vel))
      ratio = jnp.concatenate([dt * (err_weights @ kpos) / scale_pos,
                               dt * (err_weights @ kacc) / scale_vel])
      err = jax.lax.stop_gradient(jnp.sqrt(jnp.mean(ratio**2)))
      keep = last | (err <= 1.0)
      grow = jnp.clip(0.9 * jnp.maximum(err, 1e-10) ** (-1.0 / 3.0), 0.2, 5.0)
      pick = lambda new, old: jnp.where(keep, new, old)
      carry = (pick(left - dt, left), dt * grow, pick(new_qpos, qpos), pick(vel, qvel),
               pick(kacc[3], kacc0))
      return carry, pick(theta, jnp.zeros_like(theta))

    # Reverse mode then keeps only each try's input and recomputes the tries that ran.
    remat_attempt = jax.checkpoint(attempt, prevent_cse=False)
    tries = m.opt.adaptive_substeps

    def substep(state, k):
      carry, dpos = state
      carry, step_dpos = jax.lax.cond((carry[0] > 0) & (k < tries), remat_attempt,
                                      lambda c, _: (c, jnp.zeros_like(dpos)), carry, k == tries - 1)
      return (carry, dpos + step_dpos), None

    def chunk(state, ks):
      # A finished step skips whole chunks: in reverse mode, each skipped try still costs a pass.
      run = lambda state: jax.lax.scan(substep, state, ks)[0]
      return jax.lax.cond(state[0][0] > 0, run, lambda state: state, state), None

    carry = (h, h, d.qpos, d.qvel, d.qacc)  # what is left of the step, the next try's size, y, k1
    ks = jnp.arange(-(-tries // _CHUNK) * _CHUNK).reshape(-1, _CHUNK)
    ((_, _, qpos, qvel, _), dpos), _ = jax.lax.scan(chunk, (carry, jnp.zeros_like(d.qvel)), ks)
    return _finish(m, d, d.act_dot, qpos, qvel, dpos)


def with_adaptive_integration(m: Model, max_substeps: int = 64, rtol: float | jax.Array = 1e-3,
                              atol: float | jax.Array = 1e-6) -> Model:
  """``m`` stepped by ``adaptive`` substeps (at most ``max_substeps`` tries a step) to the
  tolerances ``rtol`` and ``atol``; ``max_substeps=0`` restores ``opt.integrator``."""
  if max_substeps < 0:
    raise ValueError(f"max_substeps must be >= 0, got {max_substeps}")
  dtype = m.opt.timestep.dtype
  return m.replace(opt=m.opt.replace(adaptive_substeps=int(max_substeps),
                                     adaptive_rtol=jnp.asarray(rtol, dtype),
                                     adaptive_atol=jnp.asarray(atol, dtype)))


# The step function of each IntegratorType: ``step`` runs ``forward`` and then it.
INTEGRATORS = {
    IntegratorType.EULER: euler,
    IntegratorType.RK4: rk4,
    IntegratorType.IMPLICIT: implicit,
    IntegratorType.IMPLICITFAST: implicitfast,
}


def _loops_saveable(prim: jax.extend.core.Primitive, *args, **params) -> bool:
  """``jax.checkpoint`` policy of a step: keep for the backward pass the results of its loops
  (the collision searches, the active-row passes), the values named ``solver.LOOP_RESULT``
  (the solvers' results, from which the backward pass recomputes what the tangent needs) and
  those named ``kinematics.FRAMES`` (the world frames, all that the position tangents need from
  forward kinematics, whose recomputation was a smooth model's most kernels), ``crb.FACTOR``
  (the Cholesky factors, whose solves' tangents reuse them) and ``forward.ACCELERATION`` (the
  accelerations of ``forward.solve_dynamics``, whose tangent needs them)."""
  return prim is jax.lax.while_p or _named_saveable(prim, *args, **params)


_named_saveable = jax.checkpoint_policies.save_only_these_names(
    solver.LOOP_RESULT, kinematics.FRAMES, crb.FACTOR, ACCELERATION)


def _step(m: Model, d: Data) -> Data:
  if m.opt.adaptive_substeps and m.nv:
    return adaptive(m, forward(m, d))
  integrator = INTEGRATORS[IntegratorType(m.opt.integrator)]
  return integrator(m, forward(m, d))


def _remat_step(m: Model, d: Data) -> Data:
  """``_step`` rematerialised in reverse mode: it recomputes a step from its input and the
  values its policy keeps (``_loops_saveable``) rather than storing its hundreds of intermediate
  arrays. A rollout gradient's memory falls 13-46x, and on a CPU, where a step's backward pass
  is bound by the number of kernels it runs, the smooth models' gradients get faster, and the
  contact models' take -10% to +20% longer (benchmarks/README.md).

  The Model is closed over rather than passed in, so that where it is known while tracing it
  stays known inside the checkpoint (``math.known_cond``). prevent_cse=False: within a scan, as
  in a rollout, XLA cannot merge the recomputation back into the forward pass, and outside one,
  merging only forgoes the memory saving."""
  return jax.checkpoint(lambda d: _step(m, d), policy=_loops_saveable, prevent_cse=False)(d)


def step(m: Model, d: Data) -> Data:
  """Advances the simulation by one time step (``mj_step``): ``forward``, then the integrator
  chosen by the static ``m.opt.integrator``, or ``adaptive`` where ``m.opt.adaptive_substeps``
  (and there are dofs).

  Never raises under jit: a non-finite new state sets ``warning_nan`` (sticky; MuJoCo would warn
  and reset the state instead). In reverse mode the step is rematerialised (``jax.checkpoint``):
  the backward pass recomputes the step's forward, all but its loops, instead of storing it.
  """
  with jax.named_scope("step"):
    return _remat_step(m, d)
