"""Gradient health of a rollout: where the backward pass grows, and whether it is right.

``gradient_report`` differentiates a loss of a rollout with respect to the state after every
step (one reverse pass: a zero ``disturbance`` is added after each step and the gradient taken
with respect to it), so a user sees the adjoint ``|dL/dx_t|`` step by step and the step where it
explodes, typically an impact or a stiff contact. It then checks the adjoint against central
finite differences of the same rollout at a few steps, the step of largest growth among them.
See docs/gradients.md for how to read it and what to do about what it shows.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from flexor.rollout import TRAJ_FIELDS, Observe, Policy, observation, perturb_state, rollout
from flexor.types import Data, Model

Loss = Callable[[Data, dict[str, jax.Array]], jax.Array]

# Backward growth over one step above which the summary flags the step.
_GROWTH_FLAG = 10.0
# Relative finite-difference disagreement above which the summary flags the step.
_FD_FLAG = 1e-3


@dataclasses.dataclass(frozen=True)
class GradientReport:
  """The gradient health of one rollout of T steps; every array is numpy.

  State index t = 0..T is the state after t steps (t = 0: the initial state). Gradients are in
  tangent coordinates x = (dq, dv, da) of size 2 nv + na (``flexor.rollout.perturb_state``).

  Attributes:
    loss: the loss of the unperturbed rollout.
    time: (T + 1,) s, the simulation time of each state.
    adjoint: (T + 1, 2 nv + na) ``dL/dx_t``.
    adjoint_norm: (T + 1,) ``|dL/dx_t|``.
    growth: (T,) ``|dL/dx_t| / |dL/dx_{t+1}|``, what the backward pass through step t multiplies
      the adjoint by (inf where a zero adjoint becomes non-zero, nan where both are zero).
    ctrl_grad_norm: (T,) ``|dL/dctrl_t|`` for an open-loop control sequence, else zeros.
    ncon: (T,) the contacts active during step t.
    fd_index: (k,) the state indices checked against finite differences.
    fd_autodiff: (k,) the derivative of the loss along the unit adjoint direction at each
      checked state (``|dL/dx_t|``; along a random direction where the adjoint is zero).
    fd_central: (k,) the central difference of the loss along the same direction, step ``eps``.
    fd_error: (k,) ``|autodiff - central| / max(|autodiff|, |central|)``, 0 where both are 0.
    eps: the finite-difference step in tangent coordinates.
    dtype: the simulation's floating-point type.
  """

  loss: float
  time: np.ndarray
  adjoint: np.ndarray
  adjoint_norm: np.ndarray
  growth: np.ndarray
  ctrl_grad_norm: np.ndarray
  ncon: np.ndarray
  fd_index: np.ndarray
  fd_autodiff: np.ndarray
  fd_central: np.ndarray
  fd_error: np.ndarray
  eps: float
  dtype: str

  @property
  def worst_growth_step(self) -> int:
    """The step whose backward pass grows the adjoint the most (a zero adjoint becoming
    non-zero counts as infinite growth)."""
    return int(np.nanargmax(np.where(np.isnan(self.growth), -np.inf, self.growth)))

  def summary(self, max_rows: int = 16) -> str:
    """A text table: a headline, then the finite-difference-checked states and the steps that
    grow or shrink the adjoint the most (at most ``max_rows`` rows), flagged where the growth
    exceeds 10 or the finite-difference error 1e-3."""
    nstep = self.growth.size
    w = self.worst_growth_step
    lines = [
        f"loss {self.loss:.6g} over {nstep} steps ({self.dtype}); |dL/dx_0| "
        f"{self.adjoint_norm[0]:.3g}; largest backward growth x{self.growth[w]:.3g} in step "
        f"{w} (t={self.time[w]:.4g} s, {self.ncon[w]} contacts)",
        f"finite differences (eps {self.eps:.0e}) at {self.fd_index.size} states: worst "
        f"relative error {np.max(self.fd_error, initial=0.0):.2e}",
        f"{'state':>6} {'t [s]':>9} {'|dL/dx|':>10} {'growth':>9} {'ncon':>5} {'|dL/du|':>10} "
        f"{'AD':>11} {'FD':>11} {'rel.err':>8}",
    ]
    # The steps that change the adjoint the most, growing or shrinking it.
    with np.errstate(divide="ignore"):
      change = np.nan_to_num(np.abs(np.log(self.growth)), nan=-np.inf)
    rows = set(self.fd_index.tolist())
    rows.update(np.argsort(-change)[:max(0, max_rows - len(rows))].tolist())
    fd = {int(t): k for k, t in enumerate(self.fd_index)}
    for t in sorted(rows)[:max_rows]:
      step_cols = (f"{self.growth[t]:9.3g} {self.ncon[t]:5d} {self.ctrl_grad_norm[t]:10.3g}"
                   if t < nstep else f"{'':9} {'':5} {'':10}")
      k = fd.get(t)
      fd_cols = (f"{self.fd_autodiff[k]:11.4g} {self.fd_central[k]:11.4g} {self.fd_error[k]:8.1e}"
                 if k is not None else f"{'':11} {'':11} {'':8}")
      flags = []
      if t < nstep and self.growth[t] > _GROWTH_FLAG:
        flags.append("grows")
      if k is not None and self.fd_error[k] > _FD_FLAG:
        flags.append("FD disagrees")
      lines.append(f"{t:6d} {self.time[t]:9.4g} {self.adjoint_norm[t]:10.3g} {step_cols} "
                   f"{fd_cols} {' '.join(flags)}".rstrip())
    return "\n".join(lines)

  def plot(self, ax: Any = None) -> Any:
    """Plots ``|dL/dx_t|`` against time on a log axis, with the steps in contact shaded and the
    finite-difference checks marked; needs matplotlib. Returns the axes."""
    import matplotlib.pyplot as plt  # only this method needs it

    if ax is None:
      _, ax = plt.subplots(figsize=(7, 3))
    ax.semilogy(self.time, self.adjoint_norm, label="|dL/dx_t|")
    t_step = self.time[:-1]
    ax.fill_between(t_step, 0, 1, where=self.ncon > 0, step="post", alpha=0.15,
                    transform=ax.get_xaxis_transform(), label="in contact")
    bad = self.fd_error > _FD_FLAG
    t_fd = self.time[self.fd_index]
    ax.scatter(t_fd[~bad], self.adjoint_norm[self.fd_index][~bad], marker="o", color="g",
               label="FD agrees", zorder=3)
    ax.scatter(t_fd[bad], self.adjoint_norm[self.fd_index][bad], marker="x", color="r",
               label="FD disagrees", zorder=3)
    ax.set_xlabel("time [s]")
    ax.set_ylabel("adjoint norm")
    ax.legend(fontsize="small")
    return ax


def gradient_report(m: Model, d: Data, loss: Loss, control: jax.Array | Policy | None = None,
                    params: Any = None, nstep: int | None = None, *,
                    fields: Sequence[str] = TRAJ_FIELDS, observe: Observe = observation,
                    fd_states: int | Sequence[int] = 6, eps: float | None = None,
                    seed: int = 0) -> GradientReport:
  """Reports the gradient health of ``loss(*rollout(m, d, control, params, nstep))``.

  Args:
    m, d, control, params, nstep, fields, observe: as ``flexor.rollout``.
    loss: ``loss(final, traj) -> ()``, of the final Data and the recorded trajectory.
    fd_states: the state indices (0..T) to check against finite differences, or how many,
      spread evenly from 0 to T - 1 with the step of largest backward growth added; each check
      costs two rollouts, run as one batch.
    eps: the finite-difference step in tangent coordinates; default 1e-6 in float64 and 1e-2
      in float32, where finite differences are a rough check only.
    seed: seeds the direction of checks at states whose adjoint is zero.
  Returns:
    the GradientReport; ``print(report.summary())`` shows it.
  """
  nstep = _horizon(control, nstep)
  ntangent = 2 * m.nv + m.na
  dtype = d.qvel.dtype
  eps = float(eps if eps is not None else 1e-6 if dtype == jnp.float64 else 1e-2)
  ctrl_seq = None if control is None or callable(control) else jnp.asarray(control)
  record = tuple(dict.fromkeys((*fields, "time", "ncon")))

  def run(dx: jax.Array, ctrl: jax.Array | None):
    """The loss of the rollout with the state after step t moved by ``dx[t + 1]``."""
    final, traj = rollout(m, perturb_state(m, d, dx[0]), control if ctrl is None else ctrl,
                          params, nstep, fields=record, observe=observe, disturbance=dx[1:])
    return loss(final, {k: traj[k] for k in fields}), traj

  zero = jnp.zeros((nstep + 1, ntangent), dtype)
  (value, traj), (adjoint, ctrl_grad) = jax.jit(
      jax.value_and_grad(run, argnums=(0, 1), has_aux=True))(zero, ctrl_seq)
  adjoint = np.asarray(adjoint)
  adjoint_norm = np.linalg.norm(adjoint, axis=1)
  with np.errstate(divide="ignore", invalid="ignore"):
    growth = adjoint_norm[:-1] / adjoint_norm[1:]
  ctrl_grad_norm = (np.zeros(nstep) if ctrl_grad is None
                    else np.linalg.norm(np.asarray(ctrl_grad), axis=1))

  index = _fd_index(fd_states, nstep, growth)
  direction = adjoint[index]
  scale = np.linalg.norm(direction, axis=1, keepdims=True)
  rand = np.random.default_rng(seed).standard_normal(direction.shape)
  direction = np.where(scale > 0, direction / np.where(scale > 0, scale, 1),
                       rand / np.linalg.norm(rand, axis=1, keepdims=True))
  dx = np.zeros((2, index.size, nstep + 1, ntangent))
  dx[0, np.arange(index.size), index] = eps * direction
  dx[1] = -dx[0]
  batched = jax.vmap(jax.vmap(lambda x: run(x, ctrl_seq)[0]))
  plus, minus = np.asarray(jax.jit(batched)(jnp.asarray(dx, dtype)))
  central = (plus - minus) / (2 * eps)
  autodiff = np.sum(adjoint[index] * direction, axis=1)
  denom = np.maximum(np.abs(autodiff), np.abs(central))
  error = np.where(denom > 0, np.abs(autodiff - central) / np.where(denom > 0, denom, 1), 0.0)

  time = np.concatenate([np.asarray(d.time)[None], np.asarray(traj["time"])])
  return GradientReport(
      loss=float(value), time=time, adjoint=adjoint, adjoint_norm=adjoint_norm, growth=growth,
      ctrl_grad_norm=ctrl_grad_norm, ncon=np.asarray(traj["ncon"]).astype(int),
      fd_index=index, fd_autodiff=autodiff, fd_central=central, fd_error=error, eps=eps,
      dtype=str(np.dtype(dtype)))


def _horizon(control: jax.Array | Policy | None, nstep: int | None) -> int:
  """The number of steps: ``nstep``, or the length of a control sequence."""
  if nstep is None and control is not None and not callable(control):
    nstep = int(jnp.shape(control)[0])
  if nstep is None:
    raise ValueError("pass a control sequence or nstep")
  return nstep


def _fd_index(fd_states: int | Sequence[int], nstep: int, growth: np.ndarray) -> np.ndarray:
  """The sorted state indices to check: given, or ``fd_states`` spread over 0..T-1 plus the
  step of largest backward growth."""
  if isinstance(fd_states, (int, np.integer)):
    spread = np.linspace(0, nstep - 1, max(int(fd_states), 1)).round().astype(int)
    ranked = np.nan_to_num(growth, nan=-np.inf)
    index = np.union1d(spread, [int(np.argmax(ranked))])
  else:
    index = np.unique(np.asarray(fd_states, int))
  if index.size and (index.min() < 0 or index.max() > nstep):
    raise ValueError(f"fd_states must lie in 0..{nstep}, got {index.tolist()}")
  return index
