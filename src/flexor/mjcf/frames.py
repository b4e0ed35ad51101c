"""Frames of the MJCF compiler: orientation forms, fromto frames, frame composition, sameframe.

Host side, plain Python floats: every function repeats MuJoCo's compiler arithmetic
(``src/user/user_util.cc`` and ``ResolveOrientation`` in ``src/user/user_objects.cc``) operation
by operation, with ``math`` (C libm) rather than numpy's vectorised transcendental functions, so
that compiled quaternions equal MuJoCo's bit for bit, not just to rounding.

Quaternions are (w, x, y, z); positions are in the parent frame's length unit.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from flexor.types import SameFrame

MJ_EPS = 1e-14          # mjEPS
MJ_MINVAL = 1e-15       # mjMINVAL
_FRAME_EPS = 1e-6       # user_model.cc kFrameEps: element-wise tolerance of IsSamePose
_ORIENT_LEN = {"quat": 4, "axisangle": 4, "euler": 3, "xyaxes": 6, "zaxis": 3}


def normvec(vec: Sequence[float]) -> tuple[list[float], float]:
  """mjuu_normvec: (normalized copy, previous norm).

  Zero (squared norm below mjEPS) returns the vector unchanged and norm 0; a vector whose norm is
  within mjEPS of 1 is also left unchanged, as MuJoCo does, which keeps already-unit input exact.
  """
  v = [float(x) for x in vec]
  nrm = 0.0
  for x in v:
    nrm += x * x
  if nrm < MJ_EPS:
    return v, 0.0
  nrm = math.sqrt(nrm)
  if abs(nrm - 1) > MJ_EPS:
    v = [x / nrm for x in v]
  return v, nrm


def mulquat(qa: Sequence[float], qb: Sequence[float]) -> list[float]:
  """mjuu_mulquat: the product qa * qb, renormalized like MuJoCo's compiler does."""
  w = qa[0] * qb[0] - qa[1] * qb[1] - qa[2] * qb[2] - qa[3] * qb[3]
  x = qa[0] * qb[1] + qa[1] * qb[0] + qa[2] * qb[3] - qa[3] * qb[2]
  y = qa[0] * qb[2] - qa[1] * qb[3] + qa[2] * qb[0] + qa[3] * qb[1]
  z = qa[0] * qb[3] + qa[1] * qb[2] - qa[2] * qb[1] + qa[3] * qb[0]
  return normvec((w, x, y, z))[0]


def quat2mat(quat: Sequence[float]) -> list[float]:
  """mjuu_quat2mat: row-major 3x3 rotation matrix (9,) of a unit quaternion."""
  if quat[0] == 1 and quat[1] == 0 and quat[2] == 0 and quat[3] == 0:
    return [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0]
  q00, q01, q02, q03 = quat[0] * quat[0], quat[0] * quat[1], quat[0] * quat[2], quat[0] * quat[3]
  q11, q12, q13 = quat[1] * quat[1], quat[1] * quat[2], quat[1] * quat[3]
  q22, q23, q33 = quat[2] * quat[2], quat[2] * quat[3], quat[3] * quat[3]
  return [q00 + q11 - q22 - q33, 2 * (q12 - q03), 2 * (q13 + q02),
          2 * (q12 + q03), q00 - q11 + q22 - q33, 2 * (q23 - q01),
          2 * (q13 - q02), 2 * (q23 + q01), q00 - q11 - q22 + q33]


def _cross(b: Sequence[float], c: Sequence[float]) -> list[float]:
  return [b[1] * c[2] - b[2] * c[1], b[2] * c[0] - b[0] * c[2], b[0] * c[1] - b[1] * c[0]]


def z2quat(vec: Sequence[float]) -> list[float]:
  """mjuu_z2quat: minimal rotation taking (0, 0, 1) to ``vec`` (3,), a unit vector.

  When ``vec`` is (anti)parallel to z the rotation axis is taken as x, so (0, 0, -1) gives a
  half-turn about x: quat (0, 1, 0, 0) (cos(pi/2) rounds to 6.1e-17, as in MuJoCo).
  """
  axis, s = normvec(_cross((0.0, 0.0, 1.0), vec))
  if s < 1e-10:
    axis = [1.0, 0.0, 0.0]
  ang = math.atan2(s, vec[2])
  sa = math.sin(ang / 2)
  return [math.cos(ang / 2), axis[0] * sa, axis[1] * sa, axis[2] * sa]


