"""Contact pairs, excludes and the narrow phase's candidates against MuJoCo.

Compiled ``pair_*`` and ``exclude_signature`` are compared with MuJoCo's mjModel field by field.
The candidates (``collision_geom``) are compared with the geom pairs MuJoCo's ``mj_collision``
actually collides when every pair is guaranteed to touch: all body and geom offsets zeroed (so
every geom sits at the origin, deep inside every other) and a huge override margin. In that state
the bounding-volume broad phase lets everything through and each pair yields at least one
contact, so the consecutive distinct (geom1, geom2) of ``d.contact``, restricted to the type
pairs flexor supports, must equal flexor's candidate list, order included.

Models are compiled without ``flexor.setconst`` (``compile_model`` only): candidates are a
compile-time table and this keeps the file fast and independent of the simulation stages.
"""

from __future__ import annotations

import warnings

import mujoco
import numpy as np
import pytest

from flexor import MJCFError
from flexor.mjcf import contact_pairs, parse
from flexor.mjcf.compile import compile_model
from flexor.mjcf.from_mujoco import from_mujoco

import support

_PAIR_FIELDS = ("pair_dim", "pair_geom1", "pair_geom2", "pair_signature", "pair_solref",
                "pair_solreffriction", "pair_solimp", "pair_margin", "pair_gap", "pair_friction",
                "exclude_signature")
_FILTERPARENT = mujoco.mjtDisableBit.mjDSBL_FILTERPARENT
_MIDPHASE = mujoco.mjtDisableBit.mjDSBL_MIDPHASE


def _compile(data: bytes, path: str | None = None):
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    return compile_model(parse.load(data, path))[0]


def _compile_path(path: str):
  with open(path, "rb") as f:
    return _compile(f.read(), path)


def _distinct(pairs) -> list[tuple[int, int]]:
  """Consecutive repeats collapsed: one entry per narrow phase call."""
  out: list[tuple[int, int]] = []
  for g1, g2 in pairs:
    if not out or out[-1] != (int(g1), int(g2)):
      out.append((int(g1), int(g2)))
  return out


def _mujoco_collided(m: mujoco.MjModel) -> tuple[list[tuple[int, int]], mujoco.MjData]:
  """The supported geom pairs MuJoCo collides with every geom at the origin, in order."""
  m.opt.enableflags |= mujoco.mjtEnableBit.mjENBL_OVERRIDE
  m.opt.o_margin = 100.0
  m.opt.disableflags &= ~(mujoco.mjtDisableBit.mjDSBL_CONTACT
                          | mujoco.mjtDisableBit.mjDSBL_CONSTRAINT)
  m.body_pos[:] = 0
  m.geom_pos[:] = 0
  d = mujoco.MjData(m)
  for j in np.flatnonzero(m.jnt_type == mujoco.mjtJoint.mjJNT_FREE):
    d.qpos[m.jnt_qposadr[j]:m.jnt_qposadr[j] + 3] = 0
  d.mocap_pos[:] = 0
  mujoco.mj_forward(m, d)
  assert d.warning[mujoco.mjtWarning.mjWARN_CONTACTFULL].number == 0
  supported = [tuple(g) for g in d.contact.geom[:d.ncon]
               if tuple(sorted(m.geom_type[g])) in contact_pairs.SUPPORTED | contact_pairs.MULTI]
  return _distinct(supported), d


def _check(ours, m: mujoco.MjModel) -> None:
  """flexor's compiled Model ``ours`` against MuJoCo's ``m`` (modified here)."""
  for name in _PAIR_FIELDS:
    a, b = np.asarray(getattr(ours, name)), np.asarray(getattr(m, name))
    assert a.shape == b.shape, f"{name}: shape {a.shape} != {b.shape}"
    np.testing.assert_array_equal(a, b, err_msg=name)
  geom = [tuple(g) for g in np.asarray(ours.collision_geom).tolist()]
  pairid = np.asarray(ours.collision_pairid)
  assert ours.ncollision == len(geom) == len(pairid)
  # the candidates' types: geom1 of the lower type, a pair flexor supports
  types = m.geom_type[np.array(geom, dtype=np.int64).reshape(-1, 2)]
  assert np.all(types[:, 0] <= types[:, 1])
  collided_types = contact_pairs.SUPPORTED | contact_pairs.MULTI
  assert all(tuple(t) in collided_types for t in types.tolist())
  # explicit pairs keep their geoms; the rest are found by the filters
  for (g1, g2), k in zip(geom, pairid.tolist()):
    if k >= 0:
      assert {g1, g2} == {int(m.pair_geom1[k]), int(m.pair_geom2[k])}
  assert ours.nconmax == sum(mujoco.mj_maxContact(m, g1, g2, 1) for g1, g2 in geom)
  collided, d = _mujoco_collided(m)
  assert _distinct(geom) == collided
  # no candidate makes more contacts than its slots
  counts: dict[tuple[int, int], int] = {}
  for g in d.contact.geom[:d.ncon]:
    counts[tuple(int(x) for x in g)] = counts.get(tuple(int(x) for x in g), 0) + 1
  for g1, g2 in set(geom):
    slots = sum(mujoco.mj_maxContact(m, g1, g2, 1) for c in geom if c == (g1, g2))
    assert counts.get((g1, g2), 0) <= slots


