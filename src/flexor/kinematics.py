"""Position and velocity kinematics: ``kinematics``, ``com_pos``, ``camlight``, ``com_vel`` and
Jacobians.

Forward kinematics is the only non-linear pass over the tree. Each body's transform relative to
its parent depends on its own joints only, so all of them are computed in parallel first (one
vectorised step per joint slot and joint type, over static index groups). World transforms are
then composed by pointer jumping: after step k every body holds its transform relative to the
ancestor 2**(k+1) levels up, so ``ceil(log2(depth))`` steps of one ``lax.scan`` reach the world.
Everything after that is a masked matmul in com-based frames (see ``flexor.tree``).

Derivatives with respect to the positions do not differentiate that composition: a custom JVP
moves every frame rigidly with the twists of the joints above it (cross products and two masked
sums, transposed by JAX for reverse mode), which made a rollout gradient about 1.5-1.8x cheaper.
"""

from __future__ import annotations

import functools
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax.ad_checkpoint import checkpoint_name
from jax.custom_derivatives import SymbolicZero

from flexor import math, tree
from flexor.types import CamLight, Data, JointType, Model, SameFrame


# The name (``jax.ad_checkpoint.checkpoint_name``) of the world frames and pre-joint frames
# that a step's rematerialisation (``integrate.step``) keeps for the backward pass: the position
# tangents (``_world_frames_jvp``) need nothing else from the composition.
FRAMES = "kinematics_frames"


def _compose(pos_a: jax.Array, quat_a: jax.Array, pos_b: jax.Array, quat_b: jax.Array):
  """Transform a∘b: frame b given in frame a, frame a given in its parent."""
  return pos_a + math.rot_vec_quat(pos_b, quat_a), math.quat_mul(quat_a, quat_b)


def _local_transforms(m: Model, qpos: jax.Array, mocap_pos: jax.Array, mocap_quat: jax.Array
                      ) -> tuple[jax.Array, ...]:
  """Every body's frame in its parent's frame, and joint anchors/axes in the parent's frame.

  One masked formula per joint slot serves every joint type, so the traced program has a fixed
  number of operations per slot whatever the mix of joint types.

  Returns:
    pos (nbody, 3), quat (nbody, 4): body frames relative to the parent body (the world for
      free-joint and mocap bodies). Row 0, the world, is the identity.
    anchor (njnt, 3), axis (njnt, 3): joint anchor and axis in the parent body's frame.
    before (njnt, 4): the body's frame in its parent's just before the joint acts (what a ball
      joint's quaternion rotates).
  """
  dtype = m.body_pos.dtype
  pos = m.body_pos.at[0].set(0.0)
  quat = m.body_quat.at[0].set(jnp.array([1.0, 0, 0, 0], dtype=dtype))
  if m.nmocap:
    mocap = np.flatnonzero(m.body_mocapid >= 0)
    pos = pos.at[mocap].set(mocap_pos[m.body_mocapid[mocap]])
    quat = quat.at[mocap].set(math.quat_normalize(mocap_quat[m.body_mocapid[mocap]]))

  anchors, axes, befores = [], [], []
  for slot in m.jnt_slot:  # joints of one body act in order; bodies within a slot do not
    jnt = np.maximum(slot, 0)
    jtype = np.where(slot >= 0, m.jnt_type[jnt], -1)[:, None]
    adr = m.jnt_qposadr[jnt]
    q = qpos[np.minimum(adr[:, None] + np.arange(7), max(m.nq - 1, 0))]
    axis_local, offset = m.jnt_axis[jnt], m.jnt_pos[jnt]
    angle = q[:, 0] - m.qpos0[adr]

    rot = math.quat_to_mat(quat)
    jaxis = math.mat_vec(rot, axis_local)
    janchor = pos + math.mat_vec(rot, offset)
    ball, slide, free = (jtype == t for t in (JointType.BALL, JointType.SLIDE, JointType.FREE))
    rotates = (jtype == JointType.HINGE) | ball
    # Static selects: the formulas of joint types absent from the slot leave the program.
    where = math.static_where
    new_quat, new_pos = quat, pos
    if rotates.any():
      if not ball.any():
        local = math.axis_angle_to_quat(axis_local, angle)
      elif not (rotates & ~ball).any():
        local = math.quat_normalize(q[:, :4])
      else:
        local = jnp.where(ball, math.quat_normalize(q[:, :4]),
                          math.axis_angle_to_quat(axis_local, angle))
      rotated = math.quat_mul(quat, local)
      new_quat = where(rotates, rotated, quat)
      new_pos = where(rotates, janchor - math.rot_vec_quat(offset, new_quat), pos)
    if slide.any():
      new_pos = where(slide, pos + jaxis * angle[:, None], new_pos)
    if free.any():
      new_quat = where(free, math.quat_normalize(q[:, 3:7]), new_quat)
      new_pos = where(free, q[:, :3], new_pos)
    anchors.append(where(free, q[:, :3], janchor))
    axes.append(where(free, axis_local, jaxis))
    befores.append(quat)
    pos, quat = new_pos, new_quat

  if m.njnt:
    slot_of = np.argmax(m.jnt_slot[:, m.jnt_bodyid] == np.arange(m.njnt), axis=0)
    anchor, axis, before = (jnp.stack(x)[slot_of, m.jnt_bodyid] for x in (anchors, axes, befores))
  else:
    anchor = axis = jnp.zeros((0, 3), dtype=dtype)
    before = jnp.zeros((0, 4), dtype=dtype)
  return pos, quat, anchor, axis, before


