"""Constraint rows and the solver against MuJoCo C: limits, friction loss and equality.

Contacts have their own tests (tests/test_collision.py). Each model here is compared at random
states, all rows MuJoCo instantiates (efc_* in order) plus qacc and qfrc_constraint, with both
engines solving to a tight tolerance; then gradients of rollouts against finite differences.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest

import flexor
from flexor import constraint, kinematics, solver, solver_pgs
from flexor.types import ConstraintType, SolverType

from support import float64_values, relerr, snapshot

jax.config.update("jax_enable_x64", True)

# Rows to 1e-12 (they are closed-form); qacc and forces to 1e-9: both solvers stop at a
# tolerance of 1e-13 on the scaled gradient, far below this.
ROW_TOL, SOLVE_TOL = 1e-12, 1e-9

LIMITS_XML = """
<mujoco>
  <option timestep="0.005"/>
  <default><geom type="capsule" size="0.05" contype="0" conaffinity="0"/></default>
  <worldbody>
    <body pos="0 0 1">
      <joint name="h" type="hinge" axis="0 1 0" range="-0.3 0.4" limited="true" frictionloss="0.5"
             solreflimit="0.03 0.8" solimplimit="0.8 0.9 0.01 0.3 3"/>
      <geom fromto="0 0 0 0.3 0 0"/>
      <body pos="0.3 0 0">
        <joint name="s" type="slide" axis="1 0 0" range="-0.1 0.1" limited="true" margin="0.02"
               frictionloss="0.2"/>
        <geom fromto="0 0 0 0.3 0 0"/>
        <site name="a" pos="0.2 0 0.05"/>
        <body pos="0.3 0 0">
          <joint name="b" type="ball" range="0 0.5" limited="true" solreflimit="-1000 -10"/>
          <geom fromto="0 0 0 0 0 -0.3"/>
          <site name="c" pos="0 0 -0.3"/>
        </body>
      </body>
    </body>
  </worldbody>
  <tendon>
    <spatial name="t" limited="true" range="0.2 0.35" frictionloss="0.3" margin="0.01">
      <site site="a"/><site site="c"/>
    </spatial>
  </tendon>
</mujoco>
"""

EQUALITY_XML = """
<mujoco>
  <option timestep="0.005"/>
  <default><geom type="capsule" size="0.05" contype="0" conaffinity="0"/></default>
  <worldbody>
    <site name="w" pos="0.5 0.1 1.2" quat="0.9 0.1 0.2 0.3"/>
    <body name="a" pos="0 0 1">
      <joint name="h1" type="hinge" axis="0 1 0"/>
      <geom fromto="0 0 0 0.3 0 0"/>
      <body name="b" pos="0.3 0 0">
        <joint name="h2" type="hinge" axis="0 0 1"/>
        <joint name="s2" type="slide" axis="1 0 0"/>
        <geom fromto="0 0 0 0.3 0 0"/>
        <site name="sb" pos="0.3 0.02 0" quat="0.8 0.2 0.1 0.4"/>
      </body>
    </body>
    <body name="f" pos="0.6 0.1 1.1">
      <freejoint/>
      <geom type="box" size="0.1 0.05 0.03"/>
      <site name="sf" pos="0.05 0.02 0.01"/>
    </body>
    <body name="f2" pos="0.2 0.5 1.1">
      <freejoint/>
      <geom type="box" size="0.1 0.05 0.03"/>
      <site name="sf2" pos="0.05 0.02 0.01"/>
    </body>
    <body name="g" pos="-0.5 0 1">
      <joint name="ball" type="ball"/>
      <geom fromto="0 0 0 0 0 -0.3"/>
      <site name="sg" pos="0 0 -0.3"/>
      <body name="g2" pos="0 0 -0.3">
        <joint name="h3" type="hinge" axis="1 0 0"/>
        <geom fromto="0 0 0 0 0 -0.2"/>
        <site name="sg2" pos="0 0.1 -0.2"/>
      </body>
    </body>
    <body name="s" pos="0 -0.5 1">
      <joint name="sx" type="slide" axis="1 0 0"/>
      <geom type="box" size="0.05 0.05 0.05"/>
    </body>
  </worldbody>
  <tendon>
    <spatial name="t1"><site site="sg"/><site site="sg2"/></spatial>
    <fixed name="t2"><joint joint="h1" coef="0.5"/><joint joint="s2" coef="-1"/></fixed>
  </tendon>
  <equality>
    <connect body1="f" body2="b" anchor="0.05 0.02 0" solref="0.01 0.9"/>
    <weld body1="g2" body2="f2" relpose="0.1 0 0 0.9 0.1 0 0.2" anchor="0.02 0 0.01"
          torquescale="2" solimp="0.8 0.95 0.002 0.4 3"/>
    <weld site1="sf2" site2="w" torquescale="0.5"/>
    <weld body1="a" body2="f" anchor="0.03 0.01 0.02"/>
    <connect body1="s" anchor="0.01 0 0"/>
    <connect site1="sf" site2="sg2"/>
    <joint joint1="h2" joint2="h3" polycoef="0.1 0.5 0.2 -0.3 0.1"/>
    <joint joint1="h1" polycoef="0.1 0 0 0 0" active="false"/>
    <tendon tendon1="t1" tendon2="t2" polycoef="0 0.3 0.1 0 0" solref="-500 -20"/>
  </equality>
