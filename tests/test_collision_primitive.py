"""Primitive narrow-phase colliders against MuJoCo's mjc_* collision functions.

Each type pair gets a two-geom scene (a mocap plane or a free body, and a free body); random and
degenerate poses and margins go through MuJoCo's mj_kinematics + mj_collision, and the collider,
vmapped over all samples in one jitted call, must reproduce d.contact in count, order, dist, pos
and frame.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest

from flexor import collision
from flexor import collision_primitive as cp
from flexor.mjcf.from_mujoco import from_mujoco
from flexor.types import GeomType as G

# float64 against MuJoCo's doubles: only the summation order differs, errors are ~1e-15 of the
# geometry; 1e-9 (m, or dimensionless for frames) leaves room for ill-conditioned segment solves.
TOL = 1e-9
# float32: rounding of ~1e-7 amplified by the same solves
TOL32 = 1e-4

_NAME = {G.PLANE: "plane", G.SPHERE: "sphere", G.CAPSULE: "capsule", G.ELLIPSOID: "ellipsoid",
         G.CYLINDER: "cylinder", G.BOX: "box", G.MESH: "mesh"}

# The mesh of the mesh pairs: a 12-sided prism (radius 0.08, half-height 0.05), so that the
# plane-mesh collider meets hill climbing (over 9 vertices), polygons of more than 4 vertices and
# exact ties (flat poses).
_PRISM = " ".join(f"{0.08 * math.cos(a):.6f} {0.08 * math.sin(a):.6f} {z}"
                  for a in np.linspace(0, 2 * math.pi, 13)[:-1] for z in (-0.05, 0.05))

# geom sizes per pair: (size1, size2), each (3,) as Model.geom_size
_SIZES = {
    (G.PLANE, G.SPHERE): ([1, 1, 1], [0.1, 0, 0]),
    (G.PLANE, G.CAPSULE): ([1, 1, 1], [0.1, 0.2, 0]),
    (G.PLANE, G.ELLIPSOID): ([1, 1, 1], [0.1, 0.2, 0.05]),
    (G.PLANE, G.CYLINDER): ([1, 1, 1], [0.1, 0.2, 0]),
    (G.PLANE, G.BOX): ([1, 1, 1], [0.1, 0.2, 0.15]),
    (G.PLANE, G.MESH): ([1, 1, 1], [0.08, 0.08, 0.05]),  # for placing poses only
    (G.SPHERE, G.SPHERE): ([0.1, 0, 0], [0.15, 0, 0]),
    (G.SPHERE, G.CAPSULE): ([0.1, 0, 0], [0.1, 0.2, 0]),
    (G.SPHERE, G.CYLINDER): ([0.1, 0, 0], [0.12, 0.2, 0]),
    (G.SPHERE, G.BOX): ([0.1, 0, 0], [0.1, 0.2, 0.15]),
    (G.CAPSULE, G.CAPSULE): ([0.1, 0.2, 0], [0.08, 0.25, 0]),
    (G.CAPSULE, G.BOX): ([0.05, 0.2, 0], [0.1, 0.2, 0.15]),
    (G.BOX, G.BOX): ([0.1, 0.15, 0.05], [0.12, 0.08, 0.2]),
}
PAIRS = list(_SIZES)
N_SAMPLES = 400  # random poses per pair (plus the degenerate ones)


@functools.cache
def _model(t1: G, t2: G) -> mujoco.MjModel:
  size1, size2 = _SIZES[(t1, t2)]
  geom1 = f'<geom type="{_NAME[t1]}" size="{" ".join(map(str, size1))}"/>'
  geom2 = f'<geom type="{_NAME[t2]}" size="{" ".join(map(str, size2))}"/>'
  if t2 == G.MESH:
    geom2 = '<geom type="mesh" mesh="prism"/>'
  body1 = (f'<body mocap="true">{geom1}</body>' if t1 == G.PLANE
           else f'<body><freejoint/>{geom1}</body>')
  xml = f"""<mujoco><option><flag gravity="disable"/></option>
    <asset><mesh name="prism" vertex="{_PRISM}"/></asset><worldbody>
    {body1}<body><freejoint/>{geom2}</body></worldbody></mujoco>"""
  return mujoco.MjModel.from_xml_string(xml)


@functools.cache
def _hulls(t1: int, t2: int) -> cp.Hulls:
  """The hull tables of the pair's model (_model; its only mesh is geom 1's), from MuJoCo's
  compiled mesh tables."""
  return collision.hulls(from_mujoco(_model(G(t1), G(t2))))


def _collider(t1: int, t2: int) -> cp.Collider:
  """The pair's collider with the common signature; a mesh collider gets _hulls', in the
  inputs' float dtype, and mesh 0."""
  collide = cp.COLLIDERS[(t1, t2)]
  if t2 != G.MESH:
    return collide
  hulls = _hulls(t1, t2)

  def with_hulls(*args):
    dtype = args[0].dtype
    return collide(*args, jnp.zeros((), jnp.int32),
                   hulls._replace(vert=hulls.vert.astype(dtype),
                                  normal=hulls.normal.astype(dtype)))
  return with_hulls


