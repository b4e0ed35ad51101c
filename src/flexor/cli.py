"""The ``flexor`` command: the demo, inspecting a model, or simulating a batch of it.

``flexor demo`` optimises the controls of the bundled muscle arm by gradients through its
rollout and writes plots of the result (``flexor.demo``).
``flexor info [MODEL]`` prints the sizes, the kinematic tree with each body's joints, and the
actuators. ``flexor simulate [MODEL] --steps N --batch B`` compiles a vmapped rollout, runs it
in chunks behind a progress bar on stderr, and prints the compile time, the throughput and a
summary of the final states. MODEL is an MJCF file or the name of a bundled example
(``flexor.examples``); without one, the bundled ``arm`` is used, so the command needs no file.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any, Sequence, TextIO

import jax
import jax.numpy as jnp
import numpy as np

import flexor
from flexor import examples
from flexor.errors import MJCFError
from flexor.types import BiasType, DynType, GainType, IntegratorType, JointType, TrnType

DEFAULT_MODEL = "arm"

# Spread of the random initial states around qpos0 and rest: large enough that every batch
# element follows its own trajectory, small enough that no model starts in a strange pose.
_QPOS_NOISE = 0.1   # rad or m
_QVEL_NOISE = 0.5   # rad/s or m/s

# What an actuator's trnid[0] names, per transmission type: (Model names field, label).
_TRN_TARGET = {TrnType.JOINT: ("jnt", "joint"), TrnType.JOINTINPARENT: ("jnt", "joint"),
               TrnType.SLIDERCRANK: ("site", "site"), TrnType.TENDON: ("tendon", "tendon"),
               TrnType.SITE: ("site", "site"), TrnType.BODY: ("body", "body")}


def _parser() -> argparse.ArgumentParser:
  parser = argparse.ArgumentParser(
      prog="flexor", description="Differentiable, batched simulation of MuJoCo MJCF models in JAX.")
  commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
  model_help = (f"an MJCF file, or a bundled example ({', '.join(examples.names())}); "
                f"default: {DEFAULT_MODEL}")

  demo = commands.add_parser(
      "demo", help="trajectory optimisation of the bundled muscle arm, with plots")
  demo.add_argument("--iterations", type=_positive, default=150, help="Adam iterations (150)")
  demo.add_argument("--horizon", type=_positive, default=160,
                    help="steps of 5 ms in the optimised rollout (160)")
  demo.add_argument("--learning-rate", type=float, default=0.1, help="Adam's step size (0.1)")
  demo.add_argument("--out", default=".", help="folder of the PNG files (.)")

  info = commands.add_parser("info", help="print a model's sizes, kinematic tree and actuators")
  info.add_argument("model", nargs="?", default=DEFAULT_MODEL, metavar="MODEL", help=model_help)

  sim = commands.add_parser("simulate", help="run a batch of random initial states, report speed")
  sim.add_argument("model", nargs="?", default=DEFAULT_MODEL, metavar="MODEL", help=model_help)
  sim.add_argument("--steps", type=_positive, default=1000, help="steps per environment (1000)")
  sim.add_argument("--batch", type=_positive, default=256,
                   help="environments simulated at once (256)")
  sim.add_argument("--dtype", choices=("float32", "float64"), default="float32",
                   help="floating-point type of the simulation (float32)")
  sim.add_argument("--seed", type=int, default=0, help="seed of the random initial states (0)")
  sim.add_argument("--chunk", type=_positive, default=None,
                   help="steps per compiled call; must divide --steps (default: about steps/20)")
  return parser


def _positive(text: str) -> int:
  try:
    value = int(text)
  except ValueError:
    raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
  if value < 1:
    raise argparse.ArgumentTypeError(f"expected a positive integer, got {text}")
  return value


def _resolve(model: str) -> str:
  """Path of MODEL: an existing file as given, else the bundled example of that name."""
  if os.path.isfile(model):
    return model
  if os.path.dirname(model):
    raise FileNotFoundError(f"{model}: no such file")
  try:
    return examples.path(model)
  except ValueError:
    raise FileNotFoundError(f"{model}: no such file, and no bundled example of that name "
                            f"({', '.join(examples.names())})") from None


def _load(model: str, dtype: str) -> Any:
  """Compiles MODEL with ``flexor.load_mjcf`` in ``dtype``, enabling float64 in JAX if asked."""
  if dtype == "float64":
    jax.config.update("jax_enable_x64", True)
  return flexor.load_mjcf(_resolve(model), dtype=np.dtype(dtype))


def _name(names: Sequence[str], i: int, kind: str) -> str:
  return names[i] if i < len(names) and names[i] else f"{kind}#{i}"


def info(model: str, out: TextIO) -> None:
  """Prints sizes (contact capacities included), the kinematic tree (bodies with their joints)
  and the actuators of MODEL."""
  m = _load(model, "float32")
  print(f"model: {_resolve(model)}", file=out)
  sizes = ("nq", "nv", "nu", "nactuator", "na", "nbody", "njnt", "ngeom", "nsite", "ntendon")
  print("sizes: " + "  ".join(f"{s}={getattr(m, s)}" for s in sizes), file=out)
  opt = m.opt
  print(f"timestep: {float(opt.timestep):g} s  "
        f"integrator: {IntegratorType(opt.integrator).name.lower()}  "
        f"gravity: ({', '.join(f'{g:g}' for g in np.asarray(opt.gravity))})", file=out)
  print(f"contacts: {m.ncollision} candidate pairs, {m.nconslot} narrow-phase slots, "
        f"{m.nconmax} contact slots (nconmax {m.size_nconmax}), {m.njmax} constraint rows, "
        f"max_geom_pairs {m.max_geom_pairs}", file=out)

  print("kinematic tree:", file=out)
  children: dict[int, list[int]] = {}
  for body in range(1, m.nbody):
    children.setdefault(int(m.body_parentid[body]), []).append(body)
  stack = [(0, 0)]
  while stack:
    body, depth = stack.pop()
    if body == 0:
      print("  world", file=out)
    else:
      joints = [f"{_name(m.names_jnt, j, 'joint')}: {JointType(m.jnt_type[j]).name.lower()}"
                for j in range(m.body_jntadr[body], m.body_jntadr[body] + m.body_jntnum[body])]
      print(f"  {'  ' * depth}{_name(m.names_body, body, 'body')}  "
            f"[{', '.join(joints) or 'welded'}]  {float(m.body_mass[body]):.3g} kg", file=out)
    stack.extend((child, depth + 1) for child in reversed(children.get(body, [])))

  print(f"actuators: {m.nactuator}", file=out)
  for a in range(m.nactuator):
    trn = TrnType(m.actuator_trntype[a])
    if trn == TrnType.SO3:   # a ball joint, or a site relative to a refsite
      kind, label = ("jnt", "joint") if m.actuator_trnid[a, 1] < 0 else ("site", "site")
    else:
      kind, label = _TRN_TARGET[trn]
    target = _name(getattr(m, f"names_{kind}"), int(m.actuator_trnid[a, 0]), label)
    line = (f"  {_name(m.names_actuator, a, 'actuator')}: {trn.name.lower()} {target}  "
            f"gear {float(m.actuator_gear[m.actuator_outadr[a], 0]):g}  "
            f"dyn {DynType(m.actuator_dyntype[a]).name.lower()}  "
            f"gain {GainType(m.actuator_gaintype[a]).name.lower()}  "
            f"bias {BiasType(m.actuator_biastype[a]).name.lower()}")
    if m.actuator_ctrllimited[m.actuator_ctrladr[a]]:
      low, high = np.asarray(m.actuator_ctrlrange[m.actuator_ctrladr[a]])
      line += f"  ctrlrange [{low:g}, {high:g}]"
    print(line, file=out)


def _perturbed_state(m: Any, batch: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
  """Random (qpos, qvel) of shape (batch, nq), (batch, nv) near qpos0 and rest.

  Host-side numpy: a joint's position is moved along a random velocity, so quaternions of ball
  and free joints stay unit quaternions.
  """
  rng = np.random.default_rng(seed)
  qpos = np.tile(np.asarray(m.qpos0, dtype=np.float64), (batch, 1))
  step = rng.normal(scale=_QPOS_NOISE, size=(batch, m.nv))
  for j in range(m.njnt):
    q, v, jtype = m.jnt_qposadr[j], m.jnt_dofadr[j], m.jnt_type[j]
    if jtype in (JointType.HINGE, JointType.SLIDE):
      qpos[:, q] += step[:, v]
      continue
    if jtype == JointType.FREE:
      qpos[:, q:q + 3] += step[:, v:v + 3]
      q, v = q + 3, v + 3
    qpos[:, q:q + 4] = _rotate(qpos[:, q:q + 4], step[:, v:v + 3])
  qvel = rng.normal(scale=_QVEL_NOISE, size=(batch, m.nv))
  return qpos, qvel


def _rotate(quat: np.ndarray, rotvec: np.ndarray) -> np.ndarray:
  """quat (n, 4) composed with the rotation vectors rotvec (n, 3) in the local frame."""
  angle = np.linalg.norm(rotvec, axis=-1, keepdims=True)
  axis = rotvec / np.where(angle > 0, angle, 1.0)
  w, xyz = np.cos(angle / 2), axis * np.sin(angle / 2)
  a0, a = quat[:, :1], quat[:, 1:]
  out = np.concatenate([a0 * w - np.sum(a * xyz, axis=-1, keepdims=True),
                        a0 * xyz + w * a + np.cross(a, xyz)], axis=-1)
  return out / np.linalg.norm(out, axis=-1, keepdims=True)


def _chunk(steps: int) -> int:
  """Steps per compiled call: the divisor of ``steps`` nearest steps/20, so that one compiled
  program runs every call and the progress bar moves about twenty times."""
  divisors = [c for c in range(1, steps + 1) if steps % c == 0]
  return min(divisors, key=lambda c: abs(c - steps / 20))


class _Progress:
  """A one-line progress bar on a text stream, redrawn in place with a carriage return."""

  def __init__(self, total: int, unit: str, out: TextIO, width: int = 30):
    self.total, self.unit, self.out, self.width = total, unit, out, width
    self.start = time.perf_counter()

  def update(self, done: int, batch: int) -> None:
    """Redraws the bar for ``done`` of ``total`` steps of ``batch`` environments."""
    elapsed = time.perf_counter() - self.start
    filled = self.width * done // self.total
    rate = done * batch / elapsed if elapsed > 0 else 0.0
    self.out.write(f"\r[{'#' * filled}{'.' * (self.width - filled)}] {100 * done // self.total:3d}%"
                   f"  {done}/{self.total} {self.unit}  {rate:,.0f} env-steps/s")
    if done == self.total:
      self.out.write("\n")
    self.out.flush()


def _energy(m: Any, d: Any) -> tuple[jax.Array, jax.Array]:
  """Kinetic plus gravitational energy (J) and centre-of-mass height (m) of one state."""
  d = flexor.forward(m, d)
  kinetic = 0.5 * d.qvel @ d.qM @ d.qvel
  potential = -jnp.sum(m.body_mass * (d.xipos @ m.opt.gravity))
  return kinetic + potential, d.subtree_com[0, 2]


def simulate(model: str, steps: int, batch: int, dtype: str, seed: int, chunk: int,
             out: TextIO, err: TextIO) -> int:
  """Simulates ``batch`` random initial states of MODEL for ``steps`` steps, ``chunk`` steps per
  compiled call; returns the exit code (1 if any environment diverged)."""
  m = _load(model, dtype)
  qpos, qvel = _perturbed_state(m, batch, seed)
  d = flexor.make_data(m, batch_shape=(batch,))
  d = d.replace(qpos=jnp.asarray(qpos, dtype=d.qpos.dtype),
                qvel=jnp.asarray(qvel, dtype=d.qvel.dtype))

  def advance(m: Any, d: Any) -> Any:
    # Only the final state is needed: record no trajectory fields.
    return flexor.rollout(m, d, nstep=chunk, fields=())[0]

  print(f"model: {_resolve(model)}  (nq={m.nq} nv={m.nv} nbody={m.nbody})", file=out)
  print(f"batch {batch} x {steps} steps of {float(m.opt.timestep):g} s, {dtype}, "
        f"{jax.devices()[0].platform}, {steps // chunk} calls x {chunk} steps", file=out)
  out.flush()
  t0 = time.perf_counter()
  run = jax.jit(jax.vmap(advance, in_axes=(None, 0))).lower(m, d).compile()
  compile_s = time.perf_counter() - t0
  summary = jax.jit(jax.vmap(_energy, in_axes=(None, 0))).lower(m, d).compile()
  print(f"jit compile: {compile_s:.2f} s (rollout of {chunk} steps, vmapped)", file=out)
  out.flush()

  energy0, com0 = jax.device_get(summary(m, d))
  progress = _Progress(steps, "steps", err)
  progress.update(0, batch)
  t0 = time.perf_counter()
  for i in range(steps // chunk):
    d = run(m, d)
    jax.block_until_ready(d.qpos)
    progress.update((i + 1) * chunk, batch)
  run_s = time.perf_counter() - t0

  energy1, com1 = jax.device_get(summary(m, d))
  qpos1, qvel1 = np.asarray(d.qpos, dtype=np.float64), np.asarray(d.qvel, dtype=np.float64)
  diverged = (~np.all(np.isfinite(qpos1), axis=-1) | ~np.all(np.isfinite(qvel1), axis=-1)
              | np.asarray(d.warning_nan))
  print(f"run: {run_s:.3f} s  {steps / run_s:,.0f} steps/s  "
        f"{batch * steps / run_s:,.0f} env-steps/s", file=out)
  print(f"final state after {steps * float(m.opt.timestep):g} s of simulated time "
        f"(means over the batch):", file=out)
  print(f"  |qpos|: mean {np.nanmean(np.abs(qpos1)):.4g}  max {np.nanmax(np.abs(qpos1)):.4g}",
        file=out)
  print(f"  energy (kinetic + gravitational): start {np.mean(energy0):.6g} J  "
        f"end {np.nanmean(energy1):.6g} J", file=out)
  print(f"  centre-of-mass height: start {np.mean(com0):.4g} m  end {np.nanmean(com1):.4g} m",
        file=out)
  if diverged.any():
    print(f"warning: {int(diverged.sum())} of {batch} environments diverged "
          f"(NaN or inf in the state, or warning_nan set)", file=out)
    return 1
  print(f"  NaN: none (all {batch} environments finite)", file=out)
  return 0


def main(argv: Sequence[str] | None = None) -> int:
  """Runs the ``flexor`` command with ``argv`` (default ``sys.argv[1:]``); returns the exit code."""
  parser = _parser()
  args = parser.parse_args(argv)
  try:
    if args.command == "demo":
      from flexor import demo  # pylint: disable=import-outside-toplevel
      return demo.run(args.iterations, args.horizon, args.learning_rate, args.out, sys.stdout,
                      sys.stderr)
    if args.command == "info":
      info(args.model, sys.stdout)
      return 0
    if args.chunk is not None and args.steps % args.chunk:
      parser.error(f"--chunk {args.chunk} does not divide --steps {args.steps}")
    chunk = args.chunk or _chunk(args.steps)
    return simulate(args.model, args.steps, args.batch, args.dtype, args.seed, chunk,
                    sys.stdout, sys.stderr)
  except (MJCFError, OSError) as e:
    # Bad input is the user's to fix: one line naming file and line, no traceback.
    print(f"flexor: error: {e}", file=sys.stderr)
    return 2
