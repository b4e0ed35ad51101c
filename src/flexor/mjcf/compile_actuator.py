"""Tendons, actuators and equality constraints: their primary fields in MuJoCo's order.

Actuator shortcuts are expanded to ``<general>`` parameters as MuJoCo's reader does: one actuator
state starts at MuJoCo's defaults, every default element of the class chain is applied to it in
order (top class first), then the element itself. Layouts of the packed rows:

* ``gainprm`` (10,): fixed gain (gain, ...); affine (bias0, bias1 * length, bias2 * velocity);
  muscle (range0, range1, force, scale, lmin, lmax, vmax, fpmax, fvmax).
* ``biasprm`` (10,): affine (b0, b1 * length, b2 * velocity); muscle as gainprm.
* ``dynprm`` (10,): filter time constant; muscle (tau_act, tau_deact, tausmooth).
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np
from lxml import etree

from flexor.mjcf import frames
from flexor.mjcf.compile_body import Compiler
from flexor.mjcf.defaults import ACTUATOR_TAGS, Attributes, Defaults, attributes
from flexor.mjcf.parse import Source
from flexor.mjcf.values import LIMITED, Reader
from flexor.types import BiasType, DynType, EqType, GainType, GeomType, TrnType, WrapType

_DYN = {"none": DynType.NONE, "integrator": DynType.INTEGRATOR, "filter": DynType.FILTER,
        "filterexact": DynType.FILTEREXACT, "muscle": DynType.MUSCLE, "user": DynType.USER}
_GAIN = {"fixed": GainType.FIXED, "affine": GainType.AFFINE, "muscle": GainType.MUSCLE,
         "user": GainType.USER}
_BIAS = {"none": BiasType.NONE, "affine": BiasType.AFFINE, "muscle": BiasType.MUSCLE,
         "user": BiasType.USER}
_MUSCLE_DYN = (0.01, 0.04, 0.0)
_MUSCLE_PRM = (0.75, 1.05, -1.0, 200.0, 0.5, 1.6, 1.5, 1.3, 1.2)
_NEQDATA = 12  # mjNEQDATA of MuJoCo 4
_SOLREF = (0.02, 1.0)
_SOLIMP = (0.9, 0.95, 0.001, 0.5, 2.0)


class _Names:
  """Name -> id of one element kind, with MJCFError for dangling references."""

  def __init__(self, source: Source, kind: str, names):
    self.source, self.kind = source, kind
    self.ids = {}
    for i, name in enumerate(names):
      if name:
        self.ids.setdefault(name, i)

  def __call__(self, r: Reader, attr: str) -> int:
    name = r.text(attr)
    if name not in self.ids:
      raise r.error(f"unknown {self.kind} {name!r}", attr)
    return self.ids[name]


def _actuator_state() -> dict[str, Any]:
  gain = np.zeros(10)
  gain[0] = 1.0
  dyn = np.zeros(10)
  dyn[0] = 1.0
  return dict(dyntype=DynType.NONE, gaintype=GainType.FIXED, biastype=BiasType.NONE,
              dynprm=dyn, gainprm=gain, biasprm=np.zeros(10), gear=np.array([1.0, 0, 0, 0, 0, 0]),
              ctrllimited=2, forcelimited=2, actlimited=2, ctrlrange=np.zeros(2),
              forcerange=np.zeros(2), actrange=np.zeros(2), lengthrange=np.zeros(2),
              cranklength=0.0, actdim=-1, actearly=0, inheritrange=0.0)


def _apply(state: dict[str, Any], source: Source, element: etree._Element) -> None:
  """Applies one actuator element (or default element) to ``state``, in place."""
  r = Reader(source, Attributes(element, ()))
  tag = element.tag
  for name, n in (("ctrlrange", 2), ("forcerange", 2), ("actrange", 2), ("lengthrange", 2)):
    if r.has(name):
      state[name] = r.floats(name, n)
  for name in ("ctrllimited", "forcelimited", "actlimited"):
    if r.has(name):
      state[name] = r.keyword(name, LIMITED, 2)
  if r.has("gear"):
    state["gear"] = r.floats("gear", 6, state["gear"], at_most=True)
  state["cranklength"] = r.float("cranklength", state["cranklength"])
  state["inheritrange"] = r.float("inheritrange", state["inheritrange"])
  gain, bias, dyn = state["gainprm"], state["biasprm"], state["dynprm"]
  if tag == "general":
    state["dyntype"] = r.keyword("dyntype", _DYN, state["dyntype"])
    state["gaintype"] = r.keyword("gaintype", _GAIN, state["gaintype"])
    state["biastype"] = r.keyword("biastype", _BIAS, state["biastype"])
    for name in ("dynprm", "gainprm", "biasprm"):
      if r.has(name):
        state[name] = r.floats(name, 10, state[name], at_most=True)
    state["actdim"] = r.int("actdim", state["actdim"])
    state["actearly"] = int(r.bool("actearly", bool(state["actearly"])))
  elif tag == "motor":
    state.update(dyntype=DynType.NONE, gaintype=GainType.FIXED, biastype=BiasType.NONE)
    gain[:] = 0
    gain[0] = 1.0
    bias[:] = 0
  elif tag in ("position", "intvelocity"):
    kp = r.float("kp", gain[0])
    kv = r.float("kv", -bias[2] if state["biastype"] == BiasType.AFFINE else 0.0)
    for name, value in (("kp", kp), ("kv", kv)):
      r.positive(name, value)
    if r.has("dampratio") and r.float("dampratio") != 0:
      # MuJoCo turns dampratio into kv from the joint inertia at qpos0 (mj_setConst)
      warnings.warn(str(r.error("dampratio is not supported by flexor yet: the actuator gets "
                                "no velocity feedback; give kv instead", "dampratio")),
                    stacklevel=2)
    gain[:] = 0
    gain[0] = kp
    bias[:] = 0
    bias[1], bias[2] = -kp, -kv
    state.update(gaintype=GainType.FIXED, biastype=BiasType.AFFINE)
    if tag == "position":
      timeconst = r.float("timeconst", dyn[0] if state["dyntype"] == DynType.FILTEREXACT else 0.0)
      r.positive("timeconst", timeconst)
      dyn[:] = 0
      dyn[0] = timeconst if timeconst > 0 else 1.0
      state["dyntype"] = DynType.FILTEREXACT if timeconst > 0 else DynType.NONE
    else:
      dyn[:] = 0
      dyn[0] = 1.0
      state["dyntype"] = DynType.INTEGRATOR
  elif tag == "velocity":
    kv = r.positive("kv", r.float("kv", gain[0]))
    gain[:] = 0
    gain[0] = kv
    bias[:] = 0
    bias[2] = -kv
    state.update(dyntype=DynType.NONE, gaintype=GainType.FIXED, biastype=BiasType.AFFINE)
  elif tag == "damper":
    kv = r.positive("kv", r.float("kv", -gain[2] if state["gaintype"] == GainType.AFFINE else 0.0))
    gain[:] = 0
    gain[2] = -kv
    bias[:] = 0
    state.update(dyntype=DynType.NONE, gaintype=GainType.AFFINE, biastype=BiasType.NONE,
                 ctrllimited=1)
  elif tag == "cylinder":
    timeconst = r.float("timeconst", dyn[0])
    area = r.float("area", gain[0])
    if r.has("diameter"):
      area = math.pi / 4 * r.float("diameter") ** 2
    dyn[:] = 0
    dyn[0] = timeconst
    gain[:] = 0
    gain[0] = area
    if r.has("bias"):
      bias[:] = 0
      bias[:3] = r.floats("bias", 3)
    state.update(dyntype=DynType.FILTER, gaintype=GainType.FIXED, biastype=BiasType.AFFINE)
  elif tag == "muscle":
    if state["gaintype"] != GainType.MUSCLE:
      gain[:] = 0
      gain[:9] = _MUSCLE_PRM
      dyn[:] = 0
      dyn[:3] = _MUSCLE_DYN
    if r.has("timeconst"):
      dyn[:2] = r.floats("timeconst", 2)
    dyn[2] = r.float("tausmooth", dyn[2])
    if r.has("range"):
      gain[:2] = r.floats("range", 2)
    for i, name in enumerate(("force", "scale", "lmin", "lmax", "vmax", "fpmax", "fvmax")):
      gain[2 + i] = r.float(name, gain[2 + i])
    bias[:] = gain
    state.update(dyntype=DynType.MUSCLE, gaintype=GainType.MUSCLE, biastype=BiasType.MUSCLE)
  elif tag == "adhesion":
    g = r.positive("gain", r.float("gain", gain[0]))
    gain[:] = 0
    gain[0] = g
    bias[:] = 0
    state.update(dyntype=DynType.NONE, gaintype=GainType.FIXED, biastype=BiasType.NONE,
                 ctrllimited=1)
  elif tag in ("orientation", "pid", "dcmotor", "plugin"):
    raise r.error("this actuator type is not supported by flexor yet")


def _limited(r: Reader, compiler: Compiler, flag: str, value: int, rng: np.ndarray) -> int:
  if value != 2:
    return value
  has_range = bool(rng[0] < rng[1])
  if has_range and not compiler.autolimits:
    raise r.error(f"has a range but not '{flag}'; set <compiler autolimits=\"true\"> or give "
                  f"'{flag}'", flag)
  return int(has_range)


def _actuators(source: Source, defaults: Defaults, compiler: Compiler, names, fields) -> dict:
  """actuator_* fields in document order; activations are numbered in actuator order."""
  rows: dict[str, list[Any]] = {}
  actadr = 0
  for section in source.sections("actuator"):
    for element in section:
      if element.tag not in ACTUATOR_TAGS:
        continue
      state = _actuator_state()
      for default in defaults.class_of(element).chain("actuator"):
        _apply(state, source, default)
      _apply(state, source, element)
      r = Reader(source, attributes(defaults, element))
      trntype, trnid = _transmission(r, element, names)
      ctrllimited = _limited(r, compiler, "ctrllimited", state["ctrllimited"], state["ctrlrange"])
      if state["inheritrange"] > 0:
        ctrllimited = 1
        state["ctrlrange"] = _inherit(r, state["inheritrange"], trntype, trnid, fields)
      actnum = state["actdim"] if state["actdim"] >= 0 else int(state["dyntype"] != DynType.NONE)
      row = dict(
          trntype=trntype, dyntype=state["dyntype"], gaintype=state["gaintype"],
          biastype=state["biastype"], trnid=trnid, actadr=actadr if actnum else -1,
          actnum=actnum, ctrllimited=ctrllimited,
          forcelimited=_limited(r, compiler, "forcelimited", state["forcelimited"],
                                state["forcerange"]),
          actlimited=_limited(r, compiler, "actlimited", state["actlimited"], state["actrange"]),
          actearly=state["actearly"], dynprm=state["dynprm"], gainprm=state["gainprm"],
          biasprm=state["biasprm"], ctrlrange=state["ctrlrange"], forcerange=state["forcerange"],
          actrange=state["actrange"], gear=state["gear"], cranklength=state["cranklength"],
          lengthrange=state["lengthrange"])
      actadr += actnum
      for key, value in row.items():
        rows.setdefault(key, []).append(value)
      rows.setdefault("name", []).append(element.get("name", ""))
  if not rows:
    return {}
  out = {f"actuator_{k}": np.array(v) for k, v in rows.items() if k != "name"}
  out["names_actuator"] = tuple(rows["name"])
  return out


def _transmission(r: Reader, element: etree._Element, names) -> tuple[int, list[int]]:
  targets = [a for a in ("joint", "jointinparent", "tendon", "site", "body", "cranksite")
             if element.get(a) is not None]
  if len(targets) != 1:
    raise r.error("an actuator needs exactly one transmission target (joint, jointinparent, "
                  "tendon, site, cranksite or body)", targets[1] if targets else None)
  kind = targets[0]
  if kind in ("joint", "jointinparent"):
    return (TrnType.JOINT if kind == "joint" else TrnType.JOINTINPARENT), [names["jnt"](r, kind),
                                                                           -1]
  if kind == "tendon":
    return TrnType.TENDON, [names["tendon"](r, kind), -1]
  if kind == "body":
    return TrnType.BODY, [names["body"](r, kind), -1]
  if kind == "cranksite":
    if element.get("slidersite") is None:
      raise r.error("a slider-crank needs a slidersite", "slidersite")
    return TrnType.SLIDERCRANK, [names["site"](r, "cranksite"), names["site"](r, "slidersite")]
  ref = names["site"](r, "refsite") if element.get("refsite") is not None else -1
  return TrnType.SITE, [names["site"](r, "site"), ref]


def _inherit(r: Reader, scale: float, trntype: int, trnid, fields) -> np.ndarray:
  if trntype not in (TrnType.JOINT, TrnType.JOINTINPARENT):
    raise r.error("inheritrange needs a joint transmission", "inheritrange")
  lo, hi = fields["jnt_range"][trnid[0]]
  mid, half = (lo + hi) / 2, (hi - lo) / 2 * scale
  return np.array([mid - half, mid + half])


def _tendons(source: Source, defaults: Defaults, compiler: Compiler, names, fields) -> dict:
  """tendon_* and wrap_* fields; wrap_prm is the joint coefficient, the pulley divisor, or the
  side site id of a wrapping geom (-1 without one)."""
  rows: dict[str, list[Any]] = {}
  wraps: dict[str, list[Any]] = {"type": [], "objid": [], "prm": []}
  for section in source.sections("tendon"):
    for element in section:
      if element.tag not in ("fixed", "spatial"):
        continue
      r = Reader(source, attributes(defaults, element, "tendon"))
      adr = len(wraps["type"])
      for child in element:
        cr = Reader(source, Attributes(child, ()))
        if child.tag == "joint":
          wraps["type"].append(WrapType.JOINT)
          wraps["objid"].append(names["jnt"](cr, "joint"))
          wraps["prm"].append(cr.float("coef", 1.0))
        elif child.tag == "site":
          wraps["type"].append(WrapType.SITE)
          wraps["objid"].append(names["site"](cr, "site"))
          wraps["prm"].append(0.0)
        elif child.tag == "geom":
          gid = names["geom"](cr, "geom")
          gtype = fields["geom_type"][gid]
          if gtype not in (GeomType.SPHERE, GeomType.CYLINDER):
            raise cr.error("a tendon can wrap only sphere and cylinder geoms", "geom")
          wraps["type"].append(WrapType.SPHERE if gtype == GeomType.SPHERE else
                               WrapType.CYLINDER)
          wraps["objid"].append(gid)
          wraps["prm"].append(float(names["site"](cr, "sidesite"))
                              if child.get("sidesite") is not None else -1.0)
        elif child.tag == "pulley":
          wraps["type"].append(WrapType.PULLEY)
          wraps["objid"].append(-1)
          wraps["prm"].append(cr.float("divisor", 1.0))
      rng = r.floats("range", 2, (0.0, 0.0))
      spring = r.floats("springlength", 2, (-1.0, -1.0), at_most=True)
      if r.has("springlength") and len(r.text("springlength").split()) == 1:
        spring[1] = spring[0]
      for key, value in (("num", len(wraps["type"]) - adr), ("adr", adr),
                         ("limited", _limited(r, compiler, "limited",
                                              r.keyword("limited", LIMITED, 2), rng)),
                         ("range", rng), ("stiffness", r.float("stiffness", 0.0)),
                         ("damping", r.float("damping", 0.0)), ("lengthspring", spring),
                         ("name", element.get("name", ""))):
        rows.setdefault(key, []).append(value)
  if not rows:
    return {}
  out = {f"tendon_{k}": np.array(v) for k, v in rows.items() if k != "name"}
  out["names_tendon"] = tuple(rows["name"])
  out.update(wrap_type=np.array(wraps["type"], np.int32),
             wrap_objid=np.array(wraps["objid"], np.int32), wrap_prm=np.array(wraps["prm"]))
  return out


def _world_poses(fields) -> tuple[list[np.ndarray], list[np.ndarray]]:
  """Body world positions and orientations at qpos0 (every joint displacement is zero)."""
  xpos, xquat = [], []
  for b, parent in enumerate(fields["body_parentid"]):
    if b == 0:
      xpos.append(np.zeros(3))
      xquat.append(np.array([1.0, 0, 0, 0]))
      continue
    p, q = frames.frame_accum(xpos[parent], xquat[parent], fields["body_pos"][b],
                              fields["body_quat"][b])
    xpos.append(p)
    xquat.append(q)
  return xpos, xquat


def _springlength_at_qpos0(out: dict, fields) -> None:
  """tendon_lengthspring = tendon length at qpos0 where springlength is -1 (fixed tendons and
  straight spatial tendons; wrapping tendons are left at -1)."""
  xpos, xquat = _world_poses(fields)

  def site_pos(s):
    b = fields["site_bodyid"][s]
    return np.asarray(frames.frame_accum(xpos[b], xquat[b], fields["site_pos"][s],
                                         fields["site_quat"][s])[0])

  qpos0 = fields["qpos0"]
  qposadr = np.concatenate([[0], np.cumsum([{0: 7, 1: 4}.get(int(t), 1)
                                            for t in fields["jnt_type"]])])
  for t in range(len(out["tendon_num"])):
    if out["tendon_lengthspring"][t][0] != -1:
      continue
    adr, num = out["tendon_adr"][t], out["tendon_num"][t]
    types = out["wrap_type"][adr:adr + num]
    if np.all(types == WrapType.JOINT):
      length = sum(out["wrap_prm"][adr + k] * qpos0[qposadr[out["wrap_objid"][adr + k]]]
                   for k in range(num))
    elif np.all((types == WrapType.SITE) | (types == WrapType.PULLEY)):
      length, divisor = 0.0, 1.0
      for k in range(num - 1):
        if types[k] == WrapType.PULLEY:
          divisor = out["wrap_prm"][adr + k]
          continue
        if types[k + 1] == WrapType.PULLEY:
          continue
        a, b = site_pos(out["wrap_objid"][adr + k]), site_pos(out["wrap_objid"][adr + k + 1])
        length += float(np.linalg.norm(a - b)) / divisor
    else:
      continue
    out["tendon_lengthspring"][t] = (length, length)


def _equality(source: Source, defaults: Defaults, names, fields) -> dict:
  """eq_* fields. eq_data (12,): connect (anchor in body1, anchor in body2 at qpos0, ...,
  [10] torquescale); weld (anchor, relpose pos (3), relpose quat (4), torquescale, [11] 1 if
  relpose was taken from qpos0); joint/tendon (polycoef (5), ..., [10] 1)."""
  rows: dict[str, list[Any]] = {}
  kinds = {"connect": EqType.CONNECT, "weld": EqType.WELD, "joint": EqType.JOINT,
           "tendon": EqType.TENDON}
  xpos, xquat = None, None
  for section in source.sections("equality"):
    for element in section:
      if element.tag not in kinds:
        raise source.error(element, "flex equality constraints are not supported by flexor yet")
      r = Reader(source, attributes(defaults, element, "equality"))
      etype = kinds[element.tag]
      data = np.zeros(_NEQDATA)
      obj2 = -1
      if etype in (EqType.CONNECT, EqType.WELD):
        if element.get("site1") is not None:
          if etype == EqType.WELD:
            raise r.error("site-based weld constraints are not supported by flexor yet", "site1")
          obj1, obj2 = names["site"](r, "site1"), names["site"](r, "site2")
        else:
          obj1 = names["body"](r, "body1")
          obj2 = names["body"](r, "body2") if element.get("body2") is not None else 0
          if xpos is None:
            xpos, xquat = _world_poses(fields)
          data[:3] = r.floats("anchor", 3, (0.0, 0.0, 0.0))
          data[10] = r.float("torquescale", 1.0)
          if etype == EqType.CONNECT:
            world = frames.frame_accum(xpos[obj1], xquat[obj1], data[:3], [1.0, 0, 0, 0])[0]
            data[3:6] = _to_local(world, xpos[obj2], xquat[obj2])
          else:
            relpose = r.floats("relpose", 7, (0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0))
            if np.all(relpose[3:] == 0):
              # relpose unset: the pose of body2 in body1's frame at qpos0 (flagged in data[11])
              data[3:6] = _to_local(xpos[obj2], xpos[obj1], xquat[obj1])
              data[6:10] = frames.mulquat(_conj(xquat[obj1]), xquat[obj2])
              data[11] = 1.0
            else:
              data[3:10] = relpose
      else:
        prefix = "joint" if etype == EqType.JOINT else "tendon"
        table = names["jnt" if etype == EqType.JOINT else "tendon"]
        obj1 = table(r, f"{prefix}1")
        obj2 = table(r, f"{prefix}2") if element.get(f"{prefix}2") is not None else -1
        data[:5] = r.floats("polycoef", 5, (0.0, 1.0, 0.0, 0.0, 0.0), at_most=True)
        data[10] = 1.0
      for key, value in (("type", etype), ("obj1id", obj1), ("obj2id", obj2),
                         ("active0", int(r.bool("active", True))), ("data", data),
                         ("solref", r.floats("solref", 2, _SOLREF, at_most=True)),
                         ("solimp", r.floats("solimp", 5, _SOLIMP, at_most=True))):
        rows.setdefault(key, []).append(value)
  out = {f"eq_{k}": np.array(v) for k, v in rows.items()}
  out.setdefault("eq_data", np.zeros((0, _NEQDATA)))
  return out


def _conj(quat: np.ndarray) -> np.ndarray:
  return np.array([quat[0], -quat[1], -quat[2], -quat[3]])


def _to_local(world: np.ndarray, pos: np.ndarray, quat: np.ndarray) -> np.ndarray:
  mat = np.array(frames.quat2mat(quat)).reshape(3, 3)
  return mat.T @ (np.asarray(world) - pos)


def compile_rest(source: Source, defaults: Defaults, compiler: Compiler,
                 fields: dict[str, Any]) -> dict[str, Any]:
  """Tendon, actuator and equality fields (tendons first: actuators may reference them)."""
  names = {kind: _Names(source, label, fields[f"names_{kind}"])
           for kind, label in (("body", "body"), ("jnt", "joint"), ("geom", "geom"),
                               ("site", "site"))}
  out = _tendons(source, defaults, compiler, names, fields)
  if out:
    _springlength_at_qpos0(out, fields)
  names["tendon"] = _Names(source, "tendon", out.get("names_tendon", ()))
  out.update(_actuators(source, defaults, compiler, names, fields))
  out.update(_equality(source, defaults, names, fields))
  return out
