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
import jax.numpy as jnp
import numpy as np
from flax import struct


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


class DynType(enum.IntEnum):
  """mjtDyn."""

  NONE = 0
  INTEGRATOR = 1
  FILTER = 2
  FILTEREXACT = 3
  MUSCLE = 4
  USER = 5


class GainType(enum.IntEnum):
  """mjtGain."""

  FIXED = 0
  AFFINE = 1
  MUSCLE = 2
  USER = 3


class BiasType(enum.IntEnum):
  """mjtBias."""

  NONE = 0
  AFFINE = 1
  MUSCLE = 2
  USER = 3


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
  o_margin: jax.Array          # ()
  o_solref: jax.Array          # (2,)
  o_solimp: jax.Array          # (5,)
  o_friction: jax.Array        # (5,)
  integrator: int              # IntegratorType
  cone: int                    # mjtCone
  jacobian: int                # mjtJacobian
  solver: int                  # mjtSolver
  iterations: int
  ls_iterations: int
  noslip_iterations: int
  disableflags: int            # DisableBit
  enableflags: int             # EnableBit

  def disabled(self, bit: DisableBit) -> bool:
    """True if ``bit`` is set in ``disableflags`` (static: usable in Python control flow)."""
    return bool(self.disableflags & bit)

  def enabled(self, bit: EnableBit) -> bool:
    """True if ``bit`` is set in ``enableflags``."""
    return bool(self.enableflags & bit)


