"""Contacts end to end against MuJoCo C: collision (contact list), contact rows, the solver, and
gradients through rollouts in contact.

The narrow-phase functions themselves are tested pair by pair in test_collision_primitive.py;
here whole scenes and the dm_control and gymnasium models run through ``forward``.
"""

from __future__ import annotations

import os
import warnings

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest

import flexor
from flexor.mjcf.from_mujoco import from_mujoco
from flexor.types import GeomType

import support
from support import relerr

jax.config.update("jax_enable_x64", True)

# Contact geometry is closed-form (1e-9); forces and accelerations come from two solvers run to a
# tight tolerance: pyramidal and limit costs are piecewise quadratic (Newton is exact, 1e-9),
# the elliptic cone is not and MuJoCo stops earlier there (its gradient 1e-5..1e-8 at exit).
GEOM_TOL = 1e-9
SOLVE_TOL = {"pyramidal": 1e-9, "elliptic": 1e-6}

SCENE = """
<mujoco>
  <option timestep="0.005" cone="{cone}"/>
  <default><geom condim="{condim}" margin="{margin}" gap="{gap}"/></default>
  <worldbody>
    <geom name="floor" type="plane" size="2 2 0.1" priority="1" friction="0.8 0.01 0.001"
          solmix="2" contype="3" conaffinity="3"/>
    <body pos="0 0 0.2"><freejoint/>
      <geom name="ball" type="sphere" size="0.1" friction="1.2 0.02 0.002"/></body>
    <body pos="0.3 0 0.2"><freejoint/><geom type="capsule" size="0.05 0.1" solref="0.01 0.7"/></body>
    <body pos="0.6 0 0.2"><freejoint/>
      <geom type="box" size="0.1 0.08 0.06" solimp="0.8 0.9 0.002 0.4 3"/></body>
    <body pos="0.9 0 0.2"><freejoint/>
      <geom type="cylinder" size="0.07 0.05" contype="2" conaffinity="2"/></body>
    <body pos="0.6 0.1 0.35"><freejoint/><geom type="box" size="0.08 0.08 0.05"/></body>
    <body pos="0.1 0.2 0.3"><freejoint/><geom type="sphere" size="0.08"/></body>
  </worldbody>
  <contact>
    <pair geom1="floor" geom2="{pair_geom}" condim="1" friction="0.5 0.5 0.01 0.01 0.01"
          solref="-2000 -30" margin="0.01"/>
  </contact>
</mujoco>
"""

CONTACT_FIELDS = ("dist", "pos", "frame", "includemargin", "friction", "solref", "solimp", "dim",
                  "adhesion")
EFC_FIELDS = ("efc_type", "efc_J", "efc_pos", "efc_margin", "efc_D", "efc_R", "efc_vel",
              "efc_aref")
SOLVE_FIELDS = ("efc_force", "qacc", "qfrc_constraint")


def _scene_xml(cone: str, condim: int, margin: float = 0.0, gap: float = 0.0) -> str:
  return SCENE.format(cone=cone, condim=condim, margin=margin, gap=gap, pair_geom="ball")


def _scene_states(mj: mujoco.MjModel, n: int, seed: int = 0):
  """n (qpos, qvel) with every free body near or in the floor, random orientations."""
  rng = np.random.default_rng(seed)
  states = []
  for _ in range(n):
    qpos = mj.qpos0.copy()
    for b in range(mj.njnt):
      a = mj.jnt_qposadr[b]
      qpos[a:a + 2] += rng.normal(size=2) * 0.05
      qpos[a + 2] = rng.uniform(0.0, 0.15)
      q = rng.normal(size=4)
      qpos[a + 3:a + 7] = q / np.linalg.norm(q)
    states.append((qpos, rng.normal(size=mj.nv) * 0.5))
  return states


