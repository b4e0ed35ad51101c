"""Smooth-dynamics speed of flexor beside MuJoCo C and MJX, measured in one run.

For each model the three engines simulate the same compiled MjModel (contacts and constraints
disabled) from the same random initial states, in the same dtype, on the same machine:

* flexor: ``flexor.step`` in a ``lax.scan`` of ``--steps`` steps, jitted; vmapped for batches;
* MJX: ``mujoco.mjx.step`` in the same scan harness, jitted; vmapped for batches;
* MuJoCo C: ``mujoco.mj_step`` in a Python loop over steps and batch elements (one thread), and
  ``mujoco.rollout`` (C threads over the batch, one per core) where it is available.

flexor's Model is taken from the compiled MjModel (``flexor.mjcf.from_mujoco``), so that all
three engines step identical parameters whatever flexor's own compiler supports. Reported: jit
compile time (lowering plus XLA compilation of the single-environment scan), single-environment
time per step, and batched throughput in environment-steps per second. Ratios are speed ratios:
above 1 means flexor is faster. ``--host-devices n`` splits the CPU into n JAX devices and runs
both JAX engines' batches as one shard per device (``jax.shard_map``), as MuJoCo C's rollout runs
one thread per core.

Run from the repository root, e.g. ``python benchmarks/bench_smooth.py --quick``.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from typing import Any, Callable

import numpy as np

MODELS = ("humanoid", "cheetah", "chain20")
BATCHES = (64, 256, 1024)


def parse_args(argv: list[str] | None, doc: str | None = None, models: tuple[str, ...] = MODELS,
               grad: bool = False) -> argparse.Namespace:
  """The benchmarks' shared options (``doc``: the calling script's docstring); ``grad`` adds
  ``--grad`` and ``--max-geom-pairs`` (the contact benchmarks')."""
  parser = argparse.ArgumentParser(description=(doc or __doc__).split("\n\n")[0])
  parser.add_argument("--models", default=",".join(models),
                      help=f"comma-separated: dm_control suite names, flexor examples or MJCF "
                           f"paths (default {','.join(models)})")
  parser.add_argument("--batches", default=",".join(map(str, BATCHES)),
                      help="comma-separated batch sizes (default 64,256,1024)")
  parser.add_argument("--steps", type=int, default=200, help="steps per timed run (200)")
  parser.add_argument("--repeat", type=int, default=3, help="timed runs; the fastest counts (3)")
  parser.add_argument("--dtype", choices=("float32", "float64"), default="float32")
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--quick", action="store_true",
                      help="batch 64 only, 50 steps, one timed run")
  parser.add_argument("--no-flexor", action="store_true", help="skip flexor")
  parser.add_argument("--no-mjx", action="store_true", help="skip MJX (slow to compile)")
  parser.add_argument("--no-c", action="store_true", help="skip MuJoCo C (loop and rollout)")
  parser.add_argument("--no-single", action="store_true",
                      help="skip the single-environment scan (compile time is then the first "
                           "batch's; for GPUs, where only batches matter)")
  parser.add_argument("--host-devices", type=int, default=1,
                      help="split the CPU into this many JAX devices and run each engine's batch "
                           "as one shard per device (jax.shard_map), as MuJoCo C's rollout runs "
                           "one thread per core (1); with jaxlib 0.10.2 it can deadlock where "
                           "devices run batched LAPACK factorisations at once (the humanoid)")
  parser.add_argument("--no-c-loop", action="store_true",
                      help="skip MuJoCo C's one-thread Python loop (slow at large batches); "
                           "its threaded rollout still runs")
  if grad:
    parser.add_argument("--grad", action="store_true",
                        help="also time a rollout gradient against the forward rollout")
    parser.add_argument("--max-geom-pairs", type=int, default=-1,
                        help="give every model MJX's max_geom_pairs numeric (flexor and MJX "
                             "run each geom-type pair's narrow phase on that many candidates)")
  args = parser.parse_args(argv)
  if args.quick:
    args.batches, args.steps, args.repeat = "64", 50, 1
  return args


