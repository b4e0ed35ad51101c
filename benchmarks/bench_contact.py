"""Contact-model speed of flexor beside MuJoCo C and MJX, measured in one run.

The harness of ``bench_smooth.py`` (see there for the columns) on models that touch the ground,
contacts and constraints on, each model's own solver settings: dm_control's ``cheetah``,
``walker`` and ``humanoid``, gymnasium's ``ant`` and ``humanoid``, and ``meshes`` (this file's
``MESHES_XML``: convex meshes and ellipsoids dropped on a plane). Every engine steps the same
compiled MjModel from qpos0 (keyframe 0 where the model has one) and the same random
velocities, controls zero. ``--grad`` adds the cost of a reverse-mode gradient of the batched
rollout (d sum(final qpos) / d initial qvel) relative to the forward rollout, for flexor and MJX.
Large scenes: ``--models dog --no-mjx`` (dm_control's dog, 6216 candidate pairs; its
``<size nconmax="300">`` compacts flexor's contacts) and ``--max-geom-pairs k`` (MJX's broad
phase, for flexor and MJX).

Run from the repository root, e.g. ``python benchmarks/bench_contact.py --quick``.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any, Callable

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_smooth  # pylint: disable=wrong-import-position

MODELS = {"cheetah": "dmc", "walker": "dmc", "humanoid": "dmc", "ant": "gym",
          "gym_humanoid": "gym", "meshes": "own"}


def _points(points: Any) -> str:
  return " ".join(f"{x:.6f}" for x in np.ravel(points))


# Plane-mesh and plane-ellipsoid contacts only (the bodies do not collide with each other):
# eight 12-sided prisms, eight 40-point convex clouds, eight ellipsoids.
MESHES_XML = f"""
<mujoco>
  <asset>
    <mesh name="prism" vertex="{_points([[.08 * np.cos(a), .08 * np.sin(a), z]
                                         for a in np.arange(12) * np.pi / 6 for z in (-.05, .05)])}"/>
    <mesh name="cloud" vertex="{_points(np.random.default_rng(5).normal(size=(40, 3)) * .06)}"/>
  </asset>
  <default><geom conaffinity="0"/></default>
  <worldbody>
    <geom type="plane" size="5 5 .1" conaffinity="1"/>
    {"".join(f'<body pos="{0.3 * (k % 8)} {0.3 * (k // 8)} {0.1 + 0.02 * k}"><freejoint/>'
             + ('<geom type="mesh" mesh="prism"/>' if k < 8 else
                '<geom type="mesh" mesh="cloud"/>' if k < 16 else
                '<geom type="ellipsoid" size=".08 .05 .04"/>') + '</body>'
             for k in range(24))}
  </worldbody>
</mujoco>
"""


def _model(name: str, max_geom_pairs: int = -1) -> Any:
  """The MjModel of ``name``, with MJX's max_geom_pairs numeric where it is >= 0."""
  import mujoco  # pylint: disable=import-outside-toplevel
  if name == "meshes":
    spec = mujoco.MjSpec.from_string(MESHES_XML)
  elif MODELS.get(name) == "gym":
    import gymnasium  # pylint: disable=import-outside-toplevel
    root = os.path.join(os.path.dirname(gymnasium.__file__), "envs", "mujoco", "assets")
    spec = mujoco.MjSpec.from_file(os.path.join(root, name.replace("gym_", "") + ".xml"))
  else:
    spec = mujoco.MjSpec.from_file(bench_smooth.model_path(name))
  if max_geom_pairs >= 0:
    numeric = spec.add_numeric()
    numeric.name, numeric.data, numeric.size = "max_geom_pairs", [max_geom_pairs], 1
  return spec.compile()


