"""kinematics, com_pos, com_vel and Jacobians against MuJoCo C, plus jit/vmap/grad checks."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest
from jax.test_util import check_grads

import flexor
import smooth_support
import support
from flexor import kinematics as K
from flexor import make_data
from flexor.mjcf.from_mujoco import from_mujoco

# Sums are ordered differently from C (and quaternions are composed by pointer jumping rather
# than body by body), so agreement is to rounding, far inside the 1e-8.
TOL = 1e-9

FIELDS = ("xpos", "xquat", "xmat", "xipos", "ximat", "xanchor", "xaxis", "geom_xpos",
          "geom_xmat", "site_xpos", "site_xmat", "subtree_com", "cinert", "cdof", "cvel",
          "cdof_dot", "cam_xpos", "cam_xmat", "light_xpos", "light_xdir")


def random_state(m: mujoco.MjModel, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
  """qpos near qpos0 with unit quaternions, and a random qvel."""
  d = mujoco.MjData(m)
  qpos = m.qpos0 + 0.5 * rng.normal(size=m.nq)
  mujoco.mj_normalizeQuat(m, qpos)
  del d
  return qpos, rng.normal(size=m.nv)


@functools.cache
def _models(name: str):
  m = mujoco.MjModel.from_xml_path(support.model_paths()[name])
  return m, from_mujoco(m)


@functools.cache
def _stages():
  def run(m, d):
    return K.com_vel(m, K.com_pos(m, K.kinematics(m, d)))
  return jax.jit(run)


@functools.cache
def _compare(name: str) -> dict[str, float]:
  """Max error per field over the random states of the shared smooth-dynamics case.

  The case's flexor outputs come from one compiled ``forward`` per model, shared with the crb,
  rne, passive and forward tests; MuJoCo's kinematics are recomputed here at the same states.
  """
  case = smooth_support.case(name)
  errors = dict.fromkeys(FIELDS, 0.0)
  for s in range(smooth_support.NSTATE):
    d = mujoco.MjData(case.mj)
    d.qpos[:], d.qvel[:] = case.states.qpos[s], case.states.qvel[s]
    mujoco.mj_forward(case.mj, d)
    for field in FIELDS:
      ours = case.actual(field)[s]
      errors[field] = max(errors[field], support.relerr(ours, getattr(d, field)))
  return errors


@pytest.mark.parametrize("field", FIELDS)
@pytest.mark.parametrize("name", support.sweep(support.model_paths()))
def test_conforms(name: str, field: str):
  assert _compare(name)[field] <= TOL


def _random_frames(m: mujoco.MjModel, fm: flexor.Model, rng: np.random.Generator
                   ) -> tuple[mujoco.MjData, flexor.Data]:
  """(MjData after mj_forward, flexor Data after com_vel) at one random state of both."""
  qpos, qvel = random_state(m, rng)
  d = mujoco.MjData(m)
  d.qpos[:], d.qvel[:] = qpos, qvel
  mujoco.mj_forward(m, d)
  fd = _stages()(fm, make_data(fm).replace(qpos=jnp.asarray(qpos), qvel=jnp.asarray(qvel)))
  return d, fd


def test_jacobians_match_mujoco():
  m, fm = _models("dmc/humanoid")
  rng = np.random.default_rng(1)
  d, fd = _random_frames(m, fm, rng)
  bodies = np.arange(1, m.nbody)
  points = jnp.asarray(d.xipos[bodies] + 0.1)
  jacp, jacr = jax.jit(K.jac)(fm, fd, points, bodies)
  for k, b in enumerate(bodies):
    ref_p, ref_r = np.zeros((3, m.nv)), np.zeros((3, m.nv))
    mujoco.mj_jac(m, d, ref_p, ref_r, np.asarray(points[k]), b)
    assert support.relerr(jacp[k].T, ref_p) <= TOL
    assert support.relerr(jacr[k].T, ref_r) <= TOL

  force, torque = rng.normal(size=(2, m.nbody, 3))
  qfrc = jax.jit(K.apply_ft)(fm, fd, jnp.asarray(force), jnp.asarray(torque), fd.xipos)
  ref = np.zeros(m.nv)
  for b in bodies:
    mujoco.mj_applyFT(m, d, force[b], torque[b], d.xipos[b], b, ref)
  assert support.relerr(qfrc, ref) <= TOL


_TWO_TREES = """
<mujoco>
  <worldbody>
    <body name="base" pos="0 0 0.5"><freejoint/><geom size="0.1"/>
      <body name="arm" pos="0.2 0 0"><joint type="hinge" axis="0 1 0"/><geom size="0.05"/></body>
    </body>
    <body name="fixed" pos="1 0 0"><geom size="0.1"/></body>
    <body name="other" pos="0 1 0.5"><joint type="slide" axis="1 0 0"/>
      <joint type="ball"/><geom size="0.1"/></body>
  </worldbody>
