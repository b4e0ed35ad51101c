"""Actuator shortcuts as a table: how ``<position>``, ``<pid>``, ``<dcmotor>``, ... become
``<general>`` parameters, with MuJoCo 4's inheritance rules.

The reader keeps one :class:`ActuatorSpec` (mjsActuator) per actuator and per default class. An
actuator element of shortcut ``tag`` is read in three steps, as MuJoCo's reader does:

1. its mechanical attributes (``ctrlrange``, ``gear``, ``damping``, ...) overwrite the spec copied
   from its class;
2. its shortcut parameters (:class:`Params`, mjXShortcut) start from the nearest class slot the
   shortcut inherits from (:func:`inherits`: a slot written with the same shortcut, or with
   ``<general>`` and the shortcut's gain type, in the class or an ancestor; else the documented
   defaults, ``Shortcut.defaults``), read back with ``Shortcut.from_spec``; the element's own
   parameter attributes overwrite them;
3. ``Shortcut.set`` (the ``mjs_setTo*`` setter) resets the spec's gain, bias and dynamics
   parameters and activation layout and writes them from the parameters, returning None or an
   (error message, attribute) pair.

Rows of :data:`SHORTCUTS`, one per shortcut, give the types each sets, the attributes it reads and
the leading entries of ``gainprm``/``biasprm``/``dynprm`` it writes; ``dcmotor`` derives its rows
from its electrical, thermal and friction parameters (``_set_dcmotor``).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable

import numpy as np

from flexor.types import BiasType, DynType, GainType

# mjtCtrlInput bits (actuator_ctrlspec of pid, dcmotor, fixed and affine gains) and mjtCtrlChart
INPUT_POS, INPUT_VEL, INPUT_FF, INPUT_VOLTAGE, INPUT_NONE, INPUT_PRESSURE = 1, 2, 4, 8, 16, 32
CHART_EXPMAP, CHART_QUAT = 1, 2
# keywords of the "input" attribute: charts and the empty signature, then the ordered tokens
INPUT_KEYWORDS = {"expmap": CHART_EXPMAP, "quat": CHART_QUAT, "none": INPUT_NONE}
INPUT_TOKENS = {"pos": INPUT_POS, "vel": INPUT_VEL, "ff": INPUT_FF, "voltage": INPUT_VOLTAGE,
                "pressure": INPUT_PRESSURE}
LIMITED_FALSE, LIMITED_TRUE, LIMITED_AUTO = 0, 1, 2
# a setter's failure: (message, the attribute it is about), or None
Error = tuple[str, str] | None


@dataclasses.dataclass
class ActuatorSpec:
  """One actuator as the reader builds it (mjsActuator), before compilation."""

  type: str = "general"
  gaintype: int = GainType.FIXED
  gainprm: np.ndarray = dataclasses.field(default_factory=lambda: _prm(1.0))
  biastype: int = BiasType.NONE
  biasprm: np.ndarray = dataclasses.field(default_factory=lambda: _prm())
  dyntype: int = DynType.NONE
  dynprm: np.ndarray = dataclasses.field(default_factory=lambda: _prm(1.0))
  actdim: int = -1
  ctrlspec: int = 0
  velrange: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(2))
  ffrange: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(2))
  actearly: int = 0
  gear: np.ndarray = dataclasses.field(default_factory=lambda: np.array([1.0, 0, 0, 0, 0, 0]))
  cranklength: float = 0.0
  lengthrange: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(2))
  inheritrange: float = 0.0
  damping: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(3))
  armature: float = 0.0
  ctrllimited: int = LIMITED_AUTO
  ctrlrange: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(2))
  forcelimited: int = LIMITED_AUTO
  forcerange: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(2))
  actlimited: int = LIMITED_AUTO
  actrange: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(2))
  group: int = 0
  nsample: int = 0
  interp: int = 0
  delay: float = 0.0

  def copy(self) -> ActuatorSpec:
    return dataclasses.replace(self, **{f.name: np.array(getattr(self, f.name))
                                        for f in dataclasses.fields(self)
                                        if isinstance(getattr(self, f.name), np.ndarray)})


def _prm(*head: float) -> np.ndarray:
  """A 10-entry parameter row starting with ``head``, zeros after."""
  out = np.zeros(10)
  out[:len(head)] = head
  return out


@dataclasses.dataclass
class Params:
  """Shortcut parameters (mjXShortcut); ``has_*`` say whether kv, dampratio, timeconst are set."""

  kp: float = 0.0
  kv: float = 0.0
  dampratio: float = 0.0
  has_kv: bool = False
  has_dampratio: bool = False
  timeconst: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(2))
  has_timeconst: bool = False
  inheritrange: float = 0.0
  ki: float = 0.0
  imax: float = 0.0
  slewmax: float = 0.0
  ctrlspec: int = 0
  area: float = 0.0
  diameter: float = -1.0
  bias: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(3))
  tausmooth: float = 0.0
  range: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(2))
  force: float = 0.0
  scale: float = 0.0
  lmin: float = 0.0
  lmax: float = 0.0
  vmax: float = 0.0
  fpmax: float = 0.0
  fvmax: float = 0.0
  gain: float = 0.0
  motorconst: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(2))
  resistance: float = 0.0
  nominal: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(3))
  saturation: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(3))
  inductance: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(2))
  cogging: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(3))
  controller: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(6))
  thermal: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(6))
  lugre: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(5))


@dataclasses.dataclass(frozen=True)
class Attr:
  """A shortcut attribute: XML name, Params field, count, and whether fewer values may be given
  (they then overwrite the leading entries)."""

  name: str
  field: str
  n: int = 1
  partial: bool = False


def _const(*values):
  return lambda s: values


@dataclasses.dataclass(frozen=True)
class Shortcut:
  """One row of the shortcut table: what ``<tag>`` turns into.

  gaintype: the gain type it sets, which a ``<general>`` default must have for this shortcut to
    inherit its parameters from it.
  dyntype, biastype, ctrlspec: the other types it sets (a function of the parameters where they
    depend on them).
  gainprm, biasprm, dynprm: the leading entries of the rows it writes; the rest are zero.
  attrs: the shortcut parameters read from the element (kv/dampratio/input: the reader).
  defaults: the documented parameter defaults, where not 0.
  from_spec: the parameters that gave a class slot its control model (mjXShortcutFromActuator).
  check: validation before writing; None or (error message, attribute).
  finish: what the setter does after writing (limits, inheritrange); None or an error.
  apply: a setter that replaces the generic one (dcmotor derives its parameters).
  range_attr: the spec range that ``inheritrange`` replaces (None: no inheritrange).
  """

  tag: str
  gaintype: int
  dyntype: int | Callable[[Params], int] = DynType.NONE
  biastype: int = BiasType.NONE
  ctrlspec: int | Callable[[Params], int] = 0
  gainprm: Callable[[Params], tuple] = _const()
  biasprm: Callable[[Params], tuple] = _const()
  dynprm: Callable[[Params], tuple] = _const(1.0)
  attrs: tuple[Attr, ...] = ()
  defaults: dict = dataclasses.field(default_factory=dict)
  from_spec: Callable[[ActuatorSpec, Params], None] = lambda a, s: None
  check: Callable[[ActuatorSpec, Params], Error] = lambda a, s: None
  finish: Callable[[ActuatorSpec, Params], Error] = lambda a, s: None
  apply: Callable[[ActuatorSpec, Params], Error] | None = None
  range_attr: str | None = None

  def set(self, a: ActuatorSpec, s: Params) -> Error:
    """The setter (mjs_setTo*): resets the control model of ``a`` to this shortcut's."""
    if self.apply is not None:
      return self.apply(a, s)
    error = self.check(a, s)
    if error:
      return error
    pick = lambda v: v(s) if callable(v) else v  # noqa: E731
    _reset(a, self.tag, pick(self.dyntype), self.gaintype, self.biastype,
           gain=self.gainprm(s), bias=self.biasprm(s), dyn=self.dynprm(s),
           ctrlspec=pick(self.ctrlspec))
    return self.finish(a, s)


