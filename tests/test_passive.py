"""passive (springs, dampers, gravity compensation, fluid, plasticity) against MuJoCo C.

Every conformance model, the disable bits SPRING / DAMPER / GRAVITY on the models that have
those forces, and ``smooth_support.OWN_XML``: ball and free springs off their reference pose,
gravity compensation routed through actuators (with a joint force limit), and a fluid with
density, viscosity and wind. Then the terms of ``passive_support``'s cases and own models:
tendon springs and dampers (with MuJoCo's tendon state injected, and end to end), polynomial
profiles, actuator damping, the ellipsoid fluid model, the plastic state (``update_plastic``
against mj_step), and gradients against central differences.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest

import passive_support as P
import smooth_support as S
import support
from flexor import fluid, forward, load_mjcf_string, make_data
from flexor.integrate import integrate_pos, step
from flexor.mjcf.from_mujoco import from_mujoco
from flexor.forward import fwd_velocity
from flexor.passive import dof_damper_deriv, passive, passive_vel_deriv, update_plastic

DSBL = mujoco.mjtDisableBit
FLAG_VARIANTS = {
    "spring": DSBL.mjDSBL_SPRING,
    "damper": DSBL.mjDSBL_DAMPER,
    "spring+damper": DSBL.mjDSBL_SPRING | DSBL.mjDSBL_DAMPER,
    "gravity": DSBL.mjDSBL_GRAVITY,
}
# Models with springs, dampers, gravity compensation (the bundled arm) and fluids (fish, swimmer).
FLAG_MODELS = ("ex/arm", "dmc/fish", "gym/swimmer", "dmc/humanoid")

@functools.cache
def own_case(disable: int = 0) -> S.Case:
  return S.make_case(S.own_model(disable), seed=3, zero_ctrl=True)


@pytest.mark.parametrize("field", S.PASSIVE_FIELDS)
@pytest.mark.parametrize("name", S.model_names())
def test_conformance(name: str, field: str):
  case = S.case(name)
  err = support.relerr(case.actual(field), case.expected[field])
  assert err <= S.TOL, f"{name}: {field} relative error {err:.2e}"


@pytest.mark.parametrize("flag", FLAG_VARIANTS)
@pytest.mark.parametrize("name", FLAG_MODELS)
def test_disable_flags(name: str, flag: str):
  base = S.case(name)
  actual, expected = S.passive_only(
      base, S.mujoco_model(support.model_paths()[name], FLAG_VARIANTS[flag]))
  for field in S.PASSIVE_FIELDS:
    err = support.relerr(actual[field], expected[field])
    assert err <= S.TOL, f"{name} with {flag} disabled: {field} relative error {err:.2e}"


OWN_FIELDS = S.PASSIVE_FIELDS + ("qfrc_actuator", "qacc", "qfrc_inverse")


@pytest.mark.parametrize("field", OWN_FIELDS)
@pytest.mark.parametrize("disable", [0, DSBL.mjDSBL_GRAVITY], ids=["all", "no-gravity"])
def test_own_model(disable: int, field: str):
  case = own_case(int(disable))
  err = support.relerr(case.actual(field), case.expected[field])
  assert err <= S.TOL, f"{field} relative error {err:.2e}"


def test_own_model_exercises_every_term():
  """Guards the own model: every passive term is non-zero, and the force limit binds."""
  case = own_case(0)
  for field in S.PASSIVE_FIELDS + ("qfrc_actuator",):
    assert np.abs(case.expected[field]).max() > 1e-3, f"{field} is zero in the own model"
  hinge = case.mj.jnt_dofadr[case.mj.joint("hinge").id]
  assert np.any(np.abs(case.expected["qfrc_actuator"][:, hinge]) == 0.05)


@pytest.mark.parametrize("flag", ["spring", "damper", "spring+damper"])
def test_own_model_flags(flag: str):
  actual, expected = S.passive_only(own_case(0), S.own_model(FLAG_VARIANTS[flag]))
  for field in S.PASSIVE_FIELDS:
    err = support.relerr(actual[field], expected[field])
    assert err <= S.TOL, f"{flag} disabled: {field} relative error {err:.2e}"


# --- tendons, polynomial springs and dampers, plasticity, actuator damping, ellipsoid fluid -----
# passive_support injects MuJoCo's tendon quantities (see there), so these run without the
# tendon stage. The default tier keeps the own models and a few corpus models with tendon
# springs, dampers or armature; -m slow sweeps every corpus model with tendons.



@pytest.mark.parametrize("field", P.PASSIVE_FIELDS)
@pytest.mark.parametrize("name", P.case_params())
def test_tendon_conformance(name: str, field: str):
  """Joint and tendon springs and dampers (poly, dead band, plastic, actuator damping), fluid."""
  case = P.case(name)
  err = support.relerr(case.actual[field], case.expected[field])
  assert err <= S.TOL, f"{name}: {field} relative error {err:.2e}"


def test_own_tendon_model_exercises_every_term():
  """Every tendon pulls, the plastic references and the slack band matter, forces are large."""
  case = P.case("own:tendon")
  m, inputs = case.mj, case.inputs
  for field in ("qfrc_spring", "qfrc_damper", "qfrc_passive"):
    assert np.abs(case.expected[field]).max() > 1e-2, f"{field} is zero in the own model"
  length = np.asarray(inputs.ten_length)
  band = np.asarray(m.tendon_lengthspring)
  outside = (length < band[:, 0]) | (length > band[:, 1])
  assert outside.any(axis=0).all(), "some tendon never leaves its dead band"
  initial = np.asarray(make_data(case.fm).plastic)[None]
  assert m.nplastic == 10 and np.any(np.asarray(inputs.plastic) != initial)
  # Cross-tree tendon armature entries (h0-h4) are dropped by MuJoCo and by flexor.
  h0, h4 = (m.jnt_dofadr[m.joint(n).id] for n in ("h0", "h4"))
  assert np.all(case.expected["qM"][:, h0, h4] == 0) and np.all(case.actual["qM"][:, h0, h4] == 0)


@pytest.mark.parametrize("flag", ["spring", "damper", "spring+damper"])
def test_own_tendon_model_flags(flag: str):
  case = P.make_case(P.own_model("tendon", FLAG_VARIANTS[flag]), seed=5)
  for field in P.FIELDS:
    err = support.relerr(case.actual[field], case.expected[field])
    assert err <= S.TOL, f"{flag} disabled: {field} relative error {err:.2e}"


@functools.cache
def own_tendon_forward_case() -> S.Case:
  return S.make_case(P.own_model("tendon"), seed=3)


@pytest.mark.parametrize("field", S.PASSIVE_FIELDS + ("qM", "qfrc_bias", "qacc", "qfrc_inverse",
                                                    "cfrc_ext", "cfrc_int"))
def test_own_tendon_model_forward(field: str):
  """The own tendon model end to end: flexor's tendon stage, crb, passive, rne, inverse."""
  case = own_tendon_forward_case()
  err = support.relerr(case.actual(field), case.expected[field])
  assert err <= S.TOL, f"{field} relative error {err:.2e}"


