"""Ray casting (MuJoCo's ``engine_ray.c``): the nearest geom surface along rays, and the
rangefinder sensor's values (one ray from a site, or one per pixel of a camera).

``ray(m, d, pnt, vec)`` is ``mj_ray``: it intersects the ray ``pnt + x vec`` (x >= 0) with every
geom that is visible (its rgba, or its material's, not fully transparent), in the given geom
groups, not on ``bodyexclude`` and, unless ``flg_static``, not on a static body; it returns the
smallest x, the geom hit and the surface normal there, or -1, -1 and zeros. As in MuJoCo, x is in
units of |vec|, and a mesh's or a height field's normal is its triangle's, whichever side the ray
comes from.

Every candidate (ray, geom) pair is tested at once: geoms are grouped by type (static), each
group's intersections run as one vectorised function over rays x geoms, and the nearest hit is
taken over the geoms in id order, so ties go to the lower id as in MuJoCo's loop. Meshes test
all their triangles (MuJoCo's bounding volume tree only skips triangles the ray misses). A
height field tests the two triangles of each grid cell that the ray's segment inside the field's
box passes over, found by sorting the segment's grid-line crossings (static size nrow + ncol),
where MuJoCo scans the cells of the segment's bounding rectangle: both sets hold every cell the
nearest hit can be in.
"""

from __future__ import annotations

from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from flexor import math
from flexor.types import Data, GeomType, Model, ObjType

MINVAL = math.MINVAL
_NGROUP = 6  # mjNGROUP
# mjRAYDATA_* in order: dist, dir, origin, point, normal, depth, and their columns in _raydata
_RAYDATA_COLUMNS = ((0,), (1, 2, 3), (4, 5, 6), (7, 8, 9), (10, 11, 12), (13,))


# ----------------------------------------------------------------------------- primitives
# Each intersection function takes one ray and one geom: pos (3,), mat (3, 3), size (3,), pnt
# (3,), vec (3,), all in the world frame, and returns (x, normal (3,)) with x = -1 and a zero
# normal for no intersection; they are vmapped over rays and geoms.


def _to_local(pos: jax.Array, mat: jax.Array, pnt: jax.Array, vec: jax.Array):
  """The ray in the geom's frame (ray_map): (mat' (pnt - pos), mat' vec)."""
  return math.mat_t_vec(mat, pnt - pos), math.mat_t_vec(mat, vec)


def _quad(a: jax.Array, b: jax.Array, c: jax.Array):
  """Roots x0 <= x1 of a x^2 + 2 b x + c = 0 (-1 both where none are real or a < mjMINVAL) and
  the smallest non-negative one, else -1 (ray_quad)."""
  det = b * b - a * c
  bad = (det < 0) | (a < MINVAL)
  root = jnp.sqrt(jnp.where(bad, 1.0, det))
  safe_a = jnp.where(bad, 1.0, a)
  x0 = jnp.where(bad, -1.0, (-b - root) / safe_a)
  x1 = jnp.where(bad, -1.0, (-b + root) / safe_a)
  return x0, x1, jnp.where(x0 >= 0, x0, jnp.where(x1 >= 0, x1, -1.0))


def _take(x: jax.Array, sol: jax.Array, ok: jax.Array):
  """MuJoCo's update rule ``if (ok && (x < 0 || sol < x)) x = sol``: (new x, whether taken)."""
  take = ok & ((x < 0) | (sol < x))
  return jnp.where(take, sol, x), take


def _miss(x: jax.Array, normal: jax.Array):
  hit = x >= 0
  return jnp.where(hit, x, -1.0), jnp.where(hit, normal, 0.0)


def _plane(pos, mat, size, pnt, vec):
  lpnt, lvec = _to_local(pos, mat, pnt, vec)
  facing = lvec[2] <= -MINVAL
  x = -lpnt[2] / jnp.where(facing, lvec[2], -1.0)
  p0, p1 = lpnt[0] + x * lvec[0], lpnt[1] + x * lvec[1]
  inside = (((size[0] <= 0) | (jnp.abs(p0) <= size[0]))
            & ((size[1] <= 0) | (jnp.abs(p1) <= size[1])))
  return _miss(jnp.where(facing & (x >= 0) & inside, x, -1.0), mat[:, 2])


