"""``hopper``: make the bundled planar ``hopper`` hop forward without falling.

After gym's ``Hopper``: the reward is the forward velocity plus a bonus for staying healthy,
minus a control cost, and the episode terminates when the hopper falls (torso too low or
tilted too far) or its state leaves a sane range.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from flexor import examples
from flexor.envs.base import Env, State
from flexor.io import load_mjcf
from flexor.types import Data


class Hopper(Env):
  """Planar hopper on ``examples/hopper.xml`` (contacts with the floor, joint limits).

  State: qpos = (x in m, torso height z in m, torso pitch in rad, thigh, leg, foot angles in rad),
  qvel likewise. Observation, (11,): qpos without x, and qvel clipped to +-10.
  Action, (3,): motor controls in [-1, 1] (200 N m per unit).
  Reward: ``forward_weight * vx + healthy_reward - ctrl_cost * |ctrl|^2``, vx = the torso's x
  displacement over the step / dt. Healthy: z > ``min_height``, |pitch| < ``max_pitch`` and every
  coordinate but x and every velocity within +-100; ``done`` when not.
  """

  def __init__(self, n_frames: int = 4, dtype=jnp.float32, forward_weight: float = 1.0,
               healthy_reward: float = 1.0, ctrl_cost: float = 1e-3, min_height: float = 0.7,
               max_pitch: float = 0.2, reset_noise: float = 5e-3):
    """
    Args:
      n_frames: physics steps (of 5 ms) per environment step.
      dtype: float dtype of the model and observations.
      forward_weight: reward per m/s of forward velocity.
      healthy_reward: reward per step while healthy.
      ctrl_cost: cost per squared unit of control.
      min_height: m, the torso height below which the hopper has fallen.
      max_pitch: rad, the torso pitch beyond which the hopper has fallen.
      reset_noise: half-width of the uniform noise added to qpos0 and zero qvel at reset.
    """
    super().__init__(load_mjcf(examples.path("hopper"), dtype=dtype), n_frames)
    self._forward_weight = forward_weight
    self._healthy_reward = healthy_reward
    self._ctrl_cost = ctrl_cost
    self._min_height = min_height
    self._max_pitch = max_pitch
    self._reset_noise = reset_noise

  def reset(self, rng: jax.Array) -> State:
    m, a = self.model, self._reset_noise
    key_q, key_v = jax.random.split(rng)
    qpos = m.qpos0 + jax.random.uniform(key_q, (m.nq,), self.dtype, -a, a)
    qvel = jax.random.uniform(key_v, (m.nv,), self.dtype, -a, a)
    data = self.init_data(qpos, qvel)
    zero = jnp.zeros((), self.dtype)
    metrics = {"forward_reward": zero, "healthy_reward": zero, "ctrl_cost": zero,
               "x_position": zero}
    return State(data=data, obs=self._obs(data), reward=zero, done=zero, metrics=metrics, info={})

  def step(self, state: State, action: jax.Array) -> State:
    data = self.apply_action(state.data, action)
    velocity = (data.qpos[0] - state.data.qpos[0]) / self.dt
    healthy = self._healthy(data)
    terms = {"forward_reward": self._forward_weight * velocity,
             "healthy_reward": self._healthy_reward * healthy.astype(self.dtype),
             "ctrl_cost": self._ctrl_cost * jnp.sum(data.ctrl ** 2),
             "x_position": data.qpos[0]}
    reward = terms["forward_reward"] + terms["healthy_reward"] - terms["ctrl_cost"]
    done = (~healthy).astype(self.dtype)
    return state.replace(data=data, obs=self._obs(data), reward=reward, done=done,
                         metrics={**state.metrics, **terms})

  def _healthy(self, data: Data) -> jax.Array:
    """() bool: upright, high enough, and with a finite state of sane size."""
    state = jnp.concatenate([data.qpos[1:], data.qvel])
    sane = jnp.all(jnp.abs(state) < 100.0)  # False for NaN too
    return sane & (data.qpos[1] > self._min_height) & (jnp.abs(data.qpos[2]) < self._max_pitch)

  def _obs(self, data: Data) -> jax.Array:
    return jnp.concatenate([data.qpos[1:], jnp.clip(data.qvel, -10.0, 10.0)])
