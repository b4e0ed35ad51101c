"""The RL environments of ``flexor.envs``: API, transforms, wrappers, task values, Brax PPO.

The environments are float32 (their default) although the suite enables x64: their dtype is the
Model's, so every observation, reward and Data field must stay float32 here too.
"""

from __future__ import annotations

import functools
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import flexor
from flexor import envs
from flexor.envs.reward import tolerance

# Steps are compared with flexor's own steps on the same float32 inputs; summation order inside
# a scan differs from separate jitted calls by rounding only.
F32_TOL = 1e-5

_ENVS: dict[str, envs.Env] = {}


def _env(name: str) -> envs.Env:
  """One environment per name for the whole file, so jitted methods are traced once."""
  if name not in _ENVS:
    _ENVS[name] = envs.make(name)
  return _ENVS[name]


@functools.cache
def _jitted(name: str):
  env = _env(name)
  return jax.jit(env.reset), jax.jit(env.step)


# Each environment's jitted reset and step are compiled once per test group (conftest groups by
# the ``name`` parameter); the checks that compile further programs (a vmapped step, flexor's own
# step) run on every task in the slow tier and on the cheapest to compile by default.
_SLOW_BUT_CARTPOLE = [pytest.param(n, marks=() if n == "cartpole_swingup" else pytest.mark.slow)
                      for n in envs.names()]


def _tree_equal(a, b) -> bool:
  return all(jax.tree.leaves(jax.tree.map(lambda x, y: bool(jnp.array_equal(x, y)), a, b)))


def test_registry():
  assert envs.names() == ["cartpole_swingup", "hopper", "muscle_arm_reach"]
  with pytest.raises(ValueError, match="cartpole_swingup"):
    envs.make("no_such_env")
  assert {"cartpole", "hopper"} <= set(flexor.examples.names())


@pytest.mark.parametrize("name", envs.names())
def test_reset_step_shapes_and_dtypes(name: str):
  env = _env(name)
  reset, step = _jitted(name)
  state = reset(jax.random.PRNGKey(0))
  assert state.obs.shape == (env.observation_size,)
  assert state.reward.shape == state.done.shape == ()
  state = step(state, jnp.zeros(env.action_size, jnp.float32))
  assert state.obs.shape == (env.observation_size,)
  leaves = (state.obs, state.reward, state.done, state.metrics, state.data.qpos)
  for leaf in jax.tree.leaves(leaves):
    assert leaf.dtype == jnp.float32
  assert set(state.metrics) == set(reset(jax.random.PRNGKey(1)).metrics)
  assert np.isfinite(state.obs).all() and np.isfinite(state.reward)


@pytest.mark.parametrize("name", _SLOW_BUT_CARTPOLE)
def test_step_is_n_frames_physics_steps_with_clipped_ctrl(name: str):
  env = _env(name)
  reset, step = _jitted(name)
  state = reset(jax.random.PRNGKey(2))
  lo, hi = np.asarray(env.model.actuator_ctrlrange).T
  # Actions from one range width below the range to one above: the outer ones get clipped.
  action = (lo + hi) / 2 + (hi - lo) * np.linspace(-1.0, 1.0, env.action_size)
  action = jnp.asarray(action, jnp.float32)
  new = step(state, action)
  expected = state.data.replace(ctrl=jnp.clip(action, lo, hi).astype(jnp.float32))
  physics = jax.jit(flexor.step)
  for _ in range(env.n_frames):
    expected = physics(env.model, expected)
  np.testing.assert_allclose(new.data.ctrl, np.clip(np.asarray(action), lo, hi))
  for field in ("qpos", "qvel", "act", "time"):
    np.testing.assert_allclose(getattr(new.data, field), getattr(expected, field), rtol=F32_TOL,
                               atol=F32_TOL, err_msg=field)
  assert float(env.dt) == pytest.approx(env.n_frames * float(env.model.opt.timestep))


