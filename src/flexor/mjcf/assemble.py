"""Builds a :class:`flexor.types.Model` from per-element arrays (host side, numpy).

The compiler (``flexor.mjcf.compile``) and ``from_mujoco`` both describe a model as a dict of
mjModel-named arrays for the *primary* fields: what the MJCF says after defaults, frames and
inertias are resolved. Everything MuJoCo derives from them (addresses, counts, dof tree, root
and weld ids, subtree masses) and flexor's tree tables are computed here, in one place.
"""

from __future__ import annotations

import warnings
from typing import Any

import jax
import numpy as np

from flexor import tree
from flexor.mjcf import constraint_rows, contact_pairs, mesh
from flexor.types import (_REQUIRED, JNT_NQ, JNT_NV, BiasType, DynType, GainType, JointType, Model,
                          Option, SameFrame, TrnType, WrapType, device_array, field_table)

_OPTION_DEFAULTS: dict[str, Any] = dict(
    timestep=0.002, gravity=(0.0, 0.0, -9.81), wind=(0.0, 0.0, 0.0), magnetic=(0.0, -0.5, 0.0),
    density=0.0, viscosity=0.0, impratio=1.0, tolerance=1e-8, ls_tolerance=0.01,
    noslip_tolerance=1e-6,
    ccd_tolerance=1e-6, o_margin=0.0,
    o_solref=(0.02, 1.0), o_solimp=(0.9, 0.95, 0.001, 0.5, 2.0),
    o_friction=(1.0, 1.0, 0.005, 0.0001, 0.0001), contact_gradient_width=0.01,
    contact_gradient_timeconst=0.2, adaptive_rtol=1e-3, adaptive_atol=1e-6,
    integrator=0, cone=0, jacobian=2, solver=2, iterations=100, ls_iterations=50,
    noslip_iterations=0, ccd_iterations=35, disableflags=0, enableflags=0, disableactuator=0,
    contact_gradient=0, adaptive_substeps=0)


# Where no <size nconmax> is set and a row for every contact the candidate pairs can make would
# give efc_J more than _MAX_JACOBIAN bytes per world (float64), the contacts are capped to fit it:
# MuJoCo allocates contacts as they come, and a scene of hundreds of free bodies would otherwise
# not fit in memory (MuJoCo's sand_castle.xml: 154,818 contact slots, 35 GB of efc_J).
_MAX_JACOBIAN = 2**28


def _warn_automatic_cap(out: dict[str, Any], full_rows: int, nv: int) -> None:
  """Says that the contacts were capped, from how many rows, and how to choose the cap."""
  warnings.warn(
      f"this model's {out['nconslot']} possible contacts would make {full_rows} constraint "
      f"rows, an efc_J of {full_rows * nv * 8 / 2**30:.1f} GiB per world in float64: its "
      f"contacts are capped at {out['size_nconmax']} of each condim ({out['njmax']} rows), "
      "those past it counted in d.ncon_dropped. Set <size nconmax=\"...\"> to the most "
      "contacts of one condim the scene makes at once, and for a broad phase <custom><numeric "
      "name=\"max_geom_pairs\" data=\"...\"/>", stacklevel=4)


def _float_dtype(dtype: Any) -> np.dtype:
  """The numpy dtype of traced fields: ``dtype``, else JAX's default float (float64 under x64).

  Casting on the host keeps loading free of per-shape device conversions.
  """
  return np.dtype(dtype) if dtype is not None else jax.dtypes.canonicalize_dtype(np.float64)


def make_option(dtype: Any = None, **values: Any) -> Option:
  """Option with MuJoCo's defaults, overridden by ``values`` (mjOption names)."""
  unknown = set(values) - set(_OPTION_DEFAULTS)
  if unknown:
    raise ValueError(f"unknown option fields {sorted(unknown)}")
  merged = {**_OPTION_DEFAULTS, **values}
  fields = {}
  float_dtype = _float_dtype(dtype)
  for name in Option._traced:
    fields[name] = device_array(merged[name], float_dtype)
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