def _rand_quat(rng: np.random.Generator) -> np.ndarray:
  q = rng.normal(size=4)
  return q / np.linalg.norm(q)


def _axis_quat(rng: np.random.Generator) -> np.ndarray:
  """A rotation mapping box axes onto box axes (multiple of 90 degrees)."""
  quats = [[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1], [1, 1, 0, 0], [1, 0, 1, 0],
           [1, 0, 0, 1], [1, -1, 0, 0], [0, 1, 1, 0], [1, 1, 1, 1], [1, -1, 1, -1]]
  q = np.array(quats[rng.integers(len(quats))], float)
  return q / np.linalg.norm(q)


def _poses(rng: np.random.Generator, t1: G, t2: G, n: int):
  """n poses (pos1, quat1, pos2, quat2): random ones near contact, then degenerate ones."""
  size1, size2 = np.array(_SIZES[(t1, t2)], float)
  reach = (0 if t1 == G.PLANE else np.linalg.norm(size1)) + np.linalg.norm(size2) + 0.05
  out = []
  for k in range(n):
    kind = k % 5
    q1 = _rand_quat(rng) if kind < 3 else _axis_quat(rng)
    q2 = _rand_quat(rng) if kind < 2 else _axis_quat(rng)
    if t1 == G.PLANE:
      p1 = np.zeros(3)
      q1 = _rand_quat(rng) if kind < 4 else np.array([1.0, 0, 0, 0])
      mat = np.zeros(9)
      mujoco.mju_quat2Mat(mat, q1)
      normal = mat.reshape(3, 3)[:, 2]
      p2 = rng.uniform(-0.3, 0.3, 3)
      p2 += normal * (rng.uniform(-0.8, 1.1) * reach - normal @ p2)
    else:
      p1 = rng.uniform(-0.1, 0.1, 3)
      step = rng.uniform(0, 1.1) * reach
      if kind == 4:  # exact offsets along an axis: faces, edges and ends that line up
        d = np.zeros(3)
        d[rng.integers(3)] = rng.choice([-1, 1])
        step = np.round(step, 2)
      else:
        d = rng.normal(size=3)
        d /= np.linalg.norm(d)
      p2 = p1 + d * step
    out.append((p1, q1, p2, q2))
  # degenerate: coincident centres, same and perpendicular orientations
  ident = np.array([1.0, 0, 0, 0])
  quarter = np.array([1.0, 1, 0, 0]) / np.sqrt(2)
  for q2 in (ident, quarter):
    p = np.zeros(3) if t1 != G.PLANE else np.array([0.0, 0, 0.05])
    out.append((np.zeros(3), ident, p, q2))
  if t1 != G.PLANE:  # aligned frames, centres offset along axes and onto edges and corners
    flip = np.array([0.0, 1, 0, 0])
    for q2 in (ident, flip):
      for off in ([0, 0, 0.1], [0.1, 0, 0], [size2[0] + size1[0], 0, 0],
                  [0, 0, size2[2] + size1[0]], [size1[0] + size2[0], size2[1], size2[2]]):
        out.append((np.zeros(3), ident, np.array(off, float), q2))
  if t1 == G.PLANE:  # resting exactly on the plane, and lifted to within / beyond margins
    for h in (0.0, 0.01, 0.03, 0.2):
      height = (size2[2] if t2 == G.BOX else size2[0] + (size2[1] if t2 == G.CAPSULE else 0))
      height = size2[1] if t2 == G.CYLINDER else height
      out.append((np.zeros(3), ident, np.array([0.1, 0.2, height + h]), ident))
      out.append((np.zeros(3), ident, np.array([0.1, 0.2, size2[0] + h]), quarter))
  if t1 == G.CAPSULE:  # parallel and anti-parallel capsule / box axes, offset sideways
    flip = np.array([0.0, 1, 0, 0])
    for off in ([0.12, 0, 0], [0.1, 0.05, 0.3], [0.0, 0.15, 0.1], [0.0, 0.0, 0.0], [0.1, 0.1, 0.5],
                [0.14, 0.0, 0.0]):
      for q2 in (ident, flip):
        out.append((np.zeros(3), ident, np.array(off), q2))
  return out


