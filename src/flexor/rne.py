"""Recursive Newton-Euler in com-based frames: ``rne``, ``rne_bias``, ``rne_postconstraint``.

MuJoCo's ``mj_rne`` runs a forward pass (body accelerations ``cacc``) and a backward pass
(forces summed over subtrees). In com-based frames both are linear sums along the tree: a
body's acceleration is the world's plus the sum of ``cdof_dot * qvel + cdof * qacc`` over the
dofs that move it (``body_dof``), and the force transmitted into a body's joint is the sum of
per-body forces over its subtree (``body_subtree``). Each pass is one masked matmul.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from flexor import collision, constraint, crb, math, tree
from flexor.types import ConstraintType, Data, DisableBit, EqType, Model


def _cacc(m: Model, d: Data, flg_acc: bool) -> jax.Array:
  """Body spatial accelerations (nbody, 6), with gravity as an upward world acceleration."""
  dof_acc = d.cdof_dot * d.qvel[:, None]
  if flg_acc:
    dof_acc = dof_acc + d.cdof * d.qacc[:, None]
  cacc = tree.path_sum(m, dof_acc)
  if not m.opt.disabled(DisableBit.GRAVITY):
    world = jnp.concatenate([jnp.zeros(3, dtype=cacc.dtype), -m.opt.gravity])
    cacc = cacc + world[None, :]
  return cacc


def _cfrc_body(d: Data, cacc: jax.Array) -> jax.Array:
  """Net spatial force each body needs, (nbody, 6): cinert * cacc + cvel x* (cinert * cvel)."""
  momentum = math.inert_mul(d.cinert, d.cvel)
  return math.inert_mul(d.cinert, cacc) + math.force_cross(d.cvel, momentum)


def rne(m: Model, d: Data, flg_acc: bool = False) -> jax.Array:
  """Returns M(q) qacc + C(q, qvel) + g(q), (nv,), without armature (mj_rne).

  Args:
    m: the model; gravity is skipped when DisableBit.GRAVITY is set.
    d: Data after ``com_pos`` and ``com_vel`` (cinert, cdof, cvel, cdof_dot).
    flg_acc: include ``d.qacc``; False gives the bias force C + g.
  """
  with jax.named_scope("rne"):
    cfrc_body = _cfrc_body(d, _cacc(m, d, flg_acc))
    cfrc = tree.subtree_sum(m, cfrc_body)
    return jnp.sum(d.cdof * cfrc[m.dof_bodyid], axis=-1)


def rne_bias(m: Model, d: Data) -> Data:
  """Computes qfrc_bias (nv,): Coriolis, centrifugal and gravity forces (rne at qacc = 0), plus
  the tendon armature's bias (``crb.tendon_bias``, as mj_tendonBias)."""
  with jax.named_scope("rne_bias"):
    qfrc_bias = rne(m, d, flg_acc=False) + crb.tendon_bias(m, d)
  return d.replace(qfrc_bias=qfrc_bias)


def contact_force(m: Model, d: Data) -> jax.Array:
  """Force and torque of each contact slot in its contact frame (nconmax, 6) (mj_contactForce):
  (normal, tangent 1, tangent 2, torsion, rolling 1, rolling 2), zero past the contact's dim and
  on slots without an active contact.

  A pyramidal contact's normal force is the sum of its edge forces and its k-th friction force
  mu_k (f_2k - f_2k+1) (mju_decodePyramid); elliptic and frictionless rows are the components.
  The normal force is the net one: an adhesive contact's adhesion (pulling, see
  ``flexor.passive``) is subtracted from what its rows push with.
  """
  rows = constraint.rows_of_contacts(m)
  out = jnp.zeros((m.nconmax, 6), dtype=d.efc_force.dtype)
  if not rows.size:
    return out
  slot, sub = m.efc_rowid[rows], m.efc_rowsub[rows]
  pyramid = m.efc_rowtype[rows] == ConstraintType.CONTACT_PYRAMIDAL
  elliptic = m.efc_rowtype[rows] == ConstraintType.CONTACT_ELLIPTIC
  force = jnp.where(d.efc_active[rows], d.efc_force[rows], 0.0)
  edge = sub // 2
  mu = d.contact_friction[slot, np.where(pyramid, edge, 0)]
  dtype = d.efc_force.dtype  # static coefficients in the force's dtype: no float64 promotion
  normal = np.where(elliptic, sub == 0, True).astype(dtype)
  # the row's second entry: a pyramid edge's friction component, an elliptic row's own
  column = np.where(pyramid, edge + 1, np.where(elliptic, sub, 0))
  weight = jnp.where(pyramid, np.where(sub % 2 == 0, 1.0, -1.0).astype(dtype) * mu,
                     np.where(elliptic & (sub > 0), 1.0, 0.0).astype(dtype))
  out = out.at[slot, 0].add(normal * force)
  if not m.flg_adhesion:
    return out.at[slot, column].add(weight * force)
  weight = jnp.where(constraint.single_rows(m, d, rows), 0.0, weight)
  out = out.at[slot, column].add(weight * force)
  first = rows[sub == 0]
  has_rows = jnp.zeros(m.nconmax, bool).at[m.efc_rowid[first]].set(d.efc_active[first])
  return out.at[:, 0].add(jnp.where(has_rows, -d.contact_adhesion, 0.0))