_WRAPPING = ("own/tendon_wrap", "mjx/tendon/pulley_site_wrap", "mjx/tendon/wrap_sidesite")


@functools.cache
def wrapping_case(name: str) -> S.Case:
  m = mujoco.MjModel.from_xml_path(support.model_paths()[name])
  S.prepare(m)
  m.tendon_stiffness[:], m.tendon_damping[:], m.tendon_lengthspring[:] = 3.0, 0.5, 0.1
  return S.make_case(m, seed=3)


@pytest.mark.parametrize("field", ["qfrc_passive", "qfrc_inverse", "cfrc_ext", "cfrc_int"])
@pytest.mark.parametrize("name", [n for n in _WRAPPING if n in support.model_paths()])
def test_wrapping_tendon_springs(name: str, field: str):
  """Springs and dampers on wrapping and pulley tendons, end to end; MuJoCo 4 also passes their
  forces to the bodies along the path (cfrc_ext)."""
  case = wrapping_case(name)
  assert np.abs(case.expected["cfrc_ext"]).max() > 1.0
  err = support.relerr(case.actual(field), case.expected[field])
  assert err <= S.TOL, f"{name}: {field} relative error {err:.2e}"


@functools.cache
def fluid_case() -> S.Case:
  return S.make_case(P.own_model("fluid"), seed=4)


