"""Transmission and actuation conformance: actuator_length, actuator_moment, actuator_velocity,
act_dot, actuator_force, qfrc_actuator and qacc against MuJoCo C at random states.

Controls and activations are drawn inside and outside their ranges, so clamps are exercised.
Contacts and constraints are disabled on the MuJoCo side (they are later stages); the Model comes
from ``from_mujoco``, so these tests do not depend on flexor's compiler. Each test names the
model and the field.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest

import support
from flexor import forward, make_data, rollout
from flexor.mjcf.from_mujoco import from_mujoco

# Relative error |a - b| / (1 + |b|); qacc is bounded by qM's conditioning as in the smooth tests.
TOL = 1e-9
NSTATE = 3
FIELDS = ("actuator_length", "actuator_moment", "actuator_velocity", "act_dot", "actuator_force",
          "qfrc_actuator", "qacc")

# Every classic transmission, dynamics, gain and bias type, clamps, actearly, rotational servos
# whose setpoint wraps, a disabled actuator group and actuator-routed gravity compensation.
CLASSIC_XML = """
<mujoco>
  <option timestep="0.005" actuatorgroupdisable="3"/>
  <default><geom type="capsule" size="0.05"/><joint damping="0.1"/></default>
  <worldbody>
    <body name="b1" pos="0 0 1" gravcomp="0.5">
      <joint name="hinge" axis="0 1 0" range="-1 1" actuatorgravcomp="true"
             actuatorfrcrange="-3 3"/>
      <geom fromto="0 0 0 0.3 0 0"/>
      <site name="s1" pos="0.3 0 0" euler="5 -10 15"/>
      <body pos="0.3 0 0">
        <joint name="slide" type="slide" axis="1 0 0" range="-0.2 0.3"/>
        <geom fromto="0 0 0 0.2 0 0.1"/>
        <site name="s2" pos="0.2 0 0.1" euler="30 0 -20"/>
        <body pos="0.2 0 0.1">
          <joint name="ball" type="ball"/>
          <geom fromto="0 0 0 0 0.2 -0.2" size="0.04"/>
          <site name="s3" pos="0 0.2 -0.2" euler="10 20 30"/>
        </body>
      </body>
    </body>
    <body name="free" pos="1 0 1">
      <freejoint name="free"/>
      <geom type="box" size="0.1 0.2 0.05"/>
      <site name="s4" pos="0.1 0 0" euler="0 30 0"/>
    </body>
    <body pos="-1 0 1">
      <joint name="crank" axis="0 1 0"/>
      <geom fromto="0 0 0 0.1 0 0"/>
      <site name="cs" pos="0.1 0 0"/>
    </body>
    <body pos="-1.3 0 1">
      <joint name="slider" type="slide" axis="1 0 0"/>
      <geom type="box" size="0.05 0.05 0.05"/>
      <site name="ss" zaxis="1 0 0.1"/>
    </body>
  </worldbody>
  <actuator>
    <motor joint="hinge" gear="2" ctrlrange="-1 1"/>
    <motor joint="slide" forcerange="-0.5 0.5"/>
    <motor joint="ball" gear="1 2 3"/>
    <general jointinparent="ball" gear="0.5 -1 0.3"/>
    <motor joint="free" gear="1 0 0.5 0.2 0 1"/>
    <general jointinparent="free" gear="0 1 0 1 1 0"/>
    <position joint="hinge" kp="10" kv="1"/>
    <position joint="slide" kp="5" timeconst="0.05"/>
    <velocity joint="hinge" kv="2"/>
    <intvelocity joint="slide" kp="3" actrange="-0.5 0.5"/>
    <damper joint="hinge" kv="1" ctrlrange="0 1"/>
    <cylinder joint="slide" timeconst="0.1" area="0.02" bias="0.1 -0.2 0.05"/>
    <general joint="hinge" dyntype="filter" dynprm="0.05" actearly="true" gaintype="affine"
             gainprm="1 0.5 -0.2" biastype="affine" biasprm="0.1 -1 -0.3"/>
    <general joint="slide" dyntype="integrator" actlimited="true" actrange="-1 1" actearly="true"/>
    <general joint="hinge" dyntype="filterexact" dynprm="0.02" actlimited="true"
             actrange="-0.3 0.8" actearly="true"/>
    <muscle joint="hinge" gear="0.2"/>
    <muscle joint="hinge" gear="-0.15" tausmooth="0.2" force="30" range="0.6 1.3"/>
    <general site="s4" gear="0 1 0 0 0 0"/>
    <general site="s4" gear="0 0 0 0 1 0"/>
    <general site="s3" refsite="s1" gear="1 0.5 0 0.2 0 1"/>
    <general site="s2" refsite="s3" gear="0 0 0 1 0 0"/>
    <position site="s3" refsite="s1" gear="0 0 0 0 0 1" kp="5"/>
    <position joint="ball" gear="0 0 1" kp="2"/>
    <intvelocity joint="ball" gear="1 0 0" kp="2" actrange="-10 10"/>
    <general cranksite="cs" slidersite="ss" cranklength="0.35" gear="2"/>
    <adhesion body="free" gain="3" ctrlrange="0 1"/>
    <motor joint="hinge" group="3"/>
  </actuator>