@functools.cache
def _mujoco_contacts(t1: G, t2: G, n: int, seed: int):
  """Collider inputs and MuJoCo's contacts for n random poses (plus degenerate ones)."""
  m = _model(t1, t2)
  d = mujoco.MjData(m)
  rng = np.random.default_rng(seed)
  margins = [(0.0, 0.0), (0.0, 0.0), (0.02, 0.0), (0.05, 0.02), (0.1, 0.0)]
  inputs, expect = [], []
  for k, (p1, q1, p2, q2) in enumerate(_poses(rng, t1, t2, n)):
    margin, gap = margins[k % len(margins)]
    m.geom_margin[:] = [0.0, margin]
    m.geom_gap[:] = [gap, 0.0]
    if t1 == G.PLANE:
      d.mocap_pos[0], d.mocap_quat[0] = p1, q1
      d.qpos[:] = np.concatenate([p2, q2])
    else:
      d.qpos[:] = np.concatenate([p1, q1, p2, q2])
    mujoco.mj_kinematics(m, d)
    mujoco.mj_collision(m, d)
    inputs.append((d.geom_xpos[0].copy(), d.geom_xmat[0].reshape(3, 3).copy(),
                   m.geom_size[0].copy(), d.geom_xpos[1].copy(),
                   d.geom_xmat[1].reshape(3, 3).copy(), m.geom_size[1].copy(),
                   (m.geom_margin[0] + m.geom_margin[1]) + (m.geom_gap[0] + m.geom_gap[1])))
    cons = [d.contact[i] for i in range(d.ncon)]
    assert all(list(c.geom) == [0, 1] for c in cons)
    expect.append([(c.dist, c.pos.copy(), c.frame.reshape(3, 3).copy()) for c in cons])
  args = [np.stack([x[i] for x in inputs]) for i in range(7)]
  return args, expect


@functools.cache
def _batched(t1: int, t2: int, with_grad: bool = True):
  """jit(vmap) of the collider, with_grad also returning the gradient w.r.t. pos1 of the sum of
  all its outputs (one compilation serves the conformance and the gradient checks)."""
  collider = _collider(t1, t2)
  if not with_grad:
    return jax.jit(jax.vmap(collider))

  def total(pos1, *rest):
    dist, pos, frame, exist = collider(pos1, *rest)
    loss = jnp.sum(jnp.where(exist, dist, 0.0)) + jnp.sum(dist) + jnp.sum(pos) + jnp.sum(frame)
    return loss, (dist, pos, frame, exist)

  def run(*args):
    grad, out = jax.grad(total, has_aux=True)(*args)
    return (*out, grad)
  return jax.jit(jax.vmap(run))


