"""rne (bias and with acceleration) and rne_postconstraint against MuJoCo C on every model."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest

import flexor
import smooth_support as S
import support

# qfrc_bias from mj_forward, rne_acc = mj_rne(flg_acc=1) at a random qacc, and
# mj_rnePostConstraint's cacc, cfrc_int, cfrc_ext (xfrc_applied only: no contacts yet).
FIELDS = ("qfrc_bias", "rne_acc", "cacc", "cfrc_int", "cfrc_ext")


@pytest.mark.parametrize("field", FIELDS)
@pytest.mark.parametrize("name", S.model_names())
def test_conformance(name: str, field: str):
  case = S.case(name)
  err = support.relerr(case.actual(field), case.expected[field])
  assert err <= S.TOL, f"{name}: {field} relative error {err:.2e}"


def test_gravity_disabled():
  """DisableBit.GRAVITY drops the world acceleration from qfrc_bias and cacc."""
  path = support.model_paths()["dmc/humanoid"]
  case = S.make_case(S.mujoco_model(path, mujoco.mjtDisableBit.mjDSBL_GRAVITY))
  for field in ("qfrc_bias", "rne_acc", "cacc", "cfrc_int", "qacc"):
    err = support.relerr(case.actual(field), case.expected[field])
    assert err <= S.TOL, f"{field} relative error {err:.2e}"
  assert np.all(case.actual("cacc")[:, 0] == 0.0)


TENDON_ROWS_XML = """<mujoco>
  <worldbody><site name="top" pos="0 0 1"/><site name="top2" pos="1 0 1"/>
    <body name="a" pos="0 0 .5"><freejoint/><geom type="box" size=".05 .05 .05"/>
      <site name="s1" pos=".02 0 .05"/></body>
    <body name="b" pos=".3 0 .5"><freejoint/><geom type="box" size=".05 .05 .05"/>
      <site name="s2" pos="0 0 .05"/></body>
    <body name="c" pos="1 0 .5"><freejoint/><geom type="box" size=".05 .05 .05"/>
      <site name="s3" pos="0 .01 .05"/></body>
  </worldbody>
  <tendon>
    <spatial name="limited" limited="true" range="0 .6" frictionloss=".5">
      <site site="top"/><site site="s1"/><site site="s2"/></spatial>
    <spatial name="coupled"><site site="top2"/><site site="s3"/></spatial>
  </tendon>
  <equality><tendon tendon1="coupled" tendon2="limited" polycoef="0 .7 .5 0 0"/></equality>
</mujoco>"""


def test_tendon_constraint_forces_reach_cfrc_ext():
  """MuJoCo 4 counts a spatial tendon's limit, friction-loss and equality forces among the
  forces it exerts on the bodies along its path: the three free bodies hanging from two
  tendons at a limit, sliding and coupled by a polynomial have cfrc_ext MuJoCo's and no
  force from their (free) joints."""
  mj = mujoco.MjModel.from_xml_string(TENDON_ROWS_XML)
  md = mujoco.MjData(mj)
  md.qvel[:] = 0.1
  mujoco.mj_forward(mj, md)
  assert set(md.efc_type) >= {mujoco.mjtConstraint.mjCNSTR_LIMIT_TENDON,
                              mujoco.mjtConstraint.mjCNSTR_FRICTION_TENDON,
                              mujoco.mjtConstraint.mjCNSTR_EQUALITY}
  m = flexor.load_mjcf_string(TENDON_ROWS_XML, dtype=jnp.float64)
  d = jax.jit(flexor.forward)(m, flexor.make_data(m).replace(qvel=jnp.asarray(md.qvel)))
  assert support.relerr(d.cfrc_ext, md.cfrc_ext) < 1e-10
  assert np.abs(np.asarray(d.cfrc_int[1:])).max() < 1e-9
