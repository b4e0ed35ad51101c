# %% [markdown]
# # System identification by gradient descent through rollouts
#
# A two-link arm swings under gravity, its joints sprung and damped, driven by two motors. We
# simulate it with known "true" parameters, then forget the link masses (`body_mass`), the
# joint damping (`dof_damping`) and the motor gains (`actuator_gainprm[:, 0]`), start from
# values 20-40% off, and recover them by fitting simulated trajectories to the recorded ones:
# `jax.grad` of the trajectory error through `flexor.rollout`, with respect to Model fields set
# by `model.replace(...)`, drives optax's L-BFGS on the logarithms of the parameters (so they
# stay positive and every parameter moves on the same relative scale).
#
# Why these parameters are identifiable: scaling every mass, damping and gain by one factor
# would leave the motion unchanged, but the links' rotational inertias, the armature and the
# joint springs are known and fixed, and they break that symmetry.
#
# Set `FLEXOR_NOTEBOOK_SMALL=1` for fewer, shorter trajectories and fewer iterations (the test
# suite does).

# %%
import os

import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np
import optax

jax.config.update("jax_enable_x64", True)

import flexor
from flexor.rollout import batch_rollout

SMALL = os.environ.get("FLEXOR_NOTEBOOK_SMALL") == "1"
NTRAJ, NSTEP, ITERATIONS = (4, 60, 60) if SMALL else (16, 200, 100)
# Largest relative error allowed in any recovered parameter.
TOLERANCE = 1e-6

# %% [markdown]
# ## The model
#
# Hinges about y, gravity along -z; the springs hold the arm near horizontal, so every
# trajectory stays in a regular regime where the fit is well conditioned.

# %%
XML = """
<mujoco model="two_link">
  <option timestep="0.01" gravity="0 0 -9.81"/>
  <default>
    <joint type="hinge" axis="0 1 0" stiffness="4" armature="0.005"/>
    <geom type="capsule" contype="0" conaffinity="0"/>
  </default>
  <worldbody>
    <body name="upper">
      <joint name="shoulder" damping="0.3"/>
      <geom fromto="0 0 0 0.4 0 0" size="0.04" mass="1.2"/>
      <body name="lower" pos="0.4 0 0">
        <joint name="elbow" damping="0.15"/>
        <geom fromto="0 0 0 0.35 0 0" size="0.03" mass="0.6"/>
      </body>
    </body>
  </worldbody>
  <actuator>
    <motor name="shoulder" joint="shoulder" gear="1"/>
    <general name="elbow" joint="elbow" gainprm="3"/>
  </actuator>
</mujoco>
"""
truth_model = flexor.load_mjcf_string(XML)
LINKS = np.array([1, 2])  # body ids of the links (0 is the world)


def params_of(m):
  """The unknowns as one vector: link masses, joint damping, motor gains."""
  return jnp.concatenate([m.body_mass[LINKS], m.dof_damping, m.actuator_gainprm[:, 0]])


def with_params(m, p):
  """The Model with the unknowns replaced by the vector p (see params_of)."""
  return m.replace(body_mass=m.body_mass.at[LINKS].set(p[:2]), dof_damping=p[2:4],
                   actuator_gainprm=m.actuator_gainprm.at[:, 0].set(p[4:6]))


NAMES = ["mass upper", "mass lower", "damping shoulder", "damping elbow", "gain shoulder",
         "gain elbow"]
truth = params_of(truth_model)

# %% [markdown]
# ## Recorded trajectories
#
# Random initial angles and velocities, and smooth random motor commands (a few sinusoids per
# trajectory), so that inertia, damping and actuation are all excited.

# %%
key_q, key_v, key_a, key_w = jax.random.split(jax.random.key(0), 4)
data0 = flexor.make_data(truth_model, batch_shape=(NTRAJ,))
data0 = data0.replace(qpos=jax.random.uniform(key_q, (NTRAJ, 2), minval=-0.8, maxval=0.8),
                      qvel=jax.random.normal(key_v, (NTRAJ, 2)))
