"""History buffers: delayed controls and delayed or sampled sensors (MuJoCo 4's ``nsample``,
``interp``, ``delay`` and sensor ``interval``).

An actuator or sensor with ``nsample = n > 0`` owns ``Data.history[adr : adr + 2 + n + n dim]``
in MuJoCo's layout: a user slot, the cursor (physical index of the newest sample), n sample times
and n samples of ``dim`` values (an actuator's ``ctrlnum`` controls, a sensor's ``sensor_dim``),
a ring whose logical sample j (0 oldest) sits at physical index ``(cursor + 1 + j) % n``.

* ``read`` is ``mju_historyRead``: the value at time t by zero-order hold, linear or cubic
  (Catmull-Rom Hermite) interpolation, holding the oldest and newest samples outside them;
* ``insert`` is ``mju_historyInsert``: a new newest sample advances the cursor, a time already
  held overwrites its sample, an older time replaces the oldest, and a time in between drops the
  oldest and shifts the earlier samples down;
* ``delayed_ctrl`` gives the controls actuators read (``mj_fwdActuation``): a delayed actuator's
  controls at ``time - delay``;
* ``delayed_sensors`` gives the sensordata of a stage (``compute_or_read_sensor``): a delayed
  sensor's values at ``time - delay``, and a sensor with a period its last sample between ticks;
* ``advance`` records the step's controls and sensor values before the state advances
  (``mj_advance``);
* ``read_ctrl``, ``read_sensor``, ``init_ctrl_history`` and ``init_sensor_history`` are MuJoCo's
  ``mj_readCtrl``, ``mj_readSensor``, ``mj_initCtrlHistory`` and ``mj_initSensorHistory``: what
  an element reads at a given time, and a buffer preloaded with a known past.

Buffers of one kind with equal n and dim are processed together, so a model pays one gather and
one scatter per (n, dim) group. Delays and intervals are traced parameters: the mode each implies
is chosen with ``where``, so they can be randomized across a batch.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from flexor.types import Data, Model

# mjMINVAL: times closer than this are the same sample
_MINVAL = 1e-15


_Groups = list[tuple[np.ndarray, int, int]]


def _groups(history: np.ndarray, adr: np.ndarray, dim: np.ndarray) -> _Groups:
  """(element ids, n, dim) of the elements with a buffer, one group per (n, dim)."""
  n = history[:, 0] if len(history) else np.zeros(0, np.int32)
  keys = sorted({(int(n[i]), int(dim[i])) for i in np.flatnonzero(adr >= 0)})
  return [(np.flatnonzero((adr >= 0) & (n == k) & (dim == d)), k, d) for k, d in keys]


def _layout(adr: np.ndarray, n: int, dim: int) -> tuple[np.ndarray, np.ndarray]:
  """Static addresses of the buffers at ``adr`` (k,): times (k, n) and values (k, n, dim)."""
  times = adr[:, None] + 2 + np.arange(n)[None, :]
  values = adr[:, None, None] + 2 + n + (np.arange(n)[:, None] * dim + np.arange(dim))[None]
  return times, values


def _logical(cursor: jax.Array, n: int) -> jax.Array:
  """Physical index of each logical sample (k, n), oldest first."""
  return (cursor[:, None] + 1 + jnp.arange(n)[None, :]) % n


def _ring(history: jax.Array, adr: np.ndarray, n: int, dim: int):
  """(cursor (k,) int, times (k, n), values (k, n, dim)) of the buffers at ``adr``, in logical
  order."""
  times_at, values_at = _layout(adr, n, dim)
  cursor = history[adr + 1].astype(jnp.int32)
  phys = _logical(cursor, n)
  times = jnp.take_along_axis(history[times_at], phys, axis=1)
  values = jnp.take_along_axis(history[values_at], phys[:, :, None], axis=1)
  return cursor, times, values


def read(history: jax.Array, adr: np.ndarray, n: int, dim: int, t: jax.Array,
         interp: np.ndarray) -> jax.Array:
  """Values of the buffers at ``adr`` (k,) at times ``t`` (k,), as ``mju_historyRead``.

  Args:
    history: (nhistory,) Data.history.
    adr: (k,) static buffer addresses, each with n samples of dim values.
    t: (k,) times in s.
    interp: (k,) static interpolation orders: 0 zero-order hold, 1 linear, 2 cubic.
  Returns:
    (k, dim) values.
  """
  _, times, values = _ring(history, adr, n, dim)
  if n == 1:
    return values[:, 0]
  # the bracketing samples lo = i - 1 < t <= hi = i, for t strictly inside the buffer
  i = jnp.clip(jnp.sum(times < t[:, None], axis=1), 1, n - 1)
  pick = lambda j: jnp.take_along_axis(values, jnp.clip(j, 0, n - 1)[:, None, None], axis=1)[:, 0]
  at = lambda j: jnp.take_along_axis(times, jnp.clip(j, 0, n - 1)[:, None], axis=1)[:, 0]
  t_lo, t_hi = at(i - 1), at(i)
  v_lo, v_hi = pick(i - 1), pick(i)
  dt = t_hi - t_lo
  alpha = ((t - t_lo) / jnp.where(dt > 0, dt, 1.0))[:, None]
  linear = v_lo + alpha * (v_hi - v_lo)
  # Catmull-Rom slopes from the neighbours, zero at the ends (constant extrapolation)
  slope_lo = jnp.where((i > 1)[:, None], (v_hi - pick(i - 2)) / (t_hi - at(i - 2))[:, None], 0.0)
  slope_hi = jnp.where((i < n - 1)[:, None], (pick(i + 1) - v_lo) / (at(i + 1) - t_lo)[:, None],
                       0.0)
  a2 = alpha * alpha
  a3 = a2 * alpha
  cubic = ((2 * a3 - 3 * a2 + 1) * v_lo + (a3 - 2 * a2 + alpha) * dt[:, None] * slope_lo
           + (-2 * a3 + 3 * a2) * v_hi + (a3 - a2) * dt[:, None] * slope_hi)
  order = jnp.asarray(interp)[:, None]
  inside = jnp.where(order == 0, v_lo, jnp.where(order == 1, linear, cubic))
  inside = jnp.where((jnp.abs(t - t_hi) < _MINVAL)[:, None], v_hi, inside)
  inside = jnp.where((t >= times[:, -1] - _MINVAL)[:, None], values[:, -1], inside)
  return jnp.where((t <= times[:, 0] + _MINVAL)[:, None], values[:, 0], inside)


def insert(history: jax.Array, adr: np.ndarray, n: int, dim: int, t: jax.Array,
           value: jax.Array, mask: jax.Array) -> jax.Array:
  """Records ``value`` (k, dim) at time ``t`` () in the buffers at ``adr`` (k,) where ``mask``
  (k,) holds, as ``mju_historyInsert``; returns the new (nhistory,) history."""
  cursor, times, values = _ring(history, adr, n, dim)
  i = jnp.sum(times < t, axis=1)  # logical insertion index: times[i - 1] < t <= times[i]
  same = (i < n) & (jnp.abs(t - jnp.take_along_axis(
      times, jnp.minimum(i, n - 1)[:, None], axis=1)[:, 0]) < _MINVAL)
  # the new sample's logical slot; strictly after the oldest, the older samples shift down one
  slot = jnp.where(same, i, jnp.maximum(i - 1, 0))
  shift = ~same & (i > 0)
  j = jnp.arange(n)[None, :]
  source = jnp.where(shift[:, None] & (j < slot[:, None]), j + 1, j)
  new = (j == slot[:, None]) & mask[:, None]
  source = jnp.where(mask[:, None], source, j)
  times = jnp.where(new, t, jnp.take_along_axis(times, source, axis=1))
  values = jnp.where(new[:, :, None], value[:, None, :],
                     jnp.take_along_axis(values, source[:, :, None], axis=1))
  # a new newest sample takes the oldest's physical slot: the ring turns instead of shifting
  cursor = jnp.where(mask & (i == n), (cursor + 1) % n, cursor)
  phys = _logical(cursor, n)
  times_at, values_at = _layout(adr, n, dim)
  history = history.at[adr + 1].set(cursor.astype(history.dtype))
  history = history.at[jnp.take_along_axis(jnp.asarray(times_at), phys, axis=1)].set(times)
  return history.at[jnp.take_along_axis(jnp.asarray(values_at), phys[:, :, None], axis=1)].set(
      values.astype(history.dtype))


def _init(history: jax.Array, adr: int, n: int, dim: int, values: jax.Array,
          times: jax.Array | None, user: jax.Array | float | None) -> jax.Array:
  """Rewrites one buffer as ``mju_historyInit``: ``times`` (n,), strictly increasing, and
  ``values`` (n, dim) stored in order with the cursor on the last, the user slot set unless
  None. Without ``times`` the stored times are kept in storage order, as MuJoCo does."""
  if times is None:
    times = history[adr + 2:adr + 2 + n]
  if not isinstance(times, jax.core.Tracer) and np.any(np.diff(np.asarray(times)) < _MINVAL):
    raise ValueError(f"history times must be strictly increasing, got {np.asarray(times)}")
  values = jnp.asarray(values, history.dtype).reshape(n, dim)
  history = history.at[adr + 1].set(n - 1)
  history = history.at[adr + 2:adr + 2 + n].set(jnp.asarray(times, history.dtype))
  history = history.at[adr + 2 + n:adr + 2 + n + n * dim].set(values.ravel())
  return history if user is None else history.at[adr].set(user)


def _buffer(kind: str, history: np.ndarray, adr: np.ndarray, i: int) -> tuple[int, int]:
  if history[i, 0] <= 0:
    raise ValueError(f"{kind} {i} has no history buffer (nsample = 0)")
  return int(adr[i]), int(history[i, 0])


def _read_one(d: Data, adr: int, history: np.ndarray, dim: int, delay: jax.Array,
              time: jax.Array | float, interp: int | None) -> jax.Array:
  """One buffer's values (dim,) at ``time - delay``; ``history`` is its (nsample, interp)."""
  order = history[1] if interp is None else interp
  t = jnp.reshape(jnp.asarray(time, d.history.dtype) - delay, (1,))
  return read(d.history, np.array([adr]), int(history[0]), dim, t, np.array([order]))[0]