@pytest.mark.parametrize("pair", PAIRS, ids=lambda p: f"{_NAME[p[0]]}-{_NAME[p[1]]}")
def test_matches_mujoco(pair):
  t1, t2 = pair
  args, expect = _mujoco_contacts(t1, t2, N_SAMPLES, seed=int(t1) * 10 + int(t2))
  dist, pos, frame, exist, grad = map(np.asarray, _batched(int(t1), int(t2))(*args))
  assert np.all(np.isfinite(grad)), f"non-finite gradient at {np.nonzero(~np.isfinite(grad))[0]}"
  k = cp.MAX_CONTACTS[(int(t1), int(t2))]
  assert dist.shape == (len(expect), k) and frame.shape == (len(expect), k, 3, 3)
  counts = np.array([len(e) for e in expect])
  assert counts.max() <= k
  assert counts.min() == 0 and counts.max() > 0, "samples must cover contact and no contact"
  bad = np.nonzero(exist.sum(1) != counts)[0]
  assert bad.size == 0, (f"contact count differs at samples {bad[:10]}: "
                         f"{exist.sum(1)[bad[:10]]} vs {counts[bad[:10]]}")
  assert np.all(exist == (np.arange(k)[None, :] < counts[:, None])), "produced contacts come first"
  err = 0.0
  for s, cons in enumerate(expect):
    for j, (cd, cpos, cframe) in enumerate(cons):
      e = max(abs(dist[s, j] - cd), np.abs(pos[s, j] - cpos).max(),
              np.abs(frame[s, j] - cframe).max())
      assert e < TOL, (f"sample {s} contact {j}: dist {dist[s, j]} vs {cd}, pos {pos[s, j]} vs "
                       f"{cpos}, frame {frame[s, j]} vs {cframe}")
      err = max(err, e)
  print(f"{_NAME[t1]}-{_NAME[t2]}: {sum(counts)} contacts, max error {err:.2e}")


@pytest.mark.parametrize("pair", PAIRS, ids=lambda p: f"{_NAME[p[0]]}-{_NAME[p[1]]}")
def test_float32_and_batching(pair):
  """Samples of a vmap do not interact; float32 inputs give float32 outputs that agree with
  float64 except where rounding flips a discrete choice (a marginal
  contact, a tie between branches, a frame at coincident centres)."""
  t1, t2 = int(pair[0]), int(pair[1])
  args, _ = _mujoco_contacts(pair[0], pair[1], N_SAMPLES, seed=t1 * 10 + t2)
  perm = np.random.default_rng(0).permutation(len(args[0]))
  out64 = [np.asarray(o) for o in _batched(t1, t2)(*args)]
  for b, p in zip(out64, _batched(t1, t2)(*(a[perm] for a in args))):
    np.testing.assert_array_equal(b[perm], np.asarray(p))

  out32 = _batched(t1, t2, with_grad=False)(*(a.astype(np.float32) for a in args))
  assert all(o.dtype in (jnp.float32, jnp.bool_) for o in out32)
  out32 = [np.asarray(o) for o in out32]
  assert np.mean(out64[3] == out32[3]) > 0.97
  # each float32 contact against the nearest float64 contact of its sample (clipping may start
  # a box-box polygon at another vertex)
  flat = lambda out: np.concatenate([o.reshape(o.shape[:2] + (-1,)) for o in out[:3]], axis=-1)
  f64, f32 = flat(out64), flat(out32)
  diff = np.abs(f32[:, :, None, :] - f64[:, None, :, :]).max(-1)  # (batch, K32, K64)
  diff = np.where(out64[3][:, None, :], diff, np.inf).min(-1)
  exist = out64[3] & out32[3]
  assert np.mean(diff[exist] < TOL32) > 0.9


def test_vmap_equals_single():
  """The jitted vmap equals jitted unbatched calls, sample by sample."""
  pair = (int(G.PLANE), int(G.BOX))
  args, _ = _mujoco_contacts(G.PLANE, G.BOX, N_SAMPLES, seed=int(G.BOX))
  batched = _batched(*pair)(*args)
  single = jax.jit(_collider(*pair))
  for s in range(0, len(args[0]), 40):
    for b, x in zip(batched, single(*(a[s] for a in args))):
      np.testing.assert_allclose(np.asarray(b[s]), np.asarray(x), rtol=0, atol=1e-12)


#------------------------------------ finiteness of values and gradients ---------------------------

N_ROBUST = 1000  # configurations per pair in the finiteness test
_ROBUST_KINDS = ("separated", "near", "coincident", "coincident-aligned", "parallel",
                 "antiparallel", "axis-aligned", "on-axis", "extreme-sizes", "zero")


