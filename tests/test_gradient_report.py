"""gradient_report: the per-step adjoints are the rollout's gradients, the finite-difference
checks agree in float64 (quaternion tangents included), and the summary and plot show them."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import matplotlib
import numpy as np
import pytest

import flexor
from flexor import examples
from flexor.gradient_report import gradient_report
from flexor.rollout import rollout

NSTEP = 60


def _flick_loss(final: flexor.Data, traj: dict[str, jax.Array]) -> jax.Array:
  """The ball's distance from (0.6, 0.3) after the flick, plus a small velocity penalty."""
  return jnp.sum((final.qpos[1:3] - jnp.array([0.6, 0.3]))**2) + 1e-2 * jnp.sum(traj["qvel"]**2)


@pytest.fixture(scope="module")
def flick():
  """(model, initial Data, controls, report) for a finger that hits a free ball mid-rollout."""
  m = flexor.load_mjcf(examples.path("finger_flick"))
  d = flexor.make_data(m)
  ctrl = jnp.full((NSTEP, 1), 2.0)
  return m, d, ctrl, gradient_report(m, d, _flick_loss, ctrl, fd_states=4)


def test_adjoints_are_the_rollout_gradients(flick):
  """The adjoint of the initial state's velocities is jax.grad of the loss in qvel, the control
  gradient norms are those of jax.grad in the control sequence, and the last adjoint is the
  loss's gradient in the final state."""
  m, d, ctrl, report = flick

  def loss(qvel, u):
    final, traj = rollout(m, d.replace(qvel=qvel), u)
    return _flick_loss(final, traj)

  g_qvel, g_ctrl = jax.jit(jax.grad(loss, argnums=(0, 1)))(d.qvel, ctrl)
  # two programs that round differently: entries below the largest's round-off are noise
  np.testing.assert_allclose(report.adjoint[0, m.nv:2 * m.nv], g_qvel, rtol=1e-12,
                             atol=1e-12 * np.abs(g_qvel).max())
  np.testing.assert_allclose(report.ctrl_grad_norm, np.linalg.norm(g_ctrl, axis=1), rtol=1e-12,
                             atol=1e-14)
  final, traj = rollout(m, d, ctrl)
  assert report.loss == pytest.approx(float(_flick_loss(final, traj)), rel=1e-12)
  assert report.adjoint.shape == (NSTEP + 1, 2 * m.nv + m.na)
  assert report.time.shape == (NSTEP + 1,) and report.time[-1] == pytest.approx(NSTEP * 0.01)


def test_finite_differences_agree_through_contact(flick):
  """In float64 the adjoints agree with central differences at every checked state, before, at
  and after the impact, and the step of largest growth is one in contact."""
  _, _, _, report = flick
  assert report.ncon.max() > 0 and report.ncon[0] == 0
  assert report.worst_growth_step in report.fd_index
  assert report.fd_index.size >= 4 and report.fd_index[0] == 0
  assert np.all(report.fd_error < 1e-6), report.summary()
  assert np.all(np.isfinite(report.adjoint_norm)) and report.adjoint_norm[0] > 0


def test_summary_and_plot(flick):
  _, _, _, report = flick
  text = report.summary(max_rows=8)
  assert text.startswith(f"loss {report.loss:.6g} over {NSTEP} steps (float64)")
  assert "largest backward growth" in text and len(text.splitlines()) <= 3 + 8
  matplotlib.use("Agg")
  ax = report.plot()
  assert ax.get_yscale() == "log"


def test_zero_adjoint_before_contact_and_argument_errors():
  """A finger too weak to reach the ball: in exact mode the loss cannot see the finger's state
  (a zero adjoint, checked along a random direction against a zero difference); bad check
  indices and a missing horizon are errors."""
  m = flexor.load_mjcf(examples.path("finger_flick"))
  d = flexor.make_data(m)
  ctrl = jnp.full((20, 1), 0.1)
  ball_only = lambda final, traj: jnp.sum((final.qpos[1:3] - jnp.array([0.6, 0.3]))**2)
  report = gradient_report(m, d, ball_only, ctrl, fd_states=[0, 20])
  np.testing.assert_array_equal(report.adjoint[:, [0, m.nv]], 0.0)
  np.testing.assert_array_equal(report.ctrl_grad_norm, 0.0)
  assert report.fd_index.tolist() == [0, 20] and np.all(report.fd_error < 1e-6)
  with pytest.raises(ValueError, match="fd_states must lie in 0..20"):
    gradient_report(m, d, _flick_loss, ctrl, fd_states=[21])
  with pytest.raises(ValueError, match="pass a control sequence or nstep"):
    gradient_report(m, d, _flick_loss)