def _sphere_x(pos, radius_sq, pnt, vec):
  dif = pnt - pos
  return _quad(math.dot(vec, vec), math.dot(vec, dif), math.dot(dif, dif) - radius_sq)[2]


def _sphere(pos, mat, size, pnt, vec):
  x = _sphere_x(pos, size[0] * size[0], pnt, vec)
  return _miss(x, math.normalize(pnt + x * vec - pos))


def _capsule(pos, mat, size, pnt, vec):
  bound = size[0] + size[1]
  near = _sphere_x(pos, bound * bound, pnt, vec) >= 0
  lpnt, lvec = _to_local(pos, mat, pnt, vec)
  r, h = size[0], size[1]
  x, side = jnp.full((), -1.0, pnt.dtype), jnp.zeros((), pnt.dtype)
  sol = _quad(lvec[0]**2 + lvec[1]**2, lvec[0] * lpnt[0] + lvec[1] * lpnt[1],
              lpnt[0]**2 + lpnt[1]**2 - r * r)[2]
  x, _ = _take(x, sol, (sol >= 0) & (jnp.abs(lpnt[2] + sol * lvec[2]) <= h))
  for cap in (1.0, -1.0):
    ldif = lpnt.at[2].add(-cap * h)
    x0, x1, _ = _quad(math.dot(lvec, lvec), math.dot(lvec, ldif), math.dot(ldif, ldif) - r * r)
    for root in (x0, x1):
      x, took = _take(x, root, (root >= 0) & (cap * (lpnt[2] + root * lvec[2]) >= h))
      side = jnp.where(took, cap, side)
  local = lpnt + lvec * x
  local = local.at[2].set(jnp.where(side == 0, 0.0, local[2] - h * side))
  return _miss(jnp.where(near, x, -1.0), math.mat_vec(mat, math.normalize(local)))


def _ellipsoid(pos, mat, size, pnt, vec):
  lpnt, lvec = _to_local(pos, mat, pnt, vec)
  s = 1 / (size * size)
  x = _quad(jnp.sum(s * lvec * lvec), jnp.sum(s * lvec * lpnt), jnp.sum(s * lpnt * lpnt) - 1)[2]
  return _miss(x, math.mat_vec(mat, math.normalize(s * (lpnt + x * lvec))))


def _cylinder(pos, mat, size, pnt, vec):
  near = _sphere_x(pos, size[0]**2 + size[1]**2, pnt, vec) >= 0
  lpnt, lvec = _to_local(pos, mat, pnt, vec)
  r, h = size[0], size[1]
  x, side = jnp.full((), -1.0, pnt.dtype), jnp.zeros((), pnt.dtype)
  moving = jnp.abs(lvec[2]) > MINVAL
  for cap in (-1.0, 1.0):
    sol = (cap * h - lpnt[2]) / jnp.where(moving, lvec[2], 1.0)
    p0, p1 = lpnt[0] + sol * lvec[0], lpnt[1] + sol * lvec[1]
    x, took = _take(x, sol, moving & (sol >= 0) & (p0 * p0 + p1 * p1 <= r * r))
    side = jnp.where(took, cap, side)
  sol = _quad(lvec[0]**2 + lvec[1]**2, lvec[0] * lpnt[0] + lvec[1] * lpnt[1],
              lpnt[0]**2 + lpnt[1]**2 - r * r)[2]
  x, took = _take(x, sol, (sol >= 0) & (jnp.abs(lpnt[2] + sol * lvec[2]) <= h))
  side = jnp.where(took, 0.0, side)
  round_normal = math.normalize((lpnt + lvec * x).at[2].set(0.0))
  normal = jnp.where(side == 0, round_normal, jnp.zeros(3, pnt.dtype).at[2].set(side))
  return _miss(jnp.where(near, x, -1.0), math.mat_vec(mat, normal))


