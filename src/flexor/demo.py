"""``flexor demo``: trajectory optimisation of the bundled muscle arm, by gradients through flexor.

Six muscles on wrapping tendons must bring the arm from rest to a target pose and hold it there:
the controls of every step (excitations in [0, 1], through a sigmoid) are optimised with Adam on
the gradient of a loss over the whole rollout, computed by reverse mode through the muscles'
activation dynamics, their force-length-velocity curves, the tendons' wrapping and the joints'
limits. The command shows a progress bar, prints the loss curve, writes a PNG of the loss, the
joint angles and the muscle excitations, and, where MuJoCo and an OpenGL backend are installed,
a strip of frames of the optimised motion rendered by MuJoCo's renderer from flexor's states.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any, Callable, TextIO

import jax
import jax.numpy as jnp
import numpy as np
import optax

import flexor
from flexor import examples

MODEL = "muscle_arm"
TARGET = (1.0, 1.4)       # shoulder and elbow angles to reach, rad
HOLD = 0.25               # the last quarter of the horizon is spent holding the target
EFFORT = 1e-3             # weight of the mean squared excitation
VELOCITY = 1e-2           # weight of the squared joint velocity while holding


@dataclass
class Result:
  """What ``optimise`` returns: the loss per iteration and the optimised rollout."""
  losses: np.ndarray      # (iterations,)
  ctrl: np.ndarray        # (horizon, nu) excitations
  qpos: np.ndarray        # (horizon, nq) after each step
  timestep: float         # s
  compile_s: float
  run_s: float


def _loss_fn(m: flexor.Model, horizon: int):
  """The loss of control logits (horizon, nu): squared angle error and velocity over the hold
  phase, plus the effort; returns (loss, trajectory)."""
  d0 = flexor.make_data(m)
  target = jnp.asarray(TARGET, dtype=d0.qpos.dtype)
  hold = int(round(horizon * (1 - HOLD)))

  def loss(logits: jax.Array):
    ctrl = jax.nn.sigmoid(logits)
    _, traj = flexor.rollout(m, d0, ctrl, fields=("qpos", "qvel"))
    error = jnp.mean(jnp.sum((traj["qpos"][hold:] - target[None, :]) ** 2, axis=-1))
    still = jnp.mean(jnp.sum(traj["qvel"][hold:] ** 2, axis=-1))
    return error + VELOCITY * still + EFFORT * jnp.mean(ctrl ** 2), traj

  return loss


def optimise(iterations: int, horizon: int, learning_rate: float, progress: Any = None) -> Result:
  """Runs Adam on the muscle arm's control logits; ``progress(i, loss)`` is called each step."""
  m = flexor.load_mjcf(examples.path(MODEL), dtype=jnp.float32)
  loss = _loss_fn(m, horizon)
  optimiser = optax.adam(learning_rate)

  def update(logits: jax.Array, state: Any):
    (value, _), grad = jax.value_and_grad(loss, has_aux=True)(logits)
    change, state = optimiser.update(grad, state)
    return optax.apply_updates(logits, change), state, value

  logits = jnp.full((horizon, m.nu), -2.0, dtype=jnp.float32)  # excitations of 0.12 at start
  state = optimiser.init(logits)
  start = time.perf_counter()
  update = jax.jit(update).lower(logits, state).compile()
  compile_s = time.perf_counter() - start
  losses = []
  start = time.perf_counter()
  for i in range(iterations):
    logits, state, value = update(logits, state)
    losses.append(float(value))
    if progress is not None:
      progress(i, losses[-1])
  run_s = time.perf_counter() - start
  _, traj = jax.jit(loss)(logits)
  return Result(np.asarray(losses), np.asarray(jax.nn.sigmoid(logits)), np.asarray(traj["qpos"]),
                float(m.opt.timestep), compile_s, run_s)


