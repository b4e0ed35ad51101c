"""Fluid forces: MuJoCo's inertia-box and ellipsoid models (``mj_fluid`` in engine_passive.c).

Every body with mass at least mjMINVAL feels the fluid when ``opt.density`` or ``opt.viscosity``
is non-zero. A body uses the ellipsoid model when at least one of its geoms has
``geom_fluid[g, 0] > 0`` (``<geom fluidshape="ellipsoid">``), else the inertia-box model. Both
act on the velocity relative to ``opt.wind``, in a local frame, and are applied as a force and
torque at a point (the body's xipos, or each geom's geom_xpos).

Only the geoms compiled with ``fluidshape="ellipsoid"`` (``geom_fluidellipsoid``, static) are
evaluated in the ellipsoid model: a model without them compiles none of it, which was a fifth of
the muscle arm's compile time. Among their bodies the choice is a ``jnp.where`` on the traced
``geom_fluid[:, 0]``, as MuJoCo decides it, so gradients with respect to geom_fluid are those of
the model MuJoCo would use. A geom outside that set stays in the inertia-box model even if its
``geom_fluid[:, 0]`` is later made positive: recompile the MJCF to give it the ellipsoid model.

``geom_fluid`` row layout (mjNFLUID = 12), written by MuJoCo's compiler:
  0  interaction coefficient: scales all forces of the geom (1 for fluidshape="ellipsoid")
  1  blunt drag coefficient        2  slender drag coefficient    3  angular drag coefficient
  4  Kutta lift coefficient        5  Magnus lift coefficient
  6:9   virtual (added) mass of the equivalent ellipsoid per unit fluid density, m^3
  9:12  virtual (added) moment of inertia per unit fluid density, m^5
"""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

from flexor import kinematics, math
from flexor.types import Data, GeomType, Model


def _local_velocity(m: Model, d: Data, body: np.ndarray, point: jax.Array, rot: jax.Array):
  """Velocity of frames rigidly attached to bodies, relative to the wind, in the frames' axes.

  As ``mj_objectVelocity(..., flg_local=1)`` minus the wind rotated into the frame.

  Args:
    body: (k,) static body ids.
    point: (k, 3) world positions of the frames.
    rot: (k, 3, 3) world orientations of the frames.
  Returns:
    ang, lin: (k, 3) local angular velocity (rad/s) and linear velocity minus wind (m/s).
  """
  ang, lin = d.cvel[body, :3], d.cvel[body, 3:]
  offset = point - d.subtree_com[m.body_rootid[body]]
  lin = lin - math.cross(offset, ang)
  lang = math.mat_t_vec(rot, ang)
  llin = math.mat_t_vec(rot, lin - m.opt.wind[None, :])
  return lang, llin


def _inertia_box(m: Model, d: Data) -> tuple[jax.Array, jax.Array]:
  """Inertia-box model (mj_inertiaBoxFluidModel): world force and torque (nbody, 3) at xipos.

  Each body is the box with its mass and inertia. Viscous (Stokes) drag acts on the sphere of the
  box's mean side; quadratic drag of density ``opt.density`` on the box's faces. Bodies lighter
  than mjMINVAL get no force.
  """
  opt = m.opt
  mass, inertia = m.body_mass, m.body_inertia
  heavy = mass >= math.MINVAL
  safe_mass = jnp.where(heavy, mass, 1.0)
  # Side lengths of the equivalent box: I_x = m (b_y^2 + b_z^2) / 12 and so on.
  moments = jnp.sum(inertia, axis=-1, keepdims=True) - 2.0 * inertia
  box = jnp.sqrt(jnp.maximum(math.MINVAL, moments) / safe_mass[:, None] * 6.0)   # (nbody, 3)

  body = np.arange(m.nbody)
  lang, llin = _local_velocity(m, d, body, d.xipos, d.ximat)

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

  force = jnp.where(heavy[:, None], math.mat_vec(d.ximat, frc_lin), 0.0)
  torque = jnp.where(heavy[:, None], math.mat_vec(d.ximat, frc_ang), 0.0)
  return force, torque


def _semiaxes(m: Model, geoms: np.ndarray) -> jax.Array:
  """Semi-axes (k, 3) of the equivalent ellipsoids of the static geom ids ``geoms`` (k,), m
  (mju_geomSemiAxes)."""
  size = m.geom_size[geoms]
  r, h = size[:, 0], size[:, 1]
  gtype = m.geom_type[geoms, None]
  sphere = jnp.stack([r, r, r], axis=-1)
  capsule = jnp.stack([r, r, h + r], axis=-1)
  cylinder = jnp.stack([r, r, h], axis=-1)
  return jnp.where(gtype == GeomType.SPHERE, sphere,
                   jnp.where(gtype == GeomType.CAPSULE, capsule,
                             jnp.where(gtype == GeomType.CYLINDER, cylinder, size)))


