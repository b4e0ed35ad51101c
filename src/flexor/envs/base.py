"""The functional environment API: ``State`` and the ``Env`` base class.

An environment is a pair of pure functions, ``reset(rng) -> State`` and ``step(state, action) ->
State``, in the shape of mujoco_playground's ``MjxEnv``: they work under ``jax.jit`` and
``jax.vmap`` and hold no mutable state, so a batch of environments is a ``vmap`` and a rollout a
``lax.scan``. An environment owns a flexor Model and advances it by ``n_frames`` physics steps per
environment step, so its control interval is ``dt = n_frames * opt.timestep``.
"""

from __future__ import annotations

import abc
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from flexor.forward import forward
from flexor.integrate import step as physics_step
from flexor.types import Data, Model, make_data


@struct.dataclass
class State:
  """One environment's state (or a batch's, with a leading batch axis on every leaf).

  Attributes:
    data: the simulator's Data after the last physics step (after ``forward`` at reset).
    obs: (observation_size,) the observation of ``data``.
    reward: () the reward of the step that led here (0 after reset).
    done: () 1.0 if the episode ended at this step (the task's termination), else 0.0; a float,
      as Brax's agents expect.
    metrics: named scalars of the step (reward terms), summed over episodes by the wrappers.
    info: named arrays a task or wrapper carries from step to step; every key present after
      ``reset`` stays present, so a State is a fixed pytree for ``lax.scan``.
  """

  data: Data
  obs: jax.Array
  reward: jax.Array
  done: jax.Array
  metrics: dict[str, jax.Array] = struct.field(default_factory=dict)
  info: dict[str, Any] = struct.field(default_factory=dict)


class Env(abc.ABC):
  """An environment over a flexor Model; subclasses define ``reset`` and ``step``.

  Actions are controls in the units of ``actuator_ctrlrange``: ``apply_action`` clips them to it
  (for actuators with ``ctrllimited``), sets ``ctrl`` and runs ``n_frames`` physics steps.
  The Model's dtype is the environment's: float32 is the usual choice for RL (and the default of
  the bundled tasks), whatever ``jax_enable_x64`` says; actions of another dtype are cast to it.
  """

  def __init__(self, model: Model, n_frames: int = 1):
    """
    Args:
      model: the compiled model; its traced fields may be swapped later (``with_model``).
      n_frames: physics steps per environment step, >= 1.
    """
    if n_frames < 1:
      raise ValueError(f"n_frames must be at least 1, got {n_frames}")
    self._model = model
    self._n_frames = int(n_frames)

  @abc.abstractmethod
  def reset(self, rng: jax.Array) -> State:
    """A new episode's state, drawn with the PRNG key ``rng`` (raw uint32 (2,) or typed ())."""

  @abc.abstractmethod
  def step(self, state: State, action: jax.Array) -> State:
    """The state after applying ``action``, (action_size,), for ``dt`` seconds."""

  @property
  def model(self) -> Model:
    return self._model

  @property
  def n_frames(self) -> int:
    return self._n_frames

  @property
  def dt(self) -> jax.Array:
    """() seconds of simulated time per environment step."""
    return self._model.opt.timestep * self._n_frames

  @property
  def dtype(self) -> Any:
    """The float dtype of the Model, its Data and the observations."""
    return self._model.body_mass.dtype

  @property
  def action_size(self) -> int:
    return self._model.nu

  @property
  def observation_size(self) -> int:
    """Length of ``obs``, found by tracing ``reset`` abstractly (nothing is computed)."""
    return jax.eval_shape(self.reset, jax.random.PRNGKey(0)).obs.shape[-1]

  @property
  def unwrapped(self) -> Env:
    return self

  def init_data(self, qpos: jax.Array, qvel: jax.Array, act: jax.Array | None = None) -> Data:
    """Data at the given state with zero controls, after ``forward`` (frames, forces, qacc).

    Args:
      qpos: (nq,) positions.
      qvel: (nv,) velocities.
      act: optional (na,) activations; zeros if omitted.
    """
    data = make_data(self._model).replace(qpos=qpos.astype(self.dtype),
                                          qvel=qvel.astype(self.dtype))
    if act is not None:
      data = data.replace(act=act.astype(self.dtype))
    return forward(self._model, data)

  def apply_action(self, data: Data, action: jax.Array) -> Data:
    """Sets ``ctrl`` to ``action`` clipped to the control range, then runs ``n_frames`` steps.

    Args:
      data: the current Data.
      action: (nu,) controls, any float dtype.
    Returns:
      the Data after the last physics step (``ctrl`` holds the clipped action).
    """
    m = self._model
    action = jnp.asarray(action).astype(self.dtype)
    limited = np.asarray(m.actuator_ctrllimited, dtype=bool)
    lo, hi = m.actuator_ctrlrange[:, 0], m.actuator_ctrlrange[:, 1]
    ctrl = jnp.where(limited, jnp.clip(action, lo, hi), action)
    data = data.replace(ctrl=ctrl)

    def frame(d: Data, _) -> tuple[Data, None]:
      return physics_step(m, d), None

    # One scan keeps a single copy of the physics step in the compiled program.
    data, _ = jax.lax.scan(frame, data, None, length=self._n_frames)
    return data

  def with_model(self, model: Model) -> Env:
    """A shallow copy of this environment simulating ``model`` (same structure, new parameters),
    e.g. one member of a domain-randomized batch."""
    env = object.__new__(type(self))
    env.__dict__.update(self.__dict__)
    env._model = model
    return env