def _compare(m, mj, states, solve_tol: float, what: str, extra: tuple[str, ...] = ()):
  """Runs both engines at the states; asserts contacts, rows, the solution, the contact forces
  (mj_contactForce) and the ``extra`` Data fields agree."""
  d = flexor.make_data(m, (len(states),))
  d = d.replace(qpos=jnp.asarray(np.stack([s[0] for s in states])),
                qvel=jnp.asarray(np.stack([s[1] for s in states])))
  d = jax.jit(jax.vmap(flexor.forward, in_axes=(None, 0)))(m, d)
  forces = jax.vmap(flexor.rne.contact_force, in_axes=(None, 0))(m, d)
  md = mujoco.MjData(mj)
  for i, (qpos, qvel) in enumerate(states):
    md.qpos[:], md.qvel[:] = qpos, qvel
    md.qacc_warmstart[:] = 0
    mujoco.mj_forward(mj, md)
    exist = np.asarray(d.contact_exist[i])
    where = f"{what} state {i}"
    assert exist.sum() == md.ncon, f"{where}: ncon"
    np.testing.assert_array_equal(np.asarray(d.contact_geom[i])[exist], md.contact.geom, where)
    for field in CONTACT_FIELDS:
      ours = np.asarray(getattr(d, f"contact_{field}")[i])[exist]
      theirs = np.asarray(getattr(md.contact, field)).reshape(ours.shape)
      assert relerr(ours, theirs) < GEOM_TOL, f"{where}: contact {field}"
    active = np.asarray(d.efc_active[i])
    assert active.sum() == md.nefc, f"{where}: nefc"
    for field in EFC_FIELDS + SOLVE_FIELDS:
      ours = np.asarray(getattr(d, field)[i])
      theirs = np.asarray(getattr(md, field))
      if field.startswith("efc_"):
        ours, theirs = ours[active], theirs.reshape(-1, *ours.shape[1:])
      tol = solve_tol if field in SOLVE_FIELDS else GEOM_TOL
      assert relerr(ours, theirs) < tol, f"{where}: {field} {relerr(ours, theirs):.1e}"
    theirs = np.zeros((md.ncon, 6))
    for k in range(md.ncon):
      mujoco.mj_contactForce(mj, md, k, theirs[k])
    assert relerr(np.asarray(forces[i])[exist], theirs) < solve_tol, f"{where}: contact force"
    for field in extra:
      assert relerr(getattr(d, field)[i], getattr(md, field)) < solve_tol, f"{where}: {field}"
  return d


def _scene_case(cone: str, condim: int, margin: float = 0.0, gap: float = 0.0):
  xml = _scene_xml(cone, condim, margin, gap)
  mj = mujoco.MjModel.from_xml_string(xml)
  mj.opt.tolerance = 1e-13
  m = flexor.load_mjcf_string(xml)
  m = m.replace(opt=m.opt.replace(tolerance=jnp.asarray(1e-13)))
  d = _compare(m, mj, _scene_states(mj, 6), SOLVE_TOL[cone], f"{cone} condim {condim}")
  assert int(jnp.max(d.ncon)) > 4, "the scene must be in contact"


@pytest.mark.parametrize("cone,condim,margin,gap", [
    ("pyramidal", 3, 0.0, 0.0), ("elliptic", 6, 0.02, 0.01)])
def test_scene_matches_mujoco(cone, condim, margin, gap):
  _scene_case(cone, condim, margin, gap)


def _surface_case(cone: str) -> tuple[str, mujoco.MjModel, flexor.Model]:
  """tests/models/contact_surface.xml with the given cone: both engines, tolerance 1e-13."""
  with open(os.path.join(os.path.dirname(__file__), "models", "contact_surface.xml")) as f:
    xml = f.read().replace('cone="elliptic"', f'cone="{cone}"')
  mj = mujoco.MjModel.from_xml_string(xml)
  mj.opt.tolerance = 1e-13
  m = flexor.load_mjcf_string(xml)
  return xml, mj, m.replace(opt=m.opt.replace(tolerance=jnp.asarray(1e-13)))


@pytest.mark.parametrize("cone", ["pyramidal", "elliptic"])
def test_adhesion_and_surface_velocity_match_mujoco(cone):
  """MuJoCo 4's contact adhesion (pulling along the normal as a passive force, the rows' aref
  biased to compensate, and in the gap a single frictionless row) and geoms' surface velocities
  (in efc_vel): contacts, rows, solution, net contact forces and qfrc_adhesion. The first two
  states put the ball's contact in its gap, the third the puck's."""
  _, mj, m = _surface_case(cone)
  states = _scene_states(mj, 6, seed=1)
  for k, (body, z) in enumerate([(0, 0.125), (0, 0.128), (2, 0.07)]):
    qpos = states[k][0]
    qpos[7 * body + 2], qpos[7 * body + 3:7 * body + 7] = z, [1, 0, 0, 0]
  d = _compare(m, mj, states, SOLVE_TOL[cone], f"surface {cone}",
               extra=("qfrc_adhesion", "qfrc_passive"))
  single = np.asarray(d.contact_exist & (d.contact_dim == 1))
  assert single[:3].any(axis=1).all(), "the gap cases must make a contact of dim 1"


def test_conveyor_and_adhesion_trajectory_matches_mujoco():
  """150 steps on contact_surface.xml: the belt carries the puck and the ball, which adhesion
  holds on it, while the spinning wedge lands; the trajectory stays on MuJoCo's."""
  xml, _, _ = _surface_case("pyramidal")
  md = _trajectory(xml, [0.0] * 18, 150, 1e-8, 1e-6)
  assert md.qvel[12] > 0.05, "the belt drives the puck along x"


