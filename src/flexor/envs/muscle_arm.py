"""``muscle_arm_reach``: bring the hand of the bundled six-muscle ``muscle_arm`` to a target.

The arm is planar (hinges about z), its joints limited to [0, 120] degrees. Each episode draws
a start posture and a target, both reachable: the target is where the hand would be at another
random posture. The model has no site at the hand, so its position is computed from the
forearm's frame (the forearm capsule ends 0.5 m along its x axis); the XML is not changed.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from flexor import examples
from flexor.envs.base import Env, State
from flexor.io import load_mjcf
from flexor.kinematics import kinematics
from flexor.types import Data, make_data

# The hand in the forearm's frame, m: the far end of the forearm capsule (fromto 0 0 0 0.5 0 0).
_HAND_LOCAL = np.array([0.5, 0.0, 0.0])


class MuscleArmReach(Env):
  """Reaching with ``examples/muscle_arm.xml``: six muscles on wrapping tendons.

  Observation, (16,): qpos (2, rad), qvel (2, rad/s), muscle activations (6), hand position
  (x, y in m), target position (x, y), target - hand (x, y).
  Action, (6,): muscle excitations, clipped to [0, 1].
  Reward: ``-|target - hand| - effort_cost * |ctrl|^2``; episodes never terminate early.
  ``info["target"]`` holds the target, (3,).
  """

  def __init__(self, n_frames: int = 4, dtype=jnp.float32, effort_cost: float = 0.01):
    """
    Args:
      n_frames: physics steps (of 5 ms) per environment step.
      dtype: float dtype of the model and observations.
      effort_cost: cost per squared unit of excitation.
    """
    model = load_mjcf(examples.path("muscle_arm"), dtype=dtype)
    super().__init__(model, n_frames)
    self._forearm = model.name2id("body", "forearm")
    self._effort_cost = effort_cost

  def hand(self, data: Data) -> jax.Array:
    """(3,) the hand's position in m at ``data``'s frames (xpos, xmat of the forearm)."""
    hand_local = jnp.asarray(_HAND_LOCAL, self.dtype)
    return data.xpos[self._forearm] + data.xmat[self._forearm] @ hand_local

  def reset(self, rng: jax.Array) -> State:
    """Start posture and target posture uniform over the joint ranges; zero velocity and
    activation."""
    m = self.model
    key_start, key_target = jax.random.split(rng)
    lo, hi = m.jnt_range[:, 0], m.jnt_range[:, 1]
    start = jax.random.uniform(key_start, (m.nq,), self.dtype, lo, hi)
    goal = jax.random.uniform(key_target, (m.nq,), self.dtype, lo, hi)
    target = self.hand(kinematics(m, make_data(m).replace(qpos=goal)))
    data = self.init_data(start, jnp.zeros(m.nv, self.dtype))
    zero = jnp.zeros((), self.dtype)
    metrics = {"distance": zero, "effort": zero}
    info = {"target": target}
    return State(data=data, obs=self._obs(data, target), reward=zero, done=zero, metrics=metrics,
                 info=info)

  def step(self, state: State, action: jax.Array) -> State:
    data = self.apply_action(state.data, action)
    # A step leaves the frames of the state before its last integration: refresh them, so the
    # observation and the reward describe the posture reached.
    data = kinematics(self.model, data)
    target = state.info["target"]
    distance = jnp.linalg.norm(target - self.hand(data))
    effort = self._effort_cost * jnp.sum(data.ctrl ** 2)
    return state.replace(data=data, obs=self._obs(data, target), reward=-distance - effort,
                         metrics={**state.metrics, "distance": distance, "effort": effort})

  def _obs(self, data: Data, target: jax.Array) -> jax.Array:
    hand = self.hand(data)
    return jnp.concatenate([data.qpos, data.qvel, data.act, hand[:2], target[:2],
                            target[:2] - hand[:2]])
