"""Height fields against MuJoCo 4.0: the compiled elevations (flexor.mjcf.hfield) and
mjc_ConvexHField's contacts (flexor.collision_hfield) of spheres, capsules, ellipsoids,
cylinders, boxes and meshes over a bumpy, turned and shifted field, in float64; trajectories and
a gradient through them."""

from __future__ import annotations

import struct
import warnings

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest

import flexor
from flexor.mjcf.from_mujoco import from_mujoco
from support import batched_collision, match_contacts, snapshot

_NROW, _NCOL = 7, 9
_ELEVATION = " ".join(f"{v:.3f}" for v in np.random.default_rng(0).uniform(0, 1, _NROW * _NCOL))
_BODIES = {
    "sphere": '<geom type="sphere" size="0.15"/>',
    "capsule": '<geom type="capsule" size="0.1 0.2"/>',
    "ellipsoid": '<geom type="ellipsoid" size="0.15 0.1 0.12"/>',
    "cylinder": '<geom type="cylinder" size="0.1 0.12"/>',
}
# polytopes: without a margin their pairs with a prism run EPA's discrete rules
_POLYTOPES = {
    "box": '<geom type="box" size="0.12 0.1 0.08"/>',
    "mesh": '<geom type="mesh" mesh="wedge"/>',
}
_SHAPES = {**_BODIES, **_POLYTOPES}
_WEDGE = '<mesh name="wedge" vertex="0 0 0  .2 0 0  0 .25 0  0 0 .15  .2 .2 .1  -.1 .05 .1"/>'


def _xml(margin: float = 0.0, bodies: tuple[str, ...] = tuple(_BODIES), gravity: str = "0 0 -9.81"
         ) -> str:
  # the bodies collide with the field only (contype 2 & conaffinity 1 is 0)
  free = "".join(f'<body pos="{i} 0 1"><freejoint/>{_SHAPES[b]}</body>'
                 for i, b in enumerate(bodies))
  mesh = _WEDGE if "mesh" in bodies else ""
  return f"""<mujoco><option gravity="{gravity}"/>
  <asset>{mesh}<hfield name="h" nrow="{_NROW}" ncol="{_NCOL}" size="1 .8 .3 .1"
    elevation="{_ELEVATION}"/></asset>
  <default><geom contype="2" conaffinity="1" margin="{margin}"/></default>
  <worldbody><geom type="hfield" hfield="h" pos=".1 -.05 0" euler="5 -3 10" contype="1"/>
  {free}</worldbody></mujoco>"""


def _poses(n: int, nbody: int, seed: int) -> np.ndarray:
  """(n, 7 nbody) qpos: each body over the field, from touching it to sunk in, randomly turned."""
  rng = np.random.default_rng(seed)
  q = np.zeros((n, nbody, 7))
  q[..., 0] = rng.uniform(-1, 1, (n, nbody))
  q[..., 1] = rng.uniform(-0.8, 0.8, (n, nbody))
  q[..., 2] = rng.uniform(0.0, 0.35, (n, nbody))
  q[..., 3:] = rng.normal(size=(n, nbody, 4))
  q[..., 3:] /= np.linalg.norm(q[..., 3:], axis=-1, keepdims=True)
  return q.reshape(n, -1)


def _load(xml: str) -> flexor.Model:
  with warnings.catch_warnings():
    warnings.simplefilter("error")  # every pair is supported
    return flexor.load_mjcf_string(xml)


# With a margin the pairs also make the contacts of penetrating poses: one case in the default tier.
@pytest.mark.parametrize("margin", [pytest.param(0.0, marks=pytest.mark.slow), 0.03])
def test_contacts_match_mujoco(margin):
  """Each prism's contact, in MuJoCo's order (row by row, two prisms per cell), up to 50 a pair.
  Spheres and capsules (a GJK distance between the prism and their centre or segment) agree to
  round-off, ellipsoids (EPA on a curved surface) nearly so. EPA against a cylinder's flat cap
  stops within ccd_tolerance of the face, so a few of its normals differ by up to 3e-3 (measured:
  132 of 141 contacts to round-off without a margin, 212 of 248 with)."""
  xml = _xml(margin)
  m = _load(xml)
  qs = _poses(40, len(_BODIES), seed=1)
  errors = match_contacts(mujoco.MjModel.from_xml_string(xml),
                          batched_collision(m)(jnp.asarray(qs)), qs, f"margin {margin}",
                          dist_tol=1e-6, geom_tol=5e-3)
  assert len(errors) > 700
  by_geom = lambda g: [err for geoms, err in errors if geoms[1] == g]
  assert max(by_geom(1) + by_geom(2)) < 1e-9  # the sphere and the capsule
  assert max(by_geom(3)) < 1e-4
  assert sum(err < 1e-9 for _, err in errors) >= 0.9 * len(errors)


