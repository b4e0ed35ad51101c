"""Gradients through contact, compared on three tasks in one run: flexor's three
ContactGradient modes, randomized smoothing of the exact mode, and MJX.

Each task starts where the moving body stops short of the one it must move, so every
MuJoCo-style gradient is zero there; the loss is the squared error of that body's final
position. For each method the script prints the gradient's norm at the start, the best loss
Adam reaches, the position replayed in MuJoCo C with the optimised decision variables, and the
time per gradient.

* ``block_push`` (bundled): a motorised sphere on a rail must push a free block from x = 0.5 m
  to 0.7 m in 1.5 s (150 steps); the decision variables are the 150 motor forces, from a
  constant 0.8 N (the pusher stops 7 cm short).
* ``ball_wall`` (bundled): the ball's throwing speed must move the wall by 0.2 m within 1.5 s,
  from 0.6 m/s (the ball stops 0.22 m short).
* ``finger_flick`` (bundled): the finger's 150 motor torques must flick the ball to y = 0.4 m,
  from a constant 0.1 N m (the finger never reaches the ball).

The methods:

* exact, smooth, distance: ``jax.grad`` through ``flexor.rollout`` in each mode;
* bundle: randomized smoothing (Suh et al. 2022, the zero-order estimator) of the exact loss:
  ``mean((L(u + s e) - L(u)) e) / s`` over N Gaussian perturbations e, one vmapped rollout;
* mjx: ``jax.grad`` through ``lax.scan`` over ``mujoco.mjx.step``, with one solver iteration
  (MJX's solver is a ``while_loop``, which reverse mode cannot differentiate, unless
  ``opt.iterations == 1``; its replay in MuJoCo C uses the model's own settings).

Run from the repository root: ``python benchmarks/bench_contact_gradient.py`` (float64; add
``--iterations 20 --no-mjx`` for a quick look, ``--tasks`` to choose).
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax

jax.config.update("jax_enable_x64", True)

import flexor  # pylint: disable=wrong-import-position
from flexor import demo, examples  # pylint: disable=wrong-import-position
from flexor.rollout import rollout  # pylint: disable=wrong-import-position

NSTEP = 150


@dataclasses.dataclass(frozen=True)
class Task:
  """A bundled model, what moves and where to, and how the methods are tuned for it."""

  model: str          # bundled example
  qpos: int           # the qpos address whose final value is the target's
  target: float
  start: float        # the controls' constant start (controls), or the ball's speed (m/s)
  controls: bool      # decision variables: the (NSTEP, 1) controls, else the initial qvel[0]
  rate: float         # Adam's step
  width: float        # the smooth and distance modes' width (m)
  sigma: float        # randomized smoothing's noise, in the decision variables' unit

  def u0(self) -> jax.Array:
    return jnp.full((NSTEP, 1) if self.controls else (1,), self.start, dtype=jnp.float64)

  def final_qpos(self, step: Callable[[Any, jax.Array], Any], d0: Any, u: jax.Array
                 ) -> jax.Array:
    """qpos after NSTEP steps of ``step(d, ctrl)`` from d0 with the decision variables u."""
    if self.controls:
      return jax.lax.scan(lambda d, c: (step(d, c), None), d0, u)[0].qpos
    d0 = d0.replace(qvel=d0.qvel.at[0].set(u[0]))
    return jax.lax.scan(lambda d, _: (step(d, None), None), d0, None, length=NSTEP)[0].qpos


TASKS = {
    "block_push": Task("block_push", 1, 0.7, 0.8, True, 0.3, 0.1, 2.0),
    "ball_wall": Task("ball_wall", 1, 0.2, 0.6, False, 0.05, 0.3, 0.3),
    "finger_flick": Task("finger_flick", 2, 0.4, 0.1, True, 0.02, 0.05, 0.3),
}


def flexor_loss(task: Task, mode: str, width: float | None) -> Callable[[jax.Array], jax.Array]:
  """The task's loss of its decision variables in a flexor mode."""
  m = flexor.with_contact_gradient(flexor.load_mjcf(examples.path(task.model)), mode, width)
  d0 = flexor.make_data(m)

  def loss(u: jax.Array) -> jax.Array:
    if task.controls:
      final, _ = rollout(m, d0, u, nstep=NSTEP)
    else:
      final, _ = rollout(m, d0.replace(qvel=d0.qvel.at[0].set(u[0])), None, nstep=NSTEP)
    return (final.qpos[task.qpos] - task.target)**2

  return loss


def bundle_grad(loss: Callable[[jax.Array], jax.Array], samples: int, sigma: float):
  """value_and_grad by randomized smoothing: the zero-order estimator over ``samples``
  perturbations of standard deviation ``sigma`` (N), one vmapped rollout, a fixed key per call
  count."""
  def value_and_grad(u: jax.Array, key: jax.Array):
    noise = jax.random.normal(key, (samples,) + u.shape, u.dtype)
    base = loss(u)
    values = jax.vmap(lambda e: loss(u + sigma * e))(noise)
    grad = jnp.tensordot(values - base, noise, axes=1) / (samples * sigma)
    return base, grad
  return jax.jit(value_and_grad)


