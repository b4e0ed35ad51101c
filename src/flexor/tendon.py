"""Tendons: ``tendon`` computes lengths, Jacobians and path points (mj_tendon), and
``tendon_velocity`` their rates.

A fixed tendon is a linear combination of hinge and slide coordinates: its length is
``sum coef * qpos[jnt_qposadr]`` and its Jacobian row holds ``coef`` at each joint's dof.

A spatial tendon is a path of sites, optionally interrupted by pulleys and wrapping geoms. It is
cut, on the host, into *spans*: a straight site-site segment, or site-geom-site where the tendon
may wrap around a sphere or a cylinder (``mju_wrap``). A pulley divides the length and Jacobian
of every span after it by its divisor. A wrapping span contributes either the straight distance,
or ``|x0 - t0| + arc + |t1 - x1|`` through the two tangent points t0, t1 on the geom; its
Jacobian is, as in MuJoCo, the sum over the straight pieces between points on different bodies
of the unit direction times the difference of the two endpoints' point Jacobians, the tangent
points moving with the geom's body (the arc between them is rigid with the geom).

Everything traced is one vectorised pass: all sites of all spans are gathered at once, the
wrapping of all spans around spheres and cylinders is computed at once (static per-element type
masks) with ``jnp.where`` between the wrap and no-wrap results, and spans and fixed-tendon joints
are summed into their tendons with static segment sums.

Path points (``ten_wrapadr``, ``ten_wrapnum``, ``wrap_obj``, ``wrap_xpos``) follow MuJoCo's layout:
for each tendon, in path order, a pulley adds a point (obj -2, at the origin), a span adds its
first site (obj -1) and, if it wraps, the two tangent points (obj = geom id), and the last site
before a pulley or the end of the path is added too. How many points a wrapping span adds is state
dependent, so every candidate point has a static slot in emission order and a traced "present"
flag; a cumulative sum gives the addresses and a scatter writes the (2 nwrap) point rows. Rows past
the last point are zero; MuJoCo leaves there what an earlier call wrote (zero in a fresh mjData).

Wrapping follows MuJoCo 4.0.0, measured black-box where it departs from the C source of 3.x:

* the wrap arc length is ``r atan2(|cross|, dot)`` (not ``acos``);
* with a sidesite outside the geom, the tendon wraps when the straight segment meets the circle,
  or when the sidesite lies behind the geom (in the cone spanned by -x0 and -x1 in the wrap plane);
  behind, it wraps on the sidesite's side of the segment (the sign of ``cross(x1 - x0, side)``),
  otherwise it picks the tangent points of the smaller chord, as without a sidesite, and the
  shorter arc between them;
* with the sidesite inside the geom (``wrap_inside``), Newton's method runs on phi = asin(z) from
  phi = pi/2.

Gradients: both branches of every traced choice are finite; the Newton solve of ``wrap_inside`` is
differentiated implicitly (the implicit function theorem at the converged point), not through its
iterations, and runs only where some span of the batch has its sidesite inside the geom.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from flexor import kinematics, math
from flexor.types import Data, Model, WrapType

_MINVAL = math.MINVAL
_INSIDE_MAXITER = 20   # wrap_inside: Newton iterations
_INSIDE_TOL = 1e-6     # wrap_inside: tolerance on the angle equation
_NO_POINT = -1         # point_cond of points that are always present

# point sources: rows of concat([x0, t0, t1, x1] over spans, [origin]) (see Path)
_X0, _T0, _T1, _X1 = range(4)


@dataclasses.dataclass(frozen=True)
class Path:
  """Static (host) description of every tendon's path, built by ``path_of`` from the Model.

  Fixed-tendon joints (one row per joint element): ``jnt_wrap`` (wrap index, whose wrap_prm is
  the coefficient), ``jnt_ten``, ``jnt_qposadr``, ``jnt_dofadr``.

  Spans (one row per site-site or site-geom-site piece of a spatial tendon): ``span_ten``,
  ``span_site0``, ``span_site1``, ``span_geom`` (geom id or -1), ``span_wrap`` (wrap index of
  the geom, whose wrap_prm is the sidesite id, or -1), ``span_pulley`` (wrap index of the last
  pulley before the span, whose wrap_prm is the divisor, or -1).

  Jacobian segments (straight pieces between points on different bodies): ``seg_span``,
  ``seg_wrapped`` (the piece exists when the span wraps, else when it does not), ``seg_src``
  (2 point sources, as below), ``seg_body`` (2 body ids).

  Path points in MuJoCo's emission order: ``point_ten``, ``point_src`` (row of
  concat([x0, t0, t1, x1]) over spans, or 4 nspan for the origin of a pulley), ``point_obj``
  (wrap_obj value), ``point_cond`` (span whose wrapping makes the point present, or -1: always).
  """

  jnt_wrap: np.ndarray
  jnt_ten: np.ndarray
  jnt_qposadr: np.ndarray
  jnt_dofadr: np.ndarray
  span_ten: np.ndarray
  span_site0: np.ndarray
  span_site1: np.ndarray
  span_geom: np.ndarray
  span_wrap: np.ndarray
  span_pulley: np.ndarray
  seg_span: np.ndarray
  seg_wrapped: np.ndarray
  seg_src: np.ndarray
  seg_body: np.ndarray
  point_ten: np.ndarray
  point_src: np.ndarray
  point_obj: np.ndarray
  point_cond: np.ndarray


def path_of(m: Model) -> Path:
  """Walks every tendon's path as mj_tendon does and records its static structure."""
  jnt, span, point = [], [], []
  for t in range(m.ntendon):
    adr, num = int(m.tendon_adr[t]), int(m.tendon_num[t])
    types, ids = m.wrap_type[adr:adr + num], m.wrap_objid[adr:adr + num]
    if types[0] == WrapType.JOINT:
      for j in range(num):
        k = int(ids[j])
        jnt.append((adr + j, t, m.jnt_qposadr[k], m.jnt_dofadr[k]))
      continue
    pulley, j = -1, 0
    while j < num - 1:
      if types[j] == WrapType.PULLEY or types[j + 1] == WrapType.PULLEY:
        if types[j] == WrapType.PULLEY:
          pulley = adr + j
          point.append((t, -1, -2, _NO_POINT))   # the origin
        j += 1
        continue
      k = len(span)
      geom = types[j + 1] in (WrapType.SPHERE, WrapType.CYLINDER)
      last = j + 2 if geom else j + 1
      span.append((t, ids[j], ids[last], ids[j + 1] if geom else -1, adr + j + 1 if geom else -1,
                   pulley))
      point.append((t, 4 * k + _X0, -1, _NO_POINT))
      if geom:
        point.append((t, 4 * k + _T0, ids[j + 1], k))
        point.append((t, 4 * k + _T1, ids[j + 1], k))
      j = last
      if j == num - 1 or types[j + 1] == WrapType.PULLEY:
        point.append((t, 4 * k + _X1, -1, _NO_POINT))

  def columns(rows, n):
    return [np.array(c, dtype=np.int32) for c in zip(*rows)] if rows else [
        np.zeros(0, dtype=np.int32)] * n

  jnt_wrap, jnt_ten, jnt_qposadr, jnt_dofadr = columns(jnt, 4)
  span_ten, span_site0, span_site1, span_geom, span_wrap, span_pulley = columns(span, 6)
  point_ten, point_src, point_obj, point_cond = columns(point, 4)
  nspan = len(span)
  point_src = np.where(point_src < 0, 4 * nspan, point_src).astype(np.int32)

  # Straight pieces that move the tendon: between points on different bodies (mj_tendon skips
  # the others); the piece between the two tangent points lies on the geom's body.
  seg = []
  for k, (_, s0, s1, g, _, _) in enumerate(span):
    b0, b1 = m.site_bodyid[s0], m.site_bodyid[s1]
    if b0 != b1:
      seg.append((k, 0, 4 * k + _X0, 4 * k + _X1, b0, b1))
    if g >= 0:
      bg = m.geom_bodyid[g]
      if b0 != bg:
        seg.append((k, 1, 4 * k + _X0, 4 * k + _T0, b0, bg))
      if bg != b1:
        seg.append((k, 1, 4 * k + _T1, 4 * k + _X1, bg, b1))
  seg_span, seg_wrapped, src0, src1, body0, body1 = columns(seg, 6)
  return Path(jnt_wrap=jnt_wrap, jnt_ten=jnt_ten, jnt_qposadr=jnt_qposadr,
               jnt_dofadr=jnt_dofadr, span_ten=span_ten, span_site0=span_site0,
               span_site1=span_site1, span_geom=span_geom, span_wrap=span_wrap,
               span_pulley=span_pulley, seg_span=seg_span, seg_wrapped=seg_wrapped.astype(bool),
               seg_src=np.stack([src0, src1], axis=-1), seg_body=np.stack([body0, body1], axis=-1),
               point_ten=point_ten, point_src=point_src, point_obj=point_obj,
               point_cond=point_cond)