def test_slots_fit_the_subgrid():
  """Slots per pair: two per cell of the widest sub-grid its geom (bounding radius and margin)
  can span; the field's candidates share one kernel."""
  m = _load(_xml(0.03))
  # 2 x 0.15 + 2 x 0.03 m spans 1.44 columns (0.25 m apart) and 1.8 rows (0.2667 m apart)
  np.testing.assert_array_equal(m.collision_window[0], [3, 3])
  np.testing.assert_array_equal(m.collision_connum, 2 * np.prod(m.collision_window, axis=1))


@pytest.mark.parametrize("margin", [0.0, pytest.param(0.03, marks=pytest.mark.slow)])
def test_boxes_and_meshes_match_mujoco(margin):
  """A box and a mesh on the field: each prism's contact, in MuJoCo's order. Without a margin
  EPA stops at the first repeated vertex of the box or the mesh (``collision_hfield``); where
  a face normal is perpendicular to an edge, MuJoCo's last bits pick one end of it and flexor's
  may pick the other (measured: 487 of 504 contacts to round-off, the others in count and
  geoms). With a margin the geoms are not polytopes and every contact agrees (807 of 807)."""
  xml = _xml(margin, tuple(_POLYTOPES))
  m = _load(xml)
  qs = _poses(60, len(_POLYTOPES), seed=1)
  errors = match_contacts(mujoco.MjModel.from_xml_string(xml),
                          batched_collision(m)(jnp.asarray(qs)), qs, f"margin {margin}",
                          dist_tol=np.inf, geom_tol=np.inf)
  assert len(errors) > 400
  exact = sum(err < 1e-9 for _, err in errors)
  assert exact >= (0.95 if margin == 0.0 else 1.0) * len(errors), (exact, len(errors))


def test_falling_bodies_follow_mujoco():
  """A sphere, a capsule and an ellipsoid dropped on the field, 200 steps (0.4 s): they land,
  bounce and roll over the bumps as in MuJoCo."""
  xml = _xml(bodies=("sphere", "capsule", "ellipsoid"))
  m = _load(xml)
  mj = mujoco.MjModel.from_xml_string(xml)
  md = mujoco.MjData(mj)
  md.qpos[:] = _poses(1, 3, seed=2)[0]
  md.qpos[2::7] += 0.3
  md.qvel[:] = np.random.default_rng(3).normal(size=mj.nv)
  d = flexor.make_data(m).replace(qpos=snapshot(md.qpos), qvel=snapshot(md.qvel))
  step = jax.jit(flexor.step)
  touched = 0
  for i in range(200):
    mujoco.mj_step(mj, md)
    d = step(m, d)
    touched = max(touched, md.ncon)
    assert int(d.ncon) == md.ncon, i
    np.testing.assert_allclose(d.qpos, md.qpos, atol=1e-8, err_msg=f"step {i}")
  assert touched >= 3


@pytest.mark.slow
def test_rollout_gradient_matches_finite_differences():
  """d(final height of a ball rolling over the bumps)/d(initial velocity), through 40 steps of
  contact with the field."""
  m = _load(_xml(bodies=("sphere",)))
  q0 = jnp.array([0.0, 0.0, 0.2, 1.0, 0.0, 0.0, 0.0])

  def final(v):
    d = flexor.make_data(m).replace(qpos=q0, qvel=jnp.zeros(6).at[:3].set(v))
    d, _ = jax.lax.scan(lambda d, _: (flexor.step(m, d), None), d, None, length=40)
    return d.qpos[2] + 0.3 * d.qpos[0]

  v = jnp.array([1.0, 0.5, -0.5])
  grad = jax.jit(jax.grad(final))(v)
  f = jax.jit(final)
  eps = 1e-6
  fd = np.array([(f(v.at[i].add(eps)) - f(v.at[i].add(-eps))) / (2 * eps) for i in range(3)])
  assert np.abs(grad).max() > 1e-3
  np.testing.assert_allclose(grad, fd, rtol=1e-5, atol=1e-7)


