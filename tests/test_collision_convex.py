"""GJK/EPA convex collision (flexor.collision_convex; models loaded with convex=False leave it
out) against MuJoCo 4.0's mjc_Convex: contacts of sphere, capsule, ellipsoid, cylinder, box and
mesh geoms with an ellipsoid, of spheres and ellipsoids with a mesh, and (where the model
disables multiccd) of the pairs of capsules, cylinders, boxes and meshes MuJoCo otherwise gives
several contacts (tests/test_collision_multi.py), at random poses of two free bodies, in
float64."""

from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest

import flexor
from flexor.mjcf.from_mujoco import from_mujoco
from support import batched_collision, match_contacts

_PRISM = " ".join(f"{np.cos(a) * 0.12:.4f} {np.sin(a) * 0.12:.4f} {z}"
                  for a in np.linspace(0, 2 * np.pi, 7)[:-1] for z in (-0.1, 0.1))
_GEOMS = {
    "sphere": '<geom type="sphere" size="0.1"/>',
    "capsule": '<geom type="capsule" size="0.06 0.1"/>',
    "ellipsoid": '<geom type="ellipsoid" size="0.12 0.08 0.06"/>',
    "cylinder": '<geom type="cylinder" size="0.08 0.1"/>',
    "box": '<geom type="box" size="0.1 0.07 0.05"/>',
    "mesh": '<geom type="mesh" mesh="prism"/>',
}


_SINGLE = "<flag multiccd='disable'/>"  # one contact per pair, also for the MULTI pairs


def _xml(a: str, b: str, margin: float = 0.0, option: str = "", flag: str = "") -> str:
  return f"""<mujoco><asset><mesh name="prism" vertex="{_PRISM}"/></asset>
  <option gravity="0 0 0" {option}>{flag}</option>
  <default><geom margin="{margin}"/></default>
  <worldbody><body><freejoint/>{_GEOMS[a]}</body>
  <body pos="0.3 0 0"><freejoint/>{_GEOMS[b]}</body></worldbody></mujoco>"""


def _poses(n: int, seed: int) -> np.ndarray:
  """(n, 14) qpos: body 1 at the origin, body 2 0.05-0.25 m away, both randomly turned."""
  rng = np.random.default_rng(seed)
  q = np.zeros((n, 14))
  for row in q:
    row[3:7] = rng.normal(size=4)
    row[7:10] = rng.normal(size=3)
    row[7:10] *= rng.uniform(0.05, 0.25) / np.linalg.norm(row[7:10])
    row[10:14] = rng.normal(size=4)
  q[:, 3:7] /= np.linalg.norm(q[:, 3:7], axis=1, keepdims=True)
  q[:, 10:14] /= np.linalg.norm(q[:, 10:14], axis=1, keepdims=True)
  return q


def _compare(a: str, b: str, n: int, margin: float = 0.0, seed: int = 0, flag: str = "",
             dist_tol: float = 1e-8, exact_share: float = 0.85) -> int:
  """Contacts of both engines at n poses; returns how many MuJoCo found.

  Most contacts agree to round-off: the GJK and EPA iterations are MuJoCo's, step by step. A few
  take another branch where a simplex is nearly flat and the last bits of the poses (flexor's
  kinematics against MuJoCo's) decide a sign; those still agree to within what MuJoCo's own
  ccd_tolerance leaves open (1e-4 in the normal, ``dist_tol`` in the depth: 1e-8 m, or the
  tolerance itself, 1e-6 m, where two flat faces meet and EPA's last face is one of many). At
  least ``exact_share`` of the contacts agree to 1e-9.
  """
  xml = _xml(a, b, margin, flag=flag)
  with warnings.catch_warnings():
    warnings.simplefilter("error")  # the pair is supported
    m = flexor.load_mjcf_string(xml)
  qs = _poses(n, seed)
  errors = match_contacts(mujoco.MjModel.from_xml_string(xml),
                          batched_collision(m)(jnp.asarray(qs)), qs, f"{a}-{b}", dist_tol)
  found, exact = len(errors), sum(err < 1e-9 for _, err in errors)
  assert exact >= exact_share * found, f"{a}-{b}: {exact} of {found} contacts agree to 1e-9"
  return found


def test_ellipsoid_pairs_match_mujoco():
  """EPA on two curved surfaces stops after a pose-dependent number of iterations, each one
  a MuJoCo step: its contacts agree to round-off, not only to ccd_tolerance."""
  assert _compare("ellipsoid", "ellipsoid", 24) >= 12


