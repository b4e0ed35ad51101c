"""The noslip solver (flexor.noslip) against MuJoCo C's mj_solNoSlip, and its gradients.

Scenes of three constraint islands (a box and a sphere sliding on a tilted plane, a capsule on
joints with friction loss) for every cone and contact dimension, compared after a step with
contacts in every state: all rows' forces, qacc and qfrc_constraint. MuJoCo's main solver runs
to convergence in every island (tolerance 0: with islands it otherwise stops each island early
enough to leave 1e-7 relative differences), so what remains is noslip's own sweeps.
"""

from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest

import flexor
from flexor.mjcf.from_mujoco import from_mujoco
from flexor.types import ConstraintType

import support
from support import float64_values, relerr

jax.config.update("jax_enable_x64", True)

TOL = 1e-9


def _scene(cone: str, condim: int, noslip: int = 10) -> str:
  return f"""
<mujoco>
  <option timestep="0.005" cone="{cone}" noslip_iterations="{noslip}"/>
  <default><geom condim="{condim}" friction="0.6 0.01 0.002"/></default>
  <worldbody>
    <geom type="plane" size="5 5 0.1" euler="10 5 0"/>
    <body pos="0 0 0.1"><freejoint/><geom type="box" size="0.1 0.08 0.05"/></body>
    <body pos="0.5 0 0.1"><freejoint/><geom type="sphere" size="0.07"/></body>
    <body pos="-0.5 0 0.3">
      <joint type="hinge" axis="1 0 0" frictionloss="0.3"/>
      <joint type="slide" axis="0 0 1" frictionloss="0.1"/>
      <geom type="capsule" size="0.05 0.1"/>
    </body>
  </worldbody>
</mujoco>
"""


def _compare(xml: str):
  """(flexor Data, MuJoCo MjData) after 40 MuJoCo steps and a velocity kick."""
  mj = mujoco.MjModel.from_xml_string(xml)
  mj.opt.tolerance = 0.0
  md = mujoco.MjData(mj)
  for _ in range(40):
    mujoco.mj_step(mj, md)
  md.qvel[:] += 0.3 * np.random.default_rng(0).normal(size=mj.nv)
  mujoco.mj_forward(mj, md)
  m = flexor.load_mjcf_string(xml)
  m = m.replace(opt=m.opt.replace(tolerance=jnp.asarray(1e-13)))
  d = flexor.make_data(m).replace(qpos=support.snapshot(md.qpos), qvel=support.snapshot(md.qvel))
  return m, jax.jit(flexor.forward)(m, d), md


@pytest.mark.parametrize("cone,condim", [
    ("pyramidal", 3), ("elliptic", 3), ("elliptic", 4), ("elliptic", 6),
    pytest.param("pyramidal", 4, marks=pytest.mark.slow),
    pytest.param("pyramidal", 6, marks=pytest.mark.slow)])
def test_matches_mujoco(cone, condim):
  m, d, md = _compare(_scene(cone, condim))
  assert md.nisland == 3 and md.ncon >= 5
  active = np.asarray(d.efc_active)
  assert active.sum() == md.nefc
  assert relerr(np.asarray(d.efc_force)[active], md.efc_force) < TOL
  for field in ("qacc", "qfrc_constraint"):
    assert relerr(getattr(d, field), getattr(md, field)) < TOL, field
  # the dual states; elliptic contacts end on the cone's surface, where the zone is a tie
  rows = np.flatnonzero(active)
  plain = m.efc_rowtype[rows] != ConstraintType.CONTACT_ELLIPTIC
  np.testing.assert_array_equal(np.asarray(d.efc_state)[rows[plain]], md.efc_state[plain])


@pytest.mark.parametrize("cone,condim", [
    ("elliptic", 4), pytest.param("pyramidal", 3, marks=pytest.mark.slow)])
