"""Model, Option and Data pytrees, and the enums whose values equal MuJoCo's.

Static vs traced is decided here, once, by annotation:

* a field annotated ``jax.Array`` is a pytree leaf: a real-valued parameter or state that users
  can differentiate with respect to and ``vmap`` over;
* every other field (``int``, ``np.ndarray``, ``tuple``) is static structure. Static fields travel
  in the pytree's treedef, wrapped in one :class:`_Static` record per object that hashes and
  compares by content, so a Model can be a ``jax.jit`` argument and a new Model with the same
  structure but new parameter values does not recompile.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
from typing import Any, ClassVar, get_type_hints

import jax
import numpy as np
from flax import struct


def device_array(value: Any, dtype: Any) -> jax.Array:
  """``value`` (any array-like) as a device array of ``dtype``, copied from the host.

  ``jnp.asarray`` and ``jnp.array`` of a numpy array compile and run a small XLA program for each
  new shape and dtype (JAX 0.10: 30-50 ms each, 88 of them to load dm_control's humanoid);
  ``jax.device_put`` copies the buffer and compiles nothing.
  """
  return jax.device_put(np.asarray(value, dtype=dtype))


class JointType(enum.IntEnum):
  """mjtJoint."""

  FREE = 0
  BALL = 1
  SLIDE = 2
  HINGE = 3


# qpos and qvel widths per joint type, indexed by JointType.
JNT_NQ = np.array([7, 4, 1, 1])
JNT_NV = np.array([6, 3, 1, 1])


class GeomType(enum.IntEnum):
  """mjtGeom (the simulated kinds)."""

  PLANE = 0
  HFIELD = 1
  SPHERE = 2
  CAPSULE = 3
  ELLIPSOID = 4
  CYLINDER = 5
  BOX = 6
  MESH = 7
  SDF = 8


class IntegratorType(enum.IntEnum):
  """mjtIntegrator."""

  EULER = 0
  RK4 = 1
  IMPLICIT = 2
  IMPLICITFAST = 3


class DisableBit(enum.IntFlag):
  """mjtDisableBit."""

  CONSTRAINT = 1 << 0
  EQUALITY = 1 << 1
  FRICTIONLOSS = 1 << 2
  LIMIT = 1 << 3
  CONTACT = 1 << 4
  SPRING = 1 << 5
  DAMPER = 1 << 6
  GRAVITY = 1 << 7
  CLAMPCTRL = 1 << 8
  WARMSTART = 1 << 9
  FILTERPARENT = 1 << 10
  ACTUATION = 1 << 11
  REFSAFE = 1 << 12
  SENSOR = 1 << 13
  MIDPHASE = 1 << 14
  EULERDAMP = 1 << 15
  AUTORESET = 1 << 16
  NATIVECCD = 1 << 17
  ISLAND = 1 << 18
  MULTICCD = 1 << 19


class EnableBit(enum.IntFlag):
  """mjtEnableBit."""

  OVERRIDE = 1 << 0
  ENERGY = 1 << 1
  FWDINV = 1 << 2
  INVDISCRETE = 1 << 3
  SLEEP = 1 << 4
  DIAGEXACT = 1 << 5
  IPC = 1 << 6
  SPECULATIVE = 1 << 7


class CamLight(enum.IntEnum):
  """mjtCamLight: how a camera or light moves with its body."""
  FIXED = 0          # rigidly with the body
  TRACK = 1          # with the body's position, at a fixed world orientation
  TRACKCOM = 2       # with the body's subtree centre of mass, at a fixed world orientation
  TARGETBODY = 3     # with the body, looking at the target body
  TARGETBODYCOM = 4  # with the body, looking at the target's subtree centre of mass


class SameFrame(enum.IntEnum):
  """mjtSameFrame: a frame the compiler found to coincide with its body's frame (or inertial
  frame), within 1e-7; kinematics then copies instead of composing."""

  NONE = 0
  BODY = 1
  INERTIA = 2
  BODYROT = 3
  INERTIAROT = 4


class TrnType(enum.IntEnum):
  """mjtTrn."""

  JOINT = 0
  JOINTINPARENT = 1
  SLIDERCRANK = 2
  TENDON = 3
  SITE = 4
  BODY = 5
  SO3 = 6


class DynType(enum.IntEnum):
  """mjtDyn."""

  NONE = 0
  INTEGRATOR = 1
  FILTER = 2
  FILTEREXACT = 3
  MUSCLE = 4
  DCMOTOR = 5
  PID = 6
  USER = 7


class GainType(enum.IntEnum):
  """mjtGain."""

  FIXED = 0
  AFFINE = 1
  MUSCLE = 2
  DCMOTOR = 3
  SO3 = 4
  PID = 5
  USER = 6


class BiasType(enum.IntEnum):
  """mjtBias."""

  NONE = 0
  AFFINE = 1
  MUSCLE = 2
  DCMOTOR = 3
  SO3 = 4
  USER = 5


class ObjType(enum.IntEnum):
  """mjtObj (the subset referenced by the model)."""

  UNKNOWN = 0
  BODY = 1
  XBODY = 2
  JOINT = 3
  DOF = 4
  GEOM = 5
  SITE = 6
  CAMERA = 7
  LIGHT = 8
  FLEX = 9
  MESH = 10
  SKIN = 11
  HFIELD = 12
  TEXTURE = 13
  MATERIAL = 14
  PAIR = 15
  EXCLUDE = 16
  EQUALITY = 17
  TENDON = 18
  ACTUATOR = 19


class SensorType(enum.IntEnum):
  """mjtSensor."""

  TOUCH = 0
  ACCELEROMETER = 1
  VELOCIMETER = 2
  GYRO = 3
  FORCE = 4
  TORQUE = 5
  MAGNETOMETER = 6
  RANGEFINDER = 7
  CAMPROJECTION = 8
  JOINTPOS = 9
  JOINTVEL = 10
  TENDONPOS = 11
  TENDONVEL = 12
  ACTUATORPOS = 13
  ACTUATORVEL = 14
  ACTUATORFRC = 15
  JOINTACTFRC = 16
  TENDONACTFRC = 17
  BALLQUAT = 18
  BALLANGVEL = 19
  JOINTLIMITPOS = 20
  JOINTLIMITVEL = 21
  JOINTLIMITFRC = 22
  TENDONLIMITPOS = 23
  TENDONLIMITVEL = 24
  TENDONLIMITFRC = 25
  FRAMEPOS = 26
  FRAMEQUAT = 27
  FRAMEXAXIS = 28
  FRAMEYAXIS = 29
  FRAMEZAXIS = 30
  FRAMELINVEL = 31
  FRAMEANGVEL = 32
  FRAMELINACC = 33
  FRAMEANGACC = 34
  SUBTREECOM = 35
  SUBTREELINVEL = 36
  SUBTREEANGMOM = 37
  INSIDESITE = 38
  GEOMDIST = 39
  GEOMNORMAL = 40
  GEOMFROMTO = 41
  CONTACT = 42
  E_POTENTIAL = 43
  E_KINETIC = 44
  CLOCK = 45
  TACTILE = 46
  PLUGIN = 47
  USER = 48


class DataType(enum.IntEnum):
  """mjtDataType: how a sensor's cutoff applies."""

  REAL = 0
  POSITIVE = 1
  AXIS = 2
  QUATERNION = 3


class Stage(enum.IntEnum):
  """mjtStage: the computation stage a sensor needs."""

  NONE = 0
  POS = 1
  VEL = 2
  ACC = 3


class WrapType(enum.IntEnum):
  """mjtWrap."""

  NONE = 0
  JOINT = 1
  PULLEY = 2
  SITE = 3
  SPHERE = 4
  CYLINDER = 5