@pytest.mark.slow
def test_adhesion_and_surface_velocity_gradients_match_finite_differences():
  """Reverse mode through 25 steps of the ball and the puck on the belt with respect to the
  belt's surface velocity and the adhesions, against central differences."""
  _, _, m = _surface_case("pyramidal")
  qpos = m.qpos0.at[9].set(1.0)  # the wedge starts out of reach

  def loss(params):
    belt, adhesion = params
    mm = m.replace(geom_surfacevel=m.geom_surfacevel.at[0, :2].set(belt),
                   geom_adhesion=m.geom_adhesion.at[1].set(adhesion[0]),
                   pair_adhesion=adhesion[1:])
    d = flexor.make_data(mm).replace(qpos=qpos)
    d, _ = jax.lax.scan(lambda d, _: (flexor.step(mm, d), None), d, None, length=25)
    return d.qpos[0] + 0.3 * d.qpos[2] + d.qpos[14] - 0.5 * d.qpos[15] + d.qvel[12]

  params = (jnp.array([0.3, 0.1]), jnp.array([1.5, 2.0]))
  grad = np.concatenate(jax.jit(jax.grad(loss))(params))
  f, eps = jax.jit(loss), 1e-6
  fd = []
  for i in range(2):
    for k in range(2):
      step = [jnp.zeros(2), jnp.zeros(2)]
      step[i] = step[i].at[k].set(eps)
      plus = tuple(p + s for p, s in zip(params, step))
      minus = tuple(p - s for p, s in zip(params, step))
      fd.append((f(plus) - f(minus)) / (2 * eps))
  assert np.all(grad != 0)
  np.testing.assert_allclose(grad, fd, rtol=1e-5, atol=1e-8)


def _vertices(points) -> str:
  return " ".join(f"{x:.6f}" for x in np.ravel(points))


# mjc_PlaneConvex's geoms: ellipsoids, and meshes searched exhaustively (a cube: 8 vertices) or by
# hill climbing over their hull graph (a 12-sided prism, whose caps are polygons of more than four
# vertices, and a point cloud, whose hull is all triangles)
PLANE_CONVEX_XML = f"""
<mujoco>
  <asset>
    <mesh name="cube" vertex="{_vertices(np.array(np.meshgrid(*[[-.05, .05]] * 3)).T)}"/>
    <mesh name="prism" vertex="{_vertices([[.08 * np.cos(a), .08 * np.sin(a), z]
                                           for a in np.arange(12) * np.pi / 6
                                           for z in (-.05, .05)])}"/>
    <mesh name="cloud" vertex="{_vertices(np.random.default_rng(5).normal(size=(40, 3)) * .06)}"/>
  </asset>
  <default><geom conaffinity="0"/></default>
  <worldbody>
    <geom name="floor" type="plane" size="2 2 0.1" conaffinity="1"/>
    <body pos="0 0 0.2"><freejoint/><geom type="ellipsoid" size="0.12 0.06 0.04"/></body>
    <body pos="0.4 0 0.2"><freejoint/>
      <geom type="ellipsoid" size="0.05 0.08 0.1" condim="6" margin="0.02"/></body>
    <body pos="0 0.4 0.2"><freejoint/><geom type="mesh" mesh="cube"/></body>
    <body pos="0.4 0.4 0.2"><freejoint/><geom type="mesh" mesh="prism" margin="0.01"/></body>
    <body pos="0.8 0.4 0.2"><freejoint/><geom type="mesh" mesh="cloud" condim="4"/></body>
  </worldbody>
</mujoco>
"""


def test_plane_convex_matches_mujoco():
  """Plane-ellipsoid and plane-mesh (mjc_PlaneConvex) through flexor's own compiler (hull graph,
  extrema, polygons), the driver, rows and solver, against MuJoCo at random poses."""
  mj = mujoco.MjModel.from_xml_string(PLANE_CONVEX_XML)
  mj.opt.tolerance = 1e-13
  with warnings.catch_warnings():
    warnings.simplefilter("error")  # every pair is supported
    m = flexor.load_mjcf_string(PLANE_CONVEX_XML)
  m = m.replace(opt=m.opt.replace(tolerance=jnp.asarray(1e-13)))
  d = _compare(m, mj, _scene_states(mj, 8, seed=1), SOLVE_TOL["pyramidal"], "plane-convex")
  counts = np.bincount(np.asarray(d.contact_geom)[np.asarray(d.contact_exist)][:, 1])
  assert counts.size == m.ngeom and np.all(counts[1:] > 0), f"contacts per geom {counts}"
  assert np.max(np.sum(np.asarray(d.contact_exist), axis=1)) > 8


