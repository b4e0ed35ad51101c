"""Height field collision: MuJoCo's ``mjc_ConvexHField`` (``engine_collision_convex.c``).

A height field is a grid of nrow x ncol elevations over the rectangle [-size_x, size_x] x
[-size_y, size_y] of its frame; each grid cell is split into two triangles, and each triangle
is the top of a prism reaching down to the base, -size_base. Against a convex geom MuJoCo:

1. returns nothing unless the geom's bounding sphere and then its bounding box (from its support
   points along the frame's axes) overlap the field's box, both grown by the margin;
2. visits the cells under the bounding box grown by the margin, row by row, and in each cell its
   two prisms, skipping a prism whose three top vertices all lie below the geom's lowest point
   less the margin;
3. runs the native CCD (GJK, then EPA; ``collision_convex``) between the prism and the geom,
   each inflated by half the margin as in ``mjc_Convex``, so that a contact's dist is the true
   distance and contacts come up to the margin; at most ``mjMAXCONPAIR`` = 50 a pair.

A box or a mesh without a margin is a polytope like the prism, and EPA between polytopes stops
at the first support point it has seen before. MuJoCo knows a support point by the vertex
indices its support functions record, and the prism's records none: EPA stops as soon as the
box's or the mesh's vertex repeats, whichever prism vertex goes with it, often well short of the
deepest point (``collision_convex._epa``). Such a contact can be shallower than the true
penetration; it is MuJoCo's, and flexor's. Which vertex repeats can turn on the last bit of a
face normal perpendicular to an edge, where the edge's two ends tie; there the two engines may
stop on different faces (17 of 504 contacts in ``tests/test_collision_hfield.py``'s poses of a
box and a mesh).

This is MuJoCo 4.0's behaviour; the 3.x source raises the prism by the margin instead and does
not grow the sub-grid. flexor gives each candidate pair a fixed window of cells
(``contact_pairs.hfield_window``: the most its geom's bounding radius plus the compiled margin
can span), placed over the sub-grid at run time; the window's prisms outside the sub-grid are
masked out and take no CCD step. Under ``vmap`` the batch still carries every prism of every
window (see ``make_collider``).
"""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

from flexor import collision_convex, math
from flexor.collision_primitive import Contacts, Hulls, _Contact, _finish
from flexor.types import GeomType

# each prism's top triangle as grid points (row, column) relative to its cell's lower right
# point (r, c), in the order MuJoCo's sliding window leaves them: the cell's first triangle,
# then its second
_CORNERS = np.array([[[1, -1], [0, -1], [1, 0]], [[0, -1], [1, 0], [0, 0]]])


def _mul_t(mat: jax.Array, v: jax.Array) -> jax.Array:
  """mat' v with mju_mulMatTVec3's sums."""
  return mat[0] * v[0] + mat[1] * v[1] + mat[2] * v[2]


def _mul(mat: jax.Array, v: jax.Array) -> jax.Array:
  """mat v with mju_mulMatVec3's sums."""
  return mat[:, 0] * v[0] + mat[:, 1] * v[1] + mat[:, 2] * v[2]


