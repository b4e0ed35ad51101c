"""Shared cases for the smooth-dynamics conformance tests (crb, rne, passive, forward, inverse).

Every model is loaded once, with MuJoCo's ``SMOOTH_ONLY`` disable bits, and evaluated at
``NSTATE`` random states by MuJoCo C and by one jitted, vmapped flexor function, so each model
compiles once for all four test files. Tendon springs, dampers and armature are kept: the tendon
stage runs in forward, so they enter qM, qfrc_bias and the passive forces on both sides.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp
import mujoco
import numpy as np

import support
from flexor import make_data
from flexor.crb import solve_m
from flexor.forward import forward, inv_acceleration
from flexor.mjcf.from_mujoco import from_mujoco
from flexor.passive import passive
from flexor.rne import rne, rne_postconstraint
from flexor.types import Data, Model

NSTATE = 3

# Conformance tolerance (relative error |a - b| / (1 + |b|)). Sums run in a different order than
# in C and qM is factored by Cholesky instead of sparse LDL', so agreement is to rounding times
# the condition number of qM: ~1e-12 on most models, 1e-8 leaves room for dog and humanoid_CMU.
TOL = 1e-8

# Condition number of qM beyond which its factor and qacc are not compared (see Case.singular).
SINGULAR_COND = 1e12

FORWARD_FIELDS = ("crb", "qM", "qfrc_bias", "qfrc_spring", "qfrc_damper", "qfrc_gravcomp",
                  "qfrc_fluid", "qfrc_passive", "qfrc_actuator", "qfrc_smooth", "qacc_smooth",
                  "qacc", "qfrc_constraint")
ACC_FIELDS = ("qfrc_inverse", "rne_acc", "cacc", "cfrc_int", "cfrc_ext")


def mujoco_model(path: str, disable: int = 0) -> mujoco.MjModel:
  """MjModel at ``path`` with SMOOTH_ONLY | disable set."""
  m = mujoco.MjModel.from_xml_path(path)
  prepare(m, disable)
  return m


def prepare(m: mujoco.MjModel, disable: int = 0, smooth_only: bool = True) -> None:
  """Sets the disable bits on ``m`` (SMOOTH_ONLY unless ``smooth_only`` is False)."""
  if smooth_only:
    m.opt.disableflags |= support.SMOOTH_ONLY
  m.opt.disableflags |= disable


@dataclasses.dataclass
class States:
  """NSTATE random inputs, stacked."""

  qpos: np.ndarray
  qvel: np.ndarray
  qacc: np.ndarray
  qfrc_applied: np.ndarray
  xfrc_applied: np.ndarray
  ctrl: np.ndarray


def random_states(m: mujoco.MjModel, seed: int = 0, scale: float = 0.3) -> States:
  """qpos around qpos0 (unit quaternions), and normal qvel, qacc, applied forces, ctrl."""
  rng = np.random.default_rng(seed)
  qpos = m.qpos0 + scale * rng.normal(size=(NSTATE, m.nq))
  for q in qpos:
    mujoco.mj_normalizeQuat(m, q)
  xfrc = rng.normal(size=(NSTATE, m.nbody, 6))
  xfrc[:, 0] = 0.0
  return States(qpos=qpos, qvel=rng.normal(size=(NSTATE, m.nv)),
                qacc=rng.normal(size=(NSTATE, m.nv)),
                qfrc_applied=rng.normal(size=(NSTATE, m.nv)), xfrc_applied=xfrc,
                ctrl=rng.normal(size=(NSTATE, m.nu)))


def mujoco_results(m: mujoco.MjModel, states: States) -> dict[str, np.ndarray]:
  """MuJoCo C's FORWARD_FIELDS after mj_forward and ACC_FIELDS after mj_inverse, stacked."""
  out: dict[str, list[np.ndarray]] = {k: [] for k in FORWARD_FIELDS + ACC_FIELDS}
  for s in range(NSTATE):
    d = mujoco.MjData(m)
    d.qpos[:], d.qvel[:] = states.qpos[s], states.qvel[s]
    d.qfrc_applied[:], d.xfrc_applied[:] = states.qfrc_applied[s], states.xfrc_applied[s]
    d.ctrl[:] = states.ctrl[s]
    mujoco.mj_forward(m, d)
    full = np.zeros((m.nv, m.nv))
    mujoco.mj_fullM(m, d, full)
    for k in FORWARD_FIELDS:
      out[k].append(full if k == "qM" else np.array(getattr(d, k)))
    d.qacc[:] = states.qacc[s]
    mujoco.mj_inverse(m, d)
    out["qfrc_inverse"].append(np.array(d.qfrc_inverse))
    acc = np.zeros(m.nv)
    mujoco.mj_rne(m, d, 1, acc)
    out["rne_acc"].append(acc)
    mujoco.mj_rnePostConstraint(m, d)
    for k in ("cacc", "cfrc_int", "cfrc_ext"):
      out[k].append(np.array(getattr(d, k)))
  return {k: np.stack(v) for k, v in out.items()}