</mujoco>
"""

# MuJoCo 4.0's pid, dcmotor and orientation actuators in their main configurations.
NEW_XML = """
<mujoco>
  <option timestep="0.002"/>
  <default><geom type="capsule" size="0.05"/></default>
  <worldbody>
    <body pos="0 0 1">
      <joint name="h1" axis="0 1 0"/>
      <geom fromto="0 0 0 0.3 0 0"/>
      <site name="a" pos="0.2 0 0" euler="0 10 0"/>
      <body pos="0.3 0 0">
        <joint name="ball" type="ball"/>
        <geom fromto="0 0 0 0 0.2 0"/>
        <site name="b" pos="0 0.1 0" euler="10 0 20"/>
      </body>
    </body>
    <body pos="1 0 1"><joint name="h2" axis="0 1 0"/><geom fromto="0 0 0 0.3 0 0"/></body>
    <body pos="2 0 1"><joint name="h3" axis="1 0 0"/><geom fromto="0 0 0 0 0.3 0"/></body>
    <body pos="3 0 1"><joint name="h4" axis="1 0 0"/><geom fromto="0 0 0 0 0.3 0"/></body>
  </worldbody>
  <actuator>
    <pid joint="h1" kp="5" ki="1" kv="0.3" imax="0.5" slewmax="2" input="pos vel ff"/>
    <pid joint="h2" kp="3" kv="0.2"/>
    <pid joint="h4" kp="2" ki="0.5" input="pos"/>
    <dcmotor joint="h2" motorconst="0.1" resistance="2"/>
    <dcmotor joint="h3" motorconst="0.05" resistance="1" inductance="0 0.01"
             thermal="2 5 0 0.004 25 20" lugre="100 0.5 0.1 0.2 0.05" cogging="0.01 4 0.3"
             controller="2 0.5 0.1 3 0.4 12" input="pos vel"/>
    <dcmotor joint="h4" input="none" lugre="50 0.2 0.05 0.1 0.1" motorconst="0.02"
             resistance="1"/>
    <dcmotor joint="h1" motorconst="0.2" resistance="0.5" input="ff voltage" saturation="0.5 0 0"/>
    <orientation joint="ball" kp="10" kv="1"/>
    <orientation site="b" refsite="a" kp="3" kv="0.2" input="quat" forcerange="0 0.8"/>
  </actuator>
