"""The forward and inverse dynamics pipelines: ``forward`` (mj_forward), ``inverse`` (mj_inverse).

Stages, as in MuJoCo's ``engine_forward.c``:

* ``fwd_position``: kinematics, com_pos, tendon, crb, factor_m, collision, make_constraint,
  transmission;
* ``fwd_velocity``: tendon and actuator velocities, com_vel, reference_constraint, passive,
  rne_bias;
* ``fwd_actuation``: act_dot, actuator_force, qfrc_actuator;
* ``fwd_acceleration``: qfrc_smooth and qacc_smooth;
* ``fwd_constraint``: qacc, qfrc_constraint and the constraint forces (``flexor.solver``, then
  ``flexor.noslip`` where opt.noslip_iterations is set);

with the sensors of each stage (``flexor.sensor``) after fwd_position, fwd_velocity and
fwd_constraint, as mj_forward calls mj_sensorPos/Vel/Acc, and the energies (``sensor.energy``)
after fwd_velocity; and ``inverse`` runs the first two, then ``inv_acceleration`` (qfrc_inverse
from qacc).
"""

from __future__ import annotations

import functools

import jax
from jax.ad_checkpoint import checkpoint_name
from jax.custom_derivatives import SymbolicZero
import jax.numpy as jnp

from flexor import actuation, collision, constraint, kinematics, math, noslip, solver, transmission
from flexor.crb import armature, cho_solve_m, crb, factor_m, tendon_bias, tree_blocks
from flexor.passive import passive
from flexor.rne import rne, rne_bias
from flexor.sensor import energy, sensor_acc, sensor_pos, sensor_vel
from flexor.tendon import tendon, tendon_velocity
from flexor.types import ContactGradient, Data, EnableBit, Model


# The name (``jax.ad_checkpoint.checkpoint_name``) of ``solve_dynamics``' result, which a step's
# rematerialisation (``integrate.step``) keeps for the backward pass: the tangent needs the
# accelerations, and recomputing them re-ran the force sums, the bias force and the solve.
ACCELERATION = "accelerations"


def fwd_position(m: Model, d: Data) -> Data:
  """Computes the position-dependent quantities: frames, com-based inertias, qM and qLD."""
  with jax.named_scope("fwd_position"):
    d = kinematics.kinematics(m, d)
    d = kinematics.com_pos(m, d)
    d = kinematics.camlight(m, d)
    d = tendon(m, d)
    d = crb(m, d)
    d = factor_m(m, d)
    d = collision.collision(m, d)
    d = constraint.make_constraint(m, d)
    d = transmission.transmission(m, d)
  return d


def fwd_velocity(m: Model, d: Data) -> Data:
  """Computes the velocity-dependent quantities: cvel, cdof_dot, passive forces, qfrc_bias."""
  with jax.named_scope("fwd_velocity"):
    d = tendon_velocity(m, d)
    d = transmission.actuator_velocity(m, d)
    d = kinematics.com_vel(m, d)
    d = constraint.reference_constraint(m, d)
    d = passive(m, d)
    d = rne_bias(m, d)
  return d


def fwd_actuation(m: Model, d: Data) -> Data:
  """Computes act_dot, actuator_force and qfrc_actuator (see ``flexor.actuation``)."""
  with jax.named_scope("fwd_actuation"):
    return actuation.actuation(m, d)


def applied_forces(m: Model, d: Data) -> tuple[jax.Array, ...]:
  """The generalised forces (nv,) on the bodies other than the bias force, in the order
  qfrc_smooth sums them: qfrc_passive, qfrc_applied, qfrc_actuator and J' xfrc_applied, with
  xfrc_applied acting at each body's xipos."""
  xfrc = kinematics.apply_ft(m, d, d.xfrc_applied[:, :3], d.xfrc_applied[:, 3:], d.xipos)
  return d.qfrc_passive, d.qfrc_applied, d.qfrc_actuator, xfrc