def _reset(a: ActuatorSpec, tag: str, dyntype: int, gaintype: int, biastype: int, *,
           gain=(), bias=(), dyn=(1.0,), ctrlspec: int = 0) -> None:
  """What every 4.0 setter does: full gain/bias/dyn rows, types, input and activation layout."""
  a.type, a.dyntype, a.gaintype, a.biastype = tag, dyntype, gaintype, biastype
  a.gainprm, a.biasprm, a.dynprm = _prm(*gain), _prm(*bias), _prm(*dyn)
  a.ctrlspec, a.actdim, a.actearly, a.actlimited = ctrlspec, -1, 0, LIMITED_AUTO


def _bias2(s: Params) -> float:
  """biasprm[2] of a servo: -kv, or the positive dampratio (MuJoCo's compiler turns it into -kv
  with the inertia at qpos0, see flexor.setconst)."""
  if s.has_kv:
    return -s.kv
  return s.dampratio if s.has_dampratio else 0.0


def _check_damping(a: ActuatorSpec, s: Params) -> Error:
  del a
  if s.has_kv and s.has_dampratio:
    return "kv and dampratio cannot both be defined", "kv"
  if s.has_kv and s.kv < 0:
    return "kv cannot be negative", "kv"
  if s.has_dampratio and s.dampratio < 0:
    return "dampratio cannot be negative", "dampratio"
  return None