def test_after_pgs_matches_mujoco(cone, condim):
  """Noslip after MuJoCo's PGS (solver="PGS") instead of Newton, warm started from the state's
  qacc_warmstart and at the default tolerance, in both engines alike: PGS's sweeps and then
  noslip's agree with MuJoCo's (1e-14 measured)."""
  xml = _scene(cone, condim).replace('noslip_iterations="10"',
                                     'noslip_iterations="10" solver="PGS"')
  mj = mujoco.MjModel.from_xml_string(xml)
  md = mujoco.MjData(mj)
  mujoco.mj_step(mj, md, 40)
  md.qvel[:] += 0.3 * np.random.default_rng(0).normal(size=mj.nv)
  warm = md.qacc_warmstart.copy()
  mujoco.mj_forward(mj, md)
  m = flexor.load_mjcf_string(xml)
  d = flexor.make_data(m).replace(qpos=support.snapshot(md.qpos), qvel=support.snapshot(md.qvel),
                                  qacc_warmstart=jnp.asarray(warm))
  d = jax.jit(flexor.forward)(m, d)
  active = np.asarray(d.efc_active)
  assert active.sum() == md.nefc and md.nisland == 3
  assert relerr(np.asarray(d.efc_force)[active], md.efc_force) < TOL
  assert relerr(d.qacc, md.qacc) < TOL


def test_noslip_changes_the_friction_forces():
  """Noslip moves the friction forces and keeps the rest: the comparison above is not the main
  solver's agreement twice."""
  _, plain, _ = _compare(_scene("pyramidal", 3, noslip=0))
  _, d, md = _compare(_scene("pyramidal", 3))
  assert relerr(plain.qacc, md.qacc) > 1e-3
  assert relerr(d.qacc, md.qacc) < TOL


BOXES_XML = """
<mujoco>
  <option timestep="0.005" noslip_iterations="30" cone="{cone}"/>
  <worldbody>
    <geom type="plane" size="5 5 0.1" euler="20 5 0" friction="0.5"/>
    <body pos="0 0 0.1">
      <freejoint/><geom type="box" size="0.1 0.08 0.05"/>
      <body pos="0 0 0.1">
        <joint type="hinge" axis="1 0 0" frictionloss="0.05"/>
        <geom type="box" size="0.05 0.05 0.05" pos="0 0 0.05"/>
      </body>
    </body>
    <body pos="0.5 0 0.1"><freejoint/><geom type="box" size="0.1 0.08 0.05"/></body>
    <body pos="-0.5 0 0.1"><freejoint/><geom type="box" size="0.1 0.1 0.05"/></body>
  </worldbody>
</mujoco>
"""


@pytest.mark.slow
def test_sliding_boxes_trajectory_matches_mujoco():
  """Three boxes sliding down a 20 degree slope with noslip, 150 steps: the trajectory stays on
  MuJoCo's, and vmapped worlds (where noslip's branches become selects) equal single ones."""
  xml = BOXES_XML.format(cone="pyramidal")
  mj = mujoco.MjModel.from_xml_string(xml)
  mj.opt.tolerance = 0.0
  md = mujoco.MjData(mj)
  m = flexor.load_mjcf_string(xml)
  m = m.replace(opt=m.opt.replace(tolerance=jnp.asarray(1e-13)))
  d = flexor.make_data(m)
  step = jax.jit(flexor.step)
  for k in range(150):
    mujoco.mj_step(mj, md)
    d = step(m, d)
    assert relerr(d.qpos, md.qpos) < 1e-8, f"step {k}: qpos"
  assert int(d.ncon) == md.ncon >= 8
  batch = jax.tree.map(lambda x: jnp.stack([x, x]), d)
  batch = batch.replace(qvel=batch.qvel.at[1].multiply(1.5))
  stepped = jax.jit(jax.vmap(flexor.step, in_axes=(None, 0)))(m, batch)
  one = step(m, d.replace(qvel=batch.qvel[1]))
  assert relerr(stepped.qacc[0], step(m, d).qacc) < 1e-12
  assert relerr(stepped.qacc[1], one.qacc) < 1e-12


