# %% [markdown]
# # Trajectory optimisation through contact: exact, smooth and distance gradients, and MJX
#
# A sphere on a rail, driven by a motor, must push a free block along a floor from x = 0.5 m to
# x = 0.7 m in 1.5 s (150 steps of 10 ms). The decision variables are the 150 motor forces, the
# loss is the squared error of the block's final x, and the optimiser is Adam on `jax.grad` of
# that loss through the whole rollout.
#
# The start is chosen to be hard in the way that matters: a constant 0.8 N leaves the pusher
# 7 cm short of the block, which never moves. In MuJoCo's contact model two bodies that do not
# touch have no constraint row between them, so near this start the loss does not depend on
# the controls at all: its gradient is exactly zero, and gradient descent cannot even begin.
# That is not a flaw of the derivative (the loss really is flat there); it is the reason
# flexor has `flexor.with_contact_gradient(m, mode, width)`:
#
# * `"exact"` (the default): MuJoCo's model and MuJoCo's gradient, zero before contact;
# * `"smooth"`: every contact becomes a soft layer `width` m thick whose force rises
#   continuously from zero at its outer edge; forces and gradients are smooth, but the physics
#   is no longer MuJoCo's;
# * `"distance"` ("contacts from distance", after Paulus et al., ICLR 2026): the motion stays
#   MuJoCo's and only the gradient comes from a surrogate in which pairs up to `width` apart
#   are pushed apart by a weak spring, so that they pass gradients before they touch.
#
# We run Adam in each mode, replay the optimised controls in MuJoCo itself (the C library), and
# compare with MJX, MuJoCo's own JAX port, on the same task. Set `FLEXOR_NOTEBOOK_SMALL=1` for
# fewer iterations and without a second MJX compile (the test suite does); the run time is
# dominated by compiling one gradient program per mode either way.

# %%
import os
import time

os.environ.setdefault("MUJOCO_GL", "egl")

import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import mujoco
import numpy as np
import optax

jax.config.update("jax_enable_x64", True)

import flexor
from flexor import demo, examples
from flexor.rollout import rollout

SMALL = os.environ.get("FLEXOR_NOTEBOOK_SMALL") == "1"
# Adam iterations for the modes that move the block, and for "exact" and MJX, whose gradient is
# zero (at small size one iteration shows it).
ITERATIONS, FLAT_ITERATIONS = (60, 1) if SMALL else (150, 150)
NSTEP = 150          # steps of 10 ms
TARGET = 0.7         # the block's final x, m
START = 0.8          # N, the constant force the controls start from
WIDTH = 0.1          # m, the soft layer of "smooth" and "distance"
RATE = 0.3           # Adam's learning rate, N per iteration
BLOCK_X, PUSHER_X = 1, 0  # qpos addresses: the pusher's slide, then the block's free joint

# %% [markdown]
# ## The scene
#
# The bundled example `block_push` (`flexor.examples.path("block_push")`), printed below: the
# pusher (blue, 1 kg) slides on a damped rail and its motor pushes it along x; the block
# (orange, 0.5 kg, friction 0.3) rests on the floor with its near face at x = 0.4 m, 0.32 m
# from the pusher's surface. The collision bits keep the pusher off the floor (it rides its
# rail) while the block touches both.

# %%
with open(examples.path("block_push")) as f:
  XML = f.read()
print(XML)
mj_model = mujoco.MjModel.from_xml_string(XML)
model = flexor.load_mjcf_string(XML)
print(f"nq {model.nq}, nv {model.nv}, nu {model.nu}; timestep {float(model.opt.timestep)} s")


def replay(u):
  """qpos after every step (NSTEP, nq) when MuJoCo C runs the controls u (NSTEP, 1)."""
  return demo.replay(mj_model, u)


u0 = jnp.full((NSTEP, 1), START, dtype=jnp.float64)
start_motion = replay(u0)
gap = 0.4 - (start_motion[:, PUSHER_X].max() + 0.08)
print(f"from {START} N: pusher stops {100 * gap:.1f} cm short of the block; block x "
      f"{start_motion[-1, BLOCK_X]:.4f} m")
assert gap > 0.05 and abs(start_motion[-1, BLOCK_X] - 0.5) < 1e-6