def test_nearly_round_ellipsoids_match_mujoco():
  """Two nearly round ellipsoids (MuJoCo's model/balloons/balloons.xml), just touching: where
  GJK ends on a triangle, the segment between polytope3's two apexes often misses it, and MuJoCo
  4.0 builds the first polytope around another equator (recoverHexa). EPA never converges on
  curved surfaces, so the contact is wherever its ccd_iterations end: every one agrees to 1e-9
  only if the polytope starts as MuJoCo's (55 of 56 before it did)."""
  xml = """<mujoco><option gravity="0 0 0"/><worldbody>
    <body><freejoint/><geom type="ellipsoid" size="0.12 0.12 0.14"/></body>
    <body pos="0.3 0 0"><freejoint/><geom type="ellipsoid" size="0.12 0.12 0.13"/></body>
    </worldbody></mujoco>"""
  rng = np.random.default_rng(1)
  qs = np.zeros((60, 14))
  for q in qs:
    q[3:7], q[7:10], q[10:14] = rng.normal(size=4), rng.normal(size=3), rng.normal(size=4)
    q[7:10] *= rng.uniform(0.15, 0.26) / np.linalg.norm(q[7:10])
  qs[:, 3:7] /= np.linalg.norm(qs[:, 3:7], axis=1, keepdims=True)
  qs[:, 10:14] /= np.linalg.norm(qs[:, 10:14], axis=1, keepdims=True)
  m = flexor.load_mjcf_string(xml)
  errors = match_contacts(mujoco.MjModel.from_xml_string(xml),
                          batched_collision(m)(jnp.asarray(qs)), qs, "balloons")
  assert len(errors) >= 50
  assert all(err < 1e-9 for _, err in errors), [err for _, err in errors if err >= 1e-9]


def test_convex_pairs_can_be_left_out():
  with warnings.catch_warnings():
    warnings.simplefilter("error")
    assert flexor.load_mjcf_string(_xml("ellipsoid", "ellipsoid")).ncollision == 1
  with pytest.warns(UserWarning, match="convex=False"):
    m = flexor.load_mjcf_string(_xml("ellipsoid", "ellipsoid"), convex=False)
  assert m.ncollision == 0


def test_sphere_mesh_matches_mujoco():
  """The shrunk-sphere GJK (shallow contacts) and EPA on the full sphere (deep ones)."""
  assert _compare("sphere", "mesh", 24, margin=0.01) >= 12


@pytest.mark.slow
@pytest.mark.parametrize("margin", [0.0, 0.02])
@pytest.mark.parametrize("pair", ["sphere-ellipsoid", "capsule-ellipsoid", "ellipsoid-ellipsoid",
                                  "ellipsoid-cylinder", "ellipsoid-box", "sphere-mesh",
                                  "ellipsoid-mesh"])
def test_every_convex_pair_matches_mujoco(pair, margin):
  a, b = pair.split("-")
  assert _compare(a, b, 60, margin=margin, seed=1) >= 20


_MULTI = ["capsule-cylinder", "cylinder-cylinder", "cylinder-box", "capsule-mesh", "cylinder-mesh",
          "box-mesh", "mesh-mesh"]


def test_mesh_pair_without_multiccd_matches_mujoco():
  """A mesh against a mesh, where the model disables multiccd: MuJoCo's one GJK/EPA contact."""
  assert _compare("mesh", "mesh", 24, margin=0.01, flag=_SINGLE) >= 12


@pytest.mark.slow
@pytest.mark.parametrize("margin", [0.0, 0.02])
@pytest.mark.parametrize("pair", _MULTI)
def test_every_pair_without_multiccd_matches_mujoco(pair, margin):
  """Shallow contacts on a cylinder's curved side come from GJK on the capsule's segment: the
  distance is stationary in the witness point there, so where round-off steers GJK's last
  iterates the distance still agrees to 1e-12 but the point only to ~1e-7, and fewer contacts
  agree to 1e-9."""
  a, b = pair.split("-")
  assert _compare(a, b, 60, margin=margin, seed=1, flag=_SINGLE, dist_tol=1e-6,
                  exact_share=0.8) >= 20


