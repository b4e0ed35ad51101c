"""Actuators: ``actuator_*`` fields in MuJoCo 4's layout, with its reader and compiler checks.

Reading (``<default>`` classes and elements) follows MuJoCo's reader: every default class has one
actuator slot, copied from its parent class and rewritten by the class's actuator elements in
order; an actuator element starts from its class's slot. Shortcuts are expanded by the table in
``flexor.mjcf.shortcuts``. Compiling one actuator (mjCActuator::Compile) then resolves the
transmission, the SO3 / pid / dcmotor input blocks, ``inheritrange``, the limits and the
activation dimension.

Layout (MuJoCo 4): per actuator (nactuator) the types, ``trnid``, parameters and the blocks
``ctrl[ctrladr : ctrladr + ctrlnum]``, ``actuator_force[outadr : outadr + outnum]``,
``act[actadr : actadr + actnum]``; per control (nu) ``ctrllimited``/``ctrlrange``; per force output
(nout: one, or three for an SO3 transmission) ``gear`` and ``lengthrange``.

``dampratio`` is kept as MuJoCo's reader keeps it, a positive ``biasprm[2]``; MuJoCo's compiler
turns it into ``-kv`` from the inertia at qpos0, which is left to ``flexor.setconst``, as are
``actuator_acc0``, ``actuator_length0`` and the muscles' ``lengthrange``.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
from lxml import etree

from flexor.mjcf import shortcuts as sc
from flexor.mjcf.compile_body import Compiler
from flexor.mjcf.defaults import ACTUATOR_TAGS, Attributes, DefaultClass, Defaults, attributes
from flexor.mjcf.parse import Source
from flexor.mjcf.shortcuts import ActuatorSpec, Params
from flexor.mjcf.values import BOOL, LIMITED, Names, Reader, check_user, nuser
from flexor.types import BiasType, DynType, GainType, JointType, TrnType

_DYN = {"none": DynType.NONE, "integrator": DynType.INTEGRATOR, "filter": DynType.FILTER,
        "filterexact": DynType.FILTEREXACT, "muscle": DynType.MUSCLE,
        "dcmotor": DynType.DCMOTOR, "pid": DynType.PID, "user": DynType.USER}
_GAIN = {"fixed": GainType.FIXED, "affine": GainType.AFFINE, "muscle": GainType.MUSCLE,
         "dcmotor": GainType.DCMOTOR, "pid": GainType.PID, "so3": GainType.SO3,
         "user": GainType.USER}
_BIAS = {"none": BiasType.NONE, "affine": BiasType.AFFINE, "muscle": BiasType.MUSCLE,
         "dcmotor": BiasType.DCMOTOR, "so3": BiasType.SO3, "user": BiasType.USER}
INTERP = {"zoh": 0, "linear": 1, "cubic": 2}
# MuJoCo stores a history buffer's cursor as a number, exact up to 2^24 in single precision
MAX_SAMPLES = 1 << 24

# Mechanical attributes (MuJoCo's kGeneralAttrs rows): XML name, spec field, how to read it.
# "n" reads exactly n numbers, "n+" up to n over the current value; dicts are keywords.
_ROWS = (("group", "group", "int"), ("nsample", "nsample", "int"),
         ("interp", "interp", INTERP), ("delay", "delay", "1"), ("ctrlrange", "ctrlrange", "2"),
         ("ctrllimited", "ctrllimited", LIMITED), ("forcelimited", "forcelimited", LIMITED),
         ("actlimited", "actlimited", LIMITED), ("forcerange", "forcerange", "2"),
         ("actrange", "actrange", "2"), ("lengthrange", "lengthrange", "2"),
         ("gear", "gear", "6+"), ("damping", "damping", "3+"), ("armature", "armature", "1"),
         ("actdim", "actdim", "int"), ("velrange", "velrange", "2"), ("ffrange", "ffrange", "2"),
         ("dyntype", "dyntype", _DYN), ("gaintype", "gaintype", _GAIN),
         ("biastype", "biastype", _BIAS), ("dynprm", "dynprm", "10+"),
         ("gainprm", "gainprm", "10+"), ("biasprm", "biasprm", "10+"),
         ("actearly", "actearly", BOOL), ("cranklength", "cranklength", "1"),
         ("posrange", "ctrlrange", "2"))
# transmission targets in the order MuJoCo's reader reads them: the last one given wins
_TARGETS = (("joint", TrnType.JOINT), ("jointinparent", TrnType.JOINTINPARENT),
            ("tendon", TrnType.TENDON), ("cranksite", TrnType.SLIDERCRANK),
            ("site", TrnType.SITE), ("body", TrnType.BODY))
_SO3_PER_CHART = {sc.CHART_EXPMAP: 3, sc.CHART_QUAT: 4}


def _bits(value: int, mask: int) -> int:
  return bin(value & mask).count("1")


def _read_input(r: Reader) -> int | None:
  """The "input" attribute (MuJoCo's ReadInputSpec): a chart keyword, "none", or an ordered token
  list; None if absent."""
  text = r.element.get("input")
  if text is None:
    return None
  text = text.strip()
  if text in sc.INPUT_KEYWORDS:
    return sc.INPUT_KEYWORDS[text]
  spec, last = 0, 0
  for token in text.split():
    if token not in sc.INPUT_TOKENS:
      raise r.error(f"invalid keyword {token!r}; expected expmap, quat, none, or tokens of "
                    f"{', '.join(sc.INPUT_TOKENS)}", "input")
    bit = sc.INPUT_TOKENS[token]
    if bit & spec:
      raise r.error(f"duplicate input {token!r}", "input")
    if bit < last:
      raise r.error("inputs must be listed in canonical order [pos, vel, ff, voltage, pressure]",
                    "input")
    spec, last = spec | bit, bit
  return spec


def _read_rows(r: Reader, spec: ActuatorSpec, tag: str) -> None:
  """Overwrites ``spec`` with the element's own mechanical attributes."""
  for attr, field, kind in _ROWS + ((("inheritrange", "inheritrange", "1"),)
                                     if tag == "general" else ()):
    if r.element.get(attr) is None:
      continue
    if isinstance(kind, dict):
      setattr(spec, field, r.keyword(attr, kind, 0))
    elif kind == "int":
      setattr(spec, field, r.int(attr))
    elif kind.endswith("+"):
      setattr(spec, field, r.floats(attr, int(kind[:-1]), getattr(spec, field), at_most=True))
    elif kind == "1":
      setattr(spec, field, r.float(attr))
    else:
      setattr(spec, field, r.floats(attr, int(kind)))


def _read_params(r: Reader, s: Params, tag: str) -> None:
  """Overwrites the shortcut parameters ``s`` with the element's own parameter attributes."""
  for a in sc.SHORTCUTS[tag].attrs:
    if r.element.get(a.name) is None:
      continue
    current = getattr(s, a.field)
    if isinstance(current, np.ndarray):
      value = (r.floats(a.name, a.n, current, at_most=True) if a.partial
               else r.floats(a.name, a.n))
      current = np.array(current)
      current[:len(value)] = value
      setattr(s, a.field, current)
    else:
      setattr(s, a.field, r.float(a.name))
  if tag in ("position", "intvelocity") and r.element.get("timeconst") is not None:
    s.has_timeconst = True
  if tag in sc.DAMPED:
    kv, ratio = r.element.get("kv") is not None, r.element.get("dampratio") is not None
    if kv:
      s.kv, s.has_kv, s.has_dampratio = r.float("kv"), True, ratio
    if ratio:
      s.dampratio, s.has_dampratio, s.has_kv = r.float("dampratio"), True, kv
  if tag in sc.WITH_INPUT:
    value = _read_input(r)
    if value is not None:
      s.ctrlspec = value


class _Reader:
  """Builds ActuatorSpecs: the class slots, then one spec per actuator element."""

  def __init__(self, source: Source, defaults: Defaults):
    self.source, self.defaults = source, defaults
    self.slots: dict[str, ActuatorSpec] = {}
    for cls in defaults.classes.values():
      self.slot(cls)

  def slot(self, cls: DefaultClass) -> ActuatorSpec:
    """The actuator default of ``cls`` (its parent's, rewritten by its own elements)."""
    if cls.name not in self.slots:
      parent = self.slot(cls.parent) if cls.parent is not None else ActuatorSpec()
      spec = parent.copy()
      start = len(cls.parent.chain("actuator")) if cls.parent is not None else 0
      for element in cls.chain("actuator")[start:]:
        self.apply(spec, element, cls)
      self.slots[cls.name] = spec
    return self.slots[cls.name]

  def source_slot(self, current: ActuatorSpec, cls: DefaultClass, tag: str):
    """The slot shortcut ``tag`` takes its parameters from (MuJoCo's mjXShortcutSource)."""
    if sc.inherits(current, tag):
      return current
    node = cls.parent
    while node is not None:
      if sc.inherits(self.slot(node), tag):
        return self.slot(node)
      node = node.parent
    return None

  def apply(self, spec: ActuatorSpec, element: etree._Element, cls: DefaultClass) -> None:
    """Reads one actuator element (or default element) into ``spec``."""
    tag = element.tag
    r = Reader(self.source, Attributes(element, ()))
    if tag == "plugin":
      raise r.error("actuator plugins are not supported by flexor yet",
                    "plugin" if element.get("plugin") is not None else "instance")
    params = None if tag == "general" else sc.params_from(self.source_slot(spec, cls, tag), tag)
    gaintype = spec.gaintype
    _read_rows(r, spec, tag)
    if tag == "general":
      value = _read_input(r)
      if value is not None:
        spec.ctrlspec = value
      elif spec.gaintype != gaintype:
        spec.ctrlspec = 0   # an inherited input signature belongs to the old gain type
      spec.type = "general"
      return
    row = sc.SHORTCUTS[tag]
    _read_params(r, params, tag)
    if row.range_attr is not None:
      # an explicit range and an explicit inheritrange each override the other's default
      gives_range = any(element.get(a) is not None for a in (row.range_attr, "posrange")
                        if a != "posrange" or tag == "pid")
      gives_inherit = element.get("inheritrange") is not None and params.inheritrange > 0
      if gives_range and not gives_inherit:
        params.inheritrange = 0.0
      if gives_inherit and not gives_range:
        setattr(spec, row.range_attr, np.zeros(2))
    if tag == "dcmotor" and element.get("saturation") is not None:
      # an authored saturation replaces the inherited force limits (MuJoCo 4)
      spec.forcerange, spec.forcelimited = np.zeros(2), sc.LIMITED_AUTO
    if tag == "dcmotor" and element.get("inductance") is not None:
      # an authored inductance replaces both inherited values (L or the time constant)
      params.inductance = r.floats("inductance", 2, np.zeros(2), at_most=True)
    error = row.set(spec, params)
    if error:
      raise Reader(self.source, attributes(self.defaults, element)).error(*error)

  def spec(self, element: etree._Element) -> ActuatorSpec:
    cls = self.defaults.class_of(element)
    spec = self.slot(cls).copy()
    self.apply(spec, element, cls)
    return spec


def _dcmotor_states(a: ActuatorSpec) -> int:
  """Activation states of a DC motor: slew, integral, temperature, bristle, current."""
  d, g = a.dynprm, a.gainprm
  return int(d[7] > 0) + int(g[5] > 0) + int(d[2] > 0) + int(d[5] > 0) + int(d[0] > 0)


def _limited(value: int, rng: np.ndarray) -> bool:
  """MuJoCo's islimited: true, or auto with a nonempty range."""
  return value == sc.LIMITED_TRUE or (value == sc.LIMITED_AUTO and bool(rng[0] < rng[1]))


class _Compiler:
  """Compiles ActuatorSpecs (mjCActuator::Compile): transmission, blocks, ranges, checks."""

  def __init__(self, source: Source, defaults: Defaults, compiler: Compiler,
               names: dict[str, Names], fields: dict[str, Any]):
    self.source, self.defaults, self.compiler = source, defaults, compiler
    self.names, self.fields = names, fields

  def transmission(self, r: Reader, element: etree._Element) -> tuple[int, list[int]]:
    """(trntype, trnid) from the element's target attributes (the last one read wins)."""
    given = [(a, t) for a, t in _TARGETS if element.get(a) is not None]
    if element.get("cranklength") is not None or element.get("slidersite") is not None:
      if given and given[-1][1] != TrnType.SLIDERCRANK:
        attr = "cranklength" if element.get("cranklength") is not None else "slidersite"
        raise r.error("cranklength and slidersite can only be used with a cranksite "
                      "(slider-crank) transmission", attr)
    if element.get("refsite") is not None and given and given[-1][1] != TrnType.SITE:
      raise r.error("refsite can only be used with a site transmission", "refsite")
    if not given:
      raise r.error("an actuator needs a transmission target: give joint, jointinparent, "
                    "tendon, site, cranksite or body")
    attr, trntype = given[-1]
    names = self.names
    if trntype in (TrnType.JOINT, TrnType.JOINTINPARENT):
      return trntype, [names["jnt"](r, attr, "transmission joint"), -1]
    if trntype == TrnType.TENDON:
      return trntype, [names["tendon"](r, attr, "transmission tendon"), -1]
    if trntype == TrnType.BODY:
      return trntype, [names["body"](r, attr, "transmission body"), -1]
    if trntype == TrnType.SLIDERCRANK:
      if element.get("slidersite") is None:
        raise r.error("a slider-crank transmission needs a slidersite", "slidersite")
      slider = names["site"](r, "slidersite", "slidersite")
      return trntype, [names["site"](r, attr, "cranksite"), slider]
    ref = names["site"](r, "refsite", "refsite") if element.get("refsite") is not None else -1
    return trntype, [names["site"](r, attr, "transmission site"), ref]

  def compile(self, element: etree._Element, a: ActuatorSpec) -> dict[str, Any]:
    """One actuator's row: per-actuator values, per-control (limited, range) list, outnum.

    Errors point at the actuator element (the attribute they name may come from its class)."""
    r = Reader(self.source, Attributes(element, ()))
    trntype, trnid = self.transmission(r, element)
    if a.delay > 0 and a.nsample <= 0:
      raise r.error("delay > 0 needs a history buffer (nsample > 0)", "delay")
    if a.nsample > MAX_SAMPLES:
      raise r.error(f"at most 2^24 samples in a history buffer, got {a.nsample}", "nsample")
    if trntype == TrnType.SLIDERCRANK and a.cranklength <= 0:
      raise r.error(f"a slider-crank needs a positive cranklength, got {a.cranklength:g}",
                    "cranklength")
    ctrlnum, ctrlspec, outnum, so3 = 1, 0, 1, False
    jnt_type = self.fields["jnt_type"]
    # damping and armature act on a joint or tendon target (an SO3 servo's ball joint counts)
    on_target = trntype in (TrnType.JOINT, TrnType.JOINTINPARENT, TrnType.TENDON)
    if a.gaintype == GainType.SO3 or a.biastype == BiasType.SO3:
      trntype, ctrlspec, ctrlnum = self._so3(r, a, trntype, trnid, jnt_type)
      outnum, so3 = 3, True
    if a.gaintype == GainType.PID:
      ctrlspec, ctrlnum = self._pid(r, a, trntype)
    if a.gaintype == GainType.DCMOTOR:
      ctrlspec, ctrlnum = self._dcmotor_inputs(r, a)
    if a.gaintype in (GainType.FIXED, GainType.AFFINE):
      if a.ctrlspec not in (0, sc.INPUT_POS, sc.INPUT_VEL, sc.INPUT_PRESSURE):
        raise r.error("fixed and affine gains take one input: 'pos', 'vel' or 'pressure'",
                      "input")
      ctrlspec = a.ctrlspec
    if a.gaintype in (GainType.MUSCLE, GainType.USER) and a.ctrlspec:
      raise r.error("input is not available for muscle and user gains", "input")
    if a.dyntype == DynType.PID and a.gaintype != GainType.PID:
      raise r.error("dyntype 'pid' requires gaintype 'pid'", "dyntype")
    if np.any(a.damping != 0) and not on_target:
      raise r.error("damping requires a joint or tendon transmission", "damping")
    if a.armature != 0 and not on_target:
      raise r.error("armature requires a joint or tendon transmission", "armature")
    self._inheritrange(r, a, trntype, trnid)
    for flag, rng, what in (("forcelimited", "forcerange", "force"),
                            ("ctrllimited", "ctrlrange", "ctrl"),
                            ("actlimited", "actrange", "act")):
      value, values = getattr(a, flag), getattr(a, rng)
      autolimits = self.source.compiler_for(r.element, self.compiler).autolimits
      if value == sc.LIMITED_AUTO and not autolimits and np.any(values != 0):
        raise r.error(f"actuator has '{rng}' but not '{flag}'; set <compiler "
                      f"autolimits=\"true\">, give '{flag}' explicitly or remove '{rng}'", rng)
      if _limited(value, values) and values[0] >= values[1]:
        raise r.error(f"invalid {what} range: the lower bound must be smaller than the upper",
                      rng)
    if _limited(a.actlimited, a.actrange) and a.dyntype == DynType.NONE:
      raise r.error("actrange given but the actuator has no activation (dyntype 'none')",
                    "actrange")
    actnum = self._actdim(r, a, so3)
    if a.gaintype == GainType.DCMOTOR and a.dyntype != DynType.DCMOTOR:
      # MuJoCo's engine refuses this when the compiler first evaluates the model
      need = _dcmotor_states(a)
      if need != actnum:
        raise r.error(f"a dcmotor gain with these parameters needs {need} activation states, "
                      f"got {actnum}; use dyntype 'dcmotor'", "gaintype")
    if a.dyntype == DynType.DCMOTOR and not a.actearly:
      raise r.error("actearly cannot be false for a DC motor actuator", "actearly")
    if (a.delay > 0 or a.nsample > 0) and ctrlnum == 0:
      raise r.error("a history buffer or delay needs an actuator with an input",
                    "nsample" if a.nsample > 0 else "delay")
    self._muscle(r, a)
    controls = [(_limited(a.ctrllimited, a.ctrlrange), np.array(a.ctrlrange))] * ctrlnum
    if a.gaintype == GainType.PID:
      j = 1 if ctrlspec & sc.INPUT_POS else 0
      for bit, rng in ((sc.INPUT_VEL, a.velrange), (sc.INPUT_FF, a.ffrange)):
        if ctrlspec & bit:
          controls[j] = (bool(rng[0] < rng[1]), np.array(rng))
          j += 1
    return dict(trntype=trntype, dyntype=a.dyntype, gaintype=a.gaintype, biastype=a.biastype,
                trnid=trnid, ctrlnum=ctrlnum, ctrlspec=ctrlspec, outnum=outnum, actnum=actnum,
                group=a.group, forcelimited=int(_limited(a.forcelimited, a.forcerange)),
                actlimited=int(_limited(a.actlimited, a.actrange)), actearly=int(a.actearly),
                dynprm=a.dynprm, gainprm=a.gainprm, biasprm=a.biasprm, forcerange=a.forcerange,
                actrange=a.actrange, cranklength=a.cranklength, damping=a.damping[0],
                dampingpoly=a.damping[1:], armature=a.armature, controls=controls,
                gear=a.gear, lengthrange=a.lengthrange, history=(a.nsample, a.interp),
                delay=a.delay)

  def _so3(self, r: Reader, a: ActuatorSpec, trntype: int, trnid: list[int], jnt_type):
    """The SO3 (orientation) block: (trntype SO3, chart, ctrlnum); validates the servo."""
    if a.gaintype != GainType.SO3 or a.biastype != BiasType.SO3:
      raise r.error("gaintype and biastype must both be 'so3'", "gaintype")
    if a.dyntype not in (DynType.NONE, DynType.INTEGRATOR):
      raise r.error("an so3 actuator needs dyntype 'none' or 'integrator'", "dyntype")
    if a.gainprm[0] != -a.biasprm[1]:
      raise r.error("an so3 actuator needs gainprm[0] == -biasprm[1] (kp)", "gainprm")
    if trntype == TrnType.SITE:
      if trnid[1] < 0:
        raise r.error("an so3 site transmission needs a refsite", "site")
    elif trntype == TrnType.JOINT:
      if jnt_type[trnid[0]] != JointType.BALL:
        raise r.error("an so3 joint transmission needs a ball joint", "joint")
    else:
      raise r.error("an so3 actuator needs a site (with refsite) or ball joint transmission")
    if a.dyntype == DynType.INTEGRATOR:
      if a.actdim > 0 and a.actdim != 3:
        raise r.error("an so3 integrator needs actdim 3", "actdim")
      a.actdim = 3
      if a.actlimited == sc.LIMITED_TRUE and not np.any(a.actrange != 0):
        a.actlimited = sc.LIMITED_FALSE
    chart = a.ctrlspec or sc.CHART_EXPMAP
    if chart == sc.CHART_QUAT and a.dyntype != DynType.NONE:
      raise r.error("the quat input of an so3 actuator needs dyntype 'none'", "input")
    if chart not in _SO3_PER_CHART:
      raise r.error("the input of an so3 actuator must be expmap or quat", "input")
    if _limited(a.forcelimited, a.forcerange) and a.forcerange[0] != 0:
      raise r.error("an so3 forcerange bounds the torque norm: its lower bound must be 0",
                    "forcerange")
    return TrnType.SO3, chart, _SO3_PER_CHART[chart]

  def _pid(self, r: Reader, a: ActuatorSpec, trntype: int) -> tuple[int, int]:
    """The pid block: (input signature, ctrlnum); sets actdim to the controller states."""
    if a.biastype != BiasType.AFFINE:
      raise r.error("a pid actuator needs biastype 'affine'", "biastype")
    if a.dyntype not in (DynType.NONE, DynType.PID):
      raise r.error("a pid actuator needs dyntype 'none' or 'pid'", "dyntype")
    if a.dyntype == DynType.NONE and a.gainprm[0]:
      raise r.error("ki (gainprm[0]) needs dyntype 'pid'", "ki" if r.has("ki") else "gainprm")
    if trntype == TrnType.BODY:
      raise r.error("a pid actuator cannot use a body transmission", "body")
    if a.dyntype == DynType.PID:
      if a.dynprm[0] < 0:
        raise r.error("imax (dynprm[0]) must be non-negative", "imax" if r.has("imax") else
                      "dynprm")
      if a.dynprm[1] < 0:
        raise r.error("slewmax (dynprm[1]) must be non-negative", "dynprm")
      nslot = int(a.dynprm[1] > 0) + int(a.gainprm[0] > 0)
      if a.actdim > 0 and a.actdim != nslot:
        raise r.error(f"the pid controller states need actdim {nslot}", "actdim")
      a.actdim = nslot
    spec = a.ctrlspec or (sc.INPUT_POS | sc.INPUT_VEL)
    if spec & ~(sc.INPUT_POS | sc.INPUT_VEL | sc.INPUT_FF):
      raise r.error("pid inputs are a subset of [pos, vel, ff]", "input")
    if a.dyntype == DynType.PID and not spec & sc.INPUT_POS:
      raise r.error("pid controller states (ki, slewmax) need the pos input", "input")
    return spec, _bits(spec, sc.INPUT_POS | sc.INPUT_VEL | sc.INPUT_FF)

  def _dcmotor_inputs(self, r: Reader, a: ActuatorSpec) -> tuple[int, int]:
    """The dcmotor input block: (input signature, ctrlnum), default the raw voltage."""
    spec = a.ctrlspec or sc.INPUT_VOLTAGE
    allowed = sc.INPUT_POS | sc.INPUT_VEL | sc.INPUT_FF | sc.INPUT_VOLTAGE
    if spec != sc.INPUT_NONE and spec & ~allowed:
      raise r.error("dcmotor inputs are 'none' or a subset of [pos, vel, ff, voltage]", "input")
    controller = 0 if spec == sc.INPUT_NONE else spec & (sc.INPUT_POS | sc.INPUT_VEL | sc.INPUT_FF)
    if controller and a.gainprm[1] <= 0:
      raise r.error("dcmotor controller inputs need a positive motor constant", "motorconst")
    if not controller and (a.gainprm[4] or a.gainprm[5] or a.gainprm[6]):
      raise r.error("dcmotor controller gains need a controller input [pos, vel, ff]",
                    "controller" if r.has("controller") else "gainprm")
    if a.gainprm[5] > 0 and not spec & sc.INPUT_POS:
      raise r.error("the dcmotor integral gain needs the pos input", "input")
    if not controller and a.dynprm[7] > 0:
      raise r.error("dcmotor slew rate limiting needs a controller input [pos, vel, ff]",
                    "controller" if r.has("controller") else "dynprm")
    return spec, 0 if spec == sc.INPUT_NONE else _bits(spec, allowed)

  def _inheritrange(self, r: Reader, a: ActuatorSpec, trntype: int, trnid: list[int]) -> None:
    """Sets ctrlrange (or actrange of integrators) from the target's range."""
    servo = ((a.gaintype == GainType.FIXED and a.gainprm[0] == -a.biasprm[1])
             or a.gaintype == GainType.PID)
    if not (servo and a.biastype == BiasType.AFFINE and a.inheritrange > 0):
      return
    if a.dyntype in (DynType.NONE, DynType.FILTEREXACT, DynType.PID):
      field = "ctrlrange"
    elif a.dyntype == DynType.INTEGRATOR:
      field = "actrange"
    else:
      raise r.error("inheritrange is available only for position and intvelocity actuators",
                    "inheritrange")
    if trntype == TrnType.JOINT:
      if self.fields["jnt_type"][trnid[0]] not in (JointType.HINGE, JointType.SLIDE):
        raise r.error("inheritrange can only be used with hinge and slide joints",
                      "inheritrange")
      target = self.fields["jnt_range"][trnid[0]]
    elif trntype == TrnType.TENDON:
      target = self.fields["tendon_range"][trnid[0]]
    else:
      raise r.error("inheritrange can only be used with joint and tendon transmissions",
                    "inheritrange")
    if target[0] == target[1]:
      raise r.error("inheritrange needs a target with a range; give the joint or tendon a range",
                    "inheritrange")
    mean, radius = 0.5 * (target[1] + target[0]), 0.5 * (target[1] - target[0]) * a.inheritrange
    setattr(a, field, np.array([mean - radius, mean + radius]))

  def _actdim(self, r: Reader, a: ActuatorSpec, so3: bool) -> int:
    """The number of activation states, checked as MuJoCo checks it."""
    if a.dyntype == DynType.DCMOTOR:
      need = _dcmotor_states(a)
      if a.actdim >= 0 and a.actdim != need:
        raise r.error(f"these DC motor parameters need actdim {need}, got {a.actdim}", "actdim")
      return need
    if a.actdim > 1 and a.dyntype not in (DynType.USER, DynType.PID) and not so3:
      raise r.error("actdim > 1 is only allowed for dyntype 'user', 'dcmotor' and 'pid'",
                    "actdim")
    if a.actdim == 1 and a.dyntype == DynType.NONE:
      raise r.error("actdim 1 in an actuator without activation dynamics (dyntype 'none')",
                    "actdim")
    if a.actdim == 0 and a.dyntype != DynType.NONE:
      raise r.error("actdim 0 in an actuator with activation dynamics; give actdim >= 1 (or "
                    "check ki and slewmax of a pid)", "actdim")
    return a.actdim if a.actdim >= 0 else int(a.dyntype != DynType.NONE)

  def _muscle(self, r: Reader, a: ActuatorSpec) -> None:
    for prm, used in ((a.gainprm, a.gaintype == GainType.MUSCLE),
                      (a.biasprm, a.biastype == BiasType.MUSCLE)):
      if not used:
        continue
      if prm[0] >= prm[1]:
        raise r.error("a muscle needs range[0] < range[1]", "range" if r.has("range") else None)
      if prm[4] >= 1 or prm[5] <= 1:
        raise r.error("a muscle needs lmin < 1 < lmax", "lmin" if r.has("lmin") else "lmax"
                      if r.has("lmax") else None)
      if prm[3] <= 0 or prm[6] <= 0 or prm[7] <= 0 or prm[8] <= 0:
        raise r.error("a muscle needs positive scale, vmax, fpmax and fvmax")


def _warn_misuse(r: Reader, a: dict[str, Any], element: etree._Element) -> None:
  """Warnings for models MuJoCo accepts that will not do what their author likely wants."""
  if (a["trntype"] == TrnType.SITE and a["trnid"][1] < 0 and a["biastype"] == BiasType.AFFINE
      and a["gaintype"] == GainType.FIXED and a["biasprm"][1] != 0):
    warnings.warn(str(r.error("a position servo on a site without refsite has length 0: it "
                              "pushes with kp * ctrl and never reaches a setpoint; add a "
                              "refsite", "site")), stacklevel=3)
  if (a["dyntype"] == DynType.INTEGRATOR and a["gaintype"] == GainType.FIXED
      and a["biastype"] == BiasType.AFFINE and not a["actlimited"]
      and element.tag == "intvelocity"):
    warnings.warn(str(r.error("an intvelocity actuator without actrange integrates its setpoint "
                              "without bound; give actrange (or inheritrange)", "actrange")),
                  stacklevel=3)


def compile_actuators(source: Source, defaults: Defaults, compiler: Compiler,
                      names: dict[str, Names], fields: dict[str, Any]) -> dict[str, Any]:
  """actuator_* fields and names_actuator, in document order."""
  reader = _Reader(source, defaults)
  comp = _Compiler(source, defaults, compiler, names, fields)
  nuser_actuator = nuser(source, "actuator")
  rows: list[dict[str, Any]] = []
  actuator_names = []
  for section in source.sections("actuator"):
    for element in section:
      if element.tag not in ACTUATOR_TAGS:
        continue
      check_user(Reader(source, attributes(defaults, element)), nuser_actuator, "actuator")
      row = comp.compile(element, reader.spec(element))
      _warn_misuse(Reader(source, attributes(defaults, element)), row, element)
      rows.append(row)
      actuator_names.append(element.get("name", ""))
  if not rows:
    return {}
  ctrlnum = np.array([row["ctrlnum"] for row in rows], np.int32)
  outnum = np.array([row["outnum"] for row in rows], np.int32)
  actnum = np.array([row["actnum"] for row in rows], np.int32)
  out: dict[str, Any] = {
      "actuator_ctrladr": (np.cumsum(ctrlnum) - ctrlnum).astype(np.int32),
      "actuator_outadr": (np.cumsum(outnum) - outnum).astype(np.int32),
      "actuator_actadr": np.where(actnum > 0, np.cumsum(actnum) - actnum, -1).astype(np.int32),
      "actuator_ctrlnum": ctrlnum, "actuator_outnum": outnum, "actuator_actnum": actnum}
  per_actuator = ("trntype", "dyntype", "gaintype", "biastype", "trnid", "ctrlspec", "group",
                  "forcelimited", "actlimited", "actearly", "dynprm", "gainprm", "biasprm",
                  "forcerange", "actrange", "cranklength", "damping", "dampingpoly", "armature",
                  "history", "delay")
  for key in per_actuator:
    out[f"actuator_{key}"] = np.array([row[key] for row in rows])
  controls = [c for row in rows for c in row["controls"]]
  out["actuator_ctrllimited"] = np.array([int(c[0]) for c in controls], np.int32)
  out["actuator_ctrlrange"] = np.array([c[1] for c in controls]).reshape(-1, 2)
  for key in ("gear", "lengthrange"):
    out[f"actuator_{key}"] = np.array([row[key] for row in rows for _ in range(row["outnum"])])
  out["names_actuator"] = tuple(actuator_names)
  return out
