"""Passive forces (mj_passive): springs, dampers, gravity compensation, fluid forces, plasticity.

Springs and dampers (mj_springdamper), with MuJoCo 4.0's polynomial profiles (``mju_polyForce``):

* a spring of stiffness ``k`` and higher-order coefficients ``(b, c)`` (``*_stiffnesspoly``)
  pushes back with ``-x (k + b x + c x^2)`` at displacement ``x``; a damper of damping ``a`` and
  ``(b, c)`` (``*_dampingpoly``) with ``-v (a + b |v| + c v^2)`` at velocity ``v``.
* Joint springs act on hinge/slide coordinates; on ball and free rotations (and free
  translations) the displacement is a 3-vector ``dif`` and the force ``-dif * poly(|dif|)``.
  Their reference is ``qpos_spring``, or, for plastic joints, the state in ``Data.plastic``.
* Dof dampers act on every dof. Tendon springs act outside the dead band ``[lower, upper]``
  (``tendon_lengthspring`` or, for plastic tendons, ``Data.plastic``), tendon dampers on
  ``ten_velocity``; both map to joint space through ``ten_J``.
* Actuators with a joint or tendon transmission add ``actuator_damping`` and
  ``actuator_dampingpoly`` times gear^2 to their target's damping (MuJoCo 4's reflected damping,
  ``mj_actuatorDamping``; also when actuation or the actuator's group is disabled).

Ideal elasto-plasticity (MuJoCo 4.0's ``springyield``): a joint or tendon with positive
``springyield`` at compile time owns entries of ``Data.plastic`` at ``jnt_plasticadr`` /
``tendon_plasticadr`` (1 for hinge/slide, a quaternion for ball, ``(lower, upper)`` for tendons),
initialised from ``qpos_spring`` / ``tendon_lengthspring``. The springs above use it as their
reference; ``update_plastic`` moves it after each integration step (see there).

Which terms MuJoCo 4.0 computes under the disable flags (measured with MuJoCo 4.0.0):
``DisableBit.SPRING`` zeroes ``qfrc_spring`` (and freezes the plastic state), ``DisableBit.DAMPER``
zeroes ``qfrc_damper``, both together zero every passive force (gravity compensation and fluid
included), and ``DisableBit.GRAVITY`` zeroes ``qfrc_gravcomp``.

Fluid forces (inertia-box and ellipsoid models) are in ``flexor.fluid``. MuJoCo 4.0's contact
adhesion pulls each adhesive contact's geoms together along its normal (``qfrc_adhesion``); its
constraint rows compensate under compression (``flexor.constraint.reference_constraint``). Not
modelled: flex elasticity, and MuJoCo 4.0's passive contact forces.
"""

from __future__ import annotations

import functools
import operator
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

from flexor import collision, constraint, kinematics, math
from flexor.fluid import fluid, fluid_vel_deriv
from flexor.types import Data, DisableBit, JointType, Model, TrnType


def poly_force(linear: jax.Array, poly: jax.Array, x: jax.Array, odd: bool) -> jax.Array:
  """Coefficient p(x) = linear + poly[0] x + poly[1] x^2 of a force -x p(x) (mju_polyForce).

  Args:
    linear: (...,) linear coefficient.
    poly: (..., 2) higher-order coefficients.
    x: (...,) displacement or velocity.
    odd: use |x| in place of x (damping: the force is then an odd function of x).
  """
  x = jnp.abs(x) if odd else x
  return linear + poly[..., 0] * x + poly[..., 1] * (x * x)


def poly_deriv(linear: jax.Array, poly: jax.Array, v: jax.Array) -> jax.Array:
  """d/dv of ``v p(|v|)`` (poly_force with odd=True): ``linear + 2 poly[0] |v| + 3 poly[1] v^2``
  (mjd_xPolyForce), shapes as poly_force's."""
  a = jnp.abs(v)
  return linear + 2.0 * poly[..., 0] * a + 3.0 * poly[..., 1] * (a * a)