def _box_faces(pos, mat, size, pnt, vec):
  """ray_box with its ``all`` output: (x, local normal (3,), all (6,)), the intersections with
  the -x, +x, -y, +y, -z, +z faces (-1 where none)."""
  near = _sphere_x(pos, math.dot(size, size), pnt, vec) >= 0
  lpnt, lvec = _to_local(pos, mat, pnt, vec)
  x, normal, faces = jnp.full((), -1.0, pnt.dtype), jnp.zeros(3, pnt.dtype), []
  for i, (j, k) in enumerate(((1, 2), (0, 2), (0, 1))):
    moving = jnp.abs(lvec[i]) > MINVAL
    for side in (-1.0, 1.0):
      sol = (side * size[i] - lpnt[i]) / jnp.where(moving, lvec[i], 1.0)
      p0, p1 = lpnt[j] + sol * lvec[j], lpnt[k] + sol * lvec[k]
      ok = near & moving & (sol >= 0) & (jnp.abs(p0) <= size[j]) & (jnp.abs(p1) <= size[k])
      x, took = _take(x, sol, ok)
      normal = jnp.where(took, jnp.zeros(3, pnt.dtype).at[i].set(side), normal)
      faces.append(jnp.where(ok, sol, -1.0))
  return x, normal, jnp.stack(faces)


def _box(pos, mat, size, pnt, vec):
  x, normal, _ = _box_faces(pos, mat, size, pnt, vec)
  return _miss(x, math.mat_vec(mat, normal))


# ----------------------------------------------------------------------------- triangles


def _plane_basis(lvec: jax.Array) -> tuple[jax.Array, jax.Array]:
  """Two unit vectors spanning the plane normal to lvec (b0, b1 of mju_rayTree)."""
  a = jnp.abs(lvec)
  axis = jnp.where((a[0] >= a[1]) & (a[0] >= a[2]), 0, jnp.where(a[1] >= a[2], 1, 2))
  b0 = jnp.where(jnp.arange(3) == axis, 0.0, 1.0).astype(lvec.dtype)
  b1 = math.normalize(b0 - lvec * math.dot(lvec, b0) / math.dot(lvec, lvec))
  return math.normalize(math.cross(b1, lvec)), b1


def _triangle(v: jax.Array, lpnt: jax.Array, lvec: jax.Array, b0: jax.Array, b1: jax.Array):
  """ray_triangle: (x, unit normal (3,) of the winding) of the ray with triangle v (3, 3); x may
  be negative (behind the ray) and is -1 where the ray misses."""
  dif = v - lpnt[None, :]
  planar = jnp.stack([math.dot(dif, b0), math.dot(dif, b1)], axis=-1)  # (3, 2)
  apart = jnp.any(jnp.all(planar > 0, axis=0) | jnp.all(planar < 0, axis=0))
  a00, a01 = planar[0, 0] - planar[2, 0], planar[1, 0] - planar[2, 0]
  a10, a11 = planar[0, 1] - planar[2, 1], planar[1, 1] - planar[2, 1]
  r0, r1 = -planar[2, 0], -planar[2, 1]
  det = a00 * a11 - a01 * a10
  flat = jnp.abs(det) < MINVAL
  safe = jnp.where(flat, 1.0, det)
  t0, t1 = (a11 * r0 - a01 * r1) / safe, (-a10 * r0 + a00 * r1) / safe
  outside = (t0 < 0) | (t1 < 0) | (t0 + t1 > 1)
  nrm = math.cross(v[0] - v[2], v[1] - v[2])
  denom = math.dot(lvec, nrm)
  parallel = jnp.abs(denom) < MINVAL
  x = -math.dot(lpnt - v[2], nrm) / jnp.where(parallel, 1.0, denom)
  miss = apart | flat | outside | parallel
  return jnp.where(miss, -1.0, x), jnp.where(miss, 0.0, math.normalize(nrm))