# ------------------------------------------------------------------------------------------------
# small guarded helpers


def _unit(x: jax.Array) -> jax.Array:
  """x / |x| along the last axis; (1, 0, ...) where |x| < mjMINVAL (mju_normalize[3]).

  Component by component: the norm broadcast against x would make reverse mode sum the
  products over the last axis, a reduction kernel of its own on XLA's CPU backend (a library
  call, 130 us a step for the muscle_arms4 benchmark's 64 worlds)."""
  c = math.components(x)
  # the norm from the components too, not math.safe_norm: its slices of x transpose into pads
  # (muscle_arms4's gradient 157-166 ms this way, 164-173 with safe_norm)
  sq = c[0] * c[0]
  for ci in c[1:]:   # summed as math.dot sums, left to right
    sq = sq + ci * ci
  nonzero = sq > 0
  n = jnp.where(nonzero, jnp.sqrt(jnp.where(nonzero, sq, 1.0)), 0.0)
  small = n < _MINVAL
  inv = 1.0 / jnp.where(small, 1.0, n)
  return jnp.stack([jnp.where(small, float(i == 0), ci * inv) for i, ci in enumerate(c)], -1)


def _safe_div(a: jax.Array, b: jax.Array) -> jax.Array:
  """a / b, and a where b == 0 (both finite, for branches jnp.where discards)."""
  return a / jnp.where(b == 0, 1.0, b)


# 2D points in a wrap plane are pairs (x, y) of (n,) arrays rather than (n, 2) arrays: reverse
# mode through the component slices of an array pads and adds every one, a kernel each on
# XLA's CPU backend, where on pairs it stays elementwise.
Vec2 = tuple[jax.Array, jax.Array]


