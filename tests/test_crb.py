"""crb, qM, factor_m and solve_m against MuJoCo C on every conformance model; tendon and
actuator armature in qM (``passive_support`` cases) and its gradients; spd_solve's derivatives."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import flexor
import passive_support as P
import smooth_support as S
import support
from flexor.crb import factor_m, spd_solve, tree_blocks

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


# --- tendon and actuator armature -----------------------------------------------------------
# passive_support puts MuJoCo's ten_J into flexor's Data (the tendon stage is not needed): qM
# gets tendon_armature (plus the armature of tendon actuators) times ten_J' ten_J within qM's
# sparsity, and the armature of joint actuators times gear^2 on its joint's dofs.


@pytest.mark.parametrize("name", P.case_params())
def test_qM_tendon_armature(name: str):
  case = P.case(name)
  err = support.relerr(case.actual["qM"], case.expected["qM"])
  assert err <= S.TOL, f"{name}: qM relative error {err:.2e}"


def test_qM_armature_terms_present():
  """The own model's armature terms are non-trivial, and qM stays symmetric positive definite."""
  case = P.case("own:tendon")
  m = case.mj
  assert np.count_nonzero(m.tendon_armature) == 3 and np.count_nonzero(m.actuator_armature) == 5
  bare = m.__copy__()
  bare.tendon_armature[:] = 0.0
  bare.actuator_armature[:] = 0.0
  without = P.make_case(bare, seed=5)
  assert np.abs(case.expected["qM"] - without.expected["qM"]).max() > 0.1
  qM = case.actual["qM"]
  assert np.array_equal(qM, np.swapaxes(qM, -1, -2))
  assert np.all(np.linalg.eigvalsh(qM) > 0)


@pytest.mark.parametrize("field", ["tendon_armature", "actuator_armature", "actuator_gear"])
def test_qM_armature_grad(field: str):
  """d(sum(W * qM))/d(armature parameters) against central differences."""
  case = P.case("own:tendon")
  d0 = jax.tree.map(lambda x: x[0], case.inputs)
  weights = jnp.asarray(np.random.default_rng(1).normal(size=(case.mj.nv, case.mj.nv)))
  f = jax.jit(lambda fm: jnp.sum(weights * P._stages(fm, d0).qM))
  x = np.asarray(getattr(case.fm, field))
  grad = np.asarray(getattr(jax.jit(jax.grad(f))(case.fm), field))
  fd = np.zeros_like(x)
  eps = 1e-6
  for i in np.ndindex(x.shape):
    dx = np.zeros_like(x)
    dx[i] = eps
    fd[i] = (float(f(case.fm.replace(**{field: jnp.asarray(x + dx)})))
             - float(f(case.fm.replace(**{field: jnp.asarray(x - dx)})))) / (2 * eps)
  assert np.abs(grad).max() > 0
  err = support.relerr(grad, fd)
  assert err <= 1e-7, f"{field}: grad vs central differences relative error {err:.2e}"


# --- spd_solve: a solve differentiated through the factor it already has ----------------------


# a 5 x 5 matrix with qM's sparsity for three trees: dof 4 alone, dofs (0, 1) and (2, 3)
BLOCKS = (((4,),), ((0, 1), (2, 3)))
IN_BLOCKS = np.zeros((5, 5), bool)
for _ids in (np.asarray(ids) for group in BLOCKS for ids in group):
  IN_BLOCKS[np.ix_(_ids, _ids)] = True