def test_plane_mesh_gradient_wrt_vertices():
  """Mesh vertices are traced Model data: the contact distances' gradient with respect to them
  is finite and agrees with central differences (fixed contact set, generic pose)."""
  mj = mujoco.MjModel.from_xml_string(PLANE_CONVEX_XML)
  m = flexor.load_mjcf_string(PLANE_CONVEX_XML)
  prism = 4
  contacts = jax.jit(lambda qpos: flexor.collision.collision(
      m, flexor.kinematics.kinematics(m, flexor.make_data(m).replace(qpos=qpos))))
  for qpos, _ in _scene_states(mj, 20, seed=3):
    d = contacts(jnp.asarray(qpos))
    mine = np.asarray(d.contact_exist) & (np.asarray(d.contact_geom)[:, 1] == prism)
    if mine.sum() >= 3:
      break
  assert mine.sum() >= 3, "a pose with the prism in contact at several vertices"

  def depth(vert):
    c = flexor.collision.collision(m.replace(mesh_vert=vert), d)
    return jnp.sum(jnp.where(mine, c.contact_dist, 0.0))

  vert = m.mesh_vert
  grad = np.asarray(jax.jit(jax.grad(depth))(vert))
  assert np.all(np.isfinite(grad)) and np.count_nonzero(grad) >= 3
  f, eps = jax.jit(depth), 1e-6
  for i in np.unique(np.nonzero(grad)[0]):
    for k in range(3):
      fd = (f(vert.at[i, k].add(eps)) - f(vert.at[i, k].add(-eps))) / (2 * eps)
      assert abs(fd - grad[i, k]) < 1e-8, (i, k, fd, grad[i, k])


@pytest.mark.slow
@pytest.mark.parametrize("cone", ["pyramidal", "elliptic"])
@pytest.mark.parametrize("condim", [1, 3, 4, 6])
def test_scene_matches_mujoco_every_condim(cone, condim):
  _scene_case(cone, condim, 0.01, 0.005)


def _model_states(mj: mujoco.MjModel, nstep: int, every: int, seed: int = 0):
  """States along a MuJoCo trajectory with random controls (contacts made by the motion)."""
  md = mujoco.MjData(mj)
  if mj.nkey:
    mujoco.mj_resetDataKeyframe(mj, md, 0)
  rng = np.random.default_rng(seed)
  states = []
  for k in range(nstep):
    md.ctrl[:] = rng.uniform(-1, 1, size=mj.nu)
    mujoco.mj_step(mj, md)
    if k % every == every - 1:
      states.append((md.qpos.copy(), md.qvel.copy(), md.act.copy(), md.ctrl.copy()))
  return states


def _model_case(name: str):
  path = support.model_paths()[name]
  mj = mujoco.MjModel.from_xml_path(path)
  # both engines solve to a tight tolerance; a model that asks for PGS (gymnasium's humanoid,
  # 50 iterations) keeps it, and runs to its iteration limit in both
  mj.opt.tolerance = 1e-12
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    m = flexor.load_mjcf(path)
  m = m.replace(opt=m.opt.replace(tolerance=jnp.asarray(1e-12)))
  states = _model_states(mj, 150, 50)
  d = flexor.make_data(m, (len(states),))
  d = d.replace(**{k: jnp.asarray(np.stack([s[i] for s in states]))
                   for i, k in enumerate(("qpos", "qvel", "act", "ctrl"))})
  d = jax.jit(jax.vmap(flexor.forward, in_axes=(None, 0)))(m, d)
  md = mujoco.MjData(mj)
  cone = "elliptic" if mj.opt.cone == mujoco.mjtCone.mjCONE_ELLIPTIC else "pyramidal"
  for i, (qpos, qvel, act, ctrl) in enumerate(states):
    md.qpos[:], md.qvel[:], md.act[:], md.ctrl[:] = qpos, qvel, act, ctrl
    mujoco.mj_forward(mj, md)
    assert int(d.ncon[i]) == md.ncon, f"{name} state {i}: ncon"
    assert int(d.nefc[i]) == md.nefc, f"{name} state {i}: nefc"
    for field in ("qacc", "qfrc_constraint"):
      err = relerr(getattr(d, field)[i], getattr(md, field))
      assert err < SOLVE_TOL[cone] * 10, f"{name} state {i}: {field} {err:.1e}"


# Models whose every contact pair flexor's narrow phase supports (others warn and drop pairs).
CONTACT_MODELS = ("dmc/cheetah", "dmc/hopper", "dmc/humanoid", "dmc/walker", "dmc/manipulator",
                  "dmc/stacker", "gym/ant", "gym/half_cheetah", "gym/hopper", "gym/humanoid",
                  "gym/humanoidstandup", "gym/walker2d")


@pytest.mark.parametrize("name", ["gym/ant", "gym/hopper", "gym/humanoid"])
def test_model_matches_mujoco(name):
  _model_case(name)


@pytest.mark.slow
@pytest.mark.parametrize("name", CONTACT_MODELS)
def test_every_contact_model_matches_mujoco(name):
  _model_case(name)


BOX_XML = """
<mujoco>
  <option timestep="0.004"/>
  <worldbody>
    <geom type="plane" size="2 2 0.1"/>
    <body pos="0 0 0.0995"><freejoint/><geom type="box" size="0.1 0.1 0.1" friction="0.6"/></body>
  </worldbody>
</mujoco>
"""


