"""MuJoCo's muscle model: force-length-velocity curves and activation dynamics.

These are ``mju_muscleGain``, ``mju_muscleBias`` and ``mju_muscleDynamics`` of
``engine_util_misc.c``, written as branch-free JAX over any batch shape. Every piece of the
piecewise curves is evaluated on a clipped argument and the result chosen with ``jnp.where``, so
values match MuJoCo to rounding over the whole domain, boundaries included, and gradients are
finite everywhere (one-sided at the kinks, as the curves are only C1 there).

A muscle's gain and bias parameter rows (``actuator_gainprm``, ``actuator_biasprm``, equal for
muscles) hold ``(range0, range1, force, scale, lmin, lmax, vmax, fpmax, fvmax)``:

* ``range``: the operating range of normalized length, mapped onto ``actuator_lengthrange``;
* ``force``: peak active force in N; negative means ``scale / acc0``;
* ``lmin``, ``lmax``: normalized lengths where the active force falls to zero;
* ``vmax``: shortening velocity at which the active force vanishes, in optimal lengths per s;
* ``fpmax``: passive force at ``lmax``, relative to the peak force;
* ``fvmax``: active force at saturating lengthening velocity, relative to the peak force.

The dynamics row ``actuator_dynprm`` holds ``(tau_act, tau_deact, tausmooth)``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from flexor.math import MINVAL


def _pos(x: jax.Array) -> jax.Array:
  """max(mjMINVAL, x): MuJoCo's guard for the denominators of the curves."""
  return jnp.maximum(MINVAL, x)


def _unpack(prm: jax.Array):
  return tuple(prm[..., k] for k in range(9))


def _peak_force(force: jax.Array, scale: jax.Array, acc0: jax.Array) -> jax.Array:
  """Peak active force F0 in N: ``force``, or ``scale / acc0`` where ``force`` < 0."""
  return jnp.where(force < 0, scale / _pos(acc0), force)


def _normalize(length: jax.Array, lengthrange: jax.Array, range0: jax.Array,
               range1: jax.Array) -> tuple[jax.Array, jax.Array]:
  """(L0, L): the optimal length in m and the normalized length of ``length``."""
  L0 = (lengthrange[..., 1] - lengthrange[..., 0]) / _pos(range1 - range0)
  return L0, range0 + (length - lengthrange[..., 0]) / _pos(L0)


def gain_length(L: jax.Array, lmin: jax.Array, lmax: jax.Array) -> jax.Array:
  """Normalized active force-length curve FL(L) (``mju_muscleGainLength``), peak 1 at L = 1.

  Four half-quadratics joined at a = (lmin + 1) / 2 and b = (1 + lmax) / 2; zero outside
  [lmin, lmax].
  """
  a = 0.5 * (lmin + 1)
  b = 0.5 * (1 + lmax)
  x1 = (L - lmin) / _pos(a - lmin)
  x2 = (1 - L) / _pos(1 - a)
  x3 = (L - 1) / _pos(b - 1)
  x4 = (lmax - L) / _pos(lmax - b)
  curve = jnp.where(L <= a, 0.5 * x1 * x1,
                    jnp.where(L <= 1, 1 - 0.5 * x2 * x2,
                              jnp.where(L <= b, 1 - 0.5 * x3 * x3, 0.5 * x4 * x4)))
  return jnp.where((lmin <= L) & (L <= lmax), curve, 0.0)


def gain_velocity(V: jax.Array, fvmax: jax.Array) -> jax.Array:
  """Normalized force-velocity curve FV(V): 0 below V = -1, quadratic to 1 at V = 0, quadratic
  to ``fvmax`` at V = fvmax - 1, constant beyond."""
  y = fvmax - 1
  shortening = (jnp.clip(V, -1, 0) + 1) ** 2
  lengthening = fvmax - (y - jnp.clip(V, 0, y)) ** 2 / _pos(y)
  return jnp.where(V <= -1, 0.0, jnp.where(V <= 0, shortening,
                                           jnp.where(V <= y, lengthening, fvmax)))


def passive_length(L: jax.Array, lmax: jax.Array) -> jax.Array:
  """Normalized passive force FP(L) / fpmax: zero below L = 1, half-quadratic to
  b = (1 + lmax) / 2, then linear with slope 1 / (b - 1)."""
  b = 0.5 * (1 + lmax)
  x_quad = (jnp.clip(L, 1, b) - 1) / _pos(b - 1)
  x_lin = (L - b) / _pos(b - 1)
  return jnp.where(L <= 1, 0.0, jnp.where(L <= b, 0.5 * x_quad * x_quad, 0.5 + x_lin))