@pytest.mark.parametrize("rhs", ["vector", "matrix"])
@pytest.mark.parametrize("factored", [False, True], ids=["factor", "given_factor"])
@pytest.mark.parametrize("blocks", [None, BLOCKS], ids=["dense", "trees"])
def test_spd_solve_grad(rhs: str, factored: bool, blocks):
  """Values match numpy's solve; reverse and forward mode w.r.t. a and b match central
  differences (a perturbed symmetrically, within its blocks), under jit and vmap; a given
  factor is reused; a block diagonal matrix is solved tree by tree."""
  rng = np.random.default_rng(3)
  n = 5
  root = rng.normal(size=(n, n))
  mask = IN_BLOCKS if blocks else np.ones((n, n), bool)
  a = jnp.asarray(np.where(mask, root @ root.T + n * np.eye(n), 0.0))
  b = jnp.asarray(rng.normal(size=(n,) if rhs == "vector" else (n, 2)))
  w = jnp.asarray(rng.normal(size=b.shape))

  def loss(a, b):
    factor = jnp.linalg.cholesky(jax.lax.stop_gradient(a)) if factored else None
    return jnp.sum(w * spd_solve(a, b, factor, blocks))

  np.testing.assert_allclose(spd_solve(a, b), np.linalg.solve(a, b), rtol=1e-13)
  np.testing.assert_allclose(spd_solve(a, b, None, blocks), np.linalg.solve(a, b), rtol=1e-13)
  # perturbed within the blocks, one of the directional derivatives comes out near zero, where
  # central differences keep an absolute error of about 1e-10
  atol = 1e-9 if blocks else 0.0
  ga, gb = jax.jit(jax.grad(loss, argnums=(0, 1)))(a, b)
  eps = 1e-6
  for x, g, sym in ((a, ga, True), (b, gb, False)):
    fd, ad = [], []
    for _ in range(4):
      dx = rng.normal(size=x.shape)
      dx = np.where(mask, 0.5 * (dx + dx.T), 0.0) if sym else dx
      args = lambda s: (a + s * dx, b) if sym else (a, b + s * dx)
      fd.append((loss(*args(eps)) - loss(*args(-eps))) / (2 * eps))
      ad.append(jnp.sum(g * dx))
      _, jvp = jax.jvp(lambda s: loss(*args(s)), (0.0,), (1.0,))
      np.testing.assert_allclose(jvp, fd[-1], rtol=1e-7, atol=atol)
    np.testing.assert_allclose(ad, fd, rtol=1e-7, atol=atol)
  batched = jax.vmap(lambda b: spd_solve(a, b, None, blocks))(jnp.stack([b, 2 * b]))
  np.testing.assert_allclose(batched[1], 2 * batched[0], rtol=1e-13)


_PENDULUM = """<body pos="{x} 0 0"><joint axis="0 1 0"/><geom size=".1" pos="0 0 -.3"/>
  <body pos="0 0 -.3"><joint axis="1 0 0"/><geom size=".1" pos="0 0 -.3"/></body></body>"""


def test_trees_factor_apart():
  """qM couples no two trees: two double pendulums and a free body factor as two 2 x 2 blocks
  and one 6 x 6, to numpy's factor of the whole; with the pendulums alone (and no constraint
  solver), the factor and forward's solve compile to arithmetic, without a LAPACK call."""
  pendulums = _PENDULUM.format(x=0) + _PENDULUM.format(x=1)
  free = '<body pos="0 2 0"><freejoint/><geom type="box" size=".1 .2 .3"/></body>'
  m = flexor.load_mjcf_string(f"<mujoco><worldbody>{pendulums}{free}</worldbody></mujoco>")
  assert tree_blocks(m) == (((0, 1), (2, 3)), ((4, 5, 6, 7, 8, 9),))
  rng = np.random.default_rng(0)
  d = flexor.make_data(m)
  d = jax.jit(flexor.forward)(m, d.replace(qpos=d.qpos + 0.3 * rng.normal(size=m.nq)))
  np.testing.assert_allclose(d.qLD, np.linalg.cholesky(d.qM), rtol=0, atol=1e-13)

  m = flexor.load_mjcf_string('<mujoco><option><flag constraint="disable"/></option>'
                              f"<worldbody>{pendulums}</worldbody></mujoco>")
  hlo = jax.jit(flexor.forward).lower(m, flexor.make_data(m)).compile().as_text()
  assert "custom-call" not in hlo and "lapack" not in hlo.lower()
  d = jax.jit(factor_m)(m, d.replace(qM=d.qM[:4, :4], qLD=d.qLD[:4, :4]))
  np.testing.assert_allclose(d.qLD, np.linalg.cholesky(d.qM), rtol=0, atol=1e-13)
