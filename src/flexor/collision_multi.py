"""MuJoCo 4's multi-contact search (``mjc_multicontact``): the extra contacts of a convex pair
of capsules, cylinders, boxes and meshes (``contact_pairs.MULTI``) where multiccd is on.

After GJK/EPA (``collision_convex``) has found the deepest point, the search reads the
features of both geoms that the nearest polytope face touches: the support points' vertex ids
(a box's corner bits, a mesh's hull vertex, a cylinder's cap) give each geom a vertex, an edge
or a face. It gathers the faces that could hold the contact (a box's up to three faces at a
corner, a mesh's polygons at a vertex, a cylinder's cap) and looks for two that face each
other within 0.0889 rad. Failing that, it looks for an edge of the lower-dimensional feature
(a box or mesh edge, a cylinder's side line, a capsule's segment) lying in one of the other
geom's faces. The matched faces (a cylinder's cap as a 16-gon) or face and edge are clipped
against each other (Sutherland-Hodgman), points farther than the margin from the clipping face
are dropped, and up to four are kept (the quadrilateral ``polygonQuad`` finds, or an edge's two
farthest points); each becomes a contact with its own depth and the face's normal.

The C sources of this search are not public: it follows MuJoCo Warp 4.0's port of it
(``collision_gjk.multicontact``) and is checked against the MuJoCo 4.0.0 binary in float64
(``tests/test_collision_multi.py``). Where the port and the 4.0.1 binary differ, it follows
the binary (read from its machine code): the clipping's halfspace test and crossings, the
cylinder cap's tables, and the rounding of every product and sum in the faces, the clipping
and polygonQuad's areas, since which of many quadrilaterals of equal area polygonQuad keeps
turns on their last bits.

Everything runs at fixed sizes: candidate lists are masks over the largest list the geom kinds
can have, polygons live in arrays of the most vertices clipping can leave, and the
combinatorial choices (features, faces, the kept vertices) are made on values without
derivatives; positions and depths then follow the geoms' poses and sizes differentiably.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from flexor.collision_primitive import Hulls, hull_support
from flexor.math import dot as _dot
from flexor.math import rounded, safe_norm
from flexor.math import mat_vec as _mat_vec
from flexor.types import GeomType

_G = GeomType
MINVAL = 1e-15
FACE_TOL = math.cos(0.0889)  # two faces are aligned within this angle
EDGE_TOL = math.sin(0.0889)  # an edge lies in a face within this angle
NCYL = 16  # a cylinder's cap is clipped as a regular 16-gon
# cylinderFace's tables: MuJoCo's 15-digit literals, not cos and sin rounded to double
_C1, _C2, _C3 = 0.923879532511287, 0.707106781186548, 0.38268343236509
_S2 = 0.707106781186547
_CYL_COS = np.array([1.0, _C1, _C2, _C3, 0.0, -_C3, -_S2, -_C1, -1.0, -_C1, -_C2, -_C3, 0.0, _C3,
                     _S2, _C1])
_CYL_SIN = np.array([0.0, _C3, _S2, _C1, 1.0, _C1, _C2, _C3, 0.0, -_C3, -_S2, -_C1, -1.0, -_C1,
                     -_C2, -_C3])
FACE_KINDS = (_G.BOX, _G.MESH, _G.CYLINDER)
EDGE_KINDS = (_G.CAPSULE,)
MAXCON = 4  # contacts a search returns at most


def supports(type1: int, type2: int) -> bool:
  """Whether MuJoCo 4 runs the multi-contact search on a pair of these geom types."""
  face1, face2 = type1 in FACE_KINDS, type2 in FACE_KINDS
  return (face1 and face2) or (face1 and type2 in EDGE_KINDS) or (type1 in EDGE_KINDS and face2)


def _rot(g, local: jax.Array) -> jax.Array:
  """A direction (..., 3) of geom ``g``'s frame in the world."""
  return _mat_vec(g.mat, local)


def _world(g, local: jax.Array) -> jax.Array:
  """A point (..., 3) of geom ``g``'s frame in the world."""
  return _rot(g, local) + g.pos.reshape((1,) * (local.ndim - 1) + (3,))


def _mul(a: jax.Array, b: jax.Array) -> jax.Array:
  return rounded(a * b)


def _xdot(a: jax.Array, b: jax.Array) -> jax.Array:
  """dot3 as MuJoCo rounds it: (a0 b0 + a1 b1) + a2 b2, along the last axis of equal ranks."""
  p = _mul(a, b)
  return (p[..., 0] + p[..., 1]) + p[..., 2]


def _xcross(a: jax.Array, b: jax.Array) -> jax.Array:
  """cross3 as MuJoCo rounds it, along the last axis of equal ranks."""
  c = lambda i, j: _mul(a[..., i], b[..., j]) - _mul(a[..., j], b[..., i])
  return jnp.stack([c(1, 2), c(2, 0), c(0, 1)], axis=-1)