def _body_freestanding(subtree: np.ndarray, jnt_type: np.ndarray, jnt_bodyid: np.ndarray,
                       body_dofnum: np.ndarray) -> np.ndarray:
  """MuJoCo 4.0's mj_isFreeBody of each body (nbody,) bool: a free joint is its only joint and
  no body below it has a joint (implicitfast solves such a body's 6 dofs on their own). Bodies
  welded below it may have mass: measured, where the newer sources also ask for a massless
  subtree.

  Args:
    subtree: (nbody, nbody) bool, [i, j] iff j is i or a descendant of i.
    jnt_type, jnt_bodyid: (njnt,) each joint's type and body.
    body_dofnum: (nbody,) each body's dofs.
  """
  njnt = np.bincount(jnt_bodyid, minlength=len(body_dofnum))
  alone = np.zeros(len(body_dofnum), dtype=bool)
  free = jnt_bodyid[jnt_type == JointType.FREE]
  alone[free] = njnt[free] == 1
  return alone & (subtree.astype(np.int64) @ body_dofnum == 6)


def _body_simple(parent: np.ndarray, rootid: np.ndarray, dofnum: np.ndarray,
                 sameframe: np.ndarray, jnt_type: np.ndarray, jnt_bodyid: np.ndarray,
                 jnt_pos: np.ndarray, jnt_axis: np.ndarray) -> np.ndarray:
  """MuJoCo's body_simple: 1 for a body whose joint-space inertia block is diagonal (a leaf that
  is a root or hangs from a fixed child of the world, inertial frame at the body frame, joints at
  the origin with axis-aligned hinge/slide axes and at most one rotational joint, last), 2 if it
  moves by slide joints only; 0 otherwise."""
  nbody = len(parent)
  simple = np.zeros(nbody, dtype=np.int32)
  simple[0] = 1   # the world, which no child demotes
  for i in range(1, nbody):
    p = parent[i]
    simple[i] = int(sameframe[i] == SameFrame.BODY
                    and (rootid[i] == i or (parent[p] == 0 and dofnum[p] == 0)))
    if p > 0:
      simple[p] = 0
    rotation = False
    joints = np.flatnonzero(jnt_bodyid == i)
    for j in joints:
      aligned = np.count_nonzero(np.abs(jnt_axis[j]) > 1e-14) == 1
      scalar = jnt_type[j] in (JointType.HINGE, JointType.SLIDE)
      if rotation or np.any(np.abs(jnt_pos[j]) >= 1e-6) or (scalar and not aligned):
        simple[i] = 0
      rotation |= jnt_type[j] in (JointType.BALL, JointType.HINGE)
    if simple[i] and dofnum[i]:
      simple[i] = 2 if np.all(jnt_type[joints] == JointType.SLIDE) else 1
  return simple


def _armature_wrap_bodies(out: dict[str, Any]) -> np.ndarray:
  """Bodies carrying a site or geom of the path of a tendon with armature (never simple)."""
  bodies = []
  for t in np.flatnonzero(np.asarray(out["tendon_armature"]) != 0):
    for k in range(out["tendon_adr"][t], out["tendon_adr"][t] + out["tendon_num"][t]):
      kind, obj = out["wrap_type"][k], out["wrap_objid"][k]
      if kind == WrapType.SITE:
        bodies.append(out["site_bodyid"][obj])
      elif kind in (WrapType.SPHERE, WrapType.CYLINDER):
        bodies.append(out["geom_bodyid"][obj])
  return np.array(bodies, dtype=np.int32)


