"""Smooth reward shaping: ``tolerance``, after dm_control's ``rewards.tolerance``."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp


def _gaussian(d: jax.Array, value_at_margin: float) -> jax.Array:
  """exp(-(d s)^2 / 2) with s chosen so the value at d = 1 is ``value_at_margin``, in (0, 1)."""
  scale = math.sqrt(-2.0 * math.log(value_at_margin))
  return jnp.exp(-0.5 * (d * scale) ** 2)


def _quadratic(d: jax.Array, value_at_margin: float) -> jax.Array:
  """1 - (d s)^2 where |d s| < 1, else 0, with s chosen so the value at d = 1 is
  ``value_at_margin``, in [0, 1)."""
  scaled = d * math.sqrt(1.0 - value_at_margin)
  return jnp.where(jnp.abs(scaled) < 1.0, 1.0 - scaled ** 2, 0.0)


_SIGMOIDS = {"gaussian": _gaussian, "quadratic": _quadratic}


def tolerance(x: jax.Array, bounds: tuple[float, float] = (0.0, 0.0), margin: float = 0.0,
              sigmoid: str = "gaussian", value_at_margin: float = 0.1) -> jax.Array:
  """1 where ``x`` lies in ``bounds``, falling smoothly to ``value_at_margin`` at ``margin``
  outside them, elementwise.

  Outside the bounds the value is ``sigmoid(d)`` of the distance to the nearer bound in units of
  ``margin``, d = dist / margin: a Gaussian by default (positive everywhere, so a gradient and a
  reward signal exist far from the target), or a quadratic that reaches 0 at d = 1 /
  sqrt(1 - value_at_margin). With ``margin = 0`` it is the indicator of the bounds.

  Args:
    x: values, any shape.
    bounds: (lower, upper), lower <= upper; equal for a single target value.
    margin: >= 0, in the units of x.
    sigmoid: "gaussian" (value_at_margin in (0, 1)) or "quadratic" (in [0, 1)).
    value_at_margin: the value at distance ``margin`` from the bounds.
  Returns:
    values in [0, 1], shaped like x.
  """
  lower, upper = bounds
  if lower > upper:
    raise ValueError(f"bounds must satisfy lower <= upper, got {bounds}")
  if margin < 0:
    raise ValueError(f"margin must be non-negative, got {margin}")
  if sigmoid not in _SIGMOIDS:
    raise ValueError(f"unknown sigmoid {sigmoid!r}; choose one of {sorted(_SIGMOIDS)}")
  if not (0.0 < value_at_margin < 1.0 or (sigmoid == "quadratic" and value_at_margin == 0.0)):
    raise ValueError(f"value_at_margin {value_at_margin} is outside the range of a {sigmoid} "
                     "sigmoid: (0, 1) for gaussian, [0, 1) for quadratic")
  in_bounds = (lower <= x) & (x <= upper)
  if margin == 0:
    return jnp.where(in_bounds, 1.0, 0.0).astype(x.dtype)
  d = jnp.where(x < lower, lower - x, x - upper) / margin
  return jnp.where(in_bounds, 1.0, _SIGMOIDS[sigmoid](d, value_at_margin)).astype(x.dtype)
