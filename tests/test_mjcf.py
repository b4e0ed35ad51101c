"""Compiler conformance: flexor's load_mjcf against MuJoCo's compiler, field group by group.

Every model of ``support.model_paths()`` is compiled once by MuJoCo (read through
``from_mujoco``, so the reference passes the same ``assemble``) and once by flexor; each test
compares one group of Model fields, so a failure names the model and the group
(``dmc/humanoid-body_inertia``).
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import warnings

import jax
import mujoco
import numpy as np
import pytest

import flexor
from flexor.mjcf.from_mujoco import from_mujoco
from flexor.types import Model, Option

import support

# float64 compiler arithmetic mirrors MuJoCo's operation by operation; what remains is rounding
# in a different summation or trigonometric order
TOL = 1e-12

GROUPS: dict[str, tuple[str, ...]] = {
    "sizes": ("nq", "nv", "nu", "nactuator", "nout", "na", "nbody", "njnt", "ngeom", "nsite",
              "ncam", "nlight", "nmesh", "ntendon", "nwrap", "nmocap", "neq", "nkey",
              "nplastic"),
    "body_tree": ("body_parentid", "body_rootid", "body_weldid", "body_mocapid", "body_jntnum",
                  "body_jntadr", "body_dofnum", "body_dofadr", "body_geomnum", "body_geomadr"),
    "body_pose": ("body_pos", "body_quat"),
    "body_inertia": ("body_mass", "body_inertia", "body_ipos", "body_iquat", "body_subtreemass"),
    "body_misc": ("body_gravcomp", "body_sameframe"),
    "jnt": ("jnt_type", "jnt_qposadr", "jnt_dofadr", "jnt_bodyid", "jnt_group", "jnt_limited",
            "jnt_actfrclimited", "jnt_actgravcomp", "jnt_solref", "jnt_solimp", "jnt_pos",
            "jnt_axis", "jnt_range", "jnt_actfrcrange", "jnt_margin"),
    "jnt_poly": ("jnt_stiffnesspoly", "jnt_springyield", "jnt_plasticadr", "dof_dampingpoly"),
    "dof": ("dof_bodyid", "dof_jntid", "dof_parentid", "dof_solref", "dof_solimp",
            "dof_frictionloss", "dof_armature"),
    "springdamper": ("jnt_stiffness", "dof_damping"),
    "qpos": ("qpos0", "qpos_spring"),
    "geom_frame": ("geom_pos", "geom_quat", "geom_size", "geom_rbound", "geom_sameframe"),
    "geom_contact": ("geom_type", "geom_contype", "geom_conaffinity", "geom_condim",
                     "geom_bodyid", "geom_dataid", "geom_group", "geom_priority", "geom_solmix",
                     "geom_solref", "geom_solimp", "geom_friction", "geom_margin", "geom_gap"),
    "geom_fluid": ("geom_fluid",),
    "geom_surface": ("geom_adhesion", "geom_surfacevel", "pair_adhesion", "flg_adhesion",
                     "flg_surfacevel"),
    "geom_visual": ("nmat", "geom_rgba", "geom_matid", "mat_rgba"),
    "site": ("site_bodyid", "site_sameframe", "site_pos", "site_quat", "site_size",
             "site_dataid"),
    "camera": ("cam_mode", "cam_bodyid", "cam_targetbodyid", "cam_pos", "cam_quat",
               "cam_projection", "cam_fovy", "cam_resolution", "cam_sensorsize",
               "cam_intrinsic"),
    "light": ("light_mode", "light_bodyid", "light_targetbodyid", "light_pos", "light_dir"),
    "camlight0": ("cam_pos0", "cam_poscom0", "cam_mat0", "light_pos0", "light_poscom0",
                  "light_dir0"),
    "actuator_types": ("actuator_trntype", "actuator_dyntype", "actuator_gaintype",
                       "actuator_biastype", "actuator_trnid", "actuator_group"),
    "actuator_layout": ("actuator_ctrladr", "actuator_ctrlnum", "actuator_ctrlspec",
                        "actuator_outadr", "actuator_outnum", "actuator_actadr",
                        "actuator_actnum"),
    "actuator_prm": ("actuator_dynprm", "actuator_gainprm", "actuator_actearly"),
    "actuator_biasprm": ("actuator_biasprm",),
    "actuator_limits": ("actuator_ctrllimited", "actuator_ctrlrange", "actuator_forcelimited",
                        "actuator_forcerange", "actuator_actlimited", "actuator_actrange"),
    "actuator_trn": ("actuator_gear", "actuator_cranklength"),
    "actuator_passive": ("actuator_damping", "actuator_dampingpoly", "actuator_armature"),
    "actuator_lengthrange": ("actuator_lengthrange",),
    "history": ("nhistory", "actuator_history", "actuator_historyadr", "actuator_delay",
                "sensor_history", "sensor_historyadr", "sensor_delay", "sensor_interval"),
    "tendon": ("tendon_num", "tendon_adr", "tendon_limited", "tendon_range",
               "tendon_actfrclimited", "tendon_actfrcrange", "wrap_type", "wrap_objid",
               "wrap_prm"),
    "tendon_params": ("tendon_stiffness", "tendon_stiffnesspoly", "tendon_damping",
                      "tendon_dampingpoly", "tendon_armature", "tendon_frictionloss",
                      "tendon_springyield", "tendon_plasticadr", "tendon_margin",
                      "tendon_solref_lim", "tendon_solimp_lim", "tendon_solref_fri",
                      "tendon_solimp_fri", "tendon_group"),
    "tendon_lengthspring": ("tendon_lengthspring",),
    "setconst": ("actuator_acc0", "actuator_length0", "tendon_length0", "tendon_invweight0",
                 "dof_M0", "dof_invweight0"),
    "equality": ("eq_type", "eq_obj1id", "eq_obj2id", "eq_active0", "eq_data", "eq_solref",
                 "eq_solimp"),
    "key": ("key_time", "key_qpos", "key_qvel", "key_act", "key_ctrl", "key_mpos", "key_mquat",
            "key_plastic"),
    "names": ("names_body", "names_jnt", "names_geom", "names_site", "names_cam",
              "names_light", "names_actuator", "names_tendon", "names_key"),
    "mesh": ("mesh_vertadr", "mesh_vertnum", "mesh_vert", "mesh_faceadr", "mesh_facenum",
             "mesh_face", "mesh_pos", "mesh_quat"),
    "option": ("opt",),
}

# Groups MuJoCo's compiler computes by running the model (mj_setConst, AutoSpringDamper,
# LengthRange) and flexor's by flexor.setconst: solves with qM (Cholesky here, LDL' there) and,
# for lengthranges, seconds of simulation, so they agree to rounding times qM's conditioning.
GROUP_TOL = {"setconst": 1e-9, "springdamper": 1e-9, "actuator_biasprm": 1e-9,
             "actuator_lengthrange": 1e-6}


@functools.cache
def _mujoco(path: str) -> Model:
  return from_mujoco(mujoco.MjModel.from_xml_path(path))


@functools.cache
def _flexor(path: str) -> Model:
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    return flexor.load_mjcf(path)


def _compare(name: str, ours, ref, tol: float = TOL) -> float:
  if isinstance(ref, Option):
    worst = 0.0
    for field in Option._traced + Option._static:
      worst = max(worst, _compare(f"opt.{field}", getattr(ours, field), getattr(ref, field)))
    return worst
  if isinstance(ref, tuple):
    assert ours == ref, f"{name}: {ours} != {ref}"
    return 0.0
  if isinstance(ref, int):
    assert ours == ref, f"{name}: {ours} != {ref}"
    return 0.0
  a, b = np.asarray(ours), np.asarray(ref)
  assert a.shape == b.shape, f"{name}: shape {a.shape} != {b.shape}"
  if b.dtype.kind in "iub":
    bad = np.flatnonzero((a != b).ravel())
    assert not bad.size, f"{name}: {bad.size} entries differ, first at flat index {bad[0]}: " \
        f"{a.ravel()[bad[0]]} != {b.ravel()[bad[0]]}"
    return 0.0
  err = support.relerr(a, b)
  if err > tol:
    i = int(np.argmax(np.abs(a - b).ravel() / (1 + np.abs(b).ravel())))
    raise AssertionError(f"{name}: relative error {err:.3g} at flat index {i}: "
                         f"{a.ravel()[i]!r} != {b.ravel()[i]!r}")
  return err


def _cases():
  return [pytest.param(model, group, id=f"{model}-{group}")
          for model in support.model_paths() for group in GROUPS]


@pytest.mark.parametrize("model,group", _cases())
def test_conformance(model: str, group: str):
  path = support.model_paths()[model]
  ours, ref = _flexor(path), _mujoco(path)
  for field in GROUPS[group]:
    _compare(field, getattr(ours, field), getattr(ref, field), GROUP_TOL.get(group, TOL))


@pytest.mark.parametrize("model", ["dmc/manipulator", "dmc/humanoid", "gym/ant"])
def test_fusestatic_fuses_as_mujoco(tmp_path, model: str):
  """``<compiler fusestatic>`` on suite models with jointless bodies (tests/models/fusestatic.xml
  has the references that keep a body): MuJoCo's bodies, inertias, frames and numbering."""
  path = support.model_paths()[model]
  folder = os.path.dirname(path)
  if os.path.isdir(os.path.join(folder, "common")):
    shutil.copytree(os.path.join(folder, "common"), tmp_path / "common")
  with open(path) as f:
    text = re.sub(r"(<mujoco[^>]*>)", r'\1<compiler fusestatic="true"/>', f.read(), count=1)
  fused = tmp_path / os.path.basename(path)
  fused.write_text(text)
  ours, ref = _flexor(str(fused)), _mujoco(str(fused))
  assert ref.nbody < _mujoco(path).nbody
  for group, fields in GROUPS.items():
    for field in fields:
      _compare(f"{group}/{field}", getattr(ours, field), getattr(ref, field),
               GROUP_TOL.get(group, TOL))


