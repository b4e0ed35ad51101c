"""Tendon stage (flexor.tendon) against MuJoCo 4.0's mj_tendon, plus gradient and transform checks.

* Conformance of every tendon field, per model and field, at random states of every model of
  ``support.model_paths()`` that has tendons (dm_control, gymnasium, MJX's tendon models, the
  bundled muscle arm and tests/models/tendon_*.xml).
* A sweep of random wrap placements: sites, sidesite and a rotated sphere and cylinder on mocap
  bodies, so every branch of the wrapping (no wrap, wrap across, wrap behind the geom towards a
  sidesite, inside wrap) is compared with MuJoCo many times.
* ten_J against jax.jacfwd of ten_length, jax.grad against central differences, and finite
  gradients at singular placements (tangent, a site inside or at the centre of the geom, the
  sidesite at the centre, coincident sites).
* jit equals eager, vmap equals a loop, and the forward pipeline fills the same fields.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest

import smooth_support
import support
from flexor import kinematics, make_data
from flexor.forward import fwd_position, fwd_velocity
from flexor.mjcf.from_mujoco import from_mujoco
from flexor.tendon import tendon, tendon_velocity
from flexor.types import Data, Model

# Relative error |a - b| / (1 + |b|). Lengths and Jacobians are short sums of products, summed in
# another order than in C, and wrap points follow the same closed forms and Newton iterations as
# MuJoCo: measured agreement is ~1e-15.
TOL = 1e-10

FIELDS = ("ten_length", "ten_J", "ten_velocity", "ten_wrapadr", "ten_wrapnum", "wrap_obj",
          "wrap_xpos")

# Models whose tendons are all fixed run in the slow tier, except these representatives: fixed
# tendons take one short path, and the default run pays a compilation per model.
FIXED_DEFAULT = ("own/tendon_fixed", "mjx/tendon/fixed", "gym/humanoid")


def mujoco_fields(m: mujoco.MjModel, d: mujoco.MjData) -> dict[str, np.ndarray]:
  """FIELDS of d after mj_forward; MuJoCo 4 stores ten_J sparse (rows given by the model)."""
  ten_J = np.zeros((m.ntendon, m.nv))
  mujoco.mju_sparse2dense(ten_J, d.ten_J, m.ten_J_rownnz, m.ten_J_rowadr, m.ten_J_colind)
  out = {k: np.array(getattr(d, k)) for k in FIELDS if k != "ten_J"}
  out["ten_J"] = ten_J
  return out


def _stage(m: Model, d: Data) -> Data:
  d = kinematics.com_pos(m, kinematics.kinematics(m, d))
  return tendon_velocity(m, tendon(m, d))


stage = jax.jit(jax.vmap(_stage, in_axes=(None, 0)))


def batch(fm: Model, qpos: np.ndarray, qvel: np.ndarray | None = None, **fields) -> Data:
  """Data with a leading batch axis holding the given states."""
  n = qpos.shape[0]
  d = make_data(fm, batch_shape=(n,))
  values = dict(qpos=qpos, qvel=np.zeros((n, fm.nv)) if qvel is None else qvel, **fields)
  return d.replace(**{k: jnp.asarray(v, d.qpos.dtype) for k, v in values.items()})


def compare(mj: mujoco.MjModel, qpos: np.ndarray, qvel: np.ndarray, **fields):
  """(flexor, MuJoCo) FIELDS stacked over states; fields: extra Data inputs (e.g. mocap_pos)."""
  fm = from_mujoco(mj)
  out = stage(fm, batch(fm, qpos, qvel, **fields))
  expected: dict[str, list[np.ndarray]] = {k: [] for k in FIELDS}
  for s in range(qpos.shape[0]):
    d = mujoco.MjData(mj)
    d.qpos[:], d.qvel[:] = qpos[s], qvel[s]
    for k, v in fields.items():
      getattr(d, k)[:] = v[s]
    mujoco.mj_forward(mj, d)
    for k, v in mujoco_fields(mj, d).items():
      expected[k].append(v)
  actual = {k: np.asarray(getattr(out, k)) for k in FIELDS}
  return actual, {k: np.stack(v) for k, v in expected.items()}


@functools.cache
def tendon_models() -> dict[str, bool]:
  """{name: all tendons fixed} of the conformance models with tendons."""
  out = {}
  for name, path in support.model_paths().items():
    m = mujoco.MjModel.from_xml_path(path)
    if m.ntendon:
      out[name] = bool(np.all(m.wrap_type[m.tendon_adr] == mujoco.mjtWrap.mjWRAP_JOINT))
  return out


@functools.cache
def _case(name: str):
  mj = mujoco.MjModel.from_xml_path(support.model_paths()[name])
  states = smooth_support.random_states(mj)
  return compare(mj, states.qpos, states.qvel)


def _params():
  return [pytest.param(name, marks=pytest.mark.slow) if fixed and name not in FIXED_DEFAULT
          else name for name, fixed in tendon_models().items()]


@pytest.mark.parametrize("field", FIELDS)
@pytest.mark.parametrize("name", _params())
def test_conforms(name: str, field: str):
  actual, expected = _case(name)
  assert actual[field].shape == expected[field].shape
  assert support.relerr(actual[field], expected[field]) <= TOL


def test_own_wrap_model_wraps_and_unwraps():
  """At the conformance states of tests/models/tendon_wrap.xml, tendons wrap and do not wrap."""
  actual, _ = _case("own/tendon_wrap")
  wrapped = []   # per state and tendon: a geom's tangent points are on the path
  for objs, nums, adrs in zip(actual["wrap_obj"], actual["ten_wrapnum"], actual["ten_wrapadr"]):
    wrapped += [np.any(objs.reshape(-1)[a:a + n] >= 0) for a, n in zip(adrs, nums)]
  assert any(wrapped) and not all(wrapped)


# Sites, a sidesite and a sphere and a cylinder sharing one rotated frame, all on mocap bodies:
# one random placement per state reaches every branch of mju_wrap.
SWEEP_XML = """
<mujoco>
  <worldbody>
    <body name="geoms" mocap="true">
      <geom name="ball" type="sphere" size="0.3" contype="0" conaffinity="0"/>
      <geom name="drum" type="cylinder" size="0.3 0.5" contype="0" conaffinity="0"/>
    </body>
    <body mocap="true"><site name="a"/></body>
    <body mocap="true"><site name="b"/></body>
    <body mocap="true"><site name="side"/></body>
  </worldbody>
  <tendon>
    <spatial><site site="a"/><geom geom="ball"/><site site="b"/></spatial>
    <spatial><site site="a"/><geom geom="ball" sidesite="side"/><site site="b"/></spatial>
    <spatial><site site="a"/><geom geom="drum"/><site site="b"/></spatial>
    <spatial><site site="a"/><geom geom="drum" sidesite="side"/><site site="b"/></spatial>
  </tendon>