def start(args: argparse.Namespace, setting: str) -> list[int]:
  """Configures JAX for ``args.dtype`` and ``args.host_devices``, prints the run's header and
  returns the batch sizes."""
  if args.host_devices > 1:
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_"
                               f"device_count={args.host_devices}").strip()
  import jax  # pylint: disable=import-outside-toplevel
  import mujoco  # pylint: disable=import-outside-toplevel
  if args.dtype == "float64":
    jax.config.update("jax_enable_x64", True)
  print(f"device: {device_name()}")
  print(f"jax {jax.__version__}, mujoco {mujoco.__version__}, python {platform.python_version()}, "
        f"XLA_FLAGS={os.environ.get('XLA_FLAGS', '')!r}")
  print(f"dtype {args.dtype}, {args.steps} steps per timed run, best of {args.repeat}; {setting}")
  print(f"load average at start: {_load_average()}")
  return [int(b) for b in args.batches.split(",") if b]


def model_path(name: str) -> str:
  """An MJCF path for NAME: a file, a flexor example or a dm_control suite model."""
  if os.path.isfile(name):
    return name
  from flexor import examples  # pylint: disable=import-outside-toplevel
  if name in examples.names():
    return examples.path(name)
  import dm_control  # pylint: disable=import-outside-toplevel
  path = os.path.join(os.path.dirname(dm_control.__file__), "suite", f"{name}.xml")
  if not os.path.isfile(path):
    raise SystemExit(f"no model {name!r}: not a file, a flexor example or a dm_control suite model")
  return path


def _smooth_model(path: str) -> Any:
  """The MjModel at PATH with contacts and constraints disabled."""
  import mujoco  # pylint: disable=import-outside-toplevel
  m = mujoco.MjModel.from_xml_path(path)
  return smooth_only(m)


def smooth_only(m: Any) -> Any:
  """``m`` (an MjModel) with contacts and constraints disabled, in place."""
  import mujoco  # pylint: disable=import-outside-toplevel
  bits = mujoco.mjtDisableBit
  m.opt.disableflags |= int(bits.mjDSBL_CONTACT | bits.mjDSBL_CONSTRAINT)
  return m


def best(fn: Callable[[], Any], repeat: int) -> float:
  """Fastest wall time of ``repeat`` calls of ``fn`` (which must block until done)."""
  times = []
  for _ in range(repeat):
    t0 = time.perf_counter()
    fn()
    times.append(time.perf_counter() - t0)
  return min(times)


def _jax_engine(step: Callable[[Any, Any], Any], m: Any, d1: Any, batch_data: Callable[[int], Any],
                steps: int, batches: list[int], repeat: int, single: bool = True) -> dict[str, Any]:
  """Compile time, single-env step time and batched throughput of a JAX ``step(m, d)``; without
  ``single``, no single-env step time and the compile time of the first batch's scan."""
  import jax  # pylint: disable=import-outside-toplevel

  def run(m, d):
    return jax.lax.scan(lambda d, _: (step(m, d), None), d, None, length=steps)[0]

  result: dict[str, Any] = {"compile": None, "step": None, "finite": True}
  if single:
    t0 = time.perf_counter()
    one = jax.jit(run).lower(m, d1).compile()
    result["compile"] = time.perf_counter() - t0
    print(f"    compiled in {result['compile']:.1f} s", flush=True)
    final = jax.block_until_ready(one(m, d1))
    result["finite"] = bool(np.all(np.isfinite(np.asarray(final.qpos))))
    result["step"] = best(lambda: jax.block_until_ready(one(m, d1)), repeat) / steps
  for b in batches:
    db = batch_data(b)
    batched_run = jax.vmap(run, in_axes=(None, 0))
    if jax.device_count() > 1:
      db, batched_run = _per_device(db, batched_run, m)
    t0 = time.perf_counter()
    batched = jax.jit(batched_run).lower(m, db).compile()
    if result["compile"] is None:
      result["compile"] = time.perf_counter() - t0
      print(f"    B={b} compiled in {result['compile']:.1f} s", flush=True)
    final = jax.block_until_ready(batched(m, db))
    result["finite"] &= bool(np.all(np.isfinite(np.asarray(final.qpos))))
    result[b] = b * steps / best(lambda: jax.block_until_ready(batched(m, db)), repeat)
    print(f"    B={b}: {result[b]:,.0f} env-steps/s", flush=True)
  return result


