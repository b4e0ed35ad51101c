"""Actuator transmissions: ``transmission`` computes actuator_length and actuator_moment
(``mj_transmission``), ``actuator_velocity`` their rate.

Every actuator maps to one force output (three for an SO3 transmission); an output's length is a
scalar function of the configuration and its moment row, ``actuator_moment[o]`` (nv,), is the
gradient of that length with respect to the joint velocities, so that the actuator applies the
generalised force ``moment[o] * actuator_force[o]``. Per transmission type, with ``gear`` the
output's row of ``actuator_gear``:

* joint, jointinparent: a hinge or slide coordinate times gear[0]; a ball joint's rotation
  vector dotted with gear[:3] (rotated into the child frame by the inverse joint rotation for
  jointinparent); a free joint has length 0 and moment (gear[:3], gear[3:] or rotated);
* tendon: ten_length and ten_J times gear[0];
* site without refsite: length 0; the moment is the site Jacobian projected on the wrench
  gear expressed in the site frame;
* site with refsite: the site's position in the refsite frame dotted with gear[:3] plus the
  rotation vector from refsite to site dotted with gear[3:], with Jacobians relative to the
  refsite; dofs both frames share do not move the one relative to the other and are cleared;
* slider-crank: the slider position along its axis, a'v - sqrt((a'v)^2 + r^2 - v'v), or a'v
  where the rod cannot reach, times gear[0];
* body (adhesion): length 0; the moment is minus the mean of the normal Jacobians of the
  body's contacts;
* SO3: three outputs, the rotation vector of a ball joint (identity moment rows) or of a site
  relative to a refsite (moment rows: the relative rotational Jacobian projected on the site's
  axes).

Each transmission type is one vectorised computation over the static index group of actuators
that use it; its rows are then scattered into the (nout, ...) arrays.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from flexor import collision, constraint, kinematics, math
from flexor.types import Data, DisableBit, JointType, Model, TrnType


def _group(m: Model, trntypes: tuple[int, ...], joint_types: tuple[int, ...] | None = None,
           refsite: bool | None = None) -> np.ndarray:
  """Static ids of the actuators with one of ``trntypes`` (and joint type / refsite filters)."""
  keep = np.isin(m.actuator_trntype, trntypes)
  if joint_types is not None and m.njnt:
    jnt = np.where(keep, m.actuator_trnid[:, 0], 0)
    keep &= np.isin(m.jnt_type[jnt], joint_types)
  if refsite is not None:
    keep &= (m.actuator_trnid[:, 1] >= 0) == refsite
  return np.flatnonzero(keep)


def _common_chain(m: Model, site: np.ndarray, ref: np.ndarray) -> np.ndarray:
  """(n, nv) bool: dofs shared by the kinematic chains of two sites' (welded) bodies.

  These are the common ancestral dof of the two bodies and its ancestors, the columns MuJoCo
  clears from a site-refsite Jacobian: moving them moves both frames rigidly together.
  """
  mask = np.zeros((len(site), m.nv), dtype=bool)
  for k, (s, r) in enumerate(zip(site, ref)):
    chains = []
    for b in (m.body_weldid[m.site_bodyid[s]], m.body_weldid[m.site_bodyid[r]]):
      last = m.body_dofadr[b] + m.body_dofnum[b] - 1
      chains.append(m.dof_ancestor[last] if last >= 0 and m.body_dofnum[b] else
                    np.zeros(m.nv, dtype=bool))
    # dof_ancestor rows hold the dof and its ancestors, so the common chain is their overlap
    mask[k] = chains[0] & chains[1]
  return mask


def _site_quat(m: Model, d: Data, site: np.ndarray) -> jax.Array:
  """World orientations (n, 4) of sites, composed from their bodies' xquat (not site_xmat)."""
  return math.quat_mul(d.xquat[m.site_bodyid[site]], m.site_quat[site])


def _ball_axis(m: Model, d: Data, jnt: np.ndarray, shift: int = 0) -> tuple[jax.Array, jax.Array]:
  """(quat, rotation vector) of ball-joint (shift 0) or free-joint (shift 3) quaternions."""
  adr = (m.jnt_qposadr[jnt] + shift)[:, None] + np.arange(4)
  quat = math.quat_normalize(d.qpos[adr])
  return quat, math.quat_to_vel(quat)


def _scatter_dofs(m: Model, start: np.ndarray, rows: jax.Array) -> jax.Array:
  """(n, nv) moment rows holding ``rows`` (n, k) at dofs start[i] .. start[i] + k - 1."""
  n, k = rows.shape
  out = jnp.zeros((n, m.nv), dtype=rows.dtype)
  return out.at[np.arange(n)[:, None], start[:, None] + np.arange(k)].set(rows)