@pytest.mark.parametrize("field", S.PASSIVE_FIELDS + ("qacc", "qfrc_inverse"))
def test_own_fluid_model_forward(field: str):
  """The ellipsoid model end to end through forward and inverse (no tendons needed)."""
  case = fluid_case()
  err = support.relerr(case.actual(field), case.expected[field])
  assert err <= S.TOL, f"{field} relative error {err:.2e}"


def test_own_fluid_model_selects_per_body():
  """Bodies with an ellipsoid geom use that model, the others the inertia box (MuJoCo's rule)."""
  m = fluid_case().mj
  uses = np.zeros(m.nbody, dtype=bool)
  np.logical_or.at(uses, m.geom_bodyid, m.geom_fluid[:, 0] > 0)
  assert uses[m.body("tail").id] and not uses[m.body("boxy").id]
  assert np.abs(fluid_case().expected["qfrc_fluid"]).max() > 1e-3


def test_ellipsoid_code_only_for_ellipsoid_geoms(monkeypatch: pytest.MonkeyPatch):
  """geom_fluidellipsoid, the static set of geoms that get the ellipsoid model's code, is MuJoCo's
  fluidshape="ellipsoid" (geom_fluid[:, 0] > 0 as compiled), from flexor's compiler and from an
  MjModel alike; a traced Model without such geoms traces none of that model."""
  mj = P.own_model("fluid")
  expected = mj.geom_fluid[:, 0] > 0
  assert expected.any() and not expected.all()
  np.testing.assert_array_equal(from_mujoco(mj).geom_fluidellipsoid, expected)
  np.testing.assert_array_equal(load_mjcf_string(P.OWN["fluid"]).geom_fluidellipsoid, expected)

  traced = []
  ellipsoid = fluid._ellipsoid
  monkeypatch.setattr(fluid, "_ellipsoid", lambda m, d, geoms: traced.append(geoms) or
                      ellipsoid(m, d, geoms))
  for xml in (P.OWN["fluid"], P.OWN["fluid"].replace('fluidshape="ellipsoid"', "")):
    m = from_mujoco(mujoco.MjModel.from_xml_string(xml))
    traced.clear()
    jax.jit(lambda m, d: forward(m, d).qfrc_fluid).lower(m, make_data(m))
    assert [list(g) for g in traced] == ([list(np.flatnonzero(expected))] if
                                         m.geom_fluidellipsoid.any() else [])


CARD_XML = """
<mujoco>
  <option density="1.225" viscosity="1.8e-5"/>
  <worldbody>
    <body euler="-100 180 0"><freejoint/>
      <geom type="ellipsoid" size="0.000125 0.032 0.047" fluidshape="ellipsoid"
            fluidcoef="0.5 0.25 0.5 2.0 1.0"/>
    </body>
  </worldbody>
</mujoco>
"""


@pytest.mark.parametrize("speed", [1.0, 1e-2, 1e-5])
def test_thin_body_fluid_forces_at_low_speed(speed: float):
  """A playing card's ellipsoid drifting slowly: MuJoCo 4.0 forms the projected area and the
  Kutta lift without the floors that made MuJoCo 3's (and flexor's) forces wrong by up to 10x
  there (MuJoCo's cards.xml); zero at rest, with a finite gradient there."""
  mj = mujoco.MjModel.from_xml_string(CARD_XML)
  md = mujoco.MjData(mj)
  md.qvel[:] = np.array([0.3, -0.2, 0.1, 0.01, 0.02, -0.2]) * speed
  mujoco.mj_forward(mj, md)
  m = from_mujoco(mj)
  fluid = jax.jit(lambda qvel: forward(m, make_data(m).replace(qvel=qvel)).qfrc_fluid)
  # relative to the force itself, which is tiny at these speeds
  err = np.abs(fluid(support.snapshot(md.qvel)) - md.qfrc_fluid).max() / np.abs(md.qfrc_fluid).max()
  assert err <= S.TOL, f"qfrc_fluid relative error {err:.2e}"
  grad = jax.grad(lambda qvel: jnp.sum(fluid(qvel) ** 2))(jnp.zeros(mj.nv))
  assert np.all(np.isfinite(grad))