@pytest.mark.parametrize("name", _SLOW_BUT_CARTPOLE)
def test_deterministic_and_vmap_matches_loop(name: str):
  env = _env(name)
  reset, step = _jitted(name)
  keys = jax.random.split(jax.random.PRNGKey(3), 3)
  assert _tree_equal(reset(keys[0]), reset(keys[0]))
  assert not np.array_equal(reset(keys[0]).obs, reset(keys[1]).obs)
  actions = jnp.asarray(np.random.default_rng(0).uniform(-1, 1, (3, env.action_size)), jnp.float32)
  batch = jax.jit(jax.vmap(env.step))(jax.jit(jax.vmap(env.reset))(keys), actions)
  for i in range(3):
    single = step(reset(keys[i]), actions[i])
    np.testing.assert_allclose(batch.obs[i], single.obs, rtol=F32_TOL, atol=F32_TOL)
    np.testing.assert_allclose(batch.reward[i], single.reward, rtol=F32_TOL, atol=F32_TOL)


def test_tolerance():
  x = jnp.array([-3.0, -2.0, 0.0, 0.5, 1.0, 2.0])
  np.testing.assert_allclose(tolerance(x, bounds=(0.0, 1.0)), [0, 0, 1, 1, 1, 0])
  # Gaussian: value_at_margin at one margin outside, exp(-(d s)^2/2) in between.
  g = tolerance(x, margin=2.0)
  np.testing.assert_allclose(np.asarray(g)[[1, 2, 5]], [0.1, 1.0, 0.1], rtol=1e-12)
  np.testing.assert_allclose(g[3], 0.1 ** (0.25 ** 2), rtol=1e-12)
  # Quadratic with value 0 at the margin: 1 - d^2 inside, 0 beyond.
  q = tolerance(x, margin=2.0, sigmoid="quadratic", value_at_margin=0.0)
  np.testing.assert_allclose(q, [0, 0, 1, 1 - 0.25 ** 2, 0.75, 0], atol=1e-12)
  with pytest.raises(ValueError, match="value_at_margin"):
    tolerance(x, margin=1.0, value_at_margin=0.0)


def _at(state: envs.State, qpos, qvel) -> envs.State:
  """``state`` moved to the given coordinates; a step recomputes everything derived from them."""
  data = state.data.replace(qpos=jnp.asarray(qpos, jnp.float32),
                            qvel=jnp.asarray(qvel, jnp.float32))
  return state.replace(data=data)


@pytest.mark.parametrize("name", ["cartpole_swingup"])
def test_cartpole_values_on_known_state(name: str):
  env = _env(name)
  reset, step = _jitted(name)
  state = reset(jax.random.PRNGKey(0))
  # The pole starts hanging down, near the rail's centre.
  assert abs(float(state.data.qpos[1]) - np.pi) < 0.05 and abs(float(state.data.qpos[0])) < 0.05
  # Upright, centered, at rest, no control: every factor is 1 up to one 10 ms step of gravity.
  up = step(_at(state, [0, 0], [0, 0]), jnp.zeros(1, jnp.float32))
  np.testing.assert_allclose(up.obs, [0, 1, 0, 0, 0], atol=1e-3)
  assert float(up.reward) == pytest.approx(1.0, abs=1e-4)
  # Pole horizontal, cart 2 m off (one margin), full control, pole at 5 rad/s (one margin):
  # upright 1/2, centered (1 + 0.1)/2, control 4/5, velocity (1 + 0.1)/2.
  terms = env._reward_terms(_at(state, [2.0, np.pi / 2], [0.0, 5.0]).data.replace(
      ctrl=jnp.ones(1, jnp.float32)))
  expected = {"upright": 0.5, "centered": 0.55, "small_control": 0.8, "small_velocity": 0.55}
  for k, v in expected.items():
    assert float(terms[k]) == pytest.approx(v, abs=1e-5), k