def transmission(m: Model, d: Data) -> Data:
  """Computes actuator_length (nout,) and actuator_moment (nout, nv) (``mj_transmission``).

  Needs kinematics, com_pos (for the Jacobians) and the tendon stage.
  """
  with jax.named_scope("transmission"):
    dtype = d.qpos.dtype
    length = jnp.zeros(m.nout, dtype=dtype)
    moment = jnp.zeros((m.nout, m.nv), dtype=dtype)
    if not m.nactuator:
      return d.replace(actuator_length=length, actuator_moment=moment)
    trnid0, trnid1 = m.actuator_trnid[:, 0], m.actuator_trnid[:, 1]
    outadr = m.actuator_outadr
    gear = m.actuator_gear[outadr]
    joint_trn = (TrnType.JOINT, TrnType.JOINTINPARENT)
    parts: list[tuple[np.ndarray, jax.Array, jax.Array]] = []  # (output rows, length, moment)

    act = _group(m, joint_trn, (JointType.HINGE, JointType.SLIDE))
    if act.size:
      jnt = trnid0[act]
      g = gear[act, 0]
      parts.append((outadr[act], d.qpos[m.jnt_qposadr[jnt]] * g,
                    _scatter_dofs(m, m.jnt_dofadr[jnt], g[:, None])))

    act = _group(m, joint_trn, (JointType.BALL,))
    if act.size:
      jnt = trnid0[act]
      quat, axis = _ball_axis(m, d, jnt)
      in_parent = (m.actuator_trntype[act] == TrnType.JOINTINPARENT)[:, None]
      gear_axis = jnp.where(in_parent, math.rot_vec_quat(gear[act, :3], math.quat_conj(quat)),
                            gear[act, :3])
      parts.append((outadr[act], jnp.sum(axis * gear_axis, axis=-1),
                    _scatter_dofs(m, m.jnt_dofadr[jnt], gear_axis)))

    act = _group(m, joint_trn, (JointType.FREE,))
    if act.size:
      jnt = trnid0[act]
      quat, _ = _ball_axis(m, d, jnt, shift=3)
      in_parent = (m.actuator_trntype[act] == TrnType.JOINTINPARENT)[:, None]
      gear_axis = jnp.where(in_parent, math.rot_vec_quat(gear[act, 3:], math.quat_conj(quat)),
                            gear[act, 3:])
      rows = jnp.concatenate([gear[act, :3], gear_axis], axis=-1)
      parts.append((outadr[act], jnp.zeros(act.size, dtype=dtype),
                    _scatter_dofs(m, m.jnt_dofadr[jnt], rows)))

    act = _group(m, (TrnType.TENDON,))
    if act.size:
      ten = trnid0[act]
      g = gear[act, 0]
      parts.append((outadr[act], d.ten_length[ten] * g, d.ten_J[ten] * g[:, None]))

    act = _group(m, (TrnType.SLIDERCRANK,))
    if act.size:
      parts.append((outadr[act],) + _slider_crank(m, d, act, gear[act, 0]))

    act = _group(m, (TrnType.SITE,), refsite=False)
    if act.size:
      site = trnid0[act]
      rot = d.site_xmat[site]
      jacp, jacr = kinematics.jac(m, d, d.site_xpos[site], m.site_bodyid[site])
      wrench_t = math.mat_vec(rot, gear[act, :3])
      wrench_r = math.mat_vec(rot, gear[act, 3:])
      rows = (jnp.einsum("nvi,ni->nv", jacp, wrench_t) + jnp.einsum("nvi,ni->nv", jacr, wrench_r))
      parts.append((outadr[act], jnp.zeros(act.size, dtype=dtype), rows))

    act = _group(m, (TrnType.SITE,), refsite=True)
    if act.size:
      parts.append((outadr[act],) + _site_refsite(m, d, trnid0[act], trnid1[act], gear[act]))

    act = _group(m, (TrnType.BODY,))
    if act.size:
      parts.append((outadr[act], jnp.zeros(act.size, dtype=dtype),
                    _adhesion(m, d, trnid0[act])))

    act = _group(m, (TrnType.SO3,), refsite=False)
    if act.size:
      jnt = trnid0[act]
      _, axis = _ball_axis(m, d, jnt)
      rows = _scatter_dofs(m, np.repeat(m.jnt_dofadr[jnt], 3) + np.tile(np.arange(3), act.size),
                           jnp.ones((3 * act.size, 1), dtype=dtype))
      parts.append(((outadr[act][:, None] + np.arange(3)).ravel(), axis.ravel(), rows))

    act = _group(m, (TrnType.SO3,), refsite=True)
    if act.size:
      parts.append(((outadr[act][:, None] + np.arange(3)).ravel(),)
                   + _so3_refsite(m, d, trnid0[act], trnid1[act]))

    for rows, part_length, part_moment in parts:
      length = length.at[rows].set(part_length)
      moment = moment.at[rows].set(part_moment)
  return d.replace(actuator_length=length, actuator_moment=moment)