def _contact_cfrc_ext(m: Model, d: Data) -> jax.Array:
  """Contact forces on bodies (nbody, 6), com-based (torque, force): geom 2's body receives the
  contact force at the contact point, geom 1's body its opposite."""
  bodies = constraint.slot_bodies(m, d)
  local = contact_force(m, d)
  frame = d.contact_frame
  force = math.mat_t_vec(frame, local[:, :3])
  torque = math.mat_t_vec(frame, local[:, 3:])
  out = jnp.zeros((m.nbody, 6), dtype=force.dtype)
  for body, sign in zip(bodies, (-1.0, 1.0)):
    arm = d.contact_pos - d.subtree_com[jnp.asarray(m.body_rootid)[body]]
    wrench = jnp.concatenate([torque + math.cross(arm, force), force], axis=-1)
    out = out.at[body].add(sign * wrench)
  return out


def _equality_cfrc_ext(m: Model, d: Data) -> jax.Array:
  """Connect and weld constraint forces on bodies (nbody, 6), com-based (torque, force): body 1
  receives the constraint force (and a weld's torque) at its anchor, body 2 its opposite
  (mj_rnePostConstraint)."""
  rows = constraint.rows_of(m, ConstraintType.EQUALITY)
  eq_rows = rows[np.isin(m.eq_type[m.efc_rowid[rows]], (EqType.CONNECT, EqType.WELD))]
  out = jnp.zeros((m.nbody, 6), dtype=d.efc_force.dtype)
  if not eq_rows.size:
    return out
  first = eq_rows[m.efc_rowsub[eq_rows] == 0]
  eq = m.efc_rowid[first]
  weld = m.eq_type[eq] == EqType.WELD
  force = jnp.where(d.efc_active[first, None], d.efc_force[first[:, None] + np.arange(3)], 0.0)
  torque_rows = first[:, None] + np.where(weld, 3, 0)[:, None] + np.arange(3)
  rot_force = jnp.where((weld[:, None]) & d.efc_active[first, None], d.efc_force[torque_rows], 0.0)
  pos1, pos2, b1, b2 = constraint.eq_anchors(m, d, eq)
  # a weld's rotation rows are M (w1 - w2) for the bodies' angular velocities w, with M's
  # column j = 0.5 torquescale vec(conj(q1) (0, e_j) q0) (see constraint._equality_rows); the
  # torque they exert is M' f, as MuJoCo 4 applies it
  frame0, rel, q1 = constraint.weld_quats(m, d, eq, b1, b2)
  q0 = math.quat_mul(frame0, rel)
  axes = jnp.concatenate([jnp.zeros((3, 1), q0.dtype), jnp.eye(3, dtype=q0.dtype)], axis=-1)
  cols = math.quat_mul(math.quat_mul(math.quat_conj(q1)[:, None, :], axes[None]), q0[:, None, :])
  mat_t = 0.5 * cols[..., 1:] * m.eq_data[eq, 10][:, None, None]             # (n, j, k) = M'
  torque = math.mat_vec(mat_t, rot_force)
  for body, pos, sign in ((b1, pos1, 1.0), (b2, pos2, -1.0)):
    arm = pos - d.subtree_com[m.body_rootid[body]]
    wrench = jnp.concatenate([torque + math.cross(arm, force), force], axis=-1)
    out = out.at[body].add(sign * wrench)
  return out


def rne_postconstraint(m: Model, d: Data) -> Data:
  """Computes cacc, cfrc_ext and cfrc_int (nbody, 6) from qacc (mj_rnePostConstraint).

  cfrc_ext holds ``xfrc_applied`` moved to com-based frames, the contact forces
  (``contact_force``), the connect and weld constraint forces and, as in MuJoCo 4, the forces
  of spatial tendons (``crb.tendon_cfrc_ext``), those of their constraint rows included.
  cfrc_int is the force each body receives from its parent, cfrc_body - cfrc_ext summed over
  the subtree; the world's row sums the roots' rows.
  """
  with jax.named_scope("rne_postconstraint"):
    cacc = _cacc(m, d, flg_acc=True)
    force, torque = d.xfrc_applied[:, :3], d.xfrc_applied[:, 3:]
    offset = d.xipos - d.subtree_com[m.body_rootid]
    cfrc_ext = jnp.concatenate([torque + math.cross(offset, force), force], axis=-1)
    if collision.contacts_on(m):
      cfrc_ext = cfrc_ext + _contact_cfrc_ext(m, d)
    if m.neq:
      cfrc_ext = cfrc_ext + _equality_cfrc_ext(m, d)
    cfrc_ext = cfrc_ext.at[0].set(0.0)
    if m.ntendon:
      # MuJoCo 4: spatial tendons' forces, their constraint rows' among them
      cfrc_ext = cfrc_ext + crb.tendon_cfrc_ext(m, d, constraint.tendon_forces(m, d))
    own = _cfrc_body(d, cacc) - cfrc_ext  # zero on the world row (zero cinert and cfrc_ext)
    cfrc_int = tree.subtree_sum(m, own)
    roots = (m.body_parentid == 0) & (np.arange(m.nbody) > 0)
    cfrc_int = cfrc_int.at[0].set(jnp.asarray(roots, dtype=own.dtype) @ cfrc_int)
  return d.replace(cacc=cacc, cfrc_ext=cfrc_ext, cfrc_int=cfrc_int)