# %% [markdown]
# ## One optimiser for every mode
#
# `optimise(m)` compiles one program per model: the loss and its gradient through
# `flexor.rollout` (which also returns the trajectory, for the plots and frames) and Adam's
# update. Every call passes arrays of the same shapes and dtypes (float64 controls), so each
# mode compiles exactly once. It returns the loss at every iterate (the last one after the
# final update), the gradient at the start, and the best iterate: its loss, controls and
# trajectory. The best, not the last: Adam with a fixed step does not settle, and in
# "distance" mode the gradient is an estimate rather than the derivative of the loss, so the
# loss goes down on the whole but not at every iteration.

# %%
def optimise(m, iterations):
  d0 = flexor.make_data(m)
  adam = optax.adam(RATE)

  def loss(u):
    final, traj = rollout(m, d0, u, fields=("qpos",))
    return (final.qpos[BLOCK_X] - TARGET)**2, traj["qpos"]

  @jax.jit
  def update(u, state):
    (value, qpos), grad = jax.value_and_grad(loss, has_aux=True)(u)
    change, state = adam.update(grad, state)
    return optax.apply_updates(u, change), state, value, grad, qpos

  t0 = time.perf_counter()
  update = update.lower(u0, adam.init(u0)).compile()
  compile_s = time.perf_counter() - t0
  u, state, losses, best = u0, adam.init(u0), [], None
  t0 = time.perf_counter()
  for i in range(iterations + 1):
    new_u, state, value, grad, qpos = update(u, state)
    first_grad = grad if i == 0 else first_grad
    losses.append(float(value))
    if best is None or losses[-1] < best["loss"]:
      best = dict(loss=losses[-1], u=np.asarray(u), qpos=np.asarray(qpos), iteration=i)
    u = new_u
  run_s = time.perf_counter() - t0
  print(f"compile {compile_s:.1f} s, {iterations} iterations {run_s:.1f} s; "
        f"|grad| at start {float(jnp.linalg.norm(first_grad)):.2e}; loss {losses[0]:.2e} at "
        f"the start, {losses[-1]:.2e} at the end, best {best['loss']:.2e} (iteration "
        f"{best['iteration']})")
  return dict(losses=np.array(losses), first_grad=np.asarray(first_grad), last_u=np.asarray(u),
              **best)


results = {}

# %% [markdown]
# ## Exact: MuJoCo's gradient is zero, Adam stalls
#
# With MuJoCo's contact model the gradient at the start is zero in every one of its 150
# entries, so Adam's update is zero too and the controls never change.

# %%
results["exact"] = optimise(flexor.with_contact_gradient(model, "exact"),
                            FLAT_ITERATIONS)
exact = results["exact"]
assert not np.any(exact["first_grad"])
assert np.all(exact["losses"] == exact["losses"][0])
assert np.all(exact["last_u"] == np.asarray(u0))
print(f"block x stays {exact['qpos'][-1, BLOCK_X]:.4f} m")

# %% [markdown]
# ## Distance: MuJoCo's motion, a gradient before contact
#
# In `"distance"` mode the rollout's values are the exact ones; only the derivative of each
# step comes from the surrogate, in which the pusher feels a weak spring (time constant 0.2 s)
# from 10 cm away. The gradient at the start is small but non-zero and says "push harder";
# once the pusher touches the block the surrogate's contact is MuJoCo's own and the gradient
# steers the push.

# %%
results["distance"] = optimise(flexor.with_contact_gradient(model, "distance", WIDTH),
                               ITERATIONS)
distance = results["distance"]
x_distance = distance["qpos"][-1, BLOCK_X]
print(f"block x {x_distance:.6f} m (target {TARGET}): "
      f"{1e3 * abs(x_distance - TARGET):.3f} mm off")
assert np.sum(distance["first_grad"]) < 0 and np.all(np.isfinite(distance["first_grad"]))
assert abs(x_distance - TARGET) < 0.01

# %% [markdown]
# Because the forward motion is MuJoCo's, the controls Adam found work in MuJoCo itself: replayed
# step by step in the C library, they move the block to the same place. The two agree to
# rounding because flexor's exact physics is conformant with MuJoCo's (the test suite compares
# them stage by stage), and "distance" does not change it.