def mjx_loss(task: Task) -> Callable[[jax.Array], jax.Array]:
  """The task's loss through MJX."""
  import mujoco  # pylint: disable=import-outside-toplevel
  from mujoco import mjx  # pylint: disable=import-outside-toplevel
  mm = mujoco.MjModel.from_xml_path(examples.path(task.model))
  mm.opt.iterations = 1
  mx = mjx.put_model(mm)
  d0 = mjx.make_data(mx)

  def step(d, ctrl):
    return mjx.step(mx, d if ctrl is None else d.replace(ctrl=ctrl))

  return lambda u: (task.final_qpos(step, d0, u)[task.qpos] - task.target)**2


def replay_in_mujoco(task: Task, u: np.ndarray) -> float:
  """The target's final qpos when MuJoCo C runs the decision variables u."""
  import mujoco  # pylint: disable=import-outside-toplevel
  mm = mujoco.MjModel.from_xml_path(examples.path(task.model))
  if task.controls:
    return float(demo.replay(mm, u)[-1, task.qpos])
  md = mujoco.MjData(mm)
  md.qvel[0] = u[0]
  mujoco.mj_step(mm, md, NSTEP)
  return float(md.qpos[task.qpos])


def optimise(task: Task, value_and_grad, iterations: int, key: jax.Array | None = None):
  """Adam from the start; returns (first gradient norm, best loss, its variables, s/gradient)."""
  u = task.u0()
  opt = optax.adam(task.rate)
  state = opt.init(u)
  call = (lambda u, k: value_and_grad(u, k)) if key is not None else (lambda u, k: value_and_grad(u))
  keys = jax.random.split(key if key is not None else jax.random.PRNGKey(0), iterations + 1)
  jax.block_until_ready(call(u, keys[0]))
  best, best_u, first, start = np.inf, u, None, time.perf_counter()
  for i in range(iterations):
    value, grad = call(u, keys[i])
    first = float(jnp.linalg.norm(grad)) if first is None else first
    if float(value) < best:
      best, best_u = float(value), u
    updates, state = opt.update(grad, state)
    u = optax.apply_updates(u, updates)
  elapsed = (time.perf_counter() - start) / max(iterations, 1)
  value = float(call(u, keys[-1])[0])
  if value < best:
    best, best_u = value, u
  return first, best, np.asarray(best_u), elapsed


def main(argv: list[str] | None = None) -> int:
  """Runs every method on every task and prints one table per task; returns the exit code."""
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--tasks", default=",".join(TASKS), help="comma-separated: " + ", ".join(TASKS))
  parser.add_argument("--iterations", type=int, default=60)
  parser.add_argument("--samples", type=int, default=64, help="randomized-smoothing samples")
  parser.add_argument("--no-mjx", action="store_true")
  args = parser.parse_args(argv)
  for name in args.tasks.split(","):
    task = TASKS[name]
    methods = {
        "exact": (jax.jit(jax.value_and_grad(flexor_loss(task, "exact", None))), None),
        f"smooth (width {task.width})":
            (jax.jit(jax.value_and_grad(flexor_loss(task, "smooth", task.width))), None),
        f"distance (width {task.width})":
            (jax.jit(jax.value_and_grad(flexor_loss(task, "distance", task.width))), None),
        f"bundle (N={args.samples}, s={task.sigma})":
            (bundle_grad(flexor_loss(task, "exact", None), args.samples, task.sigma),
             jax.random.PRNGKey(1)),
    }
    if not args.no_mjx:
      methods["mjx"] = (jax.jit(jax.value_and_grad(mjx_loss(task))), None)
    print(f"\n{name}: qpos[{task.qpos}] -> {task.target}, {NSTEP} steps, Adam({task.rate}) x "
          f"{args.iterations}, start {task.start}; float64, {jax.devices()[0].platform}")
    print(f"{'method':<28}{'|grad| at start':>16}{'best loss':>12}{'MuJoCo C qpos':>15}"
          f"{'compile s':>11}{'ms/grad':>9}", flush=True)
    for label, (value_and_grad, key) in methods.items():
      t0 = time.perf_counter()
      u0 = task.u0()
      jax.block_until_ready(value_and_grad(u0, key) if key is not None else value_and_grad(u0))
      compile_s = time.perf_counter() - t0
      first, best, u, per_grad = optimise(task, value_and_grad, args.iterations, key)
      print(f"{label:<28}{first:>16.3e}{best:>12.2e}{replay_in_mujoco(task, u):>15.4f}"
            f"{compile_s:>11.1f}{1e3 * per_grad:>9.1f}", flush=True)
  return 0


if __name__ == "__main__":
  raise SystemExit(main())
