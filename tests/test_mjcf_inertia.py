"""Frames, geom inertia and body inertial frames of the MJCF compiler against MuJoCo's compiler.

Each test compiles tiny MJCF strings with ``mujoco.MjModel.from_xml_string`` and feeds the same
attributes to ``flexor.mjcf.frames`` / ``flexor.mjcf.inertia``. Both sides compute in float64 with
the same operation order, so most comparisons are exact; TOL bounds what remains.
"""

from __future__ import annotations

import math

import hypothesis
import mujoco
import numpy as np
import pytest
from hypothesis import strategies as st

from flexor.mjcf import frames, inertia
from flexor.types import GeomType, SameFrame

# The compiler arithmetic is repeated operation by operation, so the expected error is 0; this
# bound leaves room for one rounding in a differently ordered libm or summation.
TOL = 1e-12

_SETTINGS = hypothesis.settings(max_examples=60, deadline=None, derandomize=True,
                                suppress_health_check=list(hypothesis.HealthCheck))
_NAMES = {GeomType.PLANE: "plane", GeomType.SPHERE: "sphere", GeomType.CAPSULE: "capsule",
          GeomType.ELLIPSOID: "ellipsoid", GeomType.CYLINDER: "cylinder", GeomType.BOX: "box"}
_SOLIDS = (GeomType.SPHERE, GeomType.CAPSULE, GeomType.ELLIPSOID, GeomType.CYLINDER,
           GeomType.BOX)


def _fmt(values) -> str:
  return " ".join(repr(float(v)) for v in values)


def _compile(body: str, compiler: str = "", world: str = "") -> mujoco.MjModel:
  return mujoco.MjModel.from_xml_string(
      f"<mujoco><compiler {compiler}/><worldbody>{world}<body name='b'>{body}</body>"
      "</worldbody></mujoco>")


def _err(a, b) -> float:
  a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
  return float(np.max(np.abs(a - b) / (1 + np.abs(b))))


def _stored_size(gtype: int, size) -> np.ndarray:
  """A size with the entries a geom type does not use set to 0, as an MJCF author writes it."""
  s = np.array(size, dtype=np.float64)
  if gtype == GeomType.SPHERE:
    s[1:] = 0
  elif gtype in (GeomType.CAPSULE, GeomType.CYLINDER):
    s[2] = 0
  return s


# ----------------------------------------------------------------------------- orientation

_ORIENT = {"quat": 4, "axisangle": 4, "euler": 3, "xyaxes": 6, "zaxis": 3}
_floats = st.floats(-3.0, 3.0, allow_nan=False).map(lambda x: round(x, 6))


@st.composite
def _orientation(draw):
  kind = draw(st.sampled_from(sorted(_ORIENT)))
  value = draw(st.lists(_floats, min_size=_ORIENT[kind], max_size=_ORIENT[kind]))
  if kind in ("euler", "axisangle") and draw(st.booleans()):
    value[-1] = draw(st.sampled_from([0.0, 90.0, -180.0, 45.5, 360.0, 1e-9]))
  if kind == "zaxis" and draw(st.booleans()):  # the antiparallel and parallel special cases
    value = draw(st.sampled_from([[0.0, 0.0, -2.0], [0.0, 0.0, 1.0], [1e-12, 0.0, -1.0]]))
  seq = "".join(draw(st.lists(st.sampled_from("xyzXYZ"), min_size=3, max_size=3)))
  return kind, value, draw(st.booleans()), seq


@_SETTINGS
@hypothesis.given(_orientation())
def test_orient_quat_matches_body_geom_and_site(case):
  kind, value, degrees, seq = case
  attr = f'{kind}="{_fmt(value)}"'
  compiler = f'angle="{"degree" if degrees else "radian"}" eulerseq="{seq}"'
  try:
    m = _compile(f"<geom size='.1' {attr}/><site {attr}/>", compiler,
                 world=f"<body {attr}><geom size='.1'/></body>")
  except ValueError:
    with pytest.raises(ValueError):
      frames.orient_quat(kind, value, degrees=degrees, eulerseq=seq)
    return
  got = frames.orient_quat(kind, value, degrees=degrees, eulerseq=seq)
  for ref in (m.body_quat[1], m.geom_quat[1], m.site_quat[0]):
    assert _err(got, ref) <= TOL, (kind, value, degrees, seq, got, ref)


