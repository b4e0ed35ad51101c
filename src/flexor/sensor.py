"""Sensors: ``sensor_pos``, ``sensor_vel``, ``sensor_acc`` (MuJoCo's ``engine_sensor.c``).

Each stage fills the sensordata entries of the sensors whose ``sensor_needstage`` is its stage,
as mj_sensorPos/Vel/Acc do, then applies the cutoff: real values are clamped to
[-cutoff, cutoff], positive ones (touch) to [.., cutoff], axes, quaternions and fromto segments
never; a cutoff of 0 means none (for the geom distance sensors it is also the search distance).
Noise (``sensor_noise``) is reported for users and never added, as in MuJoCo.

Sensors are computed per type, vectorized over the sensors of that type with static index
arrays, and scattered into sensordata; the only Python loop is over the types present. Frame
objects are looked up in one table of frames: the inertial frames of bodies (ObjType.BODY), body
frames (XBODY), geoms, sites and cameras, in that order.

Rangefinders cast their rays with ``flexor.ray``; the geom distance sensors call the narrow
phase's primitive colliders (``collision_primitive``) with the cutoff as margin. The energy
sensors read ``energy_pos`` and ``energy_vel`` of the current state. One difference from
MuJoCo 4.0: with EnableBit.ENERGY set, MuJoCo's e_kinetic sensor, computed at the position
stage, reports the kinetic energy that the previous mj_forward's velocity stage stored (its flag
of a computed energy is still set then); flexor reports the current one, as MuJoCo does without
the flag.
"""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

from flexor import (collision, collision_convex, collision_primitive, constraint, history, math,
                    passive, ray, tree)
from flexor.mjcf.contact_pairs import DISTANCE_CCD, DISTANCE_PAIRS, HAS_FUNCTION
from flexor.rne import contact_force, rne_postconstraint
from flexor.types import (ConstraintType, Data, DataType, DisableBit, EnableBit, GeomType, Model,
                          ObjType, SensorType, Stage, TrnType)

S = SensorType
_Compute = Callable[[Model, Data, np.ndarray], jax.Array]


# ----------------------------------------------------------------------------- frames


def _frame_index(m: Model, objtype: np.ndarray, objid: np.ndarray) -> np.ndarray:
  """Rows of the frame table (see the module docstring) of objects (n,)."""
  offset = np.zeros(max(ObjType) + 1, dtype=np.int64)
  offset[[ObjType.XBODY, ObjType.GEOM, ObjType.SITE, ObjType.CAMERA]] = (
      m.nbody, 2 * m.nbody, 2 * m.nbody + m.ngeom, 2 * m.nbody + m.ngeom + m.nsite)
  return offset[np.asarray(objtype, dtype=np.int64)] + np.asarray(objid, dtype=np.int64)


def _frame_body(m: Model, objtype: np.ndarray, objid: np.ndarray) -> np.ndarray:
  """Body ids (n,) that frame objects move with."""
  body = np.concatenate([np.arange(m.nbody), np.arange(m.nbody), m.geom_bodyid, m.site_bodyid,
                         m.cam_bodyid])
  return body[_frame_index(m, objtype, objid)].astype(np.int64)


def _frames(m: Model, d: Data, objtype: np.ndarray, objid: np.ndarray):
  """World positions (n, 3) and orientations (n, 3, 3) of frame objects (get_xpos_xmat)."""
  pos = jnp.concatenate([d.xipos, d.xpos, d.geom_xpos, d.site_xpos, d.cam_xpos])
  mat = jnp.concatenate([d.ximat, d.xmat, d.geom_xmat, d.site_xmat, d.cam_xmat])
  index = _frame_index(m, objtype, objid)
  return pos[index], mat[index]


def _frame_quats(m: Model, d: Data, objtype: np.ndarray, objid: np.ndarray) -> jax.Array:
  """World orientations (n, 4) of frame objects: body xquat times the local quat (get_xquat)."""
  unit = jnp.broadcast_to(jnp.array([1.0, 0.0, 0.0, 0.0], d.xquat.dtype), (m.nbody, 4))
  local = jnp.concatenate([m.body_iquat, unit, m.geom_quat, m.site_quat, m.cam_quat])
  index = _frame_index(m, objtype, objid)
  return math.quat_mul(d.xquat[_frame_body(m, objtype, objid)], local[index])


def _spatial(m: Model, d: Data, motion: jax.Array, objtype: np.ndarray, objid: np.ndarray,
             local: bool) -> jax.Array:
  """A com-based motion vector of each object's body moved to the object (n, 6), in world or
  object orientation (mju_transformSpatial); zero on bodies welded to the world."""
  body = _frame_body(m, objtype, objid)
  pos, mat = _frames(m, d, objtype, objid)
  vec = motion[body]
  ang = vec[:, :3]
  lin = vec[:, 3:] - math.cross(pos - d.subtree_com[m.body_rootid[body]], ang)
  if local:
    ang, lin = math.mat_t_vec(mat, ang), math.mat_t_vec(mat, lin)
  moving = (m.body_dofnum[m.body_weldid[body]] > 0)[:, None]
  return jnp.where(moving, jnp.concatenate([ang, lin], axis=-1), 0.0)


def object_velocity(m: Model, d: Data, objtype: np.ndarray, objid: np.ndarray,
                    local: bool) -> jax.Array:
  """(angular, linear) velocities (n, 6) of frame objects at their origins (mj_objectVelocity)."""
  return _spatial(m, d, d.cvel, objtype, objid, local)


def object_acceleration(m: Model, d: Data, objtype: np.ndarray, objid: np.ndarray,
                        local: bool) -> jax.Array:
  """(angular, linear) accelerations (n, 6) of frame objects (mj_objectAcceleration): cacc moved
  to the object plus the Coriolis term w x v of the rotating frame. Needs rne_postconstraint."""
  acc = _spatial(m, d, d.cacc, objtype, objid, local)
  vel = _spatial(m, d, d.cvel, objtype, objid, local)
  return acc.at[:, 3:].add(math.cross(vel[:, :3], vel[:, 3:]))


# ----------------------------------------------------------------------------- per-type values


def _objid(m: Model, ids: np.ndarray) -> np.ndarray:
  return m.sensor_objid[ids].astype(np.int64)


