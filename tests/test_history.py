"""History buffers (``flexor.history``) against MuJoCo 4.0: delayed controls, and delayed,
periodic and recorded sensors.

``tests/models/history.xml`` buffers single- and multi-input actuators (an SO3 servo, a pid, an
integrator-driven servo, site and joint motors) and sensors of each stage with each
interpolation. Both engines start from the same reset (or keyframe) and take the same random
controls; every step compares the state, the whole history buffer and the sensordata.
"""

from __future__ import annotations

import functools
import os

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest

import flexor
import support
from flexor import history, make_data
from flexor.mjcf.from_mujoco import from_mujoco
from flexor.rollout import model_axes, rollout

PATH = os.path.join(os.path.dirname(__file__), "models", "history.xml")
# a buffer holds copies of computed values, and reading one is a few flops: agreement to the
# rounding of the dynamics the values come from
TOL = 1e-10
FIELDS = ("qpos", "qvel", "act", "history", "sensordata", "actuator_force")
INTEGRATORS = {"euler": mujoco.mjtIntegrator.mjINT_EULER, "rk4": mujoco.mjtIntegrator.mjINT_RK4,
               "implicit": mujoco.mjtIntegrator.mjINT_IMPLICIT,
               "implicitfast": mujoco.mjtIntegrator.mjINT_IMPLICITFAST}


@functools.cache
def _step():
  return jax.jit(flexor.step)


def _pair(integrator: str = "euler") -> tuple[mujoco.MjModel, flexor.Model]:
  mj = mujoco.MjModel.from_xml_path(PATH)
  mj.opt.integrator = INTEGRATORS[integrator]
  return mj, from_mujoco(mj)


def _step_both(mj: mujoco.MjModel, md: mujoco.MjData, m: flexor.Model, d: flexor.Data,
               ctrl: np.ndarray) -> flexor.Data:
  """One step of each engine with controls ``ctrl``; returns flexor's new Data."""
  md.ctrl[:] = ctrl
  mujoco.mj_step(mj, md)
  return _step()(m, d.replace(ctrl=jnp.asarray(ctrl)))


def _compare(d: flexor.Data, md: mujoco.MjData, what: str) -> None:
  for field in FIELDS:
    err = support.relerr(np.asarray(getattr(d, field)), getattr(md, field))
    assert err <= TOL, f"{what}: {field} relative error {err:.3g}"


def test_reset_matches_mujoco():
  """Compiled buffer layout, and the buffers of a reset and of a keyframe reset."""
  mj = mujoco.MjModel.from_xml_path(PATH)
  m = flexor.load_mjcf(PATH)
  for name in ("nhistory", "actuator_history", "actuator_historyadr", "actuator_delay",
               "sensor_history", "sensor_historyadr", "sensor_delay", "sensor_interval"):
    np.testing.assert_array_equal(np.asarray(getattr(m, name)), getattr(mj, name), name)
  md = mujoco.MjData(mj)
  np.testing.assert_array_equal(np.asarray(make_data(m).history), md.history)
  mujoco.mj_resetDataKeyframe(mj, md, 0)
  np.testing.assert_array_equal(np.asarray(make_data(m, key=0).history), md.history)


def test_periodic_sample_times_match_mujoco():
  """A periodic sensor's initial sample times: ticks a period apart on the step grid, strictly
  increasing, the newest before the first tick recorded, over random periods and phases (some
  shorter than a step)."""
  rng = np.random.default_rng(0)
  for _ in range(40):
    dt = float(rng.choice([0.01, 0.005, 0.003, 0.002]))
    period = float(np.round(rng.uniform(0.001, 0.05), 4))
    phase = 0.0 if rng.random() < 0.3 else -float(np.round(rng.uniform(0, 0.99 * period), 4))
    n = int(rng.integers(1, 8))
    xml = (f"<mujoco><option timestep='{dt}'/><worldbody><body><joint name='j'/>"
           f"<geom size='.1'/></body></worldbody><sensor><jointpos joint='j' nsample='{n}' "
           f"interval='{period} {phase}'/></sensor></mujoco>")
    expected = mujoco.MjData(mujoco.MjModel.from_xml_string(xml)).history
    got = np.asarray(make_data(flexor.load_mjcf_string(xml)).history)
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-15,
                               err_msg=f"dt {dt}, interval {period} {phase}, nsample {n}")


@pytest.mark.parametrize("integrator", [
    "euler", *(pytest.param(name, marks=pytest.mark.slow) for name in list(INTEGRATORS)[1:])])
def test_trajectory_matches_mujoco(integrator: str):
  """60 steps (0.6 s) of random controls from the keyframe, with contacts (the other
  integrators, whose steps take longer to compile, in the slow tier)."""
  mj, m = _pair(integrator)
  md = mujoco.MjData(mj)
  mujoco.mj_resetDataKeyframe(mj, md, 0)
  d = make_data(m, key=0)
  rng = np.random.default_rng(1)
  for t in range(60):
    d = _step_both(mj, md, m, d, rng.normal(size=mj.nu))
    _compare(d, md, f"{integrator} step {t}")