class Model(_Node):
  """A compiled model: mjModel's fields, names and element ordering.

  Integer structure is static numpy; real-valued parameters are traced ``jax.Array`` leaves.
  Fields below the "tree tables" heading have no mjModel counterpart: they are static tables
  derived from the kinematic tree once, at compile time, so that every tree recursion after
  forward kinematics is a matmul with a 0/1 mask (see ``flexor.tree``).
  """

  # sizes
  nq: int
  nv: int
  nu: int
  na: int
  nbody: int
  njnt: int
  ngeom: int
  nsite: int
  nmesh: int
  ntendon: int
  nmocap: int
  neq: int
  nkey: int
  opt: Option

  # bodies, (nbody, ...)
  body_parentid: np.ndarray
  body_rootid: np.ndarray
  body_weldid: np.ndarray
  body_mocapid: np.ndarray
  body_jntnum: np.ndarray
  body_jntadr: np.ndarray
  body_dofnum: np.ndarray
  body_dofadr: np.ndarray
  body_geomnum: np.ndarray
  body_geomadr: np.ndarray
  body_sameframe: np.ndarray   # mjtSameFrame of the inertial frame
  body_pos: jax.Array           # (nbody, 3) position offset rel. to parent body
  body_quat: jax.Array          # (nbody, 4) orientation offset rel. to parent body
  body_ipos: jax.Array          # (nbody, 3) local position of centre of mass
  body_iquat: jax.Array         # (nbody, 4) local orientation of inertia ellipsoid
  body_mass: jax.Array          # (nbody,) kg
  body_subtreemass: jax.Array   # (nbody,) kg
  body_inertia: jax.Array       # (nbody, 3) diagonal inertia in ipos/iquat frame, kg m^2
  body_gravcomp: jax.Array      # (nbody,) antigravity force, units of body weight

  # joints, (njnt, ...)
  jnt_type: np.ndarray
  jnt_qposadr: np.ndarray
  jnt_dofadr: np.ndarray
  jnt_bodyid: np.ndarray
  jnt_group: np.ndarray
  jnt_limited: np.ndarray
  jnt_actfrclimited: np.ndarray
  jnt_actgravcomp: np.ndarray
  jnt_solref: jax.Array         # (njnt, 2)
  jnt_solimp: jax.Array         # (njnt, 5)
  jnt_pos: jax.Array            # (njnt, 3) local anchor position
  jnt_axis: jax.Array           # (njnt, 3) local joint axis
  jnt_stiffness: jax.Array      # (njnt,) N/m or Nm/rad
  jnt_range: jax.Array          # (njnt, 2) m or rad
  jnt_actfrcrange: jax.Array    # (njnt, 2)
  jnt_margin: jax.Array         # (njnt,)

  # dofs, (nv, ...)
  dof_bodyid: np.ndarray
  dof_jntid: np.ndarray
  dof_parentid: np.ndarray
  dof_solref: jax.Array         # (nv, 2)
  dof_solimp: jax.Array         # (nv, 5)
  dof_frictionloss: jax.Array   # (nv,)
  dof_armature: jax.Array       # (nv,) kg m^2 or kg
  dof_damping: jax.Array        # (nv,) N s/m or Nm s/rad

  # geoms, (ngeom, ...)
  geom_type: np.ndarray
  geom_contype: np.ndarray
  geom_conaffinity: np.ndarray
  geom_condim: np.ndarray
  geom_bodyid: np.ndarray
  geom_dataid: np.ndarray
  geom_group: np.ndarray
  geom_priority: np.ndarray
  geom_sameframe: np.ndarray
  geom_solmix: jax.Array        # (ngeom,)
  geom_solref: jax.Array        # (ngeom, 2)
  geom_solimp: jax.Array        # (ngeom, 5)
  geom_size: jax.Array          # (ngeom, 3)
  geom_rbound: jax.Array        # (ngeom,)
  geom_pos: jax.Array           # (ngeom, 3)
  geom_quat: jax.Array          # (ngeom, 4)
  geom_friction: jax.Array      # (ngeom, 3)
  geom_margin: jax.Array        # (ngeom,)
  geom_gap: jax.Array           # (ngeom,)

  # sites, (nsite, ...)
  site_bodyid: np.ndarray
  site_sameframe: np.ndarray
  site_pos: jax.Array           # (nsite, 3)
  site_quat: jax.Array          # (nsite, 4)
  site_size: jax.Array          # (nsite, 3)

  # meshes, (nmesh, ...): vertices stay host-side until collision needs them
  mesh_vertadr: np.ndarray
  mesh_vertnum: np.ndarray
  mesh_vert: np.ndarray         # (nmeshvert, 3) in the mesh's centred, principal frame

  # actuators, (nu, ...)
  actuator_trntype: np.ndarray
  actuator_dyntype: np.ndarray
  actuator_gaintype: np.ndarray
  actuator_biastype: np.ndarray
  actuator_trnid: np.ndarray    # (nu, 2)
  actuator_actadr: np.ndarray
  actuator_actnum: np.ndarray
  actuator_ctrllimited: np.ndarray
  actuator_forcelimited: np.ndarray
  actuator_actlimited: np.ndarray
  actuator_actearly: np.ndarray
  actuator_dynprm: jax.Array    # (nu, 10)
  actuator_gainprm: jax.Array   # (nu, 10)
  actuator_biasprm: jax.Array   # (nu, 10)
  actuator_ctrlrange: jax.Array   # (nu, 2)
  actuator_forcerange: jax.Array  # (nu, 2)
  actuator_actrange: jax.Array    # (nu, 2)
  actuator_gear: jax.Array        # (nu, 6)
  actuator_cranklength: jax.Array  # (nu,)
  actuator_lengthrange: jax.Array  # (nu, 2)

  # tendons, equality constraints: parsed and stored; their stages come later
  tendon_num: np.ndarray
  tendon_adr: np.ndarray
  tendon_limited: np.ndarray
  wrap_type: np.ndarray
  wrap_objid: np.ndarray
  wrap_prm: jax.Array           # (nwrap,)
  tendon_range: jax.Array       # (ntendon, 2)
  tendon_stiffness: jax.Array   # (ntendon,)
  tendon_damping: jax.Array     # (ntendon,)
  tendon_lengthspring: jax.Array  # (ntendon, 2)
  eq_type: np.ndarray
  eq_obj1id: np.ndarray
  eq_obj2id: np.ndarray
  eq_active0: np.ndarray
  eq_data: jax.Array            # (neq, 12)
  eq_solref: jax.Array          # (neq, 2)
  eq_solimp: jax.Array          # (neq, 5)

  # joint positions
  qpos0: jax.Array              # (nq,) reference pose
  qpos_spring: jax.Array        # (nq,) spring reference pose

  # keyframes: host-side numpy, used to initialise Data
  key_time: np.ndarray          # (nkey,)
  key_qpos: np.ndarray          # (nkey, nq)
  key_qvel: np.ndarray          # (nkey, nv)
  key_act: np.ndarray           # (nkey, na)
  key_ctrl: np.ndarray          # (nkey, nu)
  key_mpos: np.ndarray          # (nkey, nmocap, 3)
  key_mquat: np.ndarray         # (nkey, nmocap, 4)

  # names, in element order
  names_body: tuple[str, ...]
  names_jnt: tuple[str, ...]
  names_geom: tuple[str, ...]
  names_site: tuple[str, ...]
  names_actuator: tuple[str, ...]
  names_tendon: tuple[str, ...]
  names_key: tuple[str, ...]

  # tree tables (static, derived; see flexor.tree)
  body_depth: np.ndarray        # (nbody,) 0 for the world
  body_jump: np.ndarray         # (nlevel, nbody) ancestor 2**k levels up (0 past the root)
  body_subtree: np.ndarray      # (nbody, nbody) bool: [i, j] iff j in subtree of i, i > 0
  body_dof: np.ndarray          # (nbody, nv) bool: [b, d] iff dof d moves body b
  dof_ancestor: np.ndarray      # (nv, nv) bool: [i, j] iff dof j is i or a dof ancestor of i
  dof_cdofdot: np.ndarray       # (nv, nv) bool: dofs whose velocity enters cdof_dot[i]
  jnt_slot: np.ndarray          # (maxjnt, nbody) joint id of the k-th joint of each body or -1

  def name2id(self, kind: str, name: str) -> int:
    """Index of the element of ``kind`` ('body', 'jnt', 'geom', ...) called ``name``."""
    names = getattr(self, f"names_{kind}")
    try:
      return names.index(name)
    except ValueError:
      raise KeyError(f"no {kind} named {name!r}; known: {', '.join(n for n in names if n)}") from None