def _frames(m: Model, xpos: jax.Array, xquat: jax.Array, xmat: jax.Array):
  """World frames of inertias, geoms and sites, composed in one batch.

  Frames the compiler marked as coinciding with the body (or inertial) frame copy it, as
  ``mj_local2Global`` does, rather than compose with a near-identity offset.

  Returns:
    (pos, mat) pairs for inertial frames (nbody), geoms (ngeom) and sites (nsite).
  """
  bodyid = np.concatenate([np.arange(m.nbody), m.geom_bodyid, m.site_bodyid]).astype(np.int32)
  lpos = jnp.concatenate([m.body_ipos, m.geom_pos, m.site_pos])
  lquat = jnp.concatenate([m.body_iquat, m.geom_quat, m.site_quat])
  same = np.concatenate([m.body_sameframe, m.geom_sameframe, m.site_sameframe])[:, None]
  # xmat[bodyid] is quat_to_mat(xquat[bodyid]): rot_vec_quat's values, without rebuilding it
  pos = xpos[bodyid] + math.mat_vec(xmat[bodyid], lpos)
  quat = math.quat_mul(xquat[bodyid], lquat)
  mat = math.quat_to_mat(quat)
  pos = jnp.where(same == SameFrame.BODY, xpos[bodyid], pos)
  mat = jnp.where(np.isin(same, (SameFrame.BODY, SameFrame.BODYROT))[..., None], xmat[bodyid], mat)
  # The inertial frames are the first nbody rows, so INERTIA cases copy from there.
  pos = jnp.where(same == SameFrame.INERTIA, pos[bodyid], pos)
  mat = jnp.where(np.isin(same, (SameFrame.INERTIA, SameFrame.INERTIAROT))[..., None],
                  mat[bodyid], mat)
  # in memory before the split: each part's kernel would otherwise compose its quaternions
  # itself, heavy enough from a few hundred worlds for XLA's CPU backend to split it across
  # threads, which costs more than it saves (benchmarks/README.md)
  pos, mat = math.materialize((pos, mat))
  split = np.cumsum([m.nbody, m.ngeom])
  return tuple(zip(jnp.split(pos, split), jnp.split(mat, split)))


def _world(m: Model, qpos: jax.Array, mocap_pos: jax.Array, mocap_quat: jax.Array
           ) -> tuple[dict[str, jax.Array], jax.Array]:
  """The frames of ``kinematics`` (keyed as in Data) from the positions alone, and each joint's
  pre-joint frame in its parent body's (njnt, 4)."""
  lpos, lquat, lanchor, laxis, lbefore = _local_transforms(m, qpos, mocap_pos, mocap_quat)

  def jump(carry, ancestor):
    pos, quat = carry
    return _compose(pos[ancestor], quat[ancestor], pos, quat), None

  (xpos, xquat), _ = jax.lax.scan(jump, (lpos, lquat), jnp.asarray(m.body_jump))
  xquat = math.quat_normalize(xquat)
  xmat = math.quat_to_mat(xquat)

  # Joint frames were computed in the parent body's frame; free joints already in the world's.
  parent = m.body_parentid[m.jnt_bodyid]
  free = m.jnt_type == JointType.FREE
  xanchor = jnp.where(free[:, None], lanchor, xpos[parent] + math.mat_vec(xmat[parent], lanchor))
  xaxis = jnp.where(free[:, None], laxis, math.mat_vec(xmat[parent], laxis))

  (xipos, ximat), (geom_xpos, geom_xmat), (site_xpos, site_xmat) = _frames(m, xpos, xquat, xmat)
  frames = dict(xpos=xpos, xquat=xquat, xmat=xmat, xanchor=xanchor, xaxis=xaxis, xipos=xipos,
                ximat=ximat, geom_xpos=geom_xpos, geom_xmat=geom_xmat, site_xpos=site_xpos,
                site_xmat=site_xmat)
  return frames, lbefore


