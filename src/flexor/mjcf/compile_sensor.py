"""Sensors: ``sensor_*`` fields in document order (MuJoCo's mjXReader::Sensor and
mjCSensor::Compile).

Each tag names one mjtSensor. Its object is given by one attribute (``site``, ``joint``,
``tendon``, ``actuator``, ``body``) or, for frame sensors, by ``objtype``/``objname`` with an
optional reference frame ``reftype``/``refname`` (for ``insidesite``, the ``site`` whose volume
may hold the object). Datatype, stage and dimension follow from the type; an actuator sensor
reports one value per force output.

flexor computes every type in ``flexor.sensor``'s table, rangefinders on sites and cameras
(one ray per pixel) included (``sensor_intprm[:, 0]`` holds the bits of their ``data`` fields),
and contact sensors (``sensor_intprm``: the bits of their ``data`` fields, the reduction, the
number of slots); any other type raises MJCFError.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from flexor.mjcf.compile_actuator import INTERP, MAX_SAMPLES
from flexor.mjcf.defaults import Attributes
from flexor.mjcf.parse import Source
from flexor.mjcf.values import Names, Reader, check_user, nuser
from flexor.mjcf.contact_pairs import DISTANCE_CCD, DISTANCE_PAIRS, HAS_FUNCTION
from flexor.types import DataType, GeomType, JointType, ObjType, SensorType, Stage

S = SensorType

# tag: (type, attribute naming the object, its ObjType); frame sensors use objtype/objname
_TAGS: dict[str, tuple[SensorType, str | None, ObjType]] = {
    "touch": (S.TOUCH, "site", ObjType.SITE),
    "accelerometer": (S.ACCELEROMETER, "site", ObjType.SITE),
    "velocimeter": (S.VELOCIMETER, "site", ObjType.SITE),
    "gyro": (S.GYRO, "site", ObjType.SITE),
    "force": (S.FORCE, "site", ObjType.SITE),
    "torque": (S.TORQUE, "site", ObjType.SITE),
    "magnetometer": (S.MAGNETOMETER, "site", ObjType.SITE),
    "rangefinder": (S.RANGEFINDER, "site", ObjType.SITE),
    "jointpos": (S.JOINTPOS, "joint", ObjType.JOINT),
    "jointvel": (S.JOINTVEL, "joint", ObjType.JOINT),
    "tendonpos": (S.TENDONPOS, "tendon", ObjType.TENDON),
    "tendonvel": (S.TENDONVEL, "tendon", ObjType.TENDON),
    "actuatorpos": (S.ACTUATORPOS, "actuator", ObjType.ACTUATOR),
    "actuatorvel": (S.ACTUATORVEL, "actuator", ObjType.ACTUATOR),
    "actuatorfrc": (S.ACTUATORFRC, "actuator", ObjType.ACTUATOR),
    "jointactuatorfrc": (S.JOINTACTFRC, "joint", ObjType.JOINT),
    "tendonactuatorfrc": (S.TENDONACTFRC, "tendon", ObjType.TENDON),
    "ballquat": (S.BALLQUAT, "joint", ObjType.JOINT),
    "ballangvel": (S.BALLANGVEL, "joint", ObjType.JOINT),
    "jointlimitpos": (S.JOINTLIMITPOS, "joint", ObjType.JOINT),
    "jointlimitvel": (S.JOINTLIMITVEL, "joint", ObjType.JOINT),
    "jointlimitfrc": (S.JOINTLIMITFRC, "joint", ObjType.JOINT),
    "tendonlimitpos": (S.TENDONLIMITPOS, "tendon", ObjType.TENDON),
    "tendonlimitvel": (S.TENDONLIMITVEL, "tendon", ObjType.TENDON),
    "tendonlimitfrc": (S.TENDONLIMITFRC, "tendon", ObjType.TENDON),
    "framepos": (S.FRAMEPOS, None, ObjType.UNKNOWN),
    "framequat": (S.FRAMEQUAT, None, ObjType.UNKNOWN),
    "framexaxis": (S.FRAMEXAXIS, None, ObjType.UNKNOWN),
    "frameyaxis": (S.FRAMEYAXIS, None, ObjType.UNKNOWN),
    "framezaxis": (S.FRAMEZAXIS, None, ObjType.UNKNOWN),
    "framelinvel": (S.FRAMELINVEL, None, ObjType.UNKNOWN),
    "frameangvel": (S.FRAMEANGVEL, None, ObjType.UNKNOWN),
    "framelinacc": (S.FRAMELINACC, None, ObjType.UNKNOWN),
    "frameangacc": (S.FRAMEANGACC, None, ObjType.UNKNOWN),
    "subtreecom": (S.SUBTREECOM, "body", ObjType.BODY),
    "subtreelinvel": (S.SUBTREELINVEL, "body", ObjType.BODY),
    "subtreeangmom": (S.SUBTREEANGMOM, "body", ObjType.BODY),
    "insidesite": (S.INSIDESITE, None, ObjType.UNKNOWN),
    "distance": (S.GEOMDIST, None, ObjType.UNKNOWN),
    "normal": (S.GEOMNORMAL, None, ObjType.UNKNOWN),
    "fromto": (S.GEOMFROMTO, None, ObjType.UNKNOWN),
    "e_potential": (S.E_POTENTIAL, None, ObjType.UNKNOWN),
    "e_kinetic": (S.E_KINETIC, None, ObjType.UNKNOWN),
    "clock": (S.CLOCK, None, ObjType.UNKNOWN),
    "contact": (S.CONTACT, None, ObjType.UNKNOWN),
    "camprojection": (S.CAMPROJECTION, "site", ObjType.SITE),
    "user": (S.USER, None, ObjType.UNKNOWN),
}

# sensorNeedstage, sensorDatatype and mjs_sensorDim of the types above
_ACC = {S.TOUCH, S.ACCELEROMETER, S.FORCE, S.TORQUE, S.ACTUATORFRC, S.JOINTACTFRC,
        S.TENDONACTFRC, S.JOINTLIMITFRC, S.TENDONLIMITFRC, S.FRAMELINACC, S.FRAMEANGACC}
_VEL = {S.VELOCIMETER, S.GYRO, S.JOINTVEL, S.TENDONVEL, S.ACTUATORVEL, S.BALLANGVEL,
        S.JOINTLIMITVEL, S.TENDONLIMITVEL, S.FRAMELINVEL, S.FRAMEANGVEL, S.SUBTREELINVEL,
        S.SUBTREEANGMOM}
_DATATYPE = {S.TOUCH: DataType.POSITIVE, S.INSIDESITE: DataType.POSITIVE,
             S.FRAMEXAXIS: DataType.AXIS, S.FRAMEYAXIS: DataType.AXIS, S.FRAMEZAXIS: DataType.AXIS,
             S.GEOMNORMAL: DataType.AXIS, S.BALLQUAT: DataType.QUATERNION,
             S.FRAMEQUAT: DataType.QUATERNION}
_DIM3 = {S.GEOMNORMAL, S.ACCELEROMETER, S.VELOCIMETER, S.GYRO, S.FORCE, S.TORQUE, S.MAGNETOMETER,
         S.BALLANGVEL, S.FRAMEPOS, S.FRAMEXAXIS, S.FRAMEYAXIS, S.FRAMEZAXIS, S.FRAMELINVEL,
         S.FRAMEANGVEL, S.FRAMELINACC, S.FRAMEANGACC, S.SUBTREECOM, S.SUBTREELINVEL,
         S.SUBTREEANGMOM}
_DIM4 = {S.BALLQUAT, S.FRAMEQUAT}
_DIM2 = {S.CAMPROJECTION}

_FRAME_OBJ = {"body": ObjType.BODY, "xbody": ObjType.XBODY, "geom": ObjType.GEOM,
              "site": ObjType.SITE, "camera": ObjType.CAMERA}
_FRAME_NAMES = {ObjType.BODY: "body", ObjType.XBODY: "body", ObjType.GEOM: "geom",
                ObjType.SITE: "site", ObjType.CAMERA: "camera"}
_NO_REF = {S.FRAMELINACC, S.FRAMEANGACC}
# a user sensor's object: any of these (MuJoCo takes any object; its value is the callback's)
_USER_OBJ = {**_FRAME_OBJ, "joint": ObjType.JOINT, "tendon": ObjType.TENDON,
             "actuator": ObjType.ACTUATOR}
_USER_NAMES = {**_FRAME_NAMES, ObjType.JOINT: "jnt", ObjType.TENDON: "tendon",
               ObjType.ACTUATOR: "actuator"}
_STAGES = {"none": Stage.NONE, "pos": Stage.POS, "vel": Stage.VEL, "acc": Stage.ACC}
_DATATYPES = {"real": DataType.REAL, "positive": DataType.POSITIVE, "axis": DataType.AXIS,
              "quaternion": DataType.QUATERNION}
# mjRAYDATA_*: dist, dir, origin, point, normal, depth and their sizes
_RAYDATA = {"dist": (0, 1), "dir": (1, 3), "origin": (2, 3), "point": (3, 3), "normal": (4, 3),
            "depth": (5, 1)}
# mjCONDATA_*: found, force, torque, dist, pos, normal, tangent, and MuJoCo 4's linvel, angvel
CONDATA = {"found": (0, 1), "force": (1, 3), "torque": (2, 3), "dist": (3, 1), "pos": (4, 3),
           "normal": (5, 3), "tangent": (6, 3), "linvel": (7, 3), "angvel": (8, 3)}
REDUCE = {"none": 0, "mindist": 1, "maxforce": 2, "netforce": 3}
_CONTACT_SIDES = (("geom1", ObjType.GEOM, "geom"), ("body1", ObjType.BODY, "body"),
                  ("subtree1", ObjType.XBODY, "body"), ("site", ObjType.SITE, "site"))


_TUPLES = ("intprm", "history")
_REALS = ("cutoff", "noise", "delay", "interval")


def _history(r: Reader) -> dict[str, Any]:
  """The sensor's history buffer: {history: (nsample, interp), delay, interval: (period,
  phase)}, validated as MuJoCo's compiler does."""
  nsample, delay = r.int("nsample", 0), r.float("delay", 0.0)
  interval = r.floats("interval", 2, (0.0, 0.0), at_most=True)
  if interval[0] < 0:
    raise r.error("negative interval in sensor", "interval")
  if interval[1] > 0:
    raise r.error("positive phase in sensor", "interval")
  if interval[0] > 0 and interval[1] <= -interval[0]:
    raise r.error("the phase must be greater than -period in sensor", "interval")
  if delay > 0 and nsample <= 0:
    raise r.error("delay > 0 needs a history buffer (nsample > 0)", "delay")
  if nsample > MAX_SAMPLES:
    raise r.error(f"at most 2^24 samples in a history buffer, got {nsample}", "nsample")
  return dict(history=(nsample, r.keyword("interp", INTERP, 0)), delay=delay,
              interval=tuple(interval))