def _axis_rotations() -> np.ndarray:
  """The 24 proper rotations that map coordinate axes onto coordinate axes, (24, 3, 3), exact."""
  out = []
  for perm in ((0, 1, 2), (1, 2, 0), (2, 0, 1), (0, 2, 1), (2, 1, 0), (1, 0, 2)):
    for signs in np.ndindex(2, 2, 2):
      m = np.zeros((3, 3))
      m[np.arange(3), perm] = np.where(np.array(signs) == 1, -1.0, 1.0)
      if np.linalg.det(m) > 0:
        out.append(m)
  return np.array(out)


def _rand_mat(rng: np.random.Generator) -> np.ndarray:
  q = _rand_quat(rng)
  m = np.zeros(9)
  mujoco.mju_quat2Mat(m, q)
  return m.reshape(3, 3)


def _rand_size(rng: np.random.Generator, t: G, lo: float, hi: float) -> np.ndarray:
  s = np.exp(rng.uniform(np.log(lo), np.log(hi), 3))
  if t in (G.SPHERE,):
    s[1:] = 0.0
  elif t in (G.CAPSULE, G.CYLINDER):
    s[2] = 0.0
  elif t == G.PLANE:
    s[:] = 1.0
  return s


def _reach(t: G, size: np.ndarray) -> float:
  """Bounding radius of a geom (0 for a plane); size (3,) or (3, N)."""
  if t == G.PLANE:
    return 0.0 * size[0]
  if t == G.MESH:  # the prism, whatever the size
    return 0.0 * size[0] + math.hypot(0.08, 0.05)
  if t == G.SPHERE:
    return size[0]
  if t in (G.CAPSULE, G.CYLINDER):
    return size[0] + size[1]
  return np.linalg.norm(size, axis=0)


def _robust_configs(t1: G, t2: G, n: int, seed: int):
  """n collider inputs (stacked) and each one's kind index into _ROBUST_KINDS: random separated
  and touching poses, coincident centres, (anti-)parallel axes, axis-aligned poses with faces,
  edges and corners exactly touching, offsets exactly along an axis, tiny to large sizes, and
  everything at the origin with identity rotations."""
  rng = np.random.default_rng(seed)
  rots = _axis_rotations()
  flips = np.array([np.diag([1.0, -1.0, -1.0]), np.diag([-1.0, 1.0, -1.0]),
                    np.diag([-1.0, -1.0, 1.0])])
  inputs, kinds = [], []
  for k in range(n):
    kind = k % len(_ROBUST_KINDS)
    name = _ROBUST_KINDS[kind]
    lo, hi = (1e-6, 1e2) if name == "extreme-sizes" else (0.02, 0.5)
    s1, s2 = _rand_size(rng, t1, lo, hi), _rand_size(rng, t2, lo, hi)
    r1, r2 = _reach(t1, s1), _reach(t2, s2)
    reach = r1 + r2
    p1 = rng.uniform(-1, 1, 3) if rng.uniform() < 0.5 else np.zeros(3)
    m1 = _rand_mat(rng) if rng.uniform() < 0.5 else rots[rng.integers(24)]
    m2 = _rand_mat(rng)
    d = rng.normal(size=3)
    d /= np.linalg.norm(d)
    if t1 == G.PLANE:  # offsets along the plane normal matter
      d = m1[:, 2] * rng.choice([-1.0, 1.0]) if rng.uniform() < 0.5 else d
    if name == "separated":
      off = d * (reach * rng.uniform(1.05, 3.0) + rng.uniform(0.01, 1.0))
    elif name in ("near", "extreme-sizes"):
      off = d * reach * rng.uniform(0.0, 1.1)
    elif name == "coincident":
      off = np.zeros(3)
      m2 = m1 if rng.uniform() < 0.3 else m2
    elif name == "coincident-aligned":
      off = np.zeros(3)
      m2 = m1 @ flips[rng.integers(3)] if rng.uniform() < 0.5 else m1
    elif name in ("parallel", "antiparallel"):
      m2 = m1 if name == "parallel" else m1 @ flips[rng.integers(3)]
      if rng.uniform() < 0.5:  # exactly along or across the common axes
        off = m1 @ (np.round(rng.uniform(-1, 1, 3) * reach, 2) * (rng.uniform(size=3) < 0.5))
      else:
        off = d * reach * rng.uniform(0.0, 1.2)
    elif name == "axis-aligned":
      m1, m2 = rots[rng.integers(24)], rots[rng.integers(24)]
      # faces (one axis), edges (two) or corners (three) exactly touching, or overlapping
      ext1 = np.abs(m1) @ (s1 if t1 != G.PLANE else np.zeros(3))
      ext2 = np.abs(m2) @ s2
      mask = rng.uniform(size=3) < 0.5
      off = np.where(mask, rng.choice([-1.0, 1.0], 3) * (ext1 + ext2), 0.0)
      off *= rng.choice([1.0, 1.0, 0.5, 0.0])
      p1 = np.round(p1, 1)
    elif name == "on-axis":
      m = m1 if rng.uniform() < 0.5 else m2
      off = m[:, rng.integers(3)] * rng.choice([-1.0, 1.0]) * reach * rng.choice([0.0, 0.5, 1.0,
                                                                                    2.0])
      m2 = m2 if rng.uniform() < 0.5 else m1
    else:  # "zero": origin, identity rotations, unit, tiny or zero sizes
      p1, off = np.zeros(3), np.zeros(3)
      m1 = m2 = np.eye(3)
      scale = rng.choice([0.0, 1e-9, 1.0])
      s1, s2 = s1 * scale if t1 != G.PLANE else s1, s2 * scale
    if name == "extreme-sizes" and rng.uniform() < 0.3:  # a zero radius, half-length or side
      (s1 if t1 != G.PLANE and rng.uniform() < 0.5 else s2)[rng.integers(2)] = 0.0
    margin = rng.choice([0.0, 0.0, 0.01, 0.1])
    inputs.append((p1, m1, s1, p1 + off, m2, s2, margin))
    kinds.append(kind)
  args = [np.stack([x[i] for x in inputs]).astype(np.float64) for i in range(7)]
  return args, np.array(kinds)


