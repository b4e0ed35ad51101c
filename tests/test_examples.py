"""The actuator examples of the seed article, simulated by flexor and by MuJoCo C side by side.

* a hinge pendulum whose motor is switched to ctrl = -100 at t = 1 s;
* the slider-crank (cranklength 0.11, kp 30) driven by ctrl = 0.8 sin(2 t);
* six free cubes driven through sites (motors along y and z, a torque about y, dampers along z
  and y), the bundled ``site_cubes``;
* the bundled six-muscle arm under a varying excitation.

Each runs through ``flexor.rollout`` with the per-step controls and through ``mj_step``; states
agree to 1e-8 relative over the whole horizon.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest

import flexor
import support
from flexor.mjcf.from_mujoco import from_mujoco
from flexor import examples

PENDULUM_XML = """
<mujoco>
  <worldbody>
    <body>
      <joint name="hinge" type="hinge" axis="0 1 0"/>
      <geom type="capsule" size=".03" fromto="0 0 0 1 0 1"/>
    </body>
  </worldbody>
  <actuator><motor name="hmotor" joint="hinge" gear="1"/></actuator>
</mujoco>
"""


def _pendulum_ctrl(t: np.ndarray) -> np.ndarray:
  return np.where(t >= 1.0, -100.0, 0.0)[:, None]


def _crank_ctrl(t: np.ndarray) -> np.ndarray:
  return 0.8 * np.sin(2 * t)[:, None]


def _cubes_ctrl(t: np.ndarray) -> np.ndarray:
  return np.broadcast_to([50.0, 50.0, 5.0, 10.0, 10.0], (len(t), 5))


def _arm_ctrl(t: np.ndarray) -> np.ndarray:
  phase = np.arange(6) * np.pi / 3
  return 0.5 + 0.5 * np.sin(3 * t[:, None] + phase)


CASES = {
    "pendulum": (PENDULUM_XML, _pendulum_ctrl, 1.5),
    "slider_crank": (examples.path("slider_crank"), _crank_ctrl, 2.0),
    "site_cubes": (examples.path("site_cubes"), _cubes_ctrl, 1.0),
    "muscle_arm": (examples.path("muscle_arm"), _arm_ctrl, 1.0),
}


@pytest.mark.parametrize("name", CASES)
def test_example_matches_mujoco(name: str):
  source, ctrl_fn, duration = CASES[name]
  if source.endswith(".xml"):
    mj, fm = mujoco.MjModel.from_xml_path(source), flexor.load_mjcf(source)
  else:
    mj, fm = mujoco.MjModel.from_xml_string(source), flexor.load_mjcf_string(source)
  nstep = int(round(duration / mj.opt.timestep))
  ctrl = ctrl_fn(np.arange(nstep) * mj.opt.timestep)

  md = mujoco.MjData(mj)
  expected = []
  for t in range(nstep):
    md.ctrl[:] = ctrl[t]
    mujoco.mj_step(mj, md)
    expected.append(np.concatenate([md.qpos, md.qvel, md.act]))

  _, traj = jax.jit(flexor.rollout)(fm, flexor.make_data(fm), jnp.asarray(ctrl))
  actual = np.concatenate([traj["qpos"], traj["qvel"], traj["act"]], axis=-1)
  err = support.relerr(actual, np.stack(expected))
  assert err < 1e-8, f"{name}: {err:.3g}"


@pytest.mark.parametrize("name", examples.names())
def test_float32_example_steps_in_float32(name: str):
  """Loaded in float32 with x64 enabled, a bundled model's step computes no float64 array."""
  # from_mujoco: no setconst programs to compile in float32 for this check of the step.
  m = from_mujoco(mujoco.MjModel.from_xml_path(examples.path(name)), dtype=jnp.float32)
  assert not support.float64_values(jax.make_jaxpr(flexor.step)(m, flexor.make_data(m)).jaxpr)
