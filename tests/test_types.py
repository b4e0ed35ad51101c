"""Model/Data pytrees: static structure hashed by content, traced parameters, make_data."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest

import support
from flexor import make_data
from flexor.mjcf.from_mujoco import from_mujoco
from flexor.types import DisableBit, EnableBit, GeomType, IntegratorType, JointType, Model


@pytest.fixture(scope="module")
def mj_humanoid():
  return mujoco.MjModel.from_xml_path(support.model_paths()["dmc/humanoid"])


def test_enums_equal_mujocos():
  for ours, theirs, prefix in ((JointType, mujoco.mjtJoint, "mjJNT_"),
                               (GeomType, mujoco.mjtGeom, "mjGEOM_"),
                               (IntegratorType, mujoco.mjtIntegrator, "mjINT_"),
                               (DisableBit, mujoco.mjtDisableBit, "mjDSBL_"),
                               (EnableBit, mujoco.mjtEnableBit, "mjENBL_")):
    for member in ours:
      assert int(member) == int(getattr(theirs, prefix + member.name)), member


def test_static_fields_are_not_leaves(mj_humanoid):
  m = from_mujoco(mj_humanoid)
  leaves = jax.tree_util.tree_leaves(m)
  assert all(isinstance(x, jax.Array) for x in leaves)
  assert any(x is m.body_mass for x in leaves)
  assert isinstance(m.body_parentid, np.ndarray) and not m.body_parentid.flags.writeable


def test_equal_structure_shares_one_compilation(mj_humanoid):
  a, b = from_mujoco(mj_humanoid), from_mujoco(mj_humanoid)
  assert jax.tree_util.tree_structure(a) == jax.tree_util.tree_structure(b)
  f = jax.jit(lambda m: jnp.sum(m.body_mass) * m.opt.timestep)
  f(a)
  f(b.replace(body_mass=b.body_mass * 2))
  assert f._cache_size() == 1


def test_different_structure_differs(mj_humanoid):
  a = from_mujoco(mj_humanoid)
  flipped = a.body_parentid.copy()
  flipped[-1] = 0
  b = a.replace(body_parentid=flipped)
  assert jax.tree_util.tree_structure(a) != jax.tree_util.tree_structure(b)
  opt = a.replace(opt=a.opt.replace(integrator=int(IntegratorType.RK4)))
  assert jax.tree_util.tree_structure(a) != jax.tree_util.tree_structure(opt)


def test_vmap_over_model_parameters(mj_humanoid):
  m = from_mujoco(mj_humanoid)
  batched = jax.tree.map(lambda x: jnp.stack([x, 2 * x]), m)
  total = jax.vmap(lambda mm: jnp.sum(mm.body_mass))(batched)
  np.testing.assert_allclose(total, [np.sum(m.body_mass), 2 * np.sum(m.body_mass)])


def test_make_data_shapes_and_dtypes(mj_humanoid):
  m = from_mujoco(mj_humanoid)
  d = make_data(m, batch_shape=(3,))
  assert d.qpos.shape == (3, m.nq) and d.qM.shape == (3, m.nv, m.nv)
  assert d.xmat.shape == (3, m.nbody, 3, 3)
  np.testing.assert_array_equal(d.qpos[1], m.qpos0)
  assert all(not getattr(x, "weak_type", False) for x in jax.tree_util.tree_leaves(d))
  assert d.qpos.dtype == jnp.float64


def test_make_data_from_keyframe():
  m = mujoco.MjModel.from_xml_string("""
    <mujoco><worldbody><body><joint name="j"/><geom size=".1"/></body></worldbody>
      <keyframe><key name="up" time="1.5" qpos="0.7" qvel="-2"/></keyframe></mujoco>""")
  fm = from_mujoco(m)
  d = make_data(fm, key="up")
  assert float(d.time) == 1.5 and float(d.qpos[0]) == 0.7 and float(d.qvel[0]) == -2
  with pytest.raises(KeyError, match="no key named 'down'"):
    make_data(fm, key="down")


def test_float32_model(mj_humanoid):
  m = from_mujoco(mj_humanoid, dtype=jnp.float32)
  assert m.body_mass.dtype == jnp.float32 and m.opt.timestep.dtype == jnp.float32
  assert make_data(m).qpos.dtype == jnp.float32


def test_model_fields_follow_mujoco_names(mj_humanoid):
  for name in Model._traced + Model._static:
    # flexor's static tables (tree masks, actuator slots, collision candidates, row layout,
    # plane-mesh contact vertices, the convex hull rows, contact capacities, the ellipsoid
    # fluid model's geoms, the free-standing bodies of implicitfast)
    if name.startswith(("names_", "opt", "collision_", "efc_row", "hull_")) or name in (
        "body_depth", "body_jump", "body_subtree", "body_dof", "dof_ancestor", "dof_cdofdot",
        "jnt_slot", "actuator_actslot", "actuator_wrap", "ncollision", "mesh_polyquad",
        "mesh_hulladr", "mesh_hullstart", "mesh_polyloop", "nconslot", "size_nconmax",
        "max_geom_pairs", "geom_fluidellipsoid", "body_freestanding"):
      continue
    if name.startswith("stat_"):
      assert hasattr(mj_humanoid.stat, name[len("stat_"):]), name
      continue
    assert hasattr(mj_humanoid, name), name
