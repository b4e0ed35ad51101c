"""Passive forces: joint springs, dof dampers, gravity compensation and fluid forces (mj_passive).

Which terms MuJoCo 4.0 computes under the disable flags (measured with MuJoCo 4.0.0):
``DisableBit.SPRING`` zeroes ``qfrc_spring``, ``DisableBit.DAMPER`` zeroes ``qfrc_damper``, both
together zero every passive force (gravity compensation and fluid included), and
``DisableBit.GRAVITY`` zeroes ``qfrc_gravcomp``.

Not modelled yet: tendon springs and dampers (they need the tendon stage), flex elasticity, the
higher-order coefficients ``jnt_stiffnesspoly``/``dof_dampingpoly`` and ``jnt_springyield`` of
MuJoCo 4.0 (zero in every conformance model), and the ellipsoid fluid model selected by
``<geom fluidshape="ellipsoid">`` (no conformance model uses it): every body uses the
inertia-box model.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from flexor import kinematics, math
from flexor.types import Data, DisableBit, JointType, Model


def _spring(m: Model, d: Data) -> jax.Array:
  """Joint spring forces (nv,): -stiffness * (qpos - qpos_spring), quaternions via quat_sub."""
  qfrc = jnp.zeros(m.nv, dtype=d.qpos.dtype)
  jtype = m.jnt_type

  scalar = np.flatnonzero((jtype == JointType.HINGE) | (jtype == JointType.SLIDE))
  if scalar.size:
    adr = m.jnt_qposadr[scalar]
    qfrc = qfrc.at[m.jnt_dofadr[scalar]].set(
        -m.jnt_stiffness[scalar] * (d.qpos[adr] - m.qpos_spring[adr]))

  free = np.flatnonzero(jtype == JointType.FREE)
  if free.size:
    adr = m.jnt_qposadr[free][:, None] + np.arange(3)
    qfrc = qfrc.at[m.jnt_dofadr[free][:, None] + np.arange(3)].set(
        -m.jnt_stiffness[free][:, None] * (d.qpos[adr] - m.qpos_spring[adr]))

  # Rotational parts of ball and free joints: quaternion at qpos offset 0 resp. 3, dofs 0 resp. 3.
  rot = np.flatnonzero((jtype == JointType.BALL) | (jtype == JointType.FREE))
  if rot.size:
    shift = np.where(jtype[rot] == JointType.FREE, 3, 0)
    qadr = (m.jnt_qposadr[rot] + shift)[:, None] + np.arange(4)
    quat = math.quat_normalize(d.qpos[qadr])
    dif = math.quat_sub(quat, m.qpos_spring[qadr])
    qfrc = qfrc.at[(m.jnt_dofadr[rot] + shift)[:, None] + np.arange(3)].set(
        -m.jnt_stiffness[rot][:, None] * dif)
  return qfrc


def _gravcomp(m: Model, d: Data) -> jax.Array:
  """Gravity compensation (nv,): an upward force body_gravcomp * mass * |g| at each xipos."""
  force = -m.opt.gravity[None, :] * (m.body_mass * m.body_gravcomp)[:, None]
  return kinematics.apply_ft(m, d, force, jnp.zeros_like(force), d.xipos)


def _fluid(m: Model, d: Data) -> jax.Array:
  """Fluid forces (nv,) of MuJoCo's inertia-box model (mj_inertiaBoxFluidModel).

  Each body is the box with its mass and inertia. Viscous (Stokes) drag acts on the sphere of the
  box's mean side; quadratic drag of density ``opt.density`` on the box's faces; both act on the
  velocity relative to ``opt.wind`` in the inertial frame, at xipos.
  """
  opt = m.opt
  mass, inertia = m.body_mass, m.body_inertia
  heavy = mass >= math.MINVAL
  safe_mass = jnp.where(heavy, mass, 1.0)
  # Side lengths of the equivalent box: I_x = m (b_y^2 + b_z^2) / 12 and so on.
  moments = jnp.sum(inertia, axis=-1, keepdims=True) - 2.0 * inertia
  box = jnp.sqrt(jnp.maximum(math.MINVAL, moments) / safe_mass[:, None] * 6.0)   # (nbody, 3)

  # Body velocity at xipos, in the inertial frame, relative to the wind.
  ang, lin = d.cvel[:, :3], d.cvel[:, 3:]
  offset = d.xipos - d.subtree_com[m.body_rootid]
  lin = lin - math.cross(offset, ang)
  lang = jnp.einsum("bji,bj->bi", d.ximat, ang)
  llin = jnp.einsum("bji,bj->bi", d.ximat, lin - opt.wind[None, :])

  diam = jnp.mean(box, axis=-1, keepdims=True)
  viscous = opt.viscosity > 0
  frc_ang = jnp.where(viscous, -jnp.pi * diam**3 * opt.viscosity, 0.0) * lang
  frc_lin = jnp.where(viscous, -3.0 * jnp.pi * diam * opt.viscosity, 0.0) * llin

  bx, by, bz = box[:, 0:1], box[:, 1:2], box[:, 2:3]
  face = jnp.concatenate([by * bz, bx * bz, bx * by], axis=-1)
  spin = jnp.concatenate([bx * (by**4 + bz**4), by * (bx**4 + bz**4), bz * (bx**4 + by**4)],
                         axis=-1)
  dense = opt.density > 0
  frc_lin = frc_lin - jnp.where(dense, 0.5 * opt.density, 0.0) * face * jnp.abs(llin) * llin
  frc_ang = frc_ang - jnp.where(dense, opt.density / 64.0, 0.0) * spin * jnp.abs(lang) * lang

  force = jnp.where(heavy[:, None], jnp.einsum("bij,bj->bi", d.ximat, frc_lin), 0.0)
  torque = jnp.where(heavy[:, None], jnp.einsum("bij,bj->bi", d.ximat, frc_ang), 0.0)
  return kinematics.apply_ft(m, d, force, torque, d.xipos)


def passive(m: Model, d: Data) -> Data:
  """Computes qfrc_spring, qfrc_damper, qfrc_gravcomp, qfrc_fluid and qfrc_passive, all (nv,).

  qfrc_passive = spring + damper + fluid + gravcomp on the dofs of joints without
  ``jnt_actgravcomp`` (the others receive it in ``qfrc_actuator``, see ``fwd_actuation``).
  Needs kinematics, com_pos and com_vel.
  """
  with jax.named_scope("passive"):
    zero = jnp.zeros(m.nv, dtype=d.qvel.dtype)
    spring_off = m.opt.disabled(DisableBit.SPRING)
    damper_off = m.opt.disabled(DisableBit.DAMPER)
    if spring_off and damper_off:
      return d.replace(qfrc_spring=zero, qfrc_damper=zero, qfrc_gravcomp=zero, qfrc_fluid=zero,
                       qfrc_passive=zero)
    qfrc_spring = zero if spring_off else _spring(m, d)
    qfrc_damper = zero if damper_off else -m.dof_damping * d.qvel
    qfrc_gravcomp = zero if m.opt.disabled(DisableBit.GRAVITY) else _gravcomp(m, d)
    qfrc_fluid = _fluid(m, d)
    passive_gravcomp = jnp.asarray(m.jnt_actgravcomp[m.dof_jntid] == 0, dtype=zero.dtype)
    qfrc_passive = qfrc_spring + qfrc_damper + qfrc_fluid + qfrc_gravcomp * passive_gravcomp
  return d.replace(qfrc_spring=qfrc_spring, qfrc_damper=qfrc_damper, qfrc_gravcomp=qfrc_gravcomp,
                   qfrc_fluid=qfrc_fluid, qfrc_passive=qfrc_passive)