</mujoco>"""


@pytest.mark.parametrize("pairs, shared", [
    ([(0, 2), (2, 0), (1, 2), (3, 1), (4, 3)], True),  # world, a fixed body or one tree
    ([(0, 2), (2, 4), (4, 1)], False),                 # two moving trees: two products
])
def test_normal_jacobians_match_mujoco(pairs: list[tuple[int, int]], shared: bool):
  """normal . (jacp(body2) - jacp(body1)) against mj_jac, through one product where the pairs
  allow it (kinematics.shared_root) and two where they span moving trees."""
  m = mujoco.MjModel.from_xml_string(_TWO_TREES)
  fm = from_mujoco(m)
  rng = np.random.default_rng(3)
  d, fd = _random_frames(m, fm, rng)
  body1, body2 = np.array(pairs).T
  assert (K.shared_root(fm, body1, body2) is not None) == shared
  points, normals = rng.normal(size=(2, len(pairs), 3))
  ours = K.normal_jac(fm, fd, jnp.asarray(points), jnp.asarray(normals), body1, body2)
  for k, (b1, b2) in enumerate(pairs):
    jac1, jac2 = np.zeros((3, m.nv)), np.zeros((3, m.nv))
    mujoco.mj_jac(m, d, jac1, None, points[k], b1)
    mujoco.mj_jac(m, d, jac2, None, points[k], b2)
    assert support.relerr(ours[k], normals[k] @ (jac2 - jac1)) <= TOL


def test_jit_equals_eager_and_vmap_equals_loop():
  _, fm = _models("ex/arm")
  rng = np.random.default_rng(2)
  qpos = jnp.asarray(np.asarray(fm.qpos0) + 0.3 * rng.normal(size=(4, fm.nq)))
  batch = make_data(fm, batch_shape=(4,)).replace(qpos=qpos)
  run = lambda d: K.com_pos(fm, K.kinematics(fm, d))
  batched = jax.jit(jax.vmap(run))(batch)
  for i in range(4):
    single = jax.jit(run)(jax.tree.map(lambda x, i=i: x[i], batch))
    np.testing.assert_allclose(batched.cdof[i], single.cdof, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(batched.xpos[i], single.xpos, rtol=1e-12, atol=1e-12)


def test_jit_equals_eager():
  _, fm = _models("dmc/acrobot")
  d = make_data(fm).replace(qpos=jnp.array([0.3, -0.2]), qvel=jnp.array([1.0, 2.0]))
  run = lambda d: K.com_vel(fm, K.com_pos(fm, K.kinematics(fm, d)))
  eager, jitted = run(d), jax.jit(run)(d)
  for field in FIELDS:
    np.testing.assert_allclose(getattr(jitted, field), getattr(eager, field), rtol=1e-12, atol=1e-12)


def test_gradients_match_finite_differences():
  _, fm = _models("ex/arm")
  rng = np.random.default_rng(3)
  qvel = jnp.asarray(rng.normal(size=fm.nv))
  d0 = make_data(fm)

  def site_and_velocity(qpos, body_mass):
    m = fm.replace(body_mass=body_mass)
    d = K.com_vel(m, K.com_pos(m, K.kinematics(m, d0.replace(qpos=qpos, qvel=qvel))))
    return jnp.sum(d.xpos ** 2) + jnp.sum(d.subtree_com * d.cvel[:, 3:])

  qpos = jnp.asarray(np.asarray(fm.qpos0) + 0.3 * rng.normal(size=fm.nq))
  check_grads(jax.jit(site_and_velocity), (qpos, fm.body_mass), order=1, modes=("fwd", "rev"),
              eps=1e-6, atol=1e-6, rtol=1e-6)


def test_gradient_is_finite_at_rest():
  _, fm = _models("ex/arm")
  d0 = make_data(fm)
  grad = jax.jit(jax.grad(lambda qvel: jnp.sum(K.com_vel(fm, K.com_pos(fm, K.kinematics(fm, d0.replace(qvel=qvel)))).cdof_dot ** 2)))
  assert np.all(np.isfinite(grad(jnp.zeros(fm.nv))))


def test_mocap_bodies_follow_mocap_pose():
  m = mujoco.MjModel.from_xml_string("""
    <mujoco><worldbody>
      <body name="target" mocap="true" pos="1 0 0"><geom size=".1"/>
        <body pos="0 .2 0"><joint type="hinge"/><geom size=".1" pos=".1 0 0"/></body>
      </body>
      <body pos="0 0 1"><joint type="ball"/><geom size=".1"/></body>
    </worldbody></mujoco>""")
  fm = from_mujoco(m)
  d = mujoco.MjData(m)
  d.qpos[:] = [0.4, 0.9, 0.1, 0.3, 0.2]
  d.mocap_pos[:] = [[0.3, -0.5, 2.0]]
  d.mocap_quat[:] = [[0.5, 0.5, -0.5, 0.5]]
  mujoco.mj_forward(m, d)
  fd = _stages()(fm, make_data(fm).replace(qpos=support.snapshot(d.qpos),
                                           mocap_pos=support.snapshot(d.mocap_pos),
                                           mocap_quat=support.snapshot(d.mocap_quat)))
  for field in ("xpos", "xquat", "xanchor", "geom_xpos"):
    assert support.relerr(getattr(fd, field), getattr(d, field)) <= TOL, field


TANGENT_XML = """
<mujoco>
  <worldbody>
    <body mocap="true" pos="0.2 0.1 0.5" quat="0.9 0.1 0.2 0.3">
      <geom size="0.1"/>
      <body pos="0 0.2 0"><joint axis="0 1 0" pos="0.1 0 0"/><geom size="0.1" pos="0.1 0 0"/></body>
    </body>
    <body pos="0 0 1" quat="0.8 0.2 -0.3 0.1">
      <joint type="slide" axis="1 0.2 0" pos="0.1 0 0"/>
      <joint axis="0 1 1" pos="0.3 0 0"/>
      <joint type="ball" pos="0 0.1 0.2"/>
      <geom type="capsule" size="0.05 0.2" pos="0.1 0.2 0" euler="10 20 30"/>
      <site pos="0.1 0.1 0.3" euler="5 5 5"/>
      <body pos="0.3 0 0.1" euler="10 0 40">
        <joint axis="1 0 0" pos="0 0 0.1"/>
        <joint type="slide" axis="0 0 1"/>
        <joint type="ball"/>
        <geom type="box" size="0.1 0.1 0.1" pos="0.2 0 0"/>
        <inertial pos="0.1 0 0.05" mass="1" diaginertia="0.1 0.2 0.3" euler="4 5 6"/>
      </body>
    </body>
    <body pos="2 0 1">
      <freejoint/>
      <geom type="box" size="0.1 0.2 0.3"/>
      <body pos="0.4 0 0"><joint type="ball" pos="0.1 0 0"/><geom size="0.1"/></body>
    </body>
  </worldbody>
