# %% [markdown]
# # Trajectory optimisation with optax: a cart-pole swing-up and a muscle arm's reach
#
# Two open-loop problems solved by plain gradient descent through whole flexor rollouts:
#
# * **cart-pole swing-up**: the 300 motor commands (3 s at 10 ms) that swing the pole of the
#   bundled `cartpole` from hanging down to upright and hold it there;
# * **muscle arm reach**: the 6 x 160 muscle excitations (0.8 s at 5 ms) that bring the hand of
#   the bundled `muscle_arm` to a point in the plane and keep it there, through MuJoCo's muscle
#   activation dynamics, force-length-velocity curves and tendons wrapping around the joints.
#
# In both the decision variables are unconstrained logits squashed into the control range
# (`tanh` for the cart, `sigmoid` for the excitations), the loss is a function of the whole
# trajectory, and the optimiser is Adam (optax) on `jax.value_and_grad` of the loss through
# `flexor.rollout`. Each result is replayed in MuJoCo C with the same controls: the open-loop
# motion flexor optimised is the motion MuJoCo produces. Frames are rendered by MuJoCo's
# renderer from flexor's states where an OpenGL backend is available.
#
# Both problems are small enough that the notebook has one size: once the two gradient programs
# are compiled (10-20 s each on a laptop-class CPU), their Adam iterations take seconds, so the
# test suite runs it as it is (`FLEXOR_NOTEBOOK_SMALL` changes nothing here).

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
from flexor import examples
from flexor.demo import replay, show_frames
from flexor.kinematics import kinematics

CARTPOLE_ITERATIONS = 500
ARM_ITERATIONS = 200

# %% [markdown]
# ## One optimiser for both problems
#
# `optimise(loss, x0, schedule, iterations)` compiles the loss, its gradient and Adam's update
# into one program, then iterates it. `loss(x)` returns the scalar and the trajectory (for the
# plots), so each iteration costs one forward rollout and one reverse pass. `flexor.demo.replay`
# runs controls in MuJoCo C and returns qpos after every step, for the comparison with flexor.

# %%
def optimise(loss, x0, schedule, iterations):
  adam = optax.adam(schedule)

  @jax.jit
  def update(x, state):
    (value, traj), grad = jax.value_and_grad(loss, has_aux=True)(x)
    change, state = adam.update(grad, state)
    return optax.apply_updates(x, change), state, value

  t0 = time.perf_counter()
  update = update.lower(x0, adam.init(x0)).compile()
  compile_s = time.perf_counter() - t0
  x, state, losses = x0, adam.init(x0), []
  t0 = time.perf_counter()
  for _ in range(iterations):
    x, state, value = update(x, state)
    losses.append(float(value))
  run_s = time.perf_counter() - t0
  final, traj = jax.jit(loss)(x)
  losses.append(float(final))
  print(f"compile {compile_s:.1f} s; {iterations} iterations {run_s:.1f} s "
        f"({1e3 * run_s / iterations:.0f} ms per gradient); loss {losses[0]:.3e} -> "
        f"{losses[-1]:.3e}")
  return x, np.array(losses), traj



# %% [markdown]
# ## Cart-pole swing-up
#
# The pole hangs down (angle pi; 0 is upright), the cart is at the centre of its 1.8 m rail, and
# the motor pushes it with at most 10 N: too weak to lift the pole directly, so the controls
# must pump energy into the swing. The loss asks for the pole to be upright
# (`1 - cos(angle)`, which also accepts a full turn) and still, with the cart near the centre,
# over the last second; a small weight on being upright throughout shapes the swing, and a
# tiny effort term keeps the commands tidy. The controls start as small random commands, and
# the learning rate decays from 0.1 to 0.002 over the run.

# %%
cartpole_xml = examples.path("cartpole")
cp_model = flexor.load_mjcf(cartpole_xml)
cp_mj = mujoco.MjModel.from_xml_path(cartpole_xml)
CP_NSTEP, CP_HOLD = 300, 200        # steps of 10 ms; the hold phase starts at step 200
cp_qpos0 = np.array([0.0, np.pi])
cp_d0 = flexor.make_data(cp_model).replace(qpos=jnp.asarray(cp_qpos0))


def cartpole_loss(theta):
  ctrl = jnp.tanh(theta)[:, None]
  _, traj = flexor.rollout(cp_model, cp_d0, ctrl, fields=("qpos", "qvel"))
  q, v = traj["qpos"], traj["qvel"]
  down = 1.0 - jnp.cos(q[:, 1])
  hold = down + 0.05 * v[:, 1]**2 + 0.05 * v[:, 0]**2 + 0.1 * q[:, 0]**2
  loss = jnp.mean(hold[CP_HOLD:]) + 0.1 * jnp.mean(down) + 1e-3 * jnp.mean(ctrl**2)
  return loss, traj


