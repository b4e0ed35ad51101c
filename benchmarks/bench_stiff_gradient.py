"""How far a gradient through stiff contact is from the flow's, at a fixed step and with
adaptive substeps, measured in one run.

The scene is the bundled ``ball_wall`` (zero gravity, 10 ms step; the contact's time constant,
0.02 s, is refsafe's floor of two steps): the ball is thrown at the wall at ``--speed`` m/s, and
the quantity is d(wall's position after ``--horizon`` s)/d(throwing speed). The reference is the
flow's: central differences of MuJoCo C (Euler) at a 1000x finer step, where the constraint model
is the same (the floor, 2 * 0.01 ms, no longer binds). Then, each with its value, its relative
error against the reference, its compile time and its time per gradient:

* flexor, Euler at 10 ms and 1 ms: ``jax.grad`` through ``flexor.rollout`` (the exact derivative
  of the discrete map);
* flexor, adaptive substeps (``flexor.with_adaptive_integration``) at three tolerances;
* MJX at 10 ms: ``jax.jacfwd`` through ``lax.scan`` over ``mujoco.mjx.step`` at MJX's default
  solver settings (forward mode differentiates its ``while_loop`` solver, reverse mode cannot);
* MuJoCo C at 10 ms: central differences.

Run from the repository root: ``python benchmarks/bench_stiff_gradient.py`` (float64).
"""

from __future__ import annotations

import argparse
import time
from typing import Callable

import jax
import mujoco
import numpy as np

jax.config.update("jax_enable_x64", True)

import flexor  # pylint: disable=wrong-import-position
from flexor import examples  # pylint: disable=wrong-import-position
from flexor.rollout import rollout  # pylint: disable=wrong-import-position


def mujoco_wall(timestep: float, horizon: float) -> Callable[[float], float]:
  """The wall's final position in MuJoCo C as a function of the throwing speed."""
  m = mujoco.MjModel.from_xml_path(examples.path("ball_wall"))
  m.opt.timestep = timestep
  nstep = int(round(horizon / timestep))

  def wall(speed: float) -> float:
    d = mujoco.MjData(m)
    d.qvel[0] = speed
    for _ in range(nstep):
      mujoco.mj_step(m, d)
    return float(d.qpos[1])
  return wall


def central(f: Callable[[float], float], x: float, eps: float = 1e-6) -> float:
  return (f(x + eps) - f(x - eps)) / (2 * eps)


def flexor_gradient(m: flexor.Model, horizon: float) -> Callable[[float], jax.Array]:
  d = flexor.make_data(m)
  nstep = int(round(horizon / float(m.opt.timestep)))
  wall = lambda v: rollout(m, d.replace(qvel=d.qvel.at[0].set(v)), nstep=nstep,
                           fields=())[0].qpos[1]
  return jax.jit(jax.value_and_grad(wall))


def mjx_gradient(timestep: float, horizon: float) -> Callable[[float], tuple]:
  from mujoco import mjx  # pylint: disable=import-outside-toplevel
  mm = mujoco.MjModel.from_xml_path(examples.path("ball_wall"))
  mm.opt.timestep = timestep
  mx = mjx.put_model(mm)
  d0 = mjx.make_data(mx)
  nstep = int(round(horizon / timestep))

  def wall(v):
    d = d0.replace(qvel=d0.qvel.at[0].set(v))
    d, _ = jax.lax.scan(lambda d, _: (mjx.step(mx, d), None), d, None, length=nstep)
    return d.qpos[1]
  return jax.jit(lambda v: (wall(v), jax.jacfwd(wall)(v)))


def timed(fn: Callable, x: float, repeat: int = 3) -> tuple[float, float, float, float]:
  """(value, gradient, seconds of the first call, ms of the best later call)."""
  t = time.perf_counter()
  value, grad = jax.block_until_ready(fn(x))
  first = time.perf_counter() - t
  best = np.inf
  for _ in range(repeat):
    t = time.perf_counter()
    jax.block_until_ready(fn(x))
    best = min(best, time.perf_counter() - t)
  return float(value), float(grad), first, 1e3 * best


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--speed", type=float, default=1.5)
  parser.add_argument("--horizon", type=float, default=1.0)
  parser.add_argument("--no-mjx", action="store_true")
  args = parser.parse_args()
  v, horizon = args.speed, args.horizon

  fine = mujoco_wall(1e-5, horizon)
  flow = central(fine, v)
  print(f"ball_wall, thrown at {v} m/s, wall after {horizon} s: {fine(v):.6f} m; "
        f"flow's gradient (MuJoCo C, 0.01 ms, central differences) {flow:+.6f}\n")
  print("| method | step | wall (m) | gradient | error | first call (s) | ms / gradient |")
  print("|---|---|---|---|---|---|---|")
  row = lambda name, step, value, grad, first, ms: print(
      f"| {name} | {step} | {value:.6f} | {grad:+.6f} | {abs(grad - flow) / abs(flow):.1%} | "
      f"{first} | {ms} |")

  base = flexor.load_mjcf(examples.path("ball_wall"))
  for step in (0.01, 0.001):
    m = base.replace(opt=base.opt.replace(timestep=jax.numpy.asarray(step)))
    value, grad, first, ms = timed(flexor_gradient(m, horizon), v)
    row("flexor Euler", f"{1e3 * step:g} ms", value, grad, f"{first:.1f}", f"{ms:.1f}")
  for rtol, atol, tries in ((1e-2, 1e-5, 32), (1e-3, 1e-6, 64), (1e-5, 1e-8, 256)):
    m = flexor.with_adaptive_integration(base, tries, rtol=rtol, atol=atol)
    value, grad, first, ms = timed(flexor_gradient(m, horizon), v)
    row(f"flexor adaptive, rtol {rtol:g}", "10 ms", value, grad, f"{first:.1f}", f"{ms:.1f}")
  if not args.no_mjx:
    value, grad, first, ms = timed(mjx_gradient(0.01, horizon), v)
    row("MJX (forward mode)", "10 ms", value, grad, f"{first:.1f}", f"{ms:.1f}")
  coarse = mujoco_wall(0.01, horizon)
  row("MuJoCo C, central differences", "10 ms", coarse(v), central(coarse, v), "-", "-")


if __name__ == "__main__":
  main()
