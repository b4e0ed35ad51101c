"""Tendons: ``tendon_*`` and ``wrap_*`` fields in MuJoCo's order, with its compile-time checks.

A tendon's path is ``wrap_*[tendon_adr : tendon_adr + tendon_num]``. ``wrap_prm`` holds the joint
coefficient (fixed tendons), the pulley divisor, or the side site id of a wrapping geom (-1 without
one; 0 for sites). Polynomial coefficients: ``stiffness="k1 k2 k3"`` gives ``tendon_stiffness`` k1
and ``tendon_stiffnesspoly`` (k2, k3), likewise for damping.

``tendon_lengthspring`` is the spring dead band. Where ``springlength`` is not given MuJoCo's
compiler sets it to the tendon length at ``qpos_spring``; this compiler does so for fixed tendons
and for spatial tendons through sites and pulleys when ``qpos_spring`` equals ``qpos0`` (the body
poses are then the compiled ones). Tendons that wrap around geoms, or whose sites move between
qpos0 and qpos_spring, keep the (-1, -1) sentinel for the compile-time constants pass
(``flexor.setconst``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from lxml import etree

from flexor.mjcf import frames
from flexor.mjcf.compile_body import Compiler, world_poses
from flexor.mjcf.defaults import Attributes, Defaults, attributes
from flexor.mjcf.parse import Source
from flexor.mjcf.values import LIMITED, Names, Reader, check_user, nuser, resolve_limited
from flexor.types import GeomType, JointType, WrapType

_SOLREF = (0.02, 1.0)
_SOLIMP = (0.9, 0.95, 0.001, 0.5, 2.0)


def _required(r: Reader, attr: str) -> None:
  if r.text(attr) is None:
    raise r.error("required attribute missing", attr)


def _wrap(child: etree._Element, source: Source, names: dict[str, Names],
          fields: dict[str, Any]) -> tuple[int, int, float]:
  """(wrap_type, wrap_objid, wrap_prm) of one path element."""
  r = Reader(source, Attributes(child, ()))
  if child.tag == "joint":
    _required(r, "joint")
    _required(r, "coef")
    jid = names["jnt"](r, "joint")
    if fields["jnt_type"][jid] not in (JointType.HINGE, JointType.SLIDE):
      raise r.error("a fixed tendon can use only slide and hinge joints", "joint")
    return WrapType.JOINT, jid, r.float("coef")
  if child.tag == "site":
    _required(r, "site")
    return WrapType.SITE, names["site"](r, "site"), 0.0
  if child.tag == "geom":
    _required(r, "geom")
    gid = names["geom"](r, "geom")
    gtype = fields["geom_type"][gid]
    if gtype not in (GeomType.SPHERE, GeomType.CYLINDER):
      raise r.error("a tendon can wrap only sphere and cylinder geoms", "geom")
    side = float(names["site"](r, "sidesite")) if child.get("sidesite") is not None else -1.0
    return (WrapType.SPHERE if gtype == GeomType.SPHERE else WrapType.CYLINDER), gid, side
  _required(r, "divisor")
  divisor = r.float("divisor")
  if divisor <= 0:
    raise r.error(f"a pulley divisor must be positive, got {divisor:g}", "divisor")
  return WrapType.PULLEY, -1, divisor


def _check_path(r: Reader, element: etree._Element, path: list[tuple[int, int, float]],
                armature: float) -> None:
  """MuJoCo's path rules (mjCTendon::Compile); errors point at the offending path element."""
  children = [c for c in element if isinstance(c.tag, str)]

  def fail(k: int, message: str):
    return Reader(r.source, Attributes(children[k], ())).error(message)

  if not path:
    raise r.error("a tendon path cannot be empty; add <joint> (fixed) or <site> (spatial) "
                  "elements")
  types = [p[0] for p in path]
  if element.tag == "spatial":
    if len(path) < 2:
      raise r.error("a spatial tendon path needs at least two elements")
    for k, t in enumerate(types):
      if t == WrapType.PULLEY:
        if k > 0 and types[k - 1] == WrapType.PULLEY:
          raise fail(k, "two consecutive pulleys in a spatial tendon path")
        if k == len(types) - 1:
          raise fail(k, "a spatial tendon path cannot end with a pulley")
      elif t == WrapType.SITE:
        alone_before = k == 0 or types[k - 1] == WrapType.PULLEY
        alone_after = k == len(types) - 1 or types[k + 1] == WrapType.PULLEY
        if alone_before and alone_after:
          raise fail(k, "a site in a spatial tendon needs a neighbour that is not a pulley")
        if k < len(types) - 1 and types[k + 1] == WrapType.SITE and path[k][1] == path[k + 1][1]:
          raise fail(k + 1, "the same site twice in a row in a spatial tendon path")
      elif t in (WrapType.SPHERE, WrapType.CYLINDER):
        if (k == 0 or k == len(types) - 1 or types[k - 1] != WrapType.SITE
            or types[k + 1] != WrapType.SITE):
          raise fail(k, "a wrapping geom must have a site before and after it in the path")
        if armature > 0:
          raise r.error("tendon armature is not supported with geom wrapping; set armature to "
                        "0 or remove the wrapping geoms", "armature")
  else:
    seen: set[int] = set()
    for k, (t, obj, _) in enumerate(path):
      if obj in seen:
        raise fail(k, "the same joint appears twice in a fixed tendon")
      seen.add(obj)