</mujoco>
"""

NEW_MODELS = {"own/classic": CLASSIC_XML, "own/pid_dcmotor_orientation": NEW_XML}


def _mujoco(name: str) -> mujoco.MjModel:
  if name in NEW_MODELS:
    m = mujoco.MjModel.from_xml_string(NEW_MODELS[name])
  else:
    m = mujoco.MjModel.from_xml_path(support.model_paths()[name])
  dsbl = mujoco.mjtDisableBit
  m.opt.disableflags |= dsbl.mjDSBL_CONTACT | dsbl.mjDSBL_CONSTRAINT
  return m


# The default run checks the actuator models of this file, tests/models, the bundled examples and
# MJX's actuator and tendon models, plus two suite models; the slow tier checks every model.
_DEFAULT_PREFIXES = ("own/", "ex/", "mjx/actuator/", "mjx/tendon/", "dmc/humanoid", "gym/ant")


def _actuated() -> list:
  names = [pytest.param(name) for name in NEW_MODELS]
  for name, path in support.model_paths().items():
    if mujoco.MjModel.from_xml_path(path).nactuator:
      slow = not name.startswith(_DEFAULT_PREFIXES) or name == "dmc/humanoid_CMU"
      names.append(pytest.param(name, marks=pytest.mark.slow if slow else ()))
  return names


def random_inputs(m: mujoco.MjModel, seed: int = 0):
  """NSTATE random (qpos, qvel, ctrl, act); controls and activations reach past their ranges."""
  rng = np.random.default_rng(seed)
  qpos = m.qpos0 + 0.3 * rng.normal(size=(NSTATE, m.nq))
  for q in qpos:
    mujoco.mj_normalizeQuat(m, q)
  qvel = rng.normal(size=(NSTATE, m.nv))
  lo, hi = m.actuator_ctrlrange[:, 0], m.actuator_ctrlrange[:, 1]
  mid, half = (lo + hi) / 2, np.maximum((hi - lo) / 2, 1.0)
  ctrl = mid + 1.3 * half * rng.uniform(-1, 1, size=(NSTATE, m.nu))
  act = 1.5 * rng.uniform(-1, 1, size=(NSTATE, m.na))
  return qpos, qvel, ctrl, act


def _dense_moment(m: mujoco.MjModel, d: mujoco.MjData) -> np.ndarray:
  moment = np.zeros((m.nout, m.nv))
  mujoco.mju_sparse2dense(moment, d.actuator_moment, d.moment_rownnz, d.moment_rowadr,
                          d.moment_colind)
  return moment


@functools.cache
def _case(name: str):
  mj = _mujoco(name)
  fm = from_mujoco(mj)
  qpos, qvel, ctrl, act = random_inputs(mj)
  expected = {k: [] for k in FIELDS}
  for s in range(NSTATE):
    md = mujoco.MjData(mj)
    md.qpos[:], md.qvel[:], md.ctrl[:], md.act[:] = qpos[s], qvel[s], ctrl[s], act[s]
    mujoco.mj_forward(mj, md)
    for k in FIELDS:
      expected[k].append(_dense_moment(mj, md) if k == "actuator_moment" else
                         np.array(getattr(md, k)))
  d = make_data(fm, batch_shape=(NSTATE,)).replace(
      qpos=jnp.asarray(qpos), qvel=jnp.asarray(qvel), ctrl=jnp.asarray(ctrl),
      act=jnp.asarray(act))
  out = jax.jit(jax.vmap(forward, in_axes=(None, 0)))(fm, d)
  cond = max((np.linalg.cond(_full_m(mj, qpos[s])) for s in range(NSTATE)), default=1.0)
  return out, {k: np.stack(v) for k, v in expected.items()}, cond


def _full_m(mj: mujoco.MjModel, qpos: np.ndarray) -> np.ndarray:
  md = mujoco.MjData(mj)
  md.qpos[:] = qpos
  mujoco.mj_forward(mj, md)
  full = np.zeros((mj.nv, mj.nv))
  mujoco.mj_fullM(mj, md, full)
  return full


@pytest.mark.parametrize("field", FIELDS)
@pytest.mark.parametrize("name", _actuated())
def test_conformance(name: str, field: str):
  out, expected, cond = _case(name)
  if field == "qacc" and cond > 1e12:
    pytest.skip("qM is numerically singular at these states")
  err = support.relerr(getattr(out, field), expected[field])
  assert err < TOL * (1.0 if field != "qacc" else max(1.0, cond * 1e-4)), f"{name} {field}: {err:.3g}"


INTEGRATORS = {"euler": mujoco.mjtIntegrator.mjINT_EULER, "rk4": mujoco.mjtIntegrator.mjINT_RK4,
               "implicit": mujoco.mjtIntegrator.mjINT_IMPLICIT,
               "implicitfast": mujoco.mjtIntegrator.mjINT_IMPLICITFAST}
NSTEP = 200

# 200 steps of every dynamics type (actearly on and off) under each integrator; the default run
# keeps the classic model under three integrators and the 4.0 actuators under implicitfast.
_TRAJECTORIES = [pytest.param(model, integ, marks=() if (model, integ) in {
    ("own/classic", "euler"), ("own/classic", "rk4"), ("own/classic", "implicitfast"),
    ("own/pid_dcmotor_orientation", "implicitfast")} else pytest.mark.slow)
                 for model in NEW_MODELS for integ in INTEGRATORS]


def _trajectory_inputs(mj: mujoco.MjModel):
  qpos, qvel, ctrl, act = random_inputs(mj, seed=3)
  return qpos[0], 0.3 * qvel[0], ctrl[0], act[0]


@pytest.mark.parametrize("name,integrator", _TRAJECTORIES)
def test_trajectory(name: str, integrator: str):
  mj = _mujoco(name)
  mj.opt.integrator = INTEGRATORS[integrator]
  # An SO3 torque clamped by its norm sits at the bound up to rounding, and whether MuJoCo's
  # implicit integrators then take its damping is decided by that rounding: no norm clamps here.
  mj.actuator_forcelimited[mj.actuator_gaintype == mujoco.mjtGain.mjGAIN_SO3] = 0
  fm = from_mujoco(mj)
  qpos, qvel, ctrl, act = _trajectory_inputs(mj)
  md = mujoco.MjData(mj)
  md.qpos[:], md.qvel[:], md.ctrl[:], md.act[:] = qpos, qvel, ctrl, act
  expected = {k: [] for k in ("qpos", "qvel", "act")}
  for _ in range(NSTEP):
    mujoco.mj_step(mj, md)
    for k in expected:
      expected[k].append(np.array(getattr(md, k)))
  d = make_data(fm).replace(qpos=jnp.asarray(qpos), qvel=jnp.asarray(qvel),
                            ctrl=jnp.asarray(ctrl), act=jnp.asarray(act))
  _, traj = jax.jit(rollout, static_argnames="nstep")(fm, d, nstep=NSTEP)
  for k, v in expected.items():
    err = support.relerr(traj[k], np.stack(v))
    assert err < 1e-6, f"{name} {integrator} {k}: {err:.3g}"


# A small arm for rollout gradients: a muscle, a filterexact position servo with actearly, an
# integrator velocity servo with an activation range, affine gain and bias with a filter, a
# cylinder and a site transmission, all away from non-smooth switches.
GRAD_XML = """
<mujoco>
  <option timestep="0.005"/>
  <default><geom type="capsule" size="0.04"/><joint damping="0.2"/></default>
  <worldbody>
    <body pos="0 0 1">
      <joint name="shoulder" axis="0 1 0" range="-1.5 1.5"/>
      <geom fromto="0 0 0 0.3 0 0"/>
      <body pos="0.3 0 0">
        <joint name="elbow" axis="0 1 0" range="-2 2"/>
        <geom fromto="0 0 0 0.25 0 0"/>
        <site name="hand" pos="0.25 0 0"/>
      </body>
    </body>
  </worldbody>
  <actuator>
    <muscle joint="shoulder" gear="0.3" force="20"/>
    <general joint="elbow" dyntype="filterexact" dynprm="0.03" gainprm="4" biastype="affine"
             biasprm="0 -4 -0.2" actearly="true"/>
    <intvelocity joint="shoulder" kp="2" actrange="-0.4 0.4"/>
    <general joint="elbow" dyntype="filter" dynprm="0.05" gaintype="affine" gainprm="1 0.3 -0.1"
             biastype="affine" biasprm="0 -0.5 -0.05" ctrlrange="-1 1"/>
    <cylinder joint="shoulder" timeconst="0.08" area="0.01" bias="0 -0.1 -0.02"/>
    <general site="hand" gear="0 0 1 0 0 0" ctrlrange="-2 2"/>
  </actuator>