def _dot2(u: Vec2, v: Vec2) -> jax.Array:
  return u[0] * v[0] + u[1] * v[1]


def _cross2(u: Vec2, v: Vec2) -> jax.Array:
  """z-component of the cross product of 2D vectors."""
  return u[0] * v[1] - u[1] * v[0]


def _sub2(u: Vec2, v: Vec2) -> Vec2:
  return u[0] - v[0], u[1] - v[1]


def _where2(cond: jax.Array, u: Vec2, v: Vec2) -> Vec2:
  return jnp.where(cond, u[0], v[0]), jnp.where(cond, u[1], v[1])


def _norm2(u: Vec2) -> jax.Array:
  """|u| with a finite (zero) gradient at 0, as ``math.safe_norm``."""
  sq = _dot2(u, u)
  nonzero = sq > 0
  return jnp.where(nonzero, jnp.sqrt(jnp.where(nonzero, sq, 1.0)), 0.0)


def _unit2(u: Vec2) -> Vec2:
  """u / |u|; (1, 0) where |u| < mjMINVAL (mju_normalize)."""
  n = _norm2(u)
  small = n < _MINVAL
  inv = 1.0 / jnp.where(small, 1.0, n)
  return jnp.where(small, 1.0, u[0] * inv), jnp.where(small, 0.0, u[1] * inv)


# ------------------------------------------------------------------------------------------------
# 2D wrapping (engine_util_misc.c)


def _is_intersect(p1: Vec2, p2: Vec2, p3: Vec2, p4: Vec2) -> jax.Array:
  """Whether 2D segments p1-p2 and p3-p4 intersect (is_intersect); (n,) bool."""
  det = (p4[1] - p3[1]) * (p2[0] - p1[0]) - (p4[0] - p3[0]) * (p2[1] - p1[1])
  ok = jnp.abs(det) >= _MINVAL
  det = jnp.where(ok, det, 1.0)
  a = ((p4[0] - p3[0]) * (p1[1] - p3[1]) - (p4[1] - p3[1]) * (p1[0] - p3[0])) / det
  b = ((p2[0] - p1[0]) * (p1[1] - p3[1]) - (p2[1] - p1[1]) * (p1[0] - p3[0])) / det
  return ok & (a >= 0) & (a <= 1) & (b >= 0) & (b <= 1)


def _circle_angle(p0: Vec2, p1: Vec2) -> tuple[jax.Array, jax.Array]:
  """Angle in [0, pi] between 2D points and the sign term of length_circle."""
  cross = p0[1] * p1[0] - p0[0] * p1[1]
  y, x = jnp.abs(cross), _dot2(p0, p1)
  origin = (y == 0) & (x == 0)   # atan2 has no gradient there
  return jnp.arctan2(jnp.where(origin, 0.0, y), jnp.where(origin, 1.0, x)), cross


def _behind(side: Vec2, end0: Vec2, end1: Vec2) -> jax.Array:
  """Whether the 2D side point lies in the closed cone spanned by -end0 and -end1, i.e. behind
  the circle as seen from the segment end0-end1 (MuJoCo 4.0's sidesite test, measured)."""
  ce = _cross2(end0, end1)
  neg0, neg1 = (-end0[0], -end0[1]), (-end1[0], -end1[1])
  cone = jnp.minimum(_cross2(neg0, side) * ce, _cross2(side, neg1) * ce) >= 0
  return jnp.where(ce == 0, _dot2(end0, end1) < 0, cone)


def _tangents(end0: Vec2, end1: Vec2, radius: jax.Array, sgn: float) -> tuple[Vec2, Vec2]:
  """The tangent points from end0 and end1 to the circle on one side (sgn = +1 or -1)."""
  sqrad = radius * radius
  sq0, sq1 = _dot2(end0, end0), _dot2(end1, end1)
  r0 = sgn * radius * math.safe_sqrt(sq0 - sqrad)
  r1 = sgn * radius * math.safe_sqrt(sq1 - sqrad)
  s0 = (_safe_div(end0[0] * sqrad + r0 * end0[1], sq0),
        _safe_div(end0[1] * sqrad - r0 * end0[0], sq0))
  s1 = (_safe_div(end1[0] * sqrad - r1 * end1[1], sq1),
        _safe_div(end1[1] * sqrad + r1 * end1[0], sq1))
  return s0, s1