def _rotation_rate(q: jax.Array, dq: jax.Array) -> jax.Array:
  """World angular velocity (..., 3) of the frame ``quat_normalize(q)`` as q moves by dq, both
  (..., 4), in the frame q is given in: 2 vec(dq_n conj(q_n)) with dq_n = d(q / |q|), where
  normalization's component along q drops out. Zero where q is the (too small) identity
  fallback."""
  n = math.safe_norm(q, keepdims=True)
  small = n < math.MINVAL
  unit = q / jnp.where(small, 1.0, n)
  rate = 2 * math.quat_mul(dq, math.quat_conj(unit))[..., 1:] / jnp.where(small, 1.0, n)
  return jnp.where(small, 0.0, rate)


def _mover_twists(m: Model, qpos: jax.Array, mocap_quat: jax.Array, frames: dict[str, jax.Array],
                  before: jax.Array, dqpos: jax.Array, dmocap_pos: jax.Array,
                  dmocap_quat: jax.Array) -> jax.Array:
  """The rigid motion each joint and mocap body imparts for position tangents, (njnt + nmocap,
  6): world angular velocity, then the velocity of the point at the tree root's xpos.

  A hinge turns about xaxis through xanchor, a slide moves along xaxis, a ball turns its
  pre-joint frame (``before``, (njnt, 4) in the parent body's frame) about xanchor, and a free
  joint (or mocap body) moves its body's origin and turns the body about it.
  """
  jtype, adr = m.jnt_type, m.jnt_qposadr
  hinge, slide, ball, free = (np.flatnonzero(jtype == t) for t in (
      JointType.HINGE, JointType.SLIDE, JointType.BALL, JointType.FREE))
  quat = lambda j, at: np.asarray(adr[j] + at)[:, None] + np.arange(4)
  still = lambda j: jnp.zeros((len(j), 3), dtype=qpos.dtype)
  axis = frames["xaxis"]
  ball_rate = _rotation_rate(qpos[quat(ball, 0)], dqpos[quat(ball, 0)])
  parent = m.body_parentid[m.jnt_bodyid[ball]]
  ball_rate = math.rot_vec_quat(ball_rate, math.quat_mul(frames["xquat"][parent], before[ball]))
  omega = jnp.concatenate([axis[hinge] * dqpos[adr[hinge], None], still(slide), ball_rate,
                           _rotation_rate(qpos[quat(free, 3)], dqpos[quat(free, 3)])])
  shift = dqpos[np.asarray(adr[free])[:, None] + np.arange(3)]
  vel = jnp.concatenate([still(hinge), axis[slide] * dqpos[adr[slide], None], still(ball), shift])
  order = np.argsort(np.concatenate([hinge, slide, ball, free]))
  omega, vel = omega[order], vel[order]
  ref = frames["xpos"][m.body_rootid[m.jnt_bodyid]]
  vel = vel + math.cross(frames["xanchor"] - ref, omega)
  # A mocap body is a child of the world, its own tree root: its origin is the reference point.
  mocap_omega = _rotation_rate(mocap_quat, dmocap_quat)
  return jnp.concatenate([jnp.concatenate([omega, vel], axis=-1),
                          jnp.concatenate([mocap_omega, dmocap_pos], axis=-1)])


def _mover_masks(m: Model) -> tuple[np.ndarray, np.ndarray]:
  """Which joints and mocap bodies (columns, as in ``_mover_twists``) move each body's frame
  (nbody, nmover) and each joint's anchor and axis (njnt, nmover): those of the body and its
  ancestors, and for a joint frame those of strict ancestors and of the joints before it in its
  body (a joint does not move its own anchor and axis, except a free joint's translation, which
  ``_frame_tangents`` adds)."""
  mover_body = np.concatenate([m.jnt_bodyid, np.flatnonzero(m.body_mocapid >= 0)[
      np.argsort(m.body_mocapid[m.body_mocapid >= 0])]]).astype(int)
  body = m.body_subtree.T[:, mover_body]
  jnt = body[m.jnt_bodyid] & ~(m.jnt_bodyid[:, None] == mover_body[None, :])
  earlier = (m.jnt_bodyid[:, None] == mover_body[None, :m.njnt]) & (
      np.arange(m.njnt)[None, :] < np.arange(m.njnt)[:, None])
  jnt[:, :m.njnt] |= earlier
  return body, jnt