# %%
distance_mj = replay(distance["u"])
agreement = abs(distance_mj[-1, BLOCK_X] - x_distance)
trajectory_agreement = np.max(np.abs(distance_mj - distance["qpos"]))
print(f"MuJoCo C: block x {distance_mj[-1, BLOCK_X]:.9f} m, flexor {x_distance:.9f} m; "
      f"|difference| {agreement:.1e} m (whole trajectory: {trajectory_agreement:.1e})")
assert agreement < 1e-8 and trajectory_agreement < 1e-7

# %% [markdown]
# ## Smooth: it converges too, in different physics
#
# `"smooth"` differentiates its own motion exactly (its gradients agree with finite
# differences), and its loss is smooth in the controls, so Adam converges as it does in
# "distance" mode, and from a slightly different start: the pusher already reaches 3 cm
# into the block's layer and nudges it. But its physics is different: contact forces act up to
# 10 cm before the surfaces meet, so the pusher shoves the block through the layer without
# touching it, and the block floats about 7 cm above the floor, carried by the floor's layer,
# with the friction that layer gives. Replaying its controls in MuJoCo shows the cost: they are
# tuned to a world that MuJoCo does not simulate.

# %%
results["smooth"] = optimise(flexor.with_contact_gradient(model, "smooth", WIDTH), ITERATIONS)
smooth = results["smooth"]
x_smooth = smooth["qpos"][-1, BLOCK_X]
smooth_mj = replay(smooth["u"])
deviation = abs(smooth_mj[-1, BLOCK_X] - x_smooth)
print(f"smooth: block x {x_smooth:.6f} m, z {smooth['qpos'][-1, 3]:.3f} m in its own physics; "
      f"MuJoCo C, same controls: x {smooth_mj[-1, BLOCK_X]:.4f} m, {100 * deviation:.1f} cm "
      f"from where smooth mode puts it")
assert abs(x_smooth - TARGET) < 0.01
assert deviation > 0.05

# %% [markdown]
# The trade-off: "smooth" gives exact gradients of a smoother, different model, which suits
# problems where that model is what you want (a compliant contact, or a continuation scheme
# that shrinks the width towards zero); "distance" keeps MuJoCo's motion and gives a gradient
# that is only an estimate (the derivative of a nearby surrogate), at the cost of a second
# collision and constraint solve per step, and its controls transfer to MuJoCo unchanged.

# %% [markdown]
# ## MJX: also zero
#
# MJX (`mujoco.mjx`) is MuJoCo's own JAX implementation. We put the same `MjModel` on the
# device and write the same rollout, a `jax.lax.scan` over `mjx.step` that sets `ctrl` before
# each step, and the same loss.
#
# One wrinkle first: MJX's constraint solver iterates in a `jax.lax.while_loop` (until its
# tolerance is met), and reverse mode cannot differentiate a `while_loop`, so `jax.grad` of this
# loss fails with MJX's default settings ("Reverse-mode differentiation does not work for
# lax.while_loop"). MJX skips the loop when `opt.iterations == 1`, and that is the usual way to
# get a reverse-mode gradient through it, but one solver iteration is a different physics once
# bodies press on each other (measured below, at full size). Forward mode does differentiate a `while_loop`,
# and `jax.jacfwd` gives the same gradient as `jax.grad` would (150 directional derivatives, one
# per control, batched), so we use it for MJX as it is, and check `jax.grad` of the
# one-iteration variant as well.
#
# Both are zero at the start (to rounding: about 1e-22, against 1e-5 for flexor's "distance"
# gradient), for the same reason as MuJoCo's: no contact row exists between the pusher and the
# block. Every MuJoCo-style engine shares this.

# %%
from mujoco import mjx


def mjx_task(iterations=None):
  """(block x after the rollout, loss) of the controls in MJX; ``iterations`` overrides the
  solver's iteration count."""
  mm = mujoco.MjModel.from_xml_string(XML)
  if iterations is not None:
    mm.opt.iterations = iterations
  mx = mjx.put_model(mm)
  d0 = mjx.make_data(mx)

  def loss(u):
    def body(d, ctrl):
      return mjx.step(mx, d.replace(ctrl=ctrl)), None
    final, _ = jax.lax.scan(body, d0, u)
    x = final.qpos[BLOCK_X]
    return (x - TARGET)**2, x

  return loss