def _window_prisms(window: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
  """The window's prisms in MuJoCo's visiting order (row, column, triangle): each one's cell
  (P, 2) as (row, column) offsets from the window's origin (columns from 1: a cell is named by
  its right edge, as MuJoCo's loop over c), and its top's grid points (P, 3, 2)."""
  ncols, nrows = window
  row, col, tri = (a.ravel() for a in np.meshgrid(np.arange(nrows), np.arange(1, ncols + 1),
                                                   np.arange(2), indexing="ij"))
  cell = np.stack([row, col], axis=1)
  return cell, cell[:, None, :] + _CORNERS[tri]


def make_collider(kinds: tuple[int, ...], kmax: int, window: tuple[int, int], k: int,
                  hulls: Hulls | None = None) -> Callable[..., Contacts]:
  """The collider of n height field pairs whose second geom's type is one of ``kinds``, visiting
  ``window`` (columns, rows) cells and returning ``k`` contact slots for each pair:

    collider(data, adr, hsize, nrow, ncol, pos1, mat1, type2, pos2, mat2, size2, rbound2,
             margin, mesh2, tol)

  ``data`` the model's hfield_data (shared); each other input has a leading axis n: ``adr,
  nrow, ncol`` () and ``hsize`` (4,) the height field's; ``pos1, mat1`` its frame; ``type2,
  pos2, mat2, size2, rbound2`` the geom's, ``mesh2`` () int32 its mesh in ``hulls`` (the model's
  hull tables, where it may be a mesh); ``margin`` () the pair's; ``tol`` () ``opt.ccd_tolerance``.

  All pairs' prisms that MuJoCo visits are searched in chunks of an eighth of the windows'
  prisms: GJK on each, then EPA only if some prism of the chunk needs it. Chunks without a
  visited prism are skipped by a ``lax.cond``; under ``vmap`` over worlds every chunk runs.
  """
  kinds = tuple(sorted({int(x) for x in kinds}))
  pair_kinds = ((int(GeomType.HFIELD),), kinds)
  cell, corner = _window_prisms(window)
  free = jax.lax.stop_gradient

  def prisms(data, adr, hsize, nrow, ncol, pos1, mat1, type2, pos2, mat2, size2, rbound2,
             margin, mesh2):
    """One pair's prisms (P of them, in MuJoCo's order) as CCD geoms, the geom in the height
    field's frame, and which prisms MuJoCo visits (P,)."""
    dtype = pos1.dtype
    s0, s1, s2, s3 = hsize[0], hsize[1], hsize[2], hsize[3]
    local_pos = _mul_t(mat1, pos2 - pos1)
    # mji_mulMatTMat3: the geom's frame in the height field's
    mat = jnp.outer(mat1[0], mat2[0]) + jnp.outer(mat1[1], mat2[1]) + jnp.outer(mat1[2], mat2[2])

    # early exits: bounding sphere, then the bounding box from six support points
    lp, radius = free(local_pos), free(rbound2 + margin)
    hs, mg = free(hsize), free(margin)
    near = ~((hs[0] < lp[0] - radius) | (-hs[0] > lp[0] + radius)
             | (hs[1] < lp[1] - radius) | (-hs[1] > lp[1] + radius)
             | (hs[2] < lp[2] - radius) | (-hs[3] > lp[2] + radius))
    bare = collision_convex._frozen(collision_convex._geom(type2, lp, mat, size2,
                                                           jnp.zeros((), dtype), mesh2, hulls))
    axes = jnp.concatenate([jnp.eye(3, dtype=dtype), -jnp.eye(3, dtype=dtype)])
    ext = jax.vmap(lambda d: collision_convex._support_point(bare, d, kinds))(axes)
    hi, lo = jnp.diagonal(ext[:3]), jnp.diagonal(ext[3:])
    near &= ~((lo[0] - mg > hs[0]) | (hi[0] + mg < -hs[0]) | (lo[1] - mg > hs[1])
              | (hi[1] + mg < -hs[1]) | (lo[2] - mg > hs[2]) | (hi[2] + mg < -hs[3]))

    # the sub-grid under the bounding box grown by the margin, and the window placed over it
    def grid(value, radius, n, rnd):
      index = rnd(jnp.clip((value + radius) / (2.0 * radius) * (n - 1), -1e9, 1e9))
      return index.astype(jnp.int32)
    cmin = jnp.maximum(grid(lo[0] - mg, hs[0], ncol, jnp.floor), 0)
    cmax = jnp.minimum(grid(hi[0] + mg, hs[0], ncol, jnp.ceil), ncol - 1)
    rmin = jnp.maximum(grid(lo[1] - mg, hs[1], nrow, jnp.floor), 0)
    rmax = jnp.minimum(grid(hi[1] + mg, hs[1], nrow, jnp.ceil), nrow - 1)
    c0 = jnp.clip(cmin, 0, jnp.maximum(ncol - 1 - window[0], 0))
    r0 = jnp.clip(rmin, 0, jnp.maximum(nrow - 1 - window[1], 0))
    r, c = r0 + cell[:, 0], c0 + cell[:, 1]
    visited = near & (r >= rmin) & (r < rmax) & (c > cmin) & (c <= cmax)

    # prism vertices (P, 6, 3): the bottom triangle at -size_base, the top at the elevations;
    # a prism wholly below the geom's lowest point (less the margin) is skipped
    row = jnp.minimum(r0 + corner[..., 0], nrow - 1)
    col = jnp.minimum(c0 + corner[..., 1], ncol - 1)
    dx, dy = (2.0 * s0) / (ncol - 1), (2.0 * s1) / (nrow - 1)
    x, y = dx * col - s0, dy * row - s1
    z = data[adr + row * ncol + col] * s2
    bottom = jnp.stack([x, y, jnp.broadcast_to(-s3, x.shape)], axis=-1)
    top = jnp.stack([x, y, z], axis=-1)
    vert = jnp.concatenate([bottom, top], axis=1)
    visited &= jnp.any(free(z) >= lo[2] - mg, axis=1)

    # both inflated by half the margin, as mjc_Convex's geoms; a prism's centre is the mean of
    # its vertices, summed in MuJoCo's order
    geom = collision_convex._geom(type2, local_pos, mat, size2, margin, mesh2)
    center = (((((vert[:, 0] + vert[:, 1]) + vert[:, 2]) + vert[:, 3]) + vert[:, 4]) + vert[:, 5]
              ) * (1.0 / 6.0)
    count = len(cell)
    field = collision_convex.Geom(
        kind=jnp.full(count, int(GeomType.HFIELD)), pos=center,
        mat=jnp.broadcast_to(jnp.eye(3, dtype=dtype), (count, 3, 3)),
        size=jnp.zeros((count, 3), dtype), vert=vert, mesh=jnp.zeros(count, jnp.int32),
        half_margin=jnp.broadcast_to(geom.half_margin, (count,)))
    return field, geom, visited

  def collide(data, adr, hsize, nrow, ncol, pos1, mat1, type2, pos2, mat2, size2, rbound2,
              margin, mesh2, tol) -> Contacts:
    field, geom, visited = jax.vmap(prisms, in_axes=(None,) + (0,) * 13)(
        data, adr, hsize, nrow, ncol, pos1, mat1, type2, pos2, mat2, size2, rbound2, margin,
        mesh2)
    n, count = visited.shape
    lanes = n * count
    # one lane per prism: (n, P, ...) -> (n P, ...), each pair's values repeated per prism
    field = jax.tree.map(lambda x: x.reshape((lanes,) + x.shape[2:]), field)
    geom = jax.tree.map(lambda x: jnp.repeat(x, count, axis=0), geom)
    tol, margin = free(jnp.repeat(tol, count)), jnp.repeat(margin, count)
    active = visited.reshape(-1)
    # the hull tables join the geom inside each lane's search, unbatched
    frozen = lambda g: collision_convex._frozen(g._replace(hulls=hulls))

    def search(on, f, g, t, mg):
      """The contacts of one chunk of lanes (B,), of which ``on`` are visited prisms."""
      gjks = jax.vmap(lambda f, g, t, a: collision_convex._search_gjk(
          frozen(f), frozen(g), pair_kinds, kmax, t, a))(f, g, t, on)

      def epa(_):
        return jax.vmap(lambda f, g, t, s: collision_convex._search_epa(
            frozen(f), frozen(g), pair_kinds, kmax, t, s))(f, g, t, gjks)

      def no_epa(_):
        dtype = pos1.dtype
        return (jnp.zeros((len(on), 3, 4, 3), dtype), jnp.zeros((len(on), 3), dtype),
                jnp.zeros(len(on), bool))

      found = jax.vmap(collision_convex._witness)(
          gjks, *jax.lax.cond(jnp.any(gjks.run_epa), epa, no_epa, None))
      c = jax.vmap(lambda f, g, mg, w: collision_convex._contact_at(
          f, g._replace(hulls=hulls), pair_kinds, mg, w))(
          f, g, mg, found)
      return c._replace(valid=c.valid & on)

    # The visited prisms in chunks of an eighth of the lanes: geoms resting on the field (the
    # common case) visit one chunk's worth.
    c = math.chunked(active, search, (field, geom, tol, margin), max(1, lanes // 8))
    # back to the pairs, and from the height field's frame to the world's
    c = jax.tree.map(lambda x: x.reshape((n, count) + x.shape[1:]), c)
    rotate = jax.vmap(jax.vmap(_mul, in_axes=(None, 0)))
    normal = rotate(mat1, c.normal)
    pos = rotate(mat1, c.pos) + pos1[:, None, :]
    return jax.vmap(lambda *a: _finish(_Contact(*a), k))(
        c.dist, pos, normal, jnp.zeros_like(normal), c.valid & visited)

  return collide