def reflected(m: Model, value: jax.Array, target: str) -> jax.Array:
  """Sum of ``value * gear^2`` over the actuators acting on each joint or tendon.

  MuJoCo 4's reflected actuator damping and armature (mj_actuatorDamping, mj_actuatorArmature):
  actuators with a joint or jointinparent transmission contribute to their joint, those with a
  tendon transmission to their tendon, scaled by the square of their first gear component.

  Args:
    value: (nactuator, ...) per-actuator coefficient.
    target: "jnt" or "tendon".
  Returns:
    (njnt, ...) or (ntendon, ...).
  """
  kinds = (TrnType.JOINT, TrnType.JOINTINPARENT) if target == "jnt" else (TrnType.TENDON,)
  count = m.njnt if target == "jnt" else m.ntendon
  acts = np.flatnonzero(np.isin(m.actuator_trntype, kinds)) if m.nactuator else np.zeros(0, int)
  xp = np if isinstance(value, np.ndarray) else jnp  # numpy: a known Model's values
  if not acts.size:
    return xp.zeros((count,) + value.shape[1:], dtype=value.dtype)
  gear2 = m.actuator_gear[m.actuator_outadr[acts], 0] ** 2
  scaled = value[acts] * gear2.reshape(gear2.shape + (1,) * (value.ndim - 1))
  if xp is np:
    out = np.zeros((count,) + value.shape[1:], dtype=value.dtype)
    np.add.at(out, m.actuator_trnid[acts, 0], scaled)
    return out
  return jax.ops.segment_sum(scaled, m.actuator_trnid[acts, 0], num_segments=count)


def spring_reference(m: Model, d: Data) -> jax.Array:
  """Joint spring reference (nq,): qpos_spring, with the plastic joints' state substituted."""
  ref = m.qpos_spring
  plastic = np.flatnonzero(m.jnt_plasticadr >= 0)
  if plastic.size:
    width = np.where(m.jnt_type[plastic] == JointType.BALL, 4, 1)
    qadr = np.concatenate([m.jnt_qposadr[j] + np.arange(w) for j, w in zip(plastic, width)])
    padr = np.concatenate([m.jnt_plasticadr[j] + np.arange(w) for j, w in zip(plastic, width)])
    ref = ref.at[qadr].set(d.plastic[padr])
  return ref


def joint_spring_displacements(m: Model, d: Data) -> list[tuple[np.ndarray, np.ndarray,
                                                                   jax.Array, jax.Array]]:
  """Joint springs' displacements from their references (``spring_reference``), per kind:
  hinge and slide joints, free joints' translation, and ball and free joints' rotation (the
  quaternion difference as a rotation vector). Each entry is (joints (k,), their dofs (k, w),
  the displacement (k, w), and x (k,): the signed displacement of a scalar joint, else the
  displacement's norm, which the polynomial profile takes)."""
  ref, jtype, out = spring_reference(m, d), m.jnt_type, []
  scalar = np.flatnonzero((jtype == JointType.HINGE) | (jtype == JointType.SLIDE))
  if scalar.size:
    adr = m.jnt_qposadr[scalar]
    dif = (d.qpos[adr] - ref[adr])[:, None]
    out.append((scalar, m.jnt_dofadr[scalar][:, None], dif, dif[:, 0]))
  free = np.flatnonzero(jtype == JointType.FREE)
  if free.size:
    adr = m.jnt_qposadr[free][:, None] + np.arange(3)
    dif = d.qpos[adr] - ref[adr]
    out.append((free, m.jnt_dofadr[free][:, None] + np.arange(3), dif, math.safe_norm(dif)))
  # rotational parts of ball and free joints: quaternion at qpos offset 0 resp. 3, dofs 0 resp. 3
  rot = np.flatnonzero((jtype == JointType.BALL) | (jtype == JointType.FREE))
  if rot.size:
    shift = np.where(jtype[rot] == JointType.FREE, 3, 0)
    qadr = (m.jnt_qposadr[rot] + shift)[:, None] + np.arange(4)
    dif = math.quat_sub(math.quat_normalize(d.qpos[qadr]), ref[qadr])
    out.append((rot, (m.jnt_dofadr[rot] + shift)[:, None] + np.arange(3), dif,
                math.safe_norm(dif)))
  return out


def _joint_spring(m: Model, d: Data) -> jax.Array:
  """Joint spring forces (nv,): -dif p(x) for each displacement of joint_spring_displacements."""
  forces, dofs = [], []
  for joints, joint_dofs, dif, x in joint_spring_displacements(m, d):
    coef = poly_force(m.jnt_stiffness[joints], m.jnt_stiffnesspoly[joints], x, False)
    forces.append((-coef[:, None] * dif).reshape(-1))
    dofs.append(joint_dofs.reshape(-1))
  if not forces:
    return jnp.zeros(m.nv, dtype=d.qpos.dtype)
  # Each dof reads its force, or a trailing zero, by a static selection (math.take) rather than
  # a scatter into zeros, which XLA's CPU backend runs as a loop. (Under the test suite's XLA
  # flags, the scatter's forward-mode tangent came out wrong in some programs: benchmarks/README.md,
  # "A miscompilation under the test suite's XLA flags".)
  count = sum(f.shape[0] for f in forces)
  source = np.full(m.nv, count)
  source[np.concatenate(dofs)] = np.arange(count)
  return math.take(jnp.concatenate(forces + [jnp.zeros(1, dtype=d.qpos.dtype)]), source)


