"""Actuated-model speed of flexor beside MuJoCo C and MJX, measured in one run.

The same harness as ``bench_smooth.py`` (see there for what each column means), with actuation
on: every engine simulates the compiled MjModel with contacts and constraints disabled, from the
same random velocities, under the same random constant controls in [0, 1]. Models:

* ``muscle_arm``: flexor's bundled two-link arm with six muscles on wrapping spatial tendons;
* ``muscle_arms4``: four such arms in one model, 24 muscles on spatial tendons;
* ``site_cubes``: the bundled free cubes driven through site transmissions (motors, dampers).

Run from the repository root, e.g. ``python benchmarks/bench_actuation.py --quick``.
"""

from __future__ import annotations

import argparse
import copy
import os
import platform
import sys
import time
from typing import Any, Callable

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_smooth  # pylint: disable=wrong-import-position

MODELS = ("muscle_arm", "muscle_arms4", "site_cubes")
# attributes that name other elements and must follow a copy's renaming
_REFERENCES = ("site", "geom", "sidesite", "tendon", "joint")


def replicated_arms(copies: int) -> str:
  """MJCF text of ``copies`` bundled muscle arms, stacked along z, names suffixed _k."""
  from lxml import etree  # pylint: disable=import-outside-toplevel
  from flexor import examples  # pylint: disable=import-outside-toplevel
  root = etree.parse(examples.path("muscle_arm")).getroot()
  world, tendon, actuator = (root.find(tag) for tag in ("worldbody", "tendon", "actuator"))
  root.remove(root.find("keyframe"))
  originals = {tag: list(parent) for tag, parent in (("world", world), ("tendon", tendon),
                                                      ("actuator", actuator))}
  for parent in (tendon, actuator):
    for child in list(parent):
      parent.remove(child)
  for child in originals["world"]:
    if child.tag in ("site", "body"):
      world.remove(child)
  for k in range(copies):
    for tag, parent in (("world", world), ("tendon", tendon), ("actuator", actuator)):
      for child in originals[tag]:
        if child.tag == "light":
          continue
        clone = copy.deepcopy(child)
        for element in clone.iter():
          for attr in ("name",) + _REFERENCES:
            if element.get(attr) is not None:
              element.set(attr, f"{element.get(attr)}_{k}")
        if tag == "world":
          pos = np.array([float(x) for x in clone.get("pos", "0 0 0").split()]) + [0, 0, 0.3 * k]
          clone.set("pos", " ".join(f"{x:g}" for x in pos))
        parent.append(clone)
  return etree.tostring(root, encoding="unicode")


def _actuated_model(name: str) -> Any:
  import mujoco  # pylint: disable=import-outside-toplevel
  if name == "muscle_arms4":
    m = mujoco.MjModel.from_xml_string(replicated_arms(4))
  else:
    m = mujoco.MjModel.from_xml_path(bench_smooth.model_path(name))
  return bench_smooth.smooth_only(m)


def main(argv: list[str] | None = None) -> int:
  """Runs the benchmark and prints the tables; returns the exit code."""
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--models", default=",".join(MODELS))
  parser.add_argument("--batches", default=",".join(map(str, bench_smooth.BATCHES)))
  parser.add_argument("--steps", type=int, default=200)
  parser.add_argument("--repeat", type=int, default=3)
  parser.add_argument("--dtype", choices=("float32", "float64"), default="float32")
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--quick", action="store_true", help="batch 64 only, 50 steps, one run")
  parser.add_argument("--no-mjx", action="store_true")
  args = parser.parse_args(argv)
  if args.quick:
    args.batches, args.steps, args.repeat = "64", 50, 1
  import jax  # pylint: disable=import-outside-toplevel
  import mujoco  # pylint: disable=import-outside-toplevel
  if args.dtype == "float64":
    jax.config.update("jax_enable_x64", True)
  batches = [int(b) for b in args.batches.split(",") if b]
  print(f"device: {bench_smooth.device_name()}")
  print(f"jax {jax.__version__}, mujoco {mujoco.__version__}, python {platform.python_version()}, "
        f"XLA_FLAGS={os.environ.get('XLA_FLAGS', '')!r}")
  print(f"dtype {args.dtype}, {args.steps} steps per timed run, best of {args.repeat}; "
        "contacts and constraints disabled; random constant ctrl in [0, 1]")
  rng = np.random.default_rng(args.seed)
  rows: list[tuple[str, str, dict[str, Any]]] = []
  for name in [n for n in args.models.split(",") if n]:
    mj = _actuated_model(name)
    print(f"\n{name}: nq={mj.nq} nv={mj.nv} nu={mj.nu} na={mj.na} ntendon={mj.ntendon}",
          flush=True)
    init = {"qvel": 0.1 * rng.standard_normal((max(batches), mj.nv)),
            "ctrl": rng.uniform(0, 1, size=(max(batches), mj.nu))}
    engines: list[tuple[str, Callable[[], Any]]] = [
        ("flexor", lambda: bench_smooth.run_flexor(
            mj, init, args.dtype, args.steps, batches, args.repeat))]
    if not args.no_mjx:
      engines.append(("MJX", lambda: bench_smooth.run_mjx(
          mj, init, args.dtype, args.steps, batches, args.repeat)))
    for engine, measure in engines:
      t0 = time.perf_counter()
      rows.append((name, engine, measure()))
      print(f"  {engine} done in {time.perf_counter() - t0:.0f} s", flush=True)
    loop, rolled = bench_smooth.run_mujoco(mj, init, args.steps, batches,
                                        args.repeat)
    rows.append((name, "MuJoCo C loop", loop))
    if rolled is not None:
      rows.append((name, f"MuJoCo C rollout x{rolled['nthread']}", rolled))
  bench_smooth.print_tables(rows, batches)
  return 0 if all(r["finite"] for _, _, r in rows) else 1


if __name__ == "__main__":
  sys.exit(main())
