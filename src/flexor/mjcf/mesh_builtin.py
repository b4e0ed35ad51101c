"""Builtin meshes: ``<mesh builtin="..." params="...">`` (``mjs_makeMesh``, ``user_mesh.cc``).

Each kind makes the vertices (and, for most, the faces) MuJoCo makes, in its order and with its
float32 rounding, so the mesh is then processed exactly as one given by ``vertex`` and ``face``:

* ``sphere`` (subdivisions 0..4): an icosahedron, each subdivision splitting every triangle in
  four through its edges' midpoints pushed out to the unit sphere (float arithmetic);
* ``hemisphere`` (resolution 0..10): rings of a quad-projected upper half sphere, with a bottom
  cap around a centre vertex;
* ``supersphere`` (resolution, e, n) and ``supertorus`` (resolution, radius, s, t): the
  parametric superquadrics, poles and rings;
* ``wedge`` (two resolutions, two fields of view in degrees, foveal gamma): points on a spherical
  wedge, no faces (the hull is the mesh);
* ``plate`` (two resolutions): a grid of points at z = -1 with its triangles, a shell;
* ``cone`` (edges, top radius): a bottom polygon and a top polygon or apex, no faces.
"""

from __future__ import annotations

import math

import numpy as np

KINDS = ("sphere", "hemisphere", "cone", "supertorus", "supersphere", "wedge", "plate")
_F = np.float32


def make(kind: str, params: np.ndarray) -> tuple[np.ndarray, np.ndarray, str | None]:
  """(vertices (n, 3) float32, faces (m, 3) int32 (m may be 0), the inertia mode MuJoCo forces
  or None) of a builtin mesh; ValueError with MuJoCo's message for bad parameters."""
  counts = {"sphere": 1, "hemisphere": 1, "supersphere": 3, "supertorus": 4, "wedge": 5,
            "plate": 2, "cone": 2}
  if kind not in counts:
    raise ValueError(f"unknown builtin mesh {kind!r} (known: {', '.join(KINDS)})")
  p = [float(x) for x in params]
  if len(p) != counts[kind]:
    raise ValueError(f"a {kind} builtin mesh needs {counts[kind]} parameter(s), got {len(p)}")
  if kind == "sphere":
    subdiv = int(p[0])
    if not 0 <= subdiv <= 4:
      raise ValueError("sphere subdivision must be in 0..4")
    vert, face = _sphere(subdiv)
  elif kind == "hemisphere":
    res = int(p[0])
    if not 0 <= res <= 10:
      raise ValueError("hemisphere resolution must be in 0..10")
    vert, face = _hemisphere(res)
  elif kind == "supersphere":
    res, e, n = int(p[0]), p[1], p[2]
    if res < 3 or e < 0 or n < 0:
      raise ValueError("supersphere needs a resolution above 2 and nonnegative 'e' and 'n'")
    vert, face = _supersphere(res, e, n)
  elif kind == "supertorus":
    res, radius, s, t = int(p[0]), p[1], p[2], p[3]
    if res < 3 or not 0 < radius <= 1 or s <= 0 or t <= 0:
      raise ValueError("supertorus needs a resolution above 2, a radius in (0, 1] and positive "
                       "'s' and 't'")
    vert, face = _supertorus(res, radius, s, t)
  elif kind == "wedge":
    res, fov, gamma = (int(p[0]), int(p[1])), (p[2], p[3]), p[4]
    if not (0 < fov[0] <= 180 and 0 < fov[1] <= 90 and res[0] > 0 and res[1] > 0
            and 0 <= gamma <= 1):
      raise ValueError("wedge needs positive resolutions, fields of view in (0, 180] and "
                       "(0, 90] degrees and gamma in [0, 1]")
    vert, face = _wedge(res, fov, gamma), np.zeros((0, 3), np.int32)
  elif kind == "plate":
    res = (int(p[0]), int(p[1]))
    if res[0] <= 0 or res[1] <= 0:
      raise ValueError("plate resolutions must be positive")
    vert, face = _plate(res)
    return vert, face, "shell"
  else:
    if int(p[0]) < 3:
      raise ValueError("a cone needs at least 3 edges")
    vert, face = _cone(int(p[0]), p[1]), np.zeros((0, 3), np.int32)
  return vert, face, None