def _xworld(g, local: jax.Array) -> jax.Array:
  """_world as MuJoCo's globalcoord rounds it: mat local (mju_mulMatVec3), then + pos."""
  lead = (1,) * (local.ndim - 1)
  p = _mul(g.mat.reshape(lead + (3, 3)), local[..., None, :])
  return ((p[..., 0] + p[..., 1]) + p[..., 2]) + g.pos.reshape(lead + (3,))


def _unit(v: jax.Array) -> jax.Array:
  n2 = _dot(v, v)
  ok = n2 > 0
  return v / jnp.where(ok, jnp.sqrt(jnp.where(ok, n2, 1.0)), 1.0)[..., None]


#------------------------------------ features -----------------------------------------------------

def vertex_index(kinds: tuple[int, ...], g, d: jax.Array) -> jax.Array:
  """The vertex id the support function of geom ``g`` records for unit direction ``d`` (3,):
  a box's corner bits (x 1, y 2, z 4 where the corner is on the positive side), a cylinder's
  cap (0 top, 1 bottom), a mesh's hull row (``collision_primitive.Hulls``); -1 for other
  geoms."""
  local = g.mat[0] * d[0] + g.mat[1] * d[1] + g.mat[2] * d[2]
  out = jnp.array(-1, jnp.int32)
  for kind in kinds:
    if kind == _G.BOX:
      v = ((local[0] >= 0).astype(jnp.int32) + 2 * (local[1] >= 0).astype(jnp.int32)
           + 4 * (local[2] >= 0).astype(jnp.int32))
    elif kind == _G.CYLINDER:
      v = jnp.where(local[2] >= 0, 0, 1).astype(jnp.int32)
    elif kind == _G.MESH:
      v = hull_support(g.hulls, g.mesh, local).astype(jnp.int32)
    else:
      continue
    out = jnp.where(g.kind == kind, v, out)
  return out