</mujoco>
"""

# <flag diagexact>: R from the exact diagonal of J M^-1 J' instead of MuJoCo's approximation;
# solver="PGS": the dual solver's forces, clamped to friction loss and limits, and equality rows
MODELS = {"limits": LIMITS_XML, "equality": EQUALITY_XML,
          "equality_diagexact": EQUALITY_XML.replace(
              '<option timestep="0.005"/>',
              '<option timestep="0.005"><flag diagexact="enable"/></option>'),
          **{f"{name}_pgs": xml.replace('<option timestep="0.005"/>',
                                        '<option timestep="0.005" solver="PGS"/>')
             for name, xml in (("limits", LIMITS_XML), ("equality", EQUALITY_XML))}}
ROW_FIELDS = ("efc_type", "efc_id", "efc_J", "efc_pos", "efc_margin", "efc_frictionloss",
              "efc_D", "efc_R", "efc_vel", "efc_aref")
SOLVE_FIELDS = ("efc_force", "qacc", "qfrc_constraint")


def _random_states(mj: mujoco.MjModel, rng: np.random.Generator, n: int):
  """n (qpos, qvel) pairs near qpos0 with unit quaternions, wide enough to reach limits."""
  states = []
  for _ in range(n):
    qpos = mj.qpos0 + 0.35 * rng.normal(size=mj.nq)
    for j in range(mj.njnt):
      if mj.jnt_type[j] in (mujoco.mjtJoint.mjJNT_FREE, mujoco.mjtJoint.mjJNT_BALL):
        adr = mj.jnt_qposadr[j] + (3 if mj.jnt_type[j] == mujoco.mjtJoint.mjJNT_FREE else 0)
        qpos[adr:adr + 4] /= np.linalg.norm(qpos[adr:adr + 4])
    states.append((qpos, rng.normal(size=mj.nv)))
  return states


@pytest.fixture(scope="module", params=sorted(MODELS))
def compared(request):
  """(name, flexor Data batch, list of MuJoCo MjData) at 6 random states."""
  xml = MODELS[request.param]
  mj = mujoco.MjModel.from_xml_string(xml)
  mj.opt.tolerance = 1e-13
  m = flexor.load_mjcf_string(xml)
  m = m.replace(opt=m.opt.replace(tolerance=jnp.asarray(1e-13)))
  states = _random_states(mj, np.random.default_rng(0), 6)
  datas = []
  for qpos, qvel in states:
    md = mujoco.MjData(mj)
    md.qpos[:], md.qvel[:] = qpos, qvel
    mujoco.mj_forward(mj, md)
    datas.append(md)
  d = flexor.make_data(m, (len(states),))
  d = d.replace(qpos=jnp.asarray(np.stack([s[0] for s in states])),
                qvel=jnp.asarray(np.stack([s[1] for s in states])))
  d = jax.jit(jax.vmap(flexor.forward, in_axes=(None, 0)))(m, d)
  return request.param, d, datas


@pytest.mark.parametrize("field", ROW_FIELDS + SOLVE_FIELDS + ("nefc",))
def test_matches_mujoco(compared, field):
  name, d, datas = compared
  for i, md in enumerate(datas):
    active = np.asarray(d.efc_active[i])
    assert active.sum() == md.nefc, f"{name} state {i}: nefc"
    if field == "nefc":
      assert int(d.nefc[i]) == md.nefc
      continue
    ours = np.asarray(getattr(d, field)[i])
    theirs = np.asarray(getattr(md, field))
    if field.startswith("efc_"):
      ours = ours[active]
      theirs = theirs.reshape(ours.shape)
    tol = ROW_TOL if field in ROW_FIELDS else SOLVE_TOL
    assert relerr(ours, theirs) < tol, f"{name} state {i}: {field}"


def test_rows_cover_every_kind(compared):
  """The random states exercise what the model can produce (guards the test above)."""
  name, d, _ = compared
  kinds = set(np.asarray(d.efc_type)[np.asarray(d.efc_active)].tolist())
  expected = ({ConstraintType.EQUALITY} if name.startswith("equality") else
              {ConstraintType.FRICTION_DOF, ConstraintType.FRICTION_TENDON,
               ConstraintType.LIMIT_JOINT, ConstraintType.LIMIT_TENDON})
  assert expected <= kinds


@pytest.mark.parametrize("flag", ["limit", "frictionloss", "constraint"])
def test_disable_flags(flag):
  mj = mujoco.MjModel.from_xml_string(LIMITS_XML)
  mj.opt.disableflags |= getattr(mujoco.mjtDisableBit, f"mjDSBL_{flag.upper()}")
  mj.opt.tolerance = 1e-13
  md = mujoco.MjData(mj)
  md.qpos[:2] = 0.5, 0.2
  md.qvel[:] = 0.3
  mujoco.mj_forward(mj, md)
  m = flexor.load_mjcf_string(LIMITS_XML)
  m = m.replace(opt=m.opt.replace(disableflags=int(mj.opt.disableflags),
                                  tolerance=jnp.asarray(1e-13)))
  d = flexor.make_data(m).replace(qpos=snapshot(md.qpos), qvel=snapshot(md.qvel))
  # first with every row enabled, so that no active row survives the flag
  d = jax.jit(flexor.forward)(m.replace(opt=m.opt.replace(disableflags=0)), d)
  assert int(d.nefc) > md.nefc
  d = jax.jit(flexor.forward)(m, d)
  assert int(d.nefc) == int(np.sum(np.asarray(d.efc_active))) == md.nefc
  assert relerr(d.qacc, md.qacc) < SOLVE_TOL


def _limits_rollout(nstep: int, name: str = "limits", tolerance: float | None = None):
  m = flexor.load_mjcf_string(MODELS[name])
  if tolerance is not None:
    m = m.replace(opt=m.opt.replace(tolerance=jnp.asarray(tolerance)))
  d0 = flexor.make_data(m)
  d0 = d0.replace(qpos=d0.qpos.at[0].set(0.35).at[1].set(0.09))
  weights = jnp.array([1.0, -2.0, 0.5])

  def loss(qvel):
    d = d0.replace(qvel=qvel)
    d, _ = jax.lax.scan(lambda d, _: (flexor.step(m, d), None), d, None, length=nstep)
    return jnp.sum(d.qpos[:3] * weights) + 0.01 * jnp.sum(d.qvel**2)

  return loss


@pytest.mark.parametrize("name", ["limits", "limits_pgs"])
def test_rollout_gradient_matches_finite_differences(name):
  """Reverse mode through 30 steps with limits and friction loss (implicit differentiation of
  the solver), against central differences. PGS's solution takes the derivative of the primal
  optimum, so it is run to a tight tolerance: at the default (1e-8) its trajectory stays about
  1e-4 (relative) from the optimum's and so do the differences."""
  loss = _limits_rollout(30, name, 1e-14 if name.endswith("pgs") else None)
  qvel = jnp.array([0.3, 0.2, 0.1, -0.2, 0.3])
  grad = jax.jit(jax.grad(loss))(qvel)
  f = jax.jit(loss)
  eps = 1e-6
  fd = np.array([(f(qvel.at[i].add(eps)) - f(qvel.at[i].add(-eps))) / (2 * eps)
                 for i in range(len(qvel))])
  assert np.all(np.isfinite(grad))
  np.testing.assert_allclose(grad, fd, rtol=1e-5, atol=1e-7)