def _check_servo(a: ActuatorSpec, s: Params) -> Error:
  if s.has_timeconst and s.timeconst[0] < 0:
    return "timeconst cannot be negative", "timeconst"
  return _check_damping(a, s)


def _check_pid(a: ActuatorSpec, s: Params) -> Error:
  return _check_damping(a, s) or (("slewmax cannot be negative", "slewmax")
                                  if s.slewmax < 0 else None)


def _inherit(field: str):
  """finish of the servos with inheritrange: record it; it excludes an explicit range."""
  def finish(a: ActuatorSpec, s: Params) -> Error:
    a.inheritrange = s.inheritrange
    rng = getattr(a, field)
    if s.inheritrange > 0 and (rng[0] or rng[1]):
      name = "posrange" if a.type == "pid" else field
      return f"{name} and inheritrange cannot both be defined", "inheritrange"
    return None
  return finish


def _nonnegative_control(name: str, value: str):
  """finish of damper and adhesion: ctrllimited true, a nonnegative gain and control range."""
  def finish(a: ActuatorSpec, s: Params) -> Error:
    a.ctrllimited = LIMITED_TRUE
    if getattr(s, value) < 0:
      return (f"{name} gain cannot be negative" if name == "adhesion"
              else "damping coefficient cannot be negative"), value
    if a.ctrlrange[0] < 0 or a.ctrlrange[1] < 0:
      return f"{name} control range cannot be negative", "ctrlrange"
    return None
  return finish


def _check_muscle(a: ActuatorSpec, s: Params) -> Error:
  del a
  return ("muscle tausmooth cannot be negative", "tausmooth") if s.tausmooth < 0 else None


_MUSCLE_GAIN = ("range", "force", "scale", "lmin", "lmax", "vmax", "fpmax", "fvmax")
_MUSCLE_DEFAULTS = dict(timeconst=(0.01, 0.04), range=(0.75, 1.05), force=-1.0, scale=200.0,
                        lmin=0.5, lmax=1.6, vmax=1.5, fpmax=1.3, fvmax=1.2)


def _muscle_gain(s: Params) -> tuple:
  """(range (2), force, scale, lmin, lmax, vmax, fpmax, fvmax); a negative value keeps the
  documented default."""
  d = _MUSCLE_DEFAULTS
  pick = lambda value, default: value if value >= 0 else default  # noqa: E731
  return (tuple(pick(s.range[i], d["range"][i]) for i in range(2))
          + tuple(pick(getattr(s, k), d[k]) for k in _MUSCLE_GAIN[1:]))


def _muscle_dyn(s: Params) -> tuple:
  """(timeconst (2), tausmooth); a negative time constant keeps the documented default."""
  tc = _MUSCLE_DEFAULTS["timeconst"]
  return (s.timeconst[0] if s.timeconst[0] >= 0 else tc[0],
          s.timeconst[1] if s.timeconst[1] >= 0 else tc[1], s.tausmooth)