</mujoco>
"""
GRAD_STEPS = 100
GRAD_PARAMS = ("actuator_gainprm", "actuator_biasprm", "actuator_dynprm", "actuator_gear")


@functools.cache
def _grad_setup():
  mj = mujoco.MjModel.from_xml_string(GRAD_XML)
  fm = from_mujoco(mj)
  rng = np.random.default_rng(5)
  hi = mj.actuator_ctrlrange[:, 1]
  limited = mj.actuator_ctrllimited.astype(bool)
  ctrl = rng.uniform(-1, 1, size=(GRAD_STEPS, mj.nu))
  # some controls sit just inside their range limits, where clamping is one eps away
  ctrl[:, limited] = np.where(rng.uniform(size=(GRAD_STEPS, limited.sum())) < 0.3,
                              hi[limited] - 1e-4, ctrl[:, limited])
  d = make_data(fm).replace(qpos=fm.qpos0 + 0.2, act=jnp.asarray([0.3, 0.1, 0.4 - 1e-4, 0.2, 0.1]))

  def loss(m, d0, ctrl_seq):
    final, traj = rollout(m, d0, ctrl_seq)
    return (jnp.sum(final.qpos * jnp.arange(1.0, 3.0)) + jnp.sum(final.qvel) * 0.1
            + jnp.sum(traj["act"][-1]) + 0.01 * jnp.sum(traj["qpos"]))
  return fm, d, jnp.asarray(ctrl), loss


def _inputs(fm, d, ctrl) -> dict[str, jax.Array]:
  """Everything the rollout gradient is taken with respect to, by test id."""
  return dict(ctrl=ctrl, act=d.act, **{name: getattr(fm, name) for name in GRAD_PARAMS})


@functools.cache
def _grad_functions():
  """(loss of the inputs dict, its gradient), each jitted once for all test ids."""
  fm, d, ctrl, loss = _grad_setup()

  def f(x):
    params = {name: x[name] for name in GRAD_PARAMS}
    return loss(fm.replace(**params), d.replace(act=x["act"]), x["ctrl"])
  return jax.jit(f), jax.jit(jax.grad(f))


@functools.cache
def _rollout_grad() -> dict[str, np.ndarray]:
  fm, d, ctrl, _ = _grad_setup()
  return jax.tree.map(np.asarray, _grad_functions()[1](_inputs(fm, d, ctrl)))


GRAD_WRT = ("ctrl", "act") + GRAD_PARAMS


@pytest.mark.parametrize("wrt", GRAD_WRT)
def test_rollout_gradient(wrt: str):
  fm, d, ctrl, _ = _grad_setup()
  f = _grad_functions()[0]
  x = _inputs(fm, d, ctrl)
  rng = np.random.default_rng(GRAD_WRT.index(wrt))
  direction = jnp.asarray(rng.normal(size=x[wrt].shape))
  if wrt.startswith("actuator_") and wrt != "actuator_gear":
    direction = direction * (jnp.abs(x[wrt]) > 0)   # perturb the parameters in use
  analytic = float(jnp.sum(_rollout_grad()[wrt] * direction))
  eps = 1e-6
  plus, minus = (dict(x, **{wrt: x[wrt] + sign * eps * direction}) for sign in (1, -1))
  numeric = (float(f(plus)) - float(f(minus))) / (2 * eps)
  assert np.isfinite(analytic)
  assert abs(analytic - numeric) <= 1e-6 * (1 + abs(numeric)), (wrt, analytic, numeric)


ADHESION_XML = """
<mujoco>
  <size nconmax="{cap}"/>
  <option timestep="0.005" cone="{cone}"/>
  <worldbody>
    <geom type="plane" size="5 5 0.1"/>
    <body name="box" pos="0 0 0.055" euler="6 0 0">
      <freejoint/>
      <geom type="box" size="0.1 0.08 0.05" margin="0.005" gap="0.02"/>
      <body pos="0.1 0 0">
        <joint type="hinge" axis="0 1 0"/>
        <geom type="sphere" size="0.03" pos="0.05 0 0" contype="0" conaffinity="0"/>
      </body>
    </body>
    <body name="ball" pos="0.5 0 0.029"><freejoint/><geom type="sphere" size="0.03"/></body>
  </worldbody>
  <actuator>
    <adhesion body="box" gain="5" ctrlrange="0 1"/>
    <adhesion body="ball" gain="2" ctrlrange="0 1"/>
  </actuator>
