"""MuJoCo 4's multi-contact search (flexor.collision_multi) against MuJoCo 4.0.0 in float64: the
pairs of capsules, cylinders, boxes and meshes (contact_pairs.MULTI) resting on each other, face
on face, edge on face and corner on face, with and without a margin; a box settling on a mesh
slab for 150 steps; and the contacts' derivatives against central finite differences."""

from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest

import flexor
from flexor.mjcf import contact_pairs
from flexor.mjcf.from_mujoco import from_mujoco
from support import batched_collision

_CUBE = " ".join(f"{x} {y} {z}" for x in (-1, 1) for y in (-1, 1) for z in (-1, 1))
_HEX = " ".join(f"{np.cos(a):.6f} {np.sin(a):.6f} {z}"
                for a in np.arange(6) * np.pi / 3 for z in (0.0, 0.6))
_GEOMS = {
    "capsule": '<geom type="capsule" size="0.05 0.1"/>',
    "cylinder": '<geom type="cylinder" size="0.08 0.07"/>',
    "box": '<geom type="box" size="0.1 0.08 0.06"/>',
    "mesh": '<geom type="mesh" mesh="cube"/>',
    "prism": '<geom type="mesh" mesh="hex"/>',
}


def _xml(a: str, b: str, margin: float = 0.0) -> str:
  return f"""<mujoco>
  <asset><mesh name="cube" vertex="{_CUBE}" scale=".1 .1 .1"/>
         <mesh name="hex" vertex="{_HEX}" scale=".1 .1 .1"/></asset>
  <option gravity="0 0 0"/>
  <default><geom margin="{margin}"/></default>
  <worldbody><body><freejoint/>{_GEOMS[a]}</body>
  <body pos="0 0 0.5"><freejoint/>{_GEOMS[b]}</body></worldbody></mujoco>"""


def _resting_poses(mj: mujoco.MjModel, n: int, seed: int) -> np.ndarray:
  """(n, 14) qpos: body 2 above body 1, lowered until it touches and pressed 0-10 mm further;
  every other pose nearly upright (faces nearly parallel: the search's face-face case), every
  third with body 1 turned too (edges and corners)."""
  rng = np.random.default_rng(seed)
  d = mujoco.MjData(mj)
  qs = np.zeros((n, 14))
  for i in range(n):
    q = rng.normal(size=4)
    if i % 2 == 0:
      q = np.array([1.0, 0.0, 0.0, 0.0]) + 0.02 * rng.normal(size=4)
    q /= np.linalg.norm(q)
    d.qpos[:7] = [0, 0, 0, *(q if i % 3 == 0 else (1.0, 0.0, 0.0, 0.0))]
    d.qpos[7:14] = [0.02 * rng.normal(), 0.02 * rng.normal(), 0.0, *q]
    low, high = -0.3, 0.6
    for _ in range(40):
      d.qpos[9] = 0.5 * (low + high)
      mujoco.mj_forward(mj, d)
      low, high = (d.qpos[9], high) if d.ncon else (low, d.qpos[9])
    d.qpos[9] = low - 0.01 * rng.uniform()
    qs[i] = d.qpos
  return qs


def _compare(a: str, b: str, n: int, margin: float = 0.0, seed: int = 0,
             compiled: bool = False, poses: list[int] | None = None,
             ties: tuple[int, ...] = ()) -> tuple[int, int, int]:
  """Contacts of both engines at n resting poses: (poses, poses with several contacts, poses
  whose every contact agrees to 1e-9 in dist, pos and frame). Contact counts must agree at
  every pose, and every contact's normal within 1e-4 (where EPA's last face is one of several
  nearly as near, the first contact's normal is MuJoCo's only to within ccd_tolerance).

  The Model comes from MuJoCo's (``from_mujoco``), whose mesh polygons are MuJoCo's, or with
  ``compiled`` from flexor's compiler: its polygons are the same faces, but listed in another
  order and each starting from another vertex (MuJoCo's follow qhull's facets), so a mesh
  face's contacts come in another cyclic order; they are then matched as sets. ``poses``
  keeps those of the n poses. ``ties`` (of the poses kept) are poses where EPA's last face is
  one of several within its tolerance (a face lying flat on a face), so which one it ends on,
  MuJoCo's and flexor's alike, turns on the rounding of every operation before it, which XLA
  is free to fuse differently whenever the program around it changes: there the contacts
  must agree in count, in depth to ten times ccd_tolerance and in normal to 1e-2."""
  xml = _xml(a, b, margin)
  mj = mujoco.MjModel.from_xml_string(xml)
  with warnings.catch_warnings():
    warnings.simplefilter("error")  # the pair is collided
    m = flexor.load_mjcf_string(xml) if compiled else from_mujoco(mj)
  assert m.ncollision == 1
  qs = _resting_poses(mj, n, seed)
  qs = qs if poses is None else qs[poses]
  ours = batched_collision(m)(jnp.asarray(qs))
  md = mujoco.MjData(mj)
  several = exact = 0
  for i, q in enumerate(qs):
    md.qpos[:] = q
    mujoco.mj_forward(mj, md)
    keep = np.flatnonzero(np.asarray(ours.contact_exist[i]))
    where = f"{a}-{b} pose {i}"
    assert len(keep) == md.ncon, (where, len(keep), md.ncon)
    dist = np.asarray(ours.contact_dist[i])[keep]
    pos = np.asarray(ours.contact_pos[i])[keep]
    frame = np.asarray(ours.contact_frame[i])[keep].reshape(-1, 9)
    err = 0.0
    for k, c in enumerate(md.contact[:md.ncon]):
      if i in ties:
        np.testing.assert_allclose(dist[k], c.dist, atol=10 * mj.opt.ccd_tolerance,
                                   err_msg=where)
        np.testing.assert_allclose(frame[k, :3], c.frame[:3], atol=1e-2, err_msg=where)
        err = np.inf  # not counted as agreeing
        continue
      np.testing.assert_allclose(frame[k, :3], c.frame[:3], atol=1e-4, err_msg=where)
      gaps = np.maximum(np.maximum(np.abs(dist - c.dist), np.abs(pos - c.pos).max(axis=1)),
                        np.abs(frame - c.frame).max(axis=1))
      err = max(err, gaps.min() if compiled else gaps[k])
    several += md.ncon > 1
    exact += err < 1e-9
  return n, several, exact