def _trajectory(xml: str, qvel: list[float], nstep: int, qpos_tol: float, qvel_tol: float
                ) -> mujoco.MjData:
  """Steps both engines from qvel, checking contact count, qpos and qvel at every step;
  returns MuJoCo's final data."""
  mj = mujoco.MjModel.from_xml_string(xml)
  md = mujoco.MjData(mj)
  md.qvel[:] = qvel
  m = flexor.load_mjcf_string(xml)
  d = flexor.make_data(m).replace(qvel=support.snapshot(md.qvel))
  step = jax.jit(flexor.step)
  for k in range(nstep):
    mujoco.mj_step(mj, md)
    d = step(m, d)
    assert int(d.ncon) == md.ncon, f"step {k}: ncon"
    assert relerr(d.qpos, md.qpos) < qpos_tol, f"step {k}: qpos"
    assert relerr(d.qvel, md.qvel) < qvel_tol, f"step {k}: qvel"
  return md


def test_resting_box_trajectory_matches_mujoco():
  """100 steps of a box settling and sliding on a plane: the trajectory stays on MuJoCo's."""
  md = _trajectory(BOX_XML, [0.3, 0.1, 0, 0, 0, 0.5], 100, 1e-8, 1e-6)
  assert md.ncon == 4


THREE_ISLANDS_XML = """
<mujoco>
  <option timestep="0.005" solver="%s" cone="%s"/>
  <worldbody>
    <geom type="plane" size="2 2 .1"/>
    <body pos="0 0 .1"><freejoint/><geom type="box" size=".1 .1 .1"/></body>
    <body pos=".5 0 .15" euler="10 20 0"><freejoint/><geom type="box" size=".1 .08 .1"/></body>
    <body pos="-.5 .3 .25"><freejoint/><geom type="capsule" size=".05 .1"/></body>
  </worldbody>
</mujoco>
"""


@pytest.mark.parametrize("solver,cone", [("CG", "pyramidal"),
                                         pytest.param("CG", "elliptic", marks=pytest.mark.slow),
                                         ("Newton", "elliptic")])
def test_trajectory_in_three_islands_matches_mujoco(solver, cone):
  """MuJoCo's solvers solve each constraint island alone (its own line searches, scale and
  stop), and Newton stops also on its decrement: three bodies thrown onto a plane, in three
  islands once all have landed, stay on MuJoCo's trajectory for 200 steps (qvel within 1.4e-13
  measured; solved all at once, CG strays to 7e-5 and Newton to 7e-11, and without the
  decrement test Newton strays to 2e-8 with elliptic cones)."""
  qvel = 0.5 * np.random.default_rng(0).normal(size=18)
  md = _trajectory(THREE_ISLANDS_XML % (solver, cone), qvel, 200, 1e-12, 1e-11)
  assert md.nisland == 3 and md.ncon == 10


CYLINDER_ON_MESH_XML = """
<mujoco>
  <option timestep="0.004"><flag multiccd="disable"/></option>
  <asset><mesh name="cube" vertex="-.1 -.1 -.1  .1 -.1 -.1  -.1 .1 -.1  .1 .1 -.1
                                   -.1 -.1 .1  .1 -.1 .1  -.1 .1 .1  .1 .1 .1"/></asset>
  <worldbody>
    <geom type="plane" size="2 2 0.1"/>
    <body pos="0 0 0.1"><freejoint/><geom type="mesh" mesh="cube"/></body>
    <body pos="0.03 0.02 0.35" euler="0 0 20"><freejoint/>
      <geom type="cylinder" size="0.06 0.05"/></body>
  </worldbody>
</mujoco>
"""


def test_cylinder_landing_on_mesh_without_multiccd_matches_mujoco():
  """A cylinder thrown onto a mesh cube that slides on a plane, with multiccd disabled (one
  GJK/EPA contact for the cylinder-mesh pair): 120 steps on MuJoCo's trajectory."""
  md = _trajectory(CYLINDER_ON_MESH_XML, [0.1, 0, 0, 0, 0, 0.3, 0, 0.1, -1, 0.5, 0, 0], 120,
                   1e-10, 1e-8)
  assert md.ncon == 5  # the cube's four on the plane, the cylinder's one on the cube


BOXES_XML = """
<mujoco>
  <size nconmax="{cap}"/>
  <option timestep="0.005"/>
  <worldbody>
    <geom type="plane" size="5 5 0.1"/>
    {boxes}
  </worldbody>
  <sensor>{touch}</sensor>
</mujoco>
""".replace("{boxes}", "\n".join(
    f'<body pos="{0.3 * i} {0.1 * (i % 3)} {0.1 + 0.25 * i}"><freejoint/>'
    f'<geom type="box" size="0.1 0.1 0.1"/>'
    f'<site name="bottom{i}" type="box" size="0.11 0.11 0.02" pos="0 0 -0.1"/></body>'
    for i in range(4))).replace("{touch}", "".join(
        f'<touch site="bottom{i}"/>' for i in range(4)))