@pytest.mark.parametrize("name", ["hopper"])
def test_hopper_values_on_known_state(name: str):
  env = _env(name)
  reset, step = _jitted(name)
  state = reset(jax.random.PRNGKey(0))
  np.testing.assert_allclose(state.obs[:5], [1.25, 0, 0, 0, 0], atol=5e-3)
  assert float(state.done) == 0.0
  # Moving forward at 1 m/s, standing tall, no control: reward = velocity + healthy bonus.
  qpos0 = np.asarray(env.model.qpos0)
  nxt = step(_at(state, qpos0, [1.0, 0, 0, 0, 0, 0]), jnp.zeros(3, jnp.float32))
  velocity = float(nxt.data.qpos[0]) / float(env.dt)
  assert velocity == pytest.approx(1.0, abs=0.05)
  assert float(nxt.reward) == pytest.approx(velocity + 1.0, abs=1e-5)
  assert float(nxt.done) == 0.0
  np.testing.assert_allclose(nxt.obs[:5], nxt.data.qpos[1:])
  # Tilted beyond the healthy pitch: done, and no healthy bonus.
  tilted = qpos0.copy()
  tilted[2] = 0.5
  fallen = step(_at(state, tilted, np.zeros(6)), jnp.zeros(3, jnp.float32))
  assert float(fallen.done) == 1.0 and float(fallen.metrics["healthy_reward"]) == 0.0
  # Random torques: it falls onto the floor, and the contacts hold it up without NaN.
  rng = np.random.default_rng(1)
  for _ in range(25):
    state = step(state, jnp.asarray(rng.uniform(-1, 1, 3), jnp.float32))
    assert np.isfinite(state.data.qpos).all() and not bool(state.data.warning_nan)
  assert float(jnp.min(state.data.geom_xpos[1:, 2])) > -0.1


@pytest.mark.parametrize("name", ["muscle_arm_reach"])
def test_muscle_arm_values_on_known_state(name: str):
  env = _env(name)
  reset, step = _jitted(name)
  state = reset(jax.random.PRNGKey(0))
  target = state.info["target"]
  assert float(jnp.linalg.norm(target[:2])) <= 1.0 + 1e-6 and float(target[2]) == 0.0
  np.testing.assert_allclose(state.obs[10:12], env.hand(state.data)[:2], atol=1e-6)
  # Straight arm along x with the target at the hand, (1, 0): the reward is the distance moved
  # in one step plus the effort, here all six excitations at 1 (the action 2 is clipped).
  known = _at(state, [0, 0], [0, 0]).replace(info={"target": jnp.array([1.0, 0, 0], jnp.float32)})
  nxt = step(known, jnp.full(6, 2.0, jnp.float32))
  np.testing.assert_allclose(nxt.data.ctrl, np.ones(6))
  hand = env.hand(nxt.data)
  distance = float(jnp.linalg.norm(nxt.info["target"] - hand))
  assert distance < 0.05
  assert float(nxt.reward) == pytest.approx(-distance - 0.06, abs=1e-5)
  np.testing.assert_allclose(nxt.obs[10:12], hand[:2], atol=1e-6)
  np.testing.assert_allclose(nxt.obs[14:16], np.array([1.0, 0.0]) - np.asarray(hand[:2]), atol=1e-6)
  assert (np.asarray(nxt.obs[4:10]) > 0).all()   # excited muscles activate


class _Counter(envs.Env):
  """A stand-in task: obs counts steps, done after 3 of them; for the wrappers' bookkeeping."""

  def __init__(self):
    super().__init__(_env("cartpole_swingup").model)

  def reset(self, rng: jax.Array) -> envs.State:
    zero = jnp.zeros((), jnp.float32)
    data = flexor.make_data(self.model)
    return envs.State(data=data, obs=jnp.zeros(1, jnp.float32), reward=zero, done=zero,
                      metrics={"count": zero}, info={})

  def step(self, state: envs.State, action: jax.Array) -> envs.State:
    obs = state.obs + 1.0
    return state.replace(obs=obs, reward=jnp.ones((), jnp.float32), done=(obs[0] >= 3).astype(
        jnp.float32), metrics={"count": obs[0]})