def test_forward_mode_matches_reverse_mode():
  """The solver's custom JVP serves jvp and, transposed, vjp: both give the same derivative."""
  m = flexor.load_mjcf_string(LIMITS_XML)
  d0 = flexor.make_data(m)
  d0 = d0.replace(qpos=d0.qpos.at[0].set(0.42).at[1].set(0.11))

  def qacc(qvel):
    return flexor.forward(m, d0.replace(qvel=qvel)).qacc

  qvel = jnp.array([0.3, 0.2, 0.1, -0.2, 0.3])
  fwd = jax.jit(jax.jacfwd(qacc))(qvel)
  rev = jax.jit(jax.jacrev(qacc))(qvel)
  np.testing.assert_allclose(fwd, rev, rtol=1e-10, atol=1e-10)
  assert np.any(np.abs(fwd) > 0)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_float32_step_computes_in_float32(name):
  """A float32 model steps in float32 throughout, even with x64 enabled: a float64 constant
  (a numpy array) anywhere in the rows or the solver would silently promote the computation."""
  m = flexor.load_mjcf_string(MODELS[name], dtype=jnp.float32)
  jaxpr = jax.make_jaxpr(flexor.step)(m, flexor.make_data(m)).jaxpr
  assert not float64_values(jaxpr)


def test_a_model_without_dofs_collides_but_makes_no_rows():
  """nv = 0: MuJoCo finds the contact of two fixed spheres but instantiates no constraint row
  (nor tendon friction or limit rows); flexor loads, steps and agrees."""
  xml = """
  <mujoco>
    <worldbody>
      <body><geom name="1" size="1"/></body>
      <body><geom name="2" size="1" pos="1.5 0 0"/></body>
      <site name="a"/><site name="b" pos="1 0 0"/>
    </worldbody>
    <contact><pair geom1="1" geom2="2"/></contact>
    <tendon>
      <spatial frictionloss="1" limited="true" range="0 0.5"><site site="a"/><site site="b"/></spatial>
    </tendon>
  </mujoco>"""
  mj, m = mujoco.MjModel.from_xml_string(xml), flexor.load_mjcf_string(xml)
  md = mujoco.MjData(mj)
  mujoco.mj_forward(mj, md)
  d = jax.jit(flexor.step)(m, flexor.make_data(m))
  assert (mj.nv, md.ncon, md.nefc) == (0, 1, 0)
  assert (int(d.ncon), int(d.nefc)) == (md.ncon, md.nefc)