def _frame_object(r: Reader, names: dict[str, Names], type_attr: str, name_attr: str,
                  kinds: dict[str, ObjType] = _FRAME_OBJ,
                  tables: dict[ObjType, str] = _FRAME_NAMES) -> tuple[int, int]:
  """(ObjType, id) of a frame sensor's object or reference frame (or a user sensor's object,
  with its wider ``kinds`` and name ``tables``)."""
  objtype = ObjType(r.keyword(type_attr, kinds, 0))
  if r.text(name_attr) is None:
    raise r.error(f"'{type_attr}' needs '{name_attr}'", name_attr)
  return int(objtype), names[tables[objtype]](r, name_attr, tables[objtype])


_GEOM_DISTANCE = (S.GEOMDIST, S.GEOMNORMAL, S.GEOMFROMTO)


def _user_sensor(r: Reader, tables: dict[str, Names]) -> tuple[int, int, int, int]:
  """(ObjType, id, dim, stage) of a ``<user>`` sensor. MuJoCo leaves its values to the
  ``mjcb_sensor`` callback, zeros without one; flexor has no callback, so they stay zero."""
  if r.has("objtype") != r.has("objname"):
    raise r.error("'objtype' and 'objname' must be given together", "objtype")
  objtype, objid = int(ObjType.UNKNOWN), -1
  if r.has("objtype"):
    if r.text("objtype") not in _USER_OBJ:
      raise r.error(f"a user sensor's object of type {r.text('objtype')!r} is not supported by "
                    "flexor yet", "objtype")
    objtype, objid = _frame_object(r, tables, "objtype", "objname", _USER_OBJ, _USER_NAMES)
  if not r.has("dim"):
    raise r.error("required attribute missing", "dim")
  dim = r.int("dim")
  if dim < 0:
    raise r.error(f"dim must be non-negative, got {dim}", "dim")
  return int(objtype), int(objid), dim, int(r.keyword("needstage", _STAGES, Stage.ACC))