def _set_dcmotor(a: ActuatorSpec, s: Params) -> Error:
  """dyn, gain and bias dcmotor. gainprm (R, K, alpha, T0, kp, ki, kd, vmax); biasprm (cogging
  amplitude, poles, phase, lugre coulomb, static, stribeck); dynprm (te, (di/dt)max, thermal RT,
  C, ambient, lugre stiffness, damping, slewmax, imax). States in the order [slew, integral,
  temperature, bristle, current], one each where enabled; forcerange from saturation."""
  if s.motorconst[0] < 0 or s.motorconst[1] < 0:
    return "DC motor: motor constants must be non-negative", "motorconst"
  resistance, kt, ke = s.resistance, s.motorconst[0], s.motorconst[1]
  vn, tau0, omega0 = s.nominal
  if vn > 0 and ke <= 0 and omega0 > 0:
    # back-EMF constant from the no-load speed omega0 = vn Ke / (Ke^2 + R B)
    b = a.damping[0]
    if b > 0 and resistance > 0:
      disc = vn * vn - 4 * resistance * b * omega0 * omega0
      ke = (vn + math.sqrt(disc)) / (2 * omega0) if disc > 0 else vn / omega0
    elif b > 0 and tau0 > 0:
      exact = vn / omega0 - vn * b / tau0
      ke = exact if exact > 0 else vn / omega0
    else:
      ke = vn / omega0
  k = math.sqrt(kt * ke) if kt > 0 and ke > 0 else (kt if kt > 0 else ke)
  if resistance == 0 and vn > 0 and tau0 > 0 and k > 0:
    resistance = k * vn / tau0
  if k <= 0 and s.ctrlspec != INPUT_NONE:
    return "DC motor: motor constant K must be positive", "motorconst"
  if resistance <= 0:
    return "DC motor: resistance R must be positive", "resistance"
  inductance, te_given = s.inductance
  if inductance < 0:
    return "DC motor: inductance must be non-negative", "inductance"
  if te_given < 0:
    return "DC motor: electrical time constant must be non-negative", "inductance"
  ctl, th, lugre = s.controller, s.thermal, s.lugre
  gain, bias, dyn = _prm(resistance, k), _prm(*s.cogging), _prm()
  gain[4:7] = ctl[:3]
  dyn[7:9] = ctl[3:5]
  if ctl[5] > 0:
    gain[7] = ctl[5]
  forcerange, forcelimited = a.forcerange, a.forcelimited
  sat = s.saturation
  if sat[0] > 0 or sat[1] > 0:
    tau_max = sat[0] if sat[0] != 0 else k * sat[1]
    forcerange, forcelimited = np.array([-tau_max, tau_max]), LIMITED_TRUE
  if sat[2] > 0:
    dyn[1] = sat[2]
  te = inductance / resistance if inductance > 0 else te_given
  dyn[0] = te
  actdim = int(te > 0) + int(ctl[3] > 0) + int(ctl[1] > 0)
  if th[0] > 0 or th[1] > 0 or th[2] > 0:
    rt, cap, tth = th[:3]
    if tth > 0 and rt > 0:
      cap = tth / rt
    elif tth > 0 and cap > 0 and rt == 0:
      rt = tth / cap
    if rt <= 0:
      return "DC motor: thermal resistance must be positive", "thermal"
    if cap <= 0:
      return "DC motor: thermal capacitance must be positive", "thermal"
    dyn[2:5] = rt, cap, th[5]
    gain[2:4] = th[3], th[4]
    actdim += 1
  if lugre[0] > 0:
    dyn[5:7] = lugre[:2]
    bias[3:6] = lugre[2:5]
    actdim += 1
  _reset(a, "dcmotor", DynType.DCMOTOR, GainType.DCMOTOR, BiasType.DCMOTOR, ctrlspec=s.ctrlspec)
  a.gainprm, a.biasprm, a.dynprm = gain, bias, dyn
  a.forcerange, a.forcelimited = forcerange, forcelimited
  a.actdim, a.actlimited, a.actearly = actdim, LIMITED_FALSE, 1
  return None


# ------------------------------------------------------------------------ reading back slots

def _damping_from(b: np.ndarray, s: Params) -> None:
  """kv or dampratio from biasprm[2] (negative: kv, positive: dampratio)."""
  s.has_kv, s.has_dampratio = bool(b[2] < 0), bool(b[2] > 0)
  s.kv = -b[2] if s.has_kv else 0.0
  s.dampratio = b[2] if s.has_dampratio else 0.0


def _from_servo(a: ActuatorSpec, s: Params) -> None:
  s.kp = a.gainprm[0]
  _damping_from(a.biasprm, s)
  s.has_timeconst = a.dyntype == DynType.FILTEREXACT
  s.timeconst[0] = a.dynprm[0] if s.has_timeconst else 0.0
  s.inheritrange = a.inheritrange


def _from_orientation(a: ActuatorSpec, s: Params) -> None:
  s.kp = a.gainprm[0]
  _damping_from(a.biasprm, s)


