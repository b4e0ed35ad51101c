"""crb, qM, factor_m and solve_m against MuJoCo C on every conformance model."""

from __future__ import annotations

import numpy as np
import pytest

import smooth_support as S
import support

FIELDS = ("crb", "qM")


@pytest.mark.parametrize("field", FIELDS)
@pytest.mark.parametrize("name", S.model_names())
def test_conformance(name: str, field: str):
  case = S.case(name)
  err = support.relerr(case.actual(field), case.expected[field])
  assert err <= S.TOL, f"{name}: {field} relative error {err:.2e}"


@pytest.mark.parametrize("name", S.model_names())
def test_factor_and_solve(name: str):
  """qLD is lower triangular with qLD qLD' = qM, and solve_m inverts qM."""
  case = S.case(name)
  qM, qLD = case.actual("qM"), case.actual("qLD")
  # A singular qM may fail to factor (NaN, flagged by forward's warning_nan): check the rest.
  ok = np.all(np.isfinite(qLD), axis=(-2, -1))
  assert ok.all() or case.singular, f"{name}: non-finite qLD for a regular qM"
  qM, qLD = qM[ok], qLD[ok]
  assert np.all(np.triu(qLD, 1) == 0.0), f"{name}: qLD has entries above the diagonal"
  err = support.relerr(qLD @ np.swapaxes(qLD, -1, -2), qM)
  assert err <= 1e-12, f"{name}: |qLD qLD' - qM| relative error {err:.2e}"
  if case.singular:
    return
  eye = np.broadcast_to(np.eye(case.fm.nv), qM.shape)
  err = support.relerr(qM @ case.actual("solve_eye"), eye)
  assert err <= S.TOL, f"{name}: |qM solve_m(I) - I| = {err:.2e}"


@pytest.mark.parametrize("name", S.model_names())
def test_qM_symmetric_positive(name: str):
  case = S.case(name)
  qM = case.actual("qM")
  assert np.array_equal(qM, np.swapaxes(qM, -1, -2)), f"{name}: qM is not symmetric"
  if qM.shape[-1] and not case.singular:
    assert np.all(np.linalg.eigvalsh(qM) > 0), f"{name}: qM is not positive definite"
