"""Mesh assets: file loaders (STL, OBJ, MSH) and MuJoCo's mesh processing (host side, numpy).

MuJoCo moves every mesh into its own frame when compiling: after ``refpos``/``refquat``/``scale``
it computes the mesh's centre of mass and principal axes of inertia (per unit density), then
translates and rotates the vertices so that the mesh frame is that principal frame. A mesh geom's
compiled ``geom_pos``/``geom_quat`` are its MJCF frame composed with that offset, and its
``geom_size`` is the half-extent of the processed vertices. This module repeats
``mjCMesh::Process`` (``src/user/user_mesh.cc``): face areas and centroids, the volume and centre
of mass of the pyramids from the surface centroid, second moments about the centre of mass,
principal axes by the compiler's ``mjuu_eig3``, and the equivalent inertia box.

Face sums are accumulated sequentially (``np.cumsum``) and every per-face term is evaluated in
MuJoCo's operation order, so results match MuJoCo's double-precision computation to rounding.
The parser reads files and passes bytes; nothing here opens paths.
"""

from __future__ import annotations

import dataclasses
import math
import re
import struct
from typing import Sequence

import numpy as np

from flexor.mjcf import frames, inertia
from flexor.types import GeomType

_MINVAL = 1e-15  # mjMINVAL
_EPS = 1e-14  # mjEPS
_MESH_EIG_TOL = 1e-7  # mjCMesh::Process stops its Jacobi sweep at 1e-7 of the largest moment
INERTIA_MODES = ("convex", "exact", "legacy", "shell")


@dataclasses.dataclass(frozen=True)
class MeshInfo:
  """A processed mesh, as MuJoCo's compiler leaves it.

  Attributes:
    name: the asset's name.
    vert: (nvert, 3) float64 vertices in the mesh frame (centred at the centre of mass and
      aligned with the principal axes); MuJoCo's ``mesh_vert`` is ``vert.astype(float32)``.
    face: (nface, 3) int32 vertex indices as the file gives them (winding reversed by a
      mirroring scale), or the convex hull's outward triangles for a mesh given without faces
      (qhull's, as MuJoCo takes them).
    pos: (3,) the mesh frame's origin (centre of mass) in the asset's coordinates after
      refpos/refquat/scale: MuJoCo's mesh offset, composed into mesh geoms' frames.
    quat: (4,) the mesh frame's orientation (principal axes) in those coordinates.
    volume: volume, or surface area for ``inertia="shell"``: a mesh geom's mass is density times
      this.
    inertia: (3,) principal second moments per unit density (volume * length^2), decreasing.
    inertia_box: (3,) half-sizes of the box with the same volume-normalized inertia: a mesh
      geom's inertia is that of this box with the geom's mass (MuJoCo's ``boxsz``).
    aamm: (6,) axis-aligned bounds of ``vert`` in the mesh frame: (min xyz, max xyz).
    inertia_mode: the mesh's ``inertia`` attribute.
    hull: (nhullface, 3) the convex hull's outward triangles where processing computed it
      (convex inertia, or a mesh given without faces), else None.
    vert_asset: (nvert, 3) the vertices as given (float32 as stored), before refpos, refquat
      and scale: MuJoCo runs qhull and merges coplanar hull faces into polygons on these.
    maxhullvert: the most vertices the convex hull may have (``maxhullvert``; -1: no limit).
  """

  name: str
  vert: np.ndarray
  face: np.ndarray
  pos: np.ndarray
  quat: np.ndarray
  volume: float
  inertia: np.ndarray
  inertia_box: np.ndarray
  aamm: np.ndarray
  inertia_mode: str
  hull: np.ndarray | None = None
  vert_asset: np.ndarray | None = None
  maxhullvert: int = -1


def parse_stl(data: bytes, name: str = "") -> tuple[np.ndarray, np.ndarray]:
  """Triangles of an STL file: binary (as MuJoCo reads it) or ASCII (``solid ... facet``).

  MuJoCo 4.0 rejects ASCII STL ("perhaps this is an ASCII file?"); flexor reads it, to the same
  mesh as the equivalent binary file. A binary file is recognised by its exact size
  (84 + 50 nface bytes), as MuJoCo checks it.

  Returns:
    (vert (3 nface, 3) float32, face (nface, 3) int32): three vertices per facet, repeated
    vertices not yet merged.
  Raises:
    ValueError: a malformed file, or more than 200000 or fewer than 1 facets (MuJoCo's limits).
  """
  if len(data) >= 84:
    nface = struct.unpack_from("<i", data, 80)[0]
    if 0 < nface and len(data) == 84 + 50 * nface:
      rec = np.frombuffer(data, dtype=np.dtype([("n", "<f4", 3), ("v", "<f4", (3, 3)),
                                                ("a", "<u2")]), count=nface, offset=84)
      return _check_stl(rec["v"].reshape(-1, 3).astype(np.float32), name)
  text = data.decode("ascii", errors="replace")
  if text.lstrip().startswith("solid"):
    nums = re.findall(r"^\s*vertex\s+(\S+)\s+(\S+)\s+(\S+)", text, flags=re.MULTILINE)
    if nums and len(nums) % 3 == 0:
      try:
        vert = np.array([[float(x) for x in v] for v in nums], dtype=np.float64)
      except ValueError:
        raise ValueError(f"STL mesh '{name}': malformed vertex line") from None
      return _check_stl(vert.astype(np.float32), name)
  raise ValueError(f"STL mesh '{name}': neither a binary STL (84-byte header, 50 bytes per "
                   "facet) nor an ASCII STL with 'vertex' lines")


def _check_stl(vert: np.ndarray, name: str) -> tuple[np.ndarray, np.ndarray]:
  nface = len(vert) // 3
  if nface < 1 or nface > 200000:
    raise ValueError(f"STL mesh '{name}': number of faces should be between 1 and 200000")
  if np.any(np.abs(vert) > 2.0 ** 30):
    raise ValueError(f"STL mesh '{name}': vertex exceeds maximum bounds (2^30)")
  return vert, np.arange(3 * nface, dtype=np.int32).reshape(nface, 3)