</mujoco>
"""
NSWEEP = 400


@functools.cache
def _sweep():
  mj = mujoco.MjModel.from_xml_string(SWEEP_XML)
  rng = np.random.default_rng(3)
  pos = rng.normal(size=(NSWEEP, 4, 3)) * 0.6
  pos[:, 0] *= 0.3
  pos[::2, 3] = pos[::2, 0] + 0.04 * pos[::2, 3]   # every other sidesite inside the geoms
  quat = rng.normal(size=(NSWEEP, 4, 4))
  quat /= np.linalg.norm(quat, axis=-1, keepdims=True)
  empty = np.zeros((NSWEEP, 0))
  return compare(mj, empty, empty, mocap_pos=pos, mocap_quat=quat)


@pytest.mark.parametrize("field", FIELDS)
def test_wrap_sweep_conforms(field: str):
  actual, expected = _sweep()
  assert support.relerr(actual[field], expected[field]) <= TOL


def test_wrap_sweep_covers_branches():
  _, expected = _sweep()
  wraps = expected["ten_wrapnum"] == 4            # (NSWEEP, 4): tangent points added
  assert (wraps.mean(axis=0) > 0.1).all() and (wraps.mean(axis=0) < 0.9).all()
  # with the sidesite inside the geoms (even states) the tendon touches it at one point
  xpos = expected["wrap_xpos"].reshape(NSWEEP, -1, 3)
  inside = [s for s in range(0, NSWEEP, 2) if wraps[s, 1]]
  adr = expected["ten_wrapadr"][inside, 1]
  assert len(inside) > 20
  np.testing.assert_array_equal(xpos[inside, adr + 1], xpos[inside, adr + 2])


# ------------------------------------------------------------------------------------------------
# gradients

# Models whose joints are hinges and slides only, where d(qpos) = qvel; the slow tier adds more.
SCALAR_MODELS = ("own/tendon_fixed", "own/tendon_wrap")
SCALAR_MODELS_SLOW = ("mjx/tendon/wrap_sidesite", "mjx/tendon/pulley_fixed_site_wrap",
                      "ex/muscle_arm")


def _lengths(fm: Model):
  def lengths(qpos):
    d = make_data(fm).replace(qpos=qpos)
    return tendon(fm, kinematics.com_pos(fm, kinematics.kinematics(fm, d))).ten_length
  return lengths


def _available(names):
  return [n for n in names if n in support.model_paths()]


@pytest.mark.parametrize("name", _available(SCALAR_MODELS) + [
    pytest.param(n, marks=pytest.mark.slow) for n in _available(SCALAR_MODELS_SLOW)])
def test_jacobian_is_length_gradient(name: str):
  """ten_J = d ten_length / d qpos (hinge and slide joints): the tangent points' motion along
  the geom does not change the length to first order, so MuJoCo's rigid-tangent Jacobian is the
  exact gradient."""
  mj = mujoco.MjModel.from_xml_path(support.model_paths()[name])
  fm = from_mujoco(mj)
  states = smooth_support.random_states(mj, seed=4, scale=0.6)
  qpos = jnp.asarray(states.qpos)
  auto = jax.jit(jax.vmap(jax.jacfwd(_lengths(fm))))(qpos)
  ten_J = stage(fm, batch(fm, states.qpos)).ten_J
  # the inside wrap's tangent point solves its equation to MuJoCo's tolerance 1e-6 only, so the
  # length is stationary in it only to that order (measured 4e-9; 1e-16 without inside wraps)
  assert support.relerr(auto, ten_J) <= 1e-7


@pytest.mark.parametrize("name", ["own/tendon_wrap", "own/tendon_spatial"])
def test_grad_matches_finite_differences(name: str):
  """jax.grad of a weighted sum of lengths w.r.t. qpos (ball and free quaternions included)
  against central differences of the same lengths, taken with MuJoCo: they equal flexor's to
  ~1e-15 (test_conforms), far below the differences' own error, and cost no compilation."""
  mj = mujoco.MjModel.from_xml_path(support.model_paths()[name])
  fm = from_mujoco(mj)
  rng = np.random.default_rng(5)
  weight = rng.normal(size=mj.ntendon)
  qpos = smooth_support.random_states(mj, seed=6, scale=0.5).qpos[0]
  grad = jax.jit(jax.grad(lambda q: jnp.dot(jnp.asarray(weight), _lengths(fm)(q))))(qpos)

  d = mujoco.MjData(mj)

  def objective(q):
    d.qpos[:] = q
    mujoco.mj_kinematics(mj, d)
    mujoco.mj_comPos(mj, d)
    mujoco.mj_tendon(mj, d)
    return weight @ d.ten_length

  eps = 1e-6
  fd = np.array([(objective(qpos + eps * e) - objective(qpos - eps * e)) / (2 * eps)
                 for e in np.eye(mj.nq)])
  assert support.relerr(grad, fd) <= 1e-7   # central differences: ~eps^2 and 1e-16 / eps


