"""Narrow-phase collision of primitive geom pairs, as MuJoCo's ``engine_collision_primitive.c``
and ``engine_collision_box.c``, and of a plane with an ellipsoid or a mesh (``mjc_PlaneConvex``
in ``engine_collision_convex.c``) (MuJoCo 4.0).

Every collider has the same unbatched signature (the collision driver vmaps it over the
candidate pairs of one type pair)::

  collider(pos1, mat1, size1, pos2, mat2, size2, margin) -> (dist, pos, frame, exist)

A mesh collider takes two more, the mesh's id ``mesh2`` () and the model's :class:`Hulls`.

* ``pos1, pos2`` (3,) world positions of the two geoms (``Data.geom_xpos``, m); ``mat1, mat2``
  (3, 3) world rotations (``Data.geom_xmat``, ``mat @ local = world``); ``size1, size2`` (3,)
  ``Model.geom_size`` (m); ``margin`` () margin + gap of the pair (m), what MuJoCo passes to its
  collision function. Geom 1 has the lower ``GeomType`` (MuJoCo swaps the pair when
  ``type1 > type2``; equal types keep the broadphase order).
* ``dist`` (K,) signed distance (m, negative in penetration); ``pos`` (K, 3) contact point (m);
  ``frame`` (K, 3, 3) ``mjContact.frame`` after ``mju_makeFrame`` (row 0 the normal from geom 1
  to geom 2, rows 1-2 tangents); ``exist`` (K,) bool, whether MuJoCo produces that contact.
  ``K = MAX_CONTACTS[(t1, t2)]`` is ``mj_maxContact`` of the type pair. Produced contacts come
  first, in MuJoCo's order.

Inactive slots (``exist`` False) are never sentinels: they hold candidates that MuJoCo's
algorithm evaluates and rejects (beyond the margin, or past its early exits), nearest first,
with their signed distance, point and frame, so their ``dist`` is finite and varies smoothly
with the poses. For a pair beyond the margin the first slot is then the pair's signed distance
(plane, sphere and capsule pairs exactly, capsule-box from the same closest-feature search
without MuJoCo's distance cut-off). Where a collider has fewer candidates than K, the extra
slots repeat its first candidate (capsule-box: a missing second point repeats the first);
box-box fills the slots beyond the clipped polygon with the separating-axis distance along the
reference face's normal (the point half that distance out from the face's centre), and an
edge-edge contact's slots with copies of it.

The reference is the MuJoCo 4.0.0 binary. Its capsule-capsule collider differs from the 3.12
sources (``mjc_segWeights``, changelog "Fixed floating-point cancellation in capsule-capsule
collision detection"); ``capsule_capsule`` follows the 4.0 machine code. So does ``plane_mesh``:
4.0 replaced 3.12's plane-mesh contacts (the support vertex and two hull neighbours) with the
support vertex and up to three vertices of a polygon at it. The others follow the C sources of
``engine_collision_primitive.c`` / ``engine_collision_box.c`` / ``engine_collision_convex.c``,
which 4.0 matches.

The C control flow (early exits, sequential "first better candidate wins" searches, early
termination after a maximum count) is reproduced by evaluating every candidate, keeping MuJoCo's
exact comparisons as validity masks, and compacting the first K valid candidates. Every
division and square root is guarded so values and gradients stay finite in every branch, also
the branches that ``jnp.where`` discards.
"""

from __future__ import annotations

import math
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from flexor.math import MINVAL, safe_sqrt
from flexor.math import cross as _cross
from flexor.math import dot as _dot
from flexor.math import mat_t_vec as _mtv
from flexor.math import mat_vec as _mv
from flexor.mjcf.mesh import HULL_EXHAUSTIVE_MAX
from flexor.types import GeomType

Contacts = tuple[jax.Array, jax.Array, jax.Array, jax.Array]  # dist, pos, frame, exist
Collider = Callable[..., Contacts]


class _Contact(NamedTuple):
  """Candidate contacts, fields with a common leading shape (N,) (or unbatched).

  As MuJoCo's ``mjPreContact``: ``tangent`` is the frame's second row before ``mju_makeFrame``
  (zero where the collision function leaves it unset); ``valid`` says whether MuJoCo emits it.
  """
  dist: jax.Array
  pos: jax.Array
  normal: jax.Array
  tangent: jax.Array
  valid: jax.Array


#------------------------------------ small vector helpers -----------------------------------------
# MINVAL, safe_sqrt, the cross and dot products and the 3x3 matrix-vector products come from
# flexor.math (left-to-right sums, as mju_dot3 and mju_mulMatVec3). _normalize stays here:
# mju_normalize3 gives (1, 0, 0) for a short vector, where flexor.math.normalize (mju_normalize)
# leaves it unchanged.

def _normalize(v: jax.Array) -> tuple[jax.Array, jax.Array]:
  """(unit vector, norm) of v (..., 3) as mju_normalize3: (1, 0, 0) where the norm < mjMINVAL."""
  sq = _dot(v, v)
  norm = safe_sqrt(sq)
  small = (norm < MINVAL)[..., None]
  unit = v / jnp.where(small, 1.0, norm[..., None])
  return jnp.where(small, jnp.array([1.0, 0.0, 0.0], v.dtype), unit), norm


def _div(num: jax.Array, den: jax.Array, ok: jax.Array) -> jax.Array:
  """num / den where ok, else 0; den is replaced by 1 where not ok so gradients stay finite."""
  return jnp.where(ok, num / jnp.where(ok, den, 1.0), 0.0)


def _pick(x: jax.Array, k: jax.Array) -> jax.Array:
  """x[k] for a traced index k into a short vector x (n,), as a masked sum: under vmap and grad
  this compiles to elementwise ops where a gather (and its scatter transpose) is much slower."""
  return jnp.sum(jnp.where(jnp.arange(x.shape[0]) == k, x, jnp.zeros_like(x)))


def make_frame(normal: jax.Array, tangent: jax.Array) -> jax.Array:
  """Contact frame (..., 3, 3) from its first two rows (..., 3), as mju_makeFrame.

  The normal is normalized; a tangent shorter than 0.5 is replaced by (0, 1, 0), or (0, 0, 1)
  when the normal is within 60 degrees of the y axis; the tangent is then made orthogonal to the
  normal and normalized, and the third row is normal x tangent.
  """
  n, _ = _normalize(normal)
  y_ok = ((n[..., 1] < 0.5) & (n[..., 1] > -0.5))[..., None]
  default = jnp.where(y_ok, jnp.array([0.0, 1.0, 0.0], n.dtype),
                      jnp.array([0.0, 0.0, 1.0], n.dtype))
  t = jnp.where((_dot(tangent, tangent) < 0.25)[..., None], default, tangent)
  t, _ = _normalize(t - n * _dot(n, t)[..., None])
  return jnp.stack([n, t, _cross(n, t)], axis=-2)


def _finish(c: _Contact, k: int) -> Contacts:
  """The first k valid candidates of c (N,) in order, then the invalid ones nearest first (by
  dist, ties in order), with full frames.

  The valid ones are MuJoCo's "append while valid, stop after k" loop; sorting the invalid ones
  by distance puts the nearest candidate that MuJoCo does not emit into the first free slot.
  """
  n = c.valid.shape[0]
  if n > 1:
    # slot of each candidate: valid ones in order, then the invalid ones by (dist, index); the
    # rank counts the invalid candidates that sort before each one (NaN-free: dist is finite)
    valid = c.valid.astype(np.int32)
    idx = np.arange(n)
    before = ((c.dist[None, :] < c.dist[:, None])
              | ((c.dist[None, :] == c.dist[:, None]) & (idx[None, :] < idx[:, None])))
    rank = jnp.sum(before & ~c.valid[None, :], axis=1)
    slot = jnp.where(c.valid, jnp.cumsum(valid) - 1, jnp.sum(valid) + rank)
    onehot = slot[None, :] == jnp.arange(min(k, n))[:, None]  # (k, n)

    def permute(x):
      sel = onehot.reshape(onehot.shape + (1,) * (x.ndim - 1))
      picked = jnp.where(sel, x[None], jnp.zeros_like(x[None]))
      return jnp.any(picked, axis=1) if x.dtype == jnp.bool_ else jnp.sum(picked, axis=1)
    c = jax.tree.map(permute, c)
  if n < k:  # slots the collider can never fill (mj_maxContact exceeds what it produces)
    pad = jax.tree.map(lambda x: jnp.repeat(x[:1], k - n, axis=0), c)
    pad = pad._replace(valid=jnp.zeros_like(pad.valid))
    c = jax.tree.map(lambda x, y: jnp.concatenate([x, y]), c, pad)
  return c.dist, c.pos, make_frame(c.normal, c.tangent), c.valid


