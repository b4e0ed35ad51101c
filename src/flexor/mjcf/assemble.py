"""Builds a :class:`flexor.types.Model` from per-element arrays (host side, numpy).

The compiler (``flexor.mjcf.compile``) and ``from_mujoco`` both describe a model as a dict of
mjModel-named arrays for the *primary* fields: what the MJCF says after defaults, frames and
inertias are resolved. Everything MuJoCo derives from them (addresses, counts, dof tree, root
and weld ids, subtree masses) and flexor's tree tables are computed here, in one place.
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import numpy as np

from flexor import tree
from flexor.types import JNT_NQ, JNT_NV, JointType, Model, Option

# Defaults of optional primary fields: (trailing shape, fill value) per element.
_ELEMENT_DEFAULTS: dict[str, tuple[str, tuple[int, ...], Any]] = {
    "body_gravcomp": ("nbody", (), 0.0),
    "body_mocapid": ("nbody", (), -1),
    "body_sameframe": ("nbody", (), 0),
    "geom_sameframe": ("ngeom", (), 0),
    "site_sameframe": ("nsite", (), 0),
    "jnt_group": ("njnt", (), 0),
    "jnt_limited": ("njnt", (), 0),
    "jnt_actfrclimited": ("njnt", (), 0),
    "jnt_actgravcomp": ("njnt", (), 0),
    "jnt_solref": ("njnt", (2,), (0.02, 1.0)),
    "jnt_solimp": ("njnt", (5,), (0.9, 0.95, 0.001, 0.5, 2.0)),
    "jnt_stiffness": ("njnt", (), 0.0),
    "jnt_range": ("njnt", (2,), 0.0),
    "jnt_actfrcrange": ("njnt", (2,), 0.0),
    "jnt_margin": ("njnt", (), 0.0),
    "dof_solref": ("nv", (2,), (0.02, 1.0)),
    "dof_solimp": ("nv", (5,), (0.9, 0.95, 0.001, 0.5, 2.0)),
    "dof_frictionloss": ("nv", (), 0.0),
    "dof_armature": ("nv", (), 0.0),
    "dof_damping": ("nv", (), 0.0),
    "geom_contype": ("ngeom", (), 1),
    "geom_conaffinity": ("ngeom", (), 1),
    "geom_condim": ("ngeom", (), 3),
    "geom_dataid": ("ngeom", (), -1),
    "geom_group": ("ngeom", (), 0),
    "geom_priority": ("ngeom", (), 0),
    "geom_solmix": ("ngeom", (), 1.0),
    "geom_solref": ("ngeom", (2,), (0.02, 1.0)),
    "geom_solimp": ("ngeom", (5,), (0.9, 0.95, 0.001, 0.5, 2.0)),
    "geom_rbound": ("ngeom", (), 0.0),
    "geom_friction": ("ngeom", (3,), (1.0, 0.005, 0.0001)),
    "geom_margin": ("ngeom", (), 0.0),
    "geom_gap": ("ngeom", (), 0.0),
    "site_size": ("nsite", (3,), 0.005),
    "actuator_trntype": ("nu", (), 0),
    "actuator_dyntype": ("nu", (), 0),
    "actuator_gaintype": ("nu", (), 0),
    "actuator_biastype": ("nu", (), 0),
    "actuator_trnid": ("nu", (2,), -1),
    "actuator_actadr": ("nu", (), -1),
    "actuator_actnum": ("nu", (), 0),
    "actuator_ctrllimited": ("nu", (), 0),
    "actuator_forcelimited": ("nu", (), 0),
    "actuator_actlimited": ("nu", (), 0),
    "actuator_actearly": ("nu", (), 0),
    "actuator_dynprm": ("nu", (10,), 0.0),
    "actuator_gainprm": ("nu", (10,), 0.0),
    "actuator_biasprm": ("nu", (10,), 0.0),
    "actuator_ctrlrange": ("nu", (2,), 0.0),
    "actuator_forcerange": ("nu", (2,), 0.0),
    "actuator_actrange": ("nu", (2,), 0.0),
    "actuator_gear": ("nu", (6,), 0.0),
    "actuator_cranklength": ("nu", (), 0.0),
    "actuator_lengthrange": ("nu", (2,), 0.0),
    "tendon_num": ("ntendon", (), 0),
    "tendon_adr": ("ntendon", (), 0),
    "tendon_limited": ("ntendon", (), 0),
    "tendon_range": ("ntendon", (2,), 0.0),
    "tendon_stiffness": ("ntendon", (), 0.0),
    "tendon_damping": ("ntendon", (), 0.0),
    "tendon_lengthspring": ("ntendon", (2,), 0.0),
    "eq_type": ("neq", (), 0),
    "eq_obj1id": ("neq", (), -1),
    "eq_obj2id": ("neq", (), -1),
    "eq_active0": ("neq", (), 1),
    "eq_data": ("neq", (12,), 0.0),
    "eq_solref": ("neq", (2,), (0.02, 1.0)),
    "eq_solimp": ("neq", (5,), (0.9, 0.95, 0.001, 0.5, 2.0)),
}

_OPTION_DEFAULTS: dict[str, Any] = dict(
    timestep=0.002, gravity=(0.0, 0.0, -9.81), wind=(0.0, 0.0, 0.0), magnetic=(0.0, -0.5, 0.0),
    density=0.0, viscosity=0.0, impratio=1.0, tolerance=1e-8, o_margin=0.0,
    o_solref=(0.02, 1.0), o_solimp=(0.9, 0.95, 0.001, 0.5, 2.0),
    o_friction=(1.0, 1.0, 0.005, 0.0001, 0.0001),
    integrator=0, cone=0, jacobian=2, solver=2, iterations=100, ls_iterations=50,
    noslip_iterations=0, disableflags=0, enableflags=0)


def _float_dtype(dtype: Any) -> np.dtype:
  """The numpy dtype of traced fields: ``dtype``, else JAX's default float (float64 under x64).

  Casting on the host keeps loading free of per-shape device conversions.
  """
  return np.dtype(dtype) if dtype is not None else np.dtype(jnp.zeros(0).dtype)


def make_option(dtype: Any = None, **values: Any) -> Option:
  """Option with MuJoCo's defaults, overridden by ``values`` (mjOption names)."""
  unknown = set(values) - set(_OPTION_DEFAULTS)
  if unknown:
    raise ValueError(f"unknown option fields {sorted(unknown)}")
  merged = {**_OPTION_DEFAULTS, **values}
  fields = {}
  float_dtype = _float_dtype(dtype)
  for name in Option._traced:
    fields[name] = jnp.asarray(np.asarray(merged[name], dtype=float_dtype))
  for name in Option._static:
    fields[name] = int(merged[name])
  return Option(**fields)