def _moving_frames(m: Model, body_mask: np.ndarray, jnt_mask: np.ndarray) -> set[str]:
  """The keys of ``kinematics``' frames that some joint or mocap body moves (static).

  The others get zero tangents, not zero-valued products of the twists. Besides saving the
  products, this keeps batching consistent: under ``vmap`` JAX batches a custom JVP's primal
  before its tangents and records the primal's batch dimensions, so a tangent batched where the
  primal is not (the rotations of a model whose joints all slide, whose primal never reads qpos)
  makes a later differentiation of the batched program fail (``jax.grad`` of a ``vmap``)."""
  spins = np.concatenate([np.isin(m.jnt_type, (JointType.HINGE, JointType.BALL, JointType.FREE)),
                          np.ones(body_mask.shape[1] - m.njnt, dtype=bool)])
  moved, turned = body_mask.any(axis=1), (body_mask & spins).any(axis=1)
  keys = set()
  for key, bodyid in (("x", np.arange(m.nbody)), ("xi", np.arange(m.nbody)),
                      ("geom_x", m.geom_bodyid), ("site_x", m.site_bodyid)):
    keys |= {f"{key}pos"} if moved[bodyid].any() else set()
    keys |= {f"{key}mat"} if turned[bodyid].any() else set()
  keys |= {"xquat"} if turned.any() else set()
  keys |= {"xanchor"} if jnt_mask.any() or (m.jnt_type == JointType.FREE).any() else set()
  keys |= {"xaxis"} if (jnt_mask & spins).any() else set()
  return keys


def _moved(twist: jax.Array, point: jax.Array, ref: jax.Array) -> jax.Array:
  """Velocity of ``point`` under twist (angular, velocity at ``ref``), (..., 3)."""
  return twist[..., 3:] + math.cross(twist[..., :3], point - ref)


def _turned(twist: jax.Array, mat: jax.Array) -> jax.Array:
  """Rate of a rotation matrix (..., 3, 3) turning with angular velocity twist[..., :3]."""
  return math.cross(twist[..., None, :3], jnp.swapaxes(mat, -1, -2)).swapaxes(-1, -2)


def _frame_tangents(m: Model, frames: dict[str, jax.Array], twists: jax.Array,
                    dqpos: jax.Array) -> dict[str, jax.Array]:
  """Tangents of every frame of ``kinematics`` given the movers' twists: each body, and each of
  its inertial, geom and site frames, moves rigidly with the sum of the twists that move it."""
  body_mask, jnt_mask = _mover_masks(m)
  body = tree.masked_sum(body_mask, twists)                     # (nbody, 6)
  jnt = tree.masked_sum(jnt_mask, twists)                       # (njnt, 6)
  free = np.flatnonzero(m.jnt_type == JointType.FREE)
  if free.size:
    own = dqpos[m.jnt_qposadr[free][:, None] + np.arange(3)]
    jnt = jnt.at[free, 3:].add(own)
  root = frames["xpos"][m.body_rootid]
  half = lambda: jnp.concatenate([jnp.zeros_like(body[:, :1]), 0.5 * body[:, :3]], axis=-1)
  rules = {"xquat": lambda: math.quat_mul(half(), frames["xquat"]),
           "xanchor": lambda: _moved(jnt, frames["xanchor"], root[m.jnt_bodyid]),
           "xaxis": lambda: math.cross(jnt[:, :3], frames["xaxis"])}
  for key, bodyid in (("x", np.arange(m.nbody)), ("xi", np.arange(m.nbody)),
                      ("geom_x", m.geom_bodyid), ("site_x", m.site_bodyid)):
    rules[f"{key}pos"] = lambda key=key, b=bodyid: _moved(body[b], frames[f"{key}pos"], root[b])
    rules[f"{key}mat"] = lambda key=key, b=bodyid: _turned(body[b], frames[f"{key}mat"])
  moving = _moving_frames(m, body_mask, jnt_mask)
  return {k: rule() if k in moving else jnp.zeros_like(frames[k]) for k, rule in rules.items()}


def _is_zero(tangent) -> bool:
  """Whether every leaf of ``tangent`` is a symbolic zero (its primal is not differentiated)."""
  return all(isinstance(t, SymbolicZero) for t in jax.tree_util.tree_leaves(
      tangent, is_leaf=lambda t: isinstance(t, SymbolicZero)))


def _zeros(tangent):
  """``tangent`` with symbolic zeros made arrays (float0 for integer primals)."""
  def instantiate(t):
    if not isinstance(t, SymbolicZero):
      return t
    return (np.zeros(t.aval.shape, t.aval.dtype) if t.aval.dtype == jax.dtypes.float0
            else jnp.zeros(t.aval.shape, t.aval.dtype))
  return jax.tree_util.tree_map(instantiate, tangent, is_leaf=lambda t: isinstance(t, SymbolicZero))