PILE_XML = """
<mujoco>
  <option timestep="0.005"/>
  <worldbody>
    <geom type="plane" size="2 2 .1"/>
    <body pos="0 0 .1"><freejoint/><geom type="box" size=".1 .1 .1"/></body>
    <body pos=".05 0 .3"><freejoint/><geom type="box" size=".1 .08 .1"/></body>
    <body pos="0 .05 .5"><freejoint/><geom type="sphere" size=".1"/></body>
  </worldbody>
</mujoco>
"""


@pytest.mark.slow
def test_float32_solve_reaches_the_float64_solution():
  """In float32 the line search stops at its derivative's rounding error, not at 1e-12 of its
  start (out of float32's reach): the stop must not come early. A pile of boxes and a sphere
  after 40 steps in float64 (boxes in face contact, the sphere on a corner), solved from that
  state in float32 and float64; errors relative to the unconstrained acceleration (gravity)."""
  m64 = flexor.load_mjcf_string(PILE_XML, dtype=jnp.float64)
  m32 = flexor.load_mjcf_string(PILE_XML, dtype=jnp.float32)
  d = flexor.make_data(m64)
  d = jax.jit(lambda d: jax.lax.fori_loop(0, 40, lambda _, d: flexor.step(m64, d), d))(d)
  d64 = jax.jit(flexor.forward)(m64, d)
  d32 = flexor.make_data(m32).replace(
      **{k: jnp.asarray(getattr(d, k), jnp.float32) for k in ("qpos", "qvel", "qacc_warmstart")})
  d32 = jax.jit(flexor.forward)(m32, d32)
  assert int(d64.nefc) > 12 and int(d32.nefc) == int(d64.nefc)
  scale = np.max(np.abs(np.asarray(d64.qacc_smooth)))
  err = np.max(np.abs(np.asarray(d32.qacc, np.float64) - np.asarray(d64.qacc)))
  assert err < 1e-4 * scale   # 1.0e-5 measured