def _dof_tree(body_parentid: np.ndarray, jnt_type: np.ndarray, jnt_bodyid: np.ndarray):
  """MuJoCo's dof numbering: (jnt_qposadr, jnt_dofadr, dof_bodyid, dof_jntid, dof_parentid)."""
  nq_j, nv_j = JNT_NQ[jnt_type], JNT_NV[jnt_type]
  jnt_qposadr = np.concatenate([[0], np.cumsum(nq_j)[:-1]]).astype(np.int32) if len(jnt_type) else np.zeros(0, np.int32)
  jnt_dofadr = np.concatenate([[0], np.cumsum(nv_j)[:-1]]).astype(np.int32) if len(jnt_type) else np.zeros(0, np.int32)
  dof_jntid = np.repeat(np.arange(len(jnt_type)), nv_j).astype(np.int32)
  dof_bodyid = jnt_bodyid[dof_jntid].astype(np.int32) if len(dof_jntid) else np.zeros(0, np.int32)
  nbody = len(body_parentid)
  last_dof = np.full(nbody, -1)   # last dof of each body or of its nearest ancestor with dofs
  dof_parentid = np.full(len(dof_jntid), -1, dtype=np.int32)
  for b in range(1, nbody):
    prev = last_dof[body_parentid[b]]
    for d in np.flatnonzero(dof_bodyid == b):
      dof_parentid[d] = prev
      prev = d
    last_dof[b] = prev
  return jnt_qposadr, jnt_dofadr, dof_bodyid, dof_jntid, dof_parentid