def _added_mass(lang: jax.Array, llin: jax.Array, density: jax.Array, virtual_mass: jax.Array,
                virtual_inertia: jax.Array) -> tuple[jax.Array, jax.Array]:
  """Gyroscopic forces of the fluid mass moving with the body (mj_addedMassForces, no qacc).

  Args:
    lang, llin: (k, 3) local angular and linear velocities.
    virtual_mass, virtual_inertia: (k, 3) per unit fluid density.
  Returns:
    torque, force: (k, 3) local.
  """
  lin_mom = density * virtual_mass * llin
  ang_mom = density * virtual_inertia * lang
  torque = math.cross(lin_mom, llin) + math.cross(ang_mom, lang)
  return torque, math.cross(lin_mom, lang)


def _max_moment(size: jax.Array, axis: int) -> jax.Array:
  """8/15 pi s_axis max(s_{axis+1}, s_{axis+2})^4 (mji_ellipsoid_max_moment), (k,)."""
  d0, d1, d2 = size[:, axis], size[:, (axis + 1) % 3], size[:, (axis + 2) % 3]
  return 8.0 / 15.0 * jnp.pi * d0 * jnp.maximum(d1, d2) ** 4


def _ratio(a: jax.Array, b: jax.Array) -> jax.Array:
  """a / b, 0 where b = 0."""
  return jnp.where(b > 0, a / jnp.where(b > 0, b, 1.0), 0.0)


def _viscous(lang: jax.Array, llin: jax.Array, density: jax.Array, viscosity: jax.Array,
             size: jax.Array, coef: jax.Array) -> tuple[jax.Array, jax.Array]:
  """Drag and lift of an ellipsoid in a fluid (mj_viscousForces).

  Args:
    lang, llin: (k, 3) local angular and linear velocities relative to the fluid.
    size: (k, 3) semi-axes.
    coef: (k, 5) blunt drag, slender drag, angular drag, Kutta lift, Magnus lift coefficients.
  Returns:
    torque, force: (k, 3) local.
  """
  blunt, slender, angular, kutta, magnus = (coef[:, i:i + 1] for i in range(5))
  s0, s1, s2 = size[:, 0:1], size[:, 1:2], size[:, 2:3]
  volume = 4.0 / 3.0 * jnp.pi * s0 * s1 * s2
  d_max = jnp.max(size, axis=-1, keepdims=True)
  d_min = jnp.min(size, axis=-1, keepdims=True)
  d_mid = s0 + s1 + s2 - d_max - d_min
  a_max = jnp.pi * d_max * d_mid

  magnus_force = math.cross(lang, llin) * (magnus * density * volume)

  # Projection of the ellipsoid along the flow direction u: area and the normal of the
  # cross-section. Both depend on the direction only; MuJoCo 4.0 computes them without
  # MuJoCo 3's mjMINVAL floors, which changed the forces of thin bodies (a playing card) at
  # walking speeds, so they are formed from u, where no floor is needed.
  speed = math.safe_norm(llin, keepdims=True)
  u = jnp.where(speed > 0, llin / jnp.where(speed > 0, speed, 1.0), jnp.ones_like(llin))
  u0, u1, u2 = u[:, 0:1], u[:, 1:2], u[:, 2:3]
  proj_denom = (s1 * s2) ** 4 * u0**2 + (s2 * s0) ** 4 * u1**2 + (s0 * s1) ** 4 * u2**2
  proj_num = (s1 * s2 * u0) ** 2 + (s2 * s0 * u1) ** 2 + (s0 * s1 * u2) ** 2
  a_proj = jnp.pi * math.safe_sqrt(_ratio(proj_denom, proj_num))
  # Kutta lift cos(alpha) A_proj ((diag(s1 s2, s2 s0, s0 s1)^2 v) x v) x v, in u
  normal = jnp.concatenate([(s1 * s2) ** 2 * u0, (s2 * s0) ** 2 * u1, (s0 * s1) ** 2 * u2], -1)
  lift = jnp.pi * math.safe_sqrt(_ratio(proj_num, proj_denom)) * speed**2
  kutta_force = math.cross(math.cross(normal, u), u) * (kutta * density * lift)

  # Stokes drag of the sphere with the mean diameter, plus quadratic drag.
  sphere_d = 2.0 / 3.0 * (s0 + s1 + s2)
  lin_visc = 3.0 * jnp.pi * sphere_d
  ang_visc = jnp.pi * sphere_d**3
  i_max = 8.0 / 15.0 * jnp.pi * d_mid * d_max**4
  moment = jnp.stack([_max_moment(size, i) for i in range(3)], axis=-1)
  mom_visc = lang * (angular * moment + slender * (i_max - moment))
  drag_lin = viscosity * lin_visc + density * speed * (a_proj * blunt + slender * (a_max - a_proj))
  drag_ang = viscosity * ang_visc + density * math.safe_norm(mom_visc, keepdims=True)

  return -drag_ang * lang, magnus_force + kutta_force - drag_lin * llin