def muscle_gain(length: jax.Array, velocity: jax.Array, lengthrange: jax.Array,
                acc0: jax.Array, prm: jax.Array) -> jax.Array:
  """Active muscle gain -F0 FL(L) FV(V) (``mju_muscleGain``); force = gain * activation.

  Args:
    length: (...,) actuator length, m.
    velocity: (...,) actuator velocity, m/s.
    lengthrange: (..., 2) the muscle's length range, m.
    acc0: (...,) ``actuator_acc0``.
    prm: (..., >=9) the gain parameter row.
  Returns:
    (...,) the gain, N; negative (muscles pull).
  """
  range0, range1, force, scale, lmin, lmax, vmax, _, fvmax = _unpack(prm)
  L0, L = _normalize(length, lengthrange, range0, range1)
  V = velocity / _pos(L0 * vmax)
  return -_peak_force(force, scale, acc0) * gain_length(L, lmin, lmax) * gain_velocity(V, fvmax)


def muscle_gain_vel(length: jax.Array, velocity: jax.Array, lengthrange: jax.Array,
                    acc0: jax.Array, prm: jax.Array) -> jax.Array:
  """d(muscle_gain)/d(velocity) (``mjd_muscleGain_vel``), (...,)."""
  range0, range1, force, scale, lmin, lmax, vmax, _, fvmax = _unpack(prm)
  L0, L = _normalize(length, lengthrange, range0, range1)
  V = velocity / _pos(L0 * vmax)
  y = fvmax - 1
  dfv = jnp.where(V <= -1, 0.0, jnp.where(V <= 0, 2 * V + 2,
                                          jnp.where(V <= y, (2 * y - 2 * V) / _pos(y), 0.0)))
  return (-_peak_force(force, scale, acc0) * gain_length(L, lmin, lmax) * dfv
          / _pos(L0 * vmax))


def muscle_bias(length: jax.Array, lengthrange: jax.Array, acc0: jax.Array,
                prm: jax.Array) -> jax.Array:
  """Passive muscle force -F0 fpmax FP(L) (``mju_muscleBias``), (...,) N."""
  range0, range1, force, scale, _, lmax, _, fpmax, _ = _unpack(prm)
  _, L = _normalize(length, lengthrange, range0, range1)
  return -_peak_force(force, scale, acc0) * fpmax * passive_length(L, lmax)


def sigmoid(x: jax.Array) -> jax.Array:
  """Quintic smooth step 6x^5 - 15x^4 + 10x^3 on [0, 1], 0 below, 1 above (``mju_sigmoid``)."""
  x = jnp.clip(x, 0.0, 1.0)
  return x * x * x * (3 * x * (2 * x - 5) + 10)


def muscle_dynamics(ctrl: jax.Array, act: jax.Array, prm: jax.Array) -> jax.Array:
  """Activation derivative d(act)/dt of a muscle (``mju_muscleDynamics``), (...,) 1/s.

  The time constant grows with activation when activating and shrinks when deactivating
  (Millard et al. 2013); with ``tausmooth`` > 0 the switch between them is a quintic sigmoid of
  width tausmooth in (ctrl - act) instead of a step.

  Args:
    ctrl: (...,) control, clamped to [0, 1] here.
    act: (...,) activation.
    prm: (..., >=3) ``(tau_act, tau_deact, tausmooth)``.
  """
  ctrlclamp = jnp.clip(ctrl, 0.0, 1.0)
  actclamp = jnp.clip(act, 0.0, 1.0)
  tau_act = prm[..., 0] * (0.5 + 1.5 * actclamp)
  tau_deact = prm[..., 1] / (0.5 + 1.5 * actclamp)
  width = prm[..., 2]
  dctrl = ctrlclamp - act
  smooth = width >= MINVAL
  blend = sigmoid(dctrl / jnp.where(smooth, width, 1.0) + 0.5)
  tau = jnp.where(smooth, tau_deact + (tau_act - tau_deact) * blend,
                  jnp.where(dctrl > 0, tau_act, tau_deact))
  return dctrl / _pos(tau)