def test_inside_wrap_grad_matches_finite_differences():
  """Reverse mode through inside wraps (Newton's touching point, differentiated by its own
  rule) w.r.t. the sites' positions, against MuJoCo's central differences, at sweep placements
  with the sidesite inside the sphere. The length is stationary in the point, so the point
  itself is differentiated."""
  mj = mujoco.MjModel.from_xml_string(SWEEP_XML)
  fm = from_mujoco(mj)
  rng = np.random.default_rng(7)
  pos = rng.normal(size=(12, 4, 3)) * 0.6
  pos[:, 0] *= 0.3
  pos[:, 3] = pos[:, 0] + 0.04 * pos[:, 3]
  quat = rng.normal(size=(12, 4, 4))
  quat /= np.linalg.norm(quat, axis=-1, keepdims=True)

  def tendons(p, q):
    d = make_data(fm).replace(mocap_pos=p, mocap_quat=q)
    return tendon(fm, kinematics.com_pos(fm, kinematics.kinematics(fm, d)))

  out = jax.jit(jax.vmap(tendons))(jnp.asarray(pos), jnp.asarray(quat))
  xpos = np.asarray(out.wrap_xpos).reshape(12, -1, 3)
  adr = np.asarray(out.ten_wrapadr)[:, 1] + 1   # tendon 1: the sphere with the sidesite
  touching = np.flatnonzero(np.all(xpos[np.arange(12), adr] == xpos[np.arange(12), adr + 1], -1)
                            & (np.asarray(out.ten_wrapnum)[:, 1] == 4))
  assert len(touching) >= 3

  point = lambda p, q, a: tendons(p, q).wrap_xpos.reshape(-1, 3)[a]
  jacobian = jax.jit(jax.vmap(jax.jacrev(point)))
  actual = np.asarray(jacobian(*(jnp.asarray(x[touching]) for x in (pos, quat, adr))))

  d = mujoco.MjData(mj)

  def objective(p, q, a):
    d.mocap_pos[:], d.mocap_quat[:] = p, q
    mujoco.mj_forward(mj, d)
    return d.wrap_xpos.reshape(-1, 3)[a].copy()

  eps = 1e-6
  for k, s in enumerate(touching):
    fd = np.stack([objective(pos[s] + eps * e, quat[s], adr[s])
                   - objective(pos[s] - eps * e, quat[s], adr[s])
                   for e in np.eye(12).reshape(12, 4, 3)], -1).reshape(3, 4, 3) / (2 * eps)
    # MuJoCo stops Newton at |f| <= 1e-6, which limits the differences (measured <= 5e-8)
    assert support.relerr(actual[k], fd) <= 1e-6, s