@struct.dataclass
class Data:
  """Simulation state and every quantity computed from it (mjData's names).

  Shapes without a batch prefix; ``make_data(model, batch_shape)`` adds one. Matrices that MuJoCo
  stores flattened or sparse are dense here: ``xmat`` (nbody, 3, 3), ``qM`` (nv, nv),
  ``actuator_moment`` (nu, nv), ``ten_J`` (ntendon, nv).
  """

  # state
  time: jax.Array               # () s
  qpos: jax.Array               # (nq,)
  qvel: jax.Array               # (nv,)
  act: jax.Array                # (na,)
  qacc_warmstart: jax.Array     # (nv,)
  # controls and applied forces
  ctrl: jax.Array               # (nu,)
  qfrc_applied: jax.Array       # (nv,)
  xfrc_applied: jax.Array       # (nbody, 6) world-frame (force, torque) at xipos
  mocap_pos: jax.Array          # (nmocap, 3)
  mocap_quat: jax.Array         # (nmocap, 4)
  # dynamics output
  qacc: jax.Array               # (nv,)
  act_dot: jax.Array            # (na,)
  # kinematics
  xpos: jax.Array               # (nbody, 3)
  xquat: jax.Array              # (nbody, 4)
  xmat: jax.Array               # (nbody, 3, 3)
  xipos: jax.Array              # (nbody, 3)
  ximat: jax.Array              # (nbody, 3, 3)
  xanchor: jax.Array            # (njnt, 3)
  xaxis: jax.Array              # (njnt, 3)
  geom_xpos: jax.Array          # (ngeom, 3)
  geom_xmat: jax.Array          # (ngeom, 3, 3)
  site_xpos: jax.Array          # (nsite, 3)
  site_xmat: jax.Array          # (nsite, 3, 3)
  # com-based quantities: spatial vectors are (rotation, translation) about subtree_com[root]
  subtree_com: jax.Array        # (nbody, 3)
  cinert: jax.Array             # (nbody, 10) (Ixx Iyy Izz Ixy Ixz Iyz, m*c, m)
  crb: jax.Array                # (nbody, 10) composite rigid-body inertia
  cdof: jax.Array               # (nv, 6)
  cvel: jax.Array               # (nbody, 6)
  cdof_dot: jax.Array           # (nv, 6)
  cacc: jax.Array               # (nbody, 6)
  cfrc_int: jax.Array           # (nbody, 6)
  cfrc_ext: jax.Array           # (nbody, 6)
  # tendons and actuators
  ten_length: jax.Array         # (ntendon,)
  ten_J: jax.Array              # (ntendon, nv)
  ten_velocity: jax.Array       # (ntendon,)
  actuator_length: jax.Array    # (nu,)
  actuator_moment: jax.Array    # (nu, nv)
  actuator_velocity: jax.Array  # (nu,)
  actuator_force: jax.Array     # (nu,)
  # joint-space quantities
  qM: jax.Array                 # (nv, nv) joint-space inertia incl. armature
  qLD: jax.Array                # (nv, nv) lower Cholesky factor of qM (dense, unlike MuJoCo's LDL')
  qfrc_bias: jax.Array          # (nv,) Coriolis, centrifugal and gravity
  qfrc_spring: jax.Array        # (nv,)
  qfrc_damper: jax.Array        # (nv,)
  qfrc_gravcomp: jax.Array      # (nv,)
  qfrc_fluid: jax.Array         # (nv,)
  qfrc_passive: jax.Array       # (nv,)
  qfrc_actuator: jax.Array      # (nv,)
  qfrc_smooth: jax.Array        # (nv,)
  qacc_smooth: jax.Array        # (nv,)
  qfrc_constraint: jax.Array    # (nv,)
  qfrc_inverse: jax.Array       # (nv,)
  # diagnostics: set under jit, checked by the caller
  warning_nan: jax.Array        # () bool: a state or acceleration became non-finite