def _ellipsoid(m: Model, d: Data, geoms: np.ndarray) -> tuple[jax.Array, jax.Array]:
  """Ellipsoid model (mj_ellipsoidFluidModel) of the static geom ids ``geoms`` (k,): world force
  and torque (nbody, 3) at xipos.

  Each geom is its equivalent ellipsoid (``_semiaxes``) with the coefficients of its geom_fluid
  row; its force and torque, computed in the geom frame and applied at geom_xpos, are summed per
  body as a force and a torque about the body's xipos.
  """
  opt = m.opt
  fluid = m.geom_fluid[geoms]
  body = m.geom_bodyid[geoms]
  pos, rot = d.geom_xpos[geoms], d.geom_xmat[geoms]
  lang, llin = _local_velocity(m, d, body, pos, rot)
  torque, force = _added_mass(lang, llin, opt.density, fluid[:, 6:9], fluid[:, 9:12])
  vis_torque, vis_force = _viscous(lang, llin, opt.density, opt.viscosity, _semiaxes(m, geoms),
                                   fluid[:, 1:6])
  scale = fluid[:, 0:1]
  torque = (torque + vis_torque) * scale
  force = (force + vis_force) * scale
  force = math.mat_vec(rot, force)
  torque = math.mat_vec(rot, torque)
  torque = torque + math.cross(pos - d.xipos[body], force)
  seg = lambda x: jax.ops.segment_sum(x, body, num_segments=m.nbody)  # noqa: E731
  return seg(force), seg(torque)


def _in_medium(m: Model, moving: Callable[[], jax.Array], still: Callable[[], jax.Array]
               ) -> jax.Array:
  """``moving()`` where the medium has density or viscosity (fluid forces can be non-zero),
  else ``still()``: decided while tracing where the Model is known then (``math.known_cond``),
  else by ``lax.cond``, so that a still medium costs nothing forward or backward (under ``vmap``
  over Models with batched densities the cond becomes a select and both sides run)."""
  return math.known_cond(lambda density, viscosity: (density != 0) | (viscosity != 0),
                         (m.opt.density, m.opt.viscosity), moving, still)


def fluid(m: Model, d: Data) -> jax.Array:
  """Fluid forces qfrc_fluid (nv,), as mj_fluid: per body the ellipsoid or inertia-box model.

  Needs kinematics, com_pos and com_vel (cvel). Zero when density and viscosity are both zero:
  MuJoCo then skips the fluid model, and so does this (``_in_medium``).
  """
  return _in_medium(m, lambda: _fluid(m, d), lambda: jnp.zeros(m.nv, d.qvel.dtype))


def fluid_vel_deriv(m: Model, d: Data) -> jax.Array:
  """d(qfrc_fluid)/d(qvel) (nv, nv) at the state of ``d`` (after com_pos); zero, at no cost,
  where the medium is still. The fluid models' derivative is long-winded by hand
  (mjd_ellipsoidFluid, mjd_inertiaBoxFluid), so it is forward-mode AD of the same forces."""
  def forces(qvel: jax.Array) -> jax.Array:
    return _fluid(m, kinematics.com_vel(m, d.replace(qvel=qvel)))

  return _in_medium(m, lambda: jax.jacfwd(forces)(d.qvel),
                    lambda: jnp.zeros((m.nv, m.nv), d.qvel.dtype))


def _fluid(m: Model, d: Data) -> jax.Array:
  """qfrc_fluid (nv,) in a medium with non-zero density or viscosity."""
  force, torque = _inertia_box(m, d)
  geoms = np.flatnonzero(m.geom_fluidellipsoid)
  if geoms.size:
    uses_ellipsoid = jax.ops.segment_max(
        jnp.asarray(m.geom_fluid[geoms, 0] > 0, dtype=jnp.int32), m.geom_bodyid[geoms],
        num_segments=m.nbody) > 0
    # Massless bodies get no fluid force in either model.
    uses_ellipsoid = uses_ellipsoid[:, None] & (m.body_mass >= math.MINVAL)[:, None]
    e_force, e_torque = _ellipsoid(m, d, geoms)
    force = jnp.where(uses_ellipsoid, e_force, force)
    torque = jnp.where(uses_ellipsoid, e_torque, torque)
  return kinematics.apply_ft(m, d, force, torque, d.xipos)