def _nearest(x: jax.Array, normal: jax.Array):
  """The first smallest non-negative x (n,) and its normal (n, 3); -1 and zeros if none."""
  key = jnp.where(x >= 0, x, jnp.inf)
  i = jnp.argmin(key)
  hit = jnp.isfinite(key[i])
  return jnp.where(hit, x[i], -1.0), jnp.where(hit, normal[i], 0.0)


def _mesh(pos, mat, size, pnt, vec, tris, valid):
  """mj_rayMesh on the geom's triangles tris (nface, 3, 3) in its frame, valid (nface,)."""
  near = _box_faces(pos, mat, size, pnt, vec)[0] >= 0
  lpnt, lvec = _to_local(pos, mat, pnt, vec)
  b0, b1 = _plane_basis(lvec)
  x, normal = jax.vmap(_triangle, (0, None, None, None, None))(tris, lpnt, lvec, b0, b1)
  x, normal = _nearest(jnp.where(valid & near, x, -1.0), normal)
  return x, jnp.where(x >= 0, math.mat_vec(mat, normal), 0.0)


def _hfield(pos, mat, size, pnt, vec, data, nrow: int, ncol: int):
  """mj_rayHfield of a height field of hfield_size ``size`` (4,) and elevations data (nrow,
  ncol), bottom row first."""
  up = mat[:, 2]
  x, normal, _ = _box_faces(pos - up * size[3] * 0.5, mat, jnp.stack([size[0], size[1],
                                                                        size[3] * 0.5]), pnt, vec)
  top, _, faces = _box_faces(pos + up * size[2] * 0.5, mat,
                             jnp.stack([size[0], size[1], size[2] * 0.5]), pnt, vec)
  lpnt, lvec = _to_local(pos, mat, pnt, vec)
  b0, b1 = _plane_basis(lvec)
  seg0, seg1 = jnp.zeros((), pnt.dtype), top
  for i in range(6):
    later = faces[i] > seg1
    seg0, seg1 = jnp.where(later, top, seg0), jnp.where(later, faces[i], seg1)

  # the cells under the segment: between consecutive grid-line crossings
  dx, dy = 2.0 * size[0] / (ncol - 1), 2.0 * size[1] / (nrow - 1)
  crossings = []
  for k, n, step in ((0, ncol, dx), (1, nrow, dy)):
    moving = jnp.abs(lvec[k]) > MINVAL
    t = (jnp.arange(n) * step - size[k] - lpnt[k]) / jnp.where(moving, lvec[k], 1.0)
    crossings.append(jnp.where(moving, jnp.clip(t, seg0, seg1), seg0))
  ts = jnp.sort(jnp.concatenate([jnp.stack([seg0, seg1]), *crossings]))
  mid = 0.5 * (ts[1:] + ts[:-1])
  cell = lambda k, step, n: jnp.clip(jnp.floor((lpnt[k] + mid * lvec[k] + size[k]) / step), 0,
                                     n - 2).astype(jnp.int32)
  col, row = cell(0, dx, ncol), cell(1, dy, nrow)

  def corner(r, c):
    return jnp.stack([dx * c - size[0], dy * r - size[1], data[r, c] * size[2]], axis=-1)

  first = jnp.stack([corner(row, col), corner(row, col + 1), corner(row + 1, col + 1)], axis=1)
  second = jnp.stack([corner(row, col), corner(row + 1, col + 1), corner(row + 1, col)], axis=1)
  tris = jnp.stack([first, second], axis=1).reshape(-1, 3, 3)
  tx, tnormal = jax.vmap(_triangle, (0, None, None, None, None))(tris, lpnt, lvec, b0, b1)
  sol, tri_normal = _nearest(jnp.where(top >= 0, tx, -1.0), tnormal)
  x, took = _take(x, sol, sol >= 0)
  normal = jnp.where(took, tri_normal, normal)

  # the top box's sides, where the ray passes below the field's edge profile
  for i in range(4):
    along, n, step = (1, nrow, dy) if i < 2 else (0, ncol, dx)
    y = (lpnt[along] + faces[i] * lvec[along] + size[along]) / step
    y0 = jnp.clip(jnp.floor(y), 0, n - 2)
    edge = data[:, 0 if i == 0 else ncol - 1] if i < 2 else data[0 if i == 2 else nrow - 1]
    z0, z1 = edge[y0.astype(jnp.int32)], edge[y0.astype(jnp.int32) + 1]
    z = (lpnt[2] + faces[i] * lvec[2]) / size[2]
    below = (top >= 0) & (faces[i] >= 0) & (z < z0 * (y0 + 1 - y) + z1 * (y - y0))
    x, took = _take(x, faces[i], below & ((faces[i] < x) | (x < 0)))
    side = jnp.zeros(3, pnt.dtype).at[i // 2].set(1.0 if i % 2 else -1.0)
    normal = jnp.where(took, side, normal)
  return _miss(x, math.mat_vec(mat, normal))


# mju_rayGeom by geom type: (x, normal) of one ray with one primitive (touch sensors use it on
# their sites' volumes)
PRIMITIVES = {GeomType.PLANE: _plane, GeomType.SPHERE: _sphere, GeomType.CAPSULE: _capsule,
               GeomType.ELLIPSOID: _ellipsoid, GeomType.CYLINDER: _cylinder,
               GeomType.BOX: _box}


# ----------------------------------------------------------------------------- mj_ray


def _candidates(m: Model, geomgroup: Sequence[int] | None, flg_static: bool) -> np.ndarray:
  """Geom ids (k,) that rays can hit, ray_eliminate's static tests: visible, in a chosen group,
  on a moving body unless static geoms count."""
  alpha = np.where(m.geom_matid >= 0, m.mat_rgba[np.maximum(m.geom_matid, 0), 3]
                   if m.nmat else 0.0, m.geom_rgba[:, 3])
  keep = alpha != 0
  if not flg_static:
    keep &= m.body_weldid[m.geom_bodyid] != 0
  if geomgroup is not None:
    keep &= np.asarray(geomgroup)[np.clip(m.geom_group, 0, _NGROUP - 1)] != 0
  keep &= np.isin(m.geom_type, list(PRIMITIVES) + [GeomType.MESH, GeomType.HFIELD])
  return np.flatnonzero(keep)


def _mesh_triangles(m: Model, geoms: np.ndarray) -> tuple[jax.Array, np.ndarray]:
  """Triangles (k, nface, 3, 3) of mesh geoms, padded to the largest, and their mask."""
  mesh = m.geom_dataid[geoms]
  nface = int(np.max(m.mesh_facenum[mesh]))
  slot = np.arange(nface)
  valid = slot[None, :] < m.mesh_facenum[mesh][:, None]
  face = m.mesh_face[m.mesh_faceadr[mesh][:, None] + np.where(valid, slot[None, :], 0)]
  vert = m.mesh_vertadr[mesh][:, None, None] + face
  return m.mesh_vert[vert], valid


def rays(m: Model, d: Data, pnt: jax.Array, vec: jax.Array, bodyexclude: np.ndarray | jax.Array,
         geomgroup: Sequence[int] | None = None, flg_static: bool = True):
  """mj_ray for n rays at once.

  Args:
    m, d: the model, and data after kinematics (geom_xpos, geom_xmat).
    pnt: (n, 3) ray origins; vec: (n, 3) directions (distances are in units of their length).
    bodyexclude: (n,) the body each ray ignores (-1: none).
    geomgroup: mjNGROUP flags; geoms in groups flagged 0 are ignored (None: all groups).
    flg_static: whether geoms on static bodies count.
  Returns:
    (dist (n,), geomid (n,) int, normal (n, 3)): the nearest intersection, or -1, -1 and zeros.
  """
  n = pnt.shape[0]
  geoms = _candidates(m, geomgroup, flg_static)
  if not m.ngeom:
    return (jnp.full(n, -1.0, pnt.dtype), jnp.full(n, -1),
            jnp.zeros((n, 3), pnt.dtype))
  x = jnp.full((n, m.ngeom), -1.0, pnt.dtype)
  normal = jnp.zeros((n, m.ngeom, 3), pnt.dtype)
  over_rays = lambda f, *extra: jax.vmap(jax.vmap(f, (0, 0, 0, None, None) + (0,) * len(extra)),
                                         (None, None, None, 0, 0) + (None,) * len(extra))
  for gtype in np.unique(m.geom_type[geoms]):
    group = geoms[m.geom_type[geoms] == gtype]
    pos, mat, size = d.geom_xpos[group], d.geom_xmat[group], m.geom_size[group]
    if gtype in PRIMITIVES:
      gx, gn = over_rays(PRIMITIVES[gtype])(pos, mat, size, pnt, vec)
    elif gtype == GeomType.MESH:
      tris, valid = _mesh_triangles(m, group)
      gx, gn = over_rays(_mesh, tris, valid)(pos, mat, size, pnt, vec, tris, valid)
    else:
      columns = []
      for g in group:
        h = int(m.geom_dataid[g])
        nrow, ncol = int(m.hfield_nrow[h]), int(m.hfield_ncol[h])
        data = m.hfield_data[m.hfield_adr[h]:m.hfield_adr[h] + nrow * ncol].reshape(nrow, ncol)
        one = lambda p, v: _hfield(d.geom_xpos[g], d.geom_xmat[g], m.hfield_size[h], p, v, data,
                                   nrow, ncol)
        columns.append(jax.vmap(one)(pnt, vec))
      gx = jnp.stack([c[0] for c in columns], axis=1)
      gn = jnp.stack([c[1] for c in columns], axis=1)
    x, normal = x.at[:, group].set(gx), normal.at[:, group].set(gn)
  excluded = m.geom_bodyid[None, :] == jnp.asarray(bodyexclude)[:, None]
  key = jnp.where((x >= 0) & ~excluded, x, jnp.inf)
  geomid = jnp.argmin(key, axis=1)
  hit = jnp.isfinite(jnp.min(key, axis=1))
  nearest = jnp.take_along_axis(x, geomid[:, None], axis=1)[:, 0]
  normal = jnp.take_along_axis(normal, geomid[:, None, None], axis=1)[:, 0]
  return (jnp.where(hit, nearest, -1.0), jnp.where(hit, geomid, -1),
          jnp.where(hit[:, None], normal, 0.0))


def ray(m: Model, d: Data, pnt: jax.Array, vec: jax.Array, bodyexclude: int | jax.Array = -1,
        geomgroup: Sequence[int] | None = None, flg_static: bool = True):
  """mj_ray: (dist, geomid, normal (3,)) of the nearest geom along ``pnt + x vec``, x >= 0, or
  (-1, -1, zeros); arguments as :func:`rays` for one ray."""
  dist, geomid, normal = rays(m, d, pnt[None], vec[None], jnp.reshape(bodyexclude, (1,)),
                              geomgroup, flg_static)
  return dist[0], geomid[0], normal[0]


def _camera_rays(m: Model, d: Data, cam: int) -> tuple[jax.Array, jax.Array]:
  """Origins and unit directions (h w, 3) of a camera's pixel rays, row by row from the top
  left (mju_camIntrinsics, mju_camPixelRay): perspective rays leave the camera through the
  pixel centres; orthographic rays run along -z from the pixels' places on the image plane,
  fovy metres high. Intrinsics from a sensor size are float32 in mjModel and in MuJoCo's
  arithmetic here."""
  w, h = (int(x) for x in m.cam_resolution[cam])
  dtype = d.qpos.dtype
  sensor = m.cam_sensorsize[cam]
  if m.cam_projection[cam]:
    fx, fy, cx, cy = w / 2, h / 2, w / 2, h / 2
  else:
    f32 = lambda x: x.astype(jnp.float32)
    sensor2 = jnp.concatenate([sensor, sensor])
    has_sensor = jnp.all(sensor != 0)
    intrinsic = (f32(m.cam_intrinsic[cam]) / f32(jnp.where(has_sensor, sensor2, 1.0))
                 * np.array([w, h, w, h], np.float32)).astype(dtype)
    focal = 0.5 / jnp.tan(m.cam_fovy[cam] * np.pi / 360.0) * h
    fovy_based = jnp.stack([focal, focal, jnp.asarray(w / 2.0, dtype), jnp.asarray(h / 2.0, dtype)])
    fx, fy, cx, cy = jnp.where(has_sensor, intrinsic, fovy_based)
  col, row = np.meshgrid(np.arange(w), np.arange(h))
  px = jnp.asarray(col.ravel() + 0.5, dtype) - cx
  py = jnp.asarray(row.ravel() + 0.5, dtype) - cy
  mat, pos = d.cam_xmat[cam], d.cam_xpos[cam]
  if m.cam_projection[cam]:
    half = m.cam_fovy[cam] / 2
    offset = jnp.stack([px / fx * half, -py / fy * half, jnp.zeros(w * h, dtype)], axis=-1)
    origin = pos[None, :] + offset @ mat.T
    return origin, jnp.broadcast_to(-mat[:, 2], (w * h, 3))
  local = jnp.stack([px / fx, -py / fy, -jnp.ones(w * h, dtype)], axis=-1)
  direction = local @ mat.T
  direction = direction / math.safe_norm(direction, keepdims=True)
  return jnp.broadcast_to(pos, (w * h, 3)), direction


def _raydata(dist: jax.Array, pnt: jax.Array, vec: jax.Array, normal: jax.Array,
             depth: jax.Array) -> jax.Array:
  """Every mjRAYDATA field of rays (n, 14): dist, dir, origin, point, normal, depth; a miss
  (dist -1) has zero dir, point and normal and depth -1."""
  hit = (dist >= 0)[:, None]
  return jnp.concatenate([dist[:, None], jnp.where(hit, vec, 0.0), pnt,
                          jnp.where(hit, pnt + dist[:, None] * vec, 0.0), normal,
                          jnp.where(hit, depth[:, None], -1.0)], axis=1)


def rangefinder(m: Model, d: Data, ids: np.ndarray) -> jax.Array:
  """Rangefinders' sensordata (n, dim), the fields of their ``data`` (sensor_intprm bits,
  mjRAYDATA order). A site's casts one ray along its z axis, ignoring the site's body; its
  depth is the distance. A camera's casts one ray per pixel (``_camera_rays``), ignoring the
  camera's body, pixel after pixel; its depth is the hit's distance along the camera's
  optical axis (-z)."""
  out = []
  site = np.flatnonzero(m.sensor_objtype[ids] == ObjType.SITE)
  if site.size:
    s = m.sensor_objid[ids[site]]
    pnt, vec = d.site_xpos[s], d.site_xmat[s][:, :, 2]
    dist, _, normal = rays(m, d, pnt, vec, m.site_bodyid[s])
    out.append((site, _raydata(dist, pnt, vec, normal, dist)))
  for k in np.flatnonzero(m.sensor_objtype[ids] == ObjType.CAMERA):
    cam = int(m.sensor_objid[ids[k]])
    pnt, vec = _camera_rays(m, d, cam)
    dist, _, normal = rays(m, d, pnt, vec, np.full(len(pnt), m.cam_bodyid[cam]))
    point = pnt + dist[:, None] * vec
    depth = -(point - d.cam_xpos[cam][None, :]) @ d.cam_xmat[cam][:, 2]
    out.append((np.array([k]), _raydata(dist, pnt, vec, normal, depth)[None]))
  dim = int(m.sensor_dim[ids[0]])
  value = jnp.zeros((len(ids), dim), d.qpos.dtype)
  for rows, table in out:
    spec = m.sensor_intprm[ids[rows], 0]
    columns = np.array([[c for bit, cols in enumerate(_RAYDATA_COLUMNS) if sp >> bit & 1
                         for c in cols] for sp in spec])                   # (k, size)
    picked = jnp.take_along_axis(table.reshape(len(rows), -1, 14),
                                 jnp.asarray(columns)[:, None, :], axis=2)
    value = value.at[rows].set(picked.reshape(len(rows), dim))
  return value