def _check_xml(xml: str) -> None:
  _check(_compile(xml.encode()), mujoco.MjModel.from_xml_string(xml))


# --- own scenes ---------------------------------------------------------------------------

# every <pair> attribute, none, nested default classes with partial values, body order swapped,
# both geoms on one body, two world geoms, plane-plane (no collision function), a pair that
# repeats a dynamic pair (MuJoCo merges them), a repeated pair, contype 0 geoms in a pair
_PAIRS = """
<mujoco>
  <default>
    <pair friction="3 4" solimp="0.5" margin="0.01"/>
    <default class="c"><pair friction="7" condim="4" solref="0.05"/></default>
    <default class="d"><pair condim="1" gap="0.02" solreffriction="-100"/></default>
  </default>
  <worldbody>
    <geom name="floor" type="plane" size="5 5 0.1"/>
    <geom name="floor2" type="plane" size="5 5 0.1" pos="0 0 -1"/>
    <geom name="post" type="box" size="0.1 0.1 1" pos="2 0 0"/>
    <body name="a" pos="0 0 1">
      <freejoint/>
      <geom name="a1" type="sphere" size="0.1"/>
      <geom name="a2" type="box" size="0.1 0.1 0.1" contype="0" conaffinity="0"/>
      <geom name="a3" type="capsule" size="0.05 0.2"/>
    </body>
    <body name="b" pos="1 0 1">
      <freejoint/>
      <geom name="b1" type="box" size="0.1 0.2 0.3"/>
      <geom name="b2" type="cylinder" size="0.1 0.2"/>
      <body name="c" pos="0 0 1">
        <joint type="hinge"/>
        <geom name="c1" type="capsule" size="0.05 0.2"/>
        <geom name="c2" type="ellipsoid" size="0.1 0.2 0.3"/>
      </body>
    </body>
  </worldbody>
  <contact>
    <pair geom1="b1" geom2="a1" condim="6" friction="1 2 3 4 5" solref="0.1 2"
          solreffriction="0.2 3" solimp="0.8 0.9 0.01 0.4 3" margin="0.3" gap="0.1"/>
    <pair geom1="a2" geom2="c1"/>
    <pair class="c" geom1="c1" geom2="a3"/>
    <pair class="d" geom1="a1" geom2="floor"/>
    <pair geom1="a1" geom2="a3"/>
    <pair geom1="floor" geom2="post"/>
    <pair geom1="floor" geom2="floor2"/>
    <pair geom1="c1" geom2="a3" friction="0.5"/>
    <pair geom1="a1" geom2="c2"/>
    <pair geom1="b2" geom2="floor"/>
  </contact>
</mujoco>
"""