def _geom_or_body(r: Reader, names: dict[str, Names], side: str) -> tuple[int, int]:
  """(ObjType, id) of a distance sensor's ``geom<side>`` or ``body<side>`` (exactly one)."""
  geom, body = f"geom{side}", f"body{side}"
  if r.has(geom) == r.has(body):
    raise r.error(f"exactly one of '{geom}' and '{body}' must be given", geom)
  if r.has(geom):
    return int(ObjType.GEOM), names["geom"](r, geom)
  return int(ObjType.BODY), names["body"](r, body)


def _check_distance_pairs(r: Reader, fields: dict[str, Any], objtype: int, objid: int,
                          reftype: int, refid: int) -> None:
  """Refuses distance sensors over geom type pairs flexor cannot measure: height fields (MuJoCo
  refuses them too)."""
  geom_type, bodyid = fields["geom_type"], fields["geom_bodyid"]
  geoms = lambda kind, i: ([i] if kind == ObjType.GEOM else
                           np.flatnonzero(bodyid == i).tolist())
  for g1 in geoms(objtype, objid):
    for g2 in geoms(reftype, refid):
      pair = tuple(sorted((int(geom_type[g1]), int(geom_type[g2]))))
      if pair in DISTANCE_PAIRS | DISTANCE_CCD or pair not in HAS_FUNCTION:
        continue
      kinds = "-".join(GeomType(t).name.lower() for t in pair)
      raise r.error(f"distance sensors between {kinds} geoms are not supported by flexor yet "
                    "(MuJoCo measures them with its convex solver)")