def parse_obj(data: bytes, name: str = "") -> tuple[np.ndarray, np.ndarray]:
  """Vertices (``v``) and faces (``f``) of a Wavefront OBJ file; other records are ignored.

  Faces may use ``v``, ``v/vt``, ``v//vn`` or ``v/vt/vn`` and negative (relative) indices.
  Quads are split along their strictly shorter diagonal (else along vertices 1-3) as
  tinyobjloader, MuJoCo's OBJ reader, does; larger polygons are fan-triangulated from their
  first vertex, which agrees with tinyobjloader on the convex polygon tested but may differ on
  non-convex ones.

  Returns:
    (vert (nvert, 3) float32, face (nface, 3) int32).
  Raises:
    ValueError: malformed records, out-of-range indices or faces with fewer than 3 vertices.
  """
  verts: list[list[float]] = []
  faces: list[list[int]] = []
  for lineno, line in enumerate(data.decode("utf-8", errors="replace").splitlines(), 1):
    tok = line.split()
    if not tok or tok[0].startswith("#"):
      continue
    try:
      if tok[0] == "v":
        verts.append([float(x) for x in tok[1:4]])
        if len(verts[-1]) != 3:
          raise ValueError
      elif tok[0] == "f":
        idx = []
        for item in tok[1:]:
          i = int(item.split("/")[0])
          idx.append(i - 1 if i > 0 else len(verts) + i)
        if len(idx) < 3 or min(idx) < 0 or max(idx) >= len(verts):
          raise ValueError
        faces.extend(_triangulate(idx, verts))
    except ValueError:
      raise ValueError(f"OBJ mesh '{name}', line {lineno}: malformed '{tok[0]}' record") from None
  vert = np.array(verts, dtype=np.float64).reshape(-1, 3).astype(np.float32)
  return vert, np.array(faces, dtype=np.int32).reshape(-1, 3)


def _triangulate(idx: list[int], verts: list[list[float]]) -> list[list[int]]:
  if len(idx) == 3:
    return [idx]
  if len(idx) == 4:
    # tinyobjloader: split along the strictly shorter diagonal (in float), else along 1-3
    v = [[np.float32(x) for x in verts[i]] for i in idx]
    e02 = [v[2][k] - v[0][k] for k in range(3)]
    e13 = [v[3][k] - v[1][k] for k in range(3)]
    sqr02 = e02[0] * e02[0] + e02[1] * e02[1] + e02[2] * e02[2]
    sqr13 = e13[0] * e13[0] + e13[1] * e13[1] + e13[2] * e13[2]
    if sqr02 < sqr13:
      return [[idx[0], idx[1], idx[2]], [idx[0], idx[2], idx[3]]]
    return [[idx[0], idx[1], idx[3]], [idx[1], idx[2], idx[3]]]
  return [[idx[0], idx[k], idx[k + 1]] for k in range(1, len(idx) - 1)]


def parse_msh(data: bytes, name: str = "") -> tuple[np.ndarray, np.ndarray]:
  """MuJoCo's binary MSH: int32 nvert, nnormal, ntexcoord, nface; then float32 vertices,
  normals, texcoords and int32 faces.

  Returns:
    (vert (nvert, 3) float32, face (nface, 3) int32); nface may be 0.
  Raises:
    ValueError: bad header sizes or a file size that does not match them.
  """
  if len(data) < 16:
    raise ValueError(f"MSH mesh '{name}': missing header")
  nv, nn, nt, nf = struct.unpack_from("<4i", data, 0)
  if nv < 4 or nf < 0 or nn < 0 or nt < 0 or (nn and nn != nv) or (nt and nt != nv):
    raise ValueError(f"MSH mesh '{name}': invalid sizes in header")
  if len(data) != 16 + 4 * (3 * nv + 3 * nn + 2 * nt + 3 * nf):
    raise ValueError(f"MSH mesh '{name}': unexpected file size")
  vert = np.frombuffer(data, dtype="<f4", count=3 * nv, offset=16).reshape(nv, 3)
  offset = 16 + 4 * (3 * nv + 3 * nn + 2 * nt)
  face = np.frombuffer(data, dtype="<i4", count=3 * nf, offset=offset).reshape(nf, 3)
  if nf and (face.min() < 0 or face.max() >= nv):
    raise ValueError(f"MSH mesh '{name}': face references a missing vertex")
  return vert.astype(np.float32), face.astype(np.int32)