@jax.custom_jvp
def _world_frames(m: Model, qpos: jax.Array, mocap_pos: jax.Array,
                  mocap_quat: jax.Array) -> dict[str, jax.Array]:
  return _world(m, qpos, mocap_pos, mocap_quat)[0]


@functools.partial(_world_frames.defjvp, symbolic_zeros=True)
def _world_frames_jvp(primals, tangents):
  """Position tangents move the frames rigidly (``_frame_tangents``): a handful of cross products
  and two masked sums, where differentiating the composition itself (the joint slots, the
  pointer-jumping scan, normalizations and quaternion-to-matrix conversions) costs several times
  the forward pass, and its transpose more. Model tangents (system identification) go through
  the composition."""
  m, qpos, mocap_pos, mocap_quat = primals
  dm, dqpos, dmocap_pos, dmocap_quat = tangents
  frames, before = checkpoint_name(_world(m, qpos, mocap_pos, mocap_quat), FRAMES)
  out = {k: jnp.zeros_like(v) for k, v in frames.items()}
  if not all(_is_zero(t) for t in (dqpos, dmocap_pos, dmocap_quat)):
    dqpos, dmocap_pos, dmocap_quat = _zeros((dqpos, dmocap_pos, dmocap_quat))
    twists = _mover_twists(m, qpos, mocap_quat, frames, before, dqpos, dmocap_pos, dmocap_quat)
    out = _frame_tangents(m, frames, twists, dqpos)
  by_model = math.jvp_nonzero(lambda mm: _world(mm, qpos, mocap_pos, mocap_quat)[0], (m,), (dm,))
  if by_model is not None:
    out = jax.tree_util.tree_map(jnp.add, out, by_model)
  return frames, out


def kinematics(m: Model, d: Data) -> Data:
  """Computes xpos, xquat, xmat, xipos, ximat, xanchor, xaxis, geom and site frames from qpos."""
  with jax.named_scope("kinematics"):
    frames = _world_frames(m, d.qpos, d.mocap_pos, d.mocap_quat)
  return d.replace(**frames)


def _dof_axes(m: Model):
  """Static per-dof description of cdof: (source, column, rotational).

  source: 0 = joint axis (hinge, slide), 1 = body frame column (ball, free rotation),
  2 = world unit vector (free translation); column: which column / unit vector;
  rotational: the dof rotates about its axis (else it translates along it).
  """
  jtype = m.jnt_type[m.dof_jntid]
  k = np.arange(m.nv) - m.jnt_dofadr[m.dof_jntid]
  source = np.select([jtype == JointType.FREE, jtype == JointType.BALL], [np.where(k < 3, 2, 1), 1], 0)
  column = np.where(jtype == JointType.FREE, k % 3, np.where(jtype == JointType.BALL, k, 0))
  rotational = ~((jtype == JointType.SLIDE) | ((jtype == JointType.FREE) & (k < 3)))
  return source, column, rotational


def com_pos(m: Model, d: Data) -> Data:
  """Computes subtree_com, cinert and cdof (com-based frames: origin at the root's subtree com)."""
  with jax.named_scope("com_pos"):
    mass = m.body_mass
    weighted = mass[:, None] * d.xipos
    smass = tree.subtree_sum(m, mass)
    scom = tree.subtree_sum(m, weighted)
    total = jnp.sum(mass)
    smass = smass.at[0].set(total)
    scom = scom.at[0].set(jnp.sum(weighted, axis=0))
    heavy = smass > math.MINVAL
    subtree_com = jnp.where(heavy[:, None], scom / jnp.where(heavy, smass, 1.0)[:, None], d.xipos)

    # static gathers as slices (math.take): their transposes fuse, a gather's is a scatter loop
    root_com = math.take(subtree_com, m.body_rootid)
    cinert = math.inert_com(m.body_inertia, d.ximat, d.xipos - root_com, mass)
    cinert = cinert.at[0].set(0.0)

    source, column, rotational = _dof_axes(m)
    eye = np.eye(3, dtype=mass.dtype)
    where = math.static_where
    axis = where((source == 0)[:, None], d.xaxis[m.dof_jntid],
                 where((source == 1)[:, None], d.xmat[m.dof_bodyid, :, column], eye[column]))
    offset = math.take(root_com, m.dof_bodyid) - math.take(d.xanchor, m.dof_jntid)
    rot = rotational[:, None]
    cdof = jnp.concatenate([where(rot, axis, 0.0), where(rot, math.cross(axis, offset), axis)],
                           axis=-1)
  return d.replace(subtree_com=subtree_com, cinert=cinert, cdof=cdof)