_TOUCHING = """<mujoco>
  <asset><mesh name="cube" vertex="-1 -1 -1 1 -1 -1 1 1 -1 1 1 1 1 -1 1 -1 1 -1 -1 1 1 -1 -1 1"
               scale=".05 .05 .05"/></asset>
  <worldbody>
    <body pos="-.4 .4 .1"><freejoint/><geom type="mesh" mesh="cube"/></body>
    <body pos="-.5 .4 .1"><freejoint/><geom type="mesh" mesh="cube"/></body>
    <body pos="-.5 .5 .1"><freejoint/><geom type="mesh" mesh="cube"/></body>
    <body pos="-.4 .4 .2"><freejoint/><geom type="box" size=".05 .05 .05"/></body>
  </worldbody>
</mujoco>"""


def test_touching_polytopes_match_mujoco():
  """Cubes placed side by side, face on face and edge on edge, as stacking scenes start (MuJoCo's
  stacked_boxes.xml): their float32 vertices overlap by 1.5e-9 m, and GJK's first support point
  can lie that close to the origin. Between polytopes without a margin MuJoCo runs GJK on to the
  exact nearest point (a simplex that holds the origin) and EPA finds the contact; stopping
  within ccd_tolerance there left these pairs without a contact.

  Each pair's contacts agree as a set (a box's face polygon may start from another corner). Two
  cubes meeting edge on edge (geoms 0 and 2) are as deep along x as along y: EPA's nearest face
  is a tie, and MuJoCo's support searches, which start from the vertex they last found, end on
  the other face than flexor's."""
  mj = mujoco.MjModel.from_xml_string(_TOUCHING)
  md = mujoco.MjData(mj)
  mujoco.mj_forward(mj, md)
  assert md.ncon == 24
  d = batched_collision(from_mujoco(mj))(jnp.asarray(md.qpos[None]))
  exist = np.asarray(d.contact_exist[0])
  assert exist.sum() == md.ncon
  ours = {k: np.asarray(getattr(d, f"contact_{k}")[0])[exist] for k in ("geom", "dist", "pos",
                                                                        "frame")}
  theirs = {k: np.array([getattr(c, k) for c in md.contact[:md.ncon]]) for k in ours}
  for pair in {tuple(g) for g in theirs["geom"].tolist()}:
    mine = (ours["geom"] == pair).all(axis=1)
    ref = (theirs["geom"] == pair).all(axis=1)
    assert mine.sum() == ref.sum() == 4, pair
    np.testing.assert_allclose(ours["dist"][mine], theirs["dist"][ref], atol=1e-12)
    order = lambda p: p[np.lexsort(p.T)]
    np.testing.assert_allclose(order(ours["pos"][mine]), order(theirs["pos"][ref]), atol=1e-9)
    if pair != (0, 2):
      np.testing.assert_allclose(ours["frame"][mine].reshape(4, 9)[:, :3],
                                 theirs["frame"][ref][:, :3], atol=1e-9)


