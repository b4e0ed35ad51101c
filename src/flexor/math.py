"""Quaternions (w, x, y, z), rotations and spatial algebra, as in MuJoCo's ``engine_util_spatial``.

All functions act on the trailing axes and broadcast over leading ones. Spatial vectors are
6-vectors in MuJoCo's (rotation, translation) order; inertias in com-based frames are MuJoCo's
10-vectors ``(Ixx, Iyy, Izz, Ixy, Ixz, Iyz, m*cx, m*cy, m*cz, m)``.
Norms and divisions are guarded so both values and gradients stay finite at zero.
"""

from __future__ import annotations

from typing import Any, Callable, TypeVar

import jax
from jax.custom_derivatives import SymbolicZero
import jax.numpy as jnp
import numpy as np

_T = TypeVar("_T")

MINVAL = 1e-15  # mjMINVAL


def _lead(x: jax.Array, ndim: int) -> jax.Array:
  """x with leading axes of size 1 added up to ndim axes: broadcasting made explicit, as the
  tests run with rank promotion an error."""
  return x.reshape((1,) * (ndim - x.ndim) + x.shape)


def dot(a: jax.Array, b: jax.Array, keepdims: bool = False) -> jax.Array:
  """Inner product along the last axis, (...) or (..., 1) with keepdims.

  Short vectors are summed component by component, in jnp.sum's order: XLA's CPU backend
  runs every reduction as a kernel of its own, several times the cost of the elementwise loop
  the explicit sum fuses into. Leading axes broadcast."""
  rank = max(a.ndim, b.ndim)
  prod = _lead(a, rank) * _lead(b, rank)
  if prod.shape[-1] > 4:
    return jnp.sum(prod, axis=-1, keepdims=keepdims)
  total = prod[..., 0]
  for k in range(1, prod.shape[-1]):
    total = total + prod[..., k]
  return total[..., None] if keepdims else total


def safe_norm(x: jax.Array, axis: int = -1, keepdims: bool = False) -> jax.Array:
  """Euclidean norm with a finite gradient (zero) at x = 0."""
  if axis in (-1, x.ndim - 1):
    sq = dot(x, x, keepdims)
  else:
    sq = jnp.sum(x * x, axis=axis, keepdims=keepdims)
  nonzero = sq > 0
  return jnp.where(nonzero, jnp.sqrt(jnp.where(nonzero, sq, 1.0)), 0.0)


def safe_sqrt(x: jax.Array) -> jax.Array:
  """sqrt(max(x, 0)) with a finite (zero) gradient at and below 0."""
  positive = x > 0
  return jnp.where(positive, jnp.sqrt(jnp.where(positive, x, 1.0)), 0.0)


def normalize(x: jax.Array) -> jax.Array:
  """x / |x| along the last axis; x unchanged where |x| < mjMINVAL (as mju_normalize)."""
  n = safe_norm(x, keepdims=True)
  return jnp.where(n < MINVAL, x, x / jnp.where(n < MINVAL, 1.0, n))


def rounded(x: jax.Array) -> jax.Array:
  """x itself (nextafter(x, x)), opaque to XLA: a product passed through it is rounded before a
  later sum, where XLA's CPU backend would otherwise fuse the two into a multiply-add. MuJoCo
  rounds every product; where a result turns on its last bits (which of many equal
  quadrilaterals a contact search keeps), flexor rounds as MuJoCo does.

  Only in float64, the one precision in which flexor can reproduce MuJoCo's bits: elsewhere x
  itself, with no trace of the barrier in the program, since nextafter costs about twenty
  integer operations an element (in float32 it made the humanoid's forward kinematics over
  twice as slow) and every derivative rule costs tracing time in reverse mode."""
  return _round_barrier(x) if x.dtype == jnp.float64 else x


@jax.custom_jvp
def _round_barrier(x: jax.Array) -> jax.Array:
  return jax.lax.nextafter(x, x)


@_round_barrier.defjvp
def _round_barrier_jvp(primals: tuple, tangents: tuple) -> tuple[jax.Array, jax.Array]:
  return _round_barrier(primals[0]), tangents[0]