def _perturbed_pile(options: str = "", xml: str = PILE_XML, nstep: int = 40):
  """(mj, md, m, d): the pile of boxes and a sphere (or ``xml``) after ``nstep`` MuJoCo steps,
  its velocities perturbed so that the solver's first iterate is far from the optimum, in both
  engines; warm start off, ``options`` added to <option>."""
  xml = xml.replace('<option timestep="0.005"/>', f'<option timestep="0.005" {options}>'
                    '<flag warmstart="disable"/></option>')
  mj = mujoco.MjModel.from_xml_string(xml)
  md = mujoco.MjData(mj)
  mujoco.mj_step(mj, md, nstep)
  md.qvel[:] += 0.3 * np.random.default_rng(1).normal(size=mj.nv)
  m = flexor.load_mjcf_string(xml)
  d = flexor.make_data(m).replace(qpos=snapshot(md.qpos), qvel=snapshot(md.qvel))
  return mj, md, m, d


def test_one_newton_iteration_matches_mujoco_at_each_ls_tolerance():
  """One Newton iteration from qacc_smooth lands on MuJoCo's iterate, which opt.ls_tolerance
  moves: at 1e10 each line search stops after the one Newton step on the 1-D cost that MuJoCo
  always takes, at 0.01 (the default) it goes on to the line's minimum."""
  mj, md, m, d = _perturbed_pile()
  forward = jax.jit(flexor.forward)
  theirs = []
  for ls_tolerance in (1e10, 0.01):
    mj.opt.iterations, mj.opt.ls_tolerance = 1, ls_tolerance
    mujoco.mj_forward(mj, md)
    theirs.append(md.qacc.copy())
    ours = forward(m.replace(opt=m.opt.replace(iterations=1,
                                               ls_tolerance=jnp.asarray(ls_tolerance))), d)
    assert md.solver_niter[0] == 1 and int(ours.nefc) == md.nefc > 12
    assert relerr(ours.qacc, md.qacc) < 1e-10, ls_tolerance     # 1.6e-13 measured
  assert relerr(theirs[0], theirs[1]) > 1e-2                    # 0.13 measured


@pytest.mark.parametrize("cone", ["pyramidal", pytest.param("elliptic", marks=pytest.mark.slow)])
def test_cg_iterates_match_mujoco(cone):
  """MuJoCo's CG solver (``solver="CG"``: conjugate gradients preconditioned by M, Hager and
  Zhang's directions) lands on MuJoCo's iterates: after 3 iterations whose line searches stop
  after one Newton step (ls_tolerance 1e10; exact line searches would make the Hager-Zhang and
  Polak-Ribiere directions agree), and where it stops at the default line search and at each
  tolerance (11 to 20 iterations measured)."""
  mj, md, m, d = _perturbed_pile(f'solver="CG" cone="{cone}"')
  assert m.opt.solver == SolverType.CG
  mj.opt.iterations, mj.opt.ls_tolerance = 3, 1e10
  mujoco.mj_forward(mj, md)
  ours = jax.jit(flexor.forward)(
      m.replace(opt=m.opt.replace(iterations=3, ls_tolerance=jnp.asarray(1e10))), d)
  assert md.solver_niter[0] == 3 and int(ours.nefc) == md.nefc > 12
  assert relerr(ours.qacc, md.qacc) < 1e-10                     # 3.0e-14 measured
  mj.opt.ls_tolerance = 0.01
  mj.opt.iterations = m.opt.iterations
  forward = jax.jit(flexor.forward)
  for tolerance in (1e-1, 1e-3):
    mj.opt.tolerance = tolerance
    mujoco.mj_forward(mj, md)
    assert md.solver_niter[0] > 10
    ours = forward(m.replace(opt=m.opt.replace(tolerance=jnp.asarray(tolerance))), d)
    assert relerr(ours.qacc, md.qacc) < 1e-10, tolerance        # 1.6e-14 measured


@pytest.mark.parametrize("solver_type, options", [
    (SolverType.CG, 'tolerance="1e-14"'),
    (SolverType.PGS, 'tolerance="1e-15" iterations="2000"')])
