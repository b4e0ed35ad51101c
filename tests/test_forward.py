"""forward and inverse against MuJoCo C, and jit / vmap / grad checks of every public stage."""

from __future__ import annotations

import functools
from typing import Callable

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest
from jax.test_util import check_grads

import smooth_support as S
import support
from flexor import forward as fx_forward
from flexor import inverse as fx_inverse
from flexor.crb import crb, factor_m, solve_m, spd_solve
from flexor.forward import (fwd_acceleration, fwd_actuation, fwd_constraint, fwd_position,
                            fwd_velocity, inv_acceleration)
from flexor.mjcf.from_mujoco import from_mujoco
from flexor.integrate import euler
from flexor.passive import dof_damper_deriv, passive
from flexor.rne import rne, rne_bias, rne_postconstraint
from flexor.types import Data, Model

# qacc, qacc_smooth and qfrc_smooth from mj_forward; qfrc_inverse from mj_inverse at a random
# qacc. qfrc_constraint is zero on both sides (constraints disabled); qfrc_actuator likewise
# (actuation disabled).
FIELDS = ("qacc", "qacc_smooth", "qfrc_smooth", "qfrc_inverse", "qfrc_constraint",
          "qfrc_actuator")
# Fields that solve with qM: undefined where qM is singular (smooth_support.Case.singular).
SOLVED_FIELDS = ("qacc", "qacc_smooth")


@pytest.mark.parametrize("field", FIELDS)
@pytest.mark.parametrize("name", S.model_names())
def test_conformance(name: str, field: str):
  case = S.case(name)
  if case.singular and field in SOLVED_FIELDS:
    # Undefined: MuJoCo returns noise of order 1e15; flexor NaN with warning_nan, or noise.
    flagged = case.actual("warning_nan") | (np.abs(case.actual(field)).max(axis=-1) > 1e8)
    assert np.all(flagged), f"{name}: singular qM, but {field} looks regular and is unflagged"
    return
  err = support.relerr(case.actual(field), case.expected[field])
  assert err <= S.TOL, f"{name}: {field} relative error {err:.2e}"


# --- the public entry points themselves, on a few models ---------------------------------------

ENTRY_MODELS = ("dmc/humanoid", "ex/arm")

_jit_forward = jax.jit(fx_forward)
_jit_inverse = jax.jit(fx_inverse)


def _state(case: S.Case, s: int = 0) -> Data:
  return jax.tree.map(lambda x: x[s], S.flexor_data(case.fm, case.states))


@pytest.mark.parametrize("name", ENTRY_MODELS)
def test_inverse_entry_point(name: str):
  """flexor.inverse (position and velocity stages included) equals mj_inverse."""
  case = S.case(name)
  for s in range(S.NSTATE):
    out = _jit_inverse(case.fm, _state(case, s))
    err = support.relerr(out.qfrc_inverse, case.expected["qfrc_inverse"][s])
    assert err <= S.TOL, f"{name}: qfrc_inverse relative error {err:.2e}"


@pytest.mark.parametrize("name", ENTRY_MODELS)
def test_inverse_of_forward(name: str):
  """inverse at forward's qacc returns the applied forces: qfrc_applied + J' xfrc_applied."""
  case = S.case(name)
  d = _state(case)
  fwd = _jit_forward(case.fm, d)
  inv = _jit_inverse(case.fm, fwd)
  mj = case.mj
  md = mujoco.MjData(mj)
  md.qpos[:], md.qvel[:] = case.states.qpos[0], case.states.qvel[0]
  md.qfrc_applied[:], md.xfrc_applied[:] = case.states.qfrc_applied[0], case.states.xfrc_applied[0]
  mujoco.mj_forward(mj, md)
  applied = np.array(md.qfrc_applied)
  for b in range(1, mj.nbody):
    xfrc = md.xfrc_applied[b]
    mujoco.mj_applyFT(mj, md, xfrc[:3].copy(), xfrc[3:].copy(), md.xipos[b].copy(), b, applied)
  err = support.relerr(inv.qfrc_inverse, applied)
  assert err <= S.TOL, f"{name}: inverse(forward) - applied relative error {err:.2e}"


def test_warning_nan():
  """Reuses the conformance case's compiled evaluation: no extra compile."""
  case = S.case("dmc/cartpole")
  d = _state(case)
  assert not bool(S.evaluate(case.fm, d)[0].warning_nan)
  bad = d.replace(qvel=d.qvel.at[0].set(jnp.nan))
  assert bool(S.evaluate(case.fm, bad)[0].warning_nan)


# --- transforms: jit equals eager, vmap equals a loop -------------------------------------------

STAGES: dict[str, Callable[[Model, Data], Data]] = {
    "crb": crb, "factor_m": factor_m, "rne_bias": rne_bias,
    "rne_postconstraint": rne_postconstraint, "passive": passive, "fwd_position": fwd_position,
    "fwd_velocity": fwd_velocity, "fwd_actuation": fwd_actuation,
    "fwd_acceleration": fwd_acceleration, "fwd_constraint": fwd_constraint,
    "inv_acceleration": inv_acceleration, "forward": fx_forward, "inverse": fx_inverse,
    "rne": lambda m, d: rne(m, d, flg_acc=True),
    "solve_m": lambda m, d: solve_m(m, d, d.qfrc_applied),
}
# jit reorders and fuses floating-point operations.
TRANSFORM_TOL = 1e-12


