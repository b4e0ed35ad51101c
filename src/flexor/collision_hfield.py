"""Height field collision: MuJoCo's ``mjc_ConvexHField`` (``engine_collision_convex.c``).

A height field is a grid of nrow x ncol elevations over the rectangle [-size_x, size_x] x
[-size_y, size_y] of its frame; each grid cell is split into two triangles, and each triangle
is the top of a prism reaching down to the base, -size_base. Against a convex geom MuJoCo:

1. returns nothing unless the geom's bounding sphere and then its bounding box (from its support
   points along the frame's axes) overlap the field's box;
2. visits the cells under the bounding box, row by row, and in each cell its two prisms, skipping
   a prism whose three top vertices all lie below the geom's lowest point;
3. runs the native CCD (GJK, then EPA; ``collision_convex``) between the prism and the geom,
   each inflated by the margin (the prism's top raised by it, the geom by half of it), and keeps
   every penetrating one as a contact, up to ``mjMAXCONPAIR`` = 50.

flexor visits a fixed window of cells per candidate pair (``contact_pairs.hfield_window``: the
most a geom of its bounding radius can span), placed over the sub-grid at run time; the window's
prisms outside the sub-grid are masked out. Every prism of the window runs the CCD, so a pair's
cost is that of 2 * columns * rows convex pairs, whether the geom is near the field or not.
"""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

from flexor import collision_convex
from flexor.collision_primitive import Contacts, _Contact, _finish
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


def make_collider(kinds: tuple[int, ...], kmax: int, window: tuple[int, int], k: int
                  ) -> Callable[..., Contacts]:
  """The collider of height field pairs whose second geom's type is one of ``kinds``, visiting
  ``window`` (columns, rows) cells and returning ``k`` contact slots:

    collider(data, adr, hsize, nrow, ncol, pos1, mat1, type2, pos2, mat2, size2, rbound2,
             margin, vert2, tol)

  ``data`` the model's hfield_data (shared, not batched); ``adr, nrow, ncol`` () and ``hsize``
  (4,) the height field's; ``pos1, mat1`` its frame; ``type2, pos2, mat2, size2, rbound2`` the
  geom's, ``vert2`` (H, 3) its hull vertices if it may be a mesh (else None); ``margin`` () the
  pair's; ``tol`` () ``opt.ccd_tolerance``.
  """
  kinds = tuple(sorted({int(x) for x in kinds}))
  pair_kinds = ((int(GeomType.HFIELD),), kinds)
  cell, corner = _window_prisms(window)
  free = jax.lax.stop_gradient

  def collide(data, adr, hsize, nrow, ncol, pos1, mat1, type2, pos2, mat2, size2, rbound2,
              margin, vert2, tol) -> Contacts:
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
    bare = collision_convex._geom(type2, lp, free(mat), free(size2),
                                  None if vert2 is None else free(vert2), jnp.zeros((), dtype))
    axes = jnp.concatenate([jnp.eye(3, dtype=dtype), -jnp.eye(3, dtype=dtype)])
    ext = jax.vmap(lambda d: collision_convex._support_point(bare, d, kinds))(axes)
    hi, lo = jnp.diagonal(ext[:3]), jnp.diagonal(ext[3:])
    near &= ~((lo[0] - mg > hs[0]) | (hi[0] + mg < -hs[0]) | (lo[1] - mg > hs[1])
              | (hi[1] + mg < -hs[1]) | (lo[2] - mg > hs[2]) | (hi[2] + mg < -hs[3]))

    # the sub-grid under the bounding box, and the window placed over it
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

    # prism vertices (P, 6, 3): the bottom triangle at -size_base, the top at the elevations
    # raised by the margin
    row = jnp.minimum(r0 + corner[..., 0], nrow - 1)
    col = jnp.minimum(c0 + corner[..., 1], ncol - 1)
    dx, dy = (2.0 * s0) / (ncol - 1), (2.0 * s1) / (nrow - 1)
    x, y = dx * col - s0, dy * row - s1
    z = data[adr + row * ncol + col] * s2
    bottom = jnp.stack([x, y, jnp.broadcast_to(-s3, x.shape)], axis=-1)
    top = jnp.stack([x, y, z], axis=-1)
    prism = jnp.concatenate([bottom, top], axis=1)
    visited &= jnp.any(free(z) >= lo[2] - mg, axis=1)

    geom = collision_convex._geom(type2, local_pos, mat, size2, vert2, margin)
    eye = jnp.eye(3, dtype=dtype)

    def one(vert, active):
      center = ((((vert[0] + vert[1]) + vert[2]) + vert[3]) + vert[4] + vert[5]) * (1.0 / 6.0)
      field = collision_convex.Geom(kind=jnp.asarray(GeomType.HFIELD), pos=center, mat=eye,
                                    size=jnp.zeros(3, dtype), vert=vert,
                                    half_margin=geom.half_margin)
      return collision_convex._contact(field, geom, pair_kinds, margin, kmax, tol, active)

    found = jax.vmap(one)(prism, visited)
    normal = jax.vmap(lambda n: _mul(mat1, n))(found.normal)
    pos = jax.vmap(lambda p: _mul(mat1, p) + pos1)(found.pos)
    return _finish(_Contact(dist=found.dist, pos=pos, normal=normal,
                            tangent=jnp.zeros_like(normal), valid=found.valid & visited), k)

  return collide