</mujoco>
"""


@pytest.mark.parametrize("jacobian", [jax.jacfwd, jax.jacrev])
def test_position_tangents_are_the_compositions(jacobian):
  """kinematics' tangent rule (rigid motions of the frames) gives the derivatives of the
  composition it replaces, in forward and reverse mode: every joint type, several joints in
  one body, a mocap body with a jointed child, quaternions off the unit sphere, and a Model
  parameter differentiated together with the positions (that part goes through the
  composition)."""
  fm = flexor.load_mjcf_string(TANGENT_XML)
  rng = np.random.default_rng(4)
  d = make_data(fm)
  args = (fm.body_pos, d.qpos + 0.3 * rng.normal(size=fm.nq),
          d.mocap_pos + 0.1 * rng.normal(size=(1, 3)), d.mocap_quat + 0.2 * rng.normal(size=(1, 4)))

  def frames(world, body_pos, *state):
    return world(fm.replace(body_pos=body_pos), *state)

  ours = jax.jit(jacobian(functools.partial(frames, K._world_frames), argnums=(0, 1, 2, 3)))(*args)
  ref = jax.jit(jacobian(functools.partial(frames, lambda *a: K._world(*a)[0]),
                         argnums=(0, 1, 2, 3)))(*args)
  for field in ref:
    for arg, (a, b) in enumerate(zip(ours[field], ref[field])):
      np.testing.assert_allclose(a, b, rtol=0, atol=1e-13, err_msg=f"{field}, argument {arg}")


SLIDING_XML = """
<mujoco>
  <worldbody>
    <body name="puck" pos="0 0 0.1">
      <joint type="slide" axis="1 0 0"/>
      <joint type="slide" axis="0 1 0"/>
      <geom type="sphere" size="0.05" mass="1"/>
      <geom type="box" size="0.02 0.02 0.02" pos="0.05 0 0" mass="0.1"/>
      <site name="s" pos="0.1 0 0"/>
    </body>
  </worldbody>
