"""Where a flexor step's time goes: each pipeline stage jitted and vmapped alone, per batch size.

For each model, a batch of states is made by stepping random initial velocities (from qpos0, or
keyframe 0) for 200 steps, so that contacts and constraint rows are those of a running
simulation. Each stage of ``flexor.step`` (as ``flexor.forward`` calls them) is then compiled
on its own, ``jax.jit(jax.vmap(stage))``, returning only the arrays it changes, and timed on
that batch; the whole step is timed the same way. A stage timed alone loses the fusions it
shares with its neighbours in a step and reads its inputs from memory, so the stages' sum is
not the step's time: the table says where the time goes, not what each stage costs inside a
step. The solver is also timed with ``opt.iterations`` = 1, which separates the work done
once per solve from the Newton iterations (under ``vmap`` every iteration runs until the
batch's slowest world is done).

Run from the repository root, e.g.
``python benchmarks/bench_stages.py --models humanoid --batches 64,1024``; models are those of
``bench_contact.py`` (contacts on) or ``name:smooth`` (contacts and constraints off).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any, Callable

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_contact  # pylint: disable=wrong-import-position
import bench_smooth  # pylint: disable=wrong-import-position


def stages(m: Any) -> list[tuple[str, Callable[[Any, Any], Any]]]:
  """(name, stage(m, d) -> d) in the order ``flexor.step`` runs them."""
  import flexor  # pylint: disable=import-outside-toplevel
  from flexor import (collision, constraint, crb, integrate, kinematics, passive,  # pylint: disable=import-outside-toplevel
                      rne, sensor, solver, tendon, transmission)
  from flexor.forward import fwd_acceleration, fwd_actuation  # pylint: disable=import-outside-toplevel
  one_iteration = m.replace(opt=m.opt.replace(iterations=1))
  # without constraints (``name:smooth``) forward runs no solver: its rows would time a solve of
  # rows the options disable
  solve = [("solve", solver.solve),
           ("solve, 1 iteration", lambda _, d: solver.solve(one_iteration, d))]
  return [
      ("kinematics", kinematics.kinematics),
      ("com_pos", kinematics.com_pos),
      ("tendon", tendon.tendon),
      ("crb", crb.crb),
      ("factor_m", crb.factor_m),
      ("collision", collision.collision),
      ("make_constraint", constraint.make_constraint),
      ("transmission", transmission.transmission),
      ("sensor_pos", sensor.sensor_pos),
      ("com_vel", kinematics.com_vel),
      ("reference_constraint", constraint.reference_constraint),
      ("passive", passive.passive),
      ("rne_bias", rne.rne_bias),
      ("sensor_vel", sensor.sensor_vel),
      ("fwd_actuation", fwd_actuation),
      ("fwd_acceleration", fwd_acceleration),
      *(solve if constraint.constraints_on(m) else []),
      ("sensor_acc", sensor.sensor_acc),
      ("integrate", integrate.INTEGRATORS[integrate.IntegratorType(m.opt.integrator)]),
      ("step", flexor.step),
  ]


def _changed(stage: Callable[[Any, Any], Any]) -> Callable[[Any, Any], list[Any]]:
  """``stage`` returning only the leaves of Data it replaced (the others are its inputs)."""
  import jax  # pylint: disable=import-outside-toplevel

  def run(m, d):
    out = stage(m, d)
    return [o for o, i in zip(jax.tree_util.tree_leaves(out), jax.tree_util.tree_leaves(d))
            if o is not i]
  return run


def profile(name: str, args: argparse.Namespace, batches: list[int]) -> None:
  """Prints the stage table of one model."""
  import jax  # pylint: disable=import-outside-toplevel
  import jax.numpy as jnp  # pylint: disable=import-outside-toplevel
  import mujoco  # pylint: disable=import-outside-toplevel
  import flexor  # pylint: disable=import-outside-toplevel
  from flexor.mjcf.from_mujoco import from_mujoco  # pylint: disable=import-outside-toplevel

  base, _, smooth = name.partition(":")
  mj = bench_contact._model(base)  # pylint: disable=protected-access
  if smooth:
    bench_smooth.smooth_only(mj)
  md = mujoco.MjData(mj)
  if mj.nkey:
    mujoco.mj_resetDataKeyframe(mj, md, 0)
  m = from_mujoco(mj, dtype=np.dtype(args.dtype))
  rng = np.random.default_rng(args.seed)
  n = max(batches)
  d = flexor.make_data(m, (n,)).replace(
      qpos=jnp.asarray(np.tile(md.qpos, (n, 1)), args.dtype),
      qvel=jnp.asarray(0.1 * rng.standard_normal((n, mj.nv)), args.dtype))
  d = jax.jit(jax.vmap(lambda d: jax.lax.fori_loop(
      0, args.warm_steps, lambda _, d: flexor.forward(m, flexor.step(m, d)), d)))(d)
  print(f"\n{name}: nq={mj.nq} nv={mj.nv} nbody={mj.nbody} ngeom={mj.ngeom} "
        f"contact slots {m.nconmax} rows {m.njmax} (active: mean "
        f"{float(jnp.mean(d.nefc)):.0f}, max {int(jnp.max(d.nefc))}) "
        f"iterations={mj.opt.iterations}, after {args.warm_steps} steps", flush=True)
  table = []
  for stage_name, stage in stages(m):
    row = [stage_name]
    for b in batches:
      db = jax.tree_util.tree_map(lambda x, b=b: x[:b], d)
      t0 = time.perf_counter()
      fn = jax.jit(jax.vmap(_changed(stage), in_axes=(None, 0))).lower(m, db).compile()
      compile_s = time.perf_counter() - t0
      jax.block_until_ready(fn(m, db))
      t = bench_smooth.best(lambda fn=fn, db=db: jax.block_until_ready(fn(m, db)), args.repeat)
      row += [f"{t / b * 1e6:.2f}", f"{compile_s:.1f}"]
    table.append(row)
    print("  " + " | ".join(row), flush=True)
  step_us = [float(x) for x in table[-1][1::2]]
  header = ["stage"] + [h for b in batches for h in (f"B={b} us/world", "compile s")]
  header += [f"B={b} share of step" for b in batches]
  rows = [r + [f"{float(r[1 + 2 * k]) / step_us[k]:.0%}" for k in range(len(batches))]
          for r in table]
  bench_smooth._print_markdown([header] + rows)  # pylint: disable=protected-access


def main(argv: list[str] | None = None) -> int:
  """Runs the profile; returns the exit code."""
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--models", default="humanoid",
                      help="comma-separated bench_contact.py models, ':smooth' for contacts off")
  parser.add_argument("--batches", default="64,1024", help="comma-separated batch sizes")
  parser.add_argument("--repeat", type=int, default=5, help="timed calls; the fastest counts")
  parser.add_argument("--warm-steps", type=int, default=200,
                      help="steps from the initial state before the stages are timed")
  parser.add_argument("--dtype", choices=("float32", "float64"), default="float32")
  parser.add_argument("--seed", type=int, default=0)
  args = parser.parse_args(argv)
  import jax  # pylint: disable=import-outside-toplevel
  if args.dtype == "float64":
    jax.config.update("jax_enable_x64", True)
  print(f"device: {bench_smooth.device_name()}, jax {jax.__version__}, dtype {args.dtype}, "
        f"best of {args.repeat}, XLA_FLAGS={os.environ.get('XLA_FLAGS', '')!r}")
  batches = [int(b) for b in args.batches.split(",") if b]
  for name in [n for n in args.models.split(",") if n]:
    profile(name, args, batches)
  return 0


if __name__ == "__main__":
  sys.exit(main())
