"""Ray casting (flexor.ray) against MuJoCo's mj_ray: every geom type, body exclusion, geom
groups, static geoms, transparency; jit, vmap and gradients."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest

import flexor
import support
from flexor import kinematics, ray
from flexor.types import GeomType

TOL = 1e-10

_SCENE = """
<mujoco>
  <asset>
    <mesh name="cube" scale=".3 .2 .25"
          vertex="-1 -1 -1  1 -1 -1  -1 1 -1  1 1 -1  -1 -1 1  1 -1 1  -1 1 1  1 1 1"
          face="0 2 1  1 2 3  4 5 6  5 7 6  0 1 4  1 5 4
                2 6 3  3 6 7  0 4 2  2 4 6  1 3 5  3 7 5"/>
    <mesh name="tetra" vertex="0 0 0  1 0 0  0 1 0  0 0 1" scale=".4 .4 .4"/>
    <hfield name="terrain" nrow="5" ncol="7" size="1.5 1 .4 .2"
            elevation="0 .1 .2 .3 .4 .5 .6  1 .9 .8 .7 .6 .5 .4  0 .3 .6 .9 .2 .5 .8
                       .1 .1 .1 .1 .9 .9 .9  .3 .3 .3 .3 .3 .3 .3"/>
    <material name="invisible" rgba="1 1 1 0"/>
    <material name="tinted" rgba="1 0 0 .5"/>
  </asset>
  <worldbody>
    <geom type="plane" size="3 3 .1" pos="0 0 -1" group="2"/>
    <geom type="hfield" hfield="terrain" pos="0 3 -.5" euler="5 -3 20"/>
    <body pos=".1 .2 .3">
      <freejoint/>
      <geom type="sphere" size=".3" pos="1 0 0" group="1"/>
      <geom type="capsule" size=".2 .4" pos="-1 0 0" euler="30 40 0"/>
      <geom type="ellipsoid" size=".3 .2 .4" pos="0 1 0" euler="10 20 30"/>
      <geom type="cylinder" size=".25 .3" pos="0 -1 0" euler="-20 50 10"/>
      <geom type="box" size=".2 .3 .4" pos="0 0 1" euler="15 25 35" material="tinted"/>
      <geom type="box" size=".2 .3 .4" material="invisible"/>
      <geom type="sphere" size=".3" pos="2 2 0" rgba="1 1 1 0"/>
      <geom type="mesh" mesh="cube" pos="1 1 1" euler="5 6 7"/>
      <geom type="mesh" mesh="tetra" pos="-1 -1 1" euler="50 60 70"/>
    </body>
    <body>
      <joint type="hinge"/>
      <geom size=".1" pos="3 0 0"/>
    </body>
  </worldbody>
</mujoco>
"""


@functools.cache
def _models():
  return mujoco.MjModel.from_xml_string(_SCENE), flexor.load_mjcf_string(_SCENE)


def _poses(n: int, seed: int = 0) -> np.ndarray:
  """Random qpos (n, nq): the free body near its rest pose, turned at random."""
  mj, _ = _models()
  rng = np.random.default_rng(seed)
  qpos = np.tile(mj.qpos0, (n, 1))
  qpos[:, :3] += 0.3 * rng.standard_normal((n, 3))
  quat = rng.standard_normal((n, 4))
  qpos[:, 3:7] = quat / np.linalg.norm(quat, axis=1, keepdims=True)
  qpos[:, 7] = rng.uniform(-3, 3, n)
  return qpos


def _rays(n: int, target: np.ndarray, spread: np.ndarray, seed: int):
  """n rays from random points toward random points around ``target``; the first third have
  unit direction vectors, the rest are in units of the segment."""
  rng = np.random.default_rng(seed)
  pnt = 2.0 * rng.standard_normal((n, 3))
  vec = target + spread * rng.standard_normal((n, 3)) - pnt
  vec[:n // 3] /= np.linalg.norm(vec[:n // 3], axis=1, keepdims=True)
  return pnt, vec


def _kinematics(fm, qpos: np.ndarray):
  return kinematics.kinematics(fm, flexor.make_data(fm).replace(qpos=jnp.asarray(qpos)))


_rays_jit = jax.jit(ray.rays, static_argnames=("geomgroup", "flg_static"))


def _mujoco_rays(mj, md, pnt, vec, bodyexclude, geomgroup=None, flg_static=True):
  out = []
  group = None if geomgroup is None else np.asarray(geomgroup, np.uint8)
  for p, v, b in zip(pnt, vec, bodyexclude):
    geomid, normal = np.array([-1], np.int32), np.zeros(3)
    dist = mujoco.mj_ray(mj, md, p, v, group, int(flg_static), int(b), geomid, normal)
    out.append((dist, geomid[0], normal))
  return (np.array([o[0] for o in out]), np.array([o[1] for o in out]),
          np.stack([o[2] for o in out]))


def _check(mj, fm, qpos, pnt, vec, bodyexclude, geomgroup=None, flg_static=True) -> np.ndarray:
  """Compares flexor's and MuJoCo's rays at qpos; returns MuJoCo's geom ids."""
  md = mujoco.MjData(mj)
  md.qpos[:] = qpos
  mujoco.mj_kinematics(mj, md)
  dist, geomid, normal = _mujoco_rays(mj, md, pnt, vec, bodyexclude, geomgroup, flg_static)
  ours = _rays_jit(fm, _kinematics(fm, qpos), jnp.asarray(pnt), jnp.asarray(vec),
                   jnp.asarray(bodyexclude), geomgroup=geomgroup, flg_static=flg_static)
  np.testing.assert_array_equal(np.asarray(ours[1]), geomid)
  np.testing.assert_allclose(np.asarray(ours[0]), dist, rtol=TOL, atol=TOL)
  np.testing.assert_allclose(np.asarray(ours[2]), normal, rtol=TOL, atol=TOL)
  return geomid


