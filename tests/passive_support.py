"""Cases for the tendon, polynomial, plastic, actuator-damping and fluid terms of passive and crb.

Tendon quantities come from the tendon stage. To test passive and crb on their own, a
``TendonCase`` runs MuJoCo C at ``smooth_support.NSTATE`` random states and puts MuJoCo's
ten_length, ten_J (made dense) and ten_velocity, and a perturbed plastic state, into flexor's Data;
flexor then runs kinematics, com_pos, crb, com_vel and passive (``stages``), never the tendon
stage, so these cases stay meaningful whether or not forward computes tendons.

The own models here exercise what the conformance models lack: polynomial joint and tendon
springs and dampers, spring dead bands, plastic joints and tendons, actuator damping and armature
on joints and tendons, tendon armature across two trees (``TENDON_XML``); the ellipsoid fluid model
on every geom shape with different coefficients, mixed with inertia-box bodies, with density,
viscosity and wind (``FLUID_XML``); and plastic joints for stepping (``PLASTIC_XML``).
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import mujoco
import numpy as np

import smooth_support as S
import support
from flexor import kinematics, make_data
from flexor.crb import crb
from flexor.mjcf.from_mujoco import from_mujoco
from flexor.passive import passive
from flexor.types import Data, Model

PASSIVE_FIELDS = ("qfrc_spring", "qfrc_damper", "qfrc_fluid", "qfrc_passive")
FIELDS = PASSIVE_FIELDS + ("qM",)

# Corpus models with tendon springs, dampers or armature that the default test tier keeps.
REPRESENTATIVE = ("dmc/fish", "mjx/pendula", "mjx/tendon/armature", "own/actuators")

TENDON_XML = """
<mujoco>
  <compiler angle="radian"/>
  <worldbody>
    <site name="anchor" pos="0 0 1.5"/>
    <site name="anchor2" pos="0.5 0.5 1.0"/>
    <body name="a" pos="0 0 1">
      <joint name="h0" type="hinge" axis="0 1 0" stiffness="2 0.5 0.3" damping="0.3 0.1 0.05"
             springref="0.2"/>
      <geom type="capsule" size=".05" fromto="0 0 0 .4 0 0"/>
      <site name="sa" pos=".2 0 .05"/>
      <body pos=".4 0 0">
        <joint name="b1" type="ball" stiffness="3 -0.4 0.6" damping="0.2 0.05 0.02"
               springyield="0.3"/>
        <geom type="capsule" size=".04" fromto="0 0 0 0 .3 0"/>
        <site name="sb" pos="0 .3 0"/>
        <body pos="0 .3 0">
          <joint name="s2" type="slide" axis="1 0 0" stiffness="5 1 2" springref="0.05"
                 springyield="0.02" damping="0.5 0 0.3"/>
          <joint name="h3" type="hinge" axis="0 0 1" stiffness="1" springyield="0.1"/>
          <geom type="box" size=".05 .05 .05"/>
          <site name="sc" pos=".05 0 0"/>
        </body>
      </body>
    </body>
    <body name="f" pos="1 0 1">
      <joint name="free" type="free" stiffness="2 0.3 0.1" damping="0.1 0.02 0.01"/>
      <geom type="box" size=".1 .05 .02"/>
      <site name="sf" pos=".1 0 0"/>
    </body>
    <body name="g" pos="0 2 1">
      <joint name="h4" type="hinge" axis="1 0 0" damping="0.1"/>
      <geom type="capsule" size=".05" fromto="0 0 0 0 .3 0"/>
    </body>
  </worldbody>
  <tendon>
    <spatial name="sp1" stiffness="4 0.5 0.2" damping="0.3 0.1 0.05" springlength="0.5 0.6"
             springyield="0.05" armature="0.2">
      <site site="anchor"/><site site="sa"/><site site="sb"/><site site="sc"/>
    </spatial>
    <spatial name="sp2" stiffness="3" damping="0.2" armature="0.1">
      <site site="anchor2"/><site site="sf"/>
    </spatial>
    <fixed name="fx1" stiffness="6 -1 0.5" damping="0.4 0.2 0" springlength="0 0.5"
           springyield="0.03" armature="0.3">
      <joint joint="h0" coef="1.5"/><joint joint="h4" coef="-0.7"/><joint joint="s2" coef="2"/>
    </fixed>
    <fixed name="fx2" stiffness="2" springlength="-0.1 0.1" damping="0.1">
      <joint joint="h3" coef="1"/><joint joint="h4" coef="0.5"/>
    </fixed>
  </tendon>
  <actuator>
    <motor name="m0" joint="h0" gear="2" damping="0.3 0.1 0.05" armature="0.2"/>
    <motor name="m1" joint="h0" gear="-3" damping="0.5" armature="0.1"/>
    <motor name="m2" joint="b1" gear="1.5 0 0 0 0 0" damping="0.3" armature="0.4"/>
    <motor name="m3" tendon="fx1" gear="1.5" damping="0.7 0.2 0" armature="0.3"/>
    <motor name="m4" tendon="sp1" gear="0.5" damping="0.2" armature="0.05"/>
  </actuator>