def read_ctrl(m: Model, d: Data, i: int, time: jax.Array | float,
              interp: int | None = None) -> jax.Array:
  """Actuator ``i``'s controls (ctrlnum,) as it reads them at ``time``: from its history at
  ``time - actuator_delay``, by ``interp`` (default: the actuator's own), or ``d.ctrl`` without
  a buffer (``mj_readCtrl``)."""
  adr, num = int(m.actuator_ctrladr[i]), int(m.actuator_ctrlnum[i])
  if m.actuator_history[i, 0] <= 0:
    return d.ctrl[adr:adr + num]
  return _read_one(d, int(m.actuator_historyadr[i]), m.actuator_history[i], num,
                   m.actuator_delay[i], time, interp)


def read_sensor(m: Model, d: Data, i: int, time: jax.Array | float,
                interp: int | None = None) -> jax.Array:
  """Sensor ``i``'s values (dim,) at ``time`` from its history at ``time - sensor_delay``, by
  ``interp`` (default: the sensor's own), or its sensordata without a buffer
  (``mj_readSensor``)."""
  adr, dim = int(m.sensor_adr[i]), int(m.sensor_dim[i])
  if m.sensor_history[i, 0] <= 0:
    return d.sensordata[adr:adr + dim]
  return _read_one(d, int(m.sensor_historyadr[i]), m.sensor_history[i], dim, m.sensor_delay[i],
                   time, interp)