@functools.cache
def _transform_case() -> tuple[Model, Data]:
  """smooth_support.OWN_XML (every joint type, gravcomp, fluid, actuators), forward done,
  batched over NSTATE states with the random qacc restored for the inverse stages."""
  mj = S.own_model()
  fm = from_mujoco(mj)
  states = S.random_states(mj, seed=5)
  states.ctrl[:] = 0.0
  batch = S.flexor_data(fm, states)
  looped = [_jit_forward(fm, jax.tree.map(lambda x, s=s: x[s], batch)) for s in range(S.NSTATE)]
  fwd = jax.tree.map(lambda *x: jnp.stack(x), *looped)
  return fm, fwd.replace(qacc=batch.qacc)


def _all_stages(m: Model, d: Data) -> dict[str, object]:
  """Every stage applied to the same input, so one compile serves all of them."""
  return {name: stage(m, d) for name, stage in STAGES.items()}


_jit_all_stages = jax.jit(_all_stages)


@functools.cache
def _transformed() -> tuple[list[dict[str, object]], dict[str, object]]:
  """(jit of every stage at each state, jit of vmap of every stage over the batch)."""
  fm, batch = _transform_case()
  looped = [_jit_all_stages(fm, jax.tree.map(lambda x, s=s: x[s], batch))
            for s in range(S.NSTATE)]
  batched = jax.jit(jax.vmap(_all_stages, in_axes=(None, 0)))(fm, batch)
  return looped, batched


def _assert_trees_close(a, b, what: str):
  leaves_a, leaves_b = jax.tree.leaves(a), jax.tree.leaves(b)
  assert len(leaves_a) == len(leaves_b)
  for x, y in zip(leaves_a, leaves_b):
    err = support.relerr(x, y)
    assert err <= TRANSFORM_TOL, f"{what}: relative error {err:.2e}"


@pytest.mark.parametrize("stage", STAGES)
def test_jit_equals_eager(stage: str):
  fm, batch = _transform_case()
  d = jax.tree.map(lambda x: x[0], batch)
  looped, _ = _transformed()
  _assert_trees_close(looped[0][stage], STAGES[stage](fm, d), f"{stage} jit vs eager")


@pytest.mark.parametrize("stage", STAGES)
def test_vmap_equals_loop(stage: str):
  looped, batched = _transformed()
  stacked = jax.tree.map(lambda *x: jnp.stack(x), *[out[stage] for out in looped])
  _assert_trees_close(batched[stage], stacked, f"{stage} vmap vs loop")


# --- gradients -----------------------------------------------------------------------------------

STATE_ARGS = ("qpos", "qvel")
PARAM_ARGS = ("body_mass", "body_inertia", "dof_damping", "dof_armature", "jnt_stiffness")


def _qacc_of(fm: Model, d: Data):
  """forward's qacc as a function of (qpos, qvel) and of a dict of Model parameters."""
  def fn(state: tuple[jax.Array, jax.Array], params: dict[str, jax.Array]) -> jax.Array:
    qpos, qvel = state
    return fx_forward(fm.replace(**params), d.replace(qpos=qpos, qvel=qvel)).qacc
  return jax.jit(fn)


@functools.cache
def _grad_case():
  fm, batch = _transform_case()
  d = jax.tree.map(lambda x: x[0], batch)
  return fm, d, _qacc_of(fm, d)


def test_check_grads_state():
  """d qacc / d (qpos, qvel) against central differences, forward and reverse mode."""
  fm, d, fn = _grad_case()
  params = {k: getattr(fm, k) for k in PARAM_ARGS}
  check_grads(lambda state: fn(state, params), ((d.qpos, d.qvel),), order=1,
              modes=("fwd", "rev"), eps=1e-6, atol=1e-6, rtol=1e-6)


def test_check_grads_params():
  """d qacc / d (body_mass, body_inertia, dof_damping, dof_armature, jnt_stiffness)."""
  fm, d, fn = _grad_case()
  params = {k: getattr(fm, k) for k in PARAM_ARGS}
  check_grads(lambda p: fn((d.qpos, d.qvel), p), (params,), order=1, modes=("fwd", "rev"),
              eps=1e-6, atol=1e-6, rtol=1e-6)