def _count_adr(owner: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
  """(num, adr) of elements grouped by owner id; adr is -1 where num is 0 (as in MuJoCo)."""
  num = np.bincount(owner, minlength=n).astype(np.int32) if len(owner) else np.zeros(n, np.int32)
  first = np.full(n, -1, dtype=np.int32)
  for i in range(len(owner) - 1, -1, -1):
    first[owner[i]] = i
  return num, first


def assemble(fields: dict[str, Any], option: Option | None = None, dtype: Any = None) -> Model:
  """Returns a Model from primary per-element arrays.

  Args:
    fields: mjModel-named arrays. Required: ``body_parentid body_pos body_quat body_ipos
      body_iquat body_mass body_inertia jnt_type jnt_bodyid jnt_pos jnt_axis qpos0 geom_type
      geom_bodyid geom_size geom_pos geom_quat site_bodyid site_pos site_quat``; optional ones take
      MuJoCo's defaults; ``names_*`` and ``key_*`` default to empty.
    option: physics options; MuJoCo's defaults if None.
    dtype: float dtype of the traced fields (default: float64 if x64 is enabled, else float32).
  Returns:
    The Model, with derived addresses, dof tree, subtree masses and tree tables.
  """
  f = {k: (np.asarray(v) if not isinstance(v, tuple) else v) for k, v in fields.items()}
  parent = f["body_parentid"].astype(np.int32)
  jnt_type = f["jnt_type"].astype(np.int32)
  jnt_bodyid = f["jnt_bodyid"].astype(np.int32)
  nbody, njnt = len(parent), len(jnt_type)
  ngeom, nsite = len(f["geom_type"]), len(f["site_bodyid"])
  jnt_qposadr, jnt_dofadr, dof_bodyid, dof_jntid, dof_parentid = _dof_tree(parent, jnt_type, jnt_bodyid)
  nq, nv = int(JNT_NQ[jnt_type].sum()), int(JNT_NV[jnt_type].sum())
  nu = len(f.get("actuator_trntype", ()))
  sizes = dict(nbody=nbody, njnt=njnt, nv=nv, nq=nq, ngeom=ngeom, nsite=nsite, nu=nu,
               ntendon=len(f.get("tendon_num", ())), neq=len(f.get("eq_type", ())))

  rootid = np.arange(nbody, dtype=np.int32)
  for b in range(1, nbody):
    if parent[b] != 0:
      rootid[b] = rootid[parent[b]]
  rootid[0] = 0
  body_jntnum, body_jntadr = _count_adr(jnt_bodyid, nbody)
  body_dofnum, body_dofadr = _count_adr(dof_bodyid, nbody)
  body_geomnum, body_geomadr = _count_adr(f["geom_bodyid"].astype(np.int32), nbody)
  weldid = np.zeros(nbody, dtype=np.int32)
  for b in range(1, nbody):
    weldid[b] = b if body_jntnum[b] else weldid[parent[b]]

  out: dict[str, Any] = {}
  for name, (count, shape, fill) in _ELEMENT_DEFAULTS.items():
    if name in f:
      out[name] = f[name]
    else:
      out[name] = np.broadcast_to(np.asarray(fill), (sizes[count],) + shape).copy()
  for name in ("body_parentid body_pos body_quat body_ipos body_iquat body_mass body_inertia "
               "jnt_type jnt_bodyid jnt_pos jnt_axis qpos0 geom_type geom_bodyid geom_size "
               "geom_pos geom_quat site_bodyid site_pos site_quat").split():
    out[name] = f[name]
  out["qpos_spring"] = f.get("qpos_spring", f["qpos0"])
  mass = np.asarray(f["body_mass"], dtype=np.float64)
  out["body_subtreemass"] = tree.subtree_mask(parent) @ mass
  out["body_subtreemass"][0] = mass.sum()

  mocapid = np.asarray(out["body_mocapid"])
  act_num = np.asarray(out["actuator_actnum"])
  nkey = len(f.get("key_time", ()))
  nmocap = int((mocapid >= 0).sum())
  out.update(
      nq=nq, nv=nv, nu=nu, na=int(act_num.sum()), nbody=nbody, njnt=njnt, ngeom=ngeom,
      nsite=nsite, nmesh=len(f.get("mesh_vertadr", ())), ntendon=sizes["ntendon"],
      nmocap=nmocap, neq=sizes["neq"], nkey=nkey,
      body_parentid=parent, body_rootid=rootid, body_weldid=weldid,
      body_jntnum=body_jntnum, body_jntadr=body_jntadr, body_dofnum=body_dofnum,
      body_dofadr=body_dofadr, body_geomnum=body_geomnum, body_geomadr=body_geomadr,
      jnt_type=jnt_type, jnt_qposadr=jnt_qposadr, jnt_dofadr=jnt_dofadr, jnt_bodyid=jnt_bodyid,
      dof_bodyid=dof_bodyid, dof_jntid=dof_jntid, dof_parentid=dof_parentid,
      mesh_vertadr=f.get("mesh_vertadr", np.zeros(0, np.int32)),
      mesh_vertnum=f.get("mesh_vertnum", np.zeros(0, np.int32)),
      mesh_vert=f.get("mesh_vert", np.zeros((0, 3))),
      wrap_type=f.get("wrap_type", np.zeros(0, np.int32)),
      wrap_objid=f.get("wrap_objid", np.zeros(0, np.int32)),
      wrap_prm=f.get("wrap_prm", np.zeros(0)),
      key_time=f.get("key_time", np.zeros(0)),
      key_qpos=f.get("key_qpos", np.zeros((0, nq))),
      key_qvel=f.get("key_qvel", np.zeros((0, nv))),
      key_act=f.get("key_act", np.zeros((0, int(act_num.sum())))),
      key_ctrl=f.get("key_ctrl", np.zeros((0, nu))),
      key_mpos=f.get("key_mpos", np.zeros((0, nmocap, 3))),
      key_mquat=f.get("key_mquat", np.zeros((0, nmocap, 4))),
      opt=option if option is not None else make_option(dtype),
  )
  for kind, count in (("body", nbody), ("jnt", njnt), ("geom", ngeom), ("site", nsite),
                      ("actuator", nu), ("tendon", sizes["ntendon"]), ("key", nkey)):
    out[f"names_{kind}"] = tuple(f.get(f"names_{kind}", ("",) * count))
  out.update(tree.tree_tables(parent, jnt_type, jnt_bodyid, jnt_dofadr, dof_bodyid, dof_parentid))

  values: dict[str, Any] = {}
  float_dtype = _float_dtype(dtype)
  for name in Model._traced:
    if name == "opt":
      values[name] = out[name]
      continue
    values[name] = jnp.asarray(np.asarray(out[name], dtype=float_dtype))
  for name in Model._static:
    value = out[name]
    if isinstance(value, np.ndarray):
      value = np.array(value, dtype=np.int32 if value.dtype.kind in "iub" and value.dtype != bool else value.dtype)
      value.flags.writeable = False
    values[name] = value
  return Model(**values)