theta0 = 0.1 * jax.random.normal(jax.random.PRNGKey(0), (CP_NSTEP,), jnp.float64)
theta, cp_losses, cp_traj = optimise(
    cartpole_loss, theta0, optax.cosine_decay_schedule(0.1, CARTPOLE_ITERATIONS, 0.02),
    CARTPOLE_ITERATIONS)
cp_ctrl = np.tanh(np.asarray(theta))[:, None]
cp_q = np.asarray(cp_traj["qpos"])
cp_mj_q = replay(cp_mj, cp_ctrl, cp_qpos0)
cos_up = np.cos(cp_q[-50:, 1])
print(f"pole angle at the end {cp_q[-1, 1]:.3f} rad (upright at 2 pi = {2 * np.pi:.3f}); "
      f"cos(angle) over the last half second >= {cos_up.min():.3f}; cart at {cp_q[-1, 0]:+.3f} m")
print(f"MuJoCo C replay: max |qpos difference| {np.abs(cp_mj_q - cp_q).max():.1e}")
assert cp_losses[-1] < 0.15 * cp_losses[0]
assert cos_up.min() > 0.95 and np.cos(cp_q[-1, 1]) > 0.99
assert np.abs(cp_mj_q - cp_q).max() < 1e-8

# %% [markdown]
# Left: the loss per Adam iteration. Middle: the pole angle and the cart's position over time;
# the grey band is the hold phase. Right: the optimised motor commands. The optimiser finds a
# swing-up with one pump: the cart swings the pole a little one way, then back the other way
# and higher, and from there the pole rises to upright (angle 2 pi, the same as 0) while the cart
# runs under it and catches it near the centre of the rail. MuJoCo's replay of the same commands
# lies on top of flexor's trajectory.

# %%
t = 0.01 * np.arange(1, CP_NSTEP + 1)
fig, axes = plt.subplots(1, 3, figsize=(14, 3.6))
axes[0].semilogy(cp_losses)
axes[0].set(title="cart-pole: loss", xlabel="Adam iteration")
axes[1].plot(t, cp_q[:, 1], label="pole angle (flexor)")
axes[1].plot(t, cp_mj_q[:, 1], ":", lw=2.5, label="pole angle (MuJoCo C)")
axes[1].plot(t, cp_q[:, 0], label="cart x, m")
axes[1].axhline(2 * np.pi, color="k", lw=0.8)
axes[1].axvspan(0.01 * CP_HOLD, t[-1], color="0.9")
axes[1].set(title="trajectory", xlabel="time (s)")
axes[1].legend(fontsize=8)
axes[2].plot(t, cp_ctrl[:, 0])
axes[2].set(title="motor command (x 10 N)", xlabel="time (s)", ylim=(-1.05, 1.05))
fig.tight_layout()
plt.show()

# %%
camera = mujoco.MjvCamera()
camera.lookat[:] = (0.0, 0.0, 1.2)
camera.distance, camera.elevation, camera.azimuth = 3.2, 0.0, 90.0
CP_FRAMES = [0, 50, 110, 150, 175, 200, 225, 300]
states = np.vstack([cp_qpos0[None], cp_q])
show_frames(cp_mj, states[CP_FRAMES], camera, 200, 200,
            "t = " + ", ".join(f"{0.01 * k:.2f}" for k in CP_FRAMES) + " s", (16, 2.2))

# %% [markdown]
# ## Muscle arm reach
#
# The arm starts at rest with both joints at 0 (stretched along x); the target is the hand
# position of the posture (shoulder 0.6 rad, elbow 1.5 rad), computed by flexor's kinematics.
# The hand is the far end of the forearm, 0.5 m along its x axis. The loss is the squared
# distance of the hand from the target over the last quarter of the horizon, its speed there
# (as joint velocities), and the mean squared excitation; the excitations start at 0.12.

# %%
arm_xml = examples.path("muscle_arm")
arm_model = flexor.load_mjcf(arm_xml)
arm_mj = mujoco.MjModel.from_xml_path(arm_xml)
ARM_NSTEP = 160                           # steps of 5 ms
ARM_HOLD = ARM_NSTEP - ARM_NSTEP // 4     # the hold phase: the last quarter
forearm = arm_model.name2id("body", "forearm")
arm_d0 = flexor.make_data(arm_model)


def hand(qpos):
  """The hand's position (3,) in m at the posture ``qpos`` (2,)."""
  d = kinematics(arm_model, arm_d0.replace(qpos=qpos))
  return d.xpos[forearm] + d.xmat[forearm] @ jnp.array([0.5, 0.0, 0.0])


target = hand(jnp.array([0.6, 1.5]))
print(f"target {np.asarray(target[:2]).round(4)} m; hand at the start "
      f"{np.asarray(hand(arm_d0.qpos)[:2]).round(4)} m")


