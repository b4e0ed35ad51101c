"""Geom-derived mass and inertia, body inertial frames and bounding radii (host side).

Everything repeats MuJoCo's compiler (``mjCGeom::GetVolume``, ``mjCGeom::SetInertia``,
``mjCGeom::GetRBound``, ``mjCBody::InertiaFromGeom`` in ``src/user/user_objects.cc``;
``mjuu_fullInertia``, ``mjuu_globalinertia``, ``mjuu_offcenter``, ``mjuu_eig3`` in
``src/user/user_util.cc``) operation by operation in Python floats, so results equal MuJoCo's
bit for bit or to the last rounding.

Units: lengths in the model's length unit, mass in its mass unit, density = mass / volume,
inertias in mass * length^2. Principal inertias are about the geom's (or body's inertial)
centre, in its frame.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Sequence

import numpy as np

from flexor.mjcf import frames
from flexor.mjcf.frames import MJ_EPS, MJ_MINVAL
from flexor.types import GeomType

if TYPE_CHECKING:
  from flexor.mjcf.mesh import MeshInfo

_EIG_TOL = 4e-15   # mjuu_eig3: relative off-diagonal size that ends the Jacobi sweep
_EIG_SORT = 1e-12  # mjuu_eig3: relative gap below which eigenvalues are not swapped
_FROMTO_TYPES = (GeomType.CAPSULE, GeomType.CYLINDER, GeomType.ELLIPSOID, GeomType.BOX)


def geom_fromto(gtype: int, fromto: Sequence[float],
                size: Sequence[float]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """Frame and size of a geom (or site) given by ``fromto``, as MuJoCo's compiler resolves it.

  Capsules and cylinders take the half-length ``size[1]``; ellipsoids and boxes keep ``size[0]``
  for both transverse half-sizes and take the half-length as ``size[2]``, i.e. size becomes
  (size[0], size[0], half). Sites follow the same rule (mjCSite::Compile); joints have no
  fromto in MuJoCo. The caller rejects a nonzero ``pos`` with fromto ("both pos and fromto
  defined") and mesh geoms, as MuJoCo does.

  Args:
    gtype: mjtGeom of the geom: capsule, cylinder, ellipsoid or box.
    fromto: (6,) end points in the parent frame.
    size: (3,) the size attribute (missing entries as the defaults give them).
  Returns:
    pos (3,), quat (4,) (z axis along from - to, see :func:`frames.fromto_frame`), size (3,).
  Raises:
    ValueError: another geom type, or coincident points.
  """
  if gtype not in _FROMTO_TYPES:
    raise ValueError("fromto requires capsule, cylinder, box or ellipsoid")
  pos, quat, half = frames.fromto_frame(fromto)
  out = np.array([float(s) for s in size], dtype=np.float64)
  out[1] = half
  if gtype in (GeomType.ELLIPSOID, GeomType.BOX):
    out[2] = out[1]
    out[1] = out[0]
  return pos, quat, out


def geom_volume(gtype: int, size: Sequence[float], *, shellinertia: bool = False,
                mesh: MeshInfo | None = None) -> float:
  """mjCGeom::GetVolume: volume (or surface area with ``shellinertia``) of a geom.

  Args:
    gtype: mjtGeom.
    size: (3,) compiled geom_size (for hfields: the compiled size, whose third entry MuJoCo
      sets to 0.25 * elevation + 0.5 * base; hfields count as boxes of that size).
    shellinertia: surface area instead of volume.
    mesh: the mesh of a mesh geom (its volume, or area for ``inertia="shell"`` meshes).
  Returns:
    Volume; 0 for planes and other massless types.
  """
  s0, s1, s2 = (float(s) for s in size)
  pi = math.pi
  if gtype in (GeomType.MESH, GeomType.SDF):
    if mesh is None:
      raise ValueError("a mesh geom needs its mesh")
    return mesh.volume
  if gtype == GeomType.SPHERE:
    return 4 * pi * s0 * s0 if shellinertia else 4 * pi * s0 * s0 * s0 / 3
  if gtype == GeomType.CAPSULE:
    height = 2 * s1
    if shellinertia:
      return 4 * pi * s0 * s0 + 2 * pi * s0 * height
    return pi * (s0 * s0 * height + 4 * s0 * s0 * s0 / 3)
  if gtype == GeomType.CYLINDER:
    height = 2 * s1
    if shellinertia:
      return 2 * pi * s0 * s0 + 2 * pi * s0 * height
    return pi * s0 * s0 * height
  if gtype == GeomType.ELLIPSOID:
    if shellinertia:
      p = 1.6075  # Thomsen's approximation of the ellipsoid's surface area
      tmp = (s0 * s1) ** p + (s1 * s2) ** p + (s2 * s0) ** p
      return 4 * pi * (tmp / 3) ** (1 / p)
    return 4 * pi * s0 * s1 * s2 / 3
  if gtype in (GeomType.BOX, GeomType.HFIELD):
    if shellinertia:
      return 8 * (s0 * s1 + s1 * s2 + s2 * s0)
    return s0 * s1 * s2 * 8
  return 0.0


def _solid_inertia(gtype: int, m: float, s0: float, s1: float, s2: float) -> list[float]:
  if gtype == GeomType.SPHERE:
    i = 2 * m * s0 * s0 / 5
    return [i, i, i]
  if gtype == GeomType.CAPSULE:
    r, height = s0, 2 * s1
    sphere_mass = m * 4 * r / (4 * r + 3 * height)  # the caps' share of the volume
    cyl_mass = m - sphere_mass
    ixy = cyl_mass * (3 * r * r + height * height) / 12
    iz = cyl_mass * r * r / 2
    sphere_i = 2 * sphere_mass * r * r / 5
    # two hemispheres displaced along z: MuJoCo's closed form of the parallel-axis shift
    ixy += sphere_i + sphere_mass * height * (3 * r + 2 * height) / 8
    return [ixy, ixy, iz + sphere_i]
  if gtype == GeomType.CYLINDER:
    r, height = s0, 2 * s1
    ixy = m * (3 * r * r + height * height) / 12
    return [ixy, ixy, m * r * r / 2]
  if gtype == GeomType.ELLIPSOID:
    a, b, c = s0 * s0, s1 * s1, s2 * s2
    return [m * (b + c) / 5, m * (a + c) / 5, m * (a + b) / 5]
  if gtype in (GeomType.BOX, GeomType.HFIELD):
    a, b, c = s0 * s0, s1 * s1, s2 * s2
    return [m * (b + c) / 3, m * (a + c) / 3, m * (a + b) / 3]
  return [0.0, 0.0, 0.0]


def _shell_inertia(gtype: int, m: float, s0: float, s1: float, s2: float) -> list[float]:
  pi = math.pi
  if gtype == GeomType.SPHERE:
    i = 2 * m * s0 * s0 / 3
    return [i, i, i]
  if gtype == GeomType.CAPSULE:
    r, half, height = s0, s1, 2 * s1
    a_sphere, a_cyl = 4 * pi * r * r, 2 * pi * r * height
    sphere_mass = m * a_sphere / (a_sphere + a_cyl)
    cyl_mass = m - sphere_mass
    ixy = cyl_mass * (6 * r * r + height * height) / 12
    iz = cyl_mass * r * r
    sphere_i = 2 * sphere_mass * r * r / 3
    hs_com = r / 2  # MuJoCo's centre of a hemispherical shell (the solid one's is 3r/8)
    hs_pos = half + hs_com
    ixy += sphere_i + sphere_mass * (hs_pos * hs_pos - hs_com * hs_com)
    return [ixy, ixy, iz + sphere_i]
  if gtype == GeomType.CYLINDER:
    r, half, height = s0, s1, 2 * s1
    a_disk, a_cyl = pi * r * r, 2 * pi * r * height
    disk_mass = m * a_disk / (2 * a_disk + a_cyl)
    cyl_mass = m - 2 * disk_mass
    ixy = cyl_mass * (6 * r * r + height * height) / 12
    iz = cyl_mass * r * r
    disk_x = disk_mass * r * r / 4 + disk_mass * half * half
    disk_z = disk_mass * r * r / 2
    return [ixy + 2 * disk_x, ixy + 2 * disk_x, iz + 2 * disk_z]
  if gtype == GeomType.ELLIPSOID:
    # MuJoCo's approximation: a solid ellipsoid grown by 1e-6 minus the solid one
    eps = 1e-6
    va = 4 * pi * s0 * s1 * s2 / 3
    ae, be, ce = s0 + eps, s1 + eps, s2 + eps
    vb = 4 * pi * ae * be * ce / 3
    density = m / (vb - va)
    ma, mb = va * density, vb * density
    a, b, c = s0 * s0, s1 * s1, s2 * s2
    ia = [ma * (b + c) / 5, ma * (a + c) / 5, ma * (a + b) / 5]
    ib = [mb * (be * be + ce * ce) / 5, mb * (ae * ae + ce * ce) / 5, mb * (ae * ae + be * be) / 5]
    return [ib[0] - ia[0], ib[1] - ia[1], ib[2] - ia[2]]
  if gtype in (GeomType.BOX, GeomType.HFIELD):
    lx, ly, lz = 2 * s0, 2 * s1, 2 * s2
    a0, a1, a2 = lx * ly, ly * lz, lz * lx  # faces normal to z, x and y
    total = 2 * (a0 + a1 + a2)
    m0, m1, m2 = m * a0 / total, m * a1 / total, m * a2 / total
    ix0, iy0, iz0 = m0 * ly * ly / 12, m0 * lx * lx / 12, m0 * (lx * lx + ly * ly) / 12
    ix1, iy1, iz1 = m1 * (ly * ly + lz * lz) / 12, m1 * lz * lz / 12, m1 * ly * ly / 12
    ix2, iy2, iz2 = m2 * lz * lz / 12, m2 * (lx * lx + lz * lz) / 12, m2 * lx * lx / 12
    a, b, c = s0 * s0, s1 * s1, s2 * s2
    return [2 * (m0 * c + m2 * b + ix0 + ix1 + ix2),
            2 * (m0 * c + m1 * a + iy0 + iy1 + iy2),
            2 * (m1 * a + m2 * b + iz0 + iz1 + iz2)]
  return [0.0, 0.0, 0.0]


def geom_mass_inertia(gtype: int, size: Sequence[float], *, density: float,
                      mass: float | None = None, shellinertia: bool = False,
                      mesh: MeshInfo | None = None) -> tuple[float, np.ndarray]:
  """Mass and principal inertia (about the centre, in the geom frame) of one geom.

  As mjCGeom::Compile when the geom's inertia is inferred: with ``mass`` given the geom has that
  mass (density = mass / volume; mass 0 gives a massless geom, and a geom of volume <= 1e-14
  keeps mass 0), else mass = density * volume. Planes (and other shapes without a volume)
  contribute mass 0 and inertia 0; hfields count as boxes of their compiled size. A mesh geom's
  inertia is that of the mesh's equivalent inertia box (see :class:`flexor.mjcf.mesh.MeshInfo`)
  with the geom's mass; shell inertia of a mesh is chosen on the mesh asset (``inertia="shell"``)
  and MuJoCo rejects ``shellinertia`` on the geom.

  Args:
    gtype: mjtGeom.
    size: (3,) compiled geom_size.
    density: geom density (mass per volume, or per area with shellinertia), used when ``mass``
      is None.
    mass: the geom's ``mass`` attribute, or None when not given.
    shellinertia: mass on the surface (geom ``shellinertia="true"``).
    mesh: the :class:`MeshInfo` of a mesh geom.
  Returns:
    (mass, inertia (3,)).
  Raises:
    ValueError: negative mass, density or inertia (MuJoCo's "mass, inertia or density are
      negative in geom"), shellinertia on a mesh geom, or a mesh geom without its mesh.
  """
  if gtype in (GeomType.MESH, GeomType.SDF) and shellinertia:
    raise ValueError("for mesh geoms, shell inertia is set on the mesh asset (inertia=\"shell\")")
  s0, s1, s2 = (float(s) for s in size)
  out = [0.0, 0.0, 0.0]
  geom_mass = 0.0
  if mass is not None:
    if mass != 0:
      volume = geom_volume(gtype, size, shellinertia=shellinertia, mesh=mesh)
      if volume > MJ_EPS:
        geom_mass = float(mass)
        density = geom_mass / volume
        out = _inertia(gtype, geom_mass, s0, s1, s2, shellinertia, mesh)
    else:
      density = 0.0
  elif density != 0:
    geom_mass = density * geom_volume(gtype, size, shellinertia=shellinertia, mesh=mesh)
    out = _inertia(gtype, geom_mass, s0, s1, s2, shellinertia, mesh)
  if geom_mass < 0 or min(out) < 0 or density < 0:
    raise ValueError("mass, inertia or density are negative in geom")
  return geom_mass, np.array(out, dtype=np.float64)


def _inertia(gtype: int, m: float, s0: float, s1: float, s2: float, shell: bool,
             mesh: MeshInfo | None) -> list[float]:
  if gtype in (GeomType.MESH, GeomType.SDF):
    bx, by, bz = (float(b) for b in mesh.inertia_box)
    return [m * (by * by + bz * bz) / 3, m * (bx * bx + bz * bz) / 3, m * (bx * bx + by * by) / 3]
  if shell:
    return _shell_inertia(gtype, m, s0, s1, s2)
  return _solid_inertia(gtype, m, s0, s1, s2)


def geom_rbound(gtype: int, size: Sequence[float], mesh: MeshInfo | None = None,
                hfield_size: Sequence[float] | None = None) -> float:
  """mjCGeom::GetRBound: radius of the geom's bounding sphere about its centre (geom_rbound).

  Args:
    gtype: mjtGeom.
    size: (3,) compiled geom_size.
    mesh: the :class:`MeshInfo` of a mesh geom (its bounding box in the mesh frame).
    hfield_size: (4,) the hfield asset's size (radius x, radius y, elevation z, base z) of an
      hfield geom.
  Returns:
    The radius; 0 for planes.
  """
  s0, s1, s2 = (float(s) for s in size)
  if gtype == GeomType.SPHERE:
    return s0
  if gtype == GeomType.CAPSULE:
    return s0 + s1
  if gtype == GeomType.CYLINDER:
    return math.sqrt(s0 * s0 + s1 * s1)
  if gtype == GeomType.ELLIPSOID:
    return max(max(s0, s1), s2)
  if gtype == GeomType.BOX:
    return math.sqrt(s0 * s0 + s1 * s1 + s2 * s2)
  if gtype in (GeomType.MESH, GeomType.SDF):
    h = [max(abs(float(mesh.aamm[i])), abs(float(mesh.aamm[i + 3]))) for i in range(3)]
    return math.sqrt(h[0] * h[0] + h[1] * h[1] + h[2] * h[2])
  if gtype == GeomType.HFIELD:
    h = [float(x) for x in hfield_size]
    return math.sqrt(h[0] * h[0] + h[1] * h[1] + max(h[2] * h[2], h[3] * h[3]))
  return 0.0


def _mulmat(a: list[float], b: list[float]) -> list[float]:
  return [a[3 * r] * b[c] + a[3 * r + 1] * b[3 + c] + a[3 * r + 2] * b[6 + c]
          for r in range(3) for c in range(3)]


def eig3(mat: Sequence[float], tol: float = _EIG_TOL) -> tuple[np.ndarray, np.ndarray]:
  """mjuu_eig3 of MuJoCo 4.0's compiler: eigen-decomposition of a symmetric 3x3 matrix, as used
  for body principal axes and ``fullinertia`` (tol 4e-15) and for meshes (tol 1e-7).

  Jacobi rotations accumulated in a quaternion, at most 500, until the largest off-diagonal
  entry is at most max(tol, 4e-15) times the largest absolute entry of ``mat``; the rotation of
  each step is built from the half angle's tangent. The eigenvalues are then sorted in decreasing
  order by a three-step bubble sort (pairs 01, 12, 01) that swaps only when they differ by more
  than max(tol, 1e-12) times that largest entry, each swap turning the quaternion a quarter turn
  about the third axis, so the frame stays right-handed and (near-)equal eigenvalues keep the
  order and axes the sweep left them in. Quaternion products and normalization are the
  compiler's (mjuu_mulquat, mjuu_normvec). The released 3.x C source stops on an absolute 1e-12
  and on the rotation's cosine instead; this version was reconstructed from libmujoco 4.0's
  machine code and agrees with its compiled ``body_iquat`` to the bit on the tests' matrices,
  near-degenerate ones included.

  Args:
    mat: (9,) row-major symmetric matrix.
    tol: relative tolerance of the sweep and of the sort.
  Returns:
    eigval (3,) in decreasing order, quat (4,) whose rotation matrix has the eigenvectors as
    columns.
  """
  m = [float(x) for x in mat]
  scale = max(abs(x) for x in m)
  thresh = max(tol, _EIG_TOL) * scale
  quat = [1.0, 0.0, 0.0, 0.0]
  ev = [m[0], m[4], m[8]]
  for _ in range(500):
    vec = frames.quat2mat(quat)
    vec_t = [vec[0], vec[3], vec[6], vec[1], vec[4], vec[7], vec[2], vec[5], vec[8]]
    d = _mulmat(_mulmat(vec_t, m), vec)
    ev = [d[0], d[4], d[8]]
    if abs(d[1]) > abs(d[2]) and abs(d[1]) > abs(d[5]):
      rk, ck, rotk = 0, 1, 2
    elif abs(d[2]) > abs(d[5]):
      rk, ck, rotk = 0, 2, 1
    else:
      rk, ck, rotk = 1, 2, 0
    if abs(d[3 * rk + ck]) <= thresh:
      break
    # 2x2 symmetric Schur: t = tan(angle), then the half angle's tangent and cosine
    tau = (d[4 * ck] - d[4 * rk]) / (2 * d[3 * rk + ck])
    if tau >= 0:
      t = 1.0 / (tau + math.sqrt(1 + tau * tau))
    else:
      t = -1.0 / (math.sqrt(1 + tau * tau) - tau)
    half = t / (math.sqrt(t * t + 1) + 1)
    c = 1 / math.sqrt(half * half + 1)
    rot = [c, 0.0, 0.0, 0.0]
    rot[rotk + 1] = (half if rotk == 1 else -half) * c
    quat = frames.normvec(frames.mulquat(quat, rot))[0]
  sort_eps = max(_EIG_SORT, tol) * scale
  for j in range(3):
    j1 = j % 2
    if ev[j1] + sort_eps < ev[j1 + 1]:
      ev[j1], ev[j1 + 1] = ev[j1 + 1], ev[j1]
      rot = [0.707106781186548, 0.0, 0.0, 0.0]
      rot[(j1 + 2) % 3 + 1] = rot[0]
      quat = frames.normvec(frames.mulquat(quat, rot))[0]
  return np.array(ev), np.array(quat)


def full_inertia_frame(fullinertia: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
  """mjuu_fullInertia: principal frame of ``<inertial fullinertia>``.

  Args:
    fullinertia: (6,) Ixx Iyy Izz Ixy Ixz Iyz in the body frame.
  Returns:
    iquat (4,) of the principal axes relative to the ``<inertial>`` frame, inertia (3,) in
    decreasing order (see :func:`eig3`).
  Raises:
    ValueError: the smallest eigenvalue is below 1e-14 ("inertia must have positive
      eigenvalues").
  """
  f = [float(x) for x in fullinertia]
  if len(f) != 6:
    raise ValueError(f"fullinertia needs 6 numbers, got {len(f)}")
  ev, quat = eig3([f[0], f[3], f[4], f[3], f[1], f[5], f[4], f[5], f[2]])
  if ev[2] < MJ_EPS:
    raise ValueError("fullinertia must have positive eigenvalues")
  return quat, ev


def explicit_inertial(*, diaginertia: Sequence[float] | None = None,
                      fullinertia: Sequence[float] | None = None,
                      quat: Sequence[float] | None = None) -> tuple[np.ndarray, np.ndarray]:
  """Inertial orientation and principal inertia of an explicit ``<inertial>`` element.

  Args:
    diaginertia: (3,) principal moments, about axes oriented by ``quat``.
    fullinertia: (6,) Ixx Iyy Izz Ixy Ixz Iyz; exclusive with diaginertia and with an
      orientation.
    quat: (4,) the element's orientation, resolved by :func:`frames.orient_quat` from whichever
      of quat/axisangle/euler/xyaxes/zaxis was given (None: identity).
  Returns:
    iquat (4,), inertia (3,). Diagonal inertia is returned as given (MuJoCo does not sort it).
  Raises:
    ValueError: both or neither of diaginertia and fullinertia, fullinertia with an orientation,
      or a fullinertia without positive eigenvalues.
  """
  if (diaginertia is None) == (fullinertia is None):
    raise ValueError("inertial needs exactly one of diaginertia and fullinertia")
  if fullinertia is not None:
    if quat is not None:
      raise ValueError("fullinertia and inertial orientation cannot both be specified")
    return full_inertia_frame(fullinertia)
  iquat = np.array([1.0, 0.0, 0.0, 0.0]) if quat is None else np.asarray(quat, dtype=np.float64)
  return iquat.copy(), np.array([float(x) for x in diaginertia])


def _global_inertia(local: Sequence[float], quat: Sequence[float]) -> list[float]:
  """mjuu_globalinertia: R diag(local) R^T as (xx, yy, zz, xy, xz, yz)."""
  m = frames.quat2mat(quat)
  t = [m[0] * local[0], m[3] * local[0], m[6] * local[0],
       m[1] * local[1], m[4] * local[1], m[7] * local[1],
       m[2] * local[2], m[5] * local[2], m[8] * local[2]]
  return [m[0] * t[0] + m[1] * t[3] + m[2] * t[6],
          m[3] * t[1] + m[4] * t[4] + m[5] * t[7],
          m[6] * t[2] + m[7] * t[5] + m[8] * t[8],
          m[0] * t[1] + m[1] * t[4] + m[2] * t[7],
          m[0] * t[2] + m[1] * t[5] + m[2] * t[8],
          m[3] * t[2] + m[4] * t[5] + m[5] * t[8]]


def _offcenter(mass: float, d: Sequence[float]) -> list[float]:
  """mjuu_offcenter: the inertia (xx, yy, zz, xy, xz, yz) of a point mass at offset d (3,)."""
  x, y, z = d
  return [mass * (y * y + z * z), mass * (x * x + z * z), mass * (x * x + y * y),
          -mass * x * y, -mass * x * z, -mass * y * z]


def body_inertial(masses: Sequence[float], inertias: np.ndarray, poss: np.ndarray,
                  quats: np.ndarray) -> tuple[float, np.ndarray, np.ndarray, np.ndarray]:
  """mjCBody::InertiaFromGeom: a body's inertial frame from its geoms.

  Pass every geom whose group lies in ``<compiler inertiagrouprange>``, massless ones (planes,
  mass 0) included: they change nothing numerically but, as in MuJoCo, a body with one such
  geom among several takes the principal-axis path. A single geom is copied: ipos/iquat are
  the geom's frame and the inertia is the geom's, unsorted. Several geoms are combined about
  their centre of mass with the parallel-axis theorem and diagonalized by :func:`eig3`.
  ``boundmass``/``boundinertia``/``balanceinertia`` are applied afterwards by the caller.

  Args:
    masses: (n,) geom masses.
    inertias: (n, 3) principal geom inertias in the geom frames.
    poss: (n, 3) geom positions in the body frame.
    quats: (n, 4) geom orientations in the body frame.
  Returns:
    (mass, ipos (3,), iquat (4,), inertia (3,)).
  Raises:
    ValueError: no geoms, or several with total mass below 1e-14 (MuJoCo: "body mass is too
      small, cannot compute center of mass"), or a combined inertia that is not positive
      definite.
  """
  masses = [float(m) for m in masses]
  inertias, poss, quats = (np.asarray(a, dtype=np.float64) for a in (inertias, poss, quats))
  n = len(masses)
  if n == 0:
    raise ValueError("body_inertial needs at least one geom")
  if n == 1:
    return masses[0], poss[0].copy(), quats[0].copy(), inertias[0].copy()
  mass = 0.0
  com = [0.0, 0.0, 0.0]
  for i in range(n):
    mass += masses[i]
    for k in range(3):
      com[k] += masses[i] * float(poss[i, k])
  if mass < MJ_EPS:
    raise ValueError("body mass is too small, cannot compute center of mass")
  ipos = [com[0] / mass, com[1] / mass, com[2] / mass]
  total = [0.0] * 6
  for i in range(n):
    rotated = _global_inertia([float(v) for v in inertias[i]], [float(v) for v in quats[i]])
    shift = _offcenter(masses[i], [float(poss[i, k]) - ipos[k] for k in range(3)])
    for j in range(6):
      total[j] = total[j] + rotated[j] + shift[j]
  try:
    iquat, inertia = full_inertia_frame(total)
  except ValueError as e:
    raise ValueError(f"the geoms' combined inertia is singular: {e}") from None
  return mass, np.array(ipos), iquat, inertia


def accumulate_inertia(body: tuple[float, np.ndarray, np.ndarray, np.ndarray],
                       other: tuple[float, np.ndarray, np.ndarray, np.ndarray],
                       other_pos: Sequence[float], other_quat: Sequence[float]
                       ) -> tuple[float, np.ndarray, np.ndarray, np.ndarray]:
  """mjCBody::AccumulateInertia: a body's inertial frame with another's added, as
  ``<compiler fusestatic>`` adds a fused body's to its parent's.

  Args:
    body, other: (mass, ipos (3,), iquat (4,), principal inertia (3,)), each in its own body's
      frame.
    other_pos, other_quat: the other body's frame in the first body's.
  Returns:
    (mass, ipos (3,), iquat (4,), inertia (3,)) of the sum; all zero (identity iquat) where the
    total mass is below 1e-15.
  Raises:
    ValueError: the summed inertia is not positive definite.
  """
  opos, oquat = frames.frame_accum(other_pos, other_quat, other[1], other[2])
  masses = [float(body[0]), float(other[0])]
  iposs = [[float(x) for x in body[1]], [float(x) for x in opos]]
  iquats = [body[2], oquat]
  inertias = [[float(x) for x in body[3]], [float(x) for x in other[3]]]
  mass = 0.0
  com = [0.0, 0.0, 0.0]
  for j in range(2):
    mass += masses[j]
    for k in range(3):
      com[k] += masses[j] * iposs[j][k]
  if mass < MJ_MINVAL:
    return 0.0, np.zeros(3), np.array([1.0, 0.0, 0.0, 0.0]), np.zeros(3)
  com = [c / mass for c in com]
  total = [0.0] * 6
  for j in range(2):
    rotated = _global_inertia(inertias[j], iquats[j])
    shift = _offcenter(masses[j], [iposs[j][k] - com[k] for k in range(3)])
    for k in range(6):
      total[k] += rotated[k] + shift[k]
  iquat, inertia = full_inertia_frame(total)
  return mass, np.array(com), iquat, inertia


def bound_inertial(mass: float, inertia: Sequence[float], *, boundmass: float = 0.0,
                   boundinertia: float = 0.0,
                   balanceinertia: bool = False) -> tuple[float, np.ndarray]:
  """The compiler's last correction of a (non-world) body's mass and principal inertia (3,).

  Clamps to ``<compiler boundmass boundinertia>``, then checks the triangle inequality
  A + B >= C of principal inertias: ``balanceinertia`` replaces all three by their mean, as
  MuJoCo does, otherwise it is an error.

  Raises:
    ValueError: negative mass or inertia, or non-physical inertia without balanceinertia.
  """
  mass = max(float(mass), boundmass)
  i0, i1, i2 = (max(float(x), boundinertia) for x in inertia)
  if mass < 0 or i0 < 0 or i1 < 0 or i2 < 0:
    raise ValueError("mass and inertia cannot be negative")
  if i0 + i1 < i2 or i0 + i2 < i1 or i1 + i2 < i0:
    if not balanceinertia:
      raise ValueError("inertia must satisfy A + B >= C; use 'balanceinertia' to fix")
    i0 = i1 = i2 = (i0 + i1 + i2) / 3.0
  return mass, np.array([i0, i1, i2])
