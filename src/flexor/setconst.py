"""Compile-time constants that need the simulation pipeline (MuJoCo's ``mj_setConst``,
``AutoSpringDamper`` and ``LengthRange``).

The host-side compiler produces a Model whose position-dependent constants are still unset; this
module runs flexor's own stages once at ``qpos0`` (and ``qpos_spring``) to fill them, exactly as
MuJoCo's compiler does after assembling mjModel:

* at qpos0 (``set0``): ``tendon_length0``, ``actuator_length0``, ``dof_M0`` (diagonal of the
  joint-space inertia from composite inertias, with joint and actuator armature),
  ``dof_invweight0``, ``tendon_invweight0``, ``actuator_acc0`` (norm of qM^-1 moment), and, as
  MuJoCo 4's compiler does, kv of servos given a ``dampratio`` (``_dampratio``);
* at qpos_spring: ``tendon_lengthspring`` of tendons whose springlength was not given (-1);
* ``springdamper``: joint stiffness and damping from a time constant and damping ratio, using the
  mean ``dof_invweight0`` of the joint;
* ``lengthrange`` of muscles (``<compiler><lengthrange>``): copied from the joint or tendon range,
  or found by simulation, pushing the actuator to each end with a constant acceleration while
  velocities decay, and taking the extremes of the last ``interval`` seconds.

Runs eagerly on the host's default device; the result is an ordinary Model. The boundary stays
one-way: the compiler never imports this module; ``flexor.io`` calls it after ``assemble``.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np

from flexor import integrate, kinematics, math, transmission
from flexor.crb import crb, dof_armature, factor_m, solve_m
from flexor.tendon import tendon
from flexor.types import (JNT_NV, BiasType, Data, DisableBit, GainType, IntegratorType, JointType,
                          Model, TrnType, device_array, initial_plastic, make_data)


@dataclasses.dataclass(frozen=True)
class LengthRangeOptions:
  """``<compiler><lengthrange>`` (mjLROpt) with MuJoCo's defaults. mode: 0 none, 1 muscle,
  2 muscleuser, 3 all."""

  mode: int = 1
  useexisting: bool = True
  uselimit: bool = False
  accel: float = 20.0
  maxforce: float = 0.0
  timeconst: float = 1.0
  timestep: float = 0.01
  inttotal: float = 10.0
  interval: float = 2.0
  tolrange: float = 0.05


@dataclasses.dataclass(frozen=True)
class Pending:
  """What the compiler leaves for this pass besides the Model itself.

  springdamper: (njnt, 2) (timeconst, dampratio) per joint; zeros where not given.
  lengthrange: the lengthrange computation options.
  """

  springdamper: np.ndarray
  lengthrange: LengthRangeOptions = LengthRangeOptions()


class LengthRangeError(ValueError):
  """A muscle's lengthrange could not be determined; ``actuator`` is its id."""

  def __init__(self, actuator: int, message: str):
    super().__init__(message)
    self.actuator = actuator


def _dof_m0(m: Model, d) -> jax.Array:
  """(nv,) cdof' crb cdof + armature (mj_setM0): qM's diagonal without tendon armature."""
  buf = math.inert_mul(d.crb[m.dof_bodyid], d.cdof)
  return dof_armature(m) + jnp.sum(d.cdof * buf, axis=-1)


def _invweight(m: Model, d) -> tuple[jax.Array, jax.Array]:
  """(dof_invweight0 (nv,), tendon_invweight0 (ntendon,)) from qM^-1 at qpos0."""
  minv = solve_m(m, d, jnp.eye(m.nv, dtype=d.qM.dtype)) if m.nv else d.qM
  diag = jnp.diagonal(minv)
  dof = diag
  for jtype, groups in ((JointType.FREE, ((0, 3), (3, 6))), (JointType.BALL, ((0, 3),))):
    for j in np.flatnonzero(m.jnt_type == jtype):
      for a, b in groups:
        sl = slice(m.jnt_dofadr[j] + a, m.jnt_dofadr[j] + b)
        dof = dof.at[sl].set(jnp.mean(diag[sl]))
  # slide-only simple bodies: MuJoCo takes 1 / mass, the exact value when nothing else moves them
  simple = np.flatnonzero(m.body_simple[m.dof_bodyid] == 2)
  if simple.size:
    mass = m.body_mass[m.dof_bodyid[simple]]
    dof = dof.at[simple].set(1 / jnp.maximum(math.MINVAL, mass))
  tendon = jnp.einsum("tv,vw,tw->t", d.ten_J, minv, d.ten_J)
  return dof, tendon


