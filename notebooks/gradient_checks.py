# %% [markdown]
# # Gradient checks: flexor's derivatives against central finite differences
#
# flexor's stages are pure JAX functions, so `jax.grad` differentiates them exactly (up to
# rounding). This notebook checks that claim stage by stage in float64, from forward kinematics
# to a 50-step rollout, against central finite differences
#
# $$D_\varepsilon f(x)\,v = \frac{f(x + \varepsilon v) - f(x - \varepsilon v)}{2\varepsilon},$$
#
# along one random unit direction $v$ per stage. The relative error of a random projection,
# $|w^\top D_\varepsilon f\,v - w^\top J v| / |w^\top J v|$, traces a V on a log-log plot: for
# large $\varepsilon$ the truncation error of the central difference falls as $\varepsilon^2$,
# for small $\varepsilon$ rounding error grows as $u/\varepsilon$ ($u \approx 10^{-16}$ is the
# unit roundoff). The bottom of the V, near $\varepsilon \approx u^{1/3} \approx 10^{-5}$, is
# the best agreement finite differences can show; a wrong derivative leaves the whole curve
# high, with no V. The last cell fails if any stage's minimum is not small.
#
# Set `FLEXOR_NOTEBOOK_SMALL=1` to sweep fewer step sizes and check fewer stages (the test
# suite does).

# %%
import os

import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np

jax.config.update("jax_enable_x64", True)

import flexor
from flexor import actuation, examples, kinematics, tendon, transmission
from flexor.crb import crb
from flexor.integrate import integrate_pos
from flexor.rne import rne_bias

SMALL = os.environ.get("FLEXOR_NOTEBOOK_SMALL") == "1"
EPS = np.logspace(-13, -1, 13 if SMALL else 49)
# Below this the derivative is right to many digits; a sign or factor error is off by O(1).
TOLERANCE = 1e-6

# %% [markdown]
# ## The check
#
# `check` takes a function from a flat vector to an array and a point. It reduces the output to
# a scalar with a random weight vector $w$, so one reverse pass (`jax.grad`) gives the exact
# directional derivative $w^\top J v$; a wrong entry anywhere in $J$ shows up in it for almost
# every $w$ and $v$. The central differences for every $\varepsilon$ are computed at once
# (`jax.vmap` over the step sizes), so each stage compiles one program.

# %%
def check(f, x, seed):
  """Relative error of the central difference of w . f at ``x`` along a random unit direction
  v, for every step size in EPS, against jax.grad(w . f)(x) . v."""
  kv, kw = jax.random.split(jax.random.key(seed))
  v = jax.random.normal(kv, x.shape, x.dtype)
  v = v / jnp.linalg.norm(v)
  w = jax.random.normal(kw, jnp.shape(jnp.ravel(f(x))), x.dtype)
  g = lambda x: jnp.dot(w, jnp.ravel(f(x)))

  @jax.jit
  def errors(x, v):
    exact = jnp.dot(jax.grad(g)(x), v)
    diff = jax.vmap(lambda e: (g(x + e * v) - g(x - e * v)) / (2 * e))(jnp.asarray(EPS))
    return jnp.abs(diff - exact) / jnp.abs(exact)

  return np.asarray(errors(x, v))

# %% [markdown]
# ## A state to differentiate at
#
# The bundled `arm` has every joint type (slide, ball, hinges, free), gravity, damping,
# springs, armature and motors; `muscle_arm` has six muscles on wrapping tendons. The state is
# random: positions are moved along random velocities with `integrate_pos`, so quaternions stay
# unit quaternions.

# %%
arm = flexor.load_mjcf(examples.path("arm"))
keys = jax.random.split(jax.random.key(0), 3)
qpos = integrate_pos(arm, arm.qpos0, jax.random.normal(keys[0], (arm.nv,)), 0.5)
qvel = jax.random.normal(keys[1], (arm.nv,))
ctrl = jax.random.uniform(keys[2], (arm.nu,), minval=-1, maxval=1)
data = flexor.make_data(arm).replace(qpos=qpos, qvel=qvel, ctrl=ctrl)
nq, nv, nu = arm.nq, arm.nv, arm.nu


def state(x):
  """Data with qpos, qvel and ctrl taken from the flat vector x = (qpos, qvel, ctrl)."""
  return data.replace(qpos=x[:nq], qvel=x[nq:nq + nv], ctrl=x[nq + nv:])


x_arm = jnp.concatenate([qpos, qvel, ctrl])

# %% [markdown]
# ## The stages
#
# Each entry is (function of a flat vector, point). Position stages take qpos only; velocity
# and dynamics stages take (qpos, qvel, ctrl).

# %%
def position_stages(q):
  d = kinematics.kinematics(arm, data.replace(qpos=q))
  return kinematics.com_pos(arm, d)