@jax.custom_jvp
def quat_normalize(q: jax.Array) -> jax.Array:
  """Unit quaternion (..., 4), rounded as MuJoCo 4.0.1's mju_normalize4: q times 1/|q|, with
  |q|^2 summed in pairs as its vectorised code does, q itself where |q| is 1 within mjMINVAL,
  the identity where |q| < mjMINVAL. The tangent is that of q / |q| everywhere, as finite
  differences see it."""
  p = rounded(q * q)
  n = jnp.sqrt((p[..., 0] + p[..., 1]) + (p[..., 2] + p[..., 3]))[..., None]
  small = n < MINVAL
  unit = jnp.zeros_like(q).at[..., 0].set(1.0)
  scaled = q * (1.0 / jnp.where(small, 1.0, n))
  return jnp.where(small, unit, jnp.where(jnp.abs(n - 1.0) <= MINVAL, q, scaled))


@quat_normalize.defjvp
def _quat_normalize_jvp(primals: tuple, tangents: tuple) -> tuple[jax.Array, jax.Array]:
  (q,), (dq,) = primals, tangents
  n = safe_norm(q, keepdims=True)
  small = n < MINVAL
  unit = q / jnp.where(small, 1.0, n)
  dunit = (dq - unit * jnp.sum(unit * dq, axis=-1, keepdims=True)) / jnp.where(small, 1.0, n)
  return quat_normalize(q), jnp.where(small, 0.0, dunit)


def quat_mul(a: jax.Array, b: jax.Array) -> jax.Array:
  """Hamilton product a * b, (..., 4)."""
  aw, ax, ay, az = jnp.moveaxis(a, -1, 0)
  bw, bx, by, bz = jnp.moveaxis(b, -1, 0)
  return jnp.stack([
      aw * bw - ax * bx - ay * by - az * bz,
      aw * bx + ax * bw + ay * bz - az * by,
      aw * by - ax * bz + ay * bw + az * bx,
      aw * bz + ax * by - ay * bx + az * bw,
  ], axis=-1)


def quat_conj(q: jax.Array) -> jax.Array:
  """Conjugate (the inverse of a unit quaternion)."""
  return jnp.concatenate([q[..., :1], -q[..., 1:]], axis=-1)


def quat_to_mat(q: jax.Array) -> jax.Array:
  """Rotation matrix of a unit quaternion, (..., 3, 3), rounded as MuJoCo 4.0.1's mju_quat2Mat
  (its machine code sums the diagonal as (q00 - q22) + (q11 - q33) and so on)."""
  w, x, y, z = jnp.moveaxis(q, -1, 0)
  ww, xx, yy, zz = rounded(w * w), rounded(x * x), rounded(y * y), rounded(z * z)
  wx, wy, wz = rounded(w * x), rounded(w * y), rounded(w * z)
  xy, xz, yz = rounded(x * y), rounded(x * z), rounded(y * z)
  return jnp.stack([
      jnp.stack([(ww - yy) + (xx - zz), 2 * (xy - wz), 2 * (xz + wy)], -1),
      jnp.stack([2 * (xy + wz), (ww + yy) - (xx + zz), 2 * (yz - wx)], -1),
      jnp.stack([2 * (xz - wy), 2 * (yz + wx), (ww - yy) - (xx - zz)], -1),
  ], axis=-2)


def rot_vec_quat(v: jax.Array, q: jax.Array) -> jax.Array:
  """Rotates v (..., 3) by unit quaternion q (..., 4)."""
  return mat_vec(quat_to_mat(q), v)


def axis_angle_to_quat(axis: jax.Array, angle: jax.Array) -> jax.Array:
  """Quaternion of a rotation by ``angle`` (rad, (...,)) about unit ``axis`` (..., 3)."""
  half = 0.5 * angle[..., None]
  return jnp.concatenate([jnp.cos(half), axis * jnp.sin(half)], axis=-1)


