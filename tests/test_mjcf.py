"""Compiler conformance: flexor's load_mjcf against MuJoCo's compiler, field group by group.

Every model of ``support.model_paths()`` is compiled once by MuJoCo (read through
``from_mujoco``, so the reference passes the same ``assemble``) and once by flexor; each test
compares one group of Model fields, so a failure names the model and the group
(``dmc/humanoid-body_inertia``).
"""

from __future__ import annotations

import functools
import warnings

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
    "sizes": ("nq", "nv", "nu", "na", "nbody", "njnt", "ngeom", "nsite", "nmesh", "ntendon",
              "nmocap", "neq", "nkey"),
    "body_tree": ("body_parentid", "body_rootid", "body_weldid", "body_mocapid", "body_jntnum",
                  "body_jntadr", "body_dofnum", "body_dofadr", "body_geomnum", "body_geomadr"),
    "body_pose": ("body_pos", "body_quat"),
    "body_inertia": ("body_mass", "body_inertia", "body_ipos", "body_iquat", "body_subtreemass"),
    "body_misc": ("body_gravcomp", "body_sameframe"),
    "jnt": ("jnt_type", "jnt_qposadr", "jnt_dofadr", "jnt_bodyid", "jnt_group", "jnt_limited",
            "jnt_actfrclimited", "jnt_actgravcomp", "jnt_solref", "jnt_solimp", "jnt_pos",
            "jnt_axis", "jnt_range", "jnt_actfrcrange", "jnt_margin"),
    "jnt_spring": ("jnt_stiffness",),
    "dof": ("dof_bodyid", "dof_jntid", "dof_parentid", "dof_solref", "dof_solimp",
            "dof_frictionloss", "dof_armature"),
    "dof_damping": ("dof_damping",),
    "qpos": ("qpos0", "qpos_spring"),
    "geom_frame": ("geom_pos", "geom_quat", "geom_size", "geom_rbound", "geom_sameframe"),
    "geom_contact": ("geom_type", "geom_contype", "geom_conaffinity", "geom_condim",
                     "geom_bodyid", "geom_dataid", "geom_group", "geom_priority", "geom_solmix",
                     "geom_solref", "geom_solimp", "geom_friction", "geom_margin", "geom_gap"),
    "site": ("site_bodyid", "site_sameframe", "site_pos", "site_quat", "site_size"),
    "actuator": ("actuator_trntype", "actuator_dyntype", "actuator_gaintype",
                 "actuator_biastype", "actuator_trnid", "actuator_actadr", "actuator_actnum",
                 "actuator_ctrllimited", "actuator_forcelimited", "actuator_actlimited",
                 "actuator_actearly", "actuator_dynprm", "actuator_gainprm", "actuator_biasprm",
                 "actuator_ctrlrange", "actuator_forcerange", "actuator_actrange",
                 "actuator_gear", "actuator_cranklength"),
    "actuator_lengthrange": ("actuator_lengthrange",),
    "tendon": ("tendon_num", "tendon_adr", "tendon_limited", "tendon_range", "tendon_stiffness",
               "tendon_damping", "wrap_type", "wrap_objid", "wrap_prm"),
    "tendon_lengthspring": ("tendon_lengthspring",),
    "equality": ("eq_type", "eq_obj1id", "eq_obj2id", "eq_active0", "eq_data", "eq_solref",
                 "eq_solimp"),
    "key": ("key_time", "key_qpos", "key_qvel", "key_act", "key_ctrl", "key_mpos", "key_mquat"),
    "names": ("names_body", "names_jnt", "names_geom", "names_site", "names_actuator",
              "names_tendon", "names_key"),
    "mesh": ("mesh_vertadr", "mesh_vertnum", "mesh_vert"),
    "option": ("opt",),
}

# Model x group pairs that are known not to conform yet, with the reason.
_SPRINGDAMPER = "springdamper (stiffness/damping from the joint inertia at qpos0) not implemented"
_WRAP = ("springlength of a wrapping spatial tendon is its length at qpos0, which needs the "
         "wrapping geometry of the tendon stage, not implemented")
XFAIL: dict[tuple[str, str], str] = {
    ("dmc/dog", "jnt_spring"): _SPRINGDAMPER,
    ("dmc/dog", "dof_damping"): _SPRINGDAMPER,
    **{(f"mjx/tendon/{m}", "tendon_lengthspring"): _WRAP
       for m in ("fixed_site_wrap", "pulley_fixed_site_wrap", "pulley_site_wrap", "pulley_wrap",
                 "site_wrap", "tendon", "wrap_sidesite")},
}


@functools.cache
def _mujoco(path: str) -> Model:
  return from_mujoco(mujoco.MjModel.from_xml_path(path))


@functools.cache
def _flexor(path: str) -> Model:
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    return flexor.load_mjcf(path)


def _compare(name: str, ours, ref) -> float:
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
  if err > TOL:
    i = int(np.argmax(np.abs(a - b).ravel() / (1 + np.abs(b).ravel())))
    raise AssertionError(f"{name}: relative error {err:.3g} at flat index {i}: "
                         f"{a.ravel()[i]!r} != {b.ravel()[i]!r}")
  return err


def _cases():
  for model in support.model_paths():
    for group in GROUPS:
      marks = []
      reason = XFAIL.get((model, group))
      if reason:
        marks.append(pytest.mark.xfail(reason=reason, strict=True))
      yield pytest.param(model, group, id=f"{model}-{group}", marks=marks)


@pytest.mark.parametrize("model,group", _cases())
def test_conformance(model: str, group: str):
  path = support.model_paths()[model]
  ours, ref = _flexor(path), _mujoco(path)
  for field in GROUPS[group]:
    _compare(field, getattr(ours, field), getattr(ref, field))