def _adhesion(m: Model, d: Data, body: np.ndarray) -> jax.Array:
  """Moment rows (n, nv) of body transmissions on ``body`` (n,): minus the mean, over the
  contacts of the body (those in the gap, margin <= dist < margin + gap, too), of the
  Jacobian of the contact's normal velocity (mj_transmission's mjTRN_BODY; with pyramidal cones
  MuJoCo averages the edge rows, whose mean is that Jacobian)."""
  if not collision.contacts_on(m):
    return jnp.zeros((len(body), m.nv), d.qpos.dtype)
  owner, slot = constraint.body_slots(m, d, body)
  if not slot.size:
    return jnp.zeros((len(body), m.nv), d.qpos.dtype)
  body1, body2 = (b[slot] for b in constraint.slot_bodies(m, d))
  normal = kinematics.normal_jac(m, d, d.contact_pos[slot], d.contact_frame[slot, 0], body1,
                                 body2)                                  # (npair, nv)
  touches = d.contact_exist[slot] & ((body1 == body[owner]) | (body2 == body[owner]))
  count = jax.ops.segment_sum(touches.astype(normal.dtype), owner, num_segments=len(body))
  total = jax.ops.segment_sum(jnp.where(touches[:, None], normal, 0.0), owner,
                              num_segments=len(body))
  return -total / jnp.maximum(count, 1.0)[:, None]


def _slider_crank(m: Model, d: Data, act: np.ndarray, gear: jax.Array):
  """Lengths (n,) and moment rows (n, nv) of slider-crank actuators ``act``."""
  crank, slider = m.actuator_trnid[act, 0], m.actuator_trnid[act, 1]
  rod = m.actuator_cranklength[act]
  axis = d.site_xmat[slider, :, 2]
  vec = d.site_xpos[crank] - d.site_xpos[slider]
  av = jnp.sum(vec * axis, axis=-1)
  det = av * av + rod * rod - jnp.sum(vec * vec, axis=-1)
  ok = det > 0
  sdet = jnp.sqrt(jnp.where(ok, det, 1.0))
  length = jnp.where(ok, av - sdet, av)
  # derivatives of the length with respect to vec and axis
  ratio = (1 - av / sdet)[:, None]
  dldv = jnp.where(ok[:, None], axis * ratio + vec / sdet[:, None], axis)
  dlda = jnp.where(ok[:, None], vec * ratio, vec)
  jac_slider, jacr_slider = kinematics.jac(m, d, d.site_xpos[slider], m.site_bodyid[slider])
  jac_crank, _ = kinematics.jac(m, d, d.site_xpos[crank], m.site_bodyid[crank])
  jac_axis = math.cross(jacr_slider, axis[:, None, :])   # d(axis)/d(qvel), (n, nv, 3)
  rows = (jnp.einsum("nvi,ni->nv", jac_axis, dlda)
          + jnp.einsum("nvi,ni->nv", jac_crank - jac_slider, dldv))
  return length * gear, rows * gear[:, None]


def _site_refsite(m: Model, d: Data, site: np.ndarray, ref: np.ndarray, gear: jax.Array):
  """Lengths (n,) and moment rows (n, nv) of site transmissions relative to a refsite."""
  keep = jnp.asarray(~_common_chain(m, site, ref), dtype=gear.dtype)[:, :, None]
  ref_rot = d.site_xmat[ref]
  jacp, jacr = kinematics.jac(m, d, d.site_xpos[site], m.site_bodyid[site])
  ref_jacp, ref_jacr = kinematics.jac(m, d, d.site_xpos[ref], m.site_bodyid[ref])

  vec = math.mat_t_vec(ref_rot, d.site_xpos[site] - d.site_xpos[ref])
  wrench_t = math.mat_vec(ref_rot, gear[:, :3])
  rows_t = jnp.einsum("nvi,ni->nv", (jacp - ref_jacp) * keep, wrench_t)

  rotvec = math.quat_sub(_site_quat(m, d, site), _site_quat(m, d, ref))
  wrench_r = math.mat_vec(ref_rot, gear[:, 3:])
  rows_r = jnp.einsum("nvi,ni->nv", (jacr - ref_jacr) * keep, wrench_r)
  length = jnp.sum(vec * gear[:, :3], axis=-1) + jnp.sum(rotvec * gear[:, 3:], axis=-1)
  return length, rows_t + rows_r


def _so3_refsite(m: Model, d: Data, site: np.ndarray, ref: np.ndarray):
  """Lengths (3n,) and moment rows (3n, nv) of SO3 transmissions on a site and a refsite."""
  keep = jnp.asarray(~_common_chain(m, site, ref), dtype=d.qpos.dtype)[:, :, None]
  rotvec = math.quat_sub(_site_quat(m, d, site), _site_quat(m, d, ref))
  _, jacr = kinematics.jac(m, d, d.site_xpos[site], m.site_bodyid[site])
  _, ref_jacr = kinematics.jac(m, d, d.site_xpos[ref], m.site_bodyid[ref])
  # row k projects the relative rotational Jacobian on the site's k-th axis
  rows = jnp.einsum("nvi,nik->nkv", (jacr - ref_jacr) * keep, d.site_xmat[site])
  return rotvec.ravel(), rows.reshape(-1, m.nv)


def actuator_velocity(m: Model, d: Data) -> Data:
  """Computes actuator_velocity (nout,) = actuator_moment @ qvel; zero if actuation is off."""
  if m.opt.disabled(DisableBit.ACTUATION):
    return d.replace(actuator_velocity=jnp.zeros(m.nout, dtype=d.qvel.dtype))
  return d.replace(actuator_velocity=d.actuator_moment @ d.qvel)