# a tree with welded, hinged, mocap and static bodies, world geoms, excludes and contype bits;
# {flags} is filled with <flag> attributes
_TREE = """
<mujoco>
  <option><flag {flags}/></option>
  <worldbody>
    <geom name="floor" type="plane" size="5 5 0.1"/>
    <geom name="wall" type="box" size="0.1 1 1" pos="3 0 0"/>
    <body name="static" pos="0 2 0">
      <geom name="s1" type="sphere" size="0.2"/>
      <body name="static_child"><geom name="s2" type="capsule" size="0.1 0.3"/></body>
    </body>
    <body name="mocap" mocap="true" pos="0 -2 1">
      <geom name="m1" type="box" size="0.1 0.1 0.1"/>
      <geom name="mplane" type="plane" size="1 1 0.1"/>
      <body name="under_mocap" pos="0 0 0.5">
        <joint type="hinge"/>
        <geom name="um" type="capsule" size="0.05 0.2"/>
      </body>
    </body>
    <body name="torso" pos="0 0 1">
      <freejoint/>
      <geom name="t1" type="box" size="0.2 0.1 0.1"/>
      <geom name="t2" type="sphere" size="0.1" pos="0.2 0 0" contype="2" conaffinity="2"/>
      <body name="welded" pos="0.3 0 0">
        <geom name="w1" type="capsule" size="0.05 0.1"/>
        <body name="thigh" pos="0.2 0 0">
          <joint type="hinge"/>
          <geom name="th" type="capsule" size="0.05 0.2" contype="4" conaffinity="1"/>
          <body name="shin" pos="0 0 -0.4">
            <joint type="hinge"/>
            <geom name="sh" type="capsule" size="0.04 0.2" contype="1" conaffinity="4"/>
            <body name="foot" pos="0 0 -0.3">
              <joint type="slide"/>
              <geom name="ft" type="box" size="0.1 0.05 0.02" contype="8" conaffinity="8"/>
              <geom name="ft2" type="sphere" size="0.03" contype="0" conaffinity="0"/>
            </body>
          </body>
        </body>
      </body>
      <body name="arm" pos="-0.3 0 0">
        <joint type="ball"/>
        <geom name="ar" type="capsule" size="0.04 0.2"/>
        <geom name="ar2" type="cylinder" size="0.04 0.1" contype="2" conaffinity="0"/>
      </body>
    </body>
    <body name="ball" pos="1 1 1">
      <freejoint/>
      <geom name="bl" type="sphere" size="0.1" contype="3" conaffinity="5"/>
    </body>
  </worldbody>
  <contact>
    <exclude body1="ball" body2="torso"/>
    <exclude body1="world" body2="arm"/>
    <exclude body1="foot" body2="foot"/>
    <exclude body1="shin" body2="thigh"/>
  </contact>
</mujoco>
"""

_FLAGS = {"default": "", "filterparent_off": "filterparent='disable'",
          "midphase_off": "midphase='disable'",
          "both_off": "filterparent='disable' midphase='disable'"}


def test_pairs_compile_as_mujoco():
  _check_xml(_PAIRS)


@pytest.mark.parametrize("flags", list(_FLAGS), ids=list(_FLAGS))
def test_filters_match_mujoco(flags: str):
  _check_xml(_TREE.format(flags=_FLAGS[flags]))


def test_filterparent_changes_candidates():
  on = _compile(_TREE.format(flags="").encode())
  off = _compile(_TREE.format(flags=_FLAGS["filterparent_off"]).encode())
  assert off.ncollision > on.ncollision
  parent_child = {tuple(g) for g in np.asarray(off.collision_geom).tolist()} - {
      tuple(g) for g in np.asarray(on.collision_geom).tolist()}
  names = on.names_geom
  assert {tuple(sorted((names[a], names[b]))) for a, b in parent_child} >= {("t1", "th")}


def test_static_geoms_never_collide():
  m = _compile(_TREE.format(flags="").encode())
  bodyid = np.asarray(m.geom_bodyid)
  weld = [0 if b in (0, 1, 2) else b for b in range(m.nbody)]  # world, static, static_child
  for g1, g2 in np.asarray(m.collision_geom).tolist():
    assert weld[bodyid[g1]] != 0 or weld[bodyid[g2]] != 0


def test_excludes_and_pairs_sorted_by_signature():
  xml = _TREE.format(flags="")
  ours, m = _compile(xml.encode()), mujoco.MjModel.from_xml_string(xml)
  assert np.all(np.diff(np.asarray(ours.exclude_signature)) > 0)
  np.testing.assert_array_equal(ours.exclude_signature, m.exclude_signature)
  ours = _compile(_PAIRS.encode())
  assert np.all(np.diff(np.asarray(ours.pair_signature)) >= 0)


_MULTI_PAIRS = """
<mujoco>
  <asset><mesh name="tet" vertex="0 0 0  0.1 0 0  0 0.1 0  0 0 0.1"/>
         <hfield name="terrain" nrow="3" ncol="3" size="1 1 0.1 0.1"
                 elevation="0 0 0 0 1 0 0 0 0"/></asset>
  <worldbody>
    <geom name="floor" type="plane" size="5 5 0.1"/>
    <geom name="ground" type="hfield" hfield="terrain" contype="4" conaffinity="4"/>
    <body name="a"><freejoint/><geom type="box" size="0.1 0.1 0.1" contype="5"/></body>
    <body name="b"><freejoint/><geom type="mesh" mesh="tet"/>
      <geom type="capsule" size="0.05 0.1" contype="2" conaffinity="2"/></body>
    <body name="c"><freejoint/><geom type="cylinder" size="0.1 0.1"/>
      <geom type="ellipsoid" size="0.1 0.2 0.3" contype="2" conaffinity="2"/></body>
  </worldbody>
</mujoco>
"""