def test_times_out_of_order_match_mujoco():
  """Steps taken at earlier times: a time the buffers hold overwrites its sample, a time between
  samples drops the oldest and shifts, a time before all of them replaces the oldest."""
  mj, m = _pair()
  md = mujoco.MjData(mj)
  d = make_data(m)
  rng = np.random.default_rng(2)
  # five steps forward, then back onto a held sample, between two, and before all
  times = [None] * 5 + [0.02, None, 0.0249, 0.013, -0.5, None, None]
  for t, when in enumerate(times):
    if when is not None:
      md.time = when
      d = d.replace(time=jnp.asarray(when, d.time.dtype))
    d = _step_both(mj, md, m, d, rng.normal(size=mj.nu))
    _compare(d, md, f"step {t} at time {when}")


def test_read_matches_mujoco():
  """``history.read`` against mj_readCtrl and mj_readSensor (which read at the given time less
  the delay) with each interpolation, at times before, between, on and after the samples."""
  mj, _ = _pair()
  md = mujoco.MjData(mj)
  rng = np.random.default_rng(3)
  for _ in range(7):
    md.ctrl[:] = rng.normal(size=mj.nu)
    mujoco.mj_step(mj, md)
  h = support.snapshot(md.history)
  times = np.concatenate([[-1.0, 0.0, 0.03, 0.06, 0.07, 1.0], rng.uniform(-0.05, 0.08, 12)])
  for interp in (0, 1, 2):
    for i in np.flatnonzero(mj.actuator_historyadr >= 0):
      n, dim = int(mj.actuator_history[i, 0]), int(mj.actuator_ctrlnum[i])
      got = history.read(h, np.full(len(times), mj.actuator_historyadr[i]), n, dim,
                         jnp.asarray(times - mj.actuator_delay[i]), np.full(len(times), interp))
      expected = [mujoco.mj_readCtrl(mj, md, int(i), float(t), np.zeros(dim), interp).copy()
                  for t in times]
      np.testing.assert_allclose(np.asarray(got), expected, rtol=1e-12, atol=1e-14,
                                 err_msg=f"actuator {i}, interp {interp}")
    for i in np.flatnonzero(mj.sensor_historyadr >= 0):
      n, dim = int(mj.sensor_history[i, 0]), int(mj.sensor_dim[i])
      got = history.read(h, np.full(len(times), mj.sensor_historyadr[i]), n, dim,
                         jnp.asarray(times - mj.sensor_delay[i]), np.full(len(times), interp))
      expected = [mujoco.mj_readSensor(mj, md, int(i), float(t), np.zeros(dim), interp).copy()
                  for t in times]
      np.testing.assert_allclose(np.asarray(got), expected, rtol=1e-12, atol=1e-14,
                                 err_msg=f"sensor {i}, interp {interp}")


@pytest.mark.slow
def test_randomized_delays_match_mujoco():
  """actuator_delay and sensor_delay are traced: a vmap over three models with their own delays
  (domain randomization) steps as three MuJoCo models do."""
  mj = mujoco.MjModel.from_xml_path(PATH)
  mj.opt.disableflags |= mujoco.mjtDisableBit.mjDSBL_CONTACT  # a smaller program to compile
  m = from_mujoco(mj)
  delays = np.array([[0.0, 0.004], [0.017, 0.013], [0.033, 0.02]])
  batch = m.replace(actuator_delay=jnp.asarray(np.stack(
      [np.asarray(m.actuator_delay).copy() for _ in delays])).at[:, 0].set(delays[:, 0]),
      sensor_delay=jnp.asarray(np.stack(
          [np.asarray(m.sensor_delay).copy() for _ in delays])).at[:, 0].set(delays[:, 1]))
  axes = model_axes(m, ("actuator_delay", "sensor_delay"))
  d = make_data(m)
  ctrl = np.random.default_rng(4).normal(size=(20, mj.nu))
  final, _ = jax.jit(jax.vmap(lambda mb: rollout(mb, d, jnp.asarray(ctrl)), in_axes=(axes,)))(
      batch)
  for k, (act_delay, sensor_delay) in enumerate(delays):
    mj.actuator_delay[0], mj.sensor_delay[0] = act_delay, sensor_delay
    md = mujoco.MjData(mj)
    for u in ctrl:
      md.ctrl[:] = u
      mujoco.mj_step(mj, md)
    _compare(jax.tree.map(lambda x: x[k], final), md, f"delays {act_delay}, {sensor_delay}")