def _merge_repeated(vert: np.ndarray, face: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """MuJoCo's ProcessVertices with remove_repeated: identical float vertices merged, numbered in
  order of first appearance (0.0 and -0.0 are the same vertex, the first one seen is kept)."""
  if not np.all(np.isfinite(vert)):
    raise ValueError("mesh vertex coordinates must be finite")
  # adding 0.0 turns -0.0 into 0.0, so equal floats have equal bits
  bits = np.ascontiguousarray(vert + np.float32(0.0)).view(np.uint32)
  order = np.lexsort((bits[:, 2], bits[:, 1], bits[:, 0]))  # stable: first occurrence leads
  sorted_bits = bits[order]
  starts = np.ones(len(order), dtype=bool)
  starts[1:] = np.any(sorted_bits[1:] != sorted_bits[:-1], axis=1)
  group = np.empty(len(order), dtype=np.int64)
  group[order] = np.cumsum(starts) - 1
  first = order[starts]
  rank = np.empty(len(first), dtype=np.int32)
  rank[np.argsort(first, kind="stable")] = np.arange(len(first), dtype=np.int32)
  return vert[np.sort(first)], rank[group][face]


def _triangles(a: np.ndarray, b: np.ndarray, c: np.ndarray):
  """MuJoCo's triangle(): (area (n,), unit normal (n, 3), centroid (n, 3)) of triangles a, b, c.

  Degenerate faces (normal shorter than 1e-15) have area 0 and keep their unnormalized normal.
  """
  center = np.stack([(a[:, k] + b[:, k] + c[:, k]) / 3 for k in range(3)], axis=1)
  e1, e2 = b - a, c - a
  n = np.stack([e1[:, 1] * e2[:, 2] - e1[:, 2] * e2[:, 1],
                e1[:, 2] * e2[:, 0] - e1[:, 0] * e2[:, 2],
                e1[:, 0] * e2[:, 1] - e1[:, 1] * e2[:, 0]], axis=1)
  length = np.sqrt(n[:, 0] * n[:, 0] + n[:, 1] * n[:, 1] + n[:, 2] * n[:, 2])
  small = length < _MINVAL
  safe = np.where(small, 1.0, length)
  normal = np.where(small[:, None], n, n / safe[:, None])
  return np.where(small, 0.0, 0.5 * length), normal, center


def _seqsum(x: np.ndarray) -> np.ndarray:
  """Sequential (C loop order) sum over the first axis."""
  return np.cumsum(x, axis=0)[-1] if len(x) else np.zeros(x.shape[1:])


def _transform(vert: np.ndarray, refpos: Sequence[float], refquat: Sequence[float],
               scale: Sequence[float]) -> np.ndarray:
  """ApplyTransformations: subtract refpos, rotate into refquat's frame, then scale."""
  v = vert.copy()
  if any(float(p) != 0 for p in refpos):
    v = v - np.asarray(refpos, dtype=np.float64)
  q = [float(x) for x in refquat]
  if q != [1.0, 0.0, 0.0, 0.0]:
    m = frames.quat2mat(frames.normvec(q)[0])
    v = np.stack([m[0] * v[:, 0] + m[3] * v[:, 1] + m[6] * v[:, 2],
                  m[1] * v[:, 0] + m[4] * v[:, 1] + m[7] * v[:, 2],
                  m[2] * v[:, 0] + m[5] * v[:, 1] + m[8] * v[:, 2]], axis=1)
  if any(float(s) != 1 for s in scale):
    v = v * np.asarray(scale, dtype=np.float64)
  return v


def load_mesh(data: bytes, name: str, *, content_type: str | None = None,
              scale: Sequence[float] = (1.0, 1.0, 1.0),
              refpos: Sequence[float] = (0.0, 0.0, 0.0),
              refquat: Sequence[float] = (1.0, 0.0, 0.0, 0.0),
              inertia_mode: str = "legacy", maxhullvert: int = -1) -> MeshInfo:
  """Loads and processes a mesh file as MuJoCo's compiler does (mjCMesh::Compile).

  Args:
    data: the file's bytes.
    name: the asset name (for messages) or file name; its extension picks the format unless
      ``content_type`` is given.
    content_type: ``model/stl``, ``model/obj`` or ``model/vnd.mujoco.msh``.
    scale: (3,) the mesh's ``scale``; a negative product mirrors the mesh and flips the faces'
      winding, as MuJoCo does.
    refpos: (3,) ``refpos``, subtracted from the vertices before rotation and scaling.
    refquat: (4,) ``refquat``; vertices are expressed in this frame.
    inertia_mode: the mesh's ``inertia`` attribute; MuJoCo 4.0's default is ``legacy`` (every
      pyramid counted with positive volume). ``exact`` uses signed volumes, ``shell`` puts the
      mass on the surface, ``convex`` takes the inertia of the convex hull (see
      :func:`convex_hull`).
    maxhullvert: ``maxhullvert``, the most vertices the convex hull may have (-1: no limit).
  Returns:
    The processed :class:`MeshInfo`.
  Raises:
    ValueError: an unknown format or mode, a malformed file, or a mesh MuJoCo rejects (fewer
      than 4 vertices, too small area or volume, non-physical inertia, a flat point cloud).
  """
  kind = content_type or {".stl": "model/stl", ".obj": "model/obj",
                          ".msh": "model/vnd.mujoco.msh"}.get(name[name.rfind("."):].lower())
  if kind == "model/stl":
    vert, face = parse_stl(data, name)
    vert, face = _merge_repeated(vert, face)
  elif kind == "model/obj":
    vert, face = parse_obj(data, name)
  elif kind == "model/vnd.mujoco.msh":
    vert, face = parse_msh(data, name)
  else:
    raise ValueError(f"mesh '{name}': unknown or unsupported mesh file type; expected .stl, "
                     ".obj or .msh (or content_type)")
  return process_mesh(vert, face, name, scale=scale, refpos=refpos, refquat=refquat,
                      inertia_mode=inertia_mode, maxhullvert=maxhullvert)


def process_mesh(vert: np.ndarray, face: np.ndarray, name: str, *,
                 scale: Sequence[float] = (1.0, 1.0, 1.0),
                 refpos: Sequence[float] = (0.0, 0.0, 0.0),
                 refquat: Sequence[float] = (1.0, 0.0, 0.0, 0.0),
                 inertia_mode: str = "legacy", maxhullvert: int = -1) -> MeshInfo:
  """mjCMesh::Process for vertices (nvert, 3) (float32 as stored, or as given in ``<mesh
  vertex>``) and faces (nface, 3); arguments as :func:`load_mesh`."""
  if inertia_mode not in INERTIA_MODES:
    raise ValueError(f"mesh '{name}': inertia must be one of {INERTIA_MODES}")
  vert = np.asarray(vert, dtype=np.float32).astype(np.float64).reshape(-1, 3)
  face = np.asarray(face, dtype=np.int32).reshape(-1, 3).copy()
  if len(vert) < 4:
    raise ValueError(f"mesh '{name}': at least 4 vertices required")
  if not np.all(np.isfinite(vert)):
    raise ValueError(f"mesh '{name}': vertex coordinates must be finite")
  if len(face) and (face.min() < 0 or face.max() >= len(vert)):
    raise ValueError(f"mesh '{name}': a face references a missing vertex")
  if float(scale[0]) * float(scale[1]) * float(scale[2]) <= 0:
    face = face[:, [0, 2, 1]]
  given = vert
  vert = _transform(vert, refpos, refquat, scale)
  hull = (convex_hull(given, name, final=vert, maxhullvert=maxhullvert)
          if inertia_mode == "convex" or not len(face) else None)
  if not len(face):  # a point cloud: MuJoCo takes the hull's triangles as the mesh's faces
    face = hull
  a, b, c = vert[face[:, 0]], vert[face[:, 1]], vert[face[:, 2]]
  if inertia_mode == "exact":
    _check_orientation(face, a, b, c, name)

  area, normal, center = _triangles(a, b, c)
  total_area = _seqsum(area)
  if total_area < _MINVAL:
    raise ValueError(f"mesh '{name}': mesh surface area is too small")
  facecen = _seqsum(area[:, None] * center) / total_area

  # volume and centre of mass of the pyramids from the surface centroid, over the hull's
  # triangles for convex inertia
  if inertia_mode == "convex":
    a, b, c = vert[hull[:, 0]], vert[hull[:, 1]], vert[hull[:, 2]]
    area, normal, center = _triangles(a, b, c)
  if inertia_mode == "shell":
    weight = area
  else:
    d = center - facecen
    weight = (d[:, 0] * normal[:, 0] + d[:, 1] * normal[:, 1] + d[:, 2] * normal[:, 2]) * area / 3
    if inertia_mode == "legacy":
      weight = np.abs(weight)
  total = _seqsum(weight)
  if total < _MINVAL:
    if inertia_mode == "shell":
      raise ValueError(f"mesh '{name}': mesh surface area is too small")
    if total < 0:
      raise ValueError(f"mesh '{name}': mesh volume is negative (misoriented triangles)")
    raise ValueError(f"mesh '{name}': mesh volume is too small; try inertia=\"shell\"")
  com = _seqsum(weight[:, None] * (center * 3.0 / 4.0 + facecen / 4.0)) / total

  volume, second = _second_moments(vert - com, hull if inertia_mode == "convex" else face,
                                   inertia_mode)
  ev, quat = inertia.eig3([second[0], second[3], second[4], second[3], second[1], second[5],
                           second[4], second[5], second[2]], tol=_MESH_EIG_TOL)
  if ev[2] <= 0:
    raise ValueError(f"mesh '{name}': eigenvalue of mesh inertia must be positive")
  atol, rtol = 1e-9, 1e-6
  if (ev[0] + ev[1] < ev[2] * (1.0 - rtol) - atol or ev[0] + ev[2] < ev[1] * (1.0 - rtol) - atol
      or ev[1] + ev[2] < ev[0] * (1.0 - rtol) - atol):
    raise ValueError(f"mesh '{name}': eigenvalues of mesh inertia violate A + B >= C")
  box = np.array([0.5 * np.sqrt(6 * (ev[1] + ev[2] - ev[0]) / volume),
                  0.5 * np.sqrt(6 * (ev[0] + ev[2] - ev[1]) / volume),
                  0.5 * np.sqrt(6 * (ev[0] + ev[1] - ev[2]) / volume)])

  # MuJoCo's Rotate: vertices times the matrix of the inverse rotation
  m = frames.quat2mat([quat[0], -quat[1], -quat[2], -quat[3]])
  v = vert - com
  v = np.stack([m[0] * v[:, 0] + m[1] * v[:, 1] + m[2] * v[:, 2],
                m[3] * v[:, 0] + m[4] * v[:, 1] + m[5] * v[:, 2],
                m[6] * v[:, 0] + m[7] * v[:, 1] + m[8] * v[:, 2]], axis=1)
  aamm = np.concatenate([np.minimum(v.min(axis=0), 1e10), np.maximum(v.max(axis=0), -1e10)])
  return MeshInfo(name=name, vert=v, face=face, pos=np.asarray(com, dtype=np.float64),
                  quat=np.asarray(quat), volume=float(volume), inertia=np.asarray(ev),
                  inertia_box=box, aamm=aamm, inertia_mode=inertia_mode, hull=hull,
                  vert_asset=given, maxhullvert=maxhullvert)


def hull_extrema(vert: np.ndarray, globalid: np.ndarray) -> np.ndarray:
  """``mesh_extrema``: for each direction (cx, cy, cz) in {-1, 0, 1}^3 (cx slowest), the local
  id of the first hull vertex (graph order ``globalid``) furthest along it, in the float32
  arithmetic of MuJoCo's compiler, (27,) int32."""
  v = np.asarray(vert, np.float32)[globalid]
  grid = np.array(np.meshgrid([-1, 0, 1], [-1, 0, 1], [-1, 0, 1], indexing="ij"),
                  np.float32).reshape(3, -1)
  dot = (v[:, :1] * grid[0] + v[:, 1:2] * grid[1]) + v[:, 2:] * grid[2]
  return np.argmax(dot, axis=0).astype(np.int32)


_POLYGON_ANGLE_TOL = 0.01  # rad: hull faces whose normals round to the same angles merge


def _polygon_key(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> tuple[float, float] | None:
  """MeshPolygonKey: the triangle's normal as (azimuth, polar) angles rounded to multiples of
  0.01 rad, or None for a degenerate triangle."""
  n = np.cross(b - a, c - a)
  norm = math.sqrt((n[0] * n[0] + n[1] * n[1]) + n[2] * n[2])
  if norm < _MINVAL:
    return None
  n = n / norm + 0.0
  # std::round: halves away from zero (Python's round takes them to even)
  rnd = lambda x: math.copysign(math.floor(abs(x) + 0.5), x)
  if abs(n[2]) > 1.0 - 1e-7:
    return 0.0, (rnd(math.pi / _POLYGON_ANGLE_TOL) if n[2] < 0 else 0.0)
  return (rnd(math.atan2(n[1], n[0]) / _POLYGON_ANGLE_TOL),
          rnd(math.acos(n[2]) / _POLYGON_ANGLE_TOL))


class _Polygon:
  """MuJoCo's MeshPolygon: the boundary edges of a set of same-key triangles, each edge tagged
  with the connected piece (island) it belongs to."""

  def __init__(self, face: tuple[int, int, int]):
    a, b, c = face
    self.edges = [(a, b), (b, c), (c, a)]
    self.islands = [0, 0, 0]
    self.nisland = 1

  def insert(self, face: tuple[int, int, int]) -> None:
    """InsertFace: a shared edge (reversed in the polygon) is removed, new ones are added."""
    island, add = -1, []
    for u, v in ((face[0], face[1]), (face[1], face[2]), (face[2], face[0])):
      k = next((i for i, e in enumerate(self.edges) if e == (v, u)), None)
      if k is None:
        add.append((u, v))
        continue
      other = self.islands[k]
      del self.edges[k], self.islands[k]
      if island == -1:
        island = other
      elif other != island:
        self.nisland -= 1
        keep, drop = min(island, other), max(island, other)
        self.islands = [keep if i == drop else i - (i > drop) for i in self.islands]
        island = keep
    if island == -1:
      island = self.nisland
      self.nisland += 1
    self.edges += add
    self.islands += [island] * len(add)

  def paths(self) -> list[list[int]]:
    """Paths: each island's boundary loop, following the edges from its first edge. The
    source's shortcut for three edges (their first vertices in list order) is not MuJoCo
    4.0.1's: where merged triangles leave a three-edge boundary it traces the loop too."""
    out = []
    for i in range(self.nisland):
      start = next((e for e, j in zip(self.edges, self.islands) if j == i), None)
      if start is None:
        continue
      path = list(start)
      for _ in self.edges:
        k = next((k for k in range(1, len(self.edges))
                  if self.islands[k] == i and self.edges[k][0] == path[-1]), None)
        if k is None:
          continue
        if self.edges[k][1] == path[0]:
          out.append(path)
          break
        path.append(self.edges[k][1])
    return out


def _polygon_hash(key: tuple[float, float]) -> int:
  """MuJoCo 4.0.1's PairHash of a polygon key, read from its machine code (mjCMesh::Process):
  boost's hash_combine of the two angles' std::hash (libc++: a double's bits, 0 for +-0),
  h1 ^ (h2 + 0x9e3779b9 + (h1 << 6) + (h1 >> 2)) modulo 2^64."""
  bits = lambda x: 0 if x == 0.0 else int(np.float64(x).view(np.uint64))
  h1, h2 = bits(key[0]), bits(key[1])
  return h1 ^ ((h2 + 0x9E3779B9 + (h1 << 6) + (h1 >> 2)) & 0xFFFFFFFFFFFFFFFF)


def _next_prime(n: int) -> int:
  """The smallest prime >= n (libc++'s bucket counts)."""
  while n < 2 or any(n % k == 0 for k in range(2, math.isqrt(n) + 1)):
    n += 1
  return n


def _hash_map_order(hashes: list[int]) -> list[int]:
  """The order libc++'s std::unordered_map (MuJoCo's builds) visits distinct keys with these
  hashes, inserted in list order (max_load_factor 1): a node goes first in its bucket's run,
  or first in the list where its bucket is empty; the table grows before an insert that
  would exceed one node a bucket, to max(2 n + 1 (n a power of 2 above 2: 2 n), size + 1)
  buckets (a prime above that, or 2), relinking its list as __do_rehash does."""
  nxt: dict[int, int | None] = {-1: None}  # -1: the list's head
  buckets: list[int | None] = []
  slot = lambda h, n: h & (n - 1) if not n & (n - 1) else h % n

  def rehash(n: int) -> None:
    nonlocal buckets
    buckets = [None] * n
    pp, cp = -1, nxt[-1]
    if cp is None:
      return
    prev = slot(hashes[cp], n)
    buckets[prev] = pp
    pp, cp = cp, nxt[cp]
    while cp is not None:
      b = slot(hashes[cp], n)
      if b == prev:
        pp = cp
      elif buckets[b] is None:
        buckets[b], pp, prev = pp, cp, b
      else:  # splice cp after the head of its bucket's run
        nxt[pp], nxt[cp] = nxt[cp], nxt[buckets[b]]
        nxt[buckets[b]] = cp
      cp = nxt[pp]

  for i, h in enumerate(hashes):
    n = len(buckets)
    if n == 0 or i + 1 > n:
      grow = max(2 * n + (not (n > 2 and not n & (n - 1))), i + 1)
      grow = 2 if grow == 1 else (grow if not grow & (grow - 1) else _next_prime(grow))
      if grow > n:
        rehash(grow)
    b = slot(h, len(buckets))
    before = buckets[b]
    if before is None:
      nxt[i], nxt[-1] = nxt[-1], i
      buckets[b] = -1
      if nxt[i] is not None:
        buckets[slot(hashes[nxt[i]], len(buckets))] = i
    else:
      nxt[i], nxt[before] = nxt[before], i
  order, k = [], nxt[-1]
  while k is not None:
    order.append(k)
    k = nxt[k]
  return order


def hull_polygons(vert_asset: np.ndarray, vert: np.ndarray, hull: np.ndarray
                  ) -> tuple[list[list[int]], np.ndarray]:
  """MakePolygons: the hull's triangles grouped by rounded normal (of the vertices as given,
  before refpos, refquat and scale, as MuJoCo 4.0.1 does: an uneven scale turns them) into
  polygons, each a vertex loop counter-clockwise about its outward normal, and the unit normals
  (npoly, 3) of the loops in the final frame (MakePolygonNormals: Newell's, in MuJoCo 4.0.1).

  The groups come in the order MuJoCo's hash map visits them (:func:`_hash_map_order`), and
  each loop starts where MuJoCo's does given qhull's triangles in qhull's order
  (:func:`convex_hull`): the multi-contact search clips polygons from their first vertex and
  picks its quadrilateral by a search that starts there.
  """
  groups: dict[tuple[float, float], _Polygon] = {}
  for face in np.asarray(hull).tolist():
    key = _polygon_key(*(vert_asset[i] for i in face))
    if key is None:
      continue
    if key in groups:
      groups[key].insert(tuple(face))
    else:
      groups[key] = _Polygon(tuple(face))
  keys = list(groups)
  order = [keys[i] for i in _hash_map_order([_polygon_hash(k) for k in keys])]
  loops = [path for key in order for path in groups[key].paths() if len(path) >= 3]
  normals = np.zeros((len(loops), 3))
  for i, loop in enumerate(loops):
    # Newell's normal, summed in loop order (MuJoCo 4.0.1's bits; a merged polygon need not be
    # flat, and its first three vertices can turn against the rest)
    a = vert[np.asarray(loop)]
    b = np.roll(a, -1, axis=0)
    n = [0.0, 0.0, 0.0]
    for (ax, ay, az), (bx, by, bz) in zip(a.tolist(), b.tolist()):
      n[0] += (ay - by) * (az + bz)
      n[1] += (az - bz) * (ax + bx)
      n[2] += (ax - bx) * (ay + by)
    norm = math.sqrt((n[0] * n[0] + n[1] * n[1]) + n[2] * n[2])
    normals[i] = np.divide(n, norm) if norm >= _EPS else (1.0, 0.0, 0.0)
  return loops, normals


def _quad_area(a, b, c, d) -> float:
  """Area of the quadrilateral a b c d: half the norm of its diagonals' cross product."""
  u, w = a - c, b - d
  x = (u[1] * w[2] - u[2] * w[1], u[2] * w[0] - u[0] * w[2], u[0] * w[1] - u[1] * w[0])
  return math.sqrt((x[0] * x[0] + x[1] * x[1]) + x[2] * x[2]) * 0.5


def polygon_quad(loop: np.ndarray, a: int) -> list[int]:
  """The positions in a polygon's vertex loop (n, 3) of the up to three vertices MuJoCo's
  plane-mesh collision adds to the one at position ``a``: the others of a polygon of at most 4
  vertices, in loop order after ``a``; otherwise the quadrilateral from ``a`` that a greedy
  search grows while its area strictly increases (advance the last corner, then the middle
  ones), which is a local, not always the global, maximum."""
  n = len(loop)
  if n < 5:
    return [(a + k) % n for k in range(1, n)]
  b, c, d = (a + 1) % n, (a + 2) % n, (a + 3) % n
  area = lambda b, c, d: _quad_area(loop[a], loop[b], loop[c], loop[d])
  best = area(b, c, d)
  while True:
    d1 = (d + 1) % n
    grown = area(b, c, d1)
    if not grown > best:
      return [b, c, d]
    while area(b, (c + 1) % n, d1) > grown:
      c = (c + 1) % n
      grown = area(b, c, d1)
    while area((b + 1) % n, c, d1) > grown:
      b = (b + 1) % n
      grown = area(b, c, d1)
    d, best = d1, grown


def polygon_quads(f: dict[str, np.ndarray]) -> np.ndarray:
  """``mesh_polyquad`` (nmeshpolyvert, 3): for each vertex of each polygon, the mesh vertex ids
  :func:`polygon_quad` picks (-1 padded), from the mjModel-named mesh_* arrays ``f``."""
  vert = np.asarray(f["mesh_vert"], np.float64)
  out = np.full((len(f["mesh_polyvert"]), 3), -1, np.int32)
  for mesh, (vertadr, polyadr) in enumerate(zip(f["mesh_vertadr"], f["mesh_polyadr"])):
    for p in range(polyadr, polyadr + f["mesh_polynum"][mesh]):
      adr, num = f["mesh_polyvertadr"][p], f["mesh_polyvertnum"][p]
      loop = np.asarray(f["mesh_polyvert"][adr:adr + num])
      for a in range(num):
        picked = loop[polygon_quad(vert[vertadr + loop], a)]
        out[adr + a, :len(picked)] = picked
  return out


HULL_EXHAUSTIVE_MAX = 9  # MuJoCo searches meshes of at most this many vertices exhaustively


def _mesh_rows(f: dict[str, np.ndarray], mesh: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """One mesh's hull as collision walks it: its hull vertices (mesh-local ids), their
  neighbours (local hull ids, -1 padded) and the 27 grid starts (local hull ids). A mesh that
  MuJoCo searches exhaustively (at most HULL_EXHAUSTIVE_MAX vertices, or no graph) has all its
  vertices, no neighbours and start 0 (the colliders search its rows). A larger mesh without a
  graph (one no colliding geom uses: MuJoCo builds none) has no rows."""
  nvert, adr = int(f["mesh_vertnum"][mesh]), int(f["mesh_graphadr"][mesh])
  if adr < 0 and nvert > HULL_EXHAUSTIVE_MAX:
    return np.zeros(0, np.int64), np.zeros((0, 0), np.int64), np.full(27, -1, np.int64)
  if adr < 0 or nvert <= HULL_EXHAUSTIVE_MAX:
    return np.arange(nvert), np.zeros((nvert, 0), np.int64), np.zeros(27, np.int64)
  graph = np.asarray(f["mesh_graph"], np.int64)
  numvert = int(graph[adr])
  edgeadr = graph[adr + 2:adr + 2 + numvert]
  ids = graph[adr + 2 + numvert:adr + 2 + 2 * numvert]
  edges = graph[adr + 2 + 2 * numvert:]
  ends = np.flatnonzero(edges < 0)
  degree = ends[np.searchsorted(ends, edgeadr)] - edgeadr
  width = np.arange(max(int(degree.max(initial=0)), 1))
  at = np.minimum(edgeadr[:, None] + width, len(edges) - 1)
  nbr = np.where(width < degree[:, None], edges[at], -1)
  return ids, nbr, np.asarray(f["mesh_extrema"][mesh], np.int64)


def hull_tables(f: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
  """The convex hulls of every mesh as one table of hull rows (nhull of them, mesh after mesh),
  from the mjModel-named mesh_* arrays ``f``: what the mesh colliders index, so that a pair
  gathers only the rows its support search and clipping visit.

  ``mesh_hulladr`` (nmesh,) each mesh's first row; ``mesh_hullstart`` (nmesh, 27) the row a
  support search along each grid direction starts from (``mesh_extrema``), -1 for a mesh
  without rows; ``hull_vertid`` (nhull,) each row's vertex (into mesh_vert); ``hull_nbr``
  (nhull, D) its neighbours' rows in graph order; ``hull_poly`` (nhull, P) the polygons (into
  mesh_poly*) at it in mesh_polymap order; ``hull_prev`` (nhull, P) the row before it in each
  of those polygons' loops;
  ``hull_quad`` (nhull, P, 3) the rows plane-mesh collision adds for it and that polygon
  (``mesh_polyquad``); ``mesh_polyloop`` (nmeshpoly, L) each polygon's rows in reverse loop
  order, padded with the last. Absent entries are -1.
  """
  nmesh = len(f["mesh_vertadr"])
  vertadr = np.asarray(f["mesh_vertadr"], np.int64)
  parts = [_mesh_rows(f, k) for k in range(nmesh)]
  counts = np.array([len(p[0]) for p in parts], np.int64)
  hulladr = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
  nhull = int(counts.sum())
  width = max([p[1].shape[1] for p in parts] + [0])
  nbr = np.full((nhull, width), -1, np.int64)
  vertid = np.zeros(nhull, np.int64)
  start = np.zeros((nmesh, 27), np.int64)
  for k, (ids, own, seed) in enumerate(parts):
    rows = slice(hulladr[k], hulladr[k] + counts[k])
    vertid[rows] = vertadr[k] + ids
    nbr[rows, :own.shape[1]] = np.where(own >= 0, own + hulladr[k], -1)
    start[k] = np.where(seed >= 0, seed + hulladr[k], -1)
  row_of = np.full(len(f["mesh_vert"]), -1, np.int64)
  row_of[vertid] = np.arange(nhull)
  row = lambda v: np.where(v >= 0, row_of[np.maximum(v, 0)], -1)

  # the polygons at each row, and where the row's vertex sits in each one's loop
  polyadr = np.asarray(f["mesh_polyadr"], np.int64)
  loopadr = np.asarray(f["mesh_polyvertadr"], np.int64)
  loopnum = np.asarray(f["mesh_polyvertnum"], np.int64)
  polyvert = np.asarray(f["mesh_polyvert"], np.int64)
  poly_mesh = np.repeat(np.arange(nmesh), np.asarray(f["mesh_polynum"], np.int64))
  mapadr = np.asarray(f["mesh_polymapadr"], np.int64)[vertid]
  mapnum = np.asarray(f["mesh_polymapnum"], np.int64)[vertid]
  npoly = max(int(mapnum.max(initial=0)), 1)
  mesh_of_row = np.repeat(np.arange(nmesh), counts)
  slot = np.arange(npoly)
  at = slot < mapnum[:, None]
  polymap = np.asarray(f["mesh_polymap"], np.int64)
  poly = np.where(at, polymap[np.minimum(mapadr[:, None] + slot, max(len(polymap) - 1, 0))]
                  + polyadr[mesh_of_row][:, None], -1) if len(polymap) else np.full(at.shape, -1)
  # the loop slot of (polygon, mesh vertex): sorted keys over every loop entry
  entry_poly = np.repeat(np.arange(len(loopadr)), loopnum)
  entry_vert = vertadr[poly_mesh[entry_poly]] + polyvert if len(polyvert) else polyvert
  span = len(f["mesh_vert"]) + 1
  keys = entry_poly * span + entry_vert
  order = np.argsort(keys, kind="stable")
  wanted = np.maximum(poly, 0) * span + vertid[:, None]
  found = order[np.minimum(np.searchsorted(keys[order], wanted), max(len(keys) - 1, 0))] \
      if len(keys) else np.zeros(wanted.shape, np.int64)
  first = loopadr[np.maximum(poly, 0)] if len(loopadr) else found
  before = np.where(found > first, found - 1, first + loopnum[np.maximum(poly, 0)] - 1) \
      if len(loopadr) else found
  local_vert = lambda e: vertadr[poly_mesh[entry_poly[e]]] + polyvert[e]
  prev = (row(np.where(at, local_vert(np.where(at, before, 0)), -1)) if len(polyvert)
          else np.full(at.shape, -1))
  quad_ids = np.asarray(f["mesh_polyquad"], np.int64).reshape(-1, 3)
  if len(quad_ids):
    picked = quad_ids[found]
    base = vertadr[mesh_of_row][:, None, None]
    quad = row(np.where(at[..., None] & (picked >= 0), picked + base, -1))
  else:
    quad = np.full(at.shape + (3,), -1, np.int64)

  # each polygon's rows, in reverse loop order
  length = max(int(loopnum.max(initial=0)), 3)
  k = np.arange(length)
  back = loopadr[:, None] + np.where(k < loopnum[:, None], loopnum[:, None] - 1 - k, 0)
  loop = row(local_vert(back)) if len(polyvert) else np.zeros((len(loopadr), length), np.int64)
  i32 = lambda x: np.asarray(x, np.int32)
  return dict(mesh_hulladr=i32(hulladr), mesh_hullstart=i32(start), hull_vertid=i32(vertid),
              hull_nbr=i32(nbr), hull_poly=i32(poly), hull_prev=i32(prev), hull_quad=i32(quad),
              mesh_polyloop=i32(np.maximum(loop, 0)))


def hull_graph(hull: np.ndarray) -> np.ndarray:
  """The convex hull's graph in MuJoCo's ``mesh_graph`` layout (``mjCMesh::MakeGraph``), (2 +
  3 numvert + 6 numface,) int32: numvert, numface, vert_edgeadr[numvert],
  vert_globalid[numvert], edge_localid[numvert + 3 numface], face_globalid[3 numface].

  Hull vertices come in increasing vertex id; each one's neighbours (as local ids, then -1) in
  the order the hull's triangles first name them. The triangles are MuJoCo's, in its order
  (:func:`convex_hull`); qhull orders the vertices and their neighbours by its own internals,
  so MuJoCo's graph holds the same vertices and neighbour sets in another order. Collision
  reads that order only through the hill-climbing support search and plane-mesh's extra
  contacts, which agree except on exact ties.
  """
  hull = np.asarray(hull, dtype=np.int64).reshape(-1, 3)
  globalid = np.unique(hull)
  local = {int(g): i for i, g in enumerate(globalid)}
  neighbours: list[list[int]] = [[] for _ in globalid]
  for face in hull.tolist():
    for k in range(3):
      own = neighbours[local[face[k]]]
      for other in (face[(k + 1) % 3], face[(k + 2) % 3]):
        if local[other] not in own:
          own.append(local[other])
  edges = [n + [-1] for n in neighbours]
  edgeadr = np.cumsum([0] + [len(e) for e in edges[:-1]])
  return np.concatenate([[len(globalid), len(hull)], edgeadr, globalid,
                         np.concatenate(edges), hull.reshape(-1)]).astype(np.int32)


def convex_hull(vert: np.ndarray, name: str = "", final: np.ndarray | None = None,
                maxhullvert: int = -1) -> np.ndarray:
  """Outward-oriented triangles (nface, 3) of the convex hull of points (nvert, 3), as MuJoCo's
  mjCMesh::MakeGraph takes them from qhull ("qhull Qt"; here qhull through scipy.spatial,
  which jax requires): qhull's facets in qhull's order, each facet's vertices in qhull's order
  with the first two swapped where that turns it outward (MuJoCo swaps them where the facet's
  toporient is set). MakePolygons merges the triangles in this order, which sets each
  polygon's first vertex and the polygons' order. MuJoCo runs qhull on the vertices as given,
  before refpos, refquat and scale; ``final`` (nvert, 3), the same points after them: where
  they mirror the mesh, every triangle is turned to face out of it (not checked against
  MuJoCo). With ``maxhullvert`` (not -1) qhull stops once the hull has that many vertices,
  with MuJoCo's options exactly ("Qt Q9 TA<maxhullvert - 4>": the furthest point of all
  facets first, and no more than maxhullvert - 4 points added to the first simplex).

  Raises:
    ValueError: fewer than 4 points or all points (nearly) in one plane.
  """
  from scipy.spatial import ConvexHull, QhullError

  v = np.asarray(vert, dtype=np.float64)
  if len(v) < 4:
    raise ValueError(f"mesh '{name}': the convex hull needs at least 4 points")
  eps = 1e-10 * max(float(np.max(np.abs(v))), _MINVAL)
  i0 = int(np.argmin(v[:, 0]))
  i1 = int(np.argmax(np.sum((v - v[i0]) ** 2, axis=1)))
  i2 = int(np.argmax(np.sum(np.cross(v - v[i0], v[i1] - v[i0]) ** 2, axis=1)))
  n = np.cross(v[i1] - v[i0], v[i2] - v[i0])
  dist = (v - v[i0]) @ n
  i3 = int(np.argmax(np.abs(dist)))
  if not abs(dist[i3]) > eps * np.linalg.norm(n):
    raise ValueError(f"mesh '{name}': the points are flat; their convex hull has no volume")
  try:
    # scipy's default options are not MuJoCo's "Qt", but give its facets in the same order;
    # with a vertex limit only MuJoCo's own options stop at its vertices
    hull = (ConvexHull(v) if maxhullvert == -1
            else ConvexHull(v, qhull_options=f"Qt Q9 TA{maxhullvert - 4}"))
  except QhullError as e:
    raise ValueError(f"mesh '{name}': qhull failed on the convex hull: {e}") from None
  face = np.asarray(hull.simplices, dtype=np.int64).copy()
  a, b, c = v[face[:, 0]], v[face[:, 1]], v[face[:, 2]]
  inward = np.einsum("ij,ij->i", np.cross(b - a, c - a), hull.equations[:, :3]) < 0
  face[inward] = face[inward][:, [1, 0, 2]]
  if final is not None:
    w = np.asarray(final, dtype=np.float64)
    w = w - w[face].reshape(-1, 3).mean(axis=0)
    if np.einsum("ij,ij->i", np.cross(w[face[:, 0]], w[face[:, 1]]), w[face[:, 2]]).sum() < 0:
      face = face[:, [0, 2, 1]]
  return face.astype(np.int32)


def _second_moments(v: np.ndarray, face: np.ndarray, mode: str) -> tuple[float, list[float]]:
  """ComputeInertia: (volume or area, inertia (xx yy zz xy xz yz) per unit density) about the
  origin of the centred vertices ``v``."""
  d, e, f = v[face[:, 0]], v[face[:, 1]], v[face[:, 2]]
  area, normal, center = _triangles(d, e, f)
  if mode == "shell":
    w = area
  else:
    w = (center[:, 0] * normal[:, 0] + center[:, 1] * normal[:, 1]
         + center[:, 2] * normal[:, 2]) * area / 3
    if mode == "legacy":
      w = np.abs(w)
  const = 12 if mode == "shell" else 20
  terms = []
  for i, j in ((0, 0), (1, 1), (2, 2), (0, 1), (0, 2), (1, 2)):
    s = (2 * (d[:, i] * d[:, j] + e[:, i] * e[:, j] + f[:, i] * f[:, j])
         + d[:, i] * e[:, j] + d[:, j] * e[:, i] + d[:, i] * f[:, j] + d[:, j] * f[:, i]
         + e[:, i] * f[:, j] + e[:, j] * f[:, i])
    terms.append(w / const * s)
  p = _seqsum(np.stack(terms, axis=1))
  return float(_seqsum(w)), [p[1] + p[2], p[0] + p[2], p[0] + p[1], -p[3], -p[4], -p[5]]


def _check_orientation(face: np.ndarray, a: np.ndarray, b: np.ndarray, c: np.ndarray,
                       name: str) -> None:
  """``exact`` inertia needs consistently oriented faces: no directed edge may appear twice."""
  area = _triangles(a, b, c)[0]
  keep = face[area > np.sqrt(_MINVAL)]
  edges = np.concatenate([keep[:, [0, 1]], keep[:, [1, 2]], keep[:, [2, 0]]])
  uniq, counts = np.unique(edges, axis=0, return_counts=True)
  if np.any(counts > 1):
    v0, v1 = uniq[np.argmax(counts > 1)]
    raise ValueError(f"mesh '{name}': faces have inconsistent orientation; check the faces "
                     f"containing the vertices {v0 + 1} and {v1 + 1}")


def mesh_geom(geom_pos: Sequence[float], geom_quat: Sequence[float],
              info: MeshInfo) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """Compiled frame and size of a mesh geom.

  Args:
    geom_pos: (3,) the geom's position in its body, from the MJCF.
    geom_quat: (4,) the geom's resolved orientation.
    info: its mesh.
  Returns:
    geom_pos (3,), geom_quat (4,): the MJCF frame composed with the mesh frame offset
    (``info.pos``, ``info.quat``); geom_size (3,): the largest absolute vertex coordinate per
    mesh axis, as MuJoCo stores it for mesh geoms.
  """
  pos, quat = frames.frame_accum(geom_pos, geom_quat, info.pos, info.quat)
  a = info.aamm
  size = np.array([max(abs(float(a[i])), abs(float(a[i + 3]))) for i in range(3)])
  return pos, quat, size


def fit_geom(gtype: int, info: MeshInfo, fitaabb: bool,
             fitscale: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """A primitive geom fitted to a mesh (``mjCMesh::FitGeom``): to the mesh's inertia box, or
  with ``fitaabb`` to the smallest primitive whose bounding box holds the mesh's.

  Returns:
    size (3,), scaled by ``fitscale``; pos (3,) and quat (4,): the frame the MJCF geom's frame
    composes with (the mesh frame, moved to the bounding box's center with ``fitaabb``).
  """
  size, center = np.zeros(3), np.zeros(3)
  if not fitaabb:
    b = [float(x) for x in info.inertia_box]
    if gtype == GeomType.SPHERE:
      size[0] = (b[0] + b[1] + b[2]) / 3
    elif gtype == GeomType.CAPSULE:
      size[0] = (b[0] + b[1]) / 2
      size[1] = max(0.0, b[2] - size[0] / 2)
    elif gtype == GeomType.CYLINDER:
      size[:2] = (b[0] + b[1]) / 2, b[2]
    elif gtype in (GeomType.ELLIPSOID, GeomType.BOX):
      size[:] = b
    else:
      raise ValueError("invalid geom type in fitting mesh")
  else:
    a = [float(x) for x in info.aamm]
    center = np.array([(a[i] + a[i + 3]) / 2 for i in range(3)])
    half = [a[i + 3] - center[i] for i in range(3)]
    if gtype == GeomType.SPHERE:
      size[0] = max(max(half[0], half[1]), half[2])
    elif gtype in (GeomType.CAPSULE, GeomType.CYLINDER):
      size[:2] = max(half[0], half[1]), half[2]
      if gtype == GeomType.CAPSULE:
        size[1] -= size[0]
    elif gtype in (GeomType.ELLIPSOID, GeomType.BOX):
      size[:] = half
    else:
      raise ValueError("invalid fittype in mesh")
  pos = np.array(frames.rot_vec_quat(center, info.quat)) + info.pos
  return size * fitscale, pos, np.asarray(info.quat)


def surface_velocity(surfacevel: np.ndarray, pos: np.ndarray, quat: np.ndarray) -> np.ndarray:
  """A mesh geom's ``surfacevel`` (6,) (linear m/s, angular rad/s), given in the MJCF geom's
  frame, in the compiled frame that absorbed the mesh frame (``pos``, ``quat``): the angular
  part's origin moves to the mesh frame's origin, so the linear part gains omega x pos, and both
  are rotated into the mesh frame."""
  if not np.any(surfacevel):
    return surfacevel
  (w0, w1, w2), p = surfacevel[3:], [float(x) for x in pos]
  linear = surfacevel[:3] + np.array([w1 * p[2] - w2 * p[1], w2 * p[0] - w0 * p[2],
                                      w0 * p[1] - w1 * p[0]])
  q = [float(x) for x in quat]
  inverse = [q[0], -q[1], -q[2], -q[3]]
  return np.array(frames.rot_vec_quat(linear, inverse)
                  + frames.rot_vec_quat(surfacevel[3:], inverse))