def test_solution_and_tangent_are_newtons(solver_type, options):
  """CG, PGS and Newton solve the same convex problem (PGS its dual): run to a tight tolerance
  they reach the same qacc (CG to its stagnation on these stiff contacts; 4e-8 and 1.2e-8
  measured), and its tangent (in qvel), the implicit one at the optimum, is the same for all
  (0 measured)."""
  _, _, m, d = _perturbed_pile(options)
  direction = jnp.asarray(np.random.default_rng(2).normal(size=m.nv))
  results = []
  for kind in (solver_type, SolverType.NEWTON):
    mm = m.replace(opt=m.opt.replace(solver=kind))
    results.append(jax.jit(lambda v, mm=mm: jax.jvp(
        lambda v: flexor.forward(mm, d.replace(qvel=v)).qacc, (v,), (direction,)))(d.qvel))
  (qacc, qacc_dot), (newton, newton_dot) = results
  assert relerr(qacc, newton) < 1e-6
  assert relerr(qacc_dot, newton_dot) < 1e-9


# the pile beside a lone sphere (two islands), the sphere in the pile and the lone one with
# condim 6 and the upper box with 4, so that elliptic cones of every size meet
PGS_XML = PILE_XML.replace('<geom type="box" size=".1 .08 .1"/>',
                           '<geom type="box" size=".1 .08 .1" condim="4"/>').replace(
    '<geom type="sphere" size=".1"/></body>',
    '<geom type="sphere" size=".1" condim="6"/></body>\n'
    '    <body pos="1 .05 .5"><freejoint/><geom type="sphere" size=".1" condim="6"/></body>')


@pytest.mark.parametrize("cone", ["pyramidal", pytest.param("elliptic", marks=pytest.mark.slow)])
def test_pgs_iterates_match_mujoco(cone):
  """MuJoCo's PGS (``solver="PGS"``): shuffled sweeps, Nesterov extrapolation with restarts,
  ray and QCQP updates of elliptic cones, a stop per island. From a perturbed state of the pile
  and a lone sphere (two islands), cold started, flexor's forces are MuJoCo's after 4 sweeps
  and where each island stops at the default iterations (both islands restart their momentum on
  the way: 13 sweeps of the two cones end in a restart), and with islands disabled."""
  mj, md, m, d = _perturbed_pile(f'solver="PGS" cone="{cone}"', PGS_XML, 60)
  assert m.opt.solver == SolverType.PGS
  for iterations, islands in ((4, True), (100, True), (100, False)):
    mj.opt.iterations = iterations
    mj.opt.disableflags = 0 if islands else mujoco.mjtDisableBit.mjDSBL_ISLAND
    mujoco.mj_forward(mj, md)
    opt = m.opt.replace(iterations=iterations, disableflags=int(mj.opt.disableflags))
    ours = jax.jit(flexor.forward)(m.replace(opt=opt), d)
    active = np.asarray(ours.efc_active)
    assert int(ours.nefc) == md.nefc > 20 and md.nisland == (2 if islands else 0)
    if iterations == 100:
      assert np.all(md.solver_niter[:max(1, md.nisland)] < 100)  # it stops on its tolerance
    case = f"{cone}, {iterations} iterations, islands {islands}"
    assert relerr(np.asarray(ours.efc_force)[active], md.efc_force) < 1e-12, case
    assert relerr(ours.qacc, md.qacc) < 1e-12, case          # 2e-15 measured


@pytest.fixture(scope="module")
def two_piles():
  """(model, batch): the pile after 40 steps (resting, 36 active rows of 76) and the same with
  its bodies lifted apart (none active), through forward, float64."""
  m = flexor.load_mjcf_string(PILE_XML, dtype=jnp.float64)
  d = flexor.make_data(m)
  d = jax.jit(lambda d: jax.lax.fori_loop(0, 40, lambda _, d: flexor.step(m, d), d))(d)
  lifted = d.qpos.at[jnp.array([2, 9, 16])].add(jnp.array([1.0, 2.0, 3.0]))
  batch = jax.jit(jax.vmap(lambda q: flexor.forward(m, d.replace(qpos=q))))(
      jnp.stack([d.qpos, lifted]))
  assert [int(n) for n in batch.nefc] == [36, 0]
  return m, batch


