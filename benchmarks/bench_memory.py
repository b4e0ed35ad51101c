"""Memory of a long rollout's gradient, flexor beside MJX, with and without checkpointing.

For each model: the reverse-mode gradient of a ``--steps``-step rollout (d sum(final qpos) /
d initial qvel, one environment) is compiled and run; the table gives XLA's own account of the
program's temporary buffers (``memory_analysis().temp_size_in_bytes``: the residuals the
backward pass keeps, the dominant term), the compile time and the gradient's wall time relative
to the forward rollout. flexor runs plain and with ``checkpoint_every=k`` for each ``--every``;
MJX runs its ``mjx.step`` in a plain ``lax.scan`` and with the same chunked ``jax.checkpoint``.
MuJoCo C has no reverse mode, so it has no column. Models: dm_control's humanoid with contacts
off and cheetah with contacts on (MJX's solver, a ``while_loop``, cannot be reverse
differentiated: its row then says so).

Run from the repository root, e.g. ``python benchmarks/bench_memory.py --steps 1000``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any, Callable

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_smooth  # pylint: disable=wrong-import-position

MODELS = ("humanoid", "cheetah")


def _chunked(step: Callable[[Any], Any], d: Any, steps: int, every: int | None) -> Any:
  """``steps`` applications of ``step`` from ``d``; with ``every``, a scan over chunks of that
  many steps, each under ``jax.checkpoint`` (the remainder plain)."""
  import jax  # pylint: disable=import-outside-toplevel

  def scan(d: Any, length: int) -> Any:
    return jax.lax.scan(lambda d, _: (step(d), None), d, None, length=length)[0]

  if every is None:
    return scan(d, steps)
  chunk = jax.checkpoint(lambda d, _: (scan(d, every), None), prevent_cse=False)
  d = jax.lax.scan(chunk, d, None, length=steps // every)[0]
  return scan(d, steps % every) if steps % every else d


def _measure(final_qpos: Callable[[Any], Any], qvel: Any, repeat: int) -> dict[str, Any]:
  """Compile time, temporary bytes and gradient/forward time ratio of ``sum(final_qpos)``."""
  import jax  # pylint: disable=import-outside-toplevel
  import jax.numpy as jnp  # pylint: disable=import-outside-toplevel
  loss = lambda q: jnp.sum(final_qpos(q))
  start = time.perf_counter()
  try:
    grad = jax.jit(jax.grad(loss)).lower(qvel).compile()
  except Exception as e:  # pylint: disable=broad-except
    return {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:70]}"}
  compile_s = time.perf_counter() - start
  forward = jax.jit(loss).lower(qvel).compile()
  jax.block_until_ready(grad(qvel))
  jax.block_until_ready(forward(qvel))
  t_grad = bench_smooth.best(lambda: jax.block_until_ready(grad(qvel)), repeat)
  t_fwd = bench_smooth.best(lambda: jax.block_until_ready(forward(qvel)), repeat)
  stats = grad.memory_analysis()
  temp = None if stats is None else stats.temp_size_in_bytes
  return {"temp": temp, "compile": compile_s, "ratio": t_grad / t_fwd, "grad_s": t_grad}


def _engines(mj: Any, dtype: str, steps: int, everies: list[int]) -> dict[str, Callable]:
  """Name -> (closure making final qpos from qvel, initial qvel) for flexor and MJX."""
  import jax.numpy as jnp  # pylint: disable=import-outside-toplevel
  from mujoco import mjx  # pylint: disable=import-outside-toplevel
  import flexor  # pylint: disable=import-outside-toplevel
  from flexor.mjcf.from_mujoco import from_mujoco  # pylint: disable=import-outside-toplevel

  jdtype = jnp.dtype(dtype)
  qvel = np.random.default_rng(0).normal(scale=0.5, size=mj.nv)
  fm = from_mujoco(mj, dtype=jdtype)
  fd = flexor.make_data(fm)
  fq = jnp.asarray(qvel, dtype=jdtype)
  # Without x64 (float32 runs), MJX's arrays are float32 from the start.
  mm = mjx.put_model(mj)
  md = mjx.make_data(mm)

  out = {}
  for every in [None] + everies:
    label = "plain" if every is None else f"k={every}"
    out[f"flexor {label}"] = (
        lambda q, every=every: flexor.rollout(fm, fd.replace(qvel=q), nstep=steps, fields=(),
                                              checkpoint_every=every)[0].qpos, fq)
    out[f"MJX {label}"] = (
        lambda q, every=every: _chunked(lambda d: mjx.step(mm, d), md.replace(qvel=q), steps,
                                        every).qpos, fq)
  return out


def main(argv: list[str] | None = None) -> int:
  """Runs the benchmark and prints one table per model; returns the exit code."""
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--steps", type=int, default=1000)
  parser.add_argument("--every", type=int, nargs="*", default=[10, 40])
  parser.add_argument("--dtype", choices=("float32", "float64"), default="float32")
  parser.add_argument("--repeat", type=int, default=3)
  parser.add_argument("--models", nargs="*", default=list(MODELS), choices=MODELS)
  args = parser.parse_args(argv)
  import jax  # pylint: disable=import-outside-toplevel
  if args.dtype == "float64":
    jax.config.update("jax_enable_x64", True)
  print(f"device: {bench_smooth.device_name()}; {args.steps}-step rollout gradient, batch 1, "
        f"{args.dtype}")
  for name in args.models:
    mj = _model(name)
    print(f"\n{name} ({'contacts on' if name == 'cheetah' else 'contacts off'}, nv={mj.nv})")
    print("| engine | temp memory (MB) | jit(grad) compile (s) | grad / forward |")
    print("|---|---:|---:|---:|")
    for label, (fn, qvel) in _engines(mj, args.dtype, args.steps, args.every).items():
      r = _measure(fn, qvel, args.repeat)
      if "error" in r:
        print(f"| {label} | fails: {r['error']} | | |")
        continue
      temp = "n/a" if r["temp"] is None else f"{r['temp'] / 2 ** 20:.1f}"
      print(f"| {label} | {temp} | {r['compile']:.1f} | {r['ratio']:.2f} |", flush=True)
  return 0


def _model(name: str) -> Any:
  import mujoco  # pylint: disable=import-outside-toplevel
  mj = mujoco.MjModel.from_xml_path(bench_smooth.model_path(name))
  return bench_smooth.smooth_only(mj) if name == "humanoid" else mj


if __name__ == "__main__":
  sys.exit(main())