def test_nconmax_compacts_contacts_in_mujoco_order():
  """<size nconmax> holds Data's contacts to that many slots (rows follow): 4 boxes falling on
  a plane and onto each other (16 contacts at rest) in 20 slots instead of 64 keep MuJoCo's
  trajectory, contacts and order, touch sensors and contact wrenches."""
  xml = BOXES_XML.format(cap=20)
  m = flexor.load_mjcf_string(xml)
  assert (m.nconslot, m.nconmax, m.njmax) == (64, 20, 80)
  mj = mujoco.MjModel.from_xml_string(xml)
  md = mujoco.MjData(mj)
  d = flexor.make_data(m)
  step = jax.jit(flexor.step)
  for k in range(300):
    mujoco.mj_step(mj, md)
    d = step(m, d)
    assert relerr(d.qpos, md.qpos) < 1e-9, f"step {k}: qpos"
  d = jax.jit(lambda m, d: flexor.rne.rne_postconstraint(m, flexor.forward(m, d)))(m, d)
  mujoco.mj_forward(mj, md)
  mujoco.mj_rnePostConstraint(mj, md)
  exist = np.asarray(d.contact_exist)
  assert exist.sum() == md.ncon == 16 and int(d.ncon_dropped) == 0
  np.testing.assert_array_equal(np.asarray(d.contact_geom)[exist], md.contact.geom)
  assert relerr(np.asarray(d.contact_pos)[exist], md.contact.pos) < GEOM_TOL
  # what reads contacts through their (now traced) geoms: touch sensors and contact wrenches
  assert relerr(d.sensordata, md.sensordata) < 1e-6 and np.min(md.sensordata) > 1.0
  assert relerr(d.cfrc_ext, md.cfrc_ext) < 1e-6


def test_nconmax_overflow_is_counted():
  """With fewer slots than contacts the first ones in MuJoCo's order are kept and the others
  counted in ncon_dropped."""
  m = flexor.load_mjcf_string(BOXES_XML.format(cap=6))
  full = flexor.load_mjcf_string(BOXES_XML.format(cap=-1))
  qpos = np.asarray(full.qpos0).copy()
  qpos[2::7] = [0.099, 0.299, 0.499, 0.699]  # stacked, each box resting on the one below
  qpos[0::7] = qpos[1::7] = 0.0
  run = lambda m: jax.jit(flexor.forward)(m, flexor.make_data(m).replace(qpos=jnp.asarray(qpos)))
  d, ref = run(m), run(full)
  assert int(ref.ncon) == 16 and int(d.ncon) == 6 and int(d.ncon_dropped) == 10
  exist, ref_exist = np.asarray(d.contact_exist), np.asarray(ref.contact_exist)
  np.testing.assert_array_equal(np.asarray(d.contact_geom)[exist],
                                np.asarray(ref.contact_geom)[ref_exist][:6])


def test_size_njmax_limits_no_rows_as_in_mujoco_4():
  """MuJoCo 4.0 sizes its rows as a step needs and ignores <size njmax> (a box sunk into a
  plane, njmax 5: 16 rows in MuJoCo and no warning); flexor's rows do not depend on it either."""
  xml = ('<mujoco><size njmax="5"/><worldbody><geom type="plane" size="1 1 .1"/>'
         '<body pos="0 0 .09"><freejoint/><geom type="box" size=".1 .1 .1"/></body>'
         '</worldbody></mujoco>')
  mj = mujoco.MjModel.from_xml_string(xml)
  md = mujoco.MjData(mj)
  mujoco.mj_forward(mj, md)
  m = flexor.load_mjcf_string(xml)
  d = jax.jit(flexor.forward)(m, flexor.make_data(m))
  assert md.nefc == int(d.nefc) == 16 and mj.njmax == 5
  assert not any(w.number for w in md.warning)
  assert relerr(d.qacc, md.qacc) < 1e-6


def test_nconmax_groups_condims_and_keeps_the_solution():
  """Compacted per condim (the scene's pair has condim 1, the rest 3): the contacts of each
  condim in MuJoCo's order, and the same constraint solution."""
  xml = _scene_xml("pyramidal", 3).replace("<mujoco>", '<mujoco><size nconmax="12"/>')
  mj = mujoco.MjModel.from_xml_string(xml)
  mj.opt.tolerance = 1e-13
  m = flexor.load_mjcf_string(xml)
  m = m.replace(opt=m.opt.replace(tolerance=jnp.asarray(1e-13)))
  assert m.nconmax < m.nconslot
  states = _scene_states(mj, 4)
  d = flexor.make_data(m, (len(states),)).replace(
      qpos=jnp.asarray(np.stack([s[0] for s in states])),
      qvel=jnp.asarray(np.stack([s[1] for s in states])))
  d = jax.jit(jax.vmap(flexor.forward, in_axes=(None, 0)))(m, d)
  md = mujoco.MjData(mj)
  for i, (qpos, qvel) in enumerate(states):
    md.qpos[:], md.qvel[:] = qpos, qvel
    mujoco.mj_forward(mj, md)
    exist = np.asarray(d.contact_exist[i])
    order = np.argsort(md.contact.dim, kind="stable")
    np.testing.assert_array_equal(np.asarray(d.contact_geom[i])[exist], md.contact.geom[order])
    assert int(d.ncon_dropped[i]) == 0
    for field in SOLVE_FIELDS[1:]:
      assert relerr(getattr(d, field)[i], getattr(md, field)) < 1e-9, f"state {i}: {field}"