def _tendon(element: etree._Element, source: Source, defaults: Defaults, compiler: Compiler,
            names: dict[str, Names], fields: dict[str, Any]):
  """(row of tendon_* values, path) of one <fixed> or <spatial> element."""
  r = Reader(source, attributes(defaults, element, "tendon"))
  check_user(r, nuser(source, "tendon"), "tendon")
  path = [_wrap(c, source, names, fields) for c in element if isinstance(c.tag, str)]
  armature = r.float("armature", 0.0)
  if armature < 0:
    raise r.error(f"tendon armature cannot be negative, got {armature:g}", "armature")
  _check_path(r, element, path, armature)
  if element.tag == "spatial" and r.float("width", 0.003) <= 0:
    raise r.error("a spatial tendon needs a positive width", "width")
  rng = r.floats("range", 2, (0.0, 0.0))
  compiler = source.compiler_for(element, compiler)
  limited = resolve_limited(r, compiler.autolimits, "limited", r.keyword("limited", LIMITED, 2),
                            rng, "range", "tendon")
  if limited and rng[0] >= rng[1]:
    raise r.error("range[0] must be smaller than range[1] in a limited tendon", "range")
  frcrange = r.floats("actuatorfrcrange", 2, (0.0, 0.0))
  frclimited = resolve_limited(r, compiler.autolimits, "actuatorfrclimited",
                               r.keyword("actuatorfrclimited", LIMITED, 2), frcrange,
                               "actuatorfrcrange", "tendon")
  if frclimited and (frcrange[0] >= frcrange[1] or frcrange[0] > 0 or frcrange[1] < 0):
    raise r.error("actuatorfrcrange must be an interval that contains 0, lower bound first",
                  "actuatorfrcrange")
  spring = np.array([-1.0, -1.0])
  if r.has("springlength"):
    # one value means both ends; the nearest giver wins whole (MuJoCo reads 1 or 2 values)
    value = r.floats("springlength")
    if len(value) > 2:
      raise r.error(f"expected 1 or 2 numbers, got {len(value)}", "springlength")
    spring = np.array([value[0], value[-1]])
  if spring[0] > spring[1]:
    raise r.error("springlength must be one value or (lower, upper) with lower <= upper",
                  "springlength")
  springyield = r.float("springyield", 0.0)
  if springyield < 0:
    raise r.error(f"springyield cannot be negative, got {springyield:g}", "springyield")
  stiffness = r.floats("stiffness", 3, (0.0, 0.0, 0.0), at_most=True)
  damping = r.floats("damping", 3, (0.0, 0.0, 0.0), at_most=True)
  row = dict(
      limited=int(limited), actfrclimited=int(frclimited), range=rng, actfrcrange=frcrange,
      stiffness=stiffness[0], stiffnesspoly=stiffness[1:], damping=damping[0],
      dampingpoly=damping[1:], armature=armature, frictionloss=r.float("frictionloss", 0.0),
      lengthspring=spring, springyield=springyield, margin=r.float("margin", 0.0),
      solref_lim=r.floats("solreflimit", 2, _SOLREF, at_most=True),
      solimp_lim=r.floats("solimplimit", 5, _SOLIMP, at_most=True),
      solref_fri=r.floats("solreffriction", 2, _SOLREF, at_most=True),
      solimp_fri=r.floats("solimpfriction", 5, _SOLIMP, at_most=True),
      group=r.int("group", 0))
  return row, path


