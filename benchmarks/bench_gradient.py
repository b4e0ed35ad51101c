"""Where a rollout gradient's time goes: the reverse-mode cost of a flexor rollout and step.

Two tables per model, both measured on a batch of random states (``jax.vmap``), jitted:

* **rollout**: a ``--steps``-step rollout and the gradient of sum(final qpos) w.r.t. the initial
  qvel, with the scan storing every step's residuals (flexor's default) and with
  ``checkpoint_every=1`` (each step recomputed in the backward pass): compile and run times,
  and the gradient's cost over the forward's; with ``--mjx``, MJX's rollout (a ``lax.scan`` of
  ``mjx.step`` from the same states) and its gradient beside them, and flexor's compile and
  run times over MJX's.
* **one step**: the compiled size of one batched ``flexor.step`` and of its VJP w.r.t. qpos and
  qvel (HLO instructions of the entry computation, fusions), and the arrays the forward saves
  for the backward. The backward of a step launches many small kernels; these counts, not flops,
  are what its cost follows.
* **stages** (with ``--stages``): the rollout gradient's kernels, from a ``jax.profiler`` trace of
  the compiled program, charged to the pipeline stage (flexor's named scopes: kinematics,
  com_pos, crb, rne, ...) and the pass that runs them: the forward rollout, the forward of each
  step recomputed in the backward pass (``flexor.step`` is rematerialised), and the transposed
  (backward) operations. Kernels per step and summed kernel time per step; summed over XLA's
  threads, so the total exceeds the wall time where kernels overlap.

Models: a path, a flexor example or a dm_control suite name; ``name:smooth`` disables contacts
and constraints (as ``bench_smooth.py``). Run from the repository root, e.g.
``python benchmarks/bench_gradient.py --models cheetah:smooth,block_push``.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import glob
import gzip
import io
import json
import os
import re
import sys
import tempfile
import time
from typing import Any, Callable

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_smooth  # pylint: disable=wrong-import-position


def _load(name: str, dtype: str) -> tuple[Any, Any]:
  """(flexor Model, MjModel) for NAME (``name:smooth`` without contacts and constraints)."""
  import mujoco  # pylint: disable=import-outside-toplevel
  from flexor.mjcf.from_mujoco import from_mujoco  # pylint: disable=import-outside-toplevel
  path, _, flag = name.partition(":")
  mj = mujoco.MjModel.from_xml_path(bench_smooth.model_path(path))
  if flag == "smooth":
    bench_smooth.smooth_only(mj)
  return from_mujoco(mj, dtype=np.dtype(dtype)), mj


def _batch(m: Any, mj: Any, batch: int, seed: int) -> Any:
  """A batch of Data at qpos0 (keyframe 0 if any) with random velocities and controls."""
  import jax.numpy as jnp  # pylint: disable=import-outside-toplevel
  import flexor  # pylint: disable=import-outside-toplevel
  rng = np.random.default_rng(seed)
  qpos = mj.key_qpos[0] if mj.nkey else mj.qpos0
  dtype = m.opt.timestep.dtype
  d = flexor.make_data(m, batch_shape=(batch,))
  return d.replace(qpos=jnp.asarray(np.broadcast_to(qpos, (batch, mj.nq)), dtype),
                   qvel=jnp.asarray(0.5 * rng.standard_normal((batch, mj.nv)), dtype),
                   ctrl=jnp.asarray(rng.uniform(-0.5, 0.5, (batch, mj.nu)), dtype))


def _timed(fn: Callable, args: tuple, repeat: int) -> tuple[float, float]:
  """(compile s, fastest run s) of ``jax.jit(fn)(*args)``."""
  import jax  # pylint: disable=import-outside-toplevel
  t0 = time.perf_counter()
  compiled = jax.jit(fn).lower(*args).compile()
  compile_s = time.perf_counter() - t0
  jax.block_until_ready(compiled(*args))
  return compile_s, bench_smooth.best(lambda: jax.block_until_ready(compiled(*args)), repeat)


def _loss(m: Any, d: Any, steps: int, every: int | None = None) -> Callable[[Any], Any]:
  """qvel -> sum of the final qpos of a ``steps``-step rollout of the batch d from qvel, with
  ``checkpoint_every=every``."""
  import jax  # pylint: disable=import-outside-toplevel
  import jax.numpy as jnp  # pylint: disable=import-outside-toplevel
  import flexor  # pylint: disable=import-outside-toplevel

  def loss(qvel):
    run = lambda d: flexor.rollout(m, d, nstep=steps, fields=(), checkpoint_every=every)[0].qpos
    return jnp.sum(jax.vmap(run)(d.replace(qvel=qvel)))
  return loss


def _mjx_loss(mj: Any, d: Any, steps: int) -> Callable[[Any], Any]:
  """``_loss`` for MJX: qvel -> sum of the final qpos of a ``lax.scan`` of ``mjx.step`` from the
  batch d's states and controls (MJX's own way; it has no rematerialisation)."""
  import jax  # pylint: disable=import-outside-toplevel
  import jax.numpy as jnp  # pylint: disable=import-outside-toplevel
  from mujoco import mjx  # pylint: disable=import-outside-toplevel
  mm = mjx.put_model(mj)
  base = mjx.make_data(mm)
  batch = d.qpos.shape[0]
  dm = jax.tree_util.tree_map(lambda x: jnp.broadcast_to(x, (batch,) + x.shape), base)
  dm = dm.replace(qpos=d.qpos, ctrl=d.ctrl)

  def loss(qvel):
    run = lambda x: jax.lax.scan(lambda x, _: (mjx.step(mm, x), None), x, None,
                                 length=steps)[0].qpos
    return jnp.sum(jax.vmap(run)(dm.replace(qvel=qvel)))
  return loss


def rollout_table(m: Any, d: Any, steps: int, repeat: int, mj: Any = None
                  ) -> list[list[str]]:
  """Rows (what, compile s, run ms, x forward) of the rollout and its gradients; with ``mj``, also
  MJX's rollout and gradient (x its own forward) and flexor's times over MJX's."""
  import jax  # pylint: disable=import-outside-toplevel

  programs = [("forward", _loss(m, d, steps)), ("gradient", jax.grad(_loss(m, d, steps))),
              ("gradient, checkpoint_every=1", jax.grad(_loss(m, d, steps, every=1)))]
  if mj is not None:
    programs += [("MJX forward", _mjx_loss(mj, d, steps)),
                 ("MJX gradient", jax.grad(_mjx_loss(mj, d, steps)))]
  rows, times = [], {}
  for what, fn in programs:
    try:
      times[what] = _timed(fn, (d.qvel,), repeat)
    except Exception as e:  # pylint: disable=broad-except
      rows.append([what, f"failed ({type(e).__name__})", "", ""])
      continue
    compile_s, run_s = times[what]
    own = times["MJX forward" if what.startswith("MJX") else "forward"][1]
    rows.append([what, f"{compile_s:.1f}", f"{1e3 * run_s:.2f}", f"{run_s / own:.2f}"])
  for what in ("forward", "gradient"):
    if f"MJX {what}" in times:
      (c, r), (mc, mr) = times[what], times[f"MJX {what}"]
      rows.append([f"flexor / MJX, {what}", f"{c / mc:.2f}", f"{r / mr:.2f}", ""])
  return rows