#------------------------------------ raw colliders (one contact) ----------------------------------

def _plane_sphere(pos1: jax.Array, normal: jax.Array, pos2: jax.Array, radius: jax.Array,
                  margin: jax.Array) -> _Contact:
  """mjraw_PlaneSphere: plane through pos1 with unit normal (3,), sphere at pos2 (3,)."""
  cdist = _dot(pos2 - pos1, normal)
  dist = cdist - radius
  pos = pos2 + normal * (-dist / 2 - radius)
  return _Contact(dist, pos, normal, jnp.zeros_like(normal), cdist <= margin + radius)


def _sphere_sphere(pos1: jax.Array, mat1: jax.Array, r1: jax.Array, pos2: jax.Array,
                   mat2: jax.Array, r2: jax.Array, margin: jax.Array) -> _Contact:
  """mjraw_SphereSphere; for coincident centres the normal is z1 x z2, or (1, 0, 0)."""
  dif = pos1 - pos2
  cdist_sqr = _dot(dif, dif)
  min_dist = margin + r1 + r2
  dist = safe_sqrt(cdist_sqr) - r1 - r2
  normal, length = _normalize(pos2 - pos1)
  fallback, _ = _normalize(_cross(mat1[:, 2], mat2[:, 2]))
  normal = jnp.where(length < MINVAL, fallback, normal)
  pos = normal * (r1 + dist / 2) + pos1
  return _Contact(dist, pos, normal, jnp.zeros_like(normal), cdist_sqr <= min_dist * min_dist)