def _site_frames(m: Model, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  return np.full(len(ids), int(ObjType.SITE)), _objid(m, ids)


def _outputs(m: Model, ids: np.ndarray) -> np.ndarray:
  """Actuator output indices (n, dim) of actuator sensors of one dimension."""
  return m.actuator_outadr[_objid(m, ids)][:, None] + np.arange(m.sensor_dim[ids[0]])[None, :]


def _limit_rows(m: Model, kind: ConstraintType, ids: np.ndarray) -> np.ndarray:
  """Rows (n, 2) of each sensor's joint or tendon limit (lower, upper; -1 where none): an
  object's limit rows are consecutive."""
  rows = constraint.rows_of(m, kind)
  match = m.efc_rowid[rows][None, :] == _objid(m, ids)[:, None]          # (n, nrows)
  count = match.sum(axis=1)
  first = np.argmax(match, axis=1) if rows.size else np.zeros(len(ids), np.int64)
  padded = np.concatenate([rows, [-1, -1]])
  return np.stack([np.where(count > 0, padded[first], -1),
                   np.where(count > 1, padded[first + 1], -1)], axis=1)


def _limit_value(m: Model, d: Data, kind: ConstraintType, ids: np.ndarray,
                 value: jax.Array) -> jax.Array:
  """The value of the first active limit row of each sensor's object, else 0 (n, 1)."""
  rows = _limit_rows(m, kind, ids)
  safe = np.maximum(rows, 0)
  active = d.efc_active[safe] & (rows >= 0)
  first = jnp.where(active[:, 0], value[safe[:, 0]],
                    jnp.where(active[:, 1], value[safe[:, 1]], 0.0))
  return first[:, None]


def _frame_axis(axis: int) -> _Compute:
  def compute(m: Model, d: Data, ids: np.ndarray) -> jax.Array:
    _, mat = _frames(m, d, m.sensor_objtype[ids], m.sensor_objid[ids])
    value = mat[:, :, axis]
    return _in_reference(m, d, ids, value, lambda ref_mat, _: math.mat_t_vec(ref_mat, value))
  return compute


def _in_reference(m: Model, d: Data, ids: np.ndarray, value: jax.Array,
                  relative: Callable[[jax.Array, jax.Array], jax.Array]) -> jax.Array:
  """``value`` (n, k) where a sensor has no reference frame, else relative(ref_mat, ref_pos)."""
  refid = m.sensor_refid[ids]
  has_ref = refid >= 0
  if not has_ref.any():
    return value
  reftype = np.where(has_ref, m.sensor_reftype[ids], int(ObjType.XBODY))
  ref_pos, ref_mat = _frames(m, d, reftype, np.maximum(refid, 0))
  return jnp.where(has_ref[:, None], relative(ref_mat, ref_pos), value)


def _camprojection(m: Model, d: Data, ids: np.ndarray) -> jax.Array:
  """Pixel coordinates (n, 2) of sites in cameras' images (cam_project): x to the right, y
  down, from the top-left corner. With a sensor size the focal lengths in pixels come from
  the intrinsics in float32, as MuJoCo computes them; otherwise from fovy."""
  site, cam = _objid(m, ids), m.sensor_refid[ids]
  dtype = d.qpos.dtype
  res = jnp.asarray(m.cam_resolution[cam], dtype)
  sensor = m.cam_sensorsize[cam]
  f32 = lambda x: x.astype(jnp.float32)
  from_intrinsic = (f32(m.cam_intrinsic[cam, :2]) / f32(sensor)
                    * m.cam_resolution[cam].astype(np.float32)).astype(dtype)
  from_fovy = (0.5 / jnp.tan(m.cam_fovy[cam] * np.pi / 360.0) * res[:, 1])[:, None]
  has_sensor = ((sensor[:, 0] != 0) & (sensor[:, 1] != 0))[:, None]
  focal = jnp.where(has_sensor, from_intrinsic, from_fovy)
  local = math.mat_t_vec(d.cam_xmat[cam], d.site_xpos[site] - d.cam_xpos[cam])
  depth = local[:, 2]
  depth = jnp.where(jnp.abs(depth) < math.MINVAL,
                    jnp.where(depth < 0, -math.MINVAL, math.MINVAL), depth)
  return jnp.stack([-focal[:, 0] * (local[:, 0] / depth) + 0.5 * res[:, 0],
                    focal[:, 1] * (local[:, 1] / depth) + 0.5 * res[:, 1]], axis=-1)


def _framepos(m: Model, d: Data, ids: np.ndarray) -> jax.Array:
  pos, _ = _frames(m, d, m.sensor_objtype[ids], m.sensor_objid[ids])
  return _in_reference(m, d, ids, pos,
                       lambda ref_mat, ref_pos: math.mat_t_vec(ref_mat, pos - ref_pos))


def _inside_shape(site_type: int, size: jax.Array, p: jax.Array) -> jax.Array:
  """Whether points p (n, 3) in sites' frames lie strictly inside their volumes, size (n, 3),
  of one primitive GeomType (mju_insideGeom)."""
  r2 = size[:, 0] * size[:, 0]
  radial = p[:, 0] * p[:, 0] + p[:, 1] * p[:, 1]
  if site_type == GeomType.SPHERE:
    return jnp.sum(p * p, axis=-1) < r2
  if site_type == GeomType.CAPSULE:
    beyond = p[:, 2] - jnp.clip(p[:, 2], -size[:, 1], size[:, 1])
    return radial + beyond * beyond < r2
  if site_type == GeomType.ELLIPSOID:
    return jnp.sum(p * p / (size * size), axis=-1) < 1
  if site_type == GeomType.CYLINDER:
    return (jnp.abs(p[:, 2]) < size[:, 1]) & (radial < r2)
  return jnp.all(jnp.abs(p) < size, axis=-1)


def _inside_hull(m: Model, mesh: np.ndarray, p: jax.Array) -> jax.Array:
  """Whether points p (n, 3) in mesh sites' frames lie strictly inside the convex hulls of
  their meshes (n,), placed in the site frame by the mesh's offset (mesh_pos, mesh_quat):
  below the plane of every hull polygon."""
  count = m.mesh_polynum[mesh]
  slot = np.arange(max(int(count.max(initial=0)), 1))
  valid = slot < count[:, None]
  poly = np.where(valid, m.mesh_polyadr[mesh][:, None] + slot, 0)           # (n, P)
  first = m.mesh_vertadr[mesh][:, None] + m.mesh_polyvert[m.mesh_polyvertadr[poly]]
  local = math.mat_t_vec(math.quat_to_mat(m.mesh_quat[mesh]), p - m.mesh_pos[mesh])
  side = jnp.sum(m.mesh_polynormal[poly] * (local[:, None, :] - m.mesh_vert[first]), axis=-1)
  return jnp.all(~valid | (side < 0), axis=-1)


def _inside(m: Model, site: np.ndarray, p: jax.Array) -> jax.Array:
  """Whether points p (n, 3), each in its site's frame (site (n,) static ids), lie strictly
  inside the sites' volumes (mj_insideSite): the primitive shape, or a mesh site's hull."""
  inside = jnp.zeros(len(site), bool)
  for site_type in np.unique(m.site_type[site]):
    mine = m.site_type[site] == site_type
    if site_type == GeomType.MESH:
      mesh = m.site_dataid[site]
      value = _inside_hull(m, np.where(mine, mesh, mesh[mine][0]), p)
    else:
      value = _inside_shape(int(site_type), m.site_size[site], p)
    inside = jnp.where(mine, value, inside)
  return inside


def _insidesite(m: Model, d: Data, ids: np.ndarray) -> jax.Array:
  """1 where the object's frame origin (a massless body's: its subtree's centre of mass) lies
  inside the site's volume, else 0 (n, 1)."""
  objtype, objid = m.sensor_objtype[ids], m.sensor_objid[ids]
  pos, _ = _frames(m, d, objtype, objid)
  massless = (jnp.asarray((objtype == ObjType.BODY) & (objid > 0))
              & (m.body_mass[objid] < math.MINVAL) & (m.body_subtreemass[objid] >= math.MINVAL))
  pos = jnp.where(massless[:, None], d.subtree_com[objid], pos)
  site = m.sensor_refid[ids]
  local = math.mat_t_vec(d.site_xmat[site], pos - d.site_xpos[site])
  return _inside(m, site, local).astype(d.qpos.dtype)[:, None]


def _distance_pairs(m: Model, ids: np.ndarray) -> list[list[tuple[int, int]]]:
  """Each distance sensor's geom pairs (geom1, geom2), in mj_sensorPos's loop order."""
  geoms = lambda kind, i: [int(i)] if kind == ObjType.GEOM else np.flatnonzero(
      m.geom_bodyid == i).tolist()
  return [[(g1, g2) for g1 in geoms(m.sensor_objtype[i], m.sensor_objid[i])
           for g2 in geoms(m.sensor_reftype[i], m.sensor_refid[i])] for i in ids]


def _geom_distance(m: Model, d: Data, ids: np.ndarray) -> tuple[jax.Array, jax.Array]:
  """Smallest signed distance (n,) and its segment fromto (n, 6) between the geoms (or bodies'
  geoms) of distance sensors, searched within their cutoff (mj_geomDistance): the cutoff and
  zeros where nothing is closer."""
  pairs = _distance_pairs(m, ids)
  flat = [(k, g1, g2) for k, own in enumerate(pairs) for g1, g2 in own]
  cutoff = m.sensor_cutoff[ids]
  dist = jnp.full(len(flat), jnp.inf, d.qpos.dtype)
  fromto = jnp.zeros((len(flat), 6), d.qpos.dtype)
  sensor = np.array([k for k, _, _ in flat], int)
  g1, g2 = (np.array([p[i] for p in flat], int) for i in (1, 2))
  flip = m.geom_type[g1] > m.geom_type[g2]
  a, b = np.where(flip, g2, g1), np.where(flip, g1, g2)
  ccd = np.array([(int(m.geom_type[i]), int(m.geom_type[j])) in DISTANCE_CCD
                  for i, j in zip(a, b)], bool)
  if ccd.any():
    rows = np.flatnonzero(ccd)
    near, segment = _ccd_distance(m, d, g1[rows], g2[rows], cutoff[sensor[rows]])
    dist = dist.at[rows].set(jnp.where(near < cutoff[sensor[rows]], near, jnp.inf))
    fromto = fromto.at[rows].set(segment)
  for key in sorted({(int(m.geom_type[i]), int(m.geom_type[j]))
                     for i, j in zip(a[~ccd], b[~ccd])}):
    rows = np.flatnonzero((m.geom_type[a] == key[0]) & (m.geom_type[b] == key[1]) & ~ccd)
    if key not in HAS_FUNCTION:   # no collision function: nothing is closer
      continue
    if key not in DISTANCE_PAIRS:
      raise ValueError(f"distance sensors {ids.tolist()}: {GeomType(key[0]).name.lower()}-"
                       f"{GeomType(key[1]).name.lower()} pairs are not supported by flexor yet")
    i, j = a[rows], b[rows]
    collider = collision_primitive.COLLIDERS[key]
    collide, mesh = collider, ()
    if key[1] == GeomType.MESH:
      table = collision.hulls(m)
      collide = lambda *args: collider(*args, hulls=table)
      mesh = (jnp.asarray(collision.mesh_ids(m, j)),)
    c_dist, pos, frame, exist = jax.vmap(collide)(
        d.geom_xpos[i], d.geom_xmat[i], m.geom_size[i], d.geom_xpos[j], d.geom_xmat[j],
        m.geom_size[j], cutoff[sensor[rows]], *mesh)
    c_dist = jnp.where(exist, c_dist, jnp.inf)
    best = jnp.argmin(c_dist, axis=1)
    near = jnp.take_along_axis(c_dist, best[:, None], axis=1)[:, 0]
    pos = jnp.take_along_axis(pos, best[:, None, None], axis=1)[:, 0]
    normal = jnp.take_along_axis(frame[:, :, 0], best[:, None, None], axis=1)[:, 0]
    half = (0.5 * jnp.where(flip[rows], -1.0, 1.0) * jnp.where(jnp.isfinite(near), near, 0.0)
            )[:, None] * normal
    dist = dist.at[rows].set(near)
    fromto = fromto.at[rows].set(jnp.concatenate([pos - half, pos + half], axis=1))
  # each sensor keeps its first pair below the cutoff, as mj_sensorPos's strict comparison
  width = max(len(own) for own in pairs)
  slot = np.array([[flat.index((k, *own[min(t, len(own) - 1)])) for t in range(width)]
                   for k, own in enumerate(pairs)])
  valid = np.array([[t < len(own) for t in range(width)] for own in pairs])
  key = jnp.where(valid & (dist[slot] < cutoff[:, None]), dist[slot], jnp.inf)
  first = jnp.argmin(key, axis=1)
  found = jnp.isfinite(jnp.take_along_axis(key, first[:, None], axis=1)[:, 0])
  pick = jnp.take_along_axis(jnp.asarray(slot), first[:, None], axis=1)[:, 0]
  return (jnp.where(found, dist[pick], cutoff),
          jnp.where(found[:, None], fromto[pick], 0.0))


def _ccd_distance(m: Model, d: Data, g1: np.ndarray, g2: np.ndarray, cutoff: jax.Array
                  ) -> tuple[jax.Array, jax.Array]:
  """mj_geomDistanceCCD of the geom pairs (g1, g2) (n,) in the sensors' order, one kernel for
  all: the distance (n,) (the cutoff where nothing is closer) and the segment fromto (n, 6)."""
  types = (set(m.geom_type[g1].tolist()), set(m.geom_type[g2].tolist()))
  table = collision.hulls(m) if GeomType.MESH in types[0] | types[1] else None
  distance = collision_convex.make_distance(types, m.opt.ccd_iterations, table)
  return jax.vmap(distance)(
      jnp.asarray(m.geom_type[g1]), d.geom_xpos[g1], d.geom_xmat[g1], m.geom_size[g1],
      jnp.asarray(m.geom_type[g2]), d.geom_xpos[g2], d.geom_xmat[g2], m.geom_size[g2], cutoff,
      jnp.asarray(collision.mesh_ids(m, g1)), jnp.asarray(collision.mesh_ids(m, g2)),
      jnp.broadcast_to(m.opt.ccd_tolerance, (len(g1),)))


def _geomdist(m: Model, d: Data, ids: np.ndarray) -> jax.Array:
  return _geom_distance(m, d, ids)[0][:, None]


def _geomnormal(m: Model, d: Data, ids: np.ndarray) -> jax.Array:
  """The unit vector along the shortest segment, zeros where none was found (n, 3)."""
  fromto = _geom_distance(m, d, ids)[1]
  return math.normalize(fromto[:, 3:] - fromto[:, :3])


def _geomfromto(m: Model, d: Data, ids: np.ndarray) -> jax.Array:
  return _geom_distance(m, d, ids)[1]


def _framequat(m: Model, d: Data, ids: np.ndarray) -> jax.Array:
  quat = _frame_quats(m, d, m.sensor_objtype[ids], m.sensor_objid[ids])
  refid = m.sensor_refid[ids]
  has_ref = refid >= 0
  if not has_ref.any():
    return quat
  reftype = np.where(has_ref, m.sensor_reftype[ids], int(ObjType.XBODY))
  ref = _frame_quats(m, d, reftype, np.maximum(refid, 0))
  return jnp.where(has_ref[:, None], math.quat_mul(math.quat_conj(ref), quat), quat)


def _frame_velocity(angular: bool) -> _Compute:
  def compute(m: Model, d: Data, ids: np.ndarray) -> jax.Array:
    objtype, objid = m.sensor_objtype[ids], m.sensor_objid[ids]
    vel = object_velocity(m, d, objtype, objid, local=False)
    refid = m.sensor_refid[ids]
    has_ref = refid >= 0
    if has_ref.any():
      reftype = np.where(has_ref, m.sensor_reftype[ids], int(ObjType.XBODY))
      refid = np.maximum(refid, 0)
      pos, _ = _frames(m, d, objtype, objid)
      ref_pos, ref_mat = _frames(m, d, reftype, refid)
      ref_vel = object_velocity(m, d, reftype, refid, local=False)
      rel = vel - ref_vel
      # linear velocity seen from the rotating reference frame
      rel_lin = rel[:, 3:] + math.cross(pos - ref_pos, ref_vel[:, :3])
      rel = jnp.concatenate([math.mat_t_vec(ref_mat, rel[:, :3]), math.mat_t_vec(ref_mat, rel_lin)],
                            axis=-1)
      vel = jnp.where(has_ref[:, None], rel, vel)
    return vel[:, :3] if angular else vel[:, 3:]
  return compute


def _frame_acceleration(angular: bool) -> _Compute:
  def compute(m: Model, d: Data, ids: np.ndarray) -> jax.Array:
    acc = object_acceleration(m, d, m.sensor_objtype[ids], m.sensor_objid[ids], local=False)
    return acc[:, :3] if angular else acc[:, 3:]
  return compute


def _site_velocity(angular: bool) -> _Compute:
  def compute(m: Model, d: Data, ids: np.ndarray) -> jax.Array:
    vel = object_velocity(m, d, *_site_frames(m, ids), local=True)
    return vel[:, :3] if angular else vel[:, 3:]
  return compute


def _accelerometer(m: Model, d: Data, ids: np.ndarray) -> jax.Array:
  return object_acceleration(m, d, *_site_frames(m, ids), local=True)[:, 3:]


def _site_wrench(torque: bool) -> _Compute:
  """force or torque: cfrc_int of the site's body moved to the site, in the site's frame."""
  def compute(m: Model, d: Data, ids: np.ndarray) -> jax.Array:
    site = _objid(m, ids)
    body = m.site_bodyid[site]
    frc = d.cfrc_int[body]
    if not torque:
      return math.mat_t_vec(d.site_xmat[site], frc[:, 3:])
    arm = d.site_xpos[site] - d.subtree_com[m.body_rootid[body]]
    return math.mat_t_vec(d.site_xmat[site], frc[:, :3] - math.cross(arm, frc[:, 3:]))
  return compute


def _magnetometer(m: Model, d: Data, ids: np.ndarray) -> jax.Array:
  mat = d.site_xmat[_objid(m, ids)]
  return math.mat_t_vec(mat, jnp.broadcast_to(m.opt.magnetic, (len(ids), 3)))


def _subtree_mask(m: Model, ids: np.ndarray) -> np.ndarray:
  """(n, nbody) bool: the bodies of each sensor's subtree (the world's holds every body)."""
  objid = _objid(m, ids)
  # body_subtree leaves the world's row empty (no tree sum needs it); a sensor on it sums all.
  return np.where((objid == 0)[:, None], True, m.body_subtree[objid])


def _body_velocity(m: Model, d: Data) -> jax.Array:
  """(angular, linear) velocity of every body's inertial frame (nbody, 6), world orientation."""
  bodies = np.arange(m.nbody)
  return object_velocity(m, d, np.full(m.nbody, int(ObjType.BODY)), bodies, local=False)


def _subtree_linvel(m: Model, d: Data, ids: np.ndarray, body_vel: jax.Array) -> jax.Array:
  """Linear velocity of the centre of mass of each sensor's subtree (n, 3) (mj_subtreeVel)."""
  momentum = tree.masked_sum(_subtree_mask(m, ids), m.body_mass[:, None] * body_vel[:, 3:])
  mass = jnp.maximum(math.MINVAL, m.body_subtreemass[_objid(m, ids)])
  return momentum / mass[:, None]


def _subtreelinvel(m: Model, d: Data, ids: np.ndarray) -> jax.Array:
  return _subtree_linvel(m, d, ids, _body_velocity(m, d))


def _subtreeangmom(m: Model, d: Data, ids: np.ndarray) -> jax.Array:
  """Angular momentum of each sensor's subtree about its centre of mass (n, 3): the bodies'
  spins plus m (xipos - com) x (v - v_com), the closed form of mj_subtreeVel's recursion."""
  body_vel = _body_velocity(m, d)
  linvel = _subtree_linvel(m, d, ids, body_vel)
  spin_local = math.mat_t_vec(d.ximat, body_vel[:, :3]) * m.body_inertia
  spin = math.mat_vec(d.ximat, spin_local)                                   # (nbody, 3)
  com = d.subtree_com[_objid(m, ids)]
  arm = d.xipos[None, :, :] - com[:, None, :]                               # (n, nbody, 3)
  rel = body_vel[None, :, 3:] - linvel[:, None, :]
  orbital = m.body_mass[None, :, None] * math.cross(arm, rel)
  mask = _subtree_mask(m, ids)
  return tree.masked_sum(mask, spin) + jnp.einsum("nb,nbi->ni", mask.astype(spin.dtype), orbital)


def _tendonactfrc(m: Model, d: Data, ids: np.ndarray) -> jax.Array:
  tendon = m.actuator_trntype == TrnType.TENDON
  select = (tendon[None, :] & (m.actuator_trnid[None, :, 0] == _objid(m, ids)[:, None]))
  force = d.actuator_force[m.actuator_outadr]
  return (jnp.asarray(select, dtype=force.dtype) @ force)[:, None]


def _touch(m: Model, d: Data, ids: np.ndarray) -> jax.Array:
  """Normal forces of the contacts of the site's body whose normal ray, from the contact point
  away from that body, meets the site's volume (n, 1)."""
  site = _objid(m, ids)
  if not collision.contacts_on(m):
    return jnp.zeros((len(ids), 1), dtype=d.qvel.dtype)
  body1, body2 = constraint.slot_bodies(m, d)                            # (nconmax,)
  body = m.site_bodyid[site]
  sensor, slot = constraint.body_slots(m, d, body)  # rays only from slots the body can touch
  if not len(slot):
    return jnp.zeros((len(ids), 1), dtype=d.qvel.dtype)
  on1, on2 = body[sensor] == body1[slot], body[sensor] == body2[slot]
  normal = contact_force(m, d)[slot, 0]
  pushing = (on1 | on2) & (normal > 0)
  away = jnp.where(on2, -1.0, 1.0).astype(d.qpos.dtype)                  # no float64 promotion
  # a hit is a yes or no: the rays see the state without its tangents
  rays = jax.lax.stop_gradient((d.site_xpos, d.site_xmat, d.contact_pos,
                                d.contact_frame[slot, 0] * away[:, None]))
  hit = jnp.zeros(len(slot), dtype=bool)
  for site_type in np.unique(m.site_type[site]):
    mine = np.flatnonzero(m.site_type[site[sensor]] == site_type)
    mine_site, mine_slot = jnp.asarray(site[sensor[mine]]), jnp.asarray(slot[mine])

    def hits(rows: jax.Array | slice, valid: jax.Array) -> jax.Array:
      """Whether the rays of this site type's pairs mine[rows] (k,) meet their sites (k,)."""
      site_xpos, site_xmat, contact_pos, vec = rays
      own = mine_site[rows]
      return valid & (jax.vmap(ray.PRIMITIVES[int(site_type)])(
          site_xpos[own], site_xmat[own], m.site_size[own],
          contact_pos[mine_slot[rows]], vec[mine][rows])[0] >= 0)

    # rays from the pushing contacts only
    pushed = constraint.over_active(pushing[mine], hits, jnp.zeros(len(mine), bool))
    hit = hit.at[mine].set(pushed)
  force = jnp.where(hit, normal, 0.0)
  return jax.ops.segment_sum(force, sensor, num_segments=len(ids))[:, None]


# ----------------------------------------------------------------------------- contact

_CONDATA_SIZE = (1, 3, 3, 1, 3, 3, 3, 3, 3)  # found, force, torque, dist, pos, normal, tangent,
                                             # linvel, angvel (mjCONDATA)
_FLIP = np.array([1.0, 1.0, -1.0])  # a flipped contact frame turns 180 degrees about its z


def _check_match(m: Model, objtype: int, objid: int, body: jax.Array, geom: jax.Array
                 ) -> jax.Array:
  """checkMatch: whether the contact side (bodies, geoms (nconmax,)) is the sensor's object."""
  if objtype == ObjType.GEOM:
    return geom == objid
  if objtype == ObjType.BODY:
    return body == objid
  if objtype == ObjType.XBODY:  # the subtree of objid (the world's holds every body)
    return jnp.asarray(m.body_subtree[objid] | (objid == 0))[body]
  return jnp.ones(body.shape, bool)


def _contact_match(m: Model, d: Data, i: int) -> jax.Array:
  """matchContact of sensor i for every contact slot (nconmax,): 0 no match, 1 match, -1 match
  with the normal flipped (the sensor's first object is geom 2's side)."""
  objtype, objid = int(m.sensor_objtype[i]), int(m.sensor_objid[i])
  reftype, refid = int(m.sensor_reftype[i]), int(m.sensor_refid[i])
  geom = jnp.asarray(collision.slot_geom(m, d))
  body = jnp.stack([jnp.asarray(b) for b in constraint.slot_bodies(m, d)], axis=1)
  exist = d.contact_exist
  if objtype == ObjType.UNKNOWN and reftype == ObjType.UNKNOWN:
    return exist.astype(jnp.int32)
  if objtype == ObjType.SITE:
    local = math.mat_t_vec(d.site_xmat[objid], d.contact_pos - d.site_xpos[objid][None, :])
    exist = exist & _inside(m, np.full(len(local), objid), local)
  m11, m12 = (_check_match(m, objtype, objid, body[:, k], geom[:, k]) for k in (0, 1))
  m21, m22 = (_check_match(m, reftype, refid, body[:, k], geom[:, k]) for k in (0, 1))
  exist = exist & (m11 | m12) & (m21 | m22)
  if objtype != ObjType.UNKNOWN and reftype != ObjType.UNKNOWN:
    # both objects given: each must be on its own side (two subtrees touching a third match
    # neither order)
    exist = exist & ((m11 & m22) | (m12 & m21))
    flip = (m12 & m21) & ~(m11 & m22)
  elif objtype != ObjType.UNKNOWN:
    flip = ~m11
  else:
    flip = ~m22
  return jnp.where(exist, jnp.where(flip, -1, 1), 0)


def _contact_velocity(m: Model, d: Data) -> tuple[jax.Array, jax.Array]:
  """Velocity of geom 2's body relative to geom 1's at each contact (nconmax, 3), linear (at
  the contact point) and angular, in the contact frame."""
  body1, body2 = constraint.slot_bodies(m, d)

  def velocity(body):
    ang, lin = d.cvel[body, :3], d.cvel[body, 3:]
    arm = d.contact_pos - d.subtree_com[jnp.asarray(m.body_rootid)[body]]
    return lin + math.cross(ang, arm), ang

  (lin1, ang1), (lin2, ang2) = velocity(body1), velocity(body2)
  to_frame = lambda v: math.mat_vec(d.contact_frame, v)
  return to_frame(lin2 - lin1), to_frame(ang2 - ang1)


def _contact_values(m: Model, d: Data, spec: int, stage: int) -> jax.Array:
  """Every mjCONDATA field of every contact slot (nconmax, 23), unflipped; fields the stage
  cannot have yet are zero (the sensor's spec never asks for them)."""
  n, dtype = m.nconmax, d.qpos.dtype
  wrench = contact_force(m, d) if stage == Stage.ACC else jnp.zeros((n, 6), dtype)
  vel = (_contact_velocity(m, d) if spec & (3 << 7) else (jnp.zeros((n, 3), dtype),) * 2)
  return jnp.concatenate([jnp.zeros((n, 1), dtype), wrench[:, :3], wrench[:, 3:],
                          d.contact_dist[:, None], d.contact_pos, d.contact_frame[:, 0],
                          d.contact_frame[:, 1], *vel], axis=1)


def _flip_signs(spec: int) -> np.ndarray:
  """Sign of each value of a contact slot (size,) in a flipped contact frame: force, torque and
  velocities change the sign of z, the normal and the tangent turn around."""
  signs = [np.ones(1), _FLIP, _FLIP, np.ones(1), np.ones(3), -np.ones(3), -np.ones(3), _FLIP,
           _FLIP]
  return np.concatenate([signs[k] for k in range(9) if spec & (1 << k)])


def _spec_columns(spec: int) -> np.ndarray:
  """Columns of _contact_values that the data bits ``spec`` select, in order."""
  start = np.cumsum((0,) + _CONDATA_SIZE)
  return np.concatenate([np.arange(start[k], start[k + 1]) for k in range(9) if spec & (1 << k)])


def _net_contact(d: Data, wrench: jax.Array, match: jax.Array, spec: int) -> jax.Array:
  """The netforce reduction's one slot (size,): the matched contacts' total wrench (of the
  slots' contact-frame wrenches (nconmax, 6)) in the world frame about their force-weighted
  centroid, with normal (1, 0, 0) and tangent (0, 1, 0); zeros where nothing matches."""
  dtype = d.qpos.dtype
  wrench = wrench * jnp.where(match < 0, -1.0, 1.0).astype(dtype)[:, None]
  wrench = jnp.where((match != 0)[:, None], wrench, 0.0)
  force = math.mat_t_vec(d.contact_frame, wrench[:, :3])
  torque = math.mat_t_vec(d.contact_frame, wrench[:, 3:])
  weight = math.safe_norm(wrench, axis=-1)
  total = jnp.sum(weight)
  point = jnp.sum(d.contact_pos * weight[:, None], axis=0) / jnp.maximum(total, math.MINVAL)
  torque = jnp.sum(torque + math.cross(d.contact_pos - point[None, :], force), axis=0)
  nfound = jnp.sum(match != 0).astype(dtype)
  zeros = jnp.zeros(3, dtype)
  values = jnp.concatenate([nfound[None], jnp.sum(force, axis=0), torque, zeros[:1], point,
                            jnp.eye(3, dtype=dtype)[0], jnp.eye(3, dtype=dtype)[1], zeros,
                            zeros])
  return jnp.where(nfound > 0, values[_spec_columns(spec)], 0.0)  # no match: all zero


def _contact(m: Model, d: Data, ids: np.ndarray) -> jax.Array:
  """Contact sensors (n, dim): for each, its ``num`` slots of the contacts that match its
  objects (in contact order, or the nearest or strongest first), each with the fields its
  ``data`` asks for and the number of matches as ``found``; or with reduce="netforce" one slot
  with the matches' total wrench. Slots without a contact are zero."""
  if not collision.contacts_on(m):
    return jnp.zeros((len(ids), int(m.sensor_dim[ids[0]])), d.qpos.dtype)
  # one table for the group (its sensors share a stage): forces and velocities computed once
  specs = np.bitwise_or.reduce(m.sensor_intprm[ids, 0])
  table = _contact_values(m, d, int(specs), int(m.sensor_needstage[ids[0]]))
  out = []
  for i in ids.tolist():
    spec, reduce, num = (int(x) for x in m.sensor_intprm[i])
    size = int(sum(_CONDATA_SIZE[k] for k in range(9) if spec & (1 << k)))
    dim = int(m.sensor_dim[i])
    match = _contact_match(m, d, i)
    if reduce == 3:
      value = _net_contact(d, table[:, 1:7], match, spec)
      out.append(jnp.concatenate([value, jnp.zeros(dim - size, value.dtype)]))
      continue
    found = match != 0
    nfound = jnp.sum(found)
    values = table.at[:, 0].set(nfound.astype(table.dtype))
    if reduce == 0:
      (order,) = jnp.nonzero(found, size=num, fill_value=0)
    else:
      criterion = (d.contact_dist if reduce == 1 else
                   -jnp.sum(jnp.square(values[:, 1:4]), axis=-1))
      order = jnp.argsort(jnp.where(found, criterion, jnp.inf), stable=True)[:num]
    picked = values[order][:, _spec_columns(spec)]
    flip = _flip_signs(spec).astype(values.dtype)
    signs = jnp.where((match[order] < 0)[:, None], flip[None, :], np.ones_like(flip)[None, :])
    picked = jnp.where((jnp.arange(num) < nfound)[:, None], picked * signs, 0.0)
    out.append(picked.reshape(-1))
  return jnp.stack(out)


# ----------------------------------------------------------------------------- energy


def _poly_potential(linear: jax.Array, poly: jax.Array, x: jax.Array) -> jax.Array:
  """Energy stored in a spring of force -x (linear + poly_0 x + poly_1 x^2) at displacement x
  (mju_polyPotential): linear x^2 / 2 + poly_0 x^3 / 3 + poly_1 x^4 / 4."""
  x2 = x * x
  return 0.5 * linear * x2 + poly[..., 0] / 3 * (x2 * x) + poly[..., 1] / 4 * (x2 * x * x)


def energy_pos(m: Model, d: Data) -> jax.Array:
  """Potential energy () in J (mj_energyPos), after fwd_position: gravity's, -sum of body mass
  times g . xipos, and the energy of joint and tendon springs about their references
  (``passive.joint_spring_displacements``), with their polynomial profiles; free joints'
  translation and rotation and ball joints store it as a function of the displacement's
  norm."""
  energy = jnp.zeros((), d.qpos.dtype)
  if not m.opt.disabled(DisableBit.GRAVITY):
    energy = -jnp.sum(m.body_mass[1:] * (d.xipos[1:] @ m.opt.gravity))
  if m.opt.disabled(DisableBit.SPRING):
    return energy
  for joints, _, _, x in passive.joint_spring_displacements(m, d):
    energy += jnp.sum(_poly_potential(m.jnt_stiffness[joints], m.jnt_stiffnesspoly[joints], x))
  if m.ntendon:
    x = passive.tendon_spring_displacement(m, d)
    energy += jnp.sum(_poly_potential(m.tendon_stiffness, m.tendon_stiffnesspoly, x))
  return energy


def energy_vel(m: Model, d: Data) -> jax.Array:
  """Kinetic energy () in J, qvel' qM qvel / 2 (mj_energyVel), after crb."""
  return 0.5 * d.qvel @ (d.qM @ d.qvel)


def energy(m: Model, d: Data, sensors: bool = True) -> Data:
  """d.energy (potential, kinetic) as mj_forward leaves it: both with EnableBit.ENERGY; else the
  potential energy where an e_potential sensor computed it (and the kinetic energy where an
  e_kinetic sensor did too), zeros otherwise. ``sensors`` as in ``forward``."""
  if m.opt.enabled(EnableBit.ENERGY):
    return d.replace(energy=jnp.stack([energy_pos(m, d), energy_vel(m, d)]))
  sensed = set() if not sensors or m.opt.disabled(DisableBit.SENSOR) else set(
      m.sensor_type.tolist())
  if S.E_POTENTIAL not in sensed:
    return d.replace(energy=jnp.zeros_like(d.energy))
  kinetic = energy_vel(m, d) if S.E_KINETIC in sensed else jnp.zeros_like(d.energy[1])
  return d.replace(energy=jnp.stack([energy_pos(m, d), kinetic]))


def _user(m: Model, d: Data, ids: np.ndarray) -> jax.Array:
  """``<user>`` sensors: zeros (n, dim), as MuJoCo without an mjcb_sensor callback."""
  return jnp.zeros((len(ids), int(m.sensor_dim[ids[0]])), d.qpos.dtype)


_POS: dict[int, _Compute] = {
    S.MAGNETOMETER: _magnetometer,
    S.RANGEFINDER: ray.rangefinder,
    S.JOINTPOS: lambda m, d, ids: d.qpos[m.jnt_qposadr[_objid(m, ids)]][:, None],
    S.TENDONPOS: lambda m, d, ids: d.ten_length[_objid(m, ids)][:, None],
    S.ACTUATORPOS: lambda m, d, ids: d.actuator_length[_outputs(m, ids)],
    S.BALLQUAT: lambda m, d, ids: math.quat_normalize(
        d.qpos[m.jnt_qposadr[_objid(m, ids)][:, None] + np.arange(4)[None, :]]),
    S.JOINTLIMITPOS: lambda m, d, ids: _limit_value(m, d, ConstraintType.LIMIT_JOINT, ids,
                                                    d.efc_pos - d.efc_margin),
    S.TENDONLIMITPOS: lambda m, d, ids: _limit_value(m, d, ConstraintType.LIMIT_TENDON, ids,
                                                     d.efc_pos - d.efc_margin),
    S.FRAMEPOS: _framepos,
    S.FRAMEQUAT: _framequat,
    S.FRAMEXAXIS: _frame_axis(0),
    S.FRAMEYAXIS: _frame_axis(1),
    S.FRAMEZAXIS: _frame_axis(2),
    S.SUBTREECOM: lambda m, d, ids: d.subtree_com[_objid(m, ids)],
    S.INSIDESITE: _insidesite,
    S.GEOMDIST: _geomdist,
    S.GEOMNORMAL: _geomnormal,
    S.GEOMFROMTO: _geomfromto,
    S.E_POTENTIAL: lambda m, d, ids: jnp.broadcast_to(energy_pos(m, d), (len(ids), 1)),
    S.E_KINETIC: lambda m, d, ids: jnp.broadcast_to(energy_vel(m, d), (len(ids), 1)),
    S.CLOCK: lambda m, d, ids: jnp.broadcast_to(d.time, (len(ids), 1)),
    S.CONTACT: _contact,
    S.CAMPROJECTION: _camprojection,
    S.USER: _user,
}

_VEL: dict[int, _Compute] = {
    S.VELOCIMETER: _site_velocity(angular=False),
    S.GYRO: _site_velocity(angular=True),
    S.JOINTVEL: lambda m, d, ids: d.qvel[m.jnt_dofadr[_objid(m, ids)]][:, None],
    S.TENDONVEL: lambda m, d, ids: d.ten_velocity[_objid(m, ids)][:, None],
    S.ACTUATORVEL: lambda m, d, ids: d.actuator_velocity[_outputs(m, ids)],
    S.BALLANGVEL: lambda m, d, ids: d.qvel[m.jnt_dofadr[_objid(m, ids)][:, None]
                                           + np.arange(3)[None, :]],
    S.JOINTLIMITVEL: lambda m, d, ids: _limit_value(m, d, ConstraintType.LIMIT_JOINT, ids,
                                                    d.efc_vel),
    S.TENDONLIMITVEL: lambda m, d, ids: _limit_value(m, d, ConstraintType.LIMIT_TENDON, ids,
                                                     d.efc_vel),
    S.FRAMELINVEL: _frame_velocity(angular=False),
    S.FRAMEANGVEL: _frame_velocity(angular=True),
    S.SUBTREELINVEL: _subtreelinvel,
    S.SUBTREEANGMOM: _subtreeangmom,
    S.CONTACT: _contact,
    S.USER: _user,
}

_ACC: dict[int, _Compute] = {
    S.TOUCH: _touch,
    S.ACCELEROMETER: _accelerometer,
    S.FORCE: _site_wrench(torque=False),
    S.TORQUE: _site_wrench(torque=True),
    S.ACTUATORFRC: lambda m, d, ids: d.actuator_force[_outputs(m, ids)],
    S.JOINTACTFRC: lambda m, d, ids: d.qfrc_actuator[m.jnt_dofadr[_objid(m, ids)]][:, None],
    S.TENDONACTFRC: _tendonactfrc,
    S.JOINTLIMITFRC: lambda m, d, ids: _limit_value(m, d, ConstraintType.LIMIT_JOINT, ids,
                                                    d.efc_force),
    S.TENDONLIMITFRC: lambda m, d, ids: _limit_value(m, d, ConstraintType.LIMIT_TENDON, ids,
                                                     d.efc_force),
    S.FRAMELINACC: _frame_acceleration(angular=False),
    S.FRAMEANGACC: _frame_acceleration(angular=True),
    S.CONTACT: _contact,
    S.USER: _user,
}

# types whose values need cacc, cfrc_int and cfrc_ext (mj_sensorAcc's mj_rnePostConstraint call)
_NEEDS_RNEPOST = (S.ACCELEROMETER, S.FORCE, S.TORQUE, S.FRAMELINACC, S.FRAMEANGACC)

def _groups(m: Model, mine: np.ndarray) -> list[tuple[int, np.ndarray]]:
  """(type, sensor ids) of sensors ``mine``, one group per stage, type and dimension."""
  key = lambda i: (int(m.sensor_needstage[i]), int(m.sensor_type[i]), int(m.sensor_dim[i]))
  keys = sorted({key(i) for i in mine})
  return [(k[1], np.array([i for i in mine if key(i) == k], np.int64)) for k in keys]


def _of_stage(m: Model, stage: Stage) -> np.ndarray:
  return np.flatnonzero(m.sensor_needstage == stage) if m.nsensor else np.zeros(0, np.int64)


def _cutoff(m: Model, ids: np.ndarray, value: jax.Array) -> jax.Array:
  """MuJoCo's apply_cutoff on (n, dim) values of sensors of one type."""
  datatype = int(m.sensor_datatype[ids[0]])
  if (datatype not in (DataType.REAL, DataType.POSITIVE)
      or m.sensor_type[ids[0]] in (S.GEOMFROMTO, S.CONTACT)):
    return value
  cutoff = m.sensor_cutoff[ids][:, None]
  clipped = jnp.minimum(value, cutoff)
  if datatype == DataType.REAL:
    clipped = jnp.maximum(clipped, -cutoff)
  return jnp.where(cutoff > 0, clipped, value)


_TABLES = {Stage.POS: _POS, Stage.VEL: _VEL, Stage.ACC: _ACC}


def _compute(m: Model, d: Data, ids: np.ndarray, sensordata: jax.Array) -> jax.Array:
  """``sensordata`` with the values of sensors ``ids`` computed from ``d``, cutoff applied
  (mj_computeSensor; one vectorized computation per type)."""
  for stype, group in _groups(m, ids):
    table = _TABLES[Stage(int(m.sensor_needstage[group[0]]))]
    if stype not in table:
      raise ValueError(f"sensor type {SensorType(stype).name} (sensors {group.tolist()}) is not "
                       "supported by flexor yet; remove it or disable sensors")
    value = _cutoff(m, group, table[stype](m, d, group))
    index = (m.sensor_adr[group][:, None] + np.arange(value.shape[1])[None, :]).ravel()
    sensordata = sensordata.at[index].set(value.ravel().astype(sensordata.dtype))
  return sensordata


def compute(m: Model, d: Data, ids: np.ndarray) -> jax.Array:
  """Sensordata (nsensordata,) with sensors ``ids`` computed anew from ``d`` as it stands, as
  mj_advance does for delayed sensors (no rne_postconstraint: cacc and cfrc_* are d's)."""
  return _compute(m, d, ids, d.sensordata)


def _stage(m: Model, d: Data, stage: Stage) -> Data:
  """Fills the sensordata of the stage's sensors, delayed ones read from their history."""
  ids = _of_stage(m, stage)
  if not len(ids) or m.opt.disabled(DisableBit.SENSOR):
    return d
  if stage == Stage.ACC and np.any(np.isin(m.sensor_type[ids], _NEEDS_RNEPOST)):
    d = rne_postconstraint(m, d)
  sensordata = history.delayed_sensors(m, d, ids, _compute(m, d, ids, d.sensordata))
  return d.replace(sensordata=sensordata)


def sensor_pos(m: Model, d: Data) -> Data:
  """Computes the sensordata of position-stage sensors (mj_sensorPos), after fwd_position."""
  with jax.named_scope("sensor_pos"):
    return _stage(m, d, Stage.POS)


def sensor_vel(m: Model, d: Data) -> Data:
  """Computes the sensordata of velocity-stage sensors (mj_sensorVel), after fwd_velocity."""
  with jax.named_scope("sensor_vel"):
    return _stage(m, d, Stage.VEL)


def sensor_acc(m: Model, d: Data) -> Data:
  """Computes the sensordata of acceleration-stage sensors (mj_sensorAcc), after
  fwd_constraint; runs rne_postconstraint first (cacc, cfrc_int, cfrc_ext) when accelerometer,
  force, torque or frame acceleration sensors need it, as MuJoCo does."""
  with jax.named_scope("sensor_acc"):
    return _stage(m, d, Stage.ACC)