def test_gradient_of_depth_matches_finite_differences():
  """d(contact dist)/d(qpos) of an ellipsoid pressed into another against central differences.

  The gradient is that of the final EPA face with its support directions held fixed; with
  ccd_tolerance 1e-13 that face lies on both surfaces and the gradient is the depth's. (At the
  default 1e-6 the face's normal is MuJoCo's, off the true one by up to ~1e-3, and so is the
  gradient.)"""
  m = flexor.load_mjcf_string(_xml("ellipsoid", "ellipsoid",
                                   option='ccd_tolerance="1e-13" ccd_iterations="120"'))

  def depth(q):
    d = flexor.kinematics.kinematics(m, flexor.make_data(m).replace(qpos=q))
    c = flexor.collision.collision(m, d)
    return c.contact_dist[0], c.contact_exist[0]
  f = jax.jit(depth)
  for qpos in _poses(40, 0):
    dist, exist = f(jnp.asarray(qpos))
    if bool(exist) and dist < -0.01:
      break
  g = np.asarray(jax.jit(jax.grad(lambda q: depth(q)[0]))(jnp.asarray(qpos)))
  assert np.all(np.isfinite(g))
  eps = 1e-5
  for k in (0, 1, 2, 4, 7, 8, 9, 11, 13):  # body translations and quaternion components
    dq = np.zeros(14)
    dq[k] = eps
    fd = (f(jnp.asarray(qpos + dq))[0] - f(jnp.asarray(qpos - dq))[0]) / (2 * eps)
    assert abs(fd - g[k]) < 1e-6 * max(1.0, abs(fd)), (k, fd, g[k])


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float64])
def test_gradient_finite_where_the_search_finds_nothing(dtype):
  """A search that found nothing (path 0) may end on a degenerate simplex, as it does in
  float32 for dm_control's finger: two cylinders side by side, the simplex one support point
  twice and the origin. Nothing reads that contact, and its derivatives must stay finite: a
  NaN there reached every world's rollout gradient."""
  from flexor import collision_convex as cc
  from flexor.types import GeomType
  kinds = ((int(GeomType.CYLINDER),), (int(GeomType.CYLINDER),))
  axis_y = jnp.array([[1.0, 0, 0], [0, 0, -1], [0, 1, 0]], dtype)  # the cylinders along y
  pos1, pos2 = jnp.array([-0.2, 0, 0.4], dtype), jnp.array([0.2, 0, 0.4], dtype)
  size1, size2 = jnp.array([0.034, 0.033, 0], dtype), jnp.array([0.02, 0.045, 0], dtype)
  geom = lambda pos, mat, size: cc._geom(GeomType.CYLINDER, pos, mat, size,
                                         jnp.zeros((), dtype), 0)
  vertex = cc._support(geom(pos1, axis_y, size1), geom(pos2, axis_y, size2), kinds)(
      jnp.array([1.0, 0, 0], dtype))
  found = cc._Witness(path=jnp.array(0), verts=jnp.zeros((4, 4, 3), dtype).at[1:3].set(vertex),
                      n=jnp.array(3), center=jnp.zeros(3, dtype))

  def contact(pos1, mat1, pos2, mat2):
    hit, dist, x1, x2 = cc._ccd(geom(pos1, mat1, size1), geom(pos2, mat2, size2), kinds, found)
    return dist + jnp.sum(x1) + jnp.sum(x2), hit

  args = (pos1, axis_y, pos2, axis_y)
  assert not bool(contact(*args)[1])
  # compiled as users compile it: under the suite's cheapest optimisation level the rounding
  # differs and these derivatives came out finite even before the fix
  optimised = {"xla_backend_optimization_level": 3, "xla_llvm_disable_expensive_passes": False,
               "xla_cpu_use_fusion_emitters": True}
  grads = jax.jit(jax.grad(lambda *a: contact(*a)[0], argnums=(0, 1, 2, 3)),
                  compiler_options=optimised)(*args)
  for grad in grads:
    assert np.all(np.isfinite(np.asarray(grad)))


def test_mixed_convex_pairs_share_one_kernel():
  """An ellipsoid, a sphere and a mesh: three convex type pairs (sphere-ellipsoid, sphere-mesh,
  ellipsoid-mesh), collided by one kernel whose support functions pick the geom type per pair,
  against MuJoCo at random poses of three close free bodies."""
  xml = f"""<mujoco><asset><mesh name="prism" vertex="{_PRISM}"/></asset>
  <option gravity="0 0 0"/><default><geom margin="0.01"/></default>
  <worldbody><body><freejoint/>{_GEOMS["ellipsoid"]}</body>
  <body><freejoint/>{_GEOMS["sphere"]}</body>
  <body><freejoint/>{_GEOMS["mesh"]}</body></worldbody></mujoco>"""
  m = flexor.load_mjcf_string(xml)
  assert m.ncollision == 3
  rng = np.random.default_rng(2)
  qs = np.concatenate([_poses(16, 3), _poses(16, 4)[:, 7:]], axis=1)
  qs[:, 14:17] = rng.uniform(-0.12, 0.12, size=(16, 3))
  errors = match_contacts(mujoco.MjModel.from_xml_string(xml),
                          batched_collision(m)(jnp.asarray(qs)), qs, "mixed")
  assert len(errors) >= 12


def test_float32_contacts_agree_to_float32_accuracy():
  """A float32 model (the RL setting): the same contacts as MuJoCo's float64 ones, within what
  float32 round-off and ccd_tolerance leave open."""
  xml = _xml("ellipsoid", "ellipsoid")
  m = flexor.load_mjcf_string(xml, dtype=jnp.float32)
  qs = _poses(24, 0)
  d = batched_collision(m)(jnp.asarray(qs, jnp.float32))
  assert d.contact_dist.dtype == jnp.float32
  errors = match_contacts(mujoco.MjModel.from_xml_string(xml), d, qs, "float32", dist_tol=1e-4,
                          frame=False)
  assert len(errors) >= 12