@pytest.mark.parametrize("seq", ["xyz", "XYZ", "zyx", "ZYX", "zxz", "XyZ", "yXy"])
@pytest.mark.parametrize("degrees", [True, False])
def test_euler_sequences(seq, degrees):
  angles = (30.0, -45.0, 60.0) if degrees else (0.3, -0.7, 1.1)
  m = _compile("<geom size='.1'/>", f'angle="{"degree" if degrees else "radian"}" '
               f'eulerseq="{seq}"', world=f"<body euler='{_fmt(angles)}'><geom size='.1'/></body>")
  got = frames.orient_quat("euler", angles, degrees=degrees, eulerseq=seq)
  np.testing.assert_array_equal(got, m.body_quat[1])


@pytest.mark.parametrize("kind,value", [
    ("quat", (0, 0, 0, 0)), ("axisangle", (0, 0, 0, 1)), ("xyaxes", (0, 0, 0, 0, 1, 0)),
    ("xyaxes", (1, 0, 0, 2, 0, 0)), ("zaxis", (0, 0, 0)), ("quat", (1, 0, 0)),
    ("euler", (1, 2, 3, 4))])
def test_orient_quat_rejects_bad_input(kind, value):
  with pytest.raises(ValueError):
    frames.orient_quat(kind, value, degrees=True, eulerseq="xyz")


@pytest.mark.parametrize("seq", ["xya", "xy", "xyzx"])
def test_orient_quat_rejects_bad_eulerseq(seq):
  with pytest.raises(ValueError):
    frames.orient_quat("euler", (1, 2, 3), degrees=True, eulerseq=seq)


# ----------------------------------------------------------------------------- fromto

@_SETTINGS
@hypothesis.given(st.sampled_from([GeomType.CAPSULE, GeomType.CYLINDER, GeomType.ELLIPSOID,
                                   GeomType.BOX]),
                  st.lists(_floats, min_size=6, max_size=6),
                  st.lists(st.floats(0.01, 1.0), min_size=3, max_size=3))
def test_fromto_geom_and_site(gtype, fromto, size):
  if math.dist(fromto[:3], fromto[3:]) < 1e-6:
    fromto[5] += 1.0
  attrs = f'type="{_NAMES[gtype]}" fromto="{_fmt(fromto)}" size="{_fmt(size)}"'
  m = _compile(f"<geom {attrs}/><site {attrs}/>")
  pos, quat, out = inertia.geom_fromto(gtype, fromto, size)
  for mpos, mquat, msize in ((m.geom_pos[0], m.geom_quat[0], m.geom_size[0]),
                             (m.site_pos[0], m.site_quat[0], m.site_size[0])):
    np.testing.assert_array_equal(pos, mpos)
    np.testing.assert_array_equal(quat, mquat)
    np.testing.assert_array_equal(out, msize)


def test_fromto_along_z_and_errors():
  # MuJoCo's z axis points from the second point to the first: "0 0 0 0 0 1" is a half turn
  m = _compile("<geom type='capsule' fromto='0 0 0 0 0 1' size='.1'/>"
               "<geom type='capsule' fromto='0 0 1 0 0 0' size='.1'/>")
  np.testing.assert_array_equal(frames.fromto_frame([0, 0, 0, 0, 0, 1])[1], m.geom_quat[0])
  np.testing.assert_array_equal(frames.fromto_frame([0, 0, 1, 0, 0, 0])[1], m.geom_quat[1])
  with pytest.raises(ValueError):
    inertia.geom_fromto(GeomType.SPHERE, [0, 0, 0, 0, 0, 1], [0.1, 0, 0])
  with pytest.raises(ValueError):
    frames.fromto_frame([1, 2, 3, 1, 2, 3])


# ----------------------------------------------------------------------------- geom inertia

@pytest.mark.parametrize("gtype", _SOLIDS)
@pytest.mark.parametrize("shell", [False, True])
@pytest.mark.parametrize("how", ["density", "mass"])
def test_single_geom_mass_inertia_rbound(gtype, shell, how):
  rng = np.random.default_rng(int(gtype) * 4 + 2 * shell + (how == "mass"))
  for _ in range(8):
    size = _stored_size(gtype, rng.uniform(0.01, 2.0, 3))
    density, mass = float(rng.uniform(1, 3000)), float(rng.uniform(0.01, 10))
    attrs = (f'type="{_NAMES[gtype]}" size="{_fmt(size)}" shellinertia="{str(shell).lower()}" '
             f'density="{density!r}"' + (f' mass="{mass!r}"' if how == "mass" else ""))
    m = _compile(f"<geom {attrs}/>")
    got_mass, got_inertia = inertia.geom_mass_inertia(
        gtype, size, density=density, mass=mass if how == "mass" else None, shellinertia=shell)
    assert got_mass == m.body_mass[1]
    np.testing.assert_array_equal(got_inertia, m.body_inertia[1])
    assert inertia.geom_rbound(gtype, size) == m.geom_rbound[0]
    assert inertia.geom_volume(gtype, size, shellinertia=shell) > 0