@functools.cache
def _value_and_vjp(t1: int, t2: int):
  """jit(vmap) of the collider and the gradients w.r.t. all 7 inputs of a weighted sum of dist,
  pos and frame over all slots and over the existing slots only (one vjp, two cotangents)."""
  collider = _collider(t1, t2)

  def run(args, w):
    def f(*a):
      dist, pos, frame, exist = collider(*a)
      return (dist, pos, frame), exist
    out, vjp, exist = jax.vjp(f, *args, has_aux=True)
    masked = tuple(jnp.where(exist.reshape(exist.shape + (1,) * (x.ndim - 1)), x, 0.0) for x in w)
    grads = jax.vmap(vjp)(jax.tree.map(lambda a, b: jnp.stack([a, b]), w, masked))
    return out, exist, jax.tree.map(lambda g: g[0], grads), jax.tree.map(lambda g: g[1], grads)
  return jax.jit(jax.vmap(run, (0, None)))


@pytest.mark.parametrize("pair", PAIRS, ids=lambda p: f"{_NAME[p[0]]}-{_NAME[p[1]]}")
def test_finite_values_and_gradients(pair):
  """No NaN or inf in any output slot (existing or not) or in the gradient of a random weighted
  sum of the outputs w.r.t. positions, rotations, sizes and margin, over N_ROBUST random and
  degenerate configurations per pair."""
  t1, t2 = int(pair[0]), int(pair[1])
  args, kinds = _robust_configs(pair[0], pair[1], N_ROBUST, seed=100 + t1 * 10 + t2)
  k = cp.MAX_CONTACTS[(t1, t2)]
  rng = np.random.default_rng(t1 * 10 + t2)
  w = (rng.normal(size=k), rng.normal(size=(k, 3)), rng.normal(size=(k, 3, 3)))
  (dist, pos, frame), exist, g_all, g_exist = jax.tree.map(
      np.asarray, _value_and_vjp(t1, t2)(tuple(args), w))
  assert exist.any() and not exist.all(), "configurations must cover contact and no contact"
  names = ("pos1", "mat1", "size1", "pos2", "mat2", "size2", "margin")
  checks = [("dist", dist), ("pos", pos), ("frame", frame)]
  checks += [(f"d/d{n} (all slots)", g) for n, g in zip(names, g_all)]
  checks += [(f"d/d{n} (existing slots)", g) for n, g in zip(names, g_exist)]
  failures = []
  for label, x in checks:
    bad = ~np.isfinite(x.reshape(x.shape[0], -1)).all(axis=1)
    if bad.any():
      failures.append(f"{label}: {bad.sum()} configs, kinds "
                      f"{sorted({_ROBUST_KINDS[i] for i in kinds[bad]})}, "
                      f"e.g. {np.nonzero(bad)[0][:5]}")
  assert not failures, "\n".join(failures)