def dof_damping(m: Model) -> tuple[jax.Array, jax.Array]:
  """Linear (nv,) and higher-order (nv, 2) damping coefficients of each dof, incl. actuators'."""
  damping = m.dof_damping + reflected(m, m.actuator_damping, "jnt")[m.dof_jntid]
  poly = m.dof_dampingpoly + reflected(m, m.actuator_dampingpoly, "jnt")[m.dof_jntid]
  return damping, poly


def tendon_damping(m: Model) -> tuple[jax.Array, jax.Array]:
  """Linear (ntendon,) and higher-order (ntendon, 2) damping coefficients of each tendon, incl.
  actuators'."""
  damping = m.tendon_damping + reflected(m, m.actuator_damping, "tendon")
  poly = m.tendon_dampingpoly + reflected(m, m.actuator_dampingpoly, "tendon")
  return damping, poly


def dof_damper_deriv(m: Model, qvel: jax.Array) -> tuple[jax.Array, jax.Array]:
  """Derivative (nv,) of minus the dof damper force w.r.t. qvel, and whether any dof is damped.

  ``a + 2 b |v| + 3 c v^2`` (mjd_xPolyForce), the diagonal that Euler's implicit damping adds to
  qM times the time step. The flag () is MuJoCo's test: positive damping, a non-zero polynomial
  coefficient, or damping reflected from an actuator.
  """
  def any_damper(own: jax.Array, damping: jax.Array, poly: jax.Array) -> jax.Array:
    return (own > 0).any() | (poly != 0).any() | (damping != own).any()

  damping, poly = dof_damping(m)
  deriv = poly_deriv(damping, poly, qvel)
  # A Model known while tracing gives a known flag (``math.known_where``), computed with numpy:
  # evaluated eagerly by jax, its few operations compiled a program each, 0.85 s of the 2.5 s
  # that tracing a rollout of dm_control's cheetah took.
  fields = ("dof_damping", "dof_dampingpoly", "actuator_damping", "actuator_dampingpoly",
            "actuator_gear")
  if any(isinstance(getattr(m, f), jax.core.Tracer) for f in fields):
    return deriv, any_damper(m.dof_damping, damping, poly)
  host = m.replace(**{f: np.asarray(getattr(m, f)) for f in fields})
  return deriv, bool(any_damper(host.dof_damping, *dof_damping(host)))


def passive_vel_deriv(m: Model, d: Data) -> jax.Array:
  """d(qfrc_passive)/d(qvel) (nv, nv), MuJoCo's mjd_passive_vel: the dof dampers' diagonal,
  ``-ten_J' diag(b) ten_J`` of the tendon dampers (b the derivative of each damper law) and the
  fluid forces' derivative. Needs what ``passive`` needs."""
  zero = jnp.zeros((m.nv, m.nv), d.qvel.dtype)
  if m.opt.disabled(DisableBit.SPRING) and m.opt.disabled(DisableBit.DAMPER):
    return zero
  deriv = fluid_vel_deriv(m, d)
  if m.opt.disabled(DisableBit.DAMPER):
    return deriv
  dof, _ = dof_damper_deriv(m, d.qvel)
  deriv = deriv - jnp.diag(dof)
  if m.ntendon:
    b = poly_deriv(*tendon_damping(m), d.ten_velocity)
    deriv = deriv - d.ten_J.T @ (b[:, None] * d.ten_J)
  return deriv


def if_dof_dampers(m: Model, damped: Callable[[], jax.Array], undamped: Callable[[], jax.Array]
                   ) -> jax.Array:
  """``damped()`` where some dof may have a damper (its own linear or polynomial damping, or an
  actuator's: a superset of ``dof_damper_deriv``'s flag), else ``undamped()``; decided while
  tracing where the Model is known then (``math.known_cond``)."""
  dampers = (m.dof_damping, m.dof_dampingpoly, m.actuator_damping, m.actuator_dampingpoly)
  return math.known_cond(lambda *c: functools.reduce(operator.or_, [(x != 0).any() for x in c]),
                         dampers, damped, undamped)


