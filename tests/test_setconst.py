"""Compile-time constants (flexor.setconst) against the values MuJoCo's compiler stores.

Each model is taken from MuJoCo (``from_mujoco``) with the constants that ``set_const`` computes
cleared; ``set_const`` must restore them: lengths, inverse weights and acc0 at qpos0, the spring
lengths of tendons at qpos_spring, kv from dampratio, springdamper joints, and simulated muscle
lengthranges.
"""

from __future__ import annotations

import jax.numpy as jnp
import mujoco
import numpy as np
import pytest

import support
import flexor
from flexor import setconst
from flexor.mjcf.from_mujoco import from_mujoco

FIELDS = ("tendon_length0", "actuator_length0", "dof_M0", "dof_invweight0", "tendon_invweight0",
          "actuator_acc0")
TOL = 1e-10


def _cleared(mj: mujoco.MjModel):
  fm = from_mujoco(mj)
  return fm.replace(**{f: jnp.zeros_like(getattr(fm, f)) for f in FIELDS})


# load_mjcf runs set_const on every conformance model (tests/test_mjcf.py); here each field is
# checked on its own, on a few representative models by default and on all in the slow tier.
REPRESENTATIVE = ("ex/muscle_arm", "dmc/humanoid", "mjx/tendon/pulley_wrap", "own/actuators_v4")


def _names() -> list:
  keep = []
  for name, path in support.model_paths().items():
    m = mujoco.MjModel.from_xml_path(path)
    if m.nu or m.ntendon:
      keep.append(pytest.param(name, marks=() if name in REPRESENTATIVE else pytest.mark.slow))
  return keep


@pytest.mark.parametrize("name", _names())
def test_constants_at_qpos0(name: str):
  mj = mujoco.MjModel.from_xml_path(support.model_paths()[name])
  md = mujoco.MjData(mj)
  mujoco.mj_forward(mj, md)
  full = np.zeros((mj.nv, mj.nv))
  mujoco.mj_fullM(mj, md, full)
  if mj.nv and np.linalg.cond(full) > 1e12:
    pytest.skip("qM is numerically singular at qpos0: MuJoCo's inverse weights are noise")
  out = setconst.set_const(_cleared(mj), setconst.Pending(
      springdamper=np.zeros((mj.njnt, 2)), lengthrange=setconst.LengthRangeOptions(mode=0)))
  for field in FIELDS:
    err = support.relerr(getattr(out, field), getattr(mj, field))
    assert err < TOL, f"{name} {field}: {err:.3g}"


DAMPRATIO_XML = """
<mujoco>
  <default><geom type="capsule" size="0.05"/></default>
  <worldbody>
    <body pos="0 0 1">
      <joint name="a" axis="0 1 0" armature="0.02"/>
      <geom fromto="0 0 0 0.3 0 0"/>
      <site name="s" pos="0.3 0 0"/>
      <body pos="0.3 0 0">
        <joint name="b" type="ball"/>
        <geom fromto="0 0 0 0.2 0 0"/>
        <site name="r" pos="0.2 0 0"/>
      </body>
    </body>
    <body pos="1 0 1">
      <joint name="c" type="slide" axis="1 0 0" springdamper="0.3 0.7"/>
      <joint name="d" axis="0 0 1" springdamper="0.2 1.5"/>
      <geom type="box" size="0.1 0.2 0.05"/>
    </body>
  </worldbody>
  <tendon><fixed name="t"><joint joint="a" coef="0.5"/><joint joint="c" coef="-1"/></fixed></tendon>
  <actuator>
    <position joint="a" kp="10" dampratio="1" armature="0.01"/>
    <position tendon="t" kp="4" dampratio="0.5"/>
    <pid joint="c" kp="3" dampratio="2"/>
    <orientation site="r" refsite="s" kp="2" dampratio="1"/>
  </actuator>
</mujoco>
"""


def test_dampratio_and_springdamper():
  mj = mujoco.MjModel.from_xml_string(DAMPRATIO_XML)
  fm = _cleared(mj)
  # what the compiler hands over: dampratio in biasprm[2], kv not yet known
  dampratio = np.array([1.0, 0.5, 2.0, 1.0])
  springdamper = np.array([[0, 0], [0, 0], [0.3, 0.7], [0.2, 1.5]])
  fm = fm.replace(actuator_biasprm=fm.actuator_biasprm.at[:, 2].set(dampratio),
                  jnt_stiffness=jnp.zeros_like(fm.jnt_stiffness),
                  dof_damping=jnp.zeros_like(fm.dof_damping))
  out = setconst.set_const(fm, setconst.Pending(springdamper=springdamper))
  for field in ("actuator_biasprm", "jnt_stiffness", "dof_damping") + FIELDS:
    err = support.relerr(getattr(out, field), getattr(mj, field))
    assert err < TOL, f"{field}: {err:.3g}"


SPRING_XML = """
<mujoco>
  <worldbody>
    <site name="o" pos="-0.2 0.1 0"/>
    <body>
      <joint name="a" axis="0 0 1" ref="0.3" springref="0.7"/>
      <geom type="capsule" size="0.05" fromto="0 0 0 0.4 0 0"/>
      <site name="i" pos="0.3 0 0"/>
    </body>
  </worldbody>
  <tendon>
    <fixed name="f" stiffness="1"><joint joint="a" coef="2"/></fixed>
    <spatial name="s" stiffness="2"><site site="o"/><site site="i"/></spatial>
    <spatial name="given" stiffness="2" springlength="0.1 0.3"><site site="o"/><site site="i"/></spatial>
  </tendon>
</mujoco>
"""