def compile_tendons(source: Source, defaults: Defaults, compiler: Compiler,
                    names: dict[str, Names], fields: dict[str, Any]) -> dict[str, Any]:
  """tendon_*, wrap_* and names_tendon, in document order."""
  rows: dict[str, list[Any]] = {}
  wraps: list[tuple[int, int, float]] = []
  tendon_names = []
  for section in source.sections("tendon"):
    for element in section:
      if element.tag not in ("fixed", "spatial"):
        continue
      row, path = _tendon(element, source, defaults, compiler, names, fields)
      row.update(adr=len(wraps), num=len(path))
      wraps += path
      for key, value in row.items():
        rows.setdefault(key, []).append(value)
      tendon_names.append(element.get("name", ""))
  if not rows:
    return {}
  out = {f"tendon_{k}": np.array(v) for k, v in rows.items()}
  out["names_tendon"] = tuple(tendon_names)
  out.update(wrap_type=np.array([w[0] for w in wraps], np.int32),
             wrap_objid=np.array([w[1] for w in wraps], np.int32),
             wrap_prm=np.array([w[2] for w in wraps], np.float64))
  _springlength(out, fields)
  return out


def _springlength(out: dict[str, Any], fields: dict[str, Any]) -> None:
  """Fills unset (-1, -1) ``tendon_lengthspring`` rows with the length at ``qpos_spring`` where
  that needs no tendon stage: fixed tendons, and site/pulley paths when qpos_spring == qpos0."""
  qpos0, qpos_spring = fields["qpos0"], fields["qpos_spring"]
  qposadr = np.concatenate([[0], np.cumsum([{0: 7, 1: 4}.get(int(t), 1)
                                            for t in fields["jnt_type"]])])
  rest = bool(np.array_equal(qpos0, qpos_spring))
  poses = None
  for t in range(len(out["tendon_num"])):
    if out["tendon_lengthspring"][t][0] != -1 or out["tendon_lengthspring"][t][1] != -1:
      continue
    adr, num = out["tendon_adr"][t], out["tendon_num"][t]
    types = out["wrap_type"][adr:adr + num]
    objs, prms = out["wrap_objid"][adr:adr + num], out["wrap_prm"][adr:adr + num]
    if np.all(types == WrapType.JOINT):
      length = 0.0
      for obj, coef in zip(objs, prms):
        length += coef * qpos_spring[qposadr[obj]]
    elif rest and np.all((types == WrapType.SITE) | (types == WrapType.PULLEY)):
      if poses is None:
        poses = world_poses(fields)
      length = _site_path_length(types, objs, prms, poses, fields)
    else:
      continue
    out["tendon_lengthspring"][t] = (length, length)


def _site_path_length(types, objs, prms, poses, fields) -> float:
  """Length of a site/pulley path (MuJoCo's mj_tendon without wrapping geoms)."""
  xpos, xquat = poses

  def site_pos(s):
    b = fields["site_bodyid"][s]
    return np.asarray(frames.frame_accum(xpos[b], xquat[b], fields["site_pos"][s],
                                         fields["site_quat"][s])[0])

  length, divisor = 0.0, 1.0
  for k in range(len(types) - 1):
    if types[k] == WrapType.PULLEY:
      divisor = prms[k]
      continue
    if types[k + 1] == WrapType.PULLEY:
      continue
    length += float(np.linalg.norm(site_pos(objs[k]) - site_pos(objs[k + 1]))) / divisor
  return length