mjx_loss = mjx_task()
adam = optax.adam(RATE)


def mjx_loss_and_aux(u):
  value, x = mjx_loss(u)
  return value, (value, x)


@jax.jit
def mjx_update(u, state):
  # jacfwd returns the gradient and the aux output (loss, block x) of the same rollout.
  grad, (value, x) = jax.jacfwd(mjx_loss_and_aux, has_aux=True)(u)
  change, state = adam.update(grad, state)
  return optax.apply_updates(u, change), state, value, grad, x


t0 = time.perf_counter()
mjx_update = mjx_update.lower(u0, adam.init(u0)).compile()
print(f"MJX forward-mode gradient: compile {time.perf_counter() - t0:.1f} s")
mjx_u, state, mjx_losses = u0, adam.init(u0), []
for i in range(FLAT_ITERATIONS + 1):
  new_u, state, value, grad, mjx_x = mjx_update(mjx_u, state)
  mjx_first_grad = grad if i == 0 else mjx_first_grad
  mjx_losses.append(float(value))
  mjx_u = new_u if i < FLAT_ITERATIONS else mjx_u
mjx_losses = np.array(mjx_losses)
mjx_grad_norm = float(jnp.linalg.norm(mjx_first_grad))
print(f"MJX: loss {mjx_losses[0]:.6e} (MuJoCo C {(start_motion[-1, BLOCK_X] - TARGET)**2:.6e}); "
      f"|grad| at start {mjx_grad_norm:.1e}; loss after {FLAT_ITERATIONS} Adam iterations "
      f"{mjx_losses[-1]:.6e}")
assert abs(mjx_losses[0] - (start_motion[-1, BLOCK_X] - TARGET)**2) < 1e-9
assert mjx_grad_norm < 1e-15
assert np.all(np.abs(mjx_losses - mjx_losses[0]) < 1e-12)

# %% [markdown]
# `jax.grad` through MJX with one solver iteration: zero at the start too. The same compiled
# function evaluated at a constant 3 N, which presses the pusher into the block, shows why one
# iteration is not MJX's physics: the block ends far from where MuJoCo C and MJX's default
# solver put it. This cell is a second MJX compile, so it runs at full size only (with
# `FLEXOR_NOTEBOOK_SMALL=1` it is skipped).

# %%
if not SMALL:
  mjx_grad_1 = jax.jit(jax.value_and_grad(mjx_task(iterations=1), has_aux=True))
  t0 = time.perf_counter()
  (value, _), grad = mjx_grad_1(u0)
  print(f"MJX, 1 solver iteration, reverse mode: compile and run {time.perf_counter() - t0:.1f} "
        f"s; |grad| at start {float(jnp.linalg.norm(grad)):.1e}")
  assert float(jnp.linalg.norm(grad)) < 1e-15 and abs(float(value) - mjx_losses[0]) < 1e-9

  press = jnp.full((NSTEP, 1), 3.0, dtype=jnp.float64)
  x_mj = replay(press)[-1, BLOCK_X]
  x_mjx = float(mjx_update(press, adam.init(press))[4])
  x_mjx_1 = float(mjx_grad_1(press)[0][1])
  print(f"a constant 3 N moves the block to x = {x_mj:.6f} m in MuJoCo C, {x_mjx:.6f} m in MJX, "
        f"{x_mjx_1:.4f} m in MJX with one solver iteration")
  assert abs(x_mjx - x_mj) < 1e-6 and abs(x_mjx_1 - x_mj) > 0.05

# %% [markdown]
# ## Loss curves and the motion found
#
# Left: the loss per Adam iteration. "exact" and MJX stay flat at (0.2 m)², "distance" and
# "smooth" descend (each in its own physics; the crosses mark what their best controls give
# when MuJoCo C runs them). Right: the block's and the pusher's x over time with the best
# controls, flexor beside the MuJoCo replay.

# %%
fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(12, 4))
colors = {"exact": "C3", "smooth": "C2", "distance": "C0"}
for name, r in results.items():
  ax0.semilogy(r["losses"], color=colors[name], label=f"flexor {name}")