def flexor_data(fm: Model, states: States) -> Data:
  """Batched flexor Data holding ``states`` (qacc is the random one, for the inverse stages)."""
  d = make_data(fm, batch_shape=(NSTATE,))
  dtype = d.qpos.dtype
  return d.replace(qpos=jnp.asarray(states.qpos, dtype), qvel=jnp.asarray(states.qvel, dtype),
                   qacc=jnp.asarray(states.qacc, dtype),
                   qfrc_applied=jnp.asarray(states.qfrc_applied, dtype),
                   xfrc_applied=jnp.asarray(states.xfrc_applied, dtype),
                   ctrl=jnp.asarray(states.ctrl, dtype))


def _evaluate(m: Model, d: Data) -> tuple[Data, dict[str, jax.Array]]:
  """forward, then inverse-side quantities at the random qacc kept in ``d``; one state."""
  fwd = forward(m, d)
  acc = fwd.replace(qacc=d.qacc)
  inv = inv_acceleration(m, acc)
  post = rne_postconstraint(m, acc)
  extra = dict(qfrc_inverse=inv.qfrc_inverse, rne_acc=rne(m, acc, flg_acc=True),
               cacc=post.cacc, cfrc_int=post.cfrc_int, cfrc_ext=post.cfrc_ext,
               solve_eye=solve_m(m, fwd, jnp.eye(m.nv, dtype=fwd.qM.dtype)))
  return fwd, extra


# Compiled once per model structure; a plain loop over states compiles faster than vmap here.
evaluate = jax.jit(_evaluate)


@dataclasses.dataclass
class Case:
  """One model's inputs and both engines' outputs."""

  mj: mujoco.MjModel
  fm: Model
  states: States
  expected: dict[str, np.ndarray]
  data: Data                   # flexor forward output, batched over states
  extra: dict[str, Any]        # flexor inverse-side outputs, batched

  @property
  def singular(self) -> bool:
    """MuJoCo's qM is numerically singular at some state (e.g. a redundant slide joint).

    Then qacc is undefined: MuJoCo warns and returns rounding noise of order 1e15, flexor's
    Cholesky factor is NaN and forward sets warning_nan. Neither is comparable.
    """
    qM = self.expected["qM"]
    return bool(qM.shape[-1]) and bool(np.max(np.linalg.cond(qM)) > SINGULAR_COND)

  def actual(self, field: str) -> np.ndarray:
    if field in self.extra:
      return np.asarray(self.extra[field])
    return np.asarray(getattr(self.data, field))


def make_case(mj: mujoco.MjModel, seed: int = 0, zero_ctrl: bool = False) -> Case:
  """Evaluates ``mj`` (already prepared) with MuJoCo C and flexor at NSTATE random states.

  ``zero_ctrl`` keeps ctrl at zero, for models whose actuation is enabled (actuator forces are
  not implemented yet; actuator gravity compensation is).
  """
  fm = from_mujoco(mj)
  states = random_states(mj, seed)
  if zero_ctrl:
    states.ctrl[:] = 0.0
  batch = flexor_data(fm, states)
  outputs = [evaluate(fm, jax.tree.map(lambda x, s=s: x[s], batch)) for s in range(NSTATE)]
  data, extra = jax.tree.map(lambda *x: jnp.stack(x), *outputs)
  return Case(mj=mj, fm=fm, states=states, expected=mujoco_results(mj, states), data=data,
              extra=extra)