def _data_spec(r: Reader, table: dict[str, tuple[int, int]], default: str) -> tuple[int, int]:
  """(values per ray or contact, bit mask) of the ``data`` keywords of a rangefinder
  (mjRAYDATA) or a contact sensor (mjCONDATA), which must be in the table's order."""
  keys = (r.text("data") or default).split()
  last = -1
  dim = spec = 0
  for key in keys:
    if key not in table:
      raise r.error(f"invalid keyword {key!r}; expected some of {', '.join(table)}", "data")
    order, size = table[key]
    if order <= last:
      raise r.error(f"data attributes must be in order: {', '.join(table)}", "data")
    last, dim, spec = order, dim + size, spec | 1 << order
  return dim, spec


def _contact_object(r: Reader, names: dict[str, Names], sides: tuple[tuple[str, ObjType, str], ...]
                    ) -> tuple[int, int]:
  """(ObjType, id) of a contact sensor's matching criterion: at most one of ``sides``'
  attributes, none for any object."""
  given = [side for side in sides if r.has(side[0])]
  if len(given) > 1:
    raise r.error(f"at most one of {', '.join(repr(a) for a, _, _ in sides)} can be specified",
                  given[1][0])
  if not given:
    return int(ObjType.UNKNOWN), -1
  attr, objtype, kind = given[0]
  return int(objtype), names[kind](r, attr, kind)