def loss_curve(losses: np.ndarray, rows: int = 8) -> str:
  """The loss per iteration as a text plot of ``rows`` lines, log scale."""
  logs = np.log10(losses)
  low, high = logs.min(), logs.max()
  cols = min(len(losses), 60)
  picks = logs[np.linspace(0, len(losses) - 1, cols).round().astype(int)]
  levels = np.round((picks - low) / max(high - low, 1e-12) * (rows - 1)).astype(int)
  lines = []
  for r in range(rows - 1, -1, -1):
    label = f"{10 ** (low + (high - low) * r / (rows - 1)):9.2e} |"
    lines.append(label + "".join("*" if lv == r else " " for lv in levels))
  lines.append(" " * 10 + "+" + "-" * cols)
  lines.append(" " * 11 + f"iteration 0 .. {len(losses) - 1}")
  return "\n".join(lines)


def plot(result: Result, path: str) -> None:
  """Writes a PNG: loss per iteration, joint angles against the target, muscle excitations."""
  import matplotlib  # pylint: disable=import-outside-toplevel
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel

  time_s = result.timestep * np.arange(1, len(result.qpos) + 1)
  fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
  axes[0].semilogy(result.losses)
  axes[0].set(title="loss", xlabel="Adam iteration")
  for j, name in enumerate(("shoulder", "elbow")):
    line, = axes[1].plot(time_s, result.qpos[:, j], label=name)
    axes[1].axhline(TARGET[j], color=line.get_color(), linestyle=":")
  axes[1].axvspan(time_s[-1] * (1 - HOLD), time_s[-1], color="0.9")
  axes[1].set(title="joint angles (dotted: target)", xlabel="time (s)", ylabel="rad")
  axes[1].legend()
  image = axes[2].imshow(result.ctrl.T, aspect="auto", vmin=0, vmax=1, cmap="viridis",
                         extent=(0, time_s[-1], result.ctrl.shape[1] - 0.5, -0.5))
  axes[2].set(title="muscle excitations", xlabel="time (s)",
              yticks=range(6), yticklabels=("SF", "SE", "EF", "EE", "BF", "BE"))
  fig.colorbar(image, ax=axes[2])
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)


def render_frames(mj_model: Any, qpos: np.ndarray, camera: Any, height: int, width: int,
                  decorate: Callable[[Any], None] | None = None) -> np.ndarray | str:
  """The states ``qpos`` (frames, nq) rendered by MuJoCo's renderer side by side, an image
  (height, frames * width, 3); or why not (a message) when no OpenGL context can be made.

  ``camera`` is an ``mujoco.MjvCamera``; ``decorate(scene)``, if given, may add geoms to each
  frame's ``mjvScene`` before it is rendered.
  """
  import mujoco  # pylint: disable=import-outside-toplevel
  try:
    renderer = mujoco.Renderer(mj_model, height, width)
  except Exception as e:  # pylint: disable=broad-except
    return f"{type(e).__name__}: {e}"
  mj_data = mujoco.MjData(mj_model)
  images = []
  for q in qpos:
    mj_data.qpos[:] = q
    mujoco.mj_forward(mj_model, mj_data)
    renderer.update_scene(mj_data, camera)
    if decorate is not None:
      decorate(renderer.scene)
    images.append(renderer.render())
  renderer.close()
  return np.concatenate(images, axis=1)


def show_frames(mj_model: Any, qpos: np.ndarray, camera: Any, height: int, width: int,
                title: str, figsize: tuple[float, float],
                decorate: Callable[[Any], None] | None = None) -> None:
  """Shows ``render_frames``'s strip of the states ``qpos`` (frames, nq) in a matplotlib figure
  titled ``title``, or prints why no frames could be rendered (notebooks call this)."""
  import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
  strip = render_frames(mj_model, qpos, camera, height, width, decorate)
  if isinstance(strip, str):
    print(f"frames not rendered ({strip})")
    return
  plt.figure(figsize=figsize)
  plt.imshow(strip)
  plt.axis("off")
  plt.title(title)
  plt.show()