@pytest.mark.parametrize("cone", ["elliptic", pytest.param("pyramidal", marks=pytest.mark.slow)])
def test_rollout_gradient_matches_finite_differences(cone):
  """jax.grad through 30 steps of a box sliding with torsional friction on a slope and a pendulum
  with friction loss, noslip on, against central differences. The main solver runs to 1e-10:
  the differences see where it stops, and at the default tolerance an elliptic cone's Newton
  decrement stops it where they differ from the optimum's derivative by 4e-6."""
  xml = f"""
<mujoco>
  <option timestep="0.005" noslip_iterations="5" cone="{cone}" tolerance="1e-10"/>
  <worldbody>
    <geom type="plane" size="5 5 0.1" euler="12 0 0" friction="0.5 0.01 0.001" condim="4"/>
    <body pos="0 0 0.0495"><freejoint/><geom type="box" size="0.1 0.08 0.05"/></body>
    <body pos="-0.5 0 0.3">
      <joint type="hinge" axis="1 0 0" frictionloss="0.3"/>
      <geom type="capsule" size="0.05 0.1" contype="0"/>
    </body>
  </worldbody>
</mujoco>
"""
  m = flexor.load_mjcf_string(xml)
  d0 = flexor.make_data(m)

  def loss(qvel):
    d, _ = jax.lax.scan(lambda d, _: (flexor.step(m, d), None), d0.replace(qvel=qvel), None, 30)
    return d.qpos[0] + 0.3 * d.qpos[1] + d.qpos[7]

  qvel = jnp.array([0.4, 0.2, 0.0, 0.0, 0.0, 0.3, 0.5])
  grad = jax.jit(jax.grad(loss))(qvel)
  f, eps = jax.jit(loss), 1e-6
  fd = np.array([(f(qvel.at[i].add(eps)) - f(qvel.at[i].add(-eps))) / (2 * eps)
                 for i in range(m.nv)])
  assert np.all(np.isfinite(grad))
  assert relerr(grad, fd) < 1e-6


@pytest.mark.parametrize("cone", ["pyramidal", "elliptic"])
def test_float32_step_computes_in_float32(cone):
  """No float64 constant in noslip's sweeps, islands or QCQP promotes a float32 step."""
  m = flexor.load_mjcf_string(_scene(cone, 4), dtype=jnp.float32)
  jaxpr = jax.make_jaxpr(flexor.step)(m, flexor.make_data(m)).jaxpr
  assert not float64_values(jaxpr)


def test_noslip_tolerance_is_read():
  xml = "<mujoco><option noslip_iterations='3' noslip_tolerance='1e-4'/><worldbody/></mujoco>"
  m = flexor.load_mjcf_string(xml)
  assert m.opt.noslip_iterations == 3 and float(m.opt.noslip_tolerance) == 1e-4
  ref = from_mujoco(mujoco.MjModel.from_xml_string(xml))
  assert ref.opt.noslip_iterations == 3 and float(ref.opt.noslip_tolerance) == 1e-4


def test_friction_loss_alone_without_contacts():
  """Geoms that collide with nothing leave the model no contact slots: noslip sweeps the
  friction-loss rows alone, as MuJoCo does (forward failed on such models before)."""
  xml = _scene("elliptic", 3, noslip=3).replace('<geom condim', '<geom contype="0" condim')
  mj = mujoco.MjModel.from_xml_string(xml)
  md = mujoco.MjData(mj)
  md.qvel[:] = np.random.default_rng(1).normal(size=mj.nv)
  m = flexor.load_mjcf_string(xml)
  assert m.nconmax == 0
  d = flexor.make_data(m).replace(qvel=support.snapshot(md.qvel))
  step = jax.jit(flexor.step)
  for _ in range(20):
    mujoco.mj_step(mj, md)
    d = step(m, d)
  np.testing.assert_allclose(d.qvel, md.qvel, atol=1e-12)
  np.testing.assert_allclose(d.qpos, md.qpos, atol=1e-12)


@pytest.mark.slow
def test_dog_follows_mujoco_with_its_noslip():
  """dm_control's dog (noslip_iterations 4, nconmax 300) from MuJoCo's own states: qacc agrees
  at every one of the first 150 steps of its fall, before any pair flexor leaves out touches."""
  path = support.model_paths()["dmc/dog"]
  mj = mujoco.MjModel.from_xml_path(path)
  assert mj.opt.noslip_iterations == 4
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")   # the multi-contact pairs flexor leaves out
    m = flexor.load_mjcf(path)
  m = m.replace(opt=m.opt.replace(tolerance=jnp.asarray(1e-13)))
  md = mujoco.MjData(mj)
  forward = jax.jit(flexor.forward)
  touched = 0
  for k in range(150):
    mj.opt.tolerance = 0.0
    mujoco.mj_forward(mj, md)
    d = flexor.make_data(m).replace(qpos=support.snapshot(md.qpos), qvel=support.snapshot(md.qvel),
                                    qacc_warmstart=support.snapshot(md.qacc_warmstart))
    d = forward(m, d)
    assert int(d.ncon) == md.ncon, f"step {k}: ncon"
    assert relerr(d.qacc, md.qacc) < 1e-8, f"step {k}: qacc"
    touched = max(touched, md.ncon)
    mj.opt.tolerance = 1e-8
    mujoco.mj_step(mj, md)
  assert touched >= 8