class EqType(enum.IntEnum):
  """mjtEq."""

  CONNECT = 0
  WELD = 1
  JOINT = 2
  TENDON = 3
  FLEX = 4
  DISTANCE = 5


class ConstraintType(enum.IntEnum):
  """mjtConstraint."""

  EQUALITY = 0
  FRICTION_DOF = 1
  FRICTION_TENDON = 2
  LIMIT_JOINT = 3
  LIMIT_TENDON = 4
  CONTACT_FRICTIONLESS = 5
  CONTACT_PYRAMIDAL = 6
  CONTACT_ELLIPTIC = 7


class ConstraintState(enum.IntEnum):
  """mjtConstraintState."""

  SATISFIED = 0
  QUADRATIC = 1
  LINEARNEG = 2
  LINEARPOS = 3
  CONE = 4


class ConeType(enum.IntEnum):
  """mjtCone."""

  PYRAMIDAL = 0
  ELLIPTIC = 1


class ContactGradient(enum.IntEnum):
  """How contacts shape gradients (flexor's own option, no mjOption counterpart).

  * EXACT: MuJoCo's contact model; a pair's gradient is zero until its contact row exists.
  * SMOOTH: every contact becomes a soft layer ``opt.contact_gradient_width`` thick: its rows
    exist from that distance on, their impedance rising from zero there to solimp's dmax at the
    surface, so forces and their gradients are continuous in distance. The motion changes:
    bodies rest inside the layer, not on the surface.
  * DISTANCE: contacts from distance (after Paulus et al., ICLR 2026): the motion is EXACT's and
    the gradient is that of a surrogate at that motion (a straight-through estimator), in which
    touching contacts are MuJoCo's and pairs up to the width apart are pushed apart by a weak
    layer, a spring of time constant ``opt.contact_gradient_timeconst``, so they pass gradients
    before they touch.
  """

  EXACT = 0
  SMOOTH = 1
  DISTANCE = 2


class SolverType(enum.IntEnum):
  """mjtSolver."""

  PGS = 0
  CG = 1
  NEWTON = 2


class _Static:
  """Static fields of one pytree node, hashed and compared by content.

  The hash is computed once; equality short-cuts on identity, so the common case (the same Model
  passed to a jitted function again) costs one pointer comparison.
  """

  __slots__ = ("names", "values", "_hash")

  def __init__(self, names: tuple[str, ...], values: tuple[Any, ...]):
    self.names = names
    self.values = values
    digest = hashlib.blake2b(digest_size=16)
    for name, value in zip(names, values):
      digest.update(name.encode())
      _digest_update(digest, value)
    self._hash = hash(digest.digest())

  def __hash__(self) -> int:
    return self._hash

  def __eq__(self, other: object) -> bool:
    if self is other:
      return True
    if not isinstance(other, _Static) or self._hash != other._hash:
      return False
    return self.names == other.names and all(
        _static_equal(a, b) for a, b in zip(self.values, other.values))


def _digest_update(digest: Any, value: Any) -> None:
  if isinstance(value, np.ndarray):
    digest.update(str((value.dtype.str, value.shape)).encode())
    digest.update(np.ascontiguousarray(value).tobytes())
  elif isinstance(value, (tuple, list)):
    digest.update(b"(")
    for v in value:
      _digest_update(digest, v)
    digest.update(b")")
  else:
    digest.update(repr(value).encode())


def _static_equal(a: Any, b: Any) -> bool:
  if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
    return (isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and a.dtype == b.dtype
            and a.shape == b.shape and bool(np.array_equal(a, b)))
  if isinstance(a, (tuple, list)):
    return (isinstance(b, (tuple, list)) and len(a) == len(b)
            and all(_static_equal(x, y) for x, y in zip(a, b)))
  return type(a) is type(b) and a == b


class _Node:
  """Base of Model and Option: a frozen dataclass registered as a pytree.

  Fields annotated ``jax.Array`` or a nested ``_Node`` are children; all others are static (see
  the module docstring).
  """

  _traced: ClassVar[tuple[str, ...]]
  _static: ClassVar[tuple[str, ...]]

  def __init_subclass__(cls, **kwargs: Any):
    super().__init_subclass__(**kwargs)
    dataclasses.dataclass(frozen=True, eq=False)(cls)
    hints = get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    is_child = {n: hints[n] is jax.Array or (isinstance(hints[n], type) and issubclass(hints[n], _Node))
                for n in names}
    cls._traced = tuple(n for n in names if is_child[n])
    cls._static = tuple(n for n in names if not is_child[n])
    jax.tree_util.register_pytree_with_keys(
        cls, cls._flatten_with_keys, cls._unflatten, flatten_func=cls._flatten)

  def _static_record(self) -> _Static:
    record = self.__dict__.get("_static_cache")
    if record is None:
      record = _Static(self._static, tuple(getattr(self, n) for n in self._static))
      object.__setattr__(self, "_static_cache", record)
    return record

  def _flatten(self):
    return tuple(getattr(self, n) for n in self._traced), self._static_record()

  def _flatten_with_keys(self):
    children = tuple((jax.tree_util.GetAttrKey(n), getattr(self, n)) for n in self._traced)
    return children, self._static_record()

  @classmethod
  def _unflatten(cls, record: _Static, children: tuple[Any, ...]):
    obj = object.__new__(cls)
    for name, value in zip(record.names, record.values):
      object.__setattr__(obj, name, value)
    for name, value in zip(cls._traced, children):
      object.__setattr__(obj, name, value)
    object.__setattr__(obj, "_static_cache", record)
    return obj

  def replace(self, **changes: Any):
    """Returns a copy with ``changes`` applied (like ``dataclasses.replace``)."""
    return dataclasses.replace(self, **changes)


class Option(_Node):
  """Physics options (mjOption). Times in s, lengths in m, angles in rad."""

  timestep: jax.Array          # ()
  gravity: jax.Array           # (3,) m/s^2
  wind: jax.Array              # (3,) m/s, medium velocity
  magnetic: jax.Array          # (3,)
  density: jax.Array           # () kg/m^3, medium density
  viscosity: jax.Array         # () Pa s, medium viscosity
  impratio: jax.Array          # ()
  tolerance: jax.Array         # ()
  ls_tolerance: jax.Array      # () the line search's, relative to tolerance
  noslip_tolerance: jax.Array  # ()
  ccd_tolerance: jax.Array     # () m, GJK/EPA's convergence tolerance
  o_margin: jax.Array          # ()
  o_solref: jax.Array          # (2,)
  o_solimp: jax.Array          # (5,)
  o_friction: jax.Array        # (5,)
  contact_gradient_width: jax.Array  # () m, the soft layer of ContactGradient SMOOTH/DISTANCE
  contact_gradient_timeconst: jax.Array  # () s, the layer's spring in DISTANCE's surrogate
  adaptive_rtol: jax.Array     # () relative tolerance of adaptive substeps
  adaptive_atol: jax.Array     # () absolute tolerance (m, rad, m/s, rad/s) of adaptive substeps
  integrator: int              # IntegratorType
  cone: int                    # mjtCone
  jacobian: int                # mjtJacobian
  solver: int                  # mjtSolver
  iterations: int
  ls_iterations: int
  noslip_iterations: int
  ccd_iterations: int          # GJK and EPA iterations (fixes EPA's polytope size)
  disableflags: int            # DisableBit
  enableflags: int             # EnableBit
  disableactuator: int         # bit k set: actuators of group k are disabled
  contact_gradient: int        # ContactGradient (flexor's own; EXACT is MuJoCo's model)
  adaptive_substeps: int       # flexor's own: > 0 steps by at most this many adaptive substeps

  def disabled(self, bit: DisableBit) -> bool:
    """True if ``bit`` is set in ``disableflags`` (static: usable in Python control flow)."""
    return bool(self.disableflags & bit)

  def enabled(self, bit: EnableBit) -> bool:
    """True if ``bit`` is set in ``enableflags``."""
    return bool(self.enableflags & bit)