# Three sites and a sidesite moved by slide joints along x, y, z: exact placements at singular
# points of the wrapping (world-fixed sphere and cylinder of radius 0.1 at the origin).
SINGULAR_XML = """
<mujoco>
  <default><geom type="box" size="0.01 0.01 0.01" contype="0" conaffinity="0"/></default>
  <worldbody>
    <geom name="ball" type="sphere" size="0.1"/>
    <geom name="drum" type="cylinder" size="0.1 0.3" euler="0 0 0"/>
    {bodies}
  </worldbody>
  <tendon>
    <spatial><site site="a"/><geom geom="ball"/><site site="b"/></spatial>
    <spatial><site site="a"/><geom geom="ball" sidesite="side"/><site site="b"/></spatial>
    <spatial><site site="a"/><geom geom="drum"/><site site="b"/></spatial>
    <spatial><site site="a"/><geom geom="drum" sidesite="side"/><site site="b"/></spatial>
    <spatial><site site="a"/><site site="b"/></spatial>
  </tendon>
</mujoco>
"""
_BODY = """<body><joint type="slide" axis="1 0 0"/><joint type="slide" axis="0 1 0"/>
  <joint type="slide" axis="0 0 1"/><geom/><site name="{}"/></body>"""

# (a, b, side) positions
SINGULAR = {
    "tangent": ((-1, 0.1, 0), (1, 0.1, 0), (0, -1, 0)),
    "tangent_side_behind": ((-1, 0.1, 0), (1, 0.1, 0), (0, 1, 0)),
    "site_inside": ((0.05, 0.01, 0.02), (1, 0.2, 0.1), (0, -1, 0)),
    "site_at_centre": ((0, 0, 0), (1, 0.2, 0.1), (0, -1, 0)),
    "site_on_surface": ((0.1, 0, 0), (1, 0.2, 0.1), (0, -1, 0)),
    "coincident_sites": ((0.5, 0.5, 0.1), (0.5, 0.5, 0.1), (0, -1, 0)),
    "through_centre": ((-1, 0, 0), (1, 0, 0), (0, 1, 0.05)),
    "side_at_centre": ((-1, 0.3, 0), (1, 0.3, 0), (0, 0, 0)),
    "side_inside": ((-1, 0.3, 0.05), (1, 0.25, 0), (0, 0.05, 0)),
    "side_inside_straight": ((-1, 0.2, 0), (1, 0.2, 0), (0, 0.05, 0)),
}


