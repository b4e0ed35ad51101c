"""Constraint rows: Jacobians, impedance and reference accelerations (MuJoCo's
``engine_core_constraint.c``: ``mj_makeConstraint`` and ``mj_referenceConstraint``).

Every row the model can activate has a static slot (``flexor.mjcf.constraint_rows``), in
MuJoCo's order: equality, dof and tendon friction loss, joint and tendon limits, contacts.
``make_constraint`` fills them all and marks the rows MuJoCo would instantiate in
``efc_active``; inactive rows carry zeros and are ignored by the solver, so the active rows,
read in order, are exactly MuJoCo's ``efc_*`` arrays.

Soft-constraint model (per row): impedance ``imp`` in (0, 1) from ``solimp`` and the violation,
regulariser ``R = (1 - imp) / imp * A_ii`` with MuJoCo's approximation of the diagonal of
``A = J M^-1 J'`` from ``*_invweight0`` (the exact diagonal under ``<flag diagexact>``),
``D = 1 / R``, and the reference acceleration
``aref = -B v - K imp (pos - margin)`` from ``solref`` (time constant and damping ratio, or
direct stiffness and damping when negative).
"""

from __future__ import annotations

import functools
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

from flexor import collision, crb, kinematics, math
from flexor.types import (ConstraintType, Data, DisableBit, EnableBit, EqType, JointType, Model,
                          ObjType)

_MINIMP, _MAXIMP = 0.0001, 0.9999   # MuJoCo's mjMINIMP, mjMAXIMP


@functools.cache
def _kinds(rowtype_bytes: bytes, disableflags: int) -> dict[int, np.ndarray]:
  """Row indices of each constraint type that the options leave enabled."""
  rowtype = np.frombuffer(rowtype_bytes, dtype=np.int32)
  disabled = {ConstraintType.EQUALITY: DisableBit.EQUALITY,
              ConstraintType.FRICTION_DOF: DisableBit.FRICTIONLOSS,
              ConstraintType.FRICTION_TENDON: DisableBit.FRICTIONLOSS,
              ConstraintType.LIMIT_JOINT: DisableBit.LIMIT,
              ConstraintType.LIMIT_TENDON: DisableBit.LIMIT,
              ConstraintType.CONTACT_FRICTIONLESS: DisableBit.CONTACT,
              ConstraintType.CONTACT_PYRAMIDAL: DisableBit.CONTACT,
              ConstraintType.CONTACT_ELLIPTIC: DisableBit.CONTACT}
  out = {}
  for kind in ConstraintType:
    rows = np.flatnonzero(rowtype == kind)
    if disableflags & (DisableBit.CONSTRAINT | disabled[kind]):
      rows = rows[:0]
    out[int(kind)] = rows
  return out


def constraints_on(m: Model) -> bool:
  """Whether the model has constraint rows and the options leave constraints on (static).
  Where it is false, no row is active (nefc = 0), the other efc_* fields are left as they
  are, and qacc is qacc_smooth: MuJoCo makes no rows."""
  return bool(m.njmax) and not m.opt.disabled(DisableBit.CONSTRAINT)


def rows_of(m: Model, *kinds: ConstraintType) -> np.ndarray:
  """Static indices of the enabled rows of the given constraint types, in row order."""
  table = _kinds(m.efc_rowtype.astype(np.int32).tobytes(), m.opt.disableflags)
  return np.sort(np.concatenate([table[int(k)] for k in kinds]))


def _friction_rows(m: Model, d: Data, rows: np.ndarray):
  """(J, pos, margin, frictionloss, active, solref, solimp, diag) of friction-loss rows."""
  ids, dof = m.efc_rowid[rows], m.efc_rowtype[rows] == ConstraintType.FRICTION_DOF
  eye = jnp.eye(m.nv, dtype=d.qpos.dtype)
  jac = jnp.where(dof[:, None], eye[np.where(dof, ids, 0)],
                  d.ten_J[np.where(dof, 0, ids)] if m.ntendon else 0.0)
  floss = jnp.where(dof, m.dof_frictionloss[np.where(dof, ids, 0)] if m.nv else 0.0,
                    m.tendon_frictionloss[np.where(dof, 0, ids)] if m.ntendon else 0.0)
  pick = lambda a, b: jnp.where(dof[:, None], a[np.where(dof, ids, 0)],
                                b[np.where(dof, 0, ids)] if m.ntendon else 0.0)
  solref = pick(m.dof_solref, m.tendon_solref_fri)
  solimp = pick(m.dof_solimp, m.tendon_solimp_fri)
  diag = jnp.where(dof, m.dof_invweight0[np.where(dof, ids, 0)],
                   m.tendon_invweight0[np.where(dof, 0, ids)] if m.ntendon else 0.0)
  zero = jnp.zeros(len(rows), dtype=d.qpos.dtype)
  active = floss > 0
  return jac, zero, zero, floss, active, solref, solimp, diag


def _joint_limit_rows(m: Model, d: Data, rows: np.ndarray):
  """Rows of joint limits: hinge and slide (lower, upper) and ball (rotation angle)."""
  # The side in the state's dtype: a float64 constant would promote a float32 model's rows.
  jnt = m.efc_rowid[rows]
  side = np.where(m.efc_rowsub[rows] == 0, -1.0, 1.0).astype(d.qpos.dtype)
  dofadr, qadr = m.jnt_dofadr[jnt], m.jnt_qposadr[jnt]
  ball = m.jnt_type[jnt] == JointType.BALL
  q = d.qpos[qadr]
  scalar_dist = side * (m.jnt_range[jnt, np.where(side < 0, 0, 1)] - q)
  quat = math.quat_normalize(d.qpos[qadr[:, None] + np.arange(4)] if ball.any()
                             else jnp.tile(jnp.array([1.0, 0, 0, 0], q.dtype), (len(rows), 1)))
  axis_angle = math.quat_to_vel(quat)
  angle = math.safe_norm(axis_angle)
  axis = axis_angle / jnp.where(angle > 0, angle, 1.0)[:, None]
  ball_dist = jnp.max(m.jnt_range[jnt], axis=-1) - angle
  dist = jnp.where(ball, ball_dist, scalar_dist)
  jac = jnp.zeros((len(rows), m.nv), dtype=q.dtype)
  jac = jac.at[np.arange(len(rows)), dofadr].set(jnp.where(ball, -axis[:, 0], -side))
  for k in (1, 2):
    ball_rows = np.flatnonzero(ball)
    jac = jac.at[ball_rows, dofadr[ball_rows] + k].set(-axis[ball_rows, k])
  margin = m.jnt_margin[jnt]
  active = dist < margin
  diag = m.dof_invweight0[dofadr]
  zero = jnp.zeros(len(rows), dtype=q.dtype)
  return jac, dist, margin, zero, active, m.jnt_solref[jnt], m.jnt_solimp[jnt], diag