</mujoco>
"""

FLUID_XML = """
<mujoco>
  <option density="1.2" viscosity="0.15" wind="0.6 -0.8 0.3"/>
  <worldbody>
    <body name="swimmer" pos="0 0 1">
      <freejoint/>
      <geom type="ellipsoid" size=".2 .08 .04" fluidshape="ellipsoid"
            fluidcoef="0.5 0.25 1.5 1.0 1.0"/>
      <geom type="sphere" size=".05" pos=".2 0 0" fluidshape="ellipsoid"
            fluidcoef="0.3 0.1 2.0 0.5 0.8"/>
      <body name="tail" pos="-.25 0 0">
        <joint type="hinge" axis="0 0 1"/>
        <joint type="hinge" axis="0 1 0"/>
        <geom type="capsule" size=".03 .1" euler="0 1.2 0.3" fluidshape="ellipsoid"
              fluidcoef="0.6 0.4 1.0 2.0 0.2"/>
        <geom type="box" size=".02 .03 .04" pos="-.1 0 0"/>
        <body name="fin" pos="-.15 0 0">
          <joint type="ball"/>
          <geom type="cylinder" size=".04 .02" euler="0.4 0 0" fluidshape="ellipsoid"
                fluidcoef="1.0 0.5 0.8 1.5 1.2"/>
          <geom type="box" size=".06 .02 .01" pos="-.05 0 0" fluidshape="ellipsoid"
                fluidcoef="0.2 0.3 0.4 3.0 0.5"/>
        </body>
      </body>
      <body name="boxy" pos=".3 0 0">
        <joint type="slide" axis="1 0 0"/>
        <geom type="box" size=".05 .04 .03"/>
      </body>
    </body>
    <body name="ball" pos="1 0 1">
      <freejoint/>
      <geom type="sphere" size=".1" fluidshape="ellipsoid"/>
    </body>
  </worldbody>
</mujoco>
"""

# Plastic hinge, ball and slide joints with polynomial springs and dampers and actuator damping,
# no tendons and no free joint: flexor's whole step (all integrators) against mj_step.
PLASTIC_XML = """
<mujoco>
  <compiler angle="radian"/>
  <option timestep="0.005"/>
  <worldbody>
    <body pos="0 0 1">
      <joint name="h0" type="hinge" axis="0 1 0" stiffness="20 5 3" damping="0.3 0.1 0.05"
             springref="0.2" springyield="0.05"/>
      <geom type="capsule" size=".05" fromto="0 0 0 .4 0 0"/>
      <body pos=".4 0 0">
        <joint name="b1" type="ball" stiffness="30 -4 6" damping="0.2 0.05 0.02"
               springyield="0.1"/>
        <geom type="capsule" size=".04" fromto="0 0 0 0 .3 0"/>
        <body pos="0 .3 0">
          <joint name="s2" type="slide" axis="1 0 0" stiffness="50 1 2" springref="0.05"
                 springyield="0.02" damping="0.5 0 0.3"/>
          <geom type="box" size=".05 .05 .05"/>
        </body>
      </body>
    </body>
  </worldbody>
  <actuator>
    <motor name="m0" joint="h0" gear="2" damping="0.3 0.1 0.05" armature="0.2"/>
    <motor name="m2" joint="b1" gear="1.5 0 0 0 0 0" damping="0.3" armature="0.4"/>
  </actuator>
</mujoco>
"""

OWN = {"tendon": TENDON_XML, "fluid": FLUID_XML, "plastic": PLASTIC_XML}


def own_model(name: str, disable: int = 0) -> mujoco.MjModel:
  """One of OWN's models with SMOOTH_ONLY | disable set (actuator damping acts regardless)."""
  m = mujoco.MjModel.from_xml_string(OWN[name])
  m.opt.disableflags |= support.SMOOTH_ONLY | disable
  return m


def dense_ten_J(m: mujoco.MjModel, d: mujoco.MjData) -> np.ndarray:
  """MuJoCo's ten_J as a dense (ntendon, nv) matrix (MuJoCo 4 stores it sparse)."""
  dense = np.zeros((m.ntendon, m.nv))
  if m.ntendon and m.nv:
    mujoco.mju_sparse2dense(dense, d.ten_J, m.ten_J_rownnz, m.ten_J_rowadr, m.ten_J_colind)
  return dense