def _contact_sensor(r: Reader, names: dict[str, Names]) -> tuple[int, ...]:
  """A contact sensor's objtype, objid, reftype, refid, dim, stage and intprm (data bits,
  reduction, slots). Its stage: acc where a force, a torque or the reduction needs the contact
  forces, vel for the velocities, else pos (MuJoCo 4)."""
  objtype, objid = _contact_object(r, names, _CONTACT_SIDES)
  reftype, refid = _contact_object(r, names, tuple(
      (a.replace("1", "2"), t, k) for a, t, k in _CONTACT_SIDES[:3]))
  num = r.int("num", 1)
  if num <= 0:
    raise r.error("'num' must be positive in sensor", "num")
  size, spec = _data_spec(r, CONDATA, "found")
  reduce = r.keyword("reduce", REDUCE, 0)
  velocities = spec & (1 << CONDATA["linvel"][0] | 1 << CONDATA["angvel"][0])
  if reduce == REDUCE["netforce"] and velocities:
    raise r.error("netforce reduction is incompatible with linvel or angvel", "reduce")
  forces = spec & (1 << CONDATA["force"][0] | 1 << CONDATA["torque"][0]) or reduce >= 2
  stage = Stage.ACC if forces else Stage.VEL if velocities else Stage.POS
  return objtype, objid, reftype, refid, num * size, int(stage), spec, reduce, num