def _sphere_box(pos1: jax.Array, r1: jax.Array, pos2: jax.Array, mat2: jax.Array,
                size2: jax.Array, margin: jax.Array) -> _Contact:
  """mjraw_SphereBox: sphere (pos1, r1) against box (pos2, mat2, half-sizes size2)."""
  center = _mtv(mat2, pos1 - pos2)
  clamped = jnp.where(size2 > 0, jnp.clip(center, -size2, size2), center)
  tmp, dist = _normalize(clamped - center)

  # centre inside the box: push out through the nearest face (first of the 6 on ties)
  face_sign = jnp.array([-1.0, 1.0, -1.0, 1.0, -1.0, 1.0], center.dtype)
  face_axis = np.array([0, 0, 1, 1, 2, 2])
  face_dist = jnp.abs(face_sign * size2[face_axis] - center[face_axis])
  k = jnp.argmin(face_dist)
  closest = _pick(face_dist, k)
  nearest = jnp.where(jnp.arange(3) == k // 2, -_pick(face_sign, k), 0.0).astype(center.dtype)
  pos_in = center + nearest * ((r1 - closest) / 2)

  # centre outside: midway between the box surface and the deepest sphere point
  deepest = center + tmp * r1
  pos_out = clamped * 0.5 + deepest * 0.5

  valid = dist - r1 <= margin
  inside = dist <= MINVAL
  pos = jnp.where(inside, pos_in, pos_out)
  normal = _mv(mat2, jnp.where(inside, nearest, tmp))
  dist = jnp.where(inside, -closest, dist)
  return _Contact(dist - r1, _mv(mat2, pos) + pos2, normal, jnp.zeros_like(normal), valid)


#------------------------------------ plane colliders ----------------------------------------------

def plane_sphere(pos1: jax.Array, mat1: jax.Array, size1: jax.Array, pos2: jax.Array,
    mat2: jax.Array, size2: jax.Array, margin: jax.Array) -> Contacts:
  """mjc_PlaneSphere (K = 1): the plane normal is the plane's z axis."""
  del size1, mat2
  c = _plane_sphere(pos1, mat1[:, 2], pos2, size2[0], margin)
  return _finish(jax.tree.map(lambda x: x[None], c), 1)


def plane_capsule(pos1: jax.Array, mat1: jax.Array, size1: jax.Array, pos2: jax.Array,
    mat2: jax.Array, size2: jax.Array, margin: jax.Array) -> Contacts:
  """mjc_PlaneCapsule (K = 2): a sphere test at each end (+axis end first); tangent = axis."""
  del size1
  axis = mat2[:, 2]
  segment = size2[1] * axis
  ends = jnp.stack([pos2 + segment, pos2 - segment])
  c = jax.vmap(_plane_sphere, (None, None, 0, None, None))(pos1, mat1[:, 2], ends, size2[0],
                                                           margin)
  c = c._replace(tangent=jnp.broadcast_to(axis, c.tangent.shape))
  return _finish(c, 2)


def plane_cylinder(pos1: jax.Array, mat1: jax.Array, size1: jax.Array, pos2: jax.Array,
    mat2: jax.Array, size2: jax.Array, margin: jax.Array) -> Contacts:
  """mjc_PlaneCylinder (K = 4): nearest rim point, the opposite disk's rim point, and two points
  of a triangle inscribed in the nearer disk; nothing when the nearest point is beyond margin."""
  del size1
  normal = mat1[:, 2]
  axis = mat2[:, 2]

  # make the axis point towards the plane
  prjaxis = _dot(normal, axis)
  flip = prjaxis > 0
  axis = jnp.where(flip, -axis, axis)
  prjaxis = jnp.where(flip, -prjaxis, prjaxis)

  # rim direction nearest to the plane: -normal without its axial part, scaled to the radius;
  # for a disk parallel to the plane, the cylinder's x axis
  dist0 = _dot(pos2 - pos1, normal)
  vec = axis * prjaxis - normal
  len_sqr = _dot(vec, vec)
  general = len_sqr >= MINVAL * MINVAL
  scl = size2[0] / safe_sqrt(jnp.where(general, len_sqr, 1.0))
  vec = jnp.where(general, vec * scl, mat2[:, 0] * size2[0])
  prjvec = _dot(vec, normal)

  axis = axis * size2[1]
  prjaxis = prjaxis * size2[1]

  d1 = dist0 + prjaxis + prjvec
  d2 = dist0 - prjaxis + prjvec
  prjvec1 = -prjvec * 0.5
  d3 = dist0 + prjaxis + prjvec1
  vec1, _ = _normalize(_cross(vec, axis))
  vec1 = vec1 * (size2[0] * math.sqrt(3.0) / 2)

  first = d1 <= margin
  dist = jnp.stack([d1, d2, d3, d3])
  pos = jnp.stack([pos2 + vec + axis, pos2 + vec - axis,
                   pos2 + vec1 + axis + vec * -0.5, pos2 - vec1 + axis + vec * -0.5])
  pos = pos + normal[None, :] * (-dist * 0.5)[:, None]
  valid = jnp.stack([first, first & (d2 <= margin), first & (d3 <= margin), first & (d3 <= margin)])
  normals = jnp.broadcast_to(normal, (4, 3))
  return _finish(_Contact(dist, pos, normals, jnp.zeros_like(normals), valid), 4)


_BOX_CORNERS = np.array([[1.0 if i & 1 else -1.0, 1.0 if i & 2 else -1.0, 1.0 if i & 4 else -1.0]
                         for i in range(8)])  # corner i of a box, as the C loops enumerate them


def plane_box(pos1: jax.Array, mat1: jax.Array, size1: jax.Array, pos2: jax.Array,
    mat2: jax.Array, size2: jax.Array, margin: jax.Array) -> Contacts:
  """mjc_PlaneBox (K = 4): the first 4 corners (in corner order) within margin below the centre."""
  del size1
  norm = mat1[:, 2]
  dist = _dot(pos2 - pos1, norm)
  corner = _mv(mat2, jnp.asarray(_BOX_CORNERS, size2.dtype) * size2[None, :])
  ldist = _dot(corner, norm[None, :])
  cdist = dist + ldist
  valid = (cdist <= margin) & (ldist <= 0)
  pos = (corner + pos2[None, :]) + norm[None, :] * (-cdist / 2)[:, None]
  normals = jnp.broadcast_to(norm, (8, 3))
  return _finish(_Contact(cdist, pos, normals, jnp.zeros_like(normals), valid), 4)


def plane_ellipsoid(pos1: jax.Array, mat1: jax.Array, size1: jax.Array, pos2: jax.Array,
    mat2: jax.Array, size2: jax.Array, margin: jax.Array) -> Contacts:
  """mjc_PlaneConvex for an ellipsoid (K = 1): the ellipsoid's support point along the plane's
  -normal (``mjccd_support``), midway to the plane.

  The support point of radii ``r`` along a local direction ``u`` is ``r * s/|s|`` with
  ``s = r*u``; ``s/|s|`` is ``mju_normalize3``'s, (1, 0, 0) where ``|s| < mjMINVAL``.
  """
  del size1
  normal = mat1[:, 2]
  unit, _ = _normalize(_mtv(mat2, -normal) * size2)
  support = _mv(mat2, unit * size2) + pos2
  dist = _dot(support - pos1, normal)
  c = _Contact(dist, support + normal * (-0.5 * dist), normal, jnp.zeros_like(normal),
               dist <= margin)
  return _finish(jax.tree.map(lambda x: x[None], c), 1)


_EXTREMA_CUT = 0.4  # a direction component beyond +-0.4 picks that side of the 3x3x3 grid


class Hulls(NamedTuple):
  """The convex hulls of a model's meshes as the mesh colliders read them: one table of hull
  rows, mesh after mesh (``flexor.mjcf.mesh.hull_tables``; built by ``flexor.collision.hulls``).
  A pair gathers only the rows its search visits, so memory does not grow with candidates
  times hull size. Every index is a row (nhull of them) or a polygon id (into mesh_poly*).

  ``vert`` (nhull, 3) the rows' vertices in their mesh's frame (m); ``nbr`` (nhull, D) int32
  each row's neighbours in graph order, -1 padded; ``adr``, ``num`` (nmesh,) int32 each mesh's
  first row and row count; ``start`` (nmesh, 27) int32 the row a support search along a
  direction starts from (``mesh_extrema``); ``polynum`` (nmesh,) int32 each mesh's polygon
  count; ``poly`` (nhull, P) int32 the polygons at each row in MuJoCo's
  ``mesh_polymap`` order, -1 padded; ``prev`` (nhull, P) int32 the row before it in each of
  those polygons' loops; ``quad`` (nhull, P, 3) int32 the rows a plane contact adds for that
  row and polygon (``mesh_polyquad``, -1 padded); ``normal`` (npoly, 3) unit polygon normals in
  the mesh frame; ``loop`` (npoly, L) int32 each polygon's rows in reverse loop order, padded
  with the last, and ``nloop`` (npoly,) int32 their number. A mesh that MuJoCo searches
  exhaustively (at most HULL_EXHAUSTIVE_MAX vertices) has no neighbours.
  """
  vert: jax.Array
  nbr: jax.Array
  adr: jax.Array
  num: jax.Array
  start: jax.Array
  polynum: jax.Array
  poly: jax.Array
  prev: jax.Array
  quad: jax.Array
  normal: jax.Array
  loop: jax.Array
  nloop: jax.Array


def hull_support(hulls: Hulls, mesh: jax.Array, local: jax.Array) -> jax.Array:
  """The row mesh ``mesh`` ()'s support search ends on along direction ``local`` (3, the
  mesh's frame), as MuJoCo's from a cold start: the first best of a small mesh's rows
  (mjc_meshSupport), or from the grid seed of the direction, moving to the first best
  neighbour while it scores strictly higher (mjc_hillclimbSupport). On a convex hull that is
  a maximum; the path decides among ties. No derivative flows through it. A model whose
  meshes are all small has no climb in its program; a batch of small ones takes no step."""
  vert, local = jax.lax.stop_gradient(hulls.vert), jax.lax.stop_gradient(local)
  score = lambda rows: _dot(vert[rows], local)
  few = hulls.num[mesh] <= HULL_EXHAUSTIVE_MAX
  block = jnp.minimum(hulls.adr[mesh] + np.arange(HULL_EXHAUSTIVE_MAX), vert.shape[0] - 1)
  scores = jnp.where(np.arange(HULL_EXHAUSTIVE_MAX) < hulls.num[mesh], score(block), -jnp.inf)
  side = (local > _EXTREMA_CUT).astype(np.int32) - (local < -_EXTREMA_CUT).astype(np.int32) + 1
  seed = jnp.where(few, block[jnp.argmax(scores)],
                   hulls.start[mesh, jnp.sum(side * np.array([9, 3, 1], np.int32))])
  if not hulls.nbr.shape[1]:
    return seed

  def step(state):
    row, best, _ = state
    nb = hulls.nbr[row]
    s = jnp.where(nb >= 0, score(jnp.maximum(nb, 0)), -jnp.inf)
    j = jnp.argmax(s)
    better = s[j] > best
    return jnp.where(better, nb[j], row), jnp.where(better, s[j], best), better
  row, _, _ = jax.lax.while_loop(lambda state: state[2], step,
                                 (seed, score(seed), ~few))
  return row


def plane_mesh(pos1: jax.Array, mat1: jax.Array, size1: jax.Array, pos2: jax.Array,
    mat2: jax.Array, size2: jax.Array, margin: jax.Array, mesh2: jax.Array,
    hulls: Hulls) -> Contacts:
  """mjc_PlaneConvex for mesh ``mesh2`` () as MuJoCo 4.0 runs it (K = 4).

  The first contact is the hull's support vertex along the plane's -normal (``hull_support``);
  nothing when it is beyond margin. Of the polygons at that vertex, the first one whose normal
  is most opposed to the plane's (dot < 1) supplies up to three more vertices
  (``Hulls.quad``), each kept when within margin of the plane and not above the mesh's centre
  along the normal. Every contact lies midway between its vertex and the plane, with the
  plane's normal. The support row carries no derivative; the contacts do, through the chosen
  vertices.
  """
  del size1, size2
  normal = mat1[:, 2]
  best = hull_support(hulls, mesh2, _mtv(mat2, -normal))
  support = _mv(mat2, hulls.vert[best]) + pos2
  dist = _dot(support - pos1, normal)
  touching = dist <= margin

  poly = hulls.poly[best]
  facing = jnp.where(poly >= 0, _dot(hulls.normal[jnp.maximum(poly, 0)], _mtv(mat2, normal)),
                     1.0)
  face = jnp.argmin(facing)
  quad = hulls.quad[best, face]
  point = _mv(mat2, hulls.vert[jnp.maximum(quad, 0)]) + pos2[None, :]
  extra_dist = _dot(point - pos1[None, :], normal[None, :])
  valid = (touching & (facing[face] < 1.0) & (quad >= 0) & (extra_dist <= margin)
           & ~(_dot(point - pos2[None, :], normal[None, :]) > 0))
  dists = jnp.concatenate([dist[None], extra_dist])
  points = jnp.concatenate([support[None], point])
  normals = jnp.broadcast_to(normal, (4, 3))
  c = _Contact(dists, points + normals * (-0.5 * dists)[:, None], normals,
               jnp.zeros((4, 3), normal.dtype), jnp.concatenate([touching[None], valid]))
  return _finish(c, 4)


#------------------------------------ sphere and capsule colliders ---------------------------------

def sphere_sphere(pos1: jax.Array, mat1: jax.Array, size1: jax.Array, pos2: jax.Array,
    mat2: jax.Array, size2: jax.Array, margin: jax.Array) -> Contacts:
  """mjc_SphereSphere (K = 1)."""
  c = _sphere_sphere(pos1, mat1, size1[0], pos2, mat2, size2[0], margin)
  return _finish(jax.tree.map(lambda x: x[None], c), 1)


def sphere_capsule(pos1: jax.Array, mat1: jax.Array, size1: jax.Array, pos2: jax.Array,
    mat2: jax.Array, size2: jax.Array, margin: jax.Array) -> Contacts:
  """mjc_SphereCapsule (K = 1): the sphere against the nearest point of the capsule's segment."""
  axis = mat2[:, 2]
  x = jnp.clip(_dot(axis, pos1 - pos2), -size2[1], size2[1])
  c = _sphere_sphere(pos1, mat1, size1[0], axis * x + pos2, mat2, size2[0], margin)
  return _finish(jax.tree.map(lambda x: x[None], c), 1)


def sphere_cylinder(pos1: jax.Array, mat1: jax.Array, size1: jax.Array, pos2: jax.Array,
    mat2: jax.Array, size2: jax.Array, margin: jax.Array) -> Contacts:
  """mjc_SphereCylinder (K = 1): side (sphere-sphere with the axis point), cap (plane-sphere) or
  rim (sphere-sphere with a point sphere), chosen by where the sphere centre projects."""
  radius, height = size2[0], size2[1]
  axis = mat2[:, 2]
  vec = pos1 - pos2
  x = _dot(axis, vec)
  a_proj = axis * x
  p_proj = vec - a_proj
  p_proj_sqr = _dot(p_proj, p_proj)

  # collision type; a centre inside the cylinder uses the nearer of side and cap
  side = jnp.abs(x) < height
  cap = p_proj_sqr < radius * radius
  deep = side & cap
  cap_nearer = height - jnp.abs(x) < radius - safe_sqrt(p_proj_sqr)
  side = side & ~(deep & cap_nearer)
  cap = cap & ~(deep & ~cap_nearer)

  c_side = _sphere_sphere(pos1, mat1, size1[0], a_proj + pos2, mat2, radius, margin)

  # cap: plane-sphere against the cap's plane, normal flipped to point from sphere to cylinder
  top = x > 0
  cap_normal = jnp.where(top, axis, -axis)
  pos_cap = pos2 + axis * jnp.where(top, height, -height)
  c_cap = _plane_sphere(pos_cap, cap_normal, pos1, size1[0], margin)
  c_cap = c_cap._replace(normal=-c_cap.normal)

  # rim: sphere-sphere with a point sphere on the rim (p_proj_sqr >= radius^2 > 0 here)
  ok = p_proj_sqr > 0
  rim = p_proj * _div(radius, safe_sqrt(p_proj_sqr), ok) + axis * jnp.where(top, height, -height)
  c_rim = _sphere_sphere(pos1, mat1, size1[0], rim + pos2, mat2, jnp.zeros_like(radius), margin)

  c = jax.tree.map(lambda s, p, r: jnp.where(side, s, jnp.where(cap, p, r)), c_side, c_cap, c_rim)
  return _finish(jax.tree.map(lambda x: x[None], c), 1)


def _clamp01(x: jax.Array) -> jax.Array:
  """x clipped to [0, 1] as ``x < 0 ? 0 : (1 < x ? 1 : x)``."""
  return jnp.where(x < 0, 0.0, jnp.where(1 < x, 1.0, x))


def _seg_weights(a0: jax.Array, a1: jax.Array, b0: jax.Array, b1: jax.Array
                 ) -> tuple[jax.Array, jax.Array]:
  """Closest points of segments (a0, a1) and (b0, b1) (3,) as MuJoCo 4.0's mjc_segWeights.

  Returns (w, second): w (2, 2) are the segment parameters (s, t) in [0, 1] of one or two point
  pairs; ``second`` () says whether the second pair is used, which is when the segments are
  parallel (|d1 x d2|^2 <= 1e-8 |d1|^2 |d2|^2): the pairs then start at a0 and at a1. A clipped
  parameter re-solves the other one.
  """
  d1 = a1 - a0
  d2 = b1 - b0
  r = a0 - b0
  a = _dot(d1, d1)
  e = _dot(d2, d2)
  f = _dot(d2, r)
  c = _dot(d1, r)
  b = _dot(d1, d2)
  a_ok, e_ok = a > MINVAL, e > MINVAL
  s_t0 = _clamp01(_div(-c, a, a_ok))  # s where t is clipped to 0
  s_t1 = _clamp01(_div(b - c, a, a_ok))  # s where t is clipped to 1

  def solve_t(s, t):  # clip t, re-solving s
    return (jnp.where(t < 0, s_t0, jnp.where(t > 1, s_t1, s)),
            jnp.where(t < 0, 0.0, jnp.where(t > 1, 1.0, t)))

  n = _cross(d1, d2)
  n2 = _dot(n, n)
  parallel = n2 <= a * 1e-8 * e
  # used only where not parallel: guarding with that keeps d(n2) finite when n2 ~ 0
  s_gen = _clamp01(_div(_dot(n, _cross(d2, r)), n2, ~parallel & (n2 > 0)))
  s_gen, t_gen = solve_t(s_gen, _div(b * s_gen + f, e, e_ok))
  s_p0, t_p0 = solve_t(jnp.zeros_like(a), _div(f, e, e_ok))
  s_p1, t_p1 = solve_t(jnp.ones_like(a), _div(f + b, e, e_ok))
  zero = jnp.zeros_like(a)

  first = jnp.where(
      ~a_ok, jnp.stack([zero, jnp.where(e_ok, _clamp01(_div(f, e, e_ok)), 0.0)]),
      jnp.where(~e_ok, jnp.stack([s_t0, zero]),
                jnp.where(parallel, jnp.stack([s_p0, t_p0]), jnp.stack([s_gen, t_gen]))))
  second = a_ok & e_ok & parallel
  return jnp.stack([first, jnp.stack([s_p1, t_p1])]), second


def capsule_capsule(pos1: jax.Array, mat1: jax.Array, size1: jax.Array, pos2: jax.Array,
    mat2: jax.Array, size2: jax.Array, margin: jax.Array) -> Contacts:
  """mjc_CapsuleCapsule of MuJoCo 4.0 (K = 2): sphere-sphere at the closest points of the two
  segments; parallel segments get two point pairs, from each end of segment 1 (which may
  coincide, giving two equal contacts)."""
  axis1 = size1[1] * mat1[:, 2]
  axis2 = size2[1] * mat2[:, 2]
  a0, a1 = pos1 - axis1, axis1 + pos1
  b0, b1 = pos2 - axis2, axis2 + pos2
  w, second = _seg_weights(a0, a1, b0, b1)
  p1 = (a1 - a0)[None, :] * w[:, :1] + a0[None, :]
  p2 = (b1 - b0)[None, :] * w[:, 1:] + b0[None, :]
  c = jax.vmap(_sphere_sphere, (0, None, None, 0, None, None, None))(
      p1, mat1, size1[0], p2, mat2, size2[0], margin)
  c = c._replace(valid=c.valid & jnp.stack([True, second]))
  return _finish(c, 2)


#------------------------------------ box colliders ------------------------------------------------

def sphere_box(pos1: jax.Array, mat1: jax.Array, size1: jax.Array, pos2: jax.Array,
    mat2: jax.Array, size2: jax.Array, margin: jax.Array) -> Contacts:
  """mjc_SphereBox (K = 1)."""
  del mat1
  c = _sphere_box(pos1, size1[0], pos2, mat2, size2, margin)
  return _finish(jax.tree.map(lambda x: x[None], c), 1)


# the 12 box edges in mjraw_CapsuleBox's loop order: axis j, starting corner i (bit j of i clear)
_EDGE_AXIS = np.array([j for j in range(3) for i in range(8) if not i & (1 << j)])
_EDGE_CORNER = np.array([i for j in range(3) for i in range(8) if not i & (1 << j)])
_EDGE_START = _BOX_CORNERS[_EDGE_CORNER] * (np.arange(3)[None, :] != _EDGE_AXIS[:, None])


def _capsule_box_nearest(pos: jax.Array, halfaxis: jax.Array, hl: jax.Array,
    size2: jax.Array) -> tuple[jax.Array, ...]:
  """Closest feature search of mjraw_CapsuleBox in the box frame.

  Candidates are the two capsule ends against the box faces (an end beyond more than one face
  does not count), then the 12 box edges against the capsule segment (skipped when parallel);
  a candidate wins when its squared distance beats the best so far (by mjMINVAL for edges).

  Returns per candidate (14,): squared distance (inf where skipped), the threshold offset,
  bestsegmentpos, bestboxpos, cltype, clface, clcorner and cledge as in the C code.
  """
  # capsule ends against faces
  ends = pos[None, :] + halfaxis[None, :] * jnp.array([[-1.0], [1.0]], pos.dtype)
  clamped = jnp.clip(ends, -size2[None, :], size2[None, :])
  out = (ends < -size2[None, :]) | (ends > size2[None, :])
  nout = jnp.sum(out, axis=1)
  last_out = jnp.max(jnp.where(out, jnp.arange(3)[None, :], -1), axis=1)
  fdif = clamped - ends
  fdist = jnp.where(nout > 1, jnp.inf, _dot(fdif, fdif))

  # box edges against the capsule segment: lines' closest points, clipped into both segments;
  # s1, s2 record for box edge and capsule whether the lower end (0), middle (1) or upper end (2)
  sj = size2[_EDGE_AXIS]
  hj = halfaxis[_EDGE_AXIS]
  start = jnp.asarray(_EDGE_START, pos.dtype) * size2[None, :]
  dif = start - pos[None, :]
  ma = sj * sj
  mb = -sj * hj
  mc = hl * hl
  u = -sj * jnp.sum(jnp.where(np.arange(3)[None, :] == _EDGE_AXIS[:, None], dif, 0.0), axis=1)
  v = _dot(halfaxis[None, :], dif)
  det = ma * mc - mb * mb
  ok = jnp.abs(det) >= MINVAL
  idet = _div(1.0, det, ok)
  imc = _div(1.0, mc, mc > 0)
  ima = _div(1.0, ma, ma > 0)
  x1 = (mc * u - mb * v) * idet
  x2 = (ma * v - mb * u) * idet
  hi, lo = x1 > 1, x1 < -1
  s1 = jnp.where(hi, 2, jnp.where(lo, 0, 1))
  x2 = jnp.where(hi, (v - mb) * imc, jnp.where(lo, (v + mb) * imc, x2))
  x1 = jnp.clip(x1, -1, 1)
  hi, lo = x2 > 1, x2 < -1
  s2 = jnp.where(hi, 2, jnp.where(lo, 0, 1))
  x1n = jnp.where(hi, (u - mb) * ima, (u + mb) * ima)
  s1 = jnp.where(hi | lo, jnp.where(x1n > 1, 2, jnp.where(x1n < -1, 0, s1)), s1)
  x1 = jnp.where(hi | lo, jnp.clip(x1n, -1, 1), x1)
  x2 = jnp.clip(x2, -1, 1)
  edif = dif + halfaxis[None, :] * -x2[:, None]
  edif = edif + jnp.where(np.arange(3)[None, :] == _EDGE_AXIS[:, None], (sj * x1)[:, None], 0.0)
  edist = jnp.where(ok, _dot(edif, edif), jnp.inf)
  ctype = s1 * 3 + s2

  n_face = np.zeros(2, np.int32)
  return (jnp.concatenate([fdist, edist]),
          jnp.concatenate([jnp.zeros(2, pos.dtype), jnp.full(12, MINVAL, pos.dtype)]),
          jnp.concatenate([jnp.array([-1.0, 1.0], pos.dtype), x2]),
          jnp.concatenate([jnp.zeros(2, pos.dtype), x1]),
          jnp.concatenate([jnp.array([-3, -1], np.int32), ctype.astype(np.int32)]),
          jnp.concatenate([last_out.astype(np.int32), jnp.full(12, -1, np.int32)]),
          jnp.concatenate([n_face, (_EDGE_CORNER + (1 << _EDGE_AXIS) * (ctype // 6)).astype(
              np.int32)]),
          jnp.concatenate([n_face, jnp.asarray(_EDGE_AXIS, np.int32)]))


def _first_better(dist: jax.Array, offset: jax.Array, init: jax.Array) -> jax.Array:
  """Index of the winner of the sequential search "take k if dist[k] < best - offset[k]"
  starting from best = init; -1 if none wins. dist and offset have a small static length."""
  best, idx = init, jnp.array(-1, np.int32)
  for k in range(dist.shape[0]):  # unrolled: 14 scalar steps compile faster than a scan
    better = dist[k] < best - offset[k]
    best = jnp.where(better, dist[k], best)
    idx = jnp.where(better, k, idx)
  return idx


def capsule_box(pos1: jax.Array, mat1: jax.Array, size1: jax.Array, pos2: jax.Array,
    mat2: jax.Array, size2: jax.Array, margin: jax.Array) -> Contacts:
  """mjc_CapsuleBox (K = 4, at most 2 produced): sphere-box at the capsule point nearest to
  the box, and at a second point chosen from how the capsule lies along the nearest corner,
  edge or face of the box."""
  r1, hl = size1[0], size1[1]
  pos = _mtv(mat2, pos1 - pos2)
  axis = _mtv(mat2, mat1[:, 2])
  halfaxis = axis * hl
  axisdir = jnp.sum(jnp.where(halfaxis > 0, jnp.array([1, 2, 4], np.int32), 0))
  bestdistmax = margin + 2 * (r1 + hl + size2[0] + size2[1] + size2[2])

  dist, offset, segpos, boxpos, cltype, clface, clcorner, cledge = _capsule_box_nearest(
      pos, halfaxis, hl, size2)
  best = _first_better(dist, offset, bestdistmax)
  found = best >= 0
  # nothing within bestdistmax: MuJoCo returns no contact; the (inactive) slots then take the
  # nearest feature of the same search without the bound, so they hold the capsule's distance
  k = jnp.where(found, best, jnp.maximum(_first_better(dist, offset, jnp.inf), 0))
  bsp, bbp = _pick(segpos, k), _pick(boxpos, k)
  cltype, clface, clcorner, cledge = (_pick(x, k) for x in (cltype, clface, clcorner, cledge))

  # overshoot limits 2 size / |halfaxis| per box axis (inf where the axis is perpendicular)
  absha = jnp.abs(halfaxis)
  ha_ok = absha > 0
  reach = jnp.where(ha_ok, _div(2 * size2, absha, ha_ok), jnp.inf)

  # nearest is a box corner: slide along the edge or face the capsule lies along
  c1 = axisdir ^ clcorner
  neg = (c1 == 3) | (c1 == 5) | (c1 == 6)
  mul = jnp.where(neg, -1.0, 1.0)
  c1n = jnp.where(neg, 7 - c1, c1)
  de = jnp.where(neg, 1 + bsp, 1 - bsp)
  dp = jnp.where(neg, 1 - bsp, 1 + bsp)
  ax = jnp.where(c1n == 1, 0, jnp.where(c1n == 2, 1, 2))
  axis_ax = _pick(axis, ax)
  along = axis_ax * axis_ax > 0.5
  sp_edge = jnp.minimum(de, _pick(reach, ax)) * mul
  sp_face = jnp.minimum(jnp.minimum(dp, _pick(reach, (ax + 1) % 3)), _pick(reach, (ax + 2) % 3))
  sp_face = sp_face * -mul
  sp_corner = jnp.where(along, sp_edge, sp_face)
  skip_corner = (c1 == 0) | (c1 == 7)

  # nearest is inside a box edge: only a crossing (not T-shaped) capsule gets a second point
  c1 = (axisdir ^ clcorner) & (7 - (1 << cledge))
  skip_edge = ~((c1 == 1) | (c1 == 2) | (c1 == 4))
  ax = cledge
  ax1, ax2 = (ax + 1) % 3, (ax + 2) % 3
  ax1 = jnp.where(jnp.abs(_pick(axis, ax1)) > jnp.abs(_pick(axis, ax2)), ax2, ax1)
  ax2 = 3 - ax - ax1
  bit = ((c1 >> ax2) & 1) == 1
  mul = jnp.where(bit, 1.0, -1.0)
  sp = jnp.minimum(jnp.where(bit, 1 - bsp, 1 + bsp), _pick(reach, ax2))
  e2 = jnp.where((((axisdir >> ax) & 1) == 1) == bit, 1 - bbp, 1 + bbp)
  absha_ax = _pick(absha, ax)
  ok_ax = absha_ax > 0
  sp = jnp.where(ok_ax, jnp.minimum(sp, _div(_pick(size2, ax) * e2, absha_ax, ok_ax)), sp)
  sp_edge = sp * mul

  # nearest is a capsule end over a face: the farthest capsule point still over the box
  mul = jnp.where(cltype == -3, 1.0, -1.0)
  tmp = pos + halfaxis * -mul
  ha_nz = halfaxis != 0
  e_hi = _div(size2 - tmp, halfaxis, ha_nz) * mul
  e_lo = _div(-size2 - tmp, halfaxis, ha_nz) * mul
  use = ha_nz & (jnp.arange(3) != clface)
  e = jnp.concatenate([jnp.where(use & (e_hi > 0), e_hi, 2.0),
                       jnp.where(use & (e_lo > 0), e_lo, 2.0)])
  sp_face = jnp.minimum(2.0, jnp.min(e)) * mul
  skip_face = clface == -1

  is_edge = cltype // 3 == 1
  secondpos = jnp.where(
      cltype < 0, jnp.where(skip_face, -4.0, sp_face),
      jnp.where(is_edge, jnp.where(skip_edge, -4.0, sp_edge),
                jnp.where(skip_corner, -4.0, sp_corner)))

  # no second point (secondpos = -4): its inactive slot repeats the first point, on the capsule
  second = secondpos > -3
  centers = pos[None, :] + halfaxis[None, :] * jnp.stack(
      [bsp, jnp.where(second, secondpos, 0.0) + bsp])[:, None]
  centers = _mv(mat2, centers) + pos2[None, :]
  c = jax.vmap(_sphere_box, (0, None, None, None, None, None))(centers, r1, pos2, mat2, size2,
                                                               margin)
  c = c._replace(valid=c.valid & found & jnp.stack([True, second]))
  return _finish(c, 4)

#------------------------------------ box-box ------------------------------------------------------

# mjc_BoxBox's rounding scales (double build; the float32 build's in _BOXBOX_EPS32): slack on
# the separation tests times the summed half-sizes, sin^2 below which an edge-cross axis is
# noise, axis component below which a support corner is ambiguous, squared relative radius for
# deduplicating clipped vertices.
_BOXBOX_EPS64 = dict(sep=1e-13, par=1e-16, sgn=1e-9, dup=1e-14)
_BOXBOX_EPS32 = dict(sep=1e-6, par=1e-7, sgn=1e-5, dup=1e-10)
_BOXBOX_EDGEBIAS = 1e-6  # relative penalty of an edge axis on near-ties with the best face axis
_BOXBOX_MAXVERT = 12  # clipping buffer of mjc_BoxBox (a clipped quad has at most 8 vertices)


def _onehot(k: jax.Array, n: int = 3) -> jax.Array:
  """(n,) bool, True at traced index k."""
  return jnp.arange(n) == k


def _pick2(m: jax.Array, r: jax.Array, c: jax.Array) -> jax.Array:
  """m[r, c] of a (3, 3) matrix at traced indices, as a masked sum (see _pick)."""
  sel = _onehot(r)[:, None] & _onehot(c)[None, :]
  return jnp.sum(jnp.where(sel, m, jnp.zeros_like(m)))


def _box_sat(rot: jax.Array, pos21: jax.Array, pos12: jax.Array, size1: jax.Array, size2: jax.Array,
    septol: jax.Array, eps: dict[str, float]) -> tuple[jax.Array, ...]:
  """Stage 1 of mjc_BoxBox: separating-axis test over the 6 face and 9 edge-cross axes.

  Returns (separated, code, sep_face, code_face, sep_best): code 0..2 a face of box 1, 3..5 a
  face of box 2, 6 + 3 i + j the cross of box 1's axis i with box 2's axis j.
  """
  rotabs = jnp.abs(rot)
  sep_f1 = jnp.abs(pos21) - size1 - _mv(rotabs, size2)
  sep_f2 = jnp.abs(pos12) - size2 - _mtv(rotabs, size1)
  sep_f = jnp.concatenate([sep_f1, sep_f2])
  separated = jnp.any(sep_f > septol)
  code_face = jnp.argmax(sep_f).astype(np.int32)  # first of the ties, as the strict C loop
  sep_face = jnp.max(sep_f)

  sep_best, code = sep_face, code_face
  for i in range(3):  # unrolled over the 9 static edge pairs: the update is sequential
    for j in range(3):
      i1, i2, j1, j2 = (i + 1) % 3, (i + 2) % 3, (j + 1) % 3, (j + 2) % 3
      ax1, ax2 = -rot[i2, j], rot[i1, j]
      norm2 = ax1 * ax1 + ax2 * ax2
      ok = norm2 >= eps["par"]  # nearly parallel edges: the cross product is noise
      inv = 1 / safe_sqrt(jnp.where(ok, norm2, 1.0))
      ax1, ax2 = ax1 * inv, ax2 * inv
      radius1 = size1[i1] * jnp.abs(ax1) + size1[i2] * jnp.abs(ax2)
      a2_1 = ax1 * rot[i1, j1] + ax2 * rot[i2, j1]
      a2_2 = ax1 * rot[i1, j2] + ax2 * rot[i2, j2]
      radius2 = size2[j1] * jnp.abs(a2_1) + size2[j2] * jnp.abs(a2_2)
      sep = jnp.abs(ax1 * pos21[i1] + ax2 * pos21[i2]) - radius1 - radius2
      separated = separated | (ok & (sep > septol))
      better = ok & (sep - _BOXBOX_EDGEBIAS * jnp.abs(sep) > sep_best) & (sep > sep_face)
      sep_best = jnp.where(better, sep, sep_best)
      code = jnp.where(better, 6 + 3 * i + j, code)
  return separated, code, sep_face, code_face, sep_best


def _edge_axis(rot: jax.Array, i: jax.Array, j: jax.Array) -> jax.Array:
  """Unit cross of box 1's axis i and box 2's axis j (column j of rot), in box 1's frame."""
  i1, i2 = (i + 1) % 3, (i + 2) % 3
  axis = (jnp.where(_onehot(i1), -_pick2(rot, i2, j), 0.0)
          + jnp.where(_onehot(i2), _pick2(rot, i1, j), 0.0))
  return _normalize(axis)[0]


def _box_edge_contact(rot: jax.Array, pos21: jax.Array, size1: jax.Array, size2: jax.Array,
    i: jax.Array, j: jax.Array, eps: dict[str, float]) -> tuple[jax.Array, jax.Array, jax.Array]:
  """Stage 2a of mjc_BoxBox: the contact of edge i of box 1 and edge j of box 2 (traced i, j).

  Returns (dist, mid, axis) in box 1's frame: distance along the axis (oriented from box 1 to
  box 2), the midpoint of the closest points of the supporting edges, and the axis.
  """
  i1, i2, j1, j2 = (i + 1) % 3, (i + 2) % 3, (j + 1) % 3, (j + 2) % 3
  ei, ei1, ei2 = _onehot(i), _onehot(i1), _onehot(i2)
  ej, ej1, ej2 = _onehot(j), _onehot(j1), _onehot(j2)
  axis = _edge_axis(rot, i, j)
  axis = jnp.where(_dot(axis, pos21) < 0, -axis, axis)
  a2 = _mtv(rot, axis)

  # supporting corners; an ambiguous sign (near-zero component, at most one per box) is tried
  # both ways: combinations (v1, v2) in C's loop order
  ax_i1, ax_i2 = _pick(axis, i1), _pick(axis, i2)
  amb1 = jnp.where(jnp.abs(ax_i1) < eps["sgn"], i1, jnp.where(jnp.abs(ax_i2) < eps["sgn"], i2, -1))
  a2_j1, a2_j2 = _pick(a2, j1), _pick(a2, j2)
  amb2 = jnp.where(jnp.abs(a2_j1) < eps["sgn"], j1, jnp.where(jnp.abs(a2_j2) < eps["sgn"], j2, -1))
  s1_i1, s1_i2 = _pick(size1, i1), _pick(size1, i2)
  s2_j1, s2_j2 = _pick(size2, j1), _pick(size2, j2)
  c1 = (jnp.where(ei1, jnp.where(ax_i1 >= 0, s1_i1, -s1_i1), 0.0)
        + jnp.where(ei2, jnp.where(ax_i2 >= 0, s1_i2, -s1_i2), 0.0))
  cc = (jnp.where(ej1, jnp.where(a2_j1 >= 0, -s2_j1, s2_j1), 0.0)
        + jnp.where(ej2, jnp.where(a2_j2 >= 0, -s2_j2, s2_j2), 0.0))
  v1 = jnp.array([0, 0, 1, 1])
  v2 = jnp.array([0, 1, 0, 1])
  flip1 = (v1[:, None] == 1) & _onehot(amb1)[None, :]
  flip2 = (v2[:, None] == 1) & _onehot(amb2)[None, :]
  c1 = jnp.where(flip1, -c1[None, :], c1[None, :])  # (4, 3)
  cc = jnp.where(flip2, -cc[None, :], cc[None, :])
  c2 = _mv(rot, cc) + pos21[None, :]
  active = ((v1 == 0) | (amb1 >= 0)) & ((v2 == 0) | (amb2 >= 0))

  # closest points of the edge segments, each clamp re-solving the other parameter
  d2 = jnp.sum(jnp.where(ej[None, :], rot, 0.0), axis=1)  # column j of rot
  b = _pick(d2, i)
  denom = 1 - b * b
  e = c2 - c1
  d1e = jnp.sum(jnp.where(ei[None, :], e, 0.0), axis=1)
  d2e = _dot(d2[None, :], e)
  s_i, s_j = _pick(size1, i), _pick(size2, j)
  s = jnp.where(denom < MINVAL, 0.0, _div(d1e - b * d2e, denom, denom >= MINVAL))
  s = jnp.clip(s, -s_i, s_i)
  t = jnp.clip(b * s - d2e, -s_j, s_j)
  s = jnp.clip(d1e + b * t, -s_i, s_i)
  p1 = c1 + jnp.where(ei[None, :], s[:, None], 0.0)
  p2 = c2 + d2[None, :] * t[:, None]
  gap = p2 - p1
  best = jnp.argmin(jnp.where(active, _dot(gap, gap), jnp.inf))
  w1 = jnp.sum(jnp.where(_onehot(best, 4)[:, None], p1, 0.0), axis=0)
  w2 = jnp.sum(jnp.where(_onehot(best, 4)[:, None], p2, 0.0), axis=0)
  return _dot(w2 - w1, axis), 0.5 * (w1 + w2), axis


def _clip_half_plane(poly: jax.Array, n: jax.Array, coord: int, sign: float,
    limit: jax.Array) -> tuple[jax.Array, jax.Array]:
  """clipHalfPlane: clip polygon poly (M, 3) with n vertices against sign * v[coord] <= limit.

  Returns the new (M, 3) polygon and vertex count; left untouched when every vertex is inside.
  Each vertex emits itself if inside, then the crossing point of its edge to the next vertex if
  that edge strictly crosses the plane; the emitted points are compacted in order.
  """
  m = poly.shape[0]
  idx = jnp.arange(m)
  valid = idx < n
  d = sign * poly[:, coord] - limit
  all_inside = jnp.all(jnp.where(valid, d <= 0, True))
  nxt = jnp.where(idx + 1 == n, 0, idx + 1)
  next_sel = idx[None, :] == nxt[:, None]  # (M, M): row k selects vertex k+1 (cyclic)
  q = jnp.sum(jnp.where(next_sel[:, :, None], poly[None, :, :], 0.0), axis=1)
  dq = jnp.sum(jnp.where(next_sel, d[None, :], 0.0), axis=1)
  keep = valid & (d <= 0)
  cross = valid & (((d < 0) & (dq > 0)) | ((d > 0) & (dq < 0)))
  denom = d - dq
  t = _div(d, denom, cross)
  inter = poly + t[:, None] * (q - poly)

  # interleave (vertex, crossing) per input vertex and compact the emitted ones
  cand = jnp.stack([poly, inter], axis=1).reshape(2 * m, 3)
  emit = jnp.stack([keep, cross], axis=1).reshape(2 * m)
  slot = jnp.cumsum(emit.astype(np.int32)) - 1
  sel = emit[None, :] & (slot[None, :] == idx[:, None])  # (M, 2M); slots beyond M are dropped
  out = jnp.sum(jnp.where(sel[:, :, None], cand[None, :, :], 0.0), axis=1)
  nout = jnp.minimum(jnp.sum(emit.astype(np.int32)), m)
  return jnp.where(all_inside, poly, out), jnp.where(all_inside, n, nout)


def _box_face_contacts(rot: jax.Array, pos21: jax.Array, pos12: jax.Array, mat1: jax.Array,
    mat2: jax.Array, pos1: jax.Array, pos2: jax.Array, size1: jax.Array, size2: jax.Array,
    code: jax.Array, sep: jax.Array, margin: jax.Array, eps: dict[str, float]) -> _Contact:
  """Stage 2b of mjc_BoxBox: clip the incident face against the reference face (code 0..5).

  Returns candidates (12,): the clipped incident polygon's vertices within margin of the
  reference face, near-duplicates dropped, in polygon order; then (inactive) slots at the
  reference face's centre with the boxes' separation ``sep`` along its normal as distance.
  """
  ref1 = code < 3
  a = jnp.where(ref1, code, code - 3)
  sizeref = jnp.where(ref1, size1, size2)
  sizeinc = jnp.where(ref1, size2, size1)
  posref = jnp.where(ref1, pos1, pos2)
  matref = jnp.where(ref1, mat1, mat2)
  posoi = jnp.where(ref1, pos21, pos12)
  rinc = jnp.where(ref1, rot, rot.T)  # rinc[r, c]: component r of incident axis c, ref frame

  sgn = jnp.where(_pick(posoi, a) >= 0, 1.0, -1.0)
  row_a = jnp.sum(jnp.where(_onehot(a)[:, None], rinc, 0.0), axis=0)  # rinc[a, :]
  binc = jnp.argmax(jnp.abs(row_a))  # first of the ties, as the strict C loop
  tinc = jnp.where(sgn * _pick(row_a, binc) > 0, -1.0, 1.0)

  ax, ay = (a + 1) % 3, (a + 2) % 3
  bu, bv = (binc + 1) % 3, (binc + 2) % 3
  col = lambda k: jnp.sum(jnp.where(_onehot(k)[None, :], rinc, 0.0), axis=1)  # rinc[:, k]
  perm = jnp.stack([_onehot(ax), _onehot(ay), _onehot(a)])  # rows pick (ax, ay, a)
  pick3 = lambda v: jnp.sum(jnp.where(perm, v[None, :], 0.0), axis=1)
  cx = pick3(posoi) + tinc * _pick(sizeinc, binc) * pick3(col(binc))
  du = _pick(sizeinc, bu) * pick3(col(bu))
  dv = _pick(sizeinc, bv) * pick3(col(bv))
  zsign = jnp.array([1.0, 1.0, 0.0], cx.dtype)
  cx = jnp.where(zsign > 0, cx, sgn * cx - _pick(sizeref, a))
  du = jnp.where(zsign > 0, du, du * sgn)
  dv = jnp.where(zsign > 0, dv, dv * sgn)
  corner_sign = np.array([[1.0, 1.0], [-1.0, 1.0], [-1.0, -1.0], [1.0, -1.0]])
  quad = (cx[None, :] + jnp.asarray(corner_sign[:, :1], cx.dtype) * du[None, :]
          + jnp.asarray(corner_sign[:, 1:], cx.dtype) * dv[None, :])
  poly = jnp.concatenate([quad, jnp.zeros((_BOXBOX_MAXVERT - 4, 3), cx.dtype)])

  n = jnp.array(4, np.int32)
  lim_x, lim_y = _pick(sizeref, ax), _pick(sizeref, ay)
  for coord, sign, limit in ((0, 1.0, lim_x), (0, -1.0, lim_x), (1, 1.0, lim_y), (1, -1.0, lim_y)):
    poly, n = _clip_half_plane(poly, n, coord, sign, limit)

  # accept vertices in the margin band, dropping near-duplicates of accepted ones
  dupe2 = eps["dup"] * (lim_x * lim_x + lim_y * lim_y)
  dx = poly[:, None, 0] - poly[None, :, 0]
  dy = poly[:, None, 1] - poly[None, :, 1]
  near = dx * dx + dy * dy < dupe2  # (M, M)
  inband = (jnp.arange(_BOXBOX_MAXVERT) < n) & ~(poly[:, 2] > margin)
  accepted = []
  for k in range(_BOXBOX_MAXVERT):  # unrolled: acceptance depends on the earlier acceptances
    if k:
      accepted.append(inband[k] & ~jnp.any(jnp.stack(accepted) & near[:k, k]))
    else:
      accepted.append(inband[k])
  accepted = jnp.stack(accepted)

  # slots beyond the clipped polygon (inactive) take the separation of the boxes along the
  # reference face's normal (sep, from the separating-axis test) as their height
  poly = poly.at[:, 2].set(jnp.where(jnp.arange(_BOXBOX_MAXVERT) < n, poly[:, 2], sep))

  nsign = jnp.where(ref1, sgn, -sgn)
  normal = nsign * jnp.sum(jnp.where(_onehot(a)[None, :], matref, 0.0), axis=1)
  posc = (jnp.where(_onehot(ax)[None, :], poly[:, :1], 0.0)
          + jnp.where(_onehot(ay)[None, :], poly[:, 1:2], 0.0)
          + jnp.where(_onehot(a)[None, :], (sgn * (_pick(sizeref, a) + 0.5 * poly[:, 2]))[:, None],
                      0.0))
  pos = _mv(matref, posc) + posref[None, :]
  normals = jnp.broadcast_to(normal, pos.shape)
  return _Contact(poly[:, 2], pos, normals, jnp.zeros_like(normals), accepted)


def box_box(pos1: jax.Array, mat1: jax.Array, size1: jax.Array, pos2: jax.Array,
    mat2: jax.Array, size2: jax.Array, margin: jax.Array) -> Contacts:
  """mjc_BoxBox (K = 8): separating-axis test, then one edge-edge contact or the incident face
  clipped against the reference face (Sutherland-Hodgman), every clipped vertex within margin a
  contact."""
  eps = _BOXBOX_EPS32 if pos1.dtype == jnp.float32 else _BOXBOX_EPS64
  rot = jnp.einsum("ki,kj->ij", mat1, mat2, precision=jax.lax.Precision.HIGHEST)
  pos21 = _mtv(mat1, pos2 - pos1)
  pos12 = _mtv(mat2, pos1 - pos2)
  septol = margin + eps["sep"] * (size1[0] + size1[1] + size1[2] + size2[0] + size2[1] + size2[2])
  separated, code, sep_face, code_face, sep_best = _box_sat(rot, pos21, pos12, size1, size2,
                                                            septol, eps)

  # an edge axis within ~8 degrees of the best face axis yields to the face unless it is 5%
  # deeper: the face manifold covers the same contact with several points
  ei, ej = jnp.maximum(code - 6, 0) // 3, jnp.maximum(code - 6, 0) % 3
  axis = _edge_axis(rot, ei, ej)
  face_dot = jnp.where(code_face < 3, jnp.abs(_pick(axis, code_face)),
                       jnp.abs(_dot(axis, jnp.sum(jnp.where(_onehot(code_face - 3)[None, :], rot,
                                                            0.0), axis=1))))
  to_face = (code >= 6) & (face_dot > 0.99) & (sep_best < sep_face + 0.05 * jnp.abs(sep_face) +
                                                MINVAL)
  code = jnp.where(to_face, code_face, code)
  edge = code >= 6

  dist, mid, axis = _box_edge_contact(rot, pos21, size1, size2, ei, ej, eps)
  c_edge = _Contact(dist, _mv(mat1, mid) + pos1, _mv(mat1, axis), jnp.zeros(3, mid.dtype),
                    dist <= septol)
  # the edge contact, repeated as inactive copies in the remaining slots
  c_edge = jax.tree.map(lambda x: jnp.broadcast_to(x, (_BOXBOX_MAXVERT,) + x.shape), c_edge)
  c_edge = c_edge._replace(valid=c_edge.valid & (jnp.arange(_BOXBOX_MAXVERT) == 0))
  c_face = _box_face_contacts(rot, pos21, pos12, mat1, mat2, pos1, pos2, size1, size2,
                              jnp.where(edge, 0, code), sep_face, margin, eps)
  c = jax.tree.map(lambda e, f: jnp.where(edge, e, f), c_edge, c_face)
  c = c._replace(valid=c.valid & ~separated)
  return _finish(c, 8)


#------------------------------------ tables -------------------------------------------------------

_G = GeomType
COLLIDERS: dict[tuple[int, int], Collider] = {
    (_G.PLANE, _G.SPHERE): plane_sphere,
    (_G.PLANE, _G.CAPSULE): plane_capsule,
    (_G.PLANE, _G.CYLINDER): plane_cylinder,
    (_G.PLANE, _G.ELLIPSOID): plane_ellipsoid,
    (_G.PLANE, _G.BOX): plane_box,
    (_G.PLANE, _G.MESH): plane_mesh,
    (_G.SPHERE, _G.SPHERE): sphere_sphere,
    (_G.SPHERE, _G.CAPSULE): sphere_capsule,
    (_G.SPHERE, _G.CYLINDER): sphere_cylinder,
    (_G.SPHERE, _G.BOX): sphere_box,
    (_G.CAPSULE, _G.CAPSULE): capsule_capsule,
    (_G.CAPSULE, _G.BOX): capsule_box,
    (_G.BOX, _G.BOX): box_box,
}
COLLIDERS = {(int(a), int(b)): f for (a, b), f in COLLIDERS.items()}

# mj_maxContact of each type pair (with margin): the length K of every collider's outputs
MAX_CONTACTS: dict[tuple[int, int], int] = {
    (int(_G.PLANE), int(_G.SPHERE)): 1,
    (int(_G.PLANE), int(_G.CAPSULE)): 2,
    (int(_G.PLANE), int(_G.CYLINDER)): 4,
    (int(_G.PLANE), int(_G.ELLIPSOID)): 1,
    (int(_G.PLANE), int(_G.BOX)): 4,
    (int(_G.PLANE), int(_G.MESH)): 4,
    (int(_G.SPHERE), int(_G.SPHERE)): 1,
    (int(_G.SPHERE), int(_G.CAPSULE)): 1,
    (int(_G.SPHERE), int(_G.CYLINDER)): 1,
    (int(_G.SPHERE), int(_G.BOX)): 1,
    (int(_G.CAPSULE), int(_G.CAPSULE)): 2,
    (int(_G.CAPSULE), int(_G.BOX)): 4,
    (int(_G.BOX), int(_G.BOX)): 8,
}