def _per_device(d: Any, batched: Callable[[Any, Any], Any], m: Any
                ) -> tuple[Any, Callable[[Any, Any], Any]]:
  """The batch d split over JAX's devices (``flexor.shard_batch``) and ``batched(m, d)`` run as
  one shard per device, each device's loops stopping with its own worlds, as
  ``flexor.batch_rollout(..., mesh=)`` runs; the Model ``m`` is closed over (a constant of the
  program), and the returned function ignores its Model argument."""
  import jax  # pylint: disable=import-outside-toplevel
  import flexor  # pylint: disable=import-outside-toplevel
  from jax.sharding import PartitionSpec  # pylint: disable=import-outside-toplevel
  spec = PartitionSpec("batch")
  per_device = jax.shard_map(lambda d: batched(m, d), mesh=flexor.batch_mesh(), in_specs=spec,
                             out_specs=spec, check_vma=False)
  return flexor.shard_batch(d), lambda _, d: per_device(d)


def run_flexor(mj: Any, init: dict[str, np.ndarray], dtype: str, steps: int, batches: list[int],
               repeat: int, single: bool = True) -> dict[str, Any]:
  import jax.numpy as jnp  # pylint: disable=import-outside-toplevel
  import flexor  # pylint: disable=import-outside-toplevel
  from flexor.mjcf.from_mujoco import from_mujoco  # pylint: disable=import-outside-toplevel

  m = from_mujoco(mj, dtype=np.dtype(dtype))

  def data(b: int | None) -> Any:
    d = flexor.make_data(m, batch_shape=() if b is None else (b,))
    return d.replace(**{k: jnp.asarray(v[0] if b is None else v[:b], dtype=dtype)
                        for k, v in init.items()})

  return _jax_engine(flexor.step, m, data(None), data, steps, batches, repeat, single)


def run_mjx(mj: Any, init: dict[str, np.ndarray], dtype: str, steps: int, batches: list[int],
            repeat: int, single: bool = True) -> dict[str, Any]:
  import jax  # pylint: disable=import-outside-toplevel
  import jax.numpy as jnp  # pylint: disable=import-outside-toplevel
  from mujoco import mjx  # pylint: disable=import-outside-toplevel

  m = mjx.put_model(mj)
  d0 = mjx.make_data(m)

  def data(b: int | None) -> Any:
    if b is None:
      return d0.replace(**{k: jnp.asarray(v[0], dtype=dtype) for k, v in init.items()})
    d = jax.tree_util.tree_map(lambda x: jnp.broadcast_to(x, (b,) + x.shape), d0)
    return d.replace(**{k: jnp.asarray(v[:b], dtype=dtype) for k, v in init.items()})

  return _jax_engine(mjx.step, m, data(None), data, steps, batches, repeat, single)