def quat_integrate(q: jax.Array, omega: jax.Array, dt: jax.Array | float) -> jax.Array:
  """Rotates q by local angular velocity ``omega`` (..., 3) for time dt (as mju_quatIntegrate).

  Returns the normalized q * exp(omega dt / 2). The gradient is finite at omega = 0.
  """
  speed = safe_norm(omega, keepdims=True)
  moving = speed > 0
  axis = omega / jnp.where(moving, speed, 1.0)
  rot = axis_angle_to_quat(axis, (speed * dt)[..., 0])
  # Second-order series at rest keeps d(rot)/d(omega) = dt/2 where the norm has no gradient.
  small = jnp.concatenate([jnp.ones_like(speed), 0.5 * dt * omega], axis=-1)
  rot = jnp.where(moving, rot, small)
  return quat_normalize(quat_mul(q, rot))


def quat_sub(qa: jax.Array, qb: jax.Array) -> jax.Array:
  """3D velocity v such that qa = qb * exp(v): the rotation from qb to qa (as mju_subQuat)."""
  dq = quat_mul(quat_conj(qb), qa)
  return quat_to_vel(dq)


def quat_to_vel(q: jax.Array) -> jax.Array:
  """Rotation vector (axis * angle) of a unit quaternion, angle in (-pi, pi] (mju_quat2Vel, dt=1)."""
  v = q[..., 1:]
  sin_a2 = safe_norm(v, keepdims=True)
  nonzero = sin_a2 > 0
  angle = 2.0 * jnp.arctan2(sin_a2, q[..., :1])
  angle = jnp.where(angle > jnp.pi, angle - 2.0 * jnp.pi, angle)
  scale = jnp.where(nonzero, angle / jnp.where(nonzero, sin_a2, 1.0), 2.0)
  return v * scale


def cross(a: jax.Array, b: jax.Array) -> jax.Array:
  """3D cross product along the last axis."""
  return jnp.cross(a, b)


@jax.custom_jvp
def components(v: jax.Array) -> tuple[jax.Array, ...]:
  """The components ``v[..., 0], ..., v[..., k - 1]`` (...) of vectors v (..., k).

  Slices forward; in reverse mode each component's cotangent is spread back by a multiply with
  its unit vector, which fuses with its neighbours, where a slice's transpose is a pad and an
  add, a kernel each on XLA's CPU backend. (Sums against the unit vectors transpose as well,
  but forward, on batches of a few hundred vectors and more, XLA's CPU backend hands such
  reductions to a library call that costs ten times a fused loop.)"""
  return tuple(v[..., i] for i in range(v.shape[-1]))


@components.defjvp
def _components_jvp(primals: tuple[jax.Array], tangents: tuple[jax.Array]):
  (v,), (dv,) = primals, tangents
  k = v.shape[-1]
  basis = np.eye(k, dtype=dv.dtype).reshape((k,) + (1,) * (v.ndim - 1) + (k,))
  return components(v), tuple(jnp.sum(dv * e, axis=-1) for e in basis)


def frame_dot(frame: jax.Array, vecs: jax.Array) -> jax.Array:
  """The components (..., r, k) of vectors vecs (..., k, 3) along the rows of frame (..., r, 3).

  Written as three broadcast multiply-adds rather than an einsum: under vmap an einsum of
  many 3-vectors becomes a batched dot of tiny matrices, several times slower on a CPU than
  one fused elementwise loop."""
  return sum(frame[..., :, None, j] * vecs[..., None, :, j] for j in range(3))


@jax.custom_jvp
def rows_dot(a: jax.Array, b: jax.Array) -> jax.Array:
  """Inner products (n, m) of the rows of a (n, k) with the rows of b (m, k): ``a @ b.T``.

  Reverse mode turns the product into ``g @ b`` and ``g.T @ a``. Under vmap XLA folds the
  transpose of the second into a batched dot that contracts a major axis, which its CPU
  backend runs outside the matmul library, two to three times slower than the first; the
  tangent below makes it transpose the cotangent in memory instead."""
  return a @ b.T