def _wrap_circle(end0: Vec2, end1: Vec2, side: Vec2, has_side: jax.Array, behind: jax.Array,
                 radius: jax.Array):
  """Shortest (or sidesite-directed) wrap of a 2D segment around a circle (wrap_circle).

  Args:
    end0, end1: endpoints in the wrap plane, (n,) pairs.
    side: sidesite direction, of any non-zero length (ignored where not has_side).
    has_side: (n,) bool.
    behind: (n,) bool, ``has_side & _behind(side, end0, end1)``.
    radius: (n,).
  Returns:
    length (n,) of the arc, the two tangent points, wrapped (n,) bool (MuJoCo's length >= 0).
  """
  sqrad = radius * radius
  dif = _sub2(end1, end0)
  dd = _dot2(dif, dif)
  ok = ((_dot2(end0, end0) >= sqrad) & (_dot2(end1, end1) >= sqrad) & (radius >= _MINVAL)
        & (dd >= _MINVAL))

  # nearest point of the segment to the centre: does the segment cross the circle?
  a = jnp.clip(-_safe_div(_dot2(dif, end0), dd), 0.0, 1.0)
  near = (a * dif[0] + end0[0], a * dif[1] + end0[1])
  crosses = ~(_dot2(near, near) > sqrad)
  ok = ok & (crosses | behind)

  # the two candidate pairs of tangent points
  plus, minus = _tangents(end0, end1, radius, 1.0), _tangents(end0, end1, radius, -1.0)
  isect = [_is_intersect(end0, s0, end1, s1) for s0, s1 in (plus, minus)]
  good = [jnp.where(i, -10000.0, -_dot2(_sub2(s0, s1), _sub2(s0, s1)))
          for i, (s0, s1) in zip(isect, (plus, minus))]

  # behind: wrap on the sidesite's side of the segment; else the smaller chord (ties: second)
  turn = jnp.where(behind, _cross2(dif, side), 0.0)
  first = jnp.where(turn != 0, turn > 0, good[0] > good[1])
  p0 = _where2(first, plus[0], minus[0])
  p1 = _where2(first, plus[1], minus[1])
  ok = ok & ~jnp.where(first, isect[0], isect[1])
  # with a sidesite not behind the geom, MuJoCo 4.0 takes the shorter arc between the tangent
  # points (measured; it differs from the chosen solution's arc only when a site lies on the
  # circle); else the arc from p0 to p1, clockwise for the first solution (length_circle)
  angle, cross = _circle_angle(p0, p1)
  flip = ((cross > 0) & ~first) | ((cross < 0) & first)
  arc = jnp.where(has_side & ~behind, angle, jnp.where(flip, 2 * jnp.pi - angle, angle))
  return radius * arc, p0, p1, ok


def _inside_angle(A: jax.Array, B: jax.Array, G: jax.Array, phi: jax.Array) -> jax.Array:
  """f(phi) = asin(A sin phi) + asin(B sin phi) - 2 phi + G, whose root wrap_inside seeks."""
  z = jnp.sin(phi)
  return jnp.arcsin(A * z) + jnp.arcsin(B * z) - 2 * phi + G


def _inside_slope(A: jax.Array, B: jax.Array, phi: jax.Array) -> jax.Array:
  """df/dphi of ``_inside_angle``, with MuJoCo's floor on the square roots."""
  z = jnp.sin(phi)
  return jnp.cos(phi) * (A / jnp.maximum(_MINVAL, jnp.sqrt(1 - z * z * A * A))
                         + B / jnp.maximum(_MINVAL, jnp.sqrt(1 - z * z * B * B))) - 2


def _newton_inside(A: jax.Array, B: jax.Array, G: jax.Array, needed: jax.Array):
  """wrap_inside's Newton iteration on phi from pi/2, (n,) each, where ``needed``; returns
  (phi, converged).

  MuJoCo stops when |f| <= tolerance, gives up (keeping its default point) when f > 0 at the
  start, when the slope is not negative, when phi would increase, when f exceeds the tolerance
  after a step, or when it ran out of iterations; the flags below replay exactly that. The loop
  ends as soon as no span iterates (under vmap: in no world), which is at once when no sidesite
  is inside its geom; an iteration changes nothing of a span that has stopped, so the result is
  that of all _INSIDE_MAXITER iterations. Not differentiable: the caller stops the gradient.
  """
  run, done, fail = 0.0, 1.0, 2.0
  phi = jnp.full_like(A, 0.5 * jnp.pi)
  f = jnp.arcsin(A) + jnp.arcsin(B) - jnp.pi + G
  state = jnp.where(needed & ~(f > 0), run, fail)
  coef = jnp.stack([A, B, G])   # read by the loop: one array in memory, not three

  def iterating(carry):
    i, x = carry
    return (i < _INSIDE_MAXITER) & jnp.any(x[2] == run)

  def step(carry):
    # the state (phi, f, state) as one array: XLA's CPU backend fuses one result per kernel,
    # and each of three results would be a kernel of its own with the slope and angle between
    i, (phi, f, state) = carry
    A, B, G = coef
    state = jnp.where((state == run) & ~(jnp.abs(f) > _INSIDE_TOL), done, state)
    active = state == run
    df = _inside_slope(A, B, phi)
    bad_slope = df > -_MINVAL
    phi1 = phi - f / jnp.where(bad_slope, -1.0, df)
    moving = active & ~bad_slope & ~(phi1 > phi)
    phi = jnp.where(moving, phi1, phi)
    f_new = _inside_angle(A, B, G, phi)
    f = jnp.where(moving, f_new, f)
    state = jnp.where(active & (~moving | (f_new > _INSIDE_TOL)), fail, state)
    return i + 1, jnp.stack([phi, f, state])

  _, (phi, f, state) = jax.lax.while_loop(iterating, step, (0, jnp.stack([phi, f, state])))
  # converged at the check that would start iteration 20: MuJoCo counts that as a failure
  return phi, state == done


@jax.custom_jvp
def _inside_root(phi: jax.Array, A: jax.Array, B: jax.Array, G: jax.Array) -> jax.Array:
  """The root phi (n,) of ``_inside_angle`` for A, B, G (n,), passed through; its derivative
  in A, B and G is the implicit function theorem's (phi's own tangent is ignored)."""
  del A, B, G
  return phi


