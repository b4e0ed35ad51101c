"""rne (bias and with acceleration) and rne_postconstraint against MuJoCo C on every model."""

from __future__ import annotations

import mujoco
import numpy as np
import pytest

import smooth_support as S
import support

# qfrc_bias from mj_forward, rne_acc = mj_rne(flg_acc=1) at a random qacc, and
# mj_rnePostConstraint's cacc, cfrc_int, cfrc_ext (xfrc_applied only: no contacts yet).
FIELDS = ("qfrc_bias", "rne_acc", "cacc", "cfrc_int", "cfrc_ext")


@pytest.mark.parametrize("field", FIELDS)
@pytest.mark.parametrize("name", S.model_names())
def test_conformance(name: str, field: str):
  case = S.case(name)
  err = support.relerr(case.actual(field), case.expected[field])
  assert err <= S.TOL, f"{name}: {field} relative error {err:.2e}"


def test_gravity_disabled():
  """DisableBit.GRAVITY drops the world acceleration from qfrc_bias and cacc."""
  path = support.model_paths()["dmc/humanoid"]
  case = S.make_case(S.mujoco_model(path, mujoco.mjtDisableBit.mjDSBL_GRAVITY))
  for field in ("qfrc_bias", "rne_acc", "cacc", "cfrc_int", "qacc"):
    err = support.relerr(case.actual(field), case.expected[field])
    assert err <= S.TOL, f"{field} relative error {err:.2e}"
  assert np.all(case.actual("cacc")[:, 0] == 0.0)
