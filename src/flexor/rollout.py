"""Rollouts: ``rollout`` scans ``step`` over time; ``batch_rollout``, ``model_axes``,
``batch_mesh`` and ``shard_batch`` batch it over environments, Model parameters and devices.

A rollout is one ``lax.scan``, so it compiles one step whatever the horizon, and it is reverse
differentiable with respect to the initial Data, the controls, a policy's parameters and the
Model's traced parameters. Its controls come from a sequence (open loop) or from a policy of the
observation (closed loop); ``checkpoint_every`` trades recomputation for memory in reverse mode.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from flexor.integrate import integrate_pos, step
from flexor.types import Data, Model

# Data fields stacked into the trajectory by default.
TRAJ_FIELDS = ("time", "qpos", "qvel", "act", "ctrl")

Policy = Callable[[Any, jax.Array], jax.Array]
Observe = Callable[[Model, Data], jax.Array]


def observation(m: Model, d: Data) -> jax.Array:
  """The default observation of a closed-loop rollout: (qpos, qvel, act) concatenated, shape
  (nq + nv + na,), the full state of a model without mocap bodies or plastic slack."""
  del m
  return jnp.concatenate([d.qpos, d.qvel, d.act])


def rollout(m: Model, d: Data, control: jax.Array | Policy | None = None, params: Any = None,
            nstep: int | None = None, *, fields: Sequence[str] = TRAJ_FIELDS,
            observe: Observe = observation,
            checkpoint_every: int | None = None,
            disturbance: jax.Array | None = None) -> tuple[Data, dict[str, jax.Array]]:
  """Runs ``nstep`` steps from ``d``, open loop (a control sequence) or closed loop (a policy).

  Args:
    m: the model.
    d: the initial Data (unbatched; use ``batch_rollout`` or ``jax.vmap`` for batches).
    control: one of
      * None: every step uses ``d.ctrl``;
      * a (T, nu) array: ``ctrl = control[t]`` before step t (open loop);
      * a policy ``control(params, obs) -> ctrl`` (nu,): before step t, ``ctrl`` is the policy's
        output for ``obs = observe(m, d_t)`` (closed loop); ``nstep`` is then required.
    params: the policy's parameters (any pytree), differentiable; only with a policy.
    nstep: number of steps; defaults to T, and must equal T when both are given.
    fields: names of the Data fields to record.
    observe: ``observe(m, d) -> obs``, what the policy sees; default ``observation``.
    checkpoint_every: if given, reverse mode stores the state only every this many steps and
      recomputes the steps in between (``jax.checkpoint``): memory falls from O(nstep) stored
      states (each step is already recomputed from its input state, see ``step``) to
      O(nstep / k + k), for about one more forward rollout of compute. Forward results are
      identical.
    disturbance: if given, a (nstep, 2 nv + na) array of state increments in tangent
      coordinates (dq, dv, da), applied after step t by ``perturb_state``: process noise, or the
      point where ``flexor.gradient_report`` reads the adjoint of every step.
  Returns:
    (final, traj): the Data after the last step, and a dict mapping each name in ``fields`` to
    that field after every step, stacked: ``traj["qpos"][t]`` is qpos after step t, shape
    (nstep, nq); ``traj["ctrl"][t]`` is the control applied during step t.
  """
  policy = control if callable(control) else None
  ctrl_seq = None if policy is not None or control is None else control
  if ctrl_seq is not None:
    if ctrl_seq.ndim != 2 or ctrl_seq.shape[1] != m.nu:
      raise ValueError(f"ctrl_seq must have shape (T, nu={m.nu}), got {ctrl_seq.shape}; "
                       "for a batch of sequences use batch_rollout or jax.vmap")
    if nstep is not None and nstep != ctrl_seq.shape[0]:
      raise ValueError(f"nstep={nstep} does not match ctrl_seq's {ctrl_seq.shape[0]} steps; "
                       "pass one of them")
    nstep = ctrl_seq.shape[0]
  if nstep is None:
    raise ValueError("pass ctrl_seq or nstep (a policy needs nstep)")
  if params is not None and policy is None:
    raise ValueError("params are a policy's parameters: pass a policy as control")
  if checkpoint_every is not None and checkpoint_every < 1:
    raise ValueError(f"checkpoint_every must be a positive number of steps, got {checkpoint_every}")
  unknown = [f for f in fields if not hasattr(d, f)]
  if unknown:
    raise ValueError(f"unknown Data fields {unknown}")
  ntangent = 2 * m.nv + m.na
  if disturbance is not None and jnp.shape(disturbance) != (nstep, ntangent):
    raise ValueError(f"disturbance must have shape (nstep={nstep}, 2 nv + na={ntangent}), "
                     f"got {jnp.shape(disturbance)}")

  def body(d: Data, xs: tuple[jax.Array | None, jax.Array | None]):
    ctrl, dx = xs
    if policy is not None:
      ctrl = policy(params, observe(m, d))
    if ctrl is not None:  # in the Data's dtype: float64 controls may drive a float32 model
      d = d.replace(ctrl=jnp.asarray(ctrl).astype(d.ctrl.dtype))
    d = step(m, d)
    if dx is not None:
      d = perturb_state(m, d, dx)
    return d, {name: getattr(d, name) for name in fields}

  def scan(d: Data, xs: tuple, length: int):
    return jax.lax.scan(body, d, xs, length=length)

  xs = (ctrl_seq, disturbance)
  d = seed_tangents(d)
  with jax.named_scope("rollout"):
    if checkpoint_every is None or checkpoint_every >= nstep:
      return scan(d, xs, nstep)
    return _checkpointed_scan(scan, d, xs, nstep, checkpoint_every)


# The Data fields that a step reads and never writes (MuJoCo's inputs), and the time: fields whose
# tangent ``seed_tangents`` leaves alone, since the step would differentiate what it computes
# from them.
_UNSEEDED = ("time", "ctrl", "qfrc_applied", "xfrc_applied", "mocap_pos", "mocap_quat")


def seed_tangents(d: Data) -> Data:
  """``d`` itself, differentiated as if every real field but the inputs (``_UNSEEDED``)
  depended, with derivative zero, on every real field of ``d``.

  Reverse mode through ``lax.scan`` finds the carries that have a tangent by a fixpoint: it
  linearizes the step with the carries known to have one, then again with those it found, until
  no new one appears. From a tangent on qvel alone that took three linearizations of the whole
  step (1, then 15, then 36 carries with a tangent on dm_control's cheetah), a fifth to a third
  of the rollout gradient's trace (measured on four models). Seeded, the first linearization
  already has the fixpoint. The carries seeded beyond it hold zero tangents: outputs that the
  step overwrites without reading them, or states that have none (act without muscles), whose
  zeros the step carries along."""
  real = [f.name for f in dataclasses.fields(d)
          if jnp.issubdtype(jnp.result_type(getattr(d, f.name)), jnp.inexact)]
  seeded = {name: getattr(d, name) for name in real if name not in _UNSEEDED}
  return d.replace(**_entangle({name: getattr(d, name) for name in real}, seeded))


@jax.custom_jvp
def _entangle(source: dict[str, jax.Array], fields: dict[str, jax.Array]) -> dict[str, jax.Array]:
  """``fields``, whose tangents are their own plus zero times those of ``source``."""
  del source
  return fields


@_entangle.defjvp
def _entangle_jvp(primals: tuple, tangents: tuple) -> tuple:
  _, fields = primals
  dsource, dfields = tangents
  zero = 0 * sum(jnp.sum(t) for t in jax.tree.leaves(dsource))
  return fields, jax.tree.map(lambda t: t + zero.astype(t.dtype), dfields)


def perturb_state(m: Model, d: Data, dx: jax.Array) -> Data:
  """Moves the state of ``d`` by ``dx`` = (dq, dv, da), shape (2 nv + na,), in tangent
  coordinates: qpos by ``integrate_pos(qpos, dq, 1)`` (quaternions rotate by dq, in rad),
  qvel by dv, act by da. This is the parametrisation of MuJoCo's ``mjd_transitionFD``."""
  dx = jnp.asarray(dx).astype(d.qvel.dtype)
  nv = m.nv
  return d.replace(qpos=integrate_pos(m, d.qpos, dx[:nv], 1.0), qvel=d.qvel + dx[nv:2 * nv],
                   act=d.act + dx[2 * nv:])


def _checkpointed_scan(scan: Callable, d: Data, xs: Any, nstep: int, k: int):
  """``scan(d, xs, nstep)`` as an outer scan over chunks of ``k`` steps, each chunk under
  ``jax.checkpoint``, then the ``nstep % k`` remaining steps."""
  nchunk, rest = divmod(nstep, k)
  # prevent_cse=False: inside a scan, CSE cannot undo the rematerialisation.
  chunk = jax.checkpoint(lambda d, xs: scan(d, xs, k), prevent_cse=False)
  head = jax.tree_util.tree_map(lambda x: x[:nchunk * k].reshape(nchunk, k, *x.shape[1:]), xs)
  d, traj = jax.lax.scan(chunk, d, head, length=nchunk)
  traj = {name: x.reshape(nchunk * k, *x.shape[2:]) for name, x in traj.items()}
  if rest:
    tail = jax.tree_util.tree_map(lambda x: x[nchunk * k:], xs)
    d, tail_traj = scan(d, tail, rest)
    traj = {name: jnp.concatenate([x, tail_traj[name]]) for name, x in traj.items()}
  return d, traj


def model_axes(m: Model, names: Sequence[str] = ()) -> Model:
  """``jax.vmap`` in_axes for a Model whose traced fields in ``names`` have a leading batch axis.

  Names are field names (``"body_mass"``) or, for options, ``"opt.timestep"``. Every other leaf
  maps to None (shared by the whole batch).
  """
  wanted = set(names)

  def axis(path, _):
    name = ".".join(str(getattr(k, "name", k)) for k in path)
    if name in wanted:
      wanted.discard(name)
      return 0
    return None

  axes = jax.tree_util.tree_map_with_path(axis, m)
  if wanted:
    raise ValueError(f"no traced Model fields {sorted(wanted)}; names look like 'body_mass' or "
                     "'opt.timestep'")
  return axes


def batch_rollout(m: Model, d: Data, control: jax.Array | Policy | None = None,
                  params: Any = None, nstep: int | None = None, *,
                  fields: Sequence[str] = TRAJ_FIELDS, observe: Observe = observation,
                  checkpoint_every: int | None = None,
                  batched_params: Sequence[str] = (),
                  mesh: Mesh | None = None) -> tuple[Data, dict[str, jax.Array]]:
  """``rollout`` over a batch: ``jax.vmap`` over the leading axis of every Data field, of a
  control sequence (B, T, nu) if given, and of the Model fields named in ``batched_params``
  (domain randomisation). A policy and its parameters are shared by the whole batch.

  With a ``mesh`` (``batch_mesh()``; static under jit), each device runs its share of the batch
  (``shard_batch``) on its own, a ``jax.shard_map`` of the vmap. Without it, XLA's sharding of
  the vmap would keep the devices in lockstep: a batch's loops (the solver's iterations, the
  collision searches) run until every world stops, and that test becomes an all-reduce over
  the devices at each iteration. With it, a device's loops stop with its own worlds, and the
  devices run concurrently. Host CPU devices share one thread pool, on which jaxlib 0.10.2's
  batched LAPACK factorisations of two devices at once can deadlock (benchmarks/README.md).

  Returns:
    (final, traj) with a leading batch axis (B, ...); traj fields are (B, nstep, ...).
  """
  ctrl_seq = None if control is None or callable(control) else control
  if ctrl_seq is not None:
    if np.ndim(ctrl_seq) != 3:
      raise ValueError(f"batched ctrl_seq must have shape (B, T, nu), got {np.shape(ctrl_seq)}")
    nstep = ctrl_seq.shape[1] if nstep is None else nstep

  def run(m_: Model, d_: Data, c_: jax.Array | None):
    return rollout(m_, d_, control if ctrl_seq is None else c_, params, nstep, fields=fields,
                   observe=observe, checkpoint_every=checkpoint_every)

  in_axes = (model_axes(m, batched_params), 0, None if ctrl_seq is None else 0)
  batched = jax.vmap(run, in_axes=in_axes)
  if mesh is None:
    return batched(m, d, ctrl_seq)
  spec = lambda axis: PartitionSpec() if axis is None else PartitionSpec(mesh.axis_names)
  specs = jax.tree_util.tree_map(spec, in_axes, is_leaf=lambda axis: axis is None)
  # check_vma=False: the step's loops start from constants and carry per-world values, which
  # shard_map's replication typing would require to be cast by hand
  return jax.shard_map(batched, mesh=mesh, in_specs=specs, out_specs=PartitionSpec(mesh.axis_names),
                       check_vma=False)(m, d, ctrl_seq)


def batch_mesh(devices: Sequence[jax.Device] | None = None) -> Mesh:
  """The one-axis mesh ``batch`` over ``devices`` (default: the local devices, or every
  process's devices after ``jax.distributed.initialize()``) that ``shard_batch`` splits a batch
  over and ``batch_rollout(..., mesh=)`` runs it on."""
  multiprocess = jax.process_count() > 1
  if multiprocess and devices is not None:
    raise ValueError("with several processes the batch is split over all of jax.devices(); "
                     "do not pass devices")
  return Mesh(np.array(list(jax.devices() if multiprocess else devices or jax.local_devices())),
              ("batch",))


def shard_batch(tree: Any, devices: Sequence[jax.Device] | None = None) -> Any:
  """Places every array of ``tree`` with its leading (batch) axis split over devices.

  A jitted ``batch_rollout`` of sharded Data (and controls) with ``mesh=batch_mesh(devices)``
  then runs each device's share of the batch on that device, with no communication.

  On one process the tree is the whole batch, split over ``devices`` (default: the local ones).
  After ``jax.distributed.initialize()`` with several processes, each process passes its own
  share of the batch and gets back the global batch (``jax.make_array_from_process_local_data``)
  split over every process's devices, the processes' shares in process order.

  Args:
    tree: a pytree of arrays (Data, controls) whose leading axis is the batch, of a size
      divisible by the number of (local) devices.
    devices: the devices of a one-process run; default ``jax.local_devices()``.
  Returns:
    the same tree, each array committed to a ``NamedSharding`` over a one-axis mesh ``batch``.
  """
  mesh = batch_mesh(devices)
  sharding = NamedSharding(mesh, PartitionSpec("batch"))
  multiprocess = jax.process_count() > 1
  local = jax.local_device_count() if multiprocess else mesh.size

  def put(x: jax.Array) -> jax.Array:
    if np.ndim(x) == 0 or np.shape(x)[0] % local:
      raise ValueError(f"cannot split a batch axis of shape {np.shape(x)} over {local} "
                       "devices: its size must be a multiple of the device count")
    if multiprocess:
      return jax.make_array_from_process_local_data(sharding, np.asarray(x))
    return jax.device_put(x, sharding)

  return jax.tree_util.tree_map(put, tree)