def test_episode_truncation_and_auto_reset():
  env = envs.wrap_for_brax_training(_Counter(), episode_length=5)
  assert env.action_size == 1 and env.observation_size == 1
  state = jax.jit(env.reset)(jax.random.split(jax.random.PRNGKey(0), 2))
  step = jax.jit(env.step)
  obs, done, trunc = [], [], []
  for _ in range(7):
    state = step(state, jnp.zeros((2, 1)))
    obs.append(float(state.obs[0, 0]))
    done.append(float(state.done[0]))
    trunc.append(float(state.info["truncation"][0]))
  # Done (terminated) at the 3rd step: the returned obs is the first obs again, and counting
  # restarts; the 5-step limit is never reached before termination.
  assert obs == [1, 2, 0, 1, 2, 0, 1]
  assert done == [0, 0, 1, 0, 0, 1, 0]
  assert trunc == [0.0] * 7
  np.testing.assert_allclose(state.info["episode_metrics"]["sum_reward"], [1, 1])

  long = envs.wrap_for_brax_training(_Counter(), episode_length=2, action_repeat=1)
  s = jax.jit(long.reset)(jax.random.split(jax.random.PRNGKey(0), 1))
  long_step = jax.jit(long.step)
  s = long_step(long_step(s, jnp.zeros((1, 1))), jnp.zeros((1, 1)))
  # The length limit ended it before the task did: done and truncated, then restarted.
  assert float(s.done[0]) == 1.0 and float(s.info["truncation"][0]) == 1.0
  assert float(s.obs[0, 0]) == 0.0 and float(s.info["episode_metrics"]["sum_reward"][0]) == 2.0


def test_action_repeat_sums_rewards():
  env = envs.wrap_for_brax_training(_Counter(), episode_length=10, action_repeat=2)
  state = jax.jit(env.reset)(jax.random.split(jax.random.PRNGKey(0), 1))
  state = jax.jit(env.step)(state, jnp.zeros((1, 1)))
  assert float(state.reward[0]) == 2.0 and float(state.info["steps"][0]) == 2.0


def test_brax_ppo_improves_cartpole_swingup(monkeypatch):
  """Brax's PPO, unchanged, trains cartpole_swingup: the mean return of the training episodes
  rises several-fold within 20k environment steps.

  Brax logs the returns of the episodes its rollouts complete every ``training_metrics_steps``
  (a mean over its last 100). Brax's separate evaluations are left out: each compiles its own
  copy of the physics, and with JAX 0.10 the eval after training compiles a second one, which
  would double the test's time.
  """
  ppo = pytest.importorskip("brax.training.agents.ppo.train")
  networks = pytest.importorskip("brax.training.agents.ppo.networks")
  # Brax 0.14.2 still calls jax.device_put_replicated, which JAX 0.10 removed: restore it for
  # this test (one device: a stacked copy, laid out as pmap lays out its outputs).
  if not hasattr(jax, "device_put_replicated"):
    replicate = lambda x, devices: jax.pmap(lambda _: x, devices=devices)(np.arange(len(devices)))
    monkeypatch.setattr(jax, "device_put_replicated", replicate, raising=False)
  returns: list[float] = []

  def progress(_, metrics: dict) -> None:
    if "episode/sum_reward" in metrics:
      returns.append(float(metrics["episode/sum_reward"]))

  start = time.time()
  # PPO's own arithmetic is Brax's: run it in float32 with numpy-style broadcasting, as Brax is
  # written for; the environment is float32 either way.
  with jax.enable_x64(False), jax.numpy_rank_promotion("allow"):
    ppo.train(
        environment=envs.make("cartpole_swingup", n_frames=2),
        wrap_env_fn=envs.wrap_for_brax_training, num_timesteps=20_000, episode_length=100,
        num_envs=32, batch_size=32, num_minibatches=4, unroll_length=10, num_updates_per_batch=4,
        learning_rate=3e-3, discounting=0.97, entropy_cost=1e-2, normalize_observations=True,
        num_evals=2, run_evals=False, log_training_metrics=True, training_metrics_steps=2560,
        seed=0, progress_fn=progress,
        network_factory=functools.partial(networks.make_ppo_networks,
                                          policy_hidden_layer_sizes=(32, 32),
                                          value_hidden_layer_sizes=(32, 32)))
  print(f"PPO cartpole_swingup training returns {np.round(returns, 2)}, "
        f"{time.time() - start:.0f} s")
  assert len(returns) >= 4, returns
  # The untrained policy collects ~1 per 100-step episode (the pole hangs down).
  assert returns[-1] > 4.0 * returns[0] and returns[-1] > 5.0, returns
