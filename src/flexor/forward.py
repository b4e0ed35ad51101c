"""The forward and inverse dynamics pipelines: ``forward`` (mj_forward), ``inverse`` (mj_inverse).

Stages, as in MuJoCo's ``engine_forward.c``:

* ``fwd_position``: kinematics, com_pos, crb, factor_m;
* ``fwd_velocity``: com_vel, passive, rne_bias;
* ``fwd_actuation``: qfrc_actuator;
* ``fwd_acceleration``: qfrc_smooth and qacc_smooth;
* ``fwd_constraint``: qacc and qfrc_constraint;

and ``inverse`` runs the first two, then ``inv_acceleration`` (qfrc_inverse from qacc).

Tendons, transmission, actuator dynamics, collision and constraints are later stages. Until the
constraint solver exists, ``fwd_constraint`` is MuJoCo's unconstrained case: qacc = qacc_smooth
and qfrc_constraint = 0, which is exact for models (or options) without active constraints.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from flexor import kinematics
from flexor.crb import crb, factor_m, solve_m
from flexor.passive import passive
from flexor.rne import rne, rne_bias
from flexor.types import Data, DisableBit, Model


def fwd_position(m: Model, d: Data) -> Data:
  """Computes the position-dependent quantities: frames, com-based inertias, qM and qLD."""
  with jax.named_scope("fwd_position"):
    d = kinematics.kinematics(m, d)
    d = kinematics.com_pos(m, d)
    d = crb(m, d)
    d = factor_m(m, d)
  return d


def fwd_velocity(m: Model, d: Data) -> Data:
  """Computes the velocity-dependent quantities: cvel, cdof_dot, passive forces, qfrc_bias."""
  with jax.named_scope("fwd_velocity"):
    d = kinematics.com_vel(m, d)
    d = passive(m, d)
    d = rne_bias(m, d)
  return d


def fwd_actuation(m: Model, d: Data) -> Data:
  """Computes qfrc_actuator (nv,): gravity compensation routed through actuators.

  MuJoCo adds qfrc_gravcomp of joints with ``jnt_actgravcomp`` to qfrc_actuator (instead of
  qfrc_passive) and clamps the first dof of joints with ``jnt_actfrclimited`` to
  ``jnt_actfrcrange``; nothing is routed when the model has no actuators or actuation is
  disabled. Actuator forces themselves come with the actuation stage.
  """
  with jax.named_scope("fwd_actuation"):
    qfrc_actuator = jnp.zeros(m.nv, dtype=d.qvel.dtype)
    if m.nu == 0 or m.opt.disabled(DisableBit.ACTUATION):
      return d.replace(qfrc_actuator=qfrc_actuator)
    if not m.opt.disabled(DisableBit.GRAVITY):
      routed = jnp.asarray(m.jnt_actgravcomp[m.dof_jntid] != 0, dtype=qfrc_actuator.dtype)
      qfrc_actuator = qfrc_actuator + d.qfrc_gravcomp * routed
    limited = np.flatnonzero(m.jnt_actfrclimited)
    if limited.size:
      dof = m.jnt_dofadr[limited]
      lo, hi = m.jnt_actfrcrange[limited, 0], m.jnt_actfrcrange[limited, 1]
      qfrc_actuator = qfrc_actuator.at[dof].set(jnp.clip(qfrc_actuator[dof], lo, hi))
  return d.replace(qfrc_actuator=qfrc_actuator)


def fwd_acceleration(m: Model, d: Data) -> Data:
  """Computes qfrc_smooth and qacc_smooth (nv,): the unconstrained acceleration.

  qfrc_smooth = qfrc_passive - qfrc_bias + qfrc_applied + qfrc_actuator + J' xfrc_applied, with
  xfrc_applied acting at each body's xipos; qacc_smooth = qM^-1 qfrc_smooth.
  """
  with jax.named_scope("fwd_acceleration"):
    xfrc = kinematics.apply_ft(m, d, d.xfrc_applied[:, :3], d.xfrc_applied[:, 3:], d.xipos)
    qfrc_smooth = d.qfrc_passive - d.qfrc_bias + d.qfrc_applied + d.qfrc_actuator + xfrc
    qacc_smooth = solve_m(m, d, qfrc_smooth)
  return d.replace(qfrc_smooth=qfrc_smooth, qacc_smooth=qacc_smooth)


def fwd_constraint(m: Model, d: Data) -> Data:
  """Computes qacc and qfrc_constraint (nv,); without a constraint solver, qacc = qacc_smooth.

  Also sets warning_nan when qacc is not finite.
  """
  del m  # the unconstrained case needs no model data
  with jax.named_scope("fwd_constraint"):
    qacc = d.qacc_smooth
    warning_nan = d.warning_nan | ~jnp.all(jnp.isfinite(qacc))
  return d.replace(qacc=qacc, qfrc_constraint=jnp.zeros_like(qacc), warning_nan=warning_nan)


def forward(m: Model, d: Data) -> Data:
  """Computes everything mj_forward does that flexor implements: all stages but integration."""
  with jax.named_scope("forward"):
    d = fwd_position(m, d)
    d = fwd_velocity(m, d)
    d = fwd_actuation(m, d)
    d = fwd_acceleration(m, d)
    d = fwd_constraint(m, d)
  return d


def inv_acceleration(m: Model, d: Data) -> Data:
  """Computes qfrc_inverse and qfrc_constraint (nv,) from qacc, after fwd_position/fwd_velocity.

  As in mj_inverse: qfrc_inverse = rne(qacc) + dof_armature * qacc - qfrc_passive -
  qfrc_constraint, where rne(qacc) = M qacc + qfrc_bias without armature. qfrc_constraint is zero
  until the constraint stage exists.
  """
  with jax.named_scope("inv_acceleration"):
    qfrc_constraint = jnp.zeros_like(d.qacc)
    qfrc_inverse = (rne(m, d, flg_acc=True) + m.dof_armature * d.qacc - d.qfrc_passive
                    - qfrc_constraint)
  return d.replace(qfrc_constraint=qfrc_constraint, qfrc_inverse=qfrc_inverse)


def inverse(m: Model, d: Data) -> Data:
  """Computes qfrc_inverse (nv,), the generalised force that produces the given qacc (mj_inverse).

  Runs fwd_position, fwd_velocity and inv_acceleration. Without constraints qfrc_inverse equals
  qfrc_applied + qfrc_actuator + J' xfrc_applied of a forward pass that produced qacc.
  """
  with jax.named_scope("inverse"):
    d = fwd_position(m, d)
    d = fwd_velocity(m, d)
    d = inv_acceleration(m, d)
  return d