def test_box_on_mesh_matches_mujoco():
  """Faces of a box and a mesh cube clipped against each other: where the clipped polygon has
  at most four vertices the contacts are its vertices, and agree to round-off. An edge of one
  geom lying in a face of the other, where no two faces are aligned, gives the clipped edge's
  two ends (MuJoCo tries the first geom's edge, then the second's)."""
  n, several, exact = _compare("box", "mesh", 30)
  assert several >= 10 and exact >= 0.9 * n, (several, exact)


def test_compiled_meshes_give_the_same_contacts():
  """flexor's compiled mesh polygons list the same faces as MuJoCo's in another order: the
  same contacts, except where faces tie (an edge between two faces equally aligned) or the
  clipped hexagon keeps four of its vertices starting from another one."""
  n, several, exact = _compare("box", "prism", 30, compiled=True)
  assert several >= 10 and exact >= 0.75 * n, (several, exact)


def test_cylinder_on_box_matches_mujoco():
  """A cylinder's cap (a 16-gon) clipped by a box's face: more than four vertices, of which
  MuJoCo keeps four by polygonQuad's rotating search. On a regular polygon many quadrilaterals
  have the same area to round-off, so the one kept turns on the last bits of the vertices and
  areas, which flexor rounds as MuJoCo's machine code does (no fused multiply-adds), down to
  the geom frames from their quaternions. 29 of the 30 poses agree to 1e-9; the other keeps
  the count, the normal and the first contact (not traced)."""
  n, several, exact = _compare("cylinder", "box", 30, margin=0.01)
  assert several >= 10 and exact >= 0.95 * n, (several, exact)


@pytest.mark.parametrize("other, poses", [("box", [15, 45, 51]), ("mesh", [15, 45])])
def test_cylinder_side_on_a_face_matches_mujoco(other, poses):
  """A cylinder lying on a face, its side matched with the face: MuJoCo clips the side line
  deepest along the face's normal, not the line through GJK/EPA's point, which at these poses
  clipped to two contacts where MuJoCo finds one. The counts agree at every pose, and all
  but one contact to 1e-9: where the single contact is one point of a face lying on a face,
  which point GJK/EPA ends on turns on rounding (pose 15, a tie: see ``_compare``)."""
  n, _, exact = _compare("cylinder", other, 60, seed=1, poses=poses, ties=(0,))
  assert exact >= len(poses) - 1, exact


def test_capsule_on_mesh_matches_mujoco():
  """A capsule's segment lying in a mesh face: the two ends of its clipped overlap."""
  n, several, exact = _compare("capsule", "prism", 30)
  assert exact >= 0.8 * n, (several, exact)


@pytest.mark.slow
@pytest.mark.parametrize("margin", [0.0, 0.01])
@pytest.mark.parametrize("pair", ["capsule-cylinder", "cylinder-cylinder", "cylinder-box",
                                  "capsule-mesh", "cylinder-mesh", "box-mesh", "mesh-prism",
                                  "box-prism"])
def test_every_multi_pair_matches_mujoco(pair, margin):
  n, several, exact = _compare(*pair.split("-"), 60, margin=margin, seed=1)
  assert exact >= 0.6 * n, (several, exact)


