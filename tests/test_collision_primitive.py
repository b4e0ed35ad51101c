"""Primitive narrow-phase colliders against MuJoCo's mjc_* collision functions.

Each type pair gets a two-geom scene (a mocap plane or a free body, and a free body); random and
degenerate poses and margins go through MuJoCo's mj_kinematics + mj_collision, and the collider,
vmapped over all samples in one jitted call, must reproduce d.contact in count, order, dist, pos
and frame.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest

from flexor import collision_primitive as cp
from flexor.types import GeomType as G

# float64 against MuJoCo's doubles: only the summation order differs, errors are ~1e-15 of the
# geometry; 1e-9 (m, or dimensionless for frames) leaves room for ill-conditioned segment solves.
TOL = 1e-9
# float32: rounding of ~1e-7 amplified by the same solves
TOL32 = 1e-4

_NAME = {G.PLANE: "plane", G.SPHERE: "sphere", G.CAPSULE: "capsule", G.CYLINDER: "cylinder",
         G.BOX: "box"}

# geom sizes per pair: (size1, size2), each (3,) as Model.geom_size
_SIZES = {
    (G.PLANE, G.SPHERE): ([1, 1, 1], [0.1, 0, 0]),
    (G.PLANE, G.CAPSULE): ([1, 1, 1], [0.1, 0.2, 0]),
    (G.PLANE, G.CYLINDER): ([1, 1, 1], [0.1, 0.2, 0]),
    (G.PLANE, G.BOX): ([1, 1, 1], [0.1, 0.2, 0.15]),
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


def _model(t1: G, t2: G) -> mujoco.MjModel:
  size1, size2 = _SIZES[(t1, t2)]
  geom1 = f'<geom type="{_NAME[t1]}" size="{" ".join(map(str, size1))}"/>'
  geom2 = f'<geom type="{_NAME[t2]}" size="{" ".join(map(str, size2))}"/>'
  body1 = (f'<body mocap="true">{geom1}</body>' if t1 == G.PLANE
           else f'<body><freejoint/>{geom1}</body>')
  xml = f"""<mujoco><option><flag gravity="disable"/></option><worldbody>
    {body1}<body><freejoint/>{geom2}</body></worldbody></mujoco>"""
  return mujoco.MjModel.from_xml_string(xml)


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
  collider = cp.COLLIDERS[(t1, t2)]
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
  single = jax.jit(cp.COLLIDERS[pair])
  for s in range(0, len(args[0]), 40):
    for b, x in zip(batched, single(*(a[s] for a in args))):
      np.testing.assert_allclose(np.asarray(b[s]), np.asarray(x), rtol=0, atol=1e-12)