@functools.cache
def case(name: str) -> Case:
  """The conformance case of model ``name`` from ``support.model_paths()``."""
  return make_case(mujoco_model(support.model_paths()[name]))


def model_names() -> list:
  """Every conformance model as a pytest parameter, those outside the default sweep slow."""
  return support.sweep(support.model_paths())


PASSIVE_FIELDS = ("qfrc_spring", "qfrc_damper", "qfrc_gravcomp", "qfrc_fluid", "qfrc_passive")

_passive = jax.jit(passive)


Fields = dict[str, np.ndarray]


def passive_only(base: Case, mj: mujoco.MjModel) -> tuple[Fields, Fields]:
  """PASSIVE_FIELDS of ``mj`` (``base.mj`` with other options) at ``base``'s states.

  Only ``passive`` is recompiled: it reuses the kinematics of base's forward pass, which the
  disable bits of the passive forces do not change. Returns (flexor, MuJoCo) fields, stacked.
  """
  fm = from_mujoco(mj)
  actual: dict[str, list[np.ndarray]] = {k: [] for k in PASSIVE_FIELDS}
  expected: dict[str, list[np.ndarray]] = {k: [] for k in PASSIVE_FIELDS}
  for s in range(NSTATE):
    out = _passive(fm, jax.tree.map(lambda x, s=s: x[s], base.data))
    d = mujoco.MjData(mj)
    d.qpos[:], d.qvel[:] = base.states.qpos[s], base.states.qvel[s]
    mujoco.mj_forward(mj, d)
    for k in PASSIVE_FIELDS:
      actual[k].append(np.asarray(getattr(out, k)))
      expected[k].append(np.array(getattr(d, k)))
  return ({k: np.stack(v) for k, v in actual.items()},
          {k: np.stack(v) for k, v in expected.items()})


# A small model that exercises every passive term: free, ball, hinge and slide springs and
# dampers, gravity compensation (two joints route it through actuators, one with a force limit
# that binds), and a fluid with density, viscosity and wind on bodies of different shapes.
OWN_XML = """
<mujoco>
  <option density="1.3" viscosity="0.02" wind="0.5 -1 0.2" gravity="0.3 -0.2 -9.81"/>
  <worldbody>
    <body pos="0 0 1" gravcomp="0.7">
      <joint type="free" stiffness="3" damping="0.3"/>
      <geom type="box" size=".1 .2 .3"/>
      <body pos="0 0 .5" gravcomp="1">
        <joint type="ball" stiffness="2" damping=".2"/>
        <geom type="capsule" size=".05" fromto="0 0 0 0 .3 0"/>
        <body pos="0 .3 0" gravcomp="0.4">
          <joint name="hinge" type="hinge" axis="1 0 0" stiffness="2" springref="20" damping=".2"
                 actuatorgravcomp="true" actuatorfrcrange="-0.05 0.05"/>
          <joint name="slide" type="slide" axis="0 1 0" stiffness="5" springref="0.1"
                 damping=".5" actuatorgravcomp="true"/>
          <geom type="ellipsoid" size=".1 .05 .02"/>
        </body>
      </body>
    </body>
    <body pos="1 0 0">
      <joint type="ball" stiffness="4" damping=".1"/>
      <geom type="box" size=".3 .02 .1" pos=".2 0 0"/>
    </body>
  </worldbody>
  <actuator>
    <motor joint="hinge"/>
    <motor joint="slide"/>
  </actuator>
</mujoco>
"""


def own_model(disable: int = 0) -> mujoco.MjModel:
  """OWN_XML with actuation enabled and ball/free spring references off qpos0."""
  m = mujoco.MjModel.from_xml_string(OWN_XML)
  dsbl = mujoco.mjtDisableBit
  prepare(m, disable | dsbl.mjDSBL_CONTACT | dsbl.mjDSBL_CONSTRAINT, smooth_only=False)
  rng = np.random.default_rng(7)
  for j in np.flatnonzero(m.jnt_type <= int(mujoco.mjtJoint.mjJNT_BALL)):
    adr = m.jnt_qposadr[j] + (3 if m.jnt_type[j] == mujoco.mjtJoint.mjJNT_FREE else 0)
    quat = rng.normal(size=4)
    m.qpos_spring[adr:adr + 4] = quat / np.linalg.norm(quat)
  return m
