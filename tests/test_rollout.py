"""rollout and step under jax transforms: gradients vs finite differences, vmap, jit, retracing,
float32, NaN detection and the compile-time budget."""

from __future__ import annotations

import functools
import time

import chex
import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest

import support
from flexor import make_data
from flexor.integrate import step
from flexor.mjcf.from_mujoco import from_mujoco
from flexor.rollout import batch_rollout, model_axes, rollout

# Central differences in float64 with EPS = 1e-6: truncation ~EPS^2 and rounding ~1e-16/EPS, both
# far below the 1e-6 relative tolerance.
EPS = 1e-6
GRAD_TOL = 1e-6
NSTEP = 20



@functools.cache
def _model(dtype=None, integrator=None):
  m = mujoco.MjModel.from_xml_string(support.ALL_JOINTS_XML)
  m.opt.timestep = 0.01  # a coarser step makes the 20-step rollout's gradients more nonlinear
  m.opt.disableflags |= int(support.SMOOTH_ONLY) & ~int(mujoco.mjtDisableBit.mjDSBL_ACTUATION)
  if integrator is not None:
    m.opt.integrator = integrator
  return m, from_mujoco(m, dtype=dtype)


def _data(fm, seed=0):
  rng = np.random.default_rng(seed)
  d = make_data(fm)
  return d.replace(qvel=jnp.asarray(0.5 * rng.normal(size=fm.nv), dtype=d.qvel.dtype))


def _loss(m, d, ctrl):
  final, traj = rollout(m, d, ctrl)
  return jnp.sum(jnp.sin(traj["qpos"])) + jnp.sum(final.qvel ** 2)


def _state_loss(m, qpos, qvel, d, ctrl):
  return _loss(m, d.replace(qpos=qpos, qvel=qvel), ctrl)


_loss_jit = jax.jit(_loss)
_grad_state = jax.jit(jax.grad(_state_loss, argnums=(1, 2)))
_grad_m = jax.jit(jax.grad(_loss, argnums=0))
_step = jax.jit(step)


def _ctrl(fm):
  return jnp.asarray(np.sin(np.arange(NSTEP))[:, None] * np.ones(fm.nu))


def _check_directional(f, g_dot_v, x, v):
  fd = (f(x + EPS * v) - f(x - EPS * v)) / (2 * EPS)
  assert abs(g_dot_v - fd) <= GRAD_TOL * max(1.0, abs(fd)), (g_dot_v, fd)


# Euler in the fast suite; the other integrators compile a gradient each (about a minute).
@pytest.mark.parametrize("integrator", [
    0, pytest.param(1, marks=pytest.mark.slow), pytest.param(2, marks=pytest.mark.slow),
    pytest.param(3, marks=pytest.mark.slow)], ids=["euler", "rk4", "implicit", "implicitfast"])
def test_grad_initial_state(integrator):
  _, fm = _model(integrator=integrator)
  d, ctrl = _data(fm), _ctrl(fm)
  grads = _grad_state(fm, d.qpos, d.qvel, d, ctrl)
  rng = np.random.default_rng(2)
  for field, grad in zip(("qpos", "qvel"), grads):
    x = np.asarray(getattr(d, field))
    v = rng.normal(size=x.shape)
    f = lambda y, field=field: float(_loss_jit(fm, d.replace(**{field: jnp.asarray(y)}), ctrl))
    _check_directional(f, float(np.dot(np.asarray(grad), v)), x, v)


@pytest.mark.parametrize("field", ["body_mass", "dof_damping", "opt.timestep"])
def test_grad_model_parameters(field):
  _, fm = _model()
  d, ctrl = _data(fm), _ctrl(fm)
  grad = _grad_m(fm, d, ctrl)

  def get(m):
    return m.opt.timestep if field == "opt.timestep" else getattr(m, field)

  def put(m, value):
    if field == "opt.timestep":
      return m.replace(opt=m.opt.replace(timestep=value))
    return m.replace(**{field: value})

  x = np.asarray(get(fm))
  v = np.random.default_rng(3).normal(size=x.shape)
  if field == "body_mass":
    v[0] = 0.0  # the world's mass is not a physical parameter
  f = lambda y: float(_loss_jit(put(fm, jnp.asarray(y)), d, ctrl))
  _check_directional(f, float(np.sum(np.asarray(get(grad)) * v)), x, v)


