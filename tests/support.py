"""Shared helpers for conformance tests: the model list and MuJoCo side-by-side loading."""

from __future__ import annotations

import collections
import functools
import glob
import os
from typing import Any

import jax
import mujoco
import numpy as np
import pytest

import flexor
from flexor import examples

HERE = os.path.dirname(os.path.abspath(__file__))
SHARED_CORPUS = os.path.join(HERE, "..", "..", "shared", "corpus")


def _suite_dir() -> str:
  import dm_control  # pylint: disable=import-outside-toplevel
  return os.path.join(os.path.dirname(dm_control.__file__), "suite")


def _gym_dir() -> str:
  import gymnasium  # pylint: disable=import-outside-toplevel
  return os.path.join(os.path.dirname(gymnasium.__file__), "envs", "mujoco", "assets")


def _loads_in_mujoco(path: str) -> bool:
  try:
    mujoco.MjModel.from_xml_path(path)
  except Exception:  # pylint: disable=broad-except
    return False
  return True


@functools.cache
def model_paths() -> dict[str, str]:
  """Conformance models that MuJoCo compiles, keyed by a readable test id.

  dm_control's suite and gymnasium's assets (both ship inside their wheels), the shared corpus
  (MJX's test data) when present beside the repository, tests/models and flexor's bundled
  examples. Tests that need one particular model use a bundled one, so the suite runs without the
  shared corpus too.
  """
  groups = [("dmc", _suite_dir()), ("gym", _gym_dir()), ("own", os.path.join(HERE, "models")),
            ("ex", os.path.dirname(examples.path("arm")))]
  if os.path.isdir(SHARED_CORPUS):
    groups.append(("mjx", os.path.join(SHARED_CORPUS, "mjx_test_data")))
  paths = {}
  for prefix, root in groups:
    for path in sorted(glob.glob(os.path.join(root, "**", "*.xml"), recursive=True)):
      rel = os.path.relpath(path, root)[:-4].replace(os.sep, "/")
      if rel.startswith("common/"):  # dm_control's shared fragments, included by the models
        continue
      if _loads_in_mujoco(path):
        paths[f"{prefix}/{rel}"] = path
  return paths


# The models on which the default tier runs the per-model sweeps of the smooth pipeline
# (kinematics, crb, rne, passive, forward): between them planar and 3D trees, free, ball, hinge
# and slide joints, fluid forces, gravity compensation and mocap bodies, fixed tendons and
# spatial ones with pulleys and wrapping, every actuator kind and transmission, contacts. Each
# other model costs the default tier about ten seconds of compiling and adds no feature; `-m slow`
# sweeps every model of model_paths(), and the compiler's conformance (test_mjcf) covers every
# model in both tiers.
SWEEP_DEFAULT = frozenset({
    "dmc/humanoid", "dmc/cheetah", "dmc/fish", "gym/ant", "own/actuators", "own/actuators_v4",
    "own/contact_surface", "own/inertia_auto", "own/options_keys", "own/passive_params",
    "own/tendon_fixed", "own/tendon_params", "own/tendon_spatial", "own/tendon_wrap", "ex/arm",
    "ex/muscle_arm", "ex/slider_crank", "ex/site_cubes"})


def sweep(names) -> list:
  """``names`` as pytest parameters, those outside SWEEP_DEFAULT in the slow tier."""
  return [pytest.param(name, marks=() if name in SWEEP_DEFAULT else pytest.mark.slow)
          for name in names]


SMOOTH_ONLY = (mujoco.mjtDisableBit.mjDSBL_CONTACT | mujoco.mjtDisableBit.mjDSBL_CONSTRAINT
               | mujoco.mjtDisableBit.mjDSBL_ACTUATION)


def snapshot(a: np.ndarray) -> jax.Array:
  """A device array holding a private copy of `a` (an MjData field, say).

  On CPU, JAX may wrap a suitably aligned numpy buffer without copying it, so an array made with
  `jnp.asarray(md.qvel)` can change when a later `mj_step` writes md.qvel in place: copy first.
  """
  return jax.numpy.asarray(np.array(a, copy=True))


def relerr(a: Any, b: Any) -> float:
  """max |a - b| / (1 + |b|), elementwise; 0 for empty arrays."""
  a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64).reshape(np.shape(a))
  return float(np.max(np.abs(a - b) / (1.0 + np.abs(b)))) if a.size else 0.0