def fwd_acceleration(m: Model, d: Data) -> Data:
  """Computes qfrc_smooth and qacc_smooth (nv,): the unconstrained acceleration.

  qfrc_smooth = qfrc_passive - qfrc_bias + qfrc_applied + qfrc_actuator + J' xfrc_applied;
  qacc_smooth = qM^-1 qfrc_smooth (``solve_dynamics``).
  """
  with jax.named_scope("fwd_acceleration"):
    forces = applied_forces(m, d)
    passive_force, applied, actuator, xfrc = forces
    qfrc_smooth = passive_force - d.qfrc_bias + applied + actuator + xfrc
    qacc_smooth = solve_dynamics(m, d, qfrc_smooth, forces, d.qLD)
  return d.replace(qfrc_smooth=qfrc_smooth, qacc_smooth=qacc_smooth)


def inverse_dynamics(m: Model, d: Data, qacc: jax.Array) -> jax.Array:
  """M(q) qacc + qfrc_bias (nv,), after fwd_position and fwd_velocity: rne at qacc, the
  armature's inertia and the tendon armature's bias (``crb.armature``, ``crb.tendon_bias``)."""
  return rne(m, d.replace(qacc=qacc), flg_acc=True) + armature(m, d) @ qacc + tendon_bias(m, d)


def solve_dynamics(m: Model, d: Data, qfrc: jax.Array, forces: tuple[jax.Array, ...],
                   factor: jax.Array, damping: jax.Array | None = None) -> jax.Array:
  """The accelerations (nv,) ``(qM + diag(damping))^-1 qfrc``, given the lower Cholesky factor
  of that matrix, where ``qfrc`` is the sum of ``forces`` minus qfrc_bias.

  Differentiated through the equations of motion rather than through qM: with qacc the result,
  ``(qM + diag(damping)) dqacc = dforces - dID - ddamping qacc``, where dID, the derivative of
  ``inverse_dynamics`` at fixed qacc, is ``dqM qacc + dqfrc_bias``. One tangent of the recursive
  Newton-Euler pass replaces those of the bias force and of the composite-inertia mass matrix:
  reverse mode never forms qM's (nv, nv) cotangent, nor differentiates crb (smooth cheetah's
  and humanoid's rollout gradients 6% and 13% faster)."""
  if not m.nv:
    return qfrc
  if damping is None:
    damping = jnp.zeros_like(qfrc)
  return _solve_dynamics(m, d, qfrc, forces, damping, factor)


@jax.custom_jvp
def _solve_dynamics(m: Model, d: Data, qfrc: jax.Array, forces: tuple[jax.Array, ...],
                    damping: jax.Array, factor: jax.Array) -> jax.Array:
  del d, forces, damping
  return cho_solve_m(tree_blocks(m), factor, qfrc)


@functools.partial(_solve_dynamics.defjvp, symbolic_zeros=True)
def _solve_dynamics_jvp(primals: tuple, tangents: tuple) -> tuple[jax.Array, jax.Array]:
  m, d, qfrc, forces, damping, factor = primals
  dm, dd, _, dforces, ddamping, _ = tangents
  blocks = tree_blocks(m)
  qacc = checkpoint_name(cho_solve_m(blocks, factor, qfrc), ACCELERATION)
  rhs = [t for t in dforces if not isinstance(t, SymbolicZero)]
  moved = math.jvp_nonzero(lambda m, d: inverse_dynamics(m, d, qacc), (m, d), (dm, dd))
  rhs += [-moved] if moved is not None else []
  rhs += [-ddamping * qacc] if not isinstance(ddamping, SymbolicZero) else []
  return qacc, cho_solve_m(blocks, factor, sum(rhs)) if rhs else jnp.zeros_like(qacc)


def fwd_constraint(m: Model, d: Data) -> Data:
  """Computes qacc, qfrc_constraint (nv,) and the constraint forces (see ``flexor.solver``);
  qacc = qacc_smooth when the model has no constraint rows.

  Also sets warning_nan when qacc is not finite. With ContactGradient.DISTANCE, qacc and
  qfrc_constraint keep their values and take the gradient of a surrogate
  (``contacts_from_distance``).
  """
  with jax.named_scope("fwd_constraint"):
    if constraint.constraints_on(m):
      d = solver.solve(m, d)
      if m.opt.noslip_iterations:
        d = noslip.noslip(m, d)
      if m.opt.contact_gradient == ContactGradient.DISTANCE and m.nconmax:
        d = contacts_from_distance(m, d)
    else:
      d = d.replace(qacc=d.qacc_smooth, qfrc_constraint=jnp.zeros_like(d.qacc_smooth))
    warning_nan = d.warning_nan | ~jnp.all(jnp.isfinite(d.qacc))
  return d.replace(warning_nan=warning_nan)


