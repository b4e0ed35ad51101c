"""Convex collision of the geom pairs MuJoCo 4.0 sends to ``mjc_Convex`` with its native CCD
(``engine_collision_convex.c``, ``engine_collision_gjk.c``): a sphere, capsule, ellipsoid,
cylinder or box against an ellipsoid, and a sphere or an ellipsoid against a mesh, with one
contact (``contact_pairs.CONVEX``); the pairs of capsules, cylinders, boxes and meshes
(``contact_pairs.MULTI``), whose first contact MuJoCo's multi-contact search
(``flexor.collision_multi``) completes unless the model disables multiccd; and, for
``flexor.collision_hfield``, a height field's prisms against every convex geom.

``mjc_ccd`` first runs GJK on the Minkowski difference of the two geoms. A sphere shrinks to its
centre and a capsule to its segment; if those cores stay farther apart than ``ccd_tolerance``,
the contact is the cores' closest points pushed out by the radii. Otherwise GJK runs on the full
geoms (each inflated by half the margin) until a support plane separates them or a simplex
encloses the origin, and EPA grows that simplex into a polytope until the upper bound of its
nearest face is within ``ccd_tolerance`` of the face: the face's point gives the depth, the
normal and the two witness points.

This follows the 4.0 machine code where it departs from the 3.12 sources: GJK has no
``gjkIntersect`` fallback, and EPA stops on the current iteration's upper bound (3.12: the
smallest so far) and drops a first face whose smallest bound lies more than the tolerance (3.12:
1e-10) below it. Its polytope3 (GJK's triangle) requires both new apexes off the triangle's
plane, rebuilds the double pyramid around another equator (recoverHexa), or a tetrahedron, where
the segment between the apexes misses the triangle, centres it on all its vertices, and requires
the origin inside it (within the tolerance).

The loops (``lax.while_loop``) follow the C code step by step on values without derivatives and
record the direction in which each support point was taken. The result (the final simplex or
EPA face) keeps the search's values, and takes its derivatives from the support points evaluated
again in those directions (an evaluation of its own could pick another point where a direction
is normal to an edge or a face, and jit's fused arithmetic rounds differently): the support points
move with the geoms, so d(dist) is the exact derivative of the depth at a fixed feature (for
curved surfaces the envelope theorem makes it the derivative of the true depth), and d(pos),
d(frame) follow the feature. Every division is guarded so gradients stay finite.

Polytope faces live in fixed arrays (6 * ccd_iterations faces). MuJoCo keeps the faces that can
still be nearest in a map whose order changes with every deletion; here a flag marks them and
the nearest is the lowest face index, which differs from MuJoCo only where two faces are at
exactly the same distance.
"""
from __future__ import annotations

from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from flexor import collision_multi
from flexor.collision_primitive import Contacts, Hulls, _Contact, _dot, _finish, hull_support
from flexor.math import cross as _cross, materialize
from flexor.mjcf.contact_pairs import CONVEX, MULTI
from flexor.types import GeomType

_G = GeomType
MINVAL = 1e-15
_MINVAL2 = MINVAL * MINVAL
_MAXVAL2 = 1e10 * 1e10
_MINDIST = _MINVAL2  # mjMINDIST2/3/4 in double precision
_POINT, _LINE = -1, -2  # the cores of a sphere and a capsule
_HORIZON = 24  # MuJoCo's horizon buffer holds 24 edges

# Components of a vertex (..., 4, 3): the Minkowski difference point, the support points on
# geom 1 and geom 2, and the direction (for geom 1; geom 2 took its negative).
_V, _A, _B, _D = 0, 1, 2, 3


class Geom(NamedTuple):
  """One geom as the CCD sees it. ``kind`` () is its GeomType, or _POINT / _LINE for the core of
  a sphere / capsule; ``vert`` (6, 3) a height field prism's vertices (else unused); ``mesh``
  () int32 a mesh's id (else unused); ``half_margin`` () the inflation MuJoCo adds to every
  support point; ``hulls`` the model's hull tables where a geom may be a mesh. The tables are
  shared, never batched: code that maps over a Geom's fields leaves them out (``_fields``).
  The kinds a geom may have are a static tuple passed beside it: one kernel serves every type
  pair of a model, so compile time does not grow with the number of type pairs."""
  kind: jax.Array
  pos: jax.Array
  mat: jax.Array
  size: jax.Array
  vert: jax.Array
  mesh: jax.Array
  half_margin: jax.Array
  hulls: Hulls | None = None


def _fields(g: Geom) -> Geom:
  """The geom without its shared tables: what may be stacked, selected or batched."""
  return g._replace(hulls=None)


def _det3(a: jax.Array, b: jax.Array, c: jax.Array) -> jax.Array:
  return (a[..., 0] * (b[..., 1] * c[..., 2] - b[..., 2] * c[..., 1])
          + a[..., 1] * (b[..., 2] * c[..., 0] - b[..., 0] * c[..., 2])
          + a[..., 2] * (b[..., 0] * c[..., 1] - b[..., 1] * c[..., 0]))


def _safe(x: jax.Array, ok: jax.Array) -> jax.Array:
  return jnp.where(ok, x, 1.0)


def _norm(v: jax.Array) -> jax.Array:
  n2 = _dot(v, v)
  return jnp.where(n2 > 0, jnp.sqrt(_safe(n2, n2 > 0)), 0.0)


def _local_to_global(mat: jax.Array, local: jax.Array, pos: jax.Array) -> jax.Array:
  return (mat[:, 0] * local[0] + mat[:, 1] * local[1] + mat[:, 2] * local[2]) + pos


#------------------------------------ support functions --------------------------------------------

def _kind_support(kind: int, g: Geom, d: jax.Array, local: jax.Array) -> jax.Array:
  """mjc_*Support of one geom kind: the point farthest along unit direction ``d`` (3,), given
  ``local`` (3,), d in the geom's frame."""
  mat, pos, size = g.mat, g.pos, g.size
  if kind == _POINT:
    return pos
  if kind == _LINE:
    scl = jnp.where(_dot(mat[:, 2], d) >= 0, size[1], -size[1])
    return mat[:, 2] * scl + pos
  if kind == _G.SPHERE:
    return size[0] * d + pos
  if kind == _G.CAPSULE:
    loc = local * size[0]
    loc = loc.at[2].add(jnp.where(local[2] >= 0, size[1], -size[1]))
    return _local_to_global(mat, loc, pos)
  if kind == _G.ELLIPSOID:
    loc = local * size
    n2 = _dot(loc, loc)
    small = n2 < _MINVAL2
    loc = loc * ((1 / jnp.sqrt(_safe(n2, ~small))) * size)
    return jnp.where(small, mat[:, 0] * size[0] + pos, _local_to_global(mat, loc, pos))
  if kind == _G.CYLINDER:
    n2 = local[0] * local[0] + local[1] * local[1]
    ok = n2 >= _MINVAL2
    scl = jnp.where(ok, size[0] / jnp.sqrt(_safe(n2, ok)), 0.0)
    loc = jnp.stack([scl * local[0], scl * local[1], jnp.where(local[2] >= 0, size[1], -size[1])])
    return _local_to_global(mat, loc, pos)
  if kind == _G.BOX:
    return _local_to_global(mat, jnp.where(local >= 0, size, -size), pos)
  if kind == _G.MESH:
    return _local_to_global(mat, g.hulls.vert[hull_support(g.hulls, g.mesh, local)], pos)
  if kind == _G.HFIELD:
    # mjc_prism_support: a height field prism (vert (6, 3): bottom then top triangle) lives in
    # the frame the search runs in; the first best of its bottom (d_z < 0) or top vertices
    tri = jnp.where(d[2] < 0, g.vert[:3], g.vert[3:])
    t, u = jax.lax.stop_gradient(tri), jax.lax.stop_gradient(d)
    return tri[jnp.argmax(t[:, 0] * u[0] + t[:, 1] * u[1] + t[:, 2] * u[2])]
  raise ValueError(f"no support function for geom type {kind}")