def _dof_damper(m: Model, d: Data) -> jax.Array:
  """Dof damper forces (nv,), with the damping reflected from joint actuators."""
  damping, poly = dof_damping(m)
  return -d.qvel * poly_force(damping, poly, d.qvel, True)


def tendon_spring_range(m: Model, d: Data) -> jax.Array:
  """Spring dead band (ntendon, 2) of each tendon: tendon_lengthspring or its plastic state."""
  band = m.tendon_lengthspring
  plastic = np.flatnonzero(m.tendon_plasticadr >= 0)
  if plastic.size:
    padr = m.tendon_plasticadr[plastic][:, None] + np.arange(2)
    band = band.at[plastic].set(d.plastic[padr])
  return band


def tendon_spring_displacement(m: Model, d: Data) -> jax.Array:
  """How far each tendon's length lies outside its spring dead band (ntendon,): 0 inside."""
  band = tendon_spring_range(m, d)
  lower, upper, length = band[:, 0], band[:, 1], d.ten_length
  return jnp.where(length > upper, length - upper, jnp.where(length < lower, length - lower, 0.0))


def tendon_forces(m: Model, d: Data) -> tuple[jax.Array, jax.Array]:
  """Tendon spring and damper forces along each tendon, (ntendon,) each, in N (zero where the
  disable flags turn them off, as in passive)."""
  spring = not m.opt.disabled(DisableBit.SPRING)
  damper = not m.opt.disabled(DisableBit.DAMPER)
  length, velocity = d.ten_length, d.ten_velocity
  zero = jnp.zeros_like(length)
  frc_spring = frc_damper = zero
  if not (spring or damper):
    return zero, zero
  if spring:
    x = tendon_spring_displacement(m, d)
    frc_spring = -x * poly_force(m.tendon_stiffness, m.tendon_stiffnesspoly, x, False)
  if damper:
    damping, poly = tendon_damping(m)
    frc_damper = -velocity * poly_force(damping, poly, velocity, True)
  return frc_spring, frc_damper


def _gravcomp(m: Model, d: Data) -> jax.Array:
  """Gravity compensation (nv,): an upward force body_gravcomp * mass * |g| at each xipos.

  Skipped where no body has gravcomp (``math.known_cond``), as ``fluid.fluid`` skips a still
  medium.
  """
  def compensate() -> jax.Array:
    force = -m.opt.gravity[None, :] * (m.body_mass * m.body_gravcomp)[:, None]
    return kinematics.apply_ft(m, d, force, jnp.zeros_like(force), d.xipos)

  return math.known_cond(lambda gravcomp: (gravcomp != 0).any(), (m.body_gravcomp,), compensate,
                         lambda: jnp.zeros(m.nv, d.qvel.dtype))


def _adhesion(m: Model, d: Data) -> jax.Array:
  """The pull of adhesive contacts (nv,): minus each contact's adhesion (N) along its normal,
  through the normal's Jacobian (mj_adhesion). Needs the contacts (fwd_position)."""
  body1, body2 = constraint.slot_bodies(m, d)
  normal = kinematics.normal_jac(m, d, d.contact_pos, d.contact_frame[:, 0], body1, body2)
  return jnp.where(d.contact_exist, -d.contact_adhesion, 0.0) @ normal


def passive(m: Model, d: Data) -> Data:
  """Computes qfrc_spring, qfrc_damper, qfrc_gravcomp, qfrc_fluid, qfrc_adhesion and
  qfrc_passive, all (nv,).

  qfrc_spring and qfrc_damper include the tendon terms ``ten_J' f``; qfrc_passive = spring +
  damper + fluid + adhesion + gravcomp on the dofs of joints without ``jnt_actgravcomp`` (the
  others receive it in ``qfrc_actuator``). Needs kinematics, com_pos, com_vel, the contacts
  and, for models with tendons, ten_length, ten_J and ten_velocity.
  """
  with jax.named_scope("passive"):
    zero = jnp.zeros(m.nv, dtype=d.qvel.dtype)
    spring_on = not m.opt.disabled(DisableBit.SPRING)
    damper_on = not m.opt.disabled(DisableBit.DAMPER)
    if not (spring_on or damper_on):
      return d.replace(qfrc_spring=zero, qfrc_damper=zero, qfrc_gravcomp=zero, qfrc_fluid=zero,
                       qfrc_adhesion=zero, qfrc_passive=zero)
    qfrc_spring = _joint_spring(m, d) if spring_on else zero
    qfrc_damper = _dof_damper(m, d) if damper_on else zero
    if m.ntendon:
      frc_spring, frc_damper = tendon_forces(m, d)
      qfrc_spring = qfrc_spring + frc_spring @ d.ten_J
      qfrc_damper = qfrc_damper + frc_damper @ d.ten_J
    qfrc_gravcomp = zero if m.opt.disabled(DisableBit.GRAVITY) else _gravcomp(m, d)
    qfrc_fluid = fluid(m, d)
    adhesive = m.flg_adhesion and collision.contacts_on(m)
    qfrc_adhesion = _adhesion(m, d) if adhesive else zero
    passive_gravcomp = jnp.asarray(m.jnt_actgravcomp[m.dof_jntid] == 0, dtype=zero.dtype)
    qfrc_passive = (qfrc_spring + qfrc_damper + qfrc_fluid + qfrc_adhesion
                    + qfrc_gravcomp * passive_gravcomp)
  return d.replace(qfrc_spring=qfrc_spring, qfrc_damper=qfrc_damper, qfrc_gravcomp=qfrc_gravcomp,
                   qfrc_fluid=qfrc_fluid, qfrc_adhesion=qfrc_adhesion, qfrc_passive=qfrc_passive)