def step_table(m: Any, d: Any) -> list[list[str]]:
  """Rows (program, HLO instructions, fusions, residual arrays, residual floats / env) of one step.

  The forward is ``jax.vmap(flexor.step)``; the gradient is its VJP w.r.t. qpos and qvel. Reverse
  mode on a CPU or GPU is bound by the number of kernels it launches long before flops or memory,
  so the instruction and fusion counts of the compiled programs, and how many arrays the
  forward saves for the backward, are what a change to a stage should move.
  """
  import jax  # pylint: disable=import-outside-toplevel
  import jax.ad_checkpoint  # pylint: disable=import-outside-toplevel
  import jax.numpy as jnp  # pylint: disable=import-outside-toplevel
  import flexor  # pylint: disable=import-outside-toplevel

  def forward(qpos, qvel):
    out = jax.vmap(lambda d: flexor.step(m, d))(d.replace(qpos=qpos, qvel=qvel))
    return out.qpos, out.qvel

  def gradient(qpos, qvel):
    out, back = jax.vjp(forward, qpos, qvel)
    return back(jax.tree_util.tree_map(jnp.ones_like, out))

  # jax exposes the residual list only as text; each line starts with the aval, e.g. f32[64,3].
  printed = io.StringIO()
  with contextlib.redirect_stdout(printed):
    jax.ad_checkpoint.print_saved_residuals(forward, d.qpos, d.qvel)
  shapes = [re.match(r"\w+\[([\d,]*)\]", line) for line in printed.getvalue().splitlines()]
  shapes = [s.group(1) for s in shapes if s]
  floats = sum(np.prod([int(n) for n in s.split(",") if n]) for s in shapes) / d.qpos.shape[0]
  rows = []
  for what, fn in [("forward", forward), ("gradient", gradient)]:
    hlo = jax.jit(fn).lower(d.qpos, d.qvel).compile().as_text()
    entry = hlo[hlo.index("ENTRY"):]
    instructions = sum(1 for line in entry.splitlines() if " = " in line)
    fusions = len(re.findall(r" fusion\(| kLoop| kInput| kOutput", entry))
    saved = [f"{len(shapes)}", f"{floats:.0f}"] if what == "gradient" else ["", ""]
    rows.append([what, f"{instructions}", f"{fusions}"] + saved)
  return rows