@_inside_root.defjvp
def _inside_root_jvp(primals, tangents):
  phi, A, B, G = primals
  _, dA, dB, dG = tangents
  z = jnp.sin(phi)
  slope = _inside_slope(A, B, phi)
  df = z * (dA / jnp.sqrt(1 - A * A * z * z) + dB / jnp.sqrt(1 - B * B * z * z)) + dG
  return phi, -df / jnp.where(slope < 0, slope, -1.0)


def _inside_setup(end0: Vec2, end1: Vec2, radius: jax.Array):
  """wrap_inside's triangle: A = r/|end0|, B = r/|end1| and cos G of the angle between the ends,
  (n,) each, with whether a wrap exists (ok) and needs Newton's method (solve), (n,) bool."""
  len0, len1 = _norm2(end0), _norm2(end1)
  dif = _sub2(end1, end0)
  dd = _dot2(dif, dif)
  ok = ((len0 > radius) & (len1 > radius) & (radius >= _MINVAL) & (len0 >= _MINVAL)
        & (len1 >= _MINVAL))
  a = -_safe_div(_dot2(dif, end0), dd)
  near = (end0[0] + a * dif[0], end0[1] + a * dif[1])
  ok = ok & ~((dd > _MINVAL) & (a > 0) & (a < 1) & (_norm2(near) <= radius))
  # Where ok, A, B < 1; elsewhere use harmless values so nothing below is NaN.
  A = jnp.where(ok, radius / jnp.where(ok, len0, 1.0), 0.5)
  B = jnp.where(ok, radius / jnp.where(ok, len1, 1.0), 0.5)
  cos_g = _safe_div(len0 * len0 + len1 * len1 - dd, 2 * len0 * len1)
  ok = ok & ~(cos_g < -1 + _MINVAL)
  return A, B, cos_g, ok, ok & ~(cos_g > 1 - _MINVAL)


def _inside_solve(end0: Vec2, end1: Vec2, radius: jax.Array, needed: jax.Array) -> jax.Array:
  """wrap_inside on every span: the touching point (Newton's method where ``needed`` (n,) bool;
  where it is not needed or does not converge, MuJoCo's initial guess, the direction of the
  segment's midpoint at the radius) and whether a wrap exists (1.0 or 0.0), stacked (3, n).

  One result array rather than three: XLA's CPU backend gives each result a kernel of its own,
  and with it each intermediate that two results share."""
  A, B, cos_g, ok, solve = _inside_setup(end0, end1, radius)
  G = jnp.arccos(jnp.where(solve, cos_g, 0.0))
  phi, converged = _newton_inside(*(jax.lax.stop_gradient(x) for x in (A, B, G)),
                                  solve & needed)
  phi = _inside_root(jnp.where(converged, phi, 0.25 * jnp.pi), A, B, G)

  z = jnp.sin(phi)
  ccw = _cross2(end0, end1) > 0
  vec = _unit2(_where2(ccw, end0, end1))
  ang = phi - jnp.where(ccw, jnp.arcsin(A * z), jnp.arcsin(B * z))
  cos, sin = jnp.cos(ang), jnp.sin(ang)
  pnt = (radius * (cos * vec[0] - sin * vec[1]), radius * (sin * vec[0] + cos * vec[1]))
  mid = _unit2((0.5 * (end0[0] + end1[0]), 0.5 * (end0[1] + end1[1])))
  pnt = _where2(converged, pnt, (mid[0] * radius, mid[1] * radius))
  return jnp.stack([*pnt, ok.astype(radius.dtype)])


@jax.custom_jvp
def _wrap_inside(end0: Vec2, end1: Vec2, radius: jax.Array, inside: jax.Array):
  """Wrap of 2D segments whose sidesite lies inside the geom (wrap_inside), for the spans where
  ``inside`` (n,) bool: the point where the tendon touches the circle (both tangent points)
  and whether it wraps, (n,) as 1.0 or 0.0; the arc length is zero.

  The tendon is pulled onto the circle and touches it at one point, where its two straight
  pieces make equal angles with the radius. Sidesites inside their geoms are rare, and this
  costs more than the rest of a wrap: it runs only where some span of the batch has one
  (``math.run_if``); elsewhere the results are zeros, which the caller does not read.
  Differentiated by its rule below, which runs the same gate."""
  x, y, ok = math.run_if(jnp.any(inside), jnp.zeros((3,) + radius.shape, radius.dtype),
                         _inside_solve, end0, end1, radius, inside)
  return (x, y), ok


