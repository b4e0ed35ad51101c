"""Reinforcement-learning environments on flexor, in the shape of mujoco_playground and Brax.

An environment is a pair of pure functions over a ``State`` pytree (``data``, ``obs``,
``reward``, ``done``, ``metrics``, ``info``), usable under ``jax.jit`` and ``jax.vmap``::

  import jax
  from flexor import envs

  env = envs.make("cartpole_swingup")          # also "hopper", "muscle_arm_reach"; float32
  state = jax.jit(env.reset)(jax.random.PRNGKey(0))
  state = jax.jit(env.step)(state, jax.numpy.zeros(env.action_size))
  state.obs, state.reward, state.done          # (env.observation_size,), (), ()

  # A batch of 256 with episodes of 500 steps and auto-reset:
  train_env = envs.wrap_for_brax_training(env, episode_length=500)
  states = jax.jit(train_env.reset)(jax.random.split(jax.random.PRNGKey(0), 256))

Training with Brax's PPO (``pip install brax``; flexor itself never imports it): pass the
unwrapped environment and ``wrap_for_brax_training`` as the wrapper::

  from brax.training.agents.ppo import train as ppo

  make_policy, params, metrics = ppo.train(
      environment=envs.make("cartpole_swingup"), wrap_env_fn=envs.wrap_for_brax_training,
      num_timesteps=5_000_000, episode_length=1000, num_envs=1024, batch_size=1024,
      num_minibatches=32, unroll_length=20, learning_rate=1e-3, discounting=0.995,
      normalize_observations=True, num_evals=10,
      progress_fn=lambda step, m: print(step, m["eval/episode_reward"]))
  policy = jax.jit(make_policy(params, deterministic=True))

Brax 0.14.2 still calls ``jax.device_put_replicated``, which JAX 0.10 removed; until Brax
catches up, define it before training (one device)::

  import numpy as np
  jax.device_put_replicated = lambda x, devices: jax.pmap(
      lambda _: x, devices=devices)(np.arange(len(devices)))

New tasks subclass ``Env``: build a Model in ``__init__``, draw the first state in ``reset``
(``init_data``), and call ``apply_action`` in ``step`` (clips to ctrlrange and runs ``n_frames``
physics steps).
"""

from __future__ import annotations

from typing import Any, Callable

from flexor.envs.base import Env, State
from flexor.envs.cartpole import CartpoleSwingup
from flexor.envs.hopper import Hopper
from flexor.envs.muscle_arm import MuscleArmReach
from flexor.envs.reward import tolerance
from flexor.envs.wrappers import (AutoResetWrapper, DomainRandomizationVmapWrapper,
                                  EpisodeWrapper, VmapWrapper, Wrapper, wrap_for_brax_training)

_REGISTRY: dict[str, Callable[..., Env]] = {
    "cartpole_swingup": CartpoleSwingup,
    "hopper": Hopper,
    "muscle_arm_reach": MuscleArmReach,
}


def names() -> list[str]:
  """Names of the registered environments, sorted."""
  return sorted(_REGISTRY)


def make(name: str, **kwargs: Any) -> Env:
  """A new environment ``name``; ``kwargs`` go to its constructor (e.g. ``n_frames``, ``dtype``).

  Raises:
    ValueError: no environment of that name; the message lists the registered ones.
  """
  if name not in _REGISTRY:
    raise ValueError(f"no environment named {name!r}; choose one of: {', '.join(names())}")
  return _REGISTRY[name](**kwargs)


def register(name: str, factory: Callable[..., Env]) -> None:
  """Makes ``make(name, **kwargs)`` return ``factory(**kwargs)``."""
  _REGISTRY[name] = factory