def run_mujoco(mj: Any, init: dict[str, np.ndarray], steps: int, batches: list[int],
               repeat: int, loop: bool = True) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
  """MuJoCo C: (mj_step loop results or None where ``loop`` is false, mujoco.rollout results
  or None where the rollout module is missing)."""
  import mujoco  # pylint: disable=import-outside-toplevel

  def fresh(i: int) -> Any:
    d = mujoco.MjData(mj)
    for k, v in init.items():
      getattr(d, k)[:] = v[i]
    return d

  looped = _run_loop(mj, fresh, steps, batches, repeat) if loop else None

  try:
    from mujoco import rollout  # pylint: disable=import-outside-toplevel
  except ImportError:
    return looped, None
  nthread = os.cpu_count() or 1
  spec = mujoco.mjtState.mjSTATE_FULLPHYSICS
  state = np.zeros((max(batches), mujoco.mj_stateSize(mj, spec)))
  for i in range(max(batches)):
    mujoco.mj_getState(mj, fresh(i), state[i], spec)
  pool = rollout.Rollout(nthread=nthread)
  threads = [mujoco.MjData(mj) for _ in range(nthread)]
  rolled: dict[str, Any] = {"compile": None, "step": None, "nthread": nthread, "finite": True}
  for b in batches:
    # A preallocated output, as a training loop would keep, so allocation is not timed.
    out = np.empty((b, steps, state.shape[1]))
    # constant controls, tiled over the steps by rollout
    control = init["ctrl"][:b, None, :] if "ctrl" in init else None
    pool.rollout(mj, threads, state[:b], control, nstep=steps, state=out)
    rolled["finite"] &= bool(np.all(np.isfinite(out)))
    rolled[b] = b * steps / best(
        lambda b=b, out=out, control=control: pool.rollout(mj, threads, state[:b], control,
                                                          nstep=steps, state=out), repeat)
  pool.close()
  return looped, rolled


def _run_loop(mj: Any, fresh: Callable[[int], Any], steps: int, batches: list[int],
              repeat: int) -> dict[str, Any]:
  """``mj_step`` in a Python loop over steps and the batch's MjData (``fresh(i)``)."""
  import mujoco  # pylint: disable=import-outside-toplevel
  d = fresh(0)
  loop: dict[str, Any] = {"compile": None}
  loop["step"] = best(lambda: [mujoco.mj_step(mj, d) for _ in range(steps)], repeat) / steps
  finite = True
  for b in batches:
    datas = [fresh(i) for i in range(b)]

    def run_loop(datas=datas):
      for _ in range(steps):
        for d in datas:
          mujoco.mj_step(mj, d)

    loop[b] = b * steps / best(run_loop, repeat)
    finite &= all(np.all(np.isfinite(d.qpos)) for d in datas)
  loop["finite"] = finite
  return loop


def device_name() -> str:
  import jax  # pylint: disable=import-outside-toplevel
  dev = jax.devices()[0]
  cpu = platform.processor() or platform.machine()
  try:
    with open("/proc/cpuinfo", encoding="utf-8") as f:
      cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
  except (OSError, StopIteration):
    pass
  kind = dev.device_kind if dev.platform != "cpu" else cpu
  return f"{dev.platform}: {kind} ({os.cpu_count()} CPU cores)"


def _load_average() -> str:
  """The 1, 5 and 15 minute load averages: other work on the machine skews every timing."""
  return ", ".join(f"{x:.1f}" for x in os.getloadavg())


def _fmt(value: float | None, kind: str) -> str:
  if value is None:
    return "-"
  if kind == "s":
    return f"{value:.2f}"
  if kind == "us":
    return f"{value * 1e6:.1f}"
  return f"{value:,.0f}"


def main(argv: list[str] | None = None) -> int:
  """Runs the benchmark and prints the tables; returns the exit code."""
  args = parse_args(argv)
  models = [n for n in args.models.split(",") if n]
  batches = start(args, "contacts and constraints disabled; ctrl = 0")
  rng = np.random.default_rng(args.seed)
  rows: list[tuple[str, str, dict[str, Any]]] = []
  for name in models:
    mj = _smooth_model(model_path(name))
    print(f"\n{name}: nq={mj.nq} nv={mj.nv} nbody={mj.nbody} nu={mj.nu}", flush=True)
    init = {"qvel": 0.1 * rng.standard_normal((max(batches), mj.nv))}
    rows += measure_model(name, mj, init, args, batches)
  print(f"load average at end: {_load_average()}")
  print_tables(rows, batches)
  return 0 if all(r["finite"] for _, _, r in rows) else 1