def _support_point(g: Geom, d: jax.Array, kinds: tuple[int, ...]) -> jax.Array:
  """The point of geom ``g`` (one of ``kinds``) farthest along unit direction ``d`` (3,), plus
  the margin's inflation."""
  # mulMatTVec3's left-to-right sums (a matmul's order would move the last bits)
  local = g.mat[0] * d[0] + g.mat[1] * d[1] + g.mat[2] * d[2]
  res = _kind_support(kinds[0], g, d, local)
  for kind in kinds[1:]:
    res = jnp.where(g.kind == kind, _kind_support(kind, g, d, local), res)
  return res + g.half_margin * d


Kinds = tuple[tuple[int, ...], tuple[int, ...]]
Support = Callable[[jax.Array], jax.Array]


def _support(g1: Geom, g2: Geom, kinds: Kinds) -> Support:
  """d (3,) -> the vertex (4, 3) of the Minkowski difference in direction d (geom 2 takes -d)."""
  def sup(d: jax.Array) -> jax.Array:
    a, b = _support_point(g1, d, kinds[0]), _support_point(g2, -d, kinds[1])
    return jnp.stack([a - b, a, b, d])
  return sup


def _unit_support(sup: Support, d: jax.Array, dnorm: jax.Array) -> jax.Array:
  """epaSupport: the vertex in direction d / dnorm, or (1, 0, 0) where dnorm is tiny."""
  ok = dnorm > MINVAL
  unit = jnp.where(ok, d / _safe(dnorm, ok), jnp.array([1.0, 0.0, 0.0], d.dtype))
  return sup(unit)


#------------------------------------ GJK's distance subalgorithm ----------------------------------

def _same_sign(a: jax.Array, b: jax.Array) -> jax.Array:
  return ((a > 0) & (b > 0)) | ((a < 0) & (b < 0))


def _project_origin_plane(v1: jax.Array, v2: jax.Array, v3: jax.Array
                          ) -> tuple[jax.Array, jax.Array]:
  """The origin projected on the plane through v1, v2, v3, and whether that failed
  (projectOriginPlane returning 1)."""
  d21, d31, d32 = v2 - v1, v3 - v1, v3 - v2
  cands = [(_cross(d32, d21), v2), (_cross(d21, d31), v1), (_cross(d31, d32), v3)]
  res, fail, done = jnp.zeros(3, v1.dtype), jnp.array(False), jnp.array(False)
  for i, (n, v) in enumerate(cands):
    nv, nn = _dot(n, v), _dot(n, n)
    take = (nv != 0) & (nn > MINVAL) if i < 2 else jnp.array(True)
    here = ~done & take
    res = jnp.where(here, n * (nv / _safe(nn, nn != 0)), res)
    if i < 2:
      fail = fail | (~done & (nn == 0))
      done = done | (nn == 0) | take
  return res, fail


def _s1d(s1: jax.Array, s2: jax.Array) -> jax.Array:
  """Barycentric coordinates (2,) of the segment's point nearest to the origin."""
  diff = s2 - s1
  dd = _dot(diff, diff)
  p = s2 - (_dot(s2, diff) / _safe(dd, dd != 0)) * diff
  mu = s1 - s2
  # the axis where the segment's shadow is longest; selects, not indexing, keep the program small
  a1 = jnp.abs(mu[1]) >= jnp.abs(mu[0])
  a2 = jnp.abs(mu[2]) >= jnp.abs(jnp.where(a1, mu[1], mu[0]))
  pick = lambda v: jnp.where(a2, v[2], jnp.where(a1, v[1], v[0]))
  mu_max = pick(mu)
  c1, c2 = pick(p) - pick(s2), pick(s1) - pick(p)
  same = _same_sign(mu_max, c1) & _same_sign(mu_max, c2)
  inv = _safe(mu_max, same)
  return jnp.stack([jnp.where(same, c1 / inv, 0.0), jnp.where(same, c2 / inv, 1.0)])


def _best_sub(bad: jax.Array, lam: jax.Array, d2: jax.Array) -> jax.Array:
  """S2D/S3D's fallback: among the sub-simplices whose sign test failed (``bad`` (m,)), the one
  whose nearest point is closest; ``lam`` (m, n) their coordinates, ``d2`` (m,) their squared
  distances; the first bad one always wins."""
  out, dmin, first = jnp.zeros(lam.shape[1], lam.dtype), jnp.array(jnp.inf), jnp.array(True)
  for k in range(lam.shape[0]):
    take = bad[k] & (first | (d2[k] < dmin))
    out = jnp.where(take, lam[k], out)
    dmin = jnp.where(take, d2[k], dmin)
    first = first & ~bad[k]
  return out


def _areas(v1: jax.Array, v2: jax.Array, v3: jax.Array, p: jax.Array
           ) -> tuple[jax.Array, jax.Array]:
  """Signed areas (3,) of (p, v2, v3), (p, v3, v1), (p, v1, v2) and of (v1, v2, v3), projected
  on the coordinate plane where the triangle's shadow is largest (S2D's and triAffineCoord's
  C31, C32, C33 and M_max)."""
  m14 = v2[1]*v3[2] - v2[2]*v3[1] - v1[1]*v3[2] + v1[2]*v3[1] + v1[1]*v2[2] - v1[2]*v2[1]
  m24 = v2[0]*v3[2] - v2[2]*v3[0] - v1[0]*v3[2] + v1[2]*v3[0] + v1[0]*v2[2] - v1[2]*v2[0]
  m34 = v2[0]*v3[1] - v2[1]*v3[0] - v1[0]*v3[1] + v1[1]*v3[0] + v1[0]*v2[1] - v1[1]*v2[0]
  mu1, mu2, mu3 = jnp.abs(m14), jnp.abs(m24), jnp.abs(m34)
  first = (mu1 >= mu2) & (mu1 >= mu3)
  second = ~first & (mu2 >= mu3)
  m_max = jnp.where(first, m14, jnp.where(second, m24, m34))
  # the two coordinates kept, (x, y) = (1, 2), (0, 2) or (0, 1), for p, v1, v2, v3 at once
  pts = jnp.stack([p, v1, v2, v3])
  px, x1, x2, x3 = jnp.where(first, pts[:, 1], pts[:, 0])
  py, y1, y2, y3 = jnp.where(first | second, pts[:, 2], pts[:, 1])

  def area(ux, uy, wx, wy):
    return px*uy + py*wx + ux*wy - px*wy - py*ux - wx*uy
  return jnp.stack([area(x2, y2, x3, y3), area(x3, y3, x1, y1), area(x1, y1, x2, y2)]), m_max


def _s2d(s1: jax.Array, s2: jax.Array, s3: jax.Array) -> tuple[jax.Array, jax.Array]:
  """Barycentric coordinates (3,) of the triangle's point nearest to the origin, and those (2,)
  of edge (s1, s2)'s nearest point. The three edges run as one batch to keep the program small
  (compile time grows with its size)."""
  p, fail = _project_origin_plane(s1, s2, s3)
  c, m_max = _areas(s1, s2, s3, p)
  comp = _same_sign(m_max, c)
  inside = comp[0] & comp[1] & comp[2]
  lam_in = c / _safe(m_max, m_max != 0)
  sv = jnp.stack([s1, s2, s3])
  i, j = np.array([1, 0, 0]), np.array([2, 2, 1])
  sub = jax.vmap(_s1d)(sv[i], sv[j])
  pt = sub[:, :1] * sv[i] + sub[:, 1:] * sv[j]
  rows = np.arange(3)
  lam = jnp.zeros((3, 3), s1.dtype).at[rows, i].set(sub[:, 0]).at[rows, j].set(sub[:, 1])
  lam = jnp.where(inside, lam_in, _best_sub(~comp, lam, _dot(pt, pt)))
  edge = sub[2]
  return jnp.where(fail, jnp.concatenate([edge, jnp.zeros(1, s1.dtype)]), lam), edge