# flexor's named scopes (``jax.named_scope``) that name a pipeline stage; a kernel is charged to the
# innermost one in its HLO op_name, or to "other".
STAGES = ("kinematics", "com_pos", "camlight", "tendon", "transmission", "crb", "factor_m",
          "collision", "make_constraint", "com_vel", "tendon_velocity", "passive", "rne",
          "actuation", "fwd_acceleration", "solve", "noslip", "sensor_pos", "sensor_vel",
          "sensor_acc", "euler", "implicit", "implicitfast", "rk4", "adaptive")
_CONTROL_FLOW = ("while", "conditional", "call")  # their events span their bodies' kernels


def _kernel_origins(hlo: str) -> dict[str, tuple[str, str]]:
  """HLO instruction name -> (stage, pass) for the compiled rollout gradient's text ``hlo``.

  The pass is where the kernel runs: "forward" (the forward rollout's loop, or outside the
  loops), "recomputed" (the backward loop re-running a step's forward, which ``flexor.step``'s
  rematerialisation makes it do) or "backward" (the backward loop's transposed operations).
  """
  calls: dict[str, set[str]] = collections.defaultdict(set)
  loops: list[tuple[str, str]] = []  # (body, op_name) of the entry computation's while loops
  lines: list[tuple[str, str, str, str]] = []  # (computation, instruction, opcode, op_name)
  computation, entry = "", ""
  for line in hlo.splitlines():
    header = re.match(r"(ENTRY )?%?([\w.-]+) .*\{$", line)
    if header:
      computation = header.group(2)
      entry = computation if header.group(1) else entry
      continue
    found = re.match(r"\s+(?:ROOT )?%?([\w.-]+) = .*? ([a-z][\w-]*)\(", line)
    if not found:
      continue
    called = re.findall(r"(?:condition|body|calls|to_apply)=%?([\w.-]+)", line)
    for group in re.findall(r"branch_computations=\{([^}]*)\}", line):
      called += [c.strip().lstrip("%") for c in group.split(",")]
    calls[computation].update(called)
    op_name = re.search(r'op_name="([^"]*)"', line)
    op_name = op_name.group(1) if op_name else ""
    if computation == entry and found.group(2) == "while":
      loops.append((re.search(r"body=%?([\w.-]+)", line).group(1), op_name))
    lines.append((computation, found.group(1), found.group(2), op_name))
  backward_comps: set[str] = set()
  for body, op_name in loops:
    if "transpose(" in op_name:
      todo = [body]
      while todo:
        comp = todo.pop()
        if comp not in backward_comps:
          backward_comps.add(comp)
          todo += calls[comp]
  origins = {}
  for comp, name, opcode, op_name in lines:
    if opcode in _CONTROL_FLOW or not op_name:
      continue
    scopes = re.split(r"[/()]", op_name)
    stage = next((s for s in reversed(scopes) if s in STAGES), "other")
    what = ("forward" if comp not in backward_comps
            else "recomputed" if "rematted_computation" in op_name else "backward")
    origins[name] = (stage, what)
  return origins