@rows_dot.defjvp
def _rows_dot_jvp(primals: tuple[jax.Array, jax.Array], tangents: tuple[jax.Array, jax.Array]
                  ) -> tuple[jax.Array, jax.Array]:
  a, b = primals
  da, db = tangents
  # the barrier keeps the transpose of db @ a.T from folding into the product
  return a @ b.T, da @ b.T + jax.lax.optimization_barrier(db @ a.T).T


# Largest matrix order n that ``cholesky`` and ``cho_solve`` unroll into arithmetic on the
# entries. Measured at a batch of 64 (benchmarks/README.md): unrolled, cartpole's and
# muscle_arm's rollouts (n = 2) ran 1.5x and 1.1x faster, their gradients 1.4x and 1.05x, for
# 7-9% more compile time; at n = 3-9 the unrolled forms added 17-62% to the compile time, and
# run times moved from 20% faster to 18% slower.
_UNROLLED = 2


def cholesky(a: jax.Array) -> jax.Array:
  """The lower Cholesky factor (..., n, n) of a symmetric positive definite a (..., n, n), read
  from a's lower triangle only.

  Up to n = ``_UNROLLED`` the factor is unrolled into elementwise arithmetic on a's entries,
  which XLA fuses with what surrounds it; LAPACK's batched call costs more per matrix than such
  a factorisation, and each call is a kernel of its own. Larger matrices go to LAPACK."""
  n = a.shape[-1]
  if n > _UNROLLED:
    return jnp.linalg.cholesky(a, symmetrize_input=False)
  if not n:
    return a
  low: list[list[jax.Array]] = [[] for _ in range(n)]
  for j in range(n):
    pivot = a[..., j, j]
    for k in range(j):
      pivot = pivot - low[j][k] * low[j][k]
    pivot = jnp.sqrt(pivot)
    low[j].append(pivot)
    for i in range(j + 1, n):
      entry = a[..., i, j]
      for k in range(j):
        entry = entry - low[i][k] * low[j][k]
      low[i].append(entry / pivot)
  zero = jnp.zeros_like(a[..., 0, 0])
  return jnp.stack([jnp.stack(row + [zero] * (n - len(row)), axis=-1) for row in low], axis=-2)


def cho_solve(factor: jax.Array, b: jax.Array) -> jax.Array:
  """a^-1 b from a's lower Cholesky factor (..., n, n) (``cholesky``), for b (..., n) or
  (..., n, k) with the factor's leading axes: unrolled forward and back substitution up to
  n = ``_UNROLLED``, LAPACK above."""
  n = factor.shape[-1]
  if n > _UNROLLED:
    return jax.scipy.linalg.cho_solve((factor, True), b)
  if not n:
    return b
  vector = b.ndim == factor.ndim - 1
  row = (lambda i: b[..., i]) if vector else (lambda i: b[..., i, :])
  entry = ((lambda i, k: factor[..., i, k]) if vector
           else (lambda i, k: factor[..., i, k, None]))
  y: list[jax.Array] = []
  for i in range(n):
    value = row(i)
    for k in range(i):
      value = value - entry(i, k) * y[k]
    y.append(value / entry(i, i))
  x: list[jax.Array] = y[:]
  for i in reversed(range(n)):
    value = y[i]
    for k in range(i + 1, n):
      value = value - entry(k, i) * x[k]
    x[i] = value / entry(i, i)
  return jnp.stack(x, axis=-1 if vector else -2)


def _same_rank(mat: jax.Array, v: jax.Array) -> tuple[jax.Array, jax.Array]:
  """mat (..., 3, 3) and v (..., 3) with as many leading axes, new ones of size 1 in front."""
  lead = max(mat.ndim - 2, v.ndim - 1)
  return _lead(mat, lead + 2), _lead(v, lead + 1)


def mat_vec(mat: jax.Array, v: jax.Array) -> jax.Array:
  """mat v for 3x3 matrices (..., 3, 3) and vectors (..., 3), leading axes broadcast, as
  multiply-adds (see ``frame_dot``) summed left to right as mju_mulMatVec3, in full precision
  also where an accelerator runs dots in reduced precision."""
  mat, v = _same_rank(mat, v)
  return sum(mat[..., :, j] * v[..., None, j] for j in range(3))