@pytest.mark.parametrize("name", ["tendon", "fluid"])
def test_velocity_derivative_is_the_forces_derivative(name: str):
  """passive_vel_deriv (the implicit integrators' qDeriv part, analytic for the dampers) equals
  forward-mode AD of qfrc_passive through the tendon, com_vel and passive stages."""
  mj = P.own_model(name)
  m = from_mujoco(mj)
  states = S.random_states(mj, 7)
  d = make_data(m).replace(qpos=jnp.asarray(states.qpos[0]), qvel=jnp.asarray(states.qvel[0]))
  d = jax.jit(forward)(m, d)

  def forces(qvel):
    return fwd_velocity(m, d.replace(qvel=qvel)).qfrc_passive

  expected = jax.jit(jax.jacfwd(forces))(d.qvel)
  actual = jax.jit(passive_vel_deriv)(m, d)
  assert np.abs(expected).max() > 1e-2
  np.testing.assert_allclose(actual, expected, rtol=1e-12, atol=1e-12 * np.abs(expected).max())


def test_make_data_plastic_matches_mujoco():
  for name in ("tendon", "plastic"):
    m = P.own_model(name)
    np.testing.assert_array_equal(make_data(from_mujoco(m)).plastic, mujoco.MjData(m).plastic)


_update_plastic = jax.jit(update_plastic)


def _plastic_after_mujoco_step(m, d):
  """(plastic, ten_length, dense ten_J, qpos) before and the plastic, qpos, dq after mj_step."""
  mujoco.mj_forward(m, d)
  before = (d.plastic.copy(), d.ten_length.copy(), P.dense_ten_J(m, d), d.qpos.copy())
  mujoco.mj_step(m, d)
  dq = np.zeros(m.nv)
  mujoco.mj_differentiatePos(m, dq, 1.0, before[3], d.qpos)
  return before, (d.plastic.copy(), d.qpos.copy(), dq)


@pytest.mark.parametrize("integrator", [0, 1, 2, 3], ids=["euler", "rk4", "implicit", "implicitfast"])
def test_update_plastic(integrator: int):
  """update_plastic reproduces the plastic state after mj_step (MuJoCo 4 updates it there)."""
  m = P.own_model("tendon")
  m.opt.integrator = integrator
  fm = from_mujoco(m)
  rng = np.random.default_rng(11)
  moved = 0
  for _ in range(4):
    d = mujoco.MjData(m)
    d.qpos[:] = m.qpos0 + 0.5 * rng.normal(size=m.nq)
    mujoco.mj_normalizeQuat(m, d.qpos)
    d.qvel[:] = 3.0 * rng.normal(size=m.nv)
    (plastic, length, ten_J, _), (expected, qpos, dq) = _plastic_after_mujoco_step(m, d)
    fd = make_data(fm).replace(plastic=jnp.asarray(plastic), ten_length=jnp.asarray(length),
                               ten_J=jnp.asarray(ten_J))
    actual = _update_plastic(fm, fd, jnp.asarray(qpos), jnp.asarray(dq))
    err = support.relerr(actual, expected)
    assert err <= 1e-12, f"plastic relative error {err:.2e}"
    moved += np.sum(expected != plastic)
  assert moved > 20, "too few plastic entries moved to test anything"


# Dead band (lower, upper), tendon length, expected behaviour; yield 0.05.
_BANDS = {
    "stretched": ("0.8 1.2", 3.0), "compressed": ("0.8 1.2", -1.0), "inside": ("0.8 1.2", 1.0),
    "within-yield": ("0.8 1.2", 1.23), "slack-stretched": ("0 0.5", 3.0),
    "slack-compressed": ("0 0.5", -1.0), "point": ("0.5 0.5", -3.0), "zero-point": ("0 0", 3.0),
    "negative-band": ("-1 -0.5", 3.0),
}