def _from_pid(a: ActuatorSpec, s: Params) -> None:
  s.kp = -a.biasprm[1]
  _damping_from(a.biasprm, s)
  s.ki, s.imax, s.slewmax = a.gainprm[0], a.dynprm[0], a.dynprm[1]
  s.inheritrange = a.inheritrange


def _from_cylinder(a: ActuatorSpec, s: Params) -> None:
  s.timeconst[0], s.area, s.bias = a.dynprm[0], a.gainprm[0], np.array(a.biasprm[:3])


def _from_muscle(a: ActuatorSpec, s: Params) -> None:
  g = a.gainprm
  s.timeconst, s.tausmooth, s.range = np.array(a.dynprm[:2]), a.dynprm[2], np.array(g[:2])
  s.force, s.scale, s.lmin, s.lmax, s.vmax, s.fpmax, s.fvmax = g[2:9]


def _from_dcmotor(a: ActuatorSpec, s: Params) -> None:
  g, b, d = a.gainprm, a.biasprm, a.dynprm
  s.motorconst[0], s.resistance = g[1], g[0]
  if (a.forcelimited == LIMITED_TRUE and a.forcerange[1] > 0
      and a.forcerange[0] == -a.forcerange[1]):
    s.saturation[0] = a.forcerange[1]
  s.saturation[2], s.inductance[1] = d[1], d[0]
  s.cogging = np.array(b[:3])
  s.controller = np.array([g[4], g[5], g[6], d[7], d[8], g[7]])
  s.thermal = np.array([d[2], d[3], 0.0, g[2], g[3], d[4]])
  s.lugre = np.array([d[5], d[6], b[3], b[4], b[5]])


def _read_velocity(a: ActuatorSpec, s: Params) -> None:
  s.kv = a.gainprm[0]


def _read_damper(a: ActuatorSpec, s: Params) -> None:
  s.kv = -a.gainprm[2]


def _read_adhesion(a: ActuatorSpec, s: Params) -> None:
  s.gain = a.gainprm[0]


_SERVO_ATTRS = (Attr("kp", "kp"), Attr("timeconst", "timeconst"),
                Attr("inheritrange", "inheritrange"))