@pytest.mark.slow
def test_capacities_keep_rollout_gradients():
  """Reverse mode through 20 steps of the stack of boxes is the same with its contacts compacted
  into 20 slots and the box-box narrow phase held to the 3 nearest of 6 pairs."""
  qpos = np.asarray(flexor.load_mjcf_string(BOXES_XML.format(cap=-1)).qpos0).copy()
  qpos[2::7] = [0.099, 0.299, 0.499, 0.699]
  qpos[0::7] = qpos[1::7] = 0.0
  grads = []
  for xml in (BOXES_XML.format(cap=-1), BOXES_XML.format(cap=20).replace(
      "<option", '<custom><numeric name="max_geom_pairs" data="3"/></custom><option')):
    m = flexor.load_mjcf_string(xml)
    d0 = flexor.make_data(m).replace(qpos=jnp.asarray(qpos))

    def loss(qvel, m=m, d0=d0):
      d, _ = jax.lax.scan(lambda d, _: (flexor.step(m, d), None), d0.replace(qvel=qvel), None,
                          length=20)
      return jnp.sum(d.qpos[0::7]) + jnp.sum(d.qpos[2::7])
    grads.append(jax.jit(jax.grad(loss))(jnp.full(m.nv, 0.2)))
  assert np.all(np.isfinite(grads[0])) and np.abs(grads[0]).max() > 0.1
  np.testing.assert_allclose(grads[1], grads[0], rtol=1e-9, atol=1e-12)


BALLS_XML = """
<mujoco>
  <custom><numeric name="max_geom_pairs" data="{k}"/></custom>
  <option timestep="0.005"/>
  <worldbody>
    <geom type="plane" size="5 5 0.1"/>
    {balls}
  </worldbody>
</mujoco>
""".replace("{balls}", "\n".join(
    f'<body pos="{x:.3f} {y:.3f} {z}"><freejoint/><geom type="sphere" size="0.08"/>'
    f'<geom type="capsule" size="0.03 0.05" pos="0 0 0.06"/></body>'
    for x, y, z in [(0.17 * i, 0.17 * j, 0.1) for i in range(3) for j in range(3)]
    + [(0.085 + 0.17 * i, 0.085 + 0.17 * j, 0.35) for i in range(2) for j in range(2)]))


def test_max_geom_pairs_keeps_mujoco_trajectory():
  """MJX's max_geom_pairs: each geom-type pair's narrow phase runs on the 24 candidates with the
  nearest bounding spheres (of 78 sphere-sphere, 156 sphere-capsule and 78 capsule-capsule
  pairs), and 13 balls settling in two layers follow MuJoCo."""
  xml = BALLS_XML.format(k=24)
  m = flexor.load_mjcf_string(xml)
  assert m.max_geom_pairs == 24
  assert _follows_mujoco(m, xml, 200) > 24, "more contacts than max_geom_pairs"


def _follows_mujoco(m: flexor.Model, xml: str, nstep: int) -> int:
  """Steps ``m`` and MuJoCo's compile of ``xml`` side by side from rest: the same contact count
  at every step, none left out, qpos within 1e-8. Returns the most contacts at one step."""
  mj = mujoco.MjModel.from_xml_string(xml)
  md = mujoco.MjData(mj)
  d = flexor.make_data(m)
  step = jax.jit(flexor.step)
  most = 0
  for k in range(nstep):
    mujoco.mj_step(mj, md)
    d = step(m, d)
    most = max(most, md.ncon)
    assert int(d.ncon) == md.ncon and int(d.ncollision_dropped) == 0, f"step {k}"
    assert relerr(d.qpos, md.qpos) < 1e-8, f"step {k}: qpos"
  return most