def test_finite_gradients_at_rest():
  """Zero velocity (drag's |v| v) and qpos at the spring reference (quaternion logs at 0)."""
  fm, d, fn = _grad_case()
  params = {k: getattr(fm, k) for k in PARAM_ARGS}
  state = (fm.qpos_spring, jnp.zeros_like(d.qvel))
  weights = jnp.asarray(np.random.default_rng(1).normal(size=fm.nv))
  grad = jax.grad(lambda st, p: weights @ fn(st, p), argnums=(0, 1))(state, params)
  for leaf in jax.tree.leaves(grad):
    assert np.all(np.isfinite(leaf)), "non-finite reverse-mode gradient at rest"
  tangent = jax.tree.map(jnp.ones_like, (state, params))
  _, jvp = jax.jvp(fn, (state, params), tangent)
  assert np.all(np.isfinite(jvp)), "non-finite forward-mode derivative at rest"
  rev = sum(jnp.vdot(g, t) for g, t in zip(jax.tree.leaves(grad), jax.tree.leaves(tangent)))
  np.testing.assert_allclose(weights @ jvp, rev, rtol=1e-9)


# --- solve_dynamics: accelerations differentiated through the inverse dynamics ----------------

SOLVE_PARAMS = ("body_mass", "body_inertia", "dof_armature", "dof_damping", "actuator_armature",
                "actuator_gear", "tendon_armature", "jnt_stiffness")


def _accelerations(fm: Model, d: Data, stage: str, through_qm: bool):
  """(qpos, qvel, params) -> fwd_acceleration's qacc_smooth or Euler's new qvel, computed by
  ``solve_dynamics`` or, with ``through_qm``, by a solve differentiated through qM."""
  h = fm.opt.timestep

  def fn(qpos: jax.Array, qvel: jax.Array, params: dict[str, jax.Array]) -> jax.Array:
    m = fm.replace(**params)
    out = fx_forward(m, d.replace(qpos=qpos, qvel=qvel))
    if stage == "fwd_acceleration":
      return spd_solve(out.qM, out.qfrc_smooth, out.qLD) if through_qm else out.qacc_smooth
    if not through_qm:
      return euler(m, out).qvel
    damping = h * dof_damper_deriv(m, out.qvel)[0]
    return out.qvel + h * spd_solve(out.qM + jnp.diag(damping),
                                    out.qfrc_smooth + out.qfrc_constraint)
  return jax.jit(fn)


@pytest.mark.parametrize("stage", ["fwd_acceleration", "euler"])
@pytest.mark.parametrize("name", ["own/tendon_params", "own/actuators_v4"])
def test_solve_dynamics_derivatives(name: str, stage: str):
  """solve_dynamics' derivatives, taken through the inverse dynamics at the solution, equal
  those of the plain solve taken through qM, in forward and reverse mode, w.r.t. the state and
  the Model's inertial, armature (dof, actuator, tendon), damping and stiffness parameters."""
  case = S.case(name)
  fm = case.fm
  d = _state(case)
  params = {k: getattr(fm, k) for k in SOLVE_PARAMS}
  params["dof_damping"] = params["dof_damping"] + 0.5  # every dof damped: Euler's solve is used
  args = (d.qpos, d.qvel, params)
  rng = np.random.default_rng(2)
  tangent = jax.tree.map(lambda x: jnp.asarray(rng.normal(size=np.shape(x))), args)
  cotangent = jnp.asarray(rng.normal(size=fm.nv))
  new, old = (_accelerations(fm, d, stage, through_qm) for through_qm in (False, True))
  assert np.abs(np.asarray(new(*args) - old(*args))).max() == 0.0
  jvp_new, jvp_old = (jax.jvp(f, args, tangent)[1] for f in (new, old))
  assert np.abs(np.asarray(jvp_old)).max() > 1.0
  err = support.relerr(jvp_new, jvp_old)
  assert err <= 1e-10, f"{name} {stage}: forward mode relative error {err:.2e}"
  vjp_new, vjp_old = (jax.vjp(f, *args)[1](cotangent) for f in (new, old))
  for (path, a), b in zip(jax.tree_util.tree_leaves_with_path(vjp_new),
                          jax.tree_util.tree_leaves(vjp_old)):
    err = support.relerr(a, b)
    assert err <= 1e-10, f"{name} {stage}: reverse mode {jax.tree_util.keystr(path)} {err:.2e}"


# --- float32 -------------------------------------------------------------------------------------

# float32 rounding (~6e-8) times qM's condition number and the passive terms' dynamic range.
F32_TOL = 1e-3


def test_float32_path():
  """A float32 Model keeps every output float32 and agrees with MuJoCo to float32 accuracy."""
  mj = S.mujoco_model(support.model_paths()["dmc/fish"])
  fm = from_mujoco(mj, dtype=jnp.float32)
  states = S.random_states(mj)
  expected = S.mujoco_results(mj, states)
  d = jax.tree.map(lambda x: x[0], S.flexor_data(fm, states))
  out = _jit_forward(fm, d)
  inv = _jit_inverse(fm, d)
  for field in ("qM", "qfrc_bias", "qfrc_passive", "qacc"):
    value = getattr(out, field)
    assert value.dtype == jnp.float32, f"{field} is {value.dtype}"
    err = support.relerr(value, expected[field][0])
    assert err <= F32_TOL, f"float32 {field} relative error {err:.2e}"
  assert inv.qfrc_inverse.dtype == jnp.float32
  err = support.relerr(inv.qfrc_inverse, expected["qfrc_inverse"][0])
  assert err <= F32_TOL, f"float32 qfrc_inverse relative error {err:.2e}"