_REQUIRED = object()


def _field(size: str | None = None, *shape: int | str, fill: Any = _REQUIRED, derived: bool = False):
  """One row of a struct's field table: a dataclass field whose metadata says how to build it.

  Args:
    size: the size attribute giving the leading dimension (``"nbody"``, ``"nv"``, ...); None for
      scalars, options and variable-length host data.
    *shape: trailing dimensions, numbers or size attributes.
    fill: the value of every element when the compiler gives none (Model) or at reset (Data);
      Model fields without one are required from the compiler.
    derived: computed by ``assemble`` or the compile-time constants pass rather than read from
      the MJCF (Model), so ``from_mujoco`` does not copy it.
  """
  return dataclasses.field(metadata=dict(size=size, shape=shape, fill=fill, derived=derived))


def field_table(cls: type) -> dict[str, dict[str, Any]]:
  """{name: metadata} of every field of Model or Data declared with ``_field``, in order."""
  return {f.name: dict(f.metadata) for f in dataclasses.fields(cls) if "size" in f.metadata}


_SOLREF = (0.02, 1.0)
_SOLIMP = (0.9, 0.95, 0.001, 0.5, 2.0)


class Model(_Node):
  """A compiled model: mjModel's fields, names and element ordering.

  Integer structure is static numpy; real-valued parameters are traced ``jax.Array`` leaves. The
  declarations below are the field table that ``assemble`` (defaults, shapes, dtypes) and
  ``from_mujoco`` (what to copy) read. Fields below the "tree tables" heading have no mjModel
  counterpart: they are static tables derived from the kinematic tree once, at compile time, so
  that every tree recursion after forward kinematics is a matmul with a 0/1 mask (see
  ``flexor.tree``).
  """

  # sizes
  nq: int
  nv: int
  nu: int                       # scalar controls, dim(ctrl)
  nactuator: int
  nout: int                     # actuator force outputs
  na: int                       # activation states
  nbody: int
  njnt: int
  ngeom: int
  nsite: int
  ncam: int
  nlight: int
  nmesh: int
  nmeshvert: int
  nmeshface: int
  nmeshgraph: int               # length of mesh_graph
  nmeshpoly: int                # mesh polygons (coplanar hull faces merged)
  nmeshpolyvert: int
  nmeshpolymap: int
  nhfield: int
  nhfielddata: int              # length of hfield_data
  nmat: int                     # materials
  ntendon: int
  nwrap: int
  nmocap: int
  neq: int
  nkey: int
  nplastic: int                 # plastic state entries (MuJoCo 4 springyield)
  npair: int                    # explicit <contact><pair> elements
  nexclude: int                 # <contact><exclude> elements
  nsensor: int
  nsensordata: int              # sum of sensor_dim
  nhistory: int                 # length of Data.history (actuator and sensor history buffers)
  ncollision: int               # candidate geom pairs for the narrow phase (static, see below)
  nconslot: int                 # narrow-phase contact slots: every contact the candidates can make
  nconmax: int                  # Data's contact slots: nconslot, or <= size_nconmax per condim
  size_nconmax: int             # <size nconmax>: the most contacts of one condim (-1: no limit)
  max_geom_pairs: int           # MJX's numeric max_geom_pairs: narrow-phase runs per type pair
  flg_adhesion: int             # some geom or pair has adhesion (derived, as mj_setConst)
  flg_surfacevel: int           # some geom has a surface velocity (derived, as mj_setConst)
  njmax: int                    # constraint rows: every row the model can activate
  opt: Option

  # bodies
  body_parentid: np.ndarray = _field("nbody")
  body_rootid: np.ndarray = _field("nbody", derived=True)
  body_weldid: np.ndarray = _field("nbody", derived=True)
  body_mocapid: np.ndarray = _field("nbody", fill=-1)
  body_jntnum: np.ndarray = _field("nbody", derived=True)
  body_jntadr: np.ndarray = _field("nbody", derived=True)
  body_dofnum: np.ndarray = _field("nbody", derived=True)
  body_dofadr: np.ndarray = _field("nbody", derived=True)
  body_geomnum: np.ndarray = _field("nbody", derived=True)
  body_geomadr: np.ndarray = _field("nbody", derived=True)
  body_sameframe: np.ndarray = _field("nbody", fill=0)  # mjtSameFrame of the inertial frame
  body_simple: np.ndarray = _field("nbody", derived=True)  # 1: diagonal qM block; 2: sliders only
  body_freestanding: np.ndarray = _field("nbody", derived=True)  # mj_isFreeBody: free, alone
  body_pos: jax.Array = _field("nbody", 3)         # position offset rel. to parent body
  body_quat: jax.Array = _field("nbody", 4)        # orientation offset rel. to parent body
  body_ipos: jax.Array = _field("nbody", 3)        # local position of centre of mass
  body_iquat: jax.Array = _field("nbody", 4)       # local orientation of inertia ellipsoid
  body_mass: jax.Array = _field("nbody")           # kg
  body_subtreemass: jax.Array = _field("nbody", derived=True)  # kg
  body_inertia: jax.Array = _field("nbody", 3)     # diagonal inertia in ipos/iquat frame, kg m^2
  body_gravcomp: jax.Array = _field("nbody", fill=0.0)  # antigravity force, units of body weight
  body_invweight0: jax.Array = _field("nbody", 2, fill=0.0)  # mean inverse mass (translation,
                                                             # rotation) at qpos0, setconst

  # joints
  jnt_type: np.ndarray = _field("njnt")
  jnt_qposadr: np.ndarray = _field("njnt", derived=True)
  jnt_dofadr: np.ndarray = _field("njnt", derived=True)
  jnt_bodyid: np.ndarray = _field("njnt")
  jnt_group: np.ndarray = _field("njnt", fill=0)
  jnt_limited: np.ndarray = _field("njnt", fill=0)
  jnt_actfrclimited: np.ndarray = _field("njnt", fill=0)
  jnt_actgravcomp: np.ndarray = _field("njnt", fill=0)
  jnt_solref: jax.Array = _field("njnt", 2, fill=_SOLREF)
  jnt_solimp: jax.Array = _field("njnt", 5, fill=_SOLIMP)
  jnt_pos: jax.Array = _field("njnt", 3)           # local anchor position
  jnt_axis: jax.Array = _field("njnt", 3)          # local joint axis
  jnt_stiffness: jax.Array = _field("njnt", fill=0.0)  # N/m or Nm/rad
  jnt_stiffnesspoly: jax.Array = _field("njnt", 2, fill=0.0)  # quadratic, cubic coefficients
  jnt_springyield: jax.Array = _field("njnt", fill=0.0)  # plastic yield threshold; 0: elastic
  jnt_plasticadr: np.ndarray = _field("njnt", derived=True)  # Data.plastic address or -1
  jnt_range: jax.Array = _field("njnt", 2, fill=0.0)  # m or rad
  jnt_actfrcrange: jax.Array = _field("njnt", 2, fill=0.0)
  jnt_margin: jax.Array = _field("njnt", fill=0.0)

  # dofs
  dof_bodyid: np.ndarray = _field("nv", derived=True)
  dof_jntid: np.ndarray = _field("nv", derived=True)
  dof_parentid: np.ndarray = _field("nv", derived=True)
  dof_solref: jax.Array = _field("nv", 2, fill=_SOLREF)
  dof_solimp: jax.Array = _field("nv", 5, fill=_SOLIMP)
  dof_frictionloss: jax.Array = _field("nv", fill=0.0)
  dof_armature: jax.Array = _field("nv", fill=0.0)   # kg m^2 or kg
  dof_damping: jax.Array = _field("nv", fill=0.0)    # N s/m or Nm s/rad
  dof_dampingpoly: jax.Array = _field("nv", 2, fill=0.0)  # quadratic, cubic coefficients
  dof_M0: jax.Array = _field("nv", fill=0.0)         # diag(qM) at qpos0 without tendon armature
  dof_invweight0: jax.Array = _field("nv", fill=0.0)  # diag(qM^-1) at qpos0, joint-averaged

  # geoms
  geom_type: np.ndarray = _field("ngeom")
  geom_contype: np.ndarray = _field("ngeom", fill=1)
  geom_conaffinity: np.ndarray = _field("ngeom", fill=1)
  geom_condim: np.ndarray = _field("ngeom", fill=3)
  geom_bodyid: np.ndarray = _field("ngeom")
  geom_dataid: np.ndarray = _field("ngeom", fill=-1)
  geom_group: np.ndarray = _field("ngeom", fill=0)
  geom_priority: np.ndarray = _field("ngeom", fill=0)
  geom_sameframe: np.ndarray = _field("ngeom", fill=0)
  geom_solmix: jax.Array = _field("ngeom", fill=1.0)
  geom_solref: jax.Array = _field("ngeom", 2, fill=_SOLREF)
  geom_solimp: jax.Array = _field("ngeom", 5, fill=_SOLIMP)
  geom_size: jax.Array = _field("ngeom", 3)
  geom_rbound: jax.Array = _field("ngeom", fill=0.0)
  geom_pos: jax.Array = _field("ngeom", 3)
  geom_quat: jax.Array = _field("ngeom", 4)
  geom_friction: jax.Array = _field("ngeom", 3, fill=(1.0, 0.005, 0.0001))
  geom_margin: jax.Array = _field("ngeom", fill=0.0)
  geom_gap: jax.Array = _field("ngeom", fill=0.0)
  geom_adhesion: jax.Array = _field("ngeom", fill=0.0)  # N, contacts' pull along the normal
  geom_surfacevel: jax.Array = _field("ngeom", 6, fill=0.0)  # surface's (linear, angular)
                                                             # velocity in the geom frame
  geom_fluid: jax.Array = _field("ngeom", 12, fill=0.0)  # ellipsoid fluid model, see fluid
  geom_fluidellipsoid: np.ndarray = _field("ngeom", derived=True)  # compiled with fluidshape=
                                                                   # "ellipsoid", see fluid
  # appearance: rays (flexor.ray) pass through geoms whose colour, or material's, is transparent
  geom_rgba: np.ndarray = _field("ngeom", 4, fill=(0.5, 0.5, 0.5, 1.0))
  geom_matid: np.ndarray = _field("ngeom", fill=-1)
  mat_rgba: np.ndarray = _field("nmat", 4, fill=(1.0, 1.0, 1.0, 1.0))

  # sites
  site_bodyid: np.ndarray = _field("nsite")
  site_sameframe: np.ndarray = _field("nsite", fill=0)
  site_pos: jax.Array = _field("nsite", 3)
  site_quat: jax.Array = _field("nsite", 4)
  site_size: jax.Array = _field("nsite", 3, fill=0.005)
  site_type: np.ndarray = _field("nsite", fill=2)   # GeomType of the site's volume (touch sensors)
  site_dataid: np.ndarray = _field("nsite", fill=-1)  # a mesh site's mesh, else -1

  # cameras and lights (mj_camlight): a pose on a body and a CamLight mode; the *0 fields are
  # the fixed-mode frames at qpos0, relative to the body (pos0) or to the subtree com of the
  # target or else the body (poscom0), set by flexor.setconst; the optics as mjModel holds them
  cam_mode: np.ndarray = _field("ncam", fill=0)
  cam_bodyid: np.ndarray = _field("ncam")
  cam_targetbodyid: np.ndarray = _field("ncam", fill=-1)
  cam_pos: jax.Array = _field("ncam", 3)
  cam_quat: jax.Array = _field("ncam", 4)
  cam_poscom0: jax.Array = _field("ncam", 3, fill=0.0)
  cam_pos0: jax.Array = _field("ncam", 3, fill=0.0)
  cam_mat0: jax.Array = _field("ncam", 9, fill=(1.0, 0, 0, 0, 1.0, 0, 0, 0, 1.0))
  cam_projection: np.ndarray = _field("ncam", fill=0)         # 0 perspective, 1 orthographic
  cam_fovy: jax.Array = _field("ncam", fill=45.0)             # degrees (orthographic: m)
  cam_resolution: np.ndarray = _field("ncam", 2, fill=1)      # pixels
  cam_sensorsize: jax.Array = _field("ncam", 2, fill=0.0)     # m
  cam_intrinsic: jax.Array = _field("ncam", 4, fill=(0.01, 0.01, 0.0, 0.0))  # focal, principal
  light_mode: np.ndarray = _field("nlight", fill=0)
  light_bodyid: np.ndarray = _field("nlight")
  light_targetbodyid: np.ndarray = _field("nlight", fill=-1)
  light_pos: jax.Array = _field("nlight", 3)
  light_dir: jax.Array = _field("nlight", 3)                  # unit
  light_poscom0: jax.Array = _field("nlight", 3, fill=0.0)
  light_pos0: jax.Array = _field("nlight", 3, fill=0.0)
  light_dir0: jax.Array = _field("nlight", 3, fill=(0.0, 0.0, -1.0))

  # meshes: vertices (traced: collision differentiates through them) in the mesh's centred,
  # principal frame; mesh_graph is the convex hull as MuJoCo lays it out (mjCMesh::MakeGraph):
  # numvert, numface, vert_edgeadr[numvert], vert_globalid[numvert], edge_localid[numvert +
  # 3 numface] (each hull vertex's neighbours, -1 after each), face_globalid[3 numface];
  # mesh_extrema: the hull vertex (local id) furthest along each of the 27 directions with
  # components in {-1, 0, 1}; polygons: the hull's coplanar faces merged, each a vertex loop
  # (mesh vertex ids) counter-clockwise about its outward unit normal, and mesh_polymap lists the
  # polygons at each vertex
  mesh_vertadr: np.ndarray = _field("nmesh", fill=0)
  mesh_vertnum: np.ndarray = _field("nmesh", fill=0)
  mesh_vert: jax.Array = _field("nmeshvert", 3, fill=0.0)
  mesh_pos: jax.Array = _field("nmesh", 3, fill=0.0)   # the mesh frame in the asset's coordinates
  mesh_quat: jax.Array = _field("nmesh", 4, fill=(1.0, 0.0, 0.0, 0.0))
  mesh_faceadr: np.ndarray = _field("nmesh", fill=0)
  mesh_facenum: np.ndarray = _field("nmesh", fill=0)
  mesh_face: np.ndarray = _field("nmeshface", 3, fill=0)  # triangles (mesh vertex ids): rays
  mesh_graphadr: np.ndarray = _field("nmesh", fill=-1)
  mesh_graph: np.ndarray = _field("nmeshgraph", fill=0)
  mesh_extrema: np.ndarray = _field("nmesh", 27, fill=0)
  mesh_polynum: np.ndarray = _field("nmesh", fill=0)
  mesh_polyadr: np.ndarray = _field("nmesh", fill=0)
  mesh_polynormal: jax.Array = _field("nmeshpoly", 3, fill=0.0)
  mesh_polyvertadr: np.ndarray = _field("nmeshpoly", fill=0)
  mesh_polyvertnum: np.ndarray = _field("nmeshpoly", fill=0)
  mesh_polyvert: np.ndarray = _field("nmeshpolyvert", fill=0)
  mesh_polymapadr: np.ndarray = _field("nmeshvert", fill=0)
  mesh_polymapnum: np.ndarray = _field("nmeshvert", fill=0)
  mesh_polymap: np.ndarray = _field("nmeshpolymap", fill=0)
  # the up to 3 vertices (mesh vertex ids, -1 padded) plane-mesh collision adds to each polygon
  # vertex when it is the support point and that polygon faces the plane (mesh.polygon_quads)
  mesh_polyquad: np.ndarray = _field("nmeshpolyvert", 3, derived=True)

  # height fields: hfield_data[hfield_adr : + nrow * ncol] the elevations in [0, 1], row-major
  # from the bottom (-y) row; size (radius x, radius y, elevation z, base z) in metres
  hfield_size: jax.Array = _field("nhfield", 4, fill=0.0)
  hfield_nrow: np.ndarray = _field("nhfield", fill=0)
  hfield_ncol: np.ndarray = _field("nhfield", fill=0)
  hfield_adr: np.ndarray = _field("nhfield", fill=0)
  hfield_data: jax.Array = _field("nhfielddata", fill=0.0)

  # tendons; a tendon's path is wrap_*[tendon_adr : tendon_adr + tendon_num]
  tendon_adr: np.ndarray = _field("ntendon", fill=0)
  tendon_num: np.ndarray = _field("ntendon", fill=0)
  tendon_limited: np.ndarray = _field("ntendon", fill=0)
  tendon_actfrclimited: np.ndarray = _field("ntendon", fill=0)
  tendon_range: jax.Array = _field("ntendon", 2, fill=0.0)       # m
  tendon_actfrcrange: jax.Array = _field("ntendon", 2, fill=0.0)  # N, total actuator force
  tendon_stiffness: jax.Array = _field("ntendon", fill=0.0)      # N/m
  tendon_stiffnesspoly: jax.Array = _field("ntendon", 2, fill=0.0)
  tendon_damping: jax.Array = _field("ntendon", fill=0.0)        # N s/m
  tendon_dampingpoly: jax.Array = _field("ntendon", 2, fill=0.0)
  tendon_armature: jax.Array = _field("ntendon", fill=0.0)       # kg
  tendon_frictionloss: jax.Array = _field("ntendon", fill=0.0)
  tendon_group: np.ndarray = _field("ntendon", fill=0)
  tendon_margin: jax.Array = _field("ntendon", fill=0.0)          # m, limit detection margin
  tendon_solref_lim: jax.Array = _field("ntendon", 2, fill=_SOLREF)
  tendon_solimp_lim: jax.Array = _field("ntendon", 5, fill=_SOLIMP)
  tendon_solref_fri: jax.Array = _field("ntendon", 2, fill=_SOLREF)
  tendon_solimp_fri: jax.Array = _field("ntendon", 5, fill=_SOLIMP)
  tendon_lengthspring: jax.Array = _field("ntendon", 2, fill=0.0)  # spring dead band, m
  tendon_springyield: jax.Array = _field("ntendon", fill=0.0)  # plastic yield threshold, m
  tendon_plasticadr: np.ndarray = _field("ntendon", derived=True)  # Data.plastic address or -1
  tendon_length0: jax.Array = _field("ntendon", fill=0.0)        # length at qpos0, m
  tendon_invweight0: jax.Array = _field("ntendon", fill=0.0)     # J qM^-1 J' at qpos0
  wrap_type: np.ndarray = _field("nwrap", fill=0)    # WrapType
  wrap_objid: np.ndarray = _field("nwrap", fill=-1)  # joint, site or geom id
  wrap_prm: jax.Array = _field("nwrap", fill=0.0)    # joint coef, pulley divisor or sidesite id

  # actuators: per actuator (nactuator), per scalar control (nu) or per force output (nout); an
  # actuator's controls are ctrl[ctrladr : ctrladr + ctrlnum], its outputs (one, or three for an
  # SO3 transmission) actuator_force[outadr : outadr + outnum], its states act[actadr : ...]
  actuator_trntype: np.ndarray = _field("nactuator", fill=0)
  actuator_dyntype: np.ndarray = _field("nactuator", fill=0)
  actuator_gaintype: np.ndarray = _field("nactuator", fill=0)
  actuator_biastype: np.ndarray = _field("nactuator", fill=0)
  actuator_trnid: np.ndarray = _field("nactuator", 2, fill=-1)
  actuator_ctrladr: np.ndarray = _field("nactuator", fill=0)
  actuator_ctrlnum: np.ndarray = _field("nactuator", fill=1)
  actuator_ctrlspec: np.ndarray = _field("nactuator", fill=0)  # mjtCtrlInput bits or mjtCtrlChart
  actuator_outadr: np.ndarray = _field("nactuator", fill=0)
  actuator_outnum: np.ndarray = _field("nactuator", fill=1)
  actuator_actadr: np.ndarray = _field("nactuator", fill=-1)
  actuator_actnum: np.ndarray = _field("nactuator", fill=0)
  actuator_group: np.ndarray = _field("nactuator", fill=0)
  actuator_forcelimited: np.ndarray = _field("nactuator", fill=0)
  actuator_actlimited: np.ndarray = _field("nactuator", fill=0)
  actuator_actearly: np.ndarray = _field("nactuator", fill=0)
  actuator_dynprm: jax.Array = _field("nactuator", 10, fill=0.0)
  actuator_gainprm: jax.Array = _field("nactuator", 10, fill=0.0)
  actuator_biasprm: jax.Array = _field("nactuator", 10, fill=0.0)
  actuator_forcerange: jax.Array = _field("nactuator", 2, fill=0.0)
  actuator_actrange: jax.Array = _field("nactuator", 2, fill=0.0)
  actuator_cranklength: jax.Array = _field("nactuator", fill=0.0)  # m
  actuator_damping: jax.Array = _field("nactuator", fill=0.0)      # added to the target's damping
  actuator_dampingpoly: jax.Array = _field("nactuator", 2, fill=0.0)
  actuator_armature: jax.Array = _field("nactuator", fill=0.0)     # added to the target's armature
  # history buffers (MuJoCo 4): (nsample, interp) with interp 0 zero-order hold, 1 linear,
  # 2 cubic; the buffer's address in Data.history or -1; the delay (s) of the controls read
  actuator_history: np.ndarray = _field("nactuator", 2, fill=0)
  actuator_historyadr: np.ndarray = _field("nactuator", derived=True)
  actuator_delay: jax.Array = _field("nactuator", fill=0.0)
  # static tables derived from the parameters at compile time (no mjModel counterpart): the
  # offsets of the dcmotor and pid states within the actuator's act block, (slew, integral,
  # temperature, bristle, current) or -1, and which setpoints wrap around a rotation (MuJoCo's
  # wrapPeriod > 0): 0 no, 1 rotational site-refsite gear (period 2 pi |gear[3:]|), 2 ball joint
  # (period 2 pi |gear[:3]|)
  actuator_actslot: np.ndarray = _field("nactuator", 5, derived=True)
  actuator_wrap: np.ndarray = _field("nactuator", derived=True)
  actuator_ctrllimited: np.ndarray = _field("nu", fill=0)
  actuator_ctrlrange: jax.Array = _field("nu", 2, fill=0.0)
  actuator_gear: jax.Array = _field("nout", 6, fill=0.0)
  actuator_acc0: jax.Array = _field("nout", fill=0.0)         # |qM^-1 moment| at qpos0
  actuator_length0: jax.Array = _field("nout", fill=0.0)      # length at qpos0
  actuator_lengthrange: jax.Array = _field("nout", 2, fill=0.0)

  # equality constraints
  eq_type: np.ndarray = _field("neq", fill=0)
  eq_obj1id: np.ndarray = _field("neq", fill=-1)
  eq_obj2id: np.ndarray = _field("neq", fill=-1)
  eq_objtype: np.ndarray = _field("neq", fill=1)      # ObjType of obj1/obj2: BODY or SITE
  eq_active0: np.ndarray = _field("neq", fill=1)
  eq_data: jax.Array = _field("neq", 12, fill=0.0)
  eq_solref: jax.Array = _field("neq", 2, fill=_SOLREF)
  eq_solimp: jax.Array = _field("neq", 5, fill=_SOLIMP)

  # sensors, in document order; a sensor's values are sensordata[adr : adr + dim]
  sensor_type: np.ndarray = _field("nsensor", fill=0)       # SensorType
  sensor_datatype: np.ndarray = _field("nsensor", fill=0)   # DataType
  sensor_needstage: np.ndarray = _field("nsensor", fill=1)  # Stage
  sensor_objtype: np.ndarray = _field("nsensor", fill=0)    # ObjType of the sensorized object
  sensor_objid: np.ndarray = _field("nsensor", fill=-1)
  sensor_reftype: np.ndarray = _field("nsensor", fill=0)    # ObjType of the reference frame
  sensor_refid: np.ndarray = _field("nsensor", fill=-1)     # -1: world frame
  sensor_dim: np.ndarray = _field("nsensor", fill=1)
  sensor_intprm: np.ndarray = _field("nsensor", 3, fill=0)  # rangefinder: mjRAYDATA bits
  sensor_adr: np.ndarray = _field("nsensor", derived=True)
  sensor_cutoff: jax.Array = _field("nsensor", fill=0.0)    # clamp of |value|; 0: none
  sensor_noise: jax.Array = _field("nsensor", fill=0.0)     # noise std dev, for users: not added
  sensor_history: np.ndarray = _field("nsensor", 2, fill=0)  # (nsample, interp), see actuators
  sensor_historyadr: np.ndarray = _field("nsensor", derived=True)
  sensor_delay: jax.Array = _field("nsensor", fill=0.0)      # s; > 0: sensordata is delayed
  sensor_interval: jax.Array = _field("nsensor", 2, fill=0.0)  # (period, phase) in s; 0: none

  # explicit contact pairs and excluded body pairs; a signature is body1 << 16 + body2
  pair_dim: np.ndarray = _field("npair", fill=3)
  pair_geom1: np.ndarray = _field("npair", fill=-1)
  pair_geom2: np.ndarray = _field("npair", fill=-1)
  pair_signature: np.ndarray = _field("npair", fill=0)
  pair_solref: jax.Array = _field("npair", 2, fill=_SOLREF)
  pair_solreffriction: jax.Array = _field("npair", 2, fill=(0.0, 0.0))
  pair_solimp: jax.Array = _field("npair", 5, fill=_SOLIMP)
  pair_margin: jax.Array = _field("npair", fill=0.0)
  pair_gap: jax.Array = _field("npair", fill=0.0)
  pair_adhesion: jax.Array = _field("npair", fill=0.0)
  pair_friction: jax.Array = _field("npair", 5, fill=(1.0, 1.0, 0.005, 0.0001, 0.0001))
  exclude_signature: np.ndarray = _field("nexclude", fill=0)

  # the narrow phase's candidates (static, derived by flexor.mjcf.contact_pairs; no mjModel
  # counterpart): every geom pair MuJoCo's filters can let through, in the order MuJoCo emits
  # their contacts, geom1 of the lower geom type, and its <pair> index or -1 for a pair found
  # by contype/conaffinity
  collision_geom: np.ndarray = _field("ncollision", 2, fill=-1, derived=True)
  collision_pairid: np.ndarray = _field("ncollision", fill=-1, derived=True)
  collision_dim: np.ndarray = _field("ncollision", fill=3, derived=True)    # condim
  collision_conadr: np.ndarray = _field("ncollision", fill=0, derived=True)  # its first slot
  collision_connum: np.ndarray = _field("ncollision", fill=0, derived=True)  # narrow-phase slots
  # a height field pair's sub-grid window (columns, rows; contact_pairs.hfield_window), else 0
  collision_window: np.ndarray = _field("ncollision", 2, fill=0, derived=True)

  # constraint rows (static, derived by flexor.mjcf.constraint_rows): each row's mjtConstraint,
  # element id (equality, dof, joint, tendon or contact slot) and index within its element
  # (limits: 0 lower, 1 upper; equality and contacts: the row of the block)
  efc_rowtype: np.ndarray = _field("njmax", fill=0, derived=True)
  efc_rowid: np.ndarray = _field("njmax", fill=0, derived=True)
  efc_rowsub: np.ndarray = _field("njmax", fill=0, derived=True)

  # statistics
  stat_meaninertia: jax.Array = _field(None, fill=1.0)  # mean diag(qM) at qpos0, setconst

  # joint positions
  qpos0: jax.Array = _field("nq")                  # reference pose
  qpos_spring: jax.Array = _field("nq")            # spring reference pose

  # keyframes: host-side numpy, used to initialise Data
  key_time: np.ndarray          # (nkey,)
  key_qpos: np.ndarray          # (nkey, nq)
  key_qvel: np.ndarray          # (nkey, nv)
  key_act: np.ndarray           # (nkey, na)
  key_ctrl: np.ndarray          # (nkey, nu)
  key_mpos: np.ndarray          # (nkey, nmocap, 3)
  key_mquat: np.ndarray         # (nkey, nmocap, 4)
  key_plastic: np.ndarray       # (nkey, nplastic)

  # names, in element order
  names_body: tuple[str, ...]
  names_jnt: tuple[str, ...]
  names_geom: tuple[str, ...]
  names_site: tuple[str, ...]
  names_cam: tuple[str, ...]
  names_light: tuple[str, ...]
  names_actuator: tuple[str, ...]
  names_tendon: tuple[str, ...]
  names_sensor: tuple[str, ...]
  names_key: tuple[str, ...]

  # tree tables (static, derived; see flexor.tree)
  body_depth: np.ndarray        # (nbody,) 0 for the world
  body_jump: np.ndarray         # (nlevel, nbody) ancestor 2**k levels up (0 past the root)
  body_subtree: np.ndarray      # (nbody, nbody) bool: [i, j] iff j in subtree of i, i > 0
  body_dof: np.ndarray          # (nbody, nv) bool: [b, d] iff dof d moves body b
  dof_ancestor: np.ndarray      # (nv, nv) bool: [i, j] iff dof j is i or a dof ancestor of i
  dof_cdofdot: np.ndarray       # (nv, nv) bool: dofs whose velocity enters cdof_dot[i]
  jnt_slot: np.ndarray          # (maxjnt, nbody) joint id of the k-th joint of each body or -1

  # convex hull tables (static, derived; see flexor.mjcf.mesh.hull_tables): every mesh's hull
  # vertices as rows, mesh after mesh, indexed by the mesh colliders; -1 where absent
  mesh_hulladr: np.ndarray      # (nmesh,) first hull row of each mesh
  mesh_hullstart: np.ndarray    # (nmesh, 27) row a support search along each grid direction
                                # starts at (mesh_extrema)
  hull_vertid: np.ndarray       # (nhull,) each row's vertex (into mesh_vert)
  hull_nbr: np.ndarray          # (nhull, D) rows of its hull neighbours, in graph order
  hull_poly: np.ndarray         # (nhull, P) polygons at it (into mesh_poly*), mesh_polymap order
  hull_prev: np.ndarray         # (nhull, P) row before it in each of those polygons' loops
  hull_quad: np.ndarray         # (nhull, P, 3) rows plane-mesh collision adds (mesh_polyquad)
  mesh_polyloop: np.ndarray     # (nmeshpoly, L) each polygon's rows in reverse loop order

  def name2id(self, kind: str, name: str) -> int:
    """Index of the element of ``kind`` ('body', 'jnt', 'geom', ...) called ``name``."""
    names = getattr(self, f"names_{kind}")
    try:
      return names.index(name)
    except ValueError:
      raise KeyError(f"no {kind} named {name!r}; known: {', '.join(n for n in names if n)}") from None