def frame2quat(x: Sequence[float], y: Sequence[float], z: Sequence[float]) -> list[float]:
  """mjuu_frame2quat: quaternion of the rotation whose matrix columns are the axes x, y, z."""
  m = (x, y, z)  # m[c][r]: column c, row r
  if m[0][0] + m[1][1] + m[2][2] > 0:
    w = 0.5 * math.sqrt(1 + m[0][0] + m[1][1] + m[2][2])
    q = [w, 0.25 * (m[1][2] - m[2][1]) / w, 0.25 * (m[2][0] - m[0][2]) / w,
         0.25 * (m[0][1] - m[1][0]) / w]
  elif m[0][0] > m[1][1] and m[0][0] > m[2][2]:
    a = 0.5 * math.sqrt(1 + m[0][0] - m[1][1] - m[2][2])
    q = [0.25 * (m[1][2] - m[2][1]) / a, a, 0.25 * (m[1][0] + m[0][1]) / a,
         0.25 * (m[2][0] + m[0][2]) / a]
  elif m[1][1] > m[2][2]:
    a = 0.5 * math.sqrt(1 - m[0][0] + m[1][1] - m[2][2])
    q = [0.25 * (m[2][0] - m[0][2]) / a, 0.25 * (m[1][0] + m[0][1]) / a, a,
         0.25 * (m[2][1] + m[1][2]) / a]
  else:
    a = 0.5 * math.sqrt(1 - m[0][0] - m[1][1] + m[2][2])
    q = [0.25 * (m[0][1] - m[1][0]) / a, 0.25 * (m[2][0] + m[0][2]) / a,
         0.25 * (m[2][1] + m[1][2]) / a, a]
  return normvec(q)[0]


def orient_quat(kind: str, value: Sequence[float], *, degrees: bool, eulerseq: str) -> np.ndarray:
  """Unit quaternion (4,) of an MJCF orientation, as MuJoCo's compiler resolves it.

  Args:
    kind: the attribute: ``quat`` (normalized, as the compiler does for every element),
      ``axisangle`` (x y z angle; the axis is normalized), ``euler`` (three angles applied in
      the order of ``eulerseq``), ``xyaxes`` (x axis, then y axis made orthogonal to x by
      Gram-Schmidt; z = x cross y), ``zaxis`` (minimal rotation taking (0,0,1) to the axis).
    value: the attribute's numbers: 4, 4, 3, 6 or 3 of them.
    degrees: ``<compiler angle="degree">``: angles of axisangle and euler are in degrees.
    eulerseq: ``<compiler eulerseq>``, three of ``xyzXYZ``; a lowercase letter rotates about the
      moving (intrinsic) axis, i.e. post-multiplies, an uppercase one about the fixed
      (extrinsic) axis, i.e. pre-multiplies; mixing is allowed, as in MuJoCo.
  Returns:
    float64 (4,) quaternion (w, x, y, z).
  Raises:
    ValueError: unknown kind, wrong number of values, a zero quaternion or axis, or a bad
      eulerseq.
  """
  if kind not in _ORIENT_LEN:
    raise ValueError(f"unknown orientation '{kind}'; expected one of {sorted(_ORIENT_LEN)}")
  v = [float(x) for x in value]
  if len(v) != _ORIENT_LEN[kind]:
    raise ValueError(f"{kind} needs {_ORIENT_LEN[kind]} numbers, got {len(v)}")
  if kind == "quat":
    q, nrm = normvec(v)
    if nrm == 0:
      raise ValueError("quat has zero norm; give a nonzero quaternion (w x y z)")
  elif kind == "axisangle":
    angle = v[3] / 180.0 * math.pi if degrees else v[3]
    axis, nrm = normvec(v[:3])
    if nrm < MJ_EPS:
      raise ValueError("axisangle axis has zero length; give a nonzero rotation axis")
    s = math.sin(angle / 2)
    q = [math.cos(angle / 2), s * axis[0], s * axis[1], s * axis[2]]
  elif kind == "xyaxes":
    x, nrm = normvec(v[:3])
    if nrm < MJ_EPS:
      raise ValueError("xyaxes x axis has zero length")
    d = x[0] * v[3] + x[1] * v[4] + x[2] * v[5]
    y, nrm = normvec([v[3] - x[0] * d, v[4] - x[1] * d, v[5] - x[2] * d])
    if nrm < MJ_EPS:
      raise ValueError("xyaxes y axis is zero or parallel to the x axis")
    z, nrm = normvec(_cross(x, y))
    if nrm < MJ_EPS:
      raise ValueError("xyaxes: cross(x axis, y axis) too small")
    q = frame2quat(x, y, z)
  elif kind == "zaxis":
    z, nrm = normvec(v)
    if nrm < MJ_EPS:
      raise ValueError("zaxis has zero length; give a nonzero direction")
    q = z2quat(z)
  else:
    q = _euler_quat(v, degrees, eulerseq)
  return np.array(q, dtype=np.float64)


def _euler_quat(angles: list[float], degrees: bool, eulerseq: str) -> list[float]:
  if len(eulerseq) != 3 or any(c not in "xyzXYZ" for c in eulerseq):
    raise ValueError(f"eulerseq '{eulerseq}' must be three of x, y, z, X, Y, Z")
  if degrees:
    angles = [a / 180.0 * math.pi for a in angles]
  q = [1.0, 0.0, 0.0, 0.0]
  for a, axis in zip(angles, eulerseq):
    rot = [math.cos(a / 2), 0.0, 0.0, 0.0]
    rot["xyz".index(axis.lower()) + 1] = math.sin(a / 2)
    q = mulquat(q, rot) if axis.islower() else mulquat(rot, q)
  return normvec(q)[0]