def compile_sensors(source: Source, names: dict[str, Names],
                    fields: dict[str, Any]) -> dict[str, Any]:
  """sensor_* fields and names_sensor, in document order.

  Args:
    source: the parsed MJCF.
    names: name tables of bodies, joints, geoms, sites and tendons.
    fields: the model's arrays so far (joint types and limits, tendon limits, actuator outputs).
  Raises:
    MJCFError: an unknown or unsupported sensor type, a dangling or wrong-kind reference, a
      negative noise or cutoff, a cutoff on an axis or quaternion, or a repeated name.
  """
  actuators = Names(source, "actuator", fields.get("names_actuator", ()))
  tables = {**names, "actuator": actuators}
  jnt_type, jnt_limited = fields["jnt_type"], fields["jnt_limited"]
  tendon_limited = fields.get("tendon_limited", np.zeros(0, np.int32))
  outnum = fields.get("actuator_outnum", np.ones(len(actuators.ids), np.int32))
  n_user = nuser(source, "sensor")
  rows: dict[str, list[Any]] = {k: [] for k in ("type", "datatype", "needstage", "objtype",
                                                "objid", "reftype", "refid", "dim", "cutoff",
                                                "noise", "intprm", "history", "delay",
                                                "interval")}
  sensor_names: list[str] = []
  for section in source.sections("sensor"):
    for element in section:
      r = Reader(source, Attributes(element, ()))
      if element.tag not in _TAGS:
        raise source.error(element, f"<{element.tag}> sensors are not supported by flexor yet")
      stype, attr, objtype = _TAGS[element.tag]
      check_user(r, n_user, "sensor")
      noise, cutoff = r.float("noise", 0.0), r.float("cutoff", 0.0)
      if noise < 0:
        raise r.error(f"negative noise in sensor: {noise:g}", "noise")
      if cutoff < 0:
        raise r.error(f"negative cutoff in sensor: {cutoff:g}", "cutoff")
      history = _history(r)
      if stype == S.RANGEFINDER and r.has("camera") == r.has("site"):
        raise r.error("exactly one of 'site' and 'camera' must be given", "site")
      objid, reftype, refid = -1, int(ObjType.UNKNOWN), -1
      intprm = (0, 0, 0)
      stage = Stage.ACC if stype in _ACC else Stage.VEL if stype in _VEL else Stage.POS
      if stype == S.CONTACT:
        objtype, objid, reftype, refid, dim, stage, *intprm = _contact_sensor(r, names)
      elif stype == S.USER:
        objtype, objid, dim, stage = _user_sensor(r, tables)
      elif stype == S.RANGEFINDER and r.has("camera"):
        objtype, objid = ObjType.CAMERA, tables["camera"](r, "camera", "camera")
      elif attr is not None:
        if r.text(attr) is None:
          raise r.error("required attribute missing", attr)
        kind = {"joint": "jnt"}.get(attr, attr)
        objid = tables[kind](r, attr)
        if stype == S.TOUCH and fields["site_type"][objid] == GeomType.MESH:
          raise r.error("a touch sensor cannot be on a mesh site: MuJoCo 4.0.1 stops with a "
                        "fatal error there (mju_rayGeom: unexpected geom type 7)", "site")
        if stype == S.CAMPROJECTION:
          if r.text("camera") is None:
            raise r.error("required attribute missing", "camera")
          reftype, refid = int(ObjType.CAMERA), tables["camera"](r, "camera", "camera")
      elif stype in _GEOM_DISTANCE:
        objtype, objid = _geom_or_body(r, names, "1")
        reftype, refid = _geom_or_body(r, names, "2")
        if (objtype, objid) == (reftype, refid):
          raise r.error("1st body/geom must be different from 2nd body/geom")
        _check_distance_pairs(r, fields, objtype, objid, reftype, refid)
      elif stype not in (S.E_POTENTIAL, S.E_KINETIC, S.CLOCK):
        objtype, objid = _frame_object(r, names, "objtype", "objname")
        if stype == S.INSIDESITE:
          if r.text("site") is None:
            raise r.error("required attribute missing", "site")
          reftype, refid = int(ObjType.SITE), names["site"](r, "site")
        elif stype not in _NO_REF and r.has("reftype"):
          reftype, refid = _frame_object(r, names, "reftype", "refname")
      if stype not in (S.CONTACT, S.USER):
        dim = (3 if stype in _DIM3 else 4 if stype in _DIM4 else 2 if stype in _DIM2
               else 6 if stype == S.GEOMFROMTO else 1)
      if objtype == ObjType.JOINT:
        jtype = jnt_type[objid]
        if stype in (S.JOINTPOS, S.JOINTVEL, S.JOINTACTFRC) and jtype not in (JointType.SLIDE,
                                                                              JointType.HINGE):
          raise r.error("joint must be slide or hinge in sensor", attr)
        if stype in (S.BALLQUAT, S.BALLANGVEL) and jtype != JointType.BALL:
          raise r.error("joint must be ball in sensor", attr)
        if stype in (S.JOINTLIMITPOS, S.JOINTLIMITVEL, S.JOINTLIMITFRC) and not jnt_limited[objid]:
          raise r.error("joint must be limited in sensor", attr)
      if (stype in (S.TENDONLIMITPOS, S.TENDONLIMITVEL, S.TENDONLIMITFRC)
          and not tendon_limited[objid]):
        raise r.error("tendon must be limited in sensor", attr)
      if objtype == ObjType.ACTUATOR:
        dim = int(outnum[objid])
      if stype == S.RANGEFINDER:
        dim, spec = _data_spec(r, _RAYDATA, "dist")
        if objtype == ObjType.CAMERA:  # one ray per pixel
          dim *= int(np.prod(fields["cam_resolution"][objid]))
        intprm = (spec, 0, 0)
      datatype = (r.keyword("datatype", _DATATYPES, DataType.REAL) if stype == S.USER
                  else _DATATYPE.get(stype, DataType.REAL))
      axis = datatype in (DataType.AXIS, DataType.QUATERNION) and stype != S.GEOMNORMAL
      if cutoff > 0 and axis:
        raise r.error("cutoff applied to axis or quaternion datatype in sensor", "cutoff")
      name = element.get("name", "")
      if name and name in sensor_names:
        raise r.error(f"repeated sensor name {name!r}", "name")
      sensor_names.append(name)
      for key, value in (("type", stype), ("datatype", datatype), ("needstage", stage),
                         ("objtype", objtype), ("objid", objid), ("reftype", reftype),
                         ("refid", refid), ("dim", dim), ("cutoff", cutoff), ("noise", noise),
                         ("intprm", tuple(intprm)), *history.items()):
        rows[key].append(value if key in _TUPLES + _REALS else int(value))
  out: dict[str, Any] = {f"sensor_{k}": np.array(v, dtype=np.float64 if k in _REALS
                                                  else np.int32) for k, v in rows.items()}
  for key, width in (("intprm", 3), ("history", 2), ("interval", 2)):
    out[f"sensor_{key}"] = out[f"sensor_{key}"].reshape(-1, width)
  out["names_sensor"] = tuple(sensor_names)
  return out