_EYE3 = tuple(map(tuple, np.eye(3)))
_UNIT_QUAT = (1.0, 0.0, 0.0, 0.0)


@struct.dataclass
class Data:
  """Simulation state and every quantity computed from it (mjData's names).

  Shapes without a batch prefix; ``make_data(model, batch_shape)`` adds one. Matrices that MuJoCo
  stores flattened or sparse are dense here: ``xmat`` (nbody, 3, 3), ``qM`` (nv, nv),
  ``actuator_moment`` (nout, nv), ``ten_J`` (ntendon, nv). The declarations are the field table
  ``make_data`` reads: each field's size, trailing shape and reset value.
  """

  # state
  time: jax.Array = _field(None, fill=0.0)            # s
  qpos: jax.Array = _field("nq")                      # reset to qpos0
  qvel: jax.Array = _field("nv", fill=0.0)
  act: jax.Array = _field("na", fill=0.0)
  qacc_warmstart: jax.Array = _field("nv", fill=0.0)
  plastic: jax.Array = _field("nplastic")             # spring references of plastic joints and
                                                      # tendons; reset from qpos_spring, lengthspring
  # controls and applied forces
  ctrl: jax.Array = _field("nu", fill=0.0)
  qfrc_applied: jax.Array = _field("nv", fill=0.0)
  xfrc_applied: jax.Array = _field("nbody", 6, fill=0.0)  # world (force, torque) at xipos
  mocap_pos: jax.Array = _field("nmocap", 3)          # reset to the mocap bodies' body_pos
  mocap_quat: jax.Array = _field("nmocap", 4)         # reset to their body_quat
  # dynamics output
  qacc: jax.Array = _field("nv", fill=0.0)
  act_dot: jax.Array = _field("na", fill=0.0)
  # kinematics
  xpos: jax.Array = _field("nbody", 3, fill=0.0)
  xquat: jax.Array = _field("nbody", 4, fill=_UNIT_QUAT)
  xmat: jax.Array = _field("nbody", 3, 3, fill=_EYE3)
  xipos: jax.Array = _field("nbody", 3, fill=0.0)
  ximat: jax.Array = _field("nbody", 3, 3, fill=_EYE3)
  xanchor: jax.Array = _field("njnt", 3, fill=0.0)
  xaxis: jax.Array = _field("njnt", 3, fill=0.0)
  geom_xpos: jax.Array = _field("ngeom", 3, fill=0.0)
  geom_xmat: jax.Array = _field("ngeom", 3, 3, fill=_EYE3)
  site_xpos: jax.Array = _field("nsite", 3, fill=0.0)
  site_xmat: jax.Array = _field("nsite", 3, 3, fill=_EYE3)
  cam_xpos: jax.Array = _field("ncam", 3, fill=0.0)
  cam_xmat: jax.Array = _field("ncam", 3, 3, fill=_EYE3)
  light_xpos: jax.Array = _field("nlight", 3, fill=0.0)
  light_xdir: jax.Array = _field("nlight", 3, fill=0.0)
  # com-based quantities: spatial vectors are (rotation, translation) about subtree_com[root]
  subtree_com: jax.Array = _field("nbody", 3, fill=0.0)
  cinert: jax.Array = _field("nbody", 10, fill=0.0)   # (Ixx Iyy Izz Ixy Ixz Iyz, m*c, m)
  crb: jax.Array = _field("nbody", 10, fill=0.0)      # composite rigid-body inertia
  cdof: jax.Array = _field("nv", 6, fill=0.0)
  cvel: jax.Array = _field("nbody", 6, fill=0.0)
  cdof_dot: jax.Array = _field("nv", 6, fill=0.0)
  cacc: jax.Array = _field("nbody", 6, fill=0.0)
  cfrc_int: jax.Array = _field("nbody", 6, fill=0.0)
  cfrc_ext: jax.Array = _field("nbody", 6, fill=0.0)
  # tendons: ten_wrapadr/ten_wrapnum index wrap_obj/wrap_xpos, one row per path point
  ten_wrapadr: jax.Array = _field("ntendon", fill=0)   # int
  ten_wrapnum: jax.Array = _field("ntendon", fill=0)   # int
  ten_length: jax.Array = _field("ntendon", fill=0.0)                # m
  ten_J: jax.Array = _field("ntendon", "nv", fill=0.0)
  ten_velocity: jax.Array = _field("ntendon", fill=0.0)              # m/s
  wrap_obj: jax.Array = _field("nwrap", 2, fill=0)   # int: geom id, -1 site, -2 pulley
  wrap_xpos: jax.Array = _field("nwrap", 6, fill=0.0)    # path points, 2 per row
  # actuators
  actuator_length: jax.Array = _field("nout", fill=0.0)
  actuator_moment: jax.Array = _field("nout", "nv", fill=0.0)
  actuator_velocity: jax.Array = _field("nout", fill=0.0)
  actuator_force: jax.Array = _field("nout", fill=0.0)
  # joint-space quantities
  qM: jax.Array = _field("nv", "nv", fill=0.0)        # joint-space inertia incl. armature
  qLD: jax.Array = _field("nv", "nv", fill=0.0)       # lower Cholesky factor of qM (not LDL')
  qfrc_bias: jax.Array = _field("nv", fill=0.0)       # Coriolis, centrifugal and gravity
  qfrc_spring: jax.Array = _field("nv", fill=0.0)
  qfrc_damper: jax.Array = _field("nv", fill=0.0)
  qfrc_gravcomp: jax.Array = _field("nv", fill=0.0)
  qfrc_fluid: jax.Array = _field("nv", fill=0.0)
  qfrc_adhesion: jax.Array = _field("nv", fill=0.0)   # adhesive contacts' pull
  qfrc_passive: jax.Array = _field("nv", fill=0.0)
  qfrc_actuator: jax.Array = _field("nv", fill=0.0)
  qfrc_smooth: jax.Array = _field("nv", fill=0.0)
  qacc_smooth: jax.Array = _field("nv", fill=0.0)
  qfrc_constraint: jax.Array = _field("nv", fill=0.0)
  qfrc_inverse: jax.Array = _field("nv", fill=0.0)
  # contacts: one slot per contact a candidate pair can make, or per condim compacted to
  # <size nconmax> (Model.nconmax, see flexor.collision); contact_exist marks the slots holding a
  # contact (MuJoCo's first ncon)
  ncon: jax.Array = _field(None, fill=0)              # int: contacts found
  ncon_dropped: jax.Array = _field(None, fill=0)      # int: contacts left out, nconmax being full
  ncollision_dropped: jax.Array = _field(None, fill=0)  # int: pairs in reach past max_geom_pairs
  contact_exist: jax.Array = _field("nconmax", fill=False)
  contact_dist: jax.Array = _field("nconmax", fill=0.0)   # m, negative in penetration
  contact_pos: jax.Array = _field("nconmax", 3, fill=0.0)
  contact_frame: jax.Array = _field("nconmax", 3, 3, fill=0.0)  # rows: normal (geom1 to geom2), tangents
  contact_includemargin: jax.Array = _field("nconmax", fill=0.0)  # rows exist below it
  contact_friction: jax.Array = _field("nconmax", 5, fill=0.0)
  contact_solref: jax.Array = _field("nconmax", 2, fill=0.0)
  contact_solreffriction: jax.Array = _field("nconmax", 2, fill=0.0)
  contact_solimp: jax.Array = _field("nconmax", 5, fill=0.0)
  contact_adhesion: jax.Array = _field("nconmax", fill=0.0)  # N
  contact_dim: jax.Array = _field("nconmax", fill=0)       # int: 1 for adhesion in the gap
  contact_geom: jax.Array = _field("nconmax", 2, fill=-1)  # int
  # constraint rows (Model.njmax, static layout in MuJoCo's order: equality, friction, limit,
  # contact); efc_active marks the rows MuJoCo would instantiate (its first nefc)
  nefc: jax.Array = _field(None, fill=0)              # int: active rows
  efc_active: jax.Array = _field("njmax", fill=False)
  efc_type: jax.Array = _field("njmax", fill=0)       # int: mjtConstraint
  efc_id: jax.Array = _field("njmax", fill=0)         # int: the element's id
  efc_J: jax.Array = _field("njmax", "nv", fill=0.0)
  efc_pos: jax.Array = _field("njmax", fill=0.0)
  efc_margin: jax.Array = _field("njmax", fill=0.0)
  efc_frictionloss: jax.Array = _field("njmax", fill=0.0)
  efc_D: jax.Array = _field("njmax", fill=0.0)
  efc_R: jax.Array = _field("njmax", fill=0.0)
  efc_KBIP: jax.Array = _field("njmax", 4, fill=0.0)  # stiffness, damping, impedance, (unused)
  efc_vel: jax.Array = _field("njmax", fill=0.0)
  efc_aref: jax.Array = _field("njmax", fill=0.0)
  efc_force: jax.Array = _field("njmax", fill=0.0)
  efc_state: jax.Array = _field("njmax", fill=0)      # int: mjtConstraintState
  # sensors (Model.sensor_*): values after the stage each sensor needs, cutoff applied
  sensordata: jax.Array = _field("nsensordata", fill=0.0)
  # past controls and sensor values, see flexor.history; reset as mj_resetData
  history: jax.Array = _field("nhistory")
  # potential and kinetic energy (J): with EnableBit.ENERGY, or as energy sensors need them
  energy: jax.Array = _field(None, 2, fill=0.0)
  # diagnostics: set under jit, checked by the caller
  warning_nan: jax.Array = _field(None, fill=False)   # bool: a state or acceleration became non-finite