</mujoco>
"""


@pytest.mark.parametrize("cone,cap", [("pyramidal", "-1"), ("elliptic", "-1"),
                                      ("pyramidal", "5")])
def test_adhesion_moment_averages_contact_normals(cone: str, cap: str):
  """Adhesion's moment is minus the mean normal Jacobian of the body's contacts, those in the gap
  (margin + gap > dist >= margin: no constraint rows) included; with nconmax the contacts'
  bodies are traced. Moments, forces and qacc against MuJoCo."""
  xml = ADHESION_XML.format(cone=cone, cap=cap)
  mj = mujoco.MjModel.from_xml_string(xml)
  mj.opt.tolerance = 0.0
  md = mujoco.MjData(mj)
  md.ctrl[:] = [0.7, 0.4]
  md.qvel[:] = 0.2 * np.random.default_rng(0).normal(size=mj.nv)
  mujoco.mj_forward(mj, md)
  excluded = sorted(c.exclude for c in md.contact)
  assert excluded == [0, 0, 0, 1, 1]   # two box corners touch, two are in the gap
  m = from_mujoco(mj)
  assert (m.nconmax < m.nconslot) == (cap != "-1")
  m = m.replace(opt=m.opt.replace(tolerance=jnp.asarray(1e-13)))
  d = make_data(m).replace(qpos=support.snapshot(md.qpos), qvel=support.snapshot(md.qvel),
                           ctrl=support.snapshot(md.ctrl))
  d = jax.jit(forward)(m, d)
  moment = _dense_moment(mj, md)
  assert np.abs(moment).max() > 0.5
  assert support.relerr(d.actuator_moment, moment) < 1e-12
  assert support.relerr(d.qfrc_actuator, md.qfrc_actuator) < 1e-12
  assert support.relerr(d.qacc, md.qacc) < 1e-9