def test_tendon_spring_lengths_at_qpos_spring():
  mj = mujoco.MjModel.from_xml_string(SPRING_XML)
  fm = from_mujoco(mj)
  unset = fm.tendon_lengthspring.at[:2].set(-1.0)
  out = setconst.set_const(fm.replace(tendon_lengthspring=unset))
  assert support.relerr(out.tendon_lengthspring, mj.tendon_lengthspring) < TOL


# Muscles whose lengthrange MuJoCo finds by simulation, with no limit in reach: tendons that wrap
# around the shoulder of an unlimited arm reach their extremes where the geometry turns around.
LENGTHRANGE_XML = """
<mujoco>
  <default><joint axis="0 0 1" damping="0.1"/><geom contype="0" conaffinity="0"/></default>
  <worldbody>
    <site name="base" pos="-0.15 0 0"/>
    <body>
      <joint name="shoulder"/>
      <geom type="capsule" size="0.045" fromto="0 0 0 0.5 0 0"/>
      <geom name="shoulder" type="cylinder" size="0.1 0.05" mass="0"/>
      <site name="s1" pos="0.15 0.06 0"/>
      <site name="s5" pos="0.25 0.1 0"/>
      <body pos="0.5 0 0">
        <joint name="elbow"/>
        <geom type="capsule" size="0.035" fromto="0 0 0 0.5 0 0"/>
        <geom name="elbow" type="cylinder" size="0.08 0.05" mass="0"/>
        <site name="s7" pos="0.11 0.05 0"/>
      </body>
    </body>
  </worldbody>
  <tendon>
    <spatial name="SF"><site site="base"/><geom geom="shoulder"/><site site="s1"/></spatial>
    <spatial name="BF">
      <site site="base"/><geom geom="shoulder"/><site site="s5"/><geom geom="elbow"/>
      <site site="s7"/>
    </spatial>
  </tendon>
  <actuator>
    <muscle tendon="SF"/>
    <muscle tendon="BF"/>
    <muscle tendon="SF" lengthrange="0.1 0.2"/>
  </actuator>
</mujoco>
"""


def test_simulated_lengthrange():
  mj = mujoco.MjModel.from_xml_string(LENGTHRANGE_XML)
  fm = from_mujoco(mj)
  cleared = fm.actuator_lengthrange.at[:2].set(0.0)
  out = setconst.set_const(fm.replace(actuator_lengthrange=cleared))
  # the same simulation in both engines; MuJoCo accepts a range to within tolrange (5%)
  err = support.relerr(out.actuator_lengthrange, mj.actuator_lengthrange)
  assert err < 1e-6, f"{np.asarray(out.actuator_lengthrange)} vs {mj.actuator_lengthrange}"


def test_simulated_lengthrange_against_joint_limits():
  """A muscle on a limited hinge, its range found by simulation: the limit (a constraint) stops
  the joint, as in MuJoCo."""
  xml = """
  <mujoco>
    <compiler><lengthrange mode="muscle" useexisting="false" uselimit="false"/></compiler>
    <worldbody>
      <body pos="0 0 1">
        <joint name="j" type="hinge" axis="0 1 0" range="-0.5 0.8" limited="true"/>
        <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.03" mass="1"/>
      </body>
    </worldbody>
    <actuator><muscle joint="j" gear="0.05"/></actuator>
  </mujoco>
  """
  mj = mujoco.MjModel.from_xml_string(xml)
  fm = flexor.load_mjcf_string(xml)
  assert support.relerr(fm.actuator_lengthrange, mj.actuator_lengthrange) < 1e-6


def test_lengthrange_from_limits():
  xml = LENGTHRANGE_XML.replace('<joint name="shoulder"/>',
                                '<joint name="shoulder" range="-1 1"/>')
  xml = xml.replace("<muscle tendon=\"SF\"/>", "<muscle joint=\"shoulder\"/>")
  opt = setconst.LengthRangeOptions(uselimit=True)
  fm = from_mujoco(mujoco.MjModel.from_xml_string(xml))
  out = setconst.set_const(fm.replace(actuator_lengthrange=fm.actuator_lengthrange.at[0].set(0.0)),
                           setconst.Pending(springdamper=np.zeros((fm.njnt, 2)), lengthrange=opt))
  np.testing.assert_allclose(out.actuator_lengthrange[0], np.deg2rad([-1.0, 1.0]), rtol=1e-15)


ADHESION_XML = """
<mujoco>
  <worldbody>
    <geom type="plane" size="1 1 0.1"/>
    <body name="box" pos="0 0 0.09">
      <freejoint/>
      <geom type="box" size="0.1 0.1 0.1"/>
    </body>
  </worldbody>
  <actuator><adhesion body="box" gain="2" ctrlrange="0 1"/></actuator>
</mujoco>
"""


def test_constants_see_no_contacts():
  """MuJoCo's set0 runs no collision, so an adhesion actuator whose body touches the floor at
  qpos0 has no moment there and its acc0 is 0 (flexor gave 0.125 when it collided at qpos0)."""
  mj = mujoco.MjModel.from_xml_string(ADHESION_XML)
  md = mujoco.MjData(mj)
  mujoco.mj_forward(mj, md)
  assert md.ncon == 4 and mj.actuator_acc0[0] == 0
  m = flexor.load_mjcf_string(ADHESION_XML)
  np.testing.assert_array_equal(m.actuator_acc0, mj.actuator_acc0)
  np.testing.assert_array_equal(m.actuator_length0, mj.actuator_length0)