def _grad_ratio(step: Callable[[Any, Any], Any], m: Any, d: Any, steps: int,
                repeat: int) -> float:
  """Wall time of the batched rollout's gradient w.r.t. the initial qvel over the forward's."""
  import jax  # pylint: disable=import-outside-toplevel
  import jax.numpy as jnp  # pylint: disable=import-outside-toplevel

  def final(qvel):
    run = lambda d: jax.lax.scan(lambda d, _: (step(m, d), None), d, None, length=steps)[0]
    return jax.vmap(run)(d.replace(qvel=qvel)).qpos

  forward = jax.jit(lambda q: jnp.sum(final(q)))
  grad = jax.jit(jax.grad(lambda q: jnp.sum(final(q))))
  jax.block_until_ready(forward(d.qvel))
  jax.block_until_ready(grad(d.qvel))
  t_fwd = bench_smooth.best(lambda: jax.block_until_ready(forward(d.qvel)), repeat)
  t_grad = bench_smooth.best(lambda: jax.block_until_ready(grad(d.qvel)), repeat)
  return t_grad / t_fwd


def main(argv: list[str] | None = None) -> int:
  """Runs the benchmark and prints the tables; returns the exit code."""
  args = bench_smooth.parse_args(argv, __doc__, MODELS, grad=True)
  batches = bench_smooth.start(args, "contacts on, each model's solver settings")
  import mujoco  # pylint: disable=import-outside-toplevel
  rng = np.random.default_rng(args.seed)
  rows: list[tuple[str, str, dict[str, Any]]] = []
  ratios: list[str] = []
  for name in [n for n in args.models.split(",") if n]:
    mj = _model(name, args.max_geom_pairs)
    print(f"\n{name}: nq={mj.nq} nv={mj.nv} ngeom={mj.ngeom} solver={mj.opt.solver} "
          f"iterations={mj.opt.iterations} cone={mj.opt.cone} nconmax={mj.nconmax} "
          f"max_geom_pairs={args.max_geom_pairs}", flush=True)
    md = mujoco.MjData(mj)
    if mj.nkey:
      mujoco.mj_resetDataKeyframe(mj, md, 0)
    n = max(batches)
    init = {"qpos": np.tile(md.qpos, (n, 1)), "qvel": 0.1 * rng.standard_normal((n, mj.nv))}
    rows += bench_smooth.measure_model(name, mj, init, args, batches)
    if args.grad:
      ratios.append(_grad_rows(name, mj, init, args))
  bench_smooth.print_tables(rows, batches)
  if ratios:
    print("\nreverse-mode gradient of the batched rollout (batch 64, or the largest given) over "
          "the forward rollout, wall time")
    print("\n".join(ratios))
  return 0 if all(r["finite"] for _, _, r in rows) else 1


def _grad_rows(name: str, mj: Any, init: dict[str, np.ndarray], args: argparse.Namespace) -> str:
  import jax.numpy as jnp  # pylint: disable=import-outside-toplevel
  import flexor  # pylint: disable=import-outside-toplevel
  from flexor.mjcf.from_mujoco import from_mujoco  # pylint: disable=import-outside-toplevel
  b = min(64, len(init["qvel"]))
  m = from_mujoco(mj, dtype=np.dtype(args.dtype))
  d = flexor.make_data(m, (b,)).replace(**{k: jnp.asarray(v[:b], dtype=args.dtype)
                                           for k, v in init.items()})
  line = f"  {name}: flexor {_grad_ratio(flexor.step, m, d, args.steps, args.repeat):.1f}x"
  if not args.no_mjx:
    import jax  # pylint: disable=import-outside-toplevel
    from mujoco import mjx  # pylint: disable=import-outside-toplevel
    try:
      mm = mjx.put_model(mj)
      d0 = mjx.make_data(mm)
      dm = jax.tree_util.tree_map(lambda x: jnp.broadcast_to(x, (b,) + x.shape), d0)
      dm = dm.replace(**{k: jnp.asarray(v[:b], dtype=args.dtype) for k, v in init.items()})
      line += f", MJX {_grad_ratio(mjx.step, mm, dm, args.steps, args.repeat):.1f}x"
    except Exception as e:  # pylint: disable=broad-except
      line += f", MJX failed ({type(e).__name__})"
  return line


if __name__ == "__main__":
  sys.exit(main())
