"""The kinematic tree: bodies, joints, geoms and sites in MuJoCo's numbering.

Bodies are numbered depth-first in document order (``<frame>`` elements are transparent: their
pose is composed into the bodies and elements inside them); a body's joints, geoms and sites
follow document order and are grouped by body, so their ids follow the body numbering.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Sequence

import numpy as np
from lxml import etree

from flexor.mjcf import frames, inertia, mesh
from flexor.mjcf.added_mass import FLUID_COEF, geom_fluid
from flexor.mjcf.defaults import Attributes, Defaults, attributes
from flexor.mjcf.parse import Source
from flexor.mjcf.values import LIMITED, Reader
from flexor.types import JNT_NQ, JNT_NV, GeomType, JointType

_ORIENTATIONS = ("quat", "axisangle", "euler", "xyaxes", "zaxis")
_JOINT_TYPES = {"free": JointType.FREE, "ball": JointType.BALL, "slide": JointType.SLIDE,
                "hinge": JointType.HINGE}
_GEOM_TYPES = {"plane": GeomType.PLANE, "hfield": GeomType.HFIELD, "sphere": GeomType.SPHERE,
               "capsule": GeomType.CAPSULE, "ellipsoid": GeomType.ELLIPSOID,
               "cylinder": GeomType.CYLINDER, "box": GeomType.BOX, "mesh": GeomType.MESH,
               "sdf": GeomType.SDF}
# number of leading size entries that must be positive, per geom type
_SIZE_REQUIRED = {GeomType.SPHERE: 1, GeomType.CAPSULE: 2, GeomType.CYLINDER: 2,
                  GeomType.ELLIPSOID: 3, GeomType.BOX: 3}
_SOLREF = (0.02, 1.0)
_SOLIMP = (0.9, 0.95, 0.001, 0.5, 2.0)
_UNIT = np.array([1.0, 0.0, 0.0, 0.0])
_CAMLIGHT = {"fixed": 0, "track": 1, "trackcom": 2, "targetbody": 3, "targetbodycom": 4}
INERTIA_FROM_GEOM = {"false": 0, "true": 1, "auto": 2}
_FLUID_SHAPES = {"none": 0, "ellipsoid": 1}
_ALIGN = {"false": 0, "true": 1, "auto": 2}
_ALIGNED = ("geom", "site", "cam", "light")  # the body's elements free-joint alignment moves



@dataclasses.dataclass
class Compiler:
  """``<compiler>`` settings the tree compiler needs (MuJoCo's defaults)."""

  degrees: bool = True
  eulerseq: str = "xyz"
  autolimits: bool = True
  inertiafromgeom: int = 2
  inertiagrouprange: tuple[int, int] = (0, 5)
  boundmass: float = 0.0
  boundinertia: float = 0.0
  balanceinertia: bool = False
  settotalmass: float = -1.0
  meshdir: str | None = None
  texturedir: str | None = None
  discardvisual: bool = False
  fitaabb: bool = False
  alignfree: bool = False
  fusestatic: bool = False


@dataclasses.dataclass
class Tree:
  """Per-element primary fields of the tree, in MuJoCo's order (lists, one entry per element)."""

  body: dict[str, list[Any]]
  jnt: dict[str, list[Any]]
  geom: dict[str, list[Any]]
  site: dict[str, list[Any]]
  cam: dict[str, list[Any]]
  light: dict[str, list[Any]]
  qpos0: list[float]
  qpos_spring: list[float]
  springdamper: list[np.ndarray] = dataclasses.field(default_factory=list)  # per joint
  nmocap: int = 0


def _new_tree() -> Tree:
  return Tree(body={k: [] for k in "parentid pos quat ipos iquat mass inertia gravcomp mocapid "
                    "name element".split()},
              jnt={k: [] for k in "type bodyid pos axis group limited actfrclimited actgravcomp "
                   "solref solimp stiffness stiffnesspoly springyield range actfrcrange margin "
                   "frictionloss armature damping dampingpoly dofsolref dofsolimp name "
                   "element".split()},
              geom={k: [] for k in "type contype conaffinity condim bodyid dataid group priority "
                    "solmix solref solimp size rbound pos quat friction margin gap adhesion "
                    "surfacevel fluid name element mass inertia rgba matid".split()},
              site={k: [] for k in "bodyid pos quat size type dataid name element".split()},
              cam={k: [] for k in "bodyid mode target pos quat projection fovy resolution "
                   "sensorsize intrinsic name element".split()},
              light={k: [] for k in "bodyid mode target pos dir name element".split()},
              qpos0=[], qpos_spring=[])


class TreeCompiler:
  """Walks ``<worldbody>`` and fills a :class:`Tree`."""

  def __init__(self, source: Source, defaults: Defaults, compiler: Compiler,
               meshes: dict[str, tuple[int, Any]], hfields: dict[str, tuple[int, Any]],
               materials: dict[str, tuple[int, np.ndarray]]):
    self.source, self.defaults, self.compiler = source, defaults, compiler
    self.meshes, self.hfields, self.materials = meshes, hfields, materials
    self.tree = _new_tree()

  # ----------------------------------------------------------------- helpers

  def settings(self, element: etree._Element | None) -> Compiler:
    """The ``<compiler>`` settings ``element`` is read with (an attached model's its own)."""
    return self.source.compiler_for(element, self.compiler)

  def reader(self, element: etree._Element, kind: str | None = None, *,
             use_defaults: bool = True) -> Reader:
    attrs = (attributes(self.defaults, element, kind) if use_defaults
             else Attributes(element, ()))
    return Reader(self.source, attrs)

  def orientation(self, r: Reader) -> np.ndarray | None:
    """The element's orientation quaternion (4,), or None if no orientation is given."""
    own = [k for k in _ORIENTATIONS if r.element.get(k) is not None]
    if len(own) > 1:
      raise r.error("multiple orientation specifiers are not allowed", own[1])
    kind = own[0] if own else next((k for k in _ORIENTATIONS if r.has(k)), None)
    if kind is None:
      return None
    value = r.floats(kind, {"quat": 4, "axisangle": 4, "euler": 3, "xyaxes": 6, "zaxis": 3}[kind])
    c = self.settings(r.element)
    try:
      return frames.orient_quat(kind, value, degrees=c.degrees, eulerseq=c.eulerseq)
    except ValueError as e:
      raise r.error(str(e), kind) from None

  def pose(self, r: Reader) -> tuple[np.ndarray, np.ndarray]:
    pos = r.floats("pos", 3, (0.0, 0.0, 0.0))
    quat = self.orientation(r)
    return pos, (_UNIT.copy() if quat is None else quat)

  @staticmethod
  def in_frame(frame: tuple[np.ndarray, np.ndarray] | None, pos: np.ndarray,
               quat: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    if frame is None:
      return pos, quat
    return frames.frame_accum(frame[0], frame[1], pos, quat)

  # ----------------------------------------------------------------- tree walk

  def compile(self) -> Tree:
    """Compiles every ``<worldbody>`` into the tree (the world body is body 0)."""
    b = self.tree.body
    for key, value in (("parentid", 0), ("pos", np.zeros(3)), ("quat", _UNIT.copy()),
                       ("gravcomp", 0.0), ("mocapid", -1), ("name", "world"), ("element", None)):
      b[key].append(value)
    worldbodies = [c for c in self.source.root if c.tag == "worldbody"]
    items: list[tuple[etree._Element, Any]] = []
    for world in worldbodies:
      items += self._collect(world, None)
    self._body_contents(0, items)
    if self.compiler.fusestatic:
      try:
        fuse_static(self.tree, *fusion_blockers(self.source))
      except ValueError as e:
        body, message = e.args
        raise self.source.error(self.tree.body["element"][body], message) from None
    # after fusing, as MuJoCo checks: a static parent fused into the world makes a free body
    # a child of the world
    j = self.tree.jnt
    for jtype, body, element in zip(j["type"], j["bodyid"], j["element"]):
      if jtype == JointType.FREE and self.tree.body["parentid"][body] != 0:
        raise self.source.error(element, "a free joint can only be used in a body that is a "
                                "child of the world body (<worldbody>); use a ball joint and "
                                "slide joints below another body")
    if self.compiler.settotalmass > 0:
      self._set_total_mass(self.compiler.settotalmass)
    return self.tree

  def _collect(self, element: etree._Element, frame) -> list[tuple[etree._Element, Any]]:
    """Children of a body with the frame each sits in, ``<frame>`` elements flattened."""
    out = []
    for child in element:
      if not isinstance(child.tag, str):
        continue
      if child.tag in ("flexcomp", "plugin"):
        # flexcomp adds bodies and geoms in MuJoCo (ignoring it would renumber the model); a
        # body plugin adds forces
        raise self.source.error(child, "this element is not supported by flexor yet")
      if child.tag == "frame":
        r = self.reader(child, use_defaults=False)
        pos, quat = self.pose(r)
        out += self._collect(child, self.in_frame(frame, pos, quat) if frame else (pos, quat))
      else:
        out.append((child, frame))
    return out

  def _body_contents(self, bodyid: int, items) -> None:
    """Joints, geoms, sites and inertia of body ``bodyid``, then its child bodies in order."""
    joints = [e for e, _ in items if e.tag in ("joint", "freejoint")]
    types = [JointType.FREE if e.tag == "freejoint"
             else self.reader(e, "joint").keyword("type", _JOINT_TYPES, JointType.HINGE)
             for e in joints]
    free = [e for e, t in zip(joints, types) if t == JointType.FREE]
    balls = [i for i, t in enumerate(types) if t == JointType.BALL]
    rotation = [e for e, t in zip(joints[balls[0] + 1:], types[balls[0] + 1:])
                if t in (JointType.BALL, JointType.HINGE)] if balls else []
    if free and len(joints) > 1:
      raise self.source.error(free[0], "a free joint must be the only joint of its body")
    if rotation:  # MuJoCo: "ball followed by rotation"
      raise self.source.error(rotation[0], "a hinge or ball joint cannot follow a ball joint in "
                              "the same body", "type")
    if sum(JNT_NV[t] for t in types) > 6:
      raise self.source.error(joints[-1], "more than 6 dofs in one body")
    for element, frame in items:
      if element.tag in ("joint", "freejoint"):
        self._joint(bodyid, element, frame)
    first = {kind: len(getattr(self.tree, kind)["bodyid"]) for kind in _ALIGNED}
    first_geom = first["geom"]
    for element, frame in items:
      if element.tag == "geom":
        self._geom(bodyid, element, frame)
      elif element.tag == "site":
        self._site(bodyid, element, frame)
      elif element.tag == "camera":
        self._camera(bodyid, element, frame)
      elif element.tag == "light":
        self._light(bodyid, element, frame)
    if bodyid > 0:
      inertial = [e for e, _ in items if e.tag == "inertial"]
      self._inertial(bodyid, inertial[0] if inertial else None, first_geom)
      if free and not any(e.tag == "body" for e, _ in items) and self._aligns(free[0]):
        self._align_free(bodyid, first)
    else:
      for key, value in (("ipos", np.zeros(3)), ("iquat", _UNIT.copy()), ("mass", 0.0),
                         ("inertia", np.zeros(3))):
        self.tree.body[key].append(value)
    for element, frame in items:
      if element.tag == "body":
        self._body(bodyid, element, frame)

  def _body(self, parent: int, element: etree._Element, frame) -> None:
    t = self.tree
    r = self.reader(element, use_defaults=False)
    pos, quat = self.in_frame(frame, *self.pose(r))
    bodyid = len(t.body["parentid"])
    mocap = r.bool("mocap", False)
    items = self._collect(element, None)
    if mocap:
      if parent != 0 or any(e.tag in ("joint", "freejoint") for e, _ in items):
        raise r.error(f"mocap body '{element.get('name', '')}' is not a fixed child of world",
                      "mocap")
      t.nmocap += 1
    for key, value in (("parentid", parent), ("pos", pos), ("quat", quat),
                       ("gravcomp", r.float("gravcomp", 0.0)),
                       ("mocapid", t.nmocap - 1 if mocap else -1),
                       ("name", element.get("name", "")), ("element", element)):
      t.body[key].append(value)
    self._body_contents(bodyid, items)

  # ----------------------------------------------------------------- joints

  def _joint(self, bodyid: int, element: etree._Element, frame) -> None:
    t, j = self.tree, self.tree.jnt
    free = element.tag == "freejoint"
    r = self.reader(element, "joint", use_defaults=not free)
    jtype = JointType.FREE if free else r.keyword("type", _JOINT_TYPES, JointType.HINGE)
    pos = np.zeros(3) if free else r.floats("pos", 3, (0.0, 0.0, 0.0))
    axis = np.array([0.0, 0.0, 1.0])
    if jtype in (JointType.HINGE, JointType.SLIDE):
      raw = r.floats("axis", 3, (0.0, 0.0, 1.0))
      axis, norm = frames.normvec(raw)
      if norm < frames.MJ_EPS:
        raise r.error("axis has zero length; give a nonzero direction", "axis")
      axis = np.array(axis)
    if frame is not None:
      pos, _ = frames.frame_accum(frame[0], frame[1], pos, _UNIT)
      if jtype in (JointType.HINGE, JointType.SLIDE):
        axis = np.array(frames.rot_vec_quat(axis, frame[1]))
    angular = jtype in (JointType.HINGE, JointType.BALL) and self.settings(r.element).degrees
    scale = scale_range = math.pi / 180.0 if angular else 1.0
    jrange = r.floats("range", 2, (0.0, 0.0))
    # MuJoCo ignores limits of free joints
    limited = jtype != JointType.FREE and self._limited(r, "limited", "range", jrange)
    if not limited:
      # MuJoCo converts a range to radians only where it is used as a limit
      scale_range = 1.0
    if limited and jtype == JointType.BALL and jrange[0] != 0:
      raise r.error("ball joint range[0] must be 0", "range")
    if limited and jtype in (JointType.HINGE, JointType.SLIDE) and jrange[0] >= jrange[1]:
      raise r.error("range[0] must be smaller than range[1]", "range")
    frcrange = r.floats("actuatorfrcrange", 2, (0.0, 0.0))
    frclimited = self._limited(r, "actuatorfrclimited", "actuatorfrcrange", frcrange)
    if jtype in (JointType.FREE, JointType.BALL):
      frclimited = False   # MuJoCo ignores actuator force limits of free and ball joints
    if frclimited and frcrange[0] >= frcrange[1]:
      raise r.error("actuatorfrcrange[0] must be smaller than actuatorfrcrange[1]",
                    "actuatorfrcrange")
    springdamper = np.zeros(2) if free else r.floats("springdamper", 2, (0.0, 0.0))
    if np.any(springdamper != 0) and not np.all(springdamper > 0):
      # MuJoCo then sets stiffness and damping from the joint inertia at qpos0 (flexor.setconst)
      raise r.error("springdamper (timeconst, dampratio) must both be positive when given",
                    "springdamper")
    springyield = 0.0 if free else r.float("springyield", 0.0)
    if springyield < 0:
      raise r.error(f"springyield cannot be negative, got {springyield:g}", "springyield")
    if springyield > 0 and jtype == JointType.FREE:
      raise r.error("springyield cannot be used on a free joint", "springyield")
    stiffness = (np.zeros(3) if free
                 else r.floats("stiffness", 3, (0.0, 0.0, 0.0), at_most=True))
    damping = np.zeros(3) if free else r.floats("damping", 3, (0.0, 0.0, 0.0), at_most=True)
    ref = (r.float("ref", 0.0) if not free else 0.0) * scale
    springref = (r.float("springref", 0.0) if not free else 0.0) * scale
    values = dict(
        type=int(jtype), bodyid=bodyid, pos=pos, axis=axis, group=r.int("group", 0),
        limited=int(limited), actfrclimited=int(frclimited),
        actgravcomp=int(r.bool("actuatorgravcomp", False)) if not free else 0,
        solref=r.floats("solreflimit", 2, _SOLREF, at_most=True),
        solimp=r.floats("solimplimit", 5, _SOLIMP, at_most=True),
        stiffness=stiffness[0], stiffnesspoly=stiffness[1:], range=jrange * scale_range,
        springyield=springyield * (math.pi / 180.0 if angular else 1.0), actfrcrange=frcrange,
        margin=r.float("margin", 0.0), frictionloss=r.float("frictionloss", 0.0),
        armature=r.float("armature", 0.0), damping=damping[0], dampingpoly=damping[1:],
        dofsolref=r.floats("solreffriction", 2, _SOLREF, at_most=True),
        dofsolimp=r.floats("solimpfriction", 5, _SOLIMP, at_most=True),
        name=element.get("name", ""), element=element)
    for key, value in values.items():
      j[key].append(value)
    t.springdamper.append(springdamper)
    if jtype == JointType.FREE:
      pose = list(t.body["pos"][bodyid]) + list(t.body["quat"][bodyid])
      t.qpos0 += pose
      t.qpos_spring += pose
    elif jtype == JointType.BALL:
      t.qpos0 += [1.0, 0.0, 0.0, 0.0]
      t.qpos_spring += [1.0, 0.0, 0.0, 0.0]
    else:
      t.qpos0.append(ref)
      t.qpos_spring.append(springref)

  def _aligns(self, joint: etree._Element) -> bool:
    """Whether a free body with no children moves its frame to its inertial frame: the free
    joint's ``align``, or with "auto" (the default) ``<compiler alignfree>``."""
    r = self.reader(joint, "joint", use_defaults=joint.tag != "freejoint")
    align = r.keyword("align", _ALIGN, 2)
    return align == 1 or (align == 2 and self.settings(joint).alignfree)

  def _align_free(self, bodyid: int, first: dict[str, int]) -> None:
    """MuJoCo's free-joint alignment (``mjCBody::Compile``): the body frame becomes its
    inertial frame, and its geoms, sites, cameras and lights (indices from ``first``) are
    re-expressed in it; the free joint's qpos0 is the new frame."""
    t, b = self.tree, self.tree.body
    ipos, iquat = b["ipos"][bodyid], b["iquat"][bodyid]
    b["pos"][bodyid], b["quat"][bodyid] = frames.frame_accum(b["pos"][bodyid], b["quat"][bodyid],
                                                             ipos, iquat)
    inv_pos, inv_quat = frames.frame_invert(ipos, iquat)
    b["ipos"][bodyid], b["iquat"][bodyid] = np.zeros(3), _UNIT.copy()
    for kind in ("geom", "site", "cam"):
      fields = getattr(t, kind)
      for i in range(first[kind], len(fields["bodyid"])):
        fields["pos"][i], fields["quat"][i] = frames.frame_accum(inv_pos, inv_quat,
                                                                 fields["pos"][i],
                                                                 fields["quat"][i])
    light = t.light
    for i in range(first["light"], len(light["bodyid"])):
      light["pos"][i] = frames.frame_accum(inv_pos, inv_quat, light["pos"][i], _UNIT)[0]
      light["dir"][i] = np.array(frames.rot_vec_quat(light["dir"][i], inv_quat))
    pose = list(b["pos"][bodyid]) + list(b["quat"][bodyid])
    t.qpos0[-7:], t.qpos_spring[-7:] = pose, pose

  def _limited(self, r: Reader, flag: str, range_name: str, values: np.ndarray) -> bool:
    """MuJoCo's limited/auto rule: with autolimits, auto means 'a range was given'."""
    limited = r.keyword(flag, LIMITED, 2)
    if limited != 2:
      return bool(limited)
    has_range = bool(values[0] < values[1])
    if has_range and not self.settings(r.element).autolimits:
      raise r.error(f"has '{range_name}' but not '{flag}'; set <compiler autolimits=\"true\"> or "
                    f"give '{flag}' explicitly", range_name)
    return has_range

  # ----------------------------------------------------------------- geoms and sites

  @staticmethod
  def _fromto(r: Reader, gtype: int, pos: np.ndarray, size: Sequence[float]
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """pos, quat and size of a geom or site placed by its ``fromto``. As in MuJoCo, a pos
    (given or from a default class) must then be zero: a zero one is ignored. The type is
    checked first, as MuJoCo checks it."""
    try:
      placed = inertia.geom_fromto(gtype, r.floats("fromto", 6), size)
    except ValueError as e:
      raise r.error(str(e), "fromto") from None
    if np.any(pos != 0):
      raise r.error(f"both pos and fromto defined in {r.element.tag}", "fromto")
    return placed

  def _geom(self, bodyid: int, element: etree._Element, frame) -> None:
    g = self.tree.geom
    r = self.reader(element)
    gtype = r.keyword("type", _GEOM_TYPES, GeomType.SPHERE)
    size = r.floats("size", 3, (0.0, 0.0, 0.0), at_most=True)
    pos, quat = self.pose(r)
    dataid, mesh_info = -1, None
    hfield_size = None
    surfacevel = np.array(r.floats("surfacevel", 6, (0.0,) * 6, at_most=True), dtype=float)
    if r.has("fromto"):
      pos, quat, size = self._fromto(r, gtype, pos, size)
    if gtype == GeomType.MESH or (gtype == GeomType.SDF and r.has("mesh")):
      name = r.text("mesh")
      if name is None or name not in self.meshes:
        raise r.error(f"unknown mesh {name!r}" if name else "mesh geom needs a 'mesh'", "mesh")
      dataid, mesh_info = self.meshes[name]
      pos, quat, size = self._mesh_frame(r, pos, quat, mesh_info)
      surfacevel = mesh.surface_velocity(surfacevel, mesh_info.pos, mesh_info.quat)
    elif gtype == GeomType.HFIELD:
      name = r.text("hfield")
      if name is None or name not in self.hfields:
        raise r.error(f"unknown hfield {name!r}" if name else "hfield geom needs an 'hfield'",
                      "hfield")
      dataid, hfield_size = self.hfields[name][0], self.hfields[name][1].size
      size = np.array([hfield_size[0], hfield_size[1],
                       0.5 * (0.5 * hfield_size[2] + hfield_size[3])])
    elif r.has("mesh"):
      pos, quat, size, surfacevel = self._fit_to_mesh(r, gtype, pos, quat, surfacevel)
    else:
      self._check_size(r, gtype, size)
    pos, quat = self.in_frame(frame, pos, quat)
    density = r.float("density", 1000.0)
    mass = r.float("mass")
    if mass is not None:
      r.positive("mass", mass)
    r.positive("density", density)
    shell = r.bool("shellinertia", False)
    try:
      gmass, ginertia = inertia.geom_mass_inertia(gtype, size, density=density, mass=mass,
                                                  shellinertia=shell, mesh=mesh_info)
      rbound = inertia.geom_rbound(gtype, size, mesh_info, hfield_size)
    except ValueError as e:
      raise r.error(str(e)) from None
    condim = r.int("condim", 3)
    if condim not in (1, 3, 4, 6):
      raise r.error(f"condim must be 1, 3, 4 or 6, got {condim}", "condim")
    material = r.text("material")
    if material is not None and material not in self.materials:
      raise r.error(f"unknown material {material!r}", "material")
    values = dict(
        type=int(gtype), contype=r.int("contype", 1), conaffinity=r.int("conaffinity", 1),
        condim=condim, bodyid=bodyid, dataid=dataid, group=r.int("group", 0),
        priority=r.int("priority", 0), solmix=r.float("solmix", 1.0),
        solref=r.floats("solref", 2, _SOLREF, at_most=True),
        solimp=r.floats("solimp", 5, _SOLIMP, at_most=True), size=np.asarray(size),
        rbound=rbound, pos=np.asarray(pos), quat=np.asarray(quat),
        friction=r.floats("friction", 3, (1.0, 0.005, 0.0001), at_most=True),
        margin=r.float("margin", 0.0), gap=r.float("gap", 0.0),
        adhesion=r.float("adhesion", 0.0), surfacevel=surfacevel,
        fluid=geom_fluid(gtype, size, r.keyword("fluidshape", _FLUID_SHAPES, 0),
                         r.floats("fluidcoef", 5, FLUID_COEF, at_most=True)),
        rgba=np.float32(r.floats("rgba", 4, (0.5, 0.5, 0.5, 1.0))),  # float in mjModel
        matid=-1 if material is None else self.materials[material][0],
        name=element.get("name", ""), element=element, mass=gmass, inertia=ginertia)
    for key, value in values.items():
      g[key].append(value)

  def _fit_to_mesh(self, r: Reader, gtype: int, pos, quat, surfacevel):
    """A primitive geom with a ``mesh``: MuJoCo fits its size to the mesh and composes the
    mesh frame into its own; the geom keeps no mesh."""
    name = r.text("mesh")
    if name not in self.meshes:
      raise r.error(f"unknown mesh {name!r}", "mesh")
    if r.has("fromto"):
      raise r.error("fromto cannot be used with mesh geom", "fromto")
    try:
      size, mesh_pos, mesh_quat = mesh.fit_geom(gtype, self.meshes[name][1],
                                                self.settings(r.element).fitaabb,
                                                r.float("fitscale", 1.0))
    except ValueError as e:
      raise r.error(str(e), "type") from None
    pos, quat = frames.frame_accum(pos, quat, mesh_pos, mesh_quat)
    return pos, quat, size, mesh.surface_velocity(surfacevel, mesh_pos, mesh_quat)

  @staticmethod
  def _mesh_frame(r: Reader, pos, quat, mesh_info):
    try:
      return mesh.mesh_geom(pos, quat, mesh_info)
    except ValueError as e:
      raise r.error(str(e), "mesh") from None

  @staticmethod
  def _check_size(r: Reader, gtype: int, size: np.ndarray) -> None:
    if gtype == GeomType.PLANE:
      if size[2] <= 0:
        raise r.error("plane size[2] (grid spacing) must be positive", "size")
      return
    for i in range(_SIZE_REQUIRED.get(gtype, 0)):
      if size[i] <= 0:
        raise r.error(f"size[{i}] must be positive for a {GeomType(gtype).name.lower()}, got "
                      f"{size[i]:g}", "size")

  def _site(self, bodyid: int, element: etree._Element, frame) -> None:
    s = self.tree.site
    r = self.reader(element)
    stype = r.keyword("type", _GEOM_TYPES, GeomType.SPHERE)
    size = r.floats("size", 3, (0.005, 0.005, 0.005), at_most=True)
    pos, quat = self.pose(r)
    if r.has("fromto"):
      pos, quat, size = self._fromto(r, stype, pos, size)
    dataid = -1
    if stype == GeomType.MESH:
      # the mesh's half-extents, as a mesh geom's size; unlike a geom, the site keeps its own
      # frame (insidesite places the mesh in it by the mesh's offset)
      name = r.text("mesh")
      if name is None or name not in self.meshes:
        raise r.error(f"unknown mesh {name!r}" if name else "mesh site needs a 'mesh'", "mesh")
      dataid, mesh_info = self.meshes[name]
      size = self._mesh_frame(r, pos, quat, mesh_info)[2]
    pos, quat = self.in_frame(frame, pos, quat)
    for key, value in (("bodyid", bodyid), ("pos", pos), ("quat", quat), ("size", size),
                       ("type", int(stype)), ("dataid", dataid), ("name", element.get("name", "")),
                       ("element", element)):
      s[key].append(value)

  def _camera(self, bodyid: int, element: etree._Element, frame) -> None:
    """A camera (mjCCamera::Compile): pose, mode, target and optics. With a sensor size, the
    intrinsics (focal length and principal point, m) come from focal/principal or their pixel
    forms, and fovy from the focal length; otherwise they are (znear, znear, 0, 0). mjModel
    keeps sizes and intrinsics in float32, so the arithmetic is float32 here too."""
    r = self.reader(element)
    pos, quat = self.in_frame(frame, *self.pose(r))
    fovy = r.float("fovy", 45.0)
    if fovy >= 180:
      raise r.error(f"fovy too large in camera: {fovy:g}", "fovy")
    resolution = r.ints("resolution")
    resolution = np.array([1, 1] if resolution is None else resolution, np.int64)
    f32 = lambda name: np.float32(r.floats(name, 2, (0.0, 0.0)))
    sensor, focal, focalpixel = f32("sensorsize"), f32("focal"), f32("focalpixel")
    principal, principalpixel = f32("principal"), f32("principalpixel")
    given = [a for a, v in (("focal", focal), ("focalpixel", focalpixel),
                            ("principal", principal), ("principalpixel", principalpixel))
             if np.any(v)]
    has_sensor = bool(sensor[0] > 0 and sensor[1] > 0)
    if given and not has_sensor:
      raise r.error("focal/principal require sensorsize in camera", given[0])
    if has_sensor and np.any(resolution <= 0):
      raise r.error("sensorsize requires positive resolution in camera", "resolution")
    if has_sensor:
      density = np.float32(resolution) / sensor
      pick = lambda pixel, length: np.where(pixel != 0, pixel / density, length)
      intrinsic = np.concatenate([pick(focalpixel, focal), pick(principalpixel, principal)])
      fovy = math.atan2(float(sensor[1] / np.float32(2)), float(intrinsic[1])) * 360.0 / math.pi
    else:
      intrinsic = np.array([self._znear(), self._znear(), 0.0, 0.0], np.float32)
    mode = r.keyword("mode", _CAMLIGHT, 0)
    projection = r.keyword("projection", {"perspective": 0, "orthographic": 1}, 0)
    for key, value in (("bodyid", bodyid), ("mode", mode), ("target", r.text("target")),
                       ("pos", pos), ("quat", quat), ("projection", projection), ("fovy", fovy),
                       ("resolution", resolution),
                       ("sensorsize", sensor), ("intrinsic", np.float32(intrinsic)),
                       ("name", element.get("name", "")), ("element", element)):
      self.tree.cam[key].append(value)

  def _znear(self) -> float:
    """``<visual><map znear>`` (mjVisual's float)."""
    znear = 0.01
    for visual in self.source.sections("visual"):
      for child in visual:
        if child.tag == "map" and child.get("znear") is not None:
          znear = Reader(self.source, Attributes(child, ())).float("znear")
    return float(np.float32(znear))

  def _light(self, bodyid: int, element: etree._Element, frame) -> None:
    """A light: position, unit direction (its body frame) and mode."""
    r = self.reader(element)
    pos = r.floats("pos", 3, (0.0, 0.0, 0.0))
    direction = r.floats("dir", 3, (0.0, 0.0, -1.0))
    if frame is not None:
      pos, _ = frames.frame_accum(frame[0], frame[1], pos, _UNIT)
      direction = np.asarray(frames.rot_vec_quat(direction, frame[1]))
    for key, value in (("bodyid", bodyid), ("mode", r.keyword("mode", _CAMLIGHT, 0)),
                       ("target", r.text("target")), ("pos", pos),
                       ("dir", np.array(frames.normvec(direction)[0])),
                       ("name", element.get("name", "")), ("element", element)):
      self.tree.light[key].append(value)

  # ----------------------------------------------------------------- inertia

  def _inertial(self, bodyid: int, element: etree._Element | None, first_geom: int) -> None:
    b, g = self.tree.body, self.tree.geom
    c = self.settings(b["element"][bodyid])
    # massless geoms (mass="0", planes) do not take part, as in MuJoCo
    ids = [i for i in range(first_geom, len(g["type"]))
           if c.inertiagrouprange[0] <= g["group"][i] <= c.inertiagrouprange[1]
           and g["mass"][i] > 0]
    from_geoms = c.inertiafromgeom == 1 or (c.inertiafromgeom == 2 and element is None)
    body_r = self.reader(b["element"][bodyid], use_defaults=False)
    if from_geoms and ids:
      try:
        mass, ipos, iquat, inert = inertia.body_inertial(
            [g["mass"][i] for i in ids], np.array([g["inertia"][i] for i in ids]),
            np.array([g["pos"][i] for i in ids]), np.array([g["quat"][i] for i in ids]))
      except ValueError as e:
        raise body_r.error(str(e)) from None
    elif element is not None and not from_geoms:
      r = self.reader(element, use_defaults=False)
      if element.get("pos") is None:
        raise r.error("required attribute missing", "pos")
      if element.get("mass") is None:
        raise r.error("required attribute missing", "mass")
      ipos = r.floats("pos", 3)
      mass = r.positive("mass", r.float("mass"))
      diag, full = r.floats("diaginertia", 3), r.floats("fullinertia", 6)
      quat = self.orientation(r)
      try:
        iquat, inert = inertia.explicit_inertial(diaginertia=diag, fullinertia=full, quat=quat)
      except ValueError as e:
        raise r.error(str(e), "fullinertia" if full is not None else "diaginertia") from None
      for value, name in zip(inert, ("diaginertia",) * 3):
        r.positive(name, value)
    else:
      mass, ipos, iquat, inert = 0.0, np.zeros(3), _UNIT.copy(), np.zeros(3)
    try:
      mass, inert = inertia.bound_inertial(mass, inert, boundmass=c.boundmass,
                                           boundinertia=c.boundinertia,
                                           balanceinertia=c.balanceinertia)
    except ValueError as e:
      raise body_r.error(str(e)) from None
    for key, value in (("ipos", ipos), ("iquat", iquat), ("mass", mass), ("inertia", inert)):
      b[key].append(value)

  def _set_total_mass(self, total: float) -> None:
    b = self.tree.body
    current = sum(b["mass"])
    if current <= 0:
      return
    scale = total / current
    b["mass"] = [m * scale for m in b["mass"]]
    b["inertia"] = [np.asarray(i) * scale for i in b["inertia"]]

  def finish(self) -> dict[str, np.ndarray]:
    """The primary-field arrays of the tree, sameframe flags included."""
    t = self.tree
    b, j, g, s = t.body, t.jnt, t.geom, t.site
    nbody = len(b["parentid"])
    body_sameframe = [int(frames.same_frame(b["ipos"][i], b["iquat"][i])) for i in range(nbody)]
    geom_sameframe = [int(frames.same_frame(g["pos"][i], g["quat"][i], b["ipos"][g["bodyid"][i]],
                                            b["iquat"][g["bodyid"][i]]))
                      for i in range(len(g["type"]))]
    site_sameframe = [int(frames.same_frame(s["pos"][i], s["quat"][i], b["ipos"][s["bodyid"][i]],
                                            b["iquat"][s["bodyid"][i]]))
                      for i in range(len(s["bodyid"]))]
    nv_j = [{0: 6, 1: 3}.get(k, 1) for k in j["type"]]

    def arr(values, shape, dtype=np.float64):
      return np.array(values, dtype=dtype).reshape((len(values),) + shape)

    def target(kind, rows):
      """Body ids of the ``target`` attributes of cameras or lights (-1: none)."""
      ids = []
      for name, element in zip(rows["target"], rows["element"]):
        if name is not None and name not in b["name"]:
          raise self.source.error(element, f"unknown target body {name!r} in {kind}", "target")
        ids.append(-1 if name is None else b["name"].index(name))
      return arr(ids, (), np.int32)

    def per_dof(values, shape):
      return np.array([v for v, n in zip(values, nv_j) for _ in range(n)],
                      dtype=np.float64).reshape((sum(nv_j),) + shape)

    out = dict(
        body_parentid=arr(b["parentid"], (), np.int32), body_pos=arr(b["pos"], (3,)),
        body_quat=arr(b["quat"], (4,)), body_ipos=arr(b["ipos"], (3,)),
        body_iquat=arr(b["iquat"], (4,)), body_mass=arr(b["mass"], ()),
        body_inertia=arr(b["inertia"], (3,)), body_gravcomp=arr(b["gravcomp"], ()),
        body_mocapid=arr(b["mocapid"], (), np.int32),
        body_sameframe=arr(body_sameframe, (), np.int32),
        jnt_type=arr(j["type"], (), np.int32), jnt_bodyid=arr(j["bodyid"], (), np.int32),
        jnt_pos=arr(j["pos"], (3,)), jnt_axis=arr(j["axis"], (3,)),
        jnt_group=arr(j["group"], (), np.int32), jnt_limited=arr(j["limited"], (), np.int32),
        jnt_actfrclimited=arr(j["actfrclimited"], (), np.int32),
        jnt_actgravcomp=arr(j["actgravcomp"], (), np.int32), jnt_solref=arr(j["solref"], (2,)),
        jnt_solimp=arr(j["solimp"], (5,)), jnt_stiffness=arr(j["stiffness"], ()),
        jnt_stiffnesspoly=arr(j["stiffnesspoly"], (2,)),
        jnt_springyield=arr(j["springyield"], ()),
        jnt_range=arr(j["range"], (2,)), jnt_actfrcrange=arr(j["actfrcrange"], (2,)),
        jnt_margin=arr(j["margin"], ()),
        dof_solref=per_dof(j["dofsolref"], (2,)), dof_solimp=per_dof(j["dofsolimp"], (5,)),
        dof_frictionloss=per_dof(j["frictionloss"], ()),
        dof_armature=per_dof(j["armature"], ()), dof_damping=per_dof(j["damping"], ()),
        dof_dampingpoly=per_dof(j["dampingpoly"], (2,)),
        geom_type=arr(g["type"], (), np.int32), geom_contype=arr(g["contype"], (), np.int32),
        geom_conaffinity=arr(g["conaffinity"], (), np.int32),
        geom_condim=arr(g["condim"], (), np.int32), geom_bodyid=arr(g["bodyid"], (), np.int32),
        geom_dataid=arr(g["dataid"], (), np.int32), geom_group=arr(g["group"], (), np.int32),
        geom_priority=arr(g["priority"], (), np.int32), geom_solmix=arr(g["solmix"], ()),
        geom_solref=arr(g["solref"], (2,)), geom_solimp=arr(g["solimp"], (5,)),
        geom_size=arr(g["size"], (3,)), geom_rbound=arr(g["rbound"], ()),
        geom_pos=arr(g["pos"], (3,)), geom_quat=arr(g["quat"], (4,)),
        geom_friction=arr(g["friction"], (3,)), geom_margin=arr(g["margin"], ()),
        geom_gap=arr(g["gap"], ()), geom_adhesion=arr(g["adhesion"], ()),
        geom_surfacevel=arr(g["surfacevel"], (6,)),
        geom_sameframe=arr(geom_sameframe, (), np.int32),
        geom_fluid=arr(g["fluid"], (12,)), geom_rgba=arr(g["rgba"], (4,)),
        geom_matid=arr(g["matid"], (), np.int32),
        site_bodyid=arr(s["bodyid"], (), np.int32), site_pos=arr(s["pos"], (3,)),
        site_quat=arr(s["quat"], (4,)), site_size=arr(s["size"], (3,)),
        site_sameframe=arr(site_sameframe, (), np.int32),
        site_dataid=arr(s["dataid"], (), np.int32),
        cam_bodyid=arr(t.cam["bodyid"], (), np.int32), cam_mode=arr(t.cam["mode"], (), np.int32),
        cam_targetbodyid=target("camera", t.cam), cam_pos=arr(t.cam["pos"], (3,)),
        cam_quat=arr(t.cam["quat"], (4,)), cam_fovy=arr(t.cam["fovy"], ()),
        cam_projection=arr(t.cam["projection"], (), np.int32),
        cam_resolution=arr(t.cam["resolution"], (2,), np.int32),
        cam_sensorsize=arr(t.cam["sensorsize"], (2,)),
        cam_intrinsic=arr(t.cam["intrinsic"], (4,)),
        light_bodyid=arr(t.light["bodyid"], (), np.int32),
        light_mode=arr(t.light["mode"], (), np.int32),
        light_targetbodyid=target("light", t.light), light_pos=arr(t.light["pos"], (3,)),
        light_dir=arr(t.light["dir"], (3,)),
        qpos0=np.array(t.qpos0, dtype=np.float64),
        qpos_spring=np.array(t.qpos_spring, dtype=np.float64),
        names_body=tuple(b["name"]), names_jnt=tuple(j["name"]), names_geom=tuple(g["name"]),
        names_site=tuple(s["name"]), names_cam=tuple(t.cam["name"]),
        names_light=tuple(t.light["name"]))
    return out


# Attributes that name a body, in the sections outside the tree (a joint, site or geom by the
# same name is another element); objtype/reftype name one where their type is a body's.
_BODY_REFERENCES = ("body", "body1", "body2", "subtree1", "subtree2")
_BODY_TYPES = ("body", "xbody")


def fusion_blockers(source: Source) -> tuple[set[str], set[str]]:
  """What keeps ``<compiler fusestatic>`` from fusing a body: the names of bodies that another
  element refers to (equality, exclude, actuator, sensor, tuple and skin references, camera and
  light targets), and the names of the sites of force and torque sensors (a body that holds
  one is kept, named or not, as MuJoCo 4.0 keeps it)."""
  bodies: set[str] = set()
  sites: set[str] = set()
  for kind in ("equality", "contact", "actuator", "sensor", "custom", "deformable"):
    for section in source.sections(kind):
      for e in section.iter():
        if not isinstance(e.tag, str):
          continue
        bodies.update(e.get(a) for a in _BODY_REFERENCES if e.get(a) is not None)
        for typ, name in (("objtype", "objname"), ("reftype", "refname")):
          if e.get(typ) in _BODY_TYPES and e.get(name) is not None:
            bodies.add(e.get(name))
        if kind == "sensor" and e.tag in ("force", "torque") and e.get("site") is not None:
          sites.add(e.get("site"))
  for world in source.sections("worldbody"):
    bodies.update(e.get("target") for e in world.iter("camera", "light")
                  if e.get("target") is not None)
  return bodies, sites


def fuse_static(tree: Tree, referred: set[str], sensed_sites: set[str]) -> None:
  """``<compiler fusestatic>`` (mjCModel::FuseStatic), in place: every body without joints that
  is not a mocap body, and whose name no other element uses (``fusion_blockers``), is merged
  into its parent. Its mass and inertia join the parent's (unless the parent is the world),
  its child bodies, geoms, sites, cameras and lights move to the parent with their frames
  composed with its own, and every element is renumbered depth-first as MuJoCo numbers them:
  the fused body's geoms (sites, ...) after the parent's own.

  Raises:
    ValueError(body id, message): a merged inertia is not positive definite.
  """
  b = tree.body
  nbody = len(b["parentid"])
  parent = list(b["parentid"])
  children: list[list[int]] = [[] for _ in range(nbody)]
  for i in range(1, nbody):
    children[parent[i]].append(i)
  kinds = ("jnt", "geom", "site", "cam", "light")
  owned = {k: [[] for _ in range(nbody)] for k in kinds}
  for kind in kinds:
    for e, body in enumerate(getattr(tree, kind)["bodyid"]):
      owned[kind][body].append(e)
  site_names = tree.site["name"]

  def fusable(body: int) -> bool:
    if b["name"][body] in referred or any(site_names[s] in sensed_sites
                                          for s in owned["site"][body]):
      return False
    return not owned["jnt"][body] and b["mocapid"][body] < 0

  order = list(range(nbody))
  i = 1
  while i < len(order):
    body = order[i]
    if not fusable(body):
      i += 1
      continue
    p, pos, quat = parent[body], b["pos"][body], b["quat"][body]
    if p != 0 and b["mass"][body] >= frames.MJ_MINVAL:
      fields = ("mass", "ipos", "iquat", "inertia")
      try:
        merged = inertia.accumulate_inertia(tuple(b[f][p] for f in fields),
                                            tuple(b[f][body] for f in fields), pos, quat)
      except ValueError:
        raise ValueError(p, "the inertia of the static bodies fused into this body must have "
                         "positive eigenvalues") from None
      for f, value in zip(fields, merged):
        b[f][p] = value
    for c in children[body]:
      b["pos"][c], b["quat"][c] = frames.frame_accum(pos, quat, b["pos"][c], b["quat"][c])
      parent[c] = p
    at = children[p].index(body)
    children[p][at:at + 1] = children[body]
    for kind in ("geom", "site", "cam"):
      rows = getattr(tree, kind)
      for e in owned[kind][body]:
        rows["pos"][e], rows["quat"][e] = frames.frame_accum(pos, quat, rows["pos"][e],
                                                             rows["quat"][e])
        if kind == "cam":
          rows["quat"][e] = np.array(frames.normvec(rows["quat"][e])[0])
    for e in owned["light"][body]:
      rows = tree.light
      rows["pos"][e] = frames.frame_accum(pos, quat, rows["pos"][e], _UNIT)[0]
      rows["dir"][e] = np.array(frames.normvec(frames.rot_vec_quat(rows["dir"][e], quat))[0])
    for kind in ("geom", "site", "cam", "light"):
      owned[kind][p] += owned[kind][body]
    order.pop(i)

  new = {old: k for k, old in enumerate(order)}
  for key in b:
    b[key] = [b[key][old] for old in order]
  b["parentid"] = [new[parent[old]] for old in order]
  for kind in kinds:
    rows = getattr(tree, kind)
    elements = [(new[body], e) for body in order for e in owned[kind][body]]
    for key in rows:
      rows[key] = [rows[key][e] for _, e in elements]
    rows["bodyid"] = [body for body, _ in elements]
  # a free joint's qpos0 is its body's pose, which fusing a static parent may have moved
  adr = 0
  for jtype, body in zip(tree.jnt["type"], tree.jnt["bodyid"]):
    if jtype == JointType.FREE:
      pose = list(b["pos"][body]) + list(b["quat"][body])
      tree.qpos0[adr:adr + 7], tree.qpos_spring[adr:adr + 7] = pose, pose
    adr += JNT_NQ[jtype]


def check_unique_names(source: Source, tree: Tree) -> None:
  """MuJoCo's 'repeated name' check: names are unique within each element kind."""
  for kind, rows in (("body", tree.body), ("joint", tree.jnt), ("geom", tree.geom),
                     ("site", tree.site), ("camera", tree.cam), ("light", tree.light)):
    seen: set[str] = set()
    for name, element in zip(rows["name"], rows["element"]):
      if name and name in seen:
        raise source.error(element, f"repeated {kind} name {name!r}", "name")
      seen.add(name)


def check_moving_mass(source: Source, tree: Tree) -> None:
  """MuJoCo's 'mass and inertia of moving bodies must be larger than mjMINVAL' check: every
  body with joints must carry mass in its subtree."""
  b = tree.body
  parent = b["parentid"]
  subtree = list(b["mass"])
  for i in range(len(parent) - 1, 0, -1):
    subtree[parent[i]] += subtree[i]
  jointed = set(tree.jnt["bodyid"])
  for i in sorted(jointed):
    if subtree[i] < 1e-15:
      raise source.error(b["element"][i], "mass and inertia of moving bodies must be larger than "
                         "1e-15 (give the body a geom with volume or an <inertial>)")


def world_poses(fields: dict[str, Any]) -> tuple[list[np.ndarray], list[np.ndarray]]:
  """Body world positions and orientations at qpos0, where every joint displacement is zero
  (MuJoCo's joint transforms use qpos - qpos0), from the compiled body_pos and body_quat."""
  xpos, xquat = [], []
  for b, parent in enumerate(fields["body_parentid"]):
    if b == 0:
      xpos.append(np.zeros(3))
      xquat.append(np.array([1.0, 0, 0, 0]))
      continue
    p, q = frames.frame_accum(xpos[parent], xquat[parent], fields["body_pos"][b],
                              fields["body_quat"][b])
    xpos.append(np.asarray(p))
    xquat.append(np.asarray(q))
  return xpos, xquat