_SERVO_DYN = lambda s: (s.timeconst[0] if s.has_timeconst else 1.0,)  # noqa: E731
SHORTCUTS: dict[str, Shortcut] = {row.tag: row for row in (
    Shortcut("motor", GainType.FIXED, gainprm=_const(1.0)),
    Shortcut("position", GainType.FIXED, biastype=BiasType.AFFINE, ctrlspec=INPUT_POS,
             dyntype=lambda s: (DynType.FILTEREXACT if s.has_timeconst and s.timeconst[0] != 0
                                else DynType.NONE),
             gainprm=lambda s: (s.kp,), biasprm=lambda s: (0.0, -s.kp, _bias2(s)),
             dynprm=_SERVO_DYN, attrs=_SERVO_ATTRS, defaults=dict(kp=1.0),
             from_spec=_from_servo, check=_check_servo, finish=_inherit("ctrlrange"),
             range_attr="ctrlrange"),
    Shortcut("intvelocity", GainType.FIXED, dyntype=DynType.INTEGRATOR, biastype=BiasType.AFFINE,
             ctrlspec=INPUT_VEL, gainprm=lambda s: (s.kp,),
             biasprm=lambda s: (0.0, -s.kp, _bias2(s)), dynprm=_SERVO_DYN, attrs=_SERVO_ATTRS,
             defaults=dict(kp=1.0), from_spec=_from_servo, check=_check_servo,
             finish=_inherit("actrange"), range_attr="actrange"),
    Shortcut("orientation", GainType.SO3, biastype=BiasType.SO3, ctrlspec=lambda s: s.ctrlspec,
             gainprm=lambda s: (s.kp,), biasprm=lambda s: (0.0, -s.kp, _bias2(s)),
             attrs=(Attr("kp", "kp"),), defaults=dict(kp=1.0), from_spec=_from_orientation,
             check=_check_damping),
    # pid: one act state each for slewmax and ki, in the order [slew, integral]
    Shortcut("pid", GainType.PID, biastype=BiasType.AFFINE, ctrlspec=lambda s: s.ctrlspec,
             dyntype=lambda s: DynType.PID if (s.ki or s.slewmax) else DynType.NONE,
             gainprm=lambda s: (s.ki,), biasprm=lambda s: (0.0, -s.kp, _bias2(s)),
             dynprm=lambda s: (s.imax if s.ki else 0.0, s.slewmax),
             attrs=(Attr("kp", "kp"), Attr("ki", "ki"), Attr("imax", "imax"),
                    Attr("slewmax", "slewmax"), Attr("inheritrange", "inheritrange")),
             defaults=dict(kp=1.0), from_spec=_from_pid, check=_check_pid,
             finish=_inherit("ctrlrange"), range_attr="ctrlrange"),
    Shortcut("velocity", GainType.FIXED, biastype=BiasType.AFFINE, ctrlspec=INPUT_VEL,
             gainprm=lambda s: (s.kv,), biasprm=lambda s: (0.0, 0.0, -s.kv),
             attrs=(Attr("kv", "kv"),), defaults=dict(kv=1.0), from_spec=_read_velocity),
    Shortcut("damper", GainType.AFFINE, gainprm=lambda s: (0.0, 0.0, -s.kv),
             attrs=(Attr("kv", "kv"),), from_spec=_read_damper,
             finish=_nonnegative_control("damper", "kv")),
    Shortcut("cylinder", GainType.FIXED, dyntype=DynType.FILTER, biastype=BiasType.AFFINE,
             ctrlspec=INPUT_PRESSURE,
             gainprm=lambda s: (math.pi / 4 * s.diameter * s.diameter if s.diameter >= 0
                                else s.area,),
             biasprm=lambda s: tuple(s.bias), dynprm=lambda s: (s.timeconst[0],),
             attrs=(Attr("timeconst", "timeconst"), Attr("area", "area"),
                    Attr("diameter", "diameter"), Attr("bias", "bias", 3)),
             defaults=dict(timeconst=(1.0, 0.0), area=1.0), from_spec=_from_cylinder),
    Shortcut("muscle", GainType.MUSCLE, dyntype=DynType.MUSCLE, biastype=BiasType.MUSCLE,
             gainprm=_muscle_gain, biasprm=_muscle_gain, dynprm=_muscle_dyn,
             attrs=(Attr("timeconst", "timeconst", 2), Attr("tausmooth", "tausmooth"),
                    Attr("range", "range", 2)) + tuple(Attr(k, k) for k in _MUSCLE_GAIN[1:]),
             defaults=_MUSCLE_DEFAULTS, from_spec=_from_muscle, check=_check_muscle),
    Shortcut("adhesion", GainType.FIXED, gainprm=lambda s: (s.gain,),
             attrs=(Attr("gain", "gain"),), defaults=dict(gain=1.0), from_spec=_read_adhesion,
             finish=_nonnegative_control("adhesion", "gain")),
    Shortcut("dcmotor", GainType.DCMOTOR, dyntype=DynType.DCMOTOR, biastype=BiasType.DCMOTOR,
             attrs=(Attr("motorconst", "motorconst", 2, True), Attr("resistance", "resistance"),
                    Attr("nominal", "nominal", 3, True),
                    Attr("saturation", "saturation", 3, True),
                    Attr("inductance", "inductance", 2, True),
                    Attr("cogging", "cogging", 3, True),
                    Attr("controller", "controller", 6, True),
                    Attr("thermal", "thermal", 6, True), Attr("lugre", "lugre", 5, True)),
             from_spec=_from_dcmotor, apply=_set_dcmotor),
)}
# shortcuts with kv/dampratio and with an input signature, read by the reader itself
DAMPED = ("position", "intvelocity", "orientation", "pid")
WITH_INPUT = ("orientation", "pid", "dcmotor")


def default_params(tag: str) -> Params:
  """The documented defaults of ``tag``'s parameters (mjXShortcutDefaults)."""
  s = Params()
  for key, value in SHORTCUTS[tag].defaults.items():
    setattr(s, key, np.array(value, dtype=np.float64) if isinstance(value, tuple) else value)
  return s


def inherits(slot: ActuatorSpec, tag: str) -> bool:
  """Whether shortcut ``tag`` takes its parameters from ``slot`` (mjXShortcutSource's test)."""
  if slot.type == tag:
    return True
  return slot.type == "general" and slot.gaintype == SHORTCUTS[tag].gaintype


def params_from(slot: ActuatorSpec | None, tag: str) -> Params:
  """The parameters a shortcut starts from: read back from ``slot``, or the defaults."""
  s = default_params(tag)
  if slot is not None:
    s.ctrlspec = slot.ctrlspec
    SHORTCUTS[tag].from_spec(slot, s)
  return s
