"""Wrappers for training: batching, episode length and truncation, auto-reset.

``wrap_for_brax_training`` stacks them the way Brax's ``envs.training.wrap`` and
mujoco_playground's ``wrap_for_brax_training`` do, and keeps the ``info`` keys Brax's agents read
(``steps``, ``truncation``, ``episode_done``, ``episode_metrics``, ``first_obs``), so the result
can be handed to ``brax.training.agents.ppo.train(..., wrap_env_fn=wrap_for_brax_training)``.
None of this imports Brax.
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp

from flexor.envs.base import Env, State
from flexor.types import Model


class Wrapper(Env):
  """An environment that forwards to ``env``; attributes it lacks are looked up on ``env``."""

  def __init__(self, env: Env):  # pylint: disable=super-init-not-called
    self.env = env

  def reset(self, rng: jax.Array) -> State:
    return self.env.reset(rng)

  def step(self, state: State, action: jax.Array) -> State:
    return self.env.step(state, action)

  @property
  def model(self) -> Model:
    return self.env.model

  @property
  def n_frames(self) -> int:
    return self.env.n_frames

  @property
  def dt(self) -> jax.Array:
    return self.env.dt

  @property
  def dtype(self) -> Any:
    return self.env.dtype

  @property
  def action_size(self) -> int:
    return self.env.action_size

  @property
  def observation_size(self) -> int:
    return self.env.observation_size

  @property
  def unwrapped(self) -> Env:
    return self.env.unwrapped

  def __getattr__(self, name: str) -> Any:
    if name in ("__setstate__", "env"):  # unpickling and copying probe these before __init__
      raise AttributeError(name)
    return getattr(self.env, name)


class VmapWrapper(Wrapper):
  """``jax.vmap`` of reset and step over a leading batch axis.

  ``reset`` takes a batch of keys, (B, 2) raw or (B,) typed, or, with ``batch_size``, one key that
  it splits into that many.
  """

  def __init__(self, env: Env, batch_size: int | None = None):
    super().__init__(env)
    self.batch_size = batch_size

  def reset(self, rng: jax.Array) -> State:
    if self.batch_size is not None:
      rng = jax.random.split(rng, self.batch_size)
    return jax.vmap(self.env.reset)(rng)

  def step(self, state: State, action: jax.Array) -> State:
    return jax.vmap(self.env.step)(state, action)


class DomainRandomizationVmapWrapper(Wrapper):
  """``jax.vmap`` over environments that differ in their Model's traced parameters.

  ``randomization_fn(model)`` returns a batched Model and its ``vmap`` in_axes (a Model-shaped
  tree of 0 or None, e.g. from ``flexor.rollout.model_axes``); member i simulates the i-th Model
  through ``env.with_model``. ``env`` must be an unwrapped environment.
  """

  def __init__(self, env: Env, randomization_fn: Callable[[Model], tuple[Model, Model]]):
    super().__init__(env)
    self._model_v, self._in_axes = randomization_fn(env.model)

  def reset(self, rng: jax.Array) -> State:
    return jax.vmap(lambda m, r: self.env.with_model(m).reset(r),
                    in_axes=(self._in_axes, 0))(self._model_v, rng)

  def step(self, state: State, action: jax.Array) -> State:
    return jax.vmap(lambda m, s, a: self.env.with_model(m).step(s, a),
                    in_axes=(self._in_axes, 0, 0))(self._model_v, state, action)


class EpisodeWrapper(Wrapper):
  """Repeats each action ``action_repeat`` times and ends episodes after ``episode_length`` steps.

  Keeps in ``info``: ``steps`` (environment steps this episode, counting repeats),
  ``truncation`` (1.0 where this step ended the episode by its length alone, so a learner can
  bootstrap there instead of treating it as terminal), ``episode_done``, and
  ``episode_metrics`` (sums of the reward, the length and every metric over the current episode).
  Works batched or not.
  """

  def __init__(self, env: Env, episode_length: int, action_repeat: int = 1):
    super().__init__(env)
    self.episode_length = int(episode_length)
    self.action_repeat = int(action_repeat)

  def reset(self, rng: jax.Array) -> State:
    state = self.env.reset(rng)
    zero = jnp.zeros_like(state.reward)
    metrics = {"sum_reward": zero, "length": zero, **{k: zero for k in state.metrics}}
    info = {**state.info, "steps": zero, "truncation": zero, "episode_done": zero,
            "episode_metrics": metrics}
    return state.replace(info=info)

  def step(self, state: State, action: jax.Array) -> State:
    def repeat(s: State, _) -> tuple[State, jax.Array]:
      s = self.env.step(s, action)
      return s, s.reward

    state, rewards = jax.lax.scan(repeat, state, None, length=self.action_repeat)
    reward = jnp.sum(rewards, axis=0)
    info = dict(state.info)
    steps = info["steps"] + self.action_repeat
    timeout = steps >= self.episode_length
    done = jnp.where(timeout, 1.0, state.done).astype(state.done.dtype)
    info["truncation"] = jnp.where(timeout, 1.0 - state.done, 0.0).astype(state.done.dtype)
    info["steps"] = steps

    # Sums restart after an episode ended at the previous step (the auto-reset replaced its state).
    keep = 1.0 - info["episode_done"]
    old = info["episode_metrics"]
    metrics = {"sum_reward": old["sum_reward"] * keep + reward,
               "length": old["length"] * keep + self.action_repeat}
    # The metrics present at reset; wrappers above may add more (Brax's EvalWrapper adds reward).
    metrics.update({k: old[k] * keep + state.metrics[k] for k in old if k not in metrics})
    info["episode_metrics"] = metrics
    info["episode_done"] = done
    return state.replace(reward=reward, done=done, info=info)


class AutoResetWrapper(Wrapper):
  """Restarts an episode that is done: its next step starts from the episode's first state.

  As in Brax and mujoco_playground, the first state is the one ``reset`` returned (kept in
  ``info["first_data"]`` and ``info["first_obs"]``), so restarts reuse each environment's initial
  state rather than drawing a new one; ``reset`` again for fresh ones. A done step returns the
  first state's data and obs with that step's reward and done, so the transition is still seen.
  """

  def reset(self, rng: jax.Array) -> State:
    state = self.env.reset(rng)
    return state.replace(info={**state.info, "first_data": state.data, "first_obs": state.obs})

  def step(self, state: State, action: jax.Array) -> State:
    info = dict(state.info)
    if "steps" in info:
      info["steps"] = jnp.where(state.done > 0, jnp.zeros_like(info["steps"]), info["steps"])
    state = state.replace(done=jnp.zeros_like(state.done), info=info)
    state = self.env.step(state, action)
    done = state.done > 0

    def where_done(first: jax.Array, x: jax.Array) -> jax.Array:
      flag = jnp.reshape(done, done.shape + (1,) * (x.ndim - done.ndim))
      return jnp.where(flag, first, x)

    data = jax.tree.map(where_done, state.info["first_data"], state.data)
    obs = jax.tree.map(where_done, state.info["first_obs"], state.obs)
    return state.replace(data=data, obs=obs)


def wrap_for_brax_training(env: Env, episode_length: int = 1000, action_repeat: int = 1,
                           randomization_fn: Callable[[Model], tuple[Model, Model]] | None = None,
                           ) -> Wrapper:
  """Batches ``env`` and adds episodes and auto-reset, as Brax's training agents expect.

  Pass it as ``wrap_env_fn`` to ``brax.training.agents.ppo.train`` (or call it yourself). The
  wrapped ``reset`` takes a batch of keys; ``step`` a batch of states and (B, action_size) actions.

  Args:
    env: an unwrapped environment.
    episode_length: environment steps per episode, counting repeats.
    action_repeat: environment steps per action.
    randomization_fn: optional domain randomization (see ``DomainRandomizationVmapWrapper``);
      Brax passes it, batched to its number of environments, when ``train`` is given one.
  """
  if randomization_fn is None:
    env = VmapWrapper(env)
  else:
    env = DomainRandomizationVmapWrapper(env, randomization_fn)
  env = EpisodeWrapper(env, episode_length, action_repeat)
  return AutoResetWrapper(env)