t = jnp.arange(NSTEP) * truth_model.opt.timestep
amplitude = jax.random.uniform(key_a, (NTRAJ, 1, 2, 3), minval=-1.5, maxval=1.5)
frequency = jax.random.uniform(key_w, (NTRAJ, 1, 2, 3), minval=1.0, maxval=12.0)
ctrl = jnp.sum(amplitude * jnp.sin(frequency * t[None, :, None, None]), axis=-1)  # (B, T, nu)


def simulate(p):
  _, traj = batch_rollout(with_params(truth_model, p), data0, ctrl, fields=("qpos", "qvel"))
  return traj["qpos"], traj["qvel"]


recorded = simulate(truth)
print(f"{NTRAJ} trajectories of {NSTEP} steps; qpos range "
      f"[{float(recorded[0].min()):.2f}, {float(recorded[0].max()):.2f}] rad")

# %% [markdown]
# ## The fit
#
# The loss is the mean squared difference between simulated and recorded angles and
# velocities (velocities weighted down by a typical time scale), a function of the log
# parameters. Its gradient drives optax's L-BFGS, a gradient method that builds a curvature
# estimate from successive gradients and picks each step length by a line search; on this
# smooth least-squares problem it reaches the truth to many digits in a few dozen iterations,
# where plain gradient descent or Adam would crawl along the narrow valley the coupled mass and
# gain parameters make. One compiled program runs a whole iteration, line search included.

# %%
def loss(log_p):
  qpos, qvel = simulate(jnp.exp(log_p))
  return jnp.mean((qpos - recorded[0])**2) + 0.01 * jnp.mean((qvel - recorded[1])**2)


# A backtracking line search evaluates the loss only, without its gradient, which keeps the
# compiled program about half the size of one with optax's default zoom line search.
optimizer = optax.lbfgs(linesearch=optax.scale_by_backtracking_linesearch(20))


@jax.jit
def iteration(log_p, state):
  value, grad = jax.value_and_grad(loss)(log_p)
  updates, state = optimizer.update(grad, state, log_p, value=value, grad=grad, value_fn=loss)
  return optax.apply_updates(log_p, updates), state, value


start = truth * jnp.array([1.3, 0.7, 1.4, 0.75, 0.8, 1.25])
log_p = jnp.log(start)
state = optimizer.init(log_p)
losses, history = [], [np.asarray(start)]
for i in range(ITERATIONS):
  log_p, state, value = iteration(log_p, state)
  losses.append(float(value))
  history.append(np.exp(np.asarray(log_p)))
recovered = np.exp(np.asarray(log_p))
print(f"loss: {losses[0]:.2e} at the start, {losses[-1]:.2e} after {ITERATIONS} iterations")

# %%
relative = np.abs(recovered - np.asarray(truth)) / np.asarray(truth)
print(f"{'parameter':18s} {'truth':>8s} {'start':>8s} {'recovered':>10s} {'rel. error':>10s}")
for name, tv, sv, rv, err in zip(NAMES, np.asarray(truth), np.asarray(start), recovered,
                                 relative):
  print(f"{name:18s} {tv:8.4f} {sv:8.4f} {rv:10.5f} {err:10.1e}")

# %%
history = np.array(history) / np.asarray(truth)
fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(11, 4))
ax0.semilogy(losses)
ax0.set_xlabel("iteration")
ax0.set_ylabel("trajectory loss")
ax0.grid(alpha=0.3)
for j, name in enumerate(NAMES):
  ax1.plot(history[:, j], label=name)
ax1.axhline(1.0, color="k", lw=1)
ax1.set_xlabel("iteration")
ax1.set_ylabel("estimate / truth")
ax1.grid(alpha=0.3)
ax1.legend(fontsize=7)
plt.show()

# %%
print(f"largest relative error {relative.max():.1e} (tolerance {TOLERANCE:.0e})")
assert relative.max() < TOLERANCE, dict(zip(NAMES, relative))
