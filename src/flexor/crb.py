"""Joint-space inertia: composite rigid bodies (``crb``), its factor and solves with it.

In com-based frames a body's composite inertia is the plain sum of ``cinert`` over its subtree,
and entry (i, j) of the mass matrix, for dof j an ancestor of dof i, is
``cdof[j] . (crb[body(i)] * cdof[i])``. Both are therefore matmuls with the static masks of
``flexor.tree``: no pass over bodies or tree levels.

flexor stores qM dense and factors it as ``qM = qLD qLD'`` (lower Cholesky), unlike MuJoCo's
sparse ``LDL'``; the solves agree to rounding.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from flexor import math, tree
from flexor.types import Data, Model


def crb(m: Model, d: Data) -> Data:
  """Computes crb (nbody, 10) composite inertias and qM (nv, nv) incl. dof_armature (mj_makeM).

  Tendon armature (MuJoCo adds it to qM in mj_makeM) belongs to the tendon stage and is not
  included here.
  """
  with jax.named_scope("crb"):
    cinert = d.cinert
    composite = tree.subtree_sum(m, cinert)
    # Spatial force of each dof's subtree moving at unit speed along that dof, (nv, 6).
    dof_force = math.inert_mul(composite[m.dof_bodyid], d.cdof)
    # full[i, j] = cdof[j] . dof_force[i]; meaningful where j is an ancestor (or self) of i.
    full = dof_force @ d.cdof.T
    strict = jnp.asarray(m.dof_ancestor & ~np.eye(m.nv, dtype=bool), dtype=full.dtype)
    lower = full * strict
    diag = jnp.sum(dof_force * d.cdof, axis=-1) + m.dof_armature
    qM = lower + lower.T + jnp.diag(diag)
  return d.replace(crb=composite, qM=qM)


def factor_m(m: Model, d: Data) -> Data:
  """Computes qLD (nv, nv), the lower Cholesky factor of qM (mj_factorM)."""
  del m  # the factor depends on qM only
  with jax.named_scope("factor_m"):
    qLD = jnp.linalg.cholesky(d.qM) if d.qM.shape[-1] else d.qM
  return d.replace(qLD=qLD)


def solve_m(m: Model, d: Data, x: jax.Array) -> jax.Array:
  """Returns qM^-1 x via qLD (mj_solveM); x is (nv,) or (nv, k)."""
  del m  # the solve depends on qLD only
  if not x.shape[0]:
    return x
  return jax.scipy.linalg.cho_solve((d.qLD, True), x)