def mat_t_vec(mat: jax.Array, v: jax.Array) -> jax.Array:
  """mat^T v for 3x3 matrices (..., 3, 3) and vectors (..., 3): v in the frame mat."""
  mat, v = _same_rank(mat, v)
  return sum(mat[..., j, :] * v[..., None, j] for j in range(3))


def motion_cross(v: jax.Array, m: jax.Array) -> jax.Array:
  """Spatial motion cross product v x m (mju_crossMotion), (..., 6)."""
  w, u = v[..., :3], v[..., 3:]
  mw, mu = m[..., :3], m[..., 3:]
  return jnp.concatenate([cross(w, mw), cross(w, mu) + cross(u, mw)], axis=-1)


def force_cross(v: jax.Array, f: jax.Array) -> jax.Array:
  """Spatial force cross product v x* f (mju_crossForce), (..., 6)."""
  w, u = v[..., :3], v[..., 3:]
  fn, ff = f[..., :3], f[..., 3:]
  return jnp.concatenate([cross(w, fn) + cross(u, ff), cross(w, ff)], axis=-1)


def inert_mul(inert: jax.Array, v: jax.Array) -> jax.Array:
  """Product of com-based inertia (..., 10) with spatial motion v (..., 6) (mju_mulInertVec)."""
  ixx, iyy, izz, ixy, ixz, iyz = (inert[..., k] for k in range(6))
  mc, m = inert[..., 6:9], inert[..., 9:10]
  w, u = v[..., :3], v[..., 3:]
  rot = jnp.stack([
      ixx * w[..., 0] + ixy * w[..., 1] + ixz * w[..., 2],
      ixy * w[..., 0] + iyy * w[..., 1] + iyz * w[..., 2],
      ixz * w[..., 0] + iyz * w[..., 1] + izz * w[..., 2],
  ], axis=-1) + cross(mc, u)
  lin = m * u - cross(mc, w)
  return jnp.concatenate([rot, lin], axis=-1)


def inert_com(inertia: jax.Array, rot: jax.Array, offset: jax.Array, mass: jax.Array) -> jax.Array:
  """Com-based 10-vector inertia (mju_inertCom).

  Args:
    inertia: (..., 3) principal moments in the body's inertial frame.
    rot: (..., 3, 3) orientation of the inertial frame (ximat).
    offset: (..., 3) inertial-frame origin minus the com-frame origin (xipos - subtree_com).
    mass: (...,) kg.
  """
  full = jnp.einsum("...ij,...j,...kj->...ik", rot, inertia, rot)
  d, m = offset, mass[..., None]
  dd = jnp.sum(d * d, axis=-1)
  eye = jnp.broadcast_to(jnp.eye(3, dtype=d.dtype), full.shape)
  full = full + mass[..., None, None] * (dd[..., None, None] * eye
                                         - d[..., :, None] * d[..., None, :])
  return jnp.concatenate([
      jnp.stack([full[..., 0, 0], full[..., 1, 1], full[..., 2, 2],
                 full[..., 0, 1], full[..., 0, 2], full[..., 1, 2]], axis=-1),
      m * d, m], axis=-1)


# Most blocks ``take`` assembles before it falls back to a gather.
_TAKE_BLOCKS = 8


def _blocks(idx: np.ndarray) -> list[tuple[int, int, int, int]]:
  """idx (n,) as blocks (first, count, step, repeat): the indices first, first + step, ...,
  first + (count - 1) step, each repeated ``repeat`` times."""
  blocks, i, n = [], 0, len(idx)
  while i < n:
    first = int(idx[i])
    repeat = 1
    while i + repeat < n and idx[i + repeat] == first:
      repeat += 1
    step = int(idx[i + repeat]) - first if i + repeat < n else 1
    step = step if step > 0 else 1
    count = 1
    while True:
      start, end = i + count * repeat, i + (count + 1) * repeat
      value = first + count * step
      if (end > n or np.any(idx[start:end] != value)
          or (end < n and idx[end] == value)):
        break
      count += 1
    blocks.append((first, count, step, repeat))
    i += count * repeat
  return blocks