def measure_model(name: str, mj: Any, init: dict[str, np.ndarray], args: argparse.Namespace,
                  batches: list[int]) -> list[tuple[str, str, dict[str, Any]]]:
  """Table rows of flexor, MJX and MuJoCo C (less those ``args.no_flexor``, ``no_mjx`` and
  ``no_c`` leave out) on one model, measured from the same initial Data fields ``init`` (arrays
  with a leading batch dimension)."""
  engines: list[tuple[str, Callable[[], Any]]] = []
  if not args.no_flexor:
    engines.append(
        ("flexor", lambda: run_flexor(mj, init, args.dtype, args.steps, batches, args.repeat,
                                      not args.no_single)))
  if not args.no_mjx:
    engines.append(("MJX", lambda: run_mjx(mj, init, args.dtype, args.steps, batches, args.repeat,
                                           not args.no_single)))
  rows = []
  for engine, measure in engines:
    t0 = time.perf_counter()
    try:
      rows.append((name, engine, measure()))
    except NotImplementedError as e:  # MJX has no PGS (gymnasium's humanoid asks for it)
      print(f"  {engine} cannot run {name}: {type(e).__name__} {e}", flush=True)
      continue
    print(f"  {engine} done in {time.perf_counter() - t0:.0f} s: "
          + ", ".join(f"{k} {_fmt(v, 'rate' if isinstance(k, int) else 's')}"
                      for k, v in rows[-1][2].items() if k in batches or k == "compile"),
          flush=True)
  if args.no_c:
    return rows
  t0 = time.perf_counter()
  loop, rolled = run_mujoco(mj, init, args.steps, batches, args.repeat, not args.no_c_loop)
  if loop is not None:
    rows.append((name, "MuJoCo C loop", loop))
  if rolled is not None:
    rows.append((name, f"MuJoCo C rollout x{rolled['nthread']}", rolled))
  print(f"  MuJoCo C done in {time.perf_counter() - t0:.0f} s", flush=True)
  return rows


def print_tables(rows: list[tuple[str, str, dict[str, Any]]], batches: list[int]) -> None:
  header = (["model", "engine", "compile s", "1-env us/step"]
            + [f"B={b} env-steps/s" for b in batches])
  table = [header]
  for name, engine, r in rows:
    label = engine if r["finite"] else f"{engine} (NaN in final state!)"
    table.append([name, label, _fmt(r["compile"], "s"), _fmt(r["step"], "us")]
                 + [_fmt(r[b], "rate") for b in batches])
  _print_markdown(table)
  if not any(engine == "flexor" for _, engine, _ in rows):
    return

  print("\nflexor relative to each engine (speed ratios: >1 means flexor is faster; "
        "compile: other's compile time / flexor's)")
  header = ["model", "versus", "compile", "1-env step"] + [f"B={b}" for b in batches]
  table = [header]
  for name, engine, r in rows:
    if engine == "flexor":
      continue
    fx = next(f for n, e, f in rows if n == name and e == "flexor")
    ratio = lambda key: "-" if r[key] is None or fx[key] is None else f"{r[key] / fx[key]:.2f}"
    table.append([name, engine, ratio("compile"), ratio("step")]
                 + [f"{fx[b] / r[b]:.2f}" for b in batches])
  _print_markdown(table)


def _print_markdown(table: list[list[str]]) -> None:
  widths = [max(len(row[i]) for row in table if i < len(row)) for i in range(len(table[0]))]
  for k, row in enumerate(table):
    print("| " + " | ".join(c.rjust(w) if k and i > 1 else c.ljust(w)
                            for i, (c, w) in enumerate(zip(row, widths))) + " |")
    if k == 0:
      print("|" + "|".join("-" * (w + 2) for w in widths) + "|")


if __name__ == "__main__":
  sys.exit(main())