def test_massless_geoms_and_hfield():
  # a zero-mass geom next to a massive one: the body takes the eigen path with it included
  m = _compile("<geom size='.1' mass='0'/><geom type='box' size='.1 .2 .3' pos='.5 0 0'/>")
  assert inertia.geom_mass_inertia(GeomType.SPHERE, [0.1, 0, 0], density=1000, mass=0)[0] == 0
  masses, inertias = zip(*(inertia.geom_mass_inertia(t, s, density=1000, mass=ms) for t, s, ms in
                           ((GeomType.SPHERE, [0.1, 0, 0], 0.0),
                            (GeomType.BOX, [0.1, 0.2, 0.3], None))))
  out = inertia.body_inertial(masses, np.array(inertias), [[0, 0, 0], [0.5, 0, 0]],
                              [[1, 0, 0, 0], [1, 0, 0, 0]])
  for got, ref in zip(out, (m.body_mass[1], m.body_ipos[1], m.body_iquat[1], m.body_inertia[1])):
    np.testing.assert_array_equal(got, ref)
  plane_mass, plane_inertia = inertia.geom_mass_inertia(GeomType.PLANE, [1, 1, 1], density=1000)
  assert plane_mass == 0 and not plane_inertia.any()
  # hfields weigh as boxes of their compiled size, and bound by their asset size
  m = mujoco.MjModel.from_xml_string(
      "<mujoco><asset><hfield name='h' nrow='3' ncol='3' size='1 2 .3 .1'/></asset><worldbody>"
      "<body><geom type='hfield' hfield='h'/><geom size='.1' pos='0 0 1'/></body></worldbody>"
      "</mujoco>")
  hsize = [1, 2, 0.3, 0.1]
  gsize = m.geom_size[0]
  assert inertia.geom_rbound(GeomType.HFIELD, gsize, hfield_size=hsize) == m.geom_rbound[0]
  gm, gi = inertia.geom_mass_inertia(GeomType.HFIELD, gsize, density=1000)
  sm, si = inertia.geom_mass_inertia(GeomType.SPHERE, [0.1, 0, 0], density=1000)
  out = inertia.body_inertial([gm, sm], np.array([gi, si]), m.geom_pos, m.geom_quat)
  for got, ref in zip(out, (m.body_mass[1], m.body_ipos[1], m.body_iquat[1], m.body_inertia[1])):
    assert _err(got, ref) <= TOL


def test_mass_inertia_errors():
  with pytest.raises(ValueError):
    inertia.geom_mass_inertia(GeomType.SPHERE, [0.1, 0, 0], density=-1)
  with pytest.raises(ValueError):
    inertia.geom_mass_inertia(GeomType.MESH, [0.1, 0.1, 0.1], density=1, shellinertia=True)
  with pytest.raises(ValueError):
    inertia.body_inertial([0.0, 0.0], np.zeros((2, 3)), np.zeros((2, 3)),
                          [[1, 0, 0, 0], [1, 0, 0, 0]])
  with pytest.raises(ValueError):
    inertia.full_inertia_frame([1, 1, 1, 2, 0, 0])


# ----------------------------------------------------------------------------- body inertial

_geom_strategy = st.tuples(
    st.sampled_from(_SOLIDS), st.lists(st.floats(0.02, 1.0), min_size=3, max_size=3),
    st.lists(_floats, min_size=3, max_size=3), st.lists(_floats, min_size=4, max_size=4),
    st.booleans(), st.sampled_from([None, 0.5, 2.0]), st.floats(100, 2000))


def _body_from_geoms(geoms):
  xml, masses, inertias, poss, quats = "", [], [], [], []
  for gtype, size, pos, quat, shell, mass, density in geoms:
    if not any(quat):
      quat = [1, 0, 0, 0]
    size = _stored_size(gtype, size)
    xml += (f'<geom type="{_NAMES[gtype]}" size="{_fmt(size)}" pos="{_fmt(pos)}" '
            f'quat="{_fmt(quat)}" shellinertia="{str(shell).lower()}" density="{density!r}"'
            + (f' mass="{mass!r}"' if mass is not None else "") + "/>")
    gm, gi = inertia.geom_mass_inertia(gtype, size, density=density, mass=mass,
                                       shellinertia=shell)
    masses.append(gm)
    inertias.append(gi)
    poss.append(pos)
    quats.append(frames.orient_quat("quat", quat, degrees=True, eulerseq="xyz"))
  return xml, inertia.body_inertial(masses, np.array(inertias), np.array(poss), np.array(quats))