def init_ctrl_history(m: Model, d: Data, i: int, values: jax.Array,
                      times: jax.Array | None = None) -> Data:
  """Data with actuator ``i``'s buffer holding ``values`` (nsample, ctrlnum) at ``times``
  (nsample,), strictly increasing (default: the buffer's times), as ``mj_initCtrlHistory``."""
  adr, n = _buffer("actuator", m.actuator_history, m.actuator_historyadr, i)
  return d.replace(history=_init(d.history, adr, n, int(m.actuator_ctrlnum[i]), values, times,
                                 None))


def init_sensor_history(m: Model, d: Data, i: int, values: jax.Array,
                        times: jax.Array | None = None, phase: jax.Array | float = 0.0) -> Data:
  """Data with sensor ``i``'s buffer holding ``values`` (nsample, dim) at ``times`` (nsample,)
  (default: the buffer's times) and ``phase`` as its last tick, as ``mj_initSensorHistory``."""
  adr, n = _buffer("sensor", m.sensor_history, m.sensor_historyadr, i)
  return d.replace(history=_init(d.history, adr, n, int(m.sensor_dim[i]), values, times, phase))


def _ctrl_groups(m: Model) -> _Groups:
  return _groups(m.actuator_history, m.actuator_historyadr, m.actuator_ctrlnum)