def contacts_from_distance(m: Model, d: Data) -> Data:
  """qacc and qfrc_constraint (nv,) with their values unchanged and the derivatives of a
  surrogate: a straight-through estimator (Paulus et al., "contacts from distance"), value
  ``exact + soft - soft`` with the gradient taken through ``soft`` only. In the surrogate,
  contacts within their margin are MuJoCo's and pairs up to opt.contact_gradient_width beyond it
  are soft-layer contacts (``collision.collision(surrogate=True)``): the motion stays MuJoCo's,
  touching contacts keep MuJoCo's derivatives, and pairs about to touch pass gradients. Costs a
  second collision, constraint build and solve."""
  soft = collision.collision(m, d, surrogate=True)
  soft = constraint.make_constraint(m, soft)
  soft = constraint.reference_constraint(m, soft)
  soft = solver.solve(m, soft)
  through = lambda exact, smooth: (jax.lax.stop_gradient(exact)
                                   + (smooth - jax.lax.stop_gradient(smooth)))
  return d.replace(qacc=through(d.qacc, soft.qacc),
                   qfrc_constraint=through(d.qfrc_constraint, soft.qfrc_constraint))


def forward(m: Model, d: Data, sensors: bool = True) -> Data:
  """Computes everything mj_forward does that flexor implements: all stages but integration,
  and the sensors (skipped when DisableBit.SENSOR is set, or without ``sensors``: RK4's
  intermediate stages skip them as mj_forwardSkip's skipsensor, keeping the first values)."""
  with jax.named_scope("forward"):
    d = fwd_position(m, d)
    d = sensor_pos(m, d) if sensors else d
    d = fwd_velocity(m, d)
    d = sensor_vel(m, d) if sensors else d
    d = energy(m, d, sensors)
    d = fwd_actuation(m, d)
    d = fwd_acceleration(m, d)
    d = fwd_constraint(m, d)
    d = sensor_acc(m, d) if sensors else d
  return d


def inv_acceleration(m: Model, d: Data) -> Data:
  """Computes qfrc_inverse, qfrc_constraint (nv,) and efc_force from qacc, after fwd_position and
  fwd_velocity.

  As in mj_inverse: the constraint forces are those the soft-constraint model assigns to qacc
  (no solve: mj_invConstraint), and qfrc_inverse = rne(qacc) + armature qacc + tendon bias -
  qfrc_passive - qfrc_constraint, where rne(qacc) = M qacc + qfrc_bias without armature
  (``crb.armature``, ``crb.tendon_bias``).
  """
  with jax.named_scope("inv_acceleration"):
    if constraint.constraints_on(m):
      force, state = solver.constraint_force(m, d, d.qacc)
      d = d.replace(efc_force=force, efc_state=state)
      qfrc_constraint = d.efc_J.T @ force
    else:
      qfrc_constraint = jnp.zeros_like(d.qacc)
    qfrc_inverse = inverse_dynamics(m, d, d.qacc) - d.qfrc_passive - qfrc_constraint
  return d.replace(qfrc_constraint=qfrc_constraint, qfrc_inverse=qfrc_inverse)


def inverse(m: Model, d: Data) -> Data:
  """Computes qfrc_inverse (nv,), the generalised force that produces the given qacc (mj_inverse).

  Runs fwd_position, fwd_velocity and inv_acceleration (and the energies with
  EnableBit.ENERGY). qfrc_inverse equals qfrc_applied + qfrc_actuator + J' xfrc_applied of a
  forward pass that produced qacc.
  """
  with jax.named_scope("inverse"):
    d = fwd_position(m, d)
    d = fwd_velocity(m, d)
    if m.opt.enabled(EnableBit.ENERGY):
      d = energy(m, d)
    d = inv_acceleration(m, d)
  return d
