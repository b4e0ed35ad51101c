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

import copy
import os
import sys
from typing import Any

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
  args = bench_smooth.parse_args(argv, __doc__, MODELS)
  batches = bench_smooth.start(args, "contacts and constraints disabled; random constant ctrl in [0, 1]")
  rng = np.random.default_rng(args.seed)
  rows: list[tuple[str, str, dict[str, Any]]] = []
  for name in [n for n in args.models.split(",") if n]:
    mj = _actuated_model(name)
    print(f"\n{name}: nq={mj.nq} nv={mj.nv} nu={mj.nu} na={mj.na} ntendon={mj.ntendon}",
          flush=True)
    init = {"qvel": 0.1 * rng.standard_normal((max(batches), mj.nv)),
            "ctrl": rng.uniform(0, 1, size=(max(batches), mj.nu))}
    rows += bench_smooth.measure_model(name, mj, init, args, batches)
  bench_smooth.print_tables(rows, batches)
  return 0 if all(r["finite"] for _, _, r in rows) else 1


if __name__ == "__main__":
  sys.exit(main())