</mujoco>"""


@pytest.mark.parametrize("name", ["sliding", "dmc/point_mass"])
def test_gradient_of_a_batched_rollout_where_no_joint_turns(name: str):
  """Where no joint turns anything, the frames' orientations never read qpos, so ``vmap`` left
  them unbatched while their tangents were batched: ``jax.grad`` of a batched rollout then
  failed (dm_control's point_mass and ball_in_cup). It must equal the per-world gradients."""
  fm = flexor.load_mjcf_string(SLIDING_XML) if name == "sliding" else _models(name)[1]
  d = make_data(fm, batch_shape=(3,))
  qvel = jnp.asarray(np.random.default_rng(5).normal(size=(3, fm.nv)))

  def final(qvel, d):
    return jnp.sum(flexor.rollout(fm, d.replace(qvel=qvel), nstep=2, fields=())[0].qpos ** 2)

  batched = jax.jit(jax.grad(lambda v: jnp.sum(jax.vmap(final)(v, d))))(qvel)
  np.testing.assert_allclose(batched, jax.jit(jax.vmap(jax.grad(final)))(qvel, d), rtol=1e-12,
                             atol=1e-12)


CAMLIGHT_XML = """
<mujoco>
  <worldbody>
    <light name="sun" pos="0 0 4" dir="0.2 0.1 -1"/>
    <body name="torso" pos="0 0 1" euler="10 -20 30">
      <freejoint/>
      <geom size="0.1"/>
      <site name="s"/>
      <camera name="fixed" pos="0.5 0.1 0.2" xyaxes="0 1 0 -0.3 0 1"/>
      <camera name="track" mode="track" pos="0.5 0.1 0.2" euler="5 6 7"/>
      <camera name="trackcom" mode="trackcom" pos="0 -1 0.5" zaxis="0 -1 1"/>
      <camera name="target" mode="targetbody" target="arm" pos="1 2 3"/>
      <camera name="targetcom" mode="targetbodycom" target="arm" pos="-1 0.5 2" euler="5 6 7"/>
      <camera name="notarget" mode="targetbody" pos="0 0 1"/>
      <camera name="optic" pos="0.2 0.1 1.5" euler="10 5 0" sensorsize="0.01 0.008"
              resolution="640 480" focalpixel="700 650"/>
      <frame pos="0.1 0 0" euler="0 0 90">
        <camera name="framed" pos="0.2 0 0" euler="0 30 0"/>
        <light name="framed_light" pos="0.2 0 0" dir="1 0 0"/>
      </frame>
      <light name="track_light" mode="track" pos="0.3 0 1" dir="1 1 -1"/>
      <light name="trackcom_light" mode="trackcom" pos="0.3 0 1"/>
      <light name="target_light" mode="targetbody" target="arm" pos="0 0 2"/>
      <light name="targetcom_light" mode="targetbodycom" target="torso" pos="0 1 2"/>
      <body name="arm" pos="0.3 0 0">
        <joint type="hinge" axis="0 1 0"/>
        <geom type="capsule" fromto="0 0 0 0.4 0 0" size="0.04"/>
        <camera name="on_arm" pos="0.4 0 0.1" euler="90 0 0"/>
        <site name="tip" pos="0.4 0 0"/>
      </body>
    </body>
  </worldbody>
  <sensor>
    <framepos objtype="camera" objname="on_arm"/>
    <framequat objtype="camera" objname="target"/>
    <framexaxis objtype="camera" objname="track"/>
    <framepos objtype="site" objname="s" reftype="camera" refname="trackcom"/>
    <framelinvel objtype="camera" objname="framed"/>
    <frameangvel objtype="camera" objname="targetcom"/>
    <camprojection site="tip" camera="optic"/>
    <camprojection site="tip" camera="trackcom"/>
  </sensor>
</mujoco>"""


def test_cameras_and_lights_match_mujoco_in_every_mode():
  """cam_xpos/xmat and light_xpos/xdir (mj_camlight) for every mode, in <frame>s and with and
  without targets, compiled by flexor, at random states; and frame sensors on cameras and
  camera projections (from fovy, and from a sensor's intrinsics)."""
  mj = mujoco.MjModel.from_xml_string(CAMLIGHT_XML)
  fm = flexor.load_mjcf_string(CAMLIGHT_XML)
  forward = jax.jit(flexor.forward)
  rng = np.random.default_rng(4)
  md = mujoco.MjData(mj)
  for _ in range(4):
    md.qpos[:], md.qvel[:] = random_state(mj, rng)
    mujoco.mj_forward(mj, md)
    d = forward(fm, make_data(fm).replace(qpos=support.snapshot(md.qpos),
                                          qvel=support.snapshot(md.qvel)))
    for field in ("cam_xpos", "cam_xmat", "light_xpos", "light_xdir", "sensordata"):
      assert support.relerr(getattr(d, field), getattr(md, field)) < 1e-12, field


def test_camera_gradients_match_finite_differences():
  """d(cam_xpos, cam_xmat, light_xdir) / d qpos of tracking and targeting cameras and lights."""
  fm = flexor.load_mjcf_string(CAMLIGHT_XML)
  d0 = make_data(fm)

  def frames(qpos):
    d = K.camlight(fm, K.com_pos(fm, K.kinematics(fm, d0.replace(qpos=qpos))))
    return jnp.sum(d.cam_xpos ** 2) + jnp.sum(d.cam_xmat[:, 0] * d.cam_xmat[:, 2]) + jnp.sum(
        d.light_xdir * d.light_xpos)

  qpos = jnp.asarray(random_state(mujoco.MjModel.from_xml_string(CAMLIGHT_XML),
                                  np.random.default_rng(5))[0])
  check_grads(jax.jit(frames), (qpos,), order=1, modes=("rev",), eps=1e-6, atol=1e-6, rtol=1e-6)