GRAD_XML = """
<mujoco>
  <option timestep="0.01"/>
  <worldbody>
    <body>
      <joint name="a" axis="0 1 0" damping="0.1"/>
      <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.03"/>
      <body pos="0.3 0 0">
        <joint name="b" axis="0 1 0" damping="0.1"/>
        <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.03"/>
      </body>
    </body>
  </worldbody>
  <actuator>
    <motor joint="a" nsample="4" delay="0.023" interp="linear"/>
    <motor joint="b" nsample="5" delay="0.017" interp="cubic"/>
    <position joint="b" kp="2" nsample="3" delay="0.01"/>
  </actuator>
</mujoco>
"""


def test_rollout_gradient_through_delays():
  """jax.grad of a 40-step rollout with respect to the controls and the delays of the linearly
  and cubically interpolated motors agrees with central differences."""
  m = from_mujoco(mujoco.MjModel.from_xml_string(GRAD_XML))
  d = make_data(m)
  ctrl = jnp.asarray(np.random.default_rng(5).normal(size=(40, m.nu)))

  def loss(ctrl, delay):
    final, traj = rollout(m.replace(actuator_delay=delay), d, ctrl)
    return jnp.sum(final.qpos * jnp.array([1.0, 2.0])) + 0.1 * jnp.sum(traj["qvel"])

  f = jax.jit(loss)
  grads = jax.jit(jax.grad(loss, argnums=(0, 1)))(ctrl, m.actuator_delay)
  rng = np.random.default_rng(6)
  for x, g, argnum in ((ctrl, grads[0], 0), (m.actuator_delay, grads[1], 1)):
    direction = jnp.asarray(rng.normal(size=x.shape))
    if argnum == 1:  # the servo's zero-order hold is piecewise constant in its delay
      direction = direction.at[2].set(0.0)
    eps = 1e-6
    args = [ctrl, m.actuator_delay]
    plus, minus = list(args), list(args)
    plus[argnum], minus[argnum] = x + eps * direction, x - eps * direction
    numeric = (float(f(*plus)) - float(f(*minus))) / (2 * eps)
    analytic = float(jnp.sum(g * direction))
    assert abs(analytic - numeric) <= 1e-6 * (1 + abs(numeric)), (argnum, analytic, numeric)


def test_preloaded_history_matches_mujoco():
  """init_ctrl_history and init_sensor_history preload a known past (mj_initCtrlHistory,
  mj_initSensorHistory); read_ctrl and read_sensor then read what mj_readCtrl and
  mj_readSensor read, and the steps that follow match."""
  mj, m = _pair()
  md = mujoco.MjData(mj)
  d = make_data(m)
  rng = np.random.default_rng(7)
  for i in np.flatnonzero(mj.actuator_historyadr >= 0):
    n, dim = int(mj.actuator_history[i, 0]), int(mj.actuator_ctrlnum[i])
    values = rng.normal(size=(n, dim))
    times = None if i % 2 else np.sort(rng.uniform(-0.1, 0.0, n))
    mujoco.mj_initCtrlHistory(mj, md, int(i), times, values)
    d = history.init_ctrl_history(m, d, int(i), jnp.asarray(values),
                                  None if times is None else jnp.asarray(times))
  for i in np.flatnonzero(mj.sensor_historyadr >= 0):
    n, dim = int(mj.sensor_history[i, 0]), int(mj.sensor_dim[i])
    values = rng.normal(size=(n, dim))
    phase = -0.01 * (i % 3)
    mujoco.mj_initSensorHistory(mj, md, int(i), None, values, phase)
    d = history.init_sensor_history(m, d, int(i), jnp.asarray(values), phase=phase)
  np.testing.assert_array_equal(np.asarray(d.history), md.history)
  for t in (-0.2, -0.037, -0.01, 0.0, 0.02):
    for i in range(mj.nactuator):
      # the bindings return a view that the next call may overwrite: copy at once
      expected = mujoco.mj_readCtrl(mj, md, i, t, np.zeros(mj.actuator_ctrlnum[i]),
                                    int(mj.actuator_history[i, 1])).copy()
      np.testing.assert_allclose(history.read_ctrl(m, d, i, t), expected, rtol=1e-12,
                                 atol=1e-14, err_msg=f"actuator {i} at {t}")
    for i in range(mj.nsensor):
      expected = mujoco.mj_readSensor(mj, md, i, t, np.zeros(mj.sensor_dim[i]), 2).copy()
      np.testing.assert_allclose(history.read_sensor(m, d, i, t, interp=2), expected,
                                 rtol=1e-12, atol=1e-14, err_msg=f"sensor {i} at {t}")
  for t in range(5):
    d = _step_both(mj, md, m, d, np.asarray(d.ctrl))
    _compare(d, md, f"step {t}")
  with pytest.raises(ValueError, match="strictly increasing"):
    history.init_ctrl_history(m, d, 0, jnp.zeros((4, 3)), jnp.zeros(4))
  with pytest.raises(ValueError, match="no history buffer"):
    plain = flexor.load_mjcf_string(GRAD_XML.replace(' nsample="4"', "").replace(
        ' delay="0.023"', ""))
    history.init_ctrl_history(plain, make_data(plain), 0, jnp.zeros(1))
