"""MuJoCo's muscle model, plotted from flexor's own functions beside MuJoCo's values.

Four panels: the normalized active force-length curve FL, the force-velocity curve FV, the
passive force-length curve FP (all from ``flexor.muscle``), and the active (activation 1, at
rest) and passive force of the bundled muscle arm's first muscle over its lengthrange, computed
by flexor's actuation stage. Dots are MuJoCo C's values (``mju_muscleGain``, ``mju_muscleBias``
and ``mj_forward``) at the same points; the printed maximum differences are the agreement.

Run from the repository root: ``python notebooks/muscle_curves.py [--out FILE]``; it writes
``notebooks/muscle_curves.png`` by default.
"""

from __future__ import annotations

import argparse
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np

jax.config.update("jax_enable_x64", True)

import matplotlib  # pylint: disable=wrong-import-position
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # pylint: disable=wrong-import-position
import mujoco  # pylint: disable=wrong-import-position

import flexor  # pylint: disable=wrong-import-position
from flexor import examples, muscle  # pylint: disable=wrong-import-position

# default muscle parameters: range0, range1, force, scale, lmin, lmax, vmax, fpmax, fvmax
PRM = np.array([0.75, 1.05, -1.0, 200.0, 0.5, 1.6, 1.5, 1.3, 1.2])
LMIN, LMAX, VMAX, FPMAX, FVMAX = PRM[4], PRM[5], PRM[6], PRM[7], PRM[8]


def curves() -> tuple[dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]], float]:
  """{panel: (x, flexor, MuJoCo)} for FL, FV and FP, and the largest difference."""
  # a unit muscle: lengthrange [range0, range1] and acc0 = scale, so L0 = 1 and F0 = 1
  lengthrange, acc0 = PRM[:2], PRM[3]
  L = np.linspace(0.3, 1.9, 321)
  V = np.linspace(-1.3, FVMAX, 241)
  fl = np.asarray(muscle.gain_length(jnp.asarray(L), LMIN, LMAX))
  fv = np.asarray(muscle.gain_velocity(jnp.asarray(V), FVMAX))
  fp = np.asarray(muscle.passive_length(jnp.asarray(L), LMAX)) * FPMAX
  ref_fl = np.array([-mujoco.mju_muscleGain(x, 0.0, lengthrange, acc0, PRM) for x in L])
  ref_fv = np.array([-mujoco.mju_muscleGain(1.0, v * VMAX, lengthrange, acc0, PRM) for v in V])
  ref_fp = np.array([-mujoco.mju_muscleBias(x, lengthrange, acc0, PRM) for x in L])
  panels = {"active force-length FL(L)": (L, fl, ref_fl),
            "force-velocity FV(V)": (V, fv, ref_fv),
            "passive force-length FP(L)": (L, fp, ref_fp)}
  worst = max(float(np.max(np.abs(a - b))) for _, a, b in panels.values())
  return panels, worst


def arm_forces(samples: int = 41) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
  """The muscle arm's first muscle (SF) across its lengthrange: (length, flexor active and
  passive force (2, n), MuJoCo's (2, n)) with activation 1 at rest, and the largest difference.

  The shoulder is swept through its range with the elbow at 0; active force is the total force
  minus the passive (bias) force.
  """
  path = examples.path("muscle_arm")
  fm, mj = flexor.load_mjcf(path), mujoco.MjModel.from_xml_path(path)
  md = mujoco.MjData(mj)
  forward = jax.jit(flexor.forward)
  lengths, ours, ref = [], [], []
  for angle in np.linspace(0.0, np.deg2rad(120), samples):
    qpos = np.array([angle, 0.0])
    for act in (1.0, 0.0):
      d = flexor.make_data(fm).replace(qpos=jnp.asarray(qpos), act=jnp.full(fm.na, act))
      d = forward(fm, d)
      md.qpos[:], md.act[:] = qpos, act
      mujoco.mj_forward(mj, md)
      ours.append(float(d.actuator_force[0]))
      ref.append(float(md.actuator_force[0]))
    lengths.append(float(d.actuator_length[0]))
  ours_arr, ref_arr = np.array(ours).reshape(-1, 2).T, np.array(ref).reshape(-1, 2).T
  # rows: total (act 1) and passive (act 0); active = total - passive
  ours_arr[0] -= ours_arr[1]
  ref_arr[0] -= ref_arr[1]
  return np.array(lengths), ours_arr, ref_arr, float(np.max(np.abs(ours_arr - ref_arr)))


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__),
                                                    "muscle_curves.png"))
  args = parser.parse_args(argv)
  panels, worst_curve = curves()
  length, ours, ref, worst_arm = arm_forces()

  fig, axes = plt.subplots(1, 4, figsize=(17, 3.8))
  for ax, (title, (x, flex, mj)) in zip(axes, panels.items()):
    ax.plot(x, flex, label="flexor")
    ax.plot(x[::12], mj[::12], "o", ms=3, label="MuJoCo C")
    ax.set_title(title)
    ax.set_xlabel("normalized velocity V" if "velocity" in title else "normalized length L")
    ax.grid(alpha=0.3)
  axes[0].legend()
  ax = axes[3]
  for row, label in ((0, "active (act = 1)"), (1, "passive")):
    ax.plot(length, -ours[row], label=f"flexor {label}")
    ax.plot(length[::3], -ref[row][::3], "o", ms=3, label=f"MuJoCo {label}")
  ax.set_title("muscle_arm SF: force over its lengthrange")
  ax.set_xlabel("actuator length (m)")
  ax.set_ylabel("pulling force (N)")
  ax.grid(alpha=0.3)
  ax.legend(fontsize=7)
  fig.tight_layout()
  fig.savefig(args.out, dpi=110)
  print(f"wrote {args.out}")
  print(f"max |flexor - MuJoCo|: curves {worst_curve:.2e}, arm forces {worst_arm:.2e} N")
  return 0 if max(worst_curve, worst_arm) < 1e-9 else 1


if __name__ == "__main__":
  sys.exit(main())