def _body_invweight(m: Model, d: Data) -> jax.Array:
  """(nbody, 2) body_invweight0: the mean diagonal of J qM^-1 J' at qpos0, J the body's com
  Jacobian, over (translation, rotation); 1 / mass for slide-only simple bodies, 0 for bodies
  that no dof moves."""
  jacp, jacr = kinematics.jac(m, d, d.xipos, np.arange(m.nbody))      # (nbody, nv, 3)
  jac = jnp.concatenate([jacp, jacr], axis=-1)                          # (nbody, nv, 6)
  minv_jac = solve_m(m, d, jnp.moveaxis(jac, 1, 0).reshape(m.nv, -1)).reshape(m.nv, m.nbody, 6)
  diag = jnp.einsum("bvk,vbk->bk", jac, minv_jac)
  tran, rot = jnp.mean(diag[:, :3], axis=-1), jnp.mean(diag[:, 3:], axis=-1)
  simple = m.body_simple == 2
  tran = jnp.where(simple, 1 / jnp.maximum(math.MINVAL, m.body_mass), tran)
  rot = jnp.where(simple, 0.0, rot)
  moving = (m.body_dofnum[m.body_weldid] > 0) & (np.arange(m.nbody) > 0)
  return jnp.where(moving[:, None], jnp.stack([tran, rot], axis=-1), 0.0)


def _dampratio_actuators(m: Model) -> tuple[int, ...]:
  """Actuators whose biasprm[2] holds a dampratio left by the compiler (host values): pid, SO3,
  and fixed-gain servos with gainprm[0] = -biasprm[1], with a positive biasprm[2]."""
  bias, gain = np.asarray(m.actuator_biasprm), np.asarray(m.actuator_gainprm)
  servo = (np.isin(m.actuator_gaintype, (GainType.PID, GainType.SO3))
           | (gain[:, 0] == -bias[:, 1]))
  return tuple(int(i) for i in np.flatnonzero(servo & (bias[:, 2] > 0)))


def _dampratio(m: Model, d, act: tuple[int, ...]) -> jax.Array:
  """actuator_biasprm with the dampratio of actuators ``act`` turned into kv.

  kv = dampratio * 2 sqrt(kp m) with kp = -biasprm[1] for pid, else gainprm[0], and the
  reflected mass m = 1 / mean_o(J_o qM^-1 J_o') over the actuator's outputs o at qpos0 (qM with
  every armature; m = 0 when the mean vanishes), stored as biasprm[2] = -kv.
  """
  if not act:
    return m.actuator_biasprm
  ids = np.array(act)
  bias = m.actuator_biasprm
  kp = jnp.where(m.actuator_gaintype[ids] == GainType.PID, -bias[ids, 1],
                 m.actuator_gainprm[ids, 0])
  reflected = jnp.sum(d.actuator_moment * solve_m(m, d, d.actuator_moment.T).T, axis=-1)
  mean = jnp.stack([jnp.mean(reflected[m.actuator_outadr[i]:m.actuator_outadr[i]
                                       + m.actuator_outnum[i]]) for i in ids])
  mass = jnp.where(mean < math.MINVAL, 0.0, 1.0 / jnp.where(mean < math.MINVAL, 1.0, mean))
  kv = bias[ids, 2] * 2 * jnp.sqrt(kp * mass)
  return bias.at[ids, 2].set(-kv)