@_wrap_inside.defjvp
def _wrap_inside_jvp(primals, tangents):
  end0, end1, radius, inside = primals

  def with_jacobian(x: jax.Array) -> tuple[tuple[Vec2, jax.Array], jax.Array]:
    """The solve at x = [end0, end1, radius] (n, 5) and each span's Jacobian (n, 2, 5): spans
    are independent, so one tangent direction per input component gives it."""
    def solve(x):
      out = _inside_solve((x[:, 0], x[:, 1]), (x[:, 2], x[:, 3]), x[:, 4], inside)
      return out[:2].T, out[2]
    (pnt, ok), linear = jax.linearize(solve, x)
    jacobian = jax.vmap(lambda e: linear(jnp.broadcast_to(e, x.shape))[0], out_axes=-1)(
        jnp.eye(5, dtype=x.dtype))
    return ((pnt[:, 0], pnt[:, 1]), ok), jacobian

  x = jnp.stack([*end0, *end1, radius], -1)
  zero = jnp.zeros_like(radius)
  ((pnt, ok), jacobian) = math.run_if(
      jnp.any(inside), (((zero, zero), zero), jnp.zeros(radius.shape + (2, 5), x.dtype)),
      with_jacobian, x)
  dx = (*tangents[0], *tangents[1], tangents[2])
  dpnt = tuple(sum(jacobian[:, i, j] * dx[j] for j in range(5)) for i in range(2))
  return (pnt, ok), (dpnt, jnp.zeros_like(ok))


# ------------------------------------------------------------------------------------------------
# 3D wrapping (mju_wrap)


def _sphere_plane(p0: jax.Array, p1: jax.Array) -> tuple[jax.Array, jax.Array]:
  """Axes (n, 3) of the plane through the sphere's centre and both sites (mju_wrap)."""
  axis0 = _unit(p0)
  normal = math.cross(p0, p1)
  parallel = math.safe_norm(normal) < _MINVAL
  # parallel sites: any normal; MuJoCo crosses with a 0/1 vector that is 0 at the largest
  # component of axis0
  a = jnp.abs(axis0)
  big_y = (a[:, 1] > a[:, 0]) & (a[:, 1] > a[:, 2])
  big_z = (a[:, 2] > a[:, 0]) & (a[:, 2] > a[:, 1])
  other = jnp.where(big_z[:, None], jnp.array([1.0, 1.0, 0.0], dtype=p0.dtype),
                    jnp.where(big_y[:, None], jnp.array([1.0, 0.0, 1.0], dtype=p0.dtype),
                              jnp.array([0.0, 1.0, 1.0], dtype=p0.dtype)))
  normal = jnp.where(parallel[:, None], _unit(math.cross(axis0, other)), _unit(normal))
  return axis0, _unit(math.cross(normal, axis0))


def _wrap(x0: jax.Array, x1: jax.Array, pos: jax.Array, mat: jax.Array, radius: jax.Array,
          side: jax.Array, has_side: jax.Array, cylinder: np.ndarray):
  """Wraps straight segments x0-x1 around spheres or cylinders (mju_wrap), n at once.

  Args:
    x0, x1: (n, 3) world positions of the sites before and after the geom.
    pos, mat: (n, 3), (n, 3, 3) geom frames; radius: (n,) geom_size[:, 0].
    side: (n, 3) sidesite positions, used where has_side (n,) bool.
    cylinder: (n,) static bool: the geom is a cylinder (else a sphere).
  Returns:
    wlen (n,) length on the geom, t0 and t1 (n, 3) world tangent points, wrapped (n,) bool
    (MuJoCo's wlen >= 0).
  """
  # the three points in the geom's frame by one product (and the tangent points back by one):
  # each use of the frame's rows is a pad and an add in reverse mode, and XLA fuses the wrap's
  # backward pass into them, a slow scalar loop (measured)
  local = math.mat_t_vec(mat[:, None], jnp.stack([x0, x1, side], 1) - pos[:, None])
  # in memory once: the wrap's kernels read its components, and would each recompute it
  local = math.materialize(local)
  p0, p1, s = local[:, 0], local[:, 1], local[:, 2]
  p0c, p1c, sc = (list(math.components(v)) for v in (p0, p1, s))

  def norm3(c: list[jax.Array]) -> jax.Array:   # for comparisons only: no gradient flows
    return jnp.sqrt(c[0] * c[0] + c[1] * c[1] + c[2] * c[2])

  off_centre = (norm3(p0c) >= _MINVAL) & (norm3(p1c) >= _MINVAL)
  # the wrap plane: the cylinder's cross-section, or the plane of the sphere's centre and sites
  if cylinder.all():
    def project(c: list[jax.Array]) -> Vec2:
      return c[0], c[1]

    def lift(q: Vec2) -> list[jax.Array]:
      return [q[0], q[1], jnp.zeros_like(q[0])]
  else:
    sphere0, sphere1 = _sphere_plane(p0, p1)
    axis0 = jnp.where(cylinder[:, None], jnp.array([[1.0, 0.0, 0.0]], p0.dtype), sphere0)
    axis1 = jnp.where(cylinder[:, None], jnp.array([[0.0, 1.0, 0.0]], p0.dtype), sphere1)
    axis0c, axis1c = (math.components(a) for a in (axis0, axis1))

    def project(c: list[jax.Array]) -> Vec2:
      return (sum(ci * ai for ci, ai in zip(c, axis0c)),
              sum(ci * ai for ci, ai in zip(c, axis1c)))

    def lift(q: Vec2) -> list[jax.Array]:
      return [axis0c[i] * q[0] + axis1c[i] * q[1] for i in range(3)]
  end0, end1 = project(p0c), project(p1c)
  # MuJoCo scales the sidesite's direction to the radius, but the wrap reads only the signs of
  # cross products with it; unscaled, the choice needs no divisions
  sd = project(sc)
  sd = _where2(_norm2(sd) < _MINVAL, (1.0, 0.0), sd)

  # behind reads many arrays: fused into the kernels of the choice below, it made one large
  # enough for XLA's CPU backend to split it across threads, which costs more than it saves
  behind = math.materialize(has_side & _behind(sd, end0, end1))
  # the chosen tangent points go to memory once: XLA would otherwise recompute the choice (both
  # candidate pairs, their intersection tests) inside every later kernel that reads them
  wlen, c0, c1, ok = math.materialize(_wrap_circle(end0, end1, sd, has_side, behind, radius))
  inside = has_side & (norm3(sc) < radius)
  # only spans with a sidesite can wrap inside: where that is static, solve only those
  if not isinstance(has_side, np.ndarray) or has_side.all():
    q, ok_inside = _wrap_inside(end0, end1, radius, inside)
  else:
    sub = np.flatnonzero(has_side)
    q, ok_inside = (jnp.zeros_like(radius), jnp.zeros_like(radius)), jnp.zeros_like(radius)
    if sub.size:
      q_sub, ok_sub = _wrap_inside((end0[0][sub], end0[1][sub]), (end1[0][sub], end1[1][sub]),
                                   radius[sub], inside[sub])
      q = (q[0].at[sub].set(q_sub[0]), q[1].at[sub].set(q_sub[1]))
      ok_inside = ok_inside.at[sub].set(ok_sub)
  wlen = jnp.where(inside, 0.0, wlen)
  res0, res1 = lift(_where2(inside, q, c0)), lift(_where2(inside, q, c1))
  wrapped = off_centre & jnp.where(inside, ok_inside > 0, ok)

  if cylinder.any():
    # the tangent points' heights interpolate the sites' along the unrolled path: a helix
    l0 = _norm2((p0c[0] - res0[0], p0c[1] - res0[1]))
    l1 = _norm2((p1c[0] - res1[0], p1c[1] - res1[1]))
    total = l0 + wlen + l1
    rise = p1c[2] - p0c[2]
    z0 = p0c[2] + rise * _safe_div(l0, total)
    z1 = p0c[2] + rise * _safe_div(l0 + wlen, total)
    res0[2] = math.static_where(cylinder, z0, res0[2])
    res1[2] = math.static_where(cylinder, z1, res1[2])
    wlen = math.static_where(cylinder, _norm2((wlen, jnp.abs(z1 - z0))), wlen)
  world = math.mat_vec(mat[:, None], jnp.stack([jnp.stack(res0, -1), jnp.stack(res1, -1)], 1))
  t0, t1 = world[:, 0] + pos, world[:, 1] + pos
  return wlen, t0, t1, wrapped