@pytest.mark.parametrize("case", _BANDS)
def test_update_plastic_tendon_band(case: str):
  """Tendon yield rules, including a slack band (0, L) that stretches only its upper bound."""
  band, length = _BANDS[case]
  m = mujoco.MjModel.from_xml_string(f"""
    <mujoco><worldbody><body><joint name="s" type="slide"/><geom size=".1"/></body></worldbody>
    <tendon><fixed stiffness="5" springyield="0.05" springlength="{band}">
      <joint joint="s" coef="1"/></fixed></tendon></mujoco>""")
  fm = from_mujoco(m)
  d = mujoco.MjData(m)
  d.qpos[0], d.qvel[0] = length, 0.3
  (plastic, ten_length, ten_J, _), (expected, qpos, dq) = _plastic_after_mujoco_step(m, d)
  fd = make_data(fm).replace(plastic=jnp.asarray(plastic), ten_length=jnp.asarray(ten_length),
                             ten_J=jnp.asarray(ten_J))
  actual = _update_plastic(fm, fd, jnp.asarray(qpos), jnp.asarray(dq))
  np.testing.assert_allclose(actual, expected, rtol=0, atol=1e-14)


_step = jax.jit(step)


@pytest.mark.parametrize("integrator", [0, 1, 2, 3], ids=["euler", "rk4", "implicit", "implicitfast"])
def test_plastic_step(integrator: int):
  """flexor's step on plastic joints with polynomial and actuator damping follows mj_step."""
  m = P.own_model("plastic")
  m.opt.integrator = integrator
  fm = from_mujoco(m)
  rng = np.random.default_rng(2)
  d = mujoco.MjData(m)
  d.qpos[:] = m.qpos0 + 0.5 * rng.normal(size=m.nq)
  mujoco.mj_normalizeQuat(m, d.qpos)
  d.qvel[:] = 3.0 * rng.normal(size=m.nv)
  fd = make_data(fm).replace(qpos=support.snapshot(d.qpos), qvel=support.snapshot(d.qvel))
  plastic0 = d.plastic.copy()
  for _ in range(10):
    mujoco.mj_step(m, d)
    fd = _step(fm, fd)
  assert np.abs(d.plastic - plastic0).max() > 0.1, "the plastic state did not move"
  for field in ("qpos", "qvel", "plastic"):
    err = support.relerr(getattr(fd, field), getattr(d, field))
    assert err <= 1e-10, f"{field} relative error {err:.2e} after 10 steps"


def test_passive_vmap_and_jit():
  """vmap over states equals the per-state results; jit equals eager."""
  case = P.case("own:tendon")
  batched = jax.jit(jax.vmap(P._stages, in_axes=(None, 0)))(case.fm, case.inputs)
  for field in P.FIELDS:
    np.testing.assert_allclose(getattr(batched, field), case.actual[field], rtol=1e-13, atol=1e-13)
  d0 = P.stages(case.fm, jax.tree.map(lambda x: x[0], case.inputs))
  eager = passive(case.fm, d0)
  for field in S.PASSIVE_FIELDS:
    np.testing.assert_allclose(getattr(eager, field), getattr(d0, field), rtol=1e-13, atol=1e-13)


_DAMPERS = """
<mujoco>
  <worldbody>
    <body><joint name="a" type="hinge" {joint}/><geom size="0.1"/>
      <body pos="0 0 -0.3"><joint name="b" type="slide"/><geom size="0.1"/></body>
    </body>
  </worldbody>
  <actuator><motor joint="b" gear="2" {motor}/></actuator>
</mujoco>"""


@pytest.mark.parametrize("joint, motor, damped", [
    ("", "", False), ('damping="0.5"', "", True), ('damping="0 0 0.2"', "", True),
    ("", 'damping="0.3"', True), ("", 'damping="0 0.1"', True)])
def test_dof_damper_flag(joint: str, motor: str, damped: bool):
  """MuJoCo's test for implicit damping (own, polynomial or an actuator's damping): a Python bool
  while tracing where the Model is known (computed with numpy, no eager jax), the same value as
  an array where the Model is traced."""
  m = load_mjcf_string(_DAMPERS.format(joint=joint, motor=motor))
  qvel = jnp.array([0.3, -0.2])
  flags = []
  jax.make_jaxpr(lambda v: flags.append(dof_damper_deriv(m, v)[1]))(qvel)
  assert flags == [damped] and isinstance(flags[0], bool)
  assert bool(jax.jit(lambda m, v: dof_damper_deriv(m, v)[1])(m, qvel)) is damped
  deriv = jax.jit(lambda v: dof_damper_deriv(m, v)[0])(qvel)
  np.testing.assert_allclose(deriv, jax.jit(lambda m, v: dof_damper_deriv(m, v)[0])(m, qvel),
                             rtol=1e-15)