def bias(x):
  d = position_stages(x[:nq]).replace(qvel=x[nq:nq + nv])
  return rne_bias(arm, kinematics.com_vel(arm, d)).qfrc_bias


def one_step(x):
  d = flexor.step(arm, state(x))
  return jnp.concatenate([d.qpos, d.qvel])


NSTEP = 50
ctrl_seq = jax.random.uniform(jax.random.key(1), (NSTEP, nu), minval=-1, maxval=1)


def rollout(x):
  """Final (qpos, qvel) after NSTEP steps as a function of the initial velocity, the body
  masses and every control of every step."""
  m = arm.replace(body_mass=x[nv:nv + arm.nbody])
  controls = x[nv + arm.nbody:].reshape(NSTEP, nu)
  final, _ = flexor.rollout(m, data.replace(qvel=x[:nv]), controls)
  return jnp.concatenate([final.qpos, final.qvel])


x_rollout = jnp.concatenate([qvel, arm.body_mass, ctrl_seq.ravel()])

stages = {
    "kinematics: xpos(qpos)": (lambda q: kinematics.kinematics(arm, data.replace(qpos=q)).xpos,
                               qpos),
    "crb: qM(qpos)": (lambda q: crb(arm, position_stages(q)).qM, qpos),
    "rne: qfrc_bias(qpos, qvel)": (bias, x_arm[:nq + nv]),
    "step: (qpos, qvel) next": (one_step, x_arm),
}

# %% [markdown]
# Compiling reverse-mode programs dominates this notebook's run time, so at small size (in the
# test suite) it stops here: `step` already runs `forward` and the motors' actuation. At full
# size it also checks `forward` on its own, the muscles and the rollout. The muscle stage
# differentiates the actuator forces and activation derivatives of `muscle_arm` with respect to
# joint positions (through the wrapping tendons' lengths and the force-length curve),
# velocities (force-velocity), activations and controls; its angles lie inside the joint limits
# and its controls away from the activations, where MuJoCo's activation time constant switches.

# %%
if not SMALL:
  muscle_arm = flexor.load_mjcf(examples.path("muscle_arm"))
  na, nvm, num = muscle_arm.na, muscle_arm.nv, muscle_arm.nu
  x_muscle = jnp.concatenate([jnp.array([0.9, 1.1]), jnp.array([0.4, -0.3]),
                              jnp.linspace(0.2, 0.7, na), jnp.linspace(0.9, 0.05, num)])

  def muscles(x):
    m = muscle_arm
    d = flexor.make_data(m).replace(
        qpos=x[:2], qvel=x[2:2 + nvm], act=x[2 + nvm:2 + nvm + na], ctrl=x[2 + nvm + na:])
    d = kinematics.com_pos(m, kinematics.kinematics(m, d))
    d = transmission.transmission(m, tendon.tendon(m, d))
    d = transmission.actuator_velocity(m, tendon.tendon_velocity(m, d))
    d = actuation.actuation(m, d)
    return jnp.concatenate([d.qfrc_actuator, d.act_dot])

  stages.update({
      "forward: qacc(qpos, qvel, ctrl)": (lambda x: flexor.forward(arm, state(x)).qacc, x_arm),
      "muscles: qfrc_actuator, act_dot": (muscles, x_muscle),
      f"rollout: {NSTEP} steps, w.r.t. qvel0, mass, ctrl": (rollout, x_rollout),
  })

# %%
errors = {}
for seed, (name, (f, x)) in enumerate(stages.items()):
  errors[name] = check(f, x, seed)
  best = int(np.argmin(errors[name]))
  print(f"{name:52s} min relative error {errors[name][best]:.1e} at eps = {EPS[best]:.0e}")

# %%
fig, ax = plt.subplots(figsize=(7, 4.5))
for name, err in errors.items():
  ax.loglog(EPS, err, ".-", label=name)
ax.loglog(EPS, EPS**2, "k:", lw=1, label=r"$\varepsilon^2$ (truncation)")
ax.loglog(EPS, 1e-16 / EPS, "k--", lw=1, label=r"$10^{-16}/\varepsilon$ (rounding)")
ax.set_xlabel(r"finite-difference step $\varepsilon$")
ax.set_ylabel("relative error vs jax.grad")
ax.set_ylim(1e-13, 1)
ax.grid(alpha=0.3, which="both")
ax.legend(fontsize=7)
plt.show()

# %% [markdown]
# Every curve should bottom out far below the tolerance; the rollout's curve sits a little
# higher because 50 steps of rounding accumulate in the differences.

# %%
worst = max(float(err.min()) for err in errors.values())
print(f"worst minimum relative error over the stages: {worst:.1e} (tolerance {TOLERANCE:.0e})")
assert worst < TOLERANCE, errors