def _unit3(v: jax.Array) -> jax.Array:
  """v / |v| along the last axis, (1, 0, 0) where |v| < mjMINVAL (mju_normalize3)."""
  n = math.safe_norm(v, keepdims=True)
  small = n < math.MINVAL
  return jnp.where(small, jnp.zeros_like(v).at[..., 0].set(1.0), v / jnp.where(small, 1.0, n))


def fixed_camlight(m: Model, d: Data) -> tuple[jax.Array, ...]:
  """Cameras' and lights' frames moving rigidly with their bodies, after kinematics: cam_xpos
  (ncam, 3), cam_xmat (ncam, 3, 3), light_xpos (nlight, 3), light_xdir (nlight, 3), unit.

  Those on the world body keep their own frames (the world's is the identity): most models
  light the scene from the world, and composing with it would cost a few kernels a step. Where
  all of them are on the world body, or none, the other case is not traced at all."""
  def on_bodies(bodyid: np.ndarray, own: tuple[jax.Array, ...],
                moving: Callable[[], tuple[jax.Array, ...]]) -> tuple[jax.Array, ...]:
    world = (bodyid == 0)[:, None]
    if world.all():
      return own
    moved = moving()
    if not world.any():
      return moved
    return tuple(math.static_where(world, a, b) for a, b in zip(own, moved))

  cam_xpos, cam_quat = on_bodies(
      m.cam_bodyid, (m.cam_pos, m.cam_quat),
      lambda: _compose(d.xpos[m.cam_bodyid], d.xquat[m.cam_bodyid], m.cam_pos, m.cam_quat))
  light_xpos, light_xdir = on_bodies(
      m.light_bodyid, (m.light_pos, m.light_dir),
      lambda: (d.xpos[m.light_bodyid] + math.rot_vec_quat(m.light_pos, d.xquat[m.light_bodyid]),
               math.rot_vec_quat(m.light_dir, d.xquat[m.light_bodyid])))
  cam_xmat = math.quat_to_mat(cam_quat) if m.ncam else jnp.zeros((0, 3, 3), cam_quat.dtype)
  return cam_xpos, cam_xmat, light_xpos, _unit3(light_xdir) if m.nlight else light_xdir


def _modes(mode: np.ndarray, target: np.ndarray, body: np.ndarray, d: Data, fixed_pos: jax.Array,
           pos0: jax.Array, poscom0: jax.Array) -> tuple[jax.Array, np.ndarray, np.ndarray,
                                                         jax.Array | None]:
  """(position, whether the orientation is the stored one, whether aimed at a target, the point
  looked at or None where nothing aims) of cameras or lights in their modes: tracking modes move
  with the body or its subtree com at a stored orientation; target modes keep the fixed position
  and look at the target body or its com (without a target, the mode acts as fixed). The modes
  are static: a mode no element has costs nothing."""
  col = lambda x: x[:, None]
  where = math.static_where
  pos = fixed_pos
  if (mode == CamLight.TRACKCOM).any():
    pos = where(col(mode == CamLight.TRACKCOM), d.subtree_com[body] + poscom0, pos)
  if (mode == CamLight.TRACK).any():
    pos = where(col(mode == CamLight.TRACK), d.xpos[body] + pos0, pos)
  tracking = col(np.isin(mode, (CamLight.TRACK, CamLight.TRACKCOM)))
  aimed = col(np.isin(mode, (CamLight.TARGETBODY, CamLight.TARGETBODYCOM)) & (target >= 0))
  lookat = None
  if aimed.any():
    aim = np.maximum(target, 0)
    lookat = where(col(mode == CamLight.TARGETBODY), d.xpos[aim], d.subtree_com[aim])
  return pos, tracking, aimed, lookat