@pytest.mark.parametrize("solver_type", [SolverType.NEWTON, SolverType.PGS])
def test_solver_on_active_rows_matches_all_rows(monkeypatch, two_piles, solver_type):
  """The Newton iterations and PGS's sweeps carry the active rows gathered into a fixed number
  of slots, and a world whose active rows do not fit is solved again on all rows. A batch of
  two piles, one resting (36 active rows of 76) and one with its bodies lifted apart (none), is
  solved with the rows gathered into 40 slots (both fit), 16 (the resting pile overflows under
  vmap, the lifted one does not), and on all rows (None); Newton also with tiers of 16, then
  40 slots (the resting pile fits the second): the solutions agree to rounding."""
  m, batch = two_piles
  m = m.replace(opt=m.opt.replace(solver=solver_type))

  def solve(tiers):
    if solver_type == SolverType.PGS:
      monkeypatch.setattr(solver_pgs, "_capacity", lambda rows: tiers[-1] if tiers else None)
    else:
      monkeypatch.setattr(solver, "_capacities", lambda rows: tiers)
    return jax.jit(jax.vmap(lambda d: solver.solve(m, d)))(batch)

  want = solve(())
  scale = np.max(np.abs(np.asarray(want.qacc_smooth)))
  force_scale = np.max(np.abs(np.asarray(want.efc_force)))
  tiered = [(16, 40)] if solver_type == SolverType.NEWTON else []
  for tiers in [(40,), (16,)] + tiered:
    got = solve(tiers)
    np.testing.assert_allclose(got.qacc, want.qacc, rtol=0, atol=1e-10 * scale)
    np.testing.assert_allclose(got.efc_force, want.efc_force, rtol=0, atol=1e-10 * force_scale)
    np.testing.assert_array_equal(got.efc_state, want.efc_state)


def test_solver_tiers_grow_with_the_rows():
  """The Newton iterations' row tiers: none where a quarter of the conditional rows is no
  saving, one (a quarter, on top of the always-active rows) for a model like the humanoid,
  and an eighth of that first for a scene of thousands of contact slots (MuJoCo's dice.xml:
  21,800 rows, 400 active at rest)."""
  def tiers(always: int, conditional: int) -> tuple[int, ...]:
    n = always + conditional
    rows = solver._Rows(quadratic=np.arange(n) < always, friction=np.zeros(n, bool),
                        in_cone=np.zeros(n, bool), cone=np.zeros((0, 6), int),
                        cone_mask=np.zeros((0, 6), bool))
    return solver._capacities(rows)

  assert tiers(3, 20) == ()
  assert tiers(6, 424) == (6 + 112,)
  assert tiers(0, 21800) == (688, 5456)


def test_contact_jacobians_on_active_rows_match_all_rows(monkeypatch, two_piles):
  """make_constraint builds contact Jacobians on the active rows gathered into a fixed number
  of slots, slot-fuls at a time while some world has rows left; derivatives are the all-rows
  form's. The resting and the lifted pile (36 and 0 active rows of 76) under vmap: efc_J with
  40 slots (both fit), 16 (the resting pile takes three rounds) and all rows (None) agree, and
  so does the gradient of a weighted sum of efc_J with respect to qpos."""
  m, batch = two_piles  # the contacts stay as found; the gradient moves the bodies under them
  weight = jnp.asarray(np.random.default_rng(0).standard_normal((m.njmax, m.nv)))

  def efc_j(qpos, d):
    d = kinematics.com_pos(m, kinematics.kinematics(m, d.replace(qpos=qpos)))
    return constraint.make_constraint(m, d).efc_J

  def run(capacity):
    monkeypatch.setattr(constraint, "active_capacity", lambda n: capacity)
    value = jax.jit(jax.vmap(efc_j))(batch.qpos, batch)
    grad = jax.jit(jax.vmap(jax.grad(lambda q, d: jnp.sum(weight * efc_j(q, d)))))(
        batch.qpos, batch)
    return value, grad

  want, want_grad = run(None)
  assert [int(n) for n in np.count_nonzero(np.any(np.asarray(want) != 0, -1), -1)] == [36, 0]
  for capacity in (40, 16):
    got, got_grad = run(capacity)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-14)
    np.testing.assert_allclose(got_grad, want_grad, rtol=0, atol=1e-12)
