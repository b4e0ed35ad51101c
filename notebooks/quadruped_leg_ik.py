# %% [markdown]
# # Inverse kinematics of a quadruped leg: gradient descent on flexor vs the closed form
#
# Most quadrupeds (Spot, Unitree Go1, ANYmal) have three joints per leg: hip abduction about the
# body's forward axis, hip flexion and the knee, both about the lateral axis. For this chain
# the inverse kinematics has a closed form: the abduction angle follows from the foot's
# position in the body's lateral-vertical plane, the knee from the law of cosines, the hip
# flexion from a planar two-link problem. This notebook builds the leg as an MJCF model, solves
# the inverse kinematics numerically by gradient descent on flexor's forward kinematics (the
# foot site's position against a target), and checks that both answers agree.
#
# Set `FLEXOR_NOTEBOOK_SMALL=1` to solve fewer targets (the test suite does).

# %%
import os

import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np
import optax

jax.config.update("jax_enable_x64", True)

import flexor
from flexor.kinematics import kinematics

SMALL = os.environ.get("FLEXOR_NOTEBOOK_SMALL") == "1"
NTARGET, ITERATIONS = (8, 60) if SMALL else (200, 100)
FOOT_TOLERANCE = 1e-6  # m
ANGLE_TOLERANCE = 1e-6  # rad

# %% [markdown]
# ## The leg
#
# A front-left leg with Go1-like dimensions, in the body frame (x forward, y left, z up). The
# hip joint sits at `ROOT` from the body's origin; the abduction link carries the thigh
# `L_HIP` to the side; thigh and shank are `L_THIGH` and `L_SHANK` long. With every angle zero
# the leg hangs straight down. Angles turn about the joint axes by the right-hand rule: a
# positive hip flexion swings the thigh backwards, and a negative knee angle swings the shank
# forwards, so the knee points backwards as on Spot or Go1.

# %%
ROOT = np.array([0.19, 0.05, 0.0])
L_HIP, L_THIGH, L_SHANK = 0.08, 0.213, 0.213

XML = f"""
<mujoco model="quadruped_leg">
  <compiler angle="radian"/>
  <default>
    <joint type="hinge" range="-3 3"/>
    <geom type="capsule" size="0.02" contype="0" conaffinity="0"/>
  </default>
  <worldbody>
    <body name="trunk">
      <geom type="box" size="0.19 0.05 0.05" pos="0 0 0.06"/>
      <body name="hip" pos="{ROOT[0]} {ROOT[1]} {ROOT[2]}">
        <joint name="abduction" axis="1 0 0"/>
        <geom fromto="0 0 0 0 {L_HIP} 0"/>
        <body name="thigh" pos="0 {L_HIP} 0">
          <joint name="hip" axis="0 1 0"/>
          <geom fromto="0 0 0 0 0 {-L_THIGH}"/>
          <body name="shank" pos="0 0 {-L_THIGH}">
            <joint name="knee" axis="0 1 0"/>
            <geom fromto="0 0 0 0 0 {-L_SHANK}" size="0.015"/>
            <site name="foot" pos="0 0 {-L_SHANK}"/>
          </body>
        </body>
      </body>
    </body>
  </worldbody>
</mujoco>
"""
leg = flexor.load_mjcf_string(XML)
FOOT = 0  # the only site
data = flexor.make_data(leg)


def foot(q):
  """The foot site's position (3,) from flexor's forward kinematics at joint angles q (3,)."""
  return kinematics(leg, data.replace(qpos=q)).site_xpos[FOOT]

# %% [markdown]
# ## The closed form
#
# Forward kinematics by hand: hip flexion $\theta_2$ and knee $\theta_3$ place the foot in the
# leg's sagittal plane at
# $x' = -L_3\sin\theta_2 - L_4\sin(\theta_2+\theta_3)$,
# $z' = -L_3\cos\theta_2 - L_4\cos(\theta_2+\theta_3)$, a lateral offset $L_2$ from the hip
# axis; abduction $\theta_1$ then turns $(L_2, z')$ in the y-z plane.
#
# ($L_2$, $L_3$, $L_4$ are `L_HIP`, `L_THIGH`, `L_SHANK`, numbered as in the usual
# derivation, whose $L_1$ is a vertical offset of the hip that this leg does not have.)
# Inverting it, with $p = $ foot $-$ root:
#
# 1. the distance of the foot from the abduction axis is $\sqrt{p_y^2 + p_z^2}$, of which
#    $L_2$ is the offset, so $z' = -\sqrt{p_y^2 + p_z^2 - L_2^2}$ (foot below the hip) and
#    $\theta_1 = \operatorname{atan2}(p_z, p_y) - \operatorname{atan2}(z', L_2)$;
# 2. the law of cosines in the sagittal plane,
#    $\cos\theta_3 = (|p|^2 - L_2^2 - L_3^2 - L_4^2) / (2 L_3 L_4)$, has two solutions; we
#    take the branch $\theta_3 = -\arccos(\cdot) \le 0$;
# 3. with $k_1 = L_3 + L_4\cos\theta_3$ and $k_2 = L_4\sin\theta_3$ the sagittal equations
#    read $x' = -R\sin(\theta_2 + \varphi)$, $z' = -R\cos(\theta_2 + \varphi)$ with
#    $\varphi = \operatorname{atan2}(k_2, k_1)$, so
#    $\theta_2 = \operatorname{atan2}(-p_x, -z') - \varphi$.