ax0.semilogy(mjx_losses, "k--", label="MJX")
final = {"distance": distance_mj[-1, BLOCK_X], "smooth": smooth_mj[-1, BLOCK_X]}
for name, x in final.items():
  ax0.semilogy([results[name]["iteration"]], [(x - TARGET)**2], "x", ms=10,
               color=colors[name], label=f"{name}'s controls in MuJoCo C")
ax0.set(xlabel="Adam iteration", ylabel="(block x - 0.7 m)²")
ax0.grid(alpha=0.3)
ax0.legend(fontsize=8)
t = 0.01 * np.arange(1, NSTEP + 1)
for name, own, mj in (("distance", distance["qpos"], distance_mj),
                      ("smooth", smooth["qpos"], smooth_mj)):
  ax1.plot(t, own[:, BLOCK_X], color=colors[name], label=f"{name}: block (flexor)")
  ax1.plot(t, mj[:, BLOCK_X], ":", color=colors[name], lw=2.5, label=f"{name}: block (MuJoCo C)")
  ax1.plot(t, own[:, PUSHER_X], color=colors[name], alpha=0.4, label=f"{name}: pusher (flexor)")
ax1.axhline(TARGET, color="k", lw=1)
ax1.set(xlabel="time (s)", ylabel="x (m)")
ax1.grid(alpha=0.3)
ax1.legend(fontsize=7)
plt.show()

# %% [markdown]
# The motion "distance" found is not a gentle push. The loss asks only where the block is at
# 1.5 s, and Adam's controls draw the pusher back first, then drive it into the block late and
# hard, so that the block slides (and tips) onto the target just at the end; a loss that also
# asked for the block to come to rest would give a calmer motion. The frames below are rendered
# by MuJoCo's renderer from flexor's states (where an OpenGL backend is available;
# `MUJOCO_GL=egl` is the headless default here); the green line marks the target for the
# block's centre.

# %%
def mark_target(scene):
  """Adds a green line on the floor at the block's target x to a frame's scene."""
  mujoco.mjv_initGeom(scene.geoms[scene.ngeom], mujoco.mjtGeom.mjGEOM_BOX,
                      np.array([0.004, 0.25, 0.001]), np.array([TARGET, 0.0, 0.001]),
                      np.eye(3).flatten(), np.array([0.1, 0.7, 0.1, 1.0], np.float32))
  scene.ngeom += 1


camera = mujoco.MjvCamera()
camera.lookat[:] = (0.3, 0.0, 0.05)
camera.distance, camera.elevation, camera.azimuth = 1.25, -25.0, 90.0

# The initial state, then the state after each of the chosen steps; denser where it hits.
STEPS = [0, 40, 80, 120, 130, 140, 150]
states = np.vstack([np.asarray(flexor.make_data(model).qpos)[None], distance["qpos"]])
demo.show_frames(mj_model, states[STEPS], camera, 200, 320,
                 "distance mode's best controls, t = "
                 + ", ".join(f"{0.01 * k:.1f}" for k in STEPS) + " s",
                 (16, 1.9), decorate=mark_target)

# %% [markdown]
# ## Summary

# %%
print(f"{'method':<22}{'|grad| at start':>16}{'best loss':>12}{'block x':>10}{'in MuJoCo C':>13}")
rows = [("flexor exact", exact, exact["qpos"][-1, BLOCK_X], start_motion[-1, BLOCK_X]),
        ("flexor smooth 0.1", smooth, x_smooth, smooth_mj[-1, BLOCK_X]),
        ("flexor distance 0.1", distance, x_distance, distance_mj[-1, BLOCK_X])]
for name, r, x, x_mj in rows:
  print(f"{name:<22}{np.linalg.norm(r['first_grad']):>16.2e}{r['loss']:>12.2e}"
        f"{x:>10.4f}{x_mj:>13.4f}")
print(f"{'MJX':<22}{mjx_grad_norm:>16.2e}{mjx_losses.min():>12.2e}{float(mjx_x):>10.4f}"
      f"{replay(mjx_u)[-1, BLOCK_X]:>13.4f}")