def test_vmap_over_data_equals_loop():
  _, fm = _model()
  ds = [_data(fm, seed) for seed in range(3)]
  batch = jax.tree_util.tree_map(lambda *x: jnp.stack(x), *ds)
  ctrl = jnp.stack([_ctrl(fm) * s for s in (1.0, -1.0, 0.5)])
  final, traj = jax.jit(batch_rollout)(fm, batch, ctrl)
  for i, d in enumerate(ds):
    want_final, want = jax.jit(rollout)(fm, d, ctrl[i])
    np.testing.assert_allclose(traj["qpos"][i], want["qpos"], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(final.qvel[i], want_final.qvel, rtol=1e-12, atol=1e-12)


def test_vmap_over_model_equals_loop():
  _, fm = _model()
  d, ctrl = _data(fm), _ctrl(fm)
  masses = jnp.stack([fm.body_mass * s for s in (1.0, 1.5, 2.0)])
  batched = fm.replace(body_mass=masses)
  run = lambda m: rollout(m, d, ctrl)[1]
  traj = jax.jit(jax.vmap(run, in_axes=(model_axes(fm, ["body_mass"]),)))(batched)
  for i in range(3):
    want = jax.jit(run)(fm.replace(body_mass=masses[i]))
    np.testing.assert_allclose(traj["qvel"][i], want["qvel"], rtol=1e-12, atol=1e-12)
  with pytest.raises(ValueError, match="no traced Model fields"):
    model_axes(fm, ["body_mas"])


def test_jit_equals_eager():
  _, fm = _model()
  d = _data(fm)
  eager = step(fm, d)
  jitted = _step(fm, d)
  for field in ("qpos", "qvel", "qacc", "time"):
    np.testing.assert_allclose(getattr(jitted, field), getattr(eager, field), rtol=1e-12, atol=1e-12)


def test_no_retrace_on_new_values():
  _, fm = _model()
  d = _data(fm)

  @jax.jit
  @chex.assert_max_traces(n=1)
  def traced_step(m, d):
    return step(m, d)

  d1 = traced_step(fm, d)
  d2 = traced_step(fm, d1)
  heavier = fm.replace(body_mass=fm.body_mass * 1.1, dof_damping=fm.dof_damping + 0.1)
  traced_step(heavier, d2)
  traced_step(fm, d.replace(qvel=d.qvel + 1.0))
  assert traced_step._cache_size() == 1


def test_float32_runs():
  _, fm32 = _model(dtype=jnp.float32)
  _, fm64 = _model()
  d32 = _data(fm32)
  final, traj = jax.jit(rollout, static_argnames="nstep")(fm32, d32, nstep=NSTEP)
  assert final.qpos.dtype == jnp.float32 and traj["qvel"].dtype == jnp.float32
  _, want = jax.jit(rollout, static_argnames="nstep")(fm64, _data(fm64), nstep=NSTEP)
  # float32 rounding over 20 steps of a well-conditioned system.
  np.testing.assert_allclose(traj["qpos"], want["qpos"], rtol=1e-4, atol=1e-4)
  assert not bool(final.warning_nan)


def test_nan_sets_warning():
  _, fm = _model()
  d = _data(fm)
  assert not bool(_step(fm, d).warning_nan)
  bad = _step(fm, d.replace(qvel=d.qvel.at[0].set(jnp.nan)))
  assert bool(bad.warning_nan)
  # Sticky: a later step from a repaired state keeps the flag until the caller clears it.
  assert bool(_step(fm, bad.replace(qpos=d.qpos, qvel=d.qvel)).warning_nan)


def test_rollout_argument_errors():
  _, fm = _model()
  d = _data(fm)
  with pytest.raises(ValueError, match="pass ctrl_seq or nstep"):
    rollout(fm, d)
  with pytest.raises(ValueError, match="shape"):
    rollout(fm, d, jnp.zeros((3, fm.nu + 1)))
  with pytest.raises(ValueError, match="does not match"):
    rollout(fm, d, jnp.zeros((3, fm.nu)), nstep=4)


def chain_xml(nbody: int) -> str:
  """A chain of ``nbody`` hinged capsules, each the child of the previous one."""
  body = ""
  for i in range(nbody):
    body += (f'<body pos="0 0 -0.1"><joint type="hinge" axis="{i % 2} {1 - i % 2} 0" damping="0.1"/>'
             '<geom type="capsule" fromto="0 0 0 0 0 -0.1" size="0.02"/>')
  body += "</body>" * nbody
  return f"<mujoco><worldbody>{body}</worldbody></mujoco>"


# Tracing and compiling step (Euler) for the 100-body chain measured 4.3 CPU-seconds on the 2-core
# test machine (RK4 5.7 s, implicitfast 4.2 s). The budget is in CPU time of this process, which
# XLA's mostly single-threaded compile makes close to wall time on an idle machine, but which,
# unlike wall time, does not grow when other processes load the machine.
COMPILE_BUDGET_S = 15.0


def test_compile_time_budget_100_body_chain():
  m = mujoco.MjModel.from_xml_string(chain_xml(100))
  fm = from_mujoco(m)
  d = make_data(fm)
  start = time.process_time()
  compiled = jax.jit(step).lower(fm, d).compile()
  elapsed = time.process_time() - start
  assert elapsed < COMPILE_BUDGET_S, (
      f"compiling step for a 100-body chain took {elapsed:.1f} CPU-seconds")
  out = compiled(fm, d)
  assert np.all(np.isfinite(np.asarray(out.qpos)))
