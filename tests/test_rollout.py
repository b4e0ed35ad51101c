"""rollout and step under jax transforms: gradients vs finite differences, vmap, jit, retracing,
float32, NaN detection and the compile-time budget."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import textwrap
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
from flexor.rollout import (batch_rollout, model_axes, observation, perturb_state, rollout,
                            seed_tangents)

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


def _reaches_output(closed: jax.extend.core.ClosedJaxpr) -> bool:
  """Whether the first output of a jaxpr is computed from its first input."""
  live = {closed.jaxpr.invars[0]}
  for eqn in closed.jaxpr.eqns:
    if any(isinstance(v, jax.extend.core.Var) and v in live for v in eqn.invars):
      live.update(eqn.outvars)
  return closed.jaxpr.outvars[0] in live


def test_seeded_tangents_change_no_value_and_no_gradient():
  """``seed_tangents``, which rollout applies to its initial Data, leaves the rollout's values and
  gradient those of a plain ``lax.scan`` of ``step``, while giving the outputs of a step (xpos)
  a tangent from qvel's alone: the carries that reverse mode through the scan would otherwise
  find by linearizing the step again and again."""
  _, fm = _model()
  d, ctrl = _data(fm), _ctrl(fm)

  def plain(qvel):
    def body(d, c):
      d = step(fm, d.replace(ctrl=c))
      return d, d.qpos
    final, qpos = jax.lax.scan(body, d.replace(qvel=qvel), ctrl)
    return jnp.sum(jnp.sin(qpos)) + jnp.sum(final.qvel ** 2)

  seeded = lambda qvel: _loss(fm, d.replace(qvel=qvel), ctrl)
  np.testing.assert_array_equal(jax.jit(seeded)(d.qvel), jax.jit(plain)(d.qvel))
  np.testing.assert_allclose(jax.jit(jax.grad(seeded))(d.qvel), jax.jit(jax.grad(plain))(d.qvel),
                             rtol=1e-12, atol=1e-12)

  def reached(seed, field):
    tangent = lambda t: getattr(jax.jvp(lambda v: seed(d.replace(qvel=v)), (d.qvel,), (t,))[1],
                                field)
    return _reaches_output(jax.make_jaxpr(tangent)(d.qvel))
  assert reached(seed_tangents, "xpos") and not reached(lambda d: d, "xpos")
  assert not reached(seed_tangents, "ctrl")   # an input: a tangent there would enter the forces


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


def _policy(params, obs):
  """A linear feedback law with a tanh, as an RL policy would be."""
  return jnp.tanh(params["w"] @ obs + params["b"])


def _policy_params(fm, scale=0.3):
  rng = np.random.default_rng(4)
  nobs = fm.nq + fm.nv + fm.na
  return {"w": jnp.asarray(scale * rng.normal(size=(fm.nu, nobs))),
          "b": jnp.asarray(scale * rng.normal(size=fm.nu))}


def test_closed_loop_equals_manual_loop():
  _, fm = _model()
  d, params = _data(fm), _policy_params(fm)
  final, traj = jax.jit(rollout, static_argnums=(2, 4))(fm, d, _policy, params, NSTEP)
  want = d
  for t in range(NSTEP):
    ctrl = _policy(params, observation(fm, want))
    want = _step(fm, want.replace(ctrl=ctrl))
    np.testing.assert_allclose(traj["ctrl"][t], ctrl, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(traj["qpos"][t], want.qpos, rtol=1e-12, atol=1e-12)
  np.testing.assert_allclose(final.qvel, want.qvel, rtol=1e-12, atol=1e-12)


# A double pendulum with a motor: checkpointing is model-agnostic, and a small model keeps the
# compile of each gradient program short.
PENDULUM_XML = """
<mujoco><option timestep="0.01"/><worldbody>
  <body><joint name="a" axis="0 1 0" damping="0.1"/><geom type="capsule" fromto="0 0 0 0 0 -0.3" size="0.03"/>
    <body pos="0 0 -0.3"><joint axis="0 1 0"/><geom type="capsule" fromto="0 0 0 0 0 -0.3" size="0.03"/></body>
  </body></worldbody>
  <actuator><motor joint="a"/></actuator></mujoco>"""


def test_policy_gradient_checkpointed_and_plain():
  """The gradient w.r.t. a policy's parameters agrees with finite differences, and with
  checkpointing every 7 steps (five checkpointed chunks and a plain tail of 5 steps) it is the
  same gradient. Memory (XLA's account of temporary buffers): a plain rollout's gradient keeps
  each step's input state (its steps are rematerialised, see ``flexor.step``) and grows with the
  horizon; a checkpointed one keeps every 7th and grows less than half as fast."""
  fm = from_mujoco(mujoco.MjModel.from_xml_string(PENDULUM_XML))
  d = make_data(fm).replace(qvel=jnp.array([1.0, -2.0]))
  params = _policy_params(fm, scale=1.0)

  def loss(params, checkpoint_every, nstep=40):
    final, traj = rollout(fm, d, _policy, params, nstep, checkpoint_every=checkpoint_every)
    return jnp.sum(jnp.sin(traj["qpos"])) + jnp.sum(final.qvel ** 2)

  def compiled_grad(k, nstep=40):
    return jax.jit(jax.grad(loss), static_argnums=(1, 2)).lower(params, k, nstep).compile()

  plain, checkpointed = compiled_grad(None), compiled_grad(7)
  want, got = plain(params), checkpointed(params)
  for name in ("w", "b"):
    np.testing.assert_allclose(got[name], want[name], rtol=1e-12, atol=1e-12)
  v = np.random.default_rng(5).normal(size=params["w"].shape)
  loss_jit = jax.jit(loss, static_argnums=1)
  f = lambda w: float(loss_jit({"w": jnp.asarray(w), "b": params["b"]}, None))
  _check_directional(f, float(np.sum(np.asarray(want["w"]) * v)), np.asarray(params["w"]), v)
  stats = [c.memory_analysis() for c in (plain, checkpointed, compiled_grad(None, 80),
                                         compiled_grad(7, 80))]
  if None not in stats:
    plain_growth = stats[2].temp_size_in_bytes - stats[0].temp_size_in_bytes
    checkpointed_growth = stats[3].temp_size_in_bytes - stats[1].temp_size_in_bytes
    assert 0 < 2 * checkpointed_growth < plain_growth, (plain_growth, checkpointed_growth)


def test_disturbance_equals_manual_loop_and_checkpoints():
  """A disturbance sequence moves the state after every step, quaternions along their tangent:
  the rollout equals a manual loop of step and perturb_state, checkpointed or not, and a zero
  disturbance changes nothing."""
  _, fm = _model()
  d = _data(fm)
  ctrl = _ctrl(fm)
  dist = 1e-3 * np.random.default_rng(3).normal(size=(NSTEP, 2 * fm.nv + fm.na))
  want = d
  for t in range(NSTEP):
    want = perturb_state(fm, _step(fm, want.replace(ctrl=ctrl[t])), dist[t])
  run = jax.jit(rollout, static_argnames=("nstep", "checkpoint_every"))
  for k in (None, 7):
    final, traj = run(fm, d, ctrl, checkpoint_every=k, disturbance=jnp.asarray(dist))
    np.testing.assert_allclose(final.qpos, want.qpos, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(traj["qvel"][-1], want.qvel, rtol=1e-12, atol=1e-12)
  plain, _ = run(fm, d, ctrl)
  zero, _ = run(fm, d, ctrl, disturbance=jnp.zeros_like(dist))
  # the two programs differ, so XLA may fuse (and round) the step differently: equal to rounding
  np.testing.assert_allclose(zero.qpos, plain.qpos, rtol=1e-13, atol=1e-14)
  with pytest.raises(ValueError, match="disturbance must have shape"):
    rollout(fm, d, ctrl, disturbance=jnp.zeros((NSTEP, 2 * fm.nv + fm.na + 1)))


def test_batch_closed_loop_with_randomised_masses():
  _, fm = _model()
  ds = [_data(fm, seed) for seed in range(2)]
  batch = jax.tree_util.tree_map(lambda *x: jnp.stack(x), *ds)
  masses = jnp.stack([fm.body_mass, 1.5 * fm.body_mass])
  params = _policy_params(fm)
  final, _ = jax.jit(batch_rollout, static_argnums=(2, 4), static_argnames="batched_params")(
      fm.replace(body_mass=masses), batch, _policy, params, NSTEP, batched_params=("body_mass",))
  for i in range(2):
    want, _ = jax.jit(rollout, static_argnums=(2, 4))(
        fm.replace(body_mass=masses[i]), ds[i], _policy, params, NSTEP)
    np.testing.assert_allclose(final.qpos[i], want.qpos, rtol=1e-12, atol=1e-12)


_SHARDED = textwrap.dedent("""
    import jax, jax.numpy as jnp, numpy as np
    jax.config.update("jax_enable_x64", True)
    import flexor
    from flexor import examples
    assert jax.local_device_count() == 4, jax.devices()
    m = flexor.load_mjcf(examples.path("arm"))
    d = flexor.make_data(m, batch_shape=(8,))
    d = d.replace(qvel=jax.random.normal(jax.random.key(0), d.qvel.shape))
    ctrl = jnp.sin(jnp.arange(8 * 30 * m.nu).reshape(8, 30, m.nu))
    mesh = flexor.batch_mesh()
    d_sharded, ctrl_sharded = flexor.shard_batch((d, ctrl))
    run = jax.jit(flexor.batch_rollout)
    want, _ = run(m, d, ctrl)
    for kwargs in ({}, {"mesh": mesh}):
      got, _ = jax.jit(flexor.batch_rollout, static_argnames="mesh")(
          m, d_sharded, ctrl_sharded, **kwargs)
      assert len(got.qpos.sharding.device_set) == 4, got.qpos.sharding
      np.testing.assert_allclose(np.asarray(got.qpos), np.asarray(want.qpos), rtol=1e-12,
                                 atol=1e-12)

    # with the mesh, each device stops its loops on its own worlds: no collective per iteration
    final_qpos = lambda ctrl, mesh: flexor.batch_rollout(m, d_sharded, ctrl, mesh=mesh)[0].qpos
    hlo = jax.jit(final_qpos, static_argnums=1).lower(ctrl_sharded, mesh).compile().as_text()
    assert "all-reduce" not in hlo and "all-gather" not in hlo
    grad = jax.jit(jax.grad(lambda ctrl, mesh: jnp.sum(final_qpos(ctrl, mesh) ** 2)),
                   static_argnums=1)
    np.testing.assert_allclose(np.asarray(grad(ctrl_sharded, mesh)),
                               np.asarray(grad(ctrl, None)), rtol=1e-10, atol=1e-12)
    try:
      flexor.shard_batch(d.qpos[:6])
    except ValueError as e:
      assert "multiple of the device count" in str(e)
    else:
      raise AssertionError("an indivisible batch was accepted")
    print("sharded ok")
""")


@pytest.mark.slow
def test_sharded_batch_equals_one_device():
  """Four host CPU devices (a flag that must be set before JAX starts, hence a subprocess)."""
  env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=4", JAX_PLATFORMS="cpu")
  out = subprocess.run([sys.executable, "-c", _SHARDED], env=env, capture_output=True, text=True,
                       timeout=300)
  assert out.returncode == 0 and "sharded ok" in out.stdout, out.stderr[-3000:]


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
  with pytest.raises(ValueError, match="a policy needs nstep"):
    rollout(fm, d, _policy, _policy_params(fm))
  with pytest.raises(ValueError, match="pass a policy"):
    rollout(fm, d, None, _policy_params(fm), 3)
  with pytest.raises(ValueError, match="positive"):
    rollout(fm, d, nstep=3, checkpoint_every=0)
  with pytest.raises(ValueError, match="shape"):
    rollout(fm, d, jnp.zeros((3, fm.nu + 1)))
  with pytest.raises(ValueError, match="does not match"):
    rollout(fm, d, jnp.zeros((3, fm.nu)), nstep=4)


_MULTIPROCESS = textwrap.dedent("""
    import sys
    import jax
    jax.config.update("jax_enable_x64", True)
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    process, port = int(sys.argv[1]), sys.argv[2]
    jax.distributed.initialize(f"localhost:{port}", num_processes=2, process_id=process)
    import jax.numpy as jnp, numpy as np
    from jax.experimental import multihost_utils
    import flexor
    from flexor import examples
    m = flexor.load_mjcf(examples.path("arm"))
    d = flexor.make_data(m, batch_shape=(8,))
    d = d.replace(qvel=jax.random.normal(jax.random.key(0), d.qvel.shape))
    mine = jax.tree_util.tree_map(lambda x: x[4 * process:4 * process + 4], d)
    final, _ = jax.jit(flexor.batch_rollout, static_argnames=("nstep", "mesh"))(
        m, flexor.shard_batch(mine), nstep=30, mesh=flexor.batch_mesh())
    assert final.qpos.shape == (8, m.nq) and len(final.qpos.sharding.device_set) == 4
    np.save(sys.argv[3], multihost_utils.process_allgather(final.qpos, tiled=True))
""")


def test_multiprocess_batch_equals_one_process(tmp_path):
  """The multi-host recipe on one host: two processes of two CPU devices each, joined by
  ``jax.distributed``, each holding half the batch."""
  import socket  # pylint: disable=import-outside-toplevel
  with socket.socket() as s:
    s.bind(("localhost", 0))
    port = s.getsockname()[1]
  env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=2", JAX_PLATFORMS="cpu")
  procs = [subprocess.Popen([sys.executable, "-c", _MULTIPROCESS, str(i), str(port),
                             str(tmp_path / f"qpos{i}.npy")], env=env, stderr=subprocess.PIPE,
                            text=True) for i in range(2)]
  errors = [p.communicate(timeout=300)[1] for p in procs]
  assert all(p.returncode == 0 for p in procs), "\n".join(e[-3000:] for e in errors)
  import flexor  # pylint: disable=import-outside-toplevel
  from flexor import examples  # pylint: disable=import-outside-toplevel
  m = flexor.load_mjcf(examples.path("arm"))
  d = make_data(m, batch_shape=(8,))
  d = d.replace(qvel=jax.random.normal(jax.random.key(0), d.qvel.shape))
  want, _ = jax.jit(batch_rollout, static_argnames="nstep")(m, d, nstep=30)
  for i in range(2):
    np.testing.assert_allclose(np.load(tmp_path / f"qpos{i}.npy"), want.qpos, rtol=1e-12,
                               atol=1e-12)


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