def _s3d(s: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
  """Barycentric coordinates (4,) of the tetrahedron s (4, 3)'s point nearest to the origin,
  and, from the same batch of faces, those (3,) of triangle (s0, s1, s2) and (2,) of edge
  (s0, s1)."""
  s1, s2, s3, s4 = s[0], s[1], s[2], s[3]
  c = jnp.stack([-_det3(s2, s3, s4), _det3(s1, s3, s4), -_det3(s1, s2, s4), _det3(s1, s2, s3)])
  m_det = ((c[0] + c[1]) + c[2]) + c[3]
  comp = _same_sign(m_det, c)
  inside = comp[0] & comp[1] & comp[2] & comp[3]
  lam_in = c / _safe(m_det, m_det != 0)
  keep = np.array([(1, 2, 3), (0, 2, 3), (0, 1, 3), (0, 1, 2)])
  tri = s[keep]
  sub, edge = jax.vmap(_s2d)(tri[:, 0], tri[:, 1], tri[:, 2])
  pt = (sub[:, :1] * tri[:, 0] + sub[:, 1:2] * tri[:, 1]) + sub[:, 2:] * tri[:, 2]
  lam = jnp.zeros((4, 4), s.dtype).at[np.arange(4)[:, None], keep].set(sub)
  return jnp.where(inside, lam_in, _best_sub(~comp, lam, _dot(pt, pt))), sub[3], edge[3]


def _subdistance(n: jax.Array, s: jax.Array) -> jax.Array:
  """Barycentric coordinates (4,) of the point of the n-simplex s (4, 3) nearest the origin."""
  zero = jnp.zeros(1, s.dtype)
  lam4, lam3, lam2 = _s3d(s)
  return jnp.select(
      [n == 4, n == 3, n == 2],
      [lam4, jnp.concatenate([lam3, zero]), jnp.concatenate([lam2, zero, zero])],
      jnp.array([1.0, 0.0, 0.0, 0.0], s.dtype))


def _lincomb(lam: jax.Array, n: jax.Array, pts: jax.Array) -> jax.Array:
  """sum_{i<n} lam_i pts_i, (3,) from pts (4, 3)."""
  w = jnp.where(jnp.arange(4) < n, lam, 0.0)
  return ((w[0] * pts[0] + w[1] * pts[1]) + w[2] * pts[2]) + w[3] * pts[3]


#------------------------------------ GJK -----------------------------------------------------------

_RUN, _DONE, _SEP = 0, 1, 2


class _Gjk(NamedTuple):
  simplex: jax.Array  # (4, 4, 3) vertices
  n: jax.Array
  k: jax.Array
  x: jax.Array
  xn: jax.Array
  xn_prev: jax.Array
  lam: jax.Array
  mode: jax.Array


def _gjk_loop(sup: Support, st: _Gjk, kmax: int, tol: jax.Array, cutoff: jax.Array,
              discrete: jax.Array) -> _Gjk:
  """GJK's main loop (``gjk`` up to its exits). Between two ``discrete`` geoms (polytopes: see
  ``_discrete``) the search converges in finitely many steps, so it runs to the exact nearest
  point rather than stopping within ``tol``."""
  eps = jnp.where(discrete, 0.0, 0.5 * tol * tol)
  min_norm = jnp.where(discrete, MINVAL, tol)

  def body(st: _Gjk) -> _Gjk:
    stagnant = (st.xn < min_norm) | (jnp.abs(st.xn_prev - st.xn) < MINVAL)
    inv = 1 / _safe(st.xn, st.xn != 0)
    s = sup(-(st.x * inv))
    eps_stop = _dot(st.x, st.x - s[_V]) < eps
    lower = _dot(st.x, s[_V])
    sep = (cutoff < jnp.finfo(s.dtype).max) & (lower > 0) & (lower >= cutoff * st.xn)
    mode_a = jnp.where(stagnant | eps_stop, _DONE, jnp.where(sep, _SEP, _RUN))
    go = mode_a == _RUN
    simplex = jnp.where(go, st.simplex.at[jnp.minimum(st.n, 3)].set(s), st.simplex)

    lam = _subdistance(st.n + 1, simplex[:, _V])
    keep = lam != 0
    order = jnp.argsort(~keep, stable=True)
    simplex_b, lam_b = simplex[order], jnp.where(keep[order], lam[order], 0.0)
    n_b = jnp.sum(keep).astype(st.n.dtype)
    x_b = _lincomb(lam_b, n_b, simplex_b[:, _V])
    mode_b = jnp.where(n_b < 1, _SEP, jnp.where(n_b == 4, _DONE, _RUN))
    return _Gjk(
        simplex=jnp.where(go, simplex_b, simplex), n=jnp.where(go, n_b, st.n),
        k=jnp.where(go & (mode_b == _RUN), st.k + 1, st.k), x=jnp.where(go, x_b, st.x),
        xn=jnp.where(go, _norm(x_b), st.xn), xn_prev=jnp.where(go, st.xn, st.xn_prev),
        lam=jnp.where(go, lam_b, st.lam), mode=jnp.where(go, mode_b, mode_a))

  return jax.lax.while_loop(lambda st: (st.mode == _RUN) & (st.k < kmax), body, st)


class _GjkResult(NamedTuple):
  simplex: jax.Array   # (4, 4, 3)
  n: jax.Array         # vertices in the simplex
  lam: jax.Array       # (4,) barycentric coordinates of the nearest point
  dist: jax.Array      # status->dist[0]
  separated: jax.Array
  has_x: jax.Array     # witness points exist (status->nx)


def _gjk(sup: Support, x1: jax.Array, x2: jax.Array, kmax: int, tol: jax.Array,
         cutoff: jax.Array, active: jax.Array, discrete: jax.Array) -> _GjkResult:
  """MuJoCo's ``gjk``; ``cutoff`` 0 is the run without distances (it stops as soon as a support
  plane separates the geoms: MuJoCo's test for that case reduces to this one's with a zero
  cutoff; where not ``active`` it reports the geoms separated without a step). MuJoCo 4.0 has
  no gjkIntersect fallback (3.12's ``gjkIntersect`` is gone from its binary, and its traces
  continue GJK to the tetrahedron)."""
  dtype = x1.dtype
  x = x1 - x2
  st = _Gjk(simplex=jnp.zeros((4, 4, 3), dtype), n=jnp.array(0), k=jnp.array(0), x=x,
            xn=_norm(x), xn_prev=jnp.zeros((), dtype), lam=jnp.zeros(4, dtype),
            mode=jnp.where(active, _RUN, _SEP))
  st = _gjk_loop(sup, st, kmax, tol, cutoff, discrete)
  sep_early = st.mode == _SEP
  final = sup(-(st.x * (1 / _safe(st.xn, st.xn != 0))))
  separated = _dot(st.x, final[_V]) > 0
  dist = jnp.where((st.n == 4) & ~separated, 0.0, st.xn)
  return _GjkResult(simplex=st.simplex, n=jnp.where(sep_early, 0, st.n), lam=st.lam,
                    dist=jnp.where(sep_early, jnp.finfo(dtype).max, dist),
                    separated=sep_early | separated, has_x=~sep_early)


#------------------------------------ EPA -----------------------------------------------------------

class _Polytope(NamedTuple):
  vert: jax.Array     # (NV, 4, 3)
  nvert: jax.Array
  face: jax.Array     # (NF, 3) vertex ids
  adj: jax.Array      # (NF, 3) adjacent faces across edges (v0 v1), (v1 v2), (v2 v0)
  v: jax.Array        # (NF, 3) the origin's projection on the face, pointing outward
  dist2: jax.Array    # (NF,)
  alive: jax.Array    # (NF,) not deleted
  in_map: jax.Array   # (NF,) a candidate for the nearest face
  nface: jax.Array
  center: jax.Array   # (3,)


def _empty_polytope(nv: int, nf: int, dtype) -> _Polytope:
  return _Polytope(
      vert=jnp.zeros((nv, 4, 3), dtype), nvert=jnp.array(0), face=jnp.zeros((nf, 3), jnp.int32),
      adj=jnp.zeros((nf, 3), jnp.int32), v=jnp.zeros((nf, 3), dtype),
      dist2=jnp.zeros(nf, dtype), alive=jnp.zeros(nf, bool), in_map=jnp.zeros(nf, bool),
      nface=jnp.array(0), center=jnp.zeros(3, dtype))


# the initial polytopes have at most 5 vertices and 6 faces: they are built and chosen among at
# that size, and only the one chosen grows to EPA's
_NV0, _NF0 = 5, 6


def _grown(pt: _Polytope, nv: int, nf: int) -> _Polytope:
  """The polytope with room for nv vertices and nf faces (the new rows empty)."""
  pad = lambda x, n: jnp.concatenate([x, jnp.zeros((n - x.shape[0],) + x.shape[1:], x.dtype)])
  return pt._replace(vert=pad(pt.vert, nv), face=pad(pt.face, nf), adj=pad(pt.adj, nf),
                     v=pad(pt.v, nf), dist2=pad(pt.dist2, nf), alive=pad(pt.alive, nf),
                     in_map=pad(pt.in_map, nf))


def _face_point(center: jax.Array, v1: jax.Array, v2: jax.Array, v3: jax.Array
                ) -> tuple[jax.Array, jax.Array]:
  """attachFace's projection of the origin on face (v1, v2, v3), pointing away from ``center``,
  and its squared distance (0 where the projection fails)."""
  p, fail = _project_origin_plane(v3, v2, v1)
  p = jnp.where(_dot(p, v1 - center) < 0, -p, p)
  return p, jnp.where(fail, 0.0, _dot(p, p))


def _attach(pt: _Polytope, faces: np.ndarray, adj: np.ndarray) -> tuple[_Polytope, jax.Array]:
  """attachFace for the fixed faces (k, 3) of an initial polytope, with their adjacent faces
  (k, 3), in one batch: the polytope and the faces' squared distances (k,)."""
  k = len(faces)
  x = pt.vert[:, _V]
  p, d2 = jax.vmap(lambda a, b, c: _face_point(pt.center, a, b, c))(
      x[faces[:, 0]], x[faces[:, 1]], x[faces[:, 2]])
  pt = pt._replace(face=pt.face.at[:k].set(jnp.asarray(faces, jnp.int32)),
                   adj=pt.adj.at[:k].set(jnp.asarray(adj, jnp.int32)), v=pt.v.at[:k].set(p),
                   dist2=pt.dist2.at[:k].set(d2), alive=pt.alive.at[:k].set(True),
                   in_map=pt.in_map.at[:k].set(True), nface=jnp.array(k))
  return pt, d2


def _first_flat(pt: _Polytope, faces: np.ndarray, d2: jax.Array) -> tuple[jax.Array, jax.Array]:
  """Whether a face of the initial polytope is degenerate, and the first such face's vertices
  (3, 4, 3) (else the first three vertices), for polytope3 to start from."""
  flat = d2 < _MINDIST
  tri = pt.vert[jnp.asarray(faces)[jnp.argmax(flat)]]
  return jnp.any(flat), jnp.where(jnp.any(flat), tri, pt.vert[:3])


def _insert(pt: _Polytope, vertex: jax.Array) -> _Polytope:
  return pt._replace(vert=pt.vert.at[pt.nvert].set(vertex), nvert=pt.nvert + 1)


def _same_side(p0, p1, p2, p3) -> jax.Array:
  n = _cross(p1 - p0, p2 - p0)
  d1, d2 = _dot(n, p3 - p0), _dot(n, -p0)
  return ((d1 > 0) & (d2 > 0)) | ((d1 < 0) & (d2 < 0))


def _test_tetra(p0, p1, p2, p3) -> jax.Array:
  return (_same_side(p0, p1, p2, p3) & _same_side(p1, p2, p3, p0)
          & _same_side(p2, p3, p0, p1) & _same_side(p3, p0, p1, p2))


def _tri_affine(v1, v2, v3, p) -> jax.Array:
  """triAffineCoord: affine coordinates (3,) of p on triangle v1 v2 v3."""
  c, m_max = _areas(v1, v2, v3, p)
  return c / _safe(m_max, m_max != 0)


# the adjacency of polytope2's and polytope3's six faces (a double pyramid)
_ADJ6 = np.array([(1, 3, 2), (2, 4, 0), (0, 5, 1), (5, 0, 4), (3, 1, 5), (4, 2, 3)])
# polytope4's faces of a tetrahedron, their adjacent faces and the vertex off each
_P4_FACES = np.array([(0, 1, 2), (0, 3, 1), (0, 2, 3), (3, 2, 1)])
_P4_ADJ = np.array([(1, 3, 2), (2, 3, 0), (0, 3, 1), (2, 0, 1)])
_P4_OFF = np.array([3, 2, 1, 0])


def _polytope4(sup, simplex) -> tuple[_Polytope, jax.Array, jax.Array, jax.Array]:
  """polytope4: (polytope, ret, fall back to polytope3, that triangle's vertices (3, 4, 3))."""
  pt = _empty_polytope(_NV0, _NF0, simplex.dtype)
  for i in range(4):
    pt = _insert(pt, simplex[i])
  x = simplex[:, _V]
  pt = pt._replace(center=(((x[0] + x[1]) + x[2]) + x[3]) * 0.25)
  pt, d2 = _attach(pt, _P4_FACES, _P4_ADJ)
  fall, tri = _first_flat(pt, _P4_FACES, d2)
  ret = jnp.where(_test_tetra(x[0], x[1], x[2], x[3]), 0, 9)
  return pt, ret, fall, tri


# polytope3 in MuJoCo 4.0 (machine code; the 3.x sources differ): the apexes v4 = support(n)
# (vertex 4) and v5 = support(-n) (vertex 3) must lie off the triangle's plane, and where the
# segment v4 v5 misses the triangle (0, 1, 2) (rayTriangle), recoverHexa builds the double
# pyramid on another equator, one of (2, v5, v4), (0, v5, v4), (1, v5, v4), with two of the
# triangle's vertices as apexes (rows 1-3 of _P3_ORDER, picked by the signs of rayTriangle's
# volumes), or, where none fits, the tetrahedron of v4, v5 and the triangle's edge whose volume
# is smallest. Each row is the order (o0, o1, o2, o3, o4) of the hexahedron's vertices: its
# faces are _P3_HEXA in that order, the centre is their mean, and the origin must lie inside
# (on the inner side of every face, or within the tolerance of it).
_P3_ORDER = np.array([(0, 1, 2, 4, 3), (2, 3, 4, 0, 1), (0, 3, 4, 1, 2), (1, 3, 4, 2, 0)])
_P3_HEXA = np.array([(3, 0, 1), (3, 2, 0), (3, 1, 2), (4, 1, 0), (4, 0, 2), (4, 2, 1)])
_P3_HEXA_OFF = np.array([2, 1, 0, 2, 1, 0])  # the equator's vertex off each face


def _polytope3(sup, tri, tol) -> tuple[_Polytope, jax.Array]:
  pt = _empty_polytope(_NV0, _NF0, tri.dtype)
  x = tri[:, _V]
  n = _cross(x[1] - x[0], x[2] - x[0])
  n_norm = _norm(n)
  for i in range(3):
    pt = _insert(pt, tri[i])
  v5, v4 = jax.vmap(lambda d: _unit_support(sup, d, n_norm))(jnp.stack([-n, n]))
  pt = _insert(_insert(pt, v5), v4)

  def on_triangle(p):
    lam = _tri_affine(x[0], x[1], x[2], p)
    pr = x[0] * lam[0] + x[1] * lam[1] + x[2] * lam[2]
    return ~jnp.any(lam < 0) & (_norm(pr - p) < MINVAL)
  # the apexes within 1e-15 of the triangle's plane
  flat = ((_dot(n, v4[_V] - x[0]) < MINVAL * n_norm)
          | (_dot(-n, v5[_V] - x[0]) < MINVAL * n_norm))
  ret = jnp.where(n_norm < MINVAL, 4, jnp.where(on_triangle(v4[_V]), 5, jnp.where(
      on_triangle(v5[_V]), 6, jnp.where(flat, 8, 0))))

  # rayTriangle(v4, v5, triangle): the volumes (3,) and whether they share a sign
  p = pt.vert[:, _V]
  d12, d13, d14, d15 = p[3] - p[4], p[0] - p[4], p[1] - p[4], p[2] - p[4]
  a, b, c = _det3(d13, d14, d12), _det3(d14, d15, d12), _det3(d15, d13, d12)
  through = (((a >= 0) & (b >= 0) & (c >= 0)) | ((a <= 0) & (b <= 0) & (c <= 0)))
  # recoverHexa
  case1 = (a > 0) & (b < -MINVAL) & (c < -MINVAL)
  case2 = (b > 0) & (a < -MINVAL) & (c < -MINVAL)
  case3 = (b < -MINVAL) & (a < -MINVAL) & (c > 0)
  row = jnp.where(through, 0, jnp.where(case1, 1, jnp.where(case2, 2, jnp.where(case3, 3, 0))))
  hexa = through | case1 | case2 | case3
  order = jnp.asarray(_P3_ORDER, jnp.int32)[row]
  q = p[order]
  hex_pt = pt._replace(center=((((q[0] + q[1]) + q[2]) + q[3]) + q[4]) * 0.2)
  hex_pt, hex_d2 = _attach(hex_pt, order[_P3_HEXA], _ADJ6)
  hex_side = jax.vmap(_same_side)(q[_P3_HEXA[:, 0]], q[_P3_HEXA[:, 1]], q[_P3_HEXA[:, 2]],
                                  q[_P3_HEXA_OFF])
  # no equator: the tetrahedron (e0, e1, v4, v5) on the triangle's edge of the smallest volume
  e = jnp.where((b >= a) & (c >= a), 0, jnp.where((a >= b) & (c >= b), 1, 2))
  tet = jnp.stack([e, (e + 1) % 3, jnp.full_like(e, 4), jnp.full_like(e, 3)]).astype(jnp.int32)
  t = p[tet]
  tet_pt = pt._replace(center=(((t[0] + t[1]) + t[2]) + t[3]) * 0.25)
  tet_pt, tet_d2 = _attach(tet_pt, tet[_P4_FACES], _P4_ADJ)
  tet_side = jax.vmap(_same_side)(t[_P4_FACES[:, 0]], t[_P4_FACES[:, 1]], t[_P4_FACES[:, 2]],
                                  t[_P4_OFF])
  pt = jax.tree.map(lambda h, u: jnp.where(hexa, h, u), hex_pt, tet_pt)
  # (4.0 then tries polytope2 on a triangle edge through the origin; here: no contact)
  degenerate = jnp.where(hexa, jnp.any(hex_d2 < _MINDIST), jnp.any(tet_d2 < _MINDIST))
  tol2 = tol * tol
  outside = jnp.where(hexa, jnp.any(~hex_side & (hex_d2 >= tol2)),
                      jnp.any(~tet_side & (tet_d2 >= tol2)))
  ret = jnp.where(ret == 0, jnp.where(degenerate, 8, jnp.where(outside, 7, 0)), ret)
  return pt, ret


def _rotmat120(axis: jax.Array) -> jax.Array:
  n = _norm(axis)
  u1, u2, u3 = axis[0] / n, axis[1] / n, axis[2] / n
  s, c = 0.86602540378, -0.5
  return jnp.array([
      [c + u1*u1*(1 - c), u1*u2*(1 - c) - u3*s, u1*u3*(1 - c) + u2*s],
      [u2*u1*(1 - c) + u3*s, c + u2*u2*(1 - c), u2*u3*(1 - c) - u1*s],
      [u1*u3*(1 - c) - u2*s, u2*u3*(1 - c) + u1*s, c + u3*u3*(1 - c)]])


def _polytope2(sup, simplex) -> tuple[_Polytope, jax.Array, jax.Array, jax.Array]:
  pt = _empty_polytope(_NV0, _NF0, simplex.dtype)
  v1, v2 = simplex[0, _V], simplex[1, _V]
  pt = pt._replace(center=(v1 + v2) * 0.5)
  diff = v2 - v1
  index = jnp.argmin(jnp.abs(diff))
  d1 = _cross(jnp.zeros(3, diff.dtype).at[index].set(1.0), diff)
  r = _rotmat120(diff)
  d2 = r @ d1
  d3 = r @ d2
  pt = _insert(_insert(pt, simplex[0]), simplex[1])
  for v in jax.vmap(lambda d: _unit_support(sup, d, _norm(d)))(jnp.stack([d1, d2, d3])):
    pt = _insert(pt, v)
  faces = np.array([(0, 2, 3), (0, 4, 2), (0, 3, 4), (1, 3, 2), (1, 2, 4), (1, 4, 3)])
  pt, dd = _attach(pt, faces, _ADJ6)
  fall, tri = _first_flat(pt, faces, dd)
  x = pt.vert[:, _V]
  e12, e13, e14, e15 = x[1] - x[0], x[2] - x[0], x[3] - x[0], x[4] - x[0]
  vol1, vol2, vol3 = _det3(e13, e14, e12), _det3(e14, e15, e12), _det3(e15, e13, e12)
  convex = (((vol1 >= 0) & (vol2 >= 0) & (vol3 >= 0))
            | ((vol1 <= 0) & (vol2 <= 0) & (vol3 <= 0)))
  return pt, jnp.where(convex, 0, 2), fall, tri


class _Epa(NamedTuple):
  pt: _Polytope
  face: jax.Array
  upper: jax.Array
  k: jax.Array
  done: jax.Array


def _epa(sup: Support, pt: _Polytope, kmax: int, tol: jax.Array, run: jax.Array,
         discrete: jax.Array, prism: jax.Array) -> tuple[jax.Array, _Polytope]:
  """MuJoCo's ``epa``: the id of the face nearest the origin, or -1 (no contact), and the final
  polytope. ``run`` False skips it (a batch's loop then ends once its last pair is done).

  Between two ``discrete`` geoms (polytopes) the expansion ends in finitely many steps: it runs
  to a tolerance of MINVAL (1e-7 in float32) instead of ``tol`` and stops at the first support
  point that is already a vertex of the polytope (the same vertex of both geoms). A height
  field ``prism`` (geom 1) gives its support points no vertex index in MuJoCo, so there a
  support point is seen before when geom 2's vertex is."""
  big = jnp.finfo(pt.v.dtype).max
  nf = pt.face.shape[0]
  ids = jnp.arange(nf)
  # mjMINEPATOL: mjMINVAL in double precision, 1e-7 in single
  tol = jnp.where(discrete, MINVAL if tol.dtype == jnp.float64 else 1e-7, tol)
  vert_ids = jnp.arange(pt.vert.shape[0])

  def body(s: _Epa) -> _Epa:
    pt = s.pt
    upper2 = jnp.where(s.upper < big, s.upper * s.upper, big)
    cand = jnp.where(pt.in_map, pt.dist2, big)
    best = jnp.argmin(cand)
    has = cand[best] < big
    face = jnp.where(has, best, s.face)
    lower2 = jnp.where(has, cand[best], big)
    invalid = (lower2 > upper2) | (face < 0)
    zero = ~invalid & (lower2 <= 0)
    lower = jnp.sqrt(jnp.where(lower2 > 0, lower2, 1.0))
    fv = pt.v[face]
    w = _unit_support(sup, fv, lower)
    wi = pt.nvert
    upper_k = _dot(fv, w[_V]) / lower
    upper = jnp.minimum(s.upper, upper_k)
    upper2 = jnp.where(upper_k < s.upper, upper * upper, upper2)
    # 4.0 (machine code) tests this iteration's upper bound, not the smallest one as 3.12 did,
    # and drops a first face whose bound is below the lower one by more than the tolerance
    conv = ~invalid & ~zero & (upper_k - lower < tol)
    lost = conv & (s.k == 0) & (upper < lower - tol)
    # a discrete pair's support point seen before: MuJoCo compares vertex indices; a vertex is
    # the same point wherever it was evaluated, up to the rounding of the fused arithmetic
    # around it, and distinct vertices lie far apart
    close = 64 * jnp.finfo(w.dtype).eps * (1 + jnp.max(jnp.abs(w[_A:_B + 1])))
    same = lambda row: jnp.all(jnp.abs(pt.vert[:, row] - w[None, row]) <= close, axis=-1)
    seen = (vert_ids < pt.nvert) & (prism | same(_A)) & same(_B)
    repeated = discrete & ~invalid & ~zero & ~conv & jnp.any(seen)

    # horizon: the faces visible from w connected to the nearest face are deleted
    visible = pt.alive & (_dot(pt.v, w[_V]) - pt.dist2 > MINVAL)
    start = ids == face

    def grow(c):
      comp, _ = c
      reach = comp[pt.adj[:, 0]] | comp[pt.adj[:, 1]] | comp[pt.adj[:, 2]]
      new = comp | (visible & reach)
      return new, jnp.any(new != comp)
    comp, _ = jax.lax.while_loop(lambda c: c[1], grow, (start, jnp.array(True)))
    alive = pt.alive & ~comp
    nbr = pt.adj  # (NF, 3)
    edge_on = comp[:, None] & alive[nbr]  # (NF, 3)
    nedges = jnp.sum(edge_on)
    flat = jnp.flatnonzero(edge_on.reshape(-1), size=_HORIZON, fill_value=0)
    hf, hi = flat // 3, flat % 3
    g = nbr[hf, hi]  # the kept face across each horizon edge
    start_vert = pt.face[hf, (hi + 1) % 3]
    gface = pt.face[g]
    e = jnp.where(gface[:, 0] == start_vert, 0, jnp.where(gface[:, 1] == start_vert, 1, 2))
    a = gface[jnp.arange(_HORIZON), e]
    b = gface[jnp.arange(_HORIZON), (e + 1) % 3]
    valid = jnp.arange(_HORIZON) < nedges
    new_id = pt.nface + jnp.arange(_HORIZON)
    prev = jnp.argmax((a[None, :] == b[:, None]) & valid[None, :], axis=1)
    nxt = jnp.argmax((b[None, :] == a[:, None]) & valid[None, :], axis=1)
    x = pt.vert.at[wi].set(w)[:, _V]
    pts, d2s = jax.vmap(lambda i, j: _face_point(pt.center, x[wi], x[i], x[j]))(b, a)
    bad = jnp.any(valid & (d2s == 0))
    few = nedges < 3
    full = nedges > nf - pt.nface
    new_faces = jnp.stack([jnp.full(_HORIZON, wi), b, a], axis=1).astype(jnp.int32)
    new_adj = jnp.stack([pt.nface + prev, g, pt.nface + nxt], axis=1).astype(jnp.int32)
    # the new faces take rows nface, nface + 1, ...: each row gathers its horizon edge's (a
    # scatter would run as a loop of its own on XLA CPU); where they do not fit, the polytope
    # is full and not grown
    fresh = (ids >= pt.nface) & (ids < pt.nface + nedges)
    edge_of = jnp.clip(ids - pt.nface, 0, _HORIZON - 1)
    put = lambda old, new: jnp.where(fresh.reshape((nf,) + (1,) * (old.ndim - 1)),
                                     new[edge_of], old)
    across = pt.adj.at[jnp.where(valid, g, nf), e].set(new_id.astype(jnp.int32), mode="drop")
    expanded = pt._replace(
        vert=pt.vert.at[wi].set(w), nvert=pt.nvert + 1, face=put(pt.face, new_faces),
        adj=put(across, new_adj), v=put(pt.v, pts), dist2=put(pt.dist2, d2s),
        alive=alive | fresh,
        in_map=put(pt.in_map & ~comp, (d2s >= lower2) & (d2s <= upper2)),
        nface=pt.nface + nedges)
    stop_before = invalid | zero | conv | repeated
    full = full | (nedges > _HORIZON)
    fail = ~stop_before & (few | (~full & bad))
    stop_full = ~stop_before & ~few & full
    grown = ~stop_before & ~fail & ~stop_full
    out_face = jnp.where(invalid, s.face, jnp.where(lost | fail, -1, face))
    keep_w = ~(invalid | zero)
    new_pt = jax.tree.map(lambda n, o: jnp.where(grown, n, o), expanded, pt)
    new_pt = new_pt._replace(vert=jnp.where(keep_w, new_pt.vert.at[wi].set(w), new_pt.vert),
                             nvert=jnp.where(keep_w, pt.nvert + 1, pt.nvert))
    empty = grown & ~jnp.any(new_pt.in_map)
    return _Epa(pt=new_pt, face=out_face, upper=jnp.where(invalid | zero, s.upper, upper),
                k=jnp.where(grown & ~empty, s.k + 1, s.k), done=~grown | empty)

  kmax = min(kmax, 1000)
  init = _Epa(pt=pt, face=jnp.array(-1), upper=big, k=jnp.array(0), done=~run)
  out = jax.lax.while_loop(lambda s: ~s.done & (s.k < kmax), body, init)
  return out.face, out.pt


#------------------------------------ mjc_ccd -------------------------------------------------------

class _Witness(NamedTuple):
  """What mjc_ccd found, without derivatives: ``path`` 0 no contact, 1 the shrunk sphere and
  capsule cores (``verts`` (4, 4, 3) of the simplex, ``n``), 2 an EPA face (``verts`` (3, 4, 3)),
  3 (distances only) the full geoms' GJK simplex of two separated geoms (``verts``, ``n``);
  the vertices as ``_support`` gives them, with the directions they were taken in."""
  path: jax.Array
  verts: jax.Array
  n: jax.Array
  center: jax.Array


def _frozen(g: Geom) -> Geom:
  sg = jax.lax.stop_gradient
  hulls = None if g.hulls is None else g.hulls._replace(vert=sg(g.hulls.vert),
                                                        normal=sg(g.hulls.normal))
  return g._replace(pos=sg(g.pos), mat=sg(g.mat), size=sg(g.size), vert=sg(g.vert),
                    half_margin=sg(g.half_margin), hulls=hulls)


def _rounded(g: Geom) -> jax.Array:
  """Whether the geom is a sphere or a capsule (its distance pass runs on a point or a segment)."""
  return (g.kind == _G.SPHERE) | (g.kind == _G.CAPSULE)


_CORE = {_G.SPHERE: _POINT, _G.CAPSULE: _LINE}  # what the distance pass shrinks a geom to


def _core(g: Geom) -> Geom:
  """The geom as the distance pass sees it: no margin, a sphere's centre, a capsule's segment."""
  kind = g.kind
  for full, core in _CORE.items():
    kind = jnp.where(g.kind == full, core, kind)
  return g._replace(kind=kind, half_margin=jnp.zeros_like(g.half_margin))


def _core_kinds(kinds: tuple[int, ...]) -> tuple[int, ...]:
  return tuple(sorted({_CORE.get(k, k) for k in kinds}))


def _discrete(g1: Geom, g2: Geom) -> jax.Array:
  """discreteGeoms: both geoms are polytopes (boxes, meshes, height field prisms) without a
  margin, which would round them."""
  flat = lambda g: ((g.kind == _G.MESH) | (g.kind == _G.BOX) | (g.kind == _G.HFIELD)) & (
      g.half_margin == 0)
  return flat(g1) & flat(g2)


def _full_margin(g: Geom) -> jax.Array:
  """What the distance pass's witness point moves out by: half the margin, plus the radius of a
  sphere or a capsule."""
  return jnp.where(_rounded(g), g.size[0] + g.half_margin, g.half_margin)


class _Gjks(NamedTuple):
  """mjc_ccd's GJK runs on the cores (``core``) and the full geoms (``full``); ``shallow``: the
  cores' distance decides, ``core_hit``: and they touch (or, measuring distances, lie within
  the cutoff), ``run_epa``: EPA must decide, ``full_hit``: (distances only) the full geoms lie
  apart within the cutoff."""
  core: _GjkResult
  full: _GjkResult
  shallow: jax.Array
  core_hit: jax.Array
  run_epa: jax.Array
  full_hit: jax.Array


def _search_gjk(g1: Geom, g2: Geom, kinds: Kinds, kmax: int, tol: jax.Array, active: jax.Array,
                dist_cutoff: jax.Array | None = None) -> _Gjks:
  """mjc_ccd's GJK phase (no derivatives); nothing where not ``active``, at the cost of no GJK
  step (under vmap, batch members that need none do not hold the loops). ``dist_cutoff``:
  MuJoCo's ``config.dist_cutoff`` (None: 0, contacts only)."""
  # MuJoCo 4.0 first runs a distance pass on the cores where there is a sphere, a capsule or
  # a margin; both GJK runs go as one batch of two, so the program holds one GJK
  c1, c2 = _core(g1), _core(g2)
  margins = _full_margin(g1) + _full_margin(g2)
  reach = jnp.zeros_like(margins) if dist_cutoff is None else dist_cutoff
  both = tuple(tuple(sorted(set(k) | set(_core_kinds(k)))) for k in kinds)
  pair = lambda a, b: jax.tree.map(lambda x, y: jnp.stack([x, y]), _fields(a), _fields(b))

  discrete = _discrete(g1, g2)

  def run(a: Geom, b: Geom, cut: jax.Array) -> _GjkResult:
    a, b = a._replace(hulls=g1.hulls), b._replace(hulls=g2.hulls)
    return _gjk(_support(a, b, both), a.pos, b.pos, kmax, tol, cut, active, discrete)
  runs = jax.vmap(run)(pair(c1, g1), pair(c2, g2), jnp.stack([margins + reach, reach]))
  core, full = (jax.tree.map(lambda x: x[i], runs) for i in range(2))
  shallow = (_rounded(g1) | _rounded(g2) | (margins > 0)) & (core.dist > tol)
  return _Gjks(core=core, full=full, shallow=shallow,
               core_hit=shallow & core.has_x & (core.dist - margins < reach),
               run_epa=(full.dist <= tol) & (full.n > 1) & ~full.separated & ~shallow,
               full_hit=((reach > 0) & ~shallow & full.has_x & (full.dist > tol)
                         & (full.dist < reach)))


def _search_epa(g1: Geom, g2: Geom, kinds: Kinds, kmax: int, tol: jax.Array, gjks: _Gjks
                ) -> tuple[jax.Array, jax.Array, jax.Array]:
  """mjc_ccd's EPA phase (no derivatives): the nearest face's vertices (3, 4, 3), the
  polytope's centre (3,) and whether EPA found a contact."""
  nv, nf = 5 + kmax, 6 * kmax
  sup = _support(g1, g2, kinds)
  full = gjks.full
  p4, r4, f4, t4 = _polytope4(sup, full.simplex)
  p2, r2, f2, t2 = _polytope2(sup, full.simplex)
  tri = jnp.where(full.n == 4, t4, jnp.where(full.n == 2, t2, full.simplex[:3]))
  p3, r3 = _polytope3(sup, tri, tol)
  use3 = (full.n == 3) | ((full.n == 4) & f4) | ((full.n == 2) & f2)
  pick = lambda a, b, c: jnp.where(use3, c, jnp.where(full.n == 4, a, b))
  pt = _grown(jax.tree.map(pick, p4, p2, p3), nv, nf)
  run = gjks.run_epa & (pick(r4, r2, r3) == 0)
  face, pt = _epa(sup, pt, kmax, tol, run, _discrete(g1, g2), g1.kind == _G.HFIELD)
  return pt.vert[pt.face[jnp.maximum(face, 0)]], pt.center, run & (face >= 0)


def _witness(gjks: _Gjks, face: jax.Array, center: jax.Array, epa_hit: jax.Array) -> _Witness:
  """mjc_ccd's result from its two phases."""
  verts = jnp.concatenate([face, jnp.zeros((1, 4, 3), face.dtype)])
  path = jnp.where(gjks.shallow, jnp.where(gjks.core_hit, 1, 0),
                   jnp.where(epa_hit, 2, jnp.where(gjks.full_hit, 3, 0)))
  simplex = jnp.where(gjks.shallow, gjks.core.simplex, gjks.full.simplex)
  n = jnp.where(gjks.shallow, gjks.core.n, gjks.full.n)
  gjk_path = gjks.shallow | (path == 3)
  return _Witness(path=path, verts=jnp.where(gjk_path, simplex, verts),
                  n=jnp.where(gjk_path, n, 3), center=center)


def _search(g1: Geom, g2: Geom, kinds: Kinds, kmax: int, tol: jax.Array, active: jax.Array,
            dist_cutoff: jax.Array | None = None) -> _Witness:
  """mjc_ccd's combinatorial result (no derivatives); none where not ``active``."""
  gjks = _search_gjk(g1, g2, kinds, kmax, tol, active, dist_cutoff)
  return _witness(gjks, *_search_epa(g1, g2, kinds, kmax, tol, gjks))


def _ccd(g1: Geom, g2: Geom, kinds: Kinds, found: _Witness, distance: bool = False
         ) -> tuple[jax.Array, ...]:
  """mjc_ccd with derivatives, at the search's result ``found``: (found, dist (without the
  margin), x1, x2); ``distance``: the search may have ended on path 3."""
  dirs = jax.lax.stop_gradient(found.verts[:, _D])
  # the support points again, from their directions, give the derivatives; their values are
  # the search's (where a direction is normal to an edge or a face, the two evaluations may
  # round to different points of it). A search that found nothing may end on a degenerate
  # simplex (in float32 on dm_control's finger: one support point twice, and the origin), whose
  # face and nearest point have infinite derivatives though nothing reads them: selects, not
  # products, cut them off, so that neither mode meets 0 * inf.
  live = found.path > 0
  cut = lambda x: jnp.where(live, x, jax.lax.stop_gradient(x))
  same = lambda searched, again: searched + cut(again - jax.lax.stop_gradient(again))
  # EPA face: its three vertices from their directions
  verts = same(found.verts[:3], jax.vmap(_support(g1, g2, kinds))(dirs[:3]))
  x = verts[:, _V]
  p, d2 = _face_point(jax.lax.stop_gradient(found.center), x[0], x[1], x[2])
  lam = _tri_affine(x[0], x[1], x[2], p)
  e1 = lam[0] * verts[0, _A] + lam[1] * verts[1, _A] + lam[2] * verts[2, _A]
  e2 = lam[0] * verts[0, _B] + lam[1] * verts[1, _B] + lam[2] * verts[2, _B]
  e_dist = -jnp.sqrt(jnp.where(d2 > 0, d2, 1.0)) * (d2 > 0)
  # distance pass: the simplex's nearest point, pushed out by the margins
  c1, c2 = _core(g1), _core(g2)
  core_kinds = tuple(_core_kinds(k) for k in kinds)
  simplex = same(found.verts, jax.vmap(_support(c1, c2, core_kinds))(dirs))
  lam4 = _subdistance(found.n, simplex[:, _V])
  xk = _lincomb(lam4, found.n, simplex[:, _V])
  s1 = _lincomb(lam4, found.n, simplex[:, _A])
  s2 = _lincomb(lam4, found.n, simplex[:, _B])
  m1, m2 = _full_margin(g1), _full_margin(g2)
  nrm = s2 - s1
  nn = _norm(nrm)
  unit = jnp.where(nn < MINVAL, jnp.array([1.0, 0.0, 0.0], nrm.dtype),
                   nrm / _safe(nn, nn >= MINVAL))
  core = found.path == 1
  e1 = jnp.where(core, s1 + m1 * unit, e1)
  e2 = jnp.where(core, s2 - m2 * unit, e2)
  e_dist = jnp.where(core, _norm(xk) - (m1 + m2), e_dist)
  if distance:
    # two separated geoms: the full simplex's nearest point and its witnesses
    full = same(found.verts, jax.vmap(_support(g1, g2, kinds))(dirs))
    lam_f = _subdistance(found.n, full[:, _V])
    apart = found.path == 3
    e1 = jnp.where(apart, _lincomb(lam_f, found.n, full[:, _A]), e1)
    e2 = jnp.where(apart, _lincomb(lam_f, found.n, full[:, _B]), e2)
    e_dist = jnp.where(apart, _norm(_lincomb(lam_f, found.n, full[:, _V])), e_dist)
  return live, cut(e_dist), cut(e1), cut(e2)


def _contact_at(g1: Geom, g2: Geom, kinds: Kinds, margin: jax.Array, found: _Witness
                ) -> _Contact:
  """mjc_penetration's one contact (dist, pos, normal from geom 1 to geom 2), with derivatives,
  at the search's result ``found``."""
  hit, dist, x1, x2 = _ccd(g1, g2, kinds, found)
  diff = x1 - x2
  nn = _norm(diff)
  ok = nn >= MINVAL
  normal = jnp.where(ok, diff / _safe(nn, ok), jnp.array([1.0, 0.0, 0.0], diff.dtype))
  return _Contact(dist=margin + dist, pos=0.5 * (x1 + x2), normal=normal,
                  tangent=jnp.zeros_like(normal), valid=hit & (dist < 0))


def _geom(kind, pos, mat, size, margin, mesh, hulls: Hulls | None = None) -> Geom:
  """A geom other than a height field prism (its ``vert`` unused)."""
  half = jnp.where(margin > 0, 0.5 * margin, 0.0)
  return Geom(kind=jnp.asarray(kind), pos=pos, mat=mat, size=size,
              vert=jnp.zeros((1, 3), pos.dtype), mesh=jnp.asarray(mesh, jnp.int32),
              half_margin=half, hulls=hulls)


def _multi_contacts(g1: Geom, g2: Geom, kinds: Kinds, margin: jax.Array, found: _Witness
                    ) -> _Contact:
  """_contact_at followed by MuJoCo 4's multi-contact search where the pair's geom kinds have
  one: up to collision_multi.MAXCON contacts (N,) sharing the first one's normal."""
  # materialised: XLA fused the first contact into the per-vertex kernels of the search below,
  # recomputing it for every vertex (two kernels of 0.9 ms a step on dm_control's finger at
  # a batch of 64)
  hit, dist, x1, x2 = materialize(_ccd(g1, g2, kinds, found))
  # the face the search ended on: EPA's, or the distance pass's simplex (its first vertices)
  n = found.n
  rows = jnp.where(found.path == 1, jnp.stack([0, jnp.where(n > 1, 1, 0), jnp.where(n > 2, 2, 0)]),
                   jnp.arange(3))
  face = found.verts[rows]
  dirs = jax.lax.stop_gradient(face[:, _D])
  def core(g: Geom) -> Geom:
    c = _core(g)
    return g._replace(kind=jnp.where(found.path == 1, c.kind, g.kind),
                      half_margin=jnp.where(found.path == 1, c.half_margin, g.half_margin))
  both = tuple(tuple(sorted(set(k) | set(_core_kinds(k)))) for k in kinds)
  again = jax.vmap(_support(core(g1), core(g2), both))(dirs)
  # (only a contact found reads the face: its derivatives cut off as in _ccd)
  moved = jnp.where(hit, again - jax.lax.stop_gradient(again), 0.0)
  face, dirs = materialize((face + moved, dirs))
  count, w1, w2, d = collision_multi.multicontact(kinds, g1, g2, dirs, face[:, _A], face[:, _B],
                                                  x1, x2)
  supported = jnp.zeros((), bool)
  for k1 in kinds[0]:
    for k2 in kinds[1]:
      if collision_multi.supports(k1, k2):
        supported = supported | ((g1.kind == k1) & (g2.kind == k2))
  touch = hit & (dist < 0)
  on = supported & touch & ((found.path == 1) | (found.path == 2))
  k = collision_multi.MAXCON
  first = lambda x: jnp.zeros((k, 3), x.dtype).at[0].set(x)
  w1, w2 = jnp.where(on, w1, first(x1)), jnp.where(on, w2, first(x2))
  count = jnp.where(on, count, 1)
  diff = w1[0] - w2[0]
  nn = _norm(diff)
  ok = nn >= MINVAL
  normal = jnp.where(ok, diff / _safe(nn, ok), jnp.array([1.0, 0.0, 0.0], diff.dtype))
  slot_dist = jnp.where(count > 1, margin + d, margin + dist)
  return _Contact(dist=slot_dist, pos=0.5 * (w1 + w2), normal=jnp.broadcast_to(normal, (k, 3)),
                  tangent=jnp.zeros((k, 3), diff.dtype), valid=touch & (jnp.arange(k) < count))


def make_collider(kinds: Kinds, kmax: int, multi: bool = False, hulls: Hulls | None = None
                  ) -> Callable[..., Contacts]:
  """The collider of every convex pair whose first geom's type is in ``kinds[0]`` and whose
  second's is in ``kinds[1]``, for ``collision``:

    collider(type1, pos1, mat1, size1, type2, pos2, mat2, size2, margin, mesh1, mesh2, tol,
             active)

  with the shapes of ``collision_primitive`` (K = 1, or collision_multi.MAXCON with ``multi``:
  MuJoCo 4's multi-contact search for the pairs that have one); ``type1, type2`` () the geom
  types, ``mesh1, mesh2`` () int32 their meshes (read where a geom is a mesh) in ``hulls``, the
  model's hull tables (needed where a kind is MESH), ``tol`` () ``opt.ccd_tolerance``,
  ``active`` () bool whether to search at all (a pair that is not takes no GJK step and has no
  contact). An inactive slot holds the search's last estimate (finite, but not a signed
  distance where the geoms are apart)."""
  kinds = tuple(tuple(sorted(int(k) for k in set(ks))) for ks in kinds)

  def collide(type1, pos1, mat1, size1, type2, pos2, mat2, size2, margin, mesh1, mesh2,
              tol, active) -> Contacts:
    g1 = _geom(type1, pos1, mat1, size1, margin, mesh1, hulls)
    g2 = _geom(type2, pos2, mat2, size2, margin, mesh2, hulls)
    found = _search(_frozen(g1), _frozen(g2), kinds, kmax, jax.lax.stop_gradient(tol), active)
    if not multi:
      return _finish(jax.tree.map(lambda x: x[None], _contact_at(g1, g2, kinds, margin, found)),
                     1)
    return _finish(_multi_contacts(g1, g2, kinds, margin, found), collision_multi.MAXCON)

  return collide


def make_distance(kinds: Kinds, kmax: int, hulls: Hulls | None = None
                  ) -> Callable[..., tuple[jax.Array, jax.Array]]:
  """mj_geomDistanceCCD for pairs whose first geom's type is in ``kinds[0]`` and second's in
  ``kinds[1]`` (in the sensor's order, unflipped): GJK to the distance where the geoms lie
  apart, EPA's depth where they overlap.

    distance(type1, pos1, mat1, size1, type2, pos2, mat2, size2, cutoff, mesh1, mesh2, tol)

  (as ``make_collider``'s) returns the signed distance () clamped to ``cutoff`` and the segment
  fromto (6,) between the witness points on geom 1 and geom 2, zeros where nothing is closer
  than the cutoff."""
  kinds = tuple(tuple(sorted(int(k) for k in set(ks))) for ks in kinds)

  def distance(type1, pos1, mat1, size1, type2, pos2, mat2, size2, cutoff, mesh1, mesh2, tol):
    zero = jnp.zeros_like(cutoff)
    g1 = _geom(type1, pos1, mat1, size1, zero, mesh1, hulls)
    g2 = _geom(type2, pos2, mat2, size2, zero, mesh2, hulls)
    found = _search(_frozen(g1), _frozen(g2), kinds, kmax, jax.lax.stop_gradient(tol),
                    jnp.asarray(True), jax.lax.stop_gradient(cutoff))
    hit, dist, x1, x2 = _ccd(g1, g2, kinds, found, distance=True)
    near = hit & (dist < cutoff)
    return (jnp.where(near, dist, cutoff),
            jnp.where(near, jnp.concatenate([x1, x2]), jnp.zeros(6, x1.dtype)))

  return distance


PAIRS = frozenset((int(a), int(b)) for a, b in CONVEX | MULTI)
