"""The small vector helpers of flexor.math that are not covered by a stage's conformance."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest
from jax.custom_derivatives import SymbolicZero
from jax.test_util import check_grads

from flexor import math
from support import cond_count, primitives


def test_frame_dot_is_the_contraction_it_replaces_under_jit_and_vmap():
  rng = np.random.default_rng(0)
  frame = rng.standard_normal((5, 4, 2, 3))
  vecs = rng.standard_normal((5, 4, 7, 3))
  expected = np.einsum("bnij,bnvj->bniv", frame, vecs)
  got = jax.jit(jax.vmap(math.frame_dot))(jnp.asarray(frame), jnp.asarray(vecs))
  np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)
  grad = jax.grad(lambda f: jnp.sum(math.frame_dot(f, jnp.asarray(vecs)) ** 2))(jnp.asarray(frame))
  np.testing.assert_allclose(grad, 2 * np.einsum("bniv,bnvj->bnij", expected, vecs), rtol=1e-12)


def test_dot_and_safe_norm_sum_in_jnp_sum_order_for_every_length():
  rng = np.random.default_rng(1)
  for length in (1, 2, 3, 4, 6):
    a = jnp.asarray(rng.standard_normal((3, 5, length)))
    b = jnp.asarray(rng.standard_normal((3, 5, length)))
    np.testing.assert_array_equal(jax.jit(math.dot)(a, b), jnp.sum(a * b, axis=-1))
    np.testing.assert_array_equal(math.dot(a, b, keepdims=True), jnp.sum(a * b, -1, keepdims=True))
    np.testing.assert_array_equal(jax.vmap(math.safe_norm)(a), jnp.sqrt(jnp.sum(a * a, axis=-1)))
    np.testing.assert_array_equal(math.safe_norm(a, axis=1), jnp.sqrt(jnp.sum(a * a, axis=1)))


def test_safe_norm_has_a_zero_gradient_at_zero():
  np.testing.assert_array_equal(jax.grad(math.safe_norm)(jnp.zeros(3)), np.zeros(3))


def test_quaternions_round_as_mujoco_with_the_tangent_of_q_over_its_norm():
  """quat_normalize and quat_to_mat give mju_normalize4's and mju_quat2Mat's bits on random
  quaternions (under jit and vmap: XLA must not fuse their products into multiply-adds), and
  already unit ones are left as they are; the tangent is q / |q|'s, also where the value is
  q itself, as finite differences see it."""
  rng = np.random.default_rng(0)
  q = rng.standard_normal((2000, 4)) * rng.uniform(0.5, 2.0, (2000, 1))
  q[:100] = np.stack([_mujoco_unit(x) for x in q[:100]])
  unit = np.asarray(jax.jit(jax.vmap(math.quat_normalize))(jnp.asarray(q)))
  np.testing.assert_array_equal(unit, np.stack([_mujoco_unit(x) for x in q]))
  np.testing.assert_array_equal(unit[:100], q[:100])
  mat = np.asarray(jax.jit(jax.vmap(math.quat_to_mat))(jnp.asarray(unit)))
  want = np.zeros((len(q), 9))
  for x, out in zip(unit, want):
    mujoco.mju_quat2Mat(out, x)
  np.testing.assert_array_equal(mat.reshape(-1, 9), want)
  for x in (q[0], q[200]):
    u = x / np.linalg.norm(x)
    jac = jax.jacfwd(math.quat_normalize)(jnp.asarray(x))
    np.testing.assert_allclose(jac, (np.eye(4) - np.outer(u, u)) / np.linalg.norm(x), atol=1e-15)
    np.testing.assert_allclose(jax.jacrev(math.quat_normalize)(jnp.asarray(x)), jac, atol=1e-15)


def test_products_are_rounded_in_float64_only():
  """The barrier to multiply-adds (nextafter) is in float64 programs, where flexor reproduces
  MuJoCo's bits, and absent from float32 ones, where it only cost time."""
  def text(dtype):
    q = jnp.ones((5, 4), dtype)
    return jax.jit(jax.vmap(lambda q: math.quat_to_mat(math.quat_normalize(q)))).lower(q).as_text()
  assert "next_after" in text(jnp.float64)
  assert "next_after" not in text(jnp.float32)


def _mujoco_unit(q: np.ndarray) -> np.ndarray:
  out = np.array(q, dtype=np.float64)
  mujoco.mju_normalize4(out)
  return out


def test_mat_vec_and_its_transpose_under_vmap():
  rng = np.random.default_rng(2)
  mat, vec = rng.standard_normal((6, 3, 3)), rng.standard_normal((6, 3))
  np.testing.assert_allclose(jax.vmap(math.mat_vec)(mat, vec), np.einsum("nij,nj->ni", mat, vec),
                             rtol=1e-13)
  np.testing.assert_allclose(jax.vmap(math.mat_t_vec)(mat, vec),
                             np.einsum("nji,nj->ni", mat, vec), rtol=1e-13)