def _array(vert: list[float], face: list[int]) -> tuple[np.ndarray, np.ndarray]:
  return (np.array(vert, dtype=_F).reshape(-1, 3), np.array(face, dtype=np.int32).reshape(-1, 3))


def _sphere(subdiv: int) -> tuple[np.ndarray, np.ndarray]:
  phi = _F((1.0 + math.sqrt(5.0)) / 2.0)
  one = _F(1.0)
  base = [(-one, phi, 0), (one, phi, 0), (-one, -phi, 0), (one, -phi, 0),
          (0, -one, phi), (0, one, phi), (0, -one, -phi), (0, one, -phi),
          (phi, 0, -one), (phi, 0, one), (-phi, 0, -one), (-phi, 0, one)]
  norm = math.sqrt(1.0 + float(phi * phi))   # float product, double sum
  vert = [[_F(float(_F(x)) / norm) for x in v] for v in base]
  face = [0, 11, 5, 0, 5, 1, 0, 1, 7, 0, 7, 10, 0, 10, 11, 1, 5, 9, 5, 11, 4, 11, 10, 2, 10, 7,
          6, 7, 1, 8, 3, 9, 4, 3, 4, 2, 3, 2, 6, 3, 6, 8, 3, 8, 9, 4, 9, 5, 2, 4, 11, 6, 2, 10,
          8, 6, 7, 9, 8, 1]
  two = _F(2.0)
  for _ in range(subdiv):
    cache: dict[tuple[int, int], int] = {}

    def midpoint(a: int, b: int) -> int:
      key = (min(a, b), max(a, b))
      if key not in cache:
        mid = [(vert[a][k] + vert[b][k]) / two for k in range(3)]
        n = np.sqrt(mid[0] * mid[0] + mid[1] * mid[1] + mid[2] * mid[2])
        vert.append([m / n for m in mid])
        cache[key] = len(vert) - 1
      return cache[key]

    new = []
    for j in range(0, len(face), 3):
      v1, v2, v3 = face[j:j + 3]
      m12, m23, m31 = midpoint(v1, v2), midpoint(v2, v3), midpoint(v3, v1)
      new += [v1, m12, m31, v2, m23, m12, v3, m31, m23, m12, m23, m31]
    face = new
  return _array([x for v in vert for x in v], face)


def _hemisphere(res: int) -> tuple[np.ndarray, np.ndarray]:
  pole = (0.0, 0.0, 1.0)
  equator = ((1.0, 0.0, 0.0), (0.0, 1.0, 0.0), (-1.0, 0.0, 0.0), (0.0, -1.0, 0.0))
  vert = [list(pole)]
  for row in range(res + 1):
    factor = (row + 1) / (res + 1)
    for side in range(4):
      start = [pole[i] + factor * (equator[side][i] - pole[i]) for i in range(3)]
      end = [pole[i] + factor * (equator[(side + 1) % 4][i] - pole[i]) for i in range(3)]
      delta = [(end[i] - start[i]) / (row + 1) for i in range(3)]
      for i in range(row + 1):
        q = [start[j] + i * delta[j] for j in range(3)]
        norm = math.sqrt(q[0] * q[0] + q[1] * q[1] + q[2] * q[2])
        vert.append([x / norm for x in q])
  vert.append([0.0, 0.0, 0.0])
  nvert = len(vert)
  face = [0, 1, 2, 0, 2, 3, 0, 3, 4, 0, 4, 1]
  for row in range(res):
    start_curr = 2 * row * (row + 1) + 1
    count_curr = 4 * (row + 1)
    start_next = start_curr + count_curr
    count_next = 4 * (row + 2)
    for side in range(4):
      for i in range(row + 2):
        v_curr, v_next = i + (row + 1) * side, i + (row + 2) * side
        face += [start_curr + v_curr % count_curr, start_next + v_next % count_next,
                 start_next + (v_next + 1) % count_next]
        if i < row + 1:
          face += [start_curr + v_curr % count_curr, start_next + (v_next + 1) % count_next,
                   start_curr + (v_curr + 1) % count_curr]
  start, count = 2 * res * (res + 1) + 1, 4 * (res + 1)
  for i in range(count):
    face += [start + i, nvert - 1, start + (i + 1) % count]
  return _array([x for v in vert for x in v], face)


def _aux_c(w: float, m: float) -> float:
  return math.copysign(abs(math.cos(w)) ** m, math.cos(w))


