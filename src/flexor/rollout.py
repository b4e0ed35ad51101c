"""Rollouts: ``rollout`` scans ``step`` over time; ``batch_rollout`` and ``model_axes`` batch it.

A rollout is one ``lax.scan``, so it compiles one step whatever the horizon, and it is reverse
differentiable with respect to the initial Data, the controls and the Model's traced parameters.
"""

from __future__ import annotations

from typing import Sequence

import jax
import numpy as np

from flexor.integrate import step
from flexor.types import Data, Model

# Data fields stacked into the trajectory by default.
TRAJ_FIELDS = ("time", "qpos", "qvel", "act", "ctrl")


def rollout(m: Model, d: Data, ctrl_seq: jax.Array | None = None, *, nstep: int | None = None,
            fields: Sequence[str] = TRAJ_FIELDS) -> tuple[Data, dict[str, jax.Array]]:
  """Runs ``nstep`` steps from ``d``, setting ``ctrl = ctrl_seq[t]`` before step t.

  Args:
    m: the model.
    d: the initial Data (unbatched; use ``batch_rollout`` or ``jax.vmap`` for batches).
    ctrl_seq: optional (T, nu) controls; without it every step uses ``d.ctrl``.
    nstep: number of steps; defaults to T, and must equal T when both are given.
    fields: names of the Data fields to record.
  Returns:
    (final, traj): the Data after the last step, and a dict mapping each name in ``fields`` to
    that field after every step, stacked: ``traj["qpos"][t]`` is qpos after step t, shape
    (nstep, nq); ``traj["ctrl"][t]`` is the control applied during step t.
  """
  if ctrl_seq is not None:
    if ctrl_seq.ndim != 2 or ctrl_seq.shape[1] != m.nu:
      raise ValueError(f"ctrl_seq must have shape (T, nu={m.nu}), got {ctrl_seq.shape}; "
                       "for a batch of sequences use batch_rollout or jax.vmap")
    if nstep is not None and nstep != ctrl_seq.shape[0]:
      raise ValueError(f"nstep={nstep} does not match ctrl_seq's {ctrl_seq.shape[0]} steps; "
                       "pass one of them")
    nstep = ctrl_seq.shape[0]
  if nstep is None:
    raise ValueError("pass ctrl_seq or nstep")
  unknown = [f for f in fields if not hasattr(d, f)]
  if unknown:
    raise ValueError(f"unknown Data fields {unknown}")

  def body(d: Data, ctrl: jax.Array | None):
    if ctrl is not None:  # in the Data's dtype: float64 controls may drive a float32 model
      d = d.replace(ctrl=ctrl.astype(d.ctrl.dtype))
    d = step(m, d)
    return d, {name: getattr(d, name) for name in fields}

  with jax.named_scope("rollout"):
    return jax.lax.scan(body, d, ctrl_seq, length=nstep)


def model_axes(m: Model, names: Sequence[str] = ()) -> Model:
  """``jax.vmap`` in_axes for a Model whose traced fields in ``names`` have a leading batch axis.

  Names are field names (``"body_mass"``) or, for options, ``"opt.timestep"``. Every other leaf
  maps to None (shared by the whole batch).
  """
  wanted = set(names)

  def axis(path, _):
    name = ".".join(str(getattr(k, "name", k)) for k in path)
    if name in wanted:
      wanted.discard(name)
      return 0
    return None

  axes = jax.tree_util.tree_map_with_path(axis, m)
  if wanted:
    raise ValueError(f"no traced Model fields {sorted(wanted)}; names look like 'body_mass' or "
                     "'opt.timestep'")
  return axes


def batch_rollout(m: Model, d: Data, ctrl_seq: jax.Array | None = None, *,
                  nstep: int | None = None, fields: Sequence[str] = TRAJ_FIELDS,
                  batched_params: Sequence[str] = ()) -> tuple[Data, dict[str, jax.Array]]:
  """``rollout`` over a batch: ``jax.vmap`` over the leading axis of every Data field, of
  ``ctrl_seq`` (B, T, nu) if given, and of the Model fields named in ``batched_params``.

  Returns:
    (final, traj) with a leading batch axis (B, ...); traj fields are (B, nstep, ...).
  """
  if ctrl_seq is not None:
    if np.ndim(ctrl_seq) != 3:
      raise ValueError(f"batched ctrl_seq must have shape (B, T, nu), got {np.shape(ctrl_seq)}")
    nstep = ctrl_seq.shape[1] if nstep is None else nstep
  run = lambda m_, d_, c_: rollout(m_, d_, c_, nstep=nstep, fields=fields)
  in_axes = (model_axes(m, batched_params), 0, None if ctrl_seq is None else 0)
  return jax.vmap(run, in_axes=in_axes)(m, d, ctrl_seq)