def _actuator_tables(out: dict[str, Any], jnt_type: np.ndarray) -> dict[str, np.ndarray]:
  """actuator_actslot and actuator_wrap (see Model) from the actuator parameters."""
  n = len(out["actuator_trntype"])
  dyn, gain, bias = (np.asarray(out[f"actuator_{k}prm"], dtype=np.float64).reshape(n, 10)
                     for k in ("dyn", "gain", "bias"))
  dyntype, gaintype = out["actuator_dyntype"], out["actuator_gaintype"]
  slots = np.full((n, 5), -1, dtype=np.int32)
  for i in range(n):
    if dyntype[i] == DynType.DCMOTOR:
      present = (dyn[i, 7] > 0, gain[i, 5] > 0, dyn[i, 2] > 0, dyn[i, 5] > 0, dyn[i, 0] > 0)
    elif dyntype[i] == DynType.PID:
      present = (dyn[i, 1] > 0, gain[i, 0] > 0, False, False, False)
    else:
      continue
    slots[i] = np.where(present, np.cumsum(present) - 1, -1)
  servo = ((gaintype == GainType.FIXED) & (out["actuator_biastype"] == BiasType.AFFINE)
           & (gain[:, 0] == -bias[:, 1])
           & np.isin(dyntype, (DynType.NONE, DynType.INTEGRATOR))) | (gaintype == GainType.PID)
  trntype, trnid = out["actuator_trntype"], np.asarray(out["actuator_trnid"]).reshape(n, 2)
  gear = np.asarray(out["actuator_gear"], dtype=np.float64)[out["actuator_outadr"]]
  site_rot = (trntype == TrnType.SITE) & (trnid[:, 1] >= 0) & np.all(gear[:, :3] == 0, axis=1)
  joint = np.isin(trntype, (TrnType.JOINT, TrnType.JOINTINPARENT))
  target = np.where(joint, trnid[:, 0], 0)
  ball = joint & (jnt_type[target] == JointType.BALL if len(jnt_type) else False)
  wrap = np.where(servo & site_rot, 1, np.where(servo & ball, 2, 0)).astype(np.int32)
  return dict(actuator_actslot=slots, actuator_wrap=wrap)


def plastic_tables(f: dict[str, Any], jnt_type: np.ndarray, ntendon: int) -> dict[str, Any]:
  """Data.plastic addresses, as MuJoCo 4's compiler: joints, then tendons, with springyield > 0.

  A hinge or slide takes 1 entry, a ball 4 (a quaternion), a tendon 2 (its spring dead band);
  others get -1. MuJoCo rejects springyield on free joints.
  """
  jnt_yield = np.asarray(f.get("jnt_springyield", np.zeros(len(jnt_type))))
  ten_yield = np.asarray(f.get("tendon_springyield", np.zeros(ntendon)))
  if np.any((jnt_yield > 0) & (jnt_type == JointType.FREE)):
    raise ValueError("assemble: springyield is not supported on free joints; set it to 0")
  jnt_width = np.where(jnt_yield > 0, np.where(jnt_type == JointType.BALL, 4, 1), 0)
  ten_width = np.where(ten_yield > 0, 2, 0)
  width = np.concatenate([jnt_width, ten_width]).astype(np.int32)
  adr = np.where(width > 0, np.cumsum(width) - width, -1).astype(np.int32)
  return dict(jnt_plasticadr=adr[:len(jnt_type)], tendon_plasticadr=adr[len(jnt_type):],
              nplastic=int(width.sum()))


def _history_tables(out: dict[str, Any]) -> dict[str, Any]:
  """History buffer addresses and nhistory, as MuJoCo 4's compiler: actuators, then sensors.

  A buffer of n > 0 samples of dim values takes 2 + n + n dim entries (user slot, cursor,
  times, values); an actuator's dim is its ctrlnum. Others get -1.
  """
  samples = np.concatenate([np.asarray(out["actuator_history"]).reshape(-1, 2)[:, 0],
                            np.asarray(out["sensor_history"]).reshape(-1, 2)[:, 0]])
  dim = np.concatenate([out["actuator_ctrlnum"], out["sensor_dim"]])
  width = np.where(samples > 0, 2 + samples * (1 + dim), 0)
  adr = np.where(width > 0, np.cumsum(width) - width, -1).astype(np.int32)
  nactuator = len(out["actuator_ctrlnum"])
  return dict(actuator_historyadr=adr[:nactuator], sensor_historyadr=adr[nactuator:],
              nhistory=int(width.sum()))