def take(x: jax.Array, idx: np.ndarray) -> jax.Array:
  """``x[idx]`` (n, ...) for a static index array idx (n,) into x's leading axis.

  Where idx is a few blocks of evenly spaced indices, each repeated alike (a constraint row's
  contact slot: slots of one condim in order, each repeated once per row; a row's first row),
  the result is strided slices of x, repeated by broadcasting. XLA keeps a gather of constant
  indices, and reverse mode turns it into a scatter-add, which its CPU backend runs as a loop
  (with transposing copies around it under vmap); a slice transposes into a pad and the
  repeats into sums, which fuse."""
  idx = np.asarray(idx)
  blocks = _blocks(idx) if idx.ndim == 1 else []
  if not blocks or len(blocks) > _TAKE_BLOCKS:
    return x[idx]
  pieces = []
  for first, count, step, repeat in blocks:
    piece = x[first:first + (count - 1) * step + 1:step]
    if repeat > 1:
      # a broadcast, not a stack of copies: XLA fuses the copies' producer into a concatenation
      # that recomputes it for each copy (the contact cheetah's frames: 912 us a step, not 94)
      piece = jnp.broadcast_to(piece[:, None], (count, repeat) + x.shape[1:]).reshape(
          (count * repeat,) + x.shape[1:])
    pieces.append(piece)
  return pieces[0] if len(pieces) == 1 else jnp.concatenate(pieces)


def take_columns(x: jax.Array, col: np.ndarray) -> jax.Array:
  """``x[i, col[i]]`` (n, ...) for x (n, k, ...) and a static column index col (n,), as
  selections: no gather (see ``take``)."""
  values = np.unique(col)
  out = x[:, int(values[0])]
  for k in values[1:]:
    out = jnp.where((col == k).reshape((-1,) + (1,) * (out.ndim - 1)), x[:, int(k)], out)
  return out


def known_cond(pred: Callable[..., Any], values: tuple[Any, ...], true_fn: Callable[[], _T],
               false_fn: Callable[[], _T]) -> _T:
  """``lax.cond(pred(*values), true_fn, false_fn)``, decided while tracing where ``values``
  (Model parameters) are known then: a Model closed over by ``jit``, ``scan`` or ``vmap``
  rather than passed in as a traced argument. Only the branch taken is then traced,
  differentiated and compiled (a model in a still medium compiles no fluid forces), while a
  traced Model (batched parameters, or gradients with respect to them) keeps both branches.
  ``pred`` sees numpy arrays in the first case, so it is written with array operators and
  methods only."""
  if any(isinstance(x, jax.core.Tracer) for x in jax.tree.leaves(values)):
    return jax.lax.cond(pred(*values), true_fn, false_fn)
  known = jax.tree.map(np.asarray, values)
  return true_fn() if bool(pred(*known)) else false_fn()


def known_where(pred: jax.Array, x: _T, y: _T) -> _T:
  """``jnp.where(pred, x, y)`` for a scalar ``pred``, or ``x`` or ``y`` itself where ``pred`` is
  known while tracing (computed from a known Model, see ``known_cond``, under
  ``jax.ensure_compile_time_eval``). The value not taken then leaves the program, and with it
  its gradient path: a select's backward pass would send it a cotangent of zeros that the
  compiler cannot see through a factorisation or a solve."""
  if isinstance(pred, jax.core.Tracer):
    return jnp.where(pred, x, y)
  return x if bool(pred) else y


def static_where(mask: np.ndarray, x: jax.Array, y: jax.Array) -> jax.Array:
  """``jnp.where(mask, x, y)`` for a static (numpy) mask; ``x`` or ``y`` itself where the mask
  is uniform, so that the other, unused, leaves the program. Inside a differentiated scan JAX
  hoists the mask out of the loop body, where the compiler could otherwise fold the select."""
  if mask.any() and not mask.all():
    return jnp.where(mask, x, y)
  shape = jnp.broadcast_shapes(mask.shape, jnp.shape(x), jnp.shape(y))
  return jnp.broadcast_to(jnp.asarray(x if mask.all() else y, jnp.result_type(x, y)), shape)