@_SETTINGS
@hypothesis.given(st.lists(_geom_strategy, min_size=1, max_size=4))
def test_body_inertial_random(geoms):
  xml, (mass, ipos, iquat, inert) = _body_from_geoms(geoms)
  m = _compile(xml)
  assert _err(mass, m.body_mass[1]) <= TOL
  assert _err(ipos, m.body_ipos[1]) <= TOL
  assert _err(iquat, m.body_iquat[1]) <= TOL
  assert _err(inert, m.body_inertia[1]) <= TOL
  for i in range(m.ngeom):
    assert int(frames.same_frame(m.geom_pos[i], m.geom_quat[i], ipos, iquat)) == \
        m.geom_sameframe[i]
  assert int(frames.same_frame(ipos, iquat)) == m.body_sameframe[1]


@pytest.mark.parametrize("xml", [
    # two equal spheres: axisymmetric, two equal principal moments
    "<geom size='.1' pos='-.3 0 0'/><geom size='.1' pos='.3 0 0'/>",
    # rotated pair, repeated eigenvalues in a tilted plane
    "<geom size='.1' pos='-.3 .3 0'/><geom size='.1' pos='.3 -.3 0'/>",
    # a cube out of two boxes: all three moments equal
    "<geom type='box' size='.1 .1 .05' pos='0 0 .05'/><geom type='box' size='.1 .1 .05' "
    "pos='0 0 -.05'/>",
    # three spheres on a tilted equilateral triangle
    "<geom size='.05' pos='1 0 0'/><geom size='.05' pos='-.5 .8660254037844386 0'/>"
    "<geom size='.05' pos='-.5 -.8660254037844386 0'/>",
    # capsules crossed at right angles, offset
    "<geom type='capsule' fromto='-.2 0 0 .2 0 0' size='.05'/><geom type='capsule' "
    "fromto='0 -.2 .1 0 .2 .1' size='.05'/>",
    # nearly degenerate moments (relative gap 1e-7)
    "<geom type='box' size='.1 .1000000001 .3' euler='10 20 30'/><geom size='.01' pos='0 0 .3'/>",
])
def test_body_inertial_symmetric(xml):
  m = _compile(xml)
  masses, inertias, poss, quats = [], [], [], []
  spec = mujoco.MjSpec.from_string(f"<mujoco><worldbody><body>{xml}</body></worldbody></mujoco>")
  for i, g in enumerate(spec.geoms):
    size = m.geom_size[i]
    gm, gi = inertia.geom_mass_inertia(int(g.type), size, density=g.density)
    masses.append(gm)
    inertias.append(gi)
    if not math.isnan(g.fromto[0]):
      pos, quat, _ = inertia.geom_fromto(int(g.type), g.fromto, g.size)
    elif g.alt.type == mujoco.mjtOrientation.mjORIENTATION_EULER:
      pos, quat = g.pos, frames.orient_quat("euler", g.alt.euler, degrees=True, eulerseq="xyz")
    else:
      pos, quat = g.pos, frames.orient_quat("quat", g.quat, degrees=True, eulerseq="xyz")
    poss.append(pos)
    quats.append(quat)
  mass, ipos, iquat, inert = inertia.body_inertial(masses, np.array(inertias), np.array(poss),
                                                   np.array(quats))
  assert _err(mass, m.body_mass[1]) <= TOL
  assert _err(ipos, m.body_ipos[1]) <= TOL
  assert _err(iquat, m.body_iquat[1]) <= TOL
  assert _err(inert, m.body_inertia[1]) <= TOL


@_SETTINGS
@hypothesis.given(st.lists(st.floats(0.1, 2.0), min_size=3, max_size=3),
                  st.lists(_floats, min_size=4, max_size=4),
                  st.sampled_from([0.0, 1e-3, 1e-6, 1e-9]))
def test_fullinertia(diag, quat, gap):
  if not any(quat):
    quat = [1, 0, 0, 0]
  diag = sorted(diag)
  diag[1] = diag[2] * (1 - gap)  # repeated and nearly repeated principal moments
  rot = np.array(frames.quat2mat(frames.normvec(quat)[0])).reshape(3, 3)
  full_mat = rot @ np.diag(diag) @ rot.T
  full = [full_mat[0, 0], full_mat[1, 1], full_mat[2, 2], full_mat[0, 1], full_mat[0, 2],
          full_mat[1, 2]]
  m = _compile(f"<inertial pos='0 0 0' mass='1' fullinertia='{_fmt(full)}'/>")
  iquat, inert = inertia.full_inertia_frame(full)
  np.testing.assert_array_equal(iquat, m.body_iquat[1])
  np.testing.assert_array_equal(inert, m.body_inertia[1])
  iquat2, inert2 = inertia.explicit_inertial(fullinertia=full)
  np.testing.assert_array_equal(iquat2, iquat)
  np.testing.assert_array_equal(inert2, inert)


