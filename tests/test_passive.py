"""passive (springs, dampers, gravity compensation, fluid) against MuJoCo C.

Every conformance model, the disable bits SPRING / DAMPER / GRAVITY on the models that have
those forces, and ``smooth_support.OWN_XML``: ball and free springs off their reference pose,
gravity compensation routed through actuators (with a joint force limit), and a fluid with
density, viscosity and wind.
"""

from __future__ import annotations

import functools

import mujoco
import numpy as np
import pytest

import smooth_support as S
import support

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