# %%
def forward_closed_form(q):
  t1, t2, t3 = q
  x = -L_THIGH * np.sin(t2) - L_SHANK * np.sin(t2 + t3)
  z = -L_THIGH * np.cos(t2) - L_SHANK * np.cos(t2 + t3)
  y_rot = L_HIP * np.cos(t1) - z * np.sin(t1)
  z_rot = L_HIP * np.sin(t1) + z * np.cos(t1)
  return ROOT + np.array([x, y_rot, z_rot])


def inverse_closed_form(target):
  p = np.asarray(target) - ROOT
  z_sag = -np.sqrt(p[1]**2 + p[2]**2 - L_HIP**2)
  t1 = np.arctan2(p[2], p[1]) - np.arctan2(z_sag, L_HIP)
  cos3 = (p @ p - L_HIP**2 - L_THIGH**2 - L_SHANK**2) / (2 * L_THIGH * L_SHANK)
  t3 = -np.arccos(np.clip(cos3, -1.0, 1.0))
  k1, k2 = L_THIGH + L_SHANK * np.cos(t3), L_SHANK * np.sin(t3)
  t2 = np.arctan2(-p[0], -z_sag) - np.arctan2(k2, k1)
  return np.array([t1, t2, t3])

# %% [markdown]
# ## Targets
#
# Reachable foot targets: the forward kinematics of random angles in the chosen knee branch.
# First, the hand-derived forward kinematics must match flexor's at those angles.

# %%
rng = np.random.default_rng(0)
angles = np.column_stack([rng.uniform(-0.4, 0.4, NTARGET), rng.uniform(-0.3, 1.2, NTARGET),
                          rng.uniform(-2.4, -0.6, NTARGET)])
targets = np.array(jax.vmap(foot)(jnp.asarray(angles)))
fk_gap = np.max(np.abs(targets - np.array([forward_closed_form(q) for q in angles])))
print(f"max |flexor FK - closed-form FK| over {NTARGET} poses: {fk_gap:.1e} m")
assert fk_gap < 1e-12

closed = np.array([inverse_closed_form(t) for t in targets])

# %% [markdown]
# ## Gradient descent on flexor's kinematics
#
# Every target gets its own joint angles, all starting from one standing pose; the loss sums
# the squared foot errors, so the problems are independent and solved together. optax's
# L-BFGS (a gradient method with a curvature estimate and a line search) drives the foot onto
# the target to rounding precision; the starting pose's bent knee keeps the solution in the
# closed form's branch.

# %%
def loss(q):
  return jnp.sum((jax.vmap(foot)(q) - targets)**2)


# A backtracking line search evaluates the loss only, which keeps the program small to compile.
optimizer = optax.lbfgs(linesearch=optax.scale_by_backtracking_linesearch(20))


@jax.jit
def iteration(q, state):
  value, grad = jax.value_and_grad(loss)(q)
  updates, state = optimizer.update(grad, state, q, value=value, grad=grad, value_fn=loss)
  return optax.apply_updates(q, updates), state, value


q = jnp.tile(jnp.array([0.0, 0.6, -1.2]), (NTARGET, 1))
state = optimizer.init(q)
losses = []
for _ in range(ITERATIONS):
  q, state, value = iteration(q, state)
  losses.append(float(value))
solved = np.asarray(q)

foot_error = np.linalg.norm(np.array(jax.vmap(foot)(q)) - targets, axis=1)
angle_gap = np.abs(solved - closed)
print(f"max foot error after {ITERATIONS} iterations: {foot_error.max():.1e} m")
print(f"max |gradient descent - closed form| joint angle: {angle_gap.max():.1e} rad")
print(f"max |closed form - sampled angles|: {np.abs(closed - angles).max():.1e} rad")

# %%
fig, (ax0, ax1, ax2) = plt.subplots(1, 3, figsize=(14, 4))
ax0.semilogy(np.maximum(losses, 1e-32))
ax0.set_xlabel("L-BFGS iteration")
ax0.set_ylabel("sum of squared foot errors (m$^2$)")
ax0.grid(alpha=0.3)
for ax, (i, j), title in ((ax1, (0, 2), "side view (x-z)"), (ax2, (1, 2), "front view (y-z)")):
  ax.plot(targets[:, i], targets[:, j], ".", ms=4, label="targets")
  ax.plot(*ROOT[[i, j]], "k^", label="hip")
  ax.set_title(title)
  ax.set_xlabel("xyz"[i] + " (m)")
  ax.set_ylabel("z (m)")
  ax.set_aspect("equal")
  ax.grid(alpha=0.3)
ax1.legend(fontsize=7)
plt.show()

# %%
assert foot_error.max() < FOOT_TOLERANCE, foot_error.max()
assert angle_gap.max() < ANGLE_TOLERANCE, angle_gap.max()