def _set0_position(m: Model, d: Data) -> Data:
  """The position stages mj_setConst runs at qpos0 (and the lengthrange simulation reads):
  fwd_position without collision and constraints, so the Data holds no contacts (MuJoCo's set0
  sees ncon = 0, which is what an adhesion actuator's moment there is made of) and a model's
  constants cost no narrow phase (its tracing is most of a small model's load time)."""
  d = kinematics.com_pos(m, kinematics.kinematics(m, d))
  d = factor_m(m, crb(m, tendon(m, d)))
  return transmission.transmission(m, d)


def _spring_lengths(m: Model, d: Data) -> jax.Array:
  """tendon_lengthspring with unset (-1, -1) rows replaced by the length at qpos_spring."""
  d = tendon(m, kinematics.com_pos(m, kinematics.kinematics(m, d.replace(qpos=m.qpos_spring))))
  unset = jnp.all(m.tendon_lengthspring == -1, axis=-1, keepdims=True)
  return jnp.where(unset, d.ten_length[:, None], m.tendon_lengthspring)


# A one-shot evaluation: XLA's cheapest optimisation halves its compile time, which is most of
# the cost of loading a model; on a CPU, the older elemental emitters compile it faster still
# (dm_control's humanoid loads in 3.0 s instead of 3.6 s).
_ONE_SHOT = {"xla_backend_optimization_level": 0, "xla_llvm_disable_expensive_passes": True,
             "xla_cpu_use_fusion_emitters": False}


@functools.partial(jax.jit, static_argnames=("dampratio", "springs"), compiler_options=_ONE_SHOT)
def _constants(m: Model, reset: Data, dampratio: tuple[int, ...],
               springs: bool) -> dict[str, jax.Array]:
  """The Model fields computed at qpos0 (and, if ``springs``, the spring lengths); ``reset``
  is ``make_data(m)``."""
  d = _set0_position(m, reset)
  dof_invweight0, tendon_invweight0 = _invweight(m, d)
  acc0 = (jnp.linalg.norm(solve_m(m, d, d.actuator_moment.T), axis=0) if m.nv
          else jnp.zeros(m.nout, dtype=d.qpos.dtype))
  out = dict(tendon_length0=d.ten_length, actuator_length0=d.actuator_length,
             dof_M0=_dof_m0(m, d), dof_invweight0=dof_invweight0,
             tendon_invweight0=tendon_invweight0, actuator_acc0=acc0,
             body_invweight0=_body_invweight(m, d) if m.nv else m.body_invweight0,
             stat_meaninertia=jnp.mean(jnp.diagonal(d.qM)) if m.nv else m.stat_meaninertia,
             actuator_biasprm=_dampratio(m, d, dampratio))
  out.update(_camlight0(m, d))
  if springs:
    out["tendon_lengthspring"] = _spring_lengths(m, reset)
  return out


def _camlight0(m: Model, d: Data) -> dict[str, jax.Array]:
  """cam_pos0, cam_poscom0, cam_mat0, light_pos0, light_poscom0, light_dir0: the fixed-mode
  frames at qpos0 relative to the body, and to the subtree com of the target (else the body)."""
  cam_xpos, cam_xmat, light_xpos, light_xdir = kinematics.fixed_camlight(m, d)
  com = lambda target, body: d.subtree_com[np.where(target >= 0, target, body)]
  return dict(cam_pos0=cam_xpos - d.xpos[m.cam_bodyid],
              cam_poscom0=cam_xpos - com(m.cam_targetbodyid, m.cam_bodyid),
              cam_mat0=cam_xmat.reshape(-1, 9),
              light_pos0=light_xpos - d.xpos[m.light_bodyid],
              light_poscom0=light_xpos - com(m.light_targetbodyid, m.light_bodyid),
              light_dir0=light_xdir)