def _point_distance(t: G, p: np.ndarray, pos: np.ndarray, mat: np.ndarray,
                    size: np.ndarray) -> np.ndarray:
  """Distance from points p (N, 3) outside geoms of type t (poses (N, 3), (N, 3, 3), sizes
  (N, 3)) to the geoms' surfaces."""
  loc = np.einsum("nji,nj->ni", mat, p - pos)
  if t == G.SPHERE:
    return np.linalg.norm(loc, axis=1) - size[:, 0]
  if t == G.CAPSULE:
    loc[:, 2] -= np.clip(loc[:, 2], -size[:, 1], size[:, 1])
    return np.linalg.norm(loc, axis=1) - size[:, 0]
  if t == G.CYLINDER:
    dx = np.maximum(np.linalg.norm(loc[:, :2], axis=1) - size[:, 0], 0)
    dz = np.maximum(np.abs(loc[:, 2]) - size[:, 1], 0)
    return np.hypot(dx, dz)
  return np.linalg.norm(loc - np.clip(loc, -size, size), axis=1)  # box


def _reference_distance(t1: G, t2: G, args: list[np.ndarray]) -> np.ndarray:
  """Exact signed distances (N,) of separated pairs, NaN for box-box."""
  p1, m1, s1, p2, m2, s2, _ = args
  if t1 == G.PLANE:  # height of geom 2's centre minus its support along -normal
    n = m1[:, :, 2]
    c = np.abs(np.einsum("ni,nij->nj", n, m2))  # |normal . axis j of geom 2|
    support = {G.SPHERE: s2[:, 0], G.CAPSULE: s2[:, 0] + s2[:, 1] * c[:, 2],
               G.CYLINDER: s2[:, 1] * c[:, 2] + s2[:, 0] * np.sqrt(np.maximum(1 - c[:, 2]**2, 0)),
               G.BOX: np.sum(s2 * c, axis=1),
               G.ELLIPSOID: np.linalg.norm(s2 * c, axis=1),
               G.MESH: np.max(np.einsum("ni,nij,vj->nv", -n, m2, _prism_vert()), axis=1)}[t2]
    return np.einsum("ni,ni->n", n, p2 - p1) - support
  if t1 == G.SPHERE:
    return _point_distance(t2, p1, p2, m2, s2) - s1[:, 0]
  if t1 == G.CAPSULE:  # the distance to a convex set is convex along the segment: ternary search
    lo, hi = -s1[:, 1], s1[:, 1].copy()
    f = lambda x: _point_distance(t2, p1 + m1[:, :, 2] * x[:, None], p2, m2, s2)
    for _ in range(100):
      a, b = lo + (hi - lo) / 3, hi - (hi - lo) / 3
      left = f(a) < f(b)
      lo, hi = np.where(left, lo, a), np.where(left, b, hi)
    return f((lo + hi) / 2) - s1[:, 0]
  return np.full(len(p1), np.nan)


def _prism_vert() -> np.ndarray:
  """The prism's vertices (24, 3) in its mesh frame."""
  return _model(G.PLANE, G.MESH).mesh_vert.astype(np.float64)