def _grid_xml(tmp_path, hfield: str) -> str:
  path = tmp_path / "model.xml"
  path.write_text(f"""<mujoco><asset>{hfield}</asset><worldbody>
    <geom type="hfield" hfield="h"/><body pos="0 0 1"><freejoint/><geom size=".1"/></body>
    </worldbody></mujoco>""")
  return str(path)


def _same_as_mujoco(path: str) -> None:
  mj = mujoco.MjModel.from_xml_path(path)
  m = flexor.load_mjcf(path)
  for name in ("hfield_nrow", "hfield_ncol", "hfield_adr"):
    np.testing.assert_array_equal(getattr(m, name), getattr(mj, name), err_msg=name)
  np.testing.assert_array_equal(m.hfield_size, mj.hfield_size)
  # float32 elevations, normalised to [0, 1] in float32, bit for bit
  np.testing.assert_array_equal(np.asarray(m.hfield_data), mj.hfield_data)


def test_inline_elevations_compile_as_mujoco(tmp_path):
  """Rows top first in the XML, bottom first in hfield_data; shifted and scaled to [0, 1]."""
  _same_as_mujoco(_grid_xml(tmp_path, f'<hfield name="h" nrow="{_NROW}" ncol="{_NCOL}" '
                                      f'size="1 .8 .3 .1" elevation="{_ELEVATION}"/>'))
  _same_as_mujoco(_grid_xml(tmp_path, '<hfield name="h" nrow="2" ncol="3" size="1 1 1 1"/>'))


def test_binary_file_compiles_as_mujoco(tmp_path):
  values = np.random.default_rng(4).normal(size=(5, 4)).astype(np.float32)
  (tmp_path / "h.bin").write_bytes(struct.pack("ii", 5, 4) + values.tobytes())
  _same_as_mujoco(_grid_xml(tmp_path, '<hfield name="h" file="h.bin" size="1 1 .5 .1"/>'))


@pytest.mark.parametrize("mode", ["L", "RGB"])
def test_png_file_compiles_as_mujoco(tmp_path, mode):
  """Grey levels, rows top first; a colour image's red channel (lodepng's grey conversion)."""
  image = pytest.importorskip("PIL.Image")
  pixels = np.random.default_rng(5).integers(0, 256, size=(6, 5, 3), dtype=np.uint8)
  image.fromarray(pixels[..., 0] if mode == "L" else pixels).save(tmp_path / "h.png")
  _same_as_mujoco(_grid_xml(tmp_path, '<hfield name="h" file="h.png" size="1 1 .5 .1"/>'))


@pytest.mark.slow
def test_quadruped_on_rough_terrain_follows_mujoco():
  """dm_control's quadruped with its terrain (the escape task's bowl with bumps), random
  controls, 300 steps: its capsule legs, sphere toes and ellipsoid torso on the height field
  (the eyes' cylinder-capsule pairs are left out; they never touch)."""
  from dm_control.suite import quadruped  # pylint: disable=import-outside-toplevel
  xml = quadruped.make_model(floor_size=40, terrain=True, rangefinders=False,
                             walls_and_ball=False)
  mj = mujoco.MjModel.from_xml_string(xml, quadruped.common.ASSETS)
  res = mj.hfield_nrow[0]
  row, col = np.ogrid[-1:1:res * 1j, -1:1:res * 1j]
  bowl = 0.5 - np.cos(2 * np.pi * np.clip(np.hypot(row, col), 0.04, 1)) / 2
  bumps = 0.6 + 0.4 * np.sin(7.0 * row + 1.0) * np.cos(5.0 * col)
  mj.hfield_data[:] = (bowl * bumps).ravel()
  md = mujoco.MjData(mj)
  md.qpos[2] = 0.7  # it falls onto the field (legs dug deep in would make EPA's ties matter)
  with pytest.warns(UserWarning, match="capsule-cylinder"):
    m = from_mujoco(mj)
  d = flexor.make_data(m).replace(qpos=snapshot(md.qpos))
  step = jax.jit(flexor.step)
  rng = np.random.default_rng(0)
  touched = 0
  for i in range(300):
    md.ctrl[:] = rng.uniform(-1, 1, mj.nu)
    mujoco.mj_step(mj, md)
    d = step(m, d.replace(ctrl=snapshot(md.ctrl)))
    touched = max(touched, md.ncon)
    assert int(d.ncon) == md.ncon, i
    np.testing.assert_allclose(d.qpos, md.qpos, atol=1e-5, err_msg=f"step {i}")
  assert touched >= 8
