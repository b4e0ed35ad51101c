"""Static tables describing the kinematic tree, computed once on the host (numpy).

flexor runs one non-linear tree pass, forward kinematics, as pointer jumping over ``body_jump``
(``ceil(log2(depth))`` steps of a ``lax.scan``). Every other tree recursion in MuJoCo's com-based
frames is a sum over ancestors or descendants, so it is a matmul with one of the 0/1 masks built
here:

* ``body_subtree[i, j]``: body j is in the subtree of body i (i > 0). ``subtree @ x`` sums x
  over descendants (MuJoCo's backward passes: subtree mass, crb, cfrc).
* ``body_dof[b, d]``: dof d moves body b, i.e. d belongs to b or one of its ancestors.
  ``body_dof @ x`` sums dof quantities down the tree (forward passes: cvel, cacc), and
  ``body_dof.T @ f`` maps per-body quantities to the dofs that move them (Jacobian transpose).
* ``dof_ancestor[i, j]``: dof j is dof i or one of its ancestors (the sparsity of qM's lower
  triangle).
* ``dof_cdofdot[i, j]``: dof j's velocity enters ``cvel`` before dof i is applied, as in
  ``mj_comVel``: strict dof ancestors, except the other rotational dofs of the same ball or free
  joint.

The device-side sums over these masks are named once, at the end of this module
(``subtree_sum``, ``path_sum``, ``to_dofs``), so that a sparse variant can replace them in one
place.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from flexor.types import JointType, Model


def body_depth(parentid: np.ndarray) -> np.ndarray:
  """Depth of every body, (nbody,) int; the world has depth 0. Parents precede children."""
  depth = np.zeros(len(parentid), dtype=np.int32)
  for i in range(1, len(parentid)):
    depth[i] = depth[parentid[i]] + 1
  return depth


def jump_table(parentid: np.ndarray) -> np.ndarray:
  """Ancestor 2**k levels up for k = 0..ceil(log2(maxdepth)) - 1, (nlevel, nbody) int.

  After step k of pointer jumping a body's transform spans 2**(k+1) tree edges, so
  ``ceil(log2(maxdepth))`` steps reach the world. Past the root the entry is 0 (the world), whose
  transform is the identity.
  """
  maxdepth = int(body_depth(parentid).max())
  nlevel = int(np.ceil(np.log2(maxdepth))) if maxdepth > 1 else 0
  table = np.zeros((nlevel, len(parentid)), dtype=np.int32)
  if nlevel:
    table[0] = parentid
    table[0, 0] = 0
  for k in range(1, nlevel):
    table[k] = table[k - 1][table[k - 1]]
  return table


def subtree_mask(parentid: np.ndarray) -> np.ndarray:
  """(nbody, nbody) bool: [i, j] iff j is i or a descendant of i; row 0 (the world) is empty."""
  nbody = len(parentid)
  mask = np.eye(nbody, dtype=bool)
  for j in range(nbody - 1, 0, -1):
    mask[parentid[j]] |= mask[j]
  mask[0] = False
  return mask


def tree_tables(body_parentid: np.ndarray, jnt_type: np.ndarray, jnt_bodyid: np.ndarray,
                jnt_dofadr: np.ndarray, dof_bodyid: np.ndarray,
                dof_parentid: np.ndarray) -> dict[str, np.ndarray]:
  """All derived tree tables of :class:`flexor.types.Model`, keyed by field name."""
  nbody, nv = len(body_parentid), len(dof_bodyid)
  subtree = subtree_mask(body_parentid)

  # body_dof[b, d]: dof d's body is an ancestor-or-self of b, i.e. b is in d's body's subtree.
  body_dof = subtree[dof_bodyid].T.copy() if nv else np.zeros((nbody, 0), dtype=bool)

  dof_ancestor = np.eye(nv, dtype=bool)
  for i in range(nv):
    j = dof_parentid[i]
    while j >= 0:
      dof_ancestor[i, j] = True
      j = dof_parentid[j]

  # Rotational dofs of one ball or free joint see the velocity from before that joint.
  rotgroup = np.full(nv, -1)
  for j, t in enumerate(jnt_type):
    if t == JointType.BALL:
      rotgroup[jnt_dofadr[j]:jnt_dofadr[j] + 3] = j
    elif t == JointType.FREE:
      rotgroup[jnt_dofadr[j] + 3:jnt_dofadr[j] + 6] = j
  strict = dof_ancestor & ~np.eye(nv, dtype=bool)
  same_group = (rotgroup[:, None] == rotgroup[None, :]) & (rotgroup[:, None] >= 0)
  dof_cdofdot = strict & ~same_group

  jnt_count = np.bincount(jnt_bodyid, minlength=nbody) if len(jnt_bodyid) else np.zeros(nbody, int)
  maxjnt = int(jnt_count.max()) if nbody else 0
  jnt_slot = np.full((maxjnt, nbody), -1, dtype=np.int32)
  seen = np.zeros(nbody, dtype=int)
  for j, b in enumerate(jnt_bodyid):
    jnt_slot[seen[b], b] = j
    seen[b] += 1

  return dict(body_depth=body_depth(body_parentid), body_jump=jump_table(body_parentid),
              body_subtree=subtree, body_dof=body_dof, dof_ancestor=dof_ancestor,
              dof_cdofdot=dof_cdofdot, jnt_slot=jnt_slot)


def masked_sum(mask: np.ndarray, x: jax.Array) -> jax.Array:
  """``mask @ x`` for a static 0/1 mask (k, n) and x (n, ...): row i sums x over mask[i]."""
  return jnp.tensordot(jnp.asarray(mask, dtype=x.dtype), x, axes=1)


def subtree_sum(m: Model, x: jax.Array) -> jax.Array:
  """Sums per-body x (nbody, ...) over each body's subtree (backward pass); row 0 is zero."""
  return masked_sum(m.body_subtree, x)


def path_sum(m: Model, x: jax.Array) -> jax.Array:
  """Sums per-dof x (nv, ...) over the dofs that move each body (forward pass), (nbody, ...)."""
  return masked_sum(m.body_dof, x)


def to_dofs(m: Model, x: jax.Array) -> jax.Array:
  """Sums per-body x (nbody, ...) into the dofs that move those bodies, (nv, ...)."""
  return masked_sum(m.body_dof.T, x)