# how far below a step a sensor tick may fall and still round up to it (measured on MuJoCo 4.0.0:
# between 5e-13 and 5e-12 steps)
_GRID_TOL = 1e-12


def _history0(model: Model) -> np.ndarray:
  """Initial history buffers (nhistory,), as mj_resetData: each [user, cursor, times (n),
  values (n, dim)] with the cursor on the newest of n samples, zero values, and times one step
  apart up to -timestep; a sensor with a period keeps its samples a period apart (rounded up to
  the step grid) ending at the phase, or at -period for phase 0, and its user slot holds that
  last tick."""
  history = np.zeros(model.nhistory)
  if not model.nhistory:
    return history
  dt = float(np.asarray(model.opt.timestep))
  if dt <= 0:
    raise ValueError(f"history buffers require a positive timestep, got {dt:g}")
  interval = np.asarray(model.sensor_interval, dtype=np.float64).reshape(-1, 2)
  # (address, samples, user slot, period, phase); an actuator's user slot is free (0)
  buffers = [(adr, n, 0.0, 0.0, 0.0) for adr, n in zip(model.actuator_historyadr,
                                                       model.actuator_history[:, 0])]
  for i, (adr, n) in enumerate(zip(model.sensor_historyadr, model.sensor_history[:, 0])):
    period, phase = interval[i]
    last = (-period if phase == 0 else phase) if period > 0 else -dt
    buffers.append((adr, n, last, period, last))
  for adr, n, user, period, last in buffers:
    if adr < 0:
      continue
    times = -(n - np.arange(n)) * dt
    if period > 0:
      # ticks a period apart, each rounded up to the step grid but at least one step before
      # the next sample, the newest one step before the first tick to be recorded (measured)
      step = int(np.ceil((last + period) / dt - _GRID_TOL))
      for j in range(n - 1, -1, -1):
        step = min(int(np.ceil((last - (n - 1 - j) * period) / dt - _GRID_TOL)), step - 1)
        times[j] = step * dt
    history[adr:adr + 2 + n] = np.concatenate([[user, n - 1], times])
  return history