def jvp_nonzero(fn: Callable[..., Any], primals: tuple, tangents: tuple) -> Any:
  """The tangent of ``fn(*primals)`` along ``tangents``, some of whose leaves may be symbolic
  zeros (as a ``custom_jvp`` rule with ``symbolic_zeros=True`` receives them): only the leaves
  with a tangent are differentiated, the others enter as constants. None where no leaf has one."""
  is_zero = lambda t: isinstance(t, SymbolicZero)
  flat, treedef = jax.tree_util.tree_flatten(primals)
  flat_tangents = jax.tree_util.tree_leaves(tangents, is_leaf=is_zero)
  live = [i for i, t in enumerate(flat_tangents) if not is_zero(t)]
  if not live:
    return None

  def of_live(*values: Any) -> Any:
    leaves = list(flat)
    for i, value in zip(live, values):
      leaves[i] = value
    return fn(*jax.tree_util.tree_unflatten(treedef, leaves))

  return jax.jvp(of_live, [flat[i] for i in live], [flat_tangents[i] for i in live])[1]


@jax.custom_jvp
def materialize(tree: _T) -> _T:
  """``tree`` itself (a pytree of arrays), computed into memory before any of its readers run.

  XLA fuses a producer into each of its consumers, and where a consumer has many more
  elements than the producer (every vertex of a polygon reading the contact that chose the
  polygon) it recomputes the producer for each of them. An optimization barrier does not stop
  that: the CPU backend removes barriers before it fuses. Here the values pass through a loop
  that runs once, on a flag the compiler cannot follow, and their readers read the loop's
  result. Differentiated as the identity."""
  def once(state: tuple[jax.Array, _T]) -> tuple[jax.Array, _T]:
    go, value = state
    # a select on the flag, not the value itself: a loop that passes a value through unchanged
    # is simplified away
    return jnp.zeros((), bool), jax.tree.map(lambda v: jnp.where(go, v, jnp.zeros_like(v)), value)

  return jax.lax.while_loop(lambda s: s[0], once, (jnp.ones((), bool), tree))[1]


@materialize.defjvp
def _materialize_jvp(primals: tuple, tangents: tuple) -> tuple:
  return materialize(primals[0]), tangents[0]


def run_if(flag: jax.Array, value: _T, fn: Callable[..., _T], *args: Any) -> _T:
  """``value``, or ``fn(*args)`` where ``flag`` () bool is set.

  A loop that runs at most once rather than a cond: under vmap a cond computes both branches
  for every world, a loop only while some world of the batch sets the flag, and not at all
  where none does. Not reverse differentiable (a while_loop): callers differentiate through a
  rule of their own."""
  def once(state: tuple[_T, jax.Array]) -> tuple[_T, jax.Array]:
    # the barrier makes fn's inputs read the loop state: XLA would otherwise hoist fn out of
    # the loop and run it always
    operands, flag = jax.lax.optimization_barrier((args, state[1]))
    return fn(*operands), ~flag

  return jax.lax.while_loop(lambda s: s[1], once, (value, flag))[0]


_PREFIX_BLOCK = 16