def perturb_plastic(m: mujoco.MjModel, plastic: np.ndarray, rng: np.random.Generator,
                    scale: float) -> None:
  """Moves the plastic references off their initial values (ball quaternions stay unit)."""
  plastic += scale * rng.normal(size=plastic.shape)
  for j in np.flatnonzero((m.jnt_plasticadr >= 0) & (m.jnt_type == mujoco.mjtJoint.mjJNT_BALL)):
    adr = m.jnt_plasticadr[j]
    plastic[adr:adr + 4] /= np.linalg.norm(plastic[adr:adr + 4])


def _stages(m: Model, d: Data) -> Data:
  """kinematics, com_pos, crb, com_vel, passive with the tendon quantities already in ``d``."""
  d = kinematics.kinematics(m, d)
  d = kinematics.com_pos(m, d)
  d = crb(m, d)
  d = kinematics.com_vel(m, d)
  return passive(m, d)


stages = jax.jit(_stages)


@dataclasses.dataclass
class TendonCase:
  """Inputs (MuJoCo's tendon quantities included) and both engines' FIELDS, stacked."""

  mj: mujoco.MjModel
  fm: Model
  inputs: Data                  # batched flexor Data holding the injected inputs
  expected: dict[str, np.ndarray]
  actual: dict[str, np.ndarray]


def mujoco_inputs(m: mujoco.MjModel, seed: int = 0, plastic_scale: float = 0.05):
  """NSTATE MuJoCo Data after mj_forward at random states with perturbed plastic references."""
  states = S.random_states(m, seed)
  rng = np.random.default_rng(seed + 100)
  out = []
  for s in range(S.NSTATE):
    d = mujoco.MjData(m)
    d.qpos[:], d.qvel[:] = states.qpos[s], states.qvel[s]
    if m.nplastic:
      perturb_plastic(m, d.plastic, rng, plastic_scale)
    mujoco.mj_forward(m, d)
    out.append(d)
  return out


def flexor_inputs(fm: Model, m: mujoco.MjModel, datas: list[mujoco.MjData]) -> Data:
  """Batched flexor Data with the state, plastic state and tendon quantities of ``datas``."""
  d = make_data(fm, batch_shape=(len(datas),))
  dtype = d.qpos.dtype
  stack = lambda f: jnp.asarray(np.stack([f(x) for x in datas]), dtype)  # noqa: E731
  return d.replace(qpos=stack(lambda x: x.qpos), qvel=stack(lambda x: x.qvel),
                   plastic=stack(lambda x: x.plastic), ten_length=stack(lambda x: x.ten_length),
                   ten_J=stack(lambda x: dense_ten_J(m, x)),
                   ten_velocity=stack(lambda x: x.ten_velocity))


def make_case(m: mujoco.MjModel, seed: int = 0) -> TendonCase:
  """Evaluates ``m`` (flags already set) by MuJoCo C and by flexor with injected tendon state."""
  fm = from_mujoco(m)
  datas = mujoco_inputs(m, seed)
  inputs = flexor_inputs(fm, m, datas)
  expected: dict[str, list[np.ndarray]] = {k: [] for k in FIELDS}
  actual: dict[str, list[np.ndarray]] = {k: [] for k in FIELDS}
  for s, d in enumerate(datas):
    full = np.zeros((m.nv, m.nv))
    mujoco.mj_fullM(m, d, full)
    out = stages(fm, jax.tree.map(lambda x, s=s: x[s], inputs))
    for k in FIELDS:
      expected[k].append(full if k == "qM" else np.array(getattr(d, k)))
      actual[k].append(np.asarray(getattr(out, k)))
  return TendonCase(mj=m, fm=fm, inputs=inputs,
                    expected={k: np.stack(v) for k, v in expected.items()},
                    actual={k: np.stack(v) for k, v in actual.items()})


@functools.cache
def corpus_tendon_models() -> tuple[str, ...]:
  """Conformance models with tendons (their stiffness, damping and armature kept)."""
  return tuple(name for name, path in support.model_paths().items()
               if mujoco.MjModel.from_xml_path(path).ntendon)


@functools.cache
def case(name: str) -> TendonCase:
  """The TendonCase of own model ``own:<name>`` or of conformance model ``name``."""
  if name.startswith("own:"):
    return make_case(own_model(name[4:]), seed=5)
  m = mujoco.MjModel.from_xml_path(support.model_paths()[name])
  m.opt.disableflags |= support.SMOOTH_ONLY
  return make_case(m)


def case_params() -> list:
  """pytest parameters: the own models, REPRESENTATIVE, and (slow) the other tendon models."""
  import pytest  # pylint: disable=import-outside-toplevel
  names: list = ["own:tendon", "own:fluid"]
  for name in corpus_tendon_models():
    names.append(name if name in REPRESENTATIVE else pytest.param(name, marks=pytest.mark.slow))
  return names