def test_slots_follow_the_search():
  """A MULTI pair gets four contact slots (two with a capsule), one where multiccd is off."""
  for pair, slots in (("box-mesh", 4), ("cylinder-cylinder", 4), ("capsule-mesh", 2)):
    m = flexor.load_mjcf_string(_xml(*pair.split("-")))
    assert m.collision_connum.tolist() == [slots], pair
    single = _xml(*pair.split("-")).replace('<option gravity="0 0 0"/>',
                                           '<option gravity="0 0 0"><flag multiccd="disable"/>'
                                           '</option>')
    assert flexor.load_mjcf_string(single).collision_connum.tolist() == [1], pair
  assert all(contact_pairs.max_contacts(a, b, multiccd=True) in (2, 4)
             for a, b in contact_pairs.MULTI)


_SLAB = f"""<mujoco>
  <asset><mesh name="slab" vertex="{_CUBE}" scale=".5 .5 .05"/></asset>
  <option timestep="0.002"/>
  <worldbody>
    <body pos="0 0 0"><freejoint/><geom type="mesh" mesh="slab" density="300"/></body>
    <body pos="0.05 -0.03 0.16" euler="4 -3 20"><freejoint/>
      <geom type="box" size="0.06 0.05 0.04"/></body>
    <geom type="plane" size="2 2 0.1" pos="0 0 -0.05"/>
  </worldbody>
</mujoco>"""


def test_box_settling_on_a_mesh_slab_follows_mujoco():
  """A tilted box falls onto a mesh slab lying on the floor and settles on four corners: 150
  steps, contact counts equal at every step, qpos within 1e-8 (MuJoCo's mesh tables: the slab's
  face lies flat on the floor, where the plane-mesh contacts depend on qhull's order)."""
  mj = mujoco.MjModel.from_xml_string(_SLAB)
  m = from_mujoco(mj)
  md = mujoco.MjData(mj)
  step = jax.jit(lambda d: flexor.step(m, d))
  d = flexor.make_data(m)
  counts = set()
  for t in range(150):
    d = step(d)
    mujoco.mj_step(mj, md)
    assert int(d.ncon) == md.ncon, (t, int(d.ncon), md.ncon)
    counts.add(md.ncon)
    np.testing.assert_allclose(np.asarray(d.qpos), md.qpos, atol=1e-8, err_msg=f"step {t}")
  assert max(counts) >= 8  # the box's four corners and the slab's on the floor


_PRESS = f"""<mujoco>
  <asset><mesh name="cube" vertex="{_CUBE}" scale=".05 .05 .05"/></asset>
  <option gravity="0 0 0"/>
  <worldbody><body><freejoint/>{{}}</body>
  <body><freejoint/><geom type="mesh" mesh="cube"/></body></worldbody></mujoco>"""


@pytest.mark.parametrize("geom, qpos", [
    # a mesh cube tilted on a wide box: its four bottom corners, each at its own depth
    pytest.param('<geom type="box" size="0.15 0.15 0.06"/>',
                 [0, 0, 0, 1, 0, 0, 0, 0.01, -0.02, 0.107, 1, 0.01, -0.008, 0.01],
                 marks=pytest.mark.slow),
    # a tilted capsule lying across the cube's bottom face: the two ends of its overlap
    ('<geom type="capsule" size="0.02 0.1"/>',
     [0, 0, 0, 0.7, 0.01, 0.714, 0.0, 0.01, 0.005, 0.068, 1, 0, 0, 0.1]),
], ids=["box-mesh", "capsule-mesh"])
def test_contact_derivatives_match_finite_differences(geom, qpos):
  """d(contact dist, pos)/d(qpos) of every contact against central differences. The loss
  treats the contacts alike: which end of a clipped edge comes first turns on round-off where
  the clipped polygon repeats a point, as in MuJoCo."""
  m = flexor.load_mjcf_string(_PRESS.format(geom))
  w = jnp.asarray(np.random.default_rng(0).normal(size=3))

  def contacts(q):
    d = flexor.kinematics.kinematics(m, flexor.make_data(m).replace(qpos=q))
    return flexor.collision.collision(m, d)

  def loss(q):
    d = contacts(q)
    on = d.contact_exist.astype(q.dtype)
    pos = d.contact_pos
    return jnp.sum(on * (d.contact_dist + pos @ w + 10.0 * jnp.sum(pos * pos, axis=-1))), d.ncon

  q = jnp.asarray(qpos, jnp.float64)
  grad, ncon = jax.jit(jax.grad(loss, has_aux=True))(q)
  assert int(ncon) == int(m.collision_connum[0])  # every slot touches
  f = jax.jit(lambda q: loss(q)[0])
  eps = 1e-6
  fd = np.array([(f(q.at[i].add(eps)) - f(q.at[i].add(-eps))) / (2 * eps) for i in range(14)])
  np.testing.assert_allclose(grad, fd, rtol=1e-6, atol=1e-8)