def update_plastic(m: Model, d: Data, qpos: jax.Array, dq: jax.Array) -> jax.Array:
  """The plastic state (nplastic,) after a step to positions ``qpos``, as MuJoCo 4.0's mj_advance.

  Ideal plasticity with yield threshold y = ``*_springyield``: where the spring displacement from
  the reference exceeds y, the reference moves just enough that it equals y (y = 0: full slip).

  * hinge/slide: ``ref = qpos -+ y`` when ``|qpos - ref| > y``;
  * ball: ``ref = ref * exp((r - y) u)`` when ``r = |dif| > y``, ``dif = r u = quat_sub(q, ref)``;
  * tendon band ``(lower, upper)``: beyond the band by more than y, both bounds shift by the
    excess; a slack band ``(0, upper > 0)`` stretched keeps ``lower`` at 0. The tendon length is
    linearised from the start of the step, ``ten_length + ten_J dq`` (as MuJoCo, measured).

  Nothing moves when springs are disabled. Every choice is a ``jnp.where`` with finite branches.

  Args:
    d: the Data the step started from (its plastic, ten_length and ten_J).
    qpos: (nq,) positions after the step.
    dq: (nv,) position increment of the step (time step times the integrated velocity).
  """
  plastic = d.plastic
  if not m.nplastic or m.opt.disabled(DisableBit.SPRING):
    return plastic
  jtype = m.jnt_type

  scalar = np.flatnonzero((m.jnt_plasticadr >= 0) & (jtype != JointType.BALL))
  if scalar.size:
    padr = m.jnt_plasticadr[scalar]
    q, ref, y = qpos[m.jnt_qposadr[scalar]], plastic[padr], m.jnt_springyield[scalar]
    x = q - ref
    plastic = plastic.at[padr].set(jnp.where(x > y, q - y, jnp.where(x < -y, q + y, ref)))

  ball = np.flatnonzero((m.jnt_plasticadr >= 0) & (jtype == JointType.BALL))
  if ball.size:
    padr = m.jnt_plasticadr[ball][:, None] + np.arange(4)
    ref, y = plastic[padr], m.jnt_springyield[ball]
    q = math.quat_normalize(qpos[m.jnt_qposadr[ball][:, None] + np.arange(4)])
    dif = math.quat_sub(q, ref)
    r = math.safe_norm(dif)
    yielded = r > y
    axis = dif / jnp.where(yielded, r, 1.0)[:, None]
    moved = math.quat_mul(ref, math.axis_angle_to_quat(axis, jnp.where(yielded, r - y, 0.0)))
    plastic = plastic.at[padr].set(jnp.where(yielded[:, None], moved, ref))

  tendon = np.flatnonzero(m.tendon_plasticadr >= 0)
  if tendon.size:
    padr = m.tendon_plasticadr[tendon]
    lower, upper, y = plastic[padr], plastic[padr + 1], m.tendon_springyield[tendon]
    length = d.ten_length[tendon] + d.ten_J[tendon] @ dq
    over, under = length - upper, length - lower
    stretched = (length > upper) & (over > y)
    compressed = (length < lower) & (under < -y)
    shift = jnp.where(stretched, over - y, jnp.where(compressed, under + y, 0.0))
    slack = stretched & (lower == 0) & (upper > 0)
    plastic = plastic.at[padr].set(jnp.where(slack, lower, lower + shift))
    plastic = plastic.at[padr + 1].set(upper + shift)
  return plastic