def _sensor_groups(m: Model, ids: np.ndarray | None = None) -> _Groups:
  adr = m.sensor_historyadr
  if ids is not None:
    adr = np.where(np.isin(np.arange(m.nsensor), ids), adr, -1)
  return _groups(m.sensor_history, adr, m.sensor_dim)


def _ctrl_index(m: Model, act: np.ndarray, dim: int) -> np.ndarray:
  return m.actuator_ctrladr[act][:, None] + np.arange(dim)[None, :]


def _sensor_index(m: Model, ids: np.ndarray, dim: int) -> np.ndarray:
  return m.sensor_adr[ids][:, None] + np.arange(dim)[None, :]


def delayed_ctrl(m: Model, d: Data) -> jax.Array:
  """The controls actuators read before clamping, (nu,): ``ctrl``, with a delayed actuator's
  (``actuator_delay`` != 0) read from its history at ``time - delay``."""
  ctrl = d.ctrl
  for act, n, dim in _ctrl_groups(m):
    delay = m.actuator_delay[act]
    past = read(d.history, m.actuator_historyadr[act], n, dim, d.time - delay,
                m.actuator_history[act, 1])
    index = _ctrl_index(m, act, dim)
    ctrl = ctrl.at[index].set(jnp.where((delay != 0)[:, None], past, ctrl[index]))
  return ctrl


def _due(m: Model, d: Data, ids: np.ndarray) -> tuple[jax.Array, jax.Array]:
  """(period (k,), whether a periodic sensor's next tick has come (k,))."""
  period = m.sensor_interval[ids, 0]
  return period, (period > 0) & (d.history[m.sensor_historyadr[ids]] + period <= d.time)


def delayed_sensors(m: Model, d: Data, ids: np.ndarray, sensordata: jax.Array) -> jax.Array:
  """Sensordata (nsensordata,) with the history of sensors ``ids`` of one stage applied.

  ``sensordata`` holds the values just computed. A sensor with ``delay > 0`` reads its buffer at
  ``time - delay``; one with a period, between its ticks, reads its buffer at ``time``.
  """
  for ids_, n, dim in _sensor_groups(m, ids):
    delay = m.sensor_delay[ids_]
    period, due = _due(m, d, ids_)
    delayed = delay > 0
    t = jnp.where(delayed, d.time - delay, d.time)
    past = read(d.history, m.sensor_historyadr[ids_], n, dim, t, m.sensor_history[ids_, 1])
    index = _sensor_index(m, ids_, dim)
    use = delayed | ((period > 0) & ~due)
    sensordata = sensordata.at[index].set(jnp.where(use[:, None], past, sensordata[index]))
  return sensordata


def advance(m: Model, d: Data, compute: Callable[[Model, Data, np.ndarray], jax.Array]) -> Data:
  """Records the step's controls and sensor values at ``d.time`` (``mj_advance``).

  Every buffered actuator records its raw ``ctrl``. A sensor records on every step, or with a
  period only when its tick has come (the tick then advances by one period); a delayed sensor
  records a value computed now by ``compute(m, d, ids) -> (nsensordata,)``, others their
  sensordata.
  """
  if not m.nhistory:
    return d
  history = d.history
  for act, n, dim in _ctrl_groups(m):
    value = d.ctrl[_ctrl_index(m, act, dim)]
    history = insert(history, m.actuator_historyadr[act], n, dim, d.time, value,
                     jnp.ones(len(act), bool))
  groups = _sensor_groups(m)
  if groups:
    fresh = compute(m, d, np.concatenate([ids for ids, _, _ in groups]))
  for ids, n, dim in groups:
    adr = m.sensor_historyadr[ids]
    period, due = _due(m, d, ids)
    index = _sensor_index(m, ids, dim)
    value = jnp.where((m.sensor_delay[ids] > 0)[:, None], fresh[index], d.sensordata[index])
    record = (period <= 0) | due
    history = insert(history, adr, n, dim, d.time, value, record)
    history = history.at[adr].add(jnp.where(due, period, 0.0))
  return d.replace(history=history)