def test_compile_records_springdamper_and_lengthrange_options():
  """What the compile-time constants pass needs besides the Model: each joint's springdamper
  and the <compiler><lengthrange> options."""
  from flexor.mjcf import parse  # pylint: disable=import-outside-toplevel
  from flexor.mjcf.compile import compile_model  # pylint: disable=import-outside-toplevel
  xml = """<mujoco><compiler><lengthrange mode="all" useexisting="false" tolrange="0.1"/>
    </compiler><worldbody><body><joint springdamper="0.2 0.7"/><joint axis="1 0 0"/>
    <geom size="0.1" pos="0.2 0 0"/></body></worldbody></mujoco>"""
  model, pending = compile_model(parse.load(xml.encode(), None))
  np.testing.assert_array_equal(pending["springdamper"], [[0.2, 0.7], [0.0, 0.0]])
  assert pending["lengthrange"]["mode"] == 3 and not pending["lengthrange"]["useexisting"]
  assert pending["lengthrange"]["tolrange"] == 0.1 and "accel" not in pending["lengthrange"]
  assert model.njnt == 2


@pytest.mark.parametrize("key", [
    '<key qpos="0.3" qvel="2" ctrl="5"/>', '<key qpos="0.3 0.1 0.9 0.2"/>', '<key qpos=""/>',
    '<key mpos="5 6 7"/>', '<key mpos="5 6 7 8" mquat="0 0 1 0 2"/>', '<key mquat="0 0"/>'])
