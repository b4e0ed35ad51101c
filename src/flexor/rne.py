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

from flexor import crb, math, tree
from flexor.types import Data, DisableBit, Model


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


def rne_postconstraint(m: Model, d: Data) -> Data:
  """Computes cacc, cfrc_ext and cfrc_int (nbody, 6) from qacc (mj_rnePostConstraint).

  cfrc_ext holds ``xfrc_applied`` moved to com-based frames and, as in MuJoCo 4, the forces of
  spatial tendons (``crb.tendon_cfrc_ext``); contact and equality forces join it once the
  constraint stage exists. cfrc_int is the force each body receives from its parent,
  cfrc_body - cfrc_ext summed over the subtree; the world's row sums the roots' rows.
  """
  with jax.named_scope("rne_postconstraint"):
    cacc = _cacc(m, d, flg_acc=True)
    force, torque = d.xfrc_applied[:, :3], d.xfrc_applied[:, 3:]
    offset = d.xipos - d.subtree_com[m.body_rootid]
    cfrc_ext = jnp.concatenate([torque + math.cross(offset, force), force], axis=-1)
    cfrc_ext = cfrc_ext.at[0].set(0.0)
    if m.ntendon:
      cfrc_ext = cfrc_ext + crb.tendon_cfrc_ext(m, d)   # MuJoCo 4: spatial tendons' forces
    own = _cfrc_body(d, cacc) - cfrc_ext  # zero on the world row (zero cinert and cfrc_ext)
    cfrc_int = tree.subtree_sum(m, own)
    roots = (m.body_parentid == 0) & (np.arange(m.nbody) > 0)
    cfrc_int = cfrc_int.at[0].set(jnp.asarray(roots, dtype=own.dtype) @ cfrc_int)
  return d.replace(cacc=cacc, cfrc_ext=cfrc_ext, cfrc_int=cfrc_int)