def _separated_configs(t1: G, t2: G, n: int, seed: int):
  """n random pairs separated by 0.001 to 1 (m) beyond their bounding spheres, margin 0."""
  rng = np.random.default_rng(seed)
  inputs = []
  for _ in range(n):
    s1, s2 = _rand_size(rng, t1, 0.02, 0.5), _rand_size(rng, t2, 0.02, 0.5)
    m1, m2 = _rand_mat(rng), _rand_mat(rng)
    p1 = rng.uniform(-1, 1, 3)
    d = rng.normal(size=3)
    d /= np.linalg.norm(d)
    if t1 == G.PLANE:  # above the plane
      d = m1[:, 2] + 0.5 * d
    gap = np.exp(rng.uniform(np.log(1e-3), 0.0))
    off = d * (_reach(t1, s1) + _reach(t2, s2) + gap) / (d @ m1[:, 2] if t1 == G.PLANE else 1.0)
    inputs.append((p1, m1, s1, p1 + off, m2, s2, 0.0))
  return [np.stack([x[i] for x in inputs]).astype(np.float64) for i in range(7)]


@functools.cache
def _value_and_jvp(t1: int, t2: int):
  """jit(vmap) of the collider and its directional derivative."""
  collider = _collider(t1, t2)
  return jax.jit(jax.vmap(lambda args, tangents: jax.jvp(collider, args, tangents)))


@pytest.mark.parametrize("pair", PAIRS, ids=lambda p: f"{_NAME[p[0]]}-{_NAME[p[1]]}")
def test_separated_inactive_slots(pair):
  """Beyond the margin no contact exists, and every slot holds a real signed distance, not a
  sentinel: positive, at least the pair's distance, the first slot that distance itself
  (except box-box), and differentiable: the directional derivative matches central differences
  along a random motion of both geoms (translation and rotation)."""
  t1, t2 = int(pair[0]), int(pair[1])
  n = 200
  args = _separated_configs(pair[0], pair[1], n, seed=200 + t1 * 10 + t2)
  rng = np.random.default_rng(300 + t1 * 10 + t2)
  skew = lambda w: np.cross(w[:, None, :], -np.eye(3)[None])  # skew(w) @ v = w x v, (N, 3, 3)
  tangents = [np.zeros_like(a) for a in args]
  for i in (0, 3):  # translation, and rotation d(mat) = skew(w) mat
    tangents[i] = rng.normal(size=(n, 3))
    tangents[i + 1] = skew(rng.normal(size=(n, 3))) @ args[i + 1]
  (dist, pos, frame, exist), (ddist, *_) = jax.tree.map(
      np.asarray, _value_and_jvp(t1, t2)(tuple(args), tuple(tangents)))
  assert not exist.any()
  assert np.isfinite(dist).all() and np.isfinite(pos).all() and np.isfinite(frame).all()
  assert (dist > 0).all(), f"non-positive distance at {np.nonzero((dist <= 0).any(1))[0][:5]}"
  p1, p2 = args[0], args[3]
  lower = np.linalg.norm(p2 - p1, axis=1) - _reach(pair[1], args[5].T) - _reach(pair[0],
                                                                               args[2].T)
  ref = _reference_distance(pair[0], pair[1], args)
  if t1 not in (G.PLANE, G.BOX):  # box-box's separating-axis distances may be lower
    assert (dist.min(axis=1) >= lower - 1e-12).all()
  if not np.isnan(ref).all():
    np.testing.assert_allclose(dist[:, 0], ref, rtol=0, atol=1e-9)
    assert (dist.min(axis=1) >= ref - 1e-12).all()

  # central differences, the rotation tangent applied as exp(h skew(w)) ~ (1 + h skew) mat
  h = 1e-6
  fd = []
  for sign in (1, -1):
    moved = [a + sign * h * t for a, t in zip(args, tangents)]
    for i in (1, 4):  # re-orthonormalize the rotated matrices
      u, _, vt = np.linalg.svd(moved[i])
      moved[i] = u @ vt
    fd.append(np.asarray(_value_and_jvp(t1, t2)(tuple(moved), tuple(tangents))[0][0]))
  fd = (fd[0] - fd[1]) / (2 * h)
  err = np.abs(fd - ddist) / (1 + np.abs(ddist))
  assert (err < 1e-6).all(), f"derivative off at {np.argsort(-err.max(1))[:5]}"