# Hinge, slide, ball and free joints with armature, dof damping (Euler's implicit damping path),
# a spring and a motor, no contacts or limits: the integrator and rollout tests' small model.
ALL_JOINTS_XML = """
<mujoco>
  <option timestep="0.005"/>
  <default><joint damping="0.3" armature="0.01"/><geom type="capsule" size="0.05"/></default>
  <worldbody>
    <body pos="0 0 1">
      <joint name="j0" type="hinge" axis="0 1 0" stiffness="2"/>
      <geom fromto="0 0 0 0.3 0 0"/>
      <body pos="0.3 0 0">
        <joint type="slide" axis="1 0 0"/>
        <geom fromto="0 0 0 0.2 0 0.1"/>
        <body pos="0.2 0 0.1"><joint type="ball"/><geom fromto="0 0 0 0 0.2 -0.2" size="0.04"/></body>
      </body>
    </body>
    <body pos="1 0 1"><freejoint/><geom type="box" size="0.1 0.2 0.05"/></body>
  </worldbody>
  <actuator><motor joint="j0" gear="1"/></actuator>
</mujoco>
"""


def float64_values(jaxpr: Any) -> list[str]:
  """Where ``jaxpr`` (and its sub-jaxprs) computes a float64 array: primitive and source line.

  For checking that a float32 model computes in float32 with x64 enabled, where a float64
  numpy constant silently promotes whatever it touches. Weakly typed scalars (Python constants)
  are left out: they take the other operand's dtype.
  """
  import jax  # pylint: disable=import-outside-toplevel
  found = []
  for eqn in jaxpr.eqns:
    if any(getattr(v.aval, "dtype", None) == np.float64 and not v.aval.weak_type
           for v in eqn.outvars):
      frame = jax._src.source_info_util.user_frame(eqn.source_info.traceback)  # pylint: disable=protected-access
      found.append(f"{eqn.primitive} at {frame.file_name}:{frame.start_line}" if frame else
                   str(eqn.primitive))
    for param in eqn.params.values():
      for sub in param if isinstance(param, (list, tuple)) else (param,):
        inner = getattr(sub, "jaxpr", sub)
        if hasattr(inner, "eqns"):
          found += float64_values(inner)
  return found


def batched_collision(m: flexor.Model):
  """jit(vmap(qpos -> Data after kinematics and collision))."""
  def run(qpos):
    d = flexor.kinematics.kinematics(m, flexor.make_data(m).replace(qpos=qpos))
    return flexor.collision.collision(m, d)
  return jax.jit(jax.vmap(run))


def match_contacts(mj: mujoco.MjModel, d: flexor.Data, qs: np.ndarray, what: str,
                   dist_tol: float = 1e-8, geom_tol: float = 1e-4, frame: bool = True
                   ) -> list[tuple[np.ndarray, float]]:
  """Compares the contacts of batched Data ``d`` at poses ``qs`` with MuJoCo's, in order: the
  same count and geoms, dist within ``dist_tol``, pos (and frame) within ``geom_tol``. Returns,
  for each contact MuJoCo found, its geom pair and the largest difference in dist, pos and
  frame."""
  md = mujoco.MjData(mj)
  errors = []
  for i, q in enumerate(qs):
    md.qpos[:] = q
    mujoco.mj_forward(mj, md)
    exist = np.asarray(d.contact_exist[i])
    where = f"{what} pose {i}"
    assert exist.sum() == md.ncon, (where, exist.sum(), md.ncon)
    for k, c in zip(np.flatnonzero(exist), md.contact[:md.ncon]):
      np.testing.assert_array_equal(d.contact_geom[i, k], c.geom, err_msg=where)
      np.testing.assert_allclose(d.contact_dist[i, k], c.dist, atol=dist_tol, err_msg=where)
      np.testing.assert_allclose(d.contact_pos[i, k], c.pos, atol=geom_tol, err_msg=where)
      ours_frame = np.asarray(d.contact_frame[i, k]).reshape(-1)
      if frame:
        np.testing.assert_allclose(ours_frame, c.frame, atol=geom_tol, err_msg=where)
      errors.append((np.array(c.geom), max(abs(float(d.contact_dist[i, k]) - c.dist),
                                           np.abs(np.asarray(d.contact_pos[i, k]) - c.pos).max(),
                                           np.abs(ours_frame - c.frame).max())))
  return errors


def primitives(jaxpr: jax.extend.core.Jaxpr) -> collections.Counter:
  """How often each primitive occurs in a jaxpr and its sub-jaxprs (cond branches, loop and
  checkpoint bodies)."""
  count = collections.Counter()
  for e in jaxpr.eqns:
    count[e.primitive.name] += 1
    for p in e.params.values():
      for sub in p if isinstance(p, (tuple, list)) else (p,):
        sub = getattr(sub, "jaxpr", sub)
        if hasattr(sub, "eqns"):
          count.update(primitives(sub))
  return count


def cond_count(jaxpr: jax.extend.core.Jaxpr) -> int:
  """The cond primitives in a jaxpr and its sub-jaxprs."""
  return primitives(jaxpr)["cond"]