def test_components_are_slices_with_a_backward_pass_free_of_pads_and_reductions():
  """components are the slices, with the slices' derivatives in both modes under vmap; forward
  it reduces nothing, and its reverse mode pads nothing."""
  rng = np.random.default_rng(4)
  v = jnp.asarray(rng.standard_normal((5, 4, 3)))
  weights = jnp.asarray(rng.standard_normal((3, 4)))

  def f(parts):
    return lambda v: jnp.sin(sum(w * c for w, c in zip(weights, parts(v))))
  with_components = jax.vmap(f(math.components))
  with_slices = jax.vmap(f(lambda v: tuple(v[..., i] for i in range(3))))
  np.testing.assert_array_equal(jax.jit(with_components)(v), with_slices(v))
  tangent = jnp.asarray(rng.standard_normal(v.shape))
  np.testing.assert_allclose(jax.jvp(with_components, (v,), (tangent,))[1],
                             jax.jvp(with_slices, (v,), (tangent,))[1], rtol=1e-14)
  cotangent = jnp.asarray(rng.standard_normal((5, 4)))
  np.testing.assert_allclose(jax.vjp(with_components, v)[1](cotangent)[0],
                             jax.vjp(with_slices, v)[1](cotangent)[0], rtol=1e-14)
  assert "reduce_sum" not in primitives(jax.make_jaxpr(with_components)(v).jaxpr)
  backward = jax.make_jaxpr(lambda v, ct: jax.vjp(with_components, v)[1](ct))(v, cotangent)
  assert "pad" not in primitives(backward.jaxpr)