def assemble(fields: dict[str, Any], option: Option | None = None, dtype: Any = None,
             convex: bool = True) -> Model:
  """Returns a Model from primary per-element arrays.

  Args:
    fields: mjModel-named arrays of the Model's primary (not derived) fields. Those without a
      fill value in the field table are required (``body_parentid body_pos ... qpos0``); the
      others default to their fill; ``qpos_spring`` defaults to ``qpos0``; ``names_*`` and
      ``key_*`` default to empty.
    option: physics options; MuJoCo's defaults if None.
    dtype: float dtype of the traced fields (default: float64 if x64 is enabled, else float32).
    convex: collide the GJK/EPA pairs (``contact_pairs.CONVEX``).
  Returns:
    The Model, with derived addresses, dof tree, subtree masses and tree tables.
  """
  f = {k: (np.asarray(v) if not isinstance(v, tuple) else v) for k, v in fields.items()}
  f.setdefault("qpos_spring", f["qpos0"])
  parent = f["body_parentid"].astype(np.int32)
  jnt_type = f["jnt_type"].astype(np.int32)
  jnt_bodyid = f["jnt_bodyid"].astype(np.int32)
  nbody, njnt = len(parent), len(jnt_type)
  jnt_qposadr, jnt_dofadr, dof_bodyid, dof_jntid, dof_parentid = _dof_tree(parent, jnt_type, jnt_bodyid)
  act_num = np.asarray(f.get("actuator_actnum", ()), dtype=np.int32)
  nactuator = len(f.get("actuator_trntype", ()))
  mocapid = np.asarray(f.get("body_mocapid", np.full(nbody, -1)))
  sizes = dict(
      nq=int(JNT_NQ[jnt_type].sum()), nv=int(JNT_NV[jnt_type].sum()),
      nu=int(np.sum(f.get("actuator_ctrlnum", np.ones(nactuator)))), nactuator=nactuator,
      nout=int(np.sum(f.get("actuator_outnum", np.ones(nactuator)))), na=int(act_num.sum()),
      nbody=nbody, njnt=njnt,
      ngeom=len(f["geom_type"]), nsite=len(f["site_bodyid"]),
      ncam=len(f.get("cam_bodyid", ())), nlight=len(f.get("light_bodyid", ())),
      nmesh=len(f.get("mesh_vertadr", ())), nmeshvert=len(f.get("mesh_vert", ())),
      nmeshface=len(f.get("mesh_face", ())), nmat=len(f.get("mat_rgba", ())),
      nmeshgraph=len(f.get("mesh_graph", ())), nmeshpoly=len(f.get("mesh_polyvertadr", ())),
      nmeshpolyvert=len(f.get("mesh_polyvert", ())), nmeshpolymap=len(f.get("mesh_polymap", ())),
      nhfield=len(f.get("hfield_nrow", ())), nhfielddata=len(f.get("hfield_data", ())),
      ntendon=len(f.get("tendon_num", ())), nwrap=len(f.get("wrap_type", ())),
      nmocap=int((mocapid >= 0).sum()), neq=len(f.get("eq_type", ())),
      nkey=len(f.get("key_time", ())), npair=len(f.get("pair_geom1", ())),
      nexclude=len(f.get("exclude_signature", ())), nsensor=len(f.get("sensor_type", ())),
      nsensordata=int(np.sum(f.get("sensor_dim", ()), dtype=np.int64)))
  plastic = plastic_tables(f, jnt_type, sizes["ntendon"])
  sizes["nplastic"] = plastic.pop("nplastic")
  nq, nv, nu, na, nmocap = (sizes[k] for k in ("nq", "nv", "nu", "na", "nmocap"))

  out: dict[str, Any] = dict(sizes)
  for name, spec in field_table(Model).items():
    if spec["derived"]:
      continue
    if name in f:
      out[name] = f[name]
    elif spec["fill"] is _REQUIRED:
      raise ValueError(f"assemble: required field {name} is missing")
    else:
      shape = ((sizes[spec["size"]],) if spec["size"] else ()) + tuple(
          sizes[s] if isinstance(s, str) else s for s in spec["shape"])
      out[name] = np.broadcast_to(np.asarray(spec["fill"]), shape).copy()

  sensor_dim = np.asarray(out["sensor_dim"], dtype=np.int32)
  out["sensor_adr"] = (np.cumsum(sensor_dim) - sensor_dim).astype(np.int32)
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
    weldid[b] = b if body_jntnum[b] or mocapid[b] >= 0 else weldid[parent[b]]
  mass = np.asarray(f["body_mass"], dtype=np.float64)
  subtree = tree.subtree_mask(parent)
  subtreemass = subtree @ mass
  subtreemass[0] = mass.sum()
  out["body_freestanding"] = _body_freestanding(subtree, jnt_type, jnt_bodyid, body_dofnum)
  out.update(
      body_parentid=parent, body_rootid=rootid, body_weldid=weldid,
      body_jntnum=body_jntnum, body_jntadr=body_jntadr, body_dofnum=body_dofnum,
      body_dofadr=body_dofadr, body_geomnum=body_geomnum, body_geomadr=body_geomadr,
      body_subtreemass=subtreemass,
      jnt_type=jnt_type, jnt_qposadr=jnt_qposadr, jnt_dofadr=jnt_dofadr, jnt_bodyid=jnt_bodyid,
      dof_bodyid=dof_bodyid, dof_jntid=dof_jntid, dof_parentid=dof_parentid,
      key_time=f.get("key_time", np.zeros(0)),
      key_qpos=f.get("key_qpos", np.zeros((0, nq))),
      key_qvel=f.get("key_qvel", np.zeros((0, nv))),
      key_act=f.get("key_act", np.zeros((0, na))),
      key_ctrl=f.get("key_ctrl", np.zeros((0, nu))),
      key_mpos=f.get("key_mpos", np.zeros((0, nmocap, 3))),
      key_mquat=f.get("key_mquat", np.zeros((0, nmocap, 4))),
      key_plastic=f.get("key_plastic", np.zeros((0, sizes["nplastic"]))),
      opt=option if option is not None else make_option(dtype),
  )
  for kind, count in (("body", nbody), ("jnt", njnt), ("geom", sizes["ngeom"]),
                      ("site", sizes["nsite"]), ("cam", sizes["ncam"]),
                      ("light", sizes["nlight"]), ("actuator", nactuator), ("tendon", sizes["ntendon"]),
                      ("sensor", sizes["nsensor"]), ("key", sizes["nkey"])):
    out[f"names_{kind}"] = tuple(f.get(f"names_{kind}", ("",) * count))
  out.update(_actuator_tables(out, jnt_type))
  out["body_simple"] = _body_simple(parent, rootid, body_dofnum, np.asarray(out["body_sameframe"]),
                                    jnt_type, jnt_bodyid, np.asarray(out["jnt_pos"], np.float64),
                                    np.asarray(out["jnt_axis"], np.float64))
  out["body_simple"][_armature_wrap_bodies(out)] = 0
  out.update(plastic)
  out.update(_history_tables(out))
  out["mesh_polyquad"] = mesh.polygon_quads(out)
  out.update(mesh.hull_tables(out))
  out.update(contact_pairs.candidates(out, out["opt"].disableflags, convex))
  out["size_nconmax"] = int(f.get("size_nconmax", -1))
  out["max_geom_pairs"] = int(f.get("max_geom_pairs", -1))
  out["flg_adhesion"] = int(np.any(out["geom_adhesion"]) or np.any(out["pair_adhesion"]))
  out["flg_surfacevel"] = int(np.any(out["geom_surfacevel"]))
  out["geom_fluidellipsoid"] = np.asarray(out["geom_fluid"])[:, 0] > 0
  out.update(constraint_rows.layout(out, out["opt"], max_rows=_MAX_JACOBIAN // (8 * max(nv, 1))))
  full_rows = out.pop("njmax_uncapped")
  if full_rows > out["njmax"] and int(f.get("size_nconmax", -1)) < 0:
    _warn_automatic_cap(out, full_rows, nv)
  out.update(tree.tree_tables(parent, jnt_type, jnt_bodyid, jnt_dofadr, dof_bodyid, dof_parentid))

  values: dict[str, Any] = {}
  float_dtype = _float_dtype(dtype)
  for name in Model._traced:
    if name == "opt":
      values[name] = out[name]
      continue
    values[name] = device_array(out[name], float_dtype)
  for name in Model._static:
    value = out[name]
    if isinstance(value, np.ndarray):
      value = np.array(value, dtype=np.int32 if value.dtype.kind in "iub" and value.dtype != bool else value.dtype)
      value.flags.writeable = False
    values[name] = value
  return Model(**values)