def _size(model: Model, key: int | str) -> int:
  return key if isinstance(key, int) else int(getattr(model, key))


def initial_plastic(model: Model) -> np.ndarray:
  """Initial plastic state (nplastic,), as mj_resetData: the plastic joints' qpos_spring entries
  (1, or 4 for a ball) and the plastic tendons' tendon_lengthspring (lower, upper)."""
  plastic = np.zeros(model.nplastic)
  qpos_spring = np.asarray(model.qpos_spring)
  for j in np.flatnonzero(model.jnt_plasticadr >= 0):
    width = 4 if model.jnt_type[j] == JointType.BALL else 1
    adr, qadr = model.jnt_plasticadr[j], model.jnt_qposadr[j]
    plastic[adr:adr + width] = qpos_spring[qadr:qadr + width]
  for t in np.flatnonzero(model.tendon_plasticadr >= 0):
    adr = model.tendon_plasticadr[t]
    plastic[adr:adr + 2] = np.asarray(model.tendon_lengthspring)[t]
  return plastic


def make_data(model: Model, batch_shape: tuple[int, ...] = (), key: int | str | None = None) -> Data:
  """Returns Data for ``model`` with qpos = qpos0 (or keyframe ``key``) and reset values elsewhere.

  Args:
    model: the compiled model; its dtype decides Data's float dtype.
    batch_shape: leading batch dimensions for every field, for use with ``jax.vmap``.
    key: optional keyframe index or name whose time, qpos, qvel, act, ctrl, mocap and plastic
      state are used.
  Returns:
    Data whose leaves are concrete, committed (non-weak) arrays, so a jitted step called with it
    and with its own output traces once.
  """
  dtype = model.body_mass.dtype
  mocap_bodies = np.flatnonzero(model.body_mocapid >= 0)
  mocap_bodies = mocap_bodies[np.argsort(model.body_mocapid[mocap_bodies])]
  values: dict[str, Any] = dict(qpos=model.qpos0, mocap_pos=np.asarray(model.body_pos)[mocap_bodies],
                                mocap_quat=np.asarray(model.body_quat)[mocap_bodies],
                                plastic=initial_plastic(model), history=_history0(model))
  if key is not None:
    k = model.name2id("key", key) if isinstance(key, str) else int(key)
    values.update(time=model.key_time[k], qpos=model.key_qpos[k], qvel=model.key_qvel[k],
                  act=model.key_act[k], ctrl=model.key_ctrl[k],
                  mocap_pos=model.key_mpos[k], mocap_quat=model.key_mquat[k],
                  plastic=model.key_plastic[k])
  fields: dict[str, Any] = {}
  for name, spec in field_table(Data).items():
    shape = tuple(_size(model, s) for s in ((spec["size"],) if spec["size"] else ()) + spec["shape"])
    fill = spec["fill"]
    kind = bool if isinstance(fill, bool) else int if isinstance(fill, int) else float
    array = np.asarray(values[name] if name in values else fill, dtype=np.float64)
    array = np.broadcast_to(array, tuple(batch_shape) + shape)
    fields[name] = device_array(array, {bool: bool, int: np.int32, float: dtype}[kind])
  return Data(**fields)