def _prefix_sum(x: jax.Array) -> jax.Array:
  """Inclusive prefix sums (..., n) along the last axis of float32 x (..., n) holding small
  non-negative integers: each block of 16 lanes summed by a product with a triangular matrix
  of ones, the blocks' totals by the same recursively. Exact while the sums stay below 2^24
  (products of integers and ones, and sums of integers, are exact in float32, and in tf32)."""
  n = x.shape[-1]
  if n <= _PREFIX_BLOCK:
    return jnp.matmul(x, jnp.triu(jnp.ones((n, n), x.dtype)), precision="highest")
  nblock = -(-n // _PREFIX_BLOCK)
  pad = [(0, 0)] * (x.ndim - 1) + [(0, nblock * _PREFIX_BLOCK - n)]
  blocks = jnp.pad(x, pad).reshape(x.shape[:-1] + (nblock, _PREFIX_BLOCK))
  within = _prefix_sum(blocks)
  total = within[..., -1]
  before = _prefix_sum(total) - total
  return (within + before[..., None]).reshape(x.shape[:-1] + (-1,))[..., :n]


def prefix_count(mask: jax.Array) -> jax.Array:
  """How many lanes of ``mask`` (..., n) bool up to each one are set (..., n) int32: a
  cumulative sum along the last axis.

  By small matrix products rather than ``jnp.cumsum``, which XLA's CPU backend runs as a
  reduce-window, a loop of additions per lane over up to 16 lanes before it: 45 us against 18
  for 64 worlds of 228 constraint rows, and most of ``jnp.nonzero``'s time."""
  return _prefix_sum(mask.astype(jnp.float32)).astype(jnp.int32)


def compact(active: jax.Array, size: int, fill: int) -> tuple[jax.Array, jax.Array]:
  """(pick (size,), rank (n,)), both int32: the indices of the first ``size`` lanes where
  ``active`` (n,) bool is set, in order, filled up with ``fill``; and each lane's rank among
  the active lanes (-1 before the first). ``jnp.nonzero(active, size=size)`` with one prefix
  count (``prefix_count``) and one scatter, where jnp.nonzero takes two cumulative sums, a
  scatter and a remainder."""
  rank = prefix_count(active) - 1
  slot = jnp.where(active, rank, size)
  pick = jnp.full(size, fill, jnp.int32).at[slot].set(
      jnp.arange(active.shape[0], dtype=jnp.int32), mode="drop")
  return pick, rank


def chunked(active: jax.Array, fn: Callable[..., _T], args: tuple[Any, ...], size: int) -> _T:
  """``fn(on, *args)`` on the lanes where ``active`` (n,) bool is set, ``size`` lanes at a time;
  zeros on the others. Every leaf of ``args`` and of fn's result has the lanes as its leading
  axis.

  The active lanes are gathered first, in order, into chunks of ``size``; a scan visits the
  chunks and a cond skips each one without an active lane, so the work grows with the active
  lanes rather than with n, and the program holds fn once. ``on`` (size,) marks a chunk's
  active lanes (a chunk is filled up with copies of the last lane). Differentiable in both
  modes. Under vmap the cond computes both branches: every chunk runs, as one vectorised call
  would."""
  n = active.shape[0]
  nchunk = -(-n // size)
  sel, rank = compact(active, nchunk * size, n)
  take = lambda x: x[jnp.minimum(sel, n - 1)].reshape((nchunk, size) + x.shape[1:])
  on = (sel < n).reshape(nchunk, size)

  shapes = []

  def run(on: jax.Array, *chunk: Any) -> _T:
    out = fn(on, *chunk)
    shapes.append(jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), out))
    return out

  def skip(on: jax.Array, *chunk: Any) -> _T:
    # cond traces its true branch first, so fn's shapes are known here without tracing fn a
    # second time (the height field's search: 3 s of the quadruped's trace)
    shape = shapes[-1] if shapes else jax.eval_shape(fn, on, *chunk)
    return jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shape)

  _, out = jax.lax.scan(
      lambda _, chunk: (None, jax.lax.cond(jnp.any(chunk[0]), run, skip, *chunk)),
      None, (on, *jax.tree.map(take, tuple(args))))
  # each active lane's result sits at its rank among the active lanes: a gather, not a
  # scatter (which XLA CPU runs as a loop over the lanes)
  rank = jnp.maximum(rank, 0)

  def back(x: jax.Array) -> jax.Array:
    flat = x.reshape((nchunk * size,) + x.shape[2:])[rank]
    return jnp.where(active.reshape((n,) + (1,) * (flat.ndim - 1)), flat, jnp.zeros_like(flat))
  return jax.tree.map(back, out)