def test_rows_dot_and_its_derivatives_are_the_plain_product_under_vmap():
  rng = np.random.default_rng(3)
  a, b = jnp.asarray(rng.standard_normal((4, 9, 6))), jnp.asarray(rng.standard_normal((4, 7, 6)))
  rows_dot = jax.jit(jax.vmap(math.rows_dot))
  plain = jax.vmap(lambda x, y: x @ y.T)
  np.testing.assert_array_equal(rows_dot(a, b), plain(a, b))
  cotangent = jnp.asarray(rng.standard_normal((4, 9, 7)))
  for got, want in zip(jax.vjp(rows_dot, a, b)[1](cotangent), jax.vjp(plain, a, b)[1](cotangent)):
    np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-13)
  tangents = (jnp.asarray(rng.standard_normal(a.shape)), jnp.asarray(rng.standard_normal(b.shape)))
  np.testing.assert_allclose(jax.jvp(rows_dot, (a, b), tangents)[1],
                             jax.jvp(plain, (a, b), tangents)[1], rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("n", [0, 1, 2, 3, 5])
def test_cholesky_and_cho_solve_are_lapacks_under_jit_vmap_and_grad(n):
  rng = np.random.default_rng(4 + n)
  x = rng.standard_normal((6, n, n))
  a = jnp.asarray(x @ x.transpose(0, 2, 1) + n * np.eye(n))
  b, bs = jnp.asarray(rng.standard_normal((6, n))), jnp.asarray(rng.standard_normal((6, n, 3)))
  factor = jax.jit(jax.vmap(math.cholesky))(a)
  np.testing.assert_allclose(factor, np.linalg.cholesky(np.asarray(a)), rtol=1e-13, atol=1e-14)
  solve = jax.jit(jax.vmap(math.cho_solve))
  np.testing.assert_allclose(solve(factor, bs), np.linalg.solve(a, bs), rtol=1e-12, atol=1e-13)
  np.testing.assert_allclose(solve(factor, b), np.linalg.solve(a, b[..., None])[..., 0],
                             rtol=1e-12, atol=1e-13)
  if n:
    # a solve's derivatives w.r.t. the right-hand side and the factor, against finite differences
    loss = lambda f, r: jnp.sum(jnp.sin(jax.vmap(math.cho_solve)(f, r)))
    check_grads(loss, (factor, b), order=1, modes=("fwd", "rev"), eps=1e-6)
  # up to math._UNROLLED the factor and its solves are arithmetic on the entries, not LAPACK
  unrolled = n <= math._UNROLLED
  jaxpr = jax.make_jaxpr(lambda a, r: math.cho_solve(math.cholesky(a), r))(a[0], b[0]).jaxpr
  count = primitives(jaxpr)
  assert (count["cholesky"] == 0 and count["triangular_solve"] == 0) == (unrolled or not n)


def test_known_cond_traces_only_the_branch_taken_where_the_values_are_known():
  """Known values (closed over) decide while tracing: no cond, and the other branch is never
  traced; traced values (arguments, under jit, grad and vmap) keep a lax.cond with both."""
  traced = []

  def f(scale, x):
    def big():
      traced.append("big")
      return x * scale[0]
    return math.known_cond(lambda s: (s != 0).any(), (scale,), big, lambda: jnp.zeros_like(x))

  x = jnp.arange(3.0)
  for scale, expected in ((jnp.zeros(2), 0.0), (jnp.full(2, 2.0), 2.0)):
    traced.clear()
    closed = jax.make_jaxpr(lambda x: f(scale, x))(x)
    assert cond_count(closed.jaxpr) == 0
    assert traced == (["big"] if expected else [])
    np.testing.assert_array_equal(jax.jit(lambda x: f(scale, x))(x), expected * x)
    assert cond_count(jax.make_jaxpr(f)(scale, x).jaxpr) == 1
    np.testing.assert_array_equal(jax.jit(f)(scale, x), expected * x)
    grad = jax.grad(lambda s: jnp.sum(f(s, x)))(scale)
    np.testing.assert_array_equal(grad, [3.0 if expected else 0.0, 0.0])
  batched = jax.vmap(f, in_axes=(0, None))(jnp.array([[0.0, 0.0], [2.0, 2.0]]), x)
  np.testing.assert_array_equal(batched, [[0.0] * 3, [0.0, 2.0, 4.0]])


def test_known_and_static_where_select_while_tracing_where_they_can():
  """known_where and static_where equal jnp.where; a known predicate or a uniform static mask
  leaves no select in the program, and the result has jnp.where's shape and dtype."""
  x, y = jnp.arange(3.0, dtype=jnp.float32), jnp.float32(-1.0)
  selects = lambda f: primitives(jax.make_jaxpr(f)(x))["select_n"]
  for pred in (True, False):
    with jax.ensure_compile_time_eval():
      flag = jnp.asarray(pred)
    assert selects(lambda x: math.known_where(flag, x, y)) == 0
    np.testing.assert_array_equal(jax.jit(lambda x: math.known_where(flag, x, y))(x),
                                  jnp.where(pred, x, y))
  assert jax.jit(lambda p, x: math.known_where(p, x, y))(False, x).tolist() == [-1.0] * 3
  for mask in (np.ones((2, 3), bool), np.zeros((2, 3), bool), np.array([[True], [False]])):
    got = math.static_where(mask, x, 0.0)
    expected = jnp.where(mask, x, 0.0)
    assert (got.shape, got.dtype) == (expected.shape, expected.dtype)
    np.testing.assert_array_equal(got, expected)
    assert selects(lambda x: math.static_where(mask, x, 0.0)) == (0 if mask.all() == mask.any()
                                                                   else 1)


def test_materialize_is_the_identity_behind_a_loop_the_compiler_keeps():
  """materialize returns its pytree (floats, ints, bools) unchanged under jit and vmap, has the
  identity's derivatives in both modes, and its loop is still in the optimised program (the
  CPU backend would remove an optimization barrier)."""
  x = jnp.linspace(-1.0, 1.0, 12).reshape(4, 3)
  k, flag = jnp.arange(4), jnp.array([True, False, True, False])
  out = jax.jit(jax.vmap(math.materialize))((x, k, flag))
  for got, want in zip(out, (x, k, flag)):
    np.testing.assert_array_equal(got, want)
  f = lambda x: jnp.sum(jnp.sin(math.materialize(x)) * x)
  np.testing.assert_allclose(jax.grad(f)(x), jnp.cos(x) * x + jnp.sin(x), rtol=1e-14)
  check_grads(lambda x: jnp.sin(math.materialize(x)), (x,), order=1, modes=("fwd", "rev"))
  consumer = lambda x: jnp.sum(jnp.sin(math.materialize(jnp.exp(x)))[..., None] * x[:, None, :])
  hlo = jax.jit(consumer).lower(x).compile().as_text()
  assert " while(" in hlo


@pytest.mark.parametrize("n", [0, 1, 16, 17, 228, 4097])
def test_prefix_count_and_compact_are_cumsum_and_nonzero_under_jit_and_vmap(n):
  rng = np.random.default_rng(n)
  masks = rng.uniform(size=(3, 4, n)) < np.array([0.0, 0.3, 1.0])[:, None, None]
  masks = jnp.asarray(masks.reshape(12, n))
  counts = jax.jit(jax.vmap(math.prefix_count))(masks)
  assert counts.dtype == jnp.int32
  np.testing.assert_array_equal(counts, np.cumsum(np.asarray(masks), axis=-1))
  for size, fill in ((1, 0), (7, n), (64, 0)):
    pick, rank = jax.jit(jax.vmap(lambda m: math.compact(m, size, fill)))(masks)
    expected = jax.vmap(lambda m: jnp.nonzero(m, size=size, fill_value=fill)[0])(masks)
    np.testing.assert_array_equal(pick, expected)
    np.testing.assert_array_equal(rank, np.cumsum(np.asarray(masks), axis=-1) - 1)


def test_chunked_runs_fn_on_the_active_lanes_with_derivatives_under_vmap():
  """math.chunked equals fn on the active lanes and zero on the others, its gradient too, in
  chunks that do not divide the lanes; and under vmap, where every chunk runs."""
  rng = np.random.default_rng(0)
  x = jnp.asarray(rng.standard_normal((2, 11, 3)))
  active = jnp.asarray(rng.random((2, 11)) < 0.5).at[1].set(False)

  def fn(on, x):
    assert on.shape == (4,)
    return jnp.sin(x) * jnp.sum(x, axis=-1, keepdims=True), jnp.where(on, 1, 2)

  def run(active, x):
    return math.chunked(active, fn, (x,), 4)

  def expected(active, x):
    return (jnp.where(active[:, None], jnp.sin(x) * jnp.sum(x, -1, keepdims=True), 0.0),
            jnp.where(active, 1, 0))

  for a, b in zip(jax.jit(jax.vmap(run))(active, x), jax.vmap(expected)(active, x)):
    np.testing.assert_allclose(a, b, rtol=1e-15)
  loss = lambda f: lambda x: jnp.sum(f(active[0], x)[0] ** 2)
  np.testing.assert_allclose(jax.grad(loss(run))(x[0]), jax.grad(loss(expected))(x[0]),
                             rtol=1e-14)


def test_chunked_traces_fn_once():
  """math.chunked traces fn once, in the cond that runs a chunk: the zeros of the chunks it
  skips take fn's shapes from that trace (a second trace of the height field's search cost
  seconds)."""
  calls = []

  def fn(on, x):
    calls.append(None)
    return jnp.where(on[:, None], jnp.sin(x), 0.0), jnp.sum(x, axis=-1).astype(jnp.float32)

  x, active = jnp.ones((10, 3)), jnp.arange(10) % 3 == 0
  out = jax.jit(lambda a, x: math.chunked(a, fn, (x,), 4))(active, x)
  assert len(calls) == 1
  assert out[0].shape == (10, 3) and out[1].dtype == jnp.float32


def test_jvp_nonzero_differentiates_the_leaves_with_tangents():
  """math.jvp_nonzero takes the tangent along the leaves that have one, the symbolic zeros of a
  custom_jvp rule entering as constants, and returns None where no leaf has a tangent."""
  x, y = jnp.array(2.0), jnp.array(3.0)
  zero = lambda v: SymbolicZero(jax.typeof(v))
  fn = lambda a, pair: {"p": a * jnp.sin(pair[0]) + pair[1]}
  out = math.jvp_nonzero(fn, (x, (y, y)), (jnp.array(0.5), (zero(y), jnp.array(2.0))))
  np.testing.assert_allclose(out["p"], 0.5 * np.sin(3.0) + 2.0, rtol=1e-15)
  assert math.jvp_nonzero(fn, (x, (y, y)), (zero(x), (zero(y), zero(y)))) is None


def test_take_is_the_gather_with_slices_where_the_indices_are_blocks():
  """math.take equals x[idx] for random static indices, and where they are a few blocks of
  evenly spaced, equally repeated indices (constraint rows' slots) neither it nor its reverse
  mode gathers or scatters; take_columns equals x[i, col[i]]."""
  rng = np.random.default_rng(0)
  x = jnp.asarray(rng.normal(size=(40, 3)))
  cases = [np.arange(40), np.repeat(np.arange(3, 9), 4), np.r_[np.arange(5), np.repeat([7, 8], 2)],
           np.repeat(np.arange(2, 30, 4), 4), np.array([5])]
  cases += [rng.integers(0, 40, size=rng.integers(1, 12)) for _ in range(100)]
  cases += [np.sort(rng.integers(0, 10, size=rng.integers(1, 20))) for _ in range(100)]
  for idx in cases:
    np.testing.assert_array_equal(math.take(x, idx), x[idx])
  blocks = cases[1]
  batched = jax.vmap(jax.grad(lambda x: jnp.sum(jnp.sin(math.take(x, blocks)))))
  used = primitives(jax.make_jaxpr(batched)(jnp.stack([x, x])).jaxpr)
  assert not {"gather", "scatter-add", "scatter_add"} & set(used), used
  np.testing.assert_allclose(batched(x[None])[0],
                             jax.grad(lambda x: jnp.sum(jnp.sin(x[blocks])))(x), rtol=1e-14)
  for col in (np.array([0, 2, 1, 2]), np.array([2, 2, 2, 2]), rng.integers(0, 3, size=40)):
    rows = x[:len(col)]
    np.testing.assert_array_equal(math.take_columns(rows, col), rows[np.arange(len(col)), col])