def make_data(model: Model, batch_shape: tuple[int, ...] = (), key: int | str | None = None) -> Data:
  """Returns Data for ``model`` with qpos = qpos0 (or keyframe ``key``) and zeros elsewhere.

  Args:
    model: the compiled model; its dtype decides Data's float dtype.
    batch_shape: leading batch dimensions for every field, for use with ``jax.vmap``.
    key: optional keyframe index or name whose time, qpos, qvel, act, ctrl and mocap are used.
  Returns:
    Data whose leaves are concrete, committed (non-weak) arrays, so a jitted step called with it
    and with its own output traces once.
  """
  dtype = model.body_mass.dtype
  nbody, nv = model.nbody, model.nv
  mocap_bodies = np.flatnonzero(model.body_mocapid >= 0)
  mocap_order = np.argsort(model.body_mocapid[mocap_bodies])
  mocap_pos = np.asarray(model.body_pos)[mocap_bodies[mocap_order]]
  mocap_quat = np.asarray(model.body_quat)[mocap_bodies[mocap_order]]
  state: dict[str, Any] = dict(time=0.0, qpos=np.asarray(model.qpos0), qvel=np.zeros(nv),
                               act=np.zeros(model.na), ctrl=np.zeros(model.nu),
                               mocap_pos=mocap_pos, mocap_quat=mocap_quat)
  if key is not None:
    k = model.name2id("key", key) if isinstance(key, str) else int(key)
    state.update(time=model.key_time[k], qpos=model.key_qpos[k], qvel=model.key_qvel[k],
                 act=model.key_act[k], ctrl=model.key_ctrl[k],
                 mocap_pos=model.key_mpos[k], mocap_quat=model.key_mquat[k])
  eye = np.eye(3)
  shapes: dict[str, tuple[int, ...] | np.ndarray] = dict(
      qacc_warmstart=(nv,), qfrc_applied=(nv,), xfrc_applied=(nbody, 6), qacc=(nv,),
      act_dot=(model.na,),
      xpos=(nbody, 3), xquat=np.tile([1.0, 0, 0, 0], (nbody, 1)), xmat=np.tile(eye, (nbody, 1, 1)),
      xipos=(nbody, 3), ximat=np.tile(eye, (nbody, 1, 1)),
      xanchor=(model.njnt, 3), xaxis=(model.njnt, 3),
      geom_xpos=(model.ngeom, 3), geom_xmat=np.tile(eye, (model.ngeom, 1, 1)),
      site_xpos=(model.nsite, 3), site_xmat=np.tile(eye, (model.nsite, 1, 1)),
      subtree_com=(nbody, 3), cinert=(nbody, 10), crb=(nbody, 10), cdof=(nv, 6),
      cvel=(nbody, 6), cdof_dot=(nv, 6), cacc=(nbody, 6), cfrc_int=(nbody, 6),
      cfrc_ext=(nbody, 6),
      ten_length=(model.ntendon,), ten_J=(model.ntendon, nv), ten_velocity=(model.ntendon,),
      actuator_length=(model.nu,), actuator_moment=(model.nu, nv),
      actuator_velocity=(model.nu,), actuator_force=(model.nu,),
      qM=(nv, nv), qLD=(nv, nv), qfrc_bias=(nv,), qfrc_spring=(nv,), qfrc_damper=(nv,),
      qfrc_gravcomp=(nv,), qfrc_fluid=(nv,), qfrc_passive=(nv,), qfrc_actuator=(nv,),
      qfrc_smooth=(nv,), qacc_smooth=(nv,), qfrc_constraint=(nv,), qfrc_inverse=(nv,))
  fields: dict[str, Any] = {}
  for name, value in {**state, **shapes}.items():
    array = np.zeros(value) if isinstance(value, tuple) else np.asarray(value, dtype=np.float64)
    array = np.broadcast_to(array, tuple(batch_shape) + array.shape)
    fields[name] = jnp.array(array, dtype=dtype)
  fields["warning_nan"] = jnp.zeros(tuple(batch_shape), dtype=bool)
  return Data(**fields)
