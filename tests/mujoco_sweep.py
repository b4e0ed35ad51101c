"""Conformance sweep over MJCF files that are not in this repository: MuJoCo's own models.

A script, not a test (pytest does not collect it): MuJoCo's ``model/`` and
``test/engine/testdata/`` directories come with its source, not its wheel. For each file given,
it prints one JSON line: MuJoCo's and flexor's forward at three states of a MuJoCo trajectory
from random velocities and controls (the contact and row counts, and the largest relative error
of each compared field), and the relative error of flexor's own 20-step trajectory from the first
state. Both engines solve to tolerance 1e-12 with at least 200 iterations; float64.

    git clone --depth 1 https://github.com/google-deepmind/mujoco /tmp/mujoco
    find /tmp/mujoco/model -name '*.xml' | while read f; do
      timeout 600 .venv/bin/python tests/mujoco_sweep.py "$f"; done > sweep.jsonl

status: ``ok`` (counts equal, every field within 1e-6, trajectory within 1e-6),
``fwd_mismatch``, ``traj_mismatch``, ``mj_reject`` (MuJoCo refuses the file), ``refused`` (flexor
raises MJCFError) or ``crash`` (any other exception, its traceback's tail in ``msg``).
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from typing import Any

os.environ.setdefault("XLA_FLAGS", "--xla_cpu_enable_concurrency_optimized_scheduler=false")

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import mujoco  # noqa: E402
import numpy as np  # noqa: E402

import flexor  # noqa: E402

FIELDS = ("xpos", "qfrc_bias", "ten_length", "actuator_length", "actuator_force", "qfrc_passive",
          "qfrc_actuator", "act_dot", "sensordata", "qfrc_constraint", "qacc")
STATE = ("qpos", "qvel", "act", "ctrl", "mocap_pos", "mocap_quat", "qacc_warmstart")
TOL = 1e-6


def relerr(a: Any, b: Any) -> float:
  """max |a - b| / (1 + |b|), inf where the shapes differ."""
  a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
  if a.shape != b.shape:
    return float("inf")
  return float(np.max(np.abs(a - b) / (1 + np.abs(b)))) if a.size else 0.0


def _states(mj: mujoco.MjModel, rng: np.random.Generator) -> list[dict[str, Any]]:
  """MuJoCo's states at steps 0, 20 and 60 from the first keyframe (or qpos0) with velocities
  of 0.1 rad/s or m/s and controls drawn anew every 10 steps (inside ctrlrange where limited)."""
  md = mujoco.MjData(mj)
  if mj.nkey:
    mujoco.mj_resetDataKeyframe(mj, md, 0)
  md.qvel[:] += 0.1 * rng.standard_normal(mj.nv)
  lo, hi = mj.actuator_ctrlrange[:, 0], mj.actuator_ctrlrange[:, 1]
  limited = mj.actuator_ctrllimited.astype(bool) & (hi > lo)
  states = []
  for k in range(61):
    if k % 10 == 0:
      md.ctrl[:] = np.where(limited, lo + (hi - lo) * rng.random(mj.nu), rng.standard_normal(mj.nu))
    if k in (0, 20, 60):
      states.append({**{f: getattr(md, f).copy() for f in STATE}, "time": md.time})
    mujoco.mj_step(mj, md)
  return states


def _pair(mj: mujoco.MjModel, m: flexor.Model, s: dict[str, Any]):
  """Both engines' Data at state ``s``, not yet computed."""
  md = mujoco.MjData(mj)
  for f in STATE:
    getattr(md, f)[:] = s[f]
  md.time = s["time"]
  d = flexor.make_data(m).replace(**{f: jnp.asarray(s[f]) for f in STATE},
                                  time=jnp.asarray(s["time"]))
  return md, d


def sweep(path: str) -> dict[str, Any]:
  """The sweep's record of one MJCF file (see the module docstring)."""
  out: dict[str, Any] = {"path": path}
  try:
    mj = mujoco.MjModel.from_xml_path(path)
  except Exception as e:  # pylint: disable=broad-except
    return {**out, "status": "mj_reject", "msg": str(e)[:300]}
  try:
    m = flexor.load_mjcf(path, dtype=jnp.float64)
  except flexor.MJCFError as e:
    return {**out, "status": "refused", "msg": str(e)[:400]}
  try:
    mj.opt.tolerance, mj.opt.iterations = 1e-12, max(mj.opt.iterations, 200)
    m = m.replace(opt=m.opt.replace(tolerance=jnp.asarray(1e-12),
                                    iterations=max(m.opt.iterations, 200)))
    states = _states(mj, np.random.default_rng(0))
    forward, step = jax.jit(flexor.forward), jax.jit(flexor.step)
    errors: dict[str, float] = {}
    counts = []
    for s in states:
      md, d = _pair(mj, m, s)
      mujoco.mj_forward(mj, md)
      d = forward(m, d)
      counts.append((int(md.ncon), int(d.ncon), int(md.nefc), int(d.nefc)))
      for f in FIELDS:
        errors[f] = max(errors.get(f, 0.0), relerr(getattr(d, f), getattr(md, f)))
    md, d = _pair(mj, m, states[0])
    trajectory = []
    for _ in range(20):
      mujoco.mj_step(mj, md)
      d = step(m, d)
      trajectory.append(max(relerr(d.qpos, md.qpos), 1e-3 * relerr(d.qvel, md.qvel)))
  except Exception:  # pylint: disable=broad-except
    return {**out, "status": "crash", "msg": traceback.format_exc()[-1500:]}
  bad = [f for f, e in errors.items() if not e <= TOL]
  uncounted = any(a != b or c != e for a, b, c, e in counts)
  status = ("fwd_mismatch" if bad or uncounted else
            "traj_mismatch" if not trajectory[-1] <= TOL else "ok")
  return {**out, "status": status, "counts": counts, "bad": bad,
          "fwd_err": {f: float(f"{e:.2e}") for f, e in errors.items()},
          "traj_err": [float(f"{e:.1e}") for e in trajectory[::4] + trajectory[-1:]]}


if __name__ == "__main__":
  for arg in sys.argv[1:]:
    print(json.dumps(sweep(arg), default=str), flush=True)