def test_chunked_narrow_phase_keeps_mujoco_trajectory():
  """20 balls (190 sphere-sphere candidates, more than collision.CHUNKED_ABOVE) dropped in two
  layers: the narrow phase runs on the candidates whose bounding spheres meet, a chunk at a
  time, and the balls follow MuJoCo's contacts and trajectory."""
  balls = "\n".join(
      f'<body pos="{x:.3f} {y:.3f} {z}"><freejoint/><geom type="sphere" size="0.08"/></body>'
      for x, y, z in [(0.17 * i, 0.17 * j, 0.1) for i in range(4) for j in range(3)]
      + [(0.085 + 0.17 * i, 0.085 + 0.17 * j, 0.3) for i in range(4) for j in range(2)])
  xml = f"""<mujoco><worldbody><geom type="plane" size="5 5 0.1"/>{balls}</worldbody></mujoco>"""
  m = flexor.load_mjcf_string(xml)
  spheres = np.all(m.geom_type[m.collision_geom] == GeomType.SPHERE, axis=1)
  assert spheres.sum() == 190 > flexor.collision.CHUNKED_ABOVE
  assert _follows_mujoco(m, xml, 150) > 20, "ball-ball contacts"


def test_max_geom_pairs_overflow_is_counted():
  """Read as MJX reads it (2.5 is 2), also from a compiled MjModel; pairs in reach past it are
  counted."""
  m = flexor.load_mjcf_string(BALLS_XML.format(k=2.5))
  assert m.max_geom_pairs == 2
  assert from_mujoco(mujoco.MjModel.from_xml_string(BALLS_XML.format(k=2.5))
                     ).max_geom_pairs == 2
  qpos = np.asarray(m.qpos0).copy()
  qpos[2::7] = 0.08  # the upper layer dropped into the lower one
  d = jax.jit(flexor.forward)(m, flexor.make_data(m).replace(qpos=jnp.asarray(qpos)))
  assert int(d.ncollision_dropped) > 0


def _box_loss(nstep: int):
  m = flexor.load_mjcf_string(BOX_XML)
  d0 = flexor.make_data(m)

  def loss(qvel):
    d = d0.replace(qvel=qvel)
    d, _ = jax.lax.scan(lambda d, _: (flexor.step(m, d), None), d, None, length=nstep)
    return d.qpos[0] + 0.5 * d.qpos[1] + d.qpos[6]

  return loss


def test_box_sliding_gradient_matches_finite_differences():
  """Reverse mode through 50 steps of a box sliding under friction on a plane, at MuJoCo's
  default solver settings, against central differences (away from stick-slip switches)."""
  loss = _box_loss(50)
  qvel = jnp.array([0.8, 0.3, 0.0, 0.0, 0.0, 0.4])
  grad = jax.jit(jax.grad(loss))(qvel)
  f = jax.jit(loss)
  eps = 1e-6
  fd = np.array([(f(qvel.at[i].add(eps)) - f(qvel.at[i].add(-eps))) / (2 * eps)
                 for i in range(6)])
  assert np.all(np.isfinite(grad))
  np.testing.assert_allclose(grad, fd, rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_cheetah_rollout_gradient_matches_finite_differences():
  """dm_control's cheetah at its own solver settings (MJX's reverse mode fails here)."""
  path = support.model_paths()["dmc/cheetah"]
  m = flexor.load_mjcf(path)
  mj = mujoco.MjModel.from_xml_path(path)
  md = mujoco.MjData(mj)
  for _ in range(200):  # settle onto the ground
    mujoco.mj_step(mj, md)
  d0 = flexor.make_data(m).replace(qpos=support.snapshot(md.qpos), qvel=support.snapshot(md.qvel))

  def loss(ctrl):
    def body(d, u):
      return flexor.step(m, d.replace(ctrl=u)), None
    d, _ = jax.lax.scan(body, d0, ctrl)
    return d.qpos[0] + 0.1 * jnp.sum(d.qvel**2)

  ctrl = jnp.full((50, m.nu), 0.1)
  grad = jax.jit(jax.grad(loss))(ctrl)
  f = jax.jit(loss)
  eps = 1e-6
  rng = np.random.default_rng(0)
  for _ in range(4):
    t, j = int(rng.integers(50)), int(rng.integers(m.nu))
    fd = (f(ctrl.at[t, j].add(eps)) - f(ctrl.at[t, j].add(-eps))) / (2 * eps)
    np.testing.assert_allclose(grad[t, j], fd, rtol=1e-5, atol=1e-7)


@pytest.mark.slow
def test_humanoid_falls_without_nan():
  """dm_control's humanoid falling for 2 s: finite throughout, contact forces as MuJoCo's for
  the first 50 steps."""
  path = support.model_paths()["dmc/humanoid"]
  m = flexor.load_mjcf(path)
  mj = mujoco.MjModel.from_xml_path(path)
  md = mujoco.MjData(mj)
  d = flexor.make_data(m)
  step = jax.jit(flexor.step)
  nstep = int(round(2.0 / mj.opt.timestep))
  for k in range(nstep):
    d = step(m, d)
    if k < 50:
      mujoco.mj_step(mj, md)
      assert relerr(d.qfrc_constraint, md.qfrc_constraint) < 1e-5, f"step {k}"
  assert not bool(d.warning_nan)
  assert np.all(np.isfinite(np.asarray(d.qpos)))
  assert int(d.ncon) > 0