def _aux_s(w: float, m: float) -> float:
  return math.copysign(abs(math.sin(w)) ** m, math.sin(w))


def _supersphere(res: int, e: float, n: float) -> tuple[np.ndarray, np.ndarray]:
  vert = [0.0, 0.0, -1.0]
  for i in range(1, res):
    v = -math.pi / 2 + i * math.pi / res
    for j in range(res):
      u = -math.pi + j * 2 * math.pi / res
      vert += [_aux_c(v, n) * _aux_c(u, e), _aux_c(v, n) * _aux_s(u, e), _aux_s(v, n)]
  vert += [0.0, 0.0, 1.0]
  nvert = (res - 1) * res + 2
  face = []
  for j in range(res):
    face += [0, 1 + (j + 1) % res, 1 + j]
  for i in range(res - 2):
    for j in range(res):
      v1, v2 = 1 + i * res + j, 1 + i * res + (j + 1) % res
      v4, v3 = 1 + (i + 1) * res + j, 1 + (i + 1) * res + (j + 1) % res
      face += [v1, v2, v4, v2, v3, v4]
  last = 1 + (res - 2) * res
  for j in range(res):
    face += [last + j, last + (j + 1) % res, nvert - 1]
  return _array(vert, face)


def _supertorus(res: int, radius: float, s: float, t: float) -> tuple[np.ndarray, np.ndarray]:
  vert, face = [], []
  for i in range(res):
    for j in range(res):
      u, v = 2 * math.pi * i / res, 2 * math.pi * j / res
      ring = 1 + radius * _aux_c(v, s)
      vert += [ring * _aux_c(u, t), ring * _aux_s(u, t), radius * _aux_s(v, s)]
  for i in range(res):
    for j in range(res):
      i_next, j_next = (i + 1) % res, (j + 1) % res
      v1, v2 = i * res + j, i_next * res + j
      v3, v4 = i_next * res + j_next, i * res + j_next
      face += [v1, v2, v4, v2, v3, v4]
  return _array(vert, face)


def _linspace(lower: float, upper: float, n: int) -> list[float]:
  """LinSpace: by repeated addition, as MuJoCo (not numpy's lower + i * step)."""
  step = (upper - lower) / (n - 1) if n > 1 else 0.0
  out = []
  for _ in range(n):
    out.append(lower)
    lower += step
  return out


def _fovea(x: float, gamma: float) -> float:
  if not gamma:
    return x
  g = max(0.0, min(1.0, gamma))
  return g * x ** 5 + (1 - g) * x


def _wedge(res: tuple[int, int], fov: tuple[float, float], gamma: float) -> np.ndarray:
  edges = [[_fovea(x, gamma) * (f * math.pi / 180) for x in _linspace(-1, 1, r + 1)]
           for r, f in zip(res, fov)]
  vert = []
  for i in range(res[0]):
    for j in range(res[1]):
      a = 0.5 * (edges[0][i + 1] + edges[0][i])
      e = 0.5 * (edges[1][j + 1] + edges[1][j])
      vert += [math.cos(e) * math.sin(a), math.sin(e), -math.cos(e) * math.cos(a)]
  return np.array(vert, dtype=_F).reshape(-1, 3)


def _plate(res: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
  vert, face = [], []
  dx, dy = 2.0 / res[0], 2.0 / res[1]
  for i in range(res[0]):
    for j in range(res[1]):
      vert += [-1 + (i + 0.5) * dx, -1 + (j + 0.5) * dy, -1.0]
  for i in range(1, res[0]):
    for j in range(1, res[1]):
      face += [(i - 1) * res[1] + j - 1, i * res[1] + j - 1, (i - 1) * res[1] + j,
               i * res[1] + j, (i - 1) * res[1] + j, i * res[1] + j - 1]
  return _array(vert, face)


def _cone(nedge: int, radius: float) -> np.ndarray:
  vert = [[math.cos(2 * i * math.pi / nedge), math.sin(2 * i * math.pi / nedge), -1.0]
          for i in range(nedge)]
  if radius > 0:
    vert += [[radius * math.cos(2 * i * math.pi / nedge), radius * math.sin(2 * i * math.pi / nedge),
              1.0] for i in range(nedge, 2 * nedge)]
  else:
    vert.append([0.0, 0.0, 1.0])
  return np.array(vert, dtype=_F).reshape(-1, 3)
