"""``cartpole_swingup``: swing the pole of the bundled ``cartpole`` up and balance it.

After dm_control's ``cartpole.swingup``: the pole starts hanging down, and the reward is smooth,
in [0, 1], the product of being upright, centered, using little control and moving the pole
slowly. Episodes never terminate early; their length is the wrapper's (``EpisodeWrapper``).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from flexor import examples
from flexor.envs.base import Env, State
from flexor.envs.reward import tolerance
from flexor.io import load_mjcf
from flexor.types import Data


class CartpoleSwingup(Env):
  """Cart-pole swing-up on ``examples/cartpole.xml``.

  State: qpos = (cart position in m, pole angle in rad, 0 = up), qvel likewise.
  Observation, (5,): cart position, cos and sin of the pole angle, cart velocity, pole angular
  velocity. Action, (1,): the motor's control in [-1, 1] (10 N per unit).
  Reward: ``upright * centered * small_control * small_velocity``, each in [0, 1]:
  upright = (cos(angle) + 1) / 2; centered = (1 + tolerance(x, margin=2)) / 2;
  small_control = (4 + tolerance(ctrl, margin=1, quadratic, value_at_margin=0)) / 5;
  small_velocity = (1 + tolerance(angular velocity, margin=5)) / 2.
  """

  def __init__(self, n_frames: int = 1, dtype=jnp.float32):
    """
    Args:
      n_frames: physics steps (of 10 ms) per environment step.
      dtype: float dtype of the model and observations.
    """
    super().__init__(load_mjcf(examples.path("cartpole"), dtype=dtype), n_frames)

  def reset(self, rng: jax.Array) -> State:
    """Pole down (angle pi) and the cart at the centre, each coordinate and velocity perturbed by
    Gaussian noise of standard deviation 0.01."""
    key_q, key_v = jax.random.split(rng)
    down = jnp.asarray(np.array([0.0, np.pi]), dtype=self.dtype)
    qpos = down + 0.01 * jax.random.normal(key_q, (2,), dtype=self.dtype)
    qvel = 0.01 * jax.random.normal(key_v, (2,), dtype=self.dtype)
    data = self.init_data(qpos, qvel)
    zero = jnp.zeros((), self.dtype)
    metrics = {"upright": zero, "centered": zero, "small_control": zero, "small_velocity": zero}
    return State(data=data, obs=self._obs(data), reward=zero, done=zero, metrics=metrics, info={})

  def step(self, state: State, action: jax.Array) -> State:
    data = self.apply_action(state.data, action)
    terms = self._reward_terms(data)
    reward = terms["upright"] * terms["centered"] * terms["small_control"] * terms["small_velocity"]
    return state.replace(data=data, obs=self._obs(data), reward=reward,
                         metrics={**state.metrics, **terms})

  def _obs(self, data: Data) -> jax.Array:
    angle = data.qpos[1]
    return jnp.stack([data.qpos[0], jnp.cos(angle), jnp.sin(angle), data.qvel[0], data.qvel[1]])

  def _reward_terms(self, data: Data) -> dict[str, jax.Array]:
    """The four factors of the reward at ``data`` (with its clipped ``ctrl``), each ()."""
    upright = (jnp.cos(data.qpos[1]) + 1.0) / 2.0
    centered = (1.0 + tolerance(data.qpos[0], margin=2.0)) / 2.0
    small_control = (4.0 + tolerance(data.ctrl[0], margin=1.0, sigmoid="quadratic",
                                     value_at_margin=0.0)) / 5.0
    small_velocity = (1.0 + tolerance(data.qvel[1], margin=5.0)) / 2.0
    return {"upright": upright, "centered": centered, "small_control": small_control,
            "small_velocity": small_velocity}