def test_every_convex_pair_is_collided():
  with warnings.catch_warnings():
    warnings.simplefilter("error")
    compile_model(parse.load(_MULTI_PAIRS.encode(), None))


def test_left_out_pairs_warn_once():
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    compile_model(parse.load(_MULTI_PAIRS.encode(), None), convex=False)
  ours = [w for w in caught if "are left out" in str(w.message)]
  assert len(ours) == 1
  # the box on the height field, a-b box-mesh, a-c box-cylinder, b-c mesh-cylinder (MuJoCo's
  # multi-contact search) and capsule-ellipsoid (b-c, contype 2); the floor's pairs stay
  message = str(ours[0].message)
  assert message.startswith("5 geom pair(s)"), message
  assert "GJK/EPA for hfield-box, capsule-ellipsoid" in message, message


def test_multi_contact_pairs_get_one_slot_without_multiccd():
  types = lambda m: np.sort(np.asarray(m.geom_type)[np.asarray(m.collision_geom)], axis=1)
  for flag, slots in (("", 4), ("<option><flag multiccd='disable'/></option>", 1)):
    ours = compile_model(parse.load(_MULTI_PAIRS.replace("<worldbody>", flag + "<worldbody>")
                                    .encode(), None))[0]
    multi = [tuple(t) in contact_pairs.MULTI for t in types(ours).tolist()]
    assert sorted(map(tuple, types(ours)[multi].tolist())) == [(5, 6), (5, 7), (6, 7)]
    assert np.all(np.asarray(ours.collision_connum)[multi] == slots)


def test_no_warning_without_unsupported_pairs():
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    compile_model(parse.load(_TREE.format(flags="").encode(), None))
  assert not [w for w in caught if "narrow phase" in str(w.message)]


def test_discardvisual_keeps_paired_geoms():
  xml = _PAIRS.replace("<mujoco>", "<mujoco><compiler discardvisual='true'/>", 1)
  ours, m = _compile(xml.encode()), mujoco.MjModel.from_xml_string(xml)
  assert ours.ngeom == m.ngeom
  _check(ours, m)


def test_from_mujoco_candidates_match():
  m = mujoco.MjModel.from_xml_string(_PAIRS)
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    ref = from_mujoco(m)
  ours = _compile(_PAIRS.encode())
  np.testing.assert_array_equal(ref.collision_geom, ours.collision_geom)
  np.testing.assert_array_equal(ref.collision_pairid, ours.collision_pairid)
  assert ref.nconmax == ours.nconmax


# --- errors -------------------------------------------------------------------------------

_ERR_HEAD = ("<mujoco>\n<worldbody>\n<body name='b'>\n<freejoint/>\n<geom name='g' size='0.1'/>\n"
             "</body>\n<geom name='floor' type='plane' size='1 1 1'/>\n</worldbody>\n<contact>\n")


@pytest.mark.parametrize("inner,element,attribute,words", [
    ("<pair geom1='g' geom2='nope'/>", "pair", "geom2", "unknown geom 'nope'"),
    ("<pair geom1='nope' geom2='g'/>", "pair", "geom1", "unknown geom 'nope'"),
    ("<exclude body1='b' body2='nope'/>", "exclude", "body2", "unknown body 'nope'"),
    ("<pair geom1='g' geom2='floor' condim='2'/>", "pair", "condim", "invalid condim"),
], ids=["pair_geom2", "pair_geom1", "exclude_body2", "pair_condim"])
def test_errors(inner: str, element: str, attribute: str, words: str):
  xml = _ERR_HEAD + inner + "\n</contact>\n</mujoco>"
  with pytest.raises(ValueError):
    mujoco.MjModel.from_xml_string(xml)
  with pytest.raises(MJCFError) as info:
    _compile(xml.encode())
  err = info.value
  assert (err.line, err.element, err.attribute) == (10, element, attribute)
  assert words in str(err)


# --- model sweep --------------------------------------------------------------------------

# one representative per kind in the default run: excludes and many bodies (humanoid_CMU),
# explicit pairs with excludes (MJX's humanoid, when the shared corpus is present)
_QUICK = ("dmc/humanoid_CMU", "dmc/manipulator", "mjx/humanoid/humanoid")


def _models():
  return [pytest.param(name, id=name, marks=() if name in _QUICK else pytest.mark.slow)
          for name in support.model_paths()]


@pytest.mark.parametrize("name", _models())
def test_model(name: str):
  path = support.model_paths()[name]
  _check(_compile_path(path), mujoco.MjModel.from_xml_path(path))