@pytest.mark.parametrize("orient", ["quat='1 2 3 4'", "euler='10 20 30'", "axisangle='1 1 0 45'",
                                    "xyaxes='0 1 0 -1 0 0'", "zaxis='1 1 1'"])
def test_diaginertia_in_rotated_frame(orient):
  m = _compile(f"<inertial pos='.1 .2 .3' {orient} mass='2' diaginertia='.1 .3 .2'/>")
  kind, value = orient.split("=")
  quat = frames.orient_quat(kind, [float(x) for x in value.strip("'").split()], degrees=True,
                            eulerseq="xyz")
  iquat, inert = inertia.explicit_inertial(diaginertia=[0.1, 0.3, 0.2], quat=quat)
  np.testing.assert_array_equal(iquat, m.body_iquat[1])
  np.testing.assert_array_equal(inert, m.body_inertia[1])
  with pytest.raises(ValueError):
    inertia.explicit_inertial(fullinertia=[1, 1, 1, 0, 0, 0], quat=quat)


def test_bound_inertial():
  m = _compile("<geom size='.001'/>", "boundmass='.5' boundinertia='.01'")
  gm, gi = inertia.geom_mass_inertia(GeomType.SPHERE, [0.001, 0, 0], density=1000)
  mass, inert = inertia.bound_inertial(gm, gi, boundmass=0.5, boundinertia=0.01)
  assert mass == m.body_mass[1]
  np.testing.assert_array_equal(inert, m.body_inertia[1])
  m = _compile("<inertial pos='0 0 0' mass='1' diaginertia='1 1 5'/>", "balanceinertia='true'")
  mass, inert = inertia.bound_inertial(1.0, [1, 1, 5], balanceinertia=True)
  np.testing.assert_array_equal(inert, m.body_inertia[1])
  with pytest.raises(ValueError):
    inertia.bound_inertial(1.0, [1, 1, 5])


# ----------------------------------------------------------------------------- sameframe

@pytest.mark.parametrize("offset,expected", [(1e-7, SameFrame.BODY), (9.9e-7, SameFrame.BODY),
                                             (1e-6, SameFrame.BODYROT)])
def test_same_frame_tolerance(offset, expected):
  """A position within 1e-6 (strictly) of the body origin counts as the same frame."""
  m = _compile(f"<geom size='.1' pos='{offset!r} 0 0'/><site pos='0 {offset!r} 0'/>"
               f"<site pos='.3 0 0' quat='1 {2 * offset!r} 0 0'/>")
  assert m.geom_sameframe[0] == expected == frames.same_frame(
      m.geom_pos[0], m.geom_quat[0], m.body_ipos[1], m.body_iquat[1])
  assert m.body_sameframe[1] == expected == frames.same_frame(m.body_ipos[1], m.body_iquat[1])
  assert int(frames.same_frame(m.site_pos[0], m.site_quat[0], m.body_ipos[1],
                               m.body_iquat[1])) == m.site_sameframe[0]
  assert int(frames.same_frame(m.site_pos[1], m.site_quat[1], m.body_ipos[1],
                               m.body_iquat[1])) == m.site_sameframe[1]


def test_same_frame_inertia_cases():
  # one geom with an offset and rotation: the inertial frame is the geom's (INERTIA); a second,
  # massless geom there with another position shares only the orientation (INERTIAROT)
  m = _compile("<geom type='box' size='.1 .2 .3' pos='.5 0 0' euler='0 0 30'/>"
               "<site pos='.5 0 0' euler='0 0 30'/><site pos='.7 0 0' euler='0 0 30'/>"
               "<site pos='.7 0 0' euler='0 0 -30'/>")
  ipos, iquat = m.body_ipos[1], m.body_iquat[1]
  assert m.geom_sameframe[0] == SameFrame.INERTIA
  assert frames.same_frame(m.geom_pos[0], m.geom_quat[0], ipos, iquat) == SameFrame.INERTIA
  for i, expected in enumerate((SameFrame.INERTIA, SameFrame.INERTIAROT, SameFrame.NONE)):
    assert m.site_sameframe[i] == expected
    assert frames.same_frame(m.site_pos[i], m.site_quat[i], ipos, iquat) == expected
  assert frames.same_frame(ipos, iquat) == m.body_sameframe[1] == SameFrame.NONE