def test_rays_match_mujoco():
  """Distances, geoms and normals of random rays toward the body and toward the height field,
  with random bodies excluded: every visible geom type is hit, transparent geoms never."""
  mj, fm = _models()
  hit = []
  for k, qpos in enumerate(_poses(3)):
    md = mujoco.MjData(mj)
    md.qpos[:] = qpos
    mujoco.mj_kinematics(mj, md)
    for target, spread in ((md.xpos[1], 1.5), (md.geom_xpos[1], np.array([1.2, .8, .3]))):
      pnt, vec = _rays(120, target, spread, seed=k)
      bodyexclude = np.random.default_rng(k).integers(-1, 3, len(pnt))
      hit.append(_check(mj, fm, qpos, pnt, vec, bodyexclude))
  hit = np.concatenate(hit)
  types = set(mj.geom_type[hit[hit >= 0]].tolist())
  assert types == {int(t) for t in (GeomType.PLANE, GeomType.HFIELD, GeomType.SPHERE,
                                    GeomType.CAPSULE, GeomType.ELLIPSOID, GeomType.CYLINDER,
                                    GeomType.BOX, GeomType.MESH)}
  transparent = [i for i in range(mj.ngeom) if mj.geom_rgba[i, 3] == 0 or (
      mj.geom_matid[i] >= 0 and mj.mat_rgba[mj.geom_matid[i], 3] == 0)]
  assert len(transparent) == 2 and not np.isin(hit, transparent).any()
  assert np.count_nonzero(hit < 0) > 10


@pytest.mark.parametrize("geomgroup,flg_static", [((1, 0, 1, 1, 1, 1), True),
                                                  ((1, 1, 0, 1, 1, 1), False)])
def test_geom_groups_and_static_geoms(geomgroup, flg_static):
  """mjvOption-style geom group flags and flg_static as MuJoCo applies them (the sphere is in
  group 1, the plane in group 2, the plane and the height field are static)."""
  mj, fm = _models()
  qpos = _poses(1, seed=3)[0]
  pnt, vec = _rays(90, np.array([0.5, 1.0, -0.3]), 1.5, seed=5)
  _check(mj, fm, qpos, pnt, vec, np.full(len(pnt), -1), geomgroup, flg_static)


def test_vmap_over_worlds_and_jit():
  """A batch of worlds under vmap equals each world alone."""
  _, fm = _models()
  qpos = _poses(4, seed=7)
  pnt, vec = jnp.asarray([0.0, 0.0, 3.0]), jnp.asarray([0.1, 0.2, -1.0])
  cast = lambda q: ray.ray(fm, _kinematics(fm, q), pnt, vec)
  batched, single = jax.jit(jax.vmap(cast))(jnp.asarray(qpos)), jax.jit(cast)
  for i, q in enumerate(qpos):
    alone = single(jnp.asarray(q))
    for a, b in zip(batched, alone):
      np.testing.assert_allclose(np.asarray(a)[i], np.asarray(b), rtol=1e-12, atol=1e-12)


def test_distance_gradient_matches_finite_differences():
  """d dist / d (the free body's position, the ray's origin) of rays aimed at a geom of each
  type: sphere, capsule, ellipsoid, cylinder, box, both meshes, and the height field (where
  only the origin moves the hit)."""
  mj, fm = _models()
  geoms = np.array([2, 3, 4, 5, 6, 9, 10, 1])
  md = mujoco.MjData(mj)
  mujoco.mj_kinematics(mj, md)
  target = md.geom_xpos[geoms] + np.array([0.031, -0.017, 0.023])
  pnt0 = target + np.where((geoms == 1)[:, None], [0.05, 0.1, 1.5], [0.4, 0.3, 2.0])
  vec = jnp.asarray(target - pnt0)
  qpos0 = jnp.asarray(mj.qpos0)

  def cast(x, p, v):
    return ray.ray(fm, _kinematics(fm, qpos0.at[:3].add(x[:3])), p + x[3:], v)

  dist = jax.jit(jax.vmap(lambda x, p, v: cast(x, p, v)[0]))
  grad = jax.jit(jax.vmap(jax.grad(lambda x, p, v: cast(x, p, v)[0])))
  x0, pnt0 = jnp.zeros((len(geoms), 6)), jnp.asarray(pnt0)
  hit = jax.jit(jax.vmap(lambda x, p, v: cast(x, p, v)[1]))(x0, pnt0, vec)
  np.testing.assert_array_equal(np.asarray(hit), geoms)
  eps = 1e-6
  fd = np.stack([(dist(x0.at[:, i].set(eps), pnt0, vec) - dist(x0.at[:, i].set(-eps), pnt0, vec))
                 / (2 * eps) for i in range(6)], axis=1)
  g = np.asarray(grad(x0, pnt0, vec))
  assert np.all(np.isfinite(g))
  np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-7)