def _feature_dim(idx: jax.Array, pts: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
  """featureDim: whether the face's three vertex ids ``idx`` (3,) on one geom are a vertex (1),
  an edge (2) or a face (3), with the ids and points (3, 3) reordered so that the distinct
  ones come first."""
  v1, v2, v3 = idx[0], idx[1], idx[2]
  apart = v1 != v2
  dim = jnp.where(apart, jnp.where((v3 == v1) | (v3 == v2), 2, 3), jnp.where(v1 != v3, 2, 1))
  idx = jnp.where(apart, idx, jnp.stack([v1, v3, v3]))
  pts = jnp.where(apart, pts, jnp.stack([pts[0], pts[2], pts[2]]))
  return dim, idx, pts


class _Faces(NamedTuple):
  """Candidate faces of one geom: unit normals (N, 3) in the world, ``ok`` (N,), and ``id``
  (N,) what recovers each face (a box's face 0-5, a cylinder's cap, a mesh's slot at the
  feature's first vertex)."""
  normal: jax.Array
  ok: jax.Array
  id: jax.Array


_BOX_NORMALS = np.array([[1, 0, 0], [-1, 0, 0], [0, 1, 0], [0, -1, 0], [0, 0, 1], [0, 0, -1.0]])
# boxFace: the corners (signs of the half sizes) of faces +x, -x, +y, -y, +z, -z in loop order
_BOX_FACES = np.array([
    [(1, 1, 1), (1, 1, -1), (1, -1, -1), (1, -1, 1)],
    [(-1, 1, -1), (-1, 1, 1), (-1, -1, 1), (-1, -1, -1)],
    [(-1, 1, -1), (1, 1, -1), (1, 1, 1), (-1, 1, 1)],
    [(-1, -1, 1), (1, -1, 1), (1, -1, -1), (-1, -1, -1)],
    [(-1, 1, 1), (1, 1, 1), (1, -1, 1), (-1, -1, 1)],
    [(1, 1, -1), (-1, 1, -1), (-1, -1, -1), (1, -1, -1)]], float)


def _select(pred: jax.Array, a, b):
  """jnp.where over two pytrees of equal structure, ``pred`` a scalar."""
  return jax.tree.map(lambda x, y: jnp.where(pred, x, y), a, b)


def _box_faces(g, dim: jax.Array, idx: jax.Array, direction: jax.Array) -> _Faces:
  """boxNormals: the faces (3 slots) of a box at a corner (dim 1), an edge (2) or a face (3);
  where the feature lies on no single face (a face's or the box's diagonal), the face whose
  normal is within FACE_TOL of ``direction`` (boxNormals2)."""
  dtype = g.pos.dtype
  bits = (jnp.maximum(idx, 0)[:, None] & np.array([1, 2, 4])[None, :]) != 0  # (vertex, axis)

  def shared(n: int) -> jax.Array:
    """+1 on an axis whose bit the first n vertices all set, -1 where none does, else 0."""
    return (jnp.all(bits[:n], axis=0).astype(dtype) - jnp.all(~bits[:n], axis=0).astype(dtype))

  axes = jnp.eye(3, dtype=dtype)
  face_id = lambda s: (2 * np.arange(3) + (s < 0)).astype(jnp.int32)  # +x 0, -x 1, +y 2, ...
  first_only = jnp.array([True, False, False])
  local = _unit(g.mat[0] * direction[0] + g.mat[1] * direction[1] + g.mat[2] * direction[2])
  near = (jnp.asarray(_BOX_NORMALS, dtype) @ local) > FACE_TOL
  k = jnp.argmax(near)
  fallback = _Faces(normal=jnp.zeros((3, 3), dtype).at[0].set(
      _rot(g, jnp.asarray(_BOX_NORMALS, dtype)[k])), ok=first_only & jnp.any(near),
      id=jnp.zeros(3, jnp.int32).at[0].set(k.astype(jnp.int32)))
  # a face: the one axis the three vertices share
  s3 = shared(3)
  k3 = jnp.argmax(s3 != 0)
  one = _Faces(normal=jnp.zeros((3, 3), dtype).at[0].set(_rot(g, axes[k3] * s3[k3])),
               ok=first_only, id=jnp.zeros(3, jnp.int32).at[0].set(face_id(s3)[k3]))
  # an edge: one face (a face's diagonal) or two (an outer edge), in axis order
  s2 = shared(2)
  c2 = jnp.sum(s2 != 0)
  order = jnp.argsort(s2 == 0, stable=True)
  two = _Faces(normal=_rot(g, (axes * s2[:, None])[order]), ok=jnp.arange(3) < c2,
               id=face_id(s2)[order])
  # a corner: its three faces
  s1 = jnp.where(bits[0], 1.0, -1.0).astype(dtype)
  corner = _Faces(normal=_rot(g, axes * s1[:, None]), ok=jnp.ones(3, bool), id=face_id(s1))
  out = _select((dim == 2) & ((c2 == 1) | (c2 == 2)), two, fallback)
  out = _select((dim == 3) & (jnp.sum(s3 != 0) == 1), one, out)
  return _select(dim == 1, corner, out)


def _mesh_faces(g, dim: jax.Array, idx: jax.Array) -> _Faces:
  """meshNormals: the polygons at the feature's first vertex (hull rows ``idx``) that hold the
  whole feature (a face: the first that also holds the other two vertices; an edge: the first
  two holding both), as slots of that vertex's polygon list."""
  hulls = g.hulls
  v = jnp.maximum(idx, 0)
  at1 = hulls.poly[v[0]]
  ok1 = at1 >= 0
  holds = lambda w: ok1 & jnp.any((at1[:, None] == hulls.poly[w][None, :]) & ok1[:, None], axis=1)
  first = lambda mask, n: mask & (jnp.cumsum(mask) <= n)
  edge = first(holds(v[1]), 2)
  face = first(edge & holds(v[2]), 1)
  ok = jnp.where(dim == 3, face, jnp.where(dim == 2, edge, ok1))
  return _Faces(normal=_rot(g, hulls.normal[jnp.maximum(at1, 0)]), ok=ok,
                id=jnp.arange(at1.shape[0], dtype=jnp.int32))


def _cylinder_faces(g, dim: jax.Array, idx: jax.Array) -> _Faces:
  """cylinderNormals: a cap, where the feature is a vertex on it."""
  sgn = jnp.where(idx[0] != 0, -1.0, 1.0).astype(g.pos.dtype)
  return _Faces(normal=(g.mat[:, 2] * sgn)[None], ok=(dim == 1)[None], id=idx[:1])


def _pad(x: jax.Array, n: int) -> jax.Array:
  """x (k, ...) padded to (n, ...) by repeating its last row."""
  return x if x.shape[0] == n else jnp.concatenate([x, jnp.repeat(x[-1:], n - x.shape[0], 0)])


def _faces(kinds: tuple[int, ...], g, dim: jax.Array, idx: jax.Array,
           direction: jax.Array) -> _Faces:
  """The candidate faces of geom ``g`` (one of ``kinds``) at its feature, in one list."""
  per_kind = {}
  if _G.BOX in kinds:
    per_kind[_G.BOX] = _box_faces(g, dim, idx, direction)
  if _G.MESH in kinds:
    per_kind[_G.MESH] = _mesh_faces(g, dim, idx)
  if _G.CYLINDER in kinds:
    per_kind[_G.CYLINDER] = _cylinder_faces(g, dim, idx)
  n = max([f.ok.shape[0] for f in per_kind.values()] + [1])
  out = _Faces(normal=jnp.zeros((n, 3), g.pos.dtype), ok=jnp.zeros(n, bool),
               id=jnp.zeros(n, jnp.int32))
  for kind, f in per_kind.items():
    padded = _Faces(normal=_pad(f.normal, n), ok=jnp.arange(n) < f.ok.shape[0],
                    id=_pad(f.id, n))
    padded = padded._replace(ok=padded.ok & _pad(f.ok, n))
    out = _select(g.kind == kind, padded, out)
  return out


class _Edges(NamedTuple):
  """Candidate edges of one geom from a common ``start`` (3,): unit directions ``dir`` (E, 3),
  other ends ``end`` (E, 3), ``ok`` (E,)."""
  start: jax.Array
  dir: jax.Array
  end: jax.Array
  ok: jax.Array


def _edges_to(start: jax.Array, end: jax.Array, ok: jax.Array) -> _Edges:
  return _Edges(start=start, dir=_unit(end - start[None]), end=end, ok=ok)


def _box_edges(g, dim: jax.Array, idx: jax.Array) -> _Edges:
  """boxEdgeNormals: an edge's one edge (dim 2), or a corner's three."""
  signs = lambda i: jnp.where((jnp.maximum(i, 0) & np.array([1, 2, 4])) != 0, 1.0, -1.0)
  s1 = signs(idx[0]).astype(g.pos.dtype)
  start = _world(g, s1 * g.size)
  flips = 1.0 - 2.0 * np.eye(3)  # the corner with one sign flipped
  corner = _world(g, (s1[None, :] * flips) * g.size[None, :])
  edge = _world(g, signs(idx[1]).astype(g.pos.dtype) * g.size)
  one = jnp.zeros((3, 3), g.pos.dtype).at[0].set(edge)
  end = jnp.where(dim == 2, one, corner)
  ok = jnp.where(dim == 2, jnp.array([True, False, False]), dim == 1)
  return _edges_to(start, end, ok)


def _mesh_edges(g, dim: jax.Array, idx: jax.Array) -> _Edges:
  """meshEdgeNormals: an edge's one edge (dim 2), or the edges from a vertex to the vertex
  before it in each of its polygons (hull rows ``idx``)."""
  hulls = g.hulls
  v = jnp.maximum(idx, 0)
  start = _world(g, hulls.vert[v[0]])
  around = _world(g, hulls.vert[jnp.maximum(hulls.prev[v[0]], 0)])
  one = jnp.zeros_like(around).at[0].set(_world(g, hulls.vert[v[1]]))
  first = jnp.arange(around.shape[0]) == 0
  end = jnp.where(dim == 2, one, around)
  ok = jnp.where(dim == 2, first, (dim == 1) & (hulls.poly[v[0]] >= 0))
  return _edges_to(start, end, ok)


def _cylinder_edges(g, dim: jax.Array, idx: jax.Array, point: jax.Array) -> _Edges:
  """cylinderEdgeNormals: the side line through the feature's vertex ``point`` (3,) (moved
  onto the rim where the margin inflated it), from the cap it touches to the other."""
  sgn = jnp.where(idx[0] != 0, 1.0, -1.0).astype(g.pos.dtype)
  diff = point - g.pos
  l0, l1 = _dot(g.mat[:, 0], diff), _dot(g.mat[:, 1], diff)
  n2 = l0 * l0 + l1 * l1
  ok = n2 >= MINVAL * MINVAL
  scl = jnp.where(ok, g.size[0] / jnp.sqrt(jnp.where(ok, n2, 1.0)), 0.0)
  rim = _world(g, jnp.stack([scl * l0, scl * l1, -sgn * g.size[1]]))
  start = jnp.where(g.half_margin > 0, rim, point)
  axis = g.mat[:, 2] * sgn
  return _Edges(start=start, dir=axis[None], end=(start + axis * (2.0 * g.size[1]))[None],
                ok=((dim == 1) | (dim == 2))[None])


def _cylinder_side(g, normal: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
  """The side line of cylinder ``g`` that the clipping uses once a face of the other geom
  (outward unit ``normal`` (3,)) has been matched with the cylinder's axis: the line deepest
  along -normal, from -size[1] to +size[1] along the axis, wherever GJK/EPA's point lies on
  the cylinder (MuJoCo 4.0.1's mjc_multicontact, read from its machine code; a line through
  that point can clip to two contacts where MuJoCo's, beside the face, clips to none). Returns
  its two ends and whether the normal leaves the axis (else the search is not used)."""
  axis = g.mat[:, 2]
  v = normal - _dot(normal, axis) * axis
  nv2 = _dot(v, v)
  ok = nv2 >= MINVAL * MINVAL
  point = g.pos - v * jnp.where(ok, g.size[0] / jnp.sqrt(jnp.where(ok, nv2, 1.0)), 0.0)
  half = axis * g.size[1]
  return point - half, point + half, ok


def _capsule_edges(g, witness: jax.Array) -> _Edges:
  """capsuleEdgeNormals: the capsule's segment moved out to its witness point (3,)."""
  axis = g.mat[:, 2]
  pr = _dot(witness - g.pos, axis)
  return _Edges(start=witness + axis * (-pr - g.size[1]), dir=axis[None],
                end=(witness + axis * (-pr + g.size[1]))[None], ok=jnp.ones(1, bool))


def _edges(kinds: tuple[int, ...], g, dim: jax.Array, idx: jax.Array,
           point: jax.Array, witness: jax.Array) -> _Edges:
  """The candidate edges of geom ``g`` (one of ``kinds``) at its feature, in one list."""
  per_kind = {}
  if _G.BOX in kinds:
    per_kind[_G.BOX] = _box_edges(g, dim, idx)
  if _G.MESH in kinds:
    per_kind[_G.MESH] = _mesh_edges(g, dim, idx)
  if _G.CYLINDER in kinds:
    per_kind[_G.CYLINDER] = _cylinder_edges(g, dim, idx, point)
  if _G.CAPSULE in kinds:
    per_kind[_G.CAPSULE] = _capsule_edges(g, witness)
  n = max([e.ok.shape[0] for e in per_kind.values()] + [1])
  out = _Edges(start=jnp.zeros(3, g.pos.dtype), dir=jnp.zeros((n, 3), g.pos.dtype),
               end=jnp.zeros((n, 3), g.pos.dtype), ok=jnp.zeros(n, bool))
  for kind, e in per_kind.items():
    k = e.ok.shape[0]
    padded = _Edges(start=e.start, dir=_pad(e.dir, n), end=_pad(e.end, n),
                    ok=(jnp.arange(n) < k) & _pad(e.ok, n))
    out = _select(g.kind == kind, padded, out)
  return out


#------------------------------------ face recovery ------------------------------------------------

def _face(kinds: tuple[int, ...], g, v: jax.Array, face_id: jax.Array, size: int
          ) -> tuple[jax.Array, jax.Array]:
  """The vertices (size, 3) and vertex count of the face ``face_id`` of geom ``g`` (a mesh's
  slot at its feature's first vertex ``v``): boxFace, meshFace, cylinderFace."""
  dtype = g.pos.dtype
  pts, count = jnp.zeros((size, 3), dtype), jnp.array(0, jnp.int32)
  if _G.BOX in kinds:
    corners = _xworld(g, jnp.asarray(_BOX_FACES, dtype)[jnp.clip(face_id, 0, 5)] * g.size[None])
    box = jnp.zeros((size, 3), dtype).at[:4].set(corners)
    pts, count = _select(g.kind == _G.BOX, (box, jnp.array(4, jnp.int32)), (pts, count))
  if _G.MESH in kinds:
    polygon = jnp.maximum(g.hulls.poly[jnp.maximum(v, 0), face_id], 0)
    loop = g.hulls.loop[polygon]
    mesh = jnp.zeros((size, 3), dtype).at[:loop.shape[0]].set(_xworld(g, g.hulls.vert[loop]))
    pts, count = _select(g.kind == _G.MESH, (mesh, g.hulls.nloop[polygon]), (pts, count))
  if _G.CYLINDER in kinds:
    # the rim in the geom's frame, (r cos, -r sin) on the top cap, mirrored in y on the bottom
    sgn = jnp.where(face_id != 0, -1.0, 1.0).astype(dtype)
    radius = g.size[0]
    local = jnp.stack([_mul(radius, jnp.asarray(_CYL_COS, dtype)),
                       sgn * _mul(radius, -jnp.asarray(_CYL_SIN, dtype)),
                       jnp.broadcast_to(sgn * g.size[1], (NCYL,))], axis=-1)
    rim = _xworld(g, local)
    cyl = jnp.zeros((size, 3), dtype).at[:NCYL].set(rim)
    pts, count = _select(g.kind == _G.CYLINDER, (cyl, jnp.array(NCYL, jnp.int32)),
                         (pts, count))
  return pts, count


def face_size(kinds: tuple[int, ...], hulls: Hulls | None) -> int:
  """The most vertices a face of these geom kinds has (an edge: 2)."""
  sizes = [2]
  if _G.BOX in kinds:
    sizes.append(4)
  if _G.CYLINDER in kinds:
    sizes.append(NCYL)
  if _G.MESH in kinds and hulls is not None:
    sizes.append(hulls.loop.shape[-1])
  return max(sizes)


#------------------------------------ clipping -----------------------------------------------------

def _area4(a: jax.Array, b: jax.Array, c: jax.Array, d: jax.Array) -> jax.Array:
  """area4: half the norm of (a - c) x (b - d), rounded as MuJoCo does."""
  e = _xcross(a - c, b - d)
  return 0.5 * jnp.sqrt(_xdot(e, e))


class _Quad(NamedTuple):
  q: jax.Array      # (4,) the corners a, b, c, d being moved
  m: jax.Array      # the largest area so far
  res: jax.Array    # (4,) the corners of that area
  phase: jax.Array  # which corner moves next: _ADVANCE_D, _ADVANCE_C or _ADVANCE_B
  steps: jax.Array
  done: jax.Array


_ADVANCE_D, _ADVANCE_C, _ADVANCE_B = 0, 1, 2
_MOVED = np.array([3, 2, 1], np.int32)  # the corner each phase moves


def _polygon_quad(pts: jax.Array, n: jax.Array, run: jax.Array) -> jax.Array:
  """polygonQuad: the positions (4,) of a quadrilateral of large area among the first n > 4
  vertices of a convex polygon (N, 3), by MuJoCo's rotating search (no derivatives); (0, 1, 2,
  3) where not ``run``.

  MuJoCo's three nested loops (for each corner a: move d while the area grows, and after each
  move of d, c and then b while it grows) run here as one loop over their steps, each of which
  tries one move: under vmap a batch then takes as many steps as its longest search, not the
  sum over every loop of its longest iteration count. Every step compares the area it computes
  with the best so far and keeps that same value, as MuJoCo does, so the areas only grow and
  the search ends; the step cap only guards against rounding that never settles."""
  pts = jax.lax.stop_gradient(pts)
  area = lambda q: _area4(pts[q[0]], pts[q[1]], pts[q[2]], pts[q[3]])
  nxt = lambda i: jnp.where(i + 1 < n, i + 1, 0)

  def step(s: _Quad) -> _Quad:
    slot = jnp.asarray(_MOVED)[s.phase]
    trial = s.q.at[slot].set(nxt(s.q[slot]))
    m_next = area(trial)
    grow = m_next > s.m
    # on growth: d's move is followed by c's, c and b keep moving; else c's loop hands over to
    # b's, b's back to d's, and d's ends corner a: b, c and d step off a collision, a moves on
    after_fail = jnp.where(s.phase == _ADVANCE_C, _ADVANCE_B, _ADVANCE_D)
    a, b, c, d = s.q[0], s.q[1], s.q[2], s.q[3]
    b_hit = b == a
    b = jnp.where(b_hit, nxt(b), b)
    c_hit = b_hit & (c == b)
    c = jnp.where(c_hit, nxt(c), c)
    d = jnp.where(c_hit & (d == c), nxt(d), d)
    next_a = jnp.stack([a + 1, b, c, d])
    end_a = ~grow & (s.phase == _ADVANCE_D)
    return _Quad(
        q=jnp.where(grow, trial, jnp.where(end_a, next_a, s.q)),
        m=jnp.where(grow, m_next, s.m), res=jnp.where(grow, trial, s.res),
        phase=jnp.where(grow, jnp.where(s.phase == _ADVANCE_D, _ADVANCE_C, s.phase),
                        after_fail).astype(jnp.int32),
        steps=s.steps + 1, done=end_a & (a + 1 >= n))

  q0 = jnp.arange(4, dtype=jnp.int32)
  cap = 4 * pts.shape[0] * pts.shape[0]
  init = _Quad(q=q0, m=area(q0), res=q0, phase=jnp.array(_ADVANCE_D, jnp.int32),
               steps=jnp.array(0, jnp.int32), done=~run)
  out = jax.lax.while_loop(lambda s: ~s.done & (s.steps < cap), step, init)
  return jnp.where(run, out.res, q0)


def _compact(pts: jax.Array, keep: jax.Array, size: int) -> tuple[jax.Array, jax.Array]:
  """The points (M, 3) where ``keep`` (M,), in order, in an array of ``size``, and their count."""
  # a gather, not a scatter (XLA CPU runs each scatter as a loop of its own): the j-th kept
  # point is the one with j kept points before it, as many as the ranks up to j, found by a
  # binary search (comparing every rank with every j costs size x M: 32k for a mesh polygon
  # of 64 vertices, in each of the clipping's 64 steps)
  rank = jnp.cumsum(keep.astype(jnp.int32))
  src = jnp.searchsorted(rank, np.arange(size, dtype=np.int32), side="right",
                         method="scan_unrolled").astype(jnp.int32)
  count = jnp.minimum(rank[-1], size)
  kept = pts[jnp.minimum(src, len(keep) - 1)]
  return jnp.where((np.arange(size) < count)[:, None], kept, 0.0), count


def _polygon_clip(clipper: jax.Array, nclipper: jax.Array, poly: jax.Array, npoly: jax.Array,
                  n: jax.Array, wit_dir: jax.Array, margin: jax.Array
                  ) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
  """polygonClip: the polygon ``poly`` (F, 3) of ``npoly`` vertices clipped by the edges of the
  face ``clipper`` (F, 3) of ``nclipper`` vertices, whose outward unit normal is ``n`` (3,);
  vertices more than ``margin`` above the face dropped, at most four kept. Returns their
  number, their projections on the face (4, 3), the points (4, 3) the face's projections reach
  along ``wit_dir`` (3,) from them, and those distances (4,)."""
  f = clipper.shape[0]
  size = 2 * f
  nxt = jnp.where(jnp.arange(f) + 1 < nclipper, jnp.arange(f) + 1, 0)
  a = clipper
  # planeNormal: the unit normals of the planes through the edges, perpendicular to the face
  pn = _xcross(a[nxt] - a, (a + n[None]) - a)
  norm = jnp.sqrt(_xdot(pn, pn))
  tiny = norm < MINVAL  # mju_normalize3: (1, 0, 0)
  pn = jnp.where(tiny[:, None], jnp.asarray([1.0, 0.0, 0.0], pn.dtype)[None],
                 _mul(pn, (1.0 / jnp.where(tiny, 1.0, norm))[:, None]))
  pts = jnp.zeros((size, 3), poly.dtype).at[:f].set(poly)
  count = npoly.astype(jnp.int32)
  ids = jnp.arange(size)

  # one edge a step: unrolled over a cylinder cap's 16 edges, the clipping was 60% of a
  # cylinder pair's program (compile time) and, with a scatter in each copy, most of its run
  def clip(e, state):
    pts, count = state
    # MuJoCo 4.0's halfspace test and crossing: P inside where its distance d1 to the plane
    # exceeds -mjMINVAL, PQ crossing at t = d1 / (d1 - d2) where that lies in [0, 1]
    nxt_id = (ids + 1) % jnp.maximum(count, 1)
    q = pts[nxt_id]
    d1 = _xdot(pts - a[e][None], pn[e][None])
    d2 = d1[nxt_id]
    in1, in2 = d1 > -MINVAL, d2 > -MINVAL
    den = d1 - d2
    par = den == 0
    t = d1 / jnp.where(par, 1.0, den)
    hit = (in1 != in2) & ~par & (t >= 0.0) & (t <= 1.0)
    x = pts + _mul(jnp.where(hit, t, 0.0)[:, None], q - pts)
    live = ids < count
    cand = jnp.stack([x, q], axis=1).reshape(-1, 3)
    keep = jnp.stack([live & hit, live & in2], axis=1).reshape(-1)
    clipped, ncl = _compact(cand, keep, size)
    active = e < nclipper
    return jnp.where(active, clipped, pts), jnp.where(active, ncl, count)

  pts, count = jax.lax.fori_loop(0, f, clip, (pts, count))
  # drop what lies farther than the margin above the face
  above = _xdot(pts - a[0][None], n[None])
  pts, count = _compact(pts, (ids < count) & (above <= margin), size)
  # an edge clipped: its two farthest points; more than four: polygonQuad's; else all
  diff = pts[:, None, :] - pts[None, :, :]
  d2 = jnp.where((ids[:, None] < ids[None, :]) & (ids[None, :] < count),
                 _xdot(diff, diff), -1.0)
  best = jnp.argmax(d2.reshape(-1))
  far = jnp.where(jnp.max(d2) > 0, jnp.stack([best // size, best % size]), jnp.array([0, 1]))
  far = jnp.concatenate([far, far]).astype(jnp.int32)
  edge = (npoly == 2) & (count > 2)
  quad = _polygon_quad(pts, count, ~edge & (count > 4))
  pick = jnp.where(edge, far, quad)
  num = jnp.where(edge, 2, jnp.minimum(count, 4))
  v = pts[pick]
  w1 = v - _mul(_xdot(v - a[0][None], n[None])[:, None], n[None])
  dist = _xdot(w1 - v, wit_dir[None])
  w2 = w1 - _mul(dist[:, None], wit_dir[None])
  return num, w1, w2, dist


#------------------------------------ the search ---------------------------------------------------

def _first_pair(ok: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
  """Whether ``ok`` (R, C) holds, and the first (row, column) where it does, row-major."""
  flat = jnp.argmax(ok.reshape(-1))
  return jnp.any(ok), flat // ok.shape[1], flat % ok.shape[1]


def multicontact(kinds: tuple[tuple[int, ...], tuple[int, ...]], g1, g2, dirs: jax.Array,
                 pts1: jax.Array, pts2: jax.Array, x1: jax.Array, x2: jax.Array
                 ) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
  """mjc_multicontact for geoms ``g1``, ``g2`` (``collision_convex.Geom``, their kinds among
  ``kinds``) from the polytope face (or GJK simplex) that GJK/EPA ended on: the directions
  ``dirs`` (3, 3) its support points were taken in (geom 2 took their negatives), the support
  points ``pts1``, ``pts2`` (3, 3) on each geom, and the contact's witness points ``x1``, ``x2``
  (3,). Returns the number of contacts n (1 where the search finds no more: then the first is
  x1, x2), witness points on geom 1 and geom 2 (4, 3) and their distances (4,) without the
  margin (where n > 1)."""
  sg = jax.lax.stop_gradient
  frozen1, frozen2 = g1._replace(mat=sg(g1.mat)), g2._replace(mat=sg(g2.mat))
  i1 = jax.vmap(lambda d: vertex_index(kinds[0], frozen1, d))(sg(dirs))
  i2 = jax.vmap(lambda d: vertex_index(kinds[1], frozen2, -d))(sg(dirs))
  dim1, i1, pts1 = _feature_dim(i1, pts1)
  dim2, i2, pts2 = _feature_dim(i2, pts2)
  direction = x2 - x1
  f1 = _faces(kinds[0], g1, dim1, i1, -direction)
  f2 = _faces(kinds[1], g2, dim2, i2, direction)

  # alignedFaces: the faces most opposed, within FACE_TOL, each facing the other geom
  tol = EDGE_TOL * safe_norm(direction)
  ok = ((f1.ok & (_dot(f1.normal, direction) < -tol))[:, None]
        & (f2.ok & (_dot(f2.normal, direction) > tol))[None, :])
  cos = jnp.where(ok, f1.normal @ f2.normal.T, jnp.inf)
  flat = jnp.argmin(cos.reshape(-1))
  aligned = jnp.min(cos) < -FACE_TOL
  fi, fj = flat // cos.shape[1], flat % cos.shape[1]

  # else an edge of the lower-dimensional feature lying in one of the other geom's faces
  e1 = _edges(kinds[0], g1, dim1, i1, pts1[0], x1)
  e2 = _edges(kinds[1], g2, dim2, i2, pts2[0], x2)
  has1, has2 = jnp.any(f1.ok), jnp.any(f2.ok)
  try1 = ~aligned & (dim1 < 3) & has2 & ((dim1 <= dim2) | ~has1)

  def in_face(e: _Edges, f: _Faces, toward: jax.Array):
    """alignedFaceEdge: the first face facing ``toward`` with an edge in it (face-major)."""
    lie = ((f.ok & (_dot(f.normal, toward) > MINVAL))[:, None] & e.ok[None, :]
           & (jnp.abs(f.normal @ e.dir.T) < EDGE_TOL))
    found, face, edge = _first_pair(lie)
    return found, edge, face
  found1, ei1, fj1 = in_face(e1, f2, direction)
  found2, ei2, fj2 = in_face(e2, f1, -direction)
  edge1 = try1 & found1
  edge2 = ~aligned & ~edge1 & (dim2 < 3) & found2
  run = aligned | edge1 | edge2

  # the matched faces or face and edge
  size = max(face_size(kinds[0], g1.hulls), face_size(kinds[1], g2.hulls))
  face1, n1 = _face(kinds[0], g1, i1[0], jnp.where(edge2, f1.id[fj2], f1.id[fi]), size)
  face2, n2 = _face(kinds[1], g2, i2[0], jnp.where(edge1, f2.id[fj1], f2.id[fj]), size)
  def seg(g, ks, others, e: _Edges, k, normal):
    """The matched edge as a 2-gon; a cylinder's side line follows the matched face (where
    the other geom can have one)."""
    a, b, ok = e.start, e.end[k], None
    if _G.CYLINDER in ks and any(o in FACE_KINDS for o in others):
      c0, c1, c_ok = _cylinder_side(g, normal)
      cyl = g.kind == _G.CYLINDER
      a, b, ok = jnp.where(cyl, c0, a), jnp.where(cyl, c1, b), ~cyl | c_ok
    return jnp.zeros((size, 3), e.end.dtype).at[0].set(a).at[1].set(b), ok
  seg1, ok1 = seg(g1, kinds[0], kinds[1], e1, ei1, f2.normal[fj1])
  seg2, ok2 = seg(g2, kinds[1], kinds[0], e2, ei2, f1.normal[fj2])
  clipper = jnp.where(edge1, face2, face1)
  nclipper = jnp.where(edge1, n2, n1)
  poly = jnp.where(edge1, seg1, jnp.where(edge2, seg2, face2))
  npoly = jnp.where(edge1 | edge2, 2, n2)
  normal1, normal2 = f1.normal[jnp.where(edge2, fj2, fi)], f2.normal[jnp.where(edge1, fj1, fj)]
  n = jnp.where(edge1, normal2, normal1)
  wit_dir = jnp.where(edge1, -normal2, jnp.where(edge2, -normal1, normal2))
  normal = jnp.where(edge2, normal1, -normal2)
  # what is left of the margin (a capsule's witness already carries its share)
  m1 = jnp.where(g1.kind == _G.CAPSULE, 0.0, g1.half_margin)
  m2 = jnp.where(g2.kind == _G.CAPSULE, 0.0, g2.half_margin)
  count, wa, wb, dist = _polygon_clip(clipper, nclipper, poly, npoly, n, wit_dir, m1 + m2)
  w1, w2 = jnp.where(edge1, wb, wa), jnp.where(edge1, wa, wb)
  w1, w2 = w1 + m1 * normal[None], w2 - m2 * normal[None]
  dist = dist - (m1 + m2)

  usable = jnp.ones((), bool)
  for g, ks in ((g1, kinds[0]), (g2, kinds[1])):
    if _G.MESH in ks:
      usable = usable & ((g.kind != _G.MESH) | (g.hulls.polynum[g.mesh] > 0))
  for edge, ok in ((edge1, ok1), (edge2, ok2)):
    if ok is not None:  # a cylinder's side line needs the face normal off its axis
      usable = usable & (~edge | ok)
  done = run & usable & (count >= 1)
  first = lambda x, w: jnp.where(done, w, jnp.zeros_like(w).at[0].set(x))
  return jnp.where(done, count, 1), first(x1, w1), first(x2, w2), dist