# ------------------------------------------------------------------------------------------------
# the stage


def _segment_sum(x: jax.Array, ids: np.ndarray, n: int) -> jax.Array:
  return jax.ops.segment_sum(x, jnp.asarray(ids), num_segments=n, indices_are_sorted=True)


def wrap_spans(m: Model, d: Data, path: Path, x0: jax.Array, x1: jax.Array):
  """Wrap length, tangent points and wrapped flag of every span (zeros/False for site-site).

  All spans with a geom, spheres and cylinders together, are wrapped in one vectorised call:
  one program for both types compiles faster than one per type and costs a few extra
  elementwise operations.
  """
  nspan = x0.shape[0]
  k = np.flatnonzero(path.span_geom >= 0)
  if not k.size:
    return jnp.zeros(nspan, dtype=x0.dtype), x0, x1, jnp.zeros(nspan, dtype=bool)
  g = path.span_geom[k]
  wrap = path.span_wrap[k]
  prm = m.wrap_prm[wrap]
  xp = np if isinstance(prm, np.ndarray) else jnp    # a static sidesite table, or a traced one
  sideid = xp.round(prm).astype(np.int32)
  side = d.site_xpos[xp.clip(sideid, 0, m.nsite - 1)]
  w, p0, p1, ok = _wrap(x0[k], x1[k], d.geom_xpos[g], d.geom_xmat[g], m.geom_size[g, 0], side,
                        sideid >= 0, m.wrap_type[wrap] == WrapType.CYLINDER)
  wlen = jnp.zeros(nspan, dtype=x0.dtype).at[k].set(w)
  return (wlen, x0.at[k].set(p0), x1.at[k].set(p1),
          jnp.zeros(nspan, dtype=bool).at[k].set(ok))