def _springdamper(m: Model, springdamper: np.ndarray, invweight: jax.Array):
  """(jnt_stiffness, dof_damping) with springdamper joints set from (timeconst, dampratio)."""
  stiffness, damping = m.jnt_stiffness, m.dof_damping
  for j in np.flatnonzero((springdamper[:, 0] > 0) & (springdamper[:, 1] > 0)):
    n = JNT_NV[m.jnt_type[j]]
    dofs = slice(m.jnt_dofadr[j], m.jnt_dofadr[j] + n)
    inertia = n / jnp.maximum(math.MINVAL, jnp.sum(invweight[dofs]))
    timeconst, ratio = springdamper[j]
    stiffness = stiffness.at[j].set(
        inertia / max(math.MINVAL, timeconst * timeconst * ratio * ratio))
    damping = damping.at[dofs].set(2 * inertia / max(math.MINVAL, timeconst))
  return stiffness, damping


def set_const(m: Model, pending: Pending | None = None) -> Model:
  """Returns ``m`` with the constants of this module's docstring filled in.

  Raises:
    LengthRangeError: a muscle's lengthrange simulation did not converge (MuJoCo refuses such
      models too).
  """
  pending = pending or Pending(springdamper=np.zeros((m.njnt, 2)))
  springs = bool(np.any(np.all(np.asarray(m.tendon_lengthspring) == -1, axis=-1)))
  m = m.replace(**_constants(m, make_data(m), _dampratio_actuators(m), springs))
  stiffness, damping = _springdamper(m, pending.springdamper, m.dof_invweight0)
  m = m.replace(jnt_stiffness=stiffness, dof_damping=damping, key_plastic=_key_plastic(m))
  return _length_ranges(m, pending.lengthrange)


def _key_plastic(m: Model) -> np.ndarray:
  """The keyframes' plastic states (nkey, nplastic): the values a keyframe gives, the initial
  state (qpos_spring, tendon_lengthspring) for the rest (NaN from the compiler), every ball
  joint's quaternion normalized, as MuJoCo fills a short ``plastic`` list."""
  key = np.asarray(m.key_plastic, np.float64)
  key = np.where(np.isnan(key), initial_plastic(m), key)
  for j in np.flatnonzero((m.jnt_plasticadr >= 0) & (m.jnt_type == JointType.BALL)):
    quat = key[:, m.jnt_plasticadr[j]:m.jnt_plasticadr[j] + 4]
    quat /= np.linalg.norm(quat, axis=1, keepdims=True)
  return key


def _needs_range(m: Model, opt: LengthRangeOptions) -> np.ndarray:
  """Static ids of the actuators whose lengthrange this pass must compute."""
  muscle = ((m.actuator_gaintype == GainType.MUSCLE) | (m.actuator_biastype == BiasType.MUSCLE))
  user = ((m.actuator_gaintype == GainType.USER) | (m.actuator_biastype == BiasType.USER))
  mode = {0: np.zeros_like(muscle), 1: muscle, 2: muscle | user,
          3: np.ones_like(muscle)}[opt.mode]
  lr = np.asarray(m.actuator_lengthrange)[m.actuator_outadr]
  if opt.useexisting:
    mode &= ~(lr[:, 0] < lr[:, 1])
  return np.flatnonzero(mode)


def _length_ranges(m: Model, opt: LengthRangeOptions) -> Model:
  """Model with actuator_lengthrange set for the actuators that need it (mj_setLengthRange)."""
  lengthrange = np.array(m.actuator_lengthrange)
  simulate = []
  for i in _needs_range(m, opt):
    out, target = m.actuator_outadr[i], m.actuator_trnid[i, 0]
    joint = m.actuator_trntype[i] in (TrnType.JOINT, TrnType.JOINTINPARENT)
    tendon = m.actuator_trntype[i] == TrnType.TENDON
    if opt.uselimit and joint and m.jnt_limited[target]:
      lengthrange[out] = np.asarray(m.jnt_range[target])
    elif opt.uselimit and tendon and m.tendon_limited[target]:
      lengthrange[out] = np.asarray(m.tendon_range[target])
    else:
      simulate.append(i)
  if simulate:
    lo, hi = _simulate_ranges(m, opt, np.array(simulate))
    for k, i in enumerate(simulate):
      out = m.actuator_outadr[i]
      lmin, lmax = np.asarray(lo[k]), np.asarray(hi[k])
      lengthrange[out] = (lmin[0], lmax[1])
      dif = lengthrange[out, 1] - lengthrange[out, 0]
      if dif <= 0:
        raise LengthRangeError(int(i), f"invalid lengthrange ({lengthrange[out, 0]:g}, "
                               f"{lengthrange[out, 1]:g})")
      for side in range(2):
        if lmax[side] - lmin[side] > opt.tolrange * dif:
          raise LengthRangeError(
              int(i), f"lengthrange computation did not converge: eval ({lmin[side]:g}, "
              f"{lmax[side]:g}), range ({lengthrange[out, 0]:g}, {lengthrange[out, 1]:g})")
  return m.replace(actuator_lengthrange=device_array(lengthrange, m.actuator_lengthrange.dtype))