_CAMERAS = """
<mujoco>
  <worldbody>
    <geom type="plane" size="5 5 0.1"/>
    <geom type="box" size="0.3 0.3 0.3" pos="0.5 0 0.3"/>
    <geom type="sphere" size="0.2" pos="-0.4 0.3 0.2"/>
    <geom type="capsule" size="0.1 0.3" pos="0 -0.5 0.2" euler="0 90 0"/>
    <body name="holder" pos="0 0 0.01">
      <freejoint/>
      <geom size="0.05" pos="0 0 2.3"/>
      <camera name="fovy" pos="0 0 2" euler="20 0 0" resolution="8 6"/>
      <camera name="sensor" pos="0 0 2" resolution="5 4" sensorsize="0.01 0.008"
              focal="0.01 0.012" principal="0.004 0.002"/>
      <camera name="ortho" pos="0 0 2" projection="orthographic" fovy="1.5" resolution="4 3"/>
      <camera name="aimed" mode="targetbody" target="world" pos="1 1 2" resolution="3 3"
              fovy="60"/>
    </body>
  </worldbody>
  <sensor>
    <rangefinder camera="fovy" data="dist dir origin point normal depth"/>
    <rangefinder camera="sensor" data="dir depth"/>
    <rangefinder camera="ortho" data="dist origin normal"/>
    <rangefinder camera="aimed" data="depth"/>
  </sensor>
</mujoco>"""


def test_camera_rangefinders_match_mujoco():
  """Depth images: one ray per pixel of perspective cameras (from fovy, and from a sensor's
  focal length and principal point), an orthographic camera and a camera aimed at a target,
  each ignoring its own body, at random poses of the body carrying them."""
  mj = mujoco.MjModel.from_xml_string(_CAMERAS)
  fm = flexor.load_mjcf_string(_CAMERAS)
  for field in ("objtype", "objid", "dim", "intprm", "needstage"):
    np.testing.assert_array_equal(getattr(fm, f"sensor_{field}"), getattr(mj, f"sensor_{field}"))
  md = mujoco.MjData(mj)
  forward = jax.jit(flexor.forward)
  rng = np.random.default_rng(0)
  misses = 0
  for _ in range(3):
    quat = rng.normal(size=4) * [5, 1, 1, 1]
    md.qpos[:] = np.concatenate([rng.uniform(-0.3, 0.3, 3), quat / np.linalg.norm(quat)])
    mujoco.mj_forward(mj, md)
    d = forward(fm, flexor.make_data(fm).replace(qpos=support.snapshot(md.qpos)))
    np.testing.assert_allclose(d.sensordata, md.sensordata, rtol=TOL, atol=TOL)
    misses += int(np.sum(md.sensordata == -1))
  assert misses > 0  # some pixels see nothing
  f32 = flexor.load_mjcf_string(_CAMERAS, dtype=jnp.float32)  # stays float32 throughout
  jaxpr = jax.make_jaxpr(flexor.forward)(f32, flexor.make_data(f32)).jaxpr
  assert not support.float64_values(jaxpr)


def test_rangefinder_in_a_model_without_geoms_sees_nothing():
  """A model with no geom at all: mj_ray misses (-1, -1, zeros), and so does the sensor."""
  xml = """
  <mujoco>
    <worldbody>
      <body pos="1 0 0">
        <joint axis="0 1 0"/>
        <inertial pos="0 0 1" mass="1" diaginertia="0.01 0.01 0.01"/>
        <site name="rf" pos="0 0 1" zaxis="-1 0.1 0"/>
      </body>
    </worldbody>
    <sensor><rangefinder site="rf" data="dist normal"/></sensor>
  </mujoco>"""
  mj, fm = mujoco.MjModel.from_xml_string(xml), flexor.load_mjcf_string(xml)
  md = mujoco.MjData(mj)
  mujoco.mj_forward(mj, md)
  d = jax.jit(flexor.forward)(fm, flexor.make_data(fm))
  np.testing.assert_array_equal(d.sensordata, md.sensordata)
  dist, geomid, normal = ray.ray(fm, d, jnp.zeros(3), jnp.array([1.0, 0, 0]))
  assert float(dist) == -1 and int(geomid) == -1 and not np.any(normal)