def test_short_keyframes_are_filled_as_mujoco_fills_them(key: str):
  """MuJoCo 4.0 fills a short keyframe list from qpos0, zeros, or the mocap bodies' poses (whole
  bodies only); quaternions are normalized after."""
  xml = f"""<mujoco><worldbody>
    <body pos="0 0 1"><joint name="a" type="slide" ref="0.5"/><joint type="hinge" ref="10"/>
      <joint type="ball"/><geom size="0.1"/></body>
    <body mocap="true" pos="1 2 3" quat="0 1 0 0"/><body mocap="true" pos="4 5 6"/>
  </worldbody><actuator><motor joint="a"/><motor joint="a"/></actuator>
  <keyframe>{key}</keyframe></mujoco>"""
  ours, ref = flexor.load_mjcf_string(xml), mujoco.MjModel.from_xml_string(xml)
  for field in ("key_qpos", "key_qvel", "key_act", "key_ctrl", "key_mpos", "key_mquat"):
    np.testing.assert_array_equal(np.asarray(getattr(ours, field)).ravel(),
                                  getattr(ref, field).ravel(), err_msg=field)


@pytest.mark.parametrize("plastic", ["", "0.1", "0.1 2 3", "0.1 0 1 0 0 0.9 1.2"])
def test_plastic_keyframes_are_mujocos(plastic: str):
  """A keyframe's plastic state: the values given, the initial state (qpos_spring, the tendon's
  length at qpos0) for the rest, a ball's quaternion normalized; make_data(key=) resets to it
  as mj_resetDataKeyframe does."""
  xml = f"""<mujoco><worldbody>
    <body><joint stiffness="1" springyield=".5" springref="20"/><geom size=".2"/>
      <body pos="0 0 -.5"><joint type="ball" stiffness="1" springyield=".2"/><geom size=".1"/>
      </body></body>
    <site name="a"/><body pos="1 0 0"><joint type="slide"/><geom size=".1"/><site name="b"/></body>
  </worldbody>
  <tendon><spatial springyield=".1" stiffness="1"><site site="a"/><site site="b"/></spatial></tendon>
  <keyframe><key plastic="{plastic}"/><key qpos="0.2"/></keyframe></mujoco>"""
  ours, ref = flexor.load_mjcf_string(xml), mujoco.MjModel.from_xml_string(xml)
  np.testing.assert_allclose(ours.key_plastic, ref.key_plastic, rtol=1e-12, atol=1e-12)
  data = mujoco.MjData(ref)
  for k in range(ref.nkey):
    mujoco.mj_resetDataKeyframe(ref, data, k)
    np.testing.assert_allclose(flexor.make_data(ours, key=k).plastic, data.plastic, rtol=1e-12,
                               atol=1e-12)


