"""Actuation: activation dynamics, force generation and clamps (``mj_fwdActuation``), and the
activation update of the integrators (``mj_nextActivation``).

An actuator reads its controls ``ctrl[ctrladr : ctrladr + ctrlnum]`` (clamped to ctrlrange),
its activation states ``act[actadr : actadr + actnum]`` and its transmission's length and
velocity, and produces

* ``act_dot``, by dynamics type: integrator ``u``; filter and filterexact ``(u - act) / tau``;
  muscle (see ``flexor.muscle``); pid (setpoint slew state, position-error integral); dcmotor
  (slew, integral, winding temperature, LuGre bristle, current);
* ``actuator_force = gain * input + bias``, where input is the control for stateless actuators
  and the last activation otherwise (its next value when ``actearly``); gain by gain type
  (fixed, affine ``g0 + g1 length + g2 velocity``, muscle, dcmotor) and bias by bias type (none,
  affine, muscle, dcmotor back-EMF); pid and SO3 servos have their own force laws;
* clamps: the total force of actuators on one tendon to ``tendon_actfrcrange``, each force to
  ``actuator_forcerange`` (the SO3 torque by norm), then ``qfrc_actuator = moment' force`` plus
  gravity compensation routed to actuators, clamped per joint to ``jnt_actfrcrange``.

Packed parameter rows, as MuJoCo's C code reads them:

* pid: dynprm (imax, slewmax); gainprm (ki); biasprm (0, -kp, -kv).
* dcmotor: dynprm (te, dimax, RT, C, Ta, sigma0, sigma1, slewmax, imax); gainprm (R, K, alpha,
  T0, kp, ki, kd, Vmax); biasprm (cogging A, Np, phi, F_C, F_S, v_S).
* SO3: gainprm (kp); biasprm (constant, 0, kv).

Every actuator kind is one vectorised computation over the static index group of actuators of
that kind. Actuators whose group is disabled (``opt.disableactuator``) produce no force and
their activations do not advance.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from flexor import history, math
from flexor.muscle import muscle_bias, muscle_dynamics, muscle_gain, muscle_gain_vel
from flexor.types import BiasType, Data, DisableBit, DynType, GainType, Model, TrnType

MAXVAL = 1e10  # mjMAXVAL: larger controls are treated as invalid

# mjtCtrlInput bits of actuator_ctrlspec (pid, dcmotor) and mjtCtrlChart values (SO3)
INPUT_POS, INPUT_VEL, INPUT_FF, INPUT_VOLTAGE = 1, 2, 4, 8
CHART_QUAT = 2

# columns of actuator_actslot
SLEW, INTEGRAL, TEMPERATURE, BRISTLE, CURRENT = range(5)


def disabled_actuators(m: Model) -> np.ndarray:
  """(nactuator,) bool: actuators whose group is disabled in ``opt.disableactuator``."""
  group = m.actuator_group
  valid = (group >= 0) & (group <= 30)
  return valid & ((m.opt.disableactuator >> np.clip(group, 0, 30)) & 1 == 1)


def _last_act(m: Model, act: np.ndarray) -> np.ndarray:
  """Address of the last activation state of actuators ``act`` (MuJoCo's input state)."""
  return m.actuator_actadr[act] + m.actuator_actnum[act] - 1


def _owner(m: Model) -> np.ndarray:
  """(na,) the actuator owning each activation state."""
  owner = np.zeros(m.na, dtype=np.int32)
  for i in np.flatnonzero(m.actuator_actnum > 0):
    owner[m.actuator_actadr[i]:m.actuator_actadr[i] + m.actuator_actnum[i]] = i
  return owner


def _of(m: Model, field: str, value: int) -> np.ndarray:
  return np.flatnonzero(getattr(m, field) == value)


def controls(m: Model, d: Data) -> jax.Array:
  """The controls actuators read, (nu,): ctrl (a delayed actuator's from its history, see
  ``flexor.history``) clamped to ctrlrange (unless the clampctrl flag is disabled), all zero if
  any is NaN or beyond mjMAXVAL in magnitude."""
  ctrl = history.delayed_ctrl(m, d)
  if not m.opt.disabled(DisableBit.CLAMPCTRL):
    limited = m.actuator_ctrllimited.astype(bool)
    lo, hi = m.actuator_ctrlrange[:, 0], m.actuator_ctrlrange[:, 1]
    ctrl = jnp.where(limited, jnp.clip(ctrl, lo, hi), ctrl)
  bad = jnp.any(~jnp.isfinite(ctrl) | (jnp.abs(ctrl) > MAXVAL))
  return jnp.where(bad, 0.0, ctrl)


def _wrap_period(m: Model, act: np.ndarray) -> jax.Array:
  """Period of rotational servo setpoints of actuators ``act`` (MuJoCo's wrapPeriod), 0 if none."""
  gear = m.actuator_gear[m.actuator_outadr[act]]
  kind = m.actuator_wrap[act]
  norm = jnp.where(kind == 1, math.safe_norm(gear[:, 3:]), math.safe_norm(gear[:, :3]))
  return jnp.where(kind > 0, 2 * jnp.pi * norm, 0.0)


def _wrap_setpoint(u: jax.Array, length: jax.Array, period: jax.Array) -> jax.Array:
  """The representative of setpoint u nearest ``length`` given ``period`` (u if period is 0)."""
  wraps = period > 0
  safe = jnp.where(wraps, period, 1.0)
  return jnp.where(wraps, u - safe * jnp.round((u - length) / safe), u)


def _slew_limit(u: jax.Array, u_prev: jax.Array, slew: jax.Array, h: jax.Array,
                period: jax.Array) -> tuple[jax.Array, jax.Array]:
  """(effective setpoint, its rate): u moved towards u_prev to within slew * h."""
  u = _wrap_setpoint(u, u_prev, period)
  u_eff = jnp.clip(u, u_prev - slew * h, u_prev + slew * h)
  return u_eff, (u_eff - u_prev) / h


def _servo_inputs(ctrl: jax.Array, m: Model, act: np.ndarray) -> jax.Array:
  """(n, 4) inputs (pos, vel, ff, voltage) of pid/dcmotor actuators; absent inputs are 0."""
  spec = m.actuator_ctrlspec[act]
  cols = []
  offset = np.zeros(len(act), dtype=np.int32)
  for bit in (INPUT_POS, INPUT_VEL, INPUT_FF, INPUT_VOLTAGE):
    present = (spec & bit) != 0
    adr = np.minimum(m.actuator_ctrladr[act] + offset, max(m.nu - 1, 0))
    cols.append(jnp.where(present, ctrl[adr], 0.0) if m.nu else jnp.zeros(len(act)))
    offset = offset + present
  return jnp.stack(cols, axis=-1)


def _dcmotor_voltage(m: Model, act: np.ndarray, inputs: jax.Array, length: jax.Array,
                     velocity: jax.Array, x_int: jax.Array) -> tuple[jax.Array, jax.Array]:
  """Terminal voltage of dcmotors ``act``: on-board torque PID as current control, plus the raw
  voltage input (MuJoCo's dcmotorVoltage); and whether the controller's voltage is held at the
  driver's supply limit Vmax."""
  gain = m.actuator_gainprm[act]
  R, K, kp, ki, kd, vmax = (gain[:, k] for k in (0, 1, 4, 5, 6, 7))
  torque = kp * (inputs[:, 0] - length) + kd * (inputs[:, 1] - velocity) + ki * x_int
  torque = torque + inputs[:, 2]
  voltage = R / jnp.where(K != 0, K, 1.0) * torque + K * velocity
  limited = (vmax > 0) & (jnp.abs(voltage) >= vmax)
  voltage = jnp.where(vmax > 0, jnp.clip(voltage, -vmax, vmax), voltage)
  controlled = (m.actuator_ctrlspec[act] & (INPUT_POS | INPUT_VEL | INPUT_FF)) != 0
  return jnp.where(controlled, voltage, 0.0) + inputs[:, 3], controlled & limited


def _integral_state(m: Model, d: Data, act: np.ndarray) -> jax.Array:
  """(n,) the integral states of pid/dcmotor actuators ``act``; 0 where they have none."""
  slot = m.actuator_actslot[act, INTEGRAL]
  if not m.na:
    return jnp.zeros(act.size, dtype=d.qpos.dtype)
  return jnp.where(slot >= 0, d.act[np.where(slot >= 0, m.actuator_actadr[act] + slot, 0)], 0.0)


def _stribeck(velocity: jax.Array, biasprm: jax.Array) -> jax.Array:
  """LuGre Stribeck curve g(v) = F_C + (F_S - F_C) exp(-(v / v_S)^2)."""
  f_c, f_s, v_s = biasprm[:, 3], biasprm[:, 4], biasprm[:, 5]
  ratio = velocity / jnp.maximum(math.MINVAL, v_s)
  return f_c + (f_s - f_c) * jnp.exp(-ratio * ratio)


def _slot(m: Model, act: np.ndarray, column: int) -> tuple[np.ndarray, np.ndarray]:
  """(actuators of ``act`` that have the slot, the slot's act addresses)."""
  has = m.actuator_actslot[act, column] >= 0
  sub = act[has]
  return sub, m.actuator_actadr[sub] + m.actuator_actslot[sub, column]


def _temperature_r(m: Model, d: Data, act: np.ndarray) -> jax.Array:
  """Winding resistance of dcmotors ``act``, adjusted for temperature where modelled."""
  gain, dyn = m.actuator_gainprm[act], m.actuator_dynprm[act]
  slot = m.actuator_actslot[act, TEMPERATURE]
  temp = d.act[np.where(slot >= 0, m.actuator_actadr[act] + slot, 0)] if m.na else 0.0
  scale = 1 + gain[:, 2] * (temp + dyn[:, 4] - gain[:, 3])
  return jnp.where(slot >= 0, gain[:, 0] * scale, gain[:, 0])


def act_dot(m: Model, d: Data, ctrl: jax.Array) -> tuple[jax.Array, jax.Array]:
  """Activation derivatives (na,) and the controls after setpoint slew limiting (nu,)."""
  dtype = d.qpos.dtype
  h = m.opt.timestep
  out = jnp.zeros(m.na, dtype=dtype)
  length = d.actuator_length

  act = _of(m, "actuator_dyntype", DynType.INTEGRATOR)
  if act.size:
    num = m.actuator_ctrlnum[act]
    dst = np.concatenate([_last_act(m, act)[k] - num[k] + 1 + np.arange(num[k])
                          for k in range(act.size)])
    src = np.concatenate([m.actuator_ctrladr[act][k] + np.arange(num[k])
                          for k in range(act.size)])
    out = out.at[dst].set(ctrl[src])

  act = np.concatenate([_of(m, "actuator_dyntype", DynType.FILTER),
                        _of(m, "actuator_dyntype", DynType.FILTEREXACT)])
  if act.size:
    last = _last_act(m, act)
    tau = jnp.maximum(math.MINVAL, m.actuator_dynprm[act, 0])
    out = out.at[last].set((ctrl[m.actuator_ctrladr[act]] - d.act[last]) / tau)

  act = _of(m, "actuator_dyntype", DynType.MUSCLE)
  if act.size:
    last = _last_act(m, act)
    out = out.at[last].set(
        muscle_dynamics(ctrl[m.actuator_ctrladr[act]], d.act[last], m.actuator_dynprm[act]))

  act = _of(m, "actuator_dyntype", DynType.PID)
  if act.size:
    uadr, oadr = m.actuator_ctrladr[act], m.actuator_outadr[act]
    period = _wrap_period(m, act)
    sub, adr = _slot(m, act, SLEW)
    if sub.size:
      keep = np.isin(act, sub)
      u_eff, rate = _slew_limit(ctrl[m.actuator_ctrladr[sub]], d.act[adr],
                                m.actuator_dynprm[sub, 1], h, period[keep])
      ctrl = ctrl.at[m.actuator_ctrladr[sub]].set(u_eff)
      out = out.at[adr].set(rate)
    sub, adr = _slot(m, act, INTEGRAL)
    if sub.size:
      keep = np.isin(act, sub)
      err = ctrl[uadr[keep]] - length[oadr[keep]]
      per = period[keep]
      err = jnp.where(per > 0, err - per * jnp.round(err / jnp.where(per > 0, per, 1.0)), err)
      out = out.at[adr].set(_anti_windup(err, d.act[adr], m.actuator_dynprm[sub, 0]))

  act = _of(m, "actuator_dyntype", DynType.DCMOTOR)
  if act.size:
    out, ctrl = _dcmotor_act_dot(m, d, act, ctrl, out)
  return out, ctrl


def _anti_windup(err: jax.Array, z: jax.Array, imax: jax.Array) -> jax.Array:
  """Integrator input ``err``, stopped from pushing ``z`` beyond +-imax (imax > 0)."""
  err = jnp.where((imax > 0) & (z >= imax), jnp.minimum(err, 0.0), err)
  return jnp.where((imax > 0) & (z <= -imax), jnp.maximum(err, 0.0), err)


def _dcmotor_act_dot(m: Model, d: Data, act: np.ndarray, ctrl: jax.Array, out: jax.Array):
  """act_dot of the dcmotor states of actuators ``act``; slew-limited controls."""
  h = m.opt.timestep
  dyn, gain = m.actuator_dynprm, m.actuator_gainprm
  uadr, oadr = m.actuator_ctrladr[act], m.actuator_outadr[act]
  velocity, length = d.actuator_velocity[oadr], d.actuator_length[oadr]

  sub, adr = _slot(m, act, SLEW)
  if sub.size:
    u_eff, rate = _slew_limit(ctrl[m.actuator_ctrladr[sub]], d.act[adr], dyn[sub, 7], h, 0.0)
    ctrl = ctrl.at[m.actuator_ctrladr[sub]].set(u_eff)
    out = out.at[adr].set(rate)

  x_int = jnp.zeros(act.size, dtype=velocity.dtype)
  sub, adr = _slot(m, act, INTEGRAL)
  if sub.size:
    keep = np.isin(act, sub)
    x_int = x_int.at[np.flatnonzero(keep)].set(d.act[adr])
    err = ctrl[uadr[keep]] - length[keep]
    out = out.at[adr].set(_anti_windup(err, d.act[adr], dyn[sub, 8]))

  voltage, _ = _dcmotor_voltage(m, act, _servo_inputs(ctrl, m, act), length, velocity, x_int)
  R0, K, te = gain[act, 0], gain[act, 1], dyn[act, 0]
  has_current = m.actuator_actslot[act, CURRENT] >= 0
  current_adr = _last_act(m, act)

  sub, adr = _slot(m, act, TEMPERATURE)
  if sub.size:
    keep = np.isin(act, sub)
    R = R0[keep] * (1 + gain[sub, 2] * (d.act[adr] + dyn[sub, 4] - gain[sub, 3]))
    current = jnp.where(has_current[keep], d.act[current_adr[keep]],
                        (voltage[keep] - K[keep] * velocity[keep]) / R)
    out = out.at[adr].set((R * current * current - d.act[adr] / dyn[sub, 2]) / dyn[sub, 3])

  sub, adr = _slot(m, act, BRISTLE)
  if sub.size:
    keep = np.isin(act, sub)
    v = velocity[keep]
    g = _stribeck(v, m.actuator_biasprm[sub])
    rate = -dyn[sub, 5] * jnp.abs(v) / jnp.maximum(math.MINVAL, g)
    out = out.at[adr].set(rate * d.act[adr] + v)

  sub, adr = _slot(m, act, CURRENT)
  if sub.size:
    keep = np.isin(act, sub)
    R = _temperature_r(m, d, sub)
    i_dot = (voltage[keep] / R - K[keep] / R * velocity[keep] - d.act[adr]) / te[keep]
    dimax = dyn[sub, 1]
    out = out.at[adr].set(jnp.where(dimax > 0, jnp.clip(i_dot, -dimax, dimax), i_dot))
  return out, ctrl


def next_activation(m: Model, d: Data, act_dot: jax.Array) -> jax.Array:
  """Activations after one time step from act_dot (na,) (``mj_nextActivation``), (na,).

  Euler, except exact exponential integration for filterexact actuators and dcmotor currents,
  exact zero-order-hold integration of LuGre bristle states, and an anti-windup clamp of dcmotor
  integral states; then clamped to actrange where actlimited (dcmotors excepted).
  """
  h = m.opt.timestep
  act = d.act + act_dot * h
  if not m.na:
    return act
  owner = _owner(m)
  dyntype = m.actuator_dyntype[owner]
  dyn = m.actuator_dynprm[owner]
  offset = np.arange(m.na) - m.actuator_actadr[owner]
  slot = m.actuator_actslot[owner]
  dcmotor = dyntype == DynType.DCMOTOR

  exact = (dyntype == DynType.FILTEREXACT) | (dcmotor & (offset == slot[:, CURRENT]))
  if exact.any():
    tau = jnp.maximum(math.MINVAL, dyn[:, 0])
    act = jnp.where(exact, d.act + act_dot * tau * (1 - jnp.exp(-h / tau)), act)

  bristle = dcmotor & (offset == slot[:, BRISTLE])
  if bristle.any():
    velocity = d.actuator_velocity[m.actuator_outadr[owner]]
    g = _stribeck(velocity, m.actuator_biasprm[owner])
    rate = -dyn[:, 5] * jnp.abs(velocity) / jnp.maximum(math.MINVAL, g)
    exp_ah = jnp.exp(rate * h)
    moving = jnp.abs(rate) > math.MINVAL
    int_h = jnp.where(moving, (exp_ah - 1) / jnp.where(moving, rate, 1.0), h)
    act = jnp.where(bristle, exp_ah * d.act + int_h * velocity, act)

  integral = dcmotor & (offset == slot[:, INTEGRAL])
  if integral.any():
    imax = dyn[:, 8]
    act = jnp.where(integral & (imax > 0), jnp.clip(act, -imax, imax), act)

  limited = (m.actuator_actlimited[owner] != 0) & ~dcmotor
  if limited.any():
    lo, hi = m.actuator_actrange[owner, 0], m.actuator_actrange[owner, 1]
    act = jnp.where(limited, jnp.clip(act, lo, hi), act)
  return act


def advance_act(m: Model, d: Data, act_dot: jax.Array) -> jax.Array:
  """New activations at the end of a step (the activation part of ``mj_advance``), (na,).

  Disabled actuators' states do not move; integrator setpoints of rotational servos are then
  replaced by the representative nearest the current length, and SO3 expmap setpoints by their
  canonical representative (angle within pi).
  """
  if m.na:
    frozen = disabled_actuators(m)[_owner(m)]
    if frozen.any():
      act_dot = jnp.where(frozen, 0.0, act_dot)
  act = next_activation(m, d, act_dot)
  integ = _of(m, "actuator_dyntype", DynType.INTEGRATOR)
  servo = integ[m.actuator_wrap[integ] > 0]
  if servo.size:
    last = _last_act(m, servo)
    period = _wrap_period(m, servo)
    act = act.at[last].set(
        _wrap_setpoint(act[last], d.actuator_length[m.actuator_outadr[servo]], period))
  so3 = integ[m.actuator_gaintype[integ] == GainType.SO3]
  if so3.size:
    adr = m.actuator_actadr[so3][:, None] + np.arange(3)
    vec = act[adr]
    angle = math.safe_norm(vec, keepdims=True)
    big = angle > jnp.pi
    scale = (angle - 2 * jnp.pi * jnp.round(angle / (2 * jnp.pi))) / jnp.where(big, angle, 1.0)
    act = act.at[adr].set(jnp.where(big, vec * scale, vec))
  return act


def _expmap_quat(v: jax.Array) -> jax.Array:
  """Quaternion of rotation vector v (..., 3); the identity below mjMINVAL (expmap2Quat)."""
  angle = math.safe_norm(v)
  small = angle < math.MINVAL
  axis = v / jnp.where(small, 1.0, angle)[..., None]
  quat = math.axis_angle_to_quat(axis, angle)
  return jnp.where(small[..., None], jnp.array([1.0, 0, 0, 0], dtype=v.dtype), quat)


def _so3_force(m: Model, d: Data, act: np.ndarray, ctrl: jax.Array, early: jax.Array):
  """(3n,) torques of SO3 geodesic servos: kp log(q_cur^-1 q_tgt) + constant + kv velocity."""
  oadr = (m.actuator_outadr[act][:, None] + np.arange(3))
  quat_in = m.actuator_ctrlspec[act] == CHART_QUAT
  uadr = m.actuator_ctrladr[act][:, None] + np.arange(4)
  u4 = ctrl[np.minimum(uadr, m.nu - 1)]
  target_quat = math.quat_normalize(u4)
  stateless = m.actuator_dyntype[act] == DynType.NONE
  act_adr = np.where(stateless, 0, m.actuator_actadr[act])[:, None] + np.arange(3)
  state = d.act[act_adr] if m.na else jnp.zeros((act.size, 3))
  state = jnp.where(m.actuator_actearly[act][:, None] != 0, early[act_adr] if m.na else state,
                    state)
  vec = jnp.where(stateless[:, None], u4[:, :3], state)
  target = jnp.where(quat_in[:, None], target_quat, _expmap_quat(vec))
  current = _expmap_quat(d.actuator_length[oadr])
  err = math.quat_sub(target, current)
  kp = m.actuator_gainprm[act, 0][:, None]
  bias = m.actuator_biasprm[act]
  force = kp * err + bias[:, :1] + bias[:, 2:3] * d.actuator_velocity[oadr]
  return oadr.ravel(), force.ravel()


def _siso_force(m: Model, d: Data, act: np.ndarray, ctrl: jax.Array,
                early: jax.Array) -> jax.Array:
  """Forces (n,) of the single-output actuators ``act``: gain * input + bias."""
  dtype = d.qpos.dtype
  n = act.size
  oadr, uadr = m.actuator_outadr[act], m.actuator_ctrladr[act]
  length, velocity = d.actuator_length[oadr], d.actuator_velocity[oadr]
  gaintype, biastype = m.actuator_gaintype[act], m.actuator_biastype[act]
  gainprm, biasprm, dynprm = m.actuator_gainprm[act], m.actuator_biasprm[act], m.actuator_dynprm[act]
  lengthrange, acc0 = m.actuator_lengthrange[oadr], m.actuator_acc0[oadr]

  # gain
  gain = jnp.ones(n, dtype=dtype)   # user gain without a callback
  gain = jnp.where(gaintype == GainType.FIXED, gainprm[:, 0], gain)
  gain = jnp.where(gaintype == GainType.AFFINE,
                   gainprm[:, 0] + gainprm[:, 1] * length + gainprm[:, 2] * velocity, gain)
  if np.any(gaintype == GainType.MUSCLE):
    gain = jnp.where(gaintype == GainType.MUSCLE,
                     muscle_gain(length, velocity, lengthrange, acc0, gainprm), gain)
  gain = jnp.where(gaintype == GainType.PID, 0.0, gain)
  dcmotor = gaintype == GainType.DCMOTOR
  if dcmotor.any():
    R = _temperature_r(m, d, act)
    K = gainprm[:, 1]
    gain = jnp.where(dcmotor, jnp.where(dynprm[:, 0] > 0, K, K / jnp.maximum(math.MINVAL, R)),
                     gain)
    # the on-board controller turns the inputs into a voltage, which replaces the control
    voltage, _ = _dcmotor_voltage(m, act, _servo_inputs(ctrl, m, act), length, velocity,
                                  _integral_state(m, d, act))
    replace = dcmotor & (m.actuator_ctrlspec[act] != INPUT_VOLTAGE) & (m.actuator_ctrlnum[act] > 0)
    ctrl_in = jnp.where(replace, voltage, ctrl[np.minimum(uadr, max(m.nu - 1, 0))])
  else:
    ctrl_in = ctrl[np.minimum(uadr, max(m.nu - 1, 0))] if m.nu else jnp.zeros(n, dtype)

  # input: the control, or the last activation (its next value with actearly)
  period = _wrap_period(m, act)
  stateless = (m.actuator_actnum[act] == 0) | (dcmotor & (dynprm[:, 0] <= 0))
  control = jnp.where(m.actuator_ctrlnum[act] > 0, ctrl_in, 0.0)
  last = np.where(m.actuator_actnum[act] > 0, _last_act(m, act), 0)
  if m.na:
    state = jnp.where(m.actuator_actearly[act] != 0, early[last], d.act[last])
  else:
    state = jnp.zeros(n, dtype)
  signal = _wrap_setpoint(jnp.where(stateless, control, state), length, period)
  force = gain * signal

  pid = gaintype == GainType.PID
  if pid.any():
    inputs = _servo_inputs(ctrl, m, act)
    qref = _wrap_setpoint(inputs[:, 0], length, period)
    pid_force = -biasprm[:, 1] * qref - biasprm[:, 2] * inputs[:, 1] + inputs[:, 2]
    integral = (m.actuator_actnum[act] > 0) & (gainprm[:, 0] > 0)
    pid_force = pid_force + jnp.where(integral, gainprm[:, 0] * state, 0.0)
    force = jnp.where(pid, pid_force, force)

  # bias
  bias = jnp.zeros(n, dtype=dtype)
  bias = jnp.where(biastype == BiasType.AFFINE,
                   biasprm[:, 0] + biasprm[:, 1] * length + biasprm[:, 2] * velocity, bias)
  if np.any(biastype == BiasType.MUSCLE):
    bias = jnp.where(biastype == BiasType.MUSCLE,
                     muscle_bias(length, lengthrange, acc0, biasprm), bias)
  back_emf = (biastype == BiasType.DCMOTOR) & (dynprm[:, 0] <= 0)
  bias = jnp.where(back_emf, -gain * gainprm[:, 1] * velocity, bias)
  return force + bias


def _tendon_limit(m: Model, force: jax.Array) -> jax.Array:
  """Scales the forces of actuators on a tendon so their sum lies in tendon_actfrcrange."""
  act = _of(m, "actuator_trntype", TrnType.TENDON)
  if not act.size:
    return force
  ten = m.actuator_trnid[act, 0]
  act, ten = act[m.tendon_actfrclimited[ten] != 0], ten[m.tendon_actfrclimited[ten] != 0]
  if not act.size:
    return force
  oadr = m.actuator_outadr[act]
  total = jnp.zeros(m.ntendon, dtype=force.dtype).at[ten].add(force[oadr])[ten]
  lo, hi = m.tendon_actfrcrange[ten, 0], m.tendon_actfrcrange[ten, 1]
  safe = jnp.where(total != 0, total, 1.0)
  scale = jnp.where(total < lo, lo / safe, jnp.where(total > hi, hi / safe, 1.0))
  return force.at[oadr].multiply(jnp.where(total != 0, scale, 1.0))


def _force_limit(m: Model, force: jax.Array) -> jax.Array:
  """Clamps each output to actuator_forcerange; SO3 torques by norm."""
  act = np.flatnonzero(m.actuator_forcelimited)
  if not act.size:
    return force
  so3 = m.actuator_gaintype[act] == GainType.SO3
  lo, hi = m.actuator_forcerange[act, 0], m.actuator_forcerange[act, 1]
  siso = act[~so3]
  if siso.size:
    oadr = m.actuator_outadr[siso]
    force = force.at[oadr].set(jnp.clip(force[oadr], lo[~so3], hi[~so3]))
  if so3.any():
    oadr = m.actuator_outadr[act[so3]][:, None] + np.arange(3)
    f = force[oadr]
    norm = math.safe_norm(f, keepdims=True)
    top = hi[so3][:, None]
    # f * (top / norm) rounds as MuJoCo's, which decides whether the implicit integrators see
    # the clamped torque's norm at its bound
    force = force.at[oadr].set(jnp.where(norm > top, f * (top / jnp.where(norm > 0, norm, 1.0)), f))
  return force


def _dcmotor_mechanical(m: Model, d: Data, force: jax.Array, act_dot_: jax.Array) -> jax.Array:
  """Adds dcmotor cogging torque and LuGre friction, which current limits do not clamp."""
  act = np.flatnonzero((m.actuator_biastype == BiasType.DCMOTOR) & ~disabled_actuators(m))
  if not act.size:
    return force
  oadr = m.actuator_outadr[act]
  bias = m.actuator_biasprm[act]
  cogging = jnp.where(bias[:, 0] != 0,
                      bias[:, 0] * jnp.sin(bias[:, 1] * d.actuator_length[oadr] + bias[:, 2]), 0.0)
  force = force.at[oadr].add(cogging)
  sub, adr = _slot(m, act, BRISTLE)
  if sub.size:
    friction = (m.actuator_dynprm[sub, 5] * d.act[adr] + m.actuator_dynprm[sub, 6] * act_dot_[adr])
    force = force.at[m.actuator_outadr[sub]].add(-friction)
  return force


def actuation(m: Model, d: Data) -> Data:
  """Computes act_dot (na,), actuator_force (nout,) and qfrc_actuator (nv,) (mj_fwdActuation).

  Needs the transmission (actuator_length, actuator_moment), actuator_velocity and, for
  actuator gravity compensation, qfrc_gravcomp.
  """
  with jax.named_scope("actuation"):
    dtype = d.qvel.dtype
    qfrc = jnp.zeros(m.nv, dtype=dtype)
    force = jnp.zeros(m.nout, dtype=dtype)
    if not m.nactuator or m.opt.disabled(DisableBit.ACTUATION):
      return d.replace(actuator_force=force, qfrc_actuator=qfrc,
                       act_dot=jnp.zeros(m.na, dtype=dtype))
    ctrl = controls(m, d)
    dot, ctrl = act_dot(m, d, ctrl)
    early = next_activation(m, d, dot)

    live = ~disabled_actuators(m)
    so3 = live & (m.actuator_gaintype == GainType.SO3)
    siso = np.flatnonzero(live & ~so3)
    if siso.size:
      force = force.at[m.actuator_outadr[siso]].set(_siso_force(m, d, siso, ctrl, early))
    if so3.any():
      rows, torque = _so3_force(m, d, np.flatnonzero(so3), ctrl, early)
      force = force.at[rows].set(torque)
    force = _tendon_limit(m, force)
    force = _force_limit(m, force)
    force = _dcmotor_mechanical(m, d, force, dot)

    qfrc = force @ d.actuator_moment
    if not m.opt.disabled(DisableBit.GRAVITY):
      routed = jnp.asarray(m.jnt_actgravcomp[m.dof_jntid] != 0, dtype=dtype)
      qfrc = qfrc + d.qfrc_gravcomp * routed
    limited = np.flatnonzero(m.jnt_actfrclimited)
    if limited.size:
      dof = m.jnt_dofadr[limited]
      lo, hi = m.jnt_actfrcrange[limited, 0], m.jnt_actfrcrange[limited, 1]
      qfrc = qfrc.at[dof].set(jnp.clip(qfrc[dof], lo, hi))
  return d.replace(act_dot=dot, actuator_force=force, qfrc_actuator=qfrc)


def _saturated(m: Model, d: Data, act: np.ndarray) -> jax.Array:
  """(n,) bool: actuators ``act`` whose force is held at a limit, inclusive of the bounds: their
  own forcerange (an SO3 torque's norm at its bound), the total actuator force on their joint
  (joint transmissions) or tendon (tendon transmissions) at its actfrcrange bound."""
  oadr = m.actuator_outadr[act]
  lo, hi = m.actuator_forcerange[act, 0], m.actuator_forcerange[act, 1]
  so3 = m.actuator_gaintype[act] == GainType.SO3
  so3_rows = oadr[:, None] + np.arange(3) * so3[:, None]
  norm = math.safe_norm(d.actuator_force[so3_rows], axis=-1)
  force = d.actuator_force[oadr]
  out = (m.actuator_forcelimited[act] != 0) & jnp.where(so3, norm >= hi,
                                                         (force <= lo) | (force >= hi))
  trntype, target = m.actuator_trntype[act], m.actuator_trnid[act, 0]
  joint = np.isin(trntype, (TrnType.JOINT, TrnType.JOINTINPARENT))
  if joint.any() and m.jnt_actfrclimited.any():
    jnt = np.where(joint, target, 0)
    total = d.actuator_force @ d.actuator_moment
    if not m.opt.disabled(DisableBit.GRAVITY):
      total = total + d.qfrc_gravcomp * jnp.asarray(m.jnt_actgravcomp[m.dof_jntid] != 0,
                                                    dtype=total.dtype)
    at = total[m.jnt_dofadr[jnt]]
    lo, hi = m.jnt_actfrcrange[jnt, 0], m.jnt_actfrcrange[jnt, 1]
    out |= joint & (m.jnt_actfrclimited[jnt] != 0) & ((at <= lo) | (at >= hi))
  tendon = trntype == TrnType.TENDON
  if tendon.any() and m.tendon_actfrclimited.any():
    ten = np.where(tendon, target, 0)
    on = np.flatnonzero(m.actuator_trntype == TrnType.TENDON)
    totals = jnp.zeros(m.ntendon, dtype=force.dtype).at[m.actuator_trnid[on, 0]].add(
        d.actuator_force[m.actuator_outadr[on]])[ten]
    lo, hi = m.tendon_actfrcrange[ten, 0], m.tendon_actfrcrange[ten, 1]
    out |= tendon & (m.tendon_actfrclimited[ten] != 0) & ((totals <= lo) | (totals >= hi))
  return out


def actuator_vel_deriv(m: Model, d: Data) -> jax.Array:
  """d(qfrc_actuator)/d(qvel) as MuJoCo's implicit integrators take it (mjd_actuator_vel), (nv, nv).

  moment' diag(dforce/dvelocity) moment, where dforce/dvelocity holds the affine and SO3
  velocity gains, the muscle force-velocity slope times the input, and the dcmotor back-EMF,
  controller and LuGre damping; saturated actuators (``_saturated``) contribute nothing. Like
  MuJoCo, this ignores the tendon force scaling.
  """
  dtype = d.qvel.dtype
  if not m.nactuator or m.opt.disabled(DisableBit.ACTUATION):
    return jnp.zeros((m.nv, m.nv), dtype=dtype)
  act = np.flatnonzero(~disabled_actuators(m))
  oadr = m.actuator_outadr[act]
  gaintype, biastype = m.actuator_gaintype[act], m.actuator_biastype[act]
  gainprm, biasprm, dynprm = m.actuator_gainprm[act], m.actuator_biasprm[act], m.actuator_dynprm[act]
  length, velocity = d.actuator_length[oadr], d.actuator_velocity[oadr]

  bias_vel = jnp.where(np.isin(biastype, (BiasType.AFFINE, BiasType.SO3)), biasprm[:, 2], 0.0)
  # the winding resistance: as wired (R0, in the controller's voltage law) and at the current
  # temperature (R, through which the current flows; measured against MuJoCo 4)
  R0 = jnp.maximum(math.MINVAL, gainprm[:, 0])
  R = jnp.maximum(math.MINVAL, _temperature_r(m, d, act))
  K = gainprm[:, 1]
  stateless_motor = (biastype == BiasType.DCMOTOR) & (dynprm[:, 0] <= 0)
  bias_vel = bias_vel - jnp.where(stateless_motor, K * K / R, 0.0)

  gain_vel = jnp.where(gaintype == GainType.AFFINE, gainprm[:, 2], 0.0)
  if np.any(gaintype == GainType.MUSCLE):
    gain_vel = jnp.where(gaintype == GainType.MUSCLE,
                         muscle_gain_vel(length, velocity, m.actuator_lengthrange[oadr],
                                         m.actuator_acc0[oadr], gainprm), gain_vel)
  dcmotor = gaintype == GainType.DCMOTOR
  if dcmotor.any():
    controlled = (m.actuator_ctrlspec[act] & (INPUT_POS | INPUT_VEL | INPUT_FF)) != 0
    _, slewed = act_dot(m, d, controls(m, d))
    _, held = _dcmotor_voltage(m, act, _servo_inputs(slewed, m, act), length, velocity,
                               _integral_state(m, d, act))
    # the controller's voltage responds to velocity unless the supply limit holds it
    dvdw = jnp.where(controlled & ~held, -gainprm[:, 6] * R0 / jnp.where(K != 0, K, 1.0) + K,
                     0.0)
    te = dynprm[:, 0]
    s = 1 - jnp.exp(-m.opt.timestep / jnp.where(te > 0, te, 1.0))
    motor = jnp.where(te > 0, K * (dvdw - K) * s / R, K * dvdw / R)
    motor = motor - jnp.where(dynprm[:, 6] > 0, dynprm[:, 6], 0.0)
    bias_vel = bias_vel + jnp.where(dcmotor, motor, 0.0)

  stateless = m.actuator_dyntype[act] == DynType.NONE
  last = np.where(m.actuator_actnum[act] > 0, _last_act(m, act), 0)
  if m.na:
    state = jnp.where(m.actuator_actearly[act] != 0, next_activation(m, d, d.act_dot)[last],
                      d.act[last])
  else:
    state = jnp.zeros(act.size, dtype)
  uadr = np.minimum(m.actuator_ctrladr[act], max(m.nu - 1, 0))
  signal = jnp.where(stateless, controls(m, d)[uadr] if m.nu else 0.0, state)
  bias_vel = bias_vel + gain_vel * signal

  bias_vel = jnp.where(_saturated(m, d, act), 0.0, bias_vel)

  # one diagonal entry per output row: SO3 actuators repeat theirs over their three rows
  counts = m.actuator_outnum[act]
  rows = np.repeat(oadr, counts) + np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts,
                                                                        counts)
  per_row = jnp.zeros(m.nout, dtype=dtype).at[rows].set(
      jnp.repeat(bias_vel, counts, total_repeat_length=rows.size))
  return d.actuator_moment.T @ (per_row[:, None] * d.actuator_moment)