def _tendon_limit_rows(m: Model, d: Data, rows: np.ndarray):
  """Rows of tendon limits (lower, upper)."""
  ten = m.efc_rowid[rows]
  side = np.where(m.efc_rowsub[rows] == 0, -1.0, 1.0).astype(d.qpos.dtype)
  dist = side * (m.tendon_range[ten, np.where(side < 0, 0, 1)] - d.ten_length[ten])
  jac = -side[:, None] * d.ten_J[ten]
  margin = m.tendon_margin[ten]
  zero = jnp.zeros(len(rows), dtype=dist.dtype)
  return (jac, dist, margin, zero, dist < margin, m.tendon_solref_lim[ten],
          m.tendon_solimp_lim[ten], m.tendon_invweight0[ten])


def slot_bodies(m: Model, d: Data) -> tuple[np.ndarray | jax.Array, np.ndarray | jax.Array]:
  """The bodies of geom 1 and geom 2 of each contact slot (nconmax,), static where the slots'
  pairs are."""
  geom = collision.slot_geom(m, d)
  table = m.geom_bodyid if isinstance(geom, np.ndarray) else jnp.asarray(m.geom_bodyid)
  return table[geom[:, 0]], table[geom[:, 1]]


def body_slots(m: Model, d: Data, body: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """Flat pairs (owner, slot) of the contact slots that can touch ``body[owner]`` (n,): with
  static slots only those whose geom 1 or geom 2 belongs to the body, else every slot."""
  body1, body2 = slot_bodies(m, d)
  if isinstance(body1, np.ndarray):
    return np.nonzero((body[:, None] == body1[None]) | (body[:, None] == body2[None]))
  owner, slot = np.indices((len(body), m.nconmax))
  return owner.ravel(), slot.ravel()


def single_rows(m: Model, d: Data, rows: np.ndarray) -> jax.Array:
  """(len(rows),) bool: the contact row belongs to a slot whose contact has dim 1 though its
  slot has friction rows (adhesion in the gap, see ``flexor.collision``)."""
  slot = m.efc_rowid[rows]
  frictional = m.efc_rowtype[rows] != ConstraintType.CONTACT_FRICTIONLESS
  return jnp.asarray(frictional) & (d.contact_dim[slot] == 1)


def _contact_rows(m: Model, d: Data, rows: np.ndarray):
  """Rows of contacts: frictionless, pyramidal edges or elliptic components.

  A pyramidal contact of dimension n has 2 (n - 1) rows, J_normal +- mu_k J_k for each friction
  direction k; an elliptic one has n rows, the contact frame's components (the rotational
  ones from the angular Jacobian).
  """
  slot, sub = m.efc_rowid[rows], m.efc_rowsub[rows]
  kind = m.efc_rowtype[rows]
  body1, body2 = slot_bodies(m, d)
  pyramid = kind == ConstraintType.CONTACT_PYRAMIDAL
  elliptic = kind == ConstraintType.CONTACT_ELLIPTIC
  edge = np.where(pyramid, sub // 2, 0)
  sign = np.where(pyramid, np.where(sub % 2 == 0, 1.0, -1.0), 0.0).astype(d.qpos.dtype)
  at = lambda x: math.take(x, slot)  # each row's contact: slices, no gather
  friction = math.take_columns(at(d.contact_friction), edge)
  active = at(d.contact_exist) & (at(d.contact_dist) < at(d.contact_includemargin))
  if m.flg_adhesion:
    # an adhesive contact in the gap has one frictionless row, the first of its block
    single = single_rows(m, d, rows)
    friction = jnp.where(single, 0.0, friction)
    active = ((at(d.contact_exist) & (at(d.contact_adhesion) != 0)) | active) & (
        ~single | (sub == 0))
  # each row's direction in the contact frame's six components (translational x, y, z, then
  # rotational): an elliptic row's own component, a pyramid edge the normal +- mu_k times
  # friction component k + 1
  first = np.where(elliptic, sub, 0)
  second = edge + 1
  coef = (np.arange(6) == first[:, None]) + (sign * friction)[:, None] * (
      np.arange(6) == second[:, None])                                  # (rows, 6)
  frame = at(d.contact_frame)                                            # (rows, 3, 3)
  dir_lin = math.mat_t_vec(frame, coef[:, :3])
  dir_rot = math.mat_t_vec(frame, coef[:, 3:])
  pos = at(d.contact_pos)
  jac = _contact_jac(m, d, pos, body1[slot], body2[slot], dir_lin, dir_rot, active)
  normal = ~elliptic | (sub == 0)
  dist = jnp.where(normal, at(d.contact_dist), 0.0)
  margin = jnp.where(normal, at(d.contact_includemargin), 0.0)
  # MuJoCo's diagApprox: mean inverse weights of the two bodies; pyramid edges add mu^2 times
  # the translational (tangent) or rotational (torsion, rolling) weight
  tran = m.body_invweight0[body1[slot], 0] + m.body_invweight0[body2[slot], 0]
  rot = m.body_invweight0[body1[slot], 1] + m.body_invweight0[body2[slot], 1]
  diag = jnp.where(pyramid, tran + friction**2 * jnp.where(edge < 2, tran, rot),
                   jnp.where(elliptic & (sub >= 3), rot, tran))
  zero = jnp.zeros(len(rows), dtype=dist.dtype)
  return (jac, dist, margin, zero, active, at(d.contact_solref), at(d.contact_solimp), diag)


def dof_trees(m: Model) -> tuple[np.ndarray, int]:
  """(dof_tree (nv,), ntree): each dof's kinematic tree, numbered from 0 (static); a single
  tree where islands are disabled (``opt.disableflags`` island)."""
  if m.opt.disabled(DisableBit.ISLAND) or m.nv == 0:
    return np.zeros(m.nv, np.int64), 1
  roots, dof_tree = np.unique(m.body_rootid[m.dof_bodyid], return_inverse=True)
  return dof_tree, len(roots)


def islands(dof_tree: np.ndarray, ntree: int, J: jax.Array,
            active: jax.Array) -> tuple[jax.Array, jax.Array]:
  """(row labels (nrow,), dof labels (nv,)) in [0, ntree), equal for the rows and dofs of one
  constraint island (mj_island: kinematic trees joined by the active rows whose Jacobians
  touch them); ``dof_trees`` gives the trees. Inactive rows are labelled 0."""
  if ntree == 1:
    return jnp.zeros(J.shape[0], jnp.int32), jnp.zeros(J.shape[1], jnp.int32)
  nonzero = (jnp.abs(jax.lax.stop_gradient(J)) > 0).astype(J.dtype)
  touches = nonzero @ jax.nn.one_hot(dof_tree, ntree, dtype=J.dtype) > 0
  touches = touches & active[:, None]

  def spread(labels):
    row = jnp.min(jnp.where(touches, labels[None, :], ntree), axis=1)
    return jnp.minimum(labels, jnp.min(jnp.where(touches, row[:, None], ntree), axis=0))

  def cond(state):
    labels, previous = state
    return jnp.any(labels != previous)

  labels = jnp.arange(ntree)
  labels = jax.lax.while_loop(cond, lambda s: (spread(s[0]), s[0]), (spread(labels), labels))[0]
  rows = jnp.min(jnp.where(touches, labels[None, :], ntree), axis=1) % ntree
  return rows, labels[dof_tree]


def active_capacity(n: int) -> int | None:
  """How many of ``n`` conditional rows (limits, contacts) to carry as the active ones (static),
  or None for all: a quarter, at least 32, rounded up to a multiple of 8. A running simulation
  has few such rows active (on dm_control's humanoid, at most 38 of 424 rows in 256 worlds),
  so stages that gather the active rows into this many slots do a fraction of the work
  (``over_active``, ``math.run_if``)."""
  capacity = -(-max(32, n // 4) // 8) * 8
  return capacity if capacity < n else None


def over_active(active: jax.Array, fn: Callable[[jax.Array | slice, jax.Array], jax.Array],
                out: jax.Array) -> jax.Array:
  """``out`` (n, ...) with the rows where ``active`` (n,) replaced by ``fn(rows, valid)``.

  fn maps rows, an index of k rows, and whether each is a real row (k,) (padding repeats row
  0) to their values (k, ...). With ``active_capacity(n)`` slots it runs on that many active
  rows at a time, in a loop that a batch repeats only while one of its worlds has rows left
  (once, in a running simulation); else on all rows at once (rows ``slice(None)``). Not
  reverse differentiable (a while_loop): callers differentiate through a rule of their own."""
  n = len(active)
  capacity = active_capacity(n)
  if capacity is None:
    mask = active.reshape((n,) + (1,) * (out.ndim - 1))
    return jnp.where(mask, fn(slice(None), active), out)

  def chunk(state: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, jax.Array]:
    out, todo = state
    pick, _ = math.compact(todo, capacity, n)
    valid = pick < n
    out = out.at[pick].set(fn(jnp.where(valid, pick, 0), valid), mode="drop")
    return out, todo.at[pick].set(False, mode="drop")

  return jax.lax.while_loop(lambda state: jnp.any(state[1]), chunk, (out, active))[0]


def _contact_jac(m: Model, d: Data, point: jax.Array, body1: np.ndarray | jax.Array,
                 body2: np.ndarray | jax.Array, lin: jax.Array, rot: jax.Array,
                 active: jax.Array) -> jax.Array:
  """Jacobians (rows, nv) of contact rows, ``jac_along`` body 2 minus body 1 at the contact
  points (rows, 3) along lin and rot (rows, 3), zero on rows not ``active`` (rows,); one
  product of the two where the bodies allow it (``kinematics.shared_root``).

  Built on the active rows only (``over_active``): the (rows, 6) x (6, nv) products of all
  rows were a third of make_constraint's time on the humanoid. Its derivatives are those of
  the all-rows form."""
  shared = kinematics.shared_root(m, body1, body2)
  if shared is None:
    bodies = (jnp.asarray(body1), jnp.asarray(body2))
  else:
    bodies = (jnp.asarray(shared[0]), jnp.asarray(shared[1], point.dtype))

  def all_rows(subtree_com, cdof, point, lin, rot, first, second, active):
    dm = d.replace(subtree_com=subtree_com, cdof=cdof)
    if shared is None:
      jac = (kinematics.jac_along(m, dm, point, second, lin, rot)
             - kinematics.jac_along(m, dm, point, first, lin, rot))
    else:
      jac = kinematics.jac_along(m, dm, point, first, lin, rot, moves=second)
    return jnp.where(active[:, None], jac, 0.0)

  @jax.custom_jvp
  def on_active_rows(subtree_com, cdof, point, lin, rot, first, second, active):
    def rows_jac(rows: jax.Array | slice, valid: jax.Array) -> jax.Array:
      return all_rows(subtree_com, cdof, point[rows], lin[rows], rot[rows], first[rows],
                      second[rows], valid)
    return over_active(active, rows_jac, jnp.zeros((len(active), m.nv), point.dtype))

  # the value stays the active rows' (the all-rows product would be computed and thrown away):
  # only the tangent is the all-rows form's
  on_active_rows.defjvp(lambda primals, tangents: (
      on_active_rows(*primals), jax.jvp(all_rows, primals, tangents)[1]))
  return on_active_rows(d.subtree_com, d.cdof, point, lin, rot, *bodies, active)


def eq_anchors(m: Model, d: Data, eq: np.ndarray):
  """World anchor points (n, 3) and bodies (n,) of connect and weld constraints
  (mj_equalityAnchors): body semantics place eq_data's anchors on the bodies (a weld's anchor on
  body 1 is data[3:6]), site semantics use the sites."""
  site = m.eq_objtype[eq] == ObjType.SITE
  obj1, obj2 = m.eq_obj1id[eq], m.eq_obj2id[eq]
  weld = m.eq_type[eq] == EqType.WELD
  data = m.eq_data[eq]
  local1 = jnp.where(weld[:, None], data[:, 3:6], data[:, :3])
  local2 = jnp.where(weld[:, None], data[:, :3], data[:, 3:6])
  b1, b2 = np.where(site, m.site_bodyid[np.where(site, obj1, 0)] if m.nsite else 0, obj1), \
      np.where(site, m.site_bodyid[np.where(site, obj2, 0)] if m.nsite else 0, obj2)
  on_body = lambda b, local: d.xpos[b] + math.mat_vec(d.xmat[b], local)
  pos1, pos2 = on_body(b1, local1), on_body(b2, local2)
  if m.nsite:
    pos1 = jnp.where(site[:, None], d.site_xpos[np.where(site, obj1, 0)], pos1)
    pos2 = jnp.where(site[:, None], d.site_xpos[np.where(site, obj2, 0)], pos2)
  return pos1, pos2, b1, b2


def weld_quats(m: Model, d: Data, eq: np.ndarray, b1: np.ndarray, b2: np.ndarray):
  """(frame0, rel, q1) of weld constraints, q0 = frame0 rel: with body semantics body 1's
  orientation and relpose (eq_data[6:10]) and body 2's orientation; with site semantics the
  two site frames and no relpose."""
  site = (m.eq_objtype[eq] == ObjType.SITE)[:, None]
  obj1, obj2 = m.eq_obj1id[eq], m.eq_obj2id[eq]
  frame0, rel, q1 = d.xquat[b1], m.eq_data[eq, 6:10], d.xquat[b2]
  if m.nsite:
    s1, s2 = np.where(site[:, 0], obj1, 0), np.where(site[:, 0], obj2, 0)
    frame0 = jnp.where(site, math.quat_mul(frame0, m.site_quat[s1]), frame0)
    q1 = jnp.where(site, math.quat_mul(q1, m.site_quat[s2]), q1)
    rel = jnp.where(site, jnp.array([1.0, 0, 0, 0], rel.dtype), rel)
  return frame0, rel, q1


def _quat_axis(q: jax.Array, axis: jax.Array) -> jax.Array:
  """q * (0, axis) (mju_mulQuatAxis)."""
  return math.quat_mul(q, jnp.concatenate([jnp.zeros_like(axis[..., :1]), axis], axis=-1))


def _equality_rows(m: Model, d: Data, rows: np.ndarray):
  """Rows of equality constraints: connect (3), weld (6), joint and tendon couplings (1).

  connect and weld: position error pos1 - pos2 of the anchors with Jacobian J(body1, pos1) -
  J(body2, pos2); a weld adds the orientation error, the vector part of conj(q1) q0 relpose
  times torquescale, whose Jacobian is 0.5 vec(conj(q1) (0, Jrot_col) q0 relpose). joint and
  tendon: q1 - ref1 - poly(q2 - ref2) with the polynomial eq_data[:5] (one object: q1 - ref1 -
  data[0]), ref the value at qpos0.
  """
  eq, sub = m.efc_rowid[rows], m.efc_rowsub[rows]
  n, dtype = len(rows), d.qpos.dtype
  kind = m.eq_type[eq]
  spatial = np.isin(kind, (EqType.CONNECT, EqType.WELD))
  pos = jnp.zeros(n, dtype)
  jac = jnp.zeros((n, m.nv), dtype)
  diag = jnp.zeros(n, dtype)
  if spatial.any():
    idx = np.flatnonzero(spatial)
    e = eq[idx]
    pos1, pos2, b1, b2 = eq_anchors(m, d, e)
    jp1, jr1 = kinematics.jac(m, d, pos1, b1)
    jp2, jr2 = kinematics.jac(m, d, pos2, b2)
    k = sub[idx]
    trans = k < 3
    kk = np.minimum(k, 2)
    err = jnp.take_along_axis(pos1 - pos2, kk[:, None], axis=1)[:, 0]
    jt = jnp.take_along_axis(jp1 - jp2, kk[:, None, None], axis=2)[..., 0]
    frame0, rel, q1 = weld_quats(m, d, e, b1, b2)
    q0 = math.quat_mul(frame0, rel)
    neg1 = math.quat_conj(q1)
    torquescale = m.eq_data[e, 10]
    rot_err = math.quat_mul(neg1, q0)[:, 1:] * torquescale[:, None]
    cols = _quat_axis(neg1[:, None, :], jr1 - jr2)                  # (n, nv, 4)
    jrot = 0.5 * math.quat_mul(cols, q0[:, None, :])[..., 1:] * torquescale[:, None, None]
    kr = np.clip(k - 3, 0, 2)
    rerr = jnp.take_along_axis(rot_err, kr[:, None], axis=1)[:, 0]
    jr = jnp.take_along_axis(jrot, kr[:, None, None], axis=2)[..., 0]
    pos = pos.at[idx].set(jnp.where(trans, err, rerr))
    jac = jac.at[idx].set(jnp.where(trans[:, None], jt, jr))
    w = np.where(trans, 0, 1)
    diag = diag.at[idx].set(m.body_invweight0[b1, w] + m.body_invweight0[b2, w])
  for etype, value_of in ((EqType.JOINT, None), (EqType.TENDON, None)):
    idx = np.flatnonzero(kind == etype)
    if not idx.size:
      continue
    e = eq[idx]
    o1, o2 = m.eq_obj1id[e], m.eq_obj2id[e]
    two = o2 >= 0
    o2s = np.where(two, o2, o1)
    if etype == EqType.JOINT:
      q = lambda o: d.qpos[m.jnt_qposadr[o]]
      ref = lambda o: m.qpos0[m.jnt_qposadr[o]]
      eye = jnp.eye(m.nv, dtype=dtype)
      jrow = lambda o: eye[m.jnt_dofadr[o]]
      weight = lambda o: m.dof_invweight0[m.jnt_dofadr[o]]
    else:
      q = lambda o: d.ten_length[o]
      ref = lambda o: m.tendon_length0[o]
      jrow = lambda o: d.ten_J[o]
      weight = lambda o: m.tendon_invweight0[o]
    data = m.eq_data[e]
    poly, deriv = _coupling(data, jnp.where(two, q(o2s) - ref(o2s), 0.0))
    err = q(o1) - ref(o1) - data[:, 0] - jnp.where(two, poly, 0.0)
    j = jrow(o1) - jnp.where(two, deriv, 0.0)[:, None] * jrow(o2s)
    pos, jac = pos.at[idx].set(err), jac.at[idx].set(j)
    diag = diag.at[idx].set(weight(o1) + jnp.where(two, weight(o2s), 0.0))
  zero = jnp.zeros(n, dtype)
  active = jnp.ones(n, bool)
  return jac, pos, zero, zero, active, m.eq_solref[eq], m.eq_solimp[eq], diag


def _coupling(data: jax.Array, dif: jax.Array) -> tuple[jax.Array, jax.Array]:
  """A joint or tendon equality's polynomial (n,) of the second object's offset ``dif`` (n,)
  from its reference, and its derivative, from eq_data (n, 11)."""
  poly = data[:, 1] * dif + data[:, 2] * dif**2 + data[:, 3] * dif**3 + data[:, 4] * dif**4
  deriv = data[:, 1] + 2 * data[:, 2] * dif + 3 * data[:, 3] * dif**2 + 4 * data[:, 4] * dif**3
  return poly, deriv


def tendon_forces(m: Model, d: Data) -> jax.Array:
  """The force (ntendon,) along each tendon of its limit, friction-loss and equality rows:
  each active row's force times its Jacobian's coefficient of the tendon's ten_J (a limit's
  -1 at the upper end, an equality's -dpoly/dlength on its second tendon)."""
  out = jnp.zeros(m.ntendon, d.qpos.dtype)
  rows = rows_of(m, ConstraintType.LIMIT_TENDON, ConstraintType.FRICTION_TENDON)
  force = jnp.where(d.efc_active[rows], d.efc_force[rows], 0.0)
  upper = (m.efc_rowtype[rows] == ConstraintType.LIMIT_TENDON) & (m.efc_rowsub[rows] == 1)
  out = out.at[m.efc_rowid[rows]].add(jnp.where(upper, -force, force))
  rows = rows_of(m, ConstraintType.EQUALITY)
  rows = rows[m.eq_type[m.efc_rowid[rows]] == EqType.TENDON]
  if rows.size:
    e = m.efc_rowid[rows]
    force = jnp.where(d.efc_active[rows], d.efc_force[rows], 0.0)
    o1, o2 = m.eq_obj1id[e], m.eq_obj2id[e]
    two = o2 >= 0
    o2s = np.where(two, o2, o1)
    dif = jnp.where(two, d.ten_length[o2s] - m.tendon_length0[o2s], 0.0)
    _, deriv = _coupling(m.eq_data[e], dif)
    out = out.at[o1].add(force).at[o2s].add(jnp.where(two, -deriv * force, 0.0))
  return out


def jdot_correction(m: Model, d: Data) -> jax.Array:
  """J-dot times qvel (njmax,) of connect and weld rows, which MuJoCo 4 subtracts from aref
  (mj_Jdotv): the anchors' relative Jacobian-derivative term, and for welds the time
  derivative of the orientation error's Jacobian applied to qvel."""
  rows = rows_of(m, ConstraintType.EQUALITY)
  eq, sub = m.efc_rowid[rows], m.efc_rowsub[rows]
  spatial = np.isin(m.eq_type[eq], (EqType.CONNECT, EqType.WELD))
  out = jnp.zeros(m.njmax, d.qpos.dtype)
  if not spatial.any():
    return out
  idx = rows[spatial]
  e, k = eq[spatial], sub[spatial]
  pos1, pos2, b1, b2 = eq_anchors(m, d, e)
  _, acc1, ang1 = kinematics.point_jac_dot(m, d, pos1, b1)
  _, acc2, ang2 = kinematics.point_jac_dot(m, d, pos2, b2)
  trans = jnp.take_along_axis(acc1 - acc2, np.minimum(k, 2)[:, None], axis=1)[:, 0]
  # weld rotation: d/dt of 0.5 conj(q1) (Jr0 - Jr1) v q0, by the product rule, with
  # dq/dt = 0.5 (0, omega) q for world-frame angular velocities (mju_derivQuat)
  frame0, rel, q1 = weld_quats(m, d, e, b1, b2)
  q0 = math.quat_mul(frame0, rel)
  omega1, omega2 = d.cvel[b1, :3], d.cvel[b2, :3]
  domega = omega1 - omega2
  qdot = lambda q, w: 0.5 * math.quat_mul(jnp.concatenate([jnp.zeros_like(w[:, :1]), w], -1), q)
  qdot0 = qdot(q0, omega1)
  negqdot1 = math.quat_conj(qdot(q1, omega2))
  neg1 = math.quat_conj(q1)
  t1 = math.quat_mul(_quat_axis(negqdot1, domega), q0)
  t2 = math.quat_mul(_quat_axis(neg1, ang1 - ang2), q0)
  t3 = math.quat_mul(_quat_axis(neg1, domega), qdot0)
  rot = 0.5 * (t1 + t2 + t3)[:, 1:] * m.eq_data[e, 10][:, None]
  rot = jnp.take_along_axis(rot, np.clip(k - 3, 0, 2)[:, None], axis=1)[:, 0]
  return out.at[idx].set(jnp.where(k < 3, trans, rot))


_GROUPS = ((_equality_rows, (ConstraintType.EQUALITY,)),
           (_friction_rows, (ConstraintType.FRICTION_DOF, ConstraintType.FRICTION_TENDON)),
           (_joint_limit_rows, (ConstraintType.LIMIT_JOINT,)),
           (_tendon_limit_rows, (ConstraintType.LIMIT_TENDON,)),
           (_contact_rows, (ConstraintType.CONTACT_FRICTIONLESS, ConstraintType.CONTACT_PYRAMIDAL,
                            ConstraintType.CONTACT_ELLIPTIC)))


def _impedance(solimp: jax.Array, pos: jax.Array, margin: jax.Array) -> jax.Array:
  """imp (n,): solimp's sigmoid of |pos - margin| / width (MuJoCo's getimpedance)."""
  dmin, dmax, width, mid, power = (solimp[:, k] for k in range(5))
  flat = (dmin == dmax) | (width <= math.MINVAL)
  x = jnp.abs(pos - margin) / jnp.where(flat, 1.0, width)
  inner = (x > 0) & (x < 1)
  xs = jnp.where(inner, x, 0.5)
  # below the midpoint xs^p / mid^(p - 1), above it 1 - (1 - xs)^p / (1 - mid)^(p - 1): one
  # quotient of powers for both branches, as one exponential of logarithms (both bases are in
  # (0, 1)); XLA's CPU backend calls the scalar library pow per element, four times slower
  lower = xs <= mid
  part = jnp.exp(power * jnp.log(jnp.where(lower, xs, 1 - xs))
                 - (power - 1) * jnp.log(jnp.where(lower, mid, 1 - mid)))
  y = jnp.where(power == 1, xs, jnp.where(lower, part, 1 - part))
  y = jnp.where(inner, y, jnp.where(x >= 1, 1.0, 0.0))
  return jnp.where(flat, 0.5 * (dmin + dmax), dmin + y * (dmax - dmin))


def _safe_ref(m: Model, solref: jax.Array) -> jax.Array:
  """solref with time constants no shorter than two timesteps (unless REFSAFE is disabled)."""
  if m.opt.disabled(DisableBit.REFSAFE):
    return solref
  tc = solref[:, 0]
  return solref.at[:, 0].set(jnp.where(tc > 0, jnp.maximum(tc, 2 * m.opt.timestep), tc))


def _sol_params(m: Model, solref: jax.Array, solreffriction: jax.Array, solimp: jax.Array):
  """(solref, solreffriction, solimp) as getsolparam uses them: mixed-sign solref replaced by
  the default and mixed-sign solreffriction by zero, time constants made safe, solimp clamped."""
  mixed = lambda r: (r[:, :1] > 0) != (r[:, 1:] > 0)
  solref = jnp.where(mixed(solref), jnp.array([0.02, 1.0], solref.dtype), solref)
  solreffriction = jnp.where(mixed(solreffriction), 0.0, solreffriction)
  clamp = lambda x: jnp.clip(x, _MINIMP, _MAXIMP)
  solimp = jnp.stack([clamp(solimp[:, 0]), clamp(solimp[:, 1]), jnp.maximum(solimp[:, 2], 0.0),
                      clamp(solimp[:, 3]), jnp.maximum(solimp[:, 4], 1.0)], axis=-1)
  return _safe_ref(m, solref), _safe_ref(m, solreffriction), solimp


def _stiffness(solref: jax.Array, dmax: jax.Array) -> tuple[jax.Array, jax.Array]:
  """(K, B) of the reference acceleration from solref and the impedance's dmax."""
  tc, ratio = solref[:, 0], solref[:, 1]
  k = jnp.where(tc > 0, 1 / jnp.maximum(math.MINVAL, dmax * dmax * tc * tc * ratio * ratio),
                -tc / jnp.maximum(math.MINVAL, dmax * dmax))
  b = jnp.where(ratio > 0, 2 / jnp.maximum(math.MINVAL, dmax * tc),
                -ratio / jnp.maximum(math.MINVAL, dmax))
  return k, b


def _first_rows(m: Model) -> np.ndarray:
  """For each row, the first row of its block: a contact's rows share its normal row's
  impedance (MuJoCo's getposdim); other rows are their own block."""
  rows = np.arange(m.njmax)
  contact = m.efc_rowtype >= ConstraintType.CONTACT_FRICTIONLESS
  return np.where(contact, rows - m.efc_rowsub, rows)


def _violation(m: Model, pos: jax.Array) -> jax.Array:
  """The violation (njmax,) each row's impedance sees (getposdim): a contact's normal distance
  for all its rows, the norm of the position error for all rows of a connect or weld."""
  pos = pos[_first_rows(m)]
  eq = np.flatnonzero(m.efc_rowtype == ConstraintType.EQUALITY)
  spatial = eq[np.isin(m.eq_type[m.efc_rowid[eq]], (EqType.CONNECT, EqType.WELD))]
  if not spatial.size:
    return pos
  block = spatial - m.efc_rowsub[spatial]
  _, segment = np.unique(block, return_inverse=True)
  sq = jax.ops.segment_sum(pos[spatial]**2, segment, num_segments=int(segment.max()) + 1)
  return pos.at[spatial].set(math.safe_sqrt(sq)[segment])


def _impedance_rows(m: Model, d: Data, pos: jax.Array, margin: jax.Array, diag: jax.Array,
                    solref: jax.Array, solreffriction: jax.Array, solimp: jax.Array):
  """(R (njmax,), KBIP (njmax, 4)) per row (mj_makeImpedance); KBIP = (K, B, imp, 0)."""
  solref, solreffriction, solimp = _sol_params(m, solref, solreffriction, solimp)
  first = _first_rows(m)
  # once per block and spread: a contact's rows share its normal row's impedance, and the two
  # powers cost more than the rest of the rows' impedance (cheetah: 160 us of a 2.7 ms step)
  head, spread = np.unique(first, return_inverse=True)
  imp = _impedance(math.take(solimp, head), math.take(_violation(m, pos), head),
                   math.take(margin, head))
  imp = math.take(imp, spread.reshape(-1))
  R = jnp.maximum(math.MINVAL, (1 - imp) * diag / imp)
  kind, sub, slot = m.efc_rowtype, m.efc_rowsub, m.efc_rowid
  impratio = jnp.maximum(math.MINVAL, m.opt.impratio)
  # frictional contacts: the friction rows' R follows the normal row's through impratio, and a
  # pyramid's rows share one R matching the elliptic cone's friction impedance
  pyramid = np.flatnonzero(kind == ConstraintType.CONTACT_PYRAMIDAL)
  if len(pyramid):
    mu0 = math.take(d.contact_friction[:, 0], slot[pyramid])
    edges = 2 * mu0 * mu0 * math.take(R, first[pyramid]) / impratio
    if m.flg_adhesion:
      edges = jnp.where(single_rows(m, d, pyramid), R[pyramid], edges)
    R = R.at[pyramid].set(edges)
  ell_friction = (kind == ConstraintType.CONTACT_ELLIPTIC) & (sub > 0)
  elliptic = np.flatnonzero(ell_friction)
  if len(elliptic):
    fr = d.contact_friction[slot[elliptic]]
    k = sub[elliptic]
    scale = (fr[:, 0] / fr[np.arange(len(elliptic)), np.maximum(k - 1, 0)])**2
    R = R.at[elliptic].set(R[first[elliptic]] / impratio * jnp.where(k == 1, 1.0, scale))
  use_friction_ref = jnp.asarray(ell_friction) & jnp.any(solreffriction != 0, axis=-1)
  K, B = _stiffness(jnp.where(use_friction_ref[:, None], solreffriction, solref), solimp[:, 1])
  no_stiffness = ((kind == ConstraintType.FRICTION_DOF) | (kind == ConstraintType.FRICTION_TENDON)
                  | ell_friction)
  K = jnp.where(no_stiffness, 0.0, K)
  return R, jnp.stack([K, B, imp, jnp.zeros_like(imp)], axis=-1)


def row_constraints(m: Model) -> tuple[np.ndarray, int]:
  """(constraint (njmax,), count): each row's constraint, a (type, id) block of rows numbered
  from 0 (static)."""
  if not m.njmax:
    return np.zeros(0, np.int64), 0
  _, block = np.unique(np.stack([m.efc_rowtype, m.efc_rowid], -1), axis=0, return_inverse=True)
  block = block.reshape(-1)
  return block, int(block.max()) + 1


def _nonempty(m: Model, J: jax.Array) -> jax.Array:
  """False for the rows of a non-contact constraint whose Jacobian rows are all zero: MuJoCo
  skips such a constraint whole, and keeps every row of one (say a connect's y and z rows on a
  body that only slides in x) with any nonzero entry."""
  contact = m.efc_rowtype >= ConstraintType.CONTACT_FRICTIONLESS
  if contact.all():
    return jnp.asarray(contact)
  block, nblock = row_constraints(m)
  # only the rows of other constraints are looked at: contact rows are most of a layout (their
  # blocks get no entry, False, and the contact mask keeps them)
  other = np.flatnonzero(~contact)
  row_nonzero = jnp.any(J[other] != 0, axis=-1)
  block_nonzero = jax.ops.segment_max(row_nonzero, block[other], num_segments=nblock)
  return jnp.asarray(contact) | block_nonzero[block]


def _rows(m: Model, d: Data) -> list[jax.Array]:
  """(J, pos, margin, frictionloss, active, solref, solimp, diag, solreffriction) of every row
  (njmax, ...), J zero on inactive rows: each group's rows are built at once and put in place
  by one gather, not one scatter per group and field; rows of disabled types keep the
  defaults (inactive)."""
  shapes = ((m.nv,), (), (), (), (), (2,), (5,), (), (2,))
  defaults = (0.0, 0.0, 0.0, 0.0, False, (0.02, 1.0), (0.9, 0.95, 0.001, 0.5, 2.0), 0.0, 0.0)
  dtypes = [bool if k == 4 else d.qpos.dtype for k in range(len(shapes))]
  built, parts = [], [[] for _ in shapes]
  for build, kinds in _GROUPS:
    rows = rows_of(m, *kinds)
    if not len(rows) or not m.nv:  # MuJoCo makes no rows without dofs, contacts included
      continue
    contact = kinds[0] == ConstraintType.CONTACT_FRICTIONLESS
    solreffriction = math.take(d.contact_solreffriction, m.efc_rowid[rows]) if contact else 0.0
    jac, pos, margin, floss, active, *rest = build(m, d, rows)
    if not contact:  # contact rows are built on their active rows only, zero on the others
      jac = jnp.where(active[:, None], jac, 0.0)
    for part, shape, dtype, value in zip(parts, shapes, dtypes,
                                         (jac, pos, margin, floss, active, *rest, solreffriction)):
      part.append(jnp.broadcast_to(jnp.asarray(value, dtype), (len(rows),) + shape))
    built.append(rows)
  order = np.concatenate(built + [np.zeros(0, int)])
  place = np.full(m.njmax, len(order))
  place[order] = np.arange(len(order))
  out = []
  for part, shape, dtype, default in zip(parts, shapes, dtypes, defaults):
    column = jnp.concatenate(part + [jnp.broadcast_to(jnp.asarray(default, dtype), (1,) + shape)])
    out.append(math.take(column, place))
  return out


def make_constraint(m: Model, d: Data) -> Data:
  """Computes the position-level constraint rows (mj_makeConstraint), after collision:
  efc_J (njmax, nv), efc_pos, efc_margin, efc_frictionloss, efc_R, efc_D, efc_KBIP, efc_active,
  efc_type, efc_id and nefc."""
  if not constraints_on(m):
    return d.replace(efc_active=jnp.zeros_like(d.efc_active), nefc=jnp.zeros_like(d.nefc))
  with jax.named_scope("make_constraint"):
    J, pos, margin, floss, active, solref, solimp, diag, solreffriction = _rows(m, d)
    active &= _nonempty(m, J)
    if m.opt.enabled(EnableBit.DIAGEXACT) and m.nv:
      # the exact diagonal of J M^-1 J' in place of the approximation (mj_projectConstraint)
      diag = jnp.sum(J * crb.solve_m(m, d, J.T).T, axis=-1)
    R, kbip = _impedance_rows(m, d, pos, margin, diag, solref, solreffriction, solimp)
    mask = lambda x: jnp.where(active, x, 0.0)
    return d.replace(
        efc_J=J, efc_pos=mask(pos), efc_margin=mask(margin),
        efc_frictionloss=mask(floss), efc_R=jnp.where(active, R, 1.0), efc_D=mask(1 / R),
        efc_KBIP=jnp.where(active[:, None], kbip, 0.0), efc_active=active,
        efc_type=_row_types(m, d), efc_id=jnp.asarray(m.efc_rowid),
        nefc=jnp.sum(active).astype(jnp.int32))


def _row_types(m: Model, d: Data) -> jax.Array:
  """efc_type (njmax,): the static row types, but frictionless for the row of an adhesive
  contact in the gap."""
  kind = jnp.asarray(m.efc_rowtype)
  if not m.flg_adhesion:
    return kind
  rows = rows_of(m, ConstraintType.CONTACT_PYRAMIDAL, ConstraintType.CONTACT_ELLIPTIC)
  return kind.at[rows].set(jnp.where(single_rows(m, d, rows),
                                     int(ConstraintType.CONTACT_FRICTIONLESS), kind[rows]))


def rows_of_contacts(m: Model) -> np.ndarray:
  """Static indices of the enabled contact rows, of every cone type."""
  return rows_of(m, ConstraintType.CONTACT_FRICTIONLESS, ConstraintType.CONTACT_PYRAMIDAL,
                 ConstraintType.CONTACT_ELLIPTIC)


def _surface_velocity(m: Model, d: Data) -> tuple[np.ndarray, jax.Array]:
  """The contact rows and what the geoms' surface velocities (a conveyor belt's, say) add to
  their efc_vel (mj_addSurfaceVel): geom 2's surface velocity relative to geom 1's at the
  contact point, in the contact frame, tangential and torsional components only; an elliptic
  row takes its component, a pyramid edge mu_k times friction component k with the edge's
  sign, a row of dim 1 nothing."""
  geom = jnp.asarray(collision.slot_geom(m, d))
  surfacevel = m.geom_surfacevel[geom]                                  # (nconmax, 2, 6)
  xmat = d.geom_xmat[geom]
  linear = math.mat_vec(xmat, surfacevel[..., :3])
  angular = math.mat_vec(xmat, surfacevel[..., 3:])
  linear = linear + math.cross(angular, d.contact_pos[:, None, :] - d.geom_xpos[geom])
  relative = jnp.stack([linear[:, 1] - linear[:, 0], angular[:, 1] - angular[:, 0]], axis=1)
  local = jnp.einsum("nij,nkj->nki", d.contact_frame, relative).reshape(-1, 6)
  local = local * np.array([[0, 1, 1, 1, 0, 0]], dtype=local.dtype)
  rows = rows_of_contacts(m)
  slot, sub = m.efc_rowid[rows], m.efc_rowsub[rows]
  pyramid = m.efc_rowtype[rows] == ConstraintType.CONTACT_PYRAMIDAL
  edge = np.where(pyramid, sub // 2, 0)
  sign = np.where(sub % 2 == 0, 1.0, -1.0).astype(local.dtype)
  values = jnp.where(pyramid, sign * d.contact_friction[slot, edge] * local[slot, edge + 1],
                     local[slot, np.where(pyramid, 0, sub)])
  if m.flg_adhesion:
    values = jnp.where(single_rows(m, d, rows), 0.0, values)
  return rows, values


def _adhesion_bias(m: Model, d: Data) -> tuple[np.ndarray, jax.Array]:
  """The contact rows and what adhesion adds to their aref (mj_adhesionRef): R times the
  adhesion on a contact's normal row, or R times its share on each of a pyramid's 2 (dim - 1)
  edges."""
  rows = rows_of_contacts(m)
  slot, sub = m.efc_rowid[rows], m.efc_rowsub[rows]
  adhesion = d.contact_adhesion[slot]
  edges = jnp.where(m.efc_rowtype[rows] == ConstraintType.CONTACT_PYRAMIDAL,
                    2 * (d.contact_dim[slot] - 1), 0)
  share = jnp.where(edges > 0, adhesion / jnp.maximum(edges, 1).astype(adhesion.dtype),
                    jnp.where(sub == 0, adhesion, 0.0))
  return rows, d.efc_R[rows] * share


def reference_constraint(m: Model, d: Data) -> Data:
  """Computes efc_vel = J qvel and efc_aref = -B vel - K imp (pos - margin)
  (mj_referenceConstraint).

  Contact rows' velocities include the geoms' surface velocities; an adhesive contact's rows
  add R times its adhesion (shared by a pyramid's edges) to aref, so that with the adhesive
  pull applied as a passive force (``flexor.passive``) the contact's net force under
  compression is as without adhesion.
  """
  if not constraints_on(m):
    return d
  with jax.named_scope("reference_constraint"):
    vel = d.efc_J @ d.qvel
    if m.flg_surfacevel and collision.contacts_on(m):
      rows, values = _surface_velocity(m, d)
      vel = vel.at[rows].add(values)
    k, b, imp = d.efc_KBIP[:, 0], d.efc_KBIP[:, 1], d.efc_KBIP[:, 2]
    aref = -b * vel - k * imp * (d.efc_pos - d.efc_margin)
    if m.flg_adhesion and collision.contacts_on(m):
      rows, values = _adhesion_bias(m, d)
      aref = aref.at[rows].add(values)
    aref = aref - jdot_correction(m, d)
  return d.replace(efc_vel=jnp.where(d.efc_active, vel, 0.0),
                   efc_aref=jnp.where(d.efc_active, aref, 0.0))