def _profile(compiled: Callable, arg: Any, repeat: int) -> tuple[collections.Counter, ...]:
  """(kernel count, summed us) per (stage, pass) of ``repeat`` runs of ``compiled(arg)``."""
  import jax  # pylint: disable=import-outside-toplevel
  origins = _kernel_origins(compiled.as_text())
  jax.block_until_ready(compiled(arg))
  with tempfile.TemporaryDirectory() as folder:
    with jax.profiler.trace(folder):
      for _ in range(repeat):
        jax.block_until_ready(compiled(arg))
    with gzip.open(glob.glob(f"{folder}/plugins/profile/*/*.trace.json.gz")[0]) as f:
      events = json.load(f)["traceEvents"]
  count, micros = collections.Counter(), collections.Counter()
  for event in events:
    if event.get("ph") == "X" and event.get("name") in origins:
      count[origins[event["name"]]] += 1
      micros[origins[event["name"]]] += event["dur"]
  return count, micros


def stage_table(m: Any, d: Any, steps: int, repeat: int) -> list[list[str]]:
  """Rows (stage; kernels / step and us / step of the forward rollout alone, and of the
  gradient's forward loop, recomputed forward and backward operations; the stage's share of
  the gradient) from profiles of ``repeat`` runs of each program."""
  import jax  # pylint: disable=import-outside-toplevel

  loss = _loss(m, d, steps)
  alone = _profile(jax.jit(loss).lower(d.qvel).compile(), d.qvel, repeat)
  count, micros = _profile(jax.jit(jax.grad(loss)).lower(d.qvel).compile(), d.qvel, repeat)
  count.update({(s, "alone"): n for (s, _), n in alone[0].items()})
  micros.update({(s, "alone"): t for (s, _), t in alone[1].items()})
  passes = ("alone", "forward", "recomputed", "backward")
  stages = {s for s, _ in micros}
  per_step = repeat * steps
  total = sum(micros[s, w] for s in stages for w in passes[1:])
  rows = []
  for stage in sorted(stages, key=lambda s: -sum(micros[s, w] for w in passes[1:])):
    cells = [stage]
    for what in passes:
      cells += [f"{count[stage, what] / per_step:.0f}", f"{micros[stage, what] / per_step:.0f}"]
    share = sum(micros[stage, w] for w in passes[1:]) / total
    rows.append(cells + [f"{100 * share:.0f}%"])
  rows.append(["**all**"] + [f"{sum(c[s, w] for s in stages) / per_step:.0f}"
                             for w in passes for c in (count, micros)] + ["100%"])
  return rows


def _markdown(header: list[str], rows: list[list[str]]) -> None:
  print("| " + " | ".join(header) + " |")
  print("|" + "---|" * len(header))
  for row in rows:
    print("| " + " | ".join(row) + " |")


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--models", default="cheetah:smooth,humanoid:smooth,block_push")
  parser.add_argument("--batch", type=int, default=64)
  parser.add_argument("--steps", type=int, default=100)
  parser.add_argument("--repeat", type=int, default=3)
  parser.add_argument("--dtype", default="float32", choices=("float32", "float64"))
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--stages", action="store_true",
                      help="also profile the rollout gradient and charge its kernels to stages")
  parser.add_argument("--mjx", action="store_true",
                      help="also time MJX's rollout and its gradient, side by side")
  args = parser.parse_args(argv)
  import jax  # pylint: disable=import-outside-toplevel
  if args.dtype == "float64":
    jax.config.update("jax_enable_x64", True)
  print(f"device: {bench_smooth.device_name()}; jax {jax.__version__}; {args.dtype}, batch "
        f"{args.batch}, {args.steps} steps, best of {args.repeat}; "
        f"XLA_FLAGS={os.environ.get('XLA_FLAGS', '')!r}")
  for name in args.models.split(","):
    m, mj = _load(name, args.dtype)
    d = _batch(m, mj, args.batch, args.seed)
    print(f"\n## {name} (nv {m.nv}, nbody {m.nbody}, njmax {m.njmax})\n")
    _markdown(["rollout", "compile s", "run ms", "x forward"],
              rollout_table(m, d, args.steps, args.repeat, mj if args.mjx else None))
    print()
    _markdown(["one step", "HLO instructions", "fusions", "residual arrays",
               "residual floats / env"], step_table(m, d))
    if args.stages:
      print()
      _markdown(["stage", "forward alone: kernels", "us", "gradient's forward: kernels", "us",
                 "recomputed: kernels", "us", "backward: kernels", "us", "share of gradient"],
                stage_table(m, d, args.steps, args.repeat))
  return 0


if __name__ == "__main__":
  sys.exit(main())