def replay(mj_model: Any, ctrl: np.ndarray, qpos0: np.ndarray | None = None) -> np.ndarray:
  """qpos after every step (nstep, nq) when MuJoCo C runs the controls ``ctrl`` (nstep, nu) from
  rest at ``qpos0`` (default: the model's qpos0): the check that flexor's optimised controls
  do the same in the reference engine."""
  import mujoco  # pylint: disable=import-outside-toplevel
  data = mujoco.MjData(mj_model)
  if qpos0 is not None:
    data.qpos[:] = qpos0
  qpos = []
  for u in np.asarray(ctrl):
    data.ctrl[:] = u
    mujoco.mj_step(mj_model, data)
    qpos.append(data.qpos.copy())
  return np.array(qpos)


def render_strip(result: Result, path: str, frames: int = 6, size: int = 240) -> str | None:
  """Renders ``frames`` states of the optimised motion side by side with MuJoCo's renderer into a
  PNG; returns why not (a message) when MuJoCo or an OpenGL context is unavailable."""
  os.environ.setdefault("MUJOCO_GL", "egl")
  try:
    import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
    import mujoco  # pylint: disable=import-outside-toplevel
    mj_model = mujoco.MjModel.from_xml_path(examples.path(MODEL))
  except Exception as e:  # pylint: disable=broad-except
    return f"{type(e).__name__}: {e}"
  camera = mujoco.MjvCamera()
  camera.lookat[:] = (0.3, 0.3, 0.0)
  camera.distance, camera.elevation, camera.azimuth = 2.2, -90.0, 90.0
  steps = np.linspace(0, len(result.qpos) - 1, frames).round().astype(int)
  strip = render_frames(mj_model, np.asarray(result.qpos)[steps], camera, size, size)
  if isinstance(strip, str):
    return strip
  plt.imsave(path, strip)
  return None


def run(iterations: int, horizon: int, learning_rate: float, out_dir: str, out: TextIO,
        err: TextIO) -> int:
  """The ``flexor demo`` command; returns its exit code."""
  from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn  # pylint: disable=import-outside-toplevel

  print(f"trajectory optimisation: the bundled {MODEL} (6 muscles, 2 joints) from rest to "
        f"shoulder {TARGET[0]} rad, elbow {TARGET[1]} rad; {horizon} steps, "
        f"{iterations} Adam iterations on {horizon * 6} excitations, {jax.devices()[0].platform}",
        file=out)
  out.flush()
  columns = (TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/"
             "{task.total}"), TextColumn("loss {task.fields[loss]:.3e}"), TimeRemainingColumn())
  with Progress(*columns, transient=False, console=_console(err)) as bar:
    task = bar.add_task("compiling jit(grad) of the rollout", total=iterations, loss=float("nan"))

    def progress(i: int, loss: float) -> None:
      bar.update(task, completed=i + 1, loss=loss, description="optimising")

    result = optimise(iterations, horizon, learning_rate, progress)
  print(f"compile: {result.compile_s:.1f} s   {iterations} iterations: {result.run_s:.1f} s "
        f"({1e3 * result.run_s / iterations:.1f} ms per gradient of a {horizon}-step rollout)",
        file=out)
  print("loss curve:\n" + loss_curve(result.losses), file=out)
  final = result.qpos[-1]
  print(f"loss {result.losses[0]:.3e} -> {result.losses[-1]:.3e}; final angles "
        f"{final[0]:.3f}, {final[1]:.3f} rad (target {TARGET[0]}, {TARGET[1]})", file=out)
  os.makedirs(out_dir, exist_ok=True)
  plot_path = os.path.join(out_dir, "flexor_demo.png")
  plot(result, plot_path)
  print(f"plot: {plot_path}", file=out)
  strip_path = os.path.join(out_dir, "flexor_demo_frames.png")
  why_not = render_strip(result, strip_path)
  print(f"frames: {strip_path}" if why_not is None else f"frames: not rendered ({why_not})",
        file=out)
  # A failed optimisation (no descent, or NaN) is an error, so the command doubles as a check.
  return 0 if result.losses[-1] < result.losses[0] else 1


def _console(stream: TextIO) -> Any:
  from rich.console import Console  # pylint: disable=import-outside-toplevel
  return Console(file=stream)