def test_a_layout_too_large_is_capped_with_a_warning(monkeypatch):
  """Where a row for every possible contact would pass efc_J's limit, the contacts are capped as
  by the largest <size nconmax> that fits, with a warning that names the knobs; an explicit
  <size nconmax> quiets it (the limit is lowered here: scenes that need it take a minute to
  load). Four balls resting on a plane: 10 candidates, 4 contacts, 2 kept, 2 dropped."""
  from flexor.mjcf import assemble
  nv = 24
  monkeypatch.setattr(assemble, "_MAX_JACOBIAN", 8 * nv * 9)  # 9 rows: 2 contacts of 4 rows + 1
  balls = "".join(f"<body pos='{i} 0 0.099'><freejoint/><geom size='0.1'/></body>"
                  for i in range(4))
  xml = ("<mujoco>{}<worldbody><geom type='plane' size='5 5 1'/>" + balls + "</worldbody>"
         "</mujoco>")
  with pytest.warns(UserWarning, match=r"possible contacts would make 40 constraint rows.*capped "
                                       r"at 2 of each condim \(8 rows\).*nconmax.*max_geom_pairs"):
    m = flexor.load_mjcf_string(xml.format(""))
  assert (m.nconmax, m.size_nconmax, m.njmax) == (2, 2, 8)
  d = jax.jit(flexor.forward)(m, flexor.make_data(m))
  assert (int(d.ncon), int(d.ncon_dropped)) == (2, 2)
  with warnings.catch_warnings():
    warnings.simplefilter("error")
    assert flexor.load_mjcf_string(xml.format("<size nconmax='3'/>")).nconmax == 3


def test_replicated_frames_are_mujocos_to_the_bit():
  """MuJoCo turns copy i of a rotating <replicate> by i times its euler angles (not by the
  accumulated quaternion) and moves the next copy by the offset turned that way: nested rings
  of free bodies (as MuJoCo's 100_humanoids.xml) get its positions and orientations exactly, so
  that bodies resting exactly on the floor touch it in both engines."""
  xml = """<mujoco><worldbody>
    <replicate count="10" euler="0 0 36" sep="-"><frame pos="1.2 0 0">
      <replicate count="10" euler="0 0 17" sep="-" offset="0.6 0 0">
        <body pos="0 0 0.1"><freejoint/><geom size="0.1"/></body>
      </replicate>
    </frame></replicate>
  </worldbody></mujoco>"""
  ours, ref = flexor.load_mjcf_string(xml), mujoco.MjModel.from_xml_string(xml)
  for field in ("body_pos", "body_quat", "qpos0"):
    np.testing.assert_array_equal(np.asarray(getattr(ours, field)), getattr(ref, field),
                                  err_msg=field)
