"""Muscle curves and activation dynamics against MuJoCo's mju_muscleGain, mju_muscleBias and
mju_muscleDynamics, over their whole domain including every breakpoint, with finite gradients."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest
from jax.test_util import check_grads

from flexor import muscle

# default muscle parameters (range0, range1, force, scale, lmin, lmax, vmax, fpmax, fvmax)
PRM = np.array([0.75, 1.05, -1.0, 200.0, 0.5, 1.6, 1.5, 1.3, 1.2])
LENGTHRANGE = np.array([0.2, 0.5])
ACC0 = 3.7


def _lengths(prm: np.ndarray) -> np.ndarray:
  """Actuator lengths sweeping normalized length across [lmin - 0.2, lmax + 0.4], with every
  breakpoint of the curves (lmin, a, 1, b, lmax) included exactly."""
  range0, range1, lmin, lmax = prm[0], prm[1], prm[4], prm[5]
  L0 = (LENGTHRANGE[1] - LENGTHRANGE[0]) / (range1 - range0)
  norm = np.concatenate([np.linspace(lmin - 0.2, lmax + 0.4, 301),
                         [lmin, 0.5 * (lmin + 1), 1.0, 0.5 * (1 + lmax), lmax]])
  return LENGTHRANGE[0] + (norm - range0) * L0


def _velocities(prm: np.ndarray) -> np.ndarray:
  range0, range1, vmax, fvmax = prm[0], prm[1], prm[6], prm[8]
  L0 = (LENGTHRANGE[1] - LENGTHRANGE[0]) / (range1 - range0)
  norm = np.concatenate([np.linspace(-1.5, fvmax, 41), [-1.0, 0.0, fvmax - 1]])
  return norm * L0 * vmax


PRMS = {"default": PRM, "force": np.array([0.6, 1.3, 30.0, 200.0, 0.3, 1.9, 2.0, 0.8, 1.6])}


@pytest.mark.parametrize("which", PRMS)
def test_gain_and_bias_match_mujoco(which: str):
  prm = PRMS[which]
  lengths, velocities = _lengths(prm), _velocities(prm)
  grid_l, grid_v = np.meshgrid(lengths, velocities, indexing="ij")
  ours = muscle.muscle_gain(jnp.asarray(grid_l), jnp.asarray(grid_v), jnp.asarray(LENGTHRANGE),
                            ACC0, jnp.asarray(prm))
  ref = np.vectorize(lambda l, v: mujoco.mju_muscleGain(l, v, LENGTHRANGE, ACC0, prm))(grid_l,
                                                                                        grid_v)
  np.testing.assert_allclose(ours, ref, rtol=1e-13, atol=1e-12)
  bias = muscle.muscle_bias(jnp.asarray(lengths), jnp.asarray(LENGTHRANGE), ACC0, jnp.asarray(prm))
  ref = [mujoco.mju_muscleBias(l, LENGTHRANGE, ACC0, prm) for l in lengths]
  np.testing.assert_allclose(bias, ref, rtol=1e-13, atol=1e-12)


@pytest.mark.parametrize("tausmooth", [0.0, 0.3])
def test_dynamics_match_mujoco(tausmooth: float):
  dynprm = np.array([0.01, 0.04, tausmooth])
  ctrl, act = np.meshgrid(np.linspace(-0.3, 1.3, 33), np.linspace(-0.2, 1.2, 29), indexing="ij")
  ours = muscle.muscle_dynamics(jnp.asarray(ctrl), jnp.asarray(act), jnp.asarray(dynprm))
  ref = np.vectorize(lambda c, a: mujoco.mju_muscleDynamics(c, a, dynprm))(ctrl, act)
  np.testing.assert_allclose(ours, ref, rtol=1e-13, atol=1e-10)


def test_gain_vel_is_the_velocity_derivative():
  lengths, velocities = _lengths(PRM), _velocities(PRM)[:-3]  # kinks excluded: one-sided there
  grid_l, grid_v = (jnp.asarray(x) for x in np.meshgrid(lengths, velocities, indexing="ij"))
  args = (jnp.asarray(LENGTHRANGE), ACC0, jnp.asarray(PRM))
  auto = jax.vmap(jax.vmap(jax.grad(muscle.muscle_gain, argnums=1), (0, 0, None, None, None)),
                  (0, 0, None, None, None))(grid_l, grid_v, *args)
  np.testing.assert_allclose(muscle.muscle_gain_vel(grid_l, grid_v, *args), auto,
                             rtol=1e-12, atol=1e-9)


def test_gradients_finite_everywhere():
  """Gradients w.r.t. length, velocity and every parameter are finite, breakpoints included."""
  lengths, velocities = _lengths(PRM), _velocities(PRM)
  grid_l, grid_v = (jnp.asarray(x) for x in np.meshgrid(lengths, velocities, indexing="ij"))

  def total(l, v, prm, acc0):
    return (jnp.sum(muscle.muscle_gain(l, v, jnp.asarray(LENGTHRANGE), acc0, prm))
            + jnp.sum(muscle.muscle_bias(l, jnp.asarray(LENGTHRANGE), acc0, prm))
            + jnp.sum(muscle.muscle_dynamics(l, v, prm[:3])))

  grads = jax.grad(total, argnums=(0, 1, 2, 3))(grid_l, grid_v, jnp.asarray(PRM), ACC0)
  for g in grads:
    assert np.all(np.isfinite(g))


def test_gradient_matches_finite_differences_inside_pieces():
  l, v = 0.31, 0.07
  args = (jnp.asarray(LENGTHRANGE), ACC0)

  def f(x):
    return muscle.muscle_gain(x[0], x[1], *args, x[2:]) + muscle.muscle_bias(x[0], *args, x[2:])

  check_grads(f, (jnp.concatenate([jnp.array([l, v]), jnp.asarray(PRM)]),),
                            order=1, modes=("fwd", "rev"), eps=1e-6)