@functools.cache
def _singular_model():
  bodies = "\n".join(_BODY.format(n) for n in ("a", "b", "side"))
  return mujoco.MjModel.from_xml_string(SINGULAR_XML.format(bodies=bodies))


@functools.cache
def _singular():
  """Length Jacobians (reverse mode) and (flexor, MuJoCo) fields at every SINGULAR placement."""
  mj = _singular_model()
  fm = from_mujoco(mj)
  qpos = np.array([np.concatenate(v) for v in SINGULAR.values()], dtype=float)
  jac = jax.jit(jax.vmap(jax.jacrev(_lengths(fm))))(jnp.asarray(qpos))
  return dict(zip(SINGULAR, np.asarray(jac))), compare(mj, qpos, np.zeros((len(qpos), mj.nv)))


@pytest.mark.parametrize("placement", list(SINGULAR))
def test_singular_placements(placement: str):
  """Finite gradients; lengths as MuJoCo's (continuous there, unlike the choice of path points)."""
  jac, (actual, expected) = _singular()
  assert np.all(np.isfinite(jac[placement]))
  s = list(SINGULAR).index(placement)
  assert support.relerr(actual["ten_length"][s], expected["ten_length"][s]) <= TOL


# ------------------------------------------------------------------------------------------------
# transforms and the pipeline


@pytest.mark.slow
def test_jit_vmap_match_eager():
  """The jitted, vmapped stage equals eager evaluation (one state: op-by-op dispatch is slow)."""
  mj = mujoco.MjModel.from_xml_path(support.model_paths()["own/tendon_wrap"])
  fm = from_mujoco(mj)
  states = smooth_support.random_states(mj, seed=8, scale=0.6)
  batched = stage(fm, batch(fm, states.qpos, states.qvel))
  s = 1
  d = make_data(fm).replace(qpos=jnp.asarray(states.qpos[s]), qvel=jnp.asarray(states.qvel[s]))
  eager = _stage(fm, d)
  for field in FIELDS:
    np.testing.assert_allclose(np.asarray(getattr(eager, field)),
                               np.asarray(getattr(batched, field))[s], rtol=1e-13, atol=1e-13,
                               err_msg=field)


def test_no_tendons_is_identity():
  mj = mujoco.MjModel.from_xml_string(support.ALL_JOINTS_XML)
  fm = from_mujoco(mj)
  d = make_data(fm)
  assert tendon(fm, d) is d and tendon_velocity(fm, d) is d


def test_forward_pipeline_fills_tendons():
  """fwd_position runs the tendon stage before crb and fwd_velocity sets ten_velocity, one state
  at a time: as MuJoCo's mj_forward, and as the vmapped stage (vmap equals a loop)."""
  mj = smooth_support.mujoco_model(support.model_paths()["own/tendon_wrap"])
  fm = from_mujoco(mj)
  states = smooth_support.random_states(mj, seed=9)
  run = jax.jit(lambda m, d: fwd_velocity(m, fwd_position(m, d)))
  batched = stage(fm, batch(fm, states.qpos, states.qvel))
  expected = compare(mj, states.qpos, states.qvel)[1]
  for s in range(states.qpos.shape[0]):
    d = make_data(fm).replace(qpos=jnp.asarray(states.qpos[s]), qvel=jnp.asarray(states.qvel[s]))
    out = run(fm, d)
    for field in FIELDS:
      assert support.relerr(getattr(out, field), expected[field][s]) <= TOL, field
      np.testing.assert_allclose(np.asarray(getattr(out, field)),
                                 np.asarray(getattr(batched, field))[s], rtol=1e-13, atol=1e-13,
                                 err_msg=field)