# --- gradients: jax.grad against central differences, float64 ----------------------------------

_EPS = 1e-6
_GRAD_TOL = 1e-6  # central differences at eps = 1e-6 are good to ~1e-9 here


@functools.cache
def _objective(name: str):
  """f(model, tangent, qvel) = w . qfrc_passive at state 0 of ``name``, qpos moved by tangent,
  and its jitted gradient with respect to all three arguments (one compilation per model)."""
  case = P.case(name)
  d0 = jax.tree.map(lambda x: x[0], case.inputs)
  w = jnp.asarray(np.random.default_rng(0).normal(size=case.mj.nv))

  def f(fm, tangent, qvel):
    qpos = integrate_pos(fm, d0.qpos, tangent, 1.0)
    return jnp.dot(w, P._stages(fm, d0.replace(qpos=qpos, qvel=qvel)).qfrc_passive)

  return case, d0, jax.jit(f), jax.jit(jax.grad(f, argnums=(0, 1, 2)))


def _central(f, x: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
  """Central differences of scalar f at x, over the entries where mask (default: all).

  The step is relative for entries far from 1 (inertias of 1e-4 need a step of 1e-8).
  """
  grad = np.zeros_like(x)
  for i in zip(*np.nonzero(np.ones(x.shape, bool) if mask is None else mask)):
    eps = _EPS * min(1.0, max(abs(x[i]), 1e-2))
    step_ = np.zeros_like(x)
    step_[i] = eps
    grad[i] = (float(f(x + step_)) - float(f(x - step_))) / (2 * eps)
  return grad


def _check(name: str, grad, fd, mask=None):
  grad = np.asarray(grad) if mask is None else np.asarray(grad)[mask]
  fd = fd if mask is None else fd[mask]
  assert np.all(np.isfinite(grad)), f"{name}: non-finite gradient"
  err = support.relerr(grad, fd)
  assert err <= _GRAD_TOL, f"{name}: grad vs central differences relative error {err:.2e}"


@pytest.mark.parametrize("name", ["own:tendon", "own:fluid"])
def test_grad_state(name: str):
  """d(w . qfrc_passive)/d(qpos tangent, qvel) against central differences."""
  case, d0, f, grad = _objective(name)
  fm, zero = case.fm, np.zeros(case.mj.nv)
  qvel = np.asarray(d0.qvel)
  _, g_tan, g_vel = grad(fm, jnp.asarray(zero), jnp.asarray(qvel))
  _check(f"{name} qpos", g_tan, _central(lambda t: f(fm, t, qvel), zero))
  _check(f"{name} qvel", g_vel, _central(lambda v: f(fm, zero, v), qvel))


_PARAMS = {
    "own:tendon": ("tendon_stiffness", "tendon_stiffnesspoly", "tendon_damping",
                   "tendon_dampingpoly", "tendon_lengthspring", "jnt_stiffness",
                   "jnt_stiffnesspoly", "dof_dampingpoly", "actuator_damping", "qpos_spring"),
    "own:fluid": ("geom_fluid", "geom_size", "body_mass", "body_inertia"),
}


@pytest.mark.parametrize("name,field", [(n, f) for n, fs in _PARAMS.items() for f in fs])
def test_grad_params(name: str, field: str):
  """d(w . qfrc_passive)/d(model parameter) against central differences."""
  case, d0, f, grad = _objective(name)
  fm, zero, qvel = case.fm, jnp.zeros(case.mj.nv), d0.qvel
  x = np.asarray(getattr(fm, field))
  g = getattr(grad(fm, zero, qvel)[0], field)
  mask = None
  if field == "geom_fluid":
    # The model choice is discrete: perturb only geoms of bodies that use the ellipsoid model.
    uses = np.zeros(case.mj.nbody, dtype=bool)
    np.logical_or.at(uses, case.mj.geom_bodyid, case.mj.geom_fluid[:, 0] > 0)
    mask = np.broadcast_to(uses[case.mj.geom_bodyid][:, None], x.shape)
  fd = _central(lambda p: f(fm.replace(**{field: jnp.asarray(p)}), zero, qvel), x, mask)
  _check(f"{name} {field}", g, fd, mask)
  assert np.abs(np.asarray(g)[mask] if mask is not None else g).max() > 0, f"{field}: zero gradient"


@pytest.mark.parametrize("name", ["own:tendon", "own:fluid"])
def test_grad_finite_at_rest(name: str):
  """Gradients stay finite at zero velocity (no wind), springs at their reference, no yield."""
  case = P.case(name)
  fm = case.fm.replace(opt=case.fm.opt.replace(wind=jnp.zeros(3)))
  d0 = jax.tree.map(lambda x: x[0], case.inputs)
  rest = make_data(fm).replace(ten_length=d0.ten_length, ten_J=d0.ten_J,
                               ten_velocity=jnp.zeros_like(d0.ten_velocity))
  rest = rest.replace(qpos=fm.qpos_spring)

  def f(fm, tangent, qvel, params):
    fm = fm.replace(geom_fluid=params[0], tendon_stiffness=params[1])
    d = rest.replace(qpos=integrate_pos(fm, rest.qpos, tangent, 1.0), qvel=qvel)
    d = P._stages(fm, d)
    plastic = update_plastic(fm, d, d.qpos, tangent)
    return jnp.sum(d.qfrc_passive) + jnp.sum(plastic)

  zero = jnp.zeros(case.mj.nv)
  grads = jax.jit(jax.grad(f, argnums=(1, 2, 3)))(fm, zero, zero,
                                                  (fm.geom_fluid, fm.tendon_stiffness))
  for g in jax.tree.leaves(grads):
    assert np.all(np.isfinite(np.asarray(g))), f"{name}: non-finite gradient at rest"


def test_fluid_skipped_in_still_medium_under_grad_and_vmap():
  """The fluid model is a cond on density and viscosity: with both zero qfrc_fluid is zero; the
  gradient w.r.t. density matches central differences; vmap over Models with batched media
  (where the cond runs both sides) equals each Model alone. A Model known while tracing decides
  then: a still medium's program holds no fluid code."""
  case, d0, _, _ = _objective("own:fluid")
  fm = case.fm

  def medium(density, viscosity):
    return fm.replace(opt=fm.opt.replace(density=jnp.asarray(density, fm.opt.density.dtype),
                                         viscosity=jnp.asarray(viscosity, fm.opt.density.dtype)))

  still = medium(0.0, 0.0)
  assert support.cond_count(jax.make_jaxpr(lambda d: P._stages(still, d))(d0).jaxpr) == 0
  # passed in: the forces' cond and their derivative's
  assert support.cond_count(jax.make_jaxpr(lambda m: P._stages(m, d0))(still).jaxpr) == 2

  qfrc = jax.jit(lambda m: P._stages(m, d0).qfrc_fluid)
  np.testing.assert_array_equal(qfrc(medium(0.0, 0.0)), 0.0)
  assert np.abs(qfrc(medium(1.2, 0.0))).max() > 1e-3
  w = jnp.asarray(np.random.default_rng(2).normal(size=case.mj.nv))
  loss = lambda rho: jnp.dot(w, qfrc(medium(rho, 1e-3)))
  grad = float(jax.grad(loss)(1.2))
  fd = (float(loss(1.2 + _EPS)) - float(loss(1.2 - _EPS))) / (2 * _EPS)
  assert abs(grad) > 1e-6
  np.testing.assert_allclose(grad, fd, rtol=_GRAD_TOL)
  media = [(0.0, 0.0), (1.2, 0.0), (0.0, 1e-3)]
  batched = medium(*np.asarray(media).T)
  axes = jax.tree.map(lambda _: None, fm).replace(
      opt=jax.tree.map(lambda _: None, fm.opt).replace(density=0, viscosity=0))
  out = jax.jit(jax.vmap(lambda m: P._stages(m, d0).qfrc_fluid, in_axes=(axes,)))(batched)
  for row, m in zip(out, media):
    np.testing.assert_allclose(row, qfrc(medium(*m)), rtol=1e-13, atol=1e-15)