def arm_loss(logits):
  ctrl = jax.nn.sigmoid(logits)
  _, traj = flexor.rollout(arm_model, arm_d0, ctrl, fields=("qpos", "qvel", "act"))
  hands = jax.vmap(hand)(traj["qpos"])
  error = jnp.mean(jnp.sum((hands[ARM_HOLD:] - target)**2, axis=-1))
  still = jnp.mean(jnp.sum(traj["qvel"][ARM_HOLD:]**2, axis=-1))
  return error + 1e-3 * still + 1e-3 * jnp.mean(ctrl**2), {**traj, "hand": hands}


logits0 = jnp.full((ARM_NSTEP, arm_model.nu), -2.0, jnp.float64)
logits, arm_losses, arm_traj = optimise(arm_loss, logits0, 0.1, ARM_ITERATIONS)
arm_ctrl = np.asarray(jax.nn.sigmoid(logits))
arm_q = np.asarray(arm_traj["qpos"])
arm_mj_q = replay(arm_mj, arm_ctrl, np.zeros(2))
miss = np.linalg.norm(np.asarray(arm_traj["hand"])[ARM_HOLD:] - np.asarray(target), axis=-1)
print(f"hand to target over the hold phase: mean {100 * miss.mean():.2f} cm, "
      f"max {100 * miss.max():.2f} cm; final posture {arm_q[-1].round(3)} rad")
print(f"MuJoCo C replay: max |qpos difference| {np.abs(arm_mj_q - arm_q).max():.1e}")
assert arm_losses[-1] < 0.05 * arm_losses[0]
assert miss.max() < 0.02
assert np.abs(arm_mj_q - arm_q).max() < 1e-8

# %% [markdown]
# Left: the loss per iteration. Middle: the hand's path in the plane from the start (circle) to
# the target (cross), flexor's and MuJoCo's. Right: the six excitations over time (flexors and
# extensors of the shoulder, the elbow, and the two-joint pair) and, below them, the activations
# that lag behind, the muscles' own first-order dynamics.

# %%
hand_mj = np.asarray(jax.jit(jax.vmap(hand))(jnp.asarray(arm_mj_q)))
hands = np.asarray(arm_traj["hand"])
t = 0.005 * np.arange(1, ARM_NSTEP + 1)
names = ("SF", "SE", "EF", "EE", "BF", "BE")
fig, axes = plt.subplots(1, 3, figsize=(14, 3.8))
axes[0].semilogy(arm_losses)
axes[0].set(title="muscle arm: loss", xlabel="Adam iteration")
axes[1].plot(hands[:, 0], hands[:, 1], label="flexor")
axes[1].plot(hand_mj[:, 0], hand_mj[:, 1], ":", lw=2.5, label="MuJoCo C replay")
axes[1].plot(*np.asarray(hand(arm_d0.qpos))[:2], "o", color="k")
axes[1].plot(*np.asarray(target)[:2], "x", ms=12, color="C3", label="target")
axes[1].set(title="hand path", xlabel="x (m)", ylabel="y (m)", aspect="equal")
axes[1].legend(fontsize=8)
for k in range(arm_model.nu):
  line, = axes[2].plot(t, arm_ctrl[:, k], label=names[k])
  axes[2].plot(t, np.asarray(arm_traj["act"])[:, k], ":", color=line.get_color())
axes[2].set(title="excitation (solid), activation (dotted)", xlabel="time (s)")
axes[2].legend(fontsize=7, ncol=3)
fig.tight_layout()
plt.show()

# %%
camera = mujoco.MjvCamera()
camera.lookat[:] = (0.4, 0.35, 0.0)
camera.distance, camera.elevation, camera.azimuth = 1.9, -90.0, 90.0
ARM_FRAMES = [0, 20, 40, 60, 80, 120, 160]
states = np.vstack([np.zeros((1, 2)), arm_q])
show_frames(arm_mj, states[ARM_FRAMES], camera, 220, 220,
            "t = " + ", ".join(f"{0.005 * k:.2f}" for k in ARM_FRAMES) + " s", (16, 2.6))

# %% [markdown]
# ## Summary

# %%
print(f"{'problem':<22}{'controls':>10}{'iterations':>12}{'loss start':>12}{'loss end':>11}"
      f"{'vs MuJoCo C':>13}")
print(f"{'cart-pole swing-up':<22}{cp_ctrl.size:>10}{CARTPOLE_ITERATIONS:>12}"
      f"{cp_losses[0]:>12.3e}{cp_losses[-1]:>11.3e}{np.abs(cp_mj_q - cp_q).max():>13.1e}")
print(f"{'muscle arm reach':<22}{arm_ctrl.size:>10}{ARM_ITERATIONS:>12}"
      f"{arm_losses[0]:>12.3e}{arm_losses[-1]:>11.3e}{np.abs(arm_mj_q - arm_q).max():>13.1e}")