def fromto_frame(fromto: Sequence[float]) -> tuple[np.ndarray, np.ndarray, float]:
  """Frame of a ``fromto`` segment, as MuJoCo's geom and site compiler builds it.

  Args:
    fromto: (6,) the two end points (x1 y1 z1 x2 y2 z2) in the parent frame.
  Returns:
    pos (3,): the midpoint; quat (4,): minimal rotation of +z onto the direction from the second
    point to the first (MuJoCo takes ``from - to``; the shapes it is used for are symmetric, so
    only the sign of the frame's z axis differs from the from->to reading); half_length: half
    the distance between the points.
  Raises:
    ValueError: wrong length, or points closer than 2e-14 (MuJoCo: "fromto points too close").
  """
  f = [float(x) for x in fromto]
  if len(f) != 6:
    raise ValueError(f"fromto needs 6 numbers, got {len(f)}")
  vec, nrm = normvec([f[0] - f[3], f[1] - f[4], f[2] - f[5]])
  half = nrm / 2
  if half < MJ_EPS:
    raise ValueError("fromto points too close; the two end points must differ")
  pos = np.array([(f[0] + f[3]) / 2, (f[1] + f[4]) / 2, (f[2] + f[5]) / 2])
  return pos, np.array(z2quat(vec)), half


def rot_vec_quat(vec: Sequence[float], quat: Sequence[float]) -> list[float]:
  """Rotates ``vec`` (3,) by ``quat`` (4,) through the rotation matrix, as mjuu_frameaccum does."""
  m = quat2mat(quat)
  return [m[0] * vec[0] + m[1] * vec[1] + m[2] * vec[2],
          m[3] * vec[0] + m[4] * vec[1] + m[5] * vec[2],
          m[6] * vec[0] + m[7] * vec[1] + m[8] * vec[2]]


def frame_accum(pos: Sequence[float], quat: Sequence[float], child_pos: Sequence[float],
                child_quat: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
  """mjuu_frameaccum: the child frame (child_pos (3,), child_quat (4,)), given relative to the
  frame (pos, quat), expressed in that frame's parent: returns (pos (3,), quat (4,)).

  This is how the compiler applies ``<frame>`` elements and mesh offsets to geoms and sites.
  """
  v = rot_vec_quat(child_pos, quat)
  p = np.array([pos[0] + v[0], pos[1] + v[1], pos[2] + v[2]])
  return p, np.array(mulquat(quat, child_quat))


def frame_invert(pos: Sequence[float], quat: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
  """mjuu_frameinvert: the inverse (pos (3,), quat (4,)) of the frame (pos, quat)."""
  conj = [quat[0], -quat[1], -quat[2], -quat[3]]
  return -np.array(rot_vec_quat(pos, conj)), np.array(conj)


def _same_vec(a: Sequence[float], b: Sequence[float]) -> bool:
  return all(abs(float(a[i]) - float(b[i])) < _FRAME_EPS for i in range(3))


def _same_quat(a: Sequence[float], b: Sequence[float]) -> bool:
  minus = all(abs(float(a[i]) - float(b[i])) < _FRAME_EPS for i in range(4))
  plus = all(abs(float(a[i]) + float(b[i])) < _FRAME_EPS for i in range(4))
  return minus or plus


def same_frame(pos: Sequence[float], quat: Sequence[float], ipos: Sequence[float] | None = None,
               iquat: Sequence[float] | None = None) -> SameFrame:
  """MuJoCo's ``*_sameframe`` of a frame (pos (3,), quat (4,)) relative to its body.

  Two positions count as the same when every coordinate differs by less than 1e-6 (so 1e-7 is
  the same and 1e-6 is not); two quaternions when every component differs by less than 1e-6,
  either q or -q (the double cover). The cases are tried in MuJoCo's order: BODY (null pose),
  BODYROT (identity orientation), INERTIA (equal to the body's inertial frame), INERTIAROT
  (orientation equal to the inertial frame's), else NONE.

  Args:
    pos, quat: the geom's or site's compiled frame in its body, or a body's ``body_ipos`` and
      ``body_iquat`` for ``body_sameframe``.
    ipos, iquat: the body's compiled inertial frame (``body_ipos`` (3,), ``body_iquat`` (4,)) for
      geoms and sites; None for ``body_sameframe``, which only distinguishes BODY, BODYROT and
      NONE.
  """
  unit = (1.0, 0.0, 0.0, 0.0)
  if _same_vec(pos, (0.0, 0.0, 0.0)) and _same_quat(quat, unit):
    return SameFrame.BODY
  if _same_quat(quat, unit):
    return SameFrame.BODYROT
  if ipos is None or iquat is None:
    return SameFrame.NONE
  if _same_vec(pos, ipos) and _same_quat(quat, iquat):
    return SameFrame.INERTIA
  if _same_quat(quat, iquat):
    return SameFrame.INERTIAROT
  return SameFrame.NONE