def camlight(m: Model, d: Data) -> Data:
  """Computes cam_xpos, cam_xmat, light_xpos, light_xdir (mj_camlight), after com_pos.

  A targeting camera's z axis points away from what it looks at and its x axis is horizontal
  (orthogonal to the world's z); a targeting light points at it."""
  if not m.ncam and not m.nlight:
    return d
  where = math.static_where
  with jax.named_scope("camlight"):
    tracks = lambda mode: np.isin(mode, (CamLight.TRACK, CamLight.TRACKCOM))
    if tracks(m.cam_mode).all() and tracks(m.light_mode).all():
      # every one moves with its body at a stored orientation (dm_control's cameras and lights):
      # no fixed pose is read, and none is traced or differentiated
      dtype = d.xpos.dtype
      cam_xpos, cam_xmat = jnp.zeros((m.ncam, 3), dtype), jnp.zeros((m.ncam, 3, 3), dtype)
      light_xpos, light_xdir = jnp.zeros((m.nlight, 3), dtype), jnp.zeros((m.nlight, 3), dtype)
    else:
      cam_xpos, cam_xmat, light_xpos, light_xdir = fixed_camlight(m, d)
    if m.ncam:
      cam_xpos, tracking, aimed, lookat = _modes(m.cam_mode, m.cam_targetbodyid, m.cam_bodyid,
                                                 d, cam_xpos, m.cam_pos0, m.cam_poscom0)
      if lookat is not None:
        z = _unit3(cam_xpos - lookat)
        x = _unit3(math.cross(jnp.broadcast_to(jnp.eye(3, dtype=z.dtype)[2], z.shape), z))
        look = jnp.stack([x, _unit3(math.cross(z, x)), z], axis=-1)
        cam_xmat = where(aimed[..., None], look, cam_xmat)
      cam_xmat = where(tracking[..., None], m.cam_mat0.reshape(-1, 3, 3), cam_xmat)
    if m.nlight:
      light_xpos, tracking, aimed, lookat = _modes(m.light_mode, m.light_targetbodyid,
                                                   m.light_bodyid, d, light_xpos, m.light_pos0,
                                                   m.light_poscom0)
      if lookat is not None:
        light_xdir = where(aimed, lookat - light_xpos, light_xdir)
      light_xdir = _unit3(where(tracking, m.light_dir0, light_xdir))
  return d.replace(cam_xpos=cam_xpos, cam_xmat=cam_xmat, light_xpos=light_xpos,
                   light_xdir=light_xdir)


def com_vel(m: Model, d: Data) -> Data:
  """Computes cvel (body spatial velocities) and cdof_dot (time derivatives of cdof)."""
  with jax.named_scope("com_vel"):
    dof_vel = d.cdof * d.qvel[:, None]
    cvel = tree.path_sum(m, dof_vel)
    before = tree.masked_sum(m.dof_cdofdot, dof_vel)
    cdof_dot = math.motion_cross(before, d.cdof)
  return d.replace(cvel=cvel, cdof_dot=cdof_dot)


def jac(m: Model, d: Data, point: jax.Array, body: np.ndarray | jax.Array):
  """Translational and rotational Jacobians of points attached to bodies (mj_jac).

  Args:
    point: (n, 3) world positions.
    body: (n,) ids of the bodies the points move with.
  Returns:
    jacp (n, nv, 3), jacr (n, nv, 3): d(point velocity)/d(qvel), d(body angular velocity)/d(qvel).
  """
  moves = jnp.asarray(m.body_dof, dtype=d.cdof.dtype)[body]         # (n, nv)
  offset = point - d.subtree_com[jnp.asarray(m.body_rootid)[body]]  # (n, 3)
  ang = d.cdof[None, :, :3]
  jacp = d.cdof[None, :, 3:] + math.cross(ang, offset[:, None, :])
  return jacp * moves[..., None], ang * moves[..., None]


@jax.custom_jvp
def _along_dofs(wrench: jax.Array, cdof: jax.Array) -> jax.Array:
  """wrench @ cdof.T (n, nv) for wrench (n, 6) and cdof (nv, 6).

  As six multiply-adds that fuse into one loop: under vmap a batched product of such small
  matrices costs several times more on a CPU. The derivative is written as the two products,
  because reverse mode through the broadcasts would reduce over them, each a slow kernel of
  its own on XLA's CPU backend, where the products transpose into products."""
  return sum(wrench[:, None, k] * cdof[None, :, k] for k in range(6))


@_along_dofs.defjvp
def _along_dofs_jvp(primals: tuple[jax.Array, jax.Array], tangents: tuple[jax.Array, jax.Array]):
  wrench, cdof = primals
  dwrench, dcdof = tangents
  # The barrier keeps the transpose of dcdof where it is: reverse mode then contracts the rows
  # as wrench' @ cotangent, with the small wrench transposed, where XLA otherwise folds the
  # transposes into cotangent' @ wrench, a product over the major axis of the large operand
  # that its CPU backend runs 2.5x slower (585 vs 228 us a step, contact humanoid, B=64).
  return (_along_dofs(wrench, cdof),
          dwrench @ cdof.T + wrench @ jax.lax.optimization_barrier(dcdof.T))


def jac_along(m: Model, d: Data, point: jax.Array, body: np.ndarray | jax.Array,
              lin: jax.Array, rot: jax.Array | None = None,
              moves: np.ndarray | jax.Array | None = None) -> jax.Array:
  """Jacobians (n, nv) of lin . (point velocity) + rot . (body angular velocity) for points
  (n, 3) attached to bodies (n,), directions lin and rot (n, 3): lin' jacp + rot' jacr from
  ``jac``, as one (n, 6) x (6, nv) product, since lin . (w x r) = w . (r x lin). ``moves``
  (n, nv) weighs each dof (default: 1 on the dofs that move the body, body_dof)."""
  offset = point - d.subtree_com[jnp.asarray(m.body_rootid)[body]]
  ang = math.cross(offset, lin) if rot is None else math.cross(offset, lin) + rot
  if moves is None:
    moves = jnp.asarray(m.body_dof, dtype=d.cdof.dtype)[body]
  return _along_dofs(jnp.concatenate([ang, lin], axis=-1), d.cdof) * moves