def _path_points(m: Model, path: Path, points: jax.Array, wrapped: jax.Array):
  """ten_wrapadr, ten_wrapnum (ntendon,), wrap_obj (nwrap, 2), wrap_xpos (nwrap, 6).

  Only the tangent points come and go, two at a time with their span's wrap: a point's row is
  its static position less twice the number of absent pairs before it, a running count over
  the wrapping spans rather than over all points (XLA's CPU backend runs a cumulative sum in
  time quadratic in its length)."""
  npoint = path.point_ten.size
  first = np.flatnonzero(np.diff(path.point_cond, prepend=-1) > 0)      # each pair's T0
  before = np.searchsorted(first + 1, np.arange(npoint), side="left")   # pairs ended before
  absent = (~wrapped[path.point_cond[first]]).astype(jnp.int32)
  gone = jnp.concatenate([jnp.zeros(1, jnp.int32), jnp.cumsum(absent)])  # absent among the first k
  present = jnp.where(path.point_cond >= 0, wrapped[np.maximum(path.point_cond, 0)], True)
  slot = jnp.where(present, np.arange(npoint, dtype=np.int32) - 2 * math.take(gone, before),
                   2 * m.nwrap)
  xpos = jnp.zeros((2 * m.nwrap, 3), dtype=points.dtype)
  xpos = xpos.at[slot].set(points[path.point_src], mode="drop")
  obj = jnp.zeros(2 * m.nwrap, dtype=jnp.int32).at[slot].set(
      jnp.asarray(path.point_obj), mode="drop")
  # per tendon: its points are contiguous in emission order, and so are its pairs
  ten = np.arange(m.ntendon)
  start = np.searchsorted(path.point_ten, ten, side="left").astype(np.int32)
  end = np.searchsorted(path.point_ten, ten, side="right").astype(np.int32)
  pair_ten = path.point_ten[first]
  pstart = np.searchsorted(pair_ten, ten, side="left")
  pend = np.searchsorted(pair_ten, ten, side="right")
  gone_start, gone_end = math.take(gone, pstart), math.take(gone, pend)
  wrapadr = start - 2 * gone_start
  wrapnum = end - start - 2 * (gone_end - gone_start)
  return wrapadr, wrapnum, obj.reshape(m.nwrap, 2), xpos.reshape(m.nwrap, 6)


def tendon(m: Model, d: Data) -> Data:
  """Computes ten_length (ntendon,) m, ten_J (ntendon, nv), ten_wrapadr, ten_wrapnum, wrap_obj
  (nwrap, 2) and wrap_xpos (nwrap, 6) m (mj_tendon).

  Needs kinematics (site and geom frames) and com_pos (cdof and subtree_com, for the Jacobians).
  """
  if not m.ntendon:
    return d
  with jax.named_scope("tendon"):
    path = path_of(m)
    dtype = d.qpos.dtype
    length = jnp.zeros(m.ntendon, dtype=dtype)
    ten_J = jnp.zeros((m.ntendon, m.nv), dtype=dtype)

    if path.jnt_ten.size:
      coef = m.wrap_prm[path.jnt_wrap]
      length = length + _segment_sum(coef * d.qpos[path.jnt_qposadr], path.jnt_ten, m.ntendon)
      ten_J = ten_J.at[path.jnt_ten, path.jnt_dofadr].add(coef)

    wrapadr = jnp.zeros(m.ntendon, dtype=jnp.int32)
    wrapnum = jnp.zeros(m.ntendon, dtype=jnp.int32)
    wrap_obj = jnp.zeros((m.nwrap, 2), dtype=jnp.int32)
    wrap_xpos = jnp.zeros((m.nwrap, 6), dtype=dtype)
    if path.span_ten.size:
      x0, x1 = d.site_xpos[path.span_site0], d.site_xpos[path.span_site1]
      wlen, t0, t1, wrapped = wrap_spans(m, d, path, x0, x1)
      divisor = jnp.where(path.span_pulley >= 0, m.wrap_prm[np.maximum(path.span_pulley, 0)], 1.0)

      around = math.safe_norm(t0 - x0) + wlen + math.safe_norm(x1 - t1)
      span_length = jnp.where(wrapped, around, math.safe_norm(x1 - x0)) / divisor
      length = length + _segment_sum(span_length, path.span_ten, m.ntendon)

      points = jnp.concatenate([jnp.stack([x0, t0, t1, x1], axis=1).reshape(-1, 3),
                                jnp.zeros((1, 3), dtype=dtype)])
      if path.seg_span.size:
        ends = points[path.seg_src]                                   # (nseg, 2, 3)
        used = wrapped[path.seg_span] == path.seg_wrapped
        scale = jnp.where(used, 1.0 / divisor[path.seg_span], 0.0)
        # a piece's length changes at unit . (end 1's velocity - end 0's); stacked rather than
        # broadcast against (-1, 1), whose reverse mode would be a slow reduction
        pull = scale[:, None] * _unit(ends[:, 1] - ends[:, 0])
        pull = jnp.stack([-pull, pull], axis=1).reshape(-1, 3)        # (2 nseg, 3)
        ends, body = ends.reshape(-1, 3), path.seg_body.reshape(-1)
        ten = np.repeat(path.span_ten[path.seg_span], 2)
        mobile = m.body_dof[body].any(axis=1)                         # ends that can move
        if mobile.any():
          keep = slice(None) if mobile.all() else np.flatnonzero(mobile)
          rows = kinematics.jac_along(m, d, ends[keep], body[keep], pull[keep])
          ten_J = ten_J + _segment_sum(rows, ten[keep], m.ntendon)
      wrapadr, wrapnum, wrap_obj, wrap_xpos = _path_points(m, path, points, wrapped)
  return d.replace(ten_length=length, ten_J=ten_J, ten_wrapadr=wrapadr, ten_wrapnum=wrapnum,
                   wrap_obj=wrap_obj, wrap_xpos=wrap_xpos)


def tendon_velocity(m: Model, d: Data) -> Data:
  """Computes ten_velocity = ten_J qvel (ntendon,) m/s (as mj_fwdVelocity)."""
  if not m.ntendon:
    return d
  with jax.named_scope("tendon_velocity"):
    return d.replace(ten_velocity=d.ten_J @ d.qvel)
