"""Gradients through contact, compared on one task in one run: flexor's three ContactGradient
modes, randomized smoothing of the exact mode, and MJX.

The task is the bundled ``block_push`` (``flexor.examples``): a motorised sphere on a rail must
push a free block from x = 0.5 m to 0.7 m in 1.5 s (150 steps); the loss is the squared error of
the block's final x, the decision variables the 150 motor forces. From a constant 0.8 N the
pusher stops 7 cm short of the block, so every MuJoCo-style gradient is zero there. For each
method the script prints the gradient's norm at that start, the loss after Adam, the block's
final x replayed in MuJoCo C with the optimised controls, and the time per gradient.

* exact, smooth, distance: ``jax.grad`` through ``flexor.rollout`` in each mode;
* bundle: randomized smoothing (Suh et al. 2022, the zero-order estimator) of the exact loss:
  ``mean((L(u + s e) - L(u)) e) / s`` over N Gaussian perturbations e, one vmapped rollout;
* mjx: ``jax.grad`` through ``lax.scan`` over ``mujoco.mjx.step``, with one solver iteration
  (MJX's solver is a ``while_loop``, which reverse mode cannot differentiate, unless
  ``opt.iterations == 1``; its replay in MuJoCo C uses the model's own settings).

Run from the repository root: ``python benchmarks/bench_contact_gradient.py`` (float64; add
``--iterations 20 --no-mjx`` for a quick look).
"""

from __future__ import annotations

import argparse
import time
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax

jax.config.update("jax_enable_x64", True)

import flexor  # pylint: disable=wrong-import-position
from flexor import demo, examples  # pylint: disable=wrong-import-position
from flexor.rollout import rollout  # pylint: disable=wrong-import-position

NSTEP, TARGET, START = 150, 0.7, 0.8
BLOCK_X = 1  # qpos address of the block's x


def flexor_loss(mode: str, width: float | None) -> Callable[[jax.Array], jax.Array]:
  """The task's loss of the controls (NSTEP, 1) in a flexor mode."""
  m = flexor.with_contact_gradient(flexor.load_mjcf(examples.path("block_push")), mode, width)
  d0 = flexor.make_data(m)

  def loss(u: jax.Array) -> jax.Array:
    final, _ = rollout(m, d0, u, nstep=NSTEP)
    return (final.qpos[BLOCK_X] - TARGET)**2

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


def mjx_loss() -> Callable[[jax.Array], jax.Array]:
  """The task's loss through MJX."""
  import mujoco  # pylint: disable=import-outside-toplevel
  from mujoco import mjx  # pylint: disable=import-outside-toplevel
  mm = mujoco.MjModel.from_xml_path(examples.path("block_push"))
  mm.opt.iterations = 1
  mx = mjx.put_model(mm)
  d0 = mjx.make_data(mx)

  def loss(u: jax.Array) -> jax.Array:
    def body(d, ctrl):
      return mjx.step(mx, d.replace(ctrl=ctrl)), None
    final, _ = jax.lax.scan(body, d0, u)
    return (final.qpos[BLOCK_X] - TARGET)**2

  return loss


def replay_in_mujoco(u: np.ndarray) -> float:
  """The block's final x when MuJoCo C runs the controls u."""
  import mujoco  # pylint: disable=import-outside-toplevel
  mm = mujoco.MjModel.from_xml_path(examples.path("block_push"))
  return float(demo.replay(mm, u)[-1, BLOCK_X])


def optimise(value_and_grad, iterations: int, rate: float, key: jax.Array | None = None):
  """Adam from the start; returns (first gradient norm, best loss, its controls, s/gradient)."""
  u = jnp.full((NSTEP, 1), START, dtype=jnp.float64)
  opt = optax.adam(rate)
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
  """Runs every method and prints one table; returns the exit code."""
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--iterations", type=int, default=60)
  parser.add_argument("--samples", type=int, default=64, help="randomized-smoothing samples")
  parser.add_argument("--sigma", type=float, default=2.0, help="randomized-smoothing noise (N)")
  parser.add_argument("--no-mjx", action="store_true")
  args = parser.parse_args(argv)
  methods = {
      "exact": (jax.jit(jax.value_and_grad(flexor_loss("exact", None))), None),
      "smooth (width 0.1)": (jax.jit(jax.value_and_grad(flexor_loss("smooth", 0.1))), None),
      "distance (width 0.1)": (jax.jit(jax.value_and_grad(flexor_loss("distance", 0.1))), None),
      f"bundle (N={args.samples}, s={args.sigma})":
          (bundle_grad(flexor_loss("exact", None), args.samples, args.sigma), jax.random.PRNGKey(1)),
  }
  if not args.no_mjx:
    methods["mjx"] = (jax.jit(jax.value_and_grad(mjx_loss())), None)
  print(f"block_push: block x 0.5 -> {TARGET} m, {NSTEP} steps, Adam(0.3) x {args.iterations}, "
        f"start {START} N; float64, {jax.devices()[0].platform}")
  print(f"{'method':<26}{'|grad| at start':>16}{'best loss':>12}{'MuJoCo C x':>12}"
        f"{'compile s':>11}{'ms/grad':>9}", flush=True)
  for name, (value_and_grad, key) in methods.items():
    t0 = time.perf_counter()
    u0 = jnp.full((NSTEP, 1), START, dtype=jnp.float64)
    jax.block_until_ready(value_and_grad(u0, key) if key is not None else value_and_grad(u0))
    compile_s = time.perf_counter() - t0
    first, best, u, per_grad = optimise(value_and_grad, args.iterations, 0.3, key)
    print(f"{name:<26}{first:>16.3e}{best:>12.2e}{replay_in_mujoco(u):>12.4f}"
          f"{compile_s:>11.1f}{1e3 * per_grad:>9.1f}", flush=True)
  return 0


if __name__ == "__main__":
  raise SystemExit(main())