def shared_root(m: Model, body1: np.ndarray | jax.Array, body2: np.ndarray | jax.Array
                ) -> tuple[np.ndarray, np.ndarray] | None:
  """(reference body (n,), signed dof weights (n, nv)) with which one ``jac_along`` gives body
  2's Jacobian minus body 1's, or None.

  Both Jacobians measure the point from the subtree com of their body's tree root, so they
  share the (n, 6) x (6, nv) product where the two bodies are in one tree, or where one of them
  has no dofs (its Jacobian is zero): the reference is body 2 unless it has no dofs, and the
  weights are body_dof[body2] - body_dof[body1]. Known for static bodies only (None for traced
  ones, or where some pair spans two moving trees); the result is the two products' to the bit.
  """
  if not isinstance(body1, np.ndarray) or not isinstance(body2, np.ndarray):
    return None
  moves1, moves2 = m.body_dof[body1], m.body_dof[body2]
  fixed1, fixed2 = ~moves1.any(-1), ~moves2.any(-1)
  if not np.all((m.body_rootid[body1] == m.body_rootid[body2]) | fixed1 | fixed2):
    return None
  return np.where(fixed2, body1, body2), moves2.astype(int) - moves1.astype(int)


def normal_jac(m: Model, d: Data, point: jax.Array, normal: jax.Array,
               body1: np.ndarray | jax.Array, body2: np.ndarray | jax.Array) -> jax.Array:
  """Jacobians (n, nv) of the relative velocity along ``normal`` (n, 3) at ``point`` (n, 3) of
  body2 (n,) with respect to body1 (n,): normal . (jacp(body2) - jacp(body1))."""
  shared = shared_root(m, body1, body2)
  if shared is not None:
    return jac_along(m, d, point, shared[0], normal, moves=shared[1].astype(d.cdof.dtype))
  return jac_along(m, d, point, body2, normal) - jac_along(m, d, point, body1, normal)


def point_jac_dot(m: Model, d: Data, point: jax.Array, body: np.ndarray):
  """Velocities and Jacobian derivatives times qvel of points fixed to bodies (mj_jacDot @ qvel).

  Args:
    point: (k, 3) world positions.
    body: (k,) ids of the bodies the points move with.
  Returns:
    vel (k, 3) the points' velocities; acc (k, 3) d(jacp)/dt qvel; acc_ang (k, 3)
    d(jacr)/dt qvel. With offset = point - subtree_com[root] and S the sum along the body's
    path of qvel * cdof_dot (for a quaternion dof mj_jacDot uses cvel x cdof in place of
    cdof_dot, as here): acc = S_lin + S_ang x offset + omega x vel, acc_ang = S_ang.
  """
  jtype = m.jnt_type[m.dof_jntid]
  quat = (jtype == JointType.BALL) | ((jtype == JointType.FREE)
                                      & (np.arange(m.nv) >= m.jnt_dofadr[m.dof_jntid] + 3))
  cdof_dot = jnp.where(quat[:, None], math.motion_cross(d.cvel[m.dof_bodyid], d.cdof), d.cdof_dot)
  path = tree.path_sum(m, cdof_dot * d.qvel[:, None])[body]
  offset = point - d.subtree_com[m.body_rootid[body]]
  ang = d.cvel[body, :3]
  vel = d.cvel[body, 3:] - math.cross(offset, ang)
  return vel, path[:, 3:] + math.cross(path[:, :3], offset) + math.cross(ang, vel), path[:, :3]


def apply_ft(m: Model, d: Data, force: jax.Array, torque: jax.Array, point: jax.Array) -> jax.Array:
  """Joint-space force of world-frame forces and torques acting on every body (mj_applyFT).

  Args:
    force: (nbody, 3) N, applied at ``point``.
    torque: (nbody, 3) Nm.
    point: (nbody, 3) world points of application.
  Returns:
    (nv,) generalised force J' [force; torque], summed over bodies.
  """
  offset = point - d.subtree_com[m.body_rootid]
  spatial = jnp.concatenate([torque + math.cross(offset, force), force], axis=-1)  # (nbody, 6)
  per_dof = tree.to_dofs(m, spatial)                                              # (nv, 6)
  return jnp.sum(d.cdof * per_dof, axis=-1)