def _simulate_ranges(m: Model, opt: LengthRangeOptions, actuators: np.ndarray):
  """Simulated (lmin, lmax) of the last ``interval`` seconds, each (n, 2) over the two sides.

  The model runs with contact, springs, dampers, gravity, actuation and friction loss disabled
  and ``opt.timestep`` as its time step (MuJoCo's settings), all actuators and both sides as one
  batch; joint and tendon limits act, as in MuJoCo.
  """
  flags = (DisableBit.FRICTIONLOSS | DisableBit.CONTACT | DisableBit.SPRING | DisableBit.DAMPER
           | DisableBit.GRAVITY | DisableBit.ACTUATION)
  option = m.opt.replace(disableflags=int(flags))
  if opt.timestep > 0:
    option = option.replace(timestep=device_array(opt.timestep, m.opt.timestep.dtype))
  if option.integrator == IntegratorType.RK4:   # mj_step2 integrates RK4 models with Euler
    option = option.replace(integrator=int(IntegratorType.EULER))
  sim = m.replace(opt=option)
  # MuJoCo steps while the accumulated time is below inttotal
  nstep, time, dt = 0, 0.0, float(option.timestep)
  while time < opt.inttotal:
    time, nstep = time + dt, nstep + 1
  record_from = opt.inttotal - opt.interval
  outs = device_array(m.actuator_outadr[actuators], np.int32)
  sides = device_array([-1.0, 1.0], m.body_mass.dtype)
  run = jax.jit(functools.partial(_push, sim, opt=opt, nstep=nstep, record_from=record_from))
  lo, hi = jax.vmap(jax.vmap(run, in_axes=(None, 0)), in_axes=(0, None))(outs, sides)
  return lo, hi


def _push(m: Model, out: jax.Array, side: jax.Array, *, opt: LengthRangeOptions, nstep: int,
          record_from: float):
  """(min, max) of actuator output ``out``'s length while pushing it towards ``side``."""
  decay = jnp.exp(-m.opt.timestep / max(0.01, opt.timeconst))

  def body(carry, _):
    d, lo, hi, seen = carry
    d = d.replace(qvel=d.qvel * decay)
    dp = _set0_position(m, d)
    moment = dp.actuator_moment[out]
    direction = solve_m(m, dp, moment)
    frc = moment * side * opt.accel / jnp.maximum(math.MINVAL, jnp.linalg.norm(direction))
    if opt.maxforce > 0:
      norm = jnp.linalg.norm(frc)
      frc = jnp.where(norm > opt.maxforce, frc * opt.maxforce / jnp.maximum(math.MINVAL, norm),
                      frc)
    d = integrate.step(m, d.replace(qfrc_applied=frc))
    length = d.actuator_length[out]  # of the state the step started from, as MuJoCo's
    record = d.time > record_from
    lo = jnp.where(record & ((length < lo) | ~seen), length, lo)
    hi = jnp.where(record & ((length > hi) | ~seen), length, hi)
    return (d, lo, hi, seen | record), None

  zero = jnp.zeros((), dtype=m.body_mass.dtype)
  (_, lo, hi, _), _ = jax.lax.scan(body, (make_data(m), zero, zero, jnp.array(False)), None,
                                   length=nstep)
  return lo, hi
